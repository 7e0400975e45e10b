/* pc-bench compress: every codec on heavy-tailed synthetic gradients of n floats, with two
 * baselines measured in the same run on the same data:
 *   read   one streaming pass over the 4n input bytes on one core (a sum with independent
 *          accumulators): the memory-bandwidth bound any O(n) compressor pays at least once;
 *   sort   top-k by a full sort (qsort of the indices by magnitude): what a naive top-k costs.
 * For each codec, size and ratio: median compress and decompress-add times over --reps,
 * elements per second, message bytes and compression ratio, and on the CPU each codec's least
 * memory traffic (bytes per element, cpu_codecs_tab) with its times over that traffic at the
 * read baseline's speed (its memory bound). The headline ratios compare
 * exact top-k (topk, ef=off: selection and encoding, no error-feedback fold) with both
 * baselines; topk with ef=on adds the fold (read gradient, read and write residual).
 * Then powersgd on whole matrices (--matrices; bench_lowrank.c): its step beside its two
 * GEMMs alone. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "gpu/cuda_baseline.h"
#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_config.h"
#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_devcodec.h"
#include "pipecompress/pc_gpu.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_philox.h"
#include "pipecompress/pc_select.h"
#include "pipecompress/pc_time.h"
#include "pipecompress/pc_wire.h"

typedef struct opts {
    int reps;
    int quick;
    int no_sort;
    char sizes[128];
    char ratios[128];
    char json[512];
    char device[16];
    char matrices[128];
    int powersgd_only;
    int threads;
} opts_t;

static const pc_flags_t compress_opts[] = {
    BENCH_OPT_REPS(opts_t),
    {.name = "sizes",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, sizes),
     .size = 128,
     .metavar = "N,N,...",
     .help = "element counts (default 1e6,1e7,2.5e7 on the CPU, 1e6,1e7,1e8 on a device)"},
    {.name = "ratios",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, ratios),
     .size = 128,
     .metavar = "R,R,...",
     .help = "kept fractions for topk, dgc, randomk, threshold"},
    {.name = "quick",
     .type = PC_FLAGS_FLAG,
     .offset = offsetof(opts_t, quick),
     .help = "sizes 1e6,1e7 and 3 repetitions"},
    {.name = "no-sort",
     .type = PC_FLAGS_FLAG,
     .offset = offsetof(opts_t, no_sort),
     .help = "skip the sort baseline (slow: seconds per repetition at 1e7)"},
    {.name = "json",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, json),
     .size = 512,
     .metavar = "FILE",
     .help = "also write the results as JSON to FILE"},
    {.name = "device",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, device),
     .size = 16,
     .metavar = "cpu|cuda",
     .help = "where the codecs run: cpu (one core) or cuda (device 0; sizes 1e6,1e7,1e8)"},
    {.name = "matrices",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(opts_t, matrices),
     .size = 128,
     .metavar = "RxC,...|none",
     .help = "--device cpu: powersgd's matrices (default 1000x1000,4096x4096,10000x10000; "
             "--quick: the first two)"},
    {.name = "powersgd-only",
     .type = PC_FLAGS_FLAG,
     .offset = offsetof(opts_t, powersgd_only),
     .help = "--device cpu: only the powersgd section"},
    {.name = "threads",
     .type = PC_FLAGS_INT,
     .offset = offsetof(opts_t, threads),
     .min = 1,
     .max = 64,
     .metavar = "N",
     .help = "instead of the tables: the compressor pool on ResNet-50's tensors, N threads "
             "dealt as a worker deals them, beside 1 thread (bench_pool.c)"},
};

/* Parse "a,b,c" of positive numbers into out (at most max); 0 on a bad list. */
static int parse_list(const char *s, double *out, int max, double lo, double hi)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v >= lo && v <= hi) || n == max)
            return 0;
        out[n++] = v;
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            return 0;
    }
    return n;
}

static void heavy(float *x, size_t n)
{
    pc_philox_t g;
    pc_philox_init(&g, 2022, 0, 0);
    for (size_t i = 0; i < n; i++) {
        uint32_t a = pc_philox_next(&g);
        float u = pc_philox_uniform(a | 1);
        x[i] = ((a & 1) ? -1e-3f : 1e-3f) * powf(u, -1.2f);
    }
}

static double read_pass(const float *x, size_t n)
{
    /* Eight independent sums: the adds are never the bottleneck, the loads are. */
    float acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += x[i + (size_t)j];
    for (; i < n; i++)
        acc[0] += x[i];
    double s = 0;
    for (int j = 0; j < 8; j++)
        s += acc[j];
    return s;
}

static const float *sort_x;
static int by_mag_desc(const void *a, const void *b)
{
    float p = fabsf(sort_x[*(const uint32_t *)a]), q = fabsf(sort_x[*(const uint32_t *)b]);
    return (p < q) - (p > q);
}

typedef struct row {
    char spec[128];
    size_t n;
    double ratio; /* < 0: not a ratio codec */
    double t_comp, t_dec;
    size_t bytes;
    double comp_bytes, dec_bytes; /* the least memory traffic (cpu_codecs_tab), in bytes */
    const char *index;            /* index_form of its last message */
} row_t;

/* How the message msg[0..len) carries its indices: "bitmap" (n bits), "delta" (LEB128
 * gaps), "u32" (a list), or "-" for a codec that sends none (the dense, quantising and
 * low-rank codecs; randomk, whose receiver regenerates them). A static string. */
static const char *index_form(const uint8_t *msg, size_t len)
{
    pc_wire_header_t h;
    if (len == 0 || pc_wire_header_read(msg, len, &h, NULL, 0) != PC_OK)
        return "-";
    if (h.codec != PC_CODEC_TOPK && h.codec != PC_CODEC_DGC && h.codec != PC_CODEC_THRESHOLD)
        return "-";
    return (h.flags & PC_WIRE_F_BITMAP) ? "bitmap" : (h.flags & PC_WIRE_F_DELTA) ? "delta" : "u32";
}

