/* pc_auto: --mode auto. At start-up, measure what the cost model needs on the job's own
 * ranks and links, predict every mode (pc_cost), and resolve the configuration to the
 * mode that trains the most samples per second.
 *
 * What is measured (doc/scaling.md, "--mode auto"):
 *   - compute, per layout: every rank profiles one forward and backward pass of the model
 *     at the same time (pc_model_profile, or a binding's own hooks): the allreduce's, where
 *     every rank computes; then, with the probe's profile callback, the parameter-server
 *     layout's workers profile it again while its servers wait without spinning. The
 *     times hold what the ranks' sharing of cores costs; per layer, the ranks' mean is
 *     used, scaled to the slowest rank's whole pass (the slowest rank's time per layer,
 *     summed, would count every rank's pauses where ranks take turns on cores);
 *   - the machines: ranks on one kernel (the same boot id, whatever their host names:
 *     emulated nodes are one machine) and the most cores one of them may use (affinity).
 *     Where a machine's threads outnumber its cores, a prediction is at least every
 *     thread's CPU time of an iteration over those cores (pc_auto_cores_bound);
 *   - the link: a ping-pong between rank 0 and the first rank on another host (by host
 *     name; rank 1 when all share one host) of a small message (latency) and of 4 MiB
 *     each way (bandwidth: the slower direction);
 *   - the codecs (pc_cost_measure_codecs on rank 0's gradient, as the runtime chunks it)
 *     and the server's aggregation, step and pull (pc_cost_measure_server) on rank 0,
 *     while the other ranks wait without spinning.
 * The candidates are the allreduce (every rank a worker), and with --servers S (S below
 * the ranks) parameter servers without compression, with top-k 1 % or DGC 0.1 %
 * pipelined, top-k 1 % with momentum on the servers, and PowerSGD rank 2 pipelined (its
 * matrices: the probe's tensors with whole_rows set, as pc_worker_set_rows gives the
 * runtime). With --compressors N (above 1) the pipelined parameter-server modes are
 * predicted with a pool of N compressor threads (pc_cost_predict_pool); with --compressors
 * auto each of them with the least pool whose predicted compression fits under the backward
 * pass (pc_cost_pool_size), at most the cores free on the most crowded machine
 * (pc_auto_pool_cap); the pool is assumed to divide the work perfectly (nothing measures
 * its efficiency here). A choice without a pool (the allreduce) sets --compressors 1, with
 * a one-line note where N or auto was given. Rank 0 predicts and chooses; the
 * choice and the figures are broadcast, so every rank resolves cfg alike. The choice
 * depends on timings: the run is reproducible with the flags result.flags names (a
 * checkpoint's too: --mode auto refuses --resume). */
#ifndef PC_AUTO_H
#define PC_AUTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <mpi.h>

#include "pipecompress/pc_comm.h"
#include "pipecompress/pc_config.h"
#include "pipecompress/pc_cost.h"
#include "pipecompress/pc_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The kept fractions of the candidates' codecs: the e2e grid's (doc/benchmarks.md). */
#define PC_AUTO_TOPK_RATIO 0.01
#define PC_AUTO_DGC_RATIO  0.001
/* The rank of the powersgd candidate: the rank torch's powerSGD_hook is most run at beyond
 * its default 1, and the one doc/benchmarks.md measures. */
#define PC_AUTO_POWERSGD_RANK 2

/* Bytes of the bandwidth probe's message (each direction) of --mode auto. */
#define PC_AUTO_LINK_BYTES (4 << 20)

/* Longest codec spec of a measurement (two numbers of up to 24 characters and the
 * names). */
#define PC_AUTO_SPEC_LEN 96

/* Most layers a measurement holds. */
#define PC_AUTO_MAX_LAYERS 256

/* Most kinds of machine a measurement tells apart (machines with the same ranks, servers
 * and cores are one kind); beyond it, the most crowded kinds are kept. */
#define PC_AUTO_MAX_MACHINES 32

/* Profile one forward and backward pass of the probe's model again into
 * layers[0..nlayers) (seconds per layer, forward order: the probe's layers). ctx is the
 * probe's. pc_auto_measure calls it on the parameter-server layout's workers (the ranks
 * below size - servers), at once, while that layout's servers wait without spinning.
 * Returns PC_OK or an error code; the measurement then fails on every rank. */
typedef int (*pc_auto_profile_fn)(void *ctx, pc_cost_layer_t *layers, int nlayers);

/* What a rank brings to the measurement: its compute profile, and the model's tensors
 * (registration order, as pc_worker_register sees them; rank 0's gradients, as the
 * profile's backward left them, are what the codecs are timed on). Borrowed for the call. */
