/* pair_cgequi.cpp: LAMMPS pair style `cgequi`. Builds a receiver-sorted graph of local atoms from
 * local+ghost positions every step (from candidate pairs kept between re-neighborings), lets the cgequi
 * C library evaluate it, and turns edge gradients into forces, virial, per-atom energies and per-atom
 * virials.
 * Ghosts that are periodic images of this rank's atoms are folded onto them (found by tag); with one rank that is
 * every ghost. Ghosts owned by other ranks are graph nodes whose features arrive per layer from their owners, and
 * whose gradients and forces go back to them (MPI point to point, planned when LAMMPS re-neighbors). Both give the
 * same numbers. */
#include "pair_cgequi.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "atom.h"
#include "comm.h"
#include "domain.h"
#include "error.h"
#include "force.h"
#include "memory.h"
#include "neighbor.h"
#include "update.h"
#include "utils.h"

extern "C" {
#include "io/xyz.h"
}

using namespace LAMMPS_NS;

namespace {
template <class T>
cgq_status forward_rows_cb(void *ctx, const T *send, T *ghosts, int width) {
    static_cast<PairCGEqui *>(ctx)->exchange_rows(send, ghosts, width, false);
    return CGQ_STATUS_OK;
}
template <class T>
cgq_status reverse_rows_cb(void *ctx, const T *ghosts, T *sums, int width) {
    static_cast<PairCGEqui *>(ctx)->exchange_rows(ghosts, sums, width, true);
    return CGQ_STATUS_OK;
}
void *stage_rows_cb(void *ctx, size_t bytes, size_t *capacity) {
    return static_cast<PairCGEqui *>(ctx)->stage_rows(bytes, capacity, false);
}
void *stage_rows_in_cb(void *ctx, size_t bytes, size_t *capacity) {
    return static_cast<PairCGEqui *>(ctx)->stage_rows(bytes, capacity, true);
}
template <class T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }
template <>
MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
const char *device_name(cgq_device d) { return d == CGQ_DEVICE_CUDA ? "cuda" : d == CGQ_DEVICE_CPU ? "cpu" : "auto"; }
}  // namespace

PairCGEqui::PairCGEqui(LAMMPS *lmp) : Pair(lmp) {
    single_enable = 0;
    restartinfo = 0;
    one_coeff = 1;
    manybody_flag = 1;
    no_virial_fdotr_compute = 1; /* the virial comes from edge gradients, forces are folded */
    centroidstressflag = CENTROID_AVAIL;
    /* LAMMPS's forward communication carries each ghost's owner (rank, node) when the exchange is planned; the rows
     * themselves go straight to and from their owners */
    comm_forward = 2;
    params = cgq_evaluator_default_params();
    times.on = getenv("CGQ_PAIR_TIMING") != nullptr;
    times.rank = comm->me;
}

PairCGEqui::~PairCGEqui() {
    if (times.on && times.steps) {
        const timing &t = times;
        const long later = t.rebuilds > 1 ? t.rebuilds - 1 : 1;
        fprintf(stderr,
                "pair cgequi timing, rank %d, %ld steps, %ld candidate rebuilds (ms per step): positions and checks "
                "%.3f, rebuilds %.3f; evaluate %.3f (of which per-layer exchanges %.3f, moving %.2f MB in %s rows%s, their "
                "waits %.3f); forces "
                "to LAMMPS and ghost rows to their owners %.3f\n"
                "pair cgequi timing, rank %d, ms per rebuild (node map, the evaluator's candidate pairs): the first "
                "%.3f, %.3f; the later ones %.3f, %.3f\n",
                t.rank, t.steps, t.rebuilds, 1e3 * t.update / t.steps, 1e3 * (t.node_map + t.pairs) / t.steps,
                1e3 * t.evaluate / t.steps, 1e3 * t.layer_exchange / t.steps, 1e-6 * t.layer_bytes / t.steps,
                float_rows ? "float" : "double",
                direct_rows ? " staged in the peer's memory" : shared_rows ? " shared within the node" : "",
                1e3 * t.layer_wait / t.steps,
                1e3 * t.fold / t.steps, t.rank,
                1e3 * t.first[0], 1e3 * t.first[1],
                1e3 * (t.node_map - t.first[0]) / later, 1e3 * (t.pairs - t.first[1]) / later);
    }
    free_model();
#ifndef MPI_STUBS
    if (node_comm != MPI_COMM_NULL) MPI_Comm_free(&node_comm);
#endif
    if (allocated) {
        memory->destroy(setflag);
        memory->destroy(cutsq);
    }
}

void PairCGEqui::free_model() {
    cgq_evaluator_free(evaluator);
    cgq_model_free(model);
    evaluator = nullptr;
    model = nullptr;
    free_shared_rows(); /* after the evaluator, which may have pinned them */
}

void PairCGEqui::fail_all(const std::string &what) {
    error->all(FLERR, std::string("pair_style cgequi: " + what + ": " + cgq_last_error()));
    throw;  // not reached: error->all does not return
}

void PairCGEqui::fail_one(const std::string &what) {
    error->one(FLERR, std::string("pair_style cgequi: " + what + ": " + cgq_last_error()));
    throw;
}

/* pair_style cgequi [device auto|cpu|cuda] [precision fp64|fp32] [gpu_id N] */
void PairCGEqui::settings(int narg, char **arg) {
    params = cgq_evaluator_default_params();
    gpu_id_given = false;
    for (int i = 0; i < narg; i += 2) {
        if (i + 1 >= narg) error->all(FLERR, std::string("pair_style cgequi: keyword ") + arg[i] + " needs a value");
        const std::string key = arg[i], val = arg[i + 1];
        if (key == "device") {
            if (val == "auto") params.device = CGQ_DEVICE_AUTO;
            else if (val == "cpu") params.device = CGQ_DEVICE_CPU;
            else if (val == "cuda") params.device = CGQ_DEVICE_CUDA;
            else error->all(FLERR, std::string("pair_style cgequi: device must be auto, cpu or cuda, not " + val));
        } else if (key == "precision") {
            if (val == "fp64") params.precision = CGQ_PRECISION_FP64;
            else if (val == "fp32") params.precision = CGQ_PRECISION_FP32;
            else error->all(FLERR, std::string("pair_style cgequi: precision must be fp64 or fp32, not " + val));
        } else if (key == "gpu_id") {
            params.gpu_id = utils::inumeric(FLERR, arg[i + 1], false, lmp);
            gpu_id_given = true;
        } else {
            error->all(FLERR, std::string("pair_style cgequi: unknown keyword " + key + " (device, precision, gpu_id)"));
        }
    }
}