/* ---- --device cuda ------------------------------------------------------------------- */

/* The codecs of both tables (the device's adds the error-feedback fold alone, the CPU's,
 * cpu_codecs_tab, fp16 with error feedback); the ratio codecs run once per --ratios value. */
static const char *const bench_codecs[] = {
    "none",   "fp16",        "qsgd:levels=16", "terngrad",
    "efsign", "topk:ef=off", "topk",           "topk:index=delta,values=fp16",
    "dgc",    "randomk",     "threshold"};

/* Spec text for a base codec at a ratio (threshold: tau at the ratio's quantile of x, n >
 * 0). 0, or BENCH_EXIT_FAIL with the reason on stderr (out of memory for the quantile). */
static int spec_for(const char *base, double ratio, const float *x, size_t n, pc_select_t *sel,
                    char *out, size_t len)
{
    const char *colon = strchr(base, ':');
    if (strncmp(base, "threshold", 9) == 0) {
        size_t k = (size_t)ceil(ratio * (double)n);
        float tau;
        int rc = pc_select_kth_magnitude(sel, x, n, k ? k : 1, &tau);
        if (rc != PC_OK) {
            fprintf(stderr, "pc-bench: threshold's tau over %zu elements: %s\n", n,
                    pc_strerror(rc));
            return BENCH_EXIT_FAIL;
        }
        snprintf(out, len, "threshold:tau=%.9g", (double)tau);
    } else if (ratio >= 0) {
        snprintf(out, len, "%.*s:ratio=%g%s%s",
                 (int)(colon ? (size_t)(colon - base) : strlen(base)), base, ratio,
                 colon ? "," : "", colon ? colon + 1 : "");
    } else {
        snprintf(out, len, "%s", base);
    }
    return 0;
}

static bool uses_ratio(const char *base)
{
    return strncmp(base, "topk", 4) == 0 || strncmp(base, "dgc", 3) == 0 ||
           strncmp(base, "randomk", 7) == 0 || strncmp(base, "threshold", 9) == 0;
}

typedef struct cuda_row {
    char spec[128];
    size_t n;
    double ratio, t_comp, t_dec, must_bytes; /* must_bytes > 0: a bandwidth-bound codec */
    double t_copy; /* the copy of a message of this size to pinned host memory, alone */
    size_t bytes;
    const char *index; /* index_form of its last message */
} cuda_row_t;

static int cuda_fail(const char *what, const char *detail)
{
    fprintf(stderr, "pc-bench: --device cuda: %s: %s\n", what, detail);
    return BENCH_EXIT_FAIL;
}

/* bench_compress_cuda's state: the flags and sizes, the device's name, device 0's memory
 * (mem), the baselines, the input on the host and the device, the rows measured so far and
 * the baselines' medians per size (and ratio). */
typedef struct cuda_bench {
    const opts_t *o;
    const double *sizes, *ratios;
    int nsizes, nratios;
    char name[256];
    pc_gpu_t *gpu; /* device 0: its memory and copies */
    pc_cuda__baseline_t *base;
    float *x, *x_dev, *dense_dev;
    double *samples; /* 2 x reps */
    cuda_row_t *rows;
    int nrows;
    pc_select_t *sel;
    double t_read[8], t_copyk[8], t_sort[8][8];
} cuda_bench_t;

static void cuda_free(cuda_bench_t *b)
{
    if (b->gpu) {
        pc_gpu_free(b->gpu, b->x_dev);
        pc_gpu_free(b->gpu, b->dense_dev);
    }
    pc_gpu_destroy(b->gpu);
    pc_cuda__baseline_destroy(b->base);
    pc_select_destroy(b->sel);
    free(b->x);
    free(b->samples);
    free(b->rows);
}

/* Device 0's memory, the baselines and the input (heavy-tailed, on the host and copied to
 * the device), for the largest size. */
static int cuda_setup(cuda_bench_t *b)
{
    char err[512] = "";
    size_t nmax = 0;
    for (int i = 0; i < b->nsizes; i++)
        nmax = (size_t)b->sizes[i] > nmax ? (size_t)b->sizes[i] : nmax;
    if (pc_gpu_create(0, &b->gpu, err, sizeof(err)) != PC_OK)
        return cuda_fail("device 0", err);
    if (pc_cuda__baseline_create(0, nmax, &b->base, err, sizeof(err)) != PC_OK)
        return cuda_fail("baselines", err);
    b->x = malloc(sizeof(float) * nmax);
    b->samples = malloc(sizeof(double) * (size_t)b->o->reps * 2);
    b->rows = calloc(512, sizeof(cuda_row_t));
    if (!b->x || !b->samples || !b->rows || pc_select_create(&b->sel) != PC_OK ||
        pc_gpu_alloc(b->gpu, sizeof(float) * nmax, (void **)&b->x_dev, err, sizeof(err)) != PC_OK ||
        pc_gpu_alloc(b->gpu, sizeof(float) * nmax, (void **)&b->dense_dev, err, sizeof(err)) !=
            PC_OK)
        return cuda_fail("memory for the inputs", err[0] ? err : "out of host memory");
    heavy(b->x, nmax);
    if (pc_gpu_copy(b->gpu, b->x_dev, b->x, sizeof(float) * nmax, PC_GPU_TO_DEVICE, NULL, err,
                    sizeof(err)) != PC_OK ||
        pc_gpu_stream_sync(b->gpu, NULL, err, sizeof(err)) != PC_OK)
        return cuda_fail("the input", err);
    return 0;
}

/* The baselines at size index si: one read of the input, a copy kernel, and top-k by
 * CUB's sort per ratio (unless --no-sort); each printed and kept. */
