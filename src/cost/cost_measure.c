/* cost_measure: the rates of pc_cost measured with the code paths the runtime runs: the
 * codecs' compress (the compressor thread's work), the server's message check, dense and
 * sparse aggregation and SGD steps, and the pull's encoding and application. Each step is
 * timed reps times on this thread and the median kept: one outlier (a preemption on a
 * shared machine) does not move a median of three; one untimed run first touches the
 * buffers, as the runtime's steady state has. No MPI (pc_comm_pingpong measures the
 * link). */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_config.h"
#include "pipecompress/pc_cost.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_lowrank.h"
#include "pipecompress/pc_optim.h"
#include "pipecompress/pc_philox.h"
#include "pipecompress/pc_time.h"
#include "pipecompress/pc_wire.h"
#include "runtime/runtime_proto.h"
#include "runtime/runtime_server.h"

/* Messages the sparse aggregation is timed with: the merges (of 8k, 1 + 2 + ... + 7 k
 * indices, about 1 ns each) then weigh about as much as the eight messages' checks and
 * additions (about 4 ns per entry), so their difference stands out of a shared machine's
 * noise (with four it was often lost in it); the union stays far below n (8 % at 1 %). */
#define SERVER_MSGS 8
/* Fraction kept by the top-k messages of the server's measurement: the defaults' 1 %. */
#define SERVER_RATIO 0.01

/* Median of v[0..n), n >= 1 (sorts v). */
static double median(double *v, int n)
{
    return pc_time_median(v, (size_t)n);
}

static double secs_since(int64_t t0)
{
    return (double)(pc_time_ns() - t0) * 1e-9;
}

int pc_cost_measure_codec(const pc_codec_spec_t *spec, const float *grad, const size_t *chunk_n,
                          int nchunks, int reps, pc_cost_codec_rate_t *out, char *err,
                          size_t errlen)
{
    if (!spec || !grad || !chunk_n || nchunks < 1 || reps < 1 || !out)
        return pc_error_fmt(PC_EINVAL, err, errlen, "measure codec: bad arguments");
    size_t most = 0;
    for (int i = 0; i < nchunks; i++) {
        if (chunk_n[i] == 0 || chunk_n[i] > PC_CODEC_MAX_N)
            return pc_error_fmt(PC_EINVAL, err, errlen, "measure codec: chunk %d of %zu elements",
                                i, chunk_n[i]);
        most = chunk_n[i] > most ? chunk_n[i] : most;
    }
    pc_codec_t *c = NULL;
    pc_codec_state_t **st = calloc((size_t)nchunks, sizeof(*st));
    uint8_t *msg = NULL;
    double *t = calloc((size_t)reps, sizeof(double));
    int rc = pc_codec_create(spec, &c);
    if (rc == PC_OK && (!st || !t || !(msg = malloc(pc_codec_max_bytes(c, most)))))
        rc = PC_ENOMEM;
    for (int i = 0; i < nchunks && rc == PC_OK; i++)
        rc = pc_codec_state_create(c, (uint32_t)i, chunk_n[i], &st[i]);
    if (rc != PC_OK) {
        rc = pc_error_fmt(rc, err, errlen, "measure codec: %s", pc_strerror(rc));
        goto out;
    }
    /* Passes over all the chunks, as the compressor thread makes one per iteration: a
     * chunk's state is cold again when its turn comes if the chunks together outgrow the
     * caches (timing one chunk over and over would keep its 8-12 bytes per element in the
     * cache and measure a speed the runtime never sees). Pass -1 is untimed: it touches
     * the states' fresh pages. */
    double bytes = 0, entries = 0, elems = 0;
    for (int r = -1; r < reps && rc == PC_OK; r++) {
        const float *g = grad;
        for (int i = 0; i < nchunks; i++) {
            size_t n = chunk_n[i], len = 0;
            int64_t t0 = pc_time_ns();
            rc = pc_codec_compress(c, st[i], g, (uint64_t)(r + 1), msg, pc_codec_max_bytes(c, n),
                                   &len);
            if (r >= 0)
                t[r] += secs_since(t0);
            pc_wire_header_t h;
            if (rc != PC_OK) {
                rc = pc_error_fmt(rc, err, errlen, "measure codec: compress %zu elements: %s", n,
                                  pc_strerror(rc));
                break;
            }
            if (r == reps - 1) { /* the last pass's messages: bytes and entries */
                if ((rc = pc_wire_header_read(msg, len, &h, err, errlen)) != PC_OK)
                    break;
                bytes += (double)(len - PC_WIRE_HEADER_BYTES);
                entries += (double)h.entries;
                elems += (double)n;
            }
            g += n;
        }
    }
    if (rc == PC_OK) {
        *out = (pc_cost_codec_rate_t){.compress = median(t, reps) / elems,
                                      .bytes = bytes / elems,
                                      .density = entries > 0 ? entries / elems : 1.0 / elems,
                                      .sparse = pc_rt__grad_sparse(c)};
        if (out->density > 1)
            out->density = 1;
    }
out:
    for (int i = 0; st && i < nchunks; i++)
        pc_codec_state_destroy(st[i]);
    free(st);
    pc_codec_destroy(c);
    free(msg);
    free(t);
    return rc;
}

