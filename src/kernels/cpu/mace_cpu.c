/* mace_cpu.c: MACE forward and reverse pass on the CPU in float64, OpenMP over nodes.
 * Every reduction is owned by one node (receiver rows for messages, sender rows for the transposed
 * gradient), so results do not depend on the number of threads. Per-edge TP weights are recomputed
 * from the radial MLP where needed instead of being stored (they are the largest per-edge array). */
#include "kernels/cpu/mace_cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/fcnet.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/radial.h"
#include "kernels/cpu/sh.h"
#include "kernels/cpu/symmetric_contraction.h"
#include "kernels/cpu/tensor_product.h"

void cgq_arena_free(cgq_arena *a) {
    free(a->buf);
    a->buf = NULL;
    a->cap = 0;
}

/* Per-layer node arrays kept from the forward for the backward. */
typedef struct layer_state {
    double *hu, *M, *rho, *Mlin, *Apre, *A, *B, *sc, *h;
} layer_state;

typedef struct plan {
    size_t total;
} plan;

static double *carve(double **p, size_t n, plan *pl) {
    double *r = *p;
    if (r) *p += n;
    pl->total += n;
    return r;
}

static int max_i(int a, int b) { return a > b ? a : b; }

/* Edge geometry shared by all layers. */
typedef struct edge_geom {
    int nY, nb;
    double *Y, *ef, *cut, *r; /* [E][nY], [E][nb], [E], [E] */
} edge_geom;

/* Per-thread scratch for one edge of layer ly. */
typedef struct edge_scratch {
    double *w, *gw, *cache, *fc_scratch, *gef, *dcache, *B, *dB, *dY, *gY, *wraw;
    double *own_w, *own_cache; /* the thread's buffers; w/cache point here or into the edge cache */
} edge_scratch;

/* Radial-MLP outputs and activations of every edge of every layer, kept from the forward pass when
 * they fit in this budget, so the backward does not recompute them (about 2.5x fewer MLP passes). */
#define CGQ_EDGE_CACHE_BUDGET_BYTES ((size_t)1 << 30)

typedef struct edge_cache {
    double *w[CGQ_MAX_LAYERS], *act[CGQ_MAX_LAYERS]; /* NULL when not cached */
} edge_cache;

/* Point the scratch at edge e's cached MLP results (if cached) and report whether they are there. */
static int use_cached(edge_scratch *s, const edge_cache *ec, int t, const cgq_mace_layer *ly, int64_t e) {
    if (!ec->w[t]) {
        s->w = s->own_w;
        s->cache = s->own_cache;
        return 0;
    }
    s->w = ec->w[t] + e * ly->conv_tp.weight_numel;
    s->cache = ec->act[t] + e * cgq_fcnet_cache_size(&ly->radial_mlp);
    return 1;
}

static size_t edge_scratch_size(const cgq_model *m) {
    size_t n = 0;
    for (int t = 0; t < m->n_layers; t++) {
        const cgq_mace_layer *ly = &m->layers[t];
        size_t s = 2 * (size_t)ly->conv_tp.weight_numel + (size_t)cgq_fcnet_cache_size(&ly->radial_mlp) +
                   2 * (size_t)cgq_fcnet_max_width(&ly->radial_mlp) + (size_t)cgq_fcnet_cache_size(&ly->density_fn) +
                   2 * (size_t)max_i(cgq_fcnet_max_width(&ly->density_fn), 1);
        n = s > n ? s : n;
    }
    return 2 * n + 4 * (size_t)m->n_bessel + 4 * 16 * 3 + 64;
}

