/* symcon.cuh: MACE's symmetric contraction (product basis) on the GPU as a polynomial in the channel's A row.
 *
 * B[c,m] = sum_nu sum_{nonzeros (m,i_1..i_nu,k,u) of U_nu} u W_nu[e,k,c] prod_p A[c,i_p]. The product of A's is
 * symmetric in the i's and the weights are fixed per species, so the plan (mace_gpu.cu, build_symcon_plan) folds
 * every nonzero with the same (m, sorted i's) into one monomial with coefficient T[e][q][c] = sum u W_nu[e,k,c],
 * computed once at load in double. MACE-MP-0's layer 0 (l <= 3, correlation 3) has ~4-5x fewer monomials than
 * U nonzeros, and the kernels read one coefficient per monomial instead of a value, an index and a weight per
 * nonzero. Monomials are padded to NF factors (the layer's largest correlation) with index D, whose A column
 * holds 1, so the factor loop has a compile-time length and the indices stay in registers.
 * A thread per channel of an item of NB nodes (coefficients read coalesced over channels, each for the item's
 * nodes; symcon_item_nodes), one or two items per block; monomials are sorted
 * by output component m, then by their sorted factors, so each B[c,m] is a nested sum in registers (symcon_nested).
 * The sums are in T: in float for fp32, as the products themselves (in double until session 22: the forward's
 * conversions and the reverse's 8-byte read-modify-writes in shared memory took MACE-MP-0's 0.52 + 0.89 ms). */
#ifndef CGQ_GPU_SYMCON_CUH
#define CGQ_GPU_SYMCON_CUH

#define SYMCON_MAX_D 16     /* coupling width: sum of 2l+1 of the target irreps (l <= 3) */
#define SYMCON_MAX_BLOCKS 8 /* output irreps of the product */
#define SYMCON_IDX_BITS 5   /* one factor's A index (0..D, D = the constant 1) */
#define SYMCON_UNROLL 4     /* monomials whose loads are issued together; each m's range a multiple of it */

struct symcon_block {
    int dm, out_off;
    int mstart[8]; /* monomials of component m: [mstart[m], mstart[m + 1]) of the layer's list */
};

struct symcon_args {
    int n_blocks, n_mono, C, D, agnostic;
    /* A(ch, i) is element a_off[i] + ch a_stride[i] of the node's row: the target irreps in e3nn's layout, read and
     * written in place (no reshape to [C][D] and back) */
    int a_off[SYMCON_MAX_D], a_stride[SYMCON_MAX_D];
    symcon_block blk[SYMCON_MAX_BLOCKS];
    const int32_t *code; /* [n_mono]: factor p's A index at bits SYMCON_IDX_BITS * p */
};

/* factor p of a monomial's code (its A index) */
__host__ __device__ __forceinline__ int symcon_factor(int32_t code, int p) {
    return (code >> (SYMCON_IDX_BITS * p)) & ((1 << SYMCON_IDX_BITS) - 1);
}

/* A component's monomials [q0, q1) as nested sums (Horner's scheme), for the NB nodes of a block at once. A code's
 * factors are sorted (s_0 <= ... <= s_NF-1) and the codes in increasing order, so the monomials of one prefix (s_1,
 * ..., s_NF-1) are adjacent:
 *   B = sum_{s_NF-1} A[s_NF-1] ... sum_{s_1} A[s_1] sum_{s_0} T A[s_0],
 * acc[p] the sum of level p over the current prefix. A prefix ends where a factor above p changes (the code's bits
 * above p differ; warp-uniform: the codes are the layer's): then acc[p + 1] += A[s_p+1] acc[p]. Per monomial one
 * factor is read and one product added, instead of NF of each (session 23: the kernels issued in 78-86% of cycles).
 * REV: the reverse for g = dE/dB instead, into gas: with pp[p] = g prod_{r > p} A[s_r] of the prefix, each monomial
 * adds pp[0] T to gA[s_0], and level p's end adds pp[p + 1] acc[p] to gA[s_p+1] (the product rule over the
 * factors' positions, whichever indices coincide). as, gas: the channel's columns, index i's NB values (one per node)
 * side by side at i * nt (one 16-byte access for all of them); each monomial's code and coefficient are read once
 * for the NB nodes. Each node's sums are those of a block of its own: the same bits whichever nodes share it. */
