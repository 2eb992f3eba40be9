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
__device__ __forceinline__ int symcon_factor(int32_t code, int p) {
    return (code >> (SYMCON_IDX_BITS * p)) & ((1 << SYMCON_IDX_BITS) - 1);
}

/* A component's monomials [q0, q1) as nested sums (Horner's scheme). A code's factors are sorted (s_0 <= ... <=
 * s_NF-1) and the codes in increasing order, so the monomials of one prefix (s_1, ..., s_NF-1) are adjacent:
 *   B = sum_{s_NF-1} A[s_NF-1] ... sum_{s_1} A[s_1] sum_{s_0} T A[s_0],
 * acc[p] the sum of level p over the current prefix. A prefix ends where a factor above p changes (the code's bits
 * above p differ; warp-uniform: the codes are the layer's): then acc[p + 1] += A[s_p+1] acc[p]. Per monomial one
 * factor is read and one product added, instead of NF of each (session 23: the kernels issued in 78-86% of cycles).
 * REV: the reverse for g = dE/dB instead, into gas: with pp[p] = g prod_{r > p} A[s_r] of the prefix, each monomial
 * adds pp[0] T to gA[s_0], and level p's end adds pp[p + 1] acc[p] to gA[s_p+1] (the product rule over the
 * factors' positions, whichever indices coincide). as, gas: the channel's columns (stride nt). */
template <class T, int NF, bool REV>
__device__ __forceinline__ T symcon_nested(const int32_t *code, const T *tc, int C, int q0, int q1, const T *as, int nt,
                                           T g, T *gas) {
    T acc[NF], av[NF], pp[NF]; /* av[p]: A[s_p] of the current prefix (p >= 1) */
    int32_t prev = __ldg(code + q0);
#pragma unroll
    for (int p = 0; p < NF; p++) acc[p] = 0, av[p] = p ? as[symcon_factor(prev, p) * nt] : (T)0;
    pp[NF - 1] = g;
#pragma unroll
    for (int p = NF - 2; p >= 0; p--) pp[p] = pp[p + 1] * av[p + 1];
    const T *cp = tc + (size_t)q0 * C;
    for (int q = q0; q < q1; q += SYMCON_UNROLL, cp += SYMCON_UNROLL * C) {
        /* SYMCON_UNROLL monomials' codes and coefficients loaded together: one at a time, each waited an L2 latency
         * (the coefficients do not fit L1). The plan pads each range to a multiple (zero coefficients). */
        int32_t cd[SYMCON_UNROLL];
        T cq[SYMCON_UNROLL];
#pragma unroll
        for (int v = 0; v < SYMCON_UNROLL; v++) cd[v] = __ldg(code + q + v), cq[v] = cp[v * C];
#pragma unroll
        for (int v = 0; v < SYMCON_UNROLL; v++) {
            const int32_t diff = cd[v] ^ prev;
            if (diff >> SYMCON_IDX_BITS) { /* the prefix changed: its levels below the change end */
#pragma unroll
                for (int p = 0; p + 1 < NF; p++)
                    if (diff >> (SYMCON_IDX_BITS * (p + 1))) {
                        if (REV) gas[symcon_factor(prev, p + 1) * nt] += pp[p + 1] * acc[p];
                        acc[p + 1] += av[p + 1] * acc[p];
                        acc[p] = 0;
                    }
#pragma unroll
                for (int p = 1; p < NF; p++)
                    if (diff >> (SYMCON_IDX_BITS * p)) av[p] = as[symcon_factor(cd[v], p) * nt];
                if (REV)
#pragma unroll
                    for (int p = NF - 2; p >= 0; p--)
                        if (diff >> (SYMCON_IDX_BITS * (p + 1))) pp[p] = pp[p + 1] * av[p + 1];
                prev = cd[v];
            }
            const int i0 = symcon_factor(cd[v], 0) * nt;
            acc[0] += cq[v] * as[i0];
            if (REV) gas[i0] += pp[0] * cq[v];
        }
    }
#pragma unroll
    for (int p = 0; p + 1 < NF; p++) { /* the last prefix's levels end */
        if (REV) gas[symcon_factor(prev, p + 1) * nt] += pp[p + 1] * acc[p];
        acc[p + 1] += av[p + 1] * acc[p];
    }
    return acc[NF - 1];
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
            const int q0 = bk.mstart[m], q1 = bk.mstart[m + 1];
            Bj[m] = q1 > q0 ? symcon_nested<T, NF, false>(a.code, tc, a.C, q0, q1, as + ch, nt, (T)0, nullptr) : (T)0;
        }
    }
}

/* gA[n] = dE/dA from gB = dE/dB (overwrites) */
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
            const int q0 = bk.mstart[m], q1 = bk.mstart[m + 1];
            if (g != (T)0 && q1 > q0) symcon_nested<T, NF, true>(a.code, tc, a.C, q0, q1, as + ch, nt, g, gas + ch);
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
