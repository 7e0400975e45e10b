/* worker_start: a worker's life outside the iterations: create, register, start, destroy.
 *
 * pc_worker_start is a list of named steps (plan the chunks, check every worker has the
 * same model, choose the checkpoint to resume from, set up the chunks, share the initial
 * parameters, restore this worker's state, broadcast the parameters, start the pipeline).
 * A failing step returns its error; start then undoes what the steps built (one cleanup
 * path, the same release_started that destroy uses) and the worker stays "registered, not
 * started". `started` is set only when every step succeeded. Backprop thread only. */
#include "config.h"

#include <assert.h>
#include <float.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_time.h"
#include "worker_impl.h"

int pc_worker_create(pc_runtime_t *rt, pc_worker_t **out, char *err, size_t errlen)
{
    if (rt->role != PC_ROLE_WORKER)
        return pc_error_fmt(PC_ESTATE, err, errlen, "pc_worker_create called on server rank %d",
                            rt->rank);
    pc_worker_t *w = calloc(1, sizeof(*w));
    if (!w)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    w->rt = rt;
    w->ops = rt->cfg.mode == PC_MODE_ALLREDUCE ? &pc_rt__worker_allreduce : &pc_rt__worker_ps;
    w->pipelined = rt->cfg.pipeline != 0;
    w->update_workers = w->ops == &pc_rt__worker_ps && rt->cfg.update == PC_UPDATE_WORKERS;
    w->main.track = TRACK_MAIN;
    w->main.w = w;
    atomic_init(&w->main.rc, PC_OK);
    atomic_init(&w->abort, false);
    w->loss = w->accuracy = NAN;
    for (int i = 0; i < RING; i++) {
        atomic_init(&w->comp_ns[i], 0);
        atomic_init(&w->main.busy_ns[i], 0);
        atomic_init(&w->sent_bytes[i], 0);
        atomic_init(&w->recv_bytes[i], 0);
    }
    *out = w;
    return PC_OK;
}

/* Tensor name's buffers into the worker's list: the checks both registrations share
 * (pc_worker_register, pc_worker_register_device). Its index, or an error code. */
