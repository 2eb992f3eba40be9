/* readout.cuh: MACE's readouts and node energies on the v2 path, in double, one group of 32 threads per node.
 *
 * A readout is e3nn linears (only their 0e->0e paths feed scalars) and an activation; at load each linear becomes a
 * dense matrix, probed from cgq_linear_forward on unit vectors, of which only the rows that feed an output are kept.
 * The first linear's sums are split across the group's lanes by hidden unit and by input row (ro_first_layer), each
 * lane's share in a few interleaved partial sums, and the lanes' parts meet in a fixed butterfly of shuffles: every
 * repeat gives the same bits and no atomics are needed (the terms are not added in the CPU reference's order, so the
 * bits differ from it by roundings). Each layer's readouts run as soon as the layer's h exists, so h need not be
 * kept; their pre-activations z are kept (double) for the reverse pass. */
#ifndef CGQ_GPU_READOUT_CUH
#define CGQ_GPU_READOUT_CUH

#define RO_LANES 32   /* threads per node */
#define RO_GROUPS 4   /* nodes per block */
#define RO_PER_LANE 4 /* hidden units per thread: readouts up to 128 wide */
#define RO_MAX_HIDDEN (RO_LANES * RO_PER_LANE)
#define RO_STAGE 256 /* a node's input rows staged in shared memory at a time (ro_first_layer) */
#define RO_CHAINS 4  /* interleaved partial sums per lane in ro_first_layer: a lane's rows are not one long chain */
static_assert(RO_STAGE % (RO_LANES * RO_CHAINS) == 0, "a stage starts at chain 0 for every group of rows");

/* One readout of the model as dense matrices on the device. The linear kind is a hidden layer of one unit (the head's
 * column) without activation, whose output is that unit. */
struct readout_plan {
    bool ok = false, linear = false, bias_mid = false;
    int layer = 0, H = 1, zw = 0, nrows = 0; /* zw: pre-activations kept per node (H, 2H with the middle linear) */
    int units = 1; /* hidden units per pass of ro_first_layer: the power of two >= H, at most RO_LANES */
    int nb = 0;    /* rows [0, nb) index the first input (h; B when composed), rows [nb, nrows) the second (x) */
    int64_t w1_species = 0; /* composed: species s's first-layer weights start at w1 + s * w1_species (0: one table) */
    int head = 0, per_head = 1, mask = 0;    /* hidden unit j is live when !mask || j / per_head == head */
    cgq_act act = CGQ_ACT_SILU;
    double act_cst = 0.0, b2 = 0.0;
    const int32_t *rows = nullptr;                            /* device: the h columns read (nrows) */
    const double *w1 = nullptr, *b1 = nullptr;                /* device: nrows x H, H */
    const double *w1t = nullptr; /* device: w1 transposed, H x nrows (the reverse's loads, consecutive rows by lane) */
    bool composed = false;       /* the reverse writes its rows (dE/dB, dE/dx) instead of adding to them */
    const double *wm = nullptr, *bm = nullptr, *w2 = nullptr; /* device: H x H, H, H (head column) */
};

/* The linear readout of the layer below merged into a composed plan (build_composed_readout, merge): its output added
 * to the plan's. The readout kernels take it as their last parameter, so that their other parameters keep their
 * places in the kernels without it. */
struct readout_merge {
    int index = -1;            /* that readout, -1 for none */
    const double *w = nullptr; /* device: its weight per x row of the plan (nrows - nb), 0 where it reads none */
    double b = 0.0;            /* its bias */
};

