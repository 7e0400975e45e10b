/* codec_quant: the element loops of the quantisers qsgd, terngrad and efsign, by
 * instruction set (quant_impl.h); codec_dense.c computes each message's scale and calls them.
 *
 * Where the time went. Scalar, qsgd and terngrad draw one Philox4x32-10 word per element
 * (ten rounds of two 32x32->64-bit multiplies for every four words), quantise it with a
 * division, and append a b-bit code to a bit string a bit-field at a time; efsign packs a
 * sign bit a call; the decoders and the validators take codes out one call each. At 25 M
 * elements on one core that was 180 ms (qsgd, 16 levels), 118 ms (terngrad), 114 ms
 * (efsign's decode) where the memory traffic allows 10-15.
 *
 * What the AVX2 and AVX-512 builds do instead:
 *  - Philox in vector lanes, one counter a lane: 8 (AVX2) or 16 (AVX-512) blocks at once,
 *    32 or 64 words. The 64-bit products come from two _mm*_mul_epu32 (even lanes, then the
 *    odd lanes shifted down), their halves blended back. Lane p of the counter vector holds
 *    block (W / 4) * (p % 4) + p / 4 of the group (W lanes), the order in which a 4x4
 *    transpose inside each 128-bit lane (unpack 32, unpack 64) leaves the words in element
 *    order: element i still gets word i % 4 of block i / 4, as pc_philox_next hands it out.
 *    uint32 -> float is AVX-512F's unsigned conversion; AVX2 has none, so it converts the
 *    two 16-bit halves exactly and adds 65536 hi + lo, one rounding of the exact x, which is
 *    what the scalar (float)x does.
 *  - The quantisation is the scalar code's float operations in its order, one element a
 *    lane (division included: a reciprocal would change bits), so every lane rounds as the
 *    scalar loop does; the build flags keep fp-contract off, and no target here enables FMA.
 *  - Packing: 8 codes of b <= 8 bits are exactly b bytes, so 8 codes become one 64-bit word
 *    stored with an 8-byte store and the write pointer advanced by b; the bytes a store
 *    writes past its b are rewritten by the next. AVX2 builds the word by shifts within
 *    lanes (pairs, then quads); AVX-512 narrows the codes to bytes (vpmovdb) and gathers
 *    each byte's low b bits with BMI2's pext, and makes terngrad's 2-bit codes straight
 *    from its compare masks with pdep. qsgd with up to 127 levels has b <= 8, terngrad 2,
 *    efsign 1 (a compare's movemask).
 *  - AVX-512 draws 64 blocks (256 words) per step in four interleaved chains of rounds,
 *    AVX2 32 blocks (128 words) in four chains of 8.
 *    A round's multiplies wait on the round before (about 5 cycles of latency on 12
 *    instructions), so one chain left the vector units mostly idle: in a profile of the
 *    qsgd encode (25 M elements, issue 46) the Philox rounds were half the encode's
 *    samples, the 64-bit extracts, shifts and scalar stores of the old packer most of
 *    the rest. Two chains and pext took the encode from 17.1-18.6 ms to 10.3-10.8 ms
 *    (thread CPU time, best of 15, loaded machine); terngrad's 15.9-17.4 to 10.5-11.0.
 *    Four chains took the arithmetic further, on 65536 elements in L2 encoded 100 times
 *    (best of 11): terngrad 2.6 -> 2.0 ms, qsgd (16 levels) 2.6 -> 2.1 ms; three chains
 *    gave 2.0-2.1, five and six (registers spilled) 2.0-2.3, and keeping each chain's
 *    even and odd blocks apart in 64-bit lanes (a shift instead of two shuffles a
 *    product) 2.2-2.7. The AVX2 build (the same CPU, one chain before): terngrad 9.5-10.1
 *    -> 5.4-6.2 ms, qsgd 10.4-11.3 -> 6.5-7.2 ms with four chains, 6.7-7.5 and 7.7-8.8
 *    with two, 6.1-6.3 and 7.1-7.5 with three.
 *  - The division stays. It was thought to be most of what was left, but the divider runs
 *    beside the other units: terngrad deciding u <= fl(|v| / m) from the product u m
 *    (exact outside a band of 3 ulps, where it divided) cost 2.1-2.3 ms against the
 *    division's 2.0, and qsgd's quotient through a double product (exact: its rounding
 *    is the division's) 2.7-2.8 against 2.1 (same measurement, four chains).
 *  - Decoding reverses the packing (a broadcast word shifted per lane) and validation checks
 *    whole words, falling back to the element-by-element loop only to name a bad element.
 * The tails (and the baseline build) are the scalar loops, started at an element index that
 * is a multiple of 8, where the bit string is byte-aligned and Philox is at draw i. */
#include "config.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_philox.h"
#include "quant_impl.h"

#ifdef PC_CODEC__X86
#include <immintrin.h>
#endif

/* ---- bit strings: code i at bits [i*b, (i+1)*b), LSB first within each byte --------------- */

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

/* The value of qsgd's level q (-s..s): norm * (q / s). Dividing first keeps it within
 * |norm| (no overflow for any finite norm); sender (error feedback) and receiver share it. */
static inline float qsgd_value(float norm, int q, int s)
{
    return norm * ((float)q / (float)s);
}

/* ---- the scalar loops: the baseline build, and every build's tail from element i0 (a
 * multiple of 8) on ---------------------------------------------------------------------- */

static void qsgd_from(const pc_codec__quant_t *q, unsigned b, size_t i0)
{
    const float *v = q->v;
    float norm = q->scale;
    int s = q->levels;
    pc_philox_t g;
    pc_philox_init(&g, q->seed, q->subseq, i0);
    bitw_t w = {q->payload + i0 * b / 8, 0, 0};
    for (size_t i = i0; i < q->n; i++) {
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
        if (q->res)
            q->res[i] -= qsgd_value(norm, (int)code - s, s);
    }
    bitw_flush(&w);
}

static void terngrad_from(const pc_codec__quant_t *q, size_t i0)
{
    const float *v = q->v;
    float m = q->scale;
    pc_philox_t g;
    pc_philox_init(&g, q->seed, q->subseq, i0);
    bitw_t w = {q->payload + i0 / 4, 0, 0};
    for (size_t i = i0; i < q->n; i++) {
        float u = pc_philox_uniform(pc_philox_next(&g));
        uint32_t code = 0;
        if (m > 0 && u <= fabsf(v[i]) / m && v[i] != 0)
            code = v[i] < 0 ? 2 : 1;
        bitw_put(&w, code, 2);
        if (q->res)
            q->res[i] -= code == 1 ? m : (code == 2 ? -m : 0.0f);
    }
    bitw_flush(&w);
}

static void efsign_from(const pc_codec__quant_t *q, size_t i0)
{
    const float *v = q->v;
    float mean = q->scale;
    bitw_t w = {q->payload + i0 / 8, 0, 0};
    for (size_t i = i0; i < q->n; i++) {
        uint32_t neg = v[i] < 0;
        bitw_put(&w, neg, 1);
        if (q->res)
            q->res[i] -= neg ? -mean : mean;
    }
    bitw_flush(&w);
}

