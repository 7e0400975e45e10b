/* test_codec_quant: the quantisers' element loops (src/codec/quant_impl.h: qsgd, terngrad
 * and efsign encode, decode-add, validation, terngrad's max |v|) in every build this CPU
 * runs, bit for bit against reference copies of the scalar loops they replaced (below:
 * Philox word i for element i through pc_philox_next, a bit-at-a-time packer). Lengths
 * 0..200 and about a million; values with zeros of both signs, huge, tiny and subnormal
 * magnitudes; several seeds, iterations and chunks; every qsgd code width; scales that
 * exercise qsgd's clamp and the zero-scale branches; payload bytes past the end must stay
 * untouched. The test compiles codec_quant.c itself to reach the builds. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec/quant_impl.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_philox.h"

#define GUARD      16   /* bytes after a payload that must stay untouched */
#define GUARD_BYTE 0x5A /* what they hold */
#define BIG_N      ((1u << 20) + 37)

static const char *const builds[] = {"baseline", "AVX2", "AVX-512"};

/* ---- the reference: the scalar loops as codec_dense.c had them ------------------------- */

typedef struct {
    uint8_t *p;
    uint64_t acc;
    unsigned nbits;
} ref_w_t;

static void ref_put(ref_w_t *w, uint32_t code, unsigned b)
{
    w->acc |= (uint64_t)code << w->nbits;
    w->nbits += b;
    while (w->nbits >= 8) {
        *w->p++ = (uint8_t)w->acc;
        w->acc >>= 8;
        w->nbits -= 8;
    }
}

static void ref_flush(ref_w_t *w)
{
    if (w->nbits)
        *w->p++ = (uint8_t)w->acc;
    w->nbits = 0;
}

typedef struct {
    const uint8_t *p;
    uint64_t acc;
    unsigned nbits;
} ref_r_t;

static uint32_t ref_get(ref_r_t *r, unsigned b)
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

static float ref_qsgd_value(float norm, int q, int s)
{
    return norm * ((float)q / (float)s);
}

static void ref_qsgd(const pc_codec__quant_t *q)
{
    int s = q->levels;
    unsigned b = pc_codec__qsgd_bits(s);
    float norm = q->scale;
    const float *v = q->v;
    pc_philox_t g;
    pc_philox_init(&g, q->seed, q->subseq, 0);
    ref_w_t w = {q->payload, 0, 0};
    for (size_t i = 0; i < q->n; i++) {
        float u = pc_philox_uniform(pc_philox_next(&g));
        int lev = 0;
        if (norm > 0) {
            float r = fabsf(v[i]) / norm * (float)s;
            float l = floorf(r);
            lev = (int)l + (u < r - l);
            if (lev > s)
                lev = s;
        }
        uint32_t code = (uint32_t)(v[i] < 0 ? s - lev : s + lev);
        ref_put(&w, code, b);
        if (q->res)
            q->res[i] -= ref_qsgd_value(norm, (int)code - s, s);
    }
    ref_flush(&w);
}

static void ref_terngrad(const pc_codec__quant_t *q)
{
    float m = q->scale;
    const float *v = q->v;
    pc_philox_t g;
    pc_philox_init(&g, q->seed, q->subseq, 0);
    ref_w_t w = {q->payload, 0, 0};
    for (size_t i = 0; i < q->n; i++) {
        float u = pc_philox_uniform(pc_philox_next(&g));
        uint32_t code = 0;
        if (m > 0 && u <= fabsf(v[i]) / m && v[i] != 0)
            code = v[i] < 0 ? 2 : 1;
        ref_put(&w, code, 2);
        if (q->res)
            q->res[i] -= code == 1 ? m : (code == 2 ? -m : 0.0f);
    }
    ref_flush(&w);
}

static void ref_efsign(const pc_codec__quant_t *q)
{
    float mean = q->scale;
    ref_w_t w = {q->payload, 0, 0};
    for (size_t i = 0; i < q->n; i++) {
        uint32_t neg = q->v[i] < 0;
        ref_put(&w, neg, 1);
        if (q->res)
            q->res[i] -= neg ? -mean : mean;
    }
    ref_flush(&w);
}

static float ref_absmax(const float *v, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabsf(v[i]) > m ? fabsf(v[i]) : m;
    return m;
}

