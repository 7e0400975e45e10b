/* test_config: every runtime flag parses (long and short forms, = and separate values),
 * every value type is validated with a one-line message naming the flag, and the generic
 * table parser handles help, version, operands and multiple groups. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_config.h"
#include "pipecompress/pc_topo.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_log.h"
#include "pipecompress/pc_optim.h"

#define ARGV(...) ((char *[]){"prog", __VA_ARGS__, NULL})
#define ARGC(...) ((int)(sizeof((char *[]){"prog", __VA_ARGS__}) / sizeof(char *)))

static int parse_cfg(pc_config_t *cfg, int argc, char **argv, char *err)
{
    pc_config_defaults(cfg);
    size_t n;
    const pc_flags_t *opts = pc_config_options(&n);
    pc_flags_group_t g = {"Runtime", opts, n, cfg, NULL};
    return pc_flags_parse(&g, 1, argc, argv, NULL, err, 256);
}
#define PARSE(cfg, err, ...) parse_cfg(cfg, ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), err)

static void test_defaults(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[256];
    char *argv[] = {"prog", NULL};
    assert_int_equal(parse_cfg(&cfg, 1, argv, err), PC_OK);
    assert_int_equal(cfg.servers, 1);
    assert_string_equal(cfg.bind, "auto");
    assert_int_equal(cfg.log_level, PC_LOG_INFO);
}

static void test_servers(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[256];
    assert_int_equal(PARSE(&cfg, err, "--servers", "3"), PC_OK);
    assert_int_equal(cfg.servers, 3);
    assert_int_equal(PARSE(&cfg, err, "--servers=2"), PC_OK);
    assert_int_equal(cfg.servers, 2);
    assert_int_equal(PARSE(&cfg, err, "-s", "4"), PC_OK);
    assert_int_equal(cfg.servers, 4);
    assert_int_equal(PARSE(&cfg, err, "--serv", "5"), PC_OK); /* unique abbreviation */
    assert_int_equal(cfg.servers, 5);
    assert_int_equal(PARSE(&cfg, err, "--servers", "0"), PC_EUSAGE);
    assert_string_equal(err, "--servers: 0 is out of range (1..4096)");
    assert_int_equal(PARSE(&cfg, err, "--servers", "abc"), PC_EUSAGE);
    assert_string_equal(err, "--servers: 'abc' is not an integer");
    assert_int_equal(PARSE(&cfg, err, "--servers", "2x"), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--servers", ""), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--servers", "99999999999999999999"), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--servers"), PC_EUSAGE);
    assert_string_equal(err, "--servers: missing value");
    assert_int_equal(PARSE(&cfg, err, "-s"), PC_EUSAGE);
    assert_string_equal(err, "--servers: missing value");
}

static void test_bind(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[256];
    assert_int_equal(PARSE(&cfg, err, "--bind", "none"), PC_OK);
    assert_string_equal(cfg.bind, "none");
    assert_int_equal(PARSE(&cfg, err, "--bind", "0,2,4-7"), PC_OK);
    pc_bind_t b;
    assert_int_equal(pc_topo_bind_parse(cfg.bind, &b, err, sizeof(err)), PC_OK);
    assert_int_equal(b.mode, PC_BIND_LIST);
    assert_int_equal(b.ncores, 6);
    int want[] = {0, 2, 4, 5, 6, 7};
    for (int i = 0; i < 6; i++)
        assert_int_equal(b.cores[i], want[i]);
    assert_int_equal(pc_topo_bind_parse("auto", &b, err, sizeof(err)), PC_OK);
    assert_int_equal(b.mode, PC_BIND_AUTO);
    assert_int_equal(pc_topo_bind_parse("none", &b, err, sizeof(err)), PC_OK);
    assert_int_equal(b.mode, PC_BIND_NONE);
    assert_int_equal(PARSE(&cfg, err, "--bind", "sometimes"), PC_EUSAGE);
    assert_string_equal(err,
                        "--bind: 'sometimes' is not auto, none or a list of cores like 0,2,4-7");
    assert_int_equal(PARSE(&cfg, err, "--bind", "3-1"), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--bind", "1,"), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--bind", "1-"), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--bind", "-1"), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--bind", "0-70000"), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--bind", "0-300"), PC_EUSAGE); /* > 256 cores */
    assert_int_equal(PARSE(&cfg, err, "--bind", ""), PC_EUSAGE);
}

