/* test_optim: SGD (momentum, Nesterov, weight decay) against a reference written out
 * longhand in double-checked float steps, the changed-index list, and the schedules;
 * Adam and AdamW (weight decay, amsgrad) against a double-precision reference and,
 * bitwise, torch's float32 operation order written out longhand; chunking invariance. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_optim.h"

static void test_sgd_variants(void **state)
{
    (void)state;
    const int n = 64;
    for (int variant = 0; variant < 4; variant++) {
        pc_optim_cfg_t cfg = {.lr = 0.1,
                              .momentum = variant ? 0.9 : 0,
                              .nesterov = variant == 2,
                              .weight_decay = variant == 3 ? 1e-2 : 0};
        float p[64], mom[64], g[64], rp[64], rm[64];
        for (int i = 0; i < n; i++) {
            p[i] = rp[i] = 0.01f * (float)(i - 30);
            mom[i] = rm[i] = 0;
        }
        for (int step = 0; step < 3; step++) {
            for (int i = 0; i < n; i++)
                g[i] = (i % 3 == 0) ? 0.0f : 0.5f - 0.013f * (float)i + (float)step * 0.1f;
            /* Step 2 of plain SGD: a mostly-zero gradient, so the list is complete. */
            if (variant == 0 && step == 2)
                for (int i = 0; i < n; i++)
                    if (i % 7)
                        g[i] = 0.0f;
            uint32_t changed[64];
            size_t k = pc_optim_sgd(&cfg, 0.1f, p, mom, g, (size_t)n, changed);
            bool listed = 2 * k < (size_t)n;
            if (variant == 0 && step == 2)
                assert_true(listed);
            size_t rk = 0;
            for (int i = 0; i < n; i++) {
                float d = g[i] + (float)cfg.weight_decay * rp[i];
                float upd = d;
                if (cfg.momentum != 0) {
                    rm[i] = (float)cfg.momentum * rm[i] + d;
                    upd = cfg.nesterov ? d + (float)cfg.momentum * rm[i] : rm[i];
                }
                float np = rp[i] - 0.1f * upd;
                if (np != rp[i]) {
                    if (listed)
                        assert_int_equal(changed[rk], i);
                    rk++;
                }
                rp[i] = np;
            }
            assert_int_equal(k, rk);
            assert_memory_equal(p, rp, sizeof(p));
            if (cfg.momentum != 0)
                assert_memory_equal(mom, rm, sizeof(mom));
        }
        /* Plain SGD changes only where the gradient is non-zero. */
        if (variant == 0)
            for (int i = 0; i < n; i += 3)
                assert_true(p[i] == 0.01f * (float)(i - 30));
    }
    pc_optim_cfg_t plain = {.lr = 1}, mom = {.lr = 1, .momentum = 0.5},
                   wd = {.lr = 1, .weight_decay = 1e-4};
    assert_true(pc_optim_sparse_friendly(&plain));
    assert_false(pc_optim_sparse_friendly(&mom));
    assert_false(pc_optim_sparse_friendly(&wd));
}

/* Many blocks: the same arithmetic, and the changed list across block boundaries. */
static void test_sgd_long(void **state)
{
    (void)state;
    enum { N = 1500 };
    static float p[N], rp[N], g[N], mom[N], rm[N];
    static uint32_t changed[N];
    for (int variant = 0; variant < 2; variant++) {
        pc_optim_cfg_t cfg = {.lr = 0.05, .momentum = variant ? 0.9 : 0};
        for (int i = 0; i < N; i++) {
            p[i] = rp[i] = 0.001f * (float)(i % 97);
            mom[i] = rm[i] = 0;
            g[i] = i % 5 == 0 ? 0.25f - 0.0003f * (float)i : 0.0f;
        }
        size_t k = pc_optim_sgd(&cfg, 0.05f, p, mom, g, N, changed), rk = 0;
        for (int i = 0; i < N; i++) {
            float d = g[i], upd = d;
            if (variant) {
                rm[i] = 0.9f * rm[i] + d;
                upd = rm[i];
            }
            float np = rp[i] - 0.05f * upd;
            if (np != rp[i])
                assert_int_equal(changed[rk++], i);
            rp[i] = np;
        }
        assert_int_equal(k, rk);
        assert_true(2 * k < N);
        assert_memory_equal(p, rp, sizeof(p));
    }
}

