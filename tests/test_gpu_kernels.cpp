// test_gpu_kernels.cpp (ctest label gpu, CUDA builds): single GPU kernels against the float64 CPU reference
// functions on fresh random inputs (seed printed), for every layer of every fixture and shipped potential, in fp64
// and fp32: the product basis (symmetric contraction) and the species skip tensor product (MACE), the node linears,
// the convolution (MACE and NequIP), forward and reverse, and the fp32 radial-MLP tables (MACE and NequIP).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>

#include "radial_cases.h"
#include "test_util.h"
extern "C" {
#include "kernels/cpu/linear.h"
#include "kernels/cpu/symmetric_contraction.h"
#include "kernels/cpu/tensor_product.h"
#include "kernels/gpu/mace_gpu.h"
#include "kernels/mace_steps.h"
#include "model/nequip.h"
}

using namespace cgqtest;

namespace {
// fn(g, fp32, rng, seed) with a GPU backend of the model in fp64, then in fp32 where the model offers it; one fresh
// seed for both.
template <class F>
void for_each_precision(const cgq_model *m, F fn) {
    const unsigned seed = test_seed();
    std::mt19937_64 rng(seed);
    for (int fp32 = 0; fp32 < 2; fp32++) {
        cgq_gpu *g = nullptr;
        const cgq_status st = cgq_gpu_create(m, 0, fp32, &g);
        if (fp32 && st == CGQ_STATUS_UNSUPPORTED) {
            std::printf("  fp32 not offered for this model: %s\n", cgq_last_error());
            continue;
        }
        ASSERT_EQ(st, CGQ_STATUS_OK) << cgq_last_error();
        fn(g, fp32 != 0, rng, seed);
        cgq_gpu_free(g);
    }
}

// The GPU output a against the reference r, relative to r's largest magnitude: 1e-12 in fp64, 1e-5 in fp32. An
// unwritten output (left NaN) fails.
void expect_close(const std::string &file, int layer, bool fp32, unsigned seed, const char *what,
                  const std::vector<double> &a, const std::vector<double> &r) {
    const double err = max_abs_diff(a.data(), r.data(), a.size()) / std::fmax(max_abs(r), 1e-30);
    std::printf("  %-32s layer %d %s seed=%u  %-12s err %.1e (relative to the max)\n",
                file.substr(file.find_last_of('/') + 1).c_str(), layer, fp32 ? "fp32" : "fp64", seed, what, err);
    EXPECT_LE(err, fp32 ? 1e-5 : 1e-12) << what << " layer " << layer << " seed " << seed;
}

// Receiver rows of n nodes (n > 71) with random senders: degrees 0..40, every 9th node (from 4) without edges, and
// nodes 40 and 71 with rows of 150 and 300 edges (longer than the kernels' batches and chunks).
void long_rows_graph(std::mt19937_64 &rng, int64_t n, std::vector<int64_t> &row, std::vector<int32_t> &sender) {
    row.assign(n + 1, 0);
    sender.clear();
    for (int64_t i = 0; i < n; i++) {
        const int deg = i == 40 ? 150 : i == 71 ? 300 : i % 9 == 4 ? 0 : (int)(rng() % 41);
        for (int k = 0; k < deg; k++) sender.push_back((int32_t)(rng() % (uint64_t)n));
        row[i + 1] = (int64_t)sender.size();
    }
}

std::vector<double> uniform(std::mt19937_64 &rng, size_t n) {
    std::uniform_real_distribution<double> ud(-1.0, 1.0);
    std::vector<double> v(n);
    for (double &x : v) x = ud(rng);
    return v;
}

// The float64 reference of a layer's convolution on a graph (rows, senders) whose weights come from the layer's radial
// MLP at each edge's length r (w = alpha a(r) W, times the cutoff where the model applies it to the weights; cut
// empty otherwise): the messages (cgq_tp_conv_forward), dE/dY and the senders' dE/dx (cgq_tp_conv_backward), dE/dcut
// = sum_k dE/dw_k w_k and dE/dr = sum_k dE/dw_k cut dw_k/dr (the MLP's exact derivative).
struct ConvReference {
    std::vector<double> M, gY, gcut, gx, gr;
    ConvReference(const RadialCase &rc, const cgq_tp *tp, int nY, const std::vector<int64_t> &row,
                  const std::vector<int32_t> &sender, const std::vector<double> &r, const std::vector<double> &cut,
                  const std::vector<double> &x, const std::vector<double> &Y, const std::vector<double> &gM) {
        const int64_t n = (int64_t)row.size() - 1, E = row[n], din = tp->in1.dim, dM = tp->out.dim;
        const int64_t wn = tp->weight_numel;
        const cgq_fcnet &fc = *rc.rm.fc;
        const int64_t W = fc.h[fc.n_layers - 1];
        const double *Wl = fc.W[fc.n_layers - 1];
        M.assign(n * dM, 0.0), gY.assign(E * nY, 0.0), gcut.assign(E, 0.0), gx.assign(n * din, 0.0), gr.assign(E, 0.0);
        std::vector<double> a(W), da(W), aref(W), w(wn), dw(wn), we(wn), gw(wn);
        for (int64_t i = 0; i < n; i++)
            for (int64_t e = row[i]; e < row[i + 1]; e++) {
                rc.hidden(r[e], aref.data());
                cgq_radial_hidden(&rc.rm, r[e], a.data(), da.data());
                const double ce = cut.empty() ? 1.0 : cut[e];
                for (int64_t k = 0; k < wn; k++) {
                    w[k] = dw[k] = 0.0;
                    for (int64_t j = 0; j < W; j++) w[k] += rc.alpha * aref[j] * Wl[j * wn + k];
                    for (int64_t j = 0; j < W; j++) dw[k] += rc.alpha * da[j] * Wl[j * wn + k];
                    we[k] = ce * w[k], gw[k] = 0.0;
                }
                const double *xe = &x[sender[e] * din];
                cgq_tp_conv_forward(tp, xe, &Y[e * nY], we.data(), &M[i * dM]);
                cgq_tp_conv_backward(tp, xe, &Y[e * nY], we.data(), &gM[i * dM], &gx[sender[e] * din], &gY[e * nY],
                                     gw.data());
                for (int64_t k = 0; k < wn; k++) {
                    if (!cut.empty()) gcut[e] += gw[k] * w[k];
                    gr[e] += gw[k] * ce * dw[k];
                }
            }
    }
};
}  // namespace

