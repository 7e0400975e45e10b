/* pc_ckpt: checkpoint files, manifests, selection and pruning (see pc_ckpt.h). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipecompress/pc_ckpt.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_file.h"

#define MANIFEST     "MANIFEST"
#define HEAD         "PipeCompress checkpoint 1\n"
#define MANIFEST_MAX (1u << 24)

int pc_ckpt_path(const char *dir, uint64_t iteration, int rank, char *out, size_t len)
{
    int n = rank < 0
                ? snprintf(out, len, "%s/ckpt-%012" PRIu64, dir, iteration)
                : snprintf(out, len, "%s/ckpt-%012" PRIu64 "/rank-%d.bin", dir, iteration, rank);
    return n < 0 || (size_t)n >= len ? PC_ERANGE : PC_OK;
}

int pc_ckpt_dir_create(const char *dir, char *err, size_t errlen)
{
    char path[4096];
    size_t len = strlen(dir);
    if (len == 0 || len >= sizeof(path))
        return pc_error_fmt(PC_EIO, err, errlen, "checkpoint directory '%s': bad length", dir);
    memcpy(path, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return pc_error_fmt(PC_EIO, err, errlen, "'%s': cannot create '%s': %s", dir, path,
                                strerror(errno));
        path[i] = c;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(dir, W_OK | X_OK) != 0)
        return pc_error_fmt(PC_EIO, err, errlen, "'%s': not a writable directory", dir);
    return PC_OK;
}

/* ---- writer: a pc_file writer under a checkpoint's name ------------------------------ */

struct pc_ckpt_writer {
    pc_file_writer_t *f;
};

/* Open ckdir/<name> (through a temporary name in ckdir). */
static int writer_open_path(const char *ckdir, const char *name, pc_ckpt_writer_t **out, char *err,
                            size_t errlen)
{
    char path[4200];
    if (snprintf(path, sizeof(path), "%s/%s", ckdir, name) >= (int)sizeof(path))
        return pc_error_fmt(PC_ERANGE, err, errlen, "checkpoint file name too long in '%s'", ckdir);
    pc_ckpt_writer_t *w = calloc(1, sizeof(*w));
    if (!w)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    int rc = pc_file_writer_open(path, &w->f, err, errlen);
    if (rc != PC_OK) {
        free(w);
        return rc;
    }
    *out = w;
    return PC_OK;
}

int pc_ckpt_writer_open(const char *dir, uint64_t iteration, int rank, pc_ckpt_writer_t **out,
                        char *err, size_t errlen)
{
    char ck[4096], name[32];
    if (pc_ckpt_path(dir, iteration, -1, ck, sizeof(ck)) != PC_OK)
        return pc_error_fmt(PC_ERANGE, err, errlen, "checkpoint directory name too long: '%s'",
                            dir);
    if (mkdir(ck, 0755) != 0 && errno != EEXIST)
        return pc_error_fmt(PC_EIO, err, errlen, "cannot create '%s': %s", ck, strerror(errno));
    snprintf(name, sizeof(name), "rank-%d.bin", rank);
    return writer_open_path(ck, name, out, err, errlen);
}

void pc_ckpt_writer_write(pc_ckpt_writer_t *w, const void *data, size_t len)
{
    pc_file_writer_write(w->f, data, len);
}

void pc_ckpt_writer_abort(pc_ckpt_writer_t *w)
{
    if (!w)
        return;
    pc_file_writer_abort(w->f);
    free(w);
}

int pc_ckpt_writer_commit(pc_ckpt_writer_t *w, pc_ckpt_file_t *info, char *err, size_t errlen)
{
    pc_ckpt_file_t got = {.size = pc_file_writer_size(w->f), .crc = pc_file_writer_crc(w->f)};
    int rc = pc_file_writer_commit(w->f, err, errlen);
    free(w);
    if (rc == PC_OK && info)
        *info = got;
    return rc;
}

/* ---- manifests ---------------------------------------------------------------------- */

