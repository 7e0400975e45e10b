/* test_devcodec: the device codecs (pc_devcodec) against the CPU codecs (pc_codec), which
 * are the reference: for every codec, message bytes, residual and momentum equal bit for
 * bit, call after call, and decode-add equal to the CPU's, over sizes, seeds, iterations
 * and inputs with ties, all-equal magnitudes, zeros and subnormals; NaN and infinity are
 * PC_ERANGE; plus the API's own checks (devices, sizes, states, bad messages).
 *
 * Built twice from this file:
 *   test_devcodec       the codecs on the CPU (PC_DEVCODEC_CPU): runs on every machine;
 *                       the sizes stop at 10^5 (the sanitizer build runs it too).
 *   test_devcodec_cuda  (PC_TEST_ON_DEVICE) the codecs on CUDA device 0, sizes up to 10^7;
 *                       without a device (or CUDA) it exits 77: skipped, never passed. */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_devcodec.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_philox.h"
#include "pipecompress/pc_wire.h"

#if defined(PC_TEST_ON_DEVICE) && defined(PC_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

#ifdef PC_TEST_ON_DEVICE
#define TARGET 0
static const size_t sizes[] = {1, 2, 31, 4096, 65536 + 7, 1000003, 10000000};
#else
#define TARGET PC_DEVCODEC_CPU
static const size_t sizes[] = {1, 2, 31, 4096, 65536 + 7, 100003};
#endif
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
/* Above this size only the gradient-like input and one seed (the CPU reference's time). */
#define BIG 200000

/* Every codec, and the variants that take other paths (fp16 values, delta indices,
 * momentum on and off, error feedback off, widths of qsgd codes that straddle bytes). */
static const char *specs[] = {
    "none",
    "fp16",
    "fp16:ef=on",
    "topk:ratio=0.01",
    "topk:ratio=0.3,values=fp16,index=delta",
    "topk:ratio=0.01,momentum=0",
    "topk:ratio=0.01,momentum=0,warmup=3",
    "topk:ratio=0.05,ef=off",
    "topk:ratio=1",
    "dgc:ratio=0.01",
    "dgc:ratio=0.001,sample=0.01,warmup=3,clip=1,values=fp16,index=delta",
    "dgc:ratio=0.3,momentum=0",
    "randomk:ratio=0.05",
    "randomk:ratio=0.5,momentum=0,values=fp16",
    "randomk:ratio=0.02,ef=off",
    "randomk:ratio=1",
    "threshold:tau=0.5",
    "threshold:tau=0.2,ef=off",
    "threshold:tau=0.01,values=fp16,index=delta",
    "qsgd",
    "qsgd:levels=1",
    "qsgd:levels=3,ef=on",
    "qsgd:levels=127",
    "terngrad",
    "terngrad:ef=on",
    "efsign",
    "efsign:ef=off",
};
#define NSPECS (sizeof(specs) / sizeof(specs[0]))

enum input { GRADIENT, TIES, EQUAL, ZEROS, SUBNORMAL, NINPUTS };
static const char *input_names[] = {"gradient", "ties", "equal", "zeros", "subnormal"};

/* Input kind for iteration it (a fresh gradient every iteration). */
static void fill(float *g, size_t n, enum input kind, uint64_t seed, uint64_t it)
{
    pc_philox_t p;
    pc_philox_init(&p, seed, 1000 + it, 0);
    for (size_t i = 0; i < n; i++) {
        uint32_t a = pc_philox_next(&p), b = pc_philox_next(&p);
        float sign = (b & 1) ? -1.0f : 1.0f, u = pc_philox_uniform(a);
        switch (kind) {
        case GRADIENT: /* heavy-tailed, many octaves */
            g[i] = sign * 1e-3f * powf(u, -1.2f);
            break;
        case TIES: /* few distinct magnitudes: the k-th is shared by many */
            g[i] = sign * 0.25f * (float)(1 + (a % 4));
            break;
        case EQUAL:
            g[i] = sign * 0.5f;
            break;
        case ZEROS: /* mostly zeros, a few values (and negative zeros) */
            g[i] = (a % 16 == 0) ? sign * u : (b & 2 ? -0.0f : 0.0f);
            break;
        case SUBNORMAL: /* subnormal magnitudes, some normal ones */
            g[i] = sign * (a % 8 == 0 ? u * 1e-30f : u * 1e-39f);
            break;
        default:
            g[i] = 0;
        }
    }
}

static pc_codec_spec_t parse(const char *text, uint64_t seed)
{
    pc_codec_spec_t spec;
    char err[256];
    if (pc_codec_spec_parse(text, &spec, err, sizeof(err)) != PC_OK)
        fail_msg("spec '%s': %s", text, err);
    spec.seed = seed;
    return spec;
}

static pc_devcodec_t *make_dev(const pc_codec_spec_t *spec)
{
    pc_devcodec_t *d;
    char err[256] = "";
    int rc = pc_devcodec_create(spec, TARGET, &d, err, sizeof(err));
    if (rc != PC_OK)
        fail_msg("pc_devcodec_create: %s", err);
    assert_int_equal(pc_devcodec_device(d), TARGET);
    return d;
}

static void *dev_alloc(pc_devcodec_t *d, size_t bytes)
{
    void *p;
    assert_int_equal(pc_devcodec_alloc(d, bytes, &p, NULL, 0), PC_OK);
    return p;
}

static void put(pc_devcodec_t *d, void *dst, const void *src, size_t bytes)
{
    assert_int_equal(pc_devcodec_copy(d, dst, src, bytes, true, NULL, NULL, 0), PC_OK);
}

static void get(pc_devcodec_t *d, void *dst, const void *src, size_t bytes)
{
    assert_int_equal(pc_devcodec_copy(d, dst, src, bytes, false, NULL, NULL, 0), PC_OK);
}

