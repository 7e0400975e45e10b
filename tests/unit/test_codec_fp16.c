/* test_codec_fp16: the fp16 codec's loops in every build this CPU runs (baseline, AVX2 +
 * F16C, AVX-512F; src/codec/fp16_impl.h) against scalar references written here from the
 * codec's rule, bit for bit: the encode's status, payload and residual (with and without
 * error feedback, with the gradient folded here or before), also on PC_ERANGE, where the
 * residual must hold every value folded; the check for non-finite halves; the decode-add
 * on every one of the 65536 binary16 values. The inputs are adversarial: binary32
 * subnormals, +-0, ties of the rounding to binary16 and one ulp either side of them,
 * results in binary16's subnormal range, 65504 and values beyond it (clamped), NaN and
 * infinities at the start, in the middle and at the end, lengths 0..100 (every tail of a
 * vector) and long ones that are no multiple of a vector. First, the premise: VCVTPS2PH
 * with rounding 0 and VCVTPH2PS give pc_wire_f32_to_f16's and pc_wire_f16_to_f32's bits.
 * Also codec none's copy (pc_codec__f32s_put_at, codec_common.c): the same bytes as the wire's
 * little-endian writer in every build, at payload offsets that do and do not allow its
 * aligned non-temporal stores, below and above the size where they start, and its
 * finiteness answer with NaN or an infinity first, inside and last.
 * The functions are private: this program compiles codec_fp16.c itself. A build the CPU
 * lacks is reported skipped. */
#include "config.h"

#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec/codec_impl.h"
#include "codec/fp16_impl.h"
#include "codec/simd_impl.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_philox.h"
#include "pipecompress/pc_wire.h"

#ifdef PC_CODEC__X86
#include <immintrin.h>
#endif

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint32_t to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

/* ---- the references --------------------------------------------------------------------- */

/* The fp16 codec's rule, element by element: fold (v += g with ef and g), every v finite or
 * PC_ERANGE (v folded), then payload[2i..2i+1] = the little-endian binary16 of v clamped to
 * +-65504, and with ef v -= the value sent. */
static int ref_encode(float *v, const float *g, bool ef, uint8_t *payload, size_t n)
{
    bool bad = false;
    for (size_t i = 0; i < n; i++) {
        if (ef && g)
            v[i] = v[i] + g[i];
        bad |= !isfinite(v[i]);
    }
    if (bad)
        return PC_ERANGE;
    for (size_t i = 0; i < n; i++) {
        float x = v[i] > 65504.0f ? 65504.0f : (v[i] < -65504.0f ? -65504.0f : v[i]);
        uint16_t q = pc_wire_f32_to_f16(x);
        payload[2 * i] = (uint8_t)(q & 0xff);
        payload[2 * i + 1] = (uint8_t)(q >> 8);
        if (ef)
            v[i] -= pc_wire_f16_to_f32(q);
    }
    return PC_OK;
}

static size_t ref_check(const uint8_t *payload, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((payload[2 * i + 1] & 0x7c) == 0x7c)
            return i;
    return n;
}

static void ref_apply(const uint8_t *payload, size_t n, float scale, float *dense)
{
    for (size_t i = 0; i < n; i++)
        dense[i] +=
            scale * pc_wire_f16_to_f32((uint16_t)(payload[2 * i] | payload[2 * i + 1] << 8));
}

/* ---- inputs ------------------------------------------------------------------------------ */

/* An adversarial float: with probability big_ppm per million one beyond or at the edge of
 * binary16's range (clamped when summed or beyond 65504); else a binary32 subnormal, +-0, a
 * tie of the rounding to binary16 (its normal or subnormal range) or one ulp either side,
 * or any value of 2^-37 .. 2^14 (two of which never sum beyond 65504). */
