/* The probe's and the benchmark baselines' launchers (cuda/pc_probe.cu, cuda/pc_baseline.cu),
 * callable from C. Each returns PC_OK or a PC_* code and says which call failed in *cuerr
 * (pc_cuda_err.h). Private to the library. */
#ifndef PC_CUDA_KERNELS_H
#define PC_CUDA_KERNELS_H

#include <stddef.h>

#include "pc_cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Library-private although prefixed: declared hidden, so libpipecompress.so does not export
 * them (src/libpipecompress.map exports every other pc_* name). */
#pragma GCC visibility push(hidden)

/* 1 in a build with CUDA (cuda/pc_probe.cu), 0 in one without (src/gpu/cuda_none.c). */
int pc_cuda_compiled(void);
/* cudaGetDeviceCount: *count 0 on failure. */
int pc_cuda_device_count_raw(int *count, pc_cuda_err_t *cuerr);
/* The device's name (cudaGetDeviceProperties) into buf; unchanged on failure. */
void pc_cuda_device_name_raw(int device, char *buf, size_t len);
/* Fill out_host[0..n) with 0.5 * i + 1 computed on device 0. */
int pc_cuda_affine_launch(float *out_host, int n, pc_cuda_err_t *cuerr);

/* The benchmark baselines (cuda/pc_baseline.cu): scratch for n <= nmax on a device; one
 * read of x; a copy of x; top-k of x by sorting. Each waits for its kernels. */
typedef struct pc_cuda_baseline_dev pc_cuda_baseline_dev_t;
int pc_cuda_baseline_alloc(int device, size_t nmax, pc_cuda_baseline_dev_t **out,
                           pc_cuda_err_t *cuerr);
void pc_cuda_baseline_free(pc_cuda_baseline_dev_t *b);
int pc_cuda_baseline_read_launch(pc_cuda_baseline_dev_t *b, const float *x, size_t n,
                                 pc_cuda_err_t *cuerr);
int pc_cuda_baseline_copy_launch(pc_cuda_baseline_dev_t *b, const float *x, size_t n,
                                 pc_cuda_err_t *cuerr);
int pc_cuda_baseline_sort_launch(pc_cuda_baseline_dev_t *b, const float *x, size_t n, size_t k,
                                 pc_cuda_err_t *cuerr);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* PC_CUDA_KERNELS_H */
