/* test_plan: chunking (big tensors split near-equally, small adjacent ones grouped, non-
 * adjacent ones not), byte-balanced deterministic server assignment, bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_plan.h"

static void test_split_and_group(void **state)
{
    (void)state;
    /* One slab: tensors of 10, 20, 1000, 5, 5 elements, back to back. */
    static float p[1040], g[1040];
    size_t sizes[] = {10, 20, 1000, 5, 5};
    pc_plan_tensor_t t[5];
    size_t off = 0;
    for (int i = 0; i < 5; i++) {
        t[i] = (pc_plan_tensor_t){sizes[i], p + off, g + off, 0};
        off += sizes[i];
    }
    pc_plan_t *plan;
    assert_int_equal(pc_plan_create(t, 5, 300, 2, &plan), PC_OK);
    /* [10+20] grouped, 1000 -> 4 pieces of 250, [5+5] grouped. */
    assert_int_equal(plan->nchunks, 6);
    assert_int_equal(plan->chunks[0].first_tensor, 0);
    assert_int_equal(plan->chunks[0].last_tensor, 1);
    assert_int_equal(plan->chunks[0].n, 30);
    for (int c = 1; c <= 4; c++) {
        assert_int_equal(plan->chunks[c].first_tensor, 2);
        assert_int_equal(plan->chunks[c].n, 250);
        assert_int_equal(plan->chunks[c].offset, (size_t)(c - 1) * 250);
    }
    assert_int_equal(plan->chunks[5].first_tensor, 3);
    assert_int_equal(plan->chunks[5].last_tensor, 4);
    assert_int_equal(plan->tensor_first_chunk[2], 1);
    assert_int_equal(plan->tensor_last_chunk[2], 4);
    assert_int_equal(plan->tensor_first_chunk[1], 0);
    /* Balanced: 250+250+... over two servers: 530 vs 510 at worst. */
    size_t a = plan->server_elems[0], b = plan->server_elems[1];
    assert_int_equal(a + b, 1040);
    assert_true((a > b ? a - b : b - a) <= 250);
    for (int c = 0; c < plan->nchunks; c++)
        assert_true(plan->chunks[c].server == 0 || plan->chunks[c].server == 1);
    char buf[4096];
    FILE *f = fmemopen(buf, sizeof(buf), "w");
    const char *names[] = {"a", "b", "c", "d", "e"};
    pc_plan_print(plan, names, f, "> ");
    fclose(f);
    assert_non_null(strstr(buf, "> chunk 0: 30 elements"));
    assert_non_null(strstr(buf, "tensors a..b"));
    assert_non_null(strstr(buf, "tensor c [250..500)"));
    pc_plan_destroy(plan);
}

static void test_not_adjacent_not_grouped(void **state)
{
    (void)state;
    static float p1[8], g1[8], p2[8], g2[8];
    pc_plan_tensor_t t[2] = {{8, p1, g1, 0}, {8, p2, g2, 0}};
    pc_plan_t *plan;
    assert_int_equal(pc_plan_create(t, 2, 1000, 1, &plan), PC_OK);
    assert_int_equal(plan->nchunks, 2);
    pc_plan_destroy(plan);
    /* Adjacent parameters but separate gradient buffers: not grouped either. */
    static float slab[16];
    pc_plan_tensor_t u[2] = {{8, slab, g1, 0}, {8, slab + 8, g2, 0}};
    assert_int_equal(pc_plan_create(u, 2, 1000, 1, &plan), PC_OK);
    assert_int_equal(plan->nchunks, 2);
    pc_plan_destroy(plan);
}

static void test_near_equal_pieces_and_determinism(void **state)
{
    (void)state;
    pc_plan_tensor_t t[3] = {{1001, NULL, NULL, 0}, {7, NULL, NULL, 0}, {333, NULL, NULL, 0}};
    pc_plan_t *a, *b;
    assert_int_equal(pc_plan_create(t, 3, 100, 3, &a), PC_OK);
    assert_int_equal(pc_plan_create(t, 3, 100, 3, &b), PC_OK);
    assert_int_equal(a->nchunks, 11 + 1 + 4);
    size_t sum = 0;
    for (int c = 0; c < a->nchunks; c++) {
        assert_true(a->chunks[c].n <= 100);
        sum += a->chunks[c].n;
        assert_int_equal(a->chunks[c].server, b->chunks[c].server);
        assert_int_equal(a->chunks[c].id, (uint32_t)c);
    }
    assert_int_equal(sum, 1341);
    /* 1001 in 11 pieces: 91 each. */
    assert_int_equal(a->chunks[0].n, 91);
    size_t lo = a->server_elems[0], hi = a->server_elems[0];
    for (int s = 1; s < 3; s++) {
        lo = a->server_elems[s] < lo ? a->server_elems[s] : lo;
        hi = a->server_elems[s] > hi ? a->server_elems[s] : hi;
    }
    assert_true(hi - lo <= 100);
    pc_plan_destroy(a);
    pc_plan_destroy(b);
}

