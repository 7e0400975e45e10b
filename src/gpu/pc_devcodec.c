/* pc_devcodec: codecs on a CUDA device, or on the CPU where there is none (pc_devcodec.h).
 *
 * The host side: arguments, the header, the stats and the checks of received messages are
 * the CPU codec's (one pc_codec_t inside); the kernels and their orchestration are in
 * cuda/codec_*.cu (codec_impl.cuh says which file does what). A codec on the CPU runs pc_codec
 * itself on host memory. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_devcodec.h"
#include "pipecompress/pc_error.h"

#include "../../cuda/pc_codec_cuda.h"
#include "../../cuda/pc_cuda_err.h"
#include "gpu_mem.h"

struct pc_devcodec {
    pc_codec_t *codec;     /* spec, stats, checks; the CPU path itself */
    int device;            /* PC_DEVCODEC_CPU or a CUDA device */
    char err[256];         /* the last failure's message (pc_devcodec_error) */
    pc_cuda_codec_t *cuda; /* device scratch */
};

struct pc_devcodec_state {
    const pc_devcodec_t *owner; /* identity check only: the codec may be destroyed first */
    int device;
    uint32_t chunk;
    size_t n;
    uint64_t steps;
    pc_codec_state_t *host; /* the CPU path: the state itself */
    size_t qn, np;          /* a powersgd matrix's Q and P^ (cols, rows x rank floats); else 0 */
    float *residual;        /* a device: n floats, or NULL */
    float *momentum;
    int folded; /* a device: PC_CODEC_FOLD_* (codec_internal.h), as a CPU state's */
};

static bool on_cpu(int device)
{
    return device == PC_DEVCODEC_CPU;
}

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
    bool lowrank = spec->id == PC_CODEC_POWERSGD;
    if (lowrank && device >= 0)
        return pc_error_fmt(PC_EINVAL, err, errlen,
                            "device codec: powersgd has no CUDA kernels (its products run on "
                            "the CPU): create it on PC_DEVCODEC_CPU, not device %d",
                            device);
    char why[160];
    int count = pc_cuda_status(why, sizeof(why));
    if (device == PC_DEVCODEC_ANY)
        device = count > 0 && !lowrank ? 0 : PC_DEVCODEC_CPU;
    if (device >= 0 && device >= count)
        return pc_error_fmt(PC_ENODEV, err, errlen, "device codec: no CUDA device %d (%s)", device,
                            why);
    pc_devcodec_t *c = calloc(1, sizeof(*c));
    if (!c)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "device codec: out of memory");
    c->device = device;
    int rc = pc_codec_create(spec, &c->codec);
    if (rc != PC_OK) {
        free(c);
        if (rc == PC_EINVAL)
            return pc_error_fmt(rc, err, errlen,
                                "device codec: the %s spec has a field out of its range "
                                "(pc_codec_spec_parse names which)",
                                pc_codec_name(spec->id));
        return pc_error_fmt(rc, err, errlen, "device codec: %s", pc_strerror(rc));
    }
    if (!on_cpu(device)) {
        pc_cuda_err_t cuerr = {0};
        rc = pc_cuda_codec_create(device, &c->cuda, &cuerr);
        if (rc != PC_OK) {
            pc_codec_destroy(c->codec);
            free(c);
            return pc_cuda_err_fail(rc, &cuerr, err, errlen, "device codec: scratch");
        }
    }
    *out = c;
    return PC_OK;
}