static uint32_t absmax_bits_from(const float *v, size_t n, size_t i0, uint32_t m)
{
    for (size_t i = i0; i < n; i++) {
        uint32_t a;
        memcpy(&a, &v[i], sizeof(a));
        a &= 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

static void qsgd_apply_from(const uint8_t *payload, uint32_t n, int s, float hscale, float scale,
                            float *dense, uint32_t i0)
{
    unsigned b = pc_codec__qsgd_bits(s);
    bitr_t r = {payload + (size_t)i0 * b / 8, 0, 0};
    for (uint32_t i = i0; i < n; i++) {
        int q = (int)bitr_get(&r, b) - s;
        dense[i] += scale * qsgd_value(hscale, q, s);
    }
}

/* terngrad and efsign: the code read straight from its byte (4 and 8 codes a byte). */
static void terngrad_apply_from(const uint8_t *payload, uint32_t n, float hscale, float scale,
                                float *dense, uint32_t i0)
{
    for (uint32_t i = i0; i < n; i++) {
        uint32_t code = (uint32_t)(payload[i / 4] >> (2 * (i % 4))) & 3u;
        if (code)
            dense[i] += scale * (code == 1 ? hscale : -hscale);
    }
}

static void efsign_apply_from(const uint8_t *payload, uint32_t n, float hscale, float scale,
                              float *dense, uint32_t i0)
{
    for (uint32_t i = i0; i < n; i++)
        dense[i] += scale * ((payload[i / 8] >> (i % 8)) & 1u ? -hscale : hscale);
}

/* Whether codes i0 .. n - 1 (i0 a multiple of 8) are all <= max_code. */
static bool codes_fit_from(const uint8_t *payload, uint32_t n, unsigned b, uint32_t max_code,
                           uint32_t i0)
{
    bitr_t r = {payload + (size_t)i0 * b / 8, 0, 0};
    uint32_t bad = 0; /* branch-free: a valid message is the common case */
    for (uint32_t i = i0; i < n; i++)
        bad |= bitr_get(&r, b) > max_code;
    return !bad;
}

/* ---- AVX2 and AVX-512 ------------------------------------------------------------------- */
#ifdef PC_CODEC__X86

/* The AVX-512 build packs codes with BMI2's pext and pdep: the encoders' entry points check
 * BMI2 and give a CPU with AVX-512F but without BMI2 the AVX2 build. */
#define AVX2   __attribute__((target("avx2")))
#define AVX512 __attribute__((target("avx512f,bmi2")))

/* Philox4x32-10's constants (pc_philox.h): the multipliers and the Weyl key increments. */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* pc_philox_uniform's x * 2^-32 + 2^-33, the same float constants. */
#define U_SCALE  2.3283064365386963e-10f
#define U_OFFSET 1.1641532182693481e-10f

/* Elements the 8-byte stores of qsgd's packer keep clear of the payload's end: the loops
 * stop while at least this many remain (their last store reaches 8 - b bytes past its
 * codes, and 64 codes of b >= 1 bits are at least 8 bytes). */
#define STORE_SLACK 64

/* hi and lo 32 bits of the 64-bit products a * m, lane by lane (m: one value in every lane). */
AVX2 static inline void mulhilo8(__m256i a, __m256i m, __m256i *hi, __m256i *lo)
{
    __m256i pe = _mm256_mul_epu32(a, m);                        /* lanes 0, 2, 4, 6 */
    __m256i po = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m); /* lanes 1, 3, 5, 7 */
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
    *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
}

/* Draws 4 blk .. 4 blk + 31 of the stream (key k0, k1; subsequence halves in every lane of
 * sub_lo, sub_hi), in element order, 8 a vector: w[0] draws 0..7 of the group. blk + 7 must
 * fit 32 bits (the counter's high word is 0). */
AVX2 static inline void philox8(__m256i w[4], uint32_t blk, uint32_t k0, uint32_t k1,
                                __m256i sub_lo, __m256i sub_hi)
{
    const __m256i m0 = _mm256_set1_epi32((int)PHILOX_M0), m1 = _mm256_set1_epi32((int)PHILOX_M1);
    /* Lane p: block blk + 2 (p % 4) + p / 4 (the file's header says why). */
    __m256i c0 =
        _mm256_add_epi32(_mm256_set1_epi32((int)blk), _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
    __m256i c1 = _mm256_setzero_si256(), c2 = sub_lo, c3 = sub_hi;
    for (int round = 0; round < 10; round++) {
        __m256i hi0, lo0, hi1, lo1;
        mulhilo8(c0, m0, &hi0, &lo0);
        mulhilo8(c2, m1, &hi1, &lo1);
        c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
        c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
        c1 = lo1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    /* In each 128-bit lane, positions k and 4 + k become blocks 2k and 2k + 1 whole. */
    __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpacklo_epi32(c2, c3);
    __m256i t2 = _mm256_unpackhi_epi32(c0, c1), t3 = _mm256_unpackhi_epi32(c2, c3);
    w[0] = _mm256_unpacklo_epi64(t0, t1);
    w[1] = _mm256_unpackhi_epi64(t0, t1);
    w[2] = _mm256_unpacklo_epi64(t2, t3);
    w[3] = _mm256_unpackhi_epi64(t2, t3);
}

/* philox8 four times, on blocks blk .. blk + 31 (chain c: blocks blk + 8 c .., words into
 * w[4 c .. 4 c + 3]), the four chains' rounds interleaved: the same words as philox8.
 * blk + 31 must fit 32 bits. Why four: the file's header. */
AVX2 static inline void philox8x4(__m256i w[16], uint32_t blk, uint32_t k0, uint32_t k1,
                                  __m256i sub_lo, __m256i sub_hi)
{
    const __m256i m0 = _mm256_set1_epi32((int)PHILOX_M0), m1 = _mm256_set1_epi32((int)PHILOX_M1);
    const __m256i base =
        _mm256_add_epi32(_mm256_set1_epi32((int)blk), _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
    __m256i c0[4], c1[4], c2[4], c3[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        c0[c] = _mm256_add_epi32(base, _mm256_set1_epi32(8 * c));
        c1[c] = _mm256_setzero_si256();
        c2[c] = sub_lo;
        c3[c] = sub_hi;
    }
    for (int round = 0; round < 10; round++) {
        const __m256i kv0 = _mm256_set1_epi32((int)k0), kv1 = _mm256_set1_epi32((int)k1);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i hi0, lo0, hi1, lo1;
            mulhilo8(c0[c], m0, &hi0, &lo0);
            mulhilo8(c2[c], m1, &hi1, &lo1);
            c0[c] = _mm256_xor_si256(_mm256_xor_si256(hi1, c1[c]), kv0);
            c2[c] = _mm256_xor_si256(_mm256_xor_si256(hi0, c3[c]), kv1);
            c1[c] = lo1;
            c3[c] = lo0;
        }
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m256i t0 = _mm256_unpacklo_epi32(c0[c], c1[c]), t1 = _mm256_unpacklo_epi32(c2[c], c3[c]);
        __m256i t2 = _mm256_unpackhi_epi32(c0[c], c1[c]), t3 = _mm256_unpackhi_epi32(c2[c], c3[c]);
        w[4 * c] = _mm256_unpacklo_epi64(t0, t1);
        w[4 * c + 1] = _mm256_unpackhi_epi64(t0, t1);
        w[4 * c + 2] = _mm256_unpacklo_epi64(t2, t3);
        w[4 * c + 3] = _mm256_unpackhi_epi64(t2, t3);
    }
}

/* pc_philox_uniform lane by lane. */
AVX2 static inline __m256 uniform8(__m256i x)
{
    __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(x, 16));
    __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(x, _mm256_set1_epi32(0xffff)));
    __m256 f = _mm256_add_ps(_mm256_mul_ps(hi, _mm256_set1_ps(65536.0f)), lo); /* (float)x */
    return _mm256_add_ps(_mm256_mul_ps(f, _mm256_set1_ps(U_SCALE)), _mm256_set1_ps(U_OFFSET));
}

/* 8 codes (lane k: code k, < 2^b, b <= 8) as their 8b-bit string. cb, cb2: b and 2b as
 * shift counts. */
AVX2 static inline uint64_t pack8(__m256i code, __m128i cb, __m128i cb2, unsigned b)
{
    __m256i pair = _mm256_or_si256(_mm256_and_si256(code, _mm256_set1_epi64x(0xffffffff)),
                                   _mm256_sll_epi64(_mm256_srli_epi64(code, 32), cb));
    __m256i quad = _mm256_or_si256(pair, _mm256_sll_epi64(_mm256_shuffle_epi32(pair, 0x4E), cb2));
    uint64_t lo = (uint64_t)_mm_cvtsi128_si64(_mm256_castsi256_si128(quad));
    uint64_t hi = (uint64_t)_mm_cvtsi128_si64(_mm256_extracti128_si256(quad, 1));
    return lo | hi << (4 * b);
}

/* The constants of one qsgd encode (AVX2). */
typedef struct qsgd8_k {
    __m256 absm, normv, sf, zero;
    __m256i si, one, live; /* live: all ones when norm > 0, else every level is 0 */
    __m128i cb, cb2;       /* b and 2b as shift counts */
    unsigned b;
} qsgd8_k_t;

/* qsgd's 8 elements at x (their words w), their b bytes at *p (advanced), their residuals
 * at res (or NULL). */
AVX2 static inline void qsgd8(const qsgd8_k_t *k, __m256i w, const float *x, float *res,
                              uint8_t **p)
{
    __m256 u = uniform8(w);
    __m256 xv = _mm256_loadu_ps(x);
    __m256 r = _mm256_mul_ps(_mm256_div_ps(_mm256_and_ps(xv, k->absm), k->normv), k->sf);
    __m256 l = _mm256_floor_ps(r);
    __m256i up = _mm256_castps_si256(_mm256_cmp_ps(u, _mm256_sub_ps(r, l), _CMP_LT_OQ));
    __m256i lev = _mm256_add_epi32(_mm256_cvttps_epi32(l), _mm256_and_si256(up, k->one));
    lev = _mm256_and_si256(_mm256_min_epi32(lev, k->si), k->live);
    __m256i neg = _mm256_castps_si256(_mm256_cmp_ps(xv, k->zero, _CMP_LT_OQ));
    __m256i code =
        _mm256_blendv_epi8(_mm256_add_epi32(k->si, lev), _mm256_sub_epi32(k->si, lev), neg);
    uint64_t bits = pack8(code, k->cb, k->cb2, k->b);
    memcpy(*p, &bits, 8);
    *p += k->b;
    if (res) {
        __m256 qf = _mm256_cvtepi32_ps(_mm256_sub_epi32(code, k->si));
        __m256 val = _mm256_mul_ps(k->normv, _mm256_div_ps(qf, k->sf));
        _mm256_storeu_ps(res, _mm256_sub_ps(_mm256_loadu_ps(res), val));
    }
}

AVX2 static size_t qsgd_avx2(const pc_codec__quant_t *q, unsigned b)
{
    if (b > 8 || q->n > UINT32_MAX)
        return 0;
    const qsgd8_k_t k = {.absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)),
                         .normv = _mm256_set1_ps(q->scale),
                         .sf = _mm256_set1_ps((float)q->levels),
                         .zero = _mm256_setzero_ps(),
                         .si = _mm256_set1_epi32(q->levels),
                         .one = _mm256_set1_epi32(1),
                         .live = _mm256_set1_epi32(q->scale > 0 ? -1 : 0),
                         .cb = _mm_cvtsi32_si128((int)b),
                         .cb2 = _mm_cvtsi32_si128((int)(2 * b)),
                         .b = b};
    const __m256i sub_lo = _mm256_set1_epi32((int)(uint32_t)q->subseq);
    const __m256i sub_hi = _mm256_set1_epi32((int)(uint32_t)(q->subseq >> 32));
    const uint32_t k0 = (uint32_t)q->seed, k1 = (uint32_t)(q->seed >> 32);
    const float *v = q->v; /* locals: the payload's byte stores may alias *q */
    float *res = q->res;
    const size_t n = q->n;
    uint8_t *p = q->payload;
    size_t i = 0;
    for (; i + 128 + STORE_SLACK <= n; i += 128) {
        __m256i w[16];
        philox8x4(w, (uint32_t)(i / 4), k0, k1, sub_lo, sub_hi);
        for (int j = 0; j < 16; j++)
            qsgd8(&k, w[j], v + i + 8 * (size_t)j, res ? res + i + 8 * (size_t)j : NULL, &p);
    }
    for (; i + 32 + STORE_SLACK <= n; i += 32) {
        __m256i w[4];
        philox8(w, (uint32_t)(i / 4), k0, k1, sub_lo, sub_hi);
        for (int j = 0; j < 4; j++)
            qsgd8(&k, w[j], v + i + 8 * (size_t)j, res ? res + i + 8 * (size_t)j : NULL, &p);
    }
    return i;
}

