/* tf32_wgmma.cuh: Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) for the float node tiles (node_ops.cuh).
 *
 * One m64n64k8 wgmma is the work of 24 mma.sync m16n8k8 of tf32_mma.cuh spread over a warpgroup's 4 warps, with B
 * read by the tensor cores from shared memory instead of through every warp's registers. Session 60 measured the
 * mma.sync tile at ~7 issued instructions per HMMA (the per-warp TF32 splits and shared reads of both operands) and
 * the H200's mma.sync TF32 ceiling at 0.56-0.59 per SM and cycle (bench/mma_rate.cu), ~58% of the dense rate wgmma
 * reaches. Here A stays in registers (the m16n8k8 fragment layout, one 16-row slice per warp, split by its warp as
 * before) and B is split once per block and stored in the canonical no-swizzle K-major layout:
 *   8 x 4 core matrices (8 rows n, 4 k's, 128 contiguous bytes, rows 16 bytes apart), the 8 of a k-quad side by side
 *   along n (SBO = 128 bytes), the two k-quads of a k-step 1,024 bytes apart (LBO).
 * The code is compiled only for sm_90a (its feature macro); cgq_wgmma_in_binary tells the host whether the binary
 * loaded for its GPU has it.
 * Before leaving a wgmma in flight across other work (a wait_group above 0): ptxas reuses the physical registers of its
 * A fragments once the PTX no longer reads them, while the tensor cores still do (session 64: wrong, nondeterministic
 * sums; an empty asm "+r" fence after the wait does not stop it, a real use after the wait does). Here every wgmma is
 * waited for before the registers are written again. */
#ifndef CGQ_GPU_TF32_WGMMA_CUH
#define CGQ_GPU_TF32_WGMMA_CUH

#include <stdint.h>

#if !defined(__HIPCC__)

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CGQ_WGMMA 1 /* this device pass emits wgmma */
#endif

/* B's layout for one 8-wide k-step (64 n x 8 k floats): element (n, k) at wg_b_index(n, k) */
#define WG_B_LBO 1024 /* bytes between the two k-quads' core matrices */
#define WG_B_SBO 128  /* bytes between core matrices 8 rows of n apart */
#define WG_B_STEP 512 /* floats of one k-step */
__host__ __device__ constexpr int wg_b_index(int n, int k) {
    return k / 4 * (WG_B_LBO / 4) + n / 8 * (WG_B_SBO / 4) + n % 8 * 4 + k % 4;
}

/* The shared-memory matrix descriptor: start address, LBO and SBO in 16-byte units, no swizzle */
__device__ __forceinline__ uint64_t wg_desc(const float *smem) {
    const uint64_t a = (uint64_t)(unsigned)__cvta_generic_to_shared(smem);
    return ((a >> 4) & 0x3fff) | (uint64_t)((WG_B_LBO >> 4) & 0x3fff) << 16 |
           (uint64_t)((WG_B_SBO >> 4) & 0x3fff) << 32;
}

/* the threads' shared-memory writes made visible to the tensor cores' reads (then a barrier) */
__device__ __forceinline__ void wg_fence_shared() {
#if defined(CGQ_WGMMA)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/* the accumulators' registers ordered around the asynchronous wgmma (no read or write moved across) */
__device__ __forceinline__ void wg_fence_operands(float (&d)[32]) {
#pragma unroll
    for (int i = 0; i < 32; i++) asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ void wg_begin() {
#if defined(CGQ_WGMMA)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

/* commit the wgmma issued since wg_begin as a group */
__device__ __forceinline__ void wg_commit() {
#if defined(CGQ_WGMMA)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

/* wait for every committed group; d (their accumulators) readable after */
__device__ __forceinline__ void wg_wait(float (&d)[32]) {
#if defined(CGQ_WGMMA)
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
    wg_fence_operands(d);
}

/* d (+)= a b over one 8-wide k-step: a this warp's 16 x 8 fragment (TF32 bit patterns, tf32_mma.cuh's layout), b
 * the k-step's 64 x 8 in the layout above; acc false: d = a b. d[4 ni + 2 h + c] is (row 16 warp + gq + 8 h, column
 * 8 ni + 2 tq + c). */
__device__ __forceinline__ void wg_mma_tf32(float (&d)[32], const uint32_t (&a)[4], uint64_t b, bool acc) {
#if defined(CGQ_WGMMA)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                 "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
                 "{%32,%33,%34,%35}, %36, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
                   "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
                   "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
                   "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"((int)acc));
#else
    (void)d, (void)a, (void)b, (void)acc;
#endif
}

/* 1 in a device binary with wgmma: the host reads it (cudaMemcpyFromSymbol) from the image loaded for its GPU */
#if defined(CGQ_WGMMA)
__device__ int cgq_wgmma_in_binary = 1;
#else
__device__ int cgq_wgmma_in_binary = 0;
#endif

#endif /* !__HIPCC__ */

#endif
