/* nequip.h: the in-memory NequIP model (nequip >= 0.7 NequIPGNNModel), as loaded from a cgequi HDF5
 * file (docs/model-format.md, "NequIP groups"), and its loader entry used by model_load.c. */
#ifndef CGQ_NEQUIP_H
#define CGQ_NEQUIP_H

#include <hdf5.h>

#include "model/h5util.h"
#include "model/model.h"

/* nequip ScalarMLPFunction: x <- act(x @ (W_k alpha_k)) for hidden layers, x @ (W_last alpha_last) last. */
typedef struct cgq_nq_mlp {
    int n_layers;
    int h[CGQ_MAX_FC_LAYERS + 1];
    double *W[CGQ_MAX_FC_LAYERS]; /* [h[k]][h[k+1]], already multiplied by alpha_k (as nequip does) */
    double alpha[CGQ_MAX_FC_LAYERS];
    cgq_act act;
    double act_cst;
} cgq_nq_mlp;

/* e3nn Gate as index maps over the flat input vector of dimension dim_in:
 * out[k] = act_k(x[scalar_src[k]]) for k < n_scalar, then
 * out[n_scalar + j] = factor_j * x[gated_src[j]] * gact_j(x[gated_gate[j]]). */
typedef struct cgq_nq_gate {
    int dim_in, dim_out, n_scalar, n_gated;
    int32_t *scalar_src, *scalar_act, *gated_src, *gated_gate, *gate_act;
    double *scalar_cst, *gate_cst, *gated_factor;
} cgq_nq_gate;

typedef struct cgq_nq_layer {
    int resnet, use_sc;
    double *norm_const; /* [n_species]: 1/sqrt(avg_num_neighbors) of the node's own type */
    cgq_linear linear_1, linear_2;
    cgq_tp tp; /* convolution: uvu, external per-edge weights, in2 = SH */
    cgq_tp sc; /* self-connection FCTP (x, type embedding) when use_sc */
    cgq_nq_mlp edge_mlp;
    cgq_nq_gate gate;
} cgq_nq_layer;

typedef struct cgq_nequip {
    int n_types, emb_dim;
    double *embed; /* [n_types][emb_dim]: node attributes and first-layer features */
    int n_bessel;
    double *bessel_weights; /* [n_bessel] */
    double cutoff_p, factor;
    double *rmax_recip; /* [n_types][n_types], row = receiver (center) type, column = sender (neighbour) type */
    int n_layers;
    cgq_nq_layer layers[CGQ_MAX_LAYERS];
    cgq_nq_mlp readout;
    double *scales, *shifts; /* [n_types] */
    /* ZBL pair term (nequip.nn.pair_potential.ZBL), on the center node after scale/shift */
    int zbl;
    double zbl_qqr2, zbl_p, zbl_pzbl, zbl_a0, zbl_c[4], zbl_d[4];
    double *zbl_z; /* [n_types] atomic numbers as float */
} cgq_nequip;

/* Loader hooks shared with model_load.c (its generic e3nn primitive readers). */
cgq_status cgq_read_linear_group(const cgq_h5 *f, hid_t loc, const char *name, const char *where, cgq_linear *out);
cgq_status cgq_read_tp_group(const cgq_h5 *f, hid_t loc, const char *name, const char *where, cgq_tp *out);
void cgq_free_linear(cgq_linear *l);
void cgq_free_tp(cgq_tp *t);
/* An exported activation name ("silu", ...) as cgq_act; UNSUPPORTED naming file and place otherwise. */
cgq_status cgq_act_from_name(const cgq_h5 *f, const char *where, const char *name, cgq_act *act);

/* Reads the NequIP groups of an open file into m (root attributes already read). */
cgq_status cgq_nequip_load(const cgq_h5 *f, hid_t root, cgq_model *m);
void cgq_nequip_free(cgq_nequip *nq);
/* `cgequi info` summary of a NequIP model. */
void cgq_nequip_describe(const cgq_model *m, char *buf, size_t size);

#endif
