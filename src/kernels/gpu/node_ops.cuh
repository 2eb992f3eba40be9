/* node_ops.cuh: the node-side maps of a MACE layer: e3nn linears and the species-weighted skip tensor product
 * (one-hot second input) as tiled GEMMs, forward and transposed, and one GPU thread per (node, output element)
 * for linears the GEMM form does not cover.
 * Each output element is summed by its own thread in a fixed order (deterministic). The structs are a
 * device copy of the model whose weight arrays are stored in the working precision T (see wt()). */
#ifndef CGQ_GPU_NODE_OPS_CUH
#define CGQ_GPU_NODE_OPS_CUH

#include <algorithm>
#include <atomic>
#include <climits>
#include <vector>

#include "kernels/gpu/gemm.cuh"     /* the 64 x 64 tile of the node linears */
#include "kernels/gpu/tf32_mma.cuh" /* their float tiles on the tensor cores */
#include "kernels/gpu/tf32_wgmma.cuh" /* the same on Hopper's warpgroup MMA */

/* A model weight array as stored for precision T (the float model copy keeps float arrays in the double*
 * fields of the structs). */
template <class T>
__device__ inline const T *wt(const double *p) {
    return reinterpret_cast<const T *>(p);
}

/* Block of `ir` holding flat index j, and j's (channel, component) inside it. */
__device__ inline int irreps_locate(const cgq_irreps *ir, int j, int *u, int *m) {
    int k = 0;
    while (k + 1 < ir->n && ir->b[k + 1].offset <= j) k++;
    const int d = 2 * ir->b[k].l + 1, r = j - ir->b[k].offset;
    *u = r / d, *m = r % d;
    return k;
}

/* y[n] = alpha * (linear(x[n]) + bias) (+ add[n]) */
template <class T>
__global__ void k_linear_fwd(const cgq_linear *lin, int64_t n_nodes, const T *x, int64_t ldx, T *y, int64_t ldy, T alpha,
                             const T *add, int64_t ldadd) {
    const int dout = lin->out.dim;
    const int64_t total = n_nodes * dout;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < total; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = q / dout;
        const int j = (int)(q % dout);
        int w, m;
        const int bo = irreps_locate(&lin->out, j, &w, &m);
        const int mo = lin->out.b[bo].mul, d = 2 * lin->out.b[bo].l + 1;
        const T *xn = x + n * ldx;
        double acc = 0; /* float products, double sums */
        for (int k = 0; k < lin->n_ins; k++) {
            if (lin->ins_out[k] != bo) continue;
            const cgq_irrep_block *bi = &lin->in.b[lin->ins_in[k]];
            const T pw = (T)lin->path_weight[k], *W = wt<T>(lin->weight) + lin->w_offset[k] + w;
            const T *xb = xn + bi->offset + m;
            for (int u = 0; u < bi->mul; u++) acc += (pw * W[(int64_t)u * mo]) * xb[u * d];
        }
        if (lin->bias && lin->out.b[bo].l == 0 && lin->out.b[bo].parity == 1) {
            int off = 0;
            for (int k = 0; k < bo; k++)
                if (lin->out.b[k].l == 0 && lin->out.b[k].parity == 1) off += lin->out.b[k].mul;
            acc += wt<T>(lin->bias)[off + w];
        }
        T v = (T)((double)alpha * acc);
        if (add) v += add[n * ldadd + j];
        y[n * ldy + j] = v;
    }
}

/* gx[n] (+)= alpha * linear^T(gy[n]) */
template <class T>
__global__ void k_linear_bwd(const cgq_linear *lin, int64_t n_nodes, const T *gy, int64_t ldgy, T *gx, int64_t ldgx, T alpha,
                             int accumulate) {
    const int din = lin->in.dim;
    const int64_t total = n_nodes * din;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < total; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = q / din;
        const int i = (int)(q % din);
        int u, m;
        const int bi = irreps_locate(&lin->in, i, &u, &m);
        const T *gn = gy + n * ldgy;
        double acc = 0; /* float products, double sums */
        for (int k = 0; k < lin->n_ins; k++) {
            if (lin->ins_in[k] != bi) continue;
            const cgq_irrep_block *bo = &lin->out.b[lin->ins_out[k]];
            const int d = 2 * bo->l + 1, mo = bo->mul;
            const T pw = (T)lin->path_weight[k], *W = wt<T>(lin->weight) + lin->w_offset[k] + (int64_t)u * mo;
            const T *gb = gn + bo->offset + m;
            for (int w = 0; w < mo; w++) acc += (pw * W[w]) * gb[w * d];
        }
        T *dst = gx + n * ldgx + i;
        *dst = (T)((accumulate ? (double)*dst : 0.0) + (double)alpha * acc);
    }
}

/* ---- e3nn linears as tiled GEMMs ----------------------------------------------------------------------
 * One output block (mul_out x (2l+1)) of y = alpha * linear(x) is a GEMM over rows r = (node, m):
 *   y[n, w, m] = alpha sum_k pw_k sum_u x[n, in_k + u*d + m] W_k[u, w]
 * with K running over the instructions into that block (in order) and their input channels u (in order), so
 * every output is summed in the same order as k_linear_fwd. The transposed map (dE/dx from dE/dy) is the same GEMM
 * with W read transposed. Products and sums in T (float sums in fp32 meet its tolerance with margin; the energy,
 * forces and virial are summed in double elsewhere). */
#define LG_MAX_SEGS 8

template <class T>
struct lin_gemm {
    int64_t n_nodes;
    int d;                /* 2l+1 of the block */
    const T *A;           /* rows of the source (x, or dE/dy for the transpose) */
    int64_t lda;
    T *C;                 /* rows of the destination */
    int64_t ldc;
    int c_off, N;         /* destination block: offset and multiplicity */
    double alpha;
    const T *add;         /* forward: y += add (same block offsets), or NULL */
    int64_t ldadd;
    int accumulate;       /* transpose: C += result */
    const T *W;
    int n_segs;
    int a_off[LG_MAX_SEGS], K[LG_MAX_SEGS], ld[LG_MAX_SEGS];
    int64_t w_off[LG_MAX_SEGS];
    double pw[LG_MAX_SEGS];
    /* per-species weights (the skip tensor product): species s's weights start s * w_species[seg] later */
    const int32_t *species;
    int64_t w_species[LG_MAX_SEGS];
    const T *diag[LG_MAX_SEGS]; /* or per row r: A(r, k) *= diag[r % d] (the skip's diagonal couplings) */
};

/* An output element c from its sum: alpha acc, plus *add (the forward's add: NULL for none) or, for an accumulating
 * transpose, plus *c. Both tiles' stores end here, so their outputs have the same bits. Float sums are scaled in
 * float, one FMA (until session 63 in double: two conversions and a DMUL per element; the stores' loop held ~24% of
 * the wgmma tile's stall samples, RESULTS session 63). */
template <class T, bool BT>
__device__ __forceinline__ void lin_gemm_put(const lin_gemm<T> &g, T *c, const T *add, T acc) {
    if constexpr (sizeof(T) == sizeof(float)) {
        const float a = (float)g.alpha;
        *c = BT ? (g.accumulate ? fmaf(a, acc, *c) : a * acc) : add ? fmaf(a, acc, *add) : a * acc;
    } else if (BT) {
        *c = (T)((g.accumulate ? (double)*c : 0.0) + g.alpha * acc);
    } else {
        T v = (T)(g.alpha * acc);
        if (add) v += *add;
        *c = v;
    }
}

/* Output element (node, component m; column n) of a tile's sums (lin_gemm_put); columns past N are skipped (the caller
 * skips rows past the end and, with per-species weights, other species' rows) */
