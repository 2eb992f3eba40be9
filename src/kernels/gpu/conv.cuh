/* conv.cuh: MACE's interaction convolution (uvu tensor product of sender features with the edge's
 * spherical harmonics, weighted per edge and channel by the radial MLP) as one thread block per
 * receiver. The block is `slots` groups of `cw` threads, one thread per channel; slot s takes edges
 * s, s + slots, ... of the receiver's CSR row, in order, and the slots' partial sums are added in slot
 * order: every sum has a fixed order (deterministic, no atomics). Narrow models (16 channels) get 8 slots
 * so that a block has work for 128 threads; wide ones (128 channels) one slot.
 * Forward: M[i] = sum_e sum_k pw_k w[e,k,u] sum_a x_s[u,a] P_k[a][c], with the SH-contracted couplings
 * P_k[a][c] = sum_b C_k[a,b,c] Y[b] of a batch of up to fwd_eb edges of the row built together in shared memory
 * (three barriers per batch, not per edge); then each instruction runs over the batch's edges of the slot with
 * its messages summed in registers, added once per batch to the slot's sums in shared memory (in T: float sums in
 * fp32, whose tolerance they meet with margin; the energy, forces and virial are summed in double elsewhere).
 * Reverse: per edge dE/dw (for the MLP reverse), dE/dY and dE/dcut (sums over the slot's channels), and
 * the edge's contribution to dE/dx of its sender (summed per sender row afterwards, in order).
 * MACE's layers with weight tables run "std" forms of both (conv_std_at): the instruction list as compile-time
 * constants, and a forward that takes the slot's edges one at a time with every message summed in registers. */
#ifndef CGQ_GPU_CONV_CUH
#define CGQ_GPU_CONV_CUH

#include <utility>

#include "kernels/gpu/radial_table.cuh"

#define CONV_MAX_D 7        /* 2l+1, l <= 3 */
#define CONV_MAX_XDIM 16    /* per-channel width of the sender features (sum of 2l+1) */
#define CONV_MAX_Y 16       /* (l_sh+1)^2 */
#define CONV_BWD_STEPS 8    /* edge steps of the reverse between barriers (its per-edge channel sums buffered) */
#define CONV_MAX_GROUPS 8   /* plans of one layer (build_conv_group) */
#define CONV_RED_W 18       /* per-edge channel sums of the reverse: dE/dY (16), dE/dcut, dE/dr (weight tables) */

/* The SH degree of an SH width NY = (lmax + 1)^2 (1, 4, 9, 16): the edge kernels take the width as a template constant,
 * so that their SH arrays stay in registers (with the width read at run time they went through local memory) */
template <int NY>
__host__ __device__ constexpr int sh_lmax() {
    static_assert(NY == 1 || NY == 4 || NY == 9 || NY == 16, "SH width (lmax <= 3)");
    return NY == 1 ? 0 : NY == 4 ? 1 : NY == 9 ? 2 : 3;
}

/* MACE's convolution in its standard form (conv_std_matches): in1 blocks l1 = 0 .. NL1 - 1 (one each; their parities
 * do not enter: the couplings come from the plan), the SH l2 = 0 .. LY, and a path l1 x l2 -> l3 for every |l1 - l2| <=
 * l3 <= min(l1 + l2, LY) with l1 + l2 + l3 even, ordered by l3, then l1, then l2 (mace's
 * tp_out_irreps_with_instructions: its targets are the SH irreps, and it sorts the paths by their sorted output block),
 * each with C weights. The std kernels take this list as compile-time constants: no instruction switch, no plan fields
 * read per edge. conv_std_at(nl1, ly, q): instruction q's l1, l2, l3 and its offsets in G (d1 d2 per path), in P (d1 d3
 * per path, each block rounded up to 4 floats so that the forward reads them 16 bytes at a time), in the forward's
 * per-channel sums (d3 per path) and in the couplings (d1 d2 d3 per path); q = conv_std_count(nl1, ly): the totals. */
struct conv_std_ins {
    int l1, l2, l3, g_off, p_off, a_off, c_off;
};
__host__ __device__ constexpr conv_std_ins conv_std_at(int nl1, int ly, int q) {
    conv_std_ins r{0, 0, 0, 0, 0, 0, 0};
    int n = 0;
    for (int l3 = 0; l3 <= ly; l3++)
        for (int l1 = 0; l1 < nl1; l1++)
            for (int l2 = 0; l2 <= ly; l2++) {
                if (l3 < (l1 > l2 ? l1 - l2 : l2 - l1) || l3 > l1 + l2 || (l1 + l2 + l3) % 2) continue;
                if (n == q) {
                    r.l1 = l1, r.l2 = l2, r.l3 = l3;
                    return r;
                }
                r.g_off += (2 * l1 + 1) * (2 * l2 + 1);
                r.p_off += ((2 * l1 + 1) * (2 * l3 + 1) + 3) / 4 * 4; /* 16-byte blocks: float4 reads */
                r.a_off += 2 * l3 + 1;
                r.c_off += (2 * l1 + 1) * (2 * l2 + 1) * (2 * l3 + 1);
                n++;
            }
    r.l1 = -1;
    return r;
}
__host__ __device__ constexpr int conv_std_count(int nl1, int ly) {
    int n = 0;
    while (conv_std_at(nl1, ly, n).l1 >= 0) n++;
    return n;
}
/* MACE-MP-0's layer 1 (0e + 1o, lmax 3): 10 paths, the second 1o x 1o -> 0e (sorted by output first) */
static_assert(conv_std_count(2, 3) == 10, "MACE-MP-0 layer 1: 10 paths");
static_assert(conv_std_at(2, 3, 1).l1 == 1 && conv_std_at(2, 3, 1).l2 == 1 && conv_std_at(2, 3, 1).l3 == 0,
              "paths ordered by output l3 first");
static_assert(conv_std_count(1, 2) == 3 && conv_std_count(2, 2) == 7 && conv_std_count(3, 2) == 11,
              "the fixtures' and water models' forms");

struct conv_ins {
    int d1, d2, d3;
    int l12;           /* l1 * 4 + l2: selects the kernels' unrolled instruction body */
    int x_off, xa_off; /* in1 block: e3nn offset; per-channel offset (= l1^2, see build_conv_group) */
    int y_off;         /* SH block offset */
    int acc_off;       /* output block: per-channel offset */
    int out_off;       /* output block: e3nn offset */
    int g_off;         /* G_k (d1 x d2 per channel) in the reverse kernel's shared memory */
    int p_off, c_off;  /* P_k in shared memory; C_k in the packed coupling array */
    int64_t w_off;
    double pw;
    float pwf; /* pw in float (the float kernels: no conversion per instruction) */
    template <class T>
    __device__ T pw_t() const {
        return sizeof(T) == sizeof(float) ? (T)pwf : (T)pw;
    }
};

struct conv_block {
    int off, d, acc_off; /* e3nn offset, 2l+1, per-channel offset */
};

struct conv_plan {
    int ok; /* 0: this layer's convolution is not of the supported form (the v1 steps run it) */
    int n_ins, n_out, n_in1;
    int C, threads, acc_dim, p_dim, g_dim, x_dim, nY, dhu, dM;
    int cw, slots; /* threads per slot (>= C: a divisor or a multiple of the warp), slots per block */
    int slots_bwd, threads_bwd; /* the reverse's (more slots: they share G, see build_conv_group) */
    int fwd_eb;                 /* edges per batch of the forward (its P tables in shared memory) */
    int double_sums;            /* the forward sums messages in double also for float T (k_conv_fwd's A) */
    int single_writer;          /* every output block has exactly one instruction (its sums have one writer) */
    int rcf_pd; /* > 0: the forward may run fused (radial_conv.cuh); the largest d1 d3 of an instruction */
    int std_form; /* the instructions are conv_std_at(n_in1, lmax_sh)'s, with C weights each (fp32, single sums): the
                     tabled layers run the std kernels */
    int sp_dim;   /* P per edge in the std forward's layout (>= p_dim) */
    int64_t wn;
    conv_ins *ins;
    conv_block *outb, *in1b;
    double *cg;
    float *cg_f; /* the same couplings in float, for the float kernels */
    int *p_ins, *p_a, *p_c; /* for each P entry: instruction and (a, c) */
};

/* Where the kernels take the per-edge weights (the radial MLP's outputs) from: rows of w (edges from e0, row stride
 * wn), or, when tab.knots is set (fp32), the layer's weight table at the edges' table variable r. The weights are
 * linear in the MLP's last hidden layer a(r), so w(r) = alpha a(r) W interpolates, over a's intervals, the rows of
 * a's table times alpha W (formed in double on the host, build_weight_tables): per edge 4 reads and 3 products per
 * weight instead of a K-long product, and the weights never exist in memory. Its reverse needs no dE/dw either: the
 * reverse sums dE/dw dw/dr over the channels into dE/dr, as it sums dE/dY. */
template <class T>
struct conv_weights {
    const T *w = nullptr;
    int64_t e0 = 0;
    radial_table tab; /* the weight table (wtable_at) */
    const double *r = nullptr;
    __host__ __device__ bool tabled() const { return sizeof(T) == sizeof(float) && tab.knots; }
};
template <class T>
static conv_weights<T> conv_rows(const T *w, int64_t e0) {
    conv_weights<T> c;
    c.w = w, c.e0 = e0;
    return c;
}
/* edges from e0 weighted from the table tab at their table variable r (fp32) */
static conv_weights<float> conv_table(const radial_table &tab, const double *r, int64_t e0) {
    conv_weights<float> c;
    c.e0 = e0, c.tab = tab, c.r = r;
    return c;
}

template <class T>
__device__ inline const T *conv_cg(const conv_plan &p) {
    return sizeof(T) == sizeof(float) ? reinterpret_cast<const T *>(p.cg_f) : reinterpret_cast<const T *>(p.cg);
}

/* The sender's features of channel u as xv[l^2 + a] (in1b[l] is the plan's block of degree l < NL1; d = 0 where the
 * plan has none, see build_conv_group), in registers: every index below is a compile-time constant after unrolling. */
template <class T, int NL1>
__device__ __forceinline__ void conv_load_x(const conv_block *in1b, const T *x, int u, T (&xv)[CONV_MAX_XDIM]) {
#pragma unroll
    for (int l = 0; l < NL1; l++)
        if (in1b[l].d)
#pragma unroll
            for (int a = 0; a < 2 * l + 1; a++) xv[l * l + a] = x[in1b[l].off + u * (2 * l + 1) + a];
}

