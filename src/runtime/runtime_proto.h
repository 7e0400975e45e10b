/* runtime_proto: the runtime's messages, encoded and validated in one place (private to
 * the library). No MPI here: the runtime's MPI files (scripts/lint/layers.txt lists them) move the
 * bytes; this module says what they are. Every message is little-endian, written field by field
 * with the pc_wire primitives; doc/wire-format.md gives each one byte by byte.
 *
 *   tag            direction, when                         bytes
 *   TAG_LAYOUT     worker 0 -> each server, once at start   16 + 12 C: u32 magic "PPL2",
 *                                                           u32 C chunks, u64 resume
 *                                                           iteration (0: fresh start), per
 *                                                           chunk u32 elements, u32 server,
 *                                                           u32 rows (a whole matrix; 0)
 *   TAG_INIT       fresh start: worker 0 -> the chunk's     4 n: the chunk's parameters,
 *                  server; resuming: server -> worker 0;    binary32
 *                  one per chunk, in chunk order
 *   TAG_GRAD       worker -> the chunk's server, once per   a pc_wire message of the run's
 *                  chunk and iteration (powersgd's          codec (pc_codec_compress); a
 *                  matrices: twice, P_w then Q_w)           powersgd factor (pc_codec.h)
 *   TAG_PULL + c   powersgd matrix c, round 1: server ->    a pc_wire header with codec
 *                  every worker once all P_w are in         PULL_PHAT, then rows x rank
 *                                                           binary32 (P^)
 *   TAG_PULL + c   server -> every worker, once per         a pc_wire header with codec
 *                  iteration of chunk c                     PULL_DENSE or PULL_SPARSE, u64
 *                                                           server time (ns), then n
 *                                                           binary32 (dense) or k u32
 *                                                           indices and k binary32;
 *                                                           powersgd's matrices: PULL_LOWRANK,
 *                                                           u64 server time, cols x rank
 *                                                           binary32 (Q; the warm-up: the
 *                                                           n-float mean gradient)
 *   TAG_DONE       worker -> every server, once at the end  4: u32 stop signal (0: none)
 *   TAG_CKPT       worker -> every server, at a checkpoint  8: u64 iteration N
 *                  boundary N
 *   TAG_GROUPS     worker 0 -> each server, once at start,  16 + 56 G + 4 C: u32 magic
 *                  before TAG_LAYOUT, only when the         "PPG1", u32 optimizer kind,
 *                  optimizer's parameter groups were set    u32 G groups, u32 C chunks; per
 *                  (pc_worker_set_optimizer)                group f64 lr, weight decay,
 *                                                           momentum, beta1, beta2, eps, u32
 *                                                           flags (1 nesterov, 2 amsgrad),
 *                                                           u32 0; per chunk u32 its group
 *   TAG_LR         worker -> every server, once per         12 + 8 G: u64 iteration, u32 G,
 *                  iteration of a run with groups           per group f64 learning rate
 *                  (pc_worker_set_lrs)
 *   TAG_UPDATE     worker 0 -> each server, once at start,  8: u32 magic "PPU1", u32 the
 *                  first of its messages, only when the     placement (pc_config_update_t:
 *                  workers chose the placement              1 workers)
 *                  (pc_worker_set_update)
 *   TAG_CLIP       worker -> every server, in each         16: u64 iteration, f64 max-norm
 *                  iteration of a run with groups that     (> 0, +inf allowed: clip to it;
 *                  may clip: its first, and every one      0: no clipping this iteration)
 *                  after one that clipped; after TAG_LR
 *                  (pc_worker_clip_grad_norm, or
 *                  iteration_end with 0)
 *   TAG_NORM       the first server with chunks -> every   16: u64 iteration, f64 the
 *                  worker, once per iteration TAG_CLIP     averaged gradient's global
 *                  clipped                                 2-norm (>= 0, +inf or NaN)
 *   TAG_WARMUP     worker 0 -> each server, once at start,  8: u32 magic "PPW1", u32 the
 *                  first of its messages, only when the     warm-up's iterations
 *                  workers gave the codec its default       (PC_CONFIG_ADAM_WARMUP)
 *                  warm-up (pc_worker_warm_codec)
 *
 * Receiving is always: validate the whole message, then touch the receiver's memory. Each
 * parser either accepts a message whole or returns PC_EFORMAT with a one-line reason in err
 * (without ranks: the caller knows the sender and names it) and leaves its outputs
 * untouched. What only the receiver's state can tell (a duplicate, a message after the
 * end) the receiver checks. Every parser is fuzzed (tests/fuzz/fuzz_runtime.c).
 *
 * Threads and ownership: every function here is a pure function of its arguments and
 * thread-safe; buffers belong to the caller, and a parsed view (rt_layout_t, rt_grad_t)
 * borrows the message it was parsed from, which must outlive it unchanged. */
