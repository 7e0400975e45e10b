/* pc-bench server: what one parameter server's CPU work costs per message and per
 * iteration when W workers' compressed gradients of a real model arrive (issue 46, item 3).
 * One process, no MPI: the messages are made by the real codecs in the real wire format
 * (pc_codec_compress of a synthetic gradient per worker, chunk and iteration), and the
 * server's work is the functions pc_server.c runs on each chunk, called directly:
 *   on arrival, per message: pc_rt__grad_read and pc_rt__grad_check (all of it validated);
 *   once all W are in: the dense path (zero the aggregate, W pc_rt__grad_apply at 1/W,
 *   pc_optim_step) or the sparse path (pc_rt__grad_aggregate_sparse, then
 *   pc_rt__server_sparse_update, or pc_rt__server_lazy_update for --adam-moments lazy),
 *   chosen as the server chooses (a sparsifier's messages and a sparse-friendly or lazy
 *   step); then the pull message (pc_rt__pull_encode).
 * The receives, the sends and the MPI progress are not in it: this is the CPU cost the
 * network cannot hide. The chunk plan is the runtime's (pc_plan over the trace's tensors,
 * --chunk-bytes, --compress-min-bytes: the small chunks travel with codec none and their
 * step takes the codec's momentum, as pc_rt__chunk_optim_from does), the optimizer the
 * configuration pc-train would resolve (pc_config_check; --optimizer, --adam-moments; with
 * adam(w) a sparsifier's spec without warmup= gets warmup=0, the steady state), and
 * with --servers S the busiest server's chunks are timed. The figures: milliseconds per
 * iteration of that server, per message, and the share of the trace's compute time
 * (pc_trace_compute_ms) they take; one server keeps up when its iteration fits in the GPU's,
 * and "S for 1x" is the servers that would need at these rates (the work divides by the
 * elements each owns). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_config.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_flags.h"
#include "pipecompress/pc_optim.h"
#include "pipecompress/pc_philox.h"
#include "pipecompress/pc_plan.h"
#include "pipecompress/pc_time.h"
#include "pipecompress/pc_trace.h"
#include "runtime/runtime_proto.h"
#include "runtime/runtime_server.h"

/* The longest --codecs and --workers lists. */
#define SERVER_MAX_CODECS  16
#define SERVER_MAX_WORKERS 8
#define SERVER_MAX_W       1024 /* workers of one run */

typedef struct opts {
    int reps;
    int servers;
    char trace[512];
    char workers[128];
    char codecs[512];
    int64_t chunk_bytes; /* 0: pc-train's default */
    int64_t compress_min_bytes;
    int optimizer;    /* pc-train's --optimizer: a pc_optim_kind_t */
    int adam_moments; /* pc-train's --adam-moments: a pc_config_adam_moments_t */
} opts_t;

static const pc_flags_t server_opts[] = {
    BENCH_OPT_REPS(opts_t),
    {.name = "trace",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, trace),
     .size = 512,
     .metavar = "FILE",
     .help = "the model's tensors and its GPU iteration (a pc-train replay trace)"},
    {.name = "workers",
     .short_name = 'w',
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, workers),
     .size = 128,
     .metavar = "W,W,...",
     .help = "workers whose messages each server aggregates, a run per value (1..1024)"},
    {.name = "codecs",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, codecs),
     .size = 512,
     .metavar = "SPEC;SPEC;...",
     .help = "the --compress specs measured, separated by ';'"},
    {.name = "servers",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, servers),
     .min = 1,
     .max = 1024,
     .metavar = "S",
     .help = "servers the chunks are dealt to (pc-train's --servers); the busiest is timed"},
    BENCH_OPT_CHUNKING(opts_t, -1, "largest chunk of a tensor (default: pc-train's)",
                       "chunks smaller than this travel uncompressed (default: pc-train's)"),
    {.name = "optimizer",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(opts_t, optimizer),
     .choices = PC_OPTIM_KIND_CHOICES,
     .help = "the servers' step (pc-train's --optimizer; adam and adamw turn a sparsifier's "
             "default momentum correction off and refuse a momentum= above 0 in its spec)"},
    {.name = "adam-moments",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(opts_t, adam_moments),
     .choices = PC_CONFIG_ADAM_MOMENTS_TABLE(PC_FLAGS_CHOICE_TEXT) + 1,
     .help = "adam, adamw: pc-train's --adam-moments (lazy: the sparsifiers' chunks step "
             "their arrived entries only, O(nnz); auto: each codec's default, lazy for topk)"},
};

