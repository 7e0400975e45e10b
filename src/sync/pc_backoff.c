/* pc_backoff: spin, then yield, then sleep (see pc_backoff.h for the reasoning). */
#include "config.h"

#include <sched.h>

#include "pipecompress/pc_backoff.h"
#include "pipecompress/pc_time.h"

void pc_backoff_init_capped(pc_backoff_t *b, int64_t max_sleep_ns)
{
    b->spins = 0;
    b->yields = 0;
    b->sleep_ns = PC_BACKOFF_MIN_SLEEP_NS;
    b->max_sleep_ns =
        max_sleep_ns < PC_BACKOFF_MIN_SLEEP_NS ? PC_BACKOFF_MIN_SLEEP_NS : max_sleep_ns;
    b->sleeps = 0;
}

void pc_backoff_init(pc_backoff_t *b)
{
    pc_backoff_init_capped(b, PC_BACKOFF_MAX_SLEEP_NS);
}

void pc_backoff_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

void pc_backoff_pause(pc_backoff_t *b)
{
    if (b->spins < PC_BACKOFF_SPINS) {
        b->spins++;
        pc_backoff_cpu_relax();
        return;
    }
    if (b->yields < PC_BACKOFF_YIELDS) {
        b->yields++;
        sched_yield();
        return;
    }
    pc_time_sleep_ns(b->sleep_ns);
    b->sleeps++;
    b->sleep_ns *= 2;
    if (b->sleep_ns > b->max_sleep_ns)
        b->sleep_ns = b->max_sleep_ns;
}
