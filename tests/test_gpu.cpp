// test_gpu.cpp (ctest label gpu): the GPU backend against the float64 CPU reference on every fixture,
// on the stored structures and on freshly perturbed ones, and bitwise determinism over repeats. The CPU's results can
// be shared between the processes of one ctest run (reference_cache.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>

#include "fp32_floor.h"
#include "pairs_util.h"
#include "reference_cache.h"

using namespace cgqtest;

namespace {
// the CPU's float64 results, shared between this run's processes where CGQ_TEST_REFERENCE_CACHE is set
const ReferenceCache kReferences = ReferenceCache::from_environment();
const char *const kCpuTag = "cpu fp64 cgq_evaluate_system";

cgq_evaluator *make(const cgq_model *m, cgq_device d, cgq_precision prec = CGQ_PRECISION_FP64,
                    cgq_status *status = nullptr) {
    cgq_evaluator_params p = cgq_evaluator_default_params();
    p.device = d;
    p.precision = prec;
    cgq_evaluator *e = nullptr;
    const cgq_status st = cgq_evaluator_create(m, &p, &e);
    if (status) *status = st;
    return st == CGQ_STATUS_OK ? e : nullptr;
}

double rms(const std::vector<double> &v) {
    double s = 0.0;
    for (double x : v) s += x * x;
    return std::sqrt(s / std::fmax(1.0, (double)v.size()));
}
// Every stored structure of the fixture, as stored and with every coordinate freshly perturbed (seed printed).
template <class F>
void for_each_structure(const std::string &file, unsigned seed, F fn) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> nd(0.0, 0.03);
    for (const Case &c : read_cases(file))
        for (int variant = 0; variant < 2; variant++) {
            std::vector<double> pos = c.pos;
            if (variant)
                for (double &x : pos) x += nd(rng);
            fn(c, pos, variant ? "perturbed" : "stored   ");
        }
}

// Same input, same bits: 10 repeats of b's evaluation.
void expect_bitwise_repeats(cgq_evaluator *gpu, const Case &c, const std::vector<double> &pos, const Eval &b) {
    for (int rep = 0; rep < 10; rep++) {
        Eval r = evaluate(gpu, c, pos);
        ASSERT_EQ(r.status, CGQ_STATUS_OK);
        ASSERT_EQ(std::memcmp(&r.energy, &b.energy, sizeof(double)), 0) << c.name << " repeat " << rep;
        ASSERT_EQ(std::memcmp(r.forces.data(), b.forces.data(), sizeof(double) * 3 * c.Z.size()), 0) << c.name;
    }
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
    const unsigned seed = test_seed();
    for_each_structure(GetParam(), seed, [&](const Case &c, const std::vector<double> &pos, const char *label) {
        Eval a = kReferences.evaluate_cached(cpu, GetParam(), kCpuTag, c, pos), b = evaluate(gpu, c, pos);
        ASSERT_EQ(a.status, CGQ_STATUS_OK) << cgq_last_error();
        ASSERT_EQ(b.status, CGQ_STATUS_OK) << cgq_last_error();
        const size_t n = c.Z.size();
        const double dE = std::fabs(a.energy - b.energy) / std::fabs(a.energy);
        const double dF = max_abs_diff(a.forces.data(), b.forces.data(), 3 * n) / std::fmax(max_abs(a.forces), 1e-3);
        const double dW = max_abs_diff(a.virial, b.virial, 9) / std::fmax(max_abs(std::vector<double>(a.virial, a.virial + 9)), 1e-3);
        std::printf("  %-30s %-20s %s seed=%u  dE/E=%.1e  dF/|F|=%.1e  dW/|W|=%.1e\n",
                    GetParam().substr(GetParam().find_last_of('/') + 1).c_str(), c.name.c_str(), label, seed, dE, dF, dW);
        EXPECT_LE(dE, 1e-10) << c.name << " seed " << seed;
        EXPECT_LE(dF, 1e-10) << c.name << " seed " << seed;
        EXPECT_LE(dW, 1e-10) << c.name << " seed " << seed;
        expect_bitwise_repeats(gpu, c, pos, b);
    });
    cgq_evaluator_free(gpu);
    cgq_evaluator_free(cpu);
}

