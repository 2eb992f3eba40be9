// test_parity.cpp: float64 parity of cgequi with mace-torch on every committed fixture and self-test case.
#include <gtest/gtest.h>

#include "test_util.h"

using namespace cgqtest;

class Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Parity, MatchesMaceTorch) {
    const std::string path = GetParam();
    Model model(path);
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    Evaluator ev(model.m);
    ASSERT_NE(ev.e, nullptr) << cgq_last_error();
    auto cases = read_cases(path);
    ASSERT_FALSE(cases.empty()) << path << " has no self-test cases";
    for (const Case &c : cases) {
        Eval r = evaluate(ev.e, c, c.pos);
        ASSERT_EQ(r.status, CGQ_STATUS_OK) << c.name << ": " << cgq_last_error();
        const size_t n = c.Z.size();
        const double dE = std::fabs(r.energy - c.energy) / std::fabs(c.energy);
        const double dF = max_abs_diff(r.forces.data(), c.forces.data(), 3 * n);
        const double dA = max_abs_diff(r.atomic_energies.data(), c.atomic_energies.data(), n) /
                          std::fmax(max_abs(c.atomic_energies), 1.0);
        double dV = 0, dAV = 0;
        if (!c.virial.empty()) dV = max_abs_diff(r.virial, c.virial.data(), 9) / std::fmax(max_abs(c.virial), 1e-3);
        if (!c.atomic_virials.empty())
            dAV = max_abs_diff(r.atomic_virials.data(), c.atomic_virials.data(), 9 * n) /
                  std::fmax(max_abs(c.atomic_virials), 1e-3);
        std::printf("  %-28s %-22s N=%-4zu dE/E=%.1e  max|dF|=%.1e eV/A  dE_i=%.1e  dW/W=%.1e  dW_i=%.1e\n",
                    path.substr(path.find_last_of('/') + 1).c_str(), c.name.c_str(), n, dE, dF, dA, dV, dAV);
        EXPECT_LE(dE, 1e-10) << c.name;
        EXPECT_LE(dF, 1e-8) << c.name;
        EXPECT_LE(dA, 1e-10) << c.name;
        EXPECT_LE(dV, 1e-8) << c.name;
        EXPECT_LE(dAV, 1e-8) << c.name;
    }
}


INSTANTIATE_TEST_SUITE_P(Fixtures, Parity, ::testing::ValuesIn(fixture_files()), fixture_test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Parity);
