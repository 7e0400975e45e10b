/* test_model_cuda: the training engine on CUDA device 0 (cuda/pc_layers.cu, pc_model on a
 * device) against the CPU engine (src/engine/pc_layers.c, pc_model on the CPU), the reference.
 *
 *   layers   each launcher against its pc_layers function on the same inputs: ReLU, max-pool
 *            (values and argmax), dropout (mask and values, the mask drawn from Philox as the
 *            CPU draws it), the softmax's backward, the linear bias gradient of up to 256 rows
 *            and col2im's order give the CPU's bits; the GEMMs within the bound below.
 *   models   mlp, cnn and wide from the same initial weights: the loss, the count correct and
 *            every gradient within the model tolerance below; the hooks in the CPU's order;
 *            pinned batches; the profile.
 *   determinism  two runs (and two models) give bitwise equal results.
 *   files    a device model's file is the CPU model's file, both ways.
 *
 * The GEMM tolerance. A float sum of n products computed in any order (blocked, split, with
 * or without FMA) is within gamma_n = n u / (1 - n u) (u = 2^-24) of the exact value times
 * sum |a_i b_i| (Higham, "Accuracy and Stability of Numerical Algorithms", 3.1); OpenBLAS
 * and cuBLAS sum in different orders, so their results may differ by 2 gamma_n sum |a||b|.
 * Each check computes that bound per element, from the same layer run by the CPU on the
 * absolute values of its inputs (a convolution of |x| by |w| is sum |a||b|), with n the
 * number of products (plus one for the bias). An index or layout bug is off by O(1), far
 * outside it.
 *
 * The model tolerance. Through a network the layers' rounding differences meet the kinks:
 * a ReLU input or two max-pool inputs closer than the rounding difference (about 1e-7
 * relative) route a gradient differently on the two devices. That is rare (well under one
 * decision in 10^5) and moves a tensor's gradient by about one term of its sums, at most
 * about 1% of its norm at the batch sizes here; so each gradient must be within 2% of the
 * CPU's in the L2 norm (an indexing bug is ~100%), the loss within 1e-4 relative, the count
 * correct equal. The largest difference seen is printed.
 *
 * Without a usable device (or without CUDA) this program exits 77, skipped; the part that
 * runs everywhere (PC_ENODEV from pc_model_create_on, the CPU model's new calls) is in
 * tests/unit/test_model.c. */
#include "config.h"

#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_data.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_layers.h"
#include "pipecompress/pc_model.h"
#include "pipecompress/pc_philox.h"

#include "../../cuda/pc_cuda_err.h"
#include "../../src/gpu/gpu_mem.h"
#include "../../cuda/pc_layers_cuda.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static pc_cuda_engine_t *eng; /* device 0's engine for the layer tests (set in main) */

