/* model_load.c: reads and validates a cgequi HDF5 model file (format v1, docs/model-format.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/h5util.h"
#include "model/model.h"
#include "model/nequip.h"

#define CGQ_FORMAT_VERSION 1

typedef struct loader {
    cgq_h5 f;
    cgq_model *m;
} loader;

/* Open group `name` under loc, run fn on it, close it: group handles never leak on errors. */
typedef cgq_status (*group_fn)(loader *L, hid_t g, const char *where, void *obj);
static cgq_status with_group(loader *L, hid_t loc, const char *name, const char *where, group_fn fn, void *obj) {
    char path[640];
    snprintf(path, sizeof path, "%.500s/%.100s", where, name);
    hid_t g;
    CGQ_TRY(cgq_h5_group(&L->f, loc, name, where, &g));
    cgq_status st = fn(L, g, path, obj);
    H5Gclose(g);
    return st;
}

static cgq_status read_irreps(loader *L, hid_t g, const char *attr, const char *where, cgq_irreps *out) {
    char buf[1024], what[900];
    CGQ_TRY(cgq_h5_attr_string(&L->f, g, attr, where, buf, sizeof buf));
    snprintf(what, sizeof what, "%.200s: attribute '%.40s' of %.600s", L->f.path, attr, where);
    return cgq_irreps_parse(buf, what, out);
}

cgq_status cgq_act_from_name(const cgq_h5 *f, const char *where, const char *name, cgq_act *act) {
    static const struct { const char *name; cgq_act act; } table[] = {
        {"identity", CGQ_ACT_IDENTITY}, {"silu", CGQ_ACT_SILU}, {"tanh", CGQ_ACT_TANH},
        {"sigmoid", CGQ_ACT_SIGMOID}, {"ssp", CGQ_ACT_SSP}, {"abs", CGQ_ACT_ABS}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(name, table[i].name)) {
            *act = table[i].act;
            return CGQ_STATUS_OK;
        }
    return cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: %s uses activation '%s' (supported: silu, tanh, sigmoid, ssp, abs)",
                    f->path, where, name);
}

static cgq_status parse_act(loader *L, hid_t g, const char *prefix, const char *where, cgq_act *act, double *cst) {
    char name[64], key[80];
    CGQ_TRY(cgq_h5_attr_string(&L->f, g, prefix, where, name, sizeof name));
    snprintf(key, sizeof key, "%s_cst", prefix);
    CGQ_TRY(cgq_h5_attr_double(&L->f, g, key, where, cst));
    return cgq_act_from_name(&L->f, where, name, act);
}

/* ---- e3nn Linear --------------------------------------------------------------------------------- */
static cgq_status load_linear(loader *L, hid_t g, const char *where, void *obj) {
    cgq_linear *lin = obj;
    CGQ_TRY(read_irreps(L, g, "irreps_in", where, &lin->in));
    CGQ_TRY(read_irreps(L, g, "irreps_out", where, &lin->out));
    int rank;
    int64_t dims[CGQ_H5_MAX_RANK];
    int32_t *ins = NULL;
    CGQ_TRY(cgq_h5_read_int(&L->f, g, "instructions", where, 2, (int64_t[]){-1, 2}, &ins, &rank, dims));
    lin->n_ins = (int)dims[0];
    int n = lin->n_ins;
    lin->ins_in = malloc(sizeof(int) * (size_t)(n + 1));
    lin->ins_out = malloc(sizeof(int) * (size_t)(n + 1));
    lin->w_offset = malloc(sizeof(int64_t) * (size_t)(n + 1));
    if (!lin->ins_in || !lin->ins_out || !lin->w_offset) {
        free(ins);
        return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory loading %s", where);
    }
    int64_t numel = 0;
    for (int k = 0; k < n; k++) {
        int a = ins[2 * k], b = ins[2 * k + 1];
        if (a < 0 || a >= lin->in.n || b < 0 || b >= lin->out.n || lin->in.b[a].l != lin->out.b[b].l ||
            lin->in.b[a].parity != lin->out.b[b].parity) {
            free(ins);
            return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s instruction %d (%d -> %d) does not connect equal irreps",
                            L->f.path, where, k, a, b);
        }
        lin->ins_in[k] = a;
        lin->ins_out[k] = b;
        lin->w_offset[k] = numel;
        numel += (int64_t)lin->in.b[a].mul * lin->out.b[b].mul;
    }
    free(ins);
    CGQ_TRY(cgq_h5_read_double(&L->f, g, "path_weights", where, 1, (int64_t[]){n}, &lin->path_weight, NULL, NULL));
    CGQ_TRY(cgq_h5_read_double(&L->f, g, "weight", where, 1, (int64_t[]){numel}, &lin->weight, NULL, NULL));
    if (cgq_h5_exists(g, "bias")) {
        int64_t nb = 0;
        for (int i = 0; i < lin->out.n; i++)
            if (lin->out.b[i].l == 0 && lin->out.b[i].parity == 1) nb += lin->out.b[i].mul;
        CGQ_TRY(cgq_h5_read_double(&L->f, g, "bias", where, 1, (int64_t[]){nb}, &lin->bias, NULL, NULL));
    }
    return CGQ_STATUS_OK;
}

