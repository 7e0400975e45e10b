/* pc_devcodec: codecs on a CUDA device, or on the CPU where there is none (pc_devcodec.h).
 *
 * The host side: arguments, the header, the stats and the checks of received messages are
 * the CPU codec's (one pc_codec_t inside); the kernels and their orchestration are in
 * cuda/pc_codec.cu. A codec on the CPU runs pc_codec itself on host memory. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec_impl.h"
#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_devcodec.h"
#include "pipecompress/pc_error.h"

#ifdef PC_HAVE_CUDA
#include "../cuda/pc_codec_cuda.h"
#include "../cuda/pc_cuda_kernels.h"
#endif

struct pc_devcodec {
    pc_codec_t *codec; /* spec, stats, checks; the CPU path itself */
    int device;        /* PC_DEVCODEC_CPU or a CUDA device */
#ifdef PC_HAVE_CUDA
    pc_cuda_codec_t *cuda; /* device scratch */
#endif
};

struct pc_devcodec_state {
    const pc_devcodec_t *owner; /* identity check only: the codec may be destroyed first */
    int device;
    uint32_t chunk;
    size_t n;
    uint64_t steps;
    pc_codec_state_t *host; /* the CPU path: the state itself */
    float *residual;        /* a device: n floats, or NULL */
    float *momentum;
};

static bool on_cpu(int device)
{
    return device == PC_DEVCODEC_CPU;
}

#ifdef PC_HAVE_CUDA
/* A CUDA failure as PC_ECUDA (or PC_ENOMEM) with the runtime's words. */
static int cuda_fail(int rc, int cuerr, const char *what, char *err, size_t errlen)
{
    if (rc == PC_ECUDA || rc == PC_ENOMEM)
        return pc_error_fmt(rc, err, errlen, "%s: %s", what,
                            cuerr ? pc_cuda_error_string(cuerr) : pc_strerror(rc));
    return pc_error_fmt(rc, err, errlen, "%s: %s", what, pc_strerror(rc));
}
#endif

int pc_devcodec_create(const pc_codec_spec_t *spec, int device, pc_devcodec_t **out, char *err,
                       size_t errlen)
{
    if (!spec || !out)
        return pc_error_fmt(PC_EINVAL, err, errlen, "device codec: no spec or result pointer");
    if (device < PC_DEVCODEC_ANY)
        return pc_error_fmt(PC_EINVAL, err, errlen,
                            "device codec: device %d is not a device "
                            "number, PC_DEVCODEC_CPU or PC_DEVCODEC_ANY",
                            device);
    int count = pc_cuda_device_count();
    if (device == PC_DEVCODEC_ANY)
        device = count > 0 ? 0 : PC_DEVCODEC_CPU;
    if (device >= 0 && device >= count)
        return pc_error_fmt(PC_ENODEV, err, errlen, "device codec: no CUDA device %d (%s)", device,
                            pc_cuda_built() ? (count ? "fewer devices" : "no device found")
                                            : "built without CUDA");
    pc_devcodec_t *c = calloc(1, sizeof(*c));
    if (!c)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "device codec: out of memory");
    c->device = device;
    int rc = pc_codec_create(spec, &c->codec);
    if (rc != PC_OK) {
        free(c);
        return pc_error_fmt(rc, err, errlen, "device codec: %s", pc_strerror(rc));
    }
#ifdef PC_HAVE_CUDA
    if (!on_cpu(device)) {
        int cuerr = 0;
        rc = pc_cuda_codec_create(device, &c->cuda, &cuerr);
        if (rc != PC_OK) {
            pc_codec_destroy(c->codec);
            free(c);
            return cuda_fail(rc, cuerr, "device codec: scratch", err, errlen);
        }
    }
#endif
    *out = c;
    return PC_OK;
}

void pc_devcodec_destroy(pc_devcodec_t *c)
{
    if (!c)
        return;
#ifdef PC_HAVE_CUDA
    pc_cuda_codec_destroy(c->cuda);
#endif
    pc_codec_destroy(c->codec);
    free(c);
}

int pc_devcodec_device(const pc_devcodec_t *c)
{
    return c->device;
}

const pc_codec_t *pc_devcodec_codec(const pc_devcodec_t *c)
{
    return c->codec;
}

pc_codec_stats_t pc_devcodec_stats(const pc_devcodec_t *c)
{
    return pc_codec_stats(c->codec);
}

