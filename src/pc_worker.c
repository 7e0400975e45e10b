/* pc_worker: the worker pipeline, the hand-off from backprop to the network in one place.
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
 * --pipeline off runs the same two functions (on_ready, progress) inline on the backprop
 * thread: identical arithmetic in identical order per chunk, hence bitwise-identical
 * results, with compression now on the critical path. --mode allreduce replaces "compress
 * and send" by a dense MPI_Allreduce of the chunk and a local optimizer step (Horovod's
 * schedule: one tensor-sized collective at a time, as gradients become ready).
 *
 * Ownership: the thread that runs on_ready/progress (the "MPI thread": the compressor thread,
 * or the backprop thread with --pipeline off) owns every chunk's codec state, buffers and
 * requests. The backprop thread reads only the chunk versions (acquire) and the metrics
 * rings (relaxed atomics, read after a version acquire that orders them). */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_backoff.h"
#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_plan.h"
#include "pipecompress/pc_spsc.h"
#include "pipecompress/pc_time.h"
#include "runtime_impl.h"

/* Metrics ring: an iteration's compressor-side counters are complete one iteration later;
 * four slots leave room for a future bounded-staleness window. */
#define RING 4
/* The MPI thread's longest nap while it awaits updates: the next forward pass waits on
 * them, so wake-up latency is iteration time. */
#define POLL_SLEEP_NS 50000
#define NAME_LEN 64

enum { D_READY = 1, D_STOP = 2 };

typedef struct desc {
    uint32_t kind;
    int32_t tensor;
    uint64_t iteration;
    uint64_t begin, end;
} desc_t;
/* Descriptors travel through q_ready as raw slots: 32 bytes, no padding. */
_Static_assert(sizeof(desc_t) == 32, "desc_t is a 32-byte SPSC slot");

typedef struct rel {
    int32_t tensor;
    uint32_t pad;
    uint64_t iteration;
} rel_t;
_Static_assert(sizeof(rel_t) == 16, "rel_t is a 16-byte SPSC slot");

typedef struct wtensor {
    char name[NAME_LEN];
    float *p, *g;
    size_t n;
    int first_chunk, last_chunk;
} wtensor_t;

typedef struct wchunk {
    uint32_t id;
    int server;
    int first_tensor, last_tensor;
    size_t offset, n;
    float *p, *g;
    pc_codec_t *codec; /* the run's codec, or "none" for a small chunk (not owned) */
    pc_codec_state_t *st;
    size_t remaining; /* elements not yet handed over this iteration (MPI thread) */
    uint8_t *sendbuf;
    size_t send_cap;
    uint8_t *recvbuf;
    size_t recv_cap;
    uint64_t recv_it;        /* iteration of the posted update receive */
    uint64_t fold_it;        /* iteration of the folded, not yet compressed gradient */
    float *sum, *mom;        /* allreduce mode */
    _Atomic uint64_t version; /* updates applied: stored (release) by the MPI thread after
                                 writing the parameters, loaded (acquire) by param_wait */
} wchunk_t;

struct pc_worker {
    pc_runtime_t *rt;
    wtensor_t *tensors;
    int ntensors, tcap;
    pc_plan_t *plan;
    wchunk_t *chunks;
    int nchunks;
    MPI_Request *sends, *recvs; /* per chunk */
    MPI_Status *statuses;
    int *done_idx;
    pc_codec_t *codec;       /* --compress */
    pc_codec_t *codec_dense; /* "none", for chunks under --compress-min-bytes */
    bool started, finished, pipelined, allreduce;
    uint64_t iter;
    /* pipeline */
    pc_spsc_t *q_ready, *q_back;
    pthread_t thread;
    bool thread_started;
    _Atomic int thread_rc; /* the compressor thread's error: stored (release) after writing
                              thread_err, loaded (acquire) by the backprop thread */
    char thread_err[512];
    /* MPI thread only */
    int *tensor_pending; /* per tensor: covering chunks not yet folded this iteration */
    int *ready_list;
    int *queued;         /* ring of folded chunks awaiting compression (nchunks slots) */
    size_t queued_head, nqueued;
    /* metrics: MPI thread adds (relaxed), backprop thread takes (after a version acquire) */
    _Atomic uint64_t comp_ns[RING], sent_bytes[RING], recv_bytes[RING];
    /* backprop thread */
    int64_t t_start, t_first_ready;
    double param_wait, exposed;
    double loss, accuracy; /* reported for the current iteration */
    uint32_t hwm;
    uint64_t released;
    pc_worker_metrics_t pending; /* the previous iteration, compressor side still open */
    bool have_pending;
    pc_worker_metrics_t last;
    bool have_last;
    uint64_t last_ckpt; /* iteration of the newest checkpoint written (have_ckpt) */
    bool have_ckpt;
    char err[512];
};

static int werr(pc_worker_t *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int werr(pc_worker_t *w, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof(w->err), fmt, ap);
    va_end(ap);
    return code;
}

/* The MPI thread's errors go to thread_err (pipelined) or err (inline). */
static char *mpi_err(pc_worker_t *w)
{
    return w->pipelined ? w->thread_err : w->err;
}

static int merr(pc_worker_t *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int merr(pc_worker_t *w, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(mpi_err(w), sizeof(w->err), fmt, ap);
    va_end(ap);
    return code;
}

int pc_worker_create(pc_runtime_t *rt, pc_worker_t **out, char *err, size_t errlen)
{
    if (rt->role != PC_ROLE_WORKER) {
        snprintf(err, errlen, "pc_worker_create called on server rank %d", rt->rank);
        return PC_ESTATE;
    }
    pc_worker_t *w = calloc(1, sizeof(*w));
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return PC_ENOMEM;
    }
    w->rt = rt;
    w->pipelined = rt->cfg.pipeline != 0;
    w->allreduce = rt->cfg.mode == PC_MODE_ALLREDUCE;
    atomic_init(&w->thread_rc, PC_OK);
    w->loss = w->accuracy = NAN;
    for (int i = 0; i < RING; i++) {
        atomic_init(&w->comp_ns[i], 0);
        atomic_init(&w->sent_bytes[i], 0);
        atomic_init(&w->recv_bytes[i], 0);
    }
    *out = w;
    return PC_OK;
}