static void test_schedules(void **state)
{
    (void)state;
    pc_optim_cfg_t c = {.lr = 0.2, .schedule = PC_LR_CONSTANT};
    assert_true(pc_optim_lr(&c, 0) == 0.2 && pc_optim_lr(&c, 1000) == 0.2);
    c.schedule = PC_LR_STEP;
    c.step = 10;
    c.gamma = 0.5;
    assert_true(pc_optim_lr(&c, 9) == 0.2);
    assert_true(pc_optim_lr(&c, 10) == 0.1);
    assert_true(fabs(pc_optim_lr(&c, 25) - 0.05) < 1e-15);
    c.schedule = PC_LR_COSINE;
    c.total = 100;
    assert_true(pc_optim_lr(&c, 0) == 0.2);
    assert_true(fabs(pc_optim_lr(&c, 50) - 0.1) < 1e-12);
    assert_true(pc_optim_lr(&c, 100) == 0.0);
    c.warmup = 4;
    assert_true(fabs(pc_optim_lr(&c, 0) - 0.05) < 1e-15);
    assert_true(fabs(pc_optim_lr(&c, 3) - 0.2) < 1e-15);
}

/* ---- Adam and AdamW ------------------------------------------------------------------- */

/* A gradient for element i at step t: mostly large for the first 30 steps, then small, so
 * that v falls and amsgrad's vmax matters; signs vary; some exact zeros. Deterministic. */
static float grad_at(int i, int t)
{
    if (i % 11 == 3)
        return 0.0f;
    float s = (float)((i * 7 + t * 3) % 13) / 13.0f - 0.45f;
    return t < 30 ? s * (1.0f + 0.1f * (float)(i % 5)) : 0.02f * s;
}

/* Torch's Adam / AdamW in double (every product, sum, power and root in double; nothing
 * shared with pc_optim.c): the math of torch/optim/adam.py and adamw.py. */
typedef struct dref {
    double p, m, v, vmax;
} dref_t;

static void dref_step(dref_t *d, const pc_optim_cfg_t *c, double lr, int t, double g)
{
    if (c->kind == PC_OPTIM_ADAMW)
        d->p *= 1.0 - lr * c->weight_decay;
    else
        g += c->weight_decay * d->p;
    d->m = c->beta1 * d->m + (1.0 - c->beta1) * g;
    d->v = c->beta2 * d->v + (1.0 - c->beta2) * g * g;
    double v = d->v;
    if (c->amsgrad) {
        d->vmax = d->vmax > d->v ? d->vmax : d->v;
        v = d->vmax;
    }
    double bc1 = 1.0 - pow(c->beta1, t), bc2 = 1.0 - pow(c->beta2, t);
    d->p -= lr / bc1 * d->m / (sqrt(v) / sqrt(bc2) + c->eps);
}

/* The element's float32 step written out longhand in torch's operation order (the
 * kernels' float operations on the doubles Python computes, rounded to float where a
 * kernel takes them; the two multiply-adds fused): what pc_optim_step must give bitwise. */
static void fref_step(float *p, float *m, float *v, float *vmax, const pc_optim_cfg_t *c, double lr,
                      int t, float g)
{
    if (c->kind == PC_OPTIM_ADAMW)
        *p = *p * (float)(1.0 - lr * c->weight_decay);
    else if (c->weight_decay != 0)
        g = fmaf((float)c->weight_decay, *p, g);
    *m = fmaf((float)(1.0 - c->beta1), g, *m * (float)c->beta1);
    *v = fmaf((float)(1.0 - c->beta2) * g, g, *v * (float)c->beta2);
    float vv = *v;
    if (c->amsgrad) {
        *vmax = *vmax >= *v ? *vmax : *v;
        vv = *vmax;
    }
    double bc1 = 1.0 - pow(c->beta1, (double)t), bc2 = 1.0 - pow(c->beta2, (double)t);
    float denom = sqrtf(vv) / (float)sqrt(bc2) + (float)c->eps;
    *p = *p + (float)(-(lr / bc1)) * *m / denom;
}

