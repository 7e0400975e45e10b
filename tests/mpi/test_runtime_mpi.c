/* test_runtime_mpi: MPI scenarios of the runtime, run by tests/mpi/test_runtime.sh.
 *   test_runtime_mpi exact [runtime flags]
 *       Workers hand over known gradients (tensor "b" in two ranges, through
 *       pc_worker_grad_ready_range); after every iteration each checks its parameters bit
 *       for bit against the mean computed here in the servers' order.
 *   test_runtime_mpi lowrank [runtime flags]        (--compress powersgd:...)
 *       As exact, with tensor "b" declared a 20 x 15 matrix (pc_worker_set_rows): every worker
 *       also runs all W workers' powersgd steps here, in one process, through the codec's
 *       rounds (fold, P_w, the sum in worker order, orthonormalisation, Q_w, Q = sum / W,
 *       P^ Q^T, the residual) and checks its parameters bit for bit against them after
 *       every iteration; the other tensors as exact. The optimizer is the run's (momentum,
 *       weight decay, schedule): the step pc_optim_sgd makes on the mean gradient, which
 *       the workers repeat on b's rows from the factors as its server does. As that
 *       reference shares the code it checks, b is also compared after every iteration with
 *       one written apart from it: PowerSGD from the paper in double (lr_dbl_t), within
 *       LR_DBL_ROUNDINGS. b's gradient has a full-rank term (lr_grad_value), so that rank 1 and
 *       2 lose some of it and the error feedback shows.
 *   test_runtime_mpi destroy [runtime flags]
 *       As exact, but in the third iteration the workers hand over every gradient and then
 *       destroy the worker without iteration_end or finish (the compressor thread running,
 *       updates in flight): pc_worker_destroy must stop and join the thread, settle the
 *       requests and free everything (run under ASan and TSan too). The servers, left
 *       waiting, must time out (PC_ETIMEDOUT), which is this mode's success.
 *   test_runtime_mpi view [runtime flags]
 *       As exact, but every gradient is handed over with pc_worker_grad_ready_view from a
 *       pool of its own (a view per tensor, at a place that changes every iteration, the
 *       tensors out of order with gaps, so a grouped chunk's views never continue each
 *       other), with a not_before NB_MS ahead; the registered gradient buffers hold NaN all
 *       along. Checks: the parameters bit for bit as exact (--mode ps), and every chunk's
 *       fold began at or after its tensors' not_before (the chunk's lifecycle times,
 *       readable once its update is in). Prints how long before not_before the hand-over
 *       returned (pipelined: at once; inline: after the wait). Also: set_device_step is
 *       refused with --mode ps. With --mode allreduce it prints the parameters' hash,
 *       which tests/mpi/test_runtime.sh compares with exact's.
 *   test_runtime_mpi devstep [runtime flags]          (--mode allreduce)
 *       pc_worker_set_device_step(DEVSTEP_MS): the parameters never change (the step is
 *       held, not run), the run lasts at least the iterations' holds, and the call is
 *       refused after start and for a negative time.
 *   test_runtime_mpi hostile KIND [runtime flags]     (2 ranks: a worker and a server)
 *       The worker sends the server one malformed gradient message (KIND: magic, index,
 *       truncated, chunk); the server must reject it with an error naming the sender. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "pipecompress/pc_lowrank.h"
#include "pipecompress/pc_philox.h"
#include "pipecompress/pc_time.h"
#include "pipecompress/pipecompress.h"
#include "runtime/runtime_impl.h"
#include "runtime/worker_impl.h"

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "test_runtime_mpi: %s: %s\n", what, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* view: how far ahead of the hand-over each gradient may be read (a copy to the host). */
#define NB_MS 2
/* devstep: the optimizer step's device time per iteration. */
#define DEVSTEP_MS 15

/* view: every chunk of tensor t folded iteration it's gradient at or after nb, the
 * not_before it was handed over with. The chunk's times are readable once its update of
 * iteration it is in (param_wait in iteration it + 1, or after finish). */
static void check_not_before(const pc_worker_t *w, int t, int it, int64_t nb)
{
    const wtensor_t *k = &w->tensors[t];
    for (int ci = k->first_chunk; ci <= k->last_chunk; ci++) {
        int64_t fold0 = w->chunks[ci].tm[it & 1].fold0;
        if (fold0 < nb) {
            char msg[256];
            snprintf(msg, sizeof(msg),
                     "tensor %d, chunk %d, iteration %d: folded %.3f ms before its not_before", t,
                     ci, it, (double)(nb - fold0) * 1e-6);
            die("view", msg);
        }
    }
}

/* Worker w's gradient. Workers 0 and 1 add +256 and -256: summed in rank order they cancel
 * exactly before the small gradients of workers 2, 3, ... come in, while another order
 * (workers 2, 3, ... first) rounds those to the large sum's precision. With 3 or more
 * workers this makes the order of the servers' sum show in the parameters' bits. */