const char *pc_worker_error(const pc_worker_t *w)
{
    return w->err;
}

int64_t pc_worker_iteration(const pc_worker_t *w)
{
    return (int64_t)w->iter;
}

int pc_worker_register(pc_worker_t *w, const char *name, float *param, float *grad, size_t n)
{
    if (w->started)
        return werr(w, PC_ESTATE, "tensor '%s' registered after pc_worker_start", name);
    if (!name || !param || !grad || n == 0 || n > PC_CODEC_MAX_N)
        return werr(w, PC_EINVAL, "tensor '%s': bad buffers or size %zu", name ? name : "?", n);
    if (w->ntensors == w->tcap) {
        int cap = w->tcap ? 2 * w->tcap : 16;
        wtensor_t *t = realloc(w->tensors, sizeof(wtensor_t) * (size_t)cap);
        if (!t)
            return werr(w, PC_ENOMEM, "out of memory registering '%s'", name);
        w->tensors = t;
        w->tcap = cap;
    }
    wtensor_t *t = &w->tensors[w->ntensors];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->p = param;
    t->g = grad;
    t->n = n;
    return w->ntensors++;
}

/* ---- the MPI thread's half ------------------------------------------------------------ */

static void release_tensor(pc_worker_t *w, int t, uint64_t it)
{
    if (!w->pipelined) {
        w->released++;
        return;
    }
    rel_t r = {.tensor = t, .iteration = it};
    /* q_back holds two iterations of releases: the push cannot wait for long. */
    pc_spsc_push_wait(w->q_back, &r, -1, NULL);
}

/* Fold, compress and send (or allreduce and step) the chunks completed by one hand-over. */
static int process_chunks(pc_worker_t *w, const int *list, int nlist, uint64_t it)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    int rc;
    if (w->allreduce) {
        for (int j = 0; j < nlist; j++) {
            wchunk_t *c = &w->chunks[list[j]];
            rc = PC_MPI_CHECK(MPI_Allreduce(c->g, c->sum, (int)c->n, MPI_FLOAT, MPI_SUM,
                                            rt->workers),
                              why, sizeof(why));
            if (rc != PC_OK)
                return merr(w, rc, "worker r%d: allreduce of chunk %u: %s", rt->rank, c->id, why);
            for (int t = c->first_tensor; t <= c->last_tensor; t++)
                if (--w->tensor_pending[t] == 0) {
                    w->tensor_pending[t] = w->tensors[t].last_chunk - w->tensors[t].first_chunk + 1;
                    release_tensor(w, t, it);
                }
            float scale = 1.0f / (float)rt->nworkers;
            for (size_t i = 0; i < c->n; i++)
                c->sum[i] *= scale;
            float lr = (float)pc_optim_lr(&rt->optim, (int64_t)it);
            pc_optim_sgd(&rt->optim, lr, c->p, c->mom, c->sum, c->n, NULL);
            /* What a ring allreduce moves per rank, each way: 2 (W - 1) / W of the chunk (0
             * for one rank; Open MPI may pick another algorithm, but none moves less). */
            uint64_t moved = 2 * (uint64_t)(rt->nworkers - 1) * 4 * c->n / (uint64_t)rt->nworkers;
            atomic_fetch_add_explicit(&w->sent_bytes[it % RING], moved, memory_order_relaxed);
            atomic_fetch_add_explicit(&w->recv_bytes[it % RING], moved, memory_order_relaxed);
            /* Release pairs with param_wait's acquire: the parameters are written. */
            atomic_store_explicit(&c->version, it + 1, memory_order_release);
        }
        return PC_OK;
    }
    int track = w->pipelined ? TRACK_COMPRESSOR : TRACK_MAIN;
    char ev[40];
    /* Fold every completed chunk first, so gradient buffers go back as early as possible. */
    for (int j = 0; j < nlist; j++) {
        wchunk_t *c = &w->chunks[list[j]];
        int64_t t0 = pc_time_ns();
        c->fold_it = it;
        rc = pc_codec_fold(c->codec, c->st, c->g);
        int64_t t1 = pc_time_ns();
        atomic_fetch_add_explicit(&w->comp_ns[it % RING], (uint64_t)(t1 - t0), memory_order_relaxed);
        snprintf(ev, sizeof(ev), "fold chunk %u", c->id);
        pc_rt__trace(rt, track, ev, t0, t1);
        if (rc != PC_OK)
            return merr(w, rc, "worker r%d: chunk %u (tensor '%s') of iteration %llu: %s",
                        rt->rank, c->id, w->tensors[c->first_tensor].name,
                        (unsigned long long)it,
                        rc == PC_ERANGE ? "gradient is NaN or infinite (training diverged)"
                                        : pc_strerror(rc));
        for (int t = c->first_tensor; t <= c->last_tensor; t++)
            if (--w->tensor_pending[t] == 0) {
                w->tensor_pending[t] = w->tensors[t].last_chunk - w->tensors[t].first_chunk + 1;
                release_tensor(w, t, it);
            }
    }
    /* Queue them for compression (FIFO); folds of later hand-overs may overtake. */
    for (int j = 0; j < nlist; j++)
        w->queued[(w->queued_head + w->nqueued++) % (size_t)w->nchunks] = list[j];
    return PC_OK;
}

/* Compress and send the oldest folded chunk; *did tells whether there was one. Between two
 * of these the compressor thread folds whatever was handed over meanwhile, so a gradient
 * buffer waits for at most one chunk's compression before it is released. */
