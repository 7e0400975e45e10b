/* codec_dense: codecs that send every element: none (binary32), fp16 (binary16), and the
 * quantisers qsgd, terngrad and efsign, whose per-element codes are bit-packed.
 *
 * Bit packing: code i occupies bits [i*b, (i+1)*b) of the payload read as one little-endian
 * bit string (LSB first within each byte); the payload is ceil(n*b/8) bytes and its pad
 * bits must be zero. The header's scale carries the codec's scale: the L2 norm (qsgd), the
 * largest magnitude (terngrad), the mean magnitude (efsign).
 *
 * Stochastic rounding (qsgd, terngrad) draws element i's uniform from draw i of the Philox
 * stream (seed, subsequence(iteration, chunk)), so the result is a pure function of the
 * inputs, whichever thread or device computes it. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "codec_impl.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_philox.h"

/* The values to encode: the residual after folding in the gradient, the gradient, or (grad
 * NULL) what pc_codec_fold left in the state. Checks they are finite. */
static const float *prepare(const pc_codec_t *c, pc_codec_state_t *st, const float *grad, int *rc)
{
    float *v = pc_codec__source(c, st, grad);
    *rc = pc_codec__fold_finite(v, c->spec.ef ? grad : NULL, st->n) ? PC_OK : PC_ERANGE;
    return v;
}

/* ---- bit strings ------------------------------------------------------------------------ */

typedef struct bitw {
    uint8_t *p;
    uint64_t acc;
    unsigned nbits;
} bitw_t;

static inline void bitw_put(bitw_t *w, uint32_t code, unsigned b)
{
    w->acc |= (uint64_t)code << w->nbits;
    w->nbits += b;
    while (w->nbits >= 8) {
        *w->p++ = (uint8_t)w->acc;
        w->acc >>= 8;
        w->nbits -= 8;
    }
}

static inline void bitw_flush(bitw_t *w)
{
    if (w->nbits)
        *w->p++ = (uint8_t)w->acc; /* pad bits are zero */
    w->nbits = 0;
}

typedef struct bitr {
    const uint8_t *p;
    uint64_t acc;
    unsigned nbits;
} bitr_t;

static inline uint32_t bitr_get(bitr_t *r, unsigned b)
{
    while (r->nbits < b) {
        r->acc |= (uint64_t)*r->p++ << r->nbits;
        r->nbits += 8;
    }
    uint32_t code = (uint32_t)(r->acc & ((1u << b) - 1));
    r->acc >>= b;
    r->nbits -= b;
    return code;
}

static size_t packed_bytes(size_t n, unsigned b)
{
    return (n * b + 7) / 8;
}

/* Validate n codes of b bits: payload size, each code <= max_code, zero pad bits. */
static int check_codes(const pc_wire_header_t *h, const uint8_t *payload, unsigned b,
                       uint32_t max_code, const char *name, char *err, size_t errlen)
{
    if (h->entries != h->n)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: %s message with %u entries, expected %u", h->chunk, name,
                            h->entries, h->n);
    size_t want = packed_bytes(h->n, b);
    if (h->payload != want)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: %s payload of %u bytes, expected %zu", h->chunk, name,
                            h->payload, want);
    bitr_t r = {payload, 0, 0};
    for (uint32_t i = 0; i < h->n; i++) {
        uint32_t code = bitr_get(&r, b);
        if (code > max_code)
            return pc_error_fmt(PC_EFORMAT, err, errlen,
                                "chunk %u: %s code %u of element %u out of range", h->chunk, name,
                                code, i);
    }
    /* The reader has pulled exactly the payload's bytes; what it holds unread is padding. */
    if (r.acc != 0)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "chunk %u: %s pad bits are not zero", h->chunk,
                            name);
    return PC_OK;
}

/* ---- none -------------------------------------------------------------------------------- */

static size_t none_max_payload(const pc_codec_t *c, size_t n)
{
    (void)c;
    return 4 * n;
}

