/* test_select: radix top-k against a sort-based reference (ties, k = 0, 1, n, repeated
 * values, heavy tails, negative zeros), the fused fold, non-finite inputs, threshold
 * selection, the k-th magnitude and its errors (k == 0, out of memory through an
 * allocation hook). */
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_philox.h"
#include "pipecompress/pc_select.h"

/* The allocation hook: this program's realloc, which the library's calls reach as well (a
 * definition in the executable comes first in the dynamic linker's lookup, and a static
 * link binds to it directly). While fail_from > 0 the calls numbered fail_from..fail_to
 * (from 1, counted in realloc_calls) return NULL; otherwise it is realloc, built on the
 * process's own malloc, malloc_usable_size and free, so that it pairs with whichever
 * allocator runs (glibc's, or a sanitizer's). pc_select grows its scratch with realloc
 * only. */
static int realloc_calls, fail_from, fail_to;

void *realloc(void *p, size_t n)
{
    if (fail_from > 0) {
        realloc_calls++;
        if (realloc_calls >= fail_from && realloc_calls <= fail_to)
            return NULL;
    }
    if (!p)
        return malloc(n);
    if (n == 0) {
        free(p);
        return NULL;
    }
    void *q = malloc(n);
    if (!q)
        return NULL;
    size_t old = malloc_usable_size(p);
    memcpy(q, p, old < n ? old : n);
    free(p);
    return q;
}

/* Fail the reallocs numbered from..to from now on (from 0: fail none). */
static void fail_reallocs(int from, int to)
{
    realloc_calls = 0;
    fail_from = from;
    fail_to = to;
}

static const float *ref_x;

/* Larger magnitude first; equal magnitudes: lower index first. */
static int by_mag_then_index(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    float x = fabsf(ref_x[i]), y = fabsf(ref_x[j]);
    if (x != y)
        return x > y ? -1 : 1;
    return (i > j) - (i < j);
}

static int by_index(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    return (i > j) - (i < j);
}

/* The naive reference: sort all indices, take k, sort them by index. */
static void ref_topk(const float *x, size_t n, size_t k, uint32_t *out)
{
    uint32_t *all = malloc(sizeof(uint32_t) * n);
    for (size_t i = 0; i < n; i++)
        all[i] = (uint32_t)i;
    ref_x = x;
    qsort(all, n, sizeof(uint32_t), by_mag_then_index);
    memcpy(out, all, sizeof(uint32_t) * k);
    qsort(out, k, sizeof(uint32_t), by_index);
    free(all);
}

enum dist { UNIFORM, HEAVY, TIES, CONSTANT, SIGNED_ZEROS };

static void fill(float *x, size_t n, enum dist d, uint64_t seed)
{
    pc_philox_t g;
    pc_philox_init(&g, seed, 0, 0);
    for (size_t i = 0; i < n; i++) {
        float u = pc_philox_uniform(pc_philox_next(&g));
        float s = (pc_philox_next(&g) & 1) ? -1.0f : 1.0f;
        switch (d) {
        case UNIFORM:
            x[i] = s * u;
            break;
        case HEAVY: /* Pareto-like tail, as gradients have, spanning many octaves */
            x[i] = s * 1e-4f * powf(u, -1.5f);
            break;
        case TIES: /* few distinct magnitudes: many ties at the boundary */
            x[i] = s * (float)(1 + pc_philox_next(&g) % 5);
            break;
        case CONSTANT:
            x[i] = 0.25f;
            break;
        case SIGNED_ZEROS:
            x[i] = (i % 3 == 0) ? s * 0.0f : s * u * 1e-30f; /* zeros and denormal-ish */
            break;
        }
    }
}

