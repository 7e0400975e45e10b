/* simd_impl.h: which build of a codec kernel this CPU runs, for the kernels compiled more
 * than once (pc_select's collect pass, pc_lowrank's products): the build's baseline (SSE2
 * on x86-64), AVX2, or AVX-512F. Private to the library (and the tests that compile its
 * sources). Pure and thread-safe: libgcc's CPU model is set before main. */
#ifndef PC_SIMD_IMPL_H
#define PC_SIMD_IMPL_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PC_CODEC__X86 1 /* kernels built for AVX2 and AVX-512 too, chosen at run time */
#endif

#define PC_CODEC__SIMD_NONE   0
#define PC_CODEC__SIMD_AVX2   1
#define PC_CODEC__SIMD_AVX512 2

/* The widest build this CPU runs: PC_CODEC__SIMD_*. */
static inline int pc_codec__simd(void)
{
#ifdef PC_CODEC__X86
    if (__builtin_cpu_supports("avx512f"))
        return PC_CODEC__SIMD_AVX512;
    if (__builtin_cpu_supports("avx2"))
        return PC_CODEC__SIMD_AVX2;
#endif
    return PC_CODEC__SIMD_NONE;
}

#endif /* PC_SIMD_IMPL_H */
