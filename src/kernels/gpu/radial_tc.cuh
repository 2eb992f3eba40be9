/* radial_tc.cuh: the fp32 radial MLP's last layer, w = alpha a(r) W, on the tensor cores, fused with its table
 * (radial_spline.cuh): a(r) is interpolated straight into the product's operand registers, never stored.
 * The products are float-accurate: x = x_hi + x_lo with both parts rounded to TF32, and a b = a_hi b_hi + a_hi b_lo +
 * a_lo b_hi (the dropped a_lo b_lo is ~2^-22 of the product). The tensor cores truncate their sums, and a chain of
 * 192 such sums (cuBLAS over [a_hi a_hi a_lo]) missed the fp32 energy tolerance (bench/RESULTS.md, session 10), so
 * each mma here starts from zero and covers one k-step of 8 products, and the k-steps are added in float registers,
 * rounded to nearest, in a fixed order (deterministic). MACE-MP-0 at 5,184 atoms (H100): 2.83 ms against 3.86 for
 * the table kernel and SGEMM. The reverse (dE/da = dE/dw W^T, then dE/dr from the table) is one kernel of the same
 * split products (k_radial_tc_bwd, session 15: 2.23 ms against 2.72 for SGEMM and the table pass; session 12's split
 * on cuBLAS had taken 3.1 to 3.3). mma.sync.m16n8k8.tf32 needs sm_80; HIP builds and older GPUs keep SGEMM.
 * Included by radial_spline.cuh. */
#ifndef CGQ_GPU_RADIAL_TC_CUH
#define CGQ_GPU_RADIAL_TC_CUH

#define RTC_WARPS 8 /* warps per block, 16 edges each */
#define RTC_ROWS (16 * RTC_WARPS)
#define RTC_BN 32 /* W's columns per shared-memory tile */
#define RTB_PAIRS 2 /* the reverse: pairs of k-steps (16 columns of dE/dw) per shared-memory stage */

#if !defined(__HIPCC__)

/* Row stride (u32) in shared memory of rows of n u32 read as 16-byte fragments: = 16 mod 32, so that the 8 lanes of
 * each quarter-warp phase (two rows, four 16-byte pieces each) hit 32 different banks */
__host__ __device__ constexpr int rtc_stride(int n) { return (n + 31) / 32 * 32 + 16; }

/* rows x n u32 from src (contiguous rows) into dst (row stride rtc_stride(n)) as cp.async copies of 16 bytes, one
 * commit group of this thread's copies: W's tiles are double-buffered, the next one in flight while the current one
 * is multiplied */
template <int N>
__device__ __forceinline__ void rtc_fill(uint32_t *dst, const uint32_t *src, int rows) {
    constexpr int per_row = N / 4;
    for (int i = threadIdx.x; i < rows * per_row; i += blockDim.x) {
        const int row = i / per_row, c4 = (i % per_row) * 4;
        __pipeline_memcpy_async(dst + row * rtc_stride(N) + c4, src + row * N + c4, 16);
    }
    __pipeline_commit();
}

/* w[e, :] = alpha a(r_e) W for edges e0 .. e0 + ne (rows of ld ldw); Wf: W (K = 8 KT rows, wn columns) in
 * radial_tc_layout, tiles of RTC_BN columns. A warp takes 16 edges and interpolates their a exactly
 * as k_radial_table_fwd, into its A fragments; the block's warps share W's tiles in shared memory. */
