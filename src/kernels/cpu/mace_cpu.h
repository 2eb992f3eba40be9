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

/* xc may be NULL when the graph has no ghost nodes (n_local == n_nodes). */
cgq_status cgq_mace_cpu_evaluate(const cgq_model *m, const cgq_graph *g, const cgq_exchange *xc, double *energy,
                                 double *node_energy, double *edge_grad, cgq_arena *arena);
#endif