/* Adam, AdamW, with and without amsgrad and weight decay, over 100 steps: the double
 * reference within float tolerance, the longhand float32 torch order bitwise, and the
 * state's arrays (m, v, vmax, steps) likewise. */
static void test_adam_reference(void **state)
{
    (void)state;
    enum { N = 37, STEPS = 100 };
    const double lr = 1e-2;
    for (int variant = 0; variant < 6; variant++) {
        pc_optim_cfg_t c = {.lr = lr,
                            .kind = variant % 2 ? PC_OPTIM_ADAMW : PC_OPTIM_ADAM,
                            .beta1 = 0.9,
                            .beta2 = variant >= 4 ? 0.9 : 0.999, /* amsgrad: v falls fast */
                            .eps = 1e-8,
                            .amsgrad = variant >= 4,
                            .weight_decay = variant >= 2 ? 0.1 : 0};
        assert_false(pc_optim_sparse_friendly(&c));
        pc_optim_state_t st;
        assert_int_equal(pc_optim_state_alloc(&c, N, &st), PC_OK);
        assert_true(st.m && st.v && (st.vmax != NULL) == c.amsgrad && st.steps == 0);
        float p[N], g[N], fp[N], fm[N] = {0}, fv[N] = {0}, fvm[N] = {0};
        dref_t d[N];
        for (int i = 0; i < N; i++) {
            p[i] = fp[i] = 0.05f * (float)(i - 18);
            d[i] = (dref_t){.p = p[i]};
        }
        double worst = 0;
        for (int t = 1; t <= STEPS; t++) {
            for (int i = 0; i < N; i++)
                g[i] = grad_at(i, t);
            st.steps++;
            pc_optim_step(&c, lr, p, &st, g, N, NULL);
            for (int i = 0; i < N; i++) {
                fref_step(&fp[i], &fm[i], &fv[i], &fvm[i], &c, lr, t, g[i]);
                dref_step(&d[i], &c, lr, t, g[i]);
                double e = fabs((double)p[i] - d[i].p);
                worst = e > worst ? e : worst;
            }
            assert_memory_equal(p, fp, sizeof(p));
            assert_memory_equal(st.m, fm, sizeof(fm));
            assert_memory_equal(st.v, fv, sizeof(fv));
            if (c.amsgrad)
                assert_memory_equal(st.vmax, fvm, sizeof(fvm));
        }
        /* 100 steps of about lr each from |p| <= 1: float's rounding stays far below this,
         * a wrong bias correction, decay or max moves p by more than 1e-3. */
        assert_true(worst < 2e-5);
        assert_true(st.steps == STEPS);
        pc_optim_state_free(&st);
        assert_null(st.m);
    }
    /* amsgrad differs from plain Adam once v falls (grad_at's steps after 30). */
    pc_optim_cfg_t a = {.kind = PC_OPTIM_ADAM, .beta1 = 0.9, .beta2 = 0.9, .eps = 1e-8};
    pc_optim_cfg_t b = a;
    b.amsgrad = true;
    dref_t da = {.p = 1}, db = {.p = 1};
    for (int t = 1; t <= STEPS; t++) {
        dref_step(&da, &a, lr, t, grad_at(1, t));
        dref_step(&db, &b, lr, t, grad_at(1, t));
    }
    assert_true(fabs(da.p - db.p) > 1e-3);
}

/* torch 1.13.1 (Debian's python3-torch, CPU capability AVX2) on 6 parameters, 4 steps:
 * the gradients, the start and torch's parameters after the steps, as printed by
 * float.hex(). */