template <int KT>
__global__ void __launch_bounds__(32 * RTC_WARPS, 2)
    k_radial_tc_fwd(radial_table s, const uint32_t *Wf, int wn, const double *r, int64_t e0, int64_t ne, float *w,
                    int64_t ldw) {
    constexpr int K = 8 * KT, N = 2 * K, RS = rtc_stride(N); /* a tile row: one column of W, its K hi and lo */
    __shared__ __align__(16) uint32_t Bs[2][RTC_BN * RS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
    const int64_t row0 = ((int64_t)blockIdx.x * RTC_WARPS + warp) * 16;
    rtc_fill<N>(Bs[0], Wf, RTC_BN);
    uint32_t ah[KT][4], al[KT][4];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t row = row0 + gq + 8 * h;
        const bool valid = row < ne;
        float b[3] = {0.0f, 0.0f, 0.0f}, db[3];
        const float *p = s.knots;
        if (valid) p += (size_t)hermite_weights(s, r[e0 + row], b, db) * 4 * K;
#pragma unroll
        for (int ks = 0; ks < KT; ks++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int j = ks * 8 + tq + 4 * c;
                const float v = valid ? hermite_value(p, K, j, b) : 0.0f;
                tf32_split(v, ah[ks][h + 2 * c], al[ks][h + 2 * c]);
            }
    }
    const float alpha = s.alpha;
    /* float2 stores where they stay aligned (w: a layer's rows inside the kept outputs of all layers, whose offset
     * need not be even) */
    const bool pairs = ldw % 2 == 0 && reinterpret_cast<uintptr_t>(w) % sizeof(float2) == 0;
    for (int n0 = 0, buf = 0; n0 < wn; n0 += RTC_BN, buf ^= 1) {
        if (n0 + RTC_BN < wn) rtc_fill<N>(Bs[buf ^ 1], Wf + (int64_t)(n0 + RTC_BN) * N, RTC_BN);
        else __pipeline_commit();
        __pipeline_wait_prior(1); /* this tile's copies (this thread's) are done */
        __syncthreads();          /* and everyone's */
        for (int nt = 0; nt < RTC_BN / 8 && n0 + nt * 8 < wn; nt++) {
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            const uint4 *bq = reinterpret_cast<const uint4 *>(&Bs[buf][(nt * 8 + gq) * RS + 4 * tq]);
#pragma unroll
            for (int ks = 0; ks < KT; ks++) mma_split_step(acc, ah[ks], al[ks], bq[4 * ks]);
            const int col = n0 + nt * 8 + 2 * tq;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t row = row0 + gq + 8 * h;
                if (row >= ne || col >= wn) continue;
                float *o = w + row * ldw + col;
                const float v0 = alpha * acc[2 * h], v1 = alpha * acc[2 * h + 1];
                if (col + 1 >= wn) o[0] = v0;
                else if (pairs) *reinterpret_cast<float2 *>(o) = make_float2(v0, v1);
                else o[0] = v0, o[1] = v1;
            }
        }
        __syncthreads(); /* the tile is read before the next fill overwrites it */
    }
}

/* The reverse: gr[e] = sum_j dE/da_j da_j/dr with dE/da = alpha dE/dw W^T, per warp 16 edges and all K = 8 KT of
 * their dE/da (KT n-tiles of the mma: 4 KT accumulators per lane), summed over dE/dw's wn columns (the mma's k) in
 * steps of 8 with the split products and float sums of the forward. The k order is permuted so that a lane's four A
 * values of two k-steps are adjacent columns of dE/dw (one 16-byte load; the host layout radial_tc_layout_bwd
 * permutes W the same way). dE/da never leaves the registers: each lane multiplies its values by the table's slopes,
 * and the 4 lanes of a row add theirs (fixed shuffles). Deterministic; replaces an SGEMM and its table pass. */
template <int KT>
__global__ void __launch_bounds__(32 * RTC_WARPS)
    k_radial_tc_bwd(radial_table s, const uint4 *Wb, int wn, const double *r, int64_t e0, int64_t ne, const float *gw,
                    double *gr) {
    constexpr int K = 8 * KT, STAGE = RTB_PAIRS * 2 * KT * 32; /* uint4 per stage */
    __shared__ __align__(16) uint4 Bs[2][STAGE];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
    const int64_t row0 = ((int64_t)blockIdx.x * RTC_WARPS + warp) * 16;
    const int pairs = (wn + 15) / 16, stages = (pairs + RTB_PAIRS - 1) / RTB_PAIRS;
    const bool vec = wn % 4 == 0 && reinterpret_cast<uintptr_t>(gw) % 16 == 0;
    /* stage st of W's layout into dst, one commit group (the host layout pads to whole stages) */
    auto fill = [&](int st, uint4 *dst) {
        const uint4 *src = Wb + (size_t)st * STAGE;
        for (int i = threadIdx.x; i < STAGE; i += blockDim.x) __pipeline_memcpy_async(dst + i, src + i, 16);
        __pipeline_commit();
    };
    float acc[KT][4];
#pragma unroll
    for (int jt = 0; jt < KT; jt++)
#pragma unroll
        for (int q = 0; q < 4; q++) acc[jt][q] = 0.0f;
    /* this lane's 4 columns of pair p of the rows gq, gq + 8 (zeros past the rows and columns) */
    auto load_pair = [&](int p, float(&a4)[2][4]) {
        const int n0 = p * 16 + 4 * tq;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t row = row0 + gq + 8 * h;
            const float *src = gw + row * (int64_t)wn + n0;
            if (row < ne && vec && n0 + 3 < wn) {
                const float4 v = __ldg(reinterpret_cast<const float4 *>(src));
                a4[h][0] = v.x, a4[h][1] = v.y, a4[h][2] = v.z, a4[h][3] = v.w;
            } else {
#pragma unroll
                for (int q = 0; q < 4; q++) a4[h][q] = row < ne && n0 + q < wn ? __ldg(src + q) : 0.0f;
            }
        }
    };
    float cur[RTB_PAIRS][2][4], nxt[RTB_PAIRS][2][4]; /* dE/dw of this stage and the next, loaded a stage ahead */