static void rnd(float *x, size_t n, uint64_t s, float scale)
{
    pc_philox_t g;
    pc_philox_init(&g, 77, s, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (2 * pc_philox_uniform(pc_philox_next(&g)) - 1) * scale;
}

static float *host(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    assert_non_null(p);
    return p;
}

static void ok(int code, const char *what)
{
    if (code) {
        char msg[256];
        pc_cuda_err_fail(code, pc_cuda_engine_error(eng), msg, sizeof(msg), "%s", what);
        fail_msg("%s", msg);
    }
}

/* Copies on the engine's stream through pc_gpu's wrapper (gpu_mem.h): to the device queued,
 * to the host waited for (so also the check of the kernels before it). */
static int copy(void *dst, const void *src, size_t bytes, bool to_dev)
{
    char msg[256];
    int rc = pc_gpu__copy(0, dst, src, bytes, to_dev, pc_cuda_engine_stream(eng), !to_dev, msg,
                          sizeof(msg));
    if (rc != PC_OK)
        fail_msg("%s", msg);
    return rc;
}

static int to_device(void *d, const void *h, size_t bytes)
{
    return copy(d, h, bytes, true);
}

static int to_host(void *h, const void *d, size_t bytes)
{
    return copy(h, d, bytes, false);
}

static void *dev(size_t bytes)
{
    void *p = NULL;
    char msg[256];
    if (pc_gpu__alloc(0, bytes, true, &p, msg, sizeof(msg)) != PC_OK)
        fail_msg("%s", msg);
    return p;
}

/* A device copy of n floats of h. */
static float *up(const float *h, size_t n)
{
    float *d = dev(n * sizeof(float));
    to_device(d, h, n * sizeof(float));
    return d;
}

/* n floats of d into a new host array (waits for the stream, so also checks the kernels). */
static float *down(const float *d, size_t n)
{
    float *h = host(n);
    to_host(h, d, n * sizeof(float));
    return h;
}

static void absv(float *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = fabsf(src[i]);
}

/* got within 2 gamma_n |a||b| of want, element by element (see the file's comment); absref
 * holds the CPU's sum |a||b| per element, nterms the number of products n. */
static void near_gemm(const char *what, const float *got, const float *want, const float *absref,
                      size_t len, double nterms)
{
    double u = ldexp(1.0, -24), gamma = nterms * u / (1 - nterms * u);
    double worst = 0;
    for (size_t i = 0; i < len; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        double bound = 2 * gamma * (double)absref[i] * 1.01 + 1e-30;
        if (!(d <= bound))
            fail_msg("%s[%zu]: device %.9g, CPU %.9g, difference %.3g over the bound %.3g", what, i,
                     got[i], want[i], d, bound);
        if (absref[i] > 0 && d / (2 * gamma * absref[i]) > worst)
            worst = d / (2 * gamma * absref[i]);
    }
    printf("  %-34s %8zu values within the bound; largest difference %.3f of it\n", what, len,
           worst);
}

static void same_bits(const char *what, const void *got, const void *want, size_t bytes)
{
    if (memcmp(got, want, bytes) != 0) {
        const uint8_t *a = got, *b = want;
        size_t i = 0;
        while (a[i] == b[i])
            i++;
        fail_msg("%s: byte %zu of %zu differs (device %u, CPU %u)", what, i, bytes, a[i], b[i]);
    }
}

/* ---- layers ------------------------------------------------------------------------------- */

static void linear_case(int B, int C, int OC, uint64_t seed)
{
    float *x = host((size_t)B * C), *w = host((size_t)OC * C), *b = host(OC);
    float *dout = host((size_t)B * OC);
    rnd(x, (size_t)B * C, seed, 1);
    rnd(w, (size_t)OC * C, seed + 1, 0.1f);
    rnd(b, OC, seed + 2, 0.5f);
    rnd(dout, (size_t)B * OC, seed + 3, 1);
    /* The CPU's results, and on the absolute values the bounds' sums. */
    float *out = host((size_t)B * OC), *dx = host((size_t)B * C), *dw = host((size_t)OC * C),
          *db = host(OC);
    pc_linear_forward(out, x, w, b, B, C, OC);
    pc_linear_backward(dx, dw, db, dout, x, w, B, C, OC);
    float *ax = host((size_t)B * C), *aw = host((size_t)OC * C), *ab = host(OC),
          *adout = host((size_t)B * OC);
    absv(ax, x, (size_t)B * C);
    absv(aw, w, (size_t)OC * C);
    absv(ab, b, OC);
    absv(adout, dout, (size_t)B * OC);
    float *aout = host((size_t)B * OC), *adx = host((size_t)B * C), *adw = host((size_t)OC * C),
          *adb = host(OC);
    pc_linear_forward(aout, ax, aw, ab, B, C, OC);
    pc_linear_backward(adx, adw, adb, adout, ax, aw, B, C, OC);
    /* The device's. */
    float *d_x = up(x, (size_t)B * C), *d_w = up(w, (size_t)OC * C), *d_b = up(b, OC);
    float *d_dout = up(dout, (size_t)B * OC), *d_out = dev(sizeof(float) * B * OC);
    float *d_dx = dev(sizeof(float) * B * C), *d_dw = dev(sizeof(float) * OC * C),
          *d_db = dev(sizeof(float) * OC);
    ok(pc_cuda_linear_forward(eng, d_out, d_x, d_w, d_b, B, C, OC), "linear forward");
    ok(pc_cuda_linear_backward(eng, d_dx, d_dw, d_db, d_dout, d_x, d_w, B, C, OC),
       "linear backward");
    float *g_out = down(d_out, (size_t)B * OC), *g_dx = down(d_dx, (size_t)B * C),
          *g_dw = down(d_dw, (size_t)OC * C), *g_db = down(d_db, OC);
    char what[64];
    printf(" linear B=%d C=%d OC=%d\n", B, C, OC);
    near_gemm("out", g_out, out, aout, (size_t)B * OC, C + 1);
    near_gemm("dinp", g_dx, dx, adx, (size_t)B * C, OC);
    near_gemm("dweight", g_dw, dw, adw, (size_t)OC * C, B);
    near_gemm("dbias", g_db, db, adb, OC, B);
    snprintf(what, sizeof(what), "linear dbias (B=%d <= 256: the CPU's order)", B);
    if (B <= 256)
        same_bits(what, g_db, db, sizeof(float) * OC);
    /* dinp NULL: the first layer's backward leaves it alone and still gives the rest. */
    ok(pc_cuda_linear_backward(eng, NULL, d_dw, d_db, d_dout, d_x, d_w, B, C, OC),
       "linear backward without dinp");
    float *g_dw2 = down(d_dw, (size_t)OC * C);
    same_bits("linear dweight without dinp", g_dw2, g_dw, sizeof(float) * OC * C);
    float *all[] = {x,     w,    b,   dout, out, dx,    dw,   db,   ax,   aw,   ab,
                    adout, aout, adx, adw,  adb, g_out, g_dx, g_dw, g_db, g_dw2};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        free(all[i]);
    float *devs[] = {d_x, d_w, d_b, d_dout, d_out, d_dx, d_dw, d_db};
    for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++)
        pc_gpu__free(0, devs[i]);
}

