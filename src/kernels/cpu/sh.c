/* sh.c: explicit e3nn spherical-harmonic polynomials of u = v/|v| (component i of l=1 is u_i), and the reverse of
 * their gradient dY/dv = dP/du (I - u u^T) / |v|. Formulas: docs/model-math (A2). */
#include "kernels/cpu/sh.h"

#include <math.h>
#include <stddef.h>

/* Polynomial j with value p and gradient (d0, d1, d2) = dP_j/du: into P[j] when P is not NULL; with gY, its gradient
 * weighted by gY[j] added to g */
CGQ_INTERNAL void sh_term(double *P, const double *gY, double g[3], int j, double p, double d0, double d1, double d2) {
    if (P) P[j] = p;
    if (gY) {
        const double gj = gY[j];
        g[0] += gj * d0, g[1] += gj * d1, g[2] += gj * d2;
    }
}

/* The polynomials P_j(u) of degrees <= lmax at u = (x, y, z) (not restricted to the sphere): into P, or (P NULL)
 * g = sum_j gY[j] dP_j/du. One definition serves the values and the reverse; inlined with one of them, the other's
 * arithmetic drops out (the GPU's edge tail then holds 3 sums, not the 48 values of dP). */
CGQ_INTERNAL void sh_poly(int lmax, double x, double y, double z, double *P, const double *gY, double g[3]) {
    sh_term(P, gY, g, 0, 1.0, 0.0, 0.0, 0.0);
    if (lmax >= 1) {
        const double s3 = sqrt(3.0);
        sh_term(P, gY, g, 1, s3 * x, s3, 0.0, 0.0);
        sh_term(P, gY, g, 2, s3 * y, 0.0, s3, 0.0);
        sh_term(P, gY, g, 3, s3 * z, 0.0, 0.0, s3);
    }
    if (lmax < 2) return;
    const double s15 = sqrt(15.0), s5 = sqrt(5.0);
    const double s0 = s15 * x * z, s4 = 0.5 * s15 * (z * z - x * x); /* P_4, P_8: the l = 3 terms reuse them */
    const double ds0[3] = {s15 * z, 0.0, s15 * x}, ds4[3] = {-s15 * x, 0.0, s15 * z};
    sh_term(P, gY, g, 4, s0, ds0[0], ds0[1], ds0[2]);
    sh_term(P, gY, g, 5, s15 * x * y, s15 * y, s15 * x, 0.0);
    sh_term(P, gY, g, 6, s5 * (y * y - 0.5 * (x * x + z * z)), -s5 * x, 2 * s5 * y, -s5 * z);
    sh_term(P, gY, g, 7, s15 * y * z, 0.0, s15 * z, s15 * y);
    sh_term(P, gY, g, 8, s4, ds4[0], ds4[1], ds4[2]);
    if (lmax < 3) return;
    const double c0 = sqrt(42.0) / 6.0, c1 = sqrt(7.0), c2 = sqrt(168.0) / 8.0, c3 = sqrt(7.0) / 2.0;
    const double q = x * x + z * z, w = 4 * y * y - q;
    sh_term(P, gY, g, 9, c0 * (s0 * z + s4 * x), c0 * (ds0[0] * z + ds4[0] * x) + c0 * s4, 0.0,
            c0 * (ds0[2] * z + ds4[2] * x) + c0 * s0);
    sh_term(P, gY, g, 10, c1 * s0 * y, c1 * ds0[0] * y, c1 * s0, c1 * ds0[2] * y);
    sh_term(P, gY, g, 11, c2 * w * x, c2 * (w - 2 * x * x), c2 * 8 * y * x, c2 * (-2 * z * x));
    sh_term(P, gY, g, 12, c3 * y * (2 * y * y - 3 * q), c3 * y * (-6 * x), c3 * (6 * y * y - 3 * q), c3 * y * (-6 * z));
    sh_term(P, gY, g, 13, c2 * z * w, c2 * z * (-2 * x), c2 * z * 8 * y, c2 * (w - 2 * z * z));
    sh_term(P, gY, g, 14, c1 * s4 * y, c1 * ds4[0] * y, c1 * s4, c1 * ds4[2] * y);
    sh_term(P, gY, g, 15, c0 * (s4 * z - s0 * x), c0 * (ds4[0] * z - ds0[0] * x) - c0 * s0, 0.0,
            c0 * (ds4[2] * z - ds0[2] * x) + c0 * s4);
}

/* |v| floored at torch.nn.functional.normalize's eps, and u = v / |v| */
CGQ_INTERNAL double sh_direction(const double v[3], double u[3]) {
    const double r = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]), rn = r > 1e-12 ? r : 1e-12;
    for (int k = 0; k < 3; k++) u[k] = v[k] / rn;
    return rn;
}

CGQ_FN void cgq_sh_eval(int lmax, const double v[3], double *Y) {
    double u[3];
    sh_direction(v, u);
    sh_poly(lmax, u[0], u[1], u[2], Y, NULL, NULL);
}

CGQ_FN void cgq_sh_vjp(int lmax, const double v[3], const double *gY, double gv[3]) {
    double u[3], g[3] = {0.0, 0.0, 0.0};
    const double rn = sh_direction(v, u);
    sh_poly(lmax, u[0], u[1], u[2], NULL, gY, g);
    const double gu = g[0] * u[0] + g[1] * u[1] + g[2] * u[2]; /* sum_j gY[j] (dP_j/du . u) */
    for (int k = 0; k < 3; k++) gv[k] = (g[k] - gu * u[k]) / rn;
}