/* The constants of one terngrad encode (AVX2). */
typedef struct tern8_k {
    __m256 absm, mv, negm, zero, live; /* live: all ones when m > 0, else nothing is taken */
    __m256i one, two;
    __m128i cb, cb2; /* 2 and 4 as shift counts */
} tern8_k_t;

/* terngrad's 8 elements at x (their words w): returns their 16 code bits; subtracts the
 * values sent from res (or NULL). */
AVX2 static inline uint64_t terngrad8(const tern8_k_t *k, __m256i w, const float *x, float *res)
{
    __m256 u = uniform8(w);
    __m256 xv = _mm256_loadu_ps(x);
    __m256 pr = _mm256_div_ps(_mm256_and_ps(xv, k->absm), k->mv);
    __m256 take =
        _mm256_and_ps(_mm256_cmp_ps(u, pr, _CMP_LE_OQ), _mm256_cmp_ps(xv, k->zero, _CMP_NEQ_OQ));
    take = _mm256_and_ps(take, k->live);
    __m256 neg = _mm256_cmp_ps(xv, k->zero, _CMP_LT_OQ);
    __m256i code = _mm256_and_si256(_mm256_castps_si256(take),
                                    _mm256_blendv_epi8(k->one, k->two, _mm256_castps_si256(neg)));
    if (res) {
        __m256 val = _mm256_and_ps(take, _mm256_blendv_ps(k->mv, k->negm, neg)); /* or +0 */
        _mm256_storeu_ps(res, _mm256_sub_ps(_mm256_loadu_ps(res), val));
    }
    return pack8(code, k->cb, k->cb2, 2);
}

