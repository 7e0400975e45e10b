/* pc_optim: SGD with momentum, Nesterov and weight decay; Adam and AdamW in torch's float32
 * order, with their lazy (arrived entries only) and frozen-variance variants; learning-rate
 * schedules. */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_error.h"
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

const char *pc_optim_kind_name(int kind)
{
    static const char *const names[] = {
#define KIND_NAME(name, text) text,
        PC_OPTIM_KIND_TABLE(KIND_NAME)
#undef KIND_NAME
    };
    return kind >= 0 && (size_t)kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "?";
}

/* One beta of --betas from s up to its end (',' or NUL) into *b; the end in *end. */
static int beta_parse(const char *text, const char *s, int which, double *b, const char **end,
                      char *err, size_t errlen)
{
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (e == s || (*e != '\0' && *e != ',') || errno == ERANGE)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "'%s': expected two numbers B1,B2 such as 0.9,0.999", text);
    /* torch refuses the same: "Invalid beta parameter at index %d" */
    if (!(v >= 0.0 && v < 1.0))
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "'%s': beta %d is %g; each beta must be in [0, 1)", text, which, v);
    *b = v;
    *end = e;
    return PC_OK;
}

int pc_optim_betas_parse(const char *text, double *b1, double *b2, char *err, size_t errlen)
{
    double v1, v2;
    const char *e;
    int rc = beta_parse(text, text, 1, &v1, &e, err, errlen);
    if (rc == PC_OK && *e != ',')
        rc = pc_error_fmt(PC_EUSAGE, err, errlen,
                          "'%s': expected two numbers B1,B2 such as 0.9,0.999", text);
    if (rc == PC_OK)
        rc = beta_parse(text, e + 1, 2, &v2, &e, err, errlen);
    if (rc == PC_OK && *e != '\0')
        rc = pc_error_fmt(PC_EUSAGE, err, errlen,
                          "'%s': expected two numbers B1,B2 such as 0.9,0.999", text);
    if (rc != PC_OK)
        return rc;
    *b1 = v1;
    *b2 = v2;
    return PC_OK;
}

/* Whether cfg steps with Adam's moments (adam or adamw). Pure. */
static bool is_adam(const pc_optim_cfg_t *cfg)
{
    return cfg->kind == PC_OPTIM_ADAM || cfg->kind == PC_OPTIM_ADAMW;
}

int pc_optim_state_alloc(const pc_optim_cfg_t *cfg, size_t n, pc_optim_state_t *st)
{
    bool adam = is_adam(cfg);
    size_t bytes = sizeof(float) * (n ? n : 1);
    *st = (pc_optim_state_t){0};
    if (adam || cfg->momentum != 0)
        st->m = calloc(1, bytes);
    if (adam)
        st->v = calloc(1, bytes);
    if (adam && cfg->amsgrad)
        st->vmax = calloc(1, bytes);
    if ((!st->m && (adam || cfg->momentum != 0)) || (adam && !st->v) ||
        (adam && cfg->amsgrad && !st->vmax)) {
        pc_optim_state_free(st);
        return PC_ENOMEM;
    }
    return PC_OK;
}

void pc_optim_state_free(pc_optim_state_t *st)
{
    free(st->m);
    free(st->v);
    free(st->vmax);
    st->m = st->v = st->vmax = NULL;
}

pc_optim_state_t pc_optim_state_at(const pc_optim_state_t *st, size_t off)
{
    return (pc_optim_state_t){.m = st->m ? st->m + off : NULL,
                              .v = st->v ? st->v + off : NULL,
                              .vmax = st->vmax ? st->vmax + off : NULL,
                              .steps = st->steps};
}

void pc_optim_state_arrays(const pc_optim_state_t *st, float *arr[PC_OPTIM_STATE_ARRAYS])
{
    arr[0] = st->m;
    arr[1] = st->v;
    arr[2] = st->vmax;
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

/* After a block's step: count the m entries at b.. whose new value np differs from the old
 * pb, listing their indices in changed while the count is under keep (see pc_optim_sgd),
 * and copy the new values over the old. */
static size_t block_commit(float *restrict pb, const float *restrict np, size_t m, size_t b,
                           uint32_t *changed, size_t nchanged, size_t keep)
{
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
    return nchanged;
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
        sgd_block(lr, mu, wd, cfg->nesterov, p + b, mom ? mom + b : NULL, g + b, np, m);
        nchanged = block_commit(p + b, np, m, b, changed, nchanged, keep);
    }
    return nchanged;
}

