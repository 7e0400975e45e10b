/* runtime_proto: encoders and validators of the runtime's messages (see runtime_proto.h and
 * doc/wire-format.md). No MPI, no state: the fuzz target links this file alone with the
 * codecs. */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "pipecompress/pc_config.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_optim.h"
#include "runtime_proto.h"

/* Whether any of n little-endian binary32 values at src is NaN or infinite: one
 * branch-free pass (GCC vectorises it). */
static bool any_nonfinite(const uint8_t *src, size_t n)
{
    uint32_t bad = 0;
    for (size_t j = 0; j < n; j++)
        bad |= (pc_wire_get_u32(src + 4 * j) & 0x7f800000u) == 0x7f800000u;
    return bad != 0;
}

/* binary64 as its little-endian bytes (the host's double is IEEE 754). */
static void put_f64(uint8_t *p, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    pc_wire_put_u64(p, u);
}

static double get_f64(const uint8_t *p)
{
    uint64_t u = pc_wire_get_u64(p);
    double v;
    memcpy(&v, &u, sizeof(v));
    return v;
}

/* ---- layout ------------------------------------------------------------------------------ */

void pc_rt__layout_encode(uint8_t *buf, const pc_plan_t *plan, uint64_t resume)
{
    pc_wire_put_u32(buf, PC_RT_LAYOUT_MAGIC);
    pc_wire_put_u32(buf + 4, (uint32_t)plan->nchunks);
    pc_wire_put_u64(buf + 8, resume);
    uint8_t *e = buf + PC_RT_LAYOUT_HEAD_BYTES;
    for (int c = 0; c < plan->nchunks; c++, e += PC_RT_LAYOUT_CHUNK_BYTES) {
        pc_wire_put_u32(e, (uint32_t)plan->chunks[c].n);
        pc_wire_put_u32(e + 4, (uint32_t)plan->chunks[c].server);
        pc_wire_put_u32(e + 8, (uint32_t)plan->chunks[c].rows);
    }
}

int pc_rt__layout_parse(const uint8_t *msg, size_t len, int nservers, rt_layout_t *out, char *err,
                        size_t errlen)
{
    if (len < PC_RT_LAYOUT_HEAD_BYTES)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "layout of %zu bytes is shorter than its %d-byte head", len,
                            PC_RT_LAYOUT_HEAD_BYTES);
    uint32_t magic = pc_wire_get_u32(msg), nchunks = pc_wire_get_u32(msg + 4);
    if (magic != PC_RT_LAYOUT_MAGIC)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "bad layout magic 0x%08x", magic);
    if (nchunks > PC_RT_MAX_CHUNKS)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "layout of %u chunks, at most %u", nchunks,
                            PC_RT_MAX_CHUNKS);
    if (len != pc_rt__layout_bytes(nchunks))
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "layout of %u chunks in %zu bytes, expected %zu", nchunks, len,
                            pc_rt__layout_bytes(nchunks));
    rt_layout_t l = {.nchunks = nchunks,
                     .resume = pc_wire_get_u64(msg + 8),
                     .chunks = msg + PC_RT_LAYOUT_HEAD_BYTES};
    for (uint32_t c = 0; c < nchunks; c++) {
        const uint8_t *e = l.chunks + PC_RT_LAYOUT_CHUNK_BYTES * (size_t)c;
        uint32_t n = pc_wire_get_u32(e), server = pc_wire_get_u32(e + 4),
                 rows = pc_wire_get_u32(e + 8);
        if (n == 0 || n > PC_CODEC_MAX_N || nservers < 1 || server >= (uint32_t)nservers ||
            (rows && n % rows))
            return pc_error_fmt(PC_EFORMAT, err, errlen,
                                "layout names a bad chunk %u (%u elements, %u rows, server %u of "
                                "%d)",
                                c, n, rows, server, nservers);
    }
    *out = l;
    return PC_OK;
}

/* ---- init -------------------------------------------------------------------------------- */

void pc_rt__init_encode(uint8_t *buf, const float *p, size_t n)
{
    pc_wire_put_f32s(buf, p, n);
}

int pc_rt__init_apply(const uint8_t *msg, size_t len, uint32_t chunk, float *p, size_t n, char *err,
                      size_t errlen)
{
    if (len != pc_rt__init_bytes(n))
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: parameters of %zu bytes, expected %zu (%zu elements)", chunk,
                            len, pc_rt__init_bytes(n), n);
    if (any_nonfinite(msg, n))
        return pc_error_fmt(PC_EFORMAT, err, errlen, "chunk %u: a parameter is not finite", chunk);
    pc_wire_get_f32s(p, msg, n);
    return PC_OK;
}