typedef struct pc_auto_probe {
    const pc_cost_layer_t *layers; /* nlayers (1..PC_AUTO_MAX_LAYERS), forward order
                                    * (pc_model_profile), every rank profiling at once: the
                                    * allreduce layout's compute */
    int nlayers;
    const pc_plan_tensor_t *tensors; /* ntensors; .grad read on rank 0; .whole_rows: the
                                      * tensor's rows (pc_worker_set_rows'), 0 for none */
    const int *tensor_layer;         /* per tensor: its layer */
    int ntensors;
    pc_auto_profile_fn profile; /* the parameter-server layout's profile (NULL on every
                                 * rank: layers serve that layout too) */
    void *ctx;                  /* profile's */
} pc_auto_probe_t;

/* A kind of machine of the job: ranks on one kernel (pc_auto.h's header comment). */
typedef struct pc_auto_machine {
    int count;                   /* machines of this kind */
    int ranks;                   /* ranks on each, */
    int servers;                 /* of which the parameter-server layout's servers (the
                                  * job's last S ranks) */
    int cores;                   /* the most cores one of its ranks may use (affinity) */
    char host[PC_COMM_HOST_LEN]; /* the first such machine's first rank's host name */
} pc_auto_machine_t;

/* How to measure: the same on every rank. */
typedef struct pc_auto_measure_cfg {
    size_t chunk_bytes;        /* --chunk-bytes (the runtime's chunks; >= 4) */
    size_t compress_min_bytes; /* --compress-min-bytes */
    double topk_ratio;         /* top-k's kept fraction, (0, 1] */
    double dgc_ratio;          /* DGC's kept fraction, (0, 1] */
    double momentum;           /* the workers' momentum correction of topk and dgc, [0, 1) */
    int servers;               /* the server's share of the elements is 1 / servers (>= 1) */
    size_t link_bytes;         /* the bandwidth probe's message (>= 4096) */
    int reps;                  /* timed repetitions of each measurement (>= 1) */
    uint64_t seed;             /* the codecs' seed */
} pc_auto_measure_cfg_t;

/* What was measured; the same on every rank. */
typedef struct pc_auto_measured {
    int nlayers;
    pc_cost_layer_t layers[PC_AUTO_MAX_LAYERS]; /* per layer, the ranks' mean, scaled to the
                                                 * slowest rank's pass */
    pc_cost_layer_t compute;                    /* their sums */
    int ps_workers; /* the ranks that profiled layers_ps (the parameter-server layout's
                     * workers); 0: not profiled (no callback, or no such layout), and
                     * layers_ps is layers */
    pc_cost_layer_t layers_ps[PC_AUTO_MAX_LAYERS]; /* the same of theirs */
    pc_cost_layer_t compute_ps;                    /* their sums */
    int servers;                                   /* the layout's S (the measure cfg's) */
    int nmachines;                                 /* kinds of machine */
    pc_auto_machine_t machine[PC_AUTO_MAX_MACHINES];
    int link_peer;                    /* the rank rank 0 measured the link with; -1: one rank */
    bool link_remote;                 /* the peer is on another host */
    char link_host[PC_COMM_HOST_LEN]; /* the peer's host name ("" with one rank) */
    double rtt_small;                 /* median round trips, seconds: 8 bytes each way, */
    double rtt_ab;                    /* link_bytes from 0 to the peer (8 back), */
    double rtt_ba;                    /* and from the peer to 0 */
    double bw_ab, bw_ba; /* bytes per second each way: (link_bytes - 8) / (rtt - rtt_small) */
    pc_cost_link_t link; /* the slower direction, latency rtt_small / 2; one rank: an
                          * infinite bandwidth and no latency */
    char codec_spec[PC_COST_CODECS][PC_AUTO_SPEC_LEN]; /* the specs timed, per slot of
                                                        * PC_COST_CODEC_TABLE */
    pc_cost_codec_rate_t codec[PC_COST_CODECS];
    pc_cost_lowrank_t lowrank; /* powersgd's matrices and rates beyond round 1 */
    pc_cost_chunks_t chunks;   /* the plan the codecs were timed on */
    size_t server_n;           /* the server's measurement: chunks of this many elements */
    size_t server_total;       /* in passes over this many (its share) */
    pc_cost_server_rate_t server;
    double seconds;                      /* the measurement's time (rank 0) */
    char crowded_host[PC_COMM_HOST_LEN]; /* the machine with the most ranks per core they may
                                          * use (its first rank's host name), */
    int crowded_ranks;                   /* its ranks, */
    int crowded_cores;                   /* and the most cores one of them may run on (affinity) */
} pc_auto_measured_t;