/* Adam(W)'s float32 scalars, from the doubles as torch's kernels receive them: Python
 * computes 1 - lr * wd, 1 - b1, 1 - b2, the bias corrections and the step size in double,
 * and a CPU kernel converts a Python scalar to the tensor's type (float) once. */
typedef struct adam_k {
    float decay;    /* AdamW: param.mul_(1 - lr * wd) */
    float wd;       /* Adam: grad.add(param, alpha=wd); 0 = no such add (torch skips it) */
    float b1, omb1; /* exp_avg.mul_(b1).add_(grad, alpha=1 - b1) */
    float b2, omb2; /* exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2) */
    float bc2_sqrt; /* math.sqrt(1 - b2 ** step) */
    float eps;      /* denom.add_(eps) */
    float neg_step; /* -(lr / (1 - b1 ** step)): addcdiv_'s value */
    bool adamw, amsgrad;
    bool freeze; /* past cfg->freeze_after: v kept as it is (where not 0), bc2_sqrt that step's */
} adam_k_t;

/* The scalars of step number `steps` (1-based) at rate lr. Pure. */
static adam_k_t adam_scalars(const pc_optim_cfg_t *cfg, double lr, uint64_t steps)
{
    double t = (double)steps; /* torch: step_t.item(), a float tensor's count as a double */
    /* freeze_after: v's bias correction stays that of the last step that moved v */
    bool freeze = cfg->freeze_after > 0 && steps > (uint64_t)cfg->freeze_after;
    double tv = freeze ? (double)cfg->freeze_after : t;
    double bc1 = 1.0 - pow(cfg->beta1, t), bc2 = 1.0 - pow(cfg->beta2, tv);
    double step_size = lr / bc1;
    bool adamw = cfg->kind == PC_OPTIM_ADAMW;
    return (adam_k_t){.decay = adamw ? (float)(1.0 - lr * cfg->weight_decay) : 1.0f,
                      .wd = adamw ? 0.0f : (float)cfg->weight_decay,
                      .b1 = (float)cfg->beta1,
                      .omb1 = (float)(1.0 - cfg->beta1),
                      .b2 = (float)cfg->beta2,
                      .omb2 = (float)(1.0 - cfg->beta2),
                      .bc2_sqrt = (float)sqrt(bc2),
                      .eps = (float)cfg->eps,
                      .neg_step = (float)-step_size,
                      .adamw = adamw,
                      .amsgrad = cfg->amsgrad,
                      .freeze = freeze};
}

/* torch's x + a * y in add_(y, alpha=a) and addcmul_(y1, y2, value) (y = value * y1): one
 * rounding, as its vectorised CPU kernels compute it (Vectorized::fmadd; addcmul's
 * multiply-add contracted). fmaf is exact IEEE whatever the compiler's -ffp-contract. */
static inline float torch_madd(float x, float a, float y)
{
    return fmaf(a, y, x);
}

/* One element's Adam(W) step, each operation a torch kernel's: returns the new parameter
 * (p is the old one's value), m, v and (vmax not NULL) vmax updated in place. The dense
 * blocks and the lazy step both take it, so their arithmetic cannot drift apart. */
static inline float adam_one(const adam_k_t *k, float p, float *m, float *v, float *vmax, float g)
{
    float pi = k->adamw ? p * k->decay : p;
    float gi = k->wd != 0.0f ? torch_madd(g, k->wd, pi) : g;
    float mi = torch_madd(*m * k->b1, k->omb1, gi);
    /* Frozen: v keeps its bits, but an entry with no history yet (v still 0: its gradient
     * was 0 at every step so far) goes on learning it, else its first nonzero gradient
     * would step lr * m / eps. */
    float vi = k->freeze && *v != 0.0f ? *v : torch_madd(*v * k->b2, k->omb2 * gi, gi);
    *m = mi;
    *v = vi;
    if (vmax) { /* torch.maximum: a NaN v wins, as there */
        vi = *vmax >= vi ? *vmax : vi;
        *vmax = vi;
    }
    float denom = sqrtf(vi) / k->bc2_sqrt + k->eps;
    return pi + k->neg_step * mi / denom;
}

