/* runtime_impl.h: the runtime object and what workers and servers share besides the
 * protocol (private to the library): communicators, roles, thread placement, metrics,
 * timeline tracks, checkpoint files. This is the MPI side; the messages themselves (tags,
 * encoders, validators) are in runtime_proto.h, which has no MPI. */
#ifndef PC_RUNTIME_IMPL_H
#define PC_RUNTIME_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "pipecompress/pc_ckpt.h"
#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_gpu.h"
#include "pipecompress/pc_config.h"
#include "pipecompress/pc_log.h"
#include "pipecompress/pc_optim.h"
#include "pipecompress/pc_runtime.h"
#include "pipecompress/pc_time.h"
#include "pipecompress/pc_timeline.h"
#include "pipecompress/pc_topo.h"
#include "pipecompress/pc_wire.h"
#include "runtime_proto.h"
#include "runtime_server.h"

/* Library-private: hidden in libpipecompress.so (its version script exports pc_*, and these
 * pc_rt__ names would match it). */
#pragma GCC visibility push(hidden)

struct pc_runtime {
    pc_config_t cfg;
    pc_codec_spec_t spec;
    pc_optim_cfg_t optim;
    MPI_Comm comm;        /* dup of the user's communicator, MPI_ERRORS_RETURN */
    MPI_Comm workers;     /* the workers only (the MPI thread's collectives); MPI_COMM_NULL on
                             servers */
    MPI_Comm workers_ctl; /* a dup of workers for the backprop thread's collectives: two
                             threads must not run collectives on one communicator */
    MPI_Comm servers;     /* the servers only (the server thread's: clipping's exchange);
                             MPI_COMM_NULL on workers */
    int rank, size, nworkers, nservers;
    pc_role_t role;
    pc_log_t *log;
    pc_log_t *own_log; /* created when the caller gave none */
    pc_topo_t *topo;
    pc_topo_plan_t *place;
    int ncomp; /* workers: compressor threads (--compressors, auto resolved at placement);
                  placement slots 1..ncomp; 0 with --pipeline off and on servers */
    int local_rank;
    pc_gpu_t *gpu; /* workers with --device cuda|emulate: this rank's device (its streams
                      and events are the worker's); NULL otherwise */
    volatile sig_atomic_t *stop_flag;
    char *metrics; /* JSON lines of this rank */
    size_t metrics_len, metrics_cap;
    pc_timeline_t *tl;   /* --timeline: tracks 0 (backprop or server) and 1.. (compressors) */
    uint64_t model_hash; /* workers: hash of the tensors and chunk plan (checkpoint manifests) */
    /* Receive buffers of the rank-wide collectives, rt->size entries each, allocated at
     * creation so that no rank can run out of memory and skip a collective the others are
     * in: the outcomes of pc_rt__ckpt_finish (CKPT_OUTCOME_BYTES each), and the counts and
     * displacements of the metrics and timeline gather. Only the thread that runs those
     * collectives (the backprop thread, or the server thread) uses them. */
    void *ckpt_outcomes;
    int *gather_counts, *gather_displs;
    /* Every rank's host name (PC_COMM_HOST_LEN bytes each, gathered at creation), for the
     * messages that name a peer: on several nodes, which node stopped answering. Read-only
     * after creation: any thread. */
    char *hosts;
    int stop_signal; /* the signal all ranks agreed to stop on (0: none); workers: set by
                        the backprop thread in iteration_end, which also sends TAG_DONE
                        (finish, after joining the compressor threads); servers: from
                        TAG_DONE */
};

/* Timeline tracks. */
#define TRACK_MAIN       0
#define TRACK_COMPRESSOR 1 /* compressor thread k's: TRACK_COMPRESSOR + k */

/* Record an event on a track (no-op without --timeline); name is copied. Only the track's
 * thread may call it (pc_timeline_event). */
static inline void pc_rt__trace(pc_runtime_t *rt, int track, const char *name, int64_t t0,
                                int64_t t1)
{
    if (rt->tl)
        pc_timeline_event(rt->tl, track, name, t0, t1);
}

/* pc_rt__trace with a printf-style name (cut to PC_TIMELINE_NAME_LEN - 1 bytes, as
 * pc_timeline_event cuts any name). Without --timeline it returns before formatting: the
 * per-chunk events of the compressor and server loops cost no string then. Only the
 * track's thread may call it. */
