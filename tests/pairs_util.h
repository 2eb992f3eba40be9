// pairs_util.h: a structure as LAMMPS hands it over: local atoms plus periodic-image copies as points, and
// candidate pairs within cutoff + skin (cgq_evaluator_set_pairs / cgq_evaluate_pairs tests).
#pragma once

#include <algorithm>
#include <map>
#include <tuple>

#include "test_util.h"

extern "C" {
#include "graph/neighbor.h"
}

namespace cgqtest {

struct Points {
    int64_t n = 0;                    // local atoms
    std::vector<int32_t> owner;       // atom of each point (itself for the local ones)
    std::vector<int32_t> shift;       // image shift of each point [n_points*3]
    std::vector<int64_t> row_ptr;     // candidates per local atom
    std::vector<int32_t> candidate;   // point of each candidate
    std::vector<int32_t> species;     // per point
    std::vector<int64_t> ids;         // 1-based ids, as LAMMPS tags
    int64_t n_points() const { return (int64_t)owner.size(); }
    // positions of every point for atom positions pos (images moved with their atoms)
    std::vector<double> positions(const std::vector<double> &pos, const std::vector<double> &cell) const {
        std::vector<double> x(3 * owner.size());
        for (size_t k = 0; k < owner.size(); k++)
            for (int d = 0; d < 3; d++) {
                double v = pos[3 * owner[k] + d];
                for (int a = 0; a < 3; a++) v += shift[3 * k + a] * cell[3 * a + d];
                x[3 * k + d] = v;
            }
        return x;
    }
};

// How the copies among the points become graph nodes: all folded onto their atoms (one rank), each its own ghost node,
// or mixed (every other copy a ghost node, the others folded: as a rank folds images of its own atoms and keeps
// other ranks' atoms as ghost nodes)
enum class Nodes { folded, ghosted, mixed };
inline const char *nodes_name(Nodes m) { return m == Nodes::folded ? " folded" : m == Nodes::ghosted ? " ghosted" : " mixed"; }
constexpr Nodes kAllNodes[] = {Nodes::folded, Nodes::ghosted, Nodes::mixed};

struct NodeMap {
    int64_t n_local = 0;
    bool rows_form = false;          // exchange in cgq_exchange's rows form (the mixed map) or its array form
    std::vector<int32_t> point_node; // per point
    std::vector<int32_t> species;    // per node
    std::vector<int32_t> owner;      // per node: the atom it is (local) or copies (ghost)
    int64_t n_nodes() const { return (int64_t)owner.size(); }
};

inline NodeMap node_map(const Points &p, Nodes mode) {
    NodeMap m;
    m.n_local = p.n;
    m.rows_form = mode == Nodes::mixed;
    for (int64_t k = 0; k < p.n_points(); k++) {
        const bool own = k < p.n || mode == Nodes::ghosted || (mode == Nodes::mixed && (k - p.n) % 2 == 1);
        m.point_node.push_back(own ? (int32_t)m.owner.size() : p.owner[k]);
        if (own) m.owner.push_back(p.owner[k]), m.species.push_back(p.species[k]);
    }
    return m;
}

inline cgq_pair_list pair_list(const Points &p, const NodeMap &m) {
    return cgq_pair_list{p.n_points(), p.n, m.n_nodes(), m.species.data(), p.row_ptr.data(), p.candidate.data(),
                         m.point_node.data(), p.ids.data()};
}

// The points of p as cgq_evaluator_build_pairs takes them (m and x kept alive by the caller)
inline cgq_point_set point_set(const Points &p, const NodeMap &m, const std::vector<double> &x) {
    return cgq_point_set{p.n_points(), p.n, m.n_nodes(), m.species.data(), m.point_node.data(), p.ids.data(), x.data()};
}

inline Points make_points(const cgq_model *m, const Case &c, double skin) {
    Points p;
    p.n = (int64_t)c.Z.size();
    cgq_neighbor_list nl{};
    EXPECT_EQ(cgq_neighbor_list_build(&nl, p.n, c.pos.data(), c.cell.data(), c.pbc.data(), cgq_model_cutoff(m) + skin),
              CGQ_STATUS_OK);
    for (int64_t i = 0; i < p.n; i++) p.owner.push_back((int32_t)i), p.shift.insert(p.shift.end(), {0, 0, 0});
    std::map<std::tuple<int, int, int, int>, int32_t> image;
    p.row_ptr.assign(1, 0);
    for (int64_t i = 0; i < p.n; i++) {
        for (int64_t e = nl.row_ptr[i]; e < nl.row_ptr[i + 1]; e++) {
            const int32_t *S = nl.shift + 3 * e, s = nl.sender[e];
            if (!S[0] && !S[1] && !S[2]) {
                p.candidate.push_back(s);
                continue;
            }
            auto key = std::make_tuple((int)s, S[0], S[1], S[2]);
            auto it = image.find(key);
            if (it == image.end()) {
                it = image.emplace(key, (int32_t)p.owner.size()).first;
                p.owner.push_back(s);
                p.shift.insert(p.shift.end(), {S[0], S[1], S[2]});
            }
            p.candidate.push_back(it->second);
        }
        p.row_ptr.push_back((int64_t)p.candidate.size());
    }
    cgq_neighbor_list_free(&nl);
    for (int32_t o : p.owner) p.species.push_back(cgq_model_species_index(m, c.Z[o]));
    for (size_t k = 0; k < p.owner.size(); k++) p.ids.push_back((int64_t)k + 1);
    return p;
}

// Ghost node g (n_local <= g < owner.size()) is a copy of local node owner[g]: exchange copies owner rows to ghosts
// and sums back (calls counted), in either of cgq_exchange's forms. As across ranks, only the owners' rows are read
// forward and only the ghosts' backward.
// A host staging buffer for cgq_exchange.stage_rows that lives as long as the process (a GPU evaluator pins the buffer
// it is given until it is freed or given another); in: the one for the rows that come in (stage_rows_in)
inline void *test_stage(size_t bytes, size_t *capacity, bool in) {
    static std::vector<char> *buf[2] = {new std::vector<char>((size_t)16 << 20),
                                        new std::vector<char>((size_t)16 << 20)}; // never freed
    if (bytes > buf[in]->size()) return nullptr;
    *capacity = buf[in]->size();
    return buf[in]->data();
}

struct GhostExchange {
    int64_t n_local;
    const std::vector<int32_t> *owner;
    int forward_calls = 0, reverse_calls = 0;
    int float_calls = 0;  // of which through the float rows (forward_rows_f32, reverse_rows_f32)
    int staged_calls = 0;    // of which handed their rows over in the staging (stage_rows)
    int staged_in_calls = 0; // of which took their rows in the staging (stage_rows_in)
    void *staged = nullptr, *staged_in = nullptr;
    std::vector<int32_t> send_nodes; // rows form: the ghosts' owners, distinct, increasing
    std::vector<int32_t> send_pos;   // rows form: per ghost row, its owner's position in send_nodes

