/* conv_workbench.cu: the GPU convolution kernels (k_conv_fwd, k_conv_bwd) alone, on each layer of a real model
 * over a real graph, with fresh random operands: validated first against a float64 CPU evaluation of the
 * definition on sampled receivers, then timed with CUDA events; reports ms, GB/s, GFLOP/s and the roofline floor.
 * usage: conv_workbench MODEL.h5 STRUCTURE.xyz NX NY NZ [--fp32] [--reps R] [--seed S] [--peak-gbs B]
 *        [--peak-gflops F]
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

template <class T>
static int run_layer(const conv_plan &p, int t, const cgq_neighbor_list &nl, int reps, std::mt19937_64 &rng, peaks pk) {
    const int64_t N = nl.n_nodes, E = nl.n_edges;
    const int C = p.C;
    /* the plan's device arrays, read back for the reference */
    std::vector<conv_ins> ins(p.n_ins);
    cudaMemcpy(ins.data(), p.ins, sizeof(conv_ins) * p.n_ins, cudaMemcpyDeviceToHost);
    size_t ncg = 0;
    for (const conv_ins &k : ins) ncg = std::max(ncg, (size_t)(k.c_off + k.d1 * k.d2 * k.d3));
    std::vector<double> cg(ncg);
    cudaMemcpy(cg.data(), p.cg, sizeof(double) * ncg, cudaMemcpyDeviceToHost);
    double nnz = 0, fl_fwd = 0, fl_bwd = 0;
    for (const conv_ins &k : ins) {
        double z = 0;
        for (int q = 0; q < k.d1 * k.d2 * k.d3; q++) z += fabs(cg[k.c_off + q]) > 1e-14;
        nnz += z, fl_fwd += 2 * z + 2 * k.d3, fl_bwd += 3 * 2 * z;
    }
    fl_fwd *= (double)E * C, fl_bwd *= (double)E * C;

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
    std::vector<int64_t> recv;
    for (int64_t i = 0; i < N; i += std::max<int64_t>(1, N / 64)) recv.push_back(i);
    std::vector<double> M = to_host(d_M, (size_t)N * p.dM), gw = to_host(d_gw, (size_t)E * p.wn);
    std::vector<double> gY = to_host(d_gY, (size_t)E * p.nY), gx = to_host(d_gx, (size_t)E * p.dhu);
    std::vector<double> Mr(M.size(), 0.0), gwr(gw.size(), 0.0), gYr(gY.size(), 0.0), gxr(gx.size(), 0.0);
    std::vector<int64_t> edges;
    for (int64_t i : recv)
        for (int64_t e = nl.row_ptr[i]; e < nl.row_ptr[i + 1]; e++) {
            edges.push_back(e);
            const double *x = &hu[(size_t)nl.sender[e] * p.dhu];
            for (const conv_ins &k : ins)
                for (int u = 0; u < C; u++) {
                    const double wk = k.pw * w[(size_t)e * p.wn + k.w_off + u];
                    double dw = 0;
                    for (int a = 0; a < k.d1; a++)
                        for (int b = 0; b < k.d2; b++)
                            for (int c = 0; c < k.d3; c++) {
                                const double cabc = cg[k.c_off + (a * k.d2 + b) * k.d3 + c];
                                if (cabc == 0) continue;
                                const double xa = x[k.x_off + u * k.d1 + a], yb = Y[(size_t)e * p.nY + k.y_off + b];
                                const double g = gM[(size_t)i * p.dM + k.out_off + u * k.d3 + c];
                                Mr[(size_t)i * p.dM + k.out_off + u * k.d3 + c] += wk * cabc * xa * yb;
                                dw += k.pw * cabc * xa * yb * g;
                                gYr[(size_t)e * p.nY + k.y_off + b] += wk * cabc * xa * g;
                                gxr[(size_t)e * p.dhu + k.x_off + u * k.d1 + a] += wk * cabc * yb * g;
                            }
                    gwr[(size_t)e * p.wn + k.w_off + u] = dw;
                }
        }
    const double eM = rel_err(M, Mr, recv, p.dM), ew = rel_err(gw, gwr, edges, p.wn);
    const double eY = rel_err(gY, gYr, edges, p.nY), ex = rel_err(gx, gxr, edges, p.dhu);
    const double tol = sizeof(T) == sizeof(float) ? 1e-5 : 1e-12;
    const bool ok = eM <= tol && ew <= tol && eY <= tol && ex <= tol;

    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    auto time_ms = [&](auto &&f) {
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
        std::sort(ms.begin(), ms.end());
        return (double)ms[ms.size() / 2];
    };
    const double tf = time_ms(fwd), tb = time_ms(bwd);
    const double es = sizeof(T);
    const double by_f = es * ((double)E * (p.wn + p.nY) + (double)N * (p.dhu + p.dM)) + 4.0 * E + 8.0 * N;
    const double by_b = es * ((double)E * (2 * p.wn + 2 * p.nY + p.dhu) + (double)N * (p.dhu + p.dM)) + 4.0 * E + 8.0 * N;
    const double peak_fl = pk.gflops * (sizeof(T) == sizeof(float) ? 1.0 : 0.5);
    auto report = [&](const char *what, double ms, double by, double fl) {
        const double floor_ms = 1e3 * std::max(by / (pk.gbs * 1e9), fl / (peak_fl * 1e9));
        printf("  %-8s %9.3f ms  %7.1f GB/s  %8.1f GFLOP/s  floor %.3f ms (%s-bound)  %5.1f%% of floor\n", what, ms,
               by / (ms * 1e6), fl / (ms * 1e6), floor_ms, by / (pk.gbs * 1e9) > fl / (peak_fl * 1e9) ? "memory" : "compute",
               100.0 * floor_ms / ms);
    };
    printf("layer %d: %lld receivers, %lld edges, %d channels, %d instructions (%.0f CG nonzeros), %s, blocks of %d / %d "
           "threads\n", t, (long long)N, (long long)E, C, p.n_ins, nnz, sizeof(T) == sizeof(float) ? "fp32" : "fp64",
           p.threads, p.threads_bwd);
    printf("  check vs float64 definition (%zu receivers, %zu edges): M %.2e, dE/dw %.2e, dE/dY %.2e, dE/dx %.2e "
           "(tolerance %.0e) %s\n", recv.size(), edges.size(), eM, ew, eY, ex, tol, ok ? "ok" : "FAILED");
    report("forward", tf, by_f, fl_fwd);
    report("reverse", tb, by_b, fl_bwd);
    report("both", tf + tb, by_f + by_b, fl_fwd + fl_bwd);
    for (void *q : std::initializer_list<void *>{d_row, d_sender, d_hu, d_Y, d_w, d_gM, d_M, d_gw, d_gY, d_gx}) cudaFree(q);
    cudaEventDestroy(a), cudaEventDestroy(b);
    return ok ? 0 : 2;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: conv_workbench MODEL.h5 STRUCTURE.xyz NX NY NZ [--fp32] [--reps R] [--seed S] "
                        "[--peak-gbs B] [--peak-gflops F]\n");
        return 2;
    }
    int fp32 = 0, reps = 20;
    unsigned long long seed = 12345;
    peaks pk = {3350.0, 66900.0};
    for (int i = 6; i < argc; i++) {
        const bool has = i + 1 < argc;
        if (!strcmp(argv[i], "--fp32")) fp32 = 1;
        else if (!strcmp(argv[i], "--reps") && has) reps = std::max(1, atoi(argv[++i]));
        else if (!strcmp(argv[i], "--seed") && has) seed = strtoull(argv[++i], nullptr, 10);
        else if (!strcmp(argv[i], "--peak-gbs") && has) pk.gbs = atof(argv[++i]);
        else if (!strcmp(argv[i], "--peak-gflops") && has) pk.gflops = atof(argv[++i]);
        else return fprintf(stderr, "conv_workbench: unknown option '%s'\n", argv[i]), 2;
    }
    cgq_model *m;
    if (cgq_model_load(argv[1], &m)) return fprintf(stderr, "%s\n", cgq_last_error()), 1;
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
    for (int t = 0; t < m->n_layers; t++) {
        if (!g->plans[t].ok) {
            printf("layer %d: not of the form the v2 kernels cover\n", t);
            continue;
        }
        const int r = fp32 ? run_layer<float>(g->plans[t], t, nl, reps, rng, pk) : run_layer<double>(g->plans[t], t, nl, reps, rng, pk);
        rc = std::max(rc, r);
    }
    cgq_gpu_free(g);
    cgq_neighbor_list_free(&nl);
    bench_system_free(&s);
    cgq_model_free(m);
    return rc;
}
