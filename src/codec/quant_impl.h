/* quant_impl.h: the quantisers' element loops (qsgd, terngrad, efsign; codec_quant.c) by
 * instruction set, private to the library (codec_dense.c computes each message's scale and
 * hands the elements to these) and to test_codec_quant, which compiles codec_quant.c itself.
 *
 * Every function below runs the build `simd` (PC_CODEC__SIMD_*, at most pc_codec__simd()'s:
 * a wider one would fault on this CPU). Every build gives the bits of the baseline's scalar
 * loops: the same Philox word for each element, the same float operations in the same
 * order, the same packed bytes; test_codec_quant holds each to a scalar reference. Pure
 * apart from the buffers named; thread-safe on disjoint buffers. */
#ifndef PC_QUANT_IMPL_H
#define PC_QUANT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "pipecompress/pc_wire.h"
#include "simd_impl.h"

#pragma GCC visibility push(hidden)

/* One chunk to encode. Borrowed pointers, nothing owned: v[0..n) is read, res[0..n) (may be
 * v itself) gets res[i] -= the value element i is sent as, payload[0..packed_bytes(n, b))
 * is written whole, pad bits zero. n must fit a header's uint32. */
typedef struct pc_codec__quant {
    const float *v;   /* (n,) the values to encode */
    float *res;       /* (n,) the residual (error feedback), or NULL */
    size_t n;         /* elements */
    float scale;      /* qsgd: the L2 norm; terngrad: max |v|; efsign: mean |v| */
    int levels;       /* qsgd's s, 1..PC_CODEC_MAX_LEVELS */
    uint64_t seed;    /* the Philox key (qsgd, terngrad) */
    uint64_t subseq;  /* pc_philox_subsequence(iteration, chunk) */
    uint8_t *payload; /* the packed codes */
} pc_codec__quant_t;

/* Bytes of n codes of b bits. */
static inline size_t pc_codec__packed_bytes(size_t n, unsigned b)
{
    return (n * b + 7) / 8;
}

/* qsgd's code width for s levels: codes 0..2s in ceil(log2(2s + 1)) bits (2..8 bits for
 * s <= 127). */
static inline unsigned pc_codec__qsgd_bits(int s)
{
    unsigned b = 1;
    while ((1u << b) < (unsigned)(2 * s + 1))
        b++;
    return b;
}

/* Encode q (codec_dense.c's comments give each codec's rule). */
void pc_codec__qsgd_encode_at(int simd, const pc_codec__quant_t *q);
void pc_codec__terngrad_encode_at(int simd, const pc_codec__quant_t *q);
void pc_codec__efsign_encode_at(int simd, const pc_codec__quant_t *q);

/* The bits of max |v[i]| over v[0..n) (0, +0's, for n = 0): terngrad's scale, and its
 * finiteness check in the same pass: at least 0x7f800000 when some v[i] is infinite or NaN.
 * (Magnitudes compare as their bit patterns do: sign cleared, IEEE order is integer order.) */
uint32_t pc_codec__absmax_bits_at(int simd, const float *v, size_t n);

/* dense[i] += scale * (value of code i) over the n codes of a validated payload whose
 * header scale is hscale (qsgd with s levels; terngrad; efsign). */
void pc_codec__qsgd_apply_at(int simd, const uint8_t *payload, uint32_t n, int s, float hscale,
                             float scale, float *dense);
void pc_codec__terngrad_apply_at(int simd, const uint8_t *payload, uint32_t n, float hscale,
                                 float scale, float *dense);
void pc_codec__efsign_apply_at(int simd, const uint8_t *payload, uint32_t n, float hscale,
                               float scale, float *dense);

/* Validate h->n codes of b bits (b <= 8): entries, payload size, each code <= max_code,
 * zero pad bits. PC_OK, or PC_EFORMAT with "chunk C: NAME ..." in err naming the first
 * problem (the same text in every build). */
int pc_codec__check_codes_at(int simd, const pc_wire_header_t *h, const uint8_t *payload,
                             unsigned b, uint32_t max_code, const char *name, char *err,
                             size_t errlen);

#pragma GCC visibility pop

#endif /* PC_QUANT_IMPL_H */
