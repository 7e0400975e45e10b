/* worker_metrics: what a worker's iteration records: the iteration's metrics and their
 * breakdown (where the backprop thread waited and why: pc_runtime.h's definitions), closed
 * by the iteration's end (pc_worker.c); the metrics accessors; pc_worker_breakdown, the
 * medians over all workers, and the wait for a collective over the workers that it and
 * the iteration's end share. An iteration's line is written
 * one iteration late: its compressor-side counters (compression time, bytes) are complete
 * only when the next forward pass has acquired every update that followed them. Backprop
 * thread only. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_backoff.h"
#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_time.h"
#include "worker_impl.h"

/* Take the compressor-side counters of iteration m->iteration (their ring slot is then
 * reused): the compression summed over the threads (t_compress, the pool's CPU time) and
 * the busiest thread's (t_compress_busy, the pool's wall view: the backprop thread with
 * --pipeline off, else the compressor thread that compressed longest). Relaxed: the
 * caller's version acquires ordered the adds before. */
static void take_ring(pc_worker_t *w, pc_worker_metrics_t *m)
{
    int s = (int)(m->iteration % RING);
    m->t_compress =
        (double)atomic_exchange_explicit(&w->comp_ns[s], 0, memory_order_relaxed) * 1e-9;
    uint64_t busiest = atomic_exchange_explicit(&w->main.busy_ns[s], 0, memory_order_relaxed);
    for (int k = 0; k < w->ncomp; k++) {
        uint64_t b = atomic_exchange_explicit(&w->comp[k].busy_ns[s], 0, memory_order_relaxed);
        busiest = b > busiest ? b : busiest;
    }
    m->t_compress_busy = (double)busiest * 1e-9;
    m->compressors = w->pipelined ? w->ncomp : 0;
    m->bytes_sent = atomic_exchange_explicit(&w->sent_bytes[s], 0, memory_order_relaxed);
    m->bytes_received = atomic_exchange_explicit(&w->recv_bytes[s], 0, memory_order_relaxed);
}

/* Complete m from the ring, keep it as the last metrics (and in the breakdown's history),
 * and append its JSON line. */
static void emit(pc_worker_t *w, pc_worker_metrics_t *m)
{
    take_ring(w, m);
    /* The exposed compression (pc_runtime.h): t_exposed holds the uncapped sum until now,
     * when this iteration's compression times are complete. Capped at the busiest thread's
     * (t_compress_busy: wall time, as the waits are; t_compress with one thread or inline,
     * and never above t_compress). */
    if (m->t_exposed > m->t_compress_busy)
        m->t_exposed = m->t_compress_busy;
    w->hist[w->nhist++ % BD_RING] = *m;
    char extra[96] = "";
    if (!isnan(m->loss))
        snprintf(extra, sizeof(extra), ", \"loss\": %.6f, \"accuracy\": %.5f", m->loss,
                 isnan(m->accuracy) ? -1.0 : m->accuracy);
    w->last = *m;
    w->have_last = true;
    pc_rt__metrics_line(
        w->rt,
        "{\"rank\": %d, \"role\": \"worker\", \"iteration\": %lld, "
        "\"t_iteration\": %.6f, \"t_forward\": %.6f, \"t_backward\": %.6f, "
        "\"t_param_wait\": %.6f, \"t_compress\": %.6f, \"t_exposed\": %.6f, "
        "\"bytes_sent\": %llu, \"bytes_received\": %llu, \"dense_bytes\": %llu, "
        "\"compression_ratio\": %.3f, \"queue_high_water\": %u, \"pipeline\": %s, "
        "\"mode\": \"%s\", \"t_wait_release\": %.6f, \"t_wait_backpressure\": %.6f, "
        "\"t_wait_compress\": %.6f, \"t_wait_network\": %.6f, "
        "\"t_wait_server\": %.6f, \"t_compress_inline\": %.6f, \"t_compress_busy\": %.6f, "
        "\"compressors\": %d%s}",
        w->rt->rank, (long long)m->iteration, m->t_iteration, m->t_forward, m->t_backward,
        m->t_param_wait, m->t_compress, m->t_exposed, (unsigned long long)m->bytes_sent,
        (unsigned long long)m->bytes_received, (unsigned long long)m->dense_bytes,
        m->bytes_sent ? (double)m->dense_bytes / (double)m->bytes_sent : 0.0, m->queue_high_water,
        w->pipelined ? "true" : "false", w->ops->name, m->t_wait_release, m->t_wait_backpressure,
        m->t_wait_compress, m->t_wait_network, m->t_wait_server, m->t_compress_inline,
        m->t_compress_busy, m->compressors, extra);
}

