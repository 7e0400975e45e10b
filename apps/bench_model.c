/* pc-bench model: measure this machine's rates for a model and predict the iteration time
 * of the dense allreduce and of each parameter-server mode for W = 2, 4, ..., --max-workers
 * workers and S = W x --servers-ratio servers (pc_cost; doc/scaling.md).
 *
 * Every rank profiles the model's forward and backward at once (pc_model_profile: the
 * slowest rank's pass, per layer the ranks' mean, is the model's, so run it on the ranks
 * and nodes of the job it stands for); then pc_auto_measure measures the link from rank 0
 * to the first rank on another host (rank 1 when all share one host: a ping-pong of a
 * small message and of --link-bytes each way), and rank 0 alone each codec on the
 * model's real gradient cut into the runtime's chunks and the server's and the pull's
 * per-element work, while the others wait without spinning. With one rank, --bandwidth and
 * --latency stand for the link. Prints the rates, the prediction table, the speedups over the
 * allreduce, and with
 * --bandwidth a speedup-vs-bandwidth table; --json FILE writes all of it; --predict W,S,MODE
 * prints one machine-readable line for one prediction instead of the tables (MODE "all":
 * a line for each mode, from the same measurements).
 *
 * --trace FILE (one rank, no MPI measurement): the compressor pool a traced model needs. The
 * trace's layers (their backward times, a GPU's) and tensors, chunked as the runtime does;
 * --compress C timed here on one core (pc_cost_measure_codec on a synthetic gradient of up to
 * SAMPLE_ELEMS elements of the compressed chunks; "none" for the chunks under
 * --compress-min-bytes); then the cost model's predicted compression per iteration with
 * N = 1, 2, 4, ... --compressors-max threads (pc_cost_predict_pool, pipelined, on an ideal
 * network and server: only the compressor counts), whether it fits under the trace's
 * backward pass, and the least N that does (pc_cost_pool_size). The pool divides the work
 * at --pool-efficiency (perfect when not given: assumed, said so). Predictions, not
 * measurements: the scaling to 8 and 16 cores of a machine this one is not.
 *
 * --device cuda runs the model's layers on CUDA device 0 (pc_model_create_on): the
 * per-layer times are then the device's (the profile waits for the stream at each hook),
 * and the codecs are timed on a host copy of the gradient. --iters N is pc-bench engine's
 * measurement (bench_engine.c), kept here for the scripts that called it so. */
#include "config.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#include <mpi.h>

#include "bench.h"
#include "pipecompress/pc_auto.h"
#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_config.h"
#include "pipecompress/pc_cost.h"
#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_data.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_model.h"
#include "pipecompress/pc_plan.h"
#include "pipecompress/pc_time.h"
#include "pipecompress/pc_trace.h"

/* --trace: the elements of the synthetic gradient a codec is timed on (16 MiB of floats:
 * past the last-level cache, as a model's gradient is, and a few milliseconds a pass). */
#define SAMPLE_ELEMS ((size_t)4 << 20)

/* Most --bandwidth values, and most layers and tensors of a built-in model. */
#define MAX_BW      16
#define MAX_LAYERS  16
#define MAX_TENSORS 32

typedef struct opts {
    int model;
    int batch;
    int reps;
    int64_t chunk_bytes;
    int64_t compress_min_bytes;
    double topk_ratio;
    double dgc_ratio;
    double servers_ratio;
    int max_workers;
    int at_workers;
    int64_t link_bytes;
    char bandwidth[256];
    char latency[64];
    char predict[128];
    char json[512];
    int device; /* --device: 0 cpu, 1 cuda (device 0) */
    int iters;
    char trace[512];        /* --trace: the pool a traced model needs (header) */
    char compress[128];     /* --trace's codec */
    int compressors_max;    /* --trace's largest pool */
    double pool_efficiency; /* --trace's pool efficiency (0: perfect, assumed) */
} opts_t;

/* "10gbit" -> bytes per second; 0 when it is not a bandwidth. Units: gbit, mbit, kbit
 * (bits per second, powers of 10) and GB, MB, KB (bytes per second). */
static double parse_rate(const char *s, const char **end)
{
    char *e;
    double v = strtod(s, &e);
    static const struct {
        const char *unit;
        double scale;
    } units[] = {{"gbit", 1e9 / 8}, {"mbit", 1e6 / 8}, {"kbit", 1e3 / 8},
                 {"GB", 1e9},       {"MB", 1e6},       {"KB", 1e3}};
    if (e == s || !(v > 0) || !isfinite(v))
        return 0;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        size_t len = strlen(units[i].unit);
        if (strncmp(e, units[i].unit, len) == 0 && (e[len] == '\0' || e[len] == ',')) {
            *end = e + len;
            return v * units[i].scale;
        }
    }
    return 0;
}

/* A comma-separated --bandwidth list into bw (at most MAX_BW); the count, 0 when bad. */
static int parse_rates(const char *s, double *bw)
{
    int n = 0;
    while (*s) {
        const char *end = s;
        double v = parse_rate(s, &end);
        if (v <= 0 || n == MAX_BW)
            return 0;
        bw[n++] = v;
        s = *end == ',' ? end + 1 : end;
        if (end[0] == ',' && !*s)
            return 0;
    }
    return n;
}

/* "20us" -> seconds; -1 when it is not a latency. Units: ns, us, ms, s. */
static double parse_latency(const char *s)
{
    char *e;
    double v = strtod(s, &e);
    if (e == s || !(v >= 0) || !isfinite(v))
        return -1;
    if (strcmp(e, "ns") == 0)
        return v * 1e-9;
    if (strcmp(e, "us") == 0)
        return v * 1e-6;
    if (strcmp(e, "ms") == 0)
        return v * 1e-3;
    if (strcmp(e, "s") == 0)
        return v;
    return -1;
}

/* --predict W,S,MODE (MODE "all": *all set, *mode left); false when malformed. */
static bool parse_predict(const char *s, int *W, int *S, pc_cost_mode_t *mode, bool *all)
{
    char mode_text[64];
    int used = 0;
    if (sscanf(s, "%d,%d,%63[^,]%n", W, S, mode_text, &used) != 3 || s[used] != '\0')
        return false;
    *all = strcmp(mode_text, "all") == 0;
    if ((!*all && pc_cost_mode_parse(mode_text, mode) != PC_OK) || *W < 1 ||
        *W > PC_COST_MAX_RANKS || *S < (!*all && *mode == PC_COST_ALLREDUCE ? 0 : 1) ||
        *S > PC_COST_MAX_RANKS)
        return false;
    return true;
}

