// test_reference_cache.cpp: the cache of CPU results that the GPU suite's processes share (reference_cache.h): a hit
// is the computed result bit for bit and computes nothing; other positions, another tag or a damaged file compute
// again; without a directory nothing is kept; the fp32 floor through the cache is the floor without it.
#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>

#include "fp32_floor.h"
#include "reference_cache.h"

using namespace cgqtest;

namespace {
const std::string kModel = std::string(CGQ_FIXTURE_DIR) + "/mace_plain_l1_corr1.h5";

void expect_bitwise(const Eval &a, const Eval &b, int line = __builtin_LINE()) {
    SCOPED_TRACE(line); /* the caller's line */
    ASSERT_EQ(a.status, CGQ_STATUS_OK);
    ASSERT_EQ(b.status, CGQ_STATUS_OK);
    EXPECT_EQ(std::memcmp(&a.energy, &b.energy, sizeof a.energy), 0);
    EXPECT_EQ(std::memcmp(a.virial, b.virial, sizeof a.virial), 0);
    EXPECT_TRUE(a.forces == b.forces);
    EXPECT_TRUE(a.atomic_energies == b.atomic_energies);
    EXPECT_TRUE(a.atomic_virials == b.atomic_virials);
}

int files_in(const std::string &dir) {
    int n = 0;
    if (DIR *d = opendir(dir.c_str())) {
        while (dirent *e = readdir(d)) n += e->d_name[0] != '.';
        closedir(d);
    }
    return n;
}

struct TempDir {
    std::string path;
    TempDir() {
        char t[] = "/tmp/cgq_refcache_XXXXXX";
        path = mkdtemp(t) ? t : "";
    }
    ~TempDir() {
        if (DIR *d = opendir(path.c_str())) {
            while (dirent *e = readdir(d))
                if (e->d_name[0] != '.') std::remove((path + "/" + e->d_name).c_str());
            closedir(d);
        }
        rmdir(path.c_str());
    }
};
}  // namespace

TEST(ReferenceCache, HitsAreTheComputedResultsAndMissesCompute) {
    TempDir dir;
    ASSERT_FALSE(dir.path.empty());
    Model model(kModel);
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    Evaluator cpu(model.m);
    ASSERT_NE(cpu.e, nullptr) << cgq_last_error();
    const Case c = read_cases(kModel).at(0);
    const Eval direct = evaluate(cpu.e, c, c.pos);
    const ReferenceCache cache(dir.path.c_str());
    int computed = 0;
    auto compute = [&](const std::vector<double> &pos, const Case &of) {
        return [&, pos] {
            computed++;
            return evaluate(cpu.e, of, pos);
        };
    };

    expect_bitwise(cache.cached(kModel, "cpu", c, c.pos, compute(c.pos, c)), direct);
    EXPECT_EQ(computed, 1);
    EXPECT_EQ(files_in(dir.path), 1);
    expect_bitwise(cache.cached(kModel, "cpu", c, c.pos, compute(c.pos, c)), direct); /* found: nothing computed */
    EXPECT_EQ(computed, 1);
    expect_bitwise(ReferenceCache(dir.path.c_str()).evaluate_cached(cpu.e, kModel, "cpu", c, c.pos), direct);

    std::vector<double> moved = c.pos;
    moved[0] = std::nextafter(moved[0], 1e9); /* one bit of one coordinate */
    const Eval m = cache.cached(kModel, "cpu", c, moved, compute(moved, c));
    EXPECT_EQ(computed, 2);
    expect_bitwise(m, evaluate(cpu.e, c, moved));
    cache.cached(kModel, "another tag", c, c.pos, compute(c.pos, c));
    EXPECT_EQ(computed, 3);
    EXPECT_EQ(files_in(dir.path), 3);

    /* a damaged file (cut short, or another structure's) is computed again, and replaced */
    const std::string path = dir.path + "/" + cache.key(kModel, "cpu", c, c.pos) + ".ref";
    struct stat st {};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    ASSERT_EQ(truncate(path.c_str(), st.st_size - 8), 0);
    expect_bitwise(cache.cached(kModel, "cpu", c, c.pos, compute(c.pos, c)), direct);
    EXPECT_EQ(computed, 4);
    Case other = c;
    other.Z.push_back(c.Z[0]);
    other.pos.insert(other.pos.end(), {9.0, 9.0, 9.0});
    {
        FILE *f = std::fopen((dir.path + "/" + cache.key(kModel, "cpu", other, other.pos) + ".ref").c_str(), "wb");
        ASSERT_NE(f, nullptr);
        std::FILE *src = std::fopen(path.c_str(), "rb"); /* c's result under other's name: the wrong atom count */
        ASSERT_NE(src, nullptr);
        for (int ch; (ch = std::fgetc(src)) != EOF;) std::fputc(ch, f);
        std::fclose(src);
        std::fclose(f);
    }
    const Eval o = cache.cached(kModel, "cpu", other, other.pos, compute(other.pos, other));
    EXPECT_EQ(computed, 5);
    expect_bitwise(o, evaluate(cpu.e, other, other.pos));
}

TEST(ReferenceCache, WithoutADirectoryEveryCallComputes) {
    Model model(kModel);
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    Evaluator cpu(model.m);
    const Case c = read_cases(kModel).at(0);
    const ReferenceCache none(nullptr);
    EXPECT_FALSE(none.enabled());
    EXPECT_FALSE(ReferenceCache("").enabled());
    int computed = 0;
    for (int k = 0; k < 2; k++)
        none.cached(kModel, "cpu", c, c.pos, [&] {
            computed++;
            return evaluate(cpu.e, c, c.pos);
        });
    EXPECT_EQ(computed, 2);
}

TEST(ReferenceCache, Fp32FloorThroughTheCacheIsTheFloorWithoutIt) {
    TempDir dir;
    Model model(kModel);
    ASSERT_NE(model.m, nullptr) << cgq_last_error();
    Evaluator cpu(model.m);
    for (const Case &c : read_cases(kModel)) {
        const double e64 = evaluate(cpu.e, c, c.pos).energy;
        const Fp32Floor plain(kModel, ReferenceCache(nullptr));
        ASSERT_TRUE(plain.ok()) << cgq_last_error();
        const double want = plain.energy(c, c.pos, e64);
        EXPECT_GT(want, 0.0) << c.name;
        for (int k = 0; k < 2; k++) { /* computed and stored, then found by another instance */
            const Fp32Floor cached(kModel, ReferenceCache(dir.path.c_str()));
            ASSERT_TRUE(cached.ok());
            const double got = cached.energy(c, c.pos, e64);
            EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << c.name << " pass " << k;
        }
    }
    EXPECT_GT(files_in(dir.path), 0);
}
