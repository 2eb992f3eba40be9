/* cgequi.h: the one public C API of cgequi (MACE/NequIP equivariant potentials without libtorch). */
#ifndef CGEQUI_H
#define CGEQUI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define CGQ_API __declspec(dllexport)
#else
#define CGQ_API __attribute__((visibility("default")))
#endif

#define CGQ_VERSION_STRING "0.1.0"

/* Every call returns a status; the message of the last failure on this thread says what and how to fix. */
typedef enum cgq_status {
    CGQ_STATUS_OK = 0,
    CGQ_STATUS_INVALID_ARGUMENT = 1, /* NULL handle, bad option value */
    CGQ_STATUS_BAD_FILE = 2,         /* model file missing, corrupt, wrong version, wrong shapes */
    CGQ_STATUS_UNSUPPORTED = 3,      /* a model feature or option this build does not implement */
    CGQ_STATUS_BAD_INPUT = 4,        /* structure problems: NaN positions, unknown species, overlaps */
    CGQ_STATUS_OUT_OF_MEMORY = 5,
    CGQ_STATUS_DEVICE_ERROR = 6,     /* GPU missing or failing */
} cgq_status;

CGQ_API const char *cgq_status_string(cgq_status status);
/* Message of the last failing call on this thread ("" if none). Valid until the next failing call. */
CGQ_API const char *cgq_last_error(void);

/* ---- model ------------------------------------------------------------------------------------ */
typedef struct cgq_model cgq_model;

CGQ_API cgq_status cgq_model_load(const char *path, cgq_model **out);
CGQ_API void cgq_model_free(cgq_model *model);
CGQ_API double cgq_model_cutoff(const cgq_model *model);
CGQ_API int32_t cgq_model_num_species(const cgq_model *model);
CGQ_API int32_t cgq_model_species_z(const cgq_model *model, int32_t index);
/* Model species index of atomic number z, or -1 if the model does not know z. */
CGQ_API int32_t cgq_model_species_index(const cgq_model *model, int32_t z);
/* Human-readable multi-line summary written into buf (truncated to size). */
CGQ_API void cgq_model_describe(const cgq_model *model, char *buf, size_t size);

/* ---- evaluator: a model bound to a backend with reusable work buffers -------------------------- */
typedef enum cgq_device { CGQ_DEVICE_AUTO = 0, CGQ_DEVICE_CPU = 1, CGQ_DEVICE_CUDA = 2 } cgq_device;
typedef enum cgq_precision { CGQ_PRECISION_DEFAULT = 0, CGQ_PRECISION_FP64 = 1, CGQ_PRECISION_FP32 = 2 } cgq_precision;

typedef struct cgq_evaluator_params {
    cgq_device device;
    cgq_precision precision;
    int32_t gpu_id;
    int32_t num_threads; /* CPU (OpenMP) threads of each evaluation call; 0 = OpenMP default (the caller's setting is restored) */
} cgq_evaluator_params;

typedef struct cgq_evaluator cgq_evaluator;

CGQ_API cgq_evaluator_params cgq_evaluator_default_params(void);
/* Number of GPUs this build can use (0 without a GPU backend or without devices). */
CGQ_API int32_t cgq_gpu_count(void);
CGQ_API cgq_status cgq_evaluator_create(const cgq_model *model, const cgq_evaluator_params *params,
                                        cgq_evaluator **out);
CGQ_API void cgq_evaluator_free(cgq_evaluator *ev);
/* The backend an evaluator runs on ("cpu float64", "cuda:0 float64"), for logs. */
CGQ_API const char *cgq_evaluator_backend(const cgq_evaluator *ev);
/* The precision of the evaluator's node rows: CGQ_PRECISION_FP64 (CPU, GPU fp64) or CGQ_PRECISION_FP32 (GPU fp32,
 * whose sums of energies, forces and virials are float64). */
CGQ_API cgq_precision cgq_evaluator_precision(const cgq_evaluator *ev);
/* Bytes of device memory the evaluator holds (model and work buffers; they only grow, so after a call this is
 * the peak of that size of system). 0 for the CPU backend. */
CGQ_API size_t cgq_evaluator_device_bytes(const cgq_evaluator *ev);

/* A directed graph with edges sorted by receiver (CSR). Nodes 0..n_local-1 are local (they receive
 * edges and carry energy); nodes n_local..n_nodes-1 are ghosts (copies of nodes owned elsewhere, e.g.
 * by another MPI rank) that only send. Edge e goes from sender[e] to the receiver whose row contains
 * e; vec[e] = x_receiver - x_sender (the sender's image, if periodic). With no ghosts, periodic
 * images are simply edges to the owner node (folded). */
