/* pc_config: command-line flags, parsed from tables with getopt_long.
 *
 * A program describes its flags as tables of pc_opt_t (name, type, where the value goes in
 * a destination struct, range, help). Several tables ("groups") can be parsed in one pass,
 * so the runtime's flags (pc_config_t, below) and a program's own flags share one command
 * line, one --help and one error style. Adding a flag is adding one table row.
 *
 * Errors are one line naming the flag and the bad value, e.g.
 *     --servers: 'x' is not an integer
 *     --chunk-bytes: 0 is out of range (1..1073741824)
 * and come back in the caller's buffer with PC_EUSAGE; programs print them and exit 2.
 * --help and --version are built in. */
#ifndef PC_CONFIG_H
#define PC_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pc_opt_type {
    PC_OPT_INT,    /* int, decimal, range-checked */
    PC_OPT_INT64,  /* int64_t, decimal, range-checked */
    PC_OPT_SIZE,   /* int64_t bytes: 4096, 64K, 4M, 1G (binary units; KiB/MiB/GiB too) */
    PC_OPT_DOUBLE, /* double, finite, range-checked */
    PC_OPT_STRING, /* char[size], copied; too long is an error */
    PC_OPT_CHOICE, /* int: index of the value in choices ("a|b|c") */
    PC_OPT_FLAG,   /* int set to 1, takes no value */
} pc_opt_type_t;

/* Optional extra validation of a parsed value (a pointer to the stored field). Writes a
 * message without the flag's name into err and returns non-zero to reject. */
typedef int (*pc_opt_check_fn)(const void *value, char *err, size_t errlen);

typedef struct pc_opt {
    const char *name;      /* long name without "--" */
    int short_name;        /* single-letter alias, or 0 */
    pc_opt_type_t type;
    size_t offset;         /* offsetof the field in the destination struct */
    size_t size;           /* PC_OPT_STRING: the buffer's size including the NUL */
    double min, max;       /* numeric range, inclusive (ignored when min > max) */
    const char *choices;   /* PC_OPT_CHOICE: "auto|none|..." */
    const char *metavar;   /* value placeholder in --help ("N", "FILE") */
    const char *help;      /* one line */
    pc_opt_check_fn check; /* optional */
} pc_opt_t;

/* One table and the struct its values go into. */
typedef struct pc_opt_group {
    const char *title; /* heading in --help */
    const pc_opt_t *opts;
    size_t nopts;
    void *dst;
    uint64_t *given; /* optional: bit i is set when opts[i] is on the command line (a table
                      * that records this has at most 64 rows); NULL: not recorded */
} pc_opt_group_t;

/* Positive results of a parse that asked for something other than a run. */
#define PC_CONFIG_HELP 1
#define PC_CONFIG_VERSION 2

/* Parse argv[1..argc) into the groups' destination structs (which hold the defaults on
 * entry). Returns PC_OK, PC_CONFIG_HELP, PC_CONFIG_VERSION, or PC_EUSAGE with a one-line
 * message in err. Operands (arguments that are not flags) are an error unless
 * first_operand is not NULL, in which case parsing stops at the first one and its index
 * goes there (argc when none). On error the destination structs may hold some parsed
 * values: callers exit. Not thread-safe (getopt_long keeps global state). */
int pc_opt_parse(const pc_opt_group_t *groups, size_t ngroups, int argc, char **argv,
                 int *first_operand, char *err, size_t errlen);

/* Write --help text for the groups: "  -s, --servers N   help [default]". */
void pc_opt_usage(const pc_opt_group_t *groups, size_t ngroups, FILE *out);

/* What a program does with pc_opt_parse's result rc. PC_OK: returns -1 (go on). Otherwise,
 * when speak is true (rank 0 of an MPI job, say), writes the --help text ("usage: " +
 * usage, then the groups) or "prog (PipeCompress) VERSION" to out, or "prog: err" to errs;
 * and returns the exit status: 0 after help or version, 2 after a usage error. */
int pc_opt_finish(int rc, const pc_opt_group_t *groups, size_t ngroups, const char *prog,
                  const char *usage, const char *err, int speak, FILE *out, FILE *errs);

/* Write every option's current value, one "name = value" per line, each prefixed by
 * `prefix`. Used by rank 0 to print the effective configuration. */
void pc_opt_print(const pc_opt_group_t *groups, size_t ngroups, const char *prefix, FILE *out);

/* Parse one value for an option as the command line would (used by the parser and by
 * configuration files or environment overrides). Returns PC_OK or PC_EUSAGE with a message
 * naming the flag. Thread-safe. */
int pc_opt_set(const pc_opt_t *opt, void *dst, const char *value, char *err, size_t errlen);

