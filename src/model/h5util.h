/* h5util.h: validated reads of HDF5 attributes and datasets; every failure names the object. */
#ifndef CGQ_H5UTIL_H
#define CGQ_H5UTIL_H

#include <hdf5.h>
#include <stdint.h>

#include "cgequi.h"

#define CGQ_H5_MAX_RANK 8
/* No dataset of a model is larger than this (1 GiB of float64): guards against corrupt shapes. */
#define CGQ_H5_MAX_ELEMENTS ((size_t)1 << 27)

typedef struct cgq_h5 {
    hid_t file;
    const char *path; /* file name for messages */
} cgq_h5;

int cgq_h5_exists(hid_t loc, const char *name);
cgq_status cgq_h5_group(const cgq_h5 *f, hid_t loc, const char *name, const char *where, hid_t *out);
cgq_status cgq_h5_attr_string(const cgq_h5 *f, hid_t loc, const char *name, const char *where,
                              char *buf, size_t size);
cgq_status cgq_h5_attr_double(const cgq_h5 *f, hid_t loc, const char *name, const char *where, double *out);
cgq_status cgq_h5_attr_int(const cgq_h5 *f, hid_t loc, const char *name, const char *where, int64_t *out);
/* Integer array attribute, malloc'd; *n receives its length. */
cgq_status cgq_h5_attr_int_array(const cgq_h5 *f, hid_t loc, const char *name, const char *where,
                                 int32_t **out, int64_t *n);
/* Dataset as float64 / int32, malloc'd. rank/dims receive its shape. If expect_rank >= 0 the rank
 * must match, and every expect_dims[k] >= 0 must match. */
cgq_status cgq_h5_read_double(const cgq_h5 *f, hid_t loc, const char *name, const char *where,
                              int expect_rank, const int64_t *expect_dims, double **out, int *rank,
                              int64_t *dims);
cgq_status cgq_h5_read_int(const cgq_h5 *f, hid_t loc, const char *name, const char *where,
                           int expect_rank, const int64_t *expect_dims, int32_t **out, int *rank,
                           int64_t *dims);

#endif