int pc_ckpt_manifest_write(const char *dir, const pc_ckpt_meta_t *meta, const pc_ckpt_file_t *files,
                           char *err, size_t errlen)
{
    char ck[4096];
    if (pc_ckpt_path(dir, meta->iteration, -1, ck, sizeof(ck)) != PC_OK)
        return pc_error_fmt(PC_ERANGE, err, errlen, "checkpoint directory name too long: '%s'",
                            dir);
    size_t cap = 512 + strlen(meta->config) + 64 * (size_t)meta->world, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    len += (size_t)snprintf(buf + len, cap - len,
                            HEAD "iteration %" PRIu64 "\nworld %d\nworkers %d\nservers %d\n"
                                 "model %016" PRIx64 "\nconfig %s\n",
                            meta->iteration, meta->world, meta->workers, meta->servers, meta->model,
                            meta->config);
    for (int r = 0; r < meta->world; r++)
        len +=
            (size_t)snprintf(buf + len, cap - len, "file rank-%d.bin %" PRIu64 " %08" PRIx32 "\n",
                             r, files[r].size, files[r].crc);
    len += (size_t)snprintf(buf + len, cap - len, "crc %08" PRIx32 "\n", pc_file_crc(0, buf, len));
    pc_ckpt_writer_t *w;
    int rc = writer_open_path(ck, MANIFEST, &w, err, errlen);
    if (rc == PC_OK) {
        pc_ckpt_writer_write(w, buf, len);
        rc = pc_ckpt_writer_commit(w, NULL, err, errlen);
    }
    free(buf);
    return rc;
}

/* The next line of [*p, end): its text in line (NUL-terminated); false at the end or when
 * the line is too long or holds a NUL. */
static bool next_line(const char **p, const char *end, char *line, size_t cap)
{
    const char *s = *p;
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    if (s >= end || !nl || (size_t)(nl - s) >= cap || memchr(s, '\0', (size_t)(nl - s)))
        return false;
    memcpy(line, s, (size_t)(nl - s));
    line[nl - s] = '\0';
    *p = nl + 1;
    return true;
}

/* "key <unsigned decimal>" with value <= max. */
static bool key_u64(const char *line, const char *key, uint64_t max, uint64_t *v)
{
    size_t kl = strlen(key);
    if (strncmp(line, key, kl) != 0 || line[kl] != ' ' || line[kl + 1] < '0' || line[kl + 1] > '9')
        return false;
    char *e;
    errno = 0;
    unsigned long long x = strtoull(line + kl + 1, &e, 10);
    if (errno || *e || x > max)
        return false;
    *v = x;
    return true;
}

static bool hex_u64(const char *s, int digits, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < digits; i++) {
        int c = s[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else
            return false;
        x = x << 4 | (uint64_t)d;
    }
    *v = x;
    return s[digits] == '\0';
}

