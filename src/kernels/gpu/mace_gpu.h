/* mace_gpu.h: the GPU backend (CUDA, or HIP from the same source): model upload and evaluation. */
#ifndef CGQ_MACE_GPU_H
#define CGQ_MACE_GPU_H

#include "cgequi.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cgq_gpu cgq_gpu;

/* 1 if this build has a GPU backend and a device is visible. */
int cgq_gpu_available(void);
int cgq_gpu_device_count(void);
/* fp32: float storage and arithmetic in the MLP, convolution, node maps and product basis; geometry,
 * readouts, energies and force/virial sums stay in double. UNSUPPORTED for models outside the v2 kernels. */
cgq_status cgq_gpu_create(const cgq_model *m, int gpu_id, int fp32, cgq_gpu **out);
void cgq_gpu_free(cgq_gpu *gpu);
/* Device memory held: model copies and work buffers. */
size_t cgq_gpu_bytes(const cgq_gpu *gpu);
/* Same contract as the CPU backend (energy, per-local-node energy, dE/dvec per edge). */
cgq_status cgq_gpu_evaluate(cgq_gpu *gpu, const cgq_graph *g, const cgq_exchange *xc, double *energy,
                            double *node_energy, double *edge_grad);
/* cgq_evaluate_pairs on the device (models the v2 kernels run; else the evaluator builds the graph on the
 * host): the candidate list once per re-neighboring, then positions in, forces and virials out. */
int cgq_gpu_runs_pairs(const cgq_gpu *gpu);
cgq_status cgq_gpu_set_pairs(cgq_gpu *gpu, const cgq_pair_list *pairs);
/* cgq_evaluator_build_pairs on the device (the points already checked: finite, valid nodes and species; their
 * bounding box [lo, hi] found) */
cgq_status cgq_gpu_build_pairs(cgq_gpu *gpu, const cgq_point_set *points, double radius, const double lo[3],
                               const double hi[3]);
cgq_status cgq_gpu_evaluate_pairs(cgq_gpu *gpu, const double *positions, const cgq_exchange *xc, cgq_node_result *result);
/* Kernel test entry (tests/test_gpu_kernels.cpp): layer's product basis B of A [n][C*D] and dE/dA from gB
 * [n][product_out.dim], run by the GPU kernels in the evaluator's precision on these inputs alone. */
cgq_status cgq_gpu_product_basis(cgq_gpu *gpu, int layer, int64_t n, const int32_t *species, const double *A,
                                 const double *gB, double *B, double *gA);
/* Whether the layer's product basis runs the kernels generated for its monomials (symcon_gen.cuh) */
int cgq_gpu_product_basis_generated(const cgq_gpu *gpu, int layer);
/* Kernel test entry: layer's skip tensor product out = skip_tp(x, onehot(species)) [n][out.dim] and dE/dx from
 * gout, run by the GPU kernels (per-species GEMMs) in the evaluator's precision. */
cgq_status cgq_gpu_skip_tp(cgq_gpu *gpu, int layer, int64_t n, const int32_t *species, const double *x,
                           const double *gout, double *out, double *gx);

/* Kernel test entry: MACE readout r (an index into the model's readouts) on n rows h [n][its layer's
 * product_linear.out.dim] as the GPU's readout kernels run it: out[i] = its output (before the model's scale) and
 * gh = d(out)/dh. CGQ_STATUS_INVALID_ARGUMENT where the readout does not run on those kernels (the v1 steps). */
cgq_status cgq_gpu_readout(cgq_gpu *gpu, int r, int64_t n, const double *h, double *out, double *gh);

/* The readout composed with the last layer's product linear and residual skip (readout.cuh build_composed_readout):
 * the index of the readout it stands for, or -1 where the evaluator forms h (CGQ_GPU_RO_COMPOSE=0, or a form it does
 * not compose). */
