/* test_model: model files round-trip exactly; corrupt, truncated, foreign and mismatched
 * files are refused without touching the model; the save is atomic (no temporary left).
 * pc_model_profile finds the parameterised layers and leaves the gradients of a real
 * backward (its times are only checked to be positive: no timing is asserted). */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_rejections),
        cmocka_unit_test(test_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
