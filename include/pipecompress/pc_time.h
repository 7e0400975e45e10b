/* pc_time: monotonic clock and sleeping, in nanoseconds; the median of repeated timings. */
#ifndef PC_TIME_H
#define PC_TIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Nanoseconds on CLOCK_MONOTONIC (arbitrary origin, never goes back). Thread-safe. */
int64_t pc_time_ns(void);

/* Sleep at least ns nanoseconds (resumes after signals). Thread-safe. */
void pc_time_sleep_ns(int64_t ns);

/* The median of v[0..n) (the mean of the two middle values for even n; 0 for n = 0):
 * what every measurement of the project keeps of its repetitions, so that one outlier (a
 * preemption on a shared machine) does not move it. Sorts v in place (the caller's).
 * Thread-safe on distinct v. */
double pc_time_median(double *v, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* PC_TIME_H */
