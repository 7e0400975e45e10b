/* pc_cost: a cost model that predicts the iteration time of data-parallel training, for the
 * dense allreduce and each parameter-server mode, from rates measured on the spot.
 *
 * What it is for. Whether compression on parameter servers pays depends on the model, the
 * number of workers, the servers, the network and how fast this machine compresses; the
 * end-to-end benchmark measures it for 1 and 2 workers only. This module extrapolates: it
 * takes what one worker's machine measured (per-layer forward and backward times, each
 * codec's time and bytes per element, the server's aggregation and update rates, the link's
 * bandwidth and latency) and predicts one iteration for W workers and S servers. `pc-bench
 * model` measures and prints the tables; a later `pc-train --mode auto` can call it at
 * start-up. doc/scaling.md states every formula and assumption; in short:
 *
 *   - Time runs from the start of one backward pass to the start of the next. Backward of
 *     layer l (forward order, 1..L) ends at E_l = sum of bwd over layers l..L; a chunk is
 *     ready when the lowest layer it holds is done (pc_plan's chunks, as the runtime cuts
 *     them). The next forward runs layer l once every chunk first needed there is back:
 *     t = max(t, updates of layer l) + fwd_l, from t = end of backward. iter = that t.
 *   - allreduce: one communication thread allreduces chunks in the order they become
 *     ready (worker_allreduce.c), each 2(W-1)/W * 4n/B + 2(W-1) alpha, then steps n
 *     parameters locally.
 *   - parameter servers: the worker's compressor thread (pipelined: beside backprop,
 *     lowest chunk id first among those ready, as --priority forward; inline: right after
 *     the layer's backward, on the backprop thread, which waits) compresses each chunk;
 *     the push crosses the worker's uplink (m/B) and the owning server's downlink, which
 *     carries all W workers' pushes (W m/B); the server aggregates W messages and steps
 *     (dense: every element; sparse: the union of the W supports, expected
 *     n (1 - (1 - d)^W) for density d); the pull (dense n floats, or the changed entries when
 *     fewer than a quarter, as --pull auto) crosses the server's uplink (W p/B) and the
 *     worker's downlink (p/B).
 *   - Every resource after the first serves chunks in the order the worker handed them on
 *     (a fixed order per prediction): finish = max(ready, previous finish) + duration, a
 *     max-plus system, so a prediction never gets faster when a rate gets worse.
 *   - powersgd (mode ps-powersgd-pipelined): a matrix is one chunk (pc_plan's whole_rows)
 *     that crosses the links twice: round 1 (fold, P_w = M Q) when the compressor takes it;
 *     the server adds W P_w and orthonormalises (rows x rank^2), P^ comes back; round 2
 *     (Q_w = M^T P^) runs on the compressor thread as soon as P^ is in, before any other
 *     chunk's round 1; the server adds W Q_w and steps the matrix row by row; Q comes back
 *     and the compressor thread steps the worker's copy (finish) before the forward may use
 *     it. Its compressor thus picks by arrival time, and a faster link can delay another
 *     chunk's round 1 (a list-scheduling anomaly, up to 7 % slower on test_cost's model):
 *     the max-plus argument above covers the one-round modes only. Other chunks go dense, momentum
 * on the servers, as in ps-none.
 *   - a pool of compressor threads (--compressors N; pc_cost_predict_pool): the pipelined
 *     compressor stays one serial resource whose every duration (compression; powersgd's
 *     round 2 and finish too) is divided by the pool's speed-up 1 + (N - 1) e, e the pool
 *     efficiency (pc_cost_cfg_t.pool_efficiency: each thread beyond the first adds e of one
 *     thread's speed; 1, perfect division, unless measured, e.g. from `pc-bench compress
 *     --threads N`'s speed-up s as (s - 1) / (N - 1)). The runtime deals contiguous ranges
 *     of chunks to the threads (pc_plan_deal), so a thread's chunks become ready together
 *     and the division is an approximation: it assumes the pool is as busy as one faster
 *     thread would be. The inline modes and the allreduce have no pool (N = 1).
 *
 * Pure: no MPI, no clock, no threads; pc_cost_predict allocates only its scratch. The
 * measuring helpers (pc_cost_measure_*, src/cost/cost_measure.c) run the real codecs, the
 * server's aggregation and the optimizer on this thread; the link is measured with
 * pc_comm_pingpong (pc_comm.h). */