/* One chunk the timed server owns, with every worker's message of it. */
typedef struct bchunk {
    uint32_t id;
    size_t n;
    pc_codec_t *codec; /* the run's, or none under --compress-min-bytes (borrowed) */
    pc_optim_cfg_t optim;
    bool sparse;
    float *p, *agg;
    uint32_t *changed;
    pc_optim_state_t st;
    rt_sparse_t sp;
    uint8_t **msgs; /* W messages */
    size_t *lens;
    uint8_t *pull;
} bchunk_t;

/* One run's measurement, summed over the timed server's chunks; medians over reps. */
typedef struct bresult {
    double ms_check, ms_aggregate, ms_step, ms_pull, ms_total; /* per iteration */
    size_t msgs, bytes_in, elems;
    int chunks, sparse; /* the timed server's chunks, those on the sparse path */
} bresult_t;

static int parse_workers(const char *s, int *w, int max)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > SERVER_MAX_W || n == max || (*end && *end != ','))
            return -1;
        w[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return n;
}

/* A synthetic gradient of chunk c from worker w: heavy-tailed values of both signs (about
 * what a trained network's gradients look like to a sparsifier), different per worker. */
static void gradient(float *g, size_t n, int w, uint32_t c)
{
    pc_philox_t r;
    pc_philox_init(&r, 0x5e17e5u + (uint64_t)w, c, 0);
    for (size_t i = 0; i < n; i++) {
        uint32_t a = pc_philox_next(&r);
        float u = pc_philox_uniform(a | 1u);
        g[i] = ((a & 1u) ? -1e-3f : 1e-3f) * (u < 1e-6f ? 1e6f : 1.0f / u) * 1e-2f;
    }
}

static void chunk_free(bchunk_t *k, int W)
{
    for (int w = 0; k->msgs && w < W; w++)
        free(k->msgs[w]);
    free(k->msgs);
    free(k->lens);
    free(k->p);
    free(k->agg);
    free(k->changed);
    free(k->pull);
    pc_optim_state_free(&k->st);
    pc_rt__sparse_free(&k->sp);
}

/* Set up chunk k (id, n) for W workers: its codec and step as a server's, the workers'
 * messages of iteration 0 (each worker's codec state of the chunk, fresh). */
