/* test_ckpt: checkpoint files and manifests: round trip; the newest complete checkpoint is
 * chosen; partial (no manifest), corrupt (a flipped byte, a truncated file, a missing file,
 * a damaged manifest) and foreign (other world, model or config) ones are skipped for the
 * previous complete one; pruning keeps the newest K; readers detect short and corrupt
 * files on their own (without a verify first, and when a byte changes after the verify);
 * no temporary file is left behind. */
#include <dirent.h>
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

#include "pipecompress/pc_ckpt.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_log.h"

static pc_ckpt_meta_t meta_of(uint64_t it)
{
    pc_ckpt_meta_t m = {
        .iteration = it, .world = 3, .workers = 2, .servers = 1, .model = 0x0123456789abcdefull};
    snprintf(m.config, sizeof(m.config), "ps topk:ratio=0.01 min-bytes=65536 seed=42");
    return m;
}

/* Rank r's file of checkpoint it: 1000 + r floats derived from (it, r). */
static void write_ckpt(const char *dir, uint64_t it, bool manifest)
{
    pc_ckpt_meta_t m = meta_of(it);
    pc_ckpt_file_t files[3];
    char err[512];
    for (int r = 0; r < 3; r++) {
        pc_ckpt_writer_t *w;
        assert_int_equal(pc_ckpt_writer_open(dir, it, r, &w, err, sizeof(err)), PC_OK);
        for (int i = 0; i < 1000 + r; i++) {
            float v = (float)(it * 1000 + (uint64_t)r) + (float)i * 0.5f;
            pc_ckpt_writer_write(w, &v, sizeof(v));
        }
        assert_int_equal(pc_ckpt_writer_commit(w, &files[r], err, sizeof(err)), PC_OK);
        assert_int_equal(files[r].size, 4 * (uint64_t)(1000 + r));
    }
    if (manifest)
        assert_int_equal(pc_ckpt_manifest_write(dir, &m, files, err, sizeof(err)), PC_OK);
}

static void flip_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x20, f);
    fclose(f);
}

static bool exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* No "*.tmp.*" left in the checkpoint directory. */
static void assert_no_temporaries(const char *dir, uint64_t it)
{
    char ck[512];
    pc_ckpt_path(dir, it, -1, ck, sizeof(ck));
    DIR *d = opendir(ck);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        assert_null(strstr(e->d_name, ".tmp."));
    closedir(d);
}