/* Measure what the cost model needs, on the job's own ranks and links (the header's
 * comment says what and where). Collective over comm: every rank calls it with the same
 * mc and its own probe, from one thread (the link probe's messages use
 * PC_COMM_PINGPONG_TAG on a duplicate of comm). On PC_OK every rank holds the same *out.
 * Errors: PC_EINVAL (bad arguments or probe on some rank, ranks with different numbers of
 * layers), PC_ENOMEM, PC_EMPI, or a measurement's error: the same code on every rank,
 * with a message in err (rank 0's, or naming the rank that failed). */
int pc_auto_measure(MPI_Comm comm, const pc_auto_measure_cfg_t *mc, const pc_auto_probe_t *probe,
                    pc_auto_measured_t *out, char *err, size_t errlen);

/* A cost model (pc_cost_create) of m's rates for probe's tensors, over link (NULL: m's),
 * with the compute of the parameter-server layout (m->layers_ps) when ps_layout, else of
 * the allreduce's (m->layers). *out is the caller's (pc_cost_destroy). PC_OK or
 * pc_cost_create's error. Thread-safe. */
int pc_auto_cost(const pc_auto_measured_t *m, const pc_auto_probe_t *probe, size_t chunk_bytes,
                 size_t compress_min_bytes, const pc_cost_link_t *link, bool ps_layout,
                 pc_cost_t **out);

/* The shared cores' bound on an iteration of `mode` predicted as *pred on m's machines
 * (the allreduce: every rank a worker; the other modes: m->servers servers, the job's last
 * ranks): the largest, over the kinds of machine whose threads outnumber their cores
 * (1 + N per worker, N = pred->compressors, at least 1: its backprop thread and its
 * compressor or communication threads; one per server), of every thread's CPU time in one
 * iteration over the
 * cores C: (min(W, C) compute + W x + S y) / C for W workers and S servers there, where
 * compute is pred's (profiled with those W busy: W passes take min(W, C) cores' time), x
 * the worker's other work (pred->compress; the allreduce's also its communication thread,
 * which spins in MPI_Allreduce for the ring's time, and its local steps) and y a server's
 * (pred->server_busy). 0 where every machine has a core per thread. Pure; thread-safe. */
double pc_auto_cores_bound(const pc_auto_measured_t *m, pc_cost_mode_t mode,
                           const pc_cost_result_t *pred);

/* The most compressor threads --compressors auto may give a worker on m's machines: on
 * each kind of machine with workers (the parameter-server layout's: ranks less servers),
 * its cores less one per server and one per worker's backprop thread, split over its
 * workers (the runtime's rule for auto, pc_runtime.c); the least over the kinds, clamped
 * to 1..PC_CONFIG_COMPRESSORS_AUTO_CAP. Pure; thread-safe. */
int pc_auto_pool_cap(const pc_auto_measured_t *m);

/* Bytes of a rank's machine key (pc_auto_group_machines): "boot:" and its kernel's boot
 * id, or "host:" and its host name where the boot id cannot be read; NUL-terminated. */
#define PC_AUTO_KEY_LEN PC_COMM_HOST_LEN

/* Group a job's `size` ranks into machines, as pc_auto_measure does after gathering each
 * rank's key (keys + r x PC_AUTO_KEY_LEN), host name (hosts + r x PC_COMM_HOST_LEN) and the
 * cores it may use (cores[r]): the ranks whose keys are equal are one machine; its servers
 * are those among the job's last `servers` ranks (the parameter-server layout's; all of
 * them where servers >= size), its cores the most any of its ranks may use (at least 1).
 * Machines alike in ranks, servers and cores are one kind (count), kinds in the order of
 * their machines' first ranks and named by that rank's host; past PC_AUTO_MAX_MACHINES
 * kinds, the most crowded (ranks per core) are kept. Writes m->nmachines, m->machine[] and
 * m->crowded_host, _ranks, _cores (the first machine with the most ranks per core); the rest
 * of *m is untouched; the arguments are the caller's, only read. PC_OK, or PC_EINVAL (a NULL
 * argument, size < 1 or servers < 0) with *m untouched. Pure; thread-safe on distinct m. */
int pc_auto_group_machines(pc_auto_measured_t *m, int size, int servers, const char *keys,
                           const char *hosts, const int *cores);

