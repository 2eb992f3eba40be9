/* rtc.cuh: kernels generated for a model at load time, compiled with NVRTC and kept on disk.
 *
 * rtc_kernels(jobs) gives each job's kernel a handle that cudaLaunchKernel takes as its function (a cudaKernel_t
 * from cudaLibraryLoadData: loaded once per process, valid on every device), or null with the reason; the caller
 * then runs its compiled-in kernel, so a missing or failing NVRTC costs speed, never a result. The cubin is cached
 * under a key of the source, the NVRTC version, the options and the device's architecture: in $CGQ_KERNEL_CACHE, else
 * $XDG_CACHE_HOME/cgequi, else $HOME/.cache/cgequi (CGQ_KERNEL_CACHE=off: no disk cache). Files are written under a
 * temporary name and renamed, so processes sharing the cache (ctest -j, MPI ranks) never read half a file.
 * HIP builds have no generated kernels yet (every job's kernel is null there). */
#ifndef CGQ_GPU_RTC_CUH
#define CGQ_GPU_RTC_CUH

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if !defined(__HIPCC__)
#include <nvrtc.h>
#endif

/* 64-bit FNV-1a: the cache key (not security: a collision would load another kernel of the same name) */
static uint64_t rtc_hash(const std::string &s, uint64_t h = 1469598103934665603ull) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