AVX2 static size_t terngrad_avx2(const pc_codec__quant_t *q)
{
    if (q->n > UINT32_MAX)
        return 0;
    const tern8_k_t k = {.absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)),
                         .mv = _mm256_set1_ps(q->scale),
                         .negm = _mm256_set1_ps(-q->scale),
                         .zero = _mm256_setzero_ps(),
                         .live = _mm256_castsi256_ps(_mm256_set1_epi32(q->scale > 0 ? -1 : 0)),
                         .one = _mm256_set1_epi32(1),
                         .two = _mm256_set1_epi32(2),
                         .cb = _mm_cvtsi32_si128(2),
                         .cb2 = _mm_cvtsi32_si128(4)};
    const __m256i sub_lo = _mm256_set1_epi32((int)(uint32_t)q->subseq);
    const __m256i sub_hi = _mm256_set1_epi32((int)(uint32_t)(q->subseq >> 32));
    const uint32_t k0 = (uint32_t)q->seed, k1 = (uint32_t)(q->seed >> 32);
    const float *v = q->v; /* locals: the payload's stores may alias *q */
    float *res = q->res;
    const size_t n = q->n;
    uint8_t *pay = q->payload;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) { /* 128 codes: 32 bytes */
        __m256i w[16];
        philox8x4(w, (uint32_t)(i / 4), k0, k1, sub_lo, sub_hi);
        uint64_t bits[4] = {0, 0, 0, 0};
        for (int j = 0; j < 16; j++) {
            size_t e = i + 8 * (size_t)j;
            bits[j / 4] |= terngrad8(&k, w[j], v + e, res ? res + e : NULL) << (16 * (j % 4));
        }
        memcpy(pay + i / 4, bits, 32);
    }
    for (; i + 32 <= n; i += 32) { /* 32 codes: 8 bytes */
        __m256i w[4];
        philox8(w, (uint32_t)(i / 4), k0, k1, sub_lo, sub_hi);
        uint64_t bits = 0;
        for (int j = 0; j < 4; j++) {
            size_t e = i + 8 * (size_t)j;
            bits |= terngrad8(&k, w[j], v + e, res ? res + e : NULL) << (16 * j);
        }
        memcpy(pay + i / 4, &bits, 8);
    }
    return i;
}

AVX2 static size_t efsign_avx2(const pc_codec__quant_t *q)
{
    const __m256 meanv = _mm256_set1_ps(q->scale), negmean = _mm256_set1_ps(-q->scale);
    const __m256 zero = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= q->n; i += 32) { /* 32 signs: 4 bytes */
        uint32_t bits = 0;
        for (int k = 0; k < 4; k++) {
            size_t e = i + 8 * (size_t)k;
            __m256 neg = _mm256_cmp_ps(_mm256_loadu_ps(q->v + e), zero, _CMP_LT_OQ);
            bits |= (uint32_t)_mm256_movemask_ps(neg) << (8 * k);
            if (q->res) {
                __m256 val = _mm256_blendv_ps(meanv, negmean, neg);
                _mm256_storeu_ps(q->res + e, _mm256_sub_ps(_mm256_loadu_ps(q->res + e), val));
            }
        }
        memcpy(q->payload + i / 8, &bits, 4);
    }
    return i;
}

/* The maximum of integers is one value whatever the order: four accumulators. */
AVX2 static uint32_t absmax_bits_avx2(const float *v, size_t n, size_t *done)
{
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i *p = (const __m256i *)(const void *)(v + i);
        a0 = _mm256_max_epu32(a0, _mm256_and_si256(_mm256_loadu_si256(p), absm));
        a1 = _mm256_max_epu32(a1, _mm256_and_si256(_mm256_loadu_si256(p + 1), absm));
        a2 = _mm256_max_epu32(a2, _mm256_and_si256(_mm256_loadu_si256(p + 2), absm));
        a3 = _mm256_max_epu32(a3, _mm256_and_si256(_mm256_loadu_si256(p + 3), absm));
    }
    __m256i a = _mm256_max_epu32(_mm256_max_epu32(a0, a1), _mm256_max_epu32(a2, a3));
    uint32_t lane[8], m = 0;
    _mm256_storeu_si256((__m256i *)(void *)lane, a);
    for (int l = 0; l < 8; l++)
        m = lane[l] > m ? lane[l] : m;
    *done = i;
    return m;
}

/* qsgd's codes (b <= 8) unpacked 8 at a time from b bytes; the AVX-512 build runs this
 * too (its wider lanes would add an insert for every two words and save nothing here). */
AVX2 static uint32_t qsgd_apply_avx2(const uint8_t *payload, uint32_t n, int s, float hscale,
                                     float scale, float *dense)
{
    unsigned b = pc_codec__qsgd_bits(s);
    if (b > 8)
        return 0;
    size_t bytes = pc_codec__packed_bytes(n, b);
    const __m256i shl = _mm256_setr_epi64x(0, 2 * b, 4 * b, 6 * b);
    const __m256i shh = _mm256_setr_epi64x(b, 3 * b, 5 * b, 7 * b);
    const __m256i mask = _mm256_set1_epi32((int)((1u << b) - 1)), si = _mm256_set1_epi32(s);
    const __m256 sf = _mm256_set1_ps((float)s), hs = _mm256_set1_ps(hscale);
    const __m256 sc = _mm256_set1_ps(scale);
    uint32_t i = 0;
    for (; i + 8 <= n && (size_t)i / 8 * b + 8 <= bytes; i += 8) {
        uint64_t word;
        memcpy(&word, payload + (size_t)i / 8 * b, 8);
        __m256i wv = _mm256_set1_epi64x((long long)word);
        __m256i lo = _mm256_srlv_epi64(wv, shl), hi = _mm256_srlv_epi64(wv, shh);
        __m256i code =
            _mm256_and_si256(_mm256_blend_epi32(lo, _mm256_slli_epi64(hi, 32), 0xAA), mask);
        __m256 qf = _mm256_cvtepi32_ps(_mm256_sub_epi32(code, si));
        __m256 val = _mm256_mul_ps(sc, _mm256_mul_ps(hs, _mm256_div_ps(qf, sf)));
        _mm256_storeu_ps(dense + i, _mm256_add_ps(_mm256_loadu_ps(dense + i), val));
    }
    return i;
}

AVX2 static uint32_t terngrad_apply_avx2(const uint8_t *payload, uint32_t n, float hscale,
                                         float scale, float *dense)
{
    const __m256 pos = _mm256_set1_ps(scale * hscale), neg = _mm256_set1_ps(scale * -hscale);
    const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i three = _mm256_set1_epi32(3), one = _mm256_set1_epi32(1);
    const __m256i zero = _mm256_setzero_si256();
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) { /* 8 codes: 2 bytes */
        uint32_t word = (uint32_t)payload[i / 4] | (uint32_t)payload[i / 4 + 1] << 8;
        __m256i code = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)word), sh), three);
        __m256 d = _mm256_loadu_ps(dense + i);
        __m256 add = _mm256_blendv_ps(neg, pos, _mm256_castsi256_ps(_mm256_cmpeq_epi32(code, one)));
        __m256 keep = _mm256_castsi256_ps(_mm256_cmpeq_epi32(code, zero)); /* code 0 adds nothing */
        _mm256_storeu_ps(dense + i, _mm256_blendv_ps(_mm256_add_ps(d, add), d, keep));
    }
    return i;
}

