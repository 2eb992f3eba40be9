/* mace_steps.h: MACE forward and reverse pass as per-node and per-edge steps over one context. The CPU
 * backend runs each step in an OpenMP loop, the GPU backend as one kernel thread per item: one
 * definition of the math for both. Every reduction is owned by one item (receiver rows for messages,
 * sender rows for the transposed gradient), so results do not depend on threads or launch order.
 * Per-edge radial-MLP outputs are kept from the forward when the edge cache is allocated, else
 * recomputed. */
#ifndef CGQ_MACE_STEPS_H
#define CGQ_MACE_STEPS_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/fcnet.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/radial.h"
#include "kernels/cpu/sh.h"
#include "kernels/cpu/symmetric_contraction.h"
#include "kernels/cpu/tensor_product.h"
#include "kernels/portable.h"
#include "model/model.h"

typedef struct mace_layer_state {
    double *hu, *M, *rho, *Mlin, *Apre, *A, *B, *sc, *h;
} mace_layer_state;

/* Everything one evaluation touches. Pointers are host memory (CPU) or device memory (GPU). */
typedef struct mace_ctx {
    const cgq_model *m;
    /* graph */
    int64_t N, NA, E;
    const int32_t *species, *sender;
    const int64_t *row_ptr;
    const double *vec;
    /* edge geometry and cache */
    int nY, nb;
    double *Y, *ef, *cut, *r;
    double *wcache[CGQ_MAX_LAYERS], *acache[CGQ_MAX_LAYERS]; /* NULL: recompute */
    /* node state */
    double *emb, *ro_z[CGQ_MAX_LAYERS], *node_out;
    mace_layer_state ls[CGQ_MAX_LAYERS];
    /* reverse pass */
    double *gh, *gh_prev, *gM, *ghu, *grho, *edge_grad;
    /* edge-parallel mode (GPU): per-edge messages, densities and sender gradients, summed per row
     * afterwards in CSR order; NULL on the CPU, which sums inside the row loops */
    double *msg, *rho_e, *gx1e;
    /* per-node gradients at the symmetric contraction (its channels run in parallel on the GPU) */
    double *gBn, *gAn;
    /* set by a backend whose own kernels already wrote the row-summed messages M (GPU v2) */
    int messages_ready;
    int64_t *srow;
    int32_t *sedge, *erecv;
    /* per-item scratch sizes (doubles) */
    size_t esz, nsz;
} mace_ctx;

/* Edge cache budget: radial-MLP outputs and activations of every edge and layer are kept from the
 * forward pass when they fit, so the backward does not recompute them (about 2.5x fewer MLP passes). */
#define CGQ_EDGE_CACHE_BUDGET_BYTES ((size_t)1 << 30)

CGQ_INTERNAL int mace_max_i(int a, int b) { return a > b ? a : b; }

/* Row widths of the per-node product-basis gradient buffers (the widest layer's). */
CGQ_INTERNAL int mace_max_product_dim(const cgq_model *m) {
    int w = 1;
    for (int t = 0; t < m->n_layers; t++) w = mace_max_i(w, m->layers[t].product_out.dim);
    return w;
}

CGQ_INTERNAL int mace_max_coupling_dim(const cgq_model *m) {
    int w = 1;
    for (int t = 0; t < m->n_layers; t++) w = mace_max_i(w, m->layers[t].channels * m->layers[t].coupling_dim);
    return w;
}

CGQ_INTERNAL int mace_readout_hidden(const cgq_readout *ro) {
    return ro->kind == CGQ_READOUT_LINEAR ? 0 : 2 * ro->linear_1.out.dim;
}

/* ---- memory plan (host code; only pointer arithmetic on `base`) ---------------------------------- */
typedef struct mace_plan {
    double *p;
    size_t total;
} mace_plan;

/* NULL for n == 0: the steps test optional arrays (edge cache, edge-parallel buffers) for NULL. */
static inline double *mace_carve(mace_plan *pl, size_t n) {
    double *r = n ? pl->p : NULL;
    if (r) pl->p += n;
    pl->total += n;
    return r;
}

