/* nequip_load.c: reads and validates the NequIP groups of a cgequi model file (docs/model-format.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/nequip.h"

static cgq_status open_group(const cgq_h5 *f, hid_t loc, const char *name, const char *where, char *path, size_t n,
                             hid_t *g) {
    snprintf(path, n, "%.400s/%.100s", where, name);
    return cgq_h5_group(f, loc, name, where, g);
}

static cgq_status load_mlp_in(const cgq_h5 *f, hid_t g, const char *where, cgq_nq_mlp *mlp) {
    int64_t nl = 0;
    char act[32];
    CGQ_TRY(cgq_h5_attr_int(f, g, "num_layers", where, &nl));
    if (nl < 1 || nl > CGQ_MAX_FC_LAYERS)
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: %s has %lld layers (1..%d supported)", f->path, where,
                        (long long)nl, CGQ_MAX_FC_LAYERS);
    mlp->n_layers = (int)nl;
    CGQ_TRY(cgq_h5_attr_string(f, g, "act", where, act, sizeof act));
    CGQ_TRY(cgq_act_from_name(f, where, act, &mlp->act));
    CGQ_TRY(cgq_h5_attr_double(f, g, "act_cst", where, &mlp->act_cst));
    double *alphas = NULL;
    CGQ_TRY(cgq_h5_read_double(f, g, "alphas", where, 1, (int64_t[]){nl}, &alphas, NULL, NULL));
    for (int k = 0; k < mlp->n_layers; k++) mlp->alpha[k] = alphas[k];
    free(alphas);
    for (int k = 0; k < mlp->n_layers; k++) {
        char name[32];
        int64_t dims[CGQ_H5_MAX_RANK];
        snprintf(name, sizeof name, "layer%d", k);
        CGQ_TRY(cgq_h5_read_double(f, g, name, where, 2, (int64_t[]){k ? mlp->h[k] : -1, -1}, &mlp->W[k], NULL, dims));
        mlp->h[k] = (int)dims[0];
        mlp->h[k + 1] = (int)dims[1];
        /* nequip multiplies the weight by alpha before the product: same rounding here */
        for (int64_t q = 0; q < dims[0] * dims[1]; q++) mlp->W[k][q] *= mlp->alpha[k];
    }
    return CGQ_STATUS_OK;
}

static cgq_status load_mlp(const cgq_h5 *f, hid_t loc, const char *name, const char *where, cgq_nq_mlp *mlp) {
    char path[512];
    hid_t g;
    CGQ_TRY(open_group(f, loc, name, where, path, sizeof path, &g));
    cgq_status st = load_mlp_in(f, g, path, mlp);
    H5Gclose(g);
    return st;
}

static cgq_status check_index(const cgq_h5 *f, const char *where, const char *what, const int32_t *v, int n, int lo,
                              int hi) {
    for (int k = 0; k < n; k++)
        if (v[k] < lo || v[k] >= hi)
            return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s/%s[%d] = %d is outside %d..%d", f->path, where, what, k, v[k],
                            lo, hi - 1);
    return CGQ_STATUS_OK;
}

