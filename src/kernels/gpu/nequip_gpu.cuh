/* nequip_gpu.cuh: NequIP models on the GPU. Two paths, both deterministic (no atomics):
 * - v2 (evaluate_nequip_v2, float64 or float32): the edge MLP as GEMMs over chunks of edges; the convolution on the
 *   block-per-receiver kernels of conv.cuh (a plan per group of input blocks, build_conv_group); linear_1, linear_2
 *   and the self-connection (type embedding folded in) as the node GEMMs of node_ops.cuh; the gate one thread per
 *   node; the edge geometry, the readout and the edge tail as the float64 steps of kernels/nequip_steps.h;
 * - v1 (evaluate_nequip, float64): every step of kernels/nequip_steps.h one thread per node or edge, for layer forms
 *   the v2 kernels do not cover.
 * Included by mace_gpu.cu, which owns the upload, buffer, graph and GEMM helpers. */
#ifndef CGQ_NEQUIP_GPU_CUH
#define CGQ_NEQUIP_GPU_CUH

static cgq_status upload_nq_gate(cgq_gpu *g, cgq_nq_gate *q) {
    const size_t ns = (size_t)q->n_scalar, ng = (size_t)q->n_gated;
    CGQ_TRY(upload(g, &q->scalar_src, ns));
    CGQ_TRY(upload(g, &q->scalar_act, ns));
    CGQ_TRY(upload(g, &q->scalar_cst, ns));
    CGQ_TRY(upload(g, &q->gated_src, ng));
    CGQ_TRY(upload(g, &q->gated_gate, ng));
    CGQ_TRY(upload(g, &q->gate_act, ng));
    CGQ_TRY(upload(g, &q->gate_cst, ng));
    return upload(g, &q->gated_factor, ng);
}

/* A device copy of the NequIP model (g->dev_nequip) and of the model struct pointing at it (g->dev_model). */
static cgq_status upload_nequip(cgq_gpu *g, const cgq_model *hm) {
    cgq_nequip nq = *hm->nequip; /* shallow copy: pointer fields are replaced by device copies */
    const size_t T = (size_t)nq.n_types;
    CGQ_TRY(upload(g, &nq.embed, T * nq.emb_dim));
    CGQ_TRY(upload(g, &nq.bessel_weights, (size_t)nq.n_bessel));
    CGQ_TRY(upload(g, &nq.rmax_recip, T * T));
    CGQ_TRY(upload(g, &nq.scales, T));
    CGQ_TRY(upload(g, &nq.shifts, T));
    CGQ_TRY(upload(g, &nq.zbl_z, nq.zbl ? T : 0));
    for (int t = 0; t < nq.n_layers; t++) {
        cgq_nq_layer *ly = &nq.layers[t];
        CGQ_TRY(upload(g, &ly->norm_const, T));
        CGQ_TRY(upload_linear(g, &ly->linear_1));
        CGQ_TRY(upload_linear(g, &ly->linear_2));
        CGQ_TRY(upload_tp(g, &ly->tp));
        if (ly->use_sc) CGQ_TRY(upload_tp(g, &ly->sc));
        CGQ_TRY(upload_mlp(g, &ly->edge_mlp));
        CGQ_TRY(upload_nq_gate(g, &ly->gate));
    }
    CGQ_TRY(upload_mlp(g, &nq.readout));
    g->nq_shadow = nq;
    cgq_nequip *dnq = &nq;
    CGQ_TRY(upload(g, &dnq, 1));
    g->dev_nequip = dnq;
    cgq_model m = *hm; /* the steps read lmax_sh and nequip from it */
    m.nequip = dnq;
    cgq_model *dm = &m;
    CGQ_TRY(upload(g, &dm, 1));
    g->dev_model = dm;
    return CGQ_STATUS_OK;
}

enum { NQ_CONV, NQ_ENERGY, NQ_RO_BWD, NQ_NODE_BWD, NQ_EDGE_BWD, NQ_SEND_BWD, NQ_UP_BWD };
enum { NQ_GATE_SCALAR, NQ_GATE_SOURCE, NQ_GATE_GATE }; /* a term of the gate's reverse (build_gate_plan) */

/* NY: the SH width as a constant (sh_lmax) */
template <int NY>
__global__ void k_nq_edge(nq_ctx c) {
    constexpr int LMAX = sh_lmax<NY>();
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < c.E; e += (int64_t)gridDim.x * blockDim.x)
        nq_step_edge_sh(&c, e, LMAX);
}
static void nq_edges(const nq_ctx &c) {
    if (!c.E) return;
    const unsigned blocks = blocks_for(c.E);
    switch (c.nY) {
        case 1:
            k_nq_edge<1><<<blocks, CGQ_GPU_THREADS>>>(c);
            break;
        case 4:
            k_nq_edge<4><<<blocks, CGQ_GPU_THREADS>>>(c);
            break;
        case 9:
            k_nq_edge<9><<<blocks, CGQ_GPU_THREADS>>>(c);
            break;
        default:
            k_nq_edge<16><<<blocks, CGQ_GPU_THREADS>>>(c);
            break;
    }
}

__global__ void k_nq_up(nq_ctx c, int t, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        nq_step_up(&c, t, i);
}

/* node_out[i] = receiver i's ZBL energy, one warp per receiver (CGQ_WARP threads per node), for nq_step_energy */
__global__ void k_nq_zbl_rows(nq_ctx c) {
    const int64_t warps = (int64_t)gridDim.x * blockDim.x / CGQ_WARP;
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CGQ_WARP; i < c.N; i += warps) {
        const double z =
            warp_ordered_sum(c.row_ptr[i], c.row_ptr[i + 1], [&](int64_t e) { return nq_zbl_one(&c, i, e, NULL); });
        if (threadIdx.x % CGQ_WARP == 0) c.node_out[i] = z;
    }
}

