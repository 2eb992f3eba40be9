/* mma_rate.cu: the rate of mma.sync m16n8k8 with TF32 operands (SASS HMMA.1688.F32.TF32: what the node GEMM tiles,
 * node_ops.cuh, and the radial tensor-core kernels issue) on this GPU, per SM and cycle, for CH independent
 * accumulator chains per warp and W warps per SM: the ceiling those kernels are measured against (their chains are 6
 * products long per 16-wide k-step, 8 side by side per warp, 16 warps per SM).
 * usage: nvcc -O3 -arch=sm_90 -I src -o mma_rate bench/mma_rate.cu && ./mma_rate */
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

#include "kernels/gpu/tf32_mma.cuh" /* mma_tf32: the instruction the kernels issue */

template <int CH>
__global__ void k_mma(int iters, float *out) {
    uint32_t a[4], b[2];
    for (int i = 0; i < 4; i++) a[i] = __float_as_uint(1.0f + 1e-3f * (threadIdx.x + i));
    b[0] = a[1], b[1] = a[2];
    float d[CH][4] = {};
    for (int it = 0; it < iters; it++) {
#pragma unroll
        for (int c = 0; c < CH; c++) mma_tf32(d[c], a, b[0], b[1]);
    }
    float s = 0;
    for (int c = 0; c < CH; c++) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
    if (s == 1234.5f) out[0] = s; /* keeps the products */
}

template <int CH>
static void run(int sms, double ghz, int warps, float *out) {
    const int iters = 4096 / CH * 16, blocks = sms * (warps / 4);
    k_mma<CH><<<blocks, 128>>>(iters, out); /* warm-up */
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    cudaEventRecord(e0);
    k_mma<CH><<<blocks, 128>>>(iters, out);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    const double mmas = (double)blocks * 4 * iters * CH, per = mmas / (ms * 1e-3 * ghz * 1e9 * sms);
    printf("chains %2d per warp, %2d warps per SM: %.3f HMMA.1688 per SM and cycle (%.0f TF32 TFLOP/s)\n", CH, warps,
           per, mmas * 2048 / (ms * 1e-3) / 1e12);
}

int main() {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess)
        return printf("mma_rate: no CUDA device here (cudaGetDeviceProperties failed); run it on the GPU machine\n"), 1;
    int khz = 0; /* the SM clock's maximum: the rate assumes it held */
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
    const double ghz = khz * 1e-6;
    printf("%s, %d SMs, %.2f GHz\n", p.name, p.multiProcessorCount, ghz);
    float *out;
    cudaMalloc(&out, 4);
    for (int w : {4, 8, 16}) {
        run<1>(p.multiProcessorCount, ghz, w, out);
        run<2>(p.multiProcessorCount, ghz, w, out);
        run<4>(p.multiProcessorCount, ghz, w, out);
        run<8>(p.multiProcessorCount, ghz, w, out);
        run<16>(p.multiProcessorCount, ghz, w, out);
    }
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