#ifndef PC_RUNTIME_PROTO_H
#define PC_RUNTIME_PROTO_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_optim.h"
#include "pipecompress/pc_plan.h"
#include "pipecompress/pc_wire.h"

/* Library-private: hidden in libpipecompress.so (its version script exports pc_*, and these
 * pc_rt__ names would match it). */
#pragma GCC visibility push(hidden)

/* MPI tags on the runtime's communicator. */
enum {
    TAG_LAYOUT = 1,
    TAG_INIT = 2,
    TAG_GRAD = 3,
    TAG_DONE = 4,
    TAG_CKPT = 5,
    TAG_GROUPS = 6,
    TAG_LR = 7,
    TAG_UPDATE = 8,
    TAG_CLIP = 9,
    TAG_NORM = 10,
    TAG_WARMUP = 11,
    TAG_PULL = 100, /* + chunk id */
};

/* ---- layout: the chunk plan ----------------------------------------------------------- */

#define PC_RT_LAYOUT_MAGIC                                                                         \
    0x324c5050u /* "PPL2" as little-endian bytes (the layout with                                  \
                   rows; "PPCL" had none) */
#define PC_RT_LAYOUT_HEAD_BYTES  16
#define PC_RT_LAYOUT_CHUNK_BYTES 12
/* Most chunks a layout may name: chunk c's updates carry tag TAG_PULL + c, an int. (MPI's
 * own tag bound, at least 32767, is checked by worker 0 before it plans.) */
#define PC_RT_MAX_CHUNKS ((uint32_t)(INT_MAX - TAG_PULL))

/* A validated layout message: a view into the message it was parsed from. */
typedef struct rt_layout {
    uint32_t nchunks;
    uint64_t resume;       /* iteration to resume from; 0: a fresh start */
    const uint8_t *chunks; /* nchunks entries of PC_RT_LAYOUT_CHUNK_BYTES, borrowed */
} rt_layout_t;

/* Bytes of the layout message of a plan of nchunks chunks. */
static inline size_t pc_rt__layout_bytes(size_t nchunks)
{
    return PC_RT_LAYOUT_HEAD_BYTES + PC_RT_LAYOUT_CHUNK_BYTES * nchunks;
}

/* Encode plan (its chunks' sizes and servers, in chunk order) and the resume iteration
 * into buf[0..pc_rt__layout_bytes(plan->nchunks)). */
void pc_rt__layout_encode(uint8_t *buf, const pc_plan_t *plan, uint64_t resume);

/* Validate a layout message for a job of nservers servers: length, magic, at most
 * PC_RT_MAX_CHUNKS chunks, every chunk of 1..PC_CODEC_MAX_N elements on a server in
 * 0..nservers-1, its rows 0 or a divisor of its elements. On PC_OK *out views msg; on
 * PC_EFORMAT *out is untouched. */
int pc_rt__layout_parse(const uint8_t *msg, size_t len, int nservers, rt_layout_t *out, char *err,
                        size_t errlen);

/* Chunk c (< l->nchunks) of a validated layout: its elements, its server, its rows (a whole
 * matrix; else 0). */
static inline void pc_rt__layout_chunk(const rt_layout_t *l, uint32_t c, uint32_t *n, int *server,
                                       uint32_t *rows)
{
    const uint8_t *e = l->chunks + PC_RT_LAYOUT_CHUNK_BYTES * (size_t)c;
    *n = pc_wire_get_u32(e);
    *server = (int)pc_wire_get_u32(e + 4);
    *rows = pc_wire_get_u32(e + 8);
}

/* ---- init: a chunk's parameters at start -------------------------------------------- */

/* Bytes of the init message of a chunk of n elements. */
static inline size_t pc_rt__init_bytes(size_t n)
{
    return 4 * n;
}

/* Encode p[0..n) into buf[0..pc_rt__init_bytes(n)). */
void pc_rt__init_encode(uint8_t *buf, const float *p, size_t n);

