/* test_flags: pc_flags' table-driven parser: each type's parse and range, a usage error's
 * one line naming the flag, --help, a missing value, an unknown flag, operands, the given
 * record; and pc_opt.h's 0.1 names (aliases until 0.2) parse the same table into the same
 * values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_flags.h"
#include "pipecompress/pc_opt.h"

typedef struct dst {
    int n;
    int64_t bytes;
    double ratio;
    char name[8];
    int mode;
    int quiet;
} dst_t;

static const pc_flags_t table[] = {
    {.name = "n",
     .short_name = 'n',
     .type = PC_FLAGS_INT,
     .offset = offsetof(dst_t, n),
     .min = 1,
     .max = 10,
     .help = "a count"},
    {.name = "bytes",
     .type = PC_FLAGS_SIZE,
     .offset = offsetof(dst_t, bytes),
     .min = 1,
     .max = 1 << 30,
     .help = "a size"},
    {.name = "ratio",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(dst_t, ratio),
     .min = 0,
     .max = 1,
     .help = "a fraction"},
    {.name = "name",
     .type = PC_FLAGS_STRING,
     .offset = offsetof(dst_t, name),
     .size = 8,
     .help = "a word"},
    {.name = "mode",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(dst_t, mode),
     .choices = "off|on|auto",
     .help = "a choice"},
    {.name = "quiet", .type = PC_FLAGS_FLAG, .offset = offsetof(dst_t, quiet), .help = "a switch"},
};

static int parse(dst_t *d, uint64_t *given, int argc, char **argv, char *err)
{
    pc_flags_group_t g = {"test", table, sizeof(table) / sizeof(table[0]), d, given};
    return pc_flags_parse(&g, 1, argc, argv, NULL, err, 256);
}

static void test_values(void **state)
{
    (void)state;
    dst_t d = {.n = 1};
    uint64_t given = 0;
    char err[256];
    char *argv[] = {"prog",   "-n",  "7",      "--bytes=64K", "--ratio", "0.25",
                    "--name", "abc", "--mode", "auto",        "--quiet"};
    assert_int_equal(parse(&d, &given, 11, argv, err), PC_OK);
    assert_int_equal(d.n, 7);
    assert_true(d.bytes == 65536);
    assert_true(d.ratio == 0.25);
    assert_string_equal(d.name, "abc");
    assert_int_equal(d.mode, 2);
    assert_int_equal(d.quiet, 1);
    assert_true(given == 0x3f); /* every row given */
}

static void test_errors(void **state)
{
    (void)state;
    dst_t d = {0};
    char err[256];
    char *range[] = {"prog", "--n", "11"};
    assert_int_equal(parse(&d, NULL, 3, range, err), PC_EUSAGE);
    assert_non_null(strstr(err, "--n: 11 is out of range (1..10)"));
    char *word[] = {"prog", "--n", "x"};
    assert_int_equal(parse(&d, NULL, 3, word, err), PC_EUSAGE);
    assert_non_null(strstr(err, "--n: 'x' is not an integer"));
    char *choice[] = {"prog", "--mode", "maybe"};
    assert_int_equal(parse(&d, NULL, 3, choice, err), PC_EUSAGE);
    assert_non_null(strstr(err, "--mode"));
    char *longname[] = {"prog", "--name", "too-long-a-word"};
    assert_int_equal(parse(&d, NULL, 3, longname, err), PC_EUSAGE);
    assert_non_null(strstr(err, "--name"));
    char *missing[] = {"prog", "--ratio"};
    assert_int_equal(parse(&d, NULL, 2, missing, err), PC_EUSAGE);
    assert_string_equal(err, "--ratio: missing value");
    char *unknown[] = {"prog", "--nope"};
    assert_int_equal(parse(&d, NULL, 2, unknown, err), PC_EUSAGE);
    assert_string_equal(err, "unknown flag '--nope' (see --help)");
    char *operand[] = {"prog", "stray"};
    assert_int_equal(parse(&d, NULL, 2, operand, err), PC_EUSAGE);
    assert_string_equal(err, "unexpected argument 'stray' (see --help)");
    char *help[] = {"prog", "--help"};
    assert_int_equal(parse(&d, NULL, 2, help, err), PC_FLAGS_HELP);
}

/* The 0.1 names: the same table, through pc_opt_parse and pc_opt_set, the same values. */
static void test_old_names(void **state)
{
    (void)state;
    const pc_opt_t *old = table;         /* the type is the same */
    const struct pc_opt *tagged = table; /* and so are the 0.1 tags */
    enum pc_opt_type type = tagged[0].type;
    assert_int_equal(type, PC_OPT_INT);
    dst_t a = {0}, b = {0};
    char err[256];
    char *argv[] = {"prog", "--n", "3", "--mode", "on"};
    struct pc_opt_group g = {"test", old, sizeof(table) / sizeof(table[0]), &b, NULL};
    assert_int_equal(parse(&a, NULL, 5, argv, err), PC_OK);
    assert_int_equal(pc_opt_parse(&g, 1, 5, argv, NULL, err, sizeof(err)), PC_OK);
    assert_memory_equal(&a, &b, sizeof(a));
    assert_int_equal(pc_opt_set(&old[2], &b, "0.5", err, sizeof(err)), PC_OK);
    assert_true(b.ratio == 0.5);
    assert_int_equal(PC_OPT_HELP, PC_FLAGS_HELP);
    assert_int_equal(PC_OPT_CHOICE, PC_FLAGS_CHOICE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_old_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
