/* pc_optim: SGD with momentum, Nesterov and weight decay; learning-rate schedules. */
#include "config.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "pipecompress/pc_optim.h"

const char *pc_optim_schedule_name(int schedule)
{
    static const char *const names[] = {
#define SCHEDULE_NAME(name, text) text,
        PC_LR_SCHEDULE_TABLE(SCHEDULE_NAME)
#undef SCHEDULE_NAME
    };
    return schedule >= 0 && (size_t)schedule < sizeof(names) / sizeof(names[0]) ? names[schedule]
                                                                                : "?";
}

double pc_optim_lr(const pc_optim_cfg_t *cfg, int64_t t)
{
    if (t < 0)
        t = 0;
    if (cfg->warmup > 0 && t < cfg->warmup)
        return cfg->lr * (double)(t + 1) / (double)cfg->warmup;
    switch (cfg->schedule) {
    case PC_LR_STEP:
        return cfg->step > 0 ? cfg->lr * pow(cfg->gamma, (double)(t / cfg->step)) : cfg->lr;
    case PC_LR_COSINE:
        if (cfg->total <= 0)
            return cfg->lr;
        if (t >= cfg->total)
            return 0.0;
        return cfg->lr * 0.5 * (1.0 + cos(M_PI * (double)t / (double)cfg->total));
    case PC_LR_CONSTANT:
    default:
        return cfg->lr;
    }
}

/* The step on n <= SGD_BLOCK elements: new parameters into np (p is left as it was), new
 * momentum into mom. One element's arithmetic exactly as the reference loops in
 * test_optim; restrict and the fixed block let the compiler vectorize it. */
#define SGD_BLOCK 512
static void sgd_block(float lr, float mu, float wd, bool nesterov, const float *restrict p,
                      float *restrict mom, const float *restrict g, float *restrict np, size_t n)
{
    if (!mom) {
        for (size_t i = 0; i < n; i++)
            np[i] = p[i] - lr * (g[i] + wd * p[i]);
    } else if (nesterov) {
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * p[i];
            float m = mu * mom[i] + d;
            mom[i] = m;
            np[i] = p[i] - lr * (d + mu * m);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * p[i];
            float m = mu * mom[i] + d;
            mom[i] = m;
            np[i] = p[i] - lr * m;
        }
    }
}

size_t pc_optim_sgd(const pc_optim_cfg_t *cfg, float lr, float *p, float *mom, const float *g,
                    size_t n, uint32_t *changed)
{
    float mu = (float)cfg->momentum, wd = (float)cfg->weight_decay;
    if (mu == 0.0f)
        mom = NULL;
    /* The list is only worth keeping while fewer than half the entries changed (a sparse
     * update message of more would be larger than the dense one); past that, count only. */
    size_t nchanged = 0, keep = changed ? n / 2 + 1 : 0;
    float np[SGD_BLOCK];
    for (size_t b = 0; b < n; b += SGD_BLOCK) {
        size_t m = n - b < SGD_BLOCK ? n - b : SGD_BLOCK;
        float *pb = p + b;
        sgd_block(lr, mu, wd, cfg->nesterov, pb, mom ? mom + b : NULL, g + b, np, m);
        if (nchanged < keep) {
            for (size_t i = 0; i < m; i++) { /* branch-free compaction */
                changed[nchanged] = (uint32_t)(b + i);
                nchanged += np[i] != pb[i];
            }
        } else {
            size_t c = 0;
            for (size_t i = 0; i < m; i++)
                c += np[i] != pb[i];
            nchanged += c;
        }
        memcpy(pb, np, sizeof(float) * m);
    }
    return nchanged;
}

size_t pc_optim_sgd_sparse(const pc_optim_cfg_t *cfg, float lr, float *p, const float *g,
                           const uint32_t *idx, size_t k, uint32_t *changed)
{
    /* sgd_block's expression without momentum, wd included (0 here: g + 0 * p is g, but
     * the same expression keeps even the signs of zeros as pc_optim_sgd's). */
    float wd = (float)cfg->weight_decay;
    size_t nchanged = 0;
    for (size_t j = 0; j < k; j++) {
        uint32_t i = idx[j];
        float np = p[i] - lr * (g[i] + wd * p[i]);
        changed[nchanged] = i; /* branch-free compaction */
        nchanged += np != p[i];
        p[i] = np;
    }
    return nchanged;
}

bool pc_optim_sparse_friendly(const pc_optim_cfg_t *cfg)
{
    return cfg->momentum == 0.0 && cfg->weight_decay == 0.0;
}
