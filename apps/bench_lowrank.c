/* pc-bench compress, the powersgd section: one worker's step on a rows x cols matrix, beside
 * the two products it cannot avoid, measured in the same run on the same data:
 *   gemms    P = M Q and Q' = M^T P^ alone (pc_lowrank_project, pc_lowrank_backproject:
 *            OpenBLAS's sgemm on one thread), nothing else;
 *   step     what the compressor thread does for the matrix in an iteration: the fold
 *            (M = residual + gradient, and P_w = M Q in the same pass:
 *            pc_lowrank_fold_project, not BLAS), round 1 (P_w into its message), round 2
 *            (Q_w = M^T P^ into its message), and the end (residual = M - P^ Q^T; the
 *            optimizer's step on the same rows is not counted here);
 *   server   the orthonormalisation of P (modified Gram-Schmidt in double).
 * Per matrix and rank: the medians over the repetitions, the step over the GEMMs, the
 * step's time per element, the bytes of its two messages and how many times fewer than the
 * dense 4 n; after the table, whether the step at 4096 x 4096 and rank 2 is within 1.5x. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "bench.h"
#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_lowrank.h"
#include "pipecompress/pc_philox.h"
#include "pipecompress/pc_time.h"

/* One matrix's buffers: the gradient, the codec and its state, the messages, scratch. */
typedef struct lr_bench {
    size_t rows, cols, n;
    int rank, reps;
    float *g, *pq, *q2;
    double *work, *samples; /* samples: 5 x reps */
    uint8_t *msg;
    size_t cap;
    pc_codec_t *codec;
    pc_codec_state_t *st;
} lr_bench_t;

static void lr_free(lr_bench_t *b)
{
    pc_codec_state_destroy(b->st);
    pc_codec_destroy(b->codec);
    free(b->g);
    free(b->pq);
    free(b->q2);
    free(b->work);
    free(b->samples);
    free(b->msg);
}

static int lr_setup(lr_bench_t *b)
{
    char spec_text[64], err[256];
    pc_codec_spec_t spec;
    snprintf(spec_text, sizeof(spec_text), "powersgd:rank=%d,min-rank-gain=1", b->rank);
    if (pc_codec_spec_parse(spec_text, &spec, err, sizeof(err)) != PC_OK ||
        pc_codec_create(&spec, &b->codec) != PC_OK ||
        pc_codec_state_create_matrix(b->codec, 0, b->rows, b->n, &b->st) != PC_OK) {
        fprintf(stderr, "pc-bench: powersgd rank %d does not fit a %zu x %zu matrix\n", b->rank,
                b->rows, b->cols);
        return BENCH_EXIT_USAGE;
    }
    size_t big = b->rows > b->cols ? b->rows : b->cols, r = (size_t)b->rank;
    b->cap = pc_codec_max_bytes(b->codec, b->n);
    b->g = malloc(sizeof(float) * b->n);
    b->pq = malloc(sizeof(float) * big * r);
    b->q2 = malloc(sizeof(float) * big * r);
    b->work = malloc(sizeof(double) * pc_lowrank_work_doubles(b->rows, b->rank));
    b->samples = malloc(sizeof(double) * 5 * (size_t)b->reps);
    b->msg = malloc(b->cap);
    if (!b->g || !b->pq || !b->q2 || !b->work || !b->samples || !b->msg) {
        fprintf(stderr, "pc-bench: out of memory for a %zu x %zu matrix\n", b->rows, b->cols);
        return BENCH_EXIT_FAIL;
    }
    pc_philox_t ph;
    pc_philox_init(&ph, 2019, 0, 0);
    for (size_t i = 0; i < b->n; i++)
        b->g[i] = 2.0f * pc_philox_uniform(pc_philox_next(&ph)) - 1.0f;
    pc_lowrank_init(b->q2, b->cols, b->rank, 1, 0);
    return 0;
}

/* One repetition r: the GEMMs alone, then the step, then the server's orthonormalisation. */
static int lr_rep(lr_bench_t *b, int r, size_t *bytes)
{
    double *s = b->samples;
    int reps = b->reps;
    int64_t t0 = pc_time_ns();
    int rc = pc_lowrank_project(b->g, b->rows, b->cols, b->q2, b->rank, b->pq);
    if (rc == PC_OK)
        rc = pc_lowrank_backproject(b->g, b->rows, b->cols, b->pq, b->rank, b->q2);
    int64_t t1 = pc_time_ns();
    size_t l1 = 0, l2 = 0;
    if (rc == PC_OK)
        rc = pc_codec_fold(b->codec, b->st, b->g);
    if (rc == PC_OK)
        rc = pc_codec_lowrank_p(b->codec, b->st, (uint64_t)r, b->msg, b->cap, &l1);
    int64_t t2 = pc_time_ns();
    /* The server's P^: here the worker's own P (orthonormalised outside the step's time). */
    float *phat = pc_codec_state_lowrank_phat(b->st);
    if (rc == PC_OK)
        rc = pc_lowrank_orthonormalise(phat, b->rows, b->rank, b->work);
    int64_t t3 = pc_time_ns();
    if (rc == PC_OK)
        rc = pc_codec_lowrank_q(b->codec, b->st, (uint64_t)r, b->msg, b->cap, &l2);
    /* The server's Q: the worker's Q_w as it is (one worker), taken from the message. */
    if (rc == PC_OK) {
        pc_wire_get_f32s(b->pq, b->msg + PC_WIRE_HEADER_BYTES, b->cols * (size_t)b->rank);
        rc = pc_codec_lowrank_finish(b->codec, b->st, b->pq, NULL, NULL);
    }
    int64_t t4 = pc_time_ns();
    if (rc != PC_OK) {
        fprintf(stderr, "pc-bench: powersgd on %zu x %zu failed: %s\n", b->rows, b->cols,
                pc_strerror(rc));
        return BENCH_EXIT_FAIL;
    }
    s[r] = (double)(t1 - t0) * 1e-6;                      /* the GEMMs */
    s[reps + r] = (double)((t2 - t1) + (t4 - t3)) * 1e-6; /* the step */
    s[2 * reps + r] = (double)(t3 - t2) * 1e-6;           /* the server's orthonormalisation */
    *bytes = l1 + l2;
    return 0;
}

