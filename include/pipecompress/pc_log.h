/* pc_log: rank- and thread-tagged logging with levels.
 *
 * A line looks like
 *     [pc r1 compressor   12.345] warn: queue full for 3.2 ms
 * (rank, thread tag, seconds since the logger was created, level, message). Every line is
 * formatted into one buffer and written with a single locked stdio call, so lines from
 * different threads never interleave. */
#ifndef PC_LOG_H
#define PC_LOG_H

#include <stdbool.h>
#include <stdio.h>

#include "pipecompress/pc_flags.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The levels, most severe first: X(NAME, "flag spelling"), in enum order. */
#define PC_LOG_LEVEL_TABLE(X)                                                                      \
    X(ERROR, "error") X(WARN, "warn") X(INFO, "info") X(DEBUG, "debug") X(TRACE, "trace")

typedef enum pc_log_level {
#define PC_LOG_LEVEL_ENUM(name, text) PC_LOG_##name,
    PC_LOG_LEVEL_TABLE(PC_LOG_LEVEL_ENUM)
#undef PC_LOG_LEVEL_ENUM
} pc_log_level_t;

/* The level names in order, as the --log-level flag spells them (from the table). */
#define PC_LOG_LEVEL_CHOICES (PC_LOG_LEVEL_TABLE(PC_FLAGS_CHOICE_TEXT) + 1)

typedef struct pc_log pc_log_t;

/* Create a logger writing to `stream` (not owned: the caller keeps it open until
 * pc_log_destroy). rank < 0 prints "-" (before MPI is up). Returns PC_OK, PC_EINVAL or
 * PC_ENOMEM; on error *out is untouched. */
int pc_log_create(FILE *stream, int rank, pc_log_level_t level, pc_log_t **out);

/* Free a logger (NULL is fine). No thread may be logging through it. */
void pc_log_destroy(pc_log_t *log);

/* Change the rank tag or the level. Not thread-safe against concurrent writers: call during
 * set-up, before threads that log are started. */
void pc_log_set_rank(pc_log_t *log, int rank);
void pc_log_set_level(pc_log_t *log, pc_log_level_t level);

/* True when a message of `level` would be printed. Thread-safe. */
bool pc_log_enabled(const pc_log_t *log, pc_log_level_t level);

/* Write one line (a trailing newline is added) if `level` is enabled. `thread` is a short
 * tag naming the calling thread ("main", "backprop", "compressor", "server"; NULL means
 * "main"). A NULL log writes to stderr at levels up to info with rank "-". Messages longer
 * than 1 KiB are cut. Thread-safe. */
void pc_log_write(const pc_log_t *log, pc_log_level_t level, const char *thread, const char *fmt,
                  ...) __attribute__((format(printf, 4, 5)));

/* Name of a level ("warn"); "?" for an unknown value. Static string. */
const char *pc_log_level_name(int level);

/* Parse a level name; returns PC_OK or PC_EINVAL (*out untouched). */
int pc_log_level_parse(const char *name, pc_log_level_t *out);

#ifdef __cplusplus
}
#endif
#endif /* PC_LOG_H */
