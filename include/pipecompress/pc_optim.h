/* pc_optim: the optimizer applied to a parameter shard (on servers, or on every worker in
 * allreduce mode), and the learning-rate schedule.
 *
 * SGD with momentum (PyTorch's convention):
 *   d = g + weight_decay * p
 *   m = momentum * m + d                (m starts at 0)
 *   p = p - lr * (nesterov ? d + momentum * m : m)
 * With momentum 0 the buffer is unused and p = p - lr * d.
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

typedef struct pc_optim_cfg {
    double lr;
    double momentum;
    bool nesterov;
    double weight_decay;
    pc_lr_schedule_t schedule;
    int64_t step;   /* PC_LR_STEP: iterations between decays */
    double gamma;   /* PC_LR_STEP: decay factor */
    int64_t warmup; /* linear warm-up iterations; 0 = none */
    int64_t total;  /* PC_LR_COSINE: iterations of the whole run */
} pc_optim_cfg_t;

/* A schedule's flag spelling ("cosine"), or "?" outside the table. Static string;
 * thread-safe. */
const char *pc_optim_schedule_name(int schedule);

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

/* True when a step changes only parameters whose gradient entry is non-zero (plain SGD:
 * no momentum, no weight decay): then updates are as sparse as the aggregated gradient. */
bool pc_optim_sparse_friendly(const pc_optim_cfg_t *cfg);

#ifdef __cplusplus
}
#endif
#endif /* PC_OPTIM_H */
