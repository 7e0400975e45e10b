/* pc-bench: PipeCompress micro- and system benchmarks. Each subcommand measures
 * PipeCompress and its baselines side by side in one run and prints ratios.
 *   pc-bench compress [flags] every codec vs a memory-read bound and a sort-based top-k
 *   pc-bench spsc [flags]    SPSC ring vs ck_ring vs a mutex+condvar queue
 *   pc-bench handoff [flags] an idle consumer's pick-up latency and idle CPU: pc_event vs naps
 *   pc-bench topo [flags]    (under mpirun) roles and verified thread placement per rank
 *   pc-bench model [flags]   (under mpirun, 2 ranks) this machine's rates and the predicted
 *                            iteration time of the allreduce and each PS mode for W workers
 *   pc-bench engine [flags]  the training engine's throughput alone (one process)
 *   pc-bench link [flags]    (under mpirun, N even) what the links carry: rank 2i streams to
 *                            rank 2i+1, every pair at once
 *   pc-bench server [flags]  one server's CPU work per message and per iteration for W
 *                            workers' compressed gradients of a traced model (no MPI)
 * This file only dispatches: the subcommands are apps/bench_<name>.c, the helpers they
 * share apps/bench.c. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "bench.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: pc-bench BENCHMARK [flags]   (pc-bench BENCHMARK --help for its flags)\n"
            "benchmarks:\n"
            "  compress  every codec vs one read of the input and a sort-based top-k\n"
            "  spsc      pc_spsc throughput and round trip vs ck_ring and a mutex queue\n"
            "  handoff   idle consumer's pick-up latency (p50, p99) and idle CPU: pc_event\n"
            "            park vs pc_backoff naps\n"
            "  topo      under mpirun: each rank's role and verified thread placement\n"
            "  model     under mpirun (the job's ranks and nodes): measure the rates and predict\n"
            "            the iteration time of the allreduce and each PS mode for W workers\n"
            "  engine    the training engine's throughput alone: forward+backward passes of one\n"
            "            batch on the CPU or a CUDA device, one JSON line\n"
            "  link      under mpirun (an even number of ranks): rank 2i streams to rank 2i+1,\n"
            "            every pair at once; each flow's and the total Gbit/s, one JSON line\n"
            "  server    one server's CPU work (validate, aggregate, step, pull) per message and\n"
            "            per iteration for W workers' compressed gradients of a traced model\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return BENCH_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("pc-bench (PipeCompress) %s\n", PACKAGE_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "compress") == 0)
        return bench_compress_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "spsc") == 0)
        return bench_spsc_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "handoff") == 0)
        return bench_handoff_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "topo") == 0)
        return bench_topo_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "model") == 0)
        return bench_model_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "engine") == 0)
        return bench_engine_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "link") == 0)
        return bench_link_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "server") == 0)
        return bench_server_main(argc - 1, argv + 1);
    fprintf(stderr,
            "pc-bench: unknown benchmark '%s' (compress, spsc, handoff, topo, model, engine, link, "
            "server)\n",
            argv[1]);
    return BENCH_EXIT_USAGE;
}
