/* mace_cpu.c: the CPU backend: runs the MACE steps of kernels/mace_steps.h in OpenMP loops, float64. */
#include "kernels/cpu/mace_cpu.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/exchange.h"
#include "graph/sender_index.h"
#include "kernels/cpu/parallel.h"
#include "kernels/mace_steps.h"

void cgq_arena_free(cgq_arena *a) {
    free(a->buf);
    a->buf = NULL;
    a->cap = 0;
}

cgq_status cgq_arena_reserve(cgq_arena *a, size_t need, int64_t n_atoms, int64_t n_edges) {
    if (need <= a->cap) return CGQ_STATUS_OK;
    double *nbuf = realloc(a->buf, sizeof(double) * (need + need / 16 + 1));
    if (!nbuf)
        return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory: the CPU evaluator needs %.1f MB of work memory "
                        "for %lld atoms and %lld edges", 8e-6 * (double)need, (long long)n_atoms, (long long)n_edges);
    a->buf = nbuf;
    a->cap = need + need / 16 + 1;
    return CGQ_STATUS_OK;
}

void cgq_fill_receivers(const int64_t *row_ptr, int64_t n_local, int32_t *erecv) {
    for (int64_t i = 0; i < n_local; i++)
        for (int64_t e = row_ptr[i]; e < row_ptr[i + 1]; e++) erecv[e] = (int32_t)i;
}

void cgq_sum_node_energies(const double *node_out, int64_t n_local, double *energy, double *node_energy) {
    double total = 0.0;
    for (int64_t i = 0; i < n_local; i++) total += node_out[i];
    *energy = total;
    if (node_energy && n_local) memcpy(node_energy, node_out, sizeof(double) * (size_t)n_local);
}

cgq_status cgq_mace_cpu_evaluate(const cgq_model *m, const cgq_graph *g, const cgq_exchange *xc, double *energy,
                                 double *node_energy, double *edge_grad, cgq_arena *arena) {
    mace_ctx c;
    memset(&c, 0, sizeof c);
    c.m = m;
    c.N = g->n_local, c.NA = g->n_nodes, c.E = g->n_edges;
    c.species = g->species, c.sender = g->sender, c.row_ptr = g->row_ptr, c.vec = g->vec;
    c.nY = (m->lmax_sh + 1) * (m->lmax_sh + 1), c.nb = m->n_bessel;
    const int want_grad = edge_grad != NULL, L = m->n_layers;
    const int64_t N = c.N, NA = c.NA, E = c.E;
    const int cache_edges = want_grad && mace_cache_doubles(m, E) * sizeof(double) <= CGQ_EDGE_CACHE_BUDGET_BYTES;
    const size_t need = mace_layout(&c, NULL, want_grad, cache_edges, 0);
    CGQ_TRY(cgq_arena_reserve(arena, need, N, E));
    mace_layout(&c, arena->buf, want_grad, cache_edges, 0);
    if (want_grad) c.edge_grad = edge_grad; /* written in place */
    volatile int oom = 0;
    const size_t work = c.esz + c.nsz;

    cgq_fill_receivers(c.row_ptr, N, c.erecv);
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < E; e++) mace_step_edge_geometry(&c, e);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < NA; i++) mace_step_embed(&c, i);

    for (int t = 0; t < L; t++) {
        /* layer 0 reads the embedding, known for ghosts too; later layers get ghost rows by exchange */
        const int64_t n_up = t == 0 ? NA : N;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n_up; i++) mace_step_up(&c, t, i);
        if (t > 0 && xc) CGQ_TRY(cgq_exchange_array(xc, c.ls[t].hu, N, NA, m->layers[t].linear_up.out.dim, false));
#define CONV(i, s) mace_step_conv_node(&c, t, i, s, 1)
        CGQ_PARALLEL_WITH_SCRATCH(N, work, oom, CONV);
#undef CONV
    }
#define ENERGY(i, s) mace_step_energy(&c, i, s)
    CGQ_PARALLEL_WITH_SCRATCH(N, c.nsz, oom, ENERGY);
#undef ENERGY
    cgq_sum_node_energies(c.node_out, N, energy, node_energy);
    if (!want_grad) return CGQ_STATUS_OK;

    CGQ_TRY(cgq_sender_index(c.sender, E, NA, c.srow, c.sedge)); /* for the transposed message gradient */
    if (E) memset(c.edge_grad, 0, sizeof(double) * 3 * (size_t)E);
    if (N) memset(c.gh, 0, sizeof(double) * (size_t)N * m->layers[L - 1].product_linear.out.dim);
    for (int t = L - 1; t >= 0; t--) {
#define NODE_BWD(i, s) mace_step_node_backward(&c, t, i, s)
        CGQ_PARALLEL_WITH_SCRATCH(N, c.nsz, oom, NODE_BWD);
#undef NODE_BWD
#define EDGE_BWD(i, s) mace_step_edge_backward(&c, t, i, s)
        CGQ_PARALLEL_WITH_SCRATCH(N, c.esz, oom, EDGE_BWD);
#undef EDGE_BWD
        if (t == 0) break; /* the embedding does not depend on positions */
#define SEND_BWD(j, s) mace_step_sender_backward(&c, t, j, s)
        CGQ_PARALLEL_WITH_SCRATCH(NA, c.esz, oom, SEND_BWD);
#undef SEND_BWD
        /* gradients that landed on ghost senders belong to their owners */
        if (xc) CGQ_TRY(cgq_exchange_array(xc, c.ghu, N, NA, m->layers[t].linear_up.out.dim, true));
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < N; j++) mace_step_up_backward(&c, t, j);
        double *swap = c.gh;
        c.gh = c.gh_prev;
        c.gh_prev = swap;
    }
    return CGQ_STATUS_OK;
}
