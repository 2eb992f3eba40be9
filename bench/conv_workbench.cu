/* conv_workbench.cu: the GPU convolution kernels (k_conv_fwd, k_conv_bwd) alone, on each layer of a real model
 * over a real graph, with fresh random operands: validated first against a float64 CPU evaluation of the
 * definition on sampled receivers, then timed with CUDA events; reports ms, GB/s, GFLOP/s and the roofline floor.
 * usage: conv_workbench MODEL.h5 STRUCTURE.xyz NX NY NZ [--fp32] [--tables] [--reps R] [--seed S] [--peak-gbs B]
 *        [--peak-gflops F]
 * Without --tables: the general kernels on per-edge weights given as input (the form OpenEquivariance's
 * convolution takes). With --tables: the kernels the model's fp32 step runs, which form each edge's weights from
 * the layer's weight table (run_layer_table).
 * (peaks default to an H100 SXM: 3350 GB/s, 66900 GFLOP/s in fp32 and 33500 in fp64; pass the machine's own.)
 * Counting (per layer): FLOPs = edges x channels x sum over instructions of 2 x (CG nonzeros) (forward: the
 * tensor product, plus 2 x d3 for the weight; reverse: three contractions, dE/dw, dE/dx, dE/dY); bytes = what the
 * kernel must read and write at least: forward w, Y per edge, x per node (read once), M per receiver; reverse w,
 * Y per edge, x and dE/dM per node, dE/dw, dE/dY and the per-edge dE/dx written. Floor = max(bytes / peak BW,
 * FLOPs / peak FLOP/s). Built with the library's GPU sources compiled in (it reads the conv plans). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kernels/gpu/mace_gpu.cu"
extern "C" { /* C headers without C++ guards */
#include "graph/neighbor.h"
#include "io/xyz.h"
}
#include "replicate.h"

struct peaks {
    double gbs, gflops;
};

template <class T>
static T *to_device(const std::vector<double> &h) {
    std::vector<T> t(h.begin(), h.end());
    T *d = nullptr;
    if (cudaMalloc(&d, sizeof(T) * std::max<size_t>(t.size(), 1)) != cudaSuccess) return nullptr;
    cudaMemcpy(d, t.data(), sizeof(T) * t.size(), cudaMemcpyHostToDevice);
    return d;
}

template <class T>
static std::vector<double> to_host(const T *d, size_t n) {
    std::vector<T> t(n);
    cudaMemcpy(t.data(), d, sizeof(T) * n, cudaMemcpyDeviceToHost);
    return std::vector<double>(t.begin(), t.end());
}

/* max |a - b| / max |b| over the listed rows (row width w) */
static double rel_err(const std::vector<double> &a, const std::vector<double> &b, const std::vector<int64_t> &rows, int64_t w) {
    double num = 0, den = 0;
    for (int64_t r : rows)
        for (int64_t j = 0; j < w; j++) {
            num = std::max(num, fabs(a[r * w + j] - b[r * w + j]));
            den = std::max(den, fabs(b[r * w + j]));
        }
    return den > 0 ? num / den : num;
}

static void uniform_fill(std::vector<double> &v, std::mt19937_64 &rng) {
    std::uniform_real_distribution<double> U(-1.0, 1.0);
    for (double &x : v) x = U(rng);
}

/* The plan's instructions and CG tensors, read back from the device, and its FLOPs per edge and channel: forward
 * 2 x (CG nonzeros) + 2 x d3 (the weight), reverse three contractions of 2 x (CG nonzeros) each */
struct plan_host {
    std::vector<conv_ins> ins;
    std::vector<double> cg;
    double nnz = 0, fl_fwd = 0, fl_bwd = 0;
};
static plan_host read_plan(const conv_plan &p) {
    plan_host h;
    h.ins.resize(p.n_ins);
    cudaMemcpy(h.ins.data(), p.ins, sizeof(conv_ins) * p.n_ins, cudaMemcpyDeviceToHost);
    size_t ncg = 0;
    for (const conv_ins &k : h.ins) ncg = std::max(ncg, (size_t)(k.c_off + k.d1 * k.d2 * k.d3));
    h.cg.resize(ncg);
    cudaMemcpy(h.cg.data(), p.cg, sizeof(double) * ncg, cudaMemcpyDeviceToHost);
    for (const conv_ins &k : h.ins) {
        double z = 0;
        for (int q = 0; q < k.d1 * k.d2 * k.d3; q++) z += fabs(h.cg[k.c_off + q]) > 1e-14;
        h.nnz += z, h.fl_fwd += 2 * z + 2 * k.d3, h.fl_bwd += 3 * 2 * z;
    }
    return h;
}