int pc_ckpt_manifest_parse(const char *buf, size_t len, pc_ckpt_meta_t *meta, pc_ckpt_file_t *files,
                           int max_files, char *err, size_t errlen)
{
    const char *p = buf, *end = buf + len;
    char line[PC_CKPT_CONFIG_LEN + 16];
    uint64_t v[5];
    static const char *const keys[] = {"iteration", "world", "workers", "servers"};
    static const uint64_t maxs[] = {UINT64_MAX / 2, PC_CKPT_MAX_RANKS, PC_CKPT_MAX_RANKS,
                                    PC_CKPT_MAX_RANKS};
    if (len > MANIFEST_MAX || !next_line(&p, end, line, sizeof(line)) ||
        strcmp(line, "PipeCompress checkpoint 1"))
        return pc_error_fmt(PC_EFORMAT, err, errlen, "not a version-1 checkpoint manifest");
    for (int k = 0; k < 4; k++)
        if (!next_line(&p, end, line, sizeof(line)) || !key_u64(line, keys[k], maxs[k], &v[k]))
            return pc_error_fmt(PC_EFORMAT, err, errlen, "manifest: bad or missing '%s' line",
                                keys[k]);
    if (!next_line(&p, end, line, sizeof(line)) || strncmp(line, "model ", 6) ||
        !hex_u64(line + 6, 16, &v[4]))
        return pc_error_fmt(PC_EFORMAT, err, errlen, "manifest: bad or missing 'model' line");
    memset(meta, 0, sizeof(*meta));
    meta->iteration = v[0];
    meta->world = (int)v[1];
    meta->workers = (int)v[2];
    meta->servers = (int)v[3];
    meta->model = v[4];
    if (meta->world < 1 || meta->workers < 1 || meta->workers + meta->servers != meta->world)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "manifest: %d workers + %d servers != world %d", meta->workers,
                            meta->servers, meta->world);
    if (meta->world > max_files)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "manifest: world %d is larger than this job's %d", meta->world,
                            max_files);
    if (!next_line(&p, end, line, sizeof(line)) || strncmp(line, "config ", 7) ||
        strlen(line + 7) >= PC_CKPT_CONFIG_LEN)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "manifest: bad or missing 'config' line");
    snprintf(meta->config, sizeof(meta->config), "%s", line + 7);
    for (int r = 0; r < meta->world; r++) {
        char want[32];
        int wl = snprintf(want, sizeof(want), "file rank-%d.bin ", r);
        uint64_t size, crc;
        char *sp;
        if (!next_line(&p, end, line, sizeof(line)) || strncmp(line, want, (size_t)wl) ||
            line[wl] < '0' || line[wl] > '9')
            return pc_error_fmt(PC_EFORMAT, err, errlen,
                                "manifest: bad or missing line for rank-%d.bin", r);
        errno = 0;
        size = strtoull(line + wl, &sp, 10);
        if (errno || *sp != ' ' || !hex_u64(sp + 1, 8, &crc))
            return pc_error_fmt(PC_EFORMAT, err, errlen,
                                "manifest: bad size or CRC for rank-%d.bin", r);
        files[r] = (pc_ckpt_file_t){.size = size, .crc = (uint32_t)crc};
    }
    size_t body = (size_t)(p - buf);
    uint64_t crc;
    if (!next_line(&p, end, line, sizeof(line)) || strncmp(line, "crc ", 4) ||
        !hex_u64(line + 4, 8, &crc))
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "manifest: bad or missing 'crc' line (truncated?)");
    if (p != end)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "manifest: trailing bytes after the 'crc' line");
    if ((uint32_t)crc != pc_file_crc(0, buf, body))
        return pc_error_fmt(PC_EFORMAT, err, errlen, "manifest: CRC mismatch (corrupt)");
    return PC_OK;
}

/* Read the manifest of checkpoint `iteration` (files: a new array of meta->world). */
static int manifest_read(const char *dir, uint64_t iteration, pc_ckpt_meta_t *meta,
                         pc_ckpt_file_t **files, char *err, size_t errlen)
{
    char path[4200], ck[4096];
    *files = NULL;
    if (pc_ckpt_path(dir, iteration, -1, ck, sizeof(ck)) != PC_OK)
        return pc_error_fmt(PC_ERANGE, err, errlen, "path too long");
    snprintf(path, sizeof(path), "%s/" MANIFEST, ck);
    FILE *f = fopen(path, "rb");
    if (!f)
        return pc_error_fmt(errno == ENOENT ? PC_ENOENT : PC_EIO, err, errlen, "%s: %s", path,
                            errno == ENOENT ? "no manifest (incomplete checkpoint)"
                                            : strerror(errno));
    char *buf = malloc(MANIFEST_MAX + 1);
    size_t len = buf ? fread(buf, 1, MANIFEST_MAX + 1, f) : 0;
    int rerr = ferror(f);
    fclose(f);
    if (!buf)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    int rc;
    if (rerr)
        rc = pc_error_fmt(PC_EIO, err, errlen, "%s: read error", path);
    else if (!(*files = malloc(sizeof(pc_ckpt_file_t) * PC_CKPT_MAX_RANKS)))
        rc = pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    else {
        char why[256];
        rc = pc_ckpt_manifest_parse(buf, len, meta, *files, PC_CKPT_MAX_RANKS, why, sizeof(why));
        if (rc != PC_OK)
            pc_error_fmt(rc, err, errlen, "%s: %s", path, why);
        else if (meta->iteration != iteration)
            rc = pc_error_fmt(PC_EFORMAT, err, errlen, "%s: names iteration %" PRIu64, path,
                              meta->iteration);
    }
    free(buf);
    if (rc != PC_OK) {
        free(*files);
        *files = NULL;
    }
    return rc;
}