AVX2 static uint32_t efsign_apply_avx2(const uint8_t *payload, uint32_t n, float hscale,
                                       float scale, float *dense)
{
    const __m256 pos = _mm256_set1_ps(scale * hscale), neg = _mm256_set1_ps(scale * -hscale);
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) { /* a byte of signs */
        __m256i bit = _mm256_and_si256(_mm256_set1_epi32(payload[i / 8]), sel);
        __m256 m = _mm256_castsi256_ps(_mm256_cmpeq_epi32(bit, sel));
        __m256 d = _mm256_loadu_ps(dense + i);
        _mm256_storeu_ps(dense + i, _mm256_add_ps(d, _mm256_blendv_ps(pos, neg, m)));
    }
    return i;
}

/* Whether qsgd's codes 0 .. i - 1 are <= max_code, 8 at a time; *done = i. */
AVX2 static bool codes_fit_avx2(const uint8_t *payload, uint32_t n, unsigned b, uint32_t max_code,
                                uint32_t *done)
{
    size_t bytes = pc_codec__packed_bytes(n, b);
    const __m256i shl = _mm256_setr_epi64x(0, 2 * b, 4 * b, 6 * b);
    const __m256i shh = _mm256_setr_epi64x(b, 3 * b, 5 * b, 7 * b);
    const __m256i mask = _mm256_set1_epi32((int)((1u << b) - 1));
    const __m256i maxv = _mm256_set1_epi32((int)max_code);
    __m256i bad = _mm256_setzero_si256();
    uint32_t i = 0;
    for (; i + 8 <= n && (size_t)i / 8 * b + 8 <= bytes; i += 8) {
        uint64_t word;
        memcpy(&word, payload + (size_t)i / 8 * b, 8);
        __m256i wv = _mm256_set1_epi64x((long long)word);
        __m256i lo = _mm256_srlv_epi64(wv, shl), hi = _mm256_srlv_epi64(wv, shh);
        __m256i code =
            _mm256_and_si256(_mm256_blend_epi32(lo, _mm256_slli_epi64(hi, 32), 0xAA), mask);
        bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(code, maxv)); /* codes < 2^8: signed ok */
    }
    *done = i;
    return _mm256_testz_si256(bad, bad);
}

/* ---- AVX-512F ---- */

AVX512 static inline void mulhilo16(__m512i a, __m512i m, __m512i *hi, __m512i *lo)
{
    __m512i pe = _mm512_mul_epu32(a, m);                        /* even lanes */
    __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m); /* odd lanes */
    /* One merge-masked swap of each 32-bit pair per half (AVX2's shift and blend are two). */
    *hi = _mm512_mask_shuffle_epi32(po, 0x5555, pe, _MM_PERM_CDAB);
    *lo = _mm512_mask_shuffle_epi32(pe, 0xAAAA, po, _MM_PERM_CDAB);
}

