/* pc_lowrank: the numerics of PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019,
 * Algorithm 1) on one gradient matrix: the products, the orthonormalisation and the
 * error-feedback residual that the low-rank codec's two rounds are made of.
 *
 * A chunk that is a matrix M (rows x cols, row-major float32: a weight tensor reshaped to
 * its first dimension x the product of the others) at rank R (1 .. PC_LOWRANK_MAX_RANK):
 *   worker, round 1: P_w = M_w Q                 rows x R    pc_lowrank_fold_project
 *   server:          P^ = orth(sum_w P_w)         columns orthonormal
 *                                                             pc_lowrank_orthonormalise
 *   worker, round 2: Q_w = M_w^T P^              cols x R    pc_lowrank_backproject
 *   server:          Q = sum_w Q_w / W; the update is P^ Q^T  pc_lowrank_row, row by row
 *   worker:          residual = M_w - P^ Q^T      (error feedback against the aggregate,
 *                                                 as torch's powerSGD_hook)  pc_lowrank_row
 *   (pc_lowrank_expand: the same rows for a whole matrix, the same bits.)
 * Q is warm-started: the next iteration starts from this one's Q; the first comes from
 * pc_lowrank_init, the same on every rank for the same seed and stream. If the rank of
 * M is at most R, one round reproduces M for a Q in general position (a random draw: M Q
 * then spans M's columns, so P^ P^^T M = M).
 *
 * Matrices are row-major with their natural leading dimension (P and Q: R floats per row).
 * Round 1's product is pc_lowrank_fold_project, written out (the fold of the gradient into
 * the residual in the same pass; the same bits from each of its builds, so a worker's P
 * does not depend on which build its CPU runs, nor on whether the fold or round 1 made it;
 * round 2's sgemm still differs between CPU kinds, README.md "deterministic"); pc_lowrank_project
 * and pc_lowrank_backproject are OpenBLAS's sgemm (the caller decides its threads: one, beside
 * backprop), which for the same inputs and thread count gives the same bits on every call:
 * what makes pipelined and inline runs bitwise alike. The orthonormalisation is
 * modified Gram-Schmidt in a fixed order (column 0, then 1, ...) with every dot product,
 * norm and update in double, rounded to float once at the end.
 *
 * Non-finite values (a diverged gradient, or a product that overflowed) are reported as
 * PC_ERANGE, as by the element-wise codecs (pc_codec.h). Every function is pure on its
 * arguments (no hidden state, no allocation): thread-safe on distinct outputs. */
#ifndef PC_LOWRANK_H
#define PC_LOWRANK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ranks a codec may ask for: 1 .. PC_LOWRANK_MAX_RANK. */
#define PC_LOWRANK_MAX_RANK 8

/* The first Q: cols x rank standard-normal floats, from Philox4x32-10 (pc_philox.h) with
 * (seed, subsequence = stream): Box-Muller on pairs of draws in double. Every rank that
 * passes the same seed and stream (the chunk's index) gets the same bits. q: cols * rank
 * floats, written. PC_OK, or PC_EINVAL (NULL q, cols 0, rank outside 1 .. MAX). */
int pc_lowrank_init(float *q, size_t cols, int rank, uint64_t seed, uint64_t stream);

/* P = M Q by OpenBLAS (pc-bench's baseline and the tests' reference; the codec's round 1
 * is pc_lowrank_fold_project): m rows x cols, q cols x rank, p rows x rank (written). PC_OK;
 * PC_EINVAL (NULL, a zero size, rank outside 1 .. MAX, p overlapping m or q); PC_ERANGE when P
 * holds NaN or infinity (M did, or the product overflowed: every non-finite element of M reaches
 * P). */
int pc_lowrank_project(const float *m, size_t rows, size_t cols, const float *q, int rank,
                       float *p);

