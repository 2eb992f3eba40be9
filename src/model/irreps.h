/* irreps.h: e3nn irreps strings ("128x0e+128x1o") parsed into blocks with offsets (mul_ir layout). */
#ifndef CGQ_IRREPS_H
#define CGQ_IRREPS_H

#include "cgequi.h"

#define CGQ_MAX_IRREP_BLOCKS 64

typedef struct cgq_irrep_block {
    int mul;
    int l;
    int parity; /* +1 even ('e'), -1 odd ('o') */
    int offset; /* start of the block [mul][2l+1] in the flat feature vector */
} cgq_irrep_block;

typedef struct cgq_irreps {
    int n;
    int dim;
    cgq_irrep_block b[CGQ_MAX_IRREP_BLOCKS];
} cgq_irreps;

/* Parses "" (empty), "0e", "32x0e+16x1o", with optional spaces. BAD_FILE with a message naming
 * `what` on malformed strings. */
cgq_status cgq_irreps_parse(const char *text, const char *what, cgq_irreps *out);
static inline int cgq_irrep_dim(int l) { return 2 * l + 1; }
/* Writes the canonical e3nn string of irreps into buf. */
void cgq_irreps_format(const cgq_irreps *irreps, char *buf, int size);

#endif
