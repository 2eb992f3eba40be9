/* radial_conv.cuh: the fp32 MACE convolution forward fused with the radial MLP's last layer (issue 5's fusion, the
 * forward half). The separate path writes the per-edge TP weights w = alpha a(r) W (3.3 GB per step for MACE-MP-0 at
 * 5,184 atoms, radial_tc.cuh) and k_conv_fwd reads them back; here each instruction's w never leaves the SM.
 *
 * A block takes the receivers whose rows start in its 128 edges of the chunk (RCF_EDGES; a row is never split
 * between blocks, so a block writes its receivers' messages alone) and runs their edges in chunks of RCF_EDGES:
 *   - a(r) of the chunk's edges is interpolated once (as k_radial_tc_fwd) into shared memory, as the TF32 hi/lo B
 *     fragments of mma.m16n8k8 (w^T = W^T a^T: channels are the mma's rows, edges its columns);
 *   - then per instruction k: each warp holds W_k^T of its 16 channels in registers (A fragments), and per 8 edges
 *     forms w with the float-accurate split products of radial_tc.cuh (the same products and sums, so the same
 *     bits), and at once the messages pw w sum_a x_s[u,a] P_k,e[a][c] of its lane's 2 channels x 2 edges;
 *   - P_k,e[a][c] = sum_b C_k[a,b,c] Y_e[b] is built per instruction for the chunk (double-buffered: one barrier per
 *     instruction).
 * A receiver's messages are summed per lane along its edges, then over the 4 lanes that share a channel (fixed
 * shuffles) when its row ends, and written by one lane: fixed order, no atomics (deterministic). A row that
 * continues into the next chunk is written partially and added to by the same lane.
 * When w is non-null (the reverse reads the kept w), the weights are also written there. mma.sync TF32 needs sm_80;
 * HIP builds and older GPUs keep the separate kernels. */
#ifndef CGQ_GPU_RADIAL_CONV_CUH
#define CGQ_GPU_RADIAL_CONV_CUH

#define RCF_EDGES 128 /* edges per chunk, and per block's share of the rows */
#define RCF_MAX_KT 8  /* k-steps of 8 (the table's width <= 64) */
#define RCF_MAX_C 128 /* channels: one warp per 16 */

struct rcf_args {
    conv_plan p;
    radial_table s;
    int kt;                 /* the table width / 8 */
    int64_t i0, i1, e0;     /* receivers [i0, i1) and their first edge */
    const int64_t *row_ptr;
    const int32_t *sender;
    const double *r;
    const float *Y, *hu, *cut; /* cut: non-null when the weights are multiplied by the cutoff */
    float *M;
    float *w; /* non-null: the weights are also written (rows from e0, stride p.wn) */
};

/* shared memory of a block (all dynamic: a static array would count against the opt-in limit): the chunk's B
 * fragments, two P tables, per edge the sender, cutoff and interval, and the block's receiver range */
static size_t rcf_smem(int kt, int pd) {
    return (size_t)RCF_EDGES / 8 * kt * 32 * sizeof(uint4) + ((size_t)2 * RCF_EDGES * pd + 6 * RCF_EDGES) * 4 +
           2 * sizeof(int64_t);
}

#if !defined(__HIPCC__)

/* the first i in [lo, hi] with row_ptr[i] >= e */
__device__ inline int64_t rcf_lower_bound(const int64_t *row_ptr, int64_t lo, int64_t hi, int64_t e) {
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (row_ptr[mid] < e)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* P_k of instruction q for the chunk's n edges from cs: P[el pd + a d3 + c], summed as k_conv_fwd's tables */
__device__ inline void rcf_build_p(const rcf_args &g, int pd, int q, int64_t cs, int n, float *P) {
    const conv_ins &k = g.p.ins[q];
    const int dd = k.d1 * k.d3;
    for (int j = threadIdx.x; j < n * dd; j += blockDim.x) {
        const int el = j / dd, qa = j % dd, a = qa / k.d3, c = qa % k.d3;
        const float *C = g.p.cg_f + k.c_off + a * k.d2 * k.d3 + c;
        const float *Ye = g.Y + (cs + el) * g.p.nY + k.y_off;
        float s = 0.0f;
        for (int b = 0; b < k.d2; b++) s += C[b * k.d3] * Ye[b];
        P[el * pd + qa] = s;
    }
}

/* A receiver's sums: over the 4 lanes of each channel pair, then written (or added: the row began in an earlier
 * chunk) by the lanes tq = c mod 4. Every lane of the warp calls it. */
template <int D3>
__device__ __forceinline__ void rcf_flush(const rcf_args &g, int out_off, int64_t r, bool add, float (&racc)[2][D3],
                                          int u0, int tq) {
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int c = 0; c < D3; c++) {
            float v = racc[h][c];
            v += CGQ_SHFL_XOR_W(v, 1, CGQ_WARP);
            v += CGQ_SHFL_XOR_W(v, 2, CGQ_WARP);
            racc[h][c] = 0.0f;
            const int u = u0 + 8 * h;
            if (c % 4 != tq || u >= g.p.C) continue;
            float *o = g.M + r * g.p.dM + out_off + u * D3 + c;
            *o = add ? *o + v : v;
        }
}

