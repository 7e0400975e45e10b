/* pc_devcodec: the codecs on a CUDA device: compress a gradient that lives in device memory
 * and add a message into a device buffer, with the same message bytes and state as the CPU
 * codecs (pc_codec), which stay the reference.
 *
 * A device codec is a pc_codec_t (its spec, its checks of received messages) plus, on a
 * device, scratch memory allocated once and grown to the largest chunk seen. Its states
 * (pc_devcodec_state_t) hold a chunk's residual and momentum in the codec's memory. All
 * pointers this API calls "device" point into the codec's memory: memory of its CUDA device
 * (pc_devcodec_alloc), or, for a codec on the CPU, ordinary host memory. A codec is on the
 * CPU when asked (PC_DEVCODEC_CPU) or when PC_DEVCODEC_ANY finds no usable device (CUDA not
 * built in, no driver or too old a one, no device; pc_cuda_status says which): it then
 * runs the CPU codec itself, so callers written against this API run everywhere.
 *
 * Equal bytes: for the same spec, seed, iteration, chunk, steps and input, a message is
 * byte for byte the one pc_codec_compress writes and the state afterwards holds the same
 * bits (a NaN left in a state after PC_ERANGE is a NaN, its payload may differ). The
 * kernels (cuda/codec_*.cu) round as the C code does (no fused multiply-add), draw from
 * cuRAND's Philox in pc_philox.h's layout, and reduce in the canonical order of
 * doc/wire-format.md ("Sums").
 *
 * Streams: compress, fold, decode-add and copy take a stream (a cudaStream_t passed as
 * pc_devcodec_stream_t; NULL is the legacy default stream) and run their kernels on it,
 * after the work already queued there; they return when their results are on the host or
 * in the destination (they synchronise the stream), also on an error. States are made,
 * read and written on the legacy default stream. A codec on the CPU ignores streams. This
 * header needs neither MPI nor a CUDA header: plain gcc or nvcc compile a file that
 * includes it alone (pipecompress.h, which includes every header, needs mpi.h).
 *
 * Errors: the calls of the training loop (compress, compress_folded, fold) take no err
 * buffer, as pc_codec_compress; pc_devcodec_error(c) gives the last one's message. The
 * other calls that can fail for a reason worth telling take char *err, size_t errlen.
 *
 * Threads: one thread at a time per codec for compress, compress_folded and fold (scratch);
 * decode-add, alloc and copy are thread-safe (decode-add's device buffers are
 * stream-ordered allocations of the call). Each state: one thread at a time. */
#ifndef PC_DEVCODEC_H
#define PC_DEVCODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_devcodec pc_devcodec_t;
typedef struct pc_devcodec_state pc_devcodec_state_t;
typedef void *pc_devcodec_stream_t; /* a cudaStream_t, or NULL */

/* Where a codec runs: a CUDA device ordinal >= 0, or one of these. */
#define PC_DEVCODEC_CPU (-1) /* the CPU codec, whatever devices exist */
#define PC_DEVCODEC_ANY (-2) /* device 0 when there is one, else the CPU (powersgd: the CPU) */

/* Create a codec for spec (copied) on `device`. PC_OK; PC_EINVAL (bad spec or device
 * number, or powersgd on a CUDA device: it has no kernels yet, below); PC_ENODEV when a
 * device >= 0 was asked for and is not usable (err says why: CUDA not built in, the runtime's own
 * reason such as an old driver, or fewer devices); PC_ECUDA (a CUDA call failed), PC_ENOMEM. err
 * gets one line on failure. */
int pc_devcodec_create(const pc_codec_spec_t *spec, int device, pc_devcodec_t **out, char *err,
                       size_t errlen);
/* Free c and its scratch (NULL is accepted). Its states may outlive it. */
void pc_devcodec_destroy(pc_devcodec_t *c);
/* The device the codec runs on, or PC_DEVCODEC_CPU. */
int pc_devcodec_device(const pc_devcodec_t *c);
/* The CPU codec behind it (spec, stats, validation of messages); owned by c. */
const pc_codec_t *pc_devcodec_codec(const pc_devcodec_t *c);
/* Counters as pc_codec_stats (messages, entries, bytes, dgc's paths). */
pc_codec_stats_t pc_devcodec_stats(const pc_devcodec_t *c);
/* Largest message for a chunk of n elements: pc_codec_max_bytes. */
size_t pc_devcodec_max_bytes(const pc_devcodec_t *c, size_t n);
/* The one-line message of the last failed compress, compress_folded, fold or powersgd round
 * (lowrank_p, _dense, _q, _finish) on c (c's own buffer, overwritten by c's next failure;
 * "" before any). */
const char *pc_devcodec_error(const pc_devcodec_t *c);

