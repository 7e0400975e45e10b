/* pc-bench spsc: pc_spsc against Concurrency Kit's ck_ring (the best-known lock-free SPSC
 * ring) and a mutex + condition-variable ring (what a straightforward implementation does),
 * with both threads pinned to different cores, in one run.
 *
 * Throughput: the producer moves `messages` 8-byte sequence numbers to the consumer, which
 * checks each; time from the start barrier until the consumer has the last. Round trip:
 * two rings, ping-pong of one message, `rounds` times; mean per round trip. Each figure is
 * the median of `reps` repetitions. The lock-free rings spin on full/empty (pause hint):
 * that is their fast path; pc_spsc's sleeping waits are for idle threads, not hand-offs. */
#include "config.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ck_ring.h>
#include <pthread.h>

#include "bench.h"
#include "pipecompress/pc_backoff.h"
#include "pipecompress/pc_config.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_spsc.h"
#include "pipecompress/pc_time.h"

typedef struct opts {
    int64_t messages;
    int64_t rounds;
    int capacity;
    int reps;
    int burst;
    char json[512];
} opts_t;

static const pc_flags_t spsc_opts[] = {
    {.name = "messages",
     .short_name = 'n',
     .type = PC_FLAGS_INT64,
     .offset = offsetof(opts_t, messages),
     .min = 1000,
     .max = 1e12,
     .metavar = "N",
     .help = "messages per throughput repetition"},
    {.name = "rounds",
     .type = PC_FLAGS_INT64,
     .offset = offsetof(opts_t, rounds),
     .min = 100,
     .max = 1e10,
     .metavar = "N",
     .help = "ping-pong round trips per latency repetition"},
    {.name = "capacity",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, capacity),
     .min = 2,
     .max = 1 << 20,
     .metavar = "SLOTS",
     .help = "ring capacity (a power of two)"},
    BENCH_OPT_REPS(opts_t),
    {.name = "burst",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, burst),
     .min = 1,
     .max = 1024,
     .metavar = "B",
     .help = "batch size of the pc_spsc burst variant"},
    {.name = "json",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, json),
     .size = 512,
     .metavar = "FILE",
     .help = "also write the results as JSON to FILE"},
};

/* ---- the mutex + condition variable baseline ---------------------------------------- */

typedef struct mq {
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    uint64_t *buf;
    size_t cap, head, count;
} mq_t;

static int mq_init(mq_t *q, size_t cap)
{
    q->buf = malloc(sizeof(uint64_t) * cap);
    if (!q->buf)
        return -1;
    q->cap = cap;
    q->head = q->count = 0;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->not_full, NULL);
    return 0;
}

static void mq_fini(mq_t *q)
{
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    free(q->buf);
}

static void mq_push(mq_t *q, uint64_t v)
{
    pthread_mutex_lock(&q->mu);
    while (q->count == q->cap)
        pthread_cond_wait(&q->not_full, &q->mu);
    q->buf[(q->head + q->count) % q->cap] = v;
    q->count++;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
}