/* Dense form of a linear on the host: y = x D + b, D row-major din x dout (the paths' pw * W, exact products). */
static void dense_linear(const cgq_linear *lin, std::vector<double> *D, std::vector<double> *b) {
    const int din = lin->in.dim, dout = lin->out.dim;
    cgq_linear nb = *lin;
    nb.bias = nullptr;
    std::vector<double> x(din, 0.0), y(dout);
    D->assign((size_t)din * dout, 0.0);
    for (int r = 0; r < din; r++) {
        x[r] = 1.0;
        cgq_linear_forward(&nb, x.data(), y.data());
        for (int j = 0; j < dout; j++) (*D)[(size_t)r * dout + j] = y[j];
        x[r] = 0.0;
    }
    cgq_linear_forward(lin, x.data(), y.data());
    b->assign(y.begin(), y.end());
}

/* tables of rows x H, one after another, each transposed to H x rows */
static std::vector<double> transposed_tables(const std::vector<double> &w, int rows, int H) {
    std::vector<double> t(w.size());
    for (size_t b = 0; b < w.size(); b += (size_t)rows * H)
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < H; j++) t[b + (size_t)j * rows + r] = w[b + (size_t)r * H + j];
    return t;
}

/* whether hidden unit j of the readout feeds the selected head (masked multi-head readouts) */
__device__ inline bool ro_live(const readout_plan &p, int j) {
    return !p.mask || j / p.per_head == p.head;
}

/* The plan of readout ro (host model); its device arrays through up(&dst, vector), which copies a vector to the
 * device and keeps it. ok is false where the readout is wider than RO_MAX_HIDDEN (the model then runs the v1 steps). */
template <class Upload>
static cgq_status build_readout_plan(const cgq_readout *ro, Upload up, readout_plan *p) {
    *p = readout_plan();
    p->layer = ro->layer, p->head = ro->head_index, p->act = ro->act, p->act_cst = ro->act_cst;
    p->linear = ro->kind == CGQ_READOUT_LINEAR, p->bias_mid = ro->kind == CGQ_READOUT_NONLINEAR_BIAS;
    std::vector<double> D1, b1, Dm, bm, D2, b2;
    dense_linear(&ro->linear_1, &D1, &b1);
    const int din = ro->linear_1.in.dim, d1 = ro->linear_1.out.dim;
    std::vector<double> w1, w2, b1h;
    if (p->linear) { /* the head's column */
        p->H = 1;
        for (int r = 0; r < din; r++) w1.push_back(D1[(size_t)r * d1 + p->head]);
        b1h = {b1[p->head]};
    } else {
        p->H = d1, p->zw = p->bias_mid ? 2 * d1 : d1;
        p->per_head = std::max(1, d1 / std::max(1, ro->num_heads)), p->mask = ro->mask_heads;
        w1 = D1, b1h = b1;
        dense_linear(&ro->linear_2, &D2, &b2);
        const int d2 = ro->linear_2.out.dim;
        for (int j = 0; j < d1; j++) w2.push_back(D2[(size_t)j * d2 + p->head]);
        p->b2 = b2[p->head];
        if (p->bias_mid) dense_linear(&ro->linear_mid, &Dm, &bm);
    }
    if (p->H > RO_MAX_HIDDEN) return CGQ_STATUS_OK;
    /* only the rows that feed a unit */
    std::vector<int32_t> rows;
    std::vector<double> w1r;
    for (int r = 0; r < din; r++) {
        bool any = false;
        for (int j = 0; j < p->H; j++) any = any || w1[(size_t)r * p->H + j] != 0.0;
        if (!any) continue;
        rows.push_back(r);
        w1r.insert(w1r.end(), w1.begin() + (size_t)r * p->H, w1.begin() + (size_t)(r + 1) * p->H);
    }
    p->nrows = p->nb = (int)rows.size();
    while (p->units < std::min(p->H, RO_LANES)) p->units *= 2;
    CGQ_TRY(up(&p->rows, rows));
    CGQ_TRY(up(&p->w1, w1r));
    CGQ_TRY(up(&p->w1t, transposed_tables(w1r, p->nrows, p->H)));
    CGQ_TRY(up(&p->b1, b1h));
    if (!p->linear) CGQ_TRY(up(&p->w2, w2));
    if (p->bias_mid) {
        CGQ_TRY(up(&p->wm, Dm));
        CGQ_TRY(up(&p->bm, bm));
    }
    p->ok = true;
    return CGQ_STATUS_OK;
}

