/* tensor_product.c: reference (clear, float64) e3nn tensor products.
 * uvw: out[w,c] += pw sum_{u,v} W[u,v,w] sum_{a,b} C[a,b,c] x1[u,a] x2[v,b]
 * uvu: out[u,c] += pw sum_v     W[u,v]   sum_{a,b} C[a,b,c] x1[u,a] x2[v,b]
 * uuu: out[u,c] += pw W[u] sum_{a,b} C[a,b,c] x1[u,a] x2[u,b]   (W = 1 without weight) */
#include "kernels/cpu/tensor_product.h"

#include <string.h>

#define MAXD 7 /* 2l+1 for l <= 3 */

/* t[c] = sum_{a,b} C[a,b,c] x1[a] x2[b] */
CGQ_INTERNAL void couple(const double *C, int d1, int d2, int d3, const double *x1, const double *x2, double *t) {
    for (int c = 0; c < d3; c++) t[c] = 0.0;
    for (int a = 0; a < d1; a++) {
        if (x1[a] == 0.0) continue;
        for (int b = 0; b < d2; b++) {
            const double s = x1[a] * x2[b];
            if (s == 0.0) continue;
            const double *Cab = C + (a * d2 + b) * d3;
            for (int c = 0; c < d3; c++) t[c] += Cab[c] * s;
        }
    }
}

/* g1[a] += sum_{b,c} C[a,b,c] x2[b] g[c] */
CGQ_INTERNAL void couple_back1(const double *C, int d1, int d2, int d3, const double *x2, const double *g, double *g1) {
    for (int a = 0; a < d1; a++) {
        double s = 0.0;
        for (int b = 0; b < d2; b++) {
            const double *Cab = C + (a * d2 + b) * d3;
            double t = 0.0;
            for (int c = 0; c < d3; c++) t += Cab[c] * g[c];
            s += t * x2[b];
        }
        g1[a] += s;
    }
}

CGQ_INTERNAL int x2_block_zero(const double *x2, int d) {
    for (int b = 0; b < d; b++)
        if (x2[b] != 0.0) return 0;
    return 1;
}

CGQ_FN void cgq_tp_node_forward(const cgq_tp *tp, const double *x1, const double *x2, double *out) {
    memset(out, 0, sizeof(double) * (size_t)tp->out.dim);
    double t[MAXD];
    for (int k = 0; k < tp->n_ins; k++) {
        const cgq_irrep_block *B1 = &tp->in1.b[tp->i1[k]], *B2 = &tp->in2.b[tp->i2[k]], *BO = &tp->out.b[tp->io[k]];
        const int d1 = 2 * B1->l + 1, d2 = 2 * B2->l + 1, d3 = 2 * BO->l + 1;
        const int m1 = B1->mul, m2 = B2->mul, mo = BO->mul;
        const double pw = tp->path_weight[k], *C = tp->w3j[k];
        const double *W = tp->has_weight[k] ? tp->weight + tp->w_offset[k] : NULL;
        const double *x1b = x1 + B1->offset, *x2b = x2 + B2->offset;
        double *ob = out + BO->offset;
        if (tp->mode[k] == CGQ_TP_UUU) {
            for (int u = 0; u < m1; u++) {
                couple(C, d1, d2, d3, x1b + u * d1, x2b + u * d2, t);
                const double s = pw * (W ? W[u] : 1.0);
                for (int c = 0; c < d3; c++) ob[u * d3 + c] += s * t[c];
            }
            continue;
        }
        for (int v = 0; v < m2; v++) {
            if (x2_block_zero(x2b + v * d2, d2)) continue;
            for (int u = 0; u < m1; u++) {
                couple(C, d1, d2, d3, x1b + u * d1, x2b + v * d2, t);
                if (tp->mode[k] == CGQ_TP_UVW) {
                    for (int w = 0; w < mo; w++) {
                        const double s = pw * (W ? W[(u * m2 + v) * mo + w] : 1.0);
                        for (int c = 0; c < d3; c++) ob[w * d3 + c] += s * t[c];
                    }
                } else {
                    const double s = pw * (W ? W[u * m2 + v] : 1.0);
                    for (int c = 0; c < d3; c++) ob[u * d3 + c] += s * t[c];
                }
            }
        }
    }
}

