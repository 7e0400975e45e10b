/* pc_time: monotonic clock and sleeping. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "pipecompress/pc_time.h"

int64_t pc_time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double pc_time_median(double *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void pc_time_sleep_ns(int64_t ns)
{
    if (ns <= 0)
        return;
    struct timespec req = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    while (nanosleep(&req, &req) != 0 && errno == EINTR) {
    }
}
