/* test_layers: every layer's backward against central finite differences of its forward,
 * through the scalar L = sum(out * R) with a fixed random R (so dL/dout = R); and a whole
 * model's backward against finite differences of its loss. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_layers.h"
#include "pipecompress/pc_model.h"
#include "pipecompress/pc_philox.h"

/* Step of the central differences: large enough for float round-off in L to stay small
 * against it, small enough that no ReLU or max-pool kink is crossed in the layer tests
 * (values are kept well apart). The whole-model test uses a smaller step. */
static float eps = 1e-2f;

static void rnd(float *x, size_t n, uint64_t s, float scale)
{
    pc_philox_t g;
    pc_philox_init(&g, 77, s, 0);
    for (size_t i = 0; i < n; i++)
        x[i] = (2 * pc_philox_uniform(pc_philox_next(&g)) - 1) * scale;
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* Compare an analytic gradient with central differences of f over every element of v. */
typedef double (*objective_fn)(void *ctx);
static void check_grad(const char *what, float *v, const float *grad, size_t n, objective_fn f,
                       void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        float keep = v[i];
        v[i] = keep + eps;
        double up = f(ctx);
        v[i] = keep - eps;
        double down = f(ctx);
        v[i] = keep;
        double num = (up - down) / (2.0 * (double)((keep + eps) - keep));
        double tol = 2e-2 * fmax(1.0, fabs(num)) + (eps < 1e-2f ? 2e-3 : 0);
        if (fabs(num - grad[i]) > tol)
            fail_msg("%s[%zu]: analytic %g, numeric %g", what, i, (double)grad[i], num);
    }
}

/* ---- linear ---- */
typedef struct lin {
    int B, C, OC;
    float *x, *w, *b, *out, *R;
} lin_t;

static double lin_f(void *p)
{
    lin_t *l = p;
    pc_linear_forward(l->out, l->x, l->w, l->b, l->B, l->C, l->OC);
    return dot(l->out, l->R, (size_t)l->B * l->OC);
}

static void test_linear(void **state)
{
    (void)state;
    lin_t l = {.B = 3, .C = 5, .OC = 4};
    float x[15], w[20], b[4], out[12], R[12], dx[15], dw[20], db[4];
    l.x = x, l.w = w, l.b = b, l.out = out, l.R = R;
    rnd(x, 15, 1, 1), rnd(w, 20, 2, 1), rnd(b, 4, 3, 1), rnd(R, 12, 4, 1);
    pc_linear_backward(dx, dw, db, R, x, w, 3, 5, 4);
    check_grad("linear dx", x, dx, 15, lin_f, &l);
    check_grad("linear dw", w, dw, 20, lin_f, &l);
    check_grad("linear db", b, db, 4, lin_f, &l);
}

/* ---- conv ---- */
typedef struct conv {
    int B, C, H, W, OC, K;
    float *x, *w, *b, *out, *R, *col;
} conv_t;

static double conv_f(void *p)
{
    conv_t *c = p;
    pc_conv2d_forward(c->out, c->col, c->x, c->w, c->b, c->B, c->C, c->H, c->W, c->OC, c->K);
    return dot(c->out, c->R, (size_t)c->B * c->OC * c->H * c->W);
}

static void test_conv2d(void **state)
{
    (void)state;
    enum { B = 2, C = 2, H = 6, W = 5, OC = 3, K = 3 };
    static float x[B * C * H * W], w[OC * C * K * K], b[OC], out[B * OC * H * W], R[B * OC * H * W];
    static float dx[B * C * H * W], dw[OC * C * K * K], db[OC], col[C * K * K * H * W],
        dcol[C * K * K * H * W];
    conv_t c = {B, C, H, W, OC, K, x, w, b, out, R, col};
    rnd(x, sizeof(x) / 4, 5, 1), rnd(w, sizeof(w) / 4, 6, 1), rnd(b, OC, 7, 1);
    rnd(R, sizeof(R) / 4, 8, 1);
    pc_conv2d_backward(dx, dw, db, col, dcol, R, x, w, B, C, H, W, OC, K);
    check_grad("conv dx", x, dx, sizeof(x) / 4, conv_f, &c);
    check_grad("conv dw", w, dw, sizeof(w) / 4, conv_f, &c);
    check_grad("conv db", b, db, OC, conv_f, &c);
}

/* ---- maxpool, relu, dropout (piecewise linear: differences away from kinks) ---- */
typedef struct pool {
    float *x, *out, *R;
    int32_t *arg;
} pool_t;

static double pool_f(void *p)
{
    pool_t *q = p;
    pc_maxpool_forward(q->out, q->arg, q->x, 2, 3, 4, 6);
    return dot(q->out, q->R, 2 * 3 * 2 * 3);
}