void pc_rt__w_metrics_flush(pc_worker_t *w)
{
    if (w->have_pending) {
        emit(w, &w->pending);
        w->have_pending = false;
    }
}

void pc_rt__w_close_iteration(pc_worker_t *w, int64_t t_end_call)
{
    int64_t now = pc_time_ns();
    /* The previous iteration's compressor-side counters are complete now: this iteration's
     * forward pass waited (acquire) for every update that followed them. */
    pc_rt__w_metrics_flush(w);
    size_t dense = 0;
    for (int t = 0; t < w->ntensors; t++)
        dense += 4 * w->tensors[t].n;
    /* The waits in ns, summed as integers: the three parts add up to t_param_wait exactly
     * before the conversion. */
    int64_t upd = w->wait_compress + w->wait_network + w->wait_server;
    int64_t exposed = w->pipelined ? w->wait_release + w->wait_backpressure + w->wait_compress
                                   : w->compress_inline;
    w->pending = (pc_worker_metrics_t){
        .iteration = (int64_t)w->iter,
        .t_iteration = (double)(now - w->t_start) * 1e-9,
        .t_forward =
            (double)((w->t_first_ready ? w->t_first_ready : t_end_call) - w->t_start) * 1e-9,
        .t_backward = w->t_first_ready ? (double)(t_end_call - w->t_first_ready) * 1e-9 : 0,
        .t_param_wait = (double)upd * 1e-9,
        .t_exposed = (double)exposed * 1e-9, /* capped at t_compress by emit */
        .dense_bytes = dense,
        .queue_high_water = w->hwm,
        .loss = w->loss,
        .accuracy = w->accuracy,
        .t_wait_release = (double)w->wait_release * 1e-9,
        .t_wait_backpressure = (double)w->wait_backpressure * 1e-9,
        .t_wait_compress = (double)w->wait_compress * 1e-9,
        .t_wait_network = (double)w->wait_network * 1e-9,
        .t_wait_server = (double)w->wait_server * 1e-9,
        .t_compress_inline = (double)w->compress_inline * 1e-9,
    };
    w->loss = w->accuracy = NAN;
    w->have_pending = true;
    w->wait_release = w->wait_backpressure = w->compress_inline = 0;
    w->wait_compress = w->wait_network = w->wait_server = 0;
    w->hwm = 0;
    w->t_first_ready = 0;
    w->t_start = now;
}

void pc_rt__w_account_update_wait(pc_worker_t *w, const wchunk_t *c, uint64_t it, int64_t start,
                                  int64_t end)
{
    /* The caller acquired c's version >= it + 1: iteration it's times are written
     * (ctimes_t), and the MPI thread writes only the other slot meanwhile. */
    const ctimes_t *tm = &c->tm[it & 1];
    int64_t total = end > start ? end - start : 0;
    /* Before the chunk was sent: compression (queued, folded, compressed). Inline, it was
     * sent inside grad_ready, before any wait. */
    int64_t comp = tm->sent > start ? tm->sent - start : 0;
    if (comp > total)
        comp = total;
    int64_t after = total - comp;
    int64_t server = tm->server_ns < after ? tm->server_ns : after;
    int64_t net = after - server;
    w->wait_compress += comp;
    w->wait_server += server;
    w->wait_network += net;
    /* The timeline: one event per cause, in this order; the server's place among the
     * network's is nominal (it is a duration measured on the server's clock). */
    if (comp > 0)
        pc_rt__tracef(w->rt, TRACK_MAIN, start, start + comp, "wait update chunk %u: compress",
                      c->id);
    if (net > 0)
        pc_rt__tracef(w->rt, TRACK_MAIN, start + comp, start + comp + net,
                      "wait update chunk %u: network", c->id);
    if (server > 0)
        pc_rt__tracef(w->rt, TRACK_MAIN, end - server, end, "wait update chunk %u: server", c->id);
}

