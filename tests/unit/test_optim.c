/* test_optim: SGD (momentum, Nesterov, weight decay) against a reference written out
 * longhand in double-checked float steps, the changed-index list, and the schedules. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include <cmocka.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_variants),
        cmocka_unit_test(test_sgd_long),
        cmocka_unit_test(test_schedules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