typedef struct cgq_graph {
    int64_t n_nodes;
    int64_t n_local;
    int64_t n_edges;
    const int32_t *species; /* [n_nodes] model species index (see cgq_model_species_index) */
    const int64_t *row_ptr; /* [n_local+1] */
    const int32_t *sender;  /* [n_edges] node index < n_nodes */
    const double *vec;      /* [n_edges*3] */
} cgq_graph;

/* Per-layer exchange of node data with the owners of ghost nodes (message passing across ranks), in one of two forms.
 *
 * Array form (forward, reverse): data is [n_nodes][width], row-major. forward: fill ghost rows from their owners'
 * rows (only the local rows hold values on entry). reverse: add ghost rows into their owners' rows (add, never
 * assign: the local rows may hold only this rank's part, or zeros; what the ghost rows hold afterwards is not read).
 *
 * Rows form (send_nodes, forward_rows, reverse_rows; used when forward_rows is set): only the rows that cross ranks
 * are handed over, so a GPU evaluator moves only those over the bus. send_nodes: the n_send distinct local nodes
 * (0 <= node < n_local) whose rows other ranks read, fixed for the evaluation. forward_rows: send [n_send][width]
 * holds those nodes' rows in send_nodes order; fill ghosts [n_nodes - n_local][width] (ghost node n_local + k is row
 * k). reverse_rows: ghosts holds this rank's contributions to its ghost nodes; write into sums [n_send][width] (assign:
 * zeros where nothing came) what the other ranks contributed to each send node; the evaluator adds them.
 *
 * Float rows (forward_rows_f32, reverse_rows_f32; optional, with the rows form): the same calls on float32 rows. An
 * evaluator whose node rows are float32 (cgq_evaluator_precision: CGQ_PRECISION_FP32) uses them when both are set,
 * moving half the bytes; the others ignore them. Give them only when every rank's evaluator is float32 (the ranks'
 * calls must match).
 *
 * Staging (stage_rows, stage_rows_in; optional, with the rows form): called once each before each rows call, they
 * return a host buffer of at least bytes (*capacity: the bytes usable from it) or NULL (the evaluator's own).
 * stage_rows: where the evaluator puts the rows it hands over (forward_rows' send, reverse_rows' ghosts);
 * stage_rows_in: where it takes the rows it gets (forward_rows' ghosts, reverse_rows' sums), which the call may find
 * already written there by a peer. Memory other ranks of a node read or write directly (an MPI shared-memory window)
 * then needs no copy on the host. A GPU evaluator pins these buffers (page-locks them) until it gets others or is
 * freed, so the caller keeps them mapped until then.
 *
 * Every rank calls them the same number of times, also with zero local nodes. */
typedef struct cgq_exchange {
    void *ctx;
    cgq_status (*forward)(void *ctx, double *data, int width);
    cgq_status (*reverse)(void *ctx, double *data, int width);
    const int32_t *send_nodes; /* rows form: [n_send] */
    int64_t n_send;
    cgq_status (*forward_rows)(void *ctx, const double *send, double *ghosts, int width);
    cgq_status (*reverse_rows)(void *ctx, const double *ghosts, double *sums, int width);
    cgq_status (*forward_rows_f32)(void *ctx, const float *send, float *ghosts, int width);
    cgq_status (*reverse_rows_f32)(void *ctx, const float *ghosts, float *sums, int width);
    void *(*stage_rows)(void *ctx, size_t bytes, size_t *capacity);
    void *(*stage_rows_in)(void *ctx, size_t bytes, size_t *capacity);
} cgq_exchange;

/* Energy (sum over local nodes), per-local-node energies (optional, [n_local]) and dE/dvec per edge
 * (optional, [n_edges*3]). exchange may be NULL when there are no ghost nodes. */
CGQ_API cgq_status cgq_evaluate_graph(cgq_evaluator *ev, const cgq_graph *graph, const cgq_exchange *exchange,
                                      double *energy, double *node_energy, double *edge_grad);

/* ---- positions-only evaluation (molecular dynamics) ------------------------------------------------
 * Candidate pairs (a Verlet list: every pair within the cutoff plus a skin) are set once per re-neighboring;
 * each step then passes only positions, and the backend keeps the edges within the cutoff, in candidate
 * order. On the GPU the graph is built, the model evaluated and forces and virials summed on the device. */
