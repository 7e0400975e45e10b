/* pc-train: train a network on Fashion-MNIST (or synthetic data), data-parallel over MPI
 * ranks, with compressed gradients pipelined to parameter servers.
 *
 *   mpirun -np 3 pc-train                      2 workers + 1 server, mlp, top-k 1%
 *   mpirun -np 3 pc-train --model cnn --epochs 5 --compress none
 *   pc-train --eval-model model.pcm            evaluate a saved model
 *   mpirun -np 3 pc-train --model replay:traces/resnet50-a100-amp.json
 *                                              a GPU's compute replayed (doc/replay.md)
 *
 * Exit status: 0 done; 1 a failure (message on stderr; the job is aborted); 2 bad usage;
 * 128 + N stopped cleanly by signal N (SIGINT, SIGTERM) at an iteration boundary, on every
 * rank, after a final checkpoint when --checkpoint-dir is set (resume with --resume); a
 * stopped run does not write --save-model. */
#include "config.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <mpi.h>

#include "pipecompress/pipecompress.h"

/* --model's buffer: a model's name, or replay: and a trace file's path. */
#define MODEL_SPEC_LEN 1100

typedef struct train_opts {
    char model_spec[MODEL_SPEC_LEN]; /* --model as given */
    int model;                       /* the engine's model (a pc_model_kind_t), without replay */
    pc_trace_t *trace;               /* --model replay:PATH: the trace, loaded by check_flags */
    double pcie_gbps;                /* --pcie-gbps: the replay's host copies */
    char data[1024];
    int epochs;
    int batch;
    double dropout;
    char save_model[1024];
    char eval_model[1024];
    int synthetic_n;
    uint64_t given; /* bit i: train_opts[i] was on the command line */
} train_opts_t;

/* The prefix of --model that replays a trace instead of training a model. */
#define REPLAY_PREFIX "replay:"

/* The engine's models' names, in pc_model_kind_t's order (its table's spellings). */
#define MODEL_NAME(name, text) text,
static const char *const model_names[] = {PC_MODEL_TABLE(MODEL_NAME)};
#undef MODEL_NAME

/* --model's check (pc_flags_check_fn): one of the engine's models, or replay:PATH with a
 * path. The trace itself is read later (check_flags), on every rank alike. */
static int check_model(const void *value, char *err, size_t errlen)
{
    const char *v = value;
    size_t np = strlen(REPLAY_PREFIX);
    if (strncmp(v, REPLAY_PREFIX, np) == 0) {
        if (!v[np])
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "'%s' names no trace file (replay:PATH, doc/replay.md)", v);
        return PC_OK;
    }
    for (size_t k = 0; k < sizeof(model_names) / sizeof(model_names[0]); k++)
        if (strcmp(v, model_names[k]) == 0)
            return PC_OK;
    return pc_error_fmt(PC_EUSAGE, err, errlen, "'%s' is not one of %s|replay:PATH", v,
                        PC_MODEL_CHOICES);
}

static const pc_flags_t train_opts[] = {
    {.name = "model",
     .short_name = 'm',
     .type = PC_FLAGS_STRING,
     .offset = offsetof(train_opts_t, model_spec),
     .size = MODEL_SPEC_LEN,
     .metavar = "NAME|replay:PATH",
     .help = "network: mlp (235 k parameters), cnn (3.3 M), wide (36.9 M); or replay:PATH, a "
             "GPU's per-layer times from a trace held, all else real (doc/replay.md)",
     .check = check_model},
    {.name = "data",
     .short_name = 'd',
     .type = PC_FLAGS_STRING,
     .offset = offsetof(train_opts_t, data),
     .size = 1024,
     .metavar = "DIR|synthetic",
     .help = "Fashion-MNIST IDX directory, or synthetic data"},
    {.name = "epochs",
     .short_name = 'e',
     .type = PC_FLAGS_INT,
     .offset = offsetof(train_opts_t, epochs),
     .min = 1,
     .max = 100000,
     .metavar = "N",
     .help = "passes over the training set (--iters stops earlier)"},
    {.name = "batch",
     .short_name = 'b',
     .type = PC_FLAGS_INT,
     .offset = offsetof(train_opts_t, batch),
     .min = 1,
     .max = 65536,
     .metavar = "B",
     .help = "samples per worker per iteration"},
    {.name = "dropout",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(train_opts_t, dropout),
     .min = 0,
     .max = 0.95,
     .metavar = "P",
     .help = "cnn: dropout probability before the last layer"},
    {.name = "synthetic-samples",
     .type = PC_FLAGS_INT,
     .offset = offsetof(train_opts_t, synthetic_n),
     .min = 100,
     .max = 10000000,
     .metavar = "N",
     .help = "--data synthetic: training samples"},
    {.name = "save-model",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(train_opts_t, save_model),
     .size = 1024,
     .metavar = "FILE",
     .help = "write the final parameters (doc/model-format.md)"},
    {.name = "eval-model",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(train_opts_t, eval_model),
     .size = 1024,
     .metavar = "FILE",
     .help = "evaluate a saved model on the test set and exit"},
    {.name = "pcie-gbps",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(train_opts_t, pcie_gbps),
     .min = 0.1,
     .max = 10000,
     .metavar = "GB/S",
     .help = "--model replay: the gradients' device-to-host copy rate (24: PCIe 4.0 x16, "
             "pinned)"},
};

/* Set by SIGINT/SIGTERM (its number); the runtime stops all workers at one iteration. */
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

/* One line "pc-train: ...\n" on stderr in one write: mpirun merges the ranks' stderr, and
 * a line written in pieces can be split by another rank's. */