/* Everything pc_cost_measure_lowrank holds, freed in one place: the codec, a state per
 * matrix, and scratch for the largest matrix (a factor message, Q, the server's work space of Q^T
 * and a row, parameters and momentum, the orthonormalisation's doubles); t: reps of each of the
 * five figures. */
typedef struct lbufs {
    pc_codec_t *c;
    pc_codec_state_t **st;
    int nmat;
    uint8_t *msg;
    float *q, *qt, *p, *mom;
    double *work, *t;
} lbufs_t;

static void lbufs_free(lbufs_t *b)
{
    for (int i = 0; b->st && i < b->nmat; i++)
        pc_codec_state_destroy(b->st[i]);
    free(b->st);
    pc_codec_destroy(b->c);
    free(b->msg);
    free(b->q);
    free(b->qt);
    free(b->p);
    free(b->mom);
    free(b->work);
    free(b->t);
}

/* The optimizer's step on row i of a matrix (pc_codec_lowrank_finish's callback). */
typedef struct lrow {
    pc_optim_cfg_t optim;
    float *p, *mom;
    size_t cols;
} lrow_t;

static void step_row(void *ud, size_t i, const float *g)
{
    lrow_t *s = ud;
    pc_optim_sgd(&s->optim, (float)s->optim.lr, s->p + i * s->cols, s->mom + i * s->cols, g,
                 s->cols, NULL);
}

/* One pass's work on matrix i (n elements, rows), each part's time added to at[0..4]:
 * round 1, the server's orthonormalisation, round 2, the server's rows and step, the
 * worker's finish. */
static int time_matrix(lbufs_t *b, int i, const float *grad, size_t n, size_t rows, uint64_t it,
                       double *const at[5])
{
    int R = pc_codec_spec(b->c)->rank;
    size_t cols = n / rows, cap = pc_codec_max_bytes(b->c, n), len = 0;
    pc_codec_state_t *st = b->st[i];
    lrow_t ls = {.optim = {.lr = 1e-6, .momentum = 0.9}, .p = b->p, .mom = b->mom, .cols = cols};
    int64_t t0 = pc_time_ns();
    int rc = pc_codec_fold(b->c, st, grad);
    if (rc == PC_OK)
        rc = pc_codec_lowrank_p(b->c, st, it, b->msg, cap, &len);
    *at[0] += secs_since(t0);
    float *phat = pc_codec_state_lowrank_phat(st);
    if (rc != PC_OK)
        return rc;
    memcpy(phat, b->msg + PC_WIRE_HEADER_BYTES, sizeof(float) * rows * (size_t)R);
    t0 = pc_time_ns();
    rc = pc_lowrank_orthonormalise(phat, rows, R, b->work);
    *at[1] += secs_since(t0);
    if (rc != PC_OK)
        return rc;
    t0 = pc_time_ns();
    rc = pc_codec_lowrank_q(b->c, st, it, b->msg, cap, &len);
    *at[2] += secs_since(t0);
    if (rc != PC_OK)
        return rc;
    memcpy(b->q, b->msg + PC_WIRE_HEADER_BYTES, sizeof(float) * cols * (size_t)R);
    t0 = pc_time_ns();                    /* the server's step */
    pc_optim_state_t ost = {.m = b->mom}; /* SGD with momentum: the buffer alone */
    pc_rt__server_lowrank_update(&ls.optim, ls.optim.lr, NULL, b->p, &ost, phat, b->q, rows, cols,
                                 R, b->qt);
    *at[3] += secs_since(t0);
    t0 = pc_time_ns();
    rc = pc_codec_lowrank_finish(b->c, st, b->q, step_row, &ls);
    *at[4] += secs_since(t0);
    return rc;
}