/* Memory in the codec's space (cudaMalloc, or malloc on the CPU) and pinned host memory
 * for messages (cudaMallocHost, or malloc). PC_OK, PC_ENOMEM or PC_ECUDA with err; *out
 * untouched on failure. Free with the matching call (NULL is accepted). Thread-safe. */
int pc_devcodec_alloc(const pc_devcodec_t *c, size_t bytes, void **out, char *err, size_t errlen);
void pc_devcodec_free(const pc_devcodec_t *c, void *p);
int pc_devcodec_host_alloc(const pc_devcodec_t *c, size_t bytes, void **out, char *err,
                           size_t errlen);
void pc_devcodec_host_free(const pc_devcodec_t *c, void *p);
/* Copy bytes between host memory and the codec's memory (to_device true: host src to
 * device dst), queued on stream and waited for. PC_OK, PC_EINVAL or PC_ECUDA with err. */
int pc_devcodec_copy(const pc_devcodec_t *c, void *dst, const void *src, size_t bytes,
                     bool to_device, pc_devcodec_stream_t stream, char *err, size_t errlen);

/* Per-chunk state as pc_codec_state_create: residual (zeroed) with error feedback,
 * momentum (zeroed) for dgc and topk/randomk with momentum > 0, in the codec's memory.
 * PC_EINVAL (n is 0, over PC_CODEC_MAX_N, or its largest message would exceed 2^32 - 1
 * bytes), PC_ENOMEM, PC_ECUDA; err says why. */
int pc_devcodec_state_create(pc_devcodec_t *c, uint32_t chunk, size_t n, pc_devcodec_state_t **out,
                             char *err, size_t errlen);
/* Free st (NULL is accepted); its codec may be destroyed before or after. */
void pc_devcodec_state_destroy(pc_devcodec_state_t *st);
size_t pc_devcodec_state_n(const pc_devcodec_state_t *st);
bool pc_devcodec_state_has_residual(const pc_devcodec_state_t *st);
bool pc_devcodec_state_has_momentum(const pc_devcodec_state_t *st);
/* Copy the residual and the momentum (n floats each; pass NULL for one not wanted or not
 * held) to host arrays, or from them (checkpoints, tests). PC_OK; PC_EINVAL when asked for
 * an array the state does not hold; PC_ECUDA; err says why. */
int pc_devcodec_state_get(pc_devcodec_state_t *st, float *residual, float *momentum, char *err,
                          size_t errlen);
int pc_devcodec_state_set(pc_devcodec_state_t *st, const float *residual, const float *momentum,
                          char *err, size_t errlen);
uint64_t pc_devcodec_state_steps(const pc_devcodec_state_t *st);
void pc_devcodec_state_set_steps(pc_devcodec_state_t *st, uint64_t steps);

/* pc_codec_compress on the device: grad is st's n floats in the codec's memory (read only);
 * the message is written into the host buffer out[0..cap), cap >= pc_devcodec_max_bytes
 * (pinned memory from pc_devcodec_host_alloc makes the one copy of the message, never the
 * gradient, run at full speed); *len gets its size. Errors as pc_codec_compress (PC_EINVAL,
 * PC_ERANGE: the residual then holds the non-finite values), plus PC_ECUDA and PC_ENOMEM
 * (device memory); a state made by another codec is PC_EINVAL; pc_devcodec_error says
 * why. */
int pc_devcodec_compress(pc_devcodec_t *c, pc_devcodec_state_t *st, const float *grad,
                         uint64_t iteration, pc_devcodec_stream_t stream, void *out, size_t cap,
                         size_t *len);

/* The two halves of pc_devcodec_compress, as pc_codec_fold and pc_codec_compress_folded:
 * fold grad (device, read only) into st (residual += grad, or the momentum correction) and
 * check it is finite (else PC_ERANGE), after which the caller may reuse grad; then compress
 * what was folded: PC_EINVAL when nothing was since the last compress, PC_ERANGE when the
 * fold found NaN or infinity (nothing is sent). Same bytes and state as
 * pc_devcodec_compress. Error feedback is required (a codec with ef=off keeps no device copy
 * to fold into: PC_EINVAL). One thread at a time per codec for both. */
int pc_devcodec_fold(pc_devcodec_t *c, pc_devcodec_state_t *st, const float *grad,
                     pc_devcodec_stream_t stream);
int pc_devcodec_compress_folded(pc_devcodec_t *c, pc_devcodec_state_t *st, uint64_t iteration,
                                pc_devcodec_stream_t stream, void *out, size_t cap, size_t *len);

/* pc_codec_decode_add into a device buffer: msg[0..len) is a received message in host
 * memory, checked completely on the host first (untrusted bytes never reach a kernel);
 * then scale * its values are added into dense[0..n) in the codec's memory. On any problem
 * PC_EFORMAT with a one-line reason and dense untouched; PC_ECUDA, PC_ENOMEM. hdr
 * (optional) receives the header (zeroed where the message is too short for one).
 * Thread-safe. */
