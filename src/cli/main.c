/* main.c: the `cgequi` command line: eval (JSON energies/forces/virials), info, check (self-tests). */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgequi.h"
#include "io/xyz.h"
#include "kernels/cpu/radial_spline.h"
#include "model/h5util.h"

static int usage(FILE *f) {
    fprintf(f,
            "usage:\n"
            "  cgequi eval MODEL.h5 STRUCTURE.xyz [--precision fp64|fp32] [--device cpu|cuda|auto]\n"
            "      energy (eV), forces (eV/A), virial (eV), stress (eV/A^3), atomic_energies as JSON, one line per frame\n"
            "  cgequi info MODEL.h5      summary of a model file\n"
            "  cgequi check MODEL.h5     recompute the file's self-test structures; non-zero exit above tolerance\n"
            "  cgequi --version\n");
    return 2;
}

static int report(const char *what, cgq_status st) {
    fprintf(stderr, "cgequi: %s: %s\n", what, cgq_last_error()[0] ? cgq_last_error() : cgq_status_string(st));
    return 1;
}

static void print_array(const double *a, int64_t n) {
    putchar('[');
    for (int64_t i = 0; i < n; i++) printf("%s%.17g", i ? ", " : "", a[i]);
    putchar(']');
}

static void print_matrix(const double *a, int64_t rows, int64_t cols) {
    putchar('[');
    for (int64_t i = 0; i < rows; i++) {
        if (i) printf(", ");
        print_array(a + i * cols, cols);
    }
    putchar(']');
}

static double cell_volume(const double c[9]) {
    return fabs(c[0] * (c[4] * c[8] - c[5] * c[7]) - c[1] * (c[3] * c[8] - c[5] * c[6]) +
                c[2] * (c[3] * c[7] - c[4] * c[6]));
}

static int parse_evaluator_options(int argc, char **argv, int first, cgq_evaluator_params *p) {
    for (int i = first; i < argc; i++) {
        if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(v, "fp64")) p->precision = CGQ_PRECISION_FP64;
            else if (!strcmp(v, "fp32")) p->precision = CGQ_PRECISION_FP32;
            else return fprintf(stderr, "cgequi: --precision takes fp64 or fp32, not '%s'\n", v), 0;
        } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(v, "cpu")) p->device = CGQ_DEVICE_CPU;
            else if (!strcmp(v, "cuda")) p->device = CGQ_DEVICE_CUDA;
            else if (!strcmp(v, "auto")) p->device = CGQ_DEVICE_AUTO;
            else return fprintf(stderr, "cgequi: --device takes cpu, cuda or auto, not '%s'\n", v), 0;
        } else {
            return fprintf(stderr, "cgequi: unknown option '%s'\n", argv[i]), 0;
        }
    }
    return 1;
}

/* Loads argv[2] and creates an evaluator with the options from argv[first] on; 0 or an exit status. */
static int open_model(int argc, char **argv, int first, cgq_model **model, cgq_evaluator **ev) {
    cgq_evaluator_params params = cgq_evaluator_default_params();
    if (!parse_evaluator_options(argc, argv, first, &params)) return 2;
    cgq_status st = cgq_model_load(argv[2], model);
    if (st) return report("loading the model", st);
    st = cgq_evaluator_create(*model, &params, ev);
    if (st) {
        cgq_model_free(*model);
        return report("creating the evaluator", st);
    }
    return 0;
}

typedef struct outputs {
    double *forces, *energies, *virials;
} outputs;

static int alloc_outputs(outputs *o, int64_t n) {
    size_t k = (size_t)(n > 0 ? n : 1);
    o->forces = malloc(sizeof(double) * 3 * k);
    o->energies = malloc(sizeof(double) * k);
    o->virials = malloc(sizeof(double) * 9 * k);
    return o->forces && o->energies && o->virials;
}

static void free_outputs(outputs *o) {
    free(o->forces);
    free(o->energies);
    free(o->virials);
}

