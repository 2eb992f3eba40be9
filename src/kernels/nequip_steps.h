/* nequip_steps.h: the NequIP forward and reverse pass as per-node and per-edge steps over one context (the
 * counterpart of mace_steps.h). The CPU backend runs each step in an OpenMP loop, the GPU backend as one kernel
 * thread per item: one definition of the math for both. Every reduction has one owner (receiver rows for
 * messages, sender rows for the transposed gradient). Math: shared/design/model-math.md C1. */
#ifndef CGQ_NEQUIP_STEPS_H
#define CGQ_NEQUIP_STEPS_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/fcnet.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/radial.h"
#include "kernels/cpu/sh.h"
#include "kernels/cpu/tensor_product.h"
#include "kernels/portable.h"
#include "model/nequip.h"

#define NQ_EDGE_CACHE_BUDGET_BYTES ((size_t)1 << 30)
#define NQ_PI 3.141592653589793238462643383279502884 /* the double torch.sinc uses */

CGQ_INTERNAL int nq_imax(int a, int b) { return a > b ? a : b; }

/* ---- nequip ScalarMLPFunction (weights pre-multiplied by alpha at load) --------------------------- */
CGQ_INTERNAL int nq_mlp_cache_size(const cgq_nq_mlp *f) {
    int n = 0;
    for (int k = 1; k < f->n_layers; k++) n += 2 * f->h[k];
    return n;
}

CGQ_INTERNAL int nq_mlp_max_width(const cgq_nq_mlp *f) {
    int w = 0;
    for (int k = 0; k <= f->n_layers; k++) w = nq_imax(w, f->h[k]);
    return w;
}

CGQ_INTERNAL void nq_matvec(const double *x, const double *W, int hin, int hout, double *y) {
    for (int j = 0; j < hout; j++) y[j] = 0.0;
    for (int i = 0; i < hin; i++) {
        const double xi = x[i];
        if (xi == 0.0) continue;
        const double *Wi = W + (size_t)i * hout;
        for (int j = 0; j < hout; j++) y[j] += xi * Wi[j];
    }
}

CGQ_INTERNAL void nq_mlp_forward(const cgq_nq_mlp *f, const double *x, double *out, double *cache) {
    const double *in = x;
    double *c = cache;
    for (int k = 0; k < f->n_layers; k++) {
        const int hin = f->h[k], hout = f->h[k + 1];
        if (k == f->n_layers - 1) {
            nq_matvec(in, f->W[k], hin, hout, out);
            break;
        }
        double *z = c, *a = c + hout;
        nq_matvec(in, f->W[k], hin, hout, z);
        for (int j = 0; j < hout; j++) a[j] = cgq_act_eval(f->act, f->act_cst, z[j], NULL);
        in = a;
        c += 2 * hout;
    }
}

/* gx[h0] = d<gout, mlp(x)>/dx (overwritten); scratch: 2*max width. */
CGQ_INTERNAL void nq_mlp_backward(const cgq_nq_mlp *f, const double *cache, const double *gout, double *gx, double *scratch) {
    const int maxw = nq_mlp_max_width(f);
    double *g = scratch, *gprev = scratch + maxw;
    memcpy(g, gout, sizeof(double) * (size_t)f->h[f->n_layers]);
    int off[CGQ_MAX_FC_LAYERS + 1], o = 0;
    for (int k = 1; k < f->n_layers; k++) {
        off[k] = o;
        o += 2 * f->h[k];
    }
    for (int k = f->n_layers - 1; k >= 0; k--) {
        const int hin = f->h[k], hout = f->h[k + 1];
        const double *W = f->W[k];
        double *dst = k == 0 ? gx : gprev;
        cgq_rows_dot(W, hin, hout, g, 1.0, dst);
        if (k == 0) break;
        const double *z = cache + off[k];
        for (int i = 0; i < hin; i++) {
            double d;
            cgq_act_eval(f->act, f->act_cst, z[i], &d);
            dst[i] *= d;
        }
        double *t = g;
        g = gprev;
        gprev = t;
    }
}

/* ---- gate ------------------------------------------------------------------------------------------- */
CGQ_INTERNAL void nq_gate_forward(const cgq_nq_gate *g, const double *x, double *out) {
    for (int k = 0; k < g->n_scalar; k++)
        out[k] = cgq_act_eval((cgq_act)g->scalar_act[k], g->scalar_cst[k], x[g->scalar_src[k]], NULL);
    for (int j = 0; j < g->n_gated; j++) {
        const double a = cgq_act_eval((cgq_act)g->gate_act[j], g->gate_cst[j], x[g->gated_gate[j]], NULL);
        out[g->n_scalar + j] = g->gated_factor[j] * x[g->gated_src[j]] * a;
    }
}

