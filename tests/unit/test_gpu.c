/* test_gpu: pc_gpu, the device layer of device tensors: its host emulation on every
 * machine (copies move the bytes, events and waits are counted, bad arguments refused),
 * and, built as test_gpu_cuda (PC_TEST_ON_DEVICE), the same calls on CUDA device 0: data
 * through device memory on streams, an event ordering a copy after another stream's, the
 * calling thread's device. Without a device test_gpu_cuda exits 77 (skipped). */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_error.h"
#include "pipecompress/pc_gpu.h"

#include "../../cuda/pc_cuda_err.h"
#include "../../src/gpu/gpu_mem.h"

#ifdef PC_TEST_ON_DEVICE
#define TARGET 0
#else
#define TARGET PC_GPU_EMULATE
#endif

static pc_gpu_t *open_target(void)
{
    pc_gpu_t *g = NULL;
    char err[256] = "";
    int rc = pc_gpu_create(TARGET, &g, err, sizeof(err));
    if (rc != PC_OK)
        fail_msg("pc_gpu_create(%d): %s", TARGET, err);
    return g;
}

/* Bad devices: one line each, nothing made. */
static void test_create_errors(void **state)
{
    (void)state;
    pc_gpu_t *g = NULL;
    char err[256] = "";
    assert_int_equal(pc_gpu_create(-7, &g, err, sizeof(err)), PC_EINVAL);
    assert_non_null(strstr(err, "-7"));
    assert_null(g);
    int n = pc_cuda_device_count();
    assert_int_equal(pc_gpu_create(n, &g, err, sizeof(err)), PC_ENODEV);
    assert_true(strstr(err, "no usable CUDA device") || strstr(err, "no CUDA device"));
    assert_null(strchr(err, '\n'));
    assert_null(g);
    pc_gpu_destroy(NULL);
}

/* The launchers' convention (cuda/pc_cuda_err.h): a failed call's message names what was
 * done, CUDA's words and the file and line of the call, on one line. */
static void test_error_convention(void **state)
{
    (void)state;
    char err[256] = "";
    pc_cuda_err_t e = {.code = 2, .file = "/some/build/../cuda/codec_api.cu", .line = 77};
    assert_int_equal(pc_cuda_err_fail(PC_ENOMEM, &e, err, sizeof(err), "scratch for %d", 5),
                     PC_ENOMEM);
    assert_non_null(strstr(err, "scratch for 5: "));
    assert_non_null(strstr(err, " (cuda/codec_api.cu:77)"));
    char want[256]; /* CUDA's words are the build's own */
    snprintf(want, sizeof(want), "scratch for 5: %s (cuda/codec_api.cu:77)",
             pc_cuda_error_string(2));
    assert_string_equal(err, want);
    /* No CUDA error recorded: the PC_* code's words, no place. */
    assert_int_equal(pc_cuda_err_fail(PC_ECUDA, NULL, err, sizeof(err), "sync"), PC_ECUDA);
    snprintf(want, sizeof(want), "sync: %s", pc_strerror(PC_ECUDA));
    assert_string_equal(err, want);
    /* A launcher's own check failed (PC_CUDA_FAIL: code 0, the place): rc's words, the place. */
    pc_cuda_err_t own = {.code = 0, .file = "../cuda/codec_select.cu", .line = 312};
    assert_int_equal(pc_cuda_err_fail(PC_ECUDA, &own, err, sizeof(err), "topk"), PC_ECUDA);
    snprintf(want, sizeof(want), "topk: %s (cuda/codec_select.cu:312)", pc_strerror(PC_ECUDA));
    assert_string_equal(err, want);
    /* A real failed call on this machine's device 0 (a GPU's memory is there; otherwise the
     * runtime refuses, or the build has no CUDA): either it works or the line says where. */
    void *p = NULL;
    int rc = pc_gpu__alloc(0, 64, true, &p, err, sizeof(err));
    if (rc == PC_OK) {
        pc_gpu__free(0, p);
    } else {
        assert_null(p);
        assert_non_null(strstr(err, "64 bytes on CUDA device 0: "));
        assert_true(strstr(err, " (cuda/pc_gpu.cu:") || strstr(err, " (src/gpu/cuda_none.c:"));
        assert_null(strchr(err, '\n'));
    }
    /* Host memory (device -1) through the same wrapper: zeroed, copied, freed. */
    unsigned char src[16] = {1, 2, 3}, *h = NULL;
    assert_int_equal(pc_gpu__alloc(-1, sizeof(src), true, (void **)&h, err, sizeof(err)), PC_OK);
    assert_int_equal(h[15], 0);
    assert_int_equal(pc_gpu__copy(-1, h, src, sizeof(src), true, NULL, true, err, sizeof(err)),
                     PC_OK);
    assert_memory_equal(h, src, sizeof(src));
    assert_int_equal(pc_gpu__copy(-1, NULL, src, 4, true, NULL, true, err, sizeof(err)), PC_EINVAL);
    pc_gpu__free(-1, h);
}

