/* pairs.c: positions-only evaluation (cgq_evaluator_set_pairs, cgq_evaluate_pairs): the candidate list is
 * validated and kept; each step keeps the candidates within the cutoff and returns forces and virials per
 * node. GPU backends that run the v2 kernels build the graph and sum the forces on the device; otherwise
 * the same is done here on the host around cgq_evaluate_graph. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/evaluator_impl.h"
#include "common/error.h"
#include "common/exchange.h"
#ifdef CGQ_HAVE_GPU
#include "kernels/gpu/mace_gpu.h"
#endif

void cgq_pairs_free(cgq_pairs *p) {
    cgq_neighbor_list_free(&p->nl);
    free(p->species), free(p->candidate), free(p->point_node), free(p->row_ptr), free(p->point_id);
    free(p->g_row), free(p->g_sender), free(p->g_vec), free(p->g_grad);
    memset(p, 0, sizeof *p);
}

static long long point_id(const cgq_pairs *p, int64_t k) { return p->point_id ? (long long)p->point_id[k] : (long long)k; }

/* The first non-finite coordinate of n points, named by ids (NULL: row numbers); the GPU's pairs step reports it with
 * the same message (pairs_count) */
static cgq_status check_finite(const double *x, int64_t n, const int64_t *ids) {
    for (int64_t k = 0; k < 3 * n; k++)
        if (!isfinite(x[k]))
            return cgq_fail(CGQ_STATUS_BAD_INPUT, "atom %lld has a non-finite position (%g); the simulation has blown up "
                            "or the input is corrupt", ids ? (long long)ids[k / 3] : (long long)(k / 3), x[k]);
    return CGQ_STATUS_OK;
}

/* The points' part of a pair list (cgq_evaluator_set_pairs and cgq_evaluator_build_pairs) */
static cgq_status validate_points(const cgq_model *m, int64_t n_points, int64_t n_local, int64_t n_nodes,
                                  const int32_t *species, const int32_t *point_node) {
    if (n_points < 0 || n_local < 0 || n_local > n_points)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "pair list: need 0 <= n_local <= n_points");
    if (n_points > INT32_MAX) return cgq_fail(CGQ_STATUS_UNSUPPORTED, "pair list: more than 2^31-1 points");
    if (n_nodes < n_local || n_nodes > n_points)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "pair list: need n_local <= n_nodes <= n_points (the local nodes, "
                        "then ghost nodes)");
    if ((n_nodes && !species) || (n_points && !point_node))
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "pair list: species and point_node must not be NULL");
    for (int64_t i = 0; i < n_nodes; i++)
        if (species[i] < 0 || species[i] >= m->n_species)
            return cgq_fail(CGQ_STATUS_BAD_INPUT, "pair list: node %lld has species index %d; the model has %d species",
                            (long long)i, species[i], m->n_species);
    for (int64_t k = 0; k < n_points; k++) {
        const int32_t node = point_node[k];
        if (node < -1 || node >= n_nodes || (k < n_local && node != k))
            return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "pair list: point %lld maps to node %d (local points map to "
                            "themselves, the others to a node below n_nodes = %lld or -1)", (long long)k, node,
                            (long long)n_nodes);
    }
    return CGQ_STATUS_OK;
}

static cgq_status validate_pairs(const cgq_model *m, const cgq_pair_list *l) {
    CGQ_TRY(validate_points(m, l->n_points, l->n_local, l->n_nodes, l->species, l->point_node));
    if (!l->row_ptr) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "pair list: row_ptr must not be NULL");
    if (l->row_ptr[0] != 0) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "pair list: row_ptr must start at 0");
    for (int64_t i = 0; i < l->n_local; i++)
        if (l->row_ptr[i + 1] < l->row_ptr[i]) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "pair list: row_ptr decreases");
    const int64_t C = l->row_ptr[l->n_local];
    if (C && !l->candidate) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "pair list: candidate must not be NULL");
    for (int64_t i = 0; i < l->n_local; i++)
        for (int64_t c = l->row_ptr[i]; c < l->row_ptr[i + 1]; c++)
            if (l->candidate[c] < 0 || l->candidate[c] >= l->n_points || l->candidate[c] == i)
                return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "pair list: receiver %lld has candidate %d (must be another "
                                "point, 0..%lld)", (long long)i, l->candidate[c], (long long)l->n_points - 1);
    return CGQ_STATUS_OK;
}

