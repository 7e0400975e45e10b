// pc_device.cuh: what the library's .cu files share on the host side (C++ only, private).
#ifndef PC_DEVICE_CUH
#define PC_DEVICE_CUH

#include <cuda_runtime.h>

// Makes `device` current for the calling thread and restores the caller's on return: a
// library must not leave another device current (a PyTorch program's, say). err is
// cudaSetDevice's result.
struct device_scope {
    int prev = -1;
    cudaError_t err;
    explicit device_scope(int device)
    {
        if (cudaGetDevice(&prev) != cudaSuccess)
            prev = -1;
        err = cudaSetDevice(device);
    }
    ~device_scope()
    {
        if (prev >= 0)
            cudaSetDevice(prev);
    }
    device_scope(const device_scope &) = delete;
    device_scope &operator=(const device_scope &) = delete;
};

#endif // PC_DEVICE_CUH