/* gx[dim_in] = d<gout, gate(x)>/dx (overwritten). */
CGQ_INTERNAL void nq_gate_backward(const cgq_nq_gate *g, const double *x, const double *gout, double *gx) {
    memset(gx, 0, sizeof(double) * (size_t)g->dim_in);
    for (int k = 0; k < g->n_scalar; k++) {
        double d;
        cgq_act_eval((cgq_act)g->scalar_act[k], g->scalar_cst[k], x[g->scalar_src[k]], &d);
        gx[g->scalar_src[k]] += gout[k] * d;
    }
    for (int j = 0; j < g->n_gated; j++) {
        double d;
        const double a = cgq_act_eval((cgq_act)g->gate_act[j], g->gate_cst[j], x[g->gated_gate[j]], &d);
        const double go = gout[g->n_scalar + j] * g->gated_factor[j];
        gx[g->gated_src[j]] += go * a;
        gx[g->gated_gate[j]] += go * x[g->gated_src[j]] * d;
    }
}

/* ---- radial ----------------------------------------------------------------------------------------- */
/* ef[n] = factor * (sinc(x w_n) w_n * cutoff(x)); with d: d ef / dx. */
CGQ_INTERNAL void nq_edge_embedding(const cgq_nequip *nq, double x, double *ef, double *def) {
    double dc;
    const double c = cgq_poly_cutoff(nq->cutoff_p, 1.0, x, def ? &dc : NULL);
    for (int n = 0; n < nq->n_bessel; n++) {
        const double w = nq->bessel_weights[n], t = x * w, pt = NQ_PI * t;
        const double s = sin(pt), sinc = t == 0.0 ? 1.0 : s / pt, b = sinc * w;
        ef[n] = nq->factor * (b * c);
        if (def) {
            /* b = sin(pi w x)/(pi x): db/dx = (pi w x cos(pi w x) - sin(pi w x)) / (pi x^2) */
            const double db = (pt * cos(pt) - s) / (NQ_PI * x * x);
            def[n] = nq->factor * (db * c + b * dc);
        }
    }
}

/* ZBL energy of one edge (nequip.nn.pair_potential.ZBL), its derivative in r. */
CGQ_INTERNAL double nq_zbl_edge(const cgq_nequip *nq, int tc, int tn, double r, double x, double k, double *de) {
    const double zi = nq->zbl_z[tc], zj = nq->zbl_z[tn];
    const double a = (pow(zi, nq->zbl_pzbl) + pow(zj, nq->zbl_pzbl)) / nq->zbl_a0;
    const double xz = a * r;
    double psi = 0.0, dpsi = 0.0;
    for (int q = 0; q < 4; q++) {
        const double t = nq->zbl_c[q] * exp(nq->zbl_d[q] * xz);
        psi += t;
        dpsi += t * nq->zbl_d[q] * a;
    }
    double dc;
    const double c = cgq_poly_cutoff(nq->zbl_p, 1.0, x, &dc);
    const double K = nq->zbl_qqr2 * (zi * zj);
    const double e = K / r * psi;
    if (de) *de = (K * (dpsi * r - psi) / (r * r)) * c + e * dc * k;
    return e * c;
}

/* ---- evaluation context ----------------------------------------------------------------------------- */
typedef struct nq_ctx {
    const cgq_model *m;
    const cgq_nequip *nq;
    int64_t N, NA, E;
    const int32_t *species, *sender;
    const int64_t *row_ptr;
    const double *vec;
    int nY, nb;
    double *u, *r, *xn, *Y, *ef; /* per edge: nequip vector (x_sender - x_receiver), |u|, r/r_max(type), SH, embedding */
    char *active;                 /* x < 1 for the edge's type pair */
    double *h[CGQ_MAX_LAYERS];    /* [NA][d_in]: norm * linear_1(x_in) (ghost rows by exchange) */
    double *M[CGQ_MAX_LAYERS];    /* [N][d_mid] */
    double *pre[CGQ_MAX_LAYERS];  /* [N][gate in] */
    double *xo[CGQ_MAX_LAYERS];   /* [N][gate out] */
    double *wc[CGQ_MAX_LAYERS];   /* [E][weight_numel] edge MLP outputs, or NULL (recompute) */
    double *node_out;
    double *gx, *gx_prev, *gM, *gh, *edge_grad;
    int64_t *srow;
    int32_t *sedge, *erecv;
    int zbl_rows; /* GPU: node_out[i] already holds receiver i's ZBL energy (k_nq_zbl_rows, one warp per row) */
    int maxdim;
    size_t esz, nsz;
} nq_ctx;

