/* pair_cgequi.h: LAMMPS pair style `cgequi`: thin C++ glue from LAMMPS arrays to the cgequi C API. */
#ifdef PAIR_CLASS
// clang-format off
PairStyle(cgequi,PairCGEqui);
// clang-format on
#else

#ifndef LMP_PAIR_CGEQUI_H
#define LMP_PAIR_CGEQUI_H

#include <string>
#include <vector>

#include "pair.h"

extern "C" {
#include "cgequi.h"
}

namespace LAMMPS_NS {

class PairCGEqui : public Pair {
  public:
    PairCGEqui(class LAMMPS *);
    ~PairCGEqui() override;
    void compute(int, int) override;
    void settings(int, char **) override;
    void coeff(int, char **) override;
    void init_style() override;
    double init_one(int, int) override;
    int pack_forward_comm(int, int *, double *, int, int *) override;
    void unpack_forward_comm(int, int, double *) override;

    /* the rows that cross ranks (cgq_exchange's rows form; called back from the C evaluator). Forward: out holds the
     * send_nodes' rows, in receives the ghost rows. Reverse: out holds the ghost rows' contributions, in receives (is
     * assigned) what the other ranks contributed to each send node. T: double, or float (float_rows). */
    template <class T>
    void exchange_rows(const T *out, T *in, int width, bool reverse);
    /* cgq_exchange.stage_rows (in: stage_rows_in): where in the node's shared window the evaluator stages an
     * exchange's rows, if they fit, else NULL */
    void *stage_rows(size_t bytes, size_t *capacity, bool in);

  private:
    cgq_evaluator_params params;
    bool gpu_id_given = false;
    std::string model_path;
    cgq_model *model = nullptr;
    cgq_evaluator *evaluator = nullptr;
    std::vector<int> type_species; /* LAMMPS type -> model species index, -1 = NULL (not cgequi's) */
    double cutoff = 0.0;

    /* points of the graph: point k is LAMMPS atom point_atom[k]; graph node n is atom node_atom[n] (the local points,
     * then ghosts owned by other ranks); atom_node[j] = the node of atom j (a folded image's: its owner's) or -1 */
    std::vector<int> point_atom, node_atom, atom_node;
    std::vector<int32_t> species, point_node; /* point_node: graph node of each point (its owner when folded) */
    std::vector<int64_t> point_id;            /* atom tags: the evaluator's messages, and the rebuild check */
    std::vector<int32_t> node_of_id;          /* folding: the local point (graph node) of each atom tag, -1 if none */
    std::vector<double> points, node_force, node_energy, node_virial;
    bool points_are_atoms = false;     /* point k is LAMMPS atom k, for every atom */
    const double *point_xyz = nullptr; /* this step's positions of the points: LAMMPS's own, `points` or cand_pos */
    /* the positions the candidate pairs (within cutoff + skin of the local points) were built from */
    std::vector<double> cand_pos;
    double cand_skin = 0.0;
    int64_t cand_local = 0;
    bigint cand_ncalls = -1;
    int cand_nlocal = -1, cand_nall = -1;

    /* CGQ_PAIR_TIMING=1: wall seconds of the parts of compute() on this rank, printed to stderr at the end */
    struct timing {
        bool on = false;
        int rank = 0;
        long steps = 0, rebuilds = 0;
        double update = 0, node_map = 0, pairs = 0, evaluate = 0, fold = 0; /* node_map + pairs: the rebuilds */
        double layer_exchange = 0; /* inside evaluate: the evaluator's calls of exchange_rows() */
        double layer_wait = 0;     /* of which in MPI_Waitall and the node's barriers (transport, waiting for peers) */
        double layer_bytes = 0;    /* bytes this rank sent and received in them */
        double first[2] = {0, 0}; /* the first rebuild (in the run's setup): node map, the evaluator's candidate pairs */
    } times;

    /* the exchange with other ranks (plan_exchange, when LAMMPS re-neighbors): send_nodes, the distinct local nodes
     * other ranks read; per peer rank, the positions in send_nodes of the nodes it wants (send, in its order) and this
     * rank's ghost nodes it owns (recv, as ghost rows: node - cand_local); *_block: the first row where the list is
     * consecutive rows (sent or received in place), else -1 */
    struct peer {
        int rank;
        std::vector<int> send, recv;
        int send_block, recv_block;
        bool on_node; /* shared_rows: read from its segment of the window; far_send: per recv row, its
                                 place in the peer's staged send rows; far_recv: per send row, the peer's ghost row */
        std::vector<int> far_send, far_recv;
    };
    std::vector<peer> peers;
    std::vector<int32_t> send_nodes;
    bool sums_in_place = false; /* one peer sends the sums of every send row, in order */
    std::vector<double> owner_info; /* per atom: its owner's (rank, node), carried to ghosts by pack/unpack */
    template <class T>
    struct row_buffers {
        std::vector<T> send, recv; /* the rows packed for MPI, where they are not one block */
    };
    row_buffers<double> xrows;
    row_buffers<float> xrows_f;
    row_buffers<double> &buffers(double) { return xrows; }
    row_buffers<float> &buffers(float) { return xrows_f; }
    std::vector<double> xsums;
    bool float_rows = false; /* every rank's evaluator is float32: the per-layer rows move as floats */
    /* the node's shared window of staged rows (pair_cgequi.cpp, "rows shared within a node") */
    MPI_Comm node_comm = MPI_COMM_NULL;
    int node_me = 0;
    std::vector<int> node_rank_of; /* world rank -> rank in node_comm, -1 on another node */
    bool shared_rows = false;
    bool direct_rows = false; /* one peer on the node, rows one to one in order: staged in each other's in regions */
    bool direct_wanted = true; /* CGQ_PAIR_DIRECT_ROWS unset or not 0 */
    long long exchanges = 0;  /* exchange_rows calls so far (the same on every rank): the in regions' parity */
    size_t rows_cap = 0;          /* bytes of each rank's segment */
    std::vector<char *> rows_seg; /* per node rank: its segment */
#ifndef MPI_STUBS                 /* (LAMMPS's serial stubs have no windows: one rank) */
    MPI_Win rows_win = MPI_WIN_NULL;
    std::vector<MPI_Win> retired_wins; /* outgrown windows, kept mapped until the evaluator (which may have pinned
                                          them) is freed */
#endif
    bigint plan_ncalls = -1, owners_ncalls = -1;
    bool in_evaluate = false;

    void free_model();
    void build_candidates();
    void update_points();
    void find_owners();
    const double *owner_of(int i) const;
    void group_ghosts_by_owner();
    void plan_exchange();
    void fold_ghost_rows(double *data, int width);
    void setup_node_comm(bool wanted);
    char *shared_segment(size_t bytes);
    char *in_region(int node_rank, int parity);
    char *out_region(int node_rank);
    template <class T>
    void exchange_rows_by_peer(const T *out, T *in, int width, bool reverse, int64_t n_out);
    void node_barrier();
    void free_shared_rows();
    [[noreturn]] void fail_all(const std::string &what);
    [[noreturn]] void fail_one(const std::string &what);
};

}  // namespace LAMMPS_NS

#endif
#endif
