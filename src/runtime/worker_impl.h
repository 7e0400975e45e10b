/* worker_impl.h: the worker object, shared by the files of the worker (private to the
 * library), top to bottom in the order they call each other (scripts/lint/layers.txt's
 * worker lines, which scripts/lint/check-calls.py enforces; doc/design.md, "The worker's
 * files"):
 *   worker_start.c       create, register, start (named steps, one cleanup path), destroy;
 *                        what differs between the modes at start
 *   pc_worker.c          the pipeline: grad_ready -> q_ready -> compressor thread -> send;
 *                        updates -> param_wait; the iteration's end; finish; the
 *                        parameter-server mode's ops
 *   worker_lowrank.c     powersgd's rounds on a matrix chunk, no MPI: round 1's P_w when
 *                        the chunk's turn comes, round 2's Q_w when P^ arrives (pc_worker.c
 *                        settles round 1's send before and posts Q_w after: ps_round2), the
 *                        update with Q on the parameters
 *   worker_ckpt.c        checkpoint and resume of the worker's chunk states
 *   worker_allreduce.c   the --mode allreduce ops (a dense allreduce per chunk, local SGD)
 *   worker_metrics.c     an iteration's metrics, the breakdown, the workers' collectives
 *   worker_device.c      device tensors: mirrors, streams, copies
 *
 * Threads and errors. The backprop thread (the caller of every pc_worker_* function) and,
 * with --pipeline on, the worker's compressor threads (--compressors N, a pool: each owns
 * a lane of chunks, wthread_t) touch a worker. Each has a context of its own (wthread_t:
 * its error message, its timeline track, its lane); every function that may run on either
 * kind of thread takes the caller's context as an argument and reports errors into it.
 * The function never asks which thread it runs on: with --pipeline off the backprop thread
 * passes w->main (whose lane is every chunk), compressor thread k always passes
 * &w->comp[k]. The backprop thread learns of a compressor failure through that thread's
 * rc and copies its err into w->main.err (pc_rt__w_check_thread), so pc_worker_error
 * always reads w->main.err. */
#ifndef PC_WORKER_IMPL_H
#define PC_WORKER_IMPL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pipecompress/pc_devcodec.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_event.h"
#include "pipecompress/pc_gpu.h"
#include "pipecompress/pc_plan.h"
#include "pipecompress/pc_spsc.h"
#include "runtime_impl.h"

#pragma GCC visibility push(hidden)

/* Metrics ring: an iteration's compressor-side counters are complete one iteration later;
 * four slots leave room for a future bounded-staleness window. */
#define RING 4
/* The MPI thread's longest nap while it awaits updates: the next forward pass waits on
 * them, so wake-up latency is iteration time. Pipelined, the compressor thread parks on
 * ev_comp for at most this long then (MPI has no wake-up to give; a grad_ready still
 * wakes it at once). */
#define POLL_SLEEP_NS 50000
/* The gradient bytes a worker keeps in flight to one server, in chunks of --chunk-bytes:
 * two, so that one crosses the link while the next is compressed and posted. With every
 * chunk posted at once the link is shared by all of them and each completes near the end
 * of the whole transfer: the server could aggregate, and send back, nothing earlier
 * (measured: wide over 1 Gbit/s links, 2 workers, no compression, pushes and pulls took
 * 4.8 s one after the other instead of 2.4 s overlapped; doc/results/README.md,
 * "Per-node links"). */
#define SEND_WINDOW_CHUNKS 2
/* A parked thread's longest park when nothing it can poll is outstanding: every wake-up
 * it needs is notified (descriptors, stop, abort; releases, versions, queue space, the
 * compressor's exit), so this is only a re-check, ten a second, that costs nothing. */
#define IDLE_PARK_NS 100000000
/* How long the compressor thread keeps polling after its last piece of work before it
 * parks, when its core is its own (pc_topo_plan_shared false, bound): gradients of one
 * backward pass arrive within a millisecond of each other, and a parked thread takes
 * ~25-30 us to wake on a VM (pc-bench handoff: p50 27 us parked, 0.1 us with this window;
 * idle CPU 0.08 % either way, since the window ends 1 ms after the last work). On a core
 * shared with other threads the window is 0: spinning there steals the time of the
 * thread that would hand over the work. */
#define SPIN_WINDOW_NS 1000000
#define NAME_LEN       64
/* An error message: long enough for a path plus an MPI error string. */
#define WERR_LEN 512

