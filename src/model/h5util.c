/* h5util.c: validated HDF5 reads. HDF5's own error printing is switched off; we report instead. */
#include "model/h5util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

int cgq_h5_exists(hid_t loc, const char *name) {
    return H5Lexists(loc, name, H5P_DEFAULT) > 0;
}

static int attr_exists(hid_t loc, const char *name) { return H5Aexists(loc, name) > 0; }

cgq_status cgq_h5_group(const cgq_h5 *f, hid_t loc, const char *name, const char *where, hid_t *out) {
    if (!cgq_h5_exists(loc, name))
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: group %s/%s is missing (re-export the model with tools/cgequi-export)",
                        f->path, where, name);
    *out = H5Gopen2(loc, name, H5P_DEFAULT);
    if (*out < 0) return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s/%s is not a readable group", f->path, where, name);
    return CGQ_STATUS_OK;
}

static cgq_status open_attr(const cgq_h5 *f, hid_t loc, const char *name, const char *where, hid_t *a) {
    if (!attr_exists(loc, name))
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: attribute '%s' of %s is missing", f->path, name, where);
    *a = H5Aopen(loc, name, H5P_DEFAULT);
    if (*a < 0) return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: attribute '%s' of %s is unreadable", f->path, name, where);
    return CGQ_STATUS_OK;
}

cgq_status cgq_h5_attr_string(const cgq_h5 *f, hid_t loc, const char *name, const char *where, char *buf,
                              size_t size) {
    hid_t a = -1;
    CGQ_TRY(open_attr(f, loc, name, where, &a));
    cgq_status st = CGQ_STATUS_OK;
    hid_t ft = H5Aget_type(a);
    if (H5Tget_class(ft) != H5T_STRING) {
        st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: attribute '%s' of %s must be a string", f->path, name, where);
    } else if (H5Tis_variable_str(ft) > 0) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        H5Tset_cset(mt, H5Tget_cset(ft));
        char *s = NULL;
        if (H5Aread(a, mt, &s) < 0 || !s) {
            st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: attribute '%s' of %s is unreadable", f->path, name, where);
        } else {
            snprintf(buf, size, "%s", s);
            H5free_memory(s);
        }
        H5Tclose(mt);
    } else {
        size_t n = H5Tget_size(ft);
        char *tmp = calloc(n + 1, 1);
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, n + 1);
        if (!tmp || H5Aread(a, mt, tmp) < 0)
            st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: attribute '%s' of %s is unreadable", f->path, name, where);
        else
            snprintf(buf, size, "%s", tmp);
        free(tmp);
        H5Tclose(mt);
    }
    H5Tclose(ft);
    H5Aclose(a);
    return st;
}

static cgq_status read_scalar_attr(const cgq_h5 *f, hid_t loc, const char *name, const char *where,
                                   hid_t memtype, void *out) {
    hid_t a = -1;
    CGQ_TRY(open_attr(f, loc, name, where, &a));
    hid_t sp = H5Aget_space(a);
    hid_t ft = H5Aget_type(a);
    H5T_class_t cls = H5Tget_class(ft);
    hssize_t npts = H5Sget_simple_extent_npoints(sp);
    cgq_status st = CGQ_STATUS_OK;
    if ((cls != H5T_INTEGER && cls != H5T_FLOAT) || npts != 1)
        st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: attribute '%s' of %s must be a single number", f->path, name, where);
    else if (H5Aread(a, memtype, out) < 0)
        st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: attribute '%s' of %s is unreadable", f->path, name, where);
    H5Tclose(ft);
    H5Sclose(sp);
    H5Aclose(a);
    return st;
}

cgq_status cgq_h5_attr_double(const cgq_h5 *f, hid_t loc, const char *name, const char *where, double *out) {
    CGQ_TRY(read_scalar_attr(f, loc, name, where, H5T_NATIVE_DOUBLE, out));
    if (!isfinite(*out))
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: attribute '%s' of %s is not finite", f->path, name, where);
    return CGQ_STATUS_OK;
}

cgq_status cgq_h5_attr_int(const cgq_h5 *f, hid_t loc, const char *name, const char *where, int64_t *out) {
    long long v = 0;
    CGQ_TRY(read_scalar_attr(f, loc, name, where, H5T_NATIVE_LLONG, &v));
    *out = v;
    return CGQ_STATUS_OK;
}

cgq_status cgq_h5_attr_int_array(const cgq_h5 *f, hid_t loc, const char *name, const char *where,
                                 int32_t **out, int64_t *n) {
    hid_t a = -1;
    CGQ_TRY(open_attr(f, loc, name, where, &a));
    hid_t sp = H5Aget_space(a);
    hid_t ft = H5Aget_type(a);
    hssize_t npts = H5Sget_simple_extent_npoints(sp);
    cgq_status st = CGQ_STATUS_OK;
    *out = NULL;
    if (H5Tget_class(ft) != H5T_INTEGER || npts < 0 || npts > 100000) {
        st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: attribute '%s' of %s must be an integer array", f->path, name, where);
    } else {
        *out = malloc(sizeof(int32_t) * (size_t)(npts > 0 ? npts : 1));
        if (!*out) st = cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory reading %s", name);
        else if (npts > 0 && H5Aread(a, H5T_NATIVE_INT32, *out) < 0)
            st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: attribute '%s' of %s is unreadable", f->path, name, where);
        *n = npts;
    }
    if (st != CGQ_STATUS_OK) {
        free(*out);
        *out = NULL;
    }
    H5Tclose(ft);
    H5Sclose(sp);
    H5Aclose(a);
    return st;
}

