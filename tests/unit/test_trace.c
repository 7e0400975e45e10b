/* test_trace: the trace loader (pc_trace.h). The CI trace (tests/data/replay-tiny.json)
 * loads with every field, shape and sum as written; each rule of doc/replay.md's
 * "Validation rules" is broken once and refused with PC_EFORMAT and its one-line message,
 * compared whole (jansson's own syntax messages: their start and jansson's words); the
 * file-level failures (no file, a directory, more than 64 MiB) with theirs. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_error.h"
#include "pipecompress/pc_trace.h"

/* A valid trace's top-level fields, and layers to build cases from. */
#define HEAD                                                                                       \
    "\"model\": \"m\", \"device\": \"d\", \"batch\": 8, \"precision\": \"fp32\", "                 \
    "\"source\": \"s\""
#define FC   "{\"name\": \"fc\", \"params\": [[4, 3], [4]], \"forward_ms\": 1, \"backward_ms\": 2}"
#define POOL "{\"name\": \"pool\", \"params\": [], \"forward_ms\": 0.5, \"backward_ms\": 0.5}"
/* A trace of HEAD and the layers L, and a layer "fc" with fields F (after its name). */
#define TRACE(L)  "{" HEAD ", \"layers\": [" L "]}"
#define LAYER(F)  "{\"name\": \"fc\", " F "}"
#define TIMES     "\"forward_ms\": 1, \"backward_ms\": 2"
#define PARAMS(P) LAYER("\"params\": [" P "], " TIMES)

typedef struct bad_case {
    const char *json;
    const char *msg;
    int prefix; /* 1: msg is the message's start (jansson's text follows) */
} bad_case_t;

/* The message of parsing json, which must fail with PC_EFORMAT and return nothing. */
static const char *refused(const char *json, size_t len, char *err, size_t errlen)
{
    pc_trace_t *t = (pc_trace_t *)(uintptr_t)1; /* untouched on failure */
    err[0] = '\0';
    assert_int_equal(pc_trace_parse(json, len, &t, err, errlen), PC_EFORMAT);
    assert_ptr_equal(t, (pc_trace_t *)(uintptr_t)1);
    assert_null(strchr(err, '\n'));
    return err;
}

static void check_cases(const bad_case_t *cases, size_t n)
{
    char err[1024];
    for (size_t i = 0; i < n; i++) {
        refused(cases[i].json, strlen(cases[i].json), err, sizeof(err));
        if (cases[i].prefix ? strncmp(err, cases[i].msg, strlen(cases[i].msg)) != 0
                            : strcmp(err, cases[i].msg) != 0)
            fail_msg("case %zu: %s\n  got:      %s\n  expected: %s%s", i, cases[i].json, err,
                     cases[i].msg, cases[i].prefix ? "..." : "");
    }
}

static const char *tiny_path(char *buf, size_t len)
{
    const char *src = getenv("PC_SRCDIR");
    snprintf(buf, len, "%s/tests/data/replay-tiny.json", src ? src : ".");
    return buf;
}