/* ---- grad -------------------------------------------------------------------------------- */

int pc_rt__grad_read(const uint8_t *msg, size_t len, rt_grad_t *g, char *err, size_t errlen)
{
    g->msg = msg;
    g->len = len;
    return pc_wire_header_read(msg, len, &g->h, err, errlen);
}

int pc_rt__grad_check(const pc_codec_t *c, const rt_grad_t *g, const pc_codec_expect_t *want,
                      char *err, size_t errlen)
{
    return pc_codec__check(c, &g->h, g->msg + PC_WIRE_HEADER_BYTES, want, err, errlen);
}

int pc_rt__grad_apply(const pc_codec_t *c, const rt_grad_t *g, float scale, float *dense, char *err,
                      size_t errlen)
{
    return pc_codec__apply(c, &g->h, g->msg + PC_WIRE_HEADER_BYTES, scale, dense, err, errlen);
}

bool pc_rt__grad_sparse(const pc_codec_t *c)
{
    return pc_codec__sparse(c);
}

/* Grow *buf to hold want entries (PC_OK or PC_ENOMEM, *buf kept). */
static int reserve_u32(uint32_t **buf, size_t *cap, size_t want)
{
    if (*cap >= want)
        return PC_OK;
    uint32_t *q = realloc(*buf, sizeof(uint32_t) * (want ? want : 1));
    if (!q)
        return PC_ENOMEM;
    *buf = q;
    *cap = want;
    return PC_OK;
}

/* out = a union b, for ascending lists of distinct indices; returns its length. */
static size_t merge_union(const uint32_t *a, size_t na, const uint32_t *b, size_t nb, uint32_t *out)
{
    size_t i = 0, j = 0, o = 0;
    while (i < na && j < nb) {
        uint32_t x = a[i], y = b[j];
        out[o++] = x < y ? x : y;
        i += x <= y;
        j += y <= x;
    }
    while (i < na)
        out[o++] = a[i++];
    while (j < nb)
        out[o++] = b[j++];
    return o;
}

int pc_rt__grad_aggregate_sparse(rt_sparse_t *sp, const pc_codec_t *c, const rt_grad_t *grads,
                                 int nworkers, float scale, float *agg, size_t n, int *failed,
                                 char *err, size_t errlen)
{
    sp->ntouched = 0;
    for (int w = 0; w < nworkers; w++) {
        const rt_grad_t *g = &grads[w];
        size_t k = g->h.entries, most = sp->ntouched + k < n ? sp->ntouched + k : n;
        if (reserve_u32(&sp->list, &sp->cap_list, k) != PC_OK ||
            reserve_u32(&sp->touched, &sp->cap_touched, most) != PC_OK ||
            reserve_u32(&sp->scratch, &sp->cap_scratch, most) != PC_OK) {
            *failed = w;
            return pc_error_fmt(PC_ENOMEM, err, errlen, "chunk %u: out of memory for %zu indices",
                                g->h.chunk, most);
        }
        int rc = pc_codec__apply_indices(c, &g->h, g->msg + PC_WIRE_HEADER_BYTES, scale, agg,
                                         sp->list, err, errlen);
        if (rc != PC_OK) {
            *failed = w;
            return rc;
        }
        if (w == 0) {
            memcpy(sp->touched, sp->list, sizeof(uint32_t) * k);
            sp->ntouched = k;
        } else {
            sp->ntouched = merge_union(sp->touched, sp->ntouched, sp->list, k, sp->scratch);
            uint32_t *t = sp->touched; /* the union becomes touched; the old list scratch */
            size_t tc = sp->cap_touched;
            sp->touched = sp->scratch;
            sp->cap_touched = sp->cap_scratch;
            sp->scratch = t;
            sp->cap_scratch = tc;
        }
    }
    return PC_OK;
}

void pc_rt__sparse_free(rt_sparse_t *sp)
{
    free(sp->touched);
    free(sp->scratch);
    free(sp->list);
    memset(sp, 0, sizeof(*sp));
}

/* ---- pull -------------------------------------------------------------------------------- */