static void format_dims(char *buf, size_t size, int rank, const int64_t *dims) {
    size_t pos = (size_t)snprintf(buf, size, "[");
    for (int k = 0; k < rank && pos < size; k++)
        pos += (size_t)snprintf(buf + pos, size - pos, "%s%lld", k ? "," : "", (long long)dims[k]);
    if (pos < size) snprintf(buf + pos, size - pos, "]");
}

static cgq_status read_dataset(const cgq_h5 *f, hid_t loc, const char *name, const char *where, int expect_rank,
                               const int64_t *expect_dims, hid_t memtype, size_t elsize, H5T_class_t want_class,
                               void **out, int *rank_out, int64_t *dims_out) {
    *out = NULL;
    if (!cgq_h5_exists(loc, name))
        return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: dataset %s/%s is missing (re-export the model with tools/cgequi-export)",
                        f->path, where, name);
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: %s/%s is not a readable dataset", f->path, where, name);
    hid_t sp = H5Dget_space(d);
    hid_t ft = H5Dget_type(d);
    cgq_status st = CGQ_STATUS_OK;
    int rank = H5Sget_simple_extent_ndims(sp);
    hsize_t hd[CGQ_H5_MAX_RANK];
    int64_t dims[CGQ_H5_MAX_RANK];
    if (rank < 0 || rank > CGQ_H5_MAX_RANK) {
        st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: dataset %s/%s has unsupported rank %d", f->path, where, name, rank);
        goto done;
    }
    H5Sget_simple_extent_dims(sp, hd, NULL);
    size_t count = 1;
    for (int k = 0; k < rank; k++) {
        dims[k] = (int64_t)hd[k];
        count *= (size_t)hd[k];
    }
    if (count > CGQ_H5_MAX_ELEMENTS) {
        st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: dataset %s/%s claims %zu elements (more than any model needs); the file "
                      "is corrupt", f->path, where, name, count);
        goto done;
    }
    {
        /* uncompressed data must be stored in full: a shorter file is truncated or corrupt */
        hid_t dcpl = H5Dget_create_plist(d);
        const int contiguous = dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CONTIGUOUS;
        if (dcpl >= 0) H5Pclose(dcpl);
        if (contiguous && count && H5Dget_storage_size(d) < count * H5Tget_size(ft)) {
            st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: dataset %s/%s holds fewer bytes than its shape needs (file truncated "
                          "or corrupt?)", f->path, where, name);
            goto done;
        }
    }
    if (H5Tget_class(ft) != want_class && !(want_class == H5T_FLOAT && H5Tget_class(ft) == H5T_INTEGER)) {
        st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: dataset %s/%s has the wrong element type (expected %s)", f->path,
                      where, name, want_class == H5T_FLOAT ? "float64" : "integer");
        goto done;
    }
    int shape_ok = expect_rank < 0 || rank == expect_rank;
    for (int k = 0; shape_ok && expect_rank >= 0 && k < rank; k++)
        if (expect_dims && expect_dims[k] >= 0 && expect_dims[k] != dims[k]) shape_ok = 0;
    if (!shape_ok) {
        char want[128], got[128];
        if (expect_dims) format_dims(want, sizeof want, expect_rank, expect_dims);
        else snprintf(want, sizeof want, "rank %d", expect_rank);
        format_dims(got, sizeof got, rank, dims);
        st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: dataset %s/%s has shape %s, expected %s (-1 = any)", f->path,
                      where, name, got, want);
        goto done;
    }
    *out = malloc(elsize * (count ? count : 1));
    if (!*out) {
        st = cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory reading %s/%s", where, name);
        goto done;
    }
    if (count && H5Dread(d, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0) {
        st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: dataset %s/%s could not be read (file truncated or corrupt?)",
                      f->path, where, name);
        goto done;
    }
    if (want_class == H5T_FLOAT) {
        const double *v = *out;
        for (size_t i = 0; i < count; i++)
            if (!isfinite(v[i])) {
                st = cgq_fail(CGQ_STATUS_BAD_FILE, "%s: dataset %s/%s contains a non-finite value at index %zu",
                              f->path, where, name, i);
                goto done;
            }
    }
    if (rank_out) *rank_out = rank;
    if (dims_out)
        for (int k = 0; k < rank; k++) dims_out[k] = dims[k];
done:
    if (st != CGQ_STATUS_OK) {
        free(*out);
        *out = NULL;
    }
    H5Tclose(ft);
    H5Sclose(sp);
    H5Dclose(d);
    return st;
}

cgq_status cgq_h5_read_double(const cgq_h5 *f, hid_t loc, const char *name, const char *where, int expect_rank,
                              const int64_t *expect_dims, double **out, int *rank, int64_t *dims) {
    return read_dataset(f, loc, name, where, expect_rank, expect_dims, H5T_NATIVE_DOUBLE, sizeof(double),
                        H5T_FLOAT, (void **)out, rank, dims);
}

cgq_status cgq_h5_read_int(const cgq_h5 *f, hid_t loc, const char *name, const char *where, int expect_rank,
                           const int64_t *expect_dims, int32_t **out, int *rank, int64_t *dims) {
    return read_dataset(f, loc, name, where, expect_rank, expect_dims, H5T_NATIVE_INT32, sizeof(int32_t),
                        H5T_INTEGER, (void **)out, rank, dims);
}