// Each test loads the fixture GetParam() (skipped without a GPU); m: the model.
class GpuKernels : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        if (!cgq_gpu_available()) GTEST_SKIP() << "no GPU visible";
        model = std::make_unique<Model>(GetParam());
        ASSERT_NE(model->m, nullptr) << cgq_last_error();
        m = model->m;
    }
    std::unique_ptr<Model> model;
    const cgq_model *m = nullptr;
};

// The graph build's integer scan (graph_build.cuh: warp scans, the tiles' counts scanned by one block) against the
// host's running sum, on fresh random flags: sizes around a tile (1,024 flags) and past the 256 tiles that one pass of
// the tile-count scan takes.
TEST(GpuScan, FlagsMatchTheHostsRunningSum) {
    if (!cgq_gpu_available()) GTEST_SKIP() << "no GPU visible";
    std::mt19937 rng(std::random_device{}());
    for (int64_t n : {0, 1, 31, 1023, 1024, 1025, 4097, 262144, 262145, 1000003}) {
        std::vector<int32_t> flags((size_t)n);
        const int density = (int)(rng() % 4); /* none, a quarter, half, all kept */
        for (auto &f : flags) f = density == 3 ? 1 : density == 0 ? 0 : (int32_t)(rng() % (density == 1 ? 4 : 2) == 0);
        std::vector<int64_t> got((size_t)n + 1, -1), want((size_t)n + 1, 0);
        for (int64_t k = 0; k < n; k++) want[(size_t)k + 1] = want[(size_t)k] + flags[(size_t)k];
        ASSERT_EQ(cgq_gpu_scan_flags(flags.data(), n, got.data()), CGQ_STATUS_OK) << cgq_last_error();
        for (int64_t k = 0; k <= n; k++) ASSERT_EQ(got[(size_t)k], want[(size_t)k]) << "n " << n << ", at " << k;
    }
}

TEST_P(GpuKernels, ProductBasisMatchesCpu) {
    if (std::string(m->family) != "mace") GTEST_SKIP() << "not a MACE model";
    for_each_precision(m, [&](cgq_gpu *g, bool fp32, std::mt19937_64 &rng, unsigned seed) {
        for (int t = 0; t < m->n_layers; t++) {
            const cgq_mace_layer *ly = &m->layers[t];
            const int C = ly->channels, CD = C * ly->coupling_dim, dB = ly->product_out.dim;
            const int64_t n = 37;
            std::vector<int32_t> species(n);
            for (auto &s : species) s = (int32_t)(rng() % (uint64_t)m->n_species);
            const std::vector<double> A = uniform(rng, n * CD), gB = uniform(rng, n * dB);
            std::vector<double> B(n * dB, NAN), gA(n * CD, NAN);
            ASSERT_EQ(cgq_gpu_product_basis(g, t, n, species.data(), A.data(), gB.data(), B.data(), gA.data()),
                      CGQ_STATUS_OK)
                << cgq_last_error();
            std::vector<double> Br(n * dB), gAr(n * CD, 0.0);
            for (int64_t i = 0; i < n; i++) {
                const int elem = ly->agnostic ? 0 : species[i];
                cgq_symcon_forward(ly, elem, &A[i * CD], &Br[i * dB], 0, C);
                cgq_symcon_backward(ly, elem, &A[i * CD], &gB[i * dB], &gAr[i * CD], 0, C);
            }
            expect_close(GetParam(), t, fp32, seed, "B", B, Br);
            expect_close(GetParam(), t, fp32, seed, "dE/dA", gA, gAr);
        }
    });
}

// The product basis's kernels generated for the layer's monomials (symcon_gen.cuh) against the generic ones
// (CGQ_GPU_SYMCON_GEN=0), on fresh random inputs of 301 nodes (several groups per species, partial last groups):
// the same operations in the same order, so the same bits. Some dE/dB components are zero (the reverse skips them).
TEST_P(GpuKernels, ProductBasisGeneratedIsGenericBitwise) {
    if (std::string(m->family) != "mace") GTEST_SKIP() << "not a MACE model";
    const char *env = std::getenv("CGQ_GPU_SYMCON_GEN");
    if (env && env[0] == '0') GTEST_SKIP() << "generated kernels turned off";
    for_each_precision(m, [&](cgq_gpu *g, bool fp32, std::mt19937_64 &rng, unsigned seed) {
        setenv("CGQ_GPU_SYMCON_GEN", "0", 1);
        cgq_gpu *ref = nullptr;
        const cgq_status st = cgq_gpu_create(m, 0, fp32, &ref);
        unsetenv("CGQ_GPU_SYMCON_GEN");
        ASSERT_EQ(st, CGQ_STATUS_OK) << cgq_last_error();
        for (int t = 0; t < m->n_layers; t++) {
            ASSERT_TRUE(cgq_gpu_product_basis_generated(g, t)) << "layer " << t << ": no generated kernels";
            ASSERT_FALSE(cgq_gpu_product_basis_generated(ref, t));
            const cgq_mace_layer *ly = &m->layers[t];
            const int64_t n = 301, CD = ly->channels * ly->coupling_dim, dB = ly->product_out.dim;
            std::vector<int32_t> species(n);
            for (auto &s : species) s = (int32_t)(rng() % (uint64_t)m->n_species);
            const std::vector<double> A = uniform(rng, n * CD);
            std::vector<double> gB = uniform(rng, n * dB);
            for (auto &v : gB)
                if (rng() % 5 == 0) v = 0.0;
            std::vector<double> B(n * dB, NAN), gA(n * CD, NAN), Br(n * dB, NAN), gAr(n * CD, NAN);
            ASSERT_EQ(cgq_gpu_product_basis(g, t, n, species.data(), A.data(), gB.data(), B.data(), gA.data()),
                      CGQ_STATUS_OK)
                << cgq_last_error();
            ASSERT_EQ(cgq_gpu_product_basis(ref, t, n, species.data(), A.data(), gB.data(), Br.data(), gAr.data()),
                      CGQ_STATUS_OK)
                << cgq_last_error();
            EXPECT_EQ(0, std::memcmp(B.data(), Br.data(), B.size() * sizeof(double)))
                << "B, layer " << t << (fp32 ? " fp32" : " fp64") << " seed " << seed;
            EXPECT_EQ(0, std::memcmp(gA.data(), gAr.data(), gA.size() * sizeof(double)))
                << "dE/dA, layer " << t << (fp32 ? " fp32" : " fp64") << " seed " << seed;
        }
        cgq_gpu_free(ref);
    });
}

