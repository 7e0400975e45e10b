/* pc_cuda_err: the one error convention of the launchers of cuda/ (private to the library).
 *
 * Every launcher returns PC_OK or a PC_* code (PC_ENOMEM for a failed allocation, PC_EINVAL
 * for arguments refused as invalid, PC_ECUDA otherwise) and says which call failed in a
 * pc_cuda_err_t (code 0 with the place: a check of the launcher's own failed):
 * the codec, memory, probe and baseline launchers through a `pc_cuda_err_t *cuerr`
 * out-parameter, the engine's (pc_layers_cuda.h) in the engine, read with
 * pc_cuda_engine_error. On the .cu side PC_CUDA_CK (pc_device.cuh) fills it; on the C side
 * pc_cuda_err_fail turns it into the message: what was done, the CUDA runtime's (or
 * cuBLAS's) words, the file and line of the call. C and C++. */
#ifndef PC_CUDA_ERR_H
#define PC_CUDA_ERR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(hidden)

/* cuBLAS statuses are kept as this plus the cublasStatus_t (above every cudaError_t). */
#define PC_CUDA_CUBLAS_BASE 0x10000

typedef struct pc_cuda_err {
    int code;         /* a cudaError_t, or PC_CUDA_CUBLAS_BASE + a cublasStatus_t; 0: none */
    const char *file; /* the failed call's __FILE__ (a static string), or NULL */
    int line;
} pc_cuda_err_t;

/* The message of e->code (a static string; thread-safe): cuda/pc_probe.cu, or
 * src/gpu/cuda_none.c in a build without CUDA. */
const char *pc_cuda_error_string(int code);

/* The message of a failed launcher into err, "<what>: <CUDA's words> (cuda/file.cu:123)";
 * without a CUDA error (code 0) rc's words with the place; with nothing recorded (e NULL,
 * or neither code nor place) "<what>: <pc_strerror(rc)>". Returns rc. src/gpu/pc_cuda.c;
 * thread-safe. */
int pc_cuda_err_fail(int rc, const pc_cuda_err_t *e, char *err, size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* PC_CUDA_ERR_H */
