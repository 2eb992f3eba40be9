/* bench_eval.c: end-to-end timing of one energy+forces+virial evaluation (what an MD step costs) of a
 * model on a replicated structure, on the CPU or the GPU, after checking GPU against CPU once.
 * usage: bench_eval MODEL.h5 STRUCTURE.xyz NX NY NZ DEVICE(cpu|cuda) REPEATS [--check] [--fp32] [--pairs]
 * (--check: against the CPU once, energy and forces; --fp32: precision fp32, else fp64; --pairs: as in MD, the
 * candidate pairs (cutoff + 1 A skin, periodic images as points) set once and each step only positions passed
 * (cgq_evaluate_pairs), else cgq_evaluate_system, which builds the neighbor list every call; with --pairs it also
 * times what an MD code's candidate rebuild costs: the candidate list on the host and cgq_evaluator_set_pairs, or
 * cgq_evaluator_build_pairs) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cgequi.h"
#include "graph/neighbor.h"
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

/* The structure as an MD code hands it over: atoms, then their periodic images within cutoff + skin as points
 * (folded onto their atoms), and the candidate pairs. */
typedef struct bench_pairs {
    cgq_pair_list list;
    int32_t *cand, *node, *species;
    double *x;
} bench_pairs;

typedef struct image_key {
    int32_t s, S[3];
    int64_t e;
} image_key;

static int cmp_image(const void *a, const void *b) {
    const image_key *p = a, *q = b;
    if (p->s != q->s) return p->s < q->s ? -1 : 1;
    for (int k = 0; k < 3; k++)
        if (p->S[k] != q->S[k]) return p->S[k] < q->S[k] ? -1 : 1;
    return 0;
}

static int build_pairs(const cgq_model *m, const cgq_system *s, double skin, bench_pairs *bp) {
    static cgq_neighbor_list nl; /* kept: the list's row_ptr is the candidates' */
    const int64_t n = s->n_atoms;
    if (cgq_neighbor_list_build(&nl, n, s->positions, s->cell, s->pbc, cgq_model_cutoff(m) + skin))
        return fprintf(stderr, "%s\n", cgq_last_error()), 0;
    const int64_t C = nl.n_edges;
    image_key *keys = malloc(sizeof(image_key) * (C + 1));
    bp->cand = malloc(sizeof(int32_t) * (C + 1));
    int64_t nk = 0;
    for (int64_t e = 0; e < C; e++) {
        const int32_t *S = nl.shift + 3 * e;
        if (S[0] || S[1] || S[2]) keys[nk++] = (image_key){nl.sender[e], {S[0], S[1], S[2]}, e};
        else bp->cand[e] = nl.sender[e];
    }
    qsort(keys, nk, sizeof(image_key), cmp_image);
    int64_t np = n;
    bp->x = malloc(sizeof(double) * 3 * (n + nk + 1));
    bp->node = malloc(sizeof(int32_t) * (n + nk + 1));
    memcpy(bp->x, s->positions, sizeof(double) * 3 * n);
    for (int64_t i = 0; i < n; i++) bp->node[i] = (int32_t)i;
    for (int64_t k = 0; k < nk; k++) {
        if (k == 0 || cmp_image(&keys[k], &keys[k - 1])) { /* a new image point */
            const image_key *q = &keys[k];
            for (int d = 0; d < 3; d++)
                bp->x[3 * np + d] = s->positions[3 * q->s + d] + q->S[0] * s->cell[d] + q->S[1] * s->cell[3 + d] +
                                    q->S[2] * s->cell[6 + d];
            bp->node[np++] = q->s;
        }
        bp->cand[keys[k].e] = (int32_t)(np - 1);
    }
    free(keys);
    bp->species = malloc(sizeof(int32_t) * (n + 1));
    for (int64_t i = 0; i < n; i++) bp->species[i] = cgq_model_species_index(m, s->atomic_numbers[i]);
    bp->list = (cgq_pair_list){np, n, n, bp->species, nl.row_ptr, bp->cand, bp->node, NULL};
    printf("pairs: %lld atoms, %lld points, %lld candidate pairs (cutoff + %.1f A)\n", (long long)n, (long long)np,
           (long long)C, skin);
    return 1;
}

static int run_pairs(cgq_evaluator *ev, const bench_pairs *bp, double *f, double *energy);

/* A candidate rebuild in MD as pair_cgequi did it before session 41 (the points without periodicity, the atoms as
 * receivers: the candidate list on the host, then cgq_evaluator_set_pairs) and as it does it now
 * (cgq_evaluator_build_pairs: on the GPU where the step runs there), each the median of reps runs, in ms; then one
 * step on each list, which must agree bitwise (the same candidates in the same order). The bench's own list is set
 * again after. */
