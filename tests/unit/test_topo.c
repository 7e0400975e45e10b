/* test_topo: placement plans on synthetic hwloc topologies (unbound ranks, ranks the
 * launcher confined, more threads than cores, mixed roles, --bind none and lists, bad
 * input, ranks near a GPU), a real bind-and-verify on this machine, the CPU locality of
 * this machine's PCI devices, and the real topology's counts against a plain hwloc load
 * and hwloc-calc. */
#include <ctype.h>
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <hwloc.h>

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

/* Rank r of ranks[] near the cpuset `near` (hwloc list syntax), its GPU called gpu. */
static void set_near(pc_topo_rank_t *rank, const char *near, const char *gpu)
{
    snprintf(rank->near, sizeof(rank->near), "%s", near);
    snprintf(rank->gpu, sizeof(rank->gpu), "%s", gpu);
}

/* Two packages of four cores; both workers' GPUs hang off package 1 (PUs 4-7): they take
 * its cores, rank by rank, and the description names each GPU and its cores. */
static void test_near_gpu_package(void **state)
{
    (void)state;
    pc_topo_t *t = load("pack:2 core:4 pu:1");
    pc_topo_rank_t ranks[2];
    fill_ranks(t, ranks, 2, 2, NULL);
    assert_string_equal(ranks[0].near, ""); /* pc_topo_self: no preference */
    assert_string_equal(ranks[0].gpu, "");
    set_near(&ranks[0], "4-7", "cuda:0");
    set_near(&ranks[1], "4-7", "cuda:1");
    pc_topo_plan_t *p = plan(t, "auto", ranks, 2);
    assert_int_equal(pc_topo_plan_core(p, 0, 0), 4);
    assert_int_equal(pc_topo_plan_core(p, 0, 1), 5);
    assert_int_equal(pc_topo_plan_core(p, 1, 0), 6);
    assert_int_equal(pc_topo_plan_core(p, 1, 1), 7);
    for (int r = 0; r < 2; r++)
        for (int th = 0; th < 2; th++)
            assert_true(pc_topo_plan_near(p, r, th));
    assert_false(pc_topo_plan_near(p, 2, 0)); /* out of range */
    assert_int_equal(pc_topo_plan_nshared(p), 0);
    char d[512];
    pc_topo_plan_describe(p, d, sizeof(d));
    assert_string_equal(d, "placement: 4 threads of 2 ranks on 8 cores; one core each; near GPU: "
                           "r0 cuda:0 {backprop 4, compressor 5} r1 cuda:1 {backprop 6, "
                           "compressor 7}");
    pc_topo_plan_destroy(p);

    /* The same ranks without near sets: the plan of today, cores 0-3. */
    fill_ranks(t, ranks, 2, 2, NULL);
    p = plan(t, "auto", ranks, 2);
    for (int r = 0; r < 2; r++)
        for (int th = 0; th < 2; th++) {
            assert_int_equal(pc_topo_plan_core(p, r, th), r * 2 + th);
            assert_false(pc_topo_plan_near(p, r, th));
        }
    pc_topo_plan_describe(p, d, sizeof(d));
    assert_string_equal(d, "placement: 4 threads of 2 ranks on 8 cores; one core each");
    pc_topo_plan_destroy(p);
    pc_topo_destroy(t);
}

/* A GPU whose locality the topology does not know (near = "") is still named, in the
 * bound and the unbound description; the plan is that of ranks without GPUs. */
