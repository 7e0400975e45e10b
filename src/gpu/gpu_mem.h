/* gpu_mem: the library's one wrapper of device memory, pinned memory and copies, by device
 * number (private; src/gpu/pc_gpu.c). pc_gpu's memory calls, pc_devcodec's and the
 * engine's (pc_model) are these. device < 0 is host memory (pc_gpu's emulation,
 * PC_GPU_EMULATE, and the CPU codec, PC_DEVCODEC_CPU, are both -1): malloc and memcpy.
 *
 * Each returns PC_OK or PC_ENOMEM / PC_ECUDA / PC_EINVAL with the message in err ("<what>:
 * <CUDA's words> (cuda/pc_gpu.cu:123)", pc_cuda_err_fail); *out is untouched on failure.
 * Thread-safe (the CUDA runtime is). */
#ifndef PC_GPU_MEM_H
#define PC_GPU_MEM_H

#include <stdbool.h>
#include <stddef.h>

#pragma GCC visibility push(hidden)

/* bytes of device memory (0: one byte), zeroed when zero (on the legacy stream, waited
 * for). Free with pc_gpu__free on the same device (NULL accepted). */
int pc_gpu__alloc(int device, size_t bytes, bool zero, void **out, char *err, size_t errlen);
void pc_gpu__free(int device, void *p);
/* bytes of page-locked host memory (device < 0: malloc), zeroed when zero. Free with
 * pc_gpu__host_free (NULL accepted). */
int pc_gpu__host_alloc(int device, size_t bytes, bool zero, void **out, char *err, size_t errlen);
void pc_gpu__host_free(int device, void *p);
/* Copy bytes host -> device (to_device) or device -> host on stream (a cudaStream_t; NULL:
 * the legacy stream), after the work queued there; wait: done on return, else queued (host
 * memory from pc_gpu__host_alloc makes it asynchronous). device < 0: memmove at once. */
int pc_gpu__copy(int device, void *dst, const void *src, size_t bytes, bool to_device, void *stream,
                 bool wait, char *err, size_t errlen);
/* Zero bytes of device memory on stream; wait as for a copy. */
int pc_gpu__zero(int device, void *p, size_t bytes, void *stream, bool wait, char *err,
                 size_t errlen);

#pragma GCC visibility pop

#endif /* PC_GPU_MEM_H */
