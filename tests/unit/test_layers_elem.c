/* test_layers_elem: the engine kernels' per-element functions (cuda/layers_elem.h),
 * compiled by gcc and run over whole tensors in the kernels' order, against the CPU layers
 * (pc_layers.c, the reference): ReLU, dropout (mask from the same Philox draws), 2x2 max
 * pooling and softmax cross-entropy's gradient, bit for bit. What the device adds (launch
 * geometry, cuRAND's block of four draws, cuBLAS) runs only where a GPU is (test_model_cuda). */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_layers.h"
#include "pipecompress/pc_philox.h"

#include "../../cuda/codec_elem.h" /* pc_elem_draw */
#include "../../cuda/layers_elem.h"

static float *values(size_t n, uint64_t seed)
{
    float *x = malloc(n * sizeof(float));
    assert_non_null(x);
    pc_philox_t g;
    pc_philox_init(&g, seed, 5, 0);
    for (size_t i = 0; i < n; i++) {
        uint32_t d = pc_philox_next(&g);
        /* some exact zeros, negative zeros and ties for the comparisons */
        x[i] = d % 13 == 0 ? 0.0f : d % 17 == 0 ? -0.0f : (float)((int)(d % 41) - 20) / 8.0f;
    }
    return x;
}

static void assert_bits_equal(const float *a, const float *b, size_t n)
{
    assert_memory_equal(a, b, n * sizeof(float));
}

static void test_relu(void **state)
{
    (void)state;
    size_t n = 4099;
    float *in = values(n, 1), *dout = values(n, 2), *want = malloc(n * 4), *got = malloc(n * 4);
    pc_relu_forward(want, in, n);
    for (size_t i = 0; i < n; i++)
        got[i] = pc_elem_relu(in[i]);
    assert_bits_equal(got, want, n);
    float *dw = malloc(n * 4), *dg = malloc(n * 4);
    pc_relu_backward(dw, dout, want, n);
    for (size_t i = 0; i < n; i++)
        dg[i] = pc_elem_relu_back(dout[i], want[i]);
    assert_bits_equal(dg, dw, n);
    free(in), free(dout), free(want), free(got), free(dw), free(dg);
}

/* The kernel: element i from draw i of Philox (seed, stream) (cuRAND's block i / 4, word
 * i % 4), keep and scale as the launcher computes them. */
static void test_dropout(void **state)
{
    (void)state;
    size_t n = 3001;
    const float ps[] = {0.1f, 0.5f, 0.9f};
    for (size_t t = 0; t < sizeof(ps) / sizeof(ps[0]); t++) {
        float p = ps[t], keep = 1.0f - p, scale = 1.0f / keep;
        float *in = values(n, 3), *want = malloc(n * 4), *got = malloc(n * 4);
        uint8_t *mw = malloc(n), *mg = malloc(n);
        pc_dropout_forward(want, mw, in, n, p, 77, 12345);
        for (size_t i = 0; i < n; i++) {
            bool kept = pc_elem_dropout_kept(pc_elem_draw(77, 12345, i), keep);
            mg[i] = kept;
            got[i] = pc_elem_dropout(in[i], kept, scale);
        }
        assert_memory_equal(mg, mw, n);
        assert_bits_equal(got, want, n);
        pc_dropout_backward(want, in, mw, n, p);
        for (size_t i = 0; i < n; i++)
            got[i] = pc_elem_dropout(in[i], mg[i] != 0, scale);
        assert_bits_equal(got, want, n);
        free(in), free(want), free(got), free(mw), free(mg);
    }
}

static void test_maxpool(void **state)
{
    (void)state;
    int B = 2, C = 3, H = 6, W = 8, OH = H / 2, OW = W / 2;
    size_t nin = (size_t)B * C * H * W, nout = (size_t)B * C * OH * OW;
    float *in = values(nin, 4), *out = malloc(nout * 4), *dout = values(nout, 5);
    float *dw = malloc(nin * 4), *dg = malloc(nin * 4);
    int32_t *arg = malloc(nout * 4);
    pc_maxpool_forward(out, arg, in, B, C, H, W);
    for (size_t o = 0; o < nout; o++) {
        size_t bc = o / ((size_t)OH * OW);
        int rem = (int)(o - bc * OH * OW), y = rem / OW, x = rem - y * OW;
        const float *plane = in + bc * H * W;
        int best = pc_elem_maxpool_arg(plane, W, y, x);
        assert_int_equal(best, arg[o]);
        assert_memory_equal(&plane[best], &out[o], 4);
    }
    pc_maxpool_backward(dw, dout, arg, B, C, H, W);
    for (size_t idx = 0; idx < nin; idx++) /* maxpool_back_kernel's gather */
        dg[idx] = pc_elem_maxpool_grad(idx, H, W, arg, dout);
    assert_bits_equal(dg, dw, nin);
    free(in), free(out), free(dout), free(dw), free(dg), free(arg);
}

static void test_xent_back(void **state)
{
    (void)state;
    int B = 7, V = 10;
    size_t n = (size_t)B * V;
    float *logits = values(n, 6), *probs = malloc(n * 4), *want = malloc(n * 4);
    float *got = malloc(n * 4);
    uint8_t labels[7] = {0, 3, 9, 9, 1, 4, 7};
    int correct = 0;
    pc_softmax_xent_forward(probs, &correct, logits, labels, B, V);
    pc_softmax_xent_backward(want, probs, labels, B, V);
    float inv = 1.0f / (float)B; /* the launcher's */
    for (size_t i = 0; i < n; i++) {
        size_t b = i / (size_t)V;
        int v = (int)(i - b * V);
        got[i] = pc_elem_xent_back(probs[i], v == labels[b], inv);
    }
    assert_bits_equal(got, want, n);
    free(logits), free(probs), free(want), free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_maxpool),
        cmocka_unit_test(test_xent_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
