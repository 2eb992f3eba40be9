/* parallel.h: the CPU backends' OpenMP loop with per-thread scratch. */
#ifndef CGQ_CPU_PARALLEL_H
#define CGQ_CPU_PARALLEL_H

#include <stdlib.h>

#include "common/error.h"

/* Runs body(i, scratch) for i in [0, n) over OpenMP threads, each with its own scratch of `doubles`; returns
 * OUT_OF_MEMORY from the enclosing function if a scratch could not be allocated (oom: an int flag, 0 before). */
#define CGQ_PARALLEL_WITH_SCRATCH(n, doubles, oom, body)                                                     \
    _Pragma("omp parallel") {                                                                                \
        double *scratch_ = malloc(sizeof(double) * (doubles));                                               \
        if (!scratch_) oom = 1;                                                                              \
        _Pragma("omp for schedule(dynamic, 64)") for (int64_t it_ = 0; it_ < (n); it_++) {                   \
            if (scratch_) body(it_, scratch_);                                                               \
        }                                                                                                    \
        free(scratch_);                                                                                      \
    }                                                                                                        \
    if (oom) return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory for per-thread scratch")

#endif