CGQ_INTERNAL int nq_layer_in_dim(const cgq_nequip *nq, int t) { return t ? nq->layers[t - 1].gate.dim_out : nq->emb_dim; }

CGQ_INTERNAL const double *nq_layer_in(const nq_ctx *c, int t, int64_t i) {
    if (t == 0) return c->nq->embed + (size_t)c->species[i] * c->nq->emb_dim;
    return c->xo[t - 1] + i * nq_layer_in_dim(c->nq, t);
}

typedef struct nq_plan {
    double *p;
    size_t total;
} nq_plan;

CGQ_INTERNAL double *nq_carve(nq_plan *pl, size_t n) {
    double *r = n ? pl->p : NULL;
    if (r) pl->p += n;
    pl->total += n;
    return r;
}

CGQ_INTERNAL size_t nq_layout(nq_ctx *c, double *base, int want_grad, int cache_edges) {
    const cgq_nequip *nq = c->nq;
    const int64_t N = c->N, NA = c->NA, E = c->E;
    nq_plan pl = {base, 0};
    int maxdim = nq->emb_dim, maxmid = 1;
    size_t esz = 0;
    for (int t = 0; t < nq->n_layers; t++) {
        const cgq_nq_layer *ly = &nq->layers[t];
        const int din = nq_layer_in_dim(nq, t);
        maxdim = nq_imax(maxdim, nq_imax(ly->gate.dim_in, ly->gate.dim_out));
        maxmid = nq_imax(maxmid, ly->tp.out.dim);
        c->h[t] = nq_carve(&pl, (size_t)NA * din);
        c->M[t] = nq_carve(&pl, (size_t)N * ly->tp.out.dim);
        c->pre[t] = nq_carve(&pl, (size_t)N * ly->gate.dim_in);
        c->xo[t] = nq_carve(&pl, (size_t)N * ly->gate.dim_out);
        c->wc[t] = cache_edges ? nq_carve(&pl, (size_t)E * ly->tp.weight_numel) : NULL;
        const size_t s = 2 * (size_t)ly->tp.weight_numel + (size_t)nq_mlp_cache_size(&ly->edge_mlp) +
                         2 * (size_t)nq_mlp_max_width(&ly->edge_mlp);
        esz = s > esz ? s : esz;
    }
    c->maxdim = maxdim;
    c->node_out = nq_carve(&pl, (size_t)N);
    c->u = nq_carve(&pl, 3 * (size_t)E);
    c->r = nq_carve(&pl, (size_t)E);
    c->xn = nq_carve(&pl, (size_t)E);
    c->Y = nq_carve(&pl, (size_t)E * c->nY);
    c->ef = nq_carve(&pl, (size_t)E * c->nb);
    const size_t g = want_grad ? 1 : 0;
    c->gx = nq_carve(&pl, g * N * maxdim);
    c->gx_prev = nq_carve(&pl, g * N * maxdim);
    c->gM = nq_carve(&pl, g * N * maxmid);
    c->gh = nq_carve(&pl, g * NA * maxdim);
    const size_t idx = ((size_t)(NA + 1) * sizeof(int64_t) + 2 * (size_t)E * sizeof(int32_t) + (size_t)E) /
                           sizeof(double) + 3;
    double *ip = nq_carve(&pl, idx);
    c->srow = (int64_t *)ip;
    c->sedge = ip ? (int32_t *)(c->srow + NA + 1) : NULL;
    c->erecv = ip ? c->sedge + E : NULL;
    c->active = ip ? (char *)(c->erecv + E) : NULL;
    const cgq_nq_mlp *ro = &nq->readout;
    c->esz = esz + 4 * (size_t)nq->n_bessel + 16 + 64;
    c->nsz = 6 * (size_t)maxdim + 2 * (size_t)maxmid + (size_t)nq_mlp_cache_size(ro) + 2 * (size_t)nq_mlp_max_width(ro) + 16;
    return pl.total;
}