/* --device, --compress-on and --gpu: the choices, the list's parser and its limits. */
static void test_device_flags(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[256];
    assert_int_equal(PARSE(&cfg, err, "--device", "cuda", "--compress-on", "cpu", "--gpu", "3,1"),
                     PC_OK);
    assert_int_equal(cfg.device, PC_DEVICE_CUDA);
    assert_int_equal(cfg.compress_on, PC_COMPRESS_ON_CPU);
    int list[PC_CONFIG_GPU_MAX], n = -1;
    assert_int_equal(pc_config_gpu_parse(cfg.gpu, list, &n, err, sizeof(err)), PC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(list[0], 3);
    assert_int_equal(list[1], 1);
    assert_int_equal(pc_config_gpu_parse("auto", list, &n, err, sizeof(err)), PC_OK);
    assert_int_equal(n, 0);
    assert_int_equal(PARSE(&cfg, err, "--device", "emulate"), PC_OK);
    assert_int_equal(cfg.device, PC_DEVICE_EMULATE);
    assert_int_equal(cfg.compress_on, PC_COMPRESS_ON_GPU); /* the default */
    assert_int_equal(PARSE(&cfg, err, "--device", "tpu"), PC_EUSAGE);
    assert_non_null(strstr(err, "--device"));
    const char *bad[] = {"", "x", "0,", ",0", "0,,1", "1024", "-1", "0 1", "auto,0"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        n = -1;
        assert_int_equal(pc_config_gpu_parse(bad[i], list, &n, err, sizeof(err)), PC_EUSAGE);
        assert_int_equal(n, -1); /* untouched */
        assert_null(strchr(err, '\n'));
    }
    char many[512] = "0";
    for (int i = 1; i <= PC_CONFIG_GPU_MAX; i++)
        strcat(many, ",1");
    assert_int_equal(pc_config_gpu_parse(many, list, &n, err, sizeof(err)), PC_EUSAGE);
    assert_non_null(strstr(err, "more than"));
    assert_int_equal(PARSE(&cfg, err, "--gpu", "0,x"), PC_EUSAGE);
    assert_string_equal(err, "--gpu: '0,x': expected auto or device numbers such as 0,1");
}

static void test_log_level(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[256];
    assert_int_equal(PARSE(&cfg, err, "--log-level", "debug"), PC_OK);
    assert_int_equal(cfg.log_level, PC_LOG_DEBUG);
    assert_int_equal(PARSE(&cfg, err, "-v", "error"), PC_OK);
    assert_int_equal(cfg.log_level, PC_LOG_ERROR);
    assert_int_equal(PARSE(&cfg, err, "--log-level=trace"), PC_OK);
    assert_int_equal(cfg.log_level, PC_LOG_TRACE);
    assert_int_equal(PARSE(&cfg, err, "--log-level", "loud"), PC_EUSAGE);
    assert_string_equal(err, "--log-level: 'loud' is not one of error|warn|info|debug|trace");
}

static void test_unknown_help_version_operands(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[256];
    assert_int_equal(PARSE(&cfg, err, "--frobnicate"), PC_EUSAGE);
    assert_string_equal(err, "unknown flag '--frobnicate' (see --help)");
    assert_int_equal(PARSE(&cfg, err, "-q"), PC_EUSAGE);
    assert_string_equal(err, "unknown flag '-q' (see --help)");
    assert_int_equal(PARSE(&cfg, err, "--help"), PC_FLAGS_HELP);
    assert_int_equal(PARSE(&cfg, err, "-h"), PC_FLAGS_HELP);
    assert_int_equal(PARSE(&cfg, err, "--version"), PC_FLAGS_VERSION);
    assert_int_equal(PARSE(&cfg, err, "stray"), PC_EUSAGE);
    assert_string_equal(err, "unexpected argument 'stray' (see --help)");
}

/* A table with every value type, as programs define their own flags. */
typedef struct bench_opts {
    int reps;
    int64_t count;
    int64_t bytes;
    double ratio;
    char json[32];
    int mode;
    int quick;
} bench_opts_t;

static const pc_flags_t bench_table[] = {
    {.name = "reps",
     .short_name = 'r',
     .type = PC_FLAGS_INT,
     .offset = offsetof(bench_opts_t, reps),
     .min = 1,
     .max = 100},
    {.name = "count",
     .type = PC_FLAGS_INT64,
     .offset = offsetof(bench_opts_t, count),
     .min = 1,
     .max = 1e12},
    {.name = "bytes",
     .type = PC_FLAGS_SIZE,
     .offset = offsetof(bench_opts_t, bytes),
     .min = 1,
     .max = 1099511627776.0},
    {.name = "ratio",
     .type = PC_FLAGS_DOUBLE,
     .offset = offsetof(bench_opts_t, ratio),
     .min = 0,
     .max = 1},
    {.name = "json", .type = PC_FLAGS_STRING, .offset = offsetof(bench_opts_t, json), .size = 32},
    {.name = "kind",
     .type = PC_FLAGS_CHOICE,
     .offset = offsetof(bench_opts_t, mode),
     .choices = "ps|allreduce"},
    {.name = "quick", .type = PC_FLAGS_FLAG, .offset = offsetof(bench_opts_t, quick)},
};

static int parse_two(bench_opts_t *b, pc_config_t *cfg, int argc, char **argv, int *operand,
                     char *err)
{
    size_t n;
    const pc_flags_t *opts = pc_config_options(&n);
    memset(b, 0, sizeof(*b));
    b->reps = 5;
    b->ratio = 0.01;
    pc_config_defaults(cfg);
    pc_flags_group_t groups[] = {
        {"Runtime", opts, n, cfg, NULL},
        {"Bench", bench_table, sizeof(bench_table) / sizeof(bench_table[0]), b, NULL}};
    return pc_flags_parse(groups, 2, argc, argv, operand, err, 256);
}
#define PARSE2(b, cfg, op, err, ...)                                                               \
    parse_two(b, cfg, ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), op, err)

static void test_every_type(void **state)
{
    (void)state;
    bench_opts_t b;
    pc_config_t cfg;
    char err[256];
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--reps", "7", "--count", "10000000000", "--bytes",
                            "4MiB", "--ratio", "0.001", "--json", "out.json", "--kind", "allreduce",
                            "--quick", "-s", "2"),
                     PC_OK);
    assert_int_equal(b.reps, 7);
    assert_true(b.count == 10000000000ll);
    assert_true(b.bytes == 4 << 20);
    assert_true(b.ratio == 0.001);
    assert_string_equal(b.json, "out.json");
    assert_int_equal(b.mode, 1);
    assert_int_equal(b.quick, 1);
    assert_int_equal(cfg.servers, 2);
    /* Sizes: units, case, suffixes. */
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--bytes", "64k"), PC_OK);
    assert_true(b.bytes == 65536);
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--bytes", "1G"), PC_OK);
    assert_true(b.bytes == 1 << 30);
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--bytes", "512"), PC_OK);
    assert_true(b.bytes == 512);
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--bytes", "4X"), PC_EUSAGE);
    assert_string_equal(err, "--bytes: '4X' is not a size (bytes, or with K, M, G, T)");
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--bytes", "-4"), PC_EUSAGE);
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--bytes", "0"), PC_EUSAGE);
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--bytes", "99999999999T"), PC_EUSAGE);
    /* Doubles: out-of-range ratio, garbage, non-finite. */
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--ratio", "1.5"), PC_EUSAGE);
    assert_string_equal(err, "--ratio: 1.5 is out of range (0..1)");
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--ratio", "-0.1"), PC_EUSAGE);
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--ratio", "nan"), PC_EUSAGE);
    assert_string_equal(err, "--ratio: 'nan' is not a finite number");
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--ratio", "inf"), PC_EUSAGE);
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--ratio", "0.1x"), PC_EUSAGE);
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--ratio", "1e-400"), PC_EUSAGE);
    /* Strings: too long, empty. */
    assert_int_equal(
        PARSE2(&b, &cfg, NULL, err, "--json", "a-very-long-file-name-that-does-not-fit.json"),
        PC_EUSAGE);
    assert_string_equal(err, "--json: value is longer than 31 characters");
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--json", ""), PC_EUSAGE);
    /* Integers: range on the int type itself. */
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--reps", "101"), PC_EUSAGE);
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--reps", "4294967297"), PC_EUSAGE);
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--count", "0"), PC_EUSAGE);
    /* Flags take no value. */
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--quick=yes"), PC_EUSAGE);
}

static void test_operands(void **state)
{
    (void)state;
    bench_opts_t b;
    pc_config_t cfg;
    char err[256];
    int op = -1;
    assert_int_equal(PARSE2(&b, &cfg, &op, err, "--reps", "2", "spsc", "--other"), PC_OK);
    assert_int_equal(op, 3);
    assert_int_equal(b.reps, 2);
    assert_int_equal(PARSE2(&b, &cfg, &op, err, "--reps", "2"), PC_OK);
    assert_int_equal(op, 3); /* argc: none */
    assert_int_equal(PARSE2(&b, &cfg, &op, err, "--", "-x"), PC_OK);
    assert_int_equal(op, 2);
}

