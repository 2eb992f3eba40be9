/* sender_index.c: stable counting sort of edge ids by sender. Large graphs are sorted by several threads: each counts
 * and then places a contiguous chunk of the edges, its cursors starting after the earlier chunks' edges of the same
 * sender, so every row holds its edge ids in increasing order, as in one pass (the result does not depend on the
 * thread count). Serially it took ~2 ms for the 355k candidate pairs of a 5,184-atom water box (one core), at every
 * candidate rebuild of an MD run on the GPU and every host-built graph. */
#include "graph/sender_index.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/error.h"

/* Edges per thread below which another thread does not pay; the threads' cursors (one int32 per thread and sender)
 * are kept within 16 MiB */
#define SENDER_INDEX_MIN_CHUNK 32768
#define SENDER_INDEX_MAX_CURSORS (4 << 20)

static int sender_index_threads(int64_t n_edges, int64_t n_nodes) {
#ifdef _OPENMP
    int64_t t = n_edges / SENDER_INDEX_MIN_CHUNK;
    const int64_t by_memory = SENDER_INDEX_MAX_CURSORS / (n_nodes + 1);
    if (t > omp_get_max_threads()) t = omp_get_max_threads();
    if (t > by_memory) t = by_memory;
    return n_edges <= INT32_MAX && t > 1 ? (int)t : 1;
#else
    (void)n_edges, (void)n_nodes;
    return 1;
#endif
}

static cgq_status sender_index_serial(const int32_t *sender, int64_t n_edges, int64_t n_nodes, int64_t *srow,
                                      int32_t *sedge) {
    memset(srow, 0, sizeof(int64_t) * (size_t)(n_nodes + 1));
    for (int64_t e = 0; e < n_edges; e++) srow[sender[e] + 1]++;
    for (int64_t i = 0; i < n_nodes; i++) srow[i + 1] += srow[i];
    int64_t *cursor = malloc(sizeof(int64_t) * (size_t)(n_nodes + 1));
    if (!cursor) return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory grouping %lld edges by sender", (long long)n_edges);
    memcpy(cursor, srow, sizeof(int64_t) * (size_t)(n_nodes + 1));
    for (int64_t e = 0; e < n_edges; e++) sedge[cursor[sender[e]]++] = (int32_t)e;
    free(cursor);
    return CGQ_STATUS_OK;
}

cgq_status cgq_sender_index(const int32_t *sender, int64_t n_edges, int64_t n_nodes, int64_t *srow, int32_t *sedge) {
    const int T = sender_index_threads(n_edges, n_nodes);
    if (T == 1) return sender_index_serial(sender, n_edges, n_nodes, srow, sedge);
    /* cur[t][i]: first chunk t's count of sender i, then where its next edge of sender i goes (edge ids fit int32) */
    int32_t *cur = malloc(sizeof(int32_t) * (size_t)T * (size_t)n_nodes);
    if (!cur) return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory grouping %lld edges by sender", (long long)n_edges);
#ifdef _OPENMP
#pragma omp parallel num_threads(T)
#endif
    {
#ifdef _OPENMP
        const int t = omp_get_thread_num(), nt = omp_get_num_threads(); /* nt < T where the runtime gives fewer */
#else
        const int t = 0, nt = 1;
#endif
        const int64_t e0 = n_edges * t / nt, e1 = n_edges * (t + 1) / nt;
        int32_t *c = cur + (size_t)t * (size_t)n_nodes;
        memset(c, 0, sizeof(int32_t) * (size_t)n_nodes);
        for (int64_t e = e0; e < e1; e++) c[sender[e]]++;
#ifdef _OPENMP
#pragma omp barrier
#pragma omp for schedule(static)
#endif
        for (int64_t i = 0; i < n_nodes; i++) { /* the row's length; the chunks' offsets within it */
            int32_t n = 0;
            for (int q = 0; q < nt; q++) {
                const int32_t k = cur[(size_t)q * (size_t)n_nodes + i];
                cur[(size_t)q * (size_t)n_nodes + i] = n;
                n += k;
            }
            srow[i + 1] = n;
        }
#ifdef _OPENMP
#pragma omp single
#endif
        {
            srow[0] = 0;
            for (int64_t i = 0; i < n_nodes; i++) srow[i + 1] += srow[i];
        } /* the implied barrier: the row starts are known */
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t i = 0; i < n_nodes; i++)
            for (int q = 0; q < nt; q++) cur[(size_t)q * (size_t)n_nodes + i] += (int32_t)srow[i];
        for (int64_t e = e0; e < e1; e++) sedge[c[sender[e]]++] = (int32_t)e;
    }
    free(cur);
    return CGQ_STATUS_OK;
}
