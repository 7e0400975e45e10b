/* pc_gpu: what the runtime needs of a GPU to move device-resident tensors through the
 * pipeline: one device, streams, events, pinned host memory and asynchronous copies.
 *
 * A pc_gpu_t is either a CUDA device (an ordinal >= 0) or the host emulation
 * (PC_GPU_EMULATE): "device" memory is then ordinary host memory, copies are memcpy done
 * at once, an event is complete as soon as it is recorded and a stream wait has nothing to
 * wait for. The emulation runs the runtime's device-tensor bookkeeping (mirrors, copies,
 * events, chunk states) on machines without a GPU, which is how CI tests it
 * (--device emulate); it cannot show an ordering bug that only a real device's
 * asynchrony would.
 *
 * Both count what they do (pc_gpu_stats): tests check the bookkeeping with the counts.
 *
 * Streams are cudaStream_t values passed as pc_gpu_stream_t (NULL: the legacy default
 * stream); the emulation hands out distinct non-NULL tokens. Calls make the context's
 * device current for their duration and restore the caller's (cuda/pc_device.cuh).
 *
 * Errors: PC_ENODEV (create: no such device, CUDA not built in: err says why), PC_ECUDA
 * (with the CUDA runtime's message in err), PC_ENOMEM, PC_EINVAL. Threads: every call is
 * thread-safe on a context (the CUDA runtime is; the counters are atomic), but an event is
 * recorded by one thread at a time. This header needs neither MPI nor a CUDA header. */
#ifndef PC_GPU_H
#define PC_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pc_gpu pc_gpu_t;
typedef struct pc_gpu_event pc_gpu_event_t;
typedef void *pc_gpu_stream_t; /* a cudaStream_t (NULL: the legacy default stream) */

/* The host emulation's "device" number. */
#define PC_GPU_EMULATE (-1)

/* Open `device` (a CUDA ordinal, or PC_GPU_EMULATE). PC_OK, PC_EINVAL (device < -1),
 * PC_ENODEV with the reason (the runtime's own, "built without CUDA", or "device 3 of 2"),
 * PC_ENOMEM. *out is the caller's, freed with pc_gpu_destroy. */
int pc_gpu_create(int device, pc_gpu_t **out, char *err, size_t errlen);
/* Free g (NULL accepted). Its streams and events must be destroyed first. */
void pc_gpu_destroy(pc_gpu_t *g);

/* The device number given to create. Thread-safe. */
int pc_gpu_device(const pc_gpu_t *g);
/* "cuda:0 (NVIDIA H200)" or "emulated (host memory)", into buf. Thread-safe. */
void pc_gpu_describe(const pc_gpu_t *g, char *buf, size_t len);
/* Make g's device the calling thread's current device, for good (cudaSetDevice; the
 * emulation: nothing). The runtime does it on its threads, so that the calls below, which
 * make the device current for their duration and restore the thread's, switch nothing (a
 * thread that never chose a device reads as device 0, and restoring that would make a
 * context on device 0 for every rank of a node with several GPUs). PC_OK or PC_ECUDA. */
int pc_gpu_use(pc_gpu_t *g, char *err, size_t errlen);
/* The device's PCI bus id ("0000:3b:00.0", as hwloc takes it) into buf: PC_OK, or
 * PC_ENODEV for the emulation (it has none). Thread-safe. */
int pc_gpu_pci_bus_id(const pc_gpu_t *g, char *buf, size_t len);

/* Page-locked host memory of `bytes` (the emulation: malloc), zeroed, for copies that run
 * at full speed and asynchronously. PC_OK, PC_ENOMEM or PC_ECUDA with err. Free with
 * pc_gpu_host_free (NULL accepted). */
int pc_gpu_host_alloc(pc_gpu_t *g, size_t bytes, void **out, char *err, size_t errlen);
void pc_gpu_host_free(pc_gpu_t *g, void *p);
/* Device memory of `bytes` (the emulation: malloc), zeroed; for tests and programs that
 * have no allocator of their own. Free with pc_gpu_free (NULL accepted). */
int pc_gpu_alloc(pc_gpu_t *g, size_t bytes, void **out, char *err, size_t errlen);
void pc_gpu_free(pc_gpu_t *g, void *p);

/* A non-blocking stream (it never waits for the legacy default stream); low_priority: the
 * device's lowest priority (on most devices the default itself), so that a compressor's
 * kernels yield to the training's, whose stream must then have a higher priority than the
 * default (pc_model's has the highest); else the default priority. */
int pc_gpu_stream_create(pc_gpu_t *g, bool low_priority, pc_gpu_stream_t *out, char *err,
                         size_t errlen);
void pc_gpu_stream_destroy(pc_gpu_t *g, pc_gpu_stream_t s);
/* Block the calling thread until everything queued on s is done. */
int pc_gpu_stream_sync(pc_gpu_t *g, pc_gpu_stream_t s, char *err, size_t errlen);

/* Events (timing disabled: only ordering). */
int pc_gpu_event_create(pc_gpu_t *g, pc_gpu_event_t **out, char *err, size_t errlen);
void pc_gpu_event_destroy(pc_gpu_event_t *e);
/* Capture the work queued on s so far; never blocks the caller. */
int pc_gpu_event_record(pc_gpu_event_t *e, pc_gpu_stream_t s, char *err, size_t errlen);
/* Block the calling thread until the captured work is done (an event never recorded is
 * done). */
int pc_gpu_event_sync(pc_gpu_event_t *e, char *err, size_t errlen);
/* Make s wait (on the device, not the caller) for the captured work before what is queued
 * on it next. */
int pc_gpu_stream_wait(pc_gpu_stream_t s, pc_gpu_event_t *e, char *err, size_t errlen);

/* Copy bytes between host and device on stream s, after the work queued there; returns
 * once queued (the emulation: once done). Host memory from pc_gpu_host_alloc makes the
 * copy asynchronous; other host memory makes CUDA stage it (the call may then block). */
typedef enum pc_gpu_dir { PC_GPU_TO_DEVICE = 0, PC_GPU_TO_HOST = 1 } pc_gpu_dir_t;
int pc_gpu_copy(pc_gpu_t *g, void *dst, const void *src, size_t bytes, pc_gpu_dir_t dir,
                pc_gpu_stream_t s, char *err, size_t errlen);

/* What a context has done since it was created (both kinds count alike). */
typedef struct pc_gpu_stats {
    uint64_t to_device_copies, to_device_bytes;
    uint64_t to_host_copies, to_host_bytes;
    uint64_t records;     /* pc_gpu_event_record */
    uint64_t event_syncs; /* pc_gpu_event_sync */
    uint64_t waits;       /* pc_gpu_stream_wait */
} pc_gpu_stats_t;
/* A snapshot of g's counts (each read atomically; not one instant across fields).
 * Thread-safe. */
void pc_gpu_stats(const pc_gpu_t *g, pc_gpu_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif /* PC_GPU_H */
