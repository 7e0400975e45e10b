/* test_curand: pc_philox (the CPU reference of every codec's random draws) against cuRAND's
 * own Philox4x32-10, run on the CPU by cuRAND's host generator (curandCreateGeneratorHost),
 * so no GPU is needed.
 *
 * cuRAND's host generator in the legacy ordering lays its Philox output out as 65536
 * interleaved subsequences: with i' = i + offset (curandSetGeneratorOffset), output i is
 * draw 4 * (i' / 4 / 65536) + i' % 4 of subsequence (i' / 4) % 65536 in pc_philox.h's
 * layout (key = seed, counter = (block, subsequence)), i.e. what curand_init(seed,
 * subsequence, draw) then curand() returns on a device. Checked here for many seeds (both
 * key words), all 65536 subsequences, and offsets that carry into the counter's second
 * word. Built without CUDA (no cuRAND) the program exits 77: skipped. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "pipecompress/pc_philox.h"

#ifdef PC_HAVE_CUDA
#include <curand.h>

#define HOST_SUBSEQUENCES 65536u

/* n outputs of the host generator for (seed, offset). */
static uint32_t *host_draws(uint64_t seed, uint64_t offset, size_t n)
{
    curandGenerator_t g;
    assert_int_equal(curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10),
                     CURAND_STATUS_SUCCESS);
    assert_int_equal(curandSetGeneratorOrdering(g, CURAND_ORDERING_PSEUDO_LEGACY),
                     CURAND_STATUS_SUCCESS);
    assert_int_equal(curandSetPseudoRandomGeneratorSeed(g, seed), CURAND_STATUS_SUCCESS);
    assert_int_equal(curandSetGeneratorOffset(g, offset), CURAND_STATUS_SUCCESS);
    uint32_t *out = malloc(sizeof(uint32_t) * n);
    assert_non_null(out);
    assert_int_equal(curandGenerate(g, out, n), CURAND_STATUS_SUCCESS);
    curandDestroyGenerator(g);
    return out;
}

/* Output i (offset applied) against pc_philox's draw at the position the layout names. */
static void check_outputs(uint64_t seed, uint64_t offset, size_t n, size_t step)
{
    uint32_t *out = host_draws(seed, offset, n);
    for (size_t i = 0; i < n; i += step) {
        uint64_t ip = offset + i, block = ip / 4;
        uint64_t subsequence = block % HOST_SUBSEQUENCES;
        uint64_t draw = 4 * (block / HOST_SUBSEQUENCES) + ip % 4;
        pc_philox_t p;
        pc_philox_init(&p, seed, subsequence, draw);
        uint32_t want = pc_philox_next(&p);
        if (out[i] != want)
            fail_msg("seed 0x%016llx offset %llu output %zu (subsequence %llu, draw %llu): "
                     "cuRAND 0x%08x, pc_philox 0x%08x",
                     (unsigned long long)seed, (unsigned long long)offset, i,
                     (unsigned long long)subsequence, (unsigned long long)draw, out[i], want);
    }
    free(out);
}

/* Seeds with both key words non-zero, small ones, one per high bit. */
static const uint64_t seeds[] = {0,
                                 1,
                                 42,
                                 0xffffffffull,
                                 0x100000000ull,
                                 0x0123456789abcdefull,
                                 0xfedcba9876543210ull,
                                 0xffffffffffffffffull};

static void test_every_subsequence(void **state)
{
    (void)state;
    /* Two blocks of every subsequence: 2 x 65536 x 4 outputs, each checked. */
    for (size_t s = 0; s < sizeof(seeds) / sizeof(seeds[0]); s++)
        check_outputs(seeds[s], 0, 2 * 4 * HOST_SUBSEQUENCES, 1);
}

static void test_offsets(void **state)
{
    (void)state;
    /* Offsets inside a block, across subsequences, deep into the stream, and past 2^32
     * blocks (the counter's second word). */
    const uint64_t offsets[] = {1,
                                3,
                                5,
                                4 * HOST_SUBSEQUENCES - 1,
                                4 * HOST_SUBSEQUENCES * 1000 + 7,
                                4ull * HOST_SUBSEQUENCES * 0xffffffffull + 9,
                                4ull * HOST_SUBSEQUENCES * 0x100000001ull + 2};
    for (size_t s = 0; s < sizeof(seeds) / sizeof(seeds[0]); s += 2)
        for (size_t o = 0; o < sizeof(offsets) / sizeof(offsets[0]); o++)
            check_outputs(seeds[s], offsets[o], 4 * HOST_SUBSEQUENCES + 64, 3);
}

static void test_uniform_formula(void **state)
{
    (void)state;
    /* curandGenerateUniform is curand_uniform's formula over the same draws. */
    curandGenerator_t g;
    assert_int_equal(curandCreateGeneratorHost(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10),
                     CURAND_STATUS_SUCCESS);
    assert_int_equal(curandSetGeneratorOrdering(g, CURAND_ORDERING_PSEUDO_LEGACY),
                     CURAND_STATUS_SUCCESS);
    assert_int_equal(curandSetPseudoRandomGeneratorSeed(g, 7), CURAND_STATUS_SUCCESS);
    size_t n = 4 * HOST_SUBSEQUENCES;
    float *u = malloc(sizeof(float) * n);
    assert_non_null(u);
    assert_int_equal(curandGenerateUniform(g, u, n), CURAND_STATUS_SUCCESS);
    curandDestroyGenerator(g);
    uint32_t *x = host_draws(7, 0, n);
    for (size_t i = 0; i < n; i++)
        if (u[i] != pc_philox_uniform(x[i]))
            fail_msg("uniform %zu: cuRAND %a, pc_philox_uniform %a", i, (double)u[i],
                     (double)pc_philox_uniform(x[i]));
    free(u);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_subsequence),
        cmocka_unit_test(test_offsets),
        cmocka_unit_test(test_uniform_formula),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}

#else

int main(void)
{
    printf("skipped: built without CUDA: no cuRAND to compare pc_philox with\n");
    return 77;
}

#endif