/* The codec (warm-up dropped), the states and the scratch for matrices of at most `most`
 * elements and `cmax` columns, `rmax` rows. */
static int lowrank_bufs(lbufs_t *b, const pc_codec_spec_t *spec, const size_t *n,
                        const size_t *rows, int reps)
{
    pc_codec_spec_t s = *spec;
    s.warmup = 0;
    size_t most = 0, cmax = 0, rmax = 0, R = (size_t)s.rank;
    for (int i = 0; i < b->nmat; i++) {
        most = n[i] > most ? n[i] : most;
        cmax = n[i] / rows[i] > cmax ? n[i] / rows[i] : cmax;
        rmax = rows[i] > rmax ? rows[i] : rmax;
    }
    int rc = pc_codec_create(&s, &b->c);
    if (rc != PC_OK)
        return rc;
    b->st = calloc((size_t)b->nmat, sizeof(*b->st));
    b->msg = malloc(pc_codec_max_bytes(b->c, most));
    b->q = malloc(sizeof(float) * cmax * R);
    b->qt = malloc(sizeof(float) * pc_lowrank_expand_work(cmax, s.rank));
    b->p = calloc(most, sizeof(float));
    b->mom = calloc(most, sizeof(float));
    b->work = malloc(sizeof(double) * pc_lowrank_work_doubles(rmax, s.rank));
    b->t = calloc((size_t)reps * 5, sizeof(double));
    if (!b->st || !b->msg || !b->q || !b->qt || !b->p || !b->mom || !b->work || !b->t)
        return PC_ENOMEM;
    for (int i = 0; i < b->nmat && rc == PC_OK; i++)
        rc = pc_codec_state_create_matrix(b->c, (uint32_t)i, rows[i], n[i], &b->st[i]);
    return rc;
}

int pc_cost_measure_lowrank(const pc_codec_spec_t *spec, const float *const *grads, const size_t *n,
                            const size_t *rows, int nmat, int reps, pc_cost_codec_rate_t *rate,
                            pc_cost_lowrank_t *lr, char *err, size_t errlen)
{
    if (!spec || spec->id != PC_CODEC_POWERSGD || !grads || !n || !rows || nmat < 1 || reps < 1 ||
        !rate || !lr)
        return pc_error_fmt(PC_EINVAL, err, errlen, "measure powersgd: bad arguments");
    double elems = 0, bytes = 0, ortho = 0, R = (double)spec->rank;
    for (int i = 0; i < nmat; i++) {
        if (!grads[i] || n[i] > PC_CODEC_MAX_N || !pc_codec_lowrank_fits(spec, rows[i], n[i]))
            return pc_error_fmt(PC_EINVAL, err, errlen,
                                "measure powersgd: matrix %d (%zu elements, %zu rows) does not "
                                "fit rank %d",
                                i, n[i], rows[i], spec->rank);
        elems += (double)n[i];
        bytes += 4.0 * R * ((double)rows[i] + (double)(n[i] / rows[i]));
        ortho += (double)rows[i] * R * R;
    }
    lbufs_t b = {.nmat = nmat};
    int rc = lowrank_bufs(&b, spec, n, rows, reps);
    /* Passes over all the matrices, as pc_cost_measure_codec makes them; pass -1 untimed. */
    double scratch[5] = {0};
    for (int r = -1; r < reps && rc == PC_OK; r++) {
        double *at[5];
        for (int f = 0; f < 5; f++)
            at[f] = r >= 0 ? &b.t[(size_t)f * (size_t)reps + (size_t)r] : &scratch[f];
        for (int i = 0; i < nmat && rc == PC_OK; i++)
            rc = time_matrix(&b, i, grads[i], n[i], rows[i], (uint64_t)(r + 1), at);
    }
    if (rc == PC_OK) {
        *rate = (pc_cost_codec_rate_t){
            .compress = median(b.t, reps) / elems, .bytes = bytes / elems, .density = 1.0};
        lr->ortho = median(b.t + reps, reps) / ortho;
        lr->round2 = median(b.t + 2 * reps, reps) / elems;
        lr->step = median(b.t + 3 * reps, reps) / elems;
        lr->finish = median(b.t + 4 * reps, reps) / elems;
    } else {
        pc_error_fmt(rc, err, errlen, "measure powersgd: %s",
                     rc == PC_ERANGE ? "the gradient or a product is NaN or infinite"
                                     : pc_strerror(rc));
    }
    lbufs_free(&b);
    return rc;
}

