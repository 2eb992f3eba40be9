/* node_ops.cuh: the node-side maps of a MACE layer as one GPU thread per (node, output element): e3nn
 * linears and the species-weighted skip tensor product (one-hot second input), forward and transposed.
 * Each output element is summed by its own thread in a fixed order (deterministic). The structs are the
 * device copy of the model (pointers into device memory). */
#ifndef CGQ_GPU_NODE_OPS_CUH
#define CGQ_GPU_NODE_OPS_CUH

/* Block of `ir` holding flat index j, and j's (channel, component) inside it. */
__device__ inline int irreps_locate(const cgq_irreps *ir, int j, int *u, int *m) {
    int k = 0;
    while (k + 1 < ir->n && ir->b[k + 1].offset <= j) k++;
    const int d = 2 * ir->b[k].l + 1, r = j - ir->b[k].offset;
    *u = r / d, *m = r % d;
    return k;
}

/* y[n] = alpha * (linear(x[n]) + bias) (+ add[n]) */
__global__ void k_linear_fwd(const cgq_linear *lin, int64_t n_nodes, const double *x, int64_t ldx, double *y, int64_t ldy,
                             double alpha, const double *add, int64_t ldadd) {
    const int dout = lin->out.dim;
    const int64_t total = n_nodes * dout;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < total; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = q / dout;
        const int j = (int)(q % dout);
        int w, m;
        const int bo = irreps_locate(&lin->out, j, &w, &m);
        const int mo = lin->out.b[bo].mul, d = 2 * lin->out.b[bo].l + 1;
        const double *xn = x + n * ldx;
        double acc = 0.0;
        for (int k = 0; k < lin->n_ins; k++) {
            if (lin->ins_out[k] != bo) continue;
            const cgq_irrep_block *bi = &lin->in.b[lin->ins_in[k]];
            const double pw = lin->path_weight[k], *W = lin->weight + lin->w_offset[k] + w;
            const double *xb = xn + bi->offset + m;
            for (int u = 0; u < bi->mul; u++) acc += (pw * W[(int64_t)u * mo]) * xb[u * d];
        }
        if (lin->bias && lin->out.b[bo].l == 0 && lin->out.b[bo].parity == 1) {
            int off = 0;
            for (int k = 0; k < bo; k++)
                if (lin->out.b[k].l == 0 && lin->out.b[k].parity == 1) off += lin->out.b[k].mul;
            acc += lin->bias[off + w];
        }
        double v = alpha * acc;
        if (add) v += add[n * ldadd + j];
        y[n * ldy + j] = v;
    }
}

/* gx[n] (+)= alpha * linear^T(gy[n]) */
__global__ void k_linear_bwd(const cgq_linear *lin, int64_t n_nodes, const double *gy, int64_t ldgy, double *gx,
                             int64_t ldgx, double alpha, int accumulate) {
    const int din = lin->in.dim;
    const int64_t total = n_nodes * din;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < total; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = q / din;
        const int i = (int)(q % din);
        int u, m;
        const int bi = irreps_locate(&lin->in, i, &u, &m);
        const double *gn = gy + n * ldgy;
        double acc = 0.0;
        for (int k = 0; k < lin->n_ins; k++) {
            if (lin->ins_in[k] != bi) continue;
            const cgq_irrep_block *bo = &lin->out.b[lin->ins_out[k]];
            const int d = 2 * bo->l + 1, mo = bo->mul;
            const double pw = lin->path_weight[k], *W = lin->weight + lin->w_offset[k] + (int64_t)u * mo;
            const double *gb = gn + bo->offset + m;
            for (int w = 0; w < mo; w++) acc += (pw * W[w]) * gb[w * d];
        }
        double *dst = gx + n * ldgx + i;
        *dst = (accumulate ? *dst : 0.0) + alpha * acc;
    }
}