static void edge_scratch_init(edge_scratch *s, double *base, const cgq_model *m, const cgq_mace_layer *ly) {
    double *p = base;
    s->own_w = s->w = p, p += ly->conv_tp.weight_numel;
    s->wraw = p, p += ly->conv_tp.weight_numel;
    s->gw = p, p += ly->conv_tp.weight_numel;
    s->own_cache = s->cache = p, p += cgq_fcnet_cache_size(&ly->radial_mlp);
    s->fc_scratch = p, p += 2 * max_i(cgq_fcnet_max_width(&ly->radial_mlp), cgq_fcnet_max_width(&ly->density_fn));
    s->dcache = p, p += cgq_fcnet_cache_size(&ly->density_fn);
    s->gef = p, p += 2 * m->n_bessel;
    s->B = p, p += m->n_bessel;
    s->dB = p, p += m->n_bessel;
    s->dY = p, p += 16 * 3;
    s->gY = p, p += 16;
}

/* Radial MLP weights of edge e (times the cutoff when the model applies it to the weights). */
static void edge_weights(const cgq_model *m, const cgq_mace_layer *ly, const edge_geom *eg, int64_t e,
                         edge_scratch *s) {
    cgq_fcnet_forward(&ly->radial_mlp, eg->ef + e * eg->nb, s->w, s->cache);
    if (!m->apply_cutoff)
        for (int64_t k = 0; k < ly->conv_tp.weight_numel; k++) s->w[k] *= eg->cut[e];
}

static double edge_density(const cgq_model *m, const cgq_mace_layer *ly, const edge_geom *eg, int64_t e,
                           edge_scratch *s, double *d_out) {
    double d;
    cgq_fcnet_forward(&ly->density_fn, eg->ef + e * eg->nb, &d, s->dcache);
    double rho = tanh(d * d);
    if (!m->apply_cutoff) rho *= eg->cut[e];
    *d_out = d;
    return rho;
}

static void reshape_to_cd(const cgq_mace_layer *ly, const double *x, double *A) {
    const int D = ly->coupling_dim;
    int doff = 0;
    for (int k = 0; k < ly->target.n; k++) {
        const cgq_irrep_block *b = &ly->target.b[k];
        const int d = 2 * b->l + 1;
        for (int c = 0; c < b->mul; c++)
            for (int mm = 0; mm < d; mm++) A[c * D + doff + mm] = x[b->offset + c * d + mm];
        doff += d;
    }
}

static void reshape_from_cd(const cgq_mace_layer *ly, const double *A, double *x) {
    const int D = ly->coupling_dim;
    int doff = 0;
    for (int k = 0; k < ly->target.n; k++) {
        const cgq_irrep_block *b = &ly->target.b[k];
        const int d = 2 * b->l + 1;
        for (int c = 0; c < b->mul; c++)
            for (int mm = 0; mm < d; mm++) x[b->offset + c * d + mm] = A[c * D + doff + mm];
        doff += d;
    }
}