enum { D_READY = 1, D_STOP = 2 };

/* "Tensor t, elements [begin, end), of iteration i is ready" (or stop), handed over at
 * t_ready (pc_time_ns of the grad_ready call: a chunk's "handed over" time); its gradient
 * is at grad (pc_worker_grad_ready_view's view of the whole tensor; NULL: the registered
 * buffer), not to be read before not_before (pc_time_ns; 0: at once). */
typedef struct desc {
    uint32_t kind;
    int32_t tensor;
    uint64_t iteration;
    uint64_t begin, end;
    int64_t t_ready;
    const float *grad;
    int64_t not_before;
} desc_t;
/* Descriptors travel through q_ready as raw slots: 56 bytes, no padding. */
_Static_assert(sizeof(desc_t) == 56, "desc_t is a 56-byte SPSC slot");

/* "You may overwrite tensor t's gradient buffer" (of iteration i). */
typedef struct rel {
    int32_t tensor;
    uint32_t pad;
    uint64_t iteration;
} rel_t;
_Static_assert(sizeof(rel_t) == 16, "rel_t is a 16-byte SPSC slot");

typedef struct wtensor {
    char name[NAME_LEN];
    float *p, *g;          /* the caller's buffers (n floats each); device tensors: p is the
                              parameters' host mirror while started (worker_device.c), g is
                              NULL (chunks that copy gradients have mirrors of their own) */
    float *dp, *dg;        /* device tensors: the caller's device buffers; NULL for host tensors */
    pc_gpu_event_t *ready; /* device tensors: recorded on the caller's stream by grad_ready
                              (backprop thread), waited for by the MPI thread before it reads
                              the gradient; the next record follows the release of this
                              iteration's gradient (iteration_end waits for it) */
    size_t n;
    size_t rows; /* pc_worker_set_rows: a matrix's first dimension; 0: not a matrix */
    int first_chunk, last_chunk;
    int first_lane, last_lane; /* the lanes of its chunks (wthread_t): owners of it */
    /* (Its latest descriptor's gradient view and not_before are per lane: wthread_t.) */
} wtensor_t;

/* Breakdown: how many iterations of metrics a worker keeps for pc_worker_breakdown (its
 * largest window): twenty seconds of printing at one iteration per 10 ms would need more,
 * but a median over 64 iterations is already steady, and the gather moves W * 64 rows. */
#define BD_RING 64
/* Figures per iteration that pc_worker_breakdown gathers (worker_metrics.c lists them). */
#define BD_FIELDS 13

/* One chunk's lifecycle in one iteration: pc_time_ns on this host (0: not reached), except
 * server_ns, a duration on the server's clock (hosts need no common clock). Written by the
 * MPI thread (plain stores) before its release store of the chunk's version; read by the
 * backprop thread only after its acquire load of version >= it + 1, which orders the
 * writes before the read. Two slots by iteration parity: the MPI thread writes iteration
 * it + 1's slot while the backprop thread may still read iteration it's. */
typedef struct ctimes {
    int64_t handed;    /* the grad_ready that completed the chunk was called */
    int64_t fold0;     /* fold start (allreduce: the allreduce's start) */
    int64_t fold1;     /* fold end */
    int64_t comp1;     /* compress end */
    int64_t sent;      /* MPI_Isend posted (allreduce: = handed, no compression) */
    int64_t update_in; /* update received and applied, just before the version store */
    int64_t server_ns; /* the server's time on the chunk (allreduce: the local step) */
} ctimes_t;

