/* pc_select: radix selection of the largest magnitudes (see pc_select.h for the method). */
#include "config.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_select.h"
#include "simd_impl.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#endif

/* Key bits: 31 (sign cleared). Level 1: bits 30..20 (11 bits: exponent and 3 mantissa
 * bits, 1/8-octave bins). Level 2: bits 19..9. Level 3: bits 8..0. */
#define L1_SHIFT 20
#define L1_BINS  2048
#define L2_SHIFT 9
#define L2_BINS  2048
#define L3_BINS  512
/* Keys at or above this are infinities or NaNs (exponent all ones). */
#define KEY_NONFINITE 0x7f800000u
/* Interleaved histogram copies in pass 1: gradients crowd into few bins, and one copy
 * would make every increment wait for the previous one to the same bin. */
#define HCOPIES 4
/* Block of the skip test in pass 2: 16 keys = one 64-byte line of floats. */
#define BLOCK 16

/* Which collect kernel this CPU runs. */
enum simd {
    SIMD_NONE = PC_SELECT_SIMD_NONE,
    SIMD_AVX2 = PC_SELECT_SIMD_AVX2,
    SIMD_AVX512 = PC_SELECT_SIMD_AVX512
};

_Static_assert(PC_SELECT_SIMD_AVX2 == PC_CODEC__SIMD_AVX2 &&
                   PC_SELECT_SIMD_AVX512 == PC_CODEC__SIMD_AVX512,
               "pc_select's kernel levels are simd_impl.h's");

static enum simd detect_simd(void)
{
#ifdef HAVE_AVX2_PATH
    return (enum simd)pc_codec__simd();
#else
    return SIMD_NONE;
#endif
}

/* The sampled fast path (see pc_select_topk) runs when n is at least this (below, the data
 * is in L1/L2 and the radix path is as fast) and k is at most n / FAST_MAX_DENSITY (above,
 * most blocks hold candidates and the collect pass loses its skipping). */
#define FAST_MIN_N       65536
#define FAST_MAX_DENSITY 4
/* Sample sizing: aim for SAMPLE_HITS sampled elements above the k-th largest (relative
 * error of the estimate ~ 1/sqrt(hits)), with at least SAMPLE_MIN and at most n /
 * SAMPLE_MAX_FRACTION elements (a denser sample would cost another pass). */
#define SAMPLE_HITS         256
#define SAMPLE_MIN          4096
#define SAMPLE_MAX_FRACTION 16

struct pc_select {
    int simd;        /* enum simd: the collect kernel this CPU runs */
    uint32_t *ckeys; /* keys of the candidates (sampled path) */
    size_t ckeys_cap;
    uint64_t fast, fallback; /* top-k calls by path, for tests and tuning */
    float *samp;             /* sampled values */
    size_t samp_cap;
    uint32_t *cand; /* candidate indices (keys in the boundary bin) */
    size_t cand_cap;
    uint32_t *def; /* indices certainly selected */
    size_t def_cap;
    uint32_t hist[HCOPIES][L1_BINS];
};

int pc_select_create(pc_select_t **out)
{
    pc_select_t *s = calloc(1, sizeof(*s));
    if (!s)
        return PC_ENOMEM;
    s->simd = (int)detect_simd();
    *out = s;
    return PC_OK;
}

void pc_select_destroy(pc_select_t *s)
{
    if (!s)
        return;
    free(s->samp);
    free(s->ckeys);
    free(s->cand);
    free(s->def);
    free(s);
}

static inline uint32_t key_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u & 0x7fffffffu;
}

static int reserve(uint32_t **buf, size_t *cap, size_t want)
{
    if (*cap >= want)
        return PC_OK;
    uint32_t *p = realloc(*buf, sizeof(uint32_t) * (want ? want : 1));
    if (!p)
        return PC_ENOMEM;
    *buf = p;
    *cap = want;
    return PC_OK;
}