/* pair_coeff * * model.h5 El1 El2 ... (one element or NULL per atom type) */
void PairCGEqui::coeff(int narg, char **arg) {
    const int ntypes = atom->ntypes;
    if (narg != 3 + ntypes)
        error->all(FLERR, std::string("pair_coeff for cgequi: expected '* * model.h5' and " + std::to_string(ntypes) +
                              " element names (one per atom type, NULL to skip a type), got " + std::to_string(narg) +
                              " arguments"));
    if (strcmp(arg[0], "*") != 0 || strcmp(arg[1], "*") != 0)
        error->all(FLERR, std::string("pair_coeff for cgequi must start with '* *'"));
    if (!allocated) {
        allocated = 1;
        memory->create(setflag, ntypes + 1, ntypes + 1, "pair:setflag");
        memory->create(cutsq, ntypes + 1, ntypes + 1, "pair:cutsq");
    }
    free_model();
    model_path = utils::get_potential_file_path(arg[2]);
    if (model_path.empty()) error->all(FLERR, std::string("pair_style cgequi: cannot find model file ") + arg[2]);
    if (cgq_model_load(model_path.c_str(), &model) != CGQ_STATUS_OK) fail_all("loading " + model_path);
    cutoff = cgq_model_cutoff(model);
    type_species.assign(ntypes + 1, -1);
    std::string known;
    for (int s = 0; s < cgq_model_num_species(model); s++)
        known += std::string(s ? " " : "") + cgq_element_symbol(cgq_model_species_z(model, s));
    for (int t = 1; t <= ntypes; t++) {
        const char *el = arg[2 + t];
        if (strcmp(el, "NULL") == 0) {
            if (force->pair == this) /* alone, a NULL type would have no interactions at all */
                error->all(FLERR, std::string("pair_coeff for cgequi: type ") + std::to_string(t) +
                                      " is NULL, but cgequi is the only pair style; give it an element of the model, "
                                      "or use pair_style hybrid/overlay to let another style handle it");
            continue;
        }
        const int z = cgq_element_z(el);
        if (z <= 0) error->all(FLERR, std::string("pair_coeff for cgequi: '") + el + "' (type " + std::to_string(t) +
                                          ") is not an element symbol");
        const int s = cgq_model_species_index(model, z);
        if (s < 0)
            error->all(FLERR, std::string("pair_coeff for cgequi: element ") + el + " (type " + std::to_string(t) +
                                  ") is not in model " + model_path + " (its elements: " + known + ")");
        type_species[t] = s;
    }
    for (int i = 1; i <= ntypes; i++)
        for (int j = i; j <= ntypes; j++) setflag[i][j] = (type_species[i] >= 0 && type_species[j] >= 0) ? 1 : 0;
}

void PairCGEqui::init_style() {
    if (strcmp(update->unit_style, "metal") != 0)
        error->all(FLERR, std::string("pair_style cgequi needs 'units metal' (eV, Angstrom); the input uses units ") +
                              update->unit_style);
    if (!atom->tag_enable) error->all(FLERR, std::string("pair_style cgequi needs atom IDs (atom_modify id yes)"));
    if (!model) error->all(FLERR, std::string("pair_style cgequi: no pair_coeff given"));
    /* One GPU per MPI rank, by node-local rank, unless gpu_id says otherwise. */
    const int ngpu = cgq_gpu_count();
    if (params.device != CGQ_DEVICE_CPU && ngpu > 0 && !gpu_id_given) {
        int local_rank = 0, local_size = 1;
#ifndef MPI_STUBS /* LAMMPS's serial MPI stubs have no shared-memory split: one rank */
        MPI_Comm node;
        MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, comm->me, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &local_rank);
        MPI_Comm_size(node, &local_size);
        MPI_Comm_free(&node);
#endif
        if (local_size > ngpu)
            error->all(FLERR, std::string("pair_style cgequi: ") + std::to_string(local_size) + " MPI ranks on one node share " +
                                  std::to_string(ngpu) + " GPU(s); run at most one rank per GPU, or set gpu_id to share a "
                                  "GPU deliberately (or device cpu)");
        params.gpu_id = local_rank;
    }
    if (!evaluator && cgq_evaluator_create(model, &params, &evaluator) != CGQ_STATUS_OK)
        fail_all("creating the evaluator");
    /* float rows between ranks (half the bytes) only where every rank's evaluator computes in float32: the ranks'
     * messages must match (CGQ_PAIR_FLOAT_ROWS=0: double rows, for comparisons) */
    const char *fr = getenv("CGQ_PAIR_FLOAT_ROWS");
    int all_fp32 = cgq_evaluator_precision(evaluator) == CGQ_PRECISION_FP32 && !(fr && !strcmp(fr, "0"));
    MPI_Allreduce(MPI_IN_PLACE, &all_fp32, 1, MPI_INT, MPI_MIN, world);
    float_rows = all_fp32 != 0;
    /* peers on this node read each other's rows from a shared-memory window instead of through MPI
     * (CGQ_PAIR_SHARED_ROWS=0: MPI only, for comparisons) */
    const char *sr = getenv("CGQ_PAIR_SHARED_ROWS");
    int use_shared = !(sr && !strcmp(sr, "0"));
    MPI_Allreduce(MPI_IN_PLACE, &use_shared, 1, MPI_INT, MPI_MIN, world);
    setup_node_comm(use_shared != 0);
    /* CGQ_PAIR_DIRECT_ROWS=0: rows through each rank's own out region even where they could go straight into the
     * peer's (for comparisons); the same on every rank, as the peers agree on direct_rows */
    const char *dr = getenv("CGQ_PAIR_DIRECT_ROWS");
    int want_direct = !(dr && !strcmp(dr, "0"));
    MPI_Allreduce(MPI_IN_PLACE, &want_direct, 1, MPI_INT, MPI_MIN, world);
    direct_wanted = want_direct != 0;
    /* The graph is built from positions of local and ghost atoms (cgequi's own cell list, with LAMMPS's
     * skin), so no LAMMPS neighbor list is requested: this works the same on every LAMMPS version. */
    cand_skin = neighbor->skin;
    cand_ncalls = -1; /* a new run: rebuild the candidates */
    plan_ncalls = -1; /* and plan the exchange (every rank, together) */
    if (comm->me == 0) {
        char desc[4096];
        cgq_model_describe(model, desc, sizeof desc);
        std::string types;
        for (int t = 1; t <= atom->ntypes; t++)
            types += " " + std::to_string(t) + "->" +
                     (type_species[t] >= 0 ? cgq_element_symbol(cgq_model_species_z(model, type_species[t])) : "NULL");
        utils::logmesg(lmp, "pair_style cgequi: model " + model_path + "\n" + desc + "  types" + types +
                                "\n  backend " + cgq_evaluator_backend(evaluator) + " (device " + device_name(params.device) + "), " +
                                std::to_string(comm->nprocs) + " rank(s): ghosts " +
                                (comm->nprocs == 1 ? "folded onto owners\n"
                                                   : std::string("of this rank's atoms folded onto them, the others' "
                                                                 "exchanged per layer in ") +
                                                         (float_rows ? "float" : "double") + " rows" +
                                                         (shared_rows ? ", within a node through shared memory\n"
                                                                      : "\n")));
    }
}

