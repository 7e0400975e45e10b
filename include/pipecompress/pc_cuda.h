/* pc_cuda: whether CUDA is built in and a device is present, a kernel self-test, and the
 * GPU benchmark's baselines (private: src/gpu/cuda_baseline.h).
 *
 * CUDA is optional at build time (configure --with-cuda) and at run time: with no driver,
 * too old a driver or no device, these calls report zero devices (pc_cuda_status says
 * why) and the CPU path is used. A library built with CUDA links the CUDA runtime
 * (libcudart.so) dynamically: that library must be found at run time (the toolkit's lib64,
 * named in the library's run path, or the distribution's package), a driver need not. */
#ifndef PC_CUDA_H
#define PC_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* True when the library was built with the CUDA kernels. */
bool pc_cuda_built(void);

/* Number of usable CUDA devices: 0 when CUDA is not built in or the runtime reports any
 * error (no driver, no device). Never fails. Thread-safe. */
int pc_cuda_device_count(void);

/* pc_cuda_device_count, and why: writes "N CUDA device(s)", "built without CUDA", "no
 * NVIDIA driver (libcuda.so.1 not found; ...)" (which the CUDA runtime reports as a driver
 * too old), or the CUDA runtime's own reason when it reports none ("CUDA driver version is
 * insufficient for CUDA runtime version", "no CUDA-capable device is detected") into why.
 * Never fails. Thread-safe. */
int pc_cuda_status(char *why, size_t len);

/* The name of CUDA device `device` ("NVIDIA H200") into buf; "none" when there is no such
 * device. Never fails. Thread-safe. */
void pc_cuda_device_name(int device, char *buf, size_t len);

/* Run the probe kernel on device 0 (fill n = 2^20 floats with f(i) = 0.5 * i + 1) and
 * compare with the same computation on the CPU. Returns PC_OK, PC_ENODEV when there is no
 * device (or CUDA is not built in), PC_ECUDA with a message in err on a CUDA failure or a
 * mismatch. Thread-safe (uses its own stream). */
int pc_cuda_selftest(char *err, size_t errlen);

/* Draw n numbers on device 0 from cuRAND's device Philox, curand_init(seed, subsequence,
 * offset) then curand(), and compare them with pc_philox's stream (pc_philox.h) at the same
 * position: the check that the CUDA codecs draw what the CPU codecs draw. Returns PC_OK,
 * PC_ENODEV (no device or CUDA not built in), PC_ENOMEM, or PC_ECUDA with the first
 * difference (or the CUDA failure) in err. Thread-safe. */
int pc_cuda_philox_check(uint64_t seed, uint64_t subsequence, uint64_t offset, size_t n, char *err,
                         size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* PC_CUDA_H */