/* Readout r of one node: returns its scalar output (head column); hidden activations kept in z. */
static double readout_forward(const cgq_readout *ro, const double *h, double *z, double *tmp) {
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

/* gh += d(out)/dh * gscale */
static void readout_backward(const cgq_readout *ro, const double *z, double gscale, double *gh, double *tmp) {
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

static int readout_hidden(const cgq_readout *ro) {
    return ro->kind == CGQ_READOUT_LINEAR ? 0 : 2 * ro->linear_1.out.dim;
}

cgq_status cgq_mace_cpu_evaluate(const cgq_model *m, const cgq_graph *g, const cgq_exchange *xc, double *energy,
                                 double *node_energy, double *edge_grad, cgq_arena *arena) {
    /* N local nodes (receivers, energies), NA all nodes (local then ghosts: possible senders) */
    const int64_t N = g->n_local, NA = g->n_nodes, E = g->n_edges;
    const int L = m->n_layers, nY = (m->lmax_sh + 1) * (m->lmax_sh + 1), nb = m->n_bessel, S = m->n_species;
    const int want_grad = edge_grad != NULL;

    /* ---- plan the arena: first pass counts, second carves ---- */
    layer_state ls[CGQ_MAX_LAYERS];
    double *emb, *gh_a, *gh_b, *gM, *ghu, *grho, *ro_z[CGQ_MAX_LAYERS], *node_out;
    int64_t *srow, *sfill;
    int32_t *sedge, *erecv;
    edge_geom eg = {nY, nb, NULL, NULL, NULL, NULL};
    edge_cache ec = {{NULL}, {NULL}};
    size_t cache_doubles = 0;
    for (int t = 0; t < L; t++)
        cache_doubles += (size_t)E * (size_t)(m->layers[t].conv_tp.weight_numel +
                                               cgq_fcnet_cache_size(&m->layers[t].radial_mlp));
    const int cache_edges = edge_grad && cache_doubles * sizeof(double) <= CGQ_EDGE_CACHE_BUDGET_BYTES;
    int maxdim = m->node_embedding.out.dim, maxconv = 1, maxhu = 1;
    for (int t = 0; t < L; t++) {
        const cgq_mace_layer *ly = &m->layers[t];
        maxdim = max_i(maxdim, max_i(ly->product_linear.out.dim, max_i(ly->target.dim, ly->product_out.dim)));
        maxdim = max_i(maxdim, ly->skip_tp.out.dim);
        maxconv = max_i(maxconv, ly->conv_tp.out.dim);
        maxhu = max_i(maxhu, ly->linear_up.out.dim);
    }
    const size_t idx_doubles = ((size_t)(2 * NA + 1) * sizeof(int64_t) + 2 * (size_t)E * sizeof(int32_t)) / sizeof(double) + 2;
    for (int pass = 0; pass < 2; pass++) {
        plan pl = {0};
        double *p = pass ? arena->buf : NULL;
        emb = carve(&p, (size_t)NA * m->node_embedding.out.dim, &pl);
        for (int t = 0; t < L; t++) {
            const cgq_mace_layer *ly = &m->layers[t];
            layer_state *s = &ls[t];
            s->hu = carve(&p, (size_t)NA * ly->linear_up.out.dim, &pl);
            s->M = carve(&p, (size_t)N * ly->conv_tp.out.dim, &pl);
            s->rho = carve(&p, (size_t)N, &pl);
            s->Mlin = carve(&p, (size_t)N * ly->target.dim, &pl);
            s->Apre = carve(&p, (size_t)N * ly->target.dim, &pl);
            s->A = carve(&p, (size_t)N * ly->channels * ly->coupling_dim, &pl);
            s->B = carve(&p, (size_t)N * ly->product_out.dim, &pl);
            s->sc = carve(&p, (size_t)N * ly->skip_tp.out.dim, &pl);
            s->h = carve(&p, (size_t)N * ly->product_linear.out.dim, &pl);
        }
        for (int r = 0; r < m->n_readouts; r++) ro_z[r] = carve(&p, (size_t)N * readout_hidden(&m->readouts[r]), &pl);
        node_out = carve(&p, (size_t)N, &pl);
        for (int t = 0; cache_edges && t < L; t++) {
            ec.w[t] = carve(&p, (size_t)E * m->layers[t].conv_tp.weight_numel, &pl);
            ec.act[t] = carve(&p, (size_t)E * cgq_fcnet_cache_size(&m->layers[t].radial_mlp), &pl);
        }
        eg.Y = carve(&p, (size_t)E * nY, &pl);
        eg.ef = carve(&p, (size_t)E * nb, &pl);
        eg.cut = carve(&p, (size_t)E, &pl);
        eg.r = carve(&p, (size_t)E, &pl);
        gh_a = carve(&p, want_grad ? (size_t)N * maxdim : 0, &pl);
        gh_b = carve(&p, want_grad ? (size_t)N * maxdim : 0, &pl);
        gM = carve(&p, want_grad ? (size_t)N * maxconv : 0, &pl);
        ghu = carve(&p, want_grad ? (size_t)NA * maxhu : 0, &pl);
        grho = carve(&p, want_grad ? (size_t)N : 0, &pl);
        double *idx = carve(&p, want_grad ? idx_doubles : 0, &pl);
        srow = (int64_t *)idx;
        sfill = idx ? srow + NA + 1 : NULL;
        sedge = idx ? (int32_t *)(sfill + NA) : NULL;
        erecv = idx ? sedge + E : NULL;
        if (pass == 0 && pl.total > arena->cap) {
            double *nbuf = realloc(arena->buf, sizeof(double) * (pl.total + pl.total / 16 + 1));
            if (!nbuf)
                return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory: the CPU evaluator needs %.1f MB of work memory "
                                "for %lld atoms and %lld edges", 8e-6 * (double)pl.total, (long long)N, (long long)E);
            arena->buf = nbuf;
            arena->cap = pl.total + pl.total / 16 + 1;
        }
    }

    const size_t esz = edge_scratch_size(m);
    int maxro = 1;
    for (int r = 0; r < m->n_readouts; r++)
        maxro = max_i(maxro, 3 * m->readouts[r].linear_1.out.dim + m->readouts[r].linear_2.out.dim + m->readouts[r].linear_1.out.dim);
    const size_t nsz = (size_t)(4 * maxdim + S + maxro + 16);
    volatile int oom = 0;

    /* ---- edge geometry ---- */
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < E; e++) {
        const double *v = g->vec + 3 * e;
        const double r = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
        eg.r[e] = r;
        cgq_sh_eval(m->lmax_sh, v, eg.Y + e * nY, NULL);
        double B[64];
        cgq_bessel(m, r, B, NULL);
        const double cut = cgq_poly_cutoff(m->cutoff_p, m->cutoff_r_max, r, NULL);
        eg.cut[e] = cut;
        for (int n = 0; n < nb; n++) eg.ef[e * nb + n] = m->apply_cutoff ? B[n] * cut : B[n];
    }

    /* ---- forward ---- */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < NA; i++) {
        double onehot[CGQ_MAX_SPECIES] = {0};
        onehot[g->species[i]] = 1.0;
        cgq_linear_forward(&m->node_embedding, onehot, emb + i * m->node_embedding.out.dim);
    }
    for (int t = 0; t < L; t++) {
        const cgq_mace_layer *ly = &m->layers[t];
        layer_state *s = &ls[t];
        const int din = t ? m->layers[t - 1].product_linear.out.dim : m->node_embedding.out.dim;
        const double *hin = t ? ls[t - 1].h : emb;
        const int dhu = ly->linear_up.out.dim, dM = ly->conv_tp.out.dim, dT = ly->target.dim;
        const int dB = ly->product_out.dim, dH = ly->product_linear.out.dim, dsc = ly->skip_tp.out.dim;
        const int CD = ly->channels * ly->coupling_dim;
        /* layer 0 reads the embedding, known for ghosts too; later layers get ghost rows by exchange */
        const int64_t n_up = t == 0 ? NA : N;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n_up; i++) {
            cgq_linear_forward(&ly->linear_up, hin + i * din, s->hu + i * dhu);
            if (ly->residual && i < N) {
                double onehot[CGQ_MAX_SPECIES] = {0};
                onehot[g->species[i]] = 1.0;
                cgq_tp_node_forward(&ly->skip_tp, hin + i * din, onehot, s->sc + i * dsc);
            }
        }
        if (t > 0 && xc) CGQ_TRY(xc->forward(xc->ctx, s->hu, dhu));
