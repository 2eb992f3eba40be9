/* symcon.cuh: MACE's symmetric contraction (product basis) on the GPU as a polynomial in the channel's A row.
 *
 * B[c,m] = sum_nu sum_{nonzeros (m,i_1..i_nu,k,u) of U_nu} u W_nu[e,k,c] prod_p A[c,i_p]. The product of A's is
 * symmetric in the i's and the weights are fixed per species, so the plan (mace_gpu.cu, build_symcon_plan) folds
 * every nonzero with the same (m, sorted i's) into one monomial with coefficient T[e][q][c] = sum u W_nu[e,k,c],
 * computed once at load in double. MACE-MP-0's layer 0 (l <= 3, correlation 3) has ~4-5x fewer monomials than
 * U nonzeros, and the kernels read one coefficient per monomial instead of a value, an index and a weight per
 * nonzero. Monomials are padded to NF factors (the layer's largest correlation) with index D, whose A column
 * holds 1, so the factor loop has a compile-time length and the indices stay in registers.
 * One thread per channel (coefficients read coalesced over channels); a block takes up to SYMCON_NODES nodes of one
 * species (the caller's node order sorted by species) and reads each coefficient once for all of them: the
 * coefficient reads (n_mono x C per species, from L2) bound the kernel, not its arithmetic. Monomials are sorted
 * by output component m, so each B[c,m] is summed in one register, in double. */
#ifndef CGQ_GPU_SYMCON_CUH
#define CGQ_GPU_SYMCON_CUH

#define SYMCON_MAX_D 16     /* coupling width: sum of 2l+1 of the target irreps (l <= 3) */
#define SYMCON_MAX_BLOCKS 8 /* output irreps of the product */
#define SYMCON_IDX_BITS 5   /* one factor's A index (0..D, D = the constant 1) */
#define SYMCON_NODES 4      /* the most nodes of one block (they share its coefficient loads) */

struct symcon_block {
    int dm, out_off;
    int mstart[8]; /* monomials of component m: [mstart[m], mstart[m + 1]) of the layer's list */
};

struct symcon_args {
    int n_blocks, n_mono, C, D, agnostic;
    int nodes; /* nodes per block, 1..SYMCON_NODES (as shared memory allows) */
    symcon_block blk[SYMCON_MAX_BLOCKS];
    const int32_t *code; /* [n_mono]: factor p's A index at bits SYMCON_IDX_BITS * p */
};

template <int NF>
__device__ inline void symcon_factors(int32_t code, int *idx) {
#pragma unroll
    for (int p = 0; p < NF; p++) idx[p] = (code >> (SYMCON_IDX_BITS * p)) & ((1 << SYMCON_IDX_BITS) - 1);
}

/* A block's nodes: entries [g0, g0 + nb) of `order` (the local nodes sorted by species), their A rows copied to
 * shared memory as[j][i][ch] (row D: the constant 1). Runs of one species within the block are taken together. */
struct symcon_group {
    int64_t node[SYMCON_NODES];
    int elem[SYMCON_NODES]; /* their species (0 where the layer is species-agnostic) */
    int nb;
};

template <class T>
__device__ inline symcon_group symcon_load(const symcon_args &a, const int32_t *species, const int32_t *order, int64_t N,
                                           const T *A, int64_t lda, T *as) {
    const int nt = blockDim.x, ch = threadIdx.x, stride = (a.D + 1) * nt;
    symcon_group grp;
    const int64_t g0 = (int64_t)blockIdx.x * a.nodes;
    grp.nb = (int)(N - g0 < a.nodes ? N - g0 : a.nodes);
#pragma unroll
    for (int j = 0; j < SYMCON_NODES; j++) {
        grp.node[j] = j < grp.nb ? order[g0 + j] : 0;
        grp.elem[j] = j < grp.nb && !a.agnostic ? species[grp.node[j]] : 0;
        if (j >= grp.nb) continue;
        for (int i = 0; i < a.D; i++) as[j * stride + i * nt + ch] = A[grp.node[j] * lda + ch * a.D + i];
        as[j * stride + a.D * nt + ch] = (T)1;
    }
    return grp;
}

/* the run of one species that starts at entry lo of the block: its end, and the species in *elem */
__device__ inline int symcon_run(const symcon_group &grp, int lo, int *elem) {
    int hi = lo + 1;
#pragma unroll
    for (int j = 0; j < SYMCON_NODES; j++) {
        if (j == lo) *elem = grp.elem[j];
        if (j > 0 && j == hi && j < grp.nb && grp.elem[j] == grp.elem[j - 1]) hi++;
    }
    return hi;
}

/* B[n] = the polynomial of A[n]; coef: [elements][n_mono][C]. Each block takes a.nodes nodes of `order` and reads each
 * coefficient once for all of its nodes of that species (the coefficients, not the arithmetic, bound this kernel). */
