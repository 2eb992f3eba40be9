/* linear.h: e3nn o3.Linear on one feature vector, forward and its transpose (backward). */
#ifndef CGQ_CPU_LINEAR_H
#define CGQ_CPU_LINEAR_H
#include "kernels/portable.h"
#include "model/model.h"
/* y = Linear(x) (y overwritten, [out.dim]). */
CGQ_FN void cgq_linear_forward(const cgq_linear *lin, const double *x, double *y);
/* gx += Linear^T(gy) ([in.dim]); the bias has no input gradient. */
CGQ_FN void cgq_linear_backward(const cgq_linear *lin, const double *gy, double *gx);
#endif
