/* The CUDA side of pc_gpu (cuda/pc_gpu.cu), callable from C: the library's one place for
 * device memory, pinned memory and copies, streams and events. Each returns PC_OK or a PC_*
 * code and says which call failed in *cuerr (pc_cuda_err.h); each
 * makes `device` current for the call only (device_scope), except pc_cuda_gpu_use, whose
 * point is to make it current for good, and pc_cuda_gpu_bus_id, which needs no current
 * device. Private to the library. */
#ifndef PC_GPU_CUDA_H
#define PC_GPU_CUDA_H

#include <stddef.h>

#include "pc_cuda_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(hidden)

/* Whether device can be used: makes its context (the first call on a device does). */
int pc_cuda_gpu_open(int device, pc_cuda_err_t *cuerr);
/* Make device the calling thread's current device (cudaSetDevice), for good. */
int pc_cuda_gpu_use(int device, pc_cuda_err_t *cuerr);
/* The device's PCI bus id ("0000:3b:00.0"). */
int pc_cuda_gpu_bus_id(int device, char *buf, size_t len, pc_cuda_err_t *cuerr);
/* A non-blocking stream at the device's lowest (low_priority) or default priority. */
int pc_cuda_gpu_stream_create(int device, int low_priority, void **out, pc_cuda_err_t *cuerr);
void pc_cuda_gpu_stream_destroy(int device, void *stream);
int pc_cuda_gpu_stream_sync(int device, void *stream, pc_cuda_err_t *cuerr);
/* Events without timing. */
int pc_cuda_gpu_event_create(int device, void **out, pc_cuda_err_t *cuerr);
void pc_cuda_gpu_event_destroy(int device, void *event);
int pc_cuda_gpu_event_record(int device, void *event, void *stream, pc_cuda_err_t *cuerr);
int pc_cuda_gpu_event_sync(int device, void *event, pc_cuda_err_t *cuerr);
int pc_cuda_gpu_stream_wait(int device, void *stream, void *event, pc_cuda_err_t *cuerr);
/* cudaMemcpyAsync on stream; to_device: host to device, else device to host; wait: then
 * cudaStreamSynchronize (the copy is done on return). */
int pc_cuda_gpu_copy(int device, void *dst, const void *src, size_t bytes, int to_device,
                     void *stream, int wait, pc_cuda_err_t *cuerr);
/* cudaMemsetAsync(p, 0, bytes) on stream; wait as for a copy. */
int pc_cuda_gpu_zero(int device, void *p, size_t bytes, void *stream, int wait,
                     pc_cuda_err_t *cuerr);
/* Device memory (cudaMalloc; 0 bytes: 1) and pinned host memory (cudaMallocHost), neither
 * zeroed; *out untouched on failure. The frees accept NULL. */
int pc_cuda_gpu_alloc(int device, size_t bytes, void **out, pc_cuda_err_t *cuerr);
void pc_cuda_gpu_free(int device, void *p);
int pc_cuda_gpu_host_alloc(int device, size_t bytes, void **out, pc_cuda_err_t *cuerr);
void pc_cuda_gpu_host_free(void *p);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* PC_GPU_CUDA_H */
