/* codec_lowrank: powersgd, the two-round codec (pc_codec.h, "PowerSGD"): its factor
 * messages (the ops table) and the worker's steps of a matrix chunk. The numerics are
 * pc_lowrank's. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec_impl.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_lowrank.h"

/* ---- the factor messages -------------------------------------------------------------- */

/* A factor has rows x rank or cols x rank floats, under n when the matrix fits
 * (pc_codec_lowrank_fits: n >= (rows + cols) x rank). */
static size_t lr_max_payload(const pc_codec_t *c, size_t n)
{
    (void)c;
    return 4 * n;
}

/* pc_codec_compress has no single message to make: the rounds are the functions below. */
static int lr_compress(pc_codec_t *c, pc_codec_state_t *st, const float *grad, pc_wire_header_t *h,
                       uint8_t *payload, size_t cap)
{
    (void)c, (void)st, (void)grad, (void)h, (void)payload, (void)cap;
    return PC_EINVAL;
}

/* pc_codec__check has checked the round's flag and entries against the receiver's
 * expectation; here: the bytes. */
static int lr_validate(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                       char *err, size_t errlen)
{
    (void)c;
    uint32_t bits;
    memcpy(&bits, &h->scale, sizeof(bits));
    if (h->entries > h->n || h->payload != 4 * (size_t)h->entries || bits != 0)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: powersgd factor of %u entries in %u bytes (scale %g)",
                            h->chunk, h->entries, h->payload, (double)h->scale);
    return pc_codec__f32s_check(h->chunk, payload, h->entries, "factor value", err, errlen);
}

/* dense is the factor's sum (h->entries floats), not the chunk. */
static int lr_apply(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                    float scale, float *dense)
{
    (void)c;
    pc_codec__f32s_add(payload, h->entries, scale, dense);
    return PC_OK;
}

/* The fold (codec_ops_t.fold): for a matrix state with no round of the previous step in
 * flight and past the warm-up, the fold and round 1's product P_w = M Q in one pass
 * (pc_lowrank_fold_project), P_w kept in st->phat for round 1; otherwise the plain fold,
 * and round 1 makes P_w itself with the same kernel (the same bits). */
static int lr_fold(const pc_codec_t *c, pc_codec_state_t *st, const float *grad)
{
    st->projected = false;
    if (!st->q || st->round != 0 || pc_codec_lowrank_warm(&c->spec, st->steps))
        return pc_codec__fold_plain(c, st, grad);
    float *m = st->residual;
    const float *g = grad;
    if (!c->spec.ef) { /* M is the gradient: the plain fold's copy, which the rounds read */
        int rc = pc_codec__fold_plain(c, st, grad);
        if (rc != PC_OK)
            return rc;
        m = st->stage;
        g = NULL;
    }
    pc_lowrank_transpose(st->qt, st->q, st->cols, c->spec.rank);
    int rc = pc_lowrank_fold_project(m, g, st->rows, st->cols, st->qt, c->spec.rank, st->phat);
    st->projected = rc == PC_OK;
    return rc;
}

const codec_ops_t pc_codec_ops_powersgd = {.max_payload = lr_max_payload,
                                           .compress = lr_compress,
                                           .validate = lr_validate,
                                           .apply = lr_apply,
                                           .fold = lr_fold};

/* ---- matrix states ------------------------------------------------------------------- */

bool pc_codec_lowrank_fits(const pc_codec_spec_t *s, size_t rows, size_t n)
{
    if (!s || s->id != PC_CODEC_POWERSGD || rows < 2 || n % rows != 0 || n / rows < 2)
        return false;
    size_t cols = n / rows, r = (size_t)s->rank;
    if (r > rows || r > cols)
        return false;
    return (double)n > s->min_gain * (double)(rows + cols) * (double)r;
}

bool pc_codec_lowrank_warm(const pc_codec_spec_t *s, uint64_t steps)
{
    return s->warmup > 0 && steps < (uint64_t)s->warmup;
}