static void test_maxpool_relu_dropout(void **state)
{
    (void)state;
    float x[144], out[36], R[36], dx[144];
    int32_t arg[36];
    /* Distinct values, well apart: no ties, no kink within EPS. */
    for (int i = 0; i < 144; i++)
        x[i] = (float)((i * 37) % 144) * 0.1f;
    rnd(R, 36, 9, 1);
    pool_t q = {x, out, R, arg};
    pool_f(&q);
    pc_maxpool_backward(dx, R, arg, 2, 3, 4, 6);
    check_grad("maxpool dx", x, dx, 144, pool_f, &q);

    float r_in[8] = {-1, 2, -0.5f, 0.7f, 3, -2, 0.2f, -0.1f}, r_out[8], r_d[8], g[8];
    rnd(g, 8, 10, 1);
    pc_relu_forward(r_out, r_in, 8);
    pc_relu_backward(r_d, g, r_out, 8);
    for (int i = 0; i < 8; i++)
        assert_true(r_d[i] == (r_in[i] > 0 ? g[i] : 0.0f));

    float d_in[1000], d_out[1000], d_back[1000], ones[1000];
    uint8_t mask[1000], mask2[1000];
    for (int i = 0; i < 1000; i++)
        d_in[i] = ones[i] = 1.0f;
    pc_dropout_forward(d_out, mask, d_in, 1000, 0.25f, 3, 4);
    int kept = 0;
    for (int i = 0; i < 1000; i++) {
        kept += mask[i];
        assert_true(d_out[i] == (mask[i] ? 1.0f / 0.75f : 0.0f));
    }
    assert_true(kept > 650 && kept < 850); /* 750 expected; binomial sd ~14 */
    pc_dropout_backward(d_back, ones, mask, 1000, 0.25f);
    assert_memory_equal(d_back, d_out, sizeof(d_out));
    pc_dropout_forward(d_out, mask2, d_in, 1000, 0.25f, 3, 4);
    assert_memory_equal(mask, mask2, sizeof(mask)); /* seeded: reproducible */
}

/* ---- softmax cross-entropy ---- */
typedef struct sx {
    float *logits, *probs;
    uint8_t *labels;
} sx_t;

static double sx_f(void *p)
{
    sx_t *s = p;
    return pc_softmax_xent_forward(s->probs, NULL, s->logits, s->labels, 3, 4);
}

static void test_softmax_xent(void **state)
{
    (void)state;
    float logits[12], probs[12], d[12];
    uint8_t labels[3] = {0, 3, 2};
    rnd(logits, 12, 11, 3);
    sx_t s = {logits, probs, labels};
    int correct;
    float loss = pc_softmax_xent_forward(probs, &correct, logits, labels, 3, 4);
    assert_true(loss > 0 && correct >= 0 && correct <= 3);
    for (int b = 0; b < 3; b++) {
        double sum = 0;
        for (int v = 0; v < 4; v++)
            sum += probs[b * 4 + v];
        assert_true(fabs(sum - 1) < 1e-6);
    }
    pc_softmax_xent_backward(d, probs, labels, 3, 4);
    check_grad("softmax-xent dlogits", logits, d, 12, sx_f, &s);
}

/* ---- a whole model: mlp and cnn on 8x8 inputs ---- */
typedef struct mdl {
    pc_model_t *m;
    float *x;
    uint8_t *y;
} mdl_t;

static double model_f(void *p)
{
    mdl_t *d = p;
    float loss;
    pc_model_forward(d->m, d->x, d->y, 2, true, 1, 0, NULL, &loss, NULL);
    return loss;
}

static void test_model_gradients(void **state)
{
    (void)state;
    eps = 1e-3f; /* a network has many kinks: a small step rarely crosses one */
    for (int kind = PC_MODEL_MLP; kind <= PC_MODEL_CNN; kind++) {
        pc_model_t *m;
        assert_int_equal(pc_model_create((pc_model_kind_t)kind, 2, 1, 8, 8, 3, 0.0f, &m), PC_OK);
        pc_model_init(m, 5);
        float x[128];
        uint8_t y[2] = {1, 2};
        rnd(x, 128, 12, 1);
        mdl_t d = {m, x, y};
        model_f(&d);
        assert_int_equal(pc_model_backward(m, y, 2, NULL), PC_OK);
        /* Check a sample of every tensor (all of the small ones). */
        for (int t = 0; t < pc_model_ntensors(m); t++) {
            size_t n = pc_model_tensor_size(m, t);
            float *p = pc_model_tensor_param(m, t), *g = pc_model_tensor_grad(m, t);
            float *gc = malloc(sizeof(float) * n);
            memcpy(gc, g, sizeof(float) * n);
            size_t stride = n > 40 ? n / 40 : 1;
            for (size_t i = 0; i < n; i += stride)
                check_grad(pc_model_tensor_name(m, t), p + i, gc + i, 1, model_f, &d);
            free(gc);
        }
        pc_model_destroy(m);
    }
    pc_model_t *m;
    assert_int_equal(pc_model_create(PC_MODEL_CNN, 2, 1, 6, 6, 3, 0.0f, &m), PC_EINVAL);
    assert_int_equal(pc_model_create(PC_MODEL_MLP, 0, 1, 8, 8, 3, 0.0f, &m), PC_EINVAL);
    assert_int_equal(pc_model_create(PC_MODEL_WIDE, 4, 1, 28, 28, 10, 0.0f, &m), PC_OK);
    assert_int_equal(pc_model_nparams(m),
                     784 * 4096 + 4096 + 2 * (4096 * 4096 + 4096) + 40960 + 10);
    pc_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_conv2d),
        cmocka_unit_test(test_maxpool_relu_dropout),
        cmocka_unit_test(test_softmax_xent),
        cmocka_unit_test(test_model_gradients),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
