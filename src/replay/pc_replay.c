/* pc_replay: a GPU trainer's compute held, not run, on the backprop thread (pc_replay.h
 * says what an iteration does and why).
 *
 * Layout: the parameters in one slab and the gradient pool in another (llm.c's one slab
 * per buffer class), each tensor at its offset in forward order; the pool has SLACK more
 * floats so that every view, shifted, stays inside it. Times are int64 nanoseconds, each
 * already multiplied by the dilation K at create, so an iteration does no floating point
 * but the copy's end. */
#include "pipecompress/pc_replay.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_philox.h"
#include "pipecompress/pc_time.h"

/* The pool's floats past the last tensor, and so the range of the per-iteration shift:
 * 2^16 (256 KiB). Enough that fifty iterations draw fifty different shifts (a birthday
 * clash is 2 % likely), small beside any model's gradients. A tensor smaller than it may
 * read its neighbours' values (and their scale) in some iterations: harmless to the codecs,
 * which see the same distribution. */
#define SLACK 65536u

/* The gradients' magnitude: Laplace(0, b) with b = SCALE / sqrt(fan_in), fan_in the
 * tensor's columns (elements / rows; a vector's own length): the 1/sqrt(fan_in) of common
 * initialisations, so that wide layers get smaller gradients, as they do in a real network.
 * SCALE sets the level (a gradient's typical element is about 1e-3 to 1e-4). */
#define SCALE 0.01f

/* Holds' overshoots kept for the percentiles: at most this many (then no more are kept;
 * 16 M is 64 MiB, some 40 000 iterations of BERT-base). */
#define MAX_SAMPLES (1u << 24)

typedef struct rtensor {
    int id;       /* the worker's tensor id */
    size_t off;   /* offset in the slabs (floats) */
    size_t n;     /* elements */
    size_t rows;  /* as a matrix (pc_trace_param_rows: 0 for a vector) */
    int64_t copy; /* its copy to the host, ns (x K) */
    char name[64];
} rtensor_t;

typedef struct rlayer {
    int64_t fwd, bwd; /* ns (x K) */
    int first, count; /* its tensors: tensors[first .. first + count) */
    char name[48];    /* as the trace has it, cut for the timeline's event names */
} rlayer_t;

struct pc_replay {
    pc_worker_t *w;
    uint64_t seed;
    int rank;
    int nlayers, ntensors;
    rlayer_t *layers;
    rtensor_t *tensors;
    float *params; /* total floats */
    float *pool;   /* total + SLACK floats */
    double trace_ms, optimizer_ms, copy_ms;
    bool optimizer_from_trace;
    int64_t deadline;    /* the last hold's deadline (pc_time_ns) */
    int64_t lag;         /* how far behind the schedule the last hold ended (ns, >= 0) */
    int64_t engine_free; /* when the copy engine has done its last copy */
    /* Measurements: every iteration's wall time (ns), every hold's overshoot (ns). */
    int64_t *iter_ns;
    size_t niter, iter_cap;
    int32_t *over_ns;
    size_t nover, over_cap;
};

/* Append v to a growing array (*a, *n, *cap), at most max elements; false when out of
 * memory or full (the sample is dropped: the figures cover what was kept). */
static bool push64(int64_t **a, size_t *n, size_t *cap, int64_t v)
{
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 1024;
        int64_t *b = realloc(*a, nc * sizeof(**a));
        if (!b)
            return false;
        *a = b;
        *cap = nc;
    }
    (*a)[(*n)++] = v;
    return true;
}

static bool push32(int32_t **a, size_t *n, size_t *cap, int32_t v)
{
    if (*n == *cap) {
        if (*cap >= MAX_SAMPLES)
            return false;
        size_t nc = *cap ? 2 * *cap : 4096;
        int32_t *b = realloc(*a, nc * sizeof(**a));
        if (!b)
            return false;
        *a = b;
        *cap = nc;
    }
    (*a)[(*n)++] = v;
    return true;
}

/* Milliseconds times K as nanoseconds (ms <= 3.6e6 and K <= 1000 by the trace's and the
 * config's bounds: at most 3.6e15 ns). */
static int64_t ms_to_ns(double ms, double k)
{
    return (int64_t)llround(ms * k * 1e6);
}

/* Fill the pool: tensor t's floats (and, past the last tensor, the slack with the last
 * one's scale) Laplace(0, b_t), drawn from Philox stream (seed, rank). */
