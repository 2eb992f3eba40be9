/* symcon.cuh: MACE's symmetric contraction (product basis) on the GPU, one thread per (node, channel),
 * one node per block, so a warp reads one species' weights W[k][c] coalesced. Same math and nonzero order as
 * kernels/cpu/symmetric_contraction.c, but the channel's A row and its B / dE/dA sums stay in registers
 * or thread-local memory instead of being read and written in global memory per nonzero. */
#ifndef CGQ_GPU_SYMCON_CUH
#define CGQ_GPU_SYMCON_CUH

#define SYMCON_MAX_D 16 /* coupling width: sum of 2l+1 of the target irreps (l <= 3) */

/* One U_nu of one output block, nonzeros packed as code = m | i_1 << 3 | ... | i_nu << (3 + 4 (nu-1)) | k << 19. */
struct symcon_part {
    int nu, K, dm, out_off;
    int64_t nnz;
    const int32_t *code;
    const double *val, *W; /* W: [elements][K][C]; in the float plan these point at float arrays */
};

__device__ inline void symcon_decode(int32_t code, int nu, int *m, int *idx, int *k) {
    *m = code & 7;
    for (int p = 0; p < nu; p++) idx[p] = (code >> (3 + 4 * p)) & 15;
    *k = code >> 19;
}

/* One node per block, one thread per channel; the channel's A row and B sums live in shared memory
 * columns (conflict-free), the nonzero stream is read once per warp. */
template <class T>
__global__ void k_symcon_fwd(const symcon_part *parts, int n_parts, int C, int D, int agnostic, const int32_t *species,
                             const T *A, int64_t lda, T *B, int64_t ldb) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sm = reinterpret_cast<T *>(smem_raw);
    const int nt = blockDim.x, ch = threadIdx.x;
    const int64_t n = blockIdx.x;
    if (ch >= C) return; /* no block-wide sync below: each thread uses its own columns */
    T *as = sm;
    double *bs = reinterpret_cast<double *>(smem_raw) + ((size_t)D * nt * sizeof(T) + 7) / 8; /* double sums */
    for (int i = 0; i < D; i++) as[i * nt + ch] = A[n * lda + ch * D + i];
    const int elem = agnostic ? 0 : species[n];
    for (int j = 0; j < n_parts; j++) {
        const symcon_part &pt = parts[j];
        if (pt.nu == 1)
            for (int m = 0; m < pt.dm; m++) bs[m * nt + ch] = 0;
        const T *W = reinterpret_cast<const T *>(pt.W) + (size_t)elem * pt.K * C + ch;
        const T *val = reinterpret_cast<const T *>(pt.val);
        for (int64_t q = 0; q < pt.nnz; q++) {
            int m, k, idx[CGQ_MAX_CORRELATION];
            symcon_decode(pt.code[q], pt.nu, &m, idx, &k);
            T prod = val[q] * W[(size_t)k * C];
            for (int p = 0; p < pt.nu; p++) prod *= as[idx[p] * nt + ch];
            bs[m * nt + ch] += (double)prod;
        }
        if (j + 1 == n_parts || parts[j + 1].nu == 1) { /* last part of this output block */
            T *Bj = B + n * ldb + pt.out_off + ch * pt.dm;
            for (int m = 0; m < pt.dm; m++) Bj[m] = (T)bs[m * nt + ch];
        }
    }
}

/* gA[n] = dE/dA from gB = dE/dB (overwrites) */
template <class T>
__global__ void k_symcon_bwd(const symcon_part *parts, int n_parts, int C, int D, int agnostic, const int32_t *species,
                             const T *A, int64_t lda, const T *gB, int64_t ldgb, T *gA, int64_t ldga) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sm = reinterpret_cast<T *>(smem_raw);
    const int nt = blockDim.x, ch = threadIdx.x;
    const int64_t n = blockIdx.x;
    if (ch >= C) return;
    T *as = sm, *gs = sm + (size_t)D * nt;
    double *gas = reinterpret_cast<double *>(smem_raw) + ((size_t)(D + 7) * nt * sizeof(T) + 7) / 8; /* double sums */
    for (int i = 0; i < D; i++) as[i * nt + ch] = A[n * lda + ch * D + i], gas[i * nt + ch] = 0;
    const int elem = agnostic ? 0 : species[n];
    for (int j = 0; j < n_parts; j++) {
        const symcon_part &pt = parts[j];
        if (pt.nu == 1)
            for (int m = 0; m < pt.dm; m++) gs[m * nt + ch] = gB[n * ldgb + pt.out_off + ch * pt.dm + m];
        const T *W = reinterpret_cast<const T *>(pt.W) + (size_t)elem * pt.K * C + ch;
        const T *val = reinterpret_cast<const T *>(pt.val);
        for (int64_t q = 0; q < pt.nnz; q++) {
            int m, k, idx[CGQ_MAX_CORRELATION];
            symcon_decode(pt.code[q], pt.nu, &m, idx, &k);
            const T s = gs[m * nt + ch] * val[q] * W[(size_t)k * C];
            if (s == 0) continue;
            for (int p = 0; p < pt.nu; p++) {
                T prod = s;
                for (int r = 0; r < pt.nu; r++)
                    if (r != p) prod *= as[idx[r] * nt + ch];
                gas[idx[p] * nt + ch] += (double)prod;
            }
        }
    }
    for (int i = 0; i < D; i++) gA[n * ldga + ch * D + i] = (T)gas[i * nt + ch];
}

struct symcon_plan {
    int ok, n_parts, threads;
    symcon_part *parts, *parts_f; /* device; parts_f: the float copies of the values and weights */
};

/* shared memory of the kernels for coupling width D, nt threads and operands of `es` bytes (sums in double) */
static inline size_t symcon_fwd_smem(int D, int nt, size_t es) {
    return ((size_t)D * nt * es + 7) / 8 * 8 + sizeof(double) * 7 * (size_t)nt;
}
static inline size_t symcon_bwd_smem(int D, int nt, size_t es) {
    return ((size_t)(D + 7) * nt * es + 7) / 8 * 8 + sizeof(double) * (size_t)D * nt;
}

#endif