static int cuda_baselines(cuda_bench_t *b, int si)
{
    const int reps = b->o->reps;
    size_t n = (size_t)b->sizes[si];
    double *samples = b->samples;
    for (int r = 0; r < reps; r++) {
        int64_t t0 = pc_time_ns();
        if (pc_cuda__baseline_read(b->base, b->x_dev, n) != PC_OK)
            return cuda_fail("read baseline", "a CUDA call failed");
        samples[r] = (double)(pc_time_ns() - t0) * 1e-6;
    }
    b->t_read[si] = pc_time_median(samples, (size_t)reps);
    printf("%-44s %10zu %7s %10.3f %10s %10s %9.0f %12zu %8s %6s\n", "[baseline] read 4n bytes", n,
           "-", b->t_read[si], "-", "-", (double)n / b->t_read[si] * 1e-3, (size_t)0, "-", "-");
    for (int r = 0; r < reps; r++) {
        int64_t t0 = pc_time_ns();
        if (pc_cuda__baseline_copy(b->base, b->x_dev, n) != PC_OK)
            return cuda_fail("copy baseline", "a CUDA call failed");
        samples[r] = (double)(pc_time_ns() - t0) * 1e-6;
    }
    b->t_copyk[si] = pc_time_median(samples, (size_t)reps);
    printf("%-44s %10zu %7s %10.3f %10s %10s %9.0f %12zu %8s %6s\n",
           "[baseline] copy kernel (4n read, 4n written)", n, "-", b->t_copyk[si], "-", "-",
           (double)n / b->t_copyk[si] * 1e-3, (size_t)0, "-", "-");
    for (int ri = 0; ri < b->nratios && !b->o->no_sort; ri++) {
        size_t k = (size_t)ceil(b->ratios[ri] * (double)n);
        for (int r = 0; r < reps; r++) {
            int64_t t0 = pc_time_ns();
            if (pc_cuda__baseline_sort_topk(b->base, b->x_dev, n, k > n ? n : k) != PC_OK)
                return cuda_fail("sort baseline", "a CUDA call failed");
            samples[r] = (double)(pc_time_ns() - t0) * 1e-6;
        }
        b->t_sort[si][ri] = pc_time_median(samples, (size_t)reps);
        printf("%-44s %10zu %7g %10.3f %10s %10s %9.0f %12s %8s %6s\n",
               "[baseline] top-k by CUB sort", n, b->ratios[ri], b->t_sort[si][ri], "-", "-",
               (double)n / b->t_sort[si][ri] * 1e-3, "-", "-", "-");
    }
    return 0;
}

/* Time one codec (text: its spec) on n elements: compress (with the copy of its message to
 * pinned host memory) and decode-add, or the fold alone; then the message's copy alone, so
 * that compress minus it is the device's part. Fills *row and prints it. */
static int cuda_codec_row(cuda_bench_t *b, const char *text, size_t n, double ratio, bool fold_only,
                          cuda_row_t *row)
{
    const int reps = b->o->reps;
    double *samples = b->samples;
    char err[512] = "";
    pc_codec_spec_t spec;
    if (pc_codec_spec_parse(text, &spec, err, sizeof(err)) != PC_OK)
        return cuda_fail(text, err);
    spec.seed = 1;
    pc_devcodec_t *c;
    pc_devcodec_state_t *st;
    if (pc_devcodec_create(&spec, 0, &c, err, sizeof(err)) != PC_OK)
        return cuda_fail(text, err);
    size_t cap = pc_devcodec_max_bytes(c, n), len = 0;
    uint8_t *msg = NULL;
    if (pc_devcodec_state_create(c, 0, n, &st, err, sizeof(err)) != PC_OK ||
        pc_devcodec_host_alloc(c, cap, (void **)&msg, err, sizeof(err)) != PC_OK)
        return cuda_fail(text, err);
    pc_codec_expect_t want = {.chunk = 0, .n = (uint32_t)n, .any_iteration = true};
    for (int r = 0; r < reps; r++) {
        int64_t t0 = pc_time_ns();
        int rc = fold_only
                     ? pc_devcodec_fold(c, st, b->x_dev, NULL)
                     : pc_devcodec_compress(c, st, b->x_dev, (uint64_t)r, NULL, msg, cap, &len);
        int64_t t1 = pc_time_ns();
        if (rc != PC_OK)
            return cuda_fail(text, pc_devcodec_error(c));
        if (!fold_only && pc_devcodec_decode_add(c, msg, len, &want, 1.0f, b->dense_dev, NULL, NULL,
                                                 err, sizeof(err)) != PC_OK)
            return cuda_fail(text, err);
        int64_t t2 = pc_time_ns();
        samples[r] = (double)(t1 - t0) * 1e-6;
        samples[reps + r] = (double)(t2 - t1) * 1e-6;
    }
    row->t_comp = pc_time_median(samples, (size_t)reps);
    row->t_dec = fold_only ? 0 : pc_time_median(samples + reps, (size_t)reps);
    for (int r = 0; r < reps; r++) {
        int64_t t0 = pc_time_ns();
        if (len && pc_devcodec_copy(c, msg, b->x_dev, len, false, NULL, err, sizeof(err)) != PC_OK)
            return cuda_fail(text, err);
        samples[r] = (double)(pc_time_ns() - t0) * 1e-6;
    }
    row->t_copy = fold_only ? 0 : pc_time_median(samples, (size_t)reps);
    snprintf(row->spec, sizeof(row->spec), "%s", fold_only ? "ef fold (v += g)" : text);
    row->n = n;
    row->ratio = ratio;
    row->bytes = fold_only ? 0 : len;
    row->index = fold_only ? "-" : index_form(msg, len);
    /* Bytes a bandwidth-bound codec must move at least on the device: the fold reads g and
     * v and writes v; fp16 (ef=off) reads v and writes the message; qsgd and terngrad read
     * v twice (the norm or the maximum comes before the first code) and write the message. */
    if (fold_only)
        row->must_bytes = 12.0 * (double)n;
    else if (spec.id == PC_CODEC_FP16)
        row->must_bytes = 4.0 * (double)n + (double)len;
    else if (spec.id == PC_CODEC_QSGD || spec.id == PC_CODEC_TERNGRAD)
        row->must_bytes = 8.0 * (double)n + (double)len;
    char rbuf[16];
    snprintf(rbuf, sizeof(rbuf), ratio < 0 ? "-" : "%g", ratio);
    printf("%-44.44s %10zu %7s %10.3f %10.3f %10.3f %9.0f %12zu %8.1f %6s\n", row->spec, n, rbuf,
           row->t_comp, row->t_copy, row->t_dec, (double)n / row->t_comp * 1e-3, row->bytes,
           row->bytes ? 4.0 * (double)n / (double)row->bytes : 0.0, row->index);
    pc_devcodec_host_free(c, msg);
    pc_devcodec_state_destroy(st);
    pc_devcodec_destroy(c);
    return 0;
}

