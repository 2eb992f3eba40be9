/* mace_cpu.h: float64 reference evaluation of a MACE model on a receiver-sorted graph: energy,
 * per-node energies and dE/dv per edge (hand-written reverse mode, no autograd). */
#ifndef CGQ_MACE_CPU_H
#define CGQ_MACE_CPU_H
#include <stddef.h>

#include "cgequi.h"
#include "model/model.h"

/* Grow-only work memory reused across calls. */
typedef struct cgq_arena {
    double *buf;
    size_t cap;
} cgq_arena;
void cgq_arena_free(cgq_arena *a);
/* Grows the arena to at least `need` doubles (with 1/16 to spare); OUT_OF_MEMORY names the system's size. */
cgq_status cgq_arena_reserve(cgq_arena *a, size_t need, int64_t n_atoms, int64_t n_edges);
/* The CPU backends' shared steps of a graph: each edge's receiver (erecv[e], from the CSR rows), and the energy as the
 * sum of the local nodes' energies in node order (deterministic), copied out per node when asked. */
void cgq_fill_receivers(const int64_t *row_ptr, int64_t n_local, int32_t *erecv);
void cgq_sum_node_energies(const double *node_out, int64_t n_local, double *energy, double *node_energy);

/* xc may be NULL when the graph has no ghost nodes (n_local == n_nodes). */
cgq_status cgq_mace_cpu_evaluate(const cgq_model *m, const cgq_graph *g, const cgq_exchange *xc, double *energy,
                                 double *node_energy, double *edge_grad, cgq_arena *arena);
#endif