static cgq_status load_gate_in(const cgq_h5 *f, hid_t g, const char *where, cgq_nq_gate *gt) {
    cgq_irreps in, out;
    char buf[1024], what[700];
    CGQ_TRY(cgq_h5_attr_string(f, g, "irreps_in", where, buf, sizeof buf));
    snprintf(what, sizeof what, "%.200s: %.400s irreps_in", f->path, where);
    CGQ_TRY(cgq_irreps_parse(buf, what, &in));
    CGQ_TRY(cgq_h5_attr_string(f, g, "irreps_out", where, buf, sizeof buf));
    snprintf(what, sizeof what, "%.200s: %.400s irreps_out", f->path, where);
    CGQ_TRY(cgq_irreps_parse(buf, what, &out));
    gt->dim_in = in.dim;
    gt->dim_out = out.dim;
    int64_t dims[CGQ_H5_MAX_RANK];
    CGQ_TRY(cgq_h5_read_int(f, g, "scalar_src", where, 1, NULL, &gt->scalar_src, NULL, dims));
    gt->n_scalar = (int)dims[0];
    CGQ_TRY(cgq_h5_read_int(f, g, "scalar_act", where, 1, (int64_t[]){gt->n_scalar}, &gt->scalar_act, NULL, NULL));
    CGQ_TRY(cgq_h5_read_double(f, g, "scalar_cst", where, 1, (int64_t[]){gt->n_scalar}, &gt->scalar_cst, NULL, NULL));
    CGQ_TRY(cgq_h5_read_int(f, g, "gated_src", where, 1, NULL, &gt->gated_src, NULL, dims));
    gt->n_gated = (int)dims[0];
    const int64_t ng[1] = {gt->n_gated};
    CGQ_TRY(cgq_h5_read_int(f, g, "gated_gate", where, 1, ng, &gt->gated_gate, NULL, NULL));
    CGQ_TRY(cgq_h5_read_int(f, g, "gate_act", where, 1, ng, &gt->gate_act, NULL, NULL));
    CGQ_TRY(cgq_h5_read_double(f, g, "gate_cst", where, 1, ng, &gt->gate_cst, NULL, NULL));
    CGQ_TRY(cgq_h5_read_double(f, g, "gated_factor", where, 1, ng, &gt->gated_factor, NULL, NULL));
    if (gt->n_scalar + gt->n_gated != gt->dim_out)
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s maps %d scalars and %d gated components onto %d outputs", f->path,
                        where, gt->n_scalar, gt->n_gated, gt->dim_out);
    CGQ_TRY(check_index(f, where, "scalar_src", gt->scalar_src, gt->n_scalar, 0, gt->dim_in));
    CGQ_TRY(check_index(f, where, "gated_src", gt->gated_src, gt->n_gated, 0, gt->dim_in));
    CGQ_TRY(check_index(f, where, "gated_gate", gt->gated_gate, gt->n_gated, 0, gt->dim_in));
    CGQ_TRY(check_index(f, where, "scalar_act", gt->scalar_act, gt->n_scalar, 0, CGQ_ACT_ABS + 1));
    CGQ_TRY(check_index(f, where, "gate_act", gt->gate_act, gt->n_gated, 0, CGQ_ACT_ABS + 1));
    return CGQ_STATUS_OK;
}

static cgq_status dims_eq(const cgq_h5 *f, const char *where, const char *what, int got, int want) {
    if (got != want)
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s: %s has dimension %d, expected %d", f->path, where, what, got, want);
    return CGQ_STATUS_OK;
}

static cgq_status load_layer_in(const cgq_h5 *f, hid_t g, const char *where, cgq_nequip *nq, int t, int lmax,
                                int in_dim) {
    cgq_nq_layer *ly = &nq->layers[t];
    int64_t v;
    CGQ_TRY(cgq_h5_attr_int(f, g, "resnet", where, &v));
    ly->resnet = v != 0;
    CGQ_TRY(cgq_h5_attr_int(f, g, "use_sc", where, &v));
    ly->use_sc = v != 0;
    CGQ_TRY(cgq_h5_read_double(f, g, "norm_const", where, 1, (int64_t[]){nq->n_types}, &ly->norm_const, NULL, NULL));
    CGQ_TRY(cgq_read_linear_group(f, g, "linear_1", where, &ly->linear_1));
    CGQ_TRY(cgq_read_tp_group(f, g, "tp", where, &ly->tp));
    CGQ_TRY(load_mlp(f, g, "edge_mlp", where, &ly->edge_mlp));
    CGQ_TRY(cgq_read_linear_group(f, g, "linear_2", where, &ly->linear_2));
    if (ly->use_sc) CGQ_TRY(cgq_read_tp_group(f, g, "sc", where, &ly->sc));
    char path[512];
    hid_t gg;
    CGQ_TRY(open_group(f, g, "gate", where, path, sizeof path, &gg));
    cgq_status st = load_gate_in(f, gg, path, &ly->gate);
    H5Gclose(gg);
    CGQ_TRY(st);
    /* feature flow */
    CGQ_TRY(dims_eq(f, where, "linear_1 input", ly->linear_1.in.dim, in_dim));
    CGQ_TRY(dims_eq(f, where, "linear_1 output", ly->linear_1.out.dim, in_dim));
    CGQ_TRY(dims_eq(f, where, "tp input 1", ly->tp.in1.dim, in_dim));
    CGQ_TRY(dims_eq(f, where, "tp input 2 (spherical harmonics)", ly->tp.in2.dim, (lmax + 1) * (lmax + 1)));
    if (!ly->tp.external_weights)
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s/tp must take external (per-edge) weights", f->path, where);
    for (int k = 0; k < ly->tp.n_ins; k++)
        if (ly->tp.mode[k] != CGQ_TP_UVU || ly->tp.in2.b[ly->tp.i2[k]].mul != 1 || !ly->tp.has_weight[k])
            return cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: %s/tp instruction %d is not a weighted uvu path on the "
                            "spherical harmonics", f->path, where, k);
    CGQ_TRY(dims_eq(f, where, "edge_mlp input", ly->edge_mlp.h[0], nq->n_bessel));
    CGQ_TRY(dims_eq(f, where, "edge_mlp output", ly->edge_mlp.h[ly->edge_mlp.n_layers], (int)ly->tp.weight_numel));
    CGQ_TRY(dims_eq(f, where, "linear_2 input", ly->linear_2.in.dim, ly->tp.out.dim));
    CGQ_TRY(dims_eq(f, where, "gate input", ly->gate.dim_in, ly->linear_2.out.dim));
    if (ly->use_sc) {
        CGQ_TRY(dims_eq(f, where, "sc input 1", ly->sc.in1.dim, in_dim));
        CGQ_TRY(dims_eq(f, where, "sc input 2 (type embedding)", ly->sc.in2.dim, nq->emb_dim));
        CGQ_TRY(dims_eq(f, where, "sc output", ly->sc.out.dim, ly->linear_2.out.dim));
        if (ly->sc.external_weights)
            return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s/sc must have internal weights", f->path, where);
    }
    if (ly->resnet) CGQ_TRY(dims_eq(f, where, "resnet (gate output)", ly->gate.dim_out, in_dim));
    return CGQ_STATUS_OK;
}

