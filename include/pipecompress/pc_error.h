/* pc_error: the project's error codes, their names and messages.
 *
 * Every library function that can fail returns an int: PC_OK (0) on success, a negative
 * PC_E* code on failure. One X-macro table yields the enum, pc_strerror() and
 * pc_errname(), so a code can never lack its message.
 *
 * Messages: pc_worker_* (driven from the training loop, failing also on the compressor
 * thread's behalf) keep the message on the handle (pc_worker_error); every other function
 * that can fail for a reason worth telling takes (char *err, size_t errlen) and writes a
 * one-line message there through pc_error_fmt; functions that can fail only with
 * PC_EINVAL or PC_ENOMEM take no buffer (pc_strerror says it all). No other way: no
 * printing, no errno. */
#ifndef PC_ERROR_H
#define PC_ERROR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, value, message). Values are stable: they may appear in logs and exit paths. */
#define PC_ERROR_TABLE(X)                                                                          \
    X(OK, 0, "success")                                                                            \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ENOMEM, -2, "out of memory")                                                                 \
    X(EUSAGE, -3, "bad command-line usage")                                                        \
    X(ERANGE, -4, "value out of range")                                                            \
    X(EFULL, -5, "queue full")                                                                     \
    X(EEMPTY, -6, "queue empty")                                                                   \
    X(ETIMEDOUT, -7, "timed out")                                                                  \
    X(ETOPO, -8, "topology or thread binding failed")                                              \
    X(EMPI, -9, "MPI call failed")                                                                 \
    X(ECUDA, -10, "CUDA call failed")                                                              \
    X(ENODEV, -11, "no such device")                                                               \
    X(EIO, -12, "input/output error")                                                              \
    X(EFORMAT, -13, "malformed data")                                                              \
    X(ECODEC, -14, "unknown or misconfigured compressor")                                          \
    X(ETHREAD, -15, "thread creation or join failed")                                              \
    X(ESTATE, -16, "call not valid in the current state")                                          \
    X(EINTR, -17, "interrupted by a signal")                                                       \
    X(ENOENT, -18, "not found")                                                                    \
    X(EINCOMPAT, -19, "belongs to another job or configuration")

typedef enum pc_error {
#define PC_ERROR_ENUM(name, value, msg) PC_##name = (value),
    PC_ERROR_TABLE(PC_ERROR_ENUM)
#undef PC_ERROR_ENUM
} pc_error_t;

/* Write a printf-style message into err (when err is not NULL and errlen > 0) and return
 * code: the one way library functions say why they failed. Thread-safe. */
int pc_error_fmt(int code, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Human-readable message for an error code; never NULL (unknown codes give a fixed
 * string). The returned string is static: do not free. Thread-safe. */
const char *pc_strerror(int err);

/* Symbolic name of an error code without the PC_ prefix ("EINVAL"), or "UNKNOWN".
 * Static string; thread-safe. */
const char *pc_errname(int err);

#ifdef __cplusplus
}
#endif
#endif /* PC_ERROR_H */