/* Size and CRC of a whole file. */
static int file_crc(const char *path, pc_ckpt_file_t *out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? PC_ENOENT : PC_EIO;
    static const size_t B = 1 << 20;
    unsigned char *buf = malloc(B);
    if (!buf) {
        fclose(f);
        return PC_ENOMEM;
    }
    uint32_t crc = 0;
    uint64_t size = 0;
    size_t n;
    while ((n = fread(buf, 1, B, f)) > 0) {
        crc = pc_file_crc(crc, buf, n);
        size += n;
    }
    int bad = ferror(f);
    fclose(f);
    free(buf);
    if (bad)
        return PC_EIO;
    *out = (pc_ckpt_file_t){.size = size, .crc = crc};
    return PC_OK;
}

/* Whether manifest meta m describes a checkpoint of the job want describes: PC_OK, or
 * PC_EINCOMPAT with what differs. */
static int meta_compare(const pc_ckpt_meta_t *m, const pc_ckpt_meta_t *want, char *err,
                        size_t errlen)
{
    if (m->world != want->world || m->workers != want->workers || m->servers != want->servers)
        return pc_error_fmt(PC_EINCOMPAT, err, errlen,
                            "written by %d workers + %d servers; this job has %d + %d", m->workers,
                            m->servers, want->workers, want->servers);
    if (m->model != want->model)
        return pc_error_fmt(PC_EINCOMPAT, err, errlen,
                            "a different model or chunk plan (model %016" PRIx64
                            ", this job %016" PRIx64 ")",
                            m->model, want->model);
    if (strcmp(m->config, want->config) != 0)
        return pc_error_fmt(PC_EINCOMPAT, err, errlen,
                            "a different configuration ('%s'; this job '%s')", m->config,
                            want->config);
    return PC_OK;
}

int pc_ckpt_verify(const char *dir, uint64_t iteration, const pc_ckpt_meta_t *want, char *err,
                   size_t errlen)
{
    pc_ckpt_meta_t m;
    pc_ckpt_file_t *files;
    int rc = manifest_read(dir, iteration, &m, &files, err, errlen);
    if (rc != PC_OK)
        return rc;
    rc = meta_compare(&m, want, err, errlen);
    for (int r = 0; rc == PC_OK && r < m.world; r++) {
        char path[4200];
        pc_ckpt_file_t got;
        pc_ckpt_path(dir, iteration, r, path, sizeof(path));
        int frc = file_crc(path, &got);
        if (frc == PC_ENOENT)
            rc = pc_error_fmt(PC_EFORMAT, err, errlen, "%s is missing", path);
        else if (frc != PC_OK)
            rc = pc_error_fmt(PC_EIO, err, errlen, "%s: cannot read: %s", path, pc_strerror(frc));
        else if (got.size != files[r].size)
            rc = pc_error_fmt(PC_EFORMAT, err, errlen,
                              "%s: %" PRIu64 " bytes, the manifest says %" PRIu64, path, got.size,
                              files[r].size);
        else if (got.crc != files[r].crc)
            rc = pc_error_fmt(PC_EFORMAT, err, errlen, "%s: CRC mismatch (corrupt)", path);
    }
    free(files);
    return rc;
}

