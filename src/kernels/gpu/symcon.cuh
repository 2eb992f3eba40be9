/* symcon.cuh: MACE's symmetric contraction (product basis) on the GPU as a polynomial in the channel's A row.
 *
 * B[c,m] = sum_nu sum_{nonzeros (m,i_1..i_nu,k,u) of U_nu} u W_nu[e,k,c] prod_p A[c,i_p]. The product of A's is
 * symmetric in the i's and the weights are fixed per species, so the plan (mace_gpu.cu, build_symcon_plan) folds
 * every nonzero with the same (m, sorted i's) into one monomial with coefficient T[e][q][c] = sum u W_nu[e,k,c],
 * computed once at load in double. MACE-MP-0's layer 0 (l <= 3, correlation 3) has ~4-5x fewer monomials than
 * U nonzeros, and the kernels read one coefficient per monomial instead of a value, an index and a weight per
 * nonzero. Monomials are padded to NF factors (the layer's largest correlation) with index D, whose A column
 * holds 1, so the factor loop has a compile-time length and the indices stay in registers.
 * One node per block, one thread per channel (coefficients read coalesced over channels); monomials are sorted
 * by output component m, so each B[c,m] is summed in one register. The sums are in T: in float for fp32, as the
 * products themselves (in double until session 22: the forward's conversions and the reverse's 8-byte read-modify-
 * writes in shared memory, which bound it, took MACE-MP-0's 0.52 + 0.89 ms per step). */
#ifndef CGQ_GPU_SYMCON_CUH
#define CGQ_GPU_SYMCON_CUH

#define SYMCON_MAX_D 16     /* coupling width: sum of 2l+1 of the target irreps (l <= 3) */
#define SYMCON_MAX_BLOCKS 8 /* output irreps of the product */
#define SYMCON_IDX_BITS 5   /* one factor's A index (0..D, D = the constant 1) */
#define SYMCON_UNROLL 4     /* monomials whose loads are issued together */

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

template <int NF>
__device__ inline void symcon_factors(int32_t code, int *idx) {
#pragma unroll
    for (int p = 0; p < NF; p++) idx[p] = (code >> (SYMCON_IDX_BITS * p)) & ((1 << SYMCON_IDX_BITS) - 1);
}

/* B[n] = the polynomial of A[n]; coef: [elements][n_mono][C] */
template <class T, int NF>
__global__ void k_symcon_fwd(symcon_args a, const T *coef, const int32_t *species, const T *A, int64_t lda, T *B,
                             int64_t ldb) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *as = reinterpret_cast<T *>(smem_raw); /* column ch: the channel's A row, then 1 */
    const int nt = blockDim.x, ch = threadIdx.x;
    const int64_t n = blockIdx.x;
    if (ch >= a.C) return; /* no block-wide sync below: each thread uses its own column */
    for (int i = 0; i < a.D; i++) as[i * nt + ch] = A[n * lda + a.a_off[i] + ch * a.a_stride[i]];
    as[a.D * nt + ch] = (T)1;
    const int elem = a.agnostic ? 0 : species[n];
    const T *tc = coef + ((size_t)elem * a.n_mono) * a.C + ch;
    for (int j = 0; j < a.n_blocks; j++) {
        const symcon_block &bk = a.blk[j];
        T *Bj = B + n * ldb + bk.out_off + ch * bk.dm;
        for (int m = 0; m < bk.dm; m++) {
            T acc = 0;
            const int q1 = bk.mstart[m + 1];
            /* SYMCON_UNROLL monomials' codes and coefficients loaded together: one at a time, each waited an L2
             * latency (the coefficients do not fit L1) */
            for (int q = bk.mstart[m]; q < q1; q += SYMCON_UNROLL) {
                int32_t code[SYMCON_UNROLL];
                T cq[SYMCON_UNROLL];
#pragma unroll
                for (int v = 0; v < SYMCON_UNROLL; v++) {
                    const bool in = q + v < q1;
                    code[v] = in ? __ldg(a.code + q + v) : 0;
                    cq[v] = in ? tc[(size_t)(q + v) * a.C] : (T)0;
                }
#pragma unroll
                for (int v = 0; v < SYMCON_UNROLL; v++) {
                    if (q + v >= q1) continue; /* not a break: hipcc unrolls no loop with a break */
                    int idx[NF];
                    symcon_factors<NF>(code[v], idx);
                    T prod = cq[v];
#pragma unroll
                    for (int p = 0; p < NF; p++) prod *= as[idx[p] * nt + ch];
                    acc += prod;
                }
            }
            Bj[m] = acc;
        }
    }
}

