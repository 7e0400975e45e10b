/* pc_worker: the worker pipeline, the hand-off from backprop to the network in one place.
 * The drawing shows one compressor thread; with --compressors N each of N threads runs the
 * right-hand column for its own lane of chunks, with its own q_ready and q_back
 * (worker_impl.h, wthread_t: the dealing rule and the SPSC argument).
 *
 *   backprop thread                          compressor thread (pinned to its own core)
 *   ---------------                          ------------------------------------------
 *   grad_ready(t) --[q_ready: descriptor]--> count t's elements into its chunks; for the
 *     (no data copied; blocks only when        chunks now complete: fold each gradient
 *      the ring is full: counted)              into its error-feedback state, then
 *                 <--[q_back: release t]---    release t's buffer, then compress each
 *   iteration_end: waits for all releases      chunk and MPI_Isend it to its server, and
 *                                              post the MPI_Irecv of its update
 *   param_wait(t): waits for t's chunks'    <- MPI_Testsome on the updates: validate,
 *     version (acquire)                        write the parameters, version++ (release)
 *
 * This file reads in that order: the hand-over (on_ready: fold, release, step), the
 * parameter-server mode's fold, compress-and-send and update steps, the compressor
 * thread's loop, then the backprop thread's calls (grad_ready, param_wait), the
 * iteration's end (the release wait, the workers' stop agreement, the checkpoint trigger,
 * broadcast) and the run's end (finish, and destroy's stop).
 *
 * --pipeline off runs the same functions (on_ready, send_one, progress) inline on the
 * backprop thread: identical arithmetic in identical order per chunk, hence
 * bitwise-identical results, with compression now on the critical path. --mode allreduce
 * swaps the mode's ops (worker_allreduce.c): a dense MPI_Allreduce of the chunk and a
 * local optimizer step (Horovod's schedule: one tensor-sized collective at a time, as
 * gradients become ready).
 *
 * The worker's files, top to bottom (each calls only those below it; scripts/lint/layers.txt
 * holds the order, doc/design.md draws it): worker_start.c (create, register, start, destroy) calls
 * into this file; this file calls worker_lowrank.c (powersgd's rounds on a matrix chunk, whose
 * messages this file sends), worker_ckpt.c (written after the pipeline is drained),
 * worker_allreduce.c (through the ops), worker_metrics.c and worker_device.c;
 * worker_impl.h has the object and the map.
 *
 * Ownership: the thread that runs on_ready/progress (the "MPI thread": the compressor
 * thread, or the backprop thread with --pipeline off) owns every chunk's codec state,
 * buffers and requests. The backprop thread reads only the chunk versions (acquire) and the
 * metrics rings (relaxed atomics, read after a version acquire that orders them). Errors go
 * into the calling thread's context, passed explicitly (worker_impl.h). */
#include "config.h"

#include <assert.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_backoff.h"
#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_event.h"
#include "pipecompress/pc_time.h"
#include "worker_impl.h"

/* Wake the backprop thread if it is parked on ev_main (pipelined only; with --pipeline off
 * the backprop thread is the MPI thread and never parks). MPI thread. */
static void wake_main(pc_worker_t *w)
{
    if (w->pipelined)
        pc_event_notify(w->ev_main);
}

/* ---- the MPI thread: hand-over, fold, compress and send, updates ------------------ */

/* Whether lane k of the pool owns chunks: a lane may be empty (pc_plan_deal), even one
 * between two lanes of one tensor (its chunks bigger than a thread's share); it gets no
 * descriptor and releases nothing. Any thread (set at start). */
static bool lane_owns(const pc_worker_t *w, int k)
{
    return w->comp[k].lo < w->comp[k].hi;
}

/* A tensor's owners: the lanes that release its gradient buffer (wthread_t), those of its
 * lane range that own chunks; inline, the backprop thread's. */
static int owners(const pc_worker_t *w, int t)
{
    if (!w->pipelined)
        return 1;
    int n = 0;
    for (int k = w->tensors[t].first_lane; k <= w->tensors[t].last_lane; k++)
        n += lane_owns(w, k);
    return n;
}

/* Whether release r is expected: a tensor of the current iteration, not yet released in
 * it by all its owners. Backprop thread (the MPI thread too with --pipeline off). */
static bool release_expected(const pc_worker_t *w, const rel_t *r)
{
    return r->tensor >= 0 && r->tensor < w->ntensors && r->iteration == w->iter &&
           w->rel_seen[r->tensor] < owners(w, r->tensor);
}

/* Count release r (release_expected): the tensor's buffer is back with its last owner's.
 * Backprop thread. (A lane releases a tensor once per iteration, so a second release
 * from one lane shows as one too many in total, or as the next iteration's.) */
static void take_release(pc_worker_t *w, const rel_t *r)
{
    if (++w->rel_seen[r->tensor] < owners(w, r->tensor))
        return;
    assert(w->released < (uint64_t)w->ntensors); /* release_expected: each tensor once */
    w->released++;
}

/* An unexpected release: an internal error. Backprop thread. */
static int bad_release(pc_worker_t *w, const rel_t *r)
{
    bool known = r->tensor >= 0 && r->tensor < w->ntensors;
    return WFAIL(w->rt, &w->main, PC_ESTATE,
                 "internal error: gradient buffer of tensor %d ('%s') released for "
                 "iteration %llu while iteration %llu's were awaited%s",
                 (int)r->tensor, known ? w->tensors[r->tensor].name : "?",
                 (unsigned long long)r->iteration, (unsigned long long)w->iter,
                 known && r->iteration == w->iter ? " (released twice)" : "");
}

/* Lane me is done with tensor t's gradient buffer: give it back to the backprop thread. */
static void release_tensor(pc_worker_t *w, int t, uint64_t it, wthread_t *me)
{
    rel_t r = {.tensor = t, .iteration = it};
    if (!w->pipelined) {
        /* Inline: this is the backprop thread; an unexpected release is reported by
         * wait_releases. */
        if (release_expected(w, &r))
            take_release(w, &r);
        else if (!w->have_bad_rel) {
            w->bad_rel = r;
            w->have_bad_rel = true;
        }
        return;
    }
    /* q_back holds four iterations of releases and the backprop thread drains it every
     * iteration: the push cannot wait for long. */
    pc_spsc_push_wait(me->q_back, &r, -1, NULL);
    wake_main(w); /* the end of the iteration may be waiting for it */
}

/* Tensor t's chunks in lane me. */
static int lane_chunks(const pc_worker_t *w, int t, const wthread_t *me)
{
    int a = w->tensors[t].first_chunk > me->lo ? w->tensors[t].first_chunk : me->lo;
    int b = w->tensors[t].last_chunk < me->hi - 1 ? w->tensors[t].last_chunk : me->hi - 1;
    return b >= a ? b - a + 1 : 0;
}

/* Chunk c of iteration it is folded (or reduced): count it off its tensors in lane me,
 * releasing each tensor whose chunks in the lane are all done. MPI thread (me). */
static void chunk_done(pc_worker_t *w, const wchunk_t *c, uint64_t it, wthread_t *me)
{
    for (int t = c->first_tensor; t <= c->last_tensor; t++) {
        /* Every chunk of t is folded once per iteration: its count never goes below 0. */
        assert(me->tensor_pending[t] > 0);
        if (--me->tensor_pending[t] == 0) {
            me->tensor_pending[t] = lane_chunks(w, t, me);
            release_tensor(w, t, it, me);
        }
    }
}

/* Where chunk c's fold reads this iteration's gradient (c->gin), once it may be read: sleep
 * until its tensors' not_before (a modelled copy to the host), then point at the registered
 * buffer, the tensor's view, or, for a grouped chunk whose tensors' gradients do not
 * continue each other, a copy of them end to end in the lane's gather buffer (a copy, not
 * counted as compression: a real trainer's copy engine writes them there). The views and
 * times are the lane's copies from the tensors' latest descriptors (me->view,
 * me->not_before). Without views and times (pc_worker_grad_ready), c->g: today's path.
 * MPI thread (me). */