static float adversarial(pc_philox_t *gen, uint32_t big_ppm)
{
    /* 65504 (sent as is), just above it, the last value that rounds to it, the first that
     * would round to infinity, 2^16; or up to 2^74, where two of them still sum finite
     * (test_encode_erange makes the infinite sums). */
    static const uint32_t edge[] = {0x477fe000u, 0x477fe001u, 0x477fefffu, 0x477ff000u,
                                    0x47800000u};
    uint32_t a = pc_philox_next(gen), b = pc_philox_next(gen), c = pc_philox_next(gen);
    uint32_t sign = a & 0x80000000u, man = b & 0x7fffffu, u;
    if (c % 1000000u < big_ppm)
        return from_bits(sign |
                         ((a & 1) ? edge[(a >> 1) % 5] : ((143u + (a >> 1) % 58u) << 23 | man)));
    switch ((a >> 1) % 8) {
    case 0:
        u = man; /* a binary32 subnormal: sent as +-0 */
        break;
    case 1:
        u = 0;
        break;
    case 2:
    case 3: {
        uint32_t e = 102u + (a >> 4) % 39u;      /* 2^-25 .. 2^14 */
        uint32_t sh = e >= 113 ? 13u : 126u - e; /* the bits rounded away */
        uint32_t lowmask = sh >= 24 ? 0x7fffffu : (1u << sh) - 1;
        u = e << 23 | (man & ~lowmask) | ((1u << (sh - 1)) & 0x7fffffu);
        u = u + ((a >> 10) % 3) - 1; /* the tie, or one ulp below or above */
        break;
    }
    default:
        u = (90u + (a >> 4) % 51u) << 23 | man;
        break;
    }
    return from_bits(sign | u);
}

static float *adversarial_array(size_t n, uint64_t seed, uint64_t stream, uint32_t big_ppm)
{
    float *x = xmalloc(sizeof(float) * n);
    pc_philox_t gen;
    pc_philox_init(&gen, seed, stream, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = adversarial(&gen, big_ppm);
    return x;
}

static const char *const builds[] = {"baseline", "AVX2 + F16C", "AVX-512F"};

/* ---- the premise ------------------------------------------------------------------------- */

#ifdef PC_CODEC__X86
/* n (a multiple of 4) floats to binary16 by VCVTPS2PH with rounding 0, and back. */
__attribute__((target("f16c"))) static void hw_to_f16(const float *x, uint16_t *out, size_t n)
{
    for (size_t i = 0; i + 4 <= n; i += 4)
        _mm_storel_epi64((__m128i *)(void *)(out + i),
                         _mm_cvtps_ph(_mm_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
}

__attribute__((target("f16c"))) static void hw_to_f32(const uint16_t *h, float *out, size_t n)
{
    for (size_t i = 0; i + 4 <= n; i += 4)
        _mm_storeu_ps(out + i,
                      _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(const void *)(h + i))));
}
#endif

/* Every sign, exponent and top 10 significand bits of a binary32 (NaN, infinities,
 * overflow to infinity, binary16 subnormal results, +-0 and binary32 subnormals included),
 * each with 7 patterns of the 13 bits rounded away (exact, ties, one ulp either side, the
 * extremes, one random): VCVTPS2PH gives pc_wire_f32_to_f16's bits. All 65536 binary16
 * values: VCVTPH2PS gives pc_wire_f16_to_f32's bits, but for the signalling NaNs, which it
 * quiets (no fp16 loop converts one: validate refuses them, compress sends finite values). */
static void test_premise(void **state)
{
    (void)state;
    for (int simd = 0; simd <= PC_CODEC__SIMD_AVX512; simd++)
        print_message("fp16: the %s build %s\n", builds[simd],
                      simd <= pc_codec__fp16_simd() ? "tested" : "skipped: this CPU lacks it");
#ifdef PC_CODEC__X86
    if (!__builtin_cpu_supports("f16c")) {
        print_message("fp16: the premise skipped: this CPU has no F16C\n");
        return;
    }
    enum { BLOCK = 7 * 1024 };
    static float x[BLOCK];
    static uint16_t hw[BLOCK];
    pc_philox_t gen;
    pc_philox_init(&gen, 46, 1, 0);
    static const uint32_t low[6] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff};
    size_t checked = 0;
    for (uint32_t top = 0; top < 2 * 256; top++) { /* sign and exponent */
        for (uint32_t m = 0; m < 1024; m++)
            for (int k = 0; k < 7; k++)
                x[m * 7 + (uint32_t)k] = from_bits(
                    top << 23 | m << 13 | (k < 6 ? low[k] : pc_philox_next(&gen) & 0x1fffu));
        hw_to_f16(x, hw, BLOCK);
        for (size_t i = 0; i < BLOCK; i++)
            if (hw[i] != pc_wire_f32_to_f16(x[i]))
                fail_msg("VCVTPS2PH(0x%08x) = 0x%04x, pc_wire_f32_to_f16 0x%04x", to_bits(x[i]),
                         hw[i], pc_wire_f32_to_f16(x[i]));
        checked += BLOCK;
    }
    static uint16_t h[65536];
    static float f[65536];
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    hw_to_f32(h, f, 65536);
    int snan = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint32_t want = to_bits(pc_wire_f16_to_f32((uint16_t)i)), got = to_bits(f[i]);
        bool signalling = (i & 0x7c00) == 0x7c00 && (i & 0x3ff) && !(i & 0x200);
        if (signalling && got == (want | 0x00400000u)) {
            snan++;
            continue;
        }
        if (got != want)
            fail_msg("VCVTPH2PS(0x%04x) = 0x%08x, pc_wire_f16_to_f32 0x%08x", i, got, want);
    }
    print_message("fp16: the premise held on %zu floats and 65536 halves (%d signalling NaNs "
                  "quieted)\n",
                  checked, snan);
