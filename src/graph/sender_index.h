/* sender_index.h: the edges of a receiver-sorted graph grouped by sender, for the transposed (sender-side)
 * gradient sums. */
#ifndef CGQ_SENDER_INDEX_H
#define CGQ_SENDER_INDEX_H

#include <stdint.h>

#include "cgequi.h"

/* srow[n_nodes + 1]: row starts by sender; sedge[n_edges]: edge ids, increasing within each row (a stable
 * counting sort, so sums over a row have a fixed order). */
cgq_status cgq_sender_index(const int32_t *sender, int64_t n_edges, int64_t n_nodes, int64_t *srow, int32_t *sedge);

#endif
