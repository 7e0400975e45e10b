/* pc_cuda: CUDA presence and the probe kernel's check against its CPU reference. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_error.h"

#include "pipecompress/pc_philox.h"

#ifdef PC_HAVE_CUDA
#include "../cuda/pc_codec_cuda.h"
#include "../cuda/pc_cuda_kernels.h"
#endif

/* Probe size: 2^20 floats = 4 MiB, enough to need many blocks, small for any device. */
#define PROBE_N (1 << 20)

bool pc_cuda_built(void)
{
#ifdef PC_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

int pc_cuda_device_count(void)
{
#ifdef PC_HAVE_CUDA
    int n = 0;
    if (pc_cuda_device_count_raw(&n) != 0)
        return 0;
    return n;
#else
    return 0;
#endif
}

int pc_cuda_selftest(char *err, size_t errlen)
{
#ifdef PC_HAVE_CUDA
    if (pc_cuda_device_count() == 0)
        return PC_ENODEV;
    float *out = malloc(sizeof(float) * PROBE_N);
    if (!out)
        return PC_ENOMEM;
    int rc = PC_OK;
    int e = pc_cuda_affine_launch(out, PROBE_N);
    if (e != 0) {
        rc = pc_error_fmt(PC_ECUDA, err, errlen, "probe kernel: %s", pc_cuda_error_string(e));
    } else {
        for (int i = 0; i < PROBE_N; i++) {
            float want = 0.5f * (float)i + 1.0f; /* CPU reference */
            if (out[i] != want) {
                rc = pc_error_fmt(PC_ECUDA, err, errlen,
                                  "probe kernel: out[%d] = %g, CPU reference %g", i, (double)out[i],
                                  (double)want);
                break;
            }
        }
    }
    free(out);
    return rc;
#else
    (void)err;
    (void)errlen;
    return PC_ENODEV;
#endif
}

int pc_cuda_philox_check(uint64_t seed, uint64_t subsequence, uint64_t offset, size_t n, char *err,
                         size_t errlen)
{
#ifdef PC_HAVE_CUDA
    if (pc_cuda_device_count() == 0)
        return PC_ENODEV;
    uint32_t *got = malloc(sizeof(uint32_t) * (n ? n : 1));
    if (!got)
        return PC_ENOMEM;
    int cuerr = 0;
    int rc = pc_cuda_philox_draws(0, seed, subsequence, offset, got, n, &cuerr);
    if (rc != PC_OK) {
        free(got);
        return pc_error_fmt(PC_ECUDA, err, errlen, "Philox draws on the device: %s",
                            cuerr ? pc_cuda_error_string(cuerr) : pc_strerror(rc));
    }
    pc_philox_t g;
    pc_philox_init(&g, seed, subsequence, offset);
    for (size_t i = 0; i < n; i++) {
        uint32_t want = pc_philox_next(&g);
        if (got[i] != want) {
            rc = pc_error_fmt(PC_ECUDA, err, errlen,
                              "Philox: seed %llu subsequence %llu draw %llu: cuRAND 0x%08x, "
                              "pc_philox 0x%08x",
                              (unsigned long long)seed, (unsigned long long)subsequence,
                              (unsigned long long)(offset + i), got[i], want);
            break;
        }
    }
    free(got);
    return rc;
#else
    (void)seed;
    (void)subsequence;
    (void)offset;
    (void)n;
    (void)err;
    (void)errlen;
    return PC_ENODEV;
#endif
}
