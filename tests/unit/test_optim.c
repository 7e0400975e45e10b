/* test_optim: SGD (momentum, Nesterov, weight decay) against a reference written out
 * longhand in double-checked float steps, the changed-index list, and the schedules;
 * Adam and AdamW (weight decay, amsgrad) against a double-precision reference and,
 * bitwise, torch's float32 operation order written out longhand; chunking invariance; the
 * lazy variant against torch.optim.SparseAdam's formula and bitwise the dense arithmetic,
 * the frozen v (freeze_after), and a resume of each through the checkpointed state. */
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
 * shared with pc_optim.c): the math of torch/optim/adam.py and adamw.py; past freeze_after
 * (1-bit Adam) v and its bias correction are kept. */
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
    bool frozen = c->freeze_after > 0 && t > c->freeze_after; /* v and its correction kept */
    if (!frozen || d->v == 0) /* an entry without history learns v (pc_optim.c's adam_one) */
        d->v = c->beta2 * d->v + (1.0 - c->beta2) * g * g;
    double v = d->v;
    if (c->amsgrad) {
        d->vmax = d->vmax > d->v ? d->vmax : d->v;
        v = d->vmax;
    }
    double bc1 = 1.0 - pow(c->beta1, t),
           bc2 = 1.0 - pow(c->beta2, frozen ? (double)c->freeze_after : t);
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
    bool frozen = c->freeze_after > 0 && t > c->freeze_after;
    if (!frozen || *v == 0.0f)
        *v = fmaf((float)(1.0 - c->beta2) * g, g, *v * (float)c->beta2);
    float vv = *v;
    if (c->amsgrad) {
        *vmax = *vmax >= *v ? *vmax : *v;
        vv = *vmax;
    }
    double bc1 = 1.0 - pow(c->beta1, (double)t),
           bc2 = 1.0 - pow(c->beta2, frozen ? (double)c->freeze_after : (double)t);
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

/* ---- the variants for a compressed aggregate: lazy, frozen v ------------------------- */

/* torch.optim.SparseAdam's rule in double, as torch/optim/_functional.py's sparse_adam
 * writes it (1.13), on an entry that arrived at the tensor's step t. */
static void sparse_adam_ref(dref_t *d, const pc_optim_cfg_t *c, double lr, int t, double g)
{
    d->m += (g - d->m) * (1.0 - c->beta1);
    d->v += (g * g - d->v) * (1.0 - c->beta2);
    double bc1 = 1.0 - pow(c->beta1, t), bc2 = 1.0 - pow(c->beta2, t);
    d->p += -(lr * sqrt(bc2) / bc1) * (d->m / (sqrt(d->v) + c->eps));
}

/* Whether entry i arrives at step t (a sparse aggregate's union over workers): about a
 * fifth of the entries, a different set each step; some entries never. */
static bool arrives(int i, int t)
{
    return i % 13 != 5 && (i * 7 + t * 5) % 9 < 2;
}

/* The arrived entries of step t into idx (descending at odd t: any order is allowed) and
 * their gradient into g (0 elsewhere); returns their count. */
static size_t arrivals(int n, int t, uint32_t *idx, float *g)
{
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        g[i] = 0.0f;
        if (arrives(i, t)) {
            idx[k++] = (uint32_t)i;
            g[i] = grad_at(i, t);
        }
    }
    for (size_t j = 0; t % 2 && j < k / 2; j++) {
        uint32_t x = idx[j];
        idx[j] = idx[k - 1 - j];
        idx[k - 1 - j] = x;
    }
    return k;
}

/* Lazy Adam against SparseAdam's formula (double, the tensor's step count) within float
 * tolerance over 60 steps; untouched entries keep p, m and v bit for bit; the changed list;
 * and far from dense Adam on the same zero-filled aggregate. */
