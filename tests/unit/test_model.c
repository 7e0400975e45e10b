/* test_model: model files round-trip exactly; corrupt, truncated, foreign and mismatched
 * files are refused without touching the model; the save is atomic (no temporary left).
 * pc_model_profile finds the parameterised layers and leaves the gradients of a real
 * backward (its times are only checked to be positive: no timing is asserted).
 * pc_model_create_on: the CPU through it, and a device that does not exist (on a machine
 * without a GPU, or a library without CUDA: any device) refused with PC_ENODEV and the CUDA
 * runtime's reason; the device engine itself is tests/unit/test_model_cuda.c's. */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_data.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_model.h"

static void corrupt_at(const char *src, const char *dst, long off, int truncate_by)
{
    FILE *f = fopen(src, "rb");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)len);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    if (off >= 0)
        b[off] ^= 0x40;
    f = fopen(dst, "wb");
    fwrite(b, 1, (size_t)(len - truncate_by), f);
    fclose(f);
    free(b);
}

static void test_round_trip_and_rejections(void **state)
{
    (void)state;
    char dir[] = "/tmp/pc-test-model-XXXXXX", path[128], bad[128];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/m.pcm", dir);
    snprintf(bad, sizeof(bad), "%s/bad.pcm", dir);
    pc_model_t *a, *b, *c;
    assert_int_equal(pc_model_create(PC_MODEL_MLP, 4, 1, 28, 28, 10, 0, &a), PC_OK);
    assert_int_equal(pc_model_create(PC_MODEL_MLP, 4, 1, 28, 28, 10, 0, &b), PC_OK);
    assert_int_equal(pc_model_create(PC_MODEL_CNN, 4, 1, 28, 28, 10, 0, &c), PC_OK);
    pc_model_init(a, 1);
    pc_model_init(b, 2);
    char err[512];
    assert_int_equal(pc_model_save(a, path, err, sizeof(err)), PC_OK);
    char tmp[160];
    snprintf(tmp, sizeof(tmp), "%s/m.pcm.tmp.%d", dir, (int)getpid());
    assert_int_not_equal(access(tmp, F_OK), 0);
    pc_model_kind_t kind;
    int ch, h, w, cl;
    assert_int_equal(pc_model_file_info(path, &kind, &ch, &h, &w, &cl, err, sizeof(err)), PC_OK);
    assert_true(kind == PC_MODEL_MLP && ch == 1 && h == 28 && w == 28 && cl == 10);
    assert_int_equal(pc_model_load(b, path, err, sizeof(err)), PC_OK);
    assert_memory_equal(pc_model_params(a), pc_model_params(b),
                        pc_model_nparams(a) * sizeof(float));
    /* Every rejection leaves the model as it was. */
    pc_model_init(b, 3);
    float *before = malloc(pc_model_nparams(b) * sizeof(float));
    memcpy(before, pc_model_params(b), pc_model_nparams(b) * sizeof(float));
    struct {
        long off;
        int cut;
        const char *needle;
    } cases[] = {{60, 0, "parameter checksum"},
                 {20, 0, "header checksum"},
                 {0, 0, "bad magic"},
                 {-1, 4, "truncated"},
                 {-1, 100000000, "shorter"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        long len;
        FILE *f = fopen(path, "rb");
        fseek(f, 0, SEEK_END);
        len = ftell(f);
        fclose(f);
        corrupt_at(path, bad, cases[i].off, cases[i].cut > len ? (int)len - 10 : cases[i].cut);
        assert_int_equal(pc_model_load(b, bad, err, sizeof(err)), PC_EFORMAT);
        if (!strstr(err, cases[i].needle))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err, cases[i].needle);
        assert_memory_equal(pc_model_params(b), before, pc_model_nparams(b) * sizeof(float));
    }
    FILE *f = fopen(bad, "ab");
    fputc(0, f);
    fclose(f);
    corrupt_at(path, bad, -1, 0);
    f = fopen(bad, "ab");
    fputc(7, f);
    fclose(f);
    assert_int_equal(pc_model_load(b, bad, err, sizeof(err)), PC_EFORMAT);
    assert_non_null(strstr(err, "trailing"));
    assert_int_equal(pc_model_load(c, path, err, sizeof(err)), PC_EFORMAT);
    assert_non_null(strstr(err, "different model"));
    assert_int_equal(pc_model_load(b, "/nonexistent/x.pcm", err, sizeof(err)), PC_EIO);
    assert_int_equal(pc_model_save(a, "/nonexistent/x.pcm", err, sizeof(err)), PC_EIO);
    free(before);
    pc_model_destroy(a);
    pc_model_destroy(b);
    pc_model_destroy(c);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_profile(void **state)
{
    (void)state;
    enum { B = 8 };
    pc_dataset_t ds;
    assert_int_equal(pc_data_synthetic(B, 3, 0, &ds), PC_OK);
    const struct {
        pc_model_kind_t kind;
        int nlayers;
    } cases[] = {{PC_MODEL_MLP, 3}, {PC_MODEL_CNN, 4}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        pc_model_t *m, *ref;
        assert_int_equal(
            pc_model_create(cases[i].kind, B, 1, (int)ds.rows, (int)ds.cols, ds.classes, 0.5f, &m),
            PC_OK);
        assert_int_equal(pc_model_create(cases[i].kind, B, 1, (int)ds.rows, (int)ds.cols,
                                         ds.classes, 0.5f, &ref),
                         PC_OK);
        pc_model_init(m, 5);
        pc_model_init(ref, 5);
        pc_cost_layer_t layers[8];
        int nl = 0, tl[16];
        assert_int_equal(pc_model_profile(m, ds.images, ds.labels, B, 2, layers, 8, &nl, tl),
                         PC_OK);
        assert_int_equal(nl, cases[i].nlayers);
        for (int t = 0; t < pc_model_ntensors(m); t++) /* weight, bias per layer */
            assert_int_equal(tl[t], t / 2);
        for (int l = 0; l < nl; l++)
            assert_true(layers[l].fwd > 0 && layers[l].bwd > 0 && isfinite(layers[l].fwd) &&
                        isfinite(layers[l].bwd));
        /* The gradients of its last pass (seed 1, noise = reps), as a plain pass gives. */
        float loss;
        int ok;
        assert_int_equal(
            pc_model_forward(ref, ds.images, ds.labels, B, true, 1, 2, NULL, &loss, &ok), PC_OK);
        assert_int_equal(pc_model_backward(ref, ds.labels, B, NULL), PC_OK);
        for (int t = 0; t < pc_model_ntensors(m); t++)
            assert_memory_equal(pc_model_tensor_grad(m, t), pc_model_tensor_grad(ref, t),
                                sizeof(float) * pc_model_tensor_size(m, t));
        assert_int_equal(pc_model_profile(m, ds.images, ds.labels, B, 0, layers, 8, &nl, tl),
                         PC_EINVAL);
        assert_int_equal(pc_model_profile(m, ds.images, ds.labels, B + 1, 1, layers, 8, &nl, tl),
                         PC_EINVAL);
        assert_int_equal(
            pc_model_profile(m, ds.images, ds.labels, B, 1, layers, cases[i].nlayers - 1, &nl, tl),
            PC_EINVAL);
        pc_model_destroy(m);
        pc_model_destroy(ref);
    }
    pc_data_free(&ds);
}

static void test_create_on(void **state)
{
    (void)state;
    char err[256] = "", why[160];
    pc_model_t *m = NULL, *ref;
    int n = pc_cuda_status(why, sizeof(why));
    /* A device that does not exist: PC_ENODEV, one line with the runtime's reason. */
    assert_int_equal(
        pc_model_create_on(PC_MODEL_CNN, 4, 1, 28, 28, 10, 0.5f, n, &m, err, sizeof(err)),
        PC_ENODEV);
    assert_null(m);
    assert_null(strchr(err, '\n'));
    if (n == 0) {
        char want[256];
        snprintf(want, sizeof(want), "no usable CUDA device: %s", why);
        assert_string_equal(err, want);
        if (!pc_cuda_built())
            assert_string_equal(err, "no usable CUDA device: built without CUDA");
    } else {
        assert_non_null(strstr(err, "no CUDA device"));
    }
    assert_int_equal(
        pc_model_create_on(PC_MODEL_MLP, 4, 1, 28, 28, 10, 0, -2, &m, err, sizeof(err)), PC_EINVAL);
    assert_int_equal(
        pc_model_create_on(PC_MODEL_CNN, 4, 1, 6, 6, 10, 0, PC_MODEL_CPU, &m, err, sizeof(err)),
        PC_EINVAL);
    assert_non_null(strstr(err, "cannot build the cnn model"));
    /* The CPU through pc_model_create_on: the same model as pc_model_create's. */
    enum { B = 4 };
    pc_dataset_t ds;
    assert_int_equal(pc_data_synthetic(B, 3, 0, &ds), PC_OK);
    assert_int_equal(pc_model_create_on(PC_MODEL_CNN, B, 1, (int)ds.rows, (int)ds.cols, ds.classes,
                                        0.5f, PC_MODEL_CPU, &m, err, sizeof(err)),
                     PC_OK);
    assert_int_equal(
        pc_model_create(PC_MODEL_CNN, B, 1, (int)ds.rows, (int)ds.cols, ds.classes, 0.5f, &ref),
        PC_OK);
    assert_int_equal(pc_model_device(m), PC_MODEL_CPU);
    assert_null(pc_model_stream(m));
    assert_string_equal(pc_model_error(m), "");
    assert_int_equal(pc_model_init(m, 7), PC_OK);
    assert_int_equal(pc_model_init(ref, 7), PC_OK);
    size_t np = pc_model_nparams(m);
    float *p = malloc(np * sizeof(float)), *g = malloc(np * sizeof(float));
    assert_true(p && g);
    assert_int_equal(pc_model_params_get(m, p), PC_OK);
    assert_memory_equal(p, pc_model_params(ref), np * sizeof(float));
    /* A batch in pc_model_host_alloc's memory (malloc here), loss and correct not asked. */
    float *x;
    uint8_t *y;
    assert_int_equal(pc_model_host_alloc(m, sizeof(float) * ds.rows * ds.cols * B, (void **)&x),
                     PC_OK);
    assert_int_equal(pc_model_host_alloc(m, B, (void **)&y), PC_OK);
    memcpy(x, ds.images, sizeof(float) * ds.rows * ds.cols * B);
    memcpy(y, ds.labels, B);
    assert_int_equal(pc_model_forward(m, x, y, B, true, 1, 2, NULL, NULL, NULL), PC_OK);
    assert_int_equal(pc_model_backward(m, y, B, NULL), PC_OK);
    assert_int_equal(pc_model_sync(m), PC_OK);
    float loss;
    int correct;
    assert_int_equal(
        pc_model_forward(ref, ds.images, ds.labels, B, true, 1, 2, NULL, &loss, &correct), PC_OK);
    assert_int_equal(pc_model_backward(ref, ds.labels, B, NULL), PC_OK);
    assert_int_equal(pc_model_grads_get(m, g), PC_OK);
    assert_memory_equal(g, pc_model_tensor_grad(ref, 0), np * sizeof(float));
    assert_int_equal(pc_model_backward(m, y, B + 1, NULL), PC_EINVAL);
    pc_model_host_free(m, x);
    pc_model_host_free(m, y);
    /* params_set then get. */
    for (size_t i = 0; i < np; i++)
        p[i] = (float)i;
    assert_int_equal(pc_model_params_set(m, p), PC_OK);
    assert_int_equal(pc_model_params_get(m, g), PC_OK);
    assert_memory_equal(g, p, np * sizeof(float));
    free(p);
    free(g);
    pc_model_destroy(m);
    pc_model_destroy(ref);
    pc_data_free(&ds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_rejections),
        cmocka_unit_test(test_profile),
        cmocka_unit_test(test_create_on),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