template <class T, int NB>
struct alignas(sizeof(T) * NB) symcon_vec {
    T v[NB];
};

/* g[k] += pp[k] x[k] for the NB nodes' values at g (one 16-byte read-modify-write): a level's end in the reverse */
template <class T, int NB>
__device__ __forceinline__ void symcon_add(T *g, const T *pp, const T *x) {
    symcon_vec<T, NB> *gv = reinterpret_cast<symcon_vec<T, NB> *>(g);
    symcon_vec<T, NB> gs = *gv;
#pragma unroll
    for (int k = 0; k < NB; k++) gs.v[k] += pp[k] * x[k];
    *gv = gs;
}

template <class T, int NF, int NB, bool REV>
__device__ __forceinline__ void symcon_nested(const int32_t *code, const T *tc, int C, int q0, int q1, const T *as,
                                              int nt, const T *g, T *gas, T *out) {
    typedef symcon_vec<T, NB> V;
    T acc[NF][NB], av[NF][NB], pp[NF][NB]; /* av[p]: A[s_p] of the current prefix (p >= 1) */
    int32_t prev = __ldg(code + q0);
#pragma unroll
    for (int p = 0; p < NF; p++) {
        const V a = *reinterpret_cast<const V *>(as + (size_t)symcon_factor(prev, p) * nt);
#pragma unroll
        for (int k = 0; k < NB; k++) acc[p][k] = 0, av[p][k] = p ? a.v[k] : (T)0;
    }
#pragma unroll
    for (int k = 0; k < NB; k++) {
        pp[NF - 1][k] = REV ? g[k] : (T)0;
#pragma unroll
        for (int p = NF - 2; p >= 0; p--) pp[p][k] = pp[p + 1][k] * av[p + 1][k];
    }
    /* SYMCON_UNROLL monomials' codes and coefficients loaded together: one at a time, each waited an L2 latency (the
     * coefficients do not fit L1). The plan pads each range to a multiple (zero coefficients). The next batch's are
     * loaded before this one's sums: with them loaded just before use, both kernels waited on them most (ncu, session
     * 28: long-scoreboard stalls 4.3 per issue in the forward, 2.5 in the reverse, 18-32% of the warps resident). */
    int32_t cd[SYMCON_UNROLL];
    T cq[SYMCON_UNROLL];
    const T *cp = tc + (size_t)q0 * C;
#pragma unroll
    for (int v = 0; v < SYMCON_UNROLL; v++) cd[v] = __ldg(code + q0 + v), cq[v] = cp[v * C];
    for (int q = q0; q < q1; q += SYMCON_UNROLL) {
        int32_t cdn[SYMCON_UNROLL] = {};
        T cqn[SYMCON_UNROLL] = {};
        cp += SYMCON_UNROLL * C;
        if (q + SYMCON_UNROLL < q1) /* uniform: the ranges are the layer's */
#pragma unroll
            for (int v = 0; v < SYMCON_UNROLL; v++) cdn[v] = __ldg(code + q + SYMCON_UNROLL + v), cqn[v] = cp[v * C];
#pragma unroll
        for (int v = 0; v < SYMCON_UNROLL; v++) {
            const int32_t diff = cd[v] ^ prev;
            if (diff >> SYMCON_IDX_BITS) { /* the prefix changed: its levels below the change end */
#pragma unroll
                for (int p = 0; p + 1 < NF; p++)
                    if (diff >> (SYMCON_IDX_BITS * (p + 1))) {
                        if (REV) symcon_add<T, NB>(gas + (size_t)symcon_factor(prev, p + 1) * nt, pp[p + 1], acc[p]);
#pragma unroll
                        for (int k = 0; k < NB; k++) acc[p + 1][k] += av[p + 1][k] * acc[p][k], acc[p][k] = 0;
                    }
#pragma unroll
                for (int p = 1; p < NF; p++)
                    if (diff >> (SYMCON_IDX_BITS * p)) {
                        const V a = *reinterpret_cast<const V *>(as + (size_t)symcon_factor(cd[v], p) * nt);
#pragma unroll
                        for (int k = 0; k < NB; k++) av[p][k] = a.v[k];
                    }
                if (REV)
#pragma unroll
                    for (int p = NF - 2; p >= 0; p--)
                        if (diff >> (SYMCON_IDX_BITS * (p + 1)))
#pragma unroll
                            for (int k = 0; k < NB; k++) pp[p][k] = pp[p + 1][k] * av[p + 1][k];
                prev = cd[v];
            }
            const int i0 = symcon_factor(cd[v], 0);
            const V a = *reinterpret_cast<const V *>(as + (size_t)i0 * nt);
#pragma unroll
            for (int k = 0; k < NB; k++) acc[0][k] += cq[v] * a.v[k];
            if (REV) {
                V *gv = reinterpret_cast<V *>(gas + (size_t)i0 * nt);
                V gs = *gv;
#pragma unroll
                for (int k = 0; k < NB; k++) gs.v[k] += pp[0][k] * cq[v];
                *gv = gs;
            }
        }
#pragma unroll
        for (int v = 0; v < SYMCON_UNROLL; v++) cd[v] = cdn[v], cq[v] = cqn[v];
    }
#pragma unroll
    for (int p = 0; p + 1 < NF; p++) { /* the last prefix's levels end */
        if (REV) symcon_add<T, NB>(gas + (size_t)symcon_factor(prev, p + 1) * nt, pp[p + 1], acc[p]);
#pragma unroll
        for (int k = 0; k < NB; k++) acc[p + 1][k] += av[p + 1][k] * acc[p][k];
    }
#pragma unroll
    for (int k = 0; k < NB; k++) out[k] = acc[NF - 1][k];
}

