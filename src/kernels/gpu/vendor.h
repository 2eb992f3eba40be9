/* vendor.h: one GPU source for CUDA and HIP: under hipcc the cuda* runtime names map to hip*. */
#ifndef CGQ_GPU_VENDOR_H
#define CGQ_GPU_VENDOR_H

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define cudaError_t hipError_t
#define cudaErrorMemoryAllocation hipErrorMemoryAllocation
#define cudaSuccess hipSuccess
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaMemGetInfo hipMemGetInfo
#define cudaSetDevice hipSetDevice
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaDeviceProp hipDeviceProp_t
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaHostAlloc hipHostMalloc
#define cudaHostAllocDefault hipHostMallocDefault
#define cudaFreeHost hipHostFree
#define cudaHostRegister hipHostRegister
#define cudaHostRegisterPortable hipHostRegisterPortable
#define cudaHostUnregister hipHostUnregister
#define cudaMemcpy hipMemcpy
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemset hipMemset
#define cudaMemsetAsync hipMemsetAsync
#define cudaMemset2DAsync hipMemset2DAsync
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaStream_t hipStream_t
#define cudaStreamCreate hipStreamCreate
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaEvent_t hipEvent_t
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEventDestroy hipEventDestroy
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDevAttrMaxSharedMemoryPerBlockOptin hipDeviceAttributeSharedMemPerBlockOptin
#define cudaDevAttrComputeCapabilityMajor hipDeviceAttributeComputeCapabilityMajor
#define cudaFuncSetAttribute hipFuncSetAttribute
#define cudaLaunchKernel hipLaunchKernel
#define cudaFuncAttributes hipFuncAttributes
#define cudaFuncGetAttributes hipFuncGetAttributes
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define CGQ_WARP 64 /* wavefront */
#define CGQ_SHFL_DOWN_W(v, d, w) __shfl_down(v, d, w) /* within groups of w lanes */
#define CGQ_SHFL_XOR_W(v, m, w) __shfl_xor(v, m, w)
#define CGQ_SHFL_W(v, src, w) __shfl(v, src, w) /* lane src's v */
#define CGQ_SHFL_UP_W(v, d, w) __shfl_up(v, d, w)
#define CGQ_SYNCWARP() __builtin_amdgcn_wave_barrier() /* a wavefront runs in lockstep: orders its shared accesses */
/* a thread's copies from global to its own shared memory: plain copies (the wait is then a no-op) */
template <class T>
__device__ __forceinline__ void cgq_copy_async(T *dst_shared, const T *src) {
    *dst_shared = *src;
}
__device__ __forceinline__ void cgq_copy_wait() {}
#else
#include <cuda_pipeline.h>
#include <cuda_runtime.h>
/* a thread's copies from global to its own shared memory, all in flight at once (cp.async), then one wait */
template <class T>
__device__ __forceinline__ void cgq_copy_async(T *dst_shared, const T *src) {
    __pipeline_memcpy_async(dst_shared, src, sizeof(T));
}
__device__ __forceinline__ void cgq_copy_wait() {
    __pipeline_commit();
    __pipeline_wait_prior(0);
}
#define CGQ_WARP 32
#define CGQ_SHFL_DOWN_W(v, d, w) __shfl_down_sync(0xffffffffu, v, d, w)
#define CGQ_SHFL_XOR_W(v, m, w) __shfl_xor_sync(0xffffffffu, v, m, w)
#define CGQ_SHFL_W(v, src, w) __shfl_sync(0xffffffffu, v, src, w)
#define CGQ_SHFL_UP_W(v, d, w) __shfl_up_sync(0xffffffffu, v, d, w)
#define CGQ_SYNCWARP() __syncwarp()
#endif

/* The sum over a warp (wavefront) by a fixed butterfly: deterministic, and every lane ends with the same bits. */
template <class T>
__device__ __forceinline__ T warp_total(T v) {
#pragma unroll
    for (int off = CGQ_WARP / 2; off > 0; off /= 2) v += CGQ_SHFL_XOR_W(v, off, CGQ_WARP);
    return v;
}

#endif
