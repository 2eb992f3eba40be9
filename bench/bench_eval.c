/* bench_eval.c: end-to-end timing of one energy+forces+virial evaluation (what an MD step costs) of a
 * model on a replicated structure, on the CPU or the GPU, after checking GPU against CPU once.
 * usage: bench_eval MODEL.h5 STRUCTURE.xyz NX NY NZ DEVICE(cpu|cuda) REPEATS [--check] [--fp32]
 * (--check: GPU against the CPU once, energy and forces; --fp32: precision fp32, else fp64) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cgequi.h"
#include "replicate.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run(cgq_evaluator *ev, cgq_system *s, double *f, double *energy) {
    cgq_result r = {0};
    r.forces = f;
    if (cgq_evaluate_system(ev, s, &r) != CGQ_STATUS_OK) {
        fprintf(stderr, "bench_eval: %s\n", cgq_last_error());
        return 0;
    }
    *energy = r.energy;
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: bench_eval MODEL.h5 STRUCTURE.xyz NX NY NZ cpu|cuda REPEATS [--check] [--fp32]\n");
        return 2;
    }
    const int nx = atoi(argv[3]), ny = atoi(argv[4]), nz = atoi(argv[5]), reps = atoi(argv[7]);
    int check = 0, fp32 = 0; /* options after the positional arguments, in any order */
    for (int i = 8; i < argc; i++) {
        if (!strcmp(argv[i], "--check")) check = 1;
        else if (!strcmp(argv[i], "--fp32")) fp32 = 1;
        else return fprintf(stderr, "bench_eval: unknown option '%s' (--check, --fp32)\n", argv[i]), 2;
    }
    cgq_model *m;
    if (cgq_model_load(argv[1], &m)) return fprintf(stderr, "%s\n", cgq_last_error()), 1;
    cgq_system s;
    if (bench_replicated_system(argv[2], nx, ny, nz, &s)) return 1;
    const int64_t n = s.n_atoms;
    double *f = malloc(sizeof(double) * 3 * n), *f2 = malloc(sizeof(double) * 3 * n);
    cgq_evaluator_params p = cgq_evaluator_default_params();
    p.device = strcmp(argv[6], "cuda") ? CGQ_DEVICE_CPU : CGQ_DEVICE_CUDA;
    p.precision = fp32 ? CGQ_PRECISION_FP32 : CGQ_PRECISION_FP64;
    cgq_evaluator *ev;
    if (cgq_evaluator_create(m, &p, &ev)) return fprintf(stderr, "%s\n", cgq_last_error()), 1;
    double e = 0, e2 = 0;
    if (!run(ev, &s, f, &e) || !run(ev, &s, f, &e)) return 1; /* warm-up */
    if (check) {
        cgq_evaluator_params pc = p;
        pc.device = CGQ_DEVICE_CPU;
        pc.precision = CGQ_PRECISION_FP64;
        cgq_evaluator *cpu;
        if (cgq_evaluator_create(m, &pc, &cpu) || !run(cpu, &s, f2, &e2)) return 1;
        double df = 0, fm = 0, s2 = 0, f2s = 0;
        for (int64_t i = 0; i < 3 * n; i++) {
            df = fmax(df, fabs(f[i] - f2[i])), fm = fmax(fm, fabs(f2[i]));
            s2 += (f[i] - f2[i]) * (f[i] - f2[i]), f2s += f2[i] * f2[i];
        }
        printf("check vs CPU fp64: energy rel %.2e, max force diff %.2e (|F|max %.2f), force rms err / rms %.2e\n",
               fabs(e - e2) / fabs(e2), df, fm, sqrt(s2 / fmax(f2s, 1e-300)));
        cgq_evaluator_free(cpu);
    }
    double *t = malloc(sizeof(double) * (reps > 0 ? reps : 1));
    for (int r = 0; r < reps; r++) {
        double t0 = now(), er;
        if (!run(ev, &s, f, &er)) return 1;
        t[r] = now() - t0;
        if (er != e) printf("NONDETERMINISTIC: energy %.17g != %.17g\n", er, e);
    }
    qsort(t, reps, sizeof(double), cmp);
    const double med = t[reps / 2];
    const double gib = (double)cgq_evaluator_device_bytes(ev) / 1073741824.0;
    printf("%s %s atoms %lld device %s %s: %.3f ms/step median of %d (min %.3f), %.2f us/atom-step, E=%.10f, "
           "GPU memory %.2f GiB (%.1f KiB/atom)\n", argv[1], argv[2], (long long)n, argv[6], cgq_evaluator_backend(ev),
           1e3 * med, reps, 1e3 * t[0], 1e6 * med / n, e, gib, gib * 1048576.0 / (double)n);
    cgq_evaluator_free(ev);
    cgq_model_free(m);
    bench_system_free(&s);
    free(f);
    free(f2);
    return 0;
}
