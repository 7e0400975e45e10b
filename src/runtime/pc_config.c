/* pc_config: the runtime's flags: their table (pc_flags rows), the checks of their
 * combinations right after it (pc_config_check; a new flag's rules go there), defaults, and
 * the record of which flags a command line gave. */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_config.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_log.h"
#include "pipecompress/pc_optim.h"
#include "pipecompress/pc_topo.h"

static int check_bind(const void *value, char *err, size_t errlen)
{
    pc_bind_t b;
    return pc_topo_bind_parse((const char *)value, &b, err, errlen) == PC_OK ? 0 : 1;
}

int pc_config_gpu_parse(const char *text, int *list, int *n, char *err, size_t errlen)
{
    if (strcmp(text, "auto") == 0) {
        *n = 0;
        return PC_OK;
    }
    int tmp[PC_CONFIG_GPU_MAX], k = 0;
    const char *p = text;
    for (;;) {
        if (*p < '0' || *p > '9')
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "'%s': expected auto or device numbers such as 0,1", text);
        long v = 0;
        while (*p >= '0' && *p <= '9' && v <= 1023)
            v = v * 10 + (*p++ - '0');
        if (v > 1023)
            return pc_error_fmt(PC_EUSAGE, err, errlen, "'%s': device number over 1023", text);
        if (k == PC_CONFIG_GPU_MAX)
            return pc_error_fmt(PC_EUSAGE, err, errlen, "'%s': more than %d devices", text,
                                PC_CONFIG_GPU_MAX);
        tmp[k++] = (int)v;
        if (*p == '\0')
            break;
        if (*p++ != ',')
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "'%s': expected auto or device numbers such as 0,1", text);
    }
    memcpy(list, tmp, sizeof(int) * (size_t)k);
    *n = k;
    return PC_OK;
}

const char *pc_config_device_name(int device)
{
    static const char *const names[] = {
#define DEVICE_NAME(name, text) text,
        PC_CONFIG_DEVICE_TABLE(DEVICE_NAME)
#undef DEVICE_NAME
    };
    return device >= 0 && (size_t)device < sizeof(names) / sizeof(names[0]) ? names[device] : "?";
}

int pc_config_compressors_parse(const char *text, int *n, char *err, size_t errlen)
{
    if (strcmp(text, "auto") == 0) {
        *n = 0;
        return PC_OK;
    }
    const char *p = text + (*text == '-');
    long v = 0;
    bool digits = *p >= '0' && *p <= '9';
    while (*p >= '0' && *p <= '9' && v <= PC_CONFIG_COMPRESSORS_MAX)
        v = v * 10 + (*p++ - '0');
    while (*p >= '0' && *p <= '9') /* past the cap: the value only needs to read as large */
        p++;
    if (!digits || *p != '\0')
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "'%s': expected a number of compressor threads (1 to %d) or auto", text,
                            PC_CONFIG_COMPRESSORS_MAX);
    if (*text == '-' || v == 0)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "'%s': a worker needs at least 1 compressor thread (or auto)", text);
    if (v > PC_CONFIG_COMPRESSORS_MAX)
        return pc_error_fmt(PC_EUSAGE, err, errlen, "'%s': more than %d compressor threads", text,
                            PC_CONFIG_COMPRESSORS_MAX);
    *n = (int)v;
    return PC_OK;
}

static int check_compressors(const void *value, char *err, size_t errlen)
{
    int n;
    return pc_config_compressors_parse((const char *)value, &n, err, errlen) == PC_OK ? 0 : 1;
}

static int check_gpu(const void *value, char *err, size_t errlen)
{
    int list[PC_CONFIG_GPU_MAX], n;
    return pc_config_gpu_parse((const char *)value, list, &n, err, errlen) == PC_OK ? 0 : 1;
}

static int check_betas(const void *value, char *err, size_t errlen)
{
    double b1, b2;
    return pc_optim_betas_parse((const char *)value, &b1, &b2, err, errlen) == PC_OK ? 0 : 1;
}

/* --clip-grad-norm: the parser holds it finite; 0 and below are refused here (0 would zero
 * every gradient; "no clipping" is the flag left out). */
static int check_clip(const void *value, char *err, size_t errlen)
{
    double m = *(const double *)value;
    if (m > 0)
        return 0;
    pc_error_fmt(PC_EUSAGE, err, errlen,
                 "%g: the largest norm must be above 0 (leave the flag out for no clipping)", m);
    return 1;
}

/* --eps: the parser holds it finite and in [0, 1]; 0 is refused here (a zero v would divide
 * by zero: torch refuses eps < 0 and divides 0 by 0 at eps 0). */
static int check_eps(const void *value, char *err, size_t errlen)
{
    double eps = *(const double *)value;
    if (eps > 0)
        return 0;
    pc_error_fmt(PC_EUSAGE, err, errlen, "%g: must be above 0 (Adam divides by sqrt(v) + eps)",
                 eps);
    return 1;
}

/* ---- The runtime's table ------------------------------------------------------------ */

/* Servers: at least one; 4096 is far beyond any node count we would split off. */
#define MAX_SERVERS 4096

/* A macro's value as a string literal, for the help texts. */
#define CONFIG_STR_(x) #x
#define CONFIG_STR(x)  CONFIG_STR_(x)

