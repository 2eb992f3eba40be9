/* tf32_mma.cuh: float-accurate products on the tensor cores (mma.sync m16n8k8, TF32 operands, sm_80 and later).
 * x = x_hi + x_lo with both parts rounded to TF32; a b = a_hi b_hi + a_hi b_lo + a_lo b_hi (the dropped a_lo b_lo is
 * ~2^-22 of the product). The tensor cores truncate their sums, so each product chain covers one k-step of 8 and the
 * k-steps are added in float registers, rounded to nearest, in a fixed order (deterministic). Used by the radial
 * MLP's last layer (radial_tc.cuh, radial_conv.cuh) and the node linears (node_ops.cuh). */
#ifndef CGQ_GPU_TF32_MMA_CUH
#define CGQ_GPU_TF32_MMA_CUH

#include <stdint.h>

/* x rounded to TF32 (10 mantissa bits, to nearest): exactly what the tensor cores read (host: the split weights) */
__host__ __device__ inline float tf32_round(float x) {
    union {
        float f;
        uint32_t u;
    } v;
    v.f = x;
    v.u = (v.u + 0x1000u) & 0xffffe000u;
    return v.f;
}

#if !defined(__HIPCC__)

/* x as TF32 hi and lo parts (bit patterns), each rounded to nearest */
__device__ __forceinline__ void tf32_split(float x, uint32_t &hi, uint32_t &lo) {
    const float h = tf32_round(x);
    hi = __float_as_uint(h);
    lo = __float_as_uint(tf32_round(x - h));
}
/* The same with lo left as the float x - hi: the tensor cores read its top 19 bits (truncated: at most 2^-21 of x
 * lost), so a product's relative error is below 1.25 x 2^-20 instead of ~2^-21, for three instructions instead of five
 * (the node GEMMs split every operand they read: session 22) */
__device__ __forceinline__ void tf32_split_lo_truncated(float x, uint32_t &hi, uint32_t &lo) {
    const float h = tf32_round(x);
    hi = __float_as_uint(h);
    lo = __float_as_uint(x - h);
}

/* Fragment layout of m16n8k8 (lane = 4 gq + tq): a[h + 2c] is (row gq + 8h, column tq + 4c); b0, b1 are (row tq,
 * column gq) and (row tq + 4, column gq); d[2h + c] is (row gq + 8h, column 2 tq + c). */

/* d += a b for one k-step: a 16 x 8 (row-major fragment), b 8 x 8 (column fragment), d 16 x 8 in float */
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* acc += a b over one k-step from zero: the two small products (a_lo b_hi, a_hi b_lo) and the main one (a_hi b_hi)
 * in two independent chains on the tensor cores, then added to acc rounded to nearest. b: one lane's B fragments
 * {b0 hi, b1 hi, b0 lo, b1 lo}, as radial_tc_layout stores them. */
__device__ __forceinline__ void mma_split_step(float (&acc)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                               uint4 b) {
    float tc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, tm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_tf32(tc, al, b.x, b.y);
    mma_tf32(tm, ah, b.x, b.y);
    mma_tf32(tc, ah, b.z, b.w);
#pragma unroll
    for (int q = 0; q < 4; q++) acc[q] += tm[q] + tc[q];
}

/* ---- Hopper's warpgroup products (wgmma, sm_90a): 4 warps issue one m64nNk8 product together, B read by the tensor
 * cores from shared memory through a descriptor, A from registers in m16n8k8's fragment layout (warp w of the group:
 * rows 16 w to 16 w + 15), D per warp as m16n8's per 8 columns: d[4 j + 2 h + c] is (row gq + 8 h, column 8 j + 2 tq
 * + c). Compiled only for sm_90a (CGQ_WGMMA); elsewhere the callers take mma_tf32's tiles. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CGQ_WGMMA 1
#endif

/* The descriptor of a K-major B without swizzle: 8 x 16-byte core matrices (8 rows n, 4 k of TF32) of 128 contiguous
 * bytes, `kstride` bytes apart along k (leading byte offset) and `nstride` along n (stride byte offset); both
 * multiples of 16 (measured on an H100: the leading offset is the k one) */
__device__ __forceinline__ uint64_t wg_desc(const void *smem, uint32_t kstride, uint32_t nstride) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((a >> 4) & 0x3fff) | (uint64_t)((kstride >> 4) & 0x3fff) << 16 |
           (uint64_t)((nstride >> 4) & 0x3fff) << 32;
}

#if defined(CGQ_WGMMA)
#define CGQ_WG_D32                                                                                                     \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define CGQ_WG_OUT(m)                                                                                                  \
    m(d[0]), m(d[1]), m(d[2]), m(d[3]), m(d[4]), m(d[5]), m(d[6]), m(d[7]), m(d[8]), m(d[9]), m(d[10]), m(d[11]),       \
        m(d[12]), m(d[13]), m(d[14]), m(d[15]), m(d[16]), m(d[17]), m(d[18]), m(d[19]), m(d[20]), m(d[21]), m(d[22]),   \
        m(d[23]), m(d[24]), m(d[25]), m(d[26]), m(d[27]), m(d[28]), m(d[29]), m(d[30]), m(d[31])
#define CGQ_WG_W(x) "=f"(x)
#define CGQ_WG_RW(x) "+f"(x)
/* d = a b (ADD false) or d += a b, 64 x 64 x 8 in TF32 with float sums, issued asynchronously (wg_commit, wg_wait) */
template <bool ADD>
__device__ __forceinline__ void wg_mma_64x64x8(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
    if constexpr (ADD)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 " CGQ_WG_D32 ", {%32,%33,%34,%35}, %36, p, 1, 1;\n}\n"
                     : CGQ_WG_OUT(CGQ_WG_RW)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 " CGQ_WG_D32 ", {%32,%33,%34,%35}, %36, p, 1, 1;\n}\n"
                     : CGQ_WG_OUT(CGQ_WG_W)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(0));
}
#undef CGQ_WG_D32
#undef CGQ_WG_OUT
#undef CGQ_WG_W
#undef CGQ_WG_RW
/* before a group's products: the registers they read or write were last touched by ordinary instructions */
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/* waits for the committed products (and their shared-memory reads) */
__device__ __forceinline__ void wg_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/* a thread's shared-memory stores made visible to the tensor cores' reads (before the barrier that precedes them) */
__device__ __forceinline__ void wg_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
#endif

#endif /* !__HIPCC__ */

#endif
