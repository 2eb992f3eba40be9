/* nequip_cpu.c: the NequIP forward and reverse pass on the CPU (float64, OpenMP over atoms). Every
 * reduction has one owner (receiver rows for messages, sender rows for the transposed gradient), so the
 * result does not depend on the number of threads. Math: shared/design/model-math.md C1. */
#include "kernels/cpu/nequip_cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "graph/sender_index.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/fcnet.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/radial.h"
#include "kernels/cpu/sh.h"
#include "kernels/cpu/tensor_product.h"
#include "model/nequip.h"

#define NQ_EDGE_CACHE_BUDGET_BYTES ((size_t)1 << 30)
#define NQ_PI 3.141592653589793238462643383279502884 /* the double torch.sinc uses */

static int imax(int a, int b) { return a > b ? a : b; }

/* ---- nequip ScalarMLPFunction (weights pre-multiplied by alpha at load) --------------------------- */
static int mlp_cache_size(const cgq_nq_mlp *f) {
    int n = 0;
    for (int k = 1; k < f->n_layers; k++) n += 2 * f->h[k];
    return n;
}

static int mlp_max_width(const cgq_nq_mlp *f) {
    int w = 0;
    for (int k = 0; k <= f->n_layers; k++) w = imax(w, f->h[k]);
    return w;
}

static void matvec(const double *x, const double *W, int hin, int hout, double *y) {
    for (int j = 0; j < hout; j++) y[j] = 0.0;
    for (int i = 0; i < hin; i++) {
        const double xi = x[i];
        if (xi == 0.0) continue;
        const double *Wi = W + (size_t)i * hout;
        for (int j = 0; j < hout; j++) y[j] += xi * Wi[j];
    }
}

static void mlp_forward(const cgq_nq_mlp *f, const double *x, double *out, double *cache) {
    const double *in = x;
    double *c = cache;
    for (int k = 0; k < f->n_layers; k++) {
        const int hin = f->h[k], hout = f->h[k + 1];
        if (k == f->n_layers - 1) {
            matvec(in, f->W[k], hin, hout, out);
            break;
        }
        double *z = c, *a = c + hout;
        matvec(in, f->W[k], hin, hout, z);
        for (int j = 0; j < hout; j++) a[j] = cgq_act_eval(f->act, f->act_cst, z[j], NULL);
        in = a;
        c += 2 * hout;
    }
}