/* Lays out all arrays of an evaluation from base (NULL: just count). Returns the doubles needed. */
static inline size_t mace_layout(mace_ctx *c, double *base, int want_grad, int cache_edges, int edge_parallel) {
    const cgq_model *m = c->m;
    const int64_t N = c->N, NA = c->NA, E = c->E;
    int maxdim = m->node_embedding.out.dim, maxconv = 1, maxhu = 1;
    for (int t = 0; t < m->n_layers; t++) {
        const cgq_mace_layer *ly = &m->layers[t];
        maxdim = mace_max_i(maxdim, mace_max_i(ly->product_linear.out.dim, mace_max_i(ly->target.dim, ly->product_out.dim)));
        maxdim = mace_max_i(maxdim, ly->skip_tp.out.dim);
        maxconv = mace_max_i(maxconv, ly->conv_tp.out.dim);
        maxhu = mace_max_i(maxhu, ly->linear_up.out.dim);
    }
    mace_plan pl = {base, 0};
    c->emb = mace_carve(&pl, (size_t)NA * m->node_embedding.out.dim);
    for (int t = 0; t < m->n_layers; t++) {
        const cgq_mace_layer *ly = &m->layers[t];
        mace_layer_state *s = &c->ls[t];
        s->hu = mace_carve(&pl, (size_t)NA * ly->linear_up.out.dim);
        s->M = mace_carve(&pl, (size_t)N * ly->conv_tp.out.dim);
        s->rho = mace_carve(&pl, (size_t)N);
        s->Mlin = mace_carve(&pl, (size_t)N * ly->target.dim);
        s->Apre = mace_carve(&pl, (size_t)N * ly->target.dim);
        s->A = mace_carve(&pl, (size_t)N * ly->channels * ly->coupling_dim);
        s->B = mace_carve(&pl, (size_t)N * ly->product_out.dim);
        s->sc = mace_carve(&pl, (size_t)N * ly->skip_tp.out.dim);
        s->h = mace_carve(&pl, (size_t)N * ly->product_linear.out.dim);
        c->wcache[t] = cache_edges ? mace_carve(&pl, (size_t)E * ly->conv_tp.weight_numel) : NULL;
        c->acache[t] = cache_edges ? mace_carve(&pl, (size_t)E * cgq_fcnet_cache_size(&ly->radial_mlp)) : NULL;
    }
    for (int r = 0; r < m->n_readouts; r++) c->ro_z[r] = mace_carve(&pl, (size_t)N * mace_readout_hidden(&m->readouts[r]));
    c->node_out = mace_carve(&pl, (size_t)N);
    c->Y = mace_carve(&pl, (size_t)E * c->nY);
    c->ef = mace_carve(&pl, (size_t)E * c->nb);
    c->cut = mace_carve(&pl, (size_t)E);
    c->r = mace_carve(&pl, (size_t)E);
    const size_t g = want_grad ? 1 : 0;
    c->gh = mace_carve(&pl, g * N * maxdim);
    c->gh_prev = mace_carve(&pl, g * N * maxdim);
    c->gM = mace_carve(&pl, g * N * maxconv);
    c->ghu = mace_carve(&pl, g * NA * maxhu);
    c->grho = mace_carve(&pl, g * N);
    c->edge_grad = mace_carve(&pl, g * 3 * E);
    const size_t ep = edge_parallel ? 1 : 0;
    c->msg = mace_carve(&pl, ep * E * maxconv);
    c->rho_e = mace_carve(&pl, ep * E);
    c->gx1e = mace_carve(&pl, ep * g * E * maxhu);
    c->gBn = mace_carve(&pl, g * N * mace_max_product_dim(m));
    c->gAn = mace_carve(&pl, g * N * mace_max_coupling_dim(m));
    /* receiver of each edge is always needed (pair terms); the sender-sorted index only for gradients */
    const size_t idx = ((size_t)(NA + 1) * sizeof(int64_t) + 2 * (size_t)E * sizeof(int32_t)) / sizeof(double) + 2;
    double *ip = mace_carve(&pl, idx);
    c->srow = (int64_t *)ip;
    c->sedge = ip ? (int32_t *)(c->srow + NA + 1) : NULL;
    c->erecv = ip ? c->sedge + E : NULL;
    /* scratch sizes */
    size_t esz = 0;
    for (int t = 0; t < m->n_layers; t++) {
        const cgq_mace_layer *ly = &m->layers[t];
        size_t s = 3 * (size_t)ly->conv_tp.weight_numel + (size_t)cgq_fcnet_cache_size(&ly->radial_mlp) +
                   2 * (size_t)mace_max_i(cgq_fcnet_max_width(&ly->radial_mlp), cgq_fcnet_max_width(&ly->density_fn)) +
                   (size_t)cgq_fcnet_cache_size(&ly->density_fn);
        esz = s > esz ? s : esz;
    }
    c->esz = esz + 4 * (size_t)m->n_bessel + 16 + 64;
    int maxro = 1;
    for (int r = 0; r < m->n_readouts; r++)
        maxro = mace_max_i(maxro, 4 * m->readouts[r].linear_1.out.dim + m->readouts[r].linear_2.out.dim);
    int maxcd = 1;
    for (int t = 0; t < m->n_layers; t++) maxcd = mace_max_i(maxcd, m->layers[t].channels * m->layers[t].coupling_dim);
    c->nsz = (size_t)(4 * maxdim + maxcd + 2 * maxro + 16);
    return pl.total;
}

static inline size_t mace_cache_doubles(const cgq_model *m, int64_t E) {
    size_t n = 0;
    for (int t = 0; t < m->n_layers; t++)
        n += (size_t)E * (size_t)(m->layers[t].conv_tp.weight_numel + cgq_fcnet_cache_size(&m->layers[t].radial_mlp));
    return n;
}

