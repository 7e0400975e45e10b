/* pc_cuda: whether CUDA is built in and a device is present, and a kernel self-test.
 *
 * CUDA is optional at build time (configure --with-cuda) and at run time: with no toolkit,
 * no driver or no device, these calls report zero devices and the CPU path is used. */
#ifndef PC_CUDA_H
#define PC_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* True when the library was built with the CUDA kernels. */
bool pc_cuda_built(void);

/* Number of usable CUDA devices: 0 when CUDA is not built in or the runtime reports any
 * error (no driver, no device). Never fails. Thread-safe. */
int pc_cuda_device_count(void);

/* Run the probe kernel on device 0 (fill n = 2^20 floats with f(i) = 0.5 * i + 1) and
 * compare with the same computation on the CPU. Returns PC_OK, PC_ENODEV when there is no
 * device (or CUDA is not built in), PC_ECUDA with a message in err on a CUDA failure or a
 * mismatch. Thread-safe (uses its own stream). */
int pc_cuda_selftest(char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* PC_CUDA_H */