/* Pass 1: level-1 histogram into hist[0] (summed copies), optionally folding x += g. */
static void histogram_l1(pc_select_t *s, float *x, const float *g, size_t n)
{
    memset(s->hist, 0, sizeof(s->hist));
    size_t i = 0;
    if (g) {
        for (; i + HCOPIES <= n; i += HCOPIES)
            for (int c = 0; c < HCOPIES; c++) {
                float v = x[i + c] + g[i + c];
                x[i + c] = v;
                s->hist[c][key_of(v) >> L1_SHIFT]++;
            }
        for (; i < n; i++) {
            x[i] += g[i];
            s->hist[0][key_of(x[i]) >> L1_SHIFT]++;
        }
    } else {
        for (; i + HCOPIES <= n; i += HCOPIES)
            for (int c = 0; c < HCOPIES; c++)
                s->hist[c][key_of(x[i + c]) >> L1_SHIFT]++;
        for (; i < n; i++)
            s->hist[0][key_of(x[i]) >> L1_SHIFT]++;
    }
    for (int b = 0; b < L1_BINS; b++)
        for (int c = 1; c < HCOPIES; c++)
            s->hist[0][b] += s->hist[c][b];
}

/* The bin holding the k-th largest (1 <= k <= total): scanning from the top, the first bin
 * where the running count reaches k. *above gets the count in higher bins. */
static int find_bin(const uint32_t *hist, int bins, size_t k, size_t *above)
{
    size_t acc = 0;
    for (int b = bins - 1; b >= 0; b--) {
        if (acc + hist[b] >= k) {
            *above = acc;
            return b;
        }
        acc += hist[b];
    }
    *above = acc;
    return 0;
}

/* Histogram of (key >> shift) & mask over keys[0..n) whose (key & match_mask) == match,
 * into hist (bins entries), with HCOPIES interleaved copies: candidates crowd into a few
 * bins and a single copy would serialise the increments. */
static void hist_keys(uint32_t *hist, int bins, const uint32_t *keys, size_t n, int shift,
                      uint32_t match_mask, uint32_t match)
{
    uint32_t h[HCOPIES][L1_BINS];
    memset(h, 0, sizeof(uint32_t) * HCOPIES * (size_t)L1_BINS);
    uint32_t mask = (uint32_t)bins - 1;
    size_t j = 0;
    for (; j + HCOPIES <= n; j += HCOPIES)
        for (int c = 0; c < HCOPIES; c++) {
            uint32_t key = keys[j + (size_t)c];
            h[c][(key >> shift) & mask] += (key & match_mask) == match;
        }
    for (; j < n; j++)
        h[0][(keys[j] >> shift) & mask] += (keys[j] & match_mask) == match;
    for (int b = 0; b < bins; b++)
        hist[b] = h[0][b] + h[1][b] + h[2][b] + h[3][b];
}

/* The exact k-th largest of keys[0..n) (1 <= k <= n), by a three-level radix select;
 * *above_t gets how many keys are > T. */
static uint32_t exact_key(const uint32_t *keys, size_t n, size_t k, size_t *above_t)
{
    _Static_assert(HCOPIES == 4, "hist_keys sums four copies");
    uint32_t h1[L1_BINS], h2[L2_BINS], h3[L3_BINS];
    hist_keys(h1, L1_BINS, keys, n, L1_SHIFT, 0, 0);
    size_t above1;
    uint32_t b1 = (uint32_t)find_bin(h1, L1_BINS, k, &above1);
    hist_keys(h2, L2_BINS, keys, n, L2_SHIFT, ~(uint32_t)0 << L1_SHIFT, b1 << L1_SHIFT);
    size_t above2;
    uint32_t b2 = (uint32_t)find_bin(h2, L2_BINS, k - above1, &above2);
    uint32_t prefix = b1 << L1_SHIFT | b2 << L2_SHIFT;
    hist_keys(h3, L3_BINS, keys, n, 0, ~(uint32_t)(L3_BINS - 1), prefix);
    size_t above3;
    uint32_t b3 = (uint32_t)find_bin(h3, L3_BINS, k - above1 - above2, &above3);
    *above_t = above1 + above2 + above3;
    return prefix | b3;
}