/* ---- e3nn TensorProduct -------------------------------------------------------------------------- */
static cgq_status load_tp(loader *L, hid_t g, const char *where, void *obj) {
    cgq_tp *tp = obj;
    CGQ_TRY(read_irreps(L, g, "irreps_in1", where, &tp->in1));
    CGQ_TRY(read_irreps(L, g, "irreps_in2", where, &tp->in2));
    CGQ_TRY(read_irreps(L, g, "irreps_out", where, &tp->out));
    int64_t ext = 0, numel_attr = 0;
    CGQ_TRY(cgq_h5_attr_int(&L->f, g, "external_weights", where, &ext));
    CGQ_TRY(cgq_h5_attr_int(&L->f, g, "weight_numel", where, &numel_attr));
    tp->external_weights = ext != 0;
    int rank;
    int64_t dims[CGQ_H5_MAX_RANK];
    int32_t *ins = NULL;
    CGQ_TRY(cgq_h5_read_int(&L->f, g, "instructions", where, 2, (int64_t[]){-1, 5}, &ins, &rank, dims));
    int n = tp->n_ins = (int)dims[0];
    size_t ni = (size_t)(n + 1);
    tp->i1 = malloc(sizeof(int) * ni);
    tp->i2 = malloc(sizeof(int) * ni);
    tp->io = malloc(sizeof(int) * ni);
    tp->mode = malloc(sizeof(int) * ni);
    tp->has_weight = malloc(sizeof(int) * ni);
    tp->w_offset = malloc(sizeof(int64_t) * ni);
    tp->w3j = calloc(ni, sizeof(double *));
    if (!tp->i1 || !tp->i2 || !tp->io || !tp->mode || !tp->has_weight || !tp->w_offset || !tp->w3j) {
        free(ins);
        return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory loading %s", where);
    }
    int64_t numel = 0;
    cgq_status st = CGQ_STATUS_OK;
    for (int k = 0; k < n && st == CGQ_STATUS_OK; k++) {
        int a = ins[5 * k], b = ins[5 * k + 1], o = ins[5 * k + 2], mode = ins[5 * k + 3], hw = ins[5 * k + 4];
        if (a < 0 || a >= tp->in1.n || b < 0 || b >= tp->in2.n || o < 0 || o >= tp->out.n || mode < 0 || mode > 2) {
            st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s instruction %d is out of range", L->f.path, where, k);
            break;
        }
        const cgq_irrep_block *B1 = &tp->in1.b[a], *B2 = &tp->in2.b[b], *BO = &tp->out.b[o];
        int lo_ok = BO->l >= abs(B1->l - B2->l) && BO->l <= B1->l + B2->l && BO->parity == B1->parity * B2->parity;
        int mul_ok = mode == CGQ_TP_UVW || (mode == CGQ_TP_UVU && BO->mul == B1->mul) ||
                     (mode == CGQ_TP_UUU && B1->mul == B2->mul && BO->mul == B1->mul);
        if (!lo_ok || !mul_ok) {
            st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s instruction %d couples incompatible irreps", L->f.path, where, k);
            break;
        }
        tp->i1[k] = a;
        tp->i2[k] = b;
        tp->io[k] = o;
        tp->mode[k] = mode;
        tp->has_weight[k] = hw != 0;
        tp->w_offset[k] = numel;
        if (hw) {
            if (mode == CGQ_TP_UVW) numel += (int64_t)B1->mul * B2->mul * BO->mul;
            else if (mode == CGQ_TP_UVU) numel += (int64_t)B1->mul * B2->mul;
            else numel += B1->mul;
        }
        char name[32];
        snprintf(name, sizeof name, "w3j/%d", k);
        st = cgq_h5_read_double(&L->f, g, name, where, 3,
                                (int64_t[]){2 * B1->l + 1, 2 * B2->l + 1, 2 * BO->l + 1}, &tp->w3j[k], NULL, NULL);
    }
    free(ins);
    CGQ_TRY(st);
    if (numel != numel_attr)
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s weight_numel is %lld but the instructions need %lld", L->f.path,
                        where, (long long)numel_attr, (long long)numel);
    tp->weight_numel = numel;
    CGQ_TRY(cgq_h5_read_double(&L->f, g, "path_weights", where, 1, (int64_t[]){n}, &tp->path_weight, NULL, NULL));
    if (!tp->external_weights)
        CGQ_TRY(cgq_h5_read_double(&L->f, g, "weight", where, 1, (int64_t[]){numel}, &tp->weight, NULL, NULL));
    return CGQ_STATUS_OK;
}