static void test_tiny(void **state)
{
    (void)state;
    char path[4096], err[256] = "";
    pc_trace_t *t = NULL;
    assert_int_equal(pc_trace_load(tiny_path(path, sizeof(path)), &t, err, sizeof(err)), PC_OK);
    assert_string_equal(err, "");
    assert_string_equal(pc_trace_model(t), "tiny-cnn");
    assert_string_equal(pc_trace_device(t), "synthetic");
    assert_string_equal(pc_trace_precision(t), "fp32");
    assert_non_null(strstr(pc_trace_source(t), "not a measurement"));
    assert_int_equal(pc_trace_batch(t), 32);
    assert_true(pc_trace_optimizer_ms(t) == 0.5);
    assert_int_equal(pc_trace_nlayers(t), 5);
    const char *names[] = {"conv1", "conv2", "pool", "fc1", "fc2"};
    const int nparams[] = {2, 2, 0, 2, 2};
    const double fwd[] = {0.5, 1.0, 0.2, 0.8, 0.1}, bwd[] = {1.0, 2.0, 0.3, 1.6, 0.2};
    for (int i = 0; i < 5; i++) {
        assert_string_equal(pc_trace_layer_name(t, i), names[i]);
        assert_int_equal(pc_trace_nparams(t, i), nparams[i]);
        assert_true(pc_trace_forward_ms(t, i) == fwd[i]);
        assert_true(pc_trace_backward_ms(t, i) == bwd[i]);
    }
    /* conv2.weight (64, 32, 3, 3): a matrix of 64 rows; its bias a vector. */
    const size_t *dims;
    int nd;
    assert_int_equal(pc_trace_param_shape(t, 1, 0, &dims, &nd), PC_OK);
    assert_int_equal(nd, 4);
    assert_int_equal(dims[0], 64);
    assert_int_equal(dims[1], 32);
    assert_int_equal(dims[2], 3);
    assert_int_equal(dims[3], 3);
    assert_int_equal(pc_trace_param_numel(t, 1, 0), 18432);
    assert_int_equal(pc_trace_param_rows(t, 1, 0), 64);
    assert_int_equal(pc_trace_param_numel(t, 1, 1), 64);
    assert_int_equal(pc_trace_param_rows(t, 1, 1), 0);
    assert_int_equal(pc_trace_param_rows(t, 3, 0), 256);
    assert_int_equal(pc_trace_total_params(t), 284362);
    assert_float_equal(pc_trace_compute_ms(t), 7.7, 1e-12);
    /* Out of range: nothing, never a crash. */
    assert_null(pc_trace_layer_name(t, 5));
    assert_null(pc_trace_layer_name(t, -1));
    assert_int_equal(pc_trace_nparams(t, 7), 0);
    assert_int_equal(pc_trace_param_numel(t, 2, 0), 0);
    assert_int_equal(pc_trace_param_rows(t, 0, 2), 0);
    assert_true(pc_trace_forward_ms(t, 9) < 0);
    assert_int_equal(pc_trace_param_shape(t, 2, 0, &dims, &nd), PC_EINVAL);
    pc_trace_destroy(t);
    pc_trace_destroy(NULL);
}

/* Accepted: no optimizer_ms (-1), a layer without parameters, keys in any order, times 0,
 * 8 dimensions, a tensor of exactly 2^31 - 1 elements. */
static void test_valid_edges(void **state)
{
    (void)state;
    const char *json =
        "{\"layers\": [" POOL ", {\"backward_ms\": 0, \"forward_ms\": 0, \"name\": \"x\", "
        "\"params\": [[1, 1, 1, 1, 1, 1, 1, 2], [2147483647]]}], " HEAD "}";
    char err[256];
    pc_trace_t *t = NULL;
    assert_int_equal(pc_trace_parse(json, strlen(json), &t, err, sizeof(err)), PC_OK);
    assert_true(pc_trace_optimizer_ms(t) == -1);
    assert_int_equal(pc_trace_nlayers(t), 2);
    assert_int_equal(pc_trace_nparams(t, 0), 0);
    assert_int_equal(pc_trace_param_numel(t, 1, 0), 2);
    assert_int_equal(pc_trace_param_rows(t, 1, 0), 1);
    assert_int_equal(pc_trace_param_numel(t, 1, 1), 2147483647u);
    assert_int_equal(pc_trace_total_params(t), 2147483649u);
    assert_true(pc_trace_compute_ms(t) == 1.0);
    pc_trace_destroy(t);
}