/* Every codec of bench_codecs at size index si (the sparsifiers at each ratio), then the
 * error-feedback fold alone. */
static int cuda_codecs(cuda_bench_t *b, int si)
{
    size_t n = (size_t)b->sizes[si];
    size_t nbase = sizeof(bench_codecs) / sizeof(bench_codecs[0]);
    for (size_t k = 0; k <= nbase; k++) {
        bool fold_only = k == nbase; /* the last row: the error-feedback fold alone */
        const char *bs = fold_only ? "topk:momentum=0" : bench_codecs[k];
        for (int ri = 0; ri < (uses_ratio(bs) && !fold_only ? b->nratios : 1); ri++) {
            char text[128];
            double ratio = uses_ratio(bs) && !fold_only ? b->ratios[ri] : -1;
            int rc = spec_for(bs, ratio, b->x, n, b->sel, text, sizeof(text));
            if (rc != 0)
                return rc;
            if (b->nrows == 512)
                return cuda_fail("rows", "more than 512");
            rc = cuda_codec_row(b, text, n, ratio, fold_only, &b->rows[b->nrows]);
            if (rc != 0)
                return rc;
            b->nrows++;
        }
    }
    return 0;
}

/* The ratios, measured side by side above: exact top-k against the baselines, and the
 * bandwidth-bound codecs against the bytes they must move. */
static void cuda_verdicts(const cuda_bench_t *b)
{
    printf("exact top-k (ef=off) against the baselines, on the device (compress minus the copy of "
           "its message, measured alone):\n");
    for (int i = 0; i < b->nrows; i++) {
        const cuda_row_t *row = &b->rows[i];
        if (strncmp(row->spec, "topk:", 5) != 0 || !strstr(row->spec, "ef=off"))
            continue;
        int si = 0, ri = 0;
        while ((size_t)b->sizes[si] != row->n)
            si++;
        while (ri + 1 < b->nratios && b->ratios[ri] != row->ratio)
            ri++;
        double dev = row->t_comp - row->t_copy;
        double bound = dev / b->t_read[si];
        bool target = row->n == 100000000 && row->ratio == 0.01;
        printf("  n=%-9zu ratio=%-6g  %.2f x the read bound (target <= 3 at n=1e8, 1%%%s)", row->n,
               row->ratio, bound, target ? (bound <= 3 ? ": met" : ": NOT met") : "");
        if (!b->o->no_sort)
            printf(", %.1f x faster than the CUB-sort top-k (target >= 10%s)",
                   b->t_sort[si][ri] / dev,
                   target ? (b->t_sort[si][ri] / dev >= 10 ? ": met" : ": NOT met") : "");
        printf("\n");
    }
    printf("bandwidth-bound codecs on the device against the bytes they must move there at the "
           "read bandwidth:\n");
    for (int i = 0; i < b->nrows; i++) {
        const cuda_row_t *row = &b->rows[i];
        if (row->must_bytes <= 0)
            continue;
        int si = 0;
        while ((size_t)b->sizes[si] != row->n)
            si++;
        double bw = 4.0 * (double)row->n / (b->t_read[si] * 1e-3); /* bytes/s */
        double x_bound = (row->t_comp - row->t_copy) / (row->must_bytes / bw * 1e3);
        printf("  %-28s n=%-9zu %.2f x the bound (target <= 1.5%s)\n", row->spec, row->n, x_bound,
               row->n == (size_t)b->sizes[b->nsizes - 1] ? (x_bound <= 1.5 ? ": met" : ": NOT met")
                                                         : "");
    }
}

/* --json: the baselines and every row. */
static int cuda_json(const cuda_bench_t *b, FILE *json)
{
    fprintf(json,
            "{\n  \"benchmark\": \"compress\",\n  \"device\": \"cuda\",\n  \"gpu\": \"%s\",\n"
            "  \"reps\": %d,\n  \"baselines\": [\n",
            b->name, b->o->reps);
    for (int si = 0; si < b->nsizes; si++) {
        fprintf(json, "    {\"n\": %.0f, \"read_ms\": %.4f, \"copy_ms\": %.4f, \"sort_topk_ms\": {",
                b->sizes[si], b->t_read[si], b->t_copyk[si]);
        for (int ri = 0; ri < b->nratios; ri++)
            fprintf(json, "\"%g\": %.4f%s", b->ratios[ri], b->t_sort[si][ri],
                    ri + 1 < b->nratios ? ", " : "");
        fprintf(json, "}}%s\n", si + 1 < b->nsizes ? "," : "");
    }
    fprintf(json, "  ],\n  \"codecs\": [\n");
    for (int i = 0; i < b->nrows; i++) {
        const cuda_row_t *row = &b->rows[i];
        fprintf(json,
                "    {\"spec\": \"%s\", \"n\": %zu, \"ratio\": %g, \"compress_ms\": %.4f, "
                "\"copy_ms\": %.4f, \"decompress_ms\": %.4f, \"bytes\": %zu, "
                "\"index\": \"%s\", \"must_bytes\": %.0f}%s\n",
                row->spec, row->n, row->ratio, row->t_comp, row->t_copy, row->t_dec, row->bytes,
                row->index, row->must_bytes, i + 1 < b->nrows ? "," : "");
    }
    fprintf(json, "  ]\n}\n");
    if (fclose(json) != 0)
        return cuda_fail("--json", "error writing the file");
    return 0;
}

