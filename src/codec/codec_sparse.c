/* codec_sparse: the sparsifying codecs: topk, dgc, randomk, threshold.
 *
 * Payload: the selected indices, ascending (absolute u32, or the first index then gaps - 1
 * as LEB128 varints; or, PC_WIRE_F_BITMAP, a bitmap of n bits, index i at bit i % 8 of byte
 * i / 8, when that is smaller: a density above 1/32 with u32 indices, a dense warm-up's
 * first messages), then one value per index (binary32 or binary16). randomk sends no
 * indices: the receiver regenerates them from (seed, iteration, chunk).
 *
 * Error feedback: v = residual + gradient is what gets selected from; after encoding,
 * residual[i] = v[i] - sent[i] for the selected i (exactly 0 for fp32 values; for fp16 the
 * subtraction of a value and its rounding is exact), and untouched elsewhere, so
 * sent + new residual == old residual + gradient holds bit for bit. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec_impl.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_philox.h"

/* Worst-case bytes of one index: a u32, or a 5-byte varint. */
static size_t index_bytes(const pc_codec_t *c)
{
    return c->spec.index == PC_INDEX_DELTA ? 5 : 4;
}

static size_t value_bytes(const pc_codec_t *c)
{
    return c->spec.values == PC_VALUES_FP16 ? 2 : 4;
}

/* Bytes of a bitmap of n bits. */
static size_t bitmap_bytes(size_t n)
{
    return (n + 7) / 8;
}

/* Bytes of the index list of idx[0..k) (ascending) in the codec's form: u32s or varints. */
static size_t list_bytes(const pc_codec_t *c, const uint32_t *idx, size_t k)
{
    if (c->spec.index != PC_INDEX_DELTA)
        return 4 * k;
    size_t b = 0;
    for (size_t j = 0; j < k; j++)
        b += pc_wire_varint_len(j == 0 ? idx[0] : idx[j] - idx[j - 1] - 1);
    return b;
}

/* Encode values v[idx[0..k)] (and, when with_index, the indices: as a bitmap of n bits
 * when bitmap, else as the codec's list) into payload; subtract what was sent from v when
 * ef. Returns payload bytes. */
static size_t encode(const pc_codec_t *c, float *v, const uint32_t *idx, size_t k, bool with_index,
                     bool bitmap, size_t n, bool ef, uint8_t *payload)
{
    uint8_t *p = payload;
    if (with_index && bitmap) {
        memset(p, 0, bitmap_bytes(n));
        for (size_t j = 0; j < k; j++)
            p[idx[j] >> 3] |= (uint8_t)(1u << (idx[j] & 7));
        p += bitmap_bytes(n);
    } else if (with_index) {
        if (c->spec.index == PC_INDEX_DELTA) {
            uint32_t prev = 0;
            for (size_t j = 0; j < k; j++) {
                p += pc_wire_varint_put(p, j == 0 ? idx[0] : idx[j] - prev - 1);
                prev = idx[j];
            }
        } else {
            for (size_t j = 0; j < k; j++, p += 4)
                pc_wire_put_u32(p, idx[j]);
        }
    }
    if (c->spec.values == PC_VALUES_FP16) {
        for (size_t j = 0; j < k; j++, p += 2) {
            float x = v[idx[j]];
            /* Saturate instead of overflowing to infinity (the excess stays in the residual). */
            if (x > PC_CODEC_F16_MAX)
                x = PC_CODEC_F16_MAX;
            else if (x < -PC_CODEC_F16_MAX)
                x = -PC_CODEC_F16_MAX;
            uint16_t h = pc_wire_f32_to_f16(x);
            pc_wire_put_u16(p, h);
            if (ef)
                v[idx[j]] -= pc_wire_f16_to_f32(h);
        }
    } else {
        for (size_t j = 0; j < k; j++, p += 4) {
            uint32_t u;
            memcpy(&u, &v[idx[j]], sizeof(u));
            pc_wire_put_u32(p, u);
            if (ef)
                v[idx[j]] = 0.0f; /* v - v */
        }
    }
    return (size_t)(p - payload);
}

/* The index-carrying codecs' message (topk, dgc, threshold): entries and payload into h,
 * the indices as a bitmap (h->flags |= PC_WIRE_F_BITMAP) where that is strictly smaller
 * than the list, the same entries and values either way. */