double PairCGEqui::init_one(int, int) { return cutoff; }

/* Points (local then ghost atoms of cgequi's types) and candidate pairs (within cutoff + skin, local points
 * as receivers), handed to the evaluator, which keeps them until the next rebuild. Rebuilt only when LAMMPS
 * has re-neighbored (atoms renumbered, ghosts changed) or an atom has moved more than half the skin since:
 * between rebuilds every edge within the cutoff is among the candidates (a Verlet list of cgequi's own, so no
 * LAMMPS neighbor request, which changed form across LAMMPS versions). */
void PairCGEqui::build_candidates() {
    const int nlocal = atom->nlocal, nall = nlocal + atom->nghost;
    const int *type = atom->type;
    double **x = atom->x;
    point_atom.clear();
    cand_local = 0;
    for (int i = 0; i < nall; i++) { /* local atoms come first in LAMMPS, so local points do too */
        if (type_species[type[i]] < 0) continue;
        point_atom.push_back(i);
        if (i < nlocal) cand_local++;
    }
    const int64_t np = (int64_t)point_atom.size();
    points_are_atoms = np == nall; /* point k is atom k (update_points) */
    cand_pos.resize(3 * np + 3);
    for (int64_t k = 0; k < np; k++)
        for (int d = 0; d < 3; d++) cand_pos[3 * k + d] = x[point_atom[k]][d];
    point_id.resize(np + 1); /* the tags: atoms are named by them in messages, and a changed tag forces a rebuild */
    for (int64_t k = 0; k < np; k++) point_id[k] = (int64_t)atom->tag[point_atom[k]];
    const double t0 = MPI_Wtime();
    /* the owners are found when LAMMPS re-neighbors, on every rank at once; a rank's own rebuild after half a skin
     * keeps the same atoms at the same indices, so the same owners */
    if (comm->nprocs > 1 && neighbor->ncalls != owners_ncalls) find_owners();
    /* graph nodes: the local points, then one per atom of another rank among the ghost points (its rows arrive by
     * exchange). Images of an atom take the node of its first point (found by tag): a local atom's own, or the ghost
     * node of another rank's atom (several images of it gave the owner as many rows to send) */
    point_node.resize(np + 1);
    node_atom.assign(point_atom.begin(), point_atom.begin() + cand_local);
    for (int64_t k = 0; k < cand_local; k++) point_node[k] = (int32_t)k;
    int64_t max_tag = 0;
    for (int64_t k = 0; k < np; k++) max_tag = std::max(max_tag, point_id[k]);
    auto own_ghost = [&](int64_t k, int32_t owner) { /* (one rank: every ghost has a local owner, else an error) */
        if (owner >= 0 || comm->nprocs == 1) return owner;
        node_atom.push_back(point_atom[k]);
        return (int32_t)(node_atom.size() - 1);
    };
    if (max_tag <= 4 * np + 1024) { /* dense IDs (the usual): a table by ID (a hash map took 0.7 ms a rebuild at
                                       13,897 points on the GPU machine) */
        node_of_id.assign(max_tag + 1, -1);
        for (int64_t k = 0; k < cand_local; k++) node_of_id[point_id[k]] = (int32_t)k;
        for (int64_t k = cand_local; k < np; k++) {
            int32_t &node = node_of_id[point_id[k]];
            point_node[k] = node = own_ghost(k, node);
        }
    } else {
        std::unordered_map<tagint, int32_t> node_of_tag;
        node_of_tag.reserve(2 * cand_local + 1);
        for (int64_t k = 0; k < cand_local; k++) node_of_tag[(tagint)point_id[k]] = (int32_t)k;
        for (int64_t k = cand_local; k < np; k++) {
            int32_t &node = node_of_tag.emplace((tagint)point_id[k], -1).first->second;
            point_node[k] = node = own_ghost(k, node);
        }
    }
    if (comm->nprocs > 1) group_ghosts_by_owner();
    const int64_t n_nodes = (int64_t)node_atom.size();
    atom_node.assign(nall, -1);
    for (int64_t k = 0; k < np; k++) atom_node[point_atom[k]] = point_node[k];
    species.resize(n_nodes + 1);
    for (int64_t k = 0; k < n_nodes; k++) species[k] = type_species[type[node_atom[k]]];
    /* the candidates: on the GPU where the evaluator runs the step there (cgq_evaluator_build_pairs) */
    const cgq_point_set pts{np, cand_local, n_nodes, species.data(), point_node.data(), point_id.data(), cand_pos.data()};
    const double t1 = MPI_Wtime();
    if (cgq_evaluator_build_pairs(evaluator, &pts, cutoff + cand_skin) != CGQ_STATUS_OK)
        fail_one("building the candidate pairs");
    const double t2 = MPI_Wtime();
    if (!times.rebuilds) times.first[0] = t1 - t0, times.first[1] = t2 - t1;
    times.rebuilds++, times.node_map += t1 - t0, times.pairs += t2 - t1;
    cand_ncalls = neighbor->ncalls, cand_nlocal = nlocal, cand_nall = nall;
}

