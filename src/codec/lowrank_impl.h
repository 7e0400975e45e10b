/* lowrank_impl.h: pc_lowrank's kernels by instruction set, private to the library and its
 * tests (test_lowrank compiles pc_lowrank.c itself to reach them).
 *
 * pc_lowrank_fold_project and pc_lowrank_row run the widest build the CPU takes (checked on
 * every call: a load and a compare). Every build does the same float operations in the same
 * order (pc_lowrank.c: the lanes of the dot products), so each gives the same bits; the
 * tests hold each build to a scalar reference bit for bit. Pure, thread-safe. */
#ifndef PC_LOWRANK_IMPL_H
#define PC_LOWRANK_IMPL_H

#include <stddef.h>

#include "simd_impl.h"

#pragma GCC visibility push(hidden)

/* pc_lowrank_fold_project and pc_lowrank_row in the build `simd` (PC_CODEC__SIMD_*, at most
 * pc_codec__simd()'s: a wider one would fault on this CPU). */
int pc_lowrank__fold_project_at(int simd, float *m, const float *g, size_t rows, size_t cols,
                                const float *qt, int rank, float *p);
void pc_lowrank__row_at(int simd, float *out, const float *p_row, const float *qt, size_t cols,
                        int rank);

#pragma GCC visibility pop

#endif /* PC_LOWRANK_IMPL_H */
