/* elem_base.h: what the per-element headers (codec_elem.h, layers_elem.h) are written in,
 * so that a kernel's arithmetic compiles twice: under nvcc as __host__ __device__ code the
 * kernels call, and under gcc (C11) for the CPU unit tests that check it against the CPU
 * codecs and layers (tests/unit/test_codec_elem.c, test_layers_elem.c). No GPU is needed
 * to run all of a kernel but its launch geometry, its atomics and its CUB calls.
 *
 * The only difference between the two compilations is here: on the device the _rn
 * intrinsics (never contracted into a fused multiply-add) and the bit casts; on the host
 * plain C operators, which give the same IEEE results because the library and the tests are
 * built with -ffp-contract=off (the C code's rule), and memcpy for the casts. Private to the
 * library; C and CUDA. */
#ifndef PC_ELEM_BASE_H
#define PC_ELEM_BASE_H

#include <stddef.h>
#include <stdint.h>
#ifndef __CUDACC__
#include <math.h>
#include <stdbool.h>
#include <string.h>
#endif

#ifdef __CUDACC__
#define PC_ELEM static __host__ __device__ __forceinline__
#else
#define PC_ELEM static inline
#endif

/* The device pass of nvcc (__CUDA_ARCH__) uses the intrinsics; gcc and nvcc's host pass the
 * portable forms. */
#if defined(__CUDA_ARCH__)
#define PC_FADD(a, b) __fadd_rn((a), (b))
#define PC_FSUB(a, b) __fsub_rn((a), (b))
#define PC_FMUL(a, b) __fmul_rn((a), (b))
#define PC_FDIV(a, b) __fdiv_rn((a), (b))
#define PC_DADD(a, b) __dadd_rn((a), (b))
#define PC_U2F(x)     __uint2float_rn(x)
#else
#define PC_FADD(a, b) ((float)(a) + (float)(b))
#define PC_FSUB(a, b) ((float)(a) - (float)(b))
#define PC_FMUL(a, b) ((float)(a) * (float)(b))
#define PC_FDIV(a, b) ((float)(a) / (float)(b))
#define PC_DADD(a, b) ((double)(a) + (double)(b))
#define PC_U2F(x)     ((float)(uint32_t)(x))
#endif

PC_ELEM uint32_t pc_elem_bits(float x)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
#endif
}

PC_ELEM float pc_elem_float(uint32_t u)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
#endif
}

/* curand_uniform's formula, as pc_philox_uniform: x * 2^-32 + 2^-33 (the product is exact). */
PC_ELEM float pc_elem_uniform(uint32_t x)
{
    return PC_FADD(PC_FMUL(PC_U2F(x), 2.3283064365386963e-10f), 1.1641532182693481e-10f);
}

#endif /* PC_ELEM_BASE_H */
