/* pc_optim: the optimizer applied to a parameter shard (on servers, or on every worker in
 * allreduce mode), and the learning-rate schedule.
 *
 * SGD with momentum (PyTorch's convention):
 *   d = g + weight_decay * p
 *   m = momentum * m + d                (m starts at 0)
 *   p = p - lr * (nesterov ? d + momentum * m : m)
 * With momentum 0 the buffer is unused and p = p - lr * d.
 *
 * Adam and AdamW, as torch.optim.Adam / AdamW (torch 1.13's single-tensor loop), at step t
 * (1-based: the steps this shard has taken, this one included), m, v (and vmax) from 0:
 *   AdamW: p = p * (1 - lr * weight_decay)          Adam: g = g + weight_decay * p
 *   m = b1 * m + (1 - b1) * g
 *   v = b2 * v + (1 - b2) * g * g
 *   amsgrad: vmax = max(vmax, v), and vmax stands for v below
 *   p = p + (-lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * in torch's float32 operations and order: the scalars (1 - lr * wd, 1 - b1, the bias
 * corrections, the step size) are computed in double as Python computes them and rounded
 * to float where torch's kernels take them; the two "x + a * y" updates of m and v are fused
 * multiply-adds, as torch's vectorised CPU kernels compute them (pc_optim.c says what was
 * measured against torch).
 *
 * Two variants for an error-compensated compressed aggregate (issue 47, item 3):
 * - freeze_after N > 0 (1-bit Adam's warm-up, then a frozen variance): from step N + 1 on,
 *   v keeps its value of step N and the bias correction of v stays 1 - b2^N; m, the
 *   parameters (and amsgrad's max, then constant) keep stepping with 1 - b1^t. An entry
 *   whose v is still 0 (its gradient 0 at every step so far) goes on moving v instead,
 *   until it is not 0, rather than step lr * m / eps at its first nonzero gradient.
 * - lazy (pc_optim_adam_lazy, the server's sparse path): only the entries that arrived
 *   step (m, v, vmax and the parameter, weight decay included); every other entry keeps its
 *   bits. The step count t is the tensor's, counted at every step whatever arrived, as
 *   torch.optim.SparseAdam's state['step']. Each stepped entry's arithmetic is the dense
 *   step's above, bitwise, so a step where every entry arrives is the dense step. It
 *   differs from SparseAdam's own arithmetic, which computes m += (1 - b1) * (g - m),
 *   v += (1 - b2) * (g * g - v) and p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) +
 *   eps): the same moments up to rounding, and eps scaled by sqrt(1 - b2^t) against ours
 *   (the eps of torch.optim.Adam, which the user's optimizer object gave); SparseAdam has
 *   no weight decay and no amsgrad, which act here on the arrived entries only.
 *
 * Schedule at iteration t (0-based): a linear warm-up over the first `warmup` iterations
 * (lr * (t + 1) / warmup), then constant, step (lr * gamma^floor(t / step)) or cosine
 * (lr * (1 + cos(pi * t / total)) / 2 over `total` iterations). */
#ifndef PC_OPTIM_H
#define PC_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipecompress/pc_flags.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The schedules: X(NAME, "flag spelling"), in enum order (PC_LR_CONSTANT = 0, ...). */
#define PC_LR_SCHEDULE_TABLE(X) X(CONSTANT, "constant") X(STEP, "step") X(COSINE, "cosine")

typedef enum pc_lr_schedule {
#define PC_LR_SCHEDULE_ENUM(name, text) PC_LR_##name,
    PC_LR_SCHEDULE_TABLE(PC_LR_SCHEDULE_ENUM)
#undef PC_LR_SCHEDULE_ENUM
} pc_lr_schedule_t;

/* "constant|step|cosine", for the --lr-schedule flag (from the table). */
#define PC_LR_SCHEDULE_CHOICES (PC_LR_SCHEDULE_TABLE(PC_FLAGS_CHOICE_TEXT) + 1)

/* The optimizers: X(NAME, "flag spelling"), in enum order (PC_OPTIM_SGD = 0, ...). */
#define PC_OPTIM_KIND_TABLE(X) X(SGD, "sgd") X(ADAM, "adam") X(ADAMW, "adamw")

typedef enum pc_optim_kind {
#define PC_OPTIM_KIND_ENUM(name, text) PC_OPTIM_##name,
    PC_OPTIM_KIND_TABLE(PC_OPTIM_KIND_ENUM)
#undef PC_OPTIM_KIND_ENUM
} pc_optim_kind_t;