template <class T, bool BT>
__device__ __forceinline__ void lin_gemm_store(const lin_gemm<T> &g, int64_t node, int m, int n, T acc) {
    if (n >= g.N) return;
    const int64_t col = g.c_off + (int64_t)n * g.d + m;
    lin_gemm_put<T, BT>(g, g.C + node * g.ldc + col, !BT && g.add ? g.add + node * g.ldadd + col : nullptr, acc);
}

/* One 64 x 64 output tile over every segment; with per-species weights, those of species sp, and only the rows of
 * species sp are written. Each thread loads the same 4 rows of A (columns k0 + tid % GEMM_BK) and the same 4 (k, n)
 * places of B at every k step, so their offsets (a division by d) are computed once, and the next step's values are
 * loaded into registers while the current step's products run. */
template <class T, bool BT>
__device__ __forceinline__ void lin_gemm_tile(const lin_gemm<T> &g, T (&As)[GEMM_BK][GEMM_BM + 1],
                                              T (&Bs)[GEMM_BK][GEMM_BN + 1], int tx, int ty, int64_t r0, int64_t rows,
                                              int n0, int sp) {
    T acc[4][4] = {{0}};
    const int akk = threadIdx.x % GEMM_BK, amm = threadIdx.x / GEMM_BK; /* A: rows amm + 16 i */
    const int bkk = BT ? threadIdx.x % GEMM_BK : threadIdx.x / GEMM_BN; /* B: (bkk, bnn + 16 i) or (bkk + 4 i, bnn) */
    const int bnn = BT ? threadIdx.x / GEMM_BK : threadIdx.x % GEMM_BN;
    int64_t aoff[4];
    int am[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t r = r0 + amm + 16 * i, node = r / g.d;
        am[i] = (int)(r - node * g.d);
        aoff[i] = r < rows ? node * g.lda + am[i] : -1;
    }
    T ra[4], rb[4];
    auto fetch = [&](int s, int k0) {
        const T pw = (T)g.pw[s];
        const T *W = g.W + g.w_off[s] + (g.species ? sp * g.w_species[s] : 0);
        const int k = k0 + akk;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            T v = 0;
            if (aoff[i] >= 0 && k < g.K[s]) {
                v = g.A[aoff[i] + g.a_off[s] + (int64_t)k * g.d];
                if (g.diag[s]) v *= g.diag[s][am[i]];
            }
            ra[i] = v;
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int kq = k0 + bkk + (BT ? 0 : 4 * i), n = n0 + bnn + (BT ? 16 * i : 0);
            rb[i] =
                kq < g.K[s] && n < g.N ? pw * (BT ? W[(int64_t)n * g.ld[s] + kq] : W[(int64_t)kq * g.ld[s] + n]) : (T)0;
        }
    };
    if (g.n_segs > 0) fetch(0, 0);
    for (int s = 0, k0 = 0; s < g.n_segs;) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            As[akk][amm + 16 * i] = ra[i];
            if (BT)
                Bs[bkk][bnn + 16 * i] = rb[i];
            else
                Bs[bkk + 4 * i][bnn] = rb[i];
        }
        __syncthreads();
        k0 += GEMM_BK;
        if (k0 >= g.K[s]) s++, k0 = 0;
        if (s < g.n_segs) fetch(s, k0);
        gemm_tile_fma(As, Bs, acc, tx, ty);
        __syncthreads();
    }
    for (int i = 0; i < 4; i++) {
        const int64_t r = r0 + ty + 16 * i;
        if (r >= rows) continue;
        const int64_t node = r / g.d; /* once per row: per output it was two 64-bit division calls (16 per thread) */
        if (g.species && g.species[node] != sp) continue;
        for (int j = 0; j < 4; j++) lin_gemm_store<T, BT>(g, node, (int)(r - node * g.d), n0 + tx + 16 * j, acc[i][j]);
    }
}

/* The smallest species above `above` among the nodes of rows [r0, r0 + GEMM_BM), or INT_MAX (block-uniform). */
__device__ inline int lin_gemm_next_species(const int32_t *species, int64_t r0, int64_t rows, int d, int above) {
    __shared__ int next;
    __syncthreads(); /* every thread has read the previous value */
    if (threadIdx.x == 0) next = INT_MAX;
    __syncthreads();
    if (threadIdx.x < GEMM_BM && r0 + threadIdx.x < rows) {
        const int s = species[(r0 + threadIdx.x) / d];
        if (s > above) atomicMin(&next, s); /* an integer minimum: the same for any order */
    }
    __syncthreads();
    return next;
}

/* The GEMMs of one map's blocks (a linear's output blocks, or its input blocks for the transpose), run by one launch:
 * block x of the grid takes row tile x - tile0[q] of part q, so a small block's tiles (MACE-MP-0's 0e blocks: 162 at
 * 5,184 atoms) run beside the large blocks' instead of alone. Session 18: no change for MACE-MP-0 (node maps 2.67 ->
 * 2.66 ms); the small models' gain that session was measured only together with the edge kernels'. */
#define LG_MAX_PARTS 8
template <class T>
struct lin_gemm_parts {
    lin_gemm<T> g[LG_MAX_PARTS];
    int64_t tile0[LG_MAX_PARTS + 1];
    int n;
};
static_assert(sizeof(lin_gemm_parts<double>) <= 4096, "a kernel's parameters (4 KiB on older CUDA and on HIP)");

/* BT false: B(k, n) = pw W[w_off + k*ld + n] (forward); true: B(k, n) = pw W[w_off + n*ld + k] (transpose).
 * With per-species weights the tile runs once per species among its rows and writes only that species' rows. */
template <class T, bool BT>
__global__ void __launch_bounds__(256) k_lin_gemm(lin_gemm_parts<T> parts) {
    __shared__ T As[GEMM_BK][GEMM_BM + 1];
    __shared__ T Bs[GEMM_BK][GEMM_BN + 1];
    int q = 0;
    while (q + 1 < parts.n && blockIdx.x >= parts.tile0[q + 1]) q++;
    const lin_gemm<T> &g = parts.g[q];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int64_t rows = g.n_nodes * g.d, r0 = ((int64_t)blockIdx.x - parts.tile0[q]) * GEMM_BM;
    const int n0 = blockIdx.y * GEMM_BN;
    if (n0 >= g.N) return; /* a narrower part than the widest: the whole block leaves */
    for (int sp = -1;;) {
        if (g.species && (sp = lin_gemm_next_species(g.species, r0, rows, g.d, sp)) == INT_MAX) break;
        lin_gemm_tile<T, BT>(g, As, Bs, tx, ty, r0, rows, n0, sp);
        if (!g.species) break;
    }
}

/* Nodes per tensor-core tile (lin_tc_tile): T = 64 / d, T d of its 64 rows */
__host__ __device__ inline int ltc_nodes(int d) { return GEMM_BM / d; }

#if !defined(__HIPCC__)
/* The float tiles on the tensor cores (sm_80 and later), with tf32_mma.cuh's float-accurate split products: 128
 * threads, four warps of 32 x 32 outputs over a 64 x 64 tile. A tile holds whole nodes, T = 64 / d of them (T d rows
 * (node, m): 63 of 64 for d = 3 and 7, 60 for d = 5), so that each node's k-step of A (16 k's of d components) is 16 d
 * consecutive floats: the k-steps (16 wide, segment by segment) are copied into shared memory 16 bytes at a time with
 * cp.async, LTC_STAGES - 1 steps ahead of the products, zero-filled past the nodes, K and N (session 24: the 4-byte
 * copies of row tiles, each with its own address arithmetic, were ~250 of the main loop's ~515 SASS instructions per
 * step). Each 16-wide step's products come from one chain per 16 x 8 output, from zero: three mma per 8-wide k-step,
 * the small products first (a_lo b_hi, a_hi b_lo, a_hi b_hi; the warp's 8 chains run side by side, 1-2% faster than
 * one after the other, session 24), and are added to the float sums scaled by the path weight and the row's diagonal
 * coupling (the skip's), one FFMA per value and step (one per 8-wide k-step until session 37: 28 more SASS
 * instructions per step). The
 * operands are split unscaled, so no multiplication or extra addition runs per product (cvt.rna.tf32.f32 is no
 * faster than tf32_round: sm_90 runs it as four instructions, a finiteness test among them). Every sum has a fixed
 * order (deterministic). Session 20's ncu of k_lin_gemm: 50% issue active, FMA pipe 25%, long-scoreboard stalls first
 * (its one step of register prefetch), 2.5 ms of MP-0's step; this kernel's first version (operands scaled, two
 * chains, acc += tm + tc): 1.74 ms. */