static void test_linear(void **state)
{
    (void)state;
    linear_case(37, 300, 129, 1);
    linear_case(600, 64, 33, 11); /* over 256 rows: the split bias sum */
    linear_case(1, 1, 1, 21);
    linear_case(4, 3136, 1024, 31); /* the cnn's fc1 */
    /* Bad sizes are refused, not launched. */
    assert_int_not_equal(pc_cuda_linear_forward(eng, NULL, NULL, NULL, NULL, 0, 1, 1), 0);
}

static void conv_case(int B, int C, int H, int W, int OC, int K, int chunk, uint64_t seed)
{
    size_t nin = (size_t)B * C * H * W, nout = (size_t)B * OC * H * W, nw = (size_t)OC * C * K * K;
    size_t ncol = (size_t)C * K * K * H * W;
    float *x = host(nin), *w = host(nw), *b = host(OC), *dout = host(nout);
    rnd(x, nin, seed, 1);
    rnd(w, nw, seed + 1, 0.2f);
    rnd(b, OC, seed + 2, 0.5f);
    rnd(dout, nout, seed + 3, 1);
    float *col = host(ncol), *dcol = host(ncol);
    float *out = host(nout), *dx = host(nin), *dw = host(nw), *db = host(OC);
    pc_conv2d_forward(out, col, x, w, b, B, C, H, W, OC, K);
    pc_conv2d_backward(dx, dw, db, col, dcol, dout, x, w, B, C, H, W, OC, K);
    float *ax = host(nin), *aw = host(nw), *ab = host(OC), *adout = host(nout);
    absv(ax, x, nin);
    absv(aw, w, nw);
    absv(ab, b, OC);
    absv(adout, dout, nout);
    float *aout = host(nout), *adx = host(nin), *adw = host(nw), *adb = host(OC);
    pc_conv2d_forward(aout, col, ax, aw, ab, B, C, H, W, OC, K);
    pc_conv2d_backward(adx, adw, adb, col, dcol, adout, ax, aw, B, C, H, W, OC, K);

    size_t dcolf = pc_cuda_conv2d_col_floats(C, H, W, K) * (size_t)chunk;
    size_t dtmpf = pc_cuda_conv2d_tmp_floats(H, W, OC) * (size_t)chunk;
    float *d_x = up(x, nin), *d_w = up(w, nw), *d_b = up(b, OC), *d_dout = up(dout, nout);
    float *d_out = dev(sizeof(float) * nout), *d_dx = dev(sizeof(float) * nin);
    float *d_dw = dev(sizeof(float) * nw), *d_db = dev(sizeof(float) * OC);
    float *d_col = dev(sizeof(float) * dcolf), *d_tmp = dev(sizeof(float) * dtmpf);
    ok(pc_cuda_conv2d_forward(eng, d_out, d_col, d_tmp, d_x, d_w, d_b, B, C, H, W, OC, K, chunk),
       "conv forward");
    ok(pc_cuda_conv2d_backward(eng, d_dx, d_dw, d_db, d_col, d_tmp, d_dout, d_x, d_w, B, C, H, W,
                               OC, K, chunk),
       "conv backward");
    float *g_out = down(d_out, nout), *g_dx = down(d_dx, nin), *g_dw = down(d_dw, nw),
          *g_db = down(d_db, OC);
    printf(" conv2d B=%d C=%d H=%d W=%d OC=%d K=%d, %d images per im2col\n", B, C, H, W, OC, K,
           chunk);
    near_gemm("out", g_out, out, aout, nout, (double)C * K * K + 1);
    near_gemm("dinp", g_dx, dx, adx, nin, (double)OC * K * K);
    near_gemm("dweight", g_dw, dw, adw, nw, (double)B * H * W);
    near_gemm("dbias", g_db, db, adb, OC, (double)B * H * W);
    /* Without dinp (a first layer): the same weight and bias gradients, bit for bit. */
    float *d_dw2 = dev(sizeof(float) * nw), *d_db2 = dev(sizeof(float) * OC);
    ok(pc_cuda_conv2d_backward(eng, NULL, d_dw2, d_db2, d_col, d_tmp, d_dout, d_x, d_w, B, C, H, W,
                               OC, K, chunk),
       "conv backward without dinp");
    float *g_dw2 = down(d_dw2, nw), *g_db2 = down(d_db2, OC);
    same_bits("conv dweight without dinp", g_dw2, g_dw, sizeof(float) * nw);
    same_bits("conv dbias without dinp", g_db2, g_db, sizeof(float) * OC);
    float *all[] = {x,  w,     b,    dout, col, dcol, out,   dx,   dw,   db,   ax,    aw,
                    ab, adout, aout, adx,  adw, adb,  g_out, g_dx, g_dw, g_db, g_dw2, g_db2};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        free(all[i]);
    float *devs[] = {d_x, d_w, d_b, d_dout, d_out, d_dx, d_dw, d_db, d_col, d_tmp, d_dw2, d_db2};
    for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++)
        pc_gpu__free(0, devs[i]);
}