static int compress_one(pc_worker_t *w, bool *did)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    *did = w->nqueued > 0;
    if (!*did)
        return PC_OK;
    wchunk_t *c = &w->chunks[w->queued[w->queued_head]];
    w->queued_head = (w->queued_head + 1) % (size_t)w->nchunks;
    w->nqueued--;
    uint64_t it = c->fold_it;
    /* The previous send from this buffer completed long ago (its update came back). */
    int rc = PC_MPI_CHECK(MPI_Wait(&w->sends[c->id], MPI_STATUS_IGNORE), why, sizeof(why));
    if (rc != PC_OK)
        return merr(w, rc, "worker r%d: %s", rt->rank, why);
    size_t len = 0;
    int64_t t0 = pc_time_ns();
    rc = pc_codec_compress_folded(c->codec, c->st, it, c->sendbuf, c->send_cap, &len);
    atomic_fetch_add_explicit(&w->comp_ns[it % RING], (uint64_t)(pc_time_ns() - t0),
                              memory_order_relaxed);
    if (rc != PC_OK)
        return merr(w, rc, "worker r%d: compressing chunk %u: %s", rt->rank, c->id,
                    pc_strerror(rc));
    /* Post the update's receive before the gradient leaves: no unexpected messages. */
    c->recv_it = it;
    rc = PC_MPI_CHECK(MPI_Irecv(c->recvbuf, (int)c->recv_cap, MPI_BYTE,
                                pc_rt__server_rank(rt, c->server), TAG_PULL + (int)c->id, rt->comm,
                                &w->recvs[c->id]),
                      why, sizeof(why));
    if (rc == PC_OK)
        rc = PC_MPI_CHECK(MPI_Isend(c->sendbuf, (int)len, MPI_BYTE,
                                    pc_rt__server_rank(rt, c->server), TAG_GRAD, rt->comm,
                                    &w->sends[c->id]),
                          why, sizeof(why));
    if (rc != PC_OK)
        return merr(w, rc, "worker r%d: chunk %u: %s", rt->rank, c->id, why);
    atomic_fetch_add_explicit(&w->sent_bytes[it % RING], len, memory_order_relaxed);
    char ev[40];
    snprintf(ev, sizeof(ev), "compress+send chunk %u", c->id);
    pc_rt__trace(rt, w->pipelined ? TRACK_COMPRESSOR : TRACK_MAIN, ev, t0, pc_time_ns());
    return PC_OK;
}

/* One hand-over: account tensor t's elements [begin, end) to its chunks. */
static int on_ready(pc_worker_t *w, const desc_t *d)
{
    const wtensor_t *t = &w->tensors[d->tensor];
    int n = 0;
    for (int ci = t->first_chunk; ci <= t->last_chunk; ci++) {
        wchunk_t *c = &w->chunks[ci];
        /* This chunk's part of the tensor: all of it when the chunk groups whole tensors. */
        size_t lo = c->first_tensor == c->last_tensor ? c->offset : 0;
        size_t hi = c->first_tensor == c->last_tensor ? c->offset + c->n : t->n;
        size_t a = d->begin > lo ? d->begin : lo, b = d->end < hi ? d->end : hi;
        if (a >= b)
            continue;
        if (b - a > c->remaining)
            return merr(w, PC_EINVAL,
                        "worker r%d: tensor '%s': gradient elements handed over twice in "
                        "iteration %llu",
                        w->rt->rank, t->name, (unsigned long long)d->iteration);
        c->remaining -= b - a;
        if (c->remaining == 0) {
            c->remaining = c->n;
            w->ready_list[n++] = ci;
        }
    }
    return n ? process_chunks(w, w->ready_list, n, d->iteration) : PC_OK;
}

/* Apply every update that has arrived. *got counts them. */
static int progress(pc_worker_t *w, int *got)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    *got = 0;
    if (w->allreduce)
        return PC_OK;
    int outcount = 0;
    int rc = PC_MPI_CHECK(MPI_Testsome(w->nchunks, w->recvs, &outcount, w->done_idx,
                                       w->statuses),
                          why, sizeof(why));
    if (rc != PC_OK)
        return merr(w, rc, "worker r%d: %s", rt->rank, why);
    if (outcount == MPI_UNDEFINED)
        return PC_OK;
    for (int j = 0; j < outcount; j++) {
        wchunk_t *c = &w->chunks[w->done_idx[j]];
        int count = 0;
        MPI_Get_count(&w->statuses[j], MPI_BYTE, &count);
        size_t len = count > 0 ? (size_t)count : 0;
        int64_t t0 = pc_time_ns();
        rc = pc_rt__pull_apply(c->recvbuf, len, c->id, c->recv_it, c->p, c->n, why, sizeof(why));
        char ev[40];
        snprintf(ev, sizeof(ev), "apply update chunk %u", c->id);
        pc_rt__trace(rt, w->pipelined ? TRACK_COMPRESSOR : TRACK_MAIN, ev, t0, pc_time_ns());
        if (rc != PC_OK)
            return merr(w, rc, "worker r%d: rejected update from server r%d: %s", rt->rank,
                        pc_rt__server_rank(rt, c->server), why);
        atomic_fetch_add_explicit(&w->recv_bytes[c->recv_it % RING], len, memory_order_relaxed);
        /* Release pairs with param_wait's acquire: the parameters are written. */
        atomic_store_explicit(&c->version, c->recv_it + 1, memory_order_release);
        (*got)++;
    }
    return PC_OK;
}

static bool updates_outstanding(const pc_worker_t *w)
{
    for (int c = 0; c < w->nchunks; c++)
        if (w->recvs[c] != MPI_REQUEST_NULL)
            return true;
    return false;
}

static int send_done(pc_worker_t *w)
{
    char why[256];
    uint8_t sig[PC_RT_DONE_BYTES];
    pc_rt__done_encode(sig, w->rt->stop_signal);
    for (int s = 0; s < w->rt->nservers; s++) {
        int rc = PC_MPI_CHECK(MPI_Send(sig, PC_RT_DONE_BYTES, MPI_BYTE,
                                       pc_rt__server_rank(w->rt, s), TAG_DONE, w->rt->comm),
                              why, sizeof(why));
        if (rc != PC_OK)
            return merr(w, rc, "worker r%d: %s", w->rt->rank, why);
    }
    return PC_OK;
}

