/* pc_lowrank: PowerSGD's products, orthonormalisation and residual (pc_lowrank.h). */
#include "pipecompress/pc_lowrank.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <cblas.h>

#include "lowrank_impl.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_philox.h"

/* A column that keeps at most this share of its norm once the earlier columns are taken
 * out lies in their span up to float rounding (float's epsilon is 1.2e-7; sums of many
 * products lose a few digits more): it is dropped rather than blown up into noise. */
#define LOWRANK_DEPENDENT 1e-6

static bool rank_ok(int rank)
{
    return rank >= 1 && rank <= PC_LOWRANK_MAX_RANK;
}

/* [a, a + na) and [b, b + nb), in floats, share an element. */
static bool overlap(const float *a, size_t na, const float *b, size_t nb)
{
    uintptr_t a0 = (uintptr_t)a, b0 = (uintptr_t)b;
    return a0 < b0 + nb * sizeof(float) && b0 < a0 + na * sizeof(float);
}

/* The product's sizes fit BLAS's int and the element counts size_t. */
static bool dims_ok(size_t rows, size_t cols)
{
    return rows > 0 && cols > 0 && rows <= INT32_MAX && cols <= INT32_MAX &&
           rows <= SIZE_MAX / cols;
}

/* The products' common checks: no NULL, rank in 1 .. MAX, sizes BLAS can take, and the
 * output (nout floats) overlapping neither input. */
static bool product_ok(const float *out, size_t nout, const float *a, size_t na, const float *b,
                       size_t nb, size_t rows, size_t cols, int rank)
{
    return out != NULL && a != NULL && b != NULL && rank_ok(rank) && dims_ok(rows, cols) &&
           !overlap(out, nout, a, na) && !overlap(out, nout, b, nb);
}

static bool all_finite(const float *x, size_t n)
{
    float acc = 0.0f; /* x - x is NaN exactly for NaN and infinity */
    for (size_t i = 0; i < n; i++)
        acc += x[i] - x[i];
    return acc == 0.0f;
}

int pc_lowrank_init(float *q, size_t cols, int rank, uint64_t seed, uint64_t stream)
{
    if (q == NULL || cols == 0 || !rank_ok(rank) || cols > SIZE_MAX / (size_t)rank)
        return PC_EINVAL;
    const double two_pi = 6.283185307179586;
    size_t n = cols * (size_t)rank;
    pc_philox_t g;
    pc_philox_init(&g, seed, stream, 0);
    for (size_t i = 0; i < n; i += 2) {
        /* uniforms in (0, 1): never log(0) */
        double u = ((double)pc_philox_next(&g) + 0.5) * 2.3283064365386963e-10;
        double v = ((double)pc_philox_next(&g) + 0.5) * 2.3283064365386963e-10;
        double r = sqrt(-2.0 * log(u));
        q[i] = (float)(r * cos(two_pi * v));
        if (i + 1 < n)
            q[i + 1] = (float)(r * sin(two_pi * v));
    }
    return PC_OK;
}

int pc_lowrank_project(const float *m, size_t rows, size_t cols, const float *q, int rank, float *p)
{
    size_t np = rows * (size_t)rank;
    if (!product_ok(p, np, m, rows * cols, q, cols * (size_t)rank, rows, cols, rank))
        return PC_EINVAL;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, rank, (int)cols, 1.0f, m,
                (int)cols, q, rank, 0.0f, p, rank);
    return all_finite(p, np) ? PC_OK : PC_ERANGE;
}

int pc_lowrank_backproject(const float *m, size_t rows, size_t cols, const float *p, int rank,
                           float *q)
{
    size_t nq = cols * (size_t)rank;
    if (!product_ok(q, nq, m, rows * cols, p, rows * (size_t)rank, rows, cols, rank))
        return PC_EINVAL;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)cols, rank, (int)rows, 1.0f, m,
                (int)cols, p, rank, 0.0f, q, rank);
    return all_finite(q, nq) ? PC_OK : PC_ERANGE;
}

size_t pc_lowrank_work_doubles(size_t rows, int rank)
{
    return rank_ok(rank) && rows <= SIZE_MAX / sizeof(double) / (size_t)rank ? rows * (size_t)rank
                                                                             : 0;
}