static int bench_compress_cuda(const opts_t *o, const double *sizes, int nsizes,
                               const double *ratios, int nratios)
{
    char why[160];
    if (pc_cuda_status(why, sizeof(why)) == 0)
        return cuda_fail("no CUDA device", why);
    cuda_bench_t b = {
        .o = o, .sizes = sizes, .nsizes = nsizes, .ratios = ratios, .nratios = nratios};
    pc_cuda_device_name(0, b.name, sizeof(b.name));
    FILE *json = NULL;
    if (o->json[0] && !(json = fopen(o->json, "w")))
        return cuda_fail("--json", "cannot write the file");
    int rc = cuda_setup(&b);
    if (rc == 0) {
        printf("pc-bench compress --device cuda: %s; heavy-tailed float gradients, %d reps "
               "(median);\ntimes on the host clock, each call waited for (compress includes the "
               "copy of the message to pinned host memory)\n\n",
               b.name, o->reps);
        printf("%-44s %10s %7s %10s %10s %10s %9s %12s %8s %6s\n", "codec", "n", "ratio", "comp ms",
               "copy ms", "decomp ms", "Melem/s", "bytes", "x less", "index");
    }
    for (int si = 0; si < nsizes && rc == 0; si++) {
        if ((rc = cuda_baselines(&b, si)) == 0)
            rc = cuda_codecs(&b, si);
        printf("\n");
    }
    if (rc == 0) {
        cuda_verdicts(&b);
        if (json) {
            rc = cuda_json(&b, json);
            json = NULL;
        }
    }
    if (json)
        fclose(json);
    if (rc != 0 && o->json[0])
        remove(o->json); /* no half-written results */
    cuda_free(&b);
    return rc;
}

/* bench_compress_main's state on the CPU: the flags and sizes, the input, the decode
 * target, the sort baseline's order, the rows measured so far and the baselines' medians
 * per size. */
typedef struct cpu_bench {
    const opts_t *o;
    const double *sizes, *ratios;
    int nsizes, nratios;
    float *x, *dense;
    uint32_t *ord;
    double *samples; /* 2 x reps */
    row_t *rows;
    int nrows;
    pc_select_t *sel;
    double t_read[8], t_sort[8];
} cpu_bench_t;

static void cpu_free(cpu_bench_t *b)
{
    pc_select_destroy(b->sel);
    free(b->x);
    free(b->dense);
    free(b->ord);
    free(b->samples);
    free(b->rows);
}

/* The baselines at size index si: one read of the input, and top-k by qsort (unless
 * --no-sort); printed and kept. */
static void cpu_baselines(cpu_bench_t *b, int si)
{
    const int reps = b->o->reps;
    size_t n = (size_t)b->sizes[si];
    volatile double sink = 0;
    for (int r = 0; r < reps; r++) {
        int64_t t0 = pc_time_ns();
        sink += read_pass(b->x, n);
        b->samples[r] = (double)(pc_time_ns() - t0) * 1e-6;
    }
    (void)sink;
    b->t_read[si] = pc_time_median(b->samples, (size_t)reps);
    if (!b->o->no_sort) {
        int sreps = reps < 3 ? reps : 3; /* seconds each at 1e7 */
        for (int r = 0; r < sreps; r++) {
            for (size_t i = 0; i < n; i++)
                b->ord[i] = (uint32_t)i;
            sort_x = b->x;
            int64_t t0 = pc_time_ns();
            qsort(b->ord, n, sizeof(uint32_t), by_mag_desc);
            b->samples[r] = (double)(pc_time_ns() - t0) * 1e-6;
        }
        b->t_sort[si] = pc_time_median(b->samples, (size_t)sreps);
    }
    printf("%-44s %10zu %7s %10.2f %10s %9.0f %12zu %8s %8.2f %8.2f %8s %8s %6s\n",
           "[baseline] read 4n bytes", n, "-", b->t_read[si], "-", (double)n / b->t_read[si] * 1e-3,
           (size_t)0, "-", 4.0, 1.0, "-", "-", "-");
    if (!b->o->no_sort)
        printf("%-44s %10zu %7s %10.2f %10s %9.0f %12s %8s %8s %8s %8s %8s %6s\n",
               "[baseline] top-k by qsort", n, "-", b->t_sort[si], "-",
               (double)n / b->t_sort[si] * 1e-3, "-", "-", "-", "-", "-", "-", "-");
}

/* The CPU table's codecs: bench_codecs, in its order, and fp16 with error feedback beside
 * fp16 (the ratio codecs run once per --ratios value); with each, its least memory traffic,
 * the bytes of the n-element arrays that a compress and a decode-add must read and write by
 * the codec's rule, one read or write of an array per pass the rule cannot avoid. On top
 * come the message (its measured size: compress writes it once; decode-add reads it twice,
 * as it validates all of it before writing anything, then adds it) and, for the sparsifiers,
 * per sent entry (the message header's count) what compress zeroes in its state and what
 * decode-add reads and writes of the dense array. The bound is those bytes at the speed of
 * the [baseline] read row, one core's streaming read; writes cost more than reads (a line is
 * read before it is written), so a codec that writes cannot quite reach 1.0 x. */
