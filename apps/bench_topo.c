/* pc-bench topo: under mpirun, split ranks into workers and servers as pc-train will,
 * plan every node's thread placement, have each thread bind itself and verify, and print
 * one line per rank (gathered to rank 0, in rank order). The MPI smoke test and the demo
 * run it. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#include <pthread.h>

#include "bench.h"
#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_config.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_log.h"
#include "pipecompress/pc_topo.h"

#define LINE_LEN 256

static const char *const worker_threads[] = {"backprop", "compressor"};
static const char *const server_threads[] = {"server"};

typedef struct bind_arg {
    pc_topo_t *topo;
    pc_topo_plan_t *plan;
    int lrank, thread, rc;
    char err[256];
} bind_arg_t;

static void *bind_main(void *p)
{
    bind_arg_t *a = p;
    a->rc = pc_topo_plan_bind(a->topo, a->plan, a->lrank, a->thread, a->err, sizeof(a->err));
    return NULL;
}

/* Every rank calls this with its verdict; returns the exit status all ranks agree on. */
static int agree(int status)
{
    int worst = status;
    MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

/* Start this rank's threads (nthreads: a server's one, a worker's two), each binding itself
 * to its planned place and checking it (bind_main), and write the rank's line: its role,
 * each thread's core (or unbound) and the verdict. 0, or BENCH_EXIT_FAIL with the failures
 * logged. */
static int bind_threads(pc_topo_t *topo, pc_topo_plan_t *plan, int lrank, int rank, bool server,
                        pc_log_t *log, char line[LINE_LEN])
{
    int nthreads = server ? 1 : 2, status = 0;
    const char *const *names = server ? server_threads : worker_threads;
    bind_arg_t args[PC_TOPO_MAX_THREADS];
    pthread_t th[PC_TOPO_MAX_THREADS];
    int len = snprintf(line, LINE_LEN, "rank %d %s", rank, server ? "server" : "worker");
    for (int t = 0; t < nthreads; t++) {
        args[t] = (bind_arg_t){.topo = topo, .plan = plan, .lrank = lrank, .thread = t};
        if (pthread_create(&th[t], NULL, bind_main, &args[t]) != 0)
            args[t].rc = PC_ETHREAD;
    }
    for (int t = 0; t < nthreads; t++) {
        if (args[t].rc != PC_ETHREAD)
            pthread_join(th[t], NULL);
        int core = pc_topo_plan_core(plan, lrank, t);
        if (core >= 0)
            len += snprintf(line + len, LINE_LEN - (size_t)len, " %s=core%d%s", names[t], core,
                            pc_topo_plan_shared(plan, lrank, t) ? "(shared)" : "");
        else
            len += snprintf(line + len, LINE_LEN - (size_t)len, " %s=unbound", names[t]);
        if (args[t].rc != PC_OK) {
            pc_log_write(log, PC_LOG_ERROR, names[t], "%s", args[t].err);
            status = BENCH_EXIT_FAIL;
        }
    }
    snprintf(line + len, LINE_LEN - (size_t)len, "%s", status ? " FAILED" : " verified");
    return status;
}

int bench_topo_main(int argc, char **argv)
{
    int provided, rank, size;
    /* MPI_COMM_WORLD keeps MPI's default handler, MPI_ERRORS_ARE_FATAL: an MPI error in
     * this program's own calls ends the job with MPI's message (the library's communicators
     * return errors, and it checks them). */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    pc_config_t cfg;
    pc_config_defaults(&cfg);
    pc_flags_group_t g = pc_config_group(&cfg, "Runtime flags");
    char err[512] = "";
    int rc = pc_flags_parse(&g, 1, argc, argv, NULL, err, sizeof(err));
    int early = pc_flags_finish(rc, &g, 1, "pc-bench", "mpirun -np N pc-bench topo [flags]", err,
                                rank == 0, stdout, stderr);
    if (early >= 0) {
        MPI_Finalize();
        return early;
    }
    if (cfg.servers >= size) {
        if (rank == 0)
            fprintf(stderr, "pc-bench: --servers %d leaves no worker among %d ranks\n", cfg.servers,
                    size);
        MPI_Finalize();
        return BENCH_EXIT_USAGE;
    }
    pc_log_t *log = NULL;
    pc_log_create(stderr, rank, (pc_log_level_t)cfg.log_level, &log);
    if (rank == 0 && pc_log_enabled(log, PC_LOG_INFO)) {
        printf("effective configuration (%d ranks):\n", size);
        pc_flags_print(&g, 1, "  ", stdout);
        fflush(stdout);
    }
    /* Workers are ranks 0..W-1, servers the last S: rank 0 is a worker and reports. */
    int workers = size - cfg.servers;
    bool server = rank >= workers;
    int nthreads = server ? 1 : 2;
    const char *const *names = server ? server_threads : worker_threads;

    pc_bind_t bind;
    pc_topo_bind_parse(cfg.bind, &bind, err, sizeof(err)); /* validated by the parser */
    pc_topo_t *topo = NULL;
    pc_topo_plan_t *plan = NULL;
    int lrank = -1, status = 0;
    char line[LINE_LEN] = "";
    rc = pc_topo_create(NULL, &topo, err, sizeof(err));
    if (rc == PC_OK)
        rc = pc_comm_plan_node(MPI_COMM_WORLD, topo, &bind, nthreads, names, NULL, NULL, &plan,
                               &lrank, err, sizeof(err));
    if (rc != PC_OK) {
        pc_log_write(log, PC_LOG_ERROR, NULL, "placement: %s", err);
        status = rc == PC_EUSAGE ? BENCH_EXIT_USAGE : BENCH_EXIT_FAIL;
    } else {
        if (lrank == 0) {
            char d[1024];
            pc_topo_plan_describe(plan, d, sizeof(d));
            pc_log_write(log, pc_topo_plan_nshared(plan) ? PC_LOG_WARN : PC_LOG_INFO, NULL, "%s",
                         d);
        }
        status = bind_threads(topo, plan, lrank, rank, server, log, line);
    }
    char *all = rank == 0 ? malloc((size_t)size * LINE_LEN) : NULL;
    if (rank == 0 && !all) {
        fprintf(stderr, "pc-bench topo: out of memory gathering %d lines\n", size);
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_FAIL);
    }
    MPI_Gather(line, LINE_LEN, MPI_CHAR, all, LINE_LEN, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int r = 0; r < size && all; r++)
            if (all[(size_t)r * LINE_LEN])
                printf("%s\n", all + (size_t)r * LINE_LEN);
        fflush(stdout);
        free(all);
    }
    status = agree(status);
    pc_topo_plan_destroy(plan);
    pc_topo_destroy(topo);
    pc_log_destroy(log);
    MPI_Finalize();
    return status;
}
