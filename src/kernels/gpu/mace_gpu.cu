/* mace_gpu.cu: the GPU backend. The reference math (the kernels/cpu sources and kernels/mace_steps.h) is compiled
 * here as device code, and every step runs as one GPU thread per node or edge, with the same
 * receiver-owned / sender-owned reductions as the CPU: deterministic, no atomics. The graph and the
 * sender-sorted edge index come from the host each call; positions in, energies and edge gradients
 * out; device buffers are reused and only grow. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "kernels/gpu/vendor.h"

extern "C" {
#include "common/error.h"
#include "graph/sender_index.h"
#include "model/linear_compose.h"
}
#include "kernels/gpu/mace_gpu.h"

/* the reference math, compiled for host and device in this translation unit */
#include "kernels/cpu/activation.c"
#include "kernels/cpu/fcnet.c"
#include "kernels/cpu/linear.c"
#include "kernels/cpu/radial.c"
#include "kernels/cpu/sh.c"
#include "kernels/cpu/symmetric_contraction.c"
#include "kernels/cpu/tensor_product.c"
#include "kernels/mace_steps.h"
#include "kernels/nequip_steps.h"

#include "kernels/gpu/conv.cuh"
#include "kernels/gpu/gemm.cuh"
#include "kernels/gpu/graph_build.cuh"
#include "kernels/gpu/pairs_build.cuh"
#include "kernels/gpu/node_ops.cuh"
#include "kernels/gpu/radial_spline.cuh"
#include "kernels/gpu/radial_conv.cuh"
#include "kernels/gpu/species_conv.cuh"
#include "kernels/gpu/readout.cuh"
#include "kernels/gpu/symcon.cuh"
#include "kernels/gpu/rtc.cuh"
#include "kernels/gpu/symcon_gen.cuh"