/* The skip tensor product with a one-hot species second input (MACE's skip_tp / first-layer
 * linear-with-species): a per-species linear, out[w,c] = sum pw W[u,s,w] sum_a C[a,0,c] x1[u,a]. */
__global__ void k_skip_fwd(const cgq_tp *tp, int64_t n_nodes, const int32_t *species, const double *x1, int64_t ldx,
                           double *out, int64_t ldo) {
    const int dout = tp->out.dim, m2 = tp->in2.b[0].mul;
    const int64_t total = n_nodes * dout;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < total; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = q / dout;
        const int j = (int)(q % dout), s = species[n];
        int w, c;
        const int bo = irreps_locate(&tp->out, j, &w, &c);
        const int mo = tp->out.b[bo].mul, d3 = 2 * tp->out.b[bo].l + 1;
        double acc = 0.0;
        for (int k = 0; k < tp->n_ins; k++) {
            if (tp->io[k] != bo) continue;
            const cgq_irrep_block *B1 = &tp->in1.b[tp->i1[k]];
            const int d1 = 2 * B1->l + 1;
            const double pw = tp->path_weight[k], *C = tp->w3j[k];
            const double *W = tp->weight + tp->w_offset[k];
            const double *xb = x1 + n * ldx + B1->offset;
            for (int u = 0; u < B1->mul; u++) {
                double t = 0.0;
                for (int a = 0; a < d1; a++) t += C[a * d3 + c] * xb[u * d1 + a];
                acc += (pw * W[((int64_t)u * m2 + s) * mo + w]) * t;
            }
        }
        out[n * ldo + j] = acc;
    }
}

/* gx1[n] (+)= skip_tp^T(gout[n]) for the one-hot species input */
__global__ void k_skip_bwd(const cgq_tp *tp, int64_t n_nodes, const int32_t *species, const double *gout, int64_t ldg,
                           double *gx1, int64_t ldgx, int accumulate) {
    const int din = tp->in1.dim, m2 = tp->in2.b[0].mul;
    const int64_t total = n_nodes * din;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < total; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = q / din;
        const int i = (int)(q % din), s = species[n];
        int u, a;
        const int b1 = irreps_locate(&tp->in1, i, &u, &a);
        double acc = 0.0;
        for (int k = 0; k < tp->n_ins; k++) {
            if (tp->i1[k] != b1) continue;
            const cgq_irrep_block *BO = &tp->out.b[tp->io[k]];
            const int d3 = 2 * BO->l + 1, mo = BO->mul;
            const double pw = tp->path_weight[k], *C = tp->w3j[k] + a * d3;
            const double *W = tp->weight + tp->w_offset[k] + ((int64_t)u * m2 + s) * mo;
            const double *gb = gout + n * ldg + BO->offset;
            for (int c = 0; c < d3; c++) {
                double g = 0.0;
                for (int w = 0; w < mo; w++) g += (pw * W[w]) * gb[w * d3 + c];
                acc += C[c] * g;
            }
        }
        double *dst = gx1 + n * ldgx + i;
        *dst = (accumulate ? *dst : 0.0) + acc;
    }
}

/* MACE's reshape of the target irreps [blocks][C][2l+1] <-> [C][sum (2l+1)] for the product basis */
__global__ void k_reshape_cd(const cgq_mace_layer *ly, int64_t n_nodes, const double *src, int64_t lds, double *dst,
                             int64_t ldd, int to_cd) {
    const int dT = ly->target.dim, D = ly->coupling_dim;
    const int64_t total = n_nodes * dT;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < total; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = q / dT;
        const int j = (int)(q % dT);
        int ch, mm;
        const int k = irreps_locate(&ly->target, j, &ch, &mm);
        int doff = 0;
        for (int b = 0; b < k; b++) doff += 2 * ly->target.b[b].l + 1;
        const int jc = ch * D + doff + mm;
        if (to_cd) dst[n * ldd + jc] = src[n * lds + j];
        else dst[n * ldd + j] = src[n * lds + jc];
    }
}

#endif
