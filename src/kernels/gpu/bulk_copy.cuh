/* bulk_copy.cuh: Hopper's bulk copy engine (cp.async.bulk, sm_90 and later) and the shared-memory mbarriers its
 * copies complete on. A copy is issued by one thread, moves a contiguous run of bytes (a multiple of 16, both ends
 * 16-byte aligned) from global into shared memory without registers, and counts its bytes on the barrier; the
 * threads that read the data wait on the barrier's phase. CUDA only: the callers check the device (sm_90) and have
 * a plain path for HIP and older GPUs. */
#ifndef CGQ_GPU_BULK_COPY_CUH
#define CGQ_GPU_BULK_COPY_CUH

#include <stdint.h>

#if !defined(__HIPCC__)
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* a barrier whose phase completes after `count` arrivals (and the bytes an arrival announced) */
__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
/* after the inits, before other threads use the barriers (with a block barrier) */
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

/* one arrival that also announces `bytes` to come by bulk copies */
__device__ __forceinline__ void mbar_arrive_expect(uint64_t *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
/* until the phase of parity `parity` has completed */
__device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(smem_u32(bar)),
        "r"(parity)
        : "memory");
}
/* bytes from src to dst (shared), counted on bar when they have landed */
__device__ __forceinline__ void bulk_copy_in(void *dst, const void *src, unsigned bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}
#endif

#endif