#define CGQ_CHECK_GPU(call)                                                                                  \
    do {                                                                                                     \
        cudaError_t err_ = (call);                                                                           \
        if (err_ != cudaSuccess)                                                                             \
            return cgq_fail(err_ == cudaErrorMemoryAllocation ? CGQ_STATUS_OUT_OF_MEMORY : CGQ_STATUS_DEVICE_ERROR, \
                            "GPU call %s failed at %s:%d: %s", #call, __FILE__, __LINE__, cudaGetErrorString(err_)); \
    } while (0)

#define CGQ_GPU_THREADS 128
#define CGQ_GPU_MAX_PARALLEL (132 * 4 * CGQ_GPU_THREADS) /* threads with their own scratch */
static int blocks_for(int64_t n, int per_cap = 1); /* grids of CGQ_GPU_THREADS (defined with the kernels below) */

/* Work buffers of the v2 path, reused across calls and grown by padding. */
struct v2_buffers {
    double *w = nullptr, *act = nullptr, *gw = nullptr, *gtmp = nullptr, *gef = nullptr; /* per chunk of edges */
    double *gx1e = nullptr;                                                              /* per chunk of edges */
    double *gY = nullptr, *gcut = nullptr;                                               /* per edge */
    double *node_tmp = nullptr;                                                          /* 2 x N x max target */
    double *kept = nullptr;    /* every layer's MLP outputs and activations, kept for the reverse pass */
    double *edge_in = nullptr; /* float: Y, edge features and cutoff of every edge */
    double *dens = nullptr;    /* density MLP per chunk edge: output, activations, dE/d output, dE/d features */
    double *gr = nullptr;      /* per chunk edge: dE/dr through the radial tables */
    double *senders = nullptr; /* per node: a chunk's sender flags, their scan and list (sender_sums) */
    double *sc_qg = nullptr, *sc_v = nullptr; /* float: species_conv's Q or G of a piece of receivers, and its V */
    double *groups = nullptr; /* int32: the product basis's nodes by species (symcon_group_nodes) */
    size_t caps[17] = {0};
};

/* cgq_evaluate_pairs: the candidate list on the device (set once per re-neighboring) and the per-step
 * buffers that turn positions into the graph and edge gradients into forces. */
struct pair_state {
    bool set = false;
    int64_t n_points = 0, n_local = 0, n_nodes = 0, n_cand = 0, n_sorted = 0;
    void *buf = nullptr, *step = nullptr, *build = nullptr; /* build: build_pairs's cells and counts */
    size_t cap = 0, step_cap = 0, build_cap = 0;
    /* buf: candidate rows and their sender-node grouping (order: candidate ids grouped by sender node) */
    int64_t *cand_row = nullptr, *cand_srow = nullptr;
    int32_t *cand_recv = nullptr, *cand = nullptr, *order = nullptr, *point_node = nullptr, *species = nullptr;
    /* step: positions, flags and scans, the graph's row pointers, its summary, outputs (force, virial and
     * node_virial adjacent: one download) */
    double *x = nullptr, *force = nullptr, *node_virial = nullptr, *virial = nullptr;
    double *bpart = nullptr; /* k_node_forces's blocks' parts of the virial, summed by its last block */
    unsigned *ticket = nullptr; /* k_node_forces's finished blocks (0 between launches) */
    int32_t *keep = nullptr, *skeep = nullptr;
    pair_summary *summary = nullptr;
    int64_t *escan = nullptr, *sscan = nullptr, *tiles = nullptr, *row_ptr = nullptr, *srow = nullptr;
    int64_t n_edges = 0;                  /* this step's (pairs_count) */
    /* step too: the edges, laid for n_cand of them (pairs_count fills them before it knows the step's count) */
    int32_t *sender = nullptr, *sedge = nullptr, *erecv = nullptr;
    double *vec = nullptr;
    cudaEvent_t summary_ready = nullptr;  /* the summary's download: what the host waits for */
    std::vector<int64_t> h_row, point_id; /* the rows on the host where the edges need chunks; ids for messages */
    std::vector<int32_t> snode;           /* set_pairs: each candidate's sender node (kept: no per-call allocation) */
};

/* The node side of a NequIP layer on the GEMM kernels (nequip_gpu.cuh): linear_1 and linear_2 weights, and the
 * self-connection with the type embedding folded in (a species-weighted skip product), all in the working precision. */
struct nq_node_plan {
    const double *w1 = nullptr, *w2 = nullptr, *wsc = nullptr; /* device, T data in double* (as the float model) */
    const int32_t *gate_start = nullptr, *gate_code = nullptr; /* device: the gate's reverse terms (build_gate_plan) */
    cgq_tp sc;                                                 /* host: the folded self-connection */
    std::vector<double> sc_weight;
    std::vector<int64_t> sc_offset;
    skip_plan skip;
};

/* A host linear whose arrays it owns (plans built at load; lin_gemm_fwd and lin_gemm_bwd read its instructions) */
struct owned_linear {
    cgq_linear l{};
    std::vector<int> ins_in, ins_out;
    std::vector<int64_t> w_offset;
    std::vector<double> path_weight;
    void add(int i, int o, int64_t w_off, double pw) {
        ins_in.push_back(i), ins_out.push_back(o), w_offset.push_back(w_off), path_weight.push_back(pw);
        l.n_ins = (int)ins_in.size(), l.ins_in = ins_in.data(), l.ins_out = ins_out.data();
        l.w_offset = w_offset.data(), l.path_weight = path_weight.data();
    }
};

/* Layer 0's product linear composed with layer 1's linear_up (build_up_compose): hu_1 = B_0 (Wp Wu) (+ a row per
 * species, Wu sc_0, where layer 0 has a residual skip), and h_0 formed only in its first blocks, those that something
 * else reads (layer 0's readouts, layer 1's composed readout); both from B_0 in one launch. The reverse: dE/dB_0 =
 * dE/dhu_1 (Wp Wu)^T + dE/dh_0 Wp^T over those blocks. */
struct up_compose_plan {
    bool ok = false;
    owned_linear comp;         /* B_0 -> hu_1: instructions of cgq_linear_compose, weights below */
    owned_linear head;         /* B_0 -> h_0's first blocks: the product linear's instructions into them */
    const double *w = nullptr; /* comp's weights on the device in double; w_f in float (as the float model) */
    const double *w_f = nullptr;
    const double *rows = nullptr; /* [n_species][hu_1's dim]: Wu sc_0 per species, or null */
    template <class T>
    const T *weights() const {
        return reinterpret_cast<const T *>(sizeof(T) == sizeof(float) ? w_f : w);
    }
};

struct cgq_gpu {
    const cgq_model *host_model;
    cgq_model *dev_model; /* device copy of the model struct (pointers to device arrays) */
    cgq_model shadow;     /* host copy of *dev_model: device pointers, host-readable sizes */
    cgq_model *dev_model_f = nullptr; /* float: the same with float weight arrays (in the double* fields) */
    cgq_model shadow_f;
    double *embed_table = nullptr; /* the species embedding's row per species (embed_table) */
    symcon_groups pairs_groups;    /* the pairs steps' nodes by species (symcon_group_nodes), where pairs_groups_ok */
    bool pairs_groups_ok = false;
    /* layer 0's linear_up and residual skip, a row per species (build_layer0_rows); null: the node GEMMs run */
    double *layer0_rows = nullptr;
    int layer0_sc = 0;                    /* the rows' skip columns after the linear_up's (0: none) */
    std::vector<double> layer0_rows_host; /* the same on the host, until build_up_compose has read the skip's */
    up_compose_plan up_comp;              /* layer 0's product linear into layer 1's linear_up (CGQ_GPU_UP_COMPOSE=0: off) */
    int fp32;
    void *arena_f = nullptr; /* the working precision's arrays (NequIP: laid out like arena; MACE v2: v2_arrays) */
    size_t arena_f_cap = 0;
    conv_plan plans[CGQ_MAX_LAYERS];
    symcon_plan symcon[CGQ_MAX_LAYERS];
    skip_plan skips[CGQ_MAX_LAYERS];
    linskip_plan linskip[CGQ_MAX_LAYERS]; /* a non-residual layer's linear and skip as one GEMM (node_ops.cuh) */
    readout_plan readouts[CGQ_MAX_LAYERS]; /* MACE v2: the readouts as dense matrices (readout.cuh) */
    readout_plan ro_composed;   /* the last layer's readout with its product linear and skip (build_composed_readout) */
    readout_merge ro_merge;     /* the layer below's linear readout merged into it (CGQ_GPU_RO_MERGE=0: off) */
    int ro_composed_index = -1; /* the readout it stands for */
    radial_table radial[CGQ_MAX_LAYERS]; /* fp32: the radial MLPs as tables (all layers or none) */
    radial_table wtab[CGQ_MAX_LAYERS];   /* fp32 MACE: the convolution weights' tables (build_weight_tables) */
    bool fused_conv[CGQ_MAX_LAYERS] = {false}; /* the layer's forward runs radial_conv.cuh (choose_fused_conv) */
    species_conv sconv;                        /* layer 0 factored through the senders' species (species_conv.cuh) */
    std::vector<int32_t> sconv_classes;        /* the class table last uploaded to sconv.cls */
    std::vector<conv_ins> sconv_ins;           /* host copy of layer 0's instructions (species_conv's GEMMs) */
    sc_linear sc_lin; /* layer 0's linear composed into species_conv's GEMM folds (build_sc_linear) */
    /* the steps' VL (sc_linear) was formed for this class table in this buffer, and depends on nothing else (the
     * classes' features are the embedding's linear_up, fixed per species): formed again only when these change */
    std::vector<int32_t> sc_lin_classes;
    const float *sc_lin_at = nullptr;
    int v2; /* every layer has the forms the v2 kernels cover (else the v1 steps run the model) */
    cgq_blas blas = nullptr; /* the radial MLP's products (gemm.cuh); none in HIP builds */
    int64_t max_chunk_edges = INT64_MAX; /* CGQ_GPU_MAX_CHUNK_EDGES: tests force several edge chunks with it */
    bool recompute_mlp = false;          /* CGQ_GPU_RECOMPUTE_MLP: tests force the large-system path with it */
    size_t smem_optin;
    int cc_major = 0; /* compute capability (radial_tc_fits) */
    v2_buffers vb;
    std::vector<void *> allocations;
    size_t model_bytes = 0;
    double *arena = nullptr;
    size_t arena_cap = 0;
    double *scratch = nullptr;
    size_t scratch_cap = 0;
    void *graph_buf = nullptr; /* species, row_ptr, sender, vec, srow, sedge, erecv */
    size_t graph_cap = 0;
    void *graph_stage = nullptr; /* pinned host copy of graph_buf (without erecv): one transfer per call */
    size_t stage_cap = 0;
    void *xstage = nullptr;   /* pinned: the rows of a per-layer exchange (exchange_rows) */
    size_t xstage_cap = 0;    /* bytes, as every cap here */
    void *xinc = nullptr;     /* device: the rows an exchange sends (packed) or the sums it adds to local rows */
    size_t xinc_cap = 0;
    /* the caller's staging (cgq_exchange.stage_rows, stage_rows_in), pinned by cudaHostRegister: [0] the rows that go
     * out, [1] those that come in; xext_bytes: the registered size (0: not registered, rows go through pageable
     * copies) */
    char *xext[2] = {nullptr, nullptr};
    size_t xext_bytes[2] = {0, 0};
    int32_t *xnodes = nullptr; /* device: the rows form's send_nodes for this evaluation (exchange_begin) */
    size_t xnodes_cap = 0;
    double *energy_stage = nullptr; /* pinned: the node energies, copied while the reverse runs (energy_download) */
    size_t energy_cap = 0;
    cudaStream_t side = nullptr; /* independent launches beside the default stream (side_stream); null: none */
    cudaEvent_t side_fork = nullptr, side_join = nullptr;
    pair_state pairs;
    /* free_gpu_bytes: the free memory last asked for, what this evaluator held then, and that step's edges */
    size_t free_seen = 0, free_held = 0;
    int64_t free_edges = -1;
    cgq_nequip *dev_nequip = nullptr; /* NequIP models: the device copy of the model's NequIP part */
    cgq_nequip nq_shadow;             /* host copy of *dev_nequip: device pointers, host-readable sizes */
    int nq_v2 = 0;                    /* NequIP on the parallel kernels (nequip_gpu.cuh) */
    int nq_groups[CGQ_MAX_LAYERS] = {0};
    conv_plan nq_plans[CGQ_MAX_LAYERS][CONV_MAX_GROUPS];
    cgq_fcnet nq_mlp[CGQ_MAX_LAYERS], nq_mlp_f[CGQ_MAX_LAYERS]; /* edge MLPs as GEMM views: double, float weights */
    nq_node_plan nq_node[CGQ_MAX_LAYERS];
    double *edge_grad = nullptr;      /* NequIP models: dE/dv per edge */
    size_t edge_grad_cap = 0;
};

/* ---- model upload ------------------------------------------------------------------------------- */
template <class T>
static cgq_status upload(cgq_gpu *g, T **field, size_t count) {
    if (!*field || count == 0) {
        *field = nullptr;
        return CGQ_STATUS_OK;
    }
    void *d = nullptr;
    CGQ_CHECK_GPU(cudaMalloc(&d, sizeof(T) * count));
    g->allocations.push_back(d);
    g->model_bytes += sizeof(T) * count;
    CGQ_CHECK_GPU(cudaMemcpy(d, *field, sizeof(T) * count, cudaMemcpyHostToDevice));
    *field = static_cast<T *>(d);
    return CGQ_STATUS_OK;
}

/* Copies a vector to the device, kept with the model's arrays: (&dst, v) sets dst to the device copy of v (a function
 * object: build_readout_plan's Upload) */
struct device_uploader {
    cgq_gpu *g;
    template <class T>
    cgq_status operator()(const T **dst, const std::vector<T> &v) const {
        T *p = const_cast<T *>(v.data());
        CGQ_TRY(upload(g, &p, v.size()));
        *dst = p;
        return CGQ_STATUS_OK;
    }
};

static cgq_status upload_linear(cgq_gpu *g, cgq_linear *l) {
    int64_t numel = 0, nbias = 0;
    for (int k = 0; k < l->n_ins; k++) numel += (int64_t)l->in.b[l->ins_in[k]].mul * l->out.b[l->ins_out[k]].mul;
    for (int i = 0; i < l->out.n; i++)
        if (l->out.b[i].l == 0 && l->out.b[i].parity == 1) nbias += l->out.b[i].mul;
    const size_t n = (size_t)l->n_ins;
    CGQ_TRY(upload(g, &l->weight, (size_t)numel));
    CGQ_TRY(upload(g, &l->bias, (size_t)nbias));
    CGQ_TRY(upload(g, &l->ins_in, n));
    CGQ_TRY(upload(g, &l->ins_out, n));
    CGQ_TRY(upload(g, &l->path_weight, n));
    return upload(g, &l->w_offset, n);
}

static cgq_status upload_tp(cgq_gpu *g, cgq_tp *t) {
    const size_t n = (size_t)t->n_ins;
    std::vector<double *> w3j(n);
    for (size_t k = 0; k < n; k++) {
        const int d1 = 2 * t->in1.b[t->i1[k]].l + 1, d2 = 2 * t->in2.b[t->i2[k]].l + 1, d3 = 2 * t->out.b[t->io[k]].l + 1;
        w3j[k] = t->w3j[k];
        CGQ_TRY(upload(g, &w3j[k], (size_t)(d1 * d2 * d3)));
    }
    double **wp = w3j.data();
    CGQ_TRY(upload(g, &wp, n));
    t->w3j = wp;
    if (!t->external_weights) CGQ_TRY(upload(g, &t->weight, (size_t)t->weight_numel));
    CGQ_TRY(upload(g, &t->i1, n));
    CGQ_TRY(upload(g, &t->i2, n));
    CGQ_TRY(upload(g, &t->io, n));
    CGQ_TRY(upload(g, &t->mode, n));
    CGQ_TRY(upload(g, &t->has_weight, n));
    CGQ_TRY(upload(g, &t->path_weight, n));
    return upload(g, &t->w_offset, n);
}

/* the weight matrices of an MLP (cgq_fcnet, cgq_nq_mlp) */
template <class MLP>
static cgq_status upload_mlp(cgq_gpu *g, MLP *f) {
    for (int k = 0; k < f->n_layers; k++) CGQ_TRY(upload(g, &f->W[k], (size_t)f->h[k] * f->h[k + 1]));
    return CGQ_STATUS_OK;
}

static cgq_status embed_table(cgq_gpu *g, const cgq_model *hm); /* after the kernels */
static cgq_status build_layer0_rows(cgq_gpu *g);                /* likewise */
static cgq_status build_up_compose(cgq_gpu *g);                 /* likewise */

static cgq_status upload_model(cgq_gpu *g, const cgq_model *hm) {
    cgq_model m = *hm; /* shallow copy: pointer fields are replaced by device copies */
    CGQ_TRY(upload(g, &m.species_z, (size_t)m.n_species));
    CGQ_TRY(upload(g, &m.bessel_weights, (size_t)m.n_bessel));
    CGQ_TRY(upload(g, &m.atomic_energies, (size_t)m.n_species));
    CGQ_TRY(upload(g, &m.agnesi_radii, m.agnesi ? (size_t)m.n_species : 0));
    CGQ_TRY(upload(g, &m.zbl_radii, m.zbl ? (size_t)m.n_species : 0));
    CGQ_TRY(upload_linear(g, &m.node_embedding));
    for (int t = 0; t < m.n_layers; t++) {
        cgq_mace_layer *ly = &m.layers[t];
        CGQ_TRY(upload_linear(g, &ly->linear_up));
        CGQ_TRY(upload_linear(g, &ly->linear));
        CGQ_TRY(upload_linear(g, &ly->product_linear));
        CGQ_TRY(upload_tp(g, &ly->conv_tp));
        CGQ_TRY(upload_tp(g, &ly->skip_tp));
        CGQ_TRY(upload_mlp(g, &ly->radial_mlp));
        if (ly->density) CGQ_TRY(upload_mlp(g, &ly->density_fn));
        std::vector<cgq_contraction> cs(ly->contractions, ly->contractions + ly->n_contractions);
        const int E = ly->agnostic ? 1 : m.n_species;
        for (cgq_contraction &c : cs)
            for (int nu = 1; nu <= c.correlation; nu++) {
                const size_t nnz = (size_t)c.nnz[nu];
                CGQ_TRY(upload(g, &c.u_m[nu], nnz));
                CGQ_TRY(upload(g, &c.u_k[nu], nnz));
                CGQ_TRY(upload(g, &c.u_val[nu], nnz));
                CGQ_TRY(upload(g, &c.u_idx[nu], nnz * nu));
                CGQ_TRY(upload(g, &c.W[nu], (size_t)E * c.K[nu] * ly->channels));
            }
        cgq_contraction *cp = cs.data();
        CGQ_TRY(upload(g, &cp, cs.size()));
        ly->contractions = cp;
    }
    for (int r = 0; r < m.n_readouts; r++) {
        cgq_readout *ro = &m.readouts[r];
        CGQ_TRY(upload_linear(g, &ro->linear_1));
        if (ro->kind == CGQ_READOUT_NONLINEAR_BIAS) CGQ_TRY(upload_linear(g, &ro->linear_mid));
        if (ro->kind != CGQ_READOUT_LINEAR) CGQ_TRY(upload_linear(g, &ro->linear_2));
    }
    g->shadow = m;
    cgq_model *mp = &m;
    CGQ_TRY(upload(g, &mp, 1));
    g->dev_model = mp;
    return embed_table(g, hm);
}

/* ---- float copy of the weights the v2 kernels read (the double steps keep the double model) ----------- */
static cgq_status upload_as_float(cgq_gpu *g, double **field, const double *host, size_t count) {
    if (!host || count == 0) {
        *field = nullptr;
        return CGQ_STATUS_OK;
    }
    std::vector<float> f(host, host + count);
    float *d = f.data();
    CGQ_TRY(upload(g, &d, count));
    *field = reinterpret_cast<double *>(d);
    return CGQ_STATUS_OK;
}

static cgq_status linear_float(cgq_gpu *g, cgq_linear *dst, const cgq_linear *h) {
    int64_t numel = 0, nbias = 0;
    for (int k = 0; k < h->n_ins; k++) numel += (int64_t)h->in.b[h->ins_in[k]].mul * h->out.b[h->ins_out[k]].mul;
    for (int i = 0; i < h->out.n; i++)
        if (h->out.b[i].l == 0 && h->out.b[i].parity == 1) nbias += h->out.b[i].mul;
    CGQ_TRY(upload_as_float(g, &dst->weight, h->weight, (size_t)numel));
    return upload_as_float(g, &dst->bias, h->bias, h->bias ? (size_t)nbias : 0);
}

static cgq_status upload_model_f32(cgq_gpu *g) {
    const cgq_model *hm = g->host_model;
    cgq_model m = g->shadow;
    for (int t = 0; t < hm->n_layers; t++) {
        const cgq_mace_layer *hl = &hm->layers[t];
        cgq_mace_layer *ly = &m.layers[t];
        CGQ_TRY(linear_float(g, &ly->linear_up, &hl->linear_up));
        CGQ_TRY(linear_float(g, &ly->linear, &hl->linear));
        CGQ_TRY(linear_float(g, &ly->product_linear, &hl->product_linear));
        const cgq_tp *st = &hl->skip_tp;
        CGQ_TRY(upload_as_float(g, &ly->skip_tp.weight, st->weight, (size_t)st->weight_numel));
        std::vector<double *> w3j((size_t)st->n_ins);
        for (int k = 0; k < st->n_ins; k++) {
            const int d1 = 2 * st->in1.b[st->i1[k]].l + 1, d2 = 2 * st->in2.b[st->i2[k]].l + 1;
            const int d3 = 2 * st->out.b[st->io[k]].l + 1;
            CGQ_TRY(upload_as_float(g, &w3j[(size_t)k], st->w3j[k], (size_t)(d1 * d2 * d3)));
        }
        double **wp = w3j.data();
        CGQ_TRY(upload(g, &wp, w3j.size()));
        ly->skip_tp.w3j = wp;
        const cgq_fcnet *hf = &hl->radial_mlp;
        for (int k = 0; k < hf->n_layers; k++)
            CGQ_TRY(upload_as_float(g, &ly->radial_mlp.W[k], hf->W[k], (size_t)hf->h[k] * hf->h[k + 1]));
        const cgq_fcnet *hd = &hl->density_fn;
        for (int k = 0; hl->density && k < hd->n_layers; k++)
            CGQ_TRY(upload_as_float(g, &ly->density_fn.W[k], hd->W[k], (size_t)hd->h[k] * hd->h[k + 1]));
    }
    g->shadow_f = m;
    cgq_model *mp = &m;
    CGQ_TRY(upload(g, &mp, 1));
    g->dev_model_f = mp;
    return CGQ_STATUS_OK;
}

/* ---- v2 conv plan: the layer's instructions flattened for k_conv_fwd / k_conv_bwd ---------------- */
static bool skip_tp_is_species_linear(const cgq_model *m, const cgq_tp *tp) {
    if (tp->in2.n != 1 || tp->in2.b[0].l != 0 || tp->in2.b[0].mul != m->n_species || !tp->weight) return false;
    for (int k = 0; k < tp->n_ins; k++)
        if (tp->mode[k] != CGQ_TP_UVW || !tp->has_weight[k]) return false;
    return true;
}

/* The layer's product basis as monomials (symcon.cuh): nonzeros of every U_nu with the same output component m and
 * the same sorted A indices are folded into one monomial whose coefficient, per element and channel, is the sum of
 * u W_nu[e,k,c] over them (in double, in the file's nonzero order). Monomials are ordered by (block, m, indices), each
 * m's padded to a multiple of SYMCON_UNROLL with copies of its last code whose coefficients are zero. */
static void symcon_kernel_jobs(const cgq_gpu *g, symcon_plan *sp, const std::vector<int32_t> &codes,
                               std::vector<rtc_job> *jobs, std::vector<const void **> *dst);
/* The layer's product-basis plan; its generated kernels' sources are added to jobs (dst: where each kernel goes) */
static cgq_status build_symcon_plan(cgq_gpu *g, int t, symcon_plan *sp, std::vector<rtc_job> *jobs,
                                    std::vector<const void **> *dst) {
    const cgq_model *hm = g->host_model;
    const cgq_mace_layer *ly = &hm->layers[t];
    memset(sp, 0, sizeof *sp);
    const int C = ly->channels, D = ly->coupling_dim, E = ly->agnostic ? 1 : hm->n_species;
    if (D > SYMCON_MAX_D || ly->n_contractions > SYMCON_MAX_BLOCKS) return CGQ_STATUS_OK;
    int nf = 1;
    for (int j = 0; j < ly->n_contractions; j++) {
        if (ly->contractions[j].l_out > 3) return CGQ_STATUS_OK;
        nf = std::max(nf, ly->contractions[j].correlation);
    }
    if (nf > CGQ_MAX_CORRELATION || SYMCON_IDX_BITS * nf > 31) return CGQ_STATUS_OK;
    auto monomial_code = [&](const int32_t *idx, int nu) {
        int s[CGQ_MAX_CORRELATION];
        for (int p = 0; p < nf; p++) s[p] = p < nu ? idx[p] : D;
        std::sort(s, s + nf);
        int32_t code = 0;
        for (int p = 0; p < nf; p++) code |= s[p] << (SYMCON_IDX_BITS * p);
        return code;
    };
    /* pass 1: the monomials of each block, sorted by (m, code); mono_of: each nonzero's monomial (map entries stay
     * where they are, and are numbered once all are known), in the order pass 2 visits the nonzeros */
    std::vector<std::map<std::pair<int, int32_t>, int>> index((size_t)ly->n_contractions);
    std::vector<const int *> mono_of;
    symcon_args &a = sp->args;
    std::vector<int32_t> codes;
    for (int j = 0; j < ly->n_contractions; j++) {
        const cgq_contraction *ct = &ly->contractions[j];
        auto &ix = index[(size_t)j];
        for (int nu = 1; nu <= ct->correlation; nu++)
            for (int64_t q = 0; q < ct->nnz[nu]; q++)
                mono_of.push_back(
                    &ix.emplace(std::make_pair(ct->u_m[nu][q], monomial_code(ct->u_idx[nu] + q * nu, nu)), 0)
                         .first->second);
        symcon_block &bk = a.blk[j];
        bk.dm = 2 * ct->l_out + 1, bk.out_off = ly->product_out.b[j].offset;
        for (int m = 0; m <= bk.dm; m++) bk.mstart[m] = (int)codes.size(); /* components without monomials stay empty */
        for (auto it = ix.begin(); it != ix.end(); ++it) {
            const int m = it->first.first;
            it->second = (int)codes.size();
            codes.push_back(it->first.second);
            const auto next = std::next(it);
            if (next == ix.end() || next->first.first != m) /* m's last: pad its range (symcon_nested) */
                while ((codes.size() - bk.mstart[m]) % SYMCON_UNROLL) codes.push_back(it->first.second);
            for (int m2 = m + 1; m2 <= bk.dm; m2++) bk.mstart[m2] = (int)codes.size();
        }
    }
    a.n_blocks = ly->n_contractions, a.n_mono = (int)codes.size(), a.C = C, a.D = D, a.agnostic = ly->agnostic;
    for (int b = 0, i = 0; b < ly->target.n; b++) { /* A(ch, i) in the target irreps' own layout */
        const cgq_irrep_block &tb = ly->target.b[b];
        if (tb.mul != C) return CGQ_STATUS_OK;
        for (int mm = 0; mm < 2 * tb.l + 1 && i < D; mm++, i++)
            a.a_off[i] = tb.offset + mm, a.a_stride[i] = 2 * tb.l + 1;
    }
    /* pass 2: coefficients [E][n_mono][C] */
    std::vector<double> coef((size_t)E * a.n_mono * C, 0.0);
    size_t nz = 0;
    for (int j = 0; j < ly->n_contractions; j++) {
        const cgq_contraction *ct = &ly->contractions[j];
        for (int nu = 1; nu <= ct->correlation; nu++)
            for (int64_t q = 0; q < ct->nnz[nu]; q++) {
                const int mono = *mono_of[nz++];
                const double u = ct->u_val[nu][q];
                for (int e = 0; e < E; e++) {
                    const double *w = ct->W[nu] + ((size_t)e * ct->K[nu] + ct->u_k[nu][q]) * C;
                    double *dst = coef.data() + ((size_t)e * a.n_mono + mono) * C;
                    for (int c = 0; c < C; c++) dst[c] += u * w[c];
                }
            }
    }
    int32_t *dcode = codes.data();
    CGQ_TRY(upload(g, &dcode, codes.size()));
    a.code = dcode;
    if (g->fp32) {
        std::vector<float> cf(coef.begin(), coef.end());
        float *d = cf.data();
        CGQ_TRY(upload(g, &d, cf.size()));
        sp->coef_f = d;
    } else {
        double *d = coef.data();
        CGQ_TRY(upload(g, &d, coef.size()));
        sp->coef = d;
    }
    sp->nf = nf;
    sp->threads = CGQ_WARP;
    while (sp->threads < C) sp->threads *= 2;
    /* checked for double operands, the larger; several nodes per item where 16 bytes per index fit (not in the
     * 64 KB of older GPUs at 128 channels). The reverse splits each group into 2 items, two per block: the same
     * shared memory, twice the warps per SM (24 instead of 12 at 128 channels). CGQ_GPU_SYMCON_FWD_SPLIT and
     * CGQ_GPU_SYMCON_BWD_SPLIT: 1, 2 or 4 items per group. */
    const char *nb_env = getenv("CGQ_GPU_SYMCON_NB");
    const char *fs_env = getenv("CGQ_GPU_SYMCON_FWD_SPLIT"), *bs_env = getenv("CGQ_GPU_SYMCON_BWD_SPLIT");
    sp->split[0] = fs_env ? atoi(fs_env) : 1, sp->split[1] = bs_env ? atoi(bs_env) : 2;
    sp->gen_split[0] = fs_env ? sp->split[0] : 2, sp->gen_split[1] = sp->split[1];
    sp->grouped = symcon_bwd_smem(D, sp->threads, symcon_nb<double>(), sizeof(double)) <= g->smem_optin &&
                  !(nb_env && nb_env[0] == '1');
    sp->ok = a.n_mono > 0 && sp->threads <= 1024 && symcon_bwd_smem(D, sp->threads, 1, sizeof(double)) <= g->smem_optin;
    if (sp->ok) symcon_kernel_jobs(g, sp, codes, jobs, dst);
    return CGQ_STATUS_OK;
}

template <class T> static const T *symcon_coef(const symcon_plan &sp);
template <> const double *symcon_coef<double>(const symcon_plan &sp) { return sp.coef; }
template <> const float *symcon_coef<float>(const symcon_plan &sp) { return sp.coef_f; }

/* The product-basis kernel of nf factors for items of NB nodes in groups of G, forward or reverse */
template <class T, int NB, int G>
static const void *symcon_kernel_nb(int nf, bool rev) {
    switch (nf) {
    case 1: return rev ? (const void *)k_symcon_bwd<T, 1, NB, G> : (const void *)k_symcon_fwd<T, 1, NB, G>;
    case 2: return rev ? (const void *)k_symcon_bwd<T, 2, NB, G> : (const void *)k_symcon_fwd<T, 2, NB, G>;
    case 3: return rev ? (const void *)k_symcon_bwd<T, 3, NB, G> : (const void *)k_symcon_fwd<T, 3, NB, G>;
    default: return rev ? (const void *)k_symcon_bwd<T, 4, NB, G> : (const void *)k_symcon_fwd<T, 4, NB, G>;
    }
}

/* Nodes per item of a launch: grouped, symcon_nb split into `split` items (as many per block: the same shared
 * memory); else 1. symcon_item_size: the split of the kernel that runs (generated or generic). */
template <class T>
static int symcon_items(const symcon_plan &sp, int split) {
    constexpr int G = symcon_nb<T>();
    int s = split == 2 || split == 4 ? split : 1;
    while (s > 1 && sp.threads * s > 1024) s /= 2; /* a block's threads */
    return sp.grouped ? std::max(G / s, 1) : 1;
}
template <class T>
static int symcon_item_size(const symcon_plan &sp, bool rev) {
    return symcon_items<T>(sp, sp.gen[rev] ? sp.gen_split[rev] : sp.split[rev]);
}
template <class T>
static const void *symcon_kernel(int nf, bool grouped, int nb, bool rev) {
    constexpr int G = symcon_nb<T>();
    if (!grouped) return symcon_kernel_nb<T, 1, 1>(nf, rev);
    if (nb == G) return symcon_kernel_nb<T, G, G>(nf, rev);
    return nb == 1 ? symcon_kernel_nb<T, 1, G>(nf, rev) : symcon_kernel_nb<T, G / 2, G>(nf, rev);
}

/* The product basis's kernels generated for the plan's monomials (symcon_gen.cuh; CGQ_GPU_SYMCON_GEN=0: the generic
 * ones), for the launch shape symcon_launch gives them, as jobs for rtc_kernels; where they cannot be made the generic
 * kernels run. The generated forward takes groups split in 2 items unless CGQ_GPU_SYMCON_FWD_SPLIT says otherwise
 * (MACE-MP-0: 0.175 -> 0.125 ms, its A values in registers for 2 nodes instead of 4; the generic forward's default
 * stays 1, RESULTS session 62). */
static void symcon_kernel_jobs(const cgq_gpu *g, symcon_plan *sp, const std::vector<int32_t> &codes,
                               std::vector<rtc_job> *jobs, std::vector<const void **> *dst) {
    const char *env = getenv("CGQ_GPU_SYMCON_GEN");
#if defined(__HIPCC__)
    return; /* no generated kernels on HIP yet (rtc.cuh) */
#endif
    if (env && env[0] == '0') return;
    for (int rev = 0; rev < 2; rev++) {
        symcon_gen_in in;
        in.a = &sp->args, in.codes = &codes, in.nf = sp->nf, in.dbl = !g->fp32;
        in.g = !sp->grouped ? 1 : g->fp32 ? symcon_nb<float>() : symcon_nb<double>();
        in.nb = g->fp32 ? symcon_items<float>(*sp, sp->gen_split[rev]) : symcon_items<double>(*sp, sp->gen_split[rev]);
        in.block_threads = sp->threads * (in.g / in.nb);
        rtc_job job;
        job.name = rev ? "cgq_symcon_bwd" : "cgq_symcon_fwd";
        job.source = symcon_gen_source(in, rev, job.name.c_str());
        jobs->push_back(std::move(job));
        dst->push_back(&sp->gen[rev]);
    }
}

/* Compiles (or finds) the jobs' kernels at once and puts each where dst says; the first failure of the process is
 * reported on stderr (the generic kernels run: the same bits, slower) */
static void make_symcon_kernels(std::vector<rtc_job> *jobs, const std::vector<const void **> &dst) {
    if (jobs->empty()) return;
    rtc_kernels(jobs);
    static std::atomic<bool> told(false);
    for (size_t i = 0; i < jobs->size(); i++) {
        *dst[i] = (*jobs)[i].kernel;
        if (!(*jobs)[i].kernel && !told.exchange(true))
            fprintf(stderr, "cgequi: the product basis runs its generic kernels (%s)\n", (*jobs)[i].why.c_str());
    }
}

/* The launch of a product-basis kernel over N nodes in groups gp: grid, block and shared memory (none for the
 * generated kernels) */
template <class T>
static void symcon_launch(const symcon_plan &sp, const symcon_groups &gp, int64_t N, bool rev, void **args) {
    const int G = sp.grouped ? symcon_nb<T>() : 1, nb = symcon_item_size<T>(sp, rev);
    const int per_block = G / nb, nt = sp.threads * per_block; /* the same shared memory either way */
    /* with groups, each species' last one part full */
    const int64_t items = gp.order ? ((N + G - 1) / G + gp.n_species) * (G / nb) : (N + nb - 1) / nb;
    const int64_t blocks = (items + per_block - 1) / per_block;
    const size_t smem = sp.gen[rev] ? 0
                        : rev       ? symcon_bwd_smem(sp.args.D, nt, nb, sizeof(T))
                                    : symcon_fwd_smem(sp.args.D, nt, nb, sizeof(T));
    if (blocks)
        cudaLaunchKernel(sp.gen[rev] ? sp.gen[rev] : symcon_kernel<T>(sp.nf, sp.grouped, nb, rev),
                         dim3((unsigned)blocks), dim3(sp.threads, per_block), args, smem, 0);
}

/* The groups a layer's launch takes: the step's where the coefficients depend on the species, else consecutive nodes */
static symcon_groups symcon_layer_groups(const symcon_plan &sp, const symcon_groups &step, int64_t N) {
    symcon_groups gp;
    gp.n_nodes = N;
    if (sp.grouped && !sp.args.agnostic) gp = step;
    return gp;
}

/* B = the product basis of A for N nodes */
template <class T>
static void symcon_forward(const symcon_plan &sp, const symcon_groups &step, int64_t N, const int32_t *species,
                           const T *A, int64_t lda, T *B, int64_t ldb) {
    symcon_args a = sp.args;
    symcon_groups gp = symcon_layer_groups(sp, step, N);
    const T *cf = symcon_coef<T>(sp);
    void *args[] = {&a, &gp, &cf, &species, &A, &lda, &B, &ldb};
    symcon_launch<T>(sp, gp, N, false, args);
}

/* gA = dE/dA from gB (overwrites) */
template <class T>
static void symcon_backward(const symcon_plan &sp, const symcon_groups &step, int64_t N, const int32_t *species,
                            const T *A, int64_t lda, const T *gB, int64_t ldgb, T *gA, int64_t ldga) {
    symcon_args a = sp.args;
    symcon_groups gp = symcon_layer_groups(sp, step, N);
    const T *cf = symcon_coef<T>(sp);
    void *args[] = {&a, &gp, &cf, &species, &A, &lda, &gB, &ldgb, &gA, &ldga};
    symcon_launch<T>(sp, gp, N, true, args);
}

static cgq_status build_skip_plan(cgq_gpu *g, const cgq_tp *tp, skip_plan *p) {
    if (!(p->ok = skip_gemm_ok(tp))) return CGQ_STATUS_OK;
    std::vector<double> diag;
    for (int k = 0; k < tp->n_ins; k++) {
        const int d = 2 * tp->in1.b[tp->i1[k]].l + 1;
        p->off.push_back((int)diag.size());
        for (int c = 0; c < d; c++) diag.push_back(tp->w3j[k][c * d + c]);
    }
    CGQ_TRY(upload_as_float(g, &p->diag_f, diag.data(), diag.size()));
    p->diag = diag.data();
    return upload(g, &p->diag, diag.size());
}

/* The in1 blocks of a uvu convolution split into groups that the kernels run one after another: each group has
 * one multiplicity and at most one block per degree l (held as xv[l^2 + a]; MACE's hidden irreps, 128x0e+128x1o,
 * are one group; NequIP's 16x0e+16x0o+16x1o+16x1e two: 0e+1o and 0o+1e). Blocks go to the first group that has
 * their multiplicity and no block of their l. Returns the group of each block. */
static std::vector<int> conv_groups(const cgq_tp *tp, int *n_groups) {
    std::vector<int> grp(tp->in1.n);
    std::vector<std::vector<int>> members;
    for (int b = 0; b < tp->in1.n; b++) {
        const cgq_irrep_block &B = tp->in1.b[b];
        int q = 0;
        for (; q < (int)members.size(); q++) {
            bool fits = tp->in1.b[members[q][0]].mul == B.mul;
            for (int o : members[q]) fits = fits && tp->in1.b[o].l != B.l;
            if (fits) break;
        }
        if (q == (int)members.size()) members.emplace_back();
        members[q].push_back(b);
        grp[b] = q;
    }
    *n_groups = (int)members.size();
    return grp;
}

/* The reverse keeps G (C x g_dim) in shared memory for the whole block; for wide models few blocks then fit on an SM
 * (the per-block limit is about the SM's memory). Its slots are independent (every output is per edge), so it takes
 * more of them until 512 threads can be resident per SM by shared memory; tabled: with the weight table's staged
 * values (conv_weights). Picks (H100): MACE-MP-0 fp32 with weight tables 256 threads in layer 1 (session 17: 128
 * threads took 5.64 ms, 256 4.65), fp64 layer 1 256; the water model 128. Earlier, every layer forced to one size
 * (MP-0 fp32 before the radial tables, 5,184 atoms): 128 threads 109.5 ms/step, 256: 105.8, 512: 107.2 (within run-to-run
 * spread); the water model's reverse 0.75 / 0.88 / 1.22 ms. */
static void choose_bwd_slots(const cgq_gpu *g, conv_plan *p, bool tabled) {
    const size_t es = g->fp32 ? sizeof(float) : sizeof(double);
    const int max_bwd = g->fp32 ? conv_bwd_max_threads<float>() : conv_bwd_max_threads<double>();
    p->slots_bwd = p->slots, p->threads_bwd = p->threads;
    for (;;) {
        const size_t per_sm = g->smem_optin / std::max<size_t>(conv_bwd_smem(*p, es, tabled), 1);
        if (per_sm * (size_t)p->threads_bwd >= 512 || 2 * p->threads_bwd > max_bwd) break;
        conv_plan q = *p;
        q.slots_bwd *= 2, q.threads_bwd *= 2;
        if (conv_bwd_smem(q) > g->smem_optin || conv_bwd_smem(q, es, tabled) > g->smem_optin) break;
        p->slots_bwd = q.slots_bwd, p->threads_bwd = q.threads_bwd;
    }
}

/* The std kernels run unless CGQ_GPU_CONV_STD=0 (the general ones, for comparisons and their tests) */
static bool conv_std_wanted() {
    const char *env = getenv("CGQ_GPU_CONV_STD");
    return !(env && env[0] == '0');
}

/* Whether the plan's instructions are conv_std_at(n_in1, lmax_sh)'s (l1, l2, l3 in that order) with every in1 block
 * l < n_in1 present, instruction q's C weights at q C, and single float sums (the std kernels' form) */
static bool conv_std_matches(const conv_plan &p, const std::vector<conv_ins> &ins, const std::vector<conv_block> &in1b,
                             int lmax_sh) {
    if (p.double_sums || !conv_std_instantiated(p.n_in1, p.nY) || p.n_ins != conv_std_count(p.n_in1, lmax_sh) ||
        p.wn != (int64_t)p.n_ins * p.C)
        return false;
    for (int l = 0; l < p.n_in1; l++)
        if (in1b[l].d != 2 * l + 1) return false;
    for (int q = 0; q < p.n_ins; q++) {
        const conv_std_ins I = conv_std_at(p.n_in1, lmax_sh, q);
        const conv_ins &k = ins[q];
        if (k.l12 != I.l1 * 4 + I.l2 || k.d1 != 2 * I.l1 + 1 || k.d2 != 2 * I.l2 + 1 || k.d3 != 2 * I.l3 + 1 ||
            k.y_off != I.l2 * I.l2 || k.g_off != I.g_off || k.c_off != I.c_off || k.w_off != (int64_t)q * p.C)
            return false;
    }
    return true;
}

/* The plan of group `group` of the layer's convolution tp (conv_groups): its instructions, the output blocks they
 * write (each output block must be written by one group; blocks no instruction writes go with group 0, as zeros),
 * shared-memory sizes and block shapes. p->ok = 0 where the form is not covered (the caller runs the v1 steps). */
static cgq_status build_conv_group(cgq_gpu *g, const cgq_tp *tp, int lmax_sh, int group, int double_sums,
                                   conv_plan *p) {
    memset(p, 0, sizeof *p);
    p->double_sums = double_sums;
    int n_groups = 0;
    const std::vector<int> grp = conv_groups(tp, &n_groups);
    std::vector<int> out_grp(tp->out.n, -1), mine;
    bool ok = tp->external_weights && lmax_sh <= CGQ_MAX_SH_L && (lmax_sh + 1) * (lmax_sh + 1) <= CONV_MAX_Y;
    for (int k = 0; k < tp->n_ins; k++) {
        const cgq_irrep_block *B1 = &tp->in1.b[tp->i1[k]], *B2 = &tp->in2.b[tp->i2[k]];
        ok = ok && tp->mode[k] == CGQ_TP_UVU && B2->mul == 1 && tp->has_weight[k] && B2->offset == B2->l * B2->l;
        ok = ok && tp->out.b[tp->io[k]].mul == B1->mul && B1->l <= 3;
        int &og = out_grp[tp->io[k]];
        ok = ok && (og < 0 || og == grp[tp->i1[k]]);
        og = grp[tp->i1[k]];
        if (grp[tp->i1[k]] == group) mine.push_back(k);
    }
    int C = 0, NL1 = 0;
    std::vector<conv_block> in1b(4, conv_block{0, 0, 0});
    for (int b = 0; b < tp->in1.n; b++)
        if (grp[b] == group) {
            const int l = tp->in1.b[b].l;
            C = tp->in1.b[b].mul, NL1 = std::max(NL1, l + 1);
            if (l <= 3) in1b[l] = {tp->in1.b[b].offset, 2 * l + 1, l * l};
        }
    ok = ok && group < n_groups && NL1 <= 4 && NL1 * NL1 <= CONV_MAX_XDIM && C <= 1024 && !mine.empty();
    if (!ok) return CGQ_STATUS_OK;
    in1b.resize(NL1);
    std::vector<conv_block> outb;
    std::vector<int> local(tp->out.n, -1);
    int acc = 0, g_dim = 0;
    for (int b = 0; b < tp->out.n; b++)
        if (out_grp[b] == group || (out_grp[b] < 0 && group == 0)) {
            local[b] = (int)outb.size();
            outb.push_back({tp->out.b[b].offset, 2 * tp->out.b[b].l + 1, acc});
            acc += outb.back().d;
        }
    std::vector<conv_ins> ins(mine.size());
    std::vector<double> cg;
    std::vector<int> p_ins, p_a, p_c;
    for (size_t q = 0; q < mine.size(); q++) {
        const int k = mine[q];
        conv_ins &c = ins[q];
        const cgq_irrep_block *B1 = &tp->in1.b[tp->i1[k]], *B2 = &tp->in2.b[tp->i2[k]];
        const conv_block &ob = outb[local[tp->io[k]]];
        c.d1 = 2 * B1->l + 1, c.d2 = 2 * B2->l + 1, c.d3 = ob.d, c.l12 = B1->l * 4 + B2->l;
        c.x_off = B1->offset, c.xa_off = B1->l * B1->l, c.y_off = B2->offset;
        c.acc_off = ob.acc_off, c.out_off = ob.off;
        c.g_off = g_dim, g_dim += c.d1 * c.d2;
        c.p_off = (int)p_ins.size(), c.c_off = (int)cg.size();
        c.w_off = tp->w_offset[k], c.pw = tp->path_weight[k], c.pwf = (float)c.pw;
        cg.insert(cg.end(), tp->w3j[k], tp->w3j[k] + c.d1 * c.d2 * c.d3);
        for (int a = 0; a < c.d1; a++)
            for (int d = 0; d < c.d3; d++) p_ins.push_back((int)q), p_a.push_back(a), p_c.push_back(d);
    }
    p->n_ins = (int)ins.size(), p->n_out = (int)outb.size(), p->n_in1 = NL1;
    std::vector<int> writers(outb.size(), 0);
    for (const int k : mine) writers[local[tp->io[k]]]++;
    p->single_writer = std::all_of(writers.begin(), writers.end(), [](int n) { return n == 1; });
    p->rcf_pd = 0; /* the fused forward's lanes own an instruction's output block */
    if (!double_sums && p->single_writer)
        for (const conv_ins &c : ins) p->rcf_pd = std::max(p->rcf_pd, c.d1 * c.d3);
    p->C = C, p->acc_dim = acc, p->p_dim = p->sp_dim = (int)p_ins.size(), p->g_dim = g_dim, p->x_dim = NL1 * NL1;
    p->nY = (lmax_sh + 1) * (lmax_sh + 1), p->dhu = tp->in1.dim, p->dM = tp->out.dim, p->wn = tp->weight_numel;
    if (g->fp32 && conv_std_wanted() && conv_std_matches(*p, ins, in1b, lmax_sh)) { /* P in 16-byte blocks */
        p->std_form = 1;
        p->sp_dim = conv_std_at(NL1, lmax_sh, p->n_ins).p_off;
    }
    /* a slot's threads: a power of two up to the warp (so shuffles stay within it), else whole warps;
     * slots fill a block of 128 threads where shared memory allows (more edges of the row at once) */
    if (C <= CGQ_WARP) {
        p->cw = 1;
        while (p->cw < C) p->cw *= 2;
    } else {
        p->cw = (C + CGQ_WARP - 1) / CGQ_WARP * CGQ_WARP;
    }
    const int min_slots = p->cw < CGQ_WARP ? CGQ_WARP / p->cw : 1; /* a block is whole warps */
    p->slots = std::max(min_slots, 128 / p->cw);
    p->threads = p->cw * p->slots;
    p->slots_bwd = p->slots, p->threads_bwd = p->threads;
    p->fwd_eb = 1; /* the least the forward needs; raised below */
    while (p->slots > min_slots && (conv_bwd_smem(*p) > g->smem_optin || conv_fwd_smem(*p) > g->smem_optin))
        p->slots /= 2, p->threads = p->cw * p->slots, p->slots_bwd = p->slots, p->threads_bwd = p->threads;
    if (conv_bwd_smem(*p) > g->smem_optin || conv_fwd_smem(*p) > g->smem_optin) return CGQ_STATUS_OK; /* too wide: v1 */
    /* forward batches of up to 32 edges (a row of MACE-MP-0's water graph has ~90), as shared memory allows */
    while (p->fwd_eb < 32) {
        conv_plan q = *p;
        q.fwd_eb *= 2;
        if (conv_fwd_smem(q) > g->smem_optin) break;
        p->fwd_eb = q.fwd_eb;
    }
    choose_bwd_slots(g, p, false);
    conv_ins *di = ins.data();
    conv_block *dob = outb.data(), *dib = in1b.data();
    double *dcg = cg.data();
    int *dpi = p_ins.data(), *dpa = p_a.data(), *dpc = p_c.data();
    CGQ_TRY(upload(g, &di, ins.size()));
    CGQ_TRY(upload(g, &dob, outb.size()));
    CGQ_TRY(upload(g, &dib, in1b.size()));
    CGQ_TRY(upload(g, &dcg, cg.size()));
    std::vector<float> cgf(cg.begin(), cg.end());
    float *dcgf = cgf.data();
    CGQ_TRY(upload(g, &dcgf, cgf.size()));
    p->cg_f = dcgf;
    CGQ_TRY(upload(g, &dpi, p_ins.size()));
    CGQ_TRY(upload(g, &dpa, p_a.size()));
    CGQ_TRY(upload(g, &dpc, p_c.size()));
    p->ins = di, p->outb = dob, p->in1b = dib, p->cg = dcg, p->p_ins = dpi, p->p_a = dpa, p->p_c = dpc;
    p->ok = conv_bwd_kernel<double>(p->n_in1, p->nY) != nullptr;
    return CGQ_STATUS_OK;
}

/* MACE's layer convolution: one group (its in1 blocks l = 0, 1, ... of one multiplicity), with the species skip
 * product the v2 steps run as a GEMM. */
static cgq_status build_conv_plan(cgq_gpu *g, const cgq_model *m, int t, conv_plan *p) {
    const cgq_tp *tp = &m->layers[t].conv_tp;
    int n_groups = 0;
    conv_groups(tp, &n_groups);
    memset(p, 0, sizeof *p);
    if (n_groups != 1 || !skip_tp_is_species_linear(m, &m->layers[t].skip_tp)) return CGQ_STATUS_OK;
    return build_conv_group(g, tp, m->lmax_sh, 0, 0, p);
}

template <class T>
static cudaError_t set_smem_limits(int cap) {
    constexpr bool F = sizeof(T) == sizeof(float); /* the weight tables' instantiations */
    std::vector<const void *> kernels = {
        (const void *)k_conv_fwd<T, T, F>,   (const void *)k_conv_fwd<T, double, F>, (const void *)k_conv_fwd<T>,
        (const void *)k_conv_fwd<T, double>};
    for (int nf = 1; nf <= 4; nf++)
        for (bool rev : {false, true})
            for (int nb : {symcon_nb<T>(), symcon_nb<T>() / 2, 1}) {
                kernels.push_back(symcon_kernel<T>(nf, true, nb, rev));
                if (nb == symcon_nb<T>()) kernels.push_back(symcon_kernel<T>(nf, false, 1, rev));
            }
    for (int n_in1 = 1; n_in1 <= 4; n_in1++)
        for (int l = 0; l <= 3; l++) {
            const int nY = (l + 1) * (l + 1);
            for (bool warps : {false, true}) {
                for (bool tabled : {false, true})
                    kernels.push_back((const void *)conv_bwd_kernel<T>(n_in1, nY, tabled, false, warps));
                if (F && conv_std_instantiated(n_in1, nY))
                    kernels.push_back((const void *)conv_bwd_kernel<T>(n_in1, nY, true, true, warps));
            }
            for (bool cut : {false, true})
                for (int lw : {16, 32})
                    if (const void *k = (const void *)conv_bwd_warp_kernel<T>(n_in1, nY, cut, lw)) kernels.push_back(k);
            if (F && conv_std_instantiated(n_in1, nY))
                for (bool c12 : {false, true})
                    for (int C : {0, 128}) kernels.push_back((const void *)conv_fwd_std_kernel(n_in1, nY, c12, C));
        }
    for (const void *k : kernels) {
        cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, cap);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* the conv and product-basis kernels may use the GPU's opt-in shared memory per block; false where refused */
static bool set_smem_limits_all(cgq_gpu *g) {
    const int cap = (int)g->smem_optin;
    if (set_smem_limits<double>(cap) == cudaSuccess && set_smem_limits<float>(cap) == cudaSuccess) return true;
    cudaGetLastError();
    return false;
}

/* the vendor BLAS handle of the radial-MLP GEMMs (none in HIP builds: the tiled kernel runs them) */
static cgq_status create_blas(cgq_gpu *g, int gpu_id) {
#if !defined(__HIPCC__)
    if (cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
        return cgq_fail(CGQ_STATUS_DEVICE_ERROR,
                        "cuBLAS could not be initialised on GPU %d (out of GPU memory, or a "
                        "CUDA driver older than the toolkit cgequi was built with)",
                        gpu_id);
#else
    (void)g, (void)gpu_id;
#endif
    return CGQ_STATUS_OK;
}

extern "C" size_t cgq_gpu_bytes(const cgq_gpu *g) {
    if (!g) return 0;
    size_t n = g->model_bytes + g->arena_cap + g->arena_f_cap + g->scratch_cap + g->graph_cap + g->pairs.cap +
               g->pairs.step_cap + g->pairs.build_cap + g->edge_grad_cap + g->xinc_cap + g->xnodes_cap;
    for (size_t c : g->vb.caps) n += c;
    return n;
}

extern "C" int cgq_gpu_available(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

extern "C" int cgq_gpu_device_count(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

extern "C" void cgq_gpu_free(cgq_gpu *g) {
    if (!g) return;
    for (void *p : g->allocations) cudaFree(p);
    cudaFree(g->arena);
    cudaFree(g->scratch);
    cudaFree(g->graph_buf);
    cudaFreeHost(g->graph_stage);
    cudaFreeHost(g->energy_stage);
    cudaFreeHost(g->xstage);
    cudaFree(g->xinc);
    cudaFree(g->xnodes);
    for (int k = 0; k < 2; k++)
        if (g->xext_bytes[k]) cudaHostUnregister(g->xext[k]);
    if (g->side_fork) cudaEventDestroy(g->side_fork);
    if (g->side_join) cudaEventDestroy(g->side_join);
    if (g->side) cudaStreamDestroy(g->side);
    if (g->pairs.summary_ready) cudaEventDestroy(g->pairs.summary_ready);
    cudaFree(g->pairs.buf);
    cudaFree(g->pairs.step);
    cudaFree(g->pairs.build);
    cudaFree(g->edge_grad);
    v2_buffers &b = g->vb;
    for (double *p : {b.w, b.act, b.gw, b.gtmp, b.gef, b.gY, b.gcut, b.gx1e, b.node_tmp, b.kept, b.edge_in, b.dens,
                      b.gr, b.senders, b.sc_qg, b.sc_v, b.groups})
        cudaFree(p);
    cudaFree(g->arena_f);
#if !defined(__HIPCC__)
    if (g->blas) cublasDestroy(g->blas);
#endif
    delete g;
}

/* out[k, n, q] = alpha sum_j a[4 k + q, j] W[j, n] in double: the 4 rows of each interval of a table times a last
 * layer, a column's 4 values adjacent (radial_table's weight-table layout) */
__global__ void k_weight_table(int64_t rows, int K, int wn, const double *a, const double *W, double alpha,
                               double *out) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * wn;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / wn;
        const int n = (int)(i % wn);
        double s = 0.0;
        for (int j = 0; j < K; j++) s += a[row * K + j] * W[(int64_t)j * wn + n];
        out[((row / 4) * wn + n) * 4 + row % 4] = alpha * s;
    }
}

/* A weight table's float form [n_int][wn][4] (wtable_value's coefficients) and its compact form (radial_table.ad, ev,
 * escale: each column's slope departures m - d in 16 bits over the column's largest) from its double rows. The
 * compact form is made for tables of CGQ_WTAB12_MIN_BYTES or more in float, whose forward it speeds up (session 23,
 * H100: MACE-MP-0's layer 1, 42 MB, 1.84 -> 1.57 ms; session 35: 1.48 against 1.74 ms from the power-basis float
 * form, likely as its 31 MB stay in L2 and the float form's 42 do not), of std plans (std_channels > 0: the plan's
 * channels) whose forward runs the std kernel (std_fwd: not MACE-MP-0's layer 0, factored, 40 MB); the water models'
 * (0.5-4 MB) gained nothing. CGQ_GPU_WTAB12=0: never; =1: for every std plan. Per interval, its 16-byte chunks of the
 * instructions' columns q C + u (2 in ad, 4 in ev: wtable12_ad_row, wtable12_ev_row) are stored chunk by chunk and
 * channel by channel, so that a thread reads its edge's values 16 bytes at a time and a warp's read of a chunk is 512
 * consecutive bytes (per channel, they spread each read over 20 cache lines: L1-bound, session 32). */
#define CGQ_WTAB12_MIN_BYTES (8ull << 20)
struct weight_table_host {
    std::vector<float> f, escale;
    std::vector<float2> ad;
    std::vector<uint32_t> ev;
};
static void weight_table_forms(const std::vector<double> &t, int64_t n_int, int wn, int std_channels, bool std_fwd,
                               weight_table_host *out) {
    out->f.resize(t.size());
    for (size_t i = 0; i < t.size(); i += 4) { /* (a_k, d, m_k, m_k+1) -> the cubic's coefficients in t */
        const double a = t[i], d = t[i + 1], m0 = t[i + 2], m1 = t[i + 3];
        out->f[i] = (float)a, out->f[i + 1] = (float)m0;
        out->f[i + 2] = (float)(3.0 * d - 2.0 * m0 - m1), out->f[i + 3] = (float)(m0 + m1 - 2.0 * d);
    }
    const char *env = getenv("CGQ_GPU_WTAB12");
    const bool large = sizeof(float) * t.size() >= CGQ_WTAB12_MIN_BYTES;
    if (std_channels <= 0 || (env && *env ? atoi(env) == 0 : !(large && std_fwd))) return;
    const int C = std_channels, ni = wn / C, ra = wtable12_ad_row(ni), re = wtable12_ev_row(ni);
    out->ad.assign((size_t)n_int * C * ra, make_float2(0.0f, 0.0f));
    out->ev.assign((size_t)n_int * C * re, 0x80008000u); /* pad entries: departures 0 */
    out->escale.resize(wn);
    for (int n = 0; n < wn; n++) {
        double emax = 0.0;
        for (int64_t k = 0; k < n_int; k++) {
            const double *v = &t[((size_t)k * wn + n) * 4];
            emax = std::max(emax, std::max(std::fabs(v[2] - v[1]), std::fabs(v[3] - v[1])));
        }
        const float sc = (float)(emax / 32767.0);
        out->escale[n] = sc;
        const int q = n / C, u = n % C;
        for (int64_t k = 0; k < n_int; k++) {
            const double *v = &t[((size_t)k * wn + n) * 4];
            uint32_t e[2];
            for (int h = 0; h < 2; h++) {
                const double z = sc > 0.0f ? std::nearbyint((v[2 + h] - v[1]) / sc) : 0.0;
                e[h] = (uint32_t)(std::min(32767.0, std::max(-32767.0, z)) + 32768.0);
            }
            out->ad[(((size_t)k * (ra / 2) + q / 2) * C + u) * 2 + q % 2] = make_float2((float)v[0], (float)v[1]);
            out->ev[(((size_t)k * (re / 4) + q / 4) * C + u) * 4 + q % 4] = e[0] | e[1] << 16;
        }
    }
}

/* The weight table of one layer (conv.cuh, conv_weights): h's intervals, each with its 4 rows (a_k, a_k+1 - a_k and
 * the scaled slopes, in double) times alpha W (K x wn, double), formed on the device, in float and in the compact
 * form. The table is an optimisation: above CGQ_WEIGHT_TABLE_MAX_BYTES (its reads would mostly miss L2), or where the
 * GPU has no memory for it, the layer keeps the radial MLP's kernels (out stays empty). */
#define CGQ_WEIGHT_TABLE_MAX_BYTES (256ull << 20)
static cgq_status build_weight_table(cgq_gpu *g, const cgq_radial_spline &h, const double *W, int wn, double alpha,
                                     int std_channels, bool std_fwd, radial_table *out) {
    const int K = h.width;
    const int64_t rows = 4 * (int64_t)h.n_int;
    *out = radial_table();
    if (sizeof(float) * (uint64_t)rows * wn > CGQ_WEIGHT_TABLE_MAX_BYTES) return CGQ_STATUS_OK;
    std::vector<double> a((size_t)rows * K), t((size_t)rows * wn);
    for (int k = 0; k < h.n_int; k++) {
        const double *a0 = h.knots + (size_t)k * 2 * K, *m0 = a0 + K, *a1 = m0 + K, *m1 = a1 + K;
        double *q = a.data() + (size_t)k * 4 * K;
        for (int j = 0; j < K; j++) q[j] = a0[j], q[K + j] = a1[j] - a0[j], q[2 * K + j] = m0[j], q[3 * K + j] = m1[j];
    }
    double *da = nullptr, *dW = nullptr, *dt = nullptr;
    cudaError_t e = cudaMalloc(&da, sizeof(double) * a.size());
    if (e == cudaSuccess) e = cudaMalloc(&dW, sizeof(double) * K * wn);
    if (e == cudaSuccess) e = cudaMalloc(&dt, sizeof(double) * t.size());
    if (e == cudaSuccess) e = cudaMemcpy(da, a.data(), sizeof(double) * a.size(), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(dW, W, sizeof(double) * K * wn, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        const unsigned blocks = (unsigned)std::min<int64_t>((rows * wn + 255) / 256, 65535);
        k_weight_table<<<blocks, 256>>>(rows, K, wn, da, dW, alpha, dt);
        e = cudaMemcpy(t.data(), dt, sizeof(double) * t.size(), cudaMemcpyDeviceToHost);
    }
    cudaFree(da);
    cudaFree(dW);
    cudaFree(dt);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (e == cudaErrorMemoryAllocation) return CGQ_STATUS_OK; /* the MLP kernels run the layer */
        return cgq_fail(CGQ_STATUS_DEVICE_ERROR,
                        "building the convolution's weight table (%lld x %d floats) on the "
                        "GPU: %s",
                        (long long)rows, wn, cudaGetErrorString(e));
    }
    weight_table_host ht;
    weight_table_forms(t, h.n_int, wn, std_channels, std_fwd, &ht);
    const size_t bf = sizeof(float) * ht.f.size(), bad = sizeof(float2) * ht.ad.size(),
                 bev = sizeof(uint32_t) * ht.ev.size(), bs = sizeof(float) * ht.escale.size();
    char *d = nullptr; /* both forms in one allocation (offsets multiples of 16, 8, 4) */
    e = cudaMalloc(&d, bf + bad + bev + bs);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return CGQ_STATUS_OK; /* the MLP kernels run the layer */
    }
    CGQ_CHECK_GPU(e);
    g->allocations.push_back(d);
    g->model_bytes += bf + bad + bev + bs;
    CGQ_CHECK_GPU(cudaMemcpy(d, ht.f.data(), bf, cudaMemcpyHostToDevice));
    out->n_int = h.n_int, out->width = wn, out->step = h.step, out->inv_step = 1.0 / h.step,
    out->knots = reinterpret_cast<float *>(d);
    if (bad) {
        CGQ_CHECK_GPU(cudaMemcpy(d + bf, ht.ad.data(), bad, cudaMemcpyHostToDevice));
        CGQ_CHECK_GPU(cudaMemcpy(d + bf + bad, ht.ev.data(), bev, cudaMemcpyHostToDevice));
        CGQ_CHECK_GPU(cudaMemcpy(d + bf + bad + bev, ht.escale.data(), bs, cudaMemcpyHostToDevice));
        out->ad = reinterpret_cast<float2 *>(d + bf), out->ev = reinterpret_cast<uint32_t *>(d + bf + bad);
        out->escale = reinterpret_cast<float *>(d + bf + bad + bev);
    }
    return CGQ_STATUS_OK;
}

/* Whether layer t's convolution reads its weights from a table (fp32, conv_weights): a radial table, no density
 * normalisation (MACE; its MLP runs per edge anyway), the reverse's staged table values within shared memory (every
 * plan of the layer); not with CGQ_GPU_WEIGHT_TABLE=0 (the radial MLP's kernels, for comparisons and their tests). */
static bool weight_table_fits(const cgq_gpu *g, int t) {
    const char *env = getenv("CGQ_GPU_WEIGHT_TABLE");
    const cgq_model *m = g->host_model;
    if (env && atoi(env) == 0) return false;
    if (m->nequip) {
        for (int q = 0; q < g->nq_groups[t]; q++)
            if (conv_bwd_smem(g->nq_plans[t][q], sizeof(float), true) > g->smem_optin) return false;
        return g->nq_v2;
    }
    return g->v2 && !m->layers[t].density && g->plans[t].ok &&
           conv_bwd_smem(g->plans[t], sizeof(float), true) <= g->smem_optin;
}

/* Whether MACE's first convolution runs factored through the senders' species (species_conv.cuh,
 * build_species_conv): its sender features one 0e block, no density normalisation, and at least SC_MIN_CHANNELS
 * channels, or CGQ_GPU_SPECIES_CONV=1 or 2 (=0: never). Narrower layers run faster on the std convolution kernels
 * (session 66, one H200, 5,184 water atoms: mace01's 32 channels 0.79-0.82 -> 0.64-0.65 ms per step, the water
 * MACE's 16 channels 0.86-0.88 -> 0.76-0.77 ms; MACE-MP-0's 128 channels 4.67-4.72 ms factored, 5.19-5.26 not).
 * Where it runs factored, its std forward runs only in graphs of more species classes than the factored kernels take
 * (sc_runs), from the float table. */
#define SC_MIN_CHANNELS 64
static bool layer0_factored_form(const cgq_gpu *g) {
    const char *env = getenv("CGQ_GPU_SPECIES_CONV");
    const cgq_model *m = g->host_model;
    if ((env && *env && atoi(env) == 0) || m->nequip || m->n_layers < 1) return false;
    const cgq_tp *tp = &m->layers[0].conv_tp;
    if (m->layers[0].density || tp->in1.n != 1 || tp->in1.b[0].l != 0) return false;
    return (env && *env) || tp->in1.b[0].mul >= SC_MIN_CHANNELS;
}

/* fp32: every layer's radial MLP as a table of its hidden output (radial_spline.cuh), when each layer's table
 * meets 1e-8 (values) and 1e-6 (slopes) of its largest magnitude; else none, and the MLP runs per edge. rm[t]: the
 * layers' MLPs (host weights); alpha[t]: their last layers' scale. CGQ_GPU_RADIAL_MLP=1 runs the MLP per edge;
 * the last layer runs on the tensor cores where radial_tc_fits (CGQ_GPU_RADIAL_SGEMM=1: as SGEMM). */
static cgq_status build_radial_tables(cgq_gpu *g, int L, const cgq_radial_mlp *rm, const double *alpha) {
    if (getenv("CGQ_GPU_RADIAL_MLP")) return CGQ_STATUS_OK;
    cgq_radial_spline hs[CGQ_MAX_LAYERS];
    memset(hs, 0, sizeof hs);
    cgq_status st = CGQ_STATUS_OK;
    bool all = true;
    for (int t = 0; t < L && st == CGQ_STATUS_OK; t++) {
        st = cgq_radial_spline_build(&rm[t], CGQ_SPLINE_TOL_VALUE, CGQ_SPLINE_TOL_SLOPE, CGQ_SPLINE_MAX_INTERVALS,
                                     &hs[t]);
        all = all && hs[t].n_int > 0;
    }
    for (int t = 0; t < L && st == CGQ_STATUS_OK && all; t++) {
        const cgq_radial_spline &h = hs[t];
        const cgq_fcnet &fc = *rm[t].fc;
        radial_table &s = g->radial[t];
        const int W = h.width;
        std::vector<float> knots((size_t)h.n_int * 4 * W); /* radial_table's rows: a, difference, slopes */
        for (int k = 0; k < h.n_int; k++) {
            const double *a0 = h.knots + (size_t)k * 2 * W, *m0 = a0 + W, *a1 = m0 + W, *m1 = a1 + W;
            float *q = knots.data() + (size_t)k * 4 * W;
            for (int j = 0; j < W; j++)
                q[j] = (float)a0[j], q[W + j] = (float)(a1[j] - a0[j]), q[2 * W + j] = (float)m0[j],
                q[3 * W + j] = (float)m1[j];
        }
        float *kd = knots.data();
        st = upload<float>(g, &kd, knots.size());
        s.n_int = h.n_int, s.width = h.width, s.step = h.step, s.inv_step = 1.0 / h.step, s.alpha = (float)alpha[t],
        s.knots = kd;
        if (st == CGQ_STATUS_OK && weight_table_fits(g, t)) {
            const conv_plan &p = g->plans[t]; /* the compact form is the std forward's */
            const int std_channels = !g->host_model->nequip && p.ok && p.std_form ? p.C : 0;
            st = build_weight_table(g, h, fc.W[fc.n_layers - 1], fc.h[fc.n_layers], alpha[t], std_channels,
                                    t > 0 || !layer0_factored_form(g), &g->wtab[t]);
            if (g->wtab[t].knots && g->host_model->nequip)
                for (int q = 0; q < g->nq_groups[t]; q++) choose_bwd_slots(g, &g->nq_plans[t][q], true);
            else if (g->wtab[t].knots)
                choose_bwd_slots(g, &g->plans[t], true);
        }
        if (st != CGQ_STATUS_OK || !radial_tc_fits(W, g->cc_major)) continue;
        st = device_uploader{g}(&s.w_tc, radial_tc_layout(fc.W[fc.n_layers - 1], W, fc.h[fc.n_layers]));
        if (st == CGQ_STATUS_OK && !getenv("CGQ_GPU_RADIAL_BWD_SGEMM"))
            st = device_uploader{g}(&s.w_tc_bwd, radial_tc_layout_bwd(fc.W[fc.n_layers - 1], W, fc.h[fc.n_layers]));
    }
    for (int t = 0; t < L; t++) cgq_radial_spline_free(&hs[t]);
    if (!all)
        for (int t = 0; t < L; t++) g->radial[t] = g->wtab[t] = radial_table();
    return st;
}

/* MACE's radial MLPs or NequIP's edge MLPs (those in x = r / r_max(pair)) as tables */
static cgq_status build_model_radial_tables(cgq_gpu *g) {
    cgq_radial_mlps mlps;
    cgq_radial_mlps_of(g->host_model, &mlps);
    return build_radial_tables(g, mlps.n_layers, mlps.rm, mlps.alpha);
}

/* Which fp32 layers run their convolution forward fused with the radial MLP (radial_conv.cuh): none unless
 * CGQ_GPU_FUSED_CONV=1 (then every layer it fits, and an error where it cannot run). It is slower than the separate
 * kernels so far (bench/RESULTS.md, session 15). */
static cgq_status choose_fused_conv(cgq_gpu *g) {
    const char *env = getenv("CGQ_GPU_FUSED_CONV");
    bool any = false;
    for (int t = 0; t < g->host_model->n_layers; t++) {
        const conv_plan &p = g->plans[t];
        const bool fits = rcf_fits(p, g->radial[t], g->smem_optin);
        g->fused_conv[t] = fits && env && atoi(env) != 0;
        any = any || fits; /* the kernel test entry runs it where it fits */
    }
#if !defined(__HIPCC__)
    if (any && cudaFuncSetAttribute(k_radial_conv_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)g->smem_optin) != cudaSuccess) {
        const char *why = cudaGetErrorString(cudaGetLastError());
        for (int t = 0; t < g->host_model->n_layers; t++) g->fused_conv[t] = false;
        if (env && atoi(env) != 0)
            return cgq_fail(CGQ_STATUS_DEVICE_ERROR,
                            "CGQ_GPU_FUSED_CONV=1, but the fused kernel's shared memory "
                            "(%zu bytes) was refused: %s",
                            g->smem_optin, why);
    }
#endif
    return CGQ_STATUS_OK;
}

/* Layer 0's linear composed into species_conv's GEMM folds (sc_linear) where its form allows: no density, not run
 * with the skip (linskip), a GEMM (lin_gemm_ok), every conv output block feeding it, every linear output block
 * written by a pair, within the segment and pair limits. CGQ_GPU_SC_LINEAR=0: the two GEMMs (for comparisons). */
static void build_sc_linear(cgq_gpu *g) {
    sc_linear &c = g->sc_lin;
    c = sc_linear();
    const cgq_mace_layer *ly = &g->host_model->layers[0];
    const cgq_linear *hl = &ly->linear;
    const char *env = getenv("CGQ_GPU_SC_LINEAR");
    if ((env && env[0] == '0') || ly->density || g->linskip[0].ok || !lin_gemm_ok(hl)) return;
    const std::vector<conv_ins> &ins = g->sconv_ins;
    const int C = g->plans[0].C;
    std::vector<int> q_fed(ins.size(), 0), o_segs(hl->out.n, 0);
    for (int kl = 0; kl < hl->n_ins; kl++) {
        const cgq_irrep_block &ib = hl->in.b[hl->ins_in[kl]], &ob = hl->out.b[hl->ins_out[kl]];
        if (ib.mul != C || ib.l != ob.l) return;
        for (size_t q = 0; q < ins.size(); q++) {
            if (ins[q].out_off != ib.offset) continue;
            if (c.n == SC_MAX_PAIRS || ins[q].d3 != 2 * ib.l + 1) return;
            c.q[c.n] = (int)q, c.kl[c.n] = kl, c.Cw[c.n] = ob.mul, c.l_off[c.n] = hl->w_offset[kl], c.n++;
            q_fed[q]++, o_segs[hl->ins_out[kl]]++;
        }
    }
    for (size_t q = 0; q < ins.size(); q++)
        if (!q_fed[q] || q_fed[q] > LG_MAX_SEGS) return;
    for (int o = 0; o < hl->out.n; o++)
        if (!o_segs[o] || o_segs[o] > LG_MAX_SEGS) return;
    c.hl = hl, c.L = reinterpret_cast<const float *>(g->shadow_f.layers[0].linear.weight);
    c.alpha = 1.0 / ly->avg_num_neighbors, c.ok = 1;
}

/* Whether fp32 MACE's first convolution runs factored through the senders' species (species_conv.cuh): its sender
 * features are the embedding's linear_up (one scalar per channel and species), its radial MLP has a table, and no
 * density normalisation; not where CGQ_GPU_FUSED_CONV=1 fuses that layer, or with CGQ_GPU_SPECIES_CONV=0 (the separate
 * kernels, for comparisons and their tests; layer0_factored_form says which layers). Its folds run as node GEMMs
 * (species_conv.cuh) where their outputs, the channels, are at least a tile of the node GEMMs wide and the tensor-core
 * tile runs (GEMM_BN; MACE-MP-0's 128 channels: 1.41 -> 1.24 ms per step, session 22), else in the edge kernels (the
 * water MACE's 16 and mace01's 32 channels were 2–9% slower per step with the GEMMs, session 22; since session 66
 * they run the std kernels unless asked); CGQ_GPU_SPECIES_CONV=1 asks for the in-kernel folds, =2 for the GEMMs.
 * Whether a graph runs the layer factored depends on its species (sc_runs). */
static cgq_status build_species_conv(cgq_gpu *g) {
    species_conv &s = g->sconv;
    s = species_conv();
    const cgq_model *m = g->host_model;
    const char *env = getenv("CGQ_GPU_SPECIES_CONV");
    if (!layer0_factored_form(g) || !g->fp32 || !g->v2 || g->fused_conv[0]) return CGQ_STATUS_OK;
    const cgq_mace_layer *ly = &m->layers[0];
    const conv_plan &p = g->plans[0];
    const radial_table &tab = g->radial[0];
    const cgq_fcnet &fc = ly->radial_mlp;
    if (!p.ok || tab.n_int == 0 || p.p_dim > SC_MAX_P ||
        tab.width > SC_MAX_K || tab.width % 4 || p.C % 4 || fc.h[fc.n_layers - 1] != tab.width ||
        fc.h[fc.n_layers] != p.wn)
        return CGQ_STATUS_OK;
    const int K = tab.width, wn = (int)p.wn;
    const double *W = fc.W[fc.n_layers - 1];
    std::vector<float> WT((size_t)wn * K);
    for (int j = 0; j < K; j++)
        for (int c = 0; c < wn; c++) WT[(size_t)c * K + j] = (float)W[(size_t)j * wn + c];
    CGQ_TRY(device_uploader{g}(&s.WT, WT));
    std::vector<conv_ins> ins(p.n_ins);
    CGQ_CHECK_GPU(cudaMemcpy(ins.data(), p.ins, sizeof(conv_ins) * p.n_ins, cudaMemcpyDeviceToHost));
    s.gemm = env && *env ? atoi(env) == 2 : p.C >= GEMM_BN && lin_gemm_tc_mode() > 0;
    std::vector<int> blocks; /* the GEMM folds: a forward part per output block, its instructions as segments */
    for (const conv_ins &k : ins) {
        int into = 0;
        for (const conv_ins &k2 : ins) into += k2.out_off == k.out_off;
        if (k.d1 != 1 || into > LG_MAX_SEGS) s.gemm = 0;
        if (std::find(blocks.begin(), blocks.end(), k.out_off) == blocks.end()) blocks.push_back(k.out_off);
    }
    if ((int)blocks.size() != p.n_out) s.gemm = 0; /* an output block no instruction writes (the GEMMs leave it) */
    g->sconv_ins = ins;
    int n_cg = 0; /* Y2P from the plan's float couplings (its instructions have d1 = 1: in1 is one 0e block) */
    for (const conv_ins &k : ins) n_cg = std::max(n_cg, k.c_off + k.d1 * k.d2 * k.d3);
    std::vector<float> cgf((size_t)n_cg), y2p((size_t)p.p_dim * p.nY, 0.0f);
    CGQ_CHECK_GPU(cudaMemcpy(cgf.data(), p.cg_f, sizeof(float) * cgf.size(), cudaMemcpyDeviceToHost));
    for (const conv_ins &k : ins)
        for (int c = 0; c < k.d3; c++)
            for (int b = 0; b < k.d2; b++) y2p[(size_t)(k.p_off + c) * p.nY + k.y_off + b] = cgf[k.c_off + b * k.d3 + c];
    CGQ_TRY(device_uploader{g}(&s.Y2P, y2p));
    std::vector<int32_t> y2r((size_t)p.p_dim, 0); /* each row's nonzeros: b0 | n << 16 */
    for (int q = 0; q < p.p_dim; q++) {
        int b0 = p.nY, b1 = 0;
        for (int b = 0; b < p.nY; b++)
            if (y2p[(size_t)q * p.nY + b] != 0.0f) b0 = std::min(b0, b), b1 = b + 1;
        if (b1 > b0) y2r[q] = b0 | (b1 - b0) << 16;
    }
    CGQ_TRY(device_uploader{g}(&s.Y2Pr, y2r));
    std::vector<int32_t> cls(m->n_species + SC_MAX_CLASSES, -1);
    const int32_t *dcls = nullptr;
    CGQ_TRY(device_uploader{g}(&dcls, cls));
    s.cls = const_cast<int32_t *>(dcls), g->sconv_classes = cls;
    const cgq_fcnet &ff = g->shadow_f.layers[0].radial_mlp; /* the float model's weights */
    s.W = reinterpret_cast<const float *>(ff.W[ff.n_layers - 1]);
    s.split_ins = p.single_writer, s.K = K, s.P = p.p_dim, s.x_off = ly->conv_tp.in1.b[0].offset;
    s.n_species = m->n_species, s.alpha = tab.alpha, s.tab = tab;
    const void *kernels[] = {(const void *)k_species_conv_fwd<false>, (const void *)k_species_conv_fwd<true>,
                             (const void *)k_species_conv_bwd<false>, (const void *)k_species_conv_bwd<true>};
    bool set = true;
    for (const void *k : kernels)
        set = set && cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g->smem_optin) ==
                         cudaSuccess;
    cudaFuncAttributes fa;
    if (!set || cudaFuncGetAttributes(&fa, kernels[s.gemm ? 1 : 0]) != cudaSuccess) {
        cudaGetLastError();
        return CGQ_STATUS_OK; /* the separate kernels run the layer */
    }
    s.fwd_max_threads = fa.maxThreadsPerBlock;
#if !defined(__HIPCC__)
    /* the reverse's edges on the tensor cores (CGQ_GPU_SPECIES_TC=0: the scalar kernels) */
    const char *tc_env = getenv("CGQ_GPU_SPECIES_TC");
    const sct_fn tck = sct_kernel(K, s.gemm);
    s.tc_bwd = g->cc_major >= 8 && !(tc_env && atoi(tc_env) == 0) && tck &&
               cudaFuncSetAttribute((const void *)tck, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)g->smem_optin) == cudaSuccess;
    cudaGetLastError();