static float grad_value(int w, int t, size_t i, int it)
{
    float big = w == 0 ? 256.0f : w == 1 ? -256.0f : 0.0f;
    return big + (float)(w + 1) * 0.125f - (float)t * 0.5f + (float)i * 0.001f * (float)(it + 1);
}

/* lowrank: worker w's gradient of b, element i: grad_value plus a term of full rank. On its
 * own grad_value is of rank 2 as a matrix (a constant plus terms linear in the row and in
 * the column), which rank 2 reproduces exactly: the error feedback would never show. */
static float lr_grad_value(int w, size_t i, int it)
{
    return grad_value(w, 1, i, it) +
           0.0625f * (float)((7 * i * i + 3 * (size_t)w + 5 * (size_t)it) % 11);
}

/* lowrank: the reference of matrix "b" (ROWS x n / ROWS, chunk LR_CHUNK: "a" is chunk 0) in
 * one process: W codec states, the server's factor sums. */
enum { ROWS = 20, LR_CHUNK = 1 };
typedef struct lr_ref {
    pc_codec_t *codec;
    pc_codec_state_t **st; /* per worker */
    float *g, *fac, *qagg, *agg, *ework;
    double *work;
    uint8_t *msg;
    size_t n, cols, cap;
    int W, rank;
} lr_ref_t;

static void lr_ref_init(lr_ref_t *r, const char *spec_text, uint64_t seed, int W, size_t n)
{
    pc_codec_spec_t spec;
    char err[256];
    if (pc_codec_spec_parse(spec_text, &spec, err, sizeof(err)) != PC_OK)
        die("lowrank", err);
    spec.seed = seed;
    if (spec.id != PC_CODEC_POWERSGD || pc_codec_create(&spec, &r->codec) != PC_OK)
        die("lowrank", "needs --compress powersgd:...");
    r->W = W;
    r->n = n;
    r->rank = spec.rank;
    r->cols = n / ROWS;
    r->st = calloc((size_t)W, sizeof(*r->st));
    for (int k = 0; k < W; k++)
        if (pc_codec_state_create_matrix(r->codec, LR_CHUNK, ROWS, n, &r->st[k]) != PC_OK)
            die("lowrank", "b is not a powersgd matrix at this rank");
    r->cap = pc_codec_max_bytes(r->codec, n);
    r->msg = malloc(r->cap);
    r->g = malloc(sizeof(float) * n);
    r->agg = malloc(sizeof(float) * n);
    r->fac = malloc(sizeof(float) * ROWS * (size_t)r->rank);
    r->qagg = malloc(sizeof(float) * r->cols * (size_t)r->rank);
    r->work = malloc(sizeof(double) * pc_lowrank_work_doubles(ROWS, r->rank));
    r->ework = malloc(sizeof(float) * pc_lowrank_expand_work(r->cols, r->rank));
}

/* Add scale x worker k's message (just made in r->msg, len bytes) into sum. */
static void lr_ref_add(lr_ref_t *r, size_t len, int it, int round, size_t entries, float scale,
                       float *sum)
{
    char err[256];
    pc_codec_expect_t want = {.chunk = LR_CHUNK,
                              .n = (uint32_t)r->n,
                              .iteration = (uint64_t)it,
                              .round = round,
                              .entries = (uint32_t)entries};
    const pc_codec_t *dense_codec = r->codec; /* round 0: the warm-up's none message */
    pc_codec_t *none = NULL;
    if (round == 0) {
        pc_codec_spec_t ns;
        pc_codec_spec_parse("none", &ns, err, sizeof(err));
        pc_codec_create(&ns, &none);
        dense_codec = none;
    }
    if (pc_codec_decode_add(dense_codec, r->msg, len, &want, scale, sum, NULL, err, sizeof(err)) !=
        PC_OK)
        die("lowrank reference", err);
    pc_codec_destroy(none);
}

/* One iteration of matrix b (tensor 1, elements off..off+n) for all W workers: the
 * gradient each server step applies, into r->agg. */
