/* test_philox: Philox4x32-10 against Random123's known-answer vectors, and the stream
 * layout (any offset reached directly equals the sequence drawn from 0). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pipecompress/pc_philox.h"

static void test_known_answers(void **state)
{
    (void)state;
    /* Random123 kat_vectors, "philox4x32 10". */
    static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                       {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                                       {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}};
    static const uint32_t key[3][2] = {{0, 0}, {0xffffffff, 0xffffffff}, {0xa4093822, 0x299f31d0}};
    static const uint32_t want[3][4] = {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
                                        {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
                                        {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
    for (int v = 0; v < 3; v++) {
        uint32_t out[4];
        pc_philox4x32_10(ctr[v], key[v], out);
        for (int i = 0; i < 4; i++)
            assert_int_equal(out[i], want[v][i]);
    }
}

static void test_stream_layout(void **state)
{
    (void)state;
    const uint64_t seed = 0x0123456789abcdefull, sub = pc_philox_subsequence(7, 3);
    pc_philox_t g;
    pc_philox_init(&g, seed, sub, 0);
    uint32_t seq[1000];
    for (int j = 0; j < 1000; j++)
        seq[j] = pc_philox_next(&g);
    /* Draw j = word j % 4 of the block with counter (j / 4, 0, sub lo, sub hi). */
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    for (int j = 0; j < 1000; j += 37) {
        uint32_t ctr[4] = {(uint32_t)(j / 4), 0, (uint32_t)sub, (uint32_t)(sub >> 32)}, out[4];
        pc_philox4x32_10(ctr, key, out);
        assert_int_equal(seq[j], out[j % 4]);
        pc_philox_t h;
        pc_philox_init(&h, seed, sub, (uint64_t)j);
        assert_int_equal(pc_philox_next(&h), seq[j]);
    }
    /* Different subsequences give different streams. */
    pc_philox_t other;
    pc_philox_init(&other, seed, pc_philox_subsequence(7, 4), 0);
    int same = 0;
    for (int j = 0; j < 1000; j++)
        same += pc_philox_next(&other) == seq[j];
    assert_true(same < 3);
    /* The 64-bit block counter carries into word 1. */
    pc_philox_t carry;
    pc_philox_init(&carry, seed, sub, (uint64_t)0xffffffffu * 4 + 3);
    (void)pc_philox_next(&carry);
    assert_int_equal(carry.ctr[0], 0xffffffffu);
    (void)pc_philox_next(&carry);
    assert_int_equal(carry.ctr[0], 0);
    assert_int_equal(carry.ctr[1], 1);
}

static void test_uniform_range_and_mean(void **state)
{
    (void)state;
    assert_true(pc_philox_uniform(0) > 0.0f);
    assert_true(pc_philox_uniform(0xffffffffu) == 1.0f);
    pc_philox_t g;
    pc_philox_init(&g, 42, 0, 0);
    double sum = 0;
    const int n = 1000000;
    for (int i = 0; i < n; i++) {
        float u = pc_philox_uniform(pc_philox_next(&g));
        assert_true(u > 0.0f && u <= 1.0f);
        sum += u;
    }
    /* Mean 1/2, standard error sqrt(1/12/n) ~ 2.9e-4: a 6-sigma bound cannot fail by chance. */
    assert_true(sum / n > 0.5 - 0.00174 && sum / n < 0.5 + 0.00174);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answers),
        cmocka_unit_test(test_stream_layout),
        cmocka_unit_test(test_uniform_range_and_mean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
