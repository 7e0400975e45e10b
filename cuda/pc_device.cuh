// pc_device.cuh: what the library's .cu files share on the host side (C++ only, private).
#ifndef PC_DEVICE_CUH
#define PC_DEVICE_CUH

#include <cuda_runtime.h>

#include "pc_cuda_err.h"
#include "pipecompress/pc_error.h"

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

// The launchers' error convention (pc_cuda_err.h): record a failed call's code, file and
// line in *err (when err is not NULL) and return its PC_* code, PC_ENOMEM for a failed
// allocation, PC_EINVAL for arguments CUDA refused as invalid, else PC_ECUDA.
inline int pc_cuda_fail_at(pc_cuda_err_t *err, int code, const char *file, int line)
{
    if (err) {
        err->code = code;
        err->file = file;
        err->line = line;
    }
    return code == (int)cudaErrorMemoryAllocation ? PC_ENOMEM
           : code == (int)cudaErrorInvalidValue   ? PC_EINVAL
                                                  : PC_ECUDA;
}

// Return a failed CUDA call's PC_* code, recorded in err (pc_cuda_fail_at).
#define PC_CUDA_CK_TO(err, call)                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return pc_cuda_fail_at((err), (int)e_, __FILE__, __LINE__);                            \
    } while (0)

// In a launcher with a `pc_cuda_err_t *cuerr` out-parameter.
#define PC_CUDA_CK(call) PC_CUDA_CK_TO(cuerr, call)

// A failure of the launcher's own checks (no CUDA error): rc, with the place in *cuerr
// (code 0, so the message gives rc's words and the file and line).
#define PC_CUDA_FAIL(rc) pc_cuda_fail_here(cuerr, (rc), __FILE__, __LINE__)
inline int pc_cuda_fail_here(pc_cuda_err_t *err, int rc, const char *file, int line)
{
    if (err) {
        err->code = 0;
        err->file = file;
        err->line = line;
    }
    return rc;
}

#endif // PC_DEVICE_CUH