/* The linear readout of the layer below layer t (its input is layer t's input x), to be added to the composed readout
 * of layer t (build_composed_readout's merge): its index, or -1 where there is none, or another readout reads that layer. wx: its weight
 * per column of x (din), b: its bias. */
static int linear_readout_below(const cgq_model *m, int t, int din, std::vector<double> *wx, double *b) {
    int q = -1;
    for (int k = 0; k < m->n_readouts; k++)
        if (t > 0 && m->readouts[k].layer == t - 1) {
            if (q >= 0) return -1;
            q = k;
        }
    if (q < 0 || m->readouts[q].kind != CGQ_READOUT_LINEAR || m->readouts[q].linear_1.in.dim != din) return -1;
    std::vector<double> D, bias;
    dense_linear(&m->readouts[q].linear_1, &D, &bias);
    const int d1 = m->readouts[q].linear_1.out.dim, head = m->readouts[q].head_index;
    wx->assign(din, 0.0);
    for (int c = 0; c < din; c++) (*wx)[c] = D[(size_t)c * d1 + head];
    *b = bias[head];
    return q;
}

/* The last layer's readout composed with that layer's product linear and residual skip: h = product_linear(B) +
 * skip(x, species) is read by this readout alone, so its first layer becomes z = B Wb + x Wx_s + b1' with the weights
 * multiplied once here in double (Wb = Dp W1, Wx_s = Ds W1, b1' = b1 + bp W1), and h is never formed; the reverse
 * writes dE/dB and dE/dx. plain: readout r's plan, whose later layers' device arrays the composed plan shares. The
 * rows are every column of B (so the reverse writes all of dE/dB), then the columns of x that feed a unit; each
 * species has its own table of nrows x H. p->ok is false where the form does not allow it: another readout of that
 * layer, or a skip that is not the per-species product skip_gemm_fwd runs. merge (null: none): the linear readout
 * of the layer below, which reads x alone, added to this one where there is one (its columns of x among the rows, its
 * dot product in the forward, its constant gradient in the reverse's rows of dE/dx), so that it has no launches of
 * its own; merge->index -1 where there is none. */