static int check_bandwidth(const void *value, char *err, size_t errlen)
{
    double bw[MAX_BW];
    if (parse_rates((const char *)value, bw) > 0)
        return 0;
    snprintf(err, errlen,
             "'%s' is not a list of up to %d bandwidths such as 1gbit,10gbit,100gbit "
             "(units gbit, mbit, kbit, GB, MB, KB per second)",
             (const char *)value, MAX_BW);
    return 1;
}

static int check_latency(const void *value, char *err, size_t errlen)
{
    if (parse_latency((const char *)value) >= 0)
        return 0;
    snprintf(err, errlen, "'%s' is not a latency such as 20us (units ns, us, ms, s)",
             (const char *)value);
    return 1;
}

static int check_predict(const void *value, char *err, size_t errlen)
{
    int W, S;
    pc_cost_mode_t m;
    bool all;
    if (parse_predict((const char *)value, &W, &S, &m, &all))
        return 0;
    snprintf(err, errlen,
             "'%s' is not W,S,MODE (W >= 1; S >= 1, or 0 for the allreduce; MODE a name or "
             "e2e.sh's number: 1 allreduce, 2 ps-none, 3 ps-topk-inline, 4 ps-topk-pipelined, "
             "5 ps-dgc-pipelined, 6 ps-topk-servermom, 8 ps-powersgd-pipelined; or all)",
             (const char *)value);
    return 1;
}

static const pc_flags_t model_opts[] = {
    BENCH_OPT_MODEL_BATCH(opts_t, "network whose layers are timed (pc-train's)",
                          "samples per worker and iteration"),
    BENCH_OPT_REPS(opts_t),
    BENCH_OPT_CHUNKING(opts_t, 0, "largest chunk of a tensor (as pc-train's)",
                       "chunks smaller than this travel uncompressed (as pc-train's)"),
    {.name = "topk-ratio",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(opts_t, topk_ratio),
     .min = 1e-6,
     .max = 1,
     .metavar = "R",
     .help = "top-k's kept fraction (modes 3, 4, 6)"},
    {.name = "dgc-ratio",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(opts_t, dgc_ratio),
     .min = 1e-6,
     .max = 1,
     .metavar = "R",
     .help = "DGC's kept fraction (mode 5)"},
    {.name = "servers-ratio",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(opts_t, servers_ratio),
     .min = 0.001,
     .max = 64,
     .metavar = "R",
     .help = "servers per worker in the tables: S = max(1, round(W x R))"},
    {.name = "max-workers",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, max_workers),
     .min = 2,
     .max = PC_COST_MAX_RANKS,
     .metavar = "W",
     .help = "the table's last W (W = 2, 4, 8, ... up to this)"},
    {.name = "at-workers",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, at_workers),
     .min = 1,
     .max = PC_COST_MAX_RANKS,
     .metavar = "W",
     .help = "workers of the speedup-vs-bandwidth table"},
    {.name = "link-bytes",
     .type = PC_FLAGS_SIZE,
     .offset = offsetof(opts_t, link_bytes),
     .min = 4096,
     .max = 1073741824.0,
     .metavar = "SIZE",
     .help = "the large ping-pong message (bandwidth)"},
    {.name = "bandwidth",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, bandwidth),
     .size = 256,
     .metavar = "LIST",
     .help = "bandwidths for the speedup-vs-bandwidth table, e.g. 1gbit,10gbit,100gbit; with "
             "one rank the first is the link",
     .check = check_bandwidth},
    {.name = "latency",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, latency),
     .size = 64,
     .metavar = "T",
     .help = "the link's latency, e.g. 20us (default: measured; needed with one rank)",
     .check = check_latency},
    {.name = "predict",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, predict),
     .size = 128,
     .metavar = "W,S,MODE",
     .help = "print one prediction as a 'predict ... iter_ms=X' line instead of the tables "
             "(MODE all: one line per mode)",
     .check = check_predict},
    {.name = "json",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, json),
     .size = 512,
     .metavar = "FILE",
     .help = "also write the rates and every prediction as JSON to FILE (with --iters: the "
             "line)"},
    {.name = "device",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(opts_t, device),
     .choices = "cpu|cuda",
     .help = "where the model's layers run: cpu (one core) or cuda (device 0)"},
    {.name = "iters",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, iters),
     .min = 1,
     .max = 1000000,
     .metavar = "N",
     .help = "measure the engine's training throughput instead, as pc-bench engine does (kept "
             "for older scripts: use pc-bench engine)"},
    {.name = "trace",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, trace),
     .size = 512,
     .metavar = "FILE",
     .help = "instead of the tables, one rank: the compressor threads a traced model (a "
             "pc-train replay trace) needs, predicted for N = 1, 2, 4, ... --compressors-max"},
    {.name = "compress",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, compress),
     .size = 128,
     .metavar = "SPEC",
     .help = "--trace's codec (as pc-train's --compress), timed on one core here"},
    {.name = "compressors-max",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, compressors_max),
     .min = 1,
     .max = PC_COST_MAX_COMPRESSORS,
     .metavar = "N",
     .help = "--trace's largest pool of compressor threads"},
    {.name = "pool-efficiency",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(opts_t, pool_efficiency),
     .min = 0.01,
     .max = 1,
     .metavar = "E",
     .help = "--trace: each thread beyond the first adds E of one thread's speed (pc-bench "
             "compress --threads N's speed-up s gives (s - 1) / (N - 1), from 0.01 to 1; "
             "the default 0 means not given: perfect division, assumed and said)"},
};

/* The model and its names; the figures are pc_auto_measure's. */
typedef struct measured {
    pc_model_t *model;
    float *host_params, *host_grads; /* a device model's slabs, copied (tensors point here) */
    int nlayers, ntensors;
    char layer_name[MAX_LAYERS][24];
    pc_cost_layer_t layers[MAX_LAYERS]; /* this rank's profile */
    pc_plan_tensor_t tensors[MAX_TENSORS];
    int tensor_layer[MAX_TENSORS];
    size_t layer_params[MAX_LAYERS];
    pc_auto_measured_t fig; /* every rank's, the same */
    char transport[96];
} measured_t;

/* --device as pc_model_create_on's device number. */
static int device_of(const opts_t *o)
{
    return o->device ? 0 : PC_MODEL_CPU;
}

/* --device's spelling, for messages and the JSON line. */
static const char *device_name(const opts_t *o)
{
    return o->device ? "cuda" : "cpu";
}

/* Time forward and backward reps times (after one warm-up) on a synthetic batch
 * (pc_model_profile); per-layer medians into m. On a device the tensors handed on to the
 * codecs' measurement are host copies of its slabs. 0, or -1 with a message printed. */
