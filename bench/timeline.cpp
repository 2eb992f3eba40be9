/* timeline.cpp: a CUPTI injection library that records what the GPU ran and when, to find where a step leaves the
 * GPU idle (Nsight Systems does not run on the device machine). Every kernel, copy and memset (start, end, stream) and
 * every CUDA runtime call of the host (start, end, name) go to the CSV file named by CGQ_TIMELINE, in one clock
 * (ns); bench/timeline.py reads it. Not part of the library: built and loaded by bench/device_timeline.sh,
 *   g++ -O2 -shared -fPIC bench/timeline.cpp -I$CUDA/include -L$CUPTI_LIB -lcupti -o libcgq_timeline.so
 *   CUDA_INJECTION64_PATH=$PWD/libcgq_timeline.so CGQ_TIMELINE=t.csv bench_eval ...
 * KREC, MREC, SREC: the newest kernel, memcpy and memset record types of the cupti_activity.h it is built against
 * (the script passes them; CUPTI writes the newest form it has). */
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifndef KREC
#define KREC CUpti_ActivityKernel10
#endif
#ifndef MREC
#define MREC CUpti_ActivityMemcpy6
#endif
#ifndef SREC
#define SREC CUpti_ActivityMemset4
#endif

static FILE *out;

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records) {
    *size = (size_t)16 << 20;
    *buf = static_cast<uint8_t *>(aligned_alloc(8, *size));
    *max_records = 0;
}

/* the kernel's name demangled, without its parameter list, commas kept (the name is the line's last field) */
static void put_name(const char *mangled) {
    int st = 0;
    char *d = abi::__cxa_demangle(mangled, nullptr, nullptr, &st);
    const char *n = st == 0 && d ? d : mangled;
    const char *paren = strchr(n, '(');
    fprintf(out, "%.*s\n", paren ? (int)(paren - n) : (int)strlen(n), n);
    free(d);
}

static void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t *buf, size_t, size_t valid) {
    CUpti_Activity *r = nullptr;
    while (out && cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
        switch (r->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const KREC *k = reinterpret_cast<const KREC *>(r);
            fprintf(out, "K,%llu,%llu,%u,%u,", (unsigned long long)k->start, (unsigned long long)k->end, k->streamId,
                    k->gridX * k->gridY * k->gridZ);
            put_name(k->name);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const MREC *m = reinterpret_cast<const MREC *>(r);
            fprintf(out, "M,%llu,%llu,%u,%llu,memcpy kind %d\n", (unsigned long long)m->start,
                    (unsigned long long)m->end, m->streamId, (unsigned long long)m->bytes, (int)m->copyKind);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const SREC *m = reinterpret_cast<const SREC *>(r);
            fprintf(out, "S,%llu,%llu,%u,%llu,memset\n", (unsigned long long)m->start, (unsigned long long)m->end,
                    m->streamId, (unsigned long long)m->bytes);
            break;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME: {
            const CUpti_ActivityAPI *a = reinterpret_cast<const CUpti_ActivityAPI *>(r);
            const char *name = nullptr;
            if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name) != CUPTI_SUCCESS || !name)
                name = "?";
            fprintf(out, "H,%llu,%llu,0,0,%s\n", (unsigned long long)a->start, (unsigned long long)a->end, name);
            break;
        }
        default:
            break;
        }
    }
    free(buf);
}

static void finish() {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (out) fclose(out);
    out = nullptr;
}

extern "C" int InitializeInjection(void) {
    const char *path = getenv("CGQ_TIMELINE");
    out = fopen(path && *path ? path : "timeline.csv", "w");
    if (!out) return 0;
    fprintf(out, "what,start_ns,end_ns,stream,size,name\n");
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
    atexit(finish);
    return 1;
}
