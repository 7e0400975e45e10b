// pc_device.cuh: what the library's .cu files share on the host side (C++ only, private).
#ifndef PC_DEVICE_CUH
#define PC_DEVICE_CUH

#include <cuda_runtime.h>

// Makes `device` current for the calling thread and restores the caller's on return: a
// library must not leave another device current (a PyTorch program's, say). err is
// cudaSetDevice's result. A device that is already current is left alone (no call, no
// context made anywhere); a thread that never chose one reads as device 0, so a call on
// another device then leaves device 0 current again, which makes its context. Errors an
// earlier runtime call left behind are cleared on entry and the restore's on exit, so a
// launch check sees only its own launch.
struct device_scope {
    int prev = -1, dev;
    cudaError_t err;
    explicit device_scope(int device) : dev(device)
    {
        (void)cudaGetLastError();
        if (cudaGetDevice(&prev) != cudaSuccess)
            prev = -1;
        err = prev == device ? cudaSuccess : cudaSetDevice(device);
    }
    ~device_scope()
    {
        if (prev >= 0 && prev != dev) {
            cudaSetDevice(prev);
            (void)cudaGetLastError();
        }
    }
    device_scope(const device_scope &) = delete;
    device_scope &operator=(const device_scope &) = delete;
};

// In a function that returns a PC_* code and has an `int *cuerr` out-parameter: on a failed
// CUDA call, leave its cudaError_t in *cuerr and return PC_ENOMEM (out of device or pinned
// memory) or PC_ECUDA. Needs pipecompress/pc_error.h.
#define PC_CUDA_CK(call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            *cuerr = (int)e_;                                                                      \
            return e_ == cudaErrorMemoryAllocation ? PC_ENOMEM : PC_ECUDA;                         \
        }                                                                                          \
    } while (0)

#endif // PC_DEVICE_CUH
