/*
 * mpi_collectives.c - every collective of the MPI backend against the same
 * checker as the threads test (coll_check.h).  Run with 4 ranks:
 *
 *   mpirun -np 4 rt_mpi_collectives
 *
 * Meshes: X=4 (group X); X=2, Y=2 (groups X, Y, XY and YX, the last built
 * with MPI_Comm_split since its rank order is not the Cartesian one);
 * X=1, Y=2, Z=2 (groups Z, YZ, ZY, XZ with an axis of size 1); for f32,
 * f64 and bf16.  Exit status 0 if every element of every case matched.
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "coll_check.h"
#include "rt_test_util.h"

/* One case: a mesh and the axes of the group. */
typedef struct mpi_case {
    int32_t naxes_mesh;          /* mesh axes */
    int64_t sizes[RT_MAX_AXES];  /* mesh axis sizes */
    int32_t naxes;               /* group axes */
    int32_t axes[RT_MAX_AXES];   /* in group-rank order */
} mpi_case;

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    static const mpi_case cases[] = {
        {1, {4}, 1, {0}},          {2, {2, 2}, 1, {0}},       {2, {2, 2}, 1, {1}},
        {2, {2, 2}, 2, {0, 1}},    {2, {2, 2}, 2, {1, 0}},    {3, {1, 2, 2}, 1, {2}},
        {3, {1, 2, 2}, 2, {1, 2}}, {3, {1, 2, 2}, 2, {2, 1}}, {3, {1, 2, 2}, 2, {0, 2}},
    };
    int64_t total_errors = 0, total_checked = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const mpi_case *mc = &cases[k];
        rt_program p;
        memset(&p, 0, sizeof p);
        p.abi_version = RT_ABI_VERSION;
        p.naxes = mc->naxes_mesh;
        memcpy(p.axis_names, "XYZW", RT_MAX_AXES);
        memcpy(p.axis_sizes, mc->sizes, sizeof p.axis_sizes);
        p.run = test_noop_run;
        for (int32_t dtype = RT_F32; dtype <= RT_BF16; dtype++) {
            int64_t errors[4] = {0}, checked[4] = {0};
            coll_config c = {.prog = &p, .naxes = mc->naxes, .dtype = dtype,
                             .errors = errors, .checked = checked};
            memcpy(c.axes, mc->axes, sizeof c.axes);
            rt_mpi_launch(&p, 0, coll_check_device, &c);
            int64_t mine[2] = {errors[rank], checked[rank]}, sum[2];
            MPI_Allreduce(mine, sum, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
            if (rank == 0 && sum[0])
                printf("FAIL: case %zu (%d mesh axes, %d group axes), %s: %lld of %lld wrong\n",
                       k, mc->naxes_mesh, mc->naxes, rt_dtype_name(dtype), (long long)sum[0],
                       (long long)sum[1]);
            total_errors += sum[0];
            total_checked += sum[1];
        }
    }
    if (rank == 0)
        printf("%lld of %lld elements checked wrong\n", (long long)total_errors,
               (long long)total_checked);
    MPI_Finalize();
    return total_errors || total_checked == 0 ? 1 : 0;
}
