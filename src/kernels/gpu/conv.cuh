/* conv.cuh: MACE's interaction convolution (uvu tensor product of sender features with the edge's
 * spherical harmonics, weighted per edge and channel by the radial MLP) as one thread block per
 * receiver, one thread per channel. The block walks its CSR row in order, so each sum has a fixed order:
 * deterministic, no atomics. Per edge, the SH-contracted couplings P_k[a][c] = sum_b C_k[a,b,c] Y[b] are
 * built once in shared memory and used by every channel.
 * Forward: M[i] = sum_e sum_k pw_k w[e,k,u] sum_a x_s[u,a] P_k[a][c].
 * Reverse: per edge dE/dw (for the MLP reverse), dE/dY and dE/dcut (block reductions), and the edge's
 * contribution to dE/dx of its sender (summed per sender row afterwards, in order). */
#ifndef CGQ_GPU_CONV_CUH
#define CGQ_GPU_CONV_CUH

#define CONV_MAX_D 7        /* 2l+1, l <= 3 */
#define CONV_MAX_XDIM 16    /* per-channel width of the sender features (sum of 2l+1) */
#define CONV_MAX_Y 16       /* (l_sh+1)^2 */

struct conv_ins {
    int d1, d2, d3;
    int x_off, xa_off; /* in1 block: e3nn offset; per-channel offset */
    int y_off;         /* SH block offset */
    int acc_off;       /* output block: per-channel offset */
    int p_off, c_off;  /* P_k in shared memory; C_k in the packed coupling array */
    int64_t w_off;
    double pw;
};

struct conv_block {
    int off, d, acc_off; /* e3nn offset, 2l+1, per-channel offset */
};

struct conv_plan {
    int ok; /* 0: this layer's convolution is not of the supported form (the v1 steps run it) */
    int n_ins, n_out, n_in1;
    int C, threads, acc_dim, p_dim, x_dim, nY, dhu, dM;
    int64_t wn;
    conv_ins *ins;
    conv_block *outb, *in1b;
    double *cg;
    int *p_ins, *p_a, *p_c; /* for each P entry: instruction and (a, c) */
};

/* P_k[a][c] = sum_b C_k[a,b,c] Y[b] for every instruction, into shared memory */
__device__ inline void conv_build_p(const conv_plan &p, const double *Ys, double *P) {
    for (int q = threadIdx.x; q < p.p_dim; q += blockDim.x) {
        const conv_ins &k = p.ins[p.p_ins[q]];
        const int a = p.p_a[q], c = p.p_c[q];
        const double *C = p.cg + k.c_off + a * k.d2 * k.d3 + c;
        double s = 0.0;
        for (int b = 0; b < k.d2; b++) s += C[b * k.d3] * Ys[k.y_off + b];
        P[q] = s;
    }
}

/* Receivers [i0, i0 + gridDim.x); w holds the raw MLP outputs of edges from e0 (row stride wn); cut is
 * non-NULL when the model multiplies the weights by the cutoff (apply_cutoff off). */
__global__ void k_conv_fwd(conv_plan p, int64_t i0, const int64_t *row_ptr, const int32_t *sender, const double *Y,
                           const double *hu, const double *w, int64_t e0, const double *cut, double *M) {
    extern __shared__ double smem[];
    double *acc = smem, *P = acc + (size_t)p.acc_dim * p.C, *Ys = P + p.p_dim;
    const int64_t i = i0 + blockIdx.x;
    const int u = threadIdx.x;
    for (int j = threadIdx.x; j < p.acc_dim * p.C; j += blockDim.x) acc[j] = 0.0;
    for (int64_t e = row_ptr[i]; e < row_ptr[i + 1]; e++) {
        __syncthreads(); /* previous edge's P is no longer read */
        for (int b = threadIdx.x; b < p.nY; b += blockDim.x) Ys[b] = Y[e * p.nY + b];
        __syncthreads();
        conv_build_p(p, Ys, P);
        __syncthreads();
        if (u >= p.C) continue;
        const double *x = hu + (int64_t)sender[e] * p.dhu, *we = w + (e - e0) * p.wn;
        const double cs = cut ? cut[e] : 1.0;
        for (int q = 0; q < p.n_ins; q++) {
            const conv_ins &k = p.ins[q];
            double xa[CONV_MAX_D];
            for (int a = 0; a < k.d1; a++) xa[a] = x[k.x_off + u * k.d1 + a];
            const double s = k.pw * (cut ? we[k.w_off + u] * cs : we[k.w_off + u]);
            const double *Pk = P + k.p_off;
            for (int c = 0; c < k.d3; c++) {
                double t = 0.0;
                for (int a = 0; a < k.d1; a++) t += xa[a] * Pk[a * k.d3 + c];
                acc[(k.acc_off + c) * p.C + u] += s * t;
            }
        }
    }
    __syncthreads();
    if (u >= p.C) return;
    double *Mi = M + i * p.dM;
    for (int b = 0; b < p.n_out; b++) {
        const conv_block &ob = p.outb[b];
        for (int c = 0; c < ob.d; c++) Mi[ob.off + u * ob.d + c] = acc[(ob.acc_off + c) * p.C + u];
    }
}

