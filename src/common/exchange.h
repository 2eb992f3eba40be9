/* exchange.h: the per-layer ghost-row exchange (cgq_exchange) in either of its forms, for the host evaluators, and the
 * check of what a caller passed. */
#ifndef CGQ_EXCHANGE_H
#define CGQ_EXCHANGE_H

#include <stdbool.h>

#include "cgequi.h"

/* Whether xc gives the rows form (forward_rows set) */
static inline bool cgq_exchange_has_rows(const cgq_exchange *xc) { return xc && xc->forward_rows; }

/* CGQ_STATUS_OK if xc can serve a domain of n_local local nodes: NULL only without ghost nodes; otherwise one complete
 * form, and in the rows form send_nodes distinct local nodes. what: the caller, for the message. */
cgq_status cgq_exchange_check(const cgq_exchange *xc, int64_t n_local, bool ghosts, const char *what);

/* data [n_nodes][width] (n_local local rows, then the ghost rows) through xc in whichever form it has. forward: the
 * ghost rows filled; reverse: the ghost rows' contributions added into their owners' local rows (the ghost rows are
 * left undefined). The rows form needs n_send x width doubles of scratch, allocated here, and hands its rows over in
 * the caller's staging where xc gives one (stage_rows). */
cgq_status cgq_exchange_array(const cgq_exchange *xc, double *data, int64_t n_local, int64_t n_nodes, int width,
                              bool reverse);

#endif