static void expect_same_floats(const float *a, const float *b, size_t n, const char *what,
                               const char *spec, size_t size, uint64_t it)
{
    if (memcmp(a, b, sizeof(float) * n) == 0)
        return;
    /* Bit for bit, except that any NaN equals any NaN (a GPU's arithmetic makes the
     * canonical NaN where the CPU keeps the operand's payload). */
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && !(isnan(a[i]) && isnan(b[i])))
            fail_msg("%s n=%zu iteration %llu: %s[%zu] = %a on the target, %a on the CPU", spec,
                     size, (unsigned long long)it, what, i, (double)a[i], (double)b[i]);
}

/* The CPU codec and the target's for one spec, with one state each for one chunk. */
typedef struct twin {
    pc_codec_t *c;
    pc_devcodec_t *d;
    pc_codec_state_t *cs;
    pc_devcodec_state_t *ds;
} twin_t;

static twin_t twin_make(const char *text, uint64_t seed, uint32_t chunk, size_t n)
{
    twin_t t;
    pc_codec_spec_t spec = parse(text, seed);
    assert_int_equal(pc_codec_create(&spec, &t.c), PC_OK);
    t.d = make_dev(&spec);
    assert_int_equal(pc_codec_state_create(t.c, chunk, n, &t.cs), PC_OK);
    assert_int_equal(pc_devcodec_state_create(t.d, chunk, n, &t.ds, NULL, 0), PC_OK);
    assert_int_equal(pc_devcodec_state_has_residual(t.ds), pc_codec_state_residual(t.cs) != NULL);
    assert_int_equal(pc_devcodec_state_has_momentum(t.ds), pc_codec_state_momentum(t.cs) != NULL);
    return t;
}

static void twin_free(twin_t *t)
{
    pc_devcodec_state_destroy(t->ds);
    pc_codec_state_destroy(t->cs);
    pc_devcodec_destroy(t->d);
    pc_codec_destroy(t->c);
}

/* The target's residual and momentum equal the CPU's. */
static void expect_same_state(const twin_t *t, size_t n, const char *text, uint64_t it)
{
    float *h = malloc(sizeof(float) * n);
    assert_non_null(h);
    if (pc_codec_state_residual(t->cs)) {
        assert_int_equal(pc_devcodec_state_get(t->ds, h, NULL, NULL, 0), PC_OK);
        expect_same_floats(h, pc_codec_state_residual(t->cs), n, "residual", text, n, it);
    }
    if (pc_codec_state_momentum(t->cs)) {
        assert_int_equal(pc_devcodec_state_get(t->ds, NULL, h, NULL, 0), PC_OK);
        expect_same_floats(h, pc_codec_state_momentum(t->cs), n, "momentum", text, n, it);
    }
    assert_int_equal(pc_devcodec_state_steps(t->ds), pc_codec_state_steps(t->cs));
    free(h);
}

/* dgc's paths taken on the target, over every comparison (each must be seen). */
static pc_codec_stats_t dgc_seen;

/* One codec spec, one size, seed and input: 3 iterations compared step by step, on the
 * given stream. */
static void compare_one(const char *text, size_t n, uint64_t seed, enum input kind,
                        pc_devcodec_stream_t stream)
{
    uint32_t chunk = (uint32_t)(seed * 7 + n % 13);
    twin_t t = twin_make(text, seed, chunk, n);
    pc_codec_t *c = t.c;
    pc_devcodec_t *d = t.d;
    pc_codec_state_t *cs = t.cs;
    pc_devcodec_state_t *ds = t.ds;
    bool ef = pc_codec_spec(c)->ef;

    size_t cap = pc_codec_max_bytes(c, n);
    assert_int_equal(pc_devcodec_max_bytes(d, n), cap);
    uint8_t *want = malloc(cap), *got;
    assert_int_equal(pc_devcodec_host_alloc(d, cap, (void **)&got, NULL, 0), PC_OK);
    float *g = malloc(sizeof(float) * n);
    float *dense_c = malloc(sizeof(float) * n), *dense_d = malloc(sizeof(float) * n);
    assert_true(want && g && dense_c && dense_d);
    float *g_dev = dev_alloc(d, sizeof(float) * n), *dense_dev = dev_alloc(d, sizeof(float) * n);

    for (uint64_t it = 0; it < 3; it++) {
        uint64_t iteration = 5 + it * 1000003; /* exercises the subsequence's high word */
        fill(g, n, kind, seed, it);
        put(d, g_dev, g, sizeof(float) * n);
        size_t wlen = 0, glen = 0;
        int rc;
        if (it == 1 && ef) { /* the two halves, on both sides */
            assert_int_equal(pc_codec_fold(c, cs, g), PC_OK);
            assert_int_equal(pc_codec_compress_folded(c, cs, iteration, want, cap, &wlen), PC_OK);
            rc = pc_devcodec_fold(d, ds, g_dev, stream);
            if (rc == PC_OK)
                rc = pc_devcodec_compress_folded(d, ds, iteration, stream, got, cap, &glen);
        } else {
            assert_int_equal(pc_codec_compress(c, cs, g, iteration, want, cap, &wlen), PC_OK);
            rc = pc_devcodec_compress(d, ds, g_dev, iteration, stream, got, cap, &glen);
        }
        if (rc != PC_OK)
            fail_msg("%s n=%zu %s: device compress: %s", text, n, input_names[kind],
                     pc_strerror(rc));
        if (glen != wlen || memcmp(got, want, wlen) != 0) {
            size_t at = 0;
            while (at < wlen && at < glen && got[at] == want[at])
                at++;
            fail_msg("%s n=%zu seed %llu %s iteration %llu: message of %zu bytes, CPU %zu; "
                     "first difference at byte %zu",
                     text, n, (unsigned long long)seed, input_names[kind],
                     (unsigned long long)iteration, glen, wlen, at);
        }
        expect_same_state(&t, n, text, it);
        /* Decode-add into a non-zero buffer with a scale. */
        fill(dense_c, n, GRADIENT, seed + 1, it);
        put(d, dense_dev, dense_c, sizeof(float) * n);
        pc_codec_expect_t ex = {.chunk = chunk, .n = (uint32_t)n, .iteration = iteration};
        char err[256] = "";
        pc_wire_header_t hdr;
        rc = pc_codec_decode_add(c, want, wlen, &ex, 0.5f, dense_c, NULL, err, sizeof(err));
        if (rc != PC_OK)
            fail_msg("%s: CPU decode: %s", text, err);
        rc = pc_devcodec_decode_add(d, want, wlen, &ex, 0.5f, dense_dev, stream, &hdr, err,
                                    sizeof(err));
        if (rc != PC_OK)
            fail_msg("%s: device decode: %s", text, err);
        assert_int_equal(hdr.n, n);
        get(d, dense_d, dense_dev, sizeof(float) * n);
        expect_same_floats(dense_d, dense_c, n, "decoded", text, n, it);
    }
    pc_codec_stats_t a = pc_codec_stats(c), b = pc_devcodec_stats(d);
    assert_true(a.messages == b.messages && a.entries == b.entries && a.bytes == b.bytes);
    assert_true(a.dgc_sampled == b.dgc_sampled && a.dgc_adapted == b.dgc_adapted &&
                a.dgc_exact == b.dgc_exact);
    dgc_seen.dgc_sampled += b.dgc_sampled;
    dgc_seen.dgc_adapted += b.dgc_adapted;
    dgc_seen.dgc_exact += b.dgc_exact;

    pc_devcodec_free(d, g_dev);
    pc_devcodec_free(d, dense_dev);
    pc_devcodec_host_free(d, got);
    free(want);
    free(g);
    free(dense_c);
    free(dense_d);
    twin_free(&t);
}