/* One instruction over the chunk's n edges from cs (B fragments afr, P table Pk), walking the receivers from *r
 * (their rows [rs, re)); on return *r is the receiver in progress at the chunk's end (or ib). */
template <int L1, int D3>
__device__ __forceinline__ void rcf_ins(const rcf_args &g, const conv_ins &k, int pd, const uint4 *afr, const float *Pk,
                                        const int32_t *sid, const float *cuts, int64_t cs, int n, bool last_chunk,
                                        int64_t ib, int64_t *r_io) {
    constexpr int D1 = 2 * L1 + 1;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4, kt = g.kt;
    const int C = g.p.C, u0 = 16 * warp + gq;
    /* W_k^T's A fragments of the warp's 16 channels: a[h + 2c] = (channel u0 + 8h, k-step column tq + 4c) */
    uint32_t wh[RCF_MAX_KT][4], wl[RCF_MAX_KT][4];
    const uint4 *Wt = reinterpret_cast<const uint4 *>(g.s.w_tc);
#pragma unroll
    for (int ks = 0; ks < RCF_MAX_KT; ks++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (ks < kt && u0 + 8 * h < C) v = __ldg(Wt + ((k.w_off + u0 + 8 * h) * kt + ks) * 4 + tq);
            wh[ks][h] = v.x, wh[ks][h + 2] = v.y, wl[ks][h] = v.z, wl[ks][h + 2] = v.w;
        }
    const float alpha = g.s.alpha, pw = (float)k.pw;
    const int x_off = k.x_off, out_off = k.out_off; /* in registers: the stores below may not alias them */
    const int64_t w_off = k.w_off;
    /* the row [rs, re) of receiver r relative to cs, clamped to [-1, n + 1] (a chunk has at most RCF_EDGES edges) */
    auto rel = [&](int64_t e) { return (int)(e < cs ? -1 : e - cs > n ? n + 1 : e - cs); };
    int64_t r = *r_io;
    int rs = rel(g.row_ptr[r]), re = rel(g.row_ptr[r + 1]);
    float racc[2][D3];
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int c = 0; c < D3; c++) racc[h][c] = 0.0f;
    const int ntiles = (n + 7) / 8;
    for (int nt = 0; nt < ntiles; nt++) {
        /* the sender features of the lane's edges and channels, loaded first: their latency overlaps the products */
        float xv[2][2][D1];
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int el = 8 * nt + 2 * tq + c;
            const float *xs = g.hu + (int64_t)sid[el < n ? el : 0] * g.p.dhu + x_off;
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int a = 0; a < D1; a++)
                    xv[c][h][a] = el < n && u0 + 8 * h < C ? __ldg(xs + (u0 + 8 * h) * D1 + a) : 0.0f;
        }
        /* w^T for the warp's channels and edges 8 nt .. 8 nt + 8: acc[2h + c] = (channel u0 + 8h, edge 2 tq + c) */
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const uint4 *bq = afr + (size_t)nt * kt * 32 + lane;
#pragma unroll
        for (int ks = 0; ks < RCF_MAX_KT; ks++)
            if (ks < kt) {
                const uint4 b = bq[ks * 32]; /* {a[e][j] hi, a[e][j + 4] hi, lo, lo}: e = 8 nt + gq, j = 8 ks + tq */
                float tc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, tm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                mma_tf32(tc, wh[ks], b.z, b.w); /* the products and their order of mma_split_step */
                mma_tf32(tm, wh[ks], b.x, b.y);
                mma_tf32(tc, wl[ks], b.x, b.y);
#pragma unroll
                for (int q = 0; q < 4; q++) acc[q] += tm[q] + tc[q];
            }
        float wv[4];