static int chunk_setup(bchunk_t *k, const pc_plan_chunk_t *pc, const pc_config_t *cfg,
                       const pc_codec_spec_t *spec, const pc_optim_cfg_t *optim, pc_codec_t *codec,
                       pc_codec_t *dense, int W, float *g)
{
    k->id = pc->id;
    k->n = pc->n;
    bool small = (int64_t)(k->n * sizeof(float)) < cfg->compress_min_bytes;
    k->codec = small ? dense : codec;
    k->optim = *optim;
    if (k->optim.kind == PC_OPTIM_SGD && k->optim.momentum == 0 && small)
        k->optim.momentum = pc_codec_worker_momentum(spec);
    k->sparse = (pc_optim_sparse_friendly(&k->optim) || pc_optim_lazy(&k->optim)) &&
                pc_rt__grad_sparse(k->codec);
    k->p = malloc(sizeof(float) * k->n);
    k->agg = k->sparse ? calloc(k->n, sizeof(float)) : malloc(sizeof(float) * k->n);
    k->changed = malloc(sizeof(uint32_t) * k->n);
    k->pull = malloc(pc_rt__pull_max_bytes(k->n));
    k->msgs = calloc((size_t)W, sizeof(uint8_t *));
    k->lens = calloc((size_t)W, sizeof(size_t));
    if (!k->p || !k->agg || !k->changed || !k->pull || !k->msgs || !k->lens ||
        pc_optim_state_alloc(&k->optim, k->n, &k->st) != PC_OK) {
        fprintf(stderr, "pc-bench: server: out of memory for chunk %u\n", k->id);
        return BENCH_EXIT_FAIL;
    }
    for (size_t i = 0; i < k->n; i++)
        k->p[i] = 0.01f * (float)(i % 97) - 0.5f;
    size_t cap = pc_codec_max_bytes(k->codec, k->n);
    for (int w = 0; w < W; w++) {
        pc_codec_state_t *st;
        if (pc_codec_state_create(k->codec, k->id, k->n, &st) != PC_OK ||
            !(k->msgs[w] = malloc(cap))) {
            fprintf(stderr, "pc-bench: server: out of memory for chunk %u's messages\n", k->id);
            return BENCH_EXIT_FAIL;
        }
        gradient(g, k->n, w, k->id);
        int rc = pc_codec_compress(k->codec, st, g, 0, k->msgs[w], cap, &k->lens[w]);
        pc_codec_state_destroy(st);
        if (rc != PC_OK) {
            fprintf(stderr, "pc-bench: server: compressing chunk %u: %s\n", k->id, pc_strerror(rc));
            return BENCH_EXIT_FAIL;
        }
    }
    return 0;
}

/* One iteration of the server on chunk k: what pc_server.c's on_grad (W times) and
 * complete_chunk do, without MPI. Adds its times (seconds) to t[0..4): check, aggregate,
 * step, pull. */
static int chunk_iteration(bchunk_t *k, const pc_optim_cfg_t *run_optim, int pull_mode, int W,
                           rt_grad_t *grads, double *t)
{
    char why[256];
    int64_t t0 = pc_time_ns();
    for (int w = 0; w < W; w++) {
        pc_codec_expect_t want = {.chunk = k->id, .n = (uint32_t)k->n, .iteration = 0};
        int rc = pc_rt__grad_read(k->msgs[w], k->lens[w], &grads[w], why, sizeof(why));
        if (rc == PC_OK)
            rc = pc_rt__grad_check(k->codec, &grads[w], &want, why, sizeof(why));
        if (rc != PC_OK) {
            fprintf(stderr, "pc-bench: server: chunk %u, worker %d: %s\n", k->id, w, why);
            return BENCH_EXIT_FAIL;
        }
    }
    int64_t t1 = pc_time_ns(), t2;
    double lr = pc_optim_lr(run_optim, 0);
    size_t nchanged;
    const uint32_t *changed = k->changed;
    if (k->sparse) {
        int failed = 0;
        int rc = pc_rt__grad_aggregate_sparse(&k->sp, k->codec, grads, W, 1.0f / (float)W, k->agg,
                                              k->n, &failed, why, sizeof(why));
        if (rc != PC_OK) {
            fprintf(stderr, "pc-bench: server: chunk %u, worker %d: %s\n", k->id, failed, why);
            return BENCH_EXIT_FAIL;
        }
        t2 = pc_time_ns();
        nchanged = pc_optim_lazy(&k->optim)
                       ? pc_rt__server_lazy_update(&k->sp, &k->optim, lr, k->p, &k->st, k->agg)
                       : pc_rt__server_sparse_update(&k->sp, &k->optim, (float)lr, k->p, k->agg);
        changed = k->sp.scratch;
    } else {
        memset(k->agg, 0, sizeof(float) * k->n);
        for (int w = 0; w < W; w++)
            if (pc_rt__grad_apply(k->codec, &grads[w], 1.0f / (float)W, k->agg, why, sizeof(why)) !=
                PC_OK) {
                fprintf(stderr, "pc-bench: server: chunk %u, worker %d: %s\n", k->id, w, why);
                return BENCH_EXIT_FAIL;
            }
        t2 = pc_time_ns();
        k->st.steps++;
        nchanged = pc_optim_step(&k->optim, lr, k->p, &k->st, k->agg, k->n, k->changed);
    }
    int64_t t3 = pc_time_ns();
    size_t len = pc_rt__pull_encode(k->pull, k->id, 0, k->p, k->n, changed, nchanged, pull_mode,
                                    (uint64_t)(t3 - t0));
    (void)len;
    int64_t t4 = pc_time_ns();
    t[0] += (double)(t1 - t0) * 1e-9;
    t[1] += (double)(t2 - t1) * 1e-9;
    t[2] += (double)(t3 - t2) * 1e-9;
    t[3] += (double)(t4 - t3) * 1e-9;
    return 0;
}

