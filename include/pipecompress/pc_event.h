/* pc_event: an eventcount, the wake-up primitive behind the lock-free rings.
 *
 * What it is for. A thread that waits for another (the idle compressor thread for the next
 * descriptor, the backprop thread for a release, an update or queue space) should answer
 * within microseconds when the work arrives and burn no core while it does not. Polling
 * with naps (pc_backoff) trades one against the other: a 1 ms nap cap costs up to 1 ms of
 * latency, and on a VM even a "1 us" nap takes 65-80 us. An eventcount adds a real
 * wake-up to any condition the caller can test without a lock (an SPSC ring's stamp, a
 * chunk's version): the waiter parks on a condition variable, the notifier wakes it, and
 * neither takes a lock while nobody is parked.
 *
 * Protocol. The condition itself lives elsewhere; the event only carries wake-ups.
 * - Waiter: test the condition; spin a little (PC_EVENT_SPINS, the peer is often
 *   mid-operation) and yield a little (PC_EVENT_YIELDS); then key = pc_event_prepare(ev) (announces
 * a waiter), test the condition again, and either pc_event_cancel(ev) (it came true) or
 *   pc_event_wait(ev, key, timeout) (parks unless a notify came after prepare). After
 *   wait returns, test the condition again: a wake-up says "look again", never "it is
 *   true" (another waiter may have taken it, the wait may have timed out, or a
 *   notification meant for an earlier condition arrived). pc_event_await does all of it
 *   for a condition given as a function.
 * - Notifier: make the condition true (a release store: push into the ring, store the
 *   version), then pc_event_notify(ev). With no waiter announced that is one atomic
 *   read-modify-write on the event's word: no lock, no system call. Only when a waiter is
 *   announced does it take the mutex, bump the epoch, release the mutex and broadcast
 *   (after unlocking, so the woken thread does not block again on the mutex).
 *
 * Representation. One 64-bit word: the number of announced waiters in the low 32 bits,
 * the epoch (bumped by every notify that found a waiter) in the high 32 bits. prepare's
 * key is the epoch it saw; wait parks only while the epoch still equals the key, checked
 * under the mutex. The mutex and condition variable (CLOCK_MONOTONIC, for timeouts) sit on
 * their own cache lines, touched only by parking waiters and waking notifiers.
 *
 * Memory ordering: why no wake-up is lost. Both sides do a read-modify-write on the same
 * word: prepare adds 1 (acq_rel), notify adds 0 (acq_rel). RMWs on one atomic are totally
 * ordered (its modification order), so one of the two comes first:
 * - notify's RMW first: prepare's RMW reads the value notify's wrote (or a later one in
 *   its release sequence), and acquire meets release: notify synchronizes-with prepare.
 *   The notifier's store of the condition, sequenced before its RMW, happens before the
 *   waiter's re-test, sequenced after prepare: the re-test sees the condition true, and
 *   the waiter cancels instead of parking.
 * - prepare's RMW first: notify's RMW reads a waiter count of at least 1, so it takes the
 *   slow path: under the mutex, epoch += 1 and broadcast. The waiter tests epoch == key
 *   under the same mutex before it sleeps, and pthread_cond_(timed)wait releases the
 *   mutex atomically with going to sleep: either the waiter sees the new epoch and does
 *   not sleep, or it is asleep when the broadcast comes and wakes.
 * This is the classic store-buffer (Dekker) pattern; the usual form puts a seq_cst fence
 * on each side between "store mine" and "load theirs". The RMW pair gives the same
 * guarantee, and costs the same on x86-64 (one locked instruction instead of MFENCE), but
 * ThreadSanitizer models it exactly, while it does not model atomic_thread_fence (GCC
 * even warns about the fence under -fsanitize=thread, an error with -Werror). The epoch
 * is 32 bits: a waiter would have to stay between prepare and its check under the mutex
 * while 2^32 notifies found waiters for the comparison to be fooled.
 *
 * Waiters may be many and notifiers many (the counts are RMWs); PipeCompress uses one
 * waiter per event. */
#ifndef PC_EVENT_H
#define PC_EVENT_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Pause-hint tests of the condition before a waiter announces itself and parks: about
 * 2-10 us (a pause is 40-140 cycles depending on the core), a few cache-line round trips
 * between cores plus a queue operation. Longer spins buy nothing a park does not (a
 * parked waiter is woken in one condition-variable signal) and on a shared core they
 * steal time from the thread that would make the condition true. */
#define PC_EVENT_SPINS 200
/* sched_yield tests after the spins, before parking. On a core shared with other threads
 * (a 2-core node running 5 threads) a parked thread that is woken waits for the scheduler
 * to preempt whoever runs there, and a halted vCPU takes ~25 us to wake; a yielding one
 * stays runnable while handing its core over. Measured in pc-train (mlp, 2 workers + 1
 * server on 2 cores, 5 threads): parking straight after the spins cut throughput from
 * 58-66k (naps) to 46-47k samples/s, consistently; with these yields first, runs spread
 * over 43-70k on the shared machine (the naps' 53-65k). On an idle core a yield returns
 * at once, so this is some 30-50 us more of polling after work, never while idle. */
#define PC_EVENT_YIELDS 32

/* Cache line of the event's word and of its mutex/condition variable. */
#define PC_EVENT_CACHELINE 64

