/* test_topo: placement plans on synthetic hwloc topologies (unbound ranks, ranks the
 * launcher confined, more threads than cores, mixed roles, --bind none and lists, bad
 * input), and a real bind-and-verify on this machine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_config.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_topo.h"

static const char *const worker_names[] = {"backprop", "compressor"};
static const char *const server_names[] = {"server"};

static pc_topo_t *load(const char *synthetic)
{
    pc_topo_t *t = NULL;
    char err[256];
    assert_int_equal(pc_topo_create(synthetic, &t, err, sizeof(err)), PC_OK);
    return t;
}

static void fill_ranks(pc_topo_t *t, pc_topo_rank_t *ranks, int n, int nthreads,
                       const char *const *cpusets)
{
    for (int r = 0; r < n; r++) {
        assert_int_equal(
            pc_topo_self(t, r, nthreads, nthreads == 1 ? server_names : worker_names, &ranks[r]),
            PC_OK);
        if (cpusets)
            snprintf(ranks[r].cpuset, sizeof(ranks[r].cpuset), "%s", cpusets[r]);
    }
}

static pc_topo_plan_t *plan(pc_topo_t *t, const char *bind_text, pc_topo_rank_t *ranks, int n)
{
    pc_bind_t bind;
    char err[256] = "";
    assert_int_equal(pc_topo_bind_parse(bind_text, &bind, err, sizeof(err)), PC_OK);
    pc_topo_plan_t *p = NULL;
    int rc = pc_topo_plan_create(t, &bind, ranks, n, &p, err, sizeof(err));
    if (rc != PC_OK)
        fail_msg("plan failed: %s", err);
    return p;
}

static void test_synthetic_counts(void **state)
{
    (void)state;
    pc_topo_t *t = load("pack:2 core:8 pu:2");
    assert_int_equal(pc_topo_ncores(t), 16);
    assert_int_equal(pc_topo_npus(t), 32);
    assert_false(pc_topo_is_real(t));
    pc_topo_destroy(t);
    char err[256];
    pc_topo_t *bad = (pc_topo_t *)0x1;
    assert_int_equal(pc_topo_create("pack:banana", &bad, err, sizeof(err)), PC_ETOPO);
    assert_ptr_equal(bad, (pc_topo_t *)0x1);
    assert_non_null(strstr(err, "pack:banana"));
}

/* Three unbound worker ranks on 16 cores: six distinct cores, rank by rank. */
static void test_unbound_ranks_get_distinct_cores(void **state)
{
    (void)state;
    pc_topo_t *t = load("pack:2 core:8 pu:2");
    pc_topo_rank_t ranks[3];
    fill_ranks(t, ranks, 3, 2, NULL);
    pc_topo_plan_t *p = plan(t, "auto", ranks, 3);
    for (int r = 0; r < 3; r++)
        for (int th = 0; th < 2; th++) {
            assert_int_equal(pc_topo_plan_core(p, r, th), r * 2 + th);
            assert_false(pc_topo_plan_shared(p, r, th));
        }
    assert_int_equal(pc_topo_plan_nshared(p), 0);
    char d[512];
    pc_topo_plan_describe(p, d, sizeof(d));
    assert_string_equal(d, "placement: 6 threads of 3 ranks on 16 cores; one core each");
    assert_int_equal(pc_topo_plan_core(p, 3, 0), -1); /* out of range */
    assert_int_equal(pc_topo_plan_core(p, 0, 2), -1);
    pc_topo_plan_destroy(p);
    pc_topo_destroy(t);
}

/* Six threads on two cores: the backprop threads spread first, each compressor avoids its
 * own backprop's core, and the plan says who shares what. */