/* This step's positions of the points (point_xyz), read while checking whether the candidates must be rebuilt (see
 * build_candidates); a rebuild gathers them itself (cand_pos). Where the points are LAMMPS's atoms in its order (every
 * type is cgequi's: the usual case), the check reads LAMMPS's positions as they lie, one array (as LAMMPS allocates
 * its 2-d arrays), and the evaluator takes that array without a copy; else they are gathered into `points`. */
void PairCGEqui::update_points() {
    const int nlocal = atom->nlocal, nall = nlocal + atom->nghost;
    double **x = atom->x;
    bool rebuild = neighbor->ncalls != cand_ncalls || nlocal != cand_nlocal || nall != cand_nall;
    if (!rebuild) { /* the same atoms at the same indices (LAMMPS sorts and migrates only when it re-neighbors,
                       * but a run with "pre no" may re-neighbor without a new count), none moved > skin/2 */
        const int64_t np = (int64_t)point_atom.size();
        const double half_skin2 = 0.25 * cand_skin * cand_skin, *c = cand_pos.data();
        const tagint *tag = atom->tag;
        /* point k (atom i, at p) moved more than half the skin since the rebuild, or is another atom */
        auto moved_from = [&](int64_t k, int i, const double *p) {
            const double *q = &c[3 * k];
            const double dx = p[0] - q[0], dy = p[1] - q[1], dz = p[2] - q[2];
            return (dx * dx + dy * dy + dz * dz > half_skin2) | ((int64_t)tag[i] != point_id[k]);
        };
        int moved = 0;
        /* threads only for large domains: between steps they sleep through the GPU's evaluation; with 16 threads
         * the gathering loop took 0.4-0.6 ms per step at 12,662 points (CGQ_PAIR_TIMING, GPU machine), serially
         * ~0.1 ms */
        if (points_are_atoms && np > 0 && x[np - 1] == x[0] + 3 * (np - 1)) {
            const double *p = x[0];
#if defined(_OPENMP)
#pragma omp parallel for reduction(| : moved) if (np > (1 << 17))
#endif
            for (int64_t k = 0; k < np; k++) moved |= moved_from(k, (int)k, p + 3 * k);
            point_xyz = p;
        } else {
            points.resize(3 * np + 3);
#if defined(_OPENMP)
#pragma omp parallel for reduction(| : moved) if (np > (1 << 17))
#endif
            for (int64_t k = 0; k < np; k++) {
                const double *p = x[point_atom[k]];
                moved |= moved_from(k, point_atom[k], p);
                points[3 * k] = p[0], points[3 * k + 1] = p[1], points[3 * k + 2] = p[2];
            }
            point_xyz = points.data();
        }
        rebuild = moved != 0;
    }
    if (!rebuild) return;
    build_candidates();
    point_xyz = cand_pos.data(); /* unchanged until the next rebuild */
}

void PairCGEqui::compute(int eflag, int vflag) {
    ev_init(eflag, vflag);
    const double t0 = MPI_Wtime(), rebuilt0 = times.node_map + times.pairs;
    update_points();
    /* the ghost nodes change only when LAMMPS re-neighbors, on every rank at once (a rank's own rebuild after half a
     * skin keeps the same atoms, so the same nodes) */
    if (comm->nprocs > 1 && neighbor->ncalls != plan_ncalls) plan_exchange();
    const double t1 = MPI_Wtime();
    const int64_t n_local = cand_local, n_nodes = (int64_t)node_atom.size();
    /* every rank takes part in the exchanges, also one without ghost nodes (others may read its rows) */
    const bool exchanges = comm->nprocs > 1;
    const bool peratom_virial = vflag_atom || cvflag_atom;
    node_force.resize(3 * n_nodes + 3);
    node_energy.resize(n_local + 1);
    node_virial.resize(peratom_virial ? 9 * n_nodes + 9 : 0);
    cgq_node_result r{};
    r.forces = node_force.data();
    r.node_energies = node_energy.data();
    r.node_virials = peratom_virial ? node_virial.data() : nullptr;
    /* the rows form: a GPU evaluator moves only the rows that cross ranks over the bus */
    cgq_exchange xc{this,
                    nullptr,
                    nullptr,
                    send_nodes.data(),
                    (int64_t)send_nodes.size(),
                    forward_rows_cb<double>,
                    reverse_rows_cb<double>,
                    float_rows ? forward_rows_cb<float> : nullptr,
                    float_rows ? reverse_rows_cb<float> : nullptr,
                    shared_rows ? stage_rows_cb : nullptr, /* peers on this node read the rows where they are staged */
                    shared_rows ? stage_rows_in_cb : nullptr};
    in_evaluate = true;
    const cgq_status st = cgq_evaluate_pairs(evaluator, point_xyz, exchanges ? &xc : nullptr, &r);
    in_evaluate = false;
    if (st != CGQ_STATUS_OK) fail_one("evaluating the model");
    const double t2 = MPI_Wtime();
    if (exchanges) { /* ghost rows (forces, per-atom virials) -> their owners on other ranks */
        fold_ghost_rows(node_force.data(), 3);
        if (peratom_virial) fold_ghost_rows(node_virial.data(), 9);
    }
    double **f = atom->f;
    for (int64_t k = 0; k < n_local; k++) {
        const int i = node_atom[k];
        const double *fk = &node_force[3 * k];
        f[i][0] += fk[0];
        f[i][1] += fk[1];
        f[i][2] += fk[2];
        if (eflag_atom) eatom[i] += node_energy[k];
        if (!peratom_virial) continue;
        const double *w = &node_virial[9 * k];
        if (vflag_atom) {
            vatom[i][0] += w[0];
            vatom[i][1] += w[4];
            vatom[i][2] += w[8];
            vatom[i][3] += 0.5 * (w[1] + w[3]);
            vatom[i][4] += 0.5 * (w[2] + w[6]);
            vatom[i][5] += 0.5 * (w[5] + w[7]);
        }
        if (cvflag_atom) {
            static const int order[9] = {0, 4, 8, 1, 2, 5, 3, 6, 7}; /* xx yy zz xy xz yz yx zx zy */
            for (int c = 0; c < 9; c++) cvatom[i][c] += w[order[c]];
        }
    }
    if (eflag_global) eng_vdwl += r.energy;
    if (vflag_global) {
        const double *vir = r.virial;
        virial[0] += vir[0];
        virial[1] += vir[4];
        virial[2] += vir[8];
        virial[3] += 0.5 * (vir[1] + vir[3]);
        virial[4] += 0.5 * (vir[2] + vir[6]);
        virial[5] += 0.5 * (vir[5] + vir[7]);
    }
    times.steps++;
    times.update += t1 - t0 - (times.node_map + times.pairs - rebuilt0); /* the rebuild is counted apart */
    times.evaluate += t2 - t1;
    times.fold += MPI_Wtime() - t2;
}