/* Wait for a nonblocking collective over the workers (req) on the backprop thread,
 * yielding the core: Open MPI's blocking collectives busy-poll unless told the machine is
 * oversubscribed (mpi_yield_when_idle), which nothing tells it when a launcher reports more
 * CPUs than there are cores (emulated nodes, Slurm's config_overrides), and a poll that
 * never yields starves the threads pinned beside it, among them the peers this collective
 * waits for. Test, back off (spin, yield, naps of at most 1 ms), give up after --timeout
 * with what was awaited in why, or when the compressor thread failed (its error, already
 * in w->main.err; why is then empty). *req is freed
 * on success; on failure the job is being torn down and the request is left to MPI_Abort
 * or finalize. Backprop thread. */
int pc_rt__w_wait_collective(pc_worker_t *w, MPI_Request *req, const char *what, char *why,
                             size_t whylen)
{
    pc_backoff_t b;
    pc_backoff_init(&b);
    int64_t start = pc_time_ns(), limit = (int64_t)(w->rt->cfg.timeout * 1e9);
    for (;;) {
        int done = 0;
        int rc = PC_MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE), why, whylen);
        if (rc != PC_OK || done)
            return rc;
        if ((rc = pc_rt__w_check_thread(w)) != PC_OK) {
            why[0] = '\0'; /* reported: w->main.err has the compressor thread's message */
            return rc;
        }
        if (pc_time_ns() - start > limit)
            return pc_error_fmt(PC_ETIMEDOUT, why, whylen,
                                "timed out after %g s in %s (another worker did not join)",
                                w->rt->cfg.timeout, what);
        pc_backoff_pause(&b);
    }
}

const char *pc_worker_error(const pc_worker_t *w)
{
    return w->main.err;
}

bool pc_worker_error_agreed(const pc_worker_t *w)
{
    return w->err_agreed;
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

/* The figures pc_worker_breakdown gathers, per iteration (BD_FIELDS of them). */
enum {
    F_ITER,
    F_COMPUTE,
    F_PARAM_WAIT,
    F_RELEASE,
    F_BACKPRESSURE,
    F_WCOMPRESS,
    F_NETWORK,
    F_SERVER,
    F_COMPRESS,
    F_COMPRESS_BUSY,
    F_INLINE,
    F_EXPOSED,
    F_BYTES,
    F_COUNT
};
_Static_assert(F_COUNT == BD_FIELDS, "BD_FIELDS counts the gathered figures");
_Static_assert(BD_RING == PC_WORKER_BREAKDOWN_MAX, "the public window bound is the ring");

/* The median of the non-NaN values among v[0], v[stride], ... (n of them), using tmp (n
 * doubles); 0 when there are none. */
static double median(const double *v, size_t n, size_t stride, double *tmp)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(v[i * stride]))
            tmp[k++] = v[i * stride];
    return pc_time_median(tmp, k);
}