#define LTC_THREADS 128
#define LTC_BK 16
#define LTC_STAGES 4
#define LTC_KS (LTC_BK + 4)              /* [row][k] layouts: a fragment's lanes (gq, tq) read 32 different banks */
#define LTC_NS (GEMM_BN + 8)             /* the forward's B, [k][n]: likewise */
#define LTC_STAGE (2 * GEMM_BM * LTC_KS) /* floats per stage: A, then B */
static_assert(GEMM_BM == 64 && GEMM_BN == 64 && LTC_BK * LTC_NS <= GEMM_BM * LTC_KS, "the tensor-core tile's layout");
static_assert(GEMM_BM * LTC_BK / 4 == 2 * LTC_THREADS, "each thread copies 2 x 16 bytes of A and of B per step");

/* The stride of a node's k-step in a stage's A: 16 d floats and 4 more (d = 1: no bank conflicts in the fragment
 * reads; odd d > 1: 2-way at most, the fewest any padding gives). The T node strides fit: T (16 d + 4) <= 1024 +
 * 256 / d <= GEMM_BM LTC_KS floats. */
__device__ inline int ltc_node_stride(int d) { return LTC_BK * d + 4; }

/* 16 bytes from global to shared memory in flight (cp.async), the first `bytes` read from src and the rest zeros
 * (bytes 0: src is not read) */
__device__ __forceinline__ void cp_async16(float *dst, const float *src, int bytes) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}
/* of `avail` floats from a 16-byte group's first (at float f of its run), the bytes that exist: 0 to 16 */
__device__ __forceinline__ int cp_bytes(int avail, int f) {
    return min(max(avail - f, 0), 4) * 4;
}

/* The tensor-core tiles' sums leave through shared memory: staged as the tile's part of C, 64 d floats per node (its
 * columns n0 to n0 + 63 of the block, (n, m) at n d + m, as in C), then written node by node in runs of consecutive
 * floats. (Written from the fragments directly, each value took a 64-bit division of its row by d and a store d floats
 * from its neighbour's: the 32 stores of a thread were ~3,900 SASS instructions, as many as 8-24 k-steps of the
 * loop.) ltc_out_row: where tile row r (node r / d, component r % d) starts; rows past the tile's nodes land in its
 * unused part (the stage buffers hold 64 x 64 floats and more) and are not written. */
__device__ __forceinline__ int ltc_out_row(int r, int d) {
    return r / d * GEMM_BN * d + r % d;
}
/* The wgmma tile (WG): 3 stages (4 were 48 KB with its split B, over a static allocation's limit) and the k-step's
 * B split into TF32 halves in tf32_wgmma.cuh's layout, hi then lo, each two 8-wide k-steps */
#define LWG_STAGES 3
#define LWG_SMEM (LWG_STAGES * LTC_STAGE + 4 * WG_B_STEP)
/* the staged rows end before (r / d + 1) 64 d <= (r + d) 64 < (2 GEMM_BM - 1) GEMM_BN floats (r < 64, d <= 64) */
static_assert((2 * GEMM_BM - 1) * GEMM_BN <= LTC_STAGES * LTC_STAGE, "the staged sums fit the stages");
static_assert((2 * GEMM_BM - 1) * GEMM_BN <= LWG_SMEM, "the staged sums fit the wgmma tile's shared memory");

/* Four consecutive outputs c[0..3] from their sums, as lin_gemm_put each (the same bits), in 16-byte accesses */
template <bool BT>
__device__ __forceinline__ void lin_gemm_put4(const lin_gemm<float> &g, float *c, const float *add, float4 acc) {
    const float a = (float)g.alpha;
    float4 v = make_float4(a * acc.x, a * acc.y, a * acc.z, a * acc.w);
    const float *base = BT ? (g.accumulate ? c : nullptr) : add;
    if (base) {
        const float4 b = *reinterpret_cast<const float4 *>(base);
        v = make_float4(fmaf(a, acc.x, b.x), fmaf(a, acc.y, b.y), fmaf(a, acc.z, b.z), fmaf(a, acc.w, b.w));
    }
    *reinterpret_cast<float4 *>(c) = v;
}

/* C (+)= alpha x the staged sums for the tile's nodes (with per-species weights, those of species sp), by
 * lin_gemm_put, each node's run of min(64, N - n0) d floats by consecutive threads. Where the runs and rows allow
 * (len % 4 and 16-byte places), 4 floats per thread and access over all the tile's runs at once: (node, place) from
 * the thread's first by a uniform step (session 63: the loop a node at a time, a float per thread, took ~15% of the
 * wgmma tile's instructions and ~24% of its stall samples, in 64-bit address arithmetic per float). */