/* ---- per-edge scratch ---------------------------------------------------------------------------- */
typedef struct mace_edge_scratch {
    double *w, *cache;           /* current edge's MLP output/activations (own buffers or the cache) */
    double *own_w, *own_cache, *wraw, *gw, *fc_scratch, *dcache, *gef, *B, *dB, *gY;
} mace_edge_scratch;

CGQ_INTERNAL void mace_scratch_init(mace_edge_scratch *s, double *p, const cgq_model *m, const cgq_mace_layer *ly) {
    const int wn = (int)ly->conv_tp.weight_numel;
    s->own_w = s->w = p, p += wn;
    s->wraw = p, p += wn;
    s->gw = p, p += wn;
    s->own_cache = s->cache = p, p += cgq_fcnet_cache_size(&ly->radial_mlp);
    s->fc_scratch = p, p += 2 * mace_max_i(cgq_fcnet_max_width(&ly->radial_mlp), cgq_fcnet_max_width(&ly->density_fn));
    s->dcache = p, p += cgq_fcnet_cache_size(&ly->density_fn);
    s->gef = p, p += 2 * m->n_bessel;
    s->B = p, p += m->n_bessel;
    s->dB = p, p += m->n_bessel;
    s->gY = p;
}

/* MLP weights of edge e of layer t into s->w (times the cutoff when the model puts it there). With a
 * cache, the forward fills it and later calls only point at it. */
CGQ_INTERNAL void mace_edge_weights(const mace_ctx *c, int t, int64_t e, mace_edge_scratch *s, int fill) {
    const cgq_model *m = c->m;
    const cgq_mace_layer *ly = &m->layers[t];
    if (c->wcache[t]) {
        s->w = c->wcache[t] + e * ly->conv_tp.weight_numel;
        s->cache = c->acache[t] + e * cgq_fcnet_cache_size(&ly->radial_mlp);
        if (!fill) return;
    } else {
        s->w = s->own_w;
        s->cache = s->own_cache;
    }
    cgq_fcnet_forward(&ly->radial_mlp, c->ef + e * c->nb, s->w, s->cache);
    if (!m->apply_cutoff)
        for (int64_t k = 0; k < ly->conv_tp.weight_numel; k++) s->w[k] *= c->cut[e];
}

CGQ_INTERNAL double mace_edge_density(const mace_ctx *c, const cgq_mace_layer *ly, int64_t e, mace_edge_scratch *s,
                                      double *d_out) {
    double d;
    cgq_fcnet_forward(&ly->density_fn, c->ef + e * c->nb, &d, s->dcache);
    double rho = tanh(d * d);
    if (!c->m->apply_cutoff) rho *= c->cut[e];
    *d_out = d;
    return rho;
}

CGQ_INTERNAL void mace_reshape_to_cd(const cgq_mace_layer *ly, const double *x, double *A) {
    const int D = ly->coupling_dim;
    int doff = 0;
    for (int k = 0; k < ly->target.n; k++) {
        const cgq_irrep_block *b = &ly->target.b[k];
        const int d = 2 * b->l + 1;
        for (int ch = 0; ch < b->mul; ch++)
            for (int mm = 0; mm < d; mm++) A[ch * D + doff + mm] = x[b->offset + ch * d + mm];
        doff += d;
    }
}

CGQ_INTERNAL void mace_reshape_from_cd(const cgq_mace_layer *ly, const double *A, double *x) {
    const int D = ly->coupling_dim;
    int doff = 0;
    for (int k = 0; k < ly->target.n; k++) {
        const cgq_irrep_block *b = &ly->target.b[k];
        const int d = 2 * b->l + 1;
        for (int ch = 0; ch < b->mul; ch++)
            for (int mm = 0; mm < d; mm++) x[b->offset + ch * d + mm] = A[ch * D + doff + mm];
        doff += d;
    }
}

/* ---- forward steps -------------------------------------------------------------------------------- */
/* Edge e's spherical harmonics Y (degrees <= lmax: the model's, a constant on the GPU as in mace_edge_tail_sh),
 * edge features ef (nb; NULL: not needed, as where the GPU's radial tables take r) and cutoff; returns its length. */
CGQ_INTERNAL double mace_edge_geometry_sh(const mace_ctx *c, int64_t e, double *Y, double *ef, double *cut, int lmax) {
    const cgq_model *m = c->m;
    const double *v = c->vec + 3 * e;
    const double r = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    cgq_sh_eval(lmax, v, Y);
    *cut = cgq_poly_cutoff(m->cutoff_p, m->cutoff_r_max, r, NULL);
    if (!ef) return r;
    double B[64];
    const double rb = m->agnesi ? cgq_agnesi(m, c->species[c->sender[e]], c->species[c->erecv[e]], r, NULL) : r;
    cgq_bessel(m, rb, B, NULL);
    for (int n = 0; n < c->nb; n++) ef[n] = m->apply_cutoff ? B[n] * *cut : B[n];
    return r;
}