static int measure_compute(const opts_t *o, measured_t *m)
{
    pc_dataset_t ds = {0};
    if (pc_data_synthetic((uint32_t)o->batch, 7, 0, &ds) != PC_OK) {
        fprintf(stderr, "pc-bench: model: out of memory for a batch of %d\n", o->batch);
        return -1;
    }
    if (bench_engine_model(o->model, o->batch, o->device != 0, &ds, &m->model) != 0) {
        pc_data_free(&ds);
        return -1;
    }
    m->ntensors = pc_model_ntensors(m->model);
    int rc = PC_OK;
    if (m->ntensors > MAX_TENSORS ||
        (rc = pc_model_profile(m->model, ds.images, ds.labels, o->batch, o->reps, m->layers,
                               MAX_LAYERS, &m->nlayers, m->tensor_layer)) != PC_OK) {
        fprintf(stderr, "pc-bench: model: cannot time the %s model's layers%s%s\n",
                pc_model_kind_name((pc_model_kind_t)o->model),
                rc == PC_ECUDA || rc == PC_ENOMEM ? ": " : "",
                rc == PC_ECUDA || rc == PC_ENOMEM ? pc_model_error(m->model) : "");
        pc_data_free(&ds);
        return -1;
    }
    pc_data_free(&ds);
    size_t np = pc_model_nparams(m->model);
    const float *params = pc_model_params(m->model), *grads = pc_model_tensor_grad(m->model, 0);
    if (device_of(o) != PC_MODEL_CPU) {
        if (!(m->host_params = malloc(np * sizeof(float) + 1)) ||
            !(m->host_grads = malloc(np * sizeof(float) + 1)) ||
            pc_model_params_get(m->model, m->host_params) != PC_OK ||
            pc_model_grads_get(m->model, m->host_grads) != PC_OK) {
            fprintf(stderr, "pc-bench: model: copying the gradient from the device: %s\n",
                    m->host_grads ? pc_model_error(m->model) : "out of memory");
            return -1;
        }
    }
    for (int t = 0; t < m->ntensors; t++) {
        int l = m->tensor_layer[t];
        const float *p = pc_model_tensor_param(m->model, t), *g = pc_model_tensor_grad(m->model, t);
        if (m->host_params) { /* the same offsets in the host copies */
            p = m->host_params + (p - params);
            g = m->host_grads + (g - grads);
        }
        /* whole_rows: the rows the workers give the runtime (pc_worker_set_rows), which
         * the powersgd mode's matrices are made of. */
        m->tensors[t] = (pc_plan_tensor_t){pc_model_tensor_size(m->model, t), p, g,
                                           pc_model_tensor_rows(m->model, t)};
        m->layer_params[l] += m->tensors[t].n;
        if (!m->layer_name[l][0]) { /* "fc1.weight" -> "fc1" */
            const char *name = pc_model_tensor_name(m->model, t), *dot = strchr(name, '.');
            snprintf(m->layer_name[l], sizeof(m->layer_name[l]), "%.*s",
                     (int)(dot ? (size_t)(dot - name) : strlen(name)), name);
        }
    }
    return 0;
}

static void free_measured(measured_t *m)
{
    pc_model_destroy(m->model);
    free(m->host_params);
    free(m->host_grads);
    free(m);
}

/* The transport as Open MPI was told (it goes into the JSON: kept to the characters an MCA
 * list uses): between two hosts only a network transport can carry it (tcp here), on one
 * host shared memory when the list allows it. */
static void describe_transport(char *out, size_t len, bool remote)
{
    const char *env = getenv("OMPI_MCA_btl");
    char btl[48] = "";
    for (size_t i = 0; env && env[i] && i + 1 < sizeof(btl); i++)
        btl[i] = isalnum((unsigned char)env[i]) || strchr(",_^-", env[i]) ? env[i] : '?';
    if (!env)
        snprintf(out, len, "Open MPI's choice (OMPI_MCA_btl unset)");
    else
        snprintf(out, len, "%s (OMPI_MCA_btl=%s)",
                 !remote && (strstr(btl, "vader") || strstr(btl, "sm")) ? "shared memory"
                 : strstr(btl, "tcp")                                   ? "TCP"
                                                                        : "other",
                 btl);
}

/* ---- output ------------------------------------------------------------------------------ */

static int servers_for(const opts_t *o, int W)
{
    long s = lround((double)W * o->servers_ratio);
    return s < 1 ? 1 : s > PC_COST_MAX_RANKS ? PC_COST_MAX_RANKS : (int)s;
}

/* One prediction, or exit-worthy failure (an internal error: the inputs were checked). */
static int predict(const pc_cost_t *c, int mode, int W, int S, const pc_cost_link_t *l,
                   pc_cost_result_t *r)
{
    int rc = pc_cost_predict(c, (pc_cost_mode_t)mode, W, S, l, r);
    if (rc != PC_OK)
        fprintf(stderr, "pc-bench: model: prediction of %s for W=%d S=%d: %s\n",
                pc_cost_mode_name(mode), W, S, pc_strerror(rc));
    return rc;
}

static void print_link_rate(FILE *f, double bytes_per_s)
{
    if (bytes_per_s >= 1e9)
        fprintf(f, "%.2f GB/s (%.1f Gbit/s)", bytes_per_s * 1e-9, bytes_per_s * 8e-9);
    else
        fprintf(f, "%.1f MB/s (%.2f Gbit/s)", bytes_per_s * 1e-6, bytes_per_s * 8e-9);
}

/* The header and one row of a table of every mode at W workers, S servers. */
static void table_header(const char *first)
{
    printf("%-12s %6s", first, "S");
    for (int m = 0; m < PC_COST_MODES; m++)
        printf(" %*s", m == 0 ? 10 : 21, pc_cost_mode_name(m));
    printf("\n");
}

static int table_row(const pc_cost_t *c, const char *first, int W, int S, const pc_cost_link_t *l)
{
    pc_cost_result_t r[PC_COST_MODES];
    for (int m = 0; m < PC_COST_MODES; m++)
        if (predict(c, m, W, S, l, &r[m]) != PC_OK)
            return -1;
    printf("%-12s %6d %10.2f", first, S, r[0].iter * 1e3);
    for (int m = 1; m < PC_COST_MODES; m++) {
        char cell[32];
        snprintf(cell, sizeof(cell), "%.2f (%.2fx)", r[m].iter * 1e3, r[0].iter / r[m].iter);
        printf(" %21s", cell);
    }
    printf("\n");
    return 0;
}