// precision fp32 (float storage and arithmetic, double sums of energies, forces and virials) against the
// float64 CPU reference: energy error <= 1e-6 of the energy scale, force RMS error <= 1e-4 of the force RMS;
// deterministic. The energy scale is max(|E|, sum_i |E_i|): the random-weight fixtures have no large
// atomic reference energies, and in some cells the site energies nearly cancel (tiny cells: -22.8 + 29.3 eV),
// where float rounding of the sites (~2e-7 of them) is larger than 1e-6 of the small total. Where float32 storage
// of the weights alone moves the energy by more than that (fp32_floor.h), the limit is kFp32FloorFactor times that
// floor. The plain |dE|/|E| is printed as well; on the shipped potentials it is ~1e-9.
TEST_P(Gpu, Float32WithinTolerancesAndDeterministic) {
    Model model(GetParam());
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    if (!cgq_gpu_count()) GTEST_SKIP() << "no GPU";
    cgq_status st;
    cgq_evaluator *gpu = make(model.m, CGQ_DEVICE_CUDA, CGQ_PRECISION_FP32, &st);
    if (st == CGQ_STATUS_UNSUPPORTED) { /* a layer form only the fp64 kernels run: refused with a reason */
        EXPECT_NE(std::string(cgq_last_error()).find("fp64"), std::string::npos) << cgq_last_error();
        GTEST_SKIP() << cgq_last_error();
    }
    ASSERT_NE(gpu, nullptr) << cgq_last_error();
    EXPECT_NE(std::string(cgq_evaluator_backend(gpu)).find("float32"), std::string::npos);
    cgq_evaluator *cpu = make(model.m, CGQ_DEVICE_CPU);
    ASSERT_NE(cpu, nullptr);
    const Fp32Floor floor(GetParam());
    ASSERT_TRUE(floor.ok()) << cgq_last_error();
    const unsigned seed = test_seed();
    for_each_structure(GetParam(), seed, [&](const Case &c, const std::vector<double> &pos, const char *label) {
        Eval a = kReferences.evaluate_cached(cpu, GetParam(), kCpuTag, c, pos), b = evaluate(gpu, c, pos);
        ASSERT_EQ(a.status, CGQ_STATUS_OK) << cgq_last_error();
        ASSERT_EQ(b.status, CGQ_STATUS_OK) << cgq_last_error();
        const size_t n = c.Z.size();
        std::vector<double> dF(3 * n);
        for (size_t k = 0; k < 3 * n; k++) dF[k] = a.forces[k] - b.forces[k];
        double scale = std::fabs(a.energy), sites = 0.0;
        for (size_t i = 0; i < n; i++) sites += std::fabs(a.atomic_energies[i]);
        scale = std::fmax(scale, sites);
        const double dE = std::fabs(a.energy - b.energy) / scale;
        const double fr = rms(dF) / std::fmax(rms(a.forces), 1e-6);
        const double fl = floor.energy(c, pos, a.energy) / scale;
        std::printf("  fp32 %-30s %-20s %s seed=%u  dE/scale=%.1e  dE/E=%.1e  floor/scale=%.1e  rms(dF)/rms(F)=%.1e\n",
                    GetParam().substr(GetParam().find_last_of('/') + 1).c_str(), c.name.c_str(), label, seed, dE,
                    std::fabs(a.energy - b.energy) / std::fabs(a.energy), fl, fr);
        EXPECT_LE(dE, std::fmax(1e-6, kFp32FloorFactor * fl)) << c.name << " seed " << seed;
        EXPECT_LE(fr, 1e-4) << c.name << " seed " << seed;
        expect_bitwise_repeats(gpu, c, pos, b);
    });
    cgq_evaluator_free(gpu);
    cgq_evaluator_free(cpu);
}

