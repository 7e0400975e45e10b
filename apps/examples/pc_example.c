/* pc_example: the PipeCompress API end to end, in one file (doc/api.md walks through it).
 *
 * A three-layer perceptron (input -> hidden -> hidden -> 10, ReLU) learns a random linear
 * "teacher" map by mean squared error on synthetic data, data-parallel over the workers,
 * with compressed gradients going to parameter servers:
 *
 *   mpirun -np 3 pc_example --servers 1 --compress topk:ratio=0.01 --iters 200
 *
 * It is also the runtime's test workload: its loss must fall, --pipeline on and off must
 * save bitwise-identical parameters (--save FILE; before writing it, every worker's
 * parameters are checked bit for bit against worker 0's), and --metrics shows the exposed
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

static const pc_flags_t example_opts[] = {
    {.name = "batch",
     .short_name = 'b',
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, batch),
     .min = 1,
     .max = 65536,
     .metavar = "B",
     .help = "samples per worker per iteration"},
    {.name = "input",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, input),
     .min = 1,
     .max = 65536,
     .metavar = "D",
     .help = "input features"},
    {.name = "hidden",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, hidden),
     .min = 1,
     .max = 65536,
     .metavar = "H",
     .help = "hidden units per layer"},
    {.name = "save",
     .type = PC_FLAGS_STRING,
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

/* The model: one slab for parameters, one for gradients (llm.c style), six tensors of a
 * three-layer perceptron, and the activations of a batch. */
typedef struct mlp {
    int D, H, B;
    size_t sizes[6], off[6], total;
    float *params, *grads;
    float *x, *y, *h1, *h2, *out, *d1, *d2, *teacher;
    int tid[6]; /* the tensors' ids in the worker */
} mlp_t;

static const char *const tensor_names[6] = {"fc1.weight", "fc1.bias",   "fc2.weight",
                                            "fc2.bias",   "fc3.weight", "fc3.bias"};

/* Allocate the model for D inputs, H hidden units and batches of B; initialise the weights
 * (He-uniform) and the teacher from the seed. */
static void mlp_create(mlp_t *n, int D, int H, int B, uint64_t seed)
{
    *n = (mlp_t){
        .D = D,
        .H = H,
        .B = B,
        .sizes = {(size_t)H * D, (size_t)H, (size_t)H * H, (size_t)H, (size_t)OUT * H, OUT}};
    for (int i = 0; i < 6; i++) {
        n->off[i] = n->total;
        n->total += n->sizes[i];
    }
    n->params = calloc(n->total, sizeof(float));
    n->grads = calloc(n->total, sizeof(float));
    n->x = malloc(sizeof(float) * (size_t)B * D);
    n->y = malloc(sizeof(float) * (size_t)B * OUT);
    n->h1 = malloc(sizeof(float) * (size_t)B * H);
    n->h2 = malloc(sizeof(float) * (size_t)B * H);
    n->out = malloc(sizeof(float) * (size_t)B * OUT);
    n->d2 = malloc(sizeof(float) * (size_t)B * H);
    n->d1 = malloc(sizeof(float) * (size_t)B * H);
    n->teacher = malloc(sizeof(float) * OUT * (size_t)D);
    if (!n->params || !n->grads || !n->x || !n->y || !n->h1 || !n->h2 || !n->out || !n->d2 ||
        !n->d1 || !n->teacher)
        die("memory", "out of memory");
    fill(n->params + n->off[0], n->sizes[0], seed, 1, sqrtf(6.0f / (float)D)); /* He-uniform */
    fill(n->params + n->off[2], n->sizes[2], seed, 2, sqrtf(6.0f / (float)H));
    fill(n->params + n->off[4], n->sizes[4], seed, 3, sqrtf(3.0f / (float)H));
    fill(n->teacher, (size_t)OUT * D, seed, 4, 1.0f);
}

static void mlp_free(mlp_t *n)
{
    free(n->params);
    free(n->grads);
    free(n->x);
    free(n->y);
    free(n->h1);
    free(n->h2);
    free(n->out);
    free(n->d1);
    free(n->d2);
    free(n->teacher);
}

/* Wait for tensors a and b's parameters of this iteration. */
static void wait2(pc_worker_t *w, int a, int b)
{
    if (pc_worker_param_wait(w, a) || pc_worker_param_wait(w, b))
        die("param_wait", pc_worker_error(w));
}

/* Hand over tensors a and b's gradients. */
static void ready2(pc_worker_t *w, int a, int b)
{
    if (pc_worker_grad_ready(w, a) || pc_worker_grad_ready(w, b))
        die("grad_ready", pc_worker_error(w));
}

/* h (B, rows) = relu(in (B, cols) W^T + bias). */
static void dense_relu(const mlp_t *n, const float *in, int cols, const float *W, const float *bias,
                       int rows, float *h)
{
    for (int b = 0; b < n->B; b++)
        memcpy(h + (size_t)b * rows, bias, sizeof(float) * (size_t)rows);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n->B, rows, cols, 1.0f, in, cols, W, cols,
                1.0f, h, rows);
    for (size_t i = 0; i < (size_t)n->B * rows; i++)
        h[i] = h[i] > 0 ? h[i] : 0;
}

