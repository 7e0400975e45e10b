/* pc_file: crash-safe files and their CRC-32 (see pc_file.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_file.h"

/* Longest path kept: PATH_MAX on Linux. */
#define PATH_LEN 4096

struct pc_file_writer {
    FILE *f;
    char path[PATH_LEN], tmp[PATH_LEN + 32];
    uint64_t size;
    uint32_t crc;
    int err; /* errno of the first failed write, 0 if none */
};

uint32_t pc_file_crc(uint32_t crc, const void *p, size_t n)
{
    uLong c = crc;
    const Bytef *b = p;
    while (n) { /* crc32 takes uInt lengths */
        uInt step = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, b, step);
        b += step;
        n -= step;
    }
    return (uint32_t)c;
}

int pc_file_check_writable(const char *path, char *err, size_t errlen)
{
    char dir[PATH_LEN];
    struct stat sb;
    if (path[0] == '\0')
        return pc_error_fmt(PC_EIO, err, errlen, "an empty file name");
    if (strlen(path) >= PATH_LEN)
        return pc_error_fmt(PC_ERANGE, err, errlen, "file name too long: '%.64s...'", path);
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return pc_error_fmt(PC_EIO, err, errlen, "'%s' is a directory, not a file name", path);
    snprintf(dir, sizeof(dir), "%s", path);
    const char *d = dirname(dir); /* "." for a bare name */
    if (stat(d, &sb) != 0)
        return pc_error_fmt(PC_EIO, err, errlen, "cannot write '%s': its directory '%s': %s", path,
                            d, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return pc_error_fmt(PC_EIO, err, errlen, "cannot write '%s': '%s' is not a directory", path,
                            d);
    /* The real test: create the writer's own temporary name there, and remove it. access()
     * would pass root through any directory, /proc included, where creating fails. */
    char tmp[PATH_LEN + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return pc_error_fmt(PC_EIO, err, errlen, "cannot create files beside '%s': %s", path,
                            strerror(errno));
    close(fd);
    unlink(tmp);
    return PC_OK;
}

int pc_file_writer_open(const char *path, pc_file_writer_t **out, char *err, size_t errlen)
{
    if (strlen(path) >= PATH_LEN)
        return pc_error_fmt(PC_ERANGE, err, errlen, "file name too long: '%.64s...'", path);
    pc_file_writer_t *w = calloc(1, sizeof(*w));
    if (!w)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    snprintf(w->path, sizeof(w->path), "%s", path);
    snprintf(w->tmp, sizeof(w->tmp), "%s.tmp.%d", path, (int)getpid());
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        int rc =
            pc_error_fmt(PC_EIO, err, errlen, "cannot create '%s': %s", w->tmp, strerror(errno));
        free(w);
        return rc;
    }
    *out = w;
    return PC_OK;
}

void pc_file_writer_write(pc_file_writer_t *w, const void *data, size_t len)
{
    if (w->err || len == 0)
        return;
    if (fwrite(data, 1, len, w->f) != len) {
        w->err = errno ? errno : EIO;
        return;
    }
    w->crc = pc_file_crc(w->crc, data, len);
    w->size += len;
}

uint64_t pc_file_writer_size(const pc_file_writer_t *w)
{
    return w->size;
}

uint32_t pc_file_writer_crc(const pc_file_writer_t *w)
{
    return w->crc;
}

void pc_file_writer_abort(pc_file_writer_t *w)
{
    if (!w)
        return;
    fclose(w->f);
    unlink(w->tmp);
    free(w);
}

void pc_file_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* fsync the directory holding path, so that the rename itself is durable. */
static void fsync_parent(const char *path)
{
    char dir[PATH_LEN];
    snprintf(dir, sizeof(dir), "%s", path);
    pc_file_sync_dir(dirname(dir));
}

int pc_file_writer_commit(pc_file_writer_t *w, char *err, size_t errlen)
{
    int e = w->err;
    if (!e && (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0))
        e = errno ? errno : EIO;
    if (fclose(w->f) != 0 && !e)
        e = errno ? errno : EIO;
    w->f = NULL;
    if (!e && rename(w->tmp, w->path) != 0)
        e = errno;
    int rc = PC_OK;
    if (e) {
        rc = pc_error_fmt(PC_EIO, err, errlen, "cannot write '%s': %s", w->path, strerror(e));
        unlink(w->tmp);
    } else {
        fsync_parent(w->path);
    }
    free(w);
    return rc;
}
