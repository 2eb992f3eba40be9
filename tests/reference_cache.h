// reference_cache.h: the CPU's float64 results shared between the test processes of one ctest run, so that the GPU
// suite's whole-binary variants (the same tests under another kernel switch, tests/CMakeLists.txt) and its fp64 and
// fp32 tests of one fixture compute each reference once. Off unless CGQ_TEST_REFERENCE_CACHE names a directory; it
// only pays where the processes evaluate the same positions, i.e. with one CGQ_TEST_SEED for the whole run (the
// bench/device_*.sh scripts draw one fresh per run). A result is found again only for the same bytes of species,
// positions, cell and periodicity, the same model file (path, size and modification time), the same test binary
// (size and modification time: a rebuilt library relinks it) and the same tag; anything else, or a file that does
// not read back whole, is computed again.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "test_util.h"

namespace cgqtest {

namespace detail {
struct Hash128 {
    uint64_t a = 1469598103934665603ull, b = 0x9e3779b97f4a7c15ull; /* FNV-1a, and a second multiplicative hash */
    void add(const void *p, size_t n) {
        const unsigned char *s = static_cast<const unsigned char *>(p);
        add_raw(&n, sizeof n); /* the length first: ("ab", "c") and ("a", "bc") differ */
        add_raw(s, n);
    }
    void add_raw(const void *p, size_t n) {
        const unsigned char *s = static_cast<const unsigned char *>(p);
        for (size_t k = 0; k < n; k++) {
            a = (a ^ s[k]) * 1099511628211ull;
            b = (b + s[k] + 1) * 0xff51afd7ed558ccdull, b ^= b >> 29;
        }
    }
    void add(const std::string &s) { add(s.data(), s.size()); }
    template <class T> void add(const std::vector<T> &v) { add(v.data(), sizeof(T) * v.size()); }
    void add_file_stamp(const char *path) { /* size and modification time (0s where it cannot be read) */
        struct stat st {};
        int64_t v[3] = {0, 0, 0};
        if (stat(path, &st) == 0) v[0] = (int64_t)st.st_size, v[1] = (int64_t)st.st_mtim.tv_sec, v[2] = st.st_mtim.tv_nsec;
        add(v, sizeof v);
    }
};

constexpr char kRefMagic[8] = {'C', 'G', 'Q', 'R', 'E', 'F', '1', 0};

inline bool write_all(FILE *f, const void *p, size_t n) { return std::fwrite(p, 1, n, f) == n; }
inline bool read_all(FILE *f, void *p, size_t n) { return std::fread(p, 1, n, f) == n; }
inline bool write_vec(FILE *f, const std::vector<double> &v) {
    const uint64_t n = v.size();
    return write_all(f, &n, sizeof n) && write_all(f, v.data(), sizeof(double) * n);
}
inline bool read_vec(FILE *f, std::vector<double> &v, uint64_t max) {
    uint64_t n = 0;
    if (!read_all(f, &n, sizeof n) || n > max) return false;
    v.resize(n);
    return read_all(f, v.data(), sizeof(double) * n);
}
}  // namespace detail

class ReferenceCache {
  public:
    // dir: the cache's directory, or nullptr/empty for none (then every call computes)
    explicit ReferenceCache(const char *dir) : dir_(dir ? dir : "") {}
    static ReferenceCache from_environment() { return ReferenceCache(std::getenv("CGQ_TEST_REFERENCE_CACHE")); }
    bool enabled() const { return !dir_.empty(); }

    // evaluate(cpu, c, pos) of the model in model_file under tag, found in the cache or computed and stored there
    Eval evaluate_cached(cgq_evaluator *cpu, const std::string &model_file, const std::string &tag, const Case &c,
                         const std::vector<double> &pos) const {
        return cached(model_file, tag, c, pos, [&] { return evaluate(cpu, c, pos); });
    }
    // compute()'s result (an Eval of c at pos), found in the cache or computed and stored there
    template <class F>
    Eval cached(const std::string &model_file, const std::string &tag, const Case &c, const std::vector<double> &pos,
                F compute) const {
        if (!enabled()) return compute();
        const std::string path = dir_ + "/" + key(model_file, tag, c, pos) + ".ref";
        Eval r{};
        if (load(path, c.Z.size(), &r)) return r;
        r = compute();
        if (r.status == CGQ_STATUS_OK) store(path, c.Z.size(), r);
        return r;
    }

    // the file name of a result: 32 hex digits of a hash of everything the result depends on
    std::string key(const std::string &model_file, const std::string &tag, const Case &c,
                    const std::vector<double> &pos) const {
        detail::Hash128 h;
        h.add(tag);
        h.add(model_file);
        h.add_file_stamp(model_file.c_str());
        h.add_file_stamp("/proc/self/exe");
        h.add(c.Z);
        h.add(pos);
        h.add(c.cell);
        h.add(c.pbc);
        char s[33];
        std::snprintf(s, sizeof s, "%016llx%016llx", (unsigned long long)h.a, (unsigned long long)h.b);
        return s;
    }

  private:
    std::string dir_;

    static bool load(const std::string &path, size_t n, Eval *r) {
        FILE *f = std::fopen(path.c_str(), "rb");
        if (!f) return false;
        char magic[8];
        uint64_t atoms = 0;
        Eval e{};
        bool ok = detail::read_all(f, magic, sizeof magic) && std::memcmp(magic, detail::kRefMagic, 8) == 0 &&
                  detail::read_all(f, &atoms, sizeof atoms) && atoms == n &&
                  detail::read_all(f, &e.energy, sizeof e.energy) && detail::read_all(f, e.virial, sizeof e.virial) &&
                  detail::read_vec(f, e.forces, 3 * n + 1) && detail::read_vec(f, e.atomic_energies, n + 1) &&
                  detail::read_vec(f, e.atomic_virials, 9 * n + 1) && std::fgetc(f) == EOF;
        std::fclose(f);
        if (!ok) return false;
        e.status = CGQ_STATUS_OK;
        *r = std::move(e);
        return true;
    }

    // written whole to a file of this process's own, then renamed: a reader sees a whole file or none
    static void store(const std::string &path, uint64_t n, const Eval &r) {
        const std::string tmp = path + ".tmp" + std::to_string(getpid());
        FILE *f = std::fopen(tmp.c_str(), "wb");
        if (!f) return;
        bool ok = detail::write_all(f, detail::kRefMagic, 8) && detail::write_all(f, &n, sizeof n) &&
                  detail::write_all(f, &r.energy, sizeof r.energy) && detail::write_all(f, r.virial, sizeof r.virial) &&
                  detail::write_vec(f, r.forces) && detail::write_vec(f, r.atomic_energies) &&
                  detail::write_vec(f, r.atomic_virials);
        ok = std::fclose(f) == 0 && ok;
        if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
    }
};

}  // namespace cgqtest