typedef struct wchunk {
    uint32_t id;
    int lane; /* the lane (wthread_t) that owns it: set at start */
    int server;
    int first_tensor, last_tensor;
    size_t offset, n;
    float *p, *g;         /* into the first tensor's buffers (device tensors: p into its
                             mirror, g the chunk's own gradient mirror or NULL) */
    const float *gin;     /* this iteration's gradient as the fold reads it: g, or the
                             tensor's view (pc_worker_grad_ready_view), or a grouped chunk's
                             views gathered into w->gather (MPI thread, set before fold) */
    pc_codec_t *codec;    /* ps: the run's codec, or "none" for a small chunk (not owned) */
    pc_codec_state_t *st; /* ps: error-feedback state; NULL in allreduce mode */
    size_t remaining;     /* elements not yet handed over this iteration (MPI thread) */
    uint8_t *sendbuf;
    size_t send_cap;
    size_t send_len; /* ps: bytes of the send posted last (MPI thread) */
    uint8_t *recvbuf;
    size_t recv_cap;
    uint64_t recv_it;     /* iteration of the posted update receive */
    uint64_t fold_it;     /* iteration of the folded, not yet compressed gradient */
    float *sum;           /* allreduce mode */
    pc_optim_state_t opt; /* the optimizer's state where this worker steps: allreduce, every
                             chunk's; ps, a powersgd matrix's (its server's, kept alike), and
                             with --update workers every chunk's (unless the step is the
                             user's: pc_worker_set_user_step); pc_optim_state_alloc's arrays,
                             else all NULL */
    float *mean;          /* ps, --update workers, the runtime's step: the mean gradient the
                             server pushed, which the step reads (n floats; the MPI thread's).
                             With the user's step it goes into g instead: NULL */
    bool params_here;     /* ps, --update workers: no server keeps the parameters, so the
                             chunk's checkpoint record does (set at start) */
    ctimes_t tm[2];       /* lifecycle of iteration it in tm[it & 1] (ctimes_t) */
    /* Device tensors (worker_device.c; MPI thread, except where said): */
    float *dp, *dg;           /* into the first tensor's device buffers */
    pc_devcodec_state_t *dst; /* --compress-on gpu, a compressing chunk: its state on the
                                 device (then st is only its checkpoint copy) */
    bool send_pinned;         /* sendbuf is page-locked (pc_gpu_host_alloc) */
    pc_gpu_event_t *down;     /* the gradient's copy to g (the host mirror) is done */
    pc_gpu_event_t *up;       /* the parameters' copy from p to dp is done: recorded by the
                                 MPI thread before its version store, waited for on the
                                 caller's stream by param_wait after its version load */
    _Atomic uint64_t version; /* updates applied: stored (release) by the MPI thread after
                                 writing the parameters, loaded (acquire) by param_wait */
    /* ps, a powersgd matrix (worker_lowrank.c; MPI thread): */
    size_t rows;   /* the plan's: a whole matrix's rows, else 0 */
    bool lowrank;  /* pc_rt__chunk_lowrank: st is a matrix state */
    int lr_round;  /* the round whose answer the posted receive awaits: 1 (P^), 2 (the
                      update with Q); 0 between iterations and in the warm-up */
    float *lr_q;   /* cols x rank: the update's Q, before pc_codec_lowrank_finish takes it */
    float *lr_row; /* cols: one row of the warm-up's mean gradient, or of P^ Q^T clipped */
    pc_optim_cfg_t lr_optim; /* the matrix's step: its server's rule (the run's, or with
                                parameter groups its group's; set at start) */
} wchunk_t;

typedef struct pc_worker pc_worker_t;

/* One thread's context: where its errors go and which timeline track it records on; and,
 * for an MPI thread (a compressor thread of the pool, or the backprop thread with
 * --pipeline off), its lane: the chunks it owns and everything it keeps for them.
 *
 * The pool (--compressors N, pipelined). Chunks are dealt to N lanes once at start, in
 * chunk order, balancing work (pc_codec_work; deal_lanes in worker_start.c): chunk i,
 * whose work is [S_i, S_i + w_i) of the worker's W, goes to lane floor(N (2 S_i + w_i) /
 * 2W) (its midpoint's share; capped at N - 1), so a lane's chunks are a contiguous range [lo, hi)
 * (possibly empty). A lane owns its chunks' codec states (error-feedback residuals), buffers and
 * MPI requests, its own codec objects (scratch: one thread at a time per codec, pc_codec.h) and
 * queues: no chunk is touched by two compressor threads. Each lane has its own q_ready
 * (descriptors, the backprop thread the single producer, this lane's thread the single consumer)
 * and q_back (releases, this lane's thread the single producer, the backprop thread the single
 * consumer): SPSC holds because the backprop thread is the only thread that pushes into
 * any q_ready and pops from any q_back, and each lane's thread is the only one that pops
 * its q_ready and pushes its q_back. A tensor whose chunks span lanes [first_lane,
 * last_lane] gets its descriptor in the q_ready of each of those lanes that owns chunks (a
 * lane between two may be empty: chunks bigger than a share), and its gradient buffer
 * goes back once each of them released it (pc_worker.c's owners). */