    int64_t n_ghosts() const { return (int64_t)owner->size() - n_local; }
    int32_t owner_of_ghost(int64_t k) const { return (*owner)[n_local + k]; }

    cgq_exchange array_form() { return cgq_exchange{this, fwd, rev, nullptr, 0, nullptr, nullptr}; }
    // float_rows: with forward_rows_f32 and reverse_rows_f32 too (used by float32 evaluators); stage: with stage_rows
    cgq_exchange rows_form(bool float_rows = false, bool stage = false) {
        send_nodes.clear(), send_pos.clear();
        for (int64_t k = 0; k < n_ghosts(); k++) send_nodes.push_back(owner_of_ghost(k));
        std::sort(send_nodes.begin(), send_nodes.end());
        send_nodes.erase(std::unique(send_nodes.begin(), send_nodes.end()), send_nodes.end());
        for (int64_t k = 0; k < n_ghosts(); k++)
            send_pos.push_back((int32_t)(std::lower_bound(send_nodes.begin(), send_nodes.end(), owner_of_ghost(k)) -
                                         send_nodes.begin()));
        cgq_exchange xc{this, nullptr, nullptr, send_nodes.data(), (int64_t)send_nodes.size(), fwd_rows<double>,
                        rev_rows<double>};
        if (float_rows) xc.forward_rows_f32 = fwd_rows<float>, xc.reverse_rows_f32 = rev_rows<float>;
        if (stage) xc.stage_rows = stage_rows, xc.stage_rows_in = stage_rows_in;
        return xc;
    }
    static void *stage_rows(void *ctx, size_t bytes, size_t *capacity) {
        GhostExchange *x = static_cast<GhostExchange *>(ctx);
        return x->staged = test_stage(bytes, capacity, false);
    }
    static void *stage_rows_in(void *ctx, size_t bytes, size_t *capacity) {
        GhostExchange *x = static_cast<GhostExchange *>(ctx);
        return x->staged_in = test_stage(bytes, capacity, true);
    }