static void test_bad_top_level(void **state)
{
    (void)state;
    static const bad_case_t cases[] = {
        {"", "not valid JSON: line 1 column 0: '[' or '{' expected near end of file", 0},
        {"{\"model\": ", "not valid JSON: line 1 column ", 1},
        {TRACE(FC) " x", "not valid JSON: line 1 column ", 1},
        {"{" HEAD ", \"batch\": 9, \"layers\": [" FC "]}",
         "not valid JSON: line 1 column 85: duplicate object key near '\"batch\"'", 0},
        /* jansson quotes the bytes near the error: a raw newline there stays one line. */
        {"{\"model\": \"a\\\n\"}", "not valid JSON: line 2 column 0: invalid escape near '\"a\\?'",
         0},
        {"[" TRACE(FC) "]", "the top level is an array, not an object (doc/replay.md)", 0},
        {"{" HEAD ", \"layers\": [" FC "], \"optimiser_ms\": 1}",
         "optimiser_ms: unknown key (a trace has model, device, batch, precision, source, "
         "layers, optimizer_ms)",
         0},
        {"{\"device\": \"d\", \"batch\": 8, \"precision\": \"p\", \"source\": \"s\", "
         "\"layers\": [" FC "]}",
         "model: missing", 0},
        {"{\"model\": 3, \"device\": \"d\"}", "model: an integer, not a string", 0},
        {"{\"model\": \"\"}", "model: empty", 0},
        {"{\"model\": \"a\\nb\"}", "model: control character 0x0a at byte 1 (one line, printable)",
         0},
        {"{\"model\": \"m\", \"device\": null}", "device: null, not a string", 0},
        {"{\"model\": \"m\", \"device\": \"d\"}", "batch: missing", 0},
        {"{\"model\": \"m\", \"device\": \"d\", \"batch\": 0}", "batch: 0 is less than 1", 0},
        {"{\"model\": \"m\", \"device\": \"d\", \"batch\": -4}", "batch: -4 is less than 1", 0},
        {"{\"model\": \"m\", \"device\": \"d\", \"batch\": 2.5}",
         "batch: a real number, not an integer", 0},
        {"{\"model\": \"m\", \"device\": \"d\", \"batch\": \"8\"}",
         "batch: a string, not an integer", 0},
        {"{\"model\": \"m\", \"device\": \"d\", \"batch\": 2147483648}",
         "batch: 2147483648 is more than 2147483647", 0},
        {"{\"model\": \"m\", \"device\": \"d\", \"batch\": 1}", "precision: missing", 0},
        {"{\"model\": \"m\", \"device\": \"d\", \"batch\": 1, \"precision\": \"p\"}",
         "source: missing", 0},
        {"{" HEAD ", \"optimizer_ms\": -1, \"layers\": [" FC "]}", "optimizer_ms: -1 is negative",
         0},
        {"{" HEAD ", \"optimizer_ms\": \"2\", \"layers\": [" FC "]}",
         "optimizer_ms: a string, not a number of milliseconds", 0},
        {"{" HEAD ", \"optimizer_ms\": 4e6, \"layers\": [" FC "]}",
         "optimizer_ms: 4e+06 is more than 3600000 (an hour)", 0},
        {"{" HEAD ", \"optimizer_ms\": 1e400, \"layers\": [" FC "]}",
         "not valid JSON: line 1 column 99: real number overflow near '1e400'", 0},
        {"{" HEAD "}", "layers: missing", 0},
        {"{" HEAD ", \"layers\": {}}", "layers: an object, not an array of layers", 0},
        {TRACE(""), "layers: empty (a trace has at least one layer)", 0},
        {TRACE(POOL), "layers: no layer has parameters (nothing to train or send)", 0},
    };
    check_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

static void test_bad_layers(void **state)
{
    (void)state;
    static const bad_case_t cases[] = {
        {TRACE(FC ", 7"),
         "layers[1]: an integer, not an object with name, params, forward_ms, backward_ms", 0},
        {TRACE("{\"params\": []}"), "layers[0].name: missing", 0},
        {TRACE(FC ", {\"name\": [\"x\"]}"), "layers[1].name: an array, not a string", 0},
        {TRACE("{\"name\": \"\"}"), "layers[0].name: empty", 0},
        {TRACE("{\"name\": \"a\\tb\"}"),
         "layers[0].name: control character 0x09 at byte 1 (one line, printable)", 0},
        {TRACE(LAYER("\"params\": [], " TIMES ", \"backward_mss\": 2")),
         "layers[0] (fc).backward_mss: unknown key (a layer has name, params, forward_ms, "
         "backward_ms)",
         0},
        {TRACE(LAYER(TIMES)),
         "layers[0] (fc).params: missing (a layer without parameters has \"params\": [])", 0},
        {TRACE(LAYER("\"params\": {}, " TIMES)),
         "layers[0] (fc).params: an object, not an array of shapes", 0},
        {TRACE(PARAMS("4")),
         "layers[0] (fc).params[0]: an integer, not a shape (an array of sizes such as "
         "[64, 3, 7, 7])",
         0},
        {TRACE(PARAMS("[4], []")), "layers[0] (fc).params[1]: 0 dimensions (a shape has 1 to 8)",
         0},
        {TRACE(PARAMS("[1, 1, 1, 1, 1, 1, 1, 1, 1]")),
         "layers[0] (fc).params[0]: 9 dimensions (a shape has 1 to 8)", 0},
        {TRACE(PARAMS("[4, 0]")), "layers[0] (fc).params[0][1]: 0 is less than 1", 0},
        {TRACE(PARAMS("[-3]")), "layers[0] (fc).params[0][0]: -3 is less than 1", 0},
        {TRACE(PARAMS("[4, 2.0]")),
         "layers[0] (fc).params[0][1]: a real number, not an integer size", 0},
        {TRACE(PARAMS("[4, \"3\"]")), "layers[0] (fc).params[0][1]: a string, not an integer size",
         0},
        {TRACE(PARAMS("[65536, 32768]")),
         "layers[0] (fc).params[0]: more than 2147483647 elements (a tensor's limit)", 0},
        {TRACE(PARAMS("[3000000000]")),
         "layers[0] (fc).params[0]: more than 2147483647 elements (a tensor's limit)", 0},
        {TRACE(PARAMS("[2147483647, 2147483647, 2147483647, 2147483647]")),
         "layers[0] (fc).params[0]: more than 2147483647 elements (a tensor's limit)", 0},
        {TRACE(LAYER("\"params\": [[4]], \"backward_ms\": 2")),
         "layers[0] (fc).forward_ms: missing", 0},
        {TRACE(LAYER("\"params\": [[4]], \"forward_ms\": 2")),
         "layers[0] (fc).backward_ms: missing", 0},
        {TRACE(POOL ", " LAYER("\"params\": [[4]], \"forward_ms\": 1, \"backward_ms\": -1")),
         "layers[1] (fc).backward_ms: -1 is negative", 0},
        {TRACE(LAYER("\"params\": [[4]], \"forward_ms\": -0.25, \"backward_ms\": 1")),
         "layers[0] (fc).forward_ms: -0.25 is negative", 0},
        {TRACE(LAYER("\"params\": [[4]], \"forward_ms\": \"1\", \"backward_ms\": 1")),
         "layers[0] (fc).forward_ms: a string, not a number of milliseconds", 0},
        {TRACE(LAYER("\"params\": [[4]], \"forward_ms\": 1, \"backward_ms\": null")),
         "layers[0] (fc).backward_ms: null, not a number of milliseconds", 0},
        {TRACE(LAYER("\"params\": [[4]], \"forward_ms\": 1, \"backward_ms\": true")),
         "layers[0] (fc).backward_ms: a boolean, not a number of milliseconds", 0},
        {TRACE(LAYER("\"params\": [[4]], \"forward_ms\": 1, \"backward_ms\": 3600001")),
         "layers[0] (fc).backward_ms: 3.6e+06 is more than 3600000 (an hour)", 0},
        {TRACE(FC ", " POOL ", " FC),
         "layers[2] (fc).name: repeats the name of layers[0] (layer names are unique)", 0},
        {TRACE(POOL ", " FC ", " POOL ", " FC),
         "layers[2] (pool).name: repeats the name of layers[0] (layer names are unique)", 0},
    };
    check_cases(cases, sizeof(cases) / sizeof(cases[0]));
}

/* Limits that need big inputs: a name over 16 KiB, 65 tensors in a layer, 100001
 * layers, a buffer over 64 MiB. */
static void test_bad_limits(void **state)
{
    (void)state;
    char err[1024];
    size_t cap = 8u << 20;
    char *b = malloc(cap);
    assert_non_null(b);
    char *name = malloc(PC_TRACE_MAX_STRING + 2);
    assert_non_null(name);
    memset(name, 'n', PC_TRACE_MAX_STRING + 1);
    name[PC_TRACE_MAX_STRING + 1] = '\0';
    int n = snprintf(b, cap, "{\"model\": \"%s\"}", name);
    free(name);
    assert_string_equal(refused(b, (size_t)n, err, sizeof(err)),
                        "model: 16385 bytes, more than 16384");

    n = snprintf(b, cap, "{" HEAD ", \"layers\": [{\"name\": \"big\", \"params\": [[1]");
    for (int j = 1; j < 65; j++)
        n += snprintf(b + n, cap - (size_t)n, ", [1]");
    n += snprintf(b + n, cap - (size_t)n, "], " TIMES "}]}");
    assert_string_equal(refused(b, (size_t)n, err, sizeof(err)),
                        "layers[0] (big).params: 65 tensors, more than 64");

    n = snprintf(b, cap, "{" HEAD ", \"layers\": [");
    for (int i = 0; i < PC_TRACE_MAX_LAYERS + 1; i++)
        n += snprintf(b + n, cap - (size_t)n, "%s{\"name\": \"l%d\", \"params\": [[1]], " TIMES "}",
                      i ? ", " : "", i);
    n += snprintf(b + n, cap - (size_t)n, "]}");
    assert_true((size_t)n < cap);
    assert_string_equal(refused(b, (size_t)n, err, sizeof(err)),
                        "layers: 100001 layers, more than 100000");
    free(b);

    /* Refused by its length before jansson reads a byte. */
    size_t big = (size_t)PC_TRACE_MAX_BYTES + 1;
    b = malloc(big);
    assert_non_null(b);
    memset(b, ' ', big);
    assert_string_equal(refused(b, big, err, sizeof(err)),
                        "67108865 bytes, more than the 64 MiB a trace may have");
    free(b);
}

static void test_load_failures(void **state)
{
    (void)state;
    char err[1024];
    pc_trace_t *t = NULL;
    assert_int_equal(pc_trace_load("/nonexistent/trace.json", &t, err, sizeof(err)), PC_EIO);
    assert_string_equal(err, "/nonexistent/trace.json: No such file or directory");
    assert_int_equal(pc_trace_load("/", &t, err, sizeof(err)), PC_EIO);
    assert_string_equal(err, "/: Is a directory");
    /* An endless file is cut at the limit, not read whole. */
    assert_int_equal(pc_trace_load("/dev/zero", &t, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "/dev/zero: more than the 64 MiB a trace may have");
    /* A file that is not JSON, and a file the format refuses: the same lines as parse's. */
    char path[] = "/tmp/test_trace_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(TRACE(LAYER("\"params\": [[4]], \"forward_ms\": 1, \"backward_ms\": -1")), f);
    fclose(f);
    assert_int_equal(pc_trace_load(path, &t, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "layers[0] (fc).backward_ms: -1 is negative");
    assert_null(t);
    f = fopen(path, "w");
    fputs("\xff\xfe{}", f);
    fclose(f);
    assert_int_equal(pc_trace_load(path, &t, err, sizeof(err)), PC_EFORMAT);
    assert_string_equal(err, "not valid JSON: line 1 column 0: unable to decode byte 0xff");
    remove(path);
    assert_null(t);
    assert_int_equal(pc_trace_parse(NULL, 0, &t, err, sizeof(err)), PC_EINVAL);
    assert_int_equal(pc_trace_load(NULL, &t, err, sizeof(err)), PC_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny),          cmocka_unit_test(test_valid_edges),
        cmocka_unit_test(test_bad_top_level), cmocka_unit_test(test_bad_layers),
        cmocka_unit_test(test_bad_limits),    cmocka_unit_test(test_load_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