/* "sgd|adam|adamw", for the --optimizer flag (from the table). */
#define PC_OPTIM_KIND_CHOICES (PC_OPTIM_KIND_TABLE(PC_FLAGS_CHOICE_TEXT) + 1)

/* One step's rule. Zero-initialised fields give plain SGD: kind PC_OPTIM_SGD is 0. The
 * runtime hands each chunk its own copy (pc_rt__chunk_optim), so a per-tensor rule (a
 * parameter group's lr or weight decay) is a per-chunk copy with other values. */
typedef struct pc_optim_cfg {
    double lr;
    double momentum; /* sgd only */
    bool nesterov;   /* sgd only */
    double weight_decay;
    pc_lr_schedule_t schedule;
    int64_t step;   /* PC_LR_STEP: iterations between decays */
    double gamma;   /* PC_LR_STEP: decay factor */
    int64_t warmup; /* linear warm-up iterations; 0 = none */
    int64_t total;  /* PC_LR_COSINE: iterations of the whole run */
    pc_optim_kind_t kind;
    double beta1, beta2;  /* adam(w): the moments' decay rates, each in [0, 1) */
    double eps;           /* adam(w): added to the denominator, finite and > 0 */
    bool amsgrad;         /* adam(w): the denominator from the largest v so far */
    bool lazy;            /* adam(w): a sparse aggregate steps only its arrived entries (the
                             server's choice: pc_optim_lazy, pc_optim_adam_lazy) */
    int64_t freeze_after; /* adam(w): v and its bias correction frozen after this many steps
                             of the shard (>= 0; 0 = never) */
} pc_optim_cfg_t;

/* The state a shard of n parameters carries between steps: the caller's n-float arrays.
 * SGD: m is the momentum buffer (NULL without momentum), v and vmax NULL. Adam(W): m, v
 * and (amsgrad) vmax, torch's exp_avg, exp_avg_sq and max_exp_avg_sq; steps is torch's
 * state['step'], kept by the caller: it counts this shard's steps, and a step's caller
 * adds 1 before it (torch's step_t += 1 comes first too). Chunks of one tensor take their
 * steps together, so they hold the same count. */
typedef struct pc_optim_state {
    float *m, *v, *vmax;
    uint64_t steps;
} pc_optim_state_t;

/* The arrays of a state, in the order checkpoints store them (m, v, vmax). */
#define PC_OPTIM_STATE_ARRAYS 3

/* A schedule's flag spelling ("cosine"), or "?" outside the table. Static string;
 * thread-safe. */
const char *pc_optim_schedule_name(int schedule);

/* An optimizer's flag spelling ("adamw"), or "?" outside the table. Static string;
 * thread-safe. */
const char *pc_optim_kind_name(int kind);

/* Parse --betas text "B1,B2" (two numbers, each finite and in [0, 1)) into *b1 and *b2
 * (written only on success). PC_OK, or PC_EUSAGE with a one-line message (without the
 * flag's name) in err. Thread-safe. */
int pc_optim_betas_parse(const char *text, double *b1, double *b2, char *err, size_t errlen);

/* Allocate st's arrays for n parameters under cfg, all zero: SGD, m when momentum is not
 * 0; Adam(W), m and v, and vmax with amsgrad; steps 0. PC_OK, or PC_ENOMEM with nothing
 * allocated (st all NULL). The arrays are the caller's: pc_optim_state_free. */
int pc_optim_state_alloc(const pc_optim_cfg_t *cfg, size_t n, pc_optim_state_t *st);

/* Free st's arrays (NULL ones skipped) and set them NULL. */
void pc_optim_state_free(pc_optim_state_t *st);

/* A view of st from element off on (its arrays advanced by off, NULL kept; the same
 * steps): a row of a matrix stepped row by row. Borrows st's arrays. Pure. */
pc_optim_state_t pc_optim_state_at(const pc_optim_state_t *st, size_t off);

/* st's arrays in checkpoint order (m, v, vmax), NULL where absent. Pure. */
void pc_optim_state_arrays(const pc_optim_state_t *st, float *arr[PC_OPTIM_STATE_ARRAYS]);

/* Learning rate at iteration t. Pure. */
double pc_optim_lr(const pc_optim_cfg_t *cfg, int64_t t);

/* One SGD step on n parameters with learning rate lr: p and mom (NULL allowed when
 * momentum is 0) updated in place from g. Deterministic: element by element, float
 * arithmetic in the order written above. Returns how many parameters changed value and,
 * when changed is not NULL and fewer than half of them changed, writes their indices
 * there in ascending order (n entries must fit; with half or more changed the list is
 * incomplete: a sparse update would not pay then). */