static void test_conv2d(void **state)
{
    (void)state;
    conv_case(5, 3, 12, 10, 7, 5, 2, 41);   /* chunks of 2, 2 and 1 images */
    conv_case(5, 3, 12, 10, 7, 5, 5, 41);   /* one chunk */
    conv_case(4, 1, 28, 28, 32, 5, 4, 51);  /* the cnn's conv1 */
    conv_case(3, 32, 14, 14, 64, 5, 2, 61); /* the cnn's conv2 */
    conv_case(2, 2, 5, 7, 3, 3, 1, 71);     /* K = 3, one image at a time */
    conv_case(1, 1, 1, 1, 1, 5, 1, 81);     /* a pixel: all but the centre is padding */
}

/* Values from a small set (ties in most windows), some negative, some -0. */
static void tie_values(float *x, size_t n, uint64_t seed)
{
    pc_philox_t g;
    pc_philox_init(&g, 5, seed, 0);
    for (size_t i = 0; i < n; i++) {
        uint32_t r = pc_philox_next(&g);
        x[i] = (r % 7 == 0) ? -0.0f : 0.25f * (float)((int)(r % 5) - 2);
    }
}

static void test_maxpool_relu(void **state)
{
    (void)state;
    const int shapes[][4] = {{3, 5, 8, 6}, {2, 64, 14, 14}, {1, 1, 2, 2}, {2, 3, 7, 9}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int B = shapes[s][0], C = shapes[s][1], H = shapes[s][2], W = shapes[s][3];
        size_t nin = (size_t)B * C * H * W, nout = (size_t)B * C * (H / 2) * (W / 2);
        float *x = host(nin), *dout = host(nout), *out = host(nout), *dx = host(nin);
        int32_t *arg = malloc(sizeof(int32_t) * nout), *g_arg = malloc(sizeof(int32_t) * nout);
        assert_true(arg && g_arg);
        tie_values(x, nin, s);
        rnd(dout, nout, 100 + s, 1);
        dout[0] = -0.0f;
        pc_maxpool_forward(out, arg, x, B, C, H, W);
        pc_maxpool_backward(dx, dout, arg, B, C, H, W);
        float *d_x = up(x, nin), *d_dout = up(dout, nout), *d_out = dev(sizeof(float) * nout);
        float *d_dx = dev(sizeof(float) * nin);
        int32_t *d_arg = dev(sizeof(int32_t) * nout);
        ok(pc_cuda_maxpool_forward(eng, d_out, d_arg, d_x, B, C, H, W), "maxpool forward");
        ok(pc_cuda_maxpool_backward(eng, d_dx, d_dout, d_arg, B, C, H, W), "maxpool backward");
        float *g_out = down(d_out, nout), *g_dx = down(d_dx, nin);
        ok(to_host(g_arg, d_arg, sizeof(int32_t) * nout), "argmax back");
        same_bits("maxpool out", g_out, out, sizeof(float) * nout);
        same_bits("maxpool argmax (ties: the first)", g_arg, arg, sizeof(int32_t) * nout);
        same_bits("maxpool dinp", g_dx, dx, sizeof(float) * nin);
        /* ReLU on the same values (zeros, -0, negatives), in place on the device too. */
        float *r = host(nin), *dr = host(nin);
        float *dout_in = host(nin);
        rnd(dout_in, nin, 200 + s, 1);
        pc_relu_forward(r, x, nin);
        pc_relu_backward(dr, dout_in, r, nin);
        float *d_r = up(x, nin), *d_g = up(dout_in, nin);
        ok(pc_cuda_relu_forward(eng, d_r, d_r, nin), "relu forward in place");
        ok(pc_cuda_relu_backward(eng, d_g, d_g, d_r, nin), "relu backward in place");
        float *g_r = down(d_r, nin), *g_dr = down(d_g, nin);
        same_bits("relu out", g_r, r, sizeof(float) * nin);
        same_bits("relu dinp", g_dr, dr, sizeof(float) * nin);
        float *all[] = {x, dout, out, dx, g_out, g_dx, r, dr, dout_in, g_r, g_dr};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            free(all[i]);
        free(arg);
        free(g_arg);
        void *devs[] = {d_x, d_dout, d_out, d_dx, d_arg, d_r, d_g};
        for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++)
            pc_gpu__free(0, devs[i]);
    }
}

