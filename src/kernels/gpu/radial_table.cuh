/* radial_table.cuh: a function of r tabulated per interval for cubic Hermite interpolation on the GPU: the fp32 radial
 * MLPs' hidden output a(r) (radial_spline.cuh) and the convolution's per-edge weights w(r) = alpha a(r) W (the weight
 * tables, conv.cuh), both with the same intervals. Included by conv.cuh and radial_spline.cuh. */
#ifndef CGQ_GPU_RADIAL_TABLE_CUH
#define CGQ_GPU_RADIAL_TABLE_CUH

/* One layer's table on the GPU */
struct radial_table {
    int n_int = 0, width = 0; /* n_int = 0: no table, the MLP runs per edge */
    double step = 0;          /* of the table's variable: r (MACE), r / r_max(pair) (NequIP) */
    double inv_step = 0;      /* 1 / step: the kernels multiply (a double division is ~40 SASS instructions) */
    float alpha = 1;          /* the last layer's scale: 1/sqrt(width) (e3nn), 1 (nequip's weights carry it) */
    /* [n_int][4][width]: per interval a(r_k), a(r_k+1) - a(r_k), and step * da/dr at both ends. The difference is
     * formed in double: the slope from a(r_k+1) and a(r_k) in float would lose 3 digits to cancellation. A weight
     * table (conv.cuh) stores per interval and column the same cubic's coefficients in t (wtable_value), formed in
     * double, as [n_int][width][4]: a column's 4 values in one 16-byte read. */
    const float *knots = nullptr;
    /* A weight table's compact form (wtable12_value), read by the std forward: per interval and column (a_k, d) in
     * float and, in 16 bits each, the slopes' departures from the chord, m - d = escale[column] (v - 32768): 12 bytes
     * instead of 16, with the float table's accuracy (its 16 bits span the column's largest departure, about 1e-4 of
     * its values). ad and ev are [n_int][chunk][C] of 16-byte chunks (wtable12_ad_row / 2 and wtable12_ev_row / 4 per
     * interval and channel): channel u's entries of instructions q (columns q C + u), 2 per chunk in ad, 4 in ev;
     * escale is per column. */
    const float2 *ad = nullptr;
    const uint32_t *ev = nullptr;
    const float *escale = nullptr;
    const uint32_t *w_tc = nullptr;     /* the last layer on the tensor cores: radial_tc_layout (null: SGEMM) */
    const uint32_t *w_tc_bwd = nullptr; /* its reverse on the tensor cores: radial_tc_layout_bwd (null: SGEMM) */
};

/* The interval k of r and the Hermite weights b of its rows 1-3 (difference d, scaled slopes m_k, m_k+1), and db of
 * the same for step * da/dr: a = a_k + h01 d + h10 m_k + h11 m_k+1 (as h00 + h01 = 1), step a' = h01' d + h10' m_k +
 * h11' m_k+1. */
__device__ __forceinline__ int hermite_interval(const radial_table &s, double r, float &t) {
    double x = r * s.inv_step;
    if (!(x > 0.0)) x = 0.0;
    int k = (int)fmin(x, (double)s.n_int);
    if (k >= s.n_int) k = s.n_int - 1;
    t = x - k > 1.0 ? 2.0f : (float)(x - k); /* t > 1: past r_max (the last value, flat) */
    return k;
}
/* hermite_weights from the interval's t (hermite_interval: one edge's interval is found once, its weights in each of
 * the threads that use them) */
__device__ __forceinline__ void hermite_weights_at(float t_in, float b[3], float db[3]) {
    const bool beyond = t_in > 1.0f;
    const float t = beyond ? 1.0f : t_in, u = 1.0f - t;
    b[0] = t * t * (3.0f - 2.0f * t), b[1] = t * u * u, b[2] = -t * t * u;
    db[0] = 6.0f * t * u, db[1] = u * (1.0f - 3.0f * t), db[2] = t * (3.0f * t - 2.0f);
    if (beyond) db[0] = db[1] = db[2] = 0.0f;
}
__device__ __forceinline__ int hermite_weights(const radial_table &s, double r, float b[3], float db[3]) {
    float t;
    const int k = hermite_interval(s, r, t);
    hermite_weights_at(t, b, db);
    return k;
}

/* a_j, and step * da_j/dr, of the interval whose rows start at p (width W), from hermite_weights' b and db: the one
 * expression every kernel evaluates (hermite_mix, also for values loaded otherwise), so the tensor-core and SGEMM
 * paths interpolate the same bits */