template <class Upload>
static cgq_status build_composed_readout(const cgq_model *m, int r, const readout_plan &plain, Upload up,
                                         readout_plan *p, readout_merge *merge = nullptr) {
    *p = readout_plan();
    if (merge) *merge = readout_merge();
    const cgq_readout *ro = &m->readouts[r];
    const int t = ro->layer, S = m->n_species, H = plain.H;
    if (!plain.ok || t != m->n_layers - 1) return CGQ_STATUS_OK;
    for (int q = 0; q < m->n_readouts; q++)
        if (q != r && m->readouts[q].layer == t) return CGQ_STATUS_OK;
    const cgq_mace_layer *ly = &m->layers[t];
    const cgq_tp *tp = &ly->skip_tp;
    const bool skip = ly->use_sc && ly->residual;
    const int dB = ly->product_out.dim, dH = ly->product_linear.out.dim, din = mace_layer_in_dim(m, t);
    if (ly->product_linear.in.dim != dB ||
        (skip && (tp->in2.n != 1 || tp->in2.b[0].mul != S || tp->out.dim != dH || tp->in1.dim != din || !tp->weight)))
        return CGQ_STATUS_OK;
    std::vector<double> wlin;
    double blin = 0.0;
    const int merged = merge ? linear_readout_below(m, t, din, &wlin, &blin) : -1;
    /* W1 as rows of h: w1(c, j) */
    std::vector<double> D1, b1, Dp, bp;
    dense_linear(&ro->linear_1, &D1, &b1);
    const int d1 = ro->linear_1.out.dim;
    std::vector<double> W1((size_t)dH * H), b1c(H);
    for (int c = 0; c < dH; c++)
        for (int j = 0; j < H; j++) W1[(size_t)c * H + j] = D1[(size_t)c * d1 + (plain.linear ? plain.head : j)];
    std::vector<int> live; /* the columns of h that feed a unit */
    for (int c = 0; c < dH; c++)
        if (std::any_of(W1.begin() + (size_t)c * H, W1.begin() + (size_t)(c + 1) * H,
                        [](double v) { return v != 0.0; }))
            live.push_back(c);
    dense_linear(&ly->product_linear, &Dp, &bp);
    std::vector<double> WB((size_t)dB * H, 0.0);
    for (int j = 0; j < H; j++) {
        double b = b1[plain.linear ? plain.head : j];
        for (int c : live) b += bp[c] * W1[(size_t)c * H + j];
        b1c[j] = b;
    }
    for (int b = 0; b < dB; b++)
        for (int c : live)
            if (Dp[(size_t)b * dH + c] != 0.0)
                for (int j = 0; j < H; j++) WB[(size_t)b * H + j] += Dp[(size_t)b * dH + c] * W1[(size_t)c * H + j];
    /* the skip's weights as skip_gemm_fwd reads them: out[ob.offset + w d + m] += pw diag_m x[ib.offset + u d + m]
     * W[w_off + u (S ob.mul) + s ob.mul + w] */
    std::vector<double> WX;
    std::vector<int32_t> xrows;
    if (skip) {
        std::vector<char> is_live(dH, 0);
        for (int c : live) is_live[c] = 1;
        WX.assign((size_t)S * din * H, 0.0);
        for (int k = 0; k < tp->n_ins; k++) {
            const cgq_irrep_block &ib = tp->in1.b[tp->i1[k]], &ob = tp->out.b[tp->io[k]];
            const int d = 2 * ib.l + 1;
            if (ob.l != ib.l || tp->in2.b[tp->i2[k]].l != 0) return CGQ_STATUS_OK;
            for (int w = 0; w < ob.mul; w++)
                for (int mm = 0; mm < d; mm++) {
                    const int c = ob.offset + w * d + mm;
                    if (!is_live[c]) continue;
                    const double pd = tp->path_weight[k] * tp->w3j[k][mm * d + mm];
                    for (int s = 0; s < S; s++)
                        for (int u = 0; u < ib.mul; u++) {
                            const double coef =
                                pd * tp->weight[tp->w_offset[k] + (int64_t)u * S * ob.mul + (int64_t)s * ob.mul + w];
                            double *wx = &WX[((size_t)s * din + ib.offset + u * d + mm) * H];
                            for (int j = 0; j < H; j++) wx[j] += coef * W1[(size_t)c * H + j];
                        }
                }
        }
    }
    for (int xr = 0; xr < din && (skip || merged >= 0); xr++) { /* the x columns that feed a unit or the merged one */
        bool any = merged >= 0 && wlin[xr] != 0.0;
        for (int s = 0; s < S && !any && skip; s++)
            for (int j = 0; j < H && !any; j++) any = WX[((size_t)s * din + xr) * H + j] != 0.0;
        if (any) xrows.push_back(xr);
    }
    const int nrows = dB + (int)xrows.size(), tables = skip ? S : 1;
    if ((size_t)tables * nrows * H * sizeof(double) > ((size_t)64 << 20)) return CGQ_STATUS_OK; /* too large a table */
    std::vector<int32_t> rows(nrows);
    std::vector<double> w1((size_t)tables * nrows * H);
    for (int b = 0; b < dB; b++) rows[b] = b;
    for (size_t k = 0; k < xrows.size(); k++) rows[dB + k] = xrows[k];
    for (int s = 0; s < tables; s++) {
        double *ws = &w1[(size_t)s * nrows * H];
        std::copy(WB.begin(), WB.end(), ws);
        for (size_t k = 0; k < xrows.size() && skip; k++) /* (no skip: the merged readout's rows, zeros here) */
            std::copy_n(&WX[((size_t)s * din + xrows[k]) * H], H, ws + (dB + k) * H);
    }
    *p = plain;
    p->nrows = nrows, p->nb = dB, p->w1_species = skip ? (int64_t)nrows * H : 0, p->composed = true;
    if (merged >= 0) {
        std::vector<double> wl(xrows.size());
        for (size_t k = 0; k < xrows.size(); k++) wl[k] = wlin[xrows[k]];
        merge->index = merged, merge->b = blin;
        CGQ_TRY(up(&merge->w, wl));
    }
    CGQ_TRY(up(&p->rows, rows));
    CGQ_TRY(up(&p->w1, w1));
    CGQ_TRY(up(&p->w1t, transposed_tables(w1, nrows, H)));
    CGQ_TRY(up(&p->b1, b1c));
    return CGQ_STATUS_OK;
}