static void *copy_of(const void *src, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (p && bytes) memcpy(p, src, bytes);
    return p;
}

cgq_status cgq_evaluator_set_pairs(cgq_evaluator *ev, const cgq_pair_list *l) {
    if (!ev || !l) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_evaluator_set_pairs: evaluator and pairs must not be NULL");
    cgq_pairs *p = &ev->pairs;
    p->set = 0;
    CGQ_TRY(validate_pairs(ev->model, l));
    const int64_t C = l->row_ptr[l->n_local];
    free(p->species), free(p->candidate), free(p->point_node), free(p->row_ptr), free(p->point_id);
    p->species = copy_of(l->species, sizeof(int32_t) * (size_t)l->n_nodes);
    p->row_ptr = copy_of(l->row_ptr, sizeof(int64_t) * (size_t)(l->n_local + 1));
    p->candidate = copy_of(l->candidate, sizeof(int32_t) * (size_t)C);
    p->point_node = copy_of(l->point_node, sizeof(int32_t) * (size_t)l->n_points);
    p->point_id = l->point_id ? copy_of(l->point_id, sizeof(int64_t) * (size_t)l->n_points) : NULL;
    if (!p->species || !p->row_ptr || !p->candidate || !p->point_node || (l->point_id && !p->point_id))
        return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory copying %lld candidate pairs", (long long)C);
    p->list = *l;
    p->list.species = p->species, p->list.row_ptr = p->row_ptr, p->list.candidate = p->candidate;
    p->list.point_node = p->point_node, p->list.point_id = p->point_id;
#ifdef CGQ_HAVE_GPU
    if (ev->gpu && cgq_gpu_runs_pairs(ev->gpu)) CGQ_TRY(cgq_gpu_set_pairs(ev->gpu, &p->list));
#endif
    p->set = 1;
    return CGQ_STATUS_OK;
}

/* The points' bounding box [lo, hi] (zeros when there are none). Points so far apart that their distance overflows
 * (|x| near 1e308) cannot be put in cells: refused by name */
static cgq_status check_span(const cgq_point_set *pt, double lo_x[3], double hi_x[3]) {
    for (int d = 0; d < 3; d++) {
        lo_x[d] = hi_x[d] = 0;
        if (!pt->n_points) continue;
        int64_t lo = 0, hi = 0;
        for (int64_t k = 1; k < pt->n_points; k++) {
            if (pt->positions[3 * k + d] < pt->positions[3 * lo + d]) lo = k;
            if (pt->positions[3 * k + d] > pt->positions[3 * hi + d]) hi = k;
        }
        lo_x[d] = pt->positions[3 * lo + d], hi_x[d] = pt->positions[3 * hi + d];
        const double span = hi_x[d] - lo_x[d];
        if (!(span < 1e100))
            return cgq_fail(CGQ_STATUS_BAD_INPUT, "atoms %lld and %lld are %g A apart along %c: the positions are "
                            "corrupt or in the wrong units", pt->point_id ? (long long)pt->point_id[lo] : (long long)lo,
                            pt->point_id ? (long long)pt->point_id[hi] : (long long)hi, span, "xyz"[d]);
    }
    return CGQ_STATUS_OK;
}

/* CGQ_GPU_BUILD_PAIRS=0: a GPU evaluator's list built on the host as well (for comparisons) */
static int build_on_device(const cgq_evaluator *ev) {
#ifdef CGQ_HAVE_GPU
    const char *env = getenv("CGQ_GPU_BUILD_PAIRS");
    return ev->gpu && cgq_gpu_runs_pairs(ev->gpu) && !(env && !strcmp(env, "0"));
#else
    (void)ev;
    return 0;
#endif
}