/* Each atom's owner (rank, graph node) at its ghosts too (owner_info), by LAMMPS's forward communication. Collective:
 * called when LAMMPS re-neighbors. */
void PairCGEqui::find_owners() {
    const int nlocal = atom->nlocal, nall = nlocal + atom->nghost, me = comm->me;
    owner_info.assign(2 * (size_t)nall + 2, -1.0);
    for (int i = 0; i < nlocal; i++) owner_info[2 * i] = me; /* node -1: not one of cgequi's atoms */
    for (int64_t k = 0; k < cand_local; k++) owner_info[2 * (size_t)point_atom[k] + 1] = (double)k;
#ifdef CGQ_LAMMPS_OLD_COMM_API
    comm->forward_comm_pair(this);
#else
    comm->forward_comm(this, 2);
#endif
    owners_ncalls = neighbor->ncalls;
}

/* owner_info's (rank, node) of atom i; (-1, -1) for an atom it does not cover */
const double *PairCGEqui::owner_of(int i) const {
    static const double none[2] = {-1.0, -1.0};
    return i >= 0 && 2 * (size_t)i + 1 < owner_info.size() ? &owner_info[2 * (size_t)i] : none;
}

/* The ghost nodes renumbered by owner rank (stable): each peer's ghost rows are then one block, which MPI fills in
 * place, and which the reverse sends from its place */
void PairCGEqui::group_ghosts_by_owner() {
    const int64_t ng = (int64_t)node_atom.size() - cand_local;
    if (ng <= 0) return;
    std::vector<int> order(ng);
    for (int64_t q = 0; q < ng; q++) order[q] = (int)q;
    auto owner_rank = [&](int q) { return owner_of(node_atom[cand_local + q])[0]; };
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return owner_rank(a) < owner_rank(b); });
    std::vector<int32_t> renumbered(ng);
    std::vector<int> ghost_atom(ng);
    for (int64_t q = 0; q < ng; q++) {
        renumbered[order[q]] = (int32_t)(cand_local + q);
        ghost_atom[q] = node_atom[cand_local + order[q]];
    }
    std::copy(ghost_atom.begin(), ghost_atom.end(), node_atom.begin() + cand_local);
    for (size_t k = cand_local; k < point_atom.size(); k++)
        if (point_node[k] >= cand_local) point_node[k] = renumbered[point_node[k] - cand_local];
}

/* The lists that the rows follow, from each ghost node's owner (rank, node): send_nodes, every local node some peer
 * wants; a peer's send list holds the positions in send_nodes of the nodes it wants (in its order), its recv list
 * this rank's ghost rows it owns. Collective. */