/* the ZBL part of dE/du, one thread per edge */
__global__ void k_nq_zbl_bwd(nq_ctx c) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < c.E; e += (int64_t)gridDim.x * blockDim.x)
        nq_step_zbl_backward_edge(&c, c.erecv[e], e);
}

/* steps that need per-item scratch: thread tid owns pool + tid * per_thread */
__global__ void k_nq_step(nq_ctx c, int kind, int t, int64_t n, double *pool, size_t per_thread) {
    const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    double *scr = pool + (size_t)tid * per_thread;
    for (int64_t i = tid; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        switch (kind) {
        case NQ_CONV: nq_step_conv(&c, t, i, scr); break;
        case NQ_ENERGY: nq_step_energy(&c, i, scr); break;
        case NQ_RO_BWD: nq_step_readout_backward(&c, i, scr); break;
        case NQ_NODE_BWD: nq_step_node_backward(&c, t, i, scr); break;
        case NQ_EDGE_BWD: nq_step_edge_backward(&c, t, i, scr); break;
        case NQ_SEND_BWD: nq_step_sender_backward(&c, t, i, scr); break;
        case NQ_UP_BWD: nq_step_up_backward(&c, t, i, scr); break;
        }
    }
}

/* Same contract as cgq_nequip_cpu_evaluate; the graph and its sender index come from the host. */
static cgq_status evaluate_nequip(cgq_gpu *g, const cgq_graph *gr, const cgq_exchange *xc, double *energy,
                                  double *node_energy, double *edge_grad) {
    const cgq_model *hm = g->host_model;
    const cgq_nequip *nq = hm->nequip;
    nq_ctx c;
    memset(&c, 0, sizeof c);
    c.m = hm, c.nq = nq; /* the layout reads the host model; the kernels get the device copies below */
    c.N = gr->n_local, c.NA = gr->n_nodes, c.E = gr->n_edges;
    c.nY = (hm->lmax_sh + 1) * (hm->lmax_sh + 1), c.nb = nq->n_bessel;
    const int64_t N = c.N, NA = c.NA, E = c.E;
    const int L = nq->n_layers, want_grad = edge_grad != nullptr;
    /* keep the edge MLP outputs from the forward pass when they fit a third of the free memory */
    size_t free_b = 0, total_b = 0, cache = 0;
    CGQ_CHECK_GPU(cudaMemGetInfo(&free_b, &total_b));
    free_b += sizeof(double) * g->arena_cap;
    for (int t = 0; t < L; t++) cache += sizeof(double) * (size_t)E * nq->layers[t].tp.weight_numel;
    const int cache_edges = want_grad && cache <= free_b / 3;
    const size_t need = nq_layout(&c, nullptr, want_grad, cache_edges);
    CGQ_TRY(grow((void **)&g->arena, &g->arena_cap, sizeof(double) * (need + 1)));
    nq_layout(&c, g->arena, want_grad, cache_edges);
    const size_t per_thread = c.esz + c.nsz;
    CGQ_TRY(grow((void **)&g->scratch, &g->scratch_cap,
                 sizeof(double) * per_thread * scratch_threads(std::max(std::max(E, N), NA))));
    CGQ_TRY(grow((void **)&g->edge_grad, &g->edge_grad_cap, sizeof(double) * (3 * E + 1)));
    mace_ctx gc; /* the shared graph upload: species, rows, senders, vectors, sender index, receivers */
    memset(&gc, 0, sizeof gc);
    gc.N = N, gc.NA = NA, gc.E = E;
    CGQ_TRY(upload_graph(g, gr, &gc));
    c.species = gc.species, c.row_ptr = gc.row_ptr, c.sender = gc.sender, c.vec = gc.vec;
    c.srow = gc.srow, c.sedge = gc.sedge, c.erecv = gc.erecv;
    c.m = g->dev_model, c.nq = g->dev_nequip;
    c.edge_grad = want_grad ? g->edge_grad : nullptr;
    const int TH = CGQ_GPU_THREADS;

    nq_edges(c);
    CGQ_LAUNCH_CHECK();
    for (int t = 0; t < L; t++) {
        /* layer 0 reads the type embedding, known for ghosts too; later layers get ghost rows by exchange */
        const int64_t n_up = t == 0 ? NA : N;
        if (n_up) k_nq_up<<<blocks_for(n_up), TH>>>(c, t, n_up);
        CGQ_LAUNCH_CHECK();
        if (t > 0 && xc) CGQ_TRY(exchange_rows<double>(g, c.h[t], nullptr, N, NA, nq_layer_in_dim(nq, t), xc, false));
        if (N) k_nq_step<<<blocks_for(N), TH>>>(c, NQ_CONV, t, N, g->scratch, per_thread);
        CGQ_LAUNCH_CHECK();
    }
    if (nq->zbl && N) k_nq_zbl_rows<<<blocks_for(N * CGQ_WARP), TH>>>(c);
    c.zbl_rows = nq->zbl != 0;
    if (N) k_nq_step<<<blocks_for(N), TH>>>(c, NQ_ENERGY, 0, N, g->scratch, per_thread);
    CGQ_LAUNCH_CHECK();
    CGQ_TRY(collect_energy(g, c.node_out, N, energy, node_energy));
    if (!want_grad) return CGQ_STATUS_OK;

    if (E) CGQ_CHECK_GPU(cudaMemset(c.edge_grad, 0, sizeof(double) * 3 * E));
    if (N) CGQ_CHECK_GPU(cudaMemset(c.gx, 0, sizeof(double) * N * c.maxdim));
    if (N) k_nq_step<<<blocks_for(N), TH>>>(c, NQ_RO_BWD, 0, N, g->scratch, per_thread);
    if (nq->zbl && E) k_nq_zbl_bwd<<<blocks_for(E), TH>>>(c);
    CGQ_LAUNCH_CHECK();
    for (int t = L - 1; t >= 0; t--) {
        if (N) k_nq_step<<<blocks_for(N), TH>>>(c, NQ_NODE_BWD, t, N, g->scratch, per_thread);
        if (N) k_nq_step<<<blocks_for(N), TH>>>(c, NQ_EDGE_BWD, t, N, g->scratch, per_thread);
        CGQ_LAUNCH_CHECK();
        if (t == 0) break; /* the type embedding does not depend on positions */
        if (NA) k_nq_step<<<blocks_for(NA), TH>>>(c, NQ_SEND_BWD, t, NA, g->scratch, per_thread);
        CGQ_LAUNCH_CHECK();
        /* gradients that landed on ghost senders belong to their owners */
        if (xc) CGQ_TRY(exchange_rows<double>(g, c.gh, nullptr, N, NA, nq_layer_in_dim(nq, t), xc, true));
        if (N) k_nq_step<<<blocks_for(N), TH>>>(c, NQ_UP_BWD, t, N, g->scratch, per_thread);
        CGQ_LAUNCH_CHECK();
        double *swap = c.gx;
        c.gx = c.gx_prev;
        c.gx_prev = swap;
    }
    if (E) CGQ_CHECK_GPU(cudaMemcpy(edge_grad, c.edge_grad, sizeof(double) * 3 * E, cudaMemcpyDeviceToHost));
    return CGQ_STATUS_OK;
}

