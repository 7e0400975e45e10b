/* model_profile: per-layer forward and backward times of a model for pc_cost
 * (pc_model_profile, pc_model.h): passes through the model's own hooks, the stream waited
 * for at each on a device. One thread per model. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "model_impl.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_time.h"

/* What the profile's hooks record in one pass: the first param_wait and the first
 * grad_ready of each parameterised layer. On a device model the hooks first wait for the
 * stream (m is set), so that a time stamp follows the work queued before it. */
typedef struct profile {
    pc_model_t *m; /* a device model, or NULL */
    const int *tensor_layer;
    int64_t fwd_start[MAX_LAYERS];
    int64_t bwd_ready[MAX_LAYERS];
} profile_t;

/* The first time stamp of tensor t's layer in first[] (after waiting for a device model's
 * stream, so that it follows the work queued before it). */
static int profile_mark(profile_t *p, int t, int64_t *first)
{
    int rc = p->m ? pc_model_sync(p->m) : PC_OK;
    if (rc != PC_OK)
        return rc;
    int64_t now = pc_time_ns();
    int l = p->tensor_layer[t];
    if (!first[l])
        first[l] = now;
    return PC_OK;
}

static int profile_wait(void *ud, int t)
{
    profile_t *p = ud;
    return profile_mark(p, t, p->fwd_start);
}

static int profile_ready(void *ud, int t)
{
    profile_t *p = ud;
    return profile_mark(p, t, p->bwd_ready);
}

/* Median of v[0..n), n >= 1 (sorts v). */
static double median_of(double *v, int n)
{
    return pc_time_median(v, (size_t)n);
}

int pc_model_profile(pc_model_t *m, const float *x, const uint8_t *labels, int B, int reps,
                     pc_cost_layer_t *layers, int max_layers, int *nlayers, int *tensor_layer)
{
    if (!m || !x || !labels || !layers || !nlayers || !tensor_layer || reps < 1 || B < 1 ||
        B > m->max_batch)
        return PC_EINVAL;
    int L = 0; /* parameterised layers, in forward order */
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].wt >= 0) {
            if (L == max_layers)
                return PC_EINVAL;
            tensor_layer[m->layers[i].wt] = L;
            tensor_layer[m->layers[i].bt] = L;
            L++;
        }
    double *f = malloc(sizeof(double) * (size_t)reps * (size_t)L * 2);
    if (!f)
        return PC_ENOMEM;
    double *b = f + reps * L;
    profile_t p = {.m = pc_model__on_device(m) ? m : NULL, .tensor_layer = tensor_layer};
    pc_model_hooks_t hooks = {.ud = &p, .param_wait = profile_wait, .grad_ready = profile_ready};
    int rc = PC_OK;
    for (int r = -1; r < reps && rc == PC_OK; r++) { /* r = -1: untimed */
        memset(p.fwd_start, 0, sizeof(p.fwd_start));
        memset(p.bwd_ready, 0, sizeof(p.bwd_ready));
        float loss;
        int correct;
        int64_t t0 = pc_time_ns();
        rc = pc_model_forward(m, x, labels, B, true, 1, (uint64_t)(r + 1), &hooks, &loss, &correct);
        int64_t t1 = pc_time_ns();
        if (rc == PC_OK)
            rc = pc_model_backward(m, labels, B, &hooks);
        if (rc == PC_OK && p.m)
            rc = pc_model_sync(m); /* whatever was queued after the last grad_ready */
        int64_t t2 = pc_time_ns();
        for (int l = 0; r >= 0 && rc == PC_OK && l < L; l++) {
            int64_t start = l ? p.fwd_start[l] : t0, stop = l + 1 < L ? p.fwd_start[l + 1] : t1;
            int64_t from = l + 1 < L ? p.bwd_ready[l + 1] : t1;
            int64_t to = l ? p.bwd_ready[l] : t2; /* after the first layer's: nothing to hide */
            f[l * reps + r] = (double)(stop - start) * 1e-9;
            b[l * reps + r] = (double)(to - from) * 1e-9;
        }
    }
    for (int l = 0; rc == PC_OK && l < L; l++) {
        layers[l].fwd = median_of(f + l * reps, reps);
        layers[l].bwd = median_of(b + l * reps, reps);
    }
    free(f);
    if (rc == PC_OK)
        *nlayers = L;
    return rc;
}