#ifndef PC_COST_H
#define PC_COST_H

#include <stdbool.h>
#include <stddef.h>

#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The modes predicted: X(NAME, "spelling", e2e), in enum order; e2e is the mode's number
 * in scripts/bench/e2e.sh (doc/benchmarks.md), so a prediction sits beside a measurement.
 *   1 allreduce           dense MPI_Allreduce per chunk, local SGD step (--mode allreduce)
 *   2 ps-none             servers, no compression (--compress none)
 *   3 ps-topk-inline      top-k, compressed on the backprop thread (--pipeline off)
 *   4 ps-topk-pipelined   top-k on the compressor thread (the defaults)
 *   5 ps-dgc-pipelined    DGC on the compressor thread
 *   6 ps-topk-servermom   top-k, momentum on the servers (topk:momentum=0 --momentum 0.9):
 *                         the server steps and pushes back every parameter
 *   8 ps-powersgd-pipelined  powersgd on the compressor thread, the run's momentum on the
 *                         servers: each matrix in two rounds (P_w, then Q_w once P^ is
 *                         back), the other chunks dense (e2e.sh's 7 is --mode auto) */
#define PC_COST_MODE_TABLE(X)                                                                      \
    X(ALLREDUCE, "allreduce", 1)                                                                   \
    X(PS_NONE, "ps-none", 2)                                                                       \
    X(PS_TOPK_INLINE, "ps-topk-inline", 3)                                                         \
    X(PS_TOPK_PIPELINED, "ps-topk-pipelined", 4)                                                   \
    X(PS_DGC_PIPELINED, "ps-dgc-pipelined", 5)                                                     \
    X(PS_TOPK_SERVERMOM, "ps-topk-servermom", 6)                                                   \
    X(PS_POWERSGD_PIPELINED, "ps-powersgd-pipelined", 8)

typedef enum pc_cost_mode {
#define PC_COST_MODE_ENUM(name, text, e2e) PC_COST_##name,
    PC_COST_MODE_TABLE(PC_COST_MODE_ENUM)
#undef PC_COST_MODE_ENUM
        PC_COST_MODES
} pc_cost_mode_t;

/* The codecs whose rates the modes use: X(NAME, "spelling"). NONE also serves the chunks
 * under --compress-min-bytes in every mode; TOPK_EF is top-k with momentum=0 (plain error
 * feedback, mode 6); POWERSGD's rate is its round 1 (the rest: pc_cost_lowrank_t). */
#define PC_COST_CODEC_TABLE(X)                                                                     \
    X(NONE, "none") X(TOPK, "topk") X(TOPK_EF, "topk-ef") X(DGC, "dgc") X(POWERSGD, "powersgd")

typedef enum pc_cost_codec {
#define PC_COST_CODEC_ENUM(name, text) PC_COST_CODEC_##name,
    PC_COST_CODEC_TABLE(PC_COST_CODEC_ENUM)
#undef PC_COST_CODEC_ENUM
        PC_COST_CODECS
} pc_cost_codec_t;

/* Largest worker or server count a prediction takes. */
#define PC_COST_MAX_RANKS (1 << 20)
/* Largest pool a prediction takes: the runtime's (PC_CONFIG_COMPRESSORS_MAX). */
#define PC_COST_MAX_COMPRESSORS 64

/* A link, the same for every rank (full duplex: each direction carries bandwidth). */
typedef struct pc_cost_link {
    double bandwidth; /* bytes per second, > 0 (+infinity allowed: no transfer time) */
    double latency;   /* seconds per message (alpha), >= 0 */
} pc_cost_link_t;

/* One codec, measured on a worker (pc_cost_measure_codec; powersgd:
 * pc_cost_measure_lowrank). */
typedef struct pc_cost_codec_rate {
    double compress; /* seconds per element: fold + compress (pc_codec_compress; powersgd:
                      * the fold and round 1, P_w = M Q) */
    double bytes;    /* message payload bytes per element (the pc_wire header is added;
                      * powersgd: both factors' over the matrices measured, for the record:
                      * a prediction counts each matrix's own rows x rank + cols x rank) */
    double density;  /* entries a message carries per element, (0, 1]: 1 for dense codecs */
    bool sparse;     /* messages carry indices: the server may take its O(nnz) path */
} pc_cost_codec_rate_t;

/* The server's work and the pull, measured (pc_cost_measure_server); seconds. */
typedef struct pc_cost_server_rate {
    double agg_dense;   /* per element per message: check and add a dense message */
    double agg_sparse;  /* per entry per message: check and add a sparse message's entries */
    double merge;       /* per index through the union merge (sparse path, workers 2..W) */
    double step_dense;  /* per element: clear the sum, SGD with momentum (dense path; also
                         * the allreduce's local step) */
    double step_sparse; /* per touched entry: plain SGD, then clear it (sparse path) */
    double pull_dense;  /* per element: encode a dense pull (server) and apply it (worker) */
    double pull_sparse; /* per entry: the same for a sparse pull */
} pc_cost_server_rate_t;

/* powersgd's matrices (mode ps-powersgd-pipelined): which chunks are matrices, and the
 * rates of the work beyond round 1 (codec[PC_COST_CODEC_POWERSGD].compress); seconds. */
typedef struct pc_cost_lowrank {
    pc_codec_spec_t spec; /* the powersgd spec predicted: a tensor with rows (its
                           * pc_plan_tensor_t.whole_rows) that pc_codec_lowrank_fits and is
                           * not under --compress-min-bytes is one chunk, sent as factors of
                           * spec.rank; an id other than PC_CODEC_POWERSGD: no matrix (the
                           * mode then sends every chunk dense) */
    double round2;        /* worker, per element: Q_w = M^T P^ */
    double finish;        /* worker, per element: P^ Q^T made row by row, taken from the
                           * residual, and the optimizer's step on its copy */
    double ortho;         /* server, per rows x rank^2: P's orthonormalisation */
    double step;          /* server, per element: P^ Q^T row by row and the step */
} pc_cost_lowrank_t;

/* One parameterised layer, in forward order, with the unparameterised layers that follow
 * it (ReLU, pooling, dropout; the last layer also the loss): seconds. */
typedef struct pc_cost_layer {
    double fwd; /* forward, from the layer's param_wait to the next layer's */
    double bwd; /* backward, from the previous grad_ready (or the start) to this one's */
} pc_cost_layer_t;

typedef struct pc_cost_cfg {
    const pc_cost_layer_t *layers; /* nlayers, forward order */
    int nlayers;
    const pc_plan_tensor_t *tensors; /* ntensors, registration (forward) order, as the
                                      * runtime's pc_plan sees them: the buffers decide
                                      * which small tensors share a chunk (NULL: none);
                                      * whole_rows: the tensor's rows as a matrix (0: a
                                      * vector), read for the powersgd mode only */
    const int *tensor_layer;         /* per tensor: its layer, 0..nlayers-1 */
    int ntensors;
    size_t chunk_bytes;        /* --chunk-bytes (>= 4) */
    size_t compress_min_bytes; /* --compress-min-bytes: smaller chunks travel as NONE */
    pc_cost_codec_rate_t codec[PC_COST_CODECS];
    pc_cost_server_rate_t server;
    pc_cost_lowrank_t lowrank; /* the powersgd mode's matrices and rates */
    pc_cost_link_t link;       /* the default link of a prediction */
    double pool_efficiency;    /* a pool's efficiency e (header comment), (0, 1]; 0: 1,
                                * perfect division (assumed, not measured) */
} pc_cost_cfg_t;

/* A prediction for one mode, W workers and S servers. Times in seconds, per iteration. */
typedef struct pc_cost_result {
    double iter;          /* iteration time: compute + exposed */
    double compute;       /* forward + backward */
    double exposed;       /* what is not hidden: compression on the backprop thread (inline)
                           * and the forward's waits for updates */
    double compress;      /* the worker's compression, hidden or not (0: allreduce) */
    double comm_busy;     /* the busiest link direction's transfer time (allreduce: the ring
                           * transfers of all chunks, latency included) */
    double server_busy;   /* the busiest server thread's time (allreduce: the local steps) */
    double bytes_up;      /* bytes one worker sends (allreduce: 2 (W-1)/W of the gradient) */
    double bytes_down;    /* bytes one worker receives */
    int nchunks;          /* chunks of the plan */
    int servers_used;     /* servers that own a chunk (0: allreduce) */
    double compress_busy; /* the compressor's wall time: compress over the pool's speed-up
                           * (pipelined), compress itself (inline; 0: allreduce); the
                           * compressor keeps up where it is at most backward */
    double backward;      /* the backward pass, every layer's bwd summed */
    int compressors;      /* N of the prediction: 1 but for pc_cost_predict_pool's pools */
    int keeps_up;         /* 1 where compress_busy <= backward, else 0 (an int: the struct
                           * has no padding, results compare bytewise) */
} pc_cost_result_t;

typedef struct pc_cost pc_cost_t;

/* A model of cfg: copies the layers and the rates and cuts the tensors into chunks with
 * pc_plan; cfg and what it points to are read during the call only (the tensors' buffers
 * are compared, never dereferenced) and stay the caller's. On success *out is the
 * caller's, to free with pc_cost_destroy. Returns PC_OK, PC_EINVAL (no layers or tensors,
 * a layer index out of range, a negative, NaN or infinite time or rate, a density outside
 * (0, 1], chunk_bytes < 4, a bad link, a tensor whose whole_rows does not divide it, a
 * powersgd spec's rank outside 1..8, a pool efficiency outside [0, 1]) or PC_ENOMEM. On
 * error *out is untouched.
 * Thread-safe (no shared state). */
int pc_cost_create(const pc_cost_cfg_t *cfg, pc_cost_t **out);
/* Free c (NULL is accepted); no pc_cost_predict on c may be running. */
void pc_cost_destroy(pc_cost_t *c);

/* Predict one iteration of mode for `workers` W and `servers` S (ignored by the
 * allreduce, where 0 is accepted) over link (NULL: cfg's). Chunks are spread over the S
 * servers by pc_plan (largest first to the least loaded). Returns PC_OK, PC_EINVAL (mode
 * out of range, W or S outside 1..PC_COST_MAX_RANKS, a bad link) or PC_ENOMEM; *out is
 * written on PC_OK only. c is not modified: thread-safe. */
int pc_cost_predict(const pc_cost_t *c, pc_cost_mode_t mode, int workers, int servers,
                    const pc_cost_link_t *link, pc_cost_result_t *out);

/* Whether mode compresses on a pipelined compressor thread, which a pool may replace
 * (every parameter-server mode but ps-topk-inline). Pure. */
bool pc_cost_mode_pooled(pc_cost_mode_t mode);

/* The speed-up of a pool of n threads at efficiency e (0: 1): 1 + (n - 1) e; 1 for n <= 1.
 * Pure. */
double pc_cost_pool_speedup(int n, double efficiency);

/* pc_cost_predict with a pool of `compressors` N threads (1..PC_COST_MAX_COMPRESSORS; above
 * 1 only for pc_cost_mode_pooled modes, the runtime's rule): the pipelined compressor's
 * durations divided by c's pool speed-up (pc_cost.h's header). N = 1 is pc_cost_predict,
 * bit for bit. Returns PC_OK, pc_cost_predict's errors, or PC_EINVAL (N out of range, a
 * pool for a mode without one); *out on PC_OK only. Thread-safe. */
int pc_cost_predict_pool(const pc_cost_t *c, pc_cost_mode_t mode, int workers, int servers,
                         const pc_cost_link_t *link, int compressors, pc_cost_result_t *out);

/* The pool a mode needs: the least N in 1..max whose predicted compress_busy fits under
 * the backward pass (compress_busy <= backward: the compressor keeps up with the
 * gradients), else max; 1 for a mode without a pool. *n gets N and *out its prediction.
 * Returns PC_OK, or pc_cost_predict_pool's errors (max outside 1..PC_COST_MAX_COMPRESSORS:
 * PC_EINVAL); *n and *out on PC_OK only. Thread-safe. */
int pc_cost_pool_size(const pc_cost_t *c, pc_cost_mode_t mode, int workers, int servers,
                      const pc_cost_link_t *link, int max, int *n, pc_cost_result_t *out);

/* Predictions of every candidate mode for one job, and the fastest. */
typedef struct pc_cost_choice {
    pc_cost_mode_t best;                  /* the candidate with the highest rate */
    bool candidate[PC_COST_MODES];        /* predicted: asked for, and a layout exists */
    int workers[PC_COST_MODES];           /* W of the mode's prediction */
    pc_cost_result_t pred[PC_COST_MODES]; /* the predictions (candidates only) */
    double rate[PC_COST_MODES];           /* W / iter: samples per second per sample of
                                           * one worker's batch (throughput) */
} pc_cost_choice_t;

/* Predict each mode whose bit is set in candidates (bit m: mode m) for a job of `ranks`
 * ranks of which `servers` serve in the parameter-server modes: the allreduce with
 * W = ranks workers (every rank computes), a parameter-server mode with W = ranks -
 * servers and S = servers (skipped when either is below 1); and choose the mode that
 * trains the most samples per second, W / iter (equal rates: the lower mode). Modes
 * with different W differ in global batch; the rate compares them by throughput.
 * Returns PC_OK, or PC_EINVAL (bad arguments, no candidate with a layout) or a
 * pc_cost_predict error; *out is written on PC_OK only. Thread-safe. */
int pc_cost_choose(const pc_cost_t *c, unsigned candidates, int ranks, int servers,
                   const pc_cost_link_t *link, pc_cost_choice_t *out);

/* The chunks of c's plan, and the elements of all of them. Thread-safe. */
int pc_cost_nchunks(const pc_cost_t *c);
size_t pc_cost_nelems(const pc_cost_t *c);

/* Ring allreduce of `bytes` bytes over W workers: 2 (W-1)/W * bytes / bandwidth
 * + 2 (W-1) * latency seconds (0 for W = 1). Pure. */
double pc_cost_ring(double bytes, int workers, const pc_cost_link_t *link);
/* Expected size of the union of W independent random supports of density d over n
 * entries: n (1 - (1 - d)^W). Pure. */
double pc_cost_union(double n, double density, int workers);

/* The mode's spelling ("ps-topk-pipelined") and its number in scripts/bench/e2e.sh (1..6);
 * "?" and 0 outside the table. Static strings; thread-safe. */
const char *pc_cost_mode_name(int mode);
int pc_cost_mode_e2e(int mode);
/* A mode from its spelling or its e2e number ("4"). PC_OK or PC_EINVAL (*out untouched). */
int pc_cost_mode_parse(const char *text, pc_cost_mode_t *out);
/* The codec slot's spelling ("topk-ef"), or "?". Static string; thread-safe. */
const char *pc_cost_codec_name(int codec);

/* ---- measuring (src/cost/cost_measure.c): the real code paths, timed on this thread -------- */

/* Time `spec` (seed set by the caller) compressing nchunks consecutive chunks of grad
 * (chunk i: chunk_n[i] elements, following chunk i-1), each with a codec state of its
 * own, in passes over all of them as the compressor thread makes one per iteration: one
 * untimed pass (it touches the states' pages), then reps timed ones; compress = the
 * median pass over the elements (pc_codec_compress: fold, then compress); bytes and
 * density from the last pass's messages. grad is read only. Returns PC_OK, PC_EINVAL (no
 * chunks, a chunk of 0 or more than PC_CODEC_MAX_N elements, reps < 1), PC_ENOMEM, or the
 * codec's error (with a message in err). Thread-safe. */
int pc_cost_measure_codec(const pc_codec_spec_t *spec, const float *grad, const size_t *chunk_n,
                          int nchunks, int reps, pc_cost_codec_rate_t *out, char *err,
                          size_t errlen);

/* Time powersgd (spec, seed set by the caller; its warmup= is ignored: every pass
 * compresses) on nmat matrices (matrix i: grads[i], n[i] elements of rows[i] rows, each one
 * pc_codec_lowrank_fits takes), each with a state of its own, in passes as the compressor
 * thread makes one per iteration (one untimed, then reps timed; medians), per matrix: the
 * fold and round 1; the server's orthonormalisation of that P (one worker's); round 2; the
 * server's rows of P^ Q^T and SGD with momentum on a scratch copy of the parameters; the
 * worker's finish with that Q (pc_codec_lowrank_finish and the same step). *rate gets round
 * 1 (compress), the factors' bytes per element and density 1; lr's round2, finish, ortho
 * and step are written (lr->spec is not). grads are read only. Returns PC_OK, PC_EINVAL (no
 * matrices, one that does not fit, reps < 1, a spec other than powersgd), PC_ENOMEM, or the
 * codec's error (PC_ERANGE: a non-finite gradient), with a message in err. Thread-safe. */
int pc_cost_measure_lowrank(const pc_codec_spec_t *spec, const float *const *grads, const size_t *n,
                            const size_t *rows, int nmat, int reps, pc_cost_codec_rate_t *rate,
                            pc_cost_lowrank_t *lr, char *err, size_t errlen);

/* How pc_cost_measure_codecs found the plan. */
typedef struct pc_cost_chunks {
    int nchunks;     /* chunks of the plan */
    int ncompressed; /* those of at least compress_min_bytes: the compressed codecs' */
    int nmatrices;   /* tensors that are powersgd's matrices (pc_cost_lowrank_t.spec) */
    size_t elements; /* all chunks' elements */
    size_t largest;  /* the largest chunk's elements (pc_cost_measure_server's n) */
} pc_cost_chunks_t;

/* Every codec of specs (PC_COST_CODECS of them, in PC_COST_CODEC_TABLE's order, seeds
 * set by the caller) on the gradients of the tensors (registration order; each .grad
 * read, never written) as the runtime chunks them (pc_plan, chunk_bytes, one server):
 * the element-wise codecs on the chunks of at least compress_min_bytes (on all chunks when
 * none is), NONE on all chunks, each with pc_cost_measure_codec and reps; POWERSGD on the
 * tensors that are its matrices (whole_rows: the tensor's rows; pc_codec_lowrank_fits and
 * not under compress_min_bytes) with pc_cost_measure_lowrank, into its slot and *lowrank
 * (lowrank->spec = that spec; no matrix: every rate 0, density 1). The chunks' data are
 * first copied end to end into a buffer of this call's (a chunk may span small tensors;
 * tensors need not be adjacent). out gets PC_COST_CODECS rates, *chunks the plan's counts.
 * Returns PC_OK, PC_EINVAL (no tensors, a tensor without gradient or of 0 elements, rows
 * that do not divide a tensor, chunk_bytes < 4, reps < 1), PC_ENOMEM or a codec's error,
 * with a message in err. Thread-safe. */
int pc_cost_measure_codecs(const pc_plan_tensor_t *tensors, int ntensors, size_t chunk_bytes,
                           size_t compress_min_bytes, const pc_codec_spec_t *specs, int reps,
                           pc_cost_codec_rate_t *out, pc_cost_lowrank_t *lowrank,
                           pc_cost_chunks_t *chunks, char *err, size_t errlen);

/* Time the server's and the pull's per-element work on chunks of n elements (n >= 1024)
 * of synthetic heavy-tailed gradients, in passes over `total` elements (>= n: the
 * server's share, its state then as cold as the server finds it; at most 1 GiB of state),
 * reps timed passes after an untimed one (medians): a dense message checked and added (the
 * server's pc_rt__grad_check and _apply); eight top-k 1 % messages of different supports
 * checked and aggregated sparsely (pc_rt__grad_aggregate_sparse; the union merge is the
 * time of eight less eight times that of one, per index merged); clearing the sum and SGD
 * with momentum on all n; plain SGD on the union; dense and sparse pulls encoded and
 * applied (pc_rt__pull_encode, pc_rt__pull_apply). Returns PC_OK, PC_EINVAL, PC_ENOMEM or
 * PC_ERANGE (with a message in err). Thread-safe. */
int pc_cost_measure_server(size_t n, size_t total, int reps, pc_cost_server_rate_t *out, char *err,
                           size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* PC_COST_H */