template <class T, int NF>
__global__ void k_symcon_fwd(symcon_args a, const T *coef, const int32_t *species, const int32_t *order, int64_t N,
                             const T *A, int64_t lda, T *B, int64_t ldb) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *as = reinterpret_cast<T *>(smem_raw); /* [node][i][ch]: the channel's A rows, then 1 */
    const int nt = blockDim.x, ch = threadIdx.x, stride = (a.D + 1) * nt;
    if (ch >= a.C) return; /* no block-wide sync below: each thread uses its own column */
    const symcon_group grp = symcon_load(a, species, order, N, A, lda, as);
    for (int lo = 0, hi; lo < grp.nb; lo = hi) {
        int elem;
        hi = symcon_run(grp, lo, &elem);
        const T *tc = coef + ((size_t)elem * a.n_mono) * a.C + ch;
        for (int j = 0; j < a.n_blocks; j++) {
            const symcon_block &bk = a.blk[j];
            for (int m = 0; m < bk.dm; m++) {
                double acc[SYMCON_NODES];
#pragma unroll
                for (int k = 0; k < SYMCON_NODES; k++) acc[k] = 0;
                for (int q = bk.mstart[m]; q < bk.mstart[m + 1]; q++) {
                    int idx[NF];
                    symcon_factors<NF>(__ldg(a.code + q), idx);
                    const T cq = tc[(size_t)q * a.C];
#pragma unroll
                    for (int k = 0; k < SYMCON_NODES; k++) {
                        if (k < lo || k >= hi) continue;
                        T prod = cq;
#pragma unroll
                        for (int p = 0; p < NF; p++) prod *= as[k * stride + idx[p] * nt + ch];
                        acc[k] += (double)prod;
                    }
                }
#pragma unroll
                for (int k = 0; k < SYMCON_NODES; k++)
                    if (k >= lo && k < hi) B[grp.node[k] * ldb + bk.out_off + ch * bk.dm + m] = (T)acc[k];
            }
        }
    }
}

/* gA[n] = dE/dA from gB = dE/dB (overwrites): each monomial adds g T prod_{r != p} A[i_r] to gA[i_p]; nodes taken as
 * in k_symcon_fwd */
template <class T, int NF>
__global__ void k_symcon_bwd(symcon_args a, const T *coef, const int32_t *species, const int32_t *order, int64_t N,
                             const T *A, int64_t lda, const T *gB, int64_t ldgb, T *gA, int64_t ldga) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int nt = blockDim.x, ch = threadIdx.x, stride = (a.D + 1) * nt;
    T *as = reinterpret_cast<T *>(smem_raw);
    double *gas = reinterpret_cast<double *>(smem_raw) +
                  ((size_t)a.nodes * stride * sizeof(T) + 7) / 8; /* [node][i][ch], double sums */
    if (ch >= a.C) return;
    const symcon_group grp = symcon_load(a, species, order, N, A, lda, as);
    for (int k = 0; k < grp.nb; k++)
        for (int i = 0; i <= a.D; i++) gas[k * stride + i * nt + ch] = 0; /* i = D: the constant's, never read */
    for (int lo = 0, hi; lo < grp.nb; lo = hi) {
        int elem;
        hi = symcon_run(grp, lo, &elem);
        const T *tc = coef + ((size_t)elem * a.n_mono) * a.C + ch;
        for (int j = 0; j < a.n_blocks; j++) {
            const symcon_block &bk = a.blk[j];
            for (int m = 0; m < bk.dm; m++) {
                T g[SYMCON_NODES];
                bool any = false;
#pragma unroll
                for (int k = 0; k < SYMCON_NODES; k++) {
                    g[k] = k >= lo && k < hi ? gB[grp.node[k] * ldgb + bk.out_off + ch * bk.dm + m] : (T)0;
                    any = any || g[k] != (T)0;
                }
                if (!any) continue;
                for (int q = bk.mstart[m]; q < bk.mstart[m + 1]; q++) {
                    int idx[NF];
                    symcon_factors<NF>(__ldg(a.code + q), idx);
                    const T cq = tc[(size_t)q * a.C];
#pragma unroll
                    for (int k = 0; k < SYMCON_NODES; k++) {
                        if (g[k] == (T)0) continue;
                        T f[NF];
#pragma unroll
                        for (int p = 0; p < NF; p++) f[p] = as[k * stride + idx[p] * nt + ch];
                        const T s = g[k] * cq;
#pragma unroll
                        for (int p = 0; p < NF; p++) {
                            T prod = s;
#pragma unroll
                            for (int r = 0; r < NF; r++)
                                if (r != p) prod *= f[r];
                            gas[k * stride + idx[p] * nt + ch] += (double)prod;
                        }
                    }
                }
            }
        }
    }
#pragma unroll
    for (int k = 0; k < SYMCON_NODES; k++)
        if (k < grp.nb)
            for (int i = 0; i < a.D; i++) gA[grp.node[k] * ldga + ch * a.D + i] = (T)gas[k * stride + i * nt + ch];
}

struct symcon_plan {
    int ok, threads, nf;
    symcon_args args;
    double *coef;  /* device [elements][n_mono][C], fp64 evaluators */
    float *coef_f; /* the same in float, fp32 evaluators */
    int *cd_of;    /* device: the reshape of the target irreps into its [C][D] input (k_reshape_cd) */
};

/* shared memory of the kernels for `nodes` nodes per block, coupling width D, nt threads and operands of `es` bytes
 * (sums in double) */
static inline size_t symcon_fwd_smem(int nodes, int D, int nt, size_t es) { return (size_t)nodes * (D + 1) * nt * es; }
static inline size_t symcon_bwd_smem(int nodes, int D, int nt, size_t es) {
    return ((size_t)nodes * (D + 1) * nt * es + 7) / 8 * 8 + sizeof(double) * (size_t)nodes * (D + 1) * nt;
}

#endif
