/* fcnet.h: e3nn FullyConnectedNet (radial MLP) on one input row, forward with cache and backward. */
#ifndef CGQ_CPU_FCNET_H
#define CGQ_CPU_FCNET_H
#include "kernels/portable.h"
#include "model/model.h"
/* Doubles of cache one evaluation needs (pre-activations and activations of hidden layers). */
CGQ_FN int cgq_fcnet_cache_size(const cgq_fcnet *fc);
/* out[h_last] = net(x); cache (size above) keeps what the backward needs. */
CGQ_FN void cgq_fcnet_forward(const cgq_fcnet *fc, const double *x, double *out, double *cache);
/* gx[h0] = d<gout, net(x)>/dx (overwritten); scratch holds 2*max(h) doubles. */
CGQ_FN void cgq_fcnet_backward(const cgq_fcnet *fc, const double *x, const double *cache, const double *gout, double *gx,
                        double *scratch);
CGQ_FN int cgq_fcnet_max_width(const cgq_fcnet *fc);
/* dst[i] = scale * sum_j W[i * cols + j] g[j] for i < rows, each sum in j order (the MLP reverses) */
CGQ_FN void cgq_rows_dot(const double *W, int rows, int cols, const double *g, double scale, double *dst);
#endif
