/* graph_build.cuh: the graph of one step built on the GPU from positions and the candidate pairs
 * (cgq_evaluate_pairs), and the forces and virials summed per node from the edge gradients.
 * Edges keep candidate order; every sum has a fixed order (integer scans; one thread per node row; a
 * fixed order for the virial), so the results are bitwise reproducible. Integer atomics only
 * record the first bad candidate or point for the error message. */
#ifndef CGQ_GRAPH_BUILD_CUH
#define CGQ_GRAPH_BUILD_CUH

#include <stdint.h>

#define CGQ_SCAN_THREADS 256
#define CGQ_SCAN_ITEMS 4 /* per thread: a block scans 1024 flags */
#define CGQ_SCAN_TILE (CGQ_SCAN_THREADS * CGQ_SCAN_ITEMS)

/* What the host needs of a step's graph before it plans the step, in one small copy (pairs_count): the edge count
 * and the first offender of each input error (0x7f7f7f7f: none). The rows themselves are downloaded only where the
 * edges do not fit one chunk (plan_chunks): the full row copy and its second round trip were ~30 us of every step
 * with the GPU idle (bench/timeline.py, session 40). */
struct pair_summary {
    int32_t bad[2];    /* k_pair_keep: first kept candidate whose sender has no node; first of zero length */
    int32_t nonfinite; /* k_pair_keep: first point with a non-finite coordinate */
    int32_t pad;
    int64_t n_edges; /* k_pair_rows: row_ptr[n_local] */
};

/* Exclusive scans of int32 flags into int64: each tile of CGQ_SCAN_TILE flags counted (by the kernel that makes the
 * flags, or k_scan_tiles), the tiles' counts scanned by one block, then each tile's flags scanned from its offset.
 * Integer sums: the same in any order. */

/* The exclusive scan of v over the block and the block's total (sh: a value per warp); warp scans by shuffles, then
 * the warps' totals (a tree of barriers per step took ~10 us per 750k flags, session 50) */
__device__ int64_t block_exclusive_scan(int64_t v, int64_t *sh, int64_t *total) {
    constexpr int NW = CGQ_SCAN_THREADS / CGQ_WARP;
    const int lane = threadIdx.x % CGQ_WARP, w = threadIdx.x / CGQ_WARP;
    int64_t x = v;
#pragma unroll
    for (int d = 1; d < CGQ_WARP; d <<= 1) {
        const int64_t y = CGQ_SHFL_UP_W(x, d, CGQ_WARP);
        if (lane >= d) x += y;
    }
    if (lane == CGQ_WARP - 1) sh[w] = x;
    __syncthreads();
    int64_t before = 0, all = 0;
#pragma unroll
    for (int k = 0; k < NW; k++) {
        const int64_t s = sh[k];
        before += k < w ? s : 0;
        all += s;
    }
    __syncthreads(); /* sh is free again */
    *total = all;
    return before + x - v;
}

/* The block's total of v, into tile_sum[blockIdx.x] (the tile counts of the flag kernels) */
__device__ void block_count_tile(int v, int64_t *tile_sum) {
    __shared__ int64_t sh[CGQ_SCAN_THREADS / CGQ_WARP];
    int64_t total;
    block_exclusive_scan(v, sh, &total);
    if (threadIdx.x == 0) tile_sum[blockIdx.x] = total;
}

/* keep[c] = candidate c is an edge this step (|x_recv - x_sender| < cutoff); s->bad[0] = first kept candidate
 * whose sender has no graph node, s->bad[1] = first kept candidate of zero length (overlapping atoms),
 * s->nonfinite = the first of the n_points with a non-finite coordinate (the host's check of every position cost
 * ~20 us of the host per step). A block per tile of CGQ_SCAN_TILE candidates (CGQ_SCAN_THREADS threads, at least one
 * block), which also counts its kept ones into tile_sum. */
