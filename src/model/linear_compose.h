/* linear_compose.h: two e3nn o3.Linear maps applied one after the other, as one map. The GPU steps use it to go from
 * a layer's product basis straight to the next layer's linear_up input (mace_gpu.cu, build_up_compose). */
#ifndef CGQ_LINEAR_COMPOSE_H
#define CGQ_LINEAR_COMPOSE_H
#include "model/model.h"
#ifdef __cplusplus
extern "C" {
#endif
/* Whether b after a is one linear map of a's input: neither has a bias, and a's output is laid out as b's input. */
int cgq_linear_composable(const cgq_linear *a, const cgq_linear *b);
/* out = b after a (cgq_linear_composable): a's input, b's output, one instruction per pair of blocks that a path
 * joins, weights sum over the middle blocks of pw_a pw_b W_a W_b (path weight 1). Free it with
 * cgq_linear_compose_free. */
cgq_status cgq_linear_compose(const cgq_linear *a, const cgq_linear *b, cgq_linear *out);
void cgq_linear_compose_free(cgq_linear *out);
#ifdef __cplusplus
}
#endif
#endif
