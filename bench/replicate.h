/* replicate.h: the benchmarks' structures: the first frame of an .xyz file repeated nx x ny x nz times along
 * its cell vectors (e.g. the 192-atom water frame x 3 x 3 x 3 = the 5,184-atom box). Header-only, C and C++. */
#ifndef CGQ_BENCH_REPLICATE_H
#define CGQ_BENCH_REPLICATE_H

#include <stdio.h>
#include <stdlib.h>

#include "cgequi.h"
#include "io/xyz.h"

/* Fills *s (positions and numbers malloc'ed, free with bench_system_free); returns 0 on success. */
static int bench_replicated_system(const char *path, int nx, int ny, int nz, cgq_system *s) {
    FILE *fp = fopen(path, "r");
    cgq_frame fr = {0};
    int eof = 0;
    int64_t line = 0;
    if (!fp || cgq_xyz_read_frame(fp, path, &line, &fr, &eof) || eof) {
        if (fp) fclose(fp);
        return fprintf(stderr, "%s: not a structure (%s)\n", path, fp ? cgq_last_error() : "cannot open"), 1;
    }
    fclose(fp);
    const int64_t n0 = fr.n_atoms, n = n0 * nx * ny * nz;
    double *pos = (double *)malloc(sizeof(double) * 3 * (size_t)n);
    int32_t *z = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    if (!pos || !z) return free(pos), free(z), fprintf(stderr, "out of memory for %lld atoms\n", (long long)n), 1;
    int64_t k = 0;
    for (int a = 0; a < nx; a++)
        for (int b = 0; b < ny; b++)
            for (int c = 0; c < nz; c++)
                for (int64_t i = 0; i < n0; i++, k++) {
                    z[k] = fr.atomic_numbers[i];
                    for (int d = 0; d < 3; d++)
                        pos[3 * k + d] = fr.positions[3 * i + d] + a * fr.cell[d] + b * fr.cell[3 + d] + c * fr.cell[6 + d];
                }
    s->n_atoms = n, s->positions = pos, s->atomic_numbers = z;
    for (int d = 0; d < 3; d++) {
        s->cell[d] = nx * fr.cell[d], s->cell[3 + d] = ny * fr.cell[3 + d], s->cell[6 + d] = nz * fr.cell[6 + d];
        s->pbc[d] = fr.pbc[d];
    }
    free(fr.atomic_numbers);
    free(fr.positions);
    return 0;
}

static void bench_system_free(cgq_system *s) {
    free((void *)s->positions);
    free((void *)s->atomic_numbers);
}

#endif
