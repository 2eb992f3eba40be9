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

/* x^p by squaring where p is a whole number up to 64 (the models' cutoffs have p = 5 or 6), else pow: a double pow
 * is ~150 instructions on the GPU, and the edge tails on the step's critical path took four per edge */
CGQ_INTERNAL double power_of(double x, double p) {
    if (!(p >= 0.0 && p <= 64.0 && p == (double)(int)p)) return pow(x, p);
    double y = 1.0;
    for (int n = (int)p; n; n >>= 1, x *= x)
        if (n & 1) y *= x;
    return y;
}

CGQ_FN double cgq_poly_cutoff(double p, double r_max, double r, double *df) {
    if (!(r < r_max)) {
        if (df) *df = 0.0;
        return 0.0;
    }
    const double x = r / r_max;
    const double xp = power_of(x, p), xp1 = xp * x, xp2 = xp1 * x;
    const double a = (p + 1.0) * (p + 2.0) / 2.0, b = p * (p + 2.0), c = p * (p + 1.0) / 2.0;
    if (df) {
        const double xm1 = power_of(x, p - 1.0);
        *df = (-a * p * xm1 + b * (p + 1.0) * xp - c * (p + 2.0) * xp1) / r_max;
    }
    return 1.0 - a * xp + b * xp1 - c * xp2;
}

CGQ_FN double cgq_agnesi(const cgq_model *m, int su, int sv, double r, double *dr) {
    const double r0 = 0.5 * (m->agnesi_radii[su] + m->agnesi_radii[sv]);
    const double q = m->agnesi_q, p = m->agnesi_p, a = m->agnesi_a, s = r / r0;
    const double sq = pow(s, q), sqp = pow(s, q - p), den = 1.0 + sqp;
    const double f = a * sq / den;
    const double df_ds = a * (q * pow(s, q - 1.0) * den - sq * (q - p) * pow(s, q - p - 1.0)) / (den * den);
    const double rt = 1.0 / (1.0 + f);
    if (dr) *dr = -rt * rt * df_ds / r0;
    return rt;
}

CGQ_FN double cgq_zbl_edge(const cgq_model *m, int su, int sv, double r, double *de) {
    const double d[4] = {3.2, 0.9423, 0.4028, 0.2016};
    const double zu = m->species_z[su], zv = m->species_z[sv];
    const double a = m->zbl_a_prefactor * 0.529 / (pow(zu, m->zbl_a_exp) + pow(zv, m->zbl_a_exp));
    double phi = 0.0, dphi = 0.0;
    for (int k = 0; k < 4; k++) {
        const double t = m->zbl_c[k] * exp(-d[k] * r / a);
        phi += t;
        dphi -= t * d[k] / a;
    }
    const double K = 14.3996 * zu * zv;
    const double V = K * phi / r, dV = K * (dphi * r - phi) / (r * r);
    double denv;
    const double env = cgq_poly_cutoff(m->zbl_p, m->zbl_radii[su] + m->zbl_radii[sv], r, &denv);
    if (de) *de = 0.5 * (dV * env + V * denv);
    return 0.5 * V * env;
}