template <bool BT>
__device__ __forceinline__ void ltc_write(const lin_gemm<float> &g, const float *st, int64_t node0, int nodes, int n0,
                                          int sp) {
    const int d = g.d, len = min(GEMM_BN, g.N - n0) * d, tid = threadIdx.x;
    const int64_t off = g.c_off + (int64_t)n0 * d;
    const float *gadd = !BT ? g.add : nullptr;
    auto a16 = [](const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    __syncthreads(); /* the staged sums */
    if (len % 4 == 0 && off % 4 == 0 && g.ldc % 4 == 0 && a16(g.C) && (!gadd || (g.ldadd % 4 == 0 && a16(gadd)))) {
        const int len4 = len / 4, dln = LTC_THREADS / len4, dw = LTC_THREADS % len4; /* the step, in (node, run) */
        int ln = tid / len4, w = tid % len4;
        for (; ln < nodes; ln += dln, w += dw) {
            if (w >= len4) w -= len4, ln++;
            if (ln >= nodes) break;
            const int64_t node = node0 + ln;
            if (g.species && g.species[node] != sp) continue;
            const float4 acc = *reinterpret_cast<const float4 *>(st + ln * GEMM_BN * d + 4 * w);
            lin_gemm_put4<BT>(g, g.C + node * g.ldc + off + 4 * w, gadd ? gadd + node * g.ldadd + off + 4 * w : nullptr,
                              acc);
        }
    } else {
        const int per = max(1, LTC_THREADS / len), sub = tid / len; /* runs shorter than the block: several a pass */
        for (int ln = sub; sub < per && ln < nodes; ln += per) {
            const int64_t node = node0 + ln;
            if (g.species && g.species[node] != sp) continue;
            float *c = g.C + node * g.ldc + off;
            const float *s = st + ln * GEMM_BN * d, *add = gadd ? gadd + node * g.ldadd + off : nullptr;
            for (int w = len >= LTC_THREADS ? tid : tid % len; w < len; w += LTC_THREADS)
                lin_gemm_put<float, BT>(g, c + w, add ? add + w : nullptr, s[w]);
        }
    }
    __syncthreads(); /* the stages are free for the next species' pass */
}

/* The wgmma tile's pieces of a 16-wide k-step. B's 16 x 64 split by the block into bw (hi: two 8-wide k-steps of
 * WG_B_STEP, then lo; thread t: column t % 64, k-quad t / 64 of each 8-wide k-step, 16-byte stores in consecutive
 * places); the warp's A fragments split as in the mma.sync tile (rows aro[h], aro[h] + 8 d...); the step's chain from
 * zero, the small products first (as there), issued; and the sums += sc (path weight x diagonal) x chain. */
template <bool BT>
__device__ __forceinline__ void lin_wg_split_b(const float *Bs, float *bw) {
    const int tid = threadIdx.x, n = tid % 64, kq = tid / 64 * 4;
#pragma unroll
    for (int ks = 0; ks < 2; ks++) {
        float v[4];
        if (BT) {
            const float4 q = *reinterpret_cast<const float4 *>(Bs + n * LTC_KS + 8 * ks + kq);
            v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++) v[j] = Bs[(8 * ks + kq + j) * LTC_NS + n];
        }
        uint4 hi, lo;
        tf32_split_lo_truncated(v[0], hi.x, lo.x);
        tf32_split_lo_truncated(v[1], hi.y, lo.y);
        tf32_split_lo_truncated(v[2], hi.z, lo.z);
        tf32_split_lo_truncated(v[3], hi.w, lo.w);
        *reinterpret_cast<uint4 *>(bw + ks * WG_B_STEP + wg_b_index(n, kq)) = hi;
        *reinterpret_cast<uint4 *>(bw + (2 + ks) * WG_B_STEP + wg_b_index(n, kq)) = lo;
    }
    wg_fence_shared(); /* then a barrier before the wgmma read it */
}
__device__ __forceinline__ void lin_wg_split_a(const float *As, const int (&aro)[2], int d4, uint32_t (&ah)[2][4],
                                               uint32_t (&al)[2][4]) {
#pragma unroll
    for (int ks = 0; ks < 2; ks++)
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int c = 0; c < 2; c++)
                tf32_split_lo_truncated(As[aro[h] + (2 * ks + c) * d4], ah[ks][h + 2 * c], al[ks][h + 2 * c]);
}
__device__ __forceinline__ void lin_wg_issue(const uint32_t (&ah)[2][4], const uint32_t (&al)[2][4], const float *bw,
                                             float (&t)[32]) {
    wg_begin();
#pragma unroll
    for (int ks = 0; ks < 2; ks++) {
        const uint64_t bh = wg_desc(bw + ks * WG_B_STEP), bl = wg_desc(bw + (2 + ks) * WG_B_STEP);
        wg_mma_tf32(t, al[ks], bh, ks > 0);
        wg_mma_tf32(t, ah[ks], bl, true);
        wg_mma_tf32(t, ah[ks], bh, true);
    }
    wg_commit();
}
__device__ __forceinline__ void lin_wg_sums(const float (&sc)[2], float (&t)[32], float (&acc)[32]) {
    wg_wait(t);
#pragma unroll
    for (int q = 0; q < 32; q++) acc[q] = fmaf(sc[q / 2 % 2], t[q], acc[q]);
}

/* The tile of nodes [node0, node0 + nodes) (nodes <= T) and columns [n0, n0 + 64); with per-species weights, those of
 * species sp (only its rows are written). WG: the products by wgmma (tf32_wgmma.cuh): each warp's 16 rows by all 64
 * columns (mma.sync: 32 x 32), B split once per step by the block into its layout after the stages. */
template <bool BT, bool WG>
__device__ __forceinline__ void lin_tc_tile(const lin_gemm<float> &g, float *smem, int64_t node0, int nodes, int n0,
                                            int sp) {
    constexpr int S = WG ? LWG_STAGES : LTC_STAGES;
    const int tid = threadIdx.x, lane = tid % 32, gq = lane / 4, tq = lane % 4;
    const int wm = WG ? tid / 32 * 16 : tid / 32 % 2 * 32, wn = WG ? 0 : tid / 64 * 32; /* the warp's outputs */
    const int d = g.d, T = ltc_nodes(d), P = ltc_node_stride(d), Td = T * d;
    const float *Ab = g.A + node0 * g.lda; /* offsets from the tile's first node fit an int (lin_gemm_tc_ok) */
    /* This thread's two 16-byte copies of A and two of W per step, each a destination in the stage, a source offset
     * from the step's first float and the bytes of a whole step (16 k's of the segment): A's floats 4 w to 4 w + 3 of
     * node ln's k-step (w < 4 d); W's 4 k's of row n (BT: [n][k]) or 4 n's of row k ([k][n]). Those past the tile's T
     * nodes (q >= 4 d T, d > 1) copy nothing (a_dst -1: their zeros, all into one slot after the nodes' strides, were
     * a write-write race for racecheck, session 29). A copy of no bytes (a node past the tile's, a row past N) reads
     * nothing; its source is a place that exists (node 0's row, row n0), so no select is needed. */
    int a_dst[2], a_src[2], a_f[2], a_bytes[2], w_dst[2], w_row[2], w_k[2], w_bytes[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int q = tid + LTC_THREADS * i, ln = q / (4 * d), w = q % (4 * d);
        a_dst[i] = ln < T ? ln * P + 4 * w : -1;
        a_src[i] = (ln < nodes ? ln * (int)g.lda : 0) + 4 * w;
        a_f[i] = ln < nodes ? 4 * w : INT_MAX; /* past the nodes: no byte exists */
        a_bytes[i] = ln < nodes ? 16 : 0;
        if (BT) {
            const int nn = q / 4, k = 4 * (q % 4), n = n0 + nn;
            w_dst[i] = nn * LTC_KS + k, w_row[i] = n < g.N ? n : n0, w_k[i] = k, w_bytes[i] = n < g.N ? 16 : 0;
        } else {
            const int kk = q / 16, n = n0 + 4 * (q % 16);
            w_dst[i] = kk * LTC_NS + 4 * (q % 16), w_row[i] = kk, w_k[i] = n < g.N ? n : n0;
            w_bytes[i] = cp_bytes(g.N, n);
        }
    }
    /* the fragments' rows (the padding rows past T d read the last row's values; they are not stored) */
    int aro[2][2], am[2][2];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = min(wm + 16 * mi + gq + 8 * h, Td - 1);
            aro[mi][h] = r / d * P + r % d + tq * d, am[mi][h] = r % d;
        }
    const int d4 = 4 * d; /* k + 4 in a node's k-step */
    int n_steps = 0;
    for (int s = 0; s < g.n_segs; s++) n_steps += (g.K[s] + LTC_BK - 1) / LTC_BK;
    /* The next step to copy: segment cs, `left` of its k's from the step's first; this thread's sources a_cur (A's
     * step) and w_cur (its two runs of W), advanced by a step's floats after each copy. A whole step takes the
     * copies' fixed bytes; only a segment's last step, where K is not a multiple of 16, works out which bytes exist
     * (session 37: the per-step offsets, bytes and selects were ~150 of the main loop's 480 SASS instructions per
     * step; session 63: the running sources instead of 64-bit offsets from the segment's first floats). */
    int cs = 0, left = 0;
    int64_t w_step = 0;
    const float *a_cur = nullptr, *w_cur[2] = {nullptr, nullptr};
    auto segment_start = [&]() {
        const int w_ld = g.ld[cs];
        const float *w_seg = g.W + g.w_off[cs] + (g.species ? sp * g.w_species[cs] : 0);
        left = g.K[cs], a_cur = Ab + g.a_off[cs], w_step = BT ? LTC_BK : (int64_t)LTC_BK * w_ld;
#pragma unroll
        for (int i = 0; i < 2; i++) w_cur[i] = w_seg + (int64_t)w_row[i] * w_ld + w_k[i];
    };
    segment_start();
    auto copy_step = [&](int stage) {
        float *As = smem + stage * LTC_STAGE, *Bs = As + GEMM_BM * LTC_KS;
        if (left >= LTC_BK) {
#pragma unroll
            for (int i = 0; i < 2; i++)
                if (a_dst[i] >= 0) cp_async16(As + a_dst[i], a_cur + a_src[i], a_bytes[i]);
#pragma unroll
            for (int i = 0; i < 2; i++) cp_async16(Bs + w_dst[i], w_cur[i], w_bytes[i]);
        } else {
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int bytes = cp_bytes(left * d, a_f[i]);
                if (a_dst[i] >= 0) cp_async16(As + a_dst[i], bytes ? a_cur + a_src[i] : g.A, bytes);
            }
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int bytes = BT ? (w_bytes[i] ? cp_bytes(left, w_k[i]) : 0) : w_row[i] < left ? w_bytes[i] : 0;
                cp_async16(Bs + w_dst[i], bytes ? w_cur[i] : g.W, bytes);
            }
        }
        a_cur += LTC_BK * d, left -= LTC_BK;