int pc_devcodec_decode_add(const pc_devcodec_t *c, const void *msg, size_t len,
                           const pc_codec_expect_t *want, float scale, float *dense,
                           pc_devcodec_stream_t stream, pc_wire_header_t *hdr, char *err,
                           size_t errlen);

/* ---- PowerSGD: the two-round codec (pc_codec.h, "PowerSGD") ------------------------------
 * The same rounds as pc_codec.h's, for a matrix chunk whose M lives in the codec's memory,
 * with the same bytes and state. On the CPU only for now: a powersgd codec is created on
 * PC_DEVCODEC_CPU (PC_DEVCODEC_ANY chooses it); a CUDA device is refused (PC_EINVAL): it has
 * no kernels. Kernels could not promise these bits as they stand: round 2's product is
 * OpenBLAS's sgemm (pc_lowrank.h), so it would be written out with a fixed order first, as
 * round 1's and the rows are. A matrix chunk's state comes from
 * pc_devcodec_state_create_matrix, and needs error feedback (ef=on, the default: with
 * ef=off the codec keeps no M to fold into, and the caller uses pc_codec on the host);
 * pc_devcodec_fold folds the gradient into M and makes P_w in the same pass, as
 * pc_codec_fold; pc_devcodec_compress and _compress_folded refuse the codec (PC_EINVAL).
 * The factors cross in host memory (P^ in, rows x rank floats; Q in, cols x rank; the
 * messages out), and lowrank_finish hands the update's rows to the caller in host memory
 * (the caller's optimizer steps the host mirror with them; a device would make them on the
 * host from P^ and Q, pc_lowrank_row, and the same bits for the residual on the device).
 * The order of a step is fold, then lowrank_p (or lowrank_dense in a warm-up step, which
 * ends it), lowrank_q, lowrank_finish; a call out of order is refused before it touches
 * anything. Failures: PC_EINVAL (a state that is not a matrix's, a call out of order, a
 * buffer below pc_devcodec_max_bytes), PC_ERANGE (NaN or infinity), PC_ENOMEM (and on a
 * device PC_ECUDA); pc_devcodec_error says which. One thread at a time per codec. */

/* A matrix chunk's state: rows x (n / rows), which pc_codec_lowrank_fits under c's spec.
 * Errors as pc_devcodec_state_create's; PC_EINVAL (with err) for a matrix that does not fit,
 * a codec that is not powersgd, or one with ef=off. */
int pc_devcodec_state_create_matrix(pc_devcodec_t *c, uint32_t chunk, size_t rows, size_t n,
                                    pc_devcodec_state_t **out, char *err, size_t errlen);
/* The matrix's rows (0 for a state of another codec). */
size_t pc_devcodec_state_rows(const pc_devcodec_state_t *st);
/* Round 1 on a folded state (pc_codec_lowrank_p): P_w's message into the host buffer out. */
int pc_devcodec_lowrank_p(pc_devcodec_t *c, pc_devcodec_state_t *st, uint64_t iteration,
                          pc_devcodec_stream_t stream, void *out, size_t cap, size_t *len);
/* A warm-up step on a folded state (pc_codec_lowrank_dense): M dense, the residual zeroed. */
int pc_devcodec_lowrank_dense(pc_devcodec_t *c, pc_devcodec_state_t *st, uint64_t iteration,
                              pc_devcodec_stream_t stream, void *out, size_t cap, size_t *len);
/* Round 2 after round 1 (pc_codec_lowrank_q): phat is the server's P^ (rows x rank floats,
 * host, copied in), Q_w's message goes into out. */
int pc_devcodec_lowrank_q(pc_devcodec_t *c, pc_devcodec_state_t *st, const float *phat,
                          uint64_t iteration, pc_devcodec_stream_t stream, void *out, size_t cap,
                          size_t *len);
/* The end of the step after round 2 (pc_codec_lowrank_finish): q_agg (cols x rank, host)
 * becomes Q; the residual becomes M - P^ Q^T; each row of P^ Q^T is handed to fn (may be
 * NULL) in host memory, valid during the call. */
int pc_devcodec_lowrank_finish(pc_devcodec_t *c, pc_devcodec_state_t *st, const float *q_agg,
                               pc_codec_row_fn fn, void *ud, pc_devcodec_stream_t stream);
/* Copy a matrix state's Q (cols x rank floats, the warm start: checkpoints, the binding) to
 * a host array, or from one. PC_OK; PC_EINVAL for a state that is not a matrix's (on a
 * device also PC_ECUDA); err says why. */
int pc_devcodec_state_get_q(pc_devcodec_state_t *st, float *q, char *err, size_t errlen);
int pc_devcodec_state_set_q(pc_devcodec_state_t *st, const float *q, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* PC_DEVCODEC_H */