/* ---- steps ------------------------------------------------------------------------------------------ */
/* lmax: the model's SH degree (a constant on the GPU, so that the SH arrays stay in registers) */
CGQ_INTERNAL void nq_step_edge_sh(const nq_ctx *c, int64_t e, int lmax) {
    const cgq_nequip *nq = c->nq;
    double *u = c->u + 3 * e;
    for (int k = 0; k < 3; k++) u[k] = -c->vec[3 * e + k]; /* NequIP: x_neighbour - x_center */
    const double r = sqrt(u[0] * u[0] + u[1] * u[1] + u[2] * u[2]);
    c->r[e] = r;
    const int tc = c->species[c->erecv[e]], tn = c->species[c->sender[e]];
    const double x = r * nq->rmax_recip[tc * nq->n_types + tn];
    c->xn[e] = x;
    c->active[e] = x < 1.0;
    cgq_sh_eval(lmax, u, c->Y + e * c->nY);
    nq_edge_embedding(nq, x, c->ef + e * c->nb, NULL);
}

CGQ_INTERNAL void nq_step_edge(const nq_ctx *c, int64_t e) {
    nq_step_edge_sh(c, e, c->m->lmax_sh);
}

CGQ_INTERNAL void nq_edge_weights(const nq_ctx *c, int t, int64_t e, double *w, double *cache, int fill, const double **out) {
    const cgq_nq_layer *ly = &c->nq->layers[t];
    if (c->wc[t] && !fill) {
        *out = c->wc[t] + e * ly->tp.weight_numel;
        return;
    }
    double *dst = c->wc[t] ? c->wc[t] + e * ly->tp.weight_numel : w;
    nq_mlp_forward(&ly->edge_mlp, c->ef + e * c->nb, dst, cache);
    *out = dst;
}

CGQ_INTERNAL void nq_step_up(const nq_ctx *c, int t, int64_t i) {
    const cgq_nq_layer *ly = &c->nq->layers[t];
    const int din = nq_layer_in_dim(c->nq, t);
    double *hi = c->h[t] + i * din;
    cgq_linear_forward(&ly->linear_1, nq_layer_in(c, t, i), hi);
    const double nc = ly->norm_const[c->species[i]];
    for (int k = 0; k < din; k++) hi[k] = nc * hi[k];
}

/* M[i] = sum over the active edges of receiver i of tp(h[sender], Y, w) */
CGQ_INTERNAL void nq_step_messages(const nq_ctx *c, int t, int64_t i, double *scratch) {
    const cgq_nq_layer *ly = &c->nq->layers[t];
    const int din = nq_layer_in_dim(c->nq, t), dM = ly->tp.out.dim;
    double *w = scratch, *cache = scratch + ly->tp.weight_numel;
    double *Mi = c->M[t] + i * dM;
    memset(Mi, 0, sizeof(double) * (size_t)dM);
    for (int64_t e = c->row_ptr[i]; e < c->row_ptr[i + 1]; e++) {
        if (!c->active[e]) continue;
        const double *we;
        nq_edge_weights(c, t, e, w, cache, 1, &we);
        cgq_tp_conv_forward(&ly->tp, c->h[t] + (int64_t)c->sender[e] * din, c->Y + e * c->nY, we, Mi);
    }
}

/* The node side of layer t from the messages M[i]: linear_2, self-connection, gate, resnet. tmp: gate.dim_in. */
CGQ_INTERNAL void nq_step_node(const nq_ctx *c, int t, int64_t i, double *tmp) {
    const cgq_nequip *nq = c->nq;
    const cgq_nq_layer *ly = &nq->layers[t];
    const int dM = ly->tp.out.dim, dG = ly->gate.dim_in, dO = ly->gate.dim_out;
    double *pre = c->pre[t] + i * dG;
    cgq_linear_forward(&ly->linear_2, c->M[t] + i * dM, pre);
    const double *xin = nq_layer_in(c, t, i);
    if (ly->use_sc) {
        cgq_tp_node_forward(&ly->sc, xin, nq->embed + (size_t)c->species[i] * nq->emb_dim, tmp);
        for (int k = 0; k < dG; k++) pre[k] = pre[k] + tmp[k];
    }
    double *xo = c->xo[t] + i * dO;
    nq_gate_forward(&ly->gate, pre, xo);
    if (ly->resnet)
        for (int k = 0; k < dO; k++) xo[k] = xin[k] + xo[k];
}

CGQ_INTERNAL void nq_step_conv(const nq_ctx *c, int t, int64_t i, double *scratch) {
    nq_step_messages(c, t, i, scratch);
    nq_step_node(c, t, i, scratch + c->esz);
}