__global__ void __launch_bounds__(CGQ_SCAN_THREADS)
    k_pair_keep(int64_t n_cand, const int32_t *cand_recv, const int32_t *cand, const int32_t *point_node,
                int64_t n_points, const double *x, double rc2, int32_t *keep, pair_summary *s, int64_t *tile_sum) {
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < n_points; p += (int64_t)gridDim.x * blockDim.x)
        if (!isfinite(x[3 * p]) || !isfinite(x[3 * p + 1]) || !isfinite(x[3 * p + 2]))
            atomicMin(&s->nonfinite, (int32_t)p);
    int kept = 0;
#pragma unroll
    for (int k = 0; k < CGQ_SCAN_ITEMS; k++) {
        const int64_t c = (int64_t)blockIdx.x * CGQ_SCAN_TILE + k * CGQ_SCAN_THREADS + threadIdx.x;
        if (c >= n_cand) break;
        const double *xi = x + 3 * (int64_t)cand_recv[c], *xj = x + 3 * (int64_t)cand[c];
        const double v0 = xi[0] - xj[0], v1 = xi[1] - xj[1], v2 = xi[2] - xj[2];
        const double r2 = v0 * v0 + v1 * v1 + v2 * v2;
        const int f = r2 < rc2;
        keep[c] = f;
        kept += f;
        if (f && point_node[cand[c]] < 0) atomicMin(&s->bad[0], (int32_t)c);
        if (f && r2 < 1e-16) atomicMin(&s->bad[1], (int32_t)c);
    }
    block_count_tile(kept, tile_sum);
}

/* sorted_keep[k] = keep[order[k]]: the flags in the candidates' sender order; a block per tile, counted as
 * k_pair_keep */
__global__ void __launch_bounds__(CGQ_SCAN_THREADS)
    k_gather_flags(int64_t n, const int32_t *order, const int32_t *keep, int32_t *sorted_keep, int64_t *tile_sum) {
    int kept = 0;
#pragma unroll
    for (int j = 0; j < CGQ_SCAN_ITEMS; j++) {
        const int64_t k = (int64_t)blockIdx.x * CGQ_SCAN_TILE + j * CGQ_SCAN_THREADS + threadIdx.x;
        if (k >= n) break;
        const int32_t f = keep[order[k]];
        sorted_keep[k] = f;
        kept += f;
    }
    block_count_tile(kept, tile_sum);
}

__global__ void __launch_bounds__(CGQ_SCAN_THREADS) k_scan_tiles(int64_t n, const int32_t *in, int64_t *tile_sum) {
    int s = 0;
#pragma unroll
    for (int k = 0; k < CGQ_SCAN_ITEMS; k++) {
        const int64_t c = (int64_t)blockIdx.x * CGQ_SCAN_TILE + k * CGQ_SCAN_THREADS + threadIdx.x;
        s += c < n ? in[c] : 0;
    }
    block_count_tile(s, tile_sum);
}

__global__ void __launch_bounds__(CGQ_SCAN_THREADS) k_scan_tile_sums(int64_t n_tiles, int64_t *tile_sum, int64_t *out_total) {
    __shared__ int64_t sh[CGQ_SCAN_THREADS / CGQ_WARP];
    int64_t carry = 0;
    for (int64_t b = 0; b < n_tiles; b += CGQ_SCAN_THREADS) {
        const int64_t k = b + threadIdx.x;
        const int64_t v = k < n_tiles ? tile_sum[k] : 0;
        int64_t total;
        const int64_t ex = block_exclusive_scan(v, sh, &total);
        if (k < n_tiles) tile_sum[k] = carry + ex;
        carry += total;
    }
    if (threadIdx.x == 0) *out_total = carry;
}