/* gA[n] = dE/dA from gB = dE/dB (overwrites): each monomial adds g T prod_{r != p} A[i_r] to gA[i_p] */
template <class T, int NF>
__global__ void k_symcon_bwd(symcon_args a, const T *coef, const int32_t *species, const T *A, int64_t lda, const T *gB,
                             int64_t ldgb, T *gA, int64_t ldga) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int nt = blockDim.x, ch = threadIdx.x;
    const int64_t n = blockIdx.x;
    T *as = reinterpret_cast<T *>(smem_raw);
    T *gas = as + (size_t)(a.D + 1) * nt; /* the sums */
    if (ch >= a.C) return;
    for (int i = 0; i < a.D; i++) as[i * nt + ch] = A[n * lda + a.a_off[i] + ch * a.a_stride[i]], gas[i * nt + ch] = 0;
    as[a.D * nt + ch] = (T)1;
    gas[a.D * nt + ch] = 0; /* the constant's gradient: written, never read */
    const int elem = a.agnostic ? 0 : species[n];
    const T *tc = coef + ((size_t)elem * a.n_mono) * a.C + ch;
    for (int j = 0; j < a.n_blocks; j++) {
        const symcon_block &bk = a.blk[j];
        const T *gBj = gB + n * ldgb + bk.out_off + ch * bk.dm;
        for (int m = 0; m < bk.dm; m++) {
            const T g = gBj[m];
            if (g == (T)0) continue;
            const int q1 = bk.mstart[m + 1];
            for (int q = bk.mstart[m]; q < q1; q += SYMCON_UNROLL) { /* loads first, as in k_symcon_fwd */
                int idx[SYMCON_UNROLL][NF];
                T f[SYMCON_UNROLL][NF], s[SYMCON_UNROLL];
#pragma unroll
                for (int v = 0; v < SYMCON_UNROLL; v++) {
                    const bool in = q + v < q1;
                    symcon_factors<NF>(in ? __ldg(a.code + q + v) : 0, idx[v]);
                    s[v] = in ? g * tc[(size_t)(q + v) * a.C] : (T)0;
                }
#pragma unroll
                for (int v = 0; v < SYMCON_UNROLL; v++)
#pragma unroll
                    for (int p = 0; p < NF; p++) f[v][p] = as[idx[v][p] * nt + ch]; /* as is read-only here */
#pragma unroll
                for (int v = 0; v < SYMCON_UNROLL; v++) {
                    if (q + v >= q1) continue; /* not a break: hipcc unrolls no loop with a break */
#pragma unroll
                    for (int p = 0; p < NF; p++) {
                        T prod = s[v];
#pragma unroll
                        for (int r = 0; r < NF; r++)
                            if (r != p) prod *= f[v][r];
                        gas[idx[v][p] * nt + ch] += prod;
                    }
                }
            }
        }
    }
    for (int i = 0; i < a.D; i++) gA[n * ldga + a.a_off[i] + ch * a.a_stride[i]] = gas[i * nt + ch];
}

struct symcon_plan {
    int ok, threads, nf;
    symcon_args args;
    double *coef;  /* device [elements][n_mono][C], fp64 evaluators */
    float *coef_f; /* the same in float, fp32 evaluators */
};

/* shared memory of the kernels for coupling width D, nt threads and operands and sums of `es` bytes */
static inline size_t symcon_fwd_smem(int D, int nt, size_t es) { return (size_t)(D + 1) * nt * es; }
static inline size_t symcon_bwd_smem(int D, int nt, size_t es) { return 2 * (size_t)(D + 1) * nt * es; }

#endif