static void encode_indexed(const pc_codec_t *c, float *v, const uint32_t *idx, size_t k, size_t n,
                           bool ef, pc_wire_header_t *h, uint8_t *payload)
{
    bool bitmap = bitmap_bytes(n) < list_bytes(c, idx, k);
    if (bitmap)
        h->flags |= PC_WIRE_F_BITMAP;
    h->entries = (uint32_t)k;
    h->payload = (uint32_t)encode(c, v, idx, k, true, bitmap, n, ef, payload);
}

/* The bitmap form of parse_indices: n bits (none set at or past n), entries of them set. */
static int parse_bitmap(const pc_wire_header_t *h, const uint8_t *payload, uint32_t *out,
                        const uint8_t **values, char *err, size_t errlen)
{
    size_t nb = bitmap_bytes(h->n);
    if (h->payload < nb)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: payload of %u bytes ends inside its %zu-byte index bitmap",
                            h->chunk, h->payload, nb);
    if (h->n % 8 && (payload[nb - 1] >> (h->n % 8)))
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: index bitmap has bits set past n = %u", h->chunk, h->n);
    size_t set = 0;
    for (size_t b = 0; b < nb; b++) {
        unsigned byte = payload[b];
        if (out)
            for (; byte && set < h->entries; byte &= byte - 1)
                out[set++] = (uint32_t)(8 * b) + (uint32_t)__builtin_ctz(byte);
        set += (size_t)__builtin_popcount(byte); /* what is left: past entries when out */
    }
    if (set != h->entries)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: index bitmap has %zu bits set for %u entries", h->chunk, set,
                            h->entries);
    *values = payload + nb;
    return PC_OK;
}

/* Parse the index section of a payload: k indices, strictly increasing, < n (a list, or
 * with PC_WIRE_F_BITMAP a bitmap). On success *values points past it. When out is not
 * NULL the indices are stored there. */
static int parse_indices(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                         uint32_t *out, const uint8_t **values, char *err, size_t errlen)
{
    if (h->flags & PC_WIRE_F_BITMAP)
        return parse_bitmap(h, payload, out, values, err, errlen);
    const uint8_t *p = payload, *end = payload + h->payload;
    uint32_t prev = 0;
    for (uint32_t j = 0; j < h->entries; j++) {
        uint32_t ix;
        if (c->spec.index == PC_INDEX_DELTA) {
            uint32_t gap;
            size_t used = pc_wire_varint_get(p, end, &gap);
            if (!used)
                return pc_error_fmt(PC_EFORMAT, err, errlen,
                                    "chunk %u: index %u: truncated or bad varint", h->chunk, j);
            p += used;
            uint64_t next = j == 0 ? gap : (uint64_t)prev + 1 + gap;
            if (next >= h->n)
                return pc_error_fmt(PC_EFORMAT, err, errlen,
                                    "chunk %u: index %llu out of range (n = %u)", h->chunk,
                                    (unsigned long long)next, h->n);
            ix = (uint32_t)next;
        } else {
            if ((size_t)(end - p) < 4)
                return pc_error_fmt(PC_EFORMAT, err, errlen,
                                    "chunk %u: payload ends inside index %u", h->chunk, j);
            ix = pc_wire_get_u32(p);
            p += 4;
            if (ix >= h->n)
                return pc_error_fmt(PC_EFORMAT, err, errlen,
                                    "chunk %u: index %u out of range (n = %u)", h->chunk, ix, h->n);
            if (j > 0 && ix <= prev)
                return pc_error_fmt(PC_EFORMAT, err, errlen,
                                    "chunk %u: indices not strictly increasing (%u after %u)",
                                    h->chunk, ix, prev);
        }
        prev = ix;
        if (out)
            out[j] = ix;
    }
    *values = p;
    return PC_OK;
}

/* Check the value section: exactly entries values to the end of the payload, all finite. */
static int check_values(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                        const uint8_t *values, char *err, size_t errlen)
{
    size_t vb = value_bytes(c);
    size_t left = (size_t)(payload + h->payload - values);
    if (left != (size_t)h->entries * vb)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: %zu value bytes for %u entries of %zu bytes", h->chunk, left,
                            h->entries, vb);
    for (uint32_t j = 0; j < h->entries; j++) {
        bool bad;
        if (vb == 2) {
            bad = (pc_wire_get_u16(values + 2 * (size_t)j) & 0x7c00u) == 0x7c00u;
        } else {
            bad = (pc_wire_get_u32(values + 4 * (size_t)j) & 0x7f800000u) == 0x7f800000u;
        }
        if (bad)
            return pc_error_fmt(PC_EFORMAT, err, errlen, "chunk %u: value %u is not finite",
                                h->chunk, j);
    }
    return PC_OK;
}