static const pc_flags_t config_opts[] = {
    {.name = "servers",
     .short_name = 's',
     .type = PC_FLAGS_INT,
     .offset = offsetof(pc_config_t, servers),
     .min = 1,
     .max = MAX_SERVERS,
     .metavar = "S",
     .help = "ranks that act as parameter servers (the others are workers)"},
    {.name = "bind",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(pc_config_t, bind),
     .size = PC_CONFIG_BIND_LEN,
     .metavar = "auto|none|LIST",
     .help = "thread placement: plan cores with hwloc, leave unbound, or logical cores in order",
     .check = check_bind},
    {.name = "log-level",
     .short_name = 'v',
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(pc_config_t, log_level),
     .choices = PC_LOG_LEVEL_CHOICES,
     .help = "messages to print"},
    {.name = "compress",
     .short_name = 'c',
     .type = PC_FLAGS_STRING,
     .offset = offsetof(pc_config_t, compress),
     .size = PC_CONFIG_SPEC_LEN,
     .metavar = "SPEC",
     .help = "compressor, e.g. topk:ratio=0.01 (see README: none fp16 topk dgc randomk ...)"},
    {.name = "pipeline",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(pc_config_t, pipeline),
     .choices = "off|on",
     .help = "compress on a pinned compressor thread (off: inline)"},
    {.name = "device",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(pc_config_t, device),
     .choices = PC_CONFIG_DEVICE_TABLE(PC_FLAGS_CHOICE_TEXT) + 1,
     .help = "where workers' tensors live: host memory, this rank's CUDA device, or host "
             "memory through the GPU path (emulate: tests without a GPU)"},
    {.name = "gpu",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(pc_config_t, gpu),
     .size = PC_CONFIG_GPU_LEN,
     .metavar = "auto|LIST",
     .help = "--device cuda: node-local worker i takes LIST[i % len] (auto: i modulo the "
             "visible devices)",
     .check = check_gpu},
    {.name = "compress-on",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(pc_config_t, compress_on),
     .choices = PC_CONFIG_COMPRESS_ON_TABLE(PC_FLAGS_CHOICE_TEXT) + 1,
     .help = "device tensors: compress on the GPU (low-priority stream), or copy the gradient "
             "to pinned memory and compress on the compressor thread's core"},
    {.name = "mode",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(pc_config_t, mode),
     .choices = PC_CONFIG_MODE_TABLE(PC_FLAGS_CHOICE_TEXT) + 1,
     .help = "parameter servers, dense MPI_Allreduce (baseline), or auto: measure at start-up "
             "and choose the mode and codec (pc_cost)"},
    {.name = "chunk-bytes",
     .type = PC_FLAGS_SIZE,
     .offset = offsetof(pc_config_t, chunk_bytes),
     .min = 64,
     .max = 1073741824.0,
     .metavar = "SIZE",
     .help = "largest chunk of a tensor"},
    {.name = "compress-min-bytes",
     .type = PC_FLAGS_SIZE,
     .offset = offsetof(pc_config_t, compress_min_bytes),
     .min = 0,
     .max = 1073741824.0,
     .metavar = "SIZE",
     .help = "chunks smaller than this travel uncompressed (0: compress all)"},
    {.name = "pull",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(pc_config_t, pull),
     .choices = PC_CONFIG_PULL_TABLE(PC_FLAGS_CHOICE_TEXT) + 1,
     .help = "how updated parameters travel back"},
    {.name = "priority",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(pc_config_t, priority),
     .choices = PC_CONFIG_PRIORITY_TABLE(PC_FLAGS_CHOICE_TEXT) + 1,
     .help = "compress, send and aggregate first what the next forward pass needs first, or "
             "in the order gradients became ready"},
    {.name = "seed",
     .type = PC_FLAGS_INT64,
     .offset = offsetof(pc_config_t, seed),
     .min = 0,
     .max = 9007199254740991.0,
     .metavar = "N",
     .help = "seed of every random choice"},
    {.name = "timeout",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(pc_config_t, timeout),
     .min = 0.001,
     .max = 1e6,
     .metavar = "SECONDS",
     .help = "abort when a wait (a peer died or hung) lasts longer"},
    {.name = "iters",
     .type = PC_FLAGS_INT64,
     .offset = offsetof(pc_config_t, iters),
     .min = 0,
     .max = 1e12,
     .metavar = "N",
     .help = "stop after N iterations (0: the program decides)"},
    {.name = "lr",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(pc_config_t, lr),
     .min = 0,
     .max = 1e6,
     .metavar = "RATE",
     .help =
         "learning rate (adam, adamw: " CONFIG_STR(PC_CONFIG_ADAM_LR) " when not given, torch's "
                                                                      "default)"},
    {.name = "momentum",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(pc_config_t, momentum),
     .min = 0,
     .max = 0.999999,
     .metavar = "M",
     .help = "the servers' SGD momentum (0 with dgc, topk, randomk, whose momentum is the "
             "workers')"},
    {.name = "nesterov",
     .type = PC_FLAGS_FLAG,
     .offset = offsetof(pc_config_t, nesterov),
     .help = "Nesterov momentum"},
    {.name = "weight-decay",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(pc_config_t, weight_decay),
     .min = 0,
     .max = 1,
     .metavar = "WD",
     .help = "L2 weight decay (adamw: the decoupled decay p = p * (1 - lr * WD), " CONFIG_STR(
         PC_CONFIG_ADAMW_WEIGHT_DECAY) " when not given, torch's default)"},
    {.name = "lr-schedule",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(pc_config_t, lr_schedule),
     .choices = PC_LR_SCHEDULE_CHOICES,
     .help = "learning-rate schedule"},
    {.name = "lr-step",
     .type = PC_FLAGS_INT64,
     .offset = offsetof(pc_config_t, lr_step),
     .min = 1,
     .max = 1e12,
     .metavar = "N",
     .help = "step schedule: iterations between decays"},
    {.name = "lr-gamma",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(pc_config_t, lr_gamma),
     .min = 0,
     .max = 1,
     .metavar = "G",
     .help = "step schedule: decay factor"},
    {.name = "lr-warmup",
     .type = PC_FLAGS_INT64,
     .offset = offsetof(pc_config_t, lr_warmup),
     .min = 0,
     .max = 1e12,
     .metavar = "N",
     .help = "linear warm-up iterations"},
    {.name = "metrics",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(pc_config_t, metrics),
     .size = PC_CONFIG_PATH_LEN,
     .metavar = "FILE",
     .help = "write per-iteration metrics of every rank as JSON lines"},
    {.name = "timeline",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(pc_config_t, timeline),
     .size = PC_CONFIG_PATH_LEN,
     .metavar = "FILE",
     .help = "write a Chrome trace (Perfetto) with a track per thread of every rank"},
    {.name = "checkpoint-dir",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(pc_config_t, checkpoint_dir),
     .size = PC_CONFIG_PATH_LEN,
     .metavar = "DIR",
     .help = "write checkpoints here (shared by all ranks; created if missing)"},
    {.name = "checkpoint-every",
     .type = PC_FLAGS_INT64,
     .offset = offsetof(pc_config_t, checkpoint_every),
     .min = 0,
     .max = 1e12,
     .metavar = "N",
     .help = "checkpoint every N iterations (0: only at the end and on SIGTERM/SIGINT)"},
    {.name = "checkpoint-keep",
     .type = PC_FLAGS_INT,
     .offset = offsetof(pc_config_t, checkpoint_keep),
     .min = 1,
     .max = 1000,
     .metavar = "K",
     .help = "complete checkpoints kept (older ones deleted)"},
    {.name = "resume",
     .type = PC_FLAGS_FLAG,
     .offset = offsetof(pc_config_t, resume),
     .help = "resume from the newest complete checkpoint in --checkpoint-dir (if any)"},
    /* Appended last: a row's index is its bit in cfg->given. 1000: far past any k a link
     * shaper needs (k divides the link rates), yet a sleep of (k - 1) x 1 ms stays short. */
    {.name = "dilate",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(pc_config_t, dilate),
     .min = 1,
     .max = 1000,
     .metavar = "K",
     .help = "time dilation: follow every piece of CPU work on the critical path by a sleep of "
             "(K - 1) times its duration (replay; 1: none)"},
    {.name = "optimizer",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(pc_config_t, optimizer),
     .choices = PC_OPTIM_KIND_CHOICES,
     .help = "the step on the servers (allreduce: on every worker): SGD, or Adam / AdamW as "
             "torch.optim's (--betas, --eps, --amsgrad; --weight-decay is AdamW's decoupled "
             "decay)"},
    {.name = "betas",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(pc_config_t, betas),
     .size = PC_CONFIG_BETAS_LEN,
     .metavar = "B1,B2",
     .help = "adam, adamw: decay rates of the gradient's running mean and of its square",
     .check = check_betas},
    {.name = "eps",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(pc_config_t, eps),
     .min = 0,
     .max = 1,
     .metavar = "EPS",
     .help = "adam, adamw: added to the denominator (above 0)",
     .check = check_eps},
    {.name = "amsgrad",
     .type = PC_FLAGS_FLAG,
     .offset = offsetof(pc_config_t, amsgrad),
     .help = "adam, adamw: divide by the largest running mean of the square so far"},
    {.name = "compressors",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(pc_config_t, compressors),
     .size = PC_CONFIG_COMPRESSORS_LEN,
     .metavar = "N|auto",
     .help = "pinned compressor threads per worker, each folding and compressing its own "
             "chunks (auto: the cores free near the worker's GPU or socket, at most 8)",
     .check = check_compressors},
    {.name = "update",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(pc_config_t, update),
     .choices = PC_CONFIG_UPDATE_TABLE(PC_FLAGS_CHOICE_TEXT) + 1,
     .help = "--mode ps: where the optimizer steps: on the servers (they push parameters), or "
             "on every worker (the servers only sum and push the mean gradient)"},
    {.name = "adam-moments",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(pc_config_t, adam_moments),
     .choices = PC_CONFIG_ADAM_MOMENTS_TABLE(PC_FLAGS_CHOICE_TEXT) + 1,
     .help = "adam, adamw on the servers: dense moves m, v and every parameter at every step "
             "(torch's Adam on the aggregate, zeros included); lazy moves only the entries "
             "that arrived (the union over workers) of a sparsifier's chunk (topk, dgc, "
             "randomk), as torch.optim.SparseAdam: O(nnz) per step. For chunks that travel "
             "dense (other codecs, --compress-min-bytes) lazy is dense. auto: lazy for topk "
             "in --mode ps with --update servers, dense otherwise (doc/tuning.md); the "
             "printed configuration says which"},
    {.name = "adam-freeze-after",
     .type = PC_FLAGS_INT64,
     .offset = offsetof(pc_config_t, adam_freeze_after),
     .min = 0,
     .max = 1e12,
     .metavar = "N",
     .help = "adam, adamw: after N steps of each tensor, freeze v and its bias correction "
             "(m keeps moving): 1-bit Adam's warm-up, then a frozen variance (0: never; not "
             "given: D for a topk or dgc spec's dense=D on the servers, 1000 for their Adam "
             "default)"},
    {.name = "clip-grad-norm",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(pc_config_t, clip_grad_norm),
     .min = 1, /* min > max: no range; check_clip refuses 0 and below in its own words */
     .max = 0,
     .metavar = "MAX",
     .help = "--mode ps: clip the averaged gradient by its global 2-norm at every iteration, "
             "as torch.nn.utils.clip_grad_norm_ (coefficient MAX / (norm + 1e-6), at most 1) "
             "on the servers before the step (a finite number above 0; default: no clipping)",
     .check = check_clip},
};