/* Nodes grouped by species for the product basis (built each step by symcon_group_nodes): group b holds up to
 * symcon_nb nodes of one species, so that one coefficient read serves them all (an item of a launch is the group or
 * half of it: symcon_item_nodes). order: the nodes, species by species (within a species in any order: a node's B
 * depends on its own row alone); nstart[s], gstart[s]: species s's first entry of order and first group (n_species +
 * 1 each). order null: items of NB consecutive nodes (species-agnostic coefficients, or NB 1). */
struct symcon_groups {
    const int32_t *order = nullptr, *nstart = nullptr, *gstart = nullptr;
    int n_species = 0;
    int64_t n_nodes = 0;
};

/* Item `it`'s nodes (node[k] < 0: none) and their species; false where the item has none. An item is NB nodes of one
 * species (a part of a group of G in gp) or NB consecutive nodes; a block takes blockDim.y consecutive items, a
 * thread per channel for each. */
template <int NB, int G>
__device__ inline bool symcon_item_nodes(const symcon_groups &gp, int agnostic, const int32_t *species, int64_t it,
                                         int64_t *node, int *elem) {
    static_assert(G % NB == 0, "an item is a part of a group");
    if (!gp.order) {
#pragma unroll
        for (int k = 0; k < NB; k++) node[k] = it * NB + k < gp.n_nodes ? it * NB + k : -1;
        *elem = agnostic || node[0] < 0 ? 0 : species[node[0]];
        return node[0] >= 0;
    }
    const int64_t b = it / (G / NB); /* the group */
    if (b >= gp.gstart[gp.n_species]) return false;
    int lo = 0, hi = gp.n_species; /* the species s with gstart[s] <= b < gstart[s + 1] */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (gp.gstart[mid] <= b) lo = mid;
        else hi = mid;
    }
    const int64_t first = gp.nstart[lo] + (b - gp.gstart[lo]) * G + (it % (G / NB)) * NB, end = gp.nstart[lo + 1];
#pragma unroll
    for (int k = 0; k < NB; k++) node[k] = first + k < end ? gp.order[first + k] : -1;
    *elem = lo;
    return node[0] >= 0; /* the second half of a one-node group has none */
}

/* Channel ch's A values of the item's nodes into the thread's column t of as (index i's NB values side by side; a
 * missing node's are 0), and the constant 1 at index D */