CGQ_INTERNAL double mace_edge_geometry(const mace_ctx *c, int64_t e, double *Y, double *ef, double *cut) {
    return mace_edge_geometry_sh(c, e, Y, ef, cut, c->m->lmax_sh);
}

CGQ_INTERNAL void mace_step_edge_geometry(const mace_ctx *c, int64_t e) {
    c->r[e] = mace_edge_geometry(c, e, c->Y + e * c->nY, c->ef + e * c->nb, c->cut + e);
}

CGQ_INTERNAL void mace_step_embed(const mace_ctx *c, int64_t i) {
    double onehot[CGQ_MAX_SPECIES] = {0};
    onehot[c->species[i]] = 1.0;
    cgq_linear_forward(&c->m->node_embedding, onehot, c->emb + i * c->m->node_embedding.out.dim);
}

CGQ_INTERNAL int mace_layer_in_dim(const cgq_model *m, int t) {
    return t ? m->layers[t - 1].product_linear.out.dim : m->node_embedding.out.dim;
}

CGQ_INTERNAL const double *mace_layer_in(const mace_ctx *c, int t) { return t ? c->ls[t - 1].h : c->emb; }

/* hu = linear_up(h_in) (and the residual skip_tp for local nodes) */
CGQ_INTERNAL void mace_step_up(const mace_ctx *c, int t, int64_t i) {
    const cgq_mace_layer *ly = &c->m->layers[t];
    const int din = mace_layer_in_dim(c->m, t);
    const double *hin = mace_layer_in(c, t) + i * din;
    cgq_linear_forward(&ly->linear_up, hin, c->ls[t].hu + i * ly->linear_up.out.dim);
    if (ly->residual && i < c->N) {
        double onehot[CGQ_MAX_SPECIES] = {0};
        onehot[c->species[i]] = 1.0;
        cgq_tp_node_forward(&ly->skip_tp, hin, onehot, c->ls[t].sc + i * ly->skip_tp.out.dim);
    }
}

CGQ_INTERNAL void mace_step_product_channel(const mace_ctx *c, int t, int64_t i, int ch);
CGQ_INTERNAL void mace_step_product_post(const mace_ctx *c, int t, int64_t i);

/* Messages of receiver i summed over its CSR row, then the node side of the layer up to the product
 * basis input A; with `full` also the product (all channels) and its linear. scratch: esz+nsz. */
CGQ_INTERNAL void mace_step_conv_node(const mace_ctx *c, int t, int64_t i, double *scratch, int full) {
    const cgq_model *m = c->m;
    const cgq_mace_layer *ly = &m->layers[t];
    const mace_layer_state *s = &c->ls[t];
    const int dhu = ly->linear_up.out.dim, dM = ly->conv_tp.out.dim, dT = ly->target.dim;
    const int CD = ly->channels * ly->coupling_dim;
    mace_edge_scratch es;
    mace_scratch_init(&es, scratch, m, ly);
    double *Mi = s->M + i * dM, rho = 0.0;
    if (!c->messages_ready) memset(Mi, 0, sizeof(double) * (size_t)dM);
    for (int64_t e = c->row_ptr[i]; e < c->row_ptr[i + 1] && !c->messages_ready; e++) {
        if (c->msg) { /* messages computed edge-parallel: sum them in row order */
            for (int j = 0; j < dM; j++) Mi[j] += c->msg[e * dM + j];
            if (ly->density) rho += c->rho_e[e];
            continue;
        }
        mace_edge_weights(c, t, e, &es, 1);
        cgq_tp_conv_forward(&ly->conv_tp, s->hu + (int64_t)c->sender[e] * dhu, c->Y + e * c->nY, es.w, Mi);
        if (ly->density) {
            double d;
            rho += mace_edge_density(c, ly, e, &es, &d);
        }
    }
    s->rho[i] = rho;
    double *tmp = scratch + c->esz;
    const double scale = ly->density ? 1.0 / (rho + 1.0) : 1.0 / ly->avg_num_neighbors;
    cgq_linear_forward(&ly->linear, Mi, tmp);
    double *Ml = s->Mlin + i * dT;
    for (int j = 0; j < dT; j++) Ml[j] = tmp[j] * scale;
    double onehot[CGQ_MAX_SPECIES] = {0};
    onehot[c->species[i]] = 1.0;
    if (!ly->residual) cgq_tp_node_forward(&ly->skip_tp, Ml, onehot, s->Apre + i * dT);
    else memcpy(s->Apre + i * dT, Ml, sizeof(double) * (size_t)dT);
    mace_reshape_to_cd(ly, s->Apre + i * dT, s->A + i * CD);
    if (!full) return;
    for (int ch = 0; ch < ly->channels; ch++) mace_step_product_channel(c, t, i, ch);
    mace_step_product_post(c, t, i);
}

