/* codec_impl.h: what the codec files share (private to src/codec/: other folders use
 * pc_codec.h, or codec_internal.h where they must).
 *
 * A codec is a pc_codec_spec_t plus an ops table. pc_codec.c owns the generic parts:
 * parsing specs, headers, sizes, stats, the checks every message gets; each codec file
 * supplies, per codec: the largest payload for n elements, compress (fill the payload and
 * the header's entries/scale/flags), validate (every byte of a payload, writing nothing)
 * and apply (add a validated payload into a dense buffer). The objects (struct pc_codec,
 * struct pc_codec_state) are defined here; codec_internal.h, which this includes, holds
 * what the server and the device codec call besides pc_codec.h. */
#ifndef PC_CODEC_IMPL_H
#define PC_CODEC_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_select.h"
#include "pipecompress/pc_wire.h"
#include "codec_internal.h"

/* Library-private although prefixed: declared hidden, so libpipecompress.so does not export
 * them (src/libpipecompress.map exports every other pc_* name). */
#pragma GCC visibility push(hidden)

typedef struct codec_ops {
    size_t (*max_payload)(const pc_codec_t *c, size_t n);
    /* Fill payload[0..cap) (cap >= max_payload) and h->entries, h->payload, h->scale,
     * h->flags. grad is the chunk's gradient, or NULL when pc_codec_fold already folded it
     * into st (residual with error feedback, stage without); st is the chunk's state. */
    int (*compress)(pc_codec_t *c, pc_codec_state_t *st, const float *grad, pc_wire_header_t *h,
                    uint8_t *payload, size_t cap);
    /* Check a payload whose header passed the generic checks; PC_EFORMAT + err if bad. */
    int (*validate)(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                    char *err, size_t errlen);
    /* Add scale * values of a validated payload into dense[0..h->n). May fail only with
     * PC_ENOMEM, and then before writing anything. */
    int (*apply)(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                 float scale, float *dense);
    /* Sparsifiers only (NULL for the dense codecs): apply, and also store the h->entries
     * indices the values went to in idx[0..h->entries), strictly ascending. */
    int (*apply_indices)(const pc_codec_t *c, const pc_wire_header_t *h, const uint8_t *payload,
                         float scale, float *dense, uint32_t *idx);
    /* Optional codec-specific fold, called for every fold of the codec's states: the
     * momentum correction (dgc; topk and randomk with momentum > 0), powersgd's fold with
     * round 1's product. A state it has nothing of its own for (no momentum; a chunk that
     * is not a matrix) it hands to pc_codec__fold_plain. NULL: always the plain fold. */
    int (*fold)(const pc_codec_t *c, pc_codec_state_t *st, const float *grad);
} codec_ops_t;

struct pc_codec {
    pc_codec_spec_t spec;
    const codec_ops_t *ops;
    pc_codec_stats_t stats;
    /* Compression scratch (one thread at a time), grown on demand. */
    pc_select_t *sel;
    uint32_t *idx;
    size_t idx_cap;
    float *tmp;
    size_t tmp_cap;
    uint64_t *bits;
    size_t bits_cap; /* in words */
};

struct pc_codec_state {
    uint32_t chunk;
    size_t n;
    float *residual; /* n, error feedback; NULL when off */
    float *momentum; /* n, the momentum correction's u (dgc; topk, randomk with momentum > 0) */
    float *stage;    /* n, the folded copy of the gradient when error feedback is off */
    uint64_t steps;
    int folded; /* pc_codec_fold's outcome waiting for compress_folded: PC_CODEC_FOLD_* */
    /* powersgd (pc_codec_state_create_matrix; else rows 0 and NULL): */
    size_t rows, cols;
    float *q;       /* cols x rank: Q, the warm start */
    float *phat;    /* rows x rank: the server's P^ of the current step, or P_w after the fold */
    float *qt;      /* rank x cols: Q^T, made from q by each fold (q may be restored by a caller) */
    int round;      /* the rounds sent of the current step: 0, 1 (P_w) or 2 (Q_w) */
    bool projected; /* the last fold made P_w = M Q into phat (codec_lowrank.c's fold) */
};

extern const codec_ops_t pc_codec_ops_none, pc_codec_ops_fp16, pc_codec_ops_topk, pc_codec_ops_dgc,
    pc_codec_ops_randomk, pc_codec_ops_threshold, pc_codec_ops_qsgd, pc_codec_ops_terngrad,
    pc_codec_ops_efsign, pc_codec_ops_powersgd;

/* powersgd (codec_lowrank.c): a new state st of a matrix of `rows` rows (st->n elements,
 * pc_codec_lowrank_fits) gets its Q, drawn and orthonormalised, and its P^. PC_OK, or
 * PC_ENOMEM with what it allocated left in st for pc_codec_state_destroy. */
int pc_codec__lowrank_state_init(const pc_codec_t *c, pc_codec_state_t *st, size_t rows);

/* The plain fold (codec_common.c): grad added to the residual (error feedback), or copied to
 * the stage (without), and checked finite. PC_OK, PC_ERANGE (NaN or infinity), PC_ENOMEM. */
int pc_codec__fold_plain(const pc_codec_t *c, pc_codec_state_t *st, const float *grad);

/* Scratch growers: PC_OK or PC_ENOMEM. */
int pc_codec__reserve_idx(pc_codec_t *c, size_t n);
int pc_codec__reserve_tmp(pc_codec_t *c, size_t n);
int pc_codec__reserve_bits(pc_codec_t *c, size_t nbits);

/* v += g over n elements (when g is not NULL), and whether all of v is finite. */
bool pc_codec__fold_finite(float *v, const float *g, size_t n);

/* A payload of `count` binary32 values (codec none, a powersgd factor): PC_OK when every
 * value is finite, else PC_EFORMAT naming the first bad one as "chunk C: WHAT I is not
 * finite". Thread-safe. */
int pc_codec__f32s_check(uint32_t chunk, const uint8_t *payload, uint32_t count, const char *what,
                         char *err, size_t errlen);
/* dense[i] += scale * value i, for the `count` binary32 values of a checked payload. */
void pc_codec__f32s_add(const uint8_t *payload, uint32_t count, float scale, float *dense);
/* v[0..n) as n binary32 values at payload (little-endian, the wire's order), and whether all
 * of them are finite (codec none's compress: the copy and the check in one pass). The build
 * `simd` (at most pc_codec__simd()'s) changes only the speed: every build writes the same
 * bytes. Large payloads are written with non-temporal stores, fenced before the return.
 * Pure apart from payload; thread-safe on disjoint buffers. */
bool pc_codec__f32s_put_at(int simd, const float *v, size_t n, uint8_t *payload);

/* The values a codec encodes: the residual (error feedback), the gradient, or the stage
 * holding the folded gradient when grad is NULL. */
float *pc_codec__source(const pc_codec_t *c, pc_codec_state_t *st, const float *grad);

#pragma GCC visibility pop

#endif /* PC_CODEC_IMPL_H */