static float value_at(const pc_codec_t *c, const uint8_t *values, size_t j)
{
    if (c->spec.values == PC_VALUES_FP16)
        return pc_wire_f16_to_f32(pc_wire_get_u16(values + 2 * j));
    uint32_t u = pc_wire_get_u32(values + 4 * j);
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static int validate_indexed(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                            char *err, size_t errlen)
{
    const uint8_t *values;
    int rc = parse_indices(c, h, payload, NULL, &values, err, errlen);
    if (rc != PC_OK)
        return rc;
    return check_values(c, h, payload, values, err, errlen);
}

/* Indices are decoded a second time while applying (validation wrote nothing); when idx is
 * not NULL they are also stored there (ascending, as validated). */
static int apply_indexed_list(const pc_codec_t *c, const pc_wire_header_t *h,
                              const uint8_t *payload, float scale, float *dense, uint32_t *idx)
{
    const uint8_t *p = payload;
    const uint8_t *values = payload + h->payload - (size_t)h->entries * value_bytes(c);
    if (h->flags & PC_WIRE_F_BITMAP) {
        uint32_t j = 0;
        for (size_t b = 0; b < bitmap_bytes(h->n); b++)
            for (unsigned byte = p[b]; byte; byte &= byte - 1, j++) {
                uint32_t ix = (uint32_t)(8 * b) + (uint32_t)__builtin_ctz(byte);
                dense[ix] += scale * value_at(c, values, j);
                if (idx)
                    idx[j] = ix;
            }
        return PC_OK;
    }
    uint32_t prev = 0;
    for (uint32_t j = 0; j < h->entries; j++) {
        uint32_t ix;
        if (c->spec.index == PC_INDEX_DELTA) {
            uint32_t gap;
            p += pc_wire_varint_get(p, values, &gap);
            ix = j == 0 ? gap : prev + 1 + gap;
        } else {
            ix = pc_wire_get_u32(p);
            p += 4;
        }
        prev = ix;
        dense[ix] += scale * value_at(c, values, j);
        if (idx)
            idx[j] = ix;
    }
    return PC_OK;
}

static int apply_indexed(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                         float scale, float *dense)
{
    return apply_indexed_list(c, h, payload, scale, dense, NULL);
}

/* ---- momentum correction ---------------------------------------------------------------
 * Lin et al.'s momentum correction, shared by dgc and by topk and randomk with momentum > 0
 * (the state then holds u; with momentum=0 topk and randomk allocate no u and fold as
 * plain error feedback, bit for bit as without the key):
 *   g <- g * min(1, clip / ||g||)   local gradient clipping (dgc's clip > 0; else off)
 *   u <- momentum * u + g           momentum correction
 *   v <- v + u                      accumulation (the residual)
 * and after selection u[sel] <- 0 (momentum factor masking), so sent + new residual ==
 * old residual + u holds bit for bit as plain error feedback's invariant does for g. */

static int momentum_fold(const pc_codec_t *c, pc_codec_state_t *st, const float *grad)
{
    if (!st->momentum) /* momentum 0: plain error feedback */
        return pc_codec__fold_plain(c, st, grad);
    const pc_codec_spec_t *s = &c->spec;
    size_t n = st->n;
    float *u = st->momentum, *v = st->residual;
    /* Clipping factor from the gradient's L2 norm (the canonical sum: the same bits on
     * every implementation). */
    float f = 1.0f;
    if (s->clip > 0) {
        double norm = sqrt(pc_codec__sum(grad, n, PC_CODEC_SUM_SQUARES));
        if (!isfinite(norm))
            return PC_ERANGE;
        if (norm > s->clip)
            f = (float)(s->clip / norm);
    }
    float m = (float)s->momentum;
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        u[i] = m * u[i] + f * grad[i];
        v[i] += u[i];
        uint32_t bits;
        memcpy(&bits, &v[i], sizeof(bits));
        bad |= (bits & 0x7f800000u) == 0x7f800000u;
    }
    return bad ? PC_ERANGE : PC_OK;
}