static void test_gpu_locality_unknown(void **state)
{
    (void)state;
    pc_topo_t *t = load("pack:2 core:4 pu:1");
    pc_topo_rank_t ranks[2];
    fill_ranks(t, ranks, 2, 2, NULL);
    set_near(&ranks[0], "", "cuda:0");
    set_near(&ranks[1], "", "cuda:1");
    pc_topo_plan_t *p = plan(t, "auto", ranks, 2);
    for (int r = 0; r < 2; r++)
        for (int th = 0; th < 2; th++) {
            assert_int_equal(pc_topo_plan_core(p, r, th), r * 2 + th);
            assert_false(pc_topo_plan_near(p, r, th));
        }
    char d[512];
    pc_topo_plan_describe(p, d, sizeof(d));
    assert_string_equal(d, "placement: 4 threads of 2 ranks on 8 cores; one core each; GPU "
                           "(locality unknown): r0 cuda:0 r1 cuda:1");
    pc_topo_plan_destroy(p);
    p = plan(t, "none", ranks, 2);
    pc_topo_plan_describe(p, d, sizeof(d));
    assert_string_equal(d, "placement: 4 threads unbound (--bind none); GPU: r0 cuda:0 r1 cuda:1");
    pc_topo_plan_destroy(p);
    pc_topo_destroy(t);
}

/* GPU ranks claim their cores first; the others take the lowest free cores in local-rank
 * order (a server among them), without a near set of their own. */
static void test_near_mixed_with_plain_ranks(void **state)
{
    (void)state;
    pc_topo_t *t = load("pack:2 core:4 pu:1");
    pc_topo_rank_t ranks[4];
    fill_ranks(t, ranks, 3, 2, NULL);
    assert_int_equal(pc_topo_self(t, 3, 1, server_names, &ranks[3]), PC_OK);
    set_near(&ranks[0], "4-7", "cuda:0");
    set_near(&ranks[2], "0-3", ""); /* unnamed: "GPU" */
    pc_topo_plan_t *p = plan(t, "auto", ranks, 4);
    assert_int_equal(pc_topo_plan_core(p, 0, 0), 4);
    assert_int_equal(pc_topo_plan_core(p, 0, 1), 5);
    assert_int_equal(pc_topo_plan_core(p, 2, 0), 0);
    assert_int_equal(pc_topo_plan_core(p, 2, 1), 1);
    assert_int_equal(pc_topo_plan_core(p, 1, 0), 2); /* no GPU: lowest free */
    assert_int_equal(pc_topo_plan_core(p, 1, 1), 3);
    assert_int_equal(pc_topo_plan_core(p, 3, 0), 6);
    assert_false(pc_topo_plan_near(p, 1, 0));
    assert_false(pc_topo_plan_near(p, 3, 0));
    char d[512];
    pc_topo_plan_describe(p, d, sizeof(d));
    assert_string_equal(d,
                        "placement: 7 threads of 4 ranks on 8 cores; one core each; near GPU: "
                        "r0 cuda:0 {backprop 4, compressor 5} r2 GPU {backprop 0, compressor 1}");
    pc_topo_plan_destroy(p);
    pc_topo_destroy(t);
}

/* Fewer free cores near the GPU than threads: the first threads get them, the rest fall
 * back to the lowest free cores, and the description says which are far. */
