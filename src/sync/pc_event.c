/* pc_event: creation, parking, waking and the await helper of the eventcount (the
 * lock-free halves are inline in pc_event.h, with the ordering argument). */
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipecompress/pc_backoff.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_event.h"
#include "pipecompress/pc_time.h"

int pc_event_create(pc_event_t **out)
{
    if (!out)
        return PC_EINVAL;
    pc_event_t *ev = aligned_alloc(PC_EVENT_CACHELINE, sizeof(*ev));
    if (!ev)
        return PC_ENOMEM;
    memset(ev, 0, sizeof(*ev));
    atomic_init(&ev->state, 0);
    pthread_condattr_t ca;
    if (pthread_mutex_init(&ev->mu, NULL) != 0) {
        free(ev);
        return PC_ETHREAD;
    }
    /* Timeouts on CLOCK_MONOTONIC: a wall-clock step must not stretch or cut a wait. */
    if (pthread_condattr_init(&ca) != 0)
        goto err_mu;
    if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&ev->cv, &ca) != 0) {
        pthread_condattr_destroy(&ca);
        goto err_mu;
    }
    pthread_condattr_destroy(&ca);
    *out = ev;
    return PC_OK;
err_mu:
    pthread_mutex_destroy(&ev->mu);
    free(ev);
    return PC_ETHREAD;
}

void pc_event_destroy(pc_event_t *ev)
{
    if (!ev)
        return;
    pthread_cond_destroy(&ev->cv);
    pthread_mutex_destroy(&ev->mu);
    free(ev);
}

/* The epoch in a state word. */
static uint32_t epoch_of(uint64_t s)
{
    return (uint32_t)(s >> 32);
}

int pc_event_wait(pc_event_t *ev, uint32_t key, int64_t timeout_ns)
{
    struct timespec deadline = {0, 0};
    if (timeout_ns > 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        int64_t ns = deadline.tv_nsec + timeout_ns % 1000000000;
        deadline.tv_sec += (time_t)(timeout_ns / 1000000000 + ns / 1000000000);
        deadline.tv_nsec = (long)(ns % 1000000000);
    }
    int rc = PC_OK;
    pthread_mutex_lock(&ev->mu);
    /* The epoch changes only under mu (pc_event_wake), so this test and the sleep are one
     * step for a notifier: it cannot bump the epoch between them. Relaxed: mu orders it. */
    if (epoch_of(atomic_load_explicit(&ev->state, memory_order_relaxed)) == key) {
        if (timeout_ns == 0)
            rc = PC_ETIMEDOUT;
        else
            ev->parks++;
    }
    while (rc == PC_OK && epoch_of(atomic_load_explicit(&ev->state, memory_order_relaxed)) == key) {
        int e = timeout_ns < 0 ? pthread_cond_wait(&ev->cv, &ev->mu)
                               : pthread_cond_timedwait(&ev->cv, &ev->mu, &deadline);
        if (e == ETIMEDOUT &&
            epoch_of(atomic_load_explicit(&ev->state, memory_order_relaxed)) == key) {
            rc = PC_ETIMEDOUT;
            ev->timeouts++;
        }
    }
    /* Withdraw the announcement (see pc_event_cancel for why relaxed is enough). */
    atomic_fetch_sub_explicit(&ev->state, 1, memory_order_relaxed);
    pthread_mutex_unlock(&ev->mu);
    return rc;
}

void pc_event_wake(pc_event_t *ev)
{
    pthread_mutex_lock(&ev->mu);
    /* Relaxed: mu orders it against the waiters' epoch tests; the condition's visibility
     * was settled by the RMW pair in pc_event_notify/pc_event_prepare. */
    atomic_fetch_add_explicit(&ev->state, (uint64_t)1 << 32, memory_order_relaxed);
    ev->wakes++;
    pthread_mutex_unlock(&ev->mu);
    /* Broadcast after unlocking: a waiter woken while we still held mu would only block
     * again on mu (a second sleep and wake-up on its way out). Still no lost wake-up: a
     * waiter that tested the old epoch under mu was registered on cv before it released
     * mu, so before we could take it. */
    pthread_cond_broadcast(&ev->cv);
}

bool pc_event_park(pc_event_t *ev, pc_event_try_fn test_fn, void *arg, int64_t timeout_ns)
{
    uint32_t key = pc_event_prepare(ev);
    /* The re-test after announcing (the header's argument): a condition made true before
     * our announcement is seen here; one made true after it notifies, and the wait below
     * returns at once or is woken. */
    if (test_fn(arg)) {
        pc_event_cancel(ev);
        return true;
    }
    pc_event_wait(ev, key, timeout_ns);
    return false;
}

int pc_event_await(pc_event_t *ev, pc_event_try_fn try_fn, void *arg, int64_t timeout_ns,
                   int64_t *waited_ns)
{
    if (try_fn(arg)) {
        if (waited_ns)
            *waited_ns = 0;
        return PC_OK;
    }
    int64_t start = pc_time_ns();
    int rc = PC_OK;
    bool done = false;
    for (int i = 0; i < PC_EVENT_SPINS + PC_EVENT_YIELDS && !done; i++) {
        if (i < PC_EVENT_SPINS)
            pc_backoff_cpu_relax();
        else
            sched_yield();
        done = try_fn(arg);
    }
    while (!done) {
        int64_t left = -1;
        if (timeout_ns >= 0) {
            left = timeout_ns - (pc_time_ns() - start);
            if (left <= 0) {
                rc = PC_ETIMEDOUT;
                break;
            }
        }
        if (pc_event_park(ev, try_fn, arg, left))
            break;
        done = try_fn(arg);
    }
    if (waited_ns)
        *waited_ns = pc_time_ns() - start;
    return rc;
}

uint64_t pc_event_timeouts(pc_event_t *ev)
{
    pthread_mutex_lock(&ev->mu);
    uint64_t n = ev->timeouts;
    pthread_mutex_unlock(&ev->mu);
    return n;
}

void pc_event_stats(pc_event_t *ev, uint64_t *parks, uint64_t *wakes)
{
    pthread_mutex_lock(&ev->mu);
    if (parks)
        *parks = ev->parks;
    if (wakes)
        *wakes = ev->wakes;
    pthread_mutex_unlock(&ev->mu);
}