// The skip tensor product runs as per-species GEMM tiles of 64 rows (node, component): 301 nodes of random species
// give tiles with several species and a partial last tile.
TEST_P(GpuKernels, SkipTensorProductMatchesCpu) {
    if (std::string(m->family) != "mace") GTEST_SKIP() << "not a MACE model";
    for_each_precision(m, [&](cgq_gpu *g, bool fp32, std::mt19937_64 &rng, unsigned seed) {
        for (int t = 0; t < m->n_layers; t++) {
            const cgq_tp *tp = &m->layers[t].skip_tp;
            const int din = tp->in1.dim, dout = tp->out.dim, ns = m->n_species;
            const int64_t n = 301;
            std::vector<int32_t> species(n);
            for (auto &s : species) s = (int32_t)(rng() % (uint64_t)ns);
            const std::vector<double> x = uniform(rng, n * din), gout = uniform(rng, n * dout);
            std::vector<double> out(n * dout, NAN), gx(n * din, NAN);
            ASSERT_EQ(cgq_gpu_skip_tp(g, t, n, species.data(), x.data(), gout.data(), out.data(), gx.data()),
                      CGQ_STATUS_OK)
                << cgq_last_error();
            std::vector<double> outr(n * dout), gxr(n * din);
            for (int64_t i = 0; i < n; i++) {
                std::vector<double> onehot(ns, 0.0);
                onehot[species[i]] = 1.0;
                cgq_tp_node_forward(tp, &x[i * din], onehot.data(), &outr[i * dout]);
                cgq_tp_node_backward_x1(tp, onehot.data(), &gout[i * dout], &gxr[i * din]);
            }
            expect_close(GetParam(), t, fp32, seed, "skip out", out, outr);
            expect_close(GetParam(), t, fp32, seed, "dE/dx", gx, gxr);
        }
    });
}

// Every readout as the GPU's kernels run it (rows and units split across a group's lanes): 301 random rows h against
// the CPU step's readout and its reverse (d out/dh); then the composed readout of the last layer, where there is one.
TEST_P(GpuKernels, ReadoutMatchesCpu) {
    if (std::string(m->family) != "mace") GTEST_SKIP() << "not a MACE model";
    for_each_precision(m, [&](cgq_gpu *g, bool fp32, std::mt19937_64 &rng, unsigned seed) {
        for (int r = 0; r < m->n_readouts; r++) {
            const cgq_readout *ro = &m->readouts[r];
            const int dH = m->layers[ro->layer].product_linear.out.dim;
            const int64_t n = 301;
            const std::vector<double> h = uniform(rng, n * dH);
            std::vector<double> out(n, NAN), gh(n * dH, NAN);
            const cgq_status st = cgq_gpu_readout(g, r, n, h.data(), out.data(), gh.data());
            if (st == CGQ_STATUS_INVALID_ARGUMENT) continue; /* the model runs the v1 steps */
            ASSERT_EQ(st, CGQ_STATUS_OK) << cgq_last_error();
            std::vector<double> outr(n), ghr(n * dH, 0.0), z(mace_readout_hidden(ro) + 1),
                tmp(4 * ro->linear_1.out.dim + ro->linear_2.out.dim + 1);
            for (int64_t i = 0; i < n; i++) {
                outr[i] = mace_readout_forward(ro, &h[i * dH], z.data(), tmp.data());
                mace_readout_backward(ro, z.data(), 1.0, &ghr[i * dH], tmp.data());
            }
            expect_close(GetParam(), ro->layer, fp32, seed, "readout", out, outr);
            expect_close(GetParam(), ro->layer, fp32, seed, "d readout/dh", gh, ghr);
        }
        // the last layer's readout composed with its product linear and skip, against readout(product_linear(B) +
        // skip(x, species)) and that chain's reverse, plus the layer below's readout of x where it is merged in
        const int rc = cgq_gpu_readout_composed(g), rm = cgq_gpu_readout_merged(g);
        std::printf("  composed readout: %s, merged readout: %s\n", rc < 0 ? "none" : "yes", rm < 0 ? "none" : "yes");
        if (rc < 0) return;
        const cgq_readout *ro = &m->readouts[rc];
        const cgq_mace_layer *ly = &m->layers[ro->layer];
        const int dB = ly->product_out.dim, dH = ly->product_linear.out.dim, din = mace_layer_in_dim(m, ro->layer);
        const int ns = m->n_species;
        const int64_t n = 301;
        std::vector<int32_t> species(n);
        for (auto &sp : species) sp = (int32_t)(rng() % (uint64_t)ns);
        const std::vector<double> B = uniform(rng, n * dB), x = uniform(rng, n * din);
        std::vector<double> out(n, NAN), gB(n * dB, NAN), gx(n * din, NAN);
        ASSERT_EQ(
            cgq_gpu_readout_composed_run(g, n, species.data(), B.data(), x.data(), out.data(), gB.data(), gx.data()),
            CGQ_STATUS_OK)
            << cgq_last_error();
        std::vector<double> outr(n), gBr(n * dB, 0.0), gxr(n * din, 0.0), h(dH), sc(dH), gh(dH),
            z(mace_readout_hidden(ro) + 1), tmp(4 * ro->linear_1.out.dim + ro->linear_2.out.dim + 1);
        const bool skip = ly->use_sc && ly->residual;
        const cgq_readout *below = rm >= 0 ? &m->readouts[rm] : nullptr; /* the merged readout's scratch */
        std::vector<double> zb(below ? mace_readout_hidden(below) + 1 : 0),
            tb(below ? 4 * below->linear_1.out.dim + below->linear_2.out.dim + 1 : 0);
        for (int64_t i = 0; i < n; i++) {
            std::vector<double> onehot(ns, 0.0);
            onehot[species[i]] = 1.0;
            cgq_linear_forward(&ly->product_linear, &B[i * dB], h.data());
            if (skip) {
                cgq_tp_node_forward(&ly->skip_tp, &x[i * din], onehot.data(), sc.data());
                for (int c = 0; c < dH; c++) h[c] += sc[c];
            }
            outr[i] = mace_readout_forward(ro, h.data(), z.data(), tmp.data());
            std::fill(gh.begin(), gh.end(), 0.0);
            mace_readout_backward(ro, z.data(), 1.0, gh.data(), tmp.data());
            cgq_linear_backward(&ly->product_linear, gh.data(), &gBr[i * dB]);
            if (skip) cgq_tp_node_backward_x1(&ly->skip_tp, onehot.data(), gh.data(), &gxr[i * din]);
            if (below) {
                outr[i] += mace_readout_forward(below, &x[i * din], zb.data(), tb.data());
                mace_readout_backward(below, zb.data(), 1.0, &gxr[i * din], tb.data());
            }
        }
        expect_close(GetParam(), ro->layer, fp32, seed, "composed", out, outr);
        expect_close(GetParam(), ro->layer, fp32, seed, "composed dE/dB", gB, gBr);
        expect_close(GetParam(), ro->layer, fp32, seed, "composed dE/dx", gx, gxr);
    });
}