// One fp32 evaluator's steps whose graphs' species sets change (the first case as it is, all of the model's first
// species, as it is, all of its last species, as it is) against a fresh evaluator's for each, bitwise: what an
// evaluator keeps between steps for the graph's species (the factored first layer's classes and the composed weights
// formed for them, species_conv.cuh sc_linear) is formed again when they change.
TEST_P(Gpu, Float32StepsAcrossSpeciesSetsMatchFreshEvaluators) {
    Model model(GetParam());
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    if (!cgq_gpu_count()) GTEST_SKIP() << "no GPU";
    cgq_status st;
    cgq_evaluator *gpu = make(model.m, CGQ_DEVICE_CUDA, CGQ_PRECISION_FP32, &st);
    if (st == CGQ_STATUS_UNSUPPORTED) GTEST_SKIP() << cgq_last_error();
    ASSERT_NE(gpu, nullptr) << cgq_last_error();
    const Case base = read_cases(GetParam()).at(0);
    for (int v : {1, 0, 1, 2, 1}) {
        Case c = base;
        if (v != 1)
            std::fill(c.Z.begin(), c.Z.end(), cgq_model_species_z(model.m, v ? cgq_model_num_species(model.m) - 1 : 0));
        cgq_evaluator *fresh = make(model.m, CGQ_DEVICE_CUDA, CGQ_PRECISION_FP32);
        ASSERT_NE(fresh, nullptr) << cgq_last_error();
        const Eval a = evaluate(gpu, c, c.pos), b = evaluate(fresh, c, c.pos);
        cgq_evaluator_free(fresh);
        ASSERT_EQ(a.status, CGQ_STATUS_OK) << cgq_last_error();
        ASSERT_EQ(b.status, CGQ_STATUS_OK) << cgq_last_error();
        EXPECT_EQ(std::memcmp(&a.energy, &b.energy, sizeof(double)), 0) << c.name << " variant " << v;
        EXPECT_EQ(std::memcmp(a.forces.data(), b.forces.data(), sizeof(double) * 3 * c.Z.size()), 0)
            << c.name << " variant " << v;
    }
    cgq_evaluator_free(gpu);
}