static int cmd_eval(int argc, char **argv) {
    if (argc < 4) return usage(stderr);
    cgq_model *model = NULL;
    cgq_evaluator *ev = NULL;
    int rc = open_model(argc, argv, 4, &model, &ev);
    if (rc) return rc;
    cgq_status st;
    FILE *f = fopen(argv[3], "r");
    if (!f) {
        fprintf(stderr, "cgequi: %s: cannot open the structure file\n", argv[3]);
        rc = 1;
    }
    int64_t line = 0;
    for (int frame_no = 0; f; frame_no++) {
        cgq_frame fr = {0};
        int eof = 0;
        st = cgq_xyz_read_frame(f, argv[3], &line, &fr, &eof);
        if (st) {
            rc = report("reading the structure", st);
            break;
        }
        if (eof) break;
        outputs o;
        if (!alloc_outputs(&o, fr.n_atoms)) {
            fprintf(stderr, "cgequi: out of memory\n");
            rc = 1;
            free_outputs(&o);
            cgq_frame_free(&fr);
            break;
        }
        cgq_system sys = {fr.n_atoms, fr.positions, fr.atomic_numbers, {0}, {fr.pbc[0], fr.pbc[1], fr.pbc[2]}};
        memcpy(sys.cell, fr.cell, sizeof sys.cell);
        cgq_result res = {0};
        res.forces = o.forces;
        res.atomic_energies = o.energies;
        res.atomic_virials = o.virials;
        st = cgq_evaluate_system(ev, &sys, &res);
        if (st) {
            char what[64];
            snprintf(what, sizeof what, "frame %d", frame_no);
            rc = report(what, st);
        } else {
            const double vol = cell_volume(fr.cell);
            double stress[9];
            for (int k = 0; k < 9; k++) stress[k] = vol > 0 ? -res.virial[k] / vol : 0.0;
            printf("{\"n_atoms\": %lld, \"energy\": %.17g, \"forces\": ", (long long)fr.n_atoms, res.energy);
            print_matrix(o.forces, fr.n_atoms, 3);
            printf(", \"virial\": ");
            print_matrix(res.virial, 3, 3);
            printf(", \"stress\": ");
            print_matrix(stress, 3, 3);
            printf(", \"atomic_energies\": ");
            print_array(o.energies, fr.n_atoms);
            printf("}\n");
        }
        free_outputs(&o);
        cgq_frame_free(&fr);
        if (rc) break;
    }
    if (f) fclose(f);
    cgq_evaluator_free(ev);
    cgq_model_free(model);
    return rc;
}

/* What fp32 on the GPU does with the model's radial MLPs: the tables it builds (kernels/cpu/radial_spline.h) and
 * their measured accuracy, or why it runs the MLPs per edge. */
static int describe_radial_tables(const cgq_model *m) {
    cgq_radial_mlps mlps;
    cgq_radial_mlps_of(m, &mlps);
    char tables[2048] = "";
    size_t pos = 0;
    int all = mlps.n_layers > 0;
    for (int t = 0; t < mlps.n_layers && all; t++) {
        cgq_radial_spline s;
        const cgq_status st = cgq_radial_spline_build(&mlps.rm[t], CGQ_SPLINE_TOL_VALUE, CGQ_SPLINE_TOL_SLOPE,
                                                      CGQ_SPLINE_MAX_INTERVALS, &s);
        if (st) return report("building the radial tables", st);
        if (s.n_int && pos < sizeof tables)
            pos += (size_t)snprintf(tables + pos, sizeof tables - pos,
                                    "\n             layer %d: %d intervals, error %.1e of the largest value, %.1e of "
                                    "the largest slope",
                                    t, s.n_int, s.err_value, s.err_slope);
        all = s.n_int > 0;
        cgq_radial_spline_free(&s);
    }
    if (all)
        printf("fp32 GPU     the radial MLPs' hidden layers from tables:%s\n", tables);
    else
        printf("fp32 GPU     the radial MLPs run per edge (%s)\n",
               m->agnesi ? "the Agnesi transform makes their input depend on the species pair"
                         : "no table met the tolerance, or an MLP has no hidden layer");
    return 0;
}

static int cmd_info(int argc, char **argv) {
    if (argc != 3) return usage(stderr);
    cgq_model *model = NULL;
    cgq_status st = cgq_model_load(argv[2], &model);
    if (st) return report("loading the model", st);
    char buf[8192];
    cgq_model_describe(model, buf, sizeof buf);
    printf("%s: cgequi model file\n%s", argv[2], buf);
    const int rc = describe_radial_tables(model);
    cgq_model_free(model);
    return rc;
}

static double max_abs_diff(const double *a, const double *b, int64_t n, double *ref_max) {
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs(a[i] - b[i]));
        r = fmax(r, fabs(b[i]));
    }
    if (ref_max) *ref_max = r;
    return d;
}