#endif
    s.ok = 1;
    if (s.gemm) build_sc_linear(g);
    return CGQ_STATUS_OK;
}

/* The species classes of species_conv for a graph's nodes: the species present, in increasing order, and the first
 * node of each (its layer-0 features stand for the class). The table is uploaded when it changes. */
static cgq_status set_species_classes(cgq_gpu *g, const int32_t *species, int64_t NA) {
    species_conv &s = g->sconv;
    if (!s.ok) return CGQ_STATUS_OK;
    const int ns = s.n_species;
    std::vector<int64_t> first(ns, -1);
    for (int64_t i = 0; i < NA; i++)
        if (species[i] >= 0 && species[i] < ns && first[species[i]] < 0) first[species[i]] = i;
    std::vector<int32_t> cls(ns + SC_MAX_CLASSES, -1);
    int S = 0;
    for (int z = 0; z < ns; z++)
        if (first[z] >= 0) {
            cls[z] = S;
            if (S < SC_MAX_CLASSES) cls[ns + S] = (int32_t)first[z];
            S++;
        }
    s.S = S;
    if (S <= SC_MAX_CLASSES && cls != g->sconv_classes) {
        CGQ_CHECK_GPU(cudaMemcpy(s.cls, cls.data(), sizeof(int32_t) * cls.size(), cudaMemcpyHostToDevice));
        g->sconv_classes = cls;
    }
    return CGQ_STATUS_OK;
}

/* Layer t's linear and skip as one per-species GEMM (linskip_plan) where its form allows: a non-residual layer
 * without density, both maps GEMMs. Its weights are multiplied on the GPU in double from the model's, then kept in
 * the working precision. CGQ_GPU_LINSKIP=0: the two GEMMs as before (for comparisons). */
static cgq_status build_linskip_plan(cgq_gpu *g, int t) {
    const cgq_mace_layer *hl = &g->host_model->layers[t], *dl = &g->shadow.layers[t];
    linskip_plan &p = g->linskip[t];
    const char *env = getenv("CGQ_GPU_LINSKIP");
    if ((env && env[0] == '0') || hl->residual || hl->density || !g->skips[t].ok) return CGQ_STATUS_OK;
    p = linskip_pairs(&hl->linear, &hl->skip_tp);
    if (!p.ok) return CGQ_STATUS_OK;
    const int64_t n = p.numel;
    double *w = nullptr;
    CGQ_CHECK_GPU(cudaMalloc(&w, sizeof(double) * n));
    g->allocations.push_back(w); /* freed with the model, or below once its float copy exists */
    const int m2 = hl->skip_tp.in2.b[0].mul;
    for (const linskip_plan::pair &q : p.pairs) {
        const int Nu = hl->linear.out.b[hl->linear.ins_out[q.kl]].mul;
        k_linskip_weights<<<blocks_for((int64_t)m2 * q.Kv * q.Nw), CGQ_GPU_THREADS>>>(m2, q.Kv, Nu, q.Nw,
                                                                   dl->linear.weight + hl->linear.w_offset[q.kl],
                                                                   dl->skip_tp.weight + hl->skip_tp.w_offset[q.k],
                                                                   w + q.off);
    }
    CGQ_CHECK_GPU(cudaGetLastError());
    if (g->fp32) { /* the float copy replaces the double one */
        float *f = nullptr;
        CGQ_CHECK_GPU(cudaMalloc(&f, sizeof(float) * n));
        g->allocations.push_back(f);
        k_convert<double, float><<<blocks_for(n), CGQ_GPU_THREADS>>>(n, w, f);
        CGQ_CHECK_GPU(cudaGetLastError());
        CGQ_CHECK_GPU(cudaDeviceSynchronize());
        g->allocations.erase(std::find(g->allocations.begin(), g->allocations.end(), (void *)w));
        CGQ_CHECK_GPU(cudaFree(w));
        p.w = reinterpret_cast<const double *>(f);
        g->model_bytes += sizeof(float) * n;
    } else {
        p.w = w;
        g->model_bytes += sizeof(double) * n;
    }
    return CGQ_STATUS_OK;
}

static cgq_status upload_nequip(cgq_gpu *g, const cgq_model *hm); /* nequip_gpu.cuh */
static cgq_status build_nequip_v2(cgq_gpu *g);                    /* nequip_gpu.cuh */

/* The side stream and its two events (side_stream), unless CGQ_GPU_SIDE_STREAM=0; if the runtime refuses them, every
 * launch stays on the default stream (the same results, one stream) */
static void create_side_stream(cgq_gpu *g) {
    const char *env = getenv("CGQ_GPU_SIDE_STREAM");
    if (env && env[0] == '0') return;
    if (cudaStreamCreateWithFlags(&g->side, cudaStreamNonBlocking) == cudaSuccess &&
        cudaEventCreateWithFlags(&g->side_fork, cudaEventDisableTiming) == cudaSuccess &&
        cudaEventCreateWithFlags(&g->side_join, cudaEventDisableTiming) == cudaSuccess)
        return;
    if (g->side_fork) cudaEventDestroy(g->side_fork);
    if (g->side) cudaStreamDestroy(g->side);
    g->side = nullptr, g->side_fork = nullptr;
    cudaGetLastError(); /* not sticky: clear it for the launch checks */
}

extern "C" cgq_status cgq_gpu_create(const cgq_model *m, int gpu_id, int fp32, cgq_gpu **out) {
    *out = nullptr;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
        return cgq_fail(CGQ_STATUS_DEVICE_ERROR, "no GPU is visible to this process (device cuda); use device cpu");
    if (gpu_id < 0 || gpu_id >= n)
        return cgq_fail(CGQ_STATUS_DEVICE_ERROR, "gpu_id %d does not exist: %d GPU(s) visible", gpu_id, n);
    CGQ_CHECK_GPU(cudaSetDevice(gpu_id));
    cgq_gpu *g = new cgq_gpu();
    g->host_model = m;
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, gpu_id) != cudaSuccess || optin <= 0)
        optin = 48 * 1024;
    g->smem_optin = (size_t)optin;
    if (cudaDeviceGetAttribute(&g->cc_major, cudaDevAttrComputeCapabilityMajor, gpu_id) != cudaSuccess) g->cc_major = 0;
    g->fp32 = fp32; /* the plans size their blocks for it */
    create_side_stream(g);
    if (const char *mc = getenv("CGQ_GPU_MAX_CHUNK_EDGES")) g->max_chunk_edges = std::max(1LL, atoll(mc));
    g->recompute_mlp = getenv("CGQ_GPU_RECOMPUTE_MLP") != nullptr;
    if (m->nequip) {
        cgq_status st = upload_nequip(g, m);
        if (st == CGQ_STATUS_OK) st = build_nequip_v2(g);
        if (getenv("CGQ_GPU_V1")) g->nq_v2 = 0; /* the reference steps, for comparisons */
        if (st == CGQ_STATUS_OK && g->nq_v2) st = create_blas(g, gpu_id);
        if (st == CGQ_STATUS_OK && g->nq_v2 && !set_smem_limits_all(g)) g->nq_v2 = 0;
        if (st == CGQ_STATUS_OK && g->nq_v2 && fp32) st = build_model_radial_tables(g);
        if (st == CGQ_STATUS_OK && fp32 && !g->nq_v2)
            st = cgq_fail(CGQ_STATUS_UNSUPPORTED,
                          "precision fp32 on the GPU covers NequIP layers with uvu convolutions "
                          "of l <= 3 features and at most 64 Bessel functions; this model runs in fp64 only (use "
                          "precision fp64)");
        if (st != CGQ_STATUS_OK) {
            cgq_gpu_free(g);
            return st;
        }
        *out = g;
        return CGQ_STATUS_OK;
    }
    cgq_status st = upload_model(g, m);
    if (st == CGQ_STATUS_OK) st = create_blas(g, gpu_id);
    g->v2 = 1;
    std::vector<rtc_job> jobs; /* the layers' generated product-basis kernels, compiled together after the loop */
    std::vector<const void **> job_dst;
    for (int t = 0; t < m->n_layers && st == CGQ_STATUS_OK; t++) {
        st = build_conv_plan(g, m, t, &g->plans[t]);
        if (st == CGQ_STATUS_OK) st = build_symcon_plan(g, t, &g->symcon[t], &jobs, &job_dst);
        if (st == CGQ_STATUS_OK) st = build_skip_plan(g, &m->layers[t].skip_tp, &g->skips[t]);
        g->v2 = g->v2 && g->plans[t].ok && g->symcon[t].ok && g->skips[t].ok;
    }
    if (st == CGQ_STATUS_OK && g->v2) make_symcon_kernels(&jobs, job_dst);
    for (int r = 0; r < m->n_readouts && st == CGQ_STATUS_OK && g->v2; r++) { /* the v1 steps have their own */
        st = build_readout_plan(&m->readouts[r], device_uploader{g}, &g->readouts[r]);
        g->v2 = g->v2 && g->readouts[r].ok;
    }
    if (st == CGQ_STATUS_OK && g->v2 && !set_smem_limits_all(g)) g->v2 = 0;
    if (getenv("CGQ_GPU_V1")) g->v2 = 0; /* the v1 steps, for comparisons */
    const char *compose = getenv("CGQ_GPU_RO_COMPOSE"); /* =0: the product linear and skip as GEMMs, h formed */
    /* =0: the layer below's linear readout apart, not merged into the composed one (the default since session 56) */
    const char *merge = getenv("CGQ_GPU_RO_MERGE");
    for (int r = 0; r < m->n_readouts && st == CGQ_STATUS_OK && g->v2 && !(compose && compose[0] == '0'); r++) {
        st = build_composed_readout(m, r, g->readouts[r], device_uploader{g}, &g->ro_composed,
                                    merge && merge[0] == '0' ? nullptr : &g->ro_merge);
        if (g->ro_composed.ok) {
            g->ro_composed_index = r;
            break;
        }
    }
    if (st == CGQ_STATUS_OK && fp32 && !g->v2)
        st = cgq_fail(CGQ_STATUS_UNSUPPORTED, "precision fp32 on the GPU covers MACE interaction blocks with uvu "
                      "convolutions, l <= 3 features, a coupling width <= 16 and readouts at most 128 wide; this "
                      "model runs in fp64 only (use precision fp64)");
    if (st == CGQ_STATUS_OK && fp32) st = upload_model_f32(g);
    for (int t = 0; t < m->n_layers && st == CGQ_STATUS_OK && g->v2; t++) st = build_linskip_plan(g, t);
    if (st == CGQ_STATUS_OK && fp32) st = build_model_radial_tables(g);
    if (st == CGQ_STATUS_OK && fp32) st = choose_fused_conv(g);
    if (st == CGQ_STATUS_OK && fp32) st = build_species_conv(g);
    if (st == CGQ_STATUS_OK && g->v2) st = build_layer0_rows(g);
    if (st == CGQ_STATUS_OK && g->v2) st = build_up_compose(g);
    if (st != CGQ_STATUS_OK) {
        cgq_gpu_free(g);
        return st;
    }
    *out = g;
    return CGQ_STATUS_OK;
}

/* ---- kernels: one thread per item, grid-stride, per-thread scratch from a pool --------------------- */
/* A row of NY values in T from double, in 16-byte stores where T is float and the row is 16-byte aligned
 * (a16): with a store per value, k_edge_geometry_t waited on its stores ("lg throttle" 19 per issue, session 36's
 * ncu): MACE-MP-0's geometry phase at 5,184 atoms 0.12 -> 0.06 ms, its step -0.07 to -0.12 ms (H200, session 39) */
