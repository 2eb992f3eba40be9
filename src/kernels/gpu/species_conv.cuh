/* species_conv.cuh: MACE's first convolution factored through the senders' species (fp32, with the radial tables).
 *
 * The first layer's sender features are the embedding's linear_up: a function of the species alone, x[s,u] for
 * species class s, with one value per channel (its instructions are 0e x l -> l). With the radial MLP's last layer
 * w[e, k u] = alpha sum_j a_j(r_e) W[j, k u], the messages of receiver i are
 *   M[i, (k,c), u] = pw_k alpha sum_s x[s,u] sum_j W[j, k u] Q[i,s,j,(k,c)],
 *   Q[i,s,j,q] = sum over the row's edges e whose sender is of class s of a_j(r_e) cut_e P_q(e),
 * with P_(k,c)(e) = sum_b C_k[0,b,c] Y_b(e). Q holds S x K x P values per receiver (MACE-MP-0 on water: 2 x 64 x 16),
 * where the separate kernels write and read 512 weights per edge for the row's ~90 edges: the per-edge work drops
 * from K x 512 (the weights) + 512 x 16 (the messages) products to K x P, and the per-edge weights never exist.
 * The reverse, with G[s,j,q] = dE/dQ = pw_k alpha sum_u gM[i,(k,c),u] x[s,u] W[j, k u] per receiver, gives per edge
 *   dE/da_j = cut U_j, U_j = sum_q G[s,j,q] P_q;  dE/dP_q = cut T_q, T_q = sum_j G[s,j,q] a_j;
 *   dE/dcut = sum_j a_j U_j;  dE/dY_b = sum_(k,c) C_k[0,b,c] dE/dP_(k,c);  dE/dr = sum_j dE/da_j da_j/dr (the table),
 * and no dE/dx (the embedding does not depend on positions). a(r) is interpolated as k_radial_tc_fwd does (the same
 * bits). Every sum runs in a fixed order (rows in CSR order, the lanes' sums by fixed shuffles, the GEMMs' tiles):
 * deterministic, no atomics. The species classes are those present among the graph's nodes (set_species_classes);
 * with more than SC_MAX_CLASSES the separate kernels run the layer.
 *
 * The folds between Q and M, and between gM and G, run one of two ways (the kernels' template parameter GEMM):
 * - in the edge kernels, per receiver (models narrower than 64 channels, or CGQ_GPU_SPECIES_CONV=1; session 16): each
 *   block streams W from L2 (MACE-MP-0 on water: 0.47 + 0.94 ms of the step, session 22, issue-bound);
 * - as the node GEMMs of node_ops.cuh (64 channels and more, or CGQ_GPU_SPECIES_CONV=2; session 21, first run in
 *   session 22: MACE-MP-0 0.39 + 0.85 ms): M = sum_k pw_k Q_k V_k and G_k = pw_k gM_k V_k^T with
 *   V_k[(s,j), u] = alpha x[s,u] W[j, k u] built per step for the graph's classes (k_species_conv_weights), Q and G
 *   stored as e3nn rows of S K channels per instruction (block k at S K p_off_k, entry (s,j) d3 + c), receivers in
 *   pieces whose Q stays within SC_PIECE_FLOATS; the edge kernels then only sum Q and take G apart (the reverse's on
 *   the tensor cores on sm_80 and later: k_species_conv_bwd_tc, session 29).
 * Included by mace_gpu.cu after conv.cuh, node_ops.cuh and radial_spline.cuh. */
#ifndef CGQ_GPU_SPECIES_CONV_CUH
#define CGQ_GPU_SPECIES_CONV_CUH

#define SC_MAX_CLASSES 8   /* species present in the graph */
#define SC_MAX_P 16        /* P values per edge: (l_sh + 1)^2 at most */
#define SC_MAX_K 128       /* the table's width (the radial MLP's last hidden layer) */
#define SC_EB 32           /* edges per batch (their a(r), P and table intervals staged in shared memory) */
#define SC_BWD_THREADS 128 /* the reverse's block */
#define SC_PIECE_FLOATS ((int64_t)32 << 20) /* GEMM folds: Q (or G) of one piece of receivers, 128 MiB at most */

struct species_conv {
    int ok = 0;   /* layer 0 has the form (build_species_conv) */
    int gemm = 0; /* the folds run as node GEMMs (build_species_conv) */
    int S = 0;    /* species classes in the current graph */
    int K = 0, P = 0, x_off = 0, n_species = 0;
    int split_ins =
        0; /* every output block has one instruction: the forward's threads may take (channel, instruction) */
    int fwd_max_threads = 0; /* the forward kernel's largest block (cudaFuncGetAttributes) */
    int tc_bwd = 0;          /* the reverse's edges on the tensor cores (k_species_conv_bwd_tc) */
    float alpha = 1;
    radial_table tab;
    const float *W = nullptr;  /* the radial MLP's last layer [K][wn] (the float model's) */
    const float *WT = nullptr; /* the same transposed, [wn][K] (the in-kernel reverse fold reads it along K) */
    /* [P][nY]: P_q = sum_b Y2P[q][b] Y_b, the couplings C_k[0, b - y_off_k, c] of P entry q = p_off_k + c (zero
     * elsewhere), staged in shared memory by both kernels: read per edge from the plan (instruction, offsets, then
     * the couplings, each load waiting on the one before) they were a chain of dependent global loads per entry */
    const float *Y2P = nullptr;
    /* [P]: row q's nonzeros are Y2P[q][b0, b0 + n), packed b0 | n << 16 (the P entries sum only those: one for the
     * 0e x l -> l couplings of a first layer, 2l+1 read before) */
    const int32_t *Y2Pr = nullptr;
    int32_t *cls =
        nullptr; /* [n_species]: the class of each species (-1: none); then [SC_MAX_CLASSES] a node of each */
};

/* GEMM folds composed with the layer's linear (session 51). MACE's first layer maps the messages by its linear right
 * after the folds: Mlin block o = alpha_L sum_kl pwL_kl M_(in kl) L_kl over the instructions kl into o. With
 * M = sum_q pw_q Q_q V_q that is one GEMM from Q, Mlin_o = alpha_L sum over the pairs (q, kl) into o of
 * pw_q pwL_kl Q_q VL_i, VL_i = V_q L_kl ([S K][Cw], formed per step: V depends on the graph's classes, its sums over
 * the C channels in double), instead of two: M is never formed (MACE-MP-0 at 5,184 atoms: a GEMM launch of ~92 us
 * each way). The reverse likewise: G_q = alpha_L sum over the pairs (q, kl) of pw_q pwL_kl dE/dMlin_(out kl) VL_i^T.
 * Built where every conv output block feeds the linear and every linear output block has a pair
 * (mace_gpu.cu build_sc_linear). */