static void lr_ref_step(lr_ref_t *r, int it)
{
    size_t len, R = (size_t)r->rank;
    bool warm = pc_codec_lowrank_warm(pc_codec_spec(r->codec), (uint64_t)it);
    memset(warm ? r->agg : r->fac, 0, sizeof(float) * (warm ? r->n : ROWS * R));
    for (int k = 0; k < r->W; k++) {
        for (size_t i = 0; i < r->n; i++)
            r->g[i] = lr_grad_value(k, i, it);
        if (pc_codec_fold(r->codec, r->st[k], r->g) != PC_OK)
            die("lowrank reference", "fold");
        int rc =
            warm ? pc_codec_lowrank_dense(r->codec, r->st[k], (uint64_t)it, r->msg, r->cap, &len)
                 : pc_codec_lowrank_p(r->codec, r->st[k], (uint64_t)it, r->msg, r->cap, &len);
        if (rc != PC_OK)
            die("lowrank reference", "round 1");
        lr_ref_add(r, len, it, warm ? 0 : 1, ROWS * R, warm ? 1.0f / (float)r->W : 1.0f,
                   warm ? r->agg : r->fac);
    }
    if (warm)
        return;
    if (pc_lowrank_orthonormalise(r->fac, ROWS, r->rank, r->work) != PC_OK)
        die("lowrank reference", "orthonormalise");
    memset(r->qagg, 0, sizeof(float) * r->cols * R);
    for (int k = 0; k < r->W; k++) {
        memcpy(pc_codec_state_lowrank_phat(r->st[k]), r->fac, sizeof(float) * ROWS * R);
        if (pc_codec_lowrank_q(r->codec, r->st[k], (uint64_t)it, r->msg, r->cap, &len) != PC_OK)
            die("lowrank reference", "round 2");
        lr_ref_add(r, len, it, 2, r->cols * R, 1.0f / (float)r->W, r->qagg);
    }
    pc_lowrank_expand(r->agg, ROWS, r->cols, r->fac, r->qagg, r->rank, 1.0f, 0.0f, r->ework);
    for (int k = 0; k < r->W; k++)
        if (pc_codec_lowrank_finish(r->codec, r->st[k], r->qagg, NULL, NULL) != PC_OK)
            die("lowrank reference", "finish");
}

static void lr_ref_free(lr_ref_t *r)
{
    for (int k = 0; k < r->W; k++)
        pc_codec_state_destroy(r->st[k]);
    free(r->st);
    pc_codec_destroy(r->codec);
    free(r->msg);
    free(r->g);
    free(r->agg);
    free(r->fac);
    free(r->qagg);
    free(r->ework);
    free(r->work);
}

/* How far b may be from the double-precision reference: LR_DBL_ROUNDINGS float roundings
 * (2^-24, float's relative rounding) of the largest magnitude S that b is computed from
 * (lr_dbl_t.scale: b and every M_w; workers 0 and 1's gradients of +-256 pile up in their
 * errors and cancel only in the mean, so S reaches 1150 while the mean update is of order
 * 1: an error relative to |b| alone would be meaningless). Each element of b is a chain of
 * float roundings of numbers up to S (the fold, dot products of 15 and 20 terms, the
 * orthonormalisation, P^ Q^T, the optimizer) over 4 iterations: measured in
 * test_powersgd.sh's 12 runs, within 2.9 of them (2e-4 of 1150). 64 leaves a factor of 20
 * for another CPU's or BLAS's order of rounding, and stays 30 times below the smallest
 * departure from the algorithm tried: the reference without its error feedback is 3600
 * roundings off or more, without the warm start 2100, with Gram-Schmidt not
 * orthogonalising 15000, not normalising 1.3 million. */
#define LR_DBL_ROUNDINGS 64.0

/* lowrank, independently: PowerSGD as Vogels et al. (2019) give it (Algorithm 1 with error
 * feedback, Q warm-started from the previous step), in double, from the workers'
 * gradients alone: no pc_lowrank or codec numerics, no pc_optim_sgd (pc_codec_spec_parse
 * reads the flags, pc_optim_lr gives the rate). A step past the warm-up:
 *   M_w = g_w + e_w;  P = mean_w M_w Q;  P^ = Gram-Schmidt(P);  Q = mean_w M_w^T P^;
 *   the update P^ Q^T;  e_w = M_w - P^ Q^T;  Q stays for the next step.
 * A warm-up step sends M_w whole: the update is mean_w M_w and e_w = 0. Then SGD (torch's
 * formula, pc_optim.h's): d = update + wd p; m = mu m + d; p -= lr (nesterov ? d + mu m : m).
 * The float run may differ from it by rounding alone: LR_DBL_ROUNDINGS says how much. */
typedef struct lr_dbl {
    int W, rank, warmup;
    bool ef;
    long steps;
    size_t cols, n;
    double scale;        /* the largest |b| and |M_w| so far (LR_DBL_ROUNDINGS) */
    double *q;           /* cols x rank: the warm start */
    double *e, *m;       /* W x n: each worker's error and M_w */
    double *p, *qs;      /* rows x rank and cols x rank: P (then P^) and the mean Q */
    double *upd;         /* n: the step's update of b */
    double *param, *mom; /* n: b's parameters and the optimizer's momentum */
} lr_dbl_t;

/* Q's first draw: cols x rank standard normals, Box-Muller on Philox (seed, stream LR_CHUNK)
 * as the codec draws them (the same random input; the paper draws Q i.i.d. normal). The
 * codec then orthonormalises Q, which changes its basis but not the span of M Q, and the
 * update P^ P^T M depends on that span alone. */
