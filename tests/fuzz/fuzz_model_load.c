/* fuzz_model_load.c: libFuzzer target: arbitrary bytes as a model file must give a status, never a crash.
 * Seed it with a real model (tests/fixtures/*.h5); mutations then hit the HDF5 metadata and our validation. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cgequi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/cgq_fuzz_%d.h5", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    cgq_model *m = NULL;
    if (cgq_model_load(path, &m) == CGQ_STATUS_OK) {
        /* a file that loads must also evaluate or fail cleanly */
        cgq_evaluator *ev = NULL;
        if (cgq_evaluator_create(m, NULL, &ev) == CGQ_STATUS_OK) {
            double pos[6] = {0, 0, 0, 0.9, 0.3, 0.1};
            int32_t z[2] = {cgq_model_species_z(m, 0), cgq_model_species_z(m, 0)};
            cgq_system s = {2, pos, z, {0}, {0, 0, 0}};
            double forces[6];
            cgq_result r = {0};
            r.forces = forces;
            cgq_evaluate_system(ev, &s, &r);
            cgq_evaluator_free(ev);
        }
        cgq_model_free(m);
    }
    unlink(path);
    return 0;
}
