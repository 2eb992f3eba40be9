/* fuzz_model_load.c: libFuzzer target for the model loader's validation. The fuzz input is a list of
 * edits applied through the HDF5 API to a copy of a real model (CGQ_FUZZ_SEED_MODEL): delete an
 * object, reshape a dataset, write extreme values (NaN, inf, huge, negative) into a dataset or an
 * attribute. Every edited file must load with a clear status or evaluate cleanly, never crash.
 * (Raw byte mutations are not used: they mostly exercise libhdf5's own parser, which is not hardened
 * against corrupt files; a heap overflow inside H5Aexists of libhdf5 1.10.8 was found that way.) */
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cgequi.h"

#ifndef CGQ_FUZZ_SEED_MODEL
#error "define CGQ_FUZZ_SEED_MODEL"
#endif

#define MAX_PATHS 4096
static char *g_paths[MAX_PATHS];
static int g_kinds[MAX_PATHS]; /* 0 group, 1 dataset */
static int g_n;
static unsigned char *g_seed;
static size_t g_seed_size;

static herr_t collect(hid_t o, const char *name, const H5O_info_t *info, void *op) {
    (void)o, (void)op;
    if (g_n < MAX_PATHS && strcmp(name, ".")) {
        g_paths[g_n] = strdup(name);
        g_kinds[g_n++] = info->type == H5O_TYPE_DATASET;
    }
    return 0;
}

static void init(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    FILE *f = fopen(CGQ_FUZZ_SEED_MODEL, "rb");
    fseek(f, 0, SEEK_END);
    g_seed_size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    g_seed = malloc(g_seed_size);
    if (fread(g_seed, 1, g_seed_size, f) != g_seed_size) abort();
    fclose(f);
    hid_t h = H5Fopen(CGQ_FUZZ_SEED_MODEL, H5F_ACC_RDONLY, H5P_DEFAULT);
    H5Ovisit2(h, H5_INDEX_NAME, H5_ITER_NATIVE, collect, NULL, H5O_INFO_BASIC);
    H5Fclose(h);
}

static double special(uint8_t b, uint32_t r) {
    static const double v[] = {NAN, INFINITY, -INFINITY, 1e300, -1e300, 0.0, -1.0, 1e-300, 1e9, 3.0};
    return b < 10 ? v[b] : (double)(int32_t)r;
}

static void edit(hid_t file, const uint8_t *d, size_t n) {
    while (n >= 8) {
        const int idx = (d[0] | d[1] << 8) % g_n, op = d[2] % 5;
        const uint32_t r = (uint32_t)d[4] | (uint32_t)d[5] << 8 | (uint32_t)d[6] << 16 | (uint32_t)d[7] << 24;
        const char *path = g_paths[idx];
        if (op == 0) { /* delete */
            H5Ldelete(file, path, H5P_DEFAULT);
        } else if (op == 1 && g_kinds[idx]) { /* reshape: replace by a dataset of other dims */
            hsize_t dims[3] = {1 + d[3] % 40, 1 + d[4] % 7, 1 + d[5] % 7};
            const int rank = 1 + d[6] % 3;
            if (H5Ldelete(file, path, H5P_DEFAULT) >= 0) {
                hid_t sp = H5Screate_simple(rank, dims, NULL);
                hid_t ds = H5Dcreate2(file, path, d[7] & 1 ? H5T_NATIVE_INT : H5T_NATIVE_DOUBLE, sp, H5P_DEFAULT,
                                      H5P_DEFAULT, H5P_DEFAULT);
                if (ds >= 0) H5Dclose(ds);
                H5Sclose(sp);
            }
        } else if (op == 2 && g_kinds[idx]) { /* extreme value into element r */
            hid_t ds = H5Dopen2(file, path, H5P_DEFAULT);
            if (ds >= 0) {
                hid_t sp = H5Dget_space(ds);
                hssize_t np = H5Sget_simple_extent_npoints(sp);
                if (np > 0) {
                    hsize_t coord[8] = {0}, dims[8];
                    int rank = H5Sget_simple_extent_dims(sp, dims, NULL);
                    hsize_t lin = r % (hsize_t)np;
                    for (int k = rank - 1; k >= 0; k--) coord[k] = lin % dims[k], lin /= dims[k];
                    H5Sselect_elements(sp, H5S_SELECT_SET, 1, coord);
                    hsize_t one = 1;
                    hid_t ms = H5Screate_simple(1, &one, NULL);
                    double v = special(d[3], r);
                    H5Dwrite(ds, H5T_NATIVE_DOUBLE, ms, sp, H5P_DEFAULT, &v);
                    H5Sclose(ms);
                }
                H5Sclose(sp);
                H5Dclose(ds);
            }
        } else if (op == 3) { /* numeric attribute of the object (or root) */
            hid_t o = H5Oopen(file, d[7] & 1 ? "/" : path, H5P_DEFAULT);
            if (o >= 0) {
                H5O_info_t info;
                H5Oget_info2(o, &info, H5O_INFO_NUM_ATTRS);
                if (info.num_attrs > 0) {
                    hid_t a = H5Aopen_by_idx(o, ".", H5_INDEX_NAME, H5_ITER_NATIVE, r % info.num_attrs, H5P_DEFAULT,
                                             H5P_DEFAULT);
                    if (a >= 0) {
                        hid_t t = H5Aget_type(a);
                        hid_t sp = H5Aget_space(a);
                        if (H5Tget_class(t) != H5T_STRING && H5Sget_simple_extent_npoints(sp) == 1) {
                            double v = special(d[3], r);
                            H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
                        } else if (H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) > 0) {
                            static const char *s[] = {"", "0e", "1000000x9o", "x", "128x0e+", "nequip", "float32", "zbl"};
                            const char *v = s[d[3] % 8];
                            H5Awrite(a, t, &v);
                        }
                        H5Sclose(sp);
                        H5Tclose(t);
                        H5Aclose(a);
                    }
                }
                H5Oclose(o);
            }
        }
        d += 8, n -= 8;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_seed) init();
    char path[64];
    snprintf(path, sizeof path, "/tmp/cgq_fuzz_%d.h5", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(g_seed, 1, g_seed_size, f);
    fclose(f);
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (file < 0) return 0;
    edit(file, data, size);
    H5Fclose(file);
    cgq_model *m = NULL;
    if (cgq_model_load(path, &m) == CGQ_STATUS_OK) {
        /* a file that loads must also evaluate or fail cleanly */
        cgq_evaluator *ev = NULL;
        if (cgq_evaluator_create(m, NULL, &ev) == CGQ_STATUS_OK) {
            double pos[9] = {0, 0, 0, 0.9, 0.3, 0.1, -0.4, 0.8, 0.2};
            int32_t z[3] = {cgq_model_species_z(m, 0), cgq_model_species_z(m, 0), cgq_model_species_z(m, 0)};
            cgq_system s = {3, pos, z, {0}, {0, 0, 0}};
            double forces[9];
            cgq_result res = {0};
            res.forces = forces;
            cgq_evaluate_system(ev, &s, &res);
            cgq_evaluator_free(ev);
        }
        cgq_model_free(m);
    }
    unlink(path);
    return 0;
}
