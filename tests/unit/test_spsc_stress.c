/* test_spsc_stress: two threads pinned to different cores move at least 10^8 sequence
 * numbers through one ring (mixing single and burst operations on both sides), and a
 * stream of multi-word descriptors through another; the consumer checks every item.
 * Built also with ThreadSanitizer (make check-concurrency in the tsan build), where the
 * C11 acquire/release protocol must show no data race.
 *
 * PC_STRESS_MESSAGES overrides the count (at least 10^6) for quick local runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include <cmocka.h>

#include "pipecompress/pc_backoff.h"
#include "pipecompress/pc_config.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_spsc.h"
#include "pipecompress/pc_time.h"
#include "pipecompress/pc_topo.h"

#define DEFAULT_MESSAGES 100000000ull
/* Small ring so that it is full and empty often: both slow paths get exercised. */
#define RING_CAPACITY 256
#define BURST         16

typedef struct desc {
    uint64_t seq;
    uint64_t tensor;
    uint64_t offset;
    uint64_t check; /* mix of the other words: a torn copy fails it */
} desc_t;

static uint64_t mix(uint64_t seq)
{
    uint64_t x = seq * 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 29);
}

typedef struct stress {
    pc_spsc_t *q;
    uint64_t count;
    size_t slot; /* 8: bare sequence numbers; sizeof(desc_t): descriptors */
    pthread_barrier_t start;
    pc_topo_t *topo;
    pc_topo_plan_t *plan;
    int bind_rc[2];
    uint64_t received;
    uint64_t first_bad; /* UINT64_MAX when every item matched */
} stress_t;

static void fill(const stress_t *s, uint64_t seq, void *out)
{
    if (s->slot == sizeof(uint64_t)) {
        memcpy(out, &seq, sizeof(seq));
    } else {
        desc_t d = {.seq = seq, .tensor = seq % 97, .offset = seq * 4096};
        d.check = mix(seq) ^ d.tensor ^ d.offset;
        memcpy(out, &d, sizeof(d));
    }
}

static bool good(const stress_t *s, uint64_t seq, const void *item)
{
    if (s->slot == sizeof(uint64_t)) {
        uint64_t v;
        memcpy(&v, item, sizeof(v));
        return v == seq;
    }
    desc_t d;
    memcpy(&d, item, sizeof(d));
    return d.seq == seq && d.tensor == seq % 97 && d.offset == seq * 4096 &&
           d.check == (mix(seq) ^ d.tensor ^ d.offset);
}

static void *producer(void *arg)
{
    stress_t *s = arg;
    char err[256];
    s->bind_rc[0] = pc_topo_plan_bind(s->topo, s->plan, 0, 0, err, sizeof(err));
    pthread_barrier_wait(&s->start);
    unsigned char batch[BURST * sizeof(desc_t)];
    uint64_t seq = 0;
    pc_backoff_t b;
    pc_backoff_init(&b);
    while (seq < s->count) {
        /* Alternate: one burst of up to BURST items, then one single push. */
        uint64_t n = s->count - seq < BURST ? s->count - seq : BURST;
        for (uint64_t i = 0; i < n; i++)
            fill(s, seq + i, batch + i * s->slot);
        size_t done = pc_spsc_try_push_burst(s->q, batch, (size_t)n);
        seq += done;
        if (seq < s->count) {
            unsigned char one[sizeof(desc_t)];
            fill(s, seq, one);
            if (pc_spsc_try_push(s->q, one))
                seq++;
            else if (done == 0)
                pc_backoff_pause(&b);
        }
        if (done)
            pc_backoff_init(&b);
    }
    return NULL;
}

static void *consumer(void *arg)
{
    stress_t *s = arg;
    char err[256];
    s->bind_rc[1] = pc_topo_plan_bind(s->topo, s->plan, 0, 1, err, sizeof(err));
    pthread_barrier_wait(&s->start);
    unsigned char batch[BURST * sizeof(desc_t)];
    uint64_t seq = 0;
    pc_backoff_t b;
    pc_backoff_init(&b);
    s->first_bad = UINT64_MAX;
    while (seq < s->count) {
        /* Alternate bursts of varying size and single pops. */
        size_t max = 1 + (size_t)(seq % BURST);
        size_t got = pc_spsc_try_pop_burst(s->q, batch, max);
        for (size_t i = 0; i < got; i++, seq++)
            if (s->first_bad == UINT64_MAX && !good(s, seq, batch + i * s->slot))
                s->first_bad = seq;
        unsigned char one[sizeof(desc_t)];
        if (pc_spsc_try_pop(s->q, one)) {
            if (s->first_bad == UINT64_MAX && !good(s, seq, one))
                s->first_bad = seq;
            seq++;
            got++;
        }
        if (got)
            pc_backoff_init(&b);
        else
            pc_backoff_pause(&b);
    }
    s->received = seq;
    return NULL;
}

static void run_stress(uint64_t count, size_t slot)
{
    stress_t s = {.count = count, .slot = slot};
    char err[256] = "";
    assert_int_equal(pc_spsc_create(RING_CAPACITY, slot, &s.q), PC_OK);
    assert_int_equal(pc_topo_create(NULL, &s.topo, err, sizeof(err)), PC_OK);
    pc_bind_t bind = {.mode = PC_BIND_AUTO};
    pc_topo_rank_t me;
    const char *names[] = {"producer", "consumer"};
    assert_int_equal(pc_topo_self(s.topo, 0, 2, names, &me), PC_OK);
    assert_int_equal(pc_topo_plan_create(s.topo, &bind, &me, 1, &s.plan, err, sizeof(err)), PC_OK);
    char desc[512];
    pc_topo_plan_describe(s.plan, desc, sizeof(desc));
    fprintf(stderr, "stress: %llu items of %zu bytes; %s\n", (unsigned long long)count, slot, desc);
    assert_int_equal(pthread_barrier_init(&s.start, NULL, 2), 0);
    pthread_t p, c;
    int64_t t0 = pc_time_ns();
    assert_int_equal(pthread_create(&c, NULL, consumer, &s), 0);
    assert_int_equal(pthread_create(&p, NULL, producer, &s), 0);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    double secs = (double)(pc_time_ns() - t0) * 1e-9;
    fprintf(stderr, "stress: %.2f s, %.1f M items/s\n", secs, (double)count / secs * 1e-6);
    assert_int_equal(s.bind_rc[0], PC_OK);
    assert_int_equal(s.bind_rc[1], PC_OK);
    if (pc_topo_ncores(s.topo) >= 2)
        assert_int_not_equal(pc_topo_plan_core(s.plan, 0, 0), pc_topo_plan_core(s.plan, 0, 1));
    assert_int_equal(s.received, count);
    assert_int_equal(s.first_bad, UINT64_MAX);
    assert_int_equal(pc_spsc_size_approx(s.q), 0);
    pthread_barrier_destroy(&s.start);
    pc_topo_plan_destroy(s.plan);
    pc_topo_destroy(s.topo);
    pc_spsc_destroy(s.q);
}

static uint64_t messages(void)
{
    const char *env = getenv("PC_STRESS_MESSAGES");
    if (!env)
        return DEFAULT_MESSAGES;
    uint64_t n = strtoull(env, NULL, 10);
    return n < 1000000 ? 1000000 : n;
}

static void test_sequence_numbers(void **state)
{
    (void)state;
    run_stress(messages(), sizeof(uint64_t));
}

static void test_descriptors(void **state)
{
    (void)state;
    run_stress(messages() / 10, sizeof(desc_t));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sequence_numbers),
        cmocka_unit_test(test_descriptors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