static void *compressor_main(void *arg)
{
    pc_worker_t *w = arg;
    int rc = pc_rt__bind(w->rt, 1, "compressor");
    if (rc != PC_OK)
        snprintf(w->thread_err, sizeof(w->thread_err),
                 "worker r%d: cannot bind the compressor thread", w->rt->rank);
    desc_t batch[32];
    bool stopping = false;
    pc_backoff_t b;
    pc_backoff_init_capped(&b, POLL_SLEEP_NS);
    while (rc == PC_OK) {
        size_t n = pc_spsc_try_pop_burst(w->q_ready, batch, 32);
        for (size_t i = 0; i < n && rc == PC_OK; i++) {
            if (batch[i].kind == D_STOP)
                stopping = true;
            else
                rc = on_ready(w, &batch[i]);
        }
        bool did = false;
        if (rc == PC_OK)
            rc = compress_one(w, &did);
        int got = 0;
        if (rc == PC_OK)
            rc = progress(w, &got);
        if (rc != PC_OK)
            break;
        if (stopping && !w->nqueued && !updates_outstanding(w)) {
            rc = send_done(w);
            break;
        }
        if (n || got || did)
            pc_backoff_init_capped(&b, updates_outstanding(w) ? POLL_SLEEP_NS
                                                              : PC_BACKOFF_MAX_SLEEP_NS);
        else
            pc_backoff_pause(&b);
    }
    /* Release pairs with the backprop thread's acquire load: thread_err is written. */
    atomic_store_explicit(&w->thread_rc, rc, memory_order_release);
    return NULL;
}

/* The backprop thread's view of a compressor failure. */
static int check_thread(pc_worker_t *w)
{
    int rc = atomic_load_explicit(&w->thread_rc, memory_order_acquire);
    if (rc != PC_OK)
        return werr(w, rc, "%s", w->thread_err);
    return PC_OK;
}

/* ---- checkpoints ---------------------------------------------------------------------- */

/* A chunk's record in a worker's checkpoint file (then its arrays). */
typedef struct wrec {
    uint32_t id, n;
    uint32_t has_a, has_b; /* ps: residual, codec momentum; allreduce: parameters, momentum */
    uint64_t steps;        /* ps: codec steps (dgc warm-up) */
} wrec_t;
/* Written raw into checkpoint files: a change of layout is a new CKPT_VERSION. */
_Static_assert(sizeof(wrec_t) == 24 && offsetof(wrec_t, steps) == 16,
               "wrec_t is part of the checkpoint file format");

/* Rank 0 picks the checkpoint to resume from (--resume), creating --checkpoint-dir when it is
 * missing; every worker learns the choice (*it; 0: a fresh start). Collective over the
 * workers. */
static int choose_resume(pc_worker_t *w, uint64_t *it)
{
    pc_runtime_t *rt = w->rt;
    int64_t msg[2] = {PC_OK, 0}; /* status, iteration */
    *it = 0;
    if (!pc_rt__ckpt_on(rt))
        return PC_OK;
    if (rt->rank == 0) {
        const char *dir = rt->cfg.checkpoint_dir;
        char why[512];
        if (pc_ckpt_dir_create(dir, why, sizeof(why)) != PC_OK)
            msg[0] = werr(w, PC_EIO, "--checkpoint-dir %s", why);
        if (msg[0] == PC_OK) {
            pc_ckpt_meta_t want;
            uint64_t found = 0;
            pc_rt__ckpt_meta(rt, 0, &want);
            /* Skipped ones stay: a checkpoint of another job is not ours to delete, and a damaged
             * one is overwritten when training reaches its iteration again. */
            int rc = pc_ckpt_find(dir, &want, rt->log, 0, &found, w->err, sizeof(w->err));
            if (rc == PC_EINCOMPAT) {
                /* Refused with or without --resume: this job would overwrite the other's
                 * checkpoints of the same iterations. */
                char found_why[sizeof(w->err)];
                snprintf(found_why, sizeof(found_why), "%s", w->err);
                msg[0] = werr(w, rc, "--checkpoint-dir: %s; resume it with that job's ranks, model "
                                     "and flags, or give this job another directory",
                              found_why);
            } else if (!rt->cfg.resume) {
                w->err[0] = '\0';
            } else if (rc == PC_OK) {
                msg[1] = (int64_t)found;
                pc_log_write(rt->log, PC_LOG_INFO, NULL,
                             "resuming from the checkpoint of iteration %llu in %s",
                             (unsigned long long)found, dir);
            } else if (rc == PC_ENOENT) {
                pc_log_write(rt->log, PC_LOG_INFO, NULL,
                             "--resume: no complete checkpoint in %s; starting from iteration 0", dir);
                w->err[0] = '\0';
            } else {
                msg[0] = rc;
            }
        }
    }
    char why[256];
    int rc = PC_MPI_CHECK(MPI_Bcast(msg, 2, MPI_INT64_T, 0, rt->workers), why, sizeof(why));
    if (rc != PC_OK)
        return werr(w, rc, "worker r%d: agreeing on the checkpoint: %s", rt->rank, why);
    if (msg[0] != PC_OK)
        return rt->rank == 0 ? (int)msg[0]
                             : werr(w, (int)msg[0], "worker r%d: worker r0 could not set up checkpoints",
                                    rt->rank);
    *it = (uint64_t)msg[1];
    return PC_OK;
}

/* Restore this worker's chunk states from its file of checkpoint it. */
static int worker_load(pc_worker_t *w, uint64_t it)
{
    pc_runtime_t *rt = w->rt;
    pc_ckpt_reader_t *r;
    int rc = pc_rt__ckpt_open(rt, it, (uint32_t)w->nchunks, &r, w->err, sizeof(w->err));
    if (rc != PC_OK)
        return rc;
    for (int ci = 0; ci < w->nchunks && rc == PC_OK; ci++) {
        wchunk_t *c = &w->chunks[ci];
        float *a = w->allreduce ? c->p : pc_codec_state_residual(c->st);
        float *b = w->allreduce ? c->mom : pc_codec_state_momentum(c->st);
        wrec_t rec;
        if ((rc = pc_ckpt_reader_read(r, &rec, sizeof(rec))) != PC_OK)
            break;
        if (rec.id != c->id || rec.n != c->n || rec.has_a != (a != NULL) || rec.has_b != (b != NULL)) {
            pc_ckpt_reader_close(r, NULL, 0);
            return werr(w, PC_EFORMAT,
                        "worker r%d: checkpoint of iteration %llu: chunk %d's record does not "
                        "match this job",
                        rt->rank, (unsigned long long)it, ci);
        }
        if (a)
            rc = pc_ckpt_reader_read(r, a, sizeof(float) * c->n);
        if (rc == PC_OK && b)
            rc = pc_ckpt_reader_read(r, b, sizeof(float) * c->n);
        if (!w->allreduce)
            pc_codec_state_set_steps(c->st, rec.steps);
    }
    char why[512];
    if (pc_ckpt_reader_close(r, why, sizeof(why)) != PC_OK)
        return werr(w, PC_EFORMAT, "worker r%d: %s", rt->rank, why);
    return PC_OK;
}

