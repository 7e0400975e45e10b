/* test_error: the error table gives distinct codes, names and messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_error.h"

static void test_ok_is_zero(void **state)
{
    (void)state;
    assert_int_equal(PC_OK, 0);
    assert_string_equal(pc_strerror(PC_OK), "success");
    assert_string_equal(pc_errname(PC_OK), "OK");
}

static void test_codes_negative_distinct_named(void **state)
{
    (void)state;
    static const int codes[] = {
#define CODE(name, value, msg) PC_##name,
        PC_ERROR_TABLE(CODE)
#undef CODE
    };
    size_t n = sizeof(codes) / sizeof(codes[0]);
    assert_true(n > 10);
    for (size_t i = 0; i < n; i++) {
        if (codes[i] != PC_OK)
            assert_true(codes[i] < 0);
        assert_string_not_equal(pc_strerror(codes[i]), "unknown error");
        assert_string_not_equal(pc_errname(codes[i]), "UNKNOWN");
        for (size_t j = i + 1; j < n; j++) {
            assert_int_not_equal(codes[i], codes[j]);
            assert_string_not_equal(pc_strerror(codes[i]), pc_strerror(codes[j]));
        }
    }
    assert_string_equal(pc_errname(PC_EUSAGE), "EUSAGE");
    assert_string_equal(pc_strerror(PC_ETIMEDOUT), "timed out");
}

static void test_unknown_code(void **state)
{
    (void)state;
    assert_string_equal(pc_strerror(-9999), "unknown error");
    assert_string_equal(pc_errname(42), "UNKNOWN");
}

static void test_error_fmt(void **state)
{
    (void)state;
    char err[16];
    assert_int_equal(pc_error_fmt(PC_EIO, err, sizeof(err), "file %s: %d", "a.idx", 42), PC_EIO);
    assert_string_equal(err, "file a.idx: 42");
    assert_int_equal(pc_error_fmt(PC_EINVAL, err, sizeof(err), "%s", "a message longer than 16"),
                     PC_EINVAL);
    assert_int_equal(strlen(err), sizeof(err) - 1); /* cut, terminated */
    assert_int_equal(pc_error_fmt(PC_EFORMAT, NULL, 0, "ignored %d", 1), PC_EFORMAT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ok_is_zero),
        cmocka_unit_test(test_codes_negative_distinct_named),
        cmocka_unit_test(test_unknown_code),
        cmocka_unit_test(test_error_fmt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