/* ---- v2 ------------------------------------------------------------------------------------------------- */
/* A device copy of `count` host weights in the working precision (float copies; double ones exist as dev). */
static cgq_status nq_weights(cgq_gpu *g, const double *host, const double *dev, size_t count, const double **out) {
    if (!g->fp32) {
        *out = dev;
        return CGQ_STATUS_OK;
    }
    double *d = nullptr;
    CGQ_TRY(upload_as_float(g, &d, host, count));
    *out = d;
    return CGQ_STATUS_OK;
}

static size_t linear_numel(const cgq_linear *l) {
    size_t n = 0;
    for (int k = 0; k < l->n_ins; k++) n += (size_t)l->in.b[l->ins_in[k]].mul * l->out.b[l->ins_out[k]].mul;
    return n;
}

/* The self-connection FCTP(x, embed[type]) with the type embedding folded into its weights: for the fixed second
 * input e_s of type s, W'[u, s, w] = sum_v W[u, v, w] e_s[v], a tensor product with a one-hot second input (the
 * skip GEMM's form). False where the form differs (the v1 steps then run the model). */
static bool fold_self_connection(const cgq_nequip *nq, const cgq_tp *sc, nq_node_plan *np) {
    if (sc->in2.n != 1 || sc->in2.b[0].l != 0 || sc->in2.dim != nq->emb_dim || sc->external_weights || !sc->weight)
        return false;
    const int T = nq->n_types, V = sc->in2.b[0].mul;
    np->sc = *sc;
    np->sc.in2.b[0].mul = T, np->sc.in2.dim = T;
    np->sc_offset.assign((size_t)sc->n_ins, 0);
    np->sc_weight.clear();
    for (int k = 0; k < sc->n_ins; k++) {
        if (sc->mode[k] != CGQ_TP_UVW || !sc->has_weight[k]) return false;
        const int m1 = sc->in1.b[sc->i1[k]].mul, mo = sc->out.b[sc->io[k]].mul;
        const double *W = sc->weight + sc->w_offset[k];
        np->sc_offset[(size_t)k] = (int64_t)np->sc_weight.size();
        for (int u = 0; u < m1; u++)
            for (int t = 0; t < T; t++)
                for (int w = 0; w < mo; w++) {
                    double acc = 0.0;
                    for (int v = 0; v < V; v++) acc += W[((size_t)u * V + v) * mo + w] * nq->embed[(size_t)t * V + v];
                    np->sc_weight.push_back(acc);
                }
    }
    np->sc.weight = np->sc_weight.data(), np->sc.w_offset = np->sc_offset.data();
    np->sc.weight_numel = (int64_t)np->sc_weight.size();
    return skip_gemm_ok(&np->sc);
}

/* The gate's reverse per input element (k_nq_gate_bwd): element k's terms as codes 4 q + kind, in
 * nq_gate_backward's order (the scalar outputs, then each gated output's source and gate), rows from start[k] */
static cgq_status build_gate_plan(cgq_gpu *g, const cgq_nq_gate *q, nq_node_plan *np) {
    std::vector<std::vector<int32_t>> terms((size_t)q->dim_in);
    for (int k = 0; k < q->n_scalar; k++) terms[(size_t)q->scalar_src[k]].push_back(4 * k + NQ_GATE_SCALAR);
    for (int j = 0; j < q->n_gated; j++) {
        terms[(size_t)q->gated_src[j]].push_back(4 * j + NQ_GATE_SOURCE);
        terms[(size_t)q->gated_gate[j]].push_back(4 * j + NQ_GATE_GATE);
    }
    std::vector<int32_t> start(1, 0), code;
    for (const std::vector<int32_t> &t : terms) {
        code.insert(code.end(), t.begin(), t.end());
        start.push_back((int32_t)code.size());
    }
    int32_t *ds = start.data(), *dc = code.data();
    CGQ_TRY(upload(g, &ds, start.size()));
    CGQ_TRY(upload(g, &dc, code.size()));
    np->gate_start = ds, np->gate_code = dc;
    return CGQ_STATUS_OK;
}

