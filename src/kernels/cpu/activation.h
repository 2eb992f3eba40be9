/* activation.h: scalar activations (times e3nn's normalize2mom constant) and their derivatives. */
#ifndef CGQ_CPU_ACTIVATION_H
#define CGQ_CPU_ACTIVATION_H
#include "kernels/portable.h"
#include "model/model.h"
/* f = cst * act(x); *df = cst * act'(x) if df != NULL. */
CGQ_FN double cgq_act_eval(cgq_act act, double cst, double x, double *df);
#endif