/* Host memory to the device, device to device through a second stream ordered by an event,
 * back to the host: the bytes survive; the counts say what was done. */
static void test_round_trip(void **state)
{
    (void)state;
    pc_gpu_t *g = open_target();
    char err[256] = "", desc[128];
    pc_gpu_describe(g, desc, sizeof(desc));
#ifdef PC_TEST_ON_DEVICE
    assert_non_null(strstr(desc, "cuda:0"));
    char bus[32];
    assert_int_equal(pc_gpu_pci_bus_id(g, bus, sizeof(bus)), PC_OK);
    assert_non_null(strchr(bus, ':'));
#else
    assert_string_equal(desc, "emulated (host memory)");
    char bus[32];
    assert_int_equal(pc_gpu_pci_bus_id(g, bus, sizeof(bus)), PC_ENODEV);
#endif
    assert_int_equal(pc_gpu_use(g, err, sizeof(err)), PC_OK);
    enum { N = 1 << 20 };
    float *h, *back, *d;
    assert_int_equal(pc_gpu_host_alloc(g, N * sizeof(float), (void **)&h, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_gpu_host_alloc(g, N * sizeof(float), (void **)&back, err, sizeof(err)),
                     PC_OK);
    assert_int_equal(pc_gpu_alloc(g, N * sizeof(float), (void **)&d, err, sizeof(err)), PC_OK);
    for (size_t i = 0; i < N; i++) {
        assert_true(h[i] == 0.0f); /* zeroed */
        h[i] = (float)i * 0.25f - 3.0f;
    }
    pc_gpu_stream_t up, down;
    assert_int_equal(pc_gpu_stream_create(g, false, &up, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_gpu_stream_create(g, true, &down, err, sizeof(err)), PC_OK);
    pc_gpu_event_t *done;
    assert_int_equal(pc_gpu_event_create(g, &done, err, sizeof(err)), PC_OK);
    /* An event never recorded is done. */
    assert_int_equal(pc_gpu_event_sync(done, err, sizeof(err)), PC_OK);
    assert_int_equal(
        pc_gpu_copy(g, d, h, N * sizeof(float), PC_GPU_TO_DEVICE, up, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_gpu_event_record(done, up, err, sizeof(err)), PC_OK);
    /* The copy back runs on another stream, after the first copy (the event). */
    assert_int_equal(pc_gpu_stream_wait(down, done, err, sizeof(err)), PC_OK);
    assert_int_equal(
        pc_gpu_copy(g, back, d, N * sizeof(float), PC_GPU_TO_HOST, down, err, sizeof(err)), PC_OK);
    assert_int_equal(pc_gpu_stream_sync(g, down, err, sizeof(err)), PC_OK);
    assert_memory_equal(back, h, N * sizeof(float));
    assert_int_equal(pc_gpu_copy(g, back, d, 4, (pc_gpu_dir_t)7, down, err, sizeof(err)),
                     PC_EINVAL);
    pc_gpu_stats_t st;
    pc_gpu_stats(g, &st);
    assert_int_equal(st.to_device_copies, 1);
    assert_int_equal(st.to_device_bytes, N * sizeof(float));
    assert_int_equal(st.to_host_copies, 1);
    assert_int_equal(st.to_host_bytes, N * sizeof(float));
    assert_int_equal(st.records, 1);
    assert_int_equal(st.waits, 1);
    assert_int_equal(st.event_syncs, 1);
    pc_gpu_event_destroy(done);
    pc_gpu_event_destroy(NULL);
    pc_gpu_stream_destroy(g, up);
    pc_gpu_stream_destroy(g, down);
    pc_gpu_free(g, d);
    pc_gpu_host_free(g, h);
    pc_gpu_host_free(g, back);
    pc_gpu_free(g, NULL);
    pc_gpu_host_free(g, NULL);
    assert_int_equal(pc_gpu_device(g), TARGET);
    pc_gpu_destroy(g);
}

int main(void)
{
#ifdef PC_TEST_ON_DEVICE
    if (pc_cuda_device_count() == 0) {
        char why[160];
        pc_cuda_status(why, sizeof(why));
        printf("skipped: no CUDA device (%s): pc_gpu's CUDA side did not run\n", why);
        return 77;
    }
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_error_convention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
