/* test_lowrank: PowerSGD's numerics against a reference written from the paper's
 * Algorithm 1 in double: the products, one round reproducing a matrix of rank r at rank
 * R >= r, the error-feedback identity M = P^ Q^T + residual, the orthonormalisation's
 * degenerate inputs (zero, rank-deficient, NaN and infinity), Q's first draw, and the
 * arguments refused; the fold with round 1's product (pc_lowrank_fold_project) and the
 * rows of P Q^T bit for bit against scalar loops, in every build of their kernels this CPU
 * runs (the test compiles pc_lowrank.c itself to reach them). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec/lowrank_impl.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_lowrank.h"
#include "pipecompress/pc_philox.h"

/* n floats uniform in [-1, 1) from Philox (seed, stream). */
static float *rand_floats(size_t n, uint64_t seed, uint64_t stream)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    pc_philox_t g;
    pc_philox_init(&g, seed, stream, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = 2.0f * pc_philox_uniform(pc_philox_next(&g)) - 1.0f;
    return x;
}

/* A rows x cols matrix of rank r: the product of random rows x r and r x cols factors. */
static float *rank_r(size_t rows, size_t cols, int r, uint64_t seed)
{
    float *a = rand_floats(rows * (size_t)r, seed, 1), *b = rand_floats((size_t)r * cols, seed, 2);
    float *m = malloc(rows * cols * sizeof *m);
    assert_non_null(m);
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) {
            double s = 0.0;
            for (int k = 0; k < r; k++)
                s += (double)a[i * (size_t)r + (size_t)k] * b[(size_t)k * cols + j];
            m[i * cols + j] = (float)s;
        }
    free(a);
    free(b);
    return m;
}

/* The reference, Algorithm 1 in double on float inputs: P = M Q, P^ = Gram-Schmidt(P)
 * (classical, in double: the reference need not match the order of rounding), Q' = M^T P^,
 * approx = P^ Q'^T. Columns below 1e-6 of their norm are dropped as in the module. */
static void reference(const float *m, size_t rows, size_t cols, const float *q, int rank,
                      double *p_out, double *q_out, double *approx)
{
    for (size_t i = 0; i < rows; i++)
        for (int c = 0; c < rank; c++) {
            double s = 0.0;
            for (size_t j = 0; j < cols; j++)
                s += (double)m[i * cols + j] * q[j * (size_t)rank + (size_t)c];
            p_out[i * (size_t)rank + (size_t)c] = s;
        }
    for (int c = 0; c < rank; c++) {
        double before = 0.0, after = 0.0;
        for (size_t i = 0; i < rows; i++)
            before += p_out[i * (size_t)rank + (size_t)c] * p_out[i * (size_t)rank + (size_t)c];
        for (int e = 0; e < c; e++) {
            double dot = 0.0;
            for (size_t i = 0; i < rows; i++)
                dot += p_out[i * (size_t)rank + (size_t)e] * p_out[i * (size_t)rank + (size_t)c];
            for (size_t i = 0; i < rows; i++)
                p_out[i * (size_t)rank + (size_t)c] -= dot * p_out[i * (size_t)rank + (size_t)e];
        }
        for (size_t i = 0; i < rows; i++)
            after += p_out[i * (size_t)rank + (size_t)c] * p_out[i * (size_t)rank + (size_t)c];
        double s = sqrt(after) > 1e-6 * sqrt(before) && after > 0 ? 1.0 / sqrt(after) : 0.0;
        for (size_t i = 0; i < rows; i++)
            p_out[i * (size_t)rank + (size_t)c] *= s;
    }
    for (size_t j = 0; j < cols; j++)
        for (int c = 0; c < rank; c++) {
            double s = 0.0;
            for (size_t i = 0; i < rows; i++)
                s += (double)m[i * cols + j] * p_out[i * (size_t)rank + (size_t)c];
            q_out[j * (size_t)rank + (size_t)c] = s;
        }
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) {
            double s = 0.0;
            for (int c = 0; c < rank; c++)
                s += p_out[i * (size_t)rank + (size_t)c] * q_out[j * (size_t)rank + (size_t)c];
            approx[i * cols + j] = s;
        }
}

/* ||a - b|| / ||b|| (Frobenius), b in double. */
static double rel_err(const float *a, const double *b, size_t n)
{
    double d = 0.0, nb = 0.0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        nb += b[i] * b[i];
    }
    return nb > 0 ? sqrt(d / nb) : sqrt(d);
}