/* P_k[a][c] = sum_b C_k[a,b,c] Y[b] of the plan's P entry q (instruction, a, c), from the edge's SH row Ye */
template <class T>
__device__ inline T conv_p_entry(const conv_plan &p, int q, const T *Ye) {
    const conv_ins &k = p.ins[p.p_ins[q]];
    const T *C = conv_cg<T>(p) + k.c_off + p.p_a[q] * k.d2 * k.d3 + p.p_c[q];
    T s = 0;
    for (int b = 0; b < k.d2; b++) s += C[b * k.d3] * Ye[k.y_off + b];
    return s;
}

/* The place in a receiver's message row (e3nn layout) of the sums' entry j = idx C + v (output component idx of the
 * plan's blocks, channel v) */
__device__ inline int conv_out_place(const conv_plan &p, int j) {
    const int idx = j / p.C, v = j % p.C;
    int b = 0;
    while (idx >= p.outb[b].acc_off + p.outb[b].d) b++;
    const conv_block &ob = p.outb[b];
    return ob.off + v * ob.d + (idx - ob.acc_off);
}

#define CONV_L12_CASES(F) \
    F(0, 0) F(0, 1) F(0, 2) F(0, 3) F(1, 0) F(1, 1) F(1, 2) F(1, 3) F(2, 0) F(2, 1) F(2, 2) F(2, 3) F(3, 0) F(3, 1) F(3, 2) F(3, 3)

/* One instruction's messages for channel u over the slot's edges of a batch (edges eb + el, el = slot, slot + S, ...
 * < nb): sum_e s_e sum_a x_e[a] P_e[a][c] in registers, then added to the slot's sums my[(acc_off + c) C]. */
template <class T, class A, bool TAB, int L1, int D3>
__device__ __forceinline__ void conv_fwd_ins(const conv_plan &p, const conv_ins &k, int u, int slot, int nb, int64_t eb,
                                             const int32_t *sid, const T *hu, const conv_weights<T> &cw,
                                             const int32_t *kb, const float *hb, const T *cut, const T *Pb, A *my) {
    constexpr int D1 = 2 * L1 + 1;
    A racc[D3];
#pragma unroll
    for (int c = 0; c < D3; c++) racc[c] = 0;
#pragma unroll 4
    for (int el = slot; el < nb; el += p.slots) {
        const int64_t e = eb + el;
        const T *xs = hu + (int64_t)sid[el] * p.dhu + k.x_off + u * D1;
        T x[D1];
#pragma unroll
        for (int a = 0; a < D1; a++) x[a] = xs[a];
        const float *h = hb + 3 * el;
        const T wr = TAB ? (T)wtable_value(__ldg(wtable_at(cw.tab, kb[el], k.w_off + u)), h[0])
                         : cw.w[(e - cw.e0) * p.wn + k.w_off + u];
        const T s = k.pw_t<T>() * (cut ? wr * cut[e] : wr);
        const T *Pk = Pb + (size_t)el * p.p_dim + k.p_off;
#pragma unroll
        for (int c = 0; c < D3; c++) {
            T t = 0;
#pragma unroll
            for (int a = 0; a < D1; a++) t += x[a] * Pk[a * D3 + c];
            racc[c] += s * t;
        }
    }
#pragma unroll
    for (int c = 0; c < D3; c++) my[(k.acc_off + c) * p.C] += racc[c];
}

#define CONV_L1D3_CASES(F) \
    F(0, 1) F(0, 3) F(0, 5) F(0, 7) F(1, 1) F(1, 3) F(1, 5) F(1, 7) F(2, 1) F(2, 3) F(2, 5) F(2, 7) F(3, 1) F(3, 3) F(3, 5) F(3, 7)

/* Bytes of the forward's message sums (A per entry, per slot), rounded up to 16: its P tables follow */
__host__ __device__ inline size_t conv_fwd_acc_bytes(const conv_plan &p, size_t acc_es) {
    return (acc_es * (size_t)p.acc_dim * p.C * p.slots + 15) / 16 * 16;
}

/* The forwards' shared senders of the edges [eb, eb + nb) and, from a table (TAB), their intervals and wtable_basis
 * (C12: the compact table's Hermite weights) */
template <class T, bool TAB, bool C12>
__device__ __forceinline__ void conv_fwd_stage_edges(int64_t eb, int nb, const int32_t *sender,
                                                     const conv_weights<T> &cw, int32_t *sid, int32_t *kb, float *hb) {
    for (int j = threadIdx.x; j < nb; j += blockDim.x) {
        sid[j] = sender[eb + j];
        if (TAB && C12) {
            float t;
            kb[j] = hermite_interval(cw.tab, cw.r[eb + j], t);
            hermite_chord_weights_at(t, hb + 3 * j);
        } else if (TAB) {
            float t;
            kb[j] = hermite_interval(cw.tab, cw.r[eb + j], t);
            wtable_basis(t, hb + 3 * j);
        }
    }
}

/* The forward's shared tables for the row's edges [eb, eb + nb): SH rows, senders, table intervals and wtable_basis
 * (TAB), then the P entries, per edge in rows of p.p_dim at the instructions' p_off */
template <class T, bool TAB>
__device__ inline void conv_fwd_stage(const conv_plan &p, int64_t eb, int nb, const int32_t *sender, const T *Y,
                                      const conv_weights<T> &cw, T *Pb, T *Ys, int32_t *sid, int32_t *kb, float *hb) {
    __syncthreads(); /* the previous batch's tables are no longer read */
    for (int j = threadIdx.x; j < nb * p.nY; j += blockDim.x) Ys[j] = Y[eb * p.nY + j];
    conv_fwd_stage_edges<T, TAB, false>(eb, nb, sender, cw, sid, kb, hb);
    __syncthreads();
    for (int j = threadIdx.x; j < nb * p.p_dim; j += blockDim.x)
        Pb[j] = conv_p_entry(p, j % p.p_dim, Ys + j / p.p_dim * p.nY);
    __syncthreads();
}

/* The std forward's P entries of one edge and instruction Q, P_k[a][c] = pw sum_b C_k[a,b,c] Y[b] into the edge's row
 * Pe (at p_off): the shape a compile-time constant, the couplings (cg: the plan's, in instruction order) read at
 * constant offsets, Y from the edge's row in global memory; the block stored 16 bytes at a time, its pad entries 0 */
template <int NL1, int NY, int Q>
__device__ __forceinline__ void conv_std_p_ins(const float *cg, float pw, const float *Ye, float *Pe) {
    constexpr conv_std_ins I = conv_std_at(NL1, sh_lmax<NY>(), Q);
    constexpr int D1 = 2 * I.l1 + 1, D2 = 2 * I.l2 + 1, D3 = 2 * I.l3 + 1, NP4 = (D1 * D3 + 3) / 4;
    float y[D2], v[4 * NP4];
#pragma unroll
    for (int b = 0; b < D2; b++) y[b] = Ye[I.l2 * I.l2 + b];
#pragma unroll
    for (int a = 0; a < D1; a++)
#pragma unroll
        for (int c = 0; c < D3; c++) {
            float t = 0;
#pragma unroll
            for (int b = 0; b < D2; b++) t += __ldg(cg + I.c_off + (a * D2 + b) * D3 + c) * y[b];
            v[a * D3 + c] = pw * t;
        }
#pragma unroll
    for (int j = D1 * D3; j < 4 * NP4; j++) v[j] = 0.0f;
    float4 *P4 = reinterpret_cast<float4 *>(Pe + I.p_off);
#pragma unroll
    for (int j = 0; j < NP4; j++) P4[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
}
template <int NL1, int NY, int... Q>
__device__ __forceinline__ void conv_std_p_at(std::integer_sequence<int, Q...>, const conv_plan &p, int q,
                                              const float *Ye, float *Pe) {
    ((q == Q ? conv_std_p_ins<NL1, NY, Q>(p.cg_f, p.ins[Q].pwf, Ye, Pe) : void()), ...);
}

/* The std forward's shared tables for the row's edges [eb, eb + nb): senders, table intervals and wtable_basis (C12:
 * the compact table's Hermite weights), and the P rows (sp_dim, pw in), one task per edge and instruction with the
 * instruction list compiled in (conv_fwd_stage's general P entries, each finding its instruction, block and couplings
 * through the plan in global memory, were a chain of dependent loads per entry); one barrier before and one after.
 * Consecutive tasks are consecutive edges of one instruction, so that a warp's lanes take the same instruction's code
 * (with the instruction varying fastest, every warp ran all NI instructions' code one after another, its lanes masked:
 * ~1,090 SASS instructions per warp and pass for MP-0's layer 1, a third of the edge loop's per edge). */
template <int NL1, int NY, bool C12>
__device__ inline void conv_fwd_stage_std(const conv_plan &p, int64_t eb, int nb, const int32_t *sender, const float *Y,
                                          const conv_weights<float> &cw, float *Pb, int32_t *sid, int32_t *kb,
                                          float *hb) {
    constexpr int NI = conv_std_count(NL1, sh_lmax<NY>());
    __syncthreads(); /* the previous batch's tables are no longer read */
    conv_fwd_stage_edges<float, true, C12>(eb, nb, sender, cw, sid, kb, hb);
    for (int j = threadIdx.x; j < nb * NI; j += blockDim.x) {
        const int q = j / nb, el = j - q * nb;
        conv_std_p_at<NL1, NY>(std::make_integer_sequence<int, NI>{}, p, q, Y + (eb + el) * NY,
                               Pb + (size_t)el * p.sp_dim);
    }
    __syncthreads();
}

/* The forward's last step: M[i]'s entries from the slots' sums (in slot order) */
template <class T, class A>
__device__ inline void conv_fwd_write(const conv_plan &p, const A *acc, T *Mi) {
    const int stride = p.acc_dim * p.C;
    for (int j = threadIdx.x; j < stride; j += blockDim.x) {
        A m = 0;
        for (int q = 0; q < p.slots; q++) m += acc[(size_t)q * stride + j];
        Mi[conv_out_place(p, j)] = (T)m;
    }
}

/* Receivers [i0, i0 + gridDim.x); cw: the raw MLP outputs (conv_weights; TAB: from its table, fp32); cut is non-NULL
 * when the model multiplies the weights by the cutoff (apply_cutoff off). A: the type of the message sums (T; double
 * for NequIP in fp32, whose dense cells sum many edges: conv_fwd_kernel). TAB is a template parameter: a runtime
 * branch in the edge loops cost the untabled forward a third of its speed. */
template <class T, class A = T, bool TAB = false>
__global__ void k_conv_fwd(conv_plan p, int64_t i0, const int64_t *row_ptr, const int32_t *sender, const T *Y,
                           const T *hu, conv_weights<T> cw, const T *cut, T *M) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int u = threadIdx.x % p.cw, slot = threadIdx.x / p.cw, S = p.slots, stride = p.acc_dim * p.C, EB = p.fwd_eb;
    A *acc = reinterpret_cast<A *>(smem_raw);                                           /* message sums per slot */
    T *Pb = reinterpret_cast<T *>(smem_raw + conv_fwd_acc_bytes(p, sizeof(A)));         /* [EB][p_dim] */
    T *Ys = Pb + (size_t)EB * p.p_dim;                                                  /* [EB][nY] */
    int32_t *sid = reinterpret_cast<int32_t *>(Ys + (size_t)EB * p.nY), *kb = sid + EB; /* senders, table intervals */
    float *hb = reinterpret_cast<float *>(kb + EB);                                     /* [EB][3] the edges' t terms */
    A *my = acc + (size_t)slot * stride + u;
    const int64_t i = i0 + blockIdx.x, r0 = row_ptr[i], r1 = row_ptr[i + 1];
    for (int j = threadIdx.x; j < stride * S; j += blockDim.x) acc[j] = 0;
    for (int64_t eb = r0; eb < r1; eb += EB) {
        const int nb = (int)(r1 - eb < EB ? r1 - eb : EB);
        conv_fwd_stage<T, TAB>(p, eb, nb, sender, Y, cw, Pb, Ys, sid, kb, hb);
        if (u >= p.C) continue;
        for (int q = 0; q < p.n_ins; q++) {
            const conv_ins &k = p.ins[q];
            switch ((k.l12 >> 2) * 8 + k.d3) {
#define CONV_FWD_CASE(L1, D3)                                                                     \
    case L1 * 8 + D3:                                                                             \
        conv_fwd_ins<T, A, TAB, L1, D3>(p, k, u, slot, nb, eb, sid, hu, cw, kb, hb, cut, Pb, my); \
        break;
                CONV_L1D3_CASES(CONV_FWD_CASE)
#undef CONV_FWD_CASE
            }
        }
    }
    __syncthreads();
    conv_fwd_write(p, acc, M + i * p.dM);
}

