/* nequip_gpu.cuh: NequIP models on the GPU, float64: the steps of kernels/nequip_steps.h, one thread per node or
 * edge, with the reductions owned as on the CPU (receiver rows, sender rows): deterministic, no atomics. Included
 * by mace_gpu.cu, which owns the upload, buffer and graph helpers. */
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

__global__ void k_nq_edge(nq_ctx c) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < c.E; e += (int64_t)gridDim.x * blockDim.x)
        nq_step_edge(&c, e);
}

__global__ void k_nq_up(nq_ctx c, int t, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        nq_step_up(&c, t, i);
}

__global__ void k_nq_zbl_bwd(nq_ctx c) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < c.N; i += (int64_t)gridDim.x * blockDim.x)
        nq_step_zbl_backward(&c, i);
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

    if (E) k_nq_edge<<<blocks_for(E), TH>>>(c);
    CGQ_LAUNCH_CHECK();
    for (int t = 0; t < L; t++) {
        /* layer 0 reads the type embedding, known for ghosts too; later layers get ghost rows by exchange */
        const int64_t n_up = t == 0 ? NA : N;
        if (n_up) k_nq_up<<<blocks_for(n_up), TH>>>(c, t, n_up);
        CGQ_LAUNCH_CHECK();
        if (t > 0 && xc) CGQ_TRY(exchange_rows(g, c.h[t], NA, nq_layer_in_dim(nq, t), xc, false));
        if (N) k_nq_step<<<blocks_for(N), TH>>>(c, NQ_CONV, t, N, g->scratch, per_thread);
        CGQ_LAUNCH_CHECK();
    }
    if (N) k_nq_step<<<blocks_for(N), TH>>>(c, NQ_ENERGY, 0, N, g->scratch, per_thread);
    CGQ_LAUNCH_CHECK();
    CGQ_TRY(collect_energy(g, c.node_out, N, energy, node_energy));
    if (!want_grad) return CGQ_STATUS_OK;

    if (E) CGQ_CHECK_GPU(cudaMemset(c.edge_grad, 0, sizeof(double) * 3 * E));
    if (N) CGQ_CHECK_GPU(cudaMemset(c.gx, 0, sizeof(double) * N * c.maxdim));
    if (N) k_nq_step<<<blocks_for(N), TH>>>(c, NQ_RO_BWD, 0, N, g->scratch, per_thread);
    if (nq->zbl && N) k_nq_zbl_bwd<<<blocks_for(N), TH>>>(c);
    CGQ_LAUNCH_CHECK();
    for (int t = L - 1; t >= 0; t--) {
        if (N) k_nq_step<<<blocks_for(N), TH>>>(c, NQ_NODE_BWD, t, N, g->scratch, per_thread);
        if (N) k_nq_step<<<blocks_for(N), TH>>>(c, NQ_EDGE_BWD, t, N, g->scratch, per_thread);
        CGQ_LAUNCH_CHECK();
        if (t == 0) break; /* the type embedding does not depend on positions */
        if (NA) k_nq_step<<<blocks_for(NA), TH>>>(c, NQ_SEND_BWD, t, NA, g->scratch, per_thread);
        CGQ_LAUNCH_CHECK();
        /* gradients that landed on ghost senders belong to their owners */
        if (xc) CGQ_TRY(exchange_rows(g, c.gh, NA, nq_layer_in_dim(nq, t), xc, true));
        if (N) k_nq_step<<<blocks_for(N), TH>>>(c, NQ_UP_BWD, t, N, g->scratch, per_thread);
        CGQ_LAUNCH_CHECK();
        double *swap = c.gx;
        c.gx = c.gx_prev;
        c.gx_prev = swap;
    }
    if (E) CGQ_CHECK_GPU(cudaMemcpy(edge_grad, c.edge_grad, sizeof(double) * 3 * E, cudaMemcpyDeviceToHost));
    return CGQ_STATUS_OK;
}

#endif