/* The layer convolutions as conv.cuh plans (one per group of input blocks), the edge MLPs as GEMM views (nequip's
 * weights carry alpha: the products are unscaled) and the node maps as GEMMs. g->nq_v2 = 1 when every layer has
 * the covered form. */
static cgq_status build_nequip_v2(cgq_gpu *g) {
    const cgq_model *hm = g->host_model;
    const cgq_nequip *nq = hm->nequip;
    bool ok = nq->n_bessel <= 64 && hm->lmax_sh <= 3;
    for (int t = 0; t < nq->n_layers && ok; t++) {
        const cgq_nq_layer *ly = &nq->layers[t], *dly = &g->nq_shadow.layers[t];
        int n = 0;
        conv_groups(&ly->tp, &n);
        ok = n <= CONV_MAX_GROUPS && ly->edge_mlp.n_layers <= CGQ_MAX_FC_LAYERS;
        for (int q = 0; q < n && ok; q++) {
            CGQ_TRY(build_conv_group(g, &ly->tp, hm->lmax_sh, q, 1, &g->nq_plans[t][q]));
            ok = g->nq_plans[t][q].ok;
        }
        g->nq_groups[t] = n;
        const cgq_nq_mlp &hf = ly->edge_mlp, &df = dly->edge_mlp;
        cgq_fcnet &v = g->nq_mlp[t], &vf = g->nq_mlp_f[t];
        memset(&v, 0, sizeof v);
        v.n_layers = hf.n_layers, v.act = hf.act, v.act_cst = hf.act_cst;
        memcpy(v.h, hf.h, sizeof v.h);
        vf = v;
        for (int k = 0; k < hf.n_layers && ok; k++) {
            v.W[k] = df.W[k];
            if (g->fp32) CGQ_TRY(upload_as_float(g, &vf.W[k], hf.W[k], (size_t)hf.h[k] * hf.h[k + 1]));
        }
        nq_node_plan &np = g->nq_node[t];
        ok = ok && lin_gemm_ok(&ly->linear_1) && lin_gemm_ok(&ly->linear_2);
        ok = ok && (!ly->use_sc || fold_self_connection(nq, &ly->sc, &np));
        if (!ok) break;
        CGQ_TRY(nq_weights(g, ly->linear_1.weight, dly->linear_1.weight, linear_numel(&ly->linear_1), &np.w1));
        CGQ_TRY(nq_weights(g, ly->linear_2.weight, dly->linear_2.weight, linear_numel(&ly->linear_2), &np.w2));
        CGQ_TRY(build_gate_plan(g, &ly->gate, &np));
        if (ly->use_sc) {
            CGQ_TRY(build_skip_plan(g, &np.sc, &np.skip));
            double *d = np.sc_weight.data();
            if (g->fp32)
                CGQ_TRY(upload_as_float(g, &d, np.sc_weight.data(), np.sc_weight.size()));
            else
                CGQ_TRY(upload(g, &d, np.sc_weight.size()));
            np.wsc = d;
        }
    }
    g->nq_v2 = ok;
    return CGQ_STATUS_OK;
}

/* The edges' active flags (x < 1 for the type pair) as weight multipliers for the conv kernels. */
template <class T>
__global__ void k_nq_mask(int64_t E, const char *active, T *mask) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < E; e += (int64_t)gridDim.x * blockDim.x)
        mask[e] = active[e] ? (T)1 : (T)0;
}

/* dE/dvec of the active edges [e0, e1) from dE/d(embedding) gef (chunk rows) or, with the radial tables, gx =
 * dE/d(r / r_max) (chunk rows), and dE/dY gY, in double. */
template <class T, int NY>
__global__ void k_nq_edge_tail(nq_ctx c, int64_t e0, int64_t e1, const T *gef, const double *gx, const T *gY) {
    constexpr int LMAX = sh_lmax<NY>();
    for (int64_t e = e0 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < e1;
         e += (int64_t)gridDim.x * blockDim.x) {
        if (!c.active[e]) continue;
        double ge[64], gy[NY], ef[64], def[64];
        if (gef)
            for (int n = 0; n < c.nb; n++) ge[n] = (double)gef[(e - e0) * c.nb + n];
#pragma unroll
        for (int j = 0; j < NY; j++) gy[j] = (double)gY[e * NY + j];
        nq_edge_tail_sh(&c, c.erecv[e], e, gef ? ge : nullptr, gx ? gx[e - e0] : 0.0, gy, ef, def, LMAX);
    }
}
/* k_nq_edge_tail for the model's SH width */
template <class T>
static void nq_edge_tails(const nq_ctx &c, int64_t e0, int64_t e1, const T *gef, const double *gx, const T *gY) {
    if (e1 <= e0) return;
    const unsigned blocks = blocks_for(e1 - e0);
    switch (c.nY) {
        case 1:
            k_nq_edge_tail<T, 1><<<blocks, CGQ_GPU_THREADS>>>(c, e0, e1, gef, gx, gY);
            break;
        case 4:
            k_nq_edge_tail<T, 4><<<blocks, CGQ_GPU_THREADS>>>(c, e0, e1, gef, gx, gY);
            break;
        case 9:
            k_nq_edge_tail<T, 9><<<blocks, CGQ_GPU_THREADS>>>(c, e0, e1, gef, gx, gY);
            break;
        default:
            k_nq_edge_tail<T, 16><<<blocks, CGQ_GPU_THREADS>>>(c, e0, e1, gef, gx, gY);
            break;
    }
}