void pc_devcodec_destroy(pc_devcodec_t *c)
{
    if (!c)
        return;
    pc_cuda_codec_destroy(c->cuda);
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

/* Memory and copies are pc_gpu's (gpu_mem.h): the codec's device, or host memory for the
 * CPU codec (PC_DEVCODEC_CPU is gpu_mem.h's host device, -1). States and scratch are not
 * zeroed here (state_zero does it for the states); copies are waited for. */
static int dev_alloc(int device, size_t bytes, void **out, char *err, size_t errlen)
{
    return pc_gpu__alloc(device, bytes, false, out, err, errlen);
}

static int dev_copy(int device, void *dst, const void *src, size_t bytes, bool to_device,
                    pc_devcodec_stream_t stream, char *err, size_t errlen)
{
    return pc_gpu__copy(device, dst, src, bytes, to_device, stream, true, err, errlen);
}

int pc_devcodec_alloc(const pc_devcodec_t *c, size_t bytes, void **out, char *err, size_t errlen)
{
    if (!c || !out)
        return pc_error_fmt(PC_EINVAL, err, errlen, "alloc: no codec or result pointer");
    return dev_alloc(c->device, bytes, out, err, errlen);
}

void pc_devcodec_free(const pc_devcodec_t *c, void *p)
{
    if (c && p)
        pc_gpu__free(c->device, p);
}

int pc_devcodec_host_alloc(const pc_devcodec_t *c, size_t bytes, void **out, char *err,
                           size_t errlen)
{
    if (!c || !out)
        return pc_error_fmt(PC_EINVAL, err, errlen, "host_alloc: no codec or result pointer");
    return pc_gpu__host_alloc(c->device, bytes, false, out, err, errlen);
}

void pc_devcodec_host_free(const pc_devcodec_t *c, void *p)
{
    if (c && p)
        pc_gpu__host_free(c->device, p);
}

int pc_devcodec_copy(const pc_devcodec_t *c, void *dst, const void *src, size_t bytes,
                     bool to_device, pc_devcodec_stream_t stream, char *err, size_t errlen)
{
    if (!c || (bytes && (!dst || !src)))
        return pc_error_fmt(PC_EINVAL, err, errlen, "copy: no codec, source or destination");
    return dev_copy(c->device, dst, src, bytes, to_device, stream, err, errlen);
}

/* ---- states ---------------------------------------------------------------------------- */

/* Zero one of a device state's arrays (n floats). */
static int state_zero(const pc_devcodec_state_t *st, float *p, char *err, size_t errlen)
{
    return pc_gpu__zero(st->device, p, sizeof(float) * st->n, NULL, true, err, errlen);
}

/* A new state of c for chunk `chunk` of n elements, its arrays not yet made: *out, or
 * PC_EINVAL (n out of range) or PC_ENOMEM with err. */
static int state_new(pc_devcodec_t *c, uint32_t chunk, size_t n, pc_devcodec_state_t **out,
                     char *err, size_t errlen)
{
    if (!pc_codec__n_ok(c->codec, n))
        return pc_error_fmt(PC_EINVAL, err, errlen,
                            "state for chunk %u: %zu elements is not in 1..%u or its largest "
                            "message exceeds 2^32 - 1 bytes",
                            chunk, n, PC_CODEC_MAX_N);
    pc_devcodec_state_t *st = calloc(1, sizeof(*st));
    if (!st)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "state for chunk %u: out of memory", chunk);
    st->owner = c;
    st->device = c->device;
    st->chunk = chunk;
    st->n = n;
    *out = st;
    return PC_OK;
}

