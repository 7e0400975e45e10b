/* codec_internal.h: the codec layer's internal interface, for the library's code outside
 * src/codec/ that must work below pc_codec.h (hidden: libpipecompress.so does not export it,
 * and it is not installed). Who includes it, and why:
 *   - src/runtime/runtime_proto.c, the server's receive path: it reads a message's header
 *     once, routes by it, checks the payload (pc_codec__check), then adds it without
 *     checking again (pc_codec__apply, pc_codec__apply_indices): pc_codec_decode_add split
 *     in two, so that a message is checked before any worker's is summed;
 *   - src/gpu/pc_devcodec.c and cuda/codec_impl.cuh (cuda/codec_*.cu), the device codec:
 *     its messages must equal the CPU codecs' to the bit, so it computes the same schedule
 *     (pc_codec__k, the dgc plan, the canonical sum), writes the same header flags, keeps
 *     its states' fold outcomes as a CPU state does (PC_CODEC_FOLD_*), counts into the CPU
 *     codec's stats and reads a powersgd state's round.
 * Everything else uses pc_codec.h; the codec files themselves include codec_impl.h, which
 * includes this. Thread-safety is stated per function; the objects stay opaque here. */
#ifndef PC_CODEC_INTERNAL_H
#define PC_CODEC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_wire.h"

/* Library-private although prefixed: declared hidden, so libpipecompress.so does not export
 * them (src/libpipecompress.map exports every other pc_* name). */
#pragma GCC visibility push(hidden)

/* pc_codec_state_t.folded: nothing folded since the last compress, a fold that succeeded,
 * a fold that found NaN or infinity (compress_folded then says PC_ERANGE again). */
enum { PC_CODEC_FOLD_NONE = 0, PC_CODEC_FOLD_OK = 1, PC_CODEC_FOLD_NONFINITE = 2 };

/* The codec's counters, for the device codec to count its messages as pc_codec_compress
 * counts the CPU's (pc_codec_stats reads them). The pointer is c's; the thread that
 * compresses with c is the only one that may write through it. */
pc_codec_stats_t *pc_codec__stats_counters(pc_codec_t *c);

/* A state's PC_CODEC_FOLD_* outcome waiting for its compress, and a powersgd state's rounds
 * sent of the current step (0, 1 or 2; 0 for any other state). Read by the state's thread. */
int pc_codec__state_folded(const pc_codec_state_t *st);
int pc_codec__state_round(const pc_codec_state_t *st);

/* Whether a state of this spec keeps the momentum correction's u (dgc; topk and randomk
 * with momentum > 0). Pure. */
bool pc_codec__has_momentum(const pc_codec_spec_t *s);

/* Whether a chunk of n elements is allowed: 1 <= n <= PC_CODEC_MAX_N and the largest
 * message's payload fits the header's 32-bit count. Pure. */
bool pc_codec__n_ok(const pc_codec_t *c, size_t n);

/* The header flags a message of this codec carries (values/index encodings). */
uint16_t pc_codec__flags(const pc_codec_t *c);

/* k for a ratio: ceil(ratio * n) clamped to n, computed identically by sender and receiver. */
size_t pc_codec__k(double ratio, size_t n);

/* topk's k at the compress call with `steps` calls made before: under warmup=W the density
 * warm-up's (dgc's schedule), else ceil(ratio * n). Shared by the CPU codec and the CUDA
 * one, so both send the same count. Pure. */
size_t pc_codec__topk_k(const pc_codec_t *c, uint64_t steps, size_t n);

/* The receiving half of pc_codec_validate, for a header that pc_wire_header_read already
 * accepted from the message whose payload (h->payload bytes) starts at payload: codec,
 * chunk, n, iteration (against want), flags, then the codec's check of every payload byte.
 * PC_OK or PC_EFORMAT with a reason; writes nothing. Lets a receiver read a header once,
 * route by it, then check (runtime_proto.c). Thread-safe. */
int pc_codec__check(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                    const pc_codec_expect_t *want, char *err, size_t errlen);

/* Add scale * the values of a payload that pc_codec__check accepted (same codec, same
 * header, bytes unchanged) into dense[0..h->n), without checking again. Fails only with
 * PC_ENOMEM (and a reason), before writing. Thread-safe. */
int pc_codec__apply(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                    float scale, float *dense, char *err, size_t errlen);