typedef struct cpu_codec {
    const char *base;        /* as in bench_codecs */
    double comp, comp_entry; /* compress: bytes per element, per sent entry */
    double dec, dec_entry;   /* decode-add: bytes per element (dense read and written), entry */
} cpu_codec_t;

static const cpu_codec_t cpu_codecs_tab[] = {
    /* none: the gradient read (4) */
    {"none", 4, 0, 8, 0},
    /* fp16 (ef=off): the gradient read (4) */
    {"fp16", 4, 0, 8, 0},
    /* fp16 with error feedback: gradient and residual read, residual written (12) */
    {"fp16:ef=on", 12, 0, 8, 0},
    /* qsgd (ef=off): the gradient read twice, as the norm comes before the first code (8) */
    {"qsgd:levels=16", 8, 0, 8, 0},
    /* terngrad (ef=off): read twice, max |g| first (8) */
    {"terngrad", 8, 0, 8, 0},
    /* efsign (ef=on): gradient and residual read for mean |v| (8), then again with the
     * residual written (12) */
    {"efsign", 20, 0, 8, 0},
    /* topk:ef=off: the gradient read once (the selection's collect pass; its sample extra) */
    {"topk:ef=off", 4, 0, 0, 8},
    /* topk (ef=on, momentum 0.9): the momentum correction reads gradient, u and residual and
     * writes u and residual (20), the selection in that pass; each entry zeroes u and the
     * residual (8) */
    {"topk", 20, 8, 0, 8},
    {"topk:index=delta,values=fp16", 20, 8, 0, 8},
    /* dgc: topk's momentum correction and masking (20, 8; its sampled threshold extra) */
    {"dgc", 20, 8, 0, 8},
    /* randomk (ef=on, momentum 0.9): every element folded with momentum (20), each entry
     * zeroed (8) */
    {"randomk", 20, 8, 0, 8},
    /* threshold (ef=on, no momentum): the fold (12), the comparison in its pass; each entry
     * zeroes the residual (4) */
    {"threshold", 12, 4, 0, 8},
};

/* Time one codec (tc, as spec_text) on n elements: compress, then decode-add, and their
 * least traffic; fills *row and prints it with its times over that traffic at ms_per_byte,
 * the read baseline's speed. */
static int cpu_codec_row(cpu_bench_t *b, const cpu_codec_t *tc, const char *spec_text, size_t n,
                         double ratio, double ms_per_byte, row_t *row)
{
    const int reps = b->o->reps;
    char err[512];
    pc_codec_spec_t spec;
    if (pc_codec_spec_parse(spec_text, &spec, err, sizeof(err)) != PC_OK) {
        fprintf(stderr, "pc-bench: internal spec '%s': %s\n", spec_text, err);
        return BENCH_EXIT_FAIL;
    }
    spec.seed = 1;
    pc_codec_t *c;
    pc_codec_state_t *st;
    if (pc_codec_create(&spec, &c) != PC_OK || pc_codec_state_create(c, 0, n, &st) != PC_OK) {
        fprintf(stderr, "pc-bench: cannot create %s for n = %zu\n", spec_text, n);
        return BENCH_EXIT_FAIL;
    }
    size_t cap = pc_codec_max_bytes(c, n), len = 0;
    uint8_t *msg = malloc(cap);
    if (!msg) {
        fprintf(stderr, "pc-bench: out of memory for a %zu-byte message\n", cap);
        return BENCH_EXIT_FAIL;
    }
    pc_codec_expect_t want = {.chunk = 0, .n = (uint32_t)n, .any_iteration = true};
    pc_wire_header_t h = {0};
    for (int r = 0; r < reps; r++) {
        int64_t t0 = pc_time_ns();
        int rc = pc_codec_compress(c, st, b->x, (uint64_t)r, msg, cap, &len);
        int64_t t1 = pc_time_ns();
        int rc2 = rc == PC_OK ? pc_codec_decode_add(c, msg, len, &want, 1.0f, b->dense, &h, err,
                                                    sizeof(err))
                              : rc;
        int64_t t2 = pc_time_ns();
        if (rc != PC_OK || rc2 != PC_OK) {
            fprintf(stderr, "pc-bench: %s failed: %s\n", spec_text,
                    rc != PC_OK ? pc_strerror(rc) : err);
            return BENCH_EXIT_FAIL;
        }
        b->samples[r] = (double)(t1 - t0) * 1e-6;
        b->samples[reps + r] = (double)(t2 - t1) * 1e-6;
    }
    snprintf(row->spec, sizeof(row->spec), "%s", spec_text);
    row->n = n;
    row->ratio = ratio;
    row->t_comp = pc_time_median(b->samples, (size_t)reps);
    row->t_dec = pc_time_median(b->samples + reps, (size_t)reps);
    row->bytes = len;
    row->comp_bytes = tc->comp * (double)n + tc->comp_entry * h.entries + (double)len;
    row->dec_bytes = tc->dec * (double)n + tc->dec_entry * h.entries + 2.0 * (double)len;
    row->index = index_form(msg, len);
    char rbuf[16];
    snprintf(rbuf, sizeof(rbuf), ratio < 0 ? "-" : "%g", ratio);
    printf("%-44.44s %10zu %7s %10.2f %10.2f %9.0f %12zu %8.1f %8.2f %8.2f %8.2f %8.2f %6s\n",
           spec_text, n, rbuf, row->t_comp, row->t_dec, (double)n / row->t_comp * 1e-3, len,
           4.0 * (double)n / (double)len, row->comp_bytes / (double)n,
           row->t_comp / (row->comp_bytes * ms_per_byte), row->dec_bytes / (double)n,
           row->t_dec / (row->dec_bytes * ms_per_byte), row->index);
    free(msg);
    pc_codec_state_destroy(st);
    pc_codec_destroy(c);
    return 0;
}

/* Every codec of cpu_codecs_tab at size index si: the ratio codecs once per ratio, the
 * others once. */
