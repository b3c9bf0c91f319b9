/*
 * mpi_p2p.c - rt_send / rt_recv / rt_probe on the MPI backend, 4 ranks:
 *
 *   mpirun -np 4 rt_p2p_mpi            the transfers of p2p_check.h along
 *                                      every axis of the meshes 4 and 2x2;
 *                                      exit status 0 if every byte matched
 *                                      and every device received all it must
 *   mpirun -np 4 rt_p2p_mpi outside    the last device sends past the end
 *   mpirun -np 4 rt_p2p_mpi size       device 1 expects 16 bytes, gets 8
 *   mpirun -np 4 rt_p2p_mpi unreceived device 0 sends, nobody receives
 *
 * The error cases must end the job with the runtime's message, which
 * CTest matches (tests/runtime/CMakeLists.txt).
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "p2p_check.h"
#include "rt_test_util.h"

/* The error case named by argv[1], run on the mesh 4. */
static void bad_device(rt_device *dev, void *arg)
{
    const char *k = arg;
    char buf[16] = {0};
    if (strcmp(k, "outside") == 0 && dev->id == 3)
        rt_send(dev, 0, +1, 0, buf, 8);
    if (strcmp(k, "size") == 0 && dev->id == 0)
        rt_send(dev, 0, +1, 5, buf, 8);
    if (strcmp(k, "size") == 0 && dev->id == 1)
        rt_recv(dev, 0, -1, 5, buf, 16);
    if (strcmp(k, "unreceived") == 0 && dev->id == 0)
        rt_send(dev, 0, +1, 4, buf, 8);
}

/* Runs the checks on one mesh; the number of devices with a wrong byte
 * or count, summed over the ranks. */
static int run_mesh(int32_t naxes, const int64_t *sizes, int rank)
{
    rt_program p = test_mesh_program(naxes, sizes);
    int64_t errors[4] = {0}, checked[4] = {0};
    p2p_config c = {errors, checked};
    rt_mpi_launch(&p, 0, p2p_check_device, &c);
    int64_t want = p2p_expected_checked(&p, rank);
    int bad = errors[rank] != 0 || checked[rank] != want, total = 0;
    if (bad)
        printf("FAIL: mesh of %d axes, rank %d: %lld wrong of %lld checked (expected %lld)\n",
               naxes, rank, (long long)errors[rank], (long long)checked[rank], (long long)want);
    MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    return total;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks != 4) {
        if (rank == 0)
            fprintf(stderr, "run with 4 ranks (mpirun -np 4), not %d\n", nranks);
        MPI_Finalize();
        return 1;
    }
    const int64_t line[] = {4}, square[] = {2, 2};
    if (argc > 1) {
        rt_program p = test_mesh_program(1, line);
        rt_mpi_launch(&p, 0, bad_device, argv[1]);
        if (rank == 0)
            printf("error case '%s' did not end the job\n", argv[1]);
        MPI_Finalize();
        return 1;
    }
    int bad = run_mesh(1, line, rank) + run_mesh(2, square, rank);
    if (rank == 0)
        printf("4 ranks: %d device(s) with wrong or missing bytes\n", bad);
    MPI_Finalize();
    return bad ? 1 : 0;
}
