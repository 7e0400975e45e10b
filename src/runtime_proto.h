/* runtime_proto.h: what workers and servers share (private to the library): the runtime
 * object, message tags, the layout and pull-message formats, metrics plumbing.
 *
 * Messages on the runtime's communicator (a dup of the user's):
 *   TAG_LAYOUT      worker 0 -> each server, once: the chunk plan (u32 magic, u32 count,
 *                   u64 resume iteration (0: a fresh start), then per chunk u32 elements,
 *                   u32 server)
 *   TAG_INIT        fresh start: worker 0 -> each server, once per owned chunk, in chunk
 *                   order: the chunk's initial parameters (n floats). Resuming: the other
 *                   way, the server's checkpointed parameters to worker 0.
 *   TAG_GRAD        worker -> the chunk's server: a compressed gradient (pc_wire message;
 *                   chunk and iteration in its header)
 *   TAG_PULL + c    server -> every worker: chunk c's updated parameters (a pull message)
 *   TAG_DONE        worker -> every server: no more gradients from this worker (u32: the
 *                   signal that stopped the job, 0 if none)
 *   TAG_CKPT        worker -> every server, at an iteration boundary N when every update
 *                   of iteration N-1 is in (u64 N): checkpoint now. When all workers' have
 *                   come, the server writes its shard and joins the collective that ends
 *                   the checkpoint (pc_rt__ckpt_finish).
 * Pull messages reuse the pc_wire header with codec PULL_DENSE (n floats) or PULL_SPARSE
 * (entries u32 indices, strictly increasing, then entries floats: the parameters that
 * changed); the receiver validates everything before writing. */
#ifndef PC_RUNTIME_PROTO_H
#define PC_RUNTIME_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "pipecompress/pc_ckpt.h"
#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_config.h"
#include "pipecompress/pc_log.h"
#include "pipecompress/pc_optim.h"
#include "pipecompress/pc_runtime.h"
#include "pipecompress/pc_timeline.h"
#include "pipecompress/pc_topo.h"
#include "pipecompress/pc_wire.h"

enum {
    TAG_LAYOUT = 1,
    TAG_INIT = 2,
    TAG_GRAD = 3,
    TAG_DONE = 4,
    TAG_CKPT = 5,
    TAG_PULL = 100, /* + chunk id */
};

#define LAYOUT_MAGIC 0x4c435050u /* "PPCL" */
#define PULL_DENSE 0xF0
#define PULL_SPARSE 0xF1

struct pc_runtime {
    pc_config_t cfg;
    pc_codec_spec_t spec;
    pc_optim_cfg_t optim;
    MPI_Comm comm;    /* dup of the user's communicator, MPI_ERRORS_RETURN */
    MPI_Comm workers; /* the workers only (the MPI thread's collectives); MPI_COMM_NULL on
                         servers */
    MPI_Comm workers_ctl; /* a dup of workers for the backprop thread's collectives: two
                             threads must not run collectives on one communicator */
    int rank, size, nworkers, nservers;
    pc_role_t role;
    pc_log_t *log;
    pc_log_t *own_log; /* created when the caller gave none */
    pc_topo_t *topo;
    pc_topo_plan_t *place;
    int local_rank;
    volatile sig_atomic_t *stop_flag;
    char *metrics; /* JSON lines of this rank */
    size_t metrics_len, metrics_cap;
    pc_timeline_t *tl; /* --timeline: tracks 0 (backprop or server) and 1 (compressor) */
    uint64_t model_hash; /* workers: hash of the tensors and chunk plan (checkpoint manifests) */
    int stop_signal;     /* the signal all ranks agreed to stop on (0: none); workers: set by
                            the backprop thread in iteration_end before the compressor thread
                            sends TAG_DONE (ordered by the q_ready push/pop); servers: from
                            TAG_DONE */
};

/* Timeline tracks. */
#define TRACK_MAIN 0
#define TRACK_COMPRESSOR 1

