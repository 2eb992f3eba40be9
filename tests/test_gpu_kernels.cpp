// test_gpu_kernels.cpp (ctest label gpu, CUDA builds): single GPU kernels against the float64 CPU reference
// functions on fresh random inputs (seed printed), for every layer of every MACE fixture and shipped potential, in fp64
// and fp32: the product basis (symmetric contraction) and the species skip tensor product, forward and reverse.
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
extern "C" {
#include "kernels/cpu/symmetric_contraction.h"
#include "kernels/cpu/tensor_product.h"
#include "kernels/gpu/mace_gpu.h"
}

using namespace cgqtest;

class GpuKernels : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuKernels, ProductBasisMatchesCpu) {
    if (!cgq_gpu_available()) GTEST_SKIP() << "no GPU visible";
    Model model(GetParam());
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    if (std::string(model.m->family) != "mace") GTEST_SKIP() << "not a MACE model";
    const unsigned seed = std::random_device{}();
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> ud(-1.0, 1.0);
    for (int fp32 = 0; fp32 < 2; fp32++) {
        cgq_gpu *g = nullptr;
        const cgq_status st = cgq_gpu_create(model.m, 0, fp32, &g);
        if (fp32 && st == CGQ_STATUS_UNSUPPORTED) {
            std::printf("  fp32 not offered for this model: %s\n", cgq_last_error());
            continue;
        }
        ASSERT_EQ(st, CGQ_STATUS_OK) << cgq_last_error();
        for (int t = 0; t < model.m->n_layers; t++) {
            const cgq_mace_layer *ly = &model.m->layers[t];
            const int C = ly->channels, CD = C * ly->coupling_dim, dB = ly->product_out.dim;
            const int64_t n = 37;
            std::vector<int32_t> species(n);
            std::vector<double> A(n * CD), gB(n * dB), B(n * dB, NAN), gA(n * CD, NAN);
            for (auto &s : species) s = (int32_t)(rng() % (uint64_t)model.m->n_species);
            for (auto &x : A) x = ud(rng);
            for (auto &x : gB) x = ud(rng);
            ASSERT_EQ(cgq_gpu_product_basis(g, t, n, species.data(), A.data(), gB.data(), B.data(), gA.data()),
                      CGQ_STATUS_OK)
                << cgq_last_error();
            std::vector<double> Br(n * dB), gAr(n * CD, 0.0);
            for (int64_t i = 0; i < n; i++) {
                const int elem = ly->agnostic ? 0 : species[i];
                cgq_symcon_forward(ly, elem, &A[i * CD], &Br[i * dB], 0, C);
                cgq_symcon_backward(ly, elem, &A[i * CD], &gB[i * dB], &gAr[i * CD], 0, C);
            }
            const double eB = max_abs_diff(B.data(), Br.data(), B.size()) / std::fmax(max_abs(Br), 1e-30);
            const double egA = max_abs_diff(gA.data(), gAr.data(), gA.size()) / std::fmax(max_abs(gAr), 1e-30);
            const double tol = fp32 ? 1e-5 : 1e-12;
            std::printf("  %-32s layer %d %s seed=%u  B err %.1e  dE/dA err %.1e (relative to the max)\n",
                        GetParam().substr(GetParam().find_last_of('/') + 1).c_str(), t, fp32 ? "fp32" : "fp64", seed,
                        eB, egA);
            EXPECT_LE(eB, tol) << "layer " << t << " seed " << seed;  // NaN fails: an unwritten output fails
            EXPECT_LE(egA, tol) << "layer " << t << " seed " << seed;
        }
        cgq_gpu_free(g);
    }
}

// The skip tensor product runs as per-species GEMM tiles of 64 rows (node, component): 301 nodes of random species
// give tiles with several species and a partial last tile.
TEST_P(GpuKernels, SkipTensorProductMatchesCpu) {
    if (!cgq_gpu_available()) GTEST_SKIP() << "no GPU visible";
    Model model(GetParam());
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    if (std::string(model.m->family) != "mace") GTEST_SKIP() << "not a MACE model";
    const unsigned seed = std::random_device{}();
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> ud(-1.0, 1.0);
    for (int fp32 = 0; fp32 < 2; fp32++) {
        cgq_gpu *g = nullptr;
        const cgq_status st = cgq_gpu_create(model.m, 0, fp32, &g);
        if (fp32 && st == CGQ_STATUS_UNSUPPORTED) continue;
        ASSERT_EQ(st, CGQ_STATUS_OK) << cgq_last_error();
        for (int t = 0; t < model.m->n_layers; t++) {
            const cgq_tp *tp = &model.m->layers[t].skip_tp;
            const int din = tp->in1.dim, dout = tp->out.dim, ns = model.m->n_species;
            const int64_t n = 301;
            std::vector<int32_t> species(n);
            std::vector<double> x(n * din), gout(n * dout), out(n * dout, NAN), gx(n * din, NAN);
            for (auto &s : species) s = (int32_t)(rng() % (uint64_t)ns);
            for (auto &v : x) v = ud(rng);
            for (auto &v : gout) v = ud(rng);
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
            const double eo = max_abs_diff(out.data(), outr.data(), out.size()) / std::fmax(max_abs(outr), 1e-30);
            const double eg = max_abs_diff(gx.data(), gxr.data(), gx.size()) / std::fmax(max_abs(gxr), 1e-30);
            const double tol = fp32 ? 1e-5 : 1e-12;
            std::printf("  %-32s layer %d %s seed=%u  skip out err %.1e  dE/dx err %.1e (relative to the max)\n",
                        GetParam().substr(GetParam().find_last_of('/') + 1).c_str(), t, fp32 ? "fp32" : "fp64", seed,
                        eo, eg);
            EXPECT_LE(eo, tol) << "layer " << t << " seed " << seed;  // NaN fails: an unwritten output fails
            EXPECT_LE(eg, tol) << "layer " << t << " seed " << seed;
        }
        cgq_gpu_free(g);
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuKernels, ::testing::ValuesIn(fixture_files()), fixture_test_name);