static void test_adam_lazy_sparseadam(void **state)
{
    (void)state;
    enum { N = 45, STEPS = 60 };
    const double lr = 1e-2;
    /* eps 1e-12: SparseAdam adds eps to sqrt(v), ours (torch's Adam) to sqrt(v) / sqrt(1 -
     * b2^t) (pc_optim.h); a tiny eps compares the rest of the rule */
    pc_optim_cfg_t c = {
        .kind = PC_OPTIM_ADAM, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-12, .lazy = true};
    pc_optim_cfg_t dense = c;
    dense.lazy = false;
    assert_true(pc_optim_lazy(&c));
    assert_false(pc_optim_lazy(&dense));
    assert_false(pc_optim_sparse_friendly(&c));
    pc_optim_state_t st, sd;
    assert_int_equal(pc_optim_state_alloc(&c, N, &st), PC_OK);
    assert_int_equal(pc_optim_state_alloc(&dense, N, &sd), PC_OK);
    float p[N], pd[N], g[N], pb[N], mb[N], vb[N];
    uint32_t idx[N], changed[N];
    dref_t d[N];
    for (int i = 0; i < N; i++) {
        p[i] = pd[i] = 0.05f * (float)(i - 22);
        d[i] = (dref_t){.p = p[i]};
    }
    double worst = 0;
    for (int t = 1; t <= STEPS; t++) {
        size_t k = arrivals(N, t, idx, g);
        memcpy(pb, p, sizeof(p));
        memcpy(mb, st.m, sizeof(mb));
        memcpy(vb, st.v, sizeof(vb));
        st.steps++; /* the tensor's step, whatever arrived */
        size_t nc = pc_optim_adam_lazy(&c, lr, p, &st, g, idx, k, changed);
        sd.steps++;
        pc_optim_step(&dense, lr, pd, &sd, g, N, NULL);
        size_t want = 0;
        for (size_t j = 0; j < k; j++) {
            int i = (int)idx[j];
            sparse_adam_ref(&d[i], &c, lr, t, g[i]);
            if (p[i] != pb[i])
                assert_int_equal(changed[want++], i);
        }
        assert_int_equal(nc, want);
        for (int i = 0; i < N; i++) {
            if (!arrives(i, t)) { /* bit for bit as they were */
                assert_memory_equal(&p[i], &pb[i], sizeof(float));
                assert_memory_equal(&st.m[i], &mb[i], sizeof(float));
                assert_memory_equal(&st.v[i], &vb[i], sizeof(float));
            }
            double e = fabs((double)p[i] - d[i].p);
            worst = e > worst ? e : worst;
        }
    }
    /* float's rounding stays far below this; a per-entry step count or a moved untouched
     * entry is off by more than 1e-3 */
    assert_true(worst < 2e-5);
    for (int i = 0; i < N; i += 13) /* entry 5 + 13 j never arrives */
        assert_true(p[i + 5] == 0.05f * (float)(i + 5 - 22));
    double apart = 0;
    for (int i = 0; i < N; i++)
        apart = fmax(apart, fabs((double)p[i] - (double)pd[i]));
    assert_true(apart > 1e-3); /* dense Adam moves every entry on zeros too */
    pc_optim_state_free(&st);
    pc_optim_state_free(&sd);
}

/* Lazy's arithmetic on an arrived entry is the dense step's, bitwise: against torch's
 * float32 order written out longhand (fref_step at the tensor's step t) with AdamW, weight
 * decay, amsgrad and a frozen v; and with every entry arriving, bitwise pc_optim_step. */
static void test_adam_lazy_bitwise(void **state)
{
    (void)state;
    enum { N = 45, STEPS = 40 };
    const double lr = 3e-3;
    for (int variant = 0; variant < 4; variant++) {
        pc_optim_cfg_t c = {.kind = variant % 2 ? PC_OPTIM_ADAMW : PC_OPTIM_ADAM,
                            .beta1 = 0.8,
                            .beta2 = 0.9,
                            .eps = 1e-6,
                            .weight_decay = 0.05,
                            .amsgrad = variant >= 2,
                            .freeze_after = variant == 3 ? 7 : 0,
                            .lazy = true};
        pc_optim_state_t sl, sa, sd;
        assert_int_equal(pc_optim_state_alloc(&c, N, &sl), PC_OK);
        assert_int_equal(pc_optim_state_alloc(&c, N, &sa), PC_OK);
        assert_int_equal(pc_optim_state_alloc(&c, N, &sd), PC_OK);
        float pl[N], pa[N], pd[N], fp[N], fm[N] = {0}, fv[N] = {0}, fvm[N] = {0}, g[N], ga[N];
        uint32_t idx[N], all[N], changed[N];
        for (int i = 0; i < N; i++) {
            pl[i] = pa[i] = pd[i] = fp[i] = 0.04f * (float)(i - 20);
            all[i] = (uint32_t)(N - 1 - i);
        }
        for (int t = 1; t <= STEPS; t++) {
            size_t k = arrivals(N, t, idx, g);
            sl.steps++;
            pc_optim_adam_lazy(&c, lr, pl, &sl, g, idx, k, changed);
            for (size_t j = 0; j < k; j++) {
                int i = (int)idx[j];
                fref_step(&fp[i], &fm[i], &fv[i], &fvm[i], &c, lr, t, g[i]);
            }
            assert_memory_equal(pl, fp, sizeof(pl));
            assert_memory_equal(sl.m, fm, sizeof(fm));
            assert_memory_equal(sl.v, fv, sizeof(fv));
            if (c.amsgrad)
                assert_memory_equal(sl.vmax, fvm, sizeof(fvm));
            for (int i = 0; i < N; i++)
                ga[i] = grad_at(i, t);
            sa.steps++;
            pc_optim_adam_lazy(&c, lr, pa, &sa, ga, all, N, changed);
            sd.steps++;
            pc_optim_step(&c, lr, pd, &sd, ga, N, NULL);
            assert_memory_equal(pa, pd, sizeof(pa));
            assert_memory_equal(sa.m, sd.m, sizeof(float) * N);
            assert_memory_equal(sa.v, sd.v, sizeof(float) * N);
            if (c.amsgrad)
                assert_memory_equal(sa.vmax, sd.vmax, sizeof(float) * N);
        }
        pc_optim_state_free(&sl);
        pc_optim_state_free(&sa);
        pc_optim_state_free(&sd);
    }
}

