/* neighbor.h: receiver-sorted (CSR) neighbor graph from positions, cell and pbc, with periodic images. */
#ifndef CGQ_NEIGHBOR_H
#define CGQ_NEIGHBOR_H

#include <stdint.h>

#include "cgequi.h"

/* Every ordered pair (sender i, receiver j, image shift S) with 0 < |v| < cutoff (strict), where
 * v = x_j - (x_i + S . cell) and S is an integer vector (zero in non-periodic directions).
 * Periodic self-images (i == j, S != 0) are included; the zero-shift self pair is not.
 * Edges are sorted by receiver, then sender, then shift (lexicographic), so the result is
 * deterministic. Arrays are owned by the list and grow as needed (reuse a list between calls). */
typedef struct cgq_neighbor_list {
    int64_t n_nodes;
    int64_t n_edges;
    int64_t *row_ptr; /* [n_nodes+1] */
    int32_t *sender;  /* [n_edges] */
    int32_t *shift;   /* [n_edges*3] integer image shift S of the sender */
    double *vec;      /* [n_edges*3] v = x_receiver - x_sender - S.cell */
    int64_t node_capacity, edge_capacity, geom_capacity; /* rows; sender; shift and vec */
    const int64_t *ids; /* optional, set by the caller: [n_atoms] ids that error messages name atoms by */
    int senders_only;   /* optional, set by the caller: fill row_ptr and sender only (shift and vec are left as they
                           are), in one pass over the receivers instead of two (an MD code's candidate pairs) */
} cgq_neighbor_list;

/* Builds the list. Fails with CGQ_STATUS_BAD_INPUT (clear message naming the atoms) on NaN/inf
 * positions, a singular cell with a periodic direction, or two atoms closer than 1e-8 A (same
 * image); with CGQ_STATUS_OUT_OF_MEMORY if arrays cannot grow. n_atoms == 0 gives an empty list.
 * cell: rows are lattice vectors a, b, c. Triclinic cells and cells thinner than the cutoff are
 * handled (enough images are enumerated). Cost O(N) with a cell list for large N.
 * Details: nl must be zero-initialised before first use. pbc == NULL means non-periodic; cell
 * may be NULL (or zero, or garbage) when no direction is periodic: rows of non-periodic
 * directions are ignored (treated as zero). Positions need not lie inside the cell. Each vec is
 * computed per component exactly as x_j - (x_i + ((S0*a + S1*b) + S2*c)) and an edge is kept
 * iff |vec|^2 < cutoff^2. Invalid nl/cutoff/n_atoms -> CGQ_STATUS_INVALID_ARGUMENT. On any
 * failure the list is left empty (n_nodes = n_edges = 0) but keeps its memory. Atom indices in
 * messages are 0-based. With OpenMP the result is bitwise identical for any thread count. */
cgq_status cgq_neighbor_list_build(cgq_neighbor_list *nl, int64_t n_atoms, const double *positions,
                                   const double cell[9], const int32_t pbc[3], double cutoff);
/* The same with rows only for receivers 0 .. n_receivers-1 (every atom is a sender; later rows are
 * empty): a domain's local atoms as receivers of its local and ghost atoms. */
cgq_status cgq_neighbor_list_build_receivers(cgq_neighbor_list *nl, int64_t n_atoms, int64_t n_receivers,
                                             const double *positions, const double cell[9], const int32_t pbc[3],
                                             double cutoff);
void cgq_neighbor_list_free(cgq_neighbor_list *nl);

#endif