static void say(const char *fmt, ...)
{
    char line[2048];
    int n = snprintf(line, sizeof(line), "pc-train: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
    fflush(stderr);
}

/* A failure of this rank alone, past the start-up checks: say it and end the job. */
static void die(const char *what, const char *msg)
{
    say("%s: %s", what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* Whether the training flag `name` was on the command line. */
static bool given(const train_opts_t *o, const char *name)
{
    for (size_t i = 0; i < sizeof(train_opts) / sizeof(train_opts[0]); i++)
        if (strcmp(train_opts[i].name, name) == 0)
            return (o->given >> i) & 1;
    return false;
}

/* pc-train's flags that the resolved configuration would ignore (as
 * pc_runtime_check_config refuses the runtime's): PC_OK or PC_EUSAGE with the reason. */
static int check_training_flags(const train_opts_t *o, char *err, size_t errlen)
{
    if (given(o, "dropout") && o->model != PC_MODEL_CNN)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--dropout acts on the cnn only (the %s model has no dropout layer)",
                            pc_model_kind_name((pc_model_kind_t)o->model));
    if (given(o, "synthetic-samples") && strcmp(o->data, "synthetic") != 0)
        return pc_error_fmt(PC_EUSAGE, err, errlen, "--synthetic-samples needs --data synthetic");
    return PC_OK;
}

/* --eval-model reads --data (and --seed for synthetic data), nothing else: any other flag
 * given would do nothing. PC_OK or PC_EUSAGE naming the first such flag. */
static int check_eval_flags(const train_opts_t *o, const pc_config_t *cfg, char *err, size_t errlen)
{
    const char *idle = NULL;
    for (size_t i = 0; !idle && i < sizeof(train_opts) / sizeof(train_opts[0]); i++)
        if (((o->given >> i) & 1) && strcmp(train_opts[i].name, "data") != 0 &&
            strcmp(train_opts[i].name, "eval-model") != 0)
            idle = train_opts[i].name;
    size_t nrows;
    const pc_flags_t *rows = pc_config_options(&nrows);
    for (size_t i = 0; !idle && i < nrows; i++)
        if (pc_config_given(cfg, rows[i].name) && strcmp(rows[i].name, "seed") != 0 &&
            strcmp(rows[i].name, "log-level") != 0)
            idle = rows[i].name;
    if (idle)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--%s has no effect with --eval-model (which reads --data and, for "
                            "synthetic data, --seed); drop it",
                            idle);
    return PC_OK;
}

typedef struct ctx {
    pc_worker_t *w;
    int64_t t0; /* start of the current layer */
} ctx_t;

static int hook_param_wait(void *ud, int t)
{
    return pc_worker_param_wait(((ctx_t *)ud)->w, t);
}

static int hook_grad_ready(void *ud, int t)
{
    return pc_worker_grad_ready(((ctx_t *)ud)->w, t);
}

static void hook_layer_begin(void *ud, const char *layer, bool backward)
{
    (void)layer;
    (void)backward;
    ((ctx_t *)ud)->t0 = pc_time_ns();
}

static void hook_layer_end(void *ud, const char *layer, bool backward)
{
    ctx_t *c = ud;
    char name[40];
    snprintf(name, sizeof(name), "%s %s", backward ? "backward" : "forward", layer);
    pc_worker_trace(c->w, name, c->t0, pc_time_ns());
}

static int load_data(const train_opts_t *o, int train, uint64_t seed, pc_dataset_t *ds, char *err,
                     size_t errlen)
{
    if (strcmp(o->data, "synthetic") == 0) {
        int rc =
            pc_data_synthetic(train ? (uint32_t)o->synthetic_n : 2000, seed, train ? 0 : 1, ds);
        if (rc != PC_OK)
            snprintf(err, errlen, "synthetic data: %s", pc_strerror(rc));
        return rc;
    }
    return pc_data_load_fashion(o->data, train, ds, err, errlen);
}

/* The start-up checks, before the runtime starts and anything trains: rank 0 checks that
 * --save-model, --metrics and --timeline can be written at the end (the runtime checks the
 * last two again for every program) and creates --checkpoint-dir (checking it is
 * writable); but for a replay, the workers (ranks below W) read the training
 * set, rank 0 the test set too, and rank 0 checks that one iteration of all workers fits
 * in it. Collective over MPI_COMM_WORLD: when any rank fails, rank 0 prints the lowest
 * failing rank's reason once and every rank returns PC_EUSAGE or the failure's code (the
 * caller finalises and exits 1: no MPI_Abort, nothing written). */
static int startup_checks(const train_opts_t *o, const pc_config_t *cfg, int rank, int W,
                          pc_dataset_t *train, pc_dataset_t *test)
{
    char msg[PC_COMM_AGREE_LEN] = "", why[1024];
    int rc = PC_OK, who = -1;
    const char *const outputs[][2] = {{"--save-model", o->save_model},
                                      {"--metrics", cfg->metrics},
                                      {"--timeline", cfg->timeline}};
    for (int i = 0; rank == 0 && rc == PC_OK && i < 3; i++)
        if (outputs[i][1][0] &&
            (rc = pc_file_check_writable(outputs[i][1], why, sizeof(why))) != PC_OK)
            pc_error_fmt(rc, msg, sizeof(msg), "%s: %s", outputs[i][0], why);
    /* The checkpoint directory: created if missing (as the runtime would), writable. */
    if (rc == PC_OK && rank == 0 && cfg->checkpoint_dir[0] &&
        (rc = pc_ckpt_dir_create(cfg->checkpoint_dir, why, sizeof(why))) != PC_OK)
        pc_error_fmt(rc, msg, sizeof(msg), "--checkpoint-dir: %s", why);
    /* A replay reads no data. */
    bool data = !o->trace;
    if (rc == PC_OK && data && rank < W &&
        (rc = load_data(o, 1, (uint64_t)cfg->seed, train, why, sizeof(why))) != PC_OK)
        pc_error_fmt(rc, msg, sizeof(msg), "--data: %s", why);
    if (rc == PC_OK && data && rank == 0 &&
        (rc = load_data(o, 0, (uint64_t)cfg->seed, test, why, sizeof(why))) != PC_OK)
        pc_error_fmt(rc, msg, sizeof(msg), "--data: %s", why);
    if (rc == PC_OK && data && rank == 0 && train->n / ((uint64_t)W * (uint64_t)o->batch) == 0)
        rc = pc_error_fmt(PC_EUSAGE, msg, sizeof(msg),
                          "--batch %d: the training set (%u samples) is smaller than one "
                          "iteration of all %d workers",
                          o->batch, train->n, W);
    rc = pc_comm_agree(MPI_COMM_WORLD, rc, msg, sizeof(msg), &who);
    if (rc != PC_OK && rank == 0) {
        if (who > 0)
            say("%s (rank %d)", msg, who);
        else
            say("%s", msg);
    }
    return rc;
}

/* Accuracy of m on ds, in batches of B. */
static double evaluate(pc_model_t *m, const pc_dataset_t *ds, int B, float *x, double *loss_out)
{
    size_t P = (size_t)ds->rows * ds->cols;
    long correct = 0;
    double loss = 0;
    for (uint32_t s = 0; s < ds->n; s += (uint32_t)B) {
        int b = (int)(ds->n - s < (uint32_t)B ? ds->n - s : (uint32_t)B);
        memcpy(x, ds->images + (size_t)s * P, sizeof(float) * P * (size_t)b);
        float l;
        int ok;
        if (pc_model_forward(m, x, ds->labels + s, b, false, 0, 0, NULL, &l, &ok) != PC_OK)
            die("evaluation", pc_model_error(m));
        correct += ok;
        loss += (double)l * b;
    }
    if (loss_out)
        *loss_out = loss / ds->n;
    return (double)correct / ds->n;
}

static int eval_only(const train_opts_t *o, uint64_t seed, int rank)
{
    char err[1024];
    pc_model_kind_t kind;
    int c, h, w, classes;
    if (rank != 0)
        return 0;
    if (pc_model_file_info(o->eval_model, &kind, &c, &h, &w, &classes, err, sizeof(err)) != PC_OK) {
        fprintf(stderr, "pc-train: --eval-model: %s\n", err);
        return 1;
    }
    pc_dataset_t test;
    if (load_data(o, 0, seed, &test, err, sizeof(err)) != PC_OK) {
        fprintf(stderr, "pc-train: --data: %s\n", err);
        return 1;
    }
    pc_model_t *m;
    const int B = 256;
    if ((uint32_t)h != test.rows || (uint32_t)w != test.cols || c != 1 ||
        pc_model_create(kind, B, c, h, w, classes, 0.0f, &m) != PC_OK) {
        fprintf(stderr, "pc-train: --eval-model: the model (%dx%dx%d) does not fit the data\n", c,
                h, w);
        pc_data_free(&test);
        return 1;
    }
    if (pc_model_load(m, o->eval_model, err, sizeof(err)) != PC_OK) {
        fprintf(stderr, "pc-train: --eval-model: %s\n", err);
        pc_model_destroy(m);
        pc_data_free(&test);
        return 1;
    }
    float *x = malloc(sizeof(float) * (size_t)B * test.rows * test.cols);
    double loss, acc = evaluate(m, &test, B, x, &loss);
    printf("model %s (%s, %zu parameters): test accuracy %.2f%% (%u images), loss %.4f\n",
           o->eval_model, pc_model_kind_name(kind), pc_model_nparams(m), 100 * acc, test.n, loss);
    free(x);
    pc_model_destroy(m);
    pc_data_free(&test);
    return 0;
}

/* Iterations of a run of o->epochs over n training samples with W workers. */
static int64_t run_length(const train_opts_t *o, int W, uint32_t n)
{
    return (int64_t)(n / (uint64_t)((int64_t)W * o->batch)) * o->epochs;
}

static void fmt_eta(double s, char *buf, size_t len)
{
    if (!(s >= 0) || s > 1e7)
        s = 0;
    long t = (long)(s + 0.5);
    snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

/* Iterations the progress line's medians cover (per worker), and how often every worker
 * takes the breakdown collective: often enough that a print is never long overdue, rarely
 * enough that the collective costs nothing (one small allgather per 20 iterations). */
#define PRINT_WINDOW 20

/* The end of a progress line: throughput, the medians of the last PRINT_WINDOW iterations
 * over all workers (pc_worker_breakdown), the ETA; then the line is flushed. */
static void print_breakdown(double samples, const pc_worker_breakdown_t *b, const char *eta)
{
    printf("%.0f samples/s | median of %d iters x %d workers: iter %.2f ms, compute %.2f, wait "
           "release %.2f, back-pressure %.2f, compress %.2f, network %.2f, server %.2f, inline "
           "compress %.2f | compress %.2f ms (busiest thread %.2f) exposed %.2f ms | slowest r%d "
           "compute %.2f ms | %.1f KB/iter sent | ETA %s\n",
           samples, b->window, b->workers, b->t_iteration * 1e3, b->t_compute * 1e3,
           b->t_wait_release * 1e3, b->t_wait_backpressure * 1e3, b->t_wait_compress * 1e3,
           b->t_wait_network * 1e3, b->t_wait_server * 1e3, b->t_compress_inline * 1e3,
           b->t_compress * 1e3, b->t_compress_busy * 1e3, b->t_exposed * 1e3, b->slowest,
           b->slowest_compute * 1e3, b->bytes_sent / 1024, eta);
    fflush(stdout);
}

/* The progress line: loss and accuracy since the last print, throughput, and the medians
 * of the last PRINT_WINDOW iterations over all workers (pc_worker_breakdown). */
static void print_progress(int epoch, int epochs, int64_t it, int64_t total, double loss,
                           double acc, double samples, const pc_worker_breakdown_t *b,
                           const char *eta)
{
    if (b->window == 0) { /* the first iteration: no complete iteration to take medians of */
        printf("epoch %d/%d iter %lld/%lld loss %.4f acc %.1f%% | ETA %s\n", epoch, epochs,
               (long long)it, (long long)total, loss, acc, eta);
        fflush(stdout);
        return;
    }
    printf("epoch %d/%d iter %lld/%lld loss %.4f acc %.1f%% | ", epoch, epochs, (long long)it,
           (long long)total, loss, acc);
    print_breakdown(samples, b, eta);
}

enum { AUTO_MAX_LAYERS = 16, AUTO_MAX_TENSORS = 32, AUTO_REPS = 3 };

/* The probe's model and batch, for the parameter-server layout's profile. */
typedef struct auto_ctx {
    pc_model_t *m;
    const pc_dataset_t *ds;
    int batch;
} auto_ctx_t;

/* pc_auto_profile_fn: the model profiled again (pc_auto_measure calls it on the parameter-
 * server layout's workers, at once). */
static int auto_profile(void *ctx, pc_cost_layer_t *layers, int nlayers)
{
    auto_ctx_t *a = ctx;
    pc_cost_layer_t got[AUTO_MAX_LAYERS];
    int nl = 0, tl[AUTO_MAX_TENSORS];
    int rc = pc_model_profile(a->m, a->ds->images, a->ds->labels, a->batch, AUTO_REPS, got,
                              AUTO_MAX_LAYERS, &nl, tl);
    if (rc != PC_OK)
        return rc;
    if (nl != nlayers)
        return PC_EINVAL;
    memcpy(layers, got, sizeof(*layers) * (size_t)nl);
    return PC_OK;
}

/* --mode auto: profile the model on a synthetic batch of o->batch samples (every rank at
 * once; pc_auto_choose has the parameter-server layout's workers profile it again, through
 * auto_profile), then pc_auto_choose measures the link, the codecs and the server, and
 * resolves cfg; rank 0 prints the figures and the choice. Collective; dies on failure. */
static void resolve_auto(const train_opts_t *o, pc_config_t *cfg, int rank)
{
    enum { MAX_LAYERS = AUTO_MAX_LAYERS, MAX_TENSORS = AUTO_MAX_TENSORS, REPS = AUTO_REPS };
    char err[1024];
    pc_dataset_t ds = {0};
    pc_model_t *m = NULL;
    if (pc_data_synthetic((uint32_t)o->batch, 7, 0, &ds) != PC_OK ||
        pc_model_create((pc_model_kind_t)o->model, o->batch, 1, (int)ds.rows, (int)ds.cols,
                        ds.classes, (float)o->dropout, &m) != PC_OK)
        die("--mode auto", "cannot build the model for the probe");
    if (pc_model_init(m, (uint64_t)cfg->seed) != PC_OK)
        die("--mode auto", pc_model_error(m));
    int nt = pc_model_ntensors(m), nl = 0, tensor_layer[MAX_TENSORS];
    pc_cost_layer_t layers[MAX_LAYERS];
    pc_plan_tensor_t tensors[MAX_TENSORS];
    if (nt > MAX_TENSORS || pc_model_profile(m, ds.images, ds.labels, o->batch, REPS, layers,
                                             MAX_LAYERS, &nl, tensor_layer) != PC_OK)
        die("--mode auto", "cannot profile the model's layers");
    for (int t = 0; t < nt; t++)
        tensors[t] = (pc_plan_tensor_t){pc_model_tensor_size(m, t), pc_model_tensor_param(m, t),
                                        pc_model_tensor_grad(m, t), pc_model_tensor_rows(m, t)};
    auto_ctx_t actx = {m, &ds, o->batch};
    pc_auto_probe_t probe = {.layers = layers,
                             .nlayers = nl,
                             .tensors = tensors,
                             .tensor_layer = tensor_layer,
                             .ntensors = nt,
                             .profile = auto_profile,
                             .ctx = &actx};
    pc_auto_result_t *res = malloc(sizeof(*res)); /* a few KiB: the layers' figures */
    if (!res)
        die("--mode auto", "out of memory");
    if (pc_auto_choose(cfg, MPI_COMM_WORLD, &probe, REPS, res, err, sizeof(err)) != PC_OK)
        die("--mode auto", err);
    pc_model_destroy(m);
    pc_data_free(&ds);
    if (rank == 0)
        pc_auto_print(res, o->batch, stdout);
    free(res);
}

/* --model replay:PATH's run length when --iters is not given. */
#define REPLAY_ITERS 50

/* The flags that do nothing with --model replay:PATH: refused when given, left out of the
 * printed configuration. Read-only. */
static const char *const replay_idle[] = {
    "data", "epochs", "batch", "dropout", "synthetic-samples", "save-model", "eval-model"};

/* --model: the engine's model into o->model, or, for replay:PATH, the flags that would do
 * nothing refused, the trace loaded into o->trace (every rank alike: a bad trace fails the
 * same way everywhere) and --iters defaulted. PC_OK or PC_EUSAGE with the reason. */
static int resolve_model(train_opts_t *o, pc_config_t *cfg, char *err, size_t errlen)
{
    const char *path = o->model_spec + strlen(REPLAY_PREFIX);
    if (strncmp(o->model_spec, REPLAY_PREFIX, strlen(REPLAY_PREFIX)) != 0) {
        for (size_t k = 0; k < sizeof(model_names) / sizeof(model_names[0]); k++)
            if (strcmp(o->model_spec, model_names[k]) == 0)
                o->model = (int)k;
        if (given(o, "pcie-gbps"))
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "--pcie-gbps acts on --model replay:PATH only (the %s model "
                                "copies nothing)",
                                o->model_spec);
        return PC_OK;
    }
    for (size_t i = 0; i < sizeof(replay_idle) / sizeof(replay_idle[0]); i++)
        if (given(o, replay_idle[i]))
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "--%s has no effect with --model replay:PATH (the trace gives "
                                "the layers and the batch, --iters the length); drop it",
                                replay_idle[i]);
    if (cfg->device != PC_DEVICE_CPU)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--device %s: --model replay:PATH replays the GPU; its gradients "
                            "reach the host by modelled copies: use --device cpu",
                            pc_config_device_name(cfg->device));
    if (cfg->mode == PC_MODE_AUTO)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--mode auto profiles one of the engine's models; with --model "
                            "replay:PATH choose --mode ps or --mode allreduce");
    char why[1024];
    int rc = pc_trace_load(path, &o->trace, why, sizeof(why));
    if (rc == PC_EIO) /* why names the path already */
        return pc_error_fmt(PC_EUSAGE, err, errlen, "--model: %s", why);
    if (rc != PC_OK)
        return pc_error_fmt(PC_EUSAGE, err, errlen, "--model: %s: %s", path, why);
    if (cfg->iters == 0)
        cfg->iters = REPLAY_ITERS;
    return PC_OK;
}