void PairCGEqui::plan_exchange() {
    const int me = comm->me, nprocs = comm->nprocs;
    std::vector<std::vector<int>> want(nprocs), ghosts(nprocs); /* per owner rank: its nodes, this rank's ghosts */
    for (size_t g = cand_local; g < node_atom.size(); g++) {
        const double *o = owner_of(node_atom[g]);
        const int r = (int)o[0], k = (int)o[1];
        if (r < 0 || r >= nprocs || r == me || k < 0)
            error->one(FLERR, "pair_style cgequi: ghost atom " + std::to_string((long long)atom->tag[node_atom[g]]) +
                                  " has no owner among the other ranks' cgequi atoms (rank " + std::to_string(r) + ")");
        want[r].push_back(k);
        ghosts[r].push_back((int)(g - cand_local));
    }
    std::vector<int> nwant(nprocs), nasked(nprocs), sdisp(nprocs + 1, 0), rdisp(nprocs + 1, 0);
    for (int r = 0; r < nprocs; r++) nwant[r] = (int)want[r].size();
    MPI_Alltoall(nwant.data(), 1, MPI_INT, nasked.data(), 1, MPI_INT, world);
    for (int r = 0; r < nprocs; r++) sdisp[r + 1] = sdisp[r] + nwant[r], rdisp[r + 1] = rdisp[r] + nasked[r];
    std::vector<int> wanted(sdisp[nprocs] + 1), asked(rdisp[nprocs] + 1);
    for (int r = 0; r < nprocs; r++) std::copy(want[r].begin(), want[r].end(), wanted.begin() + sdisp[r]);
    MPI_Alltoallv(wanted.data(), nwant.data(), sdisp.data(), MPI_INT, asked.data(), nasked.data(), rdisp.data(),
                  MPI_INT, world);
    for (int i = 0; i < rdisp[nprocs]; i++)
        if (asked[i] < 0 || asked[i] >= cand_local) {
            const int r = (int)(std::upper_bound(rdisp.begin(), rdisp.end(), i) - rdisp.begin()) - 1;
            error->one(FLERR, "pair_style cgequi: rank " + std::to_string(r) + " asked for node " +
                                  std::to_string(asked[i]) + ", not one of this rank's " + std::to_string(cand_local));
        }
    /* send_nodes in the order asked (ranks, then their lists), each node once: a peer's rows are then one contiguous
     * block where it alone asks for them (always with 2 ranks), and move without packing */
    send_nodes.clear();
    std::vector<int> position(cand_local + 1, -1);
    std::vector<int> asked_by(cand_local + 1, -1); /* each peer's list names a node once (it folds images by tag) */
    for (int r = 0; r < nprocs; r++)
        for (int i = rdisp[r]; i < rdisp[r + 1]; i++) {
            if (asked_by[asked[i]] == r)
                error->one(FLERR, "pair_style cgequi: rank " + std::to_string(r) + " asked for node " +
                                      std::to_string(asked[i]) + " twice");
            asked_by[asked[i]] = r;
            if (position[asked[i]] < 0) position[asked[i]] = (int)send_nodes.size(), send_nodes.push_back(asked[i]);
        }
    /* the first row of a list of consecutive rows, else -1 */
    auto block_start = [](const std::vector<int> &rows) {
        for (size_t q = 1; q < rows.size(); q++)
            if (rows[q] != rows[0] + (int)q) return -1;
        return rows.empty() ? -1 : rows[0];
    };
    peers.clear();
    for (int r = 0; r < nprocs; r++) {
        if (!nwant[r] && !nasked[r]) continue;
        peer p{r, {}, ghosts[r], -1, -1, false, {}, {}};
        for (int i = rdisp[r]; i < rdisp[r + 1]; i++) p.send.push_back(position[asked[i]]);
        p.send_block = block_start(p.send), p.recv_block = block_start(p.recv);
        peers.push_back(std::move(p));
    }
    /* the reverse's sums land straight in place when one peer contributes to every send row, in order */
    sums_in_place = peers.size() == 1 && peers[0].send_block == 0 && peers[0].send.size() == send_nodes.size();
    /* peers on this node: where in their staged rows each row this rank reads sits (their lists for this rank) */
    /* and whether this rank's rows map onto its only peer's one to one, in order, both ways (direct_rows below) */
    const int64_t n_ghost = (int64_t)node_atom.size() - cand_local;
    int one_to_one = peers.size() == 1 && peers[0].send_block == 0 && peers[0].send.size() == send_nodes.size() &&
                     peers[0].recv_block == 0 && (int64_t)peers[0].recv.size() == n_ghost;
    std::vector<int> peer_one_to_one(peers.size() + 1, 0);
    std::vector<MPI_Request> req;
    req.reserve(6 * peers.size());
    for (size_t k = 0; k < peers.size(); k++) {
        peer &p = peers[k];
        p.on_node = shared_rows && node_rank_of[p.rank] >= 0;
        if (!p.on_node) continue;
        p.far_send.assign(p.recv.size() + 1, 0), p.far_recv.assign(p.send.size() + 1, 0);
        req.resize(req.size() + 6);
        MPI_Irecv(&peer_one_to_one[k], 1, MPI_INT, p.rank, 3, world, &req[req.size() - 6]);
        MPI_Isend(&one_to_one, 1, MPI_INT, p.rank, 3, world, &req[req.size() - 5]);
        MPI_Irecv(p.far_send.data(), (int)p.recv.size(), MPI_INT, p.rank, 1, world, &req[req.size() - 4]);
        MPI_Irecv(p.far_recv.data(), (int)p.send.size(), MPI_INT, p.rank, 2, world, &req[req.size() - 3]);
        MPI_Isend(p.send.data(), (int)p.send.size(), MPI_INT, p.rank, 1, world, &req[req.size() - 2]);
        MPI_Isend(p.recv.data(), (int)p.recv.size(), MPI_INT, p.rank, 2, world, &req[req.size() - 1]);
    }
    if (!req.empty()) MPI_Waitall((int)req.size(), req.data(), MPI_STATUSES_IGNORE);
    /* one peer, on the node, whose rows map onto this rank's one to one, in order, both ways, and the same seen from
     * it: each rank's outgoing rows can be staged straight in the other's incoming region */
    direct_rows = one_to_one && peers[0].on_node && peer_one_to_one[0] && direct_wanted;
    plan_ncalls = neighbor->ncalls;
}

/* ---- rows shared within a node -------------------------------------------------------------------------------------
 * The ranks of a node share a window of host memory (MPI-3): each rank stages the rows it hands over (the send rows
 * forward, its ghost rows' contributions in reverse) in its own segment, where a GPU evaluator copies them straight
 * from the device (cgq_exchange.stage_rows), and its peers on the node read them there: no MPI transfer (which moved
 * ~3.5 GB/s each way between two ranks of an H200 node, session 43) and no packing. */

void PairCGEqui::setup_node_comm(bool wanted) {
#ifndef MPI_STUBS
    if (node_comm == MPI_COMM_NULL) {
        MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, comm->me, MPI_INFO_NULL, &node_comm);
        MPI_Comm_rank(node_comm, &node_me);
        int node_size = 1;
        MPI_Comm_size(node_comm, &node_size);
        std::vector<int> world_of(node_size);
        MPI_Allgather(&comm->me, 1, MPI_INT, world_of.data(), 1, MPI_INT, node_comm);
        node_rank_of.assign(comm->nprocs, -1);
        for (int r = 0; r < node_size; r++) node_rank_of[world_of[r]] = r;
    }
    int node_size = 1;
    MPI_Comm_size(node_comm, &node_size);
    shared_rows = wanted && node_size > 1;