size_t pc_rt__pull_encode(uint8_t *buf, uint32_t chunk, uint64_t it, const float *p, size_t n,
                          const uint32_t *changed, size_t nchanged, int mode, uint64_t server_ns)
{
    /* A sparse entry costs 8 bytes, a dense one 4: sparse must at least halve the entries
     * to pay; auto wants it to quarter them (decode work, margin). */
    bool sparse =
        (mode == PC_PULL_SPARSE && nchanged * 2 < n) || (mode == PC_PULL_AUTO && nchanged * 4 < n);
    pc_wire_header_t h = {.magic = PC_WIRE_MAGIC,
                          .version = PC_WIRE_VERSION,
                          .codec = sparse ? PC_RT_PULL_SPARSE : PC_RT_PULL_DENSE,
                          .chunk = chunk,
                          .n = (uint32_t)n,
                          .iteration = it};
    pc_wire_put_u64(buf + PC_WIRE_HEADER_BYTES,
                    server_ns < PC_RT_PULL_MAX_SERVER_NS ? server_ns : PC_RT_PULL_MAX_SERVER_NS);
    uint8_t *q = buf + PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES;
    if (sparse) {
        for (size_t j = 0; j < nchanged; j++)
            pc_wire_put_u32(q + 4 * j, changed[j]);
        q += 4 * nchanged;
        for (size_t j = 0; j < nchanged; j++) {
            uint32_t u;
            memcpy(&u, &p[changed[j]], sizeof(u));
            pc_wire_put_u32(q + 4 * j, u);
        }
        h.entries = (uint32_t)nchanged;
        h.payload = (uint32_t)(PC_RT_PULL_TIME_BYTES + 8 * nchanged);
    } else {
        pc_wire_put_f32s(q, p, n);
        h.entries = (uint32_t)n;
        h.payload = (uint32_t)(PC_RT_PULL_TIME_BYTES + 4 * n);
    }
    pc_wire_header_write(&h, buf);
    return PC_WIRE_HEADER_BYTES + h.payload;
}

int pc_rt__pull_apply(const uint8_t *msg, size_t len, uint32_t chunk, uint64_t it, float *p,
                      size_t n, uint64_t *server_ns, char *err, size_t errlen)
{
    pc_wire_header_t h;
    int rc = pc_wire_header_read(msg, len, &h, err, errlen);
    if (rc != PC_OK)
        return rc;
    if ((h.codec != PC_RT_PULL_DENSE && h.codec != PC_RT_PULL_SPARSE) || h.chunk != chunk ||
        h.n != n || h.iteration != it || h.flags != 0)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "update message (codec %u, chunk %u, n %u, iteration %llu) where "
                            "chunk %u, n %zu, iteration %llu was expected",
                            h.codec, h.chunk, h.n, (unsigned long long)h.iteration, chunk, n,
                            (unsigned long long)it);
    const uint8_t *q = msg + PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES;
    bool dense = h.codec == PC_RT_PULL_DENSE;
    size_t k = dense ? n : h.entries;
    if ((dense && (h.entries != n || h.payload != PC_RT_PULL_TIME_BYTES + 4 * (size_t)n)) ||
        (!dense && h.payload != PC_RT_PULL_TIME_BYTES + 8 * (size_t)h.entries))
        return pc_error_fmt(PC_EFORMAT, err, errlen, "chunk %u: update of %u entries in %u bytes",
                            chunk, h.entries, h.payload);
    uint64_t sns = pc_wire_get_u64(msg + PC_WIRE_HEADER_BYTES);
    if (sns > PC_RT_PULL_MAX_SERVER_NS)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: update names a server time of %llu ns, at most %llu", chunk,
                            (unsigned long long)sns, PC_RT_PULL_MAX_SERVER_NS);
    uint32_t scale_bits; /* +0 exactly: -0 compares equal to 0 but is other bytes */
    memcpy(&scale_bits, &h.scale, sizeof(scale_bits));
    if (scale_bits != 0)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "chunk %u: update with scale %g, not 0", chunk,
                            (double)h.scale);
    const uint8_t *vals = dense ? q : q + 4 * k;
    if (any_nonfinite(vals, k))
        return pc_error_fmt(PC_EFORMAT, err, errlen, "chunk %u: an updated parameter is not finite",
                            chunk);
    if (dense) {
        pc_wire_get_f32s(p, vals, n);
        if (server_ns)
            *server_ns = sns;
        return PC_OK;
    }
    for (size_t j = 0; j < k; j++) {
        uint32_t ix = pc_wire_get_u32(q + 4 * j);
        if (ix >= n || (j > 0 && ix <= pc_wire_get_u32(q + 4 * (j - 1))))
            return pc_error_fmt(PC_EFORMAT, err, errlen,
                                "chunk %u: update index %u out of range or out of order", chunk,
                                ix);
    }
    for (size_t j = 0; j < k; j++) {
        uint32_t u = pc_wire_get_u32(vals + 4 * j);
        memcpy(&p[pc_wire_get_u32(q + 4 * j)], &u, sizeof(u));
    }
    if (server_ns)
        *server_ns = sns;
    return PC_OK;
}