/* Keep, in order, the candidates with key > t and, while ties remain, key == t; returns
 * how many were written to out (room for `room` entries, which the kept ones never exceed;
 * out may be cand itself: compaction in place). The keep decision is branch-free (most
 * candidates are kept, a data-dependent branch would mispredict); the store is skipped
 * only once out is full, a branch that is predicted. */
static size_t keep_top(const uint32_t *keys, const uint32_t *cand, size_t ncand, uint32_t t,
                       size_t ties, uint32_t *out, size_t room)
{
    size_t o = 0;
    for (size_t j = 0; j < ncand; j++) {
        uint32_t key = keys[j];
        size_t tie = key == t && ties > 0;
        size_t keep = (key > t) | tie;
        ties -= tie;
        if (o < room)
            out[o] = cand[j];
        o += keep;
    }
    return o;
}

/* The keys of x[cand[0..n)] into s->ckeys. */
static int gather_keys(pc_select_t *s, const float *x, const uint32_t *cand, size_t n)
{
    if (reserve(&s->ckeys, &s->ckeys_cap, n) != PC_OK)
        return PC_ENOMEM;
    for (size_t j = 0; j < n; j++)
        s->ckeys[j] = key_of(x[cand[j]]);
    return PC_OK;
}

/* Pass 2: indices with key >= hi into def (ascending), with lo <= key < hi into cand. */
static void collect(const float *x, size_t n, uint32_t lo, uint32_t hi, uint32_t *def, size_t *ndef,
                    uint32_t *cand, size_t *ncand)
{
    size_t nd = 0, nc = 0, i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        uint32_t m = 0;
        for (int j = 0; j < BLOCK; j++) { /* vectorisable: max of the block's keys */
            uint32_t key = key_of(x[i + (size_t)j]);
            m = key > m ? key : m;
        }
        if (m < lo)
            continue;
        for (int j = 0; j < BLOCK; j++) {
            uint32_t key = key_of(x[i + (size_t)j]);
            if (key >= hi)
                def[nd++] = (uint32_t)(i + (size_t)j);
            else if (key >= lo)
                cand[nc++] = (uint32_t)(i + (size_t)j);
        }
    }
    for (; i < n; i++) {
        uint32_t key = key_of(x[i]);
        if (key >= hi)
            def[nd++] = (uint32_t)i;
        else if (key >= lo)
            cand[nc++] = (uint32_t)i;
    }
    *ndef = nd;
    *ncand = nc;
}

/* Exact top-k by radix select over all n: two passes (see the file header). */
static long topk_radix(pc_select_t *s, float *x, const float *g, size_t n, size_t k, uint32_t *idx)
{
    histogram_l1(s, x, g, n);
    for (int b = (int)(KEY_NONFINITE >> L1_SHIFT); b < L1_BINS; b++)
        if (s->hist[0][b])
            return PC_ERANGE;
    if (k == 0)
        return 0;
    if (k == n) {
        for (size_t i = 0; i < n; i++)
            idx[i] = (uint32_t)i;
        return (long)n;
    }
    size_t above;
    uint32_t b1 = (uint32_t)find_bin(s->hist[0], L1_BINS, k, &above);
    size_t in_bin = s->hist[0][b1];
    if (reserve(&s->cand, &s->cand_cap, in_bin) != PC_OK ||
        reserve(&s->def, &s->def_cap, above) != PC_OK)
        return PC_ENOMEM;
    size_t ndef, ncand;
    collect(x, n, b1 << L1_SHIFT, (b1 + 1) << L1_SHIFT, s->def, &ndef, s->cand, &ncand);
    size_t need = k - ndef; /* 1..ncand */
    size_t nsel = ncand;
    if (need < ncand) {
        if (gather_keys(s, x, s->cand, ncand) != PC_OK)
            return PC_ENOMEM;
        size_t above_t;
        uint32_t t = exact_key(s->ckeys, ncand, need, &above_t);
        nsel = keep_top(s->ckeys, s->cand, ncand, t, need - above_t, s->cand, ncand);
    }
    /* Merge the two ascending lists. */
    size_t a = 0, c = 0, o = 0;
    while (a < ndef && c < nsel)
        idx[o++] = s->def[a] < s->cand[c] ? s->def[a++] : s->cand[c++];
    while (a < ndef)
        idx[o++] = s->def[a++];
    while (c < nsel)
        idx[o++] = s->cand[c++];
    return (long)o;
}