static void json_result(FILE *j, const pc_cost_result_t *r, double allreduce_iter)
{
    fprintf(j,
            "{\"iter_ms\": %.6f, \"compute_ms\": %.6f, \"exposed_ms\": %.6f, "
            "\"compress_ms\": %.6f, \"comm_busy_ms\": %.6f, \"server_busy_ms\": %.6f, "
            "\"bytes_up\": %.0f, \"bytes_down\": %.0f, \"servers_used\": %d, \"speedup\": %.9g}",
            r->iter * 1e3, r->compute * 1e3, r->exposed * 1e3, r->compress * 1e3,
            r->comm_busy * 1e3, r->server_busy * 1e3, r->bytes_up, r->bytes_down, r->servers_used,
            allreduce_iter / r->iter);
}

/* Every mode at (W, S, l) as one JSON object. */
static int json_point(FILE *j, const pc_cost_t *c, int W, int S, const pc_cost_link_t *l,
                      const char *indent)
{
    pc_cost_result_t r[PC_COST_MODES];
    for (int m = 0; m < PC_COST_MODES; m++)
        if (predict(c, m, W, S, l, &r[m]) != PC_OK)
            return -1;
    fprintf(j,
            "%s{\"workers\": %d, \"servers\": %d, \"bandwidth\": %.6g, \"latency\": %.6g, "
            "\"modes\": {",
            indent, W, S, l->bandwidth, l->latency);
    for (int m = 0; m < PC_COST_MODES; m++) {
        fprintf(j, "%s\n%s  \"%s\": ", m ? "," : "", indent, pc_cost_mode_name(m));
        json_result(j, &r[m], r[0].iter);
    }
    fprintf(j, "}}");
    return 0;
}

static int write_json(const opts_t *o, const measured_t *m, const pc_cost_link_t *link,
                      const double *bw, int nbw, const pc_cost_t *c, char (*predict_lines)[256],
                      int npredict)
{
    FILE *j = fopen(o->json, "w");
    if (!j) {
        fprintf(stderr, "pc-bench: --json: cannot write '%s'\n", o->json);
        return -1;
    }
    fprintf(j,
            "{\n  \"benchmark\": \"model\",\n  \"model\": \"%s\",\n  \"device\": \"%s\",\n"
            "  \"batch\": %d,\n  \"reps\": %d,\n  \"chunk_bytes\": %lld,\n  "
            "\"compress_min_bytes\": %lld,\n"
            "  \"servers_ratio\": %g,\n  \"at_workers\": %d,\n  \"chunks\": %d,\n"
            "  \"elements\": %zu,\n",
            pc_model_kind_name((pc_model_kind_t)o->model), device_name(o), o->batch, o->reps,
            (long long)o->chunk_bytes, (long long)o->compress_min_bytes, o->servers_ratio,
            o->at_workers, pc_cost_nchunks(c), pc_cost_nelems(c));
    const pc_auto_measured_t *f = &m->fig;
    fprintf(j, "  \"link\": {\"measured\": %s", f->link_peer >= 0 ? "true" : "false");
    if (f->link_peer >= 0)
        fprintf(j,
                ", \"peer\": %d, \"peer_remote\": %s, \"transport\": \"%s\", "
                "\"rtt_small_s\": %.9g, \"rtt_01_s\": %.9g, \"rtt_10_s\": %.9g, "
                "\"link_bytes\": %lld, \"bandwidth_01\": %.6g, \"bandwidth_10\": %.6g, "
                "\"latency_measured\": %.6g",
                f->link_peer, f->link_remote ? "true" : "false", m->transport, f->rtt_small,
                f->rtt_ab, f->rtt_ba, (long long)o->link_bytes, f->bw_ab, f->bw_ba,
                f->link.latency);
    fprintf(j, ", \"bandwidth\": %.6g, \"latency\": %.6g},\n", link->bandwidth, link->latency);
    fprintf(j, "  \"layers\": [\n");
    for (int l = 0; l < m->nlayers; l++)
        fprintf(j,
                "    {\"name\": \"%s\", \"params\": %zu, \"fwd_ms\": %.6f, \"bwd_ms\": %.6f}%s\n",
                m->layer_name[l], m->layer_params[l], f->layers[l].fwd * 1e3,
                f->layers[l].bwd * 1e3, l + 1 < m->nlayers ? "," : "");
    fprintf(j, "  ],\n  \"codecs\": {\n");
    for (int q = 0; q < PC_COST_CODECS; q++)
        fprintf(j,
                "    \"%s\": {\"spec\": \"%s\", \"compress_ns_per_elem\": %.6f, "
                "\"bytes_per_elem\": %.6f, \"density\": %.6g, \"sparse\": %s}%s\n",
                pc_cost_codec_name(q), f->codec_spec[q], f->codec[q].compress * 1e9,
                f->codec[q].bytes, f->codec[q].density, f->codec[q].sparse ? "true" : "false",
                q + 1 < PC_COST_CODECS ? "," : "");
    fprintf(j,
            "  },\n  \"powersgd\": {\"matrices\": %d, \"round2_ns\": %.6f, \"finish_ns\": "
            "%.6f, \"server_step_ns\": %.6f, \"ortho_ns\": %.6f",
            f->chunks.nmatrices, f->lowrank.round2 * 1e9, f->lowrank.finish * 1e9,
            f->lowrank.step * 1e9, f->lowrank.ortho * 1e9);
    const pc_cost_server_rate_t *s = &f->server;
    fprintf(j,
            "},\n  \"server\": {\"elements\": %zu, \"agg_dense_ns\": %.6f, "
            "\"agg_sparse_ns\": %.6f, \"merge_ns\": %.6f, \"step_dense_ns\": %.6f, "
            "\"step_sparse_ns\": %.6f, \"pull_dense_ns\": %.6f, \"pull_sparse_ns\": %.6f},\n",
            f->server_n, s->agg_dense * 1e9, s->agg_sparse * 1e9, s->merge * 1e9,
            s->step_dense * 1e9, s->step_sparse * 1e9, s->pull_dense * 1e9, s->pull_sparse * 1e9);
    fprintf(j, "  \"table\": [\n");
    int rc = 0;
    for (int W = 2; W <= o->max_workers && !rc; W *= 2) {
        rc = json_point(j, c, W, servers_for(o, W), link, "    ");
        fprintf(j, "%s\n", W * 2 <= o->max_workers ? "," : "");
    }
    fprintf(j, "  ],\n  \"bandwidth_table\": [\n");
    for (int b = 0; b < nbw && !rc; b++)
        for (int W = 2; W <= o->max_workers && !rc; W *= 2) {
            pc_cost_link_t l = {.bandwidth = bw[b], .latency = link->latency};
            rc = json_point(j, c, W, servers_for(o, W), &l, "    ");
            fprintf(j, "%s\n", b + 1 < nbw || W * 2 <= o->max_workers ? "," : "");
        }
    fprintf(j, "  ],\n  \"predict\": [");
    for (int i = 0; i < npredict; i++)
        fprintf(j, "%s\"%s\"", i ? ", " : "", predict_lines[i]);
    fprintf(j, "]\n}\n");
    if (fclose(j) != 0 && !rc) {
        fprintf(stderr, "pc-bench: --json: error writing '%s'\n", o->json);
        rc = -1;
    }
    return rc;
}