template <class T, int NY>
__device__ __forceinline__ void store_row(T *row, const double (&y)[NY], bool a16) {
    if constexpr (sizeof(T) == sizeof(float) && NY % 4 == 0)
        if (a16) {
            float4 *r4 = reinterpret_cast<float4 *>(row);
#pragma unroll
            for (int j = 0; j < NY / 4; j++)
                r4[j] = make_float4((float)y[4 * j], (float)y[4 * j + 1], (float)y[4 * j + 2], (float)y[4 * j + 3]);
            return;
        }
#pragma unroll
    for (int j = 0; j < NY; j++) row[j] = (T)y[j];
}
__global__ void k_edge_geometry(mace_ctx c) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < c.E; e += (int64_t)gridDim.x * blockDim.x)
        mace_step_edge_geometry(&c, e);
}
/* v2: the same in the working precision (Y, edge features and cutoff computed in double, then rounded); NY: the SH
 * width (sh_lmax); ef null: no edge features (the radial tables take r) */
template <class T, int NY>
__global__ void k_edge_geometry_t(mace_ctx c, T *Y, T *ef, T *cut) {
    constexpr int LMAX = sh_lmax<NY>();
    const bool y16 = (reinterpret_cast<uintptr_t>(Y) & 15) == 0;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < c.E; e += (int64_t)gridDim.x * blockDim.x) {
        double y[NY], f[64], ct;
        c.r[e] = mace_edge_geometry_sh(&c, e, y, ef ? f : nullptr, &ct, LMAX);
        store_row<T, NY>(Y + e * NY, y, y16);
        if (ef)
            for (int n = 0; n < c.nb; n++) ef[e * c.nb + n] = (T)f[n];
        cut[e] = (T)ct;
    }
}
/* The species embedding of species s, output element j: cgq_linear_forward of the one-hot row, with the element's terms
 * added in that function's order (instruction, then input channel), so the bits are its bits. Of an instruction's
 * input channels only the species' own has a nonzero term; the others add exact zeros (finite weights), so only that
 * one is read (a loop over all of them, 89 for MACE-MP-0, took 43 us at 5,184 atoms on the H100, session 36). */
__device__ double embed_value(const cgq_linear *lin, int s, int j) {
    int w, m;
    const int bo = irreps_locate(&lin->out, j, &w, &m);
    double y = 0.0;
    for (int k = 0; k < lin->n_ins; k++) {
        if (lin->ins_out[k] != bo) continue;
        const cgq_irrep_block *bi = &lin->in.b[lin->ins_in[k]];
        const int d = 2 * bi->l + 1, mo = lin->out.b[bo].mul;
        const int u = (s - bi->offset - m) / d; /* the channel whose (u, m) is the species' entry, if any */
        if (s - bi->offset - m >= 0 && (s - bi->offset - m) % d == 0 && u < bi->mul)
            y += lin->path_weight[k] * lin->weight[lin->w_offset[k] + (int64_t)u * mo + w];
    }
    if (lin->bias && lin->out.b[bo].l == 0 && lin->out.b[bo].parity == 1) {
        int off = 0;
        for (int k = 0; k < bo; k++)
            if (lin->out.b[k].l == 0 && lin->out.b[k].parity == 1) off += lin->out.b[k].mul;
        y += lin->bias[off + w];
    }
    return y;
}
/* table[s * dout + j] = embed_value(s, j) for every species, once per model (upload_model): per node and element the
 * same values took 25 us of MACE-MP-0's step at 5,184 atoms (session 50's trace), on the critical path */
__global__ void k_embed_table(const cgq_model *m, int n_species, double *table) {
    const cgq_linear *lin = &m->node_embedding;
    const int dout = lin->out.dim;
    for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < n_species * dout; q += gridDim.x * blockDim.x)
        table[q] = embed_value(lin, q / dout, q % dout);
}
/* Rows of a per-species table (ld doubles each) for the nodes, rounded to T, a block per node: columns [0, d1) into
 * out1 (rows of d1) for the NA nodes, columns [d1, d1 + d2) into out2 (rows of d2) for the first N2 of them. The
 * species embedding (embed_table), layer 0's linear_up and skip (build_layer0_rows), layer 1's composed linear_up's
 * rows (build_up_compose). */
template <class T>
__global__ void k_species_rows(int64_t NA, int64_t N2, const int32_t *species, const double *table, int ld, int d1,
                               T *out1, int d2, T *out2) {
    for (int64_t i = blockIdx.x; i < NA; i += gridDim.x) {
        const double *row = table + (int64_t)species[i] * ld;
        for (int j = threadIdx.x; j < d1; j += blockDim.x) out1[i * d1 + j] = (T)row[j];
        if (i < N2)
            for (int j = threadIdx.x; j < d2; j += blockDim.x) out2[i * d2 + j] = (T)row[d1 + j];
    }
}
/* Launch shape of the row kernels (k_species_rows, NequIP's gates): a block per row (node), a thread per element of a
 * row of `width`, the width in whole warps, at most 256 */
static unsigned row_blocks(int64_t rows) {
    return (unsigned)std::min<int64_t>(rows, INT32_MAX);
}
static int row_threads(int width) {
    return std::min(256, std::max(CGQ_WARP, (width + CGQ_WARP - 1) / CGQ_WARP * CGQ_WARP));
}
__global__ void k_up(mace_ctx c, int t, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        mace_step_up(&c, t, i);
}
/* symmetric contraction: one thread per (node, channel) */
__global__ void k_product(mace_ctx c, int t, int C, int backward) {
    const int64_t n = c.N * (int64_t)C;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
        if (backward) mace_step_product_channel_backward(&c, t, k / C, (int)(k % C));
        else mace_step_product_channel(&c, t, k / C, (int)(k % C));
    }
}
__global__ void k_product_post(mace_ctx c, int t) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < c.N; i += (int64_t)gridDim.x * blockDim.x)
        mace_step_product_post(&c, t, i);
}
__global__ void k_sender_sum(mace_ctx c, int t) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < c.NA; i += (int64_t)gridDim.x * blockDim.x)
        mace_step_sender_sum(&c, t, i);
}
__global__ void k_up_backward(mace_ctx c, int t) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < c.N; i += (int64_t)gridDim.x * blockDim.x)
        mace_step_up_backward(&c, t, i);
}

enum step_kind { STEP_CONV, STEP_ENERGY, STEP_NODE_BWD, STEP_EDGE_BWD, STEP_SEND_BWD, STEP_EDGE_MSG, STEP_EDGE_BWD_E,
                 STEP_SEND_EDGE, STEP_NODE_BWD_POST, STEP_READOUT_BWD };

__global__ void k_scratch_step(mace_ctx c, int kind, int t, int64_t n, double *pool, size_t per_thread) {
    const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    double *scr = pool + (size_t)tid * per_thread;
    for (int64_t i = tid; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        switch (kind) {
        case STEP_CONV: mace_step_conv_node(&c, t, i, scr, 0); break;
        case STEP_ENERGY: mace_step_energy(&c, i, scr); break;
        case STEP_NODE_BWD: mace_step_node_backward_pre(&c, t, i, scr); break;
        case STEP_NODE_BWD_POST: mace_step_node_backward_post(&c, t, i, scr); break;
        case STEP_EDGE_BWD: mace_step_edge_backward(&c, t, i, scr); break;
        case STEP_SEND_BWD: mace_step_sender_backward(&c, t, i, scr); break;
        case STEP_EDGE_MSG: mace_step_edge_message(&c, t, i, scr); break;
        case STEP_EDGE_BWD_E: mace_step_edge_backward_edge(&c, t, i, scr); break;
        case STEP_SEND_EDGE: mace_step_sender_edge(&c, t, i, scr); break;
        case STEP_READOUT_BWD: mace_step_readouts_backward(&c, t, i, scr); break;
        }
    }
}

/* Blocks of CGQ_GPU_THREADS for n items, at most `per_cap` times CGQ_GPU_MAX_PARALLEL threads: 1 for the kernels with
 * per-thread scratch (scratch_threads), CGQ_WIDE for those without (blocks_wide) */
#define CGQ_WIDE 16
static int blocks_for(int64_t n, int per_cap) {
    const int64_t b = (n + CGQ_GPU_THREADS - 1) / CGQ_GPU_THREADS;
    const int64_t maxb = per_cap * (CGQ_GPU_MAX_PARALLEL / CGQ_GPU_THREADS);
    return (int)(b < 1 ? 1 : (b > maxb ? maxb : b));
}
/* up to 64 resident warps per SM: the latency-bound gathers (sender sums, edge geometry and tail) ran at 25% of the
 * warps with blocks_for's scratch cap (ncu, session 23) */
static int blocks_wide(int64_t n) { return blocks_for(n, CGQ_WIDE); }
/* k_node_forces's grid: a warp per node (its virial parts are laid per block: pairs_ready) */
static int node_forces_blocks(int64_t n_nodes) { return blocks_wide(n_nodes * CGQ_WARP); }

/* threads that blocks_for(n) launches: the per-thread scratch the steps over n items need */
static size_t scratch_threads(int64_t n) { return (size_t)blocks_for(n) * CGQ_GPU_THREADS; }

#define CGQ_LAUNCH_CHECK() CGQ_CHECK_GPU(cudaGetLastError())

/* The species embedding's rows, one per species (k_embed_table, in double: the steps round them to their precision) */
static cgq_status embed_table(cgq_gpu *g, const cgq_model *hm) {
    const size_t n = (size_t)hm->n_species * hm->node_embedding.out.dim;
    if (!n) return CGQ_STATUS_OK;
    void *d = nullptr;
    CGQ_CHECK_GPU(cudaMalloc(&d, sizeof(double) * n));
    g->allocations.push_back(d);
    g->model_bytes += sizeof(double) * n;
    g->embed_table = static_cast<double *>(d);
    k_embed_table<<<blocks_for((int64_t)n), CGQ_GPU_THREADS>>>(g->dev_model, hm->n_species, g->embed_table);
    CGQ_LAUNCH_CHECK();
    CGQ_CHECK_GPU(cudaDeviceSynchronize());
    return CGQ_STATUS_OK;
}

/* Layer 0 reads only the species embedding, so its linear_up, and a residual layer's skip, are one row per species:
 * formed once here, in double by the CPU reference's maps, and gathered per step (k_species_rows) in place of two node
 * GEMMs (MACE-MP-0 at 5,184 atoms: linear_up 18 us on the critical path and the skip 38 us beside it, session 54's
 * trace). CGQ_GPU_LAYER0_ROWS=0: the GEMMs as before (the ctest test_gpu_layer0_gemms). */
static cgq_status build_layer0_rows(cgq_gpu *g) {
    const cgq_model *m = g->host_model;
    const char *env = getenv("CGQ_GPU_LAYER0_ROWS");
    if ((env && env[0] == '0') || m->n_layers < 1 || m->n_species > CGQ_MAX_SPECIES) return CGQ_STATUS_OK;
    const cgq_mace_layer *ly = &m->layers[0];
    const int de = m->node_embedding.out.dim, dhu = ly->linear_up.out.dim, dsc = ly->residual ? ly->skip_tp.out.dim : 0;
    const size_t ld = (size_t)dhu + dsc;
    std::vector<double> rows(ld * m->n_species), onehot(CGQ_MAX_SPECIES, 0.0), emb(de);
    for (int z = 0; z < m->n_species; z++) {
        onehot[z] = 1.0;
        cgq_linear_forward(&m->node_embedding, onehot.data(), emb.data());
        cgq_linear_forward(&ly->linear_up, emb.data(), rows.data() + z * ld);
        if (dsc) cgq_tp_node_forward(&ly->skip_tp, emb.data(), onehot.data(), rows.data() + z * ld + dhu);
        onehot[z] = 0.0;
    }
    double *d = rows.data();
    CGQ_TRY(upload(g, &d, rows.size()));
    g->layer0_rows = d, g->layer0_sc = dsc, g->layer0_rows_host = std::move(rows);
    return CGQ_STATUS_OK;
}

/* The end of the columns of layer 0's h that something besides layer 1's linear_up reads: layer 0's readouts and the
 * composed readout of layer 1 (its skip's input); -1 where another map reads all of h (layer 1's skip as a GEMM) or
 * a reader's input is not laid out as h */
static int layer0_h_read_end(const cgq_gpu *g) {
    const cgq_model *m = g->host_model;
    const cgq_irreps &h = m->layers[0].product_linear.out;
    int end = 0;
    auto blocks = [&](const cgq_irreps &ir, const int *ins, int n) {
        if (ir.n != h.n || memcmp(ir.b, h.b, sizeof(h.b[0]) * h.n)) return false;
        for (int k = 0; k < n; k++) {
            const cgq_irrep_block &b = ir.b[ins[k]];
            end = std::max(end, b.offset + b.mul * (2 * b.l + 1));
        }
        return true;
    };
    for (int r = 0; r < m->n_readouts; r++) {
        const cgq_linear &l = m->readouts[r].linear_1;
        if (m->readouts[r].layer == 0 && !blocks(l.in, l.ins_in, l.n_ins)) return -1;
    }
    const cgq_tp &skip = m->layers[1].skip_tp;
    if (m->layers[1].residual &&
        (!(g->ro_composed.ok && g->ro_composed.layer == 1) || !blocks(skip.in1, skip.i1, skip.n_ins)))
        return -1;
    return end;
}

/* up_compose_plan's host part where layer 0's h is read past layer 1's linear_up only in its first blocks, layer 0's
 * skip (if it adds one) is a row per species (build_layer0_rows), and the maps are node GEMMs without biases: the
 * head's and comp's instructions, comp's weights w and the rows Wu sc_0 per species (empty without a skip), in double;
 * u->ok false where the plan does not apply */
static cgq_status up_compose_host(const cgq_gpu *g, up_compose_plan *u, std::vector<double> *w,
                                  std::vector<double> *rows) {
    const cgq_model *m = g->host_model;
    *u = up_compose_plan{};
    if (m->n_layers < 2) return CGQ_STATUS_OK;
    const cgq_mace_layer *l0 = &m->layers[0], *l1 = &m->layers[1];
    const cgq_linear &pl = l0->product_linear;
    const bool adds_sc = l0->use_sc && l0->residual;
    if (l0->density || (adds_sc && !g->layer0_sc) || !lin_gemm_ok(&pl) || !cgq_linear_composable(&pl, &l1->linear_up))
        return CGQ_STATUS_OK;
    const int end = layer0_h_read_end(g);
    if (end < 0) return CGQ_STATUS_OK;
    int nb = 0; /* h's first blocks up to the end */
    while (nb < pl.out.n && pl.out.b[nb].offset < end) nb++;
    u->head.l.in = pl.in, u->head.l.out = pl.out, u->head.l.out.n = nb;
    for (int k = 0; k < pl.n_ins; k++)
        if (pl.ins_out[k] < nb) u->head.add(pl.ins_in[k], pl.ins_out[k], pl.w_offset[k], pl.path_weight[k]);
    cgq_linear c;
    CGQ_TRY(cgq_linear_compose(&pl, &l1->linear_up, &c));
    u->comp.l.in = c.in, u->comp.l.out = c.out;
    int64_t numel = 0;
    for (int k = 0; k < c.n_ins; k++) {
        u->comp.add(c.ins_in[k], c.ins_out[k], c.w_offset[k], c.path_weight[k]);
        numel += (int64_t)c.in.b[c.ins_in[k]].mul * c.out.b[c.ins_out[k]].mul;
    }
    w->assign(c.weight, c.weight + numel);
    cgq_linear_compose_free(&c);
    if (!lin_gemm_ok(&u->comp.l)) return CGQ_STATUS_OK;
    rows->clear();
    if (adds_sc) { /* Wu sc_0 per species, in double by the reference's map */
        const int dhu0 = l0->linear_up.out.dim, ld = dhu0 + g->layer0_sc, dhu1 = l1->linear_up.out.dim;
        rows->resize((size_t)m->n_species * dhu1);
        for (int z = 0; z < m->n_species; z++)
            cgq_linear_forward(&l1->linear_up, g->layer0_rows_host.data() + (size_t)z * ld + dhu0,
                               rows->data() + (size_t)z * dhu1);
    }
    u->ok = true;
    return CGQ_STATUS_OK;
}

/* up_compose_plan on the device where it applies (MACE-MP-0 at 5,184 atoms: 5.30 -> 5.24 ms, session 55);
 * CGQ_GPU_UP_COMPOSE=0: layer 0's product linear and layer 1's linear_up as two GEMMs (the ctest
 * test_gpu_up_uncomposed) */
static cgq_status build_up_compose(cgq_gpu *g) {
    const char *env = getenv("CGQ_GPU_UP_COMPOSE");
    up_compose_plan &u = g->up_comp;
    std::vector<double> w, rows;
    const cgq_status st = env && env[0] == '0' ? CGQ_STATUS_OK : up_compose_host(g, &u, &w, &rows);
    std::vector<double>().swap(g->layer0_rows_host); /* read by the plan's host part alone: not kept */
    if (st != CGQ_STATUS_OK || !u.ok) return st;
    std::vector<float> wf(w.begin(), w.end());
    double *dw = w.data(), *dr = rows.empty() ? nullptr : rows.data();
    float *dwf = wf.data();
    CGQ_TRY(upload(g, &dw, w.size()));
    CGQ_TRY(upload(g, &dwf, wf.size()));
    CGQ_TRY(upload(g, &dr, rows.size()));
    u.w = dw, u.w_f = reinterpret_cast<const double *>(dwf), u.rows = dr;
    return CGQ_STATUS_OK;
}

static cgq_status grow(void **p, size_t *cap, size_t bytes) {
    if (bytes <= *cap) return CGQ_STATUS_OK;
    cudaFree(*p);
    *p = nullptr;
    *cap = 0;
    const size_t want = bytes + bytes / 16 + 256;
    cudaError_t err = cudaMalloc(p, want);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "GPU out of memory: needed %.1f MB more device memory; use fewer atoms "
                        "per GPU (more MPI ranks / GPUs) or device cpu", 1e-6 * (double)want);
    }
    *cap = want;
    return CGQ_STATUS_OK;
}

/* *p: pinned host memory of at least bytes (grown by padding, then kept): transfers through it run at full speed, with
 * no per-call allocation or page faults. what: its use, for the message. */
static cgq_status grow_pinned(void **p, size_t *cap, size_t bytes, const char *what) {
    if (bytes <= *cap) return CGQ_STATUS_OK;
    cudaFreeHost(*p);
    *p = nullptr, *cap = 0;
    const size_t want = bytes + bytes / 16 + 256;
    if (cudaHostAlloc(p, want, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();
        return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY,
                        "out of pinned host memory for %s (%.1f MB); use fewer atoms per GPU (more MPI ranks / GPUs)",
                        what, 1e-6 * (double)want);
    }
    *cap = want;
    return CGQ_STATUS_OK;
}

/* The caller's staging of an exchange's rows for bytes (in: stage_rows_in, the rows that come in; else stage_rows, the
 * rows that go out), or NULL (then the evaluator's own). Page-locked once per buffer (a buffer within the one
 * registered last is not registered again), so that the copies run at the bus's speed; where that is refused the
 * buffer is still used, through pageable copies. */
template <class U>
static U *exchange_stage(cgq_gpu *g, const cgq_exchange *xc, size_t bytes, bool in) {
    void *(*stage)(void *, size_t, size_t *) = in ? xc->stage_rows_in : xc->stage_rows;
    if (!stage) return nullptr;
    size_t cap = 0;
    char *p = static_cast<char *>(stage(xc->ctx, bytes, &cap));
    if (!p || cap < bytes) return nullptr;
    char *&base = g->xext[in];
    size_t &reg = g->xext_bytes[in];
    if (!(reg && p >= base && p + cap <= base + reg)) {
        if (reg) cudaHostUnregister(base);
        base = p, reg = 0;
        if (cudaHostRegister(p, cap, cudaHostRegisterPortable) == cudaSuccess) reg = cap;
        else (void)cudaGetLastError(); /* pageable: correct, slower */
    }
    return reinterpret_cast<U *>(p);
}

/* The rows form's send nodes on the device for this evaluation's exchanges (the API checked them: distinct local
 * nodes) */
static cgq_status exchange_begin(cgq_gpu *g, const cgq_exchange *xc) {
    if (!xc || !xc->forward_rows || !xc->n_send) return CGQ_STATUS_OK;
    CGQ_TRY(grow((void **)&g->xnodes, &g->xnodes_cap, sizeof(int32_t) * xc->n_send));
    CGQ_CHECK_GPU(cudaMemcpy(g->xnodes, xc->send_nodes, sizeof(int32_t) * xc->n_send, cudaMemcpyHostToDevice));
    return CGQ_STATUS_OK;
}

/* Rows [0, NA) of a T array (N local rows, then ghost rows) through the host exchange, which moves U (double, or float
 * through the float rows of an fp32 evaluator); only what the exchange reads and changes crosses the bus, through
 * pinned memory. Forward: the rows that go out go down (the rows form's send rows, gathered on the device, or every
 * local row), the ghost rows come back. Reverse: the ghost rows go down, and the sums the local rows receive come back
 * and are added on the device (the ghost rows are left as they were: nothing reads them afterwards). staging: device
 * U, NA rows, where T is not U (ghost rows are converted there). Moving every row both ways through pageable memory
 * made two ranks 6x slower than one (water MACE in LAMMPS, session 42); at 93,312 atoms every local row down was 191
 * MB per exchange, where peers read ~35%. */
template <class T, class U>
static cgq_status exchange_rows_as(cgq_gpu *g, T *dev, U *staging, int64_t N, int64_t NA, int width,
                                   const cgq_exchange *xc, bool reverse) {
    constexpr bool same = sizeof(T) == sizeof(U);
    constexpr bool f32 = sizeof(U) == sizeof(float); /* the float rows (rows form) */
    const bool by_rows = xc->forward_rows != nullptr;
    const int64_t nout = (by_rows ? xc->n_send : N) * width, ng = (NA - N) * width;
    CGQ_TRY(grow_pinned(&g->xstage, &g->xstage_cap, sizeof(U) * (nout + ng + 1), "the ghost exchange"));
    U *h = static_cast<U *>(g->xstage), *hg = h + nout; /* host: the rows out (or sums in), then the ghost rows */
    if (by_rows) { /* the caller's staging: the rows handed over (forward: the send rows; reverse: the ghost rows), and
                    * those taken (forward: the ghost rows; reverse: the sums) */
        U *out = exchange_stage<U>(g, xc, sizeof(U) * ((reverse ? ng : nout) + 1), false);
        U *in = exchange_stage<U>(g, xc, sizeof(U) * ((reverse ? nout : ng) + 1), true);
        if (out) (reverse ? hg : h) = out;
        if (in) (reverse ? h : hg) = in;
    }
    U *ghosts = (same ? reinterpret_cast<U *>(dev) : staging) + N * width; /* device U */
    CGQ_TRY(grow(&g->xinc, &g->xinc_cap, sizeof(U) * (nout + 1)));
    U *packed = static_cast<U *>(g->xinc);
    if (!reverse) {
        if (nout) {
            if (by_rows)
                k_gather_rows<T, U><<<blocks_for(nout), CGQ_GPU_THREADS>>>(xc->n_send, width, g->xnodes, dev, packed);
            else
                k_convert<T, U><<<blocks_for(nout), CGQ_GPU_THREADS>>>(nout, dev, packed);
            CGQ_LAUNCH_CHECK();
            CGQ_CHECK_GPU(cudaMemcpy(h, packed, sizeof(U) * nout, cudaMemcpyDeviceToHost));
        }
        if constexpr (f32) {
            CGQ_TRY(xc->forward_rows_f32(xc->ctx, h, hg, width));
        } else if (by_rows) {
            CGQ_TRY(xc->forward_rows(xc->ctx, h, hg, width));
        } else {
            CGQ_TRY(xc->forward(xc->ctx, h, width)); /* h holds the local rows, then the ghost rows: [NA][width] */
        }
        if (ng) CGQ_CHECK_GPU(cudaMemcpy(ghosts, hg, sizeof(U) * ng, cudaMemcpyHostToDevice));
        if (!same && ng) k_convert<U, T><<<blocks_for(ng), CGQ_GPU_THREADS>>>(ng, ghosts, dev + N * width);
        CGQ_LAUNCH_CHECK();
        return CGQ_STATUS_OK;
    }
    if (!same && ng) k_convert<T, U><<<blocks_for(ng), CGQ_GPU_THREADS>>>(ng, dev + N * width, ghosts);
    if (ng) CGQ_CHECK_GPU(cudaMemcpy(hg, ghosts, sizeof(U) * ng, cudaMemcpyDeviceToHost));
    if constexpr (f32) {
        CGQ_TRY(xc->reverse_rows_f32(xc->ctx, hg, h, width));
    } else if (by_rows) {
        CGQ_TRY(xc->reverse_rows(xc->ctx, hg, h, width));
    } else {
        memset(h, 0, sizeof(U) * nout);
        CGQ_TRY(xc->reverse(xc->ctx, h, width));
    }
    if (!nout) return CGQ_STATUS_OK;
    CGQ_CHECK_GPU(cudaMemcpy(packed, h, sizeof(U) * nout, cudaMemcpyHostToDevice));
    if (by_rows)
        k_scatter_add_rows<U, T><<<blocks_for(nout), CGQ_GPU_THREADS>>>(xc->n_send, width, g->xnodes, packed, dev);
    else
        k_add_convert<U, T><<<blocks_for(nout), CGQ_GPU_THREADS>>>(nout, packed, dev);
    CGQ_LAUNCH_CHECK();
    return CGQ_STATUS_OK;
}

/* exchange_rows_as in float where the rows are float and the exchange has float rows (half the bytes over the bus
 * and between ranks), else in double (staging: device doubles, NA rows, for float rows; unused for double) */
template <class T>
static cgq_status exchange_rows(cgq_gpu *g, T *dev, double *staging, int64_t N, int64_t NA, int width,
                                const cgq_exchange *xc, bool reverse) {
    if constexpr (sizeof(T) == sizeof(float))
        if (xc->forward_rows && xc->forward_rows_f32)
            return exchange_rows_as<T, float>(g, dev, nullptr, N, NA, width, xc, reverse);
    return exchange_rows_as<T, double>(g, dev, staging, N, NA, width, xc, reverse);
}

/* erecv[e] = the receiver of edge e, one warp per receiver row: its lanes write consecutive edges (a thread per row
 * wrote ~90 edges one after the other, uncoalesced, in 41 blocks at 5,184 atoms: 27 us per launch on the H100,
 * session 28's ncu) */
__global__ void k_edge_receivers(int64_t n, const int64_t *row_ptr, int32_t *erecv) {
    const int64_t warps = (int64_t)gridDim.x * blockDim.x / CGQ_WARP;
    const int lane = threadIdx.x % CGQ_WARP;
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CGQ_WARP; i < n; i += warps)
        for (int64_t e = row_ptr[i] + lane; e < row_ptr[i + 1]; e += CGQ_WARP) erecv[e] = (int32_t)i;
}

/* g's pinned host staging of the graph and the pairs, at least bytes */
static cgq_status grow_stage(cgq_gpu *g, size_t bytes) {
    return grow_pinned(&g->graph_stage, &g->stage_cap, bytes, "the graph");
}

/* Uploads the graph and the sender-sorted edge index (for the reverse pass) and points c at it: the host
 * arrays are packed into a pinned buffer laid out like the device one and sent in one transfer. */
static cgq_status upload_graph(cgq_gpu *g, const cgq_graph *gr, mace_ctx *c) {
    const int64_t N = c->N, NA = c->NA, E = c->E;
    auto up8 = [](size_t b) { return (b + 7) / 8 * 8; };
    const size_t o_row = up8(sizeof(int32_t) * (NA + 1)), o_sender = o_row + up8(sizeof(int64_t) * (N + 1));
    const size_t o_vec = o_sender + up8(sizeof(int32_t) * (E + 1)), o_srow = o_vec + up8(sizeof(double) * (3 * E + 1));
    const size_t o_sedge = o_srow + up8(sizeof(int64_t) * (NA + 1)), o_erecv = o_sedge + up8(sizeof(int32_t) * (E + 1));
    const size_t graph_bytes = o_erecv + up8(sizeof(int32_t) * (E + 1));
    CGQ_TRY(grow(&g->graph_buf, &g->graph_cap, graph_bytes));
    CGQ_TRY(grow_stage(g, o_erecv));
    char *h = static_cast<char *>(g->graph_stage), *d = static_cast<char *>(g->graph_buf);
    /* an empty domain (no atoms or no edges) may come with NULL arrays: copy only what exists */
    if (NA) memcpy(h, gr->species, sizeof(int32_t) * NA);
    CGQ_TRY(set_species_classes(g, gr->species, NA));
    memcpy(h + o_row, gr->row_ptr, sizeof(int64_t) * (N + 1));
    if (E) memcpy(h + o_sender, gr->sender, sizeof(int32_t) * E);
    if (E) memcpy(h + o_vec, gr->vec, sizeof(double) * 3 * E);
    CGQ_TRY(cgq_sender_index(gr->sender, E, NA, reinterpret_cast<int64_t *>(h + o_srow),
                             reinterpret_cast<int32_t *>(h + o_sedge)));
    CGQ_CHECK_GPU(cudaMemcpyAsync(d, h, o_erecv, cudaMemcpyHostToDevice));
    c->species = (int32_t *)d, c->row_ptr = (int64_t *)(d + o_row), c->sender = (int32_t *)(d + o_sender);
    c->vec = (double *)(d + o_vec), c->srow = (int64_t *)(d + o_srow), c->sedge = (int32_t *)(d + o_sedge);
    c->erecv = (int32_t *)(d + o_erecv);
    if (N) k_edge_receivers<<<blocks_for(N * CGQ_WARP), CGQ_GPU_THREADS>>>(N, c->row_ptr, c->erecv);
    CGQ_CHECK_GPU(cudaGetLastError());
    return CGQ_STATUS_OK;
}

/* ---- cgq_evaluate_pairs: the graph of each step built on the device from positions ---------------- */
/* n elements of P at base + off, 16-byte aligned; off advances (a null base only measures) */
template <class P>
static P *carve(char *base, size_t &off, size_t n) {
    P *p = base ? reinterpret_cast<P *>(base + off) : nullptr;
    off += (sizeof(P) * n + 15) / 16 * 16;
    return p;
}

static unsigned scan_tile_count(int64_t n) {
    return (unsigned)((n + CGQ_SCAN_TILE - 1) / CGQ_SCAN_TILE);
}
/* The scan of n int32 flags into out[0..n] (out[n] = total) whose tiles' counts are in tiles (n / CGQ_SCAN_TILE + 1
 * int64: k_scan_tiles, or the kernel that made the flags) */
static void scan_counted_flags(const int32_t *in, int64_t n, int64_t *out, int64_t *tiles) {
    const unsigned nt = scan_tile_count(n);
    k_scan_tile_sums<<<1, CGQ_SCAN_THREADS>>>(nt, tiles, out + n);
    if (nt) k_scan_apply<<<nt, CGQ_SCAN_THREADS>>>(n, in, tiles, out);
}
/* Exclusive scan of n int32 flags into out[0..n] (out[n] = total); tiles: (n / CGQ_SCAN_TILE + 1) int64. */
static void scan_flags(const int32_t *in, int64_t n, int64_t *out, int64_t *tiles) {
    if (n) k_scan_tiles<<<scan_tile_count(n), CGQ_SCAN_THREADS>>>(n, in, tiles);
    scan_counted_flags(in, n, out, tiles);
}

extern "C" cgq_status cgq_gpu_scan_flags(const int32_t *flags, int64_t n, int64_t *out) {
    int32_t *in = nullptr;
    int64_t *d = nullptr;
    cgq_status st = CGQ_STATUS_OK;
    const size_t tiles = (size_t)(n / CGQ_SCAN_TILE + 2);
    if (cudaMalloc(&in, sizeof(int32_t) * (size_t)(n + 1)) != cudaSuccess ||
        cudaMalloc(&d, sizeof(int64_t) * ((size_t)n + 1 + tiles)) != cudaSuccess ||
        cudaMemcpy(in, flags, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice) != cudaSuccess)
        st = cgq_fail(CGQ_STATUS_DEVICE_ERROR, "cgq_gpu_scan_flags: %s", cudaGetErrorString(cudaGetLastError()));
    if (st == CGQ_STATUS_OK) {
        scan_flags(in, n, d, d + n + 1);
        if (cudaMemcpy(out, d, sizeof(int64_t) * (size_t)(n + 1), cudaMemcpyDeviceToHost) != cudaSuccess)
            st = cgq_fail(CGQ_STATUS_DEVICE_ERROR, "cgq_gpu_scan_flags: %s", cudaGetErrorString(cudaGetLastError()));
    }
    cudaFree(in);
    cudaFree(d);
    return st;
}

