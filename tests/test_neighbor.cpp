// test_neighbor.cpp: the cell-list neighbor list against a brute-force O(N^2 * images) reference.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "cgequi.h"
#include "common/error.h"
#include "graph/neighbor.h"
#include "graph/sender_index.h"

// Weak, so the test links whether or not the library was built with OpenMP (this file may be
// compiled without -fopenmp even when the library uses it).
__attribute__((weak)) void omp_set_num_threads(int n);
__attribute__((weak)) int omp_get_max_threads(void);
}

namespace {

struct Edge {
    int32_t recv, send;
    std::array<int32_t, 3> s;
    std::array<double, 3> v;
};

struct System {
    std::vector<double> pos;
    std::array<double, 9> cell{};
    std::array<int32_t, 3> pbc{};
    int64_t n() const { return (int64_t)pos.size() / 3; }
};

void cross(const double *a, const double *b, double *o) {
    o[0] = a[1] * b[2] - a[2] * b[1];
    o[1] = a[2] * b[0] - a[0] * b[2];
    o[2] = a[0] * b[1] - a[1] * b[0];
}

double det3(const double *m) {
    double bc[3];
    cross(m + 3, m + 6, bc);
    return m[0] * bc[0] + m[1] * bc[1] + m[2] * bc[2];
}

// Reference: for every ordered pair (j, i), every shift S with |v| < cutoff. Non-periodic rows are
// replaced by whichever coordinate-ish axis makes the matrix best conditioned; then for any
// periodic k, |v| < r implies |df_k - S_k| * width_k < r (df = fractional difference), which
// bounds S_k per pair. Loops run in (j, i, S0, S1, S2) order, so the result is already sorted.
// v uses the same expression the library documents (non-periodic cell rows count as zero).
// fixed_range > 0 instead scans every S with |S_k| <= fixed_range (no geometry at all), to check
// the bound itself on small systems.
std::vector<Edge> brute_force(const System &sys, double cutoff, int fixed_range = 0) {
    const int64_t n = sys.n();
    double c[9], m[9];
    for (int q = 0; q < 9; ++q) c[q] = m[q] = sys.pbc[q / 3] ? sys.cell[q] : 0.0;
    const double axes[6][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 1, 0}, {0, 1, 1}, {1, 0, 1}};
    for (int k = 0; k < 3; ++k) {
        if (sys.pbc[k]) continue;
        // Choose the axis maximising |det| with the other rows (unset rows temporarily e_k).
        double best = -1;
        int best_a = 0;
        for (int a = 0; a < 6; ++a) {
            double t[9];
            std::memcpy(t, m, sizeof t);
            for (int d = 0; d < 3; ++d) t[3 * k + d] = axes[a][d];
            for (int q = 0; q < 3; ++q)
                if (!sys.pbc[q] && q != k && t[3 * q] == 0 && t[3 * q + 1] == 0 && t[3 * q + 2] == 0)
                    t[3 * q + q] = 1.0;
            double dd = std::fabs(det3(t));
            if (dd > best + 1e-12) {
                best = dd;
                best_a = a;
            }
        }
        for (int d = 0; d < 3; ++d) m[3 * k + d] = axes[best_a][d];
    }
    double det = det3(m);
    double inv[9]; // columns: reciprocal vectors / det, so f = x . inv
    {
        double r[9];
        cross(m + 3, m + 6, r);
        cross(m + 6, m + 0, r + 3);
        cross(m + 0, m + 3, r + 6);
        for (int k = 0; k < 3; ++k)
            for (int d = 0; d < 3; ++d) inv[3 * d + k] = r[3 * k + d] / det;
    }
    double width[3];
    for (int k = 0; k < 3; ++k) {
        double cr[3];
        cross(m + 3 * ((k + 1) % 3), m + 3 * ((k + 2) % 3), cr);
        width[k] = std::fabs(det) / std::sqrt(cr[0] * cr[0] + cr[1] * cr[1] + cr[2] * cr[2]);
    }
    // Fractional coordinates of every atom (periodic directions only are used).
    std::vector<double> frac((size_t)n * 3);
    for (int64_t i = 0; i < n; ++i)
        for (int k = 0; k < 3; ++k) {
            frac[3 * i + k] = 0;
            for (int d = 0; d < 3; ++d) frac[3 * i + k] += sys.pos[3 * i + d] * inv[3 * d + k];
        }
    std::vector<Edge> out;
    for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < n; ++i) {
            // Integers S_k with |df_k - S_k| < r/width_k (+ slack for rounding); empty -> no edge.
            int lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
            bool empty = false;
            for (int k = 0; k < 3 && !empty; ++k) {
                if (!sys.pbc[k]) continue;
                double df = frac[3 * j + k] - frac[3 * i + k];
                lo[k] = (int)std::ceil(df - cutoff / width[k] - 1e-6);
                hi[k] = (int)std::floor(df + cutoff / width[k] + 1e-6);
                empty = lo[k] > hi[k];
                if (fixed_range > 0) {
                    lo[k] = -fixed_range;
                    hi[k] = fixed_range;
                    empty = false;
                }
            }
            if (empty) continue;
            for (int s0 = lo[0]; s0 <= hi[0]; ++s0)
                for (int s1 = lo[1]; s1 <= hi[1]; ++s1)
                    for (int s2 = lo[2]; s2 <= hi[2]; ++s2) {
                        if (i == j && s0 == 0 && s1 == 0 && s2 == 0) continue;
                        Edge e;
                        e.recv = (int32_t)j;
                        e.send = (int32_t)i;
                        e.s = {s0, s1, s2};
                        double r2 = 0;
                        for (int d = 0; d < 3; ++d) {
                            double t = (double)s0 * c[d] + (double)s1 * c[3 + d];
                            t = t + (double)s2 * c[6 + d];
                            e.v[d] = sys.pos[3 * j + d] - (sys.pos[3 * i + d] + t);
                            r2 += e.v[d] * e.v[d];
                        }
                        if (r2 < cutoff * cutoff) out.push_back(e);
                    }
        }
    return out;
}