#endif
}

/* ---- the encode -------------------------------------------------------------------------- */

/* Every build against ref_encode on v0 (+ g): the same status and residual, and on PC_OK the
 * same payload; without ef v0 is left as it was. */
static void encode_case(const float *v0, const float *g, bool ef, size_t n)
{
    float *want = xmalloc(sizeof(float) * n), *got = xmalloc(sizeof(float) * n);
    uint8_t *pw = xmalloc(2 * n), *pg = xmalloc(2 * n);
    memcpy(want, v0, sizeof(float) * n);
    int rc = ref_encode(want, g, ef, pw, n);
    for (int simd = 0; simd <= pc_codec__fp16_simd(); simd++) {
        memcpy(got, v0, sizeof(float) * n);
        memset(pg, 0xa5, 2 * n);
        int rs = pc_codec__fp16_encode_at(simd, got, g, ef, pg, n);
        if (rs != rc)
            fail_msg("%s build, n=%zu ef=%d g=%d: status %d, the reference %d", builds[simd], n, ef,
                     g != NULL, rs, rc);
        for (size_t i = 0; i < n; i++)
            if (to_bits(got[i]) != to_bits(want[i]))
                fail_msg("%s build, n=%zu ef=%d g=%d status %d: v[%zu] 0x%08x, the reference "
                         "0x%08x (v0 0x%08x, g 0x%08x)",
                         builds[simd], n, ef, g != NULL, rc, i, to_bits(got[i]), to_bits(want[i]),
                         to_bits(v0[i]), g ? to_bits(g[i]) : 0u);
        if (rc == PC_OK && n)
            assert_memory_equal(pg, pw, 2 * n);
    }
    free(want), free(got), free(pw), free(pg);
}

/* The four ways in: error feedback with the gradient folded here or before (g NULL), and
 * without (g given and ignored, or not). */
static void encode_all_ways(const float *v0, const float *g, size_t n)
{
    encode_case(v0, g, true, n);
    encode_case(v0, NULL, true, n);
    encode_case(v0, g, false, n);
    encode_case(v0, NULL, false, n);
}

/* Lengths 0..100 (each tail of an 8- and a 16-wide vector) with no value to clamp, some,
 * and so many that the encode's stash of clamped values overflows; then long chunks that
 * are no multiple of a vector. */
static void test_encode_builds(void **state)
{
    (void)state;
    static const uint32_t big[] = {0, 50000, 800000};
    for (size_t n = 0; n <= 100; n++)
        for (int b = 0; b < 3; b++) {
            float *v0 = adversarial_array(n, n, (uint64_t)b, big[b]);
            float *g = adversarial_array(n, n, 10 + (uint64_t)b, big[b]);
            encode_all_ways(v0, g, n);
            free(v0), free(g);
        }
    static const uint32_t big_long[] = {0, 10, 2000}; /* ~40 clamped: stashed; ~8000: overflow */
    for (int b = 0; b < 3; b++) {
        const size_t n = 2000013;
        float *v0 = adversarial_array(n, 7, (uint64_t)b, big_long[b]);
        float *g = adversarial_array(n, 8, (uint64_t)b, big_long[b]);
        encode_all_ways(v0, g, n);
        free(v0), free(g);
    }
}

/* pc-bench's size, 25 M elements and a tail: error feedback, the gradient folded here. */
static void test_encode_25m(void **state)
{
    (void)state;
    const size_t n = 25000005;
    float *v0 = adversarial_array(n, 25, 1, 1), *g = adversarial_array(n, 25, 2, 1);
    encode_case(v0, g, true, n);
    free(v0), free(g);
}

/* PC_ERANGE: NaN or an infinity in the residual, in the gradient, or made by their sum, at
 * the start, inside and at the end, after values set aside to clamp or after the stash
 * overflowed; with +-0 pairs in between (where v - sent is +0 and the undo must give -0
 * back). Every build leaves every value folded, as the reference does. */