/* The std forward's instruction Q for one edge and channel: racc[a_off + c] += w sum_a x[a] P[a][c], with w from the
 * weight table, x the sender's features (times the cutoff), P the edge's row (pw in) */
template <int NL1, int NY, int Q, int NA>
__device__ __forceinline__ void conv_fwd_std_ins(float w, const float (&xv)[CONV_MAX_XDIM], const float *Pe,
                                                 float (&racc)[NA]) {
    constexpr conv_std_ins I = conv_std_at(NL1, sh_lmax<NY>(), Q);
    constexpr int D1 = 2 * I.l1 + 1, D3 = 2 * I.l3 + 1, NP4 = (D1 * D3 + 3) / 4, XO = I.l1 * I.l1;
    float P[4 * NP4]; /* the block's last 16 bytes may hold pad entries (never written): read, not used */
    const float4 *P4 = reinterpret_cast<const float4 *>(Pe + I.p_off);
#pragma unroll
    for (int j = 0; j < NP4; j++) {
        const float4 v = P4[j];
        P[4 * j] = v.x, P[4 * j + 1] = v.y, P[4 * j + 2] = v.z, P[4 * j + 3] = v.w;
    }
#pragma unroll
    for (int a = 0; a < D1; a++) {
        const float xa = w * xv[XO + a];
#pragma unroll
        for (int c = 0; c < D3; c++) racc[I.a_off + c] += xa * P[a * D3 + c];
    }
}
template <int NL1, int NY, int NA, int... Q>
__device__ __forceinline__ void conv_fwd_std(std::integer_sequence<int, Q...>, const float4 *kn, int C, const float *hb,
                                             const float (&xv)[CONV_MAX_XDIM], const float *Pe, float (&racc)[NA]) {
    /* every instruction's table values in flight at once: one memory wait per edge (read where each instruction
     * needed them, the compiler spread them over the edge's products: five waits per edge, session 20) */
    const float4 tv[] = {__ldg(kn + (int64_t)Q * C)...};
    const float t = hb[0];
    (conv_fwd_std_ins<NL1, NY, Q>(wtable_value(tv[Q], t), xv, Pe, racc), ...);
}
/* the same from the compact table (ka, ke: the edge's interval's first 16-byte chunk of channel u; chunk j at j C: a
 * warp's read of a chunk is 512 consecutive bytes; es: the columns' scales) */
template <int NL1, int NY, int NA, int NI, int... Q>
__device__ __forceinline__ void conv_fwd_std12(std::integer_sequence<int, Q...>, const float4 *ka, const uint4 *ke,
                                               int C, const float *hb, const float (&es)[NI],
                                               const float (&xv)[CONV_MAX_XDIM], const float *Pe, float (&racc)[NA]) {
    constexpr int RA = wtable12_ad_row(NI), RE = wtable12_ev_row(NI);
    float2 ta[RA];
    uint32_t te[RE];
#pragma unroll
    for (int j = 0; j < RA / 2; j++) {
        const float4 v = __ldg(ka + (size_t)j * C);
        ta[2 * j] = make_float2(v.x, v.y), ta[2 * j + 1] = make_float2(v.z, v.w);
    }
#pragma unroll
    for (int j = 0; j < RE / 4; j++) {
        const uint4 v = __ldg(ke + (size_t)j * C);
        te[4 * j] = v.x, te[4 * j + 1] = v.y, te[4 * j + 2] = v.z, te[4 * j + 3] = v.w;
    }
    const float t = hb[0], h10 = hb[1], h11 = hb[2], kt = wtable12_bias(h10, h11);
    (conv_fwd_std_ins<NL1, NY, Q>(wtable12_value(ta[Q], te[Q], es[Q], t, h10, h11, kt), xv, Pe, racc), ...);
}
/* racc's instruction Q into the slot's sums my (the output block's entries at acc_off) */
template <int NL1, int NY, int Q, int NA>
__device__ __forceinline__ void conv_fwd_std_put(const conv_plan &p, const float (&racc)[NA], float *my) {
    constexpr conv_std_ins I = conv_std_at(NL1, sh_lmax<NY>(), Q);
    const int acc_off = p.ins[Q].acc_off;
#pragma unroll
    for (int c = 0; c < 2 * I.l3 + 1; c++) my[(acc_off + c) * p.C] += racc[I.a_off + c];
}
template <int NL1, int NY, int NA, int... Q>
__device__ __forceinline__ void conv_fwd_std_puts(std::integer_sequence<int, Q...>, const conv_plan &p,
                                                  const float (&racc)[NA], float *my) {
    (conv_fwd_std_put<NL1, NY, Q>(p, racc, my), ...);
}

/* k_conv_fwd for a std_form plan with weight tables (fp32): the slot's edges one after another, each sender's features
 * read once per edge, every instruction's messages summed in registers over the whole row (the instruction list is
 * the compile-time conv_std_at(NL1, lmax): no switch, P and the table read 16 bytes at a time). C12: from the table's
 * compact form (radial_table.ad); CC: the plan's channels p.C, where the launch knows them at compile time (else 0). */
template <int NL1, int NY, bool C12 = false, int CC = 0>
__global__ void k_conv_fwd_std(conv_plan p, int64_t i0, const int64_t *row_ptr, const int32_t *sender, const float *Y,
                               const float *hu, conv_weights<float> cw, const float *cut, float *M) {
    constexpr int LY = sh_lmax<NY>(), NI = conv_std_count(NL1, LY), NA = conv_std_at(NL1, LY, NI).a_off;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int u = threadIdx.x % p.cw, slot = threadIdx.x / p.cw, S = p.slots, stride = p.acc_dim * p.C, EB = p.fwd_eb;
    const int nc = CC ? CC : p.C; /* the compact table's chunk stride (CC: p.C known at compile time) */
    float *acc = reinterpret_cast<float *>(smem_raw);
    float *Pb = reinterpret_cast<float *>(smem_raw + conv_fwd_acc_bytes(p, sizeof(float))); /* [EB][sp_dim] */
    int32_t *sid = reinterpret_cast<int32_t *>(Pb + (size_t)EB * p.sp_dim), *kb = sid + EB;
    float *hb = reinterpret_cast<float *>(kb + EB);
    const int64_t i = i0 + blockIdx.x, r0 = row_ptr[i], r1 = row_ptr[i + 1];
    const bool active = u < p.C;
    for (int j = threadIdx.x; j < stride * S; j += blockDim.x) acc[j] = 0;
    int xo[NL1]; /* channel u's features of degree l in a sender's row */
#pragma unroll
    for (int l = 0; l < NL1; l++) xo[l] = p.in1b[l].off + u * (2 * l + 1);
    float racc[NA], es[NI]; /* es: the compact table's column scales of channel u */
#pragma unroll
    for (int j = 0; j < NA; j++) racc[j] = 0;
#pragma unroll
    for (int q = 0; q < NI; q++) es[q] = C12 && active ? __ldg(cw.tab.escale + q * p.C + u) : 0.0f;
    for (int64_t eb = r0; eb < r1; eb += EB) {
        const int nb = (int)(r1 - eb < EB ? r1 - eb : EB);
        conv_fwd_stage_std<NL1, NY, C12>(p, eb, nb, sender, Y, cw, Pb, sid, kb, hb);
        if (!active) continue;
        for (int el = slot; el < nb; el += S) {
            const float *xs = hu + (int64_t)sid[el] * p.dhu, ce = cut ? cut[eb + el] : 1.0f;
            float xv[CONV_MAX_XDIM];
#pragma unroll
            for (int l = 0; l < NL1; l++)
#pragma unroll
                for (int a = 0; a < 2 * l + 1; a++) xv[l * l + a] = ce * xs[xo[l] + a];
            if constexpr (C12) {
                constexpr int CA = wtable12_ad_row(NI) / 2, CE = wtable12_ev_row(NI) / 4; /* 16-byte chunks */
                const size_t k = (size_t)kb[el] * nc;
                conv_fwd_std12<NL1, NY>(std::make_integer_sequence<int, NI>{},
                                        reinterpret_cast<const float4 *>(cw.tab.ad) + k * CA + u,
                                        reinterpret_cast<const uint4 *>(cw.tab.ev) + k * CE + u, nc, hb + 3 * el, es,
                                        xv, Pb + (size_t)el * p.sp_dim, racc);
            } else {
                conv_fwd_std<NL1, NY>(std::make_integer_sequence<int, NI>{}, wtable_at(cw.tab, kb[el], u), p.C,
                                      hb + 3 * el, xv, Pb + (size_t)el * p.sp_dim, racc);
            }
        }
    }
    __syncthreads(); /* acc is zero everywhere */
    if (active)
        conv_fwd_std_puts<NL1, NY>(std::make_integer_sequence<int, NI>{}, p, racc, acc + (size_t)slot * stride + u);
    __syncthreads();
    conv_fwd_write(p, acc, M + i * p.dM);
}

