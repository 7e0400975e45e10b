/* worker_device: device-resident tensors in the worker (--device cuda|emulate).
 *
 * The caller registers device buffers (pc_worker_register_device, worker_start.c). While started,
 * each tensor's parameters also have a host mirror, its p, in one pinned slab laid out in
 * registration order (tensors adjacent on the device are adjacent in the mirror, so a
 * chunk that groups tensors is one range in both), and each chunk whose gradient is copied
 * to the host has a pinned gradient mirror of its own, its g. Everything the host-memory runtime
 * does (the initial parameters, the updates, allreduce's local step, checkpoints) works on the
 * mirrors unchanged; this file moves data between them and the device, at four points:
 *
 *   grad_ready(t)      records t's event on the caller's stream (never blocks it);
 *   chunk complete     the MPI thread waits for its tensors' events, then either queues
 *                      the gradient's copy into the mirror on s_down (--compress-on cpu,
 *                      dense chunks, allreduce) and folds from the mirror once that copy's
 *                      event is done, or folds on the device with the device codec on the
 *                      low-priority s_codec (--compress-on gpu): only the message then
 *                      reaches the host, in the chunk's pinned send buffer;
 *   update applied     the MPI thread writes the mirror, queues its copy to the device on
 *                      s_up and records the chunk's `up` event, then stores the version;
 *   param_wait(t)      after the version load, the caller's stream waits for `up` (the
 *                      host waits only for the update to be in, not for the copy).
 *
 * The order that makes this safe: a tensor's parameters are overwritten (the `up` copy)
 * only after its gradient was folded, which is after its event (recorded after the
 * layer's last use of them in the backward pass) completed; a mirror is rewritten only
 * after its previous copy's event. Threads as in pc_worker.c: the MPI thread owns the
 * chunks' device state and streams s_down, s_up, s_codec; the backprop thread records the
 * tensors' events and makes its stream wait. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_error.h"
#include "worker_impl.h"

/* A failed call of pc_gpu (its message in why) as the worker's error, naming the device
 * and, when c is not NULL, the chunk and its first tensor. */
static int gpu_fail(pc_worker_t *w, wthread_t *me, int rc, const wchunk_t *c, const char *why)
{
    int dev = pc_gpu_device(w->rt->gpu);
    char where[96] = "";
    if (c)
        snprintf(where, sizeof(where), " chunk %u (tensor '%s'):", c->id,
                 w->tensors[c->first_tensor].name);
    if (dev == PC_GPU_EMULATE)
        return WFAIL(w->rt, me, rc, "device emulated:%s %s", where, why);
    return WFAIL(w->rt, me, rc, "cuda:%d:%s %s", dev, where, why);
}

/* Every tensor's parameters between its mirror and the device (to_device: mirror to
 * device on s_up; else device to mirror on s_down), waited for, after the caller's stream
 * (which may still write or read them). Backprop thread, at start. */
static int copy_params(pc_worker_t *w, bool to_device)
{
    pc_gpu_t *g = w->rt->gpu;
    pc_gpu_stream_t s = to_device ? w->s_up : w->s_down;
    char why[256];
    int rc = pc_gpu_stream_sync(g, w->user, why, sizeof(why));
    for (int t = 0; t < w->ntensors && rc == PC_OK; t++) {
        wtensor_t *k = &w->tensors[t];
        size_t bytes = sizeof(float) * k->n;
        rc = to_device ? pc_gpu_copy(g, k->dp, k->p, bytes, PC_GPU_TO_DEVICE, s, why, sizeof(why))
                       : pc_gpu_copy(g, k->p, k->dp, bytes, PC_GPU_TO_HOST, s, why, sizeof(why));
    }
    if (rc == PC_OK)
        rc = pc_gpu_stream_sync(g, s, why, sizeof(why));
    return rc == PC_OK ? PC_OK : gpu_fail(w, &w->main, rc, NULL, why);
}

