/* symcon.cuh: MACE's symmetric contraction (product basis) on the GPU, one thread per (node, channel),
 * channels fastest so a warp reads one species' weights W[k][c] coalesced. Same math and nonzero order as
 * kernels/cpu/symmetric_contraction.c, but the channel's A row and its B / dE/dA sums stay in registers
 * or thread-local memory instead of being read and written in global memory per nonzero. */
#ifndef CGQ_GPU_SYMCON_CUH
#define CGQ_GPU_SYMCON_CUH

#define SYMCON_MAX_D 16 /* coupling width: sum of 2l+1 of the target irreps (l <= 3) */

__global__ void k_symcon_fwd(const cgq_mace_layer *ly, int64_t n_nodes, const int32_t *species, const double *A, int64_t lda,
                             double *B, int64_t ldb) {
    const int C = ly->channels, D = ly->coupling_dim;
    const int64_t total = n_nodes * C;
    for (int64_t q0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q0 < total; q0 += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = q0 / C;
        const int ch = (int)(q0 % C), elem = ly->agnostic ? 0 : species[n];
        double a[SYMCON_MAX_D];
        for (int i = 0; i < D; i++) a[i] = A[n * lda + ch * D + i];
        for (int j = 0; j < ly->n_contractions; j++) {
            const cgq_contraction *ct = &ly->contractions[j];
            const int dm = 2 * ct->l_out + 1;
            double b[7] = {0, 0, 0, 0, 0, 0, 0};
            for (int nu = 1; nu <= ct->correlation; nu++) {
                const double *W = ct->W[nu] + (size_t)elem * ct->K[nu] * C + ch;
                const double *uv = ct->u_val[nu];
                const int32_t *um = ct->u_m[nu], *uk = ct->u_k[nu], *ui = ct->u_idx[nu];
                for (int64_t q = 0; q < ct->nnz[nu]; q++) {
                    double prod = uv[q] * W[(size_t)uk[q] * C];
                    for (int p = 0; p < nu; p++) prod *= a[ui[q * nu + p]];
                    b[um[q]] += prod;
                }
            }
            double *Bj = B + n * ldb + ly->product_out.b[j].offset + ch * dm;
            for (int m = 0; m < dm; m++) Bj[m] = b[m];
        }
    }
}

/* gA[n] = dE/dA from gB = dE/dB (overwrites) */
__global__ void k_symcon_bwd(const cgq_mace_layer *ly, int64_t n_nodes, const int32_t *species, const double *A, int64_t lda,
                             const double *gB, int64_t ldgb, double *gA, int64_t ldga) {
    const int C = ly->channels, D = ly->coupling_dim;
    const int64_t total = n_nodes * C;
    for (int64_t q0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q0 < total; q0 += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = q0 / C;
        const int ch = (int)(q0 % C), elem = ly->agnostic ? 0 : species[n];
        double a[SYMCON_MAX_D], ga[SYMCON_MAX_D];
        for (int i = 0; i < D; i++) a[i] = A[n * lda + ch * D + i], ga[i] = 0.0;
        for (int j = 0; j < ly->n_contractions; j++) {
            const cgq_contraction *ct = &ly->contractions[j];
            const int dm = 2 * ct->l_out + 1;
            double g[7];
            const double *gBj = gB + n * ldgb + ly->product_out.b[j].offset + ch * dm;
            for (int m = 0; m < dm; m++) g[m] = gBj[m];
            for (int nu = 1; nu <= ct->correlation; nu++) {
                const double *W = ct->W[nu] + (size_t)elem * ct->K[nu] * C + ch;
                const double *uv = ct->u_val[nu];
                const int32_t *um = ct->u_m[nu], *uk = ct->u_k[nu], *ui = ct->u_idx[nu];
                for (int64_t q = 0; q < ct->nnz[nu]; q++) {
                    const double s = g[um[q]] * uv[q] * W[(size_t)uk[q] * C];
                    if (s == 0.0) continue;
                    const int32_t *idx = ui + q * nu;
                    for (int p = 0; p < nu; p++) {
                        double prod = s;
                        for (int r = 0; r < nu; r++)
                            if (r != p) prod *= a[idx[r]];
                        ga[idx[p]] += prod;
                    }
                }
            }
        }
        for (int i = 0; i < D; i++) gA[n * ldga + ch * D + i] = ga[i];
    }
}

#endif