size_t pc_devcodec_max_bytes(const pc_devcodec_t *c, size_t n)
{
    return pc_codec_max_bytes(c->codec, n);
}

/* ---- memory ---------------------------------------------------------------------------- */

static int dev_alloc(int device, size_t bytes, void **out)
{
    if (on_cpu(device)) {
        void *p = malloc(bytes ? bytes : 1);
        if (!p)
            return PC_ENOMEM;
        *out = p;
        return PC_OK;
    }
#ifdef PC_HAVE_CUDA
    int cuerr = 0;
    return pc_cuda_alloc(device, bytes, out, &cuerr);
#else
    return PC_ENODEV;
#endif
}

static void dev_free(int device, void *p)
{
    if (on_cpu(device)) {
        free(p);
        return;
    }
#ifdef PC_HAVE_CUDA
    pc_cuda_free(device, p);
#endif
}

static int dev_copy(int device, void *dst, const void *src, size_t bytes, bool to_device,
                    pc_devcodec_stream_t stream)
{
    if (bytes == 0)
        return PC_OK;
    if (on_cpu(device)) {
        memcpy(dst, src, bytes);
        return PC_OK;
    }
#ifdef PC_HAVE_CUDA
    int cuerr = 0;
    return pc_cuda_copy(device, dst, src, bytes, to_device, stream, &cuerr);
#else
    (void)to_device;
    (void)stream;
    return PC_ENODEV;
#endif
}

int pc_devcodec_alloc(const pc_devcodec_t *c, size_t bytes, void **out)
{
    if (!c || !out)
        return PC_EINVAL;
    return dev_alloc(c->device, bytes, out);
}

void pc_devcodec_free(const pc_devcodec_t *c, void *p)
{
    if (c && p)
        dev_free(c->device, p);
}

int pc_devcodec_host_alloc(const pc_devcodec_t *c, size_t bytes, void **out)
{
    if (!c || !out)
        return PC_EINVAL;
#ifdef PC_HAVE_CUDA
    if (!on_cpu(c->device)) {
        int cuerr = 0;
        return pc_cuda_host_alloc(c->device, bytes, out, &cuerr);
    }
#endif
    return dev_alloc(PC_DEVCODEC_CPU, bytes, out);
}

void pc_devcodec_host_free(const pc_devcodec_t *c, void *p)
{
    if (!c || !p)
        return;
#ifdef PC_HAVE_CUDA
    if (!on_cpu(c->device)) {
        pc_cuda_host_free(p);
        return;
    }
#endif
    free(p);
}

int pc_devcodec_copy(const pc_devcodec_t *c, void *dst, const void *src, size_t bytes,
                     bool to_device, pc_devcodec_stream_t stream)
{
    if (!c || (bytes && (!dst || !src)))
        return PC_EINVAL;
    return dev_copy(c->device, dst, src, bytes, to_device, stream);
}

/* ---- states ---------------------------------------------------------------------------- */

int pc_devcodec_state_create(pc_devcodec_t *c, uint32_t chunk, size_t n, pc_devcodec_state_t **out)
{
    if (!c || !out || !pc_codec__n_ok(c->codec, n))
        return PC_EINVAL;
    pc_devcodec_state_t *st = calloc(1, sizeof(*st));
    if (!st)
        return PC_ENOMEM;
    st->owner = c;
    st->device = c->device;
    st->chunk = chunk;
    st->n = n;
    int rc;
    if (on_cpu(c->device)) {
        rc = pc_codec_state_create(c->codec, chunk, n, &st->host);
    } else {
#ifdef PC_HAVE_CUDA
        /* The arrays the CPU state would hold (pc_codec_state_create), zeroed. */
        const pc_codec_spec_t *spec = pc_codec_spec(c->codec);
        int cuerr = 0;
        rc = PC_OK;
        if (spec->ef && (rc = pc_cuda_alloc(c->device, sizeof(float) * n, (void **)&st->residual,
                                            &cuerr)) == PC_OK)
            rc = pc_cuda_zero(c->device, st->residual, sizeof(float) * n, NULL, &cuerr);
        if (rc == PC_OK && pc_codec__has_momentum(spec) &&
            (rc = pc_cuda_alloc(c->device, sizeof(float) * n, (void **)&st->momentum, &cuerr)) ==
                PC_OK)
            rc = pc_cuda_zero(c->device, st->momentum, sizeof(float) * n, NULL, &cuerr);
#else
        rc = PC_ENODEV;
#endif
    }
    if (rc != PC_OK) {
        pc_devcodec_state_destroy(st);
        return rc;
    }
    *out = st;
    return PC_OK;
}

