/* Launchers of the CUDA kernels in cuda/, callable from C. Each returns 0 or a cudaError_t
 * value. Private to the library. */
#ifndef PC_CUDA_KERNELS_H
#define PC_CUDA_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

int pc_cuda_device_count_raw(int *count);
const char *pc_cuda_error_string(int code);
/* Fill out_host[0..n) with 0.5 * i + 1 computed on device 0. */
int pc_cuda_affine_launch(float *out_host, int n);

#ifdef __cplusplus
}
#endif
#endif /* PC_CUDA_KERNELS_H */