int pc_devcodec_state_create(pc_devcodec_t *c, uint32_t chunk, size_t n, pc_devcodec_state_t **out,
                             char *err, size_t errlen)
{
    if (!c || !out)
        return pc_error_fmt(PC_EINVAL, err, errlen, "state: no codec or result pointer");
    pc_devcodec_state_t *st;
    int rc = state_new(c, chunk, n, &st, err, errlen);
    if (rc != PC_OK)
        return rc;
    if (on_cpu(c->device)) {
        rc = pc_codec_state_create(c->codec, chunk, n, &st->host);
        if (rc != PC_OK)
            pc_error_fmt(rc, err, errlen, "state for chunk %u: %s", chunk, pc_strerror(rc));
    } else {
        /* The arrays the CPU state would hold (pc_codec_state_create), zeroed. */
        const pc_codec_spec_t *spec = pc_codec_spec(c->codec);
        size_t bytes = sizeof(float) * n;
        rc = PC_OK;
        if (spec->ef &&
            (rc = dev_alloc(c->device, bytes, (void **)&st->residual, err, errlen)) == PC_OK)
            rc = state_zero(st, st->residual, err, errlen);
        if (rc == PC_OK && pc_codec__has_momentum(spec) &&
            (rc = dev_alloc(c->device, bytes, (void **)&st->momentum, err, errlen)) == PC_OK)
            rc = state_zero(st, st->momentum, err, errlen);
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
        pc_gpu__free(st->device, st->residual);
    if (st->momentum)
        pc_gpu__free(st->device, st->momentum);
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
static int state_xfer(pc_devcodec_state_t *st, float *res, float *mom, bool to_device, char *err,
                      size_t errlen)
{
    if (!st)
        return pc_error_fmt(PC_EINVAL, err, errlen, "no state");
    if ((res && !state_residual(st)) || (mom && !state_momentum(st)))
        return pc_error_fmt(PC_EINVAL, err, errlen, "chunk %u's state holds no %s", st->chunk,
                            res && !state_residual(st) ? "residual (ef=off)" : "momentum");
    size_t bytes = sizeof(float) * st->n;
    int rc = PC_OK;
    if (res)
        rc = to_device
                 ? dev_copy(st->device, state_residual(st), res, bytes, true, NULL, err, errlen)
                 : dev_copy(st->device, res, state_residual(st), bytes, false, NULL, err, errlen);
    if (rc == PC_OK && mom)
        rc = to_device
                 ? dev_copy(st->device, state_momentum(st), mom, bytes, true, NULL, err, errlen)
                 : dev_copy(st->device, mom, state_momentum(st), bytes, false, NULL, err, errlen);
    return rc;
}

int pc_devcodec_state_get(pc_devcodec_state_t *st, float *residual, float *momentum, char *err,
                          size_t errlen)
{
    return state_xfer(st, residual, momentum, false, err, errlen);
}

int pc_devcodec_state_set(pc_devcodec_state_t *st, const float *residual, const float *momentum,
                          char *err, size_t errlen)
{
    /* Only read when copying to the device. */
    return state_xfer(st, (float *)(uintptr_t)residual, (float *)(uintptr_t)momentum, true, err,
                      errlen);
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

/* Record why a call on c failed (c->err, read with pc_devcodec_error) and return rc. */
static int fail(pc_devcodec_t *c, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(pc_devcodec_t *c, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    return rc;
}

/* The checks fold and compress share: PC_OK, or PC_EINVAL with the reason on c. */
static int check_call(pc_devcodec_t *c, const pc_devcodec_state_t *st, const char *what)
{
    if (!st)
        return fail(c, PC_EINVAL, "%s: no state", what);
    if (st->owner != c)
        return fail(c, PC_EINVAL, "%s: chunk %u's state belongs to another codec", what, st->chunk);
    return PC_OK;
}

/* A device call's failure on c: PC_ERANGE as the CPU says it, CUDA's words otherwise. */
static int device_fail(pc_devcodec_t *c, const pc_devcodec_state_t *st, int rc,
                       const pc_cuda_err_t *cuerr, const char *what)
{
    if (rc == PC_ERANGE)
        return fail(c, rc, "%s: chunk %u: the gradient or residual holds NaN or infinity", what,
                    st->chunk);
    return pc_cuda_err_fail(rc, cuerr, c->err, sizeof(c->err), "%s", what);
}

int pc_devcodec_fold(pc_devcodec_t *c, pc_devcodec_state_t *st, const float *grad,
                     pc_devcodec_stream_t stream)
{
    if (!c)
        return PC_EINVAL;
    int rc = check_call(c, st, "fold");
    if (rc != PC_OK)
        return rc;
    if (!grad)
        return fail(c, PC_EINVAL, "fold: no gradient");
    if (!pc_codec_spec(c->codec)->ef)
        return fail(c, PC_EINVAL, "fold: %s runs without error feedback: nothing to fold into",
                    pc_codec_name(pc_codec_spec(c->codec)->id));
    if (st->host) {
        rc = pc_codec_fold(c->codec, st->host, grad);
        return rc == PC_OK ? rc
                           : fail(c, rc, "fold: chunk %u: %s", st->chunk,
                                  rc == PC_ERANGE ? "the gradient or residual holds NaN or infinity"
                                                  : pc_strerror(rc));
    }
    pc_cuda_job_t job = {.codec = c->codec,
                         .residual = st->residual,
                         .momentum = st->momentum,
                         .grad = grad,
                         .n = st->n,
                         .stream = stream};
    pc_cuda_err_t cuerr = {0};
    rc = pc_cuda_codec_fold(c->cuda, c->device, &job, &cuerr);
    if (rc == PC_OK || rc == PC_ERANGE)
        st->folded = rc == PC_OK ? PC_CODEC_FOLD_OK : PC_CODEC_FOLD_NONFINITE;
    return rc == PC_OK ? rc : device_fail(c, st, rc, &cuerr, "fold");
}

/* Compress grad, or with grad NULL what pc_devcodec_fold folded. */
static int compress(pc_devcodec_t *c, pc_devcodec_state_t *st, const float *grad,
                    uint64_t iteration, pc_devcodec_stream_t stream, void *out, size_t cap,
                    size_t *len, const char *what)
{
    if (!out || !len)
        return fail(c, PC_EINVAL, "%s: no message buffer or length", what);
    if (pc_codec_spec(c->codec)->id == PC_CODEC_POWERSGD)
        return fail(c, PC_EINVAL,
                    "%s: chunk %u: powersgd travels in two rounds (pc_devcodec_lowrank_p, "
                    "_q), not one message",
                    what, st->chunk);
    size_t need = pc_codec_max_bytes(c->codec, st->n);
    if (cap < need)
        return fail(c, PC_EINVAL, "%s: a buffer of %zu bytes; chunk %u's largest message needs %zu",
                    what, cap, st->chunk, need);
    if (st->host) {
        int rc = grad ? pc_codec_compress(c->codec, st->host, grad, iteration, out, cap, len)
                      : pc_codec_compress_folded(c->codec, st->host, iteration, out, cap, len);
        if (rc == PC_OK)
            return rc;
        if (rc == PC_EINVAL && !grad)
            return fail(c, rc, "%s: chunk %u: nothing folded since the last compress", what,
                        st->chunk);
        return fail(c, rc, "%s: chunk %u: %s", what, st->chunk,
                    rc == PC_ERANGE ? "the gradient or residual holds NaN or infinity"
                                    : pc_strerror(rc));
    }
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
    pc_cuda_err_t cuerr = {0};
    int rc = pc_cuda_codec_compress(c->cuda, c->device, &job, &cuerr);
    if (rc != PC_OK)
        return device_fail(c, st, rc, &cuerr, what);
    pc_wire_header_t h = {
        .magic = PC_WIRE_MAGIC,
        .version = PC_WIRE_VERSION,
        .codec = (uint8_t)pc_codec_spec(c->codec)->id,
        .flags = (uint16_t)(pc_codec__flags(c->codec) | (job.bitmap ? PC_WIRE_F_BITMAP : 0)),
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
    st->folded = PC_CODEC_FOLD_NONE;
    /* The same counters as the CPU codec's (pc_codec_compress). */
    pc_codec_stats_t *s = pc_codec__stats_counters(c->codec);
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
}

int pc_devcodec_compress(pc_devcodec_t *c, pc_devcodec_state_t *st, const float *grad,
                         uint64_t iteration, pc_devcodec_stream_t stream, void *out, size_t cap,
                         size_t *len)
{
    if (!c)
        return PC_EINVAL;
    int rc = check_call(c, st, "compress");
    if (rc != PC_OK)
        return rc;
    if (!grad)
        return fail(c, PC_EINVAL, "compress: no gradient");
    return compress(c, st, grad, iteration, stream, out, cap, len, "compress");
}

int pc_devcodec_compress_folded(pc_devcodec_t *c, pc_devcodec_state_t *st, uint64_t iteration,
                                pc_devcodec_stream_t stream, void *out, size_t cap, size_t *len)
{
    if (!c)
        return PC_EINVAL;
    int rc = check_call(c, st, "compress_folded");
    if (rc != PC_OK)
        return rc;
    if (!pc_codec_spec(c->codec)->ef)
        return fail(c, PC_EINVAL, "compress_folded: %s runs without error feedback: use compress",
                    pc_codec_name(pc_codec_spec(c->codec)->id));
    if (!st->host && st->folded == PC_CODEC_FOLD_NONE) /* the CPU state keeps its own */
        return fail(c, PC_EINVAL,
                    "compress_folded: chunk %u: nothing folded since the last "
                    "compress",
                    st->chunk);
    if (!st->host && st->folded == PC_CODEC_FOLD_NONFINITE)
        return fail(c, PC_ERANGE, "compress_folded: chunk %u: the fold found NaN or infinity",
                    st->chunk);
    return compress(c, st, NULL, iteration, stream, out, cap, len, "compress_folded");
}

/* ---- PowerSGD's rounds: the CPU codec's, on a CPU state (pc_devcodec.h) ------------------- */

int pc_devcodec_state_create_matrix(pc_devcodec_t *c, uint32_t chunk, size_t rows, size_t n,
                                    pc_devcodec_state_t **out, char *err, size_t errlen)
{
    if (!c || !out)
        return pc_error_fmt(PC_EINVAL, err, errlen, "state: no codec or result pointer");
    const pc_codec_spec_t *spec = pc_codec_spec(c->codec);
    if (spec->id != PC_CODEC_POWERSGD)
        return pc_error_fmt(PC_EINVAL, err, errlen,
                            "state for chunk %u: a matrix state is powersgd's, not %s's", chunk,
                            pc_codec_name(spec->id));
    if (!spec->ef)
        return pc_error_fmt(PC_EINVAL, err, errlen,
                            "state for chunk %u: powersgd with ef=off keeps no M to fold into: "
                            "run it on the host codec (pc_codec)",
                            chunk);
    if (pc_codec__n_ok(c->codec, n) && !pc_codec_lowrank_fits(spec, rows, n))
        return pc_error_fmt(PC_EINVAL, err, errlen,
                            "state for chunk %u: %zu elements in %zu rows is not a matrix that "
                            "travels as factors (pc_codec_lowrank_fits)",
                            chunk, n, rows);
    pc_devcodec_state_t *st; /* on the CPU: pc_devcodec_create places powersgd nowhere else */
    int rc = state_new(c, chunk, n, &st, err, errlen);
    if (rc != PC_OK)
        return rc;
    st->qn = n / rows * (size_t)spec->rank;
    st->np = rows * (size_t)spec->rank;
    rc = pc_codec_state_create_matrix(c->codec, chunk, rows, n, &st->host);
    if (rc != PC_OK) {
        free(st);
        return pc_error_fmt(rc, err, errlen, "state for chunk %u: %s", chunk, pc_strerror(rc));
    }
    *out = st;
    return PC_OK;
}

size_t pc_devcodec_state_rows(const pc_devcodec_state_t *st)
{
    return st && st->host ? pc_codec_state_rows(st->host) : 0;
}

/* The checks every round shares, made before anything is touched (a refused call changes
 * nothing): a matrix state of c's whose step is at `round` (0: round 1 or a warm-up
 * message is due, after a fold; 1: round 2; 2: the step's end) and, for a call that writes
 * a message (msg), a buffer of the chunk's largest message. PC_OK, or PC_EINVAL with the
 * reason on c. */
static int lowrank_call(pc_devcodec_t *c, const pc_devcodec_state_t *st, int round, bool msg,
                        const void *out, size_t cap, const size_t *len, const char *what)
{
    static const char *const due[] = {"round 1 (or a warm-up step's message)", "round 2",
                                      "the step's end (lowrank_finish)"};
    int rc = check_call(c, st, what);
    if (rc != PC_OK)
        return rc;
    if (st->qn == 0)
        return fail(c, PC_EINVAL, "%s: chunk %u's state is not a powersgd matrix's", what,
                    st->chunk);
    int at = pc_codec__state_round(st->host); /* 0, 1 or 2 */
    if (at != round)
        return fail(c, PC_EINVAL, "%s: chunk %u: out of order: %s is due", what, st->chunk,
                    due[at]);
    if (round == 0 && pc_codec__state_folded(st->host) == PC_CODEC_FOLD_NONE)
        return fail(c, PC_EINVAL, "%s: chunk %u: nothing folded since the last step", what,
                    st->chunk);
    if (msg && (!out || !len))
        return fail(c, PC_EINVAL, "%s: no message buffer or length", what);
    if (msg && cap < pc_codec_max_bytes(c->codec, st->n))
        return fail(c, PC_EINVAL, "%s: a buffer of %zu bytes; chunk %u's largest message needs %zu",
                    what, cap, st->chunk, pc_codec_max_bytes(c->codec, st->n));
    return PC_OK;
}

/* A round's result on c: rc, with its reason recorded when it failed. */
static int lowrank_done(pc_devcodec_t *c, const pc_devcodec_state_t *st, int rc, const char *what)
{
    if (rc == PC_OK)
        return rc;
    return fail(c, rc, "%s: chunk %u: %s", what, st->chunk,
                rc == PC_ERANGE ? "the matrix or a product holds NaN or infinity"
                                : pc_strerror(rc));
}

/* A step's first message on a folded state: round 1's P_w, or (dense) a warm-up step's M. */
static int lowrank_first(pc_devcodec_t *c, pc_devcodec_state_t *st, uint64_t iteration, void *out,
                         size_t cap, size_t *len, bool dense)
{
    const char *what = dense ? "lowrank_dense" : "lowrank_p";
    if (!c)
        return PC_EINVAL;
    int rc = lowrank_call(c, st, 0, true, out, cap, len, what);
    if (rc != PC_OK)
        return rc;
    rc = dense ? pc_codec_lowrank_dense(c->codec, st->host, iteration, out, cap, len)
               : pc_codec_lowrank_p(c->codec, st->host, iteration, out, cap, len);
    return lowrank_done(c, st, rc, what);
}

int pc_devcodec_lowrank_p(pc_devcodec_t *c, pc_devcodec_state_t *st, uint64_t iteration,
                          pc_devcodec_stream_t stream, void *out, size_t cap, size_t *len)
{
    (void)stream; /* CPU states only */
    return lowrank_first(c, st, iteration, out, cap, len, false);
}

int pc_devcodec_lowrank_dense(pc_devcodec_t *c, pc_devcodec_state_t *st, uint64_t iteration,
                              pc_devcodec_stream_t stream, void *out, size_t cap, size_t *len)
{
    (void)stream;
    return lowrank_first(c, st, iteration, out, cap, len, true);
}

int pc_devcodec_lowrank_q(pc_devcodec_t *c, pc_devcodec_state_t *st, const float *phat,
                          uint64_t iteration, pc_devcodec_stream_t stream, void *out, size_t cap,
                          size_t *len)
{
    (void)stream;
    if (!c)
        return PC_EINVAL;
    int rc = lowrank_call(c, st, 1, true, out, cap, len, "lowrank_q");
    if (rc != PC_OK)
        return rc;
    if (!phat)
        return fail(c, PC_EINVAL, "lowrank_q: chunk %u: no P^", st->chunk);
    float *dst = pc_codec_state_lowrank_phat(st->host);
    if (dst != phat)
        memcpy(dst, phat, sizeof(float) * st->np);
    rc = pc_codec_lowrank_q(c->codec, st->host, iteration, out, cap, len);
    return lowrank_done(c, st, rc, "lowrank_q");
}

int pc_devcodec_lowrank_finish(pc_devcodec_t *c, pc_devcodec_state_t *st, const float *q_agg,
                               pc_codec_row_fn fn, void *ud, pc_devcodec_stream_t stream)
{
    (void)stream;
    if (!c)
        return PC_EINVAL;
    int rc = lowrank_call(c, st, 2, false, NULL, 0, NULL, "lowrank_finish");
    if (rc != PC_OK)
        return rc;
    if (!q_agg)
        return fail(c, PC_EINVAL, "lowrank_finish: chunk %u: no Q", st->chunk);
    rc = pc_codec_lowrank_finish(c->codec, st->host, q_agg, fn, ud);
    return lowrank_done(c, st, rc, "lowrank_finish");
}

/* Copy a matrix state's Q to (get) or from (set) the host array q. */
static int q_xfer(pc_devcodec_state_t *st, float *q, bool set, char *err, size_t errlen)
{
    if (!st || !q)
        return pc_error_fmt(PC_EINVAL, err, errlen, "Q: no state or array");
    if (st->qn == 0)
        return pc_error_fmt(PC_EINVAL, err, errlen,
                            "chunk %u's state holds no Q (not a powersgd matrix's)", st->chunk);
    float *mine = pc_codec_state_lowrank_q(st->host);
    if (set)
        memcpy(mine, q, sizeof(float) * st->qn);
    else
        memcpy(q, mine, sizeof(float) * st->qn);
    return PC_OK;
}

int pc_devcodec_state_get_q(pc_devcodec_state_t *st, float *q, char *err, size_t errlen)
{
    return q_xfer(st, q, false, err, errlen);
}

int pc_devcodec_state_set_q(pc_devcodec_state_t *st, const float *q, char *err, size_t errlen)
{
    /* Only read when set. */
    return q_xfer(st, (float *)(uintptr_t)q, true, err, errlen);
}

const char *pc_devcodec_error(const pc_devcodec_t *c)
{
    return c ? c->err : "no codec";
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
    pc_wire_header_t h = {0};
    int rc = pc_codec_validate(c->codec, msg, len, want, &h, err, errlen);
    if (hdr)
        *hdr = h;
    if (rc != PC_OK)
        return rc;
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
    pc_cuda_err_t cuerr = {0};
    rc = pc_cuda_decode_add(c->device, c->codec, &h, payload, idx, scale, dense, stream, &cuerr);
    free(idx);
    if (rc != PC_OK)
        return pc_cuda_err_fail(rc, &cuerr, err, errlen, "decode on the device");
    return PC_OK;
}