/* Momentum factor masking: u[idx[0..k)] <- 0 (nothing without u). */
static void momentum_mask(pc_codec_state_t *st, const uint32_t *idx, size_t k)
{
    if (!st->momentum)
        return;
    for (size_t j = 0; j < k; j++)
        st->momentum[idx[j]] = 0.0f;
}

/* ---- topk ---------------------------------------------------------------------------- */

/* The density of compress call `step` (0-based): 1 for the first `dense` calls (dgc's and
 * topk's dense=D), then under a density warm-up (warmup=W) ratio^((t + 1) / W) for call
 * t = step - D < W, exponentially down to ratio (as in DGC's 25 %, 6.25 %, ... schedule),
 * then ratio. Pure. */
static double warm_density(const pc_codec_spec_t *s, uint64_t step)
{
    if (step < (uint64_t)s->dense)
        return 1.0;
    step -= (uint64_t)s->dense;
    if (s->warmup > 0 && step < (uint64_t)s->warmup && s->ratio > 0)
        return pow(s->ratio, (double)(step + 1) / (double)s->warmup);
    return s->ratio;
}

size_t pc_codec__topk_k(const pc_codec_t *c, uint64_t steps, size_t n)
{
    return pc_codec__k(warm_density(&c->spec, steps), n);
}

static size_t topk_max_payload(const pc_codec_t *c, size_t n)
{
    return pc_codec__k(warm_density(&c->spec, 0), n) * (index_bytes(c) + value_bytes(c));
}

static int topk_compress(pc_codec_t *c, pc_codec_state_t *st, const float *grad,
                         pc_wire_header_t *h, uint8_t *payload, size_t cap)
{
    (void)cap;
    size_t n = st->n, k = pc_codec__topk_k(c, st->steps, n);
    if (pc_codec__reserve_idx(c, k) != PC_OK)
        return PC_ENOMEM;
    bool ef = c->spec.ef;
    float *v = pc_codec__source(c, st, grad);
    if (grad && st->momentum) { /* momentum correction first; the selection only reads v */
        int rc = momentum_fold(c, st, grad);
        if (rc != PC_OK)
            return rc;
        grad = NULL;
    }
    long got = pc_select_topk(c->sel, v, ef ? grad : NULL, n, k, c->idx);
    if (got < 0)
        return (int)got;
    momentum_mask(st, c->idx, (size_t)got);
    encode_indexed(c, v, c->idx, (size_t)got, n, ef, h, payload);
    return PC_OK;
}

static int topk_validate(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                         char *err, size_t errlen)
{
    /* Under a warm-up the sender's call count sets k: any count from the steady k up to
     * the densest call's is one it may send (the receiver does not track its calls). */
    size_t k = pc_codec__k(c->spec.ratio, h->n), hi = pc_codec__k(warm_density(&c->spec, 0), h->n);
    if (h->entries < k || h->entries > hi) {
        if (hi == k)
            return pc_error_fmt(PC_EFORMAT, err, errlen,
                                "chunk %u: topk message with %u entries, expected %zu", h->chunk,
                                h->entries, k);
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: topk message with %u entries, expected %zu to %zu "
                            "(%s=%d)",
                            h->chunk, h->entries, k, hi, c->spec.dense ? "dense" : "warmup",
                            c->spec.dense ? c->spec.dense : c->spec.warmup);
    }
    return validate_indexed(c, h, payload, err, errlen);
}

const codec_ops_t pc_codec_ops_topk = {.max_payload = topk_max_payload,
                                       .compress = topk_compress,
                                       .validate = topk_validate,
                                       .apply = apply_indexed,
                                       .apply_indices = apply_indexed_list,
                                       .fold = momentum_fold};

/* ---- threshold ------------------------------------------------------------------------ */

static size_t threshold_max_payload(const pc_codec_t *c, size_t n)
{
    return n * (index_bytes(c) + value_bytes(c));
}

static int threshold_compress(pc_codec_t *c, pc_codec_state_t *st, const float *grad,
                              pc_wire_header_t *h, uint8_t *payload, size_t cap)
{
    (void)cap;
    size_t n = st->n;
    bool ef = c->spec.ef;
    float *v = pc_codec__source(c, st, grad);
    if (!pc_codec__fold_finite(v, ef ? grad : NULL, n))
        return PC_ERANGE;
    if (pc_codec__reserve_idx(c, n) != PC_OK)
        return PC_ENOMEM;
    size_t k = pc_select_above(v, n, (float)c->spec.tau, c->idx, n);
    encode_indexed(c, v, c->idx, k, n, ef, h, payload);
    return PC_OK;
}