/* ---- powersgd -------------------------------------------------------------------------- */

/* The header checks both powersgd server messages share: codec, chunk, n, iteration,
 * flags, scale +0 (unless any_scale: the caller checks it), entries and payload as given. */
static int factor_header(const uint8_t *msg, size_t len, uint8_t codec, uint16_t flags,
                         uint32_t chunk, uint32_t n, uint64_t it, size_t entries, size_t payload,
                         bool any_scale, pc_wire_header_t *h, char *err, size_t errlen)
{
    int rc = pc_wire_header_read(msg, len, h, err, errlen);
    if (rc != PC_OK)
        return rc;
    const char *what = codec == PC_RT_PULL_PHAT ? "P^" : "matrix update";
    if (h->codec != codec || h->chunk != chunk || h->n != n || h->iteration != it ||
        h->flags != flags)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "%s message (codec %u, chunk %u, n %u, iteration %llu, flags 0x%x) "
                            "where chunk %u, n %u, iteration %llu, flags 0x%x was expected",
                            what, h->codec, h->chunk, h->n, (unsigned long long)h->iteration,
                            h->flags, chunk, n, (unsigned long long)it, flags);
    uint32_t scale_bits;
    memcpy(&scale_bits, &h->scale, sizeof(scale_bits));
    if (h->entries != entries || h->payload != payload || (scale_bits != 0 && !any_scale))
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: %s of %u entries in %u bytes, expected %zu in %zu", chunk,
                            what, h->entries, h->payload, entries, payload);
    return PC_OK;
}

size_t pc_rt__phat_encode(uint8_t *buf, uint32_t chunk, uint32_t n, uint64_t it, const float *phat,
                          size_t entries)
{
    pc_wire_header_t h = {.magic = PC_WIRE_MAGIC,
                          .version = PC_WIRE_VERSION,
                          .codec = PC_RT_PULL_PHAT,
                          .chunk = chunk,
                          .n = n,
                          .iteration = it,
                          .entries = (uint32_t)entries,
                          .payload = (uint32_t)(4 * entries)};
    pc_wire_header_write(&h, buf);
    pc_wire_put_f32s(buf + PC_WIRE_HEADER_BYTES, phat, entries);
    return pc_rt__phat_bytes(entries);
}

int pc_rt__phat_apply(const uint8_t *msg, size_t len, uint32_t chunk, uint32_t n, uint64_t it,
                      float *phat, size_t entries, char *err, size_t errlen)
{
    pc_wire_header_t h;
    int rc = factor_header(msg, len, PC_RT_PULL_PHAT, 0, chunk, n, it, entries, 4 * entries, false,
                           &h, err, errlen);
    if (rc != PC_OK)
        return rc;
    if (any_nonfinite(msg + PC_WIRE_HEADER_BYTES, entries))
        return pc_error_fmt(PC_EFORMAT, err, errlen, "chunk %u: a value of P^ is not finite",
                            chunk);
    pc_wire_get_f32s(phat, msg + PC_WIRE_HEADER_BYTES, entries);
    return PC_OK;
}

size_t pc_rt__pull_lowrank_encode(uint8_t *buf, uint32_t chunk, uint32_t n, uint64_t it, bool dense,
                                  const float *v, size_t nv, uint64_t server_ns,
                                  const rt_lrstep_t *step)
{
    bool lr = step && step->lr >= 0;
    size_t extra = lr ? PC_RT_LOWRANK_LR_BYTES : 0;
    pc_wire_header_t h = {
        .magic = PC_WIRE_MAGIC,
        .version = PC_WIRE_VERSION,
        .codec = PC_RT_PULL_LOWRANK,
        .flags = (uint16_t)((dense ? PC_RT_LOWRANK_F_DENSE : 0) | (lr ? PC_RT_LOWRANK_F_LR : 0)),
        .chunk = chunk,
        .n = n,
        .iteration = it,
        .scale = step && step->coef != 1.0f ? step->coef : 0.0f,
        .entries = (uint32_t)nv,
        .payload = (uint32_t)(PC_RT_PULL_TIME_BYTES + extra + 4 * nv)};
    pc_wire_header_write(&h, buf);
    uint8_t *body = buf + PC_WIRE_HEADER_BYTES;
    pc_wire_put_u64(body,
                    server_ns < PC_RT_PULL_MAX_SERVER_NS ? server_ns : PC_RT_PULL_MAX_SERVER_NS);
    if (lr)
        put_f64(body + PC_RT_PULL_TIME_BYTES, step->lr);
    pc_wire_put_f32s(body + PC_RT_PULL_TIME_BYTES + extra, v, nv);
    return pc_rt__pull_lowrank_bytes(nv, lr);
}

