/* sender_index.c: stable counting sort of edge ids by sender. */
#include "graph/sender_index.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

cgq_status cgq_sender_index(const int32_t *sender, int64_t n_edges, int64_t n_nodes, int64_t *srow, int32_t *sedge) {
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