static void test_dropout(void **state)
{
    (void)state;
    const struct {
        size_t n;
        float p;
        uint64_t seed, stream;
    } cases[] = {
        {1000003, 0.5f, 1, 3 * 16 + 8},                             /* the model's stream layout */
        {4099, 0.1f, 0x0123456789abcdefull, 0xfedcba9876543210ull}, /* 64-bit seed, stream */
        {5, 0.9f, 42, 0},
        {1, 0.5f, 7, 7},
        {1000, 0.0f, 1, 1}, /* p = 0: a copy, every mask byte 1 */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t n = cases[c].n;
        float p = cases[c].p;
        float *x = host(n), *out = host(n), *dout = host(n), *dx = host(n);
        uint8_t *mask = malloc(n), *g_mask = malloc(n);
        assert_true(mask && g_mask);
        rnd(x, n, 300 + c, 1);
        rnd(dout, n, 400 + c, 1);
        pc_dropout_forward(out, mask, x, n, p, cases[c].seed, cases[c].stream);
        pc_dropout_backward(dx, dout, mask, n, p);
        float *d_x = up(x, n), *d_out = dev(sizeof(float) * n), *d_dout = up(dout, n);
        float *d_dx = dev(sizeof(float) * n);
        uint8_t *d_mask = dev(n);
        ok(pc_cuda_dropout_forward(eng, d_out, d_mask, d_x, n, p, cases[c].seed, cases[c].stream),
           "dropout forward");
        ok(pc_cuda_dropout_backward(eng, d_dx, d_dout, d_mask, n, p), "dropout backward");
        float *g_out = down(d_out, n), *g_dx = down(d_dx, n);
        ok(to_host(g_mask, d_mask, n), "mask back");
        char what[96];
        snprintf(what, sizeof(what), "dropout mask, n=%zu p=%g", n, (double)p);
        same_bits(what, g_mask, mask, n);
        same_bits("dropout out", g_out, out, sizeof(float) * n);
        same_bits("dropout dinp", g_dx, dx, sizeof(float) * n);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++)
            kept += mask[i];
        if (n > 1000)
            assert_true(fabs((double)kept / (double)n - (1 - p)) < 0.02);
        float *all[] = {x, out, dout, dx, g_out, g_dx};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            free(all[i]);
        free(mask);
        free(g_mask);
        void *devs[] = {d_x, d_out, d_dout, d_dx, d_mask};
        for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++)
            pc_gpu__free(0, devs[i]);
    }
}

static void test_softmax_xent(void **state)
{
    (void)state;
    const int shapes[][2] = {{50, 10}, {7, 1000}, {1, 2}, {300, 10}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int B = shapes[s][0], V = shapes[s][1];
        size_t n = (size_t)B * V;
        float *logits = host(n), *probs = host(n), *dl = host(n);
        uint8_t *labels = malloc((size_t)B);
        assert_non_null(labels);
        rnd(logits, n, 500 + s, 8);
        pc_philox_t g;
        pc_philox_init(&g, 9, s, 0);
        for (int b = 0; b < B; b++)
            labels[b] = (uint8_t)(pc_philox_next(&g) % (uint32_t)(V < 256 ? V : 256));
        int correct = -1;
        float loss = pc_softmax_xent_forward(probs, &correct, logits, labels, B, V);
        pc_softmax_xent_backward(dl, probs, labels, B, V);
        float *d_logits = up(logits, n), *d_probs = dev(sizeof(float) * n);
        float *d_dl = dev(sizeof(float) * n);
        uint8_t *d_labels = dev((size_t)B);
        void *rows = dev(pc_cuda_softmax_rows_bytes(B));
        ok(to_device(d_labels, labels, (size_t)B), "labels");
        ok(pc_cuda_softmax_xent_forward(eng, d_probs, rows, d_logits, d_labels, B, V),
           "softmax forward");
        float g_loss = -1;
        int g_correct = -1;
        ok(pc_cuda_softmax_xent_result(eng, &g_loss, &g_correct), "softmax result");
        float *g_probs = down(d_probs, n);
        /* expf is within 2 ulp on the device, 1 in glibc: the exponentials differ by 3 ulp at
         * most, their double sum by as much relatively, the rounded quotients by 7 ulp; 16
         * leaves room. The rest of the arithmetic is the CPU's. */
        for (size_t i = 0; i < n; i++)
            if (!(fabsf(g_probs[i] - probs[i]) <= 16 * FLT_EPSILON * probs[i] + 1e-37f))
                fail_msg("probs[%zu]: device %.9g, CPU %.9g", i, g_probs[i], probs[i]);
        if (!(fabs((double)g_loss - loss) <= 1e-5 * fabs(loss) + 1e-7))
            fail_msg("loss B=%d V=%d: device %.9g, CPU %.9g", B, V, g_loss, loss);
        assert_int_equal(g_correct, correct);
        /* The backward from the CPU's probabilities: the CPU's bits. */
        ok(to_device(d_probs, probs, sizeof(float) * n), "probs");
        ok(pc_cuda_softmax_xent_backward(eng, d_dl, d_probs, d_labels, B, V), "softmax backward");
        float *g_dl = down(d_dl, n);
        same_bits("softmax backward", g_dl, dl, sizeof(float) * n);
        float *all[] = {logits, probs, dl, g_probs, g_dl};
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            free(all[i]);
        free(labels);
        void *devs[] = {d_logits, d_probs, d_dl, d_labels, rows};
        for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++)
            pc_gpu__free(0, devs[i]);
    }
}

/* ---- whole models --------------------------------------------------------------------------- */

/* Every call of the hooks, as (kind, tensor) pairs: kind 'w' param_wait, 'r' grad_ready. */
typedef struct trace {
    char kind[256];
    int tensor[256];
    int n;
} trace_t;

static int trace_wait(void *ud, int t)
{
    trace_t *tr = ud;
    if (tr->n < 256) {
        tr->kind[tr->n] = 'w';
        tr->tensor[tr->n++] = t;
    }
    return PC_OK;
}