static void print_rates(const opts_t *o, const measured_t *m, const pc_cost_link_t *link, int size)
{
    const pc_auto_measured_t *f = &m->fig;
    char ranks[64];
    snprintf(ranks, sizeof(ranks),
             size > 1 ? "the slowest of the %d ranks per layer, profiled at once"
                      : "this rank's per layer",
             size);
    char where[300] = "";
    if (device_of(o) != PC_MODEL_CPU) {
        char name[256];
        pc_cuda_device_name(device_of(o), name, sizeof(name));
        snprintf(where, sizeof(where), " on CUDA device 0 (%s)", name);
    }
    printf("pc-bench model: %s, batch %d, %zu parameters; medians of %d; compute%s: %s; the "
           "rest on rank 0, one thread each\n",
           pc_model_kind_name((pc_model_kind_t)o->model), o->batch, pc_model_nparams(m->model),
           o->reps, where, ranks);
    if (f->link_peer >= 0) {
        printf("link: ranks 0 and %d of %d (%s, %s), %s: latency %.2f us (half the 8-byte round "
               "trip); bandwidth 0->%d ",
               f->link_peer, size, f->link_host, f->link_remote ? "another host" : "this host",
               m->transport, f->rtt_small / 2 * 1e6, f->link_peer);
        print_link_rate(stdout, f->bw_ab);
        printf(", %d->0 ", f->link_peer);
        print_link_rate(stdout, f->bw_ba);
        printf(" (%lld-byte ping-pong)\n", (long long)o->link_bytes);
    } else {
        printf("link: not measured (one rank): --bandwidth and --latency stand for it\n");
    }
    printf("model's link: ");
    print_link_rate(stdout, link->bandwidth);
    printf(", latency %.2f us%s\n", link->latency * 1e6,
           f->link_peer >= 0 ? " (the slower direction; --latency overrides the latency)" : "");
    printf("\n%-12s %10s %9s %9s\n", "layer", "params", "fwd ms", "bwd ms");
    for (int l = 0; l < m->nlayers; l++)
        printf("%-12s %10zu %9.3f %9.3f\n", m->layer_name[l], m->layer_params[l],
               f->layers[l].fwd * 1e3, f->layers[l].bwd * 1e3);
    printf("%-12s %10zu %9.3f %9.3f   compute %.3f ms\n", "total", pc_model_nparams(m->model),
           f->compute.fwd * 1e3, f->compute.bwd * 1e3, (f->compute.fwd + f->compute.bwd) * 1e3);
    printf("\nchunks: %d (--chunk-bytes %lld, --compress-min-bytes %lld: %d compressed; "
           "powersgd's mode keeps its matrices whole)\n",
           f->chunks.nchunks, (long long)o->chunk_bytes, (long long)o->compress_min_bytes,
           f->chunks.ncompressed);
    printf("%-34s %12s %11s %9s %8s\n", "codec (on the model's gradient)", "comp ns/elem",
           "bytes/elem", "density", "x less");
    for (int q = 0; q < PC_COST_CODECS; q++)
        printf("%-34s %12.3f %11.4f %9.5f %8.1f\n", f->codec_spec[q], f->codec[q].compress * 1e9,
               f->codec[q].bytes, f->codec[q].density,
               f->codec[q].bytes > 0 ? 4.0 / f->codec[q].bytes : 0);
    if (f->chunks.nmatrices)
        printf("powersgd's other work, ns/elem: round 2 %.3f, worker's step %.3f, server's "
               "rows and step %.3f; orthonormalisation %.3f ns per row x rank^2; %d matrices, "
               "each one chunk in its mode\n",
               f->lowrank.round2 * 1e9, f->lowrank.finish * 1e9, f->lowrank.step * 1e9,
               f->lowrank.ortho * 1e9, f->chunks.nmatrices);
    else
        printf("powersgd: no matrix fits (its mode sends every chunk dense)\n");
    const pc_cost_server_rate_t *s = &f->server;
    printf("server and pull (%zu-element chunks, passes over the model's %zu elements), ns: "
           "aggregate dense %.3f/elem/msg, sparse %.3f/entry/msg, merge %.3f/index; step dense "
           "(momentum) %.3f/elem, sparse %.3f/entry; pull dense %.3f/elem, sparse %.3f/entry\n",
           f->server_n, f->server_total, s->agg_dense * 1e9, s->agg_sparse * 1e9, s->merge * 1e9,
           s->step_dense * 1e9, s->step_sparse * 1e9, s->pull_dense * 1e9, s->pull_sparse * 1e9);
}

/* ---- main --------------------------------------------------------------------------------- */

/* --predict W,S,MODE (MODE all: each mode): one machine-readable line per prediction,
 * printed and kept in lines (*n of them) for the JSON. 0, or BENCH_EXIT_FAIL. */
static int predict_lines_print(const pc_cost_t *cost, const pc_cost_link_t *link, int pW, int pS,
                               pc_cost_mode_t pmode, bool pall, char lines[][256], int *n)
{
    printf("\n");
    int first = pall ? 0 : (int)pmode, last = pall ? PC_COST_MODES - 1 : (int)pmode;
    for (int k = first; k <= last; k++) {
        pc_cost_result_t r;
        if (predict(cost, k, pW, pS, link, &r) != PC_OK)
            return BENCH_EXIT_FAIL;
        snprintf(lines[*n], 256,
                 "predict mode=%s e2e=%d W=%d S=%d iter_ms=%.3f compute_ms=%.3f "
                 "exposed_ms=%.3f bandwidth=%.6g latency=%.6g",
                 pc_cost_mode_name(k), pc_cost_mode_e2e(k), pW, k == PC_COST_ALLREDUCE ? 0 : pS,
                 r.iter * 1e3, r.compute * 1e3, r.exposed * 1e3, link->bandwidth, link->latency);
        printf("%s\n", lines[(*n)++]);
    }
    return 0;
}

/* The prediction table for W = 2, 4, ..., --max-workers, and with --bandwidth the
 * speedup-vs-bandwidth table at --at-workers. 0, or BENCH_EXIT_FAIL. */
