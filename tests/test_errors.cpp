// test_errors.cpp: bad model files and bad structures give a clear status and message, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sys/wait.h>

#include "test_util.h"

using namespace cgqtest;

namespace {

std::string any_fixture() { return std::string(CGQ_POTENTIALS_DIR) + "/mace01-solvent.h5"; }

std::string tmp_path(const char *name) { return std::string(::testing::TempDir()) + "cgq_" + name; }

void copy_file(const std::string &from, const std::string &to, long max_bytes = -1) {
    std::ifstream in(from, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (max_bytes >= 0) data.resize((size_t)max_bytes);
    std::ofstream(to, std::ios::binary) << data;
}

// Loads path and returns the status; the message must be non-empty and mention `expect`.
cgq_status load_expect_error(const std::string &path, const char *expect) {
    cgq_model *m = nullptr;
    cgq_status st = cgq_model_load(path.c_str(), &m);
    EXPECT_EQ(m, nullptr);
    EXPECT_NE(std::string(cgq_last_error()).find(expect), std::string::npos)
        << "message was: " << cgq_last_error();
    cgq_model_free(m);
    return st;
}

// Copy of a fixture modified through the HDF5 API.
template <class F>
std::string modified_fixture(const char *name, F edit) {
    std::string p = tmp_path(name);
    copy_file(any_fixture(), p);
    hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    edit(f);
    H5Fclose(f);
    return p;
}

}  // namespace

class Errors : public ::testing::Test {
  protected:
    void SetUp() override {
        if (any_fixture().empty()) GTEST_SKIP() << "no fixtures";
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    }
};

TEST_F(Errors, MissingFile) {
    EXPECT_EQ(load_expect_error("/nonexistent/model.h5", "cannot open"), CGQ_STATUS_BAD_FILE);
}

TEST_F(Errors, NotHdf5) {
    std::string p = tmp_path("text.h5");
    std::ofstream(p) << "this is not a model\n";
    EXPECT_EQ(load_expect_error(p, "not an HDF5 file"), CGQ_STATUS_BAD_FILE);
}

TEST_F(Errors, TruncatedFileEveryLength) {
    std::ifstream in(any_fixture(), std::ios::binary | std::ios::ate);
    const long size = (long)in.tellg();
    for (long cut : {0L, 8L, 512L, 4096L, size / 3, size / 2, size - 100, size - 1}) {
        std::string p = tmp_path("truncated.h5");
        copy_file(any_fixture(), p, cut);
        cgq_model *m = nullptr;
        cgq_status st = cgq_model_load(p.c_str(), &m);
        EXPECT_NE(st, CGQ_STATUS_OK) << "cut at " << cut;
        EXPECT_GT(std::strlen(cgq_last_error()), 0u);
        cgq_model_free(m);
    }
}

TEST_F(Errors, WrongFormatVersion) {
    auto p = modified_fixture("version.h5", [](hid_t f) {
        H5Adelete(f, "format_version");
        hid_t sp = H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate2(f, "format_version", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT);
        int v = 99;
        H5Awrite(a, H5T_NATIVE_INT, &v);
        H5Aclose(a);
        H5Sclose(sp);
    });
    EXPECT_EQ(load_expect_error(p, "format version 99"), CGQ_STATUS_BAD_FILE);
}

TEST_F(Errors, MissingDataset) {
    auto p = modified_fixture("missing.h5", [](hid_t f) { H5Ldelete(f, "/layers/0/interaction/linear/weight", H5P_DEFAULT); });
    EXPECT_EQ(load_expect_error(p, "/layers/0/interaction/linear/weight is missing"), CGQ_STATUS_BAD_FILE);
}

TEST_F(Errors, WrongShape) {
    auto p = modified_fixture("shape.h5", [](hid_t f) {
        H5Ldelete(f, "/layers/0/interaction/linear_up/weight", H5P_DEFAULT);
        hsize_t n = 7;
        hid_t sp = H5Screate_simple(1, &n, nullptr);
        hid_t d = H5Dcreate2(f, "/layers/0/interaction/linear_up/weight", H5T_NATIVE_DOUBLE, sp, H5P_DEFAULT, H5P_DEFAULT,
                             H5P_DEFAULT);
        double v[7] = {0};
        H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        H5Dclose(d);
        H5Sclose(sp);
    });
    EXPECT_EQ(load_expect_error(p, "linear_up/weight has shape [7]"), CGQ_STATUS_BAD_FILE);
}

TEST_F(Errors, NonFiniteWeight) {
    auto p = modified_fixture("nan.h5", [](hid_t f) {
        hid_t d = H5Dopen2(f, "/layers/0/interaction/linear_up/weight", H5P_DEFAULT);
        hid_t sp = H5Dget_space(d);
        hsize_t start = 3, count = 1;
        H5Sselect_hyperslab(sp, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
        hid_t msp = H5Screate_simple(1, &count, nullptr);
        double v = NAN;
        H5Dwrite(d, H5T_NATIVE_DOUBLE, msp, sp, H5P_DEFAULT, &v);
        H5Sclose(msp);
        H5Sclose(sp);
        H5Dclose(d);
    });
    EXPECT_EQ(load_expect_error(p, "non-finite value at index 3"), CGQ_STATUS_BAD_FILE);
}

class InputErrors : public Errors {
  protected:
    void SetUp() override {
        Errors::SetUp();
        if (IsSkipped()) return;
        model = std::make_unique<Model>(any_fixture());
        ASSERT_NE(model->m, nullptr) << cgq_last_error();
        ev = std::make_unique<Evaluator>(model->m);
        Z0 = cgq_model_species_z(model->m, 0);
    }
    cgq_status eval(std::vector<int32_t> Z, std::vector<double> pos, bool periodic = false) {
        cgq_system s{};
        s.n_atoms = (int64_t)Z.size();
        s.positions = pos.data();
        s.atomic_numbers = Z.data();
        if (periodic) {
            s.cell[0] = s.cell[4] = s.cell[8] = 10.0;
            s.pbc[0] = s.pbc[1] = s.pbc[2] = 1;
        }
        std::vector<double> f(3 * Z.size() + 1);
        cgq_result r{};
        r.forces = f.data();
        cgq_status st = cgq_evaluate_system(ev->e, &s, &r);
        energy = r.energy;
        return st;
    }
    std::unique_ptr<Model> model;
    std::unique_ptr<Evaluator> ev;
    int32_t Z0 = 1;
    double energy = 0;
};

TEST_F(InputErrors, SpeciesNotInModel) {
    EXPECT_EQ(eval({Z0, 92}, {0, 0, 0, 1.5, 0, 0}), CGQ_STATUS_BAD_INPUT);
    EXPECT_NE(std::string(cgq_last_error()).find("atomic number 92"), std::string::npos) << cgq_last_error();
}

TEST_F(InputErrors, NonFinitePositions) {
    EXPECT_EQ(eval({Z0, Z0}, {0, 0, 0, NAN, 0, 0}), CGQ_STATUS_BAD_INPUT);
    EXPECT_EQ(eval({Z0, Z0}, {0, 0, 0, INFINITY, 0, 0}, true), CGQ_STATUS_BAD_INPUT);
}

TEST_F(InputErrors, ZeroAtomsIsEmptyNotAnError) {
    EXPECT_EQ(eval({}, {}), CGQ_STATUS_OK) << cgq_last_error();
    EXPECT_EQ(energy, 0.0);
}

TEST_F(InputErrors, OverlappingAtoms) {
    EXPECT_EQ(eval({Z0, Z0}, {1, 1, 1, 1, 1, 1}), CGQ_STATUS_BAD_INPUT);
    EXPECT_EQ(eval({Z0, Z0}, {1, 1, 1, 11, 1, 1}, true), CGQ_STATUS_BAD_INPUT);  // periodic image on top
}

TEST_F(InputErrors, Fp32OnCpuIsRefused) {
    cgq_evaluator_params p = cgq_evaluator_default_params();
    p.precision = CGQ_PRECISION_FP32;
    p.device = CGQ_DEVICE_CPU;
    cgq_evaluator *e = nullptr;
    EXPECT_EQ(cgq_evaluator_create(model->m, &p, &e), CGQ_STATUS_UNSUPPORTED);
    EXPECT_EQ(e, nullptr);
}

TEST_F(InputErrors, NegativeThreadCountIsRefused) {
    cgq_evaluator_params p = cgq_evaluator_default_params();
    p.num_threads = -2;
    cgq_evaluator *e = nullptr;
    EXPECT_EQ(cgq_evaluator_create(model->m, &p, &e), CGQ_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(e, nullptr);
    EXPECT_NE(std::string(cgq_last_error()).find("num_threads"), std::string::npos) << cgq_last_error();
}

// The command line reports malformed structures and exits non-zero.
TEST_F(Errors, CliMalformedXyz) {
    std::string p = tmp_path("bad.xyz"), out;
    std::ofstream(p) << "3\ncomment\nH 0 0 0\nH 1 x 0\n";
    EXPECT_EQ(run_cli("eval " + any_fixture() + " " + p, out), 1);
    EXPECT_NE(out.find("bad.xyz:4"), std::string::npos) << out;
}

TEST_F(Errors, CliBadOptionsAndFiles) {
    std::string out;
    EXPECT_NE(run_cli("eval " + any_fixture() + " x.xyz --precision fp16", out), 0);
    EXPECT_NE(out.find("fp64 or fp32"), std::string::npos) << out;
    EXPECT_EQ(run_cli("info /nonexistent.h5", out), 1);
    EXPECT_NE(out.find("cannot open"), std::string::npos) << out;
    EXPECT_EQ(run_cli("check " + any_fixture(), out), 0) << out;
}