/* a thread scans CGQ_SCAN_ITEMS consecutive flags of the block's tile */
__global__ void __launch_bounds__(CGQ_SCAN_THREADS) k_scan_apply(int64_t n, const int32_t *in, const int64_t *tile_off, int64_t *out) {
    __shared__ int64_t sh[CGQ_SCAN_THREADS / CGQ_WARP];
    const int64_t base = (int64_t)blockIdx.x * CGQ_SCAN_TILE + (int64_t)threadIdx.x * CGQ_SCAN_ITEMS;
    int v[CGQ_SCAN_ITEMS], s = 0;
#pragma unroll
    for (int k = 0; k < CGQ_SCAN_ITEMS; k++) v[k] = base + k < n ? in[base + k] : 0, s += v[k];
    int64_t total;
    int64_t run = block_exclusive_scan(s, sh, &total) + tile_off[blockIdx.x];
#pragma unroll
    for (int k = 0; k < CGQ_SCAN_ITEMS; k++) {
        if (base + k < n) out[base + k] = run;
        run += v[k];
    }
}

/* row_ptr[i] = edges before receiver i's candidates; srow[s] = edges of senders before s; *n_edges = row_ptr[n_local] */
__global__ void k_pair_rows(int64_t n_local, const int64_t *cand_row, const int64_t *escan, int64_t *row_ptr, int64_t n_nodes,
                            const int64_t *cand_srow, const int64_t *sscan, int64_t *srow, int64_t *n_edges) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i <= n_local || i <= n_nodes;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (i <= n_local) row_ptr[i] = escan[cand_row[i]];
        if (i == n_local) *n_edges = row_ptr[i];
        if (i <= n_nodes) srow[i] = sscan[cand_srow[i]];
    }
}

/* the kept candidates' edges: sender node, v = x_receiver - x_sender, receiver */
__global__ void k_pair_edges(int64_t n_cand, const int32_t *cand_recv, const int32_t *cand, const int32_t *point_node,
                             const double *x, const int32_t *keep, const int64_t *escan, int32_t *sender, double *vec,
                             int32_t *erecv) {
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < n_cand; c += (int64_t)gridDim.x * blockDim.x) {
        if (!keep[c]) continue;
        const int64_t e = escan[c];
        const int32_t i = cand_recv[c], j = cand[c];
        for (int d = 0; d < 3; d++) vec[3 * e + d] = x[3 * (int64_t)i + d] - x[3 * (int64_t)j + d];
        sender[e] = point_node[j];
        erecv[e] = i;
    }
}

/* sedge: the edges grouped by sender node (candidate order within a sender) */
__global__ void k_pair_sender_edges(int64_t n_cand, const int32_t *order, const int32_t *sorted_keep, const int64_t *sscan,
                                    const int64_t *escan, int32_t *sedge) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n_cand; k += (int64_t)gridDim.x * blockDim.x)
        if (sorted_keep[k]) sedge[sscan[k]] = (int32_t)escan[order[k]];
}

/* Per node: force = sum of dE/dv over edges it sends minus over edges it receives; node virial (if asked)
 * = half of -v (x) g of every edge it receives or sends. One warp per node: lane j takes edges j, j + W, ... of each
 * list, then the lanes' sums meet in a fixed butterfly (deterministic; every lane ends with the same bits). A thread
 * per node walked its ~180 edges one after another, with 1.2 warps per SM at 5,184 atoms: ~0.1 ms of MACE-MP-0's step.
 * The global virial, -v (x) g of every edge once (over the local nodes' received edges), is summed here too: each
 * block's part (its warps' in order, each warp's nodes in turn) into bpart, then the block that finishes last (an
 * integer ticket, no floating-point atomics) adds the parts in block order and sets the ticket back to 0. The order
 * is fixed by the grid, so the bits repeat. (A separate one-block kernel over every node's part, k_virial_sum, took
 * 8.2 us on the step's critical path after this one: session 56's timeline.) Block size at most 1,024. */