/* out[i] = embed[species[i]] (the first layer's input), in T */
template <class T>
__global__ void k_nq_embed_rows(int64_t n, int dim, const int32_t *species, const double *embed, T *out) {
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < n * dim; q += (int64_t)gridDim.x * blockDim.x)
        out[q] = (T)embed[(int64_t)species[q / dim] * dim + q % dim];
}

/* x[i, :dim] *= scale[species[i]] (row stride ld): nequip's 1/sqrt(avg_num_neighbors) of the node's type */
template <class T>
__global__ void k_nq_scale_rows(int64_t n, int dim, int64_t ld, const int32_t *species, const double *scale, T *x) {
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < n * dim;
         q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = q / dim;
        x[i * ld + q % dim] *= (T)scale[species[i]];
    }
}

/* dst[i, :dim] = src[i, :dim] (src NULL: 0), row stride ld */
template <class T>
__global__ void k_nq_copy_rows(int64_t n, int dim, int64_t ld, const T *src, T *dst) {
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < n * dim;
         q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = q / dim, j = q % dim;
        dst[i * ld + j] = src ? src[i * ld + j] : (T)0;
    }
}

/* dst[i, :dim] += src[i, :dim], row stride ld */
template <class T>
__global__ void k_add_rows(int64_t n, int dim, int64_t ld, const T *src, T *dst) {
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < n * dim;
         q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = q / dim, j = q % dim;
        dst[i * ld + j] += src[i * ld + j];
    }
}

/* a + b rounded once, never fused with a product before it (the resnet's sum as nq_step_node forms it) */
__device__ inline float add_rn(float a, float b) {
    return __fadd_rn(a, b);
}
__device__ inline double add_rn(double a, double b) {
    return __dadd_rn(a, b);
}

/* xo = gate(pre) (+ xin, resnet), a block per node and a thread per output (nq_gate_forward's terms in T; a thread per
 * node took 34 us per layer for the water NequIP at 5,184 atoms, its nodes' chains on 41 of 132 SMs, session 50) */
template <class T>
__global__ void k_nq_gate_fwd(int64_t n, const cgq_nq_gate *gt, const T *pre, int ldp, T *xo, int ldo, const T *xin,
                              int ldx) {
    const int ns = gt->n_scalar, dO = gt->dim_out;
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const T *x = pre + i * ldp;
        for (int k = threadIdx.x; k < dO; k += blockDim.x) {
            T o;
            if (k < ns) {
                o = act_eval_t<T>((cgq_act)gt->scalar_act[k], gt->scalar_cst[k], x[gt->scalar_src[k]], nullptr);
            } else {
                const int j = k - ns;
                const T a = act_eval_t<T>((cgq_act)gt->gate_act[j], gt->gate_cst[j], x[gt->gated_gate[j]], nullptr);
                o = (T)gt->gated_factor[j] * x[gt->gated_src[j]] * a;
            }
            xo[i * ldo + k] = xin ? add_rn(xin[i * ldx + k], o) : o;
        }
    }
}

/* gpre = d<go, gate(pre)>/dpre, a block per node and a thread per input element k, which sums its terms (code[start[k]
 * .. start[k + 1]), nq_gate_plan) in nq_gate_backward's order (62 us per layer one thread per node, session 50) */
template <class T>
__global__ void k_nq_gate_bwd(int64_t n, const cgq_nq_gate *gt, const int32_t *start, const int32_t *code, const T *pre,
                              int ldp, const T *go, int ldg, T *gpre, int ldgp) {
    const int ns = gt->n_scalar, dI = gt->dim_in;
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const T *x = pre + i * ldp, *g = go + i * ldg;
        for (int k = threadIdx.x; k < dI; k += blockDim.x) {
            T s = 0;
            for (int c = start[k]; c < start[k + 1]; c++) {
                const int q = code[c] >> 2, kind = code[c] & 3;
                T d;
                if (kind == NQ_GATE_SCALAR) {
                    act_eval_t<T>((cgq_act)gt->scalar_act[q], gt->scalar_cst[q], x[k], &d);
                    s += g[q] * d;
                    continue;
                }
                const T a = act_eval_t<T>((cgq_act)gt->gate_act[q], gt->gate_cst[q], x[gt->gated_gate[q]], &d);
                const T o = g[ns + q] * (T)gt->gated_factor[q];
                if (kind == NQ_GATE_SOURCE)
                    s += o * a;
                else
                    s += o * x[gt->gated_src[q]] * d;
            }
            gpre[i * ldgp + k] = s;
        }
    }
}

/* v2 in working precision T; the graph from the host (gr: edge gradients out) or built on the device from positions
 * and the candidate pairs (pos: forces and virials out in nr). The double arrays of nq_layout hold the node side;
 * for T = float their T copies sit at the same element offsets of arena_f. */
