/* pc_gpu: a device (or the host emulation) for device-resident tensors (see pc_gpu.h). The
 * bookkeeping is here, in C; cuda/pc_gpu.cu holds the CUDA runtime calls. */
#include "config.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_devcodec.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_gpu.h"

#include "../../cuda/pc_cuda_err.h"
#include "../../cuda/pc_gpu_cuda.h"
#include "gpu_mem.h"

/* The emulation's streams: distinct non-NULL tokens (never dereferenced). */
#define EMU_STREAM ((pc_gpu_stream_t)(uintptr_t)0x5eed)

struct pc_gpu {
    int device;
    char name[96];
    /* Counters: any thread adds (relaxed); pc_gpu_stats reads them. Nothing is ordered by
     * them: they are statistics. */
    _Atomic uint64_t to_device_copies, to_device_bytes, to_host_copies, to_host_bytes;
    _Atomic uint64_t records, event_syncs, waits;
};

struct pc_gpu_event {
    pc_gpu_t *g;
    void *ev; /* cudaEvent_t; NULL in the emulation */
};

static bool emulated(const pc_gpu_t *g)
{
    return g->device == PC_GPU_EMULATE;
}

static void count(_Atomic uint64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

_Static_assert(PC_GPU_EMULATE == -1 && PC_DEVCODEC_CPU == -1,
               "gpu_mem.h: host memory is device -1 for pc_gpu and pc_devcodec alike");

int pc_gpu_create(int device, pc_gpu_t **out, char *err, size_t errlen)
{
    if (device < PC_GPU_EMULATE)
        return pc_error_fmt(PC_EINVAL, err, errlen, "no device %d", device);
    if (device >= 0) {
        char why[160];
        int n = pc_cuda_status(why, sizeof(why));
        if (n == 0)
            return pc_error_fmt(PC_ENODEV, err, errlen, "no usable CUDA device: %s", why);
        if (device >= n)
            return pc_error_fmt(PC_ENODEV, err, errlen, "no CUDA device %d: %s", device, why);
    }
    pc_gpu_t *g = calloc(1, sizeof(*g));
    if (!g)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    g->device = device;
    if (device == PC_GPU_EMULATE) {
        snprintf(g->name, sizeof(g->name), "emulated (host memory)");
    } else {
        pc_cuda_err_t cuerr = {0};
        int rc = pc_cuda_gpu_open(device, &cuerr);
        if (rc != PC_OK) {
            free(g);
            char what[48];
            snprintf(what, sizeof(what), "cannot open CUDA device %d", device);
            return pc_cuda_err_fail(PC_ENODEV, &cuerr, err, errlen, "%s", what);
        }
        char dn[64];
        pc_cuda_device_name(device, dn, sizeof(dn));
        snprintf(g->name, sizeof(g->name), "cuda:%d (%s)", device, dn);
    }
    *out = g;
    return PC_OK;
}

void pc_gpu_destroy(pc_gpu_t *g)
{
    free(g);
}

int pc_gpu_device(const pc_gpu_t *g)
{
    return g->device;
}

void pc_gpu_describe(const pc_gpu_t *g, char *buf, size_t len)
{
    if (buf && len)
        snprintf(buf, len, "%s", g->name);
}

int pc_gpu_use(pc_gpu_t *g, char *err, size_t errlen)
{
    if (emulated(g))
        return PC_OK;
    pc_cuda_err_t cuerr = {0};
    int rc = pc_cuda_gpu_use(g->device, &cuerr);
    return rc == PC_OK
               ? PC_OK
               : pc_cuda_err_fail(rc, &cuerr, err, errlen, "%s", "making the device current");
}

int pc_gpu_pci_bus_id(const pc_gpu_t *g, char *buf, size_t len)
{
    if (emulated(g) || !buf || len == 0)
        return PC_ENODEV;
    pc_cuda_err_t cuerr = {0};
    return pc_cuda_gpu_bus_id(g->device, buf, len, &cuerr) == PC_OK ? PC_OK : PC_ENODEV;
}

/* ---- memory and copies by device number (gpu_mem.h): the library's one wrapper ---- */

int pc_gpu__alloc(int device, size_t bytes, bool zero, void **out, char *err, size_t errlen)
{
    void *p = NULL;
    if (device < 0) {
        p = zero ? calloc(1, bytes ? bytes : 1) : malloc(bytes ? bytes : 1);
        if (!p)
            return pc_error_fmt(PC_ENOMEM, err, errlen, "%zu bytes of host memory: out of memory",
                                bytes);
        *out = p;
        return PC_OK;
    }
    pc_cuda_err_t cuerr = {0};
    int rc = pc_cuda_gpu_alloc(device, bytes, &p, &cuerr);
    if (rc == PC_OK && zero)
        rc = pc_cuda_gpu_zero(device, p, bytes, NULL, true, &cuerr);
    if (rc != PC_OK) {
        pc_cuda_gpu_free(device, p);
        return pc_cuda_err_fail(rc, &cuerr, err, errlen, "%zu bytes on CUDA device %d", bytes,
                                device);
    }
    *out = p;
    return PC_OK;
}

void pc_gpu__free(int device, void *p)
{
    if (device < 0)
        free(p);
    else
        pc_cuda_gpu_free(device, p);
}

int pc_gpu__host_alloc(int device, size_t bytes, bool zero, void **out, char *err, size_t errlen)
{
    if (device < 0)
        return pc_gpu__alloc(device, bytes, zero, out, err, errlen);
    void *p = NULL;
    pc_cuda_err_t cuerr = {0};
    int rc = pc_cuda_gpu_host_alloc(device, bytes, &p, &cuerr);
    if (rc != PC_OK)
        return pc_cuda_err_fail(rc, &cuerr, err, errlen, "%zu bytes of pinned host memory", bytes);
    if (zero)
        memset(p, 0, bytes);
    *out = p;
    return PC_OK;
}

void pc_gpu__host_free(int device, void *p)
{
    if (device < 0)
        free(p);
    else
        pc_cuda_gpu_host_free(p);
}

int pc_gpu__copy(int device, void *dst, const void *src, size_t bytes, bool to_device, void *stream,
                 bool wait, char *err, size_t errlen)
{
    if (bytes == 0)
        return PC_OK;
    if (!dst || !src)
        return pc_error_fmt(PC_EINVAL, err, errlen, "copy of %zu bytes: no source or destination",
                            bytes);
    if (device < 0) {
        memmove(dst, src, bytes);
        return PC_OK;
    }
    pc_cuda_err_t cuerr = {0};
    int rc = pc_cuda_gpu_copy(device, dst, src, bytes, to_device, stream, wait, &cuerr);
    return rc == PC_OK ? PC_OK
                       : pc_cuda_err_fail(rc, &cuerr, err, errlen, "copy of %zu bytes %s device %d",
                                          bytes, to_device ? "to" : "from", device);
}

int pc_gpu__zero(int device, void *p, size_t bytes, void *stream, bool wait, char *err,
                 size_t errlen)
{
    if (bytes == 0)
        return PC_OK;
    if (device < 0) {
        memset(p, 0, bytes);
        return PC_OK;
    }
    pc_cuda_err_t cuerr = {0};
    int rc = pc_cuda_gpu_zero(device, p, bytes, stream, wait, &cuerr);
    return rc == PC_OK ? PC_OK
                       : pc_cuda_err_fail(rc, &cuerr, err, errlen, "zeroing %zu bytes on device %d",
                                          bytes, device);
}

int pc_gpu_host_alloc(pc_gpu_t *g, size_t bytes, void **out, char *err, size_t errlen)
{
    *out = NULL;
    return pc_gpu__host_alloc(g->device, bytes, true, out, err, errlen);
}

void pc_gpu_host_free(pc_gpu_t *g, void *p)
{
    pc_gpu__host_free(g->device, p);
}

int pc_gpu_alloc(pc_gpu_t *g, size_t bytes, void **out, char *err, size_t errlen)
{
    *out = NULL;
    return pc_gpu__alloc(g->device, bytes, true, out, err, errlen);
}

void pc_gpu_free(pc_gpu_t *g, void *p)
{
    pc_gpu__free(g->device, p);
}

int pc_gpu_stream_create(pc_gpu_t *g, bool low_priority, pc_gpu_stream_t *out, char *err,
                         size_t errlen)
{
    if (emulated(g)) {
        *out = EMU_STREAM;
        return PC_OK;
    }
    pc_cuda_err_t cuerr = {0};
    int rc = pc_cuda_gpu_stream_create(g->device, low_priority, out, &cuerr);
    return rc == PC_OK ? PC_OK
                       : pc_cuda_err_fail(rc, &cuerr, err, errlen, "%s", "creating a stream");
}

void pc_gpu_stream_destroy(pc_gpu_t *g, pc_gpu_stream_t s)
{
    if (!emulated(g))
        pc_cuda_gpu_stream_destroy(g->device, s);
}

int pc_gpu_stream_sync(pc_gpu_t *g, pc_gpu_stream_t s, char *err, size_t errlen)
{
    if (emulated(g))
        return PC_OK;
    pc_cuda_err_t cuerr = {0};
    int rc = pc_cuda_gpu_stream_sync(g->device, s, &cuerr);
    return rc == PC_OK ? PC_OK
                       : pc_cuda_err_fail(rc, &cuerr, err, errlen, "%s", "waiting for a stream");
}

int pc_gpu_event_create(pc_gpu_t *g, pc_gpu_event_t **out, char *err, size_t errlen)
{
    pc_gpu_event_t *e = calloc(1, sizeof(*e));
    if (!e)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    e->g = g;
    if (!emulated(g)) {
        pc_cuda_err_t cuerr = {0};
        int rc = pc_cuda_gpu_event_create(g->device, &e->ev, &cuerr);
        if (rc != PC_OK) {
            free(e);
            return pc_cuda_err_fail(rc, &cuerr, err, errlen, "%s", "creating an event");
        }
    }
    *out = e;
    return PC_OK;
}

void pc_gpu_event_destroy(pc_gpu_event_t *e)
{
    if (!e)
        return;
    if (!emulated(e->g))
        pc_cuda_gpu_event_destroy(e->g->device, e->ev);
    free(e);
}

int pc_gpu_event_record(pc_gpu_event_t *e, pc_gpu_stream_t s, char *err, size_t errlen)
{
    count(&e->g->records, 1);
    if (emulated(e->g))
        return PC_OK;
    pc_cuda_err_t cuerr = {0};
    int rc = pc_cuda_gpu_event_record(e->g->device, e->ev, s, &cuerr);
    return rc == PC_OK ? PC_OK
                       : pc_cuda_err_fail(rc, &cuerr, err, errlen, "%s", "recording an event");
}

int pc_gpu_event_sync(pc_gpu_event_t *e, char *err, size_t errlen)
{
    count(&e->g->event_syncs, 1);
    if (emulated(e->g))
        return PC_OK;
    pc_cuda_err_t cuerr = {0};
    int rc = pc_cuda_gpu_event_sync(e->g->device, e->ev, &cuerr);
    return rc == PC_OK ? PC_OK
                       : pc_cuda_err_fail(rc, &cuerr, err, errlen, "%s", "waiting for an event");
}

int pc_gpu_stream_wait(pc_gpu_stream_t s, pc_gpu_event_t *e, char *err, size_t errlen)
{
    count(&e->g->waits, 1);
    if (emulated(e->g))
        return PC_OK;
    pc_cuda_err_t cuerr = {0};
    int rc = pc_cuda_gpu_stream_wait(e->g->device, s, e->ev, &cuerr);
    return rc == PC_OK ? PC_OK
                       : pc_cuda_err_fail(rc, &cuerr, err, errlen, "%s",
                                          "making a stream wait for an event");
}

int pc_gpu_copy(pc_gpu_t *g, void *dst, const void *src, size_t bytes, pc_gpu_dir_t dir,
                pc_gpu_stream_t s, char *err, size_t errlen)
{
    if (dir != PC_GPU_TO_DEVICE && dir != PC_GPU_TO_HOST)
        return pc_error_fmt(PC_EINVAL, err, errlen, "bad copy direction %d", (int)dir);
    if (dir == PC_GPU_TO_DEVICE) {
        count(&g->to_device_copies, 1);
        count(&g->to_device_bytes, bytes);
    } else {
        count(&g->to_host_copies, 1);
        count(&g->to_host_bytes, bytes);
    }
    return pc_gpu__copy(g->device, dst, src, bytes, dir == PC_GPU_TO_DEVICE, s, false, err, errlen);
}

void pc_gpu_stats(const pc_gpu_t *g, pc_gpu_stats_t *out)
{
    pc_gpu_t *m = (pc_gpu_t *)g; /* atomic loads of a const object: C11 wants non-const */
    out->to_device_copies = atomic_load_explicit(&m->to_device_copies, memory_order_relaxed);
    out->to_device_bytes = atomic_load_explicit(&m->to_device_bytes, memory_order_relaxed);
    out->to_host_copies = atomic_load_explicit(&m->to_host_copies, memory_order_relaxed);
    out->to_host_bytes = atomic_load_explicit(&m->to_host_bytes, memory_order_relaxed);
    out->records = atomic_load_explicit(&m->records, memory_order_relaxed);
    out->event_syncs = atomic_load_explicit(&m->event_syncs, memory_order_relaxed);
    out->waits = atomic_load_explicit(&m->waits, memory_order_relaxed);
}
