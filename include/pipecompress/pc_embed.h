/* pc_embed: PipeCompress inside another language's program (the Python binding,
 * python/pipecompress): one opaque handle over what pc-train's main does around the
 * runtime (MPI start-up, the runtime's flags, the log, the runtime, this rank's worker),
 * callable through a foreign-function interface that sees ints, pointers and strings: no
 * MPI type in any signature (the header itself includes mpi.h, through pc_runtime.h).
 *
 *     pc_embed_create(argc, argv, NULL, NULL, &e, &status, err, len)     every rank
 *     with --mode auto (pc_embed_pending(e)), every rank:
 *         profile the model, pc_embed_choose(e, &probe, batch, err, len)
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

#include <stdbool.h>

#include "pipecompress/pc_auto.h"
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
 * this job (pc_runtime_check_config), after setting --iters, when the command line did
 * not, to length(ud, workers) if length is not NULL (pc-train does the same from
 * --epochs; a cosine schedule needs it); creates the log (stderr, --log-level), the
 * runtime on MPI_COMM_WORLD, and on a worker rank its worker. With --mode auto only what
 * auto refuses is checked (pc_auto_check) and the log created: the handle is pending
 * (pc_embed_pending) until pc_embed_choose, which does the rest; length (and ud) must stay
 * callable until then.
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

/* Whether the handle waits for pc_embed_choose (--mode auto, not chosen yet): no runtime
 * (pc_embed_runtime NULL) and no worker until then, whatever the rank's role will be.
 * Thread-safe. */
bool pc_embed_pending(const pc_embed_t *e);

/* --mode auto, collective over MPI_COMM_WORLD: every rank brings its profile of the same
 * model (probe: layers and times from the binding's hooks, the tensors in the order they
 * will be registered, rank 0's gradients as its profile's backward left them; borrowed for
 * the call) and the batch per worker; pc_auto_choose measures the link, the codecs and the
 * server and resolves the mode, rank 0 prints the figures and the choice to stdout as
 * pc-train does (pc_auto_print), then pc_embed_create's remaining steps run: the run
 * length, the runtime's checks, the runtime and this rank's worker. PC_OK: the handle is
 * no longer pending and pc_embed_auto_flags holds the choice. Errors: PC_ESTATE (not
 * pending), PC_EINVAL (no probe, batch < 1), pc_auto_choose's (the same code on every
 * rank), a check's PC_EUSAGE, or the runtime's; the message in err; the handle then stays
 * pending and unchanged (the caller ends the job: another rank may have gone on). */
int pc_embed_choose(pc_embed_t *e, const pc_auto_probe_t *probe, int batch, char *err,
                    size_t errlen);

/* The flags --mode auto chose, as fixed flags that give the same run without the probe
 * ("--mode ps --servers 1 --compress ..."); "" when the run did not use --mode auto.
 * Borrowed (lives as long as e). Thread-safe after pc_embed_choose. */
const char *pc_embed_auto_flags(const pc_embed_t *e);

/* This process's rank and the job's size in MPI_COMM_WORLD; fixed. Thread-safe. */
int pc_embed_rank(const pc_embed_t *e);
int pc_embed_size(const pc_embed_t *e);

/* The runtime (borrowed: it lives until pc_embed_destroy; NULL while pending) and this
 * rank's worker (NULL on a server rank and while pending; borrowed likewise: the caller
 * never destroys it). */
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