static int none_compress(pc_codec_t *c, pc_codec_state_t *st, const float *grad,
                         pc_wire_header_t *h, uint8_t *payload, size_t cap)
{
    (void)cap;
    const float *v = pc_codec__source(c, st, grad);
    uint32_t bad = 0;
    for (size_t i = 0; i < st->n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof(u));
        bad |= (u & 0x7f800000u) == 0x7f800000u;
        pc_wire_put_u32(payload + 4 * i, u);
    }
    if (bad)
        return PC_ERANGE;
    h->entries = (uint32_t)st->n;
    h->payload = (uint32_t)(4 * st->n);
    return PC_OK;
}

static int none_validate(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                         char *err, size_t errlen)
{
    (void)c;
    if (h->entries != h->n || h->payload != 4 * (size_t)h->n)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: dense message of %u entries in %u bytes, "
                            "expected %u entries",
                            h->chunk, h->entries, h->payload, h->n);
    return pc_codec__f32s_check(h->chunk, payload, h->n, "value", err, errlen);
}

static int none_apply(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                      float scale, float *dense)
{
    (void)c;
    pc_codec__f32s_add(payload, h->n, scale, dense);
    return PC_OK;
}

const codec_ops_t pc_codec_ops_none = {.max_payload = none_max_payload,
                                       .compress = none_compress,
                                       .validate = none_validate,
                                       .apply = none_apply};

/* ---- fp16 -------------------------------------------------------------------------------- */

static size_t fp16_max_payload(const pc_codec_t *c, size_t n)
{
    (void)c;
    return 2 * n;
}

static int fp16_compress(pc_codec_t *c, pc_codec_state_t *st, const float *grad,
                         pc_wire_header_t *h, uint8_t *payload, size_t cap)
{
    (void)cap;
    int rc;
    const float *v = prepare(c, st, grad, &rc);
    if (rc != PC_OK)
        return rc;
    for (size_t i = 0; i < st->n; i++) {
        float x = v[i];
        x = x > PC_CODEC_F16_MAX ? PC_CODEC_F16_MAX
                                 : (x < -PC_CODEC_F16_MAX ? -PC_CODEC_F16_MAX : x);
        uint16_t q = pc_wire_f32_to_f16(x);
        pc_wire_put_u16(payload + 2 * i, q);
        if (c->spec.ef)
            st->residual[i] -= pc_wire_f16_to_f32(q);
    }
    h->entries = (uint32_t)st->n;
    h->payload = (uint32_t)(2 * st->n);
    return PC_OK;
}

static int fp16_validate(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                         char *err, size_t errlen)
{
    (void)c;
    if (h->entries != h->n || h->payload != 2 * (size_t)h->n)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: fp16 message of %u entries in %u bytes, "
                            "expected %u entries",
                            h->chunk, h->entries, h->payload, h->n);
    for (uint32_t i = 0; i < h->n; i++)
        if ((pc_wire_get_u16(payload + 2 * (size_t)i) & 0x7c00u) == 0x7c00u)
            return pc_error_fmt(PC_EFORMAT, err, errlen, "chunk %u: value %u is not finite",
                                h->chunk, i);
    return PC_OK;
}

static int fp16_apply(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                      float scale, float *dense)
{
    (void)c;
    for (uint32_t i = 0; i < h->n; i++)
        dense[i] += scale * pc_wire_f16_to_f32(pc_wire_get_u16(payload + 2 * (size_t)i));
    return PC_OK;
}

const codec_ops_t pc_codec_ops_fp16 = {.max_payload = fp16_max_payload,
                                       .compress = fp16_compress,
                                       .validate = fp16_validate,
                                       .apply = fp16_apply};

