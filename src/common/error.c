/* error.c: thread-local error messages and status names. */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define CGQ_ERROR_CAPACITY 2048
static _Thread_local char g_last_error[CGQ_ERROR_CAPACITY];

const char *cgq_status_string(cgq_status status) {
    switch (status) {
    case CGQ_STATUS_OK: return "ok";
    case CGQ_STATUS_INVALID_ARGUMENT: return "invalid argument";
    case CGQ_STATUS_BAD_FILE: return "bad model file";
    case CGQ_STATUS_UNSUPPORTED: return "unsupported";
    case CGQ_STATUS_BAD_INPUT: return "bad input structure";
    case CGQ_STATUS_OUT_OF_MEMORY: return "out of memory";
    case CGQ_STATUS_DEVICE_ERROR: return "device error";
    }
    return "unknown status";
}

const char *cgq_last_error(void) { return g_last_error; }

void cgq_clear_error(void) { g_last_error[0] = '\0'; }

cgq_status cgq_fail(cgq_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
    va_end(ap);
    return s;
}