static void test_near_set_too_small(void **state)
{
    (void)state;
    pc_topo_t *t = load("pack:2 core:4 pu:1");
    pc_topo_rank_t ranks[2];
    fill_ranks(t, ranks, 2, 2, NULL);
    set_near(&ranks[0], "4", "cuda:0"); /* one core near the GPU */
    pc_topo_plan_t *p = plan(t, "auto", ranks, 2);
    assert_int_equal(pc_topo_plan_core(p, 0, 0), 4);
    assert_true(pc_topo_plan_near(p, 0, 0));
    assert_int_equal(pc_topo_plan_core(p, 0, 1), 0); /* fallback: lowest free */
    assert_false(pc_topo_plan_near(p, 0, 1));
    assert_int_equal(pc_topo_plan_core(p, 1, 0), 1);
    assert_int_equal(pc_topo_plan_core(p, 1, 1), 2);
    char d[512];
    pc_topo_plan_describe(p, d, sizeof(d));
    assert_string_equal(d, "placement: 4 threads of 2 ranks on 8 cores; one core each; near GPU: "
                           "r0 cuda:0 {backprop 4, compressor 0 far}; 1 thread not near its GPU");
    pc_topo_plan_destroy(p);

    /* Two GPU ranks sharing three near cores: local rank 0 first. */
    set_near(&ranks[0], "5-7", "cuda:0");
    set_near(&ranks[1], "5-7", "cuda:1");
    p = plan(t, "auto", ranks, 2);
    assert_int_equal(pc_topo_plan_core(p, 0, 0), 5);
    assert_int_equal(pc_topo_plan_core(p, 0, 1), 6);
    assert_int_equal(pc_topo_plan_core(p, 1, 0), 7);
    assert_int_equal(pc_topo_plan_core(p, 1, 1), 0);
    pc_topo_plan_describe(p, d, sizeof(d));
    assert_non_null(strstr(d, "r1 cuda:1 {backprop 7, compressor 0 far}; 1 thread not near"));
    pc_topo_plan_destroy(p);

    /* A near set outside the topology, or outside the rank's launcher cpuset: advice that
     * cannot be followed, no error; the usual plan, every thread far. */
    set_near(&ranks[0], "100-101", "cuda:0");
    set_near(&ranks[1], "", "");
    p = plan(t, "auto", ranks, 2);
    assert_int_equal(pc_topo_plan_core(p, 0, 0), 0);
    assert_int_equal(pc_topo_plan_core(p, 0, 1), 1);
    assert_false(pc_topo_plan_near(p, 0, 0));
    pc_topo_plan_describe(p, d, sizeof(d));
    assert_non_null(strstr(d, "r0 cuda:0 {backprop 0 far, compressor 1 far}; 2 threads not near "
                              "their GPU"));
    pc_topo_plan_destroy(p);
    const char *const confined[] = {"0-3", "0-3"};
    fill_ranks(t, ranks, 2, 2, confined);
    set_near(&ranks[1], "4-7", "cuda:1");
    p = plan(t, "auto", ranks, 2);
    assert_int_equal(pc_topo_plan_core(p, 0, 0), 0); /* nothing near inside 0-3: as usual */
    assert_int_equal(pc_topo_plan_core(p, 1, 0), 2);
    assert_int_equal(pc_topo_plan_core(p, 1, 1), 3);
    assert_false(pc_topo_plan_near(p, 1, 0));
    pc_topo_plan_destroy(p);

    /* Unreadable: an error naming the rank, like an unreadable cpuset. */
    fill_ranks(t, ranks, 2, 2, NULL);
    set_near(&ranks[1], "four-seven", "cuda:1");
    pc_bind_t bind = {.mode = PC_BIND_AUTO};
    pc_topo_plan_t *none = NULL;
    char err[256];
    assert_int_equal(pc_topo_plan_create(t, &bind, ranks, 2, &none, err, sizeof(err)), PC_ETOPO);
    assert_string_equal(err, "rank 1: unreadable GPU cpuset 'four-seven'");
    memset(ranks[1].near, 'x', sizeof(ranks[1].near)); /* unterminated bytes */
    assert_int_equal(pc_topo_plan_create(t, &bind, ranks, 2, &none, err, sizeof(err)), PC_ETOPO);
    assert_null(none);
    pc_topo_destroy(t);
}

/* Fewer cores than threads: a GPU rank's backprop takes the least-loaded core near its
 * GPU; its compressor still avoids its own backprop's core. */
