/* symmetric_contraction.c: B[c,m] = sum_nu sum_{nonzero U_nu[m,i_1..i_nu,k]} U * W_nu[e,k,c] * prod_p A[c,i_p],
 * over the sparse nonzeros of the exported U matrices (same math as mace's Horner evaluation).
 * Channels are independent, so each call handles a channel range [c0, c1): the CPU passes all channels,
 * the GPU one channel per thread. */
#include "kernels/cpu/symmetric_contraction.h"

CGQ_FN void cgq_symcon_forward(const cgq_mace_layer *ly, int elem, const double *A, double *B, int c0, int c1) {
    const int C = ly->channels, D = ly->coupling_dim;
    for (int j = 0; j < ly->n_contractions; j++) {
        const cgq_contraction *ct = &ly->contractions[j];
        const int dm = 2 * ct->l_out + 1;
        double *Bj = B + ly->product_out.b[j].offset; /* [C][dm] */
        for (int ch = c0; ch < c1; ch++)
            for (int m = 0; m < dm; m++) Bj[ch * dm + m] = 0.0;
        for (int nu = 1; nu <= ct->correlation; nu++) {
            const int K = ct->K[nu];
            const double *W = ct->W[nu] + (size_t)elem * K * C;
            for (int64_t q = 0; q < ct->nnz[nu]; q++) {
                const double u = ct->u_val[nu][q];
                const int m = ct->u_m[nu][q];
                const int32_t *idx = ct->u_idx[nu] + q * nu;
                const double *Wk = W + (size_t)ct->u_k[nu][q] * C;
                for (int ch = c0; ch < c1; ch++) {
                    double prod = u * Wk[ch];
                    for (int p = 0; p < nu; p++) prod *= A[ch * D + idx[p]];
                    Bj[ch * dm + m] += prod;
                }
            }
        }
    }
}

CGQ_FN void cgq_symcon_backward(const cgq_mace_layer *ly, int elem, const double *A, const double *gB, double *gA, int c0,
                                int c1) {
    const int C = ly->channels, D = ly->coupling_dim;
    for (int j = 0; j < ly->n_contractions; j++) {
        const cgq_contraction *ct = &ly->contractions[j];
        const int dm = 2 * ct->l_out + 1;
        const double *gBj = gB + ly->product_out.b[j].offset;
        for (int nu = 1; nu <= ct->correlation; nu++) {
            const int K = ct->K[nu];
            const double *W = ct->W[nu] + (size_t)elem * K * C;
            for (int64_t q = 0; q < ct->nnz[nu]; q++) {
                const double u = ct->u_val[nu][q];
                const int m = ct->u_m[nu][q];
                const int32_t *idx = ct->u_idx[nu] + q * nu;
                const double *Wk = W + (size_t)ct->u_k[nu][q] * C;
                for (int ch = c0; ch < c1; ch++) {
                    const double g = gBj[ch * dm + m] * u * Wk[ch];
                    if (g == 0.0) continue;
                    const double *Ac = A + ch * D;
                    for (int p = 0; p < nu; p++) {
                        double prod = g;
                        for (int r = 0; r < nu; r++)
                            if (r != p) prod *= Ac[idx[r]];
                        gA[ch * D + idx[p]] += prod;
                    }
                }
            }
        }
    }
}
