// fp32_floor.h: how much of a structure's float64 energy float32 storage alone moves, the floor under any fp32
// evaluation's error. The model file is copied three times with every parameter multiplied by (1 + u 2^-24), u
// uniform in [-1, 1] (fixed seeds): a float32 rounding of each weight, nothing else. The floor is the largest energy
// change of the three on the CPU's float64 path. Random-weight fixtures have cells whose energy is a cancellation of
// much larger terms: NequIP's tiny cell (two atoms, site energies 0.077 and -0.004 eV) moves by 5e-7 to 2.3e-6 of
// its energy scale at the pairs test's random positions (30 draws), so a fixed 1e-6 limit there tests the fixture's
// conditioning, not the GPU. The fp32 tests allow max(1e-6 of the scale, kFp32FloorFactor x the floor). With a
// reference cache (reference_cache.h) the perturbed models' energies come from it where another process computed
// them, and the copies are made only when one is missing.
#pragma once

#include <unistd.h>

#include <fstream>
#include <memory>

#include "reference_cache.h"
#include "test_util.h"

namespace cgqtest {

// fp32 evaluation rounds every intermediate as well as the weights: its error is a small multiple of the floor.
constexpr double kFp32FloorFactor = 5.0;

namespace detail {
struct PerturbWalk {
    std::mt19937_64 rng;
    bool ok = true;
};
// Every float64 dataset of more than 8 values outside /selftest times (1 + u 2^-24), except cutoff tables (the
// loader checks them against r_max exactly) and what the fp32 path keeps in double (reference energies, scales,
// shifts).
inline herr_t perturb_link(hid_t loc, const char *name, const H5L_info_t *, void *data) {
    auto *w = static_cast<PerturbWalk *>(data);
    for (const char *keep : {"selftest", "rmax", "cut", "atomic_energies", "scale", "shift"})
        if (std::strstr(name, keep)) return 0;
    const hid_t obj = H5Oopen(loc, name, H5P_DEFAULT);
    if (obj < 0) return w->ok = false, -1;
    herr_t st = 0;
    if (H5Iget_type(obj) == H5I_GROUP) {
        st = H5Literate(obj, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, perturb_link, data);
    } else if (H5Iget_type(obj) == H5I_DATASET) {
        const hid_t type = H5Dget_type(obj), space = H5Dget_space(obj);
        const hssize_t n = H5Sget_simple_extent_npoints(space);
        if (H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 8 && n > 8) {
            std::vector<double> v((size_t)n);
            std::uniform_real_distribution<double> u(-1.0, 1.0);
            if (H5Dread(obj, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) st = -1;
            for (double &x : v) x *= 1.0 + u(w->rng) * std::ldexp(1.0, -24);
            if (st == 0 && H5Dwrite(obj, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) st = -1;
        }
        H5Sclose(space);
        H5Tclose(type);
    }
    H5Oclose(obj);
    if (st < 0) w->ok = false;
    return st;
}

inline bool write_perturbed_copy(const std::string &src, const std::string &dst, uint64_t seed) {
    {
        std::ifstream in(src, std::ios::binary);
        std::ofstream out(dst, std::ios::binary);
        out << in.rdbuf();
        if (!in || !out) return false;
    }
    const hid_t f = H5Fopen(dst.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return false;
    PerturbWalk w{std::mt19937_64(seed)};
    H5Literate(f, H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, perturb_link, &w);
    H5Fclose(f);
    return w.ok;
}
}  // namespace detail

class Fp32Floor {
  public:
    explicit Fp32Floor(const std::string &model_file, ReferenceCache cache = ReferenceCache::from_environment())
        : file_(model_file), cache_(std::move(cache)) {
        ok_ = cache_.enabled() || build(); /* with a cache, built at its first miss */
    }
    bool ok() const { return ok_; }
    // the largest |E_k - e64| of the perturbed models at pos (e64: the unperturbed float64 energy there); a failure
    // to build the perturbed models fails the test and returns 0 (the tightest limit), never a wider one
    double energy(const Case &c, const std::vector<double> &pos, double e64) const {
        double floor = 0.0;
        for (int k = 0; k < kCopies; k++) {
            const Eval r = cache_.cached(file_, "fp32 floor " + std::to_string(k), c, pos, [&] {
                if (evaluators_.size() < kCopies && !build()) return Eval{CGQ_STATUS_BAD_FILE, 0.0, {0}, {}, {}, {}};
                return evaluate(evaluators_[k]->e, c, pos);
            });
            if (r.status != CGQ_STATUS_OK) {
                ADD_FAILURE() << "fp32 floor of " << file_ << ": " << cgq_last_error();
                return 0.0;
            }
            floor = std::fmax(floor, std::fabs(r.energy - e64));
        }
        return floor;
    }

  private:
    static constexpr int kCopies = 3;
    std::string file_;
    ReferenceCache cache_;
    mutable std::vector<std::unique_ptr<Model>> models_; /* built lazily where a cache is in use */
    mutable std::vector<std::unique_ptr<Evaluator>> evaluators_;
    bool ok_ = false;

    bool build() const {
        models_.clear(), evaluators_.clear();
        const std::string base = file_.substr(file_.find_last_of('/') + 1);
        for (int k = 0; k < kCopies; k++) {
            /* per process: ctest runs several test_gpu processes on one fixture at once */
            const std::string copy =
                ::testing::TempDir() + "fp32floor_" + std::to_string(getpid()) + "_" + std::to_string(k) + "_" + base;
            if (!detail::write_perturbed_copy(file_, copy, 1000 + k)) return false;
            models_.push_back(std::make_unique<Model>(copy));
            std::remove(copy.c_str());
            if (!models_.back()->m) return false;
            evaluators_.push_back(std::make_unique<Evaluator>(models_.back()->m));
            if (!evaluators_.back()->e) return false;
        }
        return true;
    }
};

}  // namespace cgqtest