static void test_same_bytes_every_codec(void **state)
{
    (void)state;
    for (size_t s = 0; s < NSPECS; s++) {
        /* The selections also see ties and equal magnitudes at every size (the candidate
         * passes' grid-stride loops and the ties' sort run only on large inputs). */
        bool selects = strncmp(specs[s], "topk", 4) == 0 || strncmp(specs[s], "dgc", 3) == 0;
        for (size_t z = 0; z < NSIZES; z++)
            for (uint64_t seed = 1; seed <= 2; seed++)
                for (int kind = 0; kind < NINPUTS; kind++) {
                    bool big_ok = kind == GRADIENT || (selects && (kind == TIES || kind == EQUAL));
                    if (sizes[z] > BIG && (seed > 1 || !big_ok))
                        continue;
                    compare_one(specs[s], sizes[z], seed, (enum input)kind, NULL);
                }
    }
    fprintf(stderr, "dgc paths on the target: %llu sampled, %llu adapted, %llu exact\n",
            (unsigned long long)dgc_seen.dgc_sampled, (unsigned long long)dgc_seen.dgc_adapted,
            (unsigned long long)dgc_seen.dgc_exact);
    assert_true(dgc_seen.dgc_sampled > 0 && dgc_seen.dgc_adapted > 0 && dgc_seen.dgc_exact > 0);
}

/* One codec, many states of interleaved sizes: the scratch grows and is reused, and each
 * state's messages stay the CPU's. */
static void test_scratch_reuse(void **state)
{
    (void)state;
    const size_t ns[] = {100003, 31, 1000003, 4096, 65536 + 7, 2};
    const char *texts[] = {"topk:ratio=0.01", "dgc:ratio=0.01", "randomk:ratio=0.05", "qsgd"};
    for (size_t t = 0; t < 4; t++) {
        pc_codec_spec_t spec = parse(texts[t], 9);
        pc_codec_t *c;
        assert_int_equal(pc_codec_create(&spec, &c), PC_OK);
        pc_devcodec_t *d = make_dev(&spec);
        for (int round = 0; round < 2; round++)
            for (size_t z = 0; z < sizeof(ns) / sizeof(ns[0]); z++) {
                size_t n = ns[z];
                pc_codec_state_t *cs;
                pc_devcodec_state_t *ds;
                assert_int_equal(pc_codec_state_create(c, (uint32_t)z, n, &cs), PC_OK);
                assert_int_equal(pc_devcodec_state_create(d, (uint32_t)z, n, &ds, NULL, 0), PC_OK);
                float *g = malloc(sizeof(float) * n), *g_dev = dev_alloc(d, sizeof(float) * n);
                fill(g, n, (enum input)(z % NINPUTS), 9, (uint64_t)round);
                put(d, g_dev, g, sizeof(float) * n);
                size_t cap = pc_codec_max_bytes(c, n), wlen, glen;
                uint8_t *want = malloc(cap), *got = malloc(cap);
                assert_int_equal(pc_codec_compress(c, cs, g, 7, want, cap, &wlen), PC_OK);
                assert_int_equal(pc_devcodec_compress(d, ds, g_dev, 7, NULL, got, cap, &glen),
                                 PC_OK);
                if (glen != wlen || memcmp(got, want, wlen) != 0)
                    fail_msg("%s n=%zu round %d: the message differs from the CPU's", texts[t], n,
                             round);
                free(want);
                free(got);
                free(g);
                pc_devcodec_free(d, g_dev);
                pc_devcodec_state_destroy(ds);
                pc_codec_state_destroy(cs);
            }
        pc_devcodec_destroy(d);
        pc_codec_destroy(c);
    }
}

#if defined(PC_TEST_ON_DEVICE) && defined(PC_HAVE_CUDA)
/* On a stream of the caller's that does not synchronise with the legacy stream. */
static void test_own_stream(void **state)
{
    (void)state;
    cudaStream_t q;
    assert_int_equal(cudaStreamCreateWithFlags(&q, cudaStreamNonBlocking), cudaSuccess);
    compare_one("topk:ratio=0.01", 1000003, 3, GRADIENT, q);
    compare_one("qsgd:levels=3,ef=on", 100003, 3, GRADIENT, q);
    compare_one("randomk:ratio=0.05", 100003, 3, TIES, q);
    assert_int_equal(cudaStreamDestroy(q), cudaSuccess);
}
#endif

