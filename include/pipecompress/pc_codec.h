/* pc_codec: gradient compressors ("codecs") with error feedback, and their messages.
 *
 * A codec turns one chunk of a gradient (n floats) into a self-describing message (pc_wire)
 * and back. The sender keeps per-chunk state (pc_codec_state_t: the error-feedback
 * residual, the momentum correction's u, the iteration count for warm-up); the receiver
 * needs none but the codec's configuration. Codecs:
 *
 *   none        dense fp32
 *   fp16        dense binary16, round to nearest even
 *   topk        exactly k = ceil(ratio * n) largest magnitudes; ties to the lower index;
 *               momentum correction (momentum=0.9 by default, as dgc's)
 *   dgc         Deep Gradient Compression: sampled threshold, momentum correction and
 *               factor masking, local clipping, density warm-up
 *   randomk     k indices drawn by Philox from (seed, iteration, chunk): only values travel;
 *               momentum correction (momentum=0.9 by default)
 *   threshold   every |v| >= tau
 *   qsgd        s levels, stochastic rounding (Philox), L2-norm scaling; unbiased
 *   terngrad    {-1, 0, +1} * max|v|, stochastic; unbiased
 *   efsign      1-bit signs times the mean magnitude
 *   powersgd    PowerSGD (Vogels et al. 2019): a matrix chunk as two thin factors of rank R,
 *               in two rounds through the server (below, "PowerSGD"); error feedback on
 *
 * Error feedback (on by default for the biased codecs topk, dgc, randomk, threshold and
 * efsign): the codec compresses v = residual + gradient and keeps residual = v - sent, so
 * nothing is lost, only delayed. For sparsifiers sent + new residual == old residual +
 * gradient holds exactly, bit for bit.
 *
 * Momentum correction (Lin et al., DGC; the key momentum= of dgc, topk and randomk, 0.9 by
 * default): the workers keep u = momentum * u + gradient and accumulate u instead of the
 * gradient (sent + new residual == old residual + u, bit for bit); u is zeroed where
 * values were sent (momentum factor masking). The servers then apply plain SGD
 * (pc_runtime_check_config makes their --momentum 0) and touch only what was sent.
 * momentum=0 is the plain error-feedback codec exactly (topk, randomk: no u array); it
 * needs ef=on (with ef=off the default momentum is 0).
 *
 * Threads: a pc_codec_t holds scratch memory for compression, so one thread at a time may
 * compress with it (each compressor thread creates its own); pc_codec_decode_add and the
 * other const functions are thread-safe. Everything is deterministic: the same spec, seed,
 * iteration, chunk and input give the same message bytes. */
#ifndef PC_CODEC_H
#define PC_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipecompress/pc_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wire ids: stable, they travel in every message header. */
typedef enum pc_codec_id {
    PC_CODEC_NONE = 0,
    PC_CODEC_FP16 = 1,
    PC_CODEC_TOPK = 2,
    PC_CODEC_DGC = 3,
    PC_CODEC_RANDOMK = 4,
    PC_CODEC_THRESHOLD = 5,
    PC_CODEC_QSGD = 6,
    PC_CODEC_TERNGRAD = 7,
    PC_CODEC_EFSIGN = 8,
    PC_CODEC_POWERSGD = 9,
    PC_CODEC_COUNT
} pc_codec_id_t;

typedef enum pc_codec_values { PC_VALUES_FP32 = 0, PC_VALUES_FP16 = 1 } pc_codec_values_t;
typedef enum pc_codec_index { PC_INDEX_U32 = 0, PC_INDEX_DELTA = 1 } pc_codec_index_t;

/* Largest chunk a codec accepts: indices and counts travel as u32. */
#define PC_CODEC_MAX_N 0xFFFFFFF0u
/* Most quantisation levels for qsgd: codes take at most 8 bits (2s + 1 <= 255). */
#define PC_CODEC_MAX_LEVELS 127

/* A codec's configuration, from a spec string such as "topk:ratio=0.01,values=fp16".
 * Fields a codec does not use keep their defaults. */
