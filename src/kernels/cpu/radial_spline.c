/* radial_spline.c: the radial MLP's hidden output a(r) as a cubic Hermite table (see radial_spline.h). */
#include "kernels/cpu/radial_spline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/radial.h"

/* The MLP's input x(r) and dx/dr. Near r = 0 the Bessel functions come from their series: sin(wr)/r is smooth
 * there, but its derivative's closed form loses every digit to cancellation. */
static void radial_input(const cgq_model *m, double r, double *x, double *dx) {
    if (r < 1e-3) {
        for (int n = 0; n < m->n_bessel; n++) {
            const double w = m->bessel_weights[n], p = m->bessel_prefactor * w, u = w * r, u2 = u * u;
            x[n] = p * (1.0 - u2 / 6.0 + u2 * u2 / 120.0 - u2 * u2 * u2 / 5040.0);
            dx[n] = p * w * (-u / 3.0 + u2 * u / 30.0 - u2 * u2 * u / 840.0);
        }
    } else {
        cgq_bessel(m, r, x, dx);
    }
    if (!m->apply_cutoff) return;
    double dc;
    const double c = cgq_poly_cutoff(m->cutoff_p, m->cutoff_r_max, r, &dc);
    for (int n = 0; n < m->n_bessel; n++) {
        dx[n] = dx[n] * c + x[n] * dc;
        x[n] *= c;
    }
}

void cgq_radial_hidden(const cgq_model *m, const cgq_fcnet *fc, double r, double *a, double *da) {
    double x[CGQ_SPLINE_MAX_WIDTH], dx[CGQ_SPLINE_MAX_WIDTH], z[CGQ_SPLINE_MAX_WIDTH], dz[CGQ_SPLINE_MAX_WIDTH];
    radial_input(m, r, x, dx);
    for (int k = 0; k + 1 < fc->n_layers; k++) { /* forward mode: the tangent dx/dr rides along */
        const int hin = fc->h[k], hout = fc->h[k + 1];
        const double s = 1.0 / sqrt((double)hin);
        for (int j = 0; j < hout; j++) z[j] = dz[j] = 0.0;
        for (int i = 0; i < hin; i++) {
            const double *Wi = fc->W[k] + (size_t)i * hout;
            for (int j = 0; j < hout; j++) z[j] += x[i] * Wi[j], dz[j] += dx[i] * Wi[j];
        }
        for (int j = 0; j < hout; j++) {
            double d;
            x[j] = cgq_act_eval(fc->act, fc->act_cst, z[j] * s, &d);
            dx[j] = d * dz[j] * s;
        }
    }
    const int w = fc->h[fc->n_layers - 1];
    memcpy(a, x, sizeof(double) * (size_t)w);
    memcpy(da, dx, sizeof(double) * (size_t)w);
}

void cgq_radial_spline_eval(const cgq_radial_spline *s, double r, double *a, double *da) {
    const int W = s->width;
    double x = r / s->step;
    if (!(x > 0.0)) x = 0.0;
    int k = (int)x;
    if (k >= s->n_int) k = s->n_int - 1;
    double t = x - k;
    const int beyond = t > 1.0;
    if (beyond) t = 1.0;
    const double u = 1.0 - t;
    const double h00 = (1.0 + 2.0 * t) * u * u, h10 = t * u * u, h01 = t * t * (3.0 - 2.0 * t), h11 = -t * t * u;
    const double d00 = -6.0 * t * u, d10 = u * (1.0 - 3.0 * t), d01 = 6.0 * t * u, d11 = t * (3.0 * t - 2.0);
    const double *p0 = s->knots + (size_t)k * 2 * W, *m0 = p0 + W, *p1 = m0 + W, *m1 = p1 + W;
    for (int j = 0; j < W; j++) {
        a[j] = h00 * p0[j] + h10 * m0[j] + h01 * p1[j] + h11 * m1[j];
        da[j] = beyond ? 0.0 : (d00 * p0[j] + d10 * m0[j] + d01 * p1[j] + d11 * m1[j]) / s->step;
    }
}

/* Fill the knots of n intervals and measure the interpolation error inside each (relative, into s->err_*). */
static void fill_and_measure(const cgq_model *m, const cgq_fcnet *fc, cgq_radial_spline *s) {
    const int W = s->width;
    double a[CGQ_SPLINE_MAX_WIDTH], da[CGQ_SPLINE_MAX_WIDTH], ai[CGQ_SPLINE_MAX_WIDTH], dai[CGQ_SPLINE_MAX_WIDTH];
    double amax = 0.0, dmax = 0.0, ev = 0.0, ed = 0.0;
    for (int k = 0; k <= s->n_int; k++) {
        double *p = s->knots + (size_t)k * 2 * W;
        cgq_radial_hidden(m, fc, k * s->step, p, p + W);
        for (int j = 0; j < W; j++) {
            amax = fmax(amax, fabs(p[j])), dmax = fmax(dmax, fabs(p[W + j]));
            p[W + j] *= s->step;
        }
    }
    static const double inside[3] = {0.25, 0.5, 0.75};
    for (int k = 0; k < s->n_int; k++)
        for (int q = 0; q < 3; q++) {
            const double r = (k + inside[q]) * s->step;
            cgq_radial_hidden(m, fc, r, a, da);
            cgq_radial_spline_eval(s, r, ai, dai);
            for (int j = 0; j < W; j++) {
                amax = fmax(amax, fabs(a[j])), dmax = fmax(dmax, fabs(da[j]));
                ev = fmax(ev, fabs(ai[j] - a[j])), ed = fmax(ed, fabs(dai[j] - da[j]));
            }
        }
    s->err_value = amax > 0.0 ? ev / amax : ev;
    s->err_slope = dmax > 0.0 ? ed / dmax : ed;
}

cgq_status cgq_radial_spline_build(const cgq_model *m, const cgq_fcnet *fc, double tol_value, double tol_slope,
                                   int max_int, cgq_radial_spline *s) {
    memset(s, 0, sizeof *s);
    if (m->agnesi || fc->n_layers < 2 || fc->h[0] != m->n_bessel || !(m->cutoff_r_max > 0.0)) return CGQ_STATUS_OK;
    for (int k = 0; k < fc->n_layers; k++)
        if (fc->h[k] > CGQ_SPLINE_MAX_WIDTH) return CGQ_STATUS_OK;
    s->width = fc->h[fc->n_layers - 1];
    s->r_max = m->cutoff_r_max;
    for (int n = 256; n <= max_int; n *= 2) {
        free(s->knots);
        s->n_int = n;
        s->step = s->r_max / n;
        s->knots = (double *)malloc(sizeof(double) * (size_t)(n + 1) * 2 * (size_t)s->width);
        if (!s->knots) {
            s->n_int = 0;
            return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of host memory for the radial MLP's table (%d knots)", n + 1);
        }
        fill_and_measure(m, fc, s);
        if (s->err_value <= tol_value && s->err_slope <= tol_slope) return CGQ_STATUS_OK;
    }
    free(s->knots);
    s->knots = NULL;
    s->n_int = 0;
    return CGQ_STATUS_OK;
}

void cgq_radial_spline_free(cgq_radial_spline *s) {
    free(s->knots);
    memset(s, 0, sizeof *s);
}