/* After parsing: --model (loading a replay's trace), --mode auto resolved (collective),
 * then the usage checks, before any other file is read: the runtime's (on *checked, a copy of cfg
 * with any run length when the cosine schedule's comes from the data later) and pc-train's own
 * (training flags, or
 * --eval-model's). PC_OK or PC_EUSAGE with the reason in err; --eval-model skips auto and
 * the runtime's check. */
static int check_flags(train_opts_t *o, pc_config_t *cfg, pc_config_t *checked, int rank, int size,
                       char *err, size_t errlen)
{
    int rc = resolve_model(o, cfg, err, errlen);
    if (rc == PC_OK && !o->eval_model[0] && cfg->mode == PC_MODE_AUTO) {
        /* Resolved before anything reads the mode (the run's length depends on it). */
        rc = pc_auto_check(cfg, size, err, errlen);
        if (rc == PC_OK)
            resolve_auto(o, cfg, rank);
    }
    *checked = *cfg;
    if (rc == PC_OK && !o->eval_model[0]) {
        if (checked->lr_schedule == PC_LR_COSINE && checked->iters == 0)
            checked->iters = 1;
        rc = pc_runtime_check_config(checked, size, err, errlen);
    }
    if (rc == PC_OK)
        rc = o->eval_model[0] ? check_eval_flags(o, cfg, err, errlen)
                              : check_training_flags(o, err, errlen);
    return rc;
}