static cgq_status load_radial_in(const cgq_h5 *f, hid_t g, const char *where, cgq_nequip *nq) {
    char kind[32];
    CGQ_TRY(cgq_h5_attr_string(f, g, "kind", where, kind, sizeof kind));
    if (strcmp(kind, "nequip_bessel"))
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: %s kind '%s' unsupported (nequip_bessel)", f->path, where, kind);
    int64_t dims[CGQ_H5_MAX_RANK];
    CGQ_TRY(cgq_h5_read_double(f, g, "bessel_weights", where, 1, NULL, &nq->bessel_weights, NULL, dims));
    nq->n_bessel = (int)dims[0];
    if (nq->n_bessel < 1 || nq->n_bessel > 64)
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: %s has %d Bessel functions (1..64)", f->path, where, nq->n_bessel);
    CGQ_TRY(cgq_h5_attr_double(f, g, "cutoff_p", where, &nq->cutoff_p));
    CGQ_TRY(cgq_h5_attr_double(f, g, "factor", where, &nq->factor));
    const int T = nq->n_types;
    CGQ_TRY(cgq_h5_read_double(f, g, "rmax_recip", where, 2, (int64_t[]){T, T}, &nq->rmax_recip, NULL, NULL));
    for (int k = 0; k < T * T; k++)
        if (!(nq->rmax_recip[k] > 0) || !isfinite(nq->rmax_recip[k]))
            return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s/rmax_recip[%d] = %g must be positive", f->path, where, k,
                            nq->rmax_recip[k]);
    if (!(nq->cutoff_p >= 2.0))
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s cutoff_p %g must be >= 2", f->path, where, nq->cutoff_p);
    return CGQ_STATUS_OK;
}