#pragma omp parallel
        {
            double *scr = malloc(sizeof(double) * (esz + nsz));
            if (!scr) oom = 1;
            edge_scratch es;
            if (scr) edge_scratch_init(&es, scr, m, ly);
#pragma omp for schedule(dynamic, 64)
            for (int64_t i = 0; i < N; i++) {
                if (!scr) continue;
                double *Mi = s->M + i * dM, rho = 0.0;
                memset(Mi, 0, sizeof(double) * (size_t)dM);
                for (int64_t e = g->row_ptr[i]; e < g->row_ptr[i + 1]; e++) {
                    use_cached(&es, &ec, t, ly, e);
                    edge_weights(m, ly, &eg, e, &es);
                    cgq_tp_conv_forward(&ly->conv_tp, s->hu + (int64_t)g->sender[e] * dhu, eg.Y + e * nY, es.w, Mi);
                    if (ly->density) {
                        double d;
                        rho += edge_density(m, ly, &eg, e, &es, &d);
                    }
                }
                s->rho[i] = rho;
                double *tmp = scr + esz;
                const double scale = ly->density ? 1.0 / (rho + 1.0) : 1.0 / ly->avg_num_neighbors;
                cgq_linear_forward(&ly->linear, Mi, tmp);
                double *Ml = s->Mlin + i * dT;
                for (int j = 0; j < dT; j++) Ml[j] = tmp[j] * scale;
                double onehot[CGQ_MAX_SPECIES] = {0};
                onehot[g->species[i]] = 1.0;
                if (!ly->residual) cgq_tp_node_forward(&ly->skip_tp, Ml, onehot, s->Apre + i * dT);
                else memcpy(s->Apre + i * dT, Ml, sizeof(double) * (size_t)dT);
                reshape_to_cd(ly, s->Apre + i * dT, s->A + i * CD);
                cgq_symcon_forward(ly, ly->agnostic ? 0 : g->species[i], s->A + i * CD, s->B + i * dB);
                cgq_linear_forward(&ly->product_linear, s->B + i * dB, s->h + i * dH);
                if (ly->use_sc && ly->residual)
                    for (int j = 0; j < dH; j++) s->h[i * dH + j] += s->sc[i * dsc + j];
            }
            free(scr);
        }
        if (oom) return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory for per-thread scratch");
    }
    /* readouts and energies */
    double total = 0.0;