// Positions-only evaluation (the graph built on the GPU from candidate pairs, forces and virials summed there),
// folded, with ghost nodes, and mixed, after the atoms moved within half the skin, against the CPU's cgq_evaluate_system;
// 10 repeats bitwise identical. fp64: 1e-10 of the scales; fp32: the tolerances above.
static void check_pairs_on_device(const std::string &file, cgq_precision prec) {
    Model model(file);
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    if (!cgq_gpu_count()) GTEST_SKIP() << "no GPU";
    cgq_evaluator *cpu = make(model.m, CGQ_DEVICE_CPU);
    ASSERT_NE(cpu, nullptr);
    const unsigned seed = test_seed();
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> move(-0.28, 0.28);
    cgq_status st;
    cgq_evaluator *gpu = make(model.m, CGQ_DEVICE_CUDA, prec, &st);
    if (st == CGQ_STATUS_UNSUPPORTED) { /* fp32 refused for a form only fp64 runs (tested above) */
        cgq_evaluator_free(cpu);
        return;
    }
    ASSERT_NE(gpu, nullptr) << cgq_last_error();
    const bool f32 = prec == CGQ_PRECISION_FP32;
    EXPECT_EQ(cgq_evaluator_precision(gpu), prec);
    std::unique_ptr<Fp32Floor> floor;
    if (f32) {
        floor = std::make_unique<Fp32Floor>(file);
        ASSERT_TRUE(floor->ok()) << cgq_last_error();
    }
    for (const Case &c : read_cases(file)) {
        const Points p = make_points(model.m, c, 1.0);
        for (Nodes mode : kAllNodes) {
            const NodeMap nm = node_map(p, mode);
            const cgq_pair_list l = pair_list(p, nm);
            ASSERT_EQ(cgq_evaluator_set_pairs(gpu, &l), CGQ_STATUS_OK) << cgq_last_error();
            std::vector<double> pos = c.pos;
            for (double &v : pos) v += move(rng);
            const std::vector<double> x = p.positions(pos, c.cell);
            const Eval a = kReferences.evaluate_cached(cpu, file, kCpuTag, c, pos);
            double sites = 0.0;
            for (size_t i = 0; i < c.Z.size(); i++) sites += std::fabs(a.atomic_energies[i]);
            const double escale = std::fmax(std::fabs(a.energy), sites), fs = std::fmax(max_abs(a.forces), 1e-6);
            const double vs = std::fmax(max_abs(std::vector<double>(a.virial, a.virial + 9)), 1e-6);
            const double tol = f32 ? 1e-5 : 1e-10;
            const double fl = f32 ? floor->energy(c, pos, a.energy) : 0.0;
            auto check = [&](const Eval &b, const std::string &what) {
                ASSERT_EQ(b.status, CGQ_STATUS_OK) << what << ": " << cgq_last_error();
                std::printf("  pairs %-30s %-32s dE/scale=%.1e  floor/scale=%.1e  dF/max|F|=%.1e\n",
                            file.substr(file.find_last_of('/') + 1).c_str(), what.c_str(),
                            std::fabs(a.energy - b.energy) / escale, fl / escale,
                            max_abs_diff(a.forces.data(), b.forces.data(), 3 * p.n) / fs);
                EXPECT_LE(std::fabs(a.energy - b.energy),
                          f32 ? std::fmax(1e-6 * escale, kFp32FloorFactor * fl) : 1e-10 * escale)
                    << what;
                EXPECT_LE(max_abs_diff(a.forces.data(), b.forces.data(), 3 * p.n), (f32 ? 1e-3 : 1e-10) * fs) << what;
                EXPECT_LE(max_abs_diff(a.virial, b.virial, 9), (f32 ? 1e-3 : 1e-10) * vs) << what;
                EXPECT_LE(max_abs_diff(a.atomic_energies.data(), b.atomic_energies.data(), p.n), tol * escale) << what;
                EXPECT_LE(max_abs_diff(a.atomic_virials.data(), b.atomic_virials.data(), 9 * p.n),
                          (f32 ? 1e-3 : 1e-10) * std::fmax(max_abs(a.atomic_virials), 1e-6))
                    << what;
            };
            const std::string what =
                c.name + nodes_name(mode) + (f32 ? " fp32" : " fp64") + " seed " + std::to_string(seed);
            ExchangeCalls calls;
            const Eval b = evaluate_pairs(gpu, p, nm, x, true, &calls);
            check(b, what);
            if (nm.rows_form) { /* float rows where the evaluator is float32, else the double rows; both checked */
                EXPECT_EQ(calls.in_float, f32 ? calls.all : 0) << what;
                EXPECT_EQ(calls.staged, calls.all) << what << ": rows not handed over in the caller's staging";
                EXPECT_EQ(calls.staged_in, calls.all) << what << ": rows not taken in the caller's staging";
                ExchangeCalls dcalls;
                check(evaluate_pairs(gpu, p, nm, x, false, &dcalls), what + " double rows");
                EXPECT_EQ(dcalls.in_float, 0) << what;
            }
            for (int rep = 0; rep < 10; rep++) {
                const Eval r = evaluate_pairs(gpu, p, nm, x);
                ASSERT_EQ(r.status, CGQ_STATUS_OK);
                ASSERT_EQ(std::memcmp(&r.energy, &b.energy, sizeof(double)), 0) << what << " repeat " << rep;
                ASSERT_EQ(std::memcmp(r.forces.data(), b.forces.data(), sizeof(double) * 3 * p.n), 0) << what;
                ASSERT_EQ(std::memcmp(r.virial, b.virial, sizeof r.virial), 0) << what;
            }
        }
    }
    cgq_evaluator_free(gpu);
    cgq_evaluator_free(cpu);
}

TEST_P(Gpu, PairsOnDeviceMatchCpuAndAreDeterministic) {
    check_pairs_on_device(GetParam(), CGQ_PRECISION_FP64);
}

TEST_P(Gpu, PairsOnDeviceFp32MatchCpuAndAreDeterministic) {
    check_pairs_on_device(GetParam(), CGQ_PRECISION_FP32);
}