void pc_devcodec_state_destroy(pc_devcodec_state_t *st)
{
    if (!st)
        return;
    pc_codec_state_destroy(st->host);
    if (st->residual)
        dev_free(st->device, st->residual);
    if (st->momentum)
        dev_free(st->device, st->momentum);
    free(st);
}

size_t pc_devcodec_state_n(const pc_devcodec_state_t *st)
{
    return st->n;
}

static float *state_residual(const pc_devcodec_state_t *st)
{
    return st->host ? pc_codec_state_residual(st->host) : st->residual;
}

static float *state_momentum(const pc_devcodec_state_t *st)
{
    return st->host ? pc_codec_state_momentum(st->host) : st->momentum;
}

bool pc_devcodec_state_has_residual(const pc_devcodec_state_t *st)
{
    return state_residual(st) != NULL;
}

bool pc_devcodec_state_has_momentum(const pc_devcodec_state_t *st)
{
    return state_momentum(st) != NULL;
}

/* Copy the state's arrays to (get) or from (set) host arrays. */
static int state_xfer(pc_devcodec_state_t *st, float *res, float *mom, bool to_device)
{
    if (!st || (res && !state_residual(st)) || (mom && !state_momentum(st)))
        return PC_EINVAL;
    size_t bytes = sizeof(float) * st->n;
    int rc = PC_OK;
    if (res)
        rc = to_device ? dev_copy(st->device, state_residual(st), res, bytes, true, NULL)
                       : dev_copy(st->device, res, state_residual(st), bytes, false, NULL);
    if (rc == PC_OK && mom)
        rc = to_device ? dev_copy(st->device, state_momentum(st), mom, bytes, true, NULL)
                       : dev_copy(st->device, mom, state_momentum(st), bytes, false, NULL);
    return rc;
}

int pc_devcodec_state_get(pc_devcodec_state_t *st, float *residual, float *momentum)
{
    return state_xfer(st, residual, momentum, false);
}

int pc_devcodec_state_set(pc_devcodec_state_t *st, const float *residual, const float *momentum)
{
    /* Only read when copying to the device. */
    return state_xfer(st, (float *)(uintptr_t)residual, (float *)(uintptr_t)momentum, true);
}

uint64_t pc_devcodec_state_steps(const pc_devcodec_state_t *st)
{
    return st->host ? pc_codec_state_steps(st->host) : st->steps;
}

void pc_devcodec_state_set_steps(pc_devcodec_state_t *st, uint64_t steps)
{
    if (st->host)
        pc_codec_state_set_steps(st->host, steps);
    st->steps = steps;
}

/* ---- compress and decode ----------------------------------------------------------------- */

/* Whether st belongs to c and c folds (error feedback on). */
static bool foldable(const pc_devcodec_t *c, const pc_devcodec_state_t *st)
{
    return c && st && st->owner == c && pc_codec_spec(c->codec)->ef;
}

int pc_devcodec_fold(pc_devcodec_t *c, pc_devcodec_state_t *st, const float *grad,
                     pc_devcodec_stream_t stream)
{
    if (!foldable(c, st) || !grad)
        return PC_EINVAL;
    if (st->host)
        return pc_codec_fold(c->codec, st->host, grad);
#ifdef PC_HAVE_CUDA
    pc_cuda_job_t job = {.codec = c->codec,
                         .residual = st->residual,
                         .momentum = st->momentum,
                         .grad = grad,
                         .n = st->n,
                         .stream = stream};
    int cuerr = 0;
    return pc_cuda_codec_fold(c->cuda, c->device, &job, &cuerr);
#else
    (void)stream;
    return PC_ENODEV;
#endif
}