cgq_status cgq_evaluator_build_pairs(cgq_evaluator *ev, const cgq_point_set *pt, double radius) {
    if (!ev || !pt) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_evaluator_build_pairs: evaluator and points must not be NULL");
    cgq_pairs *p = &ev->pairs;
    p->set = 0;
    if (!(isfinite(radius) && radius > 0))
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_evaluator_build_pairs: radius = %g must be a positive distance "
                        "in A (the cutoff plus a skin)", radius);
    CGQ_TRY(validate_points(ev->model, pt->n_points, pt->n_local, pt->n_nodes, pt->species, pt->point_node));
    if (pt->n_points && !pt->positions) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_evaluator_build_pairs: positions are NULL");
    CGQ_TRY(check_finite(pt->positions, pt->n_points, pt->point_id));
    double lo[3], hi[3];
    CGQ_TRY(check_span(pt, lo, hi));
    if (!build_on_device(ev)) {
        cgq_neighbor_list *nl = &p->nl;
        nl->ids = pt->point_id, nl->senders_only = 1;
        const cgq_status st = cgq_neighbor_list_build_receivers(nl, pt->n_points, pt->n_local, pt->positions, NULL,
                                                                NULL, radius);
        nl->ids = NULL; /* the caller's */
        CGQ_TRY(st);
        const cgq_pair_list l = {pt->n_points, pt->n_local, pt->n_nodes, pt->species, nl->row_ptr, nl->sender,
                                 pt->point_node, pt->point_id};
        return cgq_evaluator_set_pairs(ev, &l);
    }
#ifdef CGQ_HAVE_GPU
    /* the host keeps the points (messages, the exchange); the candidates stay on the device */
    free(p->species), free(p->candidate), free(p->point_node), free(p->row_ptr), free(p->point_id);
    p->candidate = NULL, p->row_ptr = NULL;
    p->species = copy_of(pt->species, sizeof(int32_t) * (size_t)pt->n_nodes);
    p->point_node = copy_of(pt->point_node, sizeof(int32_t) * (size_t)pt->n_points);
    p->point_id = pt->point_id ? copy_of(pt->point_id, sizeof(int64_t) * (size_t)pt->n_points) : NULL;
    if (!p->species || !p->point_node || (pt->point_id && !p->point_id))
        return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory copying %lld points", (long long)pt->n_points);
    const cgq_pair_list l = {pt->n_points, pt->n_local, pt->n_nodes, p->species, NULL, NULL, p->point_node, p->point_id};
    p->list = l;
    CGQ_TRY(cgq_gpu_build_pairs(ev->gpu, pt, radius, lo, hi));
    p->set = 1;
#endif
    return CGQ_STATUS_OK;
}

/* This step's graph on the host: the candidates within the cutoff, in candidate order (rows counted, then
 * filled, in parallel; the result does not depend on the thread count). */
