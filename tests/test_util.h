// test_util.h: shared helpers for the test suite: fixture discovery and reading self-test cases.
#pragma once

#include <hdf5.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <dirent.h>
#include <random>
#include <sys/wait.h>
#include <string>
#include <vector>

extern "C" {
#include "cgequi.h"
#include "model/h5util.h"
}

namespace cgqtest {

// A fresh seed for a randomized test (print it), or the one in CGQ_TEST_SEED to repeat a printed failure.
inline unsigned test_seed() {
    if (const char *s = std::getenv("CGQ_TEST_SEED")) return (unsigned)std::strtoul(s, nullptr, 10);
    return std::random_device{}();
}

// One reference structure stored by the exporter under /selftest/<name>.
struct Case {
    std::string name;
    std::vector<int32_t> Z;
    std::vector<double> pos, cell, forces, atomic_energies, virial, atomic_virials;
    std::vector<int32_t> pbc;
    double energy = 0;
};

// Every committed model file with reference self-tests: tests/fixtures/*.h5 and potentials/*.h5.
inline std::vector<std::string> fixture_files() {
    std::vector<std::string> out;
    for (const char *dir : {CGQ_FIXTURE_DIR, CGQ_POTENTIALS_DIR}) {
        if (DIR *d = opendir(dir)) {
            while (dirent *e = readdir(d)) {
                std::string n = e->d_name;
                if (n.size() > 3 && n.substr(n.size() - 3) == ".h5") out.push_back(std::string(dir) + "/" + n);
            }
            closedir(d);
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

// Test-name suffix of a fixture path (file name without .h5, non-alphanumerics as _).
inline std::string fixture_test_name(const ::testing::TestParamInfo<std::string> &info) {
    std::string n = info.param.substr(info.param.find_last_of('/') + 1);
    n = n.substr(0, n.size() - 3);
    for (char &ch : n)
        if (!isalnum((unsigned char)ch)) ch = '_';
    return n;
}

template <class T>
inline bool read_vec(const cgq_h5 &f, hid_t g, const char *name, std::vector<T> &v, bool required = true) {
    if (!cgq_h5_exists(g, name)) return !required;
    int64_t dims[CGQ_H5_MAX_RANK];
    int rank = 0;
    T *data = nullptr;
    cgq_status st;
    if constexpr (std::is_same<T, double>::value)
        st = cgq_h5_read_double(&f, g, name, "selftest", -1, nullptr, &data, &rank, dims);
    else
        st = cgq_h5_read_int(&f, g, name, "selftest", -1, nullptr, &data, &rank, dims);
    if (st) return false;
    size_t n = 1;
    for (int k = 0; k < rank; k++) n *= (size_t)dims[k];
    v.assign(data, data + n);
    free(data);
    return true;
}

inline std::vector<Case> read_cases(const std::string &path) {
    std::vector<Case> out;
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) return out;
    cgq_h5 f = {file, path.c_str()};
    if (cgq_h5_exists(file, "selftest")) {
        hid_t st = H5Gopen2(file, "selftest", H5P_DEFAULT);
        hsize_t n = 0;
        H5Gget_num_objs(st, &n);
        for (hsize_t k = 0; k < n; k++) {
            char name[256];
            H5Gget_objname_by_idx(st, k, name, sizeof name);
            hid_t g = H5Gopen2(st, name, H5P_DEFAULT);
            Case c;
            c.name = name;
            bool ok = read_vec(f, g, "atomic_numbers", c.Z) && read_vec(f, g, "positions", c.pos) &&
                      read_vec(f, g, "cell", c.cell) && read_vec(f, g, "pbc", c.pbc) &&
                      read_vec(f, g, "forces", c.forces) && read_vec(f, g, "atomic_energies", c.atomic_energies) &&
                      read_vec(f, g, "virial", c.virial, false) && read_vec(f, g, "atomic_virials", c.atomic_virials, false) &&
                      cgq_h5_attr_double(&f, g, "energy", name, &c.energy) == CGQ_STATUS_OK;
            if (ok) out.push_back(c);
            H5Gclose(g);
        }
        H5Gclose(st);
    }
    H5Fclose(file);
    return out;
}

inline cgq_system system_of(const Case &c, const std::vector<double> &pos) {
    cgq_system s{};
    s.n_atoms = (int64_t)c.Z.size();
    s.positions = pos.data();
    s.atomic_numbers = c.Z.data();
    for (int k = 0; k < 9; k++) s.cell[k] = c.cell[k];
    for (int k = 0; k < 3; k++) s.pbc[k] = c.pbc[k];
    return s;
}

inline double max_abs(const std::vector<double> &a) {
    double m = 0;
    for (double x : a) m = std::fmax(m, std::fabs(x));
    return m;
}

inline double max_abs_diff(const double *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = std::fmax(m, std::fabs(a[i] - b[i]));
    return m;
}

// RAII holders for the C handles.
struct Model {
    cgq_model *m = nullptr;
    explicit Model(const std::string &p) { cgq_model_load(p.c_str(), &m); }
    ~Model() { cgq_model_free(m); }
};
struct Evaluator {
    cgq_evaluator *e = nullptr;
    explicit Evaluator(const cgq_model *m) : Evaluator(m, cgq_evaluator_default_params()) {}
    Evaluator(const cgq_model *m, const cgq_evaluator_params &p) { cgq_evaluator_create(m, &p, &e); }
    ~Evaluator() { cgq_evaluator_free(e); }
};

// Energy, forces, virial, per-atom energies and virials of a structure.
struct Eval {
    cgq_status status;
    double energy;
    double virial[9];
    std::vector<double> forces, atomic_energies, atomic_virials;
};

inline Eval evaluate(cgq_evaluator *ev, const Case &c, const std::vector<double> &pos, const double *cell = nullptr) {
    Eval r{};
    cgq_system s = system_of(c, pos);
    if (cell)
        for (int k = 0; k < 9; k++) s.cell[k] = cell[k];
    r.forces.resize(3 * c.Z.size() + 1);
    r.atomic_energies.resize(c.Z.size() + 1);
    r.atomic_virials.resize(9 * c.Z.size() + 1);
    cgq_result res{};
    res.forces = r.forces.data();
    res.atomic_energies = r.atomic_energies.data();
    res.atomic_virials = r.atomic_virials.data();
    r.status = cgq_evaluate_system(ev, &s, &res);
    r.energy = res.energy;
    for (int k = 0; k < 9; k++) r.virial[k] = res.virial[k];
    return r;
}

// Runs the `cgequi` command line with args (stderr merged into out); returns its exit code.
inline int run_cli(const std::string &args, std::string &out) {
    const std::string cmd = std::string(CGQ_CLI_PATH) + " " + args + " 2>&1";
    FILE *p = popen(cmd.c_str(), "r");
    char buf[4096];
    out.clear();
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace cgqtest
