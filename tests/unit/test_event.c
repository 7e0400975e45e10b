/* test_event: the eventcount (pc_event). Single-thread contracts (a notify with nobody
 * announced takes no lock; a notify between prepare and wait is not lost; timeouts; the
 * re-test after announcing, pc_event_park, which every waiter of the runtime goes
 * through: a condition that came true during the last spin or yield, with nobody to
 * notify, ends the wait at once without parking), a parked thread woken by a notify, and
 * two stress runs with two threads pinned to different cores: a ping-pong whose waiters
 * park without spinning (pc_event_park straight away, so the window between prepare and
 * wait is hit as often as possible), and an SPSC ring whose both sides block on events
 * through pc_event_await (consumer: empty ring; producer: full ring), every item checked.
 * A lost wake-up leaves a thread parked until its limit: every park has a limit of
 * GUARD_NS, five orders of magnitude beyond a wake-up (microseconds), and any park that
 * its limit ended (pc_event_timeouts) fails the test, even when the condition had come
 * true meanwhile. No speed is asserted. Built also with ThreadSanitizer (make
 * check-concurrency).
 *
 * PC_STRESS_ROUNDS overrides the ping-pong's round count (the ring moves 4x as many). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <pthread.h>
#include <sched.h>

#include <cmocka.h>

#include "pipecompress/pc_config.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_event.h"
#include "pipecompress/pc_spsc.h"
#include "pipecompress/pc_time.h"
#include "pipecompress/pc_topo.h"

#define DEFAULT_ROUNDS 20000
/* Every park's limit in the stress runs: far beyond any wake-up (microseconds; a
 * descheduled peer on a loaded machine, milliseconds), reached only when one was lost. */
#define GUARD_NS 10000000000ll
/* Small ring: full and empty all the time, so both sides park. */
#define RING_CAPACITY 4

static void test_notify_without_waiter_takes_no_lock(void **state)
{
    (void)state;
    pc_event_t *ev;
    assert_int_equal(pc_event_create(&ev), PC_OK);
    for (int i = 0; i < 1000; i++)
        pc_event_notify(ev);
    uint64_t parks = 1, wakes = 1;
    pc_event_stats(ev, &parks, &wakes);
    assert_int_equal(parks, 0);
    assert_int_equal(wakes, 0);
    /* A cancelled announcement leaves no waiter behind. */
    (void)pc_event_prepare(ev);
    pc_event_cancel(ev);
    pc_event_notify(ev);
    pc_event_stats(ev, &parks, &wakes);
    assert_int_equal(wakes, 0);
    pc_event_destroy(ev);
    pc_event_destroy(NULL);
}

static void test_notify_between_prepare_and_wait_is_kept(void **state)
{
    (void)state;
    pc_event_t *ev;
    assert_int_equal(pc_event_create(&ev), PC_OK);
    uint32_t key = pc_event_prepare(ev);
    pc_event_notify(ev); /* finds the announced waiter: slow path */
    /* No limit: if the notify were lost this would never return. */
    assert_int_equal(pc_event_wait(ev, key, -1), PC_OK);
    uint64_t parks = 1, wakes = 0;
    pc_event_stats(ev, &parks, &wakes);
    assert_int_equal(parks, 0); /* it did not sleep */
    assert_int_equal(wakes, 1);
    /* The waiter is withdrawn: the next notify is lock-free again. */
    pc_event_notify(ev);
    pc_event_stats(ev, NULL, &wakes);
    assert_int_equal(wakes, 1);
    pc_event_destroy(ev);
}

static void test_timeouts(void **state)
{
    (void)state;
    pc_event_t *ev;
    assert_int_equal(pc_event_create(&ev), PC_OK);
    uint32_t key = pc_event_prepare(ev);
    assert_int_equal(pc_event_wait(ev, key, 0), PC_ETIMEDOUT); /* 0: does not sleep */
    uint64_t parks = 1;
    pc_event_stats(ev, &parks, NULL);
    assert_int_equal(parks, 0);
    key = pc_event_prepare(ev);
    assert_int_equal(pc_event_wait(ev, key, 1000000), PC_ETIMEDOUT);
    pc_event_stats(ev, &parks, NULL);
    assert_int_equal(parks, 1);
    /* A key from before a notify: stale, returns at once, even with a zero limit. */
    key = pc_event_prepare(ev);
    pc_event_notify(ev);
    assert_int_equal(pc_event_wait(ev, key, 0), PC_OK);
    pc_event_destroy(ev);
}

