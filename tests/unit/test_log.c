/* test_log: levels filter, lines carry rank and thread tags, long messages are cut whole,
 * and each line reaches an unbuffered stream (stderr) in one write. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include <cmocka.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_log.h"

static void test_levels_and_tags(void **state)
{
    (void)state;
    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof(buf), "w");
    assert_non_null(f);
    pc_log_t *log;
    assert_int_equal(pc_log_create(f, -1, PC_LOG_INFO, &log), PC_OK);
    pc_log_write(log, PC_LOG_INFO, NULL, "before mpi %d", 1);
    pc_log_set_rank(log, 3);
    pc_log_write(log, PC_LOG_WARN, "compressor", "queue full for %.1f ms", 3.25);
    pc_log_write(log, PC_LOG_DEBUG, "backprop", "hidden");
    assert_false(pc_log_enabled(log, PC_LOG_DEBUG));
    pc_log_set_level(log, PC_LOG_DEBUG);
    assert_true(pc_log_enabled(log, PC_LOG_DEBUG));
    pc_log_write(log, PC_LOG_DEBUG, "backprop", "shown");
    pc_log_write(log, PC_LOG_TRACE, "backprop", "still hidden");
    fflush(f);
    fclose(f);
    assert_non_null(strstr(buf, "[pc r- main"));
    assert_non_null(strstr(buf, "] info: before mpi 1\n"));
    assert_non_null(strstr(buf, "[pc r3 compressor"));
    assert_non_null(strstr(buf, "] warn: queue full for 3.2 ms\n"));
    assert_non_null(strstr(buf, "] debug: shown\n"));
    assert_null(strstr(buf, "hidden"));
    /* Exactly the three enabled lines. */
    int lines = 0;
    for (char *p = buf; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, 3);
    pc_log_destroy(log);
}

static void test_long_message_cut(void **state)
{
    (void)state;
    char buf[8192] = "";
    FILE *f = fmemopen(buf, sizeof(buf), "w");
    pc_log_t *log;
    assert_int_equal(pc_log_create(f, 0, PC_LOG_ERROR, &log), PC_OK);
    char big[3000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    pc_log_write(log, PC_LOG_ERROR, "server", "%s", big);
    fflush(f);
    fclose(f);
    size_t len = strlen(buf);
    assert_true(len <= 1024);
    assert_int_equal(buf[len - 1], '\n');
    pc_log_destroy(log);
}

/* A stream whose every write is counted: unbuffered, as stderr is. */
typedef struct writes {
    int calls;
    int whole; /* calls whose bytes end with the line's newline */
    char last[2048];
} writes_t;

static ssize_t count_write(void *cookie, const char *buf, size_t size)
{
    writes_t *w = cookie;
    w->calls++;
    w->whole += size > 0 && buf[size - 1] == '\n';
    size_t n = size < sizeof(w->last) - 1 ? size : sizeof(w->last) - 1;
    memcpy(w->last, buf, n);
    w->last[n] = '\0';
    return (ssize_t)size;
}

static void test_one_write_per_line(void **state)
{
    (void)state;
    writes_t w = {0};
    FILE *f = fopencookie(&w, "w", (cookie_io_functions_t){.write = count_write});
    assert_non_null(f);
    assert_int_equal(setvbuf(f, NULL, _IONBF, 0), 0);
    pc_log_t *log;
    assert_int_equal(pc_log_create(f, 1, PC_LOG_INFO, &log), PC_OK);
    pc_log_write(log, PC_LOG_WARN, "backprop", "placement: %d threads", 5);
    /* mpirun merges the ranks' stderr: a line in two writes lets another rank's line in
     * between (seen: "...r1.backprop}pc-train: --data: ..."). */
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.whole, 1);
    assert_non_null(strstr(w.last, "] warn: placement: 5 threads\n"));
    char big[3000];
    memset(big, 'y', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    pc_log_write(log, PC_LOG_ERROR, "server", "%s", big); /* cut, still one write */
    assert_int_equal(w.calls, 2);
    assert_int_equal(w.whole, 2);
    fclose(f);
    pc_log_destroy(log);
}

static void test_level_names(void **state)
{
    (void)state;
    pc_log_level_t l;
    assert_int_equal(pc_log_level_parse("trace", &l), PC_OK);
    assert_int_equal(l, PC_LOG_TRACE);
    assert_int_equal(pc_log_level_parse("verbose", &l), PC_EINVAL);
    assert_string_equal(pc_log_level_name(PC_LOG_WARN), "warn");
    assert_string_equal(pc_log_level_name(17), "?");
    pc_log_t *log = NULL;
    assert_int_equal(pc_log_create(NULL, 0, PC_LOG_INFO, &log), PC_EINVAL);
    assert_int_equal(pc_log_create(stderr, 0, (pc_log_level_t)9, &log), PC_EINVAL);
    assert_null(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels_and_tags),
        cmocka_unit_test(test_long_message_cut),
        cmocka_unit_test(test_one_write_per_line),
        cmocka_unit_test(test_level_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
