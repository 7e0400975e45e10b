/* pc-bench compress --threads N: the compressor pool on ResNet-50's real tensor sizes.
 *
 * The 161 parameter tensors of ResNet-50 (25,557,032 elements; their sizes in forward order
 * from traces/resnet50-a100-amp.json, copied below so that the bench needs no file) are
 * planned into chunks as a worker plans them (pc_plan_create with the runtime's defaults:
 * --chunk-bytes 4 MiB, small tensors grouped with their neighbours in one slab, chunks
 * under --compress-min-bytes 64 KiB sent dense) and dealt to N threads as a worker's pool
 * deals them (pc_plan_deal). Each thread owns its chunks' codec states and a codec of its
 * own and compresses its chunks (pc_codec_compress: fold and compress, as the compressor
 * thread does), all threads released together by a barrier; a pass's time is the wall
 * time from that release to the last thread's end. One thread and N threads alternate within each
 * repetition, on the same data, so that the speed-up (1-thread median over N-thread median)
 * compares like with like on a machine shared with other work. The threads are not pinned (the
 * runtime pins them; here the OS spreads them): on a quiet machine with N free cores the ideal is
 * N. */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_plan.h"
#include "pipecompress/pc_time.h"

/* ResNet-50's parameter tensors, elements each, forward order (torchvision's resnet50:
 * convolutions, batch-norm weights and biases, the classifier). */
static const size_t resnet50[] = {
    9408,    64,   64,   4096,    64,   64,   36864,   64,   64,   16384,   256,  256,
    16384,   256,  256,  16384,   64,   64,   36864,   64,   64,   16384,   256,  256,
    16384,   64,   64,   36864,   64,   64,   16384,   256,  256,  32768,   128,  128,
    147456,  128,  128,  65536,   512,  512,  131072,  512,  512,  65536,   128,  128,
    147456,  128,  128,  65536,   512,  512,  65536,   128,  128,  147456,  128,  128,
    65536,   512,  512,  65536,   128,  128,  147456,  128,  128,  65536,   512,  512,
    131072,  256,  256,  589824,  256,  256,  262144,  1024, 1024, 524288,  1024, 1024,
    262144,  256,  256,  589824,  256,  256,  262144,  1024, 1024, 262144,  256,  256,
    589824,  256,  256,  262144,  1024, 1024, 262144,  256,  256,  589824,  256,  256,
    262144,  1024, 1024, 262144,  256,  256,  589824,  256,  256,  262144,  1024, 1024,
    262144,  256,  256,  589824,  256,  256,  262144,  1024, 1024, 524288,  512,  512,
    2359296, 512,  512,  1048576, 2048, 2048, 2097152, 2048, 2048, 1048576, 512,  512,
    2359296, 512,  512,  1048576, 2048, 2048, 1048576, 512,  512,  2359296, 512,  512,
    1048576, 2048, 2048, 2048000, 1000,
};
#define NTENSORS ((int)(sizeof(resnet50) / sizeof(resnet50[0])))
/* The runtime's defaults (pc_config_defaults): --chunk-bytes 4 MiB, --compress-min-bytes
 * 64 KiB. */
#define CHUNK_ELEMS     ((size_t)1 << 20)
#define DENSE_BELOW     65536
#define POOL_MAX_THREAD 64

typedef struct pool pool_t;

/* One thread's share: its chunks [lo, hi), its codecs, its time of the last pass (its own
 * part, for a reader in a debugger: the pass is timed from the barriers). */
typedef struct share {
    pool_t *p;
    int lo, hi;
    pc_codec_t *codec, *dense;
    int rc;
    int64_t ns;
} share_t;

struct pool {
    const pc_plan_t *plan;
    const float *grad; /* the gradient slab, every tensor end to end */
    pc_codec_state_t **st;
    uint8_t **buf;
    size_t *cap;
    uint64_t iter;
    int nthreads;
    share_t share[POOL_MAX_THREAD];
    pthread_barrier_t start, end;
    int quit;
};

/* Thread k's pass: compress its chunks. */
static void pass(share_t *s)
{
    pool_t *p = s->p;
    int64_t t0 = pc_time_ns();
    for (int i = s->lo; i < s->hi && s->rc == PC_OK; i++) {
        const pc_plan_chunk_t *c = &p->plan->chunks[i];
        size_t len, at = 0;
        for (int t = 0; t < c->first_tensor; t++)
            at += resnet50[t];
        pc_codec_t *codec = c->n * sizeof(float) < DENSE_BELOW ? s->dense : s->codec;
        s->rc = pc_codec_compress(codec, p->st[i], p->grad + at + c->offset, p->iter, p->buf[i],
                                  p->cap[i], &len);
    }
    s->ns = pc_time_ns() - t0;
}

static void *worker(void *arg)
{
    share_t *s = arg;
    for (;;) {
        pthread_barrier_wait(&s->p->start);
        if (s->p->quit)
            return NULL;
        pass(s);
        pthread_barrier_wait(&s->p->end);
    }
}

