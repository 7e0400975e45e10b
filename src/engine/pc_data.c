/* pc_data: IDX parsing and loading (zlib), synthetic data, shuffling. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <zlib.h>

#include "pipecompress/pc_data.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_philox.h"

/* Largest file read: 2^26 images of 28x28 is 50 GiB; anything that size is not ours. A
 * decompressed file over 1 GiB is refused before it fills memory. */
#define MAX_FILE_BYTES ((size_t)1 << 30)

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int pc_data_parse_idx(const uint8_t *buf, size_t len, int kind, const char *name, uint32_t *n,
                      uint32_t *rows, uint32_t *cols, uint8_t **data, char *err, size_t errlen)
{
    if (kind != 1 && kind != 3)
        return pc_error_fmt(PC_EINVAL, err, errlen, "%s: internal: bad IDX kind %d", name, kind);
    size_t hdr = 4 + 4 * (size_t)kind;
    if (len < 4)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "%s: %zu bytes, too short for an IDX header",
                            name, len);
    if (buf[0] != 0 || buf[1] != 0)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "%s: bad magic %02x%02x%02x%02x (not an IDX file)", name, buf[0],
                            buf[1], buf[2], buf[3]);
    if (buf[2] != 0x08)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "%s: element type 0x%02x, expected 0x08 (unsigned byte)", name, buf[2]);
    if (buf[3] != kind)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "%s: %d dimensions, expected %d (%s)", name,
                            buf[3], kind, kind == 3 ? "images" : "labels");
    if (len < hdr)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "%s: truncated header (%zu of %zu bytes)",
                            name, len, hdr);
    uint32_t cnt = be32(buf + 4), r = 1, c = 1;
    if (kind == 3) {
        r = be32(buf + 8);
        c = be32(buf + 12);
    }
    if (cnt == 0 || cnt > PC_DATA_MAX_COUNT)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "%s: implausible count %u", name, cnt);
    if (r == 0 || c == 0 || r > PC_DATA_MAX_SIDE || c > PC_DATA_MAX_SIDE)
        return pc_error_fmt(PC_EFORMAT, err, errlen, "%s: implausible image size %ux%u", name, r,
                            c);
    size_t want = (size_t)cnt * r * c;
    if (len - hdr < want)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "%s: truncated: %zu bytes of data, header announces %zu", name,
                            len - hdr, want);
    if (len - hdr > want)
        return pc_error_fmt(PC_EFORMAT, err, errlen,
                            "%s: %zu bytes of trailing data after %zu announced", name,
                            len - hdr - want, want);
    uint8_t *d = malloc(want);
    if (!d)
        return pc_error_fmt(PC_ENOMEM, err, errlen, "%s: out of memory for %zu bytes", name, want);
    memcpy(d, buf + hdr, want);
    *n = cnt;
    if (rows)
        *rows = r;
    if (cols)
        *cols = c;
    *data = d;
    return PC_OK;
}

/* Read a whole file, gunzipping it when it is gzip (gzread passes plain files through). */
static int read_all(const char *path, uint8_t **out, size_t *len, char *err, size_t errlen)
{
    gzFile f = gzopen(path, "rb");
    if (!f)
        return pc_error_fmt(PC_EIO, err, errlen, "%s: cannot open: %s", path,
                            errno ? strerror(errno) : "out of memory");
    size_t cap = 1 << 20, n = 0;
    uint8_t *buf = malloc(cap);
    int rc = PC_OK;
    for (;;) {
        if (!buf) {
            rc = pc_error_fmt(PC_ENOMEM, err, errlen, "%s: out of memory", path);
            break;
        }
        if (n == cap) {
            if (cap >= MAX_FILE_BYTES) {
                rc = pc_error_fmt(PC_EFORMAT, err, errlen, "%s: larger than %zu bytes", path,
                                  MAX_FILE_BYTES);
                break;
            }
            uint8_t *p = realloc(buf, cap * 2);
            if (!p) {
                rc = pc_error_fmt(PC_ENOMEM, err, errlen, "%s: out of memory", path);
                break;
            }
            buf = p;
            cap *= 2;
        }
        int got = gzread(f, buf + n, (unsigned)(cap - n));
        if (got < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            rc = pc_error_fmt(zerr == Z_ERRNO ? PC_EIO : PC_EFORMAT, err, errlen, "%s: %s", path,
                              zerr == Z_ERRNO ? strerror(errno) : msg);
            break;
        }
        if (got == 0) {
            /* gzread returns 0 both at the end and on a truncated gzip stream. */
            int zerr;
            const char *msg = gzerror(f, &zerr);
            if (zerr != Z_OK && zerr != Z_STREAM_END)
                rc = pc_error_fmt(PC_EFORMAT, err, errlen, "%s: corrupt or truncated gzip data: %s",
                                  path, msg);
            break;
        }
        n += (size_t)got;
    }
    gzclose(f);
    if (rc != PC_OK) {
        free(buf);
        return rc;
    }
    *out = buf;
    *len = n;
    return PC_OK;
}

