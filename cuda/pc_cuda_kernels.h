/* Launchers of the CUDA kernels in cuda/, callable from C. Each returns 0 or a cudaError_t
 * value. Private to the library. */
#ifndef PC_CUDA_KERNELS_H
#define PC_CUDA_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Library-private although prefixed: declared hidden, so libpipecompress.so does not export
 * them (src/libpipecompress.map exports every other pc_* name). */
#pragma GCC visibility push(hidden)

int pc_cuda_device_count_raw(int *count);
const char *pc_cuda_error_string(int code);
/* Fill out_host[0..n) with 0.5 * i + 1 computed on device 0. */
int pc_cuda_affine_launch(float *out_host, int n);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* PC_CUDA_KERNELS_H */