// The candidate list built on the device (cgq_evaluator_build_pairs) is the host's (CGQ_GPU_BUILD_PAIRS=0): the same
// candidates in the same order, so every output is bitwise the same
namespace {
Eval built_pairs_eval(cgq_evaluator *gpu, const Points &p, Nodes mode, const std::vector<double> &x, double radius,
                      bool on_device) {
    if (on_device) unsetenv("CGQ_GPU_BUILD_PAIRS");
    else setenv("CGQ_GPU_BUILD_PAIRS", "0", 1);
    const NodeMap nm = node_map(p, mode);
    const cgq_point_set pts = point_set(p, nm, x);
    const cgq_status st = cgq_evaluator_build_pairs(gpu, &pts, radius);
    unsetenv("CGQ_GPU_BUILD_PAIRS");
    if (st != CGQ_STATUS_OK) return Eval{st, 0.0, {0}, {}, {}, {}};
    return evaluate_pairs(gpu, p, nm, x);
}

void expect_bitwise(const Eval &a, const Eval &b, const std::string &what) {
    ASSERT_EQ(a.status, CGQ_STATUS_OK) << what << ": " << cgq_last_error();
    ASSERT_EQ(b.status, CGQ_STATUS_OK) << what << ": " << cgq_last_error();
    EXPECT_EQ(std::memcmp(&a.energy, &b.energy, sizeof a.energy), 0) << what << ": " << a.energy << " " << b.energy;
    EXPECT_EQ(std::memcmp(a.virial, b.virial, sizeof a.virial), 0) << what;
    EXPECT_TRUE(a.forces == b.forces) << what;
    EXPECT_TRUE(a.atomic_energies == b.atomic_energies) << what;
    EXPECT_TRUE(a.atomic_virials == b.atomic_virials) << what;
}
}  // namespace

TEST_P(Gpu, PairsBuiltOnDeviceAreTheHostsBitwise) {
    Model model(GetParam());
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    if (!cgq_gpu_count()) GTEST_SKIP() << "no GPU";
    for (cgq_precision prec : {CGQ_PRECISION_FP64, CGQ_PRECISION_FP32}) {
        cgq_status st;
        cgq_evaluator *gpu = make(model.m, CGQ_DEVICE_CUDA, prec, &st);
        if (st == CGQ_STATUS_UNSUPPORTED) continue;
        ASSERT_NE(gpu, nullptr) << cgq_last_error();
        for (const Case &c : read_cases(GetParam())) {
            const Points p = make_points(model.m, c, 1.0);
            const std::vector<double> x = p.positions(c.pos, c.cell);
            for (Nodes mode : kAllNodes) {
                const double radius = cgq_model_cutoff(model.m) + 1.0;
                const Eval host = built_pairs_eval(gpu, p, mode, x, radius, false);
                const Eval dev = built_pairs_eval(gpu, p, mode, x, radius, true);
                expect_bitwise(dev, host, c.name + nodes_name(mode) +
                                              (prec == CGQ_PRECISION_FP32 ? " fp32" : " fp64"));
            }
        }
        cgq_evaluator_free(gpu);
    }
}

