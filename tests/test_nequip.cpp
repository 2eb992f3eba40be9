// test_nequip.cpp: NequIP-specific behaviour beyond the generic fixture tests (parity, physics, ghosts):
// backend selection, per-edge-type cutoffs, malformed NequIP groups, the command line.
#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"

using namespace cgqtest;

namespace {
std::string fixture(const char *name) { return std::string(CGQ_FIXTURE_DIR) + "/" + name + ".h5"; }

std::string tmp_path(const std::string &name) { return ::testing::TempDir() + "cgq_nequip_" + name; }

void copy_file(const std::string &from, const std::string &to) {
    std::ifstream in(from, std::ios::binary);
    std::ofstream out(to, std::ios::binary);
    out << in.rdbuf();
}

template <class F>
std::string modified(const char *name, F edit) {
    std::string p = tmp_path(name);
    copy_file(fixture("nequip_l2_noparity_4layer_pertype"), p);
    hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    edit(f);
    H5Fclose(f);
    return p;
}

cgq_status load_error(const std::string &p, const char *needle) {
    cgq_model *m = nullptr;
    cgq_status st = cgq_model_load(p.c_str(), &m);
    EXPECT_EQ(m, nullptr);
    EXPECT_NE(std::string(cgq_last_error()).find(needle), std::string::npos) << cgq_last_error();
    cgq_model_free(m);
    return st;
}

void write_ints(hid_t f, const char *path, std::vector<int32_t> v) {
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(d);
}
}  // namespace

// device auto keeps NequIP on the CPU (its GPU steps are slower at small sizes); device cuda runs it on the GPU
// in float64, and fp32 is refused with a reason.
TEST(Nequip, AutoPicksCpuCudaRunsFloat64) {
    Model model(fixture("nequip_l1_parity_2layer"));
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    char buf[4096];
    cgq_model_describe(model.m, buf, sizeof buf);
    EXPECT_NE(std::string(buf).find("family       nequip"), std::string::npos) << buf;
    cgq_evaluator_params p = cgq_evaluator_default_params();
    cgq_evaluator *e = nullptr;
    ASSERT_EQ(cgq_evaluator_create(model.m, &p, &e), CGQ_STATUS_OK) << cgq_last_error();
    EXPECT_STREQ(cgq_evaluator_backend(e), "cpu float64");
    cgq_evaluator_free(e);
    if (!cgq_gpu_count()) return;
    e = nullptr;
    p.device = CGQ_DEVICE_CUDA;
    ASSERT_EQ(cgq_evaluator_create(model.m, &p, &e), CGQ_STATUS_OK) << cgq_last_error();
    EXPECT_STREQ(cgq_evaluator_backend(e), "cuda:0 float64");
    cgq_evaluator_free(e);
    e = nullptr;
    p.precision = CGQ_PRECISION_FP32;
    EXPECT_EQ(cgq_evaluator_create(model.m, &p, &e), CGQ_STATUS_UNSUPPORTED);
    EXPECT_EQ(e, nullptr);
    EXPECT_NE(std::string(cgq_last_error()).find("fp64"), std::string::npos) << cgq_last_error();
}

// Two H atoms farther apart than the H-H cutoff (3.0 A) but within r_max (4.2 A): the graph has the
// edge, the model must ignore it: energies are the isolated-atom energies and forces vanish exactly.
TEST(Nequip, EdgesBeyondThePairCutoffContributeNothing) {
    Model model(fixture("nequip_l2_noparity_4layer_pertype"));
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    Evaluator ev(model.m);
    ASSERT_NE(ev.e, nullptr);
    Case c;
    c.Z = {1, 1};
    c.cell.assign(9, 0.0);
    c.pbc = {0, 0, 0};
    Case single;
    single.Z = {1};
    single.cell.assign(9, 0.0);
    single.pbc = {0, 0, 0};
    Eval one = evaluate(ev.e, single, {0, 0, 0});
    ASSERT_EQ(one.status, CGQ_STATUS_OK) << cgq_last_error();
    Eval far = evaluate(ev.e, c, {0, 0, 0, 3.4, 0.3, -0.2});
    ASSERT_EQ(far.status, CGQ_STATUS_OK) << cgq_last_error();
    EXPECT_EQ(far.energy, 2 * one.energy);
    for (int k = 0; k < 6; k++) EXPECT_EQ(far.forces[k], 0.0);
    Eval near = evaluate(ev.e, c, {0, 0, 0, 2.4, 0.3, -0.2});
    ASSERT_EQ(near.status, CGQ_STATUS_OK);
    EXPECT_NE(near.energy, 2 * one.energy);
    EXPECT_GT(std::fabs(near.forces[0]), 1e-8);
}

TEST(Nequip, MalformedGroupsAreReported) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    auto p = modified("missing.h5", [](hid_t f) { H5Ldelete(f, "/layers/1/gate/gated_gate", H5P_DEFAULT); });
    EXPECT_EQ(load_error(p, "gated_gate"), CGQ_STATUS_BAD_FILE);
    p = modified("index.h5", [](hid_t f) {
        hid_t d = H5Dopen2(f, "/layers/0/gate/scalar_src", H5P_DEFAULT);
        hid_t s = H5Dget_space(d);
        std::vector<int32_t> v(H5Sget_simple_extent_npoints(s), 0);
        v[0] = 100000;
        H5Sclose(s);
        H5Dclose(d);
        write_ints(f, "/layers/0/gate/scalar_src", v);
    });
    EXPECT_EQ(load_error(p, "scalar_src[0] = 100000"), CGQ_STATUS_BAD_FILE);
    p = modified("cutoff.h5", [](hid_t f) {
        hid_t d = H5Dopen2(f, "/radial/rmax_recip", H5P_DEFAULT);
        double v[4] = {0.1, 0.3, 0.3, 0.3};  // 10 A > r_max
        H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        H5Dclose(d);
    });
    EXPECT_EQ(load_error(p, "exceeds r_max"), CGQ_STATUS_BAD_FILE);
    p = modified("family.h5", [](hid_t f) {
        hid_t a = H5Aopen(f, "edge_vector", H5P_DEFAULT);
        hid_t t = H5Aget_type(a);
        const char *s = "x_receiver - x_sender";
        if (H5Tis_variable_str(t) > 0) {
            H5Awrite(a, t, &s);
        } else {
            std::vector<char> buf(H5Tget_size(t), 0);
            std::memcpy(buf.data(), s, std::min(buf.size(), std::strlen(s)));
            H5Awrite(a, t, buf.data());
        }
        H5Tclose(t);
        H5Aclose(a);
    });
    EXPECT_EQ(load_error(p, "edge convention"), CGQ_STATUS_UNSUPPORTED);
}

TEST(Nequip, CliInfoAndCheck) {
    for (const char *name : {"nequip_l3_parity_3layer_zbl", "nequip_l3_noparity_5layer_resnet"}) {
        for (const char *cmd : {"info", "check"}) {
            std::string out;
            EXPECT_EQ(run_cli(std::string(cmd) + " " + fixture(name), out), 0) << out;
            EXPECT_NE(out.find(std::string(cmd) == "info" ? "nequip" : "check passed"), std::string::npos) << out;
        }
    }
}
