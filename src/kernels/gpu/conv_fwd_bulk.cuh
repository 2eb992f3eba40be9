/* conv_fwd_bulk.cuh: the std forward (k_conv_fwd_std) with each edge's weight-table row and sender row brought into
 * shared memory by the bulk copy engine (bulk_copy.cuh, sm_90), a few edges ahead of the block's threads. A trial,
 * off by default: CGQ_GPU_CONV_FWD_BULK=S runs it with S stages (2 or 3).
 * Why: the std forward waits on its table loads (ncu, session 47: long scoreboard 2.9 per issued instruction at 4 warps
 * per scheduler), and hiding them in registers (the next edge's loads issued during this one, session 48) cost more
 * resident warps or spills than it saved. Here the copies take no registers and no instructions of the threads that
 * compute: one thread issues an edge's two copies (the interval's row of the table, 20 KB for MACE-MP-0's layer 1
 * from the float table or 16 KB from the compact one, and the sender's 2 KB row of features) into a stage, whose full
 * barrier the block's threads wait on; each warp arrives on the stage's empty barrier when it has read the edge, and
 * the issuing thread waits for all four before it copies edge n + S into the stage.
 * The sums are the std forward's: the same operations in the same order (one slot, the row's edges in order), so the
 * messages are its bits (test NodeConvFwdBulkIsTheStdForwardBitwise). For std plans of one slot of 128 channels with
 * a weight table (MACE-MP-0's layer 1); the launch (conv_fwd_launch) checks the rest. */
#ifndef CGQ_GPU_CONV_FWD_BULK_CUH
#define CGQ_GPU_CONV_FWD_BULK_CUH

#include <atomic>

#include "kernels/gpu/bulk_copy.cuh"
#include "kernels/gpu/conv.cuh"

#define CFB_C 128 /* channels (threads) of the plans it runs */
#define CFB_SB 128 /* edges whose senders, intervals and t are staged at once */

/* The block's shared memory: S stages of (table row, sender row), which the message sums reuse after the edge loop;
 * then the P rows of a batch of EB edges, the staged edges' senders, intervals, wtable_basis and cutoffs, and the barriers */
struct conv_fwd_bulk_layout {
    unsigned tab_bytes, ad_bytes, x_bytes, stage_bytes;
    size_t p_off, sid_off, kb_off, hb_off, ce_off, bar_off, total;
};
__host__ __device__ inline conv_fwd_bulk_layout conv_fwd_bulk_at(const conv_plan &p, int stages, int eb, bool c12) {
    const int ni = p.n_ins;
    conv_fwd_bulk_layout L;
    /* the float table's row: [n_ins C][4] floats; the compact one's: ad's chunks then ev's, [chunk][C] of 16 bytes */
    L.ad_bytes = c12 ? 16u * (wtable12_ad_row(ni) / 2) * p.C : 0u;
    L.tab_bytes = c12 ? L.ad_bytes + 16u * (wtable12_ev_row(ni) / 4) * p.C : 16u * ni * p.C;
    L.x_bytes = 4u * p.dhu;
    L.stage_bytes = L.tab_bytes + L.x_bytes;
    size_t o = std::max((size_t)stages * L.stage_bytes, (size_t)4 * p.acc_dim * p.C);
    o = (o + 15) / 16 * 16;
    L.p_off = o, o += (size_t)4 * eb * p.sp_dim;
    L.sid_off = o, o += 4 * CFB_SB;
    L.kb_off = o, o += 4 * CFB_SB;
    L.hb_off = o, o += 12 * CFB_SB;
    L.ce_off = o, o += 4 * CFB_SB;
    L.bar_off = (o + 7) / 8 * 8;
    L.total = L.bar_off + 16 * (size_t)stages;
    return L;
}

#if !defined(__HIPCC__)
/* Receivers [i0, i0 + gridDim.x), one block of CFB_C threads (channel u = thread) each; S stages (blockDim-uniform).
 * Arguments as k_conv_fwd_std's. */
