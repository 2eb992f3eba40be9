/* sh.h: e3nn real spherical harmonics (component normalization, normalize=True) up to l=3, and their reverse. */
#ifndef CGQ_SH_H
#define CGQ_SH_H
#include "kernels/portable.h"

/* Y[(lmax+1)^2] of the direction of v (v nonzero) */
CGQ_FN void cgq_sh_eval(int lmax, const double v[3], double *Y);

/* gv = sum_j gY[j] dY_j/dv: the gradient of Y's components weighted by gY[(lmax+1)^2] (v nonzero) */
CGQ_FN void cgq_sh_vjp(int lmax, const double v[3], const double *gY, double gv[3]);

#endif
