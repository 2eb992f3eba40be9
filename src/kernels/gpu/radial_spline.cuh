/* radial_spline.cuh: the fp32 path's radial MLP from the table of kernels/cpu/radial_spline.h. The hidden layers'
 * output a(r) is interpolated per edge (cubic Hermite in r) instead of three GEMMs and their activation passes; the
 * last layer w = a W / sqrt(h) runs on the tensor cores with float-accurate sums, a interpolated inside that kernel
 * (radial_tc.cuh), or, in HIP builds, on GPUs older than sm_80 and with CGQ_GPU_RADIAL_SGEMM=1, as k_radial_table_fwd
 * then a float GEMM (SGEMM). The reverse takes dE/da = dE/dw W^T / sqrt(h) and dE/dr = sum_j dE/da_j da_j/dr from the
 * same table, so the forces are the exact derivative of the interpolated energy: in one tensor-core kernel
 * (radial_tc.cuh), or SGEMM then k_radial_table_bwd where the forward runs SGEMM (and with
 * CGQ_GPU_RADIAL_BWD_SGEMM=1). Included by mace_gpu.cu after gemm.cuh. */
#ifndef CGQ_GPU_RADIAL_SPLINE_CUH
#define CGQ_GPU_RADIAL_SPLINE_CUH

extern "C" {
#include "kernels/cpu/radial_spline.h"
}
#include "kernels/gpu/radial_table.cuh"
#include "kernels/gpu/tf32_mma.cuh"

/* a of edges e0 .. e0 + ne (their table variable r): rows of width W */
template <class T>
__global__ void k_radial_table_fwd(radial_table s, const double *r, int64_t e0, int64_t ne, T *a) {
    const int W = s.width;
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= ne * W) return;
    const int64_t e = i / W;
    const int j = (int)(i % W);
    float b[3], db[3];
    const int k = hermite_weights(s, r[e0 + e], b, db);
    a[e * W + j] = (T)hermite_value(s.knots + (size_t)k * 4 * W, W, j, b);
}

/* gr[e] = sum_j ga[e, j] da_j/dr(r_e), one warp (wavefront) per edge, the lanes' sums added by a fixed shuffle tree */
template <class T>
__global__ void k_radial_table_bwd(radial_table s, const double *r, int64_t e0, int64_t ne, const T *ga, double *gr) {
    const int W = s.width, lane = threadIdx.x % CGQ_WARP;
    const int64_t e = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CGQ_WARP;
    if (e >= ne) return;
    float b[3], db[3];
    const int k = hermite_weights(s, r[e0 + e], b, db);
    const float *p = s.knots + (size_t)k * 4 * W;
    float acc = 0.0f;
    for (int j = lane; j < W; j += CGQ_WARP) acc += (float)ga[e * W + j] * hermite_slope(p, W, j, db);
    acc = warp_total(acc);
    if (lane == 0) gr[e] = (double)acc * s.inv_step;
}

#include "kernels/gpu/radial_tc.cuh"

/* The width of the rows of a (hidden width) that radial_table_forward needs per chunk edge for L layers' tables:
 * 0 when every layer's last layer runs on the tensor cores, which never store a. */
template <class T>
static int64_t radial_table_rows(const radial_table *s, int L) {
    int64_t w = 0;
    for (int t = 0; t < L; t++)
        if (!(s[t].w_tc && sizeof(T) == sizeof(float))) w = std::max<int64_t>(w, s[t].width);
    return w;
}

/* w[ne, wn] (ld ldw) of edges e0 .. e0 + ne (their table variable in r) from the table: on the tensor cores
 * (radial_tc.cuh), or a into abuf then the last layer's GEMM (W_last: fc's last weights in T). Returns 0, or nonzero
 * when the BLAS call failed. */
template <class T>
static int radial_table_forward(const radial_table &s, const cgq_fcnet &fc, const T *W_last, const double *r,
                                int64_t e0, int64_t ne, T *abuf, T *w, int64_t ldw, cgq_blas blas) {
    if (ne == 0) return 0;
    const int W = s.width, wn = fc.h[fc.n_layers];
    const T alpha = (T)s.alpha;
#if !defined(__HIPCC__)
    if (s.w_tc && sizeof(T) == sizeof(float)) {
        radial_tc_forward(s, wn, r, e0, ne, reinterpret_cast<float *>(w), ldw);
        return 0;
    }
#endif
    k_radial_table_fwd<T><<<(unsigned)((ne * W + 255) / 256), 256>>>(s, r, e0, ne, abuf);
    gemm_args<T> g = {};
    g.M = ne, g.N = wn, g.K = W;
    g.A = abuf, g.lda = W, g.B = W_last, g.ldb = wn, g.C = w, g.ldc = ldw, g.alpha = alpha;
    return gemm_launch<T, GEMM_STORE, false>(g, blas, 0);
}

/* gr[ne] = dE/d(table variable) of edges e0 .. e0 + ne from gw = dE/dw (ld wn); ga: ne x width temporaries */
template <class T>
static int radial_table_backward(const radial_table &s, const cgq_fcnet &fc, const T *W_last, const double *r,
                                 int64_t e0, int64_t ne, const T *gw, T *ga, double *gr, cgq_blas blas) {
    if (ne == 0) return 0;
    const int W = s.width, wn = fc.h[fc.n_layers];
#if !defined(__HIPCC__)
    if (s.w_tc_bwd && sizeof(T) == sizeof(float)) {
        radial_tc_backward(s, wn, r, e0, ne, reinterpret_cast<const float *>(gw), gr);
        return 0;
    }
#endif
    gemm_args<T> g = {};
    g.M = ne, g.N = W, g.K = wn;
    g.A = gw, g.lda = wn, g.B = W_last, g.ldb = wn, g.C = ga, g.ldc = W, g.alpha = (T)s.alpha;
    const int err = gemm_launch<T, GEMM_STORE, true>(g, blas, 0);
    k_radial_table_bwd<T><<<(unsigned)((ne * CGQ_WARP + 255) / 256), 256>>>(s, r, e0, ne, ga, gr);
    return err;
}

#endif