/* ---- The runtime's own flags ------------------------------------------------------- */

/* Longest --bind value kept. */
#define PC_CONFIG_BIND_LEN 256
/* Most cores an explicit --bind list may name. */
#define PC_CONFIG_BIND_MAX 256

/* A parsed --bind value. auto: plan cores from the topology (pc_topo); none: do not bind;
 * list: the node's threads take these logical core indices in order (local rank 0's
 * threads first). */
typedef enum pc_bind_mode { PC_BIND_AUTO = 0, PC_BIND_NONE = 1, PC_BIND_LIST = 2 } pc_bind_mode_t;

typedef struct pc_bind {
    pc_bind_mode_t mode;
    int ncores;                     /* PC_BIND_LIST: entries in cores[] */
    int cores[PC_CONFIG_BIND_MAX];  /* PC_BIND_LIST: logical core indices, >= 0 */
} pc_bind_t;

/* Parse "auto", "none" or a list "0,2,4-7" of logical core indices. Returns PC_OK, or
 * PC_EUSAGE with a message (without the flag name) in err. Thread-safe. */
int pc_config_bind_parse(const char *text, pc_bind_t *out, char *err, size_t errlen);

/* Longest --compress spec and file name kept. */
#define PC_CONFIG_SPEC_LEN 256
#define PC_CONFIG_PATH_LEN 1024

typedef enum pc_config_mode { PC_MODE_PS = 0, PC_MODE_ALLREDUCE = 1 } pc_config_mode_t;
typedef enum pc_config_pull { PC_PULL_AUTO = 0, PC_PULL_DENSE = 1, PC_PULL_SPARSE = 2 } pc_config_pull_t;

typedef struct pc_config {
    int servers;                   /* --servers S: ranks acting as parameter servers */
    char bind[PC_CONFIG_BIND_LEN]; /* --bind auto|none|LIST (see pc_topo.h) */
    int log_level;                 /* --log-level: a pc_log_level_t */
    char compress[PC_CONFIG_SPEC_LEN]; /* --compress SPEC (pc_codec_spec_parse) */
    int pipeline;                  /* --pipeline off|on: compress on the compressor thread */
    int mode;                      /* --mode ps|allreduce: a pc_config_mode_t */
    int64_t chunk_bytes;           /* --chunk-bytes: largest chunk of a tensor */
    int64_t compress_min_bytes;    /* --compress-min-bytes: smaller chunks travel dense */
    int pull;                      /* --pull auto|dense|sparse: a pc_config_pull_t */
    int64_t seed;                  /* --seed: every random choice derives from it */
    double timeout;                /* --timeout SECONDS: longest wait before aborting */
    int64_t iters;                 /* --iters N: stop after N iterations (0: the program's) */
    double lr;                     /* --lr and the optimizer (pc_optim.h) */
    double momentum;
    int nesterov;
    double weight_decay;
    int lr_schedule;               /* a pc_lr_schedule_t */
    int64_t lr_step;
    double lr_gamma;
    int64_t lr_warmup;
    char metrics[PC_CONFIG_PATH_LEN]; /* --metrics FILE: JSON lines, every rank; "" = off */
    char timeline[PC_CONFIG_PATH_LEN]; /* --timeline FILE: Chrome trace of every thread */
    char checkpoint_dir[PC_CONFIG_PATH_LEN]; /* --checkpoint-dir DIR: "" = no checkpoints */
    int64_t checkpoint_every;      /* --checkpoint-every N: 0 = at the end and on signals */
    int checkpoint_keep;           /* --checkpoint-keep K: complete checkpoints kept */
    int resume;                    /* --resume: start from the newest complete checkpoint */
    uint64_t given;                /* bit i: row i of pc_config_options() was on the command
                                    * line (pc_config_group records it); the runtime's
                                    * defaults that depend on other flags use it */
} pc_config_t;

/* Fill cfg with the defaults. */
void pc_config_defaults(pc_config_t *cfg);

/* The option table for pc_config_t (static; do not free). */
const pc_opt_t *pc_config_options(size_t *nopts);

/* The option group of the runtime's flags for pc_opt_parse: pc_config_options() with cfg as
 * destination, recording which flags were given in cfg->given. cfg is borrowed. */
pc_opt_group_t pc_config_group(pc_config_t *cfg, const char *title);

/* Whether flag `name` (long name without "--") was given on the command line, as recorded
 * by a parse of pc_config_group(cfg). 0 for unknown names. Thread-safe. */
int pc_config_given(const pc_config_t *cfg, const char *name);

#ifdef __cplusplus
}
#endif
#endif /* PC_CONFIG_H */