static void test_more_threads_than_cores(void **state)
{
    (void)state;
    pc_topo_t *t = load("core:2 pu:1");
    pc_topo_rank_t ranks[3];
    fill_ranks(t, ranks, 3, 2, NULL);
    pc_topo_plan_t *p = plan(t, "auto", ranks, 3);
    for (int r = 0; r < 3; r++) {
        assert_int_not_equal(pc_topo_plan_core(p, r, 0), pc_topo_plan_core(p, r, 1));
        assert_true(pc_topo_plan_shared(p, r, 0));
    }
    assert_int_equal(pc_topo_plan_nshared(p), 2);
    char d[512];
    pc_topo_plan_describe(p, d, sizeof(d));
    assert_string_equal(d, "placement: 6 threads of 3 ranks on 2 cores; fewer cores than "
                           "threads, sharing: core 0 {r0.backprop r1.compressor r2.backprop} "
                           "core 1 {r0.compressor r1.backprop r2.compressor}");
    /* A description cut short stays a terminated string. */
    char small[20];
    pc_topo_plan_describe(p, small, sizeof(small));
    assert_int_equal(strlen(small), sizeof(small) - 1);
    pc_topo_plan_destroy(p);
    pc_topo_destroy(t);
}

/* mpirun --bind-to core: each rank confined to one core; its two threads share it. */
static void test_launcher_confined_to_one_core(void **state)
{
    (void)state;
    pc_topo_t *t = load("core:4 pu:2");
    pc_topo_rank_t ranks[2];
    const char *const sets[] = {"0-1", "2-3"};
    fill_ranks(t, ranks, 2, 2, sets);
    pc_topo_plan_t *p = plan(t, "auto", ranks, 2);
    assert_int_equal(pc_topo_plan_core(p, 0, 0), 0);
    assert_int_equal(pc_topo_plan_core(p, 0, 1), 0);
    assert_int_equal(pc_topo_plan_core(p, 1, 0), 1);
    assert_int_equal(pc_topo_plan_core(p, 1, 1), 1);
    assert_int_equal(pc_topo_plan_nshared(p), 2);
    pc_topo_plan_destroy(p);
    pc_topo_destroy(t);
}

/* --map-by ppr:1:socket:pe=2 style: each rank given two cores: one each, inside them. */
static void test_launcher_gave_two_cores(void **state)
{
    (void)state;
    pc_topo_t *t = load("core:4 pu:2");
    pc_topo_rank_t ranks[2];
    const char *const sets[] = {"4-7", "0-3"};
    fill_ranks(t, ranks, 2, 2, sets);
    pc_topo_plan_t *p = plan(t, "auto", ranks, 2);
    assert_int_equal(pc_topo_plan_core(p, 0, 0), 2);
    assert_int_equal(pc_topo_plan_core(p, 0, 1), 3);
    assert_int_equal(pc_topo_plan_core(p, 1, 0), 0);
    assert_int_equal(pc_topo_plan_core(p, 1, 1), 1);
    assert_int_equal(pc_topo_plan_nshared(p), 0);
    pc_topo_plan_destroy(p);
    pc_topo_destroy(t);
}

/* A server (one thread) and two workers (two threads each) on 8 cores. */
static void test_mixed_roles(void **state)
{
    (void)state;
    pc_topo_t *t = load("pack:1 core:8 pu:1");
    pc_topo_rank_t ranks[3];
    assert_int_equal(pc_topo_self(t, 0, 1, server_names, &ranks[0]), PC_OK);
    assert_int_equal(pc_topo_self(t, 1, 2, worker_names, &ranks[1]), PC_OK);
    assert_int_equal(pc_topo_self(t, 2, 2, worker_names, &ranks[2]), PC_OK);
    pc_topo_plan_t *p = plan(t, "auto", ranks, 3);
    assert_int_equal(pc_topo_plan_core(p, 0, 0), 0);
    assert_int_equal(pc_topo_plan_core(p, 1, 0), 1);
    assert_int_equal(pc_topo_plan_core(p, 1, 1), 2);
    assert_int_equal(pc_topo_plan_core(p, 2, 0), 3);
    assert_int_equal(pc_topo_plan_core(p, 2, 1), 4);
    assert_int_equal(pc_topo_plan_nshared(p), 0);
    pc_topo_plan_destroy(p);
    pc_topo_destroy(t);
}