/* ---- e3nn FullyConnectedNet ---------------------------------------------------------------------- */
static cgq_status load_fcnet(loader *L, hid_t g, const char *where, void *obj) {
    cgq_fcnet *fc = obj;
    int64_t nl = 0;
    CGQ_TRY(cgq_h5_attr_int(&L->f, g, "num_layers", where, &nl));
    if (nl < 1 || nl > CGQ_MAX_FC_LAYERS)
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: %s has %lld layers (1..%d supported)", L->f.path, where,
                        (long long)nl, CGQ_MAX_FC_LAYERS);
    fc->n_layers = (int)nl;
    CGQ_TRY(parse_act(L, g, "act", where, &fc->act, &fc->act_cst));
    for (int k = 0; k < fc->n_layers; k++) {
        char name[32];
        int64_t dims[CGQ_H5_MAX_RANK];
        snprintf(name, sizeof name, "layer%d", k);
        int64_t want[2] = {k ? fc->h[k] : -1, -1};
        CGQ_TRY(cgq_h5_read_double(&L->f, g, name, where, 2, want, &fc->W[k], NULL, dims));
        fc->h[k] = (int)dims[0];
        fc->h[k + 1] = (int)dims[1];
    }
    return CGQ_STATUS_OK;
}

/* ---- SymmetricContraction ------------------------------------------------------------------------ */
typedef struct contraction_ctx {
    cgq_contraction *c;
    int n_elements, channels, coupling_dim;
} contraction_ctx;

static cgq_status load_contraction(loader *L, hid_t g, const char *where, void *obj) {
    contraction_ctx *ctx = obj;
    cgq_contraction *c = ctx->c;
    int64_t corr;
    CGQ_TRY(cgq_h5_attr_int(&L->f, g, "correlation", where, &corr));
    if (corr < 1 || corr > CGQ_MAX_CORRELATION)
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: %s correlation %lld (1..%d supported)", L->f.path, where,
                        (long long)corr, CGQ_MAX_CORRELATION);
    c->correlation = (int)corr;
    cgq_irreps ir;
    CGQ_TRY(read_irreps(L, g, "irrep_out", where, &ir));
    if (ir.n != 1 || ir.b[0].mul != 1)
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s irrep_out must be a single irrep", L->f.path, where);
    c->l_out = ir.b[0].l;
    c->parity_out = ir.b[0].parity;
    int D = ctx->coupling_dim, dm = 2 * c->l_out + 1;
    for (int nu = 1; nu <= c->correlation; nu++) {
        char name[16];
        int64_t want[CGQ_H5_MAX_RANK], dims[CGQ_H5_MAX_RANK];
        int r = 0, rank;
        if (c->l_out > 0) want[r++] = dm;
        for (int p = 0; p < nu; p++) want[r++] = D;
        want[r++] = -1;
        snprintf(name, sizeof name, "U_%d", nu);
        double *U = NULL;
        CGQ_TRY(cgq_h5_read_double(&L->f, g, name, where, r, want, &U, &rank, dims));
        int K = c->K[nu] = (int)dims[r - 1];
        size_t total = (size_t)dm * K;
        for (int p = 0; p < nu; p++) total *= (size_t)D;
        int64_t nnz = 0;
        for (size_t i = 0; i < total; i++) nnz += U[i] != 0.0;
        c->nnz[nu] = nnz;
        c->u_m[nu] = malloc(sizeof(int32_t) * (size_t)(nnz + 1));
        c->u_k[nu] = malloc(sizeof(int32_t) * (size_t)(nnz + 1));
        c->u_idx[nu] = malloc(sizeof(int32_t) * (size_t)(nnz * nu + 1));
        c->u_val[nu] = malloc(sizeof(double) * (size_t)(nnz + 1));
        if (!c->u_m[nu] || !c->u_k[nu] || !c->u_idx[nu] || !c->u_val[nu]) {
            free(U);
            return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory loading %s", where);
        }
        int64_t q = 0;
        for (size_t i = 0; i < total; i++) {
            if (U[i] == 0.0) continue;
            size_t rest = i;
            c->u_k[nu][q] = (int32_t)(rest % (size_t)K);
            rest /= (size_t)K;
            for (int p = nu - 1; p >= 0; p--) {
                c->u_idx[nu][q * nu + p] = (int32_t)(rest % (size_t)D);
                rest /= (size_t)D;
            }
            c->u_m[nu][q] = (int32_t)rest;
            c->u_val[nu][q] = U[i];
            q++;
        }
        free(U);
        snprintf(name, sizeof name, "W_%d", nu);
        CGQ_TRY(cgq_h5_read_double(&L->f, g, name, where, 3, (int64_t[]){ctx->n_elements, K, ctx->channels},
                                   &c->W[nu], NULL, NULL));
    }
    return CGQ_STATUS_OK;
}

/* ---- MACE layer ---------------------------------------------------------------------------------- */
static cgq_status check_dims(loader *L, const char *where, const char *what, int got, int want) {
    if (got != want)
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s: %s has dimension %d, expected %d", L->f.path, where, what, got, want);
    return CGQ_STATUS_OK;
}