extern "C" int cgq_gpu_runs_pairs(const cgq_gpu *g) {
    return g && (g->v2 || g->nq_v2);
}

/* Pinned staging of a pairs step (in graph_stage, which set_pairs sized for the candidates): the graph's summary
 * first, then the positions going up or the forces and virials coming down. */
#define PAIR_STAGE_DATA 64
static_assert(sizeof(pair_summary) <= PAIR_STAGE_DATA, "the summary before the data");

/* The candidate list's fixed arrays at q (nullptr: only the size); the first *sent bytes are the host's part, which
 * set_pairs sends in one copy, and each candidate's receiver follows (filled on the device: pairs_ready) */
static size_t lay_pairs_fixed(pair_state &ps, char *q, int64_t NP, int64_t N, int64_t NA, int64_t C, size_t *sent) {
    size_t o = 0;
    ps.cand_row = carve<int64_t>(q, o, N + 1), ps.cand_srow = carve<int64_t>(q, o, NA + 2);
    ps.cand = carve<int32_t>(q, o, C), ps.order = carve<int32_t>(q, o, C);
    ps.point_node = carve<int32_t>(q, o, NP), ps.species = carve<int32_t>(q, o, NA);
    *sent = o;
    ps.cand_recv = carve<int32_t>(q, o, C);
    return o;
}

/* The summary's error fields to "none" (0x7f7f7f7f) for the next step: queued once a step's are read, so that the
 * next step's first launches are its kernels */
static cgq_status pairs_summary_reset(const pair_state &ps) {
    CGQ_CHECK_GPU(cudaMemsetAsync(ps.summary, 0x7f, offsetof(pair_summary, n_edges)));
    return CGQ_STATUS_OK;
}

/* set_pairs and build_pairs, once the candidates (cand_row, cand) and their grouping by sender node (cand_srow, order;
 * ns of them have a node) are on the device: each candidate's receiver, the per-step buffers and the sizes */
static cgq_status pairs_ready(cgq_gpu *g, int64_t NP, int64_t N, int64_t NA, int64_t C, int64_t ns,
                              const int64_t *point_id) {
    pair_state &ps = g->pairs;
    if (N) k_edge_receivers<<<blocks_for(N * CGQ_WARP), CGQ_GPU_THREADS>>>(N, ps.cand_row, ps.cand_recv);
    CGQ_LAUNCH_CHECK();
    const int64_t tiles = std::max(C, ns) / CGQ_SCAN_TILE + 2;
    auto lay_step = [&](char *q) {
        size_t o = 0;
        ps.x = carve<double>(q, o, 3 * NP), ps.keep = carve<int32_t>(q, o, C), ps.skeep = carve<int32_t>(q, o, ns);
        ps.summary = carve<pair_summary>(q, o, 1);
        ps.escan = carve<int64_t>(q, o, C + 1), ps.sscan = carve<int64_t>(q, o, ns + 1);
        ps.tiles = carve<int64_t>(q, o, tiles), ps.row_ptr = carve<int64_t>(q, o, N + 1), ps.srow = carve<int64_t>(q, o, NA + 1);
        ps.force = carve<double>(q, o, 3 * NA), ps.virial = carve<double>(q, o, 9);
        ps.node_virial = carve<double>(q, o, 9 * NA), ps.bpart = carve<double>(q, o, 9 * node_forces_blocks(NA));
        ps.ticket = carve<unsigned>(q, o, 1);
        ps.sender = carve<int32_t>(q, o, C), ps.vec = carve<double>(q, o, 3 * C);
        ps.sedge = carve<int32_t>(q, o, C), ps.erecv = carve<int32_t>(q, o, C);
        return o;
    };
    CGQ_TRY(grow(&ps.step, &ps.step_cap, lay_step(nullptr)));
    lay_step(static_cast<char *>(ps.step));
    CGQ_TRY(pairs_summary_reset(ps));
    CGQ_CHECK_GPU(cudaMemsetAsync(ps.ticket, 0, sizeof(unsigned)));
    if (!ps.summary_ready) CGQ_CHECK_GPU(cudaEventCreateWithFlags(&ps.summary_ready, cudaEventDisableTiming));
    ps.n_points = NP, ps.n_local = N, ps.n_nodes = NA, ps.n_cand = C, ps.n_sorted = ns;
    if (point_id) ps.point_id.assign(point_id, point_id + NP);
    else ps.point_id.clear();
    ps.set = true;
    return CGQ_STATUS_OK;
}

static cgq_status too_many_pairs(int64_t C, int64_t NP) {
    return cgq_fail(CGQ_STATUS_UNSUPPORTED, "%lld candidate pairs of %lld atoms on one GPU: more than 2^31-1; use more "
                    "MPI ranks (GPUs)", (long long)C, (long long)NP);
}

extern "C" cgq_status cgq_gpu_set_pairs(cgq_gpu *g, const cgq_pair_list *pl) {
    pair_state &ps = g->pairs;
    ps.set = false, g->pairs_groups_ok = false;
    const int64_t NP = pl->n_points, N = pl->n_local, NA = pl->n_nodes, C = N ? pl->row_ptr[N] : 0;
    if (C > INT32_MAX || NP > INT32_MAX) return too_many_pairs(C, NP);
    size_t sent = 0;
    const size_t bytes = lay_pairs_fixed(ps, nullptr, NP, N, NA, C, &sent);
    CGQ_TRY(grow_stage(g, sent));
    lay_pairs_fixed(ps, static_cast<char *>(g->graph_stage), NP, N, NA, C, &sent);
    memcpy(ps.cand_row, pl->row_ptr, sizeof(int64_t) * (N + 1));
    if (C) memcpy(ps.cand, pl->candidate, sizeof(int32_t) * C);
    if (NP) memcpy(ps.point_node, pl->point_node, sizeof(int32_t) * NP);
    if (NA) memcpy(ps.species, pl->species, sizeof(int32_t) * NA);
    CGQ_TRY(set_species_classes(g, pl->species, NA));
    /* the candidates grouped by sender node (stable); copies without a node (-1) go last, to a bucket of their own */
    ps.snode.resize(C + 1);
    for (int64_t c = 0; c < C; c++) {
        const int32_t node = pl->point_node[pl->candidate[c]];
        ps.snode[c] = node >= 0 ? node : (int32_t)NA;
    }
    CGQ_TRY(cgq_sender_index(ps.snode.data(), C, NA + 1, ps.cand_srow, ps.order));
    const int64_t ns = ps.cand_srow[NA];
    CGQ_TRY(grow(&ps.buf, &ps.cap, bytes));
    CGQ_CHECK_GPU(cudaMemcpy(ps.buf, g->graph_stage, sent, cudaMemcpyHostToDevice));
    lay_pairs_fixed(ps, static_cast<char *>(ps.buf), NP, N, NA, C, &sent);
    return pairs_ready(g, NP, N, NA, C, ns, pl->point_id);
}

/* cgq_evaluator_build_pairs on the device (pairs_build.cuh): the positions go up once, the points into cells, each
 * receiver's candidates counted (with the first overlapping pair), scanned into rows, written and sorted; then the
 * candidates grouped by sender node and sorted within each node. The host waits twice, for the candidates' count
 * (to size the list) and for how many have a sender node. */
extern "C" cgq_status cgq_gpu_build_pairs(cgq_gpu *g, const cgq_point_set *pt, double radius, const double lo[3],
                                          const double hi[3]) {
    pair_state &ps = g->pairs;
    ps.set = false, g->pairs_groups_ok = false;
    const int64_t NP = pt->n_points, N = pt->n_local, NA = pt->n_nodes;
    if (NP > INT32_MAX) return too_many_pairs(0, NP);
    const double *x = pt->positions;
    /* cells of side h >= radius (a margin for rounding), so that every candidate of a point lies in the 27 cells
     * around it; at most ~2 cells per point (h doubles for sparse or far-flung points) */
    double h = radius * (1 + 1e-6), n[3];
    const double max_cells = 2.0 * (double)NP + 64;
    for (;;) {
        for (int d = 0; d < 3; d++) n[d] = std::floor((hi[d] - lo[d]) / h) + 1;
        if (n[0] * n[1] * n[2] <= max_cells) break;
        h *= 2;
    }
    cell_grid cg;
    for (int d = 0; d < 3; d++) cg.lo[d] = lo[d], cg.n[d] = (int)n[d];
    cg.inv_h = 1 / h;
    const int64_t ncell = (int64_t)cg.n[0] * cg.n[1] * cg.n[2];
    /* the build's own arrays (sized by points, cells and nodes; the candidates' go in the list's buffer) */
    const int64_t tiles = std::max({ncell, N, NA + 1}) / CGQ_SCAN_TILE + 2;
    double *dx = nullptr;
    int64_t *cell_start = nullptr, *row_start = nullptr, *tile = nullptr;
    unsigned long long *overlap = nullptr;
    int32_t *cell_of = nullptr, *cell_points = nullptr, *cell_count = nullptr, *cell_fill = nullptr, *row_count = nullptr;
    int32_t *row_fill = nullptr, *node_count = nullptr, *node_fill = nullptr;
    size_t zero_from = 0, zero_to = 0;
    auto lay = [&](char *q) {
        size_t o = 0;
        dx = carve<double>(q, o, 3 * NP), cell_start = carve<int64_t>(q, o, ncell + 1), tile = carve<int64_t>(q, o, tiles);
        row_start = carve<int64_t>(q, o, N + 2); /* the rows, then the first overlap: adjacent, one download */
        overlap = reinterpret_cast<unsigned long long *>(row_start + N + 1);
        cell_of = carve<int32_t>(q, o, NP), cell_points = carve<int32_t>(q, o, NP), row_count = carve<int32_t>(q, o, N);
        zero_from = o; /* the counters: zeroed together */
        cell_count = carve<int32_t>(q, o, ncell), cell_fill = carve<int32_t>(q, o, ncell), row_fill = carve<int32_t>(q, o, N);
        node_count = carve<int32_t>(q, o, NA + 1), node_fill = carve<int32_t>(q, o, NA + 1);
        zero_to = o;
        return o;
    };
    CGQ_TRY(grow(&ps.build, &ps.build_cap, lay(nullptr)));
    char *b = static_cast<char *>(ps.build);
    lay(b);
    CGQ_TRY(grow_stage(g, std::max<size_t>(PAIR_STAGE_DATA, sizeof(double) * 3 * NP)));
    char *stage = static_cast<char *>(g->graph_stage);
    if (NP) {
        memcpy(stage, x, sizeof(double) * 3 * NP);
        CGQ_CHECK_GPU(cudaMemcpyAsync(dx, stage, sizeof(double) * 3 * NP, cudaMemcpyHostToDevice));
    }
    CGQ_CHECK_GPU(cudaMemsetAsync(b + zero_from, 0, zero_to - zero_from));
    CGQ_CHECK_GPU(cudaMemsetAsync(overlap, 0xff, sizeof *overlap));
    if (NP) k_cell_count<<<blocks_for(NP), CGQ_GPU_THREADS>>>(NP, dx, cg, cell_of, cell_count);
    scan_flags(cell_count, ncell, cell_start, tile);
    if (NP) k_cell_place<<<blocks_for(NP), CGQ_GPU_THREADS>>>(NP, cell_of, cell_start, cell_fill, cell_points);
    const double r2 = radius * radius;
    if (N)
        k_cand_rows<<<blocks_wide(N * CGQ_WARP), CGQ_GPU_THREADS>>>(N, dx, cg, cell_of, cell_start, cell_points, r2,
                                                                   row_count, overlap, nullptr, nullptr, nullptr);
    scan_flags(row_count, N, row_start, tile);
    CGQ_LAUNCH_CHECK();
    struct {
        int64_t n_cand;
        unsigned long long overlap;
    } head;
    static_assert(sizeof head <= PAIR_STAGE_DATA, "staged");
    CGQ_CHECK_GPU(cudaMemcpyAsync(stage, row_start + N, sizeof head, cudaMemcpyDeviceToHost));
    CGQ_CHECK_GPU(cudaStreamSynchronize(0));
    memcpy(&head, stage, sizeof head);
    auto id = [&](int64_t p) { return (long long)(pt->point_id ? pt->point_id[p] : p); };
    static_assert(sizeof(unsigned long long) == sizeof(int64_t), "the overlap key after the rows");
    if (head.overlap != ~0ull) {
        const int64_t i = (int64_t)(head.overlap >> 32), j = (int64_t)(head.overlap & 0xffffffffu);
        if (i >= NP || j >= NP) return cgq_fail(CGQ_STATUS_DEVICE_ERROR, "the GPU named overlapping points %lld and %lld of %lld (a device fault)", (long long)i, (long long)j, (long long)NP);
        const double *xi = x + 3 * i, *xj = x + 3 * j;
        const double d = std::sqrt((xi[0] - xj[0]) * (xi[0] - xj[0]) + (xi[1] - xj[1]) * (xi[1] - xj[1]) +
                                   (xi[2] - xj[2]) * (xi[2] - xj[2]));
        return cgq_fail(CGQ_STATUS_BAD_INPUT, "atoms %lld at (%g, %g, %g) and %lld at (%g, %g, %g) overlap: they are "
                        "%.3g A apart, closer than 1e-08 A; remove duplicate atoms from the input structure", id(i),
                        xi[0], xi[1], xi[2], id(j), xj[0], xj[1], xj[2], d);
    }
    const int64_t C = head.n_cand;
    if (C > INT32_MAX) return too_many_pairs(C, NP);
    /* the list: rows, then each row's candidates written (any order) and sorted by point */
    size_t sent = 0;
    CGQ_TRY(grow(&ps.buf, &ps.cap, lay_pairs_fixed(ps, nullptr, NP, N, NA, C, &sent)));
    lay_pairs_fixed(ps, static_cast<char *>(ps.buf), NP, N, NA, C, &sent);
    if (NP) CGQ_CHECK_GPU(cudaMemcpy(ps.point_node, pt->point_node, sizeof(int32_t) * NP, cudaMemcpyHostToDevice));
    if (NA) CGQ_CHECK_GPU(cudaMemcpy(ps.species, pt->species, sizeof(int32_t) * NA, cudaMemcpyHostToDevice));
    CGQ_CHECK_GPU(cudaMemcpyAsync(ps.cand_row, row_start, sizeof(int64_t) * (N + 1), cudaMemcpyDeviceToDevice));
    int32_t *unsorted = ps.cand_recv; /* free until pairs_ready fills it */
    if (N) {
        k_cand_rows<<<blocks_wide(N * CGQ_WARP), CGQ_GPU_THREADS>>>(N, dx, cg, cell_of, cell_start, cell_points, r2,
                                                                   nullptr, nullptr, row_start, row_fill, unsorted);
        k_sort_segments<<<blocks_wide(N * CGQ_WARP), CGQ_GPU_THREADS>>>(N, row_start, unsorted, ps.cand);
    }
    /* grouped by sender node (copies without a node last), each group in candidate order */
    if (C) k_group_by_sender<<<blocks_for(C), CGQ_GPU_THREADS>>>(C, ps.cand, ps.point_node, (int32_t)NA, node_count,
                                                                nullptr, nullptr, nullptr);
    scan_flags(node_count, NA + 1, ps.cand_srow, tile);
    if (C) {
        k_group_by_sender<<<blocks_for(C), CGQ_GPU_THREADS>>>(C, ps.cand, ps.point_node, (int32_t)NA, nullptr,
                                                             ps.cand_srow, node_fill, unsorted);
        k_sort_segments<<<blocks_wide((NA + 1) * CGQ_WARP), CGQ_GPU_THREADS>>>(NA + 1, ps.cand_srow, unsorted, ps.order);
    }
    CGQ_LAUNCH_CHECK();
    int64_t ns = 0;
    CGQ_CHECK_GPU(cudaMemcpyAsync(stage, ps.cand_srow + NA, sizeof ns, cudaMemcpyDeviceToHost));
    CGQ_CHECK_GPU(cudaStreamSynchronize(0));
    memcpy(&ns, stage, sizeof ns);
    CGQ_TRY(set_species_classes(g, pt->species, NA));
    return pairs_ready(g, NP, N, NA, C, ns, pt->point_id);
}

/* The kept candidates' edges (sender, vector, receiver) and the edges grouped by sender, into arrays laid for all
 * n_cand candidates (pairs_ready: the edges are at most as many) */
static void pairs_edges(const pair_state &ps) {
    const int64_t C = ps.n_cand, ns = ps.n_sorted;
    if (C)
        k_pair_edges<<<blocks_for(C), CGQ_GPU_THREADS>>>(C, ps.cand_recv, ps.cand, ps.point_node, ps.x, ps.keep,
                                                         ps.escan, ps.sender, ps.vec, ps.erecv);
    if (ns)
        k_pair_sender_edges<<<blocks_for(ns), CGQ_GPU_THREADS>>>(ns, ps.order, ps.skeep, ps.sscan, ps.escan, ps.sedge);
}

/* Step 1 of a pairs evaluation: positions up (checked on the device), the kept candidates counted and scanned, the
 * row pointers made, and the graph's summary down (pair_summary: the edge count and the input errors), which the host
 * waits for while the GPU fills the edges (pairs_edges); the rows stay on the device unless the edges need chunks
 * (pairs_rows). */
static cgq_status pairs_count(cgq_gpu *g, const double *pos) {
    pair_state &ps = g->pairs;
    const int64_t N = ps.n_local, NA = ps.n_nodes, C = ps.n_cand, ns = ps.n_sorted, NP = ps.n_points;
    const double rc = g->host_model->r_max;
    CGQ_TRY(grow_stage(g, PAIR_STAGE_DATA + sizeof(double) * 3 * NP));
    char *stage = static_cast<char *>(g->graph_stage);
    if (NP) { /* through pinned memory: the launches below are queued while it travels */
        memcpy(stage + PAIR_STAGE_DATA, pos, sizeof(double) * 3 * NP);
        CGQ_CHECK_GPU(cudaMemcpyAsync(ps.x, stage + PAIR_STAGE_DATA, sizeof(double) * 3 * NP, cudaMemcpyHostToDevice));
    }
    /* the flag kernels count their tiles for the scans (a pass fewer over each array); the summary's error fields
     * were reset after the last step's were read (pairs_summary_reset) */
    if (C || NP)
        k_pair_keep<<<std::max(1u, scan_tile_count(C)), CGQ_SCAN_THREADS>>>(
            C, ps.cand_recv, ps.cand, ps.point_node, NP, ps.x, rc * rc, ps.keep, ps.summary, ps.tiles);
    scan_counted_flags(ps.keep, C, ps.escan, ps.tiles);
    if (ns) k_gather_flags<<<scan_tile_count(ns), CGQ_SCAN_THREADS>>>(ns, ps.order, ps.keep, ps.skeep, ps.tiles);
    scan_counted_flags(ps.skeep, ns, ps.sscan, ps.tiles);
    k_pair_rows<<<blocks_for(std::max(N, NA) + 1), CGQ_GPU_THREADS>>>(N, ps.cand_row, ps.escan, ps.row_ptr, NA, ps.cand_srow,
                                                                     ps.sscan, ps.srow, &ps.summary->n_edges);
    CGQ_LAUNCH_CHECK();
    pair_summary sum;
    CGQ_CHECK_GPU(cudaMemcpyAsync(stage, ps.summary, sizeof sum, cudaMemcpyDeviceToHost));
    CGQ_CHECK_GPU(cudaEventRecord(ps.summary_ready, 0));
    /* the edges are filled while the summary travels and the host plans the step (the host's round trip left the GPU
     * idle ~19 us of each step between k_pair_rows and these, session 50's trace) */
    pairs_edges(ps);
    CGQ_LAUNCH_CHECK();
    CGQ_CHECK_GPU(cudaEventSynchronize(ps.summary_ready));
    memcpy(&sum, stage, sizeof sum);
    CGQ_TRY(pairs_summary_reset(ps));
    auto id = [&](int64_t point) { return (long long)(ps.point_id.empty() ? point : ps.point_id[point]); };
    if (sum.nonfinite != 0x7f7f7f7f) {
        const double *x = pos + 3 * (int64_t)sum.nonfinite;
        const double v = !std::isfinite(x[0]) ? x[0] : !std::isfinite(x[1]) ? x[1] : x[2];
        return cgq_fail(CGQ_STATUS_BAD_INPUT, "atom %lld has a non-finite position (%g); the simulation has blown up "
                        "or the input is corrupt", id(sum.nonfinite), v);
    }
    for (int k = 0; k < 2; k++) {
        if (sum.bad[k] == 0x7f7f7f7f) continue;
        int32_t i = 0, j = 0;
        CGQ_CHECK_GPU(cudaMemcpy(&i, ps.cand_recv + sum.bad[k], sizeof i, cudaMemcpyDeviceToHost));
        CGQ_CHECK_GPU(cudaMemcpy(&j, ps.cand + sum.bad[k], sizeof j, cudaMemcpyDeviceToHost));
        if (k == 0)
            return cgq_fail(CGQ_STATUS_BAD_INPUT, "atom %lld within the cutoff of atom %lld has no graph node (a ghost "
                            "copy whose owner is not a local atom)", id(j), id(i));
        return cgq_fail(CGQ_STATUS_BAD_INPUT, "atoms %lld and %lld are closer than 1e-8 A: remove duplicate atoms", id(i),
                        id(j));
    }
    ps.n_edges = sum.n_edges;
    ps.h_row.clear(); /* this step's are not on the host (pairs_rows) */
    return CGQ_STATUS_OK;
}

/* The step's row pointers on the host (plan_chunks, where the edges need chunks) */
static cgq_status pairs_rows(cgq_gpu *g, const int64_t **h_row) {
    pair_state &ps = g->pairs;
    if (ps.h_row.empty()) {
        ps.h_row.resize(ps.n_local + 1);
        CGQ_CHECK_GPU(cudaMemcpy(ps.h_row.data(), ps.row_ptr, sizeof(int64_t) * (ps.n_local + 1), cudaMemcpyDeviceToHost));
    }
    *h_row = ps.h_row.data();
    return CGQ_STATUS_OK;
}

/* Step 2 (after the layout): the step's graph arrays (filled by pairs_edges) */
static cgq_status pairs_fill(cgq_gpu *g, mace_ctx *c) {
    const pair_state &ps = g->pairs;
    c->species = ps.species, c->row_ptr = ps.row_ptr, c->srow = ps.srow;
    c->sender = ps.sender, c->vec = ps.vec, c->sedge = ps.sedge, c->erecv = ps.erecv;
    return CGQ_STATUS_OK;
}

/* Step 3 (after the reverse pass): forces and virials per node from the edge gradients, and their download: forces,
 * virial and (if asked) node virials lie adjacent on the device and come down in one copy through the pinned stage
 * (three copies from pageable memory left the GPU idle ~30 us per step, session 40) */
static cgq_status pairs_forces(cgq_gpu *g, const mace_ctx &c, cgq_node_result *r) {
    pair_state &ps = g->pairs;
    const int64_t N = ps.n_local, NA = ps.n_nodes;
    if (NA)
        k_node_forces<<<node_forces_blocks(NA), CGQ_GPU_THREADS>>>(NA, N, c.row_ptr, c.srow, c.sedge, c.vec,
                                                                   c.edge_grad, ps.force,
                                                                   r->node_virials ? ps.node_virial : nullptr, ps.bpart,
                                                                   ps.ticket, ps.virial);
    else
        CGQ_CHECK_GPU(cudaMemsetAsync(ps.virial, 0, sizeof(double) * 9));
    CGQ_LAUNCH_CHECK();
    const int64_t o_vir = ps.virial - ps.force, o_nv = ps.node_virial - ps.force;
    const int64_t n = r->node_virials && NA ? o_nv + 9 * NA : o_vir + 9; /* doubles from ps.force */
    CGQ_TRY(grow_stage(g, PAIR_STAGE_DATA + sizeof(double) * n));
    double *h = reinterpret_cast<double *>(static_cast<char *>(g->graph_stage) + PAIR_STAGE_DATA);
    CGQ_CHECK_GPU(cudaMemcpyAsync(h, ps.force, sizeof(double) * n, cudaMemcpyDeviceToHost));
    CGQ_CHECK_GPU(cudaStreamSynchronize(0));
    if (r->forces && NA) memcpy(r->forces, h, sizeof(double) * 3 * NA);
    memcpy(r->virial, h + o_vir, sizeof(double) * 9);
    if (r->node_virials && NA) memcpy(r->node_virials, h + o_nv, sizeof(double) * 9 * NA);
    return CGQ_STATUS_OK;
}

/* The end of a reverse pass: forces and virials for positions-only calls (gr NULL), else the edge gradients to the
 * host. */
static cgq_status deliver_gradients(cgq_gpu *g, const cgq_graph *gr, const mace_ctx &c, cgq_node_result *nr,
                                    double *edge_grad) {
    if (!gr) return pairs_forces(g, c, nr);
    if (c.E) CGQ_CHECK_GPU(cudaMemcpy(edge_grad, c.edge_grad, sizeof(double) * 3 * c.E, cudaMemcpyDeviceToHost));
    return CGQ_STATUS_OK;
}

/* The n local nodes' energies node_out (on the device) queued for the host on stream st, in pinned memory: the reverse
 * is launched without waiting for them (a synchronous copy here left the GPU idle while the host summed and launched
 * again; on the default stream the copy still held the reverse's first kernel ~10 us, session 40). */
static cgq_status energy_download(cgq_gpu *g, const double *node_out, int64_t n, cudaStream_t st = 0) {
    CGQ_TRY(grow_pinned((void **)&g->energy_stage, &g->energy_cap, sizeof(double) * (n + 1), "the node energies"));
    if (n) CGQ_CHECK_GPU(cudaMemcpyAsync(g->energy_stage, node_out, sizeof(double) * n, cudaMemcpyDeviceToHost, st));
    return CGQ_STATUS_OK;
}

/* After energy_download: the energy as the sum of the node energies in node order, as on the CPU (deterministic),
 * and the per-node energies if asked */
static cgq_status energy_finish(cgq_gpu *g, int64_t n, double *energy, double *node_energy) {
    CGQ_CHECK_GPU(cudaStreamSynchronize(0));
    if (g->side) CGQ_CHECK_GPU(cudaStreamSynchronize(g->side)); /* where the copy went (evaluate_v2) */
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) total += g->energy_stage[i];
    *energy = total;
    if (node_energy && n) memcpy(node_energy, g->energy_stage, sizeof(double) * n);
    return CGQ_STATUS_OK;
}

static cgq_status collect_energy(cgq_gpu *g, const double *node_out, int64_t n, double *energy, double *node_energy) {
    CGQ_TRY(energy_download(g, node_out, n));
    return energy_finish(g, n, energy, node_energy);
}

/* ---- v1: the reference steps, one thread per node or edge ----------------------------------------- */
static cgq_status evaluate_v1(cgq_gpu *g, const cgq_graph *gr, const cgq_exchange *xc, double *energy,
                              double *node_energy, double *edge_grad) {
    const cgq_model *hm = g->host_model;
    mace_ctx c;
    memset(&c, 0, sizeof c);
    c.m = hm; /* layout reads the host model; kernels get the device copy below */
    c.N = gr->n_local, c.NA = gr->n_nodes, c.E = gr->n_edges;
    c.nY = (hm->lmax_sh + 1) * (hm->lmax_sh + 1), c.nb = hm->n_bessel;
    const int64_t N = c.N, NA = c.NA, E = c.E;
    const int L = hm->n_layers, want_grad = edge_grad != nullptr;
    /* Use the GPU's memory for parallelism: keep per-edge MLP results and run the edge work one thread per
     * edge when that fits in half of the free memory; else fall back to one thread per node. */
    size_t free_b = 0, total_b = 0;
    CGQ_CHECK_GPU(cudaMemGetInfo(&free_b, &total_b));
    free_b += sizeof(double) * g->arena_cap;
    const size_t with_cache = mace_layout(&c, nullptr, want_grad, want_grad, 0);
    const size_t full = mace_layout(&c, nullptr, want_grad, want_grad, 1);
    int cache_edges = 0, edge_parallel = 0;
    if (sizeof(double) * full <= free_b / 2) cache_edges = want_grad, edge_parallel = 1;
    else if (sizeof(double) * with_cache <= free_b / 2) cache_edges = want_grad;
    const size_t need = mace_layout(&c, nullptr, want_grad, cache_edges, edge_parallel);
    CGQ_TRY(grow((void **)&g->arena, &g->arena_cap, sizeof(double) * (need + 1)));
    mace_layout(&c, g->arena, want_grad, cache_edges, edge_parallel);
    const size_t per_thread = c.esz + c.nsz;
    CGQ_TRY(grow((void **)&g->scratch, &g->scratch_cap,
                 sizeof(double) * per_thread * scratch_threads(std::max(std::max(c.E, c.N), c.NA))));
    CGQ_TRY(upload_graph(g, gr, &c));
    c.m = g->dev_model;
    const int T = CGQ_GPU_THREADS;

    if (E) k_edge_geometry<<<blocks_for(E), T>>>(c);
    if (NA)
        k_species_rows<double><<<row_blocks(NA), row_threads(hm->node_embedding.out.dim)>>>(
            NA, 0, c.species, g->embed_table, hm->node_embedding.out.dim, hm->node_embedding.out.dim, c.emb, 0,
            nullptr);
    CGQ_LAUNCH_CHECK();
    for (int t = 0; t < L; t++) {
        const int64_t n_up = t == 0 ? NA : N;
        if (n_up) k_up<<<blocks_for(n_up), T>>>(c, t, n_up);
        CGQ_LAUNCH_CHECK();
        if (t > 0 && xc)
            CGQ_TRY(exchange_rows<double>(g, c.ls[t].hu, nullptr, N, NA, hm->layers[t].linear_up.out.dim, xc, false));
        if (edge_parallel && E) k_scratch_step<<<blocks_for(E), T>>>(c, STEP_EDGE_MSG, t, E, g->scratch, per_thread);
        if (N) {
            const int C = hm->layers[t].channels;
            k_scratch_step<<<blocks_for(N), T>>>(c, STEP_CONV, t, N, g->scratch, per_thread);
            k_product<<<blocks_for(N * C), T>>>(c, t, C, 0);
            k_product_post<<<blocks_for(N), T>>>(c, t);
        }
        CGQ_LAUNCH_CHECK();
    }
    if (N) k_scratch_step<<<blocks_for(N), T>>>(c, STEP_ENERGY, 0, N, g->scratch, per_thread);
    CGQ_LAUNCH_CHECK();
    CGQ_TRY(collect_energy(g, c.node_out, c.N, energy, node_energy));
    if (!want_grad) return CGQ_STATUS_OK;

    if (E) CGQ_CHECK_GPU(cudaMemset(c.edge_grad, 0, sizeof(double) * 3 * E));
    if (N) CGQ_CHECK_GPU(cudaMemset(c.gh, 0, sizeof(double) * N * hm->layers[L - 1].product_linear.out.dim));
    for (int t = L - 1; t >= 0; t--) {
        if (N) {
            const int C = hm->layers[t].channels;
            k_scratch_step<<<blocks_for(N), T>>>(c, STEP_NODE_BWD, t, N, g->scratch, per_thread);
            k_product<<<blocks_for(N * C), T>>>(c, t, C, 1);
            k_scratch_step<<<blocks_for(N), T>>>(c, STEP_NODE_BWD_POST, t, N, g->scratch, per_thread);
        }
        if (edge_parallel) {
            if (E) k_scratch_step<<<blocks_for(E), T>>>(c, STEP_EDGE_BWD_E, t, E, g->scratch, per_thread);
        } else if (N) {
            k_scratch_step<<<blocks_for(N), T>>>(c, STEP_EDGE_BWD, t, N, g->scratch, per_thread);
        }
        CGQ_LAUNCH_CHECK();
        if (t == 0) break;
        if (edge_parallel) {
            if (E) k_scratch_step<<<blocks_for(E), T>>>(c, STEP_SEND_EDGE, t, E, g->scratch, per_thread);
            if (NA) k_sender_sum<<<blocks_for(NA), T>>>(c, t);
        } else if (NA) {
            k_scratch_step<<<blocks_for(NA), T>>>(c, STEP_SEND_BWD, t, NA, g->scratch, per_thread);
        }
        CGQ_LAUNCH_CHECK();
        if (xc) CGQ_TRY(exchange_rows<double>(g, c.ghu, nullptr, N, NA, hm->layers[t].linear_up.out.dim, xc, true));
        if (N) k_up_backward<<<blocks_for(N), T>>>(c, t);
        CGQ_LAUNCH_CHECK();
        double *swap = c.gh;
        c.gh = c.gh_prev;
        c.gh_prev = swap;
    }
    if (E) CGQ_CHECK_GPU(cudaMemcpy(edge_grad, c.edge_grad, sizeof(double) * 3 * E, cudaMemcpyDeviceToHost));
    return CGQ_STATUS_OK;
}

