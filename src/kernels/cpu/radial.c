/* radial.c: B_n(r) = prefactor sin(w_n r)/r and
 * f(x) = 1 - (p+1)(p+2)/2 x^p + p(p+2) x^(p+1) - p(p+1)/2 x^(p+2), x = r/r_max, times (r < r_max). */
#include "kernels/cpu/radial.h"

#include <math.h>

CGQ_FN void cgq_bessel(const cgq_model *m, double r, double *B, double *dB) {
    for (int n = 0; n < m->n_bessel; n++) {
        const double w = m->bessel_weights[n], s = sin(w * r);
        B[n] = m->bessel_prefactor * s / r;
        if (dB) dB[n] = m->bessel_prefactor * (w * cos(w * r) * r - s) / (r * r);
    }
}

CGQ_FN double cgq_poly_cutoff(double p, double r_max, double r, double *df) {
    if (!(r < r_max)) {
        if (df) *df = 0.0;
        return 0.0;
    }
    const double x = r / r_max;
    const double xp = pow(x, p), xp1 = pow(x, p + 1.0), xp2 = pow(x, p + 2.0);
    const double a = (p + 1.0) * (p + 2.0) / 2.0, b = p * (p + 2.0), c = p * (p + 1.0) / 2.0;
    if (df) {
        const double xm1 = pow(x, p - 1.0);
        *df = (-a * p * xm1 + b * (p + 1.0) * xp - c * (p + 2.0) * xp1) / r_max;
    }
    return 1.0 - a * xp + b * xp1 - c * xp2;
}