static cgq_status load_zbl_in(const cgq_h5 *f, hid_t g, const char *where, cgq_nequip *nq) {
    char kind[32];
    CGQ_TRY(cgq_h5_attr_string(f, g, "kind", where, kind, sizeof kind));
    if (strcmp(kind, "zbl"))
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: pair potential '%s' unsupported (zbl)", f->path, kind);
    CGQ_TRY(cgq_h5_attr_double(f, g, "qqr2exesquare", where, &nq->zbl_qqr2));
    CGQ_TRY(cgq_h5_attr_double(f, g, "cutoff_p", where, &nq->zbl_p));
    CGQ_TRY(cgq_h5_attr_double(f, g, "pzbl", where, &nq->zbl_pzbl));
    CGQ_TRY(cgq_h5_attr_double(f, g, "a0", where, &nq->zbl_a0));
    double *c = NULL, *d = NULL;
    CGQ_TRY(cgq_h5_read_double(f, g, "c", where, 1, (int64_t[]){4}, &c, NULL, NULL));
    memcpy(nq->zbl_c, c, sizeof nq->zbl_c);
    free(c);
    CGQ_TRY(cgq_h5_read_double(f, g, "d", where, 1, (int64_t[]){4}, &d, NULL, NULL));
    memcpy(nq->zbl_d, d, sizeof nq->zbl_d);
    free(d);
    CGQ_TRY(cgq_h5_read_double(f, g, "atomic_numbers", where, 1, (int64_t[]){nq->n_types}, &nq->zbl_z, NULL, NULL));
    nq->zbl = 1;
    return CGQ_STATUS_OK;
}

/* Runs fn on group `name` of loc and closes it. */
#define WITH_GROUP(loc, name, call)                                                                                \
    do {                                                                                                           \
        char gpath_[512];                                                                                          \
        hid_t g_;                                                                                                  \
        CGQ_TRY(open_group(f, loc, name, "", gpath_, sizeof gpath_, &g_));                                         \
        cgq_status st_ = call;                                                                                     \
        H5Gclose(g_);                                                                                              \
        CGQ_TRY(st_);                                                                                              \
    } while (0)

cgq_status cgq_nequip_load(const cgq_h5 *f, hid_t root, cgq_model *m) {
    cgq_nequip *nq = calloc(1, sizeof *nq);
    if (!nq) return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory loading %s", f->path);
    m->nequip = nq;
    nq->n_types = m->n_species;
    nq->n_layers = m->n_layers;
    const int T = nq->n_types;
    {
        char gp[512];
        hid_t g;
        int64_t dims[CGQ_H5_MAX_RANK];
        CGQ_TRY(open_group(f, root, "type_embed", "", gp, sizeof gp, &g));
        cgq_status st = cgq_h5_read_double(f, g, "weight", gp, 2, (int64_t[]){T, -1}, &nq->embed, NULL, dims);
        H5Gclose(g);
        CGQ_TRY(st);
        nq->emb_dim = (int)dims[1];
    }
    WITH_GROUP(root, "radial", load_radial_in(f, g_, gpath_, nq));
    /* the graph is built at r_max: every per-type cutoff must fit */
    for (int k = 0; k < T * T; k++)
        if (1.0 / nq->rmax_recip[k] > m->r_max * (1.0 + 1e-12))
            return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: per-edge-type cutoff %g exceeds r_max %g", f->path,
                            1.0 / nq->rmax_recip[k], m->r_max);
    hid_t lg;
    char lpath[64] = "/layers";
    CGQ_TRY(cgq_h5_group(f, root, "layers", "", &lg));
    int in_dim = nq->emb_dim;
    cgq_status st = CGQ_STATUS_OK;
    for (int t = 0; t < nq->n_layers && st == CGQ_STATUS_OK; t++) {
        char name[16], path[80];
        snprintf(name, sizeof name, "%d", t);
        snprintf(path, sizeof path, "%s/%d", lpath, t);
        hid_t g;
        st = cgq_h5_group(f, lg, name, lpath, &g);
        if (st != CGQ_STATUS_OK) break;
        st = load_layer_in(f, g, path, nq, t, m->lmax_sh, in_dim);
        H5Gclose(g);
        in_dim = nq->layers[t].gate.dim_out;
    }
    H5Gclose(lg);
    CGQ_TRY(st);
    CGQ_TRY(load_mlp(f, root, "readout", "", &nq->readout));
    CGQ_TRY(dims_eq(f, "/readout", "input", nq->readout.h[0], in_dim));
    CGQ_TRY(dims_eq(f, "/readout", "output", nq->readout.h[nq->readout.n_layers], 1));
    {
        char gp[512];
        hid_t g;
        CGQ_TRY(open_group(f, root, "energy", "", gp, sizeof gp, &g));
        st = cgq_h5_read_double(f, g, "scales", gp, 1, (int64_t[]){T}, &nq->scales, NULL, NULL);
        if (st == CGQ_STATUS_OK) st = cgq_h5_read_double(f, g, "shifts", gp, 1, (int64_t[]){T}, &nq->shifts, NULL, NULL);
        H5Gclose(g);
        CGQ_TRY(st);
    }
    if (cgq_h5_exists(root, "pair_potential")) WITH_GROUP(root, "pair_potential", load_zbl_in(f, g_, gpath_, nq));
    /* fields the MACE parts of the model struct share */
    m->n_bessel = nq->n_bessel;
    m->cutoff_p = nq->cutoff_p;
    m->cutoff_r_max = m->r_max;
    m->scale = 1.0;
    return CGQ_STATUS_OK;
}