void pc_rt__tracef(pc_runtime_t *rt, int track, int64_t t0, int64_t t1, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Whether a chunk of n elements travels uncompressed (--compress-min-bytes). Workers and
 * servers decide alike from the chunk's size. Thread-safe. */
static inline bool pc_rt__chunk_dense(const pc_runtime_t *rt, size_t n)
{
    return (int64_t)(n * sizeof(float)) < rt->cfg.compress_min_bytes;
}

/* Whether a chunk of n elements with `rows` rows (a whole matrix's, pc_plan; 0 for any
 * other chunk) is a powersgd matrix: the run's codec is powersgd, the chunk is not under
 * --compress-min-bytes, and its factors pay (pc_codec_lowrank_fits). Workers and servers
 * decide alike from the layout. Thread-safe. */
static inline bool pc_rt__chunk_lowrank(const pc_runtime_t *rt, size_t rows, size_t n)
{
    return rt->spec.id == PC_CODEC_POWERSGD && !pc_rt__chunk_dense(rt, n) &&
           pc_codec_lowrank_fits(&rt->spec, rows, n);
}

/* Whether the chunk travels with the dense codec (none): under --compress-min-bytes, or in
 * a powersgd run anything that is not one of its matrices (vectors, small or odd tensors,
 * as torch's hook sends them uncompressed). Thread-safe. */
static inline bool pc_rt__chunk_plain(const pc_runtime_t *rt, size_t rows, size_t n)
{
    return pc_rt__chunk_dense(rt, n) ||
           (rt->spec.id == PC_CODEC_POWERSGD && !pc_rt__chunk_lowrank(rt, rows, n));
}

/* The step of a chunk of n elements. A chunk under --compress-min-bytes travels with codec
 * "none", which has no momentum: when the run's momentum is the workers' (a sparsifier's
 * momentum correction, the servers' --momentum then 0), such a chunk would train without
 * any, so its server applies the codec's momentum itself (plain SGD momentum: on a dense
 * gradient that is what momentum correction amounts to). Workers and servers agree on which
 * chunks these are (pc_rt__chunk_dense). The workers step powersgd's matrices with it as
 * their servers do. Adam(W) has no such case (pc_config_check refuses a codec with momentum
 * correction). Thread-safe. */
static inline pc_optim_cfg_t pc_rt__chunk_optim_from(const pc_runtime_t *rt,
                                                     const pc_optim_cfg_t *base, size_t n)
{
    pc_optim_cfg_t o = *base;
    if (o.kind == PC_OPTIM_SGD && o.momentum == 0 && pc_rt__chunk_dense(rt, n))
        o.momentum = pc_codec_worker_momentum(&rt->spec);
    return o;
}

/* pc_rt__chunk_optim_from with the run's rule (rt->optim); base: a parameter group's rule
 * (pc_worker_set_optimizer) instead. Thread-safe. */
static inline pc_optim_cfg_t pc_rt__chunk_optim(const pc_runtime_t *rt, size_t n)
{
    return pc_rt__chunk_optim_from(rt, &rt->optim, n);
}

/* The run's two codecs, which every chunk uses one of: the --compress codec (rt->spec) and
 * the dense one (none) for the chunks under --compress-min-bytes (pc_rt__chunk_dense). On
 * PC_OK both are the caller's (pc_codec_destroy); on error (pc_codec_create's) neither is
 * made. Workers and servers call it alike, so both sides decode what the other encodes.
 * Thread-safe. */
int pc_rt__codecs_create(const pc_runtime_t *rt, pc_codec_t **codec, pc_codec_t **dense);

/* rt->spec from rt->cfg.compress (checked by pc_config_check; a key added since, by
 * pc_config_codec_momentum_off or pc_config_codec_adam_warmup, included) and the run's
 * seed: the one place the spec is derived from the configuration. Before any codec is
 * made from it (pc_worker_start, a server's layout): not thread-safe on rt. */
void pc_rt__spec_update(pc_runtime_t *rt);

/* Bytes of a host name in rt->hosts (with its terminating NUL; longer names are cut). */

/* Rank r's host name (r in 0..size-1; "?" otherwise). Thread-safe. */
static inline const char *pc_rt__host(const pc_runtime_t *rt, int r)
{
    return rt->hosts && r >= 0 && r < rt->size ? rt->hosts + (size_t)r * PC_COMM_HOST_LEN : "?";
}

/* The rank of server s (0..nservers-1) in rt->comm. Thread-safe. */
static inline int pc_rt__server_rank(const pc_runtime_t *rt, int s)
{
    return rt->nworkers + s;
}

/* Bind the calling thread as thread t of this rank's placement; logs and returns the
 * error. Each thread binds itself, once. */
int pc_rt__bind(pc_runtime_t *rt, int t, const char *who);

/* Sleep until pc_time_ns() reaches `until` (clock_nanosleep on CLOCK_MONOTONIC to that
 * absolute time, resumed after signals: never a spin); returns at once when it has passed.
 * Any thread. */
void pc_rt__sleep_until(int64_t until);

/* Time dilation (--dilate K; doc/design.md, "Time dilation"): a piece of CPU work on the
 * critical path ran from t0 to t1 (pc_time_ns); sleep until t1 + (K - 1) (t1 - t0), so
 * that the work looks K times as long to everything after it, and return the time it
 * ends (t1 itself when K = 1: no sleep, no clock read, today's code path). Any thread. */
static inline int64_t pc_rt__dilate(const pc_runtime_t *rt, int64_t t0, int64_t t1)
{
    double k = rt->cfg.dilate;
    if (!(k > 1)) /* 1 (pc_config_check refuses less) */
        return t1;
    pc_rt__sleep_until(t1 + (int64_t)((k - 1) * (double)(t1 - t0)));
    return pc_time_ns();
}

/* Append one JSON line (printf-style, without the newline, cut at 1 KiB) to this rank's
 * metrics (no-op without --metrics; dropped when out of memory: metrics are best effort).
 * Not thread-safe: only the backprop thread (workers) or the server thread calls it. */
void pc_rt__metrics_line(pc_runtime_t *rt, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Collective over rt->comm, every rank once at the end: gather every rank's metrics lines
 * and timeline to rank 0, which writes --metrics and --timeline (temporary file, then
 * rename). PC_OK, or an error with a message in err: an MPI error, PC_ENOMEM or PC_ERANGE
 * (rank 0 cannot take the data: the same on every rank), or rank 0's I/O error. Then no
 * thread may add
 * metrics or events any more. */
int pc_rt__metrics_write(pc_runtime_t *rt, char *err, size_t errlen);

/* ---- checkpoints (runtime_ckpt.c) ------------------------------------------------- */

#define CKPT_MAGIC "PCCKRANK"
/* 2: a worker's chunk record names up to CKPT_ARRAYS arrays by a mask (1: two flags). The
 * mask has room for more: 5 (Adam's m, v, vmax after a powersgd matrix's residual and Q)
 * kept SGD's records as they were, in version 2, and so did 6 (--update workers: a ps
 * chunk's parameters after its optimizer state). */
#define CKPT_VERSION 2u
#define CKPT_ARRAYS  6
/* The size of one rank's outcome record in pc_rt__ckpt_finish (rt->ckpt_outcomes). */
#define CKPT_OUTCOME_BYTES 256

/* The header of a rank's checkpoint file (native byte order; 32 bytes). */
typedef struct ckpt_header {
    char magic[8];
    uint32_t version, rank, role, records;
    uint64_t iteration;
} ckpt_header_t;
/* Written raw at the start of every rank's checkpoint file: a change of layout is a new
 * CKPT_VERSION. */
_Static_assert(sizeof(ckpt_header_t) == 32 && offsetof(ckpt_header_t, iteration) == 24,
               "ckpt_header_t is part of the checkpoint file format");

/* Whether checkpoints are on. Thread-safe. */
static inline bool pc_rt__ckpt_on(const pc_runtime_t *rt)
{
    return rt->cfg.checkpoint_dir[0] != '\0';
}

/* Fill *m with this job's checkpoint identity (pc_ckpt_meta_t) at iteration it. Workers
 * need rt->model_hash set (pc_worker_start). Thread-safe. */
void pc_rt__ckpt_meta(const pc_runtime_t *rt, uint64_t it, pc_ckpt_meta_t *m);

/* Open this rank's file of checkpoint it and write its header (records: the records that
 * follow). On PC_OK *w is the caller's until pc_rt__ckpt_finish commits or aborts it; on
 * error a message is in err. The calling thread only. */
int pc_rt__ckpt_begin(pc_runtime_t *rt, uint64_t it, uint32_t records, pc_ckpt_writer_t **w,
                      char *err, size_t errlen);

/* Open this rank's file of checkpoint it and check its header against this rank (rank,
 * role, records, iteration). On PC_OK *r is the caller's to read and close
 * (pc_ckpt_reader_close); on a bad header it is closed and NULL, PC_EFORMAT. */
int pc_rt__ckpt_open(pc_runtime_t *rt, uint64_t it, uint32_t records, pc_ckpt_reader_t **r,
                     char *err, size_t errlen);

/* Collective over rt->comm, every rank once per checkpoint: commit this rank's writer (w,
 * or NULL after a failure described by rc and why), share every rank's result; rank 0 then
 * writes the manifest and prunes old checkpoints. w is consumed either way. Returns the same
 * on every rank: PC_OK, or PC_EIO naming the first rank that failed (rank 0 alone may also
 * fail writing the manifest). */
int pc_rt__ckpt_finish(pc_runtime_t *rt, uint64_t it, pc_ckpt_writer_t *w, int rc, const char *why,
                       char *err, size_t errlen);

#pragma GCC visibility pop

#endif /* PC_RUNTIME_IMPL_H */
