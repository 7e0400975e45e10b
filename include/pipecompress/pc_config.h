/* pc_config: the runtime's flags (pc_config_t) and the checks of their combinations.
 *
 * The table-driven parser is pc_flags.h; this module is its table for the runtime: every
 * flag of pc_runtime, its default, range and help line, and the record of which flags a
 * command line gave (the runtime's defaults that depend on other flags use it).
 * Programs parse pc_config_group(&cfg, title) together with their own groups. */
#ifndef PC_CONFIG_H
#define PC_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pipecompress/pc_flags.h"
#include "pipecompress/pc_optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest --bind value kept (pc_topo_bind_parse reads it). */
#define PC_CONFIG_BIND_LEN 256

/* Longest --compress spec and file name kept. */
#define PC_CONFIG_SPEC_LEN 256
#define PC_CONFIG_PATH_LEN 1024
/* Longest --betas value kept ("0.9,0.999" and the like). */
#define PC_CONFIG_BETAS_LEN 64

/* --mode and --pull: X(NAME, "flag spelling"), in enum order; the enums and the flags'
 * choice strings come from these tables. */
#define PC_CONFIG_MODE_TABLE(X) X(PS, "ps") X(ALLREDUCE, "allreduce") X(AUTO, "auto")
#define PC_CONFIG_PULL_TABLE(X) X(AUTO, "auto") X(DENSE, "dense") X(SPARSE, "sparse")
/* --priority: the order in which folded chunks are compressed and sent, and completed chunks
 * aggregated on a server: FORWARD, the order the next forward pass needs them (the lowest
 * chunk id, i.e. the first layer, first); FIFO, the order their gradients became ready. */
#define PC_CONFIG_PRIORITY_TABLE(X) X(FORWARD, "forward") X(FIFO, "fifo")
/* --device: where a worker's tensors live. CPU: host memory (the reference path); CUDA:
 * device memory of this rank's GPU (--gpu); EMULATE: host memory handled as device
 * memory by the host emulation of pc_gpu.h (the GPU path's bookkeeping without a GPU).
 * --compress-on (device tensors): GPU, the device codecs (pc_devcodec.h) on a low-priority
 * stream, only the message copied to the host; CPU, the dense gradient copied to pinned
 * host memory chunk by chunk and compressed on the compressor thread's core. */
#define PC_CONFIG_DEVICE_TABLE(X)      X(CPU, "cpu") X(CUDA, "cuda") X(EMULATE, "emulate")
#define PC_CONFIG_COMPRESS_ON_TABLE(X) X(GPU, "gpu") X(CPU, "cpu")
/* --update (--mode ps): where the optimizer steps. SERVERS: each server steps its chunks and
 * pushes the parameters back; WORKERS: the servers only sum (the mean gradient, as their
 * step would have used it) and push that back, and every worker steps its whole model with
 * the same pc_optim_step (bitwise the parameters of SERVERS; no optimizer state on the
 * servers). */
#define PC_CONFIG_UPDATE_TABLE(X) X(SERVERS, "servers") X(WORKERS, "workers")
/* --adam-moments (adam, adamw): which entries of a sparsifier's aggregate the servers' step
 * moves. AUTO (the default): the codec's choice, one of the others (pc_config_adam_moments);
 * DENSE: every entry of m, v and the parameters, every iteration (torch's Adam on the
 * aggregate, zeros included); LAZY: only the entries that arrived (pc_optim_adam_lazy,
 * torch.optim.SparseAdam's rule), O(nnz). A dense aggregate steps densely either way. */
#define PC_CONFIG_ADAM_MOMENTS_TABLE(X) X(AUTO, "auto") X(DENSE, "dense") X(LAZY, "lazy")
/* --compressors N|auto: the longest value kept; the most compressor threads a worker may
 * run (64: far past the cores near one GPU on any machine we know, and each thread costs a
 * placement slot, PC_TOPO_MAX_THREADS); auto's cap (8: where the ResNet-50 and BERT-base
 * estimates of issue 46 stop needing more on one GPU, and what a socket's share of cores
 * per GPU is on today's 8-GPU nodes). */