/* The configuration pc-train would run with: defaults, --compress spec, W workers and S
 * servers, resolved by pc_config_check (a sparsifier's momentum moves to the workers), into
 * cfg; *err (512 bytes) gets pc_config_check's refusal. */
static int check_config(const opts_t *o, const char *text, int W, pc_config_t *cfg, char *err)
{
    pc_config_defaults(cfg);
    snprintf(cfg->compress, sizeof(cfg->compress), "%s", text); /* the caller checked its length */
    pc_config_set_given(cfg, "compress", 1);
    cfg->optimizer = o->optimizer;
    cfg->adam_moments = o->adam_moments;
    pc_config_set_given(cfg, "optimizer", o->optimizer != PC_OPTIM_SGD);
    pc_config_set_given(cfg, "adam-moments", o->adam_moments != PC_ADAM_MOMENTS_AUTO);
    cfg->servers = o->servers;
    if (o->chunk_bytes > 0)
        cfg->chunk_bytes = o->chunk_bytes;
    if (o->compress_min_bytes >= 0)
        cfg->compress_min_bytes = o->compress_min_bytes;
    return pc_config_check(cfg, W + o->servers, err, 512);
}

/* check_config on the spec as given (its refusals quote it), then for a steady state's
 * messages: Adam's default warm-up (pc_config_codec_adam_warmup: dense=1000 where a
 * sparsifier's spec gives neither warmup= nor dense=) would make them its first, dense
 * ones, so such a spec runs with warmup=0 (top-k's and DGC's v, frozen after that warm-up
 * in a run, moves here: this times the step with v moving, one store per entry more than a
 * frozen v's). */
