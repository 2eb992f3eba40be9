/* symcon.cuh: MACE's symmetric contraction (product basis) on the GPU as a polynomial in the channel's A row.
 *
 * B[c,m] = sum_nu sum_{nonzeros (m,i_1..i_nu,k,u) of U_nu} u W_nu[e,k,c] prod_p A[c,i_p]. The product of A's is
 * symmetric in the i's and the weights are fixed per species, so the plan (mace_gpu.cu, build_symcon_plan) folds
 * every nonzero with the same (m, sorted i's) into one monomial with coefficient T[e][q][c] = sum u W_nu[e,k,c],
 * computed once at load in double. MACE-MP-0's layer 0 (l <= 3, correlation 3) has ~4-5x fewer monomials than
 * U nonzeros, and the kernels read one coefficient per monomial instead of a value, an index and a weight per
 * nonzero. Monomials are padded to NF factors (the layer's largest correlation) with index D, whose A column
 * holds 1, so the factor loop has a compile-time length and the indices stay in registers.
 * One node per block, one thread per channel (coefficients read coalesced over channels). The monomials are sorted
 * by output component m and then by their factors from the last to the first, so the monomials that differ only
 * in their first factor i form a group with a common rest R = prod_{p >= 1} A[i_p], and
 *   B[c,m] = sum_groups R sum_{q in group} T_q A[i_q]
 * (Horner's form): per monomial one A value, one coefficient and one multiply-add in T; R, and the conversion to
 * the double sum of B[c,m], once per group. The reverse takes the same groups: dE/dA[i_q] += g R T_q per monomial
 * and, per group, dE/dA[i_p] += g (sum_q T_q A[i_q]) prod_{r != p, r >= 1} A[i_r] for each rest factor p. */
#ifndef CGQ_GPU_SYMCON_CUH
#define CGQ_GPU_SYMCON_CUH

#define SYMCON_MAX_D 16     /* coupling width: sum of 2l+1 of the target irreps (l <= 3) */
#define SYMCON_MAX_BLOCKS 8 /* output irreps of the product */
#define SYMCON_IDX_BITS 5   /* one factor's A index (0..D, D = the constant 1) */
#define SYMCON_UNROLL 4     /* monomials whose loads are issued together */

struct symcon_block {
    int dm, out_off;
    int gstart[8]; /* groups of component m: [gstart[m], gstart[m + 1]) of the layer's list */
};

struct symcon_args {
    int n_blocks, n_mono, n_groups, C, D, agnostic;
    symcon_block blk[SYMCON_MAX_BLOCKS];
    const int32_t *first; /* [n_mono]: the monomial's first factor (its A index) */
    const int32_t *gq;    /* [n_groups + 1]: the group's first monomial */
    const int32_t *rest;  /* [n_groups]: the rest's factor p at bits SYMCON_IDX_BITS * (p - 1) */
};

/* the A indices of a group's rest (NF - 1 factors) */
template <int NF>
__device__ inline void symcon_rest(int32_t code, int *idx) {
#pragma unroll
    for (int p = 0; p < NF - 1; p++) idx[p] = (code >> (SYMCON_IDX_BITS * p)) & ((1 << SYMCON_IDX_BITS) - 1);
}

/* sum_{q in [q0, q1)} T_q A[first_q] of one group, SYMCON_UNROLL monomials' loads issued together (one at a time, each
 * waited an L2 latency: the coefficients do not fit L1); with G, also gas[first_q] += G T_q (the reverse) */