/* ---- qsgd ----------------------------------------------------------------------------------
 * Alistarh et al., "QSGD" (NeurIPS 2017): with s levels and norm = ||v||_2, element i is
 * sign(v_i) * norm * l_i / s where l_i is |v_i| / norm * s rounded up with probability equal
 * to its fractional part, down otherwise: unbiased. Code = s + sign * l_i in 0..2s, in
 * b = ceil(log2(2s + 1)) bits. */

static unsigned qsgd_bits(int s)
{
    unsigned b = 1;
    while ((1u << b) < (unsigned)(2 * s + 1))
        b++;
    return b;
}

/* The value of level q (-s..s) of s: norm * (q / s). Dividing first keeps it within
 * |norm| (no overflow for any finite norm); sender (error feedback) and receiver share it. */
static inline float qsgd_value(float norm, int q, int s)
{
    return norm * ((float)q / (float)s);
}

static size_t qsgd_max_payload(const pc_codec_t *c, size_t n)
{
    return packed_bytes(n, qsgd_bits(c->spec.levels));
}

static int qsgd_compress(pc_codec_t *c, pc_codec_state_t *st, const float *grad,
                         pc_wire_header_t *h, uint8_t *payload, size_t cap)
{
    (void)cap;
    int rc;
    const float *v = prepare(c, st, grad, &rc);
    if (rc != PC_OK)
        return rc;
    int s = c->spec.levels;
    unsigned b = qsgd_bits(s);
    float norm = (float)sqrt(pc_codec__sum(v, st->n, PC_CODEC_SUM_SQUARES));
    if (!isfinite(norm))
        return PC_ERANGE;
    pc_philox_t g;
    pc_philox_init(&g, c->spec.seed, pc_philox_subsequence(h->iteration, h->chunk), 0);
    bitw_t w = {payload, 0, 0};
    for (size_t i = 0; i < st->n; i++) {
        float u = pc_philox_uniform(pc_philox_next(&g));
        int lev = 0;
        if (norm > 0) {
            float r = fabsf(v[i]) / norm * (float)s;
            float l = floorf(r);
            lev = (int)l + (u < r - l);
            if (lev > s)
                lev = s; /* rounding of norm can put r a hair above s */
        }
        uint32_t code = (uint32_t)(v[i] < 0 ? s - lev : s + lev);
        bitw_put(&w, code, b);
        if (c->spec.ef)
            st->residual[i] -= qsgd_value(norm, (int)code - s, s);
    }
    bitw_flush(&w);
    h->entries = (uint32_t)st->n;
    h->payload = (uint32_t)packed_bytes(st->n, b);
    h->scale = norm;
    return PC_OK;
}

static int qsgd_validate(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                         char *err, size_t errlen)
{
    int s = c->spec.levels;
    return check_codes(h, payload, qsgd_bits(s), (uint32_t)(2 * s), "qsgd", err, errlen);
}

static int qsgd_apply(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                      float scale, float *dense)
{
    int s = c->spec.levels;
    unsigned b = qsgd_bits(s);
    bitr_t r = {payload, 0, 0};
    for (uint32_t i = 0; i < h->n; i++) {
        int q = (int)bitr_get(&r, b) - s;
        dense[i] += scale * qsgd_value(h->scale, q, s);
    }
    return PC_OK;
}

const codec_ops_t pc_codec_ops_qsgd = {.max_payload = qsgd_max_payload,
                                       .compress = qsgd_compress,
                                       .validate = qsgd_validate,
                                       .apply = qsgd_apply};

/* ---- terngrad ------------------------------------------------------------------------------
 * Wen et al., "TernGrad" (NeurIPS 2017): with m = max|v|, element i is sign(v_i) * m with
 * probability |v_i| / m, else 0: unbiased. Codes (2 bits): 0 zero, 1 +m, 2 -m; 3 invalid. */

static size_t terngrad_max_payload(const pc_codec_t *c, size_t n)
{
    (void)c;
    return packed_bytes(n, 2);
}