#pragma unroll
    for (int pp = 0; pp < RTB_PAIRS; pp++) load_pair(pp, cur[pp]);
    fill(0, Bs[0]);
    for (int st = 0, buf = 0; st < stages; st++, buf ^= 1) {
        if (st + 1 < stages)
            fill(st + 1, Bs[buf ^ 1]);
        else
            __pipeline_commit();
#pragma unroll
        for (int pp = 0; pp < RTB_PAIRS; pp++) load_pair((st + 1) * RTB_PAIRS + pp, nxt[pp]); /* zeros past wn */
        __pipeline_wait_prior(1);
        __syncthreads();
#pragma unroll
        for (int pp = 0; pp < RTB_PAIRS; pp++)
#pragma unroll
            for (int hk = 0; hk < 2; hk++) {
                /* a[h + 2c] = (row gq + 8h, k column tq + 4c): columns n0 + 2 hk + c of dE/dw */
                uint32_t ah[4], al[4];
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int c = 0; c < 2; c++) tf32_split(cur[pp][h][2 * hk + c], ah[h + 2 * c], al[h + 2 * c]);
                const uint4 *bq = &Bs[buf][((pp * 2 + hk) * KT) * 32 + lane];
#pragma unroll
                for (int jt = 0; jt < KT; jt++) mma_split_step(acc[jt], ah, al, bq[jt * 32]);
            }
#pragma unroll
        for (int pp = 0; pp < RTB_PAIRS; pp++)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int q = 0; q < 4; q++) cur[pp][h][q] = nxt[pp][h][q];
        __syncthreads(); /* the stage is read before the next fill overwrites it */
    }
    /* acc[jt][2h + c] = dE/da / alpha of (row gq + 8h, j = 8 jt + 2 tq + c) */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t row = row0 + gq + 8 * h;
        float part = 0.0f;
        if (row < ne) {
            float b[3], db[3];
            const float *p = s.knots + (size_t)hermite_weights(s, r[e0 + row], b, db) * 4 * K;
#pragma unroll
            for (int jt = 0; jt < KT; jt++)
#pragma unroll
                for (int c = 0; c < 2; c++)
                    part += s.alpha * acc[jt][2 * h + c] * hermite_slope(p, K, 8 * jt + 2 * tq + c, db);
        }
        part += CGQ_SHFL_XOR_W(part, 1, CGQ_WARP);
        part += CGQ_SHFL_XOR_W(part, 2, CGQ_WARP);
        if (tq == 0 && row < ne) gr[row] = (double)part * s.inv_step;
    }
}

/* the reverse for the table's width: gr[ne] of edges e0 .. e0 + ne from gw = dE/dw (rows of wn) */
static void radial_tc_backward(const radial_table &s, int wn, const double *r, int64_t e0, int64_t ne, const float *gw,
                               double *gr) {
    const unsigned blocks = (unsigned)((ne + RTC_ROWS - 1) / RTC_ROWS);
    const uint4 *Wb = reinterpret_cast<const uint4 *>(s.w_tc_bwd);
    switch (s.width / 8) {
#define RTC_BWD(KT)                                                                    \
    case KT:                                                                           \
        k_radial_tc_bwd<KT><<<blocks, 32 * RTC_WARPS>>>(s, Wb, wn, r, e0, ne, gw, gr); \
        break;
        RTC_BWD(1) RTC_BWD(2) RTC_BWD(3) RTC_BWD(4) RTC_BWD(5) RTC_BWD(6) RTC_BWD(7) RTC_BWD(8)
#undef RTC_BWD
    }
}