/* NaN or infinity in the gradient: PC_ERANGE, as on the CPU, for every codec. */
static void test_nonfinite(void **state)
{
    (void)state;
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (size_t s = 0; s < NSPECS; s++)
        for (size_t b = 0; b < 3; b++) {
            size_t n = 5000;
            twin_t t = twin_make(specs[s], 3, 1, n);
            pc_codec_t *c = t.c;
            pc_devcodec_t *d = t.d;
            float *g = malloc(sizeof(float) * n);
            fill(g, n, GRADIENT, 3, 0);
            g[n / 3] = bad[b];
            float *g_dev = dev_alloc(d, sizeof(float) * n);
            put(d, g_dev, g, sizeof(float) * n);
            size_t cap = pc_codec_max_bytes(c, n), len;
            uint8_t *out = malloc(cap);
            int want = pc_codec_compress(c, t.cs, g, 0, out, cap, &len);
            int got = pc_devcodec_compress(d, t.ds, g_dev, 0, NULL, out, cap, &len);
            assert_int_equal(want, PC_ERANGE);
            if (got != want)
                fail_msg("%s with %g: device compress %s, CPU %s", specs[s], (double)bad[b],
                         pc_errname(got), pc_errname(want));
            expect_same_state(&t, n, specs[s], 0); /* as the CPU left it */
            free(out);
            free(g);
            pc_devcodec_free(d, g_dev);
            twin_free(&t);
        }
}

/* compress_folded needs a fold since the last compress, and says PC_ERANGE again after a
 * fold that found NaN or infinity (dgc once sent such a message with PC_OK), on the CPU
 * and on the target alike. */
static void test_fold_protocol(void **state)
{
    (void)state;
    const char *texts[] = {"dgc:ratio=0.01",  "dgc:ratio=0.01,warmup=5",
                           "topk:ratio=0.01", "randomk:ratio=0.05",
                           "qsgd:ef=on",      "fp16:ef=on",
                           "efsign"};
    size_t n = 1000;
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        twin_t t = twin_make(texts[i], 5, 3, n);
        float *g = malloc(sizeof(float) * n), *g_dev = dev_alloc(t.d, sizeof(float) * n);
        fill(g, n, GRADIENT, 5, 0);
        put(t.d, g_dev, g, sizeof(float) * n);
        size_t cap = pc_codec_max_bytes(t.c, n), len;
        uint8_t *out = malloc(cap);
        /* Nothing folded yet; one fold, two compressions. */
        assert_int_equal(pc_codec_compress_folded(t.c, t.cs, 0, out, cap, &len), PC_EINVAL);
        assert_int_equal(pc_devcodec_compress_folded(t.d, t.ds, 0, NULL, out, cap, &len),
                         PC_EINVAL);
        assert_non_null(strstr(pc_devcodec_error(t.d), "nothing folded"));
        assert_int_equal(pc_codec_fold(t.c, t.cs, g), PC_OK);
        assert_int_equal(pc_devcodec_fold(t.d, t.ds, g_dev, NULL), PC_OK);
        assert_int_equal(pc_codec_compress_folded(t.c, t.cs, 0, out, cap, &len), PC_OK);
        assert_int_equal(pc_devcodec_compress_folded(t.d, t.ds, 0, NULL, out, cap, &len), PC_OK);
        assert_int_equal(pc_codec_compress_folded(t.c, t.cs, 1, out, cap, &len), PC_EINVAL);
        assert_int_equal(pc_devcodec_compress_folded(t.d, t.ds, 1, NULL, out, cap, &len),
                         PC_EINVAL);
        /* A fold that finds infinity: ERANGE, then ERANGE again, nothing sent. */
        g[3] = INFINITY;
        put(t.d, g_dev, g, sizeof(float) * n);
        assert_int_equal(pc_codec_fold(t.c, t.cs, g), PC_ERANGE);
        assert_int_equal(pc_devcodec_fold(t.d, t.ds, g_dev, NULL), PC_ERANGE);
        assert_non_null(strstr(pc_devcodec_error(t.d), "NaN or infinity"));
        assert_int_equal(pc_codec_compress_folded(t.c, t.cs, 2, out, cap, &len), PC_ERANGE);
        assert_int_equal(pc_devcodec_compress_folded(t.d, t.ds, 2, NULL, out, cap, &len),
                         PC_ERANGE);
        expect_same_state(&t, n, texts[i], 2);
        assert_int_equal(pc_codec_stats(t.c).messages, 1);
        assert_int_equal(pc_devcodec_stats(t.d).messages, 1);
        free(out);
        free(g);
        pc_devcodec_free(t.d, g_dev);
        twin_free(&t);
    }
}

/* ---- the API's checks ------------------------------------------------------------------- */