/* The clipping coefficient a matrix's update header carries in its scale (+0: none, 1);
 * PC_EFORMAT unless +0 or in (0, 1), and only on a round-2 update (a dense one is clipped
 * already). A NaN coefficient (torch's for a norm that is not finite: the run diverged) is
 * refused, as a dense chunk's NaN values are. */
static int lowrank_coef(const pc_wire_header_t *h, bool dense, uint32_t chunk, float *coef,
                        char *err, size_t errlen)
{
    uint32_t bits;
    memcpy(&bits, &h->scale, sizeof(bits));
    *coef = 1.0f;
    if (bits == 0)
        return PC_OK;
    if (dense || !(h->scale > 0 && h->scale < 1))
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: matrix update with scale %g (a clipping coefficient is in "
                            "(0, 1), on a round-2 update only)",
                            chunk, (double)h->scale);
    *coef = h->scale;
    return PC_OK;
}

int pc_rt__pull_lowrank_read(const uint8_t *msg, size_t len, uint32_t chunk, uint32_t n,
                             uint64_t it, bool dense, bool with_lr, size_t nv,
                             const uint8_t **values, uint64_t *server_ns, rt_lrstep_t *step,
                             char *err, size_t errlen)
{
    pc_wire_header_t h;
    size_t extra = with_lr ? PC_RT_LOWRANK_LR_BYTES : 0;
    uint16_t flags =
        (uint16_t)((dense ? PC_RT_LOWRANK_F_DENSE : 0) | (with_lr ? PC_RT_LOWRANK_F_LR : 0));
    int rc = factor_header(msg, len, PC_RT_PULL_LOWRANK, flags, chunk, n, it, nv,
                           PC_RT_PULL_TIME_BYTES + extra + 4 * nv, true, &h, err, errlen);
    float coef;
    if (rc != PC_OK || (rc = lowrank_coef(&h, dense, chunk, &coef, err, errlen)) != PC_OK)
        return rc;
    if (coef != 1.0f && !step)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: a clipped matrix update where none was expected", chunk);
    const uint8_t *body = msg + PC_WIRE_HEADER_BYTES;
    uint64_t sns = pc_wire_get_u64(body);
    if (sns > PC_RT_PULL_MAX_SERVER_NS)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: update names a server time of %llu ns, at most %llu", chunk,
                            (unsigned long long)sns, PC_RT_PULL_MAX_SERVER_NS);
    double lr = with_lr ? get_f64(body + PC_RT_PULL_TIME_BYTES) : -1.0;
    if (with_lr && !(lr >= 0 && lr <= DBL_MAX))
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: matrix update with learning rate %g, not a finite number "
                            ">= 0",
                            chunk, lr);
    body += PC_RT_PULL_TIME_BYTES + extra;
    if (any_nonfinite(body, nv))
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: a value of the matrix update is not finite", chunk);
    *values = body;
    if (server_ns)
        *server_ns = sns;
    if (step)
        *step = (rt_lrstep_t){.lr = lr, .coef = coef};
    return PC_OK;
}

/* ---- done and ckpt ----------------------------------------------------------------------- */

void pc_rt__done_encode(uint8_t *buf, int signal)
{
    pc_wire_put_u32(buf, (uint32_t)signal);
}

int pc_rt__done_parse(const uint8_t *msg, size_t len, int *signal, char *err, size_t errlen)
{
    if (len != PC_RT_DONE_BYTES)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "end message of %zu bytes, expected %d", len,
                            PC_RT_DONE_BYTES);
    uint32_t sig = pc_wire_get_u32(msg);
    if (sig > PC_RT_MAX_SIGNAL)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "end message names signal %u, at most %d", sig,
                            PC_RT_MAX_SIGNAL);
    *signal = (int)sig;
    return PC_OK;
}

void pc_rt__update_encode(uint8_t *buf, int update)
{
    pc_wire_put_u32(buf, PC_RT_UPDATE_MAGIC);
    pc_wire_put_u32(buf + 4, (uint32_t)update);
}

/* The start's 8-byte messages (TAG_UPDATE, TAG_WARMUP): the length and the magic, then
 * *value the u32 after it. Pure. */
_Static_assert(PC_RT_UPDATE_BYTES == 8 && PC_RT_WARMUP_BYTES == 8, "magic and one u32");
static int magic_u32_parse(const uint8_t *msg, size_t len, uint32_t magic, const char *what,
                           uint32_t *value, char *err, size_t errlen)
{
    if (len != 8)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "%s message of %zu bytes, expected 8", what,
                            len);
    if (pc_wire_get_u32(msg) != magic)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "%s message with bad magic 0x%08x", what,
                            pc_wire_get_u32(msg));
    *value = pc_wire_get_u32(msg + 4);
    return PC_OK;
}