/* --adam-freeze-after N: steps 1..N are Adam's bit for bit; from N + 1 on v keeps its bits
 * while m and p move, p as the double reference with v's bias correction of step N; the
 * frozen run ends apart from Adam's (grad_at's gradients shrink after step 30). */
static void test_adam_freeze(void **state)
{
    (void)state;
    enum { N = 37, STEPS = 50, FREEZE = 10 };
    const double lr = 1e-2;
    pc_optim_cfg_t c = {.kind = PC_OPTIM_ADAMW,
                        .beta1 = 0.9,
                        .beta2 = 0.9,
                        .eps = 1e-8,
                        .weight_decay = 0.01,
                        .freeze_after = FREEZE};
    pc_optim_cfg_t u = c;
    u.freeze_after = 0;
    pc_optim_state_t sf, su;
    assert_int_equal(pc_optim_state_alloc(&c, N, &sf), PC_OK);
    assert_int_equal(pc_optim_state_alloc(&u, N, &su), PC_OK);
    float pf[N], pu[N], g[N], vN[N], mb[N];
    dref_t d[N];
    for (int i = 0; i < N; i++) {
        pf[i] = pu[i] = 0.05f * (float)(i - 18);
        d[i] = (dref_t){.p = pf[i]};
    }
    double worst = 0;
    for (int t = 1; t <= STEPS; t++) {
        for (int i = 0; i < N; i++)
            g[i] = grad_at(i, t);
        memcpy(mb, sf.m, sizeof(mb));
        sf.steps++;
        su.steps++;
        pc_optim_step(&c, lr, pf, &sf, g, N, NULL);
        pc_optim_step(&u, lr, pu, &su, g, N, NULL);
        for (int i = 0; i < N; i++) {
            dref_step(&d[i], &c, lr, t, g[i]);
            worst = fmax(worst, fabs((double)pf[i] - d[i].p));
        }
        if (t <= FREEZE) {
            assert_memory_equal(pf, pu, sizeof(pf));
            assert_memory_equal(sf.v, su.v, sizeof(float) * N);
            memcpy(vN, sf.v, sizeof(vN));
        } else {
            assert_memory_equal(sf.v, vN, sizeof(vN));
            assert_memory_not_equal(sf.m, mb, sizeof(mb));
        }
    }
    assert_true(worst < 2e-5);
    double apart = 0;
    for (int i = 0; i < N; i++)
        apart = fmax(apart, fabs((double)pf[i] - (double)pu[i]));
    assert_true(apart > 1e-3);
    pc_optim_state_free(&sf);
    pc_optim_state_free(&su);
}

/* An entry whose gradient was 0 through the freeze (v = 0: a sparsifier's entry that never
 * arrived, a unit dead until then) learns v from its first nonzero gradient instead of
 * stepping lr * m / eps (which a dense=20 DGC run turned into NaN): every step bitwise the
 * longhand float32 reference, and the late entry moves by at most a few learning rates. */
static void test_adam_freeze_late_entry(void **state)
{
    (void)state;
    enum { N = 2, STEPS = 30, FREEZE = 10, LATE = 16 };
    const double lr = 1e-2;
    pc_optim_cfg_t c = {.kind = PC_OPTIM_ADAMW,
                        .beta1 = 0.9,
                        .beta2 = 0.999,
                        .eps = 1e-8,
                        .weight_decay = 0.01,
                        .freeze_after = FREEZE};
    pc_optim_state_t st;
    assert_int_equal(pc_optim_state_alloc(&c, N, &st), PC_OK);
    float p[N] = {0.5f, -0.25f}, rp[N] = {0.5f, -0.25f}, rm[N] = {0}, rv[N] = {0}, g[N];
    for (int t = 1; t <= STEPS; t++) {
        g[0] = grad_at(1, t);
        g[1] = t < LATE ? 0.0f : 0.3f;
        float before = p[1];
        st.steps++;
        pc_optim_step(&c, lr, p, &st, g, N, NULL);
        for (int i = 0; i < N; i++)
            fref_step(&rp[i], &rm[i], &rv[i], NULL, &c, lr, t, g[i]);
        assert_memory_equal(p, rp, sizeof(p));
        assert_memory_equal(st.v, rv, sizeof(rv));
        assert_true(isfinite(p[1]) && fabsf(p[1] - before) < 5 * (float)lr);
    }
    assert_true(st.v[1] > 0 && p[1] < -0.25f - 2 * (float)lr); /* it moved, within bounds */
    pc_optim_state_free(&st);
}