/* Validate an init message for chunk `chunk` (for the reason only) of n elements (exactly
 * 4 n bytes, every value finite), then write it into p[0..n). On PC_EFORMAT p is
 * untouched. msg and p must not overlap. */
int pc_rt__init_apply(const uint8_t *msg, size_t len, uint32_t chunk, float *p, size_t n, char *err,
                      size_t errlen);

/* ---- grad: a compressed gradient (the codec's message) ------------------------------- */

/* A gradient message whose header has been read: a view into the message. */
typedef struct rt_grad {
    pc_wire_header_t h;
    const uint8_t *msg; /* the whole message, header included; borrowed */
    size_t len;
} rt_grad_t;

/* The first half of validating a gradient: the header and its codec-independent checks
 * (pc_wire_header_read), read once, so that the receiver can route the message by
 * g->h.chunk. On PC_OK *g views msg; on PC_EFORMAT *g is unspecified. */
int pc_rt__grad_read(const uint8_t *msg, size_t len, rt_grad_t *g, char *err, size_t errlen);

/* The second half: everything else pc_codec_validate checks (codec, flags, chunk, n and
 * iteration against want, then every byte of the payload), on the header read by
 * pc_rt__grad_read. PC_OK or PC_EFORMAT with a reason. */
int pc_rt__grad_check(const pc_codec_t *c, const rt_grad_t *g, const pc_codec_expect_t *want,
                      char *err, size_t errlen);

/* Add scale * the values of g into dense[0..g->h.n), without checking again: g must have
 * passed pc_rt__grad_check with the same codec (message unchanged since). The same
 * arithmetic as pc_codec_decode_add. Fails only with PC_ENOMEM, before writing. */
int pc_rt__grad_apply(const pc_codec_t *c, const rt_grad_t *g, float scale, float *dense, char *err,
                      size_t errlen);

/* ---- the sparse aggregate: the server's O(nnz) step ---------------------------------- */

/* Whether c's messages carry indices (the sparsifiers topk, dgc, randomk, threshold), so
 * that pc_rt__grad_aggregate_sparse can aggregate them. Thread-safe. */
bool pc_rt__grad_sparse(const pc_codec_t *c);

/* Index lists of one chunk's sparse aggregation, grown on demand (each to at most n
 * entries). Zero-initialise; free with pc_rt__sparse_free. One thread at a time. */
typedef struct rt_sparse {
    uint32_t *touched; /* the aggregate's touched entries: ascending, distinct */
    size_t ntouched;
    uint32_t *scratch; /* after aggregation: free for the caller, room for ntouched */
    uint32_t *list;    /* one message's indices */
    size_t cap_touched, cap_scratch, cap_list;
} rt_sparse_t;

/* Add scale * the values of grads[0..nworkers) (each passed pc_rt__grad_check with the
 * sparsifier c: pc_rt__grad_sparse) into agg[0..n), message after message in the order
 * given: exactly the arithmetic of nworkers pc_rt__grad_apply calls, so agg equals their
 * dense sum wherever it was zero before; and set sp->touched to the union of the messages'
 * indices (ascending; entries whose sum cancelled to 0 included). O(sum of entries x
 * nworkers), never O(n). On error (PC_ENOMEM with a reason; *failed = the message's
 * position) agg may hold part of the sum. Not thread-safe on one sp. */
int pc_rt__grad_aggregate_sparse(rt_sparse_t *sp, const pc_codec_t *c, const rt_grad_t *grads,
                                 int nworkers, float scale, float *agg, size_t n, int *failed,
                                 char *err, size_t errlen);
void pc_rt__sparse_free(rt_sparse_t *sp);

/* ---- pull: a chunk's updated parameters ---------------------------------------------- */

/* Codec ids of pull messages in the pc_wire header: outside the gradient codecs' range.
 * The second pull format (with the server's time) took new ids: a pull of the first format
 * (0xF0 dense, 0xF1 sparse, no server time) is rejected as an unknown codec. */
#define PC_RT_PULL_DENSE  0xF2
#define PC_RT_PULL_SPARSE 0xF3
/* Bytes between the header and the parameters: u64 server time in ns. */
#define PC_RT_PULL_TIME_BYTES 8
/* Largest server time a pull may carry: one hour. The server's work on one chunk is
 * milliseconds; a larger value is a corrupt message, not a slow server (and it keeps a
 * worker's sums of nanoseconds far from overflow). */
