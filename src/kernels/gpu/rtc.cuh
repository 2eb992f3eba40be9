/* rtc.cuh: kernels generated for a model at load time, compiled with NVRTC and kept on disk.
 *
 * rtc_kernel(source, name) returns a handle that cudaLaunchKernel takes as its function (a cudaKernel_t from
 * cudaLibraryLoadData: loaded once per process, valid on every device), or null with the reason in *why; the caller
 * then runs its compiled-in kernel, so a missing or failing NVRTC costs speed, never a result. The cubin is cached
 * under a key of the source, the NVRTC version, the options and the device's architecture: in $CGQ_KERNEL_CACHE, else
 * $XDG_CACHE_HOME/cgequi, else $HOME/.cache/cgequi (CGQ_KERNEL_CACHE=off: no disk cache). Files are written under a
 * temporary name and renamed, so processes sharing the cache (ctest -j, MPI ranks) never read half a file.
 * HIP builds have no generated kernels yet (rtc_kernel returns null there). */
#ifndef CGQ_GPU_RTC_CUH
#define CGQ_GPU_RTC_CUH

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <string>
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

#if !defined(__HIPCC__)
/* The cubin of `source` for the current device's architecture, from the cache or compiled now */
static bool rtc_cubin(const std::string &source, std::vector<char> *cubin, std::string *why) {
    int dev = 0, major = 0, minor = 0, vmaj = 0, vmin = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (nvrtcVersion(&vmaj, &vmin) != NVRTC_SUCCESS) return *why = "NVRTC does not answer", false;
    const std::string arch = "--gpu-architecture=sm_" + std::to_string(major * 10 + minor);
    const std::vector<std::string> opts = {arch, "-std=c++17", "-default-device"};
    std::string key = source + "|nvrtc " + std::to_string(vmaj) + "." + std::to_string(vmin);
    for (const auto &o : opts) key += "|" + o;
    char name[40];
    snprintf(name, sizeof name, "/%016llx.cubin", (unsigned long long)rtc_hash(key));
    const std::string dir = rtc_cache_dir(), path = dir.empty() ? "" : dir + name;
    if (!path.empty() && rtc_read_file(path, cubin)) return true;

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
    if (!path.empty()) rtc_write_file(path, *cubin);
    return true;
}
#endif

/* The kernel `name` (extern "C") of `source`, loaded once per process; null (and *why) where it cannot be */
static const void *rtc_kernel(const std::string &source, const char *name, std::string *why) {
#if defined(__HIPCC__)
    (void)source, (void)name;
    *why = "no generated kernels in HIP builds";
    return nullptr;
#else
    static std::mutex mu;
    static std::map<std::pair<uint64_t, std::string>, const void *> loaded; /* libraries stay loaded: later
                                                                              * evaluators of the model reuse them */
    const std::pair<uint64_t, std::string> key(rtc_hash(source), name);
    std::lock_guard<std::mutex> lock(mu);
    const auto it = loaded.find(key);
    if (it != loaded.end()) return it->second;
    std::vector<char> cubin;
    if (!rtc_cubin(source, &cubin, why)) return nullptr;
    cudaLibrary_t lib;
    cudaKernel_t k;
    cudaError_t e = cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (e == cudaSuccess) {
        e = cudaLibraryGetKernel(&k, lib, name);
        if (e != cudaSuccess) cudaLibraryUnload(lib);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        *why = std::string("loading the generated kernel ") + name + ": " + cudaGetErrorString(e);
        return nullptr;
    }
    return loaded[key] = reinterpret_cast<const void *>(k);
#endif
}

#endif