    static cgq_status fwd(void *ctx, double *data, int width) {
        GhostExchange *x = static_cast<GhostExchange *>(ctx);
        x->forward_calls++;
        for (int64_t g = x->n_local; g < (int64_t)x->owner->size(); g++)
            for (int k = 0; k < width; k++) data[g * width + k] = data[(int64_t)(*x->owner)[g] * width + k];
        return CGQ_STATUS_OK;
    }
    static cgq_status rev(void *ctx, double *data, int width) {
        GhostExchange *x = static_cast<GhostExchange *>(ctx);
        x->reverse_calls++;
        for (int64_t g = x->n_local; g < (int64_t)x->owner->size(); g++)
            for (int k = 0; k < width; k++) {
                data[(int64_t)(*x->owner)[g] * width + k] += data[g * width + k];
                data[g * width + k] = 0.0;
            }
        return CGQ_STATUS_OK;
    }
    template <class T>
    static cgq_status fwd_rows(void *ctx, const T *send, T *ghosts, int width) {
        GhostExchange *x = static_cast<GhostExchange *>(ctx);
        x->forward_calls++;
        x->float_calls += sizeof(T) == sizeof(float);
        x->staged_calls += x->staged && (const void *)send == x->staged;
        x->staged_in_calls += x->staged_in && (void *)ghosts == x->staged_in;
        for (int64_t k = 0; k < x->n_ghosts(); k++)
            for (int c = 0; c < width; c++) ghosts[k * width + c] = send[(int64_t)x->send_pos[k] * width + c];
        return CGQ_STATUS_OK;
    }
    template <class T>
    static cgq_status rev_rows(void *ctx, const T *ghosts, T *sums, int width) {
        GhostExchange *x = static_cast<GhostExchange *>(ctx);
        x->reverse_calls++;
        x->float_calls += sizeof(T) == sizeof(float);
        x->staged_calls += x->staged && (const void *)ghosts == x->staged;
        x->staged_in_calls += x->staged_in && (void *)sums == x->staged_in;
        std::fill(sums, sums + x->send_nodes.size() * width, T(0));
        for (int64_t k = 0; k < x->n_ghosts(); k++)
            for (int c = 0; c < width; c++) sums[(int64_t)x->send_pos[k] * width + c] += ghosts[k * width + c];
        return CGQ_STATUS_OK;
    }
};

// cgq_evaluate_pairs as an Eval of the local atoms (ghost rows summed into their owners; virials symmetrised
// like cgq_evaluate_system's). The mixed map's rows form offers float rows and a staging buffer unless float_rows is
// false; calls, if given, receives the exchange's counts.
struct ExchangeCalls {
    int all = 0, in_float = 0, staged = 0, staged_in = 0;
};
inline Eval evaluate_pairs(cgq_evaluator *ev, const Points &p, const NodeMap &m, const std::vector<double> &x,
                           bool float_rows = true, ExchangeCalls *calls = nullptr) {
    const int64_t nn = m.n_nodes();
    const bool ghosts = nn > p.n;
    std::vector<double> f(3 * nn + 3), w(9 * nn + 9);
    Eval r{};
    r.atomic_energies.resize(p.n + 1);
    cgq_node_result res{};
    res.forces = f.data(), res.node_energies = r.atomic_energies.data(), res.node_virials = w.data();
    GhostExchange gx{p.n, &m.owner};
    // the mixed map (as a rank with other ranks' atoms) through the rows form, as the pair style gives it
    const cgq_exchange xc = m.rows_form ? gx.rows_form(float_rows, float_rows) : gx.array_form();
    r.status = cgq_evaluate_pairs(ev, x.data(), ghosts ? &xc : nullptr, &res);
    if (calls)
        calls->all = gx.forward_calls + gx.reverse_calls, calls->in_float = gx.float_calls,
        calls->staged = gx.staged_calls, calls->staged_in = gx.staged_in_calls;
    r.energy = res.energy;
    if (ghosts) {
        GhostExchange::rev(&gx, f.data(), 3);
        GhostExchange::rev(&gx, w.data(), 9);
    }
    r.forces.assign(f.begin(), f.begin() + 3 * p.n);
    r.atomic_virials.resize(9 * p.n);
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            r.virial[3 * a + b] = 0.5 * (res.virial[3 * a + b] + res.virial[3 * b + a]);
            for (int64_t i = 0; i < p.n; i++)
                r.atomic_virials[9 * i + 3 * a + b] = 0.5 * (w[9 * i + 3 * a + b] + w[9 * i + 3 * b + a]);
        }
    return r;
}

