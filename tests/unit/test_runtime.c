/* test_runtime: the runtime's pure parts: flag combinations (pc_runtime_check_config) and
 * pull messages (dense and sparse encodings, and rejection of malformed ones without
 * writing). The MPI behaviour is tested by tests/mpi/test_runtime.sh. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_runtime.h"
#include "runtime_proto.h"

static void test_check_config(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[256];
    pc_config_defaults(&cfg);
    assert_int_equal(pc_runtime_check_config(&cfg, 3, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_runtime_check_config(&cfg, 1, err, sizeof(err)), PC_EUSAGE);
    assert_non_null(strstr(err, "--mode ps needs at least 2 ranks"));
    cfg.servers = 3;
    assert_int_equal(pc_runtime_check_config(&cfg, 3, err, sizeof(err)), PC_EUSAGE);
    assert_string_equal(err, "--servers 3 leaves no worker among 3 ranks");
    cfg.mode = PC_MODE_ALLREDUCE; /* servers unused */
    assert_int_equal(pc_runtime_check_config(&cfg, 1, err, sizeof(err)), PC_OK);
    pc_config_defaults(&cfg);
    snprintf(cfg.compress, sizeof(cfg.compress), "topk:ratio=2");
    assert_int_equal(pc_runtime_check_config(&cfg, 3, err, sizeof(err)), PC_EUSAGE);
    assert_string_equal(err, "--compress: topk: ratio=2 is out of range (0, 1] (0 would send nothing)");
    pc_config_defaults(&cfg);
    cfg.lr_schedule = PC_LR_COSINE;
    assert_int_equal(pc_runtime_check_config(&cfg, 3, err, sizeof(err)), PC_EUSAGE);
    assert_string_equal(err, "--lr-schedule cosine needs the run's length: --iters N");
    pc_config_defaults(&cfg);
    cfg.resume = 1;
    assert_int_equal(pc_runtime_check_config(&cfg, 3, err, sizeof(err)), PC_EUSAGE);
    assert_string_equal(err, "--resume needs --checkpoint-dir DIR");
    cfg.resume = 0;
    cfg.checkpoint_every = 100;
    assert_int_equal(pc_runtime_check_config(&cfg, 3, err, sizeof(err)), PC_EUSAGE);
    assert_string_equal(err, "--checkpoint-every needs --checkpoint-dir DIR");
    snprintf(cfg.checkpoint_dir, sizeof(cfg.checkpoint_dir), "ck");
    assert_int_equal(pc_runtime_check_config(&cfg, 3, err, sizeof(err)), PC_OK);
}

/* Parse a command line (NULL-terminated words after the program name) into cfg through
 * pc_config_group, then check it for world ranks. */
static int parse_check(pc_config_t *cfg, int world, char *err, size_t errlen, ...)
{
    char *argv[32] = {"prog"};
    int argc = 1;
    va_list ap;
    va_start(ap, errlen);
    for (char *a; (a = va_arg(ap, char *)) != NULL && argc < 31;)
        argv[argc++] = a;
    va_end(ap);
    pc_config_defaults(cfg);
    pc_opt_group_t g = pc_config_group(cfg, "Runtime");
    int rc = pc_opt_parse(&g, 1, argc, argv, NULL, err, errlen);
    return rc != PC_OK ? rc : pc_runtime_check_config(cfg, world, err, errlen);
}

/* Flags that contradict each other are refused; defaults that depend on other flags are
 * filled in, so that the printed configuration is what runs. */
static void test_check_config_combinations(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[512];
    /* DGC: momentum correction on the workers, plain SGD on the servers by default. */
    assert_int_equal(parse_check(&cfg, 4, err, sizeof(err), "--servers", "2", "--compress",
                                 "dgc:ratio=0.001", NULL),
                     PC_OK);
    assert_true(cfg.momentum == 0.0);
    assert_true(pc_config_given(&cfg, "compress") && pc_config_given(&cfg, "servers"));
    assert_false(pc_config_given(&cfg, "momentum"));
    assert_int_equal(parse_check(&cfg, 3, err, sizeof(err), "--compress", "dgc", "--momentum",
                                 "0.9", NULL),
                     PC_EUSAGE);
    assert_string_equal(err, "--momentum 0.9 with --compress dgc applies momentum twice (DGC's "
                             "momentum correction, dgc:momentum=0.9, runs on the workers); drop "
                             "--momentum, or set dgc:momentum=0 to keep it on the servers");
    assert_int_equal(parse_check(&cfg, 3, err, sizeof(err), "--compress", "dgc:momentum=0",
                                 "--momentum", "0.9", NULL),
                     PC_OK);
    assert_true(cfg.momentum == 0.9);
    assert_int_equal(parse_check(&cfg, 3, err, sizeof(err), "--compress", "dgc", "--momentum", "0",
                                 NULL),
                     PC_OK);
    /* Other codecs keep the servers' momentum. */
    assert_int_equal(parse_check(&cfg, 3, err, sizeof(err), "--compress", "topk:ratio=0.01", NULL),
                     PC_OK);
    assert_true(cfg.momentum == 0.9);
    /* Allreduce: no codec, no servers. */
    assert_int_equal(parse_check(&cfg, 2, err, sizeof(err), "--mode", "allreduce", "--compress",
                                 "dgc:ratio=0.01", NULL),
                     PC_EUSAGE);
    assert_string_equal(err, "--compress dgc:ratio=0.01 has no effect with --mode allreduce (a dense "
                             "MPI_Allreduce of every gradient); drop one of the two");
    assert_int_equal(parse_check(&cfg, 2, err, sizeof(err), "--mode", "allreduce", "--servers", "1",
                                 NULL),
                     PC_EUSAGE);
    assert_non_null(strstr(err, "--servers 1 has no effect with --mode allreduce"));
    assert_int_equal(parse_check(&cfg, 1, err, sizeof(err), "--mode", "allreduce", NULL), PC_OK);
    assert_string_equal(cfg.compress, "none");
    assert_int_equal(cfg.servers, 0);
    assert_int_equal(parse_check(&cfg, 2, err, sizeof(err), "--mode", "allreduce", "--compress",
                                 "none", NULL),
                     PC_OK);
    /* Idempotent: a checked configuration checks again unchanged. */
    pc_config_t again = cfg;
    assert_int_equal(pc_runtime_check_config(&again, 2, err, sizeof(err)), PC_OK);
    assert_memory_equal(&again, &cfg, sizeof(cfg));
    /* A ratio of 0 sends nothing: refused. */
    assert_int_equal(parse_check(&cfg, 3, err, sizeof(err), "--compress", "topk:ratio=0", NULL),
                     PC_EUSAGE);
    assert_string_equal(err, "--compress: topk: ratio=0 is out of range (0, 1] (0 would send nothing)");
}

