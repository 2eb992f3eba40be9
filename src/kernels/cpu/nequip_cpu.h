/* nequip_cpu.h: float64 reference evaluation of a NequIP model on a receiver-sorted graph: energy,
 * per-node energies and dE/dv per edge (hand-written reverse mode, no autograd). */
#ifndef CGQ_NEQUIP_CPU_H
#define CGQ_NEQUIP_CPU_H

#include "cgequi.h"
#include "kernels/cpu/mace_cpu.h" /* cgq_arena */
#include "model/model.h"

/* Same contract as cgq_mace_cpu_evaluate: vec = x_receiver - x_sender (NequIP's own edge vector is its
 * negative; the conversion happens inside), xc may be NULL without ghost nodes. */
cgq_status cgq_nequip_cpu_evaluate(const cgq_model *m, const cgq_graph *g, const cgq_exchange *xc, double *energy,
                                   double *node_energy, double *edge_grad, cgq_arena *arena);
#endif