int pc_lowrank_orthonormalise(float *p, size_t rows, int rank, double *work)
{
    if (p == NULL || work == NULL || rows == 0 || !rank_ok(rank) ||
        pc_lowrank_work_doubles(rows, rank) == 0)
        return PC_EINVAL;
    if (!all_finite(p, rows * (size_t)rank))
        return PC_ERANGE;
    /* work: column-major, so that each column is contiguous */
    for (size_t i = 0; i < rows; i++)
        for (int c = 0; c < rank; c++)
            work[(size_t)c * rows + i] = p[i * (size_t)rank + (size_t)c];
    for (int c = 0; c < rank; c++) {
        double *v = work + (size_t)c * rows;
        double before = 0.0;
        for (size_t i = 0; i < rows; i++)
            before += v[i] * v[i];
        for (int e = 0; e < c; e++) { /* modified Gram-Schmidt: against the updated v */
            const double *u = work + (size_t)e * rows;
            double dot = 0.0;
            for (size_t i = 0; i < rows; i++)
                dot += u[i] * v[i];
            for (size_t i = 0; i < rows; i++)
                v[i] -= dot * u[i];
        }
        double after = 0.0;
        for (size_t i = 0; i < rows; i++)
            after += v[i] * v[i];
        before = sqrt(before);
        after = sqrt(after);
        double scale = (after > 0.0 && after > LOWRANK_DEPENDENT * before) ? 1.0 / after : 0.0;
        for (size_t i = 0; i < rows; i++)
            v[i] *= scale;
    }
    for (size_t i = 0; i < rows; i++)
        for (int c = 0; c < rank; c++)
            p[i * (size_t)rank + (size_t)c] = (float)work[(size_t)c * rows + i];
    return PC_OK;
}

void pc_lowrank_transpose(float *restrict qt, const float *restrict q, size_t cols, int rank)
{
    for (size_t j = 0; j < cols; j++)
        for (int k = 0; k < rank; k++)
            qt[(size_t)k * cols + j] = q[j * (size_t)rank + k];
}

/* ---- P = (M + G) Q in one pass ---------------------------------------------------------- */

/* Lanes of a row's dot products: element j of the row goes to lane j % LANES, each lane
 * sums in order of j, and the lanes are folded as a tree (s = 8, 4, 2, 1: lane[l] +=
 * lane[l + s]). 16 floats are one AVX-512 register, two AVX2 or four SSE2 registers:
 * every build and CPU does the same float operations in the same order, so the same bits
 * (the build has -ffp-contract=off: no fused multiply-add). */
#define LANES 16

/* Row by row: x = m + g (FOLD; else x = m), m = x, then acc[k][j % LANES] += x * qt[k][j]
 * for k < R. R a constant: the k loops unroll and the accumulators stay in registers.
 * Returns whether every x was finite. */
static inline __attribute__((always_inline)) bool
fold_project_r(float *restrict m, const float *restrict g, size_t rows, size_t cols,
               const float *restrict qt, float *restrict p, int R, bool FOLD)
{
    uint32_t bad[LANES] = {0}; /* per lane, branch-free: the loops vectorise */
    for (size_t i = 0; i < rows; i++) {
        float *restrict mi = m + i * cols;
        const float *restrict gi = FOLD ? g + i * cols : NULL;
        float acc[PC_LOWRANK_MAX_RANK][LANES];
        for (int k = 0; k < R; k++)
            for (int l = 0; l < LANES; l++)
                acc[k][l] = 0.0f;
        size_t j = 0;
        for (; j + LANES <= cols; j += LANES) { /* whole blocks: no branch, so it vectorises */
            float x[LANES];
            for (int l = 0; l < LANES; l++) {
                x[l] = FOLD ? mi[j + l] + gi[j + l] : mi[j + l];
                if (FOLD)
                    mi[j + l] = x[l];
                uint32_t u;
                memcpy(&u, &x[l], sizeof(u));
                bad[l] |= (u & 0x7f800000u) == 0x7f800000u;
            }
#pragma GCC unroll 8
            for (int k = 0; k < R; k++)
                for (int l = 0; l < LANES; l++)
                    acc[k][l] += x[l] * qt[(size_t)k * cols + j + l];
        }
        for (int l = 0; j + (size_t)l < cols; l++) { /* the row's tail: lanes 0 .. */
            float x = FOLD ? mi[j + l] + gi[j + l] : mi[j + l];
            uint32_t u;
            memcpy(&u, &x, sizeof(u));
            bad[l] |= (u & 0x7f800000u) == 0x7f800000u;
            if (FOLD)
                mi[j + l] = x;
            for (int k = 0; k < R; k++)
                acc[k][l] += x * qt[(size_t)k * cols + j + l];
        }
        for (int k = 0; k < R; k++) {
            for (int s = LANES / 2; s > 0; s /= 2)
                for (int l = 0; l < s; l++)
                    acc[k][l] += acc[k][l + s];
            p[i * (size_t)R + (size_t)k] = acc[k][0];
        }
    }
    uint32_t any = 0;
    for (int l = 0; l < LANES; l++)
        any |= bad[l];
    return !any;
}