static void fill_pool(pc_replay_t *r)
{
    pc_philox_t g;
    /* Subsequence: the rank in the high half, a tag in the low half, so that this stream
     * is none of the codecs' ((iteration << 32) | chunk with small iterations). */
    pc_philox_init(&g, r->seed, ((uint64_t)(uint32_t)r->rank << 32) | 0x52504c59u, 0);
    const rtensor_t *last = &r->tensors[r->ntensors - 1];
    size_t end = last->off + last->n + SLACK;
    int t = 0;
    float b = 0;
    for (size_t i = 0; i < end; i++) {
        while (t < r->ntensors && i == r->tensors[t].off) { /* the next tensor's scale */
            const rtensor_t *T = &r->tensors[t++];
            size_t fan_in = T->rows ? T->n / T->rows : T->n;
            b = SCALE / sqrtf((float)fan_in);
        }
        /* Laplace by inversion: |x| = -b ln(u), u in (0, 1]; the sign from another bit. */
        uint32_t x = pc_philox_next(&g);
        float u = ((float)(x >> 8) + 1.0f) * (1.0f / 16777216.0f);
        float v = -b * logf(u);
        r->pool[i] = (x & 1) ? -v : v;
    }
}

/* The tensors and layers from the trace, with their times x K; the slabs allocated. */
static int build(pc_replay_t *r, const pc_trace_t *tr, double k, double gbps, char *err,
                 size_t errlen)
{
    r->nlayers = pc_trace_nlayers(tr);
    for (int l = 0; l < r->nlayers; l++)
        r->ntensors += pc_trace_nparams(tr, l);
    r->layers = calloc((size_t)r->nlayers, sizeof(rlayer_t));
    r->tensors = calloc((size_t)r->ntensors, sizeof(rtensor_t));
    size_t total = pc_trace_total_params(tr);
    r->params = calloc(total, sizeof(float));
    r->pool = malloc((total + SLACK) * sizeof(float));
    if (!r->layers || !r->tensors || !r->params || !r->pool)
        return pc_error_fmt(PC_ENOMEM, err, errlen,
                            "out of memory for %zu parameters and their gradients (%.1f GB)", total,
                            (double)(2 * total + SLACK) * 4e-9);
    size_t off = 0;
    int t = 0;
    for (int l = 0; l < r->nlayers; l++) {
        rlayer_t *L = &r->layers[l];
        L->fwd = ms_to_ns(pc_trace_forward_ms(tr, l), k);
        L->bwd = ms_to_ns(pc_trace_backward_ms(tr, l), k);
        L->first = t;
        L->count = pc_trace_nparams(tr, l);
        snprintf(L->name, sizeof(L->name), "%s", pc_trace_layer_name(tr, l));
        for (int j = 0; j < L->count; j++, t++) {
            rtensor_t *T = &r->tensors[t];
            T->off = off;
            T->n = pc_trace_param_numel(tr, l, j);
            T->rows = pc_trace_param_rows(tr, l, j);
            /* bytes / (gbps x 1e9 bytes/s) seconds = bytes / gbps ns, times K */
            T->copy = (int64_t)llround((double)T->n * 4.0 / gbps * k);
            r->copy_ms += (double)T->copy * 1e-6;
            snprintf(T->name, sizeof(T->name), "%s.%d", pc_trace_layer_name(tr, l), j);
            off += T->n;
        }
    }
    return PC_OK;
}

