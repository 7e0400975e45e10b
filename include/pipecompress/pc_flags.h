/* pc_flags: command-line flags, parsed from tables with getopt_long.
 *
 * A program describes its flags as tables of pc_flags_t (name, type, where the value goes in
 * a destination struct, range, help). Several tables ("groups") can be parsed in one pass,
 * so the runtime's flags (pc_config.h) and a program's own flags share one command
 * line, one --help and one error style. Adding a flag is adding one table row.
 *
 * Errors are one line naming the flag and the bad value, e.g.
 *     --servers: 'x' is not an integer
 *     --chunk-bytes: 0 is out of range (1..1073741824)
 * and come back in the caller's buffer with PC_EUSAGE; programs print them and exit 2.
 * --help and --version are built in. */
#ifndef PC_FLAGS_H
#define PC_FLAGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pc_flags_type {
    PC_FLAGS_INT,    /* int, decimal, range-checked */
    PC_FLAGS_INT64,  /* int64_t, decimal, range-checked */
    PC_FLAGS_SIZE,   /* int64_t bytes: 4096, 64K, 4M, 1G (binary units; KiB/MiB/GiB too) */
    PC_FLAGS_DOUBLE, /* double, finite, range-checked */
    PC_FLAGS_STRING, /* char[size], copied; too long is an error */
    PC_FLAGS_CHOICE, /* int: index of the value in choices ("a|b|c") */
    PC_FLAGS_FLAG,   /* int set to 1, takes no value */
} pc_flags_type_t;

/* Optional extra validation of a parsed value (a pointer to the stored field). Writes a
 * message without the flag's name into err and returns non-zero to reject. */
typedef int (*pc_flags_check_fn)(const void *value, char *err, size_t errlen);

typedef struct pc_flags {
    const char *name; /* long name without "--" */
    int short_name;   /* single-letter alias, or 0 */
    pc_flags_type_t type;
    size_t offset;           /* offsetof the field in the destination struct */
    size_t size;             /* PC_FLAGS_STRING: the buffer's size including the NUL */
    double min, max;         /* numeric range, inclusive (ignored when min > max) */
    const char *choices;     /* PC_FLAGS_CHOICE: "auto|none|..." */
    const char *metavar;     /* the value's name in --help ("N", "FILE") */
    const char *help;        /* one line */
    pc_flags_check_fn check; /* optional */
} pc_flags_t;

/* One table and the struct its values go into. */
typedef struct pc_flags_group {
    const char *title; /* heading in --help */
    const pc_flags_t *opts;
    size_t nopts;
    void *dst;
    uint64_t *given; /* optional: bit i is set when opts[i] is on the command line (a table
                      * that records this has at most 64 rows); NULL: not recorded */
} pc_flags_group_t;

/* Positive results of a parse that asked for something other than a run. */
#define PC_FLAGS_HELP    1
#define PC_FLAGS_VERSION 2

/* Parse argv[1..argc) into the groups' destination structs (which hold the defaults on
 * entry). Returns PC_OK, PC_FLAGS_HELP, PC_FLAGS_VERSION, or PC_EUSAGE with a one-line
 * message in err. Operands (arguments that are not flags) are an error unless
 * first_operand is not NULL, in which case parsing stops at the first one and its index
 * goes there (argc when none). On error the destination structs may hold some parsed
 * values: callers exit. Not thread-safe (getopt_long keeps global state). */
int pc_flags_parse(const pc_flags_group_t *groups, size_t ngroups, int argc, char **argv,
                   int *first_operand, char *err, size_t errlen);

/* Write --help text for the groups: "  -s, --servers N   help [default]". */
void pc_flags_usage(const pc_flags_group_t *groups, size_t ngroups, FILE *out);

/* What a program does with pc_flags_parse's result rc. PC_OK: returns -1 (go on). Otherwise,
 * when speak is true (rank 0 of an MPI job, say), writes the --help text ("usage: " +
 * usage, then the groups) or "prog (PipeCompress) VERSION" to out, or "prog: err" to errs;
 * and returns the exit status: 0 after help or version, 2 after a usage error. */
int pc_flags_finish(int rc, const pc_flags_group_t *groups, size_t ngroups, const char *prog,
                    const char *usage, const char *err, int speak, FILE *out, FILE *errs);

/* Write every option's current value, one "name = value" per line, each prefixed by
 * `prefix`. Used by rank 0 to print the effective configuration. */
void pc_flags_print(const pc_flags_group_t *groups, size_t ngroups, const char *prefix, FILE *out);

/* Parse one value for an option as the command line would (used by the parser and by
 * configuration files or environment overrides). Returns PC_OK or PC_EUSAGE with a message
 * naming the flag. Thread-safe. */
int pc_flags_set(const pc_flags_t *opt, void *dst, const char *value, char *err, size_t errlen);

/* For X-macro tables of choices: X(NAME, "spelling") rows expand with PC_FLAGS_CHOICE_TEXT to
 * "|a|b|c"; + 1 skips the first bar. A table of enum values and their flag spellings then
 * yields both the enum and the PC_FLAGS_CHOICE string, which cannot drift apart. */
#define PC_FLAGS_CHOICE_TEXT(name, text) "|" text

#ifdef __cplusplus
}
#endif
#endif /* PC_FLAGS_H */