typedef struct wthread {
    char err[WERR_LEN];
    int track; /* TRACK_MAIN, or TRACK_COMPRESSOR + index */
    /* ---- the lane (MPI threads): set at start (backprop thread), then the lane's thread's */
    pc_worker_t *w;
    int index;           /* 0..N-1: its placement slot is 1 + index (thread 0: backprop) */
    int lo, hi;          /* its chunks [lo, hi) */
    rt_queue_t queue;    /* its folded chunks awaiting compression (--priority order) */
    size_t *inflight;    /* per server: its gradient bytes in flight (the send window) */
    int *tensor_pending; /* per tensor: its chunks of it not yet folded this iteration */
    float *gather;       /* chunk_input's copy of a grouped chunk's views (gather_cap floats) */
    const float **view;  /* per tensor: the gradient view of its latest descriptor (NULL: g) */
    int64_t *not_before; /* per tensor: its latest descriptor's not_before (0: none) */
    size_t gather_cap;
    pc_codec_t *codec, *codec_dense; /* its codecs: lane 0's are w->codec and w->codec_dense
                                        (not owned), the others' its own */
    /* ---- pipelined: shared with the backprop thread */
    pc_spsc_t *q_ready, *q_back; /* descriptors down, releases back (SPSC: above) */
    pc_event_t *ev;              /* it parks on it; notified after a push into q_ready (a
                                    descriptor or stop) and after the abort store */
    _Atomic int rc;              /* its error: stored (release) after writing err, loaded
                                    (acquire) by pc_rt__w_check_thread and main_test */
    /* Its share of w->comp_ns: the ns this thread spent folding and compressing iteration
     * i's chunks, in slot i % RING; it adds (relaxed), the backprop thread takes them with
     * comp_ns (after a version acquire: worker_metrics.c's take_ring), whose maximum over the
     * threads is t_compress_busy. */
    _Atomic uint64_t busy_ns[RING];
    pthread_t thread;
    bool started; /* between pthread_create and pthread_join (backprop thread's) */
} wthread_t;

/* What the pipeline does differently in the parameter-server mode (pc_worker.c) and in
 * --mode allreduce (worker_allreduce.c). Every function runs on the MPI thread (the
 * compressor thread, or the backprop thread with --pipeline off) and reports errors into
 * me. A completed chunk goes through fold, then the pipeline releases the gradient
 * buffers of the tensors it completes (pc_worker.c), then through step: the mode's code
 * never calls back into the pipeline. The start-up differences (a chunk's buffers, the
 * initial parameters) are worker_start.c's, chosen by servers. */
typedef struct worker_ops {
    const char *name; /* "ps" or "allreduce" (metrics) */
    bool servers;     /* whether chunks travel to server ranks */
    /* Chunk c of iteration it is completely handed over: take what it needs of its
     * gradient (ps: fold it into the error-feedback state; allreduce: the sum over the
     * workers), after which the gradient buffers may be released. */
    int (*fold)(pc_worker_t *w, wchunk_t *c, uint64_t it, wthread_t *me);
    /* After the release: ps queues the chunk for compression (by --priority); allreduce
     * steps the optimizer and publishes the chunk's version. */
    int (*step)(pc_worker_t *w, wchunk_t *c, uint64_t it, wthread_t *me);
    /* Send the next chunk waiting to be sent (by --priority); *did says whether there was one. */
    int (*send_one)(pc_worker_t *w, bool *did, wthread_t *me);
    /* Apply the updates that have arrived; *got counts them. */
    int (*progress)(pc_worker_t *w, int *got, wthread_t *me);
    /* After the last iteration: tell the servers this worker is done. */
    int (*done)(pc_worker_t *w, wthread_t *me);
    /* The chunk's arrays saved in checkpoints, up to CKPT_ARRAYS: arr[i] of len[i] floats,
     * NULL when absent. */
    void (*ckpt_arrays)(wchunk_t *c, float *arr[CKPT_ARRAYS], size_t len[CKPT_ARRAYS]);
} worker_ops_t;

extern const worker_ops_t pc_rt__worker_ps; /* pc_worker.c; allreduce's is declared below */

/* The worker, its fields grouped by the thread that owns them. "MPI thread": the
 * compressor thread, or the backprop thread with --pipeline off. */
