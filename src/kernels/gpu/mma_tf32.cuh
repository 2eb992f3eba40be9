/* mma_tf32.cuh: float products on the tensor cores at float's accuracy. x = x_hi + x_lo with x_hi the TF32 rounding
 * of x and x_lo that of the rest; a b = a_lo b_hi + a_hi b_lo + a_hi b_hi drops a_lo b_lo, 2^-22 of the product
 * (float's rounding), where one TF32 product (2^-11) would miss the fp32 tolerance. The products run as
 * mma.sync m16n8k8 (CUDA, sm_80 and later: CGQ_MMA_TF32 in the device passes that have it); the sums of one warp's
 * instruction have a fixed order in the hardware, so the results are deterministic. HIP builds and older
 * architectures keep the SIMT tiles. */
#ifndef CGQ_GPU_MMA_TF32_CUH
#define CGQ_GPU_MMA_TF32_CUH

#include <stdint.h>

#if !defined(__HIPCC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define CGQ_MMA_TF32 1
#endif

/* x rounded to TF32 (10 mantissa bits, to nearest, ties away): exactly what the tensor cores read */
__host__ __device__ inline float tf32_round(float x) {
    union {
        float f;
        uint32_t u;
    } v;
    v.f = x;
    v.u = (v.u + 0x1000u) & 0xffffe000u;
    return v.f;
}

/* The 64 x 64 output tile of a 256-thread block (8 warps: warp w takes rows 16 (w % 4) .. + 16 and columns
 * 32 (w / 4) .. + 32, four m16n8 tiles) from operands split in shared memory: A(m, k) = Ah[k][m] + Al[k][m],
 * B(k, n) = Bh[k][n] + Bl[k][n], k < MMA_BK. Rows of MMA_LD floats: the fragments' loads hit 32 distinct banks. */
#define MMA_BK 16
#define MMA_LD 72

struct mma_tile_smem {
    float Ah[MMA_BK][MMA_LD], Al[MMA_BK][MMA_LD], Bh[MMA_BK][MMA_LD], Bl[MMA_BK][MMA_LD];
};

/* stores v split at (k, i) of the hi/lo pair */
__device__ __forceinline__ void mma_put_split(float (&hi)[MMA_BK][MMA_LD], float (&lo)[MMA_BK][MMA_LD], int k, int i,
                                              float v) {
    const float h = tf32_round(v);
    hi[k][i] = h, lo[k][i] = tf32_round(v - h);
}

#if defined(CGQ_MMA_TF32)
__device__ __forceinline__ void mma_m16n8k8(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* acc += A B over the MMA_BK rows of k in s. acc[j][q]: the warp's n8 tile j, fragment value q at row
 * 16 (w % 4) + lane / 4 + 8 (q / 2), column 32 (w / 4) + 8 j + 2 (lane % 4) + q % 2 (mma_tile_row/col).
 * The tensor cores' own sums truncate (round toward zero), a bias that grows with the length of a chain: so the
 * step's products are summed from zero, hi*hi apart from the correction terms, and added to acc in float (to
 * nearest) once per step. */
__device__ __forceinline__ void mma_tile_accumulate(const mma_tile_smem &s, float (&acc)[4][4]) {
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
    const int m0 = 16 * (w % 4) + gid, n0 = 32 * (w / 4) + gid;
    float main[4][4] = {{0}}, corr[4][4] = {{0}};
#pragma unroll
    for (int ks = 0; ks < MMA_BK; ks += 8) {
        uint32_t ah[4], al[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int k = ks + tig + 4 * (q / 2), m = m0 + 8 * (q % 2);
            ah[q] = __float_as_uint(s.Ah[k][m]), al[q] = __float_as_uint(s.Al[k][m]);
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint32_t bh[2], bl[2];
#pragma unroll
            for (int q = 0; q < 2; q++) {
                const int k = ks + tig + 4 * q, n = n0 + 8 * j;
                bh[q] = __float_as_uint(s.Bh[k][n]), bl[q] = __float_as_uint(s.Bl[k][n]);
            }
            mma_m16n8k8(corr[j], al, bh);
            mma_m16n8k8(corr[j], ah, bl);
            mma_m16n8k8(main[j], ah, bh);
        }
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) acc[j][q] += main[j][q] + corr[j][q];
}
#endif

/* the tile row and column of acc[j][q] (mma_tile_accumulate) */
__device__ __forceinline__ int mma_tile_row(int q) {
    return 16 * ((int)threadIdx.x / 32 % 4) + (int)threadIdx.x % 32 / 4 + 8 * (q / 2);
}
__device__ __forceinline__ int mma_tile_col(int j, int q) {
    return 32 * ((int)threadIdx.x / 128) + 8 * j + 2 * ((int)threadIdx.x % 4) + q % 2;
}

#endif
