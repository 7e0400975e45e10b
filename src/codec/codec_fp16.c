/* codec_fp16: the fp16 codec's loops (fp16_impl.h; codec_dense.c's fp16 compress, validate
 * and apply call them) by instruction set: the baseline's scalar loops, which are the
 * reference, and F16C builds with AVX2 (8 elements a step) and AVX-512F (16), chosen at run
 * time (pc_codec__fp16_simd).
 *
 * Why: the scalar loops convert through pc_wire_f32_to_f16 an element at a time, and with
 * error feedback they make two passes (the fold with its finiteness check, then the
 * encode): ~194 ms for 25 M elements on one core, where the 14 bytes an element must move
 * (gradient and residual read, residual and payload written) allow ~13 ms. VCVTPS2PH with
 * rounding 0 is IEEE round-to-nearest-even, pc_wire_f32_to_f16's rounding, on every input
 * (NaN kept quiet with its top payload bits, overflow to infinity, subnormal results, -0,
 * ties), and VCVTPH2PS is exact, so the vector builds give the scalar loops' bits.
 *
 * One pass with error feedback: the fold (v = residual + gradient), the check that every v
 * is finite, the encode (payload = f16(clamp(v))) and the new residual (v - sent) per
 * element. The catch is PC_ERANGE, which must leave the residual folded and nothing else,
 * while the pass has already replaced the elements before the bad one with v - sent. It
 * takes them back exactly: for |v| <= 65504 the difference v - sent is exact (sent is v
 * rounded to 11 significant bits, so the difference is a multiple of v's ulp below 2^13 of
 * them; below 2^-14 both are multiples of v's ulp and differ by at most 2^-25), hence
 * (v - sent) + sent == v; and v - sent is zero only when v == sent, -0 included, where the
 * sum would give +0, so the undo takes sent itself. Values beyond +-65504 are clamped and
 * their difference can round: the pass sets them aside untouched (up to STASH of them) and
 * encodes them once the whole chunk is known finite; past STASH it checks the rest of the
 * chunk first (one more read of it) and then clamps as it goes. */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec_impl.h"
#include "fp16_impl.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_wire.h"

#ifdef PC_CODEC__X86
#include <immintrin.h>
#endif

/* Values beyond +-PC_CODEC_F16_MAX that the one-pass encode sets aside per chunk before it
 * checks the rest of the chunk first instead. Gradients that large are rare (pc-bench's
 * heavy-tailed input has about ten in 25 M); 64 indices are 512 bytes of stack. */
#define STASH 64

/* ---- the baseline: the reference --------------------------------------------------------- */

/* x clamped to the binary16 range and encoded at payload[2i]; returns the value sent. */
static inline float put_one(uint8_t *payload, size_t i, float x)
{
    x = x > PC_CODEC_F16_MAX ? PC_CODEC_F16_MAX : (x < -PC_CODEC_F16_MAX ? -PC_CODEC_F16_MAX : x);
    uint16_t q = pc_wire_f32_to_f16(x);
    pc_wire_put_u16(payload + 2 * i, q);
    return pc_wire_f16_to_f32(q);
}

static int encode_scalar(float *v, const float *g, bool ef, uint8_t *payload, size_t n)
{
    if (!pc_codec__fold_finite(v, ef ? g : NULL, n))
        return PC_ERANGE;
    for (size_t i = 0; i < n; i++) {
        float sent = put_one(payload, i, v[i]);
        if (ef)
            v[i] -= sent;
    }
    return PC_OK;
}

static size_t check_scalar(const uint8_t *payload, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((pc_wire_get_u16(payload + 2 * i) & 0x7c00u) == 0x7c00u)
            return i;
    return n;
}

static void apply_scalar(const uint8_t *payload, size_t n, float scale, float *dense)
{
    for (size_t i = 0; i < n; i++)
        dense[i] += scale * pc_wire_f16_to_f32(pc_wire_get_u16(payload + 2 * i));
}

#ifdef PC_CODEC__X86
/* ---- vector steps ------------------------------------------------------------------------
 * The encode's whole vectors from the start of v[0..n) (the driver does the rest): x = v
 * (+ g), payload = f16(clamp(x)), and with ef v = x - sent. With stop, the step ends before
 * the first vector holding a lane outside +-PC_CODEC_F16_MAX (one to clamp, or NaN or
 * infinity: |x| <= MAX is false for all three) and writes nothing of it; without, it clamps
 * and sets *bad when a lane is NaN or infinite. Returns the elements done. */

