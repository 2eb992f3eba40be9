// test_linear_compose.cpp: two linear maps composed into one (model/linear_compose.h) against the two applied one
// after the other, forward and transposed, on every fixture MACE model's pairs that the GPU steps compose (a layer's
// product linear, then the next layer's linear_up).
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
extern "C" {
#include "kernels/cpu/linear.h"
#include "model/linear_compose.h"
}

using namespace cgqtest;

class LinearCompose : public ::testing::TestWithParam<std::string> {};

TEST_P(LinearCompose, MatchesTheTwoMapsInTurn) {
    Model model(GetParam());
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    const cgq_model *m = model.m;
    if (m->nequip || m->n_layers < 2) GTEST_SKIP() << "no pair of MACE layers";
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> U(-1.0, 1.0);
    for (int t = 0; t + 1 < m->n_layers; t++) {
        const cgq_linear *a = &m->layers[t].product_linear, *b = &m->layers[t + 1].linear_up;
        ASSERT_TRUE(cgq_linear_composable(a, b)) << "layer " << t;
        cgq_linear c;
        ASSERT_EQ(cgq_linear_compose(a, b, &c), CGQ_STATUS_OK) << cgq_last_error();
        auto random = [&](size_t n) {
            std::vector<double> v(n);
            for (double &e : v) e = U(rng);
            return v;
        };
        auto relative = [](const std::vector<double> &ref, const std::vector<double> &got) {
            return max_abs_diff(ref.data(), got.data(), ref.size()) / std::fmax(max_abs(ref), 1e-300);
        };
        for (int rep = 0; rep < 3; rep++) {
            const std::vector<double> x = random(a->in.dim), gy = random(b->out.dim);
            std::vector<double> h(a->out.dim), y(b->out.dim), yc(b->out.dim);
            cgq_linear_forward(a, x.data(), h.data());
            cgq_linear_forward(b, h.data(), y.data());
            cgq_linear_forward(&c, x.data(), yc.data());
            EXPECT_LE(relative(y, yc), 1e-13) << "layer " << t << " forward";
            std::vector<double> gh(a->out.dim, 0.0), gx(a->in.dim, 0.0), gxc(a->in.dim, 0.0);
            cgq_linear_backward(b, gy.data(), gh.data());
            cgq_linear_backward(a, gh.data(), gx.data());
            cgq_linear_backward(&c, gy.data(), gxc.data());
            EXPECT_LE(relative(gx, gxc), 1e-13) << "layer " << t << " reverse";
        }
        cgq_linear_compose_free(&c);
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LinearCompose, ::testing::ValuesIn(fixture_files()), fixture_test_name);