static int run_config(const opts_t *o, const char *spec_text, int W, pc_config_t *cfg)
{
    char err[512], steady[sizeof(cfg->compress)];
    if (strlen(spec_text) >= sizeof(cfg->compress) - sizeof(",warmup=0")) {
        fprintf(stderr, "pc-bench: server: --codecs: spec too long: %s\n", spec_text);
        return BENCH_EXIT_USAGE;
    }
    if (check_config(o, spec_text, W, cfg, err) != PC_OK) {
        fprintf(stderr, "pc-bench: server: --codecs %s: %s\n", spec_text, err);
        return BENCH_EXIT_USAGE;
    }
    pc_codec_spec_t spec;
    pc_codec_spec_parse(spec_text, &spec, NULL, 0); /* checked above */
    if (spec.id == PC_CODEC_POWERSGD) {
        fprintf(stderr,
                "pc-bench: server: --codecs %s: powersgd's two rounds are not measured here "
                "(its P and Q messages need a server round trip)\n",
                spec_text);
        return BENCH_EXIT_USAGE;
    }
    if (o->optimizer == PC_OPTIM_SGD || spec.warmup_given || spec.dense_given ||
        (spec.id != PC_CODEC_TOPK && spec.id != PC_CODEC_DGC))
        return 0;
    snprintf(steady, sizeof(steady), "%s%swarmup=0", spec_text, strchr(spec_text, ':') ? "," : ":");
    if (check_config(o, steady, W, cfg, err) != PC_OK) { /* the same flags, one key more */
        fprintf(stderr, "pc-bench: server: --codecs %s: %s\n", spec_text, err);
        return BENCH_EXIT_USAGE;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Measure one codec at W workers over the trace's tensors (tensors, nt); *res. */
static int measure(const opts_t *o, const char *spec_text, int W, const pc_plan_tensor_t *tensors,
                   int nt, bresult_t *res)
{
    pc_config_t cfg;
    int status = run_config(o, spec_text, W, &cfg);
    if (status != 0)
        return status;
    pc_codec_spec_t spec;
    char err[512];
    if (pc_codec_spec_parse(cfg.compress, &spec, err, sizeof(err)) != PC_OK) {
        fprintf(stderr, "pc-bench: server: --codecs %s: %s\n", spec_text, err);
        return BENCH_EXIT_USAGE;
    }
    spec.seed = (uint64_t)cfg.seed;
    pc_codec_spec_t none;
    pc_codec_spec_parse("none", &none, NULL, 0);
    pc_optim_cfg_t optim;
    pc_config_optim(&cfg, &optim);
    pc_codec_t *codec = NULL, *dense = NULL;
    pc_plan_t *plan = NULL;
    bchunk_t *ks = NULL;
    rt_grad_t *grads = calloc((size_t)W, sizeof(rt_grad_t));
    double *samples = calloc(5 * (size_t)o->reps, sizeof(double));
    float *g = NULL;
    int nk = 0;
    if (!grads || !samples || pc_codec_create(&spec, &codec) != PC_OK ||
        pc_codec_create(&none, &dense) != PC_OK ||
        pc_plan_create(tensors, nt, (size_t)cfg.chunk_bytes / sizeof(float), o->servers, &plan) !=
            PC_OK) {
        fprintf(stderr, "pc-bench: server: cannot set up %s\n", spec_text);
        status = BENCH_EXIT_FAIL;
        goto out;
    }
    /* The busiest server: the most elements. */
    int busiest = 0;
    size_t nmax = 0;
    for (int c = 0; c < plan->nchunks; c++)
        nmax = plan->chunks[c].n > nmax ? plan->chunks[c].n : nmax;
    for (int s = 1; s < plan->nservers; s++)
        if (plan->server_elems[s] > plan->server_elems[busiest])
            busiest = s;
    ks = calloc((size_t)plan->nchunks, sizeof(bchunk_t));
    g = malloc(sizeof(float) * nmax);
    if (!ks || !g) {
        fprintf(stderr, "pc-bench: server: out of memory\n");
        status = BENCH_EXIT_FAIL;
        goto out;
    }
    memset(res, 0, sizeof(*res));
    for (int c = 0; c < plan->nchunks && status == 0; c++) {
        if (plan->chunks[c].server != busiest)
            continue;
        status = chunk_setup(&ks[nk], &plan->chunks[c], &cfg, &spec, &optim, codec, dense, W, g);
        nk++;
        for (int w = 0; status == 0 && w < W; w++)
            res->bytes_in += ks[nk - 1].lens[w];
        res->elems += plan->chunks[c].n;
        res->chunks++;
        res->sparse += status == 0 && ks[nk - 1].sparse;
    }
    res->msgs = (size_t)nk * (size_t)W;
    /* One untimed iteration (first touches), then reps timed. */
    for (int r = -1; r < o->reps && status == 0; r++) {
        double t[4] = {0, 0, 0, 0};
        for (int i = 0; i < nk && status == 0; i++)
            status = chunk_iteration(&ks[i], &optim, cfg.pull, W, grads, t);
        if (r < 0)
            continue;
        for (int f = 0; f < 4; f++)
            samples[(size_t)f * (size_t)o->reps + (size_t)r] = t[f] * 1e3;
        samples[4 * (size_t)o->reps + (size_t)r] = (t[0] + t[1] + t[2] + t[3]) * 1e3;
    }
    if (status == 0) {
        double *med[5] = {&res->ms_check, &res->ms_aggregate, &res->ms_step, &res->ms_pull,
                          &res->ms_total};
        for (int f = 0; f < 5; f++) {
            double *s = samples + (size_t)f * (size_t)o->reps;
            qsort(s, (size_t)o->reps, sizeof(double), cmp_double);
            *med[f] = o->reps % 2 ? s[o->reps / 2] : 0.5 * (s[o->reps / 2 - 1] + s[o->reps / 2]);
        }
    }
out:
    for (int i = 0; i < nk; i++)
        chunk_free(&ks[i], W);
    free(ks);
    free(g);
    free(grads);
    free(samples);
    pc_plan_destroy(plan);
    pc_codec_destroy(codec);
    pc_codec_destroy(dense);
    return status;
}

/* --codecs split at ';' into specs (pointers into list, a copy of o->codecs of its size),
 * every spec checked as pc-train would configure it with W workers before anything is
 * measured. Returns the count (>= 1), or minus the exit status after one line on stderr.
 * Single-threaded. */
static int parse_specs(const opts_t *o, char *list, char *specs[SERVER_MAX_CODECS], int W)
{
    int nc = 0;
    strcpy(list, o->codecs);
    for (char *save = NULL, *tok = strtok_r(list, ";", &save); tok;
         tok = strtok_r(NULL, ";", &save)) {
        if (nc == SERVER_MAX_CODECS) {
            fprintf(stderr, "pc-bench: server: --codecs: more than %d specs\n", SERVER_MAX_CODECS);
            return -BENCH_EXIT_USAGE;
        }
        specs[nc++] = tok;
    }
    if (nc == 0) {
        fprintf(stderr, "pc-bench: server: --codecs: no spec given\n");
        return -BENCH_EXIT_USAGE;
    }
    for (int c = 0; c < nc; c++) {
        pc_config_t cfg;
        int bad = run_config(o, specs[c], W, &cfg);
        if (bad != 0)
            return -bad;
    }
    return nc;
}

/* The table's head: the run's what and its column titles. */
static void print_head(const opts_t *o, const pc_trace_t *tr, size_t total, int nt,
                       double compute_ms)
{
    printf("pc-bench server: one server's CPU work per iteration (validate every message, "
           "aggregate, step, encode the pull; no MPI), %s on %s: %zu parameters in %d tensors, "
           "compute %.1f ms per iteration; --servers %d (the busiest timed); optimizer %s%s; "
           "median of %d\n",
           pc_trace_model(tr), pc_trace_device(tr), total, nt, compute_ms, o->servers,
           pc_optim_kind_name(o->optimizer),
           o->optimizer == PC_OPTIM_SGD ? ""
           : o->adam_moments == PC_ADAM_MOMENTS_AUTO
               ? ", each codec's default moments (lazy for topk, else dense)"
           : o->adam_moments == PC_ADAM_MOMENTS_LAZY ? ", lazy moments"
                                                     : ", dense moments",
           o->reps);
    printf("%-28s %4s %9s %6s %10s %9s %9s %9s %9s %9s %9s %8s %6s\n", "codec", "W", "sparse",
           "msgs", "MB in", "check ms", "aggr ms", "step ms", "pull ms", "total ms", "us/msg",
           "of iter", "S 1x");
}

int bench_server_main(int argc, char **argv)
{
    opts_t o = {.reps = 3,
                .servers = 1,
                .trace = "traces/resnet50-a100-amp.json",
                .workers = "4,8",
                .codecs = "topk:ratio=0.01;dgc:ratio=0.001;fp16;qsgd:levels=16",
                .chunk_bytes = 0,
                .compress_min_bytes = -1,
                .adam_moments = PC_ADAM_MOMENTS_AUTO};
    pc_flags_group_t grp = {"pc-bench server flags", server_opts,
                            sizeof(server_opts) / sizeof(server_opts[0]), &o, NULL};
    char err[512] = "";
    int rc = pc_flags_parse(&grp, 1, argc, argv, NULL, err, sizeof(err));
    int early =
        pc_flags_finish(rc, &grp, 1, "pc-bench", "pc-bench server [flags]", err, 1, stdout, stderr);
    if (early >= 0)
        return early;
    int workers[SERVER_MAX_WORKERS];
    int nw = parse_workers(o.workers, workers, SERVER_MAX_WORKERS);
    if (nw <= 0) {
        fprintf(stderr,
                "pc-bench: server: --workers '%s': expected a comma list of 1..%d counts, each "
                "1..%d\n",
                o.workers, SERVER_MAX_WORKERS, SERVER_MAX_W);
        return BENCH_EXIT_USAGE;
    }
    char *specs[SERVER_MAX_CODECS];
    char list[sizeof(o.codecs)];
    int nc = parse_specs(&o, list, specs, workers[0]);
    if (nc < 0)
        return -nc;
    pc_trace_t *tr;
    if (pc_trace_load(o.trace, &tr, err, sizeof(err)) != PC_OK) {
        fprintf(stderr, "pc-bench: server: --trace: %s\n", err);
        return BENCH_EXIT_USAGE;
    }
    int nt = 0;
    for (int l = 0; l < pc_trace_nlayers(tr); l++)
        nt += pc_trace_nparams(tr, l);
    size_t total = pc_trace_total_params(tr);
    pc_plan_tensor_t *tensors = calloc((size_t)(nt ? nt : 1), sizeof(pc_plan_tensor_t));
    /* One slab of parameters, as the engine keeps them: adjacent tensors, so the plan
     * groups the small ones as the runtime's does. Never read. */
    float *slab = malloc(sizeof(float) * (total ? total : 1));
    if (!tensors || !slab) {
        fprintf(stderr, "pc-bench: server: out of memory for %zu parameters\n", total);
        free(tensors);
        free(slab);
        pc_trace_destroy(tr);
        return BENCH_EXIT_FAIL;
    }
    size_t off = 0;
    for (int l = 0, i = 0; l < pc_trace_nlayers(tr); l++)
        for (int j = 0; j < pc_trace_nparams(tr, l); j++, i++) {
            tensors[i].n = pc_trace_param_numel(tr, l, j);
            tensors[i].param = slab + off;
            tensors[i].grad = slab + off;
            off += tensors[i].n;
        }
    double compute_ms = pc_trace_compute_ms(tr);
    print_head(&o, tr, total, nt, compute_ms);
    int status = 0;
    for (int c = 0; c < nc && status == 0; c++)
        for (int i = 0; i < nw && status == 0; i++) {
            bresult_t r;
            status = measure(&o, specs[c], workers[i], tensors, nt, &r);
            if (status != 0)
                break;
            double share = r.ms_total / compute_ms;
            /* Servers for the work to fit one iteration: it divides by the elements each
             * server owns (all of them at the busiest's rate, over the compute time). */
            double s_need = ceil(share * (double)total / (double)(r.elems ? r.elems : 1));
            char sp[32];
            snprintf(sp, sizeof(sp), "%d/%d", r.sparse, r.chunks);
            printf("%-28.28s %4d %9s %6zu %10.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %7.1f%% "
                   "%6.0f\n",
                   specs[c], workers[i], sp, r.msgs, (double)r.bytes_in / 1e6, r.ms_check,
                   r.ms_aggregate, r.ms_step, r.ms_pull, r.ms_total,
                   r.msgs ? r.ms_total * 1e3 / (double)r.msgs : 0.0, 100.0 * share,
                   s_need < 1 ? 1 : s_need);
            fflush(stdout);
        }
    if (status == 0)
        printf("sparse: the timed server's chunks on the O(nnz) path / all; check: "
               "pc_rt__grad_read + _check of every message; aggr: the W messages summed "
               "(sparse path: over the touched entries); step: the optimizer; pull: the pull "
               "message; of iter: total over the trace's compute; S 1x: servers for one "
               "iteration's work to fit the compute time\n");
    free(tensors);
    free(slab);
    pc_trace_destroy(tr);
    return status;
}