#define PC_RT_PULL_MAX_SERVER_NS 3600000000000ull

/* Largest pull message for a chunk of n elements. */
static inline size_t pc_rt__pull_max_bytes(size_t n)
{
    return PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES + 4 * n;
}

/* Encode the pull message for chunk (chunk, n) at iteration it: dense, or sparse when
 * `changed` indices (ascending) are few enough for mode (pc_config_pull_t); server_ns: the
 * server's time on the chunk this iteration (a duration on the server's clock; clamped to
 * PC_RT_PULL_MAX_SERVER_NS). Returns the message length. buf holds
 * pc_rt__pull_max_bytes(n). */
size_t pc_rt__pull_encode(uint8_t *buf, uint32_t chunk, uint64_t it, const float *p, size_t n,
                          const uint32_t *changed, size_t nchanged, int mode, uint64_t server_ns);

/* Validate a pull message completely (header, codec PULL_DENSE or PULL_SPARSE, no flags,
 * chunk, n and iteration as expected, sizes, scale 0, server time at most
 * PC_RT_PULL_MAX_SERVER_NS, indices < n and strictly increasing, values finite), then write
 * its parameters into p (n floats) and the server's time into *server_ns (may be NULL). On
 * PC_EFORMAT p and *server_ns are untouched. */
int pc_rt__pull_apply(const uint8_t *msg, size_t len, uint32_t chunk, uint64_t it, float *p,
                      size_t n, uint64_t *server_ns, char *err, size_t errlen);

/* ---- powersgd: P^ and the matrix's update --------------------------------------------- */

/* Codec ids of powersgd's two server messages (pc_wire header), beside the pulls':
 * PULL_PHAT, round 1's answer: rows x rank binary32, the orthonormalised sum of the P_w
 * (entries rows x rank, no server time, flags 0, scale 0); PULL_LOWRANK, the update of a
 * matrix: u64 server time, then the values every worker steps its copy with: Q (cols x
 * rank binary32; the workers have P^), or with flag LOWRANK_F_DENSE, in the warm-up, the
 * mean gradient (n binary32); entries: the values' count. With --update workers every
 * chunk's update is that dense form: its mean gradient, which the workers step with.
 * How the server stepped, so that the workers step their copies alike (rt_lrstep_t): with
 * flag LOWRANK_F_LR (parameter groups, whose rates the workers' torch scheduler sets and
 * the servers take from worker 0) an f64 learning rate follows the server time; a
 * clipped round-2 update (clipping by the global norm) carries its coefficient in the
 * header's scale, in (0, 1) (scale +0: not clipped). */
#define PC_RT_PULL_PHAT        0xF4
#define PC_RT_PULL_LOWRANK     0xF5
#define PC_RT_LOWRANK_F_DENSE  0x0001u
#define PC_RT_LOWRANK_F_LR     0x0002u
#define PC_RT_LOWRANK_LR_BYTES 8

/* How a matrix's server stepped its copy, which its update tells the workers: lr, the
 * rate (below 0: not sent, the run's own schedule gives it: no parameter groups); coef,
 * the clipping coefficient its rows P^ Q^T were multiplied by before the step (1: none). */
typedef struct rt_lrstep {
    double lr;
    float coef;
} rt_lrstep_t;

/* Bytes of the P^ message of a rows x rank factor (entries floats). */
static inline size_t pc_rt__phat_bytes(size_t entries)
{
    return PC_WIRE_HEADER_BYTES + 4 * entries;
}

/* Bytes of a matrix's update of nv values (Q's cols x rank, or the warm-up's n), with the
 * learning rate where lr (LOWRANK_F_LR). */
static inline size_t pc_rt__pull_lowrank_bytes(size_t nv, bool lr)
{
    return PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES + (lr ? PC_RT_LOWRANK_LR_BYTES : 0) +
           4 * nv;
}

/* Encode P^ (entries floats) for chunk (chunk, n) at iteration it into
 * buf[0..pc_rt__phat_bytes(entries)); returns the length. */
size_t pc_rt__phat_encode(uint8_t *buf, uint32_t chunk, uint32_t n, uint64_t it, const float *phat,
                          size_t entries);

/* Validate a P^ message completely (header, codec PULL_PHAT, chunk, n, iteration, flags 0,
 * scale 0, exactly `entries` entries and their bytes, every value finite), then write it
 * into phat[0..entries). On PC_EFORMAT phat is untouched. */