/* The programs' common ending of a parse: help, version, usage errors, exit statuses. */
static void test_opt_finish(void **state)
{
    (void)state;
    pc_config_t cfg;
    pc_config_defaults(&cfg);
    size_t n;
    const pc_flags_t *opts = pc_config_options(&n);
    pc_flags_group_t g = {"Runtime", opts, n, &cfg, NULL};
    char out[8192], errs[256];
    FILE *o = fmemopen(out, sizeof(out), "w"), *e = fmemopen(errs, sizeof(errs), "w");
    assert_int_equal(pc_flags_finish(PC_OK, &g, 1, "prog", "prog [flags]", "", 1, o, e), -1);
    assert_int_equal(pc_flags_finish(PC_FLAGS_HELP, &g, 1, "prog", "prog [flags]", "", 1, o, e), 0);
    assert_int_equal(pc_flags_finish(PC_FLAGS_VERSION, &g, 1, "prog", "u", "", 1, o, e), 0);
    assert_int_equal(pc_flags_finish(PC_EUSAGE, &g, 1, "prog", "u", "--x: bad", 1, o, e), 2);
    assert_int_equal(pc_flags_finish(PC_EUSAGE, &g, 1, "prog", "u", "silent", 0, o, e), 2);
    fclose(o);
    fclose(e);
    assert_non_null(strstr(out, "usage: prog [flags]\n"));
    assert_non_null(strstr(out, "--servers S"));
    assert_non_null(strstr(out, "prog (PipeCompress) "));
    assert_string_equal(errs, "prog: --x: bad\n");
}

/* Two tables that define the same flag are a program bug, reported, not silently merged. */
static void test_duplicate_names(void **state)
{
    (void)state;
    pc_config_t cfg, cfg2;
    pc_config_defaults(&cfg);
    pc_config_defaults(&cfg2);
    size_t n;
    const pc_flags_t *opts = pc_config_options(&n);
    pc_flags_group_t groups[] = {{"A", opts, n, &cfg, NULL}, {"B", opts, n, &cfg2, NULL}};
    char err[256];
    char *argv[] = {"prog", NULL};
    assert_int_equal(pc_flags_parse(groups, 2, 1, argv, NULL, err, sizeof(err)), PC_EUSAGE);
    assert_string_equal(err, "option --servers defined twice (a program bug)");
}

/* Every runtime flag parses, with its value stored. */
static void test_runtime_flags(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[256];
    assert_int_equal(PARSE(&cfg, err, "--compress", "dgc:ratio=0.001", "--pipeline", "off",
                           "--mode", "allreduce", "--chunk-bytes", "1M", "--pull", "sparse",
                           "--seed", "7", "--timeout", "2.5", "--iters", "100", "--lr", "0.3",
                           "--momentum", "0.5", "--nesterov", "--weight-decay", "1e-4",
                           "--lr-schedule", "cosine", "--lr-step", "30", "--lr-gamma", "0.5",
                           "--lr-warmup", "10", "--metrics", "m.jsonl"),
                     PC_OK);
    assert_string_equal(cfg.compress, "dgc:ratio=0.001");
    assert_int_equal(cfg.pipeline, 0);
    assert_int_equal(cfg.mode, PC_MODE_ALLREDUCE);
    assert_true(cfg.chunk_bytes == 1 << 20);
    assert_int_equal(cfg.pull, PC_PULL_SPARSE);
    assert_true(cfg.seed == 7 && cfg.timeout == 2.5 && cfg.iters == 100);
    assert_true(cfg.lr == 0.3 && cfg.momentum == 0.5 && cfg.nesterov == 1);
    assert_true(cfg.weight_decay == 1e-4 && cfg.lr_schedule == 2 && cfg.lr_step == 30);
    assert_true(cfg.lr_gamma == 0.5 && cfg.lr_warmup == 10);
    assert_string_equal(cfg.metrics, "m.jsonl");
    assert_int_equal(PARSE(&cfg, err, "--pipeline", "maybe"), PC_EUSAGE);
    assert_string_equal(err, "--pipeline: 'maybe' is not one of off|on");
    assert_int_equal(PARSE(&cfg, err, "--chunk-bytes", "16"), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--timeout", "0"), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--momentum", "1"), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--seed", "-1"), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--lr"), PC_EUSAGE);
    assert_string_equal(err, "--lr: missing value");
}

static void test_usage_and_print(void **state)
{
    (void)state;
    bench_opts_t b;
    pc_config_t cfg;
    char err[256];
    assert_int_equal(PARSE2(&b, &cfg, NULL, err, "--kind", "ps", "--servers", "3"), PC_OK);
    size_t n;
    const pc_flags_t *opts = pc_config_options(&n);
    pc_flags_group_t groups[] = {
        {"Runtime", opts, n, &cfg, NULL},
        {"Bench", bench_table, sizeof(bench_table) / sizeof(bench_table[0]), &b, NULL}};
    char buf[8192];
    FILE *f = fmemopen(buf, sizeof(buf), "w");
    assert_non_null(f);
    pc_flags_usage(groups, 2, f);
    pc_flags_print(groups, 2, "cfg ", f);
    fclose(f);
    assert_non_null(strstr(buf, "-s, --servers S"));
    assert_non_null(strstr(buf, "--help"));
    assert_non_null(strstr(buf, "cfg servers          = 3"));
    assert_non_null(strstr(buf, "cfg kind             = ps"));
    assert_non_null(strstr(buf, "cfg mode             = ps"));
    assert_non_null(strstr(buf, "cfg compress         = topk:ratio=0.01"));
    assert_non_null(strstr(buf, "cfg log-level        = info"));
}

/* cfg's effective configuration as pc-train prints it (pc_flags_print of the runtime's
 * group): a string the caller frees. */
static char *printed(pc_config_t *cfg)
{
    pc_flags_group_t group = pc_config_group(cfg, "Runtime");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    pc_flags_print(&group, 1, "", f);
    fclose(f);
    return buf;
}

/* The effective configuration reproduces its run: every double reads back as itself (%g
 * printed --lr 0.0123456789 as 0.0123457), short ones stay short, and a path longer than
 * 255 bytes is printed whole. */
static void test_print_round_trips(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[256], dir[700];
    memset(dir, 'd', sizeof(dir) - 1);
    dir[0] = '/';
    dir[sizeof(dir) - 1] = '\0';
    assert_int_equal(PARSE(&cfg, err, "--lr", "0.0123456789", "--momentum", "0.1", "--weight-decay",
                           "3.0000000000000004e-05", "--checkpoint-dir", dir),
                     PC_OK);
    char *buf = printed(&cfg);
    assert_non_null(strstr(buf, "\nlr               = 0.0123456789\n"));
    assert_non_null(strstr(buf, "\nmomentum         = 0.1\n"));
    assert_non_null(strstr(buf, "\nweight-decay     = 3.0000000000000004e-05\n"));
    char *at = strstr(buf, "\ncheckpoint-dir   = /");
    assert_non_null(at);
    assert_int_equal(strcspn(at + strlen("\ncheckpoint-dir   = "), "\n"), strlen(dir));
    free(buf);
}

/* pc_config_check, next to the flag table (tests/unit/test_runtime.c checks every
 * combination through pc_runtime_check_config, its 0.1 name): a command line's given flags
 * reach it, a refused combination is one line naming the flag, and the defaults that depend
 * on other flags are filled in. */