/* pc_config_t.given keeps one bit per row. */
_Static_assert(sizeof(config_opts) / sizeof(config_opts[0]) <= 64, "more flags than bits in given");

/* ---- the checks of the flags' combinations (pc_config_check) ------------------------- */

/* Flags given that the resolved configuration (mode, codec, momentum as pc_config_check
 * left them) would silently ignore: each refused in one line saying why, so that nobody
 * reads a flag in the effective configuration that did nothing. */
static int check_no_effect(const pc_config_t *cfg, const pc_codec_spec_t *spec, char *err,
                           size_t errlen)
{
    if (cfg->nesterov && cfg->momentum == 0) {
        /* torch.optim.SGD refuses it too ("Nesterov momentum requires a momentum"). */
        double wm = pc_codec_worker_momentum(spec);
        if (cfg->mode == PC_MODE_PS && wm > 0)
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "--nesterov has no effect with --compress %s: its momentum is "
                                "the workers' momentum correction (%s:momentum=%g), which has "
                                "no Nesterov form; for Nesterov on the servers give "
                                "%s:momentum=0 --momentum M",
                                cfg->compress, pc_codec_name(spec->id), wm,
                                pc_codec_name(spec->id));
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--nesterov needs momentum: --momentum M above 0 (as torch's SGD)");
    }
    if (cfg->lr_schedule != PC_LR_STEP) {
        const char *f = pc_config_given(cfg, "lr-step")    ? "--lr-step"
                        : pc_config_given(cfg, "lr-gamma") ? "--lr-gamma"
                                                           : NULL;
        if (f)
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "%s acts on --lr-schedule step only (this run's is %s)", f,
                                pc_optim_schedule_name(cfg->lr_schedule));
    }
    if (pc_config_given(cfg, "checkpoint-keep") && !cfg->checkpoint_dir[0])
        return pc_error_fmt(PC_EUSAGE, err, errlen, "--checkpoint-keep needs --checkpoint-dir DIR");
    if (cfg->mode == PC_MODE_ALLREDUCE) {
        const char *f = pc_config_given(cfg, "pull")                 ? "--pull"
                        : pc_config_given(cfg, "compress-min-bytes") ? "--compress-min-bytes"
                                                                     : NULL;
        if (f)
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "%s has no effect with --mode allreduce (no servers, nothing "
                                "compressed); drop it",
                                f);
    } else if (pc_config_given(cfg, "compress-min-bytes") && spec->id == PC_CODEC_NONE) {
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--compress-min-bytes has no effect with --compress none (every "
                            "chunk travels uncompressed); drop it");
    }
    return PC_OK;
}