/* The rank as a constant for the usual ranks (1 .. 4; the others run the generic loop, the
 * same operations in the same order). */
#define FOLD_PROJECT_FN(name, attr)                                                                \
    attr static bool name(float *m, const float *g, size_t rows, size_t cols, const float *qt,     \
                          float *p, int rank)                                                      \
    {                                                                                              \
        if (!g)                                                                                    \
            return fold_project_r(m, NULL, rows, cols, qt, p, rank, false);                        \
        switch (rank) {                                                                            \
        case 1:                                                                                    \
            return fold_project_r(m, g, rows, cols, qt, p, 1, true);                               \
        case 2:                                                                                    \
            return fold_project_r(m, g, rows, cols, qt, p, 2, true);                               \
        case 3:                                                                                    \
            return fold_project_r(m, g, rows, cols, qt, p, 3, true);                               \
        case 4:                                                                                    \
            return fold_project_r(m, g, rows, cols, qt, p, 4, true);                               \
        default:                                                                                   \
            return fold_project_r(m, g, rows, cols, qt, p, rank, true);                            \
        }                                                                                          \
    }

FOLD_PROJECT_FN(fold_project_any, )
#ifdef PC_CODEC__X86
FOLD_PROJECT_FN(fold_project_avx2, __attribute__((target("avx2"))))
FOLD_PROJECT_FN(fold_project_avx512, __attribute__((target("avx512f"))))
#endif

int pc_lowrank__fold_project_at(int simd, float *m, const float *g, size_t rows, size_t cols,
                                const float *qt, int rank, float *p)
{
    size_t nm = rows * cols, np = rows * (size_t)rank;
    if (!product_ok(p, np, m, nm, qt, cols * (size_t)rank, rows, cols, rank) ||
        (g && (overlap(g, nm, m, nm) || overlap(g, nm, p, np))))
        return PC_EINVAL;
    bool ok;
#ifdef PC_CODEC__X86
    if (simd >= PC_CODEC__SIMD_AVX512)
        ok = fold_project_avx512(m, g, rows, cols, qt, p, rank);
    else if (simd == PC_CODEC__SIMD_AVX2)
        ok = fold_project_avx2(m, g, rows, cols, qt, p, rank);
    else
#endif
        ok = fold_project_any(m, g, rows, cols, qt, p, rank);
    (void)simd;
    return ok ? PC_OK : PC_ERANGE;
}

int pc_lowrank_fold_project(float *m, const float *g, size_t rows, size_t cols, const float *qt,
                            int rank, float *p)
{
    return pc_lowrank__fold_project_at(pc_codec__simd(), m, g, rows, cols, qt, rank, p);
}

/* ---- rows of P Q^T ----------------------------------------------------------------------- */

/* A row of P Q^T, element j = 0 + p_0 qt_0j + p_1 qt_1j + ..., each product and sum
 * rounded to float in that order: the same bits whatever R's value is known as, and in
 * every build of the loop (SSE2, AVX2, AVX-512: each element is its own lane). With R a
 * constant (ROW_FN's switch) the k loop unrolls and the j loop vectorises with the sum in
 * a register: 1.6-1.9x the earlier k-outer loops, which stored the row R + 1 times
 * (4096 x 4096 at rank 2, one core: 2.1-2.9 ms against 4.0-4.7). */