static cgq_status load_interaction(loader *L, hid_t g, const char *where, void *obj) {
    cgq_mace_layer *ly = obj;
    int64_t v;
    CGQ_TRY(cgq_h5_attr_int(&L->f, g, "residual", where, &v));
    ly->residual = v != 0;
    CGQ_TRY(cgq_h5_attr_int(&L->f, g, "density", where, &v));
    ly->density = v != 0;
    CGQ_TRY(cgq_h5_attr_double(&L->f, g, "avg_num_neighbors", where, &ly->avg_num_neighbors));
    CGQ_TRY(read_irreps(L, g, "target_irreps", where, &ly->target));
    CGQ_TRY(with_group(L, g, "linear_up", where, load_linear, &ly->linear_up));
    CGQ_TRY(with_group(L, g, "conv_tp", where, load_tp, &ly->conv_tp));
    CGQ_TRY(with_group(L, g, "conv_tp_weights", where, load_fcnet, &ly->radial_mlp));
    CGQ_TRY(with_group(L, g, "linear", where, load_linear, &ly->linear));
    CGQ_TRY(with_group(L, g, "skip_tp", where, load_tp, &ly->skip_tp));
    if (ly->density) CGQ_TRY(with_group(L, g, "density_fn", where, load_fcnet, &ly->density_fn));
    /* structural consistency between the pieces */
    const cgq_model *m = L->m;
    CGQ_TRY(check_dims(L, where, "conv_tp input 1", ly->conv_tp.in1.dim, ly->linear_up.out.dim));
    CGQ_TRY(check_dims(L, where, "conv_tp input 2 (spherical harmonics)", ly->conv_tp.in2.dim,
                       (m->lmax_sh + 1) * (m->lmax_sh + 1)));
    CGQ_TRY(check_dims(L, where, "radial MLP input", ly->radial_mlp.h[0], m->n_bessel));
    CGQ_TRY(check_dims(L, where, "radial MLP output", ly->radial_mlp.h[ly->radial_mlp.n_layers],
                       (int)ly->conv_tp.weight_numel));
    CGQ_TRY(check_dims(L, where, "linear input", ly->linear.in.dim, ly->conv_tp.out.dim));
    CGQ_TRY(check_dims(L, where, "linear output", ly->linear.out.dim, ly->target.dim));
    CGQ_TRY(check_dims(L, where, "skip_tp input 2 (species)", ly->skip_tp.in2.dim, m->n_species));
    if (!ly->conv_tp.external_weights)
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s/conv_tp must take external (per-edge) weights", L->f.path, where);
    if (ly->density) {
        CGQ_TRY(check_dims(L, where, "density_fn input", ly->density_fn.h[0], m->n_bessel));
        CGQ_TRY(check_dims(L, where, "density_fn output", ly->density_fn.h[ly->density_fn.n_layers], 1));
    }
    if (!ly->residual) CGQ_TRY(check_dims(L, where, "skip_tp input 1", ly->skip_tp.in1.dim, ly->target.dim));
    /* reshape to [C][D]: every target block has the same multiplicity */
    ly->channels = ly->target.b[0].mul;
    ly->coupling_dim = 0;
    for (int i = 0; i < ly->target.n; i++) {
        if (ly->target.b[i].mul != ly->channels)
            return cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: %s target irreps need equal multiplicities", L->f.path, where);
        ly->coupling_dim += 2 * ly->target.b[i].l + 1;
    }
    return CGQ_STATUS_OK;
}

static cgq_status load_product(loader *L, hid_t g, const char *where, void *obj) {
    cgq_mace_layer *ly = obj;
    int64_t v;
    CGQ_TRY(cgq_h5_attr_int(&L->f, g, "use_sc", where, &v));
    ly->use_sc = v != 0;
    CGQ_TRY(cgq_h5_attr_int(&L->f, g, "agnostic", where, &v));
    ly->agnostic = v != 0;
    hid_t sg;
    CGQ_TRY(cgq_h5_group(&L->f, g, "symmetric_contraction", where, &sg));
    char sw[700];
    snprintf(sw, sizeof sw, "%.600s/symmetric_contraction", where);
    cgq_status st = read_irreps(L, sg, "irreps_out", sw, &ly->product_out);
    int64_t nc = 0;
    if (st == CGQ_STATUS_OK) st = cgq_h5_attr_int(&L->f, sg, "num_contractions", sw, &nc);
    if (st == CGQ_STATUS_OK && nc != ly->product_out.n)
        st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s has %lld contractions for %d output irreps", L->f.path, sw,
                      (long long)nc, ly->product_out.n);
    if (st == CGQ_STATUS_OK) {
        ly->n_contractions = (int)nc;
        ly->contractions = calloc((size_t)nc + 1, sizeof(cgq_contraction));
        if (!ly->contractions) st = cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    for (int k = 0; st == CGQ_STATUS_OK && k < ly->n_contractions; k++) {
        char name[16];
        snprintf(name, sizeof name, "%d", k);
        contraction_ctx ctx = {&ly->contractions[k], ly->agnostic ? 1 : L->m->n_species, ly->channels,
                               ly->coupling_dim};
        st = with_group(L, sg, name, sw, load_contraction, &ctx);
        if (st == CGQ_STATUS_OK && (ly->contractions[k].l_out != ly->product_out.b[k].l ||
                                    ly->product_out.b[k].mul != ly->channels))
            st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s/%d does not match irreps_out", L->f.path, sw, k);
    }
    H5Gclose(sg);
    CGQ_TRY(st);
    CGQ_TRY(with_group(L, g, "linear", where, load_linear, &ly->product_linear));
    CGQ_TRY(check_dims(L, where, "product linear input", ly->product_linear.in.dim, ly->product_out.dim));
    return CGQ_STATUS_OK;
}