int pc_config_codec_momentum_off(pc_config_t *cfg)
{
    pc_codec_spec_t spec;
    if (pc_codec_spec_parse(cfg->compress, &spec, NULL, 0) != PC_OK)
        return PC_EUSAGE;
    if (spec.momentum_given || pc_codec_worker_momentum(&spec) == 0)
        return 0;
    size_t len = strlen(cfg->compress);
    int n = snprintf(cfg->compress + len, sizeof(cfg->compress) - len, "%smomentum=0",
                     strchr(cfg->compress, ':') ? "," : ":");
    if (n < 0 || (size_t)n >= sizeof(cfg->compress) - len) {
        cfg->compress[len] = '\0';
        return PC_EUSAGE;
    }
    return 1;
}

int64_t pc_config_adam_freeze_after(const pc_config_t *cfg)
{
    pc_codec_spec_t spec;
    if (pc_config_given(cfg, "adam-freeze-after") || cfg->adam_freeze_after != 0 ||
        cfg->mode != PC_MODE_PS || cfg->update != PC_UPDATE_SERVERS ||
        pc_codec_spec_parse(cfg->compress, &spec, NULL, 0) != PC_OK ||
        (spec.id != PC_CODEC_TOPK && spec.id != PC_CODEC_DGC))
        return cfg->adam_freeze_after;
    return spec.dense;
}

int pc_config_adam_moments(const pc_config_t *cfg, int kind)
{
    if (cfg->adam_moments != PC_ADAM_MOMENTS_AUTO)
        return cfg->adam_moments;
    pc_codec_spec_t spec;
    if ((kind != PC_OPTIM_ADAM && kind != PC_OPTIM_ADAMW) || cfg->mode != PC_MODE_PS ||
        cfg->update != PC_UPDATE_SERVERS ||
        pc_codec_spec_parse(cfg->compress, &spec, NULL, 0) != PC_OK)
        return PC_ADAM_MOMENTS_DENSE;
    return spec.id == PC_CODEC_TOPK ? PC_ADAM_MOMENTS_LAZY : PC_ADAM_MOMENTS_DENSE;
}

