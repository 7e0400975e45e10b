/* worker_metrics: the end of a worker's iteration and what it records: the wait for the
 * gradient buffers (pc_worker.c), the iteration's metrics, the workers' agreement to stop,
 * and the checkpoint trigger; plus the metrics accessors. An iteration's line is written
 * one iteration late: its compressor-side counters (compression time, bytes) are complete
 * only when the next forward pass has acquired every update that followed them. Backprop
 * thread only. */
#include "config.h"

#include <math.h>
#include <stdio.h>

#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_time.h"
#include "worker_impl.h"

/* Take the compressor-side counters of iteration m->iteration (their ring slot is then
 * reused). Relaxed: the caller's version acquires ordered the adds before. */
static void take_ring(pc_worker_t *w, pc_worker_metrics_t *m)
{
    int s = (int)(m->iteration % RING);
    m->t_compress =
        (double)atomic_exchange_explicit(&w->comp_ns[s], 0, memory_order_relaxed) * 1e-9;
    m->bytes_sent = atomic_exchange_explicit(&w->sent_bytes[s], 0, memory_order_relaxed);
    m->bytes_received = atomic_exchange_explicit(&w->recv_bytes[s], 0, memory_order_relaxed);
}

/* Complete m from the ring, keep it as the last metrics, and append its JSON line. */
static void emit(pc_worker_t *w, pc_worker_metrics_t *m)
{
    take_ring(w, m);
    char extra[96] = "";
    if (!isnan(m->loss))
        snprintf(extra, sizeof(extra), ", \"loss\": %.6f, \"accuracy\": %.5f", m->loss,
                 isnan(m->accuracy) ? -1.0 : m->accuracy);
    w->last = *m;
    w->have_last = true;
    pc_rt__metrics_line(w->rt,
                        "{\"rank\": %d, \"role\": \"worker\", \"iteration\": %lld, "
                        "\"t_iteration\": %.6f, \"t_forward\": %.6f, \"t_backward\": %.6f, "
                        "\"t_param_wait\": %.6f, \"t_compress\": %.6f, \"t_exposed\": %.6f, "
                        "\"bytes_sent\": %llu, \"bytes_received\": %llu, \"dense_bytes\": %llu, "
                        "\"compression_ratio\": %.3f, \"queue_high_water\": %u, \"pipeline\": %s, "
                        "\"mode\": \"%s\"%s}",
                        w->rt->rank, (long long)m->iteration, m->t_iteration, m->t_forward,
                        m->t_backward, m->t_param_wait, m->t_compress, m->t_exposed,
                        (unsigned long long)m->bytes_sent, (unsigned long long)m->bytes_received,
                        (unsigned long long)m->dense_bytes,
                        m->bytes_sent ? (double)m->dense_bytes / (double)m->bytes_sent : 0.0,
                        m->queue_high_water, w->pipelined ? "true" : "false", w->ops->name, extra);
}

void pc_rt__w_metrics_flush(pc_worker_t *w)
{
    if (w->have_pending) {
        emit(w, &w->pending);
        w->have_pending = false;
    }
}

/* Close iteration w->iter's metrics (t_end_call: when iteration_end was called) and start
 * the next iteration's clocks. */
static void close_iteration(pc_worker_t *w, int64_t t_end_call)
{
    int64_t now = pc_time_ns();
    /* The previous iteration's compressor-side counters are complete now: this iteration's
     * forward pass waited (acquire) for every update that followed them. */
    pc_rt__w_metrics_flush(w);
    size_t dense = 0;
    for (int t = 0; t < w->ntensors; t++)
        dense += 4 * w->tensors[t].n;
    w->pending = (pc_worker_metrics_t){
        .iteration = (int64_t)w->iter,
        .t_iteration = (double)(now - w->t_start) * 1e-9,
        .t_forward =
            (double)((w->t_first_ready ? w->t_first_ready : t_end_call) - w->t_start) * 1e-9,
        .t_backward = w->t_first_ready ? (double)(t_end_call - w->t_first_ready) * 1e-9 : 0,
        .t_param_wait = w->param_wait,
        .t_exposed = w->exposed,
        .dense_bytes = dense,
        .queue_high_water = w->hwm,
        .loss = w->loss,
        .accuracy = w->accuracy,
    };
    w->loss = w->accuracy = NAN;
    w->have_pending = true;
    w->param_wait = w->exposed = 0;
    w->hwm = 0;
    w->t_first_ready = 0;
    w->t_start = now;
}

/* Every worker must stop at the same iteration, or servers would wait forever; they agree
 * on the signal too (the largest number raised anywhere). Collective over the workers. */
static int agree_stop(pc_worker_t *w, bool *want_stop)
{
    pc_runtime_t *rt = w->rt;
    *want_stop = false;
    if (!rt->stop_flag)
        return PC_OK;
    int mine = (int)*rt->stop_flag, any = 0;
    char why[256];
    int rc = PC_MPI_CHECK(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, rt->workers_ctl), why,
                          sizeof(why));
    if (rc != PC_OK)
        return WFAIL(&w->main, rc, "worker r%d: agreeing to stop: %s", rt->rank, why);
    *want_stop = any != 0;
    rt->stop_signal = any;
    return PC_OK;
}

int pc_worker_iteration_end(pc_worker_t *w, bool *stop)
{
    pc_runtime_t *rt = w->rt;
    if (!w->started || w->finished)
        return WFAIL(&w->main, PC_ESTATE, "iteration_end before start or after finish");
    int64_t t_end_call = pc_time_ns();
    int rc = pc_rt__w_wait_releases(w);
    if (rc != PC_OK)
        return rc;
    close_iteration(w, t_end_call);
    w->iter++;
    bool want_stop;
    if ((rc = agree_stop(w, &want_stop)) != PC_OK)
        return rc;
    if (pc_rt__ckpt_on(rt) && (want_stop || (rt->cfg.checkpoint_every > 0 &&
                                             w->iter % (uint64_t)rt->cfg.checkpoint_every == 0))) {
        if ((rc = pc_rt__w_checkpoint(w)) != PC_OK)
            return rc;
    }
    if (stop)
        *stop = want_stop;
    return PC_OK;
}

const char *pc_worker_error(const pc_worker_t *w)
{
    return w->main.err;
}

int64_t pc_worker_iteration(const pc_worker_t *w)
{
    return (int64_t)w->iter;
}

void pc_worker_report(pc_worker_t *w, double loss, double accuracy)
{
    w->loss = loss;
    w->accuracy = accuracy;
}

void pc_worker_metrics_note(pc_worker_t *w, const char *json_object)
{
    pc_rt__metrics_line(w->rt, "%s", json_object);
}

void pc_worker_trace(pc_worker_t *w, const char *name, int64_t t0_ns, int64_t t1_ns)
{
    pc_rt__trace(w->rt, TRACK_MAIN, name, t0_ns, t1_ns);
}

bool pc_worker_last_metrics(const pc_worker_t *w, pc_worker_metrics_t *out)
{
    if (w->have_last)
        *out = w->last;
    return w->have_last;
}