#pragma unroll
        for (int i = 0; i < 2; i++) w_cur[i] += w_step;
        if (left <= 0 && ++cs < g.n_segs) segment_start();
    };
    for (int stage = 0; stage < S - 1; stage++) {
        if (stage < n_steps) copy_step(stage);
        __pipeline_commit();
    }
    float acc[2][4][4] = {};
    float wacc[32] = {}, wt[32] = {}; /* WG: the sums and a step's chain, d[4 ni + 2 h + c] (tf32_wgmma.cuh) */
    float *bw = smem + S * LTC_STAGE; /* WG: the step's B, split */
    /* segment by segment (its path weight and diagonal read once: in one loop over all k-steps with the segment's
     * state updated per step, the main loop took 704 SASS instructions per 16-wide step instead of 528, session 22) */
    for (int ms = 0, step = 0; ms < g.n_segs; ms++) {
        float sc[2][2]; /* the path weight times the row's diagonal coupling, applied to each k-step's sums */
        const float pw = (float)g.pw[ms];
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) sc[mi][h] = g.diag[ms] ? pw * g.diag[ms][am[mi][h]] : pw;
        for (int mk = 0; mk < g.K[ms]; mk += LTC_BK, step++) {
            __pipeline_wait_prior(S - 2); /* this step's copies (this thread's) are done */
            __syncthreads();              /* everyone's, and the previous step's reads */
            if (step + S - 1 < n_steps) copy_step((step + S - 1) % S);
            __pipeline_commit();
            const float *As = smem + step % S * LTC_STAGE, *Bs = As + GEMM_BM * LTC_KS;
            if constexpr (WG) {
                lin_wg_split_b<BT>(Bs, bw);
                uint32_t ah[2][4], al[2][4];
                lin_wg_split_a(As, aro[0], d4, ah, al);
                __syncthreads(); /* bw */
                lin_wg_issue(ah, al, bw, wt);
                lin_wg_sums(sc[0], wt, wacc);
            } else {
                float t[2][4][4]; /* the 8 chains over the step's two 8-wide k-steps, side by side */
#pragma unroll
                for (int kb = 0; kb < LTC_BK; kb += 8) {
                    uint32_t ah[2][4], al[2][4];
#pragma unroll
                    for (int mi = 0; mi < 2; mi++)
#pragma unroll
                        for (int h = 0; h < 2; h++)
#pragma unroll
                            for (int c = 0; c < 2; c++) {
                                tf32_split_lo_truncated(As[aro[mi][h] + (kb / 4 + c) * d4], ah[mi][h + 2 * c],
                                                        al[mi][h + 2 * c]);
                            }
                    uint4 b[4];
#pragma unroll
                    for (int ni = 0; ni < 4; ni++) {
                        const int n = wn + 8 * ni + gq;
                        const float b0 = BT ? Bs[n * LTC_KS + kb + tq] : Bs[(kb + tq) * LTC_NS + n];
                        const float b1 = BT ? Bs[n * LTC_KS + kb + tq + 4] : Bs[(kb + tq + 4) * LTC_NS + n];
                        tf32_split_lo_truncated(b0, b[ni].x, b[ni].z);
                        tf32_split_lo_truncated(b1, b[ni].y, b[ni].w);
                    }
#pragma unroll
                    for (int mi = 0; mi < 2; mi++)
#pragma unroll
                        for (int ni = 0; ni < 4; ni++) {
                            if (kb == 0)
#pragma unroll
                                for (int q = 0; q < 4; q++) t[mi][ni][q] = 0.0f;
                            mma_tf32(t[mi][ni], al[mi], b[ni].x, b[ni].y);
                        }
#pragma unroll
                    for (int mi = 0; mi < 2; mi++)
#pragma unroll
                        for (int ni = 0; ni < 4; ni++) mma_tf32(t[mi][ni], ah[mi], b[ni].z, b[ni].w);
#pragma unroll
                    for (int mi = 0; mi < 2; mi++)
#pragma unroll
                        for (int ni = 0; ni < 4; ni++) mma_tf32(t[mi][ni], ah[mi], b[ni].x, b[ni].y);
                }
#pragma unroll
                for (int mi = 0; mi < 2; mi++)
#pragma unroll
                    for (int ni = 0; ni < 4; ni++)
#pragma unroll
                        for (int q = 0; q < 4; q++) acc[mi][ni][q] = fmaf(sc[mi][q / 2], t[mi][ni][q], acc[mi][ni][q]);
            }
        }
    }
    __syncthreads(); /* the stages are free for the sums */
    if constexpr (WG) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float *row = smem + ltc_out_row(wm + gq + 8 * h, d);
#pragma unroll
            for (int ni = 0; ni < 8; ni++)
#pragma unroll
                for (int c = 0; c < 2; c++) row[(8 * ni + 2 * tq + c) * d] = wacc[4 * ni + 2 * h + c];
        }
    } else {
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float *row = smem + ltc_out_row(wm + 16 * mi + gq + 8 * h, d);
#pragma unroll
                for (int ni = 0; ni < 4; ni++)
#pragma unroll
                    for (int c = 0; c < 2; c++) row[(wn + 8 * ni + 2 * tq + c) * d] = acc[mi][ni][2 * h + c];
            }
    }
    ltc_write<BT>(g, smem, node0, nodes, n0, sp);
}

/* Block x of the grid takes node tile x - tile0[q] of part q (lin_gemm_launch). WG: the wgmma tile. */
template <bool BT, bool WG>
__global__ void __launch_bounds__(LTC_THREADS, 4) k_lin_gemm_tc(lin_gemm_parts<float> parts) {
    __shared__ __align__(16) float smem[WG ? LWG_SMEM : LTC_STAGES * LTC_STAGE];
    int q = 0;
    while (q + 1 < parts.n && blockIdx.x >= parts.tile0[q + 1]) q++;
    const lin_gemm<float> &g = parts.g[q];
    const int64_t node0 = ((int64_t)blockIdx.x - parts.tile0[q]) * ltc_nodes(g.d);
    const int n0 = blockIdx.y * GEMM_BN, nodes = (int)std::min((int64_t)ltc_nodes(g.d), g.n_nodes - node0);
    if (n0 >= g.N) return;
    for (int sp = -1;;) {
        if (g.species && (sp = lin_gemm_next_species(g.species, node0 * g.d, (node0 + nodes) * g.d, g.d, sp)) == INT_MAX)
            break;
        lin_tc_tile<BT, WG>(g, smem, node0, nodes, n0, sp);
        if (!g.species) break;
    }
}
#endif

/* Where the float node GEMMs run on the tensor cores: 0 nowhere (HIP, GPUs before sm_80, CGQ_GPU_NODE_TC=0), 1 for
 * outputs of LTC_MIN_N columns or more (CGQ_GPU_NODE_TC=2, for comparisons), 2 for every width (the default;
 * CGQ_GPU_NODE_TC=1 too). Session 20 found the tile of then slower for the 16- and 32-channel models, and the 16-channel
 * water MACE still was on session 38's H100 (1.17-1.20 -> 1.23 ms). Since the wgmma tile (session 61) and the node
 * tile's stores (session 63) it is faster at every width: session 67, H200, alternated rounds (bench/RESULTS.md). */