/* sum over e in [r0, r1) of f(e), added in the order of e (the bits of the serial loop), the warp's lanes evaluating
 * CGQ_WARP terms at a time; every lane gets the sum. The whole warp calls it with the same r0, r1. */
template <class F>
__device__ double warp_ordered_sum(int64_t r0, int64_t r1, F f) {
    const int lane = threadIdx.x % CGQ_WARP;
    double s = 0.0;
    for (int64_t b = r0; b < r1; b += CGQ_WARP) {
        const double v = b + lane < r1 ? f(b + lane) : 0.0;
        const int n = r1 - b < CGQ_WARP ? (int)(r1 - b) : CGQ_WARP;
        for (int j = 0; j < n; j++) s += CGQ_SHFL_W(v, j, CGQ_WARP);
    }
    return s;
}

/* e_acc[i] = receiver i's ZBL pair energies (0 without ZBL) in row order, the interaction energy's first terms as on
 * the CPU; eg (NULL: energy only): each edge's dE/dvec from its pair term, added to the zeros there, so that layer 0's
 * edge tail on the step's critical path does not evaluate the ZBL again. One warp per receiver (launch CGQ_WARP
 * threads per node). */
__global__ void k_energy_start(mace_ctx c, double *e_acc, double *eg) {
    const int64_t warps = (int64_t)gridDim.x * blockDim.x / CGQ_WARP;
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CGQ_WARP; i < c.N; i += warps) {
        double s = 0.0;
        if (c.m->zbl)
            s = warp_ordered_sum(c.row_ptr[i], c.row_ptr[i + 1], [&](int64_t e) {
                double dz;
                const double z = cgq_zbl_edge(c.m, c.species[c.sender[e]], c.species[i], c.r[e], eg ? &dz : NULL);
                if (eg) /* as the tail adds its gr: (gr v_k) / r */
                    for (int k = 0; k < 3; k++) eg[3 * e + k] += c.m->scale * dz * c.vec[3 * e + k] / c.r[e];
                return z;
            });
        if (threadIdx.x % CGQ_WARP == 0) e_acc[i] = s;
    }
}

/* node_out[i] = E0(species) + scale * (interaction energy) + shift */
__global__ void k_energy_finish(mace_ctx c, const double *e_acc) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < c.N; i += (int64_t)gridDim.x * blockDim.x)
        c.node_out[i] = c.m->atomic_energies[c.species[i]] + c.m->scale * e_acc[i] + c.m->shift;
}

/* body(i, on, lane, sg) for this block's nodes, RO_GROUPS per round (on: i < N; sg: the group's shared row of
 * RO_MAX_HIDDEN doubles). Every thread runs every round, so a body may synchronise the block. */
