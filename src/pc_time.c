/* pc_time: monotonic clock and sleeping. */
#include "config.h"

#include <errno.h>
#include <time.h>

#include "pipecompress/pc_time.h"

int64_t pc_time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void pc_time_sleep_ns(int64_t ns)
{
    if (ns <= 0)
        return;
    struct timespec req = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    while (nanosleep(&req, &req) != 0 && errno == EINTR) {
    }
}