/* Sum of v over each group of `width` consecutive lanes (a power of two <= the warp) in a fixed shuffle
 * pattern; the group's first lane writes it to *red_slot. The loop is unrolled over the warp's steps, each taken
 * where it is below the width (uniform over the warp): the same additions as a loop from width / 2 down. */
template <class T>
__device__ __forceinline__ void group_sum_to_red(T v, int width, T *red_slot) {
#pragma unroll
    for (int off = CGQ_WARP / 2; off > 0; off /= 2)
        if (off < width) v += CGQ_SHFL_DOWN_W(v, off, width);
    if (threadIdx.x % width == 0) *red_slot = v;
}

/* one halving step: keep v[0, H) or v[H, 2H) by the lane's `off` bit, add the partner's half of the same */
template <class T, int H>
__device__ __forceinline__ void scatter_halve(T (&v)[CONV_MAX_Y + 1], int lane, int off, int width, int &comp) {
    const bool hi = (lane & off) != 0;
#pragma unroll
    for (int j = 0; j < H; j++) {
        const T send = hi ? v[j] : v[j + H], keep = hi ? v[j + H] : v[j];
        v[j] = keep + CGQ_SHFL_XOR_W(send, off, width);
    }
    comp = 2 * comp + (hi ? 1 : 0);
    if constexpr (H > 1) scatter_halve<T, H / 2>(v, lane, off / 2, width, comp);
}

/* Sums of the first nY of v[0, NV) over each group of `width` consecutive lanes (width >= NV, powers of two),
 * scattered: each halving step sends half of the remaining values to the partner lane and keeps the other
 * half, so NV values cost NV - 1 shuffles (plus log2(width / NV) for the rest of the group) instead of
 * NV log2(width). The pattern is fixed (deterministic). Component c of the group lands in red_slot[c]. */
template <class T, int NV>
__device__ __forceinline__ void group_scatter_sum(T (&v)[CONV_MAX_Y + 1], int nY, int width, T *red_slot) {
    const int lane = threadIdx.x % width;
    int comp = 0;
    scatter_halve<T, NV / 2>(v, lane, width / 2, width, comp);
#pragma unroll
    for (int off = CGQ_WARP / (2 * NV); off > 0; off /= 2) /* from width / (2 NV) down, unrolled as group_sum_to_red */
        if (2 * NV * off <= width) v[0] += CGQ_SHFL_XOR_W(v[0], off, width);
    if (lane % (width / NV) == 0 && comp < nY) red_slot[comp] = v[0];
}

/* One instruction's reverse for one edge and channel (G_k, the path weight folded in, in channel u's row), with
 * t[a] = sum_b Y[b] G[a][b]: gy[b] += w sum_a x[a] G[a][b], gx[a] += w t[a]; returns sum_a x[a] t[a]. */
template <class T, int L1, int L2, class GA>
__device__ __forceinline__ T conv_bwd_ins_at(const T (&xv)[CONV_MAX_XDIM], const T (&yv)[CONV_MAX_Y], const GA &Gk,
                                             T pww, T (&gx)[CONV_MAX_XDIM], T (&gy)[CONV_MAX_Y + 1]) {
    constexpr int D1 = 2 * L1 + 1, D2 = 2 * L2 + 1, XO = L1 * L1, YO = L2 * L2;
    T s = 0;
#pragma unroll
    for (int a = 0; a < D1; a++) {
        const T xa = xv[XO + a];
        T t = 0;
#pragma unroll
        for (int b = 0; b < D2; b++) {
            const T Gab = Gk(a * D2 + b);
            t += yv[YO + b] * Gab;
            gy[YO + b] += pww * xa * Gab;
        }
        s += xa * t;
        gx[XO + a] += pww * t;
    }
    return s;
}
/* the same with G_k's entries at Gk[j] */
template <class T, int L1, int L2>
__device__ __forceinline__ T conv_bwd_ins(const T (&xv)[CONV_MAX_XDIM], const T (&yv)[CONV_MAX_Y], const T *Gk, T pww,
                                          T (&gx)[CONV_MAX_XDIM], T (&gy)[CONV_MAX_Y + 1]) {
    return conv_bwd_ins_at<T, L1, L2>(xv, yv, [&](int j) { return Gk[j]; }, pww, gx, gy);
}

/* Reverse of k_conv_fwd for receivers [i0, i0 + gridDim.x), given gM = dE/dM. Writes per edge: gw (dE/d raw
 * MLP output, row stride wn, from e0), or with the weight table (TAB) gr[e - e0] = dE/d(table variable) instead;
 * gY (dE/dY, stride nY; gY and gr added to when accumulate: the second and later plans of a layer split by
 * build_conv_group), gcut (dE/dcut through the weights, when cut), gx1e (this edge's dE/dx of its sender, stride
 * dhu, from e0; the plan's in1 blocks; null: not wanted, as for MACE's first layer, whose input is the embedding).
 * gM[i] is fixed along the row, so each channel first folds it into G_k[a][b] = pw sum_c C_k[a,b,c] gM[u,c];
 * then per edge and instruction, with t[a] = sum_b Y[b] G[a][b]:
 *   dE/dw = sum_a x[a] t[a],  dE/dx[a] = w t[a],  dE/dY[b] = w sum_a x[a] G[a][b].
 * STD: the plan is std_form and tabled (fp32): the instructions are conv_std_at's, compile-time constants. */
/* The most threads of a reverse block; the compiler keeps the registers within it. A thread holds its edge's x,
 * Y, dE/dx and dE/dY in registers: up to 65 values, which fit 128 registers (512 threads) in float, not in double.
 * The kernel is instantiated per number of in1 blocks NL1 (l < NL1) and SH width NY, so a thread holds only the
 * registers its layer uses (MACE-MP-0's first layer: one x value, not 16). */
template <class T>
constexpr int conv_bwd_max_threads() { return sizeof(T) == sizeof(float) ? 512 : 256; }

/* k_conv_bwd's G is [C][conv_g_stride] (channel u's row at u times the stride): each G read is then at a constant
 * offset from the thread's row (a [g_dim][C] layout cost an address addition per read, ~6% of the reverse's
 * instructions), and the odd stride puts a warp's 32 channels in 32 different banks. (Blocks of 4 floats at a stride
 * of 4 times an odd number, read 16 bytes at a time by the std reverse, took as long: 2.87 ms for MP-0 layer 1 both,
 * session 19, with more shared memory.) */
__host__ __device__ inline int conv_g_stride(const conv_plan &p) {
    return p.g_dim | 1;
}

/* k_conv_bwd_warp's G row stride: a multiple of 4 floats, an odd number of 16-byte units, so that its lanes read their
 * rows 16 bytes at a time without bank conflicts (each quarter-warp's 8 rows fall in 8 different 16-byte bank groups) */
__host__ __device__ inline int conv_g_stride4(const conv_plan &p) {
    const int s = (p.g_dim + 3) / 4;
    return 4 * (s | 1);
}

/* Elements of T of k_conv_bwd's reduction buffers and G, the weights' offset (16-byte aligned when tabled) */
__host__ __device__ inline size_t conv_bwd_ws_offset(const conv_plan &p, bool tabled) {
    const int width = p.cw < CGQ_WARP ? p.cw : CGQ_WARP;
    const size_t n = (size_t)conv_g_stride(p) * p.C + 2 * (size_t)CONV_BWD_STEPS * (p.threads_bwd / width) * CONV_RED_W;
    return tabled ? (n + 3) / 4 * 4 : n;
}
/* Bytes of k_conv_bwd's shared arrays before its tables (reduction buffers, G, the weights: one per instruction, or
 * the weight table's 4 values), rounded up to 16 */
__host__ __device__ inline size_t conv_bwd_table_offset(const conv_plan &p, size_t es, bool tabled) {
    const size_t n = conv_bwd_ws_offset(p, tabled) + (size_t)(tabled ? 4 : 1) * p.n_ins * p.threads_bwd;
    return (es * n + 15) / 16 * 16;
}

/* The reverse's per-edge sums over a group of `width` channel lanes (one slot's: dE/dY, dE/dcut and, tabled, dE/dr per
 * step of the table) into the group's row of the step's buffer rb. Inlined with a constant width (k_conv_bwd's GW: the
 * warp, in models of 32 channels and more), the lane and group indices and the shuffle steps are constants: no
 * division, no branch per shuffle step (with the width read at run time they were ~70 of the MP-0 reverse's ~920
 * instructions per edge). */
template <class T, int NY>
__device__ __forceinline__ void conv_bwd_group_sums(T (&gy)[CONV_MAX_Y + 1], T gt, bool tabled, int width, T *rb,
                                                    bool cut = true) {
    T *rg = rb + (threadIdx.x / width) * CONV_RED_W; /* the group: slot * groups + group within the slot */
    if (cut) group_sum_to_red(gy[CONV_MAX_Y], width, rg + NY); /* dE/dcut (cut: the model has one on the weights) */
    if (tabled) group_sum_to_red(gt, width, rg + NY + 1);
    if (NY == 1)
        group_sum_to_red(gy[0], width, rg);
    else if (NY <= 4 && width >= 4)
        group_scatter_sum<T, 4>(gy, NY, width, rg);
    else if (width >= 16)
        group_scatter_sum<T, 16>(gy, NY, width, rg);
    else
#pragma unroll
        for (int b = 0; b < NY; b++) group_sum_to_red(gy[b], width, rg + b);
}

/* The std reverse's instruction Q for one edge and channel (conv_bwd_ins): G_Q in the channel's row Gu, the table's 4
 * values wv(Q) (k_conv_bwd: staged at ws4[Q B], B the block's threads; k_conv_bwd_warp: in registers), hd: the edge's
 * wtable_basis, cs its cutoff. (Staged per thread instead, [thread][Q], an odd number of 16-byte values apart, the
 * reverse took 4.97 ms for MP-0's layer 1 instead of 2.87: session 19.) CUT: the model multiplies the weights by the
 * cutoff (else cs is not read and dE/dcut not formed: 3 instructions fewer per weight). G4: Gu is 16-byte aligned
 * (conv_g_stride4), and G_Q's entries are read as the 16-byte pieces that hold them (29 shared loads per channel and
 * edge instead of 88 for MP-0's layer 1). */