/* ---- v2: GEMM radial MLP, block-per-receiver conv, thread-per-element node maps ------------------- */
/* NY: the SH width (sh_lmax; with the width read at run time the tail's arrays went through local memory: 0.26 ms per
 * layer at 5,184 water atoms, DRAM 66% busy) */
template <class T, int NY>
__global__ void k_edge_tail(mace_ctx c, int64_t e0, int64_t e1, const T *gef, const T *gY, const T *gcut,
                            const double *gr) {
    constexpr int LMAX = sh_lmax<NY>();
    for (int64_t e = e0 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < e1; e += (int64_t)gridDim.x * blockDim.x) {
        double B[64], dB[64], ge[64], gy[NY]; /* the tail and the sums run in double */
        if (gef)
            for (int n = 0; n < c.nb; n++) ge[n] = (double)gef[(e - e0) * c.nb + n];
#pragma unroll
        for (int j = 0; j < NY; j++) gy[j] = (double)gY[e * NY + j];
        /* gr: dE/dr through the radial table (radial_spline.cuh) */
        mace_edge_tail_sh(&c, c.erecv[e], e, gef ? ge : nullptr, (double)gcut[e], gr ? gr[e - e0] : 0.0, gy, B, dB,
                          LMAX, 0);
    }
}

/* dE/dvec of edges [e0, e1) of a layer (+=): k_edge_tail for the model's SH width. The pair repulsion's part is
 * k_energy_start's, beside the forward. */
template <class T>
static void edge_tail(const mace_ctx &c, int64_t e0, int64_t e1, const T *gef, const T *gY, const T *gcut,
                      const double *gr, cudaStream_t st = 0) {
    if (e1 <= e0) return;
    const unsigned blocks = blocks_wide(e1 - e0);
    switch (c.nY) {
        case 1:
            k_edge_tail<T, 1><<<blocks, CGQ_GPU_THREADS, 0, st>>>(c, e0, e1, gef, gY, gcut, gr);
            break;
        case 4:
            k_edge_tail<T, 4><<<blocks, CGQ_GPU_THREADS, 0, st>>>(c, e0, e1, gef, gY, gcut, gr);
            break;
        case 9:
            k_edge_tail<T, 9><<<blocks, CGQ_GPU_THREADS, 0, st>>>(c, e0, e1, gef, gY, gcut, gr);
            break;
        default:
            k_edge_tail<T, 16><<<blocks, CGQ_GPU_THREADS, 0, st>>>(c, e0, e1, gef, gY, gcut, gr);
            break;
    }
}

/* CGQ_GPU_PROFILE=1: the time of each phase up to its mark, the device synchronised at each (the GPU's work of the
 * phase, and the host's); CGQ_GPU_PROFILE=host: the host's own time between the marks, nothing synchronised beyond
 * what the step waits for itself (where the host, not the GPU, is the step's limit: its launches and planning) */
struct phase_profiler {
    const char *env = getenv("CGQ_GPU_PROFILE");
    bool on = env != nullptr, host = env && !strcmp(env, "host");
    std::map<std::string, double> ms;
    std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
    void mark(const char *name) {
        if (!on) return;
        if (!host) cudaDeviceSynchronize();
        const auto now = std::chrono::steady_clock::now();
        ms[name] += std::chrono::duration<double, std::milli>(now - last).count();
        last = now;
    }
    ~phase_profiler() {
        if (!on) return;
        double total = 0.0;
        for (auto &kv : ms) total += kv.second;
        fprintf(stderr, "cgequi gpu %sprofile (ms):", host ? "host " : "");
        for (auto &kv : ms) fprintf(stderr, " %s %.3f", kv.first.c_str(), kv.second);
        fprintf(stderr, " | total %.3f\n", total);
    }
};

/* Launches that share no data with the default stream's since the last join run beside it (MACE's residual skips,
 * the edge geometry beside layer 0's node maps, layer 1's edge tail beside its sender sums): fork() orders the side
 * stream after everything launched so far and gives it; join() orders the default stream after everything launched
 * on the side. Every result crosses a join before it is read, so the bits are those of one stream. Without a side
 * stream (CGQ_GPU_SIDE_STREAM=0) fork() gives the default stream and join() does nothing. */
struct side_stream {
    cudaStream_t s;
    cudaEvent_t fork_ev, join_ev;
    explicit side_stream(const cgq_gpu *g) : s(g->side), fork_ev(g->side_fork), join_ev(g->side_join) {}
    cgq_status fork(cudaStream_t *out) {
        *out = s;
        if (!s) return CGQ_STATUS_OK;
        CGQ_CHECK_GPU(cudaEventRecord(fork_ev, 0));
        CGQ_CHECK_GPU(cudaStreamWaitEvent(s, fork_ev, 0));
        return CGQ_STATUS_OK;
    }
    cgq_status join() {
        if (!s) return CGQ_STATUS_OK;
        CGQ_CHECK_GPU(cudaEventRecord(join_ev, s));
        CGQ_CHECK_GPU(cudaStreamWaitEvent(0, join_ev, 0));
        return CGQ_STATUS_OK;
    }
};

struct edge_chunk {
    int64_t i0, i1, e0, e1;
};

/* Receiver ranges whose edges fit max_edges (a row is never split). */
static std::vector<edge_chunk> edge_chunks(const int64_t *row_ptr, int64_t N, int64_t max_edges) {
    std::vector<edge_chunk> out;
    int64_t i0 = 0;
    while (i0 < N) {
        int64_t i1 = i0 + 1;
        while (i1 < N && row_ptr[i1 + 1] - row_ptr[i0] <= max_edges) i1++;
        out.push_back({i0, i1, row_ptr[i0], row_ptr[i1]});
        i0 = i1;
    }
    return out;
}

static cgq_status grow_d(double **p, size_t *cap, size_t n) { return grow((void **)p, cap, sizeof(double) * (n + 1)); }
/* n elements of T (the v2 buffers are double* fields that hold either precision) */
template <class T>
static cgq_status grow_t(double **p, size_t *cap, size_t n) {
    return grow((void **)p, cap, sizeof(T) * (n + 1));
}

/* the buffers of species_conv's GEMM folds (the graph's classes set) for pieces of at most `piece` receivers, fewer
 * where Q of a piece would pass SC_PIECE_FLOATS; lin: with layer 0's linear composed (g->sc_lin) */
static cgq_status species_conv_work(cgq_gpu *g, int64_t piece, sc_work *w, bool lin = false) {
    const species_conv &s = g->sconv;
    const conv_plan &p = g->plans[0];
    const int64_t per = (int64_t)s.S * s.K * s.P;
    w->piece = std::max<int64_t>(1, std::min<int64_t>(piece, SC_PIECE_FLOATS / per));
    CGQ_TRY(grow_t<float>(&g->vb.sc_qg, &g->vb.caps[14], (size_t)(w->piece * per)));
    int64_t nv = (int64_t)p.n_ins * s.S * s.K * p.C;
    if (lin) nv = sc_lin_offset(g->sc_lin, s.S * s.K, g->sc_lin.n), w->lin = &g->sc_lin;
    CGQ_TRY(grow_t<float>(&g->vb.sc_v, &g->vb.caps[15], (size_t)nv));
    w->ins = g->sconv_ins.data();
    w->QG = reinterpret_cast<float *>(g->vb.sc_qg), w->V = reinterpret_cast<float *>(g->vb.sc_v);
    return CGQ_STATUS_OK;
}

/* Receiver chunks of a v2 evaluation whose per-edge buffers (per_edge elements of es bytes) fit a third of the free
 * GPU memory (free_b, with this call's reusable chunk rows), at most 4 GiB, never fewer edges than the largest row
 * (CGQ_GPU_MAX_CHUNK_EDGES caps them for tests). h_row: the rows on the host, or null for a pairs step's (on the
 * device: downloaded only if the edges need more than one chunk). */
static cgq_status plan_chunks(cgq_gpu *g, const int64_t *h_row, int64_t N, int64_t E, size_t es, int64_t per_edge,
                              size_t free_b, std::vector<edge_chunk> *chunks, int64_t *chunk_edges) {
    free_b += g->vb.caps[0] + g->vb.caps[1];
    const size_t budget = std::min<size_t>(free_b / 3, (size_t)4 << 30);
    const int64_t fit = std::min<int64_t>((int64_t)(budget / (es * per_edge)), g->max_chunk_edges);
    if (E <= fit) { /* one chunk (what edge_chunks gives then) */
        *chunk_edges = std::max<int64_t>(E, 1);
        chunks->clear();
        if (N) chunks->push_back({0, N, 0, E});
        return CGQ_STATUS_OK;
    }
    if (!h_row) CGQ_TRY(pairs_rows(g, &h_row));
    int64_t max_deg = 1;
    for (int64_t i = 0; i < N; i++) max_deg = std::max(max_deg, h_row[i + 1] - h_row[i]);
    *chunk_edges = std::max<int64_t>(max_deg, fit);
    *chunks = edge_chunks(h_row, N, *chunk_edges);
    return CGQ_STATUS_OK;
}

/* Free GPU memory for an evaluation of E edges (mlp_keep and plan_chunks). cudaMemGetInfo took 4.5-13 us of the host
 * per call while the GPU waited for the step's first launches (bench/timeline.py, session 40), so it is asked only
 * where the edges outgrow those of the last step that asked; otherwise that answer, less what this evaluator has
 * allocated since (cgq_gpu_bytes), stands for it. */
static cgq_status free_gpu_bytes(cgq_gpu *g, int64_t E, size_t *free_b) {
    const size_t held = cgq_gpu_bytes(g);
    if (E <= g->free_edges && held >= g->free_held) {
        *free_b = g->free_seen - std::min(g->free_seen, held - g->free_held);
        return CGQ_STATUS_OK;
    }
    size_t total_b = 0;
    CGQ_CHECK_GPU(cudaMemGetInfo(free_b, &total_b));
    g->free_seen = *free_b, g->free_held = held, g->free_edges = E;
    return CGQ_STATUS_OK;
}

/* The reverse pass's edge buffers: per chunk edge dE/dw (wn), the MLP reverse's temporaries (2 maxw), dE/d(edge
 * features) (nb) and dE/dx of the sender (dx); per edge dE/dY (nY) and dE/dcut. */
template <class T>
static cgq_status grow_reverse_buffers(cgq_gpu *g, int64_t chunk_edges, int64_t E, int64_t wn, int64_t maxw, int nb,
                                       int nY, int64_t dx) {
    v2_buffers &b = g->vb;
    CGQ_TRY(grow_t<T>(&b.gw, &b.caps[2], (size_t)chunk_edges * wn));
    CGQ_TRY(grow_t<T>(&b.gtmp, &b.caps[3], (size_t)2 * chunk_edges * maxw));
    CGQ_TRY(grow_t<T>(&b.gef, &b.caps[4], (size_t)chunk_edges * nb));
    CGQ_TRY(grow_t<T>(&b.gY, &b.caps[5], (size_t)E * nY));
    CGQ_TRY(grow_t<T>(&b.gcut, &b.caps[6], (size_t)E));
    return grow_t<T>(&b.gx1e, &b.caps[7], (size_t)chunk_edges * dx);
}

/* Where each layer's edge-MLP outputs (wn[t] per edge) and activations (cs[t]) live: kept for every edge, for the
 * reverse pass, when a third of the free memory holds them (the chunks index into them); else one chunk's worth,
 * recomputed in the reverse pass. */
template <class T>
struct mlp_store {
    bool keep = false;
    T *w_of[CGQ_MAX_LAYERS], *act_of[CGQ_MAX_LAYERS];
    int64_t wn[CGQ_MAX_LAYERS], cs[CGQ_MAX_LAYERS];
    T *w_at(int t, const edge_chunk &ch) const { return keep ? w_of[t] + ch.e0 * wn[t] : w_of[t]; }
    T *act_at(int t, const edge_chunk &ch) const { return keep ? act_of[t] + ch.e0 * cs[t] : act_of[t]; }
    /* elements of every edge's kept outputs (w and activations) over L layers */
    size_t kept_size(int L, int64_t E) const {
        size_t tot = 0;
        for (int t = 0; t < L; t++) tot += (size_t)E * (wn[t] + cs[t]);
        return tot;
    }
};

/* st->keep: whether every edge's MLP outputs are kept (want_grad, and a third of the free memory holds them); decided
 * before the chunks are planned, which then need no rows of their own for them. */
template <class T>
static cgq_status mlp_keep(cgq_gpu *g, int L, int64_t E, bool want_grad, size_t free_b, mlp_store<T> *st) {
    const v2_buffers &b = g->vb;
    free_b += b.caps[0] + b.caps[1] + b.caps[9]; /* this call's reusable chunk rows and kept outputs */
    st->keep = want_grad && !g->recompute_mlp && sizeof(T) * st->kept_size(L, E) <= free_b / 3;
    return CGQ_STATUS_OK;
}

/* The buffers of st (mlp_keep first; if the kept outputs cannot be allocated, one chunk's rows instead). table: the
 * MLPs run from their tables, whose dE/d(table variable) goes to b.gr, and whose a rows (radial_table_rows wide per
 * chunk edge) to b.act. */
template <class T>
static cgq_status plan_mlp_store(cgq_gpu *g, int L, int64_t E, int64_t chunk_edges, bool want_grad, bool table,
                                 int64_t table_rows, mlp_store<T> *st) {
    v2_buffers &b = g->vb;
    int64_t wn = 1, cs = 1;
    for (int t = 0; t < L; t++) wn = std::max(wn, st->wn[t]), cs = std::max(cs, st->cs[t]);
    st->keep = st->keep && grow_t<T>(&b.kept, &b.caps[9], st->kept_size(L, E)) == CGQ_STATUS_OK;
    T *q = reinterpret_cast<T *>(b.kept);
    for (int t = 0; t < L && st->keep; t++) {
        st->w_of[t] = q, q += (size_t)E * st->wn[t];
        st->act_of[t] = q, q += (size_t)E * st->cs[t];
    }
    if (!st->keep) {
        CGQ_TRY(grow_t<T>(&b.w, &b.caps[0], (size_t)chunk_edges * wn));
        CGQ_TRY(grow_t<T>(&b.act, &b.caps[1], (size_t)chunk_edges * cs));
        for (int t = 0; t < L; t++)
            st->w_of[t] = reinterpret_cast<T *>(b.w), st->act_of[t] = reinterpret_cast<T *>(b.act);
    }
    if (table_rows) CGQ_TRY(grow_t<T>(&b.act, &b.caps[1], (size_t)chunk_edges * table_rows));
    if (table && want_grad) CGQ_TRY(grow_d(&b.gr, &b.caps[12], (size_t)chunk_edges));
    return CGQ_STATUS_OK;
}

/* k_sender_sum_rows, four features per thread where the rows are 16-byte aligned floats */
template <class T>
static void sender_sum_rows(int64_t n, int dhu, const int64_t *srow, const int32_t *sedge, int64_t e0, int64_t e1,
                            int first, int whole, const T *gx1e, T *ghu) {
    if constexpr (sizeof(T) == sizeof(float))
        if (dhu % 4 == 0 && (uintptr_t)gx1e % 16 == 0 && (uintptr_t)ghu % 16 == 0) {
            k_sender_sum_rows<T, 4>
                <<<blocks_wide(n * dhu / 4), CGQ_GPU_THREADS>>>(n, dhu, srow, sedge, e0, e1, first, whole, gx1e, ghu);
            return;
        }
    k_sender_sum_rows<T, 1>
        <<<blocks_wide(n * dhu), CGQ_GPU_THREADS>>>(n, dhu, srow, sedge, e0, e1, first, whole, gx1e, ghu);
}

/* The chunk's dE/dx rows gx1e into their senders' sums ghu (NA x dhu) in sender order, continuing the chunks before it
 * (first: from zero), so the additions and the bits are those of one pass over all edges. One chunk (single) sums
 * every node at once; with several, only the chunk's senders (flags, a scan and a list) are summed, so the work of a
 * step does not grow with nodes x chunks (1 M atoms: ~300 chunks). */
template <class T>
static cgq_status sender_sums(cgq_gpu *g, int64_t NA, int dhu, const int64_t *srow, const int32_t *sedge,
                              const int32_t *sender, const edge_chunk &ch, bool first, bool single, const T *gx1e,
                              T *ghu) {
    if (!NA) return CGQ_STATUS_OK;
    const int TH = CGQ_GPU_THREADS;
    if (single) { /* the only chunk holds every edge: a sender's rows are all of its edges */
        sender_sum_rows<T>(NA, dhu, srow, sedge, ch.e0, ch.e1, first, 1, gx1e, ghu);
        CGQ_LAUNCH_CHECK();
        return CGQ_STATUS_OK;
    }
    v2_buffers &b = g->vb;
    auto lay = [&](char *q, int32_t **flags, int64_t **scan, int64_t **tiles, int32_t **list) {
        size_t o = 0;
        *flags = carve<int32_t>(q, o, NA), *scan = carve<int64_t>(q, o, NA + 1);
        *tiles = carve<int64_t>(q, o, NA / CGQ_SCAN_TILE + 2), *list = carve<int32_t>(q, o, NA);
        return o;
    };
    int32_t *flags, *list;
    int64_t *scan, *tiles;
    CGQ_TRY(grow((void **)&b.senders, &b.caps[13], lay(nullptr, &flags, &scan, &tiles, &list)));
    lay(reinterpret_cast<char *>(b.senders), &flags, &scan, &tiles, &list);
    if (first) CGQ_CHECK_GPU(cudaMemsetAsync(ghu, 0, sizeof(T) * NA * dhu));
    CGQ_CHECK_GPU(cudaMemsetAsync(flags, 0, sizeof(int32_t) * NA));
    const int64_t ne = ch.e1 - ch.e0;
    if (ne) k_flag_senders<<<blocks_for(ne), TH>>>(ch.e0, ch.e1, sender, flags);
    scan_flags(flags, NA, scan, tiles);
    k_compact_flags<<<blocks_for(NA), TH>>>(NA, flags, scan, list);
    k_sender_sum_list<T>
        <<<blocks_wide(std::min(NA, ne) * dhu), TH>>>(scan + NA, list, dhu, srow, sedge, ch.e0, ch.e1, gx1e, ghu);
    CGQ_LAUNCH_CHECK();
    return CGQ_STATUS_OK;
}

/* dE/d(sender features) after the chunks' sender sums: zero where there were no edges (no chunk wrote it), and the
 * rows that landed on ghost senders sent to their owners (reverse exchange; staging: a double array of the rows). */
template <class T>
static cgq_status finish_sender_grads(cgq_gpu *g, bool no_edges, int64_t N, int64_t NA, int width, T *rows,
                                      double *staging, const cgq_exchange *xc) {
    if (NA && no_edges) CGQ_CHECK_GPU(cudaMemsetAsync(rows, 0, sizeof(T) * NA * width));
    if (xc) CGQ_TRY(exchange_rows<T>(g, rows, staging, N, NA, width, xc, true));
    return CGQ_STATUS_OK;
}

/* The T copy of a double-arena array: the same array for double, the same element offset of arena_f for float. */
template <class T>
static T *arena_t(cgq_gpu *g, double *q) {
    if (!q) return nullptr;
    return sizeof(T) == sizeof(float) ? reinterpret_cast<T *>(g->arena_f) + (q - g->arena) : reinterpret_cast<T *>(q);
}

/* Where a v2 MACE evaluation keeps its arrays: in T (g->arena_f) the edge inputs, each layer's arrays that the reverse
 * pass reads (hu and A; rho and Mlin with a density), and one work region for the forward's other node arrays and the
 * reverse's gradients, which are never alive together; in double (g->arena) what the double steps use. */
template <class T>
struct v2_arrays {
    T *Y, *ef, *cut;                                             /* per edge */
    T *hu[CGQ_MAX_LAYERS], *A[CGQ_MAX_LAYERS];                   /* kept for the reverse pass */
    T *rho[CGQ_MAX_LAYERS], *Mlin[CGQ_MAX_LAYERS];               /* kept with a density, else Mlin is work */
    T *h[2], *sc, *M, *B;                                        /* forward work: layer t reads h[t % 2] */
    T *gh, *gh_prev, *gM, *ghu, *gBn, *grho, *gApre, *gMl;       /* reverse work */
    double *ro_z[CGQ_MAX_LAYERS], *e_acc, *staging;              /* readout pre-activations; energy sums; exchanges */
    size_t t_bytes, d_bytes;
};

/* Carves a's arrays from td (T) and dd (double) into c and a; null bases only count (t_bytes, d_bytes). staging: a
 * double buffer for the exchanges of float rows. */
template <class T>
static void v2_layout(const cgq_model *m, const readout_plan *ro, mace_ctx *c, bool grad, bool staging, char *td,
                      char *dd, v2_arrays<T> *a) {
    const int64_t N = c->N, NA = c->NA, E = c->E, g = grad ? 1 : 0;
    const int L = m->n_layers;
    int hw = m->node_embedding.out.dim, dsc = 1, dM = 1, dT = 1, dB = 1, dhu = 1, dgh = 1;
    for (int t = 0; t < L; t++) {
        const cgq_mace_layer *ly = &m->layers[t];
        hw = std::max(hw, ly->product_linear.out.dim), dsc = std::max(dsc, ly->skip_tp.out.dim);
        dM = std::max(dM, ly->conv_tp.out.dim), dT = std::max(dT, ly->target.dim),
        dB = std::max(dB, ly->product_out.dim);
        dhu = std::max(dhu, ly->linear_up.out.dim);
        dgh = std::max(dgh, std::max(ly->product_linear.out.dim, mace_layer_in_dim(m, t)));
    }
    size_t o = 0;
    a->Y = carve<T>(td, o, E * c->nY), a->ef = carve<T>(td, o, E * c->nb), a->cut = carve<T>(td, o, E);
    for (int t = 0; t < L; t++) {
        const cgq_mace_layer *ly = &m->layers[t];
        a->hu[t] = carve<T>(td, o, NA * ly->linear_up.out.dim);
        a->A[t] = carve<T>(td, o, N * ly->target.dim); /* the product basis' input (a residual layer's Mlin) */
        a->rho[t] = ly->density ? carve<T>(td, o, N) : nullptr;
        a->Mlin[t] = ly->density ? carve<T>(td, o, N * ly->target.dim) : nullptr;
    }
    const size_t work = o;
    a->h[0] = carve<T>(td, o, NA * hw), a->h[1] = carve<T>(td, o, NA * hw), a->sc = carve<T>(td, o, N * dsc);
    a->M = carve<T>(td, o, N * dM), a->B = carve<T>(td, o, N * dB);
    T *mlin = carve<T>(td, o, N * dT);
    for (int t = 0; t < L; t++)
        if (!m->layers[t].density) a->Mlin[t] = mlin;
    const size_t fwd_end = o;
    o = work;
    a->gh = carve<T>(td, o, g * N * dgh), a->gh_prev = carve<T>(td, o, g * N * dgh),
    a->gM = carve<T>(td, o, g * N * dM);
    a->ghu = carve<T>(td, o, g * NA * dhu), a->gBn = carve<T>(td, o, g * N * dB);
    a->grho = carve<T>(td, o, g * N), a->gApre = carve<T>(td, o, g * N * dT), a->gMl = carve<T>(td, o, g * N * dT);
    a->t_bytes = std::max(o, fwd_end);
    o = 0;
    c->r = carve<double>(dd, o, E), c->edge_grad = carve<double>(dd, o, g * 3 * E),
    c->node_out = carve<double>(dd, o, N);
    a->e_acc = carve<double>(dd, o, N);
    for (int r = 0; r < m->n_readouts; r++) a->ro_z[r] = carve<double>(dd, o, N * ro[r].zw);
    a->staging = carve<double>(dd, o, staging ? NA * dhu : 0);
    a->d_bytes = o;
}

/* This step's graph rows on the host (from the caller's graph, or counted on the device from positions and the
 * candidate pairs: pairs_count) and its local nodes, nodes and edges. */
static cgq_status step_graph(cgq_gpu *g, const cgq_graph *gr, const double *pos, const int64_t **h_row, int64_t *N,
                             int64_t *NA, int64_t *E) {
    if (!gr) CGQ_TRY(pairs_count(g, pos));
    *h_row = gr ? gr->row_ptr : nullptr; /* a pairs step's stay on the device (plan_chunks) */
    *N = gr ? gr->n_local : g->pairs.n_local, *NA = gr ? gr->n_nodes : g->pairs.n_nodes;
    *E = gr ? gr->row_ptr[*N] : g->pairs.n_edges;
    return CGQ_STATUS_OK;
}

/* The step's symcon_groups of N nodes (species on the device), on stream st, where a layer's product basis takes
 * several nodes of one species per block; else none (order null). A pairs step (pairs) keeps them for the next ones:
 * the species are the candidate list's, fixed until it is set again (cgq_gpu_set_pairs, cgq_gpu_build_pairs). */
template <class T>
static cgq_status symcon_group_nodes(cgq_gpu *g, int64_t N, const int32_t *species, cudaStream_t st, bool pairs,
                                     symcon_groups *gp) {
    if (pairs && g->pairs_groups_ok) {
        *gp = g->pairs_groups;
        return CGQ_STATUS_OK;
    }
    g->pairs_groups_ok = false; /* a graph step's grouping takes the buffer */
    *gp = symcon_groups{};
    gp->n_nodes = N;
    bool need = false;
    for (int t = 0; t < g->host_model->n_layers; t++)
        need = need || (g->symcon[t].ok && g->symcon[t].grouped && !g->symcon[t].args.agnostic);
    if (!need || !N) return CGQ_STATUS_OK;
    const int ns = g->host_model->n_species;
    CGQ_TRY(grow((void **)&g->vb.groups, &g->vb.caps[16], sizeof(int32_t) * ((size_t)N + 4 * ((size_t)ns + 1))));
    int32_t *counts = reinterpret_cast<int32_t *>(g->vb.groups), *nstart = counts + ns + 1, *gstart = nstart + ns + 1;
    int32_t *fill = gstart + ns + 1, *order = fill + ns + 1;
    CGQ_CHECK_GPU(cudaMemsetAsync(counts, 0, sizeof(int32_t) * ns, st));
    const unsigned blocks = (unsigned)((N + 255) / 256);
    k_group_count<<<blocks, 256, sizeof(int) * ns, st>>>(N, species, ns, counts);
    k_group_scan<<<1, 1, 0, st>>>(ns, symcon_nb<T>(), counts, nstart, gstart, fill);
    k_group_place<<<blocks, 256, 2 * sizeof(int) * ns, st>>>(N, species, ns, fill, order);
    CGQ_LAUNCH_CHECK();
    gp->order = order, gp->nstart = nstart, gp->gstart = gstart, gp->n_species = ns;
    if (pairs) g->pairs_groups = *gp, g->pairs_groups_ok = true;
    return CGQ_STATUS_OK;
}

static cgq_status mlp_check(int err) {
    return err ? cgq_fail(CGQ_STATUS_DEVICE_ERROR, "a cuBLAS product of the radial MLP failed (more than 2^31 rows in "
                          "one edge chunk, or a GPU error)") : CGQ_STATUS_OK;
}

/* The node linears: tiled GEMMs where the linear allows (lin_gemm_ok), else one thread per element. hl: host
 * model's linear; sl: the same in the working-precision shadow (device weights); dl: its device struct. */
template <class T>
static void node_linear_fwd(const cgq_linear *hl, const cgq_linear *sl, const cgq_linear *dl, int64_t n, const T *x,
                            int64_t ldx, T *y, int64_t ldy, T alpha, const T *add, int64_t ldadd) {
    if (lin_gemm_ok(hl)) lin_gemm_fwd<T>(hl, reinterpret_cast<const T *>(sl->weight), n, x, ldx, y, ldy, alpha, add, ldadd);
    else if (n) k_linear_fwd<T><<<blocks_for(n * hl->out.dim), CGQ_GPU_THREADS>>>(dl, n, x, ldx, y, ldy, alpha, add, ldadd);
}

template <class T>
static void node_linear_bwd(const cgq_linear *hl, const cgq_linear *sl, const cgq_linear *dl, int64_t n, const T *gy,
                            int64_t ldgy, T *gx, int64_t ldgx, T alpha, int accumulate) {
    if (lin_gemm_ok(hl)) lin_gemm_bwd<T>(hl, reinterpret_cast<const T *>(sl->weight), n, gy, ldgy, gx, ldgx, alpha, accumulate);
    else if (n) k_linear_bwd<T><<<blocks_for(n * hl->in.dim), CGQ_GPU_THREADS>>>(dl, n, gy, ldgy, gx, ldgx, alpha, accumulate);
}

/* v2 in working precision T (double, or float with double geometry, readouts, energies and force sums):
 * the layer arrays live in an arena of T laid out like the double arena (same element offsets). */
/* The graph comes from the host (gr, cgq_evaluate_graph: edge gradients out) or is built on the device from
 * positions and the candidate pairs (pos, cgq_evaluate_pairs: forces and virials out in nr). */
