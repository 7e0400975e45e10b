// pc_probe: the CUDA build probe. One kernel and its launcher, the shape every PipeCompress
// kernel follows: a __global__ <op>_kernel plus an extern "C" launcher that takes an
// explicit stream, computes the grid and checks the launch. CPU reference: pc_cuda.c.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "pc_cuda_kernels.h"
#include "pc_device.cuh"

__global__ static void affine_kernel(float *out, int n) // out (n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = 0.5f * (float)i + 1.0f;
}

extern "C" int pc_cuda_compiled(void)
{
    return 1;
}

extern "C" int pc_cuda_device_count_raw(int *count, pc_cuda_err_t *cuerr)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); // clear the sticky-free error so later calls start clean
        *count = 0;
        return pc_cuda_fail_at(cuerr, (int)e, __FILE__, __LINE__);
    }
    *count = n;
    return PC_OK;
}

static_assert(PC_CUDA_CUBLAS_BASE > (int)cudaErrorUnknown, "cuBLAS codes above CUDA's");

extern "C" const char *pc_cuda_error_string(int code)
{
    if (code >= PC_CUDA_CUBLAS_BASE)
        return cublasGetStatusString((cublasStatus_t)(code - PC_CUDA_CUBLAS_BASE));
    return cudaGetErrorString((cudaError_t)code);
}

extern "C" void pc_cuda_device_name_raw(int device, char *buf, size_t len)
{
    cudaDeviceProp p;
    if (len == 0 || cudaGetDeviceProperties(&p, device) != cudaSuccess)
        return;
    size_t i = 0;
    for (; i + 1 < len && p.name[i]; i++)
        buf[i] = p.name[i];
    buf[i] = '\0';
}

extern "C" int pc_cuda_affine_launch(float *out_host, int n, pc_cuda_err_t *cuerr)
{
    float *d = NULL;
    cudaStream_t s;
    PC_CUDA_CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaError_t e = cudaMallocAsync((void **)&d, sizeof(float) * (size_t)n, s);
    if (e == cudaSuccess) {
        const int block = 256; // a multiple of the warp; occupancy is irrelevant here
        affine_kernel<<<(n + block - 1) / block, block, 0, s>>>(d, n);
        e = cudaGetLastError();
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(out_host, d, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost, s);
        cudaError_t f = cudaFreeAsync(d, s);
        if (e == cudaSuccess)
            e = f;
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(s);
    }
    cudaStreamDestroy(s);
    PC_CUDA_CK(e);
    return PC_OK;
}