int pc_replay_create(const pc_trace_t *tr, pc_worker_t *w, const pc_replay_opts_t *o,
                     pc_replay_t **out, char *err, size_t errlen)
{
    if (!tr || !w || !o || !out)
        return pc_error_fmt(PC_EINVAL, err, errlen, "pc_replay_create: a NULL argument");
    if (!(o->dilate >= 1 && o->dilate <= 1000))
        return pc_error_fmt(PC_EINVAL, err, errlen, "dilation %g: not in 1..1000", o->dilate);
    double gbps = o->pcie_gbps == 0 ? PC_REPLAY_PCIE_GBPS : o->pcie_gbps;
    if (!(gbps > 0 && gbps < 1e6))
        return pc_error_fmt(PC_EINVAL, err, errlen, "host copy rate %g GB/s: not in (0, 1e6)",
                            o->pcie_gbps);
    pc_replay_t *r = calloc(1, sizeof(*r));
    if (!r)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    /* The calling (backprop) thread's timer slack: 1 ns instead of Linux's 50 us, which
     * would make every hold wake that much late (the holds' deadlines are the point). */
    if (prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL) != 0) {
        free(r);
        return pc_error_fmt(PC_EINVAL, err, errlen, "prctl(PR_SET_TIMERSLACK): %s",
                            strerror(errno));
    }
    r->w = w;
    r->seed = o->seed;
    r->rank = o->rank;
    r->trace_ms = pc_trace_compute_ms(tr) * o->dilate;
    int rc = build(r, tr, o->dilate, gbps, err, errlen);
    if (rc == PC_OK)
        fill_pool(r);
    for (int t = 0; rc == PC_OK && t < r->ntensors; t++) {
        rtensor_t *T = &r->tensors[t];
        T->id = pc_worker_register(w, T->name, r->params + T->off, r->pool + T->off, T->n);
        rc = T->id < 0 ? T->id : pc_worker_set_rows(w, T->id, T->rows);
        if (rc != PC_OK)
            pc_error_fmt(rc, err, errlen, "register %s: %s", T->name, pc_worker_error(w));
    }
    if (rc == PC_OK && o->device_step) {
        double ms = pc_trace_optimizer_ms(tr);
        r->optimizer_from_trace = ms >= 0;
        if (ms < 0) /* the rule: one pass over the fp32 state at HBM speed */
            ms = (double)pc_trace_total_params(tr) * PC_REPLAY_STEP_BYTES / PC_REPLAY_HBM_BPS * 1e3;
        r->optimizer_ms = ms * o->dilate;
        if ((rc = pc_worker_set_device_step(w, ms_to_ns(ms, o->dilate))) != PC_OK)
            pc_error_fmt(rc, err, errlen, "device step: %s", pc_worker_error(w));
    }
    if (rc != PC_OK) {
        pc_replay_destroy(r);
        return rc;
    }
    *out = r;
    return PC_OK;
}

/* Sleep until max(the last deadline, now - lag) + ns, recording the wake-up's overshoot;
 * returns the new deadline. lag is how far behind its schedule the thread was when the last
 * hold ended (a late wake-up, or a hold shorter than the lateness it inherited): the work it
 * did since (a param_wait, grad_ready calls) began that much late through no fault of its
 * own, so lateness is absorbed by the next holds instead of adding up over the iteration;
 * the time a wait blocked still moves the schedule (the GPU could not have started the
 * layer before its parameters were in). A hold whose deadline is past already does not
 * sleep and is not recorded. */
static int64_t hold(pc_replay_t *r, int64_t ns)
{
    int64_t now = pc_time_ns(), ready = now - r->lag;
    int64_t d = (r->deadline > ready ? r->deadline : ready) + ns;
    r->deadline = d;
    if (d <= now) { /* behind already (a short hold after a late wake-up): catch up */
        r->lag = now - d;
        return d;
    }
    struct timespec ts = {.tv_sec = (time_t)(d / 1000000000), .tv_nsec = (long)(d % 1000000000)};
    /* pc_time_ns is CLOCK_MONOTONIC: the deadline is absolute on it. EINTR (a stop
     * signal): sleep on to the same deadline. */
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
    r->lag = pc_time_ns() - d;
    push32(&r->over_ns, &r->nover, &r->over_cap, r->lag > INT32_MAX ? INT32_MAX : (int32_t)r->lag);
    return d;
}

/* The iteration's shift into the pool: a draw from (seed, rank, iteration). */
static size_t shift_of(const pc_replay_t *r, int64_t it)
{
    uint32_t ctr[4] = {(uint32_t)it, (uint32_t)((uint64_t)it >> 32), (uint32_t)r->rank,
                       0x53484654u}; /* "SHFT": a stream of its own */
    uint32_t key[2] = {(uint32_t)r->seed, (uint32_t)(r->seed >> 32)}, x[4];
    pc_philox4x32_10(ctr, key, x);
    return x[0] % SLACK;
}