int pc_rt__phat_apply(const uint8_t *msg, size_t len, uint32_t chunk, uint32_t n, uint64_t it,
                      float *phat, size_t entries, char *err, size_t errlen);

/* Encode the update of matrix chunk (chunk, n) at iteration it: the nv values v (Q, or
 * with dense the warm-up's mean gradient); server_ns as pc_rt__pull_encode's; step (NULL:
 * {-1, 1}) how the server stepped: its lr when >= 0 (LOWRANK_F_LR), its coef in the
 * header's scale when not 1. Returns the length (pc_rt__pull_lowrank_bytes(nv, lr >= 0)). */
size_t pc_rt__pull_lowrank_encode(uint8_t *buf, uint32_t chunk, uint32_t n, uint64_t it, bool dense,
                                  const float *v, size_t nv, uint64_t server_ns,
                                  const rt_lrstep_t *step);

/* Validate a matrix's update completely (codec PULL_LOWRANK, chunk, n, iteration, the
 * flags `dense` and `with_lr` ask for, entries nv and payload 8 (+ 8) + 4 nv, a server time
 * within PC_RT_PULL_MAX_SERVER_NS, a learning rate finite and >= 0, a scale +0 or a
 * coefficient in (0, 1), and only on a round-2 update (not dense), every value
 * finite); then *values views its nv little-endian binary32 inside msg (pc_wire_get_f32s
 * reads them), *server_ns (may be NULL) gets the time and *step (may be NULL where
 * with_lr is false) the rate (-1 without) and the coefficient (1 without). On PC_EFORMAT
 * nothing is written. */
int pc_rt__pull_lowrank_read(const uint8_t *msg, size_t len, uint32_t chunk, uint32_t n,
                             uint64_t it, bool dense, bool with_lr, size_t nv,
                             const uint8_t **values, uint64_t *server_ns, rt_lrstep_t *step,
                             char *err, size_t errlen);

/* ---- groups: the optimizer's parameter groups, once at start ------------------------
 * A run whose optimizer was given per parameter group (the binding's DistributedOptimizer:
 * torch's param_groups) takes each chunk's rule from its group instead of the run's flags,
 * and each iteration's learning rates from TAG_LR instead of the runtime's schedule. The
 * plan never puts tensors of two groups in one chunk (pc_worker_start), so a chunk has one
 * group. */

#define PC_RT_GROUPS_MAGIC      0x31475050u /* "PPG1" as little-endian bytes */
#define PC_RT_GROUPS_HEAD_BYTES 16
#define PC_RT_GROUP_BYTES       56
/* Most groups a run may have: torch scripts have a handful (decay, no decay, per-layer
 * rates); 65536 keeps the message and the server's per-worker tables small. */
#define PC_RT_MAX_GROUPS       65536u
#define PC_RT_GROUP_F_NESTEROV 0x1u
#define PC_RT_GROUP_F_AMSGRAD  0x2u

/* A validated groups message: a view into the message it was parsed from. */
typedef struct rt_groups {
    int kind; /* pc_optim_kind_t */
    uint32_t ngroups, nchunks;
    const uint8_t *groups; /* ngroups entries of PC_RT_GROUP_BYTES, borrowed */
    const uint8_t *chunk;  /* nchunks u32 group indices, borrowed */
} rt_groups_t;

/* Bytes of the groups message of ngroups groups and nchunks chunks. */
static inline size_t pc_rt__groups_bytes(size_t ngroups, size_t nchunks)
{
    return PC_RT_GROUPS_HEAD_BYTES + PC_RT_GROUP_BYTES * ngroups + 4 * nchunks;
}

/* Whether g (its kind, lr, weight_decay, momentum, nesterov, beta1, beta2, eps, amsgrad;
 * the schedule fields ignored) is a rule the servers can step: lr, weight decay and
 * momentum finite and >= 0, nesterov only with momentum (torch.optim.SGD's rule); SGD
 * without amsgrad, Adam(W) without momentum or nesterov, betas in [0, 1) and eps finite
 * and > 0. PC_OK, or PC_EINVAL with a one-line reason naming the field. Pure. */
int pc_rt__group_check(const pc_optim_cfg_t *g, char *err, size_t errlen);

