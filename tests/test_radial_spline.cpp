// test_radial_spline.cpp: the radial MLP's hidden output a(r) as a cubic Hermite table (the GPU's fp32 path reads
// it instead of running the hidden layers per edge): the exact a(r) and da/dr against the MLP itself and against
// finite differences, and the table against the exact curve at fresh random r (seed printed), for every layer of
// every MACE fixture and shipped potential.
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
extern "C" {
#include "kernels/cpu/fcnet.h"
#include "kernels/cpu/radial.h"
#include "kernels/cpu/radial_spline.h"
}

using namespace cgqtest;

namespace {
// The MLP's input at r exactly as the CPU steps form it (mace_step_edge_geometry).
std::vector<double> radial_input(const cgq_model *m, double r) {
    std::vector<double> x(m->n_bessel);
    cgq_bessel(m, r, x.data(), nullptr);
    const double cut = cgq_poly_cutoff(m->cutoff_p, m->cutoff_r_max, r, nullptr);
    if (m->apply_cutoff)
        for (double &v : x) v *= cut;
    return x;
}

// The accuracy the GPU asks of its tables (mace_gpu.cu, build_radial_splines).
constexpr double kTolValue = 1e-8, kTolSlope = 1e-6;
constexpr int kMaxIntervals = 1 << 15;
}  // namespace

class RadialSpline : public ::testing::TestWithParam<std::string> {};

TEST_P(RadialSpline, HiddenOutputIsTheMlpsAndItsDerivative) {
    Model model(GetParam());
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    const cgq_model *m = model.m;
    if (std::string(m->family) != "mace") GTEST_SKIP() << "not a MACE model";
    const unsigned seed = std::random_device{}();
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> ur(0.3, m->cutoff_r_max * 0.999);
    for (int t = 0; t < m->n_layers; t++) {
        const cgq_fcnet &fc = m->layers[t].radial_mlp;
        if (fc.n_layers < 2 || m->agnesi) continue;
        const int W = fc.h[fc.n_layers - 1];
        std::vector<double> cache(cgq_fcnet_cache_size(&fc)), out(fc.h[fc.n_layers]), a(W), da(W), ap(W), am(W), tmp(W);
        double err_a = 0, err_d = 0, amax = 0, dmax = 0;
        for (int q = 0; q < 50; q++) {
            const double r = ur(rng), h = 1e-5;
            cgq_fcnet_forward(&fc, radial_input(m, r).data(), out.data(), cache.data());
            const double *last = cache.data() + cache.size() - W; /* the last hidden layer's activations */
            cgq_radial_hidden(m, &fc, r, a.data(), da.data());
            cgq_radial_hidden(m, &fc, r + h, ap.data(), tmp.data());
            cgq_radial_hidden(m, &fc, r - h, am.data(), tmp.data());
            for (int j = 0; j < W; j++) {
                err_a = std::fmax(err_a, std::fabs(a[j] - last[j])), amax = std::fmax(amax, std::fabs(last[j]));
                err_d = std::fmax(err_d, std::fabs(da[j] - (ap[j] - am[j]) / (2 * h)));
                dmax = std::fmax(dmax, std::fabs(da[j]));
            }
        }
        std::printf("  layer %d seed=%u: a vs the MLP %.1e, da/dr vs central differences %.1e (relative to the max)\n", t,
                    seed, err_a / amax, err_d / dmax);
        EXPECT_LE(err_a / amax, 1e-13);
        EXPECT_LE(err_d / dmax, 1e-7);
    }
}

TEST_P(RadialSpline, TableMatchesTheMlpBetweenItsKnots) {
    Model model(GetParam());
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    const cgq_model *m = model.m;
    if (std::string(m->family) != "mace") GTEST_SKIP() << "not a MACE model";
    const unsigned seed = std::random_device{}();
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> ur(0.0, m->cutoff_r_max);
    for (int t = 0; t < m->n_layers; t++) {
        const cgq_fcnet &fc = m->layers[t].radial_mlp;
        cgq_radial_spline s;
        ASSERT_EQ(cgq_radial_spline_build(m, &fc, kTolValue, kTolSlope, kMaxIntervals, &s), CGQ_STATUS_OK)
            << cgq_last_error();
        if (m->agnesi) { /* the radial input depends on the species pair: no table */
            EXPECT_EQ(s.n_int, 0);
            continue;
        }
        ASSERT_GT(s.n_int, 0) << "no table met the tolerance for layer " << t;
        const int W = s.width;
        std::vector<double> a(W), da(W), ai(W), dai(W);
        double ev = 0, ed = 0, amax = 0, dmax = 0;
        for (int q = 0; q < 4000; q++) {
            const double r = ur(rng);
            cgq_radial_hidden(m, &fc, std::fmax(r, 1e-3), a.data(), da.data());
            cgq_radial_spline_eval(&s, std::fmax(r, 1e-3), ai.data(), dai.data());
            for (int j = 0; j < W; j++) {
                ev = std::fmax(ev, std::fabs(ai[j] - a[j])), ed = std::fmax(ed, std::fabs(dai[j] - da[j]));
                amax = std::fmax(amax, std::fabs(a[j])), dmax = std::fmax(dmax, std::fabs(da[j]));
            }
        }
        std::printf("  layer %d seed=%u: %d intervals; built at %.1e / %.1e; at 4000 random r: value %.1e, slope %.1e\n",
                    t, seed, s.n_int, s.err_value, s.err_slope, ev / amax, ed / dmax);
        EXPECT_LE(ev / amax, 2 * kTolValue);
        EXPECT_LE(ed / dmax, 2 * kTolSlope);
        /* beyond the cutoff: the value at r_max, flat */
        cgq_radial_spline_eval(&s, m->cutoff_r_max * 1.5, ai.data(), dai.data());
        cgq_radial_hidden(m, &fc, m->cutoff_r_max, a.data(), da.data());
        for (int j = 0; j < W; j++) {
            EXPECT_NEAR(ai[j], a[j], 1e-12 * amax);
            EXPECT_EQ(dai[j], 0.0);
        }
        cgq_radial_spline_free(&s);
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RadialSpline, ::testing::ValuesIn(fixture_files()), fixture_test_name);
