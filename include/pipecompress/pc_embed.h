/* pc_embed: PipeCompress inside another language's program (the Python binding,
 * python/pipecompress): one opaque handle over what pc-train's main does around the
 * runtime (MPI start-up, the runtime's flags, the log, the runtime, this rank's worker),
 * callable through a foreign-function interface that sees ints, pointers and strings: no
 * MPI type in any signature (the header itself includes mpi.h, through pc_runtime.h).
 *
 *     pc_embed_create(argc, argv, NULL, NULL, &e, &status, err, len)     every rank
 *     server rank (pc_embed_worker(e) == NULL):
 *         pc_embed_run_server(e, err, len); pc_embed_destroy(e)
 *     worker rank: pc_worker_* on pc_embed_worker(e) (pc_runtime.h), then
 *         pc_worker_finish(w); pc_embed_destroy(e)
 *
 * Threads: every call from one thread (the host program's main thread; it becomes the
 * worker's backprop thread), as pc_runtime.h requires. No global state: the handle owns
 * everything, except MPI itself, which is per process (MPI_Init_thread once, and
 * MPI_Finalize once, by the handle that started it). */
#ifndef PC_EMBED_H
#define PC_EMBED_H

#include <stddef.h>
#include <stdint.h>

#include "pipecompress/pc_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_embed pc_embed_t;

/* The run's length in iterations for `workers` workers (the program knows its data and
 * batch, the job's split of ranks is known only once MPI runs); 0 leaves --iters unset. */
typedef int64_t (*pc_embed_length_fn)(void *ud, int workers);

/* Collective over MPI_COMM_WORLD. Starts MPI with MPI_THREAD_MULTIPLE unless the process
 * already did (it must then have asked for MPI_THREAD_MULTIPLE), parses argv[1..argc)
 * with the runtime's flags (pc_config.h: pc-train's parser and messages, the runtime's
 * defaults: pc-train alone makes --lr-schedule cosine; argv[0] names the program in
 * messages; argv is not modified), checks them for
 * this job (pc_runtime_check_config; --mode auto is refused: its probe profiles pc-train's
 * built-in models), after setting --iters, when the command line did not, to
 * length(ud, workers) if length is not NULL (pc-train does the same from --epochs; a
 * cosine schedule needs it); creates the log (stderr, --log-level), the runtime on MPI_COMM_WORLD,
 * and on a worker rank its worker.
 * Returns:
 *   PC_OK with *out, the caller's (pc_embed_destroy), and *exit_status -1: run;
 *   PC_OK with *out NULL and *exit_status 0: --help or --version, printed by rank 0;
 *   PC_EUSAGE with *exit_status 2: a bad flag, "prog: message" printed by rank 0 to stderr
 *     and the message (without "prog: ") in err on every rank;
 *   in these two cases MPI is finalised if this call started it, so the caller just exits;
 *   any other error (PC_EMPI, PC_ETOPO, PC_ENOMEM, ...) with *exit_status 1 and a message
 *     in err: other ranks may be inside a collective, so the caller ends the job
 *     (pc_embed_abort);
 *   PC_EINVAL without argv[0], out or exit_status (each set when given).
 * Not thread-safe (getopt_long's state). */
int pc_embed_create(int argc, char **argv, pc_embed_length_fn length, void *ud, pc_embed_t **out,
                    int *exit_status, char *err, size_t errlen);

/* This process's rank and the job's size in MPI_COMM_WORLD; fixed. Thread-safe. */
int pc_embed_rank(const pc_embed_t *e);
int pc_embed_size(const pc_embed_t *e);

/* The runtime (borrowed: it lives until pc_embed_destroy) and this rank's worker (NULL on
 * a server rank; borrowed likewise: the caller never destroys it). */
pc_runtime_t *pc_embed_runtime(pc_embed_t *e);
pc_worker_t *pc_embed_worker(pc_embed_t *e);

/* The effective configuration (every runtime flag after the checks filled in the
 * defaults that depend on others), one "name = value" line each, as pc-train prints it.
 * Writes at most len bytes, NUL-terminated (snprintf's contract), and returns the length
 * the whole text needs (without the NUL), or a negative PC_E* code. Thread-safe. */
int pc_embed_config_text(const pc_embed_t *e, char *buf, size_t len);

/* The server loop (pc_server_run) on a server rank; PC_ESTATE on a worker rank. */
int pc_embed_run_server(pc_embed_t *e, char *err, size_t errlen);

/* Collective (as pc_runtime_destroy): frees the worker (pc_worker_destroy's rules: after
 * pc_worker_finish it only frees), the runtime and the log, then finalises MPI when
 * pc_embed_create started it. NULL: no-op. */
void pc_embed_destroy(pc_embed_t *e);

/* End every rank of the job with `status` (MPI_Abort on MPI_COMM_WORLD): for a host
 * program's error that the other ranks cannot learn of, which would otherwise leave them
 * waiting until --timeout (pc-train's die() does the same). The one library call that
 * ends the process, and only on the caller's request. Returns without doing anything when
 * MPI is not running (not initialised, or finalised): the caller then exits by itself. */
void pc_embed_abort(int status);

#ifdef __cplusplus
}
#endif
#endif /* PC_EMBED_H */