typedef struct cgq_pair_list {
    int64_t n_points;  /* position rows: the n_local receivers first, then ghost or periodic-image copies */
    int64_t n_local;   /* receivers (they carry energy) */
    int64_t n_nodes;   /* graph nodes, n_local..n_points: the local ones, then ghost nodes (rows by exchange) */
    const int32_t *species;    /* [n_nodes] model species index */
    const int64_t *row_ptr;    /* [n_local+1] candidates of each receiver */
    const int32_t *candidate;  /* [row_ptr[n_local]] position row of each candidate sender */
    const int32_t *point_node; /* [n_points] graph node of each position row: a local point's own, a copy's (a local
                                  node it folds onto, or a ghost node); -1: none (an error if used) */
    const int64_t *point_id;   /* [n_points] ids for messages (e.g. LAMMPS atom tags); NULL: row numbers */
} cgq_pair_list;

/* Copies the list (the evaluator keeps it until the next call). */
CGQ_API cgq_status cgq_evaluator_set_pairs(cgq_evaluator *ev, const cgq_pair_list *pairs);

/* The points of a domain, for cgq_evaluator_build_pairs: a cgq_pair_list without its candidates, and positions. */
typedef struct cgq_point_set {
    int64_t n_points;          /* position rows: the n_local receivers first, then ghost or periodic-image copies */
    int64_t n_local;           /* receivers */
    int64_t n_nodes;           /* n_local..n_points, as in cgq_pair_list */
    const int32_t *species;    /* [n_nodes] model species index */
    const int32_t *point_node; /* [n_points] graph node of each position row; -1: none (an error if used) */
    const int64_t *point_id;   /* [n_points] ids for messages (e.g. LAMMPS atom tags); NULL: row numbers */
    const double *positions;   /* [n_points*3] */
} cgq_point_set;

/* cgq_evaluator_set_pairs with the candidates found by the evaluator: every local point (receiver) and every other
 * point closer than radius (the cutoff plus a skin), each receiver's candidates in increasing point order. GPU
 * evaluators that build the step's graph on the device (cgq_evaluate_pairs) build this list there too, and it never
 * crosses to the host; the others build it on the host. Both give the same list. Errors (CGQ_STATUS_BAD_INPUT, the
 * atoms named by point_id): non-finite positions, points more than 1e100 A apart, points closer than 1e-8 A. */
CGQ_API cgq_status cgq_evaluator_build_pairs(cgq_evaluator *ev, const cgq_point_set *points, double radius);

/* Outputs per graph node; array pointers may be NULL when not wanted. Forces are the sums of the
 * contributions to each node (a ghost node's forces belong to its owner). virial and node_virials are
 * -sum v (x) dE/dv over edges, unsymmetrised (row a, column b: -v_a g_b), each edge split half to its
 * receiver, half to its sender in node_virials. */
typedef struct cgq_node_result {
    double energy;
    double virial[9];
    double *forces;        /* [n_nodes*3] eV/A */
    double *node_energies; /* [n_local] eV */
    double *node_virials;  /* [n_nodes*9] eV */
} cgq_node_result;

/* positions: [n_points*3] of the list set last. Edges: candidates with |x_receiver - x_sender| < cutoff
 * (strict). exchange: as for cgq_evaluate_graph; with several domains every domain passes it (the exchanges
 * are collective), also one whose list has no ghosts. */
CGQ_API cgq_status cgq_evaluate_pairs(cgq_evaluator *ev, const double *positions, const cgq_exchange *exchange,
                                      cgq_node_result *result);

/* A structure: positions in Angstrom, cell rows are lattice vectors, pbc per lattice direction. */
typedef struct cgq_system {
    int64_t n_atoms;
    const double *positions;       /* [n_atoms*3] */
    const int32_t *atomic_numbers; /* [n_atoms] */
    double cell[9];
    int32_t pbc[3];
} cgq_system;

/* Outputs; array pointers may be NULL when not wanted. Virial = -dE/dstrain (eV), symmetric. */
typedef struct cgq_result {
    double energy;
    double virial[9];
    double *forces;          /* [n_atoms*3] eV/A */
    double *atomic_energies; /* [n_atoms] eV */
    double *atomic_virials;  /* [n_atoms*9] eV; sums to virial */
} cgq_result;

CGQ_API cgq_status cgq_evaluate_system(cgq_evaluator *ev, const cgq_system *sys, cgq_result *result);

#ifdef __cplusplus
}
#endif
#endif /* CGEQUI_H */