int pc_rt__w_dev_start(pc_worker_t *w)
{
    pc_runtime_t *rt = w->rt;
    pc_gpu_t *g = rt->gpu;
    char why[256];
    int rc;
    if (!w->device)
        return PC_OK;
    /* Without the caller's stream nothing would be ordered after its kernels (a
     * non-blocking stream never waits for the legacy default one). */
    if (rt->cfg.device == PC_DEVICE_CUDA && !w->user_set)
        return WFAIL(rt, &w->main, PC_ESTATE,
                     "device tensors need the stream they are computed on: call "
                     "pc_worker_set_stream before pc_worker_start (NULL for the legacy default "
                     "stream)");
    /* The parameters' mirrors; the gradients' are the chunks' own, and only for the chunks
     * that copy them (pc_rt__w_dev_chunk_init). */
    size_t total = 0;
    for (int t = 0; t < w->ntensors; t++)
        total += w->tensors[t].n;
    if ((rc = pc_gpu_host_alloc(g, total * sizeof(float), (void **)&w->mirror, why, sizeof(why))) !=
        PC_OK)
        return gpu_fail(w, &w->main, rc, NULL, why);
    size_t off = 0;
    for (int t = 0; t < w->ntensors; t++) {
        wtensor_t *k = &w->tensors[t];
        k->p = w->mirror + off;
        off += k->n;
        if ((rc = pc_gpu_event_create(g, &k->ready, why, sizeof(why))) != PC_OK)
            return gpu_fail(w, &w->main, rc, NULL, why);
    }
    /* Made one by one: pc_rt__w_dev_release destroys those that exist (non-NULL). */
    if ((rc = pc_gpu_stream_create(g, false, &w->s_down, why, sizeof(why))) != PC_OK ||
        (rc = pc_gpu_stream_create(g, false, &w->s_up, why, sizeof(why))) != PC_OK ||
        (rc = pc_gpu_stream_create(g, true, &w->s_codec, why, sizeof(why))) != PC_OK)
        return gpu_fail(w, &w->main, rc, NULL, why);
    if (rt->cfg.mode == PC_MODE_PS && rt->cfg.compress_on == PC_COMPRESS_ON_GPU && rt->spec.ef &&
        rt->spec.id != PC_CODEC_NONE) {
        _Static_assert(PC_GPU_EMULATE == PC_DEVCODEC_CPU, "the emulation's codec is the CPU's");
        if ((rc = pc_devcodec_create(&rt->spec, pc_gpu_device(g), &w->dcodec, why, sizeof(why))) !=
            PC_OK)
            return gpu_fail(w, &w->main, rc, NULL, why);
    }
    /* The initial parameters into the mirrors (worker 0's go to the servers and the other
     * workers from there). */
    return copy_params(w, false);
}

int pc_rt__w_dev_chunk_init(pc_worker_t *w, wchunk_t *c)
{
    pc_gpu_t *g = w->rt->gpu;
    char why[256];
    int rc;
    if (!w->device)
        return PC_OK;
    const wtensor_t *t = &w->tensors[c->first_tensor];
    c->dp = t->dp + c->offset;
    c->dg = t->dg + c->offset;
    c->g = NULL; /* no tensor has a gradient mirror (setup_chunks pointed into none) */
    if ((rc = pc_gpu_event_create(g, &c->down, why, sizeof(why))) != PC_OK ||
        (rc = pc_gpu_event_create(g, &c->up, why, sizeof(why))) != PC_OK)
        return gpu_fail(w, &w->main, rc, c, why);
    if (!w->dcodec || c->codec != w->codec) {
        /* Copied to the host and encoded there (--compress-on cpu, allreduce, dense
         * chunks): its gradient's page-locked mirror. */
        if ((rc = pc_gpu_host_alloc(g, sizeof(float) * c->n, (void **)&c->g, why, sizeof(why))) !=
            PC_OK)
            return gpu_fail(w, &w->main, rc, c, why);
        return PC_OK;
    }
    /* Folded and compressed on the device; the message's one copy goes into page-locked
     * memory. */
    rc = c->lowrank ? pc_devcodec_state_create_matrix(w->dcodec, c->id, c->rows, c->n, &c->dst, why,
                                                      sizeof(why))
                    : pc_devcodec_state_create(w->dcodec, c->id, c->n, &c->dst, why, sizeof(why));
    if (rc != PC_OK)
        return gpu_fail(w, &w->main, rc, c, why);
    void *pinned;
    if ((rc = pc_gpu_host_alloc(g, c->send_cap, &pinned, why, sizeof(why))) != PC_OK)
        return gpu_fail(w, &w->main, rc, c, why);
    free(c->sendbuf);
    c->sendbuf = pinned;
    c->send_pinned = true;
    return PC_OK;
}