// Flattens a built list into edges, checking the CSR structure on the way.
std::vector<Edge> flatten(const cgq_neighbor_list &nl) {
    std::vector<Edge> out;
    EXPECT_EQ(nl.row_ptr[0], 0);
    for (int64_t j = 0; j < nl.n_nodes; ++j) {
        EXPECT_LE(nl.row_ptr[j], nl.row_ptr[j + 1]);
        for (int64_t e = nl.row_ptr[j]; e < nl.row_ptr[j + 1]; ++e) {
            Edge x;
            x.recv = (int32_t)j;
            x.send = nl.sender[e];
            x.s = {nl.shift[3 * e], nl.shift[3 * e + 1], nl.shift[3 * e + 2]};
            x.v = {nl.vec[3 * e], nl.vec[3 * e + 1], nl.vec[3 * e + 2]};
            out.push_back(x);
        }
    }
    EXPECT_EQ(nl.row_ptr[nl.n_nodes], nl.n_edges);
    EXPECT_EQ((int64_t)out.size(), nl.n_edges);
    return out;
}

void expect_matches_brute_force(const System &sys, double cutoff) {
    cgq_neighbor_list nl;
    std::memset(&nl, 0, sizeof nl);
    ASSERT_EQ(cgq_neighbor_list_build(&nl, sys.n(), sys.pos.data(), sys.cell.data(), sys.pbc.data(), cutoff),
              CGQ_STATUS_OK)
        << cgq_last_error();
    std::vector<Edge> got = flatten(nl);
    std::vector<Edge> ref = brute_force(sys, cutoff);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t e = 0; e < ref.size(); ++e) {
        ASSERT_EQ(got[e].recv, ref[e].recv) << "edge " << e;
        ASSERT_EQ(got[e].send, ref[e].send) << "edge " << e;
        ASSERT_EQ(got[e].s, ref[e].s) << "edge " << e;
        // Same expression on the same doubles: bitwise equal.
        ASSERT_EQ(got[e].v, ref[e].v) << "edge " << e;
    }
    cgq_neighbor_list_free(&nl);
}

// Random triclinic cell: diagonal in [lmin, lmax], off-diagonal tilt up to `tilt` times that.
std::array<double, 9> random_cell(std::mt19937_64 &rng, double lmin, double lmax, double tilt) {
    std::uniform_real_distribution<double> len(lmin, lmax), sk(-tilt, tilt);
    std::array<double, 9> c{};
    for (int k = 0; k < 3; ++k) {
        double l = len(rng);
        for (int d = 0; d < 3; ++d) c[3 * k + d] = (k == d) ? l : sk(rng) * l;
    }
    return c;
}

// Positions at fractional coordinates uniform in [fmin, fmax) of the cell.
std::vector<double> random_positions(std::mt19937_64 &rng, const std::array<double, 9> &c, int64_t n,
                                     double fmin = 0.0, double fmax = 1.0) {
    std::uniform_real_distribution<double> u(fmin, fmax);
    std::vector<double> p((size_t)n * 3);
    for (int64_t i = 0; i < n; ++i) {
        double f[3] = {u(rng), u(rng), u(rng)};
        for (int d = 0; d < 3; ++d) p[3 * i + d] = f[0] * c[d] + f[1] * c[3 + d] + f[2] * c[6 + d];
    }
    return p;
}

