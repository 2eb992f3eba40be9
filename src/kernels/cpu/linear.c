/* linear.c: out[i_out][w,m] = sum_ins pw * sum_u W[u,w] x[i_in][u,m] (+ bias on 0e blocks). */
#include "kernels/cpu/linear.h"

#include <string.h>

CGQ_FN void cgq_linear_forward(const cgq_linear *lin, const double *x, double *y) {
    memset(y, 0, sizeof(double) * (size_t)lin->out.dim);
    for (int k = 0; k < lin->n_ins; k++) {
        const cgq_irrep_block *bi = &lin->in.b[lin->ins_in[k]], *bo = &lin->out.b[lin->ins_out[k]];
        const int d = 2 * bi->l + 1, mi = bi->mul, mo = bo->mul;
        const double pw = lin->path_weight[k];
        const double *W = lin->weight + lin->w_offset[k];
        const double *xb = x + bi->offset;
        double *yb = y + bo->offset;
        for (int u = 0; u < mi; u++)
            for (int w = 0; w < mo; w++) {
                const double c = pw * W[u * mo + w];
                for (int m = 0; m < d; m++) yb[w * d + m] += c * xb[u * d + m];
            }
    }
    if (lin->bias) {
        int off = 0;
        for (int i = 0; i < lin->out.n; i++) {
            const cgq_irrep_block *b = &lin->out.b[i];
            if (b->l != 0 || b->parity != 1) continue;
            for (int w = 0; w < b->mul; w++) y[b->offset + w] += lin->bias[off + w];
            off += b->mul;
        }
    }
}

CGQ_FN void cgq_linear_backward(const cgq_linear *lin, const double *gy, double *gx) {
    for (int k = 0; k < lin->n_ins; k++) {
        const cgq_irrep_block *bi = &lin->in.b[lin->ins_in[k]], *bo = &lin->out.b[lin->ins_out[k]];
        const int d = 2 * bi->l + 1, mi = bi->mul, mo = bo->mul;
        const double pw = lin->path_weight[k];
        const double *W = lin->weight + lin->w_offset[k];
        const double *gb = gy + bo->offset;
        double *xb = gx + bi->offset;
        for (int u = 0; u < mi; u++)
            for (int w = 0; w < mo; w++) {
                const double c = pw * W[u * mo + w];
                for (int m = 0; m < d; m++) xb[u * d + m] += c * gb[w * d + m];
            }
    }
}