/* A resumed run is bitwise the unbroken one with each option: the state the servers'
 * checkpoints store (the parameters, pc_optim_state_arrays' arrays, steps; pc_server.c's
 * server_checkpoint and server_load) carried into a freshly allocated state halfway. */
static void test_adam_variants_resume(void **state)
{
    (void)state;
    enum { N = 45, STEPS = 12, HALF = 6 };
    const double lr = 1e-2;
    const pc_optim_cfg_t cfgs[3] = {
        {.kind = PC_OPTIM_ADAM, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .lazy = true},
        {.kind = PC_OPTIM_ADAMW, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .freeze_after = 4},
        {.kind = PC_OPTIM_ADAMW,
         .beta1 = 0.9,
         .beta2 = 0.99,
         .eps = 1e-8,
         .weight_decay = 0.01,
         .amsgrad = true,
         .lazy = true,
         .freeze_after = 4},
    };
    for (int v = 0; v < 3; v++) {
        const pc_optim_cfg_t *c = &cfgs[v];
        pc_optim_state_t a, b;
        assert_int_equal(pc_optim_state_alloc(c, N, &a), PC_OK);
        assert_int_equal(pc_optim_state_alloc(c, N, &b), PC_OK);
        float pa[N], pb[N], g[N], saved[PC_OPTIM_STATE_ARRAYS][N], savedp[N];
        uint32_t idx[N], changed[N];
        for (int i = 0; i < N; i++)
            pa[i] = pb[i] = 0.03f * (float)(i - 20);
        for (int t = 1; t <= STEPS; t++) {
            size_t k = arrivals(N, t, idx, g);
            if (!c->lazy) { /* dense: every entry, its gradient */
                for (int i = 0; i < N; i++)
                    g[i] = grad_at(i, t);
            }
            pc_optim_state_t *sts[2] = {&a, &b};
            float *ps[2] = {pa, pb};
            for (int r = 0; r < 2; r++) {
                sts[r]->steps++;
                if (c->lazy)
                    pc_optim_adam_lazy(c, lr, ps[r], sts[r], g, idx, k, changed);
                else
                    pc_optim_step(c, lr, ps[r], sts[r], g, N, NULL);
            }
            if (t == HALF) { /* checkpoint b, drop its state, resume into a fresh one */
                float *arr[PC_OPTIM_STATE_ARRAYS];
                pc_optim_state_arrays(&b, arr);
                uint32_t mask = 0;
                for (int j = 0; j < PC_OPTIM_STATE_ARRAYS; j++)
                    if (arr[j]) {
                        memcpy(saved[j], arr[j], sizeof(float) * N);
                        mask |= 1u << j;
                    }
                memcpy(savedp, pb, sizeof(pb));
                uint64_t steps = b.steps;
                pc_optim_state_free(&b);
                memset(pb, 0, sizeof(pb));
                assert_int_equal(pc_optim_state_alloc(c, N, &b), PC_OK);
                pc_optim_state_arrays(&b, arr);
                for (int j = 0; j < PC_OPTIM_STATE_ARRAYS; j++) {
                    assert_int_equal(arr[j] != NULL, (mask >> j) & 1u);
                    if (arr[j])
                        memcpy(arr[j], saved[j], sizeof(float) * N);
                }
                memcpy(pb, savedp, sizeof(pb));
                b.steps = steps;
            }
        }
        assert_memory_equal(pa, pb, sizeof(pa));
        assert_memory_equal(a.m, b.m, sizeof(float) * N);
        assert_memory_equal(a.v, b.v, sizeof(float) * N);
        if (c->amsgrad)
            assert_memory_equal(a.vmax, b.vmax, sizeof(float) * N);
        pc_optim_state_free(&a);
        pc_optim_state_free(&b);
    }
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
        cmocka_unit_test(test_sgd_variants),
        cmocka_unit_test(test_sgd_long),
        cmocka_unit_test(test_schedules),
        cmocka_unit_test(test_adam_reference),
        cmocka_unit_test(test_adam_torch),
        cmocka_unit_test(test_adam_chunks),
        cmocka_unit_test(test_step_sgd_and_state),
        cmocka_unit_test(test_adam_lazy_sparseadam),
        cmocka_unit_test(test_adam_lazy_bitwise),
        cmocka_unit_test(test_adam_freeze),
        cmocka_unit_test(test_adam_freeze_late_entry),
        cmocka_unit_test(test_adam_variants_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