/* Product basis (symmetric contraction) of node i, one channel. */
CGQ_INTERNAL void mace_step_product_channel(const mace_ctx *c, int t, int64_t i, int ch) {
    const cgq_mace_layer *ly = &c->m->layers[t];
    const int CD = ly->channels * ly->coupling_dim, dB = ly->product_out.dim;
    cgq_symcon_forward(ly, ly->agnostic ? 0 : c->species[i], c->ls[t].A + i * CD, c->ls[t].B + i * dB, ch, ch + 1);
}

/* h = product linear(B) (+ skip connection) */
CGQ_INTERNAL void mace_step_product_post(const mace_ctx *c, int t, int64_t i) {
    const cgq_mace_layer *ly = &c->m->layers[t];
    const mace_layer_state *s = &c->ls[t];
    const int dB = ly->product_out.dim, dH = ly->product_linear.out.dim, dsc = ly->skip_tp.out.dim;
    cgq_linear_forward(&ly->product_linear, s->B + i * dB, s->h + i * dH);
    if (ly->use_sc && ly->residual)
        for (int j = 0; j < dH; j++) s->h[i * dH + j] += s->sc[i * dsc + j];
}

/* Edge-parallel forward: the message (and density) of edge e alone. */
CGQ_INTERNAL void mace_step_edge_message(const mace_ctx *c, int t, int64_t e, double *scratch) {
    const cgq_mace_layer *ly = &c->m->layers[t];
    const int dhu = ly->linear_up.out.dim, dM = ly->conv_tp.out.dim;
    mace_edge_scratch es;
    mace_scratch_init(&es, scratch, c->m, ly);
    mace_edge_weights(c, t, e, &es, 1);
    double *me = c->msg + e * dM;
    memset(me, 0, sizeof(double) * (size_t)dM);
    cgq_tp_conv_forward(&ly->conv_tp, c->ls[t].hu + (int64_t)c->sender[e] * dhu, c->Y + e * c->nY, es.w, me);
    if (ly->density) {
        double d;
        c->rho_e[e] = mace_edge_density(c, ly, e, &es, &d);
    }
}

/* Readout r of node i: its scalar (head column); hidden pre-activations kept in z. */
CGQ_INTERNAL double mace_readout_forward(const cgq_readout *ro, const double *h, double *z, double *tmp) {
    if (ro->kind == CGQ_READOUT_LINEAR) {
        cgq_linear_forward(&ro->linear_1, h, tmp);
        return tmp[ro->head_index];
    }
    const int H = ro->linear_1.out.dim, hh = H / ro->num_heads;
    double *z1 = z, *a = tmp;
    cgq_linear_forward(&ro->linear_1, h, z1);
    for (int j = 0; j < H; j++) {
        a[j] = cgq_act_eval(ro->act, ro->act_cst, z1[j], NULL);
        if (ro->mask_heads && j / hh != ro->head_index) a[j] = 0.0;
    }
    if (ro->kind == CGQ_READOUT_NONLINEAR_BIAS) {
        double *z2 = z + H;
        cgq_linear_forward(&ro->linear_mid, a, z2);
        for (int j = 0; j < H; j++) {
            a[j] = cgq_act_eval(ro->act, ro->act_cst, z2[j], NULL);
            if (ro->mask_heads && j / hh != ro->head_index) a[j] = 0.0;
        }
    }
    double *out = tmp + H;
    cgq_linear_forward(&ro->linear_2, a, out);
    return out[ro->head_index];
}

CGQ_INTERNAL void mace_step_energy(const mace_ctx *c, int64_t i, double *tmp) {
    const cgq_model *m = c->m;
    double e_inter = 0.0;
    if (m->zbl)
        for (int64_t e = c->row_ptr[i]; e < c->row_ptr[i + 1]; e++)
            e_inter += cgq_zbl_edge(m, c->species[c->sender[e]], c->species[i], c->r[e], NULL);
    for (int r = 0; r < m->n_readouts; r++) {
        const cgq_readout *ro = &m->readouts[r];
        const int dH = m->layers[ro->layer].product_linear.out.dim;
        e_inter += mace_readout_forward(ro, c->ls[ro->layer].h + i * dH, c->ro_z[r] + i * mace_readout_hidden(ro), tmp);
    }
    c->node_out[i] = m->atomic_energies[c->species[i]] + m->scale * e_inter + m->shift;
}