#define SC_MAX_PAIRS 16
struct sc_linear {
    int ok = 0;
    const cgq_linear *hl = nullptr; /* the host model's linear: blocks, instructions, path weights */
    const float *L = nullptr;       /* its float weights on the GPU, instruction kl's [C][Cw] at w_offset[kl] */
    double alpha = 1;               /* 1 / avg_num_neighbors */
    /* pairs i: conv instruction q[i] writes the input block of linear instruction kl[i] */
    int n = 0;
    int q[SC_MAX_PAIRS], kl[SC_MAX_PAIRS], Cw[SC_MAX_PAIRS];
    int64_t l_off[SC_MAX_PAIRS]; /* kl's weights in L */
};
/* where pair i's VL ([S K][Cw_i], SK = S K rows) starts among the pairs' VL one after another; i = lin.n: their size */
__host__ __device__ inline int64_t sc_lin_offset(const sc_linear &lin, int SK, int i) {
    int64_t o = 0;
    for (int i2 = 0; i2 < i; i2++) o += (int64_t)SK * lin.Cw[i2];
    return o;
}

/* GEMM folds: the host copy of the plan's instructions and the work buffers, V [n_ins][S K][C] (or the pairs' VL
 * [S K][Cw] one after another, where the linear is composed: lin) and Q or G of `piece` receivers [piece][S K P]
 * (mace_gpu.cu species_conv_work sizes them) */
struct sc_work {
    const conv_ins *ins = nullptr;
    float *V = nullptr, *QG = nullptr;
    int64_t piece = 0;
    const sc_linear *lin = nullptr;
};
/* the rows the folds write (forward) and read (reverse): M's, or with the composed linear its output's */
static int64_t sc_rows_ld(const conv_plan &p, const sc_work &w) {
    return w.lin ? w.lin->hl->out.dim : p.dM;
}

/* Shared memory of the two edge kernels, in floats from the start (offsets multiples of 4: float4 reads), the batch's
 * ints (class and table interval per edge) last. Forward: xs [S][C] (the classes' features), acc [acc_dim][C]
 * (messages), then the batch (a [EB][K], P times the cutoff [EB][PS], Hermite weights [EB][3]), which Q [S][P][K]
 * replaces after the row. Reverse: xs, G [S][P][K], then Z [S][P][C] = gM x, which the batch (a and the slopes [EB][K]
 * each, P [EB][PS], Hermite weights of both [EB][6], the cutoff [EB]) replaces, and per warp the sums T [17]. Both:
 * Y2P [P][nY] (species_conv); last the ints: the batch's classes and table intervals [2][SC_EB], Y2Pr [P]. With the
 * GEMM folds xs, acc, Q and Z are not there. */
__host__ __device__ inline int sc_r4(int n) {
    return (n + 3) / 4 * 4;
}
struct sc_layout {
    int acc, G, Z, ab, sb, Pb, hb, cut, tw, y2p, ints, floats;
};
/* (gemm: the fold's mode, a compile-time constant in the kernels: a run-time s.gemm there cost the default reverse 8
 * registers) */
__host__ __device__ inline sc_layout sc_layout_of(const conv_plan &p, const species_conv &s, bool bwd, bool gemm) {
    sc_layout o = {};
    const int PS = sc_r4(s.P), spk = sc_r4(s.S * s.P * s.K);
    o.acc = o.G = gemm ? 0 : sc_r4(s.S * p.C);
    const int stage = o.acc + (bwd ? spk : gemm ? 0 : sc_r4(p.acc_dim * p.C));
    o.Z = o.ab = stage, o.sb = o.ab + sc_r4(SC_EB * s.K);
    o.Pb = o.sb + (bwd ? sc_r4(SC_EB * s.K) : 0), o.hb = o.Pb + SC_EB * PS;
    o.cut = o.hb + SC_EB * (bwd ? 6 : 3);
    int end = o.cut + (bwd ? SC_EB : 0);
    const int other = gemm ? 0 : stage + (bwd ? sc_r4(s.S * s.P * p.C) : spk); /* Z (reverse) or Q (forward) */
    end = end > other ? end : other;
    o.tw = sc_r4(end), o.y2p = o.tw + (bwd ? SC_BWD_THREADS / CGQ_WARP * (CONV_MAX_Y + 1) : 0);
    o.ints = o.y2p + sc_r4(s.P * p.nY);
    o.floats = o.ints + 2 * SC_EB + sc_r4(s.P);
    return o;
}
static int sc_fwd_threads(const species_conv &s) {
    const int t = (s.S * s.K + CGQ_WARP - 1) / CGQ_WARP * CGQ_WARP;
    return t > 128 ? t : 128;
}
static size_t sc_smem(const conv_plan &p, const species_conv &s, bool bwd) {
    return sizeof(float) * sc_layout_of(p, s, bwd, s.gemm).floats;
}
/* k_species_conv_bwd_tc's block: SCT_WARPS warps and one receiver (MACE-MP-0's ~90-edge rows are 6 tiles of 16;
 * 3 warps, and 4 with the table loads a k-step ahead, were slower: session 29), each warp with P and T of its tile
 * [16][17] and the cutoffs [16]; in u32 words B's fragments [S][KT][2][32] (uint4), Y2P [16][16], Y2Pr [16], then
 * the warps' */
#define SCT_WARPS 2
#define SCT_WARP_FLOATS (2 * 16 * 17 + 16)
__host__ __device__ inline int sct_words(int S, int KT) {
    return S * KT * 2 * 32 * 4 + 16 * 16 + 16 + SCT_WARPS * SCT_WARP_FLOATS;
}
/* the in-kernel folds' area after them (floats): the classes' features xs [S][C], Z [S][P][C], G [S][P][K] */
__host__ __device__ inline int sct_fold_floats(int S, int C, int P, int K) {
    return sc_r4(S * C) + sc_r4(S * P * C) + S * P * K;
}
static size_t sct_smem(const conv_plan &p, const species_conv &s) {
    const int fold = s.gemm ? 0 : sct_fold_floats(s.S, p.C, s.P, s.K);
    return sizeof(uint32_t) * (size_t)(sct_words(s.S, s.K / 8) + fold);
}
/* whether the layer runs factored in a graph of s.S classes within the shared memory limit and the forward's block
 * limit (its registers: 8 classes of a 128-wide table ask for 1,024 threads) */
static bool sc_runs(const conv_plan &p, const species_conv &s, size_t smem_limit) {
    return s.ok && s.S >= 1 && s.S <= SC_MAX_CLASSES && sc_smem(p, s, false) <= smem_limit &&
           sc_smem(p, s, true) <= smem_limit && sc_fwd_threads(s) <= s.fwd_max_threads &&
           (!s.tc_bwd || sct_smem(p, s) <= smem_limit);
}