const char *pc_config_adam_moments_name(int moments)
{
#define PC_CONFIG_ADAM_MOMENTS_NAME(name, text)                                                    \
    if (moments == PC_ADAM_MOMENTS_##name)                                                         \
        return text;
    PC_CONFIG_ADAM_MOMENTS_TABLE(PC_CONFIG_ADAM_MOMENTS_NAME)
#undef PC_CONFIG_ADAM_MOMENTS_NAME
    return "?";
}

int pc_config_codec_adam_warmup(pc_config_t *cfg)
{
    pc_codec_spec_t spec;
    if (pc_codec_spec_parse(cfg->compress, &spec, NULL, 0) != PC_OK)
        return PC_EUSAGE;
    if (spec.warmup_given || spec.dense_given ||
        (spec.id != PC_CODEC_TOPK && spec.id != PC_CODEC_DGC && spec.id != PC_CODEC_POWERSGD))
        return 0;
    size_t len = strlen(cfg->compress);
    int n = snprintf(cfg->compress + len, sizeof(cfg->compress) - len, "%s%s=%d",
                     strchr(cfg->compress, ':') ? "," : ":",
                     spec.id == PC_CODEC_POWERSGD ? "warmup" : "dense", PC_CONFIG_ADAM_WARMUP);
    if (n < 0 || (size_t)n >= sizeof(cfg->compress) - len) {
        cfg->compress[len] = '\0';
        return PC_EUSAGE;
    }
    return 1;
}

/* --optimizer and its flags. With sgd, --betas, --eps and --amsgrad would do nothing:
 * refused. With adam(w): the values (a cfg filled by hand bypasses the parser's checks),
 * no SGD momentum (--momentum, --nesterov refused; the default 0.9 becomes 0, so that the
 * printed configuration shows what runs), and no codec momentum correction on the workers
 * (it would feed momentum into Adam's moments, which are momentum already): the default
 * of dgc, topk and randomk becomes momentum=0 (written into cfg->compress), a momentum
 * given in the spec is refused. */
static int check_adam(pc_config_t *cfg, const pc_codec_spec_t *spec, char *err, size_t errlen)
{
    const char *kind = pc_optim_kind_name(cfg->optimizer);
    if (cfg->optimizer == PC_OPTIM_SGD) {
        const char *f = pc_config_given(cfg, "betas")               ? "--betas"
                        : pc_config_given(cfg, "eps")               ? "--eps"
                        : cfg->amsgrad                              ? "--amsgrad"
                        : cfg->adam_moments != PC_ADAM_MOMENTS_AUTO ? "--adam-moments"
                        : pc_config_given(cfg, "adam-freeze-after") || cfg->adam_freeze_after != 0
                            ? "--adam-freeze-after"
                            : NULL;
        if (f)
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "%s acts on --optimizer adam or adamw only (this run's is sgd; "
                                "give --optimizer adam or adamw too)",
                                f);
        return PC_OK;
    }
    if (cfg->optimizer != PC_OPTIM_ADAM && cfg->optimizer != PC_OPTIM_ADAMW)
        return pc_error_fmt(PC_EUSAGE, err, errlen, "--optimizer %d: not one of %s", cfg->optimizer,
                            PC_OPTIM_KIND_CHOICES);
    char why[256];
    double b1, b2;
    if (pc_optim_betas_parse(cfg->betas, &b1, &b2, why, sizeof(why)) != PC_OK)
        return pc_error_fmt(PC_EUSAGE, err, errlen, "--betas: %s", why);
    if (!(cfg->eps > 0 && isfinite(cfg->eps)))
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--eps %g: must be a finite number above 0 (Adam divides by "
                            "sqrt(v) + eps)",
                            cfg->eps);
    /* The parser's choices and range hold on the command line; a cfg filled by hand gets
     * them here. */
    if (cfg->adam_moments != PC_ADAM_MOMENTS_AUTO && cfg->adam_moments != PC_ADAM_MOMENTS_DENSE &&
        cfg->adam_moments != PC_ADAM_MOMENTS_LAZY)
        return pc_error_fmt(PC_EUSAGE, err, errlen, "--adam-moments %d: not one of auto|dense|lazy",
                            cfg->adam_moments);
    if (cfg->adam_freeze_after < 0)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--adam-freeze-after %lld: must be a whole number >= 0 (0: never)",
                            (long long)cfg->adam_freeze_after);
    if (cfg->adam_moments == PC_ADAM_MOMENTS_LAZY &&
        (cfg->mode == PC_MODE_ALLREDUCE || cfg->update == PC_UPDATE_WORKERS))
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--adam-moments lazy has no effect with %s (every worker steps on the "
                            "dense mean gradient; only the servers' step sees which entries "
                            "arrived); drop it",
                            cfg->mode == PC_MODE_ALLREDUCE ? "--mode allreduce"
                                                           : "--update workers");
    if ((pc_config_given(cfg, "momentum") && cfg->momentum != 0) || cfg->nesterov)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "%s is SGD's: --optimizer %s keeps its own running mean of the "
                            "gradient (--betas B1,B2); drop it",
                            cfg->nesterov ? "--nesterov" : "--momentum", kind);
    cfg->momentum = 0;
    /* torch's defaults where the flag was left at SGD's (a value set by hand to anything
     * else stays; idempotent, as the new values are not SGD's). */
    if (!pc_config_given(cfg, "lr") && cfg->lr == PC_CONFIG_SGD_LR)
        cfg->lr = PC_CONFIG_ADAM_LR;
    if (cfg->optimizer == PC_OPTIM_ADAMW && !pc_config_given(cfg, "weight-decay") &&
        cfg->weight_decay == 0)
        cfg->weight_decay = PC_CONFIG_ADAMW_WEIGHT_DECAY;
    double wm = pc_codec_worker_momentum(spec);
    if (cfg->mode == PC_MODE_PS && wm > 0)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--optimizer %s with --compress %s: the codec's momentum correction "
                            "(%s:momentum=%g) runs on the workers and would feed momentum into "
                            "Adam's moments; give %s:momentum=0",
                            kind, cfg->compress, pc_codec_name(spec->id), wm,
                            pc_codec_name(spec->id));
    return PC_OK;
}