static void test_check_combinations(void **state)
{
    (void)state;
    char *twice[] = {"prog", "--momentum", "0.9", NULL};
    char *plain[] = {"prog", "--mode", "allreduce", NULL};
    char err[256];
    pc_config_t cfg;
    pc_config_defaults(&cfg);
    pc_flags_group_t g = pc_config_group(&cfg, "Runtime");
    assert_int_equal(pc_flags_parse(&g, 1, 3, twice, NULL, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_EUSAGE);
    assert_string_equal(err, "--momentum 0.9 with --compress topk applies momentum "
                             "twice (the codec's momentum correction, topk:momentum=0.9, runs "
                             "on the workers); drop --momentum, or set topk:momentum=0 to keep "
                             "it on the servers");
    pc_config_defaults(&cfg); /* nothing given: the servers' momentum becomes 0 */
    assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_OK);
    assert_true(cfg.momentum == 0);
    pc_config_defaults(&cfg);
    g = pc_config_group(&cfg, "Runtime");
    assert_int_equal(pc_flags_parse(&g, 1, 3, plain, NULL, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_config_check(&cfg, 1, err, sizeof(err)), PC_OK);
    assert_string_equal(cfg.compress, "none");
    assert_int_equal(cfg.servers, 0);
    assert_int_equal(pc_config_check(&cfg, 1, err, sizeof(err)), PC_OK); /* idempotent */
}

/* Parse argv as a program does (recording which flags were given), then pc_config_check
 * for a job of 3 ranks. */
static int parse_check(pc_config_t *cfg, int argc, char **argv, char *err, size_t errlen)
{
    pc_config_defaults(cfg);
    pc_flags_group_t g = pc_config_group(cfg, "Runtime");
    int rc = pc_flags_parse(&g, 1, argc, argv, NULL, err, errlen);
    return rc != PC_OK ? rc : pc_config_check(cfg, 3, err, errlen);
}
#define CHECK(cfg, err, ...) parse_check(cfg, ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), err, 256)

/* --compressors N|auto: the parser's values and one-line refusals, and the combinations
 * pc_config_check refuses (--pipeline off, --mode allreduce, device tensors). */
static void test_compressors(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[256];
    int n = -1;
    assert_int_equal(CHECK(&cfg, err, "--compressors", "4"), PC_OK);
    assert_int_equal(pc_config_compressors_parse(cfg.compressors, &n, err, sizeof(err)), PC_OK);
    assert_int_equal(n, 4);
    pc_config_defaults(&cfg);
    assert_int_equal(pc_config_compressors_parse(cfg.compressors, &n, err, sizeof(err)), PC_OK);
    assert_int_equal(n, 1); /* the default: one thread, as before */
    assert_int_equal(pc_config_compressors_parse("auto", &n, err, sizeof(err)), PC_OK);
    assert_int_equal(n, 0);
    assert_int_equal(pc_config_compressors_parse("64", &n, err, sizeof(err)), PC_OK);
    assert_int_equal(n, 64);
    const char *bad[] = {"0",  "-1", "-0",  "65",   "100000000000000000000", "x", "2x", "",
                         " 2", "+2", "2.0", "auto2"};
    const char *why[] = {"at least 1",   "at least 1", "at least 1", "more than 64",
                         "more than 64", "expected",   "expected",   "expected",
                         "expected",     "expected",   "expected",   "expected"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        n = -1;
        assert_int_equal(pc_config_compressors_parse(bad[i], &n, err, sizeof(err)), PC_EUSAGE);
        assert_int_equal(n, -1); /* untouched */
        assert_non_null(strstr(err, why[i]));
        assert_null(strchr(err, '\n'));
    }
    assert_int_equal(CHECK(&cfg, err, "--compressors", "0"), PC_EUSAGE);
    assert_string_equal(err, "--compressors: '0': a worker needs at least 1 compressor thread "
                             "(or auto)");
    assert_int_equal(CHECK(&cfg, err, "--compressors", "2", "--pipeline", "off"), PC_EUSAGE);
    assert_non_null(strstr(err, "needs --pipeline on"));
    assert_int_equal(CHECK(&cfg, err, "--compressors", "auto", "--pipeline", "off"), PC_EUSAGE);
    assert_int_equal(CHECK(&cfg, err, "--compressors", "1", "--pipeline", "off"), PC_OK);
    assert_int_equal(CHECK(&cfg, err, "--compressors", "3", "--mode", "allreduce"), PC_EUSAGE);
    assert_non_null(strstr(err, "--mode allreduce"));
    assert_int_equal(CHECK(&cfg, err, "--compressors", "2", "--device", "emulate"), PC_EUSAGE);
    assert_non_null(strstr(err, "host tensors"));
}

/* --optimizer sgd|adam|adamw, --betas, --eps, --amsgrad: defaults (sgd: everything as
 * before), values, and every refusal in one line naming the flag. */
static void test_optimizer_flags(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[256];
    assert_int_equal(CHECK(&cfg, err, "--compress", "none"), PC_OK);
    assert_int_equal(cfg.optimizer, PC_OPTIM_SGD);
    assert_string_equal(cfg.betas, "0.9,0.999");
    assert_true(cfg.eps == 1e-8 && cfg.amsgrad == 0 && cfg.momentum == 0.9);
    assert_int_equal(CHECK(&cfg, err, "--compress", "none", "--optimizer", "adamw", "--betas",
                           "0.8,0.99", "--eps", "1e-6", "--amsgrad", "--weight-decay", "0.01"),
                     PC_OK);
    assert_int_equal(cfg.optimizer, PC_OPTIM_ADAMW);
    assert_string_equal(cfg.betas, "0.8,0.99");
    assert_true(cfg.eps == 1e-6 && cfg.amsgrad == 1 && cfg.weight_decay == 0.01);
    assert_true(cfg.momentum == 0); /* SGD's default momentum does not apply */
    assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_OK); /* idempotent */
    assert_int_equal(CHECK(&cfg, err, "--mode", "allreduce", "--optimizer", "adam"), PC_OK);
    assert_int_equal(cfg.optimizer, PC_OPTIM_ADAM);
    /* torch's defaults where --lr and --weight-decay were not given: lr 0.001 for adam and
     * adamw, weight decay 0.01 for adamw only (SGD's lr 0.05 diverged a new user's AdamW);
     * given values, and a value set by hand that is not SGD's default, stay. */
    assert_true(cfg.lr == 0.001 && cfg.weight_decay == 0);
    assert_int_equal(CHECK(&cfg, err, "--compress", "none"), PC_OK);
    assert_true(cfg.lr == 0.05 && cfg.weight_decay == 0);
    assert_int_equal(CHECK(&cfg, err, "--compress", "none", "--optimizer", "adamw"), PC_OK);
    assert_true(cfg.lr == 0.001 && cfg.weight_decay == 0.01);
    assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_OK); /* idempotent */
    assert_true(cfg.lr == 0.001 && cfg.weight_decay == 0.01);
    assert_int_equal(CHECK(&cfg, err, "--compress", "none", "--optimizer", "adamw", "--lr", "0.05",
                           "--weight-decay", "0"),
                     PC_OK);
    assert_true(cfg.lr == 0.05 && cfg.weight_decay == 0);
    pc_config_defaults(&cfg);
    cfg.optimizer = PC_OPTIM_ADAMW;
    cfg.lr = 0.02;
    cfg.weight_decay = 0.1;
    assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_OK);
    assert_true(cfg.lr == 0.02 && cfg.weight_decay == 0.1);
    /* A codec without momentum correction is fine; the sparsifiers' default correction is
     * turned off (written into --compress, so that the printed configuration shows it);
     * one given in the spec is refused. A sparsifier's warm-up left at its default (none)
     * becomes PC_CONFIG_ADAM_WARMUP dense iterations; one given, 0 too, stays. */
    assert_int_equal(
        CHECK(&cfg, err, "--optimizer", "adam", "--compress", "topk:ratio=0.01,momentum=0"), PC_OK);
    assert_string_equal(cfg.compress, "topk:ratio=0.01,momentum=0,dense=1000");
    assert_true(cfg.adam_freeze_after == 1000);
    assert_int_equal(CHECK(&cfg, err, "--optimizer", "adam"), PC_OK);
    assert_string_equal(cfg.compress, "topk:ratio=0.01,momentum=0,dense=1000");
    assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_OK); /* idempotent */
    assert_string_equal(cfg.compress, "topk:ratio=0.01,momentum=0,dense=1000");
    assert_int_equal(CHECK(&cfg, err, "--optimizer", "adamw", "--compress", "dgc"), PC_OK);
    /* Top-k's and DGC's Adam default: every entry for the first 1000 iterations, then v
     * frozen (1-bit Adam's recipe); a density warm-up given freezes nothing. */
    assert_string_equal(cfg.compress, "dgc:momentum=0,dense=1000");
    assert_true(cfg.adam_freeze_after == 1000);
    assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_OK); /* idempotent */
    assert_true(cfg.adam_freeze_after == 1000);
    assert_string_equal(cfg.compress, "dgc:momentum=0,dense=1000");
    assert_int_equal(
        CHECK(&cfg, err, "--optimizer", "adamw", "--compress", "dgc", "--adam-freeze-after", "0"),
        PC_OK);
    assert_true(cfg.adam_freeze_after == 0); /* given: never */
    assert_int_equal(
        CHECK(&cfg, err, "--optimizer", "adamw", "--compress", "dgc", "--adam-freeze-after", "300"),
        PC_OK);
    assert_true(cfg.adam_freeze_after == 300);
    assert_int_equal(CHECK(&cfg, err, "--optimizer", "adamw", "--compress", "topk:dense=50"),
                     PC_OK);
    assert_true(cfg.adam_freeze_after == 50); /* a dense warm-up given: the same rule */
    assert_int_equal(CHECK(&cfg, err, "--optimizer", "adamw", "--compress", "topk:warmup=1000"),
                     PC_OK);
    assert_string_equal(cfg.compress, "topk:warmup=1000,momentum=0");
    assert_true(cfg.adam_freeze_after == 0); /* a density warm-up: v never frozen */
    assert_int_equal(
        CHECK(&cfg, err, "--optimizer", "adamw", "--compress", "dgc", "--update", "workers"),
        PC_OK);
    assert_string_equal(cfg.compress, "dgc:momentum=0,dense=1000");
    assert_true(cfg.adam_freeze_after == 0); /* the workers' step on the mean: no frozen v */
    assert_int_equal(CHECK(&cfg, err, "--optimizer", "adamw"), PC_OK);
    assert_true(cfg.adam_freeze_after == 1000); /* the default codec, top-k: the same */
    assert_non_null(strstr(cfg.compress, ",dense=1000"));
    assert_int_equal(CHECK(&cfg, err, "--optimizer", "adamw", "--compress", "none"), PC_OK);
    assert_true(cfg.adam_freeze_after == 0); /* nothing compressed: v never frozen */
    assert_int_equal(
        CHECK(&cfg, err, "--optimizer", "adamw", "--compress", "topk:warmup=0,momentum=0"), PC_OK);
    assert_string_equal(cfg.compress, "topk:warmup=0,momentum=0");
    assert_int_equal(CHECK(&cfg, err, "--optimizer", "adamw", "--compress", "dgc:warmup=50"),
                     PC_OK);
    assert_string_equal(cfg.compress, "dgc:warmup=50,momentum=0");
    assert_int_equal(CHECK(&cfg, err, "--optimizer", "adamw", "--compress", "dgc:dense=300"),
                     PC_OK);
    assert_string_equal(cfg.compress, "dgc:dense=300,momentum=0"); /* dense=: its own warm-up */
    assert_int_equal(CHECK(&cfg, err, "--optimizer", "adamw", "--compress", "powersgd:rank=2"),
                     PC_OK);
    assert_string_equal(cfg.compress, "powersgd:rank=2,warmup=1000"); /* dense iterations */
    assert_int_equal(CHECK(&cfg, err, "--compress", "powersgd:rank=2"), PC_OK);
    assert_string_equal(cfg.compress, "powersgd:rank=2"); /* sgd: none */
    assert_int_equal(CHECK(&cfg, err, "--optimizer", "adam", "--compress", "qsgd"), PC_OK);
    assert_string_equal(cfg.compress, "qsgd"); /* no momentum key: untouched */
    assert_int_equal(CHECK(&cfg, err, "--compress", "topk:ratio=0.01"), PC_OK);
    assert_string_equal(cfg.compress, "topk:ratio=0.01"); /* sgd: the correction stays */
    assert_int_equal(CHECK(&cfg, err, "--mode", "allreduce", "--optimizer", "adamw"), PC_OK);
    assert_string_equal(cfg.compress, "none"); /* nothing compressed, nothing warmed up */
    assert_int_equal(
        CHECK(&cfg, err, "--optimizer", "adam", "--compress", "topk:ratio=0.01,momentum=0.9"),
        PC_EUSAGE);
    assert_string_equal(err, "--optimizer adam with --compress topk:ratio=0.01,momentum=0.9: the "
                             "codec's momentum correction (topk:momentum=0.9) runs on the "
                             "workers and would feed momentum into Adam's moments; give "
                             "topk:momentum=0");
    /* --update workers with the runtime's SGD: the servers' plain step on the workers, so
     * the correction stays (default or given) and the servers' momentum is 0 as before;
     * with adamw there, off as on the servers. */
    assert_int_equal(CHECK(&cfg, err, "--update", "workers", "--compress", "randomk"), PC_OK);
    assert_string_equal(cfg.compress, "randomk");
    assert_true(cfg.momentum == 0);
    assert_int_equal(
        CHECK(&cfg, err, "--update", "workers", "--compress", "dgc:ratio=0.001,momentum=0.5"),
        PC_OK);
    assert_string_equal(cfg.compress, "dgc:ratio=0.001,momentum=0.5");
    assert_int_equal(
        CHECK(&cfg, err, "--update", "workers", "--optimizer", "adamw", "--compress", "topk"),
        PC_OK);
    assert_string_equal(cfg.compress, "topk:momentum=0,dense=1000");
    assert_true(cfg.adam_freeze_after == 0); /* the workers' step: no frozen v */
    /* No room left for the key: refused, not cut. */
    {
        pc_config_t full;
        pc_config_defaults(&full);
        char spec[PC_CONFIG_SPEC_LEN];
        int n = snprintf(spec, sizeof(spec), "topk:ratio=0.");
        memset(spec + n, '1', sizeof(spec) - (size_t)n - 1);
        spec[sizeof(spec) - 1] = '\0';
        snprintf(full.compress, sizeof(full.compress), "%s", spec);
        assert_int_equal(pc_config_codec_momentum_off(&full), PC_EUSAGE);
        assert_string_equal(full.compress, spec);
        assert_int_equal(pc_config_codec_adam_warmup(&full), PC_EUSAGE);
        assert_string_equal(full.compress, spec);
    }

    struct {
        const char *flag, *value, *msg;
    } bad[] = {
        {"--optimizer", "lamb", "--optimizer: 'lamb' is not one of sgd|adam|adamw"},
        {"--betas", "0.9", "--betas: '0.9': expected two numbers B1,B2 such as 0.9,0.999"},
        {"--betas", "0.9,1", "--betas: '0.9,1': beta 2 is 1; each beta must be in [0, 1)"},
        {"--betas", "-0.1,0.9", "--betas: '-0.1,0.9': beta 1 is -0.1; each beta must be in [0, 1)"},
        {"--betas", "0.9,0.99,0.9",
         "--betas: '0.9,0.99,0.9': expected two numbers B1,B2 such "
         "as 0.9,0.999"},
        {"--betas", "nan,0.9", "--betas: 'nan,0.9': beta 1 is nan; each beta must be in [0, 1)"},
        {"--betas", "0.9,x", "--betas: '0.9,x': expected two numbers B1,B2 such as 0.9,0.999"},
        {"--eps", "0", "--eps: 0: must be above 0 (Adam divides by sqrt(v) + eps)"},
        {"--eps", "-1e-8", "--eps: -1e-8 is out of range (0..1)"},
        {"--eps", "inf", "--eps: 'inf' is not a finite number"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *argv[] = {"prog",
                        "--compress",
                        "none",
                        "--optimizer",
                        "adam",
                        (char *)bad[i].flag,
                        (char *)bad[i].value,
                        NULL};
        assert_int_equal(parse_check(&cfg, 7, argv, err, sizeof(err)), PC_EUSAGE);
        assert_string_equal(err, bad[i].msg);
    }
    assert_int_equal(
        CHECK(&cfg, err, "--compress", "none", "--optimizer", "adam", "--momentum", "0.9"),
        PC_EUSAGE);
    assert_string_equal(err, "--momentum is SGD's: --optimizer adam keeps its own running mean "
                             "of the gradient (--betas B1,B2); drop it");
    assert_int_equal(CHECK(&cfg, err, "--compress", "none", "--optimizer", "adamw", "--nesterov"),
                     PC_EUSAGE);
    assert_string_equal(err, "--nesterov is SGD's: --optimizer adamw keeps its own running "
                             "mean of the gradient (--betas B1,B2); drop it");
    assert_int_equal(CHECK(&cfg, err, "--compress", "none", "--amsgrad"), PC_EUSAGE);
    assert_string_equal(err, "--amsgrad acts on --optimizer adam or adamw only (this run's is sgd; "
                             "give --optimizer adam or adamw too)");
    assert_int_equal(CHECK(&cfg, err, "--compress", "none", "--betas", "0.9,0.99"), PC_EUSAGE);
    assert_string_equal(err, "--betas acts on --optimizer adam or adamw only (this run's is sgd; "
                             "give --optimizer adam or adamw too)");
    assert_int_equal(CHECK(&cfg, err, "--compress", "none", "--eps", "1e-6"), PC_EUSAGE);
    assert_string_equal(err, "--eps acts on --optimizer adam or adamw only (this run's is sgd; "
                             "give --optimizer adam or adamw too)");

    /* A cfg filled by hand gets the same checks. */
    pc_config_defaults(&cfg);
    snprintf(cfg.compress, sizeof(cfg.compress), "none");
    cfg.optimizer = PC_OPTIM_ADAM;
    const double eps[] = {0, -1, INFINITY, NAN};
    for (size_t i = 0; i < sizeof(eps) / sizeof(eps[0]); i++) {
        cfg.eps = eps[i];
        assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_EUSAGE);
        assert_non_null(strstr(err, "--eps"));
    }
    cfg.eps = 1e-8;
    snprintf(cfg.betas, sizeof(cfg.betas), "1,0.5");
    assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_EUSAGE);
    assert_string_equal(err, "--betas: '1,0.5': beta 1 is 1; each beta must be in [0, 1)");
    snprintf(cfg.betas, sizeof(cfg.betas), "0.5,0.5");
    assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_OK);
}

