/* gemm.cuh: the radial MLP's products over many edges at once (rows = edges), forward and reverse, with the
 * epilogues it needs: through cuBLAS in CUDA builds (SGEMM/DGEMM, then the epilogue as its own pass: the MLP of
 * MACE-MP-0 ran at ~8 TFLOP/s in the tiled kernel below), and through the tiled kernel in HIP builds.
 * In the tiled kernel each output element is owned by one thread and summed over k in order, so
 * results are deterministic. C[m,n] = epi(alpha * sum_k A[m,k] B(k,n)), B(k,n) = B[k*ldb+n] or, transposed,
 * B[n*ldb+k]; T is the working precision (double or float). Included by mace_gpu.cu after the reference
 * math (cgq_act_eval). */
#ifndef CGQ_GPU_GEMM_CUH
#define CGQ_GPU_GEMM_CUH

#if defined(__HIPCC__)
typedef void *cgq_blas; /* no vendor BLAS in the HIP build: the tiled kernel runs every product */
#else
#include <cublas_v2.h>
typedef cublasHandle_t cgq_blas;
#endif

enum gemm_epilogue {
    GEMM_STORE,   /* C = acc */
    GEMM_ACT_FWD, /* hidden layer: C = z = acc, C[+hz] = cst*act(z) (the fcnet cache layout) */
    GEMM_ACT_BWD  /* reverse through a hidden layer: C = acc * cst*act'(Z) */
};

#define GEMM_BM 64
#define GEMM_BN 64
#define GEMM_BK 16
#define GEMM_THREADS 256 /* 16 x 16, each 4 x 4 outputs */

/* the activations in the working precision: float keeps float arithmetic (expf), double is the reference */
template <class T>
__device__ inline T act_eval_t(cgq_act act, double cst, T x, T *df) {
    if (sizeof(T) == sizeof(float) && (act == CGQ_ACT_SILU || act == CGQ_ACT_IDENTITY)) {
        if (act == CGQ_ACT_IDENTITY) {
            if (df) *df = (T)cst;
            return (T)cst * x;
        }
        const T sg = x >= 0 ? (T)1 / ((T)1 + expf(-x)) : expf(x) / ((T)1 + expf(x));
        if (df) *df = (T)cst * sg * ((T)1 + x * ((T)1 - sg));
        return (T)cst * x * sg;
    }
    double d;
    const double f = cgq_act_eval(act, cst, (double)x, df ? &d : NULL);
    if (df) *df = (T)d;
    return (T)f;
}

template <class T>
struct gemm_args {
    int64_t M;
    int N, K;
    const T *A;
    int64_t lda;
    const T *B;
    int ldb;
    T *C;
    int64_t ldc;
    T alpha;
    const T *Z; /* GEMM_ACT_BWD: pre-activations */
    int64_t ldz;
    int hz;          /* GEMM_ACT_FWD: offset of the activations after z */
    cgq_act act;
    double act_cst;
};

/* One shared-memory tile of a 256-thread block's 64 x 64 output: thread (tx, ty) owns rows ty + 16 i and
   columns tx + 16 j, i, j < 4. Products in T, sums in Acc, k in order (the result does not depend on the
   launch). As/Bs are padded by one column against bank conflicts. Shared with the node linears (node_ops.cuh).
   A 128 x 128 tile with 8 x 8 per thread was slower for the radial MLP on H100 (MP-0 fp32 MLP forward 17.6 vs
   14.8 ms, reverse 12.0 vs 7.7 ms; bench/RESULTS.md, session 4). */
template <typename T, typename Acc>
__device__ __forceinline__ void gemm_tile_fma(const T (&As)[GEMM_BK][GEMM_BM + 1], const T (&Bs)[GEMM_BK][GEMM_BN + 1],
                                              Acc (&acc)[4][4], int tx, int ty)
{
#pragma unroll 4
    for (int kk = 0; kk < GEMM_BK; kk++) {
        T a[4], b[4];
        for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
        for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx + 16 * j];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
    }
}

