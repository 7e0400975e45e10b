/* pc_backoff: how a thread waits for another without burning a core.
 *
 * A waiter first spins with the CPU's pause hint (the peer is usually mid-operation on
 * another core and answers within a microsecond), then yields its core to whoever is
 * runnable (two threads sharing one core: the peer needs it to make progress), then
 * sleeps with exponentially growing naps capped at PC_BACKOFF_MAX_SLEEP_NS (the peer is
 * really idle; an idle PipeCompress thread must cost next to nothing). Each waiter owns
 * its pc_backoff_t on its stack: there is no shared state. */
#ifndef PC_BACKOFF_H
#define PC_BACKOFF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Pause-hint spins before the first yield: ~256 x ~40 cycles = ~3 us, about a few
 * cache-line round trips between cores plus a queue operation. */
#define PC_BACKOFF_SPINS 256
/* Yields before the first sleep: enough for a co-scheduled peer on the same core to run
 * one time slice's worth of short operations. */
#define PC_BACKOFF_YIELDS 32
/* First nap and the cap: 1 us doubling up to 1 ms. The cap bounds the extra latency an
 * idle thread adds when work arrives (1 ms is well below one training iteration). */
#define PC_BACKOFF_MIN_SLEEP_NS 1000
#define PC_BACKOFF_MAX_SLEEP_NS 1000000

typedef struct pc_backoff {
    uint32_t spins;       /* pauses done in the spin phase */
    uint32_t yields;      /* sched_yield calls done */
    int64_t sleep_ns;     /* next nap length once sleeping */
    int64_t max_sleep_ns; /* longest nap */
    uint64_t sleeps;      /* naps taken since init, for metrics */
} pc_backoff_t;

/* Reset a waiter to the spinning phase. Call when the awaited condition came true. */
void pc_backoff_init(pc_backoff_t *b);

/* The same with a shorter longest nap, for a waiter whose wake-up latency matters (a
 * thread polling for a message the next computation waits on). */
void pc_backoff_init_capped(pc_backoff_t *b, int64_t max_sleep_ns);

/* Wait one step: a pause, a yield or a nap, depending on how long this waiter has
 * waited. Only the owning thread may call it. */
void pc_backoff_pause(pc_backoff_t *b);

/* The CPU's spin-wait hint (x86 PAUSE, Arm YIELD); a no-op elsewhere. */
void pc_backoff_cpu_relax(void);

#ifdef __cplusplus
}
#endif
#endif /* PC_BACKOFF_H */
