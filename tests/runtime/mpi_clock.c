/*
 * mpi_clock.c - rt_mpi_clock_offset, under mpirun on 4 ranks of one host:
 *
 *   - with the node shortcut, every rank's offset is exactly 0, bound 0:
 *     the ranks of rank 0's node read its clock (CLOCK_MONOTONIC);
 *   - without it, each rank > 0 takes Cristian's estimate, whose true value
 *     here is 0 as well: the estimate must lie within its own bound (half
 *     the shortest round trip), and the bound must be positive.
 *
 * The first check fails if rank 0 or its node's ranks estimate instead of
 * reading the shared clock, the second if an estimate strays beyond the
 * error it reports.  Exit status 0 on success.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>

#include "rt_mpi.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, bad = 0, total = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    double bound = -1, offset = rt_mpi_clock_offset(MPI_COMM_WORLD, 1, &bound);
    if (offset != 0 || bound != 0) {
        printf("FAIL: rank %d on rank 0's node: offset %g s, bound %g s (want 0, 0)\n", rank,
               offset, bound);
        bad = 1;
    }
    offset = rt_mpi_clock_offset(MPI_COMM_WORLD, 0, &bound);
    /* 1 us of slack for the rounding of doubles near a monotonic clock's
     * value in seconds (about 1e5 s since boot: 1e-11 s steps). */
    if (fabs(offset) > bound + 1e-6 || (rank > 0) != (bound > 0)) {
        printf("FAIL: rank %d, estimated: offset %g s outside its bound %g s (one clock: 0)\n",
               rank, offset, bound);
        bad = 1;
    }
    MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && total == 0)
        printf("clock offsets: exact on one node; estimates within their bounds\n");
    MPI_Finalize();
    return total ? 1 : 0;
}