#pragma unroll
        for (int q = 0; q < 4; q++) wv[q] = alpha * acc[q];
        if (g.w)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int el = 8 * nt + 2 * tq + q % 2, u = u0 + 8 * (q / 2);
                if (el < n && u < C) g.w[(cs + el - g.e0) * g.p.wn + w_off + u] = wv[q];
            }
        const int tile_end = min(8 * nt + 8, n);
        for (;;) {
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int el = 8 * nt + 2 * tq + c;
                if (el >= n || el < rs || el >= re) continue;
                const float *Pe = Pk + el * pd;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int u = u0 + 8 * h;
                    if (u >= C) continue;
                    const float(&x)[D1] = xv[c][h];
                    const float wr = wv[2 * h + c], s = pw * (g.cut ? wr * cuts[el] : wr);
#pragma unroll
                    for (int cc = 0; cc < D3; cc++) {
                        float t = 0.0f;
#pragma unroll
                        for (int a = 0; a < D1; a++) t += x[a] * Pe[a * D3 + cc];
                        racc[h][cc] += s * t;
                    }
                }
            }
            if (re > tile_end) break; /* the row goes on in the next 8 edges */
            rcf_flush<D3>(g, out_off, r, rs < 0, racc, u0, tq);
            if (++r >= ib) break;
            rs = re, re = rel(g.row_ptr[r + 1]);
        }
    }
    if (last_chunk) { /* rows with no edges left (a block with no edges: all of them) are zeros */
        while (r < ib && re <= n) {
            rcf_flush<D3>(g, out_off, r, rs < 0, racc, u0, tq);
            if (++r >= ib) break;
            rs = re, re = rel(g.row_ptr[r + 1]);
        }
    } else if (r < ib && rs < n) { /* the row goes on in the next chunk: its sums so far */
        rcf_flush<D3>(g, out_off, r, rs < 0, racc, u0, tq);
    }
    *r_io = r;
}

/* two blocks per SM (128 registers, a few spilled): 24.8 against 29.1 ms per MP-0 step with one (session 15) */
__global__ void __launch_bounds__(32 * RCF_MAX_C / 16, 2) k_radial_conv_fwd(rcf_args g, int pd) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int kt = g.kt, K = 8 * kt;
    uint4 *afr = reinterpret_cast<uint4 *>(smem_raw);
    float *Pbuf = reinterpret_cast<float *>(afr + RCF_EDGES / 8 * kt * 32); /* [2][RCF_EDGES][pd] */
    int32_t *sid = reinterpret_cast<int32_t *>(Pbuf + 2 * RCF_EDGES * pd);
    float *cuts = reinterpret_cast<float *>(sid + RCF_EDGES);
    float *hb = cuts + RCF_EDGES; /* [RCF_EDGES][3]: hermite_weights' b */
    int *hk = reinterpret_cast<int *>(hb + 3 * RCF_EDGES);
    int64_t *bounds = reinterpret_cast<int64_t *>(hk + RCF_EDGES); /* 8-byte aligned: RCF_EDGES is even */
    if (threadIdx.x == 0) {
        const int64_t lo = g.e0 + (int64_t)blockIdx.x * RCF_EDGES;
        bounds[0] = rcf_lower_bound(g.row_ptr, g.i0, g.i1, lo);
        bounds[1] = blockIdx.x + 1 == gridDim.x ? g.i1 : rcf_lower_bound(g.row_ptr, g.i0, g.i1, lo + RCF_EDGES);
    }
    __syncthreads();
    const int64_t ia = bounds[0], ib = bounds[1];
    if (ia >= ib) return; /* every row starting here began in an earlier block's share */
    const int64_t eb0 = g.row_ptr[ia], eb1 = g.row_ptr[ib];
    int64_t r = ia;
    for (int64_t cs = eb0;; cs += RCF_EDGES) {
        const int n = (int)(eb1 - cs < RCF_EDGES ? eb1 - cs : RCF_EDGES), ntiles = (n + 7) / 8;
        const bool last = cs + RCF_EDGES >= eb1;
        __syncthreads(); /* the previous chunk's tables are no longer read */
        for (int j = threadIdx.x; j < n; j += blockDim.x) {
            float b[3], db[3];
            hk[j] = hermite_weights(g.s, g.r[cs + j], b, db);
            hb[3 * j] = b[0], hb[3 * j + 1] = b[1], hb[3 * j + 2] = b[2];
            sid[j] = g.sender[cs + j];
            cuts[j] = g.cut ? g.cut[cs + j] : 1.0f;
        }
        __syncthreads();
        /* the chunk's a(r) as B fragments: entry (e, ks, tq) at [(e / 8) kt + ks][4 (e % 8) + tq], zeros past n */
        for (int q = threadIdx.x; q < ntiles * 8 * kt * 4; q += blockDim.x) {
            const int t4 = q % 4, ks = (q / 4) % kt, el = q / (4 * kt);
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (el < n) {
                const float *p = g.s.knots + (size_t)hk[el] * 4 * K,
                            b[3] = {hb[3 * el], hb[3 * el + 1], hb[3 * el + 2]};
                const int j = 8 * ks + t4;
                tf32_split(hermite_value(p, K, j, b), v.x, v.z);
                tf32_split(hermite_value(p, K, j + 4, b), v.y, v.w);
            }
            afr[((el / 8) * kt + ks) * 32 + (el % 8) * 4 + t4] = v;
        }
        rcf_build_p(g, pd, 0, cs, n, Pbuf);
        __syncthreads();
        int64_t r_end = r;
        for (int q = 0; q < g.p.n_ins; q++) {
            const conv_ins k = g.p.ins[q];
            const float *Pk = Pbuf + (size_t)(q % 2) * RCF_EDGES * pd;
            int64_t rq = r;
            switch ((k.l12 >> 2) * 8 + k.d3) {
#define RCF_CASE(L1, D3)                                                     \
    case L1 * 8 + D3:                                                        \
        rcf_ins<L1, D3>(g, k, pd, afr, Pk, sid, cuts, cs, n, last, ib, &rq); \
        break;
                CONV_L1D3_CASES(RCF_CASE)
#undef RCF_CASE
            }
            r_end = rq;
            if (q + 1 < g.p.n_ins) rcf_build_p(g, pd, q + 1, cs, n, Pbuf + (size_t)((q + 1) % 2) * RCF_EDGES * pd);
            __syncthreads();
        }
        r = r_end;
        if (last) break;
    }
}