/* One worker's round of the codec with this module: P, P^, Q', approx and residual. */
struct round {
    float *p, *q, *approx, *resid;
};

static struct round one_round(const float *m, size_t rows, size_t cols, const float *q0, int rank)
{
    struct round r = {malloc(rows * (size_t)rank * sizeof(float)),
                      malloc(cols * (size_t)rank * sizeof(float)),
                      malloc(rows * cols * sizeof(float)), malloc(rows * cols * sizeof(float))};
    double *work = malloc(pc_lowrank_work_doubles(rows, rank) * sizeof(double));
    float *ework = malloc(pc_lowrank_expand_work(cols, rank) * sizeof(float));
    assert_true(r.p && r.q && r.approx && r.resid && work && ework);
    assert_int_equal(pc_lowrank_project(m, rows, cols, q0, rank, r.p), PC_OK);
    assert_int_equal(pc_lowrank_orthonormalise(r.p, rows, rank, work), PC_OK);
    assert_int_equal(pc_lowrank_backproject(m, rows, cols, r.p, rank, r.q), PC_OK);
    assert_int_equal(pc_lowrank_expand(r.approx, rows, cols, r.p, r.q, rank, 1.0f, 0.0f, ework),
                     PC_OK);
    memcpy(r.resid, m, rows * cols * sizeof(float));
    assert_int_equal(pc_lowrank_expand(r.resid, rows, cols, r.p, r.q, rank, -1.0f, 1.0f, ework),
                     PC_OK);
    free(work);
    free(ework);
    return r;
}

static void free_round(struct round *r)
{
    free(r->p);
    free(r->q);
    free(r->approx);
    free(r->resid);
}

/* Every factor and the approximation against Algorithm 1 in double, for several shapes
 * and ranks, full rank (the approximation is then lossy). */
static void test_against_reference(void **state)
{
    (void)state;
    const size_t shapes[][2] = {{64, 48}, {1, 30}, {30, 1}, {200, 7}, {7, 200}, {129, 257}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t rows = shapes[s][0], cols = shapes[s][1];
        for (int rank = 1; rank <= PC_LOWRANK_MAX_RANK; rank *= 2) {
            float *m = rand_floats(rows * cols, 7 + s, 3), *q0 = malloc(cols * (size_t)rank * 4);
            assert_int_equal(pc_lowrank_init(q0, cols, rank, 11, s), PC_OK);
            double *rp = malloc(rows * (size_t)rank * 8), *rq = malloc(cols * (size_t)rank * 8),
                   *ra = malloc(rows * cols * 8);
            reference(m, rows, cols, q0, rank, rp, rq, ra);
            struct round r = one_round(m, rows, cols, q0, rank);
            /* Past min(rows, cols) columns P's last ones are dependent: zero in the
             * reference, float rounding in the module's products, normalised or dropped
             * by a threshold either side may judge differently; the product is the same. */
            if ((size_t)rank <= (rows < cols ? rows : cols)) {
                assert_true(rel_err(r.p, rp, rows * (size_t)rank) < 1e-4);
                assert_true(rel_err(r.q, rq, cols * (size_t)rank) < 1e-4);
            }
            assert_true(rel_err(r.approx, ra, rows * cols) < 1e-4);
            free_round(&r);
            free(m);
            free(q0);
            free(rp);
            free(rq);
            free(ra);
        }
    }
}

/* A matrix of rank r comes back from one round at every rank R >= r; the residual is
 * then (almost) zero. Below r it does not, but M = approx + residual holds always. */
static void test_known_rank_and_error_feedback(void **state)
{
    (void)state;
    const size_t rows = 96, cols = 80;
    for (int r = 1; r <= 4; r++) {
        float *m = rank_r(rows, cols, r, 100 + (uint64_t)r);
        double norm = 0.0;
        for (size_t i = 0; i < rows * cols; i++)
            norm += (double)m[i] * m[i];
        norm = sqrt(norm);
        for (int rank = 1; rank <= PC_LOWRANK_MAX_RANK; rank++) {
            float *q0 = malloc(cols * (size_t)rank * sizeof(float));
            assert_int_equal(pc_lowrank_init(q0, cols, rank, 5, (uint64_t)r), PC_OK);
            struct round o = one_round(m, rows, cols, q0, rank);
            double res = 0.0, identity = 0.0;
            for (size_t i = 0; i < rows * cols; i++) {
                res += (double)o.resid[i] * o.resid[i];
                double back = (double)o.approx[i] + o.resid[i] - m[i];
                identity = fmax(identity, fabs(back));
            }
            res = sqrt(res) / norm;
            if (rank >= r)
                assert_true(res < 1e-5); /* reproduced up to float rounding */
            else
                assert_true(res > 1e-3); /* a rank-r matrix is not rank-R */
            /* the residual is what the approximation missed, to rounding of M's size */
            assert_true(identity <= 1e-6 * norm);
            free_round(&o);
            free(q0);
        }
        free(m);
    }
}