template <int NL1, int NY, bool C12>
__global__ void __launch_bounds__(CFB_C) k_conv_fwd_bulk(conv_plan p, int64_t i0, const int64_t *row_ptr,
                                                         const int32_t *sender, const float *Y, const float *hu,
                                                         conv_weights<float> cw, const float *cut, float *M, int S,
                                                         int EB) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int LY = sh_lmax<NY>(), NI = conv_std_count(NL1, LY), NA = conv_std_at(NL1, LY, NI).a_off;
    constexpr auto QS = std::make_integer_sequence<int, NI>{};
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const conv_fwd_bulk_layout L = conv_fwd_bulk_at(p, S, EB, C12);
    float *Pb = reinterpret_cast<float *>(smem_raw + L.p_off), *hb = reinterpret_cast<float *>(smem_raw + L.hb_off);
    float *ce = reinterpret_cast<float *>(smem_raw + L.ce_off);
    int32_t *sid = reinterpret_cast<int32_t *>(smem_raw + L.sid_off), *kb = reinterpret_cast<int32_t *>(smem_raw + L.kb_off);
    uint64_t *full = reinterpret_cast<uint64_t *>(smem_raw + L.bar_off), *empty = full + S;
    const int u = threadIdx.x;
    const int64_t i = i0 + blockIdx.x, r0 = row_ptr[i], r1 = row_ptr[i + 1];
    if (u == 0) {
        for (int s = 0; s < S; s++) mbar_init(&full[s], 1), mbar_init(&empty[s], CFB_C / CGQ_WARP);
        mbar_init_fence();
    }
    /* Stage s holds edges s, s + S, ... of the block's walk; a barrier's phase parity flips each time the walk wraps
     * around the stages. fill: the copies of the staged edge j into the next stage (thread 0, in edge order), once
     * the stage's last edge, if it had one, is read. */
    const char *tab = C12 ? reinterpret_cast<const char *>(cw.tab.ad) : reinterpret_cast<const char *>(cw.tab.knots);
    const char *tab_ev = reinterpret_cast<const char *>(cw.tab.ev);
    int s_fill = 0, n_fill = 0;
    unsigned ph_fill = 0;
    auto fill = [&](int j) {
        const int s = s_fill;
        if (n_fill >= S) mbar_wait(&empty[s], ph_fill ^ 1u);
        n_fill++;
        if (++s_fill == S) s_fill = 0, ph_fill ^= 1u;
        unsigned char *st = smem_raw + (size_t)s * L.stage_bytes;
        mbar_arrive_expect(&full[s], L.stage_bytes);
        if (C12) {
            bulk_copy_in(st, tab + (size_t)kb[j] * L.ad_bytes, L.ad_bytes, &full[s]);
            bulk_copy_in(st + L.ad_bytes, tab_ev + (size_t)kb[j] * (L.tab_bytes - L.ad_bytes),
                         L.tab_bytes - L.ad_bytes, &full[s]);
        } else {
            bulk_copy_in(st, tab + (size_t)kb[j] * L.tab_bytes, L.tab_bytes, &full[s]);
        }
        bulk_copy_in(st + L.tab_bytes, hu + (int64_t)sid[j] * p.dhu, L.x_bytes, &full[s]);
    };
    int xo[NL1]; /* channel u's features of degree l in the sender's row */
#pragma unroll
    for (int l = 0; l < NL1; l++) xo[l] = p.in1b[l].off + u * (2 * l + 1);
    float racc[NA], es[NI];
#pragma unroll
    for (int j = 0; j < NA; j++) racc[j] = 0;