#define PC_CONFIG_COMPRESSORS_LEN      16
#define PC_CONFIG_COMPRESSORS_MAX      64
#define PC_CONFIG_COMPRESSORS_AUTO_CAP 8
/* Longest --gpu value kept, and most devices it may list. */
#define PC_CONFIG_GPU_LEN 256
#define PC_CONFIG_GPU_MAX 64

typedef enum pc_config_mode {
#define PC_CONFIG_MODE_ENUM(name, text) PC_MODE_##name,
    PC_CONFIG_MODE_TABLE(PC_CONFIG_MODE_ENUM)
#undef PC_CONFIG_MODE_ENUM
} pc_config_mode_t;

typedef enum pc_config_pull {
#define PC_CONFIG_PULL_ENUM(name, text) PC_PULL_##name,
    PC_CONFIG_PULL_TABLE(PC_CONFIG_PULL_ENUM)
#undef PC_CONFIG_PULL_ENUM
} pc_config_pull_t;

typedef enum pc_config_priority {
#define PC_CONFIG_PRIORITY_ENUM(name, text) PC_PRIORITY_##name,
    PC_CONFIG_PRIORITY_TABLE(PC_CONFIG_PRIORITY_ENUM)
#undef PC_CONFIG_PRIORITY_ENUM
} pc_config_priority_t;

typedef enum pc_config_device {
#define PC_CONFIG_DEVICE_ENUM(name, text) PC_DEVICE_##name,
    PC_CONFIG_DEVICE_TABLE(PC_CONFIG_DEVICE_ENUM)
#undef PC_CONFIG_DEVICE_ENUM
} pc_config_device_t;

typedef enum pc_config_compress_on {
#define PC_CONFIG_COMPRESS_ON_ENUM(name, text) PC_COMPRESS_ON_##name,
    PC_CONFIG_COMPRESS_ON_TABLE(PC_CONFIG_COMPRESS_ON_ENUM)
#undef PC_CONFIG_COMPRESS_ON_ENUM
} pc_config_compress_on_t;

typedef enum pc_config_update {
#define PC_CONFIG_UPDATE_ENUM(name, text) PC_UPDATE_##name,
    PC_CONFIG_UPDATE_TABLE(PC_CONFIG_UPDATE_ENUM)
#undef PC_CONFIG_UPDATE_ENUM
} pc_config_update_t;

typedef enum pc_config_adam_moments {
#define PC_CONFIG_ADAM_MOMENTS_ENUM(name, text) PC_ADAM_MOMENTS_##name,
    PC_CONFIG_ADAM_MOMENTS_TABLE(PC_CONFIG_ADAM_MOMENTS_ENUM)
#undef PC_CONFIG_ADAM_MOMENTS_ENUM
} pc_config_adam_moments_t;

