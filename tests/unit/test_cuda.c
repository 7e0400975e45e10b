/* test_cuda: without a device the CUDA layer reports none and declines cleanly; with one,
 * the probe kernel matches its CPU reference exactly. Without a device (or without CUDA in
 * the build) the self-test cannot run: the program prints why and exits 77, which automake
 * counts as SKIP, not PASS. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "pipecompress/pc_cuda.h"
#include "pipecompress/pc_error.h"

static void test_count_never_fails(void **state)
{
    (void)state;
    int n = pc_cuda_device_count();
    assert_true(n >= 0);
    if (!pc_cuda_built())
        assert_int_equal(n, 0);
    fprintf(stderr, "cuda: built %s, %d device(s)\n", pc_cuda_built() ? "yes" : "no", n);
}

static void test_selftest(void **state)
{
    (void)state;
    char err[256] = "";
    int rc = pc_cuda_selftest(err, sizeof(err));
    if (pc_cuda_device_count() == 0) {
        assert_int_equal(rc, PC_ENODEV); /* the clean CPU fallback */
        skip();
    }
    if (rc != PC_OK)
        fail_msg("CUDA self-test: %s", err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_never_fails),
        cmocka_unit_test(test_selftest),
    };
    /* CMocka returns the number of failed tests. */
    if (cmocka_run_group_tests(tests, NULL, NULL) != 0)
        return 1;
    if (pc_cuda_device_count() == 0) {
        char why[160];
        pc_cuda_status(why, sizeof(why));
        printf("skipped: no CUDA device (%s): the probe kernel did not run\n", why);
        return 77;
    }
    return 0;
}