static cgq_status load_layer(loader *L, hid_t g, const char *where, void *obj) {
    cgq_mace_layer *ly = obj;
    CGQ_TRY(with_group(L, g, "interaction", where, load_interaction, ly));
    CGQ_TRY(with_group(L, g, "product", where, load_product, ly));
    if (ly->residual && ly->use_sc)
        CGQ_TRY(check_dims(L, where, "skip connection", ly->skip_tp.out.dim, ly->product_linear.out.dim));
    return CGQ_STATUS_OK;
}

static cgq_status load_readout(loader *L, hid_t g, const char *where, void *obj) {
    cgq_readout *ro = obj;
    char kind[32];
    int64_t v;
    CGQ_TRY(cgq_h5_attr_string(&L->f, g, "kind", where, kind, sizeof kind));
    CGQ_TRY(cgq_h5_attr_int(&L->f, g, "layer", where, &v));
    if (v < 0 || v >= L->m->n_layers)
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s reads layer %lld of %d", L->f.path, where, (long long)v, L->m->n_layers);
    ro->layer = (int)v;
    CGQ_TRY(cgq_h5_attr_int(&L->f, g, "head_index", where, &v));
    ro->head_index = (int)v;
    CGQ_TRY(cgq_h5_attr_int(&L->f, g, "num_heads", where, &v));
    ro->num_heads = (int)v;
    if (ro->num_heads < 1 || ro->head_index < 0 || ro->head_index >= ro->num_heads)
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s head_index/num_heads inconsistent", L->f.path, where);
    const cgq_linear *last;
    if (!strcmp(kind, "linear")) {
        ro->kind = CGQ_READOUT_LINEAR;
        CGQ_TRY(with_group(L, g, "linear", where, load_linear, &ro->linear_1));
        last = &ro->linear_1;
    } else if (!strcmp(kind, "nonlinear") || !strcmp(kind, "nonlinear_bias")) {
        ro->kind = kind[9] ? CGQ_READOUT_NONLINEAR_BIAS : CGQ_READOUT_NONLINEAR;
        CGQ_TRY(parse_act(L, g, "act", where, &ro->act, &ro->act_cst));
        CGQ_TRY(cgq_h5_attr_int(&L->f, g, "mask_heads", where, &v));
        ro->mask_heads = v != 0;
        CGQ_TRY(with_group(L, g, "linear_1", where, load_linear, &ro->linear_1));
        if (ro->kind == CGQ_READOUT_NONLINEAR_BIAS)
            CGQ_TRY(with_group(L, g, "linear_mid", where, load_linear, &ro->linear_mid));
        CGQ_TRY(with_group(L, g, "linear_2", where, load_linear, &ro->linear_2));
        last = &ro->linear_2;
        if (ro->mask_heads && ro->linear_1.out.dim % ro->num_heads)
            return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s hidden size not divisible by heads", L->f.path, where);
    } else {
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: %s readout kind '%s' unsupported", L->f.path, where, kind);
    }
    CGQ_TRY(check_dims(L, where, "readout output", last->out.dim, ro->num_heads));
    return CGQ_STATUS_OK;
}

static cgq_status load_radial(loader *L, hid_t g, const char *where, void *obj) {
    cgq_model *m = obj;
    char kind[32];
    CGQ_TRY(cgq_h5_attr_string(&L->f, g, "kind", where, kind, sizeof kind));
    if (strcmp(kind, "bessel"))
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: radial basis '%s' unsupported (bessel)", L->f.path, kind);
    int64_t dims[CGQ_H5_MAX_RANK], ac;
    CGQ_TRY(cgq_h5_read_double(&L->f, g, "bessel_weights", where, 1, NULL, &m->bessel_weights, NULL, dims));
    m->n_bessel = (int)dims[0];
    CGQ_TRY(cgq_h5_attr_double(&L->f, g, "prefactor", where, &m->bessel_prefactor));
    CGQ_TRY(cgq_h5_attr_double(&L->f, g, "cutoff_p", where, &m->cutoff_p));
    CGQ_TRY(cgq_h5_attr_double(&L->f, g, "cutoff_r_max", where, &m->cutoff_r_max));
    CGQ_TRY(cgq_h5_attr_int(&L->f, g, "apply_cutoff", where, &ac));
    m->apply_cutoff = ac != 0;
    char dt[32] = "none";
    if (H5Aexists(g, "distance_transform") > 0)
        CGQ_TRY(cgq_h5_attr_string(&L->f, g, "distance_transform", where, dt, sizeof dt));
    if (!strcmp(dt, "agnesi")) {
        m->agnesi = 1;
        CGQ_TRY(cgq_h5_attr_double(&L->f, g, "agnesi_q", where, &m->agnesi_q));
        CGQ_TRY(cgq_h5_attr_double(&L->f, g, "agnesi_p", where, &m->agnesi_p));
        CGQ_TRY(cgq_h5_attr_double(&L->f, g, "agnesi_a", where, &m->agnesi_a));
        CGQ_TRY(cgq_h5_read_double(&L->f, g, "agnesi_covalent_radii", where, 1, (int64_t[]){m->n_species},
                                   &m->agnesi_radii, NULL, NULL));
    } else if (strcmp(dt, "none")) {
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: distance transform '%s' unsupported (agnesi)", L->f.path, dt);
    }
    if (m->n_bessel < 1 || m->cutoff_r_max <= 0)
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s has no basis functions or a non-positive cutoff", L->f.path, where);
    return CGQ_STATUS_OK;
}