template <class T>
static cgq_status evaluate_v2(cgq_gpu *g, const cgq_graph *gr, const double *pos, const cgq_exchange *xc, double *energy,
                              double *node_energy, double *edge_grad, cgq_node_result *nr) {
    const bool f32 = sizeof(T) == sizeof(float);
    const cgq_model *hm = g->host_model;
    const cgq_model *sm = f32 ? &g->shadow_f : &g->shadow; /* weights in T, device pointers */
    cgq_model *dm = f32 ? g->dev_model_f : g->dev_model;
    mace_ctx c;
    memset(&c, 0, sizeof c);
    c.m = hm;
    phase_profiler prof;
    const int64_t *h_row = nullptr;
    CGQ_TRY(step_graph(g, gr, pos, &h_row, &c.N, &c.NA, &c.E));
    c.nY = (hm->lmax_sh + 1) * (hm->lmax_sh + 1), c.nb = hm->n_bessel;
    const int64_t N = c.N, NA = c.NA, E = c.E;
    const int L = hm->n_layers, want_grad = !gr || edge_grad != nullptr, nb = c.nb, nY = c.nY;
    const bool table = f32 && g->radial[0].n_int > 0; /* the radial MLPs from their tables (radial_spline.cuh) */
    prof.mark("graph_build");
    v2_arrays<T> a;
    const bool staging = f32 && xc;
    v2_layout<T>(hm, g->readouts, &c, want_grad, staging, nullptr, nullptr, &a);
    CGQ_TRY(grow(&g->arena_f, &g->arena_f_cap, a.t_bytes + 16));
    CGQ_TRY(grow((void **)&g->arena, &g->arena_cap, a.d_bytes + 16));
    v2_layout<T>(hm, g->readouts, &c, want_grad, staging, static_cast<char *>(g->arena_f),
                 reinterpret_cast<char *>(g->arena), &a);
    prof.mark("setup");
    CGQ_TRY(gr ? upload_graph(g, gr, &c) : pairs_fill(g, &c));
    prof.mark("graph_upload");

    /* layer 0 factored through the senders' species (species_conv.cuh), layers with weight tables (conv_weights): no
     * per-edge weights */
    const bool sconv = f32 && sc_runs(g->plans[0], g->sconv, g->smem_optin);
    bool wtab[CGQ_MAX_LAYERS];
    for (int t = 0; t < L; t++) wtab[t] = f32 && g->wtab[t].knots && !(t == 0 && sconv) && !g->fused_conv[t];
    /* per-edge buffers of one chunk of receivers: MLP outputs and activations (+ their gradients) */
    mlp_store<T> ms; /* the radial MLP's outputs and activations */
    int64_t wn = 1, cs = 1, maxw = 1, dhu = 1, dcs = 0;
    for (int t = 0; t < L; t++) {
        const cgq_mace_layer *ly = &hm->layers[t];
        if (ly->density) {
            dcs = std::max<int64_t>(dcs, cgq_fcnet_cache_size(&ly->density_fn));
            maxw = std::max<int64_t>(maxw, mlp_hidden_width(ly->density_fn));
        }
        ms.wn[t] = (t == 0 && sconv) || wtab[t] ? 0 : ly->conv_tp.weight_numel;
        ms.cs[t] = table ? 0 : cgq_fcnet_cache_size(&ly->radial_mlp);
        wn = std::max<int64_t>(wn, ms.wn[t]);
        if (!table) cs = std::max<int64_t>(cs, cgq_fcnet_cache_size(&ly->radial_mlp));
        maxw = std::max<int64_t>(maxw, mlp_hidden_width(ly->radial_mlp));
        dhu = std::max<int64_t>(dhu, ly->linear_up.out.dim);
    }
    size_t free_b = 0;
    CGQ_TRY(free_gpu_bytes(g, E, &free_b));
    CGQ_TRY(mlp_keep<T>(g, L, E, want_grad, free_b, &ms));
    const int64_t dens_per_edge = dcs ? 2 + dcs + nb : 2; /* d, activations, gd, gef of the density MLP */
    const int64_t trows = table ? radial_table_rows<T>(g->radial, L) : 0; /* per chunk, kept outputs or not */
    const int64_t mlp_rows = (ms.keep ? 0 : table ? wn : wn + cs) + trows;
    const int64_t per_edge = mlp_rows + dens_per_edge + (want_grad ? wn + 2 * maxw + nb + dhu : 0);
    std::vector<edge_chunk> chunks;
    int64_t chunk_edges = 0;
    CGQ_TRY(plan_chunks(g, h_row, N, E, sizeof(T), per_edge, free_b, &chunks, &chunk_edges));
    v2_buffers &b = g->vb;
    CGQ_TRY(grow_t<T>(&b.dens, &b.caps[11], (size_t)chunk_edges * (2 + dcs + nb)));
    T *dens_d = reinterpret_cast<T *>(b.dens), *dens_gd = dens_d + chunk_edges;
    T *dens_gef = dens_gd + chunk_edges, *dens_act = dens_gef + chunk_edges * nb;
    if (want_grad) CGQ_TRY(grow_reverse_buffers<T>(g, chunk_edges, E, wn, maxw, nb, nY, dhu));
    CGQ_TRY(plan_mlp_store<T>(g, L, E, chunk_edges, want_grad, table, trows, &ms));
    T *arows = reinterpret_cast<T *>(b.act);
    T *gw = reinterpret_cast<T *>(b.gw), *gtmp = reinterpret_cast<T *>(b.gtmp), *gef = reinterpret_cast<T *>(b.gef);
    T *gY = reinterpret_cast<T *>(b.gY), *gcut = reinterpret_cast<T *>(b.gcut), *gx1e = reinterpret_cast<T *>(b.gx1e);
    sc_work scw; /* the factored first layer's GEMM folds */
    if (sconv && g->sconv.gemm) {
        int64_t most = 1; /* receivers of the largest chunk */
        for (const edge_chunk &ch : chunks) most = std::max(most, ch.i1 - ch.i0);
        CGQ_TRY(species_conv_work(g, most, &scw, g->sc_lin.ok));
    }
    const bool sc_lin = scw.lin != nullptr; /* layer 0's linear runs inside the folds */
    c.m = g->dev_model; /* the double steps (geometry, embedding, energies, edge tail) */
    const int TH = CGQ_GPU_THREADS;
    prof.mark("buffers");
    side_stream side(g);
    CGQ_TRY(side.join()); /* whatever a failed call left on the side comes first */
    cudaStream_t ss = 0;
    CGQ_TRY(side.fork(&ss)); /* the edge geometry beside the embedding and layer 0's node maps (joined before its conv) */
    /* the default stream's first kernel is launched first: at the step's start the GPU runs each kernel as the host
     * launches it */
    /* layer 0's linear_up and skip from their rows per species; the embedding itself only where a composed readout
     * reads it (a one-layer model) or without those rows */
    const bool rows0 = g->layer0_rows != nullptr, ro_comp0 = g->ro_composed.ok && g->ro_composed.layer == 0;
    const int de = hm->node_embedding.out.dim, dhu0 = hm->layers[0].linear_up.out.dim;
    if (NA && (!rows0 || ro_comp0))
        k_species_rows<T>
            <<<row_blocks(NA), row_threads(de)>>>(NA, 0, c.species, g->embed_table, de, de, a.h[0], 0, nullptr);
    if (NA && rows0) /* a composed readout reads no skip */
        k_species_rows<T><<<row_blocks(NA), row_threads(std::max(dhu0, g->layer0_sc))>>>(
            NA, ro_comp0 ? 0 : N, c.species, g->layer0_rows, dhu0 + g->layer0_sc, dhu0, a.hu[0], g->layer0_sc, a.sc);
    const up_compose_plan &uc = g->up_comp; /* layer 1's composed linear_up adds its product to its rows */
    const int dhu1 = L > 1 ? hm->layers[1].linear_up.out.dim : 0;
    if (N && uc.rows)
        k_species_rows<T>
            <<<row_blocks(N), row_threads(dhu1)>>>(N, 0, c.species, uc.rows, dhu1, dhu1, a.hu[1], 0, nullptr);
    bool need_ef = !table; /* the edge features feed the radial MLPs and the densities; the tables take r */
    for (int t = 0; t < L; t++) need_ef = need_ef || hm->layers[t].density;
    T *ef_out = need_ef ? a.ef : nullptr;
    if (E) switch (c.nY) { /* the model's SH width as a constant */
            case 1:
                k_edge_geometry_t<T, 1><<<blocks_wide(E), TH, 0, ss>>>(c, a.Y, ef_out, a.cut);
                break;
            case 4:
                k_edge_geometry_t<T, 4><<<blocks_wide(E), TH, 0, ss>>>(c, a.Y, ef_out, a.cut);
                break;
            case 9:
                k_edge_geometry_t<T, 9><<<blocks_wide(E), TH, 0, ss>>>(c, a.Y, ef_out, a.cut);
                break;
            default:
                k_edge_geometry_t<T, 16><<<blocks_wide(E), TH, 0, ss>>>(c, a.Y, ef_out, a.cut);
                break;
        }
    /* the edge gradients' sums start from zero (then the pair repulsion's part): set here, beside the forward, not
     * between the passes (gh is zeroed there: the reverse's arrays reuse the forward's, v2_layout) */
    if (want_grad && E) CGQ_CHECK_GPU(cudaMemsetAsync(c.edge_grad, 0, sizeof(double) * 3 * E, ss));
    if (N) /* the pair repulsion reads r */
        k_energy_start<<<blocks_for(N * CGQ_WARP), TH, 0, ss>>>(c, a.e_acc, want_grad ? c.edge_grad : nullptr);
    symcon_groups groups; /* the product basis's nodes by species, beside layer 0's node maps as well */
    CGQ_TRY(symcon_group_nodes<T>(g, N, c.species, ss, !gr, &groups));
    CGQ_LAUNCH_CHECK();
    const T *Y = a.Y, *ef = a.ef, *cut = a.cut;
    const unsigned ro_blocks = (unsigned)std::min<int64_t>((N + RO_GROUPS - 1) / RO_GROUPS, 65535);
    const T *cut_w = hm->apply_cutoff ? nullptr : cut; /* weights times the cutoff */
    /* the chunk's radial-MLP outputs w, from the table or the MLP */
    auto radial_forward = [&](int t, const edge_chunk &ch) {
        const cgq_fcnet &fc = sm->layers[t].radial_mlp;
        T *const *W = reinterpret_cast<T *const *>(fc.W);
        const int64_t ne = ch.e1 - ch.e0;
        if (table)
            return mlp_check(radial_table_forward<T>(g->radial[t], fc, W[fc.n_layers - 1], c.r, ch.e0, ne, arows,
                                                     ms.w_at(t, ch), ms.wn[t], g->blas));
        return mlp_check(
            mlp_forward<T>(fc, W, ne, ef + ch.e0 * nb, nb, ms.act_at(t, ch), ms.w_at(t, ch), ms.wn[t], g->blas, 0));
    };
    /* where layer t's convolution takes the chunk's weights from: its table, or the MLP's outputs */
    auto edge_weights = [&](int t, const edge_chunk &ch) {
        conv_weights<T> w = conv_rows<T>(ms.w_at(t, ch), ch.e0);
        if (wtab[t]) w.tab = g->wtab[t], w.r = c.r;
        return w;
    };
    prof.mark("geometry");
    for (int t = 0; t < L; t++) {
        const cgq_mace_layer *ly = &hm->layers[t];
        cgq_mace_layer *dly = &dm->layers[t];
        const cgq_mace_layer *sly = &sm->layers[t]; /* device weights in T */
        const conv_plan &p = g->plans[t];
        T *hu = a.hu[t], *M = a.M, *A = a.A[t], *B = a.B, *sc = a.sc;
        T *Mlin = ly->residual && !ly->density ? A : a.Mlin[t]; /* a residual layer's product input is Mlin itself */
        T *h = a.h[(t + 1) % 2];
        const int din = mace_layer_in_dim(hm, t), dhu_t = ly->linear_up.out.dim, dM = ly->conv_tp.out.dim;
        const int dTt = ly->target.dim, dB = ly->product_out.dim;
        const int dH = ly->product_linear.out.dim, dsc = ly->skip_tp.out.dim;
        const T *hin = a.h[t % 2]; /* the embedding or layer t - 1's h */
        const T *wskip = reinterpret_cast<const T *>(sly->skip_tp.weight);
        const int64_t n_up = t == 0 ? NA : N;
        auto skip_beside = [&]() -> cgq_status { /* the residual skip on the side stream, joined before product_linear */
            cudaStream_t st = 0;
            CGQ_TRY(side.fork(&st));
            skip_gemm_fwd<T>(&ly->skip_tp, g->skips[t], wskip, N, c.species, hin, din, sc, dsc, st);
            return CGQ_STATUS_OK;
        };
        const bool ro_comp = g->ro_composed.ok && g->ro_composed.layer == t; /* h is never formed */
        if (ly->residual && t > 0 && !ro_comp) CGQ_TRY(skip_beside());       /* beside linear_up and the conv */
        if (!(t == 0 && rows0) && !(t == 1 && uc.ok)) /* else formed from the rows or with layer 0's product linear */
            node_linear_fwd<T>(&ly->linear_up, &sly->linear_up, &dly->linear_up, n_up, hin, din, hu, dhu_t, (T)1,
                               nullptr, 0);
        CGQ_LAUNCH_CHECK();
        prof.mark("node_fwd");
        if (t > 0 && xc) CGQ_TRY(exchange_rows<T>(g, hu, a.staging, N, NA, dhu_t, xc, false));
        if (t == 0 && sconv && g->sconv.gemm && /* V once per step, for every chunk; VL once per class table */
            (!sc_lin || g->sc_lin_at != scw.V || g->sc_lin_classes != g->sconv_classes)) {
            g->sc_lin_at = nullptr;
            species_conv_weights(p, g->sconv, scw, reinterpret_cast<const float *>(hu));
            CGQ_LAUNCH_CHECK();
            if (sc_lin) g->sc_lin_at = scw.V, g->sc_lin_classes = g->sconv_classes;
        }
        if (t == 0) CGQ_TRY(side.join()); /* the edge geometry */
        if (ly->residual && t == 0 && !ro_comp && !rows0) CGQ_TRY(skip_beside()); /* beside the factored conv */
        for (const edge_chunk &ch : chunks) {
            if (t == 0 && sconv) {
                species_conv_forward(p, g->sconv, scw, ch.i0, ch.i1, c.row_ptr, c.sender, c.species, c.r,
                                     reinterpret_cast<const float *>(Y), reinterpret_cast<const float *>(hu),
                                     reinterpret_cast<const float *>(cut_w),
                                     reinterpret_cast<float *>(sc_lin ? Mlin : M));
                CGQ_LAUNCH_CHECK();
                prof.mark("species_conv_fwd");
            } else if (f32 && g->fused_conv[t]) { /* the reverse reads w where it is kept, else forms it again */
                radial_conv_forward(p, g->radial[t], ch.i0, ch.i1, ch.e0, ch.e1, c.row_ptr, c.sender, c.r,
                                    reinterpret_cast<const float *>(Y), reinterpret_cast<const float *>(hu),
                                    reinterpret_cast<const float *>(cut_w), reinterpret_cast<float *>(M),
                                    ms.keep ? reinterpret_cast<float *>(ms.w_at(t, ch)) : nullptr);
                CGQ_LAUNCH_CHECK();
                prof.mark("radial_conv_fwd");
            } else {
                if (!wtab[t]) CGQ_TRY(radial_forward(t, ch));
                prof.mark("mlp_fwd");
                conv_fwd_kernel<T>(p, wtab[t], wtab[t] && g->wtab[t].ad)<<<(unsigned)(ch.i1 - ch.i0), p.threads, conv_fwd_smem(p, sizeof(T))>>>(
                    p, ch.i0, c.row_ptr, c.sender, Y, hu, edge_weights(t, ch), cut_w, M);
                CGQ_LAUNCH_CHECK();
                prof.mark("conv_fwd");
            }
            if (ly->density) {
                const cgq_fcnet &df = sm->layers[t].density_fn;
                CGQ_TRY(mlp_check(mlp_forward<T>(df, reinterpret_cast<T *const *>(df.W), ch.e1 - ch.e0, ef + ch.e0 * nb, nb,
                                                 dens_act, dens_d, 1, g->blas, 0)));
                k_density_rho<T><<<blocks_for(ch.i1 - ch.i0), TH>>>(ch.i0, ch.i1 - ch.i0, c.row_ptr, dens_d, ch.e0,
                                                                    cut_w, a.rho[t]);
                CGQ_LAUNCH_CHECK();
                prof.mark("density");
            }
        }
        if (!N) continue;
        if (g->linskip[t].ok) {
            linskip_fwd<T>(&ly->linear, &ly->skip_tp, g->skips[t], g->linskip[t], N, c.species, M, dM, A, dTt,
                           1.0 / ly->avg_num_neighbors);
        } else {
            if (!(t == 0 && sc_lin)) /* else the folds wrote Mlin */
                node_linear_fwd<T>(&ly->linear, &sly->linear, &dly->linear, N, M, dM, Mlin, dTt,
                                   (T)(ly->density ? 1.0 : 1.0 / ly->avg_num_neighbors), nullptr, 0);
            if (ly->density) k_density_scale<T><<<blocks_for(N * dTt), TH>>>(N, dTt, a.rho[t], Mlin);
            if (!ly->residual) skip_gemm_fwd<T>(&ly->skip_tp, g->skips[t], wskip, N, c.species, Mlin, dTt, A, dTt);
        }
        prof.mark("node_fwd");
        const symcon_plan &sp = g->symcon[t];
        symcon_forward<T>(sp, groups, N, c.species, ly->residual ? Mlin : A, dTt, B, dB);
        prof.mark("symcon");
        CGQ_TRY(side.join()); /* sc */
        const T *wprod = reinterpret_cast<const T *>(sly->product_linear.weight);
        if (t == 0 && uc.ok) { /* h's first blocks and layer 1's hu, both from B in one launch (up_compose_plan) */
            std::vector<lin_gemm<T>> gs;
            lin_gemm_fwd_parts<T>(&uc.head.l, wprod, N, B, dB, h, dH, (T)1, (ly->use_sc && ly->residual) ? sc : nullptr,
                                  dsc, gs);
            lin_gemm_fwd_parts<T>(&uc.comp.l, uc.weights<T>(), N, B, dB, a.hu[1], dhu1, (T)1,
                                  uc.rows ? a.hu[1] : nullptr, dhu1, gs); /* the rows gathered at the step's start */
            lin_gemm_launch<T, false>(gs);
        } else if (!ro_comp) {
            node_linear_fwd<T>(&ly->product_linear, &sly->product_linear, &dly->product_linear, N, B, dB, h, dH, (T)1,
                               (ly->use_sc && ly->residual) ? sc : nullptr, dsc);
        }
        CGQ_LAUNCH_CHECK();
        prof.mark("node_fwd");
        for (int r = 0; r < hm->n_readouts; r++)
            if (ro_comp && r == g->ro_composed_index)
                (g->ro_merge.index >= 0 ? k_readout_fwd<T, true> : k_readout_fwd<T, false>)
                    <<<ro_blocks, RO_LANES * RO_GROUPS>>>(g->ro_composed, N, B, dB, hin, din, c.species, a.ro_z[r],
                                                          a.e_acc, g->ro_merge);
            else if (g->readouts[r].layer == t && r != g->ro_merge.index) /* a merged one: in the composed */
                k_readout_fwd<T><<<ro_blocks, RO_LANES * RO_GROUPS>>>(g->readouts[r], N, h, dH, nullptr, 0, nullptr,
                                                                      a.ro_z[r], a.e_acc, readout_merge());
        CGQ_LAUNCH_CHECK();
        prof.mark("readout");
    }
    if (N) k_energy_finish<<<blocks_for(N), TH>>>(c, a.e_acc);
    CGQ_LAUNCH_CHECK();
    CGQ_TRY(side.join());
    cudaStream_t es = 0; /* the copy beside the reverse */
    CGQ_TRY(side.fork(&es));
    CGQ_TRY(energy_download(g, c.node_out, N, es));
    prof.mark("energy");
    if (!want_grad) return energy_finish(g, N, energy, node_energy);

    const int maxb = mace_max_product_dim(hm);
    T *gh = a.gh, *gh_prev = a.gh_prev, *gM = a.gM, *ghu = a.ghu, *gBn = a.gBn; /* edge_grad zeroed above */
    if (N && !g->ro_composed.ok) /* a composed readout writes dE/dB and dE/dx instead */
        CGQ_CHECK_GPU(cudaMemsetAsync(gh, 0, sizeof(T) * N * hm->layers[L - 1].product_linear.out.dim));
    for (int t = L - 1; t >= 0; t--) {
        const cgq_mace_layer *ly = &hm->layers[t];
        cgq_mace_layer *dly = &dm->layers[t];
        const cgq_mace_layer *sly = &sm->layers[t]; /* device weights in T */
        const conv_plan &p = g->plans[t];
        T *hu = a.hu[t], *A = a.A[t];
        const T *wskip = reinterpret_cast<const T *>(sly->skip_tp.weight);
        const int din = mace_layer_in_dim(hm, t), dhu_t = ly->linear_up.out.dim, dM = ly->conv_tp.out.dim;
        const int dTt = ly->target.dim, dH = ly->product_linear.out.dim;
        T *glin = ly->residual ? a.gApre : a.gMl; /* dE/d of the linear's output (rows of dTt) */
        const bool ro_comp = g->ro_composed.ok && g->ro_composed.layer == t;
        if (N) {
            if (ro_comp) { /* dE/dB (every column) and dE/dx from the readout: no skip, no product linear */
                if (t > 0) CGQ_CHECK_GPU(cudaMemsetAsync(gh_prev, 0, sizeof(T) * N * din));
                (g->ro_merge.index >= 0 ? k_readout_bwd<T, true> : k_readout_bwd<T, false>)
                    <<<ro_blocks, RO_LANES * RO_GROUPS>>>(g->ro_composed, N, a.ro_z[g->ro_composed_index], hm->scale,
                                                          gBn, maxb, t > 0 ? gh_prev : nullptr, din, c.species,
                                                          g->ro_merge);
            } else {
                for (int r = 0; r < hm->n_readouts; r++)
                    if (g->readouts[r].layer == t && r != g->ro_merge.index) /* merged: dE/dh written above */
                        k_readout_bwd<T><<<ro_blocks, RO_LANES * RO_GROUPS>>>(g->readouts[r], N, a.ro_z[r], hm->scale,
                                                                              gh, dH, nullptr, 0, nullptr,
                                                                              readout_merge());
                if (t > 0 && ly->use_sc && ly->residual) { /* beside the layer's reverse, joined before its conv */
                    cudaStream_t st = 0;
                    CGQ_TRY(side.fork(&st));
                    skip_gemm_bwd<T>(&ly->skip_tp, g->skips[t], wskip, N, c.species, gh, dH, gh_prev, din, st);
                } else if (t > 0) { /* layer 0's: the embedding's gradient is not needed */
                    CGQ_CHECK_GPU(cudaMemsetAsync(gh_prev, 0, sizeof(T) * N * din));
                }
                if (t == 0 && uc.ok) { /* dE/dB = dE/dhu_1 (Wp Wu)^T + dE/dh Wp^T over h's first blocks */
                    lin_gemm_bwd<T>(&uc.comp.l, uc.weights<T>(), N, ghu, dhu1, gBn, maxb, (T)1, 0);
                    lin_gemm_bwd<T>(&uc.head.l, reinterpret_cast<const T *>(sly->product_linear.weight), N, gh, dH, gBn,
                                    maxb, (T)1, 1);
                } else {
                    node_linear_bwd<T>(&ly->product_linear, &sly->product_linear, &dly->product_linear, N, gh, dH, gBn,
                                       maxb, (T)1, 0);
                }
            }
            prof.mark("node_bwd");
            const symcon_plan &sp = g->symcon[t];
            T *gApre = a.gApre, *gMl = a.gMl;
            symcon_backward<T>(sp, groups, N, c.species, ly->residual && ly->density ? a.Mlin[t] : A, dTt, gBn, maxb, gApre,
                               dTt);
            prof.mark("symcon_bwd");
            if (g->linskip[t].ok) {
                linskip_bwd<T>(&ly->linear, &ly->skip_tp, g->skips[t], g->linskip[t], N, c.species, gApre, dTt, gM,
                               dM, 1.0 / ly->avg_num_neighbors);
            } else {
                if (!ly->residual)
                    skip_gemm_bwd<T>(&ly->skip_tp, g->skips[t], wskip, N, c.species, gApre, dTt, gMl, dTt);
                if (ly->density)
                    k_density_scale_bwd<T><<<blocks_for(N), TH>>>(N, dTt, a.rho[t], a.Mlin[t], glin, a.grho);
                if (!(t == 0 && sc_lin)) /* else the folds take dE/dMlin */
                    node_linear_bwd<T>(&ly->linear, &sly->linear, &dly->linear, N, glin, dTt, gM, dM,
                                       (T)(ly->density ? 1.0 : 1.0 / ly->avg_num_neighbors), 0);
            }
            CGQ_LAUNCH_CHECK();
            prof.mark("node_bwd");
        }
        for (const edge_chunk &ch : chunks) {
            CGQ_TRY(side.join()); /* the skip's gh_prev; an edge tail's reads of gY, gcut and gr, written again here */
            const int64_t ne = ch.e1 - ch.e0;
            const cgq_fcnet &fc = sm->layers[t].radial_mlp;
            T *const *W = reinterpret_cast<T *const *>(fc.W);
            if (t == 0 && sconv) { /* dE/dY, dE/dcut and dE/dr straight from the factored layer */
                species_conv_backward(p, g->sconv, scw, ch.i0, ch.i1, ch.e0, c.row_ptr, c.sender, c.species, c.r,
                                      reinterpret_cast<const float *>(Y), reinterpret_cast<const float *>(hu),
                                      reinterpret_cast<const float *>(cut_w),
                                      reinterpret_cast<const float *>(sc_lin ? glin : gM),
                                      reinterpret_cast<float *>(gY), reinterpret_cast<float *>(gcut), b.gr);
                prof.mark("species_conv_bwd");
                edge_tail<T>(c, ch.e0, ch.e1, nullptr, gY, gcut, b.gr);
                CGQ_LAUNCH_CHECK();
                prof.mark("edge_tail");
                continue;
            }
            if (!ms.keep && !wtab[t]) CGQ_TRY(radial_forward(t, ch));
            prof.mark("mlp_fwd");
            conv_bwd_launch<T>(p, wtab[t], ch.i1 - ch.i0, ch.i0, c.row_ptr, c.sender, Y, hu, edge_weights(t, ch), cut_w,
                               gM, gw, gY, gcut, t > 0 ? gx1e : nullptr, b.gr, 0); /* layer 0: no sender sums */
            prof.mark("conv_bwd");
            T *gef_tail = gef; /* dE/d(edge features) for the tail: the MLP's and the density's */
            double *gr_tail = nullptr;
            if (wtab[t]) { /* dE/dr came with the reverse (no density: weight_table_fits) */
                gr_tail = b.gr, gef_tail = nullptr;
            } else if (table) {
                gr_tail = b.gr, gef_tail = ly->density ? gef : nullptr;
                CGQ_TRY(mlp_check(radial_table_backward<T>(g->radial[t], fc, W[fc.n_layers - 1], c.r, ch.e0, ne, gw,
                                                           gtmp, gr_tail, g->blas)));
                if (ly->density && ne) CGQ_CHECK_GPU(cudaMemsetAsync(gef, 0, sizeof(T) * ne * nb));
            } else {
                CGQ_TRY(mlp_check(mlp_backward<T>(fc, W, ne, ms.act_at(t, ch), gw, p.wn, gef, nb, gtmp, g->blas, 0)));
            }
            prof.mark("mlp_bwd");
            if (ly->density && ne) {
                const cgq_fcnet &df = sm->layers[t].density_fn;
                T *const *DW = reinterpret_cast<T *const *>(df.W);
                CGQ_TRY(mlp_check(mlp_forward<T>(df, DW, ne, ef + ch.e0 * nb, nb, dens_act, dens_d, 1, g->blas, 0)));
                k_density_edge_bwd<T>
                    <<<blocks_for(ne), TH>>>(ch.e0, ch.e1, c.erecv, dens_d, a.grho, cut_w, dens_gd, gcut);
                CGQ_TRY(mlp_check(mlp_backward<T>(df, DW, ne, dens_act, dens_gd, 1, dens_gef, nb, gtmp, g->blas, 0)));
                k_add_convert<T, T><<<blocks_for(ne * nb), TH>>>(ne * nb, dens_gef, gef);
                CGQ_LAUNCH_CHECK();
                prof.mark("density");
            }
            cudaStream_t st = 0;
            if (t > 0) CGQ_TRY(side.fork(&st)); /* beside the sender sums and what follows, up to the next join */
            edge_tail<T>(c, ch.e0, ch.e1, gef_tail, gY, gcut, gr_tail, st);
            CGQ_LAUNCH_CHECK();
            prof.mark("edge_tail");
            if (t > 0) /* the chunk's dE/dx rows into their senders' sums (layer 0's input is the embedding) */
                CGQ_TRY(sender_sums<T>(g, NA, dhu_t, c.srow, c.sedge, c.sender, ch, &ch == &chunks[0],
                                       chunks.size() == 1, gx1e, ghu));
            prof.mark("sender_sum");
        }
        if (t == 0) break;
        CGQ_TRY(finish_sender_grads<T>(g, chunks.empty(), N, NA, dhu_t, ghu, a.staging, xc));
        if (chunks.empty()) CGQ_TRY(side.join()); /* the skip's gh_prev (else joined in the chunk loop) */
        if (!(t == 1 && uc.ok))                   /* else layer 0's reverse reads ghu through the composed map */
            node_linear_bwd<T>(&ly->linear_up, &sly->linear_up, &dly->linear_up, N, ghu, dhu_t, gh_prev, din, (T)1, 1);
        CGQ_LAUNCH_CHECK();
        prof.mark("node_bwd");
        std::swap(gh, gh_prev);
    }
    CGQ_TRY(side.join());
    CGQ_TRY(deliver_gradients(g, gr, c, nr, edge_grad));
    prof.mark("download");
    return energy_finish(g, N, energy, node_energy);
}

#include "kernels/gpu/nequip_gpu.cuh"

extern "C" cgq_status cgq_gpu_evaluate(cgq_gpu *g, const cgq_graph *gr, const cgq_exchange *xc, double *energy,
                                       double *node_energy, double *edge_grad) {
    CGQ_TRY(exchange_begin(g, xc));
    if (g->host_model->nequip && g->nq_v2)
        return g->fp32 ? evaluate_nequip_v2<float>(g, gr, nullptr, xc, energy, node_energy, edge_grad, nullptr)
                       : evaluate_nequip_v2<double>(g, gr, nullptr, xc, energy, node_energy, edge_grad, nullptr);
    if (g->host_model->nequip) return evaluate_nequip(g, gr, xc, energy, node_energy, edge_grad);
    if (!g->v2) return evaluate_v1(g, gr, xc, energy, node_energy, edge_grad);
    return g->fp32 ? evaluate_v2<float>(g, gr, nullptr, xc, energy, node_energy, edge_grad, nullptr)
                   : evaluate_v2<double>(g, gr, nullptr, xc, energy, node_energy, edge_grad, nullptr);
}

extern "C" cgq_status cgq_gpu_evaluate_pairs(cgq_gpu *g, const double *positions, const cgq_exchange *xc,
                                             cgq_node_result *r) {
    if (!cgq_gpu_runs_pairs(g) || !g->pairs.set)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_gpu_evaluate_pairs: no candidate pairs on the device");
    CGQ_TRY(exchange_begin(g, xc));
    if (g->host_model->nequip)
        return g->fp32
                   ? evaluate_nequip_v2<float>(g, nullptr, positions, xc, &r->energy, r->node_energies, nullptr, r)
                   : evaluate_nequip_v2<double>(g, nullptr, positions, xc, &r->energy, r->node_energies, nullptr, r);
    return g->fp32 ? evaluate_v2<float>(g, nullptr, positions, xc, &r->energy, r->node_energies, nullptr, r)
                   : evaluate_v2<double>(g, nullptr, positions, xc, &r->energy, r->node_energies, nullptr, r);
}

/* ---- kernel test entries: one map alone on caller-given inputs ----------------------------------------- */
/* Copies the host arrays `in` (double) to the device in T, runs launch(species, inputs, outputs), and copies the
 * outputs back into `out` (double). */
template <class T, class F>
static cgq_status run_on_device(const std::vector<std::pair<const double *, int64_t>> &in,
                                const std::vector<std::pair<double *, int64_t>> &out, const int32_t *species, int64_t n,
                                F launch) {
    std::vector<void *> bufs;
    std::vector<T *> din, dout;
    auto run = [&]() -> cgq_status {
        int32_t *dsp = nullptr;
        CGQ_CHECK_GPU(cudaMalloc(&dsp, sizeof(int32_t) * n));
        bufs.push_back(dsp);
        CGQ_CHECK_GPU(cudaMemcpy(dsp, species, sizeof(int32_t) * n, cudaMemcpyHostToDevice));
        for (const auto &a : in) {
            const std::vector<T> h(a.first, a.first + a.second);
            T *d = nullptr;
            CGQ_CHECK_GPU(cudaMalloc(&d, sizeof(T) * a.second));
            bufs.push_back(d), din.push_back(d);
            CGQ_CHECK_GPU(cudaMemcpy(d, h.data(), sizeof(T) * a.second, cudaMemcpyHostToDevice));
        }
        for (const auto &a : out) {
            T *d = nullptr;
            CGQ_CHECK_GPU(cudaMalloc(&d, sizeof(T) * a.second));
            bufs.push_back(d), dout.push_back(d);
        }
        launch(dsp, din.data(), dout.data());
        CGQ_CHECK_GPU(cudaGetLastError());
        for (size_t k = 0; k < out.size(); k++) {
            std::vector<T> h((size_t)out[k].second);
            CGQ_CHECK_GPU(cudaMemcpy(h.data(), dout[k], sizeof(T) * h.size(), cudaMemcpyDeviceToHost));
            std::copy(h.begin(), h.end(), out[k].first);
        }
        return CGQ_STATUS_OK;
    };
    const cgq_status st = run();
    for (void *p : bufs) cudaFree(p);
    return st;
}