/* ---- reverse steps -------------------------------------------------------------------------------- */
/* gh += d(readout)/dh * gscale */
CGQ_INTERNAL void mace_readout_backward(const cgq_readout *ro, const double *z, double gscale, double *gh, double *tmp) {
    if (ro->kind == CGQ_READOUT_LINEAR) {
        double *go = tmp;
        memset(go, 0, sizeof(double) * (size_t)ro->linear_1.out.dim);
        go[ro->head_index] = gscale;
        cgq_linear_backward(&ro->linear_1, go, gh);
        return;
    }
    const int H = ro->linear_1.out.dim, hh = H / ro->num_heads;
    double *go = tmp, *ga = tmp + ro->linear_2.out.dim, *gz = ga + H;
    memset(go, 0, sizeof(double) * (size_t)ro->linear_2.out.dim);
    go[ro->head_index] = gscale;
    memset(ga, 0, sizeof(double) * (size_t)H);
    cgq_linear_backward(&ro->linear_2, go, ga);
    if (ro->kind == CGQ_READOUT_NONLINEAR_BIAS) {
        const double *z2 = z + H;
        for (int j = 0; j < H; j++) {
            double d;
            cgq_act_eval(ro->act, ro->act_cst, z2[j], &d);
            gz[j] = (ro->mask_heads && j / hh != ro->head_index) ? 0.0 : ga[j] * d;
        }
        memset(ga, 0, sizeof(double) * (size_t)H);
        cgq_linear_backward(&ro->linear_mid, gz, ga);
    }
    for (int j = 0; j < H; j++) {
        double d;
        cgq_act_eval(ro->act, ro->act_cst, z[j], &d);
        gz[j] = (ro->mask_heads && j / hh != ro->head_index) ? 0.0 : ga[j] * d;
    }
    cgq_linear_backward(&ro->linear_1, gz, gh);
}

/* gh[i] += dE/dh_t of the readouts of layer t */
CGQ_INTERNAL void mace_step_readouts_backward(const mace_ctx *c, int t, int64_t i, double *tmp) {
    const cgq_model *m = c->m;
    const int dH = m->layers[t].product_linear.out.dim;
    for (int r = 0; r < m->n_readouts; r++) {
        const cgq_readout *ro = &m->readouts[r];
        if (ro->layer == t) mace_readout_backward(ro, c->ro_z[r] + i * mace_readout_hidden(ro), m->scale, c->gh + i * dH, tmp);
    }
}

/* Node side of layer t in reverse, first part: readouts of t, skip path into gh_prev (zeroed here), and
 * dE/dB into gBn; gAn zeroed for the product's reverse. gh holds dE/dh_t (rows of N). */
CGQ_INTERNAL void mace_step_node_backward_pre(const mace_ctx *c, int t, int64_t i, double *tmp) {
    const cgq_model *m = c->m;
    const cgq_mace_layer *ly = &m->layers[t];
    const int din = mace_layer_in_dim(m, t), dH = ly->product_linear.out.dim, dB = ly->product_out.dim;
    const int CD = ly->channels * ly->coupling_dim;
    const int maxb = mace_max_product_dim(m), maxcd = mace_max_coupling_dim(m);
    double *ghi = c->gh + i * dH;
    mace_step_readouts_backward(c, t, i, tmp);
    double onehot[CGQ_MAX_SPECIES] = {0};
    onehot[c->species[i]] = 1.0;
    double *gp = c->gh_prev + i * din;
    memset(gp, 0, sizeof(double) * (size_t)din);
    if (ly->use_sc && ly->residual) cgq_tp_node_backward_x1(&ly->skip_tp, onehot, ghi, gp);
    double *gB = c->gBn + i * maxb, *gA = c->gAn + i * maxcd;
    memset(gB, 0, sizeof(double) * (size_t)dB);
    cgq_linear_backward(&ly->product_linear, ghi, gB);
    memset(gA, 0, sizeof(double) * (size_t)CD);
}

CGQ_INTERNAL void mace_step_product_channel_backward(const mace_ctx *c, int t, int64_t i, int ch) {
    const cgq_model *m = c->m;
    const cgq_mace_layer *ly = &m->layers[t];
    const int maxb = mace_max_product_dim(m), maxcd = mace_max_coupling_dim(m);
    const int CD = ly->channels * ly->coupling_dim;
    cgq_symcon_backward(ly, ly->agnostic ? 0 : c->species[i], c->ls[t].A + i * CD, c->gBn + i * maxb,
                        c->gAn + i * maxcd, ch, ch + 1);
}

/* Second part: from dE/dA through the reshape, the first-layer skip_tp, the scaling and `linear` to
 * dE/dM (gM) and the density gradient (grho). */
CGQ_INTERNAL void mace_step_node_backward_post(const mace_ctx *c, int t, int64_t i, double *tmp) {
    const cgq_model *m = c->m;
    const cgq_mace_layer *ly = &m->layers[t];
    const mace_layer_state *s = &c->ls[t];
    const int dM = ly->conv_tp.out.dim, dT = ly->target.dim;
    const int maxcd = mace_max_coupling_dim(m);
    double *gApre = tmp, *gMl = tmp + dT;
    mace_reshape_from_cd(ly, c->gAn + i * maxcd, gApre);
    double onehot[CGQ_MAX_SPECIES] = {0};
    onehot[c->species[i]] = 1.0;
    if (!ly->residual) {
        memset(gMl, 0, sizeof(double) * (size_t)dT);
        cgq_tp_node_backward_x1(&ly->skip_tp, onehot, gApre, gMl);
    } else {
        memcpy(gMl, gApre, sizeof(double) * (size_t)dT);
    }
    const double rho1 = s->rho[i] + 1.0;
    const double scale = ly->density ? 1.0 / rho1 : 1.0 / ly->avg_num_neighbors;
    if (ly->density) {
        double acc = 0.0;
        for (int j = 0; j < dT; j++) acc += gMl[j] * s->Mlin[i * dT + j];
        c->grho[i] = -acc / rho1;
    }
    for (int j = 0; j < dT; j++) gMl[j] *= scale;
    memset(c->gM + i * dM, 0, sizeof(double) * (size_t)dM);
    cgq_linear_backward(&ly->linear, gMl, c->gM + i * dM);
}