int cgq_gpu_readout_composed(const cgq_gpu *gpu);
/* The linear readout of the layer below merged into the composed one (its output added to the composed readout's, its
 * gradient to dE/dx; it has no launches of its own): its index, or -1 for none (CGQ_GPU_RO_MERGE=0, or no merge). */
int cgq_gpu_readout_merged(const cgq_gpu *gpu);
/* Kernel test entry: the composed readout on n nodes of the given species from that layer's product basis B
 * [n][product_out.dim] and input features x [n][its input dim]: out[i] = readout(product_linear(B) + skip(x)) and
 * gB, gx its derivatives. CGQ_STATUS_INVALID_ARGUMENT where there is none. */
cgq_status cgq_gpu_readout_composed_run(cgq_gpu *gpu, int64_t n, const int32_t *species, const double *B,
                                        const double *x, double *out, double *gB, double *gx);

/* Kernel test entry: a non-residual layer's linear and skip as the one per-species GEMM the evaluator runs (linskip):
 * A = skip_tp(linear(M) / avg_num_neighbors, onehot(species)) [n][skip out.dim] and gM its transpose of gA
 * [n][linear in.dim]. CGQ_STATUS_INVALID_ARGUMENT where the layer does not run them so. */
cgq_status cgq_gpu_linear_skip(cgq_gpu *gpu, int layer, int64_t n, const int32_t *species, const double *M,
                               const double *gA, double *A, double *gM);

/* Kernel test entry: a layer's node linear `which` (MACE: 0 linear_up, 1 linear, 2 product_linear; NequIP: 0 linear_1,
 * 1 linear_2) on n rows as the GPU's GEMM tiles run it in the evaluator's precision: y = linear(x) [n][out.dim] and
 * gx = linear^T(gy) [n][in.dim].
 * CGQ_STATUS_INVALID_ARGUMENT where that linear does not run as GEMM tiles. */
cgq_status cgq_gpu_linear(cgq_gpu *gpu, int layer, int which, int64_t n, const double *x, const double *gy, double *y,
                          double *gx);

/* Kernel test entry: layer's convolution (the conv plans alone, MACE or NequIP) on a graph of n nodes given by its
 * receiver rows and senders: messages M [n][out.dim] from features x [n][in1.dim], spherical harmonics Y [E][nY] and
 * per-edge weights w [E][weight_numel]; from gM = dE/dM, dE/dw, dE/dY and dE/dx (summed over each node's outgoing
 * edges), in the evaluator's precision. */
cgq_status cgq_gpu_conv(cgq_gpu *gpu, int layer, int64_t n, const int64_t *row_ptr, const int32_t *sender,
                        const double *x, const double *Y, const double *w, const double *gM, double *M, double *gw,
                        double *gY, double *gx);

/* Kernel test entry: layer's radial MLP (MACE) or edge MLP (NequIP) from its table (fp32; radial_spline.cuh) on n
 * edges whose table variable is r (MACE: the length; NequIP: length / r_max of the type pair): the outputs w
 * [n][weight_numel] and, from gw = dE/dw, gr = dE/dr. CGQ_STATUS_UNSUPPORTED where the evaluator has no tables
 * (fp64, MACE's Agnesi transform, CGQ_GPU_RADIAL_MLP). */
cgq_status cgq_gpu_radial(cgq_gpu *gpu, int layer, int64_t n, const double *r, const double *gw, double *w, double *gr);

/* Kernel test entry: MACE layer's convolution forward fused with its radial MLP's last layer (fp32, radial_conv.cuh),
 * whether or not the evaluator would choose it, on a graph of n nodes (receiver rows, senders), edge lengths r [E],
 * features x [n][in1.dim] and spherical harmonics Y [E][nY]: messages M [n][out.dim] and the weights w
 * [E][weight_numel] it formed. CGQ_STATUS_UNSUPPORTED where the layer's forward cannot run fused (fp64, no radial
 * table on the tensor cores, a plan it does not cover). */
cgq_status cgq_gpu_radial_conv(cgq_gpu *gpu, int layer, int64_t n, const int64_t *row_ptr, const int32_t *sender,
                               const double *r, const double *x, const double *Y, double *M, double *w);