int pc_rt__update_parse(const uint8_t *msg, size_t len, int *update, char *err, size_t errlen)
{
    uint32_t u = 0;
    int rc = magic_u32_parse(msg, len, PC_RT_UPDATE_MAGIC, "update", &u, err, errlen);
    if (rc != PC_OK)
        return rc;
    if (u != (uint32_t)PC_UPDATE_SERVERS && u != (uint32_t)PC_UPDATE_WORKERS)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "update message names placement %u", u);
    *update = (int)u;
    return PC_OK;
}

void pc_rt__warmup_encode(uint8_t *buf, int warmup)
{
    pc_wire_put_u32(buf, PC_RT_WARMUP_MAGIC);
    pc_wire_put_u32(buf + 4, (uint32_t)warmup);
}

int pc_rt__warmup_parse(const uint8_t *msg, size_t len, int *warmup, char *err, size_t errlen)
{
    uint32_t n = 0;
    int rc = magic_u32_parse(msg, len, PC_RT_WARMUP_MAGIC, "warm-up", &n, err, errlen);
    if (rc != PC_OK)
        return rc;
    if (n != (uint32_t)PC_CONFIG_ADAM_WARMUP)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "warm-up message of %u iterations, expected %d (the default)", n,
                            PC_CONFIG_ADAM_WARMUP);
    *warmup = (int)n;
    return PC_OK;
}

void pc_rt__ckpt_req_encode(uint8_t *buf, uint64_t it)
{
    pc_wire_put_u64(buf, it);
}

int pc_rt__ckpt_req_parse(const uint8_t *msg, size_t len, uint64_t *it, char *err, size_t errlen)
{
    if (len != PC_RT_CKPT_BYTES)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "checkpoint request of %zu bytes, expected %d",
                            len, PC_RT_CKPT_BYTES);
    *it = pc_wire_get_u64(msg);
    return PC_OK;
}

/* ---- the order chunks travel in -------------------------------------------------------- */

