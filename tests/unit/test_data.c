/* test_data: IDX files (plain and gzip) parsed and validated: good files load; truncated,
 * trailing, wrong-magic, wrong-type, wrong-dimension, mismatched and out-of-range files are
 * refused with a message naming the file; synthetic data and epoch orders are
 * deterministic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "pipecompress/pc_data.h"
#include "pipecompress/pc_error.h"

static char dir[64];

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* An IDX image file of n images of r x c (pixel = i % 251) or a label file (label = i % 10). */
static size_t make_idx(uint8_t *buf, int kind, uint32_t n, uint32_t r, uint32_t c)
{
    buf[0] = buf[1] = 0;
    buf[2] = 0x08;
    buf[3] = (uint8_t)kind;
    put_be32(buf + 4, n);
    size_t h = 8, cnt = n;
    if (kind == 3) {
        put_be32(buf + 8, r);
        put_be32(buf + 12, c);
        h = 16;
        cnt = (size_t)n * r * c;
    }
    for (size_t i = 0; i < cnt; i++)
        buf[h + i] = (uint8_t)(kind == 3 ? i % 251 : i % 10);
    return h + cnt;
}

static void write_file(const char *name, const uint8_t *buf, size_t len, int gz)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(gzwrite(f, buf, (unsigned)len), (int)len);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(buf, 1, len, f), len);
        fclose(f);
    }
}

static int load(const char *img, const char *lab, pc_dataset_t *ds, char *err)
{
    char a[256], b[256];
    snprintf(a, sizeof(a), "%s/%s", dir, img);
    snprintf(b, sizeof(b), "%s/%s", dir, lab);
    return pc_data_load_idx(a, b, 10, ds, err, 512);
}

static uint8_t img[16 + 5 * 4 * 3 + 8], lab[8 + 5 + 8];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/pc-test-data-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd);
}

static void test_good_plain_and_gzip(void **state)
{
    (void)state;
    size_t il = make_idx(img, 3, 5, 4, 3), ll = make_idx(lab, 1, 5, 0, 0);
    write_file("i", img, il, 0);
    write_file("l", lab, ll, 0);
    write_file("i.gz", img, il, 1);
    write_file("l.gz", lab, ll, 1);
    pc_dataset_t a, b;
    char err[512];
    assert_int_equal(load("i", "l", &a, err), PC_OK);
    assert_int_equal(load("i.gz", "l.gz", &b, err), PC_OK);
    assert_int_equal(a.n, 5);
    assert_int_equal(a.rows, 4);
    assert_int_equal(a.cols, 3);
    assert_int_equal(a.labels[3], 3);
    assert_true(a.images[7] == 7.0f * (1.0f / 255.0f));
    assert_memory_equal(a.images, b.images, sizeof(float) * 60);
    assert_memory_equal(a.labels, b.labels, 5);
    pc_data_free(&a);
    pc_data_free(&b);
}

/* pc_data_load_fashion chooses .gz or plain per file: gzipped images beside unpacked
 * labels (a half-unpacked directory) load, and a missing file is named with both of the
 * names looked for. */