static void check(size_t n, size_t k, enum dist d, uint64_t seed, pc_select_t *s)
{
    float *x = malloc(sizeof(float) * n), *copy = malloc(sizeof(float) * n);
    size_t kk0 = k > n ? n : k;
    /* Exactly k entries: the ASan build catches a write past them. */
    uint32_t *got = malloc(sizeof(uint32_t) * (kk0 ? kk0 : 1)),
             *want = malloc(sizeof(uint32_t) * (n + 1));
    fill(x, n, d, seed);
    memcpy(copy, x, sizeof(float) * n);
    long r = pc_select_topk(s, x, NULL, n, k, got);
    size_t kk = k > n ? n : k;
    assert_int_equal(r, (long)kk);
    ref_topk(x, n, kk, want);
    if (kk && memcmp(got, want, sizeof(uint32_t) * kk) != 0)
        fail_msg("n=%zu k=%zu dist=%d: selection differs from the sort-based reference", n, k, d);
    assert_memory_equal(x, copy, sizeof(float) * n); /* no fold: input untouched */
    free(x);
    free(copy);
    free(got);
    free(want);
}

/* Every collect kernel this CPU has (AVX-512, AVX2, scalar) gives the reference's answer. */
static void test_against_reference(void **state)
{
    (void)state;
    int last = -1;
    for (int level = PC_SELECT_SIMD_AVX512; level >= PC_SELECT_SIMD_NONE; level--) {
        pc_select_t *s;
        assert_int_equal(pc_select_create(&s), PC_OK);
        int used = pc_select_limit_simd(s, level);
        assert_true(used <= level);
        if (used != last) { /* each kernel once */
            last = used;
            const size_t ns[] = {1, 2, 15, 16, 17, 100, 1000, 4097, 100000, 131075};
            for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++) {
                size_t n = ns[a];
                const size_t ks[] = {0, 1, 2, n / 100, n / 10, n / 2, n - 1, n, n + 5};
                for (int d = UNIFORM; d <= SIGNED_ZEROS; d++)
                    for (size_t b = 0; b < sizeof(ks) / sizeof(ks[0]); b++)
                        check(n, ks[b], (enum dist)d, n * 31 + b, s);
            }
            fprintf(stderr, "collect kernel level %d checked\n", used);
        }
        pc_select_destroy(s);
    }
}

/* Large inputs take the sampled path; inputs that fool the sample (the largest values sit
 * exactly on the sampled positions, or all values are equal) take the radix fallback.
 * Either way the result is the reference's. */
static void test_sampled_path_and_fallback(void **state)
{
    (void)state;
    pc_select_t *s;
    assert_int_equal(pc_select_create(&s), PC_OK);
    uint64_t fast, fallback;
    check(1 << 18, 2621, HEAVY, 1, s);
    check(1 << 18, 26, UNIFORM, 2, s);
    check((1 << 18) + 13, 65536, TIES, 3, s);
    pc_select_stats(s, &fast, &fallback);
    assert_true(fast >= 2);
    uint64_t fast0 = fast, fb0 = fallback;
    check(1 << 18, 5000, CONSTANT, 4, s); /* every element a candidate: buffer overflows */
    pc_select_stats(s, &fast, &fallback);
    assert_int_equal(fallback, fb0 + 1);
    /* Big values only at multiples of every stride the sampler may use. */
    size_t n = 1 << 18, k = 2000;
    float *x = malloc(sizeof(float) * n);
    uint32_t *got = malloc(sizeof(uint32_t) * k), *want = malloc(sizeof(uint32_t) * k);
    for (size_t i = 0; i < n; i++)
        x[i] = (i % 4 == 0) ? 100.0f + (float)(i % 1000) : 1.0f + (float)(i % 7) * 1e-3f;
    assert_int_equal(pc_select_topk(s, x, NULL, n, k, got), (long)k);
    ref_topk(x, n, k, want);
    assert_memory_equal(got, want, sizeof(uint32_t) * k);
    pc_select_stats(s, &fast, &fallback);
    assert_true(fast + fallback == fast0 + fb0 + 2);
    free(x);
    free(got);
    free(want);
    pc_select_destroy(s);
}