/* powersgd's slot of pc_cost_measure_codecs: its matrices among the tensors (whole, their
 * gradients read in place), else zero rates. */
static int measure_matrices(const pc_plan_tensor_t *tensors, int ntensors,
                            size_t compress_min_bytes, const pc_codec_spec_t *spec, int reps,
                            pc_cost_codec_rate_t *rate, pc_cost_lowrank_t *lr, int *nmat, char *err,
                            size_t errlen)
{
    *rate = (pc_cost_codec_rate_t){.density = 1.0};
    *lr = (pc_cost_lowrank_t){.spec = *spec};
    *nmat = 0;
    if (spec->id != PC_CODEC_POWERSGD)
        return PC_OK;
    const float **g = malloc(sizeof(*g) * (size_t)ntensors);
    size_t *n = malloc(sizeof(size_t) * (size_t)ntensors * 2), *rows = n ? n + ntensors : NULL;
    if (!g || !n) {
        free(g);
        free(n);
        return pc_error_fmt(PC_ENOMEM, err, errlen, "measure codecs: out of memory");
    }
    for (int t = 0; t < ntensors; t++)
        if (tensors[t].n * sizeof(float) >= compress_min_bytes &&
            pc_codec_lowrank_fits(spec, tensors[t].whole_rows, tensors[t].n)) {
            g[*nmat] = tensors[t].grad;
            n[*nmat] = tensors[t].n;
            rows[(*nmat)++] = tensors[t].whole_rows;
        }
    int rc = *nmat ? pc_cost_measure_lowrank(spec, g, n, rows, *nmat, reps, rate, lr, err, errlen)
                   : PC_OK;
    free(g);
    free(n);
    return rc;
}