static void test_fashion_mixed_files(void **state)
{
    (void)state;
    size_t il = make_idx(img, 3, 5, 4, 3), ll = make_idx(lab, 1, 5, 0, 0);
    char sub[128], err[512] = "";
    snprintf(sub, sizeof(sub), "%s/mixed", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    write_file("mixed/t10k-images-idx3-ubyte.gz", img, il, 1);
    write_file("mixed/t10k-labels-idx1-ubyte", lab, ll, 0);
    pc_dataset_t ds;
    assert_int_equal(pc_data_load_fashion(sub, 0, &ds, err, sizeof(err)), PC_OK);
    assert_int_equal(ds.n, 5);
    assert_int_equal(ds.labels[4], 4);
    pc_data_free(&ds);
    /* The other way round. */
    write_file("mixed/train-images-idx3-ubyte", img, il, 0);
    write_file("mixed/train-labels-idx1-ubyte.gz", lab, ll, 1);
    assert_int_equal(pc_data_load_fashion(sub, 1, &ds, err, sizeof(err)), PC_OK);
    assert_int_equal(ds.n, 5);
    pc_data_free(&ds);
    /* A missing labels file: named, both spellings, not the images file. */
    char gone[256];
    snprintf(gone, sizeof(gone), "%s/train-labels-idx1-ubyte.gz", sub);
    assert_int_equal(unlink(gone), 0);
    assert_int_equal(pc_data_load_fashion(sub, 1, &ds, err, sizeof(err)), PC_EIO);
    if (!strstr(err, "neither train-labels-idx1-ubyte.gz nor train-labels-idx1-ubyte"))
        fail_msg("\"%s\" does not name the missing labels file", err);
    assert_null(ds.images);
}

static void expect_error(const char *i, const char *l, int code, const char *needle)
{
    pc_dataset_t ds;
    char err[512] = "";
    assert_int_equal(load(i, l, &ds, err), code);
    if (!strstr(err, needle))
        fail_msg("\"%s\" lacks \"%s\"", err, needle);
    assert_null(ds.images);
}

static void test_bad_files(void **state)
{
    (void)state;
    size_t il = make_idx(img, 3, 5, 4, 3), ll = make_idx(lab, 1, 5, 0, 0);
    write_file("trunc", img, il - 1, 0);
    expect_error("trunc", "l", PC_EFORMAT,
                 "trunc: truncated: 59 bytes of data, header announces 60");
    write_file("trunc.gz", img, il - 7, 1);
    expect_error("trunc.gz", "l", PC_EFORMAT, "truncated");
    img[il] = 1;
    write_file("trailing", img, il + 1, 0);
    expect_error("trailing", "l", PC_EFORMAT, "trailing");
    uint8_t bad[sizeof(img)];
    memcpy(bad, img, il);
    bad[0] = 0x1f;
    write_file("magic", bad, il, 0);
    expect_error("magic", "l", PC_EFORMAT, "magic: bad magic");
    memcpy(bad, img, il);
    bad[2] = 0x0d; /* float elements */
    write_file("type", bad, il, 0);
    expect_error("type", "l", PC_EFORMAT, "element type 0x0d");
    expect_error("l", "l", PC_EFORMAT, "1 dimensions, expected 3 (images)");
    expect_error("i", "i", PC_EFORMAT, "3 dimensions, expected 1 (labels)");
    memcpy(bad, img, il);
    put_be32(bad + 8, 0);
    write_file("zero", bad, il, 0);
    expect_error("zero", "l", PC_EFORMAT, "implausible image size 0x3");
    memcpy(bad, img, il);
    put_be32(bad + 4, 0xffffffffu);
    write_file("huge", bad, il, 0);
    expect_error("huge", "l", PC_EFORMAT, "implausible count");
    size_t l4 = make_idx(lab, 1, 4, 0, 0);
    write_file("l4", lab, l4, 0);
    expect_error("i", "l4", PC_EFORMAT, "has 4 labels but");
    ll = make_idx(lab, 1, 5, 0, 0);
    lab[8 + 2] = 12;
    write_file("l12", lab, ll, 0);
    expect_error("i", "l12", PC_EFORMAT, "label 12 of sample 2 is not below 10");
    write_file("short", img, 3, 0);
    expect_error("short", "l", PC_EFORMAT, "too short");
    uint8_t junk[64];
    memset(junk, 0x1f, sizeof(junk));
    junk[1] = 0x8b; /* a gzip magic followed by garbage */
    write_file("junk.gz", junk, sizeof(junk), 0);
    pc_dataset_t ds;
    char err[512];
    assert_int_not_equal(load("junk.gz", "l", &ds, err), PC_OK);
    expect_error("missing", "l", PC_EIO, "missing: cannot open");
}

static void test_parse_in_memory(void **state)
{
    (void)state;
    size_t il = make_idx(img, 3, 5, 4, 3);
    uint32_t n, r, c;
    uint8_t *d = NULL;
    char err[256];
    assert_int_equal(pc_data_parse_idx(img, il, 3, "m", &n, &r, &c, &d, err, sizeof(err)), PC_OK);
    assert_int_equal(n * r * c, 60);
    free(d);
    for (size_t cut = 0; cut < il; cut++) {
        d = NULL;
        assert_int_equal(pc_data_parse_idx(img, cut, 3, "m", &n, &r, &c, &d, err, sizeof(err)),
                         PC_EFORMAT);
        assert_null(d);
    }
}

static void test_synthetic_and_order(void **state)
{
    (void)state;
    pc_dataset_t a, b;
    assert_int_equal(pc_data_synthetic(500, 9, 0, &a), PC_OK);
    assert_int_equal(pc_data_synthetic(500, 9, 0, &b), PC_OK);
    assert_memory_equal(a.images, b.images, sizeof(float) * 500 * 784);
    assert_memory_equal(a.labels, b.labels, 500);
    int seen[10] = {0};
    for (int i = 0; i < 500; i++)
        seen[a.labels[i]]++;
    for (int k = 0; k < 10; k++)
        assert_true(seen[k] > 20);
    pc_data_free(&a);
    pc_data_free(&b);
    uint32_t p[1000], q[1000];
    pc_data_order(p, 1000, 3, 0);
    pc_data_order(q, 1000, 3, 1);
    int hit[1000] = {0}, same = 0;
    for (int i = 0; i < 1000; i++) {
        hit[p[i]]++;
        same += p[i] == q[i];
    }
    for (int i = 0; i < 1000; i++)
        assert_int_equal(hit[i], 1); /* a permutation */
    assert_true(same < 20);          /* each epoch its own order */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_plain_and_gzip), cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_fashion_mixed_files), cmocka_unit_test(test_parse_in_memory),
        cmocka_unit_test(test_synthetic_and_order),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
