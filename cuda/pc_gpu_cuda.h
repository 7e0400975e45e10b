/* The CUDA side of pc_gpu (cuda/pc_gpu.cu), callable from C. Each returns PC_OK, PC_ENOMEM
 * or PC_ECUDA and leaves the cudaError_t in *cuerr (pc_cuda_error_string names it); each
 * makes `device` current for the call only (device_scope), except pc_cuda_gpu_use, whose
 * point is to make it current for good, and pc_cuda_gpu_bus_id, which needs no current
 * device. Private to the library. */
#ifndef PC_GPU_CUDA_H
#define PC_GPU_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(hidden)

/* Whether device can be used: makes its context (the first call on a device does). */
int pc_cuda_gpu_open(int device, int *cuerr);
/* Make device the calling thread's current device (cudaSetDevice), for good. */
int pc_cuda_gpu_use(int device, int *cuerr);
/* The device's PCI bus id ("0000:3b:00.0"). */
int pc_cuda_gpu_bus_id(int device, char *buf, size_t len, int *cuerr);
/* A non-blocking stream at the device's lowest (low_priority) or default priority. */
int pc_cuda_gpu_stream_create(int device, int low_priority, void **out, int *cuerr);
void pc_cuda_gpu_stream_destroy(int device, void *stream);
int pc_cuda_gpu_stream_sync(int device, void *stream, int *cuerr);
/* Events without timing. */
int pc_cuda_gpu_event_create(int device, void **out, int *cuerr);
void pc_cuda_gpu_event_destroy(int device, void *event);
int pc_cuda_gpu_event_record(int device, void *event, void *stream, int *cuerr);
int pc_cuda_gpu_event_sync(int device, void *event, int *cuerr);
int pc_cuda_gpu_stream_wait(int device, void *stream, void *event, int *cuerr);
/* cudaMemcpyAsync; to_device: host to device, else device to host. */
int pc_cuda_gpu_copy(int device, void *dst, const void *src, size_t bytes, int to_device,
                     void *stream, int *cuerr);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif /* PC_GPU_CUDA_H */
