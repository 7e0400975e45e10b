/* test_runtime: the runtime's pure parts: flag combinations (pc_runtime_check_config) and
 * every runtime message (runtime_proto: layout, init, gradient, pull dense and sparse,
 * done, checkpoint request, parameter groups, learning rates): byte layout, round trips, and
 * rejection of malformed ones without writing; the order of the worker's chunk queue (--priority).
 * The MPI behaviour is tested by tests/mpi/test_runtime.sh. */
#include <math.h>
#include <stdlib.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_auto.h"
#include "pipecompress/pc_codec.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_plan.h"
#include "pipecompress/pc_optim.h"
#include "pipecompress/pc_runtime.h"
#include "runtime/runtime_impl.h"
#include "runtime/runtime_proto.h"

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
    assert_string_equal(err,
                        "--compress: topk: ratio=2 is out of range (0, 1] (0 would send nothing)");
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

/* Flags that the resolved configuration would ignore are refused, each with its reason;
 * the same flags where they act pass. */
static int parse_check(pc_config_t *cfg, int world, char *err, size_t errlen, ...);

static void test_check_config_no_effect(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[512];
    struct {
        const char *words[8];
        const char *needle; /* NULL: accepted */
    } cases[] = {
        /* --nesterov: the default top-k's momentum is the workers' correction. */
        {{"--nesterov"},
         "--nesterov has no effect with --compress topk:ratio=0.01: its momentum "
         "is the workers' momentum correction (topk:momentum=0.9)"},
        {{"--nesterov", "--compress", "dgc:ratio=0.01"}, "--compress dgc:ratio=0.01"},
        {{"--nesterov", "--compress", "none", "--momentum", "0"},
         "--nesterov needs momentum: --momentum M above 0"},
        {{"--nesterov", "--mode", "allreduce", "--momentum", "0"}, "--nesterov needs momentum"},
        {{"--nesterov", "--compress", "topk:momentum=0", "--momentum", "0.9"}, NULL},
        {{"--nesterov", "--compress", "none"}, NULL},
        {{"--nesterov", "--mode", "allreduce"}, NULL},
        /* The step schedule's flags. */
        {{"--lr-step", "100"},
         "--lr-step acts on --lr-schedule step only (this run's is constant)"},
        {{"--lr-gamma", "0.5", "--lr-schedule", "cosine", "--iters", "10"},
         "--lr-gamma acts on --lr-schedule step only (this run's is cosine)"},
        {{"--lr-schedule", "step", "--lr-step", "100", "--lr-gamma", "0.5"}, NULL},
        /* Checkpoint retention without checkpoints. */
        {{"--checkpoint-keep", "3"}, "--checkpoint-keep needs --checkpoint-dir DIR"},
        {{"--checkpoint-keep", "3", "--checkpoint-dir", "ck"}, NULL},
        /* What only servers and codecs read. */
        {{"--mode", "allreduce", "--pull", "sparse"}, "--pull has no effect with --mode allreduce"},
        {{"--mode", "allreduce", "--compress-min-bytes", "0"},
         "--compress-min-bytes has no effect with --mode allreduce"},
        {{"--compress", "none", "--compress-min-bytes", "1M"},
         "--compress-min-bytes has no effect with --compress none"},
        {{"--pull", "sparse", "--compress-min-bytes", "1M"}, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *const *w = cases[i].words;
        int rc = parse_check(&cfg, 3, err, sizeof(err), w[0], w[1], w[2], w[3], w[4], w[5], w[6],
                             w[7], NULL);
        if (!cases[i].needle) {
            if (rc != PC_OK)
                fail_msg("case %zu (%s ...): refused: %s", i, w[0], err);
        } else if (rc != PC_EUSAGE || !strstr(err, cases[i].needle)) {
            fail_msg("case %zu (%s ...): status %d, \"%s\" lacks \"%s\"", i, w[0], rc,
                     rc == PC_OK ? "" : err, cases[i].needle);
        }
    }
}

/* Parse a command line (the NULL-terminated words ap, after the program name) into cfg
 * through pc_config_group. */
static int parse_words(pc_config_t *cfg, char *err, size_t errlen, va_list ap)
{
    char *argv[32] = {"prog"};
    int argc = 1;
    for (char *a; (a = va_arg(ap, char *)) != NULL && argc < 31;)
        argv[argc++] = a;
    pc_config_defaults(cfg);
    pc_flags_group_t g = pc_config_group(cfg, "Runtime");
    return pc_flags_parse(&g, 1, argc, argv, NULL, err, errlen);
}

/* Parse the NULL-terminated words into cfg, then check it for world ranks. */
static int parse_check(pc_config_t *cfg, int world, char *err, size_t errlen, ...)
{
    va_list ap;
    va_start(ap, errlen);
    int rc = parse_words(cfg, err, errlen, ap);
    va_end(ap);
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
    assert_int_equal(
        parse_check(&cfg, 3, err, sizeof(err), "--compress", "dgc", "--momentum", "0.9", NULL),
        PC_EUSAGE);
    assert_string_equal(err, "--momentum 0.9 with --compress dgc applies momentum twice (the "
                             "codec's momentum correction, dgc:momentum=0.9, runs on the "
                             "workers); drop --momentum, or set dgc:momentum=0 to keep it on the "
                             "servers");
    assert_int_equal(parse_check(&cfg, 3, err, sizeof(err), "--compress", "dgc:momentum=0",
                                 "--momentum", "0.9", NULL),
                     PC_OK);
    assert_true(cfg.momentum == 0.9);
    assert_int_equal(
        parse_check(&cfg, 3, err, sizeof(err), "--compress", "dgc", "--momentum", "0", NULL),
        PC_OK);
    /* topk and randomk: momentum on the workers by default too, the same rule. */
    assert_int_equal(parse_check(&cfg, 3, err, sizeof(err), "--compress", "topk:ratio=0.01", NULL),
                     PC_OK);
    assert_true(cfg.momentum == 0.0);
    assert_int_equal(parse_check(&cfg, 3, err, sizeof(err), "--compress", "randomk", NULL), PC_OK);
    assert_true(cfg.momentum == 0.0);
    assert_int_equal(parse_check(&cfg, 3, err, sizeof(err), "--compress", "topk:ratio=0.01",
                                 "--momentum", "0.9", NULL),
                     PC_EUSAGE);
    assert_string_equal(err, "--momentum 0.9 with --compress topk applies momentum twice (the "
                             "codec's momentum correction, topk:momentum=0.9, runs on the "
                             "workers); drop --momentum, or set topk:momentum=0 to keep it on "
                             "the servers");
    assert_int_equal(parse_check(&cfg, 3, err, sizeof(err), "--compress", "randomk:momentum=0.5",
                                 "--momentum", "0.8", NULL),
                     PC_EUSAGE);
    assert_string_equal(err, "--momentum 0.8 with --compress randomk applies momentum twice (the "
                             "codec's momentum correction, randomk:momentum=0.5, runs on the "
                             "workers); drop --momentum, or set randomk:momentum=0 to keep it on "
                             "the servers");
    /* Server-side momentum stays available: momentum=0 on the codec. */
    assert_int_equal(parse_check(&cfg, 3, err, sizeof(err), "--compress",
                                 "topk:ratio=0.01,momentum=0", "--momentum", "0.9", NULL),
                     PC_OK);
    assert_true(cfg.momentum == 0.9);
    assert_int_equal(
        parse_check(&cfg, 3, err, sizeof(err), "--compress", "topk:ratio=0.01,momentum=0", NULL),
        PC_OK);
    assert_true(cfg.momentum == 0.9);
    assert_int_equal(parse_check(&cfg, 3, err, sizeof(err), "--compress", "topk:ef=off", NULL),
                     PC_OK);
    assert_true(cfg.momentum == 0.9); /* no residual, no worker momentum */
    /* Codecs without a momentum correction keep the servers' momentum. */
    assert_int_equal(parse_check(&cfg, 3, err, sizeof(err), "--compress", "threshold", NULL),
                     PC_OK);
    assert_true(cfg.momentum == 0.9);
    assert_int_equal(parse_check(&cfg, 3, err, sizeof(err), "--compress", "qsgd", NULL), PC_OK);
    assert_true(cfg.momentum == 0.9);
    /* Allreduce: no codec, no servers. */
    assert_int_equal(parse_check(&cfg, 2, err, sizeof(err), "--mode", "allreduce", "--compress",
                                 "dgc:ratio=0.01", NULL),
                     PC_EUSAGE);
    assert_string_equal(err,
                        "--compress dgc:ratio=0.01 has no effect with --mode allreduce (a dense "
                        "MPI_Allreduce of every gradient); drop one of the two");
    assert_int_equal(
        parse_check(&cfg, 2, err, sizeof(err), "--mode", "allreduce", "--servers", "1", NULL),
        PC_EUSAGE);
    assert_non_null(strstr(err, "--servers 1 has no effect with --mode allreduce"));
    assert_int_equal(parse_check(&cfg, 1, err, sizeof(err), "--mode", "allreduce", NULL), PC_OK);
    assert_string_equal(cfg.compress, "none");
    assert_int_equal(cfg.servers, 0);
    assert_int_equal(
        parse_check(&cfg, 2, err, sizeof(err), "--mode", "allreduce", "--compress", "none", NULL),
        PC_OK);
    /* Idempotent: a checked configuration checks again unchanged. */
    pc_config_t again = cfg;
    assert_int_equal(pc_runtime_check_config(&again, 2, err, sizeof(err)), PC_OK);
    assert_memory_equal(&again, &cfg, sizeof(cfg));
    /* A ratio of 0 sends nothing: refused. */
    assert_int_equal(parse_check(&cfg, 3, err, sizeof(err), "--compress", "topk:ratio=0", NULL),
                     PC_EUSAGE);
    assert_string_equal(err,
                        "--compress: topk: ratio=0 is out of range (0, 1] (0 would send nothing)");
}

static void test_pull_round_trips(void **state)
{
    (void)state;
    enum { N = 100 };
    float p[N], q[N];
    for (int i = 0; i < N; i++)
        p[i] = 0.5f * (float)i - 7.0f;
    uint32_t changed[N] = {3, 17, 99};
    uint8_t buf[PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES + 4 * N];
    char err[256];
    const size_t T = PC_RT_PULL_TIME_BYTES;
    uint64_t sns = 0;
    /* auto: 3 changed of 100 -> sparse; the old values elsewhere stay; the server's time
     * comes back. */
    size_t len = pc_rt__pull_encode(buf, 5, 9, p, N, changed, 3, PC_PULL_AUTO, 123456789);
    assert_int_equal(len, PC_WIRE_HEADER_BYTES + T + 24);
    for (int i = 0; i < N; i++)
        q[i] = -1;
    assert_int_equal(pc_rt__pull_apply(buf, len, 5, 9, q, N, &sns, err, sizeof(err)), PC_OK);
    assert_true(sns == 123456789);
    for (int i = 0; i < N; i++)
        assert_true(q[i] == ((i == 3 || i == 17 || i == 99) ? p[i] : -1.0f));
    /* dense always, and auto with many changes; a server time over the bound is clamped
     * by the encoder (and accepted at the bound). */
    len = pc_rt__pull_encode(buf, 5, 9, p, N, changed, 3, PC_PULL_DENSE, UINT64_MAX);
    assert_int_equal(len, PC_WIRE_HEADER_BYTES + T + 4 * N);
    assert_int_equal(pc_rt__pull_apply(buf, len, 5, 9, q, N, &sns, err, sizeof(err)), PC_OK);
    assert_true(sns == PC_RT_PULL_MAX_SERVER_NS);
    assert_memory_equal(p, q, sizeof(p));
    for (int i = 0; i < N; i++)
        changed[i] = (uint32_t)i;
    assert_int_equal(pc_rt__pull_encode(buf, 5, 9, p, N, changed, 40, PC_PULL_AUTO, 0),
                     PC_WIRE_HEADER_BYTES + T + 4 * N); /* 40% changed: dense pays */
    assert_int_equal(pc_rt__pull_encode(buf, 5, 9, p, N, changed, 40, PC_PULL_SPARSE, 0),
                     PC_WIRE_HEADER_BYTES + T + 8 * 40);
    /* The thresholds, on both sides: --pull sparse goes sparse while fewer than half the
     * entries changed (49 of 100, not 50: whose sparse form is as long as the dense one, so
     * the codec byte tells), auto while fewer than a quarter (24, not 25). */
    const struct {
        size_t nchanged;
        int mode;
        uint8_t codec;
    } th[] = {{49, PC_PULL_SPARSE, PC_RT_PULL_SPARSE},
              {50, PC_PULL_SPARSE, PC_RT_PULL_DENSE},
              {24, PC_PULL_AUTO, PC_RT_PULL_SPARSE},
              {25, PC_PULL_AUTO, PC_RT_PULL_DENSE}};
    for (size_t i = 0; i < sizeof(th) / sizeof(th[0]); i++) {
        len = pc_rt__pull_encode(buf, 5, 9, p, N, changed, th[i].nchanged, th[i].mode, 0);
        bool sparse = th[i].codec == PC_RT_PULL_SPARSE;
        if (buf[5] != th[i].codec ||
            len != PC_WIRE_HEADER_BYTES + T + (sparse ? 8 * th[i].nchanged : 4 * (size_t)N))
            fail_msg("%zu of %d changed, mode %d: codec 0x%x in %zu bytes", th[i].nchanged, N,
                     th[i].mode, buf[5], len);
    }
}

static void expect_bad(uint8_t *buf, size_t len, uint32_t chunk, uint64_t it, const char *needle)
{
    float q[100];
    for (int i = 0; i < 100; i++)
        q[i] = 1.5f;
    char err[256] = "";
    uint64_t sns = 42;
    assert_int_equal(pc_rt__pull_apply(buf, len, chunk, it, q, 100, &sns, err, sizeof(err)),
                     PC_EFORMAT);
    if (needle && !strstr(err, needle))
        fail_msg("\"%s\" lacks \"%s\"", err, needle);
    for (int i = 0; i < 100; i++)
        assert_true(q[i] == 1.5f);
    assert_true(sns == 42);
}

static void test_pull_rejections(void **state)
{
    (void)state;
    float p[100];
    for (int i = 0; i < 100; i++)
        p[i] = (float)i;
    uint32_t changed[3] = {3, 17, 99};
    uint8_t buf[PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES + 400];
    uint8_t bad[PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES + 400];
    size_t len = pc_rt__pull_encode(buf, 5, 9, p, 100, changed, 3, PC_PULL_SPARSE, 1000);
    const size_t T = PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES; /* the indices start */
    expect_bad(buf, len, 6, 9, "expected");                        /* wrong chunk */
    expect_bad(buf, len, 5, 8, "expected");                        /* wrong iteration */
    expect_bad(buf, len - 1, 5, 9, "payload");                     /* truncated */
    memcpy(bad, buf, len);
    pc_wire_put_u32(bad + T + 4, 200);
    expect_bad(bad, len, 5, 9, "out of range");
    memcpy(bad, buf, len);
    pc_wire_put_u32(bad + T + 4, 3);
    expect_bad(bad, len, 5, 9, "out of order");
    memcpy(bad, buf, len);
    pc_wire_put_u32(bad + T + 12, 0x7fc00000u);
    expect_bad(bad, len, 5, 9, "not finite");
    memcpy(bad, buf, len);
    bad[5] = 3; /* a gradient codec id */
    expect_bad(bad, len, 5, 9, "codec");
    memcpy(bad, buf, len);
    bad[5] = 0xF1; /* the first pull format's sparse id (no server time) */
    expect_bad(bad, len, 5, 9, "codec");
    /* The server time: one past the bound is rejected, the bound accepted. */
    memcpy(bad, buf, len);
    pc_wire_put_u64(bad + PC_WIRE_HEADER_BYTES, PC_RT_PULL_MAX_SERVER_NS + 1);
    expect_bad(bad, len, 5, 9, "server time");
    pc_wire_put_u64(bad + PC_WIRE_HEADER_BYTES, UINT64_MAX);
    expect_bad(bad, len, 5, 9, "server time");
    pc_wire_put_u64(bad + PC_WIRE_HEADER_BYTES, PC_RT_PULL_MAX_SERVER_NS);
    float q[100];
    char err[256];
    uint64_t sns = 0;
    assert_int_equal(pc_rt__pull_apply(bad, len, 5, 9, q, 100, &sns, err, sizeof(err)), PC_OK);
    assert_true(sns == PC_RT_PULL_MAX_SERVER_NS);
    memcpy(bad, buf, len);
    pc_wire_put_u32(bad + 32, 0x3f800000u); /* scale 1: pull messages carry 0 */
    expect_bad(bad, len, 5, 9, "scale");
    memcpy(bad, buf, len);
    pc_wire_put_u32(bad + 32, 0x80000000u); /* -0: equal to 0, other bytes */
    expect_bad(bad, len, 5, 9, "scale -0");
}

/* The server time of both pull readers (the plain update and powersgd's matrix update):
 * the encoders cap it at exactly PC_RT_PULL_MAX_SERVER_NS, so the bound itself must be
 * accepted with its value kept, and one past it refused with the outputs untouched. */
static void test_server_time_bound(void **state)
{
    (void)state;
    enum { N = 8, QN = 4 }; /* the matrix update: a Q of 4 floats for a matrix of 8 */
    const uint64_t MAX = PC_RT_PULL_MAX_SERVER_NS;
    float p[N], q[N];
    for (int i = 0; i < N; i++)
        p[i] = (float)i - 3.5f;
    uint8_t buf[PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES + 4 * N];
    char err[256];
    /* At the bound, over it and far over it the encoders write the bound, which reads back. */
    const uint64_t sent[] = {MAX, MAX + 1, UINT64_MAX};
    for (size_t s = 0; s < sizeof(sent) / sizeof(sent[0]); s++) {
        size_t len = pc_rt__pull_encode(buf, 1, 2, p, N, NULL, 0, PC_PULL_DENSE, sent[s]);
        assert_true(pc_wire_get_u64(buf + PC_WIRE_HEADER_BYTES) == MAX);
        uint64_t sns = 0;
        memset(q, 0, sizeof(q));
        assert_int_equal(pc_rt__pull_apply(buf, len, 1, 2, q, N, &sns, err, sizeof(err)), PC_OK);
        assert_true(sns == MAX);
        assert_memory_equal(q, p, sizeof(p));
        len = pc_rt__pull_lowrank_encode(buf, 1, N, 2, false, p, QN, sent[s], NULL);
        assert_true(pc_wire_get_u64(buf + PC_WIRE_HEADER_BYTES) == MAX);
        const uint8_t *v = NULL;
        sns = 0;
        assert_int_equal(pc_rt__pull_lowrank_read(buf, len, 1, N, 2, false, false, QN, &v, &sns,
                                                  NULL, err, sizeof(err)),
                         PC_OK);
        assert_true(sns == MAX);
        assert_true(v == buf + PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES);
    }
    /* One past the bound, written over an encoded message: refused by both. */
    size_t len = pc_rt__pull_encode(buf, 1, 2, p, N, NULL, 0, PC_PULL_DENSE, 5);
    pc_wire_put_u64(buf + PC_WIRE_HEADER_BYTES, MAX + 1);
    uint64_t sns = 42;
    for (int i = 0; i < N; i++)
        q[i] = 9.0f;
    assert_int_equal(pc_rt__pull_apply(buf, len, 1, 2, q, N, &sns, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "chunk 1: update names a server time of 3600000000001 ns, at most "
                             "3600000000000");
    assert_true(sns == 42);
    for (int i = 0; i < N; i++)
        assert_true(q[i] == 9.0f);
    len = pc_rt__pull_lowrank_encode(buf, 1, N, 2, false, p, QN, 5, NULL);
    pc_wire_put_u64(buf + PC_WIRE_HEADER_BYTES, MAX + 1);
    const uint8_t *v = NULL;
    assert_int_equal(pc_rt__pull_lowrank_read(buf, len, 1, N, 2, false, false, QN, &v, &sns, NULL,
                                              err, sizeof(err)),
                     PC_EFORMAT);
    assert_string_equal(err, "chunk 1: update names a server time of 3600000000001 ns, at most "
                             "3600000000000");
    assert_true(sns == 42 && v == NULL);
}

/* Every bound the validators check, on both sides: the last value accepted, the first
 * refused, and the receiver's buffer untouched on refusal (a canary past the chunk's end
 * shows a write one element too far, which an index check of `> n` for `>= n` makes). */
static void test_validator_bounds(void **state)
{
    (void)state;
    enum { N = 100 };
    float p[N], q[N + 1];
    for (int i = 0; i < N; i++)
        p[i] = (float)i + 0.25f;
    const float CANARY = -123.0f;
    uint8_t buf[PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES + 8 * N];
    char err[256];
    uint64_t sns;
    const size_t T = PC_WIRE_HEADER_BYTES + PC_RT_PULL_TIME_BYTES; /* the indices start */
    /* Sparse pull, the last index: n - 1 accepted and written, n refused and nothing. */
    uint32_t last[2] = {5, N - 1};
    size_t len = pc_rt__pull_encode(buf, 2, 4, p, N, last, 2, PC_PULL_SPARSE, 0);
    for (int i = 0; i <= N; i++)
        q[i] = CANARY;
    assert_int_equal(pc_rt__pull_apply(buf, len, 2, 4, q, N, &sns, err, sizeof(err)), PC_OK);
    assert_true(q[N - 1] == p[N - 1] && q[5] == p[5] && q[4] == CANARY && q[N] == CANARY);
    pc_wire_put_u32(buf + T + 4, N);
    for (int i = 0; i <= N; i++)
        q[i] = CANARY;
    sns = 42;
    assert_int_equal(pc_rt__pull_apply(buf, len, 2, 4, q, N, &sns, err, sizeof(err)), PC_EFORMAT);
    assert_non_null(strstr(err, "index 100 out of range"));
    for (int i = 0; i <= N; i++)
        assert_true(q[i] == CANARY);
    assert_true(sns == 42);
    /* ... and the first index alike: 0 accepted, one past n refused. */
    uint32_t first[1] = {0};
    len = pc_rt__pull_encode(buf, 2, 4, p, N, first, 1, PC_PULL_SPARSE, 0);
    assert_int_equal(pc_rt__pull_apply(buf, len, 2, 4, q, N, &sns, err, sizeof(err)), PC_OK);
    assert_true(q[0] == p[0] && q[1] == CANARY);
    /* Sparse entries: as many as fit the payload exactly, no more. */
    uint32_t all[N / 2 - 1];
    for (uint32_t i = 0; i < N / 2 - 1; i++)
        all[i] = 2 * i;
    len = pc_rt__pull_encode(buf, 2, 4, p, N, all, N / 2 - 1, PC_PULL_SPARSE, 0);
    assert_int_equal(pc_rt__pull_apply(buf, len, 2, 4, q, N, &sns, err, sizeof(err)), PC_OK);
    pc_wire_put_u32(buf + 24, N / 2); /* entries: one more than the payload holds */
    assert_int_equal(pc_rt__pull_apply(buf, len, 2, 4, q, N, &sns, err, sizeof(err)), PC_EFORMAT);
    /* The end message: the highest signal accepted, one more refused. */
    uint8_t d[PC_RT_DONE_BYTES];
    int sig = -1;
    pc_rt__done_encode(d, PC_RT_MAX_SIGNAL);
    assert_int_equal(pc_rt__done_parse(d, sizeof(d), &sig, err, sizeof(err)), PC_OK);
    assert_int_equal(sig, PC_RT_MAX_SIGNAL);
    /* Layout: chunk sizes 1 and PC_CODEC_MAX_N accepted, 0 and one more refused; server
     * S - 1 accepted, S refused; PC_RT_MAX_CHUNKS chunks pass the count check (and fail on
     * the length here), one more does not. */
    pc_plan_chunk_t ch[2] = {{.id = 0, .n = 1, .server = 0},
                             {.id = 1, .n = PC_CODEC_MAX_N, .server = 2}};
    pc_plan_t plan = {.nchunks = 2, .nservers = 3, .chunks = ch};
    uint8_t lb[16 + 2 * 12];
    rt_layout_t l;
    pc_rt__layout_encode(lb, &plan, 0);
    assert_int_equal(pc_rt__layout_parse(lb, sizeof(lb), 3, &l, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_rt__layout_parse(lb, sizeof(lb), 2, &l, err, sizeof(err)), PC_EFORMAT);
    assert_non_null(strstr(err, "bad chunk 1"));
    pc_wire_put_u32(lb + 28, PC_CODEC_MAX_N + 1);
    assert_int_equal(pc_rt__layout_parse(lb, sizeof(lb), 3, &l, err, sizeof(err)), PC_EFORMAT);
    assert_non_null(strstr(err, "bad chunk 1"));
    pc_wire_put_u32(lb + 4, PC_RT_MAX_CHUNKS);
    assert_int_equal(pc_rt__layout_parse(lb, sizeof(lb), 3, &l, err, sizeof(err)), PC_EFORMAT);
    assert_non_null(strstr(err, "expected"));
    pc_wire_put_u32(lb + 4, PC_RT_MAX_CHUNKS + 1);
    assert_int_equal(pc_rt__layout_parse(lb, sizeof(lb), 3, &l, err, sizeof(err)), PC_EFORMAT);
    assert_non_null(strstr(err, "at most"));
}

/* Layout: the plan's sizes and servers, byte for byte, and every check. */
static void test_layout(void **state)
{
    (void)state;
    pc_plan_chunk_t chunks[3] = {{.id = 0, .n = 300, .server = 1, .rows = 10},
                                 {.id = 1, .n = 42, .server = 0},
                                 {.id = 2, .n = 7, .server = 1}};
    pc_plan_t plan = {.nchunks = 3, .nservers = 2, .chunks = chunks};
    size_t len = pc_rt__layout_bytes(3);
    assert_int_equal(len, 16 + 3 * 12);
    uint8_t buf[16 + 3 * 12], bad[sizeof(buf)];
    pc_rt__layout_encode(buf, &plan, 0x100000007ull);
    const uint8_t head[16] = {'P', 'P', 'L', '2', 3, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0};
    assert_memory_equal(buf, head, 16);
    assert_int_equal(pc_wire_get_u32(buf + 16), 300);
    assert_int_equal(pc_wire_get_u32(buf + 20), 1);
    assert_int_equal(pc_wire_get_u32(buf + 24), 10);
    rt_layout_t l;
    char err[256];
    assert_int_equal(pc_rt__layout_parse(buf, len, 2, &l, err, sizeof(err)), PC_OK);
    assert_int_equal(l.nchunks, 3);
    assert_true(l.resume == 0x100000007ull);
    for (uint32_t c = 0; c < 3; c++) {
        uint32_t n, rows;
        int server;
        pc_rt__layout_chunk(&l, c, &n, &server, &rows);
        assert_int_equal(n, chunks[c].n);
        assert_int_equal(server, chunks[c].server);
        assert_int_equal(rows, chunks[c].rows);
    }
    /* Rejections (one u32 rewritten) leave *out untouched. */
    struct {
        size_t off; /* where to write v; 0 with v 0: nothing */
        uint32_t v;
        int nservers;
        const char *needle;
    } cases[] = {
        {0, 0, 1, "server 1 of 1"},          /* a server the job does not have */
        {0, 0, 0, "server 1 of 0"},          /* no servers at all */
        {0, 0x4c435050u, 2, "magic"},        /* the layout without rows ("PPCL") */
        {4, 4, 2, "expected 64"},            /* count and length disagree */
        {4, 0xffffffffu, 2, "at most"},      /* more chunks than tags */
        {16, 0, 2, "bad chunk 0"},           /* an empty chunk */
        {24, 7, 2, "7 rows"},                /* rows that do not divide 300 */
        {28, 0xfffffff1u, 2, "bad chunk 1"}, /* more than PC_CODEC_MAX_N elements */
        {44, 2, 2, "bad chunk 2"},           /* server out of range */
        {44, 0x80000001u, 2, "bad chunk 2"}, /* negative as an int: out of range too */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memcpy(bad, buf, len);
        if (cases[i].off || cases[i].v)
            pc_wire_put_u32(bad + cases[i].off, cases[i].v);
        rt_layout_t o = {.nchunks = 77};
        assert_int_equal(pc_rt__layout_parse(bad, len, cases[i].nservers, &o, err, sizeof(err)),
                         PC_EFORMAT);
        assert_int_equal(o.nchunks, 77);
        if (!strstr(err, cases[i].needle))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err, cases[i].needle);
    }
    assert_int_equal(pc_rt__layout_parse(buf, len - 1, 2, &l, err, sizeof(err)), PC_EFORMAT);
    assert_int_equal(pc_rt__layout_parse(buf, len + 12, 2, &l, err, sizeof(err)), PC_EFORMAT);
    assert_int_equal(pc_rt__layout_parse(buf, 15, 2, &l, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "layout of 15 bytes is shorter than its 16-byte head");
    /* An empty plan is a valid (if idle) layout. */
    pc_plan_t none = {.nchunks = 0};
    pc_rt__layout_encode(buf, &none, 0);
    assert_int_equal(pc_rt__layout_parse(buf, 16, 2, &l, err, sizeof(err)), PC_OK);
    assert_int_equal(l.nchunks, 0);
}

/* Init: n little-endian binary32, exactly; nothing written unless all are finite. */
static void test_init(void **state)
{
    (void)state;
    enum { N = 5 };
    const float p[N] = {1.5f, -0.0f, 3e-39f, -2.25f, 65504.0f};
    uint8_t buf[4 * N + 4];
    assert_int_equal(pc_rt__init_bytes(N), 4 * N);
    pc_rt__init_encode(buf, p, N);
    assert_int_equal(pc_wire_get_u32(buf), 0x3fc00000u); /* 1.5f */
    assert_int_equal(pc_wire_get_u32(buf + 4), 0x80000000u);
    float q[N] = {9, 9, 9, 9, 9};
    char err[256];
    assert_int_equal(pc_rt__init_apply(buf, 4 * N, 3, q, N, err, sizeof(err)), PC_OK);
    assert_memory_equal(p, q, sizeof(p));
    const float keep[N] = {9, 9, 9, 9, 9};
    memcpy(q, keep, sizeof(q));
    assert_int_equal(pc_rt__init_apply(buf, 4 * N - 1, 3, q, N, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "chunk 3: parameters of 19 bytes, expected 20 (5 elements)");
    assert_int_equal(pc_rt__init_apply(buf, 4 * N + 4, 3, q, N, err, sizeof(err)), PC_EFORMAT);
    pc_wire_put_u32(buf + 8, 0x7f800000u); /* infinity */
    assert_int_equal(pc_rt__init_apply(buf, 4 * N, 3, q, N, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "chunk 3: a parameter is not finite");
    pc_wire_put_u32(buf + 8, 0xffc00001u); /* NaN */
    assert_int_equal(pc_rt__init_apply(buf, 4 * N, 3, q, N, err, sizeof(err)), PC_EFORMAT);
    assert_memory_equal(q, keep, sizeof(q));
}

/* Gradients: read + check + apply gives what pc_codec_decode_add gives, bit for bit, and
 * refuses what it refuses, with the same reason. */
static void test_grad(void **state)
{
    (void)state;
    const char *specs[] = {"none",
                           "fp16",
                           "topk:ratio=0.1,index=delta",
                           "dgc:ratio=0.05",
                           "randomk:ratio=0.2,values=fp16",
                           "qsgd:levels=4",
                           "efsign"};
    enum { N = 333 };
    float g[N];
    for (int i = 0; i < N; i++)
        g[i] = sinf((float)i * 0.37f) * (float)(1 + i % 7);
    for (size_t s = 0; s < sizeof(specs) / sizeof(specs[0]); s++) {
        pc_codec_spec_t spec;
        char err[256], err2[256];
        assert_int_equal(pc_codec_spec_parse(specs[s], &spec, err, sizeof(err)), PC_OK);
        spec.seed = 11;
        pc_codec_t *c;
        pc_codec_state_t *st;
        assert_int_equal(pc_codec_create(&spec, &c), PC_OK);
        assert_int_equal(pc_codec_state_create(c, 4, N, &st), PC_OK);
        size_t cap = pc_codec_max_bytes(c, N), len = 0;
        uint8_t *msg = malloc(cap);
        assert_non_null(msg);
        assert_int_equal(pc_codec_compress(c, st, g, 6, msg, cap, &len), PC_OK);
        pc_codec_expect_t want = {.chunk = 4, .n = N, .iteration = 6};
        float a[N], b[N];
        for (int i = 0; i < N; i++)
            a[i] = b[i] = (float)i;
        rt_grad_t gr;
        assert_int_equal(pc_rt__grad_read(msg, len, &gr, err, sizeof(err)), PC_OK);
        assert_int_equal(gr.h.chunk, 4);
        assert_ptr_equal(gr.msg, msg);
        assert_int_equal(gr.len, len);
        assert_int_equal(pc_rt__grad_check(c, &gr, &want, err, sizeof(err)), PC_OK);
        assert_int_equal(pc_rt__grad_apply(c, &gr, 0.25f, a, err, sizeof(err)), PC_OK);
        assert_int_equal(pc_codec_decode_add(c, msg, len, &want, 0.25f, b, NULL, err, sizeof(err)),
                         PC_OK);
        assert_memory_equal(a, b, sizeof(a));
        /* The same refusals: another iteration, chunk, n; a flipped payload byte. */
        pc_codec_expect_t wrong[3] = {want, want, want};
        wrong[0].iteration = 7;
        wrong[1].chunk = 5;
        wrong[2].n = N + 1;
        for (int w = 0; w < 3; w++) {
            assert_int_equal(pc_rt__grad_check(c, &gr, &wrong[w], err, sizeof(err)), PC_EFORMAT);
            assert_int_equal(pc_codec_validate(c, msg, len, &wrong[w], NULL, err2, sizeof(err2)),
                             PC_EFORMAT);
            assert_string_equal(err, err2);
        }
        assert_int_equal(pc_rt__grad_read(msg, len - 1, &gr, err, sizeof(err)), PC_EFORMAT);
        assert_non_null(strstr(err, "payload"));
        free(msg);
        pc_codec_state_destroy(st);
        pc_codec_destroy(c);
    }
}

/* The server's sparse path (pc_rt__grad_aggregate_sparse, then pc_rt__server_sparse_update:
 * SGD on the touched entries and clearing them, the server's own code) against its dense path
 * (clear all n, pc_rt__grad_apply per worker, pc_optim_sgd over all n): bitwise the same
 * parameters, the same changed count and the same pull messages, iteration after iteration on one
 * aggregate buffer, with workers whose entries overlap and cancel (touched but unchanged) and
 * parameters that are -0. */
static void test_sparse_step(void **state)
{
    (void)state;
    const char *sparse[] = {"topk:ratio=0.05", "topk:ratio=0.05,values=fp16,index=delta",
                            "dgc:ratio=0.05", "randomk:ratio=0.1,values=fp16", "threshold:tau=1.5"};
    const char *dense[] = {"none", "fp16", "qsgd", "terngrad", "efsign"};
    enum { N = 2000, W = 3, ITERS = 4 };
    pc_optim_cfg_t cfg = {.lr = 0.1};
    assert_true(pc_optim_sparse_friendly(&cfg));
    size_t cancelled = 0;
    for (size_t s = 0; s < sizeof(sparse) / sizeof(sparse[0]); s++) {
        pc_codec_spec_t spec;
        char err[256];
        assert_int_equal(pc_codec_spec_parse(sparse[s], &spec, err, sizeof(err)), PC_OK);
        spec.seed = 3;
        pc_codec_t *c;
        assert_int_equal(pc_codec_create(&spec, &c), PC_OK);
        assert_true(pc_rt__grad_sparse(c));
        pc_codec_state_t *st[W];
        uint8_t *msg[W];
        rt_grad_t gr[W];
        size_t cap = pc_codec_max_bytes(c, N);
        for (int w = 0; w < W; w++) {
            assert_int_equal(pc_codec_state_create(c, 2, N, &st[w]), PC_OK);
            msg[w] = malloc(cap);
        }
        float *pd = malloc(sizeof(float) * N), *ps = malloc(sizeof(float) * N),
              *aggd = malloc(sizeof(float) * N), *aggs = calloc(N, sizeof(float)),
              *g = malloc(sizeof(float) * N), *g0 = malloc(sizeof(float) * N);
        uint32_t *changed = malloc(sizeof(uint32_t) * N);
        uint8_t *pulld = malloc(pc_rt__pull_max_bytes(N)),
                *pulls = malloc(pc_rt__pull_max_bytes(N));
        for (int i = 0; i < N; i++)
            pd[i] = ps[i] = i % 11 == 0 ? -0.0f : sinf((float)i);
        rt_sparse_t sp = {0};
        for (uint64_t it = 0; it < ITERS; it++) {
            size_t entries = 0;
            for (int w = 0; w < W; w++) {
                for (int i = 0; i < N; i++) {
                    float x =
                        sinf((float)i * 0.71f + (float)(w * 7 + (int)it)) * (float)(1 + i % 5);
                    if (w == 0)
                        g0[i] = x;
                    /* Worker 1 cancels worker 0 on every third entry: touched, sum 0. */
                    g[i] = w == 1 && i % 3 == 0 ? -g0[i] : x;
                }
                if (w == 0)
                    memcpy(g, g0, sizeof(float) * N);
                size_t len;
                assert_int_equal(pc_codec_compress(c, st[w], g, it, msg[w], cap, &len), PC_OK);
                pc_codec_expect_t want = {.chunk = 2, .n = N, .iteration = it};
                assert_int_equal(pc_rt__grad_read(msg[w], len, &gr[w], err, sizeof(err)), PC_OK);
                assert_int_equal(pc_rt__grad_check(c, &gr[w], &want, err, sizeof(err)), PC_OK);
                entries += gr[w].h.entries;
            }
            float lr = 0.1f;
            /* Dense path. */
            memset(aggd, 0, sizeof(float) * N);
            for (int w = 0; w < W; w++)
                assert_int_equal(pc_rt__grad_apply(c, &gr[w], 1.0f / W, aggd, err, sizeof(err)),
                                 PC_OK);
            size_t ncd = pc_optim_sgd(&cfg, lr, pd, NULL, aggd, N, changed);
            /* Sparse path. */
            int failed = -1;
            assert_int_equal(pc_rt__grad_aggregate_sparse(&sp, c, gr, W, 1.0f / W, aggs, N, &failed,
                                                          err, sizeof(err)),
                             PC_OK);
            assert_true(sp.ntouched <= entries && sp.ntouched <= N);
            for (size_t j = 0; j < sp.ntouched; j++) {
                if (j > 0)
                    assert_true(sp.touched[j] > sp.touched[j - 1]);
                uint32_t i = sp.touched[j];
                if (memcmp(&aggs[i], &aggd[i], sizeof(float)) != 0)
                    fail_msg("%s it %llu: aggregate[%u] %a, dense %a", sparse[s],
                             (unsigned long long)it, i, (double)aggs[i], (double)aggd[i]);
                cancelled += aggs[i] == 0.0f;
            }
            /* The server's own update (SGD on the touched entries, then clearing them). */
            size_t ncs = pc_rt__server_sparse_update(&sp, &cfg, lr, ps, aggs);
            if (memcmp(pd, ps, sizeof(float) * N) != 0)
                fail_msg("%s it %llu: sparse path parameters differ from the dense path's",
                         sparse[s], (unsigned long long)it);
            assert_int_equal(ncs, ncd);
            for (int i = 0; i < N; i++) /* the dense path's aggregate is 0 off the list */
                assert_true(aggs[i] == 0.0f);
            for (int mode = PC_PULL_AUTO; mode <= PC_PULL_SPARSE; mode++) {
                size_t ld = pc_rt__pull_encode(pulld, 2, it, pd, N, changed, ncd, mode, 0);
                size_t ls = pc_rt__pull_encode(pulls, 2, it, ps, N, sp.scratch, ncs, mode, 0);
                assert_int_equal(ld, ls);
                assert_memory_equal(pulld, pulls, ld);
            }
        }
        pc_rt__sparse_free(&sp);
        for (int w = 0; w < W; w++) {
            pc_codec_state_destroy(st[w]);
            free(msg[w]);
        }
        free(pd);
        free(ps);
        free(aggd);
        free(aggs);
        free(g);
        free(g0);
        free(changed);
        free(pulld);
        free(pulls);
        pc_codec_destroy(c);
    }
    assert_true(cancelled > 0); /* the test did exercise touched-but-unchanged entries */
    for (size_t s = 0; s < sizeof(dense) / sizeof(dense[0]); s++) {
        pc_codec_spec_t spec;
        pc_codec_t *c;
        assert_int_equal(pc_codec_spec_parse(dense[s], &spec, NULL, 0), PC_OK);
        assert_int_equal(pc_codec_create(&spec, &c), PC_OK);
        assert_false(pc_rt__grad_sparse(c));
        pc_codec_destroy(c);
    }
    pc_optim_cfg_t mom = {.lr = 0.1, .momentum = 0.9}, wd = {.lr = 0.1, .weight_decay = 1e-4};
    assert_false(pc_optim_sparse_friendly(&mom));
    assert_false(pc_optim_sparse_friendly(&wd));
}

/* Done and checkpoint requests: fixed sizes, little-endian, the signal bounded. */
static void test_done_and_ckpt(void **state)
{
    (void)state;
    uint8_t buf[PC_RT_CKPT_BYTES + 1];
    char err[256];
    int sig = -1;
    pc_rt__done_encode(buf, 15);
    assert_int_equal(pc_wire_get_u32(buf), 15);
    assert_int_equal(pc_rt__done_parse(buf, PC_RT_DONE_BYTES, &sig, err, sizeof(err)), PC_OK);
    assert_int_equal(sig, 15);
    pc_rt__done_encode(buf, 0);
    assert_int_equal(pc_rt__done_parse(buf, PC_RT_DONE_BYTES, &sig, err, sizeof(err)), PC_OK);
    assert_int_equal(sig, 0);
    sig = -1;
    assert_int_equal(pc_rt__done_parse(buf, 3, &sig, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "end message of 3 bytes, expected 4");
    assert_int_equal(pc_rt__done_parse(buf, 8, &sig, err, sizeof(err)), PC_EFORMAT);
    pc_wire_put_u32(buf, PC_RT_MAX_SIGNAL + 1);
    assert_int_equal(pc_rt__done_parse(buf, 4, &sig, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "end message names signal 65, at most 64");
    assert_int_equal(sig, -1);

    uint64_t it = 0;
    pc_rt__ckpt_req_encode(buf, 0x0102030405060708ull);
    const uint8_t le[8] = {8, 7, 6, 5, 4, 3, 2, 1};
    assert_memory_equal(buf, le, 8);
    assert_int_equal(pc_rt__ckpt_req_parse(buf, PC_RT_CKPT_BYTES, &it, err, sizeof(err)), PC_OK);
    assert_true(it == 0x0102030405060708ull);
    it = 5;
    assert_int_equal(pc_rt__ckpt_req_parse(buf, 4, &it, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "checkpoint request of 4 bytes, expected 8");
    assert_int_equal(pc_rt__ckpt_req_parse(buf, 9, &it, err, sizeof(err)), PC_EFORMAT);
    assert_true(it == 5);
}

/* The step's placement (TAG_UPDATE): its bytes, both placements back, each rejection with
 * its reason and nothing written. */
static void test_update_message(void **state)
{
    (void)state;
    uint8_t buf[PC_RT_UPDATE_BYTES + 1] = {0};
    char err[256];
    int u = -1;
    pc_rt__update_encode(buf, PC_UPDATE_WORKERS);
    assert_memory_equal(buf, "PPU1\x01\x00\x00\x00", PC_RT_UPDATE_BYTES);
    assert_int_equal(pc_rt__update_parse(buf, PC_RT_UPDATE_BYTES, &u, err, sizeof(err)), PC_OK);
    assert_int_equal(u, PC_UPDATE_WORKERS);
    pc_rt__update_encode(buf, PC_UPDATE_SERVERS);
    assert_int_equal(pc_rt__update_parse(buf, PC_RT_UPDATE_BYTES, &u, err, sizeof(err)), PC_OK);
    assert_int_equal(u, PC_UPDATE_SERVERS);
    u = -1;
    assert_int_equal(pc_rt__update_parse(buf, 7, &u, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "update message of 7 bytes, expected 8");
    assert_int_equal(pc_rt__update_parse(buf, 9, &u, err, sizeof(err)), PC_EFORMAT);
    pc_wire_put_u32(buf + 4, 2);
    assert_int_equal(pc_rt__update_parse(buf, 8, &u, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "update message names placement 2");
    pc_rt__update_encode(buf, PC_UPDATE_WORKERS);
    buf[3] = '2'; /* "PPU2" */
    assert_int_equal(pc_rt__update_parse(buf, 8, &u, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "update message with bad magic 0x32555050");
    assert_int_equal(u, -1);
}

/* The codec's default warm-up (TAG_WARMUP): its bytes, the value back, each rejection with
 * its reason and nothing written. */
static void test_warmup_message(void **state)
{
    (void)state;
    uint8_t buf[PC_RT_WARMUP_BYTES + 1] = {0};
    char err[256];
    int n = -1;
    pc_rt__warmup_encode(buf, PC_CONFIG_ADAM_WARMUP);
    assert_memory_equal(buf, "PPW1\xe8\x03\x00\x00", PC_RT_WARMUP_BYTES); /* 1000 */
    assert_int_equal(pc_rt__warmup_parse(buf, PC_RT_WARMUP_BYTES, &n, err, sizeof(err)), PC_OK);
    assert_int_equal(n, PC_CONFIG_ADAM_WARMUP);
    n = -1;
    assert_int_equal(pc_rt__warmup_parse(buf, 7, &n, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "warm-up message of 7 bytes, expected 8");
    assert_int_equal(pc_rt__warmup_parse(buf, 9, &n, err, sizeof(err)), PC_EFORMAT);
    pc_rt__warmup_encode(buf, 999);
    assert_int_equal(pc_rt__warmup_parse(buf, 8, &n, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "warm-up message of 999 iterations, expected 1000 (the default)");
    pc_rt__warmup_encode(buf, PC_CONFIG_ADAM_WARMUP);
    buf[2] = 'U'; /* "PPU1": an update message */
    assert_int_equal(pc_rt__warmup_parse(buf, 8, &n, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "warm-up message with bad magic 0x31555050");
    assert_int_equal(n, -1);
}

/* Parameter groups (TAG_GROUPS) and a step's learning rates (TAG_LR): bytes, round trips,
 * every rejection with its reason and nothing written. */
static void test_groups_and_lr(void **state)
{
    (void)state;
    char err[256];
    pc_optim_cfg_t g[2] = {
        {.kind = PC_OPTIM_ADAMW,
         .lr = 1e-3,
         .weight_decay = 0.05,
         .beta1 = 0.9,
         .beta2 = 0.999,
         .eps = 1e-8},
        {.kind = PC_OPTIM_ADAMW,
         .lr = 1e-3,
         .beta1 = 0.9,
         .beta2 = 0.999,
         .eps = 1e-8,
         .amsgrad = true},
    };
    const uint32_t cg[3] = {0, 1, 0};
    size_t len = pc_rt__groups_bytes(2, 3);
    assert_int_equal(len, 16 + 2 * 56 + 3 * 4);
    uint8_t *buf = malloc(len + 8);
    assert_non_null(buf);
    pc_rt__groups_encode(buf, PC_OPTIM_ADAMW, g, 2, cg, 3);
    assert_memory_equal(buf, "PPG1", 4);
    assert_int_equal(pc_wire_get_u32(buf + 4), PC_OPTIM_ADAMW);
    assert_int_equal(pc_wire_get_u32(buf + 16 + 56 + 48), PC_RT_GROUP_F_AMSGRAD);
    rt_groups_t v = {0};
    assert_int_equal(pc_rt__groups_parse(buf, len, &v, err, sizeof(err)), PC_OK);
    assert_int_equal(v.kind, PC_OPTIM_ADAMW);
    assert_int_equal(v.ngroups, 2);
    assert_int_equal(v.nchunks, 3);
    pc_optim_cfg_t back;
    pc_rt__groups_get(&v, 0, &back);
    assert_true(back.lr == 1e-3 && back.weight_decay == 0.05 && back.beta2 == 0.999 &&
                back.eps == 1e-8 && !back.amsgrad && back.kind == PC_OPTIM_ADAMW &&
                back.schedule == PC_LR_CONSTANT);
    pc_rt__groups_get(&v, 1, &back);
    assert_true(back.weight_decay == 0 && back.amsgrad);
    assert_int_equal(pc_rt__groups_chunk(&v, 1), 1);
    assert_int_equal(pc_rt__groups_chunk(&v, 2), 0);

    rt_groups_t untouched = {.ngroups = 99}, w = untouched;
    assert_int_equal(pc_rt__groups_parse(buf, len - 1, &w, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "groups message of 139 bytes, 140 expected for 2 groups and 3 chunks");
    pc_wire_put_u32(buf + 16 + 56 + 56 + 8, 2); /* chunk 2 names group 2 of 2 */
    assert_int_equal(pc_rt__groups_parse(buf, len, &w, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "chunk 2 names group 2 of 2");
    pc_rt__groups_encode(buf, PC_OPTIM_ADAMW, g, 2, cg, 3);
    g[1].eps = 0;
    pc_rt__groups_encode(buf, PC_OPTIM_ADAMW, g, 2, cg, 3);
    assert_int_equal(pc_rt__groups_parse(buf, len, &w, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "group 1: eps 0 is not a finite number > 0");
    g[1].eps = 1e-8;
    pc_rt__groups_encode(buf, 3, g, 2, cg, 3);
    assert_int_equal(pc_rt__groups_parse(buf, len, &w, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "groups message names optimizer 3");
    pc_rt__groups_encode(buf, PC_OPTIM_ADAMW, g, 2, cg, 3);
    buf[0] ^= 1;
    assert_int_equal(pc_rt__groups_parse(buf, len, &w, err, sizeof(err)), PC_EFORMAT);
    pc_rt__groups_encode(buf, PC_OPTIM_ADAMW, g, 2, cg, 3);
    pc_wire_put_u32(buf + 16 + 52, 1); /* the reserved word */
    assert_int_equal(pc_rt__groups_parse(buf, len, &w, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "group 0 has unknown flags");
    assert_memory_equal(&w, &untouched, sizeof(w));
    free(buf);

    /* The rule checks, one field each (torch's own rules for SGD's nesterov). */
    pc_optim_cfg_t sgd = {.kind = PC_OPTIM_SGD, .lr = 0.1, .momentum = 0.9, .nesterov = true};
    assert_int_equal(pc_rt__group_check(&sgd, err, sizeof(err)), PC_OK);
    sgd.momentum = 0;
    assert_int_equal(pc_rt__group_check(&sgd, err, sizeof(err)), PC_EINVAL);
    assert_string_equal(err, "nesterov needs a momentum (torch's rule)");
    sgd = (pc_optim_cfg_t){.kind = PC_OPTIM_SGD, .lr = NAN};
    assert_int_equal(pc_rt__group_check(&sgd, err, sizeof(err)), PC_EINVAL);
    sgd = (pc_optim_cfg_t){.kind = PC_OPTIM_SGD, .lr = 0.1, .weight_decay = -1};
    assert_int_equal(pc_rt__group_check(&sgd, err, sizeof(err)), PC_EINVAL);
    assert_string_equal(err, "weight_decay -1 is not a finite number >= 0");
    pc_optim_cfg_t adam = g[0];
    adam.momentum = 0.5;
    assert_int_equal(pc_rt__group_check(&adam, err, sizeof(err)), PC_EINVAL);
    assert_string_equal(err, "momentum and nesterov are SGD's, not adamw's");
    adam = g[0];
    adam.beta1 = 1;
    assert_int_equal(pc_rt__group_check(&adam, err, sizeof(err)), PC_EINVAL);
    assert_string_equal(err, "betas (1, 0.999) are not each in [0, 1)");

    /* Learning rates: u64 iteration, u32 count, binary64 each. */
    const double lrs[2] = {0.001, 0.0005};
    uint8_t lb[PC_RT_LR_HEAD_BYTES + 16];
    assert_int_equal(pc_rt__lr_bytes(2), sizeof(lb));
    pc_rt__lr_encode(lb, 41, lrs, 2);
    assert_true(pc_wire_get_u64(lb) == 41);
    assert_int_equal(pc_wire_get_u32(lb + 8), 2);
    double got[2] = {-1, -1};
    uint64_t it = 0;
    assert_int_equal(pc_rt__lr_parse(lb, sizeof(lb), 2, &it, got, err, sizeof(err)), PC_OK);
    assert_true(it == 41 && got[0] == 0.001 && got[1] == 0.0005);
    got[0] = got[1] = -1;
    it = 7;
    assert_int_equal(pc_rt__lr_parse(lb, sizeof(lb), 3, &it, got, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "learning-rate message of 28 bytes, expected 36 (3 groups)");
    pc_wire_put_u32(lb + 8, 3);
    assert_int_equal(pc_rt__lr_parse(lb, sizeof(lb), 2, &it, got, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "learning-rate message of 3 groups, the run has 2");
    const double bad[2] = {0.001, INFINITY};
    pc_rt__lr_encode(lb, 41, bad, 2);
    assert_int_equal(pc_rt__lr_parse(lb, sizeof(lb), 2, &it, got, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "learning rate of group 1 is inf, not a finite number >= 0");
    assert_true(it == 7 && got[0] == -1 && got[1] == -1);

    /* Clipping (TAG_CLIP) and its norm (TAG_NORM): u64 iteration, binary64. A max-norm is
     * 0 (none) or above 0, +inf included; a norm is not below 0, +inf and NaN included. */
    uint8_t cb[PC_RT_CLIP_BYTES];
    double cv = -1;
    pc_rt__clip_encode(cb, 43, 0.05);
    assert_true(pc_wire_get_u64(cb) == 43);
    assert_int_equal(pc_rt__clip_parse(cb, sizeof(cb), &it, &cv, err, sizeof(err)), PC_OK);
    assert_true(it == 43 && cv == 0.05);
    const double maxes[] = {0.0, INFINITY}, norms[] = {0.0, 3.5, INFINITY, NAN};
    for (size_t i = 0; i < sizeof(maxes) / sizeof(maxes[0]); i++) {
        pc_rt__clip_encode(cb, 44, maxes[i]);
        assert_int_equal(pc_rt__clip_parse(cb, sizeof(cb), &it, &cv, err, sizeof(err)), PC_OK);
        assert_true(it == 44 && cv == maxes[i]);
    }
    for (size_t i = 0; i < sizeof(norms) / sizeof(norms[0]); i++) {
        pc_rt__clip_encode(cb, 45, norms[i]);
        assert_int_equal(pc_rt__norm_parse(cb, sizeof(cb), &it, &cv, err, sizeof(err)), PC_OK);
        assert_true(it == 45 && (cv == norms[i] || (isnan(cv) && isnan(norms[i]))));
    }
    it = 7, cv = -1;
    pc_rt__clip_encode(cb, 46, NAN);
    assert_int_equal(pc_rt__clip_parse(cb, sizeof(cb), &it, &cv, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "clipping message with max-norm nan, not 0 (none) or above 0");
    pc_rt__clip_encode(cb, 46, -0.5);
    assert_int_equal(pc_rt__clip_parse(cb, sizeof(cb), &it, &cv, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "clipping message with max-norm -0.5, not 0 (none) or above 0");
    assert_int_equal(pc_rt__norm_parse(cb, sizeof(cb), &it, &cv, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "norm message with norm -0.5, below 0");
    assert_int_equal(pc_rt__clip_parse(cb, 15, &it, &cv, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "clipping message of 15 bytes, expected 16");
    assert_int_equal(pc_rt__norm_parse(cb, 17, &it, &cv, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "norm message of 17 bytes, expected 16");
    assert_true(it == 7 && cv == -1); /* untouched by every refusal */
}

/* Clipping's pieces (the servers' clip_sum and clip_finish, pc_optim's functions): the sum
 * of squares in double, index order, of a dense chunk and of a sparse one's touched entries
 * (the same bits when the rest is zero), added over chunks it gives the 2-norm of the
 * whole; torch's coefficient max / (norm + 1e-6) clamped at 1, NaN kept, +inf max-norm
 * never clipping. */
static void test_clip_pieces(void **state)
{
    (void)state;
    enum { N = 1000 };
    float g[N];
    uint32_t idx[N];
    size_t k = 0;
    double ref = 0;
    for (size_t i = 0; i < N; i++) {
        g[i] = i % 7 == 3 ? (float)sin((double)i) * 3.0f : 0.0f;
        if (g[i] != 0.0f)
            idx[k++] = (uint32_t)i;
        ref += (double)g[i] * (double)g[i];
    }
    double dense = pc_optim_sumsq(g, N), sparse = pc_optim_sumsq_at(g, idx, k);
    assert_memory_equal(&dense, &sparse, sizeof(double)); /* bitwise */
    assert_true(dense == ref);
    /* In pieces (chunks on servers), added in order: the 2-norm of the whole. */
    double pieces =
        pc_optim_sumsq(g, 300) + pc_optim_sumsq(g + 300, 450) + pc_optim_sumsq(g + 750, N - 750);
    assert_true(fabs(sqrt(pieces) - sqrt(ref)) <= 1e-12 * sqrt(ref));
    assert_true(pc_optim_sumsq(g, 0) == 0.0 && pc_optim_sumsq_at(g, idx, 0) == 0.0);
    const float v[2] = {3.0f, -4.0f}; /* float squares are exact in double */
    assert_true(pc_optim_sumsq(v, 2) == 25.0);

    assert_true(pc_optim_clip_coef(1.0, 5.0) == 1.0 / (5.0 + 1e-6));
    assert_true(pc_optim_clip_coef(1.0, 0.5) == 1.0);       /* below max: no clipping */
    assert_true(pc_optim_clip_coef(1.0, 0.0) == 1.0);       /* a zero gradient */
    assert_true(pc_optim_clip_coef(INFINITY, 1e30) == 1.0); /* +inf: the norm only */
    assert_true(isnan(pc_optim_clip_coef(1.0, NAN)));       /* torch's NaN, kept */
    assert_true(pc_optim_clip_coef(1.0, INFINITY) == 0.0);  /* torch: 1 / inf = 0 */
    assert_true(isnan(pc_optim_clip_coef(INFINITY, INFINITY)));
}

/* The pull header's bytes: a pc_wire header with the pull codec ids. */
static void test_pull_bytes(void **state)
{
    (void)state;
    float p[4] = {1, 2, 3, 4};
    uint8_t buf[PC_WIRE_HEADER_BYTES + 24];
    size_t len =
        pc_rt__pull_encode(buf, 7, 0x100000002ull, p, 4, NULL, 0, PC_PULL_DENSE, 0x0102030405ull);
    assert_int_equal(len, PC_WIRE_HEADER_BYTES + 24);
    assert_int_equal(buf[5], 0xF2);
    assert_int_equal(buf[5], PC_RT_PULL_DENSE);
    assert_int_equal(pc_wire_get_u32(buf + 8), 7);                                   /* chunk */
    assert_int_equal(pc_wire_get_u32(buf + 12), 4);                                  /* n */
    assert_true(pc_wire_get_u64(buf + 16) == 0x100000002ull);                        /* iteration */
    assert_int_equal(pc_wire_get_u32(buf + 24), 4);                                  /* entries */
    assert_int_equal(pc_wire_get_u32(buf + 28), 24);                                 /* payload */
    assert_true(pc_wire_get_u64(buf + PC_WIRE_HEADER_BYTES) == 0x0102030405ull);     /* server ns */
    assert_int_equal(pc_wire_get_u32(buf + PC_WIRE_HEADER_BYTES + 16), 0x40400000u); /* 3.0f */
    float big[16] = {0};
    uint32_t one[1] = {9};
    uint8_t sb[PC_WIRE_HEADER_BYTES + 72];
    big[9] = -1.0f;
    len = pc_rt__pull_encode(sb, 7, 1, big, 16, one, 1, PC_PULL_SPARSE, 0);
    assert_int_equal(len, PC_WIRE_HEADER_BYTES + 16);
    assert_int_equal(sb[5], 0xF3);
    assert_int_equal(sb[5], PC_RT_PULL_SPARSE);
    assert_int_equal(pc_wire_get_u32(sb + 24), 1);
    assert_true(pc_wire_get_u64(sb + PC_WIRE_HEADER_BYTES) == 0);
    assert_int_equal(pc_wire_get_u32(sb + PC_WIRE_HEADER_BYTES + 8), 9);
    assert_int_equal(pc_wire_get_u32(sb + PC_WIRE_HEADER_BYTES + 12), 0xbf800000u);
}

/* powersgd's two server messages: P^ (codec 0xF4, rows x rank floats) and a matrix's update
 * (codec 0xF5: server time, then Q, or in the warm-up the mean gradient), their bytes,
 * round trips and every rejection, each leaving the receiver's outputs untouched. */
static void test_lowrank_messages(void **state)
{
    (void)state;
    enum { N = 12, QN = 6, E = 8 }; /* a 4 x 3 matrix at rank 2: P^ 4 x 2, Q 3 x 2 */
    float phat[E], q[QN], p[N], outp[N], outq[QN], outf[E];
    for (int i = 0; i < N; i++)
        p[i] = (float)i - 5.5f;
    for (int i = 0; i < E; i++)
        phat[i] = 0.25f * (float)i;
    for (int i = 0; i < QN; i++)
        q[i] = -(float)i;
    char err[256];
    uint8_t buf[PC_WIRE_HEADER_BYTES + 8 + 4 * (N + QN)], bad[sizeof(buf)];

    /* P^ */
    size_t len = pc_rt__phat_encode(buf, 3, N, 0x100000009ull, phat, E);
    assert_int_equal(len, pc_rt__phat_bytes(E));
    assert_int_equal(len, PC_WIRE_HEADER_BYTES + 4 * E);
    assert_int_equal(buf[5], 0xF4);
    assert_int_equal(pc_wire_get_u32(buf + 8), 3);                                  /* chunk */
    assert_int_equal(pc_wire_get_u32(buf + 12), N);                                 /* n */
    assert_true(pc_wire_get_u64(buf + 16) == 0x100000009ull);                       /* iteration */
    assert_int_equal(pc_wire_get_u32(buf + 24), E);                                 /* entries */
    assert_int_equal(pc_wire_get_u32(buf + 28), 4 * E);                             /* payload */
    assert_int_equal(pc_wire_get_u32(buf + PC_WIRE_HEADER_BYTES + 4), 0x3e800000u); /* 0.25f */
    assert_int_equal(pc_rt__phat_apply(buf, len, 3, N, 0x100000009ull, outf, E, err, sizeof(err)),
                     PC_OK);
    assert_memory_equal(outf, phat, sizeof(phat));
    struct {
        size_t off;
        uint32_t val;
        const char *needle;
    } pcases[] = {
        {5, 0xF5, "P^ message (codec 245"},                    /* the update's codec */
        {8, 4, "chunk 4"},                                     /* another chunk */
        {12, N + 1, "n 13"},                                   /* another n */
        {16, 8, "iteration 8"},                                /* another iteration */
        {24, E - 1, "7 entries"},                              /* entries */
        {32, 0x3f800000u, "expected 8"},                       /* scale 1.0 */
        {PC_WIRE_HEADER_BYTES + 8, 0x7fc00000u, "not finite"}, /* a NaN */
    };
    for (size_t i = 0; i < sizeof(pcases) / sizeof(pcases[0]); i++) {
        memcpy(bad, buf, len);
        if (pcases[i].off == 5)
            bad[5] = (uint8_t)pcases[i].val;
        else if (pcases[i].off == 16)
            pc_wire_put_u64(bad + 16, pcases[i].val);
        else
            pc_wire_put_u32(bad + pcases[i].off, pcases[i].val);
        for (int j = 0; j < E; j++)
            outf[j] = 7.0f;
        err[0] = 0;
        assert_int_equal(
            pc_rt__phat_apply(bad, len, 3, N, 0x100000009ull, outf, E, err, sizeof(err)),
            PC_EFORMAT);
        for (int j = 0; j < E; j++)
            assert_true(outf[j] == 7.0f);
        if (!strstr(err, pcases[i].needle))
            fail_msg("P^ case %zu: \"%s\" lacks \"%s\"", i, err, pcases[i].needle);
    }
    assert_int_equal(
        pc_rt__phat_apply(buf, len - 1, 3, N, 0x100000009ull, outf, E, err, sizeof(err)),
        PC_EFORMAT);
    assert_int_equal(
        pc_rt__phat_apply(buf, len, 3, N, 0x100000009ull, outf, E - 2, err, sizeof(err)),
        PC_EFORMAT); /* the receiver's rank differs */

    /* The update: Q, or in the warm-up (flag 1) the mean gradient; a view of the values. */
    len = pc_rt__pull_lowrank_encode(buf, 3, N, 9, false, q, QN, 123456, NULL);
    assert_int_equal(len, pc_rt__pull_lowrank_bytes(QN, false));
    assert_int_equal(len, PC_WIRE_HEADER_BYTES + 8 + 4 * QN);
    assert_int_equal(buf[5], 0xF5);
    assert_int_equal(pc_wire_get_u16(buf + 6), 0);           /* flags */
    assert_int_equal(pc_wire_get_u32(buf + 12), N);          /* n: the matrix's */
    assert_int_equal(pc_wire_get_u32(buf + 24), QN);         /* entries */
    assert_int_equal(pc_wire_get_u32(buf + 28), 8 + 4 * QN); /* payload */
    assert_true(pc_wire_get_u64(buf + PC_WIRE_HEADER_BYTES) == 123456);
    assert_int_equal(pc_wire_get_u32(buf + PC_WIRE_HEADER_BYTES + 8 + 4), 0xbf800000u); /* q[1] */
    uint64_t sns = 0;
    const uint8_t *v = NULL;
    assert_int_equal(pc_rt__pull_lowrank_read(buf, len, 3, N, 9, false, false, QN, &v, &sns, NULL,
                                              err, sizeof(err)),
                     PC_OK);
    assert_true(v == buf + PC_WIRE_HEADER_BYTES + 8);
    pc_wire_get_f32s(outq, v, QN);
    assert_memory_equal(outq, q, sizeof(q));
    assert_true(sns == 123456);
    /* The warm-up's: the n-element mean gradient, flag 1. */
    size_t dlen = pc_rt__pull_lowrank_encode(buf, 3, N, 9, true, p, N, 7, NULL);
    assert_int_equal(dlen, PC_WIRE_HEADER_BYTES + 8 + 4 * N);
    assert_int_equal(pc_wire_get_u16(buf + 6), PC_RT_LOWRANK_F_DENSE);
    assert_int_equal(pc_rt__pull_lowrank_read(buf, dlen, 3, N, 9, true, false, N, &v, &sns, NULL,
                                              err, sizeof(err)),
                     PC_OK);
    pc_wire_get_f32s(outp, v, N);
    assert_memory_equal(outp, p, sizeof(p));
    /* The round the worker expects decides: a warm-up update where Q is due, and back. */
    assert_int_equal(pc_rt__pull_lowrank_read(buf, dlen, 3, N, 9, false, false, N, &v, &sns, NULL,
                                              err, sizeof(err)),
                     PC_EFORMAT);
    assert_non_null(strstr(err, "flags 0x1"));
    len = pc_rt__pull_lowrank_encode(buf, 3, N, 9, false, q, QN, 123456, NULL);
    assert_int_equal(pc_rt__pull_lowrank_read(buf, len, 3, N, 9, true, false, QN, &v, &sns, NULL,
                                              err, sizeof(err)),
                     PC_EFORMAT);
    struct {
        size_t off;
        uint64_t val;
        const char *needle;
    } ucases[] = {
        {5, PC_RT_PULL_DENSE, "codec 242"}, /* a plain pull */
        {8, 2, "chunk 2"},
        {12, N + 1, "n 13"},
        {16, 10, "iteration 10"},
        {6, 2, "flags 0x2"},
        {24, QN - 1, "5 entries"},
        {28, 8 + 4 * N, "56 payload bytes"},      /* the length disagrees */
        {32, 0x3f800000u, "scale 1 (a clipping"}, /* scale 1: no coefficient */
        {PC_WIRE_HEADER_BYTES, PC_RT_PULL_MAX_SERVER_NS + 1, "server time"},
        {PC_WIRE_HEADER_BYTES + 8, 0x7f800000u, "not finite"},                /* Q's first: +inf */
        {PC_WIRE_HEADER_BYTES + 8 + 4 * (QN - 1), 0xff800000u, "not finite"}, /* the last */
    };
    for (size_t i = 0; i < sizeof(ucases) / sizeof(ucases[0]); i++) {
        memcpy(bad, buf, len);
        if (ucases[i].off == 5)
            bad[5] = (uint8_t)ucases[i].val;
        else if (ucases[i].off == 6)
            pc_wire_put_u16(bad + 6, (uint16_t)ucases[i].val);
        else if (ucases[i].off == 16 || ucases[i].off == PC_WIRE_HEADER_BYTES)
            pc_wire_put_u64(bad + ucases[i].off, ucases[i].val);
        else
            pc_wire_put_u32(bad + ucases[i].off, (uint32_t)ucases[i].val);
        sns = 77;
        v = NULL;
        err[0] = 0;
        assert_int_equal(pc_rt__pull_lowrank_read(bad, len, 3, N, 9, false, false, QN, &v, &sns,
                                                  NULL, err, sizeof(err)),
                         PC_EFORMAT);
        assert_true(sns == 77 && v == NULL);
        if (!strstr(err, ucases[i].needle))
            fail_msg("update case %zu: \"%s\" lacks \"%s\"", i, err, ucases[i].needle);
    }
    assert_int_equal(pc_rt__pull_lowrank_read(buf, len, 3, N, 9, false, false, QN - 1, &v, &sns,
                                              NULL, err, sizeof(err)),
                     PC_EFORMAT); /* another rank's Q */
    assert_int_equal(pc_rt__pull_lowrank_read(buf, len + 4, 3, N, 9, false, false, QN, &v, &sns,
                                              NULL, err, sizeof(err)),
                     PC_EFORMAT);

    /* How the server stepped: a group's rate (flag 2, an f64 after the time) and round 2's
     * clipping coefficient (the header's scale), read back as sent. */
    rt_lrstep_t how = {.lr = 0.0025, .coef = 0.375f}, got = {0};
    len = pc_rt__pull_lowrank_encode(buf, 3, N, 9, false, q, QN, 11, &how);
    assert_int_equal(len, pc_rt__pull_lowrank_bytes(QN, true));
    assert_int_equal(len, PC_WIRE_HEADER_BYTES + 8 + 8 + 4 * QN);
    assert_int_equal(pc_wire_get_u16(buf + 6), PC_RT_LOWRANK_F_LR);
    assert_int_equal(pc_wire_get_u32(buf + 28), 16 + 4 * QN);
    assert_int_equal(pc_rt__pull_lowrank_read(buf, len, 3, N, 9, false, true, QN, &v, &sns, &got,
                                              err, sizeof(err)),
                     PC_OK);
    assert_true(got.lr == 0.0025 && got.coef == 0.375f && v == buf + PC_WIRE_HEADER_BYTES + 16);
    pc_wire_get_f32s(outq, v, QN);
    assert_memory_equal(outq, q, sizeof(q));
    /* Without them: rate -1, coefficient 1; a coefficient of 1 is not written. */
    how = (rt_lrstep_t){.lr = -1.0, .coef = 1.0f};
    len = pc_rt__pull_lowrank_encode(buf, 3, N, 9, false, q, QN, 11, &how);
    assert_int_equal(len, pc_rt__pull_lowrank_bytes(QN, false));
    assert_int_equal(pc_wire_get_u32(buf + 32), 0);
    assert_int_equal(pc_rt__pull_lowrank_read(buf, len, 3, N, 9, false, false, QN, &v, &sns, &got,
                                              err, sizeof(err)),
                     PC_OK);
    assert_true(got.lr == -1.0 && got.coef == 1.0f);
    /* Refused: the rate where none is expected and back (the flag), a rate below 0 or not
     * finite, a coefficient of -0, 1.5, -0.5 or NaN (torch's for a norm that is not finite:
     * the run diverged, as a dense chunk's values then tell), one on a dense update, one
     * where the caller takes no step (NULL). Nothing written on refusal. */
    struct {
        bool lr_sent, lr_want, dense, step;
        double lr;
        float coef;
        const char *needle;
    } scases[] = {
        {true, false, false, true, 0.1, 1.0f, "flags 0x2"},
        {false, true, false, true, -1.0, 1.0f, "flags 0x2"},
        {true, true, false, true, -0.5, 1.0f, "learning rate -0.5"},
        {true, true, false, true, INFINITY, 1.0f, "learning rate inf"},
        {true, true, false, true, NAN, 1.0f, "learning rate nan"},
        {false, false, false, true, -1.0, 1.5f, "scale 1.5"},
        {false, false, false, true, -1.0, -0.5f, "scale -0.5"},
        {false, false, false, true, -1.0, 0.0f, "scale -0"}, /* -0: other bytes than +0 */
        {false, false, false, true, -1.0, NAN, "scale"},
        {false, false, true, true, -1.0, 0.5f, "scale 0.5"},
        {false, false, false, false, -1.0, 0.5f, "a clipped matrix update"},
    };
    for (size_t i = 0; i < sizeof(scases) / sizeof(scases[0]); i++) {
        size_t nv = scases[i].dense ? N : QN;
        const float *vals = scases[i].dense ? p : q;
        how = (rt_lrstep_t){.lr = scases[i].lr_sent ? 0.1 : -1.0, .coef = scases[i].coef};
        len = pc_rt__pull_lowrank_encode(buf, 3, N, 9, scases[i].dense, vals, nv, 11, &how);
        if (scases[i].lr_sent && scases[i].lr != 0.1) { /* written over the encoded rate */
            uint64_t bits;
            memcpy(&bits, &scases[i].lr, sizeof(bits));
            pc_wire_put_u64(buf + PC_WIRE_HEADER_BYTES + 8, bits);
        }
        if (scases[i].coef == 0.0f) /* -0 in the scale: the encoder writes no 0 coefficient */
            pc_wire_put_u32(buf + 32, 0x80000000u);
        got = (rt_lrstep_t){.lr = 7.0, .coef = 7.0f};
        sns = 77;
        v = NULL;
        err[0] = 0;
        assert_int_equal(pc_rt__pull_lowrank_read(buf, len, 3, N, 9, scases[i].dense,
                                                  scases[i].lr_want, nv, &v, &sns,
                                                  scases[i].step ? &got : NULL, err, sizeof(err)),
                         PC_EFORMAT);
        assert_true(sns == 77 && v == NULL && got.lr == 7.0 && got.coef == 7.0f);
        if (!strstr(err, scases[i].needle))
            fail_msg("step case %zu: \"%s\" lacks \"%s\"", i, err, scases[i].needle);
    }
}

/* The chunk queue: forward order pops the lowest id queued (a front layer overtakes back
 * layers queued before it), fifo the oldest; random interleavings of pushes and pops
 * against a reference (a sorted set, a list). */
static void test_queue_order(void **state)
{
    (void)state;
    enum { CAP = 37 };
    int slots[CAP];
    /* Backward hands chunks over last layer first: forward order reverses that. */
    rt_queue_t q = {.slot = slots, .cap = CAP, .forward = true};
    for (int id = 9; id >= 0; id--)
        pc_rt__queue_push(&q, id);
    for (int id = 0; id < 10; id++)
        assert_int_equal(pc_rt__queue_pop(&q), id);
    assert_int_equal(q.n, 0);
    q = (rt_queue_t){.slot = slots, .cap = CAP, .forward = false};
    for (int id = 9; id >= 0; id--)
        pc_rt__queue_push(&q, id);
    for (int id = 9; id >= 0; id--)
        assert_int_equal(pc_rt__queue_pop(&q), id);
    for (int forward = 0; forward < 2; forward++) {
        q = (rt_queue_t){.slot = slots, .cap = CAP, .forward = forward};
        bool in[CAP] = {false};
        int fifo[4096], fh = 0, ft = 0;
        uint32_t x = 12345;
        for (int step = 0; step < 4000; step++) {
            x = x * 1664525u + 1013904223u;
            int id = (int)((x >> 8) % CAP);
            if (((x >> 20) & 1) && !in[id]) { /* push a chunk not queued (each at most once) */
                in[id] = true;
                fifo[ft++ % 4096] = id;
                pc_rt__queue_push(&q, id);
            } else if (q.n > 0) {
                int want = -1;
                if (forward) {
                    for (int k = 0; k < CAP && want < 0; k++)
                        if (in[k])
                            want = k;
                } else {
                    want = fifo[fh++ % 4096];
                }
                assert_int_equal(pc_rt__queue_peek(&q), want); /* what pop takes next */
                assert_int_equal(pc_rt__queue_pop(&q), want);
                in[want] = false;
            }
        }
    }
}

/* Parse the NULL-terminated words into cfg, without the runtime's check. */
static int parse_only(pc_config_t *cfg, char *err, size_t errlen, ...)
{
    va_list ap;
    va_start(ap, errlen);
    int rc = parse_words(cfg, err, errlen, ap);
    va_end(ap);
    return rc;
}

/* pc_auto_crowding: no warning where every thread has a core; the general warning on a
 * crowded host; and, crowded with every prediction alike (3 ranks on 2 cores, five modes
 * at 158.40 ms: what pc-train --mode auto --model cnn printed there), the warning that
 * the modes cannot be told apart. */
static void test_auto_crowding(void **state)
{
    (void)state;
    pc_auto_result_t *res = calloc(1, sizeof(*res));
    assert_non_null(res);
    char line[1024];
    snprintf(res->measured.crowded_host, sizeof(res->measured.crowded_host), "vm");
    res->measured.crowded_ranks = 3;
    res->measured.crowded_cores = 8;
    for (int k = 0; k < PC_COST_MODES; k++) {
        res->choice.candidate[k] = k != PC_COST_PS_TOPK_INLINE;
        res->choice.pred[k].iter = 0.15840;
    }
    assert_int_equal(pc_auto_crowding(res, line, sizeof(line)), PC_AUTO_ROOMY);
    assert_string_equal(line, "");
    res->measured.crowded_cores = 2;
    assert_int_equal(pc_auto_crowding(res, line, sizeof(line)), PC_AUTO_ALIKE);
    assert_non_null(strstr(line, "auto: warning: the predictions cannot tell the modes apart on "
                                 "vm's machine: 3 ranks may use 2 cores, "));
    assert_non_null(strstr(line, "every mode predicts 158.40 ms; the choice rests on the number "
                                 "of workers alone"));
    /* Within 0.5 % still alike; one mode 1 % off is a real difference. A non-candidate's
     * figure does not count. */
    res->choice.pred[PC_COST_PS_NONE].iter = 0.15840 * 1.004;
    res->choice.pred[PC_COST_PS_TOPK_INLINE].iter = 1.0;
    assert_int_equal(pc_auto_crowding(res, line, sizeof(line)), PC_AUTO_ALIKE);
    res->choice.pred[PC_COST_PS_DGC_PIPELINED].iter = 0.15840 * 1.01;
    assert_int_equal(pc_auto_crowding(res, line, sizeof(line)), PC_AUTO_CROWDED);
    assert_string_equal(line, "auto: warning: 3 ranks on vm's machine may use 2 cores: the "
                              "predictions share them among the threads by CPU time, a coarse "
                              "model, so the fastest mode may not be the one predicted "
                              "(doc/scaling.md)");
    res->measured.crowded_cores = 1;
    assert_int_equal(pc_auto_crowding(res, line, sizeof(line)), PC_AUTO_CROWDED);
    assert_non_null(strstr(line, "may use 1 core: "));
    /* A pool: the chosen mode's 3 compressor threads make a worker 4 threads, 3 ranks 12
     * against 8 cores; with one compressor thread, 6 fit. */
    res->measured.crowded_cores = 8;
    res->choice.best = PC_COST_PS_DGC_PIPELINED;
    res->choice.pred[PC_COST_PS_DGC_PIPELINED].compressors = 1;
    assert_int_equal(pc_auto_crowding(res, line, sizeof(line)), PC_AUTO_ROOMY);
    res->choice.pred[PC_COST_PS_DGC_PIPELINED].compressors = 3;
    assert_int_equal(pc_auto_crowding(res, line, sizeof(line)), PC_AUTO_CROWDED);
    assert_non_null(strstr(line, "3 ranks on vm's machine may use 8 cores: "));
    free(res);
}

/* pc_auto_cores_bound by hand: a machine of 5 ranks on 2 cores (4 workers and the server
 * in the parameter-server layout), ResNet-18's figures of the per-node grid (compute
 * 3.7 s, the ring 0.6 s, DGC's compression 0.06 s, the server 0.1 s). */
static void test_auto_cores_bound(void **state)
{
    (void)state;
    pc_auto_measured_t *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    m->nmachines = 1;
    m->machine[0] = (pc_auto_machine_t){.count = 1, .ranks = 5, .servers = 1, .cores = 2};
    pc_cost_result_t ar = {.compute = 3.7, .comm_busy = 0.6, .server_busy = 0.02, .iter = 3.7};
    /* The allreduce: 5 workers, each backward pass taking 2 of 5 cores' time, and each
     * communication thread the ring and its steps: (2 x 3.7 + 5 x 0.62) / 2. */
    assert_float_equal(pc_auto_cores_bound(m, PC_COST_ALLREDUCE, &ar), (2 * 3.7 + 5 * 0.62) / 2,
                       1e-12);
    /* The parameter servers: 4 workers compressing, one server: (2 x 3.0 + 4 x 0.06 + 0.1) /
     * 2; the ring's figure is not theirs. */
    pc_cost_result_t ps = {
        .compute = 3.0, .compress = 0.06, .server_busy = 0.1, .comm_busy = 9.0, .iter = 3.0};
    assert_float_equal(pc_auto_cores_bound(m, PC_COST_PS_DGC_PIPELINED, &ps),
                       (2 * 3.0 + 4 * 0.06 + 0.1) / 2, 1e-12);
    /* The same ranks on 16 cores: a core per thread (2 x 5), no bound. */
    m->machine[0].cores = 16;
    assert_true(pc_auto_cores_bound(m, PC_COST_ALLREDUCE, &ar) == 0);
    /* 9 threads of the ps layout on 9 cores: none; the allreduce's 10 on 9 cores: W < C, so
     * every pass takes one core: (5 x 3.7 + 5 x 0.62) / 9. */
    m->machine[0].cores = 9;
    assert_true(pc_auto_cores_bound(m, PC_COST_PS_DGC_PIPELINED, &ps) == 0);
    assert_float_equal(pc_auto_cores_bound(m, PC_COST_ALLREDUCE, &ar), (5 * 3.7 + 5 * 0.62) / 9,
                       1e-12);
    /* A pool of 3 compressor threads: 4 workers of 4 threads and the server, 17 on 9 cores;
     * the pool's CPU work is the same (pred's compress), its threads crowd. */
    pc_cost_result_t pool = ps;
    pool.compressors = 3;
    assert_float_equal(pc_auto_cores_bound(m, PC_COST_PS_DGC_PIPELINED, &pool),
                       (4 * 3.0 + 4 * 0.06 + 0.1) / 9, 1e-12);
    m->machine[0].cores = 17;
    assert_true(pc_auto_cores_bound(m, PC_COST_PS_DGC_PIPELINED, &pool) == 0);
    m->machine[0].cores = 9;
    /* The most crowded kind of machine decides: a second kind of 3 ranks on 1 core. */
    m->machine[0].cores = 16;
    m->nmachines = 2;
    m->machine[1] = (pc_auto_machine_t){.count = 4, .ranks = 3, .servers = 0, .cores = 1};
    assert_float_equal(pc_auto_cores_bound(m, PC_COST_ALLREDUCE, &ar), 1 * 3.7 + 3 * 0.62, 1e-12);
    assert_true(pc_auto_cores_bound(NULL, PC_COST_ALLREDUCE, &ar) == 0);
    free(m);
}

/* pc_auto_pool_cap: per kind of machine with workers, its cores less a core per server and
 * per worker's backprop thread, split over its workers; the least kind; 1 to the cap. */
static void test_auto_pool_cap(void **state)
{
    (void)state;
    pc_auto_measured_t *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    assert_int_equal(pc_auto_pool_cap(m), PC_CONFIG_COMPRESSORS_AUTO_CAP); /* no machine */
    m->nmachines = 1;
    m->machine[0] = (pc_auto_machine_t){.count = 1, .ranks = 5, .servers = 1, .cores = 16};
    assert_int_equal(pc_auto_pool_cap(m), (16 - 1 - 4) / 4); /* 2 */
    m->nmachines = 2; /* a roomier kind does not raise it; a servers-only kind has no pool */
    m->machine[1] = (pc_auto_machine_t){.count = 2, .ranks = 3, .servers = 0, .cores = 64};
    assert_int_equal(pc_auto_pool_cap(m), 2);
    m->machine[1] = (pc_auto_machine_t){.count = 1, .ranks = 2, .servers = 2, .cores = 1};
    assert_int_equal(pc_auto_pool_cap(m), 2);
    m->machine[0].cores = 2; /* 5 ranks on 2 cores: no core free, still one thread */
    assert_int_equal(pc_auto_pool_cap(m), 1);
    m->nmachines = 1;
    m->machine[0] = (pc_auto_machine_t){.count = 1, .ranks = 1, .servers = 0, .cores = 64};
    assert_int_equal(pc_auto_pool_cap(m), PC_CONFIG_COMPRESSORS_AUTO_CAP);
    assert_int_equal(pc_auto_pool_cap(NULL), PC_CONFIG_COMPRESSORS_AUTO_CAP);
    free(m);
}

/* Rank r's key, host and cores in pc_auto_group_machines' arrays. */
static void put_rank(char *keys, char *hosts, int *cores, int r, const char *key, const char *host,
                     int ncores)
{
    snprintf(keys + (size_t)r * PC_AUTO_KEY_LEN, PC_AUTO_KEY_LEN, "%s", key);
    snprintf(hosts + (size_t)r * PC_COMM_HOST_LEN, PC_COMM_HOST_LEN, "%s", host);
    cores[r] = ncores;
}

/* Kind k of m is (count, ranks, servers, cores) on host. */
static void expect_kind(const pc_auto_measured_t *m, int k, int count, int ranks, int servers,
                        int cores, const char *host)
{
    const pc_auto_machine_t *x = &m->machine[k];
    if (x->count != count || x->ranks != ranks || x->servers != servers || x->cores != cores ||
        strcmp(x->host, host) != 0)
        fail_msg("kind %d: %d x (%d ranks, %d servers, %d cores) on %s, expected %d x (%d, %d, "
                 "%d) on %s",
                 k, x->count, x->ranks, x->servers, x->cores, x->host, count, ranks, servers, cores,
                 host);
}

/* pc_auto_group_machines: ranks of one key are one machine, whatever their host names; the
 * job's last S ranks are the servers wherever they run; a machine's cores are the most any
 * of its ranks may use; alike machines are one kind; the most crowded machine is named. */
static void test_auto_machines(void **state)
{
    (void)state;
    enum { MAXR = PC_AUTO_MAX_MACHINES + 2 };
    pc_auto_measured_t *m = calloc(1, sizeof(*m));
    char *keys = calloc(MAXR, PC_AUTO_KEY_LEN), *hosts = calloc(MAXR, PC_COMM_HOST_LEN);
    int cores[MAXR];
    assert_true(m && keys && hosts);
    /* One kernel (emulated nodes: three host names), 3 ranks, 1 server: one machine of 3
     * ranks, the last of them the server, on the most cores any rank may use. */
    put_rank(keys, hosts, cores, 0, "boot:k1", "node0", 2);
    put_rank(keys, hosts, cores, 1, "boot:k1", "node1", 4);
    put_rank(keys, hosts, cores, 2, "boot:k1", "node2", 1);
    m->servers = 77; /* not the function's: untouched */
    assert_int_equal(pc_auto_group_machines(m, 3, 1, keys, hosts, cores), PC_OK);
    assert_int_equal(m->nmachines, 1);
    expect_kind(m, 0, 1, 3, 1, 4, "node0");
    assert_string_equal(m->crowded_host, "node0");
    assert_int_equal(m->crowded_ranks, 3);
    assert_int_equal(m->crowded_cores, 4);
    assert_int_equal(m->servers, 77);
    /* ... with 2 servers, and with as many servers as ranks (every rank one). */
    assert_int_equal(pc_auto_group_machines(m, 3, 2, keys, hosts, cores), PC_OK);
    expect_kind(m, 0, 1, 3, 2, 4, "node0");
    assert_int_equal(pc_auto_group_machines(m, 3, 3, keys, hosts, cores), PC_OK);
    expect_kind(m, 0, 1, 3, 3, 4, "node0");
    /* Two machines of 2 ranks, the server on the second: two kinds. */
    put_rank(keys, hosts, cores, 0, "boot:a", "a", 2);
    put_rank(keys, hosts, cores, 1, "boot:a", "a", 2);
    put_rank(keys, hosts, cores, 2, "boot:b", "b", 2);
    put_rank(keys, hosts, cores, 3, "boot:b", "b", 2);
    assert_int_equal(pc_auto_group_machines(m, 4, 1, keys, hosts, cores), PC_OK);
    assert_int_equal(m->nmachines, 2);
    expect_kind(m, 0, 1, 2, 0, 2, "a");
    expect_kind(m, 1, 1, 2, 1, 2, "b");
    /* Two servers at the end of the rank list on two machines (ranks placed round robin):
     * one server each, so both machines are one kind of 2. */
    put_rank(keys, hosts, cores, 1, "boot:b", "b", 2);
    put_rank(keys, hosts, cores, 2, "boot:a", "a", 2);
    assert_int_equal(pc_auto_group_machines(m, 4, 2, keys, hosts, cores), PC_OK);
    assert_int_equal(m->nmachines, 1);
    expect_kind(m, 0, 2, 2, 1, 2, "a");
    /* 3 ranks on a, 1 on b, 2 servers (ranks 2 and 3): one on each machine; b, 1 rank on 2
     * cores, is the less crowded. Cores below 1 count as 1. */
    put_rank(keys, hosts, cores, 1, "boot:a", "a", 0);
    put_rank(keys, hosts, cores, 2, "boot:a", "a", -3);
    put_rank(keys, hosts, cores, 0, "boot:a", "a", 0);
    assert_int_equal(pc_auto_group_machines(m, 4, 2, keys, hosts, cores), PC_OK);
    assert_int_equal(m->nmachines, 2);
    expect_kind(m, 0, 1, 3, 1, 1, "a");
    expect_kind(m, 1, 1, 1, 1, 2, "b");
    assert_string_equal(m->crowded_host, "a");
    assert_int_equal(m->crowded_ranks, 3);
    assert_int_equal(m->crowded_cores, 1);
    /* The most crowded machine need not be the first: a (2 ranks, 8 cores), b (2, 1). */
    for (int r = 0; r < 4; r++)
        put_rank(keys, hosts, cores, r, r < 2 ? "host:a" : "host:b", r < 2 ? "a" : "b",
                 r < 2 ? 8 : 1);
    assert_int_equal(pc_auto_group_machines(m, 4, 1, keys, hosts, cores), PC_OK);
    assert_string_equal(m->crowded_host, "b");
    assert_int_equal(m->crowded_ranks, 2);
    assert_int_equal(m->crowded_cores, 1);
    /* Of equally crowded machines the first: a (2 ranks, 2 cores) before b (1, 1). */
    put_rank(keys, hosts, cores, 0, "host:a", "a", 2);
    put_rank(keys, hosts, cores, 1, "host:a", "a", 2);
    put_rank(keys, hosts, cores, 2, "host:b", "b", 1);
    assert_int_equal(pc_auto_group_machines(m, 3, 1, keys, hosts, cores), PC_OK);
    assert_string_equal(m->crowded_host, "a");
    assert_int_equal(m->crowded_ranks, 2);
    /* More kinds than PC_AUTO_MAX_MACHINES: one rank per machine on r + 1 cores, then 2
     * ranks on 1 core, which takes the place of the least crowded kind (32 cores). */
    char name[32];
    for (int r = 0; r < MAXR; r++) {
        snprintf(name, sizeof(name), "boot:%d", r < PC_AUTO_MAX_MACHINES ? r : -1);
        put_rank(keys, hosts, cores, r, name, "h", r < PC_AUTO_MAX_MACHINES ? r + 1 : 1);
    }
    assert_int_equal(pc_auto_group_machines(m, PC_AUTO_MAX_MACHINES, 0, keys, hosts, cores), PC_OK);
    assert_int_equal(m->nmachines, PC_AUTO_MAX_MACHINES);
    expect_kind(m, PC_AUTO_MAX_MACHINES - 1, 1, 1, 0, PC_AUTO_MAX_MACHINES, "h");
    assert_int_equal(pc_auto_group_machines(m, MAXR, 0, keys, hosts, cores), PC_OK);
    assert_int_equal(m->nmachines, PC_AUTO_MAX_MACHINES);
    expect_kind(m, PC_AUTO_MAX_MACHINES - 1, 1, 2, 0, 1, "h");
    expect_kind(m, 0, 1, 1, 0, 1, "h");
    /* Refused, *m untouched. */
    int before = m->nmachines;
    assert_int_equal(pc_auto_group_machines(m, 0, 0, keys, hosts, cores), PC_EINVAL);
    assert_int_equal(pc_auto_group_machines(m, 3, -1, keys, hosts, cores), PC_EINVAL);
    assert_int_equal(pc_auto_group_machines(m, 3, 1, NULL, hosts, cores), PC_EINVAL);
    assert_int_equal(pc_auto_group_machines(m, 3, 1, keys, NULL, cores), PC_EINVAL);
    assert_int_equal(pc_auto_group_machines(m, 3, 1, keys, hosts, NULL), PC_EINVAL);
    assert_int_equal(pc_auto_group_machines(NULL, 3, 1, keys, hosts, cores), PC_EINVAL);
    assert_int_equal(m->nmachines, before);
    free(m);
    free(keys);
    free(hosts);
}

/* --mode auto: the runtime refuses it unresolved; pc_auto_check refuses the flags auto
 * sets itself, --resume and a --servers that leaves no worker; pc_config_set_given. */
static void test_auto_flags(void **state)
{
    (void)state;
    pc_config_t cfg;
    char err[512];
    assert_int_equal(parse_only(&cfg, err, sizeof(err), "--mode", "auto", NULL), PC_OK);
    assert_int_equal(cfg.mode, PC_MODE_AUTO);
    assert_int_equal(pc_auto_check(&cfg, 3, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_auto_check(&cfg, 1, err, sizeof(err)), PC_OK); /* the allreduce alone */
    assert_int_equal(pc_runtime_check_config(&cfg, 3, err, sizeof(err)), PC_EUSAGE);
    assert_non_null(strstr(err, "--mode auto must be resolved"));
    const struct {
        const char *a, *b, *needle;
        int world;
    } bad[] = {
        {"--compress", "dgc", "--compress dgc with --mode auto: auto chooses the codec", 3},
        {"--pipeline", "off", "--pipeline with --mode auto", 3},
        {"--servers", "3", "--servers 3 with --mode auto leaves no worker among 3 ranks", 3},
        {"--resume", NULL, "--resume with --mode auto", 3},
        {"--pull", "dense", "--pull with --mode auto", 3},
        {"--priority", "fifo", "--priority fifo with --mode auto", 3},
        {"--nesterov", NULL, "--nesterov with --mode auto", 3},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(parse_only(&cfg, err, sizeof(err), "--mode", "auto", "--checkpoint-dir",
                                    "d", bad[i].a, bad[i].b, NULL),
                         PC_OK);
        assert_int_equal(pc_auto_check(&cfg, bad[i].world, err, sizeof(err)), PC_EUSAGE);
        if (!strstr(err, bad[i].needle))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err, bad[i].needle);
    }
    assert_int_equal(parse_only(&cfg, err, sizeof(err), "--mode", "auto", "--servers", "2",
                                "--momentum", "0.5", NULL),
                     PC_OK);
    assert_int_equal(pc_auto_check(&cfg, 5, err, sizeof(err)), PC_OK);
    cfg.mode = PC_MODE_PS;
    assert_int_equal(pc_auto_check(&cfg, 5, err, sizeof(err)), PC_EINVAL);
    assert_true(pc_config_given(&cfg, "momentum"));
    pc_config_set_given(&cfg, "momentum", 0);
    assert_false(pc_config_given(&cfg, "momentum"));
    assert_true(pc_config_given(&cfg, "servers"));
    pc_config_set_given(&cfg, "compress", 1);
    assert_true(pc_config_given(&cfg, "compress"));
    uint64_t before = cfg.given;
    pc_config_set_given(&cfg, "no-such-flag", 1);
    assert_int_equal(cfg.given, before);
}

/* pc_auto_apply: every mode's resolution passes the runtime's check, and the fixed flags
 * it prints parse and check to the same configuration. */
static void test_auto_apply(void **state)
{
    (void)state;
    char err[512], flags[2 * PC_CONFIG_SPEC_LEN];
    for (int i = 0; i < 2 * PC_COST_MODES; i++) {
        /* Twice: without --compressors, and with --compressors 3, which a mode with a pool
         * keeps (and prints) and any other resets to 1. */
        int m = i % PC_COST_MODES;
        const char *pool = i < PC_COST_MODES ? "1" : "3";
        pc_config_t a, b;
        assert_int_equal(parse_only(&a, err, sizeof(err), "--mode", "auto", "--servers", "2",
                                    "--momentum", "0.123456789012", "--compressors", pool, NULL),
                         PC_OK);
        assert_int_equal(pc_auto_apply(&a, (pc_cost_mode_t)m, flags, sizeof(flags)), PC_OK);
        if (pc_runtime_check_config(&a, 5, err, sizeof(err)) != PC_OK)
            fail_msg("%s: %s", pc_cost_mode_name(m), err);
        char copy[sizeof(flags)], *argv[32] = {"prog"};
        int argc = 1;
        snprintf(copy, sizeof(copy), "%s", flags);
        for (char *save, *w = strtok_r(copy, " ", &save); w && argc < 31;
             w = strtok_r(NULL, " ", &save))
            argv[argc++] = w;
        pc_config_defaults(&b);
        pc_flags_group_t g = pc_config_group(&b, "Runtime");
        assert_int_equal(pc_flags_parse(&g, 1, argc, argv, NULL, err, sizeof(err)), PC_OK);
        if (pc_runtime_check_config(&b, 5, err, sizeof(err)) != PC_OK)
            fail_msg("%s: '%s': %s", pc_cost_mode_name(m), flags, err);
        assert_int_equal(a.mode, b.mode);
        assert_int_equal(a.servers, b.servers);
        assert_string_equal(a.compress, b.compress);
        assert_int_equal(a.pipeline, b.pipeline);
        assert_true(a.momentum == b.momentum);
        assert_int_equal(a.mode, m == PC_COST_ALLREDUCE ? PC_MODE_ALLREDUCE : PC_MODE_PS);
        assert_string_equal(a.compressors, b.compressors);
        bool pooled = pc_cost_mode_pooled((pc_cost_mode_t)m);
        assert_string_equal(a.compressors, pooled ? pool : "1");
        assert_true((strstr(flags, "--compressors") != NULL) == (pooled && i >= PC_COST_MODES));
        if (m == PC_COST_PS_POWERSGD_PIPELINED) { /* the run's momentum stays (the servers') */
            assert_string_equal(flags, i < PC_COST_MODES
                                           ? "--mode ps --servers 2 --compress powersgd:rank=2 "
                                             "--pipeline on --momentum 0.123456789012"
                                           : "--mode ps --servers 2 --compress powersgd:rank=2 "
                                             "--pipeline on --momentum 0.123456789012 "
                                             "--compressors 3");
        }
    }
    /* No room for the flags: refused, cfg untouched. */
    pc_config_t c, before;
    char tiny[16];
    assert_int_equal(parse_only(&c, err, sizeof(err), "--mode", "auto", NULL), PC_OK);
    before = c;
    assert_int_equal(pc_auto_apply(&c, PC_COST_PS_DGC_PIPELINED, tiny, sizeof(tiny)), PC_EINVAL);
    assert_memory_equal(&c, &before, sizeof(c));
    pc_config_defaults(&c);
    assert_int_equal(pc_auto_apply(&c, PC_COST_PS_NONE, flags, sizeof(flags)), PC_EINVAL);
    c.mode = PC_MODE_AUTO;
    assert_int_equal(pc_auto_apply(&c, PC_COST_MODES, flags, sizeof(flags)), PC_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_config),
        cmocka_unit_test(test_check_config_combinations),
        cmocka_unit_test(test_check_config_no_effect),
        cmocka_unit_test(test_auto_crowding),
        cmocka_unit_test(test_auto_pool_cap),
        cmocka_unit_test(test_auto_cores_bound),
        cmocka_unit_test(test_auto_machines),
        cmocka_unit_test(test_auto_flags),
        cmocka_unit_test(test_auto_apply),
        cmocka_unit_test(test_pull_round_trips),
        cmocka_unit_test(test_pull_rejections),
        cmocka_unit_test(test_server_time_bound),
        cmocka_unit_test(test_validator_bounds),
        cmocka_unit_test(test_pull_bytes),
        cmocka_unit_test(test_lowrank_messages),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_grad),
        cmocka_unit_test(test_sparse_step),
        cmocka_unit_test(test_done_and_ckpt),
        cmocka_unit_test(test_update_message),
        cmocka_unit_test(test_warmup_message),
        cmocka_unit_test(test_groups_and_lr),
        cmocka_unit_test(test_clip_pieces),
        cmocka_unit_test(test_queue_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
