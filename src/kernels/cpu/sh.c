/* sh.c: explicit e3nn spherical-harmonic polynomials of u = v/|v| (component i of l=1 is u_i), and
 * their gradient dY/dv = dP/du (I - u u^T) / |v|. Formulas: docs/model-math (A2). */
#include "kernels/cpu/sh.h"

#include <math.h>

CGQ_FN void cgq_sh_eval(int lmax, const double v[3], double *Y, double *dY) {
    double r = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    double rn = r > 1e-12 ? r : 1e-12; /* torch.nn.functional.normalize's eps */
    double x = v[0] / rn, y = v[1] / rn, z = v[2] / rn;
    /* P[j] and dP[j][k] = dP_j/du_k of the polynomials (not restricted to the sphere) */
    double P[16], dP[16][3] = {{0}};
    P[0] = 1.0;
    if (lmax >= 1) {
        const double s3 = sqrt(3.0);
        P[1] = s3 * x, P[2] = s3 * y, P[3] = s3 * z;
        dP[1][0] = dP[2][1] = dP[3][2] = s3;
    }
    if (lmax >= 2) {
        const double s15 = sqrt(15.0), s5 = sqrt(5.0);
        P[4] = s15 * x * z;
        dP[4][0] = s15 * z, dP[4][2] = s15 * x;
        P[5] = s15 * x * y;
        dP[5][0] = s15 * y, dP[5][1] = s15 * x;
        P[6] = s5 * (y * y - 0.5 * (x * x + z * z));
        dP[6][0] = -s5 * x, dP[6][1] = 2 * s5 * y, dP[6][2] = -s5 * z;
        P[7] = s15 * y * z;
        dP[7][1] = s15 * z, dP[7][2] = s15 * y;
        P[8] = 0.5 * s15 * (z * z - x * x);
        dP[8][0] = -s15 * x, dP[8][2] = s15 * z;
    }
    if (lmax >= 3) {
        const double c0 = sqrt(42.0) / 6.0, c1 = sqrt(7.0), c2 = sqrt(168.0) / 8.0, c3 = sqrt(7.0) / 2.0;
        const double s0 = P[4], s4 = P[8];
        const double *ds0 = dP[4], *ds4 = dP[8];
        double q = x * x + z * z, w = 4 * y * y - q;
        P[9] = c0 * (s0 * z + s4 * x);
        for (int k = 0; k < 3; k++) dP[9][k] = c0 * (ds0[k] * z + ds4[k] * x);
        dP[9][2] += c0 * s0, dP[9][0] += c0 * s4;
        P[10] = c1 * s0 * y;
        for (int k = 0; k < 3; k++) dP[10][k] = c1 * ds0[k] * y;
        dP[10][1] += c1 * s0;
        P[11] = c2 * w * x;
        dP[11][0] = c2 * (w - 2 * x * x), dP[11][1] = c2 * 8 * y * x, dP[11][2] = c2 * (-2 * z * x);
        P[12] = c3 * y * (2 * y * y - 3 * q);
        dP[12][0] = c3 * y * (-6 * x), dP[12][1] = c3 * (6 * y * y - 3 * q), dP[12][2] = c3 * y * (-6 * z);
        P[13] = c2 * z * w;
        dP[13][0] = c2 * z * (-2 * x), dP[13][1] = c2 * z * 8 * y, dP[13][2] = c2 * (w - 2 * z * z);
        P[14] = c1 * s4 * y;
        for (int k = 0; k < 3; k++) dP[14][k] = c1 * ds4[k] * y;
        dP[14][1] += c1 * s4;
        P[15] = c0 * (s4 * z - s0 * x);
        for (int k = 0; k < 3; k++) dP[15][k] = c0 * (ds4[k] * z - ds0[k] * x);
        dP[15][2] += c0 * s4, dP[15][0] -= c0 * s0;
    }
    int n = (lmax + 1) * (lmax + 1);
    for (int j = 0; j < n; j++) Y[j] = P[j];
    if (!dY) return;
    double u[3] = {x, y, z};
    for (int j = 0; j < n; j++) {
        double du = dP[j][0] * u[0] + dP[j][1] * u[1] + dP[j][2] * u[2];
        for (int k = 0; k < 3; k++) dY[3 * j + k] = (dP[j][k] - du * u[k]) / rn;
    }
}