#define LTC_MIN_N 32
static int lin_gemm_tc_mode() {
#if defined(__HIPCC__)
    return 0;
#else
    /* read once per device (every node GEMM launch asks: ~20 per step), as mode + 1 (0: not yet read) */
    constexpr int max_devices = 64;
    static std::atomic<int> known[max_devices];
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (dev < max_devices) {
        const int m = known[dev].load(std::memory_order_relaxed);
        if (m) return m - 1;
    }
    const char *env = getenv("CGQ_GPU_NODE_TC");
    const char want = env ? env[0] : 0;
    int mode = 0;
    if (want != '0' && cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
        major >= 8)
        mode = want == '2' ? 1 : 2;
    if (dev < max_devices) known[dev].store(mode + 1, std::memory_order_relaxed);
    return mode;
#endif
}

/* Whether the tensor-core tiles run as wgmma (lin_wg_split_b...): the binary loaded for the device has it (a build for
 * sm_90a) and CGQ_GPU_NODE_WG is not 0 (then the mma.sync tile runs: for comparisons and its tests); read once per
 * device. Session 61, MP-0 on an H200: the step 5.19-5.27 -> 5.12-5.14 ms (node_fwd 0.274 -> 0.248 ms, node_bwd 0.349
 * -> 0.331). A form splitting each step's B during the step before's wgmma (two B buffers) was no faster (5.15-5.19). */
static bool lin_gemm_wg_mode() {
#if defined(__HIPCC__)
    return false;
#else
    constexpr int max_devices = 64;
    static std::atomic<int> known[max_devices]; /* mode + 1 (0: not yet read) */
    int dev = 0, in_binary = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (dev < max_devices) {
        const int m = known[dev].load(std::memory_order_relaxed);
        if (m) return m - 1;
    }
    if (cudaMemcpyFromSymbol(&in_binary, cgq_wgmma_in_binary, sizeof in_binary) != cudaSuccess) {
        (void)cudaGetLastError(); /* no image for this device: the launches will say so */
        in_binary = 0;
    }
    const char *env = getenv("CGQ_GPU_NODE_WG");
    const bool mode = in_binary == 1 && !(env && env[0] == '0');
    if (dev < max_devices) known[dev].store(mode + 1, std::memory_order_relaxed);
    return mode;
#endif
}

/* Whether k_lin_gemm_tc runs these GEMMs: float, lin_gemm_tc_mode, a tile's row offsets fit an int, no empty segment,
 * and every A and W run 16-byte aligned (pointers, leading dimensions and offsets: its copies are 16 bytes) */
