/* radial_spline.h: a radial MLP up to its last hidden layer, a(r), as a cubic Hermite table in r.
 * The MLP's input is a function of one distance variable alone (MACE: the Bessel basis of r, times the cutoff
 * envelope when the model applies it there; NequIP: the Bessel embedding of x = r / r_max(type pair), the same for
 * every pair), so a(r) is one smooth curve per hidden unit: the GPU's fp32 path interpolates it per edge instead of
 * running the hidden layers, and only the last layer, w = a W (/ sqrt(h)), stays a product (issue #5: "or from a
 * spline table"). The table is built in double at load and checked against the MLP itself between its knots.
 * Host code. */
#ifndef CGQ_CPU_RADIAL_SPLINE_H
#define CGQ_CPU_RADIAL_SPLINE_H

#include "cgequi.h"
#include "model/model.h"
#include "model/nequip.h"

#define CGQ_SPLINE_MAX_WIDTH 256
/* The accuracy the GPU asks of its tables: values within 1e-8 of max |a|, slopes within 1e-6 of max |da/dr|, with
 * at most 2^15 intervals */
#define CGQ_SPLINE_TOL_VALUE 1e-8
#define CGQ_SPLINE_TOL_SLOPE 1e-6
#define CGQ_SPLINE_MAX_INTERVALS (1 << 15)

/* A radial MLP as a function of its distance variable */
typedef struct cgq_radial_mlp {
    const cgq_fcnet *fc; /* host weights */
    int prescaled;       /* the weights carry 1/sqrt(fan-in) (nequip's), else the product applies it (e3nn's) */
    /* the MLP's input at r and its derivative in r; NULL: the input is not a function of r alone (no table) */
    void (*input)(const void *ctx, double r, double *x, double *dx);
    const void *ctx;
    double r_max; /* the table covers [0, r_max] */
} cgq_radial_mlp;

/* MACE layer's radial_mlp (no input function with the Agnesi transform: its input depends on the species pair) */
cgq_radial_mlp cgq_radial_mlp_mace(const cgq_model *m, const cgq_fcnet *fc);
/* NequIP layer's edge MLP, given as an fcnet view fc of its host weights (cgq_nq_mlp_view); the variable is
 * x = r / r_max(pair) */
cgq_radial_mlp cgq_radial_mlp_nequip(const cgq_nequip *nq, const cgq_fcnet *fc);
/* f's shape, activation and (already scaled) weights as an fcnet, which the table builder reads */
cgq_fcnet cgq_nq_mlp_view(const cgq_nq_mlp *f);

/* Every layer's radial MLP of a model (MACE: radial_mlp; NequIP: the edge MLP, through its fcnet view in views), with
 * the last layer's scale alpha: w = alpha a W_last (e3nn's 1/sqrt(h) for MACE; 1 for NequIP, whose weights carry it).
 * rm points into views: use the struct where it was filled. */
typedef struct cgq_radial_mlps {
    int n_layers;
    cgq_fcnet views[CGQ_MAX_LAYERS];
    cgq_radial_mlp rm[CGQ_MAX_LAYERS];
    double alpha[CGQ_MAX_LAYERS];
} cgq_radial_mlps;
void cgq_radial_mlps_of(const cgq_model *m, cgq_radial_mlps *out);

typedef struct cgq_radial_spline {
    int n_int; /* intervals of width step over [0, r_max]; 0: no table (the MLP runs per edge) */
    int width; /* the last hidden layer's width (a's length) */
    double step, r_max;
    double *knots;               /* [n_int + 1][2][width]: a(r_k), then step * da/dr(r_k) */
    double err_value, err_slope; /* largest error found between the knots, relative to max |a| and max |da/dr| */
} cgq_radial_spline;

/* Exact a(r) and da/dr (width h[n_layers - 1] each), in double. */
void cgq_radial_hidden(const cgq_radial_mlp *rm, double r, double *a, double *da);

/* Build the table with the fewest intervals (a power of two, at most max_int) whose interpolation error, measured
 * at three points inside every interval, is at most tol_value of max |a| and tol_slope of max |da/dr|. An MLP the
 * table does not describe (no input function; a single layer; wider than CGQ_SPLINE_MAX_WIDTH) or a tolerance not
 * met gives n_int = 0 and CGQ_STATUS_OK. */
cgq_status cgq_radial_spline_build(const cgq_radial_mlp *rm, double tol_value, double tol_slope, int max_int,
                                   cgq_radial_spline *s);

/* The table's interpolant at r (clamped to [0, r_max]; da = 0 beyond r_max), as the GPU evaluates it. */
void cgq_radial_spline_eval(const cgq_radial_spline *s, double r, double *a, double *da);

void cgq_radial_spline_free(cgq_radial_spline *s);

#endif