__global__ void k_node_forces(int64_t n_nodes, int64_t n_local, const int64_t *row_ptr, const int64_t *srow,
                              const int32_t *sedge, const double *vec, const double *grad, double *force,
                              double *node_virial, double *bpart, unsigned *ticket, double *virial) {
    const int lane = threadIdx.x % CGQ_WARP, warp = threadIdx.x / CGQ_WARP, n_warps = blockDim.x / CGQ_WARP;
    __shared__ double sh[9][1024 / CGQ_WARP];
    __shared__ bool last;
    double vsum = 0.0; /* lane k < 9: component k of the warp's local nodes' received -v (x) g */
    const int64_t warps = (int64_t)gridDim.x * blockDim.x / CGQ_WARP;
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CGQ_WARP; i < n_nodes; i += warps) {
        double f[3] = {0, 0, 0}, wr[9] = {0}, ws[9] = {0};
        if (i < n_local)
            for (int64_t e = row_ptr[i] + lane; e < row_ptr[i + 1]; e += CGQ_WARP) {
                const double *g = grad + 3 * e, *v = vec + 3 * e;
#pragma unroll
                for (int a = 0; a < 3; a++) {
                    f[a] -= g[a];
#pragma unroll
                    for (int b = 0; b < 3; b++) wr[3 * a + b] -= v[a] * g[b];
                }
            }
        for (int64_t k = srow[i] + lane; k < srow[i + 1]; k += CGQ_WARP) {
            const int64_t e = sedge[k];
            const double *g = grad + 3 * e, *v = vec + 3 * e;
#pragma unroll
            for (int a = 0; a < 3; a++) {
                f[a] += g[a];
                if (node_virial) {
#pragma unroll
                    for (int b = 0; b < 3; b++) ws[3 * a + b] -= v[a] * g[b];
                }
            }
        }
#pragma unroll
        for (int a = 0; a < 3; a++) f[a] = warp_total(f[a]);
#pragma unroll
        for (int k = 0; k < 9; k++) wr[k] = warp_total(wr[k]);
        if (node_virial) {
#pragma unroll
            for (int k = 0; k < 9; k++) ws[k] = warp_total(ws[k]);
        }
        /* lanes 0-8 write the node's values, one each */
        if (lane < 3) force[3 * i + lane] = lane == 0 ? f[0] : lane == 1 ? f[1] : f[2];
        if (lane < 9) {
            double r = 0, t = 0;
#pragma unroll
            for (int k = 0; k < 9; k++)
                if (k == lane) r = wr[k], t = ws[k];
            if (node_virial) node_virial[9 * i + lane] = 0.5 * (r + t);
            if (i < n_local) vsum += r;
        }
    }
    if (lane < 9) sh[lane][warp] = vsum;
    __syncthreads();
    if (threadIdx.x < 9) {
        double s = 0.0;
        for (int w = 0; w < n_warps; w++) s += sh[threadIdx.x][w];
        bpart[9 * (int64_t)blockIdx.x + threadIdx.x] = s;
        __threadfence(); /* the part is seen by every block before the ticket says it is there */
    }
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    /* the last block: thread t adds parts t, t + blockDim.x, ... (volatile: the other blocks' stores, not an L1 copy),
     * then fixed butterflies over each warp and the warps' sums in order */
    const volatile double *parts = bpart;
    double s[9] = {0};
    for (int64_t b = threadIdx.x; b < gridDim.x; b += blockDim.x)
#pragma unroll
        for (int k = 0; k < 9; k++) s[k] += parts[9 * b + k];
#pragma unroll
    for (int k = 0; k < 9; k++) s[k] = warp_total(s[k]);
    if (lane == 0)
#pragma unroll
        for (int k = 0; k < 9; k++) sh[k][warp] = s[k];
    __syncthreads();
    if (threadIdx.x < 9) {
        double t = 0.0;
        for (int w = 0; w < n_warps; w++) t += sh[threadIdx.x][w];
        virial[threadIdx.x] = t;
    }
    if (threadIdx.x == 0) *ticket = 0; /* for the next launch */
}

#endif