/* Adam(W) on n <= ADAM_BLOCK elements: new parameters into np (p left as it was), the
 * moments updated in place. Element by element (adam_one). */
#define ADAM_BLOCK 512
static void adam_block(const adam_k_t *k, const float *restrict p, float *restrict m,
                       float *restrict v, float *restrict vmax, const float *restrict g,
                       float *restrict np, size_t n)
{
    for (size_t i = 0; i < n; i++)
        np[i] = adam_one(k, p[i], &m[i], &v[i], vmax ? &vmax[i] : NULL, g[i]);
}

size_t pc_optim_step(const pc_optim_cfg_t *cfg, double lr, float *p, const pc_optim_state_t *st,
                     const float *g, size_t n, uint32_t *changed)
{
    if (!is_adam(cfg))
        return pc_optim_sgd(cfg, (float)lr, p, st->m, g, n, changed);
    assert(st->m && st->v && (!cfg->amsgrad || st->vmax) && st->steps >= 1);
    adam_k_t k = adam_scalars(cfg, lr, st->steps);
    float *vmax = cfg->amsgrad ? st->vmax : NULL;
    size_t nchanged = 0, keep = changed ? n / 2 + 1 : 0; /* as pc_optim_sgd's */
    float np[ADAM_BLOCK];
    for (size_t b = 0; b < n; b += ADAM_BLOCK) {
        size_t m = n - b < ADAM_BLOCK ? n - b : ADAM_BLOCK;
        adam_block(&k, p + b, st->m + b, st->v + b, vmax ? vmax + b : NULL, g + b, np, m);
        nchanged = block_commit(p + b, np, m, b, changed, nchanged, keep);
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
    return cfg->kind == PC_OPTIM_SGD && cfg->momentum == 0.0 && cfg->weight_decay == 0.0;
}

double pc_optim_sumsq(const float *g, size_t n)
{
    double s = 0.0; /* in index order: the same bits whoever calls, however it is chunked */
    for (size_t i = 0; i < n; i++)
        s += (double)g[i] * (double)g[i];
    return s;
}

double pc_optim_sumsq_at(const float *g, const uint32_t *idx, size_t k)
{
    double s = 0.0;
    for (size_t j = 0; j < k; j++)
        s += (double)g[idx[j]] * (double)g[idx[j]];
    return s;
}

double pc_optim_clip_coef(double max_norm, double total_norm)
{
    /* torch 1.13: clip_coef = max_norm / (total_norm + 1e-6); clamp(clip_coef, max=1.0),
     * which keeps a NaN (a gradient that is not finite then becomes NaN, as torch's). */
    double c = max_norm / (total_norm + 1e-6);
    return c > 1.0 ? 1.0 : c;
}

bool pc_optim_lazy(const pc_optim_cfg_t *cfg)
{
    return is_adam(cfg) && cfg->lazy;
}

size_t pc_optim_adam_lazy(const pc_optim_cfg_t *cfg, double lr, float *p,
                          const pc_optim_state_t *st, const float *g, const uint32_t *idx, size_t k,
                          uint32_t *changed)
{
    assert(is_adam(cfg) && st->m && st->v && (!cfg->amsgrad || st->vmax) && st->steps >= 1);
    adam_k_t a = adam_scalars(cfg, lr, st->steps);
    float *vmax = cfg->amsgrad ? st->vmax : NULL;
    size_t nchanged = 0;
    for (size_t j = 0; j < k; j++) {
        uint32_t i = idx[j];
        float np = adam_one(&a, p[i], &st->m[i], &st->v[i], vmax ? &vmax[i] : NULL, g[i]);
        changed[nchanged] = i; /* branch-free compaction */
        nchanged += np != p[i];
        p[i] = np;
    }
    return nchanged;
}