/* P^'s non-zero columns are orthonormal and span P's columns (P^ P^^T P = P). */
static void test_orthonormal(void **state)
{
    (void)state;
    const size_t rows = 500;
    for (int rank = 1; rank <= PC_LOWRANK_MAX_RANK; rank++) {
        float *p = rand_floats(rows * (size_t)rank, 3, (uint64_t)rank);
        float *orig = malloc(rows * (size_t)rank * sizeof(float));
        double *work = malloc(pc_lowrank_work_doubles(rows, rank) * sizeof(double));
        memcpy(orig, p, rows * (size_t)rank * sizeof(float));
        assert_int_equal(pc_lowrank_orthonormalise(p, rows, rank, work), PC_OK);
        for (int a = 0; a < rank; a++)
            for (int b = 0; b < rank; b++) {
                double dot = 0.0;
                for (size_t i = 0; i < rows; i++)
                    dot +=
                        (double)p[i * (size_t)rank + (size_t)a] * p[i * (size_t)rank + (size_t)b];
                assert_true(fabs(dot - (a == b ? 1.0 : 0.0)) < 1e-6);
            }
        for (int c = 0; c < rank; c++) { /* each original column back from the basis */
            double err = 0.0, nrm = 0.0;
            for (size_t i = 0; i < rows; i++) {
                double s = 0.0;
                for (int a = 0; a < rank; a++) {
                    double dot = 0.0;
                    for (size_t k = 0; k < rows; k++)
                        dot += (double)p[k * (size_t)rank + (size_t)a] *
                               orig[k * (size_t)rank + (size_t)c];
                    s += dot * p[i * (size_t)rank + (size_t)a];
                }
                double o = orig[i * (size_t)rank + (size_t)c];
                err += (s - o) * (s - o);
                nrm += o * o;
            }
            assert_true(sqrt(err / nrm) < 1e-5);
        }
        free(p);
        free(orig);
        free(work);
    }
}

/* A zero P gives a zero P^ (no NaN); a column equal to an earlier one, or a multiple of
 * it, or a sum of earlier ones, becomes zero, and the others stay orthonormal. */
static void test_degenerate(void **state)
{
    (void)state;
    const size_t rows = 40;
    const int rank = 4;
    float p[40 * 4];
    double work[40 * 4];
    memset(p, 0, sizeof p);
    assert_int_equal(pc_lowrank_orthonormalise(p, rows, rank, work), PC_OK);
    for (size_t i = 0; i < rows * rank; i++)
        assert_true(p[i] == 0.0f);

    float *col = rand_floats(2 * rows, 9, 9);
    for (size_t i = 0; i < rows; i++) {
        p[i * rank + 0] = col[i];
        p[i * rank + 1] = -3.0f * col[i];         /* a multiple of column 0 */
        p[i * rank + 2] = col[rows + i];          /* independent */
        p[i * rank + 3] = col[i] + col[rows + i]; /* in the span of 0 and 2 */
    }
    assert_int_equal(pc_lowrank_orthonormalise(p, rows, rank, work), PC_OK);
    double n[4] = {0}, d02 = 0.0;
    for (size_t i = 0; i < rows; i++) {
        for (int c = 0; c < rank; c++)
            n[c] += (double)p[i * rank + (size_t)c] * p[i * rank + (size_t)c];
        d02 += (double)p[i * rank + 0] * p[i * rank + 2];
    }
    assert_true(fabs(n[0] - 1.0) < 1e-6 && fabs(n[2] - 1.0) < 1e-6);
    assert_true(n[1] == 0.0 && n[3] == 0.0);
    assert_true(fabs(d02) < 1e-6);
    free(col);

    /* a zero matrix through a whole round: zeros everywhere, no NaN */
    float m[6 * 5] = {0}, q0[5 * 2], pp[6 * 2], qq[5 * 2];
    double w[6 * 2];
    assert_int_equal(pc_lowrank_init(q0, 5, 2, 1, 0), PC_OK);
    assert_int_equal(pc_lowrank_project(m, 6, 5, q0, 2, pp), PC_OK);
    assert_int_equal(pc_lowrank_orthonormalise(pp, 6, 2, w), PC_OK);
    assert_int_equal(pc_lowrank_backproject(m, 6, 5, pp, 2, qq), PC_OK);
    for (int i = 0; i < 12; i++)
        assert_true(pp[i] == 0.0f);
    for (int i = 0; i < 10; i++)
        assert_true(qq[i] == 0.0f);
}

