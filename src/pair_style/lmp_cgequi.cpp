/* lmp_cgequi.cpp: an `lmp`-compatible executable for a LAMMPS library without the PLUGIN package (e.g.
 * Debian's liblammps): registers pair_style cgequi, then runs the input exactly like lmp. */
#include <mpi.h>

#include <cstdio>
#include <exception>

#include "force.h"
#include "input.h"
#include "lammps.h"
#include "pair_cgequi.h"

using namespace LAMMPS_NS;

static Pair *cgequi_creator(LAMMPS *lmp) { return new PairCGEqui(lmp); }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rc = 0;
    try {
        LAMMPS *lmp = new LAMMPS(argc, argv, MPI_COMM_WORLD);
        (*lmp->force->pair_map)["cgequi"] = &cgequi_creator;
        lmp->input->file();
        delete lmp;
    } catch (std::exception &e) { /* LAMMPS built with exceptions reports errors this way */
        std::fprintf(stderr, "lmp_cgequi: %s\n", e.what());
        rc = 1;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return rc;
}
