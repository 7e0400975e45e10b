/* cuda_baseline.h: the GPU codec benchmark's baselines (pc-bench compress --device cuda),
 * private to the library and its programs: not installed, not exported (hidden), since
 * they are a benchmark's yardsticks, not an API. Kernels: cuda/pc_baseline.cu; without
 * CUDA, create fails with PC_ENODEV (no device). */
#ifndef PC_CUDA_BASELINE_H
#define PC_CUDA_BASELINE_H

#include <stddef.h>

#pragma GCC visibility push(hidden)

/* The baselines pc-bench compress --device cuda measures the codecs against (same run,
 * same data in device memory): one read of n floats (a sum kernel: the bound any O(n)
 * compressor pays at least once), a copy kernel (n floats read and written, into the
 * baseline's scratch), and top-k by sorting all n (magnitude, index) pairs with
 * CUB's radix sort, then the k indices. A baseline holds scratch for up to nmax elements
 * on `device`. create: PC_OK, PC_ENODEV (no such device, or CUDA not built in), PC_ECUDA
 * or PC_ENOMEM with err. read, copy and sort_topk wait for the device and return PC_OK, PC_EINVAL
 * (n over nmax, k over n) or PC_ECUDA. One thread at a time per baseline. */
typedef struct pc_cuda__baseline pc_cuda__baseline_t;
int pc_cuda__baseline_create(int device, size_t nmax, pc_cuda__baseline_t **out, char *err,
                             size_t errlen);
void pc_cuda__baseline_destroy(pc_cuda__baseline_t *b);
int pc_cuda__baseline_read(pc_cuda__baseline_t *b, const float *x, size_t n);
int pc_cuda__baseline_copy(pc_cuda__baseline_t *b, const float *x, size_t n);
int pc_cuda__baseline_sort_topk(pc_cuda__baseline_t *b, const float *x, size_t n, size_t k);

#pragma GCC visibility pop

#endif /* PC_CUDA_BASELINE_H */