/* Short of cores with a server: backprop threads get cores of their own first, the server
 * and compressors share what is left (mpirun -np 2 and -np 3 on two cores). */
static void test_short_with_server(void **state)
{
    (void)state;
    pc_topo_t *t = load("core:2 pu:1");
    pc_topo_rank_t ranks[3];
    assert_int_equal(pc_topo_self(t, 0, 2, worker_names, &ranks[0]), PC_OK);
    assert_int_equal(pc_topo_self(t, 1, 1, server_names, &ranks[1]), PC_OK);
    pc_topo_plan_t *p = plan(t, "auto", ranks, 2);
    assert_int_equal(pc_topo_plan_core(p, 0, 0), 0); /* backprop alone */
    assert_int_equal(pc_topo_plan_core(p, 0, 1), 1);
    assert_int_equal(pc_topo_plan_core(p, 1, 0), 1); /* server with the compressor */
    assert_false(pc_topo_plan_shared(p, 0, 0));
    pc_topo_plan_destroy(p);

    assert_int_equal(pc_topo_self(t, 1, 2, worker_names, &ranks[1]), PC_OK);
    assert_int_equal(pc_topo_self(t, 2, 1, server_names, &ranks[2]), PC_OK);
    p = plan(t, "auto", ranks, 3);
    assert_int_not_equal(pc_topo_plan_core(p, 0, 0), pc_topo_plan_core(p, 1, 0));
    for (int r = 0; r < 2; r++)
        assert_int_not_equal(pc_topo_plan_core(p, r, 0), pc_topo_plan_core(p, r, 1));
    char d[512];
    pc_topo_plan_describe(p, d, sizeof(d));
    assert_string_equal(d, "placement: 5 threads of 3 ranks on 2 cores; fewer cores than "
                           "threads, sharing: core 0 {r0.backprop r1.compressor r2.server} "
                           "core 1 {r0.compressor r1.backprop}");
    pc_topo_plan_destroy(p);
    pc_topo_destroy(t);
}