/* the forward for the table's width (K = 8 KT, KT <= 8: radial_tc_fits) */
static void radial_tc_forward(const radial_table &s, int wn, const double *r, int64_t e0, int64_t ne, float *w,
                              int64_t ldw) {
    const unsigned blocks = (unsigned)((ne + RTC_ROWS - 1) / RTC_ROWS);
    switch (s.width / 8) {
#define RTC_FWD(KT)                                                                        \
    case KT:                                                                               \
        k_radial_tc_fwd<KT><<<blocks, 32 * RTC_WARPS>>>(s, s.w_tc, wn, r, e0, ne, w, ldw); \
        break;
        RTC_FWD(1) RTC_FWD(2) RTC_FWD(3) RTC_FWD(4) RTC_FWD(5) RTC_FWD(6) RTC_FWD(7) RTC_FWD(8)
#undef RTC_FWD
    }
}

#endif /* !__HIPCC__ */

/* whether a table of this width runs its last layer on the tensor cores (GPU of compute capability cc_major) */
static bool radial_tc_fits(int width, int cc_major) {
#if defined(__HIPCC__)
    (void)width, (void)cc_major;
    return false;
#else
    return cc_major >= 8 && width % 8 == 0 && width >= 8 && width <= 64 && !getenv("CGQ_GPU_RADIAL_SGEMM");
#endif
}

/* The last layer's W (K rows, wn columns, row-major, double) as k_radial_tc_fwd reads it: tiles of RTC_BN columns n,
 * each column's K/8 k-steps, each lane's four B-fragment values of a k-step {W[k][n] hi, W[k + 4][n] hi, W[k][n] lo,
 * W[k + 4][n] lo} (k = 8 ks + tq) adjacent (one 16-byte shared-memory load): [n][ks][tq][4], zeros past wn. */
static std::vector<uint32_t> radial_tc_layout(const double *W, int K, int wn) {
    const int cols = (wn + RTC_BN - 1) / RTC_BN * RTC_BN;
    std::vector<uint32_t> out((size_t)cols * 2 * K, 0u);
    for (int n = 0; n < wn; n++)
        for (int k = 0; k < K; k++) {
            const float f = (float)W[(size_t)k * wn + n], hi = tf32_round(f), lo = tf32_round(f - hi);
            uint32_t *q = &out[(((size_t)n * (K / 8) + k / 8) * 4 + k % 4) * 4 + (k % 8) / 4];
            memcpy(q, &hi, 4), memcpy(q + 2, &lo, 4);
        }
    return out;
}

/* W (K rows, wn columns) as k_radial_tc_bwd reads it, the B operand of dE/da = dE/dw W^T: per pair p of k-steps
 * (columns 16 p .. 16 p + 16 of dE/dw), per k-step hk of the pair, per n-tile jt of K, per lane (gq, tq): {W[j][n]
 * hi, W[j][n + 1] hi, W[j][n] lo, W[j][n + 1] lo} with j = 8 jt + gq, n = 16 p + 4 tq + 2 hk (the kernel's permuted k
 * order), zeros past wn and up to whole stages of RTB_PAIRS pairs. */
static std::vector<uint32_t> radial_tc_layout_bwd(const double *W, int K, int wn) {
    const int pairs = (wn + 15) / 16, padded = (pairs + RTB_PAIRS - 1) / RTB_PAIRS * RTB_PAIRS, KT = K / 8;
    std::vector<uint32_t> out((size_t)padded * 2 * KT * 32 * 4, 0u);
    for (int p = 0; p < pairs; p++)
        for (int hk = 0; hk < 2; hk++)
            for (int jt = 0; jt < KT; jt++)
                for (int lane = 0; lane < 32; lane++) {
                    const int j = 8 * jt + lane / 4, n = 16 * p + 4 * (lane % 4) + 2 * hk;
                    uint32_t *q = &out[((((size_t)p * 2 + hk) * KT + jt) * 32 + lane) * 4];
                    for (int c = 0; c < 2; c++) {
                        if (n + c >= wn) continue;
                        const float f = (float)W[(size_t)j * wn + n + c], hi = tf32_round(f), lo = tf32_round(f - hi);
                        memcpy(q + c, &hi, 4), memcpy(q + 2 + c, &lo, 4);
                    }
                }
    return out;
}

#endif