// A non-residual layer's linear and skip as one per-species GEMM (weights multiplied at setup): 301 nodes of random
// species against the CPU's linear, then skip, and their transposes.
TEST_P(GpuKernels, LinearSkipMatchesCpu) {
    if (std::string(m->family) != "mace") GTEST_SKIP() << "not a MACE model";
    int fused = 0;
    for_each_precision(m, [&](cgq_gpu *g, bool fp32, std::mt19937_64 &rng, unsigned seed) {
        for (int t = 0; t < m->n_layers; t++) {
            const cgq_mace_layer *ly = &m->layers[t];
            const cgq_tp *tp = &ly->skip_tp;
            const int dM = ly->linear.in.dim, dT = ly->linear.out.dim, dA = tp->out.dim, ns = m->n_species;
            const int64_t n = 301;
            std::vector<int32_t> species(n);
            for (auto &s : species) s = (int32_t)(rng() % (uint64_t)ns);
            const std::vector<double> M = uniform(rng, n * dM), gA = uniform(rng, n * dA);
            std::vector<double> A(n * dA, NAN), gM(n * dM, NAN);
            const cgq_status st = cgq_gpu_linear_skip(g, t, n, species.data(), M.data(), gA.data(), A.data(), gM.data());
            if (st == CGQ_STATUS_INVALID_ARGUMENT) continue; /* a residual layer, or one the two GEMMs run */
            ASSERT_EQ(st, CGQ_STATUS_OK) << cgq_last_error();
            fused++;
            std::vector<double> Ar(n * dA), gMr(n * dM, 0.0), Mlin(dT), gMlin(dT);
            for (int64_t i = 0; i < n; i++) {
                std::vector<double> onehot(ns, 0.0);
                onehot[species[i]] = 1.0;
                cgq_linear_forward(&ly->linear, &M[i * dM], Mlin.data());
                for (double &v : Mlin) v /= ly->avg_num_neighbors;
                cgq_tp_node_forward(tp, Mlin.data(), onehot.data(), &Ar[i * dA]);
                std::fill(gMlin.begin(), gMlin.end(), 0.0);
                cgq_tp_node_backward_x1(tp, onehot.data(), &gA[i * dA], gMlin.data());
                for (double &v : gMlin) v /= ly->avg_num_neighbors;
                cgq_linear_backward(&ly->linear, gMlin.data(), &gMr[i * dM]);
            }
            expect_close(GetParam(), t, fp32, seed, "A", A, Ar);
            expect_close(GetParam(), t, fp32, seed, "dE/dM", gM, gMr);
        }
    });
    std::printf("  %d fused linear+skip layer runs\n", fused);
}

// The node linears as GEMM tiles (k_lin_gemm), forward and transpose, on 301 random rows: partial 64-row tiles for
// every 2l+1.
TEST_P(GpuKernels, NodeLinearMatchesCpu) {
    const int L = m->nequip ? m->nequip->n_layers : m->n_layers, n_which = m->nequip ? 2 : 3;
    for_each_precision(m, [&](cgq_gpu *g, bool fp32, std::mt19937_64 &rng, unsigned seed) {
        for (int t = 0; t < L; t++)
            for (int which = 0; which < n_which; which++) {
                const cgq_linear *lin = m->nequip
                                            ? (which ? &m->nequip->layers[t].linear_2 : &m->nequip->layers[t].linear_1)
                                            : (which == 0   ? &m->layers[t].linear_up
                                               : which == 1 ? &m->layers[t].linear
                                                            : &m->layers[t].product_linear);
                const int64_t n = 301, din = lin->in.dim, dout = lin->out.dim;
                const std::vector<double> x = uniform(rng, n * din), gy = uniform(rng, n * dout);
                std::vector<double> y(n * dout, NAN), gx(n * din, NAN);
                const cgq_status st = cgq_gpu_linear(g, t, which, n, x.data(), gy.data(), y.data(), gx.data());
                if (st == CGQ_STATUS_INVALID_ARGUMENT) { /* a linear the thread-per-element kernels run */
                    std::printf("  layer %d linear %d: %s\n", t, which, cgq_last_error());
                    continue;
                }
                ASSERT_EQ(st, CGQ_STATUS_OK) << cgq_last_error();
                std::vector<double> yr(n * dout), gxr(n * din, 0.0);
                for (int64_t i = 0; i < n; i++) {
                    cgq_linear_forward(lin, &x[i * din], &yr[i * dout]);
                    cgq_linear_backward(lin, &gy[i * dout], &gxr[i * din]);
                }
                const std::string what = "linear " + std::to_string(which);
                expect_close(GetParam(), t, fp32, seed, (what + " y").c_str(), y, yr);
                expect_close(GetParam(), t, fp32, seed, (what + " dE/dx").c_str(), gx, gxr);
            }
    });
}