/* The iterations of dir's ckpt-N entries, newest first (*out, a new array). */
static int list_ckpts(const char *dir, uint64_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? PC_ENOENT : PC_EIO;
    size_t cap = 0;
    struct dirent *e;
    int rc = PC_OK;
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        if (strncmp(s, "ckpt-", 5) != 0 || strlen(s) != 17 || strspn(s + 5, "0123456789") != 12)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            uint64_t *p = realloc(*out, sizeof(uint64_t) * cap);
            if (!p) {
                rc = PC_ENOMEM;
                break;
            }
            *out = p;
        }
        (*out)[(*n)++] = strtoull(s + 5, NULL, 10);
    }
    closedir(d);
    for (size_t i = 1; i < *n; i++) /* insertion sort, descending: a handful of entries */
        for (size_t j = i; j > 0 && (*out)[j] > (*out)[j - 1]; j--) {
            uint64_t t = (*out)[j];
            (*out)[j] = (*out)[j - 1];
            (*out)[j - 1] = t;
        }
    return rc;
}

int pc_ckpt_find(const char *dir, const pc_ckpt_meta_t *want, pc_log_t *log, int remove_bad,
                 uint64_t *iteration, char *err, size_t errlen)
{
    uint64_t *its;
    size_t n;
    int rc = list_ckpts(dir, &its, &n);
    if (rc == PC_ENOENT || (rc == PC_OK && n == 0)) {
        free(its);
        return pc_error_fmt(PC_ENOENT, err, errlen, "no checkpoint in '%s'", dir);
    }
    if (rc != PC_OK) {
        free(its);
        return pc_error_fmt(rc, err, errlen, "cannot list '%s': %s", dir, pc_strerror(rc));
    }
    rc = PC_ENOENT;
    char other[1024] = ""; /* why the newest intact checkpoint of another job is not ours */
    uint64_t other_it = 0;
    for (size_t i = 0; i < n; i++) {
        char why[1024];
        int vrc = pc_ckpt_verify(dir, its[i], want, why, sizeof(why));
        if (vrc == PC_OK) {
            *iteration = its[i];
            rc = PC_OK;
            break;
        }
        if (vrc == PC_EINCOMPAT) {
            /* Another job's: reported, never removed. */
            if (!other[0]) {
                snprintf(other, sizeof(other), "%s", why);
                other_it = its[i];
            }
            pc_log_write(log, PC_LOG_WARN, NULL, "skipping checkpoint of iteration %" PRIu64 ": %s",
                         its[i], why);
            continue;
        }
        pc_log_write(log, PC_LOG_WARN, NULL, "skipping checkpoint of iteration %" PRIu64 ": %s%s",
                     its[i], why, remove_bad ? " (removed)" : "");
        if (remove_bad)
            pc_ckpt_remove(dir, its[i]);
    }
    free(its);
    if (rc != PC_OK && other[0])
        return pc_error_fmt(PC_EINCOMPAT, err, errlen,
                            "'%s' holds checkpoints of another job (iteration %" PRIu64 ": %s)",
                            dir, other_it, other);
    if (rc != PC_OK)
        pc_error_fmt(rc, err, errlen, "no complete checkpoint in '%s'", dir);
    return rc;
}

int pc_ckpt_remove(const char *dir, uint64_t iteration)
{
    char ck[4096], path[4400];
    if (pc_ckpt_path(dir, iteration, -1, ck, sizeof(ck)) != PC_OK)
        return PC_ERANGE;
    DIR *d = opendir(ck);
    if (!d)
        return errno == ENOENT ? PC_OK : PC_EIO;
    struct dirent *e;
    /* Only what a checkpoint consists of: the manifest, rank files, their temporaries. */
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        if (strncmp(s, MANIFEST, strlen(MANIFEST)) == 0 || strncmp(s, "rank-", 5) == 0) {
            snprintf(path, sizeof(path), "%s/%s", ck, s);
            unlink(path);
        }
    }
    closedir(d);
    if (rmdir(ck) != 0)
        return PC_EIO;
    pc_file_sync_dir(dir);
    return PC_OK;
}

