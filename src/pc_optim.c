/* pc_optim: SGD with momentum, Nesterov and weight decay; learning-rate schedules. */
#include "config.h"

#include <math.h>

#include "pipecompress/pc_optim.h"

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

/* Record index i when its parameter changed. */
#define NOTE(i, changed_now)                                                                       \
    do {                                                                                           \
        if (changed_now) {                                                                         \
            if (changed)                                                                           \
                changed[nchanged] = (uint32_t)(i);                                                 \
            nchanged++;                                                                            \
        }                                                                                          \
    } while (0)

size_t pc_optim_sgd(const pc_optim_cfg_t *cfg, float lr, float *p, float *mom, const float *g,
                    size_t n, uint32_t *changed)
{
    float mu = (float)cfg->momentum, wd = (float)cfg->weight_decay;
    size_t nchanged = 0;
    if (mu == 0.0f || !mom) {
        for (size_t i = 0; i < n; i++) {
            float d = g[i] + wd * p[i];
            float np = p[i] - lr * d;
            NOTE(i, np != p[i]);
            p[i] = np;
        }
        return nchanged;
    }
    for (size_t i = 0; i < n; i++) {
        float d = g[i] + wd * p[i];
        float m = mu * mom[i] + d;
        mom[i] = m;
        float np = p[i] - lr * (cfg->nesterov ? d + mu * m : m);
        NOTE(i, np != p[i]);
        p[i] = np;
    }
    return nchanged;
}
#undef NOTE

bool pc_optim_sparse_friendly(const pc_optim_cfg_t *cfg)
{
    return cfg->momentum == 0.0 && cfg->weight_decay == 0.0;
}