/* ---- the sampled path ----------------------------------------------------------------
 * A strided sample of m elements gives a threshold t_lo a little below the k-th largest
 * magnitude; one pass collects (in index order) every index with |x| >= t_lo, typically
 * 1.2k to 2k of them, folding x += g on the way when asked; the exact k-th key among those
 * candidates finishes the job. The sample only decides how fast: when it misjudges (fewer
 * than k candidates, or more than the buffer holds) the radix path redoes the selection
 * from scratch, so the result is the same exact, tie-broken top-k either way. */

/* Scalar collect: every i with key(x[i] (+ g[i])) >= lo, writing at most cap indices;
 * returns the total count. Folds x += g when g is not NULL. */
static size_t collect_ge_scalar(float *x, const float *g, size_t n, uint32_t lo, uint32_t *out,
                                uint32_t *keys, size_t cap)
{
    size_t cnt = 0;
    for (size_t i = 0; i < n; i++) {
        float v = g ? x[i] + g[i] : x[i];
        if (g)
            x[i] = v;
        uint32_t key = key_of(v);
        if (key >= lo) {
            if (cnt < cap) {
                out[cnt] = (uint32_t)i;
                if (keys)
                    keys[cnt] = key;
            }
            cnt++;
        }
    }
    return cnt;
}

#ifdef HAVE_AVX2_PATH
/* AVX2 collect over n (a multiple of 32) elements: 32 per step; a step whose 32 keys are all
 * below lo costs four and+compare pairs, three ORs and one test. Keys are < 2^31, so signed
 * compares are exact. Two loops (with and without the fold) keep everything in registers. */
#define AVX2_EMIT(i0, m0, m1, m2, m3)                                                              \
    do {                                                                                           \
        __m256i any_ = _mm256_or_si256(_mm256_or_si256(m0, m1), _mm256_or_si256(m2, m3));          \
        if (!_mm256_testz_si256(any_, any_)) {                                                     \
            uint32_t bits_ = (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(m0)) |               \
                             (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(m1)) << 8 |          \
                             (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(m2)) << 16 |         \
                             (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(m3)) << 24;          \
            while (bits_) {                                                                        \
                if (cnt < cap) {                                                                   \
                    size_t at_ = (i0) + (size_t)__builtin_ctz(bits_);                              \
                    out[cnt] = (uint32_t)at_;                                                      \
                    if (keys)                                                                      \
                        keys[cnt] = key_of(x[at_]);                                                \
                }                                                                                  \
                cnt++;                                                                             \
                bits_ &= bits_ - 1;                                                                \
            }                                                                                      \
        }                                                                                          \
    } while (0)

__attribute__((target("avx2"))) static size_t
collect_ge_avx2(const float *x, size_t n, uint32_t lo, uint32_t *out, uint32_t *keys, size_t cap)
{
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i below = _mm256_set1_epi32((int32_t)lo - 1); /* key > lo - 1  <=>  key >= lo */
    size_t cnt = 0;
    for (size_t i = 0; i < n; i += 32) {
        const __m256i *p = (const __m256i *)(const void *)(x + i);
        __m256i m0 = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(p), abs_mask), below);
        __m256i m1 =
            _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(p + 1), abs_mask), below);
        __m256i m2 =
            _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(p + 2), abs_mask), below);
        __m256i m3 =
            _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(p + 3), abs_mask), below);
        AVX2_EMIT(i, m0, m1, m2, m3);
    }
    return cnt;
}

