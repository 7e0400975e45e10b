/* fp16_impl.h: the fp16 codec's loops (codec_fp16.c) by instruction set, private to the
 * library (codec_dense.c's fp16 compress, validate and apply call them) and to
 * test_codec_fp16, which compiles codec_fp16.c itself.
 *
 * Every function below runs the build `simd` (PC_CODEC__SIMD_*, at most
 * pc_codec__fp16_simd()'s: a wider one would fault on this CPU). Every build gives the bits
 * of the baseline's scalar loops (pc_wire_f32_to_f16 and pc_wire_f16_to_f32 element by
 * element): the same payload, the same residual, the same sums; test_codec_fp16 holds each
 * build to them. Pure apart from the buffers named; thread-safe on disjoint buffers. */
#ifndef PC_FP16_IMPL_H
#define PC_FP16_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "simd_impl.h"

#ifdef PC_CODEC__X86
#include <cpuid.h>
#endif

#pragma GCC visibility push(hidden)

/* The widest fp16 build this CPU runs: pc_codec__simd()'s, or the baseline on an x86 CPU
 * without F16C (the vector builds convert with VCVTPS2PH and VCVTPH2PS; every CPU with AVX2
 * has them). F16C is read from CPUID leaf 1 (ECX bit 29), not __builtin_cpu_supports:
 * clang 14 does not know "f16c" there. Pure and thread-safe. */
static inline int pc_codec__fp16_simd(void)
{
    int simd = pc_codec__simd();
#ifdef PC_CODEC__X86
    unsigned a, b, c, d;
    if (simd > PC_CODEC__SIMD_NONE && (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_F16C)))
        simd = PC_CODEC__SIMD_NONE;
#endif
    return simd;
}

/* Encode the n values v[0..n) into payload[0..2n): little-endian binary16, clamped to
 * +-PC_CODEC_F16_MAX, rounded to nearest even. With ef, v is the residual: it is folded
 * first (v += g where g is not NULL) and left holding v - the value sent; without ef, v is
 * only read and g is ignored. PC_OK, or PC_ERANGE when a folded value is NaN or infinite:
 * v then holds every value folded (the scalar fold's result) and the payload is
 * unspecified. Borrowed pointers; v and payload must not overlap, g may not alias v. */
int pc_codec__fp16_encode_at(int simd, float *v, const float *g, bool ef, uint8_t *payload,
                             size_t n);

/* The index of the first of the n binary16 values in payload[0..2n) that is infinite or
 * NaN, or n when there is none. */
size_t pc_codec__fp16_check_at(int simd, const uint8_t *payload, size_t n);

/* dense[i] += scale * value i over the n binary16 values of a checked payload (each a
 * product then a sum, rounded to float, as the scalar loop does). */
void pc_codec__fp16_apply_at(int simd, const uint8_t *payload, size_t n, float scale, float *dense);

#pragma GCC visibility pop

#endif /* PC_FP16_IMPL_H */