static void free_mlp(cgq_nq_mlp *mlp) {
    for (int k = 0; k < CGQ_MAX_FC_LAYERS; k++) free(mlp->W[k]);
}

void cgq_nequip_free(cgq_nequip *nq) {
    if (!nq) return;
    free(nq->embed);
    free(nq->bessel_weights);
    free(nq->rmax_recip);
    free(nq->scales);
    free(nq->shifts);
    free(nq->zbl_z);
    for (int t = 0; t < CGQ_MAX_LAYERS; t++) {
        cgq_nq_layer *ly = &nq->layers[t];
        free(ly->norm_const);
        cgq_free_linear(&ly->linear_1);
        cgq_free_linear(&ly->linear_2);
        cgq_free_tp(&ly->tp);
        cgq_free_tp(&ly->sc);
        free_mlp(&ly->edge_mlp);
        cgq_nq_gate *g = &ly->gate;
        free(g->scalar_src), free(g->scalar_act), free(g->gated_src), free(g->gated_gate), free(g->gate_act);
        free(g->scalar_cst), free(g->gate_cst), free(g->gated_factor);
    }
    free_mlp(&nq->readout);
    free(nq);
}

void cgq_nequip_describe(const cgq_model *m, char *buf, size_t size) {
    const cgq_nequip *nq = m->nequip;
    size_t pos = 0;
#define OUT(...) pos += (size_t)snprintf(buf + (pos < size ? pos : size), pos < size ? size - pos : 0, __VA_ARGS__)
    OUT("family       %s (%s)\n", m->family, m->model_class);
    OUT("source       %s\n", m->source);
    OUT("cutoff       %.6g A (graph)", m->r_max);
    int per_type = 0;
    for (int k = 1; k < nq->n_types * nq->n_types; k++) per_type |= nq->rmax_recip[k] != nq->rmax_recip[0];
    if (per_type) {
        OUT(", per edge type (center-neighbour):");
        for (int a = 0; a < nq->n_types; a++)
            for (int b = 0; b < nq->n_types; b++)
                OUT(" %d-%d %.4g", m->species_z[a], m->species_z[b], 1.0 / nq->rmax_recip[a * nq->n_types + b]);
    }
    OUT("\nspecies      %d types, Z:", m->n_species);
    for (int i = 0; i < m->n_species; i++) OUT(" %d", m->species_z[i]);
    OUT("\nembedding    %d features per type\n", nq->emb_dim);
    OUT("radial       %d Bessel functions, polynomial cutoff p=%g\n", nq->n_bessel, nq->cutoff_p);
    OUT("sph. harm.   l <= %d\n", m->lmax_sh);
    for (int t = 0; t < nq->n_layers; t++) {
        const cgq_nq_layer *ly = &nq->layers[t];
        char a[512], b[512];
        cgq_irreps_format(&ly->linear_1.in, a, sizeof a);
        cgq_irreps_format(&ly->linear_2.out, b, sizeof b);
        OUT("layer %d      %s -> %s (gate in), %d TP paths, radial MLP", t, a, b, ly->tp.n_ins);
        for (int k = 0; k <= ly->edge_mlp.n_layers; k++) OUT("%s%d", k ? "-" : " ", ly->edge_mlp.h[k]);
        OUT(", 1/sqrt(avg neighbours) %.6g%s%s\n", ly->norm_const[0], ly->use_sc ? ", self-connection" : "",
            ly->resnet ? ", resnet" : "");
    }
    OUT("readout      MLP");
    for (int k = 0; k <= nq->readout.n_layers; k++) OUT("%s%d", k ? "-" : " ", nq->readout.h[k]);
    OUT("\nenergy       per-type scales/shifts%s\n", nq->zbl ? ", ZBL pair term" : "");
#undef OUT
}