template <class T, int NB>
__device__ inline void symcon_stage(const symcon_args &a, const T *A, int64_t lda, const int64_t *node, T *as, int nt,
                                    int t, int ch) {
    for (int i = 0; i <= a.D; i++) {
        symcon_vec<T, NB> x;
#pragma unroll
        for (int k = 0; k < NB; k++)
            x.v[k] = i == a.D ? (T)1 : node[k] >= 0 ? A[node[k] * lda + a.a_off[i] + ch * a.a_stride[i]] : (T)0;
        *reinterpret_cast<symcon_vec<T, NB> *>(as + ((size_t)i * nt + t) * NB) = x;
    }
}

/* The thread's place: column t of nt in the block's shared arrays, channel ch, item (symcon_item_nodes) */
struct symcon_thread {
    int nt, t, ch;
    int64_t item;
};
__device__ __forceinline__ symcon_thread symcon_this_thread() {
    symcon_thread r;
    r.nt = blockDim.x * blockDim.y, r.t = threadIdx.y * blockDim.x + threadIdx.x;
    r.ch = threadIdx.x, r.item = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
    return r;
}

/* B[n] = the polynomial of A[n]; coef: [elements][n_mono][C] */
template <class T, int NF, int NB, int G>
__global__ void k_symcon_fwd(symcon_args a, symcon_groups gp, const T *coef, const int32_t *species, const T *A,
                             int64_t lda, T *B, int64_t ldb) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *as = reinterpret_cast<T *>(smem_raw);
    const symcon_thread th = symcon_this_thread();
    const int nt = th.nt, ch = th.ch;
    int64_t node[NB];
    int elem;
    /* no block-wide sync below: each thread uses its own column */
    if (ch >= a.C || !symcon_item_nodes<NB, G>(gp, a.agnostic, species, th.item, node, &elem)) return;
    symcon_stage<T, NB>(a, A, lda, node, as, nt, th.t, ch);
    const T *tc = coef + ((size_t)elem * a.n_mono) * a.C + ch;
    for (int j = 0; j < a.n_blocks; j++) {
        const symcon_block &bk = a.blk[j];
        for (int m = 0; m < bk.dm; m++) {
            const int q0 = bk.mstart[m], q1 = bk.mstart[m + 1];
            T out[NB] = {};
            if (q1 > q0)
                symcon_nested<T, NF, NB, false>(a.code, tc, a.C, q0, q1, as + th.t * NB, nt * NB, nullptr, nullptr,
                                                out);
#pragma unroll
            for (int k = 0; k < NB; k++)
                if (node[k] >= 0) B[node[k] * ldb + bk.out_off + ch * bk.dm + m] = out[k];
        }
    }
}

/* gA[n] = dE/dA from gB = dE/dB (overwrites) */
template <class T, int NF, int NB, int G>
__global__ void k_symcon_bwd(symcon_args a, symcon_groups gp, const T *coef, const int32_t *species, const T *A,
                             int64_t lda, const T *gB, int64_t ldgb, T *gA, int64_t ldga) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const symcon_thread th = symcon_this_thread();
    const int nt = th.nt, ch = th.ch;
    T *as = reinterpret_cast<T *>(smem_raw);
    T *gas = as + (size_t)(a.D + 1) * nt * NB; /* the sums (the constant's: written, never read) */
    int64_t node[NB];
    int elem;
    if (ch >= a.C || !symcon_item_nodes<NB, G>(gp, a.agnostic, species, th.item, node, &elem)) return;
    symcon_stage<T, NB>(a, A, lda, node, as, nt, th.t, ch);
    for (int i = 0; i <= a.D; i++) *reinterpret_cast<symcon_vec<T, NB> *>(gas + ((size_t)i * nt + th.t) * NB) = {};
    const T *tc = coef + ((size_t)elem * a.n_mono) * a.C + ch;
    for (int j = 0; j < a.n_blocks; j++) {
        const symcon_block &bk = a.blk[j];
        for (int m = 0; m < bk.dm; m++) {
            T g[NB], out[NB];
            bool any = false;
#pragma unroll
            for (int k = 0; k < NB; k++) {
                g[k] = node[k] >= 0 ? gB[node[k] * ldgb + bk.out_off + ch * bk.dm + m] : (T)0;
                any = any || g[k] != (T)0;
            }
            const int q0 = bk.mstart[m], q1 = bk.mstart[m + 1];
            if (any && q1 > q0)
                symcon_nested<T, NF, NB, true>(a.code, tc, a.C, q0, q1, as + th.t * NB, nt * NB, g, gas + th.t * NB,
                                               out);
        }
    }
    for (int i = 0; i < a.D; i++) {
        const symcon_vec<T, NB> x = *reinterpret_cast<const symcon_vec<T, NB> *>(gas + ((size_t)i * nt + th.t) * NB);
#pragma unroll
        for (int k = 0; k < NB; k++)
            if (node[k] >= 0) gA[node[k] * ldga + a.a_off[i] + ch * a.a_stride[i]] = x.v[k];
    }
}