template <class T>
static cgq_status evaluate_nequip_v2(cgq_gpu *g, const cgq_graph *gr, const double *pos, const cgq_exchange *xc,
                                     double *energy, double *node_energy, double *edge_grad, cgq_node_result *nr) {
    const bool f32 = sizeof(T) == sizeof(float);
    const cgq_model *hm = g->host_model;
    const cgq_nequip *nq = hm->nequip;
    phase_profiler prof;
    nq_ctx c;
    memset(&c, 0, sizeof c);
    c.m = hm, c.nq = nq; /* the layout reads the host model; the kernels get the device copies below */
    const int64_t *h_row = nullptr;
    CGQ_TRY(step_graph(g, gr, pos, &h_row, &c.N, &c.NA, &c.E));
    c.nY = (hm->lmax_sh + 1) * (hm->lmax_sh + 1), c.nb = nq->n_bessel;
    const int64_t N = c.N, NA = c.NA, E = c.E;
    const int L = nq->n_layers, want_grad = !gr || edge_grad != nullptr, nb = c.nb, nY = c.nY;
    prof.mark("graph_build");
    const size_t need = nq_layout(&c, nullptr, want_grad, 0);
    CGQ_TRY(grow((void **)&g->arena, &g->arena_cap, sizeof(double) * (need + 1)));
    nq_layout(&c, g->arena, want_grad, 0);
    if (f32) CGQ_TRY(grow(&g->arena_f, &g->arena_f_cap, sizeof(T) * (need + 1)));
    auto R = [&](double *q) { return arena_t<T>(g, q); };
    const size_t per_thread = c.esz + c.nsz;
    CGQ_TRY(
        grow((void **)&g->scratch, &g->scratch_cap, sizeof(double) * per_thread * scratch_threads(std::max(N, NA))));
    CGQ_TRY(grow((void **)&g->edge_grad, &g->edge_grad_cap, sizeof(double) * (3 * E + 1)));
    mace_ctx gc; /* the graph: species, rows, senders, vectors, sender index, receivers */
    memset(&gc, 0, sizeof gc);
    gc.N = N, gc.NA = NA, gc.E = E;
    CGQ_TRY(gr ? upload_graph(g, gr, &gc) : pairs_fill(g, &gc));
    gc.edge_grad = g->edge_grad;
    c.species = gc.species, c.row_ptr = gc.row_ptr, c.sender = gc.sender, c.vec = gc.vec;
    c.srow = gc.srow, c.sedge = gc.sedge, c.erecv = gc.erecv;
    c.m = g->dev_model, c.nq = g->dev_nequip;
    c.edge_grad = g->edge_grad;
    prof.mark("graph_upload");

    /* per-edge buffers of one chunk of receivers: MLP outputs and activations, and in reverse their gradients (none
     * for the weights of layers with weight tables, conv_weights) */
    const bool table = f32 && g->radial[0].n_int > 0; /* the edge MLPs from their tables (radial_spline.cuh) */
    bool wtab[CGQ_MAX_LAYERS];
    mlp_store<T> ms; /* the edge MLP's outputs and activations */
    int64_t wn = 1, cs = 1, maxw = 1, din_max = 1;
    for (int t = 0; t < L; t++) {
        const cgq_fcnet &fc = g->nq_mlp[t];
        wtab[t] = f32 && g->wtab[t].knots;
        ms.wn[t] = wtab[t] ? 0 : nq->layers[t].tp.weight_numel, ms.cs[t] = table ? 0 : cgq_fcnet_cache_size(&fc);
        wn = std::max<int64_t>(wn, ms.wn[t]);
        cs = std::max<int64_t>(cs, cgq_fcnet_cache_size(&fc));
        maxw = std::max<int64_t>(maxw, mlp_hidden_width(fc));
        din_max = std::max<int64_t>(din_max, nq_layer_in_dim(nq, t));
    }
    const int64_t trows = table ? radial_table_rows<T>(g->radial, L) : 0; /* per chunk, kept outputs or not */
    size_t free_b = 0;
    CGQ_TRY(free_gpu_bytes(g, E, &free_b));
    CGQ_TRY(mlp_keep<T>(g, L, E, want_grad, free_b, &ms));
    const int64_t mlp_rows = (ms.keep ? 0 : table ? wn : wn + cs) + trows;
    const int64_t per_edge = mlp_rows + (want_grad ? wn + 2 * maxw + nb + din_max : 0);
    std::vector<edge_chunk> chunks;
    int64_t chunk_edges = 0;
    CGQ_TRY(plan_chunks(g, h_row, N, E, sizeof(T), per_edge, free_b, &chunks, &chunk_edges));
    v2_buffers &b = g->vb;
    CGQ_TRY(grow_d(&b.edge_in, &b.caps[10], (size_t)E * (f32 ? nY + nb + 1 : 1)));
    CGQ_TRY(plan_mlp_store<T>(g, L, E, chunk_edges, want_grad, table, trows, &ms));
    if (want_grad) CGQ_TRY(grow_reverse_buffers<T>(g, chunk_edges, E, wn, maxw, nb, nY, din_max));
    T *gw = reinterpret_cast<T *>(b.gw);
    T *gtmp = reinterpret_cast<T *>(b.gtmp), *gef = reinterpret_cast<T *>(b.gef), *gY = reinterpret_cast<T *>(b.gY);
    T *gcut = reinterpret_cast<T *>(b.gcut), *gx1e = reinterpret_cast<T *>(b.gx1e);
    T *mask = reinterpret_cast<T *>(b.edge_in);
    CGQ_TRY(grow_d(&b.node_tmp, &b.caps[8], (size_t)N * c.maxdim + (size_t)NA * nq->emb_dim));
    T *node_tmp = reinterpret_cast<T *>(b.node_tmp), *x0 = node_tmp + N * c.maxdim; /* dE/dpre; layer 0's input */
    const T *Y = reinterpret_cast<const T *>(c.Y), *ef = reinterpret_cast<const T *>(c.ef);
    const int TH = CGQ_GPU_THREADS;
    /* the chunk's edge-MLP outputs w (layer t), from the table or the MLP; act: the MLP's activations */
    auto radial_forward = [&](int t, const edge_chunk &ch, T *act, T *w) {
        const cgq_fcnet &fc = f32 ? g->nq_mlp_f[t] : g->nq_mlp[t];
        T *const *W = reinterpret_cast<T *const *>(fc.W);
        const int64_t ne = ch.e1 - ch.e0, wnt = nq->layers[t].tp.weight_numel;
        if (table)
            return mlp_check(radial_table_forward<T>(g->radial[t], fc, W[fc.n_layers - 1], c.xn, ch.e0, ne,
                                                     reinterpret_cast<T *>(b.act), w, wnt, g->blas));
        return mlp_check(mlp_forward<T>(fc, W, ne, ef + ch.e0 * nb, nb, act, w, wnt, g->blas, 0, true));
    };
    /* where layer t's convolution takes the chunk's weights from: its table (at x = r / r_max(pair)), or w */
    auto edge_weights = [&](int t, const edge_chunk &ch, T *w) {
        conv_weights<T> cw = conv_rows<T>(w, ch.e0);
        if (wtab[t]) cw.tab = g->wtab[t], cw.r = c.xn;
        return cw;
    };
    prof.mark("buffers");

    nq_edges(c);
    if (E) k_nq_mask<T><<<blocks_for(E), TH>>>(E, c.active, mask);
    if (f32 && E) {
        T *q = mask + E;
        k_convert<double, T><<<blocks_for(E * nY), TH>>>(E * nY, c.Y, q);
        k_convert<double, T><<<blocks_for(E * nb), TH>>>(E * nb, c.ef, q + E * nY);
        Y = q, ef = q + E * nY;
    }
    if (NA)
        k_nq_embed_rows<T><<<blocks_for(NA * nq->emb_dim), TH>>>(NA, nq->emb_dim, c.species, g->nq_shadow.embed, x0);
    CGQ_LAUNCH_CHECK();
    prof.mark("geometry");
    for (int t = 0; t < L; t++) {
        const cgq_nq_layer *ly = &nq->layers[t];
        const nq_node_plan &np = g->nq_node[t];
        const int din = nq_layer_in_dim(nq, t), dM = ly->tp.out.dim, dG = ly->gate.dim_in, dO = ly->gate.dim_out;
        const T *xin = t ? R(c.xo[t - 1]) : x0;
        T *h = R(c.h[t]), *M = R(c.M[t]), *pre = R(c.pre[t]);
        /* h = norm(type) linear_1(x); layer 0 reads the type embedding, known for ghosts too; later layers get
         * their ghost rows by exchange */
        const int64_t n_up = t == 0 ? NA : N;
        lin_gemm_fwd<T>(&ly->linear_1, reinterpret_cast<const T *>(np.w1), n_up, xin, din, h, din, (T)1, nullptr, 0);
        if (n_up)
            k_nq_scale_rows<T>
                <<<blocks_for(n_up * din), TH>>>(n_up, din, din, c.species, g->nq_shadow.layers[t].norm_const, h);
        CGQ_LAUNCH_CHECK();
        if (t > 0 && xc) CGQ_TRY(exchange_rows<T>(g, h, c.h[t], N, NA, din, xc, false));
        prof.mark("node_fwd");
        for (const edge_chunk &ch : chunks) {
            if (!wtab[t]) CGQ_TRY(radial_forward(t, ch, ms.act_at(t, ch), ms.w_at(t, ch)));
            prof.mark("mlp_fwd");
            for (int q = 0; q < g->nq_groups[t]; q++) {
                const conv_plan &p = g->nq_plans[t][q];
                conv_fwd_kernel<T>(p, wtab[t], wtab[t] && g->wtab[t].ad)<<<(unsigned)(ch.i1 - ch.i0), p.threads, conv_fwd_smem(p, sizeof(T))>>>(
                    p, ch.i0, c.row_ptr, c.sender, Y, h, edge_weights(t, ch, ms.w_at(t, ch)), mask, M);
            }
            CGQ_LAUNCH_CHECK();
            prof.mark("conv_fwd");
        }
        if (!N) continue;
        /* pre = linear_2(M) + self-connection(x, type); xo = gate(pre) (+ x) */
        if (ly->use_sc)
            skip_gemm_fwd<T>(&np.sc, np.skip, reinterpret_cast<const T *>(np.wsc), N, c.species, xin, din, pre, dG);
        lin_gemm_fwd<T>(&ly->linear_2, reinterpret_cast<const T *>(np.w2), N, M, dM, pre, dG, (T)1,
                        ly->use_sc ? pre : nullptr, dG);
        k_nq_gate_fwd<T><<<row_blocks(N), row_threads(dO)>>>(N, &g->dev_nequip->layers[t].gate, pre, dG, R(c.xo[t]), dO,
                                                             ly->resnet ? xin : nullptr, din);
        CGQ_LAUNCH_CHECK();
        prof.mark("node_fwd");
    }
    const int dO_last = nq->layers[L - 1].gate.dim_out;
    if (f32 && N) k_convert<T, double><<<blocks_for(N * dO_last), TH>>>(N * dO_last, R(c.xo[L - 1]), c.xo[L - 1]);
    if (nq->zbl && N) k_nq_zbl_rows<<<blocks_for(N * CGQ_WARP), TH>>>(c);
    c.zbl_rows = nq->zbl != 0;
    if (N) k_nq_step<<<blocks_for(N), TH>>>(c, NQ_ENERGY, 0, N, g->scratch, per_thread); /* readout, in double */
    CGQ_LAUNCH_CHECK();
    CGQ_TRY(energy_download(g, c.node_out, N));
    prof.mark("energy");
    if (!want_grad) return energy_finish(g, N, energy, node_energy);

    const int ld = c.maxdim; /* row stride of gx, gx_prev */
    if (E) CGQ_CHECK_GPU(cudaMemset(c.edge_grad, 0, sizeof(double) * 3 * E));
    if (N) CGQ_CHECK_GPU(cudaMemset(c.gx, 0, sizeof(double) * N * ld));
    if (N) k_nq_step<<<blocks_for(N), TH>>>(c, NQ_RO_BWD, 0, N, g->scratch, per_thread);
    if (nq->zbl && E) k_nq_zbl_bwd<<<blocks_for(E), TH>>>(c);
    T *gx = R(c.gx), *gx_prev = R(c.gx_prev), *gpre = node_tmp, *gM = R(c.gM), *gh = R(c.gh);
    if (f32 && N) k_convert<double, T><<<blocks_for(N * ld), TH>>>(N * ld, c.gx, gx);
    CGQ_LAUNCH_CHECK();
    for (int t = L - 1; t >= 0; t--) {
        const cgq_nq_layer *ly = &nq->layers[t];
        const nq_node_plan &np = g->nq_node[t];
        const int din = nq_layer_in_dim(nq, t), dM = ly->tp.out.dim, dG = ly->gate.dim_in;
        const int64_t wnt = ly->tp.weight_numel;
        const cgq_fcnet &fc = f32 ? g->nq_mlp_f[t] : g->nq_mlp[t];
        T *const *W = reinterpret_cast<T *const *>(fc.W);
        T *h = R(c.h[t]), *pre = R(c.pre[t]);
        if (N) {
            /* through the gate, linear_2 and the self-connection; dE/dx of the layer input starts as the resnet's */
            k_nq_gate_bwd<T><<<row_blocks(N), row_threads(dG)>>>(N, &g->dev_nequip->layers[t].gate, np.gate_start,
                                                                 np.gate_code, pre, dG, gx, ld, gpre, dG);
            lin_gemm_bwd<T>(&ly->linear_2, reinterpret_cast<const T *>(np.w2), N, gpre, dG, gM, dM, (T)1, 0);
            if (ly->use_sc) {
                skip_gemm_bwd<T>(&np.sc, np.skip, reinterpret_cast<const T *>(np.wsc), N, c.species, gpre, dG, gx_prev,
                                 ld);
                if (ly->resnet) k_add_rows<T><<<blocks_for(N * din), TH>>>(N, din, ld, gx, gx_prev);
            } else {
                k_nq_copy_rows<T><<<blocks_for(N * din), TH>>>(N, din, ld, ly->resnet ? gx : nullptr, gx_prev);
            }
            CGQ_LAUNCH_CHECK();
        }
        prof.mark("node_bwd");
        for (const edge_chunk &ch : chunks) {
            const int64_t ne = ch.e1 - ch.e0;
            T *w = ms.w_at(t, ch), *act = ms.act_at(t, ch);
            if (!ms.keep && !wtab[t]) CGQ_TRY(radial_forward(t, ch, act, w));
            prof.mark("mlp_fwd");
            for (int q = 0; q < g->nq_groups[t]; q++) { /* the groups' dE/dY (and dE/dx) add up in group order */
                const conv_plan &p = g->nq_plans[t][q];
                conv_bwd_launch<T>(p, wtab[t], ch.i1 - ch.i0, ch.i0, c.row_ptr, c.sender, Y, h, edge_weights(t, ch, w),
                                   mask, gM, gw, gY, gcut, gx1e, b.gr, q > 0);
            }
            CGQ_LAUNCH_CHECK();
            prof.mark("conv_bwd");
            if (table && !wtab[t]) /* (with a weight table, dE/dr came with the reverse) */
                CGQ_TRY(mlp_check(radial_table_backward<T>(g->radial[t], fc, W[fc.n_layers - 1], c.xn, ch.e0, ne, gw,
                                                           gtmp, b.gr, g->blas)));
            else if (!table)
                CGQ_TRY(mlp_check(mlp_backward<T>(fc, W, ne, act, gw, wnt, gef, nb, gtmp, g->blas, 0, true)));
            prof.mark("mlp_bwd");
            nq_edge_tails<T>(c, ch.e0, ch.e1, table ? nullptr : gef, table ? b.gr : nullptr, gY);
            if (t > 0) /* the chunk's dE/dh rows into their senders' sums (layer 0's input is the embedding) */
                CGQ_TRY(sender_sums<T>(g, NA, din, c.srow, c.sedge, c.sender, ch, &ch == &chunks[0], chunks.size() == 1,
                                       gx1e, gh));
            CGQ_LAUNCH_CHECK();
            prof.mark("edge_tail");
        }
        if (t == 0) break; /* the type embedding does not depend on positions */
        CGQ_TRY(finish_sender_grads<T>(g, chunks.empty(), N, NA, din, gh, c.gh, xc));
        if (N) {
            k_nq_scale_rows<T>
                <<<blocks_for(N * din), TH>>>(N, din, din, c.species, g->nq_shadow.layers[t].norm_const, gh);
            lin_gemm_bwd<T>(&ly->linear_1, reinterpret_cast<const T *>(np.w1), N, gh, din, gx_prev, ld, (T)1, 1);
        }
        CGQ_LAUNCH_CHECK();
        prof.mark("node_bwd");
        std::swap(gx, gx_prev);
    }
    CGQ_TRY(deliver_gradients(g, gr, gc, nr, edge_grad));
    prof.mark("download");
    return energy_finish(g, N, energy, node_energy);
}

#endif