/* NaN or infinity in M reaches P and is reported; in P, the orthonormalisation reports
 * it and leaves P as it was; an overflowing product is reported too. */
static void test_non_finite(void **state)
{
    (void)state;
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (size_t b = 0; b < 3; b++) {
        float *m = rand_floats(20 * 10, 1, b), q0[10 * 2], p[20 * 2], q[10 * 2], keep[20 * 2];
        double w[20 * 2];
        assert_int_equal(pc_lowrank_init(q0, 10, 2, 1, 0), PC_OK);
        m[57] = bad[b];
        assert_int_equal(pc_lowrank_project(m, 20, 10, q0, 2, p), PC_ERANGE);
        for (int i = 0; i < 40; i++)
            p[i] = (float)i;
        assert_int_equal(pc_lowrank_backproject(m, 20, 10, p, 2, q), PC_ERANGE);
        p[13] = bad[b];
        memcpy(keep, p, sizeof p);
        assert_int_equal(pc_lowrank_orthonormalise(p, 20, 2, w), PC_ERANGE);
        assert_memory_equal(p, keep, sizeof p);
        free(m);
    }
    float big[4] = {3e38f, 3e38f, 3e38f, 3e38f}, q1[2] = {2.0f, 2.0f}, out[2];
    assert_int_equal(pc_lowrank_project(big, 2, 2, q1, 1, out), PC_ERANGE);
}

/* Q's first draw: the same bits for the same seed and stream, others for another;
 * standard normal (mean and variance over 2^16 draws, and no value absurdly large). */
static void test_init(void **state)
{
    (void)state;
    const size_t cols = 8192;
    const int rank = 8;
    float *a = malloc(cols * rank * sizeof(float)), *b = malloc(cols * rank * sizeof(float));
    assert_int_equal(pc_lowrank_init(a, cols, rank, 42, 3), PC_OK);
    assert_int_equal(pc_lowrank_init(b, cols, rank, 42, 3), PC_OK);
    assert_memory_equal(a, b, cols * rank * sizeof(float));
    assert_int_equal(pc_lowrank_init(b, cols, rank, 42, 4), PC_OK);
    assert_memory_not_equal(a, b, cols * rank * sizeof(float));
    assert_int_equal(pc_lowrank_init(b, cols, rank, 43, 3), PC_OK);
    assert_memory_not_equal(a, b, cols * rank * sizeof(float));
    double s = 0.0, s2 = 0.0, mx = 0.0;
    for (size_t i = 0; i < cols * rank; i++) {
        s += a[i];
        s2 += (double)a[i] * a[i];
        mx = fmax(mx, fabs(a[i]));
    }
    double n = (double)(cols * rank), mean = s / n, var = s2 / n - mean * mean;
    assert_true(fabs(mean) < 0.02); /* 5 standard errors of 1/256 */
    assert_true(fabs(var - 1.0) < 0.03);
    assert_true(mx > 3.0 && mx < 7.0);
    /* an odd count: the last pair's second value is not written past the end */
    float odd[3 + 1];
    odd[3] = 12345.0f;
    assert_int_equal(pc_lowrank_init(odd, 3, 1, 1, 1), PC_OK);
    assert_true(odd[3] == 12345.0f);
    free(a);
    free(b);
}

/* pc_lowrank_row and pc_lowrank_expand give each element as written in their contract,
 * bit for bit: 0 + p_0 q_j0 + p_1 q_j1 + ... in float, then alpha and beta (beta 0 never
 * reads C, even a NaN there): the bits a worker reproduces from the factors. */