/* Checkpoint at this iteration boundary (w->iter iterations done). Waits for every update of
 * the last iteration: then no compression is in flight (an update follows its chunk's
 * compression, and the version acquire orders the codec state's writes before this
 * thread's reads) and no new one starts (nothing is handed over). Tells the servers, writes
 * this worker's file, and joins the collective that ends the checkpoint. */
static int worker_checkpoint(pc_worker_t *w)
{
    pc_runtime_t *rt = w->rt;
    uint64_t it = w->iter;
    int rc;
    for (int t = 0; t < w->ntensors; t++)
        if ((rc = pc_worker_param_wait(w, t)) != PC_OK)
            return rc;
    char why[512] = "";
    uint8_t msg[PC_RT_CKPT_BYTES];
    pc_rt__ckpt_req_encode(msg, it);
    for (int s = 0; s < rt->nservers; s++)
        if ((rc = PC_MPI_CHECK(MPI_Send(msg, PC_RT_CKPT_BYTES, MPI_BYTE, pc_rt__server_rank(rt, s),
                                        TAG_CKPT, rt->comm),
                               why, sizeof(why))) != PC_OK)
            return werr(w, rc, "worker r%d: %s", rt->rank, why);
    pc_ckpt_writer_t *cw = NULL;
    rc = pc_rt__ckpt_begin(rt, it, (uint32_t)w->nchunks, &cw, why, sizeof(why));
    for (int ci = 0; ci < w->nchunks && rc == PC_OK; ci++) {
        wchunk_t *c = &w->chunks[ci];
        const float *a = w->allreduce ? c->p : pc_codec_state_residual(c->st);
        const float *b = w->allreduce ? c->mom : pc_codec_state_momentum(c->st);
        wrec_t rec = {.id = c->id, .n = (uint32_t)c->n, .has_a = a != NULL, .has_b = b != NULL,
                      .steps = w->allreduce ? 0 : pc_codec_state_steps(c->st)};
        pc_ckpt_writer_write(cw, &rec, sizeof(rec));
        if (a)
            pc_ckpt_writer_write(cw, a, sizeof(float) * c->n);
        if (b)
            pc_ckpt_writer_write(cw, b, sizeof(float) * c->n);
    }
    rc = pc_rt__ckpt_finish(rt, it, cw, rc, why, w->err, sizeof(w->err));
    if (rc != PC_OK)
        return rc;
    w->last_ckpt = it;
    w->have_ckpt = true;
    return PC_OK;
}

/* ---- start -------------------------------------------------------------------------- */