static int threshold_validate(const pc_codec_t *c, const pc_wire_header_t *h,
                              const uint8_t *payload, char *err, size_t errlen)
{
    return validate_indexed(c, h, payload, err, errlen); /* any count up to n */
}

const codec_ops_t pc_codec_ops_threshold = {.max_payload = threshold_max_payload,
                                            .compress = threshold_compress,
                                            .validate = threshold_validate,
                                            .apply = apply_indexed,
                                            .apply_indices = apply_indexed_list};

/* ---- dgc ------------------------------------------------------------------------------
 * Lin et al., "Deep Gradient Compression" (ICLR 2018), per chunk:
 *   clip, momentum correction, accumulation   (momentum_fold above)
 *   select ~k = density * n of v by a threshold estimated on a strided sample
 *   sent: v[sel]; then v[sel] <- v - sent, u[sel] <- 0   (momentum factor masking)
 * Its state always holds u (also with momentum=0, as before topk and randomk took the key).
 * The density warms up from ratio^(1/W) to ratio over the first W compress calls
 * (exponentially, as in the paper's 25%, 6.25%, ... schedule). The sampled threshold is
 * accepted when it selects between 0.8k and 1.3k elements; otherwise it is re-estimated
 * once from the same sample for the count it gave; failing that, exact top-k is used. */

/* Smallest sample: with fewer than this many sampled elements above the threshold its
 * estimate is too noisy for the [0.8k, 1.3k] window (relative error ~ 1/sqrt(count)). */
#define DGC_MIN_SAMPLE_HITS 128

static size_t dgc_max_entries(const pc_codec_t *c, size_t n)
{
    size_t k = pc_codec__k(warm_density(&c->spec, 0), n); /* the densest step */
    size_t hi = (size_t)floor(1.3 * (double)k);
    return hi > n ? n : (hi < k ? k : hi);
}

static size_t dgc_max_payload(const pc_codec_t *c, size_t n)
{
    return dgc_max_entries(c, n) * (index_bytes(c) + value_bytes(c));
}

/* The sample's size at this density: sample x n elements, at least DGC_MIN_SAMPLE_HITS /
 * density, at most n. */
static size_t dgc_sample_size(const pc_codec_spec_t *s, double density, size_t n)
{
    size_t ns = (size_t)ceil(s->sample * (double)n);
    size_t floor_ns = (size_t)ceil(DGC_MIN_SAMPLE_HITS / density);
    if (ns < floor_ns)
        ns = floor_ns;
    return ns > n ? n : ns;
}

uint64_t pc_codec_work(const pc_codec_spec_t *spec, size_t n)
{
    uint64_t work = 2 * (uint64_t)n;
    if (!spec || spec->id != PC_CODEC_DGC || !(spec->ratio > 0))
        return work;
    size_t k = pc_codec__k(spec->ratio, n); /* the steady density's; as dgc_plan samples */
    if (k > 0 && k < n)
        work += 5 * (uint64_t)dgc_sample_size(spec, spec->ratio, n);
    return work;
}

void pc_codec__dgc_plan(const pc_codec_t *c, uint64_t steps, size_t n, pc_codec_dgc_plan_t *p)
{
    const pc_codec_spec_t *s = &c->spec;
    double density = warm_density(s, steps);
    p->k = pc_codec__k(density, n);
    p->lo = (size_t)ceil(0.8 * (double)p->k);
    p->hi = (size_t)floor(1.3 * (double)p->k);
    if (p->hi < p->k)
        p->hi = p->k;
    p->cap = dgc_max_entries(c, n);
    /* Strided sample of |v|: ns elements, at least DGC_MIN_SAMPLE_HITS / density. */
    p->ns = p->ks = 0;
    if (p->k > 0 && p->k < n) {
        p->ns = dgc_sample_size(s, density, n);
        p->ks = pc_codec__k(density, p->ns);
        if (p->ks == 0)
            p->ks = 1;
    }
}

size_t pc_codec__dgc_sample_index(size_t j, size_t n, size_t ns)
{
    /* Spread over the whole chunk (a stride of floor(n / ns) would leave the tail unsampled
     * whenever ns does not divide n). */
    return (size_t)(((uint64_t)j * n) / ns);
}