/* Parse "RxC,..." into rows[], cols[] (at most max): 0 and a message on a bad list or a
 * matrix whose rank-4 factors would not be smaller than it. */
static int parse_matrices(const char *text, size_t *rows, size_t *cols, int max)
{
    int n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        unsigned long long r = strtoull(p, &end, 10), c = 0;
        if (end != p && *end == 'x')
            c = strtoull(end + 1, &end, 10);
        if (r >= 1 && c >= 1 && (*end == ',' || !*end) && n < max &&
            (r > PC_CODEC_MAX_N || c > PC_CODEC_MAX_N || r * c > PC_CODEC_MAX_N)) {
            fprintf(stderr, "pc-bench: --matrices: %llux%llu has more than %u elements\n", r, c,
                    (unsigned)PC_CODEC_MAX_N);
            return 0;
        }
        if (r < 1 || c < 1 || (*end && *end != ',') || n == max) {
            fprintf(stderr, "pc-bench: --matrices: '%s' is not a list of at most %d ROWSxCOLS\n",
                    text, max);
            return 0;
        }
        if (r < 4 || c < 4 || r * c < (r + c) * 4) {
            fprintf(stderr,
                    "pc-bench: --matrices: %llux%llu is too small for rank 4's factors "
                    "to be smaller than it\n",
                    r, c);
            return 0;
        }
        rows[n] = (size_t)r;
        cols[n++] = (size_t)c;
        p = *end ? end + 1 : end;
    }
    if (!n)
        fprintf(stderr, "pc-bench: --matrices: the list is empty\n");
    return n;
}

/* One matrix at one rank: a repetition to warm the buffers (not counted), then reps; a
 * row of the table. */
static int lr_matrix(size_t rows, size_t cols, int rank, int reps, double *ratio)
{
    lr_bench_t b = {.rows = rows, .cols = cols, .n = rows * cols, .rank = rank, .reps = reps};
    int rc = lr_setup(&b);
    size_t bytes = 0;
    if (rc == 0)
        rc = lr_rep(&b, 0, &bytes); /* page faults, caches: not counted (overwritten) */
    for (int r = 0; r < reps && rc == 0; r++)
        rc = lr_rep(&b, r, &bytes);
    if (rc != 0) {
        lr_free(&b);
        return rc;
    }
    double gem = pc_time_median(b.samples, (size_t)reps),
           step = pc_time_median(b.samples + reps, (size_t)reps),
           orth = pc_time_median(b.samples + 2 * reps, (size_t)reps);
    char name[48];
    snprintf(name, sizeof(name), "%zux%zu", rows, cols);
    printf("%-12s %4d %10.2f %10.2f %9.2f %9.3f %10.3f %10zu %8.0f\n", name, rank, gem, step,
           step / gem, step * 1e6 / (double)b.n, orth, bytes, 4.0 * (double)b.n / (double)bytes);
    *ratio = step / gem;
    lr_free(&b);
    return 0;
}

int bench_lowrank_check(const char *matrices)
{
    size_t rows[16], cols[16];
    return parse_matrices(matrices, rows, cols, 16) ? 0 : BENCH_EXIT_USAGE;
}

/* Every matrix of `matrices` ("RxC,...") at ranks 1, 2 and 4: a table on stdout. */
int bench_lowrank_cpu(const char *matrices, int reps)
{
    size_t rows[16], cols[16];
    int nm = parse_matrices(matrices, rows, cols, 16);
    if (!nm)
        return BENCH_EXIT_USAGE;
    /* One core for all of it, as on a worker's compressor thread (pc-train's setting):
     * OpenBLAS would otherwise give the GEMMs alone every core. */
    openblas_set_num_threads(1);
    printf("powersgd: one worker's step on a rows x cols matrix (fold, P = M Q, Q = M^T P^, "
           "residual), %d reps (median, after one not counted), one core\n",
           reps);
    printf("%-12s %4s %10s %10s %9s %9s %10s %10s %8s\n", "matrix", "rank", "gemms ms", "step ms",
           "step/gem", "ns/elem", "orth ms", "bytes", "x less");
    static const int ranks[] = {1, 2, 4};
    double target = 0.0; /* step / GEMMs at 4096 x 4096, rank 2, when the list has it */
    for (int m = 0; m < nm; m++)
        for (int k = 0; k < 3; k++) {
            double ratio;
            int rc = lr_matrix(rows[m], cols[m], ranks[k], reps, &ratio);
            if (rc != 0)
                return rc;
            if (rows[m] == 4096 && cols[m] == 4096 && ranks[k] == 2)
                target = ratio;
        }
    if (target > 0.0)
        printf("target: rank 2 on 4096x4096 within 1.5 x the two GEMMs: %.2f x, %s\n", target,
               target <= 1.5 ? "met" : "NOT met");
    return 0;
}