/* M += G, then P = M Q, in one pass over M: what the codec's fold and round 1 are
 * (pc_codec.h, "PowerSGD"), one read of the gradient and the residual instead of three
 * (m: rows x cols, updated; g: rows x cols, or NULL: M is only read; qt: Q^T, rank x cols,
 * pc_lowrank_transpose; p: rows x rank, written). Not BLAS: each element of P is summed
 * over 16 lanes (element j in lane j % 16, in order of j), the lanes then folded as a tree,
 * in float, and the library is built without fused multiply-add (-ffp-contract=off), so
 * that every build and CPU gives the same bits (an AVX-512 or AVX2 build of the loop is
 * chosen at run time where the CPU has it; test_lowrank's test_fold_project_exact holds
 * each build this CPU runs to scalar loops). PC_OK; PC_EINVAL (NULL m, qt or p, a
 * zero size, rank outside 1 .. MAX, p or g overlapping another argument); PC_ERANGE when M
 * holds NaN or infinity once folded (P is then unspecified; M is folded all the same). A
 * finite M whose products overflow leaves infinity in P: the caller checks P (the codec's
 * round 1 does, as pc_lowrank_project's PC_ERANGE). Pure. */
int pc_lowrank_fold_project(float *m, const float *g, size_t rows, size_t cols, const float *qt,
                            int rank, float *p);

/* Q = M^T P: m rows x cols, p rows x rank, q cols x rank (written). Errors as
 * pc_lowrank_project's. */
int pc_lowrank_backproject(const float *m, size_t rows, size_t cols, const float *p, int rank,
                           float *q);

/* The doubles pc_lowrank_orthonormalise needs as work space: rows * rank. */
size_t pc_lowrank_work_doubles(size_t rows, int rank);

/* P^ = orth(P) in place: p rows x rank; work: pc_lowrank_work_doubles(rows, rank) doubles,
 * the caller's (contents on return unspecified). Modified Gram-Schmidt over the columns in
 * order, in double. A column whose norm after removing the earlier columns is at most
 * 1e-6 of its norm before (it lies in their span, up to float rounding), or zero, becomes
 * all zero: it carries nothing, and a zero column of P^ adds nothing to P^ Q^T. So the
 * result's non-zero columns are orthonormal, and a zero P gives a zero P^. PC_OK;
 * PC_EINVAL (NULL, rows 0, rank outside 1 .. MAX); PC_ERANGE when P holds NaN or infinity
 * (P is left as it was). */
int pc_lowrank_orthonormalise(float *p, size_t rows, int rank, double *work);

/* Q^T: qt (rank x cols) from q (cols x rank), for pc_lowrank_row. Pure. */
void pc_lowrank_transpose(float *qt, const float *q, size_t cols, int rank);

/* Row i of P Q^T: out[j] = sum over k = 0 .. rank-1, in that order, of p_row[k] qt[k cols
 * + j], summed in float from +0 (p_row: row i of P, rank floats; qt: Q^T, rank x cols,
 * pc_lowrank_transpose; out: cols floats, not overlapping either). Not BLAS: written out so
 * that every rank (server and workers, on any host) gets the same bits, which lets the
 * workers apply a matrix's update from its factors exactly as its server does. O(cols
 * rank), vectorised over j in the widest build the CPU runs (AVX-512, AVX2 or the
 * baseline: each element is its own lane, so every build gives the same bits). Pure. */
void pc_lowrank_row(float *out, const float *p_row, const float *qt, size_t cols, int rank);

/* Clipping a row of P Q^T: row[j] *= coef for j < n in float, each element alone (the
 * same bits on every rank and build, and as the server's scaling of the whole matrix);
 * nothing when coef is 1. The workers call it on the rows they step with (clipping by the
 * global norm, pc_optim_clip_coef). Pure. */
void pc_lowrank_scale(float *row, size_t n, float coef);

/* The floats pc_lowrank_expand needs as work space: cols * (rank + 1). */
size_t pc_lowrank_expand_work(size_t cols, int rank);

/* C = beta C + alpha P Q^T: c rows x cols, p rows x rank, q cols x rank; each element of
 * P Q^T as pc_lowrank_row gives it, then c = alpha x that (beta 0: c is not read) or
 * beta c + alpha x that. work: pc_lowrank_expand_work(cols, rank) floats, the caller's.
 * With beta 1 and alpha -1 on a copy of M: the residual M - P^ Q^T; with beta 0 and alpha
 * 1: the approximation. PC_OK; PC_EINVAL (NULL, a zero size, rank outside 1 .. MAX, c
 * overlapping p or q). */
int pc_lowrank_expand(float *c, size_t rows, size_t cols, const float *p, const float *q, int rank,
                      float alpha, float beta, float *work);

#ifdef __cplusplus
}
#endif
#endif /* PC_LOWRANK_H */