static void test_encode_erange(void **state)
{
    (void)state;
    static const size_t lens[] = {1, 7, 8, 9, 16, 17, 33, 100, 1000, 100003};
    static const uint32_t big[] = {0, 50000, 800000};
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
        for (int b = 0; b < 3; b++)
            for (int where = 0; where < 3; where++) {
                size_t n = lens[l];
                size_t at[3] = {0, n / 3, n - 1};
                for (int a = 0; a < 3; a++) {
                    float *v0 = adversarial_array(n, 100 + l, (uint64_t)b, big[b]);
                    float *g = adversarial_array(n, 200 + l, (uint64_t)b, big[b]);
                    for (size_t i = 3; i < n; i += 17)
                        v0[i] = g[i] = -0.0f;
                    if (where == 0)
                        v0[at[a]] = bad[(l + (size_t)a) % 3];
                    else if (where == 1)
                        g[at[a]] = bad[(l + (size_t)a) % 3];
                    else
                        v0[at[a]] = g[at[a]] = FLT_MAX; /* finite, the sum is not */
                    encode_all_ways(v0, g, n);
                    free(v0), free(g);
                }
            }
}

/* ---- the check and the decode-add ------------------------------------------------------- */

/* n random finite halves (any sign, exponent 0..30) from (seed, stream). */
static void random_halves(uint8_t *p, size_t n, uint64_t seed, uint64_t stream)
{
    pc_philox_t gen;
    pc_philox_init(&gen, seed, stream, 0);
    for (size_t i = 0; i < n; i++) {
        uint32_t a = pc_philox_next(&gen);
        uint16_t h = (uint16_t)((a & 0x83ffu) | ((a >> 16) % 31u) << 10);
        p[2 * i] = (uint8_t)h;
        p[2 * i + 1] = (uint8_t)(h >> 8);
    }
}

/* Every build finds the first infinity or NaN (or none) where ref_check does: payloads of
 * lengths 0..100 and 100003, at an odd address, with one planted at each place. */
static void test_check_builds(void **state)
{
    (void)state;
    static const uint16_t bad[] = {0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xffff};
    for (size_t k = 0; k <= 101; k++) {
        size_t n = k <= 100 ? k : 100003;
        uint8_t *buf = xmalloc(2 * n + 1), *p = buf + 1;
        random_halves(p, n, 31, n);
        for (size_t j = 0; j <= 48; j++) { /* at 0..39, at ninths of n, and none (n) */
            size_t at = j < 40 ? j : (j < 48 ? (j - 39) * n / 9 : n);
            if (at > n)
                continue;
            uint8_t keep[2] = {0, 0};
            if (at < n) {
                memcpy(keep, p + 2 * at, 2);
                uint16_t h = bad[at % 5];
                p[2 * at] = (uint8_t)h;
                p[2 * at + 1] = (uint8_t)(h >> 8);
            }
            size_t want = ref_check(p, n);
            assert_int_equal(want, at < n ? at : n);
            for (int simd = 0; simd <= pc_codec__fp16_simd(); simd++)
                assert_int_equal(pc_codec__fp16_check_at(simd, p, n), want);
            if (at < n)
                memcpy(p + 2 * at, keep, 2);
        }
        free(buf);
    }
}

/* Every build adds the same bits: all 65536 halves into -0 with scale 1 (each value as
 * pc_wire decodes it); random halves into random sums with scales whose products round, are
 * subnormal or overflow, as ref_apply adds them; lengths 0..100 and 100003 at an odd
 * address. */
