// pc_baseline.cu: what pc-bench compress --device cuda measures the codecs against, in the
// same run on the same data: one read of the input (the bound any O(n) compressor pays at
// least once), a copy of it (one read, one write), and top-k by sorting every (magnitude, index)
// pair with CUB's radix sort (what a top-k without selection costs). Launchers: pc_cuda_kernels.h;
// API: pc_cuda.h.
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <new>

extern "C" {
#include "pipecompress/pc_error.h"
}
#include "pc_cuda_kernels.h"
#include "pc_device.cuh"

namespace
{

constexpr int TPB = 256;

// One pass over x: each thread sums its elements (four independent accumulators, float4
// loads when x is 16-byte aligned); one float per block is written, so the traffic is the
// 4n bytes read.
__global__ void read_kernel(const float *x, size_t n, float *out)
{
    float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x,
           stride = (size_t)gridDim.x * blockDim.x;
    size_t done = 0;
    if (((uintptr_t)x & 15) == 0) {
        const float4 *x4 = reinterpret_cast<const float4 *>(x);
        for (size_t i = tid; i < n / 4; i += stride) {
            float4 v = x4[i];
            a0 += v.x;
            a1 += v.y;
            a2 += v.z;
            a3 += v.w;
        }
        done = n / 4 * 4;
    }
    for (size_t i = done + tid; i < n; i += stride)
        a0 += x[i];
    float s = (a0 + a1) + (a2 + a3);
    for (int o = 16; o > 0; o /= 2)
        s += __shfl_down_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0)
        atomicAdd(&out[blockIdx.x], s); // never read: keeps the loads alive
}

// y = x: the copy kernel (4n bytes read, 4n written), float4 when both are 16-byte aligned.
__global__ void copy_kernel(const float *x, float *y, size_t n)
{
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x,
           stride = (size_t)gridDim.x * blockDim.x, done = 0;
    if ((((uintptr_t)x | (uintptr_t)y) & 15) == 0) {
        const float4 *x4 = reinterpret_cast<const float4 *>(x);
        float4 *y4 = reinterpret_cast<float4 *>(y);
        for (size_t i = tid; i < n / 4; i += stride)
            y4[i] = x4[i];
        done = n / 4 * 4;
    }
    for (size_t i = done + tid; i < n; i += stride)
        y[i] = x[i];
}

__global__ void keys_kernel(const float *x, size_t n, unsigned *key, unsigned *idx)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        key[i] = __float_as_uint(x[i]) & 0x7fffffffu;
        idx[i] = (unsigned)i;
    }
}

unsigned blocks(int sms, size_t n)
{
    size_t b = (n + TPB - 1) / TPB, most = (size_t)(sms > 0 ? sms : 1) * 8;
    return (unsigned)(b < 1 ? 1 : (b > most ? most : b));
}

} // namespace

struct pc_cuda_baseline_dev {
    int device, sms;
    size_t nmax;
    float *sums;
    unsigned *key[2], *idx[2];
    void *tmp;
    size_t tmp_bytes;
};

extern "C" void pc_cuda_baseline_free(pc_cuda_baseline_dev_t *b)
{
    if (!b)
        return;
    device_scope dev(b->device);
    void *all[] = {b->sums, b->key[0], b->key[1], b->idx[0], b->idx[1], b->tmp};
    for (void *p : all)
        if (p)
            cudaFree(p);
    delete b;
}

extern "C" int pc_cuda_baseline_alloc(int device, size_t nmax, pc_cuda_baseline_dev_t **out,
                                      pc_cuda_err_t *cuerr)
{
    device_scope dev(device);
    PC_CUDA_CK(dev.err);
    pc_cuda_baseline_dev *b = new (std::nothrow) pc_cuda_baseline_dev();
    if (!b)
        return PC_ENOMEM;
    b->device = device;
    b->nmax = nmax;
    if (cudaDeviceGetAttribute(&b->sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
        b->sms = 1;
    size_t bytes = sizeof(unsigned) * (nmax ? nmax : 1);
    cudaError_t e = cudaMalloc((void **)&b->sums, sizeof(float) * (size_t)b->sms * 8);
    for (int i = 0; i < 2 && e == cudaSuccess; i++) {
        e = cudaMalloc((void **)&b->key[i], bytes);
        if (e == cudaSuccess)
            e = cudaMalloc((void **)&b->idx[i], bytes);
    }
    if (e == cudaSuccess) {
        size_t a = 0, c = 0;
        e = cub::DeviceRadixSort::SortPairsDescending(nullptr, a, b->key[0], b->key[1], b->idx[0],
                                                      b->idx[1], (int64_t)nmax, 0, 31);
        if (e == cudaSuccess)
            e = cub::DeviceRadixSort::SortKeys(nullptr, c, b->idx[1], b->idx[0], (int64_t)nmax, 0,
                                               32);
        b->tmp_bytes = a > c ? a : c;
        if (e == cudaSuccess)
            e = cudaMalloc(&b->tmp, b->tmp_bytes ? b->tmp_bytes : 1);
    }
    if (e != cudaSuccess) {
        pc_cuda_baseline_free(b);
        return pc_cuda_fail_at(cuerr, (int)e, __FILE__, __LINE__);
    }
    *out = b;
    return PC_OK;
}

extern "C" int pc_cuda_baseline_read_launch(pc_cuda_baseline_dev_t *b, const float *x, size_t n,
                                            pc_cuda_err_t *cuerr)
{
    device_scope dev(b->device);
    PC_CUDA_CK(dev.err);
    read_kernel<<<blocks(b->sms, n / 4 + 1), TPB>>>(x, n, b->sums);
    PC_CUDA_CK(cudaGetLastError());
    PC_CUDA_CK(cudaDeviceSynchronize());
    return PC_OK;
}

extern "C" int pc_cuda_baseline_copy_launch(pc_cuda_baseline_dev_t *b, const float *x, size_t n,
                                            pc_cuda_err_t *cuerr)
{
    device_scope dev(b->device);
    PC_CUDA_CK(dev.err);
    copy_kernel<<<blocks(b->sms, n / 4 + 1), TPB>>>(x, reinterpret_cast<float *>(b->key[0]), n);
    PC_CUDA_CK(cudaGetLastError());
    PC_CUDA_CK(cudaDeviceSynchronize());
    return PC_OK;
}

extern "C" int pc_cuda_baseline_sort_launch(pc_cuda_baseline_dev_t *b, const float *x, size_t n,
                                            size_t k, pc_cuda_err_t *cuerr)
{
    device_scope dev(b->device);
    PC_CUDA_CK(dev.err);
    cudaError_t e;
    keys_kernel<<<blocks(b->sms, n), TPB>>>(x, n, b->key[0], b->idx[0]);
    e = cudaGetLastError();
    size_t bytes = b->tmp_bytes;
    if (e == cudaSuccess)
        e = cub::DeviceRadixSort::SortPairsDescending(b->tmp, bytes, b->key[0], b->key[1],
                                                      b->idx[0], b->idx[1], (int64_t)n, 0, 31);
    // The k largest, in index order (as a codec's message lists them).
    bytes = b->tmp_bytes;
    if (e == cudaSuccess && k)
        e = cub::DeviceRadixSort::SortKeys(b->tmp, bytes, b->idx[1], b->idx[0], (int64_t)k, 0, 32);
    PC_CUDA_CK(e);
    PC_CUDA_CK(cudaDeviceSynchronize());
    return PC_OK;
}
