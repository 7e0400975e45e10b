/* pc-bench engine: the training engine's throughput alone, on --device, without the
 * runtime: --iters forward and backward passes of one --batch (copied from page-locked
 * memory each time, as training does) after a few untimed ones, printed as one JSON line,
 * the line scripts/bench/torch_engine.py prints for PyTorch on the same network (the two
 * side by side are scripts/gpu-check.sh's engine comparison). One process, no MPI.
 * pc-bench model --iters N runs the same measurement (its older home). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "bench.h"
#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_data.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_model.h"
#include "pipecompress/pc_flags.h"
#include "pipecompress/pc_time.h"

/* Untimed passes before the timed ones: the first allocates cuBLAS's kernels and warms
 * the caches; three leave the clocks up. */
#define THROUGHPUT_WARMUP 3

typedef struct opts {
    int model;
    int batch;
    int iters;
    int device; /* 0 cpu, 1 cuda (device 0) */
    char json[512];
} opts_t;

static const pc_flags_t engine_opts[] = {
    BENCH_OPT_MODEL_BATCH(opts_t, "network to train (pc-train's)", "samples per pass"),
    {.name = "iters",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, iters),
     .min = 1,
     .max = 1000000,
     .metavar = "N",
     .help = "timed forward+backward passes (after 3 untimed ones)"},
    {.name = "device",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(opts_t, device),
     .choices = "cpu|cuda",
     .help = "where the layers run: cpu (one core) or cuda (device 0)"},
    {.name = "json",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, json),
     .size = 512,
     .metavar = "FILE",
     .help = "also write the line to FILE"},
};

static const char *device_name(bool cuda)
{
    return cuda ? "cuda" : "cpu";
}