/* --update: workers needs servers that would otherwise step (--mode ps), and a codec whose
 * server step is the plain one on the mean gradient: powersgd's matrices are stepped on the
 * workers already (from P^ and Q), and its server's rounds are its own. The runtime's step
 * on the workers is the servers' on the same mean (with a sparsifier's momentum correction,
 * the plain SGD the servers would run): the same bits. */
static int check_update(const pc_config_t *cfg, const pc_codec_spec_t *spec, char *err,
                        size_t errlen)
{
    if (cfg->update != PC_UPDATE_SERVERS && cfg->update != PC_UPDATE_WORKERS)
        return pc_error_fmt(PC_EUSAGE, err, errlen, "--update %d: not one of servers|workers",
                            cfg->update);
    if (cfg->update == PC_UPDATE_SERVERS)
        return PC_OK;
    if (cfg->mode == PC_MODE_ALLREDUCE)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--update workers has no effect with --mode allreduce (its workers "
                            "step already, there are no servers); drop it");
    if (spec->id == PC_CODEC_POWERSGD)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--update workers with --compress %s: its matrices are stepped on "
                            "the workers from P^ and Q already, and its servers' rounds cannot "
                            "send a mean gradient; drop --update workers",
                            cfg->compress);
    if (pc_config_given(cfg, "pull"))
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--pull has no effect with --update workers (the servers push the "
                            "mean gradient dense, no parameters); drop it");
    return PC_OK;
}

/* --clip-grad-norm: its value (a cfg filled by hand bypasses the parser's checks: 0 is
 * "off" there), and only where the servers step on the averaged gradient: --mode ps (with
 * powersgd its matrices' servers take the norm of P^ Q^T and tell the workers the
 * coefficient their rows are stepped with). */
static int check_clip_combo(const pc_config_t *cfg, char *err, size_t errlen)
{
    double m = cfg->clip_grad_norm;
    if (m == 0)
        return PC_OK;
    if (!(m > 0 && isfinite(m)))
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--clip-grad-norm %g: the largest norm must be a finite number "
                            "above 0",
                            m);
    if (cfg->mode == PC_MODE_ALLREDUCE)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--clip-grad-norm needs --mode ps (the servers clip the averaged "
                            "gradient before their step); --mode allreduce does not clip");
    return PC_OK;
}

/* The optimizer's flags and the codec defaults that follow from it. Adam's moments take
 * the aggregate as it is: the sparsifiers' default momentum correction goes (a given one
 * is refused by check_adam). The runtime's SGD keeps it in either placement: --update
 * workers steps the servers' plain SGD on the same mean, bit for bit (a caller's own
 * optimizer on the workers is pc_worker_set_user_step's case). A codec (topk, dgc, powersgd) left
 * without a warm-up gets PC_CONFIG_ADAM_WARMUP's (doc/tuning.md), after the checks, whose messages
 * quote the spec as given, and --adam-moments auto becomes the codec's choice
 * (pc_config_adam_moments). spec is re-parsed where cfg->compress changed. */
static int check_optimizer(pc_config_t *cfg, pc_codec_spec_t *spec, char *err, size_t errlen)
{
    int rc;
    bool adam = cfg->optimizer == PC_OPTIM_ADAM || cfg->optimizer == PC_OPTIM_ADAMW;
    if (cfg->mode == PC_MODE_PS && adam && pc_config_codec_momentum_off(cfg) == 1)
        pc_codec_spec_parse(cfg->compress, spec, NULL, 0); /* parsed before, plus one key */
    if ((rc = check_adam(cfg, spec, err, errlen)) != PC_OK ||
        (rc = check_update(cfg, spec, err, errlen)) != PC_OK)
        return rc;
    if (cfg->mode == PC_MODE_PS && adam && pc_config_codec_adam_warmup(cfg) == 1)
        pc_codec_spec_parse(cfg->compress, spec, NULL, 0);
    if (adam) { /* auto: the codec's default moments; a dense warm-up's frozen v */
        cfg->adam_moments = pc_config_adam_moments(cfg, cfg->optimizer);
        cfg->adam_freeze_after = pc_config_adam_freeze_after(cfg);
    }
    return PC_OK;
}

/* --compressors: its value (a cfg filled by hand bypasses the parser's check), and a pool
 * (or auto) only where it can run: pipelined, --mode ps (allreduce's collectives are one
 * stream), host tensors (device tensors' copies and streams are one thread's). */