/* --dilate K: default 1 (no dilation), any finite K from 1 to 1000; less than 1, not a
 * number or infinite refused in one line naming the flag, on the command line and by
 * pc_config_check for a cfg filled by hand; the effective configuration prints it. */
/* --update servers|workers: the default, and what pc_config_check refuses in one line. */
static void test_update(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[256];
    pc_config_defaults(&cfg);
    assert_int_equal(cfg.update, PC_UPDATE_SERVERS);
    assert_int_equal(PARSE(&cfg, err, "--update", "workers", "--optimizer", "adamw", "--compress",
                           "topk:ratio=0.01,momentum=0"),
                     PC_OK);
    assert_int_equal(cfg.update, PC_UPDATE_WORKERS);
    assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_OK);
    assert_int_equal(PARSE(&cfg, err, "--update", "both"), PC_EUSAGE);
    assert_string_equal(err, "--update: 'both' is not one of servers|workers");
    char *bad[][2] = {
        {"--mode", "allreduce"}, {"--compress", "powersgd:rank=2"}, {"--pull", "dense"}};
    const char *const why[] = {"--update workers has no effect with --mode allreduce",
                               "--update workers with --compress powersgd:rank=2: ",
                               "--pull has no effect with --update workers"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(PARSE(&cfg, err, "--update", "workers", bad[i][0], bad[i][1]), PC_OK);
        pc_config_set_given(&cfg, bad[i][0] + 2, 1); /* PARSE records no given flags */
        assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_EUSAGE);
        assert_non_null(strstr(err, why[i]));
        assert_null(strchr(err, '\n'));
    }
    pc_config_defaults(&cfg); /* a cfg filled by hand */
    cfg.update = 7;
    assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_EUSAGE);
    assert_string_equal(err, "--update 7: not one of servers|workers");
}

