// test_ghosts.cpp: message passing with ghost nodes and per-layer exchange (how LAMMPS runs across
// MPI ranks) gives the same energy and edge gradients as the folded single-domain graph.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "pairs_util.h"

using namespace cgqtest;

TEST(Ghosts, ExchangeMatchesFoldedGraph) {
    int checked = 0, exchanged_array = 0, exchanged_rows = 0; // models of one layer exchange nothing
    for (const std::string &path : fixture_files()) {
        Model model(path);
        ASSERT_NE(model.m, nullptr) << cgq_last_error();
        Evaluator ev(model.m);
        for (const Case &c : read_cases(path)) {
            if (!(c.pbc[0] || c.pbc[1] || c.pbc[2])) continue;
            const int64_t n = (int64_t)c.Z.size();
            cgq_neighbor_list nl{};
            ASSERT_EQ(cgq_neighbor_list_build(&nl, n, c.pos.data(), c.cell.data(), c.pbc.data(), cgq_model_cutoff(model.m)),
                      CGQ_STATUS_OK);
            std::vector<int32_t> species(n);
            for (int64_t i = 0; i < n; i++) species[i] = cgq_model_species_index(model.m, c.Z[i]);
            cgq_graph folded{n, n, nl.n_edges, species.data(), nl.row_ptr, nl.sender, nl.vec};
            double e0 = 0;
            std::vector<double> ge0(3 * nl.n_edges + 3), ae0(n + 1);
            ASSERT_EQ(cgq_evaluate_graph(ev.e, &folded, nullptr, &e0, ae0.data(), ge0.data()), CGQ_STATUS_OK);

            // unfold: every (sender, shift != 0) becomes its own ghost node
            Points im; /* owner of every node; the exchange below reads it */
            im.n = n;
            for (int64_t i = 0; i < n; i++) im.owner.push_back((int32_t)i);
            std::map<std::tuple<int, int, int, int>, int32_t> ghost_of;
            std::vector<int32_t> sender(nl.n_edges), gspecies(species);
            for (int64_t e = 0; e < nl.n_edges; e++) {
                const int32_t *S = nl.shift + 3 * e;
                if (!S[0] && !S[1] && !S[2]) {
                    sender[e] = nl.sender[e];
                    continue;
                }
                auto key = std::make_tuple((int)nl.sender[e], S[0], S[1], S[2]);
                auto it = ghost_of.find(key);
                if (it == ghost_of.end()) {
                    it = ghost_of.emplace(key, (int32_t)im.owner.size()).first;
                    im.owner.push_back(nl.sender[e]);
                    gspecies.push_back(species[nl.sender[e]]);
                }
                sender[e] = it->second;
            }
            cgq_graph ghosted{(int64_t)im.owner.size(), n, nl.n_edges, gspecies.data(), nl.row_ptr, sender.data(), nl.vec};
            for (int form : {0, 1, 2}) { // cgq_exchange's array form, its rows form (with float rows), and staged
                const bool rows = form > 0;
                GhostExchange gx{n, &im.owner};
                const cgq_exchange xc = rows ? gx.rows_form(true, form == 2) : gx.array_form();
                double e1 = 0;
                std::vector<double> ge1(3 * nl.n_edges + 3), ae1(n + 1);
                ASSERT_EQ(cgq_evaluate_graph(ev.e, &ghosted, &xc, &e1, ae1.data(), ge1.data()), CGQ_STATUS_OK)
                    << cgq_last_error();
                // one forward exchange per layer after the first, one reverse per layer after the first
                EXPECT_EQ(gx.forward_calls, gx.reverse_calls);
                EXPECT_EQ(gx.float_calls, 0) << "a float64 evaluator took the float rows";
                EXPECT_EQ(gx.staged_calls, form == 2 ? gx.forward_calls + gx.reverse_calls : 0);
                EXPECT_EQ(gx.staged_in_calls, gx.staged_calls);
                (rows ? exchanged_rows : exchanged_array) += gx.forward_calls;
                const std::string what = path + " " + c.name + (form == 2 ? " staged rows" : rows ? " rows form" : " array form");
                EXPECT_NEAR(e1, e0, 1e-12 * std::fabs(e0)) << what;
                EXPECT_LE(max_abs_diff(ae1.data(), ae0.data(), n), 1e-12 * std::fmax(max_abs(ae0), 1.0)) << what;
                EXPECT_LE(max_abs_diff(ge1.data(), ge0.data(), 3 * nl.n_edges), 1e-12 * std::fmax(max_abs(ge0), 1.0))
                    << what;
            }
            cgq_neighbor_list_free(&nl);
            checked++;
        }
    }
    EXPECT_GT(checked, 0);
    EXPECT_GT(exchanged_array, 0);
    EXPECT_GT(exchanged_rows, 0);
}

