/* cuda_none: the CUDA boundary in a build without CUDA (configure --without-cuda, or no
 * nvcc). Every launcher of cuda/pc_cuda_kernels.h, pc_codec_cuda.h and pc_gpu_cuda.h is
 * here (the engine's, pc_layers_cuda.h, are src/engine/layers_none.c), answering "no
 * device": PC_ENODEV with NO_CUDA as the CUDA error (pc_cuda_err.h), whose text is "built
 * without CUDA"; sizes are 0, handles NULL, frees do nothing. So the
 * host files (pc_cuda.c, pc_gpu.c, pc_devcodec.c, pc_model.c) compile and link the same
 * with and without CUDA, with no #ifdef: without it no device is ever found
 * (pc_cuda_device_count is 0), so none of these is reached past the device checks.
 * libuv's per-platform files are the model. Thread-safe: nothing here has state. */
#include "config.h"

#include <stdio.h>

#include "../../cuda/pc_codec_cuda.h"
#include "../../cuda/pc_cuda_kernels.h"
#include "../../cuda/pc_gpu_cuda.h"
#include "pipecompress/pc_error.h"

/* The CUDA error this build reports: cudaErrorNoDevice's number ("no CUDA-capable device"). */
#define NO_CUDA 100

/* A PC_*-returning launcher's answer: PC_ENODEV, NO_CUDA as the CUDA error. */
static int none(pc_cuda_err_t *cuerr)
{
    if (cuerr) {
        cuerr->code = NO_CUDA;
        cuerr->file = __FILE__;
        cuerr->line = __LINE__;
    }
    return PC_ENODEV;
}

/* ---- pc_cuda_kernels.h -------------------------------------------------------------- */

int pc_cuda_compiled(void)
{
    return 0;
}

int pc_cuda_device_count_raw(int *count, pc_cuda_err_t *cuerr)
{
    *count = 0;
    return none(cuerr);
}

const char *pc_cuda_error_string(int code)
{
    (void)code;
    return "built without CUDA";
}

void pc_cuda_device_name_raw(int device, char *buf, size_t len)
{
    (void)device;
    if (buf && len)
        snprintf(buf, len, "none");
}

int pc_cuda_affine_launch(float *out_host, int n, pc_cuda_err_t *cuerr)
{
    (void)out_host, (void)n;
    return none(cuerr);
}

int pc_cuda_baseline_alloc(int device, size_t nmax, pc_cuda_baseline_dev_t **out,
                           pc_cuda_err_t *cuerr)
{
    (void)device, (void)nmax;
    *out = NULL;
    return none(cuerr);
}

void pc_cuda_baseline_free(pc_cuda_baseline_dev_t *b)
{
    (void)b;
}

int pc_cuda_baseline_read_launch(pc_cuda_baseline_dev_t *b, const float *x, size_t n,
                                 pc_cuda_err_t *cuerr)
{
    (void)b, (void)x, (void)n;
    return none(cuerr);
}

int pc_cuda_baseline_copy_launch(pc_cuda_baseline_dev_t *b, const float *x, size_t n,
                                 pc_cuda_err_t *cuerr)
{
    (void)b, (void)x, (void)n;
    return none(cuerr);
}

int pc_cuda_baseline_sort_launch(pc_cuda_baseline_dev_t *b, const float *x, size_t n, size_t k,
                                 pc_cuda_err_t *cuerr)
{
    (void)b, (void)x, (void)n, (void)k;
    return none(cuerr);
}

/* ---- pc_codec_cuda.h ---------------------------------------------------------------- */

int pc_cuda_codec_create(int device, pc_cuda_codec_t **out, pc_cuda_err_t *cuerr)
{
    (void)device;
    *out = NULL;
    return none(cuerr);
}

void pc_cuda_codec_destroy(pc_cuda_codec_t *s)
{
    (void)s;
}

int pc_cuda_codec_compress(pc_cuda_codec_t *s, int device, pc_cuda_job_t *job, pc_cuda_err_t *cuerr)
{
    (void)s, (void)device, (void)job;
    return none(cuerr);
}