typedef struct pc_config {
    int servers;                       /* --servers S: ranks acting as parameter servers */
    char bind[PC_CONFIG_BIND_LEN];     /* --bind auto|none|LIST (see pc_topo.h) */
    int log_level;                     /* --log-level: a pc_log_level_t */
    char compress[PC_CONFIG_SPEC_LEN]; /* --compress SPEC (pc_codec_spec_parse) */
    int pipeline;                      /* --pipeline off|on: compress on the compressor thread */
    int mode;                          /* --mode ps|allreduce|auto: a pc_config_mode_t;
                                        * auto is resolved by pc_auto_choose */
    int64_t chunk_bytes;               /* --chunk-bytes: largest chunk of a tensor */
    int64_t compress_min_bytes;        /* --compress-min-bytes: smaller chunks travel dense */
    int pull;                          /* --pull auto|dense|sparse: a pc_config_pull_t */
    int priority;                      /* --priority forward|fifo: a pc_config_priority_t */
    int64_t seed;                      /* --seed: every random choice derives from it */
    double timeout;                    /* --timeout SECONDS: longest wait before aborting */
    int64_t iters;                     /* --iters N: stop after N iterations (0: the program's) */
    double lr;                         /* --lr and the optimizer (pc_optim.h) */
    double momentum;
    int nesterov;
    double weight_decay;
    int lr_schedule; /* a pc_lr_schedule_t */
    int64_t lr_step;
    double lr_gamma;
    int64_t lr_warmup;
    int optimizer;                     /* --optimizer sgd|adam|adamw: a pc_optim_kind_t */
    char betas[PC_CONFIG_BETAS_LEN];   /* --betas B1,B2 (adam, adamw; pc_optim_betas_parse) */
    double eps;                        /* --eps: adam(w)'s term of the denominator */
    int amsgrad;                       /* --amsgrad: adam(w) with the largest v so far */
    int adam_moments;                  /* --adam-moments auto|dense|lazy (the table above) */
    int64_t adam_freeze_after;         /* --adam-freeze-after N: adam(w)'s v frozen after N steps */
    char metrics[PC_CONFIG_PATH_LEN];  /* --metrics FILE: JSON lines, every rank; "" = off */
    char timeline[PC_CONFIG_PATH_LEN]; /* --timeline FILE: Chrome trace of every thread */
    char checkpoint_dir[PC_CONFIG_PATH_LEN]; /* --checkpoint-dir DIR: "" = no checkpoints */
    int64_t checkpoint_every;    /* --checkpoint-every N: 0 = at the end and on signals */
    int checkpoint_keep;         /* --checkpoint-keep K: complete checkpoints kept */
    int resume;                  /* --resume: start from the newest complete checkpoint */
    int device;                  /* --device cpu|cuda|emulate: a pc_config_device_t */
    char gpu[PC_CONFIG_GPU_LEN]; /* --gpu auto|LIST: the node's workers' devices */
    int compress_on;             /* --compress-on gpu|cpu: a pc_config_compress_on_t */
    double dilate;               /* --dilate K: time dilation (>= 1, finite; 1: none): every
                                  * piece of the runtime's CPU work on the critical path
                                  * is followed by a sleep of (K - 1) times its measured
                                  * duration (doc/design.md, "Time dilation") */
    int update;                  /* --update servers|workers: a pc_config_update_t */
    double clip_grad_norm;       /* --clip-grad-norm MAX: the servers clip the averaged
                                  * gradient by its global 2-norm every iteration (0: off) */
    uint64_t given;              /* bit i: row i of pc_config_options() was on the command
                                  * line (pc_config_group records it); the runtime's
                                  * defaults that depend on other flags use it */
    /* --compressors N|auto: compressor threads per worker (pc_config_compressors_parse) */
    char compressors[PC_CONFIG_COMPRESSORS_LEN];
} pc_config_t;

/* Parse a --gpu value: "auto" (*n = 0: node-local worker i takes device i modulo the
 * visible devices) or a comma list of device ordinals ("0,1,3"; at most PC_CONFIG_GPU_MAX,
 * each 0..1023): node-local worker i takes list[i % n]. PC_OK, or PC_EUSAGE with a message
 * (without the flag's name) in err; list and *n are written only on success. Thread-safe. */
int pc_config_gpu_parse(const char *text, int *list, int *n, char *err, size_t errlen);

/* Parse a --compressors value: "auto" (*n = 0: resolved at start from the cores hwloc finds
 * free near the worker, pc_runtime.c) or a whole number 1..PC_CONFIG_COMPRESSORS_MAX.
 * PC_OK, or PC_EUSAGE with a one-line message (without the flag's name) in err; *n is
 * written only on success. Thread-safe. */
int pc_config_compressors_parse(const char *text, int *n, char *err, size_t errlen);

/* The flag spelling of a --device value ("cuda"), or "?" outside the table. Static string;
 * thread-safe. */
const char *pc_config_device_name(int device);

/* Fill cfg with the defaults. */
void pc_config_defaults(pc_config_t *cfg);

/* The optimizer's configuration the flags of cfg name (--optimizer, --lr and its schedule
 * over --iters, --momentum, --nesterov, --weight-decay, --betas, --eps, --amsgrad) into
 * *out; betas that do not parse (refused by pc_config_check) give 0. The servers, the
 * allreduce workers and pc-bench server build their step from it. Thread-safe. */
