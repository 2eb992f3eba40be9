/* activation.c: silu, tanh, sigmoid, shifted softplus, abs, identity. */
#include "kernels/cpu/activation.h"

#include <math.h>

CGQ_INTERNAL double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)); }

CGQ_FN double cgq_act_eval(cgq_act act, double cst, double x, double *df) {
    double f, d;
    switch (act) {
    case CGQ_ACT_SILU: {
        const double s = sigmoid(x);
        f = x * s;
        d = s * (1.0 + x * (1.0 - s));
        break;
    }
    case CGQ_ACT_TANH: f = tanh(x), d = 1.0 - f * f; break;
    case CGQ_ACT_SIGMOID: f = sigmoid(x), d = f * (1.0 - f); break;
    case CGQ_ACT_SSP: /* softplus(x) - log(2), as torch.nn.functional.softplus (threshold 20) */
        f = (x > 20.0 ? x : log1p(exp(x))) - log(2.0);
        d = sigmoid(x);
        break;
    case CGQ_ACT_ABS: f = fabs(x), d = x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); break;
    case CGQ_ACT_IDENTITY:
    default: f = x, d = 1.0; break;
    }
    if (df) *df = cst * d;
    return cst * f;
}
