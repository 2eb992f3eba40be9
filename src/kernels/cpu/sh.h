/* sh.h: e3nn real spherical harmonics (component normalization, normalize=True) up to l=3, with gradient. */
#ifndef CGQ_SH_H
#define CGQ_SH_H
#include "kernels/portable.h"

/* Y[(lmax+1)^2] of the direction of v; dY[(lmax+1)^2][3] = dY/dv if dY != NULL. v must be nonzero. */
CGQ_FN void cgq_sh_eval(int lmax, const double v[3], double *Y, double *dY);

#endif