template <int NL1, int NY, int Q, bool CUT, bool G4, class WV>
__device__ __forceinline__ void conv_bwd_std_ins(const float *Gu, const WV &wv, const float (&hd)[3], float cs,
                                                 const float (&xv)[CONV_MAX_XDIM],
                                                 const float (&yv)[CONV_MAX_Y], float (&gx)[CONV_MAX_XDIM],
                                                 float (&gy)[CONV_MAX_Y + 1], float &gt) {
    constexpr conv_std_ins I = conv_std_at(NL1, sh_lmax<NY>(), Q);
    const float4 v = wv(Q);
    const float wraw = wtable_value(v, hd[0]), slope = wtable_slope(v, hd[1], hd[2]);
    const float w = CUT ? wraw * cs : wraw;
    float s; /* dE/d(w cut) */
    if constexpr (G4) {
        constexpr int N = (2 * I.l1 + 1) * (2 * I.l2 + 1), c0 = I.g_off / 4, NC = (I.g_off + N - 1) / 4 - c0 + 1;
        constexpr int o = I.g_off - 4 * c0;
        float g[4 * NC];
        const float4 *G4p = reinterpret_cast<const float4 *>(Gu) + c0;
#pragma unroll
        for (int j = 0; j < NC; j++) {
            const float4 c = G4p[j];
            g[4 * j] = c.x, g[4 * j + 1] = c.y, g[4 * j + 2] = c.z, g[4 * j + 3] = c.w;
        }
        s = conv_bwd_ins_at<float, I.l1, I.l2>(xv, yv, [&](int j) { return g[o + j]; }, w, gx, gy);
    } else {
        s = conv_bwd_ins<float, I.l1, I.l2>(xv, yv, Gu + I.g_off, w, gx, gy);
    }
    if constexpr (CUT) {
        gy[CONV_MAX_Y] += s * wraw;
        gt += s * cs * slope;
    } else {
        gt += s * slope;
    }
}
template <int NL1, int NY, bool CUT, bool G4, class WV, int... Q>
__device__ __forceinline__ void conv_bwd_std(std::integer_sequence<int, Q...>, const float *Gu, const WV &wv,
                                             const float (&hd)[3], float cs,
                                             const float (&xv)[CONV_MAX_XDIM], const float (&yv)[CONV_MAX_Y],
                                             float (&gx)[CONV_MAX_XDIM], float (&gy)[CONV_MAX_Y + 1], float &gt) {
    (conv_bwd_std_ins<NL1, NY, Q, CUT, G4>(Gu, wv, hd, cs, xv, yv, gx, gy, gt), ...);
}

/* G_q[a][b] = pw sum_c C_q[a,b,c] gM[u,c] of instruction q for channel u (g: the receiver's row of gM), into u's row of
 * G: the reverse's per-receiver fold (the path weight folded in) */
template <class T>
__device__ __forceinline__ void conv_bwd_fold(const conv_plan &p, const T *g, int u, int q, T *G, int stride) {
    const conv_ins &k = p.ins[q];
    T gc[CONV_MAX_D];
    for (int c = 0; c < k.d3; c++) gc[c] = g[k.out_off + u * k.d3 + c];
    const T *C = conv_cg<T>(p) + k.c_off, pw = k.pw_t<T>();
    for (int a = 0; a < k.d1; a++)
        for (int b = 0; b < k.d2; b++) {
            T s = 0;
            for (int c = 0; c < k.d3; c++) s += C[(a * k.d2 + b) * k.d3 + c] * gc[c];
            G[(size_t)u * stride + k.g_off + a * k.d2 + b] = pw * s;
        }
}

/* conv_bwd_fold for the std form's instruction Q (its shape and offsets compile-time constants: the couplings read at
 * immediate offsets, g's entries in registers; the generic fold indexed a local array and took ~2,000 instructions
 * per channel and receiver for MP-0's layer 1), into channel u's row Gu; the same sums in the same order */
template <int NL1, int NY, int Q>
__device__ __forceinline__ void conv_bwd_fold_std(const conv_plan &p, const float *g, int u, float *Gu) {
    constexpr conv_std_ins I = conv_std_at(NL1, sh_lmax<NY>(), Q);
    constexpr int D1 = 2 * I.l1 + 1, D2 = 2 * I.l2 + 1, D3 = 2 * I.l3 + 1;
    const conv_ins &k = p.ins[Q];
    float gc[D3];
#pragma unroll
    for (int c = 0; c < D3; c++) gc[c] = g[k.out_off + u * D3 + c];
    const float *C = p.cg_f + I.c_off, pw = k.pwf;
#pragma unroll
    for (int a = 0; a < D1; a++)
#pragma unroll
        for (int b = 0; b < D2; b++) {
            float s = 0;
#pragma unroll
            for (int c = 0; c < D3; c++) s += __ldg(C + (a * D2 + b) * D3 + c) * gc[c];
            Gu[I.g_off + a * D2 + b] = pw * s;
        }
}
/* not inlined: inlined in the loop over channels, the couplings' loads were hoisted out of it into 402 spilled values */
template <int NL1, int NY, int... Q>
__device__ __noinline__ void conv_bwd_fold_std_all(std::integer_sequence<int, Q...>, const conv_plan &p,
                                                   const float *g, int u, float *Gu) {
    (conv_bwd_fold_std<NL1, NY, Q>(p, g, u, Gu), ...);
}

template <class T, int NL1, int NY, bool TAB, bool STD = false, int GW = 0>
__global__ void __launch_bounds__(conv_bwd_max_threads<T>())
    k_conv_bwd(conv_plan p, int64_t i0, const int64_t *row_ptr, const int32_t *sender, const T *Y, const T *hu,
               conv_weights<T> cw, const T *cut, const T *gM, T *gw, T *gY, T *gcut, T *gx1e, double *gr,
               int accumulate) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr bool tabled = TAB;
    static_assert(!STD || (TAB && sizeof(T) == sizeof(float)), "the std reverse is the weight tables' (fp32)");
    constexpr int NI = STD ? conv_std_count(NL1, sh_lmax<NY>()) : 0; /* its instructions */
    const int u = threadIdx.x % p.cw, slot = threadIdx.x / p.cw, S = p.slots_bwd, nred = NY + (tabled ? 2 : 1);
    const int width = GW ? GW : p.cw < CGQ_WARP ? p.cw : CGQ_WARP, groups = p.cw / width, nbuf = S * groups;
    const int64_t e0 = cw.e0, wn = p.wn;
    T *red = reinterpret_cast<T *>(smem_raw), *G = red + 2 * (size_t)CONV_BWD_STEPS * nbuf * CONV_RED_W;
    /* this thread's weights of its current edge, [n_ins] with stride blockDim.x (tabled: the table's 4 values, float4
     * ws4): fetched all at once, since the instruction loop's loads one after the other each waited a memory latency */
    T *ws = red + conv_bwd_ws_offset(p, tabled) + threadIdx.x;
    float4 *ws4 = reinterpret_cast<float4 *>(red + conv_bwd_ws_offset(p, tabled)) + threadIdx.x;
    /* the plan's instructions and input blocks, read per edge: from shared memory, as global loads they waited on L1
     * or L2 in every instruction of every edge */
    conv_ins *ins = reinterpret_cast<conv_ins *>(smem_raw + conv_bwd_table_offset(p, sizeof(T), tabled));
    conv_block *in1b = reinterpret_cast<conv_block *>(ins + p.n_ins);
    for (int q = threadIdx.x; q < p.n_ins; q += blockDim.x) ins[q] = p.ins[q];
    for (int l = threadIdx.x; l < p.n_in1; l += blockDim.x) in1b[l] = p.in1b[l];
    const int64_t i = i0 + blockIdx.x, r0 = row_ptr[i], r1 = row_ptr[i + 1];
    const bool active = u < p.C;
    if (active) /* the slots share G; slot s folds instructions s, s + S, ... */
        for (int q = slot; q < p.n_ins; q += S) conv_bwd_fold<T>(p, gM + i * p.dM, u, q, G, conv_g_stride(p));
    __syncthreads(); /* G and the tables */
    const T *Gu = G + (size_t)u * conv_g_stride(p); /* this channel's row of G */
    /* the thread's edge operands: its weights (ws), sender features, SH and cutoff, loaded for the next edge as soon
     * as the current one's products are done, so that their latency overlaps the channel sums below */
    T xv[CONV_MAX_XDIM], yv[CONV_MAX_Y], cs = 1;
    float h0 = 0, h1 = 0, h2 = 0; /* tabled: the edge's wtable_basis */
    bool inside = true;           /* tabled: r within the table (wtable_inside) */
    const bool y16 = (reinterpret_cast<uintptr_t>(Y) & 15) == 0;
    /* Tabled, slots of whole warps (GW): the table intervals of the slot's edges, found by its warps' lanes: lane j
     * holds those of the slot's edge rec_m0 + j (edge r0 + slot + (rec_m0 + j) S), and each thread takes its next
     * edge's from that lane (next_record). Each thread finding its edge's interval itself costs a double division and
     * ~50 instructions per edge and thread (~6% of MP-0's layer 1); narrower slots still do, as the records took the
     * water models' reverse from 85 to 99 registers (4 resident blocks of 128 threads instead of 5). */
    constexpr bool records = TAB && GW > 0;
    const int glane = threadIdx.x % width;
    int rec_k = 0, rec_m0 = -width, nk = 0;
    float rec_t = 0, nt = 0;
    auto next_record = [&](int m) { /* the slot's edge m (its step m); uniform over the block: all lanes shuffle */
        if constexpr (!records) return;
        if (m >= rec_m0 + width) {
            rec_m0 = m;
            const int64_t e = r0 + slot + (int64_t)(m + glane) * S;
            if (e < r1) rec_k = hermite_interval(cw.tab, cw.r[e], rec_t);
        }
        nk = CGQ_SHFL_W(rec_k, m - rec_m0, width);
        nt = CGQ_SHFL_W(rec_t, m - rec_m0, width);
    };
    auto load_edge = [&](int64_t e) { /* records: after next_record of its step */
        if (tabled) {
            float t = nt, b[3];
            const float4 *kn = wtable_at(cw.tab, records ? nk : hermite_interval(cw.tab, cw.r[e], t), u);
            wtable_basis(t, b);
            h0 = b[0], h1 = b[1], h2 = b[2], inside = wtable_inside(t);
            if (STD) { /* instruction q's weights at q C */
#pragma unroll
                for (int q = 0; q < NI; q++) cgq_copy_async(ws4 + q * blockDim.x, kn + (int64_t)q * p.C);
            } else {
                for (int q = 0; q < p.n_ins; q++) cgq_copy_async(ws4 + q * blockDim.x, kn + ins[q].w_off);
            }
        } else {
            const T *we = cw.w + (e - e0) * wn + u;
            for (int q = 0; q < p.n_ins; q++) cgq_copy_async(ws + q * blockDim.x, we + ins[q].w_off);
        }
        conv_load_x<T, NL1>(in1b, hu + (int64_t)sender[e] * p.dhu, u, xv);
        if constexpr (sizeof(T) == sizeof(float) && NY % 4 == 0) {
            if (y16) { /* the edge's SH row 16 bytes at a time */
                const float4 *Y4 = reinterpret_cast<const float4 *>(Y + e * NY);
#pragma unroll
                for (int j = 0; j < NY / 4; j++) {
                    const float4 v = Y4[j];
                    yv[4 * j] = v.x, yv[4 * j + 1] = v.y, yv[4 * j + 2] = v.z, yv[4 * j + 3] = v.w;
                }
                cs = cut ? cut[e] : (T)1;
                return;
            }
        }
#pragma unroll
        for (int b = 0; b < NY; b++) yv[b] = Y[e * NY + b];
        cs = cut ? cut[e] : (T)1;
    };
    next_record(0);
    if (active && r0 + slot < r1) load_edge(r0 + slot);
    int step = 0;
    for (int64_t base = r0; base < r1; base += S, step++) {
        const int64_t e = base + slot;
        T gy[CONV_MAX_Y + 1], gt = 0; /* gy[CONV_MAX_Y]: dE/dcut; gt: dE/dr / step (tabled) */
#pragma unroll
        for (int b = 0; b <= CONV_MAX_Y; b++) gy[b] = 0;
        if (active && e < r1) {
            T gx[CONV_MAX_XDIM];
#pragma unroll
            for (int a = 0; a < CONV_MAX_XDIM; a++) gx[a] = 0;
            T *gwe = tabled ? nullptr : gw + (e - e0) * wn;
            cgq_copy_wait();
            if constexpr (STD) {
                const float hd[3] = {h0, h1, h2};
                const int B = blockDim.x;
                conv_bwd_std<NL1, NY, true, false>(std::make_integer_sequence<int, NI>{}, Gu,
                                                   [&](int q) { return ws4[q * B]; }, hd, cs, xv, yv, gx, gy, gt);
            } else
                for (int q = 0; q < p.n_ins; q++) {
                    const conv_ins &k = ins[q];
                    T wraw, slope = 0;
                    if (tabled) {
                        const float4 v = ws4[q * blockDim.x];
                        wraw = (T)wtable_value(v, h0);
                        slope = (T)wtable_slope(v, h1, h2);
                    } else {
                        wraw = ws[q * blockDim.x];
                    }
                    const T wk = cut ? wraw * cs : wraw;
                    const T *Gk = Gu + k.g_off;
                    T s = 0;
                    switch (k.l12) {
#define CONV_BWD_CASE(L1, L2)                                                                                     \
    case L1 * 4 + L2:                                                                                             \
        if constexpr (L1 < NL1 && (L2 + 1) * (L2 + 1) <= NY) s = conv_bwd_ins<T, L1, L2>(xv, yv, Gk, wk, gx, gy); \
        break;
                        CONV_L12_CASES(CONV_BWD_CASE)
#undef CONV_BWD_CASE
                }
                const T gwk = s; /* dE/d(w cut) */
                if (cut) gy[CONV_MAX_Y] += gwk * wraw;
                const T graw = cut ? gwk * cs : gwk; /* dE/dw */
                if (tabled)
                    gt += graw * slope;
                else
                    gwe[k.w_off + u] = graw;
            }
            if (gx1e) {
                T *gxe = gx1e + (e - e0) * p.dhu;
#pragma unroll
                for (int l = 0; l < 4; l++)
#pragma unroll
                    for (int a = 0; a < 2 * l + 1; a++)
                        if (l < NL1 && in1b[l].d) gxe[in1b[l].off + u * (2 * l + 1) + a] = gx[l * l + a];
            }
            if (!inside) gt = 0; /* past r_max: w is flat */
        }
        next_record(step + 1);
        if (active && e + S < r1) load_edge(e + S);
        /* sums over each slot's channels: shuffles within groups of lanes into the step's buffer, then, every
         * CONV_BWD_STEPS steps, the groups in order (the batches double-buffered: one barrier per batch) */
        const int bi = step % CONV_BWD_STEPS, half = (step / CONV_BWD_STEPS) & 1;
        T *rb = red + ((size_t)half * CONV_BWD_STEPS + bi) * nbuf * CONV_RED_W;
        conv_bwd_group_sums<T, NY>(gy, gt, tabled, width, rb);
        if (bi + 1 < CONV_BWD_STEPS && base + S < r1) continue; /* uniform over the block */
        __syncthreads();
        const int64_t base0 = base - (int64_t)bi * S;
        for (int j = threadIdx.x; j < (bi + 1) * S * nred; j += blockDim.x) {
            const int st = j / (S * nred), s2 = (j / nred) % S, b = j % nred;
            const int64_t e2 = base0 + (int64_t)st * S + s2;
            if (e2 >= r1) continue;
            const T *rs = red + ((size_t)half * CONV_BWD_STEPS + st) * nbuf * CONV_RED_W;
            T acc = 0;
            for (int q = 0; q < groups; q++) acc += rs[(s2 * groups + q) * CONV_RED_W + b];
            if (b < NY)
                gY[e2 * NY + b] = accumulate ? gY[e2 * NY + b] + acc : acc;
            else if (b == NY) {
                if (gcut) gcut[e2] = cut ? acc : 0.0;
            } else { /* dE/dr: added to the earlier plans' (as gY) */
                const double v = (double)acc * cw.tab.inv_step;
                gr[e2 - e0] = accumulate ? gr[e2 - e0] + v : v;
            }
        }
    }
}