static int trace_ready(void *ud, int t)
{
    trace_t *tr = ud;
    if (tr->n < 256) {
        tr->kind[tr->n] = 'r';
        tr->tensor[tr->n++] = t;
    }
    return PC_OK;
}

static pc_model_t *device_model(pc_model_kind_t kind, int B, const pc_dataset_t *ds, uint64_t seed)
{
    pc_model_t *m = NULL;
    char err[256];
    int rc = pc_model_create_on(kind, B, 1, (int)ds->rows, (int)ds->cols, ds->classes, 0.5f, 0, &m,
                                err, sizeof(err));
    if (rc != PC_OK)
        fail_msg("pc_model_create_on(%s, device 0): %s", pc_model_kind_name(kind), err);
    assert_int_equal(pc_model_device(m), 0);
    assert_non_null(pc_model_stream(m));
    assert_int_equal(pc_model_init(m, seed), PC_OK);
    return m;
}

/* The model's gradients (all nparams) on the host. */
static float *grads_of(pc_model_t *m)
{
    float *g = host(pc_model_nparams(m));
    if (pc_model_grads_get(m, g) != PC_OK)
        fail_msg("grads_get: %s", pc_model_error(m));
    return g;
}

static void test_models_against_cpu(void **state)
{
    (void)state;
    const struct {
        pc_model_kind_t kind;
        int B;
    } cases[] = {{PC_MODEL_MLP, 16}, {PC_MODEL_CNN, 8}, {PC_MODEL_WIDE, 4}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int B = cases[c].B;
        pc_dataset_t ds;
        assert_int_equal(pc_data_synthetic((uint32_t)B, 3 + c, 0, &ds), PC_OK);
        pc_model_t *cpu;
        assert_int_equal(pc_model_create(cases[c].kind, B, 1, (int)ds.rows, (int)ds.cols,
                                         ds.classes, 0.5f, &cpu),
                         PC_OK);
        assert_int_equal(pc_model_init(cpu, 5), PC_OK);
        pc_model_t *gpu = device_model(cases[c].kind, B, &ds, 5);
        size_t np = pc_model_nparams(cpu);
        /* The same initial weights: computed on the host, copied. */
        float *p = host(np);
        assert_int_equal(pc_model_params_get(gpu, p), PC_OK);
        same_bits("initial parameters", p, pc_model_params(cpu), sizeof(float) * np);
        /* Train-mode forward and backward (dropout on in the cnn: the same masks). */
        trace_t tc = {.n = 0}, tg = {.n = 0};
        pc_model_hooks_t hc = {.ud = &tc, .param_wait = trace_wait, .grad_ready = trace_ready};
        pc_model_hooks_t hg = {.ud = &tg, .param_wait = trace_wait, .grad_ready = trace_ready};
        float lc, lg;
        int cc, cg;
        assert_int_equal(pc_model_forward(cpu, ds.images, ds.labels, B, true, 1, 3, &hc, &lc, &cc),
                         PC_OK);
        if (pc_model_forward(gpu, ds.images, ds.labels, B, true, 1, 3, &hg, &lg, &cg) != PC_OK)
            fail_msg("device forward: %s", pc_model_error(gpu));
        assert_int_equal(pc_model_backward(cpu, ds.labels, B, &hc), PC_OK);
        if (pc_model_backward(gpu, ds.labels, B, &hg) != PC_OK)
            fail_msg("device backward: %s", pc_model_error(gpu));
        assert_int_equal(tg.n, tc.n);
        assert_memory_equal(tg.kind, tc.kind, (size_t)tc.n);
        assert_memory_equal(tg.tensor, tc.tensor, sizeof(int) * (size_t)tc.n);
        printf(" %s, batch %d: loss device %.7f CPU %.7f, correct %d %d\n",
               pc_model_kind_name(cases[c].kind), B, lg, lc, cg, cc);
        if (!(fabs((double)lg - lc) <= 1e-4 * fabs(lc)))
            fail_msg("loss: device %.9g, CPU %.9g", lg, lc);
        assert_int_equal(cg, cc);
        float *g = grads_of(gpu);
        for (int t = 0; t < pc_model_ntensors(cpu); t++) {
            size_t n = pc_model_tensor_size(cpu, t);
            const float *want = pc_model_tensor_grad(cpu, t);
            const float *got = g + (pc_model_tensor_grad(cpu, t) - pc_model_tensor_grad(cpu, 0));
            double d2 = 0, r2 = 0;
            for (size_t i = 0; i < n; i++) {
                double d = (double)got[i] - want[i];
                d2 += d * d;
                r2 += (double)want[i] * want[i];
            }
            double rel = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
            printf("  %-14s %9zu gradients: L2 difference %.2e of the CPU's\n",
                   pc_model_tensor_name(cpu, t), n, rel);
            if (!(rel <= 2e-2))
                fail_msg("%s gradient: relative L2 difference %.3g", pc_model_tensor_name(cpu, t),
                         rel);
        }
        /* Evaluation mode (no dropout), no hooks. */
        assert_int_equal(
            pc_model_forward(cpu, ds.images, ds.labels, B, false, 0, 0, NULL, &lc, &cc), PC_OK);
        assert_int_equal(
            pc_model_forward(gpu, ds.images, ds.labels, B, false, 0, 0, NULL, &lg, &cg), PC_OK);
        if (!(fabs((double)lg - lc) <= 1e-4 * fabs(lc)))
            fail_msg("eval loss: device %.9g, CPU %.9g", lg, lc);
        assert_int_equal(cg, cc);
        free(p);
        free(g);
        pc_model_destroy(cpu);
        pc_model_destroy(gpu);
        pc_data_free(&ds);
    }
}