bool same_edges(const std::vector<Edge> &a, const std::vector<Edge> &b) {
    if (a.size() != b.size()) return false;
    for (size_t e = 0; e < a.size(); ++e)
        if (a[e].recv != b[e].recv || a[e].send != b[e].send || a[e].s != b[e].s || a[e].v != b[e].v)
            return false;
    return true;
}

TEST(Neighbor, ReferenceBoundAgreesWithPlainImageScan) {
    // The reference's per-pair image bound against scanning every |S_k| <= 12 blindly.
    std::mt19937_64 rng(8);
    for (int trial = 0; trial < 12; ++trial) {
        System s;
        s.cell = random_cell(rng, 2.0, 6.0, 0.4);
        s.pbc = {1, trial % 3 != 1, trial % 4 != 2};
        s.pos = random_positions(rng, s.cell, 1 + trial % 4, -0.5, 1.5);
        std::vector<Edge> bound = brute_force(s, 5.0), plain = brute_force(s, 5.0, 12);
        EXPECT_GT(plain.size(), 0u);
        EXPECT_TRUE(same_edges(bound, plain)) << "trial " << trial;
    }
}

TEST(Neighbor, RandomTriclinicPeriodic) {
    std::mt19937_64 rng(1234);
    for (int trial = 0; trial < 20; ++trial) {
        System s;
        s.cell = random_cell(rng, 5.0, 12.0, 0.4);
        s.pbc = {1, 1, 1};
        s.pos = random_positions(rng, s.cell, 5 + trial * 3);
        double cutoff = 3.0 + 0.25 * trial;
        SCOPED_TRACE("trial " + std::to_string(trial));
        expect_matches_brute_force(s, cutoff);
    }
}

TEST(Neighbor, TinyCells) {
    std::mt19937_64 rng(7);
    {
        // One atom in a 2 A cubic cell, cutoff 5 A: many self-images, no self edge.
        System s;
        s.cell = {2, 0, 0, 0, 2, 0, 0, 0, 2};
        s.pbc = {1, 1, 1};
        s.pos = {0.3, -0.2, 0.9};
        expect_matches_brute_force(s, 5.0);
    }
    {
        // Exactly on the cutoff: strict inequality excludes the 6 nearest images.
        System s;
        s.cell = {3, 0, 0, 0, 3, 0, 0, 0, 3};
        s.pbc = {1, 1, 1};
        s.pos = {0, 0, 0};
        cgq_neighbor_list nl;
        std::memset(&nl, 0, sizeof nl);
        ASSERT_EQ(cgq_neighbor_list_build(&nl, 1, s.pos.data(), s.cell.data(), s.pbc.data(), 3.0), CGQ_STATUS_OK);
        EXPECT_EQ(nl.n_edges, 0);
        ASSERT_EQ(cgq_neighbor_list_build(&nl, 1, s.pos.data(), s.cell.data(), s.pbc.data(), 3.0 + 1e-9),
                  CGQ_STATUS_OK);
        EXPECT_EQ(nl.n_edges, 6);
        cgq_neighbor_list_free(&nl);
    }
    for (int trial = 0; trial < 10; ++trial) {
        System s;
        s.cell = random_cell(rng, 1.5, 3.0, 0.5);
        s.pbc = {1, 1, 1};
        s.pos = random_positions(rng, s.cell, 1 + trial % 3, -1.5, 2.5);
        SCOPED_TRACE("tiny trial " + std::to_string(trial));
        expect_matches_brute_force(s, 4.0 + 0.2 * trial);
    }
    {
        // Thin in one direction only (a flat, strongly tilted cell).
        System s;
        s.cell = {10, 0, 0, 6, 1.2, 0, 2, 3, 9};
        s.pbc = {1, 1, 1};
        s.pos = random_positions(rng, s.cell, 12);
        expect_matches_brute_force(s, 5.0);
    }
}