int pc_cost_measure_codecs(const pc_plan_tensor_t *tensors, int ntensors, size_t chunk_bytes,
                           size_t compress_min_bytes, const pc_codec_spec_t *specs, int reps,
                           pc_cost_codec_rate_t *out, pc_cost_lowrank_t *lowrank,
                           pc_cost_chunks_t *chunks, char *err, size_t errlen)
{
    if (!tensors || ntensors < 1 || chunk_bytes < sizeof(float) || !specs || reps < 1 || !out ||
        !lowrank || !chunks)
        return pc_error_fmt(PC_EINVAL, err, errlen, "measure codecs: bad arguments");
    for (int t = 0; t < ntensors; t++)
        if (!tensors[t].grad)
            return pc_error_fmt(PC_EINVAL, err, errlen, "measure codecs: tensor %d has no gradient",
                                t);
        else if (tensors[t].whole_rows && tensors[t].n % tensors[t].whole_rows)
            return pc_error_fmt(PC_EINVAL, err, errlen,
                                "measure codecs: tensor %d: %zu rows do not divide its %zu "
                                "elements",
                                t, tensors[t].whole_rows, tensors[t].n);
    /* Every codec but powersgd on the chunks as they are cut without whole matrices. */
    pc_plan_tensor_t *plain = malloc(sizeof(*plain) * (size_t)ntensors);
    if (!plain)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "measure codecs: out of memory");
    for (int t = 0; t < ntensors; t++) {
        plain[t] = tensors[t];
        plain[t].whole_rows = 0;
    }
    pc_plan_t *plan = NULL;
    int rc = pc_plan_create(plain, ntensors, chunk_bytes / sizeof(float), 1, &plan);
    free(plain);
    if (rc != PC_OK)
        return pc_error_fmt(rc, err, errlen, "measure codecs: cannot plan the chunks: %s",
                            pc_strerror(rc));
    /* The gradient copied chunk after chunk into one buffer (a chunk may span small
     * tensors, and tensors need not be adjacent): all chunks from `all`, then the big ones
     * (at least compress_min_bytes) again from `big`. */
    size_t total = 0, nbig_elems = 0, most = 0;
    int nbig = 0;
    for (int i = 0; i < plan->nchunks; i++) {
        size_t n = plan->chunks[i].n;
        total += n;
        if (n * sizeof(float) >= compress_min_bytes) {
            nbig_elems += n;
            nbig++;
        }
        most = n > most ? n : most;
    }
    size_t *all_n = malloc(sizeof(size_t) * (size_t)plan->nchunks * 2);
    float *all = malloc(sizeof(float) * (total + nbig_elems));
    if (!all_n || !all) {
        rc = pc_error_fmt(PC_ENOMEM, err, errlen, "measure codecs: out of memory");
        goto out;
    }
    size_t *big_n = all_n + plan->nchunks;
    float *big = all + total, *a = all, *b = big;
    nbig = 0;
    for (int i = 0; i < plan->nchunks; i++) {
        const pc_plan_chunk_t *k = &plan->chunks[i];
        float *start = a;
        size_t off = k->offset, left = k->n;
        for (int t = k->first_tensor; t <= k->last_tensor && left > 0; t++, off = 0) {
            size_t take = tensors[t].n - off < left ? tensors[t].n - off : left;
            memcpy(a, tensors[t].grad + off, sizeof(float) * take);
            a += take;
            left -= take;
        }
        all_n[i] = k->n;
        if (k->n * sizeof(float) >= compress_min_bytes) {
            memcpy(b, start, sizeof(float) * k->n);
            b += k->n;
            big_n[nbig++] = k->n;
        }
    }
    *chunks = (pc_cost_chunks_t){
        .nchunks = plan->nchunks, .ncompressed = nbig, .elements = total, .largest = most};
    for (int q = 0; q < PC_COST_CODECS && rc == PC_OK; q++) {
        bool dense = q == PC_COST_CODEC_NONE || nbig == 0;
        if (q == PC_COST_CODEC_POWERSGD)
            rc = measure_matrices(tensors, ntensors, compress_min_bytes, &specs[q], reps, &out[q],
                                  lowrank, &chunks->nmatrices, err, errlen);
        else
            rc = pc_cost_measure_codec(&specs[q], dense ? all : big, dense ? all_n : big_n,
                                       dense ? plan->nchunks : nbig, reps, &out[q], err, errlen);
    }
out:
    free(all_n);
    free(all);
    pc_plan_destroy(plan);
    return rc;
}

/* Heavy-tailed gradients, as pc-bench compress draws them: |x| = 1e-3 u^-1.2. */
static void heavy(float *x, size_t n, uint64_t stream)
{
    pc_philox_t g;
    pc_philox_init(&g, 2022, stream, 0);
    for (size_t i = 0; i < n; i++) {
        uint32_t a = pc_philox_next(&g);
        float u = pc_philox_uniform(a | 1);
        x[i] = ((a & 1) ? -1e-3f : 1e-3f) * powf(u, -1.2f);
    }
}

/* Most bytes of chunk state (parameters, momentum, aggregate, a worker's copy: 16 bytes
 * per element) the server measurement cycles through: 1 GiB, far beyond any cache, so
 * that a larger share cannot change the rate. */
#define SERVER_STATE_MAX ((size_t)1 << 30)

/* Everything the server measurement holds, freed in one place. The chunks' state is K
 * chunks of n elements end to end in each of p, mom, agg and p2. */