/* Copies s.Y2P and s.Y2Pr to y2p and y2r in shared memory (the first batch's barrier orders them before sc_stage) */
__device__ __forceinline__ void sc_load_y2p(const conv_plan &p, const species_conv &s, float *y2p, int *y2r) {
    for (int q = threadIdx.x; q < s.P * p.nY; q += blockDim.x) y2p[q] = s.Y2P[q];
    for (int q = threadIdx.x; q < s.P; q += blockDim.x) y2r[q] = s.Y2Pr[q];
}

/* P_q of an edge whose SH row is Ye: the sum over row q's nonzero couplings (y2r: b0 | n << 16) in b's order, as
 * conv_p_entry (the zeros add nothing) */
__device__ __forceinline__ float sc_p_entry(const float *y2p, const int *y2r, int q, int nY, const float *Ye) {
    const int b0 = y2r[q] & 0xffff, n = y2r[q] >> 16;
    const float *m = y2p + q * nY + b0;
    float v = 0.0f;
    for (int b = 0; b < n; b++) v += m[b] * Ye[b0 + b];
    return v;
}

/* Stages the batch of nb edges from eb in shared memory: per edge its class cb, table interval kb and Hermite weights
 * hb (with those of the slopes when slopes), the cutoff (cutb, when non-null), P (from y2p over y2r's ranges; times the
 * cutoff when cut_in_P); then a (and the slopes into sb). Two barriers. */
__device__ __forceinline__ void sc_stage(const conv_plan &p, const species_conv &s, int64_t eb, int nb,
                                         const int32_t *sender, const int32_t *species, const double *r, const float *Y,
                                         const float *cut, bool cut_in_P, bool slopes, int *cb, int *kb, float *hb,
                                         float *cutb, const float *y2p, const int *y2r, float *Pb,
                                         float *ab, float *sb) {
    const int K = s.K, P = s.P, PS = sc_r4(P), tid = threadIdx.x, T = blockDim.x, hw = slopes ? 6 : 3;
    for (int el = tid; el < nb; el += T) {
        const int64_t e = eb + el;
        float b[3], db[3];
        kb[el] = hermite_weights(s.tab, r[e], b, db);
        for (int q = 0; q < 3; q++) hb[hw * el + q] = b[q];
        if (slopes)
            for (int q = 0; q < 3; q++) hb[hw * el + 3 + q] = db[q];
        cb[el] = s.cls[species[sender[e]]];
        if (cutb) cutb[el] = cut ? cut[e] : 1.0f;
    }
    for (int q = tid; q < nb * PS; q += T) {
        const int el = q / PS, pq = q % PS;
        float v = 0.0f;
        if (pq < P) {
            v = sc_p_entry(y2p, y2r, pq, p.nY, Y + (eb + el) * p.nY);
            if (cut && cut_in_P) v *= cut[eb + el];
        }
        Pb[q] = v;
    }
    __syncthreads();
    for (int q = tid; q < nb * K; q += T) {
        const int el = q / K, j = q % K;
        const float *kn = s.tab.knots + (size_t)kb[el] * 4 * K;
        ab[q] = hermite_value(kn, K, j, hb + hw * el);
        if (slopes) sb[q] = hermite_slope(kn, K, j, hb + hw * el + 3);
    }
    __syncthreads();
}

/* the cases of 2l+1 = d3 <= 7, for switches that instantiate a template per d3 */
#define SC_D3_CASES(F) F(1) F(3) F(5) F(7)

/* one instruction's messages of channel u: sum_s x[s,u] sum_j W[j, k u] Q[s][(k,c)][j], added to acc */
template <int D3>
__device__ __forceinline__ void sc_fwd_ins(const conv_ins &k, const species_conv &s, int C, int wn, int u,
                                           const float *xs, const float *Qs, float *acc) {
    float m[D3];
#pragma unroll
    for (int c = 0; c < D3; c++) m[c] = 0.0f;
    const float *Wk = s.W + k.w_off + u;
    for (int sg = 0; sg < s.S; sg++) {
        const float *Qk = Qs + ((size_t)sg * s.P + k.p_off) * s.K;
        float t[D3];
#pragma unroll
        for (int c = 0; c < D3; c++) t[c] = 0.0f;
#pragma unroll 2
        for (int j = 0; j < s.K; j += 4) {
            const float w0 = Wk[(size_t)j * wn], w1 = Wk[(size_t)(j + 1) * wn], w2 = Wk[(size_t)(j + 2) * wn],
                        w3 = Wk[(size_t)(j + 3) * wn];
#pragma unroll
            for (int c = 0; c < D3; c++) {
                const float4 q = *reinterpret_cast<const float4 *>(Qk + (size_t)c * s.K + j);
                t[c] += w0 * q.x + w1 * q.y + w2 * q.z + w3 * q.w;
            }
        }
        const float x = xs[sg * C + u];
#pragma unroll
        for (int c = 0; c < D3; c++) m[c] += x * t[c];
    }
    const float sc = (float)k.pw * s.alpha;
#pragma unroll
    for (int c = 0; c < D3; c++) acc[(k.acc_off + c) * C + u] += sc * m[c];
}

/* Receivers [i0, i0 + gridDim.x), from hu (layer 0's sender features), Y, the edge lengths r and cut (non-null when
 * the weights carry the cutoff): their messages into rows of out (M), or with GEMM their Q into rows of out (S K P
 * floats each, the block's receiver first; e3nn layout, see the file's comment). One block per receiver: thread
 * (s, j) sums Q[s][:][j] in registers over the row's edges of class s, batch by batch; then (in-kernel folds) the
 * threads form the messages per (channel, instruction). */
template <bool GEMM>
__global__ void k_species_conv_fwd(conv_plan p, species_conv s, int64_t i0, const int64_t *row_ptr,
                                   const int32_t *sender, const int32_t *species, const double *r, const float *Y,
                                   const float *hu, const float *cut, float *out) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int C = p.C, K = s.K, P = s.P, PS = sc_r4(P), tid = threadIdx.x, T = blockDim.x;
    const sc_layout o = sc_layout_of(p, s, false, GEMM);
    float *xs = reinterpret_cast<float *>(smem_raw), *acc = xs + o.acc, *ab = xs + o.ab, *Pb = xs + o.Pb;
    float *Qs = ab; /* Q [S][P][K] replaces the batch after the row */
    int *cb = reinterpret_cast<int *>(xs + o.ints), *kb = cb + SC_EB;
    const int32_t *rep = s.cls + s.n_species;
    const int64_t i = i0 + blockIdx.x, r0 = row_ptr[i], r1 = row_ptr[i + 1];
    if (!GEMM) {
        for (int q = tid; q < s.S * C; q += T) xs[q] = hu[(int64_t)rep[q / C] * p.dhu + s.x_off + q % C];
        for (int q = tid; q < p.acc_dim * C; q += T) acc[q] = 0.0f;
    }
    sc_load_y2p(p, s, xs + o.y2p, kb + SC_EB);
    const int sig = tid / K, jj = tid % K;
    const bool owner = sig < s.S;
    float qa[SC_MAX_P];
