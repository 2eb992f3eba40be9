/* xyz.h: extended XYZ reader (ASE conventions) for the CLI and tests. */
#ifndef CGQ_XYZ_H
#define CGQ_XYZ_H

#include <stdint.h>
#include <stdio.h>

#include "cgequi.h"

/* One frame. Lattice="ax ay az bx by bz cx cy cz" gives cell rows; pbc="T T F" (default "T T T"
 * when Lattice is present, "F F F" without Lattice, then cell is all zero). The species column
 * holds element symbols (case as in the periodic table) or atomic numbers. */
typedef struct cgq_frame {
    int64_t n_atoms;
    int32_t *atomic_numbers; /* [n_atoms] */
    double *positions;       /* [n_atoms*3] */
    double cell[9];
    int32_t pbc[3];
    int32_t has_lattice;
} cgq_frame;

/* Reads the next frame from f. Returns OK and sets *eof = 1 (frame untouched) at a clean end of
 * file. Malformed input (bad count line, missing pos/species columns, unknown element, wrong
 * number of columns, truncated frame, unparsable numbers) -> CGQ_STATUS_BAD_INPUT with a message
 * giving the line number and what was expected. `source` names the file in messages. */
cgq_status cgq_xyz_read_frame(FILE *f, const char *source, int64_t *line_no, cgq_frame *frame,
                              int *eof);
void cgq_frame_free(cgq_frame *frame);

/* Atomic number of an element symbol ("H", "He", ... "Og"), or 0 if unknown. */
int32_t cgq_element_z(const char *symbol);
/* Element symbol of atomic number z (1..118), or "X". */
const char *cgq_element_symbol(int32_t z);

#endif
