/* model_file: a model's parameters in a file (pc_model_save, pc_model_load,
 * pc_model_file_info; the format: doc/model-format.md): a 48-byte header naming the
 * network and its shape, then the parameters, each part with its CRC-32; written
 * crash-safe (pc_file). One thread per model. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_impl.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_file.h"
#include "pipecompress/pc_wire.h"

#define FILE_MAGIC   "PCMODEL1"
#define FILE_VERSION 1
#define HEADER_BYTES 48

/* CRC-32 of n bytes (zlib's, as in checkpoints). */
static uint32_t crc_bytes(const void *p, size_t n)
{
    return pc_file_crc(0, p, n);
}

static void make_header(const pc_model_t *m, uint8_t *h, uint32_t params_crc)
{
    memset(h, 0, HEADER_BYTES);
    memcpy(h, FILE_MAGIC, 8);
    pc_wire_put_u32(h + 8, FILE_VERSION);
    pc_wire_put_u32(h + 12, (uint32_t)m->kind);
    pc_wire_put_u32(h + 16, (uint32_t)m->in_c);
    pc_wire_put_u32(h + 20, (uint32_t)m->in_h);
    pc_wire_put_u32(h + 24, (uint32_t)m->in_w);
    pc_wire_put_u32(h + 28, (uint32_t)m->classes);
    pc_wire_put_u32(h + 32, (uint32_t)m->nparams);
    pc_wire_put_u32(h + 36, (uint32_t)((uint64_t)m->nparams >> 32));
    pc_wire_put_u32(h + 40, params_crc);
    pc_wire_put_u32(h + 44, crc_bytes(h, 44));
}

int pc_model_save(const pc_model_t *m, const char *path, char *err, size_t errlen)
{
    const float *params = m->params;
    float *copy = NULL; /* a device model's parameters, on the host */
    if (pc_model__on_device(m)) {
        if (!(copy = malloc(m->nparams * sizeof(float) + 1)))
            return pc_error_fmt(PC_ENOMEM, err, errlen, "%s: out of memory", path);
        int rc = pc_model_params_get(m, copy);
        if (rc != PC_OK) {
            free(copy);
            return pc_error_fmt(rc, err, errlen, "%s: %s", path, m->err);
        }
        params = copy;
    }
    uint8_t h[HEADER_BYTES];
    make_header(m, h, crc_bytes(params, m->nparams * sizeof(float)));
    pc_file_writer_t *w;
    int rc = pc_file_writer_open(path, &w, err, errlen);
    if (rc == PC_OK) {
        pc_file_writer_write(w, h, HEADER_BYTES);
        pc_file_writer_write(w, params, m->nparams * sizeof(float));
        rc = pc_file_writer_commit(w, err, errlen);
    }
    free(copy);
    return rc;
}

static int read_header(const char *path, FILE *f, uint8_t *h, char *err, size_t errlen)
{
    if (fread(h, 1, HEADER_BYTES, f) != HEADER_BYTES)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "%s: shorter than a model header", path);
    if (memcmp(h, FILE_MAGIC, 8) != 0)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "%s: not a PipeCompress model file (bad magic)", path);
    if (pc_wire_get_u32(h + 44) != crc_bytes(h, 44))
        return pc_error_fmt(PC_EFORMAT, err, errlen, "%s: header checksum mismatch (corrupt file)",
                            path);
    if (pc_wire_get_u32(h + 8) != FILE_VERSION)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "%s: model format version %u, this build reads %d", path,
                            pc_wire_get_u32(h + 8), FILE_VERSION);
    return PC_OK;
}

int pc_model_file_info(const char *path, pc_model_kind_t *kind, int *channels, int *height,
                       int *width, int *classes, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return pc_error_fmt(PC_EIO, err, errlen, "%s: cannot open: %s", path, strerror(errno));
    uint8_t h[HEADER_BYTES];
    int rc = read_header(path, f, h, err, errlen);
    fclose(f);
    if (rc != PC_OK)
        return rc;
    uint32_t k = pc_wire_get_u32(h + 12);
    if (k > PC_MODEL_WIDE || pc_wire_get_u32(h + 16) == 0 || pc_wire_get_u32(h + 16) > 4096 ||
        pc_wire_get_u32(h + 20) == 0 || pc_wire_get_u32(h + 20) > 4096 ||
        pc_wire_get_u32(h + 24) == 0 || pc_wire_get_u32(h + 24) > 4096 ||
        pc_wire_get_u32(h + 28) < 2 || pc_wire_get_u32(h + 28) > 65536)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "%s: implausible architecture in the header",
                            path);
    *kind = (pc_model_kind_t)k;
    *channels = (int)pc_wire_get_u32(h + 16);
    *height = (int)pc_wire_get_u32(h + 20);
    *width = (int)pc_wire_get_u32(h + 24);
    *classes = (int)pc_wire_get_u32(h + 28);
    return PC_OK;
}

int pc_model_load(pc_model_t *m, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return pc_error_fmt(PC_EIO, err, errlen, "%s: cannot open: %s", path, strerror(errno));
    uint8_t h[HEADER_BYTES], want[HEADER_BYTES];
    int rc = read_header(path, f, h, err, errlen);
    float *buf = NULL;
    if (rc == PC_OK) {
        make_header(m, want, pc_wire_get_u32(h + 40)); /* same architecture -> same bytes 8..39 */
        if (memcmp(h + 8, want + 8, 32) != 0)
            rc = pc_error_fmt(
                PC_EFORMAT, err, errlen,
                "%s: holds a different model (kind %u, %u parameters; expected %s, %zu)", path,
                pc_wire_get_u32(h + 12), pc_wire_get_u32(h + 32), pc_model_kind_name(m->kind),
                m->nparams);
    }
    if (rc == PC_OK && !(buf = malloc(m->nparams * sizeof(float))))
        rc = pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory");
    if (rc == PC_OK && fread(buf, sizeof(float), m->nparams, f) != m->nparams)
        rc = pc_error_fmt(PC_EFORMAT, err, errlen, "%s: truncated parameters", path);
    if (rc == PC_OK && fgetc(f) != EOF)
        rc = pc_error_fmt(PC_EFORMAT, err, errlen, "%s: trailing bytes after the parameters", path);
    if (rc == PC_OK && crc_bytes(buf, m->nparams * sizeof(float)) != pc_wire_get_u32(h + 40))
        rc = pc_error_fmt(PC_EFORMAT, err, errlen, "%s: parameter checksum mismatch (corrupt file)",
                          path);
    if (rc == PC_OK && (rc = pc_model_params_set(m, buf)) != PC_OK)
        pc_error_fmt(rc, err, errlen, "%s: %s", path, m->err);
    free(buf);
    fclose(f);
    return rc;
}