typedef struct pc_auto_result {
    pc_auto_measured_t measured;
    pc_cost_choice_t choice;            /* every candidate's prediction (its iter raised to
                                         * the cores' bound where that is longer); choice.best
                                         * chosen */
    double model_iter[PC_COST_MODES];   /* the cost model's iteration, before the bound */
    double cores_bound[PC_COST_MODES];  /* pc_auto_cores_bound's (0: none) */
    char flags[2 * PC_CONFIG_SPEC_LEN]; /* the choice as fixed flags ("--mode ps --servers 1
                                         * --compress dgc:ratio=0.001,momentum=0.9 ...") */
    int pool;                           /* --compressors: N, or 0 for auto */
    int pool_cap;                       /* auto's most threads (pc_auto_pool_cap) */
    int compressors[PC_COST_MODES];     /* each candidate's pool, as predicted (1: none) */
    char note[PC_CONFIG_SPEC_LEN];      /* "" or a line: --compressors reset to 1 */
} pc_auto_result_t;

/* The flags --mode auto cannot take, checked before any measuring: --compress and
 * --pipeline (auto chooses them), --pull other than auto and --priority fifo (the model
 * predicts --pull auto and --priority forward only), --nesterov (the sparsifiers' momentum
 * correction has none), --resume (the probe might choose a mode other than the
 * checkpoint's), --servers that leave no worker. PC_OK, or PC_EUSAGE with a one-line
 * message naming the flag. cfg->mode must be PC_MODE_AUTO (else PC_EINVAL). Pure;
 * thread-safe. */
int pc_auto_check(const pc_config_t *cfg, int world_size, char *err, size_t errlen);

/* Measure (pc_auto_measure with cfg's chunking, momentum, servers and seed, the
 * candidates' codecs, PC_AUTO_LINK_BYTES and `reps`), predict every candidate, choose the
 * one with the most samples per second (pc_cost_choose), and resolve cfg (mode, servers,
 * compress, pipeline, momentum; the flags set are marked as not given, so
 * pc_runtime_check_config sees the choice as defaults). Collective over comm, as
 * pc_auto_measure. The momentum of cfg (--momentum) goes where the chosen mode applies
 * momentum: the workers' momentum correction of topk and dgc, else the servers' or the
 * allreduce's optimizer. On PC_OK, on every rank, cfg is resolved alike and *out holds
 * the same figures; on error (as pc_auto_measure's, or PC_EINVAL for a cfg not in auto
 * mode) cfg is untouched. */
int pc_auto_choose(pc_config_t *cfg, MPI_Comm comm, const pc_auto_probe_t *probe, int reps,
                   pc_auto_result_t *out, char *err, size_t errlen);

/* What pc_auto_crowding found. */
typedef enum pc_auto_crowding {
    PC_AUTO_ROOMY = 0,   /* every thread of the most crowded machine may have a core */
    PC_AUTO_CROWDED = 1, /* fewer cores than threads there: the predictions rest on
                          * pc_auto_cores_bound's coarse sharing */
    PC_AUTO_ALIKE = 2    /* crowded, and every candidate's prediction within 0.5 % of the
                          * others': only the worker counts told the modes apart */
} pc_auto_crowding_t;

/* Whether res's measurement found a machine crowded (1 + N threads per rank, N the chosen
 * candidate's pool, at least 1, against the cores its ranks may use) and, if so, the
 * warning to print, one line
 * without a newline, into line (len bytes; "" when roomy): the general warning (the
 * predictions share the cores by CPU time, a coarse model), or, when every candidate
 * predicted the same iteration, that the predictions cannot tell the modes apart and the
 * worker count alone decided. Pure; thread-safe. */
pc_auto_crowding_t pc_auto_crowding(const pc_auto_result_t *res, char *line, size_t len);

/* Resolve an auto cfg to mode m as pc_auto_choose does, and write the fixed flags that
 * give the same configuration into flags (len bytes). cfg->compressors is kept for a mode
 * with a pool (pc_cost_mode_pooled; "--compressors N" among the flags unless N is 1: the
 * caller replaces auto by the N chosen first) and set to 1 otherwise. PC_OK, or PC_EINVAL
 * (cfg not in auto mode, m out of range, no room) with cfg untouched. Thread-safe on
 * distinct cfgs. */
int pc_auto_apply(pc_config_t *cfg, pc_cost_mode_t m, char *flags, size_t len);

/* Print res as pc-train and the binding do on rank 0: the probe's time, the compute and
 * the link measured, pc_auto_crowding's warning if any, every candidate's predicted
 * iteration and samples per second (batch: samples per worker per iteration), the pool
 * (with --compressors auto or N above 1: the chosen mode's N, its predicted compression
 * and the backward pass) and res->note, the choice and its fixed flags. Lines "auto: ..." to out,
 * flushed. The caller owns out; thread-safe on distinct streams. */
void pc_auto_print(const pc_auto_result_t *res, int batch, FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* PC_AUTO_H */
