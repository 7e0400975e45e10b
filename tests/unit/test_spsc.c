/* test_spsc: single-thread semantics of the SPSC ring (full, empty, wrap-around, bursts,
 * waits with timeouts) against a trivially correct model: a FIFO of sequence numbers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_spsc.h"
#include "pipecompress/pc_time.h"

typedef struct desc {
    uint64_t seq;
    uint32_t tensor;
    uint32_t check; /* seq ^ tensor ^ 0x5a5a5a5a: detects torn copies */
} desc_t;

static desc_t make(uint64_t seq)
{
    desc_t d = {.seq = seq, .tensor = (uint32_t)(seq * 7)};
    d.check = (uint32_t)seq ^ d.tensor ^ 0x5a5a5a5au;
    return d;
}

static void test_create_rejects_bad_sizes(void **state)
{
    (void)state;
    pc_spsc_t *q = (pc_spsc_t *)0x1;
    assert_int_equal(pc_spsc_create(0, 8, &q), PC_EINVAL);
    assert_int_equal(pc_spsc_create(1, 8, &q), PC_EINVAL);
    assert_int_equal(pc_spsc_create(3, 8, &q), PC_EINVAL);
    assert_int_equal(pc_spsc_create(100, 8, &q), PC_EINVAL);
    assert_int_equal(pc_spsc_create(8, 0, &q), PC_EINVAL);
    assert_int_equal(pc_spsc_create(8, PC_SPSC_MAX_SLOT + 1, &q), PC_EINVAL);
    assert_int_equal(pc_spsc_create(PC_SPSC_MAX_CAPACITY * 2, 8, &q), PC_EINVAL);
    assert_ptr_equal(q, (pc_spsc_t *)0x1); /* untouched on error */
    pc_spsc_destroy(NULL);
}

static void test_empty_and_full(void **state)
{
    (void)state;
    pc_spsc_t *q;
    assert_int_equal(pc_spsc_create(8, sizeof(desc_t), &q), PC_OK);
    assert_int_equal(pc_spsc_capacity(q), 8);
    desc_t d;
    assert_false(pc_spsc_try_pop(q, &d));
    assert_false(pc_spsc_can_pop(q));
    for (uint64_t i = 0; i < 8; i++) {
        desc_t in = make(i);
        assert_true(pc_spsc_try_push(q, &in));
        assert_int_equal(pc_spsc_size_approx(q), i + 1);
        assert_true(pc_spsc_can_pop(q));
    }
    desc_t extra = make(99);
    assert_false(pc_spsc_try_push(q, &extra)); /* full: nothing changes */
    assert_int_equal(pc_spsc_size_approx(q), 8);
    for (uint64_t i = 0; i < 8; i++) {
        assert_true(pc_spsc_try_pop(q, &d));
        assert_int_equal(d.seq, i);
        assert_int_equal(d.check, make(i).check);
        assert_int_equal(pc_spsc_can_pop(q), i < 7); /* it pops nothing itself */
    }
    assert_false(pc_spsc_try_pop(q, &d));
    assert_int_equal(pc_spsc_size_approx(q), 0);
    pc_spsc_destroy(q);
}

/* Many laps around a small ring with varying fill levels: indices wrap the mask often. */
static void test_wraparound(void **state)
{
    (void)state;
    pc_spsc_t *q;
    assert_int_equal(pc_spsc_create(4, sizeof(desc_t), &q), PC_OK);
    uint64_t next_in = 0, next_out = 0;
    for (int round = 0; round < 10000; round++) {
        int pushes = 1 + round % 4, pops = 1 + (round * 3) % 4;
        for (int i = 0; i < pushes; i++) {
            desc_t in = make(next_in);
            bool ok = pc_spsc_try_push(q, &in);
            assert_int_equal(ok, next_in - next_out < 4);
            if (ok)
                next_in++;
        }
        for (int i = 0; i < pops; i++) {
            desc_t d;
            bool ok = pc_spsc_try_pop(q, &d);
            assert_int_equal(ok, next_out < next_in);
            if (ok) {
                assert_int_equal(d.seq, next_out);
                assert_int_equal(d.check, make(next_out).check);
                next_out++;
            }
        }
    }
    assert_true(next_out > 10000);
    pc_spsc_destroy(q);
}