static void test_bind_none_and_list(void **state)
{
    (void)state;
    pc_topo_t *t = load("core:4 pu:2");
    pc_topo_rank_t ranks[2];
    fill_ranks(t, ranks, 2, 2, NULL);
    pc_topo_plan_t *p = plan(t, "none", ranks, 2);
    assert_int_equal(pc_topo_plan_core(p, 0, 0), -1);
    assert_int_equal(pc_topo_plan_core(p, 1, 1), -1);
    assert_int_equal(pc_topo_plan_nshared(p), 0);
    char d[256];
    pc_topo_plan_describe(p, d, sizeof(d));
    assert_string_equal(d, "placement: 4 threads unbound (--bind none)");
    char err[256];
    assert_int_equal(pc_topo_plan_bind(t, p, 0, 0, err, sizeof(err)), PC_OK); /* no-op */
    pc_topo_plan_destroy(p);

    p = plan(t, "3,2,1,0", ranks, 2);
    assert_int_equal(pc_topo_plan_core(p, 0, 0), 3);
    assert_int_equal(pc_topo_plan_core(p, 0, 1), 2);
    assert_int_equal(pc_topo_plan_core(p, 1, 0), 1);
    assert_int_equal(pc_topo_plan_core(p, 1, 1), 0);
    pc_topo_plan_destroy(p);

    p = plan(t, "1,1,2,3", ranks, 2); /* a list may share on purpose */
    assert_true(pc_topo_plan_shared(p, 0, 0));
    assert_false(pc_topo_plan_shared(p, 1, 0));
    pc_topo_plan_destroy(p);

    pc_bind_t bind;
    pc_topo_plan_t *none = NULL;
    assert_int_equal(pc_topo_bind_parse("0,1,2", &bind, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_topo_plan_create(t, &bind, ranks, 2, &none, err, sizeof(err)), PC_EUSAGE);
    assert_string_equal(err, "--bind: the list names 3 cores but this node's ranks have 4 threads");
    assert_int_equal(pc_topo_bind_parse("0,1,2,9", &bind, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_topo_plan_create(t, &bind, ranks, 2, &none, err, sizeof(err)), PC_EUSAGE);
    assert_string_equal(err, "--bind: core 9 does not exist (this node has 4 cores)");
    assert_null(none);
    pc_topo_destroy(t);
}

static void test_bad_requests(void **state)
{
    (void)state;
    pc_topo_t *t = load("core:4 pu:2");
    pc_topo_rank_t ranks[1];
    char err[256];
    pc_topo_plan_t *p = NULL;
    pc_bind_t bind = {.mode = PC_BIND_AUTO};
    const char *const outside[] = {"100-101"};
    fill_ranks(t, ranks, 1, 2, outside);
    assert_int_equal(pc_topo_plan_create(t, &bind, ranks, 1, &p, err, sizeof(err)), PC_ETOPO);
    assert_string_equal(err, "rank 0: cpuset '100-101' has no usable PU");
    const char *const garbage[] = {"zero-one"};
    fill_ranks(t, ranks, 1, 2, garbage);
    assert_int_equal(pc_topo_plan_create(t, &bind, ranks, 1, &p, err, sizeof(err)), PC_ETOPO);
    fill_ranks(t, ranks, 1, 2, NULL);
    ranks[0].nthreads = PC_TOPO_MAX_THREADS + 1;
    assert_int_equal(pc_topo_plan_create(t, &bind, ranks, 1, &p, err, sizeof(err)), PC_EINVAL);
    assert_int_equal(pc_topo_plan_create(t, &bind, ranks, 0, &p, err, sizeof(err)), PC_EINVAL);
    assert_null(p);
    assert_int_equal(pc_topo_self(t, 0, 0, worker_names, ranks), PC_EINVAL);
    /* Binding needs a real machine. */
    fill_ranks(t, ranks, 1, 2, NULL);
    p = plan(t, "auto", ranks, 1);
    assert_int_equal(pc_topo_plan_bind(t, p, 0, 0, err, sizeof(err)), PC_ETOPO);
    assert_string_equal(err, "cannot bind threads on a synthetic topology");
    assert_int_equal(pc_topo_plan_bind(t, p, 0, 5, err, sizeof(err)), PC_EINVAL);
    pc_topo_plan_destroy(p);
    pc_topo_destroy(t);
}

/* This machine: plan one thread, bind, and the binding is verified by hwloc. */
static void test_real_bind(void **state)
{
    (void)state;
    pc_topo_t *t = load(NULL);
    assert_true(pc_topo_is_real(t));
    assert_true(pc_topo_ncores(t) >= 1);
    pc_topo_rank_t me;
    assert_int_equal(pc_topo_self(t, 0, 1, server_names, &me), PC_OK);
    assert_true(me.cpuset[0] != '\0');
    pc_topo_plan_t *p = plan(t, "auto", &me, 1);
    char err[256] = "";
    int rc = pc_topo_plan_bind(t, p, 0, 0, err, sizeof(err));
    if (rc != PC_OK)
        fail_msg("bind failed: %s", err);
    pc_topo_plan_destroy(p);
    pc_topo_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synthetic_counts),
        cmocka_unit_test(test_unbound_ranks_get_distinct_cores),
        cmocka_unit_test(test_more_threads_than_cores),
        cmocka_unit_test(test_launcher_confined_to_one_core),
        cmocka_unit_test(test_launcher_gave_two_cores),
        cmocka_unit_test(test_mixed_roles),
        cmocka_unit_test(test_short_with_server),
        cmocka_unit_test(test_bind_none_and_list),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_real_bind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