/* The definition in float64 for one edge: Mi += its message (x: the sender's features, Ye: its Y, w: its weights as
 * the kernels read them, each instruction's path weight apart); gw, gy, gx (assigned): dE/dw, dE/dY and the sender's
 * dE/dx through this edge, given gMi = dE/dM of the receiver */
static void reference_edge(const conv_plan &p, const plan_host &h, const double *x, const double *Ye, const double *w,
                           const double *gMi, double *Mi, double *gw, double *gy, double *gx) {
    std::fill(gy, gy + p.nY, 0.0);
    std::fill(gx, gx + p.dhu, 0.0);
    for (const conv_ins &k : h.ins)
        for (int u = 0; u < p.C; u++) {
            const double wk = k.pw * w[k.w_off + u];
            double dw = 0;
            for (int a = 0; a < k.d1; a++)
                for (int b = 0; b < k.d2; b++)
                    for (int c = 0; c < k.d3; c++) {
                        const double cabc = h.cg[k.c_off + (a * k.d2 + b) * k.d3 + c];
                        if (cabc == 0) continue;
                        const double xa = x[k.x_off + u * k.d1 + a], yb = Ye[k.y_off + b];
                        const double g = gMi[k.out_off + u * k.d3 + c];
                        Mi[k.out_off + u * k.d3 + c] += wk * cabc * xa * yb;
                        dw += k.pw * cabc * xa * yb * g;
                        gy[k.y_off + b] += wk * cabc * xa * g;
                        gx[k.x_off + u * k.d1 + a] += wk * cabc * yb * g;
                    }
            gw[k.w_off + u] = dw;
        }
}

/* 64 receivers spread over the graph, for the checks */
static std::vector<int64_t> sampled_receivers(int64_t N) {
    std::vector<int64_t> recv;
    for (int64_t i = 0; i < N; i += std::max<int64_t>(1, N / 64)) recv.push_back(i);
    return recv;
}

/* median of reps timings of f (CUDA events, ms) */
template <class F>
static double time_ms(int reps, F &&f) {
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    std::vector<float> ms;
    for (int r = 0; r < reps; r++) {
        cudaEventRecord(a);
        f();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float v = 0;
        cudaEventElapsedTime(&v, a, b);
        ms.push_back(v);
    }
    cudaEventDestroy(a), cudaEventDestroy(b);
    std::sort(ms.begin(), ms.end());
    return (double)ms[ms.size() / 2];
}

/* one line: time, achieved GB/s and GFLOP/s, and the floor max(bytes / peak BW, FLOPs / peak FLOP/s) */
static void report(const char *what, double ms, double by, double fl, peaks pk, double peak_fl) {
    const double floor_ms = 1e3 * std::max(by / (pk.gbs * 1e9), fl / (peak_fl * 1e9));
    printf("  %-14s %9.3f ms  %7.1f GB/s  %8.1f GFLOP/s  floor %.3f ms (%s-bound)  %5.1f%% of floor\n", what, ms,
           by / (ms * 1e6), fl / (ms * 1e6), floor_ms, by / (pk.gbs * 1e9) > fl / (peak_fl * 1e9) ? "memory" : "compute",
           100.0 * floor_ms / ms);
}