/* philox8 on 16 blocks: draws 4 blk .. 4 blk + 63, 16 a vector. blk + 15 must fit 32 bits. */
AVX512 static inline void philox16(__m512i w[4], uint32_t blk, uint32_t k0, uint32_t k1,
                                   __m512i sub_lo, __m512i sub_hi)
{
    const __m512i m0 = _mm512_set1_epi32((int)PHILOX_M0), m1 = _mm512_set1_epi32((int)PHILOX_M1);
    /* Lane p: block blk + 4 (p % 4) + p / 4. */
    __m512i c0 =
        _mm512_add_epi32(_mm512_set1_epi32((int)blk),
                         _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    __m512i c1 = _mm512_setzero_si512(), c2 = sub_lo, c3 = sub_hi;
    for (int round = 0; round < 10; round++) {
        __m512i hi0, lo0, hi1, lo1;
        mulhilo16(c0, m0, &hi0, &lo0);
        mulhilo16(c2, m1, &hi1, &lo1);
        /* a ^ b ^ c in one instruction: truth table 0x96. */
        c0 = _mm512_ternarylogic_epi32(hi1, c1, _mm512_set1_epi32((int)k0), 0x96);
        c2 = _mm512_ternarylogic_epi32(hi0, c3, _mm512_set1_epi32((int)k1), 0x96);
        c1 = lo1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    /* In 128-bit lane L, position k becomes block 4k + L whole. */
    __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpacklo_epi32(c2, c3);
    __m512i t2 = _mm512_unpackhi_epi32(c0, c1), t3 = _mm512_unpackhi_epi32(c2, c3);
    w[0] = _mm512_unpacklo_epi64(t0, t1);
    w[1] = _mm512_unpackhi_epi64(t0, t1);
    w[2] = _mm512_unpacklo_epi64(t2, t3);
    w[3] = _mm512_unpackhi_epi64(t2, t3);
}

/* philox16 twice, on blocks blk .. blk + 15 (w[0..3]) and blk + 16 .. blk + 31 (w[4..7]),
 * the two chains of rounds interleaved: a round's products wait on the round before, so one
 * chain alone leaves the multipliers idle for most of its latency (the profile showed the
 * rounds' loop as latency-bound). blk + 31 must fit 32 bits. Same words as philox16. */
AVX512 static inline void philox16x2(__m512i w[8], uint32_t blk, uint32_t k0, uint32_t k1,
                                     __m512i sub_lo, __m512i sub_hi)
{
    const __m512i m0 = _mm512_set1_epi32((int)PHILOX_M0), m1 = _mm512_set1_epi32((int)PHILOX_M1);
    __m512i a0 =
        _mm512_add_epi32(_mm512_set1_epi32((int)blk),
                         _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    __m512i b0 = _mm512_add_epi32(a0, _mm512_set1_epi32(16));
    __m512i a1 = _mm512_setzero_si512(), a2 = sub_lo, a3 = sub_hi;
    __m512i b1 = a1, b2 = sub_lo, b3 = sub_hi;
    for (int round = 0; round < 10; round++) {
        __m512i hia0, loa0, hia1, loa1, hib0, lob0, hib1, lob1;
        const __m512i kv0 = _mm512_set1_epi32((int)k0), kv1 = _mm512_set1_epi32((int)k1);
        mulhilo16(a0, m0, &hia0, &loa0);
        mulhilo16(b0, m0, &hib0, &lob0);
        mulhilo16(a2, m1, &hia1, &loa1);
        mulhilo16(b2, m1, &hib1, &lob1);
        a0 = _mm512_ternarylogic_epi32(hia1, a1, kv0, 0x96);
        b0 = _mm512_ternarylogic_epi32(hib1, b1, kv0, 0x96);
        a2 = _mm512_ternarylogic_epi32(hia0, a3, kv1, 0x96);
        b2 = _mm512_ternarylogic_epi32(hib0, b3, kv1, 0x96);
        a1 = loa1;
        b1 = lob1;
        a3 = loa0;
        b3 = lob0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    __m512i t0 = _mm512_unpacklo_epi32(a0, a1), t1 = _mm512_unpacklo_epi32(a2, a3);
    __m512i t2 = _mm512_unpackhi_epi32(a0, a1), t3 = _mm512_unpackhi_epi32(a2, a3);
    w[0] = _mm512_unpacklo_epi64(t0, t1);
    w[1] = _mm512_unpackhi_epi64(t0, t1);
    w[2] = _mm512_unpacklo_epi64(t2, t3);
    w[3] = _mm512_unpackhi_epi64(t2, t3);
    t0 = _mm512_unpacklo_epi32(b0, b1);
    t1 = _mm512_unpacklo_epi32(b2, b3);
    t2 = _mm512_unpackhi_epi32(b0, b1);
    t3 = _mm512_unpackhi_epi32(b2, b3);
    w[4] = _mm512_unpacklo_epi64(t0, t1);
    w[5] = _mm512_unpackhi_epi64(t0, t1);
    w[6] = _mm512_unpacklo_epi64(t2, t3);
    w[7] = _mm512_unpackhi_epi64(t2, t3);
}

/* philox16 four times, on blocks blk .. blk + 63 (chain c: blocks blk + 16 c .., words into
 * w[4 c .. 4 c + 3]), the four chains' rounds interleaved: the same words as philox16.
 * blk + 63 must fit 32 bits. Why four: the file's header. */
AVX512 static inline void philox16x4(__m512i w[16], uint32_t blk, uint32_t k0, uint32_t k1,
                                     __m512i sub_lo, __m512i sub_hi)
{
    const __m512i m0 = _mm512_set1_epi32((int)PHILOX_M0), m1 = _mm512_set1_epi32((int)PHILOX_M1);
    const __m512i base =
        _mm512_add_epi32(_mm512_set1_epi32((int)blk),
                         _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    __m512i c0[4], c1[4], c2[4], c3[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        c0[c] = _mm512_add_epi32(base, _mm512_set1_epi32(16 * c));
        c1[c] = _mm512_setzero_si512();
        c2[c] = sub_lo;
        c3[c] = sub_hi;
    }
    for (int round = 0; round < 10; round++) {
        const __m512i kv0 = _mm512_set1_epi32((int)k0), kv1 = _mm512_set1_epi32((int)k1);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i hi0, lo0, hi1, lo1;
            mulhilo16(c0[c], m0, &hi0, &lo0);
            mulhilo16(c2[c], m1, &hi1, &lo1);
            c0[c] = _mm512_ternarylogic_epi32(hi1, c1[c], kv0, 0x96);
            c2[c] = _mm512_ternarylogic_epi32(hi0, c3[c], kv1, 0x96);
            c1[c] = lo1;
            c3[c] = lo0;
        }
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m512i t0 = _mm512_unpacklo_epi32(c0[c], c1[c]), t1 = _mm512_unpacklo_epi32(c2[c], c3[c]);
        __m512i t2 = _mm512_unpackhi_epi32(c0[c], c1[c]), t3 = _mm512_unpackhi_epi32(c2[c], c3[c]);
        w[4 * c] = _mm512_unpacklo_epi64(t0, t1);
        w[4 * c + 1] = _mm512_unpackhi_epi64(t0, t1);
        w[4 * c + 2] = _mm512_unpacklo_epi64(t2, t3);
        w[4 * c + 3] = _mm512_unpackhi_epi64(t2, t3);
    }
}

AVX512 static inline __m512 uniform16(__m512i x)
{
    __m512 f = _mm512_cvtepu32_ps(x);
    return _mm512_add_ps(_mm512_mul_ps(f, _mm512_set1_ps(U_SCALE)), _mm512_set1_ps(U_OFFSET));
}

/* The constants of one qsgd encode (AVX-512). */
typedef struct qsgd16_k {
    __m512 normv, sf, zero;
    __m512i si, one;
    __mmask16 live;
    uint64_t sel; /* the low b bits of each byte */
    unsigned b;
} qsgd16_k_t;

/* qsgd's 16 elements at x (their words w), their 2b bytes at *p (advanced), their residuals
 * at res (or NULL). The codes (< 2^b) narrow to bytes, and pext gathers the low b bits of
 * each of 8 bytes into 8b contiguous bits: code k at bit k b, the bit string's order. */
AVX512 static inline void qsgd16(const qsgd16_k_t *k, __m512i w, const float *x, float *res,
                                 uint8_t **p)
{
    __m512 u = uniform16(w);
    __m512 xv = _mm512_loadu_ps(x);
    __m512 r = _mm512_mul_ps(_mm512_div_ps(_mm512_abs_ps(xv), k->normv), k->sf);
    __m512 l = _mm512_roundscale_ps(r, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __mmask16 up = _mm512_cmp_ps_mask(u, _mm512_sub_ps(r, l), _CMP_LT_OQ);
    __m512i li = _mm512_cvttps_epi32(l);
    __m512i lev = _mm512_min_epi32(_mm512_mask_add_epi32(li, up, li, k->one), k->si);
    lev = _mm512_maskz_mov_epi32(k->live, lev);
    __mmask16 neg = _mm512_cmp_ps_mask(xv, k->zero, _CMP_LT_OQ);
    __m512i code = _mm512_mask_sub_epi32(_mm512_add_epi32(k->si, lev), neg, k->si, lev);
    __m128i bytes = _mm512_cvtepi32_epi8(code);
    uint64_t b0 = _pext_u64((uint64_t)_mm_cvtsi128_si64(bytes), k->sel);
    uint64_t b1 = _pext_u64((uint64_t)_mm_extract_epi64(bytes, 1), k->sel);
    memcpy(*p, &b0, 8);
    memcpy(*p + k->b, &b1, 8);
    *p += 2 * k->b;
    if (res) {
        __m512 qf = _mm512_cvtepi32_ps(_mm512_sub_epi32(code, k->si));
        __m512 val = _mm512_mul_ps(k->normv, _mm512_div_ps(qf, k->sf));
        _mm512_storeu_ps(res, _mm512_sub_ps(_mm512_loadu_ps(res), val));
    }
}

AVX512 static size_t qsgd_avx512(const pc_codec__quant_t *q, unsigned b)
{
    if (b > 8 || q->n > UINT32_MAX)
        return 0;
    const qsgd16_k_t k = {.normv = _mm512_set1_ps(q->scale),
                          .sf = _mm512_set1_ps((float)q->levels),
                          .zero = _mm512_setzero_ps(),
                          .si = _mm512_set1_epi32(q->levels),
                          .one = _mm512_set1_epi32(1),
                          .live = q->scale > 0 ? 0xFFFF : 0, /* else every level is 0 */
                          .sel = 0x0101010101010101u * ((1u << b) - 1),
                          .b = b};
    const __m512i sub_lo = _mm512_set1_epi32((int)(uint32_t)q->subseq);
    const __m512i sub_hi = _mm512_set1_epi32((int)(uint32_t)(q->subseq >> 32));
    const uint32_t k0 = (uint32_t)q->seed, k1 = (uint32_t)(q->seed >> 32);
    const float *v = q->v; /* locals: the payload's byte stores may alias *q */
    float *res = q->res;
    const size_t n = q->n;
    uint8_t *p = q->payload;
    size_t i = 0;
    for (; i + 256 + STORE_SLACK <= n; i += 256) {
        __m512i w[16];
        philox16x4(w, (uint32_t)(i / 4), k0, k1, sub_lo, sub_hi);
        for (int j = 0; j < 16; j++)
            qsgd16(&k, w[j], v + i + 16 * (size_t)j, res ? res + i + 16 * (size_t)j : NULL, &p);
    }
    for (; i + 128 + STORE_SLACK <= n; i += 128) {
        __m512i w[8];
        philox16x2(w, (uint32_t)(i / 4), k0, k1, sub_lo, sub_hi);
        for (int j = 0; j < 8; j++)
            qsgd16(&k, w[j], v + i + 16 * (size_t)j, res ? res + i + 16 * (size_t)j : NULL, &p);
    }
    for (; i + 64 + STORE_SLACK <= n; i += 64) {
        __m512i w[4];
        philox16(w, (uint32_t)(i / 4), k0, k1, sub_lo, sub_hi);
        for (int j = 0; j < 4; j++)
            qsgd16(&k, w[j], v + i + 16 * (size_t)j, res ? res + i + 16 * (size_t)j : NULL, &p);
    }
    return i;
}

/* terngrad's 16 elements at x (their words w): returns their 32 code bits, code k at bits
 * 2k, 2k + 1 (1: +m, 2: -m, as the scalar loop's take and sign give them), spread from the
 * two masks by pdep; subtracts the values sent from res (or NULL). */
AVX512 static inline uint64_t terngrad16(__m512 mv, __m512 negm, __mmask16 live, __m512i w,
                                         const float *x, float *res)
{
    const __m512 zero = _mm512_setzero_ps();
    __m512 u = uniform16(w);
    __m512 xv = _mm512_loadu_ps(x);
    __m512 pr = _mm512_div_ps(_mm512_abs_ps(xv), mv);
    __mmask16 take =
        _mm512_cmp_ps_mask(u, pr, _CMP_LE_OQ) & _mm512_cmp_ps_mask(xv, zero, _CMP_NEQ_OQ) & live;
    __mmask16 neg = _mm512_cmp_ps_mask(xv, zero, _CMP_LT_OQ);
    if (res) {
        __m512 val = _mm512_maskz_mov_ps(take, _mm512_mask_blend_ps(neg, mv, negm));
        _mm512_storeu_ps(res, _mm512_sub_ps(_mm512_loadu_ps(res), val));
    }
    return _pdep_u64((unsigned)(take & ~neg), 0x55555555u) |
           _pdep_u64((unsigned)(take & neg), 0xAAAAAAAAu);
}

AVX512 static size_t terngrad_avx512(const pc_codec__quant_t *q)
{
    if (q->n > UINT32_MAX)
        return 0;
    const __m512 mv = _mm512_set1_ps(q->scale), negm = _mm512_set1_ps(-q->scale);
    const __mmask16 live = q->scale > 0 ? 0xFFFF : 0;
    const __m512i sub_lo = _mm512_set1_epi32((int)(uint32_t)q->subseq);
    const __m512i sub_hi = _mm512_set1_epi32((int)(uint32_t)(q->subseq >> 32));
    const uint32_t k0 = (uint32_t)q->seed, k1 = (uint32_t)(q->seed >> 32);
    const float *v = q->v; /* locals: the payload's byte stores may alias *q */
    float *res = q->res;
    const size_t n = q->n;
    uint8_t *pay = q->payload;
    size_t i = 0;
    for (; i + 256 <= n; i += 256) { /* 256 codes: 64 bytes */
        __m512i w[16];
        philox16x4(w, (uint32_t)(i / 4), k0, k1, sub_lo, sub_hi);
        uint64_t bits[8];
        for (int j = 0; j < 8; j++) {
            size_t e = i + 32 * (size_t)j;
            uint64_t lo = terngrad16(mv, negm, live, w[2 * j], v + e, res ? res + e : NULL);
            uint64_t hi =
                terngrad16(mv, negm, live, w[2 * j + 1], v + e + 16, res ? res + e + 16 : NULL);
            bits[j] = lo | hi << 32;
        }
        memcpy(pay + i / 4, bits, 64);
    }
    for (; i + 128 <= n; i += 128) { /* 128 codes: 32 bytes */
        __m512i w[8];
        philox16x2(w, (uint32_t)(i / 4), k0, k1, sub_lo, sub_hi);
        uint64_t bits[4];
        for (int j = 0; j < 4; j++) {
            size_t e = i + 32 * (size_t)j;
            uint64_t lo = terngrad16(mv, negm, live, w[2 * j], v + e, res ? res + e : NULL);
            uint64_t hi =
                terngrad16(mv, negm, live, w[2 * j + 1], v + e + 16, res ? res + e + 16 : NULL);
            bits[j] = lo | hi << 32;
        }
        memcpy(pay + i / 4, bits, 32);
    }
    for (; i + 64 <= n; i += 64) { /* 64 codes: 16 bytes */
        __m512i w[4];
        philox16(w, (uint32_t)(i / 4), k0, k1, sub_lo, sub_hi);
        uint64_t bits[2];
        for (int j = 0; j < 2; j++) {
            size_t e = i + 32 * (size_t)j;
            uint64_t lo = terngrad16(mv, negm, live, w[2 * j], v + e, res ? res + e : NULL);
            uint64_t hi =
                terngrad16(mv, negm, live, w[2 * j + 1], v + e + 16, res ? res + e + 16 : NULL);
            bits[j] = lo | hi << 32;
        }
        memcpy(pay + i / 4, bits, 16);
    }
    return i;
}

AVX512 static size_t efsign_avx512(const pc_codec__quant_t *q)
{
    const __m512 meanv = _mm512_set1_ps(q->scale), negmean = _mm512_set1_ps(-q->scale);
    const __m512 zero = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= q->n; i += 16) { /* 16 signs: 2 bytes */
        __m512 x = _mm512_loadu_ps(q->v + i);
        __mmask16 neg = _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ);
        uint16_t bits = (uint16_t)neg;
        memcpy(q->payload + i / 8, &bits, 2);
        if (q->res) {
            __m512 val = _mm512_mask_blend_ps(neg, meanv, negmean);
            _mm512_storeu_ps(q->res + i, _mm512_sub_ps(_mm512_loadu_ps(q->res + i), val));
        }
    }
    return i;
}

AVX512 static uint32_t absmax_bits_avx512(const float *v, size_t n, size_t *done)
{
    const __m512i absm = _mm512_set1_epi32(0x7fffffff);
    __m512i a0 = _mm512_setzero_si512(), a1 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_max_epu32(a0, _mm512_and_si512(_mm512_loadu_si512(v + i), absm));
        a1 = _mm512_max_epu32(a1, _mm512_and_si512(_mm512_loadu_si512(v + i + 16), absm));
    }
    uint32_t lane[16], m = 0;
    _mm512_storeu_si512(lane, _mm512_max_epu32(a0, a1));
    for (int l = 0; l < 16; l++)
        m = lane[l] > m ? lane[l] : m;
    *done = i;
    return m;
}

AVX512 static uint32_t terngrad_apply_avx512(const uint8_t *payload, uint32_t n, float hscale,
                                             float scale, float *dense)
{
    const __m512 pos = _mm512_set1_ps(scale * hscale), neg = _mm512_set1_ps(scale * -hscale);
    const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i three = _mm512_set1_epi32(3), one = _mm512_set1_epi32(1);
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16) { /* 16 codes: 4 bytes */
        uint32_t word;
        memcpy(&word, payload + i / 4, 4);
        __m512i code = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)word), sh), three);
        __mmask16 nz = _mm512_test_epi32_mask(code, code); /* code 0 adds nothing */
        __mmask16 is1 = _mm512_cmpeq_epi32_mask(code, one);
        __m512 d = _mm512_loadu_ps(dense + i);
        __m512 add = _mm512_mask_blend_ps(is1, neg, pos);
        _mm512_storeu_ps(dense + i, _mm512_mask_add_ps(d, nz, d, add));
    }
    return i;
}