int pc_ckpt_prune(const char *dir, const pc_ckpt_meta_t *want, uint64_t newest, int keep, char *err,
                  size_t errlen)
{
    uint64_t *its;
    size_t n;
    int rc = list_ckpts(dir, &its, &n);
    if (rc != PC_OK) {
        free(its);
        return pc_error_fmt(rc, err, errlen, "cannot list '%s': %s", dir, pc_strerror(rc));
    }
    int kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (its[i] > newest)
            continue;
        /* Only this job's complete checkpoints: never another job's, nor a partial one
         * (no manifest to say whose it is; training overwrites it on reaching it again). */
        pc_ckpt_meta_t m;
        pc_ckpt_file_t *files;
        if (manifest_read(dir, its[i], &m, &files, NULL, 0) != PC_OK)
            continue;
        free(files);
        if (meta_compare(&m, want, NULL, 0) != PC_OK)
            continue;
        if (kept < keep) {
            kept++;
            continue;
        }
        if (pc_ckpt_remove(dir, its[i]) != PC_OK && rc == PC_OK)
            rc = pc_error_fmt(PC_EIO, err, errlen,
                              "cannot remove the checkpoint of iteration %" PRIu64 " in '%s'",
                              its[i], dir);
    }
    free(its);
    return rc;
}

/* ---- reader ------------------------------------------------------------------------- */

struct pc_ckpt_reader {
    FILE *f;
    char path[4200];
    pc_ckpt_file_t want;
    uint64_t size;
    uint32_t crc;
    bool short_read;
};

int pc_ckpt_reader_open(const char *dir, uint64_t iteration, int rank, pc_ckpt_reader_t **out,
                        char *err, size_t errlen)
{
    pc_ckpt_meta_t m;
    pc_ckpt_file_t *files;
    int rc = manifest_read(dir, iteration, &m, &files, err, errlen);
    if (rc != PC_OK)
        return rc;
    if (rank < 0 || rank >= m.world) {
        free(files);
        return pc_error_fmt(PC_EFORMAT, err, errlen, "checkpoint %" PRIu64 " has no rank %d",
                            iteration, rank);
    }
    pc_ckpt_reader_t *r = calloc(1, sizeof(*r));
    if (!r) {
        free(files);
        return pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    }
    r->want = files[rank];
    free(files);
    pc_ckpt_path(dir, iteration, rank, r->path, sizeof(r->path));
    if (!(r->f = fopen(r->path, "rb"))) {
        rc = pc_error_fmt(PC_EIO, err, errlen, "cannot open '%s': %s", r->path, strerror(errno));
        free(r);
        return rc;
    }
    *out = r;
    return PC_OK;
}

int pc_ckpt_reader_read(pc_ckpt_reader_t *r, void *dst, size_t len)
{
    if (r->short_read)
        return PC_EFORMAT;
    if (fread(dst, 1, len, r->f) != len) {
        r->short_read = true;
        return PC_EFORMAT;
    }
    r->crc = pc_file_crc(r->crc, dst, len);
    r->size += len;
    return PC_OK;
}

int pc_ckpt_reader_close(pc_ckpt_reader_t *r, char *err, size_t errlen)
{
    int rc = PC_OK;
    if (r->short_read || r->size != r->want.size || fgetc(r->f) != EOF)
        rc = pc_error_fmt(PC_EFORMAT, err, errlen, "'%s': %s", r->path,
                          r->short_read
                              ? "shorter than its contents say"
                              : "longer than its contents, or its size differs from the manifest");
    else if (r->crc != r->want.crc)
        rc = pc_error_fmt(PC_EFORMAT, err, errlen, "'%s': CRC mismatch (corrupt)", r->path);
    fclose(r->f);
    free(r);
    return rc;
}