static int chunk_input(pc_worker_t *w, wchunk_t *c, wthread_t *me)
{
    int64_t not_before = 0;
    bool views = false;
    for (int t = c->first_tensor; t <= c->last_tensor; t++) {
        views |= me->view[t] != NULL;
        if (me->not_before[t] > not_before)
            not_before = me->not_before[t];
    }
    if (not_before > 0) {
        int64_t t0 = pc_time_ns();
        if (not_before > t0) {
            pc_rt__sleep_until(not_before);
            pc_rt__tracef(w->rt, me->track, t0, pc_time_ns(), "await copy chunk %u", c->id);
        }
    }
    c->gin = c->g;
    if (!views)
        return PC_OK;
#define VIEW(t) (me->view[t] ? me->view[t] : w->tensors[t].g)
    const float *src = VIEW(c->first_tensor);
    if (c->first_tensor == c->last_tensor) { /* a whole tensor or a piece of one */
        c->gin = src + c->offset;
        return PC_OK;
    }
    /* A grouped chunk: whole tensors (offset 0, pc_plan.h). */
    bool contiguous = true;
    for (int t = c->first_tensor + 1; t <= c->last_tensor && contiguous; t++)
        contiguous = VIEW(t - 1) + w->tensors[t - 1].n == VIEW(t);
    if (contiguous) {
        c->gin = src;
        return PC_OK;
    }
    if (me->gather_cap < c->n) {
        float *g = realloc(me->gather, sizeof(float) * c->n);
        if (!g)
            return WFAIL(w->rt, me, PC_ENOMEM, "out of memory gathering chunk %u's gradients",
                         c->id);
        me->gather = g;
        me->gather_cap = c->n;
    }
    size_t at = 0;
    for (int t = c->first_tensor; t <= c->last_tensor; t++) {
        memcpy(me->gather + at, VIEW(t), sizeof(float) * w->tensors[t].n);
        at += w->tensors[t].n;
    }
#undef VIEW
    c->gin = me->gather;
    return PC_OK;
}

/* One hand-over: account tensor t's elements [begin, end) to its chunks in lane me, and
 * pass each chunk now complete through the mode's fold (once its gradient may be read:
 * chunk_input), the release of the tensors it completes, and the mode's step
 * (worker_ops_t). ps's step only queues the chunk: every fold of this hand-over comes
 * before any compression (send_one runs after this returns), so gradient buffers go back
 * as early as possible. */
static int on_ready(pc_worker_t *w, const desc_t *d, wthread_t *me)
{
    wtensor_t *t = &w->tensors[d->tensor];
    /* The lane's own copies (each lane of the tensor got the descriptor). */
    me->view[d->tensor] = d->grad;
    me->not_before[d->tensor] = d->not_before;
    int n = 0, *ready = w->ready_list + me->lo; /* the lane's slots */
    int c0 = t->first_chunk > me->lo ? t->first_chunk : me->lo;
    int c1 = t->last_chunk < me->hi - 1 ? t->last_chunk : me->hi - 1;
    for (int ci = c0; ci <= c1; ci++) {
        wchunk_t *c = &w->chunks[ci];
        /* This chunk's part of the tensor: all of it when the chunk groups whole tensors. */
        size_t lo = c->first_tensor == c->last_tensor ? c->offset : 0;
        size_t hi = c->first_tensor == c->last_tensor ? c->offset + c->n : t->n;
        size_t a = d->begin > lo ? d->begin : lo, b = d->end < hi ? d->end : hi;
        if (a >= b)
            continue;
        if (b - a > c->remaining)
            return WFAIL(w->rt, me, PC_EINVAL,
                         "tensor '%s': gradient elements handed over twice in "
                         "iteration %llu",
                         t->name, (unsigned long long)d->iteration);
        c->remaining -= b - a;
        if (c->remaining == 0) {
            c->remaining = c->n;
            /* Its lifecycle slot starts afresh (ctimes_t: read only after its version). */
            c->tm[d->iteration & 1] = (ctimes_t){.handed = d->t_ready};
            ready[n++] = ci;
        }
    }
    if (n == 0)
        return PC_OK;
    int rc = w->device ? pc_rt__w_dev_grads_in(w, ready, n, me) : PC_OK;
    for (int j = 0; j < n && rc == PC_OK; j++) {
        wchunk_t *c = &w->chunks[ready[j]];
        if ((rc = chunk_input(w, c, me)) != PC_OK ||
            (rc = w->ops->fold(w, c, d->iteration, me)) != PC_OK)
            break;
        chunk_done(w, c, d->iteration, me);
        rc = w->ops->step(w, c, d->iteration, me);
    }
    return rc;
}

/* ps: fold chunk c's gradient into its error-feedback state. */
static int ps_fold(pc_worker_t *w, wchunk_t *c, uint64_t it, wthread_t *me)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    int64_t t0 = pc_time_ns();
    c->fold_it = it;
    int rc = w->device ? pc_rt__w_dev_fold(w, c, why, sizeof(why))
                       : pc_codec_fold(c->codec, c->st, c->gin);
    int64_t t1 = pc_time_ns();
    if (rc == PC_OK) /* --dilate: the fold looks K times as long (the sleep counts in it) */
        t1 = pc_rt__dilate(rt, t0, t1);
    c->tm[it & 1].fold0 = t0;
    c->tm[it & 1].fold1 = t1;
    atomic_fetch_add_explicit(&w->comp_ns[it % RING], (uint64_t)(t1 - t0), memory_order_relaxed);
    atomic_fetch_add_explicit(&me->busy_ns[it % RING], (uint64_t)(t1 - t0), memory_order_relaxed);
    pc_rt__tracef(rt, me->track, t0, t1, "fold chunk %u", c->id);
    if (rc != PC_OK)
        return WFAIL(rt, me, rc, "chunk %u (tensor '%s') of iteration %llu: %s", c->id,
                     w->tensors[c->first_tensor].name, (unsigned long long)it,
                     rc == PC_ERANGE ? "gradient is NaN or infinite (training diverged)"
                     : w->device     ? why /* pc_rt__w_dev_fold's reason */
                                     : pc_strerror(rc));
    return PC_OK;
}

/* ps: queue the folded chunk for compression (pc_rt__queue_push: by --priority; folds of
 * later hand-overs may overtake compressions). */
static int ps_step(pc_worker_t *w, wchunk_t *c, uint64_t it, wthread_t *me)
{
    (void)it;
    pc_rt__queue_push(&me->queue, (int)(c - w->chunks));
    return PC_OK;
}

/* The previous send from chunk c's buffer has completed (its answer came back, or nearly;
 * if no Testsome saw it, the Wait does) and leaves the window. MPI thread. */
static int settle_send(pc_worker_t *w, wchunk_t *c, wthread_t *me)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    int server = pc_rt__server_rank(rt, c->server);
    bool pending = w->sends[c->id] != MPI_REQUEST_NULL;
    int rc =
        PC_MPI_CHECK_PEER(MPI_Wait(&w->sends[c->id], MPI_STATUS_IGNORE), server, why, sizeof(why));
    if (rc != PC_OK)
        return WFAIL(rt, me, rc, "chunk %u: %s", c->id, why);
    if (pending) {
        assert(me->inflight[c->server] >= c->send_len); /* counted when posted */
        me->inflight[c->server] -= c->send_len;
    }
    return PC_OK;
}

/* Send chunk c's message of iteration it (len bytes in c->sendbuf) to its server, the
 * receive of the answer posted first (no unexpected messages); counted in the window and
 * the iteration's bytes. MPI thread. */
static int post(pc_worker_t *w, wchunk_t *c, uint64_t it, size_t len, wthread_t *me)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    int server = pc_rt__server_rank(rt, c->server);
    c->recv_it = it;
    int rc = PC_MPI_CHECK_PEER(MPI_Irecv(c->recvbuf, (int)c->recv_cap, MPI_BYTE, server,
                                         TAG_PULL + (int)c->id, rt->comm, &w->recvs[c->id]),
                               server, why, sizeof(why));
    if (rc == PC_OK)
        rc = PC_MPI_CHECK_PEER(
            MPI_Isend(c->sendbuf, (int)len, MPI_BYTE, server, TAG_GRAD, rt->comm, &w->sends[c->id]),
            server, why, sizeof(why));
    if (rc != PC_OK)
        return WFAIL(rt, me, rc, "chunk %u: %s", c->id, why);
    c->send_len = len;
    me->inflight[c->server] += len;
    atomic_fetch_add_explicit(&w->sent_bytes[it % RING], len, memory_order_relaxed);
    return PC_OK;
}

/* ps: compress and send the next folded chunk (pc_rt__queue_pop); *did tells whether there was one.
 * Between two of these the compressor thread folds whatever was handed over meanwhile, so a
 * gradient buffer waits for at most one chunk's compression before it is released. */