#pragma omp parallel
    {
        double *tmp = malloc(sizeof(double) * nsz);
        if (!tmp) oom = 1;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < N; i++) {
            if (!tmp) continue;
            double e_inter = 0.0;
            for (int r = 0; r < m->n_readouts; r++) {
                const cgq_readout *ro = &m->readouts[r];
                const int dH = m->layers[ro->layer].product_linear.out.dim;
                e_inter += readout_forward(ro, ls[ro->layer].h + i * dH, ro_z[r] + i * readout_hidden(ro), tmp);
            }
            node_out[i] = m->atomic_energies[g->species[i]] + m->scale * e_inter + m->shift;
        }
        free(tmp);
    }
    if (oom) return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory for per-thread scratch");
    for (int64_t i = 0; i < N; i++) total += node_out[i]; /* fixed order: deterministic */
    *energy = total;
    if (node_energy) memcpy(node_energy, node_out, sizeof(double) * (size_t)N);
    if (!want_grad) return CGQ_STATUS_OK;

    /* ---- backward ---- */
    /* edges grouped by sender (stable counting sort) for the transposed message gradient */
    memset(srow, 0, sizeof(int64_t) * (size_t)(NA + 1));
    for (int64_t e = 0; e < E; e++) srow[g->sender[e] + 1]++;
    for (int64_t i = 0; i < NA; i++) srow[i + 1] += srow[i];
    memcpy(sfill, srow, sizeof(int64_t) * (size_t)NA);
    for (int64_t e = 0; e < E; e++) sedge[sfill[g->sender[e]]++] = (int32_t)e;
    for (int64_t i = 0; i < N; i++)
        for (int64_t e = g->row_ptr[i]; e < g->row_ptr[i + 1]; e++) erecv[e] = (int32_t)i;
    memset(edge_grad, 0, sizeof(double) * 3 * (size_t)E);
    double *gh = gh_a, *gh_prev = gh_b;
    /* gradient of E w.r.t. every layer's output starts from the readouts reading it */
    for (int t = L - 1; t >= 0; t--) {
        const cgq_mace_layer *ly = &m->layers[t];
        layer_state *s = &ls[t];
        const int din = t ? m->layers[t - 1].product_linear.out.dim : m->node_embedding.out.dim;
        const int dhu = ly->linear_up.out.dim, dM = ly->conv_tp.out.dim, dT = ly->target.dim;
        const int dB = ly->product_out.dim, dH = ly->product_linear.out.dim;
        const int CD = ly->channels * ly->coupling_dim;
        if (t == L - 1) memset(gh, 0, sizeof(double) * (size_t)N * dH);
        /* readouts of this layer */
#pragma omp parallel
        {
            double *tmp = malloc(sizeof(double) * nsz * 2);
            if (!tmp) oom = 1;
#pragma omp for schedule(static)
            for (int64_t i = 0; i < N; i++) {
                if (!tmp) continue;
                for (int r = 0; r < m->n_readouts; r++) {
                    const cgq_readout *ro = &m->readouts[r];
                    if (ro->layer != t) continue;
                    readout_backward(ro, ro_z[r] + i * readout_hidden(ro), m->scale, gh + i * dH, tmp);
                }
            }
            free(tmp);
        }
        if (oom) return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory for per-thread scratch");
        /* node side: product, linear, scaling -> gM, grho; gh_prev from the skip path */
        memset(gh_prev, 0, sizeof(double) * (size_t)N * din);
#pragma omp parallel
        {
            double *tmp = malloc(sizeof(double) * (size_t)(4 * maxdim + CD + 16));
            if (!tmp) oom = 1;
#pragma omp for schedule(static)
            for (int64_t i = 0; i < N; i++) {
                if (!tmp) continue;
                const double *ghi = gh + i * dH;
                double *gB = tmp, *gA = tmp + maxdim, *gApre = gA + CD, *gMl = gApre + maxdim;
                double onehot[CGQ_MAX_SPECIES] = {0};
                onehot[g->species[i]] = 1.0;
                if (ly->use_sc && ly->residual) cgq_tp_node_backward_x1(&ly->skip_tp, onehot, ghi, gh_prev + i * din);
                memset(gB, 0, sizeof(double) * (size_t)dB);
                cgq_linear_backward(&ly->product_linear, ghi, gB);
                memset(gA, 0, sizeof(double) * (size_t)CD);
                cgq_symcon_backward(ly, ly->agnostic ? 0 : g->species[i], s->A + i * CD, gB, gA);
                reshape_from_cd(ly, gA, gApre);
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
                    grho[i] = -acc / rho1;
                }
                for (int j = 0; j < dT; j++) gMl[j] *= scale;
                memset(gM + i * dM, 0, sizeof(double) * (size_t)dM);
                cgq_linear_backward(&ly->linear, gMl, gM + i * dM);
            }
            free(tmp);
        }
        if (oom) return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory for per-thread scratch");
        /* receiver rows: dE/dv of each edge through Y, the radial MLP, the density */