#else
    (void)wanted;
    shared_rows = false;
#endif
    plan_ncalls = -1; /* the peers' far lists follow shared_rows */
}

/* A segment is [in 0 | in 1 | out], rows_cap bytes each: the rows a rank hands over in out (its peers on the node read
 * them there), or, with direct_rows, in its peer's incoming region, which alternates between two so that a rank
 * stages the next exchange's rows while its peer may still be copying the last ones to its GPU. */
char *PairCGEqui::in_region(int node_rank, int parity) { return rows_seg[node_rank] + parity * rows_cap; }
char *PairCGEqui::out_region(int node_rank) { return rows_seg[node_rank] + 2 * rows_cap; }

void *PairCGEqui::stage_rows(size_t bytes, size_t *capacity, bool in) {
    if (!shared_rows || bytes > rows_cap) return nullptr; /* exchange_rows grows the window (collectively) */
    if (!direct_rows && in) return nullptr;
    const int parity = (int)(exchanges & 1);
    if (!direct_rows) {
        *capacity = rows_cap;
        return out_region(node_me);
    }
    *capacity = (2 - parity) * rows_cap; /* to the end of the incoming regions: one registration serves both */
    return in_region(in ? node_me : node_rank_of[peers[0].rank], parity);
}

/* every rank's regions at least bytes; this rank's out region. Collective over the node (every rank calls
 * exchange_rows alike). */
char *PairCGEqui::shared_segment(size_t bytes) {
#ifndef MPI_STUBS
    unsigned long long most = bytes;
    const double t = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, node_comm); /* (waits for the node) */
    if (in_evaluate) times.layer_wait += MPI_Wtime() - t;
    if (most > rows_cap) {
        /* the outgrown window stays mapped until the evaluator is freed: it may have pinned it */
        if (rows_win != MPI_WIN_NULL) retired_wins.push_back(rows_win);
        const size_t mb = (size_t)1 << 20, cap = (most + most / 2 + mb - 1) / mb * mb; /* whole MB, room to grow */
        const size_t segment = 3 * cap; /* [in 0 | in 1 | out] */
        MPI_Info info;
        MPI_Info_create(&info);
        MPI_Info_set(info, "alloc_shared_noncontig", "true"); /* each segment on its own pages */
        char *base = nullptr;
        MPI_Win_allocate_shared((MPI_Aint)segment, 1, info, node_comm, &base, &rows_win);
        MPI_Info_free(&info);
        MPI_Win_lock_all(MPI_MODE_NOCHECK, rows_win);
        int node_size = 1;
        MPI_Comm_size(node_comm, &node_size);
        rows_seg.assign(node_size, nullptr);
        for (int r = 0; r < node_size; r++) {
            MPI_Aint size = 0;
            int unit = 1;
            MPI_Win_shared_query(rows_win, r, &size, &unit, &rows_seg[r]);
        }
        rows_cap = cap;
    }
#else
    (void)bytes;
#endif
    return out_region(node_me);
}

/* every rank's staged rows written before any rank reads them (or read before they are written again) */
void PairCGEqui::node_barrier() {
#ifndef MPI_STUBS
    const double t = MPI_Wtime();
    MPI_Win_sync(rows_win);
    MPI_Barrier(node_comm);
    MPI_Win_sync(rows_win);
    if (in_evaluate) times.layer_wait += MPI_Wtime() - t;
#endif
}

void PairCGEqui::free_shared_rows() {
#ifndef MPI_STUBS
    if (rows_win != MPI_WIN_NULL) retired_wins.push_back(rows_win);
    for (MPI_Win &w : retired_wins) {
        MPI_Win_unlock_all(w);
        MPI_Win_free(&w);
    }
    retired_wins.clear();
    rows_win = MPI_WIN_NULL;
    rows_seg.clear();
    rows_cap = 0;
#endif
}

namespace {
/* dst[dst_rows[q]] = (or +=) src[src_rows[q]] for q < n, rows of width values (a NULL list: row q), on OpenMP threads
 * where they are many (a thread copied ~3 GB/s of MP-0's 2-4 KB rows, session 43); the rows of dst are distinct, so
 * the sums are fixed */
template <class T>
void copy_rows(T *dst, const int *dst_rows, const T *src, const int *src_rows, int64_t n, int width, bool add) {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (n * width > (1 << 16))
#endif
    for (int64_t q = 0; q < n; q++) {
        T *to = dst + (dst_rows ? (int64_t)dst_rows[q] : q) * width;
        const T *from = src + (src_rows ? (int64_t)src_rows[q] : q) * width;
        if (add)
            for (int w = 0; w < width; w++) to[w] += from[w];
        else
            std::memcpy(to, from, sizeof(T) * width);
    }
}
/* dst[0, n) = src[0, n), on OpenMP threads where n is large */
template <class T>
void copy_block(T *dst, const T *src, int64_t n) {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (n > (1 << 16))
#endif
    for (int64_t q = 0; q < n; q += 4096) std::memcpy(dst + q, src + q, sizeof(T) * std::min<int64_t>(4096, n - q));
}
}  // namespace

/* Forward: the ghost rows (in) from the send rows (out) of their owners. Reverse: the ghost rows' contributions (out)
 * summed into the send rows (in, assigned) of their owners, in the order of ranks, then of the peer's list: the same
 * sums every time. Peers on this node read the rows from the shared window (shared_rows), the others get one
 * MPI_Isend/MPI_Irecv per peer. */