static cgq_status host_graph(cgq_evaluator *ev, const double *x) {
    cgq_pairs *p = &ev->pairs;
    const cgq_pair_list *l = &p->list;
    const int64_t N = l->n_local;
    const double rc2 = ev->model->r_max * ev->model->r_max;
    CGQ_TRY(cgq_grow_array((void **)&p->g_row, &p->g_caps[0], N + 1, sizeof(int64_t)));
    p->g_row[0] = 0;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (N > 1024)
#endif
    for (int64_t i = 0; i < N; i++) {
        int64_t n = 0;
        for (int64_t c = l->row_ptr[i]; c < l->row_ptr[i + 1]; c++) {
            const double *a = x + 3 * i, *b = x + 3 * (int64_t)l->candidate[c];
            const double v0 = a[0] - b[0], v1 = a[1] - b[1], v2 = a[2] - b[2];
            n += v0 * v0 + v1 * v1 + v2 * v2 < rc2;
        }
        p->g_row[i + 1] = n;
    }
    for (int64_t i = 0; i < N; i++) p->g_row[i + 1] += p->g_row[i];
    const int64_t E = p->g_row[N];
    CGQ_TRY(cgq_grow_array((void **)&p->g_sender, &p->g_caps[1], E + 1, sizeof(int32_t)));
    CGQ_TRY(cgq_grow_array((void **)&p->g_vec, &p->g_caps[2], 3 * (E + 1), sizeof(double)));
    CGQ_TRY(cgq_grow_array((void **)&p->g_grad, &p->g_caps[3], 3 * (E + 1), sizeof(double)));
    int64_t no_node = -1, overlap = -1; /* first offending candidate */
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) reduction(max : no_node, overlap) if (N > 1024)
#endif
    for (int64_t i = 0; i < N; i++) {
        int64_t out = p->g_row[i];
        for (int64_t c = l->row_ptr[i]; c < l->row_ptr[i + 1]; c++) {
            const int32_t j = l->candidate[c];
            const double *a = x + 3 * i, *b = x + 3 * (int64_t)j;
            const double v0 = a[0] - b[0], v1 = a[1] - b[1], v2 = a[2] - b[2];
            const double r2 = v0 * v0 + v1 * v1 + v2 * v2;
            if (!(r2 < rc2)) continue; /* nothing written: slot out may be the next row's, another thread's */
            if (l->point_node[j] < 0) no_node = c;
            if (r2 < 1e-16) overlap = c;
            double *v = p->g_vec + 3 * out;
            v[0] = v0, v[1] = v1, v[2] = v2;
            p->g_sender[out++] = l->point_node[j];
        }
    }
    if (no_node >= 0 || overlap >= 0) {
        const int64_t c = no_node >= 0 ? no_node : overlap;
        int64_t i = 0;
        while (l->row_ptr[i + 1] <= c) i++;
        if (no_node >= 0)
            return cgq_fail(CGQ_STATUS_BAD_INPUT, "atom %lld within the cutoff of atom %lld has no graph node (a ghost "
                            "copy whose owner is not a local atom)", point_id(p, l->candidate[c]), point_id(p, i));
        return cgq_fail(CGQ_STATUS_BAD_INPUT, "atoms %lld and %lld are closer than 1e-8 A: remove duplicate atoms",
                        point_id(p, i), point_id(p, l->candidate[c]));
    }
    return CGQ_STATUS_OK;
}

static cgq_status evaluate_pairs(cgq_evaluator *ev, const double *x, const cgq_exchange *xc, cgq_node_result *r) {
    if (!ev || !r) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_evaluate_pairs: evaluator and result must not be NULL");
    cgq_pairs *p = &ev->pairs;
    if (!p->set) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_evaluate_pairs: call cgq_evaluator_set_pairs first");
    const cgq_pair_list *l = &p->list;
    CGQ_TRY(cgq_exchange_check(xc, l->n_local, l->n_nodes != l->n_local, "a pair list"));
    if (l->n_points && !x) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_evaluate_pairs: positions are NULL");
#ifdef CGQ_HAVE_GPU /* the GPU checks the positions itself (pairs_count), with the same message */
    if (ev->gpu && cgq_gpu_runs_pairs(ev->gpu)) return cgq_gpu_evaluate_pairs(ev->gpu, x, xc, r);
#endif
    CGQ_TRY(check_finite(x, l->n_points, l->point_id));
    CGQ_TRY(host_graph(ev, x));
    cgq_graph g = {l->n_nodes, l->n_local, p->g_row[l->n_local], l->species, p->g_row, p->g_sender, p->g_vec};
    /* the exchange is collective: passed on even where this domain has no ghosts, as the other domains call it */
    CGQ_TRY(cgq_evaluate_graph(ev, &g, xc, &r->energy, r->node_energies, p->g_grad));
    cgq_edge_forces(&g, p->g_grad, 0, r->forces, r->virial, r->node_virials);
    return CGQ_STATUS_OK;
}

cgq_status cgq_evaluate_pairs(cgq_evaluator *ev, const double *x, const cgq_exchange *xc, cgq_node_result *r) {
    const int prev = cgq_threads_enter(ev);
    const cgq_status st = evaluate_pairs(ev, x, xc, r);
    cgq_threads_leave(prev);
    return st;
}