static void test_bursts(void **state)
{
    (void)state;
    pc_spsc_t *q;
    assert_int_equal(pc_spsc_create(16, sizeof(desc_t), &q), PC_OK);
    desc_t in[40], out[40];
    uint64_t next_in = 0, next_out = 0;
    for (int round = 0; round < 5000; round++) {
        size_t want = (size_t)(round % 23);
        for (size_t i = 0; i < want; i++)
            in[i] = make(next_in + i);
        size_t free_slots = 16 - (size_t)(next_in - next_out);
        size_t pushed = pc_spsc_try_push_burst(q, in, want);
        assert_int_equal(pushed, want < free_slots ? want : free_slots); /* prefix, all fit */
        next_in += pushed;
        size_t max = (size_t)((round * 7) % 19);
        size_t have = (size_t)(next_in - next_out);
        size_t popped = pc_spsc_try_pop_burst(q, out, max);
        assert_int_equal(popped, max < have ? max : have);
        for (size_t i = 0; i < popped; i++) {
            assert_int_equal(out[i].seq, next_out + i);
            assert_int_equal(out[i].check, make(next_out + i).check);
        }
        next_out += popped;
    }
    /* A burst push into a full ring pushes nothing; a burst pop of an empty ring pops none. */
    while (pc_spsc_try_pop_burst(q, out, 40) > 0) {
    }
    for (int i = 0; i < 16; i++)
        in[i] = make((uint64_t)i);
    assert_int_equal(pc_spsc_try_push_burst(q, in, 16), 16);
    assert_int_equal(pc_spsc_try_push_burst(q, in, 1), 0);
    assert_int_equal(pc_spsc_try_pop_burst(q, out, 40), 16);
    assert_int_equal(pc_spsc_try_pop_burst(q, out, 40), 0);
    assert_int_equal(pc_spsc_try_push_burst(q, in, 0), 0);
    pc_spsc_destroy(q);
}

/* Singles and bursts interleave on both sides and keep FIFO order. */
static void test_mixed_single_burst(void **state)
{
    (void)state;
    pc_spsc_t *q;
    assert_int_equal(pc_spsc_create(8, sizeof(uint64_t), &q), PC_OK);
    uint64_t v, buf[8], next_in = 0, next_out = 0;
    for (int round = 0; round < 3000; round++) {
        if (round % 2) {
            uint64_t b[3] = {next_in, next_in + 1, next_in + 2};
            next_in += pc_spsc_try_push_burst(q, b, 3);
        } else if (pc_spsc_try_push(q, &next_in)) {
            next_in++;
        }
        if (round % 3 == 0) {
            size_t n = pc_spsc_try_pop_burst(q, buf, 2);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(buf[i], next_out++);
        } else if (pc_spsc_try_pop(q, &v)) {
            assert_int_equal(v, next_out++);
        }
    }
    pc_spsc_destroy(q);
}

/* Items of sizes that are not multiples of the stamp (1, 3, 13 bytes) and the largest
 * allowed: every byte of every item comes out as it went in, across many laps, with single
 * and burst operations. Catches a stride that lets an item overlap the next slot's stamp. */
static void test_odd_slot_sizes(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 3, 13, 100, PC_SPSC_MAX_SLOT};
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        size_t sz = sizes[si];
        pc_spsc_t *q;
        assert_int_equal(pc_spsc_create(4, sz, &q), PC_OK);
        unsigned char in[3 * PC_SPSC_MAX_SLOT], out[3 * PC_SPSC_MAX_SLOT];
        uint64_t next_in = 0, next_out = 0;
        for (int round = 0; round < 400; round++) {
            size_t want = (size_t)(round % 3) + 1;
            for (size_t k = 0; k < want * sz; k++)
                in[k] = (unsigned char)((next_in + k / sz) * 31 + k % sz);
            size_t pushed =
                round % 2 ? pc_spsc_try_push_burst(q, in, want) : (size_t)pc_spsc_try_push(q, in);
            next_in += pushed;
            assert_int_equal(pc_spsc_size_approx(q), next_in - next_out);
            size_t popped =
                round % 5 ? pc_spsc_try_pop_burst(q, out, 2) : (size_t)pc_spsc_try_pop(q, out);
            for (size_t k = 0; k < popped * sz; k++)
                assert_int_equal(out[k], (unsigned char)((next_out + k / sz) * 31 + k % sz));
            next_out += popped;
        }
        assert_true(next_out > 100);
        pc_spsc_destroy(q);
    }
}

static void test_waits_time_out(void **state)
{
    (void)state;
    pc_spsc_t *q;
    assert_int_equal(pc_spsc_create(2, sizeof(uint64_t), &q), PC_OK);
    uint64_t v = 1;
    int64_t waited = -1;
    assert_int_equal(pc_spsc_pop_wait(q, &v, 2000000, &waited), PC_ETIMEDOUT);
    assert_true(waited >= 2000000);
    assert_int_equal(v, 1); /* untouched */
    assert_int_equal(pc_spsc_push_wait(q, &v, 0, &waited), PC_OK);
    assert_int_equal(waited, 0);
    assert_int_equal(pc_spsc_push_wait(q, &v, 0, NULL), PC_OK);
    assert_int_equal(pc_spsc_push_wait(q, &v, 1000000, &waited), PC_ETIMEDOUT);
    assert_true(waited >= 1000000);
    assert_int_equal(pc_spsc_pop_wait(q, &v, -1, &waited), PC_OK);
    assert_int_equal(waited, 0);
    pc_spsc_destroy(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_rejects_bad_sizes),
        cmocka_unit_test(test_empty_and_full),
        cmocka_unit_test(test_wraparound),
        cmocka_unit_test(test_bursts),
        cmocka_unit_test(test_mixed_single_burst),
        cmocka_unit_test(test_odd_slot_sizes),
        cmocka_unit_test(test_waits_time_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
