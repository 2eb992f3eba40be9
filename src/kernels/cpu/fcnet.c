/* fcnet.c: hidden layers x <- cst*act(x @ W / sqrt(h_in)), last layer x @ W / sqrt(h_in). */
#include "kernels/cpu/fcnet.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/activation.h"

CGQ_FN int cgq_fcnet_cache_size(const cgq_fcnet *fc) {
    int n = 0;
    for (int k = 1; k < fc->n_layers; k++) n += 2 * fc->h[k];
    return n;
}

CGQ_FN int cgq_fcnet_max_width(const cgq_fcnet *fc) {
    int w = 0;
    for (int k = 0; k <= fc->n_layers; k++) w = fc->h[k] > w ? fc->h[k] : w;
    return w;
}

CGQ_INTERNAL void matvec(const double *x, const double *W, int hin, int hout, double scale, double *y) {
    for (int j = 0; j < hout; j++) y[j] = 0.0;
    for (int i = 0; i < hin; i++) {
        const double xi = x[i] * scale;
        const double *Wi = W + (size_t)i * hout;
        for (int j = 0; j < hout; j++) y[j] += xi * Wi[j];
    }
}

CGQ_FN void cgq_rows_dot(const double *W, int rows, int cols, const double *g, double scale, double *dst) {
    /* four rows at a time so that four independent sums are in flight (each in j order: the same bits as one row
     * at a time; the MACE water model's radial MLP reverse took 16 instead of 32 ms per 192-atom step on one core) */
    int i = 0;
    for (; i + 4 <= rows; i += 4) {
        const double *W0 = W + (size_t)i * cols, *W1 = W0 + cols, *W2 = W1 + cols, *W3 = W2 + cols;
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        for (int j = 0; j < cols; j++) {
            const double gj = g[j];
            s0 += W0[j] * gj, s1 += W1[j] * gj, s2 += W2[j] * gj, s3 += W3[j] * gj;
        }
        dst[i] = s0 * scale, dst[i + 1] = s1 * scale, dst[i + 2] = s2 * scale, dst[i + 3] = s3 * scale;
    }
    for (; i < rows; i++) {
        const double *Wi = W + (size_t)i * cols;
        double s = 0.0;
        for (int j = 0; j < cols; j++) s += Wi[j] * g[j];
        dst[i] = s * scale;
    }
}

CGQ_FN void cgq_fcnet_forward(const cgq_fcnet *fc, const double *x, double *out, double *cache) {
    const double *in = x;
    double *c = cache;
    for (int k = 0; k < fc->n_layers; k++) {
        const int hin = fc->h[k], hout = fc->h[k + 1];
        const double scale = 1.0 / sqrt((double)hin);
        if (k == fc->n_layers - 1) {
            matvec(in, fc->W[k], hin, hout, scale, out);
            break;
        }
        double *z = c, *a = c + hout;
        matvec(in, fc->W[k], hin, hout, scale, z);
        for (int j = 0; j < hout; j++) a[j] = cgq_act_eval(fc->act, fc->act_cst, z[j], NULL);
        in = a;
        c += 2 * hout;
    }
}

CGQ_FN void cgq_fcnet_backward(const cgq_fcnet *fc, const double *x, const double *cache, const double *gout, double *gx,
                        double *scratch) {
    const int maxw = cgq_fcnet_max_width(fc);
    double *g = scratch, *gprev = scratch + maxw;
    memcpy(g, gout, sizeof(double) * (size_t)fc->h[fc->n_layers]);
    /* offsets of each hidden layer's cache block */
    int off[CGQ_MAX_FC_LAYERS + 1], o = 0;
    for (int k = 1; k < fc->n_layers; k++) {
        off[k] = o;
        o += 2 * fc->h[k];
    }
    for (int k = fc->n_layers - 1; k >= 0; k--) {
        const int hin = fc->h[k], hout = fc->h[k + 1];
        const double scale = 1.0 / sqrt((double)hin);
        const double *W = fc->W[k];
        double *dst = k == 0 ? gx : gprev;
        cgq_rows_dot(W, hin, hout, g, scale, dst);
        if (k == 0) break;
        /* through the activation of hidden layer k (input of layer k) */
        const double *z = cache + off[k];
        for (int q = 0; q < hin; q++) {
            double d;
            cgq_act_eval(fc->act, fc->act_cst, z[q], &d);
            dst[q] *= d;
        }
        double *t = g;
        g = gprev;
        gprev = t;
    }
    (void)x;
}
