/* evaluator_impl.h: the evaluator's state, shared by the evaluation entry points (evaluator.c, pairs.c). */
#ifndef CGQ_EVALUATOR_IMPL_H
#define CGQ_EVALUATOR_IMPL_H

#include "cgequi.h"
#include "graph/neighbor.h"
#include "kernels/cpu/mace_cpu.h"
#include "model/model.h"

/* cgq_evaluator_set_pairs: the evaluator's copy of the candidate list, and the host graph of a step
 * (CPU backend, or GPU models outside the v2 kernels) */
typedef struct cgq_pairs {
    cgq_pair_list list; /* points at the arrays below */
    int set;
    int32_t *species, *candidate, *point_node;
    int64_t *row_ptr, *point_id;
    int64_t *g_row;   /* [n_local+1] this step's graph */
    int32_t *g_sender;
    double *g_vec, *g_grad;
    int64_t g_caps[4]; /* capacities of g_row, g_sender, g_vec, g_grad (elements) */
    cgq_neighbor_list nl; /* cgq_evaluator_build_pairs on the host */
} cgq_pairs;

struct cgq_evaluator {
    const cgq_model *model;
    cgq_evaluator_params params;
    cgq_arena arena;
    struct cgq_gpu *gpu; /* NULL: CPU backend */
    char backend[64];
    cgq_neighbor_list nl;
    int32_t *species;
    double *edge_grad;
    double *node_energy;
    int64_t species_cap, edge_cap;
    cgq_pairs pairs;
};

/* *p grows to at least need elements of elsize bytes (kept contents; capacity in *cap). */
cgq_status cgq_grow_array(void **p, int64_t *cap, int64_t need, size_t elsize);
void cgq_pairs_free(cgq_pairs *p);
/* Forces (sum over edges sent minus received of dE/dv), the virial -sum v (x) dE/dv (symmetrised when sym) and
 * per-node virials (each edge's half to its receiver and to its sender) from edge gradients, in a fixed order:
 * receiver rows, edges in CSR order. forces [n_nodes*3] and node_virials [n_nodes*9] may be NULL. */
void cgq_edge_forces(const cgq_graph *g, const double *grad, int sym, double *forces, double virial[9],
                     double *node_virials);
/* params.num_threads > 0: the OpenMP threads of one API call; returns the caller's setting for _leave. */
int cgq_threads_enter(const cgq_evaluator *ev);
void cgq_threads_leave(int prev);

#endif