template <class Body>
__device__ void ro_rounds(int64_t N, double (*sa)[RO_MAX_HIDDEN], Body body) {
    const int grp = threadIdx.x / RO_LANES, lane = threadIdx.x % RO_LANES;
    for (int64_t base = (int64_t)blockIdx.x * RO_GROUPS; base < N; base += (int64_t)gridDim.x * RO_GROUPS)
        body(base + grp, base + grp < N, lane, sa[grp]);
}

/* sg[j] = hidden unit j's first-layer sum over the node row hi's input rows (no bias), for every j < H. A pass takes
 * U = p.units units: lane (g, u) = (lane / U, lane % U) sums unit j0 + u over rows g, g + G, ... (G = RO_LANES / U
 * groups of rows; consecutive lanes read consecutive weights) in RO_CHAINS interleaved partial sums added in a fixed
 * order; the G groups' sums then meet in a butterfly of xor shuffles, in which the lanes holding a unit add the same
 * two values, so they agree to the bit. Up to RO_PER_LANE passes side by side. The node's inputs are staged in sx,
 * RO_STAGE rows at a time, one load each. NQ: the passes, ceil(H / U). The whole group calls it; the sums are in sg
 * on return. */
template <class T, int NQ>
__device__ void ro_first_layer(const readout_plan &p, const double *w1n, const T *hi, const T *xi, int lane, double *sx,
                               double *sg) {
    const int U = p.units, G = RO_LANES / U, u = lane % U, g = lane / U;
    double acc[NQ][RO_CHAINS] = {};
    for (int r0 = 0; r0 < p.nrows; r0 += RO_STAGE) {
        const int n = min(RO_STAGE, p.nrows - r0);
        for (int r = lane; r < n; r += RO_LANES) sx[r] = (double)(r0 + r < p.nb ? hi : xi)[p.rows[r0 + r]];
        CGQ_SYNCWARP();
        const double *w1 = w1n + (int64_t)r0 * p.H + u;
        /* a lane's rows RO_CHAINS at a time, all present: their loads are issued before their products */
        int r = g;
        for (; r + (RO_CHAINS - 1) * G < n; r += G * RO_CHAINS) {
            double x[RO_CHAINS], w[RO_CHAINS][NQ];
#pragma unroll
            for (int c = 0; c < RO_CHAINS; c++) {
                x[c] = sx[r + c * G];
#pragma unroll
                for (int q = 0; q < NQ; q++) w[c][q] = q * U + u < p.H ? w1[(int64_t)(r + c * G) * p.H + q * U] : 0.0;
            }
#pragma unroll
            for (int c = 0; c < RO_CHAINS; c++)
#pragma unroll
                for (int q = 0; q < NQ; q++) acc[q][c] = fma(w[c][q], x[c], acc[q][c]);
        }
#pragma unroll
        for (int c = 0; c < RO_CHAINS - 1; c++) /* the stage's last rows, fewer than RO_CHAINS */
            if (r + c * G < n)
#pragma unroll
                for (int q = 0; q < NQ; q++)
                    if (q * U + u < p.H)
                        acc[q][c] = fma(w1[(int64_t)(r + c * G) * p.H + q * U], sx[r + c * G], acc[q][c]);
        CGQ_SYNCWARP(); /* sx is the next stage's */
    }
#pragma unroll
    for (int q = 0; q < NQ; q++) {
        double s = (acc[q][0] + acc[q][1]) + (acc[q][2] + acc[q][3]);
        for (int o = U; o < RO_LANES; o *= 2) s += CGQ_SHFL_XOR_W(s, o, RO_LANES);
        if (g == 0 && q * U + u < p.H) sg[q * U + u] = s;
    }
    CGQ_SYNCWARP();
}
static_assert(RO_CHAINS == 4, "ro_first_layer adds its partial sums as a tree of four");