/* symcon_groups for n nodes of ns species, in blocks of nb: each block's species histogram (shared integer counts),
 * added to counts; their scan; then each node's place in its species' run. Integer atomics only: the order within a
 * species depends on the schedule, the results do not (symcon_groups). */
__global__ void k_group_count(int64_t n, const int32_t *species, int ns, int32_t *counts) {
    extern __shared__ int hist[];
    for (int s = threadIdx.x; s < ns; s += blockDim.x) hist[s] = 0;
    __syncthreads();
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n && species[i] >= 0 && species[i] < ns) atomicAdd(&hist[species[i]], 1);
    __syncthreads();
    for (int s = threadIdx.x; s < ns; s += blockDim.x)
        if (hist[s]) atomicAdd(&counts[s], hist[s]);
}

__global__ void k_group_scan(int ns, int nb, const int32_t *counts, int32_t *nstart, int32_t *gstart, int32_t *fill) {
    if (threadIdx.x || blockIdx.x) return;
    int32_t n = 0, blocks = 0;
    for (int s = 0; s < ns; s++) {
        nstart[s] = n, gstart[s] = blocks, fill[s] = n;
        n += counts[s], blocks += (counts[s] + nb - 1) / nb;
    }
    nstart[ns] = n, gstart[ns] = blocks;
}

__global__ void k_group_place(int64_t n, const int32_t *species, int ns, int32_t *fill, int32_t *order) {
    extern __shared__ int hist[]; /* then the block's first place in each species' run */
    int *base = hist + ns;
    for (int s = threadIdx.x; s < ns; s += blockDim.x) hist[s] = 0;
    __syncthreads();
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    const int s = i < n ? species[i] : -1;
    int r = 0;
    if (s >= 0 && s < ns) r = atomicAdd(&hist[s], 1);
    __syncthreads();
    for (int q = threadIdx.x; q < ns; q += blockDim.x)
        if (hist[q]) base[q] = atomicAdd(&fill[q], hist[q]);
    __syncthreads();
    if (s >= 0 && s < ns) order[base[s] + r] = (int32_t)i;
}

struct symcon_plan {
    int ok, threads, nf;
    int split[2];     /* forward, reverse: items per group (symcon_item_size), as many per block */
    int gen_split[2]; /* the same for the generated kernels */
    bool grouped; /* groups of symcon_nb nodes of one species (their shared memory fits), else items of 1 node */
    symcon_args args;
    double *coef;  /* device [elements][n_mono][C], fp64 evaluators */
    float *coef_f; /* the same in float, fp32 evaluators */
    const void *gen[2]; /* forward, reverse: the kernels generated for the layer's monomials (symcon_gen.cuh), or null */
};

/* nodes per block where they fit: 16 bytes of one index's values (float 4, double 2) */
template <class T>
constexpr int symcon_nb() {
    return 16 / (int)sizeof(T);
}

/* shared memory of the kernels for coupling width D, nt threads, nb nodes and operands and sums of `es` bytes */
static inline size_t symcon_fwd_smem(int D, int nt, int nb, size_t es) { return (size_t)(D + 1) * nt * nb * es; }
static inline size_t symcon_bwd_smem(int D, int nt, int nb, size_t es) { return 2 * (size_t)(D + 1) * nt * nb * es; }

#endif