static void test_create_errors(void **state)
{
    (void)state;
    pc_codec_spec_t spec = parse("topk", 1);
    pc_devcodec_t *d = NULL;
    char err[256] = "";
    assert_int_equal(pc_devcodec_create(NULL, TARGET, &d, err, sizeof(err)), PC_EINVAL);
    assert_int_equal(pc_devcodec_create(&spec, -3, &d, err, sizeof(err)), PC_EINVAL);
    assert_non_null(strstr(err, "device -3"));
    /* A device that does not exist. */
    int count = pc_cuda_device_count();
    assert_int_equal(pc_devcodec_create(&spec, count, &d, err, sizeof(err)), PC_ENODEV);
    assert_non_null(strstr(err, "no CUDA device"));
    assert_null(d);
    /* A bad spec. */
    pc_codec_spec_t bad = spec;
    bad.id = PC_CODEC_COUNT;
    assert_int_equal(pc_devcodec_create(&bad, PC_DEVCODEC_CPU, &d, err, sizeof(err)), PC_EINVAL);
    assert_non_null(strstr(err, "field out of its range"));
    /* powersgd: on the CPU (ANY chooses it), never on a CUDA device (no kernels), whether
     * or not one exists. */
    pc_codec_spec_t lr = parse("powersgd:rank=2", 1);
    assert_int_equal(pc_devcodec_create(&lr, 0, &d, err, sizeof(err)), PC_EINVAL);
    assert_non_null(strstr(err, "powersgd has no CUDA kernels"));
    assert_null(d);
    assert_int_equal(pc_devcodec_create(&lr, PC_DEVCODEC_ANY, &d, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_devcodec_device(d), PC_DEVCODEC_CPU);
    pc_devcodec_destroy(d);
    d = NULL;
    /* ANY: device 0 where there is one, else the CPU. */
    assert_int_equal(pc_devcodec_create(&spec, PC_DEVCODEC_ANY, &d, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_devcodec_device(d), count > 0 ? 0 : PC_DEVCODEC_CPU);
    assert_int_equal(pc_devcodec_codec(d) != NULL, 1);
    pc_devcodec_destroy(d);
    pc_devcodec_destroy(NULL);
}

static void test_state_and_call_errors(void **state)
{
    (void)state;
    pc_codec_spec_t spec = parse("dgc", 1);
    pc_devcodec_t *d = make_dev(&spec), *other = make_dev(&spec);
    pc_devcodec_state_t *st = NULL;
    char err[256] = "";
    assert_int_equal(pc_devcodec_state_create(d, 7, 0, &st, err, sizeof(err)), PC_EINVAL);
    assert_non_null(strstr(err, "state for chunk 7: 0 elements"));
    assert_int_equal(pc_devcodec_state_create(d, 0, (size_t)PC_CODEC_MAX_N + 1, &st, NULL, 0),
                     PC_EINVAL);
    assert_int_equal(pc_devcodec_state_create(NULL, 0, 8, &st, NULL, 0), PC_EINVAL);
    assert_int_equal(pc_devcodec_state_create(d, 4, 100, &st, NULL, 0), PC_OK);
    assert_int_equal(pc_devcodec_state_n(st), 100);
    assert_true(pc_devcodec_state_has_residual(st) && pc_devcodec_state_has_momentum(st));
    /* Round trip of the state (what a checkpoint does). */
    float r[100], m[100], r2[100], m2[100];
    for (int i = 0; i < 100; i++) {
        r[i] = (float)i * 0.25f;
        m[i] = -(float)i;
    }
    assert_int_equal(pc_devcodec_state_set(st, r, m, NULL, 0), PC_OK);
    assert_int_equal(pc_devcodec_state_get(st, r2, m2, NULL, 0), PC_OK);
    assert_memory_equal(r, r2, sizeof(r));
    assert_memory_equal(m, m2, sizeof(m));
    pc_devcodec_state_set_steps(st, 17);
    assert_int_equal(pc_devcodec_state_steps(st), 17);

    float *g = dev_alloc(d, sizeof(float) * 100);
    size_t cap = pc_devcodec_max_bytes(d, 100), len = 0;
    uint8_t *out = malloc(cap);
    /* Too small a buffer, a state of another codec, missing pointers. */
    assert_int_equal(pc_devcodec_compress(d, st, g, 0, NULL, out, cap - 1, &len), PC_EINVAL);
    assert_non_null(strstr(pc_devcodec_error(d), "largest message needs"));
    assert_int_equal(pc_devcodec_compress(other, st, g, 0, NULL, out, cap, &len), PC_EINVAL);
    assert_non_null(strstr(pc_devcodec_error(other), "belongs to another codec"));
    assert_int_equal(pc_devcodec_compress(d, st, NULL, 0, NULL, out, cap, &len), PC_EINVAL);
    assert_int_equal(pc_devcodec_compress(d, st, g, 0, NULL, NULL, cap, &len), PC_EINVAL);
    assert_int_equal(len, 0);
    /* fold/compress_folded: a state of another codec; a codec without error feedback. */
    assert_int_equal(pc_devcodec_fold(other, st, g, NULL), PC_EINVAL);
    assert_int_equal(pc_devcodec_fold(d, st, NULL, NULL), PC_EINVAL);
    assert_int_equal(pc_devcodec_compress_folded(other, st, 0, NULL, out, cap, &len), PC_EINVAL);
    pc_codec_spec_t noef = parse("fp16", 1);
    pc_devcodec_t *ne = make_dev(&noef);
    pc_devcodec_state_t *nst;
    assert_int_equal(pc_devcodec_state_create(ne, 0, 100, &nst, NULL, 0), PC_OK);
    assert_int_equal(pc_devcodec_fold(ne, nst, g, NULL), PC_EINVAL);
    assert_non_null(strstr(pc_devcodec_error(ne), "without error feedback"));
    assert_int_equal(pc_devcodec_compress_folded(ne, nst, 0, NULL, out, cap, &len), PC_EINVAL);
    pc_devcodec_state_destroy(nst);
    pc_devcodec_destroy(ne);
    /* No momentum array in a codec without one. */
    pc_codec_spec_t plain = parse("topk:momentum=0", 1);
    pc_devcodec_t *p = make_dev(&plain);
    pc_devcodec_state_t *ps;
    assert_int_equal(pc_devcodec_state_create(p, 0, 100, &ps, NULL, 0), PC_OK);
    assert_false(pc_devcodec_state_has_momentum(ps));
    assert_int_equal(pc_devcodec_state_get(ps, NULL, m2, err, sizeof(err)), PC_EINVAL);
    assert_non_null(strstr(err, "holds no momentum"));
    assert_int_equal(pc_devcodec_state_set(ps, NULL, m, NULL, 0), PC_EINVAL);
    pc_devcodec_destroy(p); /* the state outlives its codec */
    assert_int_equal(pc_devcodec_state_get(ps, r2, NULL, NULL, 0), PC_OK);
    pc_devcodec_state_destroy(ps);

    free(out);
    pc_devcodec_free(d, g);
    pc_devcodec_state_destroy(st);
    pc_devcodec_destroy(other);
    pc_devcodec_destroy(d);
}

/* ---- powersgd: the rounds on the CPU path, against pc_codec's ---------------------------- */

#define LR_ROWS 64
#define LR_COLS 48
#define LR_N    (LR_ROWS * LR_COLS)
#define LR_RANK 2

/* The rows pc_*_lowrank_finish hands over, kept. */
static void keep_row(void *ud, size_t row, const float *update)
{
    memcpy((float *)ud + row * LR_COLS, update, sizeof(float) * LR_COLS);
}

/* A matrix state on each side; 4 iterations (the first a warm-up), with P^ and the
 * aggregate Q made up (the codec does not check what the server would send): the messages,
 * the rows handed over, the residual and Q equal bit for bit, call after call. */
static void test_lowrank_rounds(void **state)
{
    (void)state;
    pc_codec_spec_t spec = parse("powersgd:rank=2,warmup=1", 5);
    pc_codec_t *c;
    pc_devcodec_t *d;
    pc_codec_state_t *cs;
    pc_devcodec_state_t *ds;
    char err[256] = "";
    assert_int_equal(pc_codec_create(&spec, &c), PC_OK);
    assert_int_equal(pc_devcodec_create(&spec, PC_DEVCODEC_CPU, &d, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_codec_state_create_matrix(c, 3, LR_ROWS, LR_N, &cs), PC_OK);
    assert_int_equal(pc_devcodec_state_create_matrix(d, 3, LR_ROWS, LR_N, &ds, err, sizeof(err)),
                     PC_OK);
    assert_int_equal(pc_devcodec_state_rows(ds), LR_ROWS);
    size_t cap = pc_codec_max_bytes(c, LR_N), la, lb;
    uint8_t *ma = malloc(cap), *mb = malloc(cap);
    float *g = malloc(sizeof(float) * LR_N), *ra = malloc(sizeof(float) * LR_N),
          *rb = malloc(sizeof(float) * LR_N), phat[LR_ROWS * LR_RANK], q[LR_COLS * LR_RANK],
          qb[LR_COLS * LR_RANK];
    assert_true(ma && mb && g && ra && rb);
    for (uint64_t it = 0; it < 4; it++) {
        fill(g, LR_N, GRADIENT, 11, it);
        assert_int_equal(pc_codec_fold(c, cs, g), PC_OK);
        assert_int_equal(pc_devcodec_fold(d, ds, g, NULL), PC_OK);
        if (pc_codec_lowrank_warm(&spec, it)) {
            assert_int_equal(pc_codec_lowrank_dense(c, cs, it, ma, cap, &la), PC_OK);
            assert_int_equal(pc_devcodec_lowrank_dense(d, ds, it, NULL, mb, cap, &lb), PC_OK);
        } else {
            /* a refused call out of order (round 2 first) touches nothing: round 1 below
             * still sends the fold's P_w */
            fill(phat, LR_ROWS * LR_RANK, GRADIENT, 12, it);
            assert_int_equal(pc_devcodec_lowrank_q(d, ds, phat, it, NULL, mb, cap, &lb), PC_EINVAL);
            assert_int_equal(pc_codec_lowrank_p(c, cs, it, ma, cap, &la), PC_OK);
            assert_int_equal(pc_devcodec_lowrank_p(d, ds, it, NULL, mb, cap, &lb), PC_OK);
            assert_int_equal(la, lb);
            assert_memory_equal(ma, mb, la);
            memcpy(pc_codec_state_lowrank_phat(cs), phat, sizeof(phat));
            assert_int_equal(pc_codec_lowrank_q(c, cs, it, ma, cap, &la), PC_OK);
            assert_int_equal(pc_devcodec_lowrank_q(d, ds, phat, it, NULL, mb, cap, &lb), PC_OK);
            fill(q, LR_COLS * LR_RANK, GRADIENT, 13, it);
            assert_int_equal(pc_codec_lowrank_finish(c, cs, q, keep_row, ra), PC_OK);
            assert_int_equal(pc_devcodec_lowrank_finish(d, ds, q, keep_row, rb, NULL), PC_OK);
            expect_same_floats(rb, ra, LR_N, "update row", "powersgd", LR_N, it);
        }
        assert_int_equal(la, lb);
        assert_memory_equal(ma, mb, la);
        assert_int_equal(pc_devcodec_state_get(ds, rb, NULL, err, sizeof(err)), PC_OK);
        expect_same_floats(rb, pc_codec_state_residual(cs), LR_N, "residual", "powersgd", LR_N, it);
        assert_int_equal(pc_devcodec_state_get_q(ds, qb, err, sizeof(err)), PC_OK);
        expect_same_floats(qb, pc_codec_state_lowrank_q(cs), LR_COLS * LR_RANK, "Q", "powersgd",
                           LR_N, it);
    }
    assert_int_equal(pc_devcodec_stats(d).messages, pc_codec_stats(c).messages);
    /* Q set (a checkpoint restored) is the next round's warm start, on both sides. */
    fill(q, LR_COLS * LR_RANK, GRADIENT, 14, 0);
    assert_int_equal(pc_devcodec_state_set_q(ds, q, err, sizeof(err)), PC_OK);
    memcpy(pc_codec_state_lowrank_q(cs), q, sizeof(q));
    fill(g, LR_N, GRADIENT, 11, 4);
    assert_int_equal(pc_codec_fold(c, cs, g), PC_OK);
    assert_int_equal(pc_devcodec_fold(d, ds, g, NULL), PC_OK);
    assert_int_equal(pc_codec_lowrank_p(c, cs, 4, ma, cap, &la), PC_OK);
    assert_int_equal(pc_devcodec_lowrank_p(d, ds, 4, NULL, mb, cap, &lb), PC_OK);
    assert_int_equal(la, lb);
    assert_memory_equal(ma, mb, la);
    free(ma), free(mb), free(g), free(ra), free(rb);
    pc_devcodec_state_destroy(ds);
    pc_codec_state_destroy(cs);
    pc_devcodec_destroy(d);
    pc_codec_destroy(c);
}

/* The rounds' refusals: each PC_EINVAL (or PC_ERANGE) with its reason in one line. */
static void test_lowrank_errors(void **state)
{
    (void)state;
    pc_codec_spec_t spec = parse("powersgd:rank=2", 5);
    pc_devcodec_t *d, *topk;
    pc_devcodec_state_t *ds = NULL, *plain = NULL;
    char err[256] = "";
    assert_int_equal(pc_devcodec_create(&spec, PC_DEVCODEC_CPU, &d, err, sizeof(err)), PC_OK);
    pc_codec_spec_t tk = parse("topk", 1);
    assert_int_equal(pc_devcodec_create(&tk, PC_DEVCODEC_CPU, &topk, err, sizeof(err)), PC_OK);
    /* not a matrix that travels as factors; not a powersgd codec; no error feedback */
    assert_int_equal(pc_devcodec_state_create_matrix(d, 1, 7, LR_N, &ds, err, sizeof(err)),
                     PC_EINVAL);
    assert_non_null(strstr(err, "is not a matrix that travels as factors"));
    assert_int_equal(pc_devcodec_state_create_matrix(topk, 1, LR_ROWS, LR_N, &ds, err, sizeof(err)),
                     PC_EINVAL);
    assert_non_null(strstr(err, "a matrix state is powersgd's, not topk's"));
    pc_codec_spec_t noef = parse("powersgd:rank=2,ef=off", 5);
    pc_devcodec_t *dn;
    assert_int_equal(pc_devcodec_create(&noef, PC_DEVCODEC_CPU, &dn, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_devcodec_state_create_matrix(dn, 1, LR_ROWS, LR_N, &ds, err, sizeof(err)),
                     PC_EINVAL);
    assert_non_null(strstr(err, "ef=off keeps no M"));
    pc_devcodec_destroy(dn);
    assert_null(ds);
    assert_int_equal(pc_devcodec_state_create_matrix(d, 1, LR_ROWS, LR_N, &ds, err, sizeof(err)),
                     PC_OK);
    assert_int_equal(pc_devcodec_state_create(d, 2, LR_N, &plain, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_devcodec_state_rows(plain), 0);
    size_t cap = pc_devcodec_max_bytes(d, LR_N), len;
    uint8_t *m = malloc(cap);
    float *g = calloc(LR_N, sizeof(float)), q[LR_COLS * LR_RANK] = {0},
          phat[LR_ROWS * LR_RANK] = {0};
    assert_true(m && g);
    /* a plain state; another codec's state */
    assert_int_equal(pc_devcodec_lowrank_p(d, plain, 0, NULL, m, cap, &len), PC_EINVAL);
    assert_non_null(strstr(pc_devcodec_error(d), "chunk 2's state is not a powersgd matrix's"));
    assert_int_equal(pc_devcodec_state_get_q(plain, q, err, sizeof(err)), PC_EINVAL);
    assert_non_null(strstr(err, "holds no Q"));
    assert_int_equal(pc_devcodec_lowrank_p(topk, ds, 0, NULL, m, cap, &len), PC_EINVAL);
    assert_non_null(strstr(pc_devcodec_error(topk), "belongs to another codec"));
    /* out of order: nothing folded, round 2 first, the end first */
    assert_int_equal(pc_devcodec_lowrank_p(d, ds, 0, NULL, m, cap, &len), PC_EINVAL);
    assert_non_null(strstr(pc_devcodec_error(d), "nothing folded"));
    assert_int_equal(pc_devcodec_lowrank_q(d, ds, phat, 0, NULL, m, cap, &len), PC_EINVAL);
    assert_non_null(strstr(pc_devcodec_error(d), "out of order: round 1"));
    assert_int_equal(pc_devcodec_lowrank_finish(d, ds, q, NULL, NULL, NULL), PC_EINVAL);
    assert_non_null(strstr(pc_devcodec_error(d), "out of order: round 1"));
    /* a buffer too small; no P^; the one-message calls */
    assert_int_equal(pc_devcodec_fold(d, ds, g, NULL), PC_OK);
    assert_int_equal(pc_devcodec_lowrank_p(d, ds, 0, NULL, m, cap - 1, &len), PC_EINVAL);
    assert_non_null(strstr(pc_devcodec_error(d), "largest message needs"));
    assert_int_equal(pc_devcodec_compress_folded(d, ds, 0, NULL, m, cap, &len), PC_EINVAL);
    assert_non_null(strstr(pc_devcodec_error(d), "powersgd travels in two rounds"));
    assert_int_equal(pc_devcodec_compress(d, plain, g, 0, NULL, m, cap, &len), PC_EINVAL);
    assert_int_equal(pc_devcodec_lowrank_p(d, ds, 0, NULL, m, cap, &len), PC_OK);
    assert_int_equal(pc_devcodec_lowrank_p(d, ds, 0, NULL, m, cap, &len), PC_EINVAL);
    assert_non_null(strstr(pc_devcodec_error(d), "out of order: round 2 is due"));
    assert_int_equal(pc_devcodec_lowrank_q(d, ds, NULL, 0, NULL, m, cap, &len), PC_EINVAL);
    assert_non_null(strstr(pc_devcodec_error(d), "no P^"));
    assert_int_equal(pc_devcodec_lowrank_q(d, ds, phat, 0, NULL, m, cap, &len), PC_OK);
    assert_int_equal(pc_devcodec_lowrank_q(d, ds, phat, 0, NULL, m, cap, &len), PC_EINVAL);
    assert_non_null(strstr(pc_devcodec_error(d), "out of order: the step's end"));
    /* NaN in M: the fold says so, round 1 refuses */
    pc_devcodec_state_t *bad = NULL;
    g[5] = NAN;
    assert_int_equal(pc_devcodec_state_create_matrix(d, 4, LR_ROWS, LR_N, &bad, err, sizeof(err)),
                     PC_OK);
    assert_int_equal(pc_devcodec_fold(d, bad, g, NULL), PC_ERANGE);
    assert_int_equal(pc_devcodec_lowrank_p(d, bad, 0, NULL, m, cap, &len), PC_ERANGE);
    assert_non_null(strstr(pc_devcodec_error(d), "NaN or infinity"));
    free(m), free(g);
    pc_devcodec_state_destroy(bad);
    pc_devcodec_state_destroy(ds);
    pc_devcodec_state_destroy(plain);
    pc_devcodec_destroy(d);
    pc_devcodec_destroy(topk);
}

/* A bad message: PC_EFORMAT with a reason, the device buffer untouched. */
static void test_decode_rejects(void **state)
{
    (void)state;
    /* k = 2 of 64: the list (8 bytes) is not larger than the bitmap, so the mutation below
     * hits an index */
    pc_codec_spec_t spec = parse("topk:ratio=0.02", 1);
    pc_codec_t *c;
    assert_int_equal(pc_codec_create(&spec, &c), PC_OK);
    pc_devcodec_t *d = make_dev(&spec);
    size_t n = 64;
    pc_codec_state_t *cs;
    assert_int_equal(pc_codec_state_create(c, 2, n, &cs), PC_OK);
    float g[64], dense[64], back[64];
    fill(g, n, GRADIENT, 4, 0);
    size_t cap = pc_codec_max_bytes(c, n), len;
    uint8_t *msg = malloc(cap);
    assert_int_equal(pc_codec_compress(c, cs, g, 9, msg, cap, &len), PC_OK);
    for (size_t i = 0; i < n; i++)
        dense[i] = (float)i;
    float *dd = dev_alloc(d, sizeof(dense));
    put(d, dd, dense, sizeof(dense));
    char err[256] = "";
    pc_codec_expect_t ex = {.chunk = 2, .n = (uint32_t)n, .iteration = 9};
    /* Wrong chunk, wrong iteration, truncated, an index out of range, a NaN scale. */
    pc_codec_expect_t bad_chunk = ex, bad_it = ex;
    bad_chunk.chunk = 3;
    bad_it.iteration = 10;
    assert_int_equal(
        pc_devcodec_decode_add(d, msg, len, &bad_chunk, 1, dd, NULL, NULL, err, sizeof(err)),
        PC_EFORMAT);
    assert_non_null(strstr(err, "chunk 3"));
    assert_int_equal(
        pc_devcodec_decode_add(d, msg, len, &bad_it, 1, dd, NULL, NULL, err, sizeof(err)),
        PC_EFORMAT);
    assert_int_equal(
        pc_devcodec_decode_add(d, msg, len - 1, &ex, 1, dd, NULL, NULL, err, sizeof(err)),
        PC_EFORMAT);
    uint8_t *evil = malloc(len);
    memcpy(evil, msg, len);
    evil[PC_WIRE_HEADER_BYTES + 3] = 0x7f; /* the first index's high byte */
    assert_int_equal(pc_devcodec_decode_add(d, evil, len, &ex, 1, dd, NULL, NULL, err, sizeof(err)),
                     PC_EFORMAT);
    assert_non_null(strstr(err, "out of range"));
    assert_int_equal(
        pc_devcodec_decode_add(d, msg, len, &ex, NAN, dd, NULL, NULL, err, sizeof(err)),
        PC_EFORMAT);
    assert_int_equal(
        pc_devcodec_decode_add(d, msg, len, &ex, 1, NULL, NULL, NULL, err, sizeof(err)),
        PC_EFORMAT);
    assert_int_equal(
        pc_devcodec_decode_add(NULL, msg, len, &ex, 1, dd, NULL, NULL, err, sizeof(err)),
        PC_EFORMAT);
    get(d, back, dd, sizeof(back));
    assert_memory_equal(back, dense, sizeof(dense));
    /* And the good message is accepted. */
    assert_int_equal(pc_devcodec_decode_add(d, msg, len, &ex, 1, dd, NULL, NULL, err, sizeof(err)),
                     PC_OK);
    free(evil);
    free(msg);
    pc_devcodec_free(d, dd);
    pc_codec_state_destroy(cs);
    pc_devcodec_destroy(d);
    pc_codec_destroy(c);
}

#ifdef PC_TEST_ON_DEVICE
/* cuRAND's device Philox against pc_philox, also at subsequences with a high word. */
static void test_device_philox(void **state)
{
    (void)state;
    const uint64_t subs[] = {0, 1, 65535, ((uint64_t)7 << 32) | 3, ~(uint64_t)0};
    const uint64_t offs[] = {0, 1, 3, 4097, ((uint64_t)1 << 34) + 2};
    char err[256] = "";
    for (size_t s = 0; s < 5; s++)
        for (size_t o = 0; o < 5; o++) {
            int rc = pc_cuda_philox_check(0x0123456789abcdefull + s, subs[s], offs[o], 10000, err,
                                          sizeof(err));
            if (rc != PC_OK)
                fail_msg("%s", err);
        }
}
#endif

int main(void)
{
#ifdef PC_TEST_ON_DEVICE
    if (pc_cuda_device_count() == 0) {
        char why[160];
        pc_cuda_status(why, sizeof(why));
        printf("skipped: no CUDA device (%s): the CUDA codecs did not run\n", why);
        return 77;
    }
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_state_and_call_errors),
        cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_nonfinite),
#ifdef PC_TEST_ON_DEVICE
        cmocka_unit_test(test_device_philox),
#endif
        cmocka_unit_test(test_fold_protocol),
        cmocka_unit_test(test_lowrank_rounds),
        cmocka_unit_test(test_lowrank_errors),
        cmocka_unit_test(test_scratch_reuse),
#if defined(PC_TEST_ON_DEVICE) && defined(PC_HAVE_CUDA)
        cmocka_unit_test(test_own_stream),
#endif
        cmocka_unit_test(test_same_bytes_every_codec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