/* The whole node side in reverse for node i (CPU). */
CGQ_INTERNAL void mace_step_node_backward(const mace_ctx *c, int t, int64_t i, double *tmp) {
    mace_step_node_backward_pre(c, t, i, tmp);
    for (int ch = 0; ch < c->m->layers[t].channels; ch++) mace_step_product_channel_backward(c, t, i, ch);
    mace_step_node_backward_post(c, t, i, tmp);
}

/* Last part of an edge's reverse pass, shared by the backends: from dE/d(edge features) gef, dE/d(cutoff)
 * gcut and dE/dY gY to dE/dvec (+=), through the Bessel basis, the Agnesi transform, the polynomial cutoff,
 * the spherical harmonics (degrees <= lmax, nY = (lmax + 1)^2: the model's; the GPU passes them as constants, so
 * that its arrays stay in registers) and, where pair is set (layer 0's tail on the CPU; the GPU adds it beside the
 * forward, k_energy_start), the ZBL pair term; gr: dE/dr found elsewhere (the GPU's radial tables), added with
 * them. B, dB: n_bessel each. */
CGQ_INTERNAL void mace_edge_tail_sh(const mace_ctx *c, int64_t i, int64_t e, const double *gef, double gcut, double gr,
                                    const double *gY, double *B, double *dB, int lmax, int pair) {
    const cgq_model *m = c->m;
    const int nb = c->nb;
    const double *v = c->vec + 3 * e, r = c->r[e];
    double dcut, drb = 1.0;
    const double cut = cgq_poly_cutoff(m->cutoff_p, m->cutoff_r_max, r, &dcut);
    const int su = c->species[c->sender[e]], sv = c->species[i];
    double gb = 0.0; /* dE/d(rb) */
    if (gef) {       /* NULL: no gradient through the edge features (the GPU's radial tables take dE/dr themselves) */
        const double rb = m->agnesi ? cgq_agnesi(m, su, sv, r, &drb) : r; /* Bessel argument */
        cgq_bessel(m, rb, B, dB);
        for (int n = 0; n < nb; n++) {
            gb += gef[n] * dB[n] * (m->apply_cutoff ? cut : 1.0);
            if (m->apply_cutoff) gcut += gef[n] * B[n];
        }
    }
    gr += gb * drb + gcut * dcut;
    if (pair && m->zbl) { /* pair repulsion, once */
        double dz;
        cgq_zbl_edge(m, su, sv, r, &dz);
        gr += m->scale * dz;
    }
    double gv[3];
    cgq_sh_vjp(lmax, v, gY, gv);
    double *ge = c->edge_grad + 3 * e;
    for (int k = 0; k < 3; k++) ge[k] += gr * v[k] / r + gv[k];
}

CGQ_INTERNAL void mace_edge_tail(const mace_ctx *c, int t, int64_t i, int64_t e, const double *gef, double gcut,
                                 const double *gY, double *B, double *dB) {
    mace_edge_tail_sh(c, i, e, gef, gcut, 0.0, gY, B, dB, c->m->lmax_sh, t == 0);
}

/* dE/dv of edge e (receiver i) of layer t through Y, the radial MLP, the density (+=); each edge is
 * independent, so this runs per edge on the GPU and per receiver row on the CPU. */