typedef struct sbufs {
    float *grad, *p, *mom, *agg, *p2;
    uint32_t *changed;
    uint8_t *dense_msg, *msgs[SERVER_MSGS], *pull;
    size_t dense_len, lens[SERVER_MSGS];
    rt_grad_t grads[SERVER_MSGS];
    double *t;
    rt_sparse_t sp;
    pc_codec_t *none, *topk;
} sbufs_t;

static void sbufs_free(sbufs_t *b)
{
    free(b->grad);
    free(b->p);
    free(b->mom);
    free(b->agg);
    free(b->p2);
    free(b->changed);
    free(b->dense_msg);
    for (int i = 0; i < SERVER_MSGS; i++)
        free(b->msgs[i]);
    free(b->pull);
    free(b->t);
    pc_rt__sparse_free(&b->sp);
    pc_codec_destroy(b->none);
    pc_codec_destroy(b->topk);
}

/* Compress grad (n) with codec c into a new message (*msg, *len). */
static int make_msg(pc_codec_t *c, const float *grad, size_t n, uint8_t **msg, size_t *len)
{
    pc_codec_state_t *st = NULL;
    size_t cap = pc_codec_max_bytes(c, n);
    int rc = pc_codec_state_create(c, 0, n, &st);
    if (rc == PC_OK && !(*msg = malloc(cap)))
        rc = PC_ENOMEM;
    if (rc == PC_OK)
        rc = pc_codec_compress(c, st, grad, 0, *msg, cap, len);
    pc_codec_state_destroy(st);
    return rc;
}

/* Check messages [0, m) (header and payload, as the server does on arrival) and aggregate
 * them sparsely into agg (n); *secs += the time of both. The aggregate's touched entries
 * are cleared afterwards (not timed). PC_OK, or the check's or the aggregation's error. */
static int time_sparse(sbufs_t *b, int m, float *agg, size_t n, double *secs, char *err,
                       size_t errlen)
{
    pc_codec_expect_t want = {.chunk = 0, .n = (uint32_t)n, .any_iteration = true};
    int failed = 0, rc = PC_OK;
    int64_t t0 = pc_time_ns();
    for (int w = 0; w < m && rc == PC_OK; w++)
        if ((rc = pc_rt__grad_read(b->msgs[w], b->lens[w], &b->grads[w], err, errlen)) == PC_OK)
            rc = pc_rt__grad_check(b->topk, &b->grads[w], &want, err, errlen);
    if (rc == PC_OK)
        rc = pc_rt__grad_aggregate_sparse(&b->sp, b->topk, b->grads, m, 1.0f / (float)m, agg, n,
                                          &failed, err, errlen);
    *secs += secs_since(t0);
    for (size_t j = 0; rc == PC_OK && j < b->sp.ntouched; j++)
        agg[b->sp.touched[j]] = 0.0f;
    return rc;
}

/* The server measurement's inputs: the two codecs, K chunks of n parameters (the same
 * heavy-tailed values in each), the scratch, and the messages: SERVER_MSGS top-k ones
 * from simulated workers whose gradients differ (each its own Philox stream: top-k
 * supports that overlap as little as independent draws do) and one dense. The messages
 * are the same for every chunk: they have just arrived (warm), while each chunk's state
 * is cold in its turn. The caller frees b (sbufs_free) whatever this returns. */