static void test_more_servers_than_chunks_and_errors(void **state)
{
    (void)state;
    pc_plan_tensor_t t[1] = {{10, NULL, NULL, 0}};
    pc_plan_t *plan = NULL;
    assert_int_equal(pc_plan_create(t, 1, 100, 4, &plan), PC_OK);
    assert_int_equal(plan->nchunks, 1);
    assert_int_equal(plan->chunks[0].server, 0);
    assert_int_equal(plan->server_elems[3], 0);
    pc_plan_destroy(plan);
    pc_plan_tensor_t z[1] = {{0, NULL, NULL, 0}};
    plan = NULL;
    assert_int_equal(pc_plan_create(z, 1, 100, 1, &plan), PC_EINVAL);
    assert_int_equal(pc_plan_create(t, 0, 100, 1, &plan), PC_EINVAL);
    assert_int_equal(pc_plan_create(t, 1, 0, 1, &plan), PC_EINVAL);
    assert_int_equal(pc_plan_create(t, 1, 100, 0, &plan), PC_EINVAL);
    assert_null(plan);
}

/* pc_plan_deal against its rule computed naively here (each chunk's midpoint share, in
 * double: exact at these sizes), and what the pool relies on: contiguous ranges in order,
 * one thread takes everything, an empty thread between two of one tensor's, bad
 * arguments refused. */
static void test_deal(void **state)
{
    (void)state;
    /* 10 tensors of assorted sizes, 1000-element chunks: 2500 is cut in three. */
    const size_t sizes[] = {2500, 30, 700, 1000, 5, 4000, 64, 999, 1, 3000};
    enum { NT = sizeof(sizes) / sizeof(sizes[0]) };
    pc_plan_tensor_t t[NT];
    for (int i = 0; i < NT; i++)
        t[i] = (pc_plan_tensor_t){.n = sizes[i]};
    pc_plan_t *plan;
    assert_int_equal(pc_plan_create(t, NT, 1000, 2, &plan), PC_OK);
    int lane[64];
    assert_true(plan->nchunks <= 64);
    double total = 0;
    for (int i = 0; i < plan->nchunks; i++)
        total += (double)plan->chunks[i].n;
    for (int n = 1; n <= 9; n++) {
        assert_int_equal(pc_plan_deal(plan, n, NULL, lane), PC_OK);
        double before = 0;
        for (int i = 0; i < plan->nchunks; i++) {
            double mid = before + (double)plan->chunks[i].n / 2;
            int want = (int)(mid * n / total);
            assert_int_equal(lane[i], want < n ? want : n - 1);
            if (i > 0)
                assert_true(lane[i] >= lane[i - 1]); /* contiguous ranges, in order */
            before += (double)plan->chunks[i].n;
        }
        if (n == 1)
            for (int i = 0; i < plan->nchunks; i++)
                assert_int_equal(lane[i], 0);
    }
    /* One tensor in two big chunks over 4 threads: threads 1 and 3, thread 2 empty
     * between them (the case the worker skips), thread 0 empty at the start. */
    pc_plan_tensor_t big = {.n = 2000};
    pc_plan_t *two;
    assert_int_equal(pc_plan_create(&big, 1, 1000, 1, &two), PC_OK);
    assert_int_equal(two->nchunks, 2);
    assert_int_equal(pc_plan_deal(two, 4, NULL, lane), PC_OK);
    assert_int_equal(lane[0], 1); /* midpoint 500 of 2000: share 1 of 4 */
    assert_int_equal(lane[1], 3); /* midpoint 1500: share 3 */
    assert_int_equal(pc_plan_deal(two, 0, NULL, lane), PC_EINVAL);
    assert_int_equal(pc_plan_deal(two, PC_PLAN_DEAL_MAX + 1, NULL, lane), PC_EINVAL);
    assert_int_equal(pc_plan_deal(NULL, 2, NULL, lane), PC_EINVAL);
    assert_int_equal(pc_plan_deal(two, 2, NULL, NULL), PC_EINVAL);
    /* By work: the first chunk 3 times the second's work moves the midpoint of chunk 1
     * (work [3, 4) of 4) to share 3 of 4, chunk 0 (midpoint 1.5) to share 1. */
    uint64_t w31[2] = {3, 1}, zero[2] = {0, 0}, huge[2] = {UINT64_C(1) << 50, 1};
    assert_int_equal(pc_plan_deal(two, 4, w31, lane), PC_OK);
    assert_int_equal(lane[0], 1);
    assert_int_equal(lane[1], 3);
    assert_int_equal(pc_plan_deal(two, 2, w31, lane), PC_OK);
    assert_int_equal(lane[0], 0); /* midpoint 1.5 of 4: share 0 of 2 */
    assert_int_equal(lane[1], 1);
    assert_int_equal(pc_plan_deal(two, 2, zero, lane), PC_EINVAL);
    assert_int_equal(pc_plan_deal(two, 2, huge, lane), PC_EINVAL);
    pc_plan_destroy(two);
    pc_plan_destroy(plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_and_group),
        cmocka_unit_test(test_not_adjacent_not_grouped),
        cmocka_unit_test(test_near_equal_pieces_and_determinism),
        cmocka_unit_test(test_more_servers_than_chunks_and_errors),
        cmocka_unit_test(test_deal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