static cgq_status load_zbl(loader *L, hid_t g, const char *where, void *obj) {
    cgq_model *m = obj;
    char kind[32];
    CGQ_TRY(cgq_h5_attr_string(&L->f, g, "kind", where, kind, sizeof kind));
    if (strcmp(kind, "zbl"))
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: pair repulsion '%s' unsupported (zbl)", L->f.path, kind);
    double *c = NULL;
    CGQ_TRY(cgq_h5_read_double(&L->f, g, "c", where, 1, (int64_t[]){4}, &c, NULL, NULL));
    memcpy(m->zbl_c, c, sizeof m->zbl_c);
    free(c);
    CGQ_TRY(cgq_h5_attr_double(&L->f, g, "a_exp", where, &m->zbl_a_exp));
    CGQ_TRY(cgq_h5_attr_double(&L->f, g, "a_prefactor", where, &m->zbl_a_prefactor));
    CGQ_TRY(cgq_h5_attr_double(&L->f, g, "p", where, &m->zbl_p));
    CGQ_TRY(cgq_h5_read_double(&L->f, g, "covalent_radii", where, 1, (int64_t[]){m->n_species}, &m->zbl_radii, NULL,
                               NULL));
    m->zbl = 1;
    return CGQ_STATUS_OK;
}

static cgq_status load_energy(loader *L, hid_t g, const char *where, void *obj) {
    cgq_model *m = obj;
    CGQ_TRY(cgq_h5_read_double(&L->f, g, "atomic_energies", where, 1, (int64_t[]){m->n_species}, &m->atomic_energies,
                               NULL, NULL));
    CGQ_TRY(cgq_h5_attr_double(&L->f, g, "scale", where, &m->scale));
    CGQ_TRY(cgq_h5_attr_double(&L->f, g, "shift", where, &m->shift));
    return CGQ_STATUS_OK;
}

static cgq_status load_layers(loader *L, hid_t g, const char *where, void *obj) {
    (void)obj;
    for (int t = 0; t < L->m->n_layers; t++) {
        char name[16];
        snprintf(name, sizeof name, "%d", t);
        CGQ_TRY(with_group(L, g, name, where, load_layer, &L->m->layers[t]));
    }
    /* feature flow between layers */
    for (int t = 0; t < L->m->n_layers; t++) {
        const cgq_mace_layer *ly = &L->m->layers[t];
        int in_dim = t ? L->m->layers[t - 1].product_linear.out.dim : L->m->node_embedding.out.dim;
        char w[64];
        snprintf(w, sizeof w, "/layers/%d", t);
        CGQ_TRY(check_dims(L, w, "linear_up input", ly->linear_up.in.dim, in_dim));
        if (ly->residual) CGQ_TRY(check_dims(L, w, "skip_tp input 1", ly->skip_tp.in1.dim, in_dim));
    }
    return CGQ_STATUS_OK;
}

static cgq_status load_readouts(loader *L, hid_t g, const char *where, void *obj) {
    (void)obj;
    cgq_model *m = L->m;
    m->n_readouts = 0;
    for (int k = 0; k < CGQ_MAX_LAYERS; k++) {
        char name[16];
        snprintf(name, sizeof name, "%d", k);
        if (!cgq_h5_exists(g, name)) break;
        CGQ_TRY(with_group(L, g, name, where, load_readout, &m->readouts[k]));
        m->n_readouts++;
        const cgq_readout *ro = &m->readouts[k];
        CGQ_TRY(check_dims(L, where, "readout input", ro->linear_1.in.dim, m->layers[ro->layer].product_linear.out.dim));
    }
    if (!m->n_readouts) return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s has no readouts", L->f.path, where);
    return CGQ_STATUS_OK;
}