/* Compress grad, or with grad NULL what pc_devcodec_fold folded. */
static int compress(pc_devcodec_t *c, pc_devcodec_state_t *st, const float *grad,
                    uint64_t iteration, pc_devcodec_stream_t stream, void *out, size_t cap,
                    size_t *len)
{
    if (!c || !st || !out || !len || st->owner != c || cap < pc_codec_max_bytes(c->codec, st->n))
        return PC_EINVAL;
    if (st->host)
        return grad ? pc_codec_compress(c->codec, st->host, grad, iteration, out, cap, len)
                    : pc_codec_compress_folded(c->codec, st->host, iteration, out, cap, len);
#ifdef PC_HAVE_CUDA
    pc_cuda_job_t job = {
        .codec = c->codec,
        .residual = st->residual,
        .momentum = st->momentum,
        .grad = grad,
        .n = st->n,
        .chunk = st->chunk,
        .iteration = iteration,
        .steps = st->steps,
        .stream = stream,
        .payload = (uint8_t *)out + PC_WIRE_HEADER_BYTES,
        .cap = cap - PC_WIRE_HEADER_BYTES,
    };
    int cuerr = 0;
    int rc = pc_cuda_codec_compress(c->cuda, c->device, &job, &cuerr);
    if (rc != PC_OK)
        return rc;
    pc_wire_header_t h = {
        .magic = PC_WIRE_MAGIC,
        .version = PC_WIRE_VERSION,
        .codec = (uint8_t)pc_codec_spec(c->codec)->id,
        .flags = pc_codec__flags(c->codec),
        .chunk = st->chunk,
        .n = (uint32_t)st->n,
        .iteration = iteration,
        .entries = job.entries,
        .payload = job.bytes,
        .scale = job.scale,
    };
    pc_wire_header_write(&h, out);
    *len = PC_WIRE_HEADER_BYTES + job.bytes;
    st->steps++;
    /* The same counters as the CPU codec's (pc_codec_compress). */
    pc_codec_stats_t *s = &c->codec->stats;
    s->messages++;
    s->entries += job.entries;
    s->bytes += *len;
    if (job.dgc_path == 0)
        s->dgc_sampled++;
    else if (job.dgc_path == 1)
        s->dgc_adapted++;
    else if (job.dgc_path == 2)
        s->dgc_exact++;
    return PC_OK;
#else
    (void)iteration;
    (void)stream;
    return PC_ENODEV;
#endif
}

int pc_devcodec_compress(pc_devcodec_t *c, pc_devcodec_state_t *st, const float *grad,
                         uint64_t iteration, pc_devcodec_stream_t stream, void *out, size_t cap,
                         size_t *len)
{
    if (!grad)
        return PC_EINVAL;
    return compress(c, st, grad, iteration, stream, out, cap, len);
}

int pc_devcodec_compress_folded(pc_devcodec_t *c, pc_devcodec_state_t *st, uint64_t iteration,
                                pc_devcodec_stream_t stream, void *out, size_t cap, size_t *len)
{
    if (!foldable(c, st))
        return PC_EINVAL;
    return compress(c, st, NULL, iteration, stream, out, cap, len);
}

int pc_devcodec_decode_add(const pc_devcodec_t *c, const void *msg, size_t len,
                           const pc_codec_expect_t *want, float scale, float *dense,
                           pc_devcodec_stream_t stream, pc_wire_header_t *hdr, char *err,
                           size_t errlen)
{
    if (!c)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "decode called without a codec");
    if (on_cpu(c->device))
        return pc_codec_decode_add(c->codec, msg, len, want, scale, dense, hdr, err, errlen);
    if (!dense)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "decode called without a buffer");
    if (!isfinite(scale))
        return pc_error_fmt(PC_EFORMAT, err, errlen, "non-finite scale %g", (double)scale);
    pc_wire_header_t h;
    int rc = pc_codec_validate(c->codec, msg, len, want, &h, err, errlen);
    if (hdr)
        *hdr = h;
    if (rc != PC_OK)
        return rc;
#ifdef PC_HAVE_CUDA
    const uint8_t *payload = (const uint8_t *)msg + PC_WIRE_HEADER_BYTES;
    uint32_t *idx = NULL;
    if (pc_codec__sparse(c->codec)) {
        /* Indices on the host: varints are sequential, randomk's are regenerated. */
        idx = malloc(sizeof(uint32_t) * (h.entries ? h.entries : 1));
        if (!idx || pc_codec__indices(c->codec, &h, payload, idx) != PC_OK) {
            free(idx);
            return pc_error_fmt(PC_ENOMEM, err, errlen, "chunk %u: out of memory decoding",
                                h.chunk);
        }
    }
    int cuerr = 0;
    rc = pc_cuda_decode_add(c->device, c->codec, &h, payload, idx, scale, dense, stream, &cuerr);
    free(idx);
    if (rc != PC_OK)
        return cuda_fail(rc, cuerr, "decode on the device", err, errlen);
    return PC_OK;
#else
    (void)stream;
    return pc_error_fmt(PC_ENODEV, err, errlen, "built without CUDA");
#endif
}