static bool lin_gemm_tc_ok(const lin_gemm<double> *, int) {
    return false;
}
static bool lin_gemm_tc_ok(const lin_gemm<float> *gs, int n) {
#if defined(__HIPCC__)
    (void)gs, (void)n;
    return false;
#else
    const int mode = lin_gemm_tc_mode();
    auto a16 = [](const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    for (int q = 0; q < n; q++) {
        const lin_gemm<float> &g = gs[q];
        if (!mode || g.lda > INT_MAX / (GEMM_BM + 1) || (mode == 1 && g.N < LTC_MIN_N) || g.d > GEMM_BM ||
            !a16(g.A) || !a16(g.W) || g.lda % 4)
            return false;
        for (int s = 0; s < g.n_segs; s++) /* an empty segment (a 0x block): lin_tc_tile counts no k-step for it */
            if (g.K[s] <= 0 || g.a_off[s] % 4 || g.w_off[s] % 4 || g.ld[s] % 4 || (g.species && g.w_species[s] % 4))
                return false;
    }
    return true;
#endif
}

/* Runs the GEMMs gs (LG_MAX_PARTS per launch): on the tensor cores in tiles of whole nodes (lin_tc_tile) where
 * lin_gemm_tc_ok, else k_lin_gemm's tiles of 64 rows */
template <class T, bool BT>
static void lin_gemm_launch(const std::vector<lin_gemm<T>> &in, cudaStream_t st = 0) {
    /* a part no instruction writes (an e3nn output block without paths: MACE-MP-0's layer-0 skip into 1o) is zeros,
     * set by a memset instead of tiles that only store them, or left as it is where the transpose accumulates */
    std::vector<lin_gemm<T>> gs;
    for (const lin_gemm<T> &g : in) {
        if (g.n_segs || g.add) {
            gs.push_back(g);
        } else if (!(BT && g.accumulate) && g.n_nodes) {
            /* its error, like the launches', is the runtime's last error: the callers' CGQ_LAUNCH_CHECK reads it */
            (void)cudaMemset2DAsync(g.C + g.c_off, sizeof(T) * g.ldc, 0, sizeof(T) * g.N * g.d, g.n_nodes, st);
        }
    }
    for (size_t b = 0; b < gs.size(); b += LG_MAX_PARTS) {
        lin_gemm_parts<T> parts{};
        parts.n = (int)std::min<size_t>(LG_MAX_PARTS, gs.size() - b);
        const bool tc = lin_gemm_tc_ok(gs.data() + b, parts.n);
        int col_tiles = 1;
        parts.tile0[0] = 0;
        for (int q = 0; q < parts.n; q++) {
            const lin_gemm<T> &g = gs[b + q];
            parts.g[q] = g;
            const int64_t per = tc ? ltc_nodes(g.d) : GEMM_BM, items = tc ? g.n_nodes : g.n_nodes * g.d;
            parts.tile0[q + 1] = parts.tile0[q] + (items + per - 1) / per;
            col_tiles = std::max(col_tiles, (g.N + GEMM_BN - 1) / GEMM_BN);
        }
        const dim3 grid((unsigned)parts.tile0[parts.n], col_tiles);
        if (parts.tile0[parts.n] == 0) continue;
#if !defined(__HIPCC__)
        if constexpr (std::is_same<T, float>::value)
            if (tc) {
                if (lin_gemm_wg_mode()) k_lin_gemm_tc<BT, true><<<grid, LTC_THREADS, 0, st>>>(parts);
                else k_lin_gemm_tc<BT, false><<<grid, LTC_THREADS, 0, st>>>(parts);
                continue;
            }
#endif
        k_lin_gemm<T, BT><<<grid, 256, 0, st>>>(parts);
    }
}

/* A linear with more instructions into one block than a launch holds, or with a bias, takes the
 * thread-per-element kernels. */
static bool lin_gemm_ok(const cgq_linear *hl) {
    if (hl->bias) return false;
    for (int side = 0; side < 2; side++) {
        const cgq_irreps &ir = side ? hl->in : hl->out;
        for (int b = 0; b < ir.n; b++) {
            int n = 0;
            for (int k = 0; k < hl->n_ins; k++) n += (side ? hl->ins_in[k] : hl->ins_out[k]) == b;
            if (n > LG_MAX_SEGS) return false;
        }
    }
    return true;
}

/* y[n] = alpha * linear(x[n]) (+ add[n]) as parts of a launch, appended to gs; hl: the host copy (irreps,
 * instructions), W: its weights on the GPU */
template <class T>
static void lin_gemm_fwd_parts(const cgq_linear *hl, const T *W, int64_t n_nodes, const T *x, int64_t ldx, T *y,
                               int64_t ldy, T alpha, const T *add, int64_t ldadd, std::vector<lin_gemm<T>> &gs) {
    for (int j = 0; j < hl->out.n && n_nodes; j++) {
        const cgq_irrep_block &ob = hl->out.b[j];
        lin_gemm<T> g{};
        g.n_nodes = n_nodes, g.d = 2 * ob.l + 1, g.A = x, g.lda = ldx, g.C = y, g.ldc = ldy, g.c_off = ob.offset;
        g.N = ob.mul, g.alpha = (double)alpha, g.add = add, g.ldadd = ldadd, g.W = W;
        for (int k = 0; k < hl->n_ins; k++) {
            if (hl->ins_out[k] != j) continue;
            const int s = g.n_segs++;
            g.a_off[s] = hl->in.b[hl->ins_in[k]].offset, g.K[s] = hl->in.b[hl->ins_in[k]].mul;
            g.ld[s] = ob.mul, g.w_off[s] = hl->w_offset[k], g.pw[s] = hl->path_weight[k];
        }
        gs.push_back(g);
    }
}

/* y[n] = alpha * linear(x[n]) (+ add[n]) */
template <class T>
static void lin_gemm_fwd(const cgq_linear *hl, const T *W, int64_t n_nodes, const T *x, int64_t ldx, T *y, int64_t ldy,
                         T alpha, const T *add, int64_t ldadd) {
    std::vector<lin_gemm<T>> gs;
    lin_gemm_fwd_parts<T>(hl, W, n_nodes, x, ldx, y, ldy, alpha, add, ldadd, gs);
    lin_gemm_launch<T, false>(gs);
}

/* gx[n] (+)= alpha * linear^T(gy[n]) */
template <class T>
static void lin_gemm_bwd(const cgq_linear *hl, const T *W, int64_t n_nodes, const T *gy, int64_t ldgy, T *gx, int64_t ldgx,
                         T alpha, int accumulate) {
    std::vector<lin_gemm<T>> gs;
    for (int i = 0; i < hl->in.n && n_nodes; i++) {
        const cgq_irrep_block &ib = hl->in.b[i];
        lin_gemm<T> g{};
        g.n_nodes = n_nodes, g.d = 2 * ib.l + 1, g.A = gy, g.lda = ldgy, g.C = gx, g.ldc = ldgx, g.c_off = ib.offset;
        g.N = ib.mul, g.alpha = (double)alpha, g.accumulate = accumulate, g.W = W;
        for (int k = 0; k < hl->n_ins; k++) {
            if (hl->ins_in[k] != i) continue;
            const cgq_irrep_block &ob = hl->out.b[hl->ins_out[k]];
            const int s = g.n_segs++;
            g.a_off[s] = ob.offset, g.K[s] = ob.mul, g.ld[s] = ob.mul, g.w_off[s] = hl->w_offset[k];
            g.pw[s] = hl->path_weight[k];
        }
        gs.push_back(g);
    }
    lin_gemm_launch<T, true>(gs);
}

/* The skip tensor product with a one-hot species second input runs as per-species GEMMs when every instruction is
 * l x 0e -> l with a diagonal coupling C[a,0,c] = C_c delta_ac (e3nn's w3j(l, 0, l)) and few instructions per block:
 * out[n, w, c] = sum_k pw_k sum_u W_k[u, s_n, w] C_c x[n, u, c]. */
static bool skip_gemm_ok(const cgq_tp *tp) {
    if (tp->in2.n != 1 || tp->in2.b[0].l != 0 || tp->external_weights || !tp->weight) return false;
    for (int k = 0; k < tp->n_ins; k++) {
        const int l = tp->in1.b[tp->i1[k]].l, d = 2 * l + 1;
        if (tp->i2[k] != 0 || tp->mode[k] != CGQ_TP_UVW || !tp->has_weight[k] || tp->out.b[tp->io[k]].l != l)
            return false;
        for (int a = 0; a < d; a++)
            for (int c = 0; c < d; c++)
                if (a != c && tp->w3j[k][a * d + c] != 0.0) return false;
    }
    for (int side = 0; side < 2; side++) {
        const cgq_irreps &ir = side ? tp->in1 : tp->out;
        for (int b = 0; b < ir.n; b++) {
            int n = 0;
            for (int k = 0; k < tp->n_ins; k++) n += (side ? tp->i1[k] : tp->io[k]) == b;
            if (n > LG_MAX_SEGS) return false;
        }
    }
    return true;
}

/* A skip tensor product of that form: the diagonals C_c of its instructions on the GPU (instruction k's at off[k]) */
struct skip_plan {
    bool ok = false;
    std::vector<int> off;
    double *diag = nullptr;   /* double */
    double *diag_f = nullptr; /* the same in float (stored in a double* field, as the model's float copies) */
    template <class T>
    const T *at(int k) const {
        return reinterpret_cast<const T *>(sizeof(T) == sizeof(float) ? diag_f : diag) + off[k];
    }
};

/* out[n] = skip_tp(x[n], onehot(species[n])) as per-species GEMMs (hl: host copy, W: its weights on the GPU in T),
 * on stream st */
template <class T>
static void skip_gemm_fwd(const cgq_tp *hl, const skip_plan &sp, const T *W, int64_t n_nodes, const int32_t *species,
                          const T *x, int64_t ldx, T *out, int64_t ldo, cudaStream_t st = 0) {
    const int m2 = hl->in2.b[0].mul;
    std::vector<lin_gemm<T>> gs;
    for (int j = 0; j < hl->out.n && n_nodes; j++) {
        const cgq_irrep_block &ob = hl->out.b[j];
        lin_gemm<T> g{};
        g.n_nodes = n_nodes, g.d = 2 * ob.l + 1, g.A = x, g.lda = ldx, g.C = out, g.ldc = ldo, g.c_off = ob.offset;
        g.N = ob.mul, g.alpha = 1.0, g.W = W, g.species = species;
        for (int k = 0; k < hl->n_ins; k++) {
            if (hl->io[k] != j) continue;
            const int s = g.n_segs++;
            g.a_off[s] = hl->in1.b[hl->i1[k]].offset, g.K[s] = hl->in1.b[hl->i1[k]].mul;
            g.ld[s] = m2 * ob.mul, g.w_off[s] = hl->w_offset[k], g.pw[s] = hl->path_weight[k];
            g.w_species[s] = ob.mul, g.diag[s] = sp.at<T>(k);
        }
        gs.push_back(g);
    }
    lin_gemm_launch<T, false>(gs, st);
}

/* gx1[n] = skip_tp^T(gout[n]) for the one-hot species input, as per-species GEMMs, on stream st */
template <class T>
static void skip_gemm_bwd(const cgq_tp *hl, const skip_plan &sp, const T *W, int64_t n_nodes, const int32_t *species,
                          const T *gout, int64_t ldg, T *gx1, int64_t ldgx, cudaStream_t st = 0) {
    const int m2 = hl->in2.b[0].mul;
    std::vector<lin_gemm<T>> gs;
    for (int i = 0; i < hl->in1.n && n_nodes; i++) {
        const cgq_irrep_block &ib = hl->in1.b[i];
        lin_gemm<T> g{};
        g.n_nodes = n_nodes, g.d = 2 * ib.l + 1, g.A = gout, g.lda = ldg, g.C = gx1, g.ldc = ldgx, g.c_off = ib.offset;
        g.N = ib.mul, g.alpha = 1.0, g.W = W, g.species = species;
        for (int k = 0; k < hl->n_ins; k++) {
            if (hl->i1[k] != i) continue;
            const cgq_irrep_block &ob = hl->out.b[hl->io[k]];
            const int s = g.n_segs++;
            g.a_off[s] = ob.offset, g.K[s] = ob.mul, g.ld[s] = m2 * ob.mul, g.w_off[s] = hl->w_offset[k];
            g.pw[s] = hl->path_weight[k], g.w_species[s] = ob.mul, g.diag[s] = sp.at<T>(k);
        }
        gs.push_back(g);
    }
    lin_gemm_launch<T, true>(gs, st);
}

/* MACE's non-residual interaction ends with A = skip_tp(linear(M) / avg, species): two node GEMMs, the second per
 * species. They run as one per-species GEMM over M (linskip_fwd): for each skip instruction k and each linear
 * instruction k' into k's input block (a pair), the weights are multiplied once when the model is set up, for every
 * species s: Wc[s][v][w] = sum_u L_k'[v, u] W_k[u, s, w] (MACE-MP-0's layer 0: 4 pairs of 128 x 128 for 89 species,
 * 23 MB in float). One pass over the nodes' rows each way is saved (there, A and dE/dA: 42 MB each at 5,184 atoms).
 * Mlin itself is then never formed, so this is only for layers that do not keep it (no density). */
struct linskip_plan {
    struct pair {
        int k, kl;     /* skip instruction, linear instruction */
        int64_t off;   /* its Wc in w: [species][Kv][Nw] */
        int Kv, Nw;    /* M's block multiplicity (rows of Wc), the skip's output multiplicity */
    };
    bool ok = false;
    std::vector<pair> pairs;
    int64_t numel = 0;         /* Wc elements of all pairs */
    const double *w = nullptr; /* device, in the working precision (float data in the double*, as the float model) */
    template <class T>
    const T *at() const {
        return reinterpret_cast<const T *>(w);
    }
};

/* Wc of one pair for every species: out[(s Kv + v) Nw + w] = sum_u L[v Nu + u] S[(u m2 + s) Nw + w], summed in u order */
__global__ void k_linskip_weights(int m2, int Kv, int Nu, int Nw, const double *L, const double *S, double *out) {
    const int64_t n = (int64_t)m2 * Kv * Nw;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < n; q += (int64_t)gridDim.x * blockDim.x) {
        const int s = (int)(q / ((int64_t)Kv * Nw)), v = (int)(q / Nw % Kv), w = (int)(q % Nw);
        double acc = 0;
        for (int u = 0; u < Nu; u++) acc += L[(int64_t)v * Nu + u] * S[((int64_t)u * m2 + s) * Nw + w];
        out[q] = acc;
    }
}