static cgq_status load_root(loader *L) {
    cgq_model *m = L->m;
    hid_t root = H5Gopen2(L->f.file, "/", H5P_DEFAULT);
    if (root < 0) return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: cannot open the root group", L->f.path);
    char buf[256];
    int64_t v, nz;
    cgq_status st = cgq_h5_attr_string(&L->f, root, "format", "/", buf, sizeof buf);
    if (st == CGQ_STATUS_OK && strcmp(buf, "cgequi-model"))
        st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: not a cgequi model file (format '%s'); export one with tools/cgequi-export",
                      L->f.path, buf);
    if (st == CGQ_STATUS_OK) st = cgq_h5_attr_int(&L->f, root, "format_version", "/", &v);
    if (st == CGQ_STATUS_OK && v != CGQ_FORMAT_VERSION)
        st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: format version %lld, this cgequi reads version %d; re-export the model "
                      "with this cgequi's tools/cgequi-export", L->f.path, (long long)v, CGQ_FORMAT_VERSION);
    if (st == CGQ_STATUS_OK) st = cgq_h5_attr_string(&L->f, root, "model_family", "/", m->family, sizeof m->family);
    const int nequip = !strcmp(m->family, "nequip");
    if (st == CGQ_STATUS_OK && strcmp(m->family, "mace") && !nequip)
        st = cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: model family '%s' is not supported by this build (mace, nequip)",
                      L->f.path, m->family);
    if (st == CGQ_STATUS_OK) st = cgq_h5_attr_string(&L->f, root, "dtype", "/", buf, sizeof buf);
    if (st == CGQ_STATUS_OK && strcmp(buf, "float64"))
        st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: dtype '%s', expected float64", L->f.path, buf);
    if (st == CGQ_STATUS_OK) st = cgq_h5_attr_string(&L->f, root, "edge_vector", "/", buf, sizeof buf);
    if (st == CGQ_STATUS_OK && strcmp(buf, nequip ? "x_sender - x_receiver" : "x_receiver - x_sender"))
        st = cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: edge convention '%s' unsupported", L->f.path, buf);
    if (st == CGQ_STATUS_OK) st = cgq_h5_attr_string(&L->f, root, "model_class", "/", m->model_class, sizeof m->model_class);
    if (st == CGQ_STATUS_OK) st = cgq_h5_attr_string(&L->f, root, "head", "/", m->head, sizeof m->head);
    if (st == CGQ_STATUS_OK) st = cgq_h5_attr_double(&L->f, root, "r_max", "/", &m->r_max);
    if (st == CGQ_STATUS_OK && (m->r_max <= 0 || m->r_max > 100))
        st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: r_max %g is out of range", L->f.path, m->r_max);
    if (st == CGQ_STATUS_OK) st = cgq_h5_attr_int(&L->f, root, "num_layers", "/", &v);
    if (st == CGQ_STATUS_OK && (v < 1 || v > CGQ_MAX_LAYERS))
        st = cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: %lld layers (1..%d supported)", L->f.path, (long long)v, CGQ_MAX_LAYERS);
    m->n_layers = (int)v;
    if (st == CGQ_STATUS_OK) st = cgq_h5_attr_int(&L->f, root, "lmax_sh", "/", &v);
    if (st == CGQ_STATUS_OK && (v < 0 || v > CGQ_MAX_SH_L))
        st = cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: spherical harmonics up to l=%lld (l<=%d supported)", L->f.path,
                      (long long)v, CGQ_MAX_SH_L);
    m->lmax_sh = (int)v;
    if (st == CGQ_STATUS_OK) st = cgq_h5_attr_int_array(&L->f, root, "species_z", "/", &m->species_z, &nz);
    if (st == CGQ_STATUS_OK) {
        m->n_species = (int)nz;
        if (nz < 1) st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: the model lists no species", L->f.path);
        if (nz > CGQ_MAX_SPECIES)
            st = cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: %lld species (at most %d supported)", L->f.path, (long long)nz,
                          CGQ_MAX_SPECIES);
        for (int i = 0; st == CGQ_STATUS_OK && i < m->n_species; i++)
            if (m->species_z[i] < 1 || m->species_z[i] > 118)
                st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: species_z[%d] = %d is not an atomic number", L->f.path, i,
                              m->species_z[i]);
    }
    if (st == CGQ_STATUS_OK) {
        char t[64] = "", e[64] = "", x[64] = "";
        cgq_h5_attr_string(&L->f, root, "source_torch", "/", t, sizeof t);
        cgq_h5_attr_string(&L->f, root, "source_e3nn", "/", e, sizeof e);
        cgq_h5_attr_string(&L->f, root, nequip ? "source_nequip" : "source_mace", "/", x, sizeof x);
        snprintf(m->source, sizeof m->source, "%s %s, e3nn %s, torch %s", nequip ? "nequip" : "mace", x, e, t);
        cgq_clear_error();
    }
    if (nequip) { /* NequIP groups: model/nequip_load.c */
        if (st == CGQ_STATUS_OK) st = cgq_nequip_load(&L->f, root, m);
        H5Gclose(root);
        return st;
    }
    if (st == CGQ_STATUS_OK) st = with_group(L, root, "radial", "", load_radial, m);
    if (st == CGQ_STATUS_OK && fabs(m->cutoff_r_max - m->r_max) > 1e-12)
        st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: radial cutoff %g differs from r_max %g", L->f.path, m->cutoff_r_max, m->r_max);
    if (st == CGQ_STATUS_OK) st = with_group(L, root, "energy", "", load_energy, m);
    if (st == CGQ_STATUS_OK && cgq_h5_exists(root, "pair_repulsion"))
        st = with_group(L, root, "pair_repulsion", "", load_zbl, m);
    if (st == CGQ_STATUS_OK) st = with_group(L, root, "node_embedding", "", load_linear, &m->node_embedding);
    if (st == CGQ_STATUS_OK) st = check_dims(L, "/node_embedding", "input", m->node_embedding.in.dim, m->n_species);
    if (st == CGQ_STATUS_OK) st = with_group(L, root, "layers", "", load_layers, NULL);
    if (st == CGQ_STATUS_OK) st = with_group(L, root, "readouts", "", load_readouts, NULL);
    H5Gclose(root);
    return st;
}