TEST(Neighbor, Slab) {
    std::mt19937_64 rng(99);
    for (int trial = 0; trial < 6; ++trial) {
        System s;
        s.cell = random_cell(rng, 4.0, 9.0, 0.3);
        if (trial % 2) s.cell[6] = s.cell[7] = s.cell[8] = 0; // c unused: may be zero
        s.pbc = {1, 1, 0};
        if (trial == 4) s.pbc = {1, 0, 1};
        if (trial == 5) s.pbc = {0, 1, 0};
        std::array<double, 9> c = s.cell;
        if (trial % 2) c[8] = 15.0;
        s.pos = random_positions(rng, c, 20, -0.5, 1.5);
        SCOPED_TRACE("slab trial " + std::to_string(trial));
        expect_matches_brute_force(s, 4.5);
    }
}

TEST(Neighbor, Vacuum) {
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(-30.0, 50.0);
    System s;
    s.pbc = {0, 0, 0}; // cell stays zero
    for (int i = 0; i < 300; ++i) s.pos.push_back(u(rng));
    expect_matches_brute_force(s, 6.0);
    // Garbage cell values are ignored without pbc.
    s.cell = {NAN, 0, 0, 0, INFINITY, 0, 0, 0, 0};
    expect_matches_brute_force(s, 6.0);
    // Two atoms very far apart: bin count must stay bounded.
    System far;
    far.pos = {0, 0, 0, 1e7, -3e7, 2e7, 1, 0, 0};
    expect_matches_brute_force(far, 6.0);
}

TEST(Neighbor, AtomsOutsideCell) {
    std::mt19937_64 rng(42);
    for (int trial = 0; trial < 8; ++trial) {
        System s;
        s.cell = random_cell(rng, 4.0, 8.0, 0.5);
        s.pbc = {1, 1, 1};
        s.pos = random_positions(rng, s.cell, 15, -4.0, 5.0);
        SCOPED_TRACE("outside trial " + std::to_string(trial));
        expect_matches_brute_force(s, 5.0);
    }
}

TEST(Neighbor, LargeRandomBox) {
    // ~3000 atoms at 0.1 atoms/A^3, several bins per direction.
    std::mt19937_64 rng(2024);
    const int64_t n = 3000;
    double L = std::cbrt((double)n / 0.1);
    System s;
    s.cell = {L, 0, 0, 0.1 * L, L, 0, -0.05 * L, 0.2 * L, L};
    s.pbc = {1, 1, 1};
    s.pos = random_positions(rng, s.cell, n, -0.2, 1.2);
    expect_matches_brute_force(s, 6.0);
    // Same atoms as a slab.
    s.pbc = {1, 1, 0};
    expect_matches_brute_force(s, 6.0);
}

TEST(Neighbor, LargeClusterAndWire) {
    // Many bins along non-periodic directions (vacuum cluster, 1D-periodic wire).
    std::mt19937_64 rng(77);
    const int64_t n = 2000;
    double L = std::cbrt((double)n / 0.08);
    System s;
    s.cell = {L, 0, 0, 0, L, 0, 0, 0, L};
    s.pos = random_positions(rng, s.cell, n);
    s.pbc = {0, 0, 0};
    s.cell = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    expect_matches_brute_force(s, 5.5);
    s.pbc = {0, 0, 1};
    s.cell = {0, 0, 0, 0, 0, 0, 0.3, -0.2, L};
    expect_matches_brute_force(s, 5.5);
}