static bool false_try(void *arg)
{
    (*(int *)arg)++;
    return false;
}

static void test_await_timeout(void **state)
{
    (void)state;
    pc_event_t *ev;
    assert_int_equal(pc_event_create(&ev), PC_OK);
    int calls = 0;
    int64_t waited = -1;
    assert_int_equal(pc_event_await(ev, false_try, &calls, 2000000, &waited), PC_ETIMEDOUT);
    assert_true(waited >= 2000000);
    assert_true(calls > PC_EVENT_SPINS); /* the spins, then at least one re-test */
    pc_event_destroy(ev);
}

/* ---- the re-test after announcing (pc_event_park) ------------------------------------ */

/* A condition that turns true at its `at`-th test (counting from 1). */
typedef struct late {
    int calls, at;
} late_t;

static bool late_try(void *arg)
{
    late_t *l = arg;
    return ++l->calls >= l->at;
}

static void test_park_retests_after_announcing(void **state)
{
    (void)state;
    pc_event_t *ev;
    assert_int_equal(pc_event_create(&ev), PC_OK);
    /* True at the re-test: cancelled, no sleep, the waiter withdrawn (a later notify
     * finds nobody and takes no lock). The limit is long so that a park would show. */
    late_t l = {0, 1};
    assert_true(pc_event_park(ev, late_try, &l, 5000000000ll));
    assert_int_equal(l.calls, 1);
    pc_event_notify(ev);
    uint64_t parks = 1, wakes = 1;
    pc_event_stats(ev, &parks, &wakes);
    assert_int_equal(parks, 0);
    assert_int_equal(wakes, 0);
    /* False: it parks (here for 1 ms, nobody notifies) and says so. */
    l = (late_t){0, 2};
    assert_false(pc_event_park(ev, late_try, &l, 1000000));
    assert_int_equal(l.calls, 1);
    pc_event_stats(ev, &parks, NULL);
    assert_int_equal(parks, 1);
    assert_int_equal(pc_event_timeouts(ev), 1);
    pc_event_destroy(ev);
}

static void test_await_sees_a_condition_true_before_the_park(void **state)
{
    (void)state;
    pc_event_t *ev;
    assert_int_equal(pc_event_create(&ev), PC_OK);
    /* Tests: 1 first, then one after each spin and yield; the condition comes true right
     * after the last of those, so the re-test after announcing is the first to see it.
     * Nobody notifies: without that re-test the wait parks until its limit (5 s). */
    late_t l = {0, 1 + PC_EVENT_SPINS + PC_EVENT_YIELDS + 1};
    assert_int_equal(pc_event_await(ev, late_try, &l, 5000000000ll, NULL), PC_OK);
    assert_int_equal(l.calls, l.at);
    uint64_t parks = 1;
    pc_event_stats(ev, &parks, NULL);
    assert_int_equal(parks, 0);
    assert_int_equal(pc_event_timeouts(ev), 0);
    pc_event_destroy(ev);
}

/* ---- a parked thread, woken -------------------------------------------------------- */

typedef struct flag_wait {
    pc_event_t *ev;
    _Atomic int flag;
    int rc;
} flag_wait_t;

static bool flag_set(void *arg)
{
    flag_wait_t *f = arg;
    /* Acquire pairs with the main thread's release store before its notify. */
    return atomic_load_explicit(&f->flag, memory_order_acquire) != 0;
}

static void *flag_waiter(void *arg)
{
    flag_wait_t *f = arg;
    f->rc = pc_event_await(f->ev, flag_set, f, GUARD_NS, NULL);
    return NULL;
}

static void test_parked_thread_is_woken(void **state)
{
    (void)state;
    flag_wait_t f = {.rc = -1};
    atomic_init(&f.flag, 0);
    assert_int_equal(pc_event_create(&f.ev), PC_OK);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, flag_waiter, &f), 0);
    /* Wait until it sleeps (no time limit: it parks after its spins whatever the speed). */
    uint64_t parks = 0;
    while (parks == 0) {
        sched_yield();
        pc_event_stats(f.ev, &parks, NULL);
    }
    /* Release pairs with flag_set's acquire load. */
    atomic_store_explicit(&f.flag, 1, memory_order_release);
    pc_event_notify(f.ev);
    pthread_join(t, NULL);
    assert_int_equal(f.rc, PC_OK);
    uint64_t wakes = 0;
    pc_event_stats(f.ev, NULL, &wakes);
    assert_true(wakes >= 1);
    pc_event_destroy(f.ev);
}