static uint64_t fnv(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

static size_t pow2_at_least(size_t n)
{
    size_t p = 64;
    while (p < n)
        p *= 2;
    return p;
}

int pc_worker_start(pc_worker_t *w)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    int rc;
    if (w->started)
        return werr(w, PC_ESTATE, "pc_worker_start called twice");
    if (w->ntensors == 0)
        return werr(w, PC_EINVAL, "no tensor registered before pc_worker_start");
    w->started = true;
    pc_plan_tensor_t *pt = malloc(sizeof(pc_plan_tensor_t) * (size_t)w->ntensors);
    if (!pt)
        return werr(w, PC_ENOMEM, "out of memory");
    for (int t = 0; t < w->ntensors; t++)
        pt[t] = (pc_plan_tensor_t){w->tensors[t].n, w->tensors[t].p, w->tensors[t].g};
    size_t chunk_elems = (size_t)rt->cfg.chunk_bytes / sizeof(float);
    rc = pc_plan_create(pt, w->ntensors, chunk_elems, rt->nservers ? rt->nservers : 1, &w->plan);
    free(pt);
    if (rc != PC_OK)
        return werr(w, rc, "cannot plan chunks: %s", pc_strerror(rc));
    /* Every worker must have the same model: compare a hash of the tensors and the plan
     * (it also identifies the model in checkpoints). */
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, (uint64_t)w->ntensors);
    for (int t = 0; t < w->ntensors; t++)
        h = fnv(h, w->tensors[t].n);
    h = fnv(h, (uint64_t)w->plan->nchunks);
    for (int c = 0; c < w->plan->nchunks; c++)
        h = fnv(fnv(h, w->plan->chunks[c].n), (uint64_t)w->plan->chunks[c].server);
    uint64_t lo = h, hi = h;
    if ((rc = PC_MPI_CHECK(MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, rt->workers), why,
                           sizeof(why))) != PC_OK ||
        (rc = PC_MPI_CHECK(MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, rt->workers), why,
                           sizeof(why))) != PC_OK)
        return werr(w, rc, "worker r%d: %s", rt->rank, why);
    if (lo != hi)
        return werr(w, PC_EINVAL,
                    "workers registered different models (tensor sizes or order differ)");
    rt->model_hash = h;
    uint64_t resume = 0;
    if ((rc = choose_resume(w, &resume)) != PC_OK)
        return rc;
    int tag_ub = 32767, flag = 0;
    int *ub = NULL;
    MPI_Comm_get_attr(rt->comm, MPI_TAG_UB, &ub, &flag);
    if (flag && ub)
        tag_ub = *ub;
    if (TAG_PULL + w->plan->nchunks > tag_ub)
        return werr(w, PC_EINVAL, "%d chunks exceed MPI's tag range; raise --chunk-bytes",
                    w->plan->nchunks);
    if (rt->rank == 0 && pc_log_enabled(rt->log, PC_LOG_DEBUG)) {
        const char **names = malloc(sizeof(char *) * (size_t)w->ntensors);
        if (names) {
            for (int t = 0; t < w->ntensors; t++)
                names[t] = w->tensors[t].name;
            pc_log_write(rt->log, PC_LOG_DEBUG, NULL, "chunk plan (%d chunks, %zu elements max):",
                         w->plan->nchunks, chunk_elems);
            /* Line by line through the log (the library prints nothing of its own). */
            char *text = NULL, *save = NULL;
            size_t len = 0;
            FILE *mem = open_memstream(&text, &len);
            if (mem) {
                pc_plan_print(w->plan, names, mem, "  ");
                fclose(mem);
                for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
                    pc_log_write(rt->log, PC_LOG_DEBUG, NULL, "%s", l);
                free(text);
            }
            free(names);
        }
    }
    w->nchunks = w->plan->nchunks;
    w->chunks = calloc((size_t)w->nchunks, sizeof(wchunk_t));
    w->sends = malloc(sizeof(MPI_Request) * (size_t)w->nchunks);
    w->recvs = malloc(sizeof(MPI_Request) * (size_t)w->nchunks);
    w->done_idx = malloc(sizeof(int) * (size_t)w->nchunks);
    w->statuses = malloc(sizeof(MPI_Status) * (size_t)w->nchunks);
    w->ready_list = malloc(sizeof(int) * (size_t)w->nchunks);
    w->queued = malloc(sizeof(int) * (size_t)w->nchunks);
    w->tensor_pending = malloc(sizeof(int) * (size_t)w->ntensors);
    if (!w->chunks || !w->sends || !w->recvs || !w->done_idx || !w->statuses || !w->ready_list ||
        !w->queued ||
        !w->tensor_pending)
        return werr(w, PC_ENOMEM, "out of memory");
    for (int t = 0; t < w->ntensors; t++) {
        w->tensors[t].first_chunk = w->plan->tensor_first_chunk[t];
        w->tensors[t].last_chunk = w->plan->tensor_last_chunk[t];
        w->tensor_pending[t] = w->tensors[t].last_chunk - w->tensors[t].first_chunk + 1;
    }
    pc_codec_spec_t none;
    pc_codec_spec_parse("none", &none, NULL, 0);
    if (!w->allreduce && ((rc = pc_codec_create(&rt->spec, &w->codec)) != PC_OK ||
                          (rc = pc_codec_create(&none, &w->codec_dense)) != PC_OK))
        return werr(w, rc, "cannot create the codec: %s", pc_strerror(rc));
    for (int ci = 0; ci < w->nchunks; ci++) {
        const pc_plan_chunk_t *pc = &w->plan->chunks[ci];
        wchunk_t *c = &w->chunks[ci];
        c->id = pc->id;
        c->server = pc->server;
        c->first_tensor = pc->first_tensor;
        c->last_tensor = pc->last_tensor;
        c->offset = pc->offset;
        c->n = pc->n;
        c->remaining = pc->n;
        c->p = w->tensors[pc->first_tensor].p + pc->offset;
        c->g = w->tensors[pc->first_tensor].g + pc->offset;
        atomic_init(&c->version, 0);
        w->sends[ci] = w->recvs[ci] = MPI_REQUEST_NULL;
        if (w->allreduce) {
            c->sum = malloc(sizeof(float) * c->n);
            c->mom = rt->optim.momentum != 0 ? calloc(c->n, sizeof(float)) : NULL;
            if (!c->sum || (rt->optim.momentum != 0 && !c->mom))
                return werr(w, PC_ENOMEM, "out of memory for chunk %d", ci);
            continue;
        }
        c->codec = pc_rt__chunk_dense(rt, c->n) ? w->codec_dense : w->codec;
        c->send_cap = pc_codec_max_bytes(c->codec, c->n);
        c->recv_cap = pc_rt__pull_max_bytes(c->n);
        c->sendbuf = malloc(c->send_cap);
        c->recvbuf = malloc(c->recv_cap);
        if (!c->sendbuf || !c->recvbuf ||
            pc_codec_state_create(c->codec, c->id, c->n, &c->st) != PC_OK)
            return werr(w, PC_ENOMEM, "out of memory for chunk %d", ci);
    }
    /* Worker 0 gives each server the plan and its chunks' initial parameters (or, when
     * resuming, takes the checkpointed parameters from the servers). */
    if (rt->rank == 0 && !w->allreduce) {
        size_t lay_len = pc_rt__layout_bytes((size_t)w->nchunks);
        uint8_t *lay = malloc(lay_len);
        if (!lay)
            return werr(w, PC_ENOMEM, "out of memory");
        pc_rt__layout_encode(lay, w->plan, resume);
        for (int s = 0; s < rt->nservers && rc == PC_OK; s++)
            rc = PC_MPI_CHECK(MPI_Send(lay, (int)lay_len, MPI_BYTE, pc_rt__server_rank(rt, s),
                                       TAG_LAYOUT, rt->comm),
                              why, sizeof(why));
        free(lay);
        /* Init messages pass through the chunk's update buffer (pc_rt__pull_max_bytes(n) >=
         * pc_rt__init_bytes(n)), unused until the first update is posted. */
        for (int ci = 0; ci < w->nchunks && rc == PC_OK; ci++) {
            wchunk_t *c = &w->chunks[ci];
            int server = pc_rt__server_rank(rt, c->server), count = 0;
            MPI_Status st;
            if (!resume) {
                pc_rt__init_encode(c->recvbuf, c->p, c->n);
                rc = PC_MPI_CHECK(MPI_Send(c->recvbuf, (int)pc_rt__init_bytes(c->n), MPI_BYTE,
                                           server, TAG_INIT, rt->comm),
                                  why, sizeof(why));
                continue;
            }
            rc = PC_MPI_CHECK(
                MPI_Recv(c->recvbuf, (int)c->recv_cap, MPI_BYTE, server, TAG_INIT, rt->comm, &st),
                why, sizeof(why));
            if (rc == PC_OK)
                rc = PC_MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &count), why, sizeof(why));
            if (rc == PC_OK)
                rc = pc_rt__init_apply(c->recvbuf, (size_t)count, c->id, c->p, c->n, why,
                                       sizeof(why));
        }
        if (rc != PC_OK)
            return werr(w, rc, "worker r0: the layout and initial parameters: %s", why);
    }
    /* This worker's own state: codec states (allreduce: parameters and momentum). */
    if (resume && (rc = worker_load(w, resume)) != PC_OK)
        return rc;
    /* Worker 0's parameters become everyone's. */
    for (int t = 0; t < w->ntensors; t++)
        if ((rc = PC_MPI_CHECK(MPI_Bcast(w->tensors[t].p, (int)w->tensors[t].n, MPI_FLOAT, 0,
                                         rt->workers),
                               why, sizeof(why))) != PC_OK)
            return werr(w, rc, "worker r%d: broadcasting parameters: %s", rt->rank, why);
    w->iter = resume;
    for (int ci = 0; ci < w->nchunks; ci++)
        atomic_store_explicit(&w->chunks[ci].version, resume, memory_order_relaxed); /* before
                                                         the thread starts: no reader yet */
    if (resume) {
        w->last_ckpt = resume;
        w->have_ckpt = true;
    }
    if (w->pipelined) {
        size_t cap = pow2_at_least(4 * (size_t)(w->ntensors + w->nchunks));
        if (pc_spsc_create(cap, sizeof(desc_t), &w->q_ready) != PC_OK ||
            pc_spsc_create(pow2_at_least(4 * (size_t)w->ntensors), sizeof(rel_t), &w->q_back) !=
                PC_OK)
            return werr(w, PC_ENOMEM, "out of memory for the queues");
        if (pthread_create(&w->thread, NULL, compressor_main, w) != 0)
            return werr(w, PC_ETHREAD, "cannot start the compressor thread");
        w->thread_started = true;
    }
    w->t_start = pc_time_ns();
    w->t_first_ready = 0;
    return PC_OK;
}

