/* test_comm: under mpirun, every rank of the node gets the same placement plan, worker
 * threads get distinct cores whenever the node has enough, each thread binds and verifies,
 * every rank learns every rank's host name, and MPI errors come back as PC_EMPI with a
 * message. Run by tests/mpi/test_comm.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>
#include <mpi.h>

#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_topo.h"

static const char *const names[] = {"backprop", "compressor"};

typedef struct bind_arg {
    pc_topo_t *topo;
    pc_topo_plan_t *plan;
    int local_rank;
    int thread;
    int rc;
    char err[256];
} bind_arg_t;

static void *bind_thread(void *p)
{
    bind_arg_t *a = p;
    a->rc = pc_topo_plan_bind(a->topo, a->plan, a->local_rank, a->thread, a->err, sizeof(a->err));
    return NULL;
}

static void test_plan_and_bind(void **state)
{
    (void)state;
    char err[256] = "";
    pc_topo_t *topo;
    assert_int_equal(pc_topo_create(NULL, &topo, err, sizeof(err)), PC_OK);
    pc_bind_t bind = {.mode = PC_BIND_AUTO};
    pc_topo_plan_t *plan = NULL;
    int lrank = -1, size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int rc = pc_comm_plan_node(MPI_COMM_WORLD, topo, &bind, 2, names, NULL, NULL, &plan, &lrank,
                               err, sizeof(err));
    if (rc != PC_OK)
        fail_msg("plan: %s", err);
    assert_true(lrank >= 0 && lrank < size);
    /* Every rank computed the same plan: compare all cores against rank 0's. */
    int mine[64], root[64];
    int n = 0;
    for (int r = 0; r < size && n + 2 <= 64; r++)
        for (int t = 0; t < 2; t++)
            mine[n++] = pc_topo_plan_core(plan, r, t);
    memcpy(root, mine, sizeof(int) * (size_t)n);
    MPI_Bcast(root, n, MPI_INT, 0, MPI_COMM_WORLD);
    assert_memory_equal(mine, root, sizeof(int) * (size_t)n);
    int ncores = pc_topo_ncores(topo);
    if (2 * size <= ncores)
        assert_int_equal(pc_topo_plan_nshared(plan), 0);
    else
        assert_true(pc_topo_plan_nshared(plan) > 0);
    if (lrank == 0) {
        char d[512];
        pc_topo_plan_describe(plan, d, sizeof(d));
        fprintf(stderr, "%s\n", d);
    }
    /* Each of this rank's two threads binds itself and verifies. */
    bind_arg_t args[2];
    pthread_t th[2];
    for (int t = 0; t < 2; t++) {
        args[t] = (bind_arg_t){.topo = topo, .plan = plan, .local_rank = lrank, .thread = t};
        assert_int_equal(pthread_create(&th[t], NULL, bind_thread, &args[t]), 0);
    }
    for (int t = 0; t < 2; t++) {
        pthread_join(th[t], NULL);
        if (args[t].rc != PC_OK)
            fail_msg("bind %s: %s", names[t], args[t].err);
    }
    pc_topo_plan_destroy(plan);
    pc_topo_destroy(topo);
}

/* A bad --bind list fails on every rank with the same message, not a hang. */
static void test_bad_list_fails_everywhere(void **state)
{
    (void)state;
    char err[256] = "";
    pc_topo_t *topo;
    assert_int_equal(pc_topo_create(NULL, &topo, err, sizeof(err)), PC_OK);
    pc_bind_t bind = {.mode = PC_BIND_LIST, .ncores = 1, .cores = {0}};
    pc_topo_plan_t *plan = NULL;
    int lrank;
    assert_int_equal(pc_comm_plan_node(MPI_COMM_WORLD, topo, &bind, 2, names, NULL, NULL, &plan,
                                       &lrank, err, sizeof(err)),
                     PC_EUSAGE);
    assert_non_null(strstr(err, "--bind: the list names 1 cores"));
    assert_null(plan);
    pc_topo_destroy(topo);
}

/* pc_comm_hosts: every rank's name in rank order, NUL-terminated; one host here. */
static void test_hosts(void **state)
{
    (void)state;
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *hosts = malloc((size_t)size * PC_COMM_HOST_LEN), me[PC_COMM_HOST_LEN] = {0}, err[256];
    assert_non_null(hosts);
    memset(hosts, 'x', (size_t)size * PC_COMM_HOST_LEN);
    assert_int_equal(gethostname(me, sizeof(me) - 1), 0);
    assert_int_equal(pc_comm_hosts(MPI_COMM_WORLD, hosts, err, sizeof(err)), PC_OK);
    for (int r = 0; r < size; r++) {
        assert_int_equal(hosts[(size_t)r * PC_COMM_HOST_LEN + PC_COMM_HOST_LEN - 1], '\0');
        assert_string_equal(hosts + (size_t)r * PC_COMM_HOST_LEN, me);
    }
    free(hosts);
}

/* pc_comm_agree: nobody failed, PC_OK and the message left alone; the last ranks failed
 * with messages of their own, every rank gets the lowest one's code, rank and message. */
static void test_agree(void **state)
{
    (void)state;
    int rank = 0, size = 0, who = 7;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char msg[PC_COMM_AGREE_LEN] = "untouched";
    assert_int_equal(pc_comm_agree(MPI_COMM_WORLD, PC_OK, msg, sizeof(msg), &who), PC_OK);
    assert_string_equal(msg, "untouched");
    int first = size > 1 ? 1 : 0; /* ranks first.. fail, each with its own reason */
    int rc = rank >= first ? (rank == first ? PC_EIO : PC_ENOMEM) : PC_OK;
    if (rc != PC_OK)
        snprintf(msg, sizeof(msg), "rank %d's reason", rank);
    assert_int_equal(pc_comm_agree(MPI_COMM_WORLD, rc, msg, sizeof(msg), &who), PC_EIO);
    assert_int_equal(who, first);
    char want[64];
    snprintf(want, sizeof(want), "rank %d's reason", first);
    assert_string_equal(msg, want);
    /* A short buffer on every rank: the message cut, NUL-terminated. */
    char small[8] = "";
    if (rank == first)
        snprintf(small, sizeof(small), "abcdefg");
    assert_int_equal(
        pc_comm_agree(MPI_COMM_WORLD, rank == first ? PC_EIO : PC_OK, small, sizeof(small), NULL),
        PC_EIO);
    assert_string_equal(small, "abcdefg");
}

static void test_mpi_error_mapped(void **state)
{
    (void)state;
    char err[512] = "";
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int x = 0;
    int rc = PC_MPI_CHECK(MPI_Send(&x, 1, MPI_INT, 99999, 0, MPI_COMM_WORLD), err, sizeof(err));
    assert_int_equal(rc, PC_EMPI);
    assert_non_null(strstr(err, "MPI_Send"));
    assert_non_null(strstr(err, "test_comm.c:"));
    assert_int_equal(PC_MPI_CHECK(MPI_SUCCESS, err, sizeof(err)), PC_OK);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_and_bind),
        cmocka_unit_test(test_bad_list_fails_everywhere),
        cmocka_unit_test(test_hosts),
        cmocka_unit_test(test_agree),
        cmocka_unit_test(test_mpi_error_mapped),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    /* Any rank's failure fails the job. */
    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any;
}
