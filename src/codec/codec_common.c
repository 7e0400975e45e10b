/* codec_common: what every codec's compress and decode share, below the codecs
 * themselves (codec_dense.c, codec_sparse.c) and the table that dispatches to them
 * (pc_codec.c): the scratch a codec object grows, k of a ratio, the fold with its
 * finiteness check, the canonical sum, a compression's source array. codec_impl.h
 * declares each; thread-safety as it says there (a codec object's scratch is its
 * caller's, every other function is pure). */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec_impl.h"
#include "pipecompress/pc_error.h"
#include "simd_impl.h"

int pc_codec__reserve_idx(pc_codec_t *c, size_t n)
{
    if (c->idx_cap >= n)
        return PC_OK;
    uint32_t *p = realloc(c->idx, sizeof(uint32_t) * (n ? n : 1));
    if (!p)
        return PC_ENOMEM;
    c->idx = p;
    c->idx_cap = n;
    return PC_OK;
}

int pc_codec__reserve_tmp(pc_codec_t *c, size_t n)
{
    if (c->tmp_cap >= n)
        return PC_OK;
    float *p = realloc(c->tmp, sizeof(float) * (n ? n : 1));
    if (!p)
        return PC_ENOMEM;
    c->tmp = p;
    c->tmp_cap = n;
    return PC_OK;
}

int pc_codec__reserve_bits(pc_codec_t *c, size_t nbits)
{
    size_t words = (nbits + 63) / 64;
    if (c->bits_cap >= words)
        return PC_OK;
    uint64_t *p = realloc(c->bits, sizeof(uint64_t) * (words ? words : 1));
    if (!p)
        return PC_ENOMEM;
    memset(p, 0, sizeof(uint64_t) * (words ? words : 1)); /* kept all-zero between uses */
    c->bits = p;
    c->bits_cap = words;
    return PC_OK;
}

size_t pc_codec__k(double ratio, size_t n)
{
    double k = ceil(ratio * (double)n);
    return k >= (double)n ? n : (size_t)k;
}

bool pc_codec__fold_finite(float *restrict v, const float *restrict g, size_t n)
{
    uint32_t bad = 0; /* branch-free, so the loops vectorize */
    if (g) {
        for (size_t i = 0; i < n; i++) {
            float x = v[i] + g[i];
            v[i] = x;
            uint32_t u;
            memcpy(&u, &x, sizeof(u));
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &v[i], sizeof(u));
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
    }
    return !bad;
}

int pc_codec__fold_plain(const pc_codec_t *c, pc_codec_state_t *st, const float *grad)
{
    if (c->spec.ef)
        return pc_codec__fold_finite(st->residual, grad, st->n) ? PC_OK : PC_ERANGE;
    if (!st->stage && !(st->stage = malloc(sizeof(float) * st->n)))
        return PC_ENOMEM;
    memcpy(st->stage, grad, sizeof(float) * st->n);
    return pc_codec__fold_finite(st->stage, NULL, st->n) ? PC_OK : PC_ERANGE;
}

/* The tree of the canonical sum over 256 lanes (codec_impl.h). */
static double sum_tree(double *lane)
{
    for (size_t s = PC_CODEC_SUM_LANES / 2; s > 0; s /= 2)
        for (size_t l = 0; l < s; l++)
            lane[l] += lane[l + s];
    return lane[0];
}

/* One block of m <= PC_CODEC_SUM_BLOCK elements, scalar: the lanes' sums, then the tree. */
static double sum_block(const float *xb, size_t m, pc_codec_sum_op_t op)
{
    double lane[PC_CODEC_SUM_LANES];
    for (size_t l = 0; l < PC_CODEC_SUM_LANES; l++)
        lane[l] = 0.0;
    for (size_t j = 0; j < m; j += PC_CODEC_SUM_LANES) {
        size_t e = m - j < PC_CODEC_SUM_LANES ? m - j : PC_CODEC_SUM_LANES;
        if (op == PC_CODEC_SUM_SQUARES)
            for (size_t l = 0; l < e; l++)
                lane[l] += (double)xb[j + l] * (double)xb[j + l];
        else
            for (size_t l = 0; l < e; l++)
                lane[l] += fabs((double)xb[j + l]);
    }
    return sum_tree(lane);
}

/* The full blocks in vector lanes. A double lane of the vector is a lane of the definition:
 * it adds the same exact terms (a float's square or magnitude is exact in double) in the
 * same order from +0.0, and the tree adds the same pairs, so the bits are the scalar
 * loop's. The baseline build's compiler vectorises the scalar loop only two doubles wide
 * (SSE2); these convert, square and add 4 or 8 at a time. */
#ifdef PC_CODEC__X86
#include <immintrin.h>

#define SUM_ROWS (PC_CODEC_SUM_BLOCK / PC_CODEC_SUM_LANES) /* 8 */