static int ps_send_one(pc_worker_t *w, bool *did, wthread_t *me)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    *did = false;
    if (me->queue.n == 0)
        return PC_OK;
    wchunk_t *c = &w->chunks[pc_rt__queue_peek(&me->queue)];
    int rc;
    /* The send window (worker_impl.h, inflight), kept by the compressor thread only: it
     * polls again soon (updates are outstanding). Inline (--pipeline off) nothing would
     * come back for the chunks left queued once the backward pass is over: the baseline
     * sends each chunk at once. The sends completed since are looked for only when the
     * window looks full. */
    size_t window = SEND_WINDOW_CHUNKS * (size_t)rt->cfg.chunk_bytes;
    if (w->pipelined && me->inflight[c->server] >= window) {
        /* The lane's sends only (its chunks' slots [lo, hi): no other thread's requests). */
        int outcount = 0, *idx = w->done_idx + me->lo;
        rc = PC_MPI_CHECK(
            MPI_Testsome(me->hi - me->lo, w->sends + me->lo, &outcount, idx, MPI_STATUSES_IGNORE),
            why, sizeof(why));
        if (rc != PC_OK)
            return WFAIL(rt, me, rc, "completing gradient sends: %s", why);
        for (int j = 0; j < outcount && outcount != MPI_UNDEFINED; j++) {
            const wchunk_t *d = &w->chunks[me->lo + idx[j]];
            assert(me->inflight[d->server] >= d->send_len); /* counted when posted */
            me->inflight[d->server] -= d->send_len;
        }
        if (me->inflight[c->server] >= window)
            return PC_OK;
    }
    *did = true;
    pc_rt__queue_pop(&me->queue);
    uint64_t it = c->fold_it;
    /* The previous send from this buffer completed long ago (its update came back). */
    if ((rc = settle_send(w, c, me)) != PC_OK)
        return rc;
    size_t len = 0;
    int64_t t0 = pc_time_ns();
    if (c->lowrank)
        rc = pc_rt__w_lr_first(w, c, it, &len);
    else if (pc_rt__w_dev_codec(c))
        rc = pc_devcodec_compress_folded(w->dcodec, c->dst, it, w->s_codec, c->sendbuf, c->send_cap,
                                         &len);
    else
        rc = pc_codec_compress_folded(c->codec, c->st, it, c->sendbuf, c->send_cap, &len);
    int64_t t1 = pc_time_ns();
    if (rc == PC_OK) /* --dilate: the send leaves when K times the compression has passed */
        t1 = pc_rt__dilate(rt, t0, t1);
    c->tm[it & 1].comp1 = t1;
    atomic_fetch_add_explicit(&w->comp_ns[it % RING], (uint64_t)(t1 - t0), memory_order_relaxed);
    atomic_fetch_add_explicit(&me->busy_ns[it % RING], (uint64_t)(t1 - t0), memory_order_relaxed);
    if (rc != PC_OK)
        return WFAIL(rt, me, rc, "compressing chunk %u: %s", c->id,
                     pc_rt__w_dev_codec(c) ? pc_devcodec_error(w->dcodec) : pc_strerror(rc));
    if ((rc = post(w, c, it, len, me)) != PC_OK)
        return rc;
    int64_t t2 = pc_time_ns();
    c->tm[it & 1].sent = t2;
    pc_rt__tracef(rt, me->track, t0, t2, "compress+send chunk %u", c->id);
    return PC_OK;
}

/* ps, a powersgd matrix: its P^ has arrived (len bytes in c->recvbuf), and round 2 goes
 * out at once, from the same buffer: round 1's send settled (it is answered), Q_w made
 * (worker_lowrank.c), posted with the update's receive. The update comes later, to
 * ps_progress like any other. MPI thread. */
static int ps_round2(pc_worker_t *w, wchunk_t *c, size_t len, wthread_t *me)
{
    size_t out = 0;
    int64_t t0 = pc_time_ns();
    int rc;
    if ((rc = settle_send(w, c, me)) != PC_OK ||
        (rc = pc_rt__w_lr_round2(w, c, len, &out, me)) != PC_OK)
        return rc;
    if (w->rt->cfg.dilate > 1) /* --dilate: Q_w's product is CPU work */
        pc_rt__dilate(w->rt, t0, pc_time_ns());
    if ((rc = post(w, c, c->recv_it, out, me)) != PC_OK)
        return rc;
    pc_rt__tracef(w->rt, me->track, t0, pc_time_ns(), "round 2 chunk %u", c->id);
    return PC_OK;
}

/* ps, --update workers: chunk c's update (len bytes in c->recvbuf) is its mean gradient
 * (the powersgd warm-up's dense form): validate it whole, then either the optimizer's step
 * on c's parameters with c's own state, the step its server would have taken (the same
 * pc_optim_step on the same mean gradient, at the same iteration's rate: bitwise the
 * parameters of --update servers), or, when the step is the user's (pc_worker_set_user_step),
 * the mean gradient into c's part of the gradient buffers (c->g), for pc_worker_grad_wait.
 * PC_EFORMAT with the reason in why. MPI thread, from ps_progress: the step runs on the
 * thread that applies every update, as soon as the chunk's gradient is in, and before the
 * version store that param_wait acquires; it is element by element on the chunk's own
 * parameters and state, so the order in which chunks arrive changes no bit. */
static int ps_mean_update(pc_worker_t *w, wchunk_t *c, size_t len, uint64_t *server_ns, char *why,
                          size_t whylen)
{
    pc_runtime_t *rt = w->rt;
    const uint8_t *v;
    int rc = pc_rt__pull_lowrank_read(c->recvbuf, len, c->id, (uint32_t)c->n, c->recv_it, true,
                                      false, c->n, &v, server_ns, NULL, why, whylen);
    if (rc != PC_OK)
        return rc;
    if (w->user_step) {
        pc_wire_get_f32s(c->g, v, c->n);
        return PC_OK;
    }
    pc_wire_get_f32s(c->mean, v, c->n);
    pc_optim_cfg_t o = pc_rt__chunk_optim(rt, c->n);
    c->opt.steps++; /* torch's step_t += 1 first, as the server's step_dense */
    pc_optim_step(&o, pc_optim_lr(&rt->optim, (int64_t)c->recv_it), c->p, &c->opt, c->mean, c->n,
                  NULL);
    return PC_OK;
}

/* ps: apply every update that has arrived: validate, write the parameters, publish the
 * chunk's version. *got counts them. */
static int ps_progress(pc_worker_t *w, int *got, wthread_t *me)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    *got = 0;
    /* The lane's receives only (its chunks' slots [lo, hi)). */
    int outcount = 0, *idx = w->done_idx + me->lo;
    MPI_Status *st = w->statuses + me->lo;
    int rc = PC_MPI_CHECK(MPI_Testsome(me->hi - me->lo, w->recvs + me->lo, &outcount, idx, st), why,
                          sizeof(why));
    /* MPI_ERR_IN_STATUS: say which receive failed, and how (a truncation, ...). */
    for (int j = 0; rc != PC_OK && outcount != MPI_UNDEFINED && j < outcount; j++) {
        wchunk_t *c = &w->chunks[me->lo + idx[j]];
        int server = pc_rt__server_rank(rt, c->server);
        if (PC_MPI_CHECK_PEER(st[j].MPI_ERROR, server, why, sizeof(why)) != PC_OK)
            return WFAIL(rt, me, rc, "awaiting updates: chunk %u: %s", c->id, why);
    }
    if (rc != PC_OK)
        return WFAIL(rt, me, rc, "awaiting updates: %s", why);
    if (outcount == MPI_UNDEFINED)
        return PC_OK;
    for (int j = 0; j < outcount; j++) {
        wchunk_t *c = &w->chunks[me->lo + idx[j]];
        int server = pc_rt__server_rank(rt, c->server), count = 0;
        rc = PC_MPI_CHECK_PEER(MPI_Get_count(&st[j], MPI_BYTE, &count), server, why, sizeof(why));
        if (rc != PC_OK)
            return WFAIL(rt, me, rc, "update of chunk %u: %s", c->id, why);
        size_t len = count > 0 ? (size_t)count : 0;
        if (c->lowrank && c->lr_round == 1) { /* powersgd's P^, not an update */
            if ((rc = ps_round2(w, c, len, me)) != PC_OK)
                return rc;
            continue;
        }
        int64_t t0 = pc_time_ns();
        uint64_t server_ns = 0;
        if (w->device && (rc = pc_rt__w_dev_before_write(w, c, me)) != PC_OK)
            return rc;
        rc = c->lowrank          ? pc_rt__w_lr_update(w, c, len, &server_ns, why, sizeof(why))
             : w->update_workers ? ps_mean_update(w, c, len, &server_ns, why, sizeof(why))
                                 : pc_rt__pull_apply(c->recvbuf, len, c->id, c->recv_it, c->p, c->n,
                                                     &server_ns, why, sizeof(why));
        if (rc == PC_OK && w->device && (rc = pc_rt__w_dev_params_out(w, c, me)) != PC_OK)
            return rc;
        int64_t t1 = pc_time_ns();
        if (rc == PC_OK) /* --dilate: decoding the update is CPU work on the critical path */
            t1 = pc_rt__dilate(rt, t0, t1);
        pc_rt__tracef(rt, me->track, t0, t1, "apply update chunk %u", c->id);
        if (rc != PC_OK)
            return WFAIL(rt, me, rc, "rejected update from server r%d: %s", server, why);
        atomic_fetch_add_explicit(&w->recv_bytes[c->recv_it % RING], len, memory_order_relaxed);
        c->tm[c->recv_it & 1].update_in = t1;
        c->tm[c->recv_it & 1].server_ns = (int64_t)server_ns; /* <= PC_RT_PULL_MAX_SERVER_NS */
        /* Release pairs with param_wait's acquire: the parameters (and the chunk's
         * lifecycle times, ctimes_t) are written. */
        atomic_store_explicit(&c->version, c->recv_it + 1, memory_order_release);
        wake_main(w); /* param_wait may be parked on this chunk */
        (*got)++;
    }
    return PC_OK;
}

