/* evaluator.c: public evaluation API: validation of inputs, backend dispatch, forces and virials
 * from edge gradients. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "api/evaluator_impl.h"
#include "common/error.h"
#include "common/exchange.h"
#include "kernels/cpu/mace_cpu.h"
#include "kernels/cpu/nequip_cpu.h"
#include "model/model.h"
#ifdef CGQ_HAVE_GPU
#include "kernels/gpu/mace_gpu.h"
#endif

int32_t cgq_gpu_count(void) {
#ifdef CGQ_HAVE_GPU
    return cgq_gpu_device_count();
#else
    return 0;
#endif
}

cgq_evaluator_params cgq_evaluator_default_params(void) {
    cgq_evaluator_params p = {CGQ_DEVICE_AUTO, CGQ_PRECISION_DEFAULT, 0, 0};
    return p;
}

cgq_status cgq_evaluator_create(const cgq_model *model, const cgq_evaluator_params *params, cgq_evaluator **out) {
    if (!model || !out) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_evaluator_create: model and out must not be NULL");
    *out = NULL;
    cgq_evaluator_params p = params ? *params : cgq_evaluator_default_params();
    if (p.device != CGQ_DEVICE_AUTO && p.device != CGQ_DEVICE_CPU && p.device != CGQ_DEVICE_CUDA)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "unknown device %d", (int)p.device);
    if (p.num_threads < 0)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "num_threads %d: use 0 (OpenMP's default) or a positive count",
                        (int)p.num_threads);
    if (p.precision != CGQ_PRECISION_DEFAULT && p.precision != CGQ_PRECISION_FP64 && p.precision != CGQ_PRECISION_FP32)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "unknown precision %d", (int)p.precision);
#ifdef CGQ_HAVE_GPU
    const int auto_device = p.device == CGQ_DEVICE_AUTO;
    int use_gpu = p.device == CGQ_DEVICE_CUDA || (auto_device && cgq_gpu_available());
#else
    if (p.device == CGQ_DEVICE_CUDA)
        return cgq_fail(CGQ_STATUS_DEVICE_ERROR, "this cgequi build has no GPU backend; use device cpu (or auto), or "
                        "rebuild with -DCGQ_CUDA=ON");
    int use_gpu = 0;
#endif
    if (p.precision == CGQ_PRECISION_FP32 && !use_gpu)
        return cgq_fail(CGQ_STATUS_UNSUPPORTED, "precision fp32 runs on the GPU only; the CPU backend evaluates in "
                        "float64 (use precision fp64, or device cuda on a GPU build)");
    p.device = use_gpu ? CGQ_DEVICE_CUDA : CGQ_DEVICE_CPU;
    cgq_evaluator *ev = calloc(1, sizeof *ev);
    if (!ev) return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory creating an evaluator");
    ev->model = model;
#ifdef CGQ_HAVE_GPU
    if (use_gpu) {
        /* the GPU default is fp32 (float64 sums of energies, forces and virials) where the model's layers
         * allow it, else fp64 */
        int fp32 = p.precision != CGQ_PRECISION_FP64;
        cgq_status st = cgq_gpu_create(model, p.gpu_id, fp32, &ev->gpu);
        if (st == CGQ_STATUS_UNSUPPORTED && p.precision == CGQ_PRECISION_DEFAULT)
            fp32 = 0, st = cgq_gpu_create(model, p.gpu_id, 0, &ev->gpu);
        if (st != CGQ_STATUS_OK) {
            free(ev);
            return st;
        }
        p.precision = fp32 ? CGQ_PRECISION_FP32 : CGQ_PRECISION_FP64;
        /* A NequIP model the parallel kernels do not cover runs the float64 reference steps one thread per atom on
         * the GPU (latency-bound: 166 ms per step at 192 water atoms on an H100, against 67 ms on 2 CPU threads):
         * auto takes the CPU for it; device cuda still gets the GPU. */
        if (model->nequip && auto_device && !cgq_gpu_runs_pairs(ev->gpu)) {
            cgq_gpu_free(ev->gpu);
            ev->gpu = NULL;
            use_gpu = 0;
            p.device = CGQ_DEVICE_CPU;
        }
    }
#endif
    if (!use_gpu) p.precision = CGQ_PRECISION_FP64;
    ev->params = p;
    if (!use_gpu) snprintf(ev->backend, sizeof ev->backend, "cpu float64");
    else if (p.precision == CGQ_PRECISION_FP32) snprintf(ev->backend, sizeof ev->backend, "cuda:%d float32 (float64 sums)", (int)p.gpu_id);
    else snprintf(ev->backend, sizeof ev->backend, "cuda:%d float64", (int)p.gpu_id);
    *out = ev;
    return CGQ_STATUS_OK;
}