typedef struct pc_codec_spec {
    pc_codec_id_t id;
    double ratio;             /* topk, dgc, randomk: fraction of elements kept, (0, 1] */
    double sample;            /* dgc: fraction sampled to estimate the threshold, (0, 1] */
    double momentum;          /* dgc, topk, randomk: momentum of the correction, [0, 1) */
    double clip;              /* dgc: local gradient clipping L2 norm; 0 = off */
    int warmup;               /* dgc, topk: compress calls of exponentially decreasing density
                                 (ratio^((t+1)/W) for call t < W); powersgd: iterations
                                 sent dense; 0 = off */
    int dense;                /* dgc, topk: the first `dense` compress calls send every entry
                                 (a dense warm-up, 1-bit Adam's), warmup's calls then follow;
                                 0 = off */
    double tau;               /* threshold: |v| >= tau is sent, > 0 */
    int levels;               /* qsgd: s, 1..PC_CODEC_MAX_LEVELS */
    bool ef;                  /* error feedback */
    pc_codec_values_t values; /* sparsifiers: value encoding */
    pc_codec_index_t index;   /* topk, dgc, threshold: index encoding */
    uint64_t seed;       /* randomk, qsgd, terngrad, powersgd: Philox key (the caller's --seed) */
    int rank;            /* powersgd: the factors' rank, 1..PC_LOWRANK_MAX_RANK (8) */
    double min_gain;     /* powersgd: a matrix goes dense unless its factors are more than
                            this many times smaller than it (min-rank-gain, torch's
                            min_compression_rate), >= 1 */
    bool momentum_given; /* the text set momentum= (else momentum is the codec's default) */
    bool warmup_given;   /* the text set warmup= (else warmup is the codec's default, 0) */
    bool dense_given;    /* the text set dense= */
} pc_codec_spec_t;

/* Parse a spec: NAME[:KEY=VALUE[,KEY=VALUE...]]. Keys: ratio, sample, momentum, clip,
 * warmup, tau, levels, rank, min-rank-gain (per codec, see above; momentum=M > 0 with ef=off is
 * refused, and ef=off makes the default momentum 0) and, where they apply, ef=on|off,
 * values=fp32|fp16, index=u32|delta. Unknown names or keys, keys the codec does not take,
 * malformed or out-of-range values are PC_EUSAGE with a one-line message naming the
 * problem ("topk: ratio=1.5 is out of range [0, 1]"). On error *out is untouched. The seed
 * is left 0. Thread-safe. */
int pc_codec_spec_parse(const char *text, pc_codec_spec_t *out, char *err, size_t errlen);

/* Write the canonical spec string (every parameter the codec uses) into buf. */
void pc_codec_spec_format(const pc_codec_spec_t *spec, char *buf, size_t len);

/* The momentum of the codec's momentum correction on the workers (the momentum key of
 * dgc, topk and randomk), or 0 for a codec without one. Pure. */
double pc_codec_worker_momentum(const pc_codec_spec_t *spec);

/* The CPU work of compressing a chunk of n elements with spec, in half passes over n
 * (2 n for a codec whose cost is one streaming pass): what a worker's compressor pool
 * deals its chunks by (pc_plan_deal). dgc adds 5 per element of its threshold sample (its
 * selection costs about 2.5 streaming passes per sampled element, measured by pc-bench
 * compress across chunk sizes), which is the whole chunk up to 128 / ratio elements.
 * Deterministic, pure; thread-safe. */
uint64_t pc_codec_work(const pc_codec_spec_t *spec, size_t n);

/* Name of a codec id ("topk"), or "?" . Static string. */
const char *pc_codec_name(int id);

typedef struct pc_codec pc_codec_t;
typedef struct pc_codec_state pc_codec_state_t;

/* Counters a codec keeps across compress calls (for metrics and tests). */
typedef struct pc_codec_stats {
    uint64_t messages;    /* compress calls */
    uint64_t entries;     /* entries sent in all messages */
    uint64_t bytes;       /* message bytes produced */
    uint64_t dgc_sampled; /* dgc: sampled threshold accepted as is */
    uint64_t dgc_adapted; /* dgc: accepted after one threshold adaptation */
    uint64_t dgc_exact;   /* dgc: fell back to exact top-k */
} pc_codec_stats_t;

/* Create a codec from a (valid) spec; the spec is copied. Returns PC_OK, PC_EINVAL (bad
 * spec) or PC_ENOMEM. */
int pc_codec_create(const pc_codec_spec_t *spec, pc_codec_t **out);
/* Free c and its scratch (NULL is accepted). No state of c may be in use. */
void pc_codec_destroy(pc_codec_t *c);
const pc_codec_spec_t *pc_codec_spec(const pc_codec_t *c);
pc_codec_stats_t pc_codec_stats(const pc_codec_t *c);

/* Largest message compress can produce for a chunk of n elements (header included): the
 * size of the caller's buffer. Thread-safe. */
size_t pc_codec_max_bytes(const pc_codec_t *c, size_t n);

/* Per-chunk sender state for chunk `chunk` of n elements (1..PC_CODEC_MAX_N, and few enough
 * that the largest message, pc_codec_max_bytes, fits in 2^32 - 1 bytes; else PC_EINVAL): residual
 * (zeroed) when error feedback is on, momentum (zeroed) for dgc and for topk and randomk
 * with momentum > 0. Owned by the caller; one thread at a time. */
