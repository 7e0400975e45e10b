/* test_time: the monotonic clock never goes back, a sleep lasts at least what it asked,
 * and pc_time_median (every measurement's median) for odd, even, one, none, unsorted and
 * repeated values, sorting its input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pipecompress/pc_time.h"

static void test_clock_and_sleep(void **state)
{
    (void)state;
    int64_t a = pc_time_ns();
    pc_time_sleep_ns(2000000);
    int64_t b = pc_time_ns();
    assert_true(b - a >= 2000000); /* at least: no upper bound is asserted */
    pc_time_sleep_ns(0);
    pc_time_sleep_ns(-5);
    assert_true(pc_time_ns() >= b);
}

static void test_median(void **state)
{
    (void)state;
    double odd[] = {5, 1, 4, 2, 3};
    assert_true(pc_time_median(odd, 5) == 3);
    for (int i = 0; i < 5; i++) /* sorted in place */
        assert_true(odd[i] == i + 1);
    double even[] = {10, 2, 8, 4};
    assert_true(pc_time_median(even, 4) == 6); /* (4 + 8) / 2 */
    double one[] = {7.25};
    assert_true(pc_time_median(one, 1) == 7.25);
    assert_true(pc_time_median(NULL, 0) == 0);
    /* One outlier (a preemption) does not move the median of three. */
    double rep[] = {1e-3, 1.0, 1e-3};
    assert_true(pc_time_median(rep, 3) == 1e-3);
    double neg[] = {-1, -3, -2};
    assert_true(pc_time_median(neg, 3) == -2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clock_and_sleep),
        cmocka_unit_test(test_median),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
