/* error.h: recording the thread-local "what went wrong and how to fix it" message behind a status. */
#ifndef CGQ_ERROR_H
#define CGQ_ERROR_H

#include "cgequi.h"

/* Record a formatted message for status s and return s: `return cgq_fail(CGQ_STATUS_BAD_FILE, ...)`. */
cgq_status cgq_fail(cgq_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cgq_clear_error(void);

#define CGQ_TRY(expr)                                                                              \
    do {                                                                                           \
        cgq_status cgq_try_status_ = (expr);                                                       \
        if (cgq_try_status_ != CGQ_STATUS_OK) return cgq_try_status_;                              \
    } while (0)

#endif