/* ro_first_layer with its passes fixed at compile time (no products for absent units) */
template <class T>
__device__ void ro_first_layer_any(const readout_plan &p, const double *w1n, const T *hi, const T *xi, int lane,
                                   double *sx, double *sg) {
    switch ((p.H + p.units - 1) / p.units) {
        case 1:
            ro_first_layer<T, 1>(p, w1n, hi, xi, lane, sx, sg);
            break;
        case 2:
            ro_first_layer<T, 2>(p, w1n, hi, xi, lane, sx, sg);
            break;
        case 3:
            ro_first_layer<T, 3>(p, w1n, hi, xi, lane, sx, sg);
            break;
        default:
            ro_first_layer<T, RO_PER_LANE>(p, w1n, hi, xi, lane, sx, sg);
            break;
    }
}

/* node i's first-layer weights w (or their transpose): its species' table where the plan has one per species */
__device__ inline const double *ro_weights(const readout_plan &p, const double *w, const int32_t *species, int64_t i) {
    return p.w1_species ? w + species[i] * p.w1_species : w;
}

/* The readout of the N rows h (row width dH; a composed plan's B, with x of row width dx and the nodes' species):
 * e_acc[i] += its output (a composed plan's with its merged readout's); z: the pre-activations (zw per node). A
 * group only synchronises its own lanes, so a group without a node leaves at once. MERGED: mg is the merged readout
 * of a composed plan (apart at compile time: the plans without one run the kernels as they were). */
template <class T, bool MERGED = false>
__global__ void __launch_bounds__(RO_LANES *RO_GROUPS)
    k_readout_fwd(readout_plan p, int64_t N, const T *h, int dH, const T *x, int dx, const int32_t *species, double *z,
                  double *e_acc, readout_merge mg) {
    __shared__ double sa[RO_GROUPS][RO_MAX_HIDDEN], sx[RO_GROUPS][RO_STAGE];
    ro_rounds(N, sa, [&](int64_t i, bool on, int lane, double *sg) {
        if (!on) return;
        ro_first_layer_any(p, ro_weights(p, p.w1, species, i), h + i * dH, x + i * dx, lane, sx[threadIdx.x / RO_LANES],
                           sg);
        /* the bias and the activation: lane j % RO_LANES reads and writes sg[j] alone */
        for (int q = 0; q < RO_PER_LANE; q++) {
            const int j = lane + q * RO_LANES;
            if (j >= p.H) break;
            const double s = sg[j] + p.b1[j];
            if (p.linear) {
                sg[j] = s;
                continue;
            }
            z[i * p.zw + j] = s;
            sg[j] = ro_live(p, j) ? cgq_act_eval(p.act, p.act_cst, s, NULL) : 0.0;
        }
        CGQ_SYNCWARP();
        if (p.bias_mid) { /* the middle linear and the activation again */
            double a2[RO_PER_LANE];
            for (int q = 0; q < RO_PER_LANE; q++) {
                const int j = lane + q * RO_LANES;
                if (j >= p.H) break;
                double s = 0.0;
                for (int k = 0; k < p.H; k++) s += p.wm[(int64_t)k * p.H + j] * sg[k];
                s += p.bm[j];
                z[i * p.zw + p.H + j] = s;
                a2[q] = ro_live(p, j) ? cgq_act_eval(p.act, p.act_cst, s, NULL) : 0.0;
            }
            CGQ_SYNCWARP();
            for (int q = 0; q < RO_PER_LANE; q++) {
                const int j = lane + q * RO_LANES;
                if (j >= p.H) break;
                sg[j] = a2[q];
            }
            CGQ_SYNCWARP();
        }
        double lin = 0.0; /* the merged readout of the layer below: its dot product with x, added in a fixed order */
        if (MERGED) {
            const T *xi = x + i * dx;
            for (int k = lane; k < p.nrows - p.nb; k += RO_LANES)
                lin = fma(mg.w[k], (double)xi[p.rows[p.nb + k]], lin);
            for (int o = 1; o < RO_LANES; o *= 2) lin += CGQ_SHFL_XOR_W(lin, o, RO_LANES);
            lin += mg.b;
        }
        if (lane == 0) {
            double out = sg[0];
            if (!p.linear) {
                out = 0.0;
                for (int j = 0; j < p.H; j++) out += p.w2[j] * sg[j];
                out += p.b2;
            }
            e_acc[i] += MERGED ? out + lin : out;
        }
        CGQ_SYNCWARP(); /* sg and sx are the next round's */
    });
}