static const float torch_g[4][6] = {
    {0x1.99999ap-4, -0x1.99999ap-3, 0x1.333334p-2, -0x1.99999ap-2, 0x1p-1, -0x1.333334p-1},
    {-0x1.99999ap-5, 0x1p-2, -0x1p-2, 0x1.ccccccp-2, -0x1.ccccccp-2, 0x1.4cccccp-1},
    {0x1.99999ap-3, -0x1.99999ap-4, 0x1.99999ap-2, -0x1.333334p-2, 0x0p+0, -0x1p-1},
    {0x1.99999ap-5, 0x1.666666p-2, -0x1.333334p-3, 0x1.19999ap-1, -0x1.666666p-2, 0x1.8p-1},
};
static const float torch_p0[6] = {0x1p-1, -0x1p-2, 0x1.8p+0, -0x1p+1, 0x0p+0, 0x1.8p-1};
/* torch.optim.AdamW(lr=0.01, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01), foreach=False */
static const float torch_adamw[6] = {0x1.e56e3p-2,   -0x1.f4fd2cp-3, 0x1.7b6272p+0,
                                     -0x1.fd97bcp+0, -0x1.df332cp-8, 0x1.84dd78p-1};
/* torch.optim.Adam(lr=0.01, betas=(0.8, 0.99), eps=1e-06, weight_decay=0.1, amsgrad=True),
 * foreach=False */
static const float torch_adam[6] = {0x1.de5f28p-2, -0x1.f1a2d4p-3, 0x1.78f0c8p+0,
                                    -0x1.fad71p+0, -0x1.6a490ep-8, 0x1.8292d6p-1};

/* pc_optim_step against torch's own numbers, bitwise. */
static void test_adam_torch(void **state)
{
    (void)state;
    pc_optim_cfg_t cfgs[2] = {{.lr = 0.01,
                               .kind = PC_OPTIM_ADAMW,
                               .beta1 = 0.9,
                               .beta2 = 0.999,
                               .eps = 1e-8,
                               .weight_decay = 0.01},
                              {.lr = 0.01,
                               .kind = PC_OPTIM_ADAM,
                               .beta1 = 0.8,
                               .beta2 = 0.99,
                               .eps = 1e-6,
                               .weight_decay = 0.1,
                               .amsgrad = true}};
    const float *want[2] = {torch_adamw, torch_adam};
    for (int c = 0; c < 2; c++) {
        float p[6];
        memcpy(p, torch_p0, sizeof(p));
        pc_optim_state_t st;
        assert_int_equal(pc_optim_state_alloc(&cfgs[c], 6, &st), PC_OK);
        for (int t = 0; t < 4; t++) {
            st.steps++;
            pc_optim_step(&cfgs[c], cfgs[c].lr, p, &st, torch_g[t], 6, NULL);
        }
        assert_memory_equal(p, want[c], sizeof(p));
        pc_optim_state_free(&st);
    }
}

/* A tensor stepped whole, or as chunks (pc_optim_state_at views, block boundaries
 * crossed), ends bitwise the same; the changed list as pc_optim_sgd's. */