CGQ_INTERNAL void mace_edge_backward_one(const mace_ctx *c, int t, int64_t i, int64_t e, mace_edge_scratch *esp) {
    const cgq_model *m = c->m;
    const cgq_mace_layer *ly = &m->layers[t];
    const mace_layer_state *s = &c->ls[t];
    const int dhu = ly->linear_up.out.dim, dM = ly->conv_tp.out.dim, nb = c->nb, nY = c->nY;
    const int64_t wn = ly->conv_tp.weight_numel;
    mace_edge_scratch es = *esp;
    mace_edge_weights(c, t, e, &es, 0);
    memset(es.gw, 0, sizeof(double) * (size_t)wn);
    memset(es.gY, 0, sizeof(double) * (size_t)nY);
    cgq_tp_conv_backward(&ly->conv_tp, s->hu + (int64_t)c->sender[e] * dhu, c->Y + e * nY, es.w, c->gM + i * dM, NULL,
                         es.gY, es.gw);
    double gcut = 0.0;
    if (!m->apply_cutoff) { /* w = mlp * cut */
        cgq_fcnet_forward(&ly->radial_mlp, c->ef + e * nb, es.wraw, es.own_cache);
        for (int64_t k = 0; k < wn; k++) {
            gcut += es.gw[k] * es.wraw[k];
            es.gw[k] *= c->cut[e];
        }
    }
    double *gef = es.gef;
    cgq_fcnet_backward(&ly->radial_mlp, c->ef + e * nb, es.cache, es.gw, gef, es.fc_scratch);
    if (ly->density) {
        double d;
        mace_edge_density(c, ly, e, &es, &d);
        const double th = tanh(d * d);
        double grho_e = c->grho[i];
        if (!m->apply_cutoff) {
            gcut += grho_e * th;
            grho_e *= c->cut[e];
        }
        double gd = grho_e * (1.0 - th * th) * 2.0 * d;
        double *gef2 = es.gef + nb;
        cgq_fcnet_backward(&ly->density_fn, c->ef + e * nb, es.dcache, &gd, gef2, es.fc_scratch);
        for (int n = 0; n < nb; n++) gef[n] += gef2[n];
    }
    mace_edge_tail(c, t, i, e, gef, gcut, es.gY, es.B, es.dB);
}

CGQ_INTERNAL void mace_step_edge_backward(const mace_ctx *c, int t, int64_t i, double *scratch) {
    mace_edge_scratch es;
    mace_scratch_init(&es, scratch, c->m, &c->m->layers[t]);
    for (int64_t e = c->row_ptr[i]; e < c->row_ptr[i + 1]; e++) mace_edge_backward_one(c, t, i, e, &es);
}

CGQ_INTERNAL void mace_step_edge_backward_edge(const mace_ctx *c, int t, int64_t e, double *scratch) {
    mace_edge_scratch es;
    mace_scratch_init(&es, scratch, c->m, &c->m->layers[t]);
    mace_edge_backward_one(c, t, c->erecv[e], e, &es);
}

/* Sender row j of layer t: dE/d hu[j] summed over its outgoing edges (edge order by sender). */
CGQ_INTERNAL void mace_step_sender_backward(const mace_ctx *c, int t, int64_t j, double *scratch) {
    const cgq_model *m = c->m;
    const cgq_mace_layer *ly = &m->layers[t];
    const int dhu = ly->linear_up.out.dim, dM = ly->conv_tp.out.dim;
    mace_edge_scratch es;
    mace_scratch_init(&es, scratch, m, ly);
    double *gj = c->ghu + j * dhu;
    memset(gj, 0, sizeof(double) * (size_t)dhu);
    for (int64_t q = c->srow[j]; q < c->srow[j + 1]; q++) {
        const int64_t e = c->sedge[q];
        mace_edge_weights(c, t, e, &es, 0);
        cgq_tp_conv_backward(&ly->conv_tp, c->ls[t].hu + j * dhu, c->Y + e * c->nY, es.w,
                             c->gM + (int64_t)c->erecv[e] * dM, gj, NULL, NULL);
    }
}

/* Edge-parallel reverse pass: edge e's contribution to dE/d hu[sender], summed per sender row next. */
CGQ_INTERNAL void mace_step_sender_edge(const mace_ctx *c, int t, int64_t e, double *scratch) {
    const cgq_mace_layer *ly = &c->m->layers[t];
    const int dhu = ly->linear_up.out.dim, dM = ly->conv_tp.out.dim;
    mace_edge_scratch es;
    mace_scratch_init(&es, scratch, c->m, ly);
    mace_edge_weights(c, t, e, &es, 0);
    double *gx = c->gx1e + e * dhu;
    memset(gx, 0, sizeof(double) * (size_t)dhu);
    cgq_tp_conv_backward(&ly->conv_tp, c->ls[t].hu + (int64_t)c->sender[e] * dhu, c->Y + e * c->nY, es.w,
                         c->gM + (int64_t)c->erecv[e] * dM, gx, NULL, NULL);
}

CGQ_INTERNAL void mace_step_sender_sum(const mace_ctx *c, int t, int64_t j) {
    const int dhu = c->m->layers[t].linear_up.out.dim;
    double *gj = c->ghu + j * dhu;
    memset(gj, 0, sizeof(double) * (size_t)dhu);
    for (int64_t q = c->srow[j]; q < c->srow[j + 1]; q++) {
        const double *gx = c->gx1e + (int64_t)c->sedge[q] * dhu;
        for (int k = 0; k < dhu; k++) gj[k] += gx[k];
    }
}

/* gh_prev[j] += linear_up^T ghu[j] (after the reverse exchange moved ghost rows to their owners) */
CGQ_INTERNAL void mace_step_up_backward(const mace_ctx *c, int t, int64_t j) {
    const cgq_mace_layer *ly = &c->m->layers[t];
    cgq_linear_backward(&ly->linear_up, c->ghu + j * ly->linear_up.out.dim, c->gh_prev + j * mace_layer_in_dim(c->m, t));
}

#endif