#pragma unroll
    for (int q = 0; q < SC_MAX_P; q++) qa[q] = 0.0f;
    for (int64_t eb = r0; eb < r1; eb += SC_EB) {
        const int nb = (int)(r1 - eb < SC_EB ? r1 - eb : SC_EB);
        __syncthreads(); /* the previous batch is read */
        sc_stage(p, s, eb, nb, sender, species, r, Y, cut, true, false, cb, kb, xs + o.hb, nullptr, xs + o.y2p,
                 kb + SC_EB, Pb, ab, nullptr);
        if (owner)
            for (int el = 0; el < nb; el++)
                if (cb[el] == sig) {
                    const float a = ab[el * K + jj];
                    const float4 *Pe = reinterpret_cast<const float4 *>(Pb + el * PS);
#pragma unroll
                    for (int q4 = 0; q4 < SC_MAX_P / 4; q4++)
                        if (4 * q4 < P) {
                            const float4 v = Pe[q4];
                            qa[4 * q4] += a * v.x, qa[4 * q4 + 1] += a * v.y;
                            qa[4 * q4 + 2] += a * v.z, qa[4 * q4 + 3] += a * v.w;
                        }
                }
    }
    if (GEMM) { /* Q's row: the GEMMs form the messages */
        if (!owner) return;
        const int SK = s.S * K, n = sig * K + jj;
        float *Qi = out + (int64_t)blockIdx.x * SK * P;
#pragma unroll
        for (int q = 0; q < SC_MAX_P; q++)
            if (q < P) {
                const conv_ins &k = p.ins[p.p_ins[q]];
                Qi[SK * k.p_off + n * k.d3 + (q - k.p_off)] = qa[q];
            }
        return;
    }
    __syncthreads();
    if (owner)
        for (int q = 0; q < P; q++) Qs[(sig * P + q) * K + jj] = qa[q];
    __syncthreads();
    const int n_items = s.split_ins ? C * p.n_ins : C;
    for (int it = tid; it < n_items; it += T) {
        const int u = it % C, q0 = s.split_ins ? it / C : 0, q1 = s.split_ins ? q0 + 1 : p.n_ins;
        for (int q = q0; q < q1; q++) {
            const conv_ins &k = p.ins[q];
            switch (k.d3) {
#define SC_FWD_CASE(D3)                                     \
    case D3:                                                \
        sc_fwd_ins<D3>(k, s, C, (int)p.wn, u, xs, Qs, acc); \
        break;
                SC_D3_CASES(SC_FWD_CASE)
#undef SC_FWD_CASE
            }
        }
    }
    __syncthreads();
    float *Mi = out + i * p.dM;
    for (int j = tid; j < p.acc_dim * C; j += T) Mi[conv_out_place(p, j)] = acc[j];
}

/* G[sg][(k,c)][j] = pw_k alpha sum_u Z[sg][(k,c)][u] W[j, k u] for one instruction and class (Z = gM x) */
template <int D3>
__device__ __forceinline__ void sc_bwd_fold(const conv_ins &k, const species_conv &s, int C, int j, int sg,
                                            const float *Z, float *G) {
    float t[D3];
#pragma unroll
    for (int c = 0; c < D3; c++) t[c] = 0.0f;
    const float *Zk = Z + ((size_t)sg * s.P + k.p_off) * C;
    const float *Wt = s.WT + (size_t)k.w_off * s.K + j;
#pragma unroll 2
    for (int u = 0; u < C; u += 4) {
        const float w0 = Wt[(size_t)u * s.K], w1 = Wt[(size_t)(u + 1) * s.K], w2 = Wt[(size_t)(u + 2) * s.K],
                    w3 = Wt[(size_t)(u + 3) * s.K];
#pragma unroll
        for (int c = 0; c < D3; c++) {
            const float4 z = *reinterpret_cast<const float4 *>(Zk + (size_t)c * C + u);
            t[c] += w0 * z.x + w1 * z.y + w2 * z.z + w3 * z.w;
        }
    }
    const float sc = (float)k.pw * s.alpha;
#pragma unroll
    for (int c = 0; c < D3; c++) G[((size_t)sg * s.P + k.p_off + c) * s.K + j] = sc * t[c];
}

/* The in-kernel folds of receiver i's reverse, by the block's threads: xs [S][C] the classes' features, Z[s][q][u] =
 * gM[(k,c), u] x[s,u], then G [S][P][K] (sc_bwd_fold per j, instruction and class); G is complete after the call */
__device__ inline void sc_bwd_fold_row(const conv_plan &p, const species_conv &s, int64_t i, const float *hu,
                                       const float *gM, float *xs, float *Z, float *G) {
    const int C = p.C, K = s.K, P = s.P, S = s.S, tid = threadIdx.x, T = blockDim.x;
    const int32_t *rep = s.cls + s.n_species;
    for (int q = tid; q < S * C; q += T) xs[q] = hu[(int64_t)rep[q / C] * p.dhu + s.x_off + q % C];
    __syncthreads();
    for (int q = tid; q < S * P * C; q += T) {
        const int sg = q / (P * C), pq = q / C % P, u = q % C;
        const conv_ins &k = p.ins[p.p_ins[pq]];
        Z[q] = gM[i * p.dM + k.out_off + u * k.d3 + p.p_c[pq]] * xs[sg * C + u];
    }
    __syncthreads();
    for (int t = tid; t < K * p.n_ins * S; t += T) { /* thread (j, instruction and class) */
        const int j = t % K, it = t / K;
        const conv_ins &k = p.ins[it / S];
        switch (k.d3) {
#define SC_FOLD_CASE(D3)                           \
    case D3:                                       \
        sc_bwd_fold<D3>(k, s, C, j, it % S, Z, G); \
        break;
            SC_D3_CASES(SC_FOLD_CASE)
#undef SC_FOLD_CASE
        }
    }
    __syncthreads();
}

/* Reverse of k_species_conv_fwd given gsrc: gM = dE/dM (in-kernel folds), or with GEMM the receivers' G (rows of
 * S K P floats, as Q's, the block's receiver first). Per edge gY (dE/dY, stride nY), gcut (dE/dcut; 0 without cut)
 * and gr[e - e0] (dE/dr through the table), as k_conv_bwd and radial_table_backward leave them for the edge tail. The
 * block folds gM into G (thread (j, h) takes the (instruction, class) pairs h, h + H, ...) or copies its G into
 * shared memory as [S][P][K], then stages the row's edges batch by batch, each warp taking the batch's edges warp,
 * warp + warps, ... with lane j's a_j and slopes. */