int pc_codec_state_create(const pc_codec_t *c, uint32_t chunk, size_t n, pc_codec_state_t **out);
/* Free st (NULL is accepted); the codec it was made with may be destroyed before or after. */
void pc_codec_state_destroy(pc_codec_state_t *st);
size_t pc_codec_state_n(const pc_codec_state_t *st);
/* The residual (n floats) or NULL when error feedback is off; the momentum (dgc; topk and
 * randomk with momentum > 0) or NULL.
 * The state owns them; callers may read them or restore them (checkpoints). */
float *pc_codec_state_residual(pc_codec_state_t *st);
float *pc_codec_state_momentum(pc_codec_state_t *st);
/* Compress calls made with this state (drives dgc warm-up); settable for resume. */
uint64_t pc_codec_state_steps(const pc_codec_state_t *st);
void pc_codec_state_set_steps(pc_codec_state_t *st, uint64_t steps);

/* Compress grad (st's n floats; not modified, may alias nothing in st) for `iteration`
 * into out[0..cap), cap >= pc_codec_max_bytes(c, n); *len gets the message size. Folds the
 * gradient into the residual first and leaves the residual holding what was not sent.
 * Errors: PC_EINVAL (cap too small, sizes), PC_ERANGE (the gradient or residual holds NaN
 * or infinity: training has diverged; the residual then holds the non-finite values).
 * Uses c's scratch: one thread at a time per codec. */
int pc_codec_compress(pc_codec_t *c, pc_codec_state_t *st, const float *grad, uint64_t iteration,
                      void *out, size_t cap, size_t *len);

/* The two halves of pc_codec_compress, for a caller that wants the gradient buffer back
 * before compression runs (the worker pipeline releases it to backprop in between):
 * pc_codec_fold folds grad into st (residual += grad with error feedback, the momentum
 * correction when the state has momentum, or a copy into the state's stage without) and checks it
 * is finite (else PC_ERANGE); afterwards the caller may overwrite grad. pc_codec_compress_folded
 * then compresses what was folded: PC_EINVAL if nothing was since the last compress (a
 * second call after one fold too), PC_ERANGE if the fold found NaN or infinity (nothing is
 * sent). fold + compress_folded give the same bytes and state as pc_codec_compress. One thread at a
 * time per state; fold does not touch c's scratch, so it may run on another thread than compress
 * (never concurrently on the same state). */
int pc_codec_fold(const pc_codec_t *c, pc_codec_state_t *st, const float *grad);
int pc_codec_compress_folded(pc_codec_t *c, pc_codec_state_t *st, uint64_t iteration, void *out,
                             size_t cap, size_t *len);

/* What the receiver expects of a message. */
typedef struct pc_codec_expect {
    uint32_t chunk;
    uint32_t n;
    uint64_t iteration;
    bool any_iteration; /* accept any iteration (iteration is then ignored) */
    /* powersgd only: the round (1: P_w, 2: Q_w) and its factor's entries (rows x rank or
     * cols x rank); a powersgd message is refused without them. */
    int round;
    uint32_t entries;
} pc_codec_expect_t;

/* The checks of pc_codec_decode_add without the decoding: PC_OK, or PC_EFORMAT with a
 * reason. Thread-safe. */
int pc_codec_validate(const pc_codec_t *c, const void *msg, size_t len,
                      const pc_codec_expect_t *want, pc_wire_header_t *hdr, char *err,
                      size_t errlen);

/* Validate msg[0..len) completely against c's configuration and `want` (codec, flags,
 * chunk, n, iteration, entry count, payload size, every index < n and strictly increasing,
 * every value and the scale finite, every code in range), then add scale * decoded values
 * into dense[0..n). On any problem returns PC_EFORMAT with a one-line reason in err and
 * writes nothing to dense. hdr (optional) receives the header. Thread-safe. */
int pc_codec_decode_add(const pc_codec_t *c, const void *msg, size_t len,
                        const pc_codec_expect_t *want, float scale, float *dense,
                        pc_wire_header_t *hdr, char *err, size_t errlen);