/* ps: the end message (with the agreed stop signal) to every server. */
static int ps_done(pc_worker_t *w, wthread_t *me)
{
    char why[256];
    uint8_t sig[PC_RT_DONE_BYTES];
    pc_rt__done_encode(sig, w->rt->stop_signal);
    for (int s = 0; s < w->rt->nservers; s++) {
        int server = pc_rt__server_rank(w->rt, s);
        int rc = PC_MPI_CHECK_PEER(
            MPI_Send(sig, PC_RT_DONE_BYTES, MPI_BYTE, server, TAG_DONE, w->rt->comm), server, why,
            sizeof(why));
        if (rc != PC_OK)
            return WFAIL(w->rt, me, rc, "%s", why);
    }
    return PC_OK;
}

/* ps: a chunk's checkpointed state is its codec's (residual, momentum correction; a
 * powersgd matrix: residual, Q, the warm start, and the optimizer's state, SGD's momentum
 * or Adam's m, v, vmax, which the worker keeps alike with its server's). --update workers:
 * also the optimizer's state (none when the step is the user's) and the parameters, which
 * no server keeps. */
static void ps_ckpt_arrays(wchunk_t *c, float *arr[CKPT_ARRAYS], size_t len[CKPT_ARRAYS])
{
    for (int i = 0; i < CKPT_ARRAYS; i++) {
        arr[i] = NULL;
        len[i] = c->n;
    }
    arr[0] = pc_codec_state_residual(c->st);
    arr[1] = pc_codec_state_momentum(c->st);
    if (c->lowrank) {
        arr[1] = pc_codec_state_lowrank_q(c->st);
        len[1] = c->n / c->rows * (size_t)pc_codec_spec(c->codec)->rank;
        pc_optim_state_arrays(&c->opt, arr + 2);
    } else if (c->params_here) {
        pc_optim_state_arrays(&c->opt, arr + 2);
        arr[5] = c->p;
    }
}

const worker_ops_t pc_rt__worker_ps = {
    .name = "ps",
    .servers = true,
    .fold = ps_fold,
    .step = ps_step,
    .send_one = ps_send_one,
    .progress = ps_progress,
    .done = ps_done,
    .ckpt_arrays = ps_ckpt_arrays,
};

/* Whether update receives of lane me's chunks are posted and not yet complete. MPI
 * thread (me). */
static bool updates_outstanding(const pc_worker_t *w, const wthread_t *me)
{
    for (int c = me->lo; c < me->hi; c++)
        if (w->recvs[c] != MPI_REQUEST_NULL)
            return true;
    return false;
}

/* ---- the compressor thread ----------------------------------------------------------- */

/* A compressor thread's re-test before it parks: a descriptor in its q_ready, or abort.
 * Acquire: pairs with the backprop thread's release of the push (pc_spsc) and of the abort
 * store. */
static bool comp_has_work(void *arg)
{
    wthread_t *me = arg;
    return pc_spsc_can_pop(me->q_ready) ||
           atomic_load_explicit(&me->w->abort, memory_order_acquire);
}

void *pc_rt__w_compressor_main(void *arg)
{
    wthread_t *me = arg;
    pc_worker_t *w = me->w;
    int slot = 1 + me->index; /* its placement slot (plan_placement: backprop is 0) */
    int rc = pc_rt__bind(w->rt, slot, "compressor");
    if (rc != PC_OK)
        WFAIL(w->rt, me, rc, "cannot bind the compressor thread");
    /* Device tensors: this thread works on the rank's device (pc_gpu_use). */
    char why[256];
    if (rc == PC_OK && w->device && (rc = pc_gpu_use(w->rt->gpu, why, sizeof(why))) != PC_OK)
        WFAIL(w->rt, me, rc, "compressor thread: %s", why);
    desc_t batch[32];
    bool stopping = false;
    int idle = 0; /* passes without work since the last work: the spin before parking */
    /* The spin window: only on a core of our own (SPIN_WINDOW_NS). */
    pc_runtime_t *rt = w->rt;
    int64_t window = pc_topo_plan_core(rt->place, rt->local_rank, slot) >= 0 &&
                             !pc_topo_plan_shared(rt->place, rt->local_rank, slot)
                         ? SPIN_WINDOW_NS
                         : 0;
    int64_t last_work = pc_time_ns();
    while (rc == PC_OK) {
        /* Acquire pairs with pc_worker_destroy's release store: stop without draining. */
        if (atomic_load_explicit(&w->abort, memory_order_acquire))
            break;
        size_t n = pc_spsc_try_pop_burst(me->q_ready, batch, 32);
        if (n)
            wake_main(w); /* queue space: grad_ready may be parked on a full q_ready */
        for (size_t i = 0; i < n && rc == PC_OK; i++) {
            if (batch[i].kind == D_STOP)
                stopping = true;
            else
                rc = on_ready(w, &batch[i], me);
            wake_main(w); /* allreduce mode publishes versions in on_ready */
        }
        bool did = false;
        if (rc == PC_OK)
            rc = w->ops->send_one(w, &did, me);
        int got = 0;
        if (rc == PC_OK)
            rc = w->ops->progress(w, &got, me);
        if (rc != PC_OK)
            break;
        /* Drained: the backprop thread sends the servers' end message once every thread
         * of the pool is joined (pc_worker_finish). */
        if (stopping && !me->queue.n && !updates_outstanding(w, me))
            break;
        if (n || got || did) {
            idle = 0;
            if (window)
                last_work = pc_time_ns();
            continue;
        }
        if (window && pc_time_ns() - last_work < window) {
            pc_backoff_cpu_relax(); /* within the spin window: keep polling */
            continue;
        }
        /* Idle (past the spin window, if any): a short spin and a few yields (work often
         * follows work), then park on
         * ev_comp, which grad_ready, the stop descriptor and abort notify. While updates
         * are outstanding MPI must still be polled (ps_progress): park for at most the
         * poll interval. Otherwise nothing needs this thread until a notify: park long. */
        if (idle < PC_EVENT_SPINS + PC_EVENT_YIELDS) {
            if (idle++ < PC_EVENT_SPINS)
                pc_backoff_cpu_relax();
            else
                sched_yield(); /* why before parking: PC_EVENT_YIELDS */
            continue;
        }
        int64_t park_ns = updates_outstanding(w, me) ? POLL_SLEEP_NS : IDLE_PARK_NS;
        /* pc_event_park re-tests after announcing: a descriptor pushed, or abort stored,
         * before our announcement is seen there; one after it notifies. */
        pc_event_park(me->ev, comp_has_work, me, park_ns);
    }
    /* Release pairs with pc_rt__w_check_thread's (and main_test's) acquire load: me->err
     * is written. */
    atomic_store_explicit(&me->rc, rc, memory_order_release);
    /* A backprop thread parked on a queue, a release or an update learns of the failure
     * (or of the normal end) now, not at its next re-check. */
    pc_event_notify(w->ev_main);
    return NULL;
}

