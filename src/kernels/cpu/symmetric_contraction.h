/* symmetric_contraction.h: MACE SymmetricContraction (product basis) for one node, with backward. */
#ifndef CGQ_CPU_SYMCON_H
#define CGQ_CPU_SYMCON_H
#include "kernels/portable.h"
#include "model/model.h"
/* A [C][D] (channel-major) -> B in product_out mul_ir layout, channels [c0, c1) (overwritten).
 * elem: species index. */
CGQ_FN void cgq_symcon_forward(const cgq_mace_layer *ly, int elem, const double *A, double *B, int c0, int c1);
/* gA[C][D] += d<gB, B(A)>/dA for channels [c0, c1). */
CGQ_FN void cgq_symcon_backward(const cgq_mace_layer *ly, int elem, const double *A, const double *gB, double *gA, int c0,
                                int c1);
#endif
