/* pairs_build.cuh: the candidate pairs of an MD domain built on the GPU from the points' positions
 * (cgq_evaluator_build_pairs): every local point (receiver) with every other point closer than the radius (cutoff plus
 * skin), each receiver's candidates in increasing point order, and the candidates grouped by sender node, increasing
 * within each node: the same list and grouping as cgq_neighbor_list_build_receivers and cgq_sender_index give on the
 * host (which cost 3-4 ms and ~2.5 ms per LAMMPS re-neighboring on the H100 machine's host, session 31).
 * The points go into cells of the radius's side (integer atomics place them in an arbitrary order), rows are counted
 * and filled by one warp per receiver over its 27 cells, and every row is then sorted by rank (its keys are distinct),
 * so the result does not depend on the order the atomics gave. */
#ifndef CGQ_PAIRS_BUILD_CUH
#define CGQ_PAIRS_BUILD_CUH

#include <stdint.h>

/* Cells of side h over the points' bounding box (from lo); n cells along each axis */
struct cell_grid {
    double lo[3], inv_h;
    int n[3];
};

__device__ __forceinline__ int cell_coord(const cell_grid &g, const double *x, int d) {
    const int c = (int)((x[d] - g.lo[d]) * g.inv_h);
    return c < 0 ? 0 : c >= g.n[d] ? g.n[d] - 1 : c;
}

/* |x_i - x_j|^2 as the host's neighbor list computes it, without fused multiply-adds, so that both keep the same
 * candidates */
__device__ __forceinline__ double exact_dist2(const double *xi, const double *xj) {
    const double v0 = __dsub_rn(xi[0], xj[0]), v1 = __dsub_rn(xi[1], xj[1]), v2 = __dsub_rn(xi[2], xj[2]);
    return __dadd_rn(__dadd_rn(__dmul_rn(v0, v0), __dmul_rn(v1, v1)), __dmul_rn(v2, v2));
}

/* cell_of[p] = p's cell; cell_count[c] += 1 */
__global__ void k_cell_count(int64_t n_points, const double *x, cell_grid g, int32_t *cell_of, int32_t *cell_count) {
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < n_points; p += (int64_t)gridDim.x * blockDim.x) {
        const double *xp = x + 3 * p;
        const int c = (cell_coord(g, xp, 2) * g.n[1] + cell_coord(g, xp, 1)) * g.n[0] + cell_coord(g, xp, 0);
        cell_of[p] = c;
        atomicAdd(&cell_count[c], 1);
    }
}

/* cell_points[cell_start[c] ..]: the points of cell c, in the order the atomics give (cell_fill starts at zero) */
__global__ void k_cell_place(int64_t n_points, const int32_t *cell_of, const int64_t *cell_start, int32_t *cell_fill,
                             int32_t *cell_points) {
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < n_points; p += (int64_t)gridDim.x * blockDim.x) {
        const int c = cell_of[p];
        cell_points[cell_start[c] + atomicAdd(&cell_fill[c], 1)] = (int32_t)p;
    }
}

/* One warp per receiver i over the 27 cells around it: count (out == nullptr: row_count[i], and the first pair closer
 * than 1e-8 A as (i << 32 | j) in *overlap) or write its candidates from row_start[i] on, in any order (row_fill
 * starts at zero) */
__global__ void k_cand_rows(int64_t n_local, const double *x, cell_grid g, const int32_t *cell_of,
                            const int64_t *cell_start, const int32_t *cell_points, double r2, int32_t *row_count,
                            unsigned long long *overlap, const int64_t *row_start, int32_t *row_fill, int32_t *out) {
    const int lane = threadIdx.x % CGQ_WARP;
    const int64_t warps = (int64_t)gridDim.x * blockDim.x / CGQ_WARP;
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CGQ_WARP; i < n_local; i += warps) {
        const double *xi = x + 3 * i;
        const int c = cell_of[i], c0 = c % g.n[0], c1 = c / g.n[0] % g.n[1], c2 = c / g.n[0] / g.n[1];
        int count = 0;
        for (int a2 = max(c2 - 1, 0); a2 <= min(c2 + 1, g.n[2] - 1); a2++)
            for (int a1 = max(c1 - 1, 0); a1 <= min(c1 + 1, g.n[1] - 1); a1++) {
                /* the three cells along x are adjacent in cell_points */
                const int row = (a2 * g.n[1] + a1) * g.n[0];
                const int64_t b = cell_start[row + max(c0 - 1, 0)], e = cell_start[row + min(c0 + 1, g.n[0] - 1) + 1];
                for (int64_t k = b + lane; k < e; k += CGQ_WARP) {
                    const int32_t j = cell_points[k];
                    if (j == i) continue;
                    const double d2 = exact_dist2(xi, x + 3 * (int64_t)j);
                    if (d2 >= r2) continue;
                    if (out) {
                        out[row_start[i] + atomicAdd(&row_fill[i], 1)] = j;
                    } else {
                        count++;
                        if (d2 < 1e-16) atomicMin(overlap, (unsigned long long)i << 32 | (unsigned)j);
                    }
                }
            }
        if (!out) {
            count = warp_total(count);
            if (lane == 0) row_count[i] = count;
        }
    }
}

/* Each segment [seg[s], seg[s+1]) of keys (distinct within a segment) sorted ascending from in to out: one warp per
 * segment, each key placed at its rank (rows of ~70 candidates: a few thousand comparisons per warp) */
__global__ void k_sort_segments(int64_t n_seg, const int64_t *seg, const int32_t *in, int32_t *out) {
    const int lane = threadIdx.x % CGQ_WARP;
    const int64_t warps = (int64_t)gridDim.x * blockDim.x / CGQ_WARP;
    for (int64_t s = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CGQ_WARP; s < n_seg; s += warps) {
        const int64_t b = seg[s], e = seg[s + 1];
        for (int64_t k = b + lane; k < e; k += CGQ_WARP) {
            const int32_t key = in[k];
            int64_t rank = 0;
            for (int64_t m = b; m < e; m++) rank += in[m] < key;
            out[b + rank] = key;
        }
    }
}

/* The sender node of candidate c (n_nodes: a copy without a node, which goes to a last group of its own) counted
 * (fill == nullptr: node_count) or c placed in its node's group (at srow[node] + fill[node], any order) */
__global__ void k_group_by_sender(int64_t n_cand, const int32_t *cand, const int32_t *point_node, int32_t n_nodes,
                                  int32_t *node_count, const int64_t *srow, int32_t *fill, int32_t *grouped) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < n_cand; c += (int64_t)gridDim.x * blockDim.x) {
        const int32_t node = point_node[cand[c]];
        const int32_t s = node >= 0 ? node : n_nodes;
        if (fill) grouped[srow[s] + atomicAdd(&fill[s], 1)] = (int32_t)c;
        else atomicAdd(&node_count[s], 1);
    }
}

#endif