int pc_codec__lowrank_state_init(const pc_codec_t *c, pc_codec_state_t *st, size_t rows)
{
    size_t r = (size_t)c->spec.rank;
    st->rows = rows;
    st->cols = st->n / rows;
    st->q = malloc(sizeof(float) * st->cols * r);
    st->phat = calloc(rows * r, sizeof(float));
    st->qt = malloc(sizeof(float) * st->cols * r);
    double *work = malloc(sizeof(double) * pc_lowrank_work_doubles(st->cols, c->spec.rank));
    if (!st->q || !st->phat || !st->qt || !work) {
        free(work);
        return PC_ENOMEM; /* the caller destroys st, q, phat and qt with it */
    }
    /* Stream: the chunk, so that every worker starts every matrix from the same Q; its
     * columns orthonormal, as torch's hook starts. Normal draws are finite. */
    pc_lowrank_init(st->q, st->cols, c->spec.rank, c->spec.seed, st->chunk);
    pc_lowrank_orthonormalise(st->q, st->cols, c->spec.rank, work);
    free(work);
    return PC_OK;
}

size_t pc_codec_state_rows(const pc_codec_state_t *st)
{
    return st->rows;
}

float *pc_codec_state_lowrank_q(pc_codec_state_t *st)
{
    return st->q;
}

float *pc_codec_state_lowrank_phat(pc_codec_state_t *st)
{
    return st->phat;
}

/* ---- the rounds ---------------------------------------------------------------------- */

/* A factor message of `entries` floats f, for round `round`, into out. */
static void factor_message(pc_codec_t *c, const pc_codec_state_t *st, int round, uint64_t iteration,
                           const float *f, size_t entries, uint8_t *out, size_t *len)
{
    pc_wire_header_t h = {.magic = PC_WIRE_MAGIC,
                          .version = PC_WIRE_VERSION,
                          .codec = PC_CODEC_POWERSGD,
                          .flags = round == 2 ? PC_WIRE_F_ROUND2 : 0,
                          .chunk = st->chunk,
                          .n = (uint32_t)st->n,
                          .iteration = iteration,
                          .entries = (uint32_t)entries,
                          .payload = (uint32_t)(4 * entries)};
    pc_wire_header_write(&h, out);
    pc_wire_put_f32s(out + PC_WIRE_HEADER_BYTES, f, entries);
    *len = PC_WIRE_HEADER_BYTES + 4 * entries;
    c->stats.messages++;
    c->stats.entries += entries;
    c->stats.bytes += *len;
}

/* The checks every round shares: a matrix state of this codec, room for the message, the
 * fold's outcome, the round before this one done. */
static int round_ok(const pc_codec_t *c, const pc_codec_state_t *st, int round, size_t cap)
{
    if (!c || !st || c->spec.id != PC_CODEC_POWERSGD || !st->q ||
        cap < PC_WIRE_HEADER_BYTES + lr_max_payload(c, st->n))
        return PC_EINVAL;
    if (st->folded == PC_CODEC_FOLD_NONFINITE)
        return PC_ERANGE;
    if (st->folded != PC_CODEC_FOLD_OK || st->round != round - 1)
        return PC_EINVAL;
    return PC_OK;
}

/* Round `round` on a folded state: P_w = M Q (into phat, which round 2 overwrites with the
 * server's P^ anyway) or Q_w = M^T P^ (into the codec's scratch: Q stays the warm start
 * until finish), then its message. */