/* ---- the backprop thread's calls ----------------------------------------------------- */

/* What a backprop-thread wait awaits: true once it happened; it may act (push or pop the
 * item it was waiting to move) and is not called again after returning true. */
typedef bool (*await_fn)(pc_worker_t *w, void *arg);

/* main_await's re-test after announcing itself: the awaited condition (done) or the
 * compressor thread's failure. */
typedef struct main_test {
    pc_worker_t *w;
    await_fn fn;
    void *arg;
    bool done; /* fn held */
} main_test_t;

static bool main_test(void *arg)
{
    main_test_t *t = arg;
    if ((t->done = t->fn(t->w, t->arg)))
        return true;
    /* Acquire: pairs with each compressor thread's release store of its rc, as in
     * pc_rt__w_check_thread. */
    for (int k = 0; k < t->w->ncomp; k++)
        if (atomic_load_explicit(&t->w->comp[k].rc, memory_order_acquire) != PC_OK)
            return true;
    return false;
}

/* Pipelined, backprop thread: until fn(w, arg) holds, the compressor thread fails, or
 * limit_ns nanoseconds pass (negative: no limit). Tests, spins PC_EVENT_SPINS times
 * (the compressor thread is often mid-operation) and yields PC_EVENT_YIELDS times, then
 * parks on ev_main, announcing
 * itself and re-testing first (pc_event.h); every condition awaited here is notified by
 * the compressor thread (worker_impl.h, ev_main). Returns PC_OK, the compressor thread's
 * error (its message copied, pc_rt__w_check_thread) or PC_ETIMEDOUT; *waited_ns: the time
 * spent (0 when the first test held: no clock read). */
static int main_await(pc_worker_t *w, await_fn fn, void *arg, int64_t limit_ns, int64_t *waited_ns)
{
    *waited_ns = 0;
    if (fn(w, arg))
        return PC_OK;
    int64_t start = pc_time_ns();
    int rc = PC_OK;
    for (int spins = 0;; spins++) {
        if ((rc = pc_rt__w_check_thread(w)) != PC_OK)
            break;
        int64_t left = limit_ns < 0 ? IDLE_PARK_NS : limit_ns - (pc_time_ns() - start);
        if (left <= 0) {
            rc = PC_ETIMEDOUT;
            break;
        }
        if (spins < PC_EVENT_SPINS) {
            pc_backoff_cpu_relax();
        } else if (spins < PC_EVENT_SPINS + PC_EVENT_YIELDS) {
            sched_yield(); /* why before parking: PC_EVENT_YIELDS */
        } else {
            main_test_t t = {w, fn, arg, false};
            /* The re-test after announcing (pc_event_park): fn, or the compressor thread's
             * failure (reported at the top of the loop). */
            if (pc_event_park(w->ev_main, main_test, &t,
                              left < IDLE_PARK_NS ? left : IDLE_PARK_NS) &&
                t.done)
                break;
        }
        if (fn(w, arg))
            break;
    }
    *waited_ns = pc_time_ns() - start;
    return rc;
}

/* push_desc's argument: a descriptor for one lane. */
typedef struct lane_desc {
    wthread_t *lane;
    const desc_t *d;
} lane_desc_t;

/* await_fn: push the descriptor arg->d into lane arg->lane's q_ready (its single producer:
 * this, the backprop thread). */
static bool push_desc(pc_worker_t *w, void *arg)
{
    (void)w;
    const lane_desc_t *a = arg;
    return pc_spsc_try_push(a->lane->q_ready, a->d);
}

/* await_fn: pop a release into arg from the first lane's q_back that has one, in lane
 * order (the backprop thread is every q_back's single consumer; the order does not matter:
 * take_release counts). */
static bool pop_release(pc_worker_t *w, void *arg)
{
    for (int k = 0; k < w->ncomp; k++)
        if (pc_spsc_try_pop(w->comp[k].q_back, arg))
            return true;
    return false;
}

typedef struct version_wait {
    const wchunk_t *c;
    uint64_t want;
} version_wait_t;

/* await_fn: chunk arg->c holds parameters of version arg->want or later. */
static bool version_reached(pc_worker_t *w, void *arg)
{
    (void)w;
    const version_wait_t *v = arg;
    /* Acquire pairs with the MPI thread's release store after writing the parameters. */
    return atomic_load_explicit(&v->c->version, memory_order_acquire) >= v->want;
}

/* grad_ready's body: tensor's elements [begin, end) are handed over, their gradient at grad
 * (NULL: the registered buffer), readable from not_before on (0: at once). */
static int hand_over(pc_worker_t *w, int tensor, size_t begin, size_t end, const float *grad,
                     int64_t not_before)
{
    if (!w->started || w->finished || tensor < 0 || tensor >= w->ntensors)
        return WFAIL(w->rt, &w->main, PC_EINVAL, "grad_ready(%d): no such tensor, or not started",
                     tensor);
    if (w->resumed_user_step && !w->user_step)
        return WFAIL(w->rt, &w->main, PC_ESTATE,
                     "resumed from a checkpoint of the user's step (no optimizer state of the "
                     "runtime's): call pc_worker_set_user_step before the first gradient");
    w->handed = true;
    const wtensor_t *t = &w->tensors[tensor];
    if (begin >= end || end > t->n)
        return WFAIL(w->rt, &w->main, PC_EINVAL,
                     "grad_ready('%s', %zu, %zu): bad range for %zu elements", t->name, begin, end,
                     t->n);
    int64_t now = pc_time_ns();
    if (!w->t_first_ready)
        w->t_first_ready = now;
    if (w->device) {
        /* The MPI thread waits for this before it reads the gradient (this thread only when
         * it is the MPI thread: --pipeline off). */
        char why[256];
        int rc = pc_gpu_event_record(t->ready, w->user, why, sizeof(why));
        if (rc != PC_OK)
            return WFAIL(w->rt, &w->main, rc, "grad_ready('%s'): %s", t->name, why);
    }
    desc_t d = {.kind = D_READY,
                .tensor = tensor,
                .iteration = w->iter,
                .begin = begin,
                .end = end,
                .t_ready = now,
                .grad = grad,
                .not_before = not_before};
    if (!w->pipelined) {
        uint64_t c0 = atomic_load_explicit(&w->comp_ns[w->iter % RING], memory_order_relaxed);
        int rc = on_ready(w, &d, &w->main);
        for (bool did = true; rc == PC_OK && did;)
            rc = w->ops->send_one(w, &did, &w->main);
        /* Inline, the compression this thread ran is exactly what backprop is exposed to
         * (the counter is this thread's own here: relaxed suffices). */
        w->compress_inline +=
            (int64_t)(atomic_load_explicit(&w->comp_ns[w->iter % RING], memory_order_relaxed) - c0);
        return rc;
    }
    int rc = pc_rt__w_check_thread(w);
    if (rc != PC_OK)
        return rc;
    /* Every lane that owns a chunk of the tensor gets the descriptor (its own copy). */
    for (int k = t->first_lane; k <= t->last_lane; k++) {
        if (!lane_owns(w, k)) /* an empty lane between two of the tensor's */
            continue;
        lane_desc_t a = {&w->comp[k], &d};
        int64_t waited = 0, t0 = pc_time_ns();
        rc = main_await(w, push_desc, &a, (int64_t)(w->rt->cfg.timeout * 1e9), &waited);
        if (waited > 0) {
            w->wait_backpressure += waited;
            pc_rt__trace(w->rt, TRACK_MAIN, "wait back-pressure", t0, t0 + waited);
        }
        if (rc == PC_ETIMEDOUT)
            return WFAIL(w->rt, &w->main, rc, "compressor thread %d took no descriptor for %g s", k,
                         w->rt->cfg.timeout);
        if (rc != PC_OK)
            return rc; /* a compressor thread's failure, its message in main.err */
        pc_event_notify(w->comp[k].ev);
        uint32_t depth = (uint32_t)pc_spsc_size_approx(w->comp[k].q_ready);
        if (depth > w->hwm)
            w->hwm = depth;
    }
    return PC_OK;
}

int pc_worker_grad_ready_range(pc_worker_t *w, int tensor, size_t begin, size_t end)
{
    return hand_over(w, tensor, begin, end, NULL, 0);
}