static uint64_t mq_pop(mq_t *q)
{
    pthread_mutex_lock(&q->mu);
    while (q->count == 0)
        pthread_cond_wait(&q->not_empty, &q->mu);
    uint64_t v = q->buf[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    pthread_cond_signal(&q->not_full);
    pthread_mutex_unlock(&q->mu);
    return v;
}

/* ---- one experiment: a queue kind, throughput or ping-pong -------------------------- */

enum kind { K_SPSC, K_SPSC_BURST, K_CK, K_MUTEX, K_COUNT };
static const char *const kind_names[K_COUNT] = {"pc_spsc", "pc_spsc_burst", "ck_ring", "mutex_cv"};

typedef struct exp {
    enum kind kind;
    bool pingpong;
    uint64_t n;
    int burst;
    /* Two queues of each kind: [0] forward, [1] back (ping-pong only). */
    pc_spsc_t *spsc[2];
    ck_ring_t ck[2];
    ck_ring_buffer_t *ckbuf[2];
    mq_t mq[2];
    uint64_t bad;   /* items received out of order */
    int64_t t0, t1; /* set by side 0 (start) and the finishing side */
} exp_t;

/* Each queue kind gets its own tight loops, with the queue operations inlined: a switch
 * and a call per message would cost as much as a lock-free hand-off itself and measure the
 * harness rather than the queue. The lock-free kinds retry with one pause hint; the mutex
 * queue waits on its condition variables. */
#define SPSC_PUSH(qi, v)                                                                           \
    do {                                                                                           \
        uint64_t v_ = (v);                                                                         \
        while (!pc_spsc_try_push(e->spsc[qi], &v_))                                                \
            pc_backoff_cpu_relax();                                                                \
    } while (0)
#define SPSC_POP(qi, out)                                                                          \
    do {                                                                                           \
        while (!pc_spsc_try_pop(e->spsc[qi], &(out)))                                              \
            pc_backoff_cpu_relax();                                                                \
    } while (0)
#define CK_PUSH(qi, v)                                                                             \
    do {                                                                                           \
        while (!ck_ring_enqueue_spsc(&e->ck[qi], e->ckbuf[qi], (void *)(uintptr_t)(v)))            \
            pc_backoff_cpu_relax();                                                                \
    } while (0)
#define CK_POP(qi, out)                                                                            \
    do {                                                                                           \
        void *p_;                                                                                  \
        while (!ck_ring_dequeue_spsc(&e->ck[qi], e->ckbuf[qi], &p_))                               \
            pc_backoff_cpu_relax();                                                                \
        (out) = (uint64_t)(uintptr_t)p_;                                                           \
    } while (0)
#define MQ_PUSH(qi, v)  mq_push(&e->mq[qi], (v))
#define MQ_POP(qi, out) ((out) = mq_pop(&e->mq[qi]))

/* Throughput: side 0 pushes 0..n-1, side 1 pops and checks them. Ping-pong: side 0 sends
 * i and waits for it to come back on the second queue. */
#define DEFINE_LOOPS(name, PUSH, POP)                                                              \
    static void name##_throughput(exp_t *e, int side)                                              \
    {                                                                                              \
        uint64_t n = e->n;                                                                         \
        if (side == 0) {                                                                           \
            e->t0 = pc_time_ns();                                                                  \
            for (uint64_t i = 0; i < n; i++)                                                       \
                PUSH(0, i);                                                                        \
        } else {                                                                                   \
            uint64_t bad = 0, v;                                                                   \
            for (uint64_t i = 0; i < n; i++) {                                                     \
                POP(0, v);                                                                         \
                bad += v != i;                                                                     \
            }                                                                                      \
            e->t1 = pc_time_ns();                                                                  \
            e->bad = bad;                                                                          \
        }                                                                                          \
    }                                                                                              \
    static void name##_pingpong(exp_t *e, int side)                                                \
    {                                                                                              \
        uint64_t n = e->n, v;                                                                      \
        if (side == 0) {                                                                           \
            uint64_t bad = 0;                                                                      \
            e->t0 = pc_time_ns();                                                                  \
            for (uint64_t i = 0; i < n; i++) {                                                     \
                PUSH(0, i);                                                                        \
                POP(1, v);                                                                         \
                bad += v != i;                                                                     \
            }                                                                                      \
            e->t1 = pc_time_ns();                                                                  \
            e->bad = bad;                                                                          \
        } else {                                                                                   \
            for (uint64_t i = 0; i < n; i++) {                                                     \
                POP(0, v);                                                                         \
                PUSH(1, v);                                                                        \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_LOOPS(spsc, SPSC_PUSH, SPSC_POP)
DEFINE_LOOPS(ck, CK_PUSH, CK_POP)
DEFINE_LOOPS(mq, MQ_PUSH, MQ_POP)

/* The burst kind moves batches of up to e->burst items (throughput only). */
static void burst_throughput(exp_t *e, int side)
{
    uint64_t batch[1024];
    if (side == 0) {
        e->t0 = pc_time_ns();
        for (uint64_t i = 0; i < e->n;) {
            uint64_t m = e->n - i < (uint64_t)e->burst ? e->n - i : (uint64_t)e->burst;
            for (uint64_t j = 0; j < m; j++)
                batch[j] = i + j;
            size_t done = pc_spsc_try_push_burst(e->spsc[0], batch, (size_t)m);
            if (!done)
                pc_backoff_cpu_relax();
            i += done;
        }
    } else {
        uint64_t bad = 0;
        for (uint64_t i = 0; i < e->n;) {
            size_t got = pc_spsc_try_pop_burst(e->spsc[0], batch, (size_t)e->burst);
            if (!got)
                pc_backoff_cpu_relax();
            for (size_t j = 0; j < got; j++)
                bad += batch[j] != i + j;
            i += got;
        }
        e->t1 = pc_time_ns();
        e->bad = bad;
    }
}

static void run_side(void *arg, int side)
{
    exp_t *e = arg;
    switch (e->kind) {
    case K_SPSC:
        (e->pingpong ? spsc_pingpong : spsc_throughput)(e, side);
        break;
    case K_SPSC_BURST:
        (e->pingpong ? spsc_pingpong : burst_throughput)(e, side);
        break;
    case K_CK:
        (e->pingpong ? ck_pingpong : ck_throughput)(e, side);
        break;
    case K_MUTEX:
        (e->pingpong ? mq_pingpong : mq_throughput)(e, side);
        break;
    default:
        break;
    }
}

/* Run one repetition; returns seconds, or a negative value on failure. */
static double run_once(bench_pair_t *pair, enum kind kind, bool pingpong, uint64_t n,
                       const opts_t *o)
{
    exp_t e = {.kind = kind, .pingpong = pingpong, .n = n, .burst = o->burst};
    size_t cap = (size_t)o->capacity;
    for (int q = 0; q < 2; q++) {
        if (pc_spsc_create(cap, sizeof(uint64_t), &e.spsc[q]) != PC_OK)
            return -1;
        e.ckbuf[q] = calloc(cap, sizeof(ck_ring_buffer_t));
        if (!e.ckbuf[q] || mq_init(&e.mq[q], cap) != 0)
            return -1;
        ck_ring_init(&e.ck[q], (unsigned)cap);
    }
    int rc = bench_pair_run(pair, run_side, &e);
    for (int q = 0; q < 2; q++) {
        pc_spsc_destroy(e.spsc[q]);
        free(e.ckbuf[q]);
        mq_fini(&e.mq[q]);
    }
    if (rc != 0)
        return -1;
    if (e.bad) {
        fprintf(stderr, "pc-bench: %s delivered %" PRIu64 " items out of order\n", kind_names[kind],
                e.bad);
        return -1;
    }
    return (double)(e.t1 - e.t0) * 1e-9;
}

int bench_spsc_main(int argc, char **argv)
{
    opts_t o = {.messages = 20000000, .rounds = 200000, .capacity = 1024, .reps = 5, .burst = 32};
    pc_flags_group_t g = {"pc-bench spsc flags", spsc_opts,
                          sizeof(spsc_opts) / sizeof(spsc_opts[0]), &o, NULL};
    char err[512];
    int rc = pc_flags_parse(&g, 1, argc, argv, NULL, err, sizeof(err));
    int early =
        pc_flags_finish(rc, &g, 1, "pc-bench", "pc-bench spsc [flags]", err, 1, stdout, stderr);
    if (early >= 0)
        return early;
    if (o.capacity & (o.capacity - 1)) {
        fprintf(stderr, "pc-bench: --capacity: %d is not a power of two\n", o.capacity);
        return BENCH_EXIT_USAGE;
    }
    if (o.burst > o.capacity) {
        fprintf(stderr, "pc-bench: --burst: %d exceeds --capacity %d\n", o.burst, o.capacity);
        return BENCH_EXIT_USAGE;
    }
    FILE *json = NULL;
    if (o.json[0] && !(json = fopen(o.json, "w"))) {
        fprintf(stderr, "pc-bench: --json: cannot write '%s'\n", o.json);
        return BENCH_EXIT_FAIL;
    }
    bench_pair_t *pair;
    if (bench_pair_create(&pair) != 0)
        return BENCH_EXIT_FAIL;
    printf("pc-bench spsc: %" PRId64 " messages, %" PRId64 " round trips, capacity %d, "
           "%d reps (median)\n%s\n",
           o.messages, o.rounds, o.capacity, o.reps, bench_pair_placement(pair));
    double mps[K_COUNT], rtt[K_COUNT];
    /* samples[(k * 2 + pingpong) * reps + r]. Repetitions are the outer loop, so slow
     * drift of a shared machine hits every queue alike. */
    double *samples = malloc(sizeof(double) * (size_t)o.reps * K_COUNT * 2);
    if (!samples)
        return BENCH_EXIT_FAIL;
    for (int r = 0; r < o.reps; r++) {
        for (int k = 0; k < K_COUNT; k++) {
            for (int pp = 0; pp < 2; pp++) {
                if (pp && k == K_SPSC_BURST)
                    continue; /* one message in flight: a burst is a single push */
                uint64_t n = (uint64_t)(pp ? o.rounds : o.messages);
                double s = run_once(pair, (enum kind)k, pp, n, &o);
                if (s < 0) {
                    free(samples);
                    bench_pair_destroy(pair);
                    if (json)
                        fclose(json);
                    return BENCH_EXIT_FAIL;
                }
                samples[(k * 2 + pp) * o.reps + r] = pp ? s / (double)n * 1e9 : (double)n / s;
            }
        }
    }
    for (int k = 0; k < K_COUNT; k++) {
        mps[k] = pc_time_median(samples + (k * 2) * o.reps, (size_t)o.reps);
        rtt[k] = k == K_SPSC_BURST ? rtt[K_SPSC]
                                   : pc_time_median(samples + (k * 2 + 1) * o.reps, (size_t)o.reps);
    }
    printf("\n%-14s %16s %16s\n", "queue", "throughput Mmsg/s", "round trip ns");
    for (int k = 0; k < K_COUNT; k++)
        printf("%-14s %16.2f %16.0f\n", kind_names[k], mps[k] * 1e-6, rtt[k]);
    double vs_ck = mps[K_SPSC] / mps[K_CK], vs_mutex = mps[K_SPSC] / mps[K_MUTEX];
    double burst_vs_ck = mps[K_SPSC_BURST] / mps[K_CK];
    printf("\nratios: pc_spsc/ck_ring throughput %.2f (target >= 0.8: %s), pc_spsc/mutex_cv %.1f "
           "(target >= 10: %s), pc_spsc_burst/ck_ring %.2f, round trip ck_ring/pc_spsc %.2f\n",
           vs_ck, vs_ck >= 0.8 ? "met" : "NOT met", vs_mutex, vs_mutex >= 10 ? "met" : "NOT met",
           burst_vs_ck, rtt[K_CK] / rtt[K_SPSC]);
    if (json) {
        fprintf(json,
                "{\n  \"benchmark\": \"spsc\",\n  \"messages\": %" PRId64
                ",\n  \"rounds\": %" PRId64 ",\n  \"capacity\": %d,\n  \"reps\": %d,\n"
                "  \"burst\": %d,\n  \"placement\": \"%s\",\n  \"queues\": {\n",
                o.messages, o.rounds, o.capacity, o.reps, o.burst, bench_pair_placement(pair));
        for (int k = 0; k < K_COUNT; k++)
            fprintf(json,
                    "    \"%s\": {\"throughput_msgs_per_s\": %.0f, \"round_trip_ns\": %.1f}%s\n",
                    kind_names[k], mps[k], rtt[k], k + 1 < K_COUNT ? "," : "");
        fprintf(json,
                "  },\n  \"ratios\": {\"spsc_vs_ck_ring\": %.4f, \"spsc_vs_mutex\": %.4f, "
                "\"spsc_burst_vs_ck_ring\": %.4f, \"ck_ring_rtt_vs_spsc_rtt\": %.4f}\n}\n",
                vs_ck, vs_mutex, burst_vs_ck, rtt[K_CK] / rtt[K_SPSC]);
        if (fclose(json) != 0) {
            fprintf(stderr, "pc-bench: --json: error writing '%s'\n", o.json);
            free(samples);
            bench_pair_destroy(pair);
            return BENCH_EXIT_FAIL;
        }
    }
    free(samples);
    bench_pair_destroy(pair);
    return 0;
}
