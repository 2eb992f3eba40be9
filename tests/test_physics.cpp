// test_physics.cpp: forces are -dE/dx (central differences), the virial is -dE/dstrain, and the
// energy is invariant / forces equivariant under rotations; on every fixture model (l up to 3).
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"

using namespace cgqtest;

class Physics : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        model = std::make_unique<Model>(GetParam());
        ASSERT_NE(model->m, nullptr) << cgq_last_error();
        ev = std::make_unique<Evaluator>(model->m);
        cases = read_cases(GetParam());
        ASSERT_FALSE(cases.empty());
    }
    // The smallest case (periodic in all directions if asked): finite differences cost 6N evaluations.
    const Case *pick(bool periodic) {
        const Case *best = nullptr;
        for (const Case &c : cases)
            if ((!periodic || (c.pbc[0] && c.pbc[1] && c.pbc[2])) && (!best || c.Z.size() < best->Z.size())) best = &c;
        return best;
    }
    std::unique_ptr<Model> model;
    std::unique_ptr<Evaluator> ev;
    std::vector<Case> cases;
};

TEST_P(Physics, ForcesAreFiniteDifferencesOfEnergy) {
    const Case &c = *pick(false);
    Eval r0 = evaluate(ev->e, c, c.pos);
    ASSERT_EQ(r0.status, CGQ_STATUS_OK) << cgq_last_error();
    const double h = 1e-5;
    double worst = 0, fscale = std::fmax(max_abs(r0.forces), 1e-3);
    std::vector<double> p = c.pos;
    for (size_t k = 0; k < c.pos.size(); k++) {
        p[k] = c.pos[k] + h;
        double ep = evaluate(ev->e, c, p).energy;
        p[k] = c.pos[k] - h;
        double em = evaluate(ev->e, c, p).energy;
        p[k] = c.pos[k];
        worst = std::fmax(worst, std::fabs(-(ep - em) / (2 * h) - r0.forces[k]));
    }
    std::printf("  %s/%s: max |F - (-dE/dx)_fd| = %.2e eV/A (|F|max %.2e)\n", GetParam().c_str(), c.name.c_str(), worst, fscale);
    EXPECT_LE(worst, 1e-6 * std::fmax(fscale, 1.0));
}

TEST_P(Physics, VirialIsFiniteStrainDerivative) {
    if (!pick(true)) GTEST_SKIP() << "no periodic case";
    const Case &c = *pick(true);
    Eval r0 = evaluate(ev->e, c, c.pos);
    ASSERT_EQ(r0.status, CGQ_STATUS_OK) << cgq_last_error();
    const double h = 1e-6;
    double worst = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            double e[2];
            for (int s = 0; s < 2; s++) {
                double eps[9] = {0};
                eps[3 * a + b] = s ? -h : h;  // x' = x (I + eps), rows are vectors
                std::vector<double> p(c.pos.size());
                double cell[9];
                for (size_t i = 0; i < c.Z.size(); i++)
                    for (int k = 0; k < 3; k++) {
                        double acc = c.pos[3 * i + k];
                        for (int j = 0; j < 3; j++) acc += c.pos[3 * i + j] * eps[3 * j + k];
                        p[3 * i + k] = acc;
                    }
                for (int r = 0; r < 3; r++)
                    for (int k = 0; k < 3; k++) {
                        double acc = c.cell[3 * r + k];
                        for (int j = 0; j < 3; j++) acc += c.cell[3 * r + j] * eps[3 * j + k];
                        cell[3 * r + k] = acc;
                    }
                e[s] = evaluate(ev->e, c, p, cell).energy;
            }
            // W = -dE/deps; E is rotation invariant, so sum_e v (x) g is symmetric and the derivative
            // along one (a,b) strain entry equals the symmetric virial entry.
            const double fd = -(e[0] - e[1]) / (2 * h);
            worst = std::fmax(worst, std::fabs(fd - r0.virial[3 * a + b]));
        }
    std::printf("  %s/%s: max |W - (-dE/deps)_fd| = %.2e eV\n", GetParam().c_str(), c.name.c_str(), worst);
    EXPECT_LE(worst, 1e-6 * std::fmax(max_abs(std::vector<double>(r0.virial, r0.virial + 9)), 1.0));
}

TEST_P(Physics, RotationInvariantEnergyEquivariantForces) {
    std::mt19937_64 rng(42);
    std::normal_distribution<double> nd;
    for (const Case &c : cases) {
        // random rotation from a normalized quaternion
        double q[4];
        double qn = 0;
        for (double &x : q) x = nd(rng), qn += x * x;
        for (double &x : q) x /= std::sqrt(qn);
        const double w = q[0], x = q[1], y = q[2], z = q[3];
        const double R[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
                             2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
                             2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)};
        auto rot = [&](const std::vector<double> &v) {
            std::vector<double> o(v.size());
            for (size_t i = 0; i < v.size() / 3; i++)
                for (int a = 0; a < 3; a++)
                    o[3 * i + a] = R[3 * a + 0] * v[3 * i] + R[3 * a + 1] * v[3 * i + 1] + R[3 * a + 2] * v[3 * i + 2];
            return o;
        };
        Eval r0 = evaluate(ev->e, c, c.pos);
        ASSERT_EQ(r0.status, CGQ_STATUS_OK) << cgq_last_error();
        std::vector<double> cell = rot(c.cell);
        Eval r1 = evaluate(ev->e, c, rot(c.pos), cell.data());
        ASSERT_EQ(r1.status, CGQ_STATUS_OK) << cgq_last_error();
        std::vector<double> f0 = rot(std::vector<double>(r0.forces.begin(), r0.forces.begin() + 3 * c.Z.size()));
        const double dE = std::fabs(r1.energy - r0.energy) / std::fabs(r0.energy);
        const double dF = max_abs_diff(f0.data(), r1.forces.data(), f0.size());
        std::printf("  %s/%s: rotation dE/E = %.1e, max|R F - F(R x)| = %.1e eV/A\n", GetParam().c_str(), c.name.c_str(),
                    dE, dF);
        EXPECT_LE(dE, 1e-12) << c.name;
        EXPECT_LE(dF, 1e-10 * std::fmax(max_abs(f0), 1.0)) << c.name;
    }
}


INSTANTIATE_TEST_SUITE_P(Fixtures, Physics, ::testing::ValuesIn(fixture_files()), fixture_test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Physics);