/* Forward on the batch in n->x (targets n->y), waiting for each layer's parameters just
 * before using them; returns the mean squared error, and leaves d loss / d out in n->out. */
static double forward(mlp_t *n, pc_worker_t *w)
{
    const int D = n->D, H = n->H, B = n->B;
    const float *p = n->params;
    wait2(w, n->tid[0], n->tid[1]);
    dense_relu(n, n->x, D, p + n->off[0], p + n->off[1], H, n->h1);
    wait2(w, n->tid[2], n->tid[3]);
    dense_relu(n, n->h1, H, p + n->off[2], p + n->off[3], H, n->h2);
    wait2(w, n->tid[4], n->tid[5]);
    for (int b = 0; b < B; b++)
        memcpy(n->out + (size_t)b * OUT, p + n->off[5], sizeof(float) * OUT);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OUT, H, 1.0f, n->h2, H, p + n->off[4],
                H, 1.0f, n->out, OUT); /* out (B, OUT) */
    double loss = 0;
    for (size_t i = 0; i < (size_t)B * OUT; i++) {
        float e = n->out[i] - n->y[i];
        loss += (double)e * e;
        n->out[i] = 2.0f * e / (float)(B * OUT); /* now d loss / d out */
    }
    return loss / (double)(B * OUT);
}

/* gW (rows, cols) = d^T in, gb = the column sums of d (B, rows). */
static void dense_grads(const mlp_t *n, const float *d, int rows, const float *in, int cols,
                        float *gW, float *gb)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, cols, n->B, 1.0f, d, rows, in, cols,
                0.0f, gW, cols);
    memset(gb, 0, sizeof(float) * (size_t)rows);
    for (int b = 0; b < n->B; b++)
        for (int j = 0; j < rows; j++)
            gb[j] += d[(size_t)b * rows + (size_t)j];
}

/* Backward, last layer first; each layer's gradients go out as soon as they are complete
 * (and its parameters are no longer needed this iteration). */
static void backward(mlp_t *n, pc_worker_t *w)
{
    const int D = n->D, H = n->H, B = n->B;
    const float *p = n->params;
    float *g = n->grads;
    dense_grads(n, n->out, OUT, n->h2, H, g + n->off[4], g + n->off[5]);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, H, OUT, 1.0f, n->out, OUT,
                p + n->off[4], H, 0.0f, n->d2, H); /* d2 (B, H) = dout W3 */
    ready2(w, n->tid[5], n->tid[4]);
    for (size_t i = 0; i < (size_t)B * H; i++)
        n->d2[i] = n->h2[i] > 0 ? n->d2[i] : 0;
    dense_grads(n, n->d2, H, n->h1, H, g + n->off[2], g + n->off[3]);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, H, H, 1.0f, n->d2, H, p + n->off[2],
                H, 0.0f, n->d1, H);
    ready2(w, n->tid[3], n->tid[2]);
    for (size_t i = 0; i < (size_t)B * H; i++)
        n->d1[i] = n->h1[i] > 0 ? n->d1[i] : 0;
    dense_grads(n, n->d1, H, n->x, D, g + n->off[0], g + n->off[1]);
    ready2(w, n->tid[1], n->tid[0]);
}

/* Whether this worker's parameters are bitwise worker 0's, after the last update: an
 * FNV-1a hash of their bits, worker 0's broadcast (collective over the workers). */
static bool same_as_worker0(pc_worker_t *w, const mlp_t *n)
{
    for (int i = 0; i < 6; i++)
        if (pc_worker_param_wait(w, n->tid[i]) != PC_OK)
            die("param_wait", pc_worker_error(w));
    uint64_t h = 0xcbf29ce484222325ull, h0;
    for (size_t i = 0; i < n->total; i++) {
        uint32_t bits;
        memcpy(&bits, &n->params[i], sizeof(bits));
        h = (h ^ bits) * 0x100000001b3ull;
    }
    h0 = h;
    if (pc_worker_broadcast(w, &h0, sizeof(h0)) != PC_OK)
        die("broadcast", pc_worker_error(w));
    return h == h0;
}

/* A worker's run: the model, its tensors registered, the iterations; returns whether an
 * agreed stop ended it. */
