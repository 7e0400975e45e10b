/* test_file: crash-safe files: the content and CRC of a committed file, nothing under the
 * final name (and no temporary left) after an abort or a failed commit, an old file kept
 * whole until the new one is complete, and clear errors naming the file. */
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
#include <zlib.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_file.h"

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* How many entries the directory holds besides . and .. (-1 when it cannot be read). */
static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static void test_commit_and_crc(void **state)
{
    (void)state;
    char dir[] = "/tmp/pc-test-file-XXXXXX", path[600], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/out.bin", dir);
    pc_file_writer_t *w;
    assert_int_equal(pc_file_writer_open(path, &w, err, sizeof(err)), PC_OK);
    uint8_t buf[10000];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 7 + 3);
    pc_file_writer_write(w, buf, 4000);
    pc_file_writer_write(w, buf + 4000, 0);
    pc_file_writer_write(w, buf + 4000, 6000);
    assert_false(exists(path)); /* not before commit */
    assert_int_equal(pc_file_writer_size(w), 10000);
    uint32_t crc = pc_file_writer_crc(w);
    assert_int_equal(crc, (uint32_t)crc32(0, buf, sizeof(buf)));
    assert_int_equal(pc_file_crc(pc_file_crc(0, buf, 3), buf + 3, sizeof(buf) - 3), crc);
    assert_int_equal(pc_file_writer_commit(w, err, sizeof(err)), PC_OK);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t back[10001];
    assert_int_equal(fread(back, 1, sizeof(back), f), sizeof(buf));
    fclose(f);
    assert_memory_equal(back, buf, sizeof(buf));
    assert_int_equal(entries(dir), 1); /* no temporary left */
    unlink(path);
    rmdir(dir);
}

static void test_abort_keeps_old(void **state)
{
    (void)state;
    char dir[] = "/tmp/pc-test-file-XXXXXX", path[600], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/model.pcm", dir);
    pc_file_writer_t *w;
    assert_int_equal(pc_file_writer_open(path, &w, err, sizeof(err)), PC_OK);
    pc_file_writer_write(w, "old", 3);
    assert_int_equal(pc_file_writer_commit(w, err, sizeof(err)), PC_OK);
    /* A new version abandoned half-way: the old file stays whole, no temporary remains. */
    assert_int_equal(pc_file_writer_open(path, &w, err, sizeof(err)), PC_OK);
    pc_file_writer_write(w, "new and longer", 14);
    assert_int_equal(entries(dir), 2); /* the old file and the temporary */
    pc_file_writer_abort(w);
    pc_file_writer_abort(NULL);
    assert_int_equal(entries(dir), 1);
    char back[16] = "";
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(back, 1, sizeof(back), f), 3);
    fclose(f);
    assert_memory_equal(back, "old", 3);
    /* A commit that cannot rename (the directory is gone) fails naming the file. */
    unlink(path);
    assert_int_equal(pc_file_writer_open(path, &w, err, sizeof(err)), PC_OK);
    pc_file_writer_write(w, "x", 1);
    char tmp[700];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    assert_int_equal(unlink(tmp), 0);
    assert_int_equal(rmdir(dir), 0);
    assert_int_equal(pc_file_writer_commit(w, err, sizeof(err)), PC_EIO);
    assert_non_null(strstr(err, "cannot write '"));
    assert_non_null(strstr(err, "model.pcm"));
    assert_false(exists(path));
}

static void test_open_errors(void **state)
{
    (void)state;
    char err[512];
    pc_file_writer_t *w = NULL;
    assert_int_equal(pc_file_writer_open("/nonexistent-dir-pc/x.bin", &w, err, sizeof(err)),
                     PC_EIO);
    assert_null(w);
    assert_non_null(strstr(err, "cannot create '/nonexistent-dir-pc/x.bin.tmp."));
    char longname[5000];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(pc_file_writer_open(longname, &w, err, sizeof(err)), PC_ERANGE);
    assert_null(w);
}

/* pc_file_check_writable: a writable place passes and nothing is left there; a missing
 * directory, a file where the directory should be, a directory as the name, and a place
 * where files cannot be created (/proc, even for root) are each refused, naming the file. */
static void test_check_writable(void **state)
{
    (void)state;
    char dir[] = "/tmp/pc-test-writable-XXXXXX", path[256], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/model.pcm", dir);
    assert_int_equal(pc_file_check_writable(path, err, sizeof(err)), PC_OK);
    assert_int_equal(entries(dir), 0); /* nothing created */
    snprintf(path, sizeof(path), "%s/missing/model.pcm", dir);
    assert_int_equal(pc_file_check_writable(path, err, sizeof(err)), PC_EIO);
    assert_non_null(strstr(err, "missing/model.pcm"));
    assert_non_null(strstr(err, "No such file or directory"));
    snprintf(path, sizeof(path), "%s/plain", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/plain/model.pcm", dir);
    assert_int_equal(pc_file_check_writable(path, err, sizeof(err)), PC_EIO);
    assert_non_null(strstr(err, "is not a directory"));
    assert_int_equal(pc_file_check_writable(dir, err, sizeof(err)), PC_EIO);
    assert_non_null(strstr(err, "is a directory"));
    assert_int_equal(pc_file_check_writable("/proc/pc-test.json", err, sizeof(err)), PC_EIO);
    assert_non_null(strstr(err, "/proc/pc-test.json"));
    assert_int_equal(pc_file_check_writable("", err, sizeof(err)), PC_EIO);
    snprintf(path, sizeof(path), "%s/plain", dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(entries(dir), 0);
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_and_crc),
        cmocka_unit_test(test_abort_keeps_old),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_check_writable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