/* The pairs of linear hl and skip ht (host copies), or none (ok false) where the form does not hold: the linear is a
 * GEMM (lin_gemm_ok), the skip is (skip_gemm_ok), and each GEMM of the fused map has at most LG_MAX_SEGS pairs */
static linskip_plan linskip_pairs(const cgq_linear *hl, const cgq_tp *ht) {
    linskip_plan p;
    if (!lin_gemm_ok(hl) || !skip_gemm_ok(ht)) return p;
    const int m2 = ht->in2.b[0].mul;
    int64_t off = 0;
    std::vector<int> per_out(ht->out.n, 0), per_in(hl->in.n, 0);
    for (int k = 0; k < ht->n_ins; k++) {
        const cgq_irrep_block &ib = ht->in1.b[ht->i1[k]];
        for (int kl = 0; kl < hl->n_ins; kl++) {
            const cgq_irrep_block &lo = hl->out.b[hl->ins_out[kl]];
            if (lo.offset != ib.offset) continue;
            if (lo.mul != ib.mul || lo.l != ib.l) return p; /* the skip does not read the linear's blocks */
            const int Kv = hl->in.b[hl->ins_in[kl]].mul, Nw = ht->out.b[ht->io[k]].mul;
            p.pairs.push_back({k, kl, off, Kv, Nw});
            off += (int64_t)m2 * Kv * Nw;
            if (++per_out[ht->io[k]] > LG_MAX_SEGS || ++per_in[hl->ins_in[kl]] > LG_MAX_SEGS) return linskip_plan{};
        }
    }
    p.ok = true;
    p.numel = off;
    return p;
}

/* A[n] = skip_tp(alpha linear(M[n]), onehot(species[n])) (hl, ht: host copies; sp: the skip's diagonals) */
template <class T>
static void linskip_fwd(const cgq_linear *hl, const cgq_tp *ht, const skip_plan &sp, const linskip_plan &lp,
                        int64_t n_nodes, const int32_t *species, const T *M, int64_t ldm, T *A, int64_t lda, double alpha) {
    std::vector<lin_gemm<T>> gs;
    for (int j = 0; j < ht->out.n && n_nodes; j++) {
        const cgq_irrep_block &ob = ht->out.b[j];
        lin_gemm<T> g{};
        g.n_nodes = n_nodes, g.d = 2 * ob.l + 1, g.A = M, g.lda = ldm, g.C = A, g.ldc = lda, g.c_off = ob.offset;
        g.N = ob.mul, g.alpha = alpha, g.W = lp.at<T>(), g.species = species;
        for (const linskip_plan::pair &q : lp.pairs) {
            if (ht->io[q.k] != j) continue;
            const int s = g.n_segs++;
            g.a_off[s] = hl->in.b[hl->ins_in[q.kl]].offset, g.K[s] = q.Kv, g.ld[s] = q.Nw, g.w_off[s] = q.off;
            g.w_species[s] = (int64_t)q.Kv * q.Nw, g.pw[s] = ht->path_weight[q.k] * hl->path_weight[q.kl];
            g.diag[s] = sp.at<T>(q.k);
        }
        gs.push_back(g);
    }
    lin_gemm_launch<T, false>(gs);
}

/* gM[n] = alpha linear^T(skip_tp^T(gA[n])): every block of M written (zeros where no pair reads it) */
template <class T>
static void linskip_bwd(const cgq_linear *hl, const cgq_tp *ht, const skip_plan &sp, const linskip_plan &lp,
                        int64_t n_nodes, const int32_t *species, const T *gA, int64_t ldga, T *gM, int64_t ldgm,
                        double alpha) {
    std::vector<lin_gemm<T>> gs;
    for (int b = 0; b < hl->in.n && n_nodes; b++) {
        const cgq_irrep_block &ib = hl->in.b[b];
        lin_gemm<T> g{};
        g.n_nodes = n_nodes, g.d = 2 * ib.l + 1, g.A = gA, g.lda = ldga, g.C = gM, g.ldc = ldgm, g.c_off = ib.offset;
        g.N = ib.mul, g.alpha = alpha, g.W = lp.at<T>(), g.species = species;
        for (const linskip_plan::pair &q : lp.pairs) {
            if (hl->ins_in[q.kl] != b) continue;
            const int s = g.n_segs++;
            g.a_off[s] = ht->out.b[ht->io[q.k]].offset, g.K[s] = q.Nw, g.ld[s] = q.Nw, g.w_off[s] = q.off;
            g.w_species[s] = (int64_t)q.Kv * q.Nw, g.pw[s] = ht->path_weight[q.k] * hl->path_weight[q.kl];
            g.diag[s] = sp.at<T>(q.k);
        }
        gs.push_back(g);
    }
    lin_gemm_launch<T, true>(gs);
}

/* dst = (D) src, elementwise (precision changes at the edges of the working-precision region) */
template <class S, class D>
__global__ void k_convert(int64_t n, const S *src, D *dst) {
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < n; q += (int64_t)gridDim.x * blockDim.x)
        dst[q] = (D)src[q];
}

/* dst += (D) src */
template <class S, class D>
__global__ void k_add_convert(int64_t n, const S *src, D *dst) {
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < n; q += (int64_t)gridDim.x * blockDim.x)
        dst[q] += (D)src[q];
}

/* out[i] = (U) rows[nodes[i]], rows of width values: the rows an exchange sends, packed */
template <class T, class U>
__global__ void k_gather_rows(int64_t n, int width, const int32_t *nodes, const T *rows, U *out) {
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < n * width;
         q += (int64_t)gridDim.x * blockDim.x)
        out[q] = (U)rows[(int64_t)nodes[q / width] * width + q % width];
}

/* rows[nodes[i]] += (T) sums[i] (nodes distinct): the sums an exchange's reverse brought for the rows it sent */
template <class U, class T>
__global__ void k_scatter_add_rows(int64_t n, int width, const int32_t *nodes, const U *sums, T *rows) {
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < n * width;
         q += (int64_t)gridDim.x * blockDim.x)
        rows[(int64_t)nodes[q / width] * width + q % width] += (T)sums[q];
}

#endif