int pc_worker_grad_ready_view(pc_worker_t *w, int tensor, const float *grad, int64_t not_before)
{
    if (tensor < 0 || tensor >= w->ntensors)
        return WFAIL(w->rt, &w->main, PC_EINVAL, "grad_ready_view(%d): no such tensor", tensor);
    if (w->device)
        return WFAIL(w->rt, &w->main, PC_ESTATE,
                     "grad_ready_view('%s'): device tensors take no host view (their gradient "
                     "is the registered device buffer)",
                     w->tensors[tensor].name);
    /* A time past --timeout would hold the folding thread longer than any wait may last. */
    if (not_before < 0 ||
        (not_before > 0 && (double)(not_before - pc_time_ns()) > w->rt->cfg.timeout * 1e9))
        return WFAIL(w->rt, &w->main, PC_EINVAL,
                     "grad_ready_view('%s'): not_before %lld is negative or more than "
                     "--timeout (%g s) ahead",
                     w->tensors[tensor].name, (long long)not_before, w->rt->cfg.timeout);
    return hand_over(w, tensor, 0, w->tensors[tensor].n, grad, not_before);
}

int pc_worker_grad_ready(pc_worker_t *w, int tensor)
{
    if (tensor < 0 || tensor >= w->ntensors)
        return WFAIL(w->rt, &w->main, PC_EINVAL, "grad_ready(%d): no such tensor", tensor);
    return pc_worker_grad_ready_range(w, tensor, 0, w->tensors[tensor].n);
}

/* The error of a wait for chunk c's update (for iteration want - 1) that ran past
 * --timeout. Backprop thread. */
static int update_timeout(pc_worker_t *w, const wchunk_t *c, const char *tensor, uint64_t want)
{
    return WFAIL(w->rt, &w->main, PC_ETIMEDOUT,
                 "timed out after %g s waiting for the update of tensor '%s' (chunk "
                 "%u, server r%d on %s) for iteration %llu",
                 w->rt->cfg.timeout, tensor, c->id,
                 w->ops->servers ? pc_rt__server_rank(w->rt, c->server) : -1,
                 w->ops->servers ? pc_rt__host(w->rt, pc_rt__server_rank(w->rt, c->server))
                                 : "the workers",
                 (unsigned long long)(want - 1));
}

/* Wait until chunk c's version reaches want, the update of iteration want - 1 applied
 * (param_wait: w->iter, this iteration's parameters; grad_wait and the user's step: w->iter
 * + 1, the mean gradient of the iteration in progress); inline, this thread applies the
 * updates itself meanwhile. */
static int wait_chunk(pc_worker_t *w, const wchunk_t *c, const char *tensor, uint64_t want)
{
    /* Acquire pairs with the MPI thread's release store after writing the parameters. */
    if (atomic_load_explicit(&c->version, memory_order_acquire) >= want)
        return PC_OK;
    int64_t start = pc_time_ns(), limit = (int64_t)(w->rt->cfg.timeout * 1e9);
    if (w->pipelined) {
        /* The compressor thread stores the version and notifies ev_main. */
        version_wait_t v = {c, want};
        int64_t waited = 0;
        int rc = main_await(w, version_reached, &v, limit, &waited);
        if (rc == PC_ETIMEDOUT)
            return update_timeout(w, c, tensor, want);
        if (rc != PC_OK)
            return rc;
        pc_rt__w_account_update_wait(w, c, want - 1, start, pc_time_ns());
        return PC_OK;
    }
    /* Inline: this thread polls MPI itself between naps. */
    pc_backoff_t b;
    pc_backoff_init_capped(&b, POLL_SLEEP_NS);
    for (;;) {
        int got;
        int rc = w->ops->progress(w, &got, &w->main);
        if (rc != PC_OK)
            return rc;
        /* Acquire: as above. */
        if (atomic_load_explicit(&c->version, memory_order_acquire) >= want)
            break;
        if (pc_time_ns() - start > limit)
            return update_timeout(w, c, tensor, want);
        pc_backoff_pause(&b);
    }
    pc_rt__w_account_update_wait(w, c, want - 1, start, pc_time_ns());
    return PC_OK;
}

int pc_worker_param_wait(pc_worker_t *w, int tensor)
{
    if (!w->started || w->finished || tensor < 0 || tensor >= w->ntensors)
        return WFAIL(w->rt, &w->main, PC_EINVAL, "param_wait(%d): no such tensor, or not started",
                     tensor);
    const wtensor_t *t = &w->tensors[tensor];
    for (int ci = t->first_chunk; ci <= t->last_chunk; ci++) {
        int rc = wait_chunk(w, &w->chunks[ci], t->name, w->iter);
        /* Device tensors: the caller's stream waits for the parameters' copy, not this
         * thread (the version acquire above ordered the event's record before this). */
        if (rc == PC_OK && w->device)
            rc = pc_rt__w_dev_param_wait(w, &w->chunks[ci]);
        if (rc != PC_OK)
            return rc;
    }
    return PC_OK;
}

int pc_worker_grad_wait(pc_worker_t *w, int tensor)
{
    if (!w->started || w->finished || tensor < 0 || tensor >= w->ntensors)
        return WFAIL(w->rt, &w->main, PC_EINVAL, "grad_wait(%d): no such tensor, or not started",
                     tensor);
    if (!w->user_step)
        return WFAIL(w->rt, &w->main, PC_ESTATE,
                     "grad_wait: the mean gradient goes to the gradient buffers only with "
                     "--update workers and pc_worker_set_user_step");
    const wtensor_t *t = &w->tensors[tensor];
    for (int ci = t->first_chunk; ci <= t->last_chunk; ci++) {
        /* The version acquire orders the MPI thread's write of c->g before our reads. */
        int rc = wait_chunk(w, &w->chunks[ci], t->name, w->iter + 1);
        if (rc != PC_OK)
            return rc;
    }
    return PC_OK;
}

/* Wait until every gradient buffer of this iteration is released (pipelined: popped from
 * q_back; inline: counted). Backprop thread, from pc_worker_iteration_end. */
static int wait_releases(pc_worker_t *w)
{
    pc_runtime_t *rt = w->rt;
    if (!w->pipelined) {
        if (w->have_bad_rel)
            return bad_release(w, &w->bad_rel);
        if (w->released < (uint64_t)w->ntensors)
            return WFAIL(rt, &w->main, PC_ESTATE,
                         "iteration %llu ended with %llu of %d gradients handed over",
                         (unsigned long long)w->iter, (unsigned long long)w->released, w->ntensors);
        w->released = 0;
        memset(w->rel_seen, 0, (size_t)w->ntensors);
        return PC_OK;
    }
    int64_t limit = (int64_t)(rt->cfg.timeout * 1e9), start = pc_time_ns(), total = 0;
    while (w->released < (uint64_t)w->ntensors) {
        rel_t r;
        int64_t waited = 0;
        int rc = pc_rt__w_check_thread(w);
        if (rc != PC_OK)
            return rc;
        /* One --timeout for all the releases of the iteration. */
        rc = main_await(w, pop_release, &r, limit - (pc_time_ns() - start), &waited);
        w->wait_release += waited;
        total += waited;
        if (rc == PC_ETIMEDOUT)
            return WFAIL(rt, &w->main, PC_ETIMEDOUT,
                         "timed out after %g s waiting for gradient buffers of "
                         "iteration %llu to be released (%llu of %d tensors)",
                         rt->cfg.timeout, (unsigned long long)w->iter,
                         (unsigned long long)w->released, w->ntensors);
        if (rc != PC_OK)
            return rc;
        if (!release_expected(w, &r))
            return bad_release(w, &r);
        take_release(w, &r);
    }
    if (total > 0)
        pc_rt__trace(rt, TRACK_MAIN, "wait release", start, start + total);
    w->released = 0;
    memset(w->rel_seen, 0, (size_t)w->ntensors);
    return PC_OK;
}

/* Drain the pipeline at an iteration boundary: every chunk's last update is in (so no
 * compression is in flight) and nothing new is handed over until the caller returns;
 * what pc_rt__w_checkpoint needs. Backprop thread. */
static int drain(pc_worker_t *w)
{
    for (int t = 0; t < w->ntensors; t++) {
        int rc = pc_worker_param_wait(w, t);
        if (rc != PC_OK)
            return rc;
    }
    return PC_OK;
}

