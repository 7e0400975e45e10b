/* pc_log: rank- and thread-tagged, level-filtered log lines. */
#include "config.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_log.h"
#include "pipecompress/pc_time.h"

/* One line's budget; longer messages are cut rather than split across writes. */
#define LINE_MAX_BYTES 1024

struct pc_log {
    FILE *stream;
    int rank;
    pc_log_level_t level;
    int64_t t0_ns; /* creation time: the origin of the timestamps */
};

static const char *const level_names[] = {
#define LEVEL_NAME(name, text) text,
    PC_LOG_LEVEL_TABLE(LEVEL_NAME)
#undef LEVEL_NAME
};

int pc_log_create(FILE *stream, int rank, pc_log_level_t level, pc_log_t **out)
{
    if (!stream || !out || (int)level < PC_LOG_ERROR || level > PC_LOG_TRACE)
        return PC_EINVAL;
    pc_log_t *log = malloc(sizeof(*log));
    if (!log)
        return PC_ENOMEM;
    log->stream = stream;
    log->rank = rank;
    log->level = level;
    log->t0_ns = pc_time_ns();
    *out = log;
    return PC_OK;
}

void pc_log_destroy(pc_log_t *log)
{
    free(log);
}

void pc_log_set_rank(pc_log_t *log, int rank)
{
    log->rank = rank;
}

void pc_log_set_level(pc_log_t *log, pc_log_level_t level)
{
    log->level = level;
}

bool pc_log_enabled(const pc_log_t *log, pc_log_level_t level)
{
    return level <= (log ? log->level : PC_LOG_INFO);
}

const char *pc_log_level_name(int level)
{
    if (level < 0 || level > PC_LOG_TRACE)
        return "?";
    return level_names[level];
}

int pc_log_level_parse(const char *name, pc_log_level_t *out)
{
    if (!name || !out)
        return PC_EINVAL;
    for (int i = 0; i <= PC_LOG_TRACE; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (pc_log_level_t)i;
            return PC_OK;
        }
    }
    return PC_EINVAL;
}

void pc_log_write(const pc_log_t *log, pc_log_level_t level, const char *thread, const char *fmt,
                  ...)
{
    if (!pc_log_enabled(log, level))
        return;
    FILE *stream = log ? log->stream : stderr;
    int64_t now = pc_time_ns();
    double secs = log ? (double)(now - log->t0_ns) * 1e-9 : 0.0;
    char line[LINE_MAX_BYTES + 1]; /* the line, and its newline */
    char rank[16];
    if (log && log->rank >= 0)
        snprintf(rank, sizeof(rank), "r%d", log->rank);
    else
        snprintf(rank, sizeof(rank), "r-");
    int len = snprintf(line, LINE_MAX_BYTES, "[pc %s %-10s %9.3f] %s: ", rank,
                       thread ? thread : "main", secs, pc_log_level_name(level));
    if (len < 0)
        return;
    if (len < LINE_MAX_BYTES) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line + len, LINE_MAX_BYTES - (size_t)len, fmt, ap);
        va_end(ap);
    }
    size_t n = strlen(line);
    line[n++] = '\n';
    /* The line and its newline in one write: stderr is unbuffered, so two calls would be
     * two write(2)s, and another rank's line (mpirun merges the ranks' stderr) could land
     * between them. The lock keeps this process's threads' lines whole. */
    flockfile(stream);
    fwrite(line, 1, n, stream);
    funlockfile(stream);
    if (level <= PC_LOG_WARN)
        fflush(stream);
}
