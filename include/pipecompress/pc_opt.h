/* pc_opt: command-line flags, parsed from tables with getopt_long.
 *
 * A program describes its flags as tables of pc_opt_t (name, type, where the value goes in
 * a destination struct, range, help). Several tables ("groups") can be parsed in one pass,
 * so the runtime's flags (pc_config.h) and a program's own flags share one command
 * line, one --help and one error style. Adding a flag is adding one table row.
 *
 * Errors are one line naming the flag and the bad value, e.g.
 *     --servers: 'x' is not an integer
 *     --chunk-bytes: 0 is out of range (1..1073741824)
 * and come back in the caller's buffer with PC_EUSAGE; programs print them and exit 2.
 * --help and --version are built in. */
#ifndef PC_OPT_H
#define PC_OPT_H

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
    const char *name; /* long name without "--" */
    int short_name;   /* single-letter alias, or 0 */
    pc_opt_type_t type;
    size_t offset;         /* offsetof the field in the destination struct */
    size_t size;           /* PC_OPT_STRING: the buffer's size including the NUL */
    double min, max;       /* numeric range, inclusive (ignored when min > max) */
    const char *choices;   /* PC_OPT_CHOICE: "auto|none|..." */
    const char *metavar;   /* the value's name in --help ("N", "FILE") */
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
#define PC_OPT_HELP    1
#define PC_OPT_VERSION 2

/* Parse argv[1..argc) into the groups' destination structs (which hold the defaults on
 * entry). Returns PC_OK, PC_OPT_HELP, PC_OPT_VERSION, or PC_EUSAGE with a one-line
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

/* For X-macro tables of choices: X(NAME, "spelling") rows expand with PC_OPT_CHOICE_TEXT to
 * "|a|b|c"; + 1 skips the first bar. A table of enum values and their flag spellings then
 * yields both the enum and the PC_OPT_CHOICE string, which cannot drift apart. */
#define PC_OPT_CHOICE_TEXT(name, text) "|" text

#ifdef __cplusplus
}
#endif
#endif /* PC_OPT_H */