/* The std reverse with a group of LW lanes per edge (k_conv_bwd_warp; where it runs and its LW: conv_bwd_warp_lanes;
 * until session 68 always a whole warp, the history below is that form's): lane j takes channels
 * j, j + 32, ... of the warp's edge (the C / 32 of them in turn), so the edge's loads, its table interval and t terms
 * and its channel sums are done once per edge and warp instead of once per edge and channel thread, and
 * dE/dY, dE/dcut and dE/dr are summed over the lane's channels in registers, then over the warp by shuffles: no
 * block-wide sums, no barrier after G's fold. An instruction's table values are read into registers (the warp's 32
 * lanes: 512 consecutive bytes). Blocks of 4 warps per receiver (G, 47 KB for MP-0, allows 4 per SM). Per channel
 * and edge ~630 SASS instructions instead of ~960: MP-0's layer 1 2.44 -> 2.26 ms (H100, session 33). The values are
 * a ring: each slot wv[q] takes the lane's next item's (the next channel, or the next edge's first) as soon as
 * instruction q has read it (after the warp's last edge, that edge's first channel's again: valid, unused), so the
 * loads' latency hides behind the channel's products with no more registers than one channel's values (128): 2.26
 * -> 2.14 ms (session 34). Each edge's interval and t are found once, as the next edge's, and carried to it; with the
 * table in the power basis (wtable_value) and no cutoff selects: 539 -> 506 SASS instructions per channel, 2.14 ->
 * ~2.04-2.08 ms (session 35). Taken back: the next channel's values copied by cp.async through a stage per warp (2.41
 * ms, session 33: the copies' addresses cost more than the latency), fetched into L1 by prefetch instructions (2.30
 * ms, session 34), the in1 offsets held in registers (a spill in the channel loop, session 35), an L2
 * access-policy window keeping the table persistent (2.24-2.54 ms) and streaming stores of the dE/dx rows (no change,
 * session 35). Session 46: G's rows 16-byte aligned (conv_g_stride4) and read 16 bytes at a time, the cutoff's products
 * only where the model has one (CUT), and G folded with the instruction list compiled in (conv_bwd_fold_std): 506 ->
 * 403 SASS instructions per channel and edge, 1.97 -> 1.58 ms (H200). Session 68: groups of 16 lanes by default, each
 * group its own edge, the warp's groups in step (the shuffles are warp-wide). */