void pc_config_optim(const pc_config_t *cfg, pc_optim_cfg_t *out);

/* The option table for pc_config_t (static; do not free). */
const pc_flags_t *pc_config_options(size_t *nopts);

/* The option group of the runtime's flags for pc_flags_parse: pc_config_options() with cfg as
 * destination, recording which flags were given in cfg->given. cfg is borrowed. */
pc_flags_group_t pc_config_group(pc_config_t *cfg, const char *title);

/* Whether flag `name` (long name without "--") was given on the command line, as recorded
 * by a parse of pc_config_group(cfg). 0 for unknown names. Thread-safe. */
int pc_config_given(const pc_config_t *cfg, const char *name);

/* Record flag `name` as given (given != 0) or not: a program that sets a flag's value on
 * the user's behalf (pc_auto_choose) makes the runtime's checks see it as a default.
 * Unknown names are ignored. Not thread-safe on cfg. */
void pc_config_set_given(pc_config_t *cfg, const char *name, int given);

/* Turn the codec's momentum correction off where --compress left it at its default:
 * appends momentum=0 to cfg->compress when the codec takes the key (dgc, topk, randomk),
 * the spec did not give it and it is above 0. For a step other than the runtime's plain
 * SGD on the servers (Adam, a torch optimizer's momentum, the workers' own step), which
 * would otherwise receive a momentum buffer's sum. Returns 1 when it changed cfg->compress,
 * 0 when not, PC_EUSAGE when the spec does not parse or would not fit. Not thread-safe on
 * cfg. */
int pc_config_codec_momentum_off(pc_config_t *cfg);

/* The warm-up a codec gets by default when the servers run Adam or AdamW: top-k, DGC and
 * PowerSGD send every entry for their first PC_CONFIG_ADAM_WARMUP compress calls
 * (iterations), top-k's and DGC's v then frozen (pc_config_adam_freeze_after; 1-bit Adam's
 * recipe), so that Adam's moments are learnt while every entry travels (doc/tuning.md, "With
 * Adam or AdamW on the servers", has the measurements). 1000 is torch's powerSGD_hook's
 * start_powerSGD_iter default, the same convention. */
#define PC_CONFIG_ADAM_WARMUP 1000

/* --lr's default (SGD's), and what --optimizer adam or adamw gets when --lr was not given
 * (torch.optim.Adam's and AdamW's default); --optimizer adamw's --weight-decay when not
 * given (torch.optim.AdamW's default; SGD's and Adam's is 0). pc_config_check fills them in. */
#define PC_CONFIG_SGD_LR             0.05
#define PC_CONFIG_ADAM_LR            0.001
#define PC_CONFIG_ADAMW_WEIGHT_DECAY 0.01

/* Give the codec the Adam default warm-up where --compress left it at its default: appends
 * dense=PC_CONFIG_ADAM_WARMUP to cfg->compress for topk and dgc, warmup=PC_CONFIG_ADAM_WARMUP
 * for powersgd (its dense iterations), when the spec did not give warmup= or dense= (warmup=0
 * given keeps the codec without one; warmup=N, a density warm-up, and dense=N are warm-ups of
 * their own). Returns 1 when it changed cfg->compress, 0 when not, PC_EUSAGE when the spec does
 * not parse or would not fit. Not thread-safe on cfg. */
int pc_config_codec_adam_warmup(pc_config_t *cfg);

/* The servers' Adam moments (PC_ADAM_MOMENTS_DENSE or _LAZY) for a step of optimizer kind
 * (a pc_optim_kind_t: the run's --optimizer, or the caller's parameter groups') under cfg:
 * --adam-moments dense or lazy as set, and for auto the codec's default: lazy for topk
 * with adam or adamw stepped on the servers (--mode ps, --update servers), dense
 * otherwise. Top-k's lazy moments kept the ViT within half a point of uncompressed AdamW
 * where its dense ones did not (after a density warm-up; after its default dense one v is
 * frozen and only m is lazy); DGC's and the dense codecs' are dense (doc/tuning.md, "With
 * Adam or AdamW on the servers", has the measurements). Pure; thread-safe on a cfg no one
 * writes. */