template <bool GEMM>
__global__ void __launch_bounds__(SC_BWD_THREADS)
    k_species_conv_bwd(conv_plan p, species_conv s, int64_t i0, const int64_t *row_ptr, const int32_t *sender,
                       const int32_t *species, const double *r, const float *Y, const float *hu, const float *cut,
                       const float *gsrc, int64_t e0, float *gY, float *gcut, double *gr) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int C = p.C, K = s.K, P = s.P, PS = sc_r4(P), S = s.S, tid = threadIdx.x, T = blockDim.x;
    const sc_layout o = sc_layout_of(p, s, true, GEMM);
    float *xs = reinterpret_cast<float *>(smem_raw), *G = xs + o.G, *Z = xs + o.Z;
    float *ab = xs + o.ab, *sb = xs + o.sb, *Pb = xs + o.Pb, *cutb = xs + o.cut;
    int *cb = reinterpret_cast<int *>(xs + o.ints), *kb = cb + SC_EB;
    const int lane = tid % CGQ_WARP, warp = tid / CGQ_WARP, nw = T / CGQ_WARP;
    float *Tw = xs + o.tw + warp * (CONV_MAX_Y + 1);
    const int64_t i = i0 + blockIdx.x, r0 = row_ptr[i], r1 = row_ptr[i + 1];
    if (GEMM) {
        const int SK = S * K;
        const float *Gi = gsrc + (int64_t)blockIdx.x * SK * P;
        for (int q = 0; q < p.n_ins; q++) { /* instruction q's block, read in order: G[s][p_off + c][j] */
            const conv_ins &k = p.ins[q];
            for (int t = tid; t < SK * k.d3; t += T) {
                const int n = t / k.d3, c = t % k.d3;
                G[((n / K) * P + k.p_off + c) * K + n % K] = Gi[(int64_t)SK * k.p_off + t];
            }
        }
    } else {
        sc_bwd_fold_row(p, s, i, hu, gsrc, xs, Z, G);
    }
    const float *y2p = xs + o.y2p;
    sc_load_y2p(p, s, xs + o.y2p, kb + SC_EB);
    for (int64_t eb = r0; eb < r1; eb += SC_EB) {
        const int nb = (int)(r1 - eb < SC_EB ? r1 - eb : SC_EB);
        __syncthreads(); /* G and Y2P are complete (first batch), the previous batch is read */
        sc_stage(p, s, eb, nb, sender, species, r, Y, cut, false, true, cb, kb, xs + o.hb, cutb, y2p, kb + SC_EB, Pb,
                 ab, sb);
        for (int el = warp; el < nb; el += nw) {
            const int64_t e = eb + el;
            const float ce = cutb[el];
            const float *Gs = G + (size_t)cb[el] * P * K, *ae = ab + el * K, *se = sb + el * K;
            float pr[SC_MAX_P];
            const float4 *Pe = reinterpret_cast<const float4 *>(Pb + el * PS);
#pragma unroll
            for (int q4 = 0; q4 < SC_MAX_P / 4; q4++) {
                const float4 v = 4 * q4 < P ? Pe[q4] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                pr[4 * q4] = v.x, pr[4 * q4 + 1] = v.y, pr[4 * q4 + 2] = v.z, pr[4 * q4 + 3] = v.w;
            }
            float v[CONV_MAX_Y + 1], au = 0.0f, gu = 0.0f; /* v[q]: the lane's part of T_q */
#pragma unroll
            for (int q = 0; q <= CONV_MAX_Y; q++) v[q] = 0.0f;
            for (int j = lane; j < K; j += CGQ_WARP) {
                const float a = ae[j];
                float U = 0.0f;
#pragma unroll
                for (int q = 0; q < SC_MAX_P; q++)
                    if (q < P) {
                        const float gq = Gs[(size_t)q * K + j];
                        U += gq * pr[q];
                        v[q] += gq * a;
                    }
                au += a * U, gu += U * se[j];
            }
            group_scatter_sum<float, 16>(v, P, CGQ_WARP, Tw);
            for (int off = CGQ_WARP / 2; off > 0; off /= 2)
                au += CGQ_SHFL_XOR_W(au, off, CGQ_WARP), gu += CGQ_SHFL_XOR_W(gu, off, CGQ_WARP);
            CGQ_SYNCWARP();
            if (lane < p.nY) { /* dE/dY_b = cut sum_q Y2P[q][b] T_q (in the instructions' order: the zeros add nothing) */
                float gyb = 0.0f;
#pragma unroll
                for (int q = 0; q < SC_MAX_P; q++)
                    if (q < P) gyb += y2p[q * p.nY + lane] * Tw[q];
                gY[e * p.nY + lane] = ce * gyb;
            }
            if (lane == 0) {
                gcut[e] = cut ? au : 0.0f;
                gr[e - e0] = (double)(ce * gu) * s.tab.inv_step;
            }
            CGQ_SYNCWARP(); /* Tw is the next edge's */
        }
    }
}

#if !defined(__HIPCC__)
/* The reverse's edges on the tensor cores (GEMM folds, sm_80 and later; session 29). Per edge, with the class s of its
 * sender, T_q = sum_j G[s][q][j] a_j and T'_q = sum_j G[s][q][j] a'_j (a' = step da/dr) are two small products of the
 * row's a and a' (16 edges x S K) with G (S K x 16): a warp takes 16 edges, interpolates a and a' straight into its
 * A fragments (the classes folded into k: an edge's fragment is zero in the other classes' k-steps, skipped where no
 * edge of the tile has that class), G split once per block into B fragments in shared memory. Then
 *   dE/dcut = sum_j a_j U_j = sum_q P_q T_q,  dE/dr = cut sum_j a'_j U_j / step = cut sum_q P_q T'_q / step,
 *   dE/dY_b = cut sum_q Y2P[q][b] T_q:
 * U never exists. The products are float-accurate (tf32_mma.cuh: split operands, a k-step per chain, the chains added
 * in a fixed order). The scalar kernel (k_species_conv_bwd<true>) spent ~1,000 warp instructions per edge on the
 * 2 x 16 x 64 products of MACE-MP-0's layer 0 with their shared-memory operands (568 us per step, ncu, session 28).
 * The k-slots of a k-step are permuted so that a lane's two columns are adjacent: slot tq + 4c is column
 * 8 ks + 2 tq + c, read 8 bytes at a time from the table (a warp's read: 32 consecutive bytes per row). */