template <class T>
static int run_layer(const conv_plan &p, int t, const cgq_neighbor_list &nl, int reps, std::mt19937_64 &rng, peaks pk) {
    const int64_t N = nl.n_nodes, E = nl.n_edges;
    const int C = p.C;
    const plan_host h = read_plan(p);
    const double fl_fwd = h.fl_fwd * E * C, fl_bwd = h.fl_bwd * E * C;

    std::vector<double> hu((size_t)N * p.dhu), Y((size_t)E * p.nY), w((size_t)E * p.wn), gM((size_t)N * p.dM);
    uniform_fill(hu, rng);
    uniform_fill(Y, rng);
    uniform_fill(w, rng);
    uniform_fill(gM, rng);
    int64_t *d_row = nullptr;
    int32_t *d_sender = nullptr;
    cudaMalloc(&d_row, sizeof(int64_t) * (N + 1));
    cudaMalloc(&d_sender, sizeof(int32_t) * std::max<int64_t>(E, 1));
    cudaMemcpy(d_row, nl.row_ptr, sizeof(int64_t) * (N + 1), cudaMemcpyHostToDevice);
    cudaMemcpy(d_sender, nl.sender, sizeof(int32_t) * E, cudaMemcpyHostToDevice);
    T *d_hu = to_device<T>(hu), *d_Y = to_device<T>(Y), *d_w = to_device<T>(w), *d_gM = to_device<T>(gM);
    T *d_M = nullptr, *d_gw = nullptr, *d_gY = nullptr, *d_gx = nullptr;
    cudaMalloc(&d_M, sizeof(T) * N * p.dM);
    cudaMalloc(&d_gw, sizeof(T) * E * p.wn);
    cudaMalloc(&d_gY, sizeof(T) * E * p.nY);
    cudaMalloc(&d_gx, sizeof(T) * E * p.dhu);
    if (!d_hu || !d_Y || !d_w || !d_gM || !d_M || !d_gw || !d_gY || !d_gx || cudaGetLastError() != cudaSuccess) {
        fprintf(stderr, "layer %d: out of GPU memory for the operands\n", t);
        return 1;
    }
    auto fwd = [&] {
        k_conv_fwd<T><<<(unsigned)N, p.threads, conv_fwd_smem(p, sizeof(T))>>>(p, 0, d_row, d_sender, d_Y, d_hu,
                                                                               conv_rows<T>(d_w, 0), nullptr, d_M);
    };
    auto bwd = [&] {
        conv_bwd_kernel<T>(p.n_in1, p.nY)<<<(unsigned)N, p.threads_bwd, conv_bwd_smem(p, sizeof(T))>>>(
            p, 0, d_row, d_sender, d_Y, d_hu, conv_rows<T>(d_w, 0), nullptr, d_gM, d_gw, d_gY, nullptr, d_gx, nullptr,
            0);
    };
    fwd(), bwd();
    if (cudaDeviceSynchronize() != cudaSuccess) {
        fprintf(stderr, "layer %d: kernel failed: %s\n", t, cudaGetErrorString(cudaGetLastError()));
        return 1;
    }

    /* validation on sampled receivers: the definition, in double, from the CG tensors */
    const std::vector<int64_t> recv = sampled_receivers(N);
    std::vector<double> M = to_host(d_M, (size_t)N * p.dM), gw = to_host(d_gw, (size_t)E * p.wn);
    std::vector<double> gY = to_host(d_gY, (size_t)E * p.nY), gx = to_host(d_gx, (size_t)E * p.dhu);
    std::vector<double> Mr(M.size(), 0.0), gwr(gw.size(), 0.0), gYr(gY.size(), 0.0), gxr(gx.size(), 0.0);
    std::vector<int64_t> edges;
    for (int64_t i : recv)
        for (int64_t e = nl.row_ptr[i]; e < nl.row_ptr[i + 1]; e++) {
            edges.push_back(e);
            reference_edge(p, h, &hu[(size_t)nl.sender[e] * p.dhu], &Y[(size_t)e * p.nY], &w[(size_t)e * p.wn],
                           &gM[(size_t)i * p.dM], &Mr[(size_t)i * p.dM], &gwr[(size_t)e * p.wn], &gYr[(size_t)e * p.nY],
                           &gxr[(size_t)e * p.dhu]);
        }
    const double eM = rel_err(M, Mr, recv, p.dM), ew = rel_err(gw, gwr, edges, p.wn);
    const double eY = rel_err(gY, gYr, edges, p.nY), ex = rel_err(gx, gxr, edges, p.dhu);
    const double tol = sizeof(T) == sizeof(float) ? 1e-5 : 1e-12;
    const bool ok = eM <= tol && ew <= tol && eY <= tol && ex <= tol;

    const double tf = time_ms(reps, fwd), tb = time_ms(reps, bwd);
    const double es = sizeof(T);
    const double by_f = es * ((double)E * (p.wn + p.nY) + (double)N * (p.dhu + p.dM)) + 4.0 * E + 8.0 * N;
    const double by_b = es * ((double)E * (2 * p.wn + 2 * p.nY + p.dhu) + (double)N * (p.dhu + p.dM)) + 4.0 * E + 8.0 * N;
    const double peak_fl = pk.gflops * (sizeof(T) == sizeof(float) ? 1.0 : 0.5);
    printf("layer %d: %lld receivers, %lld edges, %d channels, %d instructions (%.0f CG nonzeros), %s, per-edge weights "
           "as input (the general kernels), blocks of %d / %d threads\n", t, (long long)N, (long long)E, C, p.n_ins,
           h.nnz, sizeof(T) == sizeof(float) ? "fp32" : "fp64", p.threads, p.threads_bwd);
    printf("  check vs float64 definition (%zu receivers, %zu edges): M %.2e, dE/dw %.2e, dE/dY %.2e, dE/dx %.2e "
           "(tolerance %.0e) %s\n", recv.size(), edges.size(), eM, ew, eY, ex, tol, ok ? "ok" : "FAILED");
    report("forward", tf, by_f, fl_fwd, pk, peak_fl);
    report("reverse", tb, by_b, fl_bwd, pk, peak_fl);
    report("both", tf + tb, by_f + by_b, fl_fwd + fl_bwd, pk, peak_fl);
    for (void *q : std::initializer_list<void *>{d_row, d_sender, d_hu, d_Y, d_w, d_gM, d_M, d_gw, d_gY, d_gx}) cudaFree(q);
    return ok ? 0 : 2;
}