void pc_codec__dgc_sample(const float *v, size_t n, size_t ns, float *out)
{
    /* Element j * n / ns without a division per sample: with n = a ns + b (0 <= b < ns),
     * floor(j n / ns) = j a + floor(j b / ns), and floor(j b / ns) (q, remainder r) grows by
     * at most one a step, since b < ns. The same indices as pc_codec__dgc_sample_index. */
    if (ns == 0)
        return;
    if (ns == n) {
        memcpy(out, v, n * sizeof(*v));
        return;
    }
    size_t a = n / ns, b = n % ns, base = 0, q = 0, r = 0;
    for (size_t j = 0; j < ns; j++) {
        out[j] = v[base + q];
        base += a;
        r += b;
        if (r >= ns) {
            r -= ns;
            q++;
        }
    }
}

size_t pc_codec__dgc_reaim(size_t ks, size_t k, size_t cnt, size_t ns)
{
    /* The sample rank that should give k, given the count ks gave. */
    double scaled = (double)ks * (double)k / (double)(cnt ? cnt : 1);
    size_t ks2 = (size_t)llround(scaled);
    return ks2 < 1 ? 1 : (ks2 > ns ? ns : ks2);
}

static int dgc_compress(pc_codec_t *c, pc_codec_state_t *st, const float *grad, pc_wire_header_t *h,
                        uint8_t *payload, size_t cap)
{
    (void)cap;
    size_t n = st->n;
    float *v = st->residual;
    if (grad) {
        int rc = momentum_fold(c, st, grad);
        if (rc != PC_OK)
            return rc;
    }
    pc_codec_dgc_plan_t pl;
    pc_codec__dgc_plan(c, st->steps, n, &pl);
    size_t k = pl.k, lo = pl.lo, hi = pl.hi, cap_idx = pl.cap, ns = pl.ns, ks = pl.ks;
    if (pc_codec__reserve_idx(c, cap_idx > k ? cap_idx : k) != PC_OK)
        return PC_ENOMEM;
    size_t got = 0;
    bool done = k == 0;
    if (!done && k < n) {
        if (pc_codec__reserve_tmp(c, ns) != PC_OK)
            return PC_ENOMEM;
        pc_codec__dgc_sample(v, n, ns, c->tmp);
        for (int attempt = 0; attempt < 2 && !done; attempt++) {
            float t;
            int rc = pc_select_kth_magnitude(c->sel, c->tmp, ns, ks, &t); /* 1 <= ks <= ns */
            if (rc != PC_OK)
                return rc;
            /* t == 0 (the sample holds fewer than ks non-zeros) selects every element;
             * the index list must be written then too, so it goes through select_above. */
            size_t cnt = pc_select_above(v, n, t, c->idx, cap_idx);
            if (cnt >= lo && cnt <= hi && cnt <= cap_idx) {
                got = cnt;
                done = true;
                if (attempt == 0)
                    c->stats.dgc_sampled++;
                else
                    c->stats.dgc_adapted++;
            } else {
                ks = pc_codec__dgc_reaim(ks, k, cnt, ns);
            }
        }
    }
    if (!done) {
        long r = pc_select_topk(c->sel, v, NULL, n, k, c->idx);
        if (r < 0)
            return (int)r;
        got = (size_t)r;
        if (k > 0 && k < n)
            c->stats.dgc_exact++;
    }
    momentum_mask(st, c->idx, got);
    encode_indexed(c, v, c->idx, got, n, true, h, payload);
    return PC_OK;
}

static int dgc_validate(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                        char *err, size_t errlen)
{
    size_t max = dgc_max_entries(c, h->n);
    if (h->entries > max)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: dgc message with %u entries, at most %zu", h->chunk,
                            h->entries, max);
    return validate_indexed(c, h, payload, err, errlen);
}

const codec_ops_t pc_codec_ops_dgc = {.max_payload = dgc_max_payload,
                                      .compress = dgc_compress,
                                      .validate = dgc_validate,
                                      .apply = apply_indexed,
                                      .apply_indices = apply_indexed_list,
                                      .fold = momentum_fold};

/* ---- randomk --------------------------------------------------------------------------
 * k distinct indices, uniformly, by Floyd's algorithm on Philox draws from the stream
 * (seed, subsequence(iteration, chunk)): for j = n-k .. n-1, t = draw mod (j+1) (by
 * multiply-shift); take t unless already taken, else j. The set is read out ascending
 * from a bitmap. Sender and receiver run the same code. */