#pragma unroll
    for (int q = 0; q < NI; q++) es[q] = C12 ? __ldg(cw.tab.escale + q * CFB_C + u) : 0.0f;
    int s = 0; /* the stage of the edge the threads read next, and its full barrier's phase */
    unsigned ph = 0;
    for (int64_t sb = r0; sb < r1; sb += CFB_SB) {
        const int ns = (int)(r1 - sb < CFB_SB ? r1 - sb : CFB_SB);
        __syncthreads(); /* the last super-batch's staged edges are read (and the barriers initialised) */
        for (int j = u; j < ns; j += CFB_C) {
            float t;
            sid[j] = sender[sb + j];
            kb[j] = hermite_interval(cw.tab, cw.r[sb + j], t);
            if (C12) hermite_chord_weights_at(t, hb + 3 * j);
            else wtable_basis(t, hb + 3 * j);
            ce[j] = cut ? cut[sb + j] : 1.0f;
        }
        __syncthreads();
        int next = 0; /* the next staged edge to copy */
        if (u == 0)
            for (; next < S && next < ns; next++) fill(next);
        for (int eb = 0; eb < ns; eb += EB) {
            const int nb = ns - eb < EB ? ns - eb : EB;
            __syncthreads(); /* the last batch's P rows are read */
            for (int j = u; j < nb * NI; j += CFB_C) {
                const int q = j / nb, el = j - q * nb;
                conv_std_p_at<NL1, NY>(QS, p, q, Y + (sb + eb + el) * NY, Pb + (size_t)el * p.sp_dim);
            }
            __syncthreads();
            for (int el = 0; el < nb; el++) {
                const int n = eb + el;
                mbar_wait(&full[s], ph);
                const unsigned char *st = smem_raw + (size_t)s * L.stage_bytes;
                const float *xs = reinterpret_cast<const float *>(st + L.tab_bytes);
                float xv[CONV_MAX_XDIM];
#pragma unroll
                for (int l = 0; l < NL1; l++)
#pragma unroll
                    for (int a = 0; a < 2 * l + 1; a++) xv[l * l + a] = ce[n] * xs[xo[l] + a];
                if constexpr (C12) {
                    conv_fwd_std12<NL1, NY, NA, NI, true>(QS, reinterpret_cast<const float4 *>(st) + u,
                                                          reinterpret_cast<const uint4 *>(st + L.ad_bytes) + u, CFB_C,
                                                          hb + 3 * n, es, xv, Pb + (size_t)el * p.sp_dim, racc);
                } else {
                    conv_fwd_std<NL1, NY, NA, true>(QS, reinterpret_cast<const float4 *>(st) + u, CFB_C, hb + 3 * n, xv,
                                                    Pb + (size_t)el * p.sp_dim, racc);
                }
                __syncwarp(); /* the warp's reads of the stage are done before its arrival */
                if (u % CGQ_WARP == 0) mbar_arrive(&empty[s]);
                if (++s == S) s = 0, ph ^= 1u;
                if (u == 0 && next < ns) fill(next++);
            }
        }
    }
    /* every copy has landed and been read: the stages hold the message sums now (as k_conv_fwd_std's one slot) */
    __syncthreads();
    float *acc = reinterpret_cast<float *>(smem_raw);
    for (int j = u; j < p.acc_dim * CFB_C; j += CFB_C) acc[j] = 0;
    __syncthreads();
    conv_fwd_std_puts<NL1, NY>(QS, p, racc, acc + u);
    __syncthreads();
    conv_fwd_write(p, acc, M + i * p.dM);
#endif
}
#endif /* !__HIPCC__ */

using conv_fwd_bulk_fn = void (*)(conv_plan, int64_t, const int64_t *, const int32_t *, const float *, const float *,
                                  conv_weights<float>, const float *, float *, int, int);

/* k_conv_fwd_bulk for in1 blocks l < n_in1, SH width nY and the table's form (null: none instantiated) */
static conv_fwd_bulk_fn conv_fwd_bulk_instance(int n_in1, int nY, bool c12) {
#if defined(__HIPCC__)
    (void)n_in1, (void)nY, (void)c12;
#else
#define CFB_NY(NL1, NY) \
    if (n_in1 == NL1 && nY == NY) return c12 ? k_conv_fwd_bulk<NL1, NY, true> : k_conv_fwd_bulk<NL1, NY, false>;
#define CFB_NL1(NL1) CFB_NY(NL1, 4) CFB_NY(NL1, 9) CFB_NY(NL1, 16)
    CFB_NL1(1) CFB_NL1(2) CFB_NL1(3)
#undef CFB_NL1
#undef CFB_NY
#endif
    return nullptr;
}

/* The stages the bulk forward runs with: CGQ_GPU_CONV_FWD_BULK=2 or 3 (else 0: off, the default), read once, unless
 * conv_fwd_bulk_set gave a count (tests and benchmarks switch it in one process) */
static std::atomic<int> conv_fwd_bulk_override{-1};
static int conv_fwd_bulk_wanted() {
    const int o = conv_fwd_bulk_override.load(std::memory_order_relaxed);
    if (o >= 0) return o;
    static const int env_stages = [] {
        const char *env = getenv("CGQ_GPU_CONV_FWD_BULK");
        const int v = env ? atoi(env) : 0;
        return v == 2 || v == 3 ? v : 0;
    }();
    return env_stages;
}
/* Edges per batch of P rows (the std forward's fwd_eb; 16 by default, CGQ_GPU_CONV_FWD_BULK_EB: 8 to 64) */
static int conv_fwd_bulk_eb() {
    static const int eb = [] {
        const char *env = getenv("CGQ_GPU_CONV_FWD_BULK_EB");
        const int v = env ? atoi(env) : 16;
        return v >= 8 && v <= 64 ? v : 16;
    }();
    return eb;
}
static void conv_fwd_bulk_set(int stages) {
    conv_fwd_bulk_override.store(stages == 2 || stages == 3 ? stages : stages < 0 ? -1 : 0, std::memory_order_relaxed);
}

