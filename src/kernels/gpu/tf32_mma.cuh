/* tf32_mma.cuh: float-accurate products on the tensor cores (mma.sync m16n8k8, TF32 operands, sm_80 and later).
 * x = x_hi + x_lo with both parts rounded to TF32; a b = a_hi b_hi + a_hi b_lo + a_lo b_hi (the dropped a_lo b_lo is
 * ~2^-22 of the product). The tensor cores truncate their sums, so each product chain covers a few k-steps of 8 (one
 * in the radial MLP, two in the node tiles) and the chains are added in float registers, rounded to nearest, in a
 * fixed order (deterministic). Used by the radial MLP's last layer (radial_tc.cuh, radial_conv.cuh) and the node
 * linears (node_ops.cuh). */
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

#endif /* !__HIPCC__ */

#endif