CGQ_FN void cgq_tp_node_backward_x1(const cgq_tp *tp, const double *x2, const double *gout, double *gx1) {
    double g[MAXD];
    for (int k = 0; k < tp->n_ins; k++) {
        const cgq_irrep_block *B1 = &tp->in1.b[tp->i1[k]], *B2 = &tp->in2.b[tp->i2[k]], *BO = &tp->out.b[tp->io[k]];
        const int d1 = 2 * B1->l + 1, d2 = 2 * B2->l + 1, d3 = 2 * BO->l + 1;
        const int m1 = B1->mul, m2 = B2->mul, mo = BO->mul;
        const double pw = tp->path_weight[k], *C = tp->w3j[k];
        const double *W = tp->has_weight[k] ? tp->weight + tp->w_offset[k] : NULL;
        const double *x2b = x2 + B2->offset, *gb = gout + BO->offset;
        double *g1 = gx1 + B1->offset;
        if (tp->mode[k] == CGQ_TP_UUU) {
            for (int u = 0; u < m1; u++) {
                const double s = pw * (W ? W[u] : 1.0);
                for (int c = 0; c < d3; c++) g[c] = s * gb[u * d3 + c];
                couple_back1(C, d1, d2, d3, x2b + u * d2, g, g1 + u * d1);
            }
            continue;
        }
        for (int v = 0; v < m2; v++) {
            if (x2_block_zero(x2b + v * d2, d2)) continue;
            for (int u = 0; u < m1; u++) {
                if (tp->mode[k] == CGQ_TP_UVW) {
                    for (int c = 0; c < d3; c++) g[c] = 0.0;
                    for (int w = 0; w < mo; w++) {
                        const double s = pw * (W ? W[(u * m2 + v) * mo + w] : 1.0);
                        for (int c = 0; c < d3; c++) g[c] += s * gb[w * d3 + c];
                    }
                } else {
                    const double s = pw * (W ? W[u * m2 + v] : 1.0);
                    for (int c = 0; c < d3; c++) g[c] = s * gb[u * d3 + c];
                }
                couple_back1(C, d1, d2, d3, x2b + v * d2, g, g1 + u * d1);
            }
        }
    }
}

/* P[a][c] = sum_b C[a,b,c] Y[b]: the SH-contracted coupling of one instruction. */
CGQ_INTERNAL void contract_y(const double *C, int d1, int d2, int d3, const double *Y, double *P) {
    for (int a = 0; a < d1; a++)
        for (int c = 0; c < d3; c++) {
            double s = 0.0;
            for (int b = 0; b < d2; b++) s += C[(a * d2 + b) * d3 + c] * Y[b];
            P[a * d3 + c] = s;
        }
}

CGQ_FN void cgq_tp_conv_forward(const cgq_tp *tp, const double *x1, const double *Y, const double *w, double *out) {
    double P[MAXD * MAXD];
    for (int k = 0; k < tp->n_ins; k++) {
        const cgq_irrep_block *B1 = &tp->in1.b[tp->i1[k]], *B2 = &tp->in2.b[tp->i2[k]], *BO = &tp->out.b[tp->io[k]];
        const int d1 = 2 * B1->l + 1, d2 = 2 * B2->l + 1, d3 = 2 * BO->l + 1, m1 = B1->mul;
        contract_y(tp->w3j[k], d1, d2, d3, Y + B2->offset, P);
        const double pw = tp->path_weight[k];
        const double *wk = w + tp->w_offset[k], *x1b = x1 + B1->offset;
        double *ob = out + BO->offset;
        for (int u = 0; u < m1; u++) {
            const double s = pw * wk[u];
            const double *xu = x1b + u * d1;
            for (int c = 0; c < d3; c++) {
                double t = 0.0;
                for (int a = 0; a < d1; a++) t += xu[a] * P[a * d3 + c];
                ob[u * d3 + c] += s * t;
            }
        }
    }
}

CGQ_FN void cgq_tp_conv_backward(const cgq_tp *tp, const double *x1, const double *Y, const double *w, const double *gout,
                          double *gx1, double *gY, double *gw) {
    double P[MAXD * MAXD], Q[MAXD * MAXD];
    for (int k = 0; k < tp->n_ins; k++) {
        const cgq_irrep_block *B1 = &tp->in1.b[tp->i1[k]], *B2 = &tp->in2.b[tp->i2[k]], *BO = &tp->out.b[tp->io[k]];
        const int d1 = 2 * B1->l + 1, d2 = 2 * B2->l + 1, d3 = 2 * BO->l + 1, m1 = B1->mul;
        const double *C = tp->w3j[k];
        contract_y(C, d1, d2, d3, Y + B2->offset, P);
        const double pw = tp->path_weight[k];
        const double *wk = w + tp->w_offset[k], *x1b = x1 + B1->offset, *gb = gout + BO->offset;
        if (gY) memset(Q, 0, sizeof(double) * (size_t)(d1 * d3));
        for (int u = 0; u < m1; u++) {
            const double *xu = x1b + u * d1, *gu = gb + u * d3;
            if (gw || gx1) { /* t[a] = sum_c P[a,c] g[u,c], computed once for dE/dw and dE/dx */
                double t[MAXD], s = 0.0;
                for (int a = 0; a < d1; a++) {
                    double ta = 0.0;
                    for (int c = 0; c < d3; c++) ta += P[a * d3 + c] * gu[c];
                    t[a] = ta;
                    s += xu[a] * ta;
                }
                if (gw) gw[tp->w_offset[k] + u] += pw * s;
                if (gx1) {
                    double *g1 = gx1 + B1->offset + u * d1;
                    for (int a = 0; a < d1; a++) g1[a] += pw * wk[u] * t[a];
                }
            }
            if (gY)
                for (int a = 0; a < d1; a++)
                    for (int c = 0; c < d3; c++) Q[a * d3 + c] += wk[u] * xu[a] * gu[c];
        }
        if (gY) {
            double *gy = gY + B2->offset;
            for (int b = 0; b < d2; b++) {
                double s = 0.0;
                for (int a = 0; a < d1; a++)
                    for (int c = 0; c < d3; c++) s += C[(a * d2 + b) * d3 + c] * Q[a * d3 + c];
                gy[b] += pw * s;
            }
        }
    }
}
