/* pc_cuda: CUDA presence, the probe kernel's check against its CPU reference, and the
 * launchers' error messages (pc_cuda_err_fail, cuda/pc_cuda_err.h). */
#include "config.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_error.h"

#include "pipecompress/pc_philox.h"

#include "../../cuda/pc_codec_cuda.h"
#include "../../cuda/pc_cuda_err.h"
#include "../../cuda/pc_cuda_kernels.h"

/* Probe size: 2^20 floats = 4 MiB, enough to need many blocks, small for any device. */
#define PROBE_N (1 << 20)

int pc_cuda_err_fail(int rc, const pc_cuda_err_t *e, char *err, size_t errlen, const char *fmt, ...)
{
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (!e || (e->code == 0 && !e->file))
        return pc_error_fmt(rc, err, errlen, "%s: %s", what, pc_strerror(rc));
    /* The file from its top folder on ("cuda/codec_api.cu", "src/gpu/cuda_none.c"), however
     * the compiler was given its path: from the last "cuda/" or "src/" in it. */
    const char *file = e->file ? e->file : "?";
    for (const char *p = e->file; p && *p; p++)
        if (strncmp(p, "cuda/", 5) == 0 || strncmp(p, "src/", 4) == 0)
            file = p;
    return pc_error_fmt(rc, err, errlen, "%s: %s (%s:%d)", what,
                        e->code ? pc_cuda_error_string(e->code) : pc_strerror(rc), file, e->line);
}

bool pc_cuda_built(void)
{
    return pc_cuda_compiled() != 0;
}

int pc_cuda_device_count(void)
{
    int n = 0;
    if (pc_cuda_device_count_raw(&n, NULL) != PC_OK)
        return 0;
    return n;
}

int pc_cuda_status(char *why, size_t len)
{
    if (!pc_cuda_compiled()) {
        if (why && len)
            snprintf(why, len, "built without CUDA");
        return 0;
    }
    int n = 0;
    pc_cuda_err_t cuerr = {0};
    int e = pc_cuda_device_count_raw(&n, &cuerr) == PC_OK ? 0 : cuerr.code;
    if (why && len) {
        /* No driver at all reads to the runtime as one too old: say which it is. */
        void *drv = e ? dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) : NULL;
        if (e && !drv)
            snprintf(why, len,
                     "no NVIDIA driver (libcuda.so.1 not found; the CUDA runtime says: %s)",
                     pc_cuda_error_string(e));
        else if (e)
            snprintf(why, len, "%s", pc_cuda_error_string(e));
        else
            snprintf(why, len, "%d CUDA device%s", n, n == 1 ? "" : "s");
        if (drv)
            dlclose(drv);
    }
    return e ? 0 : n;
}

void pc_cuda_device_name(int device, char *buf, size_t len)
{
    if (!buf || len == 0)
        return;
    snprintf(buf, len, "none");
    if (device >= 0 && device < pc_cuda_device_count())
        pc_cuda_device_name_raw(device, buf, len);
}

int pc_cuda_selftest(char *err, size_t errlen)
{
    if (pc_cuda_device_count() == 0)
        return PC_ENODEV;
    float *out = malloc(sizeof(float) * PROBE_N);
    if (!out)
        return PC_ENOMEM;
    int rc = PC_OK;
    pc_cuda_err_t cuerr = {0};
    rc = pc_cuda_affine_launch(out, PROBE_N, &cuerr);
    if (rc != PC_OK) {
        rc = pc_cuda_err_fail(rc, &cuerr, err, errlen, "probe kernel");
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
}

int pc_cuda_philox_check(uint64_t seed, uint64_t subsequence, uint64_t offset, size_t n, char *err,
                         size_t errlen)
{
    if (pc_cuda_device_count() == 0)
        return PC_ENODEV;
    uint32_t *got = malloc(sizeof(uint32_t) * (n ? n : 1));
    if (!got)
        return PC_ENOMEM;
    pc_cuda_err_t cuerr = {0};
    int rc = pc_cuda_philox_draws(0, seed, subsequence, offset, got, n, &cuerr);
    if (rc != PC_OK) {
        free(got);
        return pc_cuda_err_fail(rc, &cuerr, err, errlen, "Philox draws on the device");
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
}