__attribute__((target("avx2,f16c"))) static size_t
encode_avx2(float *v, const float *g, bool ef, bool stop, uint8_t *payload, size_t n, bool *bad)
{
    const __m256 hi = _mm256_set1_ps(PC_CODEC_F16_MAX), lo = _mm256_set1_ps(-PC_CODEC_F16_MAX);
    const __m256 big = _mm256_set1_ps(FLT_MAX);
    const __m256 mag = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(v + i);
        if (g)
            x = _mm256_add_ps(x, _mm256_loadu_ps(g + i));
        __m256 ax = _mm256_and_ps(x, mag), xc = x;
        if (stop) {
            if (_mm256_movemask_ps(_mm256_cmp_ps(ax, hi, _CMP_LE_OQ)) != 0xff)
                break;
        } else {
            finite = _mm256_and_ps(finite, _mm256_cmp_ps(ax, big, _CMP_LE_OQ));
            xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi); /* the scalar clamp, for finite x */
        }
        __m128i h = _mm256_cvtps_ph(xc, _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(void *)(payload + 2 * i), h);
        if (ef)
            _mm256_storeu_ps(v + i, _mm256_sub_ps(x, _mm256_cvtph_ps(h)));
    }
    if (_mm256_movemask_ps(finite) != 0xff)
        *bad = true;
    return i;
}

__attribute__((target("avx512f"))) static size_t
encode_avx512(float *v, const float *g, bool ef, bool stop, uint8_t *payload, size_t n, bool *bad)
{
    const __m512 hi = _mm512_set1_ps(PC_CODEC_F16_MAX), lo = _mm512_set1_ps(-PC_CODEC_F16_MAX);
    const __m512 big = _mm512_set1_ps(FLT_MAX);
    __mmask16 finite = 0xffff;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(v + i);
        if (g)
            x = _mm512_add_ps(x, _mm512_loadu_ps(g + i));
        __m512 ax = _mm512_abs_ps(x), xc = x;
        if (stop) {
            if (_mm512_cmp_ps_mask(ax, hi, _CMP_LE_OQ) != 0xffff)
                break;
        } else {
            finite &= _mm512_cmp_ps_mask(ax, big, _CMP_LE_OQ);
            xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
        }
        __m256i h = _mm512_cvtps_ph(xc, _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_si256((__m256i *)(void *)(payload + 2 * i), h);
        if (ef)
            _mm512_storeu_ps(v + i, _mm512_sub_ps(x, _mm512_cvtph_ps(h)));
    }
    if (finite != 0xffff)
        *bad = true;
    return i;
}

/* Whole vectors of 16 halves up to the first one holding an infinity or a NaN (exponent all
 * ones); the AVX-512 build uses it too (the loop is bound by memory, not by its width). */
__attribute__((target("avx2"))) static size_t check_avx2(const uint8_t *payload, size_t n)
{
    const __m256i e = _mm256_set1_epi16(0x7c00);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(payload + 2 * i));
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_and_si256(h, e), e)))
            break;
    }
    return i;
}

__attribute__((target("avx2,f16c"))) static size_t apply_avx2(const uint8_t *payload, size_t n,
                                                              float scale, float *dense)
{
    const __m256 s = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x =
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(payload + 2 * i)));
        _mm256_storeu_ps(dense + i, _mm256_add_ps(_mm256_loadu_ps(dense + i), _mm256_mul_ps(s, x)));
    }
    return i;
}

__attribute__((target("avx512f"))) static size_t apply_avx512(const uint8_t *payload, size_t n,
                                                              float scale, float *dense)
{
    const __m512 s = _mm512_set1_ps(scale);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x =
            _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(payload + 2 * i)));
        _mm512_storeu_ps(dense + i, _mm512_add_ps(_mm512_loadu_ps(dense + i), _mm512_mul_ps(s, x)));
    }
    return i;
}

static size_t encode_vec(int simd, float *v, const float *g, bool ef, bool stop, uint8_t *payload,
                         size_t n, bool *bad)
{
    return simd >= PC_CODEC__SIMD_AVX512 ? encode_avx512(v, g, ef, stop, payload, n, bad)
                                         : encode_avx2(v, g, ef, stop, payload, n, bad);
}

/* PC_ERANGE with the residual v as the scalar fold leaves it, v + g everywhere. Elements
 * [0, at) were encoded (v - sent), but the nstash ones in stash (ascending), which are as
 * before the fold; [at, n) are as before the fold too, unless rest_folded. */