const char *cgq_evaluator_backend(const cgq_evaluator *ev) { return ev ? ev->backend : ""; }

cgq_precision cgq_evaluator_precision(const cgq_evaluator *ev) {
    return ev && ev->params.precision == CGQ_PRECISION_FP32 ? CGQ_PRECISION_FP32 : CGQ_PRECISION_FP64;
}

size_t cgq_evaluator_device_bytes(const cgq_evaluator *ev) {
#ifdef CGQ_HAVE_GPU
    if (ev && ev->gpu) return cgq_gpu_bytes(ev->gpu);
#endif
    (void)ev;
    return 0;
}

void cgq_evaluator_free(cgq_evaluator *ev) {
    if (!ev) return;
#ifdef CGQ_HAVE_GPU
    cgq_gpu_free(ev->gpu);
#endif
    cgq_arena_free(&ev->arena);
    cgq_neighbor_list_free(&ev->nl);
    free(ev->species);
    free(ev->edge_grad);
    free(ev->node_energy);
    cgq_pairs_free(&ev->pairs);
    free(ev);
}

static cgq_status validate_graph(const cgq_model *m, const cgq_graph *g) {
    if (g->n_nodes < 0 || g->n_edges < 0) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "negative node or edge count");
    if (g->n_nodes > INT32_MAX) return cgq_fail(CGQ_STATUS_UNSUPPORTED, "more than 2^31-1 nodes");
    if (g->n_local < 0 || g->n_local > g->n_nodes)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "n_local must be between 0 and n_nodes");
    if (g->n_nodes && (!g->species || !g->row_ptr)) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "graph arrays are NULL");
    if (g->n_edges && (!g->sender || !g->vec)) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "graph edge arrays are NULL");
    if (g->row_ptr && (g->row_ptr[0] != 0 || g->row_ptr[g->n_local] != g->n_edges))
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "row_ptr must start at 0 and end at n_edges");
    if (!g->row_ptr && g->n_edges) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "row_ptr is NULL");
    for (int64_t i = 0; i < g->n_nodes; i++)
        if (g->species[i] < 0 || g->species[i] >= m->n_species)
            return cgq_fail(CGQ_STATUS_BAD_INPUT, "node %lld has species index %d; the model has %d species", (long long)i,
                            g->species[i], m->n_species);
    for (int64_t i = 0; i < g->n_local; i++)
        if (g->row_ptr[i + 1] < g->row_ptr[i]) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "row_ptr is not monotonic");
    for (int64_t e = 0; e < g->n_edges; e++) {
        if (g->sender[e] < 0 || g->sender[e] >= g->n_nodes)
            return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "edge %lld has sender %d outside 0..%lld", (long long)e,
                            g->sender[e], (long long)g->n_nodes - 1);
        const double *v = g->vec + 3 * e;
        const double r2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
        if (!isfinite(r2)) return cgq_fail(CGQ_STATUS_BAD_INPUT, "edge %lld has a non-finite vector", (long long)e);
        if (r2 < 1e-16)
            return cgq_fail(CGQ_STATUS_BAD_INPUT, "edge %lld has zero length: two atoms sit on top of each other",
                            (long long)e);
    }
    return CGQ_STATUS_OK;
}

int cgq_threads_enter(const cgq_evaluator *ev) {
#if defined(_OPENMP)
    const int prev = omp_get_max_threads();
    if (ev && ev->params.num_threads > 0) omp_set_num_threads(ev->params.num_threads);
    return prev;
#else
    (void)ev;
    return 0;
#endif
}

void cgq_threads_leave(int prev) {
#if defined(_OPENMP)
    if (prev > 0) omp_set_num_threads(prev);
#else
    (void)prev;
#endif
}

static cgq_status evaluate_graph(cgq_evaluator *ev, const cgq_graph *graph, const cgq_exchange *exchange, double *energy,
                                 double *node_energy, double *edge_grad) {
    if (!ev || !graph || !energy)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_evaluate_graph: evaluator, graph and energy must not be NULL");
    CGQ_TRY(cgq_exchange_check(exchange, graph->n_local, graph->n_local != graph->n_nodes, "a graph"));
    /* a local-validation failure must not skip the collective exchanges other ranks wait in */
    CGQ_TRY(validate_graph(ev->model, graph));
#ifdef CGQ_HAVE_GPU
    if (ev->gpu) return cgq_gpu_evaluate(ev->gpu, graph, exchange, energy, node_energy, edge_grad);
#endif
    if (ev->model->nequip)
        return cgq_nequip_cpu_evaluate(ev->model, graph, exchange, energy, node_energy, edge_grad, &ev->arena);
    return cgq_mace_cpu_evaluate(ev->model, graph, exchange, energy, node_energy, edge_grad, &ev->arena);
}