static int add_tensor(pc_worker_t *w, const char *name, float *param, float *grad, size_t n)
{
    if (w->started)
        return WFAIL(w->rt, &w->main, PC_ESTATE, "tensor '%s' registered after pc_worker_start",
                     name ? name : "?");
    if (!name || !param || !grad || n == 0 || n > PC_CODEC_MAX_N)
        return WFAIL(w->rt, &w->main, PC_EINVAL, "tensor '%s': bad buffers or size %zu",
                     name ? name : "?", n);
    if (w->ntensors == w->tcap) {
        int cap = w->tcap ? 2 * w->tcap : 16;
        wtensor_t *t = realloc(w->tensors, sizeof(wtensor_t) * (size_t)cap);
        if (!t)
            return WFAIL(w->rt, &w->main, PC_ENOMEM, "out of memory registering '%s'", name);
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

int pc_worker_register(pc_worker_t *w, const char *name, float *param, float *grad, size_t n)
{
    if (w->rt->cfg.device != PC_DEVICE_CPU)
        return WFAIL(w->rt, &w->main, PC_ESTATE,
                     "tensor '%s': the run has --device %s: register device memory with "
                     "pc_worker_register_device",
                     name ? name : "?", pc_config_device_name(w->rt->cfg.device));
    return add_tensor(w, name, param, grad, n);
}

int pc_worker_register_device(pc_worker_t *w, const char *name, float *param, float *grad, size_t n)
{
    if (w->rt->cfg.device == PC_DEVICE_CPU)
        return WFAIL(w->rt, &w->main, PC_ESTATE,
                     "tensor '%s' registered as device memory, but the run has --device cpu",
                     name ? name : "?");
    int t = add_tensor(w, name, param, grad, n);
    if (t < 0)
        return t;
    /* The device buffers; p becomes the parameters' host mirror at start (worker_device.c). */
    w->device = true;
    w->tensors[t].dp = param;
    w->tensors[t].dg = grad;
    w->tensors[t].p = w->tensors[t].g = NULL;
    return t;
}

int pc_worker_set_rows(pc_worker_t *w, int tensor, size_t rows)
{
    if (w->started)
        return WFAIL(w->rt, &w->main, PC_ESTATE, "pc_worker_set_rows called after pc_worker_start");
    if (tensor < 0 || tensor >= w->ntensors)
        return WFAIL(w->rt, &w->main, PC_EINVAL, "pc_worker_set_rows(%d): no such tensor", tensor);
    wtensor_t *t = &w->tensors[tensor];
    if (rows > 1 && t->n % rows != 0)
        return WFAIL(w->rt, &w->main, PC_EINVAL,
                     "tensor '%s': %zu rows do not divide its %zu elements", t->name, rows, t->n);
    t->rows = rows > 1 ? rows : 0;
    return PC_OK;
}

size_t pc_worker_lowrank_q_len(const pc_worker_t *w, int tensor)
{
    if (!w->started || tensor < 0 || tensor >= w->ntensors)
        return 0;
    const wtensor_t *t = &w->tensors[tensor];
    const wchunk_t *c = &w->chunks[t->first_chunk];
    if (!c->lowrank || t->first_chunk != t->last_chunk)
        return 0;
    return c->n / c->rows * (size_t)pc_codec_spec(c->codec)->rank;
}

int pc_worker_lowrank_q(pc_worker_t *w, int tensor, float *q, size_t len)
{
    if (!w->started)
        return WFAIL(w->rt, &w->main, PC_ESTATE,
                     "pc_worker_lowrank_q called before pc_worker_start");
    if (tensor < 0 || tensor >= w->ntensors || !q)
        return WFAIL(w->rt, &w->main, PC_EINVAL, "pc_worker_lowrank_q(%d): no such tensor", tensor);
    size_t qn = pc_worker_lowrank_q_len(w, tensor);
    const wtensor_t *t = &w->tensors[tensor];
    if (!qn)
        return WFAIL(w->rt, &w->main, PC_EINVAL,
                     "tensor '%s' does not travel as powersgd factors in this run", t->name);
    if (len != qn)
        return WFAIL(w->rt, &w->main, PC_EINVAL, "tensor '%s': its Q has %zu floats, not %zu",
                     t->name, qn, len);
    const wchunk_t *c = &w->chunks[t->first_chunk];
    if (pc_rt__w_dev_codec(c)) { /* the device state's is the current one */
        char why[256];
        int rc = pc_devcodec_state_get_q(c->dst, q, why, sizeof(why));
        return rc == PC_OK ? rc : WFAIL(w->rt, &w->main, rc, "tensor '%s': %s", t->name, why);
    }
    memcpy(q, pc_codec_state_lowrank_q(c->st), sizeof(float) * qn);
    return PC_OK;
}

int pc_worker_set_stream(pc_worker_t *w, void *stream)
{
    if (w->started)
        return WFAIL(w->rt, &w->main, PC_ESTATE,
                     "pc_worker_set_stream called after pc_worker_start");
    w->user = stream;
    w->user_set = true;
    return PC_OK;
}

int pc_worker_set_device_step(pc_worker_t *w, int64_t ns_per_iteration)
{
    if (w->started)
        return WFAIL(w->rt, &w->main, PC_ESTATE,
                     "pc_worker_set_device_step called after pc_worker_start");
    if (w->ops != &pc_rt__worker_allreduce)
        return WFAIL(w->rt, &w->main, PC_ESTATE,
                     "pc_worker_set_device_step needs --mode allreduce (with --mode %s the "
                     "servers step the optimizer, for real)",
                     w->ops->name);
    if (ns_per_iteration < 0)
        return WFAIL(w->rt, &w->main, PC_EINVAL, "pc_worker_set_device_step: %lld ns is negative",
                     (long long)ns_per_iteration);
    w->device_step = true;
    w->device_step_ns = ns_per_iteration;
    return PC_OK;
}

/* A step other than the runtime's own (the caller's groups on the servers, the caller's
 * optimizer on the workers) before start: the codec's default momentum correction goes
 * (momentum=0 in rt's spec and configuration, pc_config_codec_momentum_off); one given in
 * the spec stays, for the caller to refuse. Before pc_worker_start no other thread reads
 * rt->spec or rt->cfg.compress (the compressor threads and their codecs start there). */
static void momentum_default_off(pc_worker_t *w)
{
    pc_runtime_t *rt = w->rt;
    if (!w->started && pc_config_codec_momentum_off(&rt->cfg) == 1)
        pc_rt__spec_update(rt);
}

/* A codec left without a warm-up gets the default one (dense=PC_CONFIG_ADAM_WARMUP, or
 * powersgd's warmup=, in rt's spec and configuration, pc_config_codec_adam_warmup), as pc-train's
 * --optimizer adamw does. Before pc_worker_start, as momentum_default_off: no other thread reads
 * rt->spec or rt->cfg.compress yet. */
int pc_worker_warm_codec(pc_worker_t *w)
{
    pc_runtime_t *rt = w->rt;
    if (w->started)
        return WFAIL(rt, &w->main, PC_ESTATE,
                     "pc_worker_warm_codec after pc_worker_start: the codec's states are made "
                     "there");
    if (pc_config_codec_adam_warmup(&rt->cfg) == 1) {
        pc_rt__spec_update(rt);
        w->warm_set = true; /* the servers' flags do not have it: TAG_WARMUP at start */
    }
    return PC_OK;
}

const char *pc_worker_compress(const pc_worker_t *w)
{
    return w->rt->cfg.compress;
}

int64_t pc_worker_adam_freeze_after(const pc_worker_t *w)
{
    return pc_config_adam_freeze_after(&w->rt->cfg);
}

const char *pc_worker_adam_moments(const pc_worker_t *w)
{
    const pc_runtime_t *rt = w->rt;
    return pc_config_adam_moments_name(pc_config_adam_moments(&rt->cfg, rt->optim.kind));
}

int pc_worker_set_optimizer(pc_worker_t *w, int kind, const double *hparams, int ngroups,
                            const int *tensor_group)
{
    pc_runtime_t *rt = w->rt;
    if (w->started || w->ngroups)
        return WFAIL(rt, &w->main, PC_ESTATE, "pc_worker_set_optimizer called %s",
                     w->started ? "after pc_worker_start" : "twice");
    if (!w->ops->servers || rt->cfg.update != PC_UPDATE_SERVERS)
        return WFAIL(rt, &w->main, PC_ESTATE,
                     "parameter groups need --mode ps and --update servers (this run: --mode "
                     "%s, --update %s)",
                     w->ops->name, rt->cfg.update == PC_UPDATE_SERVERS ? "servers" : "workers");
    if (rt->cfg.clip_grad_norm > 0) /* the servers take a group run's max-norm from TAG_CLIP */
        return WFAIL(rt, &w->main, PC_ESTATE,
                     "--clip-grad-norm with parameter groups: clip per iteration with "
                     "pc_worker_clip_grad_norm (the binding's opt.clip_grad_norm_) instead");
    if (!hparams || !tensor_group || ngroups < 1 || (uint32_t)ngroups > PC_RT_MAX_GROUPS)
        return WFAIL(rt, &w->main, PC_EINVAL, "pc_worker_set_optimizer: %d groups, not 1..%u",
                     ngroups, PC_RT_MAX_GROUPS);
    pc_optim_cfg_t *g = calloc((size_t)ngroups, sizeof(*g));
    int *tg = malloc(sizeof(int) * (size_t)(w->ntensors ? w->ntensors : 1));
    if (!g || !tg) {
        free(g);
        free(tg);
        return WFAIL(rt, &w->main, PC_ENOMEM, "out of memory");
    }
    char why[320];
    /* The caller's optimizer steps as written (SGD's momentum too, on the servers). */
    momentum_default_off(w);
    double mc = pc_codec_worker_momentum(&rt->spec);
    for (int i = 0; i < ngroups; i++) {
        const double *h = hparams + (size_t)i * PC_GROUP_FIELDS;
        g[i] = (pc_optim_cfg_t){.kind = (pc_optim_kind_t)kind,
                                .schedule = PC_LR_CONSTANT,
                                .lr = h[PC_GROUP_LR],
                                .weight_decay = h[PC_GROUP_WEIGHT_DECAY],
                                .momentum = h[PC_GROUP_MOMENTUM],
                                .nesterov = h[PC_GROUP_NESTEROV] != 0,
                                .beta1 = h[PC_GROUP_BETA1],
                                .beta2 = h[PC_GROUP_BETA2],
                                .eps = h[PC_GROUP_EPS],
                                .amsgrad = h[PC_GROUP_AMSGRAD] != 0};
        int rc = pc_rt__group_check(&g[i], why, sizeof(why));
        if (rc == PC_OK && mc != 0 && (kind != PC_OPTIM_SGD || g[i].momentum != 0))
            rc = pc_error_fmt(PC_EINVAL, why, sizeof(why),
                              "--compress %s corrects momentum on the workers (momentum=%g), "
                              "which would feed momentum into %s; give the codec momentum=0 "
                              "(e.g. --compress %s:ratio=0.01,momentum=0)",
                              pc_codec_name(rt->spec.id), mc,
                              kind == PC_OPTIM_SGD ? "SGD's momentum" : "Adam's moments",
                              pc_codec_name(rt->spec.id));
        if (rc != PC_OK) {
            free(g);
            free(tg);
            return WFAIL(rt, &w->main, PC_EINVAL, "parameter group %d: %s", i, why);
        }
    }
    for (int t = 0; t < w->ntensors; t++) {
        if (tensor_group[t] < 0 || tensor_group[t] >= ngroups) {
            int bad = tensor_group[t];
            free(g);
            free(tg);
            return WFAIL(rt, &w->main, PC_EINVAL, "tensor '%s': group %d of %d", w->tensors[t].name,
                         bad, ngroups);
        }
        tg[t] = tensor_group[t];
    }
    w->groups = g;
    w->tensor_group = tg;
    w->groups_ntensors = w->ntensors;
    w->ngroups = (uint32_t)ngroups;
    /* The run's optimizer is the groups' (checkpoint identity, the metrics): set before
     * the start, when no other thread reads rt. */
    rt->optim.kind = (pc_optim_kind_t)kind;
    if (kind == PC_OPTIM_ADAM || kind == PC_OPTIM_ADAMW)
        return pc_worker_warm_codec(w); /* not started: checked above */
    return PC_OK;
}

int pc_worker_set_lrs(pc_worker_t *w, const double *lrs, int ngroups)
{
    pc_runtime_t *rt = w->rt;
    if (!w->ngroups || !w->started || w->finished || w->lrs_sent)
        return WFAIL(rt, &w->main, PC_ESTATE, "pc_worker_set_lrs: %s",
                     !w->ngroups   ? "no parameter groups (pc_worker_set_optimizer)"
                     : !w->started ? "called before pc_worker_start"
                     : w->finished ? "called after pc_worker_finish"
                                   : "called twice in one iteration");
    if (!lrs || ngroups != (int)w->ngroups)
        return WFAIL(rt, &w->main, PC_EINVAL,
                     "pc_worker_set_lrs: %d learning rates for %u parameter groups", ngroups,
                     w->ngroups);
    for (int i = 0; i < ngroups; i++)
        if (!(lrs[i] >= 0 && lrs[i] <= DBL_MAX))
            return WFAIL(rt, &w->main, PC_EINVAL,
                         "parameter group %d's learning rate %g is not a finite number >= 0", i,
                         lrs[i]);
    uint8_t buf[PC_RT_LR_HEAD_BYTES + 8 * 64], *msg = buf;
    size_t len = pc_rt__lr_bytes((size_t)ngroups);
    if (len > sizeof(buf) && !(msg = malloc(len)))
        return WFAIL(rt, &w->main, PC_ENOMEM, "out of memory");
    pc_rt__lr_encode(msg, w->iter, lrs, w->ngroups);
    char why[256] = "";
    int rc = PC_OK;
    /* A blocking send of a small message from the backprop thread (MPI_THREAD_MULTIPLE):
     * the servers receive it whenever they look; they wait for it only to step. */
    for (int s = 0; s < rt->nservers && rc == PC_OK; s++) {
        int server = pc_rt__server_rank(rt, s);
        rc = PC_MPI_CHECK_PEER(MPI_Send(msg, (int)len, MPI_BYTE, server, TAG_LR, rt->comm), server,
                               why, sizeof(why));
    }
    if (msg != buf)
        free(msg);
    if (rc != PC_OK)
        return WFAIL(rt, &w->main, rc, "sending the learning rates: %s", why);
    w->lrs_sent = true;
    return PC_OK;
}

int pc_worker_set_user_step(pc_worker_t *w, bool user)
{
    if (w->started && (w->handed || w->finished || !user))
        return WFAIL(w->rt, &w->main, PC_ESTATE,
                     "pc_worker_set_user_step(%s) after pc_worker_start: only to the user's "
                     "step, before the first gradient is handed over",
                     user ? "true" : "false");
    if (user && !w->update_workers)
        return WFAIL(w->rt, &w->main, PC_ESTATE,
                     "pc_worker_set_user_step needs --update workers (with --update servers "
                     "the servers step, and --mode allreduce's workers step themselves)");
    if (user && w->device)
        return WFAIL(w->rt, &w->main, PC_ESTATE,
                     "pc_worker_set_user_step: device tensors have no host gradient buffer to "
                     "receive the mean gradient; register host tensors");
    /* The user's optimizer steps on what the servers push: with momentum correction on the
     * workers that is a momentum buffer's sum, not the averaged gradient (momentum twice
     * with the optimizer's own, Adam's moments of a momentum). */
    if (user)
        momentum_default_off(w);
    double mc = pc_codec_worker_momentum(&w->rt->spec);
    if (user && mc != 0)
        return WFAIL(w->rt, &w->main, PC_EINVAL,
                     "the step on the workers with your optimizer: --compress %s corrects "
                     "momentum on the workers (momentum=%g), so p.grad would carry momentum, "
                     "not the averaged gradient; give the codec momentum=0 (e.g. --compress "
                     "%s:ratio=0.01,momentum=0)",
                     pc_codec_name(w->rt->spec.id), mc, pc_codec_name(w->rt->spec.id));
    /* After start no update is outstanding (nothing was sent) and the MPI thread reads
     * user_step only for an update, after popping a descriptor pushed after this store
     * (pc_spsc's release and acquire order it); the runtime's step state goes. */
    for (int ci = 0; w->started && ci < w->nchunks; ci++) {
        wchunk_t *c = &w->chunks[ci];
        if (!c->lowrank) {
            free(c->mean);
            c->mean = NULL;
            pc_optim_state_free(&c->opt);
        }
    }
    w->user_step = user;
    return PC_OK;
}

int pc_worker_set_update(pc_worker_t *w, int update)
{
    pc_runtime_t *rt = w->rt;
    if (update != PC_UPDATE_SERVERS && update != PC_UPDATE_WORKERS)
        return WFAIL(rt, &w->main, PC_EINVAL, "pc_worker_set_update(%d): not servers or workers",
                     update);
    if (w->started || w->ngroups)
        return WFAIL(rt, &w->main, PC_ESTATE, "pc_worker_set_update called %s",
                     w->started ? "after pc_worker_start (the servers set up their chunks there)"
                                : "after pc_worker_set_optimizer");
    const char *name = update == PC_UPDATE_WORKERS ? "workers" : "servers";
    if (update == rt->cfg.update)
        return PC_OK;
    if (pc_config_given(&rt->cfg, "update"))
        return WFAIL(rt, &w->main, PC_ESTATE,
                     "the step placement %s, but the flags gave --update %s explicitly", name,
                     rt->cfg.update == PC_UPDATE_WORKERS ? "workers" : "servers");
    /* --update workers' own rules (pc_config.c, check_update), for the run the flags made. */
    if (update == PC_UPDATE_WORKERS) {
        if (!w->ops->servers)
            return WFAIL(rt, &w->main, PC_ESTATE,
                         "the step on the workers needs --mode ps (--mode allreduce's workers "
                         "step already; there are no servers)");
        if (rt->spec.id == PC_CODEC_POWERSGD)
            return WFAIL(rt, &w->main, PC_ESTATE,
                         "the step on the workers with --compress %s: its matrices are stepped "
                         "on the workers from P^ and Q already, and its servers' rounds cannot "
                         "send a mean gradient; keep the step on the servers (the binding's "
                         "update='servers', which runs SGD, Adam and AdamW with their groups) "
                         "or take another codec",
                         rt->cfg.compress);
        if (pc_config_given(&rt->cfg, "pull"))
            return WFAIL(rt, &w->main, PC_ESTATE,
                         "--pull has no effect with the step on the workers (the servers push "
                         "the mean gradient dense, no parameters); drop it");
    }
    if (w->user_step)
        return WFAIL(rt, &w->main, PC_ESTATE,
                     "pc_worker_set_update(servers) after pc_worker_set_user_step");
    /* Before the start no other thread reads rt or w (the compressor threads start there). */
    rt->cfg.update = update;
    w->update_workers = update == PC_UPDATE_WORKERS;
    w->update_set = true;
    return PC_OK;
}

/* ---- the steps of pc_worker_start ---------------------------------------------------- */

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

/* Cut the tensors into chunks and assign them to servers (w->plan). */
static int plan_chunks(pc_worker_t *w)
{
    pc_runtime_t *rt = w->rt;
    pc_plan_tensor_t *pt = malloc(sizeof(pc_plan_tensor_t) * (size_t)w->ntensors);
    if (!pt)
        return WFAIL(rt, &w->main, PC_ENOMEM, "out of memory");
    for (int t = 0; t < w->ntensors; t++) {
        /* Device tensors: their device buffers (which ones are adjacent there). */
        const wtensor_t *k = &w->tensors[t];
        /* A powersgd matrix stays whole: its factors need all of its rows. */
        pt[t] = (pc_plan_tensor_t){k->n, k->dp ? k->dp : k->p, k->dg ? k->dg : k->g,
                                   pc_rt__chunk_lowrank(rt, k->rows, k->n) ? k->rows : 0};
        /* Parameter groups: a chunk has one group's rule, so a tensor that starts another
         * group never joins its predecessor's chunk (no buffers: never grouped). */
        if (w->ngroups && t > 0 && w->tensor_group[t] != w->tensor_group[t - 1])
            pt[t].param = pt[t].grad = NULL;
    }
    size_t chunk_elems = (size_t)rt->cfg.chunk_bytes / sizeof(float);
    int rc =
        pc_plan_create(pt, w->ntensors, chunk_elems, rt->nservers ? rt->nservers : 1, &w->plan);
    free(pt);
    if (rc != PC_OK)
        return WFAIL(rt, &w->main, rc, "cannot plan chunks: %s", pc_strerror(rc));
    return PC_OK;
}

/* Every worker must have the same model: compare a hash of the tensors and the plan (it
 * also identifies the model in checkpoints: rt->model_hash). Collective over the workers. */
static int check_same_model(pc_worker_t *w)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    int rc;
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, (uint64_t)w->ntensors);
    for (int t = 0; t < w->ntensors; t++)
        h = fnv(h, w->tensors[t].n);
    h = fnv(h, (uint64_t)w->plan->nchunks);
    for (int c = 0; c < w->plan->nchunks; c++) {
        h = fnv(fnv(h, w->plan->chunks[c].n), (uint64_t)w->plan->chunks[c].server);
        if (w->plan->chunks[c].rows) /* powersgd's matrices (0 elsewhere: hashes kept) */
            h = fnv(h, w->plan->chunks[c].rows);
    }
    /* The step's placement rides along (pc_worker_set_update: each worker chose it; the
     * servers learn worker 0's): outside the hash, which is the checkpoints' model id. */
    uint64_t mine[2] = {h, (uint64_t)rt->cfg.update}, lo[2], hi[2];
    if ((rc = PC_MPI_CHECK(MPI_Allreduce(mine, lo, 2, MPI_UINT64_T, MPI_MIN, rt->workers), why,
                           sizeof(why))) != PC_OK ||
        (rc = PC_MPI_CHECK(MPI_Allreduce(mine, hi, 2, MPI_UINT64_T, MPI_MAX, rt->workers), why,
                           sizeof(why))) != PC_OK)
        return WFAIL(rt, &w->main, rc, "%s", why);
    if (lo[0] != hi[0]) { /* every worker sees it: the same message, said once */
        w->err_agreed = true;
        return WFAIL(rt, &w->main, PC_EINVAL,
                     "workers registered different models (tensor sizes or order differ)");
    }
    if (lo[1] != hi[1]) {
        w->err_agreed = true;
        return WFAIL(rt, &w->main, PC_EINVAL,
                     "workers chose different placements of the step (servers on some, "
                     "workers on others: pc_worker_set_update, the binding's "
                     "DistributedOptimizer(update=...), must be the same on every worker)");
    }
    rt->model_hash = h;
    return PC_OK;
}