template <class T, int EPI, bool BT>
__global__ void __launch_bounds__(GEMM_THREADS) k_gemm(gemm_args<T> g) {
    __shared__ T As[GEMM_BK][GEMM_BM + 1];
    __shared__ T Bs[GEMM_BK][GEMM_BN + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int64_t m0 = (int64_t)blockIdx.x * GEMM_BM;
    const int n0 = blockIdx.y * GEMM_BN;
    T acc[4][4] = {{0}};
    for (int k0 = 0; k0 < g.K; k0 += GEMM_BK) {
        for (int q = threadIdx.x; q < GEMM_BM * GEMM_BK; q += GEMM_THREADS) {
            const int mm = q / GEMM_BK, kk = q % GEMM_BK;
            const int64_t row = m0 + mm;
            const int col = k0 + kk;
            As[kk][mm] = (row < g.M && col < g.K) ? g.A[row * g.lda + col] : (T)0;
        }
        for (int q = threadIdx.x; q < GEMM_BK * GEMM_BN; q += GEMM_THREADS) {
            int kk, nn;
            if (BT) nn = q / GEMM_BK, kk = q % GEMM_BK;
            else kk = q / GEMM_BN, nn = q % GEMM_BN;
            const int k = k0 + kk, n = n0 + nn;
            T v = 0;
            if (k < g.K && n < g.N) v = BT ? g.B[(int64_t)n * g.ldb + k] : g.B[(int64_t)k * g.ldb + n];
            Bs[kk][nn] = v;
        }
        __syncthreads();
        gemm_tile_fma(As, Bs, acc, tx, ty);
        __syncthreads();
    }
    for (int i = 0; i < 4; i++) {
        const int64_t row = m0 + ty + 16 * i;
        if (row >= g.M) continue;
        for (int j = 0; j < 4; j++) {
            const int n = n0 + tx + 16 * j;
            if (n >= g.N) continue;
            const T v = g.alpha * acc[i][j];
            T *c = g.C + row * g.ldc + n;
            if (EPI == GEMM_STORE) {
                *c = v;
            } else if (EPI == GEMM_ACT_FWD) {
                c[0] = v;
                c[g.hz] = act_eval_t<T>(g.act, g.act_cst, v, NULL);
            } else {
                T d;
                act_eval_t<T>(g.act, g.act_cst, g.Z[row * g.ldz + n], &d);
                *c = v * d;
            }
        }
    }
}

/* The epilogues as a pass of their own after a vendor-BLAS product (one thread per element of the M x N output). */
template <class T, int EPI>
__global__ void k_gemm_epilogue(gemm_args<T> g) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= g.M * g.N) return;
    const int64_t row = i / g.N;
    const int n = (int)(i % g.N);
    T *c = g.C + row * g.ldc + n;
    if (EPI == GEMM_ACT_FWD) {
        c[g.hz] = act_eval_t<T>(g.act, g.act_cst, c[0], NULL);
    } else {
        T d;
        act_eval_t<T>(g.act, g.act_cst, g.Z[row * g.ldz + n], &d);
        *c *= d;
    }
}

#if !defined(__HIPCC__)
/* Row-major C = alpha A B(k,n) as the column-major product C^T = B^T A^T. cuBLAS gives the same bits on every run
 * on GPUs of one architecture and SM count (its documented reproducibility). The handle's default math mode keeps
 * float products in float (no TF32); pedantic mode made the fp64 MLP 1.4x slower (MACE-MP-0, H100). */
static cublasStatus_t blas_gemm(cgq_blas h, cublasOperation_t tb, int m, int n, int k, const float *alpha,
                                const float *B, int ldb, const float *A, int lda, float *C, int ldc) {
    const float zero = 0;
    return cublasSgemm(h, tb, CUBLAS_OP_N, m, n, k, alpha, B, ldb, A, lda, &zero, C, ldc);
}
static cublasStatus_t blas_gemm(cgq_blas h, cublasOperation_t tb, int m, int n, int k, const double *alpha,
                                const double *B, int ldb, const double *A, int lda, double *C, int ldc) {
    const double zero = 0;
    return cublasDgemm(h, tb, CUBLAS_OP_N, m, n, k, alpha, B, ldb, A, lda, &zero, C, ldc);
}
#endif

/* C = epi(alpha A B): through the vendor BLAS where the build has one (blas != NULL), else the tiled kernel.
 * Returns 0, or nonzero when the BLAS call failed. */
template <class T, int EPI, bool BT>
static int gemm_launch(const gemm_args<T> &g, cgq_blas blas, cudaStream_t s) {
    if (g.M == 0 || g.N == 0) return 0;
#if !defined(__HIPCC__)
    if (blas) {
        if (g.M > INT32_MAX || g.lda > INT32_MAX || g.ldc > INT32_MAX) return 1;
        const T alpha = g.alpha;
        if (blas_gemm(blas, BT ? CUBLAS_OP_T : CUBLAS_OP_N, g.N, (int)g.M, g.K, &alpha, g.B, g.ldb, g.A, (int)g.lda, g.C,
                      (int)g.ldc) != CUBLAS_STATUS_SUCCESS)
            return 1;
        if (EPI != GEMM_STORE) {
            const int64_t n = g.M * g.N;
            k_gemm_epilogue<T, EPI><<<(unsigned)((n + 255) / 256), 256, 0, s>>>(g);
        }
        return 0;
    }
#endif
    dim3 grid((unsigned)((g.M + GEMM_BM - 1) / GEMM_BM), (unsigned)((g.N + GEMM_BN - 1) / GEMM_BN));
    k_gemm<T, EPI, BT><<<grid, GEMM_THREADS, 0, s>>>(g);
    return 0;
}