/* Record an event on a track (no-op without --timeline). */
static inline void pc_rt__trace(pc_runtime_t *rt, int track, const char *name, int64_t t0,
                                int64_t t1)
{
    if (rt->tl)
        pc_timeline_event(rt->tl, track, name, t0, t1);
}

/* Whether a chunk of n elements travels uncompressed (--compress-min-bytes). Workers and
 * servers decide alike from the chunk's size. */
static inline bool pc_rt__chunk_dense(const pc_runtime_t *rt, size_t n)
{
    return (int64_t)(n * sizeof(float)) < rt->cfg.compress_min_bytes;
}

/* The rank of server s. */
static inline int pc_rt__server_rank(const pc_runtime_t *rt, int s)
{
    return rt->nworkers + s;
}

/* Bind the calling thread as thread t of this rank's placement; logs and returns the
 * error. */
int pc_rt__bind(pc_runtime_t *rt, int t, const char *who);

/* Append one JSON line (printf-style, without the newline) to this rank's metrics. */
void pc_rt__metrics_line(pc_runtime_t *rt, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Collective over rt->comm: gather every rank's metrics lines and timeline to rank 0,
 * which writes --metrics and --timeline (temporary file, then rename). */
int pc_rt__metrics_write(pc_runtime_t *rt, char *err, size_t errlen);

/* ---- checkpoints (runtime_ckpt.c) ------------------------------------------------- */

#define CKPT_MAGIC "PCCKRANK"
#define CKPT_VERSION 1u

/* The header of a rank's checkpoint file (native byte order; 32 bytes). */
typedef struct ckpt_header {
    char magic[8];
    uint32_t version, rank, role, records;
    uint64_t iteration;
} ckpt_header_t;

/* Whether checkpoints are on. */
static inline bool pc_rt__ckpt_on(const pc_runtime_t *rt)
{
    return rt->cfg.checkpoint_dir[0] != '\0';
}

/* This job's checkpoint identity (pc_ckpt_meta_t) at iteration it. */
void pc_rt__ckpt_meta(const pc_runtime_t *rt, uint64_t it, pc_ckpt_meta_t *m);

/* Open this rank's file of checkpoint it and write its header. */
int pc_rt__ckpt_begin(pc_runtime_t *rt, uint64_t it, uint32_t records, pc_ckpt_writer_t **w,
                      char *err, size_t errlen);

/* Open this rank's file of checkpoint it and check its header. */
int pc_rt__ckpt_open(pc_runtime_t *rt, uint64_t it, uint32_t records, pc_ckpt_reader_t **r,
                     char *err, size_t errlen);

/* Collective over rt->comm, every rank once per checkpoint: commit this rank's writer (w,
 * or NULL after a failure described by rc and why), share every rank's result; rank 0 then
 * writes the manifest and prunes old checkpoints. Returns the same on every rank: PC_OK,
 * or PC_EIO naming the first rank that failed. */
int pc_rt__ckpt_finish(pc_runtime_t *rt, uint64_t it, pc_ckpt_writer_t *w, int rc, const char *why,
                       char *err, size_t errlen);

/* Largest pull message for a chunk of n elements. */
static inline size_t pc_rt__pull_max_bytes(size_t n)
{
    return PC_WIRE_HEADER_BYTES + 4 * n;
}

/* Encode the pull message for chunk (chunk, n) at iteration it: dense, or sparse when
 * `changed` indices (ascending) are few enough for mode (pc_config_pull_t). Returns the
 * message length. buf holds pc_rt__pull_max_bytes(n). */
size_t pc_rt__pull_encode(uint8_t *buf, uint32_t chunk, uint64_t it, const float *p, size_t n,
                          const uint32_t *changed, size_t nchanged, int mode);

/* Validate a pull message completely, then write its parameters into p (n floats).
 * PC_EFORMAT with a message on any problem; p untouched then. */
int pc_rt__pull_apply(const uint8_t *msg, size_t len, uint32_t chunk, uint64_t it, float *p,
                      size_t n, char *err, size_t errlen);

#endif /* PC_RUNTIME_PROTO_H */