static void test_row_exact(void **state)
{
    (void)state;
    for (int rank = 1; rank <= PC_LOWRANK_MAX_RANK; rank += 3) {
        const size_t rows = 7, cols = 37;
        float *p = rand_floats(rows * (size_t)rank, 11, 1),
              *q = rand_floats(cols * (size_t)rank, 12, 1);
        float *c = malloc(sizeof(float) * rows * cols), *c0 = rand_floats(rows * cols, 13, 1);
        float *ew = malloc(sizeof(float) * pc_lowrank_expand_work(cols, rank));
        float *qt = malloc(sizeof(float) * cols * (size_t)rank), row[37];
        assert_true(c && ew && qt);
        pc_lowrank_transpose(qt, q, cols, rank);
        for (size_t j = 0; j < cols; j++)
            for (int k = 0; k < rank; k++)
                assert_true(qt[(size_t)k * cols + j] == q[j * (size_t)rank + k]);
        const float ab[3][2] = {{1.0f, 0.0f}, {-1.0f, 1.0f}, {0.5f, -2.0f}}; /* alpha, beta */
        for (int t = 0; t < 3; t++) {
            for (size_t e = 0; e < rows * cols; e++)
                c[e] = ab[t][1] == 0.0f ? NAN : c0[e];
            assert_int_equal(pc_lowrank_expand(c, rows, cols, p, q, rank, ab[t][0], ab[t][1], ew),
                             PC_OK);
            for (size_t i = 0; i < rows; i++) {
                pc_lowrank_row(row, p + i * (size_t)rank, qt, cols, rank);
                for (size_t j = 0; j < cols; j++) {
                    float sum = 0.0f;
                    for (int k = 0; k < rank; k++)
                        sum += p[i * (size_t)rank + (size_t)k] * q[j * (size_t)rank + (size_t)k];
                    assert_true(memcmp(&row[j], &sum, sizeof(float)) == 0);
                    float want = ab[t][1] == 0.0f ? ab[t][0] * sum
                                                  : ab[t][1] * c0[i * cols + j] + ab[t][0] * sum;
                    assert_true(memcmp(&c[i * cols + j], &want, sizeof(float)) == 0);
                }
            }
        }
        free(p), free(q), free(c), free(c0), free(ew), free(qt);
    }
}

/* pc_lowrank_fold_project's contract, written out as scalar loops: m += g, element j of
 * row i into lane j % 16 in order of j, the lanes folded as a tree (8, 4, 2, 1). */
static void fold_project_scalar(float *m, const float *g, size_t rows, size_t cols, const float *qt,
                                int rank, float *p)
{
    for (size_t i = 0; i < rows; i++) {
        float acc[PC_LOWRANK_MAX_RANK][16] = {{0}};
        for (size_t j = 0; j < cols; j++) {
            float x = g ? m[i * cols + j] + g[i * cols + j] : m[i * cols + j];
            if (g)
                m[i * cols + j] = x;
            for (int k = 0; k < rank; k++)
                acc[k][j % 16] += x * qt[(size_t)k * cols + j];
        }
        for (int k = 0; k < rank; k++) {
            for (int s = 8; s > 0; s /= 2)
                for (int l = 0; l < s; l++)
                    acc[k][l] += acc[k][l + s];
            p[i * (size_t)rank + (size_t)k] = acc[k][0];
        }
    }
}

/* Every build of the kernel this CPU runs (SSE2, AVX2, AVX-512) gives the scalar loops'
 * bits, for P and for the folded M, at every rank, with and without a gradient, on rows
 * that are whole blocks of 16, shorter than one, and with a tail; and P is M Q (within
 * float rounding of OpenBLAS's product). */
