/* pc-bench: the benchmark subcommands (apps/bench_<name>.c, called by the dispatcher
 * apps/pc-bench.c) and the helpers they share (apps/bench.c). */
#ifndef PC_BENCH_H
#define PC_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipecompress/pc_data.h"
#include "pipecompress/pc_model.h"
#include "pipecompress/pc_topo.h"

/* Exit statuses of pc-bench: 0 ok, 1 failure while running, 2 bad usage. */
#define BENCH_EXIT_FAIL  1
#define BENCH_EXIT_USAGE 2

/* Each subcommand: argv[0] is the subcommand's name. Returns the exit status. */
int bench_compress_main(int argc, char **argv);
/* pc-bench compress's powersgd section (bench_lowrank.c): matrices "RxC,..." at ranks 1, 2
 * and 4, reps repetitions each; a table on stdout. 0, BENCH_EXIT_USAGE (a bad list or a
 * matrix the rank does not fit), BENCH_EXIT_FAIL. */
int bench_lowrank_cpu(const char *matrices, int reps);
/* The list's check alone, before anything is measured: 0 or BENCH_EXIT_USAGE (said). */
int bench_lowrank_check(const char *matrices);
/* pc-bench compress --threads N (bench_pool.c): the compressor pool on ResNet-50's tensors
 * with each of the nspecs codec specs, N threads beside 1; median of reps. 0, or
 * BENCH_EXIT_FAIL with a message on stderr. */
int bench_pool_cpu(int threads, int reps, const char *const *specs, int nspecs);
int bench_handoff_main(int argc, char **argv);
int bench_link_main(int argc, char **argv);
int bench_model_main(int argc, char **argv);
int bench_engine_main(int argc, char **argv);

/* bench_engine.c, shared with pc-bench model: the --model kind for batches of batch on the
 * CPU or CUDA device 0, built for the data's shape (ds) and initialised (seed 1); 0, or -1
 * with a message printed. */
int bench_engine_model(int model, int batch, bool cuda, const pc_dataset_t *ds, pc_model_t **out);
/* The engine's throughput: iters timed forward+backward passes of one synthetic batch, one
 * JSON line on stdout (and in json, a path, when not ""). 0, or BENCH_EXIT_FAIL with a
 * message printed. */
int bench_engine_throughput(int model, int batch, int iters, bool cuda, const char *json);
int bench_spsc_main(int argc, char **argv);
int bench_topo_main(int argc, char **argv);
int bench_server_main(int argc, char **argv);

/* The --reps row the timing benchmarks' flag tables share; TYPE is the options struct
 * with an int field reps. */
#define BENCH_OPT_REPS(TYPE)                                                                       \
    {                                                                                              \
        .name = "reps", .short_name = 'r', .type = PC_FLAGS_INT, .offset = offsetof(TYPE, reps),   \
        .min = 1, .max = 101, .metavar = "R", .help = "repetitions; medians are reported"          \
    }

/* The --chunk-bytes and --compress-min-bytes rows of the benchmarks that plan chunks as
 * pc-train does (TYPE has int64_t chunk_bytes, compress_min_bytes; MIN_BYTES_MIN is the
 * least --compress-min-bytes, -1 where it means "pc-train's default"; the helps say how the
 * values relate to pc-train's). */
#define BENCH_OPT_CHUNKING(TYPE, MIN_BYTES_MIN, CHUNK_HELP, MIN_BYTES_HELP)                        \
    {.name = "chunk-bytes",                                                                        \
     .type = PC_FLAGS_SIZE,                                                                        \
     .offset = offsetof(TYPE, chunk_bytes),                                                        \
     .min = 64,                                                                                    \
     .max = 1073741824.0,                                                                          \
     .metavar = "SIZE",                                                                            \
     .help = CHUNK_HELP},                                                                          \
    {                                                                                              \
        .name = "compress-min-bytes", .type = PC_FLAGS_SIZE,                                       \
        .offset = offsetof(TYPE, compress_min_bytes), .min = MIN_BYTES_MIN, .max = 1073741824.0,   \
        .metavar = "SIZE", .help = MIN_BYTES_HELP                                                  \
    }

/* The --model and --batch rows the engine's benchmarks share (TYPE has int model, batch;
 * MODEL_HELP and BATCH_HELP say what they mean there). */
#define BENCH_OPT_MODEL_BATCH(TYPE, MODEL_HELP, BATCH_HELP)                                        \
    {.name = "model",                                                                              \
     .short_name = 'm',                                                                            \
     .type = PC_FLAGS_CHOICE,                                                                      \
     .offset = offsetof(TYPE, model),                                                              \
     .choices = PC_MODEL_CHOICES,                                                                  \
     .help = MODEL_HELP},                                                                          \
    {                                                                                              \
        .name = "batch", .type = PC_FLAGS_INT, .offset = offsetof(TYPE, batch), .min = 1,          \
        .max = 4096, .metavar = "B", .help = BATCH_HELP                                            \
    }

/* Two threads pinned to two different cores when the machine has them: fn(arg, 0) and
 * fn(arg, 1) run concurrently after a common start barrier. Returns 0 or -1 with a message
 * printed. */
typedef struct bench_pair bench_pair_t;
int bench_pair_create(bench_pair_t **out);
void bench_pair_destroy(bench_pair_t *p);
const char *bench_pair_placement(const bench_pair_t *p);
int bench_pair_run(bench_pair_t *p, void (*fn)(void *arg, int side), void *arg);

#endif /* PC_BENCH_H */