static void rm_tree(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_round_trip(void **state)
{
    (void)state;
    char dir[] = "/tmp/pc-test-ckpt-XXXXXX", err[512];
    assert_non_null(mkdtemp(dir));
    /* Missing parents are created; a file in the way is refused. */
    char deep[600];
    snprintf(deep, sizeof(deep), "%s/a/b/c", dir);
    assert_int_equal(pc_ckpt_dir_create(deep, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_ckpt_dir_create(deep, err, sizeof(err)), PC_OK);
    snprintf(deep, sizeof(deep), "%s/file", dir);
    FILE *f = fopen(deep, "w");
    fclose(f);
    snprintf(deep, sizeof(deep), "%s/file/x", dir);
    assert_int_equal(pc_ckpt_dir_create(deep, err, sizeof(err)), PC_EIO);
    assert_non_null(strstr(err, "cannot create"));
    write_ckpt(dir, 100, true);
    assert_no_temporaries(dir, 100);
    pc_ckpt_meta_t want = meta_of(0);
    assert_int_equal(pc_ckpt_verify(dir, 100, &want, err, sizeof(err)), PC_OK);
    pc_ckpt_reader_t *r;
    assert_int_equal(pc_ckpt_reader_open(dir, 100, 2, &r, err, sizeof(err)), PC_OK);
    for (int i = 0; i < 1002; i++) {
        float v;
        assert_int_equal(pc_ckpt_reader_read(r, &v, sizeof(v)), PC_OK);
        assert_true(v == (float)(100 * 1000 + 2) + (float)i * 0.5f);
    }
    assert_int_equal(pc_ckpt_reader_close(r, err, sizeof(err)), PC_OK);
    /* Reading less than the file is an error (a format mismatch), and so is more. */
    float v[2000];
    assert_int_equal(pc_ckpt_reader_open(dir, 100, 0, &r, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_ckpt_reader_read(r, v, 999 * sizeof(float)), PC_OK);
    assert_int_equal(pc_ckpt_reader_close(r, err, sizeof(err)), PC_EFORMAT);
    assert_non_null(strstr(err, "rank-0.bin"));
    assert_int_equal(pc_ckpt_reader_open(dir, 100, 0, &r, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_ckpt_reader_read(r, v, 1001 * sizeof(float)), PC_EFORMAT);
    assert_int_equal(pc_ckpt_reader_close(r, err, sizeof(err)), PC_EFORMAT);
    /* No such rank. */
    assert_int_equal(pc_ckpt_reader_open(dir, 100, 3, &r, err, sizeof(err)), PC_EFORMAT);
    rm_tree(dir);
}

/* Read rank's whole file of checkpoint it (write_ckpt's contents), each read succeeding;
 * return how many values differ from what write_ckpt wrote. */
static int read_all(pc_ckpt_reader_t *r, uint64_t it, int rank)
{
    int differ = 0;
    for (int i = 0; i < 1000 + rank; i++) {
        float v;
        assert_int_equal(pc_ckpt_reader_read(r, &v, sizeof(v)), PC_OK);
        differ += v != (float)(it * 1000 + (uint64_t)rank) + (float)i * 0.5f;
    }
    return differ;
}

/* The reader on its own, without pc_ckpt_verify first: a flipped byte (first, middle or
 * last of the file) reads fine, has the size the manifest states, and only the CRC tells;
 * close must report it. The runtime's load path verifies before reading, which would hide
 * a reader that forgot to compare. */
static void test_reader_crc_alone(void **state)
{
    (void)state;
    char dir[] = "/tmp/pc-test-ckpt-XXXXXX", err[512], path[600];
    assert_non_null(mkdtemp(dir));
    const long offsets[] = {0, 2001, 4 * 1001 - 1};
    for (int k = 0; k < 3; k++) {
        write_ckpt(dir, 40, true);
        pc_ckpt_path(dir, 40, 1, path, sizeof(path));
        flip_byte(path, offsets[k]);
        pc_ckpt_reader_t *r;
        assert_int_equal(pc_ckpt_reader_open(dir, 40, 1, &r, err, sizeof(err)), PC_OK);
        assert_int_equal(read_all(r, 40, 1), 1);
        err[0] = '\0';
        assert_int_equal(pc_ckpt_reader_close(r, err, sizeof(err)), PC_EFORMAT);
        assert_non_null(strstr(err, "CRC mismatch"));
        assert_non_null(strstr(err, "rank-1.bin"));
    }
    /* The other ranks' files are intact and still read back cleanly. */
    pc_ckpt_reader_t *r;
    assert_int_equal(pc_ckpt_reader_open(dir, 40, 0, &r, err, sizeof(err)), PC_OK);
    assert_int_equal(read_all(r, 40, 0), 0);
    assert_int_equal(pc_ckpt_reader_close(r, err, sizeof(err)), PC_OK);
    rm_tree(dir);
}

/* A byte that changes on disk after pc_ckpt_verify passed (and after the reader opened the
 * file): only the reader's own CRC can catch it, so close must fail. */
static void test_reader_crc_after_verify(void **state)
{
    (void)state;
    char dir[] = "/tmp/pc-test-ckpt-XXXXXX", err[512], path[600];
    assert_non_null(mkdtemp(dir));
    write_ckpt(dir, 50, true);
    pc_ckpt_meta_t want = meta_of(0);
    assert_int_equal(pc_ckpt_verify(dir, 50, &want, err, sizeof(err)), PC_OK);
    pc_ckpt_reader_t *r;
    assert_int_equal(pc_ckpt_reader_open(dir, 50, 2, &r, err, sizeof(err)), PC_OK);
    pc_ckpt_path(dir, 50, 2, path, sizeof(path));
    flip_byte(path, 1234);
    assert_int_equal(read_all(r, 50, 2), 1);
    err[0] = '\0';
    assert_int_equal(pc_ckpt_reader_close(r, err, sizeof(err)), PC_EFORMAT);
    assert_non_null(strstr(err, "CRC mismatch"));
    assert_non_null(strstr(err, "rank-2.bin"));
    /* Verification now sees it too. */
    assert_int_equal(pc_ckpt_verify(dir, 50, &want, err, sizeof(err)), PC_EFORMAT);
    rm_tree(dir);
}

static void test_find_skips_bad(void **state)
{
    (void)state;
    char dir[] = "/tmp/pc-test-ckpt-XXXXXX", err[512], path[600];
    assert_non_null(mkdtemp(dir));
    pc_log_t *log;
    FILE *logf = tmpfile();
    assert_int_equal(pc_log_create(logf, 0, PC_LOG_INFO, &log), PC_OK);
    pc_ckpt_meta_t want = meta_of(0);
    uint64_t it = 0;
    assert_int_equal(pc_ckpt_find(dir, &want, log, 0, &it, err, sizeof(err)), PC_ENOENT);
    char missing[600];
    snprintf(missing, sizeof(missing), "%s/nope", dir);
    assert_int_equal(pc_ckpt_find(missing, &want, log, 0, &it, err, sizeof(err)), PC_ENOENT);

    write_ckpt(dir, 10, true);
    write_ckpt(dir, 20, true);
    write_ckpt(dir, 30, false); /* partial: killed before the manifest */
    assert_int_equal(pc_ckpt_find(dir, &want, log, 0, &it, err, sizeof(err)), PC_OK);
    assert_int_equal(it, 20);
    /* A flipped byte in a rank file of 20: back to 10. */
    pc_ckpt_path(dir, 20, 1, path, sizeof(path));
    flip_byte(path, 77);
    assert_int_equal(pc_ckpt_verify(dir, 20, &want, err, sizeof(err)), PC_EFORMAT);
    assert_non_null(strstr(err, "CRC mismatch"));
    assert_int_equal(pc_ckpt_find(dir, &want, log, 0, &it, err, sizeof(err)), PC_OK);
    assert_int_equal(it, 10);
    /* Rewritten whole, 20 is chosen again; then truncated, missing, damaged manifest. */
    write_ckpt(dir, 20, true);
    assert_int_equal(pc_ckpt_find(dir, &want, log, 0, &it, err, sizeof(err)), PC_OK);
    assert_int_equal(it, 20);
    assert_int_equal(truncate(path, 100), 0);
    assert_int_equal(pc_ckpt_verify(dir, 20, &want, err, sizeof(err)), PC_EFORMAT);
    assert_non_null(strstr(err, "bytes, the manifest says"));
    unlink(path);
    assert_int_equal(pc_ckpt_verify(dir, 20, &want, err, sizeof(err)), PC_EFORMAT);
    assert_non_null(strstr(err, "missing"));
    write_ckpt(dir, 20, true);
    char mpath[600], ck[512];
    pc_ckpt_path(dir, 20, -1, ck, sizeof(ck));
    snprintf(mpath, sizeof(mpath), "%s/MANIFEST", ck);
    flip_byte(mpath, 40);
    assert_int_equal(pc_ckpt_verify(dir, 20, &want, err, sizeof(err)), PC_EFORMAT);
    assert_int_equal(pc_ckpt_find(dir, &want, log, 0, &it, err, sizeof(err)), PC_OK);
    assert_int_equal(it, 10);
    /* A different job is never loaded. */
    write_ckpt(dir, 20, true);
    pc_ckpt_meta_t other = want;
    other.model ^= 1;
    /* Intact checkpoints of another job: said so (not "none"), and never removed. */
    assert_int_equal(pc_ckpt_find(dir, &other, log, 1, &it, err, sizeof(err)), PC_EINCOMPAT);
    assert_non_null(
        strstr(err, "holds checkpoints of another job (iteration 20: a different model"));
    pc_ckpt_path(dir, 20, -1, ck, sizeof(ck));
    assert_true(exists(ck));
    pc_ckpt_path(dir, 10, -1, ck, sizeof(ck));
    assert_true(exists(ck));
    write_ckpt(dir, 30, false); /* the partial one, removed as damaged by that call */
    other = want;
    other.workers = 1;
    other.servers = 2;
    assert_int_equal(pc_ckpt_verify(dir, 20, &other, err, sizeof(err)), PC_EINCOMPAT);
    assert_non_null(strstr(err, "workers"));
    other = want;
    snprintf(other.config, sizeof(other.config), "ps dgc:ratio=0.001 min-bytes=65536 seed=42");
    assert_int_equal(pc_ckpt_verify(dir, 20, &other, err, sizeof(err)), PC_EINCOMPAT);
    assert_non_null(strstr(err, "configuration"));
    /* With remove_bad, the skipped newer ones are deleted. */
    pc_ckpt_path(dir, 30, -1, ck, sizeof(ck));
    assert_true(exists(ck));
    assert_int_equal(pc_ckpt_find(dir, &want, log, 1, &it, err, sizeof(err)), PC_OK);
    assert_int_equal(it, 20);
    assert_false(exists(ck));
    pc_ckpt_path(dir, 20, 0, path, sizeof(path));
    flip_byte(path, 5);
    assert_int_equal(pc_ckpt_find(dir, &want, log, 1, &it, err, sizeof(err)), PC_OK);
    assert_int_equal(it, 10);
    pc_ckpt_path(dir, 20, -1, ck, sizeof(ck));
    assert_false(exists(ck));
    /* The log names each skipped checkpoint and why. */
    rewind(logf);
    char text[8192] = "";
    size_t n = fread(text, 1, sizeof(text) - 1, logf);
    text[n] = '\0';
    assert_non_null(strstr(text, "skipping checkpoint of iteration 30"));
    assert_non_null(strstr(text, "no manifest"));
    pc_log_destroy(log);
    fclose(logf);
    rm_tree(dir);
}

static void test_prune(void **state)
{
    (void)state;
    char dir[] = "/tmp/pc-test-ckpt-XXXXXX", err[512], ck[512];
    assert_non_null(mkdtemp(dir));
    for (uint64_t it = 1; it <= 5; it++)
        write_ckpt(dir, it * 100, true);
    /* A user's file beside the checkpoints is never touched. */
    char keep[600];
    snprintf(keep, sizeof(keep), "%s/notes.txt", dir);
    FILE *f = fopen(keep, "w");
    fputs("mine\n", f);
    fclose(f);
    /* Another job's checkpoint (its manifest names 4 ranks) and a partial one (no
     * manifest) among the old ones are never pruned. */
    pc_ckpt_meta_t want = meta_of(0), other = meta_of(50);
    other.world = 4;
    other.workers = 3;
    pc_ckpt_file_t files[4] = {{0, 0}};
    write_ckpt(dir, 50, false);
    assert_int_equal(pc_ckpt_manifest_write(dir, &other, files, err, sizeof(err)), PC_OK);
    write_ckpt(dir, 60, false);
    assert_int_equal(pc_ckpt_prune(dir, &want, 400, 2, err, sizeof(err)), PC_OK);
    pc_ckpt_path(dir, 50, -1, ck, sizeof(ck));
    assert_true(exists(ck));
    pc_ckpt_path(dir, 60, -1, ck, sizeof(ck));
    assert_true(exists(ck));
    uint64_t expect_kept[] = {300, 400, 500}, expect_gone[] = {100, 200};
    for (int i = 0; i < 3; i++) {
        pc_ckpt_path(dir, expect_kept[i], -1, ck, sizeof(ck));
        assert_true(exists(ck));
    }
    for (int i = 0; i < 2; i++) {
        pc_ckpt_path(dir, expect_gone[i], -1, ck, sizeof(ck));
        assert_false(exists(ck));
    }
    assert_true(exists(keep));
    assert_int_equal(pc_ckpt_prune(dir, &want, 500, 1, err, sizeof(err)), PC_OK);
    pc_ckpt_path(dir, 400, -1, ck, sizeof(ck));
    assert_false(exists(ck));
    pc_ckpt_path(dir, 500, -1, ck, sizeof(ck));
    assert_true(exists(ck));
    rm_tree(dir);
}

static void test_manifest_parse(void **state)
{
    (void)state;
    char dir[] = "/tmp/pc-test-ckpt-XXXXXX", err[512], mpath[600], ck[512];
    assert_non_null(mkdtemp(dir));
    write_ckpt(dir, 7, true);
    pc_ckpt_path(dir, 7, -1, ck, sizeof(ck));
    snprintf(mpath, sizeof(mpath), "%s/MANIFEST", ck);
    FILE *f = fopen(mpath, "rb");
    char buf[4096];
    size_t len = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    pc_ckpt_meta_t m;
    pc_ckpt_file_t files[8];
    assert_int_equal(pc_ckpt_manifest_parse(buf, len, &m, files, 8, err, sizeof(err)), PC_OK);
    assert_int_equal(m.iteration, 7);
    assert_int_equal(m.world, 3);
    assert_int_equal(m.model, 0x0123456789abcdefull);
    assert_string_equal(m.config, "ps topk:ratio=0.01 min-bytes=65536 seed=42");
    assert_int_equal(files[1].size, 4004);
    /* Every truncation is refused. */
    for (size_t cut = 0; cut < len; cut++)
        assert_int_equal(pc_ckpt_manifest_parse(buf, cut, &m, files, 8, err, sizeof(err)),
                         PC_EFORMAT);
    /* More ranks than the caller can hold. */
    assert_int_equal(pc_ckpt_manifest_parse(buf, len, &m, files, 2, err, sizeof(err)), PC_EFORMAT);
    /* Trailing bytes. */
    buf[len] = 'x';
    assert_int_equal(pc_ckpt_manifest_parse(buf, len + 1, &m, files, 8, err, sizeof(err)),
                     PC_EFORMAT);
    rm_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_reader_crc_alone),
        cmocka_unit_test(test_reader_crc_after_verify),
        cmocka_unit_test(test_find_skips_bad),
        cmocka_unit_test(test_prune),
        cmocka_unit_test(test_manifest_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