static void test_near_short_of_cores(void **state)
{
    (void)state;
    pc_topo_t *t = load("pack:2 core:1 pu:1");
    pc_topo_rank_t ranks[2];
    fill_ranks(t, ranks, 2, 2, NULL);
    pc_topo_plan_t *p = plan(t, "auto", ranks, 2); /* without a GPU: r0 0,1; r1 1,0 */
    assert_int_equal(pc_topo_plan_core(p, 0, 0), 0);
    assert_int_equal(pc_topo_plan_core(p, 1, 0), 1);
    pc_topo_plan_destroy(p);
    set_near(&ranks[0], "1", "cuda:0");
    p = plan(t, "auto", ranks, 2);
    assert_int_equal(pc_topo_plan_core(p, 0, 0), 1);
    assert_true(pc_topo_plan_near(p, 0, 0));
    assert_int_equal(pc_topo_plan_core(p, 1, 0), 0);
    assert_int_equal(pc_topo_plan_core(p, 0, 1), 0); /* not on its own backprop's core */
    assert_false(pc_topo_plan_near(p, 0, 1));
    assert_int_equal(pc_topo_plan_core(p, 1, 1), 1);
    char d[512];
    pc_topo_plan_describe(p, d, sizeof(d));
    assert_string_equal(d, "placement: 4 threads of 2 ranks on 2 cores; fewer cores than threads, "
                           "sharing: core 0 {r0.compressor r1.backprop} core 1 {r0.backprop "
                           "r1.compressor}; near GPU: r0 cuda:0 {backprop 1, compressor 0 far}; "
                           "1 thread not near its GPU");
    pc_topo_plan_destroy(p);
    pc_topo_destroy(t);
}

/* An explicit --bind list is obeyed as written, near or not; --bind none binds nothing. */
static void test_bind_list_overrides_near(void **state)
{
    (void)state;
    pc_topo_t *t = load("pack:2 core:4 pu:1");
    pc_topo_rank_t ranks[2];
    fill_ranks(t, ranks, 2, 2, NULL);
    set_near(&ranks[0], "4-7", "cuda:0");
    set_near(&ranks[1], "4-7", "cuda:1");
    pc_topo_plan_t *p = plan(t, "0,1,6,7", ranks, 2);
    assert_int_equal(pc_topo_plan_core(p, 0, 0), 0);
    assert_int_equal(pc_topo_plan_core(p, 0, 1), 1);
    assert_int_equal(pc_topo_plan_core(p, 1, 0), 6);
    assert_int_equal(pc_topo_plan_core(p, 1, 1), 7);
    assert_false(pc_topo_plan_near(p, 0, 0));
    assert_true(pc_topo_plan_near(p, 1, 1));
    char d[512];
    pc_topo_plan_describe(p, d, sizeof(d));
    assert_non_null(strstr(d, "near GPU: r0 cuda:0 {backprop 0 far, compressor 1 far} r1 cuda:1 "
                              "{backprop 6, compressor 7}; 2 threads not near their GPU"));
    pc_topo_plan_destroy(p);
    p = plan(t, "none", ranks, 2);
    assert_int_equal(pc_topo_plan_core(p, 0, 0), -1);
    assert_false(pc_topo_plan_near(p, 0, 0));
    pc_topo_plan_describe(p, d, sizeof(d));
    assert_string_equal(d, "placement: 4 threads unbound (--bind none); GPU: r0 cuda:0 r1 cuda:1");
    pc_topo_plan_destroy(p);
    pc_topo_destroy(t);
}