/* The forward pass: each layer's parameters awaited, then its time held. */
static int forward(pc_replay_t *r, char *err, size_t errlen)
{
    char ev[80];
    for (int l = 0; l < r->nlayers; l++) {
        const rlayer_t *L = &r->layers[l];
        int64_t t0 = pc_time_ns();
        for (int k = 0; k < L->count; k++) {
            const rtensor_t *T = &r->tensors[L->first + k];
            int rc = pc_worker_param_wait(r->w, T->id);
            if (rc != PC_OK)
                return pc_error_fmt(rc, err, errlen, "param_wait(%s): %s", T->name,
                                    pc_worker_error(r->w));
        }
        hold(r, L->fwd);
        snprintf(ev, sizeof(ev), "forward %s", L->name);
        pc_worker_trace(r->w, ev, t0, pc_time_ns());
    }
    return PC_OK;
}

/* The backward pass: each layer's time held, then its gradients' copies queued on the copy
 * engine and handed over, readable from each copy's end. */
static int backward(pc_replay_t *r, size_t shift, char *err, size_t errlen)
{
    char ev[80];
    for (int l = r->nlayers - 1; l >= 0; l--) {
        const rlayer_t *L = &r->layers[l];
        int64_t t0 = pc_time_ns();
        /* The layer's gradients exist on the GPU at the hold's deadline, not at the late
         * wake-up: the copies start from there. */
        int64_t done = hold(r, L->bwd);
        snprintf(ev, sizeof(ev), "backward %s", L->name);
        pc_worker_trace(r->w, ev, t0, pc_time_ns());
        for (int k = 0; k < L->count; k++) {
            const rtensor_t *T = &r->tensors[L->first + k];
            int64_t start = done > r->engine_free ? done : r->engine_free;
            r->engine_free = start + T->copy;
            int rc =
                pc_worker_grad_ready_view(r->w, T->id, r->pool + T->off + shift, r->engine_free);
            if (rc != PC_OK)
                return pc_error_fmt(rc, err, errlen, "grad_ready(%s): %s", T->name,
                                    pc_worker_error(r->w));
        }
    }
    return PC_OK;
}

int pc_replay_iteration(pc_replay_t *r, bool *stop, char *err, size_t errlen)
{
    int64_t t0 = pc_time_ns();
    size_t shift = shift_of(r, pc_worker_iteration(r->w));
    int rc = forward(r, err, errlen);
    if (rc == PC_OK)
        rc = backward(r, shift, err, errlen);
    if (rc == PC_OK && (rc = pc_worker_iteration_end(r->w, stop)) != PC_OK)
        pc_error_fmt(rc, err, errlen, "iteration_end: %s", pc_worker_error(r->w));
    if (rc == PC_OK)
        push64(&r->iter_ns, &r->niter, &r->iter_cap, pc_time_ns() - t0);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void pc_replay_report(const pc_replay_t *r, pc_replay_report_t *out)
{
    memset(out, 0, sizeof(*out));
    out->trace_ms = r->trace_ms;
    out->optimizer_ms = r->optimizer_ms;
    out->optimizer_from_trace = r->optimizer_from_trace;
    out->copy_ms = r->copy_ms;
    size_t skip = r->niter > 1 ? 1 : 0, n = r->niter - skip;
    size_t m = r->nover > n ? r->nover : n;
    double *v = m ? malloc(m * sizeof(double)) : NULL;
    if (!v)
        return;
    if (n) {
        double sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += (v[i] = (double)r->iter_ns[skip + i] * 1e-6);
        out->iterations = (int64_t)n;
        out->iter_mean_ms = sum / (double)n;
        out->iter_p50_ms = pc_time_median(v, n);
        out->ratio = r->trace_ms > 0 ? out->iter_p50_ms / r->trace_ms : 0;
    }
    if (r->nover) {
        for (size_t i = 0; i < r->nover; i++)
            v[i] = (double)r->over_ns[i] * 1e-3;
        qsort(v, r->nover, sizeof(double), cmp_double);
        out->holds = (int64_t)r->nover;
        out->overshoot_p50_us = pc_time_median(v, r->nover);
        out->overshoot_p99_us = v[(size_t)((double)(r->nover - 1) * 0.99)];
        out->overshoot_max_us = v[r->nover - 1];
    }
    free(v);
}

void pc_replay_destroy(pc_replay_t *r)
{
    if (!r)
        return;
    free(r->layers);
    free(r->tensors);
    free(r->params);
    free(r->pool);
    free(r->iter_ns);
    free(r->over_ns);
    free(r);
}