/* gh[i] += scale * d(readout)/dh for the N rows (row width dH), from the kept pre-activations z; a composed plan's
 * into dE/dB (gh: every column written) and dE/dx (gx, row width dx: its columns that feed a unit or the merged
 * readout written, that readout's gradient included; null: not wanted). MERGED as k_readout_fwd. */
template <class T, bool MERGED = false>
__global__ void __launch_bounds__(RO_LANES *RO_GROUPS)
    k_readout_bwd(readout_plan p, int64_t N, const double *z, double scale, T *gh, int dH, T *gx, int dx,
                  const int32_t *species, readout_merge mg) {
    __shared__ double sa[RO_GROUPS][RO_MAX_HIDDEN];
    ro_rounds(N, sa, [&](int64_t i, bool on, int lane, double *sg) {
        double ga[RO_PER_LANE]; /* dE/d(activation output) of this thread's units */
        for (int q = 0; q < RO_PER_LANE; q++) {
            const int j = lane + q * RO_LANES;
            ga[q] = (on && j < p.H) ? (p.linear ? scale : p.w2[j] * scale) : 0.0;
        }
        if (p.bias_mid) { /* through the second activation and the middle linear */
            for (int q = 0; q < RO_PER_LANE; q++) {
                const int j = lane + q * RO_LANES;
                if (!on || j >= p.H) break;
                double d = 0.0;
                cgq_act_eval(p.act, p.act_cst, z[i * p.zw + p.H + j], &d);
                sg[j] = ro_live(p, j) ? ga[q] * d : 0.0;
            }
            __syncthreads();
            for (int q = 0; q < RO_PER_LANE; q++) {
                const int j = lane + q * RO_LANES;
                if (!on || j >= p.H) break;
                double s = 0.0;
                for (int k = 0; k < p.H; k++) s += p.wm[(int64_t)j * p.H + k] * sg[k];
                ga[q] = s;
            }
            __syncthreads();
        }
        for (int q = 0; q < RO_PER_LANE; q++) { /* through the first activation */
            const int j = lane + q * RO_LANES;
            if (!on || j >= p.H) break;
            double d = 1.0;
            if (!p.linear) cgq_act_eval(p.act, p.act_cst, z[i * p.zw + j], &d);
            sg[j] = (p.linear || ro_live(p, j)) ? ga[q] * d : 0.0;
        }
        __syncthreads();
        const double *w1t = on ? ro_weights(p, p.w1t, species, i) : nullptr;
        for (int r = lane; on && r < p.nrows; r += RO_LANES) { /* the first linear, transposed */
            if (r >= p.nb && !gx) break;
            T *g = r < p.nb ? gh + i * dH + p.rows[r] : gx + i * dx + p.rows[r];
            /* double rows sum onto their value (the CPU's order); float rows take the sum rounded once; a composed
             * plan's rows are written */
            const bool add = !p.composed;
            double s = add && sizeof(T) == sizeof(double) ? (double)*g : 0.0;
            for (int j = 0; j < p.H; j++) s += w1t[(int64_t)j * p.nrows + r] * sg[j];
            if (MERGED && r >= p.nb) s += scale * mg.w[r - p.nb]; /* the merged readout's (constant) */
            *g = add && sizeof(T) != sizeof(double) ? *g + (T)s : (T)s;
        }
        __syncthreads();
    });
}

#endif