size_t pc_optim_sgd(const pc_optim_cfg_t *cfg, float lr, float *p, float *mom, const float *g,
                    size_t n, uint32_t *changed);

/* The step of pc_optim_sgd on the k entries idx[0..k) only (ascending or not, distinct),
 * for a sparse-friendly cfg (pc_optim_sparse_friendly: no momentum, no weight decay), where
 * every other entry's step would leave its parameter as it is because its gradient is 0:
 * then p ends bitwise as pc_optim_sgd over all n leaves it. Writes the indices whose
 * parameter changed value to changed (room for k; always complete, in idx's order) and
 * returns their count. O(k). The caller owns every buffer; thread-safe on distinct p. */
size_t pc_optim_sgd_sparse(const pc_optim_cfg_t *cfg, float lr, float *p, const float *g,
                           const uint32_t *idx, size_t k, uint32_t *changed);

/* One step of cfg's optimizer on n parameters p with gradient g and state st (arrays as
 * pc_optim_state_alloc gives them for cfg; Adam(W) needs st->steps >= 1, this step's
 * number). lr: the schedule's rate (pc_optim_lr); SGD steps with (float)lr (pc_optim_sgd),
 * Adam(W) computes its scalars from the double as torch does from the Python float.
 * Deterministic and element by element: a shard split into pieces (pc_optim_state_at)
 * and stepped piece by piece ends bitwise as stepped whole. Returns how many parameters
 * changed value, and the list in changed as pc_optim_sgd does (NULL: no list). The
 * caller owns every buffer; thread-safe on distinct p and state. */
size_t pc_optim_step(const pc_optim_cfg_t *cfg, double lr, float *p, const pc_optim_state_t *st,
                     const float *g, size_t n, uint32_t *changed);

/* True when a step changes only parameters whose gradient entry is non-zero (plain SGD:
 * no momentum, no weight decay): then updates are as sparse as the aggregated gradient.
 * Never for Adam(W): m and v move every parameter whose moments are not 0. */
bool pc_optim_sparse_friendly(const pc_optim_cfg_t *cfg);

/* Clipping by the global norm, torch.nn.utils.clip_grad_norm_'s rule split for gradients
 * held in pieces (the servers' chunks): each piece's sum of squares (pc_optim_sumsq, in
 * double, g[0], g[1], ... in that order: the same bits for the same floats every time;
 * pc_optim_sumsq_at over the listed entries only, which equals pc_optim_sumsq of a g that
 * is zero elsewhere when idx is ascending: adding +0.0 changes no sum), the pieces' sums
 * added in a fixed order by the caller, total = sqrt(sum); then pc_optim_clip_coef(max,
 * total) = max / (total + 1e-6) clamped at 1 (torch's clip_coef_clamped; NaN when total
 * is NaN, or both are +inf, as torch's), and every gradient multiplied by it (by
 * (float)coef when coef < 1 or NaN; a coefficient of 1 changes no bit, so callers skip
 * it). Torch computes the norms and the coefficient in float32: results agree to float
 * tolerance, not bitwise. Pure and thread-safe. */
double pc_optim_sumsq(const float *g, size_t n);
double pc_optim_sumsq_at(const float *g, const uint32_t *idx, size_t k);
double pc_optim_clip_coef(double max_norm, double total_norm);

/* True for Adam(W) with cfg->lazy: a sparse aggregate is stepped by pc_optim_adam_lazy on
 * its arrived entries only (a dense one, by pc_optim_step, as without lazy). Pure. */
bool pc_optim_lazy(const pc_optim_cfg_t *cfg);

/* The lazy Adam(W) step (see the top of the file) on the k entries idx[0..k) of p (distinct,
 * in any order; the entries that arrived, whatever their value in g): each as
 * pc_optim_step steps an entry, bitwise, with st->steps >= 1 the tensor's step number
 * (counted by the caller at every step, whatever arrived); every other entry of p, m, v
 * and vmax is left untouched. cfg: adam or adamw (freeze_after applies; cfg->lazy is not
 * read). Writes the indices whose parameter changed value to changed (room for k;
 * complete, in idx's order) and returns their count. O(k). The caller owns every buffer;
 * thread-safe on distinct p and state. */
size_t pc_optim_adam_lazy(const pc_optim_cfg_t *cfg, double lr, float *p,
                          const pc_optim_state_t *st, const float *g, const uint32_t *idx, size_t k,
                          uint32_t *changed);

#ifdef __cplusplus
}
#endif
#endif /* PC_OPTIM_H */
