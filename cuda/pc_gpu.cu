// pc_gpu.cu: the CUDA runtime calls behind pc_gpu (src/gpu/pc_gpu.c): streams, events, memory
// and copies, for the whole library (the codecs, the engine and the runtime).
// Thin on purpose: the bookkeeping is in C, where the host emulation runs it too.
#include "config.h"

#include <cstdio>

#include <cuda_runtime.h>

#include "pc_device.cuh"
#include "pc_gpu_cuda.h"
#include "pipecompress/pc_error.h"

extern "C" int pc_cuda_gpu_open(int device, pc_cuda_err_t *cuerr)
{
    device_scope dev(device);
    PC_CUDA_CK(dev.err);
    PC_CUDA_CK(cudaFree(nullptr)); // makes the context: a broken device fails here, not later
    return PC_OK;
}

extern "C" int pc_cuda_gpu_use(int device, pc_cuda_err_t *cuerr)
{
    PC_CUDA_CK(cudaSetDevice(device));
    return PC_OK;
}

extern "C" int pc_cuda_gpu_bus_id(int device, char *buf, size_t len, pc_cuda_err_t *cuerr)
{
    PC_CUDA_CK(cudaDeviceGetPCIBusId(buf, (int)len, device));
    return PC_OK;
}

extern "C" int pc_cuda_gpu_stream_create(int device, int low_priority, void **out,
                                         pc_cuda_err_t *cuerr)
{
    device_scope dev(device);
    PC_CUDA_CK(dev.err);
    int least = 0, greatest = 0;
    PC_CUDA_CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t s;
    // "least" is the numerically largest value: the lowest priority.
    PC_CUDA_CK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, low_priority ? least : 0));
    *out = (void *)s;
    return PC_OK;
}

extern "C" void pc_cuda_gpu_stream_destroy(int device, void *stream)
{
    if (!stream)
        return;
    device_scope dev(device);
    cudaStreamDestroy((cudaStream_t)stream);
    (void)cudaGetLastError();
}

extern "C" int pc_cuda_gpu_stream_sync(int device, void *stream, pc_cuda_err_t *cuerr)
{
    device_scope dev(device);
    PC_CUDA_CK(dev.err);
    PC_CUDA_CK(cudaStreamSynchronize((cudaStream_t)stream));
    return PC_OK;
}

extern "C" int pc_cuda_gpu_event_create(int device, void **out, pc_cuda_err_t *cuerr)
{
    device_scope dev(device);
    PC_CUDA_CK(dev.err);
    cudaEvent_t e;
    PC_CUDA_CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *out = (void *)e;
    return PC_OK;
}

extern "C" void pc_cuda_gpu_event_destroy(int device, void *event)
{
    if (!event)
        return;
    device_scope dev(device);
    cudaEventDestroy((cudaEvent_t)event);
    (void)cudaGetLastError();
}

extern "C" int pc_cuda_gpu_event_record(int device, void *event, void *stream, pc_cuda_err_t *cuerr)
{
    device_scope dev(device);
    PC_CUDA_CK(dev.err);
    PC_CUDA_CK(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
    return PC_OK;
}

extern "C" int pc_cuda_gpu_event_sync(int device, void *event, pc_cuda_err_t *cuerr)
{
    device_scope dev(device);
    PC_CUDA_CK(dev.err);
    PC_CUDA_CK(cudaEventSynchronize((cudaEvent_t)event));
    return PC_OK;
}

extern "C" int pc_cuda_gpu_stream_wait(int device, void *stream, void *event, pc_cuda_err_t *cuerr)
{
    device_scope dev(device);
    PC_CUDA_CK(dev.err);
    PC_CUDA_CK(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
    return PC_OK;
}

extern "C" int pc_cuda_gpu_copy(int device, void *dst, const void *src, size_t bytes, int to_device,
                                void *stream, int wait, pc_cuda_err_t *cuerr)
{
    device_scope dev(device);
    PC_CUDA_CK(dev.err);
    PC_CUDA_CK(cudaMemcpyAsync(dst, src, bytes,
                               to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                               (cudaStream_t)stream));
    if (wait)
        PC_CUDA_CK(cudaStreamSynchronize((cudaStream_t)stream));
    return PC_OK;
}

extern "C" int pc_cuda_gpu_zero(int device, void *p, size_t bytes, void *stream, int wait,
                                pc_cuda_err_t *cuerr)
{
    device_scope dev(device);
    PC_CUDA_CK(dev.err);
    PC_CUDA_CK(cudaMemsetAsync(p, 0, bytes, (cudaStream_t)stream));
    if (wait)
        PC_CUDA_CK(cudaStreamSynchronize((cudaStream_t)stream));
    return PC_OK;
}

extern "C" int pc_cuda_gpu_alloc(int device, size_t bytes, void **out, pc_cuda_err_t *cuerr)
{
    device_scope dev(device);
    PC_CUDA_CK(dev.err);
    PC_CUDA_CK(cudaMalloc(out, bytes ? bytes : 1));
    return PC_OK;
}

extern "C" void pc_cuda_gpu_free(int device, void *p)
{
    if (!p)
        return;
    device_scope dev(device);
    cudaFree(p);
    (void)cudaGetLastError();
}

extern "C" int pc_cuda_gpu_host_alloc(int device, size_t bytes, void **out, pc_cuda_err_t *cuerr)
{
    device_scope dev(device);
    PC_CUDA_CK(dev.err);
    PC_CUDA_CK(cudaMallocHost(out, bytes ? bytes : 1));
    return PC_OK;
}

extern "C" void pc_cuda_gpu_host_free(void *p)
{
    if (p) {
        cudaFreeHost(p);
        (void)cudaGetLastError();
    }
}