static int server_bufs(sbufs_t *b, size_t n, size_t K, int reps, char *err, size_t errlen)
{
    pc_codec_spec_t none, topk;
    char spec[64];
    snprintf(spec, sizeof(spec), "topk:ratio=%g", SERVER_RATIO);
    int rc = pc_codec_spec_parse("none", &none, err, errlen);
    if (rc == PC_OK)
        rc = pc_codec_spec_parse(spec, &topk, err, errlen);
    if (rc == PC_OK && (rc = pc_codec_create(&none, &b->none)) == PC_OK)
        rc = pc_codec_create(&topk, &b->topk);
    if (rc != PC_OK)
        return pc_error_fmt(rc, err, errlen, "measure server: codecs: %s", pc_strerror(rc));
    b->grad = malloc(sizeof(float) * n);
    b->p = malloc(sizeof(float) * n * K);
    b->p2 = malloc(sizeof(float) * n * K);
    b->mom = calloc(n * K, sizeof(float));
    b->agg = calloc(n * K, sizeof(float));
    b->changed = malloc(sizeof(uint32_t) * n);
    b->pull = malloc(pc_rt__pull_max_bytes(n));
    b->t = calloc((size_t)reps * 7, sizeof(double));
    if (!b->grad || !b->p || !b->p2 || !b->mom || !b->agg || !b->changed || !b->pull || !b->t)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "measure server: out of memory for %zu x %zu",
                            K, n);
    heavy(b->p, n, 99);
    for (size_t k = 1; k < K; k++)
        memcpy(b->p + k * n, b->p, sizeof(float) * n);
    for (int w = 0; w < SERVER_MSGS && rc == PC_OK; w++) {
        heavy(b->grad, n, (uint64_t)w);
        rc = make_msg(b->topk, b->grad, n, &b->msgs[w], &b->lens[w]);
    }
    if (rc == PC_OK)
        rc = make_msg(b->none, b->grad, n, &b->dense_msg, &b->dense_len);
    if (rc != PC_OK)
        return pc_error_fmt(rc, err, errlen, "measure server: messages: %s", pc_strerror(rc));
    return PC_OK;
}

/* One pass of the server's work on chunk k (n parameters), each part's time added to its
 * figure: at[0] the dense check and add, at[1] clearing the sum and the dense step with
 * momentum, at[2] one sparse message, at[3] all SERVER_MSGS, at[4] the sparse step, at[5]
 * and at[6] a dense and a sparse pull (encoded by the server, applied by a worker). *nt:
 * the union's size. */
static int time_chunk(sbufs_t *b, size_t k, size_t n, double *const at[7], size_t *nt, char *err,
                      size_t errlen)
{
    pc_optim_cfg_t mom = {.lr = 1e-6, .momentum = 0.9}, plain = {.lr = 1e-6};
    pc_codec_expect_t want = {.chunk = 0, .n = (uint32_t)n, .any_iteration = true};
    float *p = b->p + k * n, *mo = b->mom + k * n, *agg = b->agg + k * n, *p2 = b->p2 + k * n;
    int rc;
    /* Dense path: clear the sum, check and add a message, step with momentum. */
    int64_t t0 = pc_time_ns();
    memset(agg, 0, sizeof(float) * n);
    *at[1] += secs_since(t0);
    rt_grad_t g;
    t0 = pc_time_ns();
    if ((rc = pc_rt__grad_read(b->dense_msg, b->dense_len, &g, err, errlen)) != PC_OK ||
        (rc = pc_rt__grad_check(b->none, &g, &want, err, errlen)) != PC_OK ||
        (rc = pc_rt__grad_apply(b->none, &g, 0.5f, agg, err, errlen)) != PC_OK)
        return rc;
    *at[0] += secs_since(t0);
    t0 = pc_time_ns();
    pc_optim_sgd(&mom, 1e-6f, p, mo, agg, n, b->changed);
    *at[1] += secs_since(t0);
    memset(agg, 0, sizeof(float) * n); /* the sparse path's sum is all zero */
    /* Sparse path: one message, then all of them. */
    if ((rc = time_sparse(b, 1, agg, n, at[2], err, errlen)) != PC_OK ||
        (rc = time_sparse(b, SERVER_MSGS, agg, n, at[3], err, errlen)) != PC_OK)
        return rc;
    *nt = b->sp.ntouched;
    /* time_sparse cleared agg; refill the union's entries for the step. */
    for (size_t j = 0; j < *nt; j++)
        agg[b->sp.touched[j]] = 1e-3f;
    t0 = pc_time_ns();
    pc_rt__server_sparse_update(&b->sp, &plain, 1e-6f, p, agg); /* the server's step */
    *at[4] += secs_since(t0);
    t0 = pc_time_ns();
    size_t len = pc_rt__pull_encode(b->pull, 0, 0, p, n, NULL, 0, PC_PULL_DENSE, 0);
    if ((rc = pc_rt__pull_apply(b->pull, len, 0, 0, p2, n, NULL, err, errlen)) != PC_OK)
        return rc;
    *at[5] += secs_since(t0);
    t0 = pc_time_ns();
    len = pc_rt__pull_encode(b->pull, 0, 0, p, n, b->sp.touched, *nt, PC_PULL_SPARSE, 0);
    if ((rc = pc_rt__pull_apply(b->pull, len, 0, 0, p2, n, NULL, err, errlen)) != PC_OK)
        return rc;
    *at[6] += secs_since(t0);
    return PC_OK;
}