// The convolution kernels alone (k_conv_fwd, k_conv_bwd, the sender sums; for NequIP every group's plan in turn) on
// a random graph (41 nodes, degrees 0..24, random senders, self-edges and repeats included) against
// cgq_tp_conv_forward / cgq_tp_conv_backward edge by edge: messages, dE/dw, dE/dY and dE/dx.
TEST_P(GpuKernels, ConvolutionMatchesCpu) {
    const int nY = (m->lmax_sh + 1) * (m->lmax_sh + 1);
    const int L = m->nequip ? m->nequip->n_layers : m->n_layers;
    for_each_precision(m, [&](cgq_gpu *g, bool fp32, std::mt19937_64 &rng, unsigned seed) {
        for (int t = 0; t < L; t++) {
            const cgq_tp *tp = m->nequip ? &m->nequip->layers[t].tp : &m->layers[t].conv_tp;
            const int64_t n = 41, din = tp->in1.dim, dM = tp->out.dim, wn = tp->weight_numel;
            std::vector<int64_t> row(n + 1, 0);
            std::vector<int32_t> sender;
            for (int64_t i = 0; i < n; i++) {
                const int deg = (int)(rng() % 25);
                for (int k = 0; k < deg; k++) sender.push_back((int32_t)(rng() % (uint64_t)n));
                row[i + 1] = (int64_t)sender.size();
            }
            const int64_t E = row[n];
            const std::vector<double> x = uniform(rng, n * din), Y = uniform(rng, E * nY), w = uniform(rng, E * wn);
            const std::vector<double> gM = uniform(rng, n * dM);
            std::vector<double> M(n * dM, NAN), gw(E * wn, NAN), gY(E * nY, NAN), gx(n * din, NAN);
            const cgq_status cs = cgq_gpu_conv(g, t, n, row.data(), sender.data(), x.data(), Y.data(), w.data(),
                                               gM.data(), M.data(), gw.data(), gY.data(), gx.data());
            if (cs == CGQ_STATUS_INVALID_ARGUMENT) { /* a model the v2 kernels do not run (the v1 steps do) */
                std::printf("  layer %d: %s\n", t, cgq_last_error());
                continue;
            }
            ASSERT_EQ(cs, CGQ_STATUS_OK) << cgq_last_error();
            std::vector<double> Mr(n * dM, 0.0), gwr(E * wn, 0.0), gYr(E * nY, 0.0), gxr(n * din, 0.0);
            for (int64_t i = 0; i < n; i++)
                for (int64_t e = row[i]; e < row[i + 1]; e++) {
                    const int64_t j = sender[e];
                    cgq_tp_conv_forward(tp, &x[j * din], &Y[e * nY], &w[e * wn], &Mr[i * dM]);
                    cgq_tp_conv_backward(tp, &x[j * din], &Y[e * nY], &w[e * wn], &gM[i * dM], &gxr[j * din],
                                         &gYr[e * nY], &gwr[e * wn]);
                }
            expect_close(GetParam(), t, fp32, seed, "M", M, Mr);
            expect_close(GetParam(), t, fp32, seed, "dE/dw", gw, gwr);
            expect_close(GetParam(), t, fp32, seed, "dE/dY", gY, gYr);
            expect_close(GetParam(), t, fp32, seed, "dE/dx", gx, gxr);
        }
    });
}

// fp32 radial MLPs from their tables (the last layer's forward on the tensor cores, radial_tc.cuh, or with
// CGQ_GPU_RADIAL_SGEMM=1 k_radial_table_fwd and SGEMM; the reverse SGEMM), MACE and NequIP, on 301 random values of the
// table variable against the float64 MLP: the weights w (from the CPU steps' hidden layer), and dE/dr from random dE/dw
// against sum_j dE/dw_j dw_j/dr (cgq_radial_hidden's exact derivative).
TEST_P(GpuKernels, RadialTableMatchesCpu) {
    cgq_radial_mlps mlps;
    const std::vector<RadialCase> cases = radial_cases(m, mlps);
    for_each_precision(m, [&](cgq_gpu *g, bool fp32, std::mt19937_64 &rng, unsigned seed) {
        for (const RadialCase &rc : cases) {
            const cgq_fcnet &fc = *rc.rm.fc;
            const int64_t n = 301, wn = fc.h[fc.n_layers], W = fc.h[fc.n_layers - 1];
            std::uniform_real_distribution<double> ur(rc.lo, rc.rm.r_max);
            std::vector<double> r(n);
            for (double &x : r) x = ur(rng);
            const std::vector<double> gw = uniform(rng, n * wn);
            std::vector<double> w(n * wn, NAN), gr(n, NAN);
            const cgq_status st = cgq_gpu_radial(g, rc.layer, n, r.data(), gw.data(), w.data(), gr.data());
            if (st == CGQ_STATUS_UNSUPPORTED) { /* fp64, or MACE's Agnesi transform: the MLP runs per edge */
                std::printf("  layer %d %s: %s\n", rc.layer, fp32 ? "fp32" : "fp64", cgq_last_error());
                EXPECT_TRUE(!fp32 || !rc.rm.input) << "fp32 without a radial table";
                continue;
            }
            ASSERT_EQ(st, CGQ_STATUS_OK) << cgq_last_error();
            std::vector<double> wr(n * wn, 0.0), grr(n, 0.0), a(W), da(W), aref(W);
            const double *Wl = fc.W[fc.n_layers - 1];
            for (int64_t e = 0; e < n; e++) {
                rc.hidden(r[e], aref.data());
                cgq_radial_hidden(&rc.rm, r[e], a.data(), da.data());
                for (int64_t j = 0; j < wn; j++) {
                    double dw = 0.0;
                    for (int64_t k = 0; k < W; k++) wr[e * wn + j] += rc.alpha * aref[k] * Wl[k * wn + j];
                    for (int64_t k = 0; k < W; k++) dw += da[k] * Wl[k * wn + j];
                    grr[e] += gw[e * wn + j] * dw * rc.alpha;
                }
            }
            expect_close(GetParam(), rc.layer, fp32, seed, "w", w, wr);
            expect_close(GetParam(), rc.layer, fp32, seed, "dE/dr", gr, grr);
        }
    });
}