/* Widest hidden layer (the reverse pass's temporaries). */
static int mlp_hidden_width(const cgq_fcnet &fc) {
    int w = 1;
    for (int k = 1; k < fc.n_layers; k++) w = fc.h[k] > w ? fc.h[k] : w;
    return w;
}

/* The e3nn FullyConnectedNet over rows [0, M) of x (ld ldx): hidden pre-activations and activations into
 * cache (row stride cgq_fcnet_cache_size), outputs into out (row stride ldo). Same layout as the reference.
 * Each product is scaled by 1/sqrt(fan-in), as e3nn does, unless the weights carry it (prescaled: nequip's
 * ScalarMLPFunction, whose W_k are stored times alpha_k). */
template <class T>
static int mlp_forward(const cgq_fcnet &fc, const T *const *W, int64_t M, const T *x, int64_t ldx, T *cache, T *out,
                       int64_t ldo, cgq_blas blas, cudaStream_t s, bool prescaled = false) {
    int err = 0;
    const int cs = cgq_fcnet_cache_size(&fc);
    const T *in = x;
    int64_t ldin = ldx;
    int off = 0;
    for (int k = 0; k < fc.n_layers; k++) {
        gemm_args<T> g = {};
        g.M = M, g.N = fc.h[k + 1], g.K = fc.h[k];
        g.A = in, g.lda = ldin, g.B = W[k], g.ldb = fc.h[k + 1];
        g.alpha = prescaled ? (T)1 : (T)(1.0 / sqrt((double)fc.h[k]));
        g.act = fc.act, g.act_cst = fc.act_cst;
        if (k == fc.n_layers - 1) {
            g.C = out, g.ldc = ldo;
            err |= gemm_launch<T, GEMM_STORE, false>(g, blas, s);
        } else {
            g.C = cache + off, g.ldc = cs, g.hz = fc.h[k + 1];
            err |= gemm_launch<T, GEMM_ACT_FWD, false>(g, blas, s);
            in = cache + off + fc.h[k + 1], ldin = cs;
            off += 2 * fc.h[k + 1];
        }
    }
    return err;
}

/* Reverse of mlp_forward: gx[M, h0] (ld ldgx) from gout [M, h_last] (ld ldg); tmp holds 2 x M x mlp_hidden_width. */
template <class T>
static int mlp_backward(const cgq_fcnet &fc, const T *const *W, int64_t M, const T *cache, const T *gout, int64_t ldg,
                        T *gx, int64_t ldgx, T *tmp, cgq_blas blas, cudaStream_t s, bool prescaled = false) {
    int err = 0;
    const int cs = cgq_fcnet_cache_size(&fc), maxw = mlp_hidden_width(fc);
    int off[CGQ_MAX_FC_LAYERS + 1], o = 0;
    for (int k = 0; k < fc.n_layers; k++) {
        off[k] = o;
        o += 2 * fc.h[k + 1];
    }
    const T *g = gout;
    int64_t ldin = ldg;
    for (int k = fc.n_layers - 1; k >= 0; k--) {
        gemm_args<T> a = {};
        a.M = M, a.N = fc.h[k], a.K = fc.h[k + 1];
        a.A = g, a.lda = ldin, a.B = W[k], a.ldb = fc.h[k + 1];
        a.alpha = prescaled ? (T)1 : (T)(1.0 / sqrt((double)fc.h[k]));
        a.act = fc.act, a.act_cst = fc.act_cst;
        if (k == 0) {
            a.C = gx, a.ldc = ldgx;
            err |= gemm_launch<T, GEMM_STORE, true>(a, blas, s);
        } else {
            T *dst = tmp + (size_t)(k % 2) * M * maxw;
            a.C = dst, a.ldc = maxw;
            a.Z = cache + off[k - 1], a.ldz = cs; /* pre-activation of the hidden layer feeding layer k */
            err |= gemm_launch<T, GEMM_ACT_BWD, true>(a, blas, s);
            g = dst, ldin = maxw;
        }
    }
    return err;
}

#endif