/* ---- the backprop thread's calls ----------------------------------------------------- */

static int wait_chunk(pc_worker_t *w, const wchunk_t *c, const char *tensor)
{
    uint64_t want = w->iter;
    /* Acquire pairs with the MPI thread's release store after writing the parameters. */
    if (atomic_load_explicit(&c->version, memory_order_acquire) >= want)
        return PC_OK;
    int64_t start = pc_time_ns(), limit = (int64_t)(w->rt->cfg.timeout * 1e9);
    pc_backoff_t b;
    pc_backoff_init_capped(&b, POLL_SLEEP_NS);
    for (;;) {
        int rc;
        if (w->pipelined) {
            if ((rc = check_thread(w)) != PC_OK)
                return rc;
        } else {
            int got;
            if ((rc = progress(w, &got)) != PC_OK)
                return rc;
        }
        if (atomic_load_explicit(&c->version, memory_order_acquire) >= want)
            break;
        if (pc_time_ns() - start > limit)
            return werr(w, PC_ETIMEDOUT,
                        "worker r%d: timed out after %g s waiting for the update of tensor '%s' "
                        "(chunk %u, server r%d) for iteration %llu",
                        w->rt->rank, w->rt->cfg.timeout, tensor, c->id,
                        w->allreduce ? -1 : pc_rt__server_rank(w->rt, c->server),
                        (unsigned long long)(want - 1));
        pc_backoff_pause(&b);
    }
    w->param_wait += (double)(pc_time_ns() - start) * 1e-9;
    return PC_OK;
}

int pc_worker_param_wait(pc_worker_t *w, int tensor)
{
    if (!w->started || w->finished || tensor < 0 || tensor >= w->ntensors)
        return werr(w, PC_EINVAL, "param_wait(%d): no such tensor, or not started", tensor);
    const wtensor_t *t = &w->tensors[tensor];
    for (int ci = t->first_chunk; ci <= t->last_chunk; ci++) {
        int rc = wait_chunk(w, &w->chunks[ci], t->name);
        if (rc != PC_OK)
            return rc;
    }
    return PC_OK;
}

int pc_worker_grad_ready_range(pc_worker_t *w, int tensor, size_t begin, size_t end)
{
    if (!w->started || w->finished || tensor < 0 || tensor >= w->ntensors)
        return werr(w, PC_EINVAL, "grad_ready(%d): no such tensor, or not started", tensor);
    const wtensor_t *t = &w->tensors[tensor];
    if (begin >= end || end > t->n)
        return werr(w, PC_EINVAL, "grad_ready('%s', %zu, %zu): bad range for %zu elements", t->name,
                    begin, end, t->n);
    if (!w->t_first_ready)
        w->t_first_ready = pc_time_ns();
    desc_t d = {.kind = D_READY, .tensor = tensor, .iteration = w->iter, .begin = begin, .end = end};
    if (!w->pipelined) {
        uint64_t c0 = atomic_load_explicit(&w->comp_ns[w->iter % RING], memory_order_relaxed);
        int rc = on_ready(w, &d);
        for (bool did = true; rc == PC_OK && did;)
            rc = compress_one(w, &did);
        /* Inline, the compression time is exactly what backprop is exposed to. */
        w->exposed += (double)(atomic_load_explicit(&w->comp_ns[w->iter % RING],
                                                    memory_order_relaxed) -
                               c0) *
                      1e-9;
        return rc;
    }
    int rc = check_thread(w);
    if (rc != PC_OK)
        return rc;
    int64_t waited = 0;
    rc = pc_spsc_push_wait(w->q_ready, &d, (int64_t)(w->rt->cfg.timeout * 1e9), &waited);
    w->exposed += (double)waited * 1e-9;
    if (rc != PC_OK)
        return werr(w, rc, "worker r%d: the compressor thread took no descriptor for %g s",
                    w->rt->rank, w->rt->cfg.timeout);
    uint32_t depth = (uint32_t)pc_spsc_size_approx(w->q_ready);
    if (depth > w->hwm)
        w->hwm = depth;
    return PC_OK;
}

int pc_worker_grad_ready(pc_worker_t *w, int tensor)
{
    if (tensor < 0 || tensor >= w->ntensors)
        return werr(w, PC_EINVAL, "grad_ready(%d): no such tensor", tensor);
    return pc_worker_grad_ready_range(w, tensor, 0, w->tensors[tensor].n);
}

/* Take the compressor-side counters of iteration it (their ring slot is then reused). */
static void take_ring(pc_worker_t *w, pc_worker_metrics_t *m)
{
    int s = (int)(m->iteration % RING);
    m->t_compress = (double)atomic_exchange_explicit(&w->comp_ns[s], 0, memory_order_relaxed) * 1e-9;
    m->bytes_sent = atomic_exchange_explicit(&w->sent_bytes[s], 0, memory_order_relaxed);
    m->bytes_received = atomic_exchange_explicit(&w->recv_bytes[s], 0, memory_order_relaxed);
}