/* ZBL energy of edge e (receiver i) and its derivative in r (de, may be NULL): 0 beyond the type pair's cutoff */
CGQ_INTERNAL double nq_zbl_one(const nq_ctx *c, int64_t i, int64_t e, double *de) {
    const cgq_nequip *nq = c->nq;
    if (de) *de = 0.0;
    if (!c->active[e]) return 0.0;
    const int tc = c->species[i], tn = c->species[c->sender[e]];
    return nq_zbl_edge(nq, tc, tn, c->r[e], c->xn[e], nq->rmax_recip[tc * nq->n_types + tn], de);
}

CGQ_INTERNAL void nq_step_energy(const nq_ctx *c, int64_t i, double *tmp) {
    const cgq_nequip *nq = c->nq;
    const int L = nq->n_layers, dO = nq->layers[L - 1].gate.dim_out, ts = c->species[i];
    double out;
    nq_mlp_forward(&nq->readout, c->xo[L - 1] + i * dO, &out, tmp);
    double e = nq->shifts[ts] + nq->scales[ts] * out;
    if (nq->zbl) {
        double z = 0.0;
        if (c->zbl_rows)
            z = c->node_out[i];
        else
            for (int64_t k = c->row_ptr[i]; k < c->row_ptr[i + 1]; k++) z += nq_zbl_one(c, i, k, NULL);
        e = z + e;
    }
    c->node_out[i] = e;
}

/* dE/dx_L of node i from the readout (into gx). */
CGQ_INTERNAL void nq_step_readout_backward(const nq_ctx *c, int64_t i, double *tmp) {
    const cgq_nequip *nq = c->nq;
    const int L = nq->n_layers, dO = nq->layers[L - 1].gate.dim_out;
    const cgq_nq_mlp *ro = &nq->readout;
    double *cache = tmp, *scr = tmp + nq_mlp_cache_size(ro), out;
    nq_mlp_forward(ro, c->xo[L - 1] + i * dO, &out, cache);
    double g = nq->scales[c->species[i]];
    nq_mlp_backward(ro, cache, &g, c->gx + i * c->maxdim, scr);
}

/* Node side of layer t in reverse: gate, linear_2, self-connection, resnet. gx rows hold dE/d(output). */
CGQ_INTERNAL void nq_step_node_backward(const nq_ctx *c, int t, int64_t i, double *tmp) {
    const cgq_nequip *nq = c->nq;
    const cgq_nq_layer *ly = &nq->layers[t];
    const int din = nq_layer_in_dim(nq, t), dM = ly->tp.out.dim, dG = ly->gate.dim_in;
    const double *go = c->gx + i * c->maxdim;
    double *gpre = tmp, *gp = c->gx_prev + i * c->maxdim;
    nq_gate_backward(&ly->gate, c->pre[t] + i * dG, go, gpre);
    if (ly->resnet) memcpy(gp, go, sizeof(double) * (size_t)din);
    else memset(gp, 0, sizeof(double) * (size_t)din);
    if (ly->use_sc) cgq_tp_node_backward_x1(&ly->sc, nq->embed + (size_t)c->species[i] * nq->emb_dim, gpre, gp);
    double *gM = c->gM + i * dM;
    memset(gM, 0, sizeof(double) * (size_t)dM);
    cgq_linear_backward(&ly->linear_2, gpre, gM);
}

/* Edge e (receiver i) from dE/d(edge embedding) gef (NULL: none) plus gx = dE/dx of x = r / r_max(pair) found
 * otherwise (the GPU's radial tables), and dE/dY gY: dE/dvec through the Bessel basis, the cutoff and the spherical
 * harmonics (degrees <= lmax, nY = (lmax + 1)^2: the model's, constants on the GPU), added to edge_grad. ef, def:
 * n_bessel each. */
CGQ_INTERNAL void nq_edge_tail_sh(const nq_ctx *c, int64_t i, int64_t e, const double *gef, double gx, const double *gY,
                                  double *ef, double *def, int lmax) {
    const cgq_nequip *nq = c->nq;
    const int tc = c->species[i], tn = c->species[c->sender[e]];
    const double k = nq->rmax_recip[tc * nq->n_types + tn];
    double gr = gx;
    if (gef) {
        nq_edge_embedding(nq, c->xn[e], ef, def);
        for (int n = 0; n < c->nb; n++) gr += gef[n] * def[n];
    }
    gr *= k;
    const double *u = c->u + 3 * e, r = c->r[e];
    double gu[3];
    cgq_sh_vjp(lmax, u, gY, gu);
    double *ge = c->edge_grad + 3 * e;
    for (int q = 0; q < 3; q++) ge[q] -= gr * u[q] / r + gu[q]; /* d/dvec = -d/du */
}

