/* mpi_exchange_bw.c: what the pair style's per-layer exchange costs in MPI alone on this machine: two ranks swap
 * buffers of 1-64 MB with one MPI_Isend/MPI_Irecv each (as PairCGEqui::exchange_rows does), best of 5, in GB/s per
 * direction. Tells a slow MPI transport (TCP loopback, no shared memory) from a slow exchange.
 * build: mpicc -O2 bench/mpi_exchange_bw.c -o /tmp/mpi_bw; run: mpirun -np 2 /tmp/mpi_bw */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 2) {
        if (!me) fprintf(stderr, "mpi_exchange_bw: run on 2 ranks\n");
        MPI_Finalize();
        return 1;
    }
    const size_t max_bytes = (size_t)64 << 20;
    char *out = malloc(max_bytes), *in = malloc(max_bytes);
    if (!out || !in) {
        fprintf(stderr, "mpi_exchange_bw: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(out, me, max_bytes), memset(in, 0, max_bytes);
    for (size_t bytes = (size_t)1 << 20; bytes <= max_bytes; bytes *= 4) {
        double best = 1e30;
        for (int rep = 0; rep < 5; rep++) {
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = MPI_Wtime();
            MPI_Request req[2];
            MPI_Irecv(in, (int)bytes, MPI_BYTE, 1 - me, 7, MPI_COMM_WORLD, &req[0]);
            MPI_Isend(out, (int)bytes, MPI_BYTE, 1 - me, 7, MPI_COMM_WORLD, &req[1]);
            MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
            const double t = MPI_Wtime() - t0;
            if (t < best) best = t;
        }
        if (!me) printf("%6.1f MB each way: %8.3f ms, %6.2f GB/s\n", bytes / 1048576.0, 1e3 * best, bytes / best / 1e9);
    }
    free(out), free(in);
    MPI_Finalize();
    return 0;
}