/* The fused fold (error feedback) on the sampled path, with every kernel. */
static void test_fold_every_kernel(void **state)
{
    (void)state;
    const size_t n = 131075, k = 1311;
    float *v = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n),
          *sum = malloc(sizeof(float) * n);
    uint32_t *got = malloc(sizeof(uint32_t) * k), *want = malloc(sizeof(uint32_t) * k);
    for (int level = PC_SELECT_SIMD_AVX512; level >= PC_SELECT_SIMD_NONE; level--) {
        pc_select_t *s;
        assert_int_equal(pc_select_create(&s), PC_OK);
        pc_select_limit_simd(s, level);
        fill(v, n, HEAVY, 11);
        fill(g, n, HEAVY, 12);
        for (size_t i = 0; i < n; i++)
            sum[i] = v[i] + g[i];
        assert_int_equal(pc_select_topk(s, v, g, n, k, got), (long)k);
        assert_memory_equal(v, sum, sizeof(float) * n);
        ref_topk(sum, n, k, want);
        assert_memory_equal(got, want, sizeof(uint32_t) * k);
        uint64_t fast, fallback;
        pc_select_stats(s, &fast, &fallback);
        assert_int_equal(fast, 1);
        pc_select_destroy(s);
    }
    free(v);
    free(g);
    free(sum);
    free(got);
    free(want);
}

static void test_fold_and_nonfinite(void **state)
{
    (void)state;
    pc_select_t *s;
    assert_int_equal(pc_select_create(&s), PC_OK);
    size_t n = 1003;
    float *v = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n),
          *sum = malloc(sizeof(float) * n);
    fill(v, n, HEAVY, 5);
    fill(g, n, UNIFORM, 6);
    for (size_t i = 0; i < n; i++)
        sum[i] = v[i] + g[i];
    uint32_t got[64], want[64];
    assert_int_equal(pc_select_topk(s, v, g, n, 50, got), 50);
    assert_memory_equal(v, sum, sizeof(float) * n); /* folded */
    ref_topk(sum, n, 50, want);
    assert_memory_equal(got, want, sizeof(uint32_t) * 50);
    v[500] = NAN;
    assert_int_equal(pc_select_topk(s, v, NULL, n, 10, got), PC_ERANGE);
    /* On the sampled path too, whether or not the NaN is among the sampled elements. */
    size_t big = 1 << 17;
    float *w = calloc(big, sizeof(float));
    uint32_t *wi = malloc(sizeof(uint32_t) * big);
    fill(w, big, HEAVY, 8);
    w[12345] = NAN;
    assert_int_equal(pc_select_topk(s, w, NULL, big, 100, wi), PC_ERANGE);
    w[12345] = 0;
    w[0] = INFINITY;
    assert_int_equal(pc_select_topk(s, w, NULL, big, 100, wi), PC_ERANGE);
    free(w);
    free(wi);
    v[500] = -INFINITY;
    assert_int_equal(pc_select_topk(s, v, NULL, n, 10, got), PC_ERANGE);
    free(v);
    free(g);
    free(sum);
    pc_select_destroy(s);
}

static void test_above_and_kth(void **state)
{
    (void)state;
    pc_select_t *s;
    assert_int_equal(pc_select_create(&s), PC_OK);
    size_t n = 5000;
    float *x = malloc(sizeof(float) * n);
    fill(x, n, HEAVY, 9);
    uint32_t *idx = malloc(sizeof(uint32_t) * n);
    float t = 0.01f;
    size_t cnt = pc_select_above(x, n, t, idx, n);
    size_t ref = 0;
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) >= t) {
            assert_int_equal(idx[ref], i);
            ref++;
        }
    assert_int_equal(cnt, ref);
    /* A small cap: the count is still the total, the list its prefix. */
    uint32_t few[3];
    assert_int_equal(pc_select_above(x, n, t, few, 3), ref);
    assert_memory_equal(few, idx, sizeof(few));
    /* k-th magnitude equals the reference's k-th; k > n is the smallest. */
    uint32_t *all = malloc(sizeof(uint32_t) * n);
    for (size_t i = 0; i < n; i++)
        all[i] = (uint32_t)i;
    ref_x = x;
    qsort(all, n, sizeof(uint32_t), by_mag_then_index);
    for (size_t k = 1; k <= n; k += 499) {
        float kth = -1.0f;
        assert_int_equal(pc_select_kth_magnitude(s, x, n, k, &kth), PC_OK);
        assert_true(kth == fabsf(x[all[k - 1]]));
    }
    float kth = -1.0f;
    assert_int_equal(pc_select_kth_magnitude(s, x, n, n + 5, &kth), PC_OK);
    assert_true(kth == fabsf(x[all[n - 1]]));
    free(all);
    free(idx);
    free(x);
    pc_select_destroy(s);
}