static int terngrad_compress(pc_codec_t *c, pc_codec_state_t *st, const float *grad,
                             pc_wire_header_t *h, uint8_t *payload, size_t cap)
{
    (void)cap;
    int rc;
    const float *v = prepare(c, st, grad, &rc);
    if (rc != PC_OK)
        return rc;
    float m = 0;
    for (size_t i = 0; i < st->n; i++)
        m = fabsf(v[i]) > m ? fabsf(v[i]) : m;
    pc_philox_t g;
    pc_philox_init(&g, c->spec.seed, pc_philox_subsequence(h->iteration, h->chunk), 0);
    bitw_t w = {payload, 0, 0};
    for (size_t i = 0; i < st->n; i++) {
        float u = pc_philox_uniform(pc_philox_next(&g));
        uint32_t code = 0;
        if (m > 0 && u <= fabsf(v[i]) / m && v[i] != 0)
            code = v[i] < 0 ? 2 : 1;
        bitw_put(&w, code, 2);
        if (c->spec.ef)
            st->residual[i] -= code == 1 ? m : (code == 2 ? -m : 0.0f);
    }
    bitw_flush(&w);
    h->entries = (uint32_t)st->n;
    h->payload = (uint32_t)packed_bytes(st->n, 2);
    h->scale = m;
    return PC_OK;
}

static int terngrad_validate(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                             char *err, size_t errlen)
{
    (void)c;
    return check_codes(h, payload, 2, 2, "terngrad", err, errlen);
}

static int terngrad_apply(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                          float scale, float *dense)
{
    (void)c;
    bitr_t r = {payload, 0, 0};
    for (uint32_t i = 0; i < h->n; i++) {
        uint32_t code = bitr_get(&r, 2);
        if (code)
            dense[i] += scale * (code == 1 ? h->scale : -h->scale);
    }
    return PC_OK;
}

const codec_ops_t pc_codec_ops_terngrad = {.max_payload = terngrad_max_payload,
                                           .compress = terngrad_compress,
                                           .validate = terngrad_validate,
                                           .apply = terngrad_apply};

/* ---- efsign ----------------------------------------------------------------------------------
 * Error-feedback signSGD (Karimireddy et al., ICML 2019): element i is sign(v_i) * mean|v|,
 * one bit per element (1 = negative); the residual keeps the rest. */

static size_t efsign_max_payload(const pc_codec_t *c, size_t n)
{
    (void)c;
    return packed_bytes(n, 1);
}

static int efsign_compress(pc_codec_t *c, pc_codec_state_t *st, const float *grad,
                           pc_wire_header_t *h, uint8_t *payload, size_t cap)
{
    (void)cap;
    int rc;
    const float *v = prepare(c, st, grad, &rc);
    if (rc != PC_OK)
        return rc;
    float mean = (float)(pc_codec__sum(v, st->n, PC_CODEC_SUM_ABS) / (double)st->n);
    bitw_t w = {payload, 0, 0};
    for (size_t i = 0; i < st->n; i++) {
        uint32_t neg = v[i] < 0;
        bitw_put(&w, neg, 1);
        if (c->spec.ef)
            st->residual[i] -= neg ? -mean : mean;
    }
    bitw_flush(&w);
    h->entries = (uint32_t)st->n;
    h->payload = (uint32_t)packed_bytes(st->n, 1);
    h->scale = mean;
    return PC_OK;
}

static int efsign_validate(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                           char *err, size_t errlen)
{
    (void)c;
    return check_codes(h, payload, 1, 1, "efsign", err, errlen);
}

static int efsign_apply(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                        float scale, float *dense)
{
    (void)c;
    bitr_t r = {payload, 0, 0};
    for (uint32_t i = 0; i < h->n; i++)
        dense[i] += scale * (bitr_get(&r, 1) ? -h->scale : h->scale);
    return PC_OK;
}

const codec_ops_t pc_codec_ops_efsign = {.max_payload = efsign_max_payload,
                                         .compress = efsign_compress,
                                         .validate = efsign_validate,
                                         .apply = efsign_apply};