int pc_data_load_idx(const char *images_path, const char *labels_path, int classes,
                     pc_dataset_t *ds, char *err, size_t errlen)
{
    uint8_t *ib = NULL, *lb = NULL, *pix = NULL, *lab = NULL;
    size_t il, ll;
    uint32_t n, r, c, nl;
    memset(ds, 0, sizeof(*ds));
    int rc = read_all(images_path, &ib, &il, err, errlen);
    if (rc == PC_OK)
        rc = read_all(labels_path, &lb, &ll, err, errlen);
    if (rc == PC_OK)
        rc = pc_data_parse_idx(ib, il, 3, images_path, &n, &r, &c, &pix, err, errlen);
    if (rc == PC_OK)
        rc = pc_data_parse_idx(lb, ll, 1, labels_path, &nl, NULL, NULL, &lab, err, errlen);
    if (rc == PC_OK && nl != n)
        rc = pc_error_fmt(PC_EFORMAT, err, errlen, "%s has %u labels but %s has %u images",
                          labels_path, nl, images_path, n);
    for (uint32_t i = 0; rc == PC_OK && i < n; i++)
        if (lab[i] >= classes)
            rc = pc_error_fmt(PC_EFORMAT, err, errlen, "%s: label %u of sample %u is not below %d",
                              labels_path, lab[i], i, classes);
    if (rc == PC_OK) {
        ds->images = malloc(sizeof(float) * (size_t)n * r * c);
        if (!ds->images)
            rc = pc_error_fmt(PC_ENOMEM, err, errlen, "out of memory for %u images", n);
    }
    if (rc == PC_OK) {
        for (size_t i = 0; i < (size_t)n * r * c; i++)
            ds->images[i] = (float)pix[i] * (1.0f / 255.0f);
        ds->n = n;
        ds->rows = r;
        ds->cols = c;
        ds->labels = lab;
        ds->classes = classes;
        lab = NULL;
    }
    free(ib);
    free(lb);
    free(pix);
    free(lab);
    return rc;
}

/* dir/base.gz (the gzip file Debian ships) or else dir/base (unpacked), chosen for this
 * file alone, into path. PC_OK, or PC_EIO naming both names when neither exists. */
static int pick_file(const char *dir, const char *base, char *path, size_t len, char *err,
                     size_t errlen)
{
    struct stat sb;
    snprintf(path, len, "%s/%s.gz", dir, base);
    if (stat(path, &sb) == 0)
        return PC_OK;
    snprintf(path, len, "%s/%s", dir, base);
    if (stat(path, &sb) == 0)
        return PC_OK;
    return pc_error_fmt(PC_EIO, err, errlen, "%s: neither %s.gz nor %s: %s", dir, base, base,
                        strerror(errno));
}

int pc_data_load_fashion(const char *dir, int train, pc_dataset_t *ds, char *err, size_t errlen)
{
    const char *pre = train ? "train" : "t10k";
    char img[4096], lab[4096], base[64];
    int rc;
    memset(ds, 0, sizeof(*ds));
    /* Each file gzipped or not on its own: a directory may hold one of each. */
    snprintf(base, sizeof(base), "%s-images-idx3-ubyte", pre);
    if ((rc = pick_file(dir, base, img, sizeof(img), err, errlen)) != PC_OK)
        return rc;
    snprintf(base, sizeof(base), "%s-labels-idx1-ubyte", pre);
    if ((rc = pick_file(dir, base, lab, sizeof(lab), err, errlen)) != PC_OK)
        return rc;
    return pc_data_load_idx(img, lab, 10, ds, err, errlen);
}

int pc_data_synthetic(uint32_t n, uint64_t seed, int which, pc_dataset_t *ds)
{
    const uint32_t R = 28, C = 28, P = R * C;
    memset(ds, 0, sizeof(*ds));
    float *proto = malloc(sizeof(float) * 10 * P);
    ds->images = malloc(sizeof(float) * (size_t)n * P);
    ds->labels = malloc(n ? n : 1);
    if (!proto || !ds->images || !ds->labels) {
        free(proto);
        pc_data_free(ds);
        return PC_ENOMEM;
    }
    pc_philox_t g;
    pc_philox_init(&g, seed, 0x5eed, 0); /* prototypes: the same for train and test */
    for (uint32_t i = 0; i < 10 * P; i++)
        proto[i] = pc_philox_uniform(pc_philox_next(&g)) < 0.5f ? 0.7f : 0.3f;
    pc_philox_init(&g, seed, 0x5eed + 1 + (uint64_t)which, 0);
    for (uint32_t s = 0; s < n; s++) {
        uint8_t y = (uint8_t)(pc_philox_next(&g) % 10);
        ds->labels[s] = y;
        for (uint32_t i = 0; i < P; i++) {
            /* Noise wider than the gap between prototypes: learnable, not trivially. */
            float noise = pc_philox_uniform(pc_philox_next(&g)) * 1.2f - 0.6f;
            float v = proto[y * P + i] + noise;
            ds->images[(size_t)s * P + i] = v < 0 ? 0 : (v > 1 ? 1 : v);
        }
    }
    free(proto);
    ds->n = n;
    ds->rows = R;
    ds->cols = C;
    ds->classes = 10;
    return PC_OK;
}

void pc_data_free(pc_dataset_t *ds)
{
    free(ds->images);
    free(ds->labels);
    memset(ds, 0, sizeof(*ds));
}

void pc_data_order(uint32_t *perm, uint32_t n, uint64_t seed, uint64_t epoch)
{
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    pc_philox_t g;
    pc_philox_init(&g, seed, 0xda7a0000ull + epoch, 0);
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = (uint32_t)(((uint64_t)pc_philox_next(&g) * i) >> 32);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}