static int print_tables(const opts_t *o, const pc_cost_t *cost, const pc_cost_link_t *link,
                        const double *bw, int nbw)
{
    printf("\npredicted iteration time, ms (speedup over the allreduce); S = max(1, "
           "round(W x %g))\n",
           o->servers_ratio);
    table_header("W");
    for (int W = 2; W <= o->max_workers; W *= 2) {
        char first[16];
        snprintf(first, sizeof(first), "%d", W);
        if (table_row(cost, first, W, servers_for(o, W), link) != 0)
            return BENCH_EXIT_FAIL;
    }
    if (nbw == 0)
        return 0;
    printf("\nspeedup over the allreduce against bandwidth, W = %d (latency %.2f us)\n",
           o->at_workers, link->latency * 1e6);
    table_header("bandwidth");
    for (int b = 0; b < nbw; b++) {
        pc_cost_link_t l = {.bandwidth = bw[b], .latency = link->latency};
        char first[24];
        snprintf(first, sizeof(first), "%.4ggbit", bw[b] * 8e-9);
        if (table_row(cost, first, o->at_workers, servers_for(o, o->at_workers), &l) != 0)
            return BENCH_EXIT_FAIL;
    }
    return 0;
}

/* Every rank builds and profiles the model at once (the slowest rank's pass, per layer
 * the ranks' mean scaled to it, is the model's: what sharing this machine costs is in it), then
 * pc_auto_measure measures the link from rank 0 to a rank on another host and rank 0 the codecs and
 * server; *probe is what was measured it on. Collective: a rank that cannot profile ends the job
 * (the others are in a collective). 0, or BENCH_EXIT_FAIL (said by rank 0). */
static int measure_all(const opts_t *o, int rank, measured_t *m, pc_auto_probe_t *probe)
{
    char err[512] = "";
    if (measure_compute(o, m) != 0)
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_FAIL);
    *probe = (pc_auto_probe_t){.layers = m->layers,
                               .nlayers = m->nlayers,
                               .tensors = m->tensors,
                               .tensor_layer = m->tensor_layer,
                               .ntensors = m->ntensors};
    pc_auto_measure_cfg_t mc = {.chunk_bytes = (size_t)o->chunk_bytes,
                                .compress_min_bytes = (size_t)o->compress_min_bytes,
                                .topk_ratio = o->topk_ratio,
                                .dgc_ratio = o->dgc_ratio,
                                .momentum = 0.9, /* the sparsifiers' default */
                                .servers = 1,
                                .link_bytes = (size_t)o->link_bytes,
                                .reps = o->reps,
                                .seed = 42};
    if (pc_auto_measure(MPI_COMM_WORLD, &mc, probe, &m->fig, err, sizeof(err)) != PC_OK) {
        if (rank == 0)
            fprintf(stderr, "pc-bench: model: %s\n", err);
        return BENCH_EXIT_FAIL;
    }
    return 0;
}

/* What the flags ask of the report: the --bandwidth list, --latency (-1: measured), and
 * --predict W,S,MODE (MODE all: pall). */
typedef struct asked {
    double bw[MAX_BW];
    int nbw;
    double latency;
    bool predict, pall;
    int pW, pS;
    pc_cost_mode_t pmode;
} asked_t;

/* Rank 0, after the measurement: the cost model from the rates (on the measured link, or
 * the first --bandwidth; --latency overrides the measured latency), the rates printed, then
 * the --predict lines or the tables, and --json. 0, or BENCH_EXIT_FAIL. */
static int report(const opts_t *o, measured_t *m, const pc_auto_probe_t *probe, const asked_t *q,
                  int size)
{
    int status = 0, rc;
    pc_cost_t *cost = NULL;
    char predict_lines[PC_COST_MODES][256];
    int npredict = 0;
    /* The model's link: the measured one (the slower direction), else the first
     * --bandwidth; --latency, when given, overrides the measured latency. */
    const pc_auto_measured_t *f = &m->fig;
    pc_cost_link_t link = {.bandwidth = f->link_peer >= 0 ? f->link.bandwidth : q->bw[0],
                           .latency = q->latency >= 0 ? q->latency : f->link.latency};
    if ((rc = pc_auto_cost(f, probe, (size_t)o->chunk_bytes, (size_t)o->compress_min_bytes, &link,
                           false, &cost)) != PC_OK) {
        fprintf(stderr, "pc-bench: model: the measured rates make no model: %s\n", pc_strerror(rc));
        status = BENCH_EXIT_FAIL;
    }
    if (status == 0) {
        print_rates(o, m, &link, size);
        fflush(stdout);
    }
    if (status == 0 && q->predict)
        status = predict_lines_print(cost, &link, q->pW, q->pS, q->pmode, q->pall, predict_lines,
                                     &npredict);
    else if (status == 0)
        status = print_tables(o, cost, &link, q->bw, q->nbw);
    if (status == 0 && o->json[0] &&
        write_json(o, m, &link, q->bw, q->nbw, cost, predict_lines, npredict) != 0)
        status = BENCH_EXIT_FAIL;
    pc_cost_destroy(cost);
    return status;
}

/* --trace: the trace's tensors (registration order, one never-read slab so that the plan
 * groups small tensors as the runtime's does), their layers and the layers' times. */
typedef struct traced {
    pc_trace_t *tr;
    int nl, nt;
    pc_cost_layer_t *layers;
    pc_plan_tensor_t *tensors;
    int *tensor_layer;
    float *slab;
} traced_t;

static void traced_free(traced_t *t)
{
    free(t->layers);
    free(t->tensors);
    free(t->tensor_layer);
    free(t->slab);
    pc_trace_destroy(t->tr);
}

/* Load o->trace into *t. 0, BENCH_EXIT_USAGE (a bad trace, said in one line) or
 * BENCH_EXIT_FAIL (out of memory, said). */
static int traced_load(const opts_t *o, traced_t *t)
{
    char err[512];
    *t = (traced_t){0};
    if (pc_trace_load(o->trace, &t->tr, err, sizeof(err)) != PC_OK) {
        fprintf(stderr, "pc-bench: model: --trace: %s\n", err);
        return BENCH_EXIT_USAGE;
    }
    t->nl = pc_trace_nlayers(t->tr);
    for (int l = 0; l < t->nl; l++)
        t->nt += pc_trace_nparams(t->tr, l);
    size_t total = pc_trace_total_params(t->tr);
    t->layers = calloc((size_t)t->nl, sizeof(*t->layers));
    t->tensors = calloc((size_t)(t->nt ? t->nt : 1), sizeof(*t->tensors));
    t->tensor_layer = calloc((size_t)(t->nt ? t->nt : 1), sizeof(int));
    t->slab = malloc(sizeof(float) * (total ? total : 1)); /* addresses only: never touched */
    if (!t->layers || !t->tensors || !t->tensor_layer || !t->slab) {
        fprintf(stderr, "pc-bench: model: out of memory for %zu parameters\n", total);
        traced_free(t);
        return BENCH_EXIT_FAIL;
    }
    size_t off = 0;
    for (int l = 0, i = 0; l < t->nl; l++) {
        t->layers[l] = (pc_cost_layer_t){pc_trace_forward_ms(t->tr, l) * 1e-3,
                                         pc_trace_backward_ms(t->tr, l) * 1e-3};
        for (int j = 0; j < pc_trace_nparams(t->tr, l); j++, i++) {
            t->tensors[i] = (pc_plan_tensor_t){.n = pc_trace_param_numel(t->tr, l, j),
                                               .param = t->slab + off,
                                               .grad = t->slab + off};
            t->tensor_layer[i] = l;
            off += t->tensors[i].n;
        }
    }
    return 0;
}

