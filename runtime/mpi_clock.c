/*
 * mpi_clock.c - how far each MPI rank's clock reads from rank 0's, so that
 * --profile and --trace compare times of different ranks.
 *
 * Each device's spans are times from its own origin: the moment it left
 * the barrier that starts its first run (trace.c).  Where ranks outnumber
 * the cores, a rank leaves a barrier only when the kernel runs it, and 8
 * ranks on 2 cores left it up to a scheduler slice (about 1 ms) apart; a
 * makespan taken over ranks on those origins (profile.c) added that skew
 * to every op, which then measured 1.0-1.3 ms whatever its size (docs/
 * performance-history.md, section 5).  So the ranks' times are put on one
 * clock instead, as the threads backend's are.
 *
 * Ranks on rank 0's node read the same CLOCK_MONOTONIC (rt_now), so their
 * offset is 0.  A rank on another node estimates its offset with
 * Cristian's method: ROUNDS round trips to rank 0, each carrying rank 0's
 * clock, and from the round trip of least duration d, offset = (t0 + t1)
 * / 2 - t_root, which is within d / 2 of the true offset (the reply was
 * stamped between t0 and t1).  Rank 0 serves the remote ranks one at a
 * time, in rank order.
 */
#include "rt_mpi.h"

/* Round trips per remote rank: enough that one of them meets both ranks
 * running, where ranks share cores. */
#define ROUNDS 16
#define CLOCK_TAG 0x434c

/* 1 if world rank 0 of `comm` runs on this rank's node. */
static int shares_node_with_root(MPI_Comm comm)
{
    MPI_Comm node;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        return 0;
    MPI_Group world, local;
    MPI_Comm_group(comm, &world);
    MPI_Comm_group(node, &local);
    int root = 0, in_local = MPI_UNDEFINED;
    MPI_Group_translate_ranks(world, 1, &root, local, &in_local);
    MPI_Group_free(&world);
    MPI_Group_free(&local);
    MPI_Comm_free(&node);
    return in_local != MPI_UNDEFINED;
}

double rt_mpi_clock_offset(MPI_Comm comm, int same_node_is_zero, double *bound)
{
    int rank, nranks;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &nranks);
    /* Every rank splits (a collective), rank 0 too. */
    int near = same_node_is_zero && shares_node_with_root(comm), remote = rank != 0 && !near;
    *bound = 0;
    if (rank == 0) {
        for (int r = 1; r < nranks; r++) {
            int asks = 0;
            MPI_Recv(&asks, 1, MPI_INT, r, CLOCK_TAG, comm, MPI_STATUS_IGNORE);
            for (int k = 0; asks && k < ROUNDS; k++) {
                MPI_Recv(NULL, 0, MPI_BYTE, r, CLOCK_TAG, comm, MPI_STATUS_IGNORE);
                double t = rt_now();
                MPI_Send(&t, 1, MPI_DOUBLE, r, CLOCK_TAG, comm);
            }
        }
        return 0;
    }
    MPI_Send(&remote, 1, MPI_INT, 0, CLOCK_TAG, comm);
    if (!remote)
        return 0;
    double offset = 0, best = -1;
    for (int k = 0; k < ROUNDS; k++) {
        double t0 = rt_now(), t_root;
        MPI_Send(NULL, 0, MPI_BYTE, 0, CLOCK_TAG, comm);
        MPI_Recv(&t_root, 1, MPI_DOUBLE, 0, CLOCK_TAG, comm, MPI_STATUS_IGNORE);
        double t1 = rt_now();
        if (best < 0 || t1 - t0 < best) {
            best = t1 - t0;
            offset = 0.5 * (t0 + t1) - t_root;
        }
    }
    *bound = 0.5 * best;
    return offset;
}
