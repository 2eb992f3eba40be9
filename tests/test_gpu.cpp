// test_gpu.cpp (ctest label gpu): the GPU backend against the float64 CPU reference on every fixture,
// on the stored structures and on freshly perturbed ones, and bitwise determinism over repeats.
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"

using namespace cgqtest;

namespace {
cgq_evaluator *make(const cgq_model *m, cgq_device d) {
    cgq_evaluator_params p = cgq_evaluator_default_params();
    p.device = d;
    p.precision = CGQ_PRECISION_FP64;
    cgq_evaluator *e = nullptr;
    return cgq_evaluator_create(m, &p, &e) == CGQ_STATUS_OK ? e : nullptr;
}
}  // namespace

class Gpu : public ::testing::TestWithParam<std::string> {};

TEST_P(Gpu, MatchesCpuReferenceAndIsDeterministic) {
    Model model(GetParam());
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    cgq_evaluator *gpu = make(model.m, CGQ_DEVICE_CUDA);
    if (!gpu) GTEST_SKIP() << "no GPU backend: " << cgq_last_error();
    cgq_evaluator *cpu = make(model.m, CGQ_DEVICE_CPU);
    ASSERT_NE(cpu, nullptr);
    std::random_device rd;
    const unsigned seed = rd();
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> nd(0.0, 0.03);
    for (const Case &c : read_cases(GetParam())) {
        for (int variant = 0; variant < 2; variant++) {
            std::vector<double> pos = c.pos;
            if (variant) /* fresh inputs: perturb every coordinate */
                for (double &x : pos) x += nd(rng);
            Eval a = evaluate(cpu, c, pos), b = evaluate(gpu, c, pos);
            ASSERT_EQ(a.status, CGQ_STATUS_OK) << cgq_last_error();
            ASSERT_EQ(b.status, CGQ_STATUS_OK) << cgq_last_error();
            const size_t n = c.Z.size();
            const double dE = std::fabs(a.energy - b.energy) / std::fabs(a.energy);
            const double dF = max_abs_diff(a.forces.data(), b.forces.data(), 3 * n) / std::fmax(max_abs(a.forces), 1e-3);
            const double dW = max_abs_diff(a.virial, b.virial, 9) / std::fmax(max_abs(std::vector<double>(a.virial, a.virial + 9)), 1e-3);
            std::printf("  %-30s %-20s %s seed=%u  dE/E=%.1e  dF/|F|=%.1e  dW/|W|=%.1e\n",
                        GetParam().substr(GetParam().find_last_of('/') + 1).c_str(), c.name.c_str(),
                        variant ? "perturbed" : "stored   ", seed, dE, dF, dW);
            EXPECT_LE(dE, 1e-10) << c.name << " seed " << seed;
            EXPECT_LE(dF, 1e-10) << c.name << " seed " << seed;
            EXPECT_LE(dW, 1e-10) << c.name << " seed " << seed;
            for (int rep = 0; rep < 10; rep++) { /* same input, same bits */
                Eval r = evaluate(gpu, c, pos);
                ASSERT_EQ(r.status, CGQ_STATUS_OK);
                ASSERT_EQ(std::memcmp(&r.energy, &b.energy, sizeof(double)), 0) << c.name << " repeat " << rep;
                ASSERT_EQ(std::memcmp(r.forces.data(), b.forces.data(), sizeof(double) * 3 * n), 0) << c.name;
            }
        }
    }
    cgq_evaluator_free(gpu);
    cgq_evaluator_free(cpu);
}


INSTANTIATE_TEST_SUITE_P(Fixtures, Gpu, ::testing::ValuesIn(fixture_files()), fixture_test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Gpu);