template <int KT, bool GEMM>
__global__ void __launch_bounds__(32 * SCT_WARPS)
    k_species_conv_bwd_tc(conv_plan p, species_conv s, int64_t i0, const int64_t *row_ptr, const int32_t *sender,
                          const int32_t *species, const double *r, const float *Y, const float *hu, const float *cut,
                          const float *gsrc, int64_t e0, float *gY, float *gcut, double *gr) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr int K = 8 * KT;
    const int P = s.P, S = s.S, nY = p.nY, SK = S * K, tid = threadIdx.x;
    const int lane = tid % 32, warp = tid / 32, gq = lane / 4, tq = lane % 4;
    uint4 *Bf = reinterpret_cast<uint4 *>(smem_raw);
    float *y2p = reinterpret_cast<float *>(Bf + S * KT * 64);
    int *y2r = reinterpret_cast<int *>(y2p + 256);
    float *Pt = reinterpret_cast<float *>(y2r + 16) + warp * SCT_WARP_FLOATS, *Tt = Pt + 16 * 17, *ceb = Tt + 16 * 17;
    const int64_t i = i0 + blockIdx.x, r0 = row_ptr[i], r1 = row_ptr[i + 1];
    /* GEMM: G[s][q][j] at SK p_off + (s K + j) d3 + c of the block's row of gsrc; in-kernel folds: G [S][P][K] folded
     * here from gM = gsrc as k_species_conv_bwd<false> does (Z = gM x, then sc_bwd_fold) */
    const float *Gi = gsrc + (int64_t)blockIdx.x * SK * P;
    float *Gs = reinterpret_cast<float *>(smem_raw) + sct_words(S, KT);
    if (!GEMM) {
        float *xs = Gs, *Z = xs + sc_r4(S * p.C);
        Gs = Z + sc_r4(S * P * p.C);
        sc_bwd_fold_row(p, s, i, hu, gsrc, xs, Z, Gs);
    }
    for (int t = tid; t < S * KT * 64; t += blockDim.x) { /* B of (class, k-step, n-tile, lane) */
        const int ln = t % 32, nt = t / 32 % 2, ks = t / 64 % KT, sg = t / (64 * KT);
        const int q = nt * 8 + ln / 4, j = ks * 8 + 2 * (ln % 4);
        float g0 = 0.0f, g1 = 0.0f;
        if (q < P && GEMM) {
            const conv_ins &k = p.ins[p.p_ins[q]];
            const float *gk = Gi + (int64_t)SK * k.p_off + (q - k.p_off);
            g0 = gk[(int64_t)(sg * K + j) * k.d3], g1 = gk[(int64_t)(sg * K + j + 1) * k.d3];
        } else if (q < P) {
            g0 = Gs[(sg * P + q) * K + j], g1 = Gs[(sg * P + q) * K + j + 1];
        }
        uint4 b;
        tf32_split(g0, b.x, b.z);
        tf32_split(g1, b.y, b.w);
        Bf[t] = b;
    }
    for (int q = tid; q < P * nY; q += blockDim.x) y2p[q] = s.Y2P[q];
    for (int q = tid; q < P; q += blockDim.x) y2r[q] = s.Y2Pr[q];
    __syncthreads();
    for (int64_t eb = r0 + 16 * warp; eb < r1; eb += 16 * SCT_WARPS) {
        int cls[2];
        float b[2][3], db[2][3];
        const float *kp[2];
        unsigned present = 0; /* the classes of the tile's edges */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t e = eb + gq + 8 * h;
            cls[h] = -1, kp[h] = s.tab.knots;
#pragma unroll
            for (int q = 0; q < 3; q++) b[h][q] = db[h][q] = 0.0f;
            if (e < r1) {
                cls[h] = s.cls[species[sender[e]]];
                kp[h] += (size_t)hermite_weights(s.tab, r[e], b[h], db[h]) * 4 * K;
            }
        }
        for (int sg = 0; sg < S; sg++)
            if (__any_sync(0xffffffffu, cls[0] == sg || cls[1] == sg)) present |= 1u << sg;
        for (int t = lane; t < 256; t += 32) { /* P of the tile's edges (not times the cutoff) */
            const int row = t / 16, q = t % 16;
            const int64_t e = eb + row;
            Pt[row * 17 + q] = q < P && e < r1 ? sc_p_entry(y2p, y2r, q, nY, Y + e * nY) : 0.0f;
        }
        if (lane < 16) ceb[lane] = cut && eb + lane < r1 ? cut[eb + lane] : 1.0f;
        __syncwarp();
        float T[2][4] = {}, Ts[2][4] = {}; /* [n-tile][2h + c]: row gq + 8h, q = 8 nt + 2 tq + c */
#pragma unroll 2
        for (int ks = 0; ks < KT; ks++) {
            uint32_t ah[4], al[4], sh[4], sl[4];
            const int j = ks * 8 + 2 * tq;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const float2 v0 = *reinterpret_cast<const float2 *>(kp[h] + j);
                const float2 v1 = *reinterpret_cast<const float2 *>(kp[h] + K + j);
                const float2 v2 = *reinterpret_cast<const float2 *>(kp[h] + 2 * K + j);
                const float2 v3 = *reinterpret_cast<const float2 *>(kp[h] + 3 * K + j);
                /* hermite_value and hermite_slope on values read 8 bytes at a time */
                const float a0 = hermite_mix(v0.x, v1.x, v2.x, v3.x, b[h]);
                const float a1 = hermite_mix(v0.y, v1.y, v2.y, v3.y, b[h]);
                const float s0 = hermite_mix_slope(v1.x, v2.x, v3.x, db[h]);
                const float s1 = hermite_mix_slope(v1.y, v2.y, v3.y, db[h]);
                tf32_split(a0, ah[h], al[h]);
                tf32_split(a1, ah[h + 2], al[h + 2]);
                tf32_split(s0, sh[h], sl[h]);
                tf32_split(s1, sh[h + 2], sl[h + 2]);
            }
            for (int sg = 0; sg < S; sg++) {
                if (!(present >> sg & 1)) continue; /* uniform over the warp */
                uint32_t mah[4], mal[4], msh[4], msl[4];
#pragma unroll
                for (int f = 0; f < 4; f++) {
                    const bool m = cls[f & 1] == sg;
                    mah[f] = m ? ah[f] : 0u, mal[f] = m ? al[f] : 0u, msh[f] = m ? sh[f] : 0u, msl[f] = m ? sl[f] : 0u;
                }
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    const uint4 bb = Bf[((sg * KT + ks) * 2 + nt) * 32 + lane];
                    mma_split_step(T[nt], mah, mal, bb);
                    mma_split_step(Ts[nt], msh, msl, bb);
                }
            }
        }
        float au[2] = {0.0f, 0.0f}, gu[2] = {0.0f, 0.0f};
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int at = (gq + 8 * h) * 17 + 8 * nt + 2 * tq + c;
                    const float pv = Pt[at];
                    au[h] += pv * T[nt][2 * h + c], gu[h] += pv * Ts[nt][2 * h + c];
                    Tt[at] = T[nt][2 * h + c];
                }
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int off = 1; off < 4; off *= 2) {
                au[h] += __shfl_xor_sync(0xffffffffu, au[h], off);
                gu[h] += __shfl_xor_sync(0xffffffffu, gu[h], off);
            }
        __syncwarp();
        if (tq == 0)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t e = eb + gq + 8 * h;
                if (e < r1) {
                    gcut[e] = cut ? au[h] : 0.0f;
                    gr[e - e0] = (double)(ceb[gq + 8 * h] * gu[h]) * s.tab.inv_step;
                }
            }
        for (int t = lane; t < 16 * nY; t += 32) { /* dE/dY_b = cut sum_q Y2P[q][b] T_q */
            const int row = t / nY, bc = t % nY;
            const int64_t e = eb + row;
            if (e >= r1) continue;
            float v = 0.0f;
            for (int q = 0; q < P; q++) v += y2p[q * nY + bc] * Tt[row * 17 + q];
            gY[e * nY + bc] = ceb[row] * v;
        }
        __syncwarp(); /* Pt, Tt and ceb are the next tile's */
    }
}

