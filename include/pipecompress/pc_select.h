/* pc_select: selection of the largest magnitudes in a float array, in O(n), never a sort.
 *
 * Top-k is the hot loop of the sparsifying codecs; this module makes it run at close to
 * memory speed. |x| compares like the integer of x's bits with the sign cleared (the "key"),
 * so selection is a radix select on keys:
 *  1. one pass builds a histogram of the key's top 11 bits (2048 bins, 4 interleaved
 *     copies so repeated bins do not serialise the increments; 32 KiB: stays in L1),
 *     optionally fused with the error-feedback fold v += g; the bin B holding the k-th
 *     largest key follows from a scan from the top;
 *  2. one pass collects, in index order, the indices above B (all selected) and those in B
 *     (candidates), skipping 16-element blocks whose largest key is below B with a
 *     vectorisable test;
 *  3. the exact k-th key T among the candidates comes from two more small histograms (next
 *     11 bits, last 9 bits) over the candidates only; candidates above T, then those equal
 *     to T in index order until k, are merged with the first list.
 * Two passes over the data: about twice the cost of reading it once. Ties are broken by
 * the lower index, so the result is deterministic. NaN or infinity anywhere is reported.
 *
 * For large n and k <= n/4 a faster path comes first: a strided sample estimates a
 * threshold a little below the k-th magnitude, and a single pass (AVX2 where the CPU has
 * it: 32 elements per compare-and-skip step) collects every index above it, about 1.2k to
 * 2k of them; the exact k-th key among those finishes. One pass instead of two. When the
 * sample misjudges, the radix path above redoes it: same exact result, more time.
 *
 * A pc_select_t owns scratch buffers (grown on demand, kept): one thread at a time. */
#ifndef PC_SELECT_H
#define PC_SELECT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_select pc_select_t;

/* A selector: scratch for the radix select, grown on demand, and the vector kernels this
 * CPU has. PC_OK or PC_ENOMEM (*out untouched). One thread at a time per selector. */
int pc_select_create(pc_select_t **out);
/* Free s and its scratch (NULL is accepted). */
void pc_select_destroy(pc_select_t *s);

/* Write to idx[0..k) the indices of the k largest |x[i]| (ties: lower index first), in
 * ascending index order. k > n is clamped to n; returns the count selected (>= 0), or
 * PC_ERANGE if x holds NaN or infinity, PC_ENOMEM. When g is not NULL, first folds
 * x[i] += g[i] for every i (the error-feedback accumulation) in the same pass. */
long pc_select_topk(pc_select_t *s, float *x, const float *g, size_t n, size_t k, uint32_t *idx);

/* Vector kernels of the collect pass. The fastest the CPU supports is chosen at create;
 * pc_select_limit_simd lowers it (never raises it), so tests cover every kernel and its
 * scalar reference on one machine. Returns the level now in use. */
#define PC_SELECT_SIMD_NONE   0
#define PC_SELECT_SIMD_AVX2   1
#define PC_SELECT_SIMD_AVX512 2
int pc_select_limit_simd(pc_select_t *s, int max_level);

/* How many top-k calls took the sampled path and how many fell back to radix select after
 * the sample misjudged (results are identical; only the time differs). */
void pc_select_stats(const pc_select_t *s, uint64_t *fast, uint64_t *fallback);

/* Indices of every |x[i]| >= t (t >= 0), ascending: writes at most cap of them to idx and
 * returns how many there are in total (so a return > cap means idx holds only the first
 * cap). Thread-safe (no scratch). */
size_t pc_select_above(const float *x, size_t n, float t, uint32_t *idx, size_t cap);

/* The magnitude of the k-th largest |x[i]| among x[0..n) into *out, by the same radix
 * select (no index list); k > n is clamped to n. Returns PC_OK; PC_EINVAL when k or n is 0
 * (there is no k-th magnitude); PC_ENOMEM when s's scratch cannot grow (s stays usable).
 * On error *out is untouched. NaN and infinity are not reported: they rank above every
 * finite magnitude (pc_select_topk reports them). x is only read; uses s's scratch: one
 * thread at a time per selector. */
int pc_select_kth_magnitude(pc_select_t *s, const float *x, size_t n, size_t k, float *out);

#ifdef __cplusplus
}
#endif
#endif /* PC_SELECT_H */
