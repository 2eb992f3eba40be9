/* nequip_cpu.c: the NequIP forward and reverse pass on the CPU (float64, OpenMP over atoms): the steps of
 * kernels/nequip_steps.h in loops. Every reduction has one owner, so the result does not depend on the number
 * of threads. */
#include "kernels/cpu/nequip_cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/exchange.h"
#include "graph/sender_index.h"
#include "kernels/cpu/parallel.h"
#include "kernels/nequip_steps.h"

cgq_status cgq_nequip_cpu_evaluate(const cgq_model *m, const cgq_graph *g, const cgq_exchange *xc, double *energy,
                                   double *node_energy, double *edge_grad, cgq_arena *arena) {
    const cgq_nequip *nq = m->nequip;
    nq_ctx c;
    memset(&c, 0, sizeof c);
    c.m = m, c.nq = nq;
    c.N = g->n_local, c.NA = g->n_nodes, c.E = g->n_edges;
    c.species = g->species, c.sender = g->sender, c.row_ptr = g->row_ptr, c.vec = g->vec;
    c.nY = (m->lmax_sh + 1) * (m->lmax_sh + 1), c.nb = nq->n_bessel;
    const int want_grad = edge_grad != NULL, L = nq->n_layers;
    const int64_t N = c.N, NA = c.NA, E = c.E;
    size_t cache_doubles = 0;
    for (int t = 0; t < L; t++) cache_doubles += (size_t)E * (size_t)nq->layers[t].tp.weight_numel;
    const int cache_edges = want_grad && cache_doubles * sizeof(double) <= NQ_EDGE_CACHE_BUDGET_BYTES;
    const size_t need = nq_layout(&c, NULL, want_grad, cache_edges);
    CGQ_TRY(cgq_arena_reserve(arena, need, N, E));
    nq_layout(&c, arena->buf, want_grad, cache_edges);
    if (want_grad) c.edge_grad = edge_grad;
    volatile int oom = 0;
    const size_t work = c.esz + c.nsz;

    cgq_fill_receivers(c.row_ptr, N, c.erecv);
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < E; e++) nq_step_edge(&c, e);

    for (int t = 0; t < L; t++) {
        /* layer 0 reads the type embedding, known for ghosts too; later layers get ghost rows by exchange */
        const int64_t n_up = t == 0 ? NA : N;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n_up; i++) nq_step_up(&c, t, i);
        if (t > 0 && xc) CGQ_TRY(cgq_exchange_array(xc, c.h[t], N, NA, nq_layer_in_dim(nq, t), false));
#define CONV(i, s) nq_step_conv(&c, t, i, s)
        CGQ_PARALLEL_WITH_SCRATCH(N, work, oom, CONV);
#undef CONV
    }
#define ENERGY(i, s) nq_step_energy(&c, i, s)
    CGQ_PARALLEL_WITH_SCRATCH(N, c.nsz, oom, ENERGY);
#undef ENERGY
    cgq_sum_node_energies(c.node_out, N, energy, node_energy);
    if (!want_grad) return CGQ_STATUS_OK;

    CGQ_TRY(cgq_sender_index(c.sender, E, NA, c.srow, c.sedge)); /* for the transposed message gradient */
    if (E) memset(c.edge_grad, 0, sizeof(double) * 3 * (size_t)E);
    if (N) memset(c.gx, 0, sizeof(double) * (size_t)N * c.maxdim);
#define RO_BWD(i, s) nq_step_readout_backward(&c, i, s)
    CGQ_PARALLEL_WITH_SCRATCH(N, c.nsz, oom, RO_BWD);
#undef RO_BWD
    if (nq->zbl) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < N; i++) nq_step_zbl_backward(&c, i);
    }
    for (int t = L - 1; t >= 0; t--) {
#define NODE_BWD(i, s) nq_step_node_backward(&c, t, i, s)
        CGQ_PARALLEL_WITH_SCRATCH(N, c.nsz, oom, NODE_BWD);
#undef NODE_BWD
#define EDGE_BWD(i, s) nq_step_edge_backward(&c, t, i, s)
        CGQ_PARALLEL_WITH_SCRATCH(N, c.esz, oom, EDGE_BWD);
#undef EDGE_BWD
        if (t == 0) break; /* the type embedding does not depend on positions */
#define SEND_BWD(j, s) nq_step_sender_backward(&c, t, j, s)
        CGQ_PARALLEL_WITH_SCRATCH(NA, c.esz, oom, SEND_BWD);
#undef SEND_BWD
        /* gradients that landed on ghost senders belong to their owners */
        if (xc) CGQ_TRY(cgq_exchange_array(xc, c.gh, N, NA, nq_layer_in_dim(nq, t), true));
#define UP_BWD(j, s) nq_step_up_backward(&c, t, j, s)
        CGQ_PARALLEL_WITH_SCRATCH(N, c.nsz, oom, UP_BWD);
#undef UP_BWD
        double *swap = c.gx;
        c.gx = c.gx_prev;
        c.gx_prev = swap;
    }
    return CGQ_STATUS_OK;
}
