/* pc_time: monotonic clock and sleeping, in nanoseconds. */
#ifndef PC_TIME_H
#define PC_TIME_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Nanoseconds on CLOCK_MONOTONIC (arbitrary origin, never goes back). Thread-safe. */
int64_t pc_time_ns(void);

/* Sleep at least ns nanoseconds (resumes after signals). Thread-safe. */
void pc_time_sleep_ns(int64_t ns);

#ifdef __cplusplus
}
#endif
#endif /* PC_TIME_H */