template <class T, bool REVERSE>
__device__ __forceinline__ T symcon_group_sum(const symcon_args &a, const T *tc, const T *as, int q0, int q1, T G,
                                              double *gas) {
    const int nt = blockDim.x, ch = threadIdx.x;
    T part = 0;
    for (int q = q0; q < q1; q += SYMCON_UNROLL) {
        int32_t i[SYMCON_UNROLL];
        T cq[SYMCON_UNROLL];
#pragma unroll
        for (int v = 0; v < SYMCON_UNROLL; v++) {
            const bool in = q + v < q1;
            i[v] = in ? __ldg(a.first + q + v) : 0;
            cq[v] = in ? tc[(size_t)(q + v) * a.C] : (T)0;
        }
#pragma unroll
        for (int v = 0; v < SYMCON_UNROLL; v++) {
            if (q + v >= q1) break;
            part += cq[v] * as[i[v] * nt + ch];
            if (REVERSE) gas[i[v] * nt + ch] += (double)(G * cq[v]);
        }
    }
    return part;
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
    for (int i = 0; i < a.D; i++) as[i * nt + ch] = A[n * lda + ch * a.D + i];
    as[a.D * nt + ch] = (T)1;
    const int elem = a.agnostic ? 0 : species[n];
    const T *tc = coef + ((size_t)elem * a.n_mono) * a.C + ch;
    for (int j = 0; j < a.n_blocks; j++) {
        const symcon_block &bk = a.blk[j];
        T *Bj = B + n * ldb + bk.out_off + ch * bk.dm;
        for (int m = 0; m < bk.dm; m++) {
            double acc = 0;
            for (int gi = bk.gstart[m]; gi < bk.gstart[m + 1]; gi++) {
                int idx[NF > 1 ? NF - 1 : 1];
                symcon_rest<NF>(__ldg(a.rest + gi), idx);
                T r = symcon_group_sum<T, false>(a, tc, as, __ldg(a.gq + gi), __ldg(a.gq + gi + 1), (T)0, nullptr);
#pragma unroll
                for (int p = 0; p < NF - 1; p++) r *= as[idx[p] * nt + ch];
                acc += (double)r;
            }
            Bj[m] = (T)acc;
        }
    }
}

/* gA[n] = dE/dA from gB = dE/dB (overwrites), over the groups of k_symcon_fwd */
template <class T, int NF>
__global__ void k_symcon_bwd(symcon_args a, const T *coef, const int32_t *species, const T *A, int64_t lda, const T *gB,
                             int64_t ldgb, T *gA, int64_t ldga) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int nt = blockDim.x, ch = threadIdx.x;
    const int64_t n = blockIdx.x;
    T *as = reinterpret_cast<T *>(smem_raw);
    double *gas = reinterpret_cast<double *>(smem_raw) + ((size_t)(a.D + 1) * nt * sizeof(T) + 7) / 8; /* double sums */
    if (ch >= a.C) return;
    for (int i = 0; i < a.D; i++) as[i * nt + ch] = A[n * lda + ch * a.D + i], gas[i * nt + ch] = 0;
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
            for (int gi = bk.gstart[m]; gi < bk.gstart[m + 1]; gi++) {
                constexpr int NR = NF > 1 ? NF - 1 : 1;
                int idx[NR];
                T f[NR];
                symcon_rest<NF>(__ldg(a.rest + gi), idx);
                T R = g;
#pragma unroll
                for (int p = 0; p < NF - 1; p++) f[p] = as[idx[p] * nt + ch], R *= f[p];
                const T part = symcon_group_sum<T, true>(a, tc, as, __ldg(a.gq + gi), __ldg(a.gq + gi + 1), R, gas);
#pragma unroll
                for (int p = 0; p < NF - 1; p++) {
                    T v = g * part;
#pragma unroll
                    for (int r = 0; r < NF - 1; r++)
                        if (r != p) v *= f[r];
                    gas[idx[p] * nt + ch] += (double)v;
                }
            }
        }
    }
    for (int i = 0; i < a.D; i++) gA[n * ldga + ch * a.D + i] = (T)gas[i * nt + ch];
}

struct symcon_plan {
    int ok, threads, nf;
    symcon_args args;
    double *coef;  /* device [elements][n_mono][C], fp64 evaluators */
    float *coef_f; /* the same in float, fp32 evaluators */
    int *cd_of;    /* device: the reshape of the target irreps into its [C][D] input (k_reshape_cd) */
};

/* shared memory of the kernels for coupling width D, nt threads and operands of `es` bytes (sums in double) */
static inline size_t symcon_fwd_smem(int D, int nt, size_t es) { return (size_t)(D + 1) * nt * es; }
static inline size_t symcon_bwd_smem(int D, int nt, size_t es) {
    return ((size_t)(D + 1) * nt * es + 7) / 8 * 8 + sizeof(double) * (size_t)(D + 1) * nt;
}

#endif