#endif /* !__HIPCC__ */

/* Whether layer plan p's forward can run fused with its table s (fp32 on the tensor cores; every output block written
 * by one instruction, which radial_conv's lanes then own), and its shared memory fits `optin` bytes */
static bool rcf_fits(const conv_plan &p, const radial_table &s, size_t optin) {
    return p.ok && p.rcf_pd > 0 && s.w_tc && s.width % 8 == 0 && s.width / 8 <= RCF_MAX_KT && p.C <= RCF_MAX_C &&
           rcf_smem(s.width / 8, p.rcf_pd) <= optin;
}

/* The fused forward of receivers [i0, i1) (edges [e0, e1)): messages M, and w (rows from e0) when non-null */
static void radial_conv_forward(const conv_plan &p, const radial_table &s, int64_t i0, int64_t i1, int64_t e0,
                                int64_t e1, const int64_t *row_ptr, const int32_t *sender, const double *r,
                                const float *Y, const float *hu, const float *cut, float *M, float *w) {
#if defined(__HIPCC__)
    (void)p, (void)s, (void)i0, (void)i1, (void)e0, (void)e1, (void)row_ptr, (void)sender, (void)r, (void)Y, (void)hu,
        (void)cut, (void)M, (void)w; /* never chosen: rcf_fits needs the tensor-core table */
#else
    if (i1 <= i0) return;
    rcf_args g;
    g.p = p, g.s = s, g.kt = s.width / 8;
    g.i0 = i0, g.i1 = i1, g.e0 = e0;
    g.row_ptr = row_ptr, g.sender = sender, g.r = r, g.Y = Y, g.hu = hu, g.cut = cut, g.M = M, g.w = w;
    const unsigned blocks = (unsigned)std::max<int64_t>(1, (e1 - e0 + RCF_EDGES - 1) / RCF_EDGES);
    const int threads = 32 * ((p.C + 15) / 16);
    // clang-format off (it splits the launch's >>> of a non-template kernel)
    k_radial_conv_fwd<<<blocks, threads, rcf_smem(g.kt, p.rcf_pd)>>>(g, p.rcf_pd);
    // clang-format on
#endif
}

#endif