// The fp32 convolution forward fused with the radial MLP's last layer (radial_conv.cuh), for every MACE layer it covers
// (whether or not the evaluator would choose it), on a random graph whose rows cross the kernel's 128-edge chunks and
// blocks (97 nodes: degrees 0..40, nodes of no edges, two rows of 150 and 300 edges), with random edge lengths: the
// weights it forms against the separate radial kernel's (cgq_gpu_radial: the same products, so the same bits), and
// the messages against cgq_tp_conv_forward on those weights in float64.
TEST_P(GpuKernels, FusedRadialConvolutionMatchesCpu) {
    if (m->nequip) GTEST_SKIP() << "MACE layers only";
    const int nY = (m->lmax_sh + 1) * (m->lmax_sh + 1);
    cgq_radial_mlps mlps;
    const std::vector<RadialCase> cases = radial_cases(m, mlps);
    for_each_precision(m, [&](cgq_gpu *g, bool fp32, std::mt19937_64 &rng, unsigned seed) {
        for (int t = 0; t < m->n_layers; t++) {
            const cgq_tp *tp = &m->layers[t].conv_tp;
            const int64_t n = 97, din = tp->in1.dim, dM = tp->out.dim, wn = tp->weight_numel;
            std::vector<int64_t> row;
            std::vector<int32_t> sender;
            long_rows_graph(rng, n, row, sender);
            const int64_t E = row[n];
            std::uniform_real_distribution<double> ur(cases[t].lo, cases[t].rm.r_max);
            std::vector<double> r(E);
            for (double &v : r) v = ur(rng);
            const std::vector<double> x = uniform(rng, n * din), Y = uniform(rng, E * nY);
            std::vector<double> M(n * dM, NAN), w(E * wn, NAN);
            const cgq_status st = cgq_gpu_radial_conv(g, t, n, row.data(), sender.data(), r.data(), x.data(), Y.data(),
                                                      M.data(), w.data());
            if (st == CGQ_STATUS_UNSUPPORTED) {
                std::printf("  layer %d %s: %s\n", t, fp32 ? "fp32" : "fp64", cgq_last_error());
                continue;
            }
            ASSERT_EQ(st, CGQ_STATUS_OK) << cgq_last_error();
            std::vector<double> wr(E * wn, NAN), gr(E), gw(E * wn, 0.0);
            ASSERT_EQ(cgq_gpu_radial(g, t, E, r.data(), gw.data(), wr.data(), gr.data()), CGQ_STATUS_OK)
                << cgq_last_error();
            size_t same = 0;
            for (size_t q = 0; q < w.size(); q++) same += std::memcmp(&w[q], &wr[q], sizeof(double)) == 0;
            std::printf("  layer %d: %zu of %zu weights bitwise equal to the separate kernel's\n", t, same, w.size());
            expect_close(GetParam(), t, fp32, seed, "w (fused)", w, wr);
            std::vector<double> Mr(n * dM, 0.0);
            for (int64_t i = 0; i < n; i++)
                for (int64_t e = row[i]; e < row[i + 1]; e++)
                    cgq_tp_conv_forward(tp, &x[sender[e] * din], &Y[e * nY], &wr[e * wn], &Mr[i * dM]);
            expect_close(GetParam(), t, fp32, seed, "M (fused)", M, Mr);
        }
    });
}