CGQ_INTERNAL void nq_edge_tail(const nq_ctx *c, int64_t i, int64_t e, const double *gef, double gx, const double *gY,
                               double *ef, double *def) {
    nq_edge_tail_sh(c, i, e, gef, gx, gY, ef, def, c->m->lmax_sh);
}

/* dE/dv for the edges of receiver i through Y, the edge MLP, the Bessel basis and cutoff (+=). */
CGQ_INTERNAL void nq_step_edge_backward(const nq_ctx *c, int t, int64_t i, double *scratch) {
    const cgq_nequip *nq = c->nq;
    const cgq_nq_layer *ly = &nq->layers[t];
    const int din = nq_layer_in_dim(nq, t), dM = ly->tp.out.dim, nb = c->nb, nY = c->nY;
    const int64_t wn = ly->tp.weight_numel;
    double *w = scratch, *gw = w + wn, *cache = gw + wn, *mscr = cache + nq_mlp_cache_size(&ly->edge_mlp);
    double *gef = mscr + 2 * nq_mlp_max_width(&ly->edge_mlp), *ef = gef + nb, *def = ef + nb, *gY = def + nb;
    for (int64_t e = c->row_ptr[i]; e < c->row_ptr[i + 1]; e++) {
        if (!c->active[e]) continue;
        nq_mlp_forward(&ly->edge_mlp, c->ef + e * nb, w, cache);
        memset(gw, 0, sizeof(double) * (size_t)wn);
        memset(gY, 0, sizeof(double) * (size_t)nY);
        cgq_tp_conv_backward(&ly->tp, c->h[t] + (int64_t)c->sender[e] * din, c->Y + e * nY, w, c->gM + i * dM, NULL, gY,
                             gw);
        nq_mlp_backward(&ly->edge_mlp, cache, gw, gef, mscr);
        nq_edge_tail(c, i, e, gef, 0.0, gY, ef, def);
    }
}

/* Sender row j: dE/dh[j] summed over its outgoing edges (sender-sorted order). */
CGQ_INTERNAL void nq_step_sender_backward(const nq_ctx *c, int t, int64_t j, double *scratch) {
    const cgq_nq_layer *ly = &c->nq->layers[t];
    const int din = nq_layer_in_dim(c->nq, t), dM = ly->tp.out.dim;
    double *w = scratch, *cache = scratch + ly->tp.weight_numel;
    double *gj = c->gh + j * din;
    memset(gj, 0, sizeof(double) * (size_t)din);
    for (int64_t q = c->srow[j]; q < c->srow[j + 1]; q++) {
        const int64_t e = c->sedge[q];
        if (!c->active[e]) continue;
        const double *we;
        nq_edge_weights(c, t, e, w, cache, 0, &we);
        cgq_tp_conv_backward(&ly->tp, c->h[t] + j * din, c->Y + e * c->nY, we, c->gM + (int64_t)c->erecv[e] * dM, gj,
                             NULL, NULL);
    }
}

/* gx_prev[j] += linear_1^T (norm * gh[j]) */
CGQ_INTERNAL void nq_step_up_backward(const nq_ctx *c, int t, int64_t j, double *tmp) {
    const cgq_nq_layer *ly = &c->nq->layers[t];
    const int din = nq_layer_in_dim(c->nq, t);
    const double nc = ly->norm_const[c->species[j]], *gj = c->gh + j * din;
    for (int k = 0; k < din; k++) tmp[k] = nc * gj[k];
    cgq_linear_backward(&ly->linear_1, tmp, c->gx_prev + j * c->maxdim);
}

/* dE/du of edge e (receiver i) from its ZBL energy, into edge_grad; edges are independent (one GPU thread each) */
CGQ_INTERNAL void nq_step_zbl_backward_edge(const nq_ctx *c, int64_t i, int64_t e) {
    if (!c->active[e]) return;
    double de;
    nq_zbl_one(c, i, e, &de);
    const double *u = c->u + 3 * e, r = c->r[e];
    for (int q = 0; q < 3; q++) c->edge_grad[3 * e + q] -= de * u[q] / r;
}

CGQ_INTERNAL void nq_step_zbl_backward(const nq_ctx *c, int64_t i) {
    for (int64_t e = c->row_ptr[i]; e < c->row_ptr[i + 1]; e++) nq_step_zbl_backward_edge(c, i, e);
}


#endif