/* Whether the current device runs the bulk forward (sm_90 and later, its kernels' shared-memory limit raised there;
 * never in HIP builds), and its opt-in shared memory per block: asked once per device (every forward launch asks) */
struct conv_fwd_bulk_device {
    bool ok = false;
    size_t smem_optin = 0;
};
static conv_fwd_bulk_device conv_fwd_bulk_here() {
    conv_fwd_bulk_device r;
#if !defined(__HIPCC__)
    constexpr int max_devices = 64;
    static std::atomic<int> known[max_devices]; /* 0: not asked; else optin + 1, negative where not capable */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev >= max_devices) return r;
    int k = known[dev].load(std::memory_order_acquire);
    if (!k) {
        int major = 0, cap = 0;
        bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                  major >= 9 && cudaDeviceGetAttribute(&cap, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess;
        for (int n_in1 = 1; n_in1 <= 3 && ok; n_in1++)
            for (int nY : {4, 9, 16})
                for (bool c12 : {false, true})
                    ok = ok && cudaFuncSetAttribute((const void *)conv_fwd_bulk_instance(n_in1, nY, c12),
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize, cap) == cudaSuccess;
        cudaGetLastError();
        k = ok ? cap + 1 : -1;
        known[dev].store(k, std::memory_order_release);
    }
    r.ok = k > 0, r.smem_optin = k > 0 ? (size_t)(k - 1) : 0;
#endif
    return r;
}

/* Whether the bulk forward runs the plan: the trial on and the device able, a std plan of one slot of CFB_C channels
 * with its weight table (c12: the compact form, which the std forward would read) 16-byte aligned, rows of features
 * of whole 16-byte chunks, and its shared memory within the device's; *stages, *smem: with what */
static conv_fwd_bulk_fn conv_fwd_bulk_plan(const conv_plan &p, const radial_table &t, bool c12, int *stages,
                                           size_t *smem) {
    const int S = conv_fwd_bulk_wanted();
    if (!S || !t.knots || !p.std_form || p.C != CFB_C || p.slots != 1 || p.threads != CFB_C || p.dhu % 4) return nullptr;
    if (c12 ? !(t.ad && t.ev && t.escale && reinterpret_cast<uintptr_t>(t.ad) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(t.ev) % 16 == 0)
            : !(t.width == p.n_ins * p.C && reinterpret_cast<uintptr_t>(t.knots) % 16 == 0))
        return nullptr;
    const conv_fwd_bulk_device d = conv_fwd_bulk_here();
    const conv_fwd_bulk_layout L = conv_fwd_bulk_at(p, S, conv_fwd_bulk_eb(), c12);
    if (!d.ok || L.total > d.smem_optin) return nullptr;
    *stages = S, *smem = L.total;
    return conv_fwd_bulk_instance(p.n_in1, p.nY, c12);
}

/* The forward for receivers [i0, i0 + n) (conv_fwd_kernel's arguments; tabled, c12 as it takes them): the bulk
 * forward where it applies, else conv_fwd_kernel's */
template <class T>
static void conv_fwd_launch(const conv_plan &p, bool tabled, bool c12, int64_t n, int64_t i0, const int64_t *row_ptr,
                            const int32_t *sender, const T *Y, const T *hu, conv_weights<T> cw, const T *cut, T *M) {
    if (n <= 0) return;
    if constexpr (sizeof(T) == sizeof(float)) {
        int stages = 0;
        size_t smem = 0;
        conv_fwd_bulk_fn k = tabled && cw.tabled() && reinterpret_cast<uintptr_t>(hu) % 16 == 0
                                 ? conv_fwd_bulk_plan(p, cw.tab, c12, &stages, &smem)
                                 : nullptr;
        if (k) {
            k<<<(unsigned)n, CFB_C, smem>>>(p, i0, row_ptr, sender, Y, hu, cw, cut, M, stages, conv_fwd_bulk_eb());
            return;
        }
    }
    conv_fwd_kernel<T>(p, tabled, c12)<<<(unsigned)n, p.threads, conv_fwd_smem(p, sizeof(T))>>>(p, i0, row_ptr, sender,
                                                                                              Y, hu, cw, cut, M);
}

#endif
