/* radial_spline.c: the radial MLP's hidden output a(r) as a cubic Hermite table (see radial_spline.h). */
#include "kernels/cpu/radial_spline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/radial.h"
#include "kernels/nequip_steps.h"

/* sin(u) / u and d/du of it: near 0 from the series (the closed form of the derivative loses every digit there) */
static double sinc_d(double u, double *d) {
    if (fabs(u) < 1e-2) {
        const double u2 = u * u;
        *d = u * (-1.0 / 3.0 + u2 * (1.0 / 30.0 - u2 / 840.0));
        return 1.0 - u2 / 6.0 + u2 * u2 / 120.0 - u2 * u2 * u2 / 5040.0;
    }
    const double s = sin(u);
    *d = (u * cos(u) - s) / (u * u);
    return s / u;
}

/* MACE: x(r) = B(r) [* f_cut(r)] and dx/dr; B_n(r) = p sin(w_n r) / r = p w_n sinc(w_n r) (cgq_bessel). */
static void mace_input(const void *ctx, double r, double *x, double *dx) {
    const cgq_model *m = (const cgq_model *)ctx;
    if (r < 1e-3) { /* the series; elsewhere the CPU's own function */
        for (int n = 0; n < m->n_bessel; n++) {
            const double w = m->bessel_weights[n], p = m->bessel_prefactor * w;
            double d;
            x[n] = p * sinc_d(w * r, &d);
            dx[n] = p * w * d;
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

/* NequIP: x(u) = factor w_n sinc(pi w_n u) f_cut(u) and dx/du, u = r / r_max(pair): the CPU's own nq_edge_embedding,
 * and near u = 0 the series, as for MACE */
static void nequip_input(const void *ctx, double u, double *x, double *dx) {
    const cgq_nequip *nq = (const cgq_nequip *)ctx;
    if (u >= 1e-3) {
        nq_edge_embedding(nq, u, x, dx);
        return;
    }
    double dc;
    const double c = cgq_poly_cutoff(nq->cutoff_p, 1.0, u, &dc);
    for (int n = 0; n < nq->n_bessel; n++) {
        const double w = nq->bessel_weights[n];
        double ds;
        const double b = sinc_d(NQ_PI * w * u, &ds) * w;
        x[n] = nq->factor * (b * c);
        dx[n] = nq->factor * (ds * NQ_PI * w * w * c + b * dc);
    }
}

cgq_radial_mlp cgq_radial_mlp_mace(const cgq_model *m, const cgq_fcnet *fc) {
    cgq_radial_mlp rm = {fc, 0, m->agnesi ? NULL : mace_input, m, m->cutoff_r_max};
    if (fc->h[0] != m->n_bessel) rm.input = NULL;
    return rm;
}

cgq_fcnet cgq_nq_mlp_view(const cgq_nq_mlp *f) {
    cgq_fcnet v;
    memset(&v, 0, sizeof v);
    v.n_layers = f->n_layers, v.act = f->act, v.act_cst = f->act_cst;
    memcpy(v.h, f->h, sizeof v.h);
    for (int k = 0; k < f->n_layers; k++) v.W[k] = f->W[k];
    return v;
}

cgq_radial_mlp cgq_radial_mlp_nequip(const cgq_nequip *nq, const cgq_fcnet *fc) {
    cgq_radial_mlp rm = {fc, 1, nq->n_bessel == fc->h[0] ? nequip_input : NULL, nq, 1.0};
    return rm;
}

void cgq_radial_mlps_of(const cgq_model *m, cgq_radial_mlps *out) {
    memset(out, 0, sizeof *out);
    const cgq_nequip *nq = m->nequip;
    out->n_layers = nq ? nq->n_layers : m->n_layers;
    for (int t = 0; t < out->n_layers; t++) {
        if (nq) {
            out->views[t] = cgq_nq_mlp_view(&nq->layers[t].edge_mlp);
            out->rm[t] = cgq_radial_mlp_nequip(nq, &out->views[t]), out->alpha[t] = 1.0;
        } else {
            const cgq_fcnet *fc = &m->layers[t].radial_mlp;
            out->rm[t] = cgq_radial_mlp_mace(m, fc), out->alpha[t] = 1.0 / sqrt((double)fc->h[fc->n_layers - 1]);
        }
    }
}

void cgq_radial_hidden(const cgq_radial_mlp *rm, double r, double *a, double *da) {
    const cgq_fcnet *fc = rm->fc;
    double x[CGQ_SPLINE_MAX_WIDTH], dx[CGQ_SPLINE_MAX_WIDTH], z[CGQ_SPLINE_MAX_WIDTH], dz[CGQ_SPLINE_MAX_WIDTH];
    rm->input(rm->ctx, r, x, dx);
    for (int k = 0; k + 1 < fc->n_layers; k++) { /* forward mode: the tangent dx/dr rides along */
        const int hin = fc->h[k], hout = fc->h[k + 1];
        const double s = rm->prescaled ? 1.0 : 1.0 / sqrt((double)hin);
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
static void fill_and_measure(const cgq_radial_mlp *rm, cgq_radial_spline *s) {
    const int W = s->width;
    double a[CGQ_SPLINE_MAX_WIDTH], da[CGQ_SPLINE_MAX_WIDTH], ai[CGQ_SPLINE_MAX_WIDTH], dai[CGQ_SPLINE_MAX_WIDTH];
    double amax = 0.0, dmax = 0.0, ev = 0.0, ed = 0.0;
    for (int k = 0; k <= s->n_int; k++) {
        double *p = s->knots + (size_t)k * 2 * W;
        cgq_radial_hidden(rm, k * s->step, p, p + W);
        for (int j = 0; j < W; j++) {
            amax = fmax(amax, fabs(p[j])), dmax = fmax(dmax, fabs(p[W + j]));
            p[W + j] *= s->step;
        }
    }
    static const double inside[3] = {0.25, 0.5, 0.75};
    for (int k = 0; k < s->n_int; k++)
        for (int q = 0; q < 3; q++) {
            const double r = (k + inside[q]) * s->step;
            cgq_radial_hidden(rm, r, a, da);
            cgq_radial_spline_eval(s, r, ai, dai);
            for (int j = 0; j < W; j++) {
                amax = fmax(amax, fabs(a[j])), dmax = fmax(dmax, fabs(da[j]));
                ev = fmax(ev, fabs(ai[j] - a[j])), ed = fmax(ed, fabs(dai[j] - da[j]));
            }
        }
    s->err_value = amax > 0.0 ? ev / amax : ev;
    s->err_slope = dmax > 0.0 ? ed / dmax : ed;
}

cgq_status cgq_radial_spline_build(const cgq_radial_mlp *rm, double tol_value, double tol_slope, int max_int,
                                   cgq_radial_spline *s) {
    const cgq_fcnet *fc = rm->fc;
    memset(s, 0, sizeof *s);
    if (!rm->input || fc->n_layers < 2 || !(rm->r_max > 0.0)) return CGQ_STATUS_OK;
    for (int k = 0; k < fc->n_layers; k++)
        if (fc->h[k] > CGQ_SPLINE_MAX_WIDTH) return CGQ_STATUS_OK;
    s->width = fc->h[fc->n_layers - 1];
    s->r_max = rm->r_max;
    for (int n = 256; n <= max_int; n *= 2) {
        free(s->knots);
        s->n_int = n;
        s->step = s->r_max / n;
        s->knots = (double *)malloc(sizeof(double) * (size_t)(n + 1) * 2 * (size_t)s->width);
        if (!s->knots) {
            s->n_int = 0;
            return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of host memory for the radial MLP's table (%d knots)",
                            n + 1);
        }
        fill_and_measure(rm, s);
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