#define CONV_BWD_WARPS 4
template <int NL1, int NY, bool CUT, int LW>
__global__ void __launch_bounds__(CONV_BWD_WARPS * CGQ_WARP, 4)
    k_conv_bwd_warp(conv_plan p, int64_t i0, const int64_t *row_ptr, const int32_t *sender, const float *Y,
                    const float *hu, conv_weights<float> cw, const float *cut, const float *gM, float *gw, float *gY,
                    float *gcut, float *gx1e, double *gr, int accumulate) {
    (void)gw; /* tabled: no dE/dw rows */
    static_assert(CGQ_WARP % LW == 0, "groups of lanes within a warp");
    constexpr int NI = conv_std_count(NL1, sh_lmax<NY>());
    constexpr int GPW = CGQ_WARP / LW, NG = CONV_BWD_WARPS * GPW; /* edge groups per warp and per block */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int gs = conv_g_stride4(p); /* G's rows, 16-byte aligned */
    float *G = reinterpret_cast<float *>(smem_raw), *red = G + (size_t)gs * p.C;
    conv_block *in1b = reinterpret_cast<conv_block *>(red + NG * CONV_RED_W);
    for (int l = threadIdx.x; l < p.n_in1; l += blockDim.x) in1b[l] = p.in1b[l];
    const int64_t i = i0 + blockIdx.x, r0 = row_ptr[i], r1 = row_ptr[i + 1], e0 = cw.e0;
    for (int u = threadIdx.x; u < p.C; u += blockDim.x)
        conv_bwd_fold_std_all<NL1, NY>(std::make_integer_sequence<int, NI>{}, p, gM + i * p.dM, u, G + (size_t)u * gs);
    __syncthreads(); /* G and in1b */
    const int glane = threadIdx.x % LW, group = threadIdx.x / LW, warp = threadIdx.x / CGQ_WARP;
    const float *rw = red + group * CONV_RED_W; /* the group's sums (conv_bwd_group_sums) */
    const bool y16 = (reinterpret_cast<uintptr_t>(Y) & 15) == 0;
    /* The warp's steps take its GPW groups' edges b, b + 1, ... (b: r0 + warp GPW, then NG further each step); every
     * group of a warp takes as many steps, since the shuffles are warp-wide: a group past the row's end redoes its
     * last edge (valid loads) and stores nothing. */
    auto edge_of = [&](int64_t b) { return b + group % GPW < r1 ? b + group % GPW : r1 - 1; };
    /* wv: the table values of the lane's (edge, channel); those of its next item are loaded into wv[q] as soon as
     * this channel's instruction q has taken its own, so their latency is hidden behind the rest of the channel */
    float4 wv[NI];
    /* the edge's table column 0 and t, found once: for the first edge here, for each next one in the edge before */
    const float4 *kn = nullptr;
    float tn = 0;
    auto edge_table = [&](int64_t e, float &t) { return wtable_at(cw.tab, hermite_interval(cw.tab, cw.r[e], t), 0); };
    if (r0 + warp * GPW < r1) {
        kn = edge_table(edge_of(r0 + warp * GPW), tn);
#pragma unroll
        for (int q = 0; q < NI; q++) wv[q] = kn[(int64_t)q * p.C + glane];
    }
    for (int64_t b = r0 + warp * GPW; b < r1; b += NG) {
        const int64_t e = edge_of(b);
        const bool stores = b + group % GPW < r1;
        float yv[CONV_MAX_Y], hd[3];
        if (y16 && NY % 4 == 0) {
            const float4 *Y4 = reinterpret_cast<const float4 *>(Y + e * NY);
#pragma unroll
            for (int j = 0; j < NY / 4; j++) {
                const float4 v = Y4[j];
                yv[4 * j] = v.x, yv[4 * j + 1] = v.y, yv[4 * j + 2] = v.z, yv[4 * j + 3] = v.w;
            }
        } else {
#pragma unroll
            for (int j = 0; j < NY; j++) yv[j] = Y[e * NY + j];
        }
        const float cs = CUT ? cut[e] : 1.0f;
        const float te = tn;
        wtable_basis(te, hd);
        const float4 *knn = b + NG < r1 ? edge_table(edge_of(b + NG), tn) : kn; /* the next edge's */
        const float *xs = hu + (int64_t)sender[e] * p.dhu;
        float *gxe = gx1e && stores ? gx1e + (e - e0) * p.dhu : nullptr;
        float gy[CONV_MAX_Y + 1], gt = 0; /* gy[CONV_MAX_Y]: dE/dcut; gt: dE/dr / step */
#pragma unroll
        for (int j = 0; j <= CONV_MAX_Y; j++) gy[j] = 0;
        for (int u = glane; u < p.C; u += LW) {
            const float4 *nx = u + LW < p.C ? kn + u + LW : knn + glane; /* the next item's column */
            float xv[CONV_MAX_XDIM], gx[CONV_MAX_XDIM];
            conv_load_x<float, NL1>(in1b, xs, u, xv);
#pragma unroll
            for (int a = 0; a < CONV_MAX_XDIM; a++) gx[a] = 0;
            conv_bwd_std<NL1, NY, CUT, true>(std::make_integer_sequence<int, NI>{}, G + (size_t)u * gs,
                                  [&](int q) {
                                      const float4 v = wv[q];
                                      wv[q] = nx[(int64_t)q * p.C];
                                      return v;
                                  },
                                  hd, cs, xv, yv, gx, gy, gt);
            if (gxe)
#pragma unroll
                for (int l = 0; l < NL1; l++)
#pragma unroll
                    for (int a = 0; a < 2 * l + 1; a++)
                        if (in1b[l].d) gxe[in1b[l].off + u * (2 * l + 1) + a] = gx[l * l + a];
        }
        if (!wtable_inside(te)) gt = 0; /* past r_max: w is flat */
        conv_bwd_group_sums<float, NY>(gy, gt, true, LW, red, CUT);
        CGQ_SYNCWARP();
        if (stores)
            for (int c = glane; c < NY + 2; c += LW) {
                if (c < NY) {
                    gY[e * NY + c] = accumulate ? gY[e * NY + c] + rw[c] : rw[c];
                } else if (c == NY) {
                    if (gcut) gcut[e] = CUT ? rw[NY] : 0.0f;
                } else { /* dE/dr: added to the earlier plans' (as gY) */
                    const double v = (double)rw[NY + 1] * cw.tab.inv_step;
                    gr[e - e0] = accumulate ? gr[e - e0] + v : v;
                }
            }
        CGQ_SYNCWARP(); /* rw is the next edge's */
        kn = knn;
    }
}

/* Its shared memory: G, the groups' sums, the in1 blocks */
static size_t conv_bwd_warp_smem(const conv_plan &p, int lw) {
    return sizeof(float) * ((size_t)conv_g_stride4(p) * p.C + (size_t)CONV_BWD_WARPS * (CGQ_WARP / lw) * CONV_RED_W) +
           sizeof(conv_block) * p.n_in1;
}

template <class T>
using conv_bwd_fn = void (*)(conv_plan, int64_t, const int64_t *, const int32_t *, const T *, const T *,
                             conv_weights<T>, const T *, const T *, T *, T *, T *, T *, double *, int);

/* The std kernels' forms: in1 l < NL1 <= 3, SH width 4, 9 or 16 */
__host__ __device__ constexpr bool conv_std_instantiated(int n_in1, int nY) {
    return n_in1 >= 1 && n_in1 <= 3 && (nY == 4 || nY == 9 || nY == 16);
}

/* the reverse kernel for the plan's in1 blocks and SH width (NULL: none instantiated); std: the plan is std_form;
 * warps: its slots are whole warps (cw >= the warp: the tabled kernels then take the width as a constant, GW) */
template <class T>
static conv_bwd_fn<T> conv_bwd_kernel(int n_in1, int nY, bool tabled = false, bool std = false, bool warps = false) {
    constexpr bool F = sizeof(T) == sizeof(float); /* the tables are fp32's */
    constexpr int W = F ? CGQ_WARP : 0;
    std = std && tabled && F && conv_std_instantiated(n_in1, nY);
#define CONV_BWD_KERNEL(NL1, NY)                                                                       \
    if (n_in1 == NL1 && nY == NY) {                                                                    \
        constexpr bool S = F && NL1 <= 3 && NY >= 4;                                                   \
        if (std) return warps ? k_conv_bwd<T, NL1, NY, F, S, W> : k_conv_bwd<T, NL1, NY, F, S>;        \
        if (tabled && F) return warps ? k_conv_bwd<T, NL1, NY, F, false, W> : k_conv_bwd<T, NL1, NY, F>; \
        return k_conv_bwd<T, NL1, NY, false>;                                                          \
    }
#define CONV_BWD_KERNELS(NL1) \
    CONV_BWD_KERNEL(NL1, 1) CONV_BWD_KERNEL(NL1, 4) CONV_BWD_KERNEL(NL1, 9) CONV_BWD_KERNEL(NL1, 16)
    CONV_BWD_KERNELS(1)
    CONV_BWD_KERNELS(2) CONV_BWD_KERNELS(3) CONV_BWD_KERNELS(4)
#undef CONV_BWD_KERNELS
#undef CONV_BWD_KERNEL
    return nullptr;
}
template <class T>
static conv_bwd_fn<T> conv_bwd_kernel(const conv_plan &p, bool tabled) {
    return conv_bwd_kernel<T>(p.n_in1, p.nY, tabled, p.std_form, p.cw >= CGQ_WARP);
}

/* The lanes per edge of k_conv_bwd_warp for C channels, 0 where it does not run: by default 16 from 64 channels, none
 * below (k_conv_bwd's std kernel); CGQ_GPU_CONV_BWD_LW=16 or 32 asks for those lanes at every multiple of them,
 * CGQ_GPU_CONV_BWD_WARP=1 for a whole warp at every multiple of 32 channels, =0 for never (for comparisons and the
 * tests); the switches are read once. A group of lanes shares its edge's work (the table interval, the SH row, the sums
 * over its lanes): 16 lanes take two edges per warp at once, with one shuffle step less per sum, and MACE-MP-0's
 * architecture at 64, 96 and 128 channels steps 0.3-3% faster than on a whole warp (session 68, H200:
 * bench/RESULTS.md). Below 64 channels k_conv_bwd runs mace01's and the water MACE's layers faster at 98,304 atoms
 * than 8 lanes per edge do (1% slower at 5,184; 16 lanes slower at both); with 32 channels a whole warp is slower
 * still (session 67). */
#define CONV_BWD_WARP_MIN_C 64
static int conv_bwd_warp_lanes(int C) {
    static const int forced = [] {
        const char *warp = getenv("CGQ_GPU_CONV_BWD_WARP"), *lw = getenv("CGQ_GPU_CONV_BWD_LW");
        if (warp && warp[0] == '0') return 0;
        if (lw && (atoi(lw) == 16 || atoi(lw) == 32)) return atoi(lw);
        return warp && warp[0] == '1' ? 32 : -1; /* 32 lanes: the whole warp on CUDA */
    }();
    const int lanes = forced >= 0 ? forced : C >= CONV_BWD_WARP_MIN_C ? 16 : 0;
    return lanes > 0 && C % lanes == 0 ? lanes : 0;
}

/* k_conv_bwd_warp for the plan: std and tabled (fp32), lw lanes per edge (16 or 32); null where it does not apply.
 * cut: the model multiplies the weights by the cutoff. */
template <class T>
static conv_bwd_fn<T> conv_bwd_warp_kernel(int n_in1, int nY, bool cut, int lw) {
    if constexpr (sizeof(T) == sizeof(float)) {
#define CONV_BWD_WARP_LANES(NL1, NY, CUT)                               \
    return lw == 16 ? k_conv_bwd_warp<NL1, NY, CUT, 16> : lw == 32 ? k_conv_bwd_warp<NL1, NY, CUT, 32> : nullptr;
#define CONV_BWD_WARP_KERNEL(NL1, NY)        \
    if (n_in1 == NL1 && nY == NY) {          \
        if (cut) CONV_BWD_WARP_LANES(NL1, NY, true) \
        CONV_BWD_WARP_LANES(NL1, NY, false)  \
    }
#define CONV_BWD_WARP_KERNELS(NL1) \
    CONV_BWD_WARP_KERNEL(NL1, 4) CONV_BWD_WARP_KERNEL(NL1, 9) CONV_BWD_WARP_KERNEL(NL1, 16)
        CONV_BWD_WARP_KERNELS(1) CONV_BWD_WARP_KERNELS(2) CONV_BWD_WARP_KERNELS(3)
#undef CONV_BWD_WARP_KERNELS
#undef CONV_BWD_WARP_KERNEL
#undef CONV_BWD_WARP_LANES
    }
    (void)n_in1, (void)nY, (void)cut, (void)lw;
    return nullptr;
}
template <class T>
static conv_bwd_fn<T> conv_bwd_warp_kernel(const conv_plan &p, bool tabled, bool cut) {
    const int lw = conv_bwd_warp_lanes(p.C);
    if (!(lw && tabled && p.std_form && conv_std_instantiated(p.n_in1, p.nY))) return nullptr;
    return conv_bwd_warp_kernel<T>(p.n_in1, p.nY, cut, lw);
}