// A domain of ~5,800 points (a jittered lattice, 1.5 A apart, in random order) of which 4,000 are local, the others
// copies folded onto random local atoms: many cells, rows of ~80-150 candidates; device and host lists bitwise alike,
// and the device's rebuild repeatable
TEST(GpuPairs, BuiltOnDeviceLargeDomain) {
    if (!cgq_gpu_count()) GTEST_SKIP() << "no GPU";
    Model model(std::string(CGQ_POTENTIALS_DIR) + "/water-mace-small.h5");
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    cgq_evaluator *gpu = make(model.m, CGQ_DEVICE_CUDA, CGQ_PRECISION_FP32);
    ASSERT_NE(gpu, nullptr) << cgq_last_error();
    const unsigned seed = test_seed();
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> jitter(-0.3, 0.3);
    const int side = 18;
    Points p;
    p.n = 4000;
    std::vector<double> x;
    for (int a = 0; a < side; a++)
        for (int b = 0; b < side; b++)
            for (int c = 0; c < side; c++)
                for (double v : {1.5 * a, 1.5 * b, 1.5 * c}) x.push_back(v + jitter(rng));
    const int64_t np = (int64_t)x.size() / 3;
    std::vector<int64_t> perm(np);
    for (int64_t k = 0; k < np; k++) perm[k] = k;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<double> xs(3 * np);
    for (int64_t k = 0; k < np; k++)
        for (int d = 0; d < 3; d++) xs[3 * k + d] = x[3 * perm[k] + d];
    const int32_t sp[2] = {cgq_model_species_index(model.m, 1), cgq_model_species_index(model.m, 8)};
    for (int64_t k = 0; k < np; k++) {
        p.owner.push_back(k < p.n ? (int32_t)k : (int32_t)(rng() % p.n));
        p.ids.push_back(k + 1);
    }
    for (int64_t k = 0; k < np; k++) p.species.push_back(sp[k < p.n ? rng() % 2 : 0]);
    for (int64_t k = p.n; k < np; k++) p.species[k] = p.species[p.owner[k]];
    const double radius = cgq_model_cutoff(model.m) + 1.0;
    const Eval host = built_pairs_eval(gpu, p, Nodes::folded, xs, radius, false);
    const Eval dev = built_pairs_eval(gpu, p, Nodes::folded, xs, radius, true);
    expect_bitwise(dev, host, "large domain seed " + std::to_string(seed));
    const Eval again = built_pairs_eval(gpu, p, Nodes::folded, xs, radius, true);
    expect_bitwise(again, dev, "large domain, rebuilt, seed " + std::to_string(seed));
    cgq_evaluator_free(gpu);
}

// Two copies of a molecule 10,000 A apart: cells of the radius's side would be ~3,000 times the points, so the GPU's
// cells grow (cgq_gpu_build_pairs doubles their side until there are at most ~2 per point); the lists still agree
// bitwise, and the energy is twice the molecule's
TEST(GpuPairs, BuiltOnDeviceSparsePoints) {
    if (!cgq_gpu_count()) GTEST_SKIP() << "no GPU";
    const std::string path = std::string(CGQ_POTENTIALS_DIR) + "/mace01-solvent.h5";
    Model model(path);
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    cgq_evaluator *gpu = make(model.m, CGQ_DEVICE_CUDA);
    ASSERT_NE(gpu, nullptr) << cgq_last_error();
    const Case c = read_cases(path).front();
    ASSERT_FALSE(c.pbc[0] || c.pbc[1] || c.pbc[2]);
    const int64_t n = (int64_t)c.Z.size();
    Points p;
    p.n = 2 * n;
    std::vector<double> x = c.pos;
    for (int64_t i = 0; i < n; i++)
        for (int d = 0; d < 3; d++) x.push_back(c.pos[3 * i + d] + (d == 0 ? 1e4 : 0.0));
    for (int64_t k = 0; k < 2 * n; k++) {
        p.owner.push_back((int32_t)k), p.ids.push_back(k + 1);
        p.species.push_back(cgq_model_species_index(model.m, c.Z[k % n]));
    }
    const double radius = cgq_model_cutoff(model.m) + 1.0;
    const Eval host = built_pairs_eval(gpu, p, Nodes::folded, x, radius, false);
    const Eval dev = built_pairs_eval(gpu, p, Nodes::folded, x, radius, true);
    expect_bitwise(dev, host, "two molecules 1e4 A apart");
    const Eval one = evaluate(gpu, c, c.pos);
    ASSERT_EQ(one.status, CGQ_STATUS_OK) << cgq_last_error();
    EXPECT_NEAR(dev.energy, 2 * one.energy, 1e-10 * std::fabs(one.energy));
    cgq_evaluator_free(gpu);
}

// The pairs step's input errors found on the device (pairs_count) name the atoms as the CPU's checks do
TEST(GpuPairs, ClearErrorMessages) {
    if (!cgq_gpu_count()) GTEST_SKIP() << "no GPU";
    for (cgq_precision prec : {CGQ_PRECISION_FP64, CGQ_PRECISION_FP32}) {
        cgq_evaluator_params p = cgq_evaluator_default_params();
        p.device = CGQ_DEVICE_CUDA, p.precision = prec;
        expect_clear_pair_errors(p);
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Gpu, ::testing::ValuesIn(fixture_files()), fixture_test_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Gpu);