// cgq_evaluate_pairs's input errors, on an evaluator made with params: each names the atoms (ids) and the fix (the GPU
// finds them on the device: a non-finite position, atoms on top of each other, a copy without a graph node).
inline void expect_clear_pair_errors(const cgq_evaluator_params &params) {
    const std::string path = std::string(CGQ_POTENTIALS_DIR) + "/water-mace-small.h5";
    Model model(path);
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    Evaluator ev(model.m, params);
    ASSERT_NE(ev.e, nullptr) << cgq_last_error();
    Case c;
    for (const Case &k : read_cases(path))
        if (k.pbc[0]) c = k; // a periodic structure (copies of atoms among the points)
    ASSERT_FALSE(c.Z.empty());
    Points p = make_points(model.m, c, 1.0);
    cgq_node_result r{};
    std::vector<double> x = p.positions(c.pos, c.cell);
    EXPECT_EQ(cgq_evaluate_pairs(ev.e, x.data(), nullptr, &r), CGQ_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(cgq_last_error()).find("cgq_evaluator_set_pairs first"), std::string::npos) << cgq_last_error();
    NodeMap nm = node_map(p, Nodes::folded);
    std::vector<int32_t> &pn = nm.point_node;
    cgq_pair_list l = pair_list(p, nm);
    ASSERT_EQ(cgq_evaluator_set_pairs(ev.e, &l), CGQ_STATUS_OK);
    // a non-finite position names the atom id
    std::vector<double> bad = x;
    bad[3 * 5 + 1] = NAN;
    EXPECT_EQ(cgq_evaluate_pairs(ev.e, bad.data(), nullptr, &r), CGQ_STATUS_BAD_INPUT);
    EXPECT_NE(std::string(cgq_last_error()).find("atom 6 has a non-finite position"), std::string::npos) << cgq_last_error();
    // two atoms on top of each other
    bad = x;
    const int32_t j = p.candidate[p.row_ptr[3]];
    for (int d = 0; d < 3; d++) bad[3 * j + d] = bad[3 * 3 + d];
    EXPECT_EQ(cgq_evaluate_pairs(ev.e, bad.data(), nullptr, &r), CGQ_STATUS_BAD_INPUT);
    EXPECT_NE(std::string(cgq_last_error()).find("closer than 1e-8"), std::string::npos) << cgq_last_error();
    // a copy within the cutoff without a graph node
    int32_t img = -1, rcv = -1;
    for (int64_t i = 0; i < p.n && img < 0; i++)
        for (int64_t k = p.row_ptr[i]; k < p.row_ptr[i + 1] && img < 0; k++)
            if (p.candidate[k] >= p.n) img = p.candidate[k], rcv = (int32_t)i;
    ASSERT_GE(img, 0);
    pn[img] = -1;
    ASSERT_EQ(cgq_evaluator_set_pairs(ev.e, &l), CGQ_STATUS_OK);
    std::vector<double> close = x; // the receiver moved to 2 A from that copy
    double dv[3], r2 = 0;
    for (int d = 0; d < 3; d++) dv[d] = x[3 * img + d] - x[3 * rcv + d], r2 += dv[d] * dv[d];
    for (int d = 0; d < 3; d++) close[3 * rcv + d] = x[3 * img + d] - 2.0 * dv[d] / std::sqrt(r2);
    EXPECT_EQ(cgq_evaluate_pairs(ev.e, close.data(), nullptr, &r), CGQ_STATUS_BAD_INPUT);
    EXPECT_NE(std::string(cgq_last_error()).find("has no graph node"), std::string::npos) << cgq_last_error();
    // malformed lists
    pn[img] = p.owner[img];
    std::vector<int32_t> cand = p.candidate;
    cand[0] = 0; // receiver 0 as its own candidate
    l.candidate = cand.data();
    EXPECT_EQ(cgq_evaluator_set_pairs(ev.e, &l), CGQ_STATUS_INVALID_ARGUMENT);
    l.candidate = p.candidate.data();
    pn[1] = 0; // a local point mapped to another node
    EXPECT_EQ(cgq_evaluator_set_pairs(ev.e, &l), CGQ_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(cgq_last_error()).find("local points map to themselves"), std::string::npos) << cgq_last_error();
    // cgq_evaluator_build_pairs (on the GPU where the evaluator runs pairs there): the same checks of the points
    const double radius = cgq_model_cutoff(model.m) + 1.0;
    nm = node_map(p, Nodes::folded);
    cgq_point_set pts = point_set(p, nm, x);
    EXPECT_EQ(cgq_evaluator_build_pairs(ev.e, &pts, 0.0), CGQ_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(cgq_last_error()).find("radius = 0 must be a positive distance"), std::string::npos)
        << cgq_last_error();
    EXPECT_EQ(cgq_evaluate_pairs(ev.e, x.data(), nullptr, &r), CGQ_STATUS_INVALID_ARGUMENT); // no list after a failure
    bad = x;
    bad[3 * 5 + 1] = NAN;
    pts.positions = bad.data();
    EXPECT_EQ(cgq_evaluator_build_pairs(ev.e, &pts, radius), CGQ_STATUS_BAD_INPUT);
    EXPECT_NE(std::string(cgq_last_error()).find("atom 6 has a non-finite position"), std::string::npos) << cgq_last_error();
    bad = x;
    for (int d = 0; d < 3; d++) bad[3 * j + d] = bad[3 * 3 + d];
    EXPECT_EQ(cgq_evaluator_build_pairs(ev.e, &pts, radius), CGQ_STATUS_BAD_INPUT);
    for (const char *part : {"overlap", "closer than 1e-08 A", "remove duplicate atoms", "4 at ("})
        EXPECT_NE(std::string(cgq_last_error()).find(part), std::string::npos) << part << ": " << cgq_last_error();
    bad = x;
    bad[3 * 2] = 1e300, bad[3 * 7] = -1e300; // finite, but no cell list spans them
    EXPECT_EQ(cgq_evaluator_build_pairs(ev.e, &pts, radius), CGQ_STATUS_BAD_INPUT);
    EXPECT_NE(std::string(cgq_last_error()).find("atoms 8 and 3 are 2e+300 A apart along x"), std::string::npos)
        << cgq_last_error();
    pts.positions = x.data();
    pts.n_local = pts.n_nodes = 0; // an empty domain: no receivers, no energy
    std::vector<int32_t> none(p.n_points(), -1);
    pts.point_node = none.data();
    ASSERT_EQ(cgq_evaluator_build_pairs(ev.e, &pts, radius), CGQ_STATUS_OK) << cgq_last_error();
    r.energy = 1.0;
    EXPECT_EQ(cgq_evaluate_pairs(ev.e, x.data(), nullptr, &r), CGQ_STATUS_OK) << cgq_last_error();
    EXPECT_EQ(r.energy, 0.0);
    pts = point_set(p, nm, x);
    pts.species = nullptr;
    EXPECT_EQ(cgq_evaluator_build_pairs(ev.e, &pts, radius), CGQ_STATUS_INVALID_ARGUMENT);
}

}  // namespace cgqtest
