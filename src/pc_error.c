/* pc_error: messages and names for the error table in pc_error.h. */
#include "config.h"

#include "pipecompress/pc_error.h"

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