static int randomk_indices(const pc_codec_spec_t *s, uint64_t iteration, uint32_t chunk, size_t n,
                           size_t k, uint64_t *bits, uint32_t *idx)
{
    pc_philox_t g;
    pc_philox_init(&g, s->seed, pc_philox_subsequence(iteration, chunk), 0);
    for (size_t j = n - k; j < n; j++) {
        uint32_t t = (uint32_t)(((uint64_t)pc_philox_next(&g) * (uint64_t)(j + 1)) >> 32);
        if (bits[t / 64] & (1ull << (t % 64)))
            t = (uint32_t)j;
        bits[t / 64] |= 1ull << (t % 64);
    }
    size_t o = 0;
    for (size_t w = 0; w < (n + 63) / 64; w++) {
        uint64_t b = bits[w];
        bits[w] = 0; /* leave the bitmap clean for the next call */
        while (b) {
            idx[o++] = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(b));
            b &= b - 1;
        }
    }
    return (int)o;
}

static size_t randomk_max_payload(const pc_codec_t *c, size_t n)
{
    return pc_codec__k(c->spec.ratio, n) * value_bytes(c);
}

static int randomk_compress(pc_codec_t *c, pc_codec_state_t *st, const float *grad,
                            pc_wire_header_t *h, uint8_t *payload, size_t cap)
{
    (void)cap;
    size_t n = st->n, k = pc_codec__k(c->spec.ratio, n);
    bool ef = c->spec.ef;
    float *v = pc_codec__source(c, st, grad);
    if (grad && st->momentum) {
        int rc = momentum_fold(c, st, grad);
        if (rc != PC_OK)
            return rc;
    } else if (!pc_codec__fold_finite(v, ef ? grad : NULL, n)) {
        return PC_ERANGE;
    }
    if (pc_codec__reserve_idx(c, k) != PC_OK || pc_codec__reserve_bits(c, n) != PC_OK)
        return PC_ENOMEM;
    randomk_indices(&c->spec, h->iteration, h->chunk, n, k, c->bits, c->idx);
    momentum_mask(st, c->idx, k);
    h->entries = (uint32_t)k;
    h->payload = (uint32_t)encode(c, v, c->idx, k, false, false, n, ef, payload);
    return PC_OK;
}

static int randomk_validate(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                            char *err, size_t errlen)
{
    size_t k = pc_codec__k(c->spec.ratio, h->n);
    if (h->entries != k)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: randomk message with %u entries, expected %zu", h->chunk,
                            h->entries, k);
    return check_values(c, h, payload, payload, err, errlen);
}

/* The indices are regenerated into out when given (the caller's, h->entries of them),
 * else into a temporary list. */
static int randomk_apply_list(const pc_codec_t *c, const pc_wire_header_t *h,
                              const uint8_t *payload, float scale, float *dense, uint32_t *out)
{
    size_t k = h->entries;
    uint32_t *idx = out ? out : malloc(sizeof(uint32_t) * (k ? k : 1));
    if (!idx || pc_codec__indices(c, h, payload, idx) != PC_OK) {
        if (!out)
            free(idx);
        return PC_ENOMEM;
    }
    for (size_t j = 0; j < k; j++)
        dense[idx[j]] += scale * value_at(c, payload, j);
    if (!out)
        free(idx);
    return PC_OK;
}

static int randomk_apply(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                         float scale, float *dense)
{
    return randomk_apply_list(c, h, payload, scale, dense, NULL);
}

const codec_ops_t pc_codec_ops_randomk = {.max_payload = randomk_max_payload,
                                          .compress = randomk_compress,
                                          .validate = randomk_validate,
                                          .apply = randomk_apply,
                                          .apply_indices = randomk_apply_list,
                                          .fold = momentum_fold};

int pc_codec__indices(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                      uint32_t *idx)
{
    if (!pc_codec__sparse(c))
        return PC_EINVAL;
    if (c->spec.id == PC_CODEC_RANDOMK) {
        uint64_t *bits = calloc(((size_t)h->n + 63) / 64, sizeof(uint64_t));
        if (!bits)
            return PC_ENOMEM;
        randomk_indices(&c->spec, h->iteration, h->chunk, h->n, h->entries, bits, idx);
        free(bits);
        return PC_OK;
    }
    const uint8_t *values;
    return parse_indices(c, h, payload, idx, &values, NULL, 0); /* validated: cannot fail */
}