void pc_rt__queue_push(rt_queue_t *q, int id)
{
    if (!q->forward) {
        q->slot[(q->head + q->n++) % q->cap] = id;
        return;
    }
    size_t i = q->n++;
    while (i > 0 && q->slot[(i - 1) / 2] > id) { /* sift up */
        q->slot[i] = q->slot[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q->slot[i] = id;
}

int pc_rt__queue_peek(const rt_queue_t *q)
{
    return q->forward ? q->slot[0] : q->slot[q->head];
}

int pc_rt__queue_pop(rt_queue_t *q)
{
    if (!q->forward) {
        int id = q->slot[q->head];
        q->head = (q->head + 1) % q->cap;
        q->n--;
        return id;
    }
    int top = q->slot[0], last = q->slot[--q->n];
    size_t i = 0, n = q->n;
    for (;;) { /* sift the last entry down from the root */
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && q->slot[c + 1] < q->slot[c])
            c++;
        if (q->slot[c] >= last)
            break;
        q->slot[i] = q->slot[c];
        i = c;
    }
    if (n)
        q->slot[i] = last;
    return top;
}

/* ---- groups and lr ------------------------------------------------------------------------ */

/* Finite and >= 0 (NaN fails). */
static bool nonneg(double v)
{
    return v >= 0 && v <= DBL_MAX;
}

int pc_rt__group_check(const pc_optim_cfg_t *g, char *err, size_t errlen)
{
    if (!nonneg(g->lr))
        return pc_error_fmt(PC_EINVAL, err, errlen, "lr %g is not a finite number >= 0", g->lr);
    if (!nonneg(g->weight_decay))
        return pc_error_fmt(PC_EINVAL, err, errlen, "weight_decay %g is not a finite number >= 0",
                            g->weight_decay);
    if (!nonneg(g->momentum))
        return pc_error_fmt(PC_EINVAL, err, errlen, "momentum %g is not a finite number >= 0",
                            g->momentum);
    if (g->kind == PC_OPTIM_SGD) {
        if (g->nesterov && g->momentum == 0)
            return pc_error_fmt(PC_EINVAL, err, errlen, "nesterov needs a momentum (torch's rule)");
        if (g->amsgrad)
            return pc_error_fmt(PC_EINVAL, err, errlen, "amsgrad is Adam's, not SGD's");
        return PC_OK;
    }
    if (g->kind != PC_OPTIM_ADAM && g->kind != PC_OPTIM_ADAMW)
        return pc_error_fmt(PC_EINVAL, err, errlen, "optimizer %d is not sgd, adam or adamw",
                            (int)g->kind);
    if (g->momentum != 0 || g->nesterov)
        return pc_error_fmt(PC_EINVAL, err, errlen, "momentum and nesterov are SGD's, not %s's",
                            g->kind == PC_OPTIM_ADAM ? "adam" : "adamw");
    if (!(g->beta1 >= 0 && g->beta1 < 1) || !(g->beta2 >= 0 && g->beta2 < 1))
        return pc_error_fmt(PC_EINVAL, err, errlen, "betas (%g, %g) are not each in [0, 1)",
                            g->beta1, g->beta2);
    if (!(g->eps > 0 && g->eps <= DBL_MAX))
        return pc_error_fmt(PC_EINVAL, err, errlen, "eps %g is not a finite number > 0", g->eps);
    return PC_OK;
}

void pc_rt__groups_encode(uint8_t *buf, int kind, const pc_optim_cfg_t *groups, uint32_t ngroups,
                          const uint32_t *chunk_group, uint32_t nchunks)
{
    pc_wire_put_u32(buf, PC_RT_GROUPS_MAGIC);
    pc_wire_put_u32(buf + 4, (uint32_t)kind);
    pc_wire_put_u32(buf + 8, ngroups);
    pc_wire_put_u32(buf + 12, nchunks);
    uint8_t *e = buf + PC_RT_GROUPS_HEAD_BYTES;
    for (uint32_t i = 0; i < ngroups; i++, e += PC_RT_GROUP_BYTES) {
        const pc_optim_cfg_t *g = &groups[i];
        put_f64(e, g->lr);
        put_f64(e + 8, g->weight_decay);
        put_f64(e + 16, g->momentum);
        put_f64(e + 24, g->beta1);
        put_f64(e + 32, g->beta2);
        put_f64(e + 40, g->eps);
        pc_wire_put_u32(e + 48, (g->nesterov ? PC_RT_GROUP_F_NESTEROV : 0u) |
                                    (g->amsgrad ? PC_RT_GROUP_F_AMSGRAD : 0u));
        pc_wire_put_u32(e + 52, 0);
    }
    for (uint32_t c = 0; c < nchunks; c++)
        pc_wire_put_u32(e + 4 * (size_t)c, chunk_group[c]);
}

/* Group i of the message at e (validated fields or not), kind given. */
static void group_read(const uint8_t *e, int kind, pc_optim_cfg_t *g)
{
    uint32_t f = pc_wire_get_u32(e + 48);
    *g = (pc_optim_cfg_t){.lr = get_f64(e),
                          .weight_decay = get_f64(e + 8),
                          .momentum = get_f64(e + 16),
                          .beta1 = get_f64(e + 24),
                          .beta2 = get_f64(e + 32),
                          .eps = get_f64(e + 40),
                          .nesterov = (f & PC_RT_GROUP_F_NESTEROV) != 0,
                          .amsgrad = (f & PC_RT_GROUP_F_AMSGRAD) != 0,
                          .kind = (pc_optim_kind_t)kind,
                          .schedule = PC_LR_CONSTANT};
}

int pc_rt__groups_parse(const uint8_t *msg, size_t len, rt_groups_t *out, char *err, size_t errlen)
{
    if (len < PC_RT_GROUPS_HEAD_BYTES)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "groups message of %zu bytes, under %d", len,
                            PC_RT_GROUPS_HEAD_BYTES);
    if (pc_wire_get_u32(msg) != PC_RT_GROUPS_MAGIC)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "groups message with bad magic 0x%08x",
                            pc_wire_get_u32(msg));
    uint32_t kind = pc_wire_get_u32(msg + 4), ng = pc_wire_get_u32(msg + 8),
             nc = pc_wire_get_u32(msg + 12);
    if (kind > PC_OPTIM_ADAMW)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "groups message names optimizer %u", kind);
    if (ng < 1 || ng > PC_RT_MAX_GROUPS)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "groups message of %u groups, not 1..%u", ng,
                            PC_RT_MAX_GROUPS);
    if (nc > PC_RT_MAX_CHUNKS)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "groups message of %u chunks, over %u", nc,
                            PC_RT_MAX_CHUNKS);
    if (len != pc_rt__groups_bytes(ng, nc))
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "groups message of %zu bytes, %zu expected for %u groups and %u chunks",
                            len, pc_rt__groups_bytes(ng, nc), ng, nc);
    const uint8_t *e = msg + PC_RT_GROUPS_HEAD_BYTES;
    char why[160];
    for (uint32_t i = 0; i < ng; i++, e += PC_RT_GROUP_BYTES) {
        pc_optim_cfg_t g;
        group_read(e, (int)kind, &g);
        uint32_t f = pc_wire_get_u32(e + 48);
        if ((f & ~(PC_RT_GROUP_F_NESTEROV | PC_RT_GROUP_F_AMSGRAD)) || pc_wire_get_u32(e + 52))
            return pc_error_fmt(PC_EFORMAT, err, errlen, "group %u has unknown flags", i);
        if (pc_rt__group_check(&g, why, sizeof(why)) != PC_OK)
            return pc_error_fmt(PC_EFORMAT, err, errlen, "group %u: %s", i, why);
    }
    for (uint32_t c = 0; c < nc; c++)
        if (pc_wire_get_u32(e + 4 * (size_t)c) >= ng)
            return pc_error_fmt(PC_EFORMAT, err, errlen, "chunk %u names group %u of %u", c,
                                pc_wire_get_u32(e + 4 * (size_t)c), ng);
    *out = (rt_groups_t){.kind = (int)kind,
                         .ngroups = ng,
                         .nchunks = nc,
                         .groups = msg + PC_RT_GROUPS_HEAD_BYTES,
                         .chunk = e};
    return PC_OK;
}