/* codec: 0 qsgd (levels s), 1 terngrad, 2 efsign. */
static void ref_apply(int codec, const uint8_t *payload, uint32_t n, int s, float hscale,
                      float scale, float *dense)
{
    ref_r_t r = {payload, 0, 0};
    for (uint32_t i = 0; i < n; i++) {
        if (codec == 0) {
            int q = (int)ref_get(&r, pc_codec__qsgd_bits(s)) - s;
            dense[i] += scale * ref_qsgd_value(hscale, q, s);
        } else if (codec == 1) {
            uint32_t code = ref_get(&r, 2);
            if (code)
                dense[i] += scale * (code == 1 ? hscale : -hscale);
        } else {
            dense[i] += scale * (ref_get(&r, 1) ? -hscale : hscale);
        }
    }
}

static int ref_check_codes(const pc_wire_header_t *h, const uint8_t *payload, unsigned b,
                           uint32_t max_code, const char *name, char *err, size_t errlen)
{
    if (h->entries != h->n)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: %s message with %u entries, expected %u", h->chunk, name,
                            h->entries, h->n);
    size_t want = ((size_t)h->n * b + 7) / 8;
    if (h->payload != want)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: %s payload of %u bytes, expected %zu", h->chunk, name,
                            h->payload, want);
    ref_r_t r = {payload, 0, 0};
    for (uint32_t i = 0; i < h->n; i++) {
        uint32_t code = ref_get(&r, b);
        if (code > max_code)
            return pc_error_fmt(PC_EFORMAT, err, errlen,
                                "chunk %u: %s code %u of element %u out of range", h->chunk, name,
                                code, i);
    }
    if (r.acc != 0)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "chunk %u: %s pad bits are not zero", h->chunk,
                            name);
    return PC_OK;
}

/* ---- inputs -------------------------------------------------------------------------- */

/* n values (plus 1 spare in front, for misaligned views): mostly uniform magnitudes over
 * 2^-20..2^20 of both signs, with +0, -0, +-1e30 (huge, yet a norm of a million of them is
 * finite), +-1e-30, subnormals (+-1e-40, +-FLT_TRUE_MIN) and +-1 mixed in. */
static float *values(size_t n, uint64_t seed)
{
    float *x = malloc((n + 1) * sizeof *x);
    assert_non_null(x);
    pc_philox_t g;
    pc_philox_init(&g, seed, 77, 0);
    for (size_t i = 0; i < n + 1; i++) {
        uint32_t a = pc_philox_next(&g), c = pc_philox_next(&g);
        float sign = (a >> 31) ? -1.0f : 1.0f;
        switch (a % 16) {
        case 0:
            x[i] = 0.0f;
            break;
        case 1:
            x[i] = -0.0f;
            break;
        case 2:
            x[i] = sign * 1e30f;
            break;
        case 3:
            x[i] = sign * 1e-30f;
            break;
        case 4:
            x[i] = sign * 1e-40f;
            break;
        case 5:
            x[i] = sign * FLT_TRUE_MIN;
            break;
        case 6:
            x[i] = sign;
            break;
        default:
            x[i] = sign * pc_philox_uniform(c) * ldexpf(1.0f, (int)((a >> 8) % 41) - 20);
            break;
        }
    }
    return x;
}

static float l2norm(const float *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)v[i] * (double)v[i];
    return (float)sqrt(s);
}

static uint8_t *payload_buf(size_t bytes)
{
    uint8_t *p = malloc(bytes + GUARD);
    assert_non_null(p);
    memset(p, GUARD_BYTE, bytes + GUARD);
    return p;
}

static void assert_guard(const uint8_t *p, size_t bytes)
{
    for (size_t j = 0; j < GUARD; j++)
        assert_int_equal(p[bytes + j], GUARD_BYTE);
}