static void emit(pc_worker_t *w, pc_worker_metrics_t *m)
{
    take_ring(w, m);
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
        "\"mode\": \"%s\"%s}",
        w->rt->rank, (long long)m->iteration, m->t_iteration, m->t_forward, m->t_backward,
        m->t_param_wait, m->t_compress, m->t_exposed, (unsigned long long)m->bytes_sent,
        (unsigned long long)m->bytes_received, (unsigned long long)m->dense_bytes,
        m->bytes_sent ? (double)m->dense_bytes / (double)m->bytes_sent : 0.0, m->queue_high_water,
        w->pipelined ? "true" : "false", w->allreduce ? "allreduce" : "ps", extra);
}

int pc_worker_iteration_end(pc_worker_t *w, bool *stop)
{
    pc_runtime_t *rt = w->rt;
    if (!w->started || w->finished)
        return werr(w, PC_ESTATE, "iteration_end before start or after finish");
    int64_t t_end_call = pc_time_ns();
    if (w->pipelined) {
        int64_t limit = (int64_t)(rt->cfg.timeout * 1e9), start = pc_time_ns();
        while (w->released < (uint64_t)w->ntensors) {
            rel_t r;
            int64_t waited = 0;
            int rc = check_thread(w);
            if (rc != PC_OK)
                return rc;
            rc = pc_spsc_pop_wait(w->q_back, &r, 10000000, &waited); /* re-check every 10 ms */
            w->exposed += (double)waited * 1e-9;
            if (rc == PC_OK)
                w->released++;
            else if (pc_time_ns() - start > limit)
                return werr(w, PC_ETIMEDOUT,
                            "worker r%d: timed out after %g s waiting for gradient buffers of "
                            "iteration %llu to be released (%llu of %d tensors)",
                            rt->rank, rt->cfg.timeout, (unsigned long long)w->iter,
                            (unsigned long long)w->released, w->ntensors);
        }
    } else if (w->released < (uint64_t)w->ntensors) {
        return werr(w, PC_ESTATE, "iteration %llu ended with %llu of %d gradients handed over",
                    (unsigned long long)w->iter, (unsigned long long)w->released, w->ntensors);
    }
    w->released = 0;
    int64_t now = pc_time_ns();
    /* The previous iteration's compressor-side counters are complete now: this iteration's
     * forward pass waited (acquire) for every update that followed them. */
    if (w->have_pending)
        emit(w, &w->pending);
    size_t dense = 0;
    for (int t = 0; t < w->ntensors; t++)
        dense += 4 * w->tensors[t].n;
    w->pending = (pc_worker_metrics_t){
        .iteration = (int64_t)w->iter,
        .t_iteration = (double)(now - w->t_start) * 1e-9,
        .t_forward = (double)((w->t_first_ready ? w->t_first_ready : t_end_call) - w->t_start) * 1e-9,
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
    w->iter++;
    bool want_stop = false;
    if (rt->stop_flag) {
        /* Every worker must stop at the same iteration, or servers would wait forever; they
         * agree on the signal too (the largest number raised anywhere). */
        int mine = (int)*rt->stop_flag, any = 0;
        char why[256];
        int rc = PC_MPI_CHECK(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, rt->workers_ctl),
                              why, sizeof(why));
        if (rc != PC_OK)
            return werr(w, rc, "worker r%d: agreeing to stop: %s", rt->rank, why);
        want_stop = any != 0;
        rt->stop_signal = any;
    }
    if (pc_rt__ckpt_on(rt) && (want_stop || (rt->cfg.checkpoint_every > 0 &&
                                             w->iter % (uint64_t)rt->cfg.checkpoint_every == 0))) {
        int rc = worker_checkpoint(w);
        if (rc != PC_OK)
            return rc;
    }
    if (stop)
        *stop = want_stop;
    return PC_OK;
}

int pc_worker_finish(pc_worker_t *w)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    if (!w->started || w->finished)
        return werr(w, PC_ESTATE, "finish before start or twice");
    /* The last iteration's updates. */
    for (int t = 0; t < w->ntensors; t++) {
        int rc = pc_worker_param_wait(w, t);
        if (rc != PC_OK)
            return rc;
    }
    /* The final state, unless this boundary is already checkpointed. */
    if (pc_rt__ckpt_on(rt) && w->iter > 0 && !(w->have_ckpt && w->last_ckpt == w->iter)) {
        int rc = worker_checkpoint(w);
        if (rc != PC_OK)
            return rc;
    }
    w->finished = true;
    int rc = PC_OK;
    if (w->pipelined) {
        desc_t d = {.kind = D_STOP};
        pc_spsc_push_wait(w->q_ready, &d, -1, NULL);
        pthread_join(w->thread, NULL);
        w->thread_started = false;
        rc = check_thread(w);
    } else if (!w->allreduce) {
        rc = send_done(w);
    }
    if (rc != PC_OK)
        return rc;
    for (int c = 0; c < w->nchunks; c++)
        if ((rc = PC_MPI_CHECK(MPI_Wait(&w->sends[c], MPI_STATUS_IGNORE), why, sizeof(why))))
            return werr(w, rc, "worker r%d: %s", rt->rank, why);
    if (w->have_pending) {
        emit(w, &w->pending);
        w->have_pending = false;
    }
    rc = pc_rt__metrics_write(rt, why, sizeof(why));
    if (rc != PC_OK)
        return werr(w, rc, "%s", why);
    return PC_OK;
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

void pc_worker_destroy(pc_worker_t *w)
{
    if (!w)
        return;
    if (w->thread_started) {
        /* Abnormal end: the thread may be blocked in MPI; detach rather than hang. */
        pthread_detach(w->thread);
        return; /* its memory stays for the thread; the process is about to exit */
    }
    for (int c = 0; c < w->nchunks; c++) {
        wchunk_t *k = &w->chunks[c];
        pc_codec_state_destroy(k->st);
        free(k->sendbuf);
        free(k->recvbuf);
        free(k->sum);
        free(k->mom);
    }
    free(w->chunks);
    free(w->sends);
    free(w->recvs);
    free(w->done_idx);
    free(w->statuses);
    free(w->ready_list);
    free(w->queued);
    free(w->tensor_pending);
    pc_plan_destroy(w->plan);
    pc_codec_destroy(w->codec);
    pc_codec_destroy(w->codec_dense);
    pc_spsc_destroy(w->q_ready);
    pc_spsc_destroy(w->q_back);
    free(w->tensors);
    free(w);
}