static void lr_dbl_init(lr_dbl_t *d, const char *spec_text, uint64_t seed, int W, size_t n,
                        const float *param)
{
    pc_codec_spec_t spec; /* the flags only: rank, warm-up, error feedback */
    char err[256];
    if (pc_codec_spec_parse(spec_text, &spec, err, sizeof(err)) != PC_OK)
        die("lowrank", err);
    *d = (lr_dbl_t){
        .W = W, .rank = spec.rank, .warmup = spec.warmup, .ef = spec.ef, .cols = n / ROWS, .n = n};
    size_t R = (size_t)d->rank;
    d->q = malloc(sizeof(double) * d->cols * R);
    d->e = calloc((size_t)W * n, sizeof(double));
    d->m = malloc(sizeof(double) * (size_t)W * n);
    d->p = malloc(sizeof(double) * ROWS * R);
    d->qs = malloc(sizeof(double) * d->cols * R);
    d->upd = malloc(sizeof(double) * n);
    d->param = malloc(sizeof(double) * n);
    d->mom = calloc(n, sizeof(double));
    if (!d->q || !d->e || !d->m || !d->p || !d->qs || !d->upd || !d->param || !d->mom)
        die("lowrank", "out of memory");
    pc_philox_t g;
    pc_philox_init(&g, seed, LR_CHUNK, 0);
    for (size_t i = 0; i < d->cols * R; i += 2) {
        double u = ((double)pc_philox_next(&g) + 0.5) / 4294967296.0; /* (0, 1) */
        double v = ((double)pc_philox_next(&g) + 0.5) / 4294967296.0;
        d->q[i] = sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
        if (i + 1 < d->cols * R)
            d->q[i + 1] = sqrt(-2.0 * log(u)) * sin(2.0 * M_PI * v);
    }
    for (size_t i = 0; i < n; i++) {
        d->param[i] = param[i];
        d->scale = fmax(d->scale, fabs(d->param[i]));
    }
}

/* Classical Gram-Schmidt on the columns of p (rows x rank, row-major): each made orthogonal
 * to those before it, then of norm 1 (a zero column stays zero). */
static void lr_dbl_orthonormalise(double *p, size_t rows, int rank)
{
    size_t R = (size_t)rank;
    for (size_t c = 0; c < R; c++) {
        for (size_t e = 0; e < c; e++) {
            double dot = 0.0;
            for (size_t i = 0; i < rows; i++)
                dot += p[i * R + e] * p[i * R + c];
            for (size_t i = 0; i < rows; i++)
                p[i * R + c] -= dot * p[i * R + e];
        }
        double norm = 0.0;
        for (size_t i = 0; i < rows; i++)
            norm += p[i * R + c] * p[i * R + c];
        norm = sqrt(norm);
        for (size_t i = 0; i < rows; i++)
            p[i * R + c] = norm > 0.0 ? p[i * R + c] / norm : 0.0;
    }
}

/* The update of b at iteration it (into d->upd), from the W workers' gradients. */
static void lr_dbl_update(lr_dbl_t *d, int it)
{
    size_t R = (size_t)d->rank, C = d->cols, n = d->n;
    for (int w = 0; w < d->W; w++)
        for (size_t i = 0; i < n; i++)
            d->m[(size_t)w * n + i] =
                (d->ef ? d->e[(size_t)w * n + i] : 0.0) + lr_grad_value(w, i, it);
    bool warm = d->steps++ < d->warmup;
    memset(d->upd, 0, sizeof(double) * n);
    memset(d->p, 0, sizeof(double) * ROWS * R);
    memset(d->qs, 0, sizeof(double) * C * R);
    for (int w = 0; w < d->W && warm; w++) /* the warm-up: the mean of M_w */
        for (size_t i = 0; i < n; i++)
            d->upd[i] += d->m[(size_t)w * n + i] / d->W;
    for (int w = 0; w < d->W && !warm; w++) { /* P = mean M_w Q */
        const double *m = d->m + (size_t)w * n;
        for (size_t i = 0; i < ROWS; i++)
            for (size_t c = 0; c < R; c++)
                for (size_t j = 0; j < C; j++)
                    d->p[i * R + c] += m[i * C + j] * d->q[j * R + c] / d->W;
    }
    if (!warm)
        lr_dbl_orthonormalise(d->p, ROWS, d->rank);
    for (int w = 0; w < d->W && !warm; w++) { /* Q = mean M_w^T P^ */
        const double *m = d->m + (size_t)w * n;
        for (size_t j = 0; j < C; j++)
            for (size_t c = 0; c < R; c++)
                for (size_t i = 0; i < ROWS; i++)
                    d->qs[j * R + c] += m[i * C + j] * d->p[i * R + c] / d->W;
    }
    for (size_t i = 0; i < ROWS && !warm; i++) /* P^ Q^T */
        for (size_t j = 0; j < C; j++)
            for (size_t c = 0; c < R; c++)
                d->upd[i * C + j] += d->p[i * R + c] * d->qs[j * R + c];
    if (!warm)
        memcpy(d->q, d->qs, sizeof(double) * C * R);
    for (int w = 0; w < d->W && d->ef; w++) /* e_w = M_w - update (0 in the warm-up) */
        for (size_t i = 0; i < n; i++)
            d->e[(size_t)w * n + i] = warm ? 0.0 : d->m[(size_t)w * n + i] - d->upd[i];
}