static void test_pull_round_trips(void **state)
{
    (void)state;
    enum { N = 100 };
    float p[N], q[N];
    for (int i = 0; i < N; i++)
        p[i] = 0.5f * (float)i - 7.0f;
    uint32_t changed[N] = {3, 17, 99};
    uint8_t buf[PC_WIRE_HEADER_BYTES + 4 * N];
    char err[256];
    /* auto: 3 changed of 100 -> sparse; the old values elsewhere stay. */
    size_t len = pull_encode(buf, 5, 9, p, N, changed, 3, PC_PULL_AUTO);
    assert_int_equal(len, PC_WIRE_HEADER_BYTES + 24);
    for (int i = 0; i < N; i++)
        q[i] = -1;
    assert_int_equal(pull_apply(buf, len, 5, 9, q, N, err, sizeof(err)), PC_OK);
    for (int i = 0; i < N; i++)
        assert_true(q[i] == ((i == 3 || i == 17 || i == 99) ? p[i] : -1.0f));
    /* dense always, and auto with many changes. */
    len = pull_encode(buf, 5, 9, p, N, changed, 3, PC_PULL_DENSE);
    assert_int_equal(len, PC_WIRE_HEADER_BYTES + 4 * N);
    assert_int_equal(pull_apply(buf, len, 5, 9, q, N, err, sizeof(err)), PC_OK);
    assert_memory_equal(p, q, sizeof(p));
    for (int i = 0; i < N; i++)
        changed[i] = (uint32_t)i;
    assert_int_equal(pull_encode(buf, 5, 9, p, N, changed, 40, PC_PULL_AUTO),
                     PC_WIRE_HEADER_BYTES + 4 * N); /* 40% changed: dense pays */
    assert_int_equal(pull_encode(buf, 5, 9, p, N, changed, 40, PC_PULL_SPARSE),
                     PC_WIRE_HEADER_BYTES + 8 * 40);
}

static void expect_bad(uint8_t *buf, size_t len, uint32_t chunk, uint64_t it, const char *needle)
{
    float q[100];
    for (int i = 0; i < 100; i++)
        q[i] = 1.5f;
    char err[256] = "";
    assert_int_equal(pull_apply(buf, len, chunk, it, q, 100, err, sizeof(err)), PC_EFORMAT);
    if (needle && !strstr(err, needle))
        fail_msg("\"%s\" lacks \"%s\"", err, needle);
    for (int i = 0; i < 100; i++)
        assert_true(q[i] == 1.5f);
}

static void test_pull_rejections(void **state)
{
    (void)state;
    float p[100];
    for (int i = 0; i < 100; i++)
        p[i] = (float)i;
    uint32_t changed[3] = {3, 17, 99};
    uint8_t buf[PC_WIRE_HEADER_BYTES + 400], bad[PC_WIRE_HEADER_BYTES + 400];
    size_t len = pull_encode(buf, 5, 9, p, 100, changed, 3, PC_PULL_SPARSE);
    expect_bad(buf, len, 6, 9, "expected");      /* wrong chunk */
    expect_bad(buf, len, 5, 8, "expected");      /* wrong iteration */
    expect_bad(buf, len - 1, 5, 9, "payload");   /* truncated */
    memcpy(bad, buf, len);
    pc_wire_put_u32(bad + PC_WIRE_HEADER_BYTES + 4, 200);
    expect_bad(bad, len, 5, 9, "out of range");
    memcpy(bad, buf, len);
    pc_wire_put_u32(bad + PC_WIRE_HEADER_BYTES + 4, 3);
    expect_bad(bad, len, 5, 9, "out of order");
    memcpy(bad, buf, len);
    pc_wire_put_u32(bad + PC_WIRE_HEADER_BYTES + 12, 0x7fc00000u);
    expect_bad(bad, len, 5, 9, "not finite");
    memcpy(bad, buf, len);
    bad[5] = 3; /* a gradient codec id */
    expect_bad(bad, len, 5, 9, "codec");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_config),
        cmocka_unit_test(test_check_config_combinations),
        cmocka_unit_test(test_pull_round_trips),
        cmocka_unit_test(test_pull_rejections),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
