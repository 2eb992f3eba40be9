// test_radial_spline.cpp: a radial MLP's hidden output a(r) as a cubic Hermite table (the GPU's fp32 path reads it
// instead of running the hidden layers per edge): the exact a(r) and da/dr against the MLP itself (fed the CPU
// steps' own radial input) and against finite differences, and the table against the exact curve at fresh random
// r (seed printed), for every layer of every fixture and shipped potential, MACE and NequIP.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "radial_cases.h"
#include "test_util.h"

using namespace cgqtest;

namespace {
// The accuracy the GPU asks of its tables (mace_gpu.cu, build_radial_tables).
constexpr double kTolValue = CGQ_SPLINE_TOL_VALUE, kTolSlope = CGQ_SPLINE_TOL_SLOPE;
constexpr int kMaxIntervals = CGQ_SPLINE_MAX_INTERVALS;
}  // namespace

// Each test: the parameter's model, its layers' radial MLPs and a fresh seed.
class RadialSpline : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        model = std::make_unique<Model>(GetParam());
        ASSERT_NE(model->m, nullptr) << cgq_last_error();
        cases = radial_cases(model->m, mlps);
        rng.seed(seed);
    }
    std::unique_ptr<Model> model;
    cgq_radial_mlps mlps;
    std::vector<RadialCase> cases;
    const unsigned seed = test_seed();
    std::mt19937_64 rng;
};

TEST_P(RadialSpline, HiddenOutputIsTheMlpsAndItsDerivative) {
    for (const RadialCase &rc : cases) {
        if (!rc.rm.input || rc.rm.fc->n_layers < 2) continue; /* no table for this form (tested below) */
        std::uniform_real_distribution<double> ur(rc.lo, rc.rm.r_max * 0.999);
        const int W = rc.rm.fc->h[rc.rm.fc->n_layers - 1];
        std::vector<double> ref(W), a(W), da(W), ap(W), am(W), ap2(W), am2(W), tmp(W);
        double err_a = 0, err_d = 0, amax = 0, dmax = 0;
        for (int q = 0; q < 50; q++) {
            const double r = ur(rng), h = 1e-4 * rc.rm.r_max;
            rc.hidden(r, ref.data());
            cgq_radial_hidden(&rc.rm, r, a.data(), da.data());
            cgq_radial_hidden(&rc.rm, r + h, ap.data(), tmp.data());
            cgq_radial_hidden(&rc.rm, r - h, am.data(), tmp.data());
            cgq_radial_hidden(&rc.rm, r + 2 * h, ap2.data(), tmp.data());
            cgq_radial_hidden(&rc.rm, r - 2 * h, am2.data(), tmp.data());
            for (int j = 0; j < W; j++) { /* the five-point stencil: error O(h^4) */
                const double fd = (8 * (ap[j] - am[j]) - (ap2[j] - am2[j])) / (12 * h);
                err_a = std::fmax(err_a, std::fabs(a[j] - ref[j])), amax = std::fmax(amax, std::fabs(ref[j]));
                err_d = std::fmax(err_d, std::fabs(da[j] - fd));
                dmax = std::fmax(dmax, std::fabs(da[j]));
            }
        }
        std::printf("  layer %d seed=%u: a vs the MLP %.1e, da/dr vs finite differences %.1e (relative to the max)\n",
                    rc.layer, seed, err_a / amax, err_d / dmax);
        EXPECT_LE(err_a / amax, 1e-13);
        EXPECT_LE(err_d / dmax, 1e-8);
    }
}

TEST_P(RadialSpline, TableMatchesTheMlpBetweenItsKnots) {
    for (const RadialCase &rc : cases) {
        cgq_radial_spline s;
        ASSERT_EQ(cgq_radial_spline_build(&rc.rm, kTolValue, kTolSlope, kMaxIntervals, &s), CGQ_STATUS_OK)
            << cgq_last_error();
        if (!rc.rm.input) { /* MACE with the Agnesi transform: the input depends on the species pair, no table */
            EXPECT_TRUE(model->m->agnesi);
            EXPECT_EQ(s.n_int, 0);
            continue;
        }
        ASSERT_GT(s.n_int, 0) << "no table met the tolerance for layer " << rc.layer;
        const int W = s.width;
        std::uniform_real_distribution<double> ur(0.0, rc.rm.r_max);
        std::vector<double> a(W), da(W), ai(W), dai(W);
        double ev = 0, ed = 0, amax = 0, dmax = 0;
        for (int q = 0; q < 4000; q++) {
            const double r = ur(rng);
            cgq_radial_hidden(&rc.rm, r, a.data(), da.data());
            cgq_radial_spline_eval(&s, r, ai.data(), dai.data());
            for (int j = 0; j < W; j++) {
                ev = std::fmax(ev, std::fabs(ai[j] - a[j])), ed = std::fmax(ed, std::fabs(dai[j] - da[j]));
                amax = std::fmax(amax, std::fabs(a[j])), dmax = std::fmax(dmax, std::fabs(da[j]));
            }
        }
        std::printf(
            "  layer %d seed=%u: %d intervals; built at %.1e / %.1e; at 4000 random r: value %.1e, slope %.1e\n",
            rc.layer, seed, s.n_int, s.err_value, s.err_slope, ev / amax, ed / dmax);
        EXPECT_LE(ev / amax, 2 * kTolValue);
        EXPECT_LE(ed / dmax, 2 * kTolSlope);
        /* beyond the cutoff: the value at r_max, flat */
        cgq_radial_spline_eval(&s, rc.rm.r_max * 1.5, ai.data(), dai.data());
        cgq_radial_hidden(&rc.rm, rc.rm.r_max, a.data(), da.data());
        for (int j = 0; j < W; j++) {
            EXPECT_NEAR(ai[j], a[j], 1e-12 * amax);
            EXPECT_EQ(dai[j], 0.0);
        }
        cgq_radial_spline_free(&s);
    }
}

// `cgequi info` says what fp32 on the GPU does with the model's radial MLPs.
TEST_P(RadialSpline, CliInfoReportsTheTables) {
    std::string out;
    ASSERT_EQ(run_cli("info " + GetParam(), out), 0) << out;
    bool tables = !cases.empty();
    for (const RadialCase &rc : cases) tables = tables && rc.rm.input;
    EXPECT_NE(out.find(tables ? "the radial MLPs' hidden layers from tables:\n             layer 0: "
                              : "the radial MLPs run per edge"),
              std::string::npos)
        << out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RadialSpline, ::testing::ValuesIn(fixture_files()), fixture_test_name);