static int round_send(pc_codec_t *c, pc_codec_state_t *st, int round, uint64_t iteration, void *out,
                      size_t cap, size_t *len)
{
    int rc = round_ok(c, st, round, cap);
    if (rc != PC_OK || !out || !len)
        return rc != PC_OK ? rc : PC_EINVAL;
    size_t r = (size_t)c->spec.rank, entries = (round == 1 ? st->rows : st->cols) * r;
    float *m = pc_codec__source(c, st, NULL);
    if (round == 2 && (rc = pc_codec__reserve_tmp(c, entries)) != PC_OK)
        return rc;
    float *f = round == 1 ? st->phat : c->tmp;
    if (round == 2)
        rc = pc_lowrank_backproject(m, st->rows, st->cols, st->phat, c->spec.rank, f);
    else if (!st->projected) { /* the fold could not make P_w: the same kernel, M only read */
        pc_lowrank_transpose(st->qt, st->q, st->cols, c->spec.rank);
        rc = pc_lowrank_fold_project(m, NULL, st->rows, st->cols, st->qt, c->spec.rank, f);
    }
    st->projected = false;
    if (rc == PC_OK && round == 1 && !pc_codec__fold_finite(f, NULL, entries))
        rc = PC_ERANGE; /* the product overflowed */
    if (rc != PC_OK)
        return rc;
    factor_message(c, st, round, iteration, f, entries, out, len);
    st->round = round;
    return PC_OK;
}

int pc_codec_lowrank_p(pc_codec_t *c, pc_codec_state_t *st, uint64_t iteration, void *out,
                       size_t cap, size_t *len)
{
    return round_send(c, st, 1, iteration, out, cap, len);
}

int pc_codec_lowrank_q(pc_codec_t *c, pc_codec_state_t *st, uint64_t iteration, void *out,
                       size_t cap, size_t *len)
{
    return round_send(c, st, 2, iteration, out, cap, len);
}

int pc_codec_lowrank_finish(pc_codec_t *c, pc_codec_state_t *st, const float *q_agg,
                            pc_codec_row_fn fn, void *ud)
{
    if (!c || !st || !q_agg || c->spec.id != PC_CODEC_POWERSGD || !st->q || st->round != 2)
        return PC_EINVAL;
    size_t r = (size_t)c->spec.rank, cols = st->cols;
    int rc = pc_codec__reserve_tmp(c, pc_lowrank_expand_work(cols, c->spec.rank));
    if (rc != PC_OK)
        return rc;
    memcpy(st->q, q_agg, sizeof(float) * cols * r);
    /* One row of P^ Q^T at a time: the residual's row and the caller's step both read it,
     * so the product is made once and n floats of scratch are never needed. */
    float *qt = c->tmp, *row = c->tmp + cols * r;
    pc_lowrank_transpose(qt, st->q, cols, c->spec.rank);
    for (size_t i = 0; i < st->rows; i++) {
        pc_lowrank_row(row, st->phat + i * r, qt, cols, c->spec.rank);
        if (st->residual) {
            float *restrict ri = st->residual + i * cols;
            for (size_t j = 0; j < cols; j++)
                ri[j] -= row[j];
        }
        if (fn)
            fn(ud, i, row);
    }
    st->round = 0;
    st->steps++;
    st->folded = PC_CODEC_FOLD_NONE;
    return PC_OK;
}

int pc_codec_lowrank_dense(pc_codec_t *c, pc_codec_state_t *st, uint64_t iteration, void *out,
                           size_t cap, size_t *len)
{
    int rc = round_ok(c, st, 1, cap);
    if (rc != PC_OK || !out || !len)
        return rc != PC_OK ? rc : PC_EINVAL;
    const float *m = pc_codec__source(c, st, NULL);
    pc_wire_header_t h = {.magic = PC_WIRE_MAGIC,
                          .version = PC_WIRE_VERSION,
                          .codec = PC_CODEC_NONE,
                          .chunk = st->chunk,
                          .n = (uint32_t)st->n,
                          .iteration = iteration,
                          .entries = (uint32_t)st->n,
                          .payload = (uint32_t)(4 * st->n)};
    uint8_t *msg = out;
    pc_wire_header_write(&h, msg);
    pc_wire_put_f32s(msg + PC_WIRE_HEADER_BYTES, m, st->n);
    *len = PC_WIRE_HEADER_BYTES + 4 * st->n;
    if (st->residual) /* sent whole: nothing is left over */
        memset(st->residual, 0, sizeof(float) * st->n);
    st->projected = false;
    st->steps++;
    st->folded = PC_CODEC_FOLD_NONE;
    c->stats.messages++;
    c->stats.entries += st->n;
    c->stats.bytes += *len;
    return PC_OK;
}