/* --clip-grad-norm MAX: off by default (0), a value above 0 taken; 0, negative, NaN, inf
 * and junk refused in one line naming the flag, on the command line and in a cfg filled by
 * hand; refused with --mode allreduce and --compress powersgd. */
static void test_clip_flag(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[256];
    assert_int_equal(CHECK(&cfg, err, "--compress", "none"), PC_OK);
    assert_true(cfg.clip_grad_norm == 0);
    assert_int_equal(CHECK(&cfg, err, "--compress", "none", "--clip-grad-norm", "0.5"), PC_OK);
    assert_true(cfg.clip_grad_norm == 0.5);
    assert_int_equal(CHECK(&cfg, err, "--clip-grad-norm=1e3", "--compress", "topk:ratio=0.01"),
                     PC_OK);
    assert_true(cfg.clip_grad_norm == 1e3);
    struct {
        const char *value, *msg;
    } bad[] = {
        {"0", "--clip-grad-norm: 0: the largest norm must be above 0 (leave the flag out for no "
              "clipping)"},
        {"-1", "--clip-grad-norm: -1: the largest norm must be above 0 (leave the flag out for no "
               "clipping)"},
        {"nan", "--clip-grad-norm: 'nan' is not a finite number"},
        {"inf", "--clip-grad-norm: 'inf' is not a finite number"},
        {"x", "--clip-grad-norm: 'x' is not a finite number"},
        {"", "--clip-grad-norm: '' is not a finite number"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *argv[] = {"prog", "--clip-grad-norm", (char *)bad[i].value, NULL};
        assert_int_equal(parse_check(&cfg, 3, argv, err, sizeof(err)), PC_EUSAGE);
        assert_string_equal(err, bad[i].msg);
    }
    assert_int_equal(CHECK(&cfg, err, "--mode", "allreduce", "--clip-grad-norm", "1"), PC_EUSAGE);
    assert_string_equal(err, "--clip-grad-norm needs --mode ps (the servers clip the averaged "
                             "gradient before their step); --mode allreduce does not clip");
    /* powersgd: its matrices' servers clip P^ Q^T's rows (pc_server.c) */
    assert_int_equal(CHECK(&cfg, err, "--compress", "powersgd", "--clip-grad-norm", "1"), PC_OK);
    const double hand[] = {-1, INFINITY, NAN};
    for (size_t i = 0; i < sizeof(hand) / sizeof(hand[0]); i++) {
        pc_config_defaults(&cfg);
        cfg.clip_grad_norm = hand[i];
        assert_int_equal(pc_config_check(&cfg, 2, err, sizeof(err)), PC_EUSAGE);
        assert_non_null(strstr(err, "--clip-grad-norm "));
        assert_null(strchr(err, '\n'));
    }
}

static void test_dilate(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[256];
    char *none[] = {"prog", NULL};
    assert_int_equal(parse_cfg(&cfg, 1, none, err), PC_OK);
    assert_true(cfg.dilate == 1);
    assert_int_equal(PARSE(&cfg, err, "--dilate", "3"), PC_OK);
    assert_true(cfg.dilate == 3);
    assert_int_equal(PARSE(&cfg, err, "--dilate=2.5"), PC_OK);
    assert_true(cfg.dilate == 2.5);
    assert_int_equal(PARSE(&cfg, err, "--dilate", "1"), PC_OK);
    assert_true(cfg.dilate == 1);
    assert_int_equal(PARSE(&cfg, err, "--dilate", "0.5"), PC_EUSAGE);
    assert_string_equal(err, "--dilate: 0.5 is out of range (1..1000)");
    assert_int_equal(PARSE(&cfg, err, "--dilate", "0"), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--dilate", "1001"), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--dilate", "inf"), PC_EUSAGE);
    assert_string_equal(err, "--dilate: 'inf' is not a finite number");
    assert_int_equal(PARSE(&cfg, err, "--dilate", "nan"), PC_EUSAGE);
    assert_string_equal(err, "--dilate: 'nan' is not a finite number");
    assert_int_equal(PARSE(&cfg, err, "--dilate", "1e400"), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--dilate", "x"), PC_EUSAGE);
    assert_int_equal(PARSE(&cfg, err, "--dilate"), PC_EUSAGE);
    assert_string_equal(err, "--dilate: missing value");

    /* A cfg filled by hand (a program, the Python binding) gets the same range. */
    const double bad[] = {0, 0.999, -1, 1001, INFINITY, NAN};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        pc_config_defaults(&cfg);
        cfg.dilate = bad[i];
        assert_int_equal(pc_config_check(&cfg, 2, err, sizeof(err)), PC_EUSAGE);
        assert_non_null(strstr(err, "--dilate"));
        assert_null(strchr(err, '\n'));
    }
    pc_config_defaults(&cfg);
    cfg.dilate = 1000;
    assert_int_equal(pc_config_check(&cfg, 2, err, sizeof(err)), PC_OK);

    /* The effective configuration shows it (pc-train prints this). */
    assert_int_equal(PARSE(&cfg, err, "--dilate", "4"), PC_OK);
    char *buf = printed(&cfg);
    assert_non_null(strstr(buf, "\ndilate           = 4\n"));
    free(buf);
}