/* The rates from the repetitions' times (t: reps of each of time_chunk's seven figures,
 * over K chunks of n), the union's growth u (after 1..SERVER_MSGS messages), one
 * message's entries k1 and the union's nt. Merging message w + 1 into the union of w
 * reads both lists: U_w + k indices. The merges' time is all - SERVER_MSGS x one, per
 * repetition (paired: both ran within microseconds of each other, under the same load),
 * then the median. */
static pc_cost_server_rate_t server_rates(double *t, int reps, const double *u, size_t k1,
                                          size_t nt, size_t n, size_t K)
{
    double *t_dense = t, *t_step = t + reps, *t_one = t + 2 * reps, *t_all = t + 3 * reps,
           *t_sstep = t + 4 * reps, *t_pd = t + 5 * reps, *t_ps = t + 6 * reps;
    double merged = 0, elems = (double)n * (double)K;
    for (int m = 1; m < SERVER_MSGS; m++)
        merged += u[m - 1] + (double)k1;
    double one = median(t_one, reps), *diff = t_all;
    for (int r = 0; r < reps; r++)
        diff[r] = t_all[r] - SERVER_MSGS * t_one[r];
    double merges = median(diff, reps) / (double)K;
    return (pc_cost_server_rate_t){
        .agg_dense = median(t_dense, reps) / elems,
        .agg_sparse = one / ((double)k1 * (double)K),
        .merge = merges > 0 ? merges / merged : 0,
        .step_dense = median(t_step, reps) / elems,
        .step_sparse = median(t_sstep, reps) / ((double)nt * (double)K),
        .pull_dense = median(t_pd, reps) / elems,
        .pull_sparse = median(t_ps, reps) / ((double)nt * (double)K),
    };
}

int pc_cost_measure_server(size_t n, size_t total, int reps, pc_cost_server_rate_t *out, char *err,
                           size_t errlen)
{
    if (n < 1024 || n > PC_CODEC_MAX_N || total < n || reps < 1 || !out)
        return pc_error_fmt(PC_EINVAL, err, errlen, "measure server: bad arguments");
    /* K chunks of n: the server's share, one pass over them per repetition. */
    size_t K = (total + n - 1) / n, kmax = SERVER_STATE_MAX / (16 * n);
    K = K < kmax ? K : kmax > 0 ? kmax : 1;
    sbufs_t b = {0};
    int rc = server_bufs(&b, n, K, reps, err, errlen);
    double scratch[7] = {0};
    double u[SERVER_MSGS] = {0}; /* union sizes after 1..SERVER_MSGS messages */
    size_t k1 = 0, nt = 0;
    /* The union's growth, once (not timed), on the first chunk. */
    for (int m = 1; m <= SERVER_MSGS && rc == PC_OK; m++) {
        rc = time_sparse(&b, m, b.agg, n, &scratch[0], err, errlen);
        u[m - 1] = (double)b.sp.ntouched;
    }
    k1 = (size_t)u[0];
    for (int i = -1; i < reps && rc == PC_OK; i++) {
        /* i = -1: a warm-up pass, its times in scratch (first touches of fresh pages). */
        double *at[7];
        for (int f = 0; f < 7; f++)
            at[f] = i >= 0 ? &b.t[(size_t)f * (size_t)reps + (size_t)i] : &scratch[f];
        for (size_t k = 0; k < K && rc == PC_OK; k++)
            rc = time_chunk(&b, k, n, at, &nt, err, errlen);
    }
    if (rc == PC_OK && (k1 == 0 || nt == 0))
        rc = pc_error_fmt(PC_ERANGE, err, errlen, "measure server: empty top-k messages");
    if (rc == PC_OK)
        *out = server_rates(b.t, reps, u, k1, nt, n, K);
    sbufs_free(&b);
    return rc;
}
