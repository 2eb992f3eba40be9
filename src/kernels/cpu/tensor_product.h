/* tensor_product.h: e3nn TensorProduct with explicit W3j: node-side (weights internal) and the
 * per-edge 'uvu' convolution with external per-edge weights, each with its backward. */
#ifndef CGQ_CPU_TP_H
#define CGQ_CPU_TP_H
#include "kernels/portable.h"
#include "model/model.h"

/* out = TP(x1, x2) with the TP's internal weights (out overwritten). Zero entries of x2 are
 * skipped, so a one-hot x2 (species) costs one slice. */
CGQ_FN void cgq_tp_node_forward(const cgq_tp *tp, const double *x1, const double *x2, double *out);
/* gx1 += d<gout, TP(x1,x2)>/dx1. */
CGQ_FN void cgq_tp_node_backward_x1(const cgq_tp *tp, const double *x2, const double *gout, double *gx1);

/* Convolution message of one edge: out += TP(x1, Y, w) for 'uvu' instructions with in2 = SH (mul 1). */
CGQ_FN void cgq_tp_conv_forward(const cgq_tp *tp, const double *x1, const double *Y, const double *w, double *out);
/* Its backward: any of gx1 / gY / gw may be NULL; the others are accumulated (+=). */
CGQ_FN void cgq_tp_conv_backward(const cgq_tp *tp, const double *x1, const double *Y, const double *w,
                          const double *gout, double *gx1, double *gY, double *gw);
#endif