/* Time spec on up to SAMPLE_ELEMS elements of a synthetic gradient cut into the plan's
 * chunks (those at least min_bytes, when `big`; else those under it), the first ones in
 * chunk order; *got the elements timed (0: no such chunk, *rate untouched). 0 or
 * BENCH_EXIT_FAIL (said). */
static int time_codec(const opts_t *o, const pc_plan_t *plan, const pc_codec_spec_t *spec,
                      const char *name, bool big, pc_cost_codec_rate_t *rate, size_t *got)
{
    size_t *n = malloc(sizeof(size_t) * (size_t)(plan->nchunks ? plan->nchunks : 1));
    if (!n) {
        fprintf(stderr, "pc-bench: model: out of memory\n");
        return BENCH_EXIT_FAIL;
    }
    size_t sum = 0;
    int k = 0;
    for (int i = 0; i < plan->nchunks && sum < SAMPLE_ELEMS; i++) {
        size_t c = plan->chunks[i].n;
        if ((c * sizeof(float) >= (size_t)o->compress_min_bytes) != big)
            continue;
        n[k] = c < SAMPLE_ELEMS - sum ? c : SAMPLE_ELEMS - sum;
        sum += n[k++];
    }
    *got = sum;
    int status = 0;
    float *g = sum ? malloc(sizeof(float) * sum) : NULL;
    if (sum && !g) {
        fprintf(stderr, "pc-bench: model: out of memory for %zu elements\n", sum);
        status = BENCH_EXIT_FAIL;
    }
    /* Heavy-tailed and deterministic: a product of two uniforms' spread, signs mixed. */
    for (size_t i = 0; g && i < sum; i++) {
        uint32_t h = (uint32_t)i * 2654435761u;
        double u = (double)(h >> 8) / 16777216.0 - 0.5, v = (double)(h & 255) / 256.0;
        g[i] = (float)(u * v * v * v * 1e-2);
    }
    char err[512];
    if (g && pc_cost_measure_codec(spec, g, n, k, o->reps, rate, err, sizeof(err)) != PC_OK) {
        fprintf(stderr, "pc-bench: model: timing %s: %s\n", name, err);
        status = BENCH_EXIT_FAIL;
    }
    free(g);
    free(n);
    return status;
}

/* --trace's table: the prediction for N = 1, 2, 4, ... and --compressors-max itself, then
 * the least N that keeps up. 0 or BENCH_EXIT_FAIL (said). */
static int pool_table(const opts_t *o, const pc_cost_t *cost)
{
    int status = 0;
    /* N = 1, 2, 4, ... and --compressors-max itself. */
    for (int N = 1; status == 0; N = 2 * N < o->compressors_max ? 2 * N : o->compressors_max) {
        pc_cost_result_t r;
        if (pc_cost_predict_pool(cost, PC_COST_PS_TOPK_PIPELINED, 1, 1, NULL, N, &r) != PC_OK) {
            fprintf(stderr, "pc-bench: model: the prediction for %d threads failed\n", N);
            status = BENCH_EXIT_FAIL;
            break;
        }
        printf("%11d %10.2f %13.2f %9.2f %11.2f %5s %16.2f\n", N,
               pc_cost_pool_speedup(N, o->pool_efficiency), r.compress_busy * 1e3, r.compress * 1e3,
               r.backward * 1e3, r.keeps_up ? "yes" : "no", r.iter * 1e3);
        if (N == o->compressors_max)
            break;
    }
    int need = 0;
    pc_cost_result_t r;
    if (status == 0 && pc_cost_pool_size(cost, PC_COST_PS_TOPK_PIPELINED, 1, 1, NULL,
                                         o->compressors_max, &need, &r) == PC_OK) {
        if (r.keeps_up)
            printf("needs: %d compressor thread%s (predicted: the least whose compression fits "
                   "under the backward pass)\n",
                   need, need == 1 ? "" : "s");
        else
            printf("needs: more than %d compressor threads (predicted: %d leave %.2f ms of "
                   "compression against %.2f ms of backward)\n",
                   o->compressors_max, o->compressors_max, r.compress_busy * 1e3, r.backward * 1e3);
    }
    return status;
}