struct pc_worker {
    /* ---- set before start (backprop thread), read-only while started (both threads) */
    pc_runtime_t *rt;
    const worker_ops_t *ops;
    wtensor_t *tensors;
    int ntensors, tcap;
    pc_plan_t *plan;
    wchunk_t *chunks; /* each chunk's fields: wchunk_t says who owns which */
    int nchunks;
    pc_codec_t *codec;       /* --compress */
    pc_codec_t *codec_dense; /* "none", for chunks under --compress-min-bytes */
    bool pipelined;
    /* Device tensors (--device cuda|emulate; worker_device.c). */
    bool device;             /* the tensors were registered with pc_worker_register_device */
    pc_gpu_stream_t user;    /* the caller's stream (pc_worker_set_stream) */
    bool user_set;           /* pc_worker_set_stream was called */
    float *mirror;           /* the host mirrors: parameters, then gradients (pinned) */
    pc_devcodec_t *dcodec;   /* --compress-on gpu: --compress on the device (MPI thread uses) */
    pc_gpu_stream_t s_down;  /* gradient copies to the host mirrors (MPI thread uses) */
    pc_gpu_stream_t s_up;    /* parameter copies to the device (MPI thread uses) */
    pc_gpu_stream_t s_codec; /* --compress-on gpu: the device codec, low priority (MPI thread) */
    /* pc_worker_set_device_step: --mode allreduce's optimizer step is held as device time
     * (device_step_ns per iteration, split over the chunks by elements) instead of run. */
    bool device_step;
    int64_t device_step_ns;
    size_t total_n; /* every tensor's elements (the split's denominator; set at start) */
    /* --update workers (ps): the servers push the mean gradient and this worker steps
     * (update_workers); with user_step (pc_worker_set_user_step) it does not step, but
     * writes the mean gradient into the tensors' gradient buffers for the caller's own
     * optimizer (pc_worker_grad_wait). */
    bool update_workers;
    bool user_step;
    /* pc_worker_set_update chose the placement (not the flags): worker 0 tells the servers
     * at start (TAG_UPDATE), and every worker's choice is compared (check_same_model). */
    bool update_set;
    /* pc_worker_warm_codec gave the codec its default warm-up (not the flags): worker 0
     * tells the servers at start (TAG_WARMUP), first of all. */
    bool warm_set;

    /* ---- shared between the threads: the lanes, the wake-ups, the atomics */
    /* The pool: ncomp compressor threads (--compressors; pipelined, else none), each with
     * its lane, its queues and its wake-up (wthread_t says who owns what). Each one's
     * context is written by it and read by the backprop thread after its rc's acquire. */
    wthread_t *comp;
    int ncomp;
    /* ev_main: the backprop thread parks on it (pc_event; the condition is always in the
     * queues or atomics, the event only ends a park); notified by a compressor thread after
     * it pops descriptors (queue space), hands a descriptor to the mode (allreduce publishes
     * versions there), pushes a release, stores a chunk's version, and stores its rc on
     * exit. Any number of notifiers (pc_event_notify is thread-safe). */
    pc_event_t *ev_main;
    _Atomic bool abort; /* destroy before finish: stored (release) by pc_worker_destroy,
                           loaded (acquire) by every compressor thread, which then returns
                           at once */
    /* metrics: MPI threads add (relaxed), backprop thread takes (after a version acquire);
     * comp_ns is every thread's compression summed (the pool's CPU time), each thread's
     * own share in its wthread_t's busy_ns */
    _Atomic uint64_t comp_ns[RING], sent_bytes[RING], recv_bytes[RING];

    /* ---- the MPI thread's */
    MPI_Request *sends, *recvs; /* per chunk; MPI_REQUEST_NULL when none is pending */
    /* ps: per server, the bytes of gradient sends posted and not yet seen complete; with
     * the pipeline a chunk is sent only while its server's is under the send window
     * (SEND_WINDOW_CHUNKS x --chunk-bytes; one send at least), so that the chunks the next
     * forward needs first cross the link first instead of sharing it with every other. */
    /* (inflight: per lane, wthread_t.) Per chunk, each lane using the slots of its
     * chunks [lo, hi) only: */
    MPI_Status *statuses;
    int *done_idx;
    int *ready_list;
    /* (The queue of folded chunks awaiting compression, in --priority order, and the
     * gather buffer of a grouped chunk's views: per lane, wthread_t.) */
    int64_t step_deadline; /* device_step: the end of the last hold (pc_time_ns) */