/* ---- stress: two pinned threads ----------------------------------------------------- */

typedef struct stress {
    pc_topo_t *topo;
    pc_topo_plan_t *plan;
    pthread_barrier_t start;
    int bind_rc[2];
    uint64_t rounds;
    /* ping-pong: whose turn it is (0 or 1), one event per side */
    _Atomic uint64_t turn;
    pc_event_t *ev[2];
    /* ring: the consumer awaits items on ev[0], the producer space on ev[1] */
    pc_spsc_t *q;
    int rc[2];
    uint64_t first_bad;
} stress_t;

/* Ping-pong: side s waits for turn % 2 == s, then passes it on. It waits without
 * spinning (pc_event_park at once: prepare, re-test, wait), and every 7th pass the
 * notifier yields between its store and its notify, so the waiter's announcement races
 * the notify both ways. A park that its limit ends is counted by the event (checked in
 * run_stress). */
typedef struct turn_is {
    stress_t *s;
    uint64_t want;
} turn_is_t;

static bool turn_test(void *arg)
{
    turn_is_t *t = arg;
    /* Acquire pairs with the other side's release store of turn. */
    return atomic_load_explicit(&t->s->turn, memory_order_acquire) == t->want;
}

static void pingpong(stress_t *s, int side)
{
    for (uint64_t i = 0; i < s->rounds; i++) {
        turn_is_t t = {s, 2 * i + (uint64_t)side};
        while (!turn_test(&t) && !pc_event_park(s->ev[side], turn_test, &t, GUARD_NS))
            ;
        /* Release pairs with the other side's acquire loads of turn. */
        atomic_store_explicit(&s->turn, t.want + 1, memory_order_release);
        if (i % 7 == 3)
            sched_yield();
        pc_event_notify(s->ev[1 - side]);
    }
}

typedef struct ring_try {
    stress_t *s;
    uint64_t item;
} ring_try_t;

static bool try_push(void *arg)
{
    ring_try_t *t = arg;
    return pc_spsc_try_push(t->s->q, &t->item);
}

static bool try_pop(void *arg)
{
    ring_try_t *t = arg;
    return pc_spsc_try_pop(t->s->q, &t->item);
}

/* Ring: side 0 pushes 0..n-1 (awaiting space on ev[1], notifying ev[0]); side 1 pops and
 * checks them (awaiting items on ev[0], notifying ev[1]). */
static void ring(stress_t *s, int side)
{
    uint64_t n = 4 * s->rounds;
    ring_try_t t = {.s = s};
    for (uint64_t i = 0; i < n; i++) {
        if (side == 0)
            t.item = i;
        int rc = pc_event_await(s->ev[side == 0 ? 1 : 0], side == 0 ? try_push : try_pop, &t,
                                GUARD_NS, NULL);
        if (rc != PC_OK) {
            s->rc[side] = rc;
            return;
        }
        if (side == 1 && t.item != i && s->first_bad == UINT64_MAX)
            s->first_bad = i;
        pc_event_notify(s->ev[side == 0 ? 0 : 1]);
    }
}

typedef struct side_arg {
    stress_t *s;
    int side;
    bool ring;
} side_arg_t;

static void *side_main(void *arg)
{
    side_arg_t *a = arg;
    char err[256];
    a->s->bind_rc[a->side] =
        pc_topo_plan_bind(a->s->topo, a->s->plan, 0, a->side, err, sizeof(err));
    pthread_barrier_wait(&a->s->start);
    if (a->ring)
        ring(a->s, a->side);
    else
        pingpong(a->s, a->side);
    return NULL;
}

static uint64_t rounds(void)
{
    const char *env = getenv("PC_STRESS_ROUNDS");
    if (!env)
        return DEFAULT_ROUNDS;
    uint64_t n = strtoull(env, NULL, 10);
    return n < 1000 ? 1000 : n;
}