/* The cache directory (created), or "" when there is none */
static std::string rtc_cache_dir() {
    std::string dir;
    const char *env = getenv("CGQ_KERNEL_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (env && (!strcmp(env, "off") || !strcmp(env, "0"))) return "";
    if (env && *env) dir = env;
    else if (xdg && *xdg) dir = std::string(xdg) + "/cgequi";
    else if (home && *home) dir = std::string(home) + "/.cache/cgequi";
    else return "";
    for (size_t p = 1; p <= dir.size(); p++) /* mkdir -p */
        if (p == dir.size() || dir[p] == '/')
            if (mkdir(dir.substr(0, p).c_str(), 0755) != 0 && errno != EEXIST) return "";
    return dir;
}

static bool rtc_read_file(const std::string &path, std::vector<char> *out) {
    FILE *f = fopen(path.c_str(), "rb");
    if (!f) return false;
    char buf[65536];
    size_t n;
    out->clear();
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out->insert(out->end(), buf, buf + n);
    fclose(f);
    return !out->empty();
}

static void rtc_write_file(const std::string &path, const std::vector<char> &data) {
    const std::string tmp = path + "." + std::to_string((long)getpid()) + ".tmp";
    FILE *f = fopen(tmp.c_str(), "wb");
    if (!f) return; /* an unwritable cache only costs the next load a compile */
    const bool ok = fwrite(data.data(), 1, data.size(), f) == data.size();
    if (fclose(f) == 0 && ok && rename(tmp.c_str(), path.c_str()) == 0) return;
    remove(tmp.c_str());
}

/* One generated kernel to make: its source and extern "C" name in; out, the handle cudaLaunchKernel takes as its
 * function, or null and the reason */
struct rtc_job {
    std::string source, name;
    const void *kernel = nullptr;
    std::string why;
};

#if !defined(__HIPCC__)
/* The cubin of `source` by NVRTC with options opts (arch: the one among them that names the architecture). Runs on
 * any thread: NVRTC compiles separate programs at once (only nvrtcGetTypeName is not thread-safe). */
static bool rtc_compile(const std::string &source, const std::vector<std::string> &opts, const std::string &arch,
                        std::vector<char> *cubin, std::string *why) {
    nvrtcProgram prog;
    if (nvrtcCreateProgram(&prog, source.c_str(), "cgequi_generated.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS)
        return *why = "nvrtcCreateProgram failed", false;
    std::vector<const char *> o;
    for (const auto &s : opts) o.push_back(s.c_str());
    const nvrtcResult r = nvrtcCompileProgram(prog, (int)o.size(), o.data());
    size_t n = 0;
    if (r != NVRTC_SUCCESS) {
        nvrtcGetProgramLogSize(prog, &n);
        std::string log(n, '\0');
        nvrtcGetProgramLog(prog, &log[0]);
        *why = std::string("NVRTC: ") + nvrtcGetErrorString(r) + " (" + arch + "): " + log.substr(0, 2000);
        nvrtcDestroyProgram(&prog);
        return false;
    }
    const bool got = nvrtcGetCUBINSize(prog, &n) == NVRTC_SUCCESS && n > 0;
    if (got) {
        cubin->resize(n);
        nvrtcGetCUBIN(prog, cubin->data());
    }
    nvrtcDestroyProgram(&prog);
    if (!got) return *why = "NVRTC made no cubin for " + arch, false;
    return true;
}

/* cudaLibraryLoadData of the cubin and its kernel `name`, or null (and *why) */
static const void *rtc_load(const std::vector<char> &cubin, const std::string &name, std::string *why) {
    cudaLibrary_t lib;
    cudaKernel_t k;
    cudaError_t e = cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (e == cudaSuccess) {
        e = cudaLibraryGetKernel(&k, lib, name.c_str());
        if (e != cudaSuccess) cudaLibraryUnload(lib);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        *why = "loading the generated kernel " + name + ": " + cudaGetErrorString(e);
        return nullptr;
    }
    return reinterpret_cast<const void *>(k);
}
#endif

/* Makes every job's kernel for the current device: those this process loaded before again, the cubins found in the
 * cache, and the others compiled by NVRTC on threads at once (the calling thread among them, at most one per core:
 * ptxas on straight-line code takes seconds per kernel, session 62's MP-0 17-21 s one after the other), written to
 * the cache, then loaded in the jobs' order. Libraries stay loaded: later evaluators of the model reuse them. */
static void rtc_kernels(std::vector<rtc_job> *jobs) {
#if defined(__HIPCC__)
    for (rtc_job &j : *jobs) j.kernel = nullptr, j.why = "no generated kernels in HIP builds";
#else
    static std::mutex mu;
    static std::map<std::pair<uint64_t, std::string>, const void *> loaded;
    std::lock_guard<std::mutex> lock(mu);
    int dev = 0, major = 0, minor = 0, vmaj = 0, vmin = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (nvrtcVersion(&vmaj, &vmin) != NVRTC_SUCCESS) {
        for (rtc_job &j : *jobs) j.why = "NVRTC does not answer";
        return;
    }
    const std::string arch = "--gpu-architecture=sm_" + std::to_string(major * 10 + minor);
    const std::vector<std::string> opts = {arch, "-std=c++17", "-default-device"};
    const std::string dir = rtc_cache_dir();
    const size_t n = jobs->size();
    std::vector<std::string> path(n);
    std::vector<uint64_t> key(n); /* of the source, NVRTC's version and the options */
    std::vector<std::vector<char>> cubin(n);
    std::vector<size_t> todo; /* the jobs to compile */
    for (size_t i = 0; i < n; i++) {
        rtc_job &j = (*jobs)[i];
        j.kernel = nullptr, j.why.clear();
        std::string text = j.source + "|nvrtc " + std::to_string(vmaj) + "." + std::to_string(vmin);
        for (const auto &o : opts) text += "|" + o;
        key[i] = rtc_hash(text);
        const auto it = loaded.find({key[i], j.name});
        if (it != loaded.end()) {
            j.kernel = it->second;
            continue;
        }
        char name[40];
        snprintf(name, sizeof name, "/%016llx.cubin", (unsigned long long)key[i]);
        path[i] = dir.empty() ? "" : dir + name;
        if (path[i].empty() || !rtc_read_file(path[i], &cubin[i])) todo.push_back(i);
    }
    std::atomic<size_t> next(0);
    std::vector<char> compiled(n, 0);
    auto work = [&]() {
        for (size_t q; (q = next.fetch_add(1)) < todo.size();) {
            const size_t i = todo[q];
            compiled[i] = rtc_compile((*jobs)[i].source, opts, arch, &cubin[i], &(*jobs)[i].why);
        }
    };
    std::vector<std::thread> threads;
    const char *env = getenv("CGQ_RTC_THREADS"); /* at most this many compiles at once (MPI ranks sharing a node) */
    const size_t cores = std::max(1u, std::thread::hardware_concurrency());
    const size_t most = env && atoi(env) > 0 ? (size_t)atoi(env) : cores;
    for (size_t t = 1; t < std::min(todo.size(), most); t++) {
        try {
            threads.emplace_back(work);
        } catch (...) { /* no thread to be had: the calling thread compiles the rest */
            break;
        }
    }
    work();
    for (std::thread &t : threads) t.join();
    for (size_t i = 0; i < n; i++) {
        rtc_job &j = (*jobs)[i];
        if (j.kernel || cubin[i].empty()) continue; /* reused, or its compile failed (why says so) */
        if (compiled[i] && !path[i].empty()) rtc_write_file(path[i], cubin[i]);
        j.kernel = rtc_load(cubin[i], j.name, &j.why);
        if (j.kernel) loaded[{key[i], j.name}] = j.kernel;
    }
#endif
}

#endif