static inline __attribute__((always_inline)) void row_r(float *restrict out,
                                                        const float *restrict p_row,
                                                        const float *restrict qt, size_t cols,
                                                        int R)
{
    for (size_t j = 0; j < cols; j++) {
        float u = 0.0f;
#pragma GCC unroll 8
        for (int k = 0; k < R; k++)
            u += p_row[k] * qt[(size_t)k * cols + j];
        out[j] = u;
    }
}

/* The rank as a constant: one copy of the loop per rank 1 .. PC_LOWRANK_MAX_RANK (8); any
 * other (a caller's error) runs the generic loop. */
#define ROW_FN(name, attr)                                                                         \
    attr static void name(float *out, const float *p_row, const float *qt, size_t cols, int rank)  \
    {                                                                                              \
        switch (rank) {                                                                            \
        case 1:                                                                                    \
            row_r(out, p_row, qt, cols, 1);                                                        \
            break;                                                                                 \
        case 2:                                                                                    \
            row_r(out, p_row, qt, cols, 2);                                                        \
            break;                                                                                 \
        case 3:                                                                                    \
            row_r(out, p_row, qt, cols, 3);                                                        \
            break;                                                                                 \
        case 4:                                                                                    \
            row_r(out, p_row, qt, cols, 4);                                                        \
            break;                                                                                 \
        case 5:                                                                                    \
            row_r(out, p_row, qt, cols, 5);                                                        \
            break;                                                                                 \
        case 6:                                                                                    \
            row_r(out, p_row, qt, cols, 6);                                                        \
            break;                                                                                 \
        case 7:                                                                                    \
            row_r(out, p_row, qt, cols, 7);                                                        \
            break;                                                                                 \
        case 8:                                                                                    \
            row_r(out, p_row, qt, cols, 8);                                                        \
            break;                                                                                 \
        default:                                                                                   \
            row_r(out, p_row, qt, cols, rank);                                                     \
            break;                                                                                 \
        }                                                                                          \
    }

ROW_FN(row_any, )
#ifdef PC_CODEC__X86
ROW_FN(row_avx2, __attribute__((target("avx2"))))
ROW_FN(row_avx512, __attribute__((target("avx512f"))))
#endif

void pc_lowrank__row_at(int simd, float *out, const float *p_row, const float *qt, size_t cols,
                        int rank)
{
#ifdef PC_CODEC__X86
    if (simd >= PC_CODEC__SIMD_AVX512)
        row_avx512(out, p_row, qt, cols, rank);
    else if (simd == PC_CODEC__SIMD_AVX2)
        row_avx2(out, p_row, qt, cols, rank);
    else
#endif
        row_any(out, p_row, qt, cols, rank);
    (void)simd;
}

void pc_lowrank_row(float *restrict out, const float *restrict p_row, const float *restrict qt,
                    size_t cols, int rank)
{
    pc_lowrank__row_at(pc_codec__simd(), out, p_row, qt, cols, rank);
}

void pc_lowrank_scale(float *row, size_t n, float coef)
{
    if (coef == 1.0f)
        return;
    for (size_t j = 0; j < n; j++)
        row[j] *= coef;
}

size_t pc_lowrank_expand_work(size_t cols, int rank)
{
    return cols * ((size_t)rank + 1);
}

int pc_lowrank_expand(float *c, size_t rows, size_t cols, const float *p, const float *q, int rank,
                      float alpha, float beta, float *work)
{
    size_t nc = rows * cols, r = (size_t)rank;
    if (!work || !product_ok(c, nc, p, rows * r, q, cols * r, rows, cols, rank))
        return PC_EINVAL;
    float *qt = work, *row = work + cols * r;
    pc_lowrank_transpose(qt, q, cols, rank);
    /* Memory-bound at these ranks: one pass over C, Q^T kept in cache. */
    for (size_t i = 0; i < rows; i++) {
        float *restrict ci = c + i * cols;
        pc_lowrank_row(row, p + i * r, qt, cols, rank);
        if (beta == 0.0f)
            for (size_t j = 0; j < cols; j++)
                ci[j] = alpha * row[j];
        else
            for (size_t j = 0; j < cols; j++)
                ci[j] = beta * ci[j] + alpha * row[j];
    }
    return PC_OK;
}