static void run_stress(bool use_ring)
{
    stress_t s = {.rounds = rounds(), .first_bad = UINT64_MAX};
    atomic_init(&s.turn, 0);
    char err[256] = "";
    assert_int_equal(pc_event_create(&s.ev[0]), PC_OK);
    assert_int_equal(pc_event_create(&s.ev[1]), PC_OK);
    assert_int_equal(pc_spsc_create(RING_CAPACITY, sizeof(uint64_t), &s.q), PC_OK);
    assert_int_equal(pc_topo_create(NULL, &s.topo, err, sizeof(err)), PC_OK);
    pc_bind_t bind = {.mode = PC_BIND_AUTO};
    pc_topo_rank_t me;
    const char *names[] = {"side0", "side1"};
    assert_int_equal(pc_topo_self(s.topo, 0, 2, names, &me), PC_OK);
    assert_int_equal(pc_topo_plan_create(s.topo, &bind, &me, 1, &s.plan, err, sizeof(err)), PC_OK);
    assert_int_equal(pthread_barrier_init(&s.start, NULL, 2), 0);
    side_arg_t a[2] = {{&s, 0, use_ring}, {&s, 1, use_ring}};
    pthread_t t[2];
    int64_t t0 = pc_time_ns();
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, side_main, &a[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    double secs = (double)(pc_time_ns() - t0) * 1e-9;
    uint64_t parks[2], wakes[2];
    for (int i = 0; i < 2; i++)
        pc_event_stats(s.ev[i], &parks[i], &wakes[i]);
    fprintf(stderr, "%s: %llu %s in %.2f s; parks %llu + %llu, slow-path notifies %llu + %llu\n",
            use_ring ? "ring" : "ping-pong",
            (unsigned long long)(use_ring ? 4 * s.rounds : s.rounds), use_ring ? "items" : "rounds",
            secs, (unsigned long long)parks[0], (unsigned long long)parks[1],
            (unsigned long long)wakes[0], (unsigned long long)wakes[1]);
    assert_int_equal(s.bind_rc[0], PC_OK);
    assert_int_equal(s.bind_rc[1], PC_OK);
    assert_int_equal(s.rc[0], PC_OK);
    assert_int_equal(s.rc[1], PC_OK);
    if (use_ring) {
        assert_int_equal(s.first_bad, UINT64_MAX);
        assert_int_equal(pc_spsc_size_approx(s.q), 0);
    } else {
        assert_int_equal(atomic_load(&s.turn), 2 * s.rounds);
    }
    /* No park ran into its limit: each would have been a lost wake-up (the waits then still
     * succeed, since the condition came true meanwhile: only this count shows it). */
    uint64_t lost[2] = {pc_event_timeouts(s.ev[0]), pc_event_timeouts(s.ev[1])};
    if (lost[0] || lost[1])
        fail_msg("%llu + %llu parks ran into their %.0f s limit: lost wake-ups",
                 (unsigned long long)lost[0], (unsigned long long)lost[1], GUARD_NS * 1e-9);
    /* Every slow-path notify had an announced waiter, and every park was ended by one:
     * at most as many parks as slow notifies. */
    assert_true(parks[0] <= wakes[0]);
    assert_true(parks[1] <= wakes[1]);
    pthread_barrier_destroy(&s.start);
    pc_topo_plan_destroy(s.plan);
    pc_topo_destroy(s.topo);
    pc_spsc_destroy(s.q);
    pc_event_destroy(s.ev[0]);
    pc_event_destroy(s.ev[1]);
}

static void test_stress_pingpong(void **state)
{
    (void)state;
    run_stress(false);
}

static void test_stress_ring(void **state)
{
    (void)state;
    run_stress(true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_notify_without_waiter_takes_no_lock),
        cmocka_unit_test(test_notify_between_prepare_and_wait_is_kept),
        cmocka_unit_test(test_timeouts),
        cmocka_unit_test(test_await_timeout),
        cmocka_unit_test(test_park_retests_after_announcing),
        cmocka_unit_test(test_await_sees_a_condition_true_before_the_park),
        cmocka_unit_test(test_parked_thread_is_woken),
        cmocka_unit_test(test_stress_pingpong),
        cmocka_unit_test(test_stress_ring),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