static int check_pool(const pc_config_t *cfg, char *err, size_t errlen)
{
    char why[256];
    int ncomp;
    if (pc_config_compressors_parse(cfg->compressors, &ncomp, why, sizeof(why)) != PC_OK)
        return pc_error_fmt(PC_EUSAGE, err, errlen, "--compressors: %s", why);
    if (ncomp == 1) /* one thread, as always */
        return PC_OK;
    if (!cfg->pipeline)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--compressors %s needs --pipeline on (--pipeline off compresses "
                            "inline on the backprop thread)",
                            cfg->compressors);
    if (cfg->mode == PC_MODE_ALLREDUCE)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--compressors %s has no effect with --mode allreduce (nothing "
                            "is compressed; its collectives keep one thread); drop it",
                            cfg->compressors);
    if (cfg->device != PC_DEVICE_CPU)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--compressors %s needs host tensors (--device cpu): device "
                            "tensors' copies and streams are one compressor thread's",
                            cfg->compressors);
    return PC_OK;
}

int pc_config_check(pc_config_t *cfg, int world_size, char *err, size_t errlen)
{
    pc_codec_spec_t spec;
    char why[256];
    int rc;
    if (pc_codec_spec_parse(cfg->compress, &spec, why, sizeof(why)) != PC_OK)
        return pc_error_fmt(PC_EUSAGE, err, errlen, "--compress: %s", why);
    if (cfg->mode == PC_MODE_AUTO)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--mode auto must be resolved before the runtime starts "
                            "(pc_auto_check, then pc_auto_choose)");
    if (cfg->mode == PC_MODE_ALLREDUCE) {
        /* Every gradient travels dense through MPI_Allreduce: no codec, no servers. */
        if (pc_config_given(cfg, "compress") && spec.id != PC_CODEC_NONE)
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "--compress %s has no effect with --mode allreduce (a dense "
                                "MPI_Allreduce of every gradient); drop one of the two",
                                cfg->compress);
        if (pc_config_given(cfg, "servers") && cfg->servers > 0)
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "--servers %d has no effect with --mode allreduce (every rank is a "
                                "worker); drop one of the two",
                                cfg->servers);
        snprintf(cfg->compress, sizeof(cfg->compress), "none");
        cfg->servers = 0;
    }
    if ((rc = check_optimizer(cfg, &spec, err, errlen)) != PC_OK)
        return rc;
    if (cfg->mode == PC_MODE_PS) {
        if (world_size < 2)
            return pc_error_fmt(PC_EUSAGE, err, errlen,
                                "--mode ps needs at least 2 ranks (a worker and a server); got %d "
                                "(use mpirun -np N, or --mode allreduce)",
                                world_size);
        if (cfg->servers < 1 || cfg->servers >= world_size)
            return pc_error_fmt(PC_EUSAGE, err, errlen, "--servers %d leaves no %s among %d ranks",
                                cfg->servers, cfg->servers < 1 ? "server" : "worker", world_size);
        double wm = pc_codec_worker_momentum(&spec);
        if (wm > 0) {
            /* The sparsifiers' momentum correction (DGC's; topk and randomk likewise)
             * accumulates momentum on the workers; the servers then apply plain SGD to the
             * sparse aggregate (Lin et al. 2018), touching only what was sent. Server
             * momentum on top of it is momentum applied twice, and diverges. */
            const char *name = pc_codec_name(spec.id);
            if (pc_config_given(cfg, "momentum") && cfg->momentum > 0)
                return pc_error_fmt(
                    PC_EUSAGE, err, errlen,
                    "--momentum %g with --compress %s applies momentum twice (the codec's "
                    "momentum correction, %s:momentum=%g, runs on the workers); "
                    "drop --momentum, or set %s:momentum=0 to keep it on the servers",
                    cfg->momentum, name, name, wm, name);
            cfg->momentum = 0;
        }
    }
    if ((rc = check_no_effect(cfg, &spec, err, errlen)) != PC_OK ||
        (rc = check_clip_combo(cfg, err, errlen)) != PC_OK)
        return rc;
    if (cfg->lr_schedule == PC_LR_COSINE && cfg->iters <= 0)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--lr-schedule cosine needs the run's length: --iters N");
    if (!cfg->checkpoint_dir[0] && (cfg->resume || cfg->checkpoint_every > 0))
        return pc_error_fmt(PC_EUSAGE, err, errlen, "%s needs --checkpoint-dir DIR",
                            cfg->resume ? "--resume" : "--checkpoint-every");
    /* The parser's range holds on the command line; a cfg filled by hand gets it here. */
    if (!(cfg->dilate >= 1 && cfg->dilate <= 1000))
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--dilate %g: the time dilation must be a finite number from 1 "
                            "to 1000",
                            cfg->dilate);
    int gpus[PC_CONFIG_GPU_MAX], ngpus;
    if (pc_config_gpu_parse(cfg->gpu, gpus, &ngpus, why, sizeof(why)) != PC_OK)
        return pc_error_fmt(PC_EUSAGE, err, errlen, "--gpu: %s", why);
    if (ngpus > 0 && cfg->device != PC_DEVICE_CUDA)
        return pc_error_fmt(PC_EUSAGE, err, errlen, "--gpu %s needs --device cuda", cfg->gpu);
    if (pc_config_given(cfg, "compress-on") && cfg->device == PC_DEVICE_CPU)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--compress-on needs device tensors (--device cuda or emulate)");
    if (pc_config_given(cfg, "compress-on") && cfg->mode == PC_MODE_ALLREDUCE)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--compress-on has no effect with --mode allreduce (nothing is "
                            "compressed); drop one of the two");
    /* --device emulate runs it in pc_devcodec's CPU path, the one it has */
    if (spec.id == PC_CODEC_POWERSGD && cfg->device == PC_DEVICE_CUDA &&
        cfg->compress_on == PC_COMPRESS_ON_GPU)
        return pc_error_fmt(PC_EUSAGE, err, errlen,
                            "--compress %s has no CUDA kernels: its products run on the "
                            "compressor thread's core; add --compress-on cpu",
                            cfg->compress);
    return check_pool(cfg, err, errlen);
}