static float *copy(const float *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof *y);
    assert_non_null(y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

typedef void (*encode_fn)(int simd, const pc_codec__quant_t *q);

/* Encode x[0..n) (codec 0 qsgd, 1 terngrad, 2 efsign) with `scale` in every build against
 * the reference: the payload's bytes, the guard after it, and the residual (ef: v is the
 * residual, as in the codec). Then decode-add the payload in every build against the
 * reference's decode. */
static void check_encode(int codec, const float *x, size_t n, int s, float scale, bool ef,
                         uint64_t seed, uint64_t subseq)
{
    static const encode_fn enc[] = {pc_codec__qsgd_encode_at, pc_codec__terngrad_encode_at,
                                    pc_codec__efsign_encode_at};
    unsigned b = codec == 0 ? pc_codec__qsgd_bits(s) : codec == 1 ? 2 : 1;
    size_t bytes = pc_codec__packed_bytes(n, b);
    float *rres = copy(x, n);
    uint8_t *rpay = payload_buf(bytes);
    pc_codec__quant_t q = {.v = ef ? rres : x,
                           .res = ef ? rres : NULL,
                           .n = n,
                           .scale = scale,
                           .levels = s,
                           .seed = seed,
                           .subseq = subseq,
                           .payload = rpay};
    if (codec == 0)
        ref_qsgd(&q);
    else if (codec == 1)
        ref_terngrad(&q);
    else
        ref_efsign(&q);
    for (int simd = 0; simd <= pc_codec__simd(); simd++) {
        float *res = copy(x, n);
        uint8_t *pay = payload_buf(bytes);
        q.v = ef ? res : x;
        q.res = ef ? res : NULL;
        q.payload = pay;
        enc[codec](simd, &q);
        if (memcmp(pay, rpay, bytes) != 0 || (ef && memcmp(res, rres, n * sizeof *res) != 0))
            fail_msg("%s build: codec %d, n %zu, s %d, scale %a, ef %d, seed %llu, subseq "
                     "%llx differs from the reference",
                     builds[simd], codec, n, s, (double)scale, (int)ef, (unsigned long long)seed,
                     (unsigned long long)subseq);
        assert_guard(pay, bytes);
        free(res);
        free(pay);
    }
    /* Decode-add what was sent into a dense buffer holding zeros of both signs and more. */
    static const float scales[] = {1.0f, -0.5f, 3.0f};
    float *d0 = values(n, seed + 1000);
    for (int k = 0; k < 3; k++) {
        float *rd = copy(d0, n);
        ref_apply(codec, rpay, (uint32_t)n, s, scale, scales[k], rd);
        for (int simd = 0; simd <= pc_codec__simd(); simd++) {
            float *dd = copy(d0, n);
            if (codec == 0)
                pc_codec__qsgd_apply_at(simd, rpay, (uint32_t)n, s, scale, scales[k], dd);
            else if (codec == 1)
                pc_codec__terngrad_apply_at(simd, rpay, (uint32_t)n, scale, scales[k], dd);
            else
                pc_codec__efsign_apply_at(simd, rpay, (uint32_t)n, scale, scales[k], dd);
            if (memcmp(dd, rd, n * sizeof *dd) != 0)
                fail_msg("%s build: decode of codec %d, n %zu, s %d, scale %a x %g differs",
                         builds[simd], codec, n, s, (double)scale, (double)scales[k]);
            free(dd);
        }
        free(rd);
    }
    free(d0);
    free(rres);
    free(rpay);
}

/* The subsequences tried: iteration 0 chunk 0, a large iteration, the largest chunk. */
static const uint64_t subseqs[] = {0, (12345ull << 32) | 7u, (1ull << 40 << 8) | 0xffffffffu};
static const int levels[] = {1,  2,  3,  7,  8, 15,
                             16, 31, 64, 127}; /* b = 2, 3, 3, 4, 5, 5, 6,
                                                  6, 7, 8 */

/* ---- tests ----------------------------------------------------------------------------- */

static void test_builds(void **state)
{
    (void)state;
    for (int simd = 0; simd <= PC_CODEC__SIMD_AVX512; simd++)
        if (simd <= pc_codec__simd())
            print_message("codec_quant: the %s build tested\n", builds[simd]);
        else
            print_message("codec_quant: the %s build skipped (this CPU does not run it)\n",
                          builds[simd]);
    assert_true(pc_codec__simd() >= PC_CODEC__SIMD_NONE);
}

static void test_qsgd(void **state)
{
    (void)state;
    for (size_t n = 0; n <= 200; n++) {
        float *x0 = values(n, n);
        const float *x = x0 + n % 2; /* odd n: a view one float in */
        float norm = l2norm(x, n), amax = ref_absmax(x, n);
        const float norms[] = {norm, amax, 0.75f * amax, 0.0f};
        for (size_t l = 0; l < sizeof levels / sizeof *levels; l++)
            for (int k = 0; k < 4; k++)
                for (int ef = 0; ef < 2; ef++)
                    check_encode(0, x, n, levels[l], norms[k], ef, 1 + n % 3, subseqs[n % 3]);
        free(x0);
    }
    float *x = values(BIG_N, 5);
    float norm = l2norm(x, BIG_N);
    assert_true(isfinite(norm));
    check_encode(0, x, BIG_N, 16, norm, true, 42, subseqs[1]);
    check_encode(0, x, BIG_N, 127, norm, false, 0xfedcba9876543210u, subseqs[2]);
    check_encode(0, x, BIG_N, 1, 0.75f * ref_absmax(x, BIG_N), true, 7, subseqs[0]);
    free(x);
}

static void test_terngrad(void **state)
{
    (void)state;
    for (size_t n = 0; n <= 200; n++) {
        float *x0 = values(n, 300 + n);
        const float *x = x0 + n % 2;
        float amax = ref_absmax(x, n);
        const float ms[] = {amax, 0.5f * amax, 0.0f};
        for (int k = 0; k < 3; k++)
            for (int ef = 0; ef < 2; ef++)
                for (int sq = 0; sq < 3; sq++)
                    check_encode(1, x, n, 16, ms[k], ef, 3 + (uint64_t)sq, subseqs[sq]);
        free(x0);
    }
    float *x = values(BIG_N, 6);
    check_encode(1, x, BIG_N, 16, ref_absmax(x, BIG_N), false, 9, subseqs[1]);
    check_encode(1, x, BIG_N, 16, ref_absmax(x, BIG_N), true, 0xfedcba9876543210u, subseqs[2]);
    free(x);
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

#define BAND_N 1003 /* every loop of every build: 256-, 128- and 64-element steps, a tail */

/* terngrad's decision u <= fl(|v| / m) where it is closest: element i placed at the
 * distance d = bits(|v|) - bits(fl(u m)) from the product of its own uniform u, for every
 * d in -6..6 and both signs, with NaN, infinities, zeros, subnormals and ordinary values
 * between (a build deciding by a product or a reciprocal without an exact correction
 * fails here); m a power of two, odd m, tiny m (2^-92 and below: u m near the subnormals),
 * the largest float, and m subnormal, infinite, NaN, negative and zero. BAND_N reaches
 * every loop. Every build against the reference, with and without error feedback. */
static void test_terngrad_band(void **state)
{
    (void)state;
    const float ms[] = {1.0f,      0.7f,    3.3e-3f, 12345.678f, 0x1p-92f, 0x1.fffffep-93f,
                        0x1p-100f, FLT_MAX, 1e-45f,  INFINITY,   NAN,      -1.0f,
                        0.0f};
    const float odd[] = {NAN, INFINITY, 0.0f, -0.0f, FLT_TRUE_MIN, 1e-40f, 1.0f, 0.25f};
    float *x = malloc(BAND_N * sizeof *x);
    assert_non_null(x);
    for (size_t k = 0; k < sizeof ms / sizeof *ms; k++)
        for (int sq = 0; sq < 3; sq++) {
            uint64_t seed = 21 + k;
            pc_philox_t g;
            pc_philox_init(&g, seed, subseqs[sq], 0);
            for (size_t i = 0; i < BAND_N; i++) {
                float u = pc_philox_uniform(pc_philox_next(&g));
                float sign = (i / 16) % 2 ? -1.0f : 1.0f;
                size_t j = i % 16;
                if (j < 13) {
                    int64_t b = (int64_t)(to_bits(u * ms[k]) & 0x7fffffffu) + (int64_t)j - 6;
                    x[i] = sign * from_bits((uint32_t)(b < 0 ? 0 : b));
                } else if (j < 15) {
                    x[i] = sign * odd[(i / 16 + j) % 8];
                } else {
                    x[i] = sign * u * 0.5f;
                }
            }
            for (int ef = 0; ef < 2; ef++)
                check_encode(1, x, BAND_N, 16, ms[k], ef, seed, subseqs[sq]);
        }
    free(x);
}

/* qsgd's quotient |v| / norm where its rounding shows: exact ties between subnormals (norm
 * 3 2^10, a = 3K 2^-140 for odd K: a / norm = K 2^-150), a / norm next to the midpoints
 * between floats, and, for each element's own uniform u, r = a / norm s next to L + u for a
 * level L, where the stochastic rounding's u < r - floor(r) is decided by the last bits of
 * the quotient (a quotient one ulp off, as a reciprocal's, fails there); ordinary values,
 * zeros and subnormals between; several norms and level counts; every build against the
 * reference. */
static void test_qsgd_quotient(void **state)
{
    (void)state;
    const float norms[] = {3072.0f, 1.0f, 0.1f, 7.77e-30f, 3.1e30f};
    const int lv[] = {1, 16, 127};
    float *x = malloc(BAND_N * sizeof *x);
    assert_non_null(x);
    for (size_t k = 0; k < sizeof norms / sizeof *norms; k++)
        for (size_t l = 0; l < sizeof lv / sizeof *lv; l++) {
            double nd = (double)norms[k];
            int s = lv[l];
            uint64_t seed = 9 + k;
            pc_philox_t g, gu;
            pc_philox_init(&g, 500 + k, l, 0);
            pc_philox_init(&gu, seed, subseqs[l], 0); /* the encode's uniforms */
            for (size_t i = 0; i < BAND_N; i++) {
                uint32_t r = pc_philox_next(&g);
                float u = pc_philox_uniform(pc_philox_next(&gu));
                float sign = (r >> 31) ? -1.0f : 1.0f;
                float f = pc_philox_uniform(r);
                size_t j = i % 8;
                float a;
                if (j == 0) {
                    a = ldexpf((float)(3 * (2 * (i / 8 % 64) + 1)), -140);
                } else if (j < 3) { /* f + ulp(f) / 2 is exact in double */
                    double mid = (double)f + ldexp(1.0, ilogbf(f) - 24);
                    a = from_bits(to_bits((float)(mid * nd)) + (uint32_t)j - 1u); /* > 0 */
                } else if (j < 7) { /* r next to L + u: bits -1, 0, +1, +2 from the nearest */
                    double t = ((double)(r % (uint32_t)s) + (double)u) / (double)s;
                    int64_t b = (int64_t)to_bits((float)(t * nd)) + (int64_t)j - 4;
                    a = from_bits((uint32_t)(b < 0 ? 0 : b));
                } else {
                    a = (r & 3) == 0 ? 0.0f : (r & 3) == 1 ? 1e-40f : f * norms[k];
                }
                x[i] = sign * a;
            }
            for (int ef = 0; ef < 2; ef++)
                check_encode(0, x, BAND_N, s, norms[k], ef, seed, subseqs[l]);
        }
    free(x);
}

static void test_efsign(void **state)
{
    (void)state;
    for (size_t n = 0; n <= 200; n++) {
        float *x0 = values(n, 600 + n);
        const float *x = x0 + n % 2;
        double sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += fabs((double)x[i]);
        const float means[] = {n ? (float)(sum / (double)n) : 0.0f, 1e-40f, 0.0f};
        for (int k = 0; k < 3; k++)
            for (int ef = 0; ef < 2; ef++)
                check_encode(2, x, n, 16, means[k], ef, 0, 0);
        free(x0);
    }
    float *x = values(BIG_N, 8);
    check_encode(2, x, BIG_N, 16, 0.3f, true, 0, 0);
    free(x);
}

/* The bits of max |v|: the reference's float maximum for finite values, and at least
 * 0x7f800000 with an infinity or a NaN anywhere (first, middle, tail). */
static void test_absmax(void **state)
{
    (void)state;
    for (size_t n = 0; n <= 200; n++) {
        float *x = values(n, 900 + n);
        float want = ref_absmax(x + n % 2, n);
        uint32_t wbits;
        memcpy(&wbits, &want, sizeof wbits);
        for (int simd = 0; simd <= pc_codec__simd(); simd++) {
            assert_int_equal(pc_codec__absmax_bits_at(simd, x + n % 2, n), wbits);
            if (n) {
                const size_t at[] = {0, n / 2, n - 1};
                const float bad[] = {INFINITY, -INFINITY, NAN, -NAN};
                for (int a = 0; a < 3; a++) {
                    float keep = x[n % 2 + at[a]];
                    x[n % 2 + at[a]] = bad[(a + (int)n) % 4];
                    assert_true(pc_codec__absmax_bits_at(simd, x + n % 2, n) >= 0x7f800000u);
                    x[n % 2 + at[a]] = keep;
                }
            }
        }
        free(x);
    }
    float *x = values(BIG_N, 10);
    x[BIG_N - 3] = -3e30f; /* the largest, in the tail */
    float big = 3e30f;
    uint32_t bbits;
    memcpy(&bbits, &big, sizeof bbits);
    for (int simd = 0; simd <= pc_codec__simd(); simd++)
        assert_int_equal(pc_codec__absmax_bits_at(simd, x, BIG_N), bbits);
    free(x);
}

/* Code j of a b-bit string set to `code`. */
static void set_code(uint8_t *p, size_t j, unsigned b, uint32_t code)
{
    for (unsigned k = 0; k < b; k++) {
        size_t bit = j * b + k;
        p[bit / 8] =
            (uint8_t)((p[bit / 8] & ~(1u << (bit % 8))) | (((code >> k) & 1u) << (bit % 8)));
    }
}

/* Validation of a payload (and of `bad` corrupted copies) in every build: the same result
 * and message as the reference. */
static void check_validate(const pc_wire_header_t *h, const uint8_t *payload, unsigned b,
                           uint32_t max_code)
{
    char want[256], got[256];
    want[0] = got[0] = 0;
    int rc = ref_check_codes(h, payload, b, max_code, "q", want, sizeof want);
    for (int simd = 0; simd <= pc_codec__simd(); simd++) {
        got[0] = 0;
        assert_int_equal(
            pc_codec__check_codes_at(simd, h, payload, b, max_code, "q", got, sizeof got), rc);
        if (rc != PC_OK)
            assert_string_equal(got, want);
    }
}

static void test_validate(void **state)
{
    (void)state;
    const size_t sizes[] = {0, 1, 7, 8, 9, 31, 33, 64, 100, 129, 200, 1000, 4099, BIG_N};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si];
        float *x = values(n, 1200 + si);
        for (int codec = 0; codec < 3; codec++) {
            size_t nl = codec == 0 ? sizeof levels / sizeof *levels : 1;
            for (size_t l = 0; l < nl; l++) {
                int s = levels[l];
                unsigned b = codec == 0 ? pc_codec__qsgd_bits(s) : codec == 1 ? 2 : 1;
                uint32_t max_code = codec == 0 ? (uint32_t)(2 * s) : codec == 1 ? 2 : 1;
                size_t bytes = pc_codec__packed_bytes(n, b);
                uint8_t *p = payload_buf(bytes);
                pc_codec__quant_t q = {.v = x,
                                       .n = n,
                                       .scale = codec == 1 ? ref_absmax(x, n) : l2norm(x, n),
                                       .levels = s,
                                       .seed = 11,
                                       .subseq = subseqs[1],
                                       .payload = p};
                if (codec == 0)
                    ref_qsgd(&q);
                else if (codec == 1)
                    ref_terngrad(&q);
                else
                    ref_efsign(&q);
                pc_wire_header_t h = {.chunk = 3,
                                      .n = (uint32_t)n,
                                      .entries = (uint32_t)n,
                                      .payload = (uint32_t)bytes};
                check_validate(&h, p, b, max_code);
                /* Wrong entries and size. */
                h.entries = (uint32_t)n + 1;
                check_validate(&h, p, b, max_code);
                h.entries = (uint32_t)n;
                h.payload = (uint32_t)bytes + 1;
                check_validate(&h, p, b, max_code);
                h.payload = (uint32_t)bytes;
                /* A code out of range at the first, a middle and the last element (and two). */
                if (n && max_code < (1u << b) - 1) {
                    const size_t at[] = {0, n / 2, n - 1};
                    for (int a = 0; a < 3; a++) {
                        uint8_t *c = payload_buf(bytes);
                        memcpy(c, p, bytes);
                        set_code(c, at[a], b, (1u << b) - 1);
                        check_validate(&h, c, b, max_code);
                        set_code(c, n - 1, b, max_code + 1);
                        check_validate(&h, c, b, max_code);
                        free(c);
                    }
                }
                /* A pad bit set. */
                if ((n * b) % 8) {
                    uint8_t *c = payload_buf(bytes);
                    memcpy(c, p, bytes);
                    c[bytes - 1] |= 0x80;
                    check_validate(&h, c, b, max_code);
                    free(c);
                }
                free(p);
            }
        }
        free(x);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builds),        cmocka_unit_test(test_qsgd),
        cmocka_unit_test(test_terngrad),      cmocka_unit_test(test_efsign),
        cmocka_unit_test(test_absmax),        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_terngrad_band), cmocka_unit_test(test_qsgd_quotient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