__attribute__((target("avx2"))) static size_t collect_ge_fold_avx2(float *x, const float *g,
                                                                   size_t n, uint32_t lo,
                                                                   uint32_t *out, uint32_t *keys,
                                                                   size_t cap)
{
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i below = _mm256_set1_epi32((int32_t)lo - 1);
    size_t cnt = 0;
    for (size_t i = 0; i < n; i += 32) {
        __m256 v0 = _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(g + i));
        __m256 v1 = _mm256_add_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(g + i + 8));
        __m256 v2 = _mm256_add_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(g + i + 16));
        __m256 v3 = _mm256_add_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(g + i + 24));
        _mm256_storeu_ps(x + i, v0);
        _mm256_storeu_ps(x + i + 8, v1);
        _mm256_storeu_ps(x + i + 16, v2);
        _mm256_storeu_ps(x + i + 24, v3);
        __m256i m0 = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(v0), abs_mask), below);
        __m256i m1 = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(v1), abs_mask), below);
        __m256i m2 = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(v2), abs_mask), below);
        __m256i m3 = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(v3), abs_mask), below);
        AVX2_EMIT(i, m0, m1, m2, m3);
    }
    return cnt;
}
#undef AVX2_EMIT

/* AVX-512: 16 elements per step, selected indices and keys leave through register
 * compresses and full-vector stores, with no branch on the data. Within 16 of the buffer's
 * end it falls back to element stores (a full-vector store writes 16 lanes). */
__attribute__((target("avx512f"))) static size_t collect_ge_avx512(float *x, const float *g,
                                                                   size_t n, uint32_t lo,
                                                                   uint32_t *out, uint32_t *keys,
                                                                   size_t cap)
{
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    const __m512i low = _mm512_set1_epi32((int32_t)lo);
    const __m512i step = _mm512_set1_epi32(16);
    __m512i iv = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    size_t cnt = 0;
    size_t i = 0;
    if (!g) {
        /* Read-only fast path, 32 elements a step: when neither half holds a candidate (two
         * thirds of the steps at 1% density) nothing is compressed or stored. */
        const __m512i step32 = _mm512_set1_epi32(32);
        __m512i iv2 = _mm512_add_epi32(iv, step);
        for (; i + 32 <= n && cnt + 32 <= cap; i += 32) {
            __m512i k0 = _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + i)), abs_mask);
            __m512i k1 =
                _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + i + 16)), abs_mask);
            __mmask16 m0 = _mm512_cmpge_epi32_mask(k0, low), m1 = _mm512_cmpge_epi32_mask(k1, low);
            if (m0 | m1) {
                _mm512_storeu_si512(out + cnt, _mm512_maskz_compress_epi32(m0, iv));
                if (keys)
                    _mm512_storeu_si512(keys + cnt, _mm512_maskz_compress_epi32(m0, k0));
                cnt += (size_t)__builtin_popcount(m0);
                _mm512_storeu_si512(out + cnt, _mm512_maskz_compress_epi32(m1, iv2));
                if (keys)
                    _mm512_storeu_si512(keys + cnt, _mm512_maskz_compress_epi32(m1, k1));
                cnt += (size_t)__builtin_popcount(m1);
            }
            iv = _mm512_add_epi32(iv, step32);
            iv2 = _mm512_add_epi32(iv2, step32);
        }
    }
    for (; i < n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        if (g) {
            v = _mm512_add_ps(v, _mm512_loadu_ps(g + i));
            _mm512_storeu_ps(x + i, v);
        }
        __m512i key = _mm512_and_si512(_mm512_castps_si512(v), abs_mask);
        __mmask16 m = _mm512_cmpge_epi32_mask(key, low);
        if (cnt + 16 <= cap) {
            /* Branch-free: compress in a register and store all 16 lanes whether or not any
             * is selected (a data-dependent branch here mispredicts on scattered hits; a
             * compress-store straight to memory is microcoded and slow on AMD Zen 4). Lanes
             * past the selected ones are overwritten by the next store or ignored. */
            _mm512_storeu_si512(out + cnt, _mm512_maskz_compress_epi32(m, iv));
            if (keys)
                _mm512_storeu_si512(keys + cnt, _mm512_maskz_compress_epi32(m, key));
            cnt += (size_t)__builtin_popcount(m);
        } else {
            for (unsigned bb = m; bb; bb &= bb - 1) {
                size_t at = i + (size_t)__builtin_ctz(bb);
                if (cnt < cap) {
                    out[cnt] = (uint32_t)at;
                    if (keys)
                        keys[cnt] = key_of(x[at]);
                }
                cnt++;
            }
        }
        iv = _mm512_add_epi32(iv, step);
    }
    return cnt;
}
#endif