AVX512 static uint32_t efsign_apply_avx512(const uint8_t *payload, uint32_t n, float hscale,
                                           float scale, float *dense)
{
    const __m512 pos = _mm512_set1_ps(scale * hscale), neg = _mm512_set1_ps(scale * -hscale);
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16) { /* 2 bytes of signs */
        __mmask16 m = (__mmask16)((unsigned)payload[i / 8] | (unsigned)payload[i / 8 + 1] << 8);
        __m512 d = _mm512_loadu_ps(dense + i);
        _mm512_storeu_ps(dense + i, _mm512_add_ps(d, _mm512_mask_blend_ps(m, pos, neg)));
    }
    return i;
}

#endif /* PC_CODEC__X86 */

/* ---- entry points ----------------------------------------------------------------------- */

#ifdef PC_CODEC__X86
/* Whether the CPU has BMI2 (the AVX-512 encoders' pext and pdep): libgcc's CPU model, read
 * once before main; "bmi2" is a feature name gcc and clang 14 both know. */
static inline bool has_bmi2(void)
{
    return __builtin_cpu_supports("bmi2");
}
#endif

void pc_codec__qsgd_encode_at(int simd, const pc_codec__quant_t *q)
{
    unsigned b = pc_codec__qsgd_bits(q->levels);
    size_t i = 0;
#ifdef PC_CODEC__X86
    if (simd >= PC_CODEC__SIMD_AVX512 && has_bmi2())
        i = qsgd_avx512(q, b);
    else if (simd >= PC_CODEC__SIMD_AVX2)
        i = qsgd_avx2(q, b);
#endif
    (void)simd;
    qsgd_from(q, b, i);
}