/* ---- clipping by the global norm (parameter groups) ------------------------------------
 * The servers hold the chunks of an iteration that may clip until every worker said
 * whether it clips (TAG_CLIP), so that a run that never clips keeps each chunk's step
 * overlapping the backward pass. Which iterations may clip both sides know without a
 * message: the run's first, then every one after an iteration that clipped. */

/* Whether this iteration may clip (its TAG_CLIP is due). Backprop thread. */
static bool clip_due(const pc_worker_t *w)
{
    return w->ngroups && (w->iter == w->clip_first || w->clip_on);
}

/* This iteration's TAG_CLIP (max_norm; 0: no clipping) to every server, after its
 * TAG_LR (the same thread: the servers receive them in that order). Backprop thread. */
static int send_clip(pc_worker_t *w, double max_norm)
{
    pc_runtime_t *rt = w->rt;
    uint8_t msg[PC_RT_CLIP_BYTES];
    char why[256] = "";
    int rc = PC_OK;
    pc_rt__clip_encode(msg, w->iter, max_norm);
    for (int s = 0; s < rt->nservers && rc == PC_OK; s++) {
        int server = pc_rt__server_rank(rt, s);
        rc =
            PC_MPI_CHECK_PEER(MPI_Send(msg, PC_RT_CLIP_BYTES, MPI_BYTE, server, TAG_CLIP, rt->comm),
                              server, why, sizeof(why));
    }
    if (rc != PC_OK)
        return WFAIL(rt, &w->main, rc, "sending the clipping's largest norm: %s", why);
    w->clip_sent = true;
    return PC_OK;
}

/* Receive the norm of this iteration from the first server that owns chunks (the servers'
 * exchange's rank 0, pc_server.c), within --timeout: the compressor threads keep sending
 * meanwhile (inline, every chunk was posted at its hand-over). Backprop thread. */
static int recv_norm(pc_worker_t *w, double *norm)
{
    pc_runtime_t *rt = w->rt;
    int first = rt->nservers;
    for (int c = 0; c < w->nchunks; c++)
        if (w->chunks[c].server < first)
            first = w->chunks[c].server;
    int server = pc_rt__server_rank(rt, first), count = 0, done = 0;
    uint8_t msg[PC_RT_CLIP_BYTES];
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Status st;
    char why[256] = "";
    int rc = PC_MPI_CHECK_PEER(
        MPI_Irecv(msg, PC_RT_CLIP_BYTES, MPI_BYTE, server, TAG_NORM, rt->comm, &req), server, why,
        sizeof(why));
    pc_backoff_t b;
    pc_backoff_init_capped(&b, POLL_SLEEP_NS);
    int64_t start = pc_time_ns(), limit = (int64_t)(rt->cfg.timeout * 1e9);
    while (rc == PC_OK && !done) {
        rc = PC_MPI_CHECK_PEER(MPI_Test(&req, &done, &st), server, why, sizeof(why));
        if (rc != PC_OK || done)
            break;
        int trc = pc_rt__w_check_thread(w); /* its message is in main.err */
        if (trc == PC_OK && pc_time_ns() - start > limit)
            trc = WFAIL(rt, &w->main, PC_ETIMEDOUT,
                        "timed out after %g s waiting for the gradient norm of iteration %llu "
                        "from server r%d (%s): was every gradient handed over?",
                        rt->cfg.timeout, (unsigned long long)w->iter, server,
                        pc_rt__host(rt, server));
        if (trc != PC_OK) {
            /* msg is this frame's: the receive goes before it does (trc is reported;
             * a cancel that fails leaves MPI failing already). */
            if (PC_MPI_CHECK_PEER(MPI_Cancel(&req), server, why, sizeof(why)) == PC_OK)
                PC_MPI_CHECK_PEER(MPI_Wait(&req, MPI_STATUS_IGNORE), server, why, sizeof(why));
            return trc;
        }
        pc_backoff_pause(&b);
    }
    if (rc == PC_OK)
        rc = PC_MPI_CHECK_PEER(MPI_Get_count(&st, MPI_BYTE, &count), server, why, sizeof(why));
    if (rc != PC_OK)
        return WFAIL(rt, &w->main, rc, "receiving the gradient norm: %s", why);
    uint64_t it = 0;
    if ((rc = pc_rt__norm_parse(msg, (size_t)count, &it, norm, why, sizeof(why))) == PC_OK &&
        it != w->iter)
        rc = pc_error_fmt(PC_EFORMAT, why, sizeof(why), "the norm of iteration %llu, not %llu",
                          (unsigned long long)it, (unsigned long long)w->iter);
    if (rc != PC_OK)
        return WFAIL(rt, &w->main, rc, "rejected the gradient norm from server r%d: %s", server,
                     why);
    return PC_OK;
}

int pc_worker_clip_grad_norm(pc_worker_t *w, double max_norm, double *total_norm)
{
    pc_runtime_t *rt = w->rt;
    if (!w->ngroups || !w->started || w->finished || !w->lrs_sent || w->clip_sent)
        return WFAIL(rt, &w->main, PC_ESTATE, "pc_worker_clip_grad_norm: %s",
                     !w->ngroups   ? "no parameter groups (pc_worker_set_optimizer); the "
                                     "runtime's own step clips with --clip-grad-norm"
                     : !w->started ? "called before pc_worker_start"
                     : w->finished ? "called after pc_worker_finish"
                     : !w->lrs_sent
                         ? "called before the iteration's learning rates (pc_worker_set_lrs)"
                         : "called twice in one iteration");
    if (!(max_norm > 0) || !total_norm)
        return WFAIL(rt, &w->main, PC_EINVAL,
                     "pc_worker_clip_grad_norm: the largest norm %g is not above 0", max_norm);
    if (!clip_due(w))
        return WFAIL(rt, &w->main, PC_ESTATE,
                     "clipping at iteration %llu, but not from the run's first (%llu): the "
                     "servers step an iteration's chunks as they arrive unless clipping began "
                     "with the run; clip from its first iteration on (max_norm inf where no "
                     "clipping is wanted)",
                     (unsigned long long)w->iter, (unsigned long long)w->clip_first);
    int rc = send_clip(w, max_norm);
    if (rc != PC_OK)
        return rc;
    w->clip_on = true;
    return recv_norm(w, total_norm);
}

/* ---- the iteration's end --------------------------------------------------------------- */

/* Every worker must stop at the same iteration, or servers would wait forever; they agree
 * on the signal too (the largest number raised anywhere). Collective over the workers,
 * waited for without spinning (pc_rt__w_wait_collective). */
static int agree_stop(pc_worker_t *w, bool *want_stop)
{
    pc_runtime_t *rt = w->rt;
    *want_stop = false;
    if (!rt->stop_flag)
        return PC_OK;
    int mine = (int)*rt->stop_flag, any = 0;
    char why[256];
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = PC_MPI_CHECK(MPI_Iallreduce(&mine, &any, 1, MPI_INT, MPI_MAX, rt->workers_ctl, &req),
                          why, sizeof(why));
    if (rc == PC_OK)
        rc = pc_rt__w_wait_collective(w, &req, "the workers' agreement to stop", why, sizeof(why));
    if (rc != PC_OK)
        return why[0] ? WFAIL(rt, &w->main, rc, "agreeing to stop: %s", why) : rc;
    *want_stop = any != 0;
    rt->stop_signal = any;
    return PC_OK;
}

int pc_worker_broadcast(pc_worker_t *w, void *buf, size_t bytes)
{
    pc_runtime_t *rt = w->rt;
    if (!w->started || w->finished || (!buf && bytes > 0))
        return WFAIL(rt, &w->main, PC_EINVAL,
                     "broadcast before start, after finish, or "
                     "of no buffer");
    /* Pieces of at most 1 GiB: MPI counts are ints. */
    const size_t piece = (size_t)1 << 30;
    for (size_t off = 0; off < bytes; off += piece) {
        size_t n = bytes - off < piece ? bytes - off : piece;
        char why[256];
        MPI_Request req = MPI_REQUEST_NULL;
        int rc =
            PC_MPI_CHECK(MPI_Ibcast((char *)buf + off, (int)n, MPI_BYTE, 0, rt->workers_ctl, &req),
                         why, sizeof(why));
        if (rc == PC_OK)
            rc = pc_rt__w_wait_collective(w, &req, "a broadcast from worker 0", why, sizeof(why));
        if (rc != PC_OK)
            return why[0] ? WFAIL(rt, &w->main, rc, "broadcast: %s", why) : rc;
    }
    return PC_OK;
}