void pc_rt__w_dev_log(const pc_worker_t *w)
{
    if (!w->device || w->rt->rank != 0 || !pc_log_enabled(w->rt->log, PC_LOG_DEBUG))
        return;
    int on_dev = 0, matrices = 0;
    for (int ci = 0; ci < w->nchunks; ci++) {
        on_dev += pc_rt__w_dev_codec(&w->chunks[ci]);
        matrices += pc_rt__w_dev_codec(&w->chunks[ci]) && w->chunks[ci].lowrank;
    }
    int dev = pc_gpu_device(w->rt->gpu);
    char where[32] = "the emulated device";
    if (dev != PC_GPU_EMULATE)
        snprintf(where, sizeof(where), "cuda:%d", dev);
    pc_log_write(w->rt->log, PC_LOG_DEBUG, NULL,
                 "device codec on %s: %d of %d chunks folded and compressed there (%d of them "
                 "powersgd matrices), the others copied to the host",
                 where, on_dev, w->nchunks, matrices);
}

int pc_rt__w_dev_params_up(pc_worker_t *w)
{
    return w->device ? copy_params(w, true) : PC_OK;
}

void pc_rt__w_dev_release(pc_worker_t *w)
{
    pc_gpu_t *g = w->rt->gpu;
    if (!w->device)
        return;
    /* Nothing of ours may still run on the device: the last copies end first. */
    if (w->s_up)
        pc_gpu_stream_sync(g, w->s_up, NULL, 0);
    if (w->s_down)
        pc_gpu_stream_sync(g, w->s_down, NULL, 0);
    for (int ci = 0; ci < w->nchunks; ci++) {
        wchunk_t *c = &w->chunks[ci];
        if (c->send_pinned) { /* an abandoned send's buffer is NULL (left to MPI) */
            pc_gpu_host_free(g, c->sendbuf);
            c->sendbuf = NULL;
            c->send_pinned = false;
        }
        pc_gpu_host_free(g, c->g);
        pc_devcodec_state_destroy(c->dst);
        pc_gpu_event_destroy(c->down);
        pc_gpu_event_destroy(c->up);
        c->g = NULL;
        c->dst = NULL;
        c->down = c->up = NULL;
    }
    for (int t = 0; t < w->ntensors; t++) {
        wtensor_t *k = &w->tensors[t];
        pc_gpu_event_destroy(k->ready);
        k->ready = NULL;
        k->p = NULL;
    }
    pc_gpu_stream_t *streams[] = {&w->s_down, &w->s_up, &w->s_codec};
    for (size_t i = 0; i < sizeof(streams) / sizeof(streams[0]); i++) {
        if (*streams[i])
            pc_gpu_stream_destroy(g, *streams[i]);
        *streams[i] = NULL;
    }
    pc_devcodec_destroy(w->dcodec);
    w->dcodec = NULL;
    pc_gpu_host_free(g, w->mirror);
    w->mirror = NULL;
}