/* ---- PowerSGD: the two-round codec ------------------------------------------------------
 * A chunk that is a matrix (rows x cols = n, row-major: a weight tensor as its first
 * dimension x the product of the others; pc_codec_lowrank_fits) travels in two rounds
 * (pc_lowrank.h has the numerics):
 *   round 1: fold (M = residual + gradient, pc_codec_fold, which makes P_w = M Q in the
 *            same pass: pc_lowrank_fold_project), then pc_codec_lowrank_p sends P_w (Q:
 *            the previous iteration's aggregate, first drawn from Philox with (seed,
 *            chunk), the same on every worker; a Q the caller writes counts from the next
 *            fold on);
 *   the server sums the P_w in worker order and orthonormalises the sum: P^;
 *   round 2: pc_codec_lowrank_q takes P^ (written into pc_codec_state_lowrank_phat) and
 *            sends Q_w = M^T P^;
 *   the server's Q = sum Q_w / W; the update is P^ Q^T;
 *   pc_codec_lowrank_finish(Q): residual = M - P^ Q^T (error feedback against the
 *            aggregate, as torch's powerSGD_hook), and Q is kept for the next iteration.
 * The first `warmup` compress steps send M dense instead (pc_codec_lowrank_dense: a message
 * of codec none, residual zeroed), as torch's start_powerSGD_iter. Factor messages carry
 * codec powersgd, flags 0 in round 1 and PC_WIRE_F_ROUND2 in round 2, entries = the
 * factor's floats, binary32. A powersgd state is made by pc_codec_state_create_matrix;
 * pc_codec_compress refuses the codec (PC_EINVAL). One thread at a time per state. */

/* Whether a chunk of n elements whose tensor has `rows` rows travels as factors under spec
 * (powersgd): rows >= 2 divides n, cols = n / rows >= 2, rank <= min(rows, cols), and
 * n > min_gain x (rows + cols) x rank (torch's _should_compress). Anything else goes
 * dense. Pure. */
bool pc_codec_lowrank_fits(const pc_codec_spec_t *spec, size_t rows, size_t n);

/* A powersgd state for chunk `chunk`, a rows x (n / rows) matrix that
 * pc_codec_lowrank_fits: the residual (ef=on), Q (drawn as above), P^. Errors as
 * pc_codec_state_create's; PC_EINVAL for another codec or a matrix that does not fit. */
int pc_codec_state_create_matrix(const pc_codec_t *c, uint32_t chunk, size_t rows, size_t n,
                                 pc_codec_state_t **out);
/* The matrix's rows (0 for a state of another codec). */
size_t pc_codec_state_rows(const pc_codec_state_t *st);
/* Q (cols x rank: the warm start; checkpointed) and P^ (rows x rank: where the caller writes
 * the server's P^ before pc_codec_lowrank_q); NULL for a state of another codec. */
float *pc_codec_state_lowrank_q(pc_codec_state_t *st);
float *pc_codec_state_lowrank_phat(pc_codec_state_t *st);

/* Round 1 on a folded state: P_w = M Q into out[0..cap) (cap >= pc_codec_max_bytes(c, n)).
 * PC_EINVAL (nothing folded, not a matrix state, cap), PC_ERANGE (the fold or P found NaN
 * or infinity). */
int pc_codec_lowrank_p(pc_codec_t *c, pc_codec_state_t *st, uint64_t iteration, void *out,
                       size_t cap, size_t *len);
/* Round 2, after round 1 and with P^ written: Q_w = M^T P^ into out. Errors as round 1's. */
int pc_codec_lowrank_q(pc_codec_t *c, pc_codec_state_t *st, uint64_t iteration, void *out,
                       size_t cap, size_t *len);
/* A row of a matrix's update, handed to the caller by pc_codec_lowrank_finish: row i of
 * P^ Q^T (cols floats, valid during the call only). */
typedef void (*pc_codec_row_fn)(void *ud, size_t row, const float *update);

/* The end of the step, after round 2: q_agg (cols x rank, the server's Q) becomes Q; row by
 * row, P^ Q^T is made once (pc_lowrank_row: the bits the server makes), taken from the
 * residual (error feedback: M - P^ Q^T) and handed to fn (may be NULL) with ud: the
 * caller's optimizer step on that row. PC_EINVAL out of order; PC_ENOMEM (scratch). */
int pc_codec_lowrank_finish(pc_codec_t *c, pc_codec_state_t *st, const float *q_agg,
                            pc_codec_row_fn fn, void *ud);
/* A warm-up step on a folded state: M dense as a message of codec none, then the residual
 * zeroed (the step is exact). Errors as round 1's. */
int pc_codec_lowrank_dense(pc_codec_t *c, pc_codec_state_t *st, uint64_t iteration, void *out,
                           size_t cap, size_t *len);
/* Whether the compress step numbered `steps` (pc_codec_state_steps before it) is a warm-up
 * step. Pure. */
bool pc_codec_lowrank_warm(const pc_codec_spec_t *spec, uint64_t steps);

#ifdef __cplusplus
}
#endif
#endif /* PC_CODEC_H */