template <class T>
void PairCGEqui::exchange_rows(const T *out, T *in, int width, bool reverse) {
    const double t0 = MPI_Wtime();
    const int64_t n_ghost = (int64_t)node_atom.size() - cand_local, n_send = (int64_t)send_nodes.size();
    const int64_t n_out = reverse ? n_ghost : n_send, n_in = reverse ? n_send : n_ghost;
    if (direct_rows) { /* the rows go straight into the peer's incoming region, and come from this rank's */
        shared_segment(sizeof(T) * std::max(n_out, n_in) * width + sizeof(T));
        const int parity = (int)(exchanges & 1);
        T *peer_in = reinterpret_cast<T *>(in_region(node_rank_of[peers[0].rank], parity));
        T *my_in = reinterpret_cast<T *>(in_region(node_me, parity));
        if (out != peer_in) copy_block(peer_in, out, n_out * width); /* not staged there (forces, the first calls) */
        node_barrier();
        if (in != my_in) copy_block(in, my_in, n_in * width); /* the sums are assigned: one peer gives them all */
        node_barrier(); /* as many barriers as the node's other ranks, which may exchange by peer */
    } else {
        exchange_rows_by_peer(out, in, width, reverse, n_out);
    }
    exchanges++;
    if (in_evaluate) {
        times.layer_exchange += MPI_Wtime() - t0;
        for (const peer &p : peers) times.layer_bytes += (double)(p.send.size() + p.recv.size()) * width * sizeof(T);
    }
}

/* exchange_rows without direct_rows: peers on the node read this rank's out region, the others get MPI messages */
template <class T>
void PairCGEqui::exchange_rows_by_peer(const T *out, T *in, int width, bool reverse, int64_t n_out) {
    if (shared_rows) { /* this rank's rows in its out region of the shared window, for its peers on the node */
        T *mine = reinterpret_cast<T *>(shared_segment(sizeof(T) * n_out * width + sizeof(T)));
        if (out != mine) copy_block(mine, out, n_out * width); /* not staged there (forces, the first calls) */
        node_barrier();
    }
    /* MPI peers: rows that are one block go out from, or come in to, their place; the others through xsend / xrecv */
    auto out_block = [&](const peer &p) { return reverse ? p.recv_block : p.send_block; };
    auto in_place = [&](const peer &p) { return reverse ? sums_in_place : p.recv_block >= 0; };
    size_t nsend = 0, nrecv = 0;
    for (const peer &p : peers) {
        if (p.on_node) continue;
        if (out_block(p) < 0) nsend += (reverse ? p.recv : p.send).size();
        if (!in_place(p)) nrecv += (reverse ? p.send : p.recv).size();
    }
    std::vector<T> &xsend = buffers(T()).send, &xrecv = buffers(T()).recv;
    xsend.resize(nsend * width + 1);
    xrecv.resize(nrecv * width + 1);
    std::vector<MPI_Request> req;
    req.reserve(2 * peers.size());
    const int tag = 0x6367;
    size_t so = 0, ro = 0;
    for (const peer &p : peers) {
        if (p.on_node) continue;
        const std::vector<int> &rows_out = reverse ? p.recv : p.send, &rows_in = reverse ? p.send : p.recv;
        if (!rows_in.empty()) {
            T *to = &xrecv[ro];
            if (in_place(p))
                to = in + (int64_t)(reverse ? p.send_block : p.recv_block) * width;
            else
                ro += rows_in.size() * width;
            req.emplace_back();
            MPI_Irecv(to, (int)(rows_in.size() * width), mpi_type<T>(), p.rank, tag, world, &req.back());
        }
        if (!rows_out.empty()) {
            const T *from = out + (int64_t)out_block(p) * width;
            if (out_block(p) < 0) {
                const int64_t n = (int64_t)rows_out.size();
                copy_rows(&xsend[so], (const int *)nullptr, out, rows_out.data(), n, width, false);
                from = &xsend[so];
                so += rows_out.size() * width;
            }
            req.emplace_back();
            MPI_Isend(from, (int)(rows_out.size() * width), mpi_type<T>(), p.rank, tag, world, &req.back());
        }
    }
    std::vector<MPI_Status> status(req.size() + 1);
    const double tw = MPI_Wtime();
    if (!req.empty()) MPI_Waitall((int)req.size(), req.data(), status.data());
    if (in_evaluate) times.layer_wait += MPI_Wtime() - tw;
    /* one peer that gives every sum, in order, assigns them (an MPI peer's landed in place already) */
    const bool assign = reverse && sums_in_place;
    if (reverse && !assign) std::fill(in, in + send_nodes.size() * width, T(0));
    ro = 0;
    for (const peer &p : peers) {
        const std::vector<int> &rows_in = reverse ? p.send : p.recv;
        const int64_t n = (int64_t)rows_in.size();
        if (p.on_node) { /* straight from the peer's staged rows */
            const T *seg = reinterpret_cast<const T *>(out_region(node_rank_of[p.rank]));
            copy_rows(in, rows_in.data(), seg, (reverse ? p.far_recv : p.far_send).data(), n, width, reverse && !assign);
            continue;
        }
        if (in_place(p)) continue;
        copy_rows(in, rows_in.data(), (const T *)&xrecv[ro], (const int *)nullptr, n, width, reverse);
        ro += rows_in.size() * width;
    }
    if (shared_rows) node_barrier(); /* the peers have read this rank's rows before it stages the next */
}

template void PairCGEqui::exchange_rows<double>(const double *, double *, int, bool);
template void PairCGEqui::exchange_rows<float>(const float *, float *, int, bool);

/* data [nodes][width] (forces, per-atom virials): the ghost rows' sums added into their owners' local rows */
void PairCGEqui::fold_ghost_rows(double *data, int width) {
    xsums.resize(send_nodes.size() * width + 1);
    exchange_rows(data + cand_local * width, xsums.data(), width, true);
    for (size_t q = 0; q < send_nodes.size(); q++)
        for (int w = 0; w < width; w++) data[(int64_t)send_nodes[q] * width + w] += xsums[q * width + w];
}

/* plan_exchange's owners: (rank, node) of each atom, from its owner through the swaps */
int PairCGEqui::pack_forward_comm(int n, int *list, double *buf, int, int *) {
    int m = 0;
    for (int i = 0; i < n; i++) buf[m++] = owner_info[2 * list[i]], buf[m++] = owner_info[2 * list[i] + 1];
    return m;
}

void PairCGEqui::unpack_forward_comm(int n, int first, double *buf) {
    for (int i = 0; i < 2 * n; i++) owner_info[2 * (size_t)first + i] = buf[i];
}