cgq_status cgq_grow_array(void **p, int64_t *cap, int64_t need, size_t elsize) {
    if (need <= *cap) return CGQ_STATUS_OK;
    int64_t n = need + need / 8 + 16;
    void *q = realloc(*p, (size_t)n * elsize);
    if (!q) return cgq_fail(CGQ_STATUS_OUT_OF_MEMORY, "out of memory (%lld elements)", (long long)n);
    *p = q;
    *cap = n;
    return CGQ_STATUS_OK;
}

cgq_status cgq_evaluate_graph(cgq_evaluator *ev, const cgq_graph *graph, const cgq_exchange *exchange, double *energy,
                              double *node_energy, double *edge_grad) {
    const int prev = cgq_threads_enter(ev);
    const cgq_status st = evaluate_graph(ev, graph, exchange, energy, node_energy, edge_grad);
    cgq_threads_leave(prev);
    return st;
}

void cgq_edge_forces(const cgq_graph *g, const double *grad, int sym, double *forces, double virial[9],
                     double *node_virials) {
    double W[9] = {0};
    if (forces) memset(forces, 0, sizeof(double) * 3 * (size_t)g->n_nodes);
    if (node_virials) memset(node_virials, 0, sizeof(double) * 9 * (size_t)g->n_nodes);
    /* fixed loop order: receiver rows, edges in CSR order */
    for (int64_t i = 0; i < g->n_local; i++)
        for (int64_t e = g->row_ptr[i]; e < g->row_ptr[i + 1]; e++) {
            const double *ge = grad + 3 * e, *v = g->vec + 3 * e;
            const int64_t s = g->sender[e];
            if (forces)
                for (int k = 0; k < 3; k++) {
                    forces[3 * i + k] -= ge[k];
                    forces[3 * s + k] += ge[k];
                }
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++) {
                    const double w = sym ? -0.5 * (v[a] * ge[b] + v[b] * ge[a]) : -v[a] * ge[b];
                    W[3 * a + b] += w;
                    if (node_virials) {
                        node_virials[9 * i + 3 * a + b] += 0.5 * w;
                        node_virials[9 * s + 3 * a + b] += 0.5 * w;
                    }
                }
        }
    memcpy(virial, W, sizeof W);
}

static cgq_status evaluate_system(cgq_evaluator *ev, const cgq_system *sys, cgq_result *res) {
    if (!ev || !sys || !res)
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "cgq_evaluate_system: evaluator, system and result must not be NULL");
    const cgq_model *m = ev->model;
    const int64_t n = sys->n_atoms;
    if (n < 0) return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "negative atom count");
    if (n > 0 && (!sys->positions || !sys->atomic_numbers))
        return cgq_fail(CGQ_STATUS_INVALID_ARGUMENT, "positions and atomic_numbers must not be NULL");
    CGQ_TRY(cgq_grow_array((void **)&ev->species, &ev->species_cap, n, sizeof(int32_t)));
    for (int64_t i = 0; i < n; i++) {
        const int32_t idx = cgq_model_species_index(m, sys->atomic_numbers[i]);
        if (idx < 0) {
            char known[512] = "";
            for (int s = 0; s < m->n_species; s++) {
                size_t len = strlen(known);
                snprintf(known + len, sizeof known - len, "%s%d", s ? ", " : "", m->species_z[s]);
            }
            return cgq_fail(CGQ_STATUS_BAD_INPUT, "atom %lld has atomic number %d, which the model does not know "
                            "(model species Z: %s)", (long long)i, sys->atomic_numbers[i], known);
        }
        ev->species[i] = idx;
    }
    CGQ_TRY(cgq_neighbor_list_build(&ev->nl, n, sys->positions, sys->cell, sys->pbc, m->r_max));
    const cgq_neighbor_list *nl = &ev->nl;
    CGQ_TRY(cgq_grow_array((void **)&ev->edge_grad, &ev->edge_cap, 3 * nl->n_edges + 1, sizeof(double)));
    cgq_graph g = {n, n, nl->n_edges, ev->species, nl->row_ptr, nl->sender, nl->vec};
    /* edge gradients are always needed: the virial is always returned */
    CGQ_TRY(evaluate_graph(ev, &g, NULL, &res->energy, res->atomic_energies, ev->edge_grad)); /* threads already set */
    cgq_edge_forces(&g, ev->edge_grad, 1, res->forces, res->virial, res->atomic_virials);
    return CGQ_STATUS_OK;
}

cgq_status cgq_evaluate_system(cgq_evaluator *ev, const cgq_system *sys, cgq_result *res) {
    const int prev = cgq_threads_enter(ev);
    const cgq_status st = evaluate_system(ev, sys, res);
    cgq_threads_leave(prev);
    return st;
}