    /* ---- the backprop thread's */
    wthread_t main;  /* its context; pc_worker_error reads main.err */
    bool err_agreed; /* main.err is every worker's (pc_worker_error_agreed) */
    bool started, finished;
    bool handed;            /* a gradient was handed over since start (set_user_step's check) */
    bool resumed_user_step; /* --resume read a checkpoint of the user's step: the caller must
                               switch to it (pc_worker_set_user_step) before handing over */
    uint64_t iter;
    /* this iteration's waits (ns; the breakdown of pc_runtime.h) */
    int64_t t_start, t_first_ready;
    int64_t wait_release, wait_backpressure, wait_compress, wait_network, wait_server;
    int64_t compress_inline;
    double loss, accuracy; /* reported for the current iteration */
    /* pc_worker_set_optimizer (before start): the optimizer's parameter groups (ngroups 0:
     * none, the run's own rule and schedule); groups[g] the rule of group g (kind
     * included), tensor_group[t] tensor t's group, for the groups_ntensors tensors
     * registered then. lrs_sent: pc_worker_set_lrs ran in this iteration. */
    uint32_t ngroups;
    pc_optim_cfg_t *groups;
    int *tensor_group;
    int groups_ntensors;
    bool lrs_sent;
    /* Clipping by the global norm with parameter groups (pc_worker_clip_grad_norm): the
     * iterations that may clip are the run's first (clip_first: the resume iteration) and
     * every one after an iteration that clipped (clip_on, which never goes back): the
     * servers hold their chunks of those until every worker's TAG_CLIP is in. clip_sent:
     * this iteration's TAG_CLIP left (iteration_end sends one with 0 otherwise). */
    uint64_t clip_first;
    bool clip_on, clip_sent;
    uint32_t hwm;
    uint64_t released;
    uint8_t *rel_seen; /* per tensor: releases seen in this iteration, of its owners (its
                          lanes); released counts the tensors with all of them */
    rel_t bad_rel;     /* --pipeline off: the first release that was not expected */
    bool have_bad_rel;
    pc_worker_metrics_t pending; /* the previous iteration, compressor side still open */
    bool have_pending;
    pc_worker_metrics_t last;
    bool have_last;
    pc_worker_metrics_t hist[BD_RING]; /* the last complete iterations, hist[i % BD_RING] */
    uint64_t nhist;                    /* complete iterations recorded in hist */
    double *bd_send, *bd_all;          /* pc_worker_breakdown's gather buffers (start) */
    uint64_t last_ckpt;                /* iteration of the newest checkpoint written (have_ckpt) */
    bool have_ckpt;
};

/* A worker's error: write the message into the calling thread's context (me->err), after
 * the prefix every worker message carries ("worker r3: ", from rt's rank), and return code:
 * WFAIL(rt, me, code, fmt, ...). The one way the worker's files report an error;
 * pc_rt__w_fail is the one place that spells the prefix. */
#define WFAIL(rt, me, code, ...)                                                                   \
    pc_rt__w_fail((rt), (me)->err, sizeof((me)->err), (code), __VA_ARGS__)

/* WFAIL's body. Here, not in pc_worker.c: every worker file reports errors, and one in
 * pc_worker.c would be a call from the files below it back up, which check-calls.py cannot
 * see through the macro. Any thread, on its own err. */