// MACE's first convolution factored through the senders' species (species_conv.cuh; fp32 with the radial tables) on
// a random graph of 97 nodes of up to three of the model's species (degrees 0..40, nodes of no edges, rows of 150 and
// 300 edges), random edge lengths and cutoff values, and equal features for equal species (the layer's input is the
// embedding), against the float64 CPU functions: the weights from the MLP (w = alpha a(r) W, times the cutoff where
// the model applies it to the weights), the messages by cgq_tp_conv_forward, dE/dY by cgq_tp_conv_backward, dE/dcut =
// sum_k dE/dw_k w_k and dE/dr = sum_k dE/dw_k cut dw_k/dr (the MLP's exact derivative).
TEST_P(GpuKernels, SpeciesConvolutionMatchesCpu) {
    if (m->nequip) GTEST_SKIP() << "MACE layers only";
    const int nY = (m->lmax_sh + 1) * (m->lmax_sh + 1);
    cgq_radial_mlps mlps;
    const std::vector<RadialCase> cases = radial_cases(m, mlps);
    for_each_precision(m, [&](cgq_gpu *g, bool fp32, std::mt19937_64 &rng, unsigned seed) {
        const RadialCase &rc = cases[0];
        const cgq_tp *tp = &m->layers[0].conv_tp;
        const int64_t n = 97, din = tp->in1.dim, dM = tp->out.dim, wn = tp->weight_numel;
        std::vector<int32_t> kinds;
        for (int z : {0, m->n_species - 1, m->n_species / 2})
            if (std::find(kinds.begin(), kinds.end(), z) == kinds.end()) kinds.push_back(z);
        std::vector<int32_t> species(n), sender;
        std::vector<int64_t> row;
        for (int32_t &z : species) z = kinds[rng() % kinds.size()];
        long_rows_graph(rng, n, row, sender);
        const int64_t E = row[n];
        std::uniform_real_distribution<double> ur(rc.lo, rc.rm.r_max), uc(0.0, 1.0);
        std::vector<double> r(E), cut(m->apply_cutoff ? 0 : E);
        for (double &v : r) v = ur(rng);
        for (double &v : cut) v = uc(rng);
        const std::vector<double> xs = uniform(rng, m->n_species * din), Y = uniform(rng, E * nY);
        const std::vector<double> gM = uniform(rng, n * dM);
        std::vector<double> x(n * din);
        for (int64_t i = 0; i < n; i++) std::copy_n(&xs[species[i] * din], din, &x[i * din]);
        std::vector<double> M(n * dM, NAN), gY(E * nY, NAN), gcut(E, NAN), gr(E, NAN);
        const cgq_status st = cgq_gpu_species_conv(g, n, row.data(), sender.data(), species.data(), r.data(),
                                                   cut.empty() ? nullptr : cut.data(), x.data(), Y.data(), gM.data(),
                                                   M.data(), gY.data(), gcut.data(), gr.data(), 0);
        if (st == CGQ_STATUS_UNSUPPORTED) {
            std::printf("  %s: %s\n", fp32 ? "fp32" : "fp64", cgq_last_error());
            return;
        }
        ASSERT_EQ(st, CGQ_STATUS_OK) << cgq_last_error();
        // CGQ_GPU_SPECIES_CONV=2 asks for the GEMM folds (every MACE layer 0 that runs factored has their form), =1
        // for the in-kernel ones; unset, only layers of 64 channels or more run factored (mace_res_l3_mul128; the
        // narrower ones returned UNSUPPORTED above), with the GEMM folds where the node GEMMs run on the tensor cores
        const char *mode = std::getenv("CGQ_GPU_SPECIES_CONV");
        const bool gemm = mode && *mode ? std::string(mode) == "2"
                                        : tp->in1.b[0].mul >= 64 && cgq_gpu_node_tensor_cores(g);
        EXPECT_EQ(cgq_gpu_species_conv_gemm(g), gemm ? 1 : 0);
        std::printf("  %s folds\n", cgq_gpu_species_conv_gemm(g) ? "GEMM" : "in-kernel");
        const ConvReference ref(rc, tp, nY, row, sender, r, cut, x, Y, gM);
        expect_close(GetParam(), 0, fp32, seed, "M (species)", M, ref.M);
        expect_close(GetParam(), 0, fp32, seed, "dE/dY (species)", gY, ref.gY);
        if (!cut.empty()) expect_close(GetParam(), 0, fp32, seed, "dE/dcut (species)", gcut, ref.gcut);
        expect_close(GetParam(), 0, fp32, seed, "dE/dr (species)", gr, ref.gr);
        // the layer's linear composed into the GEMM folds, as the steps run residual layers without density
        // (CGQ_GPU_SC_LINEAR=0: not): Mlin = linear(M) / avg and, given dE/dMlin, the same edge gradients as from
        // dE/dM = linear^T(dE/dMlin) / avg
        const cgq_mace_layer *l0 = &m->layers[0];
        const char *lin_env = std::getenv("CGQ_GPU_SC_LINEAR");
        if (cgq_gpu_species_conv_gemm(g) && l0->residual && !l0->density && !(lin_env && lin_env[0] == '0'))
            EXPECT_EQ(cgq_gpu_species_conv_linear(g), 1);
        if (!cgq_gpu_species_conv_linear(g)) return;
        const cgq_linear *lin = &l0->linear;
        const int64_t dl = lin->out.dim;
        const double inv = 1.0 / l0->avg_num_neighbors;
        const std::vector<double> gMl = uniform(rng, n * dl);
        std::vector<double> gMe(n * dM, 0.0), Mlr(n * dl), Ml(n * dl, NAN);
        for (int64_t i = 0; i < n; i++) {
            cgq_linear_backward(lin, &gMl[i * dl], &gMe[i * dM]);
            cgq_linear_forward(lin, &ref.M[i * dM], &Mlr[i * dl]);
        }
        for (double &v : gMe) v *= inv;
        for (double &v : Mlr) v *= inv;
        for (std::vector<double> *v : {&gY, &gcut, &gr}) std::fill(v->begin(), v->end(), NAN);
        ASSERT_EQ(cgq_gpu_species_conv(g, n, row.data(), sender.data(), species.data(), r.data(),
                                       cut.empty() ? nullptr : cut.data(), x.data(), Y.data(), gMl.data(), Ml.data(),
                                       gY.data(), gcut.data(), gr.data(), 1),
                  CGQ_STATUS_OK)
            << cgq_last_error();
        std::printf("  the linear composed into the folds\n");
        const ConvReference ref2(rc, tp, nY, row, sender, r, cut, x, Y, gMe);
        expect_close(GetParam(), 0, fp32, seed, "Mlin (species, linear)", Ml, Mlr);
        expect_close(GetParam(), 0, fp32, seed, "dE/dY (species, linear)", gY, ref2.gY);
        if (!cut.empty()) expect_close(GetParam(), 0, fp32, seed, "dE/dcut (species, linear)", gcut, ref2.gcut);
        expect_close(GetParam(), 0, fp32, seed, "dE/dr (species, linear)", gr, ref2.gr);
    });
}