/* Encode the groups (each a pc_optim_cfg_t whose kind is ignored: kind is the run's) and
 * chunk_group[0..nchunks) into buf[0..pc_rt__groups_bytes(ngroups, nchunks)). */
void pc_rt__groups_encode(uint8_t *buf, int kind, const pc_optim_cfg_t *groups, uint32_t ngroups,
                          const uint32_t *chunk_group, uint32_t nchunks);

/* Validate a groups message: length, magic, a known kind, 1..PC_RT_MAX_GROUPS groups each
 * passing pc_rt__group_check, at most PC_RT_MAX_CHUNKS chunks each naming a group < G. On
 * PC_OK *out views msg; on PC_EFORMAT *out is untouched. */
int pc_rt__groups_parse(const uint8_t *msg, size_t len, rt_groups_t *out, char *err, size_t errlen);

/* Group i (< g->ngroups) of a validated message as a rule: its fields, the message's kind,
 * the constant schedule (the lr is each iteration's TAG_LR value). */
void pc_rt__groups_get(const rt_groups_t *g, uint32_t i, pc_optim_cfg_t *out);

/* Chunk c's group (c < g->nchunks). */
static inline uint32_t pc_rt__groups_chunk(const rt_groups_t *g, uint32_t c)
{
    return pc_wire_get_u32(g->chunk + 4 * (size_t)c);
}

/* ---- lr: the groups' learning rates of one iteration ---------------------------------- */

#define PC_RT_LR_HEAD_BYTES 12

/* Bytes of the lr message of ngroups groups. */
static inline size_t pc_rt__lr_bytes(size_t ngroups)
{
    return PC_RT_LR_HEAD_BYTES + 8 * ngroups;
}

/* Encode iteration it's learning rates lrs[0..ngroups) into
 * buf[0..pc_rt__lr_bytes(ngroups)). */
void pc_rt__lr_encode(uint8_t *buf, uint64_t it, const double *lrs, uint32_t ngroups);

/* Validate an lr message of a run with ngroups groups (exactly pc_rt__lr_bytes(ngroups)
 * bytes, its count ngroups, every rate finite and >= 0); on PC_OK *it gets the iteration and
 * lrs[0..ngroups) the rates, on PC_EFORMAT both are untouched. Whether the iteration is the
 * one expected from that worker is the server's check. */
int pc_rt__lr_parse(const uint8_t *msg, size_t len, uint32_t ngroups, uint64_t *it, double *lrs,
                    char *err, size_t errlen);

/* ---- update: the placement of the step, once at start ---------------------------------
 * The workers may choose where the step runs after pc_runtime_create parsed --update (the
 * binding's DistributedOptimizer(update="workers") without the flag): worker 0 then tells
 * the servers, first of all its messages, before they set up their chunks. A run whose
 * placement is the flags' exchanges exactly what it did before. */

#define PC_RT_UPDATE_MAGIC 0x31555050u /* "PPU1" as little-endian bytes */
#define PC_RT_UPDATE_BYTES 8

/* Encode the placement (a pc_config_update_t) into buf[0..PC_RT_UPDATE_BYTES). */
void pc_rt__update_encode(uint8_t *buf, int update);

/* Validate an update message (PC_RT_UPDATE_BYTES bytes, the magic, a known placement); on
 * PC_OK *update gets it, on PC_EFORMAT it is untouched. */
int pc_rt__update_parse(const uint8_t *msg, size_t len, int *update, char *err, size_t errlen);

/* ---- warmup: the codec's default warm-up, once at start -----------------------------------
 * The workers may give the codec its default warm-up after every rank parsed --compress
 * (pc_worker_warm_codec: the binding's optimizer, Adam or AdamW on the servers, any but SGD
 * on the workers); the servers validate and aggregate by the same spec, so worker 0 tells
 * them, first of all its messages. A run whose spec is the flags' never sends it. */

#define PC_RT_WARMUP_MAGIC 0x31575050u /* "PPW1" as little-endian bytes */
#define PC_RT_WARMUP_BYTES 8

/* Encode the warm-up's iterations into buf[0..PC_RT_WARMUP_BYTES). */
void pc_rt__warmup_encode(uint8_t *buf, int warmup);

/* Validate a warm-up message (PC_RT_WARMUP_BYTES bytes, the magic, exactly
 * PC_CONFIG_ADAM_WARMUP iterations: the only one a worker sends); on PC_OK *warmup gets
 * it, on PC_EFORMAT it is untouched. */