typedef void (*sct_fn)(conv_plan, species_conv, int64_t, const int64_t *, const int32_t *, const int32_t *,
                       const double *, const float *, const float *, const float *, const float *, int64_t, float *,
                       float *, double *);
/* the instance for a table of width K (null: none; species_conv.tc_bwd is then off) */
static sct_fn sct_kernel(int K, bool gemm) {
    switch (K) {
    case 8: return gemm ? k_species_conv_bwd_tc<1, true> : k_species_conv_bwd_tc<1, false>;
    case 16: return gemm ? k_species_conv_bwd_tc<2, true> : k_species_conv_bwd_tc<2, false>;
    case 32: return gemm ? k_species_conv_bwd_tc<4, true> : k_species_conv_bwd_tc<4, false>;
    case 64: return gemm ? k_species_conv_bwd_tc<8, true> : k_species_conv_bwd_tc<8, false>;
    case 128: return gemm ? k_species_conv_bwd_tc<16, true> : k_species_conv_bwd_tc<16, false>;
    default: return nullptr;
    }
}
#endif /* !__HIPCC__ */

/* V[k][(s,j)][u] = alpha x[s,u] W[j, w_off_k + u], x[s] the layer-0 features hu of the class's first node */
__global__ void k_species_conv_weights(conv_plan p, species_conv s, const float *hu, float *V) {
    const int SK = s.S * s.K, C = p.C;
    const int64_t total = (int64_t)p.n_ins * SK * C;
    const int32_t *rep = s.cls + s.n_species;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int k = (int)(t / ((int64_t)SK * C)), n = (int)(t / C % SK), u = (int)(t % C);
        const float x = hu[(int64_t)rep[n / s.K] * p.dhu + s.x_off + u];
        V[t] = s.alpha * x * s.W[(int64_t)(n % s.K) * p.wn + p.ins[k].w_off + u];
    }
}

/* VL_i[(s,j)][w] = alpha sum_u x[s,u] W[j, w_off_q + u] L_kl[u][w] for the pairs i of the composed linear, one
 * after another: a warp per row (i, (s,j)), each lane SC_LIN_W of its outputs side by side, the loads of 8 u issued
 * together (sums over u in order, in double; a thread per output, each sum waiting on its own loads, took ~30 us of
 * MACE-MP-0's step) */
#define SC_LIN_W 4
__global__ void k_species_conv_lin_weights(conv_plan p, species_conv s, sc_linear lin, const float *hu, float *VL) {
    const int SK = s.S * s.K, C = p.C, lane = threadIdx.x % CGQ_WARP;
    const int32_t *rep = s.cls + s.n_species;
    const int64_t rows = (int64_t)lin.n * SK, warps = (int64_t)gridDim.x * blockDim.x / CGQ_WARP;
    for (int64_t row = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CGQ_WARP; row < rows; row += warps) {
        const int i = (int)(row / SK), n = (int)(row % SK), Cw = lin.Cw[i];
        const int64_t off = sc_lin_offset(lin, SK, i);
        const float *x = hu + (int64_t)rep[n / s.K] * p.dhu + s.x_off;
        const float *W = s.W + (int64_t)(n % s.K) * p.wn + p.ins[lin.q[i]].w_off;
        const float *L = lin.L + lin.l_off[i];
        for (int w0 = lane; w0 < Cw; w0 += CGQ_WARP * SC_LIN_W) {
            double acc[SC_LIN_W] = {};
#pragma unroll 8
            for (int u = 0; u < C; u++) {
                const double xw = (double)x[u] * (double)W[u];
#pragma unroll
                for (int k = 0; k < SC_LIN_W; k++) {
                    const int w = w0 + k * CGQ_WARP;
                    if (w < Cw) acc[k] = fma(xw, (double)L[(int64_t)u * Cw + w], acc[k]);
                }
            }
#pragma unroll
            for (int k = 0; k < SC_LIN_W; k++) {
                const int w = w0 + k * CGQ_WARP;
                if (w < Cw) VL[off + (int64_t)n * Cw + w] = (float)(s.alpha * acc[k]);
            }
        }
    }
}

/* The composed folds (sc_linear): forward, one part per linear output block with its pairs as segments; reverse (gMl,
 * dE/dMlin, given), one part per conv instruction with its pairs as segments */
static void sc_gemms_linear(const conv_plan &p, const species_conv &s, const sc_work &w, int64_t n, float *Ml,
                            const float *gMl) {
    const int SK = s.S * s.K;
    const int64_t ldq = (int64_t)SK * s.P;
    const sc_linear &lin = *w.lin;
    const cgq_linear *hl = lin.hl;
    std::vector<lin_gemm<float>> gs;
    const int parts = gMl ? p.n_ins : hl->out.n;
    for (int j = 0; j < parts; j++) {
        lin_gemm<float> g{};
        g.n_nodes = n, g.alpha = lin.alpha, g.W = w.V;
        if (gMl) { /* rows of dE/dMlin -> rows of G_q (block S K p_off, S K channels) */
            const conv_ins &k = w.ins[j];
            g.d = k.d3, g.A = gMl, g.lda = hl->out.dim, g.C = w.QG, g.ldc = ldq, g.c_off = SK * k.p_off, g.N = SK;
        } else {
            const cgq_irrep_block &ob = hl->out.b[j];
            g.d = 2 * ob.l + 1, g.A = w.QG, g.lda = ldq, g.C = Ml, g.ldc = hl->out.dim, g.c_off = ob.offset,
            g.N = ob.mul;
        }
        for (int i = 0; i < lin.n; i++) {
            const int q = lin.q[i], kl = lin.kl[i];
            if (gMl ? q != j : hl->ins_out[kl] != j) continue;
            const int t = g.n_segs++;
            g.a_off[t] = gMl ? hl->out.b[hl->ins_out[kl]].offset : SK * w.ins[q].p_off;
            g.K[t] = gMl ? lin.Cw[i] : SK, g.ld[t] = lin.Cw[i], g.w_off[t] = sc_lin_offset(lin, SK, i);
            g.pw[t] = w.ins[q].pw * hl->path_weight[kl];
        }
        gs.push_back(g);
    }
    if (gMl)
        lin_gemm_launch<float, true>(gs);
    else
        lin_gemm_launch<float, false>(gs);
}