/* --adam-moments dense|lazy and --adam-freeze-after N: defaults, values into the
 * optimizer's configuration, and every refusal in one line naming the flag. */
static void test_adam_variant_flags(void **state)
{
    (void)state;
    pc_config_t cfg;
    pc_optim_cfg_t o;
    char err[256];
    assert_int_equal(CHECK(&cfg, err, "--compress", "none", "--optimizer", "adamw"), PC_OK);
    assert_int_equal(cfg.adam_moments, PC_ADAM_MOMENTS_DENSE);
    assert_true(cfg.adam_freeze_after == 0);
    pc_config_optim(&cfg, &o);
    assert_true(!o.lazy && o.freeze_after == 0);
    assert_int_equal(CHECK(&cfg, err, "--compress", "topk:ratio=0.01,momentum=0", "--optimizer",
                           "adam", "--adam-moments", "lazy", "--adam-freeze-after", "100"),
                     PC_OK);
    pc_config_optim(&cfg, &o);
    assert_true(o.lazy && o.freeze_after == 100 && pc_optim_lazy(&o));
    /* A dense codec takes lazy (its aggregate steps densely either way). */
    assert_int_equal(
        CHECK(&cfg, err, "--compress", "none", "--optimizer", "adam", "--adam-moments", "lazy"),
        PC_OK);
    struct {
        const char *a, *b, *c, *d, *msg;
    } bad[] = {
        {"--adam-moments", "sparse", "--optimizer", "adam",
         "--adam-moments: 'sparse' is not one of auto|dense|lazy"},
        {"--adam-freeze-after", "-1", "--optimizer", "adam",
         "--adam-freeze-after: -1 is out of range (0..1000000000000)"},
        {"--adam-freeze-after", "1.5", "--optimizer", "adam",
         "--adam-freeze-after: '1.5' is not an integer"},
        {"--adam-freeze-after", "x", "--optimizer", "adamw",
         "--adam-freeze-after: 'x' is not an integer"},
        {"--adam-moments", "lazy", "--optimizer", "sgd",
         "--adam-moments acts on --optimizer adam or adamw only (this run's is sgd; give "
         "--optimizer adam or adamw too)"},
        {"--adam-moments", "dense", "--momentum", "0.9",
         "--adam-moments acts on --optimizer adam or adamw only (this run's is sgd; give "
         "--optimizer adam or adamw too)"},
        {"--adam-freeze-after", "5", "--momentum", "0.9",
         "--adam-freeze-after acts on --optimizer adam or adamw only (this run's is sgd; give "
         "--optimizer adam or adamw too)"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *argv[] = {"prog",           "--compress",     "none",           (char *)bad[i].a,
                        (char *)bad[i].b, (char *)bad[i].c, (char *)bad[i].d, NULL};
        assert_int_equal(parse_check(&cfg, 7, argv, err, sizeof(err)), PC_EUSAGE);
        assert_string_equal(err, bad[i].msg);
    }
    assert_int_equal(
        CHECK(&cfg, err, "--mode", "allreduce", "--optimizer", "adam", "--adam-moments", "lazy"),
        PC_EUSAGE);
    assert_string_equal(err, "--adam-moments lazy has no effect with --mode allreduce (every "
                             "worker steps on the dense mean gradient; only the servers' step "
                             "sees which entries arrived); drop it");
    assert_int_equal(CHECK(&cfg, err, "--compress", "none", "--update", "workers", "--optimizer",
                           "adam", "--adam-moments", "lazy"),
                     PC_EUSAGE);
    assert_string_equal(err, "--adam-moments lazy has no effect with --update workers (every "
                             "worker steps on the dense mean gradient; only the servers' step "
                             "sees which entries arrived); drop it");
    /* --adam-freeze-after is any step's: allreduce and --update workers take it. */
    assert_int_equal(
        CHECK(&cfg, err, "--mode", "allreduce", "--optimizer", "adam", "--adam-freeze-after", "3"),
        PC_OK);
    /* A cfg filled by hand gets the same checks. */
    pc_config_defaults(&cfg);
    snprintf(cfg.compress, sizeof(cfg.compress), "none");
    cfg.optimizer = PC_OPTIM_ADAM;
    cfg.adam_freeze_after = -2;
    assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_EUSAGE);
    assert_string_equal(err, "--adam-freeze-after -2: must be a whole number >= 0 (0: never)");
    cfg.adam_freeze_after = 0;
    cfg.adam_moments = 7;
    assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_EUSAGE);
    assert_string_equal(err, "--adam-moments 7: not one of auto|dense|lazy");
}