static int time_rebuild(cgq_evaluator *ev, const cgq_model *m, const bench_pairs *bp, int reps) {
    cgq_neighbor_list nl = {0};
    nl.senders_only = 1; /* as pair_cgequi */
    const int32_t nopbc[3] = {0, 0, 0};
    const double nocell[9] = {0}, radius = cgq_model_cutoff(m) + 1.0;
    const cgq_pair_list *l = &bp->list;
    const cgq_point_set pts = {l->n_points, l->n_local, l->n_nodes, l->species, l->point_node, NULL, bp->x};
    double t_nl[16], t_set[16], t_build[16];
    reps = reps < 1 ? 1 : reps > 16 ? 16 : reps;
    cgq_pair_list host = *l;
    for (int r = 0; r < reps; r++) {
        const double t0 = now();
        if (cgq_neighbor_list_build_receivers(&nl, l->n_points, l->n_local, bp->x, nocell, nopbc, radius))
            return fprintf(stderr, "%s\n", cgq_last_error()), 0;
        const double t1 = now();
        host.row_ptr = nl.row_ptr, host.candidate = nl.sender;
        if (cgq_evaluator_set_pairs(ev, &host)) return fprintf(stderr, "%s\n", cgq_last_error()), 0;
        const double t2 = now();
        if (cgq_evaluator_build_pairs(ev, &pts, radius)) return fprintf(stderr, "%s\n", cgq_last_error()), 0;
        t_nl[r] = t1 - t0, t_set[r] = t2 - t1, t_build[r] = now() - t2;
    }
    const int64_t n = l->n_nodes;
    double *fd = malloc(sizeof(double) * (3 * n + 3)), *fh = malloc(sizeof(double) * (3 * n + 3)), ed = 0, eh = 0;
    int ok = run_pairs(ev, bp, fd, &ed) && cgq_evaluator_set_pairs(ev, &host) == CGQ_STATUS_OK &&
             run_pairs(ev, bp, fh, &eh) && cgq_evaluator_set_pairs(ev, l) == CGQ_STATUS_OK;
    if (ok) {
        qsort(t_nl, reps, sizeof(double), cmp), qsort(t_set, reps, sizeof(double), cmp);
        qsort(t_build, reps, sizeof(double), cmp);
        const int same = !memcmp(&ed, &eh, sizeof ed) && !memcmp(fd, fh, sizeof(double) * 3 * n);
        printf("rebuild as in MD (%lld points, %lld receivers, %lld candidates): host candidate list %.3f ms + set pairs "
               "%.3f ms; build_pairs %.3f ms (medians of %d); a step on each list: %s\n", (long long)l->n_points,
               (long long)l->n_local, (long long)nl.row_ptr[l->n_local], 1e3 * t_nl[reps / 2], 1e3 * t_set[reps / 2],
               1e3 * t_build[reps / 2], reps, same ? "bitwise identical" : "DIFFERENT");
    }
    free(fd), free(fh);
    cgq_neighbor_list_free(&nl);
    return ok;
}

static int run_pairs(cgq_evaluator *ev, const bench_pairs *bp, double *f, double *energy) {
    cgq_node_result r = {0};
    r.forces = f;
    if (cgq_evaluate_pairs(ev, bp->x, NULL, &r) != CGQ_STATUS_OK) {
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
    int check = 0, fp32 = 0, pairs = 0; /* options after the positional arguments, in any order */
    for (int i = 8; i < argc; i++) {
        if (!strcmp(argv[i], "--check")) check = 1;
        else if (!strcmp(argv[i], "--fp32")) fp32 = 1;
        else if (!strcmp(argv[i], "--pairs")) pairs = 1;
        else return fprintf(stderr, "bench_eval: unknown option '%s' (--check, --fp32, --pairs)\n", argv[i]), 2;
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
    bench_pairs bp;
    if (pairs && (!build_pairs(m, &s, 1.0, &bp) || cgq_evaluator_set_pairs(ev, &bp.list)))
        return fprintf(stderr, "%s\n", cgq_last_error()), 1;
#define RUN(fo, eo) (pairs ? run_pairs(ev, &bp, fo, eo) : run(ev, &s, fo, eo))
    if (!RUN(f, &e) || !RUN(f, &e)) return 1; /* warm-up */
    if (pairs && !time_rebuild(ev, m, &bp, 5)) return 1;
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
        if (!RUN(f, &er)) return 1;
        t[r] = now() - t0;
        if (er != e) printf("NONDETERMINISTIC: energy %.17g != %.17g\n", er, e);
    }
    qsort(t, reps, sizeof(double), cmp);
    const double med = t[reps / 2];
    const double gib = (double)cgq_evaluator_device_bytes(ev) / 1073741824.0;
    printf("%s%s %s atoms %lld device %s %s: %.3f ms/step median of %d (min %.3f), %.2f us/atom-step, E=%.10f, "
           "GPU memory %.2f GiB (%.1f KiB/atom)\n", pairs ? "[pairs] " : "", argv[1], argv[2], (long long)n, argv[6], cgq_evaluator_backend(ev),
           1e3 * med, reps, 1e3 * t[0], 1e6 * med / n, e, gib, gib * 1048576.0 / (double)n);
    cgq_evaluator_free(ev);
    cgq_model_free(m);
    bench_system_free(&s);
    free(f);
    free(f2);
    return 0;
}