void pc_config_optim(const pc_config_t *cfg, pc_optim_cfg_t *out)
{
    *out = (pc_optim_cfg_t){.lr = cfg->lr,
                            .momentum = cfg->momentum,
                            .nesterov = cfg->nesterov != 0,
                            .weight_decay = cfg->weight_decay,
                            .schedule = (pc_lr_schedule_t)cfg->lr_schedule,
                            .step = cfg->lr_step,
                            .gamma = cfg->lr_gamma,
                            .warmup = cfg->lr_warmup,
                            .total = cfg->iters,
                            .kind = (pc_optim_kind_t)cfg->optimizer,
                            .eps = cfg->eps,
                            .amsgrad = cfg->amsgrad != 0,
                            .lazy = cfg->adam_moments == PC_ADAM_MOMENTS_LAZY,
                            .freeze_after = cfg->adam_freeze_after};
    if (pc_optim_betas_parse(cfg->betas, &out->beta1, &out->beta2, NULL, 0) != PC_OK)
        out->beta1 = out->beta2 = 0;
}

void pc_config_defaults(pc_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->servers = 1;
    snprintf(cfg->bind, sizeof(cfg->bind), "auto");
    cfg->log_level = PC_LOG_INFO;
    snprintf(cfg->compress, sizeof(cfg->compress), "topk:ratio=0.01");
    cfg->pipeline = 1;
    snprintf(cfg->compressors, sizeof(cfg->compressors), "1");
    cfg->mode = PC_MODE_PS;
    cfg->chunk_bytes = 4 << 20; /* 4 MiB: ~1 ms on a 40 Gbit/s link, many chunks per big layer */
    /* Small layers (biases, a classifier's last layer) are a sliver of the bytes but lose
     * the most from sparsification (top-k of a 32-element bias is one element); like
     * BytePS's minimum compress size and DGC's treatment of small layers, they go dense. */
    cfg->compress_min_bytes = 65536;
    cfg->pull = PC_PULL_AUTO;
    cfg->priority = PC_PRIORITY_FORWARD;
    cfg->seed = 42;
    cfg->timeout = 300;
    cfg->iters = 0;
    cfg->lr = PC_CONFIG_SGD_LR;
    cfg->momentum = 0.9;
    cfg->nesterov = 0;
    cfg->weight_decay = 0;
    cfg->lr_schedule = 0;
    cfg->lr_step = 1000;
    cfg->lr_gamma = 0.1;
    cfg->lr_warmup = 0;
    cfg->optimizer = PC_OPTIM_SGD;
    snprintf(cfg->betas, sizeof(cfg->betas), "0.9,0.999");
    cfg->eps = 1e-8;
    cfg->amsgrad = 0;
    cfg->adam_moments = PC_ADAM_MOMENTS_AUTO;
    cfg->adam_freeze_after = 0;
    cfg->metrics[0] = '\0';
    cfg->timeline[0] = '\0';
    cfg->checkpoint_dir[0] = '\0';
    cfg->checkpoint_every = 0;
    cfg->checkpoint_keep = 2;
    cfg->resume = 0;
    cfg->device = PC_DEVICE_CPU;
    snprintf(cfg->gpu, sizeof(cfg->gpu), "auto");
    cfg->compress_on = PC_COMPRESS_ON_GPU;
    cfg->dilate = 1;
    cfg->update = PC_UPDATE_SERVERS;
}

const pc_flags_t *pc_config_options(size_t *nopts)
{
    *nopts = sizeof(config_opts) / sizeof(config_opts[0]);
    return config_opts;
}

pc_flags_group_t pc_config_group(pc_config_t *cfg, const char *title)
{
    size_t n;
    const pc_flags_t *opts = pc_config_options(&n);
    return (pc_flags_group_t){
        .title = title, .opts = opts, .nopts = n, .dst = cfg, .given = &cfg->given};
}

/* The row of flag `name` in config_opts (its bit in cfg->given), or -1. */
static int given_bit(const char *name)
{
    size_t n;
    const pc_flags_t *opts = pc_config_options(&n);
    for (size_t i = 0; i < n && i < 64; i++)
        if (strcmp(opts[i].name, name) == 0)
            return (int)i;
    return -1;
}

int pc_config_given(const pc_config_t *cfg, const char *name)
{
    int i = given_bit(name);
    return i >= 0 ? (int)((cfg->given >> i) & 1) : 0;
}

void pc_config_set_given(pc_config_t *cfg, const char *name, int given)
{
    int i = given_bit(name);
    if (i < 0)
        return;
    if (given)
        cfg->given |= UINT64_C(1) << i;
    else
        cfg->given &= ~(UINT64_C(1) << i);
}