static int unwind(float *v, const float *g, const uint8_t *payload, size_t at, const size_t *stash,
                  size_t nstash, size_t n, bool rest_folded)
{
    size_t s = 0;
    for (size_t j = 0; j < at; j++) {
        if (s < nstash && stash[s] == j) {
            s++;
            if (g)
                v[j] = v[j] + g[j];
            continue;
        }
        float sent = pc_wire_f16_to_f32(pc_wire_get_u16(payload + 2 * j));
        v[j] = v[j] == 0.0f ? sent : v[j] + sent; /* exact: the file's header */
    }
    if (!rest_folded)
        (void)pc_codec__fold_finite(v + at, g ? g + at : NULL, n - at);
    return PC_ERANGE;
}

/* pc_codec__fp16_encode_at's vector builds with error feedback: the one pass of the file's
 * header. The vector steps run until a vector holds a lane to clamp or a non-finite one;
 * that vector (or the tail) goes element by element, then the steps resume. */
static int encode_ef_vec(int simd, float *v, const float *g, uint8_t *payload, size_t n)
{
    const size_t width = simd >= PC_CODEC__SIMD_AVX512 ? 16 : 8;
    const float *gr = g; /* the gradient still to fold into v[i..n): NULL once folded */
    size_t stash[STASH], nstash = 0, i = 0;
    bool checked = false, bad = false; /* checked: v[i..n) folded and known finite */
    while (i < n) {
        i += encode_vec(simd, v + i, gr ? gr + i : NULL, true, !checked, payload + 2 * i, n - i,
                        &bad);
        size_t end =
            i + width < n ? i + width : n; /* the vector the step stopped at, or the tail */
        for (; i < end; i++) {
            float x = gr ? v[i] + gr[i] : v[i];
            if (checked || fabsf(x) <= PC_CODEC_F16_MAX) {
                v[i] = x - put_one(payload, i, x);
                continue;
            }
            if (!isfinite(x))
                return unwind(v, g, payload, i, stash, nstash, n, false);
            if (nstash < STASH) {
                stash[nstash++] = i; /* to clamp: encoded at the end, untouched until then */
                continue;
            }
            /* The stash is full: fold and check the rest first, then clamp as it goes. */
            if (!pc_codec__fold_finite(v + i, gr ? gr + i : NULL, n - i))
                return unwind(v, g, payload, i, stash, nstash, n, true);
            gr = NULL;
            checked = true;
            v[i] = v[i] - put_one(payload, i, v[i]);
        }
    }
    for (size_t s = 0; s < nstash; s++) { /* the whole chunk is finite: the ones set aside */
        size_t j = stash[s];
        float x = g ? v[j] + g[j] : v[j];
        v[j] = x - put_one(payload, j, x);
    }
    return PC_OK;
}
#endif

int pc_codec__fp16_encode_at(int simd, float *v, const float *g, bool ef, uint8_t *payload,
                             size_t n)
{
#ifdef PC_CODEC__X86
    if (simd >= PC_CODEC__SIMD_AVX2) {
        if (ef)
            return encode_ef_vec(simd, v, g, payload, n);
        /* Without error feedback nothing needs taking back: clamp as it goes, the verdict
         * at the end. */
        bool bad = false;
        size_t i = encode_vec(simd, v, NULL, false, false, payload, n, &bad);
        for (; i < n; i++) {
            bad |= !isfinite(v[i]);
            (void)put_one(payload, i, v[i]);
        }
        return bad ? PC_ERANGE : PC_OK;
    }
#endif
    (void)simd;
    return encode_scalar(v, g, ef, payload, n);
}

size_t pc_codec__fp16_check_at(int simd, const uint8_t *payload, size_t n)
{
    size_t i = 0;
#ifdef PC_CODEC__X86
    if (simd >= PC_CODEC__SIMD_AVX2)
        i = check_avx2(payload, n);
#endif
    (void)simd;
    return i + check_scalar(payload + 2 * i, n - i);
}

void pc_codec__fp16_apply_at(int simd, const uint8_t *payload, size_t n, float scale, float *dense)
{
    size_t i = 0;
#ifdef PC_CODEC__X86
    if (simd >= PC_CODEC__SIMD_AVX512)
        i = apply_avx512(payload, n, scale, dense);
    else if (simd == PC_CODEC__SIMD_AVX2)
        i = apply_avx2(payload, n, scale, dense);
#endif
    (void)simd;
    apply_scalar(payload + 2 * i, n - i, scale, dense + i);
}
