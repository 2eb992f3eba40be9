// test_pairs.cpp: positions-only evaluation (cgq_evaluator_set_pairs or cgq_evaluator_build_pairs, then
// cgq_evaluate_pairs, as the LAMMPS pair style drives it) gives what cgq_evaluate_system gives, folded, with
// ghost nodes, and mixed (some copies folded, some ghost nodes), after the atoms have moved within half the skin;
// and its input errors are clear.
#include <gtest/gtest.h>

#include <random>

#include "pairs_util.h"

using namespace cgqtest;

extern "C" { /* weak: the test also links against a library built without OpenMP */
__attribute__((weak)) void omp_set_num_threads(int n);
__attribute__((weak)) int omp_get_max_threads(void);
}

namespace {
void expect_same(const Eval &a, const Eval &b, int64_t n, const std::string &what, double tol) {
    ASSERT_EQ(a.status, CGQ_STATUS_OK) << what << ": " << cgq_last_error();
    ASSERT_EQ(b.status, CGQ_STATUS_OK) << what;
    const double fs = std::fmax(max_abs(b.forces), 1.0);
    EXPECT_NEAR(a.energy, b.energy, tol * std::fmax(std::fabs(b.energy), 1.0)) << what;
    EXPECT_LE(max_abs_diff(a.forces.data(), b.forces.data(), 3 * n), tol * fs) << what;
    EXPECT_LE(max_abs_diff(a.atomic_energies.data(), b.atomic_energies.data(), n), tol * std::fmax(max_abs(b.atomic_energies), 1.0)) << what;
    EXPECT_LE(max_abs_diff(a.virial, b.virial, 9), tol * std::fmax(max_abs(std::vector<double>(b.virial, b.virial + 9)), 1.0)) << what;
    EXPECT_LE(max_abs_diff(a.atomic_virials.data(), b.atomic_virials.data(), 9 * n), tol * std::fmax(max_abs(b.atomic_virials), 1.0)) << what;
}
}  // namespace

class Pairs : public ::testing::TestWithParam<std::string> {};

TEST_P(Pairs, MatchSystemEvaluationFoldedGhostedAndMixed) {
    Model model(GetParam());
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    Evaluator ev(model.m);
    const double skin = 1.0;
    std::mt19937_64 rng(20261123);
    std::uniform_real_distribution<double> move(-0.28, 0.28); // |d| < 0.49 < skin / 2
    for (const Case &c : read_cases(GetParam())) {
        const Points p = make_points(model.m, c, skin);
        for (Nodes mode : kAllNodes) {
            const NodeMap nm = node_map(p, mode);
            const cgq_pair_list l = pair_list(p, nm);
            ASSERT_EQ(cgq_evaluator_set_pairs(ev.e, &l), CGQ_STATUS_OK) << cgq_last_error();
            for (int step = 0; step < 2; step++) { // as stored, then moved (the same candidates)
                std::vector<double> pos = c.pos;
                if (step)
                    for (double &v : pos) v += move(rng);
                const Eval a = evaluate_pairs(ev.e, p, nm, p.positions(pos, c.cell));
                const Eval b = evaluate(ev.e, c, pos);
                expect_same(a, b, p.n, c.name + nodes_name(mode) + (step ? " moved" : ""), 1e-11);
            }
        }
    }
}
// cgq_evaluator_build_pairs finds the candidates itself from the same points: the same evaluation (the candidates'
// order differs from make_points's, so the sums' order does too)
TEST_P(Pairs, BuiltCandidatesMatchGivenOnes) {
    Model model(GetParam());
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    Evaluator ev(model.m);
    const double skin = 1.0;
    for (const Case &c : read_cases(GetParam())) {
        const Points p = make_points(model.m, c, skin);
        const std::vector<double> x = p.positions(c.pos, c.cell);
        for (Nodes mode : kAllNodes) {
            const NodeMap nm = node_map(p, mode);
            const cgq_pair_list l = pair_list(p, nm);
            ASSERT_EQ(cgq_evaluator_set_pairs(ev.e, &l), CGQ_STATUS_OK) << cgq_last_error();
            const Eval a = evaluate_pairs(ev.e, p, nm, x);
            const cgq_point_set pts = point_set(p, nm, x);
            ASSERT_EQ(cgq_evaluator_build_pairs(ev.e, &pts, cgq_model_cutoff(model.m) + skin), CGQ_STATUS_OK)
                << cgq_last_error();
            const Eval b = evaluate_pairs(ev.e, p, nm, x);
            expect_same(b, a, p.n, c.name + nodes_name(mode) + " built", 1e-12);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Pairs, ::testing::ValuesIn(fixture_files()), fixture_test_name);

// More than 1,024 receivers (the host graph's rows are then filled by several threads) and 7 threads: a kept
// edge's slot must never be written by a rejected candidate of the row before it (a race that dropped edges
// at thread boundaries). The water frame of the shipped NequIP model, 2 x 2 x 2 (1,536 atoms).
TEST(Pairs, ManyThreadsLargeSystem) {
    if (!omp_set_num_threads || !omp_get_max_threads) GTEST_SKIP() << "library built without OpenMP";
    const std::string path = std::string(CGQ_POTENTIALS_DIR) + "/water-nequip-small.h5";
    Model model(path);
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    cgq_evaluator_params prm = cgq_evaluator_default_params();
    prm.num_threads = 7; /* thread boundaries at rows 220, 440, ...: different atoms of the replicas */
    cgq_evaluator *e7 = nullptr;
    ASSERT_EQ(cgq_evaluator_create(model.m, &prm, &e7), CGQ_STATUS_OK) << cgq_last_error();
    Evaluator ev(model.m);
    Case c0;
    for (const Case &k : read_cases(path))
        if (k.Z.size() == 192) c0 = k;
    ASSERT_EQ(c0.Z.size(), 192u);
    Case c = c0; /* 2 x 2 x 2 */
    c.Z.clear(), c.pos.clear();
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int d = 0; d < 2; d++)
                for (size_t i = 0; i < c0.Z.size(); i++) {
                    c.Z.push_back(c0.Z[i]);
                    for (int q = 0; q < 3; q++)
                        c.pos.push_back(c0.pos[3 * i + q] + a * c0.cell[q] + b * c0.cell[3 + q] + d * c0.cell[6 + q]);
                }
    for (int q = 0; q < 3; q++) c.cell[q] *= 2, c.cell[3 + q] *= 2, c.cell[6 + q] *= 2;
    const Points p = make_points(model.m, c, 1.0);
    const NodeMap nm = node_map(p, Nodes::folded);
    const cgq_pair_list l = pair_list(p, nm);
    ASSERT_EQ(cgq_evaluator_set_pairs(e7, &l), CGQ_STATUS_OK) << cgq_last_error();
    const int before = omp_get_max_threads();
    const Eval a = evaluate_pairs(e7, p, nm, p.positions(c.pos, c.cell)), b = evaluate(ev.e, c, c.pos);
    EXPECT_EQ(omp_get_max_threads(), before) << "the caller's thread count is restored";
    expect_same(a, b, p.n, "water 2x2x2, 7 threads", 1e-11);
    cgq_evaluator_free(e7);
}

TEST(PairsErrors, ClearMessages) {
    expect_clear_pair_errors(cgq_evaluator_default_params());
}