static void test_adam_chunks(void **state)
{
    (void)state;
    enum { N = 1500 };
    static float pa[N], pb[N], g[N];
    static uint32_t changed[N];
    const size_t cuts[] = {0, 1, 700, 1029, 1100, N};
    for (int amsgrad = 0; amsgrad < 2; amsgrad++) {
        pc_optim_cfg_t c = {.kind = PC_OPTIM_ADAMW,
                            .beta1 = 0.8,
                            .beta2 = 0.99,
                            .eps = 1e-6,
                            .amsgrad = amsgrad,
                            .weight_decay = 0.01};
        pc_optim_state_t sa, sb;
        assert_int_equal(pc_optim_state_alloc(&c, N, &sa), PC_OK);
        assert_int_equal(pc_optim_state_alloc(&c, N, &sb), PC_OK);
        for (int i = 0; i < N; i++)
            pa[i] = pb[i] = 0.001f * (float)(i % 97) - 0.03f;
        for (int t = 1; t <= 5; t++) {
            for (int i = 0; i < N; i++)
                g[i] = grad_at(i, t * 7);
            sa.steps++;
            size_t k = pc_optim_step(&c, 0.003, pa, &sa, g, N, changed);
            sb.steps++;
            size_t kb = 0;
            for (size_t j = 0; j + 1 < sizeof(cuts) / sizeof(cuts[0]); j++) {
                pc_optim_state_t at = pc_optim_state_at(&sb, cuts[j]);
                kb += pc_optim_step(&c, 0.003, pb + cuts[j], &at, g + cuts[j],
                                    cuts[j + 1] - cuts[j], NULL);
            }
            assert_int_equal(k, kb);
            assert_true(2 * k >= N); /* Adam moves nearly everything: no list */
            assert_memory_equal(pa, pb, sizeof(pa));
            assert_memory_equal(sa.m, sb.m, sizeof(float) * N);
            assert_memory_equal(sa.v, sb.v, sizeof(float) * N);
            if (amsgrad)
                assert_memory_equal(sa.vmax, sb.vmax, sizeof(float) * N);
        }
        pc_optim_state_free(&sa);
        pc_optim_state_free(&sb);
    }
    /* Few changes (a gradient zero but for a few entries, first step, no decay): listed. */
    pc_optim_cfg_t c = {.kind = PC_OPTIM_ADAM, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    pc_optim_state_t s;
    assert_int_equal(pc_optim_state_alloc(&c, N, &s), PC_OK);
    for (int i = 0; i < N; i++) {
        pa[i] = 1.0f;
        g[i] = i % 100 == 7 ? 0.5f : 0.0f;
    }
    s.steps = 1;
    size_t k = pc_optim_step(&c, 0.1, pa, &s, g, N, changed);
    assert_int_equal(k, N / 100);
    for (size_t j = 0; j < k; j++)
        assert_int_equal(changed[j], 100 * j + 7);
    pc_optim_state_free(&s);
}

/* SGD through pc_optim_step is pc_optim_sgd at (float)lr; the state's arrays by rule. */
static void test_step_sgd_and_state(void **state)
{
    (void)state;
    enum { N = 600 };
    static float p[N], q[N], mom[N], g[N];
    pc_optim_cfg_t c = {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true};
    pc_optim_state_t st;
    assert_int_equal(pc_optim_state_alloc(&c, N, &st), PC_OK);
    assert_true(st.m && !st.v && !st.vmax);
    for (int i = 0; i < N; i++) {
        p[i] = q[i] = 0.01f * (float)(i % 17);
        mom[i] = 0;
        g[i] = grad_at(i, 2);
    }
    for (int t = 0; t < 3; t++) {
        pc_optim_step(&c, 0.1, p, &st, g, N, NULL);
        pc_optim_sgd(&c, 0.1f, q, mom, g, N, NULL);
    }
    assert_memory_equal(p, q, sizeof(p));
    assert_memory_equal(st.m, mom, sizeof(mom));
    float *arr[PC_OPTIM_STATE_ARRAYS];
    pc_optim_state_arrays(&st, arr);
    assert_true(arr[0] == st.m && !arr[1] && !arr[2]);
    pc_optim_state_free(&st);
    pc_optim_cfg_t plain = {.lr = 0.1};
    assert_int_equal(pc_optim_state_alloc(&plain, N, &st), PC_OK);
    assert_true(!st.m && !st.v && !st.vmax);
    pc_optim_state_free(&st);

    assert_string_equal(pc_optim_kind_name(PC_OPTIM_SGD), "sgd");
    assert_string_equal(pc_optim_kind_name(PC_OPTIM_ADAMW), "adamw");
    assert_string_equal(pc_optim_kind_name(7), "?");
    assert_string_equal(PC_OPTIM_KIND_CHOICES, "sgd|adam|adamw");
    double b1 = -1, b2 = -1;
    char err[128];
    assert_int_equal(pc_optim_betas_parse("0.5,0", &b1, &b2, err, sizeof(err)), PC_OK);
    assert_true(b1 == 0.5 && b2 == 0);
    const char *bad[] = {"", ",", "0.9,", ",0.9", "0.9;0.99", "1,0.5", "0.5,1", "0.9,0.99 ", "x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(pc_optim_betas_parse(bad[i], &b1, &b2, err, sizeof(err)), PC_EUSAGE);
        assert_true(b1 == 0.5 && b2 == 0); /* untouched */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_variants),       cmocka_unit_test(test_sgd_long),
        cmocka_unit_test(test_schedules),          cmocka_unit_test(test_adam_reference),
        cmocka_unit_test(test_adam_torch),         cmocka_unit_test(test_adam_chunks),
        cmocka_unit_test(test_step_sgd_and_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
