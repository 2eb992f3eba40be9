/* linear_compose.c: b after a as one e3nn o3.Linear (linear_compose.h). */
#include "model/linear_compose.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

int cgq_linear_composable(const cgq_linear *a, const cgq_linear *b) {
    if (a->bias || b->bias || a->out.n != b->in.n) return 0;
    for (int i = 0; i < a->out.n; i++)
        if (memcmp(&a->out.b[i], &b->in.b[i], sizeof a->out.b[i])) return 0;
    return 1;
}

/* the instruction of out joining input block i to output block o, or -1 */
static int find_ins(const cgq_linear *out, int i, int o) {
    for (int k = 0; k < out->n_ins; k++)
        if (out->ins_in[k] == i && out->ins_out[k] == o) return k;
    return -1;
}

cgq_status cgq_linear_compose(const cgq_linear *a, const cgq_linear *b, cgq_linear *out) {
    memset(out, 0, sizeof *out);
    int64_t numel = 0;
    out->in = a->in, out->out = b->out;
    const int most = a->n_ins * b->n_ins;
    out->ins_in = malloc(sizeof(int) * (size_t)(most ? most : 1));
    out->ins_out = malloc(sizeof(int) * (size_t)(most ? most : 1));
    out->path_weight = malloc(sizeof(double) * (size_t)(most ? most : 1));
    out->w_offset = malloc(sizeof(int64_t) * (size_t)(most ? most : 1));
    if (!out->ins_in || !out->ins_out || !out->path_weight || !out->w_offset) goto oom;
    /* the instructions, in order of a's then b's, and their weights' offsets */
    for (int ka = 0; ka < a->n_ins; ka++)
        for (int kb = 0; kb < b->n_ins; kb++) {
            const int i = a->ins_in[ka], o = b->ins_out[kb];
            if (a->ins_out[ka] != b->ins_in[kb] || find_ins(out, i, o) >= 0) continue;
            const int k = out->n_ins++;
            out->ins_in[k] = i, out->ins_out[k] = o, out->path_weight[k] = 1.0, out->w_offset[k] = numel;
            numel += (int64_t)a->in.b[i].mul * b->out.b[o].mul;
        }
    out->weight = calloc((size_t)(numel ? numel : 1), sizeof(double));
    if (!out->weight) goto oom;
    for (int ka = 0; ka < a->n_ins; ka++)
        for (int kb = 0; kb < b->n_ins; kb++) {
            if (a->ins_out[ka] != b->ins_in[kb]) continue;
            const int i = a->ins_in[ka], v_mul = a->out.b[a->ins_out[ka]].mul, o = b->ins_out[kb];
            const int mi = a->in.b[i].mul, mo = b->out.b[o].mul;
            const double pw = a->path_weight[ka] * b->path_weight[kb];
            const double *Wa = a->weight + a->w_offset[ka], *Wb = b->weight + b->w_offset[kb]; /* [mi][v], [v][mo] */
            double *W = out->weight + out->w_offset[find_ins(out, i, o)];
            for (int u = 0; u < mi; u++)
                for (int v = 0; v < v_mul; v++) {
                    const double c = pw * Wa[(int64_t)u * v_mul + v];
                    for (int w = 0; w < mo; w++) W[(int64_t)u * mo + w] += c * Wb[(int64_t)v * mo + w];
                }
        }
    return CGQ_STATUS_OK;
oom:
    cgq_linear_compose_free(out);
    return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of host memory composing two linear maps");
}

void cgq_linear_compose_free(cgq_linear *out) {
    free(out->ins_in), free(out->ins_out), free(out->path_weight), free(out->w_offset), free(out->weight);
    memset(out, 0, sizeof *out);
}
