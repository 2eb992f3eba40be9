/* model.h: the in-memory model, as loaded from a cgequi HDF5 file (docs/model-format.md). */
#ifndef CGQ_MODEL_H
#define CGQ_MODEL_H

#include <stdint.h>

#include "cgequi.h"
#include "model/irreps.h"

#define CGQ_MAX_LAYERS 16
#define CGQ_MAX_CORRELATION 4
#define CGQ_MAX_FC_LAYERS 8
#define CGQ_MAX_SH_L 3
#define CGQ_MAX_SPECIES 128 /* one-hot node attributes live on the stack */

typedef enum cgq_act { CGQ_ACT_IDENTITY, CGQ_ACT_SILU, CGQ_ACT_TANH, CGQ_ACT_SIGMOID, CGQ_ACT_SSP, CGQ_ACT_ABS } cgq_act;

/* e3nn o3.Linear: out[i_out][w,m] += pw * sum_u W[u,w] x[i_in][u,m] (+ bias on 0e outputs). */
typedef struct cgq_linear {
    cgq_irreps in, out;
    int n_ins;
    int *ins_in, *ins_out;
    double *path_weight;
    int64_t *w_offset; /* start of instruction's [mul_in][mul_out] slice in weight */
    double *weight;
    double *bias; /* [sum of 0e output muls] or NULL */
} cgq_linear;

typedef enum cgq_tp_mode { CGQ_TP_UVW = 0, CGQ_TP_UVU = 1, CGQ_TP_UUU = 2 } cgq_tp_mode;

/* e3nn TensorProduct with explicit W3j per instruction. */
typedef struct cgq_tp {
    cgq_irreps in1, in2, out;
    int n_ins;
    int *i1, *i2, *io, *mode, *has_weight;
    double *path_weight;
    double **w3j;      /* [n_ins] each [2l1+1][2l2+1][2lo+1] */
    int64_t *w_offset; /* per instruction into the (internal or external) weight vector */
    int64_t weight_numel;
    int external_weights;
    double *weight; /* internal weights or NULL */
} cgq_tp;

/* e3nn FullyConnectedNet: hidden x <- cst*act(x @ W / sqrt(h_in)); last x @ W / sqrt(h_in). */
typedef struct cgq_fcnet {
    int n_layers;
    int h[CGQ_MAX_FC_LAYERS + 1];
    double *W[CGQ_MAX_FC_LAYERS]; /* [h[k]][h[k+1]] */
    cgq_act act;
    double act_cst;
} cgq_fcnet;

/* One output block of MACE's SymmetricContraction, with U kept sparse:
 * B[c,m] = sum_nu sum_{nonzeros (m,i_1..i_nu,k,val) of U_nu} val * W_nu[e,k,c] * prod_p A[c,i_p]. */
typedef struct cgq_contraction {
    int correlation;
    int l_out, parity_out;
    int K[CGQ_MAX_CORRELATION + 1];
    int64_t nnz[CGQ_MAX_CORRELATION + 1];
    int32_t *u_m[CGQ_MAX_CORRELATION + 1];
    int32_t *u_idx[CGQ_MAX_CORRELATION + 1]; /* [nnz][nu] */
    int32_t *u_k[CGQ_MAX_CORRELATION + 1];
    double *u_val[CGQ_MAX_CORRELATION + 1];
    double *W[CGQ_MAX_CORRELATION + 1]; /* [n_elements][K][C] */
} cgq_contraction;

typedef struct cgq_mace_layer {
    int residual, density;
    double avg_num_neighbors;
    cgq_irreps target; /* irreps after `linear`; reshaped to [C][D] for the product */
    cgq_linear linear_up, linear;
    cgq_tp conv_tp, skip_tp;
    cgq_fcnet radial_mlp, density_fn;
    /* product block */
    int use_sc, agnostic;
    int channels, coupling_dim; /* C and D of the reshape */
    int n_contractions;
    cgq_contraction *contractions;
    cgq_irreps product_out;
    cgq_linear product_linear;
} cgq_mace_layer;

typedef enum cgq_readout_kind { CGQ_READOUT_LINEAR, CGQ_READOUT_NONLINEAR, CGQ_READOUT_NONLINEAR_BIAS } cgq_readout_kind;

typedef struct cgq_readout {
    cgq_readout_kind kind;
    int layer;      /* features of this layer are read */
    int head_index; /* output column used */
    int num_heads, mask_heads;
    cgq_act act;
    double act_cst;
    cgq_linear linear_1, linear_mid, linear_2; /* linear_1 only for CGQ_READOUT_LINEAR */
} cgq_readout;

struct cgq_model {
    char family[16];
    char model_class[64];
    char head[64];
    char source[256]; /* versions, exporter, file */
    double r_max;
    int n_species;
    int32_t *species_z;
    int lmax_sh;
    /* radial embedding */
    int n_bessel;
    double *bessel_weights;
    double bessel_prefactor;
    double cutoff_p, cutoff_r_max;
    int apply_cutoff;
    /* Agnesi distance transform of r before the Bessel basis (MACE-MP-0b2 and later) */
    int agnesi;
    double agnesi_q, agnesi_p, agnesi_a;
    double *agnesi_radii; /* [n_species] covalent radii */
    /* ZBL pair repulsion, per edge onto the receiver, scaled like the interaction energy */
    int zbl;
    double zbl_c[4], zbl_a_exp, zbl_a_prefactor, zbl_p;
    double *zbl_radii; /* [n_species] covalent radii */
    /* energies */
    double *atomic_energies; /* [n_species] */
    double scale, shift;
    cgq_linear node_embedding;
    int n_layers;
    cgq_mace_layer layers[CGQ_MAX_LAYERS];
    int n_readouts;
    cgq_readout readouts[CGQ_MAX_LAYERS];
    int n_selftests;
    struct cgq_nequip *nequip; /* model_family "nequip" (model/nequip.h); NULL for MACE */
};

#endif