TEST(Neighbor, ReceiversOnlyKeepTheFirstRows) {
    // A domain's local atoms (the first n) as receivers of local and ghost atoms: the rows of the full
    // build for those receivers, empty rows after them; n_receivers out of range is refused.
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<double> u(0.0, 14.0);
    std::vector<double> pos;
    for (int i = 0; i < 3 * 400; ++i) pos.push_back(u(rng));
    const int32_t nopbc[3] = {0, 0, 0};
    cgq_neighbor_list full = {}, part = {};
    ASSERT_EQ(cgq_neighbor_list_build(&full, 400, pos.data(), nullptr, nopbc, 4.5), CGQ_STATUS_OK);
    for (int64_t nr : {0, 1, 150, 400}) {
        SCOPED_TRACE("receivers " + std::to_string(nr));
        ASSERT_EQ(cgq_neighbor_list_build_receivers(&part, 400, nr, pos.data(), nullptr, nopbc, 4.5), CGQ_STATUS_OK);
        ASSERT_EQ(part.n_nodes, 400);
        ASSERT_EQ(part.n_edges, full.row_ptr[nr]);
        for (int64_t i = 0; i <= 400; ++i) ASSERT_EQ(part.row_ptr[i], full.row_ptr[std::min<int64_t>(i, nr)]);
        for (int64_t e = 0; e < part.n_edges; ++e) {
            ASSERT_EQ(part.sender[e], full.sender[e]);
            for (int k = 0; k < 3; ++k) ASSERT_EQ(part.vec[3 * e + k], full.vec[3 * e + k]);
        }
    }
    EXPECT_EQ(cgq_neighbor_list_build_receivers(&part, 400, 401, pos.data(), nullptr, nopbc, 4.5),
              CGQ_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(cgq_neighbor_list_build_receivers(&part, 400, -1, pos.data(), nullptr, nopbc, 4.5),
              CGQ_STATUS_INVALID_ARGUMENT);
    cgq_neighbor_list_free(&full);
    cgq_neighbor_list_free(&part);
}

TEST(Neighbor, ReuseAndSymmetry) {
    std::mt19937_64 rng(11);
    cgq_neighbor_list nl;
    std::memset(&nl, 0, sizeof nl);
    System big;
    big.cell = random_cell(rng, 15.0, 16.0, 0.2);
    big.pbc = {1, 1, 1};
    big.pos = random_positions(rng, big.cell, 400);
    ASSERT_EQ(cgq_neighbor_list_build(&nl, big.n(), big.pos.data(), big.cell.data(), big.pbc.data(), 5.0),
              CGQ_STATUS_OK);
    std::vector<Edge> first = flatten(nl);
    int64_t ncap = nl.node_capacity, ecap = nl.edge_capacity;
    const int32_t *sender_ptr = nl.sender;

    // Every edge (i -> j, S) has its reverse (j -> i, -S) with the opposite vector.
    for (const Edge &e : first) {
        bool found = false;
        for (int64_t q = nl.row_ptr[e.send]; q < nl.row_ptr[e.send + 1]; ++q)
            if (nl.sender[q] == e.recv && nl.shift[3 * q] == -e.s[0] && nl.shift[3 * q + 1] == -e.s[1] &&
                nl.shift[3 * q + 2] == -e.s[2]) {
                for (int d = 0; d < 3; ++d) EXPECT_NEAR(nl.vec[3 * q + d], -e.v[d], 1e-12);
                found = true;
            }
        ASSERT_TRUE(found);
    }

    System small;
    small.cell = {3, 0, 0, 0, 3, 0, 0, 0, 3};
    small.pbc = {1, 1, 1};
    small.pos = {0, 0, 0, 1.5, 1.5, 1.5};
    ASSERT_EQ(cgq_neighbor_list_build(&nl, small.n(), small.pos.data(), small.cell.data(), small.pbc.data(), 2.7),
              CGQ_STATUS_OK);
    EXPECT_EQ(nl.n_nodes, 2);
    EXPECT_EQ(nl.n_edges, 16); // 8 cube corners each way (2.598 A); self images at 3 A excluded
    EXPECT_EQ(nl.node_capacity, ncap);
    EXPECT_EQ(nl.edge_capacity, ecap);

    ASSERT_EQ(cgq_neighbor_list_build(&nl, big.n(), big.pos.data(), big.cell.data(), big.pbc.data(), 5.0),
              CGQ_STATUS_OK);
    EXPECT_EQ(nl.edge_capacity, ecap);
    EXPECT_EQ(nl.sender, sender_ptr); // no reallocation when capacity suffices
    std::vector<Edge> again = flatten(nl);
    ASSERT_EQ(again.size(), first.size());
    for (size_t e = 0; e < first.size(); ++e) {
        EXPECT_EQ(again[e].send, first[e].send);
        EXPECT_EQ(again[e].s, first[e].s);
        EXPECT_EQ(again[e].v, first[e].v);
    }
    cgq_neighbor_list_free(&nl);
    EXPECT_EQ(nl.row_ptr, nullptr);
    EXPECT_EQ(nl.edge_capacity, 0);
}

TEST(Neighbor, ThreadCountDoesNotChangeResult) {
    if (!omp_set_num_threads || !omp_get_max_threads) GTEST_SKIP() << "library built without OpenMP";
    std::mt19937_64 rng(3);
    const int64_t n = 5000;
    double L = std::cbrt((double)n / 0.1);
    System s;
    s.cell = {L, 0, 0, 0, L, 0, 0, 0, L};
    s.pbc = {1, 1, 1};
    s.pos = random_positions(rng, s.cell, n, -0.5, 1.5);
    int saved = omp_get_max_threads();
    std::vector<std::vector<Edge>> results;
    for (int t : {1, 2, 3, 8}) {
        omp_set_num_threads(t);
        cgq_neighbor_list nl;
        std::memset(&nl, 0, sizeof nl);
        ASSERT_EQ(cgq_neighbor_list_build(&nl, n, s.pos.data(), s.cell.data(), s.pbc.data(), 6.0), CGQ_STATUS_OK);
        results.push_back(flatten(nl));
        cgq_neighbor_list_free(&nl);
    }
    omp_set_num_threads(saved);
    for (size_t r = 1; r < results.size(); ++r) {
        ASSERT_EQ(results[r].size(), results[0].size());
        for (size_t e = 0; e < results[0].size(); ++e) {
            ASSERT_EQ(results[r][e].recv, results[0][e].recv);
            ASSERT_EQ(results[r][e].send, results[0][e].send);
            ASSERT_EQ(results[r][e].s, results[0][e].s);
            ASSERT_EQ(std::memcmp(results[r][e].v.data(), results[0][e].v.data(), sizeof(double) * 3), 0);
        }
    }
}

// senders_only (an MD code's candidate pairs): one pass, row_ptr and sender only; the same rows as the full build for
// periodic, tiny, slab and open systems, receiver subsets and any thread count, and the same overlap errors. A list
// reused across both kinds of build keeps shift and vec sized for the full ones.
TEST(Neighbor, SendersOnlyMatchesTheFullBuild) {
    std::mt19937_64 rng(21);
    std::vector<std::pair<System, double>> cases;
    for (int trial = 0; trial < 6; ++trial) {
        System s;
        s.cell = random_cell(rng, trial < 2 ? 2.5 : 9.0, trial < 2 ? 4.0 : 14.0, 0.3);
        s.pbc = {1, trial % 3 != 1, trial % 2};
        s.pos = random_positions(rng, s.cell, trial < 2 ? 3 : 300, -0.3, 1.3);
        cases.push_back({s, 4.0 + 0.5 * trial});
    }
    System open; // liquid density, no cell (as pair_cgequi passes its points)
    std::uniform_real_distribution<double> u(0.0, 28.0);
    for (int i = 0; i < 3 * 2200; ++i) open.pos.push_back(u(rng));
    cases.push_back({open, 6.0});
    const int saved = omp_get_max_threads ? omp_get_max_threads() : 1;
    cgq_neighbor_list reused = {};
    for (size_t c = 0; c < cases.size(); ++c) {
        const System &s = cases[c].first;
        const double cut = cases[c].second;
        const int64_t n = s.n();
        for (int64_t nr : {n, n / 3}) {
            SCOPED_TRACE("case " + std::to_string(c) + " receivers " + std::to_string(nr));
            cgq_neighbor_list full = {};
            ASSERT_EQ(cgq_neighbor_list_build_receivers(&full, n, nr, s.pos.data(), s.cell.data(), s.pbc.data(), cut),
                      CGQ_STATUS_OK)
                << cgq_last_error();
            for (int t : {1, 2, 3, 8}) {
                if (omp_set_num_threads) omp_set_num_threads(t);
                cgq_neighbor_list so = {};
                so.senders_only = 1;
                ASSERT_EQ(cgq_neighbor_list_build_receivers(&so, n, nr, s.pos.data(), s.cell.data(), s.pbc.data(), cut),
                          CGQ_STATUS_OK)
                    << cgq_last_error();
                EXPECT_EQ(so.shift, nullptr);
                EXPECT_EQ(so.vec, nullptr);
                ASSERT_EQ(so.n_nodes, full.n_nodes);
                ASSERT_EQ(so.n_edges, full.n_edges);
                for (int64_t i = 0; i <= n; ++i) ASSERT_EQ(so.row_ptr[i], full.row_ptr[i]) << "row " << i;
                for (int64_t e = 0; e < full.n_edges; ++e) ASSERT_EQ(so.sender[e], full.sender[e]) << "edge " << e;
                cgq_neighbor_list_free(&so);
            }
            if (omp_set_num_threads) omp_set_num_threads(saved);
            // the same list, alternately senders only and full: the full builds still fill shift and vec
            for (int so : {1, 0}) {
                reused.senders_only = so;
                ASSERT_EQ(cgq_neighbor_list_build_receivers(&reused, n, nr, s.pos.data(), s.cell.data(), s.pbc.data(),
                                                            cut),
                          CGQ_STATUS_OK);
                ASSERT_EQ(reused.n_edges, full.n_edges);
                for (int64_t e = 0; e < full.n_edges; ++e) {
                    ASSERT_EQ(reused.sender[e], full.sender[e]);
                    if (!so)
                        for (int k = 0; k < 3; ++k) {
                            ASSERT_EQ(reused.shift[3 * e + k], full.shift[3 * e + k]);
                            ASSERT_EQ(reused.vec[3 * e + k], full.vec[3 * e + k]);
                        }
                }
            }
            cgq_neighbor_list_free(&full);
        }
    }
    cgq_neighbor_list_free(&reused);
    // overlapping atoms: the same error as the full build, named by the caller's ids, and an empty list
    std::vector<double> overlap = {0, 0, 0, 1, 1, 1, 2, 2, 2, 1, 1, 1 + 1e-10};
    const int64_t ids[4] = {10, 11, 12, 13};
    const int32_t nopbc[3] = {0, 0, 0};
    cgq_neighbor_list so = {};
    so.senders_only = 1, so.ids = ids;
    EXPECT_EQ(cgq_neighbor_list_build_receivers(&so, 4, 4, overlap.data(), nullptr, nopbc, 4.0), CGQ_STATUS_BAD_INPUT);
    const std::string msg = cgq_last_error();
    EXPECT_NE(msg.find("atoms 11 at"), std::string::npos) << msg;
    EXPECT_NE(msg.find("and 13 at"), std::string::npos) << msg;
    EXPECT_EQ(so.n_edges, 0);
    EXPECT_EQ(so.row_ptr[0], 0);
    cgq_neighbor_list_free(&so);
}

TEST(Neighbor, ZeroAtoms) {
    cgq_neighbor_list nl;
    std::memset(&nl, 0, sizeof nl);
    double cell[9] = {5, 0, 0, 0, 5, 0, 0, 0, 5};
    int32_t pbc[3] = {1, 1, 1};
    ASSERT_EQ(cgq_neighbor_list_build(&nl, 0, nullptr, cell, pbc, 5.0), CGQ_STATUS_OK);
    EXPECT_EQ(nl.n_nodes, 0);
    EXPECT_EQ(nl.n_edges, 0);
    ASSERT_NE(nl.row_ptr, nullptr);
    EXPECT_EQ(nl.row_ptr[0], 0);
    cgq_neighbor_list_free(&nl);
}

cgq_status build_status(const std::vector<double> &pos, const double *cell, const int32_t *pbc, double cutoff) {
    cgq_neighbor_list nl;
    std::memset(&nl, 0, sizeof nl);
    cgq_clear_error();
    cgq_status st = cgq_neighbor_list_build(&nl, (int64_t)pos.size() / 3, pos.data(), cell, pbc, cutoff);
    if (st != CGQ_STATUS_OK) {
        EXPECT_EQ(nl.n_edges, 0);
        EXPECT_EQ(nl.n_nodes, 0);
    }
    cgq_neighbor_list_free(&nl);
    return st;
}

TEST(Neighbor, Errors) {
    double cell[9] = {5, 0, 0, 0, 5, 0, 0, 0, 5};
    int32_t pbc[3] = {1, 1, 1};
    int32_t nopbc[3] = {0, 0, 0};

    std::vector<double> nan_pos = {0, 0, 0, 1, 1, 1, 0, NAN, 1};
    EXPECT_EQ(build_status(nan_pos, cell, pbc, 4.0), CGQ_STATUS_BAD_INPUT);
    EXPECT_NE(std::string(cgq_last_error()).find("atom 2"), std::string::npos) << cgq_last_error();
    std::vector<double> inf_pos = {INFINITY, 0, 0};
    EXPECT_EQ(build_status(inf_pos, cell, nopbc, 4.0), CGQ_STATUS_BAD_INPUT);

    std::vector<double> overlap = {0, 0, 0, 1, 1, 1, 2, 2, 2, 1, 1, 1 + 1e-10};
    EXPECT_EQ(build_status(overlap, cell, pbc, 4.0), CGQ_STATUS_BAD_INPUT);
    std::string msg = cgq_last_error();
    EXPECT_NE(msg.find("atoms 1 at"), std::string::npos) << msg;
    EXPECT_NE(msg.find("and 3 at"), std::string::npos) << msg;
    EXPECT_EQ(build_status(overlap, cell, nopbc, 4.0), CGQ_STATUS_BAD_INPUT);

    // Overlap through the periodic boundary: x = 0 and x = a are the same site.
    std::vector<double> wrap_overlap = {0, 1, 1, 5, 1, 1};
    EXPECT_EQ(build_status(wrap_overlap, cell, pbc, 4.0), CGQ_STATUS_BAD_INPUT);
    EXPECT_EQ(build_status(wrap_overlap, cell, nopbc, 4.0), CGQ_STATUS_OK);

    std::vector<double> ok = {0, 0, 0, 1, 1, 1};
    double singular[9] = {5, 0, 0, 0, 5, 0, 5, 5, 0};
    EXPECT_EQ(build_status(ok, singular, pbc, 4.0), CGQ_STATUS_BAD_INPUT);
    EXPECT_NE(std::string(cgq_last_error()).find("degenerate"), std::string::npos) << cgq_last_error();
    int32_t slab[3] = {1, 1, 0};
    EXPECT_EQ(build_status(ok, singular, slab, 4.0), CGQ_STATUS_OK); // a, b fine, c unused
    double zero_cell[9] = {0};
    EXPECT_EQ(build_status(ok, zero_cell, slab, 4.0), CGQ_STATUS_BAD_INPUT);
    EXPECT_EQ(build_status(ok, zero_cell, nopbc, 4.0), CGQ_STATUS_OK);
    double nan_cell[9] = {5, 0, 0, 0, NAN, 0, 0, 0, 5};
    EXPECT_EQ(build_status(ok, nan_cell, pbc, 4.0), CGQ_STATUS_BAD_INPUT);

    EXPECT_EQ(build_status(ok, cell, pbc, 0.0), CGQ_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(build_status(ok, cell, pbc, -1.0), CGQ_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(build_status(ok, cell, pbc, NAN), CGQ_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(cgq_neighbor_list_build(nullptr, 2, ok.data(), cell, pbc, 4.0), CGQ_STATUS_INVALID_ARGUMENT);

    // A list that fails after a successful build is left empty (and still usable).
    cgq_neighbor_list nl;
    std::memset(&nl, 0, sizeof nl);
    ASSERT_EQ(cgq_neighbor_list_build(&nl, 2, ok.data(), cell, pbc, 4.0), CGQ_STATUS_OK);
    EXPECT_GT(nl.n_edges, 0);
    EXPECT_EQ(cgq_neighbor_list_build(&nl, 4, overlap.data(), cell, pbc, 4.0), CGQ_STATUS_BAD_INPUT);
    EXPECT_EQ(nl.n_edges, 0);
    EXPECT_EQ(nl.n_nodes, 0);
    EXPECT_EQ(nl.row_ptr[0], 0);
    ASSERT_EQ(cgq_neighbor_list_build(&nl, 2, ok.data(), cell, pbc, 4.0), CGQ_STATUS_OK);
    cgq_neighbor_list_free(&nl);
}

// cgq_sender_index: the edges grouped by sender, each row in increasing edge order (the stable sort's), for any
// thread count (large graphs are sorted by several threads, each placing a chunk of the edges).
TEST(SenderIndex, IsTheStableSortForAnyThreadCount) {
    std::mt19937_64 rng(7);
    const int max_threads = omp_get_max_threads ? omp_get_max_threads() : 1;
    const std::vector<std::pair<int64_t, int64_t>> shapes = {
        {1, 0}, {5, 17}, {5185, 354942}, {100, 200000}, {200000, 300000}, {3, 70000}};
    for (const auto &[n_nodes, n_edges] : shapes) {
        std::uniform_int_distribution<int32_t> pick(0, (int32_t)n_nodes - 1);
        std::vector<int32_t> sender(n_edges);
        for (int32_t &s : sender) s = pick(rng);
        if (n_nodes > 4) // one sender with no edge
            for (int32_t &s : sender) s = s == 4 ? 3 : s;
        std::vector<int64_t> want_row(n_nodes + 1, 0);
        for (int32_t s : sender) want_row[s + 1]++;
        for (int64_t i = 0; i < n_nodes; i++) want_row[i + 1] += want_row[i];
        std::vector<int32_t> want_edge(n_edges);
        std::vector<int64_t> at(want_row.begin(), want_row.end() - 1);
        for (int64_t e = 0; e < n_edges; e++) want_edge[at[sender[e]]++] = (int32_t)e;
        for (int threads : {1, 2, 3, max_threads}) {
            if (omp_set_num_threads) omp_set_num_threads(threads);
            std::vector<int64_t> row(n_nodes + 1, -1);
            std::vector<int32_t> edge(n_edges + 1, -1);
            ASSERT_EQ(cgq_sender_index(sender.data(), n_edges, n_nodes, row.data(), edge.data()), CGQ_STATUS_OK);
            edge.resize(n_edges);
            EXPECT_EQ(row, want_row) << n_nodes << " senders, " << n_edges << " edges, " << threads << " threads";
            EXPECT_EQ(edge, want_edge) << n_nodes << " senders, " << n_edges << " edges, " << threads << " threads";
        }
        if (omp_set_num_threads) omp_set_num_threads(max_threads);
    }
}

} // namespace