/* --tables: the kernels the model's fp32 step runs on a layer with a weight table (conv_fwd_kernel and
 * conv_bwd_launch, as cgq_gpu_table_conv calls them: k_conv_fwd_std and k_conv_bwd_warp for MACE-MP-0's layer 1), each
 * edge's weights formed in the kernel from the table at the edge's real length, then the sender sums (per-node dE/dx,
 * what a peer's reverse returns). Checked against float64: the weights from the CPU's radial MLP at r (with the
 * model's cutoff), dE/dr by central differences of it. The floor counts the TP's FLOPs (not the weights') and the
 * bytes a fused kernel must move: Y, r, the senders' ids per edge, x and M per node; in reverse also gY and dE/dr per
 * edge, dE/dM and dE/dx per node (not the per-edge dE/dx rows of this design). */
static int run_layer_table(const cgq_gpu *g, const cgq_model *m, int t, bool in_step, const cgq_neighbor_list &nl,
                           int reps, std::mt19937_64 &rng, peaks pk) {
    const conv_plan &p = g->plans[t];
    const int64_t N = nl.n_nodes, E = nl.n_edges;
    const plan_host h = read_plan(p);
    const double fl_fwd = h.fl_fwd * E * p.C, fl_bwd = h.fl_bwd * E * p.C;
    const cgq_fcnet &fc = m->layers[t].radial_mlp;
    if (fc.h[fc.n_layers] != p.wn) {
        fprintf(stderr, "layer %d: the radial MLP gives %d weights, the plan takes %lld\n", t, fc.h[fc.n_layers],
                (long long)p.wn);
        return 1;
    }
    /* the edges' lengths and, where the model applies the cutoff to the messages (not inside the MLP), its values */
    const bool with_cut = !m->apply_cutoff;
    std::vector<double> r(E), cut(with_cut ? E : 0);
    for (int64_t e = 0; e < E; e++) {
        const double *v = nl.vec + 3 * e;
        r[e] = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
        if (with_cut) cut[e] = cgq_poly_cutoff(m->cutoff_p, m->cutoff_r_max, r[e], nullptr);
    }
    std::vector<double> hu((size_t)N * p.dhu), Y((size_t)E * p.nY), gM((size_t)N * p.dM);
    uniform_fill(hu, rng);
    uniform_fill(Y, rng);
    uniform_fill(gM, rng);
    std::vector<int64_t> srow(N + 1);
    std::vector<int32_t> sedge(E + 1);
    if (cgq_sender_index(nl.sender, E, N, srow.data(), sedge.data())) return fprintf(stderr, "%s\n", cgq_last_error()), 1;

    std::vector<void *> bufs;
    auto dev = [&](size_t bytes) {
        void *q = nullptr;
        if (cudaMalloc(&q, std::max<size_t>(bytes, 16)) != cudaSuccess) return (void *)nullptr;
        bufs.push_back(q);
        return q;
    };
    auto up = [&](const void *src, size_t bytes) {
        void *q = dev(bytes);
        if (q) cudaMemcpy(q, src, bytes, cudaMemcpyHostToDevice);
        return q;
    };
    auto up_f = [&](const std::vector<double> &v) { /* to_device, freed with the others */
        float *q = to_device<float>(v);
        if (q) bufs.push_back(q);
        return q;
    };
    const int64_t *d_row = static_cast<int64_t *>(up(nl.row_ptr, sizeof(int64_t) * (N + 1)));
    const int32_t *d_sender = static_cast<int32_t *>(up(nl.sender, sizeof(int32_t) * E));
    const int64_t *d_srow = static_cast<int64_t *>(up(srow.data(), sizeof(int64_t) * (N + 1)));
    const int32_t *d_sedge = static_cast<int32_t *>(up(sedge.data(), sizeof(int32_t) * E));
    const double *d_r = static_cast<double *>(up(r.data(), sizeof(double) * E));
    const float *d_cut = with_cut ? up_f(cut) : nullptr, *d_hu = up_f(hu), *d_Y = up_f(Y), *d_gM = up_f(gM);
    float *d_M = static_cast<float *>(dev(sizeof(float) * N * p.dM)), *d_gY = static_cast<float *>(dev(sizeof(float) * E * p.nY));
    float *d_gx1e = static_cast<float *>(dev(sizeof(float) * E * p.dhu)), *d_gx = static_cast<float *>(dev(sizeof(float) * N * p.dhu));
    float *d_gcut = with_cut ? static_cast<float *>(dev(sizeof(float) * E)) : nullptr;
    double *d_gr = static_cast<double *>(dev(sizeof(double) * E));
    int rc = 0;
    if (!d_row || !d_sender || !d_srow || !d_sedge || !d_r || (with_cut && (!d_cut || !d_gcut)) || !d_hu || !d_Y ||
        !d_gM || !d_M || !d_gY || !d_gx1e || !d_gx || !d_gr) {
        fprintf(stderr, "layer %d: out of GPU memory for the operands\n", t);
        rc = 1;
    }
    const conv_weights<float> cw = conv_table(g->wtab[t], d_r, 0);
    auto fwd = [&] {
        conv_fwd_kernel<float>(p, true, cw.tab.ad)<<<(unsigned)N, p.threads, conv_fwd_smem(p, sizeof(float))>>>(
            p, 0, d_row, d_sender, d_Y, d_hu, cw, d_cut, d_M);
    };
    auto bwd = [&] {
        conv_bwd_launch<float>(p, true, N, 0, d_row, d_sender, d_Y, d_hu, cw, d_cut, d_gM, nullptr, d_gY, d_gcut, d_gx1e,
                               d_gr, 0);
    };
    auto sums = [&] { sender_sum_rows<float>(N, p.dhu, d_srow, d_sedge, 0, E, 1, 1, d_gx1e, d_gx); };
    if (rc == 0) {
        fwd(), bwd(), sums();
        if (cudaDeviceSynchronize() != cudaSuccess) {
            fprintf(stderr, "layer %d: kernel failed: %s\n", t, cudaGetErrorString(cudaGetLastError()));
            rc = 1;
        }
    }
    if (rc) {
        for (void *q : bufs) cudaFree(q);
        return rc;
    }

    /* validation on sampled receivers' rows */
    const std::vector<int64_t> recv = sampled_receivers(N);
    const std::vector<double> M = to_host(d_M, (size_t)N * p.dM), gY = to_host(d_gY, (size_t)E * p.nY);
    const std::vector<double> gx1e = to_host(d_gx1e, (size_t)E * p.dhu), gr = to_host(d_gr, (size_t)E);
    const std::vector<double> gcut = with_cut ? to_host(d_gcut, (size_t)E) : std::vector<double>();
    std::vector<double> x(m->n_bessel), cache(cgq_fcnet_cache_size(&fc));
    auto weights = [&](double re, double *w) { /* the MLP's outputs at re, as the CPU's step forms them */
        cgq_bessel(m, re, x.data(), nullptr);
        if (m->apply_cutoff) {
            const double c = cgq_poly_cutoff(m->cutoff_p, m->cutoff_r_max, re, nullptr);
            for (double &v : x) v *= c;
        }
        cgq_fcnet_forward(&fc, x.data(), w, cache.data());
    };
    std::vector<double> Mr(M.size(), 0.0), gYr(gY.size(), 0.0), gxr(gx1e.size(), 0.0), grr(E, 0.0), gcr(E, 0.0);
    std::vector<double> w(p.wn), we(p.wn), wp(p.wn), wm(p.wn), gw(p.wn);
    std::vector<int64_t> edges;
    for (int64_t i : recv)
        for (int64_t e = nl.row_ptr[i]; e < nl.row_ptr[i + 1]; e++) {
            edges.push_back(e);
            const double ce = with_cut ? cut[e] : 1.0, hr = 1e-5;
            weights(r[e], w.data());
            weights(r[e] + hr, wp.data());
            weights(r[e] - hr, wm.data());
            for (int k = 0; k < p.wn; k++) we[k] = ce * w[k];
            reference_edge(p, h, &hu[(size_t)nl.sender[e] * p.dhu], &Y[(size_t)e * p.nY], we.data(),
                           &gM[(size_t)i * p.dM], &Mr[(size_t)i * p.dM], gw.data(), &gYr[(size_t)e * p.nY],
                           &gxr[(size_t)e * p.dhu]);
            for (int k = 0; k < p.wn; k++) {
                grr[e] += gw[k] * ce * (wp[k] - wm[k]) / (2 * hr);
                gcr[e] += gw[k] * w[k];
            }
        }
    const double eM = rel_err(M, Mr, recv, p.dM), eY = rel_err(gY, gYr, edges, p.nY);
    const double ex = rel_err(gx1e, gxr, edges, p.dhu), er = rel_err(gr, grr, edges, 1);
    const double ec = with_cut ? rel_err(gcut, gcr, edges, 1) : 0.0;
    const double tol = 1e-5;
    const bool ok = eM <= tol && eY <= tol && ex <= tol && er <= tol && ec <= tol;

    const double tf = time_ms(reps, fwd), tb = time_ms(reps, bwd), ts = time_ms(reps, sums);
    const double ecut = with_cut ? 4.0 * E : 0.0;
    const double by_f = 4.0 * E * p.nY + 8.0 * E + 4.0 * E + ecut + 4.0 * N * (p.dhu + p.dM) + 8.0 * N;
    const double by_b = 8.0 * E * p.nY + 16.0 * E + 4.0 * E + 2 * ecut + 4.0 * N * (2 * p.dhu + p.dM) + 8.0 * N;
    printf("layer %d: %lld receivers, %lld edges, %d channels, %d instructions (%.0f CG nonzeros), fp32, weights from "
           "the %s table (%s kernels%s), blocks of %d / %d threads\n", t, (long long)N, (long long)E, p.C, p.n_ins, h.nnz,
           cw.tab.ad ? "compact" : "float", p.std_form ? "std" : "general", in_step ? ", as the step runs this layer" :
           "; the step runs this layer another way where it can (factored through the senders' species, or fused with "
           "the radial MLP)", p.threads, p.threads_bwd);
    printf("  check vs float64 (weights from the CPU's radial MLP; %zu receivers, %zu edges): M %.2e, dE/dY %.2e, "
           "dE/dx %.2e, dE/dr %.2e%s (tolerance %.0e) %s\n", recv.size(), edges.size(), eM, eY, ex, er,
           with_cut ? (std::string(", dE/dcut ") + std::to_string(ec)).c_str() : "", tol, ok ? "ok" : "FAILED");
    report("forward", tf, by_f, fl_fwd, pk, pk.gflops);
    report("reverse", tb, by_b - 4.0 * N * p.dhu, fl_bwd, pk, pk.gflops);
    report("sender sums", ts, 4.0 * N * p.dhu, 0.0, pk, pk.gflops);
    report("all three", tf + tb + ts, by_f + by_b, fl_fwd + fl_bwd, pk, pk.gflops);
    for (void *q : bufs) cudaFree(q);
    return ok ? 0 : 2;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: conv_workbench MODEL.h5 STRUCTURE.xyz NX NY NZ [--fp32] [--tables] [--reps R] "
                        "[--seed S] [--peak-gbs B] [--peak-gflops F]\n");
        return 2;
    }
    int fp32 = 0, tables = 0, reps = 20;
    unsigned long long seed = 12345;
    peaks pk = {3350.0, 66900.0};
    for (int i = 6; i < argc; i++) {
        const bool has = i + 1 < argc;
        if (!strcmp(argv[i], "--fp32")) fp32 = 1;
        else if (!strcmp(argv[i], "--tables")) tables = fp32 = 1; /* the tables are fp32's */
        else if (!strcmp(argv[i], "--reps") && has) reps = std::max(1, atoi(argv[++i]));
        else if (!strcmp(argv[i], "--seed") && has) seed = strtoull(argv[++i], nullptr, 10);
        else if (!strcmp(argv[i], "--peak-gbs") && has) pk.gbs = atof(argv[++i]);
        else if (!strcmp(argv[i], "--peak-gflops") && has) pk.gflops = atof(argv[++i]);
        else return fprintf(stderr, "conv_workbench: unknown option '%s'\n", argv[i]), 2;
    }
    cgq_model *m;
    if (cgq_model_load(argv[1], &m)) return fprintf(stderr, "%s\n", cgq_last_error()), 1;
    if (m->nequip) return fprintf(stderr, "conv_workbench: %s is a NequIP model; it runs MACE layers\n", argv[1]), 2;
    cgq_system s;
    if (bench_replicated_system(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), &s)) return 1;
    cgq_neighbor_list nl;
    memset(&nl, 0, sizeof nl);
    if (cgq_neighbor_list_build(&nl, s.n_atoms, s.positions, s.cell, s.pbc, cgq_model_cutoff(m)))
        return fprintf(stderr, "%s\n", cgq_last_error()), 1;
    cgq_gpu *g;
    if (cgq_gpu_create(m, 0, fp32, &g)) return fprintf(stderr, "%s\n", cgq_last_error()), 1;
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("conv_workbench %s on %s (%lld atoms), %s, seed %llu, %d repeats (median); peaks %.0f GB/s, %.0f GFLOP/s fp32\n",
           argv[1], argv[2], (long long)s.n_atoms, prop.name, seed, reps, pk.gbs, pk.gflops);
    std::mt19937_64 rng(seed);
    int rc = 0;
    /* layer 0 of an fp32 step runs factored through the senders' species where the graph's species classes allow
     * (species_conv.cuh, sc_runs: known per graph; the water boxes' do), not on its table */
    const bool sconv = fp32 && g->sconv.ok;
    for (int t = 0; t < m->n_layers; t++) {
        int r = 0;
        if (!g->plans[t].ok) {
            printf("layer %d: not of the form the v2 kernels cover\n", t);
        } else if (tables && !g->wtab[t].knots) {
            printf("layer %d: no weight table (its step forms the weights another way)\n", t);
        } else if (tables) {
            r = run_layer_table(g, m, t, !(t == 0 && sconv) && !g->fused_conv[t], nl, reps, rng, pk);
        } else {
            r = fp32 ? run_layer<float>(g->plans[t], t, nl, reps, rng, pk) : run_layer<double>(g->plans[t], t, nl, reps, rng, pk);
        }
        rc = std::max(rc, r);
    }
    cgq_gpu_free(g);
    cgq_neighbor_list_free(&nl);
    bench_system_free(&s);
    cgq_model_free(m);
    return rc;
}
