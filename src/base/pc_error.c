/* pc_error: messages and names for the error table in pc_error.h. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>

#include "pipecompress/pc_error.h"

int pc_error_fmt(int code, char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

const char *pc_strerror(int err)
{
    switch (err) {
#define PC_ERROR_MSG(name, value, msg)                                                             \
    case (value):                                                                                  \
        return (msg);
        PC_ERROR_TABLE(PC_ERROR_MSG)
#undef PC_ERROR_MSG
    default:
        return "unknown error";
    }
}

const char *pc_errname(int err)
{
    switch (err) {
#define PC_ERROR_NAME(name, value, msg)                                                            \
    case (value):                                                                                  \
        return #name;
        PC_ERROR_TABLE(PC_ERROR_NAME)
#undef PC_ERROR_NAME
    default:
        return "UNKNOWN";
    }
}