static int cpu_codecs(cpu_bench_t *b, int si)
{
    size_t n = (size_t)b->sizes[si];
    double ms_per_byte = b->t_read[si] / (4.0 * (double)n);
    for (size_t k = 0; k < sizeof(cpu_codecs_tab) / sizeof(cpu_codecs_tab[0]); k++) {
        const cpu_codec_t *tc = &cpu_codecs_tab[k];
        bool ratio_codec = uses_ratio(tc->base);
        for (int ri = 0; ri < (ratio_codec ? b->nratios : 1); ri++) {
            char spec_text[128];
            double ratio = ratio_codec ? b->ratios[ri] : -1;
            int rc = spec_for(tc->base, ratio, b->x, n, b->sel, spec_text, sizeof(spec_text));
            if (rc != 0)
                return rc;
            if (b->nrows == 256) {
                fprintf(stderr, "pc-bench: more than 256 result rows\n");
                return BENCH_EXIT_USAGE;
            }
            rc = cpu_codec_row(b, tc, spec_text, n, ratio, ms_per_byte, &b->rows[b->nrows]);
            if (rc != 0)
                return rc;
            b->nrows++;
        }
    }
    return 0;
}

/* The headline: exact top-k (ef=off) at each size and ratio against the baselines. */
static void cpu_verdicts(const cpu_bench_t *b)
{
    printf("top-k (ef=off) against the baselines:\n");
    for (int i = 0; i < b->nrows; i++) {
        const row_t *row = &b->rows[i];
        if (strncmp(row->spec, "topk:", 5) != 0 || !strstr(row->spec, "ef=off"))
            continue;
        int si = 0;
        while ((size_t)b->sizes[si] != row->n)
            si++;
        double bound = row->t_comp / b->t_read[si];
        bool target_case = row->n == 10000000 && row->ratio == 0.01;
        /* Over the read's time itself, unlike the table's x bound (over the codec's own
         * least bytes at the read's speed). */
        printf("  n=%-9zu ratio=%-6g  %.2f x one read of the input (target <= 3 at n=1e7, 1%%%s)",
               row->n, row->ratio, bound, target_case ? (bound <= 3 ? ": met" : ": NOT met") : "");
        if (!b->o->no_sort)
            printf(", %.1f x faster than sort (target >= 10: %s)", b->t_sort[si] / row->t_comp,
                   b->t_sort[si] / row->t_comp >= 10 ? "met" : "NOT met");
        printf("\n");
    }
}

/* --json: the baselines and every row, with their ratios to the baselines. */
static int cpu_json(const cpu_bench_t *b, FILE *json)
{
    const opts_t *o = b->o;
    fprintf(json, "{\n  \"benchmark\": \"compress\",\n  \"reps\": %d,\n  \"baselines\": [\n",
            o->reps);
    for (int si = 0; si < b->nsizes; si++)
        fprintf(json, "    {\"n\": %.0f, \"read_ms\": %.4f, \"sort_ms\": %.4f}%s\n", b->sizes[si],
                b->t_read[si], o->no_sort ? 0.0 : b->t_sort[si], si + 1 < b->nsizes ? "," : "");
    fprintf(json, "  ],\n  \"codecs\": [\n");
    for (int i = 0; i < b->nrows; i++) {
        const row_t *row = &b->rows[i];
        int si = 0;
        while ((size_t)b->sizes[si] != row->n)
            si++;
        double ms_per_byte = b->t_read[si] / (4.0 * (double)row->n);
        fprintf(
            json,
            "    {\"spec\": \"%s\", \"n\": %zu, \"ratio\": %g, \"compress_ms\": %.4f, "
            "\"decompress_ms\": %.4f, \"elements_per_s\": %.0f, \"bytes\": %zu, \"index\": \"%s\", "
            "\"vs_read\": %.4f, \"sort_vs\": %.4f, \"bytes_per_elem\": %.4f, "
            "\"vs_bound\": %.4f, \"decompress_bytes_per_elem\": %.4f, "
            "\"decompress_vs_bound\": %.4f}%s\n",
            row->spec, row->n, row->ratio, row->t_comp, row->t_dec,
            (double)row->n / row->t_comp * 1e3, row->bytes, row->index, row->t_comp / b->t_read[si],
            o->no_sort ? 0.0 : b->t_sort[si] / row->t_comp, row->comp_bytes / (double)row->n,
            row->t_comp / (row->comp_bytes * ms_per_byte), row->dec_bytes / (double)row->n,
            row->t_dec / (row->dec_bytes * ms_per_byte), i + 1 < b->nrows ? "," : "");
    }
    fprintf(json, "  ]\n}\n");
    if (fclose(json) != 0) {
        fprintf(stderr, "pc-bench: --json: error writing '%s'\n", o->json);
        return BENCH_EXIT_FAIL;
    }
    return 0;
}