/* There is no k-th magnitude for k == 0 or n == 0: PC_EINVAL, the output untouched (it used
 * to be 0.0f, the same as a failure and as a real magnitude of 0). */
static void test_kth_without_k(void **state)
{
    (void)state;
    pc_select_t *s;
    assert_int_equal(pc_select_create(&s), PC_OK);
    float x[4] = {0.0f, -3.0f, 2.0f, 0.0f}, kth = 7.0f;
    assert_int_equal(pc_select_kth_magnitude(s, x, 4, 0, &kth), PC_EINVAL);
    assert_true(kth == 7.0f);
    assert_int_equal(pc_select_kth_magnitude(s, x, 0, 1, &kth), PC_EINVAL);
    assert_true(kth == 7.0f);
    /* A real magnitude of 0 is PC_OK. */
    assert_int_equal(pc_select_kth_magnitude(s, x, 4, 3, &kth), PC_OK);
    assert_true(kth == 0.0f);
    assert_int_equal(pc_select_kth_magnitude(s, x, 4, 1, &kth), PC_OK);
    assert_true(kth == 3.0f);
    pc_select_destroy(s);
}

/* Scratch that cannot grow is PC_ENOMEM, the output untouched, and the selector still
 * works afterwards; the sampled top-k path reports it from its k-th magnitude step (it
 * used to take the 0.0f it got back for a threshold and fall back to the radix path). */
static void test_kth_out_of_memory(void **state)
{
    (void)state;
    pc_select_t *s;
    assert_int_equal(pc_select_create(&s), PC_OK); /* fresh: no scratch yet */
    size_t n = 1000;
    float *x = malloc(sizeof(float) * n);
    fill(x, n, CONSTANT, 1); /* one bin holds every element: the candidates' scratch grows */
    float kth = 7.0f;
    fail_reallocs(1, INT_MAX);
    int rc = pc_select_kth_magnitude(s, x, n, 10, &kth);
    int calls = realloc_calls;
    fail_reallocs(0, 0);
    assert_int_equal(rc, PC_ENOMEM);
    assert_int_equal(calls, 1); /* it stopped at the first failure */
    assert_true(kth == 7.0f);
    assert_int_equal(pc_select_kth_magnitude(s, x, n, 10, &kth), PC_OK);
    assert_true(kth == 0.25f);
    pc_select_destroy(s);
    free(x);

    /* The sampled path (n >= 65536, k <= n / 4) on a fresh selector: realloc 1 is the
     * sample, 2 the k-th magnitude's candidates. */
    n = 1 << 18;
    size_t k = 2621;
    x = malloc(sizeof(float) * n);
    uint32_t *got = malloc(sizeof(uint32_t) * k), *want = malloc(sizeof(uint32_t) * k);
    fill(x, n, HEAVY, 1);
    assert_int_equal(pc_select_create(&s), PC_OK);
    fail_reallocs(2, 2);
    long r = pc_select_topk(s, x, NULL, n, k, got);
    fail_reallocs(0, 0);
    assert_int_equal(r, PC_ENOMEM);
    uint64_t fast, fallback;
    pc_select_stats(s, &fast, &fallback);
    assert_int_equal(fast + fallback, 0); /* neither path completed */
    assert_int_equal(pc_select_topk(s, x, NULL, n, k, got), (long)k);
    ref_topk(x, n, k, want);
    assert_memory_equal(got, want, sizeof(uint32_t) * k);
    pc_select_stats(s, &fast, &fallback);
    assert_int_equal(fast, 1);
    pc_select_destroy(s);
    free(x);
    free(got);
    free(want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference), cmocka_unit_test(test_sampled_path_and_fallback),
        cmocka_unit_test(test_fold_every_kernel), cmocka_unit_test(test_fold_and_nonfinite),
        cmocka_unit_test(test_above_and_kth),     cmocka_unit_test(test_kth_without_k),
        cmocka_unit_test(test_kth_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
