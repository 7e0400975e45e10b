/* test_log: levels filter, lines carry rank and thread tags, long messages are cut whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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
        cmocka_unit_test(test_level_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