/* Whether c's messages carry indices (sent, or regenerated as randomk's): the sparsifiers
 * topk, dgc, randomk, threshold. Then pc_codec__apply_indices works. Thread-safe. */
bool pc_codec__sparse(const pc_codec_t *c);

/* pc_codec__apply for a sparsifier (pc_codec__sparse), also writing the message's
 * h->entries indices, strictly ascending, into idx (room for h->entries). Fails only with
 * PC_ENOMEM (and a reason), before writing; PC_EINVAL for a dense codec. Thread-safe. */
int pc_codec__apply_indices(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                            float scale, float *dense, uint32_t *idx, char *err, size_t errlen);

/* The canonical sum of a codec's reductions (qsgd's norm, efsign's mean, dgc's clipping
 * norm): what every implementation of the codecs, CPU or CUDA, computes bit for bit, so
 * that their messages are equal. In double precision, terms f(x[i]) = x[i]^2 or |x[i]|
 * (both exact in double), in this order:
 *   block b (elements [2048 b, 2048 b + 2048)): lane l (0..255) adds, starting from +0.0,
 *     the terms of elements 2048 b + l + 256 j for j = 0..7 that exist; then the lanes are
 *     folded as a tree: for s = 128, 64, ..., 1: lane[l] += lane[l + s] for l < s;
 *     p[b] = lane[0];
 *   the sum: lane l adds p[l], p[l + 256], p[l + 512], ... in order, starting from +0.0;
 *     the same tree; the result is lane[0].
 * A CUDA block of 256 threads computes each level (cuda/codec_api.cu); the CPU builds
 * (codec_common.c) keep 8 or 4 lanes a vector register. */
#define PC_CODEC_SUM_LANES 256
#define PC_CODEC_SUM_BLOCK 2048
typedef enum pc_codec_sum_op { PC_CODEC_SUM_SQUARES = 0, PC_CODEC_SUM_ABS = 1 } pc_codec_sum_op_t;
double pc_codec__sum(const float *x, size_t n, pc_codec_sum_op_t op);
/* The same sum by the build `simd` (simd_impl.h's PC_CODEC__SIMD_*, at most what this CPU
 * runs; pc_codec__sum passes pc_codec__simd()): every build gives the same bits
 * (test_codec_sum holds each to the definition). Pure; thread-safe. */
double pc_codec__sum_at(int simd, const float *x, size_t n, pc_codec_sum_op_t op);

/* dgc's schedule for one compress call with `steps` calls made before: k (the density's
 * count), the accepted window [lo, hi] of a sampled threshold's count, cap (the most
 * entries a message holds), and, when 0 < k < n, the sample's size ns and rank ks (else
 * both 0). Sample j is element pc_codec__dgc_sample_index(j, n, ns); a count cnt outside
 * the window re-aims the rank to pc_codec__dgc_reaim(ks, k, cnt, ns), once. Shared by the
 * CPU codec and the CUDA one. Pure. */
typedef struct pc_codec_dgc_plan {
    size_t k, lo, hi, cap, ns, ks;
} pc_codec_dgc_plan_t;
void pc_codec__dgc_plan(const pc_codec_t *c, uint64_t steps, size_t n, pc_codec_dgc_plan_t *p);
size_t pc_codec__dgc_sample_index(size_t j, size_t n, size_t ns);
/* out[j] = v[pc_codec__dgc_sample_index(j, n, ns)] for j < ns (ns <= n), without a division
 * per sample (test_codec holds it to the index function). The caller owns both buffers;
 * pure, thread-safe on distinct outputs. */
void pc_codec__dgc_sample(const float *v, size_t n, size_t ns, float *out);
size_t pc_codec__dgc_reaim(size_t ks, size_t k, size_t cnt, size_t ns);

/* The h->entries indices of a message pc_codec__check accepted from a sparsifier
 * (pc_codec__sparse), ascending, into idx: parsed, or regenerated (randomk). PC_OK, or
 * PC_ENOMEM before writing; PC_EINVAL for a dense codec. Thread-safe. */
int pc_codec__indices(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                      uint32_t *idx);

/* Largest finite binary16: fp16 values saturate here rather than overflow to infinity. */
#define PC_CODEC_F16_MAX 65504.0f

#pragma GCC visibility pop

#endif /* PC_CODEC_INTERNAL_H */