/* The CPU benchmark over the parsed sizes and ratios. */
static int bench_compress_cpu(const opts_t *o, const double *sizes, int nsizes,
                              const double *ratios, int nratios)
{
    FILE *json = NULL;
    if (o->json[0] && !(json = fopen(o->json, "w"))) {
        fprintf(stderr, "pc-bench: --json: cannot write '%s'\n", o->json);
        return BENCH_EXIT_FAIL;
    }
    cpu_bench_t b = {
        .o = o, .sizes = sizes, .nsizes = nsizes, .ratios = ratios, .nratios = nratios};
    size_t nmax = 0;
    for (int i = 0; i < nsizes; i++)
        nmax = (size_t)sizes[i] > nmax ? (size_t)sizes[i] : nmax;
    b.x = malloc(sizeof(float) * nmax);
    b.dense = malloc(sizeof(float) * nmax);
    b.ord = o->no_sort ? NULL : malloc(sizeof(uint32_t) * nmax);
    b.samples = malloc(sizeof(double) * (size_t)o->reps * 2);
    b.rows = calloc(256, sizeof(row_t));
    int rc = 0;
    if (!b.x || !b.dense || (!o->no_sort && !b.ord) || !b.samples || !b.rows ||
        pc_select_create(&b.sel) != PC_OK) {
        fprintf(stderr, "pc-bench: out of memory for %zu elements\n", nmax);
        rc = BENCH_EXIT_FAIL;
    }
    if (rc == 0) {
        heavy(b.x, nmax);
        memset(b.dense, 0, sizeof(float) * nmax);
        printf("pc-bench compress: heavy-tailed float gradients, %d reps (median), one core;\n"
               "B/elem: the least bytes a compress moves per element, message included; x bound: "
               "its time over\nthose bytes at the read baseline's speed (dec: the same for "
               "decode-add); index: how the message carried\nits indices (u32 list, delta "
               "varints, bitmap of n bits, - none)\n\n",
               o->reps);
        printf("%-44s %10s %7s %10s %10s %9s %12s %8s %8s %8s %8s %8s %6s\n", "codec", "n", "ratio",
               "comp ms", "decomp ms", "Melem/s", "bytes", "x less", "B/elem", "x bound", "dec B/e",
               "dec x bd", "index");
    }
    for (int si = 0; si < nsizes && rc == 0; si++) {
        cpu_baselines(&b, si);
        rc = cpu_codecs(&b, si);
        printf("\n");
    }
    if (rc == 0) {
        cpu_verdicts(&b);
        if (json) {
            rc = cpu_json(&b, json);
            json = NULL;
        }
    }
    if (json)
        fclose(json);
    if (rc != 0 && o->json[0])
        remove(o->json); /* no half-written results */
    cpu_free(&b);
    return rc;
}

int bench_compress_main(int argc, char **argv)
{
    opts_t o = {.reps = 5};
    snprintf(o.ratios, sizeof(o.ratios), "0.001,0.01");
    snprintf(o.device, sizeof(o.device), "cpu");
    pc_flags_group_t g = {"pc-bench compress flags", compress_opts,
                          sizeof(compress_opts) / sizeof(compress_opts[0]), &o, NULL};
    char err[512];
    int rc = pc_flags_parse(&g, 1, argc, argv, NULL, err, sizeof(err));
    int early =
        pc_flags_finish(rc, &g, 1, "pc-bench", "pc-bench compress [flags]", err, 1, stdout, stderr);
    if (early >= 0)
        return early;
    bool cuda = strcmp(o.device, "cuda") == 0;
    if (!cuda && strcmp(o.device, "cpu") != 0) {
        fprintf(stderr, "pc-bench: --device: '%s' is not cpu or cuda\n", o.device);
        return BENCH_EXIT_USAGE;
    }
    if (!o.sizes[0]) /* the defaults: 2.5e7 fits a core's time, 1e8 a device's */
        snprintf(o.sizes, sizeof(o.sizes), "%s",
                 cuda ? "1000000,10000000,100000000" : "1000000,10000000,25000000");
    if (o.quick) {
        snprintf(o.sizes, sizeof(o.sizes), "1000000,10000000");
        o.reps = o.reps < 3 ? o.reps : 3;
    }
    double sizes[8], ratios[8];
    int nsizes = parse_list(o.sizes, sizes, 8, 1, (double)PC_CODEC_MAX_N);
    int nratios = parse_list(o.ratios, ratios, 8, 0, 1);
    if (!nsizes) {
        fprintf(stderr, "pc-bench: --sizes: '%s' is not a list of element counts\n", o.sizes);
        return BENCH_EXIT_USAGE;
    }
    for (int i = 0; i < nratios; i++)
        if (!(ratios[i] > 0))
            nratios = 0; /* a codec keeping nothing is refused by the spec parser */
    if (!nratios) {
        fprintf(stderr, "pc-bench: --ratios: '%s' is not a list of fractions in (0, 1]\n",
                o.ratios);
        return BENCH_EXIT_USAGE;
    }
    if (!o.matrices[0])
        snprintf(o.matrices, sizeof(o.matrices), "%s",
                 o.quick ? "1000x1000,4096x4096" : "1000x1000,4096x4096,10000x10000");
    bool lowrank = strcmp(o.matrices, "none") != 0;
    if (cuda && o.powersgd_only) {
        fprintf(stderr, "pc-bench: --powersgd-only: powersgd runs on the CPU (--device cpu)\n");
        return BENCH_EXIT_USAGE;
    }
    if (!lowrank && o.powersgd_only) {
        fprintf(stderr, "pc-bench: --powersgd-only with --matrices none measures nothing\n");
        return BENCH_EXIT_USAGE;
    }
    if (o.threads > 0) {
        if (cuda) {
            fprintf(stderr, "pc-bench: --threads: the compressor pool runs on the CPU (--device "
                            "cpu)\n");
            return BENCH_EXIT_USAGE;
        }
        /* Every CPU codec but the copy, at the runtime's default ratios. */
        static const char *const pool_specs[] = {"topk:ratio=0.01", "dgc:ratio=0.001", "fp16",
                                                 "qsgd:levels=16",  "terngrad",        "efsign"};
        return bench_pool_cpu(o.threads, o.reps, pool_specs,
                              sizeof pool_specs / sizeof pool_specs[0]);
    }
    if (cuda)
        return bench_compress_cuda(&o, sizes, nsizes, ratios, nratios);
    if (lowrank && (rc = bench_lowrank_check(o.matrices)) != 0)
        return rc;
    if (!o.powersgd_only && (rc = bench_compress_cpu(&o, sizes, nsizes, ratios, nratios)) != 0)
        return rc;
    if (!lowrank)
        return 0;
    printf("\n");
    return bench_lowrank_cpu(o.matrices, o.reps);
}