/* Deal the plan's chunks to n threads by their work as a worker does (pc_plan_deal with
 * pc_codec_work, 2 n for the chunks sent dense) into the shares' ranges. */
static int deal(pool_t *p, int n, int *lane)
{
    const pc_plan_t *plan = p->plan;
    uint64_t *work = malloc((size_t)plan->nchunks * sizeof(*work) + 1);
    if (!work)
        return PC_ENOMEM;
    for (int i = 0; i < plan->nchunks; i++) {
        size_t cn = plan->chunks[i].n;
        work[i] = cn * sizeof(float) < DENSE_BELOW
                      ? 2 * (uint64_t)cn
                      : pc_codec_work(pc_codec_spec(p->share[0].codec), cn);
    }
    int rc = pc_plan_deal(plan, n, work, lane);
    free(work);
    if (rc != PC_OK)
        return rc;
    int at = 0;
    for (int k = 0; k < n; k++) {
        p->share[k].lo = at;
        while (at < p->plan->nchunks && lane[at] == k)
            at++;
        p->share[k].hi = at;
    }
    p->nthreads = n;
    return PC_OK;
}

/* One timed pass with the current deal: share 0 is this thread's; the others wait at the
 * barrier. Wall time from the release of every thread to the last one's end, ms. */
static double timed(pool_t *p)
{
    for (int k = 0; k < p->nthreads; k++)
        p->share[k].rc = PC_OK;
    p->iter++;
    int64_t t0 = pc_time_ns();
    pthread_barrier_wait(&p->start);
    pass(&p->share[0]);
    pthread_barrier_wait(&p->end);
    return (double)(pc_time_ns() - t0) * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One thread's pass over every chunk (share 0), the others' ranges empty. */
static int deal_one(pool_t *p, int threads, int *lane)
{
    if (deal(p, 1, lane) != PC_OK)
        return PC_EINVAL;
    for (int k = 1; k < threads; k++)
        p->share[k].lo = p->share[k].hi = 0;
    p->nthreads = threads; /* every thread meets both barriers (an empty range at once) */
    return PC_OK;
}

/* Each thread's codecs (spec, and none for the chunks under 64 KiB) and each chunk's state
 * and message buffer. false: out of memory or a codec refused (pool_teardown frees what
 * was made). */
static bool pool_setup(pool_t *p, int threads, const pc_codec_spec_t *spec,
                       const pc_codec_spec_t *none)
{
    const pc_plan_t *plan = p->plan;
    p->st = calloc((size_t)plan->nchunks, sizeof(*p->st));
    p->buf = calloc((size_t)plan->nchunks, sizeof(*p->buf));
    p->cap = calloc((size_t)plan->nchunks, sizeof(*p->cap));
    bool ok = p->st && p->buf && p->cap;
    for (int k = 0; k < threads; k++)
        p->share[k] = (share_t){.p = p};
    for (int k = 0; k < threads && ok; k++)
        ok = pc_codec_create(spec, &p->share[k].codec) == PC_OK &&
             pc_codec_create(none, &p->share[k].dense) == PC_OK;
    for (int i = 0; i < plan->nchunks && ok; i++) {
        pc_codec_t *c =
            plan->chunks[i].n * sizeof(float) < DENSE_BELOW ? p->share[0].dense : p->share[0].codec;
        p->cap[i] = pc_codec_max_bytes(c, plan->chunks[i].n);
        ok = (p->buf[i] = malloc(p->cap[i])) &&
             pc_codec_state_create(c, plan->chunks[i].id, plan->chunks[i].n, &p->st[i]) == PC_OK;
    }
    return ok;
}

/* Free what pool_setup made. */
static void pool_teardown(pool_t *p, int threads)
{
    for (int i = 0; i < p->plan->nchunks; i++) {
        if (p->st)
            pc_codec_state_destroy(p->st[i]);
        if (p->buf)
            free(p->buf[i]);
    }
    for (int k = 0; k < threads; k++) {
        pc_codec_destroy(p->share[k].codec);
        pc_codec_destroy(p->share[k].dense);
    }
    free(p->st);
    free(p->buf);
    free(p->cap);
    p->st = NULL;
    p->buf = NULL;
    p->cap = NULL;
}

/* Start threads - 1 threads, two untimed passes (the states' and buffers' first touch:
 * page faults, seconds at this size, are no compression; then share 0's codec scratch
 * grown to every chunk), then reps pairs of timed passes, 1 thread then N, into s1 and
 * sn; stop and join the threads. false: a pass failed. */
static bool pool_run(pool_t *p, int threads, int reps, int *lane, double *s1, double *sn)
{
    bool barriers = false;
    if (pthread_barrier_init(&p->start, NULL, (unsigned)threads) == 0) {
        if (pthread_barrier_init(&p->end, NULL, (unsigned)threads) == 0)
            barriers = true;
        else
            pthread_barrier_destroy(&p->start);
    }
    if (!barriers)
        return false;
    pthread_t tid[POOL_MAX_THREAD];
    p->quit = 0;
    for (int k = 1; k < threads; k++)
        if (pthread_create(&tid[k], NULL, worker, &p->share[k]) != 0) {
            /* Those started wait at a barrier that can no longer open: a program may stop
             * here, and says why. */
            fprintf(stderr, "pc-bench: --threads %d: cannot start thread %d\n", threads, k);
            exit(BENCH_EXIT_FAIL);
        }
    bool ok = deal(p, threads, lane) == PC_OK;
    if (ok)
        timed(p);
    if (ok && (ok = deal_one(p, threads, lane) == PC_OK))
        timed(p);
    for (int rep = 0; rep < reps && ok; rep++) {
        ok = deal_one(p, threads, lane) == PC_OK;
        s1[rep] = timed(p);
        ok = ok && deal(p, threads, lane) == PC_OK;
        sn[rep] = timed(p);
        for (int k = 0; k < threads; k++)
            ok = ok && p->share[k].rc == PC_OK;
    }
    p->quit = 1;
    pthread_barrier_wait(&p->start);
    for (int k = 1; k < threads; k++)
        pthread_join(tid[k], NULL);
    pthread_barrier_destroy(&p->start);
    pthread_barrier_destroy(&p->end);
    return ok;
}

int bench_pool_cpu(int threads, int reps, const char *const *specs, int nspecs)
{
    pc_plan_tensor_t tens[NTENSORS];
    size_t total = 0;
    for (int t = 0; t < NTENSORS; t++)
        total += resnet50[t];
    float *slab = malloc(sizeof(float) * total);
    pc_plan_t *plan = NULL;
    int *lane = NULL, rc = BENCH_EXIT_FAIL;
    double *s1 = malloc(sizeof(double) * (size_t)reps), *sn = malloc(sizeof(double) * (size_t)reps);
    pool_t *p = calloc(1, sizeof(*p));
    if (!slab || !s1 || !sn || !p) {
        fprintf(stderr, "pc-bench: out of memory for the pool's %zu elements\n", total);
        goto out;
    }
    /* Heavy-tailed values, a fixed pattern: the codecs' work does not depend on the seed. */
    uint64_t r = 88172645463325252ull;
    for (size_t i = 0; i < total; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        float u = (float)((r >> 40) + 1) / 16777217.0f;
        slab[i] = (r & 1 ? 1.0f : -1.0f) * (1.0f / u - 1.0f) * 1e-3f;
    }
    size_t at = 0;
    for (int t = 0; t < NTENSORS; t++) {
        tens[t] = (pc_plan_tensor_t){.n = resnet50[t], .param = slab + at, .grad = slab + at};
        at += resnet50[t];
    }
    if (pc_plan_create(tens, NTENSORS, CHUNK_ELEMS, 1, &plan) != PC_OK ||
        !(lane = malloc(sizeof(int) * (size_t)plan->nchunks))) {
        fprintf(stderr, "pc-bench: cannot plan ResNet-50's tensors\n");
        goto out;
    }
    p->plan = plan;
    p->grad = slab;
    printf("pc-bench compress --threads %d: ResNet-50's %d tensors (%zu elements) in %d chunks "
           "(--chunk-bytes 4M, dense under 64K),\ndealt to the threads as a worker's pool deals "
           "them (pc_plan_deal); median of %d; 1 and %d threads side by side\n\n",
           threads, NTENSORS, total, plan->nchunks, reps, threads);
    printf("%-24s %8s %12s %12s %9s\n", "codec", "threads", "1 thread ms", "N threads ms",
           "speed-up");
    for (int si = 0; si < nspecs; si++) {
        pc_codec_spec_t spec, none;
        char why[256];
        if (pc_codec_spec_parse(specs[si], &spec, why, sizeof(why)) != PC_OK ||
            pc_codec_spec_parse("none", &none, why, sizeof(why)) != PC_OK) {
            fprintf(stderr, "pc-bench: %s: %s\n", specs[si], why);
            goto out;
        }
        bool ok = pool_setup(p, threads, &spec, &none) && pool_run(p, threads, reps, lane, s1, sn);
        pool_teardown(p, threads);
        if (!ok) {
            fprintf(stderr, "pc-bench: --threads %d, %s: out of memory or a codec failed\n",
                    threads, specs[si]);
            goto out;
        }
        qsort(s1, (size_t)reps, sizeof(double), cmp_double);
        qsort(sn, (size_t)reps, sizeof(double), cmp_double);
        double m1 = s1[reps / 2], mn = sn[reps / 2];
        printf("%-24s %8d %12.2f %12.2f %8.2fx\n", specs[si], threads, m1, mn, m1 / mn);
    }
    rc = 0;
out:
    free(slab);
    free(s1);
    free(sn);
    free(lane);
    free(p);
    pc_plan_destroy(plan);
    return rc;
}