/* Reverse of k_conv_fwd for receivers [i0, i0 + gridDim.x), given gM = dE/dM. Writes per edge: gw (dE/d raw
 * MLP output, row stride wn, from e0), gY (dE/dY, stride nY), gcut (dE/dcut through the weights, when cut),
 * gx1e (this edge's dE/dx of its sender, stride dhu). */
__global__ void k_conv_bwd(conv_plan p, int64_t i0, const int64_t *row_ptr, const int32_t *sender, const double *Y,
                           const double *hu, const double *w, int64_t e0, const double *cut, const double *gM,
                           double *gw, double *gY, double *gcut, double *gx1e) {
    extern __shared__ double smem[];
    double *gm = smem, *P = gm + (size_t)p.acc_dim * p.C, *Ys = P + p.p_dim, *red = Ys + CONV_MAX_Y;
    const int64_t i = i0 + blockIdx.x;
    const int u = threadIdx.x, nt = blockDim.x, nred = p.nY + 1;
    if (u < p.C) {
        const double *g = gM + i * p.dM;
        for (int b = 0; b < p.n_out; b++) {
            const conv_block &ob = p.outb[b];
            for (int c = 0; c < ob.d; c++) gm[(ob.acc_off + c) * p.C + u] = g[ob.off + u * ob.d + c];
        }
    }
    for (int64_t e = row_ptr[i]; e < row_ptr[i + 1]; e++) {
        __syncthreads();
        for (int b = threadIdx.x; b < p.nY; b += blockDim.x) Ys[b] = Y[e * p.nY + b];
        __syncthreads();
        conv_build_p(p, Ys, P);
        __syncthreads();
        double gy[CONV_MAX_Y + 1];
        for (int b = 0; b < nred; b++) gy[b] = 0.0; /* gy[nY]: dE/dcut */
        if (u < p.C) {
            const double *x = hu + (int64_t)sender[e] * p.dhu, *we = w + (e - e0) * p.wn;
            double *gwe = gw + (e - e0) * p.wn;
            const double cs = cut ? cut[e] : 1.0;
            double gx[CONV_MAX_XDIM];
            for (int a = 0; a < p.x_dim; a++) gx[a] = 0.0;
            for (int q = 0; q < p.n_ins; q++) {
                const conv_ins &k = p.ins[q];
                double xa[CONV_MAX_D], g[CONV_MAX_D];
                for (int a = 0; a < k.d1; a++) xa[a] = x[k.x_off + u * k.d1 + a];
                for (int c = 0; c < k.d3; c++) g[c] = gm[(k.acc_off + c) * p.C + u];
                const double wraw = we[k.w_off + u], wk = cut ? wraw * cs : wraw;
                const double *Pk = P + k.p_off;
                double s = 0.0;
                for (int a = 0; a < k.d1; a++) {
                    double t = 0.0;
                    for (int c = 0; c < k.d3; c++) t += Pk[a * k.d3 + c] * g[c];
                    s += xa[a] * t;
                    gx[k.xa_off + a] += k.pw * wk * t;
                }
                const double gwk = k.pw * s; /* dE/dw */
                if (cut) {
                    gy[p.nY] += gwk * wraw;
                    gwe[k.w_off + u] = gwk * cs;
                } else {
                    gwe[k.w_off + u] = gwk;
                }
                /* dE/dY[b] = pw sum_{a,c} C[a,b,c] w x[a] g[c] */
                const double *C = p.cg + k.c_off;
                for (int a = 0; a < k.d1; a++) {
                    const double xw = wk * xa[a];
                    for (int b = 0; b < k.d2; b++) {
                        double t = 0.0;
                        for (int c = 0; c < k.d3; c++) t += C[(a * k.d2 + b) * k.d3 + c] * g[c];
                        gy[k.y_off + b] += k.pw * xw * t;
                    }
                }
            }
            double *gxe = gx1e + e * p.dhu;
            for (int b = 0; b < p.n_in1; b++) {
                const conv_block &xb = p.in1b[b];
                for (int a = 0; a < xb.d; a++) gxe[xb.off + u * xb.d + a] = gx[xb.acc_off + a];
            }
        }
        /* fixed-shape tree reduction over the channels (deterministic) */
        for (int b = 0; b < nred; b++) red[b * nt + u] = gy[b];
        for (int half = nt / 2; half > 0; half /= 2) {
            __syncthreads();
            if (u < half)
                for (int b = 0; b < nred; b++) red[b * nt + u] += red[b * nt + u + half];
        }
        __syncthreads();
        if (u < p.nY) gY[e * p.nY + u] = red[u * nt];
        if (u == 0 && gcut) gcut[e] = cut ? red[p.nY * nt] : 0.0;
    }
}

static size_t conv_fwd_smem(const conv_plan &p) {
    return sizeof(double) * ((size_t)p.acc_dim * p.C + p.p_dim + CONV_MAX_Y);
}
static size_t conv_bwd_smem(const conv_plan &p) {
    return sizeof(double) * ((size_t)p.acc_dim * p.C + p.p_dim + CONV_MAX_Y + (size_t)(CONV_MAX_Y + 1) * p.threads);
}

#endif