/* --adam-moments auto (the default): the codec's choice (pc_config_adam_moments), lazy for
 * topk stepped by Adam or AdamW on the servers, dense for the other codecs and placements;
 * dense or lazy given wins; the parameter groups' optimizer (a cfg whose --optimizer is sgd)
 * gets the same rule. */
static void test_adam_moments_default(void **state)
{
    (void)state;
    pc_config_t cfg;
    pc_optim_cfg_t o;
    char err[256];
    assert_int_equal(CHECK(&cfg, err, "--optimizer", "adamw"), PC_OK); /* topk 1 % */
    assert_int_equal(cfg.adam_moments, PC_ADAM_MOMENTS_LAZY);
    pc_config_optim(&cfg, &o);
    assert_true(o.lazy && pc_optim_lazy(&o));
    assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_OK); /* idempotent */
    assert_int_equal(cfg.adam_moments, PC_ADAM_MOMENTS_LAZY);
    assert_int_equal(CHECK(&cfg, err, "--optimizer", "adam", "--adam-moments", "dense"), PC_OK);
    assert_int_equal(cfg.adam_moments, PC_ADAM_MOMENTS_DENSE);
    assert_int_equal(CHECK(&cfg, err, "--optimizer", "adam", "--adam-moments", "auto"), PC_OK);
    assert_int_equal(cfg.adam_moments, PC_ADAM_MOMENTS_LAZY);
    /* auto with sgd: the default, no refusal; nothing resolved (no moments) */
    assert_int_equal(CHECK(&cfg, err, "--adam-moments", "auto"), PC_OK);
    assert_int_equal(cfg.adam_moments, PC_ADAM_MOMENTS_AUTO);
    char *dense[][4] = {
        {"--compress", "dgc:ratio=0.001", "--optimizer", "adamw"},
        {"--compress", "powersgd:rank=4", "--optimizer", "adamw"},
        {"--compress", "randomk:ratio=0.01", "--optimizer", "adam"},
        {"--update", "workers", "--optimizer", "adamw"},
    };
    for (size_t i = 0; i < sizeof(dense) / sizeof(dense[0]); i++) {
        assert_int_equal(CHECK(&cfg, err, dense[i][0], dense[i][1], dense[i][2], dense[i][3]),
                         PC_OK);
        assert_int_equal(cfg.adam_moments, PC_ADAM_MOMENTS_DENSE);
    }
    assert_int_equal(CHECK(&cfg, err, "--mode", "allreduce", "--optimizer", "adamw"), PC_OK);
    assert_int_equal(cfg.adam_moments, PC_ADAM_MOMENTS_DENSE);
    /* The groups' optimizer on a run whose flags say sgd. */
    assert_int_equal(CHECK(&cfg, err, "--compress", "topk:ratio=0.01,momentum=0"), PC_OK);
    assert_int_equal(cfg.adam_moments, PC_ADAM_MOMENTS_AUTO);
    assert_int_equal(pc_config_adam_moments(&cfg, PC_OPTIM_ADAMW), PC_ADAM_MOMENTS_LAZY);
    assert_int_equal(pc_config_adam_moments(&cfg, PC_OPTIM_ADAM), PC_ADAM_MOMENTS_LAZY);
    assert_int_equal(pc_config_adam_moments(&cfg, PC_OPTIM_SGD), PC_ADAM_MOMENTS_DENSE);
    assert_string_equal(pc_config_adam_moments_name(PC_ADAM_MOMENTS_LAZY), "lazy");
    assert_string_equal(pc_config_adam_moments_name(PC_ADAM_MOMENTS_DENSE), "dense");
    assert_string_equal(pc_config_adam_moments_name(PC_ADAM_MOMENTS_AUTO), "auto");
    assert_string_equal(pc_config_adam_moments_name(9), "?");
    /* Set by hand without the parser: lazy stays lazy (and a zeroed cfg's 0 is auto). */
    assert_int_equal(PC_ADAM_MOMENTS_AUTO, 0);
    pc_config_defaults(&cfg);
    cfg.optimizer = PC_OPTIM_ADAMW;
    snprintf(cfg.compress, sizeof(cfg.compress), "dgc:ratio=0.001");
    cfg.adam_moments = PC_ADAM_MOMENTS_LAZY;
    assert_int_equal(pc_config_check(&cfg, 3, err, sizeof(err)), PC_OK);
    assert_int_equal(cfg.adam_moments, PC_ADAM_MOMENTS_LAZY);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_print_round_trips),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_servers),
        cmocka_unit_test(test_bind),
        cmocka_unit_test(test_device_flags),
        cmocka_unit_test(test_log_level),
        cmocka_unit_test(test_unknown_help_version_operands),
        cmocka_unit_test(test_every_type),
        cmocka_unit_test(test_operands),
        cmocka_unit_test(test_opt_finish),
        cmocka_unit_test(test_duplicate_names),
        cmocka_unit_test(test_runtime_flags),
        cmocka_unit_test(test_usage_and_print),
        cmocka_unit_test(test_check_combinations),
        cmocka_unit_test(test_dilate),
        cmocka_unit_test(test_clip_flag),
        cmocka_unit_test(test_update),
        cmocka_unit_test(test_optimizer_flags),
        cmocka_unit_test(test_adam_variant_flags),
        cmocka_unit_test(test_adam_moments_default),
        cmocka_unit_test(test_compressors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