// The convolution with its weights from the layer's weight table (fp32; conv.cuh conv_weights), every MACE layer that
// has one, on long_rows_graph with random features, edge lengths, SH, cutoff values and dE/dM, against the float64
// CPU functions with the weights from the MLP itself (w = alpha a(r) W, times the cutoff where the model applies it to
// the weights): the messages, dE/dY, dE/dcut, dE/dx of the senders and dE/dr = sum_k dE/dw_k cut dw_k/dr (the MLP's
// exact derivative). The table's own error (1e-8 of the values, 1e-6 of the slopes) is within the fp32 limit. A model
// that applies its cutoff to the radial basis runs the kernels again with a cutoff on the weights too, so that both
// forms of each kernel (k_conv_bwd_warp's CUT) run on every fixture.
/* Whether a MACE layer's convolution has the form of the std kernels (conv.cuh conv_std_at), from the model itself:
 * in1 blocks l = 0, 1, ... (at most 3), SH degree 1 to 3, and instruction q the q-th path l1 x l2 -> l3 (l3, l1, l2
 * ascending, |l1 - l2| <= l3 <= min(l1 + l2, lmax_sh), l1 + l2 + l3 even) with its weights at q mul. */
static bool has_std_conv_form(const cgq_tp *tp, int lmax_sh) {
    if (tp->in1.n > 3 || lmax_sh < 1 || lmax_sh > 3) return false;
    for (int b = 0; b < tp->in1.n; b++)
        if (tp->in1.b[b].l != b || tp->in1.b[b].mul != tp->in1.b[0].mul) return false;
    int q = 0;
    for (int l3 = 0; l3 <= lmax_sh; l3++)
        for (int l1 = 0; l1 < tp->in1.n; l1++)
            for (int l2 = std::abs(l1 - l3); l2 <= std::min(l1 + l3, lmax_sh); l2 += 2, q++)
                if (q >= tp->n_ins || tp->in1.b[tp->i1[q]].l != l1 || tp->in2.b[tp->i2[q]].l != l2 ||
                    tp->out.b[tp->io[q]].l != l3 || tp->w_offset[q] != (int64_t)q * tp->in1.b[0].mul)
                    return false;
    return q == tp->n_ins;
}

TEST_P(GpuKernels, WeightTableConvolutionMatchesCpu) {
    if (m->nequip) GTEST_SKIP() << "MACE layers only";
    const int nY = (m->lmax_sh + 1) * (m->lmax_sh + 1);
    cgq_radial_mlps mlps;
    const std::vector<RadialCase> cases = radial_cases(m, mlps);
    /* with the cutoff on the weights: the model's form, then (if it applies the cutoff elsewhere) that form too */
    const std::vector<bool> weight_cut = m->apply_cutoff ? std::vector<bool>{false, true} : std::vector<bool>{true};
    for_each_precision(m, [&](cgq_gpu *g, bool fp32, std::mt19937_64 &rng, unsigned seed) {
        for (const RadialCase &rc : cases)
            for (const bool wc : weight_cut) {
                const int t = rc.layer;
                const cgq_tp *tp = &m->layers[t].conv_tp;
                const int64_t n = 97, din = tp->in1.dim, dM = tp->out.dim, wn = tp->weight_numel;
                std::vector<int32_t> sender;
                std::vector<int64_t> row;
                long_rows_graph(rng, n, row, sender);
                const int64_t E = row[n];
                std::uniform_real_distribution<double> ur(rc.lo, rc.rm.r_max), uc(0.0, 1.0);
                std::vector<double> r(E), cut(wc ? E : 0);
                for (double &v : r) v = ur(rng);
                for (double &v : cut) v = uc(rng);
                const std::vector<double> x = uniform(rng, n * din), Y = uniform(rng, E * nY),
                                          gM = uniform(rng, n * dM);
                std::vector<double> M(n * dM, NAN), gY(E * nY, NAN), gcut(E, NAN), gx(n * din, NAN), gr(E, NAN);
                const cgq_status st = cgq_gpu_table_conv(
                    g, t, n, row.data(), sender.data(), r.data(), cut.empty() ? nullptr : cut.data(), x.data(),
                    Y.data(), gM.data(), M.data(), gY.data(), gcut.data(), gx.data(), gr.data());
                if (st == CGQ_STATUS_UNSUPPORTED) {
                    std::printf("  layer %d %s: %s\n", t, fp32 ? "fp32" : "fp64", cgq_last_error());
                    continue;
                }
                ASSERT_EQ(st, CGQ_STATUS_OK) << cgq_last_error();
                const char *std_env = std::getenv("CGQ_GPU_CONV_STD");
                const bool want_std = !(std_env && std_env[0] == '0') && has_std_conv_form(tp, m->lmax_sh);
                EXPECT_EQ(cgq_gpu_conv_std(g, t), want_std ? 1 : 0) << "layer " << t;
                const char *c12_env =
                    std::getenv("CGQ_GPU_WTAB12"); /* unset: by the table's size (the fixtures' small) */
                if (c12_env && *c12_env)
                    EXPECT_EQ(cgq_gpu_weight_table_compact(g, t), c12_env[0] == '0' ? 0 : 1) << "layer " << t;
                std::printf("  layer %d: %s kernels, %s table, %s\n", t, cgq_gpu_conv_std(g, t) ? "std" : "general",
                            cgq_gpu_weight_table_compact(g, t) ? "compact" : "float",
                            wc ? "the cutoff on the weights" : "no cutoff on the weights");
                const ConvReference ref(rc, tp, nY, row, sender, r, cut, x, Y, gM);
                expect_close(GetParam(), t, fp32, seed, "M (table)", M, ref.M);
                expect_close(GetParam(), t, fp32, seed, "dE/dY (table)", gY, ref.gY);
                expect_close(GetParam(), t, fp32, seed, "dE/dx (table)", gx, ref.gx);
                if (!cut.empty()) expect_close(GetParam(), t, fp32, seed, "dE/dcut (table)", gcut, ref.gcut);
                expect_close(GetParam(), t, fp32, seed, "dE/dr (table)", gr, ref.gr);
            }
    });
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuKernels, ::testing::ValuesIn(fixture_files()), fixture_test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuKernels);