static void test_apply_builds(void **state)
{
    (void)state;
    uint8_t *all = xmalloc(2 * 65536);
    float *want = xmalloc(sizeof(float) * 100003), *got = xmalloc(sizeof(float) * 100003);
    for (uint32_t i = 0; i < 65536; i++) {
        all[2 * i] = (uint8_t)i;
        all[2 * i + 1] = (uint8_t)(i >> 8);
    }
    /* All 65536 into -0 with scale 1: the baseline gives each value as pc_wire decodes it
     * (NaNs as NaNs: the product quiets a signalling one), and every build the baseline's
     * bits, NaN payloads included. (ref_apply is not the judge here: the compiler may fold
     * its -0 + 1 * x into x, which keeps a signalling NaN signalling.) */
    for (size_t i = 0; i < 65536; i++)
        want[i] = -0.0f;
    pc_codec__fp16_apply_at(PC_CODEC__SIMD_NONE, all, 65536, 1.0f, want);
    for (uint32_t i = 0; i < 65536; i++) {
        if ((i & 0x7c00) == 0x7c00 && (i & 0x3ff))
            assert_true(isnan(want[i]));
        else
            assert_int_equal(to_bits(want[i]), to_bits(pc_wire_f16_to_f32((uint16_t)i)));
    }
    for (int simd = 0; simd <= pc_codec__fp16_simd(); simd++) {
        for (size_t i = 0; i < 65536; i++)
            got[i] = -0.0f;
        pc_codec__fp16_apply_at(simd, all, 65536, 1.0f, got);
        assert_memory_equal(got, want, sizeof(float) * 65536);
    }
    free(all);
    static const float scales[] = {1.0f, -0.5f, 3.1e-5f, 1e-30f, 1e35f};
    uint8_t *buf = xmalloc(2 * 100003 + 1), *p = buf + 1;
    for (size_t k = 0; k <= 101; k++) {
        size_t n = k <= 100 ? k : 100003;
        random_halves(p, n, 41, n);
        float *d0 = adversarial_array(n, 42, n, 0);
        for (size_t s = 0; s < sizeof(scales) / sizeof(scales[0]); s++) {
            memcpy(want, d0, sizeof(float) * n);
            ref_apply(p, n, scales[s], want);
            for (int simd = 0; simd <= pc_codec__fp16_simd(); simd++) {
                memcpy(got, d0, sizeof(float) * n);
                pc_codec__fp16_apply_at(simd, p, n, scales[s], got);
                if (n)
                    assert_memory_equal(got, want, sizeof(float) * n);
            }
        }
        free(d0);
    }
    free(buf), free(want), free(got);
}

/* codec none's copy in every build against pc_wire_put_u32, byte for byte, with 16 guard
 * bytes after the payload that must stay untouched; n up to 1 M + 37 values (4 MiB + 148
 * bytes: the non-temporal stores' threshold is 4 MiB), the payload at offsets 0, 1 (no
 * aligned store possible), 4 and 40 (the wire header's size) into a 64-byte aligned
 * buffer. */
static void test_none_copy(void **state)
{
    (void)state;
    static const size_t lens[] = {0, 1, 15, 16, 17, 100, 1000, 65537, (1u << 20) + 37};
    static const size_t offs[] = {0, 1, 4, 40};
    static const float bad[] = {INFINITY, -INFINITY, NAN};
    const size_t nmax = (1u << 20) + 37;
    float *v = malloc(nmax * sizeof *v);
    uint8_t *want = malloc(4 * nmax + 64);
    uint8_t *buf = aligned_alloc(64, (4 * nmax + 128 + 63) / 64 * 64);
    assert_non_null(v);
    assert_non_null(want);
    assert_non_null(buf);
    pc_philox_t g;
    pc_philox_init(&g, 46, 1, 0);
    for (size_t i = 0; i < nmax; i++) /* finite: any pattern with an exponent below 255 */
        v[i] = from_bits(pc_philox_next(&g) & 0xff7fffffu);
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        size_t n = lens[li];
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &v[i], sizeof u);
            pc_wire_put_u32(want + 4 * i, u);
        }
        for (int simd = 0; simd <= pc_codec__simd(); simd++)
            for (size_t oi = 0; oi < sizeof offs / sizeof *offs; oi++) {
                uint8_t *p = buf + offs[oi];
                memset(buf, 0xA5, 4 * nmax + 128);
                assert_true(pc_codec__f32s_put_at(simd, v, n, p));
                if (memcmp(p, want, 4 * n) != 0)
                    fail_msg("none copy: build %d, n %zu, offset %zu differs", simd, n, offs[oi]);
                for (size_t j = 0; j < 16; j++)
                    assert_int_equal(p[4 * n + j], 0xA5);
                for (int b = 0; b < 3 && n; b++) {
                    const size_t at[] = {0, n / 2, n - 1};
                    float keep = v[at[b]];
                    v[at[b]] = bad[b];
                    if (pc_codec__f32s_put_at(simd, v, n, p))
                        fail_msg("none copy: build %d, n %zu, %g at %zu not found", simd, n,
                                 (double)bad[b], at[b]);
                    v[at[b]] = keep;
                }
            }
    }
    free(v);
    free(want);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_premise),      cmocka_unit_test(test_encode_builds),
        cmocka_unit_test(test_encode_25m),   cmocka_unit_test(test_encode_erange),
        cmocka_unit_test(test_check_builds), cmocka_unit_test(test_apply_builds),
        cmocka_unit_test(test_none_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