/* One training pass on m from pinned copies of the batch, loss and correct not asked (no
 * wait inside), then a sync; the gradients on the host. */
static float *pinned_pass(pc_model_t *m, const pc_dataset_t *ds, int B)
{
    size_t in = (size_t)ds->rows * ds->cols * (size_t)B;
    float *x;
    uint8_t *y;
    assert_int_equal(pc_model_host_alloc(m, in * sizeof(float), (void **)&x), PC_OK);
    assert_int_equal(pc_model_host_alloc(m, (size_t)B, (void **)&y), PC_OK);
    memcpy(x, ds->images, in * sizeof(float));
    memcpy(y, ds->labels, (size_t)B);
    assert_int_equal(pc_model_forward(m, x, y, B, true, 9, 4, NULL, NULL, NULL), PC_OK);
    assert_int_equal(pc_model_backward(m, y, B, NULL), PC_OK);
    assert_int_equal(pc_model_sync(m), PC_OK);
    pc_model_host_free(m, x);
    pc_model_host_free(m, y);
    return grads_of(m);
}

static void test_determinism(void **state)
{
    (void)state;
    enum { B = 32 };
    pc_dataset_t ds;
    assert_int_equal(pc_data_synthetic(B, 13, 0, &ds), PC_OK);
    for (int kind = PC_MODEL_MLP; kind <= PC_MODEL_CNN; kind++) {
        pc_model_t *a = device_model((pc_model_kind_t)kind, B, &ds, 8);
        pc_model_t *b = device_model((pc_model_kind_t)kind, B, &ds, 8);
        size_t np = pc_model_nparams(a);
        float *g1 = pinned_pass(a, &ds, B), *g2 = pinned_pass(a, &ds, B),
              *g3 = pinned_pass(b, &ds, B);
        same_bits("gradients, the same model twice", g2, g1, sizeof(float) * np);
        same_bits("gradients, two models", g3, g1, sizeof(float) * np);
        float l1, l2;
        int c1, c2;
        assert_int_equal(pc_model_forward(a, ds.images, ds.labels, B, true, 9, 4, NULL, &l1, &c1),
                         PC_OK);
        assert_int_equal(pc_model_forward(b, ds.images, ds.labels, B, true, 9, 4, NULL, &l2, &c2),
                         PC_OK);
        same_bits("loss, two models", &l1, &l2, sizeof(float));
        assert_int_equal(c1, c2);
        /* A smaller batch on the same model: its own results, the same each time. */
        assert_int_equal(pc_model_forward(a, ds.images, ds.labels, 5, true, 9, 4, NULL, &l1, &c1),
                         PC_OK);
        assert_int_equal(pc_model_forward(b, ds.images, ds.labels, 5, true, 9, 4, NULL, &l2, &c2),
                         PC_OK);
        same_bits("loss, batch 5", &l1, &l2, sizeof(float));
        assert_int_equal(
            pc_model_forward(a, ds.images, ds.labels, B + 1, true, 9, 4, NULL, &l1, &c1),
            PC_EINVAL);
        free(g1);
        free(g2);
        free(g3);
        pc_model_destroy(a);
        pc_model_destroy(b);
    }
    pc_data_free(&ds);
}

static void test_profile_on_device(void **state)
{
    (void)state;
    enum { B = 8 };
    pc_dataset_t ds;
    assert_int_equal(pc_data_synthetic(B, 3, 0, &ds), PC_OK);
    pc_model_t *m = device_model(PC_MODEL_CNN, B, &ds, 5),
               *ref = device_model(PC_MODEL_CNN, B, &ds, 5);
    pc_cost_layer_t layers[8];
    int nl = 0, tl[16];
    assert_int_equal(pc_model_profile(m, ds.images, ds.labels, B, 2, layers, 8, &nl, tl), PC_OK);
    assert_int_equal(nl, 4);
    for (int l = 0; l < nl; l++)
        assert_true(layers[l].fwd > 0 && layers[l].bwd > 0 && isfinite(layers[l].fwd) &&
                    isfinite(layers[l].bwd));
    /* The gradients of its last pass (seed 1, noise = reps), as a plain pass gives. */
    float loss;
    int ok_;
    assert_int_equal(pc_model_forward(ref, ds.images, ds.labels, B, true, 1, 2, NULL, &loss, &ok_),
                     PC_OK);
    assert_int_equal(pc_model_backward(ref, ds.labels, B, NULL), PC_OK);
    float *g1 = grads_of(m), *g2 = grads_of(ref);
    same_bits("profile's gradients", g1, g2, sizeof(float) * pc_model_nparams(m));
    free(g1);
    free(g2);
    pc_model_destroy(m);
    pc_model_destroy(ref);
    pc_data_free(&ds);
}