/* The GEMMs between Q (or G) rows of n receivers and their rows of M (or gM) (node_ops.cuh). Forward: one part per
 * output block, its instructions as segments (M = sum_k pw_k Q_k V_k); reverse (gM given): one part per instruction
 * (G_k = pw_k gM_k V_k^T). With the linear composed (w.lin), its output's rows instead (sc_gemms_linear). */
static void sc_gemms(const conv_plan &p, const species_conv &s, const sc_work &w, int64_t n, float *M,
                     const float *gM) {
    if (w.lin) return sc_gemms_linear(p, s, w, n, M, gM);
    const int SK = s.S * s.K;
    const int64_t ldq = (int64_t)SK * s.P;
    std::vector<lin_gemm<float>> gs;
    for (int q = 0; q < p.n_ins; q++) {
        const conv_ins &k = w.ins[q];
        lin_gemm<float> g{};
        g.n_nodes = n, g.d = k.d3, g.alpha = 1.0, g.W = w.V;
        if (gM) { /* rows of gM (block out_off, C channels) -> rows of G (block S K p_off, S K channels) */
            g.A = gM, g.lda = p.dM, g.C = w.QG, g.ldc = ldq, g.c_off = SK * k.p_off, g.N = SK, g.n_segs = 1;
            g.a_off[0] = k.out_off, g.K[0] = p.C, g.ld[0] = p.C, g.w_off[0] = (int64_t)q * SK * p.C, g.pw[0] = k.pw;
            gs.push_back(g);
            continue;
        }
        bool first = true; /* the block's first instruction makes its part, with every instruction into it */
        for (int q2 = 0; q2 < q; q2++) first = first && w.ins[q2].out_off != k.out_off;
        if (!first) continue;
        g.A = w.QG, g.lda = ldq, g.C = M, g.ldc = p.dM, g.c_off = k.out_off, g.N = p.C;
        for (int q2 = q; q2 < p.n_ins; q2++) {
            const conv_ins &k2 = w.ins[q2];
            if (k2.out_off != k.out_off) continue;
            const int t = g.n_segs++;
            g.a_off[t] = SK * k2.p_off, g.K[t] = SK, g.ld[t] = p.C, g.w_off[t] = (int64_t)q2 * SK * p.C,
            g.pw[t] = k2.pw;
        }
        gs.push_back(g);
    }
    if (gM)
        lin_gemm_launch<float, true>(gs);
    else
        lin_gemm_launch<float, false>(gs);
}

/* GEMM folds: V of the step (the graph's classes) from hu, layer 0's sender features; once per evaluation, before
 * species_conv_forward */
static void species_conv_weights(const conv_plan &p, const species_conv &s, const sc_work &w, const float *hu) {
    if (w.lin) { /* a warp per row of the pairs' VL */
        const int64_t rows = (int64_t)w.lin->n * s.S * s.K;
        if (rows > 0)
            k_species_conv_lin_weights<<<(unsigned)std::min<int64_t>((rows + 7) / 8, 4096), 8 * CGQ_WARP>>>(
                p, s, *w.lin, hu, w.V);
        return;
    }
    const int64_t nv = (int64_t)p.n_ins * s.S * s.K * p.C;
    if (nv > 0) k_species_conv_weights<<<(unsigned)std::min<int64_t>((nv + 255) / 256, 4096), 256>>>(p, s, hu, w.V);
}

/* The layer's forward for the receivers [i0, i1). GEMM folds (s.gemm; V from species_conv_weights): piece by piece Q
 * and M = Q V (rows of sc_rows_ld: with the linear composed, M is its output). */
static void species_conv_forward(const conv_plan &p, const species_conv &s, const sc_work &w, int64_t i0, int64_t i1,
                                 const int64_t *row_ptr, const int32_t *sender, const int32_t *species, const double *r,
                                 const float *Y, const float *hu, const float *cut, float *M) {
    if (i1 <= i0) return;
    const size_t smem = sc_smem(p, s, false);
    if (!s.gemm) {
        k_species_conv_fwd<false>
            <<<(unsigned)(i1 - i0), sc_fwd_threads(s), smem>>>(p, s, i0, row_ptr, sender, species, r, Y, hu, cut, M);
        return;
    }
    for (int64_t a = i0; a < i1; a += w.piece) {
        const int64_t b = std::min(i1, a + w.piece);
        k_species_conv_fwd<true>
            <<<(unsigned)(b - a), sc_fwd_threads(s), smem>>>(p, s, a, row_ptr, sender, species, r, Y, hu, cut, w.QG);
        sc_gemms(p, s, w, b - a, M + a * sc_rows_ld(p, w), nullptr);
    }
}
/* its reverse given gM (edges of the receivers from e0); GEMM folds: piece by piece G = gM V^T, then the edges (with
 * the linear composed, gM is dE/d of its output) */
static void species_conv_backward(const conv_plan &p, const species_conv &s, const sc_work &w, int64_t i0, int64_t i1,
                                  int64_t e0, const int64_t *row_ptr, const int32_t *sender, const int32_t *species,
                                  const double *r, const float *Y, const float *hu, const float *cut, const float *gM,
                                  float *gY, float *gcut, double *gr) {
    if (i1 <= i0) return;
    const size_t smem = sc_smem(p, s, true);
    if (!s.gemm) {
#if !defined(__HIPCC__)
        if (s.tc_bwd) {
            sct_kernel(s.K, false)<<<(unsigned)(i1 - i0), 32 * SCT_WARPS, sct_smem(p, s)>>>(
                p, s, i0, row_ptr, sender, species, r, Y, hu, cut, gM, e0, gY, gcut, gr);
            return;
        }
#endif
        k_species_conv_bwd<false><<<(unsigned)(i1 - i0), SC_BWD_THREADS, smem>>>(p, s, i0, row_ptr, sender, species, r,
                                                                                 Y, hu, cut, gM, e0, gY, gcut, gr);
        return;
    }
    for (int64_t a = i0; a < i1; a += w.piece) {
        const int64_t b = std::min(i1, a + w.piece);
        sc_gemms(p, s, w, b - a, nullptr, gM + a * sc_rows_ld(p, w));
#if !defined(__HIPCC__)
        if (s.tc_bwd) {
            sct_kernel(s.K, true)<<<(unsigned)(b - a), 32 * SCT_WARPS, sct_smem(p, s)>>>(
                p, s, a, row_ptr, sender, species, r, Y, hu, cut, w.QG, e0, gY, gcut, gr);
            continue;
        }
#endif
        k_species_conv_bwd<true><<<(unsigned)(b - a), SC_BWD_THREADS, smem>>>(p, s, a, row_ptr, sender, species, r, Y,
                                                                              hu, cut, w.QG, e0, gY, gcut, gr);
    }
}

#endif