static void test_fold_project_exact(void **state)
{
    (void)state;
    static const char *const builds[] = {"baseline", "AVX2", "AVX-512"};
    for (int simd = 0; simd <= pc_codec__simd(); simd++) /* what this CPU lets the test cover */
        print_message("fold_project and row: the %s build tested\n", builds[simd]);
    static const size_t shapes[][2] = {{5, 7}, {9, 16}, {6, 53}, {3, 160}};
    for (size_t sh = 0; sh < 4; sh++)
        for (int rank = 1; rank <= PC_LOWRANK_MAX_RANK; rank++)
            for (int with_g = 0; with_g < 2; with_g++) {
                size_t rows = shapes[sh][0], cols = shapes[sh][1], n = rows * cols;
                float *m0 = rand_floats(n, 21, sh), *g = rand_floats(n, 22, sh);
                float *q = rand_floats(cols * (size_t)rank, 23, (uint64_t)rank);
                float *qt = malloc(sizeof(float) * cols * (size_t)rank);
                float *mw = malloc(sizeof(float) * n), *m = malloc(sizeof(float) * n);
                float pw[160 * 8], p[160 * 8], pb[160 * 8];
                assert_true(qt && mw && m);
                pc_lowrank_transpose(qt, q, cols, rank);
                memcpy(mw, m0, sizeof(float) * n);
                fold_project_scalar(mw, with_g ? g : NULL, rows, cols, qt, rank, pw);
                assert_int_equal(pc_lowrank_project(mw, rows, cols, q, rank, pb), PC_OK);
                for (size_t e = 0; e < rows * (size_t)rank; e++)
                    assert_true(fabsf(pw[e] - pb[e]) <= 1e-5f * (float)cols);
                for (int simd = 0; simd <= pc_codec__simd(); simd++) {
                    memcpy(m, m0, sizeof(float) * n);
                    assert_int_equal(pc_lowrank__fold_project_at(simd, m, with_g ? g : NULL, rows,
                                                                 cols, qt, rank, p),
                                     PC_OK);
                    assert_memory_equal(m, mw, sizeof(float) * n);
                    assert_memory_equal(p, pw, sizeof(float) * rows * (size_t)rank);
                }
                memcpy(m, m0, sizeof(float) * n); /* and the public function */
                assert_int_equal(
                    pc_lowrank_fold_project(m, with_g ? g : NULL, rows, cols, qt, rank, p), PC_OK);
                assert_memory_equal(p, pw, sizeof(float) * rows * (size_t)rank);
                free(m0), free(g), free(q), free(qt), free(mw), free(m);
            }
}

/* NaN or infinity in M once folded is PC_ERANGE, with M folded all the same; refusals. */
static void test_fold_project_errors(void **state)
{
    (void)state;
    float m[40], g[40], qt[20], p[16];
    for (int e = 0; e < 40; e++)
        m[e] = 1.0f, g[e] = 0.5f;
    for (int e = 0; e < 20; e++)
        qt[e] = 0.25f;
    for (int simd = 0; simd <= pc_codec__simd(); simd++)
        for (int at = 0; at < 40; at += 13) {
            for (int e = 0; e < 40; e++)
                m[e] = 1.0f;
            g[at] = simd % 2 ? INFINITY : NAN;
            assert_int_equal(pc_lowrank__fold_project_at(simd, m, g, 2, 20, qt, 1, p), PC_ERANGE);
            assert_true(m[(at + 1) % 40] == 1.5f); /* the rest folded */
            g[at] = 0.5f;
        }
    assert_int_equal(pc_lowrank_fold_project(NULL, g, 2, 20, qt, 1, p), PC_EINVAL);
    assert_int_equal(pc_lowrank_fold_project(m, g, 2, 20, NULL, 1, p), PC_EINVAL);
    assert_int_equal(pc_lowrank_fold_project(m, g, 2, 20, qt, 1, NULL), PC_EINVAL);
    assert_int_equal(pc_lowrank_fold_project(m, g, 0, 20, qt, 1, p), PC_EINVAL);
    assert_int_equal(pc_lowrank_fold_project(m, g, 2, 20, qt, 9, p), PC_EINVAL);
    assert_int_equal(pc_lowrank_fold_project(m, g, 2, 20, qt, 1, m + 4), PC_EINVAL); /* p on m */
    assert_int_equal(pc_lowrank_fold_project(m, m + 1, 2, 20, qt, 1, p), PC_EINVAL); /* g on m */
}

/* pc_lowrank_scale: each element times the coefficient in float, as a scalar loop does;
 * coefficient 1 leaves every bit (a NaN's payload, -0) as it was. */