__attribute__((target("avx2"))) static void sum_tree_avx2(double *lane)
{
    for (size_t s = PC_CODEC_SUM_LANES / 2; s >= 4; s /= 2)
        for (size_t l = 0; l < s; l += 4)
            _mm256_storeu_pd(
                lane + l, _mm256_add_pd(_mm256_loadu_pd(lane + l), _mm256_loadu_pd(lane + l + s)));
    lane[0] += lane[2];
    lane[1] += lane[3];
    lane[0] += lane[1];
}

/* The lanes of the full block at xb, row after row (the input read in its order, as the
 * prefetchers like it), 4 lanes a vector; the 2 KB of lanes stay in L1. op is a constant
 * where it is called. */
__attribute__((target("avx2"))) static inline void lanes_avx2(const float *xb, bool squares,
                                                              double *lane)
{
    const __m256d absm = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffff));
    for (size_t l = 0; l < PC_CODEC_SUM_LANES; l += 4)
        _mm256_storeu_pd(lane + l, _mm256_setzero_pd());
    for (size_t j = 0; j < PC_CODEC_SUM_BLOCK; j += PC_CODEC_SUM_LANES)
        for (size_t l = 0; l < PC_CODEC_SUM_LANES; l += 4) {
            __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(xb + j + l));
            d = squares ? _mm256_mul_pd(d, d) : _mm256_and_pd(d, absm);
            _mm256_storeu_pd(lane + l, _mm256_add_pd(_mm256_loadu_pd(lane + l), d));
        }
}

__attribute__((target("avx2"))) static double sum_block_avx2(const float *xb, pc_codec_sum_op_t op)
{
    double lane[PC_CODEC_SUM_LANES];
    if (op == PC_CODEC_SUM_SQUARES)
        lanes_avx2(xb, true, lane);
    else
        lanes_avx2(xb, false, lane);
    sum_tree_avx2(lane);
    return lane[0];
}

__attribute__((target("avx512f"))) static void sum_tree_avx512(double *lane)
{
    for (size_t s = PC_CODEC_SUM_LANES / 2; s >= 8; s /= 2)
        for (size_t l = 0; l < s; l += 8)
            _mm512_storeu_pd(
                lane + l, _mm512_add_pd(_mm512_loadu_pd(lane + l), _mm512_loadu_pd(lane + l + s)));
    for (size_t s = 4; s > 0; s /= 2)
        for (size_t l = 0; l < s; l++)
            lane[l] += lane[l + s];
}

/* lanes_avx2 with 8 lanes a vector. */
__attribute__((target("avx512f"))) static inline void lanes_avx512(const float *xb, bool squares,
                                                                   double *lane)
{
    for (size_t l = 0; l < PC_CODEC_SUM_LANES; l += 8)
        _mm512_storeu_pd(lane + l, _mm512_setzero_pd());
    for (size_t j = 0; j < PC_CODEC_SUM_BLOCK; j += PC_CODEC_SUM_LANES)
        for (size_t l = 0; l < PC_CODEC_SUM_LANES; l += 8) {
            __m512d d = _mm512_cvtps_pd(_mm256_loadu_ps(xb + j + l));
            d = squares ? _mm512_mul_pd(d, d) : _mm512_abs_pd(d);
            _mm512_storeu_pd(lane + l, _mm512_add_pd(_mm512_loadu_pd(lane + l), d));
        }
}

__attribute__((target("avx512f"))) static double sum_block_avx512(const float *xb,
                                                                  pc_codec_sum_op_t op)
{
    double lane[PC_CODEC_SUM_LANES];
    if (op == PC_CODEC_SUM_SQUARES)
        lanes_avx512(xb, true, lane);
    else
        lanes_avx512(xb, false, lane);
    sum_tree_avx512(lane);
    return lane[0];
}
#endif /* PC_CODEC__X86 */

double pc_codec__sum_at(int simd, const float *x, size_t n, pc_codec_sum_op_t op)
{
    double top[PC_CODEC_SUM_LANES] = {0};
    (void)simd;
    for (size_t b = 0, base = 0; base < n; b++, base += PC_CODEC_SUM_BLOCK) {
        size_t m = n - base < PC_CODEC_SUM_BLOCK ? n - base : PC_CODEC_SUM_BLOCK;
        double p;
#ifdef PC_CODEC__X86
        if (m == PC_CODEC_SUM_BLOCK && simd >= PC_CODEC__SIMD_AVX512)
            p = sum_block_avx512(x + base, op);
        else if (m == PC_CODEC_SUM_BLOCK && simd == PC_CODEC__SIMD_AVX2)
            p = sum_block_avx2(x + base, op);
        else
#endif
            p = sum_block(x + base, m, op);
        top[b % PC_CODEC_SUM_LANES] += p;
    }
    return sum_tree(top);
}

double pc_codec__sum(const float *x, size_t n, pc_codec_sum_op_t op)
{
    return pc_codec__sum_at(pc_codec__simd(), x, n, op);
}

float *pc_codec__source(const pc_codec_t *c, pc_codec_state_t *st, const float *grad)
{
    if (c->spec.ef)
        return st->residual;
    return grad ? (float *)(uintptr_t)grad : st->stage; /* grad is only read when !ef */
}