int pc_config_adam_moments(const pc_config_t *cfg, int kind);

/* The step after which the servers' Adam freezes v: --adam-freeze-after where given (or set
 * above 0 in a cfg filled by hand), else D for a topk or dgc spec with a dense warm-up
 * (dense=D) stepped on the servers (--mode ps, --update servers), 1-bit Adam's recipe:
 * v learnt while every entry travels, then fixed, so that an entry's late, accumulated
 * arrival moves it as far as its iterations would have (scripts/bench/adam_arrivals.py);
 * 0 (never) otherwise. Top-k's and DGC's Adam default is dense=1000 then v frozen
 * (doc/tuning.md has the measurements). Pure; thread-safe on a cfg no one writes. */
int64_t pc_config_adam_freeze_after(const pc_config_t *cfg);

/* "auto", "dense" or "lazy" for a pc_config_adam_moments_t ("?" for another value). Pure. */
const char *pc_config_adam_moments_name(int moments);

/* Check the flags that only make sense together, for a job of world_size ranks, and fill
 * in the defaults that depend on other flags, so that printing cfg afterwards shows what
 * runs. Checks: the --compress spec, the worker/server split, a cosine schedule without
 * --iters, --resume or --checkpoint-every without --checkpoint-dir, a compressing
 * --compress or --servers with --mode allreduce (which sends every gradient dense and has
 * no servers), and --momentum given with a sparsifier's own momentum (dgc, topk, randomk
 * with momentum > 0: momentum applied twice), and --dilate outside 1..1000 or not finite
 * (a cfg filled by hand); --update workers with --mode allreduce (whose workers step
 * already) or --compress powersgd (its matrices' step is already the workers'); --betas,
 * --eps or --amsgrad with --optimizer sgd, and with adam or adamw: bad --betas or --eps,
 * --momentum or --nesterov given, or a codec given momentum correction (momentum= above 0
 * in the spec: its momentum would feed Adam's moments);
 * --adam-moments or --adam-freeze-after with --optimizer sgd, and
 * --adam-moments lazy with --mode allreduce or --update workers (no sparse aggregate is
 * stepped there). Fills in: with adam or adamw,
 * --momentum 0 (SGD's default 0.9 does not apply), --lr PC_CONFIG_ADAM_LR where --lr was not
 * given and is SGD's default, and with adamw --weight-decay PC_CONFIG_ADAMW_WEIGHT_DECAY where
 * it was not given and is 0 (torch's defaults); with adam or adamw in --mode ps,
 * momentum=0 in --compress where the codec's correction was left at its default
 * (pc_config_codec_momentum_off) and the codec's Adam warm-up (dense=PC_CONFIG_ADAM_WARMUP
 * for topk and dgc, warmup= for powersgd) where it gave none (pc_config_codec_adam_warmup),
 * and --adam-moments auto resolved to the codec's default (pc_config_adam_moments: lazy for
 * topk); with such a codec (momentum correction on the workers, as in the DGC paper; the
 * default of dgc, topk and randomk) the servers' --momentum is 0 unless given; with --mode
 * allreduce, --compress is none and --servers 0. --mode auto is refused: pc_auto_choose
 * resolves it first (pc_auto.h).
 * Which flags were given comes from cfg->given (pc_config_group); a cfg not parsed that
 * way counts as all defaults. Idempotent. Returns PC_OK or PC_EUSAGE with a one-line
 * message naming the flag (cfg may then be partly filled). Thread-safe on distinct cfgs.
 * pc_runtime_check_config (pc_runtime.h) is the same function under its 0.1 name. Also
 * refused: a bad --compressors, and a pool or auto (anything but 1) with --pipeline off,
 * --mode allreduce or device tensors; --clip-grad-norm not a finite number above 0 (0 is
 * off in a cfg filled by hand), or with --mode allreduce. */
int pc_config_check(pc_config_t *cfg, int world_size, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* PC_CONFIG_H */