/* first position in sedge[r0, r1) (increasing edge ids) whose edge id is >= e */
__device__ inline int64_t sender_lower_bound(const int32_t *sedge, int64_t r0, int64_t r1, int64_t e) {
    while (r0 < r1) {
        const int64_t m = r0 + (r1 - r0) / 2;
        if (sedge[m] < e) r0 = m + 1;
        else r1 = m;
    }
    return r0;
}

/* dE/dx of sender j summed over its outgoing edges in sender order: one thread per (j, V features). The edges come in
 * chunks [e0, e1) (gx1e holds the chunk's rows); each chunk continues the sums of the chunks before it
 * (first: start from zero), so the order of the additions, and the bits, are those of one pass over all edges. whole:
 * the chunk is every edge, so a sender's rows are all of its edges (no search). V = 4 where the rows allow 16-byte
 * (float) reads: each edge's id is then read once per 4 features (session 20). */
template <class T, int V>
__device__ __forceinline__ void row_load(const T *p, T (&v)[V]) {
    static_assert(V == 1 || (V == 4 && sizeof(T) == sizeof(float)), "float4 or scalar rows");
    if constexpr (V == 4) {
        const float4 q = *reinterpret_cast<const float4 *>(p);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else {
        v[0] = *p;
    }
}
template <class T, int V>
__global__ void k_sender_sum_rows(int64_t n_nodes, int dhu, const int64_t *srow, const int32_t *sedge, int64_t e0,
                                  int64_t e1, int first, int whole, const T *gx1e, T *ghu) {
    const int nv = dhu / V;
    const int64_t total = n_nodes * nv;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < total; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = q / nv;
        const int k = (int)(q % nv) * V;
        T acc[V], in[V];
        if (first)
#pragma unroll
            for (int v = 0; v < V; v++) acc[v] = 0;
        else
            row_load<T, V>(ghu + j * dhu + k, acc);
        int64_t ra = srow[j], rb = srow[j + 1];
        if (!whole) {
            ra = sender_lower_bound(sedge, ra, rb, e0);
            rb = sender_lower_bound(sedge, ra, rb, e1);
        }
        for (int64_t r = ra; r < rb; r++) {
            row_load<T, V>(gx1e + ((int64_t)sedge[r] - e0) * dhu + k, in);
#pragma unroll
            for (int v = 0; v < V; v++) acc[v] += in[v];
        }
        if constexpr (V == 4)
            *reinterpret_cast<float4 *>(ghu + j * dhu + k) = make_float4(acc[0], acc[1], acc[2], acc[3]);
        else
            ghu[j * dhu + k] = acc[0];
    }
}

/* With several chunks: flags[j] = 1 for the senders of the chunk's edges [e0, e1) */
__global__ void k_flag_senders(int64_t e0, int64_t e1, const int32_t *sender, int32_t *flags) {
    for (int64_t e = e0 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < e1; e += (int64_t)gridDim.x * blockDim.x)
        flags[sender[e]] = 1;
}

/* list[scan[j]] = j for the flagged nodes (scan: the flags' exclusive scan) */
__global__ void k_compact_flags(int64_t n, const int32_t *flags, const int64_t *scan, int32_t *list) {
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x)
        if (flags[j]) list[scan[j]] = (int32_t)j;
}

/* k_sender_sum_rows for the *count senders in list only (the others have no edge in the chunk), adding to ghu */
template <class T>
__global__ void k_sender_sum_list(const int64_t *count, const int32_t *list, int dhu, const int64_t *srow,
                                  const int32_t *sedge, int64_t e0, int64_t e1, const T *gx1e, T *ghu) {
    const int64_t total = *count * dhu;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < total; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = list[q / dhu];
        const int k = (int)(q % dhu);
        T acc = ghu[j * dhu + k];
        const int64_t ra = sender_lower_bound(sedge, srow[j], srow[j + 1], e0);
        const int64_t rb = sender_lower_bound(sedge, ra, srow[j + 1], e1);
        for (int64_t r = ra; r < rb; r++) acc += gx1e[((int64_t)sedge[r] - e0) * dhu + k];
        ghu[j * dhu + k] = acc;
    }
}

/* ---- density normalisation (RealAgnosticDensity* blocks): rho_i = sum_e tanh(d_e^2) (x cut_e), where
 * d_e is the density MLP's output, and the messages scaled by 1 / (rho_i + 1) instead of 1 / avg_num_neighbors */
template <class T>
__global__ void k_density_rho(int64_t i0, int64_t n, const int64_t *row_ptr, const T *d, int64_t e0, const T *cut, T *rho) {
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < n; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = i0 + q;
        T r = 0;
        for (int64_t e = row_ptr[i]; e < row_ptr[i + 1]; e++) {
            const T dd = d[e - e0], v = tanh(dd * dd);
            r += cut ? v * cut[e] : v;
        }
        rho[i] = r;
    }
}

/* x[n, :] *= 1 / (rho_n + 1) */
template <class T>
__global__ void k_density_scale(int64_t n_nodes, int width, const T *rho, T *x) {
    const int64_t total = n_nodes * width;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < total; q += (int64_t)gridDim.x * blockDim.x)
        x[q] *= (T)1 / (rho[q / width] + (T)1);
}

/* Reverse through the scaling: grho_n = -<g_n, Mlin_n> / (rho_n + 1) (Mlin scaled), then g_n /= rho_n + 1.
 * One thread per node: the dot product has a fixed order. */
template <class T>
__global__ void k_density_scale_bwd(int64_t n_nodes, int width, const T *rho, const T *Mlin, T *g, T *grho) {
    for (int64_t n = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; n < n_nodes; n += (int64_t)gridDim.x * blockDim.x) {
        const T r1 = rho[n] + (T)1;
        T acc = 0;
        for (int j = 0; j < width; j++) acc += g[n * width + j] * Mlin[n * width + j];
        grho[n] = -acc / r1;
        for (int j = 0; j < width; j++) g[n * width + j] /= r1;
    }
}

/* Per edge: dE/dd of the density MLP output (gd), and dE/dcut += grho th when the cutoff multiplies rho. */
template <class T>
__global__ void k_density_edge_bwd(int64_t e0, int64_t e1, const int32_t *erecv, const T *d, const T *grho, const T *cut,
                                   T *gd, T *gcut) {
    for (int64_t e = e0 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < e1; e += (int64_t)gridDim.x * blockDim.x) {
        const T dd = d[e - e0], th = tanh(dd * dd);
        T g = grho[erecv[e]];
        if (cut) {
            gcut[e] += g * th;
            g *= cut[e];
        }
        gd[e - e0] = g * ((T)1 - th * th) * (T)2 * dd;
    }
}

/* shared memory of the kernels for element size `es` (the double size is the larger, used to plan) */
static size_t conv_fwd_smem(const conv_plan &p, size_t es = sizeof(double)) {
    const size_t acc_es = p.double_sums ? sizeof(double) : es;
    return conv_fwd_acc_bytes(p, acc_es) + es * (size_t)p.fwd_eb * (std::max(p.p_dim, p.sp_dim) + p.nY) +
           (2 * sizeof(int32_t) + 3 * sizeof(float)) * (size_t)p.fwd_eb;
}

template <class T>
using conv_fwd_fn = void (*)(conv_plan, int64_t, const int64_t *, const int32_t *, const T *, const T *,
                             conv_weights<T>, const T *, T *);

/* the std forward for in1 blocks l < n_in1 and SH width nY, from the compact table when c12 (NULL: none
 * instantiated); the compact one with C = 128 channels (MACE-MP-0's) at compile time: its chunks' strides become
 * immediate offsets, 16 fewer SASS instructions per edge (of 274) */
static conv_fwd_fn<float> conv_fwd_std_kernel(int n_in1, int nY, bool c12, int C) {
#define CONV_FWD_STD_NY(NL1, NY)                                                                \
    if (n_in1 == NL1 && nY == NY)                                                               \
        return !c12 ? k_conv_fwd_std<NL1, NY> : C == 128 ? k_conv_fwd_std<NL1, NY, true, 128> \
                                                         : k_conv_fwd_std<NL1, NY, true>;
#define CONV_FWD_STD(NL1) CONV_FWD_STD_NY(NL1, 4) CONV_FWD_STD_NY(NL1, 9) CONV_FWD_STD_NY(NL1, 16)
    CONV_FWD_STD(1)
    CONV_FWD_STD(2)
    CONV_FWD_STD(3)
#undef CONV_FWD_STD
#undef CONV_FWD_STD_NY
    return nullptr;
}

/* the forward kernel for the plan's message sums (tabled: from a weight table; c12: it has the compact form) */
template <class T>
static conv_fwd_fn<T> conv_fwd_kernel(const conv_plan &p, bool tabled = false, bool c12 = false) {
    constexpr bool F = sizeof(T) == sizeof(float); /* the tables are fp32's */
    if constexpr (F)
        if (tabled && p.std_form && conv_std_instantiated(p.n_in1, p.nY))
            return conv_fwd_std_kernel(p.n_in1, p.nY, c12, p.C);
    if (tabled && F) return p.double_sums ? k_conv_fwd<T, double, F> : k_conv_fwd<T, T, F>;
    return p.double_sums ? k_conv_fwd<T, double> : k_conv_fwd<T, T>;
}
static size_t conv_bwd_smem(const conv_plan &p, size_t es = sizeof(double), bool tabled = false) {
    return conv_bwd_table_offset(p, es, tabled) + sizeof(conv_ins) * p.n_ins + sizeof(conv_block) * p.n_in1;
}

/* The reverse for receivers [i0, i0 + n) (k_conv_bwd's arguments): k_conv_bwd_warp where it applies, else
 * conv_bwd_kernel's */
template <class T>
static void conv_bwd_launch(const conv_plan &p, bool tabled, int64_t n, int64_t i0, const int64_t *row_ptr,
                            const int32_t *sender, const T *Y, const T *hu, conv_weights<T> cw, const T *cut,
                            const T *gM, T *gw, T *gY, T *gcut, T *gx1e, double *gr, int accumulate) {
    if (n <= 0) return;
    if (conv_bwd_fn<T> k = conv_bwd_warp_kernel<T>(p, tabled, cut != nullptr)) {
        k<<<(unsigned)n, CONV_BWD_WARPS * CGQ_WARP, conv_bwd_warp_smem(p, conv_bwd_warp_lanes(p.C))>>>(
            p, i0, row_ptr, sender, Y, hu, cw, cut, gM, gw, gY, gcut, gx1e, gr, accumulate);
        return;
    }
    conv_bwd_kernel<T>(p, tabled)<<<(unsigned)n, p.threads_bwd, conv_bwd_smem(p, sizeof(T), tabled)>>>(
        p, i0, row_ptr, sender, Y, hu, cw, cut, gM, gw, gY, gcut, gx1e, gr, accumulate);
}

#endif