int pc_worker_iteration_end(pc_worker_t *w, bool *stop)
{
    pc_runtime_t *rt = w->rt;
    if (!w->started || w->finished)
        return WFAIL(rt, &w->main, PC_ESTATE, "iteration_end before start or after finish");
    if (w->ngroups && !w->lrs_sent) /* the servers wait for them to step */
        return WFAIL(rt, &w->main, PC_ESTATE,
                     "iteration %llu ended without its learning rates (pc_worker_set_lrs)",
                     (unsigned long long)w->iter);
    int64_t t_end_call = pc_time_ns();
    /* An iteration that may clip and did not: the servers wait for this to step. */
    int rc = clip_due(w) && !w->clip_sent ? send_clip(w, 0.0) : PC_OK;
    if (rc == PC_OK)
        rc = wait_releases(w);
    if (rc != PC_OK)
        return rc;
    /* The user's step: every mean gradient of this iteration is in the gradient buffers
     * before the iteration ends, so that the caller may write them again (the binding
     * zeroes them) without racing the MPI thread's writes. */
    for (int ci = 0; w->user_step && ci < w->nchunks; ci++)
        if ((rc = wait_chunk(w, &w->chunks[ci], w->tensors[w->chunks[ci].first_tensor].name,
                             w->iter + 1)) != PC_OK)
            return rc;
    pc_rt__w_close_iteration(w, t_end_call);
    w->iter++;
    w->lrs_sent = w->clip_sent = false;
    bool want_stop;
    if ((rc = agree_stop(w, &want_stop)) != PC_OK)
        return rc;
    if (pc_rt__ckpt_on(rt) && (want_stop || (rt->cfg.checkpoint_every > 0 &&
                                             w->iter % (uint64_t)rt->cfg.checkpoint_every == 0))) {
        if ((rc = drain(w)) != PC_OK || (rc = pc_rt__w_checkpoint(w)) != PC_OK)
            return rc;
    }
    if (stop)
        *stop = want_stop;
    return PC_OK;
}

/* ---- the end of the run ------------------------------------------------------------- */

int pc_rt__w_stop_thread(pc_worker_t *w, bool abort)
{
    bool any = false;
    for (int k = 0; k < w->ncomp; k++)
        any |= w->comp[k].started;
    if (!any)
        return PC_OK;
    if (abort) {
        /* Release pairs with every compressor thread's acquire load of abort. */
        atomic_store_explicit(&w->abort, true, memory_order_release);
        for (int k = 0; k < w->ncomp; k++)
            if (w->comp[k].started)
                pc_event_notify(w->comp[k].ev);
    } else {
        /* No limit (each compressor thread drains its q_ready), but a failed compressor
         * thread ends the wait: every thread is stopped (abort) and joined below, and the
         * failure returned. */
        desc_t d = {.kind = D_STOP};
        for (int k = 0; k < w->ncomp; k++) {
            lane_desc_t a = {&w->comp[k], &d};
            int64_t waited;
            if (!w->comp[k].started)
                continue;
            if (main_await(w, push_desc, &a, -1, &waited) != PC_OK) {
                /* Release pairs with every compressor thread's acquire load of abort. */
                atomic_store_explicit(&w->abort, true, memory_order_release);
                for (int j = 0; j < w->ncomp; j++)
                    if (w->comp[j].started)
                        pc_event_notify(w->comp[j].ev);
                break;
            }
            pc_event_notify(w->comp[k].ev);
        }
    }
    int jrc = 0;
    for (int k = 0; k < w->ncomp; k++) {
        if (!w->comp[k].started)
            continue;
        int r = pthread_join(w->comp[k].thread, NULL);
        w->comp[k].started = false;
        if (r != 0 && jrc == 0)
            jrc = r;
    }
    if (jrc != 0)
        return WFAIL(w->rt, &w->main, PC_ETHREAD, "cannot join a compressor thread: %s",
                     strerror(jrc));
    return pc_rt__w_check_thread(w);
}

void pc_rt__w_abort_requests(pc_worker_t *w)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    /* One deadline for all the sends: destroy blocks for at most --timeout on them. */
    int64_t deadline = pc_time_ns() + (int64_t)(rt->cfg.timeout * 1e9);
    for (int ci = 0; ci < w->nchunks; ci++) {
        wchunk_t *c = &w->chunks[ci];
        int server = w->ops->servers ? pc_rt__server_rank(rt, c->server) : -1;
        if (w->recvs[ci] != MPI_REQUEST_NULL) {
            /* A cancelled receive completes at once (cancelled or, if the update came in
             * meanwhile, received): its buffer is free afterwards. If the cancel or the
             * wait fails, the receive may still be posted: MPI may still write the buffer,
             * so it stays allocated (leaked, said so). */
            if (PC_MPI_CHECK_PEER(MPI_Cancel(&w->recvs[ci]), server, why, sizeof(why)) != PC_OK ||
                PC_MPI_CHECK_PEER(MPI_Wait(&w->recvs[ci], MPI_STATUS_IGNORE), server, why,
                                  sizeof(why)) != PC_OK) {
                pc_log_write(rt->log, PC_LOG_WARN, NULL,
                             "worker r%d: destroy: the update receive of chunk %u from server "
                             "r%d: %s; its %zu-byte buffer is left allocated",
                             rt->rank, c->id, server, why, c->recv_cap);
                c->recvbuf = NULL;
                w->recvs[ci] = MPI_REQUEST_NULL;
            }
        }
        pc_backoff_t b;
        pc_backoff_init(&b);
        while (w->sends[ci] != MPI_REQUEST_NULL) {
            int flag = 0;
            bool failed = PC_MPI_CHECK_PEER(MPI_Test(&w->sends[ci], &flag, MPI_STATUS_IGNORE),
                                            server, why, sizeof(why)) != PC_OK;
            if (failed || (!flag && pc_time_ns() > deadline)) {
                /* MPI may still read the buffer: it stays allocated (leaked, said so). The
                 * first failure's message stays: MPI_Test's, or MPI_Request_free's. */
                if (PC_MPI_CHECK_PEER(MPI_Request_free(&w->sends[ci]), server, failed ? NULL : why,
                                      failed ? 0 : sizeof(why)) == PC_OK &&
                    !failed)
                    snprintf(why, sizeof(why), "not delivered within %g s", rt->cfg.timeout);
                pc_log_write(rt->log, PC_LOG_WARN, NULL,
                             "worker r%d: destroy: the gradient of chunk %u to server r%d: %s; "
                             "its %zu-byte buffer is left allocated",
                             rt->rank, c->id, server, why, c->send_cap);
                c->sendbuf = NULL;
                w->sends[ci] = MPI_REQUEST_NULL;
                break;
            }
            if (!flag)
                pc_backoff_pause(&b);
        }
    }
}

int pc_worker_finish(pc_worker_t *w)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    if (!w->started || w->finished)
        return WFAIL(rt, &w->main, PC_ESTATE, "finish before start or twice");
    /* The last iteration's updates. */
    int rc = drain(w);
    if (rc != PC_OK)
        return rc;
    /* The final state, unless this boundary is already checkpointed. */
    if (pc_rt__ckpt_on(rt) && w->iter > 0 && !(w->have_ckpt && w->last_ckpt == w->iter) &&
        (rc = pc_rt__w_checkpoint(w)) != PC_OK)
        return rc;
    w->finished = true;
    /* Pipelined, the compressor threads stop once their updates are in; then (all joined,
     * so no other thread uses MPI for this worker) this thread sends the end message. */
    if ((rc = pc_rt__w_stop_thread(w, false)) != PC_OK || (rc = w->ops->done(w, &w->main)) != PC_OK)
        return rc;
    for (int c = 0; c < w->nchunks; c++) {
        int server = w->ops->servers ? pc_rt__server_rank(rt, w->chunks[c].server) : -1;
        if ((rc = PC_MPI_CHECK_PEER(MPI_Wait(&w->sends[c], MPI_STATUS_IGNORE), server, why,
                                    sizeof(why))))
            return WFAIL(rt, &w->main, rc, "%s", why);
    }
    pc_rt__w_metrics_flush(w);
    rc = pc_rt__metrics_write(rt, why, sizeof(why));
    if (rc != PC_OK)
        return WFAIL(rt, &w->main, rc, "%s", why);
    return PC_OK;
}
