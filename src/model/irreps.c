/* irreps.c: parsing and printing e3nn irreps strings. */
#include "model/irreps.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"

cgq_status cgq_irreps_parse(const char *text, const char *what, cgq_irreps *out) {
    out->n = 0;
    out->dim = 0;
    const char *p = text;
    while (*p) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        char *end;
        long mul = 1;
        long first = strtol(p, &end, 10);
        if (end == p) goto bad;
        if (*end == 'x') {
            mul = first;
            p = end + 1;
            first = strtol(p, &end, 10);
            if (end == p) goto bad;
        }
        long l = first;
        if ((*end != 'e' && *end != 'o') || mul < 0 || l < 0 || l > 16 || mul > 1000000) goto bad;
        if (out->n == CGQ_MAX_IRREP_BLOCKS)
            return cgq_fail(CGQ_STATUS_UNSUPPORTED, "%s: irreps '%s' have more than %d blocks", what,
                            text, CGQ_MAX_IRREP_BLOCKS);
        cgq_irrep_block *b = &out->b[out->n++];
        b->mul = (int)mul;
        b->l = (int)l;
        b->parity = *end == 'e' ? 1 : -1;
        b->offset = out->dim;
        out->dim += b->mul * cgq_irrep_dim(b->l);
        p = end + 1;
        while (isspace((unsigned char)*p)) p++;
        if (*p == '+') p++;
        else if (*p) goto bad;
    }
    return CGQ_STATUS_OK;
bad:
    return cgq_fail(CGQ_STATUS_BAD_FILE, "%s: malformed irreps string '%s' (expected e.g. '128x0e+128x1o')",
                    what, text);
}

void cgq_irreps_format(const cgq_irreps *irreps, char *buf, int size) {
    int pos = 0;
    buf[0] = '\0';
    for (int i = 0; i < irreps->n && pos < size; i++) {
        const cgq_irrep_block *b = &irreps->b[i];
        pos += snprintf(buf + pos, (size_t)(size - pos), "%s%dx%d%c", i ? "+" : "", b->mul, b->l,
                        b->parity > 0 ? 'e' : 'o');
    }
}