// An exchange that cannot serve the graph is refused with a message naming what is wrong, before any layer runs
TEST(Ghosts, BadExchangeIsRefused) {
    const std::string path = std::string(CGQ_POTENTIALS_DIR) + "/water-mace-small.h5";
    Model model(path);
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    Evaluator ev(model.m);
    // three local nodes and one ghost node (a copy of node 0) 1 A from node 1
    const std::vector<int32_t> species = {0, 1, 1, 0}, owner = {0, 1, 2, 0};
    const std::vector<int64_t> row_ptr = {0, 0, 1, 1};
    const std::vector<int32_t> sender = {3};
    const std::vector<double> vec = {1.0, 0.0, 0.0};
    cgq_graph g{4, 3, 1, species.data(), row_ptr.data(), sender.data(), vec.data()};
    double e = 0;
    GhostExchange gx{3, &owner};
    auto refused = [&](const cgq_exchange *xc, const char *says) {
        EXPECT_EQ(cgq_evaluate_graph(ev.e, &g, xc, &e, nullptr, nullptr), CGQ_STATUS_INVALID_ARGUMENT) << says;
        EXPECT_NE(std::string(cgq_last_error()).find(says), std::string::npos) << cgq_last_error();
    };
    refused(nullptr, "needs an exchange");
    cgq_exchange half = gx.array_form();
    half.reverse = nullptr;
    refused(&half, "forward and reverse, or forward_rows and reverse_rows");
    cgq_exchange rows = gx.rows_form();
    rows.reverse_rows = nullptr;
    refused(&rows, "forward_rows without reverse_rows");
    const std::vector<int32_t> repeated = {0, 0}, outside = {3}, negative = {-1};
    rows = gx.rows_form();
    rows.send_nodes = repeated.data(), rows.n_send = 2;
    refused(&rows, "is repeated");
    rows.send_nodes = outside.data(), rows.n_send = 1;
    refused(&rows, "is not a local node");
    rows.send_nodes = negative.data();
    refused(&rows, "is not a local node");
    rows.n_send = 4;
    refused(&rows, "at most the 3 local nodes");
    rows = gx.rows_form(true);
    rows.reverse_rows_f32 = nullptr;
    refused(&rows, "give both or neither");
    cgq_exchange floats_alone = gx.rows_form(true);
    floats_alone.forward_rows = nullptr, floats_alone.reverse_rows = nullptr;
    refused(&floats_alone, "need the rows form too");
    EXPECT_EQ(cgq_evaluator_precision(ev.e), CGQ_PRECISION_FP64); // so it never takes the float rows
    EXPECT_EQ(gx.forward_calls + gx.reverse_calls, 0);
    rows = gx.rows_form();
    EXPECT_EQ(cgq_evaluate_graph(ev.e, &g, &rows, &e, nullptr, nullptr), CGQ_STATUS_OK) << cgq_last_error();
    EXPECT_TRUE(std::isfinite(e));
}