void pc_codec__terngrad_encode_at(int simd, const pc_codec__quant_t *q)
{
    size_t i = 0;
#ifdef PC_CODEC__X86
    if (simd >= PC_CODEC__SIMD_AVX512 && has_bmi2())
        i = terngrad_avx512(q);
    else if (simd >= PC_CODEC__SIMD_AVX2)
        i = terngrad_avx2(q);
#endif
    (void)simd;
    terngrad_from(q, i);
}

void pc_codec__efsign_encode_at(int simd, const pc_codec__quant_t *q)
{
    size_t i = 0;
#ifdef PC_CODEC__X86
    if (simd >= PC_CODEC__SIMD_AVX512)
        i = efsign_avx512(q);
    else if (simd == PC_CODEC__SIMD_AVX2)
        i = efsign_avx2(q);
#endif
    (void)simd;
    efsign_from(q, i);
}

uint32_t pc_codec__absmax_bits_at(int simd, const float *v, size_t n)
{
    size_t i = 0;
    uint32_t m = 0;
#ifdef PC_CODEC__X86
    if (simd >= PC_CODEC__SIMD_AVX512)
        m = absmax_bits_avx512(v, n, &i);
    else if (simd == PC_CODEC__SIMD_AVX2)
        m = absmax_bits_avx2(v, n, &i);
#endif
    (void)simd;
    return absmax_bits_from(v, n, i, m);
}

void pc_codec__qsgd_apply_at(int simd, const uint8_t *payload, uint32_t n, int s, float hscale,
                             float scale, float *dense)
{
    uint32_t i = 0;
#ifdef PC_CODEC__X86
    if (simd >= PC_CODEC__SIMD_AVX2)
        i = qsgd_apply_avx2(payload, n, s, hscale, scale, dense);
#endif
    (void)simd;
    qsgd_apply_from(payload, n, s, hscale, scale, dense, i);
}

void pc_codec__terngrad_apply_at(int simd, const uint8_t *payload, uint32_t n, float hscale,
                                 float scale, float *dense)
{
    uint32_t i = 0;
#ifdef PC_CODEC__X86
    if (simd >= PC_CODEC__SIMD_AVX512)
        i = terngrad_apply_avx512(payload, n, hscale, scale, dense);
    else if (simd == PC_CODEC__SIMD_AVX2)
        i = terngrad_apply_avx2(payload, n, hscale, scale, dense);
#endif
    (void)simd;
    terngrad_apply_from(payload, n, hscale, scale, dense, i);
}

void pc_codec__efsign_apply_at(int simd, const uint8_t *payload, uint32_t n, float hscale,
                               float scale, float *dense)
{
    uint32_t i = 0;
#ifdef PC_CODEC__X86
    if (simd >= PC_CODEC__SIMD_AVX512)
        i = efsign_apply_avx512(payload, n, hscale, scale, dense);
    else if (simd == PC_CODEC__SIMD_AVX2)
        i = efsign_apply_avx2(payload, n, hscale, scale, dense);
#endif
    (void)simd;
    efsign_apply_from(payload, n, hscale, scale, dense, i);
}

/* terngrad's codes: no pair of bits 11 (code 3) in the payload's `bytes` bytes, whose pad
 * bits are zero. Whole words at a time; the compiler vectorises it in any build. */
static bool no_code3(const uint8_t *payload, size_t bytes)
{
    uint64_t bad = 0;
    size_t j = 0;
    for (; j + 8 <= bytes; j += 8) {
        uint64_t w;
        memcpy(&w, payload + j, 8);
        bad |= w & (w >> 1) & 0x5555555555555555u;
    }
    for (; j < bytes; j++)
        bad |= (uint64_t)(payload[j] & (payload[j] >> 1) & 0x55u);
    return bad == 0;
}

/* Whether n codes of b bits are all <= max_code and the pad bits zero (the fast pass: a
 * false sends the caller to the element-by-element loop that names the first problem). */
static bool codes_fit(int simd, const uint8_t *payload, uint32_t n, unsigned b, uint32_t max_code)
{
    size_t bytes = pc_codec__packed_bytes(n, b);
    unsigned used = (unsigned)(((size_t)n * b) % 8);
    if (used && payload[bytes - 1] >> used)
        return false;
    if (max_code >= (1u << b) - 1)
        return true; /* every b-bit code is valid (efsign) */
    if (b == 2 && max_code == 2)
        return no_code3(payload, bytes); /* terngrad */
    uint32_t i = 0;
#ifdef PC_CODEC__X86
    if (simd >= PC_CODEC__SIMD_AVX2 && b <= 8 && !codes_fit_avx2(payload, n, b, max_code, &i))
        return false;
#endif
    (void)simd;
    return codes_fit_from(payload, n, b, max_code, i);
}

int pc_codec__check_codes_at(int simd, const pc_wire_header_t *h, const uint8_t *payload,
                             unsigned b, uint32_t max_code, const char *name, char *err,
                             size_t errlen)
{
    if (h->entries != h->n)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: %s message with %u entries, expected %u", h->chunk, name,
                            h->entries, h->n);
    size_t want = pc_codec__packed_bytes(h->n, b);
    if (h->payload != want)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "chunk %u: %s payload of %u bytes, expected %zu", h->chunk, name,
                            h->payload, want);
    if (codes_fit(simd, payload, h->n, b, max_code))
        return PC_OK;
    /* Something is wrong: find the first problem, element by element. */
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