static void test_scale(void **state)
{
    (void)state;
    enum { N = 37 };
    float row[N], want[N];
    for (int j = 0; j < N; j++)
        row[j] = want[j] = (float)(j - 18) * 0.3f + 1e-3f * (float)(j * j);
    row[3] = want[3] = -0.0f;
    uint32_t nan_bits = 0x7fc00123u;
    memcpy(&row[5], &nan_bits, 4);
    memcpy(&want[5], &nan_bits, 4);
    pc_lowrank_scale(row, N, 1.0f);
    assert_memory_equal(row, want, sizeof(row));
    const float coef = 0.3716f;
    for (int j = 0; j < N; j++) {
        volatile float w = want[j] * coef; /* one float product each */
        want[j] = w;
    }
    pc_lowrank_scale(row, N, coef);
    for (int j = 0; j < N; j++)
        if (j != 5)
            assert_memory_equal(&row[j], &want[j], 4);
    assert_true(isnan(row[5]));
    pc_lowrank_scale(row, 0, 0.5f); /* nothing to do */
}

/* Every build of the rows of P Q^T gives the same bits (test_row_exact holds the public
 * function to the contract's loop). */
static void test_row_builds(void **state)
{
    (void)state;
    for (int rank = 1; rank <= PC_LOWRANK_MAX_RANK; rank++) {
        const size_t cols = 67;
        float *pr = rand_floats((size_t)rank, 31, 1), *qt = rand_floats(cols * (size_t)rank, 32, 1);
        float want[67], got[67];
        pc_lowrank__row_at(PC_CODEC__SIMD_NONE, want, pr, qt, cols, rank);
        for (int simd = 0; simd <= pc_codec__simd(); simd++) {
            memset(got, 0xff, sizeof(got));
            pc_lowrank__row_at(simd, got, pr, qt, cols, rank);
            assert_memory_equal(got, want, sizeof(want));
        }
        free(pr), free(qt);
    }
}

/* NULL, zero sizes, ranks outside 1 .. 8 and overlapping outputs are refused. */
static void test_bad_arguments(void **state)
{
    (void)state;
    float m[12] = {1}, q[8] = {1}, p[8], ew[16];
    double w[8];
    assert_int_equal(pc_lowrank_init(NULL, 3, 1, 0, 0), PC_EINVAL);
    assert_int_equal(pc_lowrank_init(q, 0, 1, 0, 0), PC_EINVAL);
    assert_int_equal(pc_lowrank_init(q, 3, 0, 0, 0), PC_EINVAL);
    assert_int_equal(pc_lowrank_init(q, 1, 9, 0, 0), PC_EINVAL);
    assert_int_equal(pc_lowrank_project(NULL, 4, 3, q, 2, p), PC_EINVAL);
    assert_int_equal(pc_lowrank_project(m, 0, 3, q, 2, p), PC_EINVAL);
    assert_int_equal(pc_lowrank_project(m, 4, 0, q, 2, p), PC_EINVAL);
    assert_int_equal(pc_lowrank_project(m, 4, 3, q, 9, p), PC_EINVAL);
    assert_int_equal(pc_lowrank_project(m, 4, 3, q, 2, m + 2), PC_EINVAL); /* p over m */
    assert_int_equal(pc_lowrank_backproject(m, 4, 3, p, 2, p), PC_EINVAL); /* q over p */
    assert_int_equal(pc_lowrank_backproject(m, 4, 3, p, -1, q), PC_EINVAL);
    assert_int_equal(pc_lowrank_orthonormalise(p, 4, 2, NULL), PC_EINVAL);
    assert_int_equal(pc_lowrank_orthonormalise(p, 0, 2, w), PC_EINVAL);
    assert_int_equal(pc_lowrank_orthonormalise(p, 4, 0, w), PC_EINVAL);
    assert_int_equal(pc_lowrank_expand(m, 4, 3, m, q, 1, 1.0f, 0.0f, ew), PC_EINVAL); /* c over p */
    assert_int_equal(pc_lowrank_expand(m, 4, 3, p, q, 0, 1.0f, 0.0f, ew), PC_EINVAL);
    assert_int_equal(pc_lowrank_expand(m, 4, 3, p, q, 1, 1.0f, 0.0f, NULL), PC_EINVAL);
    assert_int_equal(pc_lowrank_work_doubles(10, 0), 0);
    assert_int_equal(pc_lowrank_work_doubles(10, 3), 30);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_known_rank_and_error_feedback),
        cmocka_unit_test(test_orthonormal),
        cmocka_unit_test(test_degenerate),
        cmocka_unit_test(test_non_finite),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_row_exact),
        cmocka_unit_test(test_fold_project_exact),
        cmocka_unit_test(test_fold_project_errors),
        cmocka_unit_test(test_row_builds),
        cmocka_unit_test(test_scale),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