/* Every i with key(x[i] (+ g[i])) >= lo, ascending, into out (and its key into keys when
 * not NULL), at most cap of them; returns the total count. Folds x += g when g. */
static size_t collect_ge(enum simd simd, float *x, const float *g, size_t n, uint32_t lo,
                         uint32_t *out, uint32_t *keys, size_t cap)
{
    size_t head = 0, cnt = 0;
#ifdef HAVE_AVX2_PATH
    if (simd == SIMD_AVX512) {
        head = n & ~(size_t)15;
        cnt = collect_ge_avx512(x, g, head, lo, out, keys, cap);
    } else if (simd == SIMD_AVX2) {
        head = n & ~(size_t)31;
        cnt = g ? collect_ge_fold_avx2(x, g, head, lo, out, keys, cap)
                : collect_ge_avx2(x, head, lo, out, keys, cap);
    }
#else
    (void)simd;
#endif
    size_t at = cnt < cap ? cnt : cap;
    size_t rest = collect_ge_scalar(x + head, g ? g + head : NULL, n - head, lo, out + at,
                                    keys ? keys + at : NULL, cap - at);
    for (size_t j = at; j < at + (rest < cap - at ? rest : cap - at); j++)
        out[j] += (uint32_t)head;
    return cnt + rest;
}

/* topk_sampled's answer when the sample misjudged: the caller then runs the radix path on
 * the (already folded) x. Distinct from every PC_E* code. */
#define SAMPLE_MISSED (-1000L)

