/* exchange.c: the ghost-row exchange's two forms behind one call for the host evaluators (see exchange.h). */
#include "common/exchange.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

cgq_status cgq_exchange_check(const cgq_exchange *xc, int64_t n_local, bool ghosts, const char *what) {
    if (!xc) {
        if (!ghosts) return CGQ_STATUS_OK;
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "%s with ghost nodes needs an exchange", what);
    }
    if (!cgq_exchange_has_rows(xc)) {
        if (xc->forward_rows_f32 || xc->reverse_rows_f32)
            return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT,
                            "%s: the exchange's float rows (forward_rows_f32) need the rows form too (forward_rows, "
                            "reverse_rows: evaluators in float64 use them)", what);
        if (xc->forward && xc->reverse) return CGQ_STATUS_OK;
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT,
                        "%s: the exchange needs forward and reverse, or forward_rows and reverse_rows", what);
    }
    if (!xc->reverse_rows)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "%s: the exchange has forward_rows without reverse_rows", what);
    if (!xc->forward_rows_f32 != !xc->reverse_rows_f32)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT,
                        "%s: the exchange has one of forward_rows_f32 and reverse_rows_f32 (give both or neither)",
                        what);
    if (xc->n_send < 0 || xc->n_send > n_local || (xc->n_send && !xc->send_nodes))
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT,
                        "%s: the exchange's send_nodes must list at most the %lld local nodes (n_send %lld)", what,
                        (long long)n_local, (long long)xc->n_send);
    unsigned char *seen = calloc((size_t)n_local + 1, 1);
    if (!seen) return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory checking the exchange's send_nodes");
    for (int64_t i = 0; i < xc->n_send; i++) {
        const int32_t k = xc->send_nodes[i];
        if (k < 0 || k >= n_local || seen[k]) {
            free(seen);
            const char *why = k < 0 || k >= n_local ? "not a local node" : "repeated";
            return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT,
                            "%s: the exchange's send_nodes[%lld] = %d is %s (the send nodes are distinct local nodes, "
                            "0..%lld)", what, (long long)i, (int)k, why, (long long)n_local - 1);
        }
        seen[k] = 1;
    }
    free(seen);
    return CGQ_STATUS_OK;
}

cgq_status cgq_exchange_array(const cgq_exchange *xc, double *data, int64_t n_local, int64_t n_nodes, int width,
                              bool reverse) {
    if (!cgq_exchange_has_rows(xc)) return (reverse ? xc->reverse : xc->forward)(xc->ctx, data, width);
    const int64_t ns = xc->n_send;
    double *ghosts = data + n_local * width;
    /* the rows handed over (the send rows, or the ghost rows) and those taken (the ghost rows, or the sums) go in the
     * caller's staging where it gives one */
    const size_t send_bytes = sizeof(double) * (size_t)(ns * width);
    const size_t ghost_bytes = sizeof(double) * (size_t)((n_nodes - n_local) * width);
    const size_t out_bytes = reverse ? ghost_bytes : send_bytes, in_bytes = reverse ? send_bytes : ghost_bytes;
    size_t cap = 0, cap_in = 0;
    double *staged = xc->stage_rows ? xc->stage_rows(xc->ctx, out_bytes + sizeof(double), &cap) : NULL;
    if (staged && cap < out_bytes) staged = NULL;
    double *staged_in = xc->stage_rows_in ? xc->stage_rows_in(xc->ctx, in_bytes + sizeof(double), &cap_in) : NULL;
    if (staged_in && cap_in < in_bytes) staged_in = NULL;
    /* the send rows (forward) or the sums (reverse) where the caller gives no staging */
    double *rows = NULL;
    if (!(reverse ? staged_in : staged) && !(rows = malloc(send_bytes + sizeof(double))))
        return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory for the exchange's %lld rows", (long long)ns);
    cgq_status st;
    if (!reverse) {
        double *send = staged ? staged : rows;
        for (int64_t i = 0; i < ns; i++)
            memcpy(send + i * width, data + (int64_t)xc->send_nodes[i] * width, sizeof(double) * width);
        st = xc->forward_rows(xc->ctx, send, staged_in ? staged_in : ghosts, width);
        if (staged_in && st == CGQ_STATUS_OK) memcpy(ghosts, staged_in, ghost_bytes);
    } else {
        if (staged) memcpy(staged, ghosts, out_bytes);
        double *sums = staged_in ? staged_in : rows;
        st = xc->reverse_rows(xc->ctx, staged ? staged : ghosts, sums, width);
        for (int64_t i = 0; st == CGQ_STATUS_OK && i < ns; i++) {
            double *dst = data + (int64_t)xc->send_nodes[i] * width;
            for (int k = 0; k < width; k++) dst[k] += sums[i * width + k];
        }
    }
    free(rows);
    return st;
}