bool pc_codec__sparse(const pc_codec_t *c)
{
    return c->ops->apply_indices != NULL;
}

int pc_codec__f32s_check(uint32_t chunk, const uint8_t *payload, uint32_t count, const char *what,
                         char *err, size_t errlen)
{
    for (uint32_t i = 0; i < count; i++)
        if ((pc_wire_get_u32(payload + 4 * (size_t)i) & 0x7f800000u) == 0x7f800000u)
            return pc_error_fmt(PC_EFORMAT, err, errlen, "chunk %u: %s %u is not finite", chunk,
                                what, i);
    return PC_OK;
}

/* ---- codec none's copy -------------------------------------------------------------------
 * The copy moves 4 bytes in and 4 out per value, and the check rides along. The scalar loop
 * (a byte store at a time, reloading n after each: the payload may alias anything) ran 2.4x
 * its 8-byte bound at 25 M values (issue 46); the vector builds load a vector, test its
 * exponents and store it. An ordinary store first reads the line it writes (read for
 * ownership): 12 bytes of traffic a value, not 8. Above NT_MIN_BYTES the vector builds
 * store around the caches (non-temporal stores, aligned to 64 bytes after a short head,
 * then an sfence so that whoever is handed the message after a release sees the bytes): at
 * that size most of the message would leave a core's L2 before the transport reads it. */
#define NT_MIN_BYTES ((size_t)4 << 20)

static bool f32s_put_from(const float *v, size_t n, uint8_t *payload, size_t i0)
{
    uint32_t bad = 0;
    for (size_t i = i0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof(u));
        bad |= (u & 0x7f800000u) == 0x7f800000u;
        pc_wire_put_u32(payload + 4 * i, u);
    }
    return !bad;
}

#ifdef PC_CODEC__X86
/* Whether to stream n values to payload, and if so the values before payload + 4 i is
 * 64-byte aligned (*head; payload must be 4-byte aligned for that). */
static bool nt_plan(const uint8_t *payload, size_t n, size_t *head)
{
    uintptr_t a = (uintptr_t)payload;
    *head = ((64 - a % 64) % 64) / 4;
    return 4 * n >= NT_MIN_BYTES && a % 4 == 0;
}

__attribute__((target("avx2"))) static size_t f32s_put_avx2(const float *v, size_t n,
                                                            uint8_t *payload, uint32_t *bad)
{
    const __m256i expm = _mm256_set1_epi32(0x7f800000);
    __m256i acc = _mm256_setzero_si256();
    size_t i = 0;
    bool nt = nt_plan(payload, n, &i);
    if (nt)
        *bad |= !f32s_put_from(v, i, payload, 0);
    else
        i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(v + i));
        acc = _mm256_or_si256(acc, _mm256_cmpeq_epi32(_mm256_and_si256(x, expm), expm));
        if (nt)
            _mm256_stream_si256((__m256i *)(void *)(payload + 4 * i), x);
        else
            _mm256_storeu_si256((__m256i *)(void *)(payload + 4 * i), x);
    }
    if (nt)
        _mm_sfence(); /* the streamed lines are visible before any later store */
    *bad |= !_mm256_testz_si256(acc, acc);
    return i;
}

__attribute__((target("avx512f"))) static size_t f32s_put_avx512(const float *v, size_t n,
                                                                 uint8_t *payload, uint32_t *bad)
{
    const __m512i expm = _mm512_set1_epi32(0x7f800000);
    __mmask16 acc = 0;
    size_t i = 0;
    bool nt = nt_plan(payload, n, &i);
    if (nt)
        *bad |= !f32s_put_from(v, i, payload, 0);
    else
        i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i x = _mm512_loadu_si512(v + i);
        acc |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(x, expm), expm);
        if (nt)
            _mm512_stream_si512((__m512i *)(void *)(payload + 4 * i), x);
        else
            _mm512_storeu_si512(payload + 4 * i, x);
    }
    if (nt)
        _mm_sfence(); /* the streamed lines are visible before any later store */
    *bad |= acc != 0;
    return i;
}
#endif /* PC_CODEC__X86 */

bool pc_codec__f32s_put_at(int simd, const float *v, size_t n, uint8_t *payload)
{
    uint32_t bad = 0;
    size_t i = 0;
#ifdef PC_CODEC__X86
    if (simd >= PC_CODEC__SIMD_AVX512)
        i = f32s_put_avx512(v, n, payload, &bad);
    else if (simd == PC_CODEC__SIMD_AVX2)
        i = f32s_put_avx2(v, n, payload, &bad);
#endif
    (void)simd;
    return f32s_put_from(v, n, payload, i) && !bad;
}

void pc_codec__f32s_add(const uint8_t *payload, uint32_t count, float scale, float *dense)
{
    for (uint32_t i = 0; i < count; i++) {
        uint32_t u = pc_wire_get_u32(payload + 4 * (size_t)i);
        float f;
        memcpy(&f, &u, sizeof(f));
        dense[i] += scale * f;
    }
}