/* One self-test case: recompute and compare with the reference stored by the exporter. */
static int check_case(cgq_evaluator *ev, const cgq_h5 *f, hid_t g, const char *name, int *failed) {
    int32_t *Z = NULL, *pbc = NULL;
    double *pos = NULL, *cell = NULL, *F = NULL, *ae = NULL, *vir = NULL;
    int64_t dims[CGQ_H5_MAX_RANK];
    double E_ref;
    int ok = 0;
    outputs o = {0};
    if (cgq_h5_read_int(f, g, "atomic_numbers", name, 1, NULL, &Z, NULL, dims)) goto done;
    const int64_t n = dims[0];
    if (cgq_h5_read_double(f, g, "positions", name, 2, (int64_t[]){n, 3}, &pos, NULL, NULL) ||
        cgq_h5_read_double(f, g, "cell", name, 2, (int64_t[]){3, 3}, &cell, NULL, NULL) ||
        cgq_h5_read_int(f, g, "pbc", name, 1, (int64_t[]){3}, &pbc, NULL, NULL) ||
        cgq_h5_read_double(f, g, "forces", name, 2, (int64_t[]){n, 3}, &F, NULL, NULL) ||
        cgq_h5_read_double(f, g, "atomic_energies", name, 1, (int64_t[]){n}, &ae, NULL, NULL) ||
        cgq_h5_attr_double(f, g, "energy", name, &E_ref))
        goto done;
    if (cgq_h5_exists(g, "virial") && cgq_h5_read_double(f, g, "virial", name, 2, (int64_t[]){3, 3}, &vir, NULL, NULL))
        goto done;
    if (!alloc_outputs(&o, n)) goto done;
    cgq_system sys = {n, pos, Z, {0}, {pbc[0], pbc[1], pbc[2]}};
    memcpy(sys.cell, cell, sizeof sys.cell);
    cgq_result res = {0};
    res.forces = o.forces;
    res.atomic_energies = o.energies;
    if (cgq_evaluate_system(ev, &sys, &res)) goto done;
    double fref, vref;
    const double dE = fabs(res.energy - E_ref) / fmax(fabs(E_ref), 1e-300);
    const double dF = max_abs_diff(o.forces, F, 3 * n, &fref);
    const double dA = max_abs_diff(o.energies, ae, n, NULL);
    const double dV = vir ? max_abs_diff(res.virial, vir, 9, &vref) / fmax(vref, 1e-300) : 0.0;
    const int pass = dE <= 1e-10 && dF <= 1e-8 && dA <= 1e-8 && dV <= 1e-8;
    printf("%-24s %6lld atoms  energy rel %.2e  forces max %.2e eV/A  atomic energies max %.2e eV  virial rel %.2e  %s\n",
           name, (long long)n, dE, dF, dA, dV, pass ? "ok" : "FAIL");
    if (!pass) *failed = 1;
    ok = 1;
done:
    free(Z), free(pbc), free(pos), free(cell), free(F), free(ae), free(vir);
    free_outputs(&o);
    return ok;
}

static int cmd_check(int argc, char **argv) {
    if (argc < 3) return usage(stderr);
    cgq_model *model = NULL;
    cgq_evaluator *ev = NULL;
    int rc = open_model(argc, argv, 3, &model, &ev);
    if (rc) return rc;
    hid_t file = H5Fopen(argv[2], H5F_ACC_RDONLY, H5P_DEFAULT);
    cgq_h5 f = {file, argv[2]};
    int failed = 0, cases = 0;
    if (file >= 0 && cgq_h5_exists(file, "selftest")) {
        hid_t st_g = H5Gopen2(file, "selftest", H5P_DEFAULT);
        hsize_t n = 0;
        H5Gget_num_objs(st_g, &n);
        for (hsize_t k = 0; k < n; k++) {
            char name[256];
            H5Gget_objname_by_idx(st_g, k, name, sizeof name);
            hid_t g = H5Gopen2(st_g, name, H5P_DEFAULT);
            if (!check_case(ev, &f, g, name, &failed)) rc = report(name, CGQ_STATUS_BAD_FILE);
            H5Gclose(g);
            cases++;
        }
        H5Gclose(st_g);
    }
    if (file >= 0) H5Fclose(file);
    if (!cases && !rc) {
        fprintf(stderr, "cgequi: %s has no self-test structures (exported with --no-selftest?)\n", argv[2]);
        rc = 1;
    }
    cgq_evaluator_free(ev);
    cgq_model_free(model);
    if (!rc) printf("%s\n", failed ? "check FAILED: results differ from the reference beyond tolerance" : "check passed");
    return rc ? rc : failed;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage(stderr);
    if (!strcmp(argv[1], "eval")) return cmd_eval(argc, argv);
    if (!strcmp(argv[1], "info")) return cmd_info(argc, argv);
    if (!strcmp(argv[1], "check")) return cmd_check(argc, argv);
    if (!strcmp(argv[1], "--version")) return printf("cgequi %s\n", CGQ_VERSION_STRING), 0;
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) return usage(stdout), 0;
    fprintf(stderr, "cgequi: unknown command '%s'\n", argv[1]);
    return usage(stderr);
}