int pc_cuda_codec_fold(pc_cuda_codec_t *s, int device, pc_cuda_job_t *job, pc_cuda_err_t *cuerr)
{
    (void)s, (void)device, (void)job;
    return none(cuerr);
}

int pc_cuda_decode_add(int device, const pc_codec_t *c, const pc_wire_header_t *h,
                       const uint8_t *payload, const uint32_t *idx, float scale, float *dense,
                       void *stream, pc_cuda_err_t *cuerr)
{
    (void)device, (void)c, (void)h, (void)payload, (void)idx, (void)scale, (void)dense;
    (void)stream;
    return none(cuerr);
}

int pc_cuda_philox_draws(int device, uint64_t seed, uint64_t subsequence, uint64_t offset,
                         uint32_t *out, size_t n, pc_cuda_err_t *cuerr)
{
    (void)device, (void)seed, (void)subsequence, (void)offset, (void)out, (void)n;
    return none(cuerr);
}

/* ---- pc_gpu_cuda.h ------------------------------------------------------------------ */

int pc_cuda_gpu_open(int device, pc_cuda_err_t *cuerr)
{
    (void)device;
    return none(cuerr);
}

int pc_cuda_gpu_use(int device, pc_cuda_err_t *cuerr)
{
    (void)device;
    return none(cuerr);
}

int pc_cuda_gpu_bus_id(int device, char *buf, size_t len, pc_cuda_err_t *cuerr)
{
    (void)device, (void)buf, (void)len;
    return none(cuerr);
}

int pc_cuda_gpu_stream_create(int device, int low_priority, void **out, pc_cuda_err_t *cuerr)
{
    (void)device, (void)low_priority;
    *out = NULL;
    return none(cuerr);
}

void pc_cuda_gpu_stream_destroy(int device, void *stream)
{
    (void)device, (void)stream;
}

int pc_cuda_gpu_stream_sync(int device, void *stream, pc_cuda_err_t *cuerr)
{
    (void)device, (void)stream;
    return none(cuerr);
}

int pc_cuda_gpu_event_create(int device, void **out, pc_cuda_err_t *cuerr)
{
    (void)device;
    *out = NULL;
    return none(cuerr);
}

void pc_cuda_gpu_event_destroy(int device, void *event)
{
    (void)device, (void)event;
}

int pc_cuda_gpu_event_record(int device, void *event, void *stream, pc_cuda_err_t *cuerr)
{
    (void)device, (void)event, (void)stream;
    return none(cuerr);
}

int pc_cuda_gpu_event_sync(int device, void *event, pc_cuda_err_t *cuerr)
{
    (void)device, (void)event;
    return none(cuerr);
}

int pc_cuda_gpu_stream_wait(int device, void *stream, void *event, pc_cuda_err_t *cuerr)
{
    (void)device, (void)stream, (void)event;
    return none(cuerr);
}

int pc_cuda_gpu_copy(int device, void *dst, const void *src, size_t bytes, int to_device,
                     void *stream, int wait, pc_cuda_err_t *cuerr)
{
    (void)device, (void)dst, (void)src, (void)bytes, (void)to_device, (void)stream, (void)wait;
    return none(cuerr);
}

int pc_cuda_gpu_zero(int device, void *p, size_t bytes, void *stream, int wait,
                     pc_cuda_err_t *cuerr)
{
    (void)device, (void)p, (void)bytes, (void)stream, (void)wait;
    return none(cuerr);
}

int pc_cuda_gpu_alloc(int device, size_t bytes, void **out, pc_cuda_err_t *cuerr)
{
    (void)device, (void)bytes, (void)out;
    return none(cuerr);
}

void pc_cuda_gpu_free(int device, void *p)
{
    (void)device, (void)p;
}

int pc_cuda_gpu_host_alloc(int device, size_t bytes, void **out, pc_cuda_err_t *cuerr)
{
    (void)device, (void)bytes, (void)out;
    return none(cuerr);
}

void pc_cuda_gpu_host_free(void *p)
{
    (void)p;
}