__device__ __forceinline__ float hermite_mix(float a, float d, float m0, float m1, const float b[3]) {
    return a + (b[0] * d + b[1] * m0 + b[2] * m1);
}
__device__ __forceinline__ float hermite_mix_slope(float d, float m0, float m1, const float db[3]) {
    return db[0] * d + db[1] * m0 + db[2] * m1;
}
__device__ __forceinline__ float hermite_value(const float *p, int W, int j, const float b[3]) {
    return hermite_mix(p[j], p[W + j], p[2 * W + j], p[3 * W + j], b);
}
__device__ __forceinline__ float hermite_slope(const float *p, int W, int j, const float db[3]) {
    return hermite_mix_slope(p[W + j], p[2 * W + j], p[3 * W + j], db);
}

/* A weight table's column (its 4 values v, [n_int][width][4]): the interval's cubic in t, w = c0 + c1 t + c2 t^2 +
 * c3 t^3 (Horner: 3 FMA; the Hermite form's value and slope took 7 instructions a weight, session 35), and its slope
 * step dw/dr = c1 + 2 t (c2 + 1.5 t c3) (2 FMA) from the edge's wtable_basis h = (t, 1.5 t, 2 t). Past r_max (t > 1)
 * the value is the last one; the slope there is not zero, so the caller drops it (wtable_inside). */
__device__ __forceinline__ const float4 *wtable_at(const radial_table &s, int k, int64_t col) {
    return reinterpret_cast<const float4 *>(s.knots) + (size_t)k * s.width + col;
}
__device__ __forceinline__ void wtable_basis(float t_in, float h[3]) {
    const float t = t_in > 1.0f ? 1.0f : t_in;
    h[0] = t, h[1] = 1.5f * t, h[2] = 2.0f * t;
}
__device__ __forceinline__ bool wtable_inside(float t_in) { return t_in <= 1.0f; }
__device__ __forceinline__ float wtable_value(const float4 &v, float t) {
    return fmaf(t, fmaf(t, fmaf(t, v.w, v.z), v.y), v.x);
}
__device__ __forceinline__ float wtable_slope(const float4 &v, float t15, float t2) {
    return fmaf(t2, fmaf(t15, v.w, v.z), v.y);
}

/* The compact form's weights of t (hermite_weights_at's t, past r_max 2): a = a_k + t d + h10 e_k + h11 e_k+1 (as
 * h01 + h10 + h11 = t), h10 = t (1 - t)^2, h11 = -t^2 (1 - t) */
__device__ __forceinline__ void hermite_chord_weights_at(float t_in, float b[3]) {
    const float t = t_in > 1.0f ? 1.0f : t_in, u = 1.0f - t;
    b[0] = t, b[1] = t * u * u, b[2] = -t * t * u;
}
/* The compact form's entries per interval and channel for ni instructions (their columns), padded to whole 16-byte
 * chunks: ad in float2, ev in 32-bit words */
__host__ __device__ constexpr int wtable12_ad_row(int ni) { return (ni + 1) / 2 * 2; }
__host__ __device__ constexpr int wtable12_ev_row(int ni) { return (ni + 3) / 4 * 4; }
/* A 16-bit half of a compact column's departures as the float 2^23 + 32768 + z, exactly (z: the signed departure
 * in units of the column's scale): the float whose bits are 0x4B00 then the half (no conversion instruction: those
 * run at a quarter of the FMA rate) */
__device__ __forceinline__ float wtable12_biased(uint32_t e, bool hi) {
    return __int_as_float((int)__byte_perm(e, 0x4B000000u, hi ? 0x7632 : 0x7610));
}
/* The two departures' bias 2^23 + 32768 times their weights, once per edge: h10 z0 + h11 z1 = fma(h11, e1, fma(h10, e0,
 * -bias)) takes two FMA a weight instead of two subtractions and two products. Its rounding is ~0.15 of z's unit
 * (the fma's result ~|h11| 2^23: ulp 1/8), against z's own rounding of 0.5. */
__device__ __forceinline__ float wtable12_bias(float h10, float h11) { return (h10 + h11) * 8421376.0f; }
/* a column's value from its compact entries (v: a_k, d; e: the departures; s: the column's scale; kt: wtable12_bias):
 * 2 PRMT and 4 FMA */
__device__ __forceinline__ float wtable12_value(float2 v, uint32_t e, float s, float t, float h10, float h11,
                                                float kt) {
    const float x = fmaf(h11, wtable12_biased(e, true), fmaf(h10, wtable12_biased(e, false), -kt));
    return fmaf(s, x, fmaf(t, v.y, v.x));
}

#endif