/* Bus ids: what is not one is PC_EINVAL; a synthetic topology knows no device. */
static void test_pci_busid_errors(void **state)
{
    (void)state;
    pc_topo_t *t = load("pack:2 core:4 pu:1");
    char set[PC_TOPO_CPUSET_LEN] = "junk", err[256];
    assert_int_equal(pc_topo_pci_cpuset(t, "0000:3b:00.0", set, sizeof(set), err, sizeof(err)),
                     PC_ENOENT);
    assert_string_equal(set, "");
    assert_string_equal(err, "PCI device 0000:3b:00.0: a synthetic topology has no I/O devices");
    assert_int_equal(pc_topo_pci_cpuset(t, "3B:1f.7", set, sizeof(set), err, sizeof(err)),
                     PC_ENOENT);
    const char *const bad[] = {"",
                               "3b",
                               "3b:00",
                               "3b.00.0",
                               "0000:3b:00.0 ",
                               " 0000:3b:00.0",
                               "0000:3b:00.00",
                               "0000:3b:00.8",
                               "0000:3b:20.0",
                               "0000:13b:00.0",
                               "123456789:3b:00.0",
                               "0000:0000:3b:00.0",
                               "0x3b:00.0",
                               "0000:3g:00.0",
                               "0000:3b:00.0\n",
                               "0000:-1:00.0"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        strcpy(set, "junk");
        int rc = pc_topo_pci_cpuset(t, bad[i], set, sizeof(set), err, sizeof(err));
        if (rc != PC_EINVAL)
            fail_msg("bus id '%s': %s, expected EINVAL", bad[i], pc_errname(rc));
        assert_string_equal(set, "");
        assert_non_null(strstr(err, "is not a PCI bus id like 0000:3b:00.0"));
    }
    assert_int_equal(pc_topo_pci_cpuset(t, NULL, set, sizeof(set), err, sizeof(err)), PC_EINVAL);
    assert_int_equal(pc_topo_pci_cpuset(t, "3b:00.0", NULL, 0, err, sizeof(err)), PC_EINVAL);
    pc_topo_destroy(t);
}