int pc_rt__warmup_parse(const uint8_t *msg, size_t len, int *warmup, char *err, size_t errlen);

/* ---- clip and norm: clipping by the global norm (groups), one iteration's -------------
 * TAG_CLIP carries a worker's max-norm of an iteration that may clip (0: it does not),
 * TAG_NORM the norm the servers found back to the workers. Both are u64 iteration, f64
 * value. Whether the iteration is one that may clip is the receiver's check. */

#define PC_RT_CLIP_BYTES 16

/* Encode iteration it and value v (a max-norm, or a norm) into buf[0..PC_RT_CLIP_BYTES). */
void pc_rt__clip_encode(uint8_t *buf, uint64_t it, double v);

/* Validate a TAG_CLIP message (PC_RT_CLIP_BYTES bytes, a max-norm that is 0 or above 0,
 * +inf allowed, NaN refused); on PC_OK *it and *max_norm get its fields, on PC_EFORMAT
 * both are untouched. */
int pc_rt__clip_parse(const uint8_t *msg, size_t len, uint64_t *it, double *max_norm, char *err,
                      size_t errlen);

/* Validate a TAG_NORM message (PC_RT_CLIP_BYTES bytes, a norm not below 0: +inf and NaN
 * allowed, the norm of a gradient that is not finite, as torch returns it); on PC_OK *it
 * and *norm get its fields, on PC_EFORMAT both are untouched. */
int pc_rt__norm_parse(const uint8_t *msg, size_t len, uint64_t *it, double *norm, char *err,
                      size_t errlen);

/* ---- done: a worker's last message to each server ------------------------------------ */

#define PC_RT_DONE_BYTES 4
/* Largest signal number a worker may report (Linux's real-time signals end at 64). */
#define PC_RT_MAX_SIGNAL 64

/* Encode the signal that stopped the job (0..PC_RT_MAX_SIGNAL; 0: none) into
 * buf[0..PC_RT_DONE_BYTES). */
void pc_rt__done_encode(uint8_t *buf, int signal);

/* Validate an end message (PC_RT_DONE_BYTES bytes, signal 0..PC_RT_MAX_SIGNAL); on PC_OK
 * *signal gets the signal, on PC_EFORMAT it is untouched. */
int pc_rt__done_parse(const uint8_t *msg, size_t len, int *signal, char *err, size_t errlen);

/* ---- ckpt: a checkpoint request --------------------------------------------------------- */

#define PC_RT_CKPT_BYTES 8

/* Encode a request for the checkpoint of iteration boundary it into
 * buf[0..PC_RT_CKPT_BYTES). */
void pc_rt__ckpt_req_encode(uint8_t *buf, uint64_t it);

/* Validate a checkpoint request (PC_RT_CKPT_BYTES bytes); on PC_OK *it gets the iteration,
 * on PC_EFORMAT it is untouched. Whether the iteration is the one the server is at is the
 * server's check. */
int pc_rt__ckpt_req_parse(const uint8_t *msg, size_t len, uint64_t *it, char *err, size_t errlen);

/* ---- the order chunks travel in (no message: the worker's queue) ----------------------
 * A worker's folded chunks wait in this queue for compression. FORWARD order is a binary
 * min-heap on the chunk id: chunks are numbered in forward order, so the chunk the next
 * forward pass needs first leaves first, and a front layer's chunk overtakes back layers'
 * chunks queued before it (backward produces the first layer's gradient last). FIFO order
 * is a ring. The order changes when a chunk travels, never what it carries. One thread
 * owns a queue. */
typedef struct rt_queue {
    int *slot;      /* cap entries, the caller's */
    size_t cap;     /* the most chunks queued at once */
    size_t head, n; /* fifo: the ring's first slot; both: the entries queued */
    bool forward;   /* min-heap (forward order) instead of a ring */
} rt_queue_t;

/* Queue chunk id (the queue holds fewer than cap). */
void pc_rt__queue_push(rt_queue_t *q, int id);

/* Take the next chunk: the lowest id (forward) or the oldest (fifo). The queue must not be
 * empty. */
int pc_rt__queue_pop(rt_queue_t *q);

/* The chunk pc_rt__queue_pop would take, left queued. The queue must not be empty. */
int pc_rt__queue_peek(const rt_queue_t *q);

#pragma GCC visibility pop

#endif /* PC_RUNTIME_PROTO_H */