/* One iteration of b: the update, then the optimizer's step at rate lr. */
static void lr_dbl_step(lr_dbl_t *d, int it, const pc_optim_cfg_t *o, double lr)
{
    lr_dbl_update(d, it);
    for (size_t i = 0; i < d->n; i++) {
        double g = d->upd[i] + o->weight_decay * d->param[i];
        if (o->momentum == 0.0) {
            d->param[i] -= lr * g;
            continue;
        }
        d->mom[i] = o->momentum * d->mom[i] + g;
        d->param[i] -= lr * (o->nesterov ? g + o->momentum * d->mom[i] : d->mom[i]);
    }
    for (size_t i = 0; i < d->n; i++)
        d->scale = fmax(d->scale, fabs(d->param[i]));
    for (size_t i = 0; i < (size_t)d->W * d->n; i++)
        d->scale = fmax(d->scale, fabs(d->m[i]));
}

/* Whether b's parameters p are within LR_DBL_ROUNDINGS float roundings of d->scale of d's
 * everywhere; *worst rises to the largest |p - reference| / (2^-24 d->scale) seen. */
static bool lr_dbl_close(const lr_dbl_t *d, const float *p, double *worst)
{
    double unit = ldexp(d->scale, -24);
    bool ok = true;
    for (size_t i = 0; i < d->n; i++) {
        double r = fabs((double)p[i] - d->param[i]) / unit;
        *worst = r > *worst ? r : *worst;
        ok = ok && r <= LR_DBL_ROUNDINGS;
    }
    return ok;
}