int pc_worker_breakdown(pc_worker_t *w, int window, pc_worker_breakdown_t *out)
{
    pc_runtime_t *rt = w->rt;
    if (!w->started || window < 1 || window > BD_RING)
        return WFAIL(rt, &w->main, PC_EINVAL,
                     "breakdown over %d iterations: not started, or not 1..%d", window, BD_RING);
    /* This worker's last `window` complete iterations, oldest first; NaN rows pad. */
    uint64_t have = w->nhist < (uint64_t)window ? w->nhist : (uint64_t)window;
    size_t row = BD_FIELDS, rows = (size_t)window;
    for (size_t i = 0; i < rows * row; i++)
        w->bd_send[i] = NAN;
    for (uint64_t i = 0; i < have; i++) {
        const pc_worker_metrics_t *m = &w->hist[(w->nhist - have + i) % BD_RING];
        double *r = w->bd_send + i * row;
        r[F_ITER] = m->t_iteration;
        r[F_PARAM_WAIT] = m->t_param_wait;
        r[F_RELEASE] = m->t_wait_release;
        r[F_BACKPRESSURE] = m->t_wait_backpressure;
        r[F_WCOMPRESS] = m->t_wait_compress;
        r[F_NETWORK] = m->t_wait_network;
        r[F_SERVER] = m->t_wait_server;
        r[F_COMPRESS] = m->t_compress;
        r[F_COMPRESS_BUSY] = m->t_compress_busy;
        r[F_INLINE] = m->t_compress_inline;
        r[F_EXPOSED] = m->t_exposed;
        r[F_BYTES] = (double)m->bytes_sent;
        double compute = m->t_iteration - m->t_param_wait - m->t_wait_release -
                         m->t_wait_backpressure - m->t_compress_inline;
        r[F_COMPUTE] = compute > 0 ? compute : 0;
    }
    int64_t last = have ? w->hist[(w->nhist - 1) % BD_RING].iteration : -1, last_all = -1;
    char why[256];
    int n = (int)(rows * row);
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = PC_MPI_CHECK(
        MPI_Iallgather(w->bd_send, n, MPI_DOUBLE, w->bd_all, n, MPI_DOUBLE, rt->workers_ctl, &req),
        why, sizeof(why));
    if (rc == PC_OK)
        rc = pc_rt__w_wait_collective(w, &req, "the workers' breakdown", why, sizeof(why));
    if (rc == PC_OK)
        rc = PC_MPI_CHECK(
            MPI_Iallreduce(&last, &last_all, 1, MPI_INT64_T, MPI_MAX, rt->workers_ctl, &req), why,
            sizeof(why));
    if (rc == PC_OK)
        rc = pc_rt__w_wait_collective(w, &req, "the workers' breakdown", why, sizeof(why));
    if (rc != PC_OK)
        return why[0] ? WFAIL(rt, &w->main, rc, "breakdown: %s", why) : rc;
    /* The scratch: the tail of bd_all (worker_start.c allocates W * BD_RING more). */
    size_t W = (size_t)rt->nworkers, all = W * rows;
    double *tmp = w->bd_all + W * BD_RING * BD_FIELDS;
    double med[BD_FIELDS];
    for (int f = 0; f < BD_FIELDS; f++)
        med[f] = median(w->bd_all + f, all, row, tmp);
    pc_worker_breakdown_t b = {
        .window = (int)have,
        .workers = (int)W,
        .last = last_all,
        .t_iteration = med[F_ITER],
        .t_compute = med[F_COMPUTE],
        .t_param_wait = med[F_PARAM_WAIT],
        .t_wait_release = med[F_RELEASE],
        .t_wait_backpressure = med[F_BACKPRESSURE],
        .t_wait_compress = med[F_WCOMPRESS],
        .t_wait_network = med[F_NETWORK],
        .t_wait_server = med[F_SERVER],
        .t_compress = med[F_COMPRESS],
        .t_compress_busy = med[F_COMPRESS_BUSY],
        .t_compress_inline = med[F_INLINE],
        .t_exposed = med[F_EXPOSED],
        .bytes_sent = med[F_BYTES],
        .slowest = 0,
    };
    /* The slowest: the largest median compute (ties: the lowest rank), the same on every
     * worker since every worker sees the same gathered rows. */
    for (size_t r = 0; r < W; r++) {
        const double *v = w->bd_all + r * rows * row;
        double c = median(v + F_COMPUTE, rows, row, tmp);
        if (r == 0 || c > b.slowest_compute) {
            b.slowest = (int)r;
            b.slowest_compute = c;
            b.slowest_iteration = median(v + F_ITER, rows, row, tmp);
        }
    }
    *out = b;
    return PC_OK;
}
