/* symmetric_contraction.h: MACE SymmetricContraction (product basis) for one node, with backward. */
#ifndef CGQ_CPU_SYMCON_H
#define CGQ_CPU_SYMCON_H
#include "kernels/portable.h"
#include "model/model.h"
/* A [C][D] (channel-major) -> B in product_out mul_ir layout (overwritten). elem: species index. */
CGQ_FN void cgq_symcon_forward(const cgq_mace_layer *ly, int elem, const double *A, double *B);
/* gA[C][D] += d<gB, B(A)>/dA. */
CGQ_FN void cgq_symcon_backward(const cgq_mace_layer *ly, int elem, const double *A, const double *gB, double *gA);
#endif