/* Before the runtime starts (collective over MPI_COMM_WORLD): the start-up checks (reading
 * the data into *train and *test), the cosine schedule's run length from the training set
 * (rank 0, a worker, tells every rank: servers apply the schedule too), and the runtime's
 * check of cfg with it. PC_OK, or a failure already said once by rank 0 (the caller frees
 * the data and exits 1). */
static int prepare_run(const train_opts_t *o, pc_config_t *cfg, int rank, int size, int W,
                       pc_dataset_t *train, pc_dataset_t *test)
{
    char err[1024];
    int rc = startup_checks(o, cfg, rank, W, train, test);
    if (rc != PC_OK)
        return rc;
    if (cfg->lr_schedule == PC_LR_COSINE && cfg->iters == 0) {
        int64_t total = rank == 0 ? run_length(o, W, train->n) : 0;
        MPI_Bcast(&total, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
        cfg->iters = total; /* >= 1: startup_checks refused a set smaller than an iteration */
    }
    /* As check_flags checked, now with the run's length: fails alike on every rank, if at
     * all. */
    if ((rc = pc_runtime_check_config(cfg, size, err, sizeof(err))) != PC_OK && rank == 0)
        say("%s", err);
    return rc;
}

/* A worker's training run: its model and worker, the batch buffers, where it stands, and
 * what the progress lines sum between prints. */
typedef struct run {
    const train_opts_t *o;
    const pc_config_t *cfg;
    int rank, W, B;
    uint32_t ipe;      /* iterations per epoch (>= 1) */
    int64_t total;     /* iterations in the run */
    int64_t first, it; /* where the run began (0, or --resume's), where it is */
    int epochs;        /* the run's real length in epochs */
    const pc_dataset_t *train, *test;
    pc_model_t *m;
    pc_worker_t *w;
    float *x; /* the batch: page-locked on a GPU (one DMA per iteration) */
    uint8_t *y;
    uint32_t *perm;
    ctx_t cx;
    pc_model_hooks_t hooks;
    int64_t t0, last_print;
    double loss_sum;
    long seen, correct_sum;
    bool stop;
    double test_acc; /* the last evaluation's, -1 before any */
} run_t;

/* pc_worker_start, or the job's end: a failure every worker agreed on is said once, by
 * worker 0, whose abort ends the job; the others wait for it rather than race it with
 * their own. */
static void start_worker(pc_worker_t *w, int rank)
{
    if (pc_worker_start(w) == PC_OK)
        return;
    if (pc_worker_error_agreed(w) && rank != 0) {
        /* Never returns: worker 0 and the servers never join, and worker 0's die() below
         * (MPI_Abort) ends this rank too. */
        MPI_Barrier(MPI_COMM_WORLD);
        exit(1);
    }
    die("start", pc_worker_error(w));
}

/* The model (on this rank's GPU with --device cuda; on the CPU otherwise, its tensors
 * handed over as device memory with emulate) and the worker over it, started. */
static void setup_worker(run_t *r, pc_runtime_t *rt)
{
    const pc_config_t *cfg = r->cfg;
    char err[1024];
    int dev = cfg->device == PC_DEVICE_CUDA ? pc_runtime_gpu(rt) : PC_MODEL_CPU;
    int B = r->B, rc;
    rc = pc_model_create_on((pc_model_kind_t)r->o->model, B > 256 ? B : 256, 1, (int)r->train->rows,
                            (int)r->train->cols, r->train->classes, (float)r->o->dropout, dev,
                            &r->m, err, sizeof(err));
    if (rc == PC_EINVAL)
        die("--model", "cannot build this model for the data's shape");
    if (rc != PC_OK)
        die(dev == PC_MODEL_CPU ? "--model" : "--device", err);
    if (pc_model_init(r->m, (uint64_t)cfg->seed) != PC_OK)
        die("--device", pc_model_error(r->m));
    if (pc_worker_create(rt, &r->w, err, sizeof(err)) != PC_OK)
        die("worker", err);
    if (pc_worker_set_stream(r->w, pc_model_stream(r->m)) != PC_OK)
        die("worker", pc_worker_error(r->w));
    /* --device cuda or emulate: the tensors go through the runtime's device path. */
    int (*reg)(pc_worker_t *, const char *, float *, float *, size_t) =
        cfg->device == PC_DEVICE_CPU ? pc_worker_register : pc_worker_register_device;
    for (int t = 0; t < pc_model_ntensors(r->m); t++)
        if (reg(r->w, pc_model_tensor_name(r->m, t), pc_model_tensor_param(r->m, t),
                pc_model_tensor_grad(r->m, t), pc_model_tensor_size(r->m, t)) < 0 ||
            pc_worker_set_rows(r->w, t, pc_model_tensor_rows(r->m, t)) != PC_OK)
            die("register", pc_worker_error(r->w));
    start_worker(r->w, r->rank);
}

/* The run's length and start, said by rank 0; the batch buffers and the hooks. */
static void setup_run(run_t *r)
{
    const train_opts_t *o = r->o;
    r->total = run_length(o, r->W, r->train->n); /* ipe * --epochs */
    if (r->cfg->iters > 0 && r->cfg->iters < r->total)
        r->total = r->cfg->iters;
    /* Where to begin: 0, or the checkpoint's iteration with --resume (the data order of an
     * epoch and the dropout masks derive from the iteration, so resuming continues the very
     * same sequence). */
    r->first = r->it = pc_worker_iteration(r->w);
    /* --iters may end the run inside an earlier epoch than --epochs says (the progress line
     * counts to this one). */
    r->epochs = (int)((r->total + r->ipe - 1) / r->ipe);
    if (r->rank == 0) {
        printf("model %s, %zu parameters; %u training samples, %d workers x batch %d, %u "
               "iterations per epoch, %lld in all",
               pc_model_kind_name((pc_model_kind_t)o->model), pc_model_nparams(r->m), r->train->n,
               r->W, r->B, r->ipe, (long long)r->total);
        if (r->epochs < o->epochs || r->total % r->ipe != 0)
            printf(" (--iters %lld ends the run %s epoch %d, not after --epochs %d)",
                   (long long)r->total, r->total % r->ipe ? "inside" : "after", r->epochs,
                   o->epochs);
        else if (r->cfg->iters > r->total) /* --iters only shortens a run */
            printf(" (--iters %lld is more: the run ends after --epochs %d)",
                   (long long)r->cfg->iters, o->epochs);
        printf("\n");
        if (r->first > 0)
            printf("resumed at iteration %lld (epoch %lld)\n", (long long)r->first,
                   (long long)(r->first / r->ipe) + 1);
        fflush(stdout);
    }
    size_t P = (size_t)r->train->rows * r->train->cols;
    if (pc_model_host_alloc(r->m, sizeof(float) * P * (size_t)(r->B > 256 ? r->B : 256),
                            (void **)&r->x) != PC_OK)
        r->x = NULL;
    r->y = malloc((size_t)r->B);
    r->perm = malloc(sizeof(uint32_t) * r->train->n);
    if (!r->x || !r->y || !r->perm)
        die("memory", "out of memory");
    r->cx = (ctx_t){r->w, 0};
    r->hooks = (pc_model_hooks_t){
        .ud = &r->cx, .param_wait = hook_param_wait, .grad_ready = hook_grad_ready};
    if (r->cfg->timeline[0]) {
        r->hooks.layer_begin = hook_layer_begin;
        r->hooks.layer_end = hook_layer_end;
    }
    r->t0 = r->last_print = pc_time_ns();
    r->test_acc = -1;
}

/* Iteration i of the epoch (r->it of the run): this worker's shard of the batch (every
 * W-th sample), forward, backward, the iteration's end. */
static void train_step(run_t *r, uint32_t i)
{
    const pc_dataset_t *train = r->train;
    size_t P = (size_t)train->rows * train->cols;
    for (int j = 0; j < r->B; j++) {
        uint32_t s = r->perm[((size_t)i * r->B + (size_t)j) * r->W + (size_t)r->rank];
        memcpy(r->x + (size_t)j * P, train->images + (size_t)s * P, sizeof(float) * P);
        r->y[j] = train->labels[s];
    }
    float loss;
    int ok;
    uint64_t seed = (uint64_t)r->cfg->seed;
    if (pc_model_forward(r->m, r->x, r->y, r->B, true, seed, (uint64_t)(r->it * r->W + r->rank),
                         &r->hooks, &loss, &ok) != PC_OK ||
        pc_model_backward(r->m, r->y, r->B, &r->hooks) != PC_OK)
        die("training", pc_model_error(r->m)[0] ? pc_model_error(r->m) : pc_worker_error(r->w));
    if (!isfinite(loss))
        die("training", "the loss is not finite: training diverged (lower --lr?)");
    pc_worker_report(r->w, loss, (double)ok / r->B);
    if (pc_worker_iteration_end(r->w, &r->stop) != PC_OK)
        die("iteration_end", pc_worker_error(r->w));
    r->loss_sum += loss;
    r->correct_sum += ok;
    r->seen += r->B;
}

/* After iteration i of epoch (r->it not yet advanced): the breakdown is a collective over
 * the workers, so every worker takes it at the same iterations (this rule reads nothing
 * but the iteration); rank 0 prints at those of them that come 2 s after its last print,
 * and at the first, the epoch's last and the run's last. */
static void progress(run_t *r, int epoch, uint32_t i)
{
    int64_t it = r->it;
    bool edge = it == r->first || it + 1 == r->total || i + 1 == r->ipe;
    if (!edge && (it + 1 - r->first) % PRINT_WINDOW != 0)
        return;
    pc_worker_breakdown_t bd;
    if (pc_worker_breakdown(r->w, PRINT_WINDOW, &bd) != PC_OK)
        die("breakdown", pc_worker_error(r->w));
    int64_t now = pc_time_ns();
    if (r->rank != 0 || (!edge && now - r->last_print <= 2000000000LL))
        return;
    double el = (double)(now - r->t0) * 1e-9, rate = (double)(it + 1 - r->first) / el;
    char eta[32];
    fmt_eta((double)(r->total - it - 1) / rate, eta, sizeof(eta));
    print_progress(epoch + 1, r->epochs, it + 1, r->total, r->loss_sum / (r->seen / r->B),
                   100.0 * r->correct_sum / r->seen, rate * r->B * r->W, &bd, eta);
    r->last_print = now;
    r->loss_sum = 0;
    r->correct_sum = 0;
    r->seen = 0;
}

/* Rank 0's evaluation on the test set, once the epoch's last update is in; after an
 * epoch (epoch >= 0) printed and noted in the metrics. */
static void eval_epoch(run_t *r, int epoch)
{
    for (int t = 0; t < pc_model_ntensors(r->m); t++)
        if (pc_worker_param_wait(r->w, t) != PC_OK)
            die("param_wait", pc_worker_error(r->w));
    double tl;
    r->test_acc = evaluate(r->m, r->test, 256, r->x, &tl);
    if (epoch < 0)
        return;
    double at = (double)(pc_time_ns() - r->t0) * 1e-9;
    printf("epoch %d: test accuracy %.2f%%, test loss %.4f (%.1f s)\n", epoch + 1,
           100 * r->test_acc, tl, at);
    char note[256];
    snprintf(note, sizeof(note),
             "{\"rank\": %d, \"role\": \"eval\", \"epoch\": %d, \"iteration\": %lld, "
             "\"test_accuracy\": %.5f, \"test_loss\": %.6f, \"seconds\": %.3f}",
             r->rank, epoch + 1, (long long)r->it, r->test_acc, tl, at);
    pc_worker_metrics_note(r->w, note);
    fflush(stdout);
}

/* The epochs, from where the run begins to its end or an agreed stop. */
static void train_epochs(run_t *r)
{
    for (int epoch = (int)(r->first / r->ipe); epoch < r->o->epochs && r->it < r->total && !r->stop;
         epoch++) {
        pc_data_order(r->perm, r->train->n, (uint64_t)r->cfg->seed, (uint64_t)epoch);
        for (uint32_t i = (uint32_t)(r->it - (int64_t)epoch * r->ipe);
             i < r->ipe && r->it < r->total && !r->stop; i++, r->it++) {
            train_step(r, i);
            progress(r, epoch, i);
        }
        if (r->rank == 0 && !r->stop)
            eval_epoch(r, epoch);
    }
    if (r->rank == 0 && !r->stop && r->test_acc < 0) /* resumed after the last epoch's end */
        eval_epoch(r, -1);
}

/* Rank 0's closing lines, and --save-model for a finished run: a stopped run's parameters
 * are not the trained model (a stop keeps its progress in the checkpoint). */
static void report_end(const run_t *r, pc_runtime_t *rt)
{
    char err[1024];
    double wall = (double)(pc_time_ns() - r->t0) * 1e-9;
    const char *save = r->o->save_model;
    if (r->stop)
        printf("stopped by signal %d after %lld iterations%s\n", pc_runtime_stop_signal(rt),
               (long long)r->it,
               r->cfg->checkpoint_dir[0] ? " (checkpoint written); continue with --resume"
                                         : " (no --checkpoint-dir: nothing was kept)");
    else
        printf("done: %lld iterations in %.1f s; final test accuracy %.2f%%\n", (long long)r->it,
               wall, 100 * r->test_acc);
    if (save[0] && r->stop) {
        printf("--save-model %s not written: training did not finish\n", save);
    } else if (save[0]) {
        if (pc_model_save(r->m, save, err, sizeof(err)) != PC_OK)
            die("--save-model", err);
        printf("model saved to %s\n", save);
    }
    fflush(stdout);
}

/* Rank 0's effective configuration: every flag of GROUPS, but with a replay those of
 * replay_idle, which do nothing then (said in one line): each group printed from a copy
 * of its table without them. Writes stdout; main thread. */
static void print_config(const pc_flags_group_t *groups, size_t ngroups, bool replay)
{
    for (size_t g = 0; g < ngroups; g++) {
        pc_flags_group_t one = groups[g];
        pc_flags_t *kept = replay ? calloc(one.nopts, sizeof(*kept)) : NULL;
        if (kept) { /* without memory for the copy: every flag */
            size_t n = 0;
            for (size_t i = 0; i < one.nopts; i++) {
                bool idle = false;
                for (size_t k = 0; k < sizeof(replay_idle) / sizeof(replay_idle[0]); k++)
                    idle = idle || strcmp(one.opts[i].name, replay_idle[k]) == 0;
                if (!idle)
                    kept[n++] = one.opts[i];
            }
            one.opts = kept;
            one.nopts = n;
        }
        pc_flags_print(&one, 1, "  ", stdout);
        free(kept);
    }
    if (replay)
        printf("  (with a replay, --data, --epochs, --batch, --dropout, --synthetic-samples, "
               "--save-model and --eval-model do not apply: the trace gives the layers and "
               "the batch, --iters the length)\n");
}

/* --model replay:PATH in the configuration rank 0 prints: what is replayed and what is
 * real (every figure of such a run is labelled by this line). */
static void print_replay_config(const train_opts_t *o, const pc_config_t *cfg)
{
    const pc_trace_t *t = o->trace;
    int nt = 0;
    for (int l = 0; l < pc_trace_nlayers(t); l++)
        nt += pc_trace_nparams(t, l);
    printf("replay: GPU compute replayed from %s (%s, %s, batch %d, %s); %s real\n",
           o->model_spec + strlen(REPLAY_PREFIX), pc_trace_model(t), pc_trace_device(t),
           pc_trace_batch(t), pc_trace_precision(t),
           cfg->mode == PC_MODE_ALLREDUCE ? "network and the allreduce"
                                          : "network, compression and servers");
    printf("replay: %d layers, %d tensors, %zu parameters; compute %.3f ms per iteration x "
           "dilation %g = %.3f ms; host copies at %g GB/s",
           pc_trace_nlayers(t), nt, pc_trace_total_params(t), pc_trace_compute_ms(t), cfg->dilate,
           pc_trace_compute_ms(t) * cfg->dilate, o->pcie_gbps);
    if (cfg->mode == PC_MODE_ALLREDUCE && pc_trace_optimizer_ms(t) >= 0)
        printf("; optimizer step %.3f ms on the device (the trace's)", pc_trace_optimizer_ms(t));
    else if (cfg->mode == PC_MODE_ALLREDUCE)
        printf("; optimizer step on the device by the rule (%.0f bytes an element at %.2g B/s)",
               PC_REPLAY_STEP_BYTES, PC_REPLAY_HBM_BPS);
    printf("\nreplay: source: %s\n", pc_trace_source(t));
}

/* After replayed iteration it (of first..total): the breakdown collective at the same
 * iterations as a training run's (progress()), the line printed by rank 0 at most every
 * 2 s and at the first and last. */
static void replay_progress(pc_worker_t *w, int rank, int64_t it, int64_t first, int64_t total,
                            int batch, int W, int64_t t0, int64_t *last_print)
{
    bool edge = it == first || it + 1 == total;
    if (!edge && (it + 1 - first) % PRINT_WINDOW != 0)
        return;
    pc_worker_breakdown_t bd;
    if (pc_worker_breakdown(w, PRINT_WINDOW, &bd) != PC_OK)
        die("breakdown", pc_worker_error(w));
    int64_t now = pc_time_ns();
    if (rank != 0 || (!edge && now - *last_print <= 2000000000LL))
        return;
    double rate = (double)(it + 1 - first) / ((double)(now - t0) * 1e-9);
    char eta[32];
    fmt_eta((double)(total - it - 1) / rate, eta, sizeof(eta));
    printf("replay iter %lld/%lld | ", (long long)it + 1, (long long)total);
    if (bd.window == 0) {
        printf("ETA %s\n", eta);
        fflush(stdout);
    } else {
        print_breakdown(rate * batch * W, &bd, eta);
    }
    *last_print = now;
}

/* Rank 0's closing lines of a replay: the replayed iteration against the trace (the
 * emulator's own error, doc/replay.md "Validation"), the holds' overshoot, the copies. */
static void replay_end(const pc_replay_t *rp, const pc_config_t *cfg, double gbps, int64_t it,
                       double wall, bool stop, pc_runtime_t *rt)
{
    pc_replay_report_t rr;
    pc_replay_report(rp, &rr);
    if (stop)
        printf("stopped by signal %d after %lld iterations%s\n", pc_runtime_stop_signal(rt),
               (long long)it,
               cfg->checkpoint_dir[0] ? " (checkpoint written); continue with --resume"
                                      : " (no --checkpoint-dir: nothing was kept)");
    else
        printf("done: %lld iterations in %.1f s (replay)\n", (long long)it, wall);
    printf("replay: iteration %.3f ms (median of %lld; mean %.3f) against the trace's compute "
           "%.3f ms (x dilation %g): ratio %.4f\n",
           rr.iter_p50_ms, (long long)rr.iterations, rr.iter_mean_ms, rr.trace_ms, cfg->dilate,
           rr.ratio);
    printf("replay: holds' overshoot p50 %.1f us, p99 %.1f us, max %.1f us (%lld holds); copy "
           "engine %.3f ms per iteration at %g GB/s",
           rr.overshoot_p50_us, rr.overshoot_p99_us, rr.overshoot_max_us, (long long)rr.holds,
           rr.copy_ms, gbps);
    if (cfg->mode == PC_MODE_ALLREDUCE)
        printf("; device step %.3f ms per iteration (%s)", rr.optimizer_ms,
               rr.optimizer_from_trace ? "the trace's" : "the rule");
    printf("\n");
    fflush(stdout);
}

/* A worker rank's replay of --model replay:PATH (pc_replay.h): --iters iterations of the
 * trace's held compute through the real runtime; returns its exit status. */
static int run_replay(const train_opts_t *o, const pc_config_t *cfg, pc_runtime_t *rt, int rank,
                      int W)
{
    char err[1024];
    pc_worker_t *w;
    pc_replay_t *rp;
    if (pc_worker_create(rt, &w, err, sizeof(err)) != PC_OK)
        die("worker", err);
    pc_replay_opts_t ro = {.dilate = cfg->dilate,
                           .pcie_gbps = o->pcie_gbps,
                           .seed = (uint64_t)cfg->seed,
                           .rank = rank,
                           .device_step = cfg->mode == PC_MODE_ALLREDUCE};
    if (pc_replay_create(o->trace, w, &ro, &rp, err, sizeof(err)) != PC_OK)
        die("--model replay", err);
    start_worker(w, rank);
    int64_t first = pc_worker_iteration(w), total = cfg->iters, it = first;
    int64_t t0 = pc_time_ns(), last_print = t0;
    bool stop = false;
    if (rank == 0 && first > 0)
        printf("resumed at iteration %lld\n", (long long)first);
    for (; it < total && !stop; it++) {
        if (pc_replay_iteration(rp, &stop, err, sizeof(err)) != PC_OK)
            die("replay", err);
        replay_progress(w, rank, it, first, total, pc_trace_batch(o->trace), W, t0, &last_print);
    }
    if (pc_worker_finish(w) != PC_OK)
        die("finish", pc_worker_error(w));
    if (rank == 0)
        replay_end(rp, cfg, o->pcie_gbps, it, (double)(pc_time_ns() - t0) * 1e-9, stop, rt);
    int status = stop ? 128 + pc_runtime_stop_signal(rt) : 0;
    pc_worker_destroy(w);
    pc_replay_destroy(rp); /* after the worker: the runtime read its buffers until then */
    return status;
}

/* A worker rank's whole run, from its model to the end; returns its exit status. */
static int run_worker(const train_opts_t *o, const pc_config_t *cfg, pc_runtime_t *rt, int rank,
                      int W, const pc_dataset_t *train, const pc_dataset_t *test)
{
    run_t r = {
        .o = o, .cfg = cfg, .rank = rank, .W = W, .B = o->batch, .train = train, .test = test};
    r.ipe = train->n / (uint32_t)(W * r.B);
    setup_worker(&r, rt);
    setup_run(&r);
    train_epochs(&r);
    if (pc_worker_finish(r.w) != PC_OK)
        die("finish", pc_worker_error(r.w));
    if (rank == 0)
        report_end(&r, rt);
    int status = r.stop ? 128 + pc_runtime_stop_signal(rt) : 0;
    pc_worker_destroy(r.w);
    pc_model_host_free(r.m, r.x);
    pc_model_destroy(r.m);
    free(r.y);
    free(r.perm);
    return status;
}

/* A server rank's run; returns its exit status (128 + the agreed stop's signal). */
static int run_server(pc_runtime_t *rt)
{
    char err[1024];
    if (pc_server_run(rt, err, sizeof(err)) != PC_OK)
        die("server", err);
    int sig = pc_runtime_stop_signal(rt);
    return sig ? 128 + sig : 0;
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    /* First of all: a stop that arrives while MPI starts (slow on a loaded machine) is kept
     * and honoured at the first iteration boundary instead of killing the rank. */
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    openblas_set_num_threads(1); /* ranks and our own threads already fill the cores */

    pc_config_t cfg;
    pc_config_defaults(&cfg);
    /* pc-train knows its run's length (--epochs), so its default schedule is cosine: 5
     * epochs of the mlp reach 88.3-88.4 % with it (seeds 1-3) against 86.4 % constant
     * (doc/results/README.md, "Issue 13: a pipeline that pays"). */
    cfg.lr_schedule = PC_LR_COSINE;
    train_opts_t o = {.model = PC_MODEL_MLP,
                      .pcie_gbps = PC_REPLAY_PCIE_GBPS,
                      .epochs = 3,
                      .batch = 32,
                      .dropout = 0.5,
                      .synthetic_n = 20000};
    snprintf(o.model_spec, sizeof(o.model_spec), "%s", model_names[PC_MODEL_MLP]);
    snprintf(o.data, sizeof(o.data), "/usr/share/datasets/fashion-mnist");
    pc_flags_group_t groups[] = {
        {"Training", train_opts, sizeof(train_opts) / sizeof(train_opts[0]), &o, &o.given},
        pc_config_group(&cfg, "Runtime (parameter servers, compression)")};
    char err[1024];
    int rc = pc_flags_parse(groups, 2, argc, argv, NULL, err, sizeof(err));
    pc_dataset_t train = {0}, test = {0};
    pc_config_t checked = cfg;
    if (rc == PC_OK)
        rc = check_flags(&o, &cfg, &checked, rank, size, err, sizeof(err));
    int early = pc_flags_finish(rc, groups, 2, "pc-train",
                                "mpirun -np N pc-train [flags]   (manual: man pc-train, or man "
                                "doc/pc-train.1 in the source tree)",
                                err, rank == 0, stdout, stderr);
    if (early >= 0) {
        pc_trace_destroy(o.trace);
        MPI_Finalize();
        return early;
    }
    /* Only the cnn has a dropout layer (--dropout on another model is refused above): the
     * others' effective dropout is 0, and the configuration printed below says so rather
     * than the cnn's default. */
    if (o.model != PC_MODEL_CNN)
        o.dropout = 0;
    if (o.eval_model[0]) {
        int st = eval_only(&o, (uint64_t)cfg.seed, rank);
        MPI_Finalize();
        return st;
    }
    /* Workers are the ranks below W (pc_runtime's roles). */
    const int W = checked.mode == PC_MODE_PS ? size - checked.servers : size;
    if (prepare_run(&o, &cfg, rank, size, W, &train, &test) != PC_OK) {
        pc_data_free(&train);
        pc_data_free(&test);
        pc_trace_destroy(o.trace);
        MPI_Finalize();
        return 1;
    }
    pc_log_t *log;
    pc_log_create(stderr, rank, (pc_log_level_t)cfg.log_level, &log);
    if (rank == 0) {
        printf("pc-train %s: %d ranks; effective configuration:\n", PACKAGE_VERSION, size);
        print_config(groups, 2, o.trace != NULL);
        if (o.trace)
            print_replay_config(&o, &cfg);
        fflush(stdout);
    }
    pc_runtime_t *rt;
    rc = pc_runtime_create(&cfg, MPI_COMM_WORLD, log, &rt, err, sizeof(err));
    int status = 1;
    if (rc == PC_ENODEV) { /* every rank has this same message: said once */
        if (rank == 0)
            fprintf(stderr, "pc-train: %s\n", err);
    } else if (rc != PC_OK) {
        die("runtime", err);
    } else {
        pc_runtime_set_stop_flag(rt, &stop_signal);
        if (pc_runtime_role(rt) == PC_ROLE_SERVER)
            status = run_server(rt);
        else if (o.trace)
            status = run_replay(&o, &cfg, rt, rank, W);
        else
            status = run_worker(&o, &cfg, rt, rank, W, &train, &test);
        pc_runtime_destroy(rt);
    }
    pc_data_free(&train);
    pc_data_free(&test);
    pc_trace_destroy(o.trace);
    pc_log_destroy(log);
    MPI_Finalize();
    return status;
}
