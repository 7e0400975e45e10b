/* test_codec_sum: the canonical sum (src/codec/codec_impl.h, pc_codec__sum), the order every
 * implementation of the codecs reduces in so that qsgd's norm, efsign's mean and dgc's
 * clipping norm are the same bits on a CPU and on a GPU. Checked in double precision
 * against a reference written from the definition, on inputs where the order shows: the
 * same terms summed in plain sequence give other bits (checked too, so the comparison can
 * fail). The function is private: this program compiles the codec sources itself.
 * Also dgc's sample gather (pc_codec__dgc_sample, codec_sparse.c), private too: the same
 * elements as the index function it replaces, which divides per sample. */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec/codec_impl.h"
#include "codec/simd_impl.h"
#include "pipecompress/pc_philox.h"

/* Lane l adds t[l], t[l + 256], ... in order from +0.0; then lane[l] += lane[l + s] for
 * s = 128 .. 1. */
static double block_ref(const double *t, size_t m)
{
    double lane[256];
    for (int l = 0; l < 256; l++) {
        lane[l] = 0.0;
        for (size_t j = (size_t)l; j < m; j += 256)
            lane[l] = lane[l] + t[j];
    }
    for (int s = 128; s >= 1; s /= 2)
        for (int l = 0; l < s; l++)
            lane[l] = lane[l] + lane[l + s];
    return lane[0];
}

/* Blocks of 2048 elements, then the same reduction over the blocks' results. */
static double canonical_ref(const float *x, size_t n, int squares)
{
    size_t nb = (n + 2047) / 2048;
    double *p = malloc(sizeof(double) * nb), t[2048];
    assert_non_null(p);
    for (size_t b = 0; b < nb; b++) {
        size_t m = n - b * 2048 < 2048 ? n - b * 2048 : 2048;
        for (size_t i = 0; i < m; i++) {
            double v = (double)x[b * 2048 + i];
            t[i] = squares ? v * v : fabs(v);
        }
        p[b] = block_ref(t, m);
    }
    double s = block_ref(p, nb);
    free(p);
    return s;
}

static double sequential(const float *x, size_t n, int squares)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += squares ? (double)x[i] * x[i] : fabs((double)x[i]);
    return s;
}

static void gradient(float *x, size_t n, uint64_t seed)
{
    pc_philox_t g;
    pc_philox_init(&g, seed, 5, 0);
    for (size_t i = 0; i < n; i++) {
        uint32_t a = pc_philox_next(&g);
        x[i] = ((a & 1) ? -1e-3f : 1e-3f) * powf(pc_philox_uniform(a | 1), -1.2f);
    }
}

static void test_matches_definition(void **state)
{
    (void)state;
    const size_t sizes[] = {1, 2, 255, 256, 257, 2047, 2048, 2049, 4096, 300 * 2048 + 77, 1000003};
    int differs_from_sequence = 0;
    for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
        size_t n = sizes[z];
        float *x = malloc(sizeof(float) * n);
        assert_non_null(x);
        gradient(x, n, z);
        for (int sq = 0; sq <= 1; sq++) {
            pc_codec_sum_op_t op = sq ? PC_CODEC_SUM_SQUARES : PC_CODEC_SUM_ABS;
            double got = pc_codec__sum(x, n, op);
            double want = canonical_ref(x, n, sq);
            if (memcmp(&got, &want, sizeof(got)) != 0)
                fail_msg("n=%zu %s: pc_codec__sum %a, the definition %a", n, sq ? "squares" : "abs",
                         got, want);
            differs_from_sequence += got != sequential(x, n, sq);
            /* Every build this CPU runs (the baseline's scalar loop, AVX2, AVX-512). */
            for (int simd = 0; simd <= pc_codec__simd(); simd++) {
                double b = pc_codec__sum_at(simd, x + z % 2, n - z % 2, op);
                double w = canonical_ref(x + z % 2, n - z % 2, sq);
                if (memcmp(&b, &w, sizeof(b)) != 0)
                    fail_msg("n=%zu %s, build %d: %a, the definition %a", n - z % 2,
                             sq ? "squares" : "abs", simd, b, w);
            }
        }
        free(x);
    }
    /* The order is visible on these inputs: most large sums differ from a plain loop. */
    assert_true(differs_from_sequence >= 4);
}

static void test_edges(void **state)
{
    (void)state;
    float z[3] = {0.0f, -0.0f, 0.0f}, big[2] = {3e38f, 3e38f};
    assert_true(pc_codec__sum(z, 3, PC_CODEC_SUM_SQUARES) == 0.0);
    assert_true(pc_codec__sum(z, 0, PC_CODEC_SUM_ABS) == 0.0);
    /* Squares of the largest floats overflow no double. */
    assert_true(pc_codec__sum(big, 2, PC_CODEC_SUM_SQUARES) == 2.0 * 3e38 * 3e38 ||
                pc_codec__sum(big, 2, PC_CODEC_SUM_SQUARES) ==
                    (double)big[0] * big[0] + (double)big[1] * big[1]);
}

/* pc_codec__dgc_sample takes element pc_codec__dgc_sample_index(j, n, ns) for every j: the
 * sizes cover ns == n, ns dividing n, b = n mod ns near 0 and near ns, and primes. Each
 * element holds its own index, so a wrong pick shows as a wrong value. */
static void test_dgc_sample(void **state)
{
    (void)state;
    const size_t cases[][2] = {{1, 1},           {7, 7},       {10, 1},      {10, 3},
                               {10, 9},          {1000, 999},  {1000, 501},  {1000, 500},
                               {4099, 128},      {65536, 655}, {65537, 128}, {131071, 1279},
                               {1048576, 128000}};
    size_t maxn = 1048576;
    float *v = malloc(maxn * sizeof(*v)), *out = malloc(maxn * sizeof(*out));
    assert_non_null(v);
    assert_non_null(out);
    for (size_t i = 0; i < maxn; i++)
        v[i] = (float)i; /* exact: i < 2^24 */
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t n = cases[c][0], ns = cases[c][1];
        pc_codec__dgc_sample(v, n, ns, out);
        for (size_t j = 0; j < ns; j++)
            if (out[j] != (float)pc_codec__dgc_sample_index(j, n, ns))
                fail_msg("n %zu ns %zu: sample %zu is element %.0f, not %zu", n, ns, j,
                         (double)out[j], pc_codec__dgc_sample_index(j, n, ns));
    }
    free(v);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_definition),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_dgc_sample),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