int bench_engine_model(int model, int batch, bool cuda, const pc_dataset_t *ds, pc_model_t **out)
{
    char err[256];
    int device = cuda ? 0 : PC_MODEL_CPU;
    if (pc_model_create_on((pc_model_kind_t)model, batch, 1, (int)ds->rows, (int)ds->cols,
                           ds->classes, 0.5f, device, out, err, sizeof(err)) != PC_OK) {
        fprintf(stderr, "pc-bench: model: --device %s: %s\n", device_name(cuda), err);
        return -1;
    }
    if (pc_model_init(*out, 1) != PC_OK) {
        fprintf(stderr, "pc-bench: model: --device %s: %s\n", device_name(cuda),
                pc_model_error(*out));
        pc_model_destroy(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

/* The timed passes: *seconds for iters of them after THROUGHPUT_WARMUP untimed ones (the
 * device waited for at both ends). PC_OK, or the engine's code (its message printed). */
static int time_passes(pc_model_t *model, float *x, uint8_t *y, int batch, int iters, bool cuda,
                       double *seconds)
{
    int rc = PC_OK;
    int64_t t0 = 0;
    for (int it = -THROUGHPUT_WARMUP; it < iters && rc == PC_OK; it++) {
        if (it == 0 && (rc = pc_model_sync(model)) == PC_OK)
            t0 = pc_time_ns();
        /* No loss asked: a device pass queues its work and returns (as training does). */
        if (rc == PC_OK)
            rc = pc_model_forward(model, x, y, batch, true, 1, (uint64_t)(it + THROUGHPUT_WARMUP),
                                  NULL, NULL, NULL);
        if (rc == PC_OK)
            rc = pc_model_backward(model, y, batch, NULL);
    }
    if (rc == PC_OK)
        rc = pc_model_sync(model);
    *seconds = (double)(pc_time_ns() - t0) * 1e-9;
    if (rc != PC_OK)
        fprintf(stderr, "pc-bench: model: --device %s: training pass: %s\n", device_name(cuda),
                pc_model_error(model)[0] ? pc_model_error(model) : pc_strerror(rc));
    return rc;
}

/* The result line on stdout, and in json (a path, or "") when given. */
static int print_line(pc_model_t *model, int kind, int batch, int iters, bool cuda, double seconds,
                      const char *json)
{
    char name[256] = "cpu", line[1024];
    if (cuda)
        pc_cuda_device_name(0, name, sizeof(name));
    for (char *c = name; *c; c++) /* a JSON string: no quote or backslash */
        *c = *c == '"' || *c == '\\' ? '?' : *c;
    snprintf(line, sizeof(line),
             "{\"benchmark\": \"model-throughput\", \"engine\": \"pipecompress\", "
             "\"device\": \"%s\", \"device_name\": \"%s\", \"model\": \"%s\", "
             "\"params\": %zu, \"batch\": %d, \"iters\": %d, \"warmup\": %d, "
             "\"seconds\": %.6f, \"ms_per_iter\": %.4f, \"samples_per_s\": %.1f}",
             device_name(cuda), name, pc_model_kind_name((pc_model_kind_t)kind),
             pc_model_nparams(model), batch, iters, THROUGHPUT_WARMUP, seconds,
             seconds * 1e3 / iters, (double)iters * batch / seconds);
    printf("%s\n", line);
    FILE *j = json[0] ? fopen(json, "w") : NULL;
    bool bad = json[0] && !j;
    if (j) {
        bad = fprintf(j, "%s\n", line) < 0;
        bad = fclose(j) != 0 || bad;
    }
    if (bad) {
        fprintf(stderr, "pc-bench: --json: cannot write '%s'\n", json);
        if (j)
            remove(json); /* no half-written result */
        return BENCH_EXIT_FAIL;
    }
    return 0;
}

int bench_engine_throughput(int model_kind, int batch, int iters, bool cuda, const char *json)
{
    pc_dataset_t ds = {0};
    pc_model_t *model = NULL;
    float *x = NULL;
    uint8_t *y = NULL;
    if (pc_data_synthetic((uint32_t)batch, 7, 0, &ds) != PC_OK) {
        fprintf(stderr, "pc-bench: model: out of memory for a batch of %d\n", batch);
        return BENCH_EXIT_FAIL;
    }
    int status =
        bench_engine_model(model_kind, batch, cuda, &ds, &model) == 0 ? 0 : BENCH_EXIT_FAIL;
    size_t xbytes = sizeof(float) * ds.rows * ds.cols * (size_t)batch;
    if (status == 0 && (pc_model_host_alloc(model, xbytes, (void **)&x) != PC_OK ||
                        pc_model_host_alloc(model, (size_t)batch, (void **)&y) != PC_OK)) {
        fprintf(stderr, "pc-bench: model: out of page-locked memory for the batch\n");
        status = BENCH_EXIT_FAIL;
    }
    double seconds = 0;
    if (status == 0) {
        memcpy(x, ds.images, xbytes);
        memcpy(y, ds.labels, (size_t)batch);
        if (time_passes(model, x, y, batch, iters, cuda, &seconds) != PC_OK)
            status = BENCH_EXIT_FAIL;
    }
    if (status == 0)
        status = print_line(model, model_kind, batch, iters, cuda, seconds, json);
    if (model) {
        pc_model_host_free(model, x);
        pc_model_host_free(model, y);
    }
    pc_model_destroy(model);
    pc_data_free(&ds);
    return status;
}

int bench_engine_main(int argc, char **argv)
{
    opts_t o = {.model = PC_MODEL_MLP, .batch = 32, .iters = 100, .device = 0};
    pc_flags_group_t g = {"pc-bench engine flags", engine_opts,
                          sizeof(engine_opts) / sizeof(engine_opts[0]), &o, NULL};
    char err[512] = "";
    int rc = pc_flags_parse(&g, 1, argc, argv, NULL, err, sizeof(err));
    int early =
        pc_flags_finish(rc, &g, 1, "pc-bench", "pc-bench engine [flags]", err, 1, stdout, stderr);
    if (early >= 0)
        return early;
    openblas_set_num_threads(1); /* pc-train's setting: a worker's BLAS on one core */
    if (o.device) {              /* before anything else can fail: one clear line */
        char why[160];
        if (pc_cuda_status(why, sizeof(why)) == 0) {
            fprintf(stderr, "pc-bench: engine: --device cuda: no usable CUDA device: %s\n", why);
            return BENCH_EXIT_FAIL;
        }
    }
    return bench_engine_throughput(o.model, o.batch, o.iters, o.device != 0, o.json);
}