#pragma omp parallel
        {
            double *scr = malloc(sizeof(double) * esz);
            if (!scr) oom = 1;
            edge_scratch es;
            if (scr) edge_scratch_init(&es, scr, m, ly);
#pragma omp for schedule(dynamic, 64)
            for (int64_t i = 0; i < N; i++) {
                if (!scr) continue;
                for (int64_t e = g->row_ptr[i]; e < g->row_ptr[i + 1]; e++) {
                    const double *v = g->vec + 3 * e, r = eg.r[e];
                    if (!use_cached(&es, &ec, t, ly, e)) edge_weights(m, ly, &eg, e, &es);
                    memset(es.gw, 0, sizeof(double) * (size_t)ly->conv_tp.weight_numel);
                    memset(es.gY, 0, sizeof(double) * (size_t)nY);
                    cgq_tp_conv_backward(&ly->conv_tp, s->hu + (int64_t)g->sender[e] * dhu, eg.Y + e * nY, es.w,
                                         gM + i * dM, NULL, es.gY, es.gw);
                    double gcut = 0.0;
                    if (!m->apply_cutoff) {
                        /* w = mlp * cut: recover mlp = w / cut through the cache-free route */
                        double *wraw = es.wraw;
                        cgq_fcnet_forward(&ly->radial_mlp, eg.ef + e * nb, wraw, es.own_cache);
                        for (int64_t k = 0; k < ly->conv_tp.weight_numel; k++) {
                            gcut += es.gw[k] * wraw[k];
                            es.gw[k] *= eg.cut[e];
                        }
                    }
                    double *gef = es.gef;
                    cgq_fcnet_backward(&ly->radial_mlp, eg.ef + e * nb, es.cache, es.gw, gef, es.fc_scratch);
                    if (ly->density) {
                        double d, gd;
                        const double rho_e = edge_density(m, ly, &eg, e, &es, &d);
                        const double th = tanh(d * d);
                        double grho_e = grho[i];
                        if (!m->apply_cutoff) {
                            gcut += grho_e * th;
                            grho_e *= eg.cut[e];
                        }
                        (void)rho_e;
                        gd = grho_e * (1.0 - th * th) * 2.0 * d;
                        double *gef2 = es.gef + nb;
                        cgq_fcnet_backward(&ly->density_fn, eg.ef + e * nb, es.dcache, &gd, gef2, es.fc_scratch);
                        for (int n = 0; n < nb; n++) gef[n] += gef2[n];
                    }
                    /* ef = B(r) [* cut(r)] */
                    double dcut;
                    const double cut = cgq_poly_cutoff(m->cutoff_p, m->cutoff_r_max, r, &dcut);
                    cgq_bessel(m, r, es.B, es.dB);
                    double gr = 0.0;
                    for (int n = 0; n < nb; n++) {
                        if (m->apply_cutoff) {
                            gr += gef[n] * (es.dB[n] * cut);
                            gcut += gef[n] * es.B[n];
                        } else {
                            gr += gef[n] * es.dB[n];
                        }
                    }
                    gr += gcut * dcut;
                    double Yt[16];
                    cgq_sh_eval(m->lmax_sh, v, Yt, es.dY);
                    double *ge = edge_grad + 3 * e;
                    for (int k = 0; k < 3; k++) {
                        double acc = gr * v[k] / r;
                        for (int j = 0; j < nY; j++) acc += es.gY[j] * es.dY[3 * j + k];
                        ge[k] += acc;
                    }
                }
            }
            free(scr);
        }
        if (oom) return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory for per-thread scratch");
        if (t == 0) break; /* the embedding does not depend on positions */
        /* sender rows: gradient of the sender features hu, then through linear_up */