/* A plain hwloc load of this machine (default filters: no I/O objects), for reference. */
static hwloc_topology_t load_reference(bool io)
{
    hwloc_topology_t h;
    assert_int_equal(hwloc_topology_init(&h), 0);
    if (io) { /* the filters pc_topo_create sets */
        assert_int_equal(hwloc_topology_set_io_types_filter(h, HWLOC_TYPE_FILTER_KEEP_IMPORTANT),
                         0);
        assert_int_equal(
            hwloc_topology_set_type_filter(h, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_NONE), 0);
#if HWLOC_API_VERSION >= 0x00020100
        assert_int_equal(
            hwloc_topology_set_components(h, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci"), 0);
#endif
    }
    assert_int_equal(hwloc_topology_load(h), 0);
    return h;
}

/* This machine's PCI devices (/sys/bus/pci/devices): those hwloc keeps give a non-empty
 * cpuset inside the topology, in any spelling of the bus id; the others are PC_ENOENT. */
static void test_pci_cpuset_real(void **state)
{
    (void)state;
    pc_topo_t *t = load(NULL);
    hwloc_topology_t ref = load_reference(false);
    hwloc_bitmap_t got = hwloc_bitmap_alloc();
    assert_non_null(got);
    char set[PC_TOPO_CPUSET_LEN], again[PC_TOPO_CPUSET_LEN], err[256],
        first[sizeof(((struct dirent *)0)->d_name)] = "";
    int found = 0, absent = 0;
    DIR *d = opendir("/sys/bus/pci/devices");
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        int rc = pc_topo_pci_cpuset(t, e->d_name, set, sizeof(set), err, sizeof(err));
        if (rc == PC_ENOENT) {
            absent++;
            assert_string_equal(set, "");
            continue;
        }
        if (rc != PC_OK)
            fail_msg("%s: %s: %s", e->d_name, pc_errname(rc), err);
        found++;
        assert_int_equal(hwloc_bitmap_list_sscanf(got, set), 0);
        assert_false(hwloc_bitmap_iszero(got));
        assert_true(hwloc_bitmap_isincluded(got, hwloc_topology_get_complete_cpuset(ref)));
        if (!first[0])
            snprintf(first, sizeof(first), "%s", e->d_name);
        /* Upper case, and without the domain when it is 0000: the same answer. */
        char upper[sizeof(e->d_name)];
        snprintf(upper, sizeof(upper), "%s", e->d_name);
        for (char *c = upper; *c; c++)
            *c = (char)toupper((unsigned char)*c);
        assert_int_equal(pc_topo_pci_cpuset(t, upper, again, sizeof(again), err, sizeof(err)),
                         PC_OK);
        assert_string_equal(again, set);
        if (strncmp(e->d_name, "0000:", 5) == 0) {
            assert_int_equal(
                pc_topo_pci_cpuset(t, e->d_name + 5, again, sizeof(again), err, sizeof(err)),
                PC_OK);
            assert_string_equal(again, set);
        }
    }
    if (d)
        closedir(d);
    print_message("PCI devices: %d with a cpuset, %d unknown to hwloc\n", found, absent);
    /* No such device (the last function of the last bus of domain ffff). */
    assert_int_equal(pc_topo_pci_cpuset(t, "ffff:ff:1f.7", set, sizeof(set), err, sizeof(err)),
                     PC_ENOENT);
    assert_non_null(strstr(err, "is not in hwloc's topology"));
    if (found > 0) { /* a buffer too small for the answer */
        assert_int_equal(pc_topo_pci_cpuset(t, first, set, 1, err, sizeof(err)), PC_ERANGE);
        assert_string_equal(set, "");
    }
    hwloc_bitmap_free(got);
    hwloc_topology_destroy(ref);
    pc_topo_destroy(t);
    if (found == 0)
        skip(); /* no PCI device hwloc knows here: nothing more to check */
}

/* Loading I/O objects changes nothing pc_topo counts: cores and PUs as a plain load (and
 * as hwloc-calc, or within sysconf's online CPUs), same allowed and complete cpusets. */
static void test_real_counts_with_io(void **state)
{
    (void)state;
    pc_topo_t *t = load(NULL);
    hwloc_topology_t plain = load_reference(false), io = load_reference(true);
    assert_int_equal(pc_topo_ncores(t), hwloc_get_nbobjs_by_type(plain, HWLOC_OBJ_CORE));
    assert_int_equal(pc_topo_npus(t), hwloc_get_nbobjs_by_type(plain, HWLOC_OBJ_PU));
    assert_int_equal(hwloc_get_nbobjs_by_type(io, HWLOC_OBJ_CORE),
                     hwloc_get_nbobjs_by_type(plain, HWLOC_OBJ_CORE));
    assert_true(hwloc_bitmap_isequal(hwloc_topology_get_allowed_cpuset(io),
                                     hwloc_topology_get_allowed_cpuset(plain)));
    assert_true(hwloc_bitmap_isequal(hwloc_topology_get_complete_cpuset(io),
                                     hwloc_topology_get_complete_cpuset(plain)));
    assert_int_equal(hwloc_get_nbobjs_by_type(io, HWLOC_OBJ_OS_DEVICE), 0);
    /* The command-line tool, where installed; else the kernel's count bounds the PUs. */
    FILE *f = popen("hwloc-calc --number-of core all 2>/dev/null && "
                    "hwloc-calc --number-of pu all 2>/dev/null",
                    "r");
    int cores = -1, pus = -1;
    if (f) {
        if (fscanf(f, "%d %d", &cores, &pus) != 2)
            cores = pus = -1;
        pclose(f);
    }
    if (cores > 0) {
        assert_int_equal(pc_topo_ncores(t), cores);
        assert_int_equal(pc_topo_npus(t), pus);
    } else {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        print_message("no hwloc-calc: checking against %ld online CPUs\n", online);
        assert_true(pc_topo_npus(t) >= 1 && pc_topo_npus(t) <= online);
        assert_true(pc_topo_ncores(t) >= 1 && pc_topo_ncores(t) <= pc_topo_npus(t));
    }
    hwloc_topology_destroy(plain);
    hwloc_topology_destroy(io);
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
        cmocka_unit_test(test_near_gpu_package),
        cmocka_unit_test(test_near_mixed_with_plain_ranks),
        cmocka_unit_test(test_near_set_too_small),
        cmocka_unit_test(test_near_short_of_cores),
        cmocka_unit_test(test_gpu_locality_unknown),
        cmocka_unit_test(test_bind_list_overrides_near),
        cmocka_unit_test(test_pci_busid_errors),
        cmocka_unit_test(test_pci_cpuset_real),
        cmocka_unit_test(test_real_counts_with_io),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