typedef struct pc_event {
    /* Waiters (low 32 bits) and epoch (high 32 bits): RMWs by both sides, see above. */
    alignas(PC_EVENT_CACHELINE) _Atomic uint64_t state;
    /* Parking: touched only when a waiter parks or a notify finds one. */
    alignas(PC_EVENT_CACHELINE) pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t parks;    /* pc_event_wait calls that slept (under mu) */
    uint64_t wakes;    /* notifies that took the slow path (under mu) */
    uint64_t timeouts; /* of the parks, those its timeout ended, no notify (under mu) */
} pc_event_t;

/* Create an event. On success *out owns it; free it with pc_event_destroy. Returns
 * PC_ENOMEM or PC_ETHREAD (the mutex or condition variable could not be set up); on error
 * *out is untouched. Call before the threads that use it start (their creation publishes
 * it). */
int pc_event_create(pc_event_t **out);

/* Free an event (NULL is fine). No thread may be waiting on it or use it afterwards: the
 * caller joins or otherwise synchronises with every user first. */
void pc_event_destroy(pc_event_t *ev);

/* Waiter: announce a waiter and return the key for pc_event_wait. The caller must then
 * test its condition and call exactly one of pc_event_cancel (true) or pc_event_wait
 * (false). Any thread; lock-free. */
static inline uint32_t pc_event_prepare(pc_event_t *ev)
{
    /* acq_rel pairs with notify's acq_rel RMW on the same word (the header's argument):
     * if notify came first, its condition store is visible to our re-test. */
    uint64_t s = atomic_fetch_add_explicit(&ev->state, 1, memory_order_acq_rel);
    return (uint32_t)(s >> 32);
}

/* Waiter: withdraw the announcement of pc_event_prepare (the condition came true). Any
 * thread that prepared; lock-free. */
static inline void pc_event_cancel(pc_event_t *ev)
{
    /* Relaxed: the count only decides whether a notifier takes the slow path; a notify
     * that still sees this waiter wakes nobody, harmlessly. */
    atomic_fetch_sub_explicit(&ev->state, 1, memory_order_relaxed);
}

/* Waiter, after pc_event_prepare returned key and the re-test found the condition false:
 * park until a notify that came after the prepare (at once if one already did), or until
 * timeout_ns nanoseconds pass (negative: no limit; 0: do not sleep). Withdraws the
 * announcement before returning. Returns PC_OK (notified, possibly spuriously: re-test)
 * or PC_ETIMEDOUT. Any thread that prepared. */
int pc_event_wait(pc_event_t *ev, uint32_t key, int64_t timeout_ns);

/* Notifier's slow half: bump the epoch and wake every parked waiter (mutex + broadcast).
 * Call pc_event_notify instead: it calls this only when a waiter is announced. Any
 * thread. */
void pc_event_wake(pc_event_t *ev);

/* Notifier: after making a waiter's condition true, wake whoever waits for it. With no
 * waiter announced: one atomic RMW, no lock, no system call. Any thread. */
static inline void pc_event_notify(pc_event_t *ev)
{
    /* acq_rel pairs with prepare's acq_rel RMW (the header's argument): if prepare came
     * first we read its count; if we came first our condition store is visible to the
     * waiter's re-test. */
    uint64_t s = atomic_fetch_add_explicit(&ev->state, 0, memory_order_acq_rel);
    if ((uint32_t)s != 0)
        pc_event_wake(ev);
}

/* A condition for pc_event_await: true when the awaited thing happened (it may act on it,
 * e.g. pop the item it found: it is called until it returns true, then never again). */
typedef bool (*pc_event_try_fn)(void *arg);

/* Waiter, once spinning and yielding are over: the protocol's last step, the one every
 * waiter of PipeCompress goes through (pc_event_await, the worker's backprop and
 * compressor threads). Announces a waiter (pc_event_prepare), re-tests with
 * test_fn(arg), and cancels when it holds: returns true without sleeping. Otherwise parks
 * (pc_event_wait, timeout_ns as there) and returns false: the caller tests again. The
 * re-test between the announcement and the park is what makes a notify that came just
 * before the announcement visible; without it such a wake-up is lost until the timeout.
 * test_fn may act (as pc_event_try_fn) and is called exactly once. Any thread. */
bool pc_event_park(pc_event_t *ev, pc_event_try_fn test_fn, void *arg, int64_t timeout_ns);

/* Waiter: until try_fn(arg) returns true or timeout_ns nanoseconds pass (negative: no
 * limit): test, spin PC_EVENT_SPINS times, yield PC_EVENT_YIELDS times, then prepare /
 * re-test / wait, as the header describes. Returns PC_OK or PC_ETIMEDOUT (try_fn never returned
 * true). If waited_ns is not NULL it receives the time spent (0 when the first test succeeded: that
 * costs no clock read). Any thread. */
int pc_event_await(pc_event_t *ev, pc_event_try_fn try_fn, void *arg, int64_t timeout_ns,
                   int64_t *waited_ns);

/* Counters since create: *parks, how many pc_event_wait calls slept; *wakes, how many
 * notifies found a waiter and took the slow path. Either may be NULL. For tests and
 * metrics; any thread (takes the mutex). */
void pc_event_stats(pc_event_t *ev, uint64_t *parks, uint64_t *wakes);

/* Of the parks, how many ended by their timeout with no notify since create: where every
 * condition is notified and the timeouts are far beyond a wake-up, each is a lost
 * wake-up (the stress tests count them). Any thread (takes the mutex). */
uint64_t pc_event_timeouts(pc_event_t *ev);

#ifdef __cplusplus
}
#endif
#endif /* PC_EVENT_H */