#pragma omp parallel
        {
            double *scr = malloc(sizeof(double) * esz);
            if (!scr) oom = 1;
            edge_scratch es;
            if (scr) edge_scratch_init(&es, scr, m, ly);
#pragma omp for schedule(dynamic, 64)
            for (int64_t j = 0; j < NA; j++) {
                if (!scr) continue;
                double *gj = ghu + j * dhu;
                memset(gj, 0, sizeof(double) * (size_t)dhu);
                for (int64_t q = srow[j]; q < srow[j + 1]; q++) {
                    const int64_t e = sedge[q];
                    if (!use_cached(&es, &ec, t, ly, e)) edge_weights(m, ly, &eg, e, &es);
                    cgq_tp_conv_backward(&ly->conv_tp, s->hu + j * dhu, eg.Y + e * nY, es.w, gM + (int64_t)erecv[e] * dM,
                                         gj, NULL, NULL);
                }
            }
            free(scr);
        }
        if (oom) return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory for per-thread scratch");
        /* gradients that landed on ghost senders belong to their owners */
        if (xc) CGQ_TRY(xc->reverse(xc->ctx, ghu, dhu));
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < N; j++) cgq_linear_backward(&ly->linear_up, ghu + j * dhu, gh_prev + j * din);
        double *swap = gh;
        gh = gh_prev;
        gh_prev = swap;
    }
    return CGQ_STATUS_OK;
}