int pc_rt__w_dev_grads_in(pc_worker_t *w, const int *list, int n, wthread_t *me)
{
    pc_gpu_t *g = w->rt->gpu;
    char why[256];
    int rc;
    for (int j = 0; j < n; j++) {
        wchunk_t *c = &w->chunks[list[j]];
        /* The caller's stream has produced the chunk's gradients. */
        for (int t = c->first_tensor; t <= c->last_tensor; t++)
            if ((rc = pc_gpu_event_sync(w->tensors[t].ready, why, sizeof(why))) != PC_OK)
                return WFAIL(w->rt, me, rc,
                             "tensor '%s': the caller's stream failed before its "
                             "gradient was complete: %s",
                             w->tensors[t].name, why);
        if (pc_rt__w_dev_codec(c))
            continue;
        if ((rc = pc_gpu_copy(g, c->g, c->dg, sizeof(float) * c->n, PC_GPU_TO_HOST, w->s_down, why,
                              sizeof(why))) != PC_OK ||
            (rc = pc_gpu_event_record(c->down, w->s_down, why, sizeof(why))) != PC_OK)
            return gpu_fail(w, me, rc, c, why);
    }
    /* allreduce reads the mirrors right away: its chunks' copies are awaited here. */
    if (!w->ops->servers)
        for (int j = 0; j < n; j++) {
            const wchunk_t *c = &w->chunks[list[j]];
            if ((rc = pc_gpu_event_sync(c->down, why, sizeof(why))) != PC_OK)
                return gpu_fail(w, me, rc, c, why);
        }
    return PC_OK;
}

int pc_rt__w_dev_fold(pc_worker_t *w, wchunk_t *c, char *why, size_t len)
{
    int rc;
    if (pc_rt__w_dev_codec(c)) {
        if ((rc = pc_devcodec_fold(w->dcodec, c->dst, c->dg, w->s_codec)) != PC_OK)
            snprintf(why, len, "%s", pc_devcodec_error(w->dcodec));
        return rc;
    }
    if ((rc = pc_gpu_event_sync(c->down, why, len)) != PC_OK)
        return rc;
    if ((rc = pc_codec_fold(c->codec, c->st, c->g)) != PC_OK)
        snprintf(why, len, "%s", pc_strerror(rc));
    return rc;
}

int pc_rt__w_dev_before_write(pc_worker_t *w, wchunk_t *c, wthread_t *me)
{
    char why[256];
    int rc = pc_gpu_event_sync(c->up, why, sizeof(why));
    return rc == PC_OK ? PC_OK : gpu_fail(w, me, rc, c, why);
}

int pc_rt__w_dev_params_out(pc_worker_t *w, wchunk_t *c, wthread_t *me)
{
    char why[256];
    int rc = pc_gpu_copy(w->rt->gpu, c->dp, c->p, sizeof(float) * c->n, PC_GPU_TO_DEVICE, w->s_up,
                         why, sizeof(why));
    if (rc == PC_OK)
        rc = pc_gpu_event_record(c->up, w->s_up, why, sizeof(why));
    return rc == PC_OK ? PC_OK : gpu_fail(w, me, rc, c, why);
}

int pc_rt__w_dev_param_wait(pc_worker_t *w, wchunk_t *c)
{
    char why[256];
    int rc = pc_gpu_stream_wait(w->user, c->up, why, sizeof(why));
    return rc == PC_OK ? PC_OK : gpu_fail(w, &w->main, rc, c, why);
}

int pc_rt__w_dev_states(pc_worker_t *w, bool to_device, wthread_t *me)
{
    char why[256];
    for (int ci = 0; ci < w->nchunks; ci++) {
        wchunk_t *c = &w->chunks[ci];
        if (!pc_rt__w_dev_codec(c))
            continue;
        float *res = pc_devcodec_state_has_residual(c->dst) ? pc_codec_state_residual(c->st) : NULL;
        float *mom = pc_devcodec_state_has_momentum(c->dst) ? pc_codec_state_momentum(c->st) : NULL;
        int rc = to_device ? pc_devcodec_state_set(c->dst, res, mom, why, sizeof(why))
                           : pc_devcodec_state_get(c->dst, res, mom, why, sizeof(why));
        /* a powersgd matrix: and its Q, the warm start */
        float *q = c->lowrank ? pc_codec_state_lowrank_q(c->st) : NULL;
        if (rc == PC_OK && q)
            rc = to_device ? pc_devcodec_state_set_q(c->dst, q, why, sizeof(why))
                           : pc_devcodec_state_get_q(c->dst, q, why, sizeof(why));
        if (rc != PC_OK)
            return gpu_fail(w, me, rc, c, why);
        if (to_device)
            pc_devcodec_state_set_steps(c->dst, pc_codec_state_steps(c->st));
        else
            pc_codec_state_set_steps(c->st, pc_devcodec_state_steps(c->dst));
    }
    return PC_OK;
}