/* The [C][D] place of each column of a layer's target irreps (the CPU's layout of the product basis' input; the
 * kernel tests convert with it): column offset_b + ch (2l+1) + mm of block b goes to ch D + (the 2l+1 of the blocks
 * before b) + mm */
static std::vector<int> cd_map(const cgq_mace_layer *ly) {
    std::vector<int> cd((size_t)ly->target.dim);
    int doff = 0;
    for (int b = 0; b < ly->target.n; b++) {
        const cgq_irrep_block &tb = ly->target.b[b];
        const int d = 2 * tb.l + 1;
        for (int ch = 0; ch < tb.mul; ch++)
            for (int mm = 0; mm < d; mm++) cd[(size_t)tb.offset + ch * d + mm] = ch * ly->coupling_dim + doff + mm;
        doff += d;
    }
    return cd;
}

template <class T>
static cgq_status product_basis_t(cgq_gpu *g, int layer, int64_t n, const int32_t *species, const double *A,
                                  const double *gB, double *B, double *gA) {
    const cgq_mace_layer *ly = &g->host_model->layers[layer];
    const symcon_plan &sp = g->symcon[layer];
    const int64_t CD = (int64_t)ly->channels * ly->coupling_dim, dB = ly->product_out.dim, dT = ly->target.dim;
    /* A and dE/dA come as [n][C][D] (the CPU reference's); the kernels take the target irreps' layout */
    const std::vector<int> cd = cd_map(ly);
    std::vector<double> At((size_t)(n * dT)), gAt((size_t)(n * dT));
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < dT; j++) At[(size_t)(i * dT + j)] = A[i * CD + cd[(size_t)j]];
    cgq_status grouped = CGQ_STATUS_OK;
    const cgq_status st = run_on_device<T>({{At.data(), n * dT}, {gB, n * dB}}, {{B, n * dB}, {gAt.data(), n * dT}},
                                           species, n, [&](const int32_t *dsp, T *const *i, T *const *o) {
                                               symcon_groups gp;
                                               grouped = symcon_group_nodes<T>(g, n, dsp, 0, false, &gp);
                                               symcon_forward<T>(sp, gp, n, dsp, i[0], dT, o[0], dB);
                                               symcon_backward<T>(sp, gp, n, dsp, i[0], dT, i[1], dB, o[1], dT);
                                           });
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < dT; j++) gA[i * CD + cd[(size_t)j]] = gAt[(size_t)(i * dT + j)];
    return st != CGQ_STATUS_OK ? st : grouped;
}

template <class T>
static cgq_status skip_tp_t(cgq_gpu *g, int layer, int64_t n, const int32_t *species, const double *x,
                            const double *gout, double *out, double *gx) {
    const cgq_tp *tp = &g->host_model->layers[layer].skip_tp;
    const T *W = reinterpret_cast<const T *>((g->fp32 ? g->shadow_f : g->shadow).layers[layer].skip_tp.weight);
    const int64_t din = tp->in1.dim, dout = tp->out.dim;
    return run_on_device<T>({{x, n * din}, {gout, n * dout}}, {{out, n * dout}, {gx, n * din}}, species, n,
                            [&](const int32_t *dsp, T *const *i, T *const *o) {
                                skip_gemm_fwd<T>(tp, g->skips[layer], W, n, dsp, i[0], din, o[0], dout);
                                skip_gemm_bwd<T>(tp, g->skips[layer], W, n, dsp, i[1], dout, o[1], din);
                            });
}

extern "C" cgq_status cgq_gpu_skip_tp(cgq_gpu *g, int layer, int64_t n, const int32_t *species, const double *x,
                                      const double *gout, double *out, double *gx) {
    if (layer < 0 || layer >= g->host_model->n_layers || !g->skips[layer].ok || n <= 0)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_gpu_skip_tp: layer %d has no GPU skip plan (or no nodes)",
                        layer);
    return g->fp32 ? skip_tp_t<float>(g, layer, n, species, x, gout, out, gx)
                   : skip_tp_t<double>(g, layer, n, species, x, gout, out, gx);
}

/* A readout plan's kernels alone on n rows: out[i] = its output from row i of in1 (width d1) and, for a composed plan,
 * of x (width d2, the nodes' species); g1, g2 = d(out)/d(in1), d(out)/dx (scale 1) */
template <class T>
static cgq_status readout_t(const readout_plan &p, const readout_merge &mg, int64_t n, const int32_t *species,
                            const double *in1, int d1, const double *x, int d2, double *out, double *g1, double *g2) {
    const unsigned blocks = (unsigned)std::min<int64_t>((n + RO_GROUPS - 1) / RO_GROUPS, 65535);
    double *dz = nullptr, *de = nullptr;
    auto run = [&]() -> cgq_status {
        CGQ_CHECK_GPU(cudaMalloc(&dz, sizeof(double) * (size_t)(n * std::max(p.zw, 1))));
        CGQ_CHECK_GPU(cudaMalloc(&de, sizeof(double) * (size_t)n));
        CGQ_CHECK_GPU(cudaMemset(de, 0, sizeof(double) * (size_t)n));
        std::vector<std::pair<const double *, int64_t>> in = {{in1, n * d1}};
        std::vector<std::pair<double *, int64_t>> outs = {{g1, n * d1}};
        if (x) in.push_back({x, n * d2}), outs.push_back({g2, n * d2});
        cudaError_t err = cudaSuccess;
        CGQ_TRY(run_on_device<T>(in, outs, species, n, [&](const int32_t *dsp, T *const *i, T *const *o) {
            (mg.index >= 0 ? k_readout_fwd<T, true> : k_readout_fwd<T, false>)
                <<<blocks, RO_LANES * RO_GROUPS>>>(p, n, i[0], d1, x ? i[1] : nullptr, d2, dsp, dz, de, mg);
            /* as the step: a plan's rows are added to dE/dh, a composed plan's written (dE/dB: every column, so
             * NaN bits before; dE/dx: zeros before, its columns that feed a unit written) */
            for (size_t k = 0; k < outs.size() && err == cudaSuccess; k++)
                err = cudaMemset(o[k], p.composed && k == 0 ? 0xff : 0, sizeof(T) * (size_t)outs[k].second);
            (mg.index >= 0 ? k_readout_bwd<T, true> : k_readout_bwd<T, false>)
                <<<blocks, RO_LANES * RO_GROUPS>>>(p, n, dz, 1.0, o[0], d1, x ? o[1] : nullptr, d2, dsp, mg);
        }));
        CGQ_CHECK_GPU(err);
        CGQ_CHECK_GPU(cudaMemcpy(out, de, sizeof(double) * (size_t)n, cudaMemcpyDeviceToHost));
        return CGQ_STATUS_OK;
    };
    const cgq_status st = run();
    (void)cudaFree(dz); /* freeing what was (or was not: null) allocated cannot fail the result */
    (void)cudaFree(de);
    return st;
}

extern "C" cgq_status cgq_gpu_readout(cgq_gpu *g, int r, int64_t n, const double *h, double *out, double *gh) {
    if (r < 0 || r >= g->host_model->n_readouts || !g->v2 || !g->readouts[r].ok || n <= 0)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT,
                        "cgq_gpu_readout: readout %d does not run as the v2 path's readout kernels (or no nodes)", r);
    const readout_plan &p = g->readouts[r];
    const int dH = g->host_model->layers[p.layer].product_linear.out.dim;
    const std::vector<int32_t> species((size_t)n, 0);
    return g->fp32 ? readout_t<float>(p, readout_merge(), n, species.data(), h, dH, nullptr, 0, out, gh, nullptr)
                   : readout_t<double>(p, readout_merge(), n, species.data(), h, dH, nullptr, 0, out, gh, nullptr);
}

extern "C" int cgq_gpu_readout_composed(const cgq_gpu *g) {
    return g->ro_composed.ok ? g->ro_composed_index : -1;
}

extern "C" int cgq_gpu_readout_merged(const cgq_gpu *g) {
    return g->ro_composed.ok ? g->ro_merge.index : -1;
}

extern "C" cgq_status cgq_gpu_readout_composed_run(cgq_gpu *g, int64_t n, const int32_t *species, const double *B,
                                                   const double *x, double *out, double *gB, double *gx) {
    if (!g->ro_composed.ok || n <= 0)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_gpu_readout_composed_run: no composed readout (or no nodes)");
    const readout_plan &p = g->ro_composed;
    const int dB = g->host_model->layers[p.layer].product_out.dim, din = mace_layer_in_dim(g->host_model, p.layer);
    return g->fp32 ? readout_t<float>(p, g->ro_merge, n, species, B, dB, x, din, out, gB, gx)
                   : readout_t<double>(p, g->ro_merge, n, species, B, dB, x, din, out, gB, gx);
}

template <class T>
static cgq_status linear_skip_t(cgq_gpu *g, int layer, int64_t n, const int32_t *species, const double *M,
                                const double *gA, double *A, double *gM) {
    const cgq_mace_layer *ly = &g->host_model->layers[layer];
    const int64_t dM = ly->linear.in.dim, dA = ly->skip_tp.out.dim;
    return run_on_device<T>({{M, n * dM}, {gA, n * dA}}, {{A, n * dA}, {gM, n * dM}}, species, n,
                            [&](const int32_t *dsp, T *const *i, T *const *o) {
                                const double alpha = 1.0 / ly->avg_num_neighbors;
                                linskip_fwd<T>(&ly->linear, &ly->skip_tp, g->skips[layer], g->linskip[layer], n, dsp,
                                               i[0], dM, o[0], dA, alpha);
                                linskip_bwd<T>(&ly->linear, &ly->skip_tp, g->skips[layer], g->linskip[layer], n, dsp,
                                               i[1], dA, o[1], dM, alpha);
                            });
}

extern "C" cgq_status cgq_gpu_linear_skip(cgq_gpu *g, int layer, int64_t n, const int32_t *species, const double *M,
                                          const double *gA, double *A, double *gM) {
    if (g->host_model->nequip || layer < 0 || layer >= g->host_model->n_layers || !g->linskip[layer].ok || n <= 0)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT,
                        "cgq_gpu_linear_skip: layer %d's linear and skip do not run as one GEMM (or no nodes)", layer);
    return g->fp32 ? linear_skip_t<float>(g, layer, n, species, M, gA, A, gM)
                   : linear_skip_t<double>(g, layer, n, species, M, gA, A, gM);
}

/* The node linear `which` of a layer (cgq_gpu_linear): its host description, and its weights on the device in the
 * evaluator's precision; NULL where the layer has none or it does not run as lin_gemm tiles */
static const cgq_linear *node_linear_of(const cgq_gpu *g, int layer, int which, const void **W) {
    const cgq_model *m = g->host_model;
    const cgq_linear *hl = nullptr;
    if (m->nequip) {
        if (!g->nq_v2 || layer < 0 || layer >= m->nequip->n_layers || which < 0 || which > 1) return nullptr;
        hl = which ? &m->nequip->layers[layer].linear_2 : &m->nequip->layers[layer].linear_1;
        *W = which ? g->nq_node[layer].w2 : g->nq_node[layer].w1;
    } else {
        if (!g->v2 || layer < 0 || layer >= m->n_layers || which < 0 || which > 2) return nullptr;
        const cgq_mace_layer *hly = &m->layers[layer], *sly = &(g->fp32 ? g->shadow_f : g->shadow).layers[layer];
        const cgq_linear *pair[3][2] = {{&hly->linear_up, &sly->linear_up},
                                        {&hly->linear, &sly->linear},
                                        {&hly->product_linear, &sly->product_linear}};
        hl = pair[which][0], *W = pair[which][1]->weight;
    }
    return lin_gemm_ok(hl) ? hl : nullptr;
}

template <class T>
static cgq_status linear_t(const cgq_linear *hl, const T *W, int64_t n, const double *x, const double *gy, double *y,
                           double *gx) {
    const int64_t din = hl->in.dim, dout = hl->out.dim;
    std::vector<int32_t> species(n, 0);
    return run_on_device<T>({{x, n * din}, {gy, n * dout}}, {{y, n * dout}, {gx, n * din}}, species.data(), n,
                            [&](const int32_t *, T *const *i, T *const *o) {
                                lin_gemm_fwd<T>(hl, W, n, i[0], din, o[0], dout, (T)1, nullptr, 0);
                                lin_gemm_bwd<T>(hl, W, n, i[1], dout, o[1], din, (T)1, 0);
                            });
}

extern "C" cgq_status cgq_gpu_linear(cgq_gpu *g, int layer, int which, int64_t n, const double *x, const double *gy,
                                     double *y, double *gx) {
    const void *W = nullptr;
    const cgq_linear *hl = node_linear_of(g, layer, which, &W);
    if (!hl || n <= 0)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT,
                        "cgq_gpu_linear: layer %d has no node linear %d on GEMM tiles (or no nodes)", layer, which);
    return g->fp32 ? linear_t<float>(hl, static_cast<const float *>(W), n, x, gy, y, gx)
                   : linear_t<double>(hl, static_cast<const double *>(W), n, x, gy, y, gx);
}

extern "C" cgq_status cgq_gpu_product_basis(cgq_gpu *g, int layer, int64_t n, const int32_t *species, const double *A,
                                            const double *gB, double *B, double *gA) {
    if (layer < 0 || layer >= g->host_model->n_layers || !g->symcon[layer].ok || n <= 0)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_gpu_product_basis: layer %d has no GPU product-basis plan "
                        "(or no nodes)", layer);
    return g->fp32 ? product_basis_t<float>(g, layer, n, species, A, gB, B, gA)
                   : product_basis_t<double>(g, layer, n, species, A, gB, B, gA);
}

extern "C" int cgq_gpu_product_basis_generated(const cgq_gpu *g, int layer) {
    if (layer < 0 || layer >= g->host_model->n_layers || !g->symcon[layer].ok) return 0;
    return g->symcon[layer].gen[0] && g->symcon[layer].gen[1];
}

/* The layer's convolution plans (MACE: one; NequIP: one per group of input blocks) and its tensor product. */
static int layer_conv(const cgq_gpu *g, int layer, const conv_plan **plans, const cgq_tp **tp) {
    const cgq_model *m = g->host_model;
    if (layer < 0) return 0;
    if (m->nequip) {
        if (!g->nq_v2 || layer >= m->nequip->n_layers) return 0;
        *plans = g->nq_plans[layer], *tp = &m->nequip->layers[layer].tp;
        return g->nq_groups[layer];
    }
    if (!g->v2 || layer >= m->n_layers) return 0;
    *plans = &g->plans[layer], *tp = &m->layers[layer].conv_tp;
    return 1;
}

/* Device copies for the kernel test entries, freed with the struct: in() copies n host values to the device as T (a
 * null host pointer: an output, left unset), out() copies n device values of T back into doubles. */
struct test_buffers {
    std::vector<void *> bufs;
    test_buffers() = default;
    test_buffers(const test_buffers &) = delete;
    test_buffers &operator=(const test_buffers &) = delete;
    ~test_buffers() {
        for (void *p : bufs) cudaFree(p);
    }
    template <class T, class H>
    cgq_status in(const H *h, int64_t n, T **d) {
        CGQ_CHECK_GPU(cudaMalloc((void **)d, sizeof(T) * n + 16));
        bufs.push_back(*d);
        if (!h || n == 0) return CGQ_STATUS_OK;
        const std::vector<T> v(h, h + n);
        CGQ_CHECK_GPU(cudaMemcpy(*d, v.data(), sizeof(T) * n, cudaMemcpyHostToDevice));
        return CGQ_STATUS_OK;
    }
    template <class T>
    static cgq_status out(const T *d, double *h, int64_t n) {
        std::vector<T> v((size_t)n);
        CGQ_CHECK_GPU(cudaMemcpy(v.data(), d, sizeof(T) * v.size(), cudaMemcpyDeviceToHost));
        std::copy(v.begin(), v.end(), h);
        return CGQ_STATUS_OK;
    }
};

template <class T>
static cgq_status conv_t(const conv_plan *plans, int n_plans, const cgq_tp *tp, int64_t n, const int64_t *row_ptr,
                         const int32_t *sender, const double *x, const double *Y, const double *w, const double *gM,
                         double *M, double *gw, double *gY, double *gx) {
    const int64_t E = row_ptr[n], din = tp->in1.dim, dM = tp->out.dim, wn = tp->weight_numel, nY = plans[0].nY;
    std::vector<int64_t> srow(n + 1);
    std::vector<int32_t> sedge(E + 1);
    CGQ_TRY(cgq_sender_index(sender, E, n, srow.data(), sedge.data()));
    test_buffers tb;
    int64_t *drow, *dsrow;
    int32_t *dsend, *dsedge;
    T *dx, *dY, *dw, *dgM, *dMsg, *dgw, *dgY, *dgx1e, *dgx, *dgcut;
    CGQ_TRY(tb.in(row_ptr, n + 1, &drow));
    CGQ_TRY(tb.in(sender, E, &dsend));
    CGQ_TRY(tb.in(srow.data(), n + 1, &dsrow));
    CGQ_TRY(tb.in(sedge.data(), E, &dsedge));
    CGQ_TRY(tb.in(x, n * din, &dx));
    CGQ_TRY(tb.in(Y, E * nY, &dY));
    CGQ_TRY(tb.in(w, E * wn, &dw));
    CGQ_TRY(tb.in(gM, n * dM, &dgM));
    CGQ_TRY(tb.in((const double *)nullptr, n * dM, &dMsg));
    CGQ_TRY(tb.in((const double *)nullptr, E * wn, &dgw));
    CGQ_TRY(tb.in((const double *)nullptr, E * nY, &dgY));
    CGQ_TRY(tb.in((const double *)nullptr, E * din, &dgx1e));
    CGQ_TRY(tb.in((const double *)nullptr, n * din, &dgx));
    CGQ_TRY(tb.in((const double *)nullptr, E, &dgcut));
    for (int q = 0; q < n_plans; q++) {
        const conv_plan &p = plans[q];
        conv_fwd_kernel<T>(p)<<<(unsigned)n, p.threads, conv_fwd_smem(p, sizeof(T))>>>(
            p, 0, drow, dsend, dY, dx, conv_rows<T>(dw, 0), nullptr, dMsg);
        conv_bwd_kernel<T>(p.n_in1, p.nY)<<<(unsigned)n, p.threads_bwd, conv_bwd_smem(p, sizeof(T))>>>(
            p, 0, drow, dsend, dY, dx, conv_rows<T>(dw, 0), nullptr, dgM, dgw, dgY, dgcut, dgx1e, nullptr, q > 0);
    }
    sender_sum_rows<T>(n, (int)din, dsrow, dsedge, 0, E, 1, 0, dgx1e, dgx); /* whole 0: the search path tested too */
    CGQ_CHECK_GPU(cudaGetLastError());
    CGQ_TRY(test_buffers::out(dMsg, M, n * dM));
    CGQ_TRY(test_buffers::out(dgw, gw, E * wn));
    CGQ_TRY(test_buffers::out(dgY, gY, E * nY));
    return test_buffers::out(dgx, gx, n * din);
}

extern "C" cgq_status cgq_gpu_conv(cgq_gpu *g, int layer, int64_t n, const int64_t *row_ptr, const int32_t *sender,
                                   const double *x, const double *Y, const double *w, const double *gM, double *M,
                                   double *gw, double *gY, double *gx) {
    const conv_plan *plans = nullptr;
    const cgq_tp *tp = nullptr;
    const int n_plans = layer_conv(g, layer, &plans, &tp);
    if (!n_plans || n <= 0)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_gpu_conv: layer %d has no GPU convolution plan (or no nodes)",
                        layer);
    return g->fp32 ? conv_t<float>(plans, n_plans, tp, n, row_ptr, sender, x, Y, w, gM, M, gw, gY, gx)
                   : conv_t<double>(plans, n_plans, tp, n, row_ptr, sender, x, Y, w, gM, M, gw, gY, gx);
}

extern "C" cgq_status cgq_gpu_radial(cgq_gpu *g, int layer, int64_t n, const double *r, const double *gw, double *w,
                                     double *gr) {
    const cgq_model *m = g->host_model;
    const int L = m->nequip ? m->nequip->n_layers : m->n_layers;
    if (layer < 0 || layer >= L || !g->radial[layer].n_int || n <= 0)
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "cgq_gpu_radial: layer %d has no radial table (or no edges)", layer);
    const radial_table &s = g->radial[layer];
    /* float weights on the device */
    const cgq_fcnet &fc = m->nequip ? g->nq_mlp_f[layer] : g->shadow_f.layers[layer].radial_mlp;
    const float *W_last = reinterpret_cast<const float *const *>(fc.W)[fc.n_layers - 1];
    const int64_t wn = fc.h[fc.n_layers];
    std::vector<void *> bufs;
    auto run = [&]() -> cgq_status {
        double *dr = nullptr, *dgr = nullptr;
        float *dgw = nullptr, *dw = nullptr, *da = nullptr;
        CGQ_CHECK_GPU(cudaMalloc(&dr, sizeof(double) * n));
        bufs.push_back(dr);
        CGQ_CHECK_GPU(cudaMalloc(&dgr, sizeof(double) * n));
        bufs.push_back(dgr);
        CGQ_CHECK_GPU(cudaMalloc(&dgw, sizeof(float) * n * wn));
        bufs.push_back(dgw);
        CGQ_CHECK_GPU(cudaMalloc(&dw, sizeof(float) * n * wn));
        bufs.push_back(dw);
        CGQ_CHECK_GPU(cudaMalloc(&da, sizeof(float) * n * s.width));
        bufs.push_back(da);
        const std::vector<float> hgw(gw, gw + n * wn);
        CGQ_CHECK_GPU(cudaMemcpy(dr, r, sizeof(double) * n, cudaMemcpyHostToDevice));
        CGQ_CHECK_GPU(cudaMemcpy(dgw, hgw.data(), sizeof(float) * n * wn, cudaMemcpyHostToDevice));
        CGQ_TRY(mlp_check(radial_table_forward<float>(s, fc, W_last, dr, 0, n, da, dw, wn, g->blas)));
        CGQ_TRY(mlp_check(radial_table_backward<float>(s, fc, W_last, dr, 0, n, dgw, da, dgr, g->blas)));
        CGQ_CHECK_GPU(cudaGetLastError());
        std::vector<float> hw((size_t)(n * wn));
        CGQ_CHECK_GPU(cudaMemcpy(hw.data(), dw, sizeof(float) * hw.size(), cudaMemcpyDeviceToHost));
        std::copy(hw.begin(), hw.end(), w);
        CGQ_CHECK_GPU(cudaMemcpy(gr, dgr, sizeof(double) * n, cudaMemcpyDeviceToHost));
        return CGQ_STATUS_OK;
    };
    const cgq_status st = run();
    for (void *p : bufs) cudaFree(p);
    return st;
}

extern "C" cgq_status cgq_gpu_radial_conv(cgq_gpu *g, int layer, int64_t n, const int64_t *row_ptr,
                                          const int32_t *sender, const double *r, const double *x, const double *Y,
                                          double *M, double *w) {
    const cgq_model *m = g->host_model;
    if (m->nequip || layer < 0 || layer >= m->n_layers || n <= 0 || !g->fp32 || !g->v2 ||
        !rcf_fits(g->plans[layer], g->radial[layer], g->smem_optin))
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "cgq_gpu_radial_conv: layer %d's forward does not run fused here",
                        layer);
    const conv_plan &p = g->plans[layer];
    const int64_t E = row_ptr[n], din = p.dhu, dM = p.dM, wn = p.wn, nY = p.nY;
    test_buffers tb;
    int64_t *drow;
    int32_t *dsend;
    double *dr;
    float *dx, *dY, *dMsg, *dw;
    CGQ_TRY(tb.in(row_ptr, n + 1, &drow));
    CGQ_TRY(tb.in(sender, E, &dsend));
    CGQ_TRY(tb.in(r, E, &dr));
    CGQ_TRY(tb.in(x, n * din, &dx));
    CGQ_TRY(tb.in(Y, E * nY, &dY));
    CGQ_TRY(tb.in((const double *)nullptr, n * dM, &dMsg));
    CGQ_TRY(tb.in((const double *)nullptr, E * wn, &dw));
    radial_conv_forward(p, g->radial[layer], 0, n, 0, E, drow, dsend, dr, dY, dx, nullptr, dMsg, dw);
    CGQ_CHECK_GPU(cudaGetLastError());
    CGQ_TRY(test_buffers::out(dMsg, M, n * dM));
    return test_buffers::out(dw, w, E * wn);
}

extern "C" cgq_status cgq_gpu_species_conv(cgq_gpu *g, int64_t n, const int64_t *row_ptr, const int32_t *sender,
                                           const int32_t *species, const double *r, const double *cut, const double *x,
                                           const double *Y, const double *gM, double *M, double *gY, double *gcut,
                                           double *gr, int linear) {
    if (n <= 0 || !g->sconv.ok)
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "cgq_gpu_species_conv: layer 0 does not run factored here");
    if (linear && !(g->sconv.gemm && g->sc_lin.ok))
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "cgq_gpu_species_conv: layer 0's linear is not composed here");
    CGQ_TRY(set_species_classes(g, species, n));
    const conv_plan &p = g->plans[0];
    const species_conv &s = g->sconv;
    if (!sc_runs(p, s, g->smem_optin))
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "cgq_gpu_species_conv: %d species in the graph", s.S);
    sc_work w; /* the GEMM folds in pieces of 40 receivers: the test's 97 take three */
    if (s.gemm) CGQ_TRY(species_conv_work(g, 40, &w, linear != 0));
    const int64_t E = row_ptr[n], din = p.dhu, dM = sc_rows_ld(p, w), nY = p.nY;
    test_buffers tb;
    int64_t *drow;
    int32_t *dsend, *dspec;
    double *dr, *dgr;
    float *dcut = nullptr, *dx, *dY, *dgM, *dMsg, *dgY, *dgcut;
    CGQ_TRY(tb.in(row_ptr, n + 1, &drow));
    CGQ_TRY(tb.in(sender, E, &dsend));
    CGQ_TRY(tb.in(species, n, &dspec));
    CGQ_TRY(tb.in(r, E, &dr));
    if (cut) CGQ_TRY(tb.in(cut, E, &dcut));
    CGQ_TRY(tb.in(x, n * din, &dx));
    CGQ_TRY(tb.in(Y, E * nY, &dY));
    CGQ_TRY(tb.in(gM, n * dM, &dgM));
    CGQ_TRY(tb.in((const double *)nullptr, n * dM, &dMsg));
    CGQ_TRY(tb.in((const double *)nullptr, E * nY, &dgY));
    CGQ_TRY(tb.in((const double *)nullptr, E, &dgcut));
    CGQ_TRY(tb.in((const double *)nullptr, E, &dgr));
    if (s.gemm) species_conv_weights(p, s, w, dx);
    g->sc_lin_at = nullptr; /* the steps' VL overwritten */
    species_conv_forward(p, s, w, 0, n, drow, dsend, dspec, dr, dY, dx, dcut, dMsg);
    species_conv_backward(p, s, w, 0, n, 0, drow, dsend, dspec, dr, dY, dx, dcut, dgM, dgY, dgcut, dgr);
    CGQ_CHECK_GPU(cudaGetLastError());
    CGQ_TRY(test_buffers::out(dMsg, M, n * dM));
    CGQ_TRY(test_buffers::out(dgY, gY, E * nY));
    CGQ_TRY(test_buffers::out(dgcut, gcut, E));
    return test_buffers::out(dgr, gr, E);
}

extern "C" int cgq_gpu_species_conv_linear(const cgq_gpu *g) {
    return g->sconv.ok && g->sconv.gemm && g->sc_lin.ok;
}

extern "C" int cgq_gpu_species_conv_gemm(const cgq_gpu *g) {
    return g->sconv.ok && g->sconv.gemm;
}

extern "C" int cgq_gpu_node_tensor_cores(const cgq_gpu *) { return lin_gemm_tc_mode() > 0; }

extern "C" int cgq_gpu_conv_std(const cgq_gpu *g, int layer) {
    if (layer < 0 || layer >= g->host_model->n_layers || !g->fp32 || !g->wtab[layer].knots) return 0;
    const conv_plan &p = g->plans[layer];
    return p.ok && p.std_form && conv_std_instantiated(p.n_in1, p.nY);
}

extern "C" int cgq_gpu_weight_table_compact(const cgq_gpu *g, int layer) {
    return layer >= 0 && layer < g->host_model->n_layers && g->fp32 && g->wtab[layer].ad;
}

extern "C" cgq_status cgq_gpu_table_conv(cgq_gpu *g, int layer, int64_t n, const int64_t *row_ptr,
                                         const int32_t *sender, const double *r, const double *cut, const double *x,
                                         const double *Y, const double *gM, double *M, double *gY, double *gcut,
                                         double *gx, double *gr) {
    if (n <= 0 || layer < 0 || layer >= g->host_model->n_layers || !g->fp32 || !g->wtab[layer].knots)
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "cgq_gpu_table_conv: layer %d has no weight table here", layer);
    const conv_plan &p = g->plans[layer];
    const int64_t E = row_ptr[n], din = p.dhu, dM = p.dM, nY = p.nY;
    std::vector<int64_t> srow(n + 1);
    std::vector<int32_t> sedge(E + 1);
    CGQ_TRY(cgq_sender_index(sender, E, n, srow.data(), sedge.data()));
    test_buffers tb;
    int64_t *drow, *dsrow;
    int32_t *dsend, *dsedge;
    double *dr, *dgr;
    float *dcut = nullptr, *dx, *dY, *dgM, *dMsg, *dgY, *dgcut, *dgx1e, *dgx;
    CGQ_TRY(tb.in(row_ptr, n + 1, &drow));
    CGQ_TRY(tb.in(sender, E, &dsend));
    CGQ_TRY(tb.in(srow.data(), n + 1, &dsrow));
    CGQ_TRY(tb.in(sedge.data(), E, &dsedge));
    CGQ_TRY(tb.in(r, E, &dr));
    if (cut) CGQ_TRY(tb.in(cut, E, &dcut));
    CGQ_TRY(tb.in(x, n * din, &dx));
    CGQ_TRY(tb.in(Y, E * nY, &dY));
    CGQ_TRY(tb.in(gM, n * dM, &dgM));
    CGQ_TRY(tb.in((const double *)nullptr, n * dM, &dMsg));
    CGQ_TRY(tb.in((const double *)nullptr, E * nY, &dgY));
    CGQ_TRY(tb.in((const double *)nullptr, E, &dgcut));
    CGQ_TRY(tb.in((const double *)nullptr, E * din, &dgx1e));
    CGQ_TRY(tb.in((const double *)nullptr, n * din, &dgx));
    CGQ_TRY(tb.in((const double *)nullptr, E, &dgr));
    const conv_weights<float> cw = conv_table(g->wtab[layer], dr, 0);
    conv_fwd_kernel<float>(p, true, cw.tab.ad)<<<(unsigned)n, p.threads, conv_fwd_smem(p, sizeof(float))>>>(
        p, 0, drow, dsend, dY, dx, cw, dcut, dMsg);
    conv_bwd_launch<float>(p, true, n, 0, drow, dsend, dY, dx, cw, dcut, dgM, nullptr, dgY, dgcut, dgx1e, dgr, 0);
    sender_sum_rows<float>(n, (int)din, dsrow, dsedge, 0, E, 1, 1, dgx1e, dgx);
    CGQ_CHECK_GPU(cudaGetLastError());
    CGQ_TRY(test_buffers::out(dMsg, M, n * dM));
    CGQ_TRY(test_buffers::out(dgY, gY, E * nY));
    CGQ_TRY(test_buffers::out(dgcut, gcut, E));
    CGQ_TRY(test_buffers::out(dgx, gx, n * din));
    return test_buffers::out(dgr, gr, E);
}