/* ---- shared with the NequIP loader (model/nequip.h) --------------------------------------------- */
cgq_status cgq_read_linear_group(const cgq_h5 *f, hid_t loc, const char *name, const char *where, cgq_linear *out) {
    loader L = {*f, NULL};
    return with_group(&L, loc, name, where, load_linear, out);
}

cgq_status cgq_read_tp_group(const cgq_h5 *f, hid_t loc, const char *name, const char *where, cgq_tp *out) {
    loader L = {*f, NULL};
    return with_group(&L, loc, name, where, load_tp, out);
}

static void free_linear(cgq_linear *l) {
    free(l->ins_in);
    free(l->ins_out);
    free(l->path_weight);
    free(l->w_offset);
    free(l->weight);
    free(l->bias);
}

static void free_tp(cgq_tp *t) {
    if (t->w3j)
        for (int k = 0; k < t->n_ins; k++) free(t->w3j[k]);
    free(t->w3j);
    free(t->i1);
    free(t->i2);
    free(t->io);
    free(t->mode);
    free(t->has_weight);
    free(t->path_weight);
    free(t->w_offset);
    free(t->weight);
}

static void free_fcnet(cgq_fcnet *f) {
    for (int k = 0; k < CGQ_MAX_FC_LAYERS; k++) free(f->W[k]);
}

void cgq_free_linear(cgq_linear *l) { free_linear(l); }
void cgq_free_tp(cgq_tp *t) { free_tp(t); }

void cgq_model_free(cgq_model *m) {
    if (!m) return;
    cgq_nequip_free(m->nequip);
    free(m->species_z);
    free(m->bessel_weights);
    free(m->atomic_energies);
    free(m->agnesi_radii);
    free(m->zbl_radii);
    free_linear(&m->node_embedding);
    for (int t = 0; t < CGQ_MAX_LAYERS; t++) {
        cgq_mace_layer *ly = &m->layers[t];
        free_linear(&ly->linear_up);
        free_linear(&ly->linear);
        free_linear(&ly->product_linear);
        free_tp(&ly->conv_tp);
        free_tp(&ly->skip_tp);
        free_fcnet(&ly->radial_mlp);
        free_fcnet(&ly->density_fn);
        if (ly->contractions) {
            for (int k = 0; k < ly->n_contractions; k++)
                for (int nu = 0; nu <= CGQ_MAX_CORRELATION; nu++) {
                    cgq_contraction *c = &ly->contractions[k];
                    free(c->u_m[nu]);
                    free(c->u_idx[nu]);
                    free(c->u_k[nu]);
                    free(c->u_val[nu]);
                    free(c->W[nu]);
                }
            free(ly->contractions);
        }
    }
    for (int k = 0; k < CGQ_MAX_LAYERS; k++) {
        free_linear(&m->readouts[k].linear_1);
        free_linear(&m->readouts[k].linear_mid);
        free_linear(&m->readouts[k].linear_2);
    }
    free(m);
}

cgq_status cgq_model_load(const char *path, cgq_model **out) {
    if (!path || !out) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_model_load: path and out must not be NULL");
    *out = NULL;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    FILE *probe = fopen(path, "rb");
    if (!probe) return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: cannot open the model file (does it exist and is it readable?)", path);
    fclose(probe);
    if (H5Fis_hdf5(path) <= 0)
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: not an HDF5 file; export the model with tools/cgequi-export", path);
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: HDF5 could not open the file (truncated or corrupt?)", path);
    cgq_model *m = calloc(1, sizeof *m);
    if (!m) {
        H5Fclose(file);
        return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory loading %s", path);
    }
    loader L = {{file, path}, m};
    cgq_status st = load_root(&L);
    H5Fclose(file);
    if (st != CGQ_STATUS_OK) {
        cgq_model_free(m);
        return st;
    }
    *out = m;
    return CGQ_STATUS_OK;
}

double cgq_model_cutoff(const cgq_model *m) { return m ? m->r_max : 0.0; }
int32_t cgq_model_num_species(const cgq_model *m) { return m ? m->n_species : 0; }
int32_t cgq_model_species_z(const cgq_model *m, int32_t i) {
    return m && i >= 0 && i < m->n_species ? m->species_z[i] : 0;
}
int32_t cgq_model_species_index(const cgq_model *m, int32_t z) {
    if (!m) return -1;
    for (int i = 0; i < m->n_species; i++)
        if (m->species_z[i] == z) return i;
    return -1;
}