/* Every chunk's update travels under its own tag (TAG_PULL + chunk): they must fit. */
static int check_tag_range(pc_worker_t *w)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    int tag_ub = 32767, flag = 0; /* the least MPI guarantees */
    int *ub = NULL;
    int rc = PC_MPI_CHECK(MPI_Comm_get_attr(rt->comm, MPI_TAG_UB, &ub, &flag), why, sizeof(why));
    if (rc != PC_OK)
        return WFAIL(rt, &w->main, rc, "%s", why);
    if (flag && ub)
        tag_ub = *ub;
    if (TAG_PULL + w->plan->nchunks > tag_ub)
        return WFAIL(rt, &w->main, PC_EINVAL,
                     "%d chunks exceed MPI's tag range; raise --chunk-bytes", w->plan->nchunks);
    return PC_OK;
}

/* Worker 0, at debug level: the chunk plan, line by line through the log (the library
 * prints nothing of its own); at warn level, a compressing codec with no chunk to
 * compress. Best effort. */
static void log_plan(pc_worker_t *w)
{
    pc_runtime_t *rt = w->rt;
    /* A compressing codec that compresses nothing (a small model: every chunk under
     * --compress-min-bytes) is said at warn level: the configuration names the codec. */
    bool any =
        rt->rank != 0 || !w->ops->servers || rt->spec.id == PC_CODEC_NONE; /* or none to say */
    for (int c = 0; c < w->plan->nchunks && !any; c++)
        any = !pc_rt__chunk_plain(rt, w->plan->chunks[c].rows, w->plan->chunks[c].n);
    if (!any)
        pc_log_write(rt->log, PC_LOG_WARN, NULL,
                     "--compress %s compresses nothing here: every one of the %d chunks is "
                     "under --compress-min-bytes %lld (or not a powersgd matrix) and travels "
                     "dense; lower --compress-min-bytes to compress this model",
                     rt->cfg.compress, w->plan->nchunks, (long long)rt->cfg.compress_min_bytes);
    if (rt->rank != 0 || !pc_log_enabled(rt->log, PC_LOG_DEBUG))
        return;
    const char **names = malloc(sizeof(char *) * (size_t)w->ntensors);
    if (!names)
        return;
    for (int t = 0; t < w->ntensors; t++)
        names[t] = w->tensors[t].name;
    pc_log_write(rt->log, PC_LOG_DEBUG, NULL,
                 "chunk plan (%d chunks, %zu elements max):", w->plan->nchunks,
                 (size_t)rt->cfg.chunk_bytes / sizeof(float));
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

/* ps: chunk c's codec (the run's, or "none" for a small chunk), its send and update
 * buffers and its error-feedback state. */
static int ps_chunk_init(pc_worker_t *w, wchunk_t *c, wthread_t *me)
{
    pc_runtime_t *rt = w->rt;
    int rc;
    /* The first chunk creates the run's two codecs (lane 0's), the first chunk of every
     * other lane that lane's own (one thread at a time per codec: pc_codec.h). */
    wthread_t *lane = w->pipelined ? &w->comp[c->lane] : &w->main;
    if (!w->codec && (rc = pc_rt__codecs_create(rt, &w->codec, &w->codec_dense)) != PC_OK)
        return WFAIL(rt, me, rc, "cannot create the codec: %s", pc_strerror(rc));
    if (!lane->codec && lane->index == 0) {
        lane->codec = w->codec;
        lane->codec_dense = w->codec_dense;
    } else if (!lane->codec &&
               (rc = pc_rt__codecs_create(rt, &lane->codec, &lane->codec_dense)) != PC_OK) {
        return WFAIL(rt, me, rc, "cannot create compressor thread %d's codec: %s", lane->index,
                     pc_strerror(rc));
    }
    c->codec = pc_rt__chunk_plain(rt, c->rows, c->n) ? lane->codec_dense : lane->codec;
    c->lowrank = pc_rt__chunk_lowrank(rt, c->rows, c->n);
    size_t cols = c->lowrank ? c->n / c->rows : 0, qn = cols * (size_t)rt->spec.rank;
    c->send_cap = pc_codec_max_bytes(c->codec, c->n);
    /* A matrix receives P^ (rows x rank) and its update: Q, or in the warm-up the n-float
     * mean gradient. */
    size_t lr_cap = pc_rt__pull_lowrank_bytes(rt->spec.warmup > 0 ? c->n : qn, w->ngroups > 0),
           phat_cap = pc_rt__phat_bytes(c->lowrank ? c->rows * (size_t)rt->spec.rank : 0);
    c->recv_cap = !c->lowrank ? pc_rt__pull_max_bytes(c->n) : lr_cap > phat_cap ? lr_cap : phat_cap;
    c->sendbuf = malloc(c->send_cap);
    c->recvbuf = malloc(c->recv_cap);
    int orc = PC_OK;
    pc_optim_cfg_t o = pc_rt__chunk_optim(rt, c->n);
    if (c->lowrank && w->ngroups) { /* its group's rule, as its server's chunk_setup */
        o = pc_rt__chunk_optim_from(rt, &w->groups[w->tensor_group[c->first_tensor]], c->n);
        o.lazy = rt->optim.lazy;
        o.freeze_after = rt->optim.freeze_after;
    }
    c->lr_optim = o;
    if (c->lowrank) {
        c->lr_q = malloc(sizeof(float) * qn);
        c->lr_row = malloc(sizeof(float) * cols);
        orc = pc_optim_state_alloc(&o, c->n, &c->opt);
    }
    c->params_here = w->update_workers;
    if (!c->lowrank && w->update_workers && !w->user_step) {
        /* --update workers: the update is the mean gradient (pull_max_bytes(n) holds its
         * pc_rt__pull_lowrank_bytes(n)); this worker steps with its server's rule. */
        c->mean = malloc(sizeof(float) * c->n);
        orc = c->mean ? pc_optim_state_alloc(&o, c->n, &c->opt) : PC_ENOMEM;
    }
    rc = c->lowrank ? pc_codec_state_create_matrix(c->codec, c->id, c->rows, c->n, &c->st)
                    : pc_codec_state_create(c->codec, c->id, c->n, &c->st);
    if (!c->sendbuf || !c->recvbuf || (c->lowrank && (!c->lr_q || !c->lr_row)) || orc != PC_OK ||
        rc != PC_OK)
        return WFAIL(rt, me, PC_ENOMEM, "out of memory for chunk %u", c->id);
    return PC_OK;
}

/* ps: worker 0 gives each server the plan and its chunks' initial parameters (or, when
 * resuming, takes the checkpointed parameters from the servers). allreduce has nothing
 * to agree with servers: worker 0's parameters are broadcast (broadcast_params). */
static int ps_share_initial(pc_worker_t *w, uint64_t resume, wthread_t *me)
{
    pc_runtime_t *rt = w->rt;
    char why[256] = "";
    int rc = PC_OK;
    if (rt->rank != 0)
        return PC_OK;
    size_t lay_len = pc_rt__layout_bytes((size_t)w->nchunks);
    /* The codec's warm-up and the placement (when the workers chose them), then the
     * parameter groups go first: a server takes worker 0's first messages with any tag. */
    size_t grp_len = w->ngroups ? pc_rt__groups_bytes(w->ngroups, (size_t)w->nchunks) : 0;
    uint8_t *lay = malloc(lay_len + grp_len);
    uint32_t *cg = w->ngroups ? malloc(sizeof(uint32_t) * (size_t)w->nchunks + 1) : NULL;
    if (!lay || (w->ngroups && !cg)) {
        free(lay);
        free(cg);
        return WFAIL(rt, me, PC_ENOMEM, "out of memory");
    }
    pc_rt__layout_encode(lay, w->plan, resume);
    if (w->ngroups) {
        for (int ci = 0; ci < w->nchunks; ci++) /* one group a chunk (plan_chunks) */
            cg[ci] = (uint32_t)w->tensor_group[w->chunks[ci].first_tensor];
        pc_rt__groups_encode(lay + lay_len, (int)rt->optim.kind, w->groups, w->ngroups, cg,
                             (uint32_t)w->nchunks);
    }
    free(cg);
    uint8_t upd[PC_RT_UPDATE_BYTES], warm[PC_RT_WARMUP_BYTES];
    pc_rt__update_encode(upd, rt->cfg.update);
    pc_rt__warmup_encode(warm, rt->spec.warmup ? rt->spec.warmup : rt->spec.dense); /* dgc's */
    for (int s = 0; s < rt->nservers && rc == PC_OK; s++) {
        int server = pc_rt__server_rank(rt, s);
        if (w->warm_set) /* first of all: the server makes its codec by it */
            rc = PC_MPI_CHECK_PEER(
                MPI_Send(warm, PC_RT_WARMUP_BYTES, MPI_BYTE, server, TAG_WARMUP, rt->comm), server,
                why, sizeof(why));
        if (w->update_set && rc == PC_OK) /* the server sets its chunks up by it */
            rc = PC_MPI_CHECK_PEER(
                MPI_Send(upd, PC_RT_UPDATE_BYTES, MPI_BYTE, server, TAG_UPDATE, rt->comm), server,
                why, sizeof(why));
        if (grp_len && rc == PC_OK)
            rc = PC_MPI_CHECK_PEER(
                MPI_Send(lay + lay_len, (int)grp_len, MPI_BYTE, server, TAG_GROUPS, rt->comm),
                server, why, sizeof(why));
        if (rc == PC_OK)
            rc = PC_MPI_CHECK_PEER(
                MPI_Send(lay, (int)lay_len, MPI_BYTE, server, TAG_LAYOUT, rt->comm), server, why,
                sizeof(why));
    }
    free(lay);
    /* --update workers: the servers hold no parameters (resuming, this worker's own
     * checkpoint file has them: pc_rt__w_load). */
    if (w->update_workers && rc == PC_OK)
        return PC_OK;
    /* Init messages pass through the chunk's update buffer (pc_rt__pull_max_bytes(n) >=
     * pc_rt__init_bytes(n)), unused until the first update is posted; a powersgd matrix's
     * holds Q only, and its send buffer (pc_codec_max_bytes: 40 + 4 n) serves instead. */
    for (int ci = 0; ci < w->nchunks && rc == PC_OK; ci++) {
        wchunk_t *c = &w->chunks[ci];
        int server = pc_rt__server_rank(rt, c->server), count = 0;
        MPI_Status st;
        size_t ilen = pc_rt__init_bytes(c->n);
        bool in_recv = c->recv_cap >= ilen;
        uint8_t *buf = in_recv ? c->recvbuf : c->sendbuf;
        size_t cap = in_recv ? c->recv_cap : c->send_cap;
        assert(cap >= ilen);
        if (!resume) {
            pc_rt__init_encode(buf, c->p, c->n);
            rc = PC_MPI_CHECK_PEER(MPI_Send(buf, (int)ilen, MPI_BYTE, server, TAG_INIT, rt->comm),
                                   server, why, sizeof(why));
            continue;
        }
        rc = PC_MPI_CHECK_PEER(MPI_Recv(buf, (int)cap, MPI_BYTE, server, TAG_INIT, rt->comm, &st),
                               server, why, sizeof(why));
        if (rc == PC_OK)
            rc = PC_MPI_CHECK_PEER(MPI_Get_count(&st, MPI_BYTE, &count), server, why, sizeof(why));
        if (rc == PC_OK)
            rc = pc_rt__init_apply(buf, (size_t)count, c->id, c->p, c->n, why, sizeof(why));
    }
    if (rc != PC_OK)
        return WFAIL(rt, me, rc, "the layout and initial parameters: %s", why);
    return PC_OK;
}

/* allreduce: chunk c's sum buffer, and its optimizer state (momentum, Adam's moments) when
 * the optimizer has one (the model lives on the workers). */
static int ar_chunk_init(pc_worker_t *w, wchunk_t *c, wthread_t *me)
{
    c->sum = malloc(sizeof(float) * c->n);
    int orc = pc_optim_state_alloc(&w->rt->optim, c->n, &c->opt);
    if (!c->sum || orc != PC_OK)
        return WFAIL(w->rt, me, PC_ENOMEM, "out of memory for chunk %u", c->id);
    return PC_OK;
}

/* Lane me's arrays (wthread_t) for its chunks [lo, hi): its queue, send window, pending
 * counts, views. PC_ENOMEM, or PC_OK. Backprop thread, at start. */
static int lane_alloc(pc_worker_t *w, wthread_t *me, int lo, int hi)
{
    me->w = w;
    me->lo = lo;
    me->hi = hi;
    me->queue = (rt_queue_t){.slot = malloc(sizeof(int) * (size_t)(hi > lo ? hi - lo : 1)),
                             .cap = (size_t)(hi - lo),
                             .forward = w->rt->cfg.priority == PC_PRIORITY_FORWARD};
    me->inflight = calloc((size_t)(w->rt->nservers > 0 ? w->rt->nservers : 1), sizeof(size_t));
    me->tensor_pending = malloc(sizeof(int) * (size_t)w->ntensors);
    me->view = calloc((size_t)w->ntensors, sizeof(*me->view));
    me->not_before = calloc((size_t)w->ntensors, sizeof(*me->not_before));
    if (!me->queue.slot || !me->inflight || !me->tensor_pending || !me->view || !me->not_before)
        return PC_ENOMEM;
    return PC_OK;
}

/* Free lane me's arrays and its own codecs (lane_alloc, ps_chunk_init), its queues and
 * event; its thread is joined. */
static void lane_free(wthread_t *me)
{
    free(me->queue.slot);
    free(me->inflight);
    free(me->tensor_pending);
    free(me->view);
    free(me->not_before);
    free(me->gather);
    if (me->index > 0) { /* lane 0's codecs are the worker's */
        pc_codec_destroy(me->codec);
        pc_codec_destroy(me->codec_dense);
    }
    pc_spsc_destroy(me->q_ready);
    pc_spsc_destroy(me->q_back);
    pc_event_destroy(me->ev);
    /* Its err, track, index and rc stay (w->main's err may hold start's failure). */
    me->queue = (rt_queue_t){0};
    me->inflight = NULL;
    me->tensor_pending = NULL;
    me->view = NULL;
    me->not_before = NULL;
    me->gather = NULL;
    me->gather_cap = 0;
    me->codec = me->codec_dense = NULL;
    me->q_ready = me->q_back = NULL;
    me->ev = NULL;
    me->lo = me->hi = 0;
}

/* Deal the chunks to the lanes by their work (pc_plan_deal: chunk i, whose work is
 * [S_i, S_i + w_i) of W, to lane floor(N (2 S_i + w_i) / 2W), so each lane's chunks are
 * contiguous; w_i is pc_codec_work's, or 2 n_i for a chunk that travels uncompressed) into
 * lane[0..nchunks). PC_OK, PC_ENOMEM or PC_EINVAL. Backprop thread. */
static int deal_lanes(pc_worker_t *w, int nl, int *lane)
{
    int nc = w->plan->nchunks;
    uint64_t *work = malloc((size_t)nc * sizeof(*work) + 1);
    if (!work)
        return PC_ENOMEM;
    for (int i = 0; i < nc; i++) {
        size_t n = w->plan->chunks[i].n;
        work[i] = pc_rt__chunk_dense(w->rt, n) ? 2 * (uint64_t)n : pc_codec_work(&w->rt->spec, n);
    }
    int rc = pc_plan_deal(w->plan, nl, work, lane);
    free(work);
    return rc;
}

/* Deal the chunks to the lanes (deal_lanes) and allocate each lane's arrays:
 * w->comp[0..ncomp) pipelined, else the backprop thread's w->main takes every chunk.
 * Backprop thread. */
static int setup_lanes(pc_worker_t *w)
{
    int nl = w->pipelined ? w->rt->ncomp : 1;
    if (w->pipelined) {
        w->comp = calloc((size_t)nl, sizeof(wthread_t));
        if (!w->comp)
            return WFAIL(w->rt, &w->main, PC_ENOMEM, "out of memory");
        w->ncomp = nl;
        for (int k = 0; k < nl; k++) {
            w->comp[k].index = k;
            w->comp[k].track = TRACK_COMPRESSOR + k;
            atomic_init(&w->comp[k].rc, PC_OK);
            for (int i = 0; i < RING; i++)
                atomic_init(&w->comp[k].busy_ns[i], 0);
        }
    }
    /* The deal into ready_list, free until the pipeline runs. */
    int drc = deal_lanes(w, nl, w->ready_list);
    if (drc != PC_OK)
        return WFAIL(w->rt, &w->main, drc, "cannot deal the chunks to %d threads", nl);
    int lo = 0;
    for (int k = 0; k < nl; k++) {
        int hi = lo;
        while (hi < w->nchunks && w->ready_list[hi] == k) /* contiguous, in order */
            w->chunks[hi++].lane = k;
        wthread_t *me = w->pipelined ? &w->comp[k] : &w->main;
        if (lane_alloc(w, me, lo, hi) != PC_OK)
            return WFAIL(w->rt, &w->main, PC_ENOMEM, "out of memory");
        for (int t = 0; t < w->ntensors; t++) {
            int a = w->tensors[t].first_chunk > lo ? w->tensors[t].first_chunk : lo;
            int b = w->tensors[t].last_chunk < hi - 1 ? w->tensors[t].last_chunk : hi - 1;
            me->tensor_pending[t] = b >= a ? b - a + 1 : 0;
        }
        lo = hi;
    }
    assert(lo == w->nchunks); /* the last lane's share ends at T */
    for (int t = 0; t < w->ntensors; t++) {
        w->tensors[t].first_lane = w->chunks[w->tensors[t].first_chunk].lane;
        w->tensors[t].last_lane = w->chunks[w->tensors[t].last_chunk].lane;
    }
    return PC_OK;
}

/* The per-chunk arrays and each chunk's fields from the plan, the lanes (setup_lanes); the
 * mode's chunk init (ps_chunk_init, ar_chunk_init) allocates the rest. */
static int setup_chunks(pc_worker_t *w)
{
    size_t nc = (size_t)w->plan->nchunks;
    w->nchunks = w->plan->nchunks;
    w->chunks = calloc(nc, sizeof(wchunk_t));
    w->sends = malloc(sizeof(MPI_Request) * nc);
    w->recvs = malloc(sizeof(MPI_Request) * nc);
    w->done_idx = malloc(sizeof(int) * nc);
    w->statuses = malloc(sizeof(MPI_Status) * nc);
    w->ready_list = malloc(sizeof(int) * nc);
    w->rel_seen = calloc((size_t)w->ntensors, 1);
    /* pc_worker_breakdown's gather (and, after it, a scratch column for the medians):
     * allocated here so that the collective never fails on one rank alone. */
    w->bd_send = malloc(sizeof(double) * BD_RING * BD_FIELDS);
    w->bd_all = malloc(sizeof(double) * BD_RING * (BD_FIELDS + 1) * (size_t)w->rt->nworkers);
    w->released = 0;
    w->have_bad_rel = false;
    w->nhist = 0;
    if (!w->chunks || !w->sends || !w->recvs || !w->done_idx || !w->statuses || !w->ready_list ||
        !w->rel_seen || !w->bd_send || !w->bd_all)
        return WFAIL(w->rt, &w->main, PC_ENOMEM, "out of memory");
    for (int ci = 0; ci < w->nchunks; ci++)
        w->sends[ci] = w->recvs[ci] = MPI_REQUEST_NULL;
    for (int t = 0; t < w->ntensors; t++) {
        w->tensors[t].first_chunk = w->plan->tensor_first_chunk[t];
        w->tensors[t].last_chunk = w->plan->tensor_last_chunk[t];
    }
    int lrc = setup_lanes(w);
    if (lrc != PC_OK)
        return lrc;
    w->total_n = 0;
    for (int t = 0; t < w->ntensors; t++)
        w->total_n += w->tensors[t].n;
    w->step_deadline = 0;
    for (int ci = 0; ci < w->nchunks; ci++) {
        const pc_plan_chunk_t *pc = &w->plan->chunks[ci];
        wchunk_t *c = &w->chunks[ci];
        c->id = pc->id;
        c->server = pc->server;
        c->first_tensor = pc->first_tensor;
        c->last_tensor = pc->last_tensor;
        c->offset = pc->offset;
        c->n = pc->n;
        c->rows = pc->rows;
        c->remaining = pc->n;
        c->p = w->tensors[pc->first_tensor].p + pc->offset;
        c->g = w->tensors[pc->first_tensor].g + pc->offset;
        c->gin = c->g;
        atomic_init(&c->version, 0);
        int rc = w->ops->servers ? ps_chunk_init(w, c, &w->main) : ar_chunk_init(w, c, &w->main);
        if (rc == PC_OK)
            rc = pc_rt__w_dev_chunk_init(w, c);
        if (rc != PC_OK)
            return rc;
    }
    pc_rt__w_dev_log(w);
    return PC_OK;
}

/* Worker 0's parameters become everyone's. Collective over the workers. */
static int broadcast_params(pc_worker_t *w)
{
    pc_runtime_t *rt = w->rt;
    char why[256];
    for (int t = 0; t < w->ntensors; t++) {
        int rc = PC_MPI_CHECK(
            MPI_Bcast(w->tensors[t].p, (int)w->tensors[t].n, MPI_FLOAT, 0, rt->workers), why,
            sizeof(why));
        if (rc != PC_OK)
            return WFAIL(rt, &w->main, rc, "broadcasting parameters: %s", why);
    }
    return PC_OK;
}

/* Begin at iteration resume: every chunk's version says its parameters are current. */
static void set_iteration(pc_worker_t *w, uint64_t resume)
{
    w->iter = resume;
    w->clip_first = resume; /* the servers' first iteration too (the layout's resume) */
    for (int ci = 0; ci < w->nchunks; ci++)
        /* Relaxed: before the compressor thread starts (pthread_create orders it), no reader
         * yet. */
        atomic_store_explicit(&w->chunks[ci].version, resume, memory_order_relaxed);
    if (resume) {
        w->last_ckpt = resume;
        w->have_ckpt = true;
    }
}

/* --pipeline on: each lane's two queues and wake-up, then the compressor threads (the
 * last step: if a thread cannot be created, those already running are stopped and joined
 * by start's cleanup, release_started). */
static int start_pipeline(pc_worker_t *w)
{
    if (!w->pipelined)
        return PC_OK;
    size_t cap = pow2_at_least(4 * (size_t)(w->ntensors + w->nchunks));
    int rc = pc_event_create(&w->ev_main);
    if (rc != PC_OK)
        return WFAIL(w->rt, &w->main, rc, "cannot create the pipeline's wake-up events: %s",
                     pc_strerror(rc));
    for (int k = 0; k < w->ncomp; k++) {
        wthread_t *me = &w->comp[k];
        if (pc_spsc_create(cap, sizeof(desc_t), &me->q_ready) != PC_OK ||
            pc_spsc_create(pow2_at_least(4 * (size_t)w->ntensors), sizeof(rel_t), &me->q_back) !=
                PC_OK)
            return WFAIL(w->rt, &w->main, PC_ENOMEM, "out of memory for the queues");
        if ((rc = pc_event_create(&me->ev)) != PC_OK)
            return WFAIL(w->rt, &w->main, rc, "cannot create the pipeline's wake-up events: %s",
                         pc_strerror(rc));
    }
    for (int k = 0; k < w->ncomp; k++) {
        if (pthread_create(&w->comp[k].thread, NULL, pc_rt__w_compressor_main, &w->comp[k]) != 0)
            return WFAIL(w->rt, &w->main, PC_ETHREAD, "cannot start compressor thread %d", k);
        w->comp[k].started = true;
    }
    return PC_OK;
}

/* Free what pc_worker_start built (no compressor thread is running and no request is
 * pending), leaving a registered worker. Start's cleanup path, and destroy's. */
static void release_started(pc_worker_t *w)
{
    pc_rt__w_dev_release(w);
    for (int k = 0; k < w->ncomp; k++)
        lane_free(&w->comp[k]);
    free(w->comp);
    w->comp = NULL;
    w->ncomp = 0;
    lane_free(&w->main); /* --pipeline off: its lane */
    for (int c = 0; c < w->nchunks; c++) {
        wchunk_t *k = &w->chunks[c];
        pc_codec_state_destroy(k->st);
        free(k->lr_q);
        free(k->lr_row);
        free(k->mean);
        free(k->sendbuf);
        free(k->recvbuf);
        free(k->sum);
        pc_optim_state_free(&k->opt);
    }
    free(w->chunks);
    free(w->sends);
    free(w->recvs);
    free(w->done_idx);
    free(w->statuses);
    free(w->ready_list);
    free(w->rel_seen);
    free(w->bd_send);
    free(w->bd_all);
    pc_plan_destroy(w->plan);
    pc_codec_destroy(w->codec);
    pc_codec_destroy(w->codec_dense);
    pc_event_destroy(w->ev_main);
    w->chunks = NULL;
    w->sends = w->recvs = NULL;
    w->statuses = NULL;
    w->done_idx = w->ready_list = NULL;
    w->rel_seen = NULL;
    w->bd_send = w->bd_all = NULL;
    w->nchunks = 0;
    w->plan = NULL;
    w->codec = w->codec_dense = NULL;
    w->ev_main = NULL;
}

int pc_worker_start(pc_worker_t *w)
{
    int rc;
    uint64_t resume = 0;
    /* What the steps below change besides what release_started frees: restored on failure,
     * so a failed start leaves the worker as registered. */
    const uint64_t iter0 = w->iter, last_ckpt0 = w->last_ckpt, hash0 = w->rt->model_hash;
    const bool have_ckpt0 = w->have_ckpt;
    w->err_agreed = false; /* set again by the steps whose failure every worker shares */
    if (w->started)
        return WFAIL(w->rt, &w->main, PC_ESTATE, "pc_worker_start called twice");
    if (w->ntensors == 0)
        return WFAIL(w->rt, &w->main, PC_EINVAL, "no tensor registered before pc_worker_start");
    if (w->user_step && w->device)
        return WFAIL(w->rt, &w->main, PC_ESTATE,
                     "pc_worker_set_user_step: device tensors have no host gradient buffer to "
                     "receive the mean gradient; register host tensors");
    if (w->ngroups && w->groups_ntensors != w->ntensors)
        return WFAIL(w->rt, &w->main, PC_ESTATE,
                     "%d tensors registered after pc_worker_set_optimizer gave %d their groups",
                     w->ntensors - w->groups_ntensors, w->groups_ntensors);
    if ((rc = plan_chunks(w)) != PC_OK || (rc = check_same_model(w)) != PC_OK ||
        (rc = pc_rt__w_choose_resume(w, &resume)) != PC_OK || (rc = check_tag_range(w)) != PC_OK)
        goto fail;
    log_plan(w);
    if ((rc = pc_rt__w_dev_start(w)) != PC_OK || (rc = setup_chunks(w)) != PC_OK ||
        (w->ops->servers && (rc = ps_share_initial(w, resume, &w->main)) != PC_OK) ||
        (resume && (rc = pc_rt__w_load(w, resume)) != PC_OK) ||
        (rc = broadcast_params(w)) != PC_OK || (rc = pc_rt__w_dev_params_up(w)) != PC_OK)
        goto fail;
    set_iteration(w, resume);
    if ((rc = start_pipeline(w)) != PC_OK) {
        pc_rt__w_stop_thread(w, true); /* those started: nothing was handed over */
        goto fail;
    }
    w->t_start = pc_time_ns();
    w->t_first_ready = 0;
    w->started = true;
    return PC_OK;
fail:
    release_started(w);
    w->iter = iter0;
    w->last_ckpt = last_ckpt0;
    w->have_ckpt = have_ckpt0;
    w->rt->model_hash = hash0;
    return rc;
}

void pc_worker_destroy(pc_worker_t *w)
{
    if (!w)
        return;
    /* Started, not finished: stop the compressor thread without draining, then settle the
     * requests it left (cancel update receives, complete or give up gradient sends). Its
     * error, if any, was already reported or no longer matters. */
    pc_rt__w_stop_thread(w, true);
    if (w->sends)
        pc_rt__w_abort_requests(w);
    release_started(w);
    free(w->tensors);
    free(w->groups);
    free(w->tensor_group);
    free(w);
}