void pc_rt__groups_get(const rt_groups_t *g, uint32_t i, pc_optim_cfg_t *out)
{
    group_read(g->groups + PC_RT_GROUP_BYTES * (size_t)i, g->kind, out);
}

void pc_rt__lr_encode(uint8_t *buf, uint64_t it, const double *lrs, uint32_t ngroups)
{
    pc_wire_put_u64(buf, it);
    pc_wire_put_u32(buf + 8, ngroups);
    for (uint32_t i = 0; i < ngroups; i++)
        put_f64(buf + PC_RT_LR_HEAD_BYTES + 8 * (size_t)i, lrs[i]);
}

int pc_rt__lr_parse(const uint8_t *msg, size_t len, uint32_t ngroups, uint64_t *it, double *lrs,
                    char *err, size_t errlen)
{
    if (len != pc_rt__lr_bytes(ngroups))
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "learning-rate message of %zu bytes, expected %zu (%u groups)", len,
                            pc_rt__lr_bytes(ngroups), ngroups);
    if (pc_wire_get_u32(msg + 8) != ngroups)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "learning-rate message of %u groups, the run has %u",
                            pc_wire_get_u32(msg + 8), ngroups);
    for (uint32_t i = 0; i < ngroups; i++) {
        double v = get_f64(msg + PC_RT_LR_HEAD_BYTES + 8 * (size_t)i);
        if (!nonneg(v))
            return pc_error_fmt(PC_EFORMAT, err, errlen,
                                "learning rate of group %u is %g, not a finite number >= 0", i, v);
    }
    for (uint32_t i = 0; i < ngroups; i++)
        lrs[i] = get_f64(msg + PC_RT_LR_HEAD_BYTES + 8 * (size_t)i);
    *it = pc_wire_get_u64(msg);
    return PC_OK;
}

void pc_rt__clip_encode(uint8_t *buf, uint64_t it, double v)
{
    pc_wire_put_u64(buf, it);
    put_f64(buf + 8, v);
}

int pc_rt__clip_parse(const uint8_t *msg, size_t len, uint64_t *it, double *max_norm, char *err,
                      size_t errlen)
{
    if (len != PC_RT_CLIP_BYTES)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "clipping message of %zu bytes, expected %d",
                            len, PC_RT_CLIP_BYTES);
    double v = get_f64(msg + 8);
    if (!(v >= 0)) /* NaN and negatives; +inf is a max-norm that never clips */
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "clipping message with max-norm %g, not 0 (none) or above 0", v);
    *it = pc_wire_get_u64(msg);
    *max_norm = v;
    return PC_OK;
}

int pc_rt__norm_parse(const uint8_t *msg, size_t len, uint64_t *it, double *norm, char *err,
                      size_t errlen)
{
    if (len != PC_RT_CLIP_BYTES)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "norm message of %zu bytes, expected %d", len,
                            PC_RT_CLIP_BYTES);
    double v = get_f64(msg + 8);
    if (v < 0) /* +inf and NaN stand: a gradient that is not finite has such a norm */
        return pc_error_fmt(PC_EFORMAT, err, errlen, "norm message with norm %g, below 0", v);
    *it = pc_wire_get_u64(msg);
    *norm = v;
    return PC_OK;
}