static inline int pc_rt__w_fail(const pc_runtime_t *rt, char *err, size_t errlen, int code,
                                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static inline int pc_rt__w_fail(const pc_runtime_t *rt, char *err, size_t errlen, int code,
                                const char *fmt, ...)
{
    char msg[WERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return pc_error_fmt(code, err, errlen, "worker r%d: %s", rt->rank, msg);
}

/* The backprop thread's view of a compressor failure: PC_OK, or the failed thread's code
 * (the lowest index's, if several failed) with its message copied into w->main.err.
 * Backprop thread. Acquire: pairs with each compressor thread's release store of its rc
 * after writing its err. */
static inline int pc_rt__w_check_thread(pc_worker_t *w)
{
    for (int k = 0; k < w->ncomp; k++) {
        int rc = atomic_load_explicit(&w->comp[k].rc, memory_order_acquire);
        if (rc != PC_OK) /* err is a WFAIL message already: copied, not prefixed again */
            return pc_error_fmt(rc, w->main.err, sizeof(w->main.err), "%s", w->comp[k].err);
    }
    return PC_OK;
}

/* The prototypes below are grouped by file in the worker's order, top to bottom
 * (scripts/lint/layers.txt): a file calls only the files after it
 * (scripts/lint/check-calls.py). worker_start.c calls down into all of them. */

/* ---- pc_worker.c: the pipeline ---------------------------------------------------- */

/* A compressor thread's body (pthread_create's start routine; arg is its context, a
 * wthread_t of w->comp). */
void *pc_rt__w_compressor_main(void *arg);

/* Stop the compressor threads (those running) and join every one; abort: without draining
 * (destroy), otherwise after their last updates (finish, which then sends the servers'
 * end message). Backprop thread. Returns the threads' result (pc_rt__w_check_thread). */
int pc_rt__w_stop_thread(pc_worker_t *w, bool abort);

/* After the compressor thread is gone (or never ran), before the buffers are freed:
 * cancel the posted update receives and complete the gradient sends, all the sends within
 * one --timeout; a send that does not complete in time is freed with MPI_Request_free and
 * its buffer left allocated (MPI may still read it), with a warning in the log; so is the
 * buffer of a receive whose cancel or wait fails (MPI may still write it). Backprop
 * thread, from pc_worker_destroy. */
void pc_rt__w_abort_requests(pc_worker_t *w);

/* ---- worker_lowrank.c: powersgd's rounds on the worker ------------------------------- */

/* Chunk c (c->lowrank) of iteration it is folded and due: its first message into
 * c->sendbuf (*len): the warm-up's dense M, or round 1's P_w (then c->lr_round = 1). The
 * codec's codes. MPI thread, from ps_send_one. */
int pc_rt__w_lr_first(pc_worker_t *w, wchunk_t *c, uint64_t it, size_t *len);

/* Round 2 of chunk c: its P^ has arrived (len bytes in c->recvbuf, c->lr_round 1) and its
 * round 1 send has settled (the caller's: c->sendbuf is free). Count P^'s bytes in the
 * iteration's, validate it, and make round 2's message, Q_w = M^T P^, in c->sendbuf (*out
 * bytes), which the caller sends; then c->lr_round 2 (on error it stays 1, the worker has
 * failed). No MPI. MPI thread, from pc_worker.c's ps_round2. */
int pc_rt__w_lr_round2(pc_worker_t *w, wchunk_t *c, size_t len, size_t *out, wthread_t *me);

/* Chunk c's update has arrived (c->lr_round 2: Q; 0: the warm-up's mean gradient):
 * validate it whole, then row by row the optimizer's step on the parameters and momentum
 * with P^ Q^T (pc_codec_lowrank_finish, which also sets the residual and keeps Q) or with the
 * mean gradient: the server's arithmetic on its copy, bit for bit. c->lr_round 0.
 * PC_EFORMAT with the reason in why. MPI thread, from ps_progress. */
int pc_rt__w_lr_update(pc_worker_t *w, wchunk_t *c, size_t len, uint64_t *server_ns, char *why,
                       size_t whylen);

/* ---- worker_ckpt.c -------------------------------------------------------------------- */

/* Rank 0 picks the checkpoint to resume from (--resume), creating --checkpoint-dir when it
 * is missing; every worker learns the choice (*it; 0: a fresh start). Collective over the
 * workers; backprop thread. */
int pc_rt__w_choose_resume(pc_worker_t *w, uint64_t *it);

/* Restore this worker's chunk states from its file of checkpoint it. Backprop thread,
 * before the compressor thread starts. */
int pc_rt__w_load(pc_worker_t *w, uint64_t it);

/* Checkpoint at this iteration boundary (w->iter iterations done): tells the servers,
 * writes this worker's file, joins the collective that ends the checkpoint. The caller has
 * drained the pipeline: every chunk holds version w->iter (its last update is in, so no
 * compression is in flight and the version acquire ordered the codec states' writes
 * before this thread's reads) and nothing new is handed over. Backprop thread. */
int pc_rt__w_checkpoint(pc_worker_t *w);

/* ---- worker_allreduce.c ------------------------------------------------------------- */

extern const worker_ops_t pc_rt__worker_allreduce;

/* ---- worker_metrics.c ----------------------------------------------------------------- */

/* The backprop thread waited from start to end (pc_time_ns) in param_wait for chunk c's
 * update of iteration it (w->iter - 1; grad_wait: w->iter), and has acquired it (so c's
 * times of that iteration are readable): split the wait into compression (before the chunk
 * was sent), server (the server's time, at most the rest) and network (the remainder), add
 * each to the iteration's waits and record them on the timeline. Backprop thread. */
void pc_rt__w_account_update_wait(pc_worker_t *w, const wchunk_t *c, uint64_t it, int64_t start,
                                  int64_t end);

/* Record the previous iteration's metrics line if one is pending (its compressor-side
 * counters are complete once every update that followed them was acquired). Backprop
 * thread. */
void pc_rt__w_metrics_flush(pc_worker_t *w);

/* Close iteration w->iter's metrics (t_end_call: when iteration_end was called) and start
 * the next iteration's clocks; the caller then advances w->iter. Backprop thread. */
void pc_rt__w_close_iteration(pc_worker_t *w, int64_t t_end_call);

/* Wait for a nonblocking collective over the workers (*req) without spinning the core
 * away (worker_metrics.c says why): PC_OK (*req freed), or a failure with what was
 * awaited (what) in why, or the compressor thread's failure (its message in w->main.err,
 * why empty). Backprop thread. */
int pc_rt__w_wait_collective(pc_worker_t *w, MPI_Request *req, const char *what, char *why,
                             size_t whylen);

/* ---- worker_device.c: device tensors ------------------------------------------------ */

/* pc_worker_start's device step, after the plan and before the chunks are set up: host
 * mirrors (tensor p and g point into them from here on), streams, the tensors' events, the
 * device codec; the parameters copied into the mirrors. Backprop thread. */
int pc_rt__w_dev_start(pc_worker_t *w);
/* Chunk c's device part (after the mode's ps_chunk_init or ar_chunk_init). Backprop thread, at
 * start. */
int pc_rt__w_dev_chunk_init(pc_worker_t *w, wchunk_t *c);
/* Every tensor's parameters from its mirror to the device, waited for (after the initial
 * parameters are shared, restored or broadcast). Backprop thread, at start. */
int pc_rt__w_dev_params_up(pc_worker_t *w);
/* Free what pc_rt__w_dev_start and pc_rt__w_dev_chunk_init made; device tensors get their
 * NULL mirrors back. Backprop thread (release_started). */
void pc_rt__w_dev_release(pc_worker_t *w);
/* The chunks of list were completely handed over: wait for their tensors' events, then
 * queue the copies of the gradients that are compressed (or reduced) on the host into
 * their chunks' mirrors, each followed by its chunk's `down` event. MPI thread. */
int pc_rt__w_dev_grads_in(pc_worker_t *w, const int *list, int n, wthread_t *me);
/* Worker 0, at debug level, with device tensors: how many chunks the device codec folds and
 * compresses (and how many of them are powersgd matrices). Backprop thread, at start. */
void pc_rt__w_dev_log(const pc_worker_t *w);
/* Whether chunk c is folded and compressed on the device (it has a device state). */
static inline bool pc_rt__w_dev_codec(const wchunk_t *c)
{
    return c->dst != NULL;
}
/* Fold chunk c's gradient into its state: on the device (a device state), or from the
 * host mirror after its copy (c->down) is done. The codec's codes (PC_ERANGE: not
 * finite); another failure's reason in why. MPI thread. */
int pc_rt__w_dev_fold(pc_worker_t *w, wchunk_t *c, char *why, size_t len);
/* Before the MPI thread writes c->p (an update): the previous copy from it is done. */
int pc_rt__w_dev_before_write(pc_worker_t *w, wchunk_t *c, wthread_t *me);
/* After the MPI thread wrote c->p: queue its copy to the device, then record c->up.
 * Before the version store. */
int pc_rt__w_dev_params_out(pc_worker_t *w, wchunk_t *c, wthread_t *me);
/* param_wait, after chunk c's version load: the caller's stream waits for c->up. */
int pc_rt__w_dev_param_wait(pc_worker_t *w, wchunk_t *c);
/* Checkpoints: the device states into their host copies (c->st) before they are written
 * (to_device false), or back onto the device after a restore (true). Backprop thread, no
 * compression in flight. */
int pc_rt__w_dev_states(pc_worker_t *w, bool to_device, wthread_t *me);

#pragma GCC visibility pop

#endif /* PC_WORKER_IMPL_H */
