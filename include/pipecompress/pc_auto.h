/* pc_auto: --mode auto. At start-up, measure what the cost model needs on the job's own
 * ranks and links, predict every mode (pc_cost), and resolve the configuration to the
 * mode that trains the most samples per second.
 *
 * What is measured (doc/scaling.md, "--mode auto"):
 *   - compute: every rank profiles one forward and backward pass of the model at the
 *     same time (pc_model_profile, or a binding's own hooks), so the times hold what the
 *     ranks' sharing of cores costs; per layer, the slowest rank's time is used;
 *   - the link: a ping-pong between rank 0 and the first rank on another host (by host
 *     name; rank 1 when all share one host) of a small message (latency) and of 4 MiB
 *     each way (bandwidth: the slower direction);
 *   - the codecs (pc_cost_measure_codecs on rank 0's gradient, as the runtime chunks it)
 *     and the server's aggregation, step and pull (pc_cost_measure_server) on rank 0,
 *     while the other ranks wait without spinning.
 * The candidates are the allreduce (every rank a worker), and with --servers S (S below
 * the ranks) parameter servers without compression, with top-k 1 % or DGC 0.1 %
 * pipelined, and top-k 1 % with momentum on the servers. Rank 0 predicts and chooses; the
 * choice and the figures are broadcast, so every rank resolves cfg alike. The choice
 * depends on timings: the run is reproducible with the flags result.flags names (a
 * checkpoint's too: --mode auto refuses --resume). */
#ifndef PC_AUTO_H
#define PC_AUTO_H

#include <stdbool.h>
#include <stddef.h>

#include <mpi.h>

#include "pipecompress/pc_config.h"
#include "pipecompress/pc_cost.h"
#include "pipecompress/pc_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The kept fractions of the candidates' codecs: the e2e grid's (doc/benchmarks.md). */
#define PC_AUTO_TOPK_RATIO 0.01
#define PC_AUTO_DGC_RATIO  0.001

/* Bytes of the bandwidth probe's message (each direction). */
#define PC_AUTO_LINK_BYTES (4 << 20)

/* What a rank brings to pc_auto_choose: its compute profile, and the model's tensors
 * (registration order, as pc_worker_register sees them; rank 0's gradients, as the
 * profile's backward left them, are what the codecs are timed on). Borrowed for the call. */
typedef struct pc_auto_probe {
    const pc_cost_layer_t *layers; /* nlayers, forward order (pc_model_profile) */
    int nlayers;
    const pc_plan_tensor_t *tensors; /* ntensors; .grad read on rank 0 */
    const int *tensor_layer;         /* per tensor: its layer */
    int ntensors;
    int reps; /* timed repetitions of each measurement (>= 1; 3 is plenty) */
} pc_auto_probe_t;

typedef struct pc_auto_result {
    pc_cost_choice_t choice;   /* every candidate's prediction; choice.best was chosen */
    pc_cost_layer_t compute;   /* sums over the layers of the slowest ranks' times */
    pc_cost_link_t link;       /* the link the predictions used */
    int link_peer;             /* the rank rank 0 measured the link with; -1: one rank */
    bool link_remote;          /* the peer is on another host */
    char link_host[64];        /* the peer's host name ("" with one rank) */
    double seconds;            /* the probe's time, from the call to the choice */
    char flags[2 * PC_CONFIG_SPEC_LEN]; /* the choice as fixed flags ("--mode ps --compress
                                          * dgc:ratio=0.001,momentum=0.9 --pipeline on") */
} pc_auto_result_t;

/* The flags --mode auto cannot take, checked before any measuring: --compress and
 * --pipeline (auto chooses them), --resume (the probe might choose a mode other than the
 * checkpoint's), --servers that leave no worker. PC_OK, or PC_EUSAGE with a one-line
 * message naming the flag. cfg->mode must be PC_MODE_AUTO (else PC_EINVAL). Pure;
 * thread-safe. */
int pc_auto_check(const pc_config_t *cfg, int world_size, char *err, size_t errlen);

/* Measure, predict, choose, and resolve cfg (mode, servers, compress, pipeline, momentum;
 * the flags set are marked as not given, so pc_runtime_check_config sees the choice as
 * defaults). Collective over comm: every rank calls it with its own probe, from one
 * thread, before any other communication of the job's runtime (the link probe's
 * messages use PC_COMM_PINGPONG_TAG on a duplicate of comm). The momentum of cfg
 * (--momentum) goes where the chosen mode applies momentum: the workers' momentum
 * correction of topk and dgc, else the servers' or the allreduce's optimizer. On PC_OK,
 * on every rank, cfg is resolved and *out holds the same figures. Errors: PC_EINVAL (a
 * cfg not in auto mode, a bad probe, ranks with different numbers of layers), PC_ENOMEM,
 * PC_EMPI, or a measurement's error, the same code on every rank with a message in err
 * (rank 0's, or naming the rank that failed); cfg is then untouched. */
int pc_auto_choose(pc_config_t *cfg, MPI_Comm comm, const pc_auto_probe_t *probe,
                   pc_auto_result_t *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* PC_AUTO_H */
