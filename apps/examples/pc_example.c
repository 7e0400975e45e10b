/* pc_example: the PipeCompress API end to end, in one file (doc/api.md walks through it).
 *
 * A three-layer perceptron (input -> hidden -> hidden -> 10, ReLU) learns a random linear
 * "teacher" map by mean squared error on synthetic data, data-parallel over the workers,
 * with compressed gradients going to parameter servers:
 *
 *   mpirun -np 3 pc_example --servers 1 --compress topk:ratio=0.01 --iters 200
 *
 * It is also the runtime's test workload: its loss must fall, --pipeline on and off must
 * save bitwise-identical parameters (--save FILE), and --metrics shows the exposed
 * compression time. Every runtime flag works here (--help). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <mpi.h>

#include "pipecompress/pipecompress.h"

typedef struct opts {
    int batch;
    int input;
    int hidden;
    char save[1024];
} opts_t;

static const pc_opt_t example_opts[] = {
    {.name = "batch",
     .short_name = 'b',
     .type = PC_OPT_INT,
     .offset = offsetof(opts_t, batch),
     .min = 1,
     .max = 65536,
     .metavar = "B",
     .help = "samples per worker per iteration"},
    {.name = "input",
     .type = PC_OPT_INT,
     .offset = offsetof(opts_t, input),
     .min = 1,
     .max = 65536,
     .metavar = "D",
     .help = "input features"},
    {.name = "hidden",
     .type = PC_OPT_INT,
     .offset = offsetof(opts_t, hidden),
     .min = 1,
     .max = 65536,
     .metavar = "H",
     .help = "hidden units per layer"},
    {.name = "save",
     .type = PC_OPT_STRING,
     .offset = offsetof(opts_t, save),
     .size = 1024,
     .metavar = "FILE",
     .help = "worker 0 writes the final parameters (raw floats) to FILE"},
};

#define OUT 10

/* Set by SIGINT/SIGTERM; the runtime stops every worker at the same iteration. */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    stop_requested = sig; /* its number: every rank exits with 128 + it */
}

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "pc_example: %s: %s\n", what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* Uniform floats in [-scale, scale) from a Philox stream. */
static void fill(float *x, size_t n, uint64_t seed, uint64_t stream, float scale)
{
    pc_philox_t g;
    pc_philox_init(&g, seed, stream, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (2.0f * pc_philox_uniform(pc_philox_next(&g)) - 1.0f) * scale;
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* ---- flags: the runtime's and this program's, in one command line ---- */
    pc_config_t cfg;
    pc_config_defaults(&cfg);
    opts_t o = {.batch = 32, .input = 128, .hidden = 256};
    pc_opt_group_t groups[] = {pc_config_group(&cfg, "Runtime flags"),
                               {"pc_example flags", example_opts,
                                sizeof(example_opts) / sizeof(example_opts[0]), &o, NULL}};
    char err[1024];
    int rc = pc_opt_parse(groups, 2, argc, argv, NULL, err, sizeof(err));
    if (rc == PC_OK)
        rc = pc_runtime_check_config(&cfg, size, err, sizeof(err));
    int status = pc_opt_finish(rc, groups, 2, "pc_example", "mpirun -np N pc_example [flags]", err,
                               rank == 0, stdout, stderr);
    if (status >= 0) {
        MPI_Finalize();
        return status;
    }
    if (cfg.iters == 0)
        cfg.iters = 100;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    /* ---- the runtime: roles, placement; servers serve and are done ---- */
    pc_log_t *log;
    pc_log_create(stderr, rank, (pc_log_level_t)cfg.log_level, &log);
    pc_runtime_t *rt;
    rc = pc_runtime_create(&cfg, MPI_COMM_WORLD, log, &rt, err, sizeof(err));
    if (rc == PC_ENODEV) { /* the same message on every rank (pc_runtime.h): said once */
        if (rank == 0)
            fprintf(stderr, "pc_example: %s\n", err);
        pc_log_destroy(log);
        MPI_Finalize();
        return 1;
    }
    if (rc != PC_OK)
        die("runtime", err);
    pc_runtime_set_stop_flag(rt, &stop_requested);
    if (pc_runtime_role(rt) == PC_ROLE_SERVER) {
        if (pc_server_run(rt, err, sizeof(err)) != PC_OK)
            die("server", err);
        int sig = pc_runtime_stop_signal(rt);
        pc_runtime_destroy(rt);
        pc_log_destroy(log);
        MPI_Finalize();
        return sig ? 128 + sig : 0;
    }
    if (rank == 0) {
        printf("pc_example: %d workers, %d servers, %s, --compress %s, --pipeline %s\n",
               pc_runtime_workers(rt), pc_runtime_servers(rt),
               cfg.mode == PC_MODE_PS ? "parameter servers" : "allreduce", cfg.compress,
               cfg.pipeline ? "on" : "off");
        fflush(stdout);
    }

    /* ---- the model: one slab for parameters, one for gradients (llm.c style) ---- */
    const int D = o.input, H = o.hidden, B = o.batch;
    const size_t sizes[6] = {(size_t)H * D, (size_t)H,       (size_t)H * H,
                             (size_t)H,     (size_t)OUT * H, OUT};
    const char *names[6] = {"fc1.weight", "fc1.bias",   "fc2.weight",
                            "fc2.bias",   "fc3.weight", "fc3.bias"};
    size_t total = 0, off[6];
    for (int i = 0; i < 6; i++) {
        off[i] = total;
        total += sizes[i];
    }
    float *params = calloc(total, sizeof(float)), *grads = calloc(total, sizeof(float));
    float *x = malloc(sizeof(float) * (size_t)B * D), *y = malloc(sizeof(float) * (size_t)B * OUT);
    float *h1 = malloc(sizeof(float) * (size_t)B * H), *h2 = malloc(sizeof(float) * (size_t)B * H);
    float *out = malloc(sizeof(float) * (size_t)B * OUT);
    float *d2 = malloc(sizeof(float) * (size_t)B * H), *d1 = malloc(sizeof(float) * (size_t)B * H);
    float *teacher = malloc(sizeof(float) * OUT * (size_t)D);
    if (!params || !grads || !x || !y || !h1 || !h2 || !out || !d2 || !d1 || !teacher)
        die("memory", "out of memory");
    float *W1 = params + off[0], *b1 = params + off[1], *W2 = params + off[2],
          *b2 = params + off[3], *W3 = params + off[4], *b3 = params + off[5];
    float *gW1 = grads + off[0], *gb1 = grads + off[1], *gW2 = grads + off[2],
          *gb2 = grads + off[3], *gW3 = grads + off[4], *gb3 = grads + off[5];
    fill(W1, sizes[0], (uint64_t)cfg.seed, 1, sqrtf(6.0f / (float)D)); /* He-uniform */
    fill(W2, sizes[2], (uint64_t)cfg.seed, 2, sqrtf(6.0f / (float)H));
    fill(W3, sizes[4], (uint64_t)cfg.seed, 3, sqrtf(3.0f / (float)H));
    fill(teacher, (size_t)OUT * D, (uint64_t)cfg.seed, 4, 1.0f);

    pc_worker_t *w;
    if (pc_worker_create(rt, &w, err, sizeof(err)) != PC_OK)
        die("worker", err);
    int tid[6];
    /* --device emulate runs these host buffers through the runtime's device-tensor path
     * (pc_gpu.h's host emulation); this example computes on the CPU, so not --device cuda. */
    if (cfg.device == PC_DEVICE_CUDA)
        die("--device", "cuda: this example computes on the CPU (pc-train --device cuda trains "
                        "on a GPU)");
    int (*reg)(pc_worker_t *, const char *, float *, float *, size_t) =
        cfg.device == PC_DEVICE_CPU ? pc_worker_register : pc_worker_register_device;
    for (int i = 0; i < 6; i++)
        if ((tid[i] = reg(w, names[i], params + off[i], grads + off[i], sizes[i])) < 0)
            die("register", pc_worker_error(w));
    if (pc_worker_start(w) != PC_OK)
        die("start", pc_worker_error(w));

    /* ---- training ---- */
    double loss = 0;
    bool stop = false;
    /* 0, or the checkpoint's iteration with --resume: batches derive from the iteration. */
    for (int64_t it = pc_worker_iteration(w); it < cfg.iters && !stop; it++) {
        /* This worker's batch: its own stream of (seed, iteration, worker). */
        fill(x, (size_t)B * D, (uint64_t)cfg.seed, 1000 + (uint64_t)it * 4096 + (uint64_t)rank,
             1.0f);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OUT, D, 1.0f, x, D, teacher, D,
                    0.0f, y, OUT); /* y (B, OUT) = x teacher^T */
        /* forward, waiting for each layer's parameters just before using them */
        if (pc_worker_param_wait(w, tid[0]) || pc_worker_param_wait(w, tid[1]))
            die("param_wait", pc_worker_error(w));
        for (int b = 0; b < B; b++)
            memcpy(h1 + (size_t)b * H, b1, sizeof(float) * (size_t)H);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, H, D, 1.0f, x, D, W1, D, 1.0f, h1,
                    H); /* h1 (B, H) */
        for (size_t i = 0; i < (size_t)B * H; i++)
            h1[i] = h1[i] > 0 ? h1[i] : 0;
        if (pc_worker_param_wait(w, tid[2]) || pc_worker_param_wait(w, tid[3]))
            die("param_wait", pc_worker_error(w));
        for (int b = 0; b < B; b++)
            memcpy(h2 + (size_t)b * H, b2, sizeof(float) * (size_t)H);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, H, H, 1.0f, h1, H, W2, H, 1.0f, h2,
                    H); /* h2 (B, H) */
        for (size_t i = 0; i < (size_t)B * H; i++)
            h2[i] = h2[i] > 0 ? h2[i] : 0;
        if (pc_worker_param_wait(w, tid[4]) || pc_worker_param_wait(w, tid[5]))
            die("param_wait", pc_worker_error(w));
        for (int b = 0; b < B; b++)
            memcpy(out + (size_t)b * OUT, b3, sizeof(float) * OUT);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OUT, H, 1.0f, h2, H, W3, H, 1.0f,
                    out, OUT); /* out (B, OUT) */
        loss = 0;
        for (size_t i = 0; i < (size_t)B * OUT; i++) {
            float e = out[i] - y[i];
            loss += (double)e * e;
            out[i] = 2.0f * e / (float)(B * OUT); /* now d loss / d out */
        }
        loss /= (double)(B * OUT);
        /* backward, last layer first; each layer's gradients go out as soon as they are
         * complete (and its parameters are no longer needed this iteration) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OUT, H, B, 1.0f, out, OUT, h2, H, 0.0f,
                    gW3, H);
        memset(gb3, 0, sizeof(float) * OUT);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < OUT; j++)
                gb3[j] += out[(size_t)b * OUT + (size_t)j];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, H, OUT, 1.0f, out, OUT, W3, H,
                    0.0f, d2, H); /* d2 (B, H) = dout W3 */
        if (pc_worker_grad_ready(w, tid[5]) || pc_worker_grad_ready(w, tid[4]))
            die("grad_ready", pc_worker_error(w));
        for (size_t i = 0; i < (size_t)B * H; i++)
            d2[i] = h2[i] > 0 ? d2[i] : 0;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, H, H, B, 1.0f, d2, H, h1, H, 0.0f, gW2,
                    H);
        memset(gb2, 0, sizeof(float) * (size_t)H);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < H; j++)
                gb2[j] += d2[(size_t)b * H + (size_t)j];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, H, H, 1.0f, d2, H, W2, H, 0.0f,
                    d1, H);
        if (pc_worker_grad_ready(w, tid[3]) || pc_worker_grad_ready(w, tid[2]))
            die("grad_ready", pc_worker_error(w));
        for (size_t i = 0; i < (size_t)B * H; i++)
            d1[i] = h1[i] > 0 ? d1[i] : 0;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, H, D, B, 1.0f, d1, H, x, D, 0.0f, gW1,
                    D);
        memset(gb1, 0, sizeof(float) * (size_t)H);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < H; j++)
                gb1[j] += d1[(size_t)b * H + (size_t)j];
        if (pc_worker_grad_ready(w, tid[1]) || pc_worker_grad_ready(w, tid[0]))
            die("grad_ready", pc_worker_error(w));
        if (pc_worker_iteration_end(w, &stop) != PC_OK)
            die("iteration_end", pc_worker_error(w));
        pc_worker_metrics_t m;
        if (rank == 0 && (it % 20 == 0 || it + 1 == cfg.iters) && pc_worker_last_metrics(w, &m)) {
            printf(
                "iter %lld/%lld loss %.5f | iteration %.2f ms, compress %.2f ms, exposed %.2f ms, "
                "%llu bytes sent\n",
                (long long)it + 1, (long long)cfg.iters, loss, m.t_iteration * 1e3,
                m.t_compress * 1e3, m.t_exposed * 1e3, (unsigned long long)m.bytes_sent);
            fflush(stdout);
        }
    }
    if (pc_worker_finish(w) != PC_OK)
        die("finish", pc_worker_error(w));
    if (rank == 0) {
        printf("final loss %.5f after %lld iterations%s\n", loss, (long long)pc_worker_iteration(w),
               stop ? " (stopped by a signal)" : "");
        if (o.save[0]) {
            FILE *f = fopen(o.save, "wb");
            if (!f || fwrite(params, sizeof(float), total, f) != total || fclose(f) != 0)
                die("--save", "cannot write the parameters");
        }
    }
    int sig = pc_runtime_stop_signal(rt);
    pc_worker_destroy(w);
    pc_runtime_destroy(rt);
    pc_log_destroy(log);
    free(params);
    free(grads);
    free(x);
    free(y);
    free(h1);
    free(h2);
    free(out);
    free(d1);
    free(d2);
    free(teacher);
    MPI_Finalize();
    return stop ? 128 + sig : 0;
}