static long topk_sampled(pc_select_t *s, float *x, const float *g, size_t n, size_t k,
                         uint32_t *idx)
{
    double dens = (double)k / (double)n;
    size_t m = (size_t)ceil(SAMPLE_HITS / dens);
    if (m < SAMPLE_MIN)
        m = SAMPLE_MIN;
    if (m > n / SAMPLE_MAX_FRACTION)
        m = n / SAMPLE_MAX_FRACTION;
    size_t stride = n / m;
    if (s->samp_cap < m) {
        float *p = realloc(s->samp, sizeof(float) * m);
        if (!p)
            return PC_ENOMEM;
        s->samp = p;
        s->samp_cap = m;
    }
    for (size_t j = 0; j < m; j++) {
        size_t i = j * stride;
        s->samp[j] = g ? x[i] + g[i] : x[i];
    }
    /* Rank in the sample: expected hits h plus 3 standard deviations plus a margin, so
     * that fewer than k candidates is a > 3-sigma event (about 1.25k expected with 256
     * hits), and more than the 3k + 4096 the buffer holds far rarer still. */
    double h = dens * (double)m;
    size_t r = (size_t)ceil(h + 3.0 * sqrt(h) + 16.0);
    if (r > m)
        return SAMPLE_MISSED; /* cannot happen with the sizing above; kept for safety */
    float t_lo;
    int rc = pc_select_kth_magnitude(s, s->samp, m, r, &t_lo); /* 1 <= r <= m */
    if (rc != PC_OK)
        return rc;
    size_t cap = 3 * k + 4096;
    if (reserve(&s->cand, &s->cand_cap, cap) != PC_OK ||
        reserve(&s->ckeys, &s->ckeys_cap, cap) != PC_OK)
        return PC_ENOMEM;
    size_t cnt = collect_ge((enum simd)s->simd, x, g, n, key_of(t_lo), s->cand, s->ckeys, cap);
    if (cnt < k || cnt > cap)
        return SAMPLE_MISSED;
    for (size_t j = 0; j < cnt; j++)
        if (s->ckeys[j] >= KEY_NONFINITE)
            return PC_ERANGE;
    size_t above_t;
    uint32_t t = exact_key(s->ckeys, cnt, k, &above_t);
    return (long)keep_top(s->ckeys, s->cand, cnt, t, k - above_t, idx, k);
}

long pc_select_topk(pc_select_t *s, float *x, const float *g, size_t n, size_t k, uint32_t *idx)
{
    if (k > n)
        k = n;
    long r;
    if (n < FAST_MIN_N || k == 0 || k > n / FAST_MAX_DENSITY) {
        r = topk_radix(s, x, g, n, k, idx);
    } else if ((r = topk_sampled(s, x, g, n, k, idx)) != SAMPLE_MISSED) {
        s->fast += r >= 0;
    } else {
        s->fallback++;
        /* The collect pass folded x already when g was given; a NaN among the non-sampled
         * elements is found by the radix pass. */
        r = topk_radix(s, x, NULL, n, k, idx);
    }
    /* Exactly k, whichever path: ties at the threshold are kept by index (pc_select.h). */
    assert(r < 0 || (size_t)r == k);
    return r;
}

int pc_select_limit_simd(pc_select_t *s, int max_level)
{
    if (max_level < s->simd)
        s->simd = max_level < 0 ? SIMD_NONE : max_level;
    return s->simd;
}

void pc_select_stats(const pc_select_t *s, uint64_t *fast, uint64_t *fallback)
{
    *fast = s->fast;
    *fallback = s->fallback;
}

size_t pc_select_above(const float *x, size_t n, float t, uint32_t *idx, size_t cap)
{
    /* No fold (g is NULL): collect_ge only reads x. */
    return collect_ge(detect_simd(), (float *)(uintptr_t)x, NULL, n, key_of(t), idx, NULL, cap);
}

int pc_select_kth_magnitude(pc_select_t *s, const float *x, size_t n, size_t k, float *out)
{
    if (k == 0 || n == 0)
        return PC_EINVAL;
    if (k > n)
        k = n;
    histogram_l1(s, (float *)(uintptr_t)x, NULL, n); /* no fold: x is only read */
    size_t above;
    uint32_t b1 = (uint32_t)find_bin(s->hist[0], L1_BINS, k, &above);
    if (reserve(&s->cand, &s->cand_cap, s->hist[0][b1]) != PC_OK ||
        reserve(&s->def, &s->def_cap, above) != PC_OK)
        return PC_ENOMEM;
    size_t ndef, ncand;
    collect(x, n, b1 << L1_SHIFT, (b1 + 1) << L1_SHIFT, s->def, &ndef, s->cand, &ncand);
    if (gather_keys(s, x, s->cand, ncand) != PC_OK)
        return PC_ENOMEM;
    size_t above_t;
    uint32_t t = exact_key(s->ckeys, ncand, k - ndef, &above_t);
    memcpy(out, &t, sizeof(*out)); /* a key is the bits of a non-negative float */
    return PC_OK;
}