static void test_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/pc-test-model-cuda-XXXXXX", a[128], b[128], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(a, sizeof(a), "%s/gpu.pcm", dir);
    snprintf(b, sizeof(b), "%s/cpu.pcm", dir);
    pc_dataset_t ds;
    assert_int_equal(pc_data_synthetic(4, 1, 0, &ds), PC_OK);
    pc_model_t *gpu = device_model(PC_MODEL_CNN, 4, &ds, 21),
               *gpu2 = device_model(PC_MODEL_CNN, 4, &ds, 22);
    pc_model_t *cpu;
    assert_int_equal(
        pc_model_create(PC_MODEL_CNN, 4, 1, (int)ds.rows, (int)ds.cols, ds.classes, 0.5f, &cpu),
        PC_OK);
    assert_int_equal(pc_model_init(cpu, 23), PC_OK);
    size_t np = pc_model_nparams(cpu);
    float *p = host(np), *q = host(np);
    /* Device -> file -> CPU model: the device's parameters. */
    if (pc_model_save(gpu, a, err, sizeof(err)) != PC_OK)
        fail_msg("save: %s", err);
    if (pc_model_load(cpu, a, err, sizeof(err)) != PC_OK)
        fail_msg("load: %s", err);
    assert_int_equal(pc_model_params_get(gpu, p), PC_OK);
    same_bits("device -> file -> CPU", pc_model_params(cpu), p, sizeof(float) * np);
    /* CPU -> file -> another device model; and the files are the same bytes. */
    if (pc_model_save(cpu, b, err, sizeof(err)) != PC_OK)
        fail_msg("save: %s", err);
    if (pc_model_load(gpu2, b, err, sizeof(err)) != PC_OK)
        fail_msg("load: %s", err);
    assert_int_equal(pc_model_params_get(gpu2, q), PC_OK);
    same_bits("CPU -> file -> device", q, p, sizeof(float) * np);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "cmp -s %s %s", a, b);
    assert_int_equal(system(cmd), 0);
    /* params_set then get: the same bits. */
    for (size_t i = 0; i < np; i++)
        p[i] = (float)i * 0.5f - 3;
    assert_int_equal(pc_model_params_set(gpu2, p), PC_OK);
    assert_int_equal(pc_model_params_get(gpu2, q), PC_OK);
    same_bits("params_set/get", q, p, sizeof(float) * np);
    /* A rejected file leaves the device model as it was. */
    FILE *f = fopen(b, "r+b");
    assert_non_null(f);
    fseek(f, 100, SEEK_SET);
    fputc(0x55 ^ fgetc(f), f);
    fclose(f);
    assert_int_equal(pc_model_load(gpu2, b, err, sizeof(err)), PC_EFORMAT);
    assert_int_equal(pc_model_params_get(gpu2, q), PC_OK);
    same_bits("a rejected load", q, p, sizeof(float) * np);
    free(p);
    free(q);
    pc_model_destroy(gpu);
    pc_model_destroy(gpu2);
    pc_model_destroy(cpu);
    pc_data_free(&ds);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_create_errors(void **state)
{
    (void)state;
    pc_model_t *m = NULL;
    char err[256] = "";
    int n = pc_cuda_device_count();
    assert_int_equal(pc_model_create_on(PC_MODEL_MLP, 4, 1, 28, 28, 10, 0, n, &m, err, sizeof(err)),
                     PC_ENODEV);
    assert_non_null(strstr(err, "no CUDA device"));
    assert_int_equal(pc_model_create_on(PC_MODEL_CNN, 4, 1, 6, 6, 10, 0, 0, &m, err, sizeof(err)),
                     PC_EINVAL);
    assert_int_equal(pc_model_create_on(PC_MODEL_MLP, 0, 1, 28, 28, 10, 0, 0, &m, err, sizeof(err)),
                     PC_EINVAL);
    assert_null(m);
}

int main(void)
{
    char why[160];
    if (pc_cuda_status(why, sizeof(why)) == 0) {
        printf("skipped: no usable CUDA device (%s): the engine on CUDA did not run\n", why);
        return 77;
    }
    pc_cuda_err_t cuerr = {0};
    int code = pc_cuda_engine_create(0, &eng, &cuerr);
    if (code) {
        char msg[256];
        pc_cuda_err_fail(code, &cuerr, msg, sizeof(msg), "CUDA device 0");
        printf("%s\n", msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear),       cmocka_unit_test(test_conv2d),
        cmocka_unit_test(test_maxpool_relu), cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_softmax_xent), cmocka_unit_test(test_models_against_cpu),
        cmocka_unit_test(test_determinism),  cmocka_unit_test(test_profile_on_device),
        cmocka_unit_test(test_files),        cmocka_unit_test(test_create_errors),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    pc_cuda_engine_destroy(eng);
    return failed ? 1 : 0;
}