/* gx[h0] = d<gout, mlp(x)>/dx (overwritten); scratch: 2*max width. */
static void mlp_backward(const cgq_nq_mlp *f, const double *cache, const double *gout, double *gx, double *scratch) {
    const int maxw = mlp_max_width(f);
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
static void gate_forward(const cgq_nq_gate *g, const double *x, double *out) {
    for (int k = 0; k < g->n_scalar; k++)
        out[k] = cgq_act_eval((cgq_act)g->scalar_act[k], g->scalar_cst[k], x[g->scalar_src[k]], NULL);
    for (int j = 0; j < g->n_gated; j++) {
        const double a = cgq_act_eval((cgq_act)g->gate_act[j], g->gate_cst[j], x[g->gated_gate[j]], NULL);
        out[g->n_scalar + j] = g->gated_factor[j] * x[g->gated_src[j]] * a;
    }
}

/* gx[dim_in] = d<gout, gate(x)>/dx (overwritten). */
static void gate_backward(const cgq_nq_gate *g, const double *x, const double *gout, double *gx) {
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
static void edge_embedding(const cgq_nequip *nq, double x, double *ef, double *def) {
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
static double zbl_edge(const cgq_nequip *nq, int tc, int tn, double r, double x, double k, double *de) {
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
    int maxdim;
    size_t esz, nsz;
} nq_ctx;

static int layer_in_dim(const cgq_nequip *nq, int t) { return t ? nq->layers[t - 1].gate.dim_out : nq->emb_dim; }

static const double *layer_in(const nq_ctx *c, int t, int64_t i) {
    if (t == 0) return c->nq->embed + (size_t)c->species[i] * c->nq->emb_dim;
    return c->xo[t - 1] + i * layer_in_dim(c->nq, t);
}

typedef struct nq_plan {
    double *p;
    size_t total;
} nq_plan;

static double *carve(nq_plan *pl, size_t n) {
    double *r = n ? pl->p : NULL;
    if (r) pl->p += n;
    pl->total += n;
    return r;
}

static size_t layout(nq_ctx *c, double *base, int want_grad, int cache_edges) {
    const cgq_nequip *nq = c->nq;
    const int64_t N = c->N, NA = c->NA, E = c->E;
    nq_plan pl = {base, 0};
    int maxdim = nq->emb_dim, maxmid = 1;
    size_t esz = 0;
    for (int t = 0; t < nq->n_layers; t++) {
        const cgq_nq_layer *ly = &nq->layers[t];
        const int din = layer_in_dim(nq, t);
        maxdim = imax(maxdim, imax(ly->gate.dim_in, ly->gate.dim_out));
        maxmid = imax(maxmid, ly->tp.out.dim);
        c->h[t] = carve(&pl, (size_t)NA * din);
        c->M[t] = carve(&pl, (size_t)N * ly->tp.out.dim);
        c->pre[t] = carve(&pl, (size_t)N * ly->gate.dim_in);
        c->xo[t] = carve(&pl, (size_t)N * ly->gate.dim_out);
        c->wc[t] = cache_edges ? carve(&pl, (size_t)E * ly->tp.weight_numel) : NULL;
        const size_t s = 2 * (size_t)ly->tp.weight_numel + (size_t)mlp_cache_size(&ly->edge_mlp) +
                         2 * (size_t)mlp_max_width(&ly->edge_mlp);
        esz = s > esz ? s : esz;
    }
    c->maxdim = maxdim;
    c->node_out = carve(&pl, (size_t)N);
    c->u = carve(&pl, 3 * (size_t)E);
    c->r = carve(&pl, (size_t)E);
    c->xn = carve(&pl, (size_t)E);
    c->Y = carve(&pl, (size_t)E * c->nY);
    c->ef = carve(&pl, (size_t)E * c->nb);
    const size_t g = want_grad ? 1 : 0;
    c->gx = carve(&pl, g * N * maxdim);
    c->gx_prev = carve(&pl, g * N * maxdim);
    c->gM = carve(&pl, g * N * maxmid);
    c->gh = carve(&pl, g * NA * maxdim);
    const size_t idx = ((size_t)(NA + 1) * sizeof(int64_t) + 2 * (size_t)E * sizeof(int32_t) + (size_t)E) /
                           sizeof(double) + 3;
    double *ip = carve(&pl, idx);
    c->srow = (int64_t *)ip;
    c->sedge = ip ? (int32_t *)(c->srow + NA + 1) : NULL;
    c->erecv = ip ? c->sedge + E : NULL;
    c->active = ip ? (char *)(c->erecv + E) : NULL;
    const cgq_nq_mlp *ro = &nq->readout;
    c->esz = esz + 4 * (size_t)nq->n_bessel + 16 * 4 + 64;
    c->nsz = 6 * (size_t)maxdim + 2 * (size_t)maxmid + (size_t)mlp_cache_size(ro) + 2 * (size_t)mlp_max_width(ro) + 16;
    return pl.total;
}

/* ---- steps ------------------------------------------------------------------------------------------ */
static void step_edge(const nq_ctx *c, int64_t e) {
    const cgq_nequip *nq = c->nq;
    double *u = c->u + 3 * e;
    for (int k = 0; k < 3; k++) u[k] = -c->vec[3 * e + k]; /* NequIP: x_neighbour - x_center */
    const double r = sqrt(u[0] * u[0] + u[1] * u[1] + u[2] * u[2]);
    c->r[e] = r;
    const int tc = c->species[c->erecv[e]], tn = c->species[c->sender[e]];
    const double x = r * nq->rmax_recip[tc * nq->n_types + tn];
    c->xn[e] = x;
    c->active[e] = x < 1.0;
    cgq_sh_eval(c->m->lmax_sh, u, c->Y + e * c->nY, NULL);
    edge_embedding(nq, x, c->ef + e * c->nb, NULL);
}

static void edge_weights(const nq_ctx *c, int t, int64_t e, double *w, double *cache, int fill, const double **out) {
    const cgq_nq_layer *ly = &c->nq->layers[t];
    if (c->wc[t] && !fill) {
        *out = c->wc[t] + e * ly->tp.weight_numel;
        return;
    }
    double *dst = c->wc[t] ? c->wc[t] + e * ly->tp.weight_numel : w;
    mlp_forward(&ly->edge_mlp, c->ef + e * c->nb, dst, cache);
    *out = dst;
}

static void step_up(const nq_ctx *c, int t, int64_t i) {
    const cgq_nq_layer *ly = &c->nq->layers[t];
    const int din = layer_in_dim(c->nq, t);
    double *hi = c->h[t] + i * din;
    cgq_linear_forward(&ly->linear_1, layer_in(c, t, i), hi);
    const double nc = ly->norm_const[c->species[i]];
    for (int k = 0; k < din; k++) hi[k] = nc * hi[k];
}

static void step_conv(const nq_ctx *c, int t, int64_t i, double *scratch) {
    const cgq_nequip *nq = c->nq;
    const cgq_nq_layer *ly = &nq->layers[t];
    const int din = layer_in_dim(nq, t), dM = ly->tp.out.dim, dG = ly->gate.dim_in, dO = ly->gate.dim_out;
    double *w = scratch, *cache = scratch + ly->tp.weight_numel, *tmp = scratch + c->esz;
    double *Mi = c->M[t] + i * dM;
    memset(Mi, 0, sizeof(double) * (size_t)dM);
    for (int64_t e = c->row_ptr[i]; e < c->row_ptr[i + 1]; e++) {
        if (!c->active[e]) continue;
        const double *we;
        edge_weights(c, t, e, w, cache, 1, &we);
        cgq_tp_conv_forward(&ly->tp, c->h[t] + (int64_t)c->sender[e] * din, c->Y + e * c->nY, we, Mi);
    }
    double *pre = c->pre[t] + i * dG;
    cgq_linear_forward(&ly->linear_2, Mi, pre);
    const double *xin = layer_in(c, t, i);
    if (ly->use_sc) {
        cgq_tp_node_forward(&ly->sc, xin, nq->embed + (size_t)c->species[i] * nq->emb_dim, tmp);
        for (int k = 0; k < dG; k++) pre[k] = pre[k] + tmp[k];
    }
    double *xo = c->xo[t] + i * dO;
    gate_forward(&ly->gate, pre, xo);
    if (ly->resnet)
        for (int k = 0; k < dO; k++) xo[k] = xin[k] + xo[k];
}

static void step_energy(const nq_ctx *c, int64_t i, double *tmp) {
    const cgq_nequip *nq = c->nq;
    const int L = nq->n_layers, dO = nq->layers[L - 1].gate.dim_out, ts = c->species[i];
    double out;
    mlp_forward(&nq->readout, c->xo[L - 1] + i * dO, &out, tmp);
    double e = nq->shifts[ts] + nq->scales[ts] * out;
    if (nq->zbl) {
        double z = 0.0;
        for (int64_t k = c->row_ptr[i]; k < c->row_ptr[i + 1]; k++)
            if (c->active[k]) {
                const int tn = c->species[c->sender[k]];
                z += zbl_edge(nq, ts, tn, c->r[k], c->xn[k], nq->rmax_recip[ts * nq->n_types + tn], NULL);
            }
        e = z + e;
    }
    c->node_out[i] = e;
}

/* dE/dx_L of node i from the readout (into gx). */
static void step_readout_backward(const nq_ctx *c, int64_t i, double *tmp) {
    const cgq_nequip *nq = c->nq;
    const int L = nq->n_layers, dO = nq->layers[L - 1].gate.dim_out;
    const cgq_nq_mlp *ro = &nq->readout;
    double *cache = tmp, *scr = tmp + mlp_cache_size(ro), out;
    mlp_forward(ro, c->xo[L - 1] + i * dO, &out, cache);
    double g = nq->scales[c->species[i]];
    mlp_backward(ro, cache, &g, c->gx + i * c->maxdim, scr);
}

/* Node side of layer t in reverse: gate, linear_2, self-connection, resnet. gx rows hold dE/d(output). */
static void step_node_backward(const nq_ctx *c, int t, int64_t i, double *tmp) {
    const cgq_nequip *nq = c->nq;
    const cgq_nq_layer *ly = &nq->layers[t];
    const int din = layer_in_dim(nq, t), dM = ly->tp.out.dim, dG = ly->gate.dim_in;
    const double *go = c->gx + i * c->maxdim;
    double *gpre = tmp, *gp = c->gx_prev + i * c->maxdim;
    gate_backward(&ly->gate, c->pre[t] + i * dG, go, gpre);
    if (ly->resnet) memcpy(gp, go, sizeof(double) * (size_t)din);
    else memset(gp, 0, sizeof(double) * (size_t)din);
    if (ly->use_sc) cgq_tp_node_backward_x1(&ly->sc, nq->embed + (size_t)c->species[i] * nq->emb_dim, gpre, gp);
    double *gM = c->gM + i * dM;
    memset(gM, 0, sizeof(double) * (size_t)dM);
    cgq_linear_backward(&ly->linear_2, gpre, gM);
}

/* dE/dv for the edges of receiver i through Y, the edge MLP, the Bessel basis and cutoff (+=). */
static void step_edge_backward(const nq_ctx *c, int t, int64_t i, double *scratch) {
    const cgq_nequip *nq = c->nq;
    const cgq_nq_layer *ly = &nq->layers[t];
    const int din = layer_in_dim(nq, t), dM = ly->tp.out.dim, nb = c->nb, nY = c->nY;
    const int64_t wn = ly->tp.weight_numel;
    double *w = scratch, *gw = w + wn, *cache = gw + wn, *mscr = cache + mlp_cache_size(&ly->edge_mlp);
    double *gef = mscr + 2 * mlp_max_width(&ly->edge_mlp), *ef = gef + nb, *def = ef + nb, *dY = def + nb;
    double *gY = dY + 16 * 3;
    for (int64_t e = c->row_ptr[i]; e < c->row_ptr[i + 1]; e++) {
        if (!c->active[e]) continue;
        mlp_forward(&ly->edge_mlp, c->ef + e * nb, w, cache);
        memset(gw, 0, sizeof(double) * (size_t)wn);
        memset(gY, 0, sizeof(double) * (size_t)nY);
        cgq_tp_conv_backward(&ly->tp, c->h[t] + (int64_t)c->sender[e] * din, c->Y + e * nY, w, c->gM + i * dM, NULL, gY,
                             gw);
        mlp_backward(&ly->edge_mlp, cache, gw, gef, mscr);
        const int tc = c->species[i], tn = c->species[c->sender[e]];
        const double k = nq->rmax_recip[tc * nq->n_types + tn];
        edge_embedding(nq, c->xn[e], ef, def);
        double gr = 0.0;
        for (int n = 0; n < nb; n++) gr += gef[n] * def[n];
        gr *= k;
        const double *u = c->u + 3 * e, r = c->r[e];
        double Yt[16];
        cgq_sh_eval(c->m->lmax_sh, u, Yt, dY);
        double *ge = c->edge_grad + 3 * e;
        for (int q = 0; q < 3; q++) {
            double acc = gr * u[q] / r;
            for (int j = 0; j < nY; j++) acc += gY[j] * dY[3 * j + q];
            ge[q] -= acc; /* d/dvec = -d/du */
        }
    }
}

/* Sender row j: dE/dh[j] summed over its outgoing edges (sender-sorted order). */
static void step_sender_backward(const nq_ctx *c, int t, int64_t j, double *scratch) {
    const cgq_nq_layer *ly = &c->nq->layers[t];
    const int din = layer_in_dim(c->nq, t), dM = ly->tp.out.dim;
    double *w = scratch, *cache = scratch + ly->tp.weight_numel;
    double *gj = c->gh + j * din;
    memset(gj, 0, sizeof(double) * (size_t)din);
    for (int64_t q = c->srow[j]; q < c->srow[j + 1]; q++) {
        const int64_t e = c->sedge[q];
        if (!c->active[e]) continue;
        const double *we;
        edge_weights(c, t, e, w, cache, 0, &we);
        cgq_tp_conv_backward(&ly->tp, c->h[t] + j * din, c->Y + e * c->nY, we, c->gM + (int64_t)c->erecv[e] * dM, gj,
                             NULL, NULL);
    }
}

/* gx_prev[j] += linear_1^T (norm * gh[j]) */
static void step_up_backward(const nq_ctx *c, int t, int64_t j, double *tmp) {
    const cgq_nq_layer *ly = &c->nq->layers[t];
    const int din = layer_in_dim(c->nq, t);
    const double nc = ly->norm_const[c->species[j]], *gj = c->gh + j * din;
    for (int k = 0; k < din; k++) tmp[k] = nc * gj[k];
    cgq_linear_backward(&ly->linear_1, tmp, c->gx_prev + j * c->maxdim);
}

static void step_zbl_backward(const nq_ctx *c, int64_t i) {
    const cgq_nequip *nq = c->nq;
    const int tc = c->species[i];
    for (int64_t e = c->row_ptr[i]; e < c->row_ptr[i + 1]; e++) {
        if (!c->active[e]) continue;
        const int tn = c->species[c->sender[e]];
        double de;
        zbl_edge(nq, tc, tn, c->r[e], c->xn[e], nq->rmax_recip[tc * nq->n_types + tn], &de);
        const double *u = c->u + 3 * e, r = c->r[e];
        for (int q = 0; q < 3; q++) c->edge_grad[3 * e + q] -= de * u[q] / r;
    }
}


cgq_status cgq_nequip_cpu_evaluate(const cgq_model *m, const cgq_graph *g, const cgq_exchange *xc, double *energy,
                                   double *node_energy, double *edge_grad, cgq_arena *arena) {
    const cgq_nequip *nq = m->nequip;
    nq_ctx c;
    memset(&c, 0, sizeof c);
    c.m = m, c.nq = nq;
    c.N = g->n_local, c.NA = g->n_nodes, c.E = g->n_edges;
    c.species = g->species, c.sender = g->sender, c.row_ptr = g->row_ptr, c.vec = g->vec;
    c.nY = (m->lmax_sh + 1) * (m->lmax_sh + 1), c.nb = nq->n_bessel;
    const int want_grad = edge_grad != NULL, L = nq->n_layers;
    const int64_t N = c.N, NA = c.NA, E = c.E;
    size_t cache_doubles = 0;
    for (int t = 0; t < L; t++) cache_doubles += (size_t)E * (size_t)nq->layers[t].tp.weight_numel;
    const int cache_edges = want_grad && cache_doubles * sizeof(double) <= NQ_EDGE_CACHE_BUDGET_BYTES;
    const size_t need = layout(&c, NULL, want_grad, cache_edges);
    if (need > arena->cap) {
        double *nbuf = realloc(arena->buf, sizeof(double) * (need + need / 16 + 1));
        if (!nbuf)
            return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory: the CPU evaluator needs %.1f MB of work memory "
                            "for %lld atoms and %lld edges", 8e-6 * (double)need, (long long)N, (long long)E);
        arena->buf = nbuf;
        arena->cap = need + need / 16 + 1;
    }
    layout(&c, arena->buf, want_grad, cache_edges);
    if (want_grad) c.edge_grad = edge_grad;
    volatile int oom = 0;
    const size_t work = c.esz + c.nsz;

    for (int64_t i = 0; i < N; i++)
        for (int64_t e = c.row_ptr[i]; e < c.row_ptr[i + 1]; e++) c.erecv[e] = (int32_t)i;
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < E; e++) step_edge(&c, e);

    for (int t = 0; t < L; t++) {
        /* layer 0 reads the type embedding, known for ghosts too; later layers get ghost rows by exchange */
        const int64_t n_up = t == 0 ? NA : N;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n_up; i++) step_up(&c, t, i);
        if (t > 0 && xc) CGQ_TRY(xc->forward(xc->ctx, c.h[t], layer_in_dim(nq, t)));
#define CONV(i, s) step_conv(&c, t, i, s)
        CGQ_PARALLEL_WITH_SCRATCH(N, work, oom, CONV);
#undef CONV
    }
#define ENERGY(i, s) step_energy(&c, i, s)
    CGQ_PARALLEL_WITH_SCRATCH(N, c.nsz, oom, ENERGY);
#undef ENERGY
    double total = 0.0;
    for (int64_t i = 0; i < N; i++) total += c.node_out[i]; /* fixed order: deterministic */
    *energy = total;
    if (node_energy && N) memcpy(node_energy, c.node_out, sizeof(double) * (size_t)N);
    if (!want_grad) return CGQ_STATUS_OK;

    CGQ_TRY(cgq_sender_index(c.sender, E, NA, c.srow, c.sedge)); /* for the transposed message gradient */
    if (E) memset(c.edge_grad, 0, sizeof(double) * 3 * (size_t)E);
    if (N) memset(c.gx, 0, sizeof(double) * (size_t)N * c.maxdim);
#define RO_BWD(i, s) step_readout_backward(&c, i, s)
    CGQ_PARALLEL_WITH_SCRATCH(N, c.nsz, oom, RO_BWD);
#undef RO_BWD
    if (nq->zbl) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < N; i++) step_zbl_backward(&c, i);
    }
    for (int t = L - 1; t >= 0; t--) {
#define NODE_BWD(i, s) step_node_backward(&c, t, i, s)
        CGQ_PARALLEL_WITH_SCRATCH(N, c.nsz, oom, NODE_BWD);
#undef NODE_BWD
#define EDGE_BWD(i, s) step_edge_backward(&c, t, i, s)
        CGQ_PARALLEL_WITH_SCRATCH(N, c.esz, oom, EDGE_BWD);
#undef EDGE_BWD
        if (t == 0) break; /* the type embedding does not depend on positions */
#define SEND_BWD(j, s) step_sender_backward(&c, t, j, s)
        CGQ_PARALLEL_WITH_SCRATCH(NA, c.esz, oom, SEND_BWD);
#undef SEND_BWD
        /* gradients that landed on ghost senders belong to their owners */
        if (xc) CGQ_TRY(xc->reverse(xc->ctx, c.gh, layer_in_dim(nq, t)));
#define UP_BWD(j, s) step_up_backward(&c, t, j, s)
        CGQ_PARALLEL_WITH_SCRATCH(N, c.nsz, oom, UP_BWD);
#undef UP_BWD
        double *swap = c.gx;
        c.gx = c.gx_prev;
        c.gx_prev = swap;
    }
    return CGQ_STATUS_OK;
}