static bool run_worker(pc_runtime_t *rt, const pc_config_t *cfg, const opts_t *o, int rank)
{
    char err[1024];
    if (rank == 0) {
        printf("pc_example: %d workers, %d servers, %s, --compress %s, --pipeline %s\n",
               pc_runtime_workers(rt), pc_runtime_servers(rt),
               cfg->mode == PC_MODE_PS ? "parameter servers" : "allreduce", cfg->compress,
               cfg->pipeline ? "on" : "off");
        fflush(stdout);
    }
    mlp_t n;
    mlp_create(&n, o->input, o->hidden, o->batch, (uint64_t)cfg->seed);
    pc_worker_t *w;
    if (pc_worker_create(rt, &w, err, sizeof(err)) != PC_OK)
        die("worker", err);
    /* --device emulate runs these host buffers through the runtime's device-tensor path
     * (pc_gpu.h's host emulation); this example computes on the CPU, so not --device cuda. */
    if (cfg->device == PC_DEVICE_CUDA)
        die("--device", "cuda: this example computes on the CPU (pc-train --device cuda trains "
                        "on a GPU)");
    int (*reg)(pc_worker_t *, const char *, float *, float *, size_t) =
        cfg->device == PC_DEVICE_CPU ? pc_worker_register : pc_worker_register_device;
    for (int i = 0; i < 6; i++)
        if ((n.tid[i] =
                 reg(w, tensor_names[i], n.params + n.off[i], n.grads + n.off[i], n.sizes[i])) < 0)
            die("register", pc_worker_error(w));
    if (pc_worker_start(w) != PC_OK)
        die("start", pc_worker_error(w));
    double loss = 0;
    bool stop = false;
    /* 0, or the checkpoint's iteration with --resume: batches derive from the iteration. */
    for (int64_t it = pc_worker_iteration(w); it < cfg->iters && !stop; it++) {
        /* This worker's batch: its own stream of (seed, iteration, worker). */
        fill(n.x, (size_t)n.B * n.D, (uint64_t)cfg->seed,
             1000 + (uint64_t)it * 4096 + (uint64_t)rank, 1.0f);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n.B, OUT, n.D, 1.0f, n.x, n.D,
                    n.teacher, n.D, 0.0f, n.y, OUT); /* y (B, OUT) = x teacher^T */
        loss = forward(&n, w);
        backward(&n, w);
        if (pc_worker_iteration_end(w, &stop) != PC_OK)
            die("iteration_end", pc_worker_error(w));
        pc_worker_metrics_t m;
        if (rank == 0 && (it % 20 == 0 || it + 1 == cfg->iters) && pc_worker_last_metrics(w, &m)) {
            printf(
                "iter %lld/%lld loss %.5f | iteration %.2f ms, compress %.2f ms, exposed %.2f ms, "
                "%llu bytes sent\n",
                (long long)it + 1, (long long)cfg->iters, loss, m.t_iteration * 1e3,
                m.t_compress * 1e3, m.t_exposed * 1e3, (unsigned long long)m.bytes_sent);
            fflush(stdout);
        }
    }
    if (o->save[0] && !same_as_worker0(w, &n)) {
        char msg[128];
        snprintf(msg, sizeof(msg), "worker r%d's parameters differ from worker r0's", rank);
        die("--save", msg);
    }
    if (pc_worker_finish(w) != PC_OK)
        die("finish", pc_worker_error(w));
    if (rank == 0) {
        printf("final loss %.5f after %lld iterations%s\n", loss, (long long)pc_worker_iteration(w),
               stop ? " (stopped by a signal)" : "");
        if (o->save[0]) {
            FILE *f = fopen(o->save, "wb");
            if (!f || fwrite(n.params, sizeof(float), n.total, f) != n.total || fclose(f) != 0)
                die("--save", "cannot write the parameters");
        }
    }
    pc_worker_destroy(w);
    mlp_free(&n);
    return stop;
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
    pc_flags_group_t groups[] = {pc_config_group(&cfg, "Runtime flags"),
                                 {"pc_example flags", example_opts,
                                  sizeof(example_opts) / sizeof(example_opts[0]), &o, NULL}};
    char err[1024];
    int rc = pc_flags_parse(groups, 2, argc, argv, NULL, err, sizeof(err));
    if (rc == PC_OK)
        rc = pc_runtime_check_config(&cfg, size, err, sizeof(err));
    int status = pc_flags_finish(rc, groups, 2, "pc_example", "mpirun -np N pc_example [flags]",
                                 err, rank == 0, stdout, stderr);
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
    status = 1;
    if (rc == PC_ENODEV) { /* the same message on every rank (pc_runtime.h): said once */
        if (rank == 0)
            fprintf(stderr, "pc_example: %s\n", err);
    } else if (rc != PC_OK) {
        die("runtime", err);
    } else {
        pc_runtime_set_stop_flag(rt, &stop_requested);
        bool stop = false;
        if (pc_runtime_role(rt) == PC_ROLE_SERVER) {
            if (pc_server_run(rt, err, sizeof(err)) != PC_OK)
                die("server", err);
            stop = pc_runtime_stop_signal(rt) != 0;
        } else {
            stop = run_worker(rt, &cfg, &o, rank);
        }
        status = stop ? 128 + pc_runtime_stop_signal(rt) : 0;
        pc_runtime_destroy(rt);
    }
    pc_log_destroy(log);
    MPI_Finalize();
    return status;
}
