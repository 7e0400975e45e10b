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
 * inputs, whichever thread or device computes it. The quantisers' element loops (encode,
 * decode, validation) are in codec_quant.c, by instruction set. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "codec_impl.h"
#include "fp16_impl.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_philox.h"
#include "quant_impl.h"

/* The values to encode: the residual after folding in the gradient, the gradient, or (grad
 * NULL) what pc_codec_fold left in the state. Checks they are finite. */
static const float *prepare(const pc_codec_t *c, pc_codec_state_t *st, const float *grad, int *rc)
{
    float *v = pc_codec__source(c, st, grad);
    *rc = pc_codec__fold_finite(v, c->spec.ef ? grad : NULL, st->n) ? PC_OK : PC_ERANGE;
    return v;
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
    if (!pc_codec__f32s_put_at(pc_codec__simd(), v, st->n, payload))
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

/* The fold, the check, the encode and the residual in one pass where the CPU has F16C
 * (codec_fp16.c); v is the residual with error feedback, else the gradient or the stage. */
static int fp16_compress(pc_codec_t *c, pc_codec_state_t *st, const float *grad,
                         pc_wire_header_t *h, uint8_t *payload, size_t cap)
{
    (void)cap;
    float *v = pc_codec__source(c, st, grad);
    int rc = pc_codec__fp16_encode_at(pc_codec__fp16_simd(), v, grad, c->spec.ef, payload, st->n);
    if (rc != PC_OK)
        return rc;
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
    size_t bad = pc_codec__fp16_check_at(pc_codec__fp16_simd(), payload, h->n);
    if (bad < h->n)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "chunk %u: value %zu is not finite", h->chunk,
                            bad);
    return PC_OK;
}

static int fp16_apply(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                      float scale, float *dense)
{
    (void)c;
    pc_codec__fp16_apply_at(pc_codec__fp16_simd(), payload, h->n, scale, dense);
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
 * b = ceil(log2(2s + 1)) bits (pc_codec__qsgd_bits). The value of level q is norm * (q / s):
 * dividing first keeps it within |norm| (no overflow for any finite norm); the sender's
 * error feedback and the receiver share it (codec_quant.c). */

static size_t qsgd_max_payload(const pc_codec_t *c, size_t n)
{
    return pc_codec__packed_bytes(n, pc_codec__qsgd_bits(c->spec.levels));
}

static int qsgd_compress(pc_codec_t *c, pc_codec_state_t *st, const float *grad,
                         pc_wire_header_t *h, uint8_t *payload, size_t cap)
{
    (void)cap;
    int rc = PC_OK;
    /* Without error feedback the fold is only a finiteness check, and the norm makes the
     * same check one pass fewer: a NaN or an infinity makes the double sum of squares NaN or
     * infinite, and finite floats cannot overflow it (each square < 2^256, n < 2^32). */
    const float *v = c->spec.ef ? prepare(c, st, grad, &rc) : pc_codec__source(c, st, grad);
    if (rc != PC_OK)
        return rc;
    int s = c->spec.levels;
    float norm = (float)sqrt(pc_codec__sum(v, st->n, PC_CODEC_SUM_SQUARES));
    if (!isfinite(norm))
        return PC_ERANGE;
    pc_codec__quant_t q = {.v = v,
                           .res = c->spec.ef ? st->residual : NULL,
                           .n = st->n,
                           .scale = norm,
                           .levels = s,
                           .seed = c->spec.seed,
                           .subseq = pc_philox_subsequence(h->iteration, h->chunk),
                           .payload = payload};
    pc_codec__qsgd_encode_at(pc_codec__simd(), &q);
    h->entries = (uint32_t)st->n;
    h->payload = (uint32_t)pc_codec__packed_bytes(st->n, pc_codec__qsgd_bits(s));
    h->scale = norm;
    return PC_OK;
}

static int qsgd_validate(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                         char *err, size_t errlen)
{
    int s = c->spec.levels;
    return pc_codec__check_codes_at(pc_codec__simd(), h, payload, pc_codec__qsgd_bits(s),
                                    (uint32_t)(2 * s), "qsgd", err, errlen);
}

static int qsgd_apply(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                      float scale, float *dense)
{
    pc_codec__qsgd_apply_at(pc_codec__simd(), payload, h->n, c->spec.levels, h->scale, scale,
                            dense);
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
    return pc_codec__packed_bytes(n, 2);
}

static int terngrad_compress(pc_codec_t *c, pc_codec_state_t *st, const float *grad,
                             pc_wire_header_t *h, uint8_t *payload, size_t cap)
{
    (void)cap;
    int rc = PC_OK;
    /* Without error feedback the fold is only a finiteness check: the pass for max |v| makes
     * it (pc_codec__absmax_bits_at). */
    const float *v = c->spec.ef ? prepare(c, st, grad, &rc) : pc_codec__source(c, st, grad);
    if (rc != PC_OK)
        return rc;
    uint32_t mbits = pc_codec__absmax_bits_at(pc_codec__simd(), v, st->n);
    if (mbits >= 0x7f800000u)
        return PC_ERANGE;
    float m;
    memcpy(&m, &mbits, sizeof(m));
    pc_codec__quant_t q = {.v = v,
                           .res = c->spec.ef ? st->residual : NULL,
                           .n = st->n,
                           .scale = m,
                           .seed = c->spec.seed,
                           .subseq = pc_philox_subsequence(h->iteration, h->chunk),
                           .payload = payload};
    pc_codec__terngrad_encode_at(pc_codec__simd(), &q);
    h->entries = (uint32_t)st->n;
    h->payload = (uint32_t)pc_codec__packed_bytes(st->n, 2);
    h->scale = m;
    return PC_OK;
}

static int terngrad_validate(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                             char *err, size_t errlen)
{
    (void)c;
    return pc_codec__check_codes_at(pc_codec__simd(), h, payload, 2, 2, "terngrad", err, errlen);
}

static int terngrad_apply(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                          float scale, float *dense)
{
    (void)c;
    pc_codec__terngrad_apply_at(pc_codec__simd(), payload, h->n, h->scale, scale, dense);
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
    return pc_codec__packed_bytes(n, 1);
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
    pc_codec__quant_t q = {.v = v,
                           .res = c->spec.ef ? st->residual : NULL,
                           .n = st->n,
                           .scale = mean,
                           .payload = payload};
    pc_codec__efsign_encode_at(pc_codec__simd(), &q);
    h->entries = (uint32_t)st->n;
    h->payload = (uint32_t)pc_codec__packed_bytes(st->n, 1);
    h->scale = mean;
    return PC_OK;
}

static int efsign_validate(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                           char *err, size_t errlen)
{
    (void)c;
    return pc_codec__check_codes_at(pc_codec__simd(), h, payload, 1, 1, "efsign", err, errlen);
}

static int efsign_apply(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                        float scale, float *dense)
{
    (void)c;
    pc_codec__efsign_apply_at(pc_codec__simd(), payload, h->n, h->scale, scale, dense);
    return PC_OK;
}

const codec_ops_t pc_codec_ops_efsign = {.max_payload = efsign_max_payload,
                                         .compress = efsign_compress,
                                         .validate = efsign_validate,
                                         .apply = efsign_apply};