/* Kernel test entry: MACE's first convolution factored through the senders' species (fp32, species_conv.cuh) on a
 * graph of n nodes (receiver rows, senders, species per node), edge lengths r [E], the cutoff per edge cut [E] (NULL
 * where the model puts it in the radial basis), features x [n][in1.dim] (equal rows for equal species: the layer's
 * input is the embedding), spherical harmonics Y [E][nY] and gM = dE/dM [n][out.dim]: the messages M [n][out.dim],
 * and dE/dY [E][nY], dE/dcut [E] and dE/dr [E] of the layer. linear = 1: with the layer's linear composed into the
 * GEMM folds as the steps run it (cgq_gpu_species_conv_linear): M is then the linear's output Mlin =
 * linear(M) / avg_num_neighbors and gM is dE/dMlin, both [n][linear.out.dim]. CGQ_STATUS_UNSUPPORTED where the
 * evaluator does not factor that layer (fp64, no radial table, another form, more species than species_conv.cuh
 * takes) or, for linear = 1, does not compose its linear. */
cgq_status cgq_gpu_species_conv(cgq_gpu *gpu, int64_t n, const int64_t *row_ptr, const int32_t *sender,
                                const int32_t *species, const double *r, const double *cut, const double *x,
                                const double *Y, const double *gM, double *M, double *gY, double *gcut, double *gr,
                                int linear);
/* 1 where the steps compose MACE's layer-0 linear into the factored convolution's GEMM folds (species_conv.cuh
 * sc_linear: residual layers without density; CGQ_GPU_SC_LINEAR=0 turns it off), else 0 */
int cgq_gpu_species_conv_linear(const cgq_gpu *gpu);

/* Kernel test entry: the graph build's exclusive scan (graph_build.cuh) of n int32 flags (host) into out[0..n] (host,
 * out[n] the total), on the current GPU */
cgq_status cgq_gpu_scan_flags(const int32_t *flags, int64_t n, int64_t *out);

/* 1 where MACE's first convolution, when it runs factored, runs its folds as node GEMMs (at least 64 channels with the
 * node GEMMs on the tensor cores, or CGQ_GPU_SPECIES_CONV=2; and a form they cover), else 0 */
int cgq_gpu_species_conv_gemm(const cgq_gpu *gpu);
/* 1 where the float node GEMMs run on the tensor cores (node_ops.cuh lin_gemm_tc_mode: sm_80 and later, not
 * CGQ_GPU_NODE_TC=0), else 0 */
int cgq_gpu_node_tensor_cores(const cgq_gpu *gpu);

/* Kernel test entry: MACE layer's convolution forward and reverse with its weight table (fp32, conv.cuh conv_weights)
 * on a graph of n receivers (CSR rows, senders among them), edge lengths r, the cutoff (multiplying the weights; NULL
 * where the model applies it elsewhere), x (n x in1 dim), Y, gM = dE/dM: the messages M, and per edge dE/dY, dE/dcut,
 * dE/dr (through the table), per node dE/dx. CGQ_STATUS_UNSUPPORTED where the layer has no weight table. */
cgq_status cgq_gpu_table_conv(cgq_gpu *gpu, int layer, int64_t n, const int64_t *row_ptr, const int32_t *sender,
                              const double *r, const double *cut, const double *x, const double *Y, const double *gM,
                              double *M, double *gY, double *gcut, double *gx, double *gr);

/* 1 where layer's convolution runs the std kernels (conv.cuh conv_std_at: its plan has their form and its weights come
 * from a weight table), else 0 */
int cgq_gpu_conv_std(const cgq_gpu *gpu, int layer);
/* 1 where layer's weight table has its compact form (radial_table.ad: the std forward reads it), else 0 */
int cgq_gpu_weight_table_compact(const cgq_gpu *gpu, int layer);

#ifdef __cplusplus
}
#endif
#endif
