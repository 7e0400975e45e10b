/* worker_allreduce: the --mode allreduce baseline behind the worker's ops (worker_impl.h).
 * The pipeline is the same (pc_worker.c): a chunk whose gradient is complete is summed
 * over the workers with one dense MPI_Allreduce on the MPI thread, scaled by 1/W and
 * stepped with the optimizer locally; no servers, no codec, nothing to poll for. */
#include "config.h"

#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_time.h"
#include "worker_impl.h"

/* The sum of chunk c's gradient over the workers, into c->sum. */
static int ar_fold(pc_worker_t *w, wchunk_t *c, uint64_t it, wthread_t *me)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    ctimes_t *tm = &c->tm[it & 1];
    /* Nothing to compress: the chunk is "sent" when handed over, and the wait for it is
     * all network (its turn among the allreduces, then its own) plus the local step, which
     * stands where the server's work stands in ps mode (t_wait_server). */
    tm->fold0 = pc_time_ns();
    tm->fold1 = tm->comp1 = tm->fold0;
    tm->sent = tm->handed;
    int rc = PC_MPI_CHECK(MPI_Allreduce(c->gin, c->sum, (int)c->n, MPI_FLOAT, MPI_SUM, rt->workers),
                          why, sizeof(why));
    if (rc != PC_OK)
        return WFAIL(rt, me, rc, "allreduce of chunk %u: %s", c->id, why);
    return PC_OK;
}

/* Chunk c's step of iteration it, begun at t_step, is done: its times, its bytes, its
 * version published. */
static int ar_publish(pc_worker_t *w, wchunk_t *c, uint64_t it, int64_t t_step)
{
    pc_runtime_t *rt = w->rt;
    ctimes_t *tm = &c->tm[it & 1];
    tm->update_in = pc_time_ns();
    tm->server_ns = tm->update_in - t_step;
    /* What a ring allreduce moves per rank, each way: 2 (W - 1) / W of the chunk (0 for
     * one rank; Open MPI may pick another algorithm, but none moves less). */
    uint64_t moved = 2 * (uint64_t)(rt->nworkers - 1) * 4 * c->n / (uint64_t)rt->nworkers;
    atomic_fetch_add_explicit(&w->sent_bytes[it % RING], moved, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->recv_bytes[it % RING], moved, memory_order_relaxed);
    /* Release pairs with param_wait's acquire: the parameters (and tm) are written. */
    atomic_store_explicit(&c->version, it + 1, memory_order_release);
    return PC_OK;
}

/* pc_worker_set_device_step: the mean and the step run on a device the caller models, for
 * the chunk's share of the iteration's time by elements: hold this thread until a deadline
 * that follows the previous hold's (so an overshoot is absorbed by the next hold, not
 * added up), sleeping. The parameters are not touched. */
static void ar_device_step(pc_worker_t *w, const wchunk_t *c, int64_t now)
{
    int64_t share = (int64_t)((double)w->device_step_ns * (double)c->n / (double)w->total_n);
    int64_t from = w->step_deadline > now ? w->step_deadline : now;
    w->step_deadline = from + share;
    pc_rt__sleep_until(w->step_deadline);
}

/* After the release: the mean, the optimizer step, the chunk's version published. */
static int ar_step(pc_worker_t *w, wchunk_t *c, uint64_t it, wthread_t *me)
{
    pc_runtime_t *rt = w->rt;
    int rc;
    int64_t t_step = pc_time_ns(); /* the mean and the optimizer step */
    if (w->device_step) {
        ar_device_step(w, c, t_step);
        return ar_publish(w, c, it, t_step);
    }
    float scale = 1.0f / (float)rt->nworkers;
    for (size_t i = 0; i < c->n; i++)
        c->sum[i] *= scale;
    double lr = pc_optim_lr(&rt->optim, (int64_t)it);
    if (w->device && (rc = pc_rt__w_dev_before_write(w, c, me)) != PC_OK)
        return rc;
    c->opt.steps++;
    pc_optim_step(&rt->optim, lr, c->p, &c->opt, c->sum, c->n, NULL);
    if (w->device && (rc = pc_rt__w_dev_params_out(w, c, me)) != PC_OK)
        return rc;
    if (rt->cfg.dilate > 1) /* --dilate: the mean and the step look K times as long */
        pc_rt__dilate(rt, t_step, pc_time_ns());
    return ar_publish(w, c, it, t_step);
}

/* The allreduce is done in fold and step: nothing waits to be sent or received. */
static int ar_send_one(pc_worker_t *w, bool *did, wthread_t *me)
{
    (void)w, (void)me;
    *did = false;
    return PC_OK;
}

static int ar_progress(pc_worker_t *w, int *got, wthread_t *me)
{
    (void)w, (void)me;
    *got = 0;
    return PC_OK;
}

static int ar_done(pc_worker_t *w, wthread_t *me)
{
    (void)w, (void)me;
    return PC_OK;
}

/* The model lives on the workers: checkpoints hold the parameters and the optimizer's
 * state (SGD's momentum; Adam's m, v, vmax: pc_optim_state_arrays' order). */
static void ar_ckpt_arrays(wchunk_t *c, float *arr[CKPT_ARRAYS], size_t len[CKPT_ARRAYS])
{
    arr[0] = c->p;
    pc_optim_state_arrays(&c->opt, arr + 1);
    arr[4] = arr[5] = NULL;
    for (int i = 0; i < CKPT_ARRAYS; i++)
        len[i] = c->n;
}

const worker_ops_t pc_rt__worker_allreduce = {
    .name = "allreduce",
    .servers = false,
    .fold = ar_fold,
    .step = ar_step,
    .send_one = ar_send_one,
    .progress = ar_progress,
    .done = ar_done,
    .ckpt_arrays = ar_ckpt_arrays,
};