/* --trace: the pool the trace's model needs (the header's comment). Rank 0 alone. */
static int trace_pool(const opts_t *o)
{
    const char *text = o->compress[0] ? o->compress : "topk:ratio=0.01";
    pc_codec_spec_t spec, none;
    char err[512];
    if (pc_codec_spec_parse(text, &spec, err, sizeof(err)) != PC_OK) {
        fprintf(stderr, "pc-bench: model: --compress %s: %s\n", text, err);
        return BENCH_EXIT_USAGE;
    }
    if (spec.id == PC_CODEC_POWERSGD) {
        fprintf(stderr,
                "pc-bench: model: --trace --compress %s: powersgd's rounds need the "
                "matrices' rows, which a trace's pool table does not model; use an "
                "element-wise codec\n",
                text);
        return BENCH_EXIT_USAGE;
    }
    pc_codec_spec_parse("none", &none, err, sizeof(err));
    traced_t t;
    int status = traced_load(o, &t);
    if (status != 0)
        return status;
    pc_plan_t *plan = NULL;
    if (pc_plan_create(t.tensors, t.nt, (size_t)o->chunk_bytes / sizeof(float), 1, &plan) !=
        PC_OK) {
        fprintf(stderr, "pc-bench: model: the trace's tensors make no plan\n");
        traced_free(&t);
        return BENCH_EXIT_FAIL;
    }
    /* The codec on the compressed chunks, "none" on the rest; a rate that has no chunk to
     * serve is never used, but must be a valid one: none's, or the codec's. */
    pc_cost_codec_rate_t rc_codec = {0}, rc_none = {0};
    size_t n_codec = 0, n_none = 0;
    status = time_codec(o, plan, &spec, text, true, &rc_codec, &n_codec);
    if (status == 0)
        status = time_codec(o, plan, &none, "none", false, &rc_none, &n_none);
    int nchunks = plan->nchunks;
    pc_plan_destroy(plan);
    if (status == 0 && n_codec == 0)
        rc_codec = rc_none;
    if (status == 0 && n_none == 0)
        rc_none = rc_codec;
    pc_cost_t *cost = NULL;
    if (status == 0) {
        /* Only the compressor counts: an ideal network (no transfer time, no latency) and
         * servers that take no time. The codec stands in top-k's slot of the pipelined mode. */
        pc_cost_cfg_t cc = {.layers = t.layers,
                            .nlayers = t.nl,
                            .tensors = t.tensors,
                            .tensor_layer = t.tensor_layer,
                            .ntensors = t.nt,
                            .chunk_bytes = (size_t)o->chunk_bytes,
                            .compress_min_bytes = (size_t)o->compress_min_bytes,
                            .link = {.bandwidth = INFINITY, .latency = 0},
                            .pool_efficiency = o->pool_efficiency};
        for (int q = 0; q < PC_COST_CODECS; q++)
            cc.codec[q] = rc_none;
        cc.codec[PC_COST_CODEC_TOPK] = rc_codec;
        if (pc_cost_create(&cc, &cost) != PC_OK) {
            fprintf(stderr, "pc-bench: model: the measured rates make no cost model\n");
            status = BENCH_EXIT_FAIL;
        }
    }
    if (status == 0) {
        double bwd = 0;
        for (int l = 0; l < t.nl; l++)
            bwd += t.layers[l].bwd;
        printf("pc-bench model --trace: %s on %s (batch %d, %s): %zu parameters in %d chunks "
               "(--chunk-bytes %lld), backward %.2f ms per iteration (the trace's)\n",
               pc_trace_model(t.tr), pc_trace_device(t.tr), pc_trace_batch(t.tr),
               pc_trace_precision(t.tr), pc_trace_total_params(t.tr), nchunks,
               (long long)o->chunk_bytes, bwd * 1e3);
        printf("codec %s: %.1f Melem/s on one core of this machine (fold and compress, median "
               "of %d passes over %zu elements); none (chunks under %lld bytes): %.1f Melem/s "
               "(%zu elements)\n",
               text, rc_codec.compress > 0 ? 1e-6 / rc_codec.compress : 0.0, o->reps, n_codec,
               (long long)o->compress_min_bytes,
               rc_none.compress > 0 ? 1e-6 / rc_none.compress : 0.0, n_none);
        printf("predicted by the cost model, pipelined, ideal network and servers; a pool of N "
               "threads %s:\n",
               o->pool_efficiency > 0 ? "at the efficiency given"
                                      : "dividing the work perfectly "
                                        "(assumed)");
        printf("%11s %10s %13s %9s %11s %5s %16s\n", "compressors", "speed-up", "compress ms",
               "cpu ms", "backward ms", "fits", "iter ms (ideal)");
    }
    if (status == 0)
        status = pool_table(o, cost);
    pc_cost_destroy(cost);
    traced_free(&t);
    return status;
}

int bench_model_main(int argc, char **argv)
{
    int provided, rank, size;
    /* MPI_COMM_WORLD keeps MPI_ERRORS_ARE_FATAL: an MPI error in this program's own calls
     * ends the job with MPI's message. */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    openblas_set_num_threads(1); /* pc-train's setting: a worker's BLAS on one core */
    pc_config_t defaults;
    pc_config_defaults(&defaults);
    opts_t o = {.model = PC_MODEL_MLP,
                .batch = 32,
                .reps = 5,
                .chunk_bytes = defaults.chunk_bytes,
                .compress_min_bytes = defaults.compress_min_bytes,
                .topk_ratio = 0.01,
                .dgc_ratio = 0.001,
                .servers_ratio = 0.25,
                .max_workers = 1024,
                .at_workers = 8,
                .link_bytes = 4 << 20,
                .device = 0,
                .compressors_max = 16};
    pc_flags_group_t g = {"pc-bench model flags", model_opts,
                          sizeof(model_opts) / sizeof(model_opts[0]), &o, NULL};
    char err[512] = "";
    int rc = pc_flags_parse(&g, 1, argc, argv, NULL, err, sizeof(err));
    int early =
        pc_flags_finish(rc, &g, 1, "pc-bench",
                        "mpirun -np N pc-bench model [flags]   (N >= 2: the job's ranks and "
                        "nodes; or, one rank: pc-bench model --bandwidth B --latency T "
                        "[flags])",
                        err, rank == 0, stdout, stderr);
    if (early >= 0) {
        MPI_Finalize();
        return early;
    }
    if (device_of(&o) != PC_MODEL_CPU) { /* before anything else can fail: one clear line */
        char why[160];
        if (pc_cuda_status(why, sizeof(why)) == 0) {
            if (rank == 0)
                fprintf(stderr, "pc-bench: model: --device cuda: no usable CUDA device: %s\n", why);
            MPI_Finalize();
            return BENCH_EXIT_FAIL;
        }
    }
    if (o.trace[0]) { /* the pool a traced model needs: rank 0, no MPI measurement */
        int st = rank == 0 ? trace_pool(&o) : 0;
        MPI_Finalize();
        return st;
    }
    if (o.iters > 0) { /* pc-bench engine's measurement (this flag's older home): rank 0 */
        int st = rank == 0
                     ? bench_engine_throughput(o.model, o.batch, o.iters, o.device != 0, o.json)
                     : 0;
        MPI_Finalize();
        return st;
    }
    asked_t q = {.latency = o.latency[0] ? parse_latency(o.latency) : -1,
                 .pmode = PC_COST_ALLREDUCE};
    q.nbw = o.bandwidth[0] ? parse_rates(o.bandwidth, q.bw) : 0;
    q.predict = o.predict[0] && parse_predict(o.predict, &q.pW, &q.pS, &q.pmode, &q.pall);
    if (size < 2 && (q.nbw == 0 || q.latency < 0)) {
        if (rank == 0)
            fprintf(stderr, "pc-bench: model: one rank cannot measure the link: give --bandwidth "
                            "and --latency, or run it under mpirun with 2 ranks\n");
        MPI_Finalize();
        return BENCH_EXIT_USAGE;
    }
    measured_t *m = calloc(1, sizeof(*m));
    if (!m) {
        fprintf(stderr, "pc-bench: model: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, BENCH_EXIT_FAIL);
    }
    pc_auto_probe_t probe;
    int status = measure_all(&o, rank, m, &probe);
    describe_transport(m->transport, sizeof(m->transport), m->fig.link_remote);
    if (rank != 0) {
        free_measured(m);
        MPI_Finalize();
        return status;
    }
    if (status == 0)
        status = report(&o, m, &probe, &q, size);
    fflush(stdout);
    free_measured(m);
    MPI_Finalize();
    return status;
}