static void lr_dbl_free(lr_dbl_t *d)
{
    free(d->q);
    free(d->e);
    free(d->m);
    free(d->p);
    free(d->qs);
    free(d->upd);
    free(d->param);
    free(d->mom);
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2)
        die("usage", "test_runtime_mpi exact|lowrank|destroy|view|devstep|hostile [KIND] [flags]");
    const char *mode = argv[1];
    int skip = strcmp(mode, "hostile") == 0 ? 3 : 2;
    if (argc < skip)
        die("usage", "hostile needs a KIND");
    const char *hostile_kind = skip == 3 ? argv[2] : "";
    pc_config_t cfg;
    pc_config_defaults(&cfg);
    pc_flags_group_t g = pc_config_group(&cfg, "Runtime");
    char err[1024];
    /* Parse the flags after the mode words (argv[0] stays the program name). */
    argv[skip - 1] = argv[0];
    if (pc_flags_parse(&g, 1, argc - (skip - 1), argv + (skip - 1), NULL, err, sizeof(err)) !=
        PC_OK)
        die("flags", err);
    cfg.timeout = cfg.timeout > 30 ? 30 : cfg.timeout;
    pc_runtime_t *rt;
    if (pc_runtime_create(&cfg, MPI_COMM_WORLD, NULL, &rt, err, sizeof(err)) != PC_OK)
        die("runtime", err);
    bool destroy = strcmp(mode, "destroy") == 0;
    if (pc_runtime_role(rt) == PC_ROLE_SERVER) {
        int rc = pc_server_run(rt, err, sizeof(err));
        if (destroy && rc == PC_ETIMEDOUT)
            printf("destroy: server r%d timed out as expected: %s\n", rank, err);
        else if (destroy)
            die("server", rc == PC_OK ? "finished, but the workers never said done" : err);
        else if (rc != PC_OK)
            die("server", err);
        pc_runtime_destroy(rt);
        MPI_Finalize();
        return 0;
    }
    int W = pc_runtime_workers(rt);
    /* Three tensors in one slab (the small ones may be grouped into one chunk). */
    enum { T = 3 };
    const size_t sizes[T] = {37, 300, 5};
    size_t total = 0, off[T];
    for (int t = 0; t < T; t++) {
        off[t] = total;
        total += sizes[t];
    }
    float *p = malloc(sizeof(float) * total), *gr = malloc(sizeof(float) * total),
          *expect = malloc(sizeof(float) * total);
    for (size_t i = 0; i < total; i++)
        p[i] = expect[i] = (float)i * 0.01f;
    pc_worker_t *w;
    if (pc_worker_create(rt, &w, err, sizeof(err)) != PC_OK)
        die("worker", err);
    /* --device emulate: the same buffers as device tensors (pc_gpu's host emulation). */
    int (*reg)(pc_worker_t *, const char *, float *, float *, size_t) =
        cfg.device == PC_DEVICE_CPU ? pc_worker_register : pc_worker_register_device;
    for (int t = 0; t < T; t++)
        if (reg(w, t == 0 ? "a" : t == 1 ? "b" : "c", p + off[t], gr + off[t], sizes[t]) < 0)
            die("register", pc_worker_error(w));
    bool lowrank = strcmp(mode, "lowrank") == 0;
    if (lowrank && pc_worker_set_rows(w, 1, ROWS) != PC_OK)
        die("set_rows", pc_worker_error(w));
    bool view = strcmp(mode, "view") == 0, devstep = strcmp(mode, "devstep") == 0;
    bool ar = cfg.mode == PC_MODE_ALLREDUCE;
    if (devstep && !ar)
        die("devstep", "needs --mode allreduce");
    if (view && !ar && pc_worker_set_device_step(w, 1000) != PC_ESTATE)
        die("view", "set_device_step was accepted with --mode ps");
    if (devstep && pc_worker_set_device_step(w, -1) != PC_EINVAL)
        die("devstep", "a negative device step was accepted");
    if (devstep && pc_worker_set_device_step(w, (int64_t)DEVSTEP_MS * 1000000) != PC_OK)
        die("devstep", pc_worker_error(w));
    /* view: the registered gradients are never written (NaN: a fold that read them would
     * fail on them); the gradients come from a pool with room for two iterations' views,
     * the tensors in reverse order with a gap of one float between them. */
    float *pool = NULL;
    int64_t nb[T] = {0};
    double ahead_ms = 0; /* view: the smallest time left to not_before after a hand-over */
    if (view) {
        pool = malloc(sizeof(float) * 2 * (total + T));
        for (size_t i = 0; i < total; i++)
            gr[i] = NAN;
        ahead_ms = 1e9;
    }
    if (cfg.device != PC_DEVICE_CPU && pc_worker_register(w, "host", p, gr, 1) != PC_ESTATE)
        die("register", "a host tensor was accepted with --device emulate");
    if (pc_worker_start(w) != PC_OK)
        die("start", pc_worker_error(w));
    if (devstep && pc_worker_set_device_step(w, 0) != PC_ESTATE)
        die("devstep", "set_device_step was accepted after start");
    if (pc_worker_warm_codec(w) != PC_ESTATE) /* the codec states exist now */
        die("warm_codec", "pc_worker_warm_codec was accepted after start");
    int64_t t_run = pc_time_ns();

    if (strcmp(mode, "hostile") == 0) {
        pc_codec_spec_t spec;
        pc_codec_spec_parse(cfg.compress, &spec, err, sizeof(err));
        pc_codec_t *c;
        pc_codec_state_t *st;
        pc_codec_create(&spec, &c);
        /* Chunk 0 of the plan: all three tensors grouped (run with the default chunk size). */
        size_t n = total;
        pc_codec_state_create(c, 0, n, &st);
        for (size_t i = 0; i < n; i++)
            gr[i] = grad_value(0, 0, i, 0);
        size_t cap = pc_codec_max_bytes(c, n), len;
        uint8_t *msg = malloc(cap + 8);
        pc_codec_compress(c, st, gr, 0, msg, cap, &len);
        const char *k = hostile_kind;
        if (strcmp(k, "magic") == 0)
            msg[0] ^= 0x55;
        else if (strcmp(k, "index") == 0)
            pc_wire_put_u32(msg + PC_WIRE_HEADER_BYTES, (uint32_t)n + 7);
        else if (strcmp(k, "truncated") == 0)
            len -= 3;
        else if (strcmp(k, "chunk") == 0)
            pc_wire_put_u32(msg + 8, 999);
        MPI_Send(msg, (int)len, MPI_BYTE, pc_rt__server_rank(rt, 0), TAG_GRAD, rt->comm);
        /* The server must reject it and end the job; this wait then never returns. */
        pc_worker_param_wait(w, 0);
        pc_worker_param_wait(w, 0);
        die("hostile", "the server accepted a malformed message");
    }

    /* exact: known gradients, three iterations (lowrank: four). */
    float lr = (float)cfg.lr;
    lr_ref_t ref = {0};
    lr_dbl_t dref = {0};
    double dworst = 0.0;              /* lowrank: the largest difference from dref (roundings) */
    float *mom = NULL, *agg_t = NULL; /* lowrank: the optimizer's momentum, a mean */
    if (lowrank) {
        lr_ref_init(&ref, cfg.compress, cfg.seed, W, sizes[1]);
        lr_dbl_init(&dref, cfg.compress, cfg.seed, W, sizes[1], expect + off[1]);
        mom = calloc(total, sizeof(float));
        agg_t = malloc(sizeof(float) * total);
    }
    int iters = lowrank ? 4 : 3;
    size_t order_sensitive = 0; /* means (element, iteration) that reverse order would change */
    for (int it = 0; it < iters; it++) {
        for (int t = 0; t < T; t++) {
            if (pc_worker_param_wait(w, t) != PC_OK)
                die("param_wait", pc_worker_error(w));
            if (view && it > 0)
                check_not_before(w, t, it - 1, nb[t]);
            /* destroy: any flags; allreduce: the mean's rounding differs (devstep: the
             * parameters never change) */
            for (size_t i = 0; i < sizes[t] && !destroy && (!ar || devstep); i++)
                if (p[off[t] + i] != expect[off[t] + i]) {
                    char msg[256];
                    snprintf(msg, sizeof(msg),
                             "rank %d iteration %d tensor %d element %zu: %a, expected %a", rank,
                             it, t, i, (double)p[off[t] + i], (double)expect[off[t] + i]);
                    die("exact", msg);
                }
            if (lowrank && t == 1 && !lr_dbl_close(&dref, p + off[1], &dworst)) {
                char msg[256];
                snprintf(msg, sizeof(msg),
                         "rank %d iteration %d: b differs from the double-precision PowerSGD "
                         "by %.3g float roundings of %.4g, more than %g",
                         rank, it, dworst, dref.scale, LR_DBL_ROUNDINGS);
                die("lowrank", msg);
            }
        }
        for (int t = T - 1; t >= 0 && view; t--) {
            /* This iteration's half of the pool: c, b, a, a float apart. */
            size_t at = (size_t)(it % 2) * (total + T);
            for (int u = T - 1; u > t; u--)
                at += sizes[u] + 1;
            float *v = pool + at;
            for (size_t i = 0; i < sizes[t]; i++)
                v[i] = grad_value(rank, t, i, it);
            nb[t] = pc_time_ns() + (int64_t)NB_MS * 1000000;
            if (pc_worker_grad_ready_view(w, t, v, nb[t]) != PC_OK)
                die("grad_ready_view", pc_worker_error(w));
            double left = (double)(nb[t] - pc_time_ns()) * 1e-6;
            ahead_ms = left < ahead_ms ? left : ahead_ms;
        }
        for (int t = T - 1; t >= 0 && !view; t--) {
            for (size_t i = 0; i < sizes[t]; i++)
                gr[off[t] + i] =
                    lowrank && t == 1 ? lr_grad_value(rank, i, it) : grad_value(rank, t, i, it);
            /* Tensor b in two pieces, the later half first (any order is allowed). */
            if (t == 1 ? pc_worker_grad_ready_range(w, t, 123, sizes[t]) != PC_OK ||
                             pc_worker_grad_ready_range(w, t, 0, 123) != PC_OK
                       : pc_worker_grad_ready(w, t) != PC_OK)
                die("grad_ready", pc_worker_error(w));
        }
        if (destroy && it == 2) {
            /* Abandon the worker mid-iteration: updates in flight, thread running. */
            pc_worker_destroy(w);
            if (rank == 0)
                printf("destroy: %d workers destroyed their started workers without finish\n", W);
            pc_runtime_destroy(rt);
            free(p);
            free(gr);
            free(expect);
            MPI_Finalize();
            return 0;
        }
        /* The servers' arithmetic: sum of (1/W) * g_w in worker order, then plain SGD
         * (lowrank: b's gradient is the reference's P^ Q^T, or its warm-up's mean). */
        if (lowrank) {
            lr_ref_step(&ref, it);
            lr_dbl_step(&dref, it, &rt->optim, pc_optim_lr(&rt->optim, it));
            for (int t = 0; t < T; t++) {
                const float *gt = ref.agg;
                if (t != 1) {
                    for (size_t i = 0; i < sizes[t]; i++) {
                        agg_t[i] = 0;
                        for (int k = 0; k < W; k++)
                            agg_t[i] += (1.0f / (float)W) * grad_value(k, t, i, it);
                    }
                    gt = agg_t;
                }
                pc_optim_sgd(&rt->optim, (float)pc_optim_lr(&rt->optim, it), expect + off[t],
                             mom + off[t], gt, sizes[t], NULL);
            }
        }
        for (int t = 0; t < T && !lowrank; t++)
            for (size_t i = 0; i < sizes[t]; i++) {
                float agg = 0, rev = 0;
                for (int k = 0; k < W; k++)
                    agg += (1.0f / (float)W) * grad_value(k, t, i, it);
                for (int k = W - 1; k >= 0; k--)
                    rev += (1.0f / (float)W) * grad_value(k, t, i, it);
                order_sensitive += agg != rev;
                float d = agg + 0.0f * expect[off[t] + i];
                if (!devstep) /* devstep: no step on the CPU */
                    expect[off[t] + i] = expect[off[t] + i] - lr * d;
            }
        if (pc_worker_iteration_end(w, NULL) != PC_OK)
            die("iteration_end", pc_worker_error(w));
    }
    if (pc_worker_finish(w) != PC_OK)
        die("finish", pc_worker_error(w));
    double run_ms = (double)(pc_time_ns() - t_run) * 1e-6;
    for (int t = 0; t < T && view; t++)
        check_not_before(w, t, iters - 1, nb[t]);
    if (view && rank == 0 && cfg.pipeline)
        printf("view: every fold began after its not_before; the hand-overs returned %.3f ms "
               "or more before it (the compressor thread waits)\n",
               ahead_ms);
    else if (view && rank == 0)
        printf("view: every fold began after its not_before; the hand-overs returned up to "
               "%.3f ms after it (inline: the backprop thread waits)\n",
               -ahead_ms);
    /* devstep: the holds of one iteration follow each other and the next iteration's
     * follow them (deadlines), each chunk's share rounded down to the nanosecond: a lower
     * bound, since a sleep never ends early. */
    double hold_ms = (double)iters * (DEVSTEP_MS - 1e-6 * w->nchunks);
    if (devstep && run_ms < hold_ms) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%d iterations took %.3f ms, less than their holds (%.3f ms)",
                 iters, run_ms, hold_ms);
        die("devstep", msg);
    }
    if (devstep && rank == 0)
        printf("devstep: %d iterations in %.1f ms, holds of %d ms each, parameters unchanged\n",
               iters, run_ms, DEVSTEP_MS);
    if (rt->gpu) {
        /* The device path's bookkeeping: each iteration every gradient went to the host
         * once (--compress none: dense chunks are copied, never folded on the device) and
         * every update to the device once, plus the initial parameters both ways; one event
         * per grad_ready call (four an iteration: b in two pieces) at least, and a stream
         * wait per chunk and param_wait call at least. */
        pc_gpu_stats_t gs;
        pc_gpu_stats(rt->gpu, &gs);
        uint64_t bytes = sizeof(float) * total * 4;
        if (gs.to_host_bytes != bytes || gs.to_device_bytes != bytes || gs.records < 12 ||
            gs.waits < 9) {
            char msg[256];
            snprintf(msg, sizeof(msg),
                     "rank %d: copies %llu B to the host, %llu B to the device (expected %llu "
                     "each), %llu records, %llu waits",
                     rank, (unsigned long long)gs.to_host_bytes,
                     (unsigned long long)gs.to_device_bytes, (unsigned long long)bytes,
                     (unsigned long long)gs.records, (unsigned long long)gs.waits);
            die("device", msg);
        }
        if (rank == 0)
            printf("device: copies, events and waits as expected (%llu records, %llu waits)\n",
                   (unsigned long long)gs.records, (unsigned long long)gs.waits);
    }
    for (size_t i = 0; i < total && (!ar || devstep); i++)
        if (p[i] != expect[i])
            die("exact", "final parameters differ from the expected mean-gradient steps");
    if (lowrank && !lr_dbl_close(&dref, p + off[1], &dworst))
        die("lowrank", "final b differs from the double-precision PowerSGD");
    /* With 3 or more workers the inputs must make the summation order matter (for most of
     * the 3 * total means): otherwise a server that sums in another order than rank order
     * would pass unseen. */
    free(mom);
    free(agg_t);
    if (lowrank) {
        lr_ref_free(&ref);
        lr_dbl_free(&dref);
        if (rank == 0)
            printf("lowrank: %d workers, %d servers, %d iterations: parameters match the "
                   "one-process powersgd reference bit for bit, and b the double-precision "
                   "PowerSGD within %.2g float roundings of %.4g (tolerance %g)\n",
                   W, pc_runtime_servers(rt), iters, dworst, dref.scale, LR_DBL_ROUNDINGS);
    } else if (!ar && W >= 3 && 2 * order_sensitive < 3 * total)
        die("exact", "the test's gradients hardly make the summation order matter");
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the parameters' bits */
    for (size_t i = 0; i < total; i++) {
        uint32_t bits;
        memcpy(&bits, &p[i], sizeof(bits));
        h = (h ^ bits) * 0x100000001b3ull;
    }
    if (rank == 0)
        printf("parameters hash %016llx\n", (unsigned long long)h);
    if (rank == 0 && !lowrank && !ar)
        printf("exact: %d workers, %d servers: parameters match bit for bit (%zu of %zu means "
               "depend on the summation order)\n",
               W, pc_runtime_servers(rt), order_sensitive, 3 * total);
    pc_worker_destroy(w);
    pc_runtime_destroy(rt);
    free(p);
    free(gr);
    free(expect);
    free(pool);
    MPI_Finalize();
    return 0;
}
