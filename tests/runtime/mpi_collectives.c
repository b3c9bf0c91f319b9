/*
 * mpi_collectives.c - every collective of the MPI backend against the same
 * checker as the threads test (coll_check.h).  Run with 4 or 8 ranks:
 *
 *   mpirun -np 4 rt_mpi_collectives
 *   mpirun -np 8 rt_mpi_collectives
 *
 * 4 ranks: meshes X=4 (group X); X=2, Y=2 (groups X, Y, XY and YX, the last
 * built with MPI_Comm_split since its rank order is not the Cartesian one);
 * X=1, Y=2, Z=2 (groups Z, YZ, ZY, XZ with an axis of size 1).  8 ranks:
 * X=2, Y=4 (groups X, Y, XY, YX) and X=2, Y=2, Z=2 (groups Y, XZ, ZY).
 * Groups of two axes also run every kind but AllReduce with each axis along
 * its own dim (RT_DIM_PER_AXIS: the boxes packed around MPI's calls).
 * Each for f32, f64 and bf16, and with every reduce_op (sum, max, min) for
 * AllReduce and ReduceScatter: max and min go through the backend's own
 * MPI operators and exchange, and must propagate the checker's NaN.  Then
 * the backend's broadcast (--serve's, engine.c): rank 0's bytes land on
 * every rank, for 0 to 64 KiB, waiting (idle) or not; in the idle case
 * rank 0 arrives 50 ms late, so the others poll and then sleep.  Last,
 * the heap the launcher leaves (keep_freed_memory, backend_mpi.c): a
 * second MPI_Allreduce of 40 MiB, above glibc's largest mmap threshold,
 * must fault almost no pages in (Open MPI allocates a temporary that size
 * on every call).  Exit status 0 if every element of every case matched
 * and the heap check held.
 */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "coll_check.h"
#include "rt_test_util.h"

/* One case: a mesh and the axes of the group. */
typedef struct mpi_case {
    int32_t naxes_mesh;          /* mesh axes */
    int64_t sizes[RT_MAX_AXES];  /* mesh axis sizes */
    int32_t naxes;               /* group axes */
    int32_t axes[RT_MAX_AXES];   /* in group-rank order */
} mpi_case;

static const mpi_case cases4[] = {
    {1, {4}, 1, {0}},          {2, {2, 2}, 1, {0}},       {2, {2, 2}, 1, {1}},
    {2, {2, 2}, 2, {0, 1}},    {2, {2, 2}, 2, {1, 0}},    {3, {1, 2, 2}, 1, {2}},
    {3, {1, 2, 2}, 2, {1, 2}}, {3, {1, 2, 2}, 2, {2, 1}}, {3, {1, 2, 2}, 2, {0, 2}},
};

static const mpi_case cases8[] = {
    {2, {2, 4}, 1, {0}},    {2, {2, 4}, 1, {1}},    {2, {2, 4}, 2, {0, 1}},
    {2, {2, 4}, 2, {1, 0}}, {3, {2, 2, 2}, 1, {1}}, {3, {2, 2, 2}, 2, {0, 2}},
    {3, {2, 2, 2}, 2, {2, 1}},
};

/* What the broadcast check counts: its wrong bytes and the bytes checked
 * on this rank. */
typedef struct bcast_count {
    int64_t errors, checked;
} bcast_count;

/* The byte rank 0 sends at offset i of a broadcast of n bytes. */
static unsigned char bcast_byte(int64_t i, int64_t n)
{
    return (unsigned char)((i * 7 + n) % 251);
}

/* Every rank: broadcasts of several sizes, idle and not; the other ranks
 * start with 0xEE everywhere and must end with rank 0's bytes. */
static void bcast_device(rt_device *dev, void *arg)
{
    bcast_count *c = arg;
    static const int64_t sizes[] = {0, 1, 37, 1 << 16};
    for (int idle = 0; idle <= 1; idle++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            int64_t n = sizes[k];
            unsigned char *buf = malloc((size_t)n + 1);
            for (int64_t i = 0; i < n; i++)
                buf[i] = dev->id == 0 ? bcast_byte(i, n) : 0xEE;
            if (idle && dev->id == 0) { /* the others wait past their polling */
                struct timespec ts = {0, 50000000L};
                nanosleep(&ts, NULL);
            }
            dev->ops->broadcast(dev, buf, n, idle);
            for (int64_t i = 0; i < n; i++)
                c->errors += buf[i] != bcast_byte(i, n);
            c->checked += n;
            free(buf);
        }
}

/* Whether, after rt_mpi_launch set the heap up, a repeated MPI_Allreduce
 * of 40 MiB faults in at most a tenth of the buffer's 10240 pages: with
 * M_MMAP_THRESHOLD raised alone (glibc caps it at 32 MiB) every call
 * mapped Open MPI's temporary afresh, and the second call faulted 5122
 * pages in on 4 ranks (185 ms instead of 25 for 32 MiB, docs/runtime.md).
 * Under ASan its own allocator (and its quarantine of freed blocks) serves
 * malloc, so there is nothing to check. */
static bool heap_keeps_freed_memory(int rank, int nranks)
{
#if defined(__SANITIZE_ADDRESS__)
    (void)nranks;
    if (rank == 0)
        printf("heap check skipped: ASan's allocator serves malloc\n");
    return true;
#else
    struct rusage ru;
    enum { N = 40 << 18, MOST = N / 1024 / 10 }; /* 40 MiB of f32; a tenth of its pages */
    float *in = malloc(N * sizeof *in), *out = malloc(N * sizeof *out);
    if (!in || !out) {
        fprintf(stderr, "out of memory\n");
        return false;
    }
    for (int i = 0; i < N; i++)
        in[i] = (float)(i % 7);
    MPI_Allreduce(in, out, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    getrusage(RUSAGE_SELF, &ru); /* ru_minflt: page faults without I/O */
    long first = ru.ru_minflt;
    MPI_Allreduce(in, out, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    getrusage(RUSAGE_SELF, &ru);
    long again = ru.ru_minflt - first;
    bool ok = out[N - 1] == (float)((N - 1) % 7) * (float)nranks;
    free(in);
    free(out);
    long worst;
    MPI_Allreduce(&again, &worst, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    int all_ok, mine = ok;
    MPI_Allreduce(&mine, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    bool held = worst <= MOST && all_ok;
    if (rank == 0 && !held)
        printf("FAIL: a second MPI_Allreduce of 40 MiB faulted in %ld pages (at most %d)%s\n",
               worst, MOST, all_ok ? "" : ", and summed wrong");
    return held;
#endif
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (nranks != 4 && nranks != 8) {
        if (rank == 0)
            fprintf(stderr, "run with 4 or 8 ranks (mpirun -np 4), not %d\n", nranks);
        MPI_Finalize();
        return 1;
    }
    const mpi_case *cases = nranks == 8 ? cases8 : cases4;
    size_t ncases = nranks == 8 ? sizeof cases8 / sizeof cases8[0]
                                : sizeof cases4 / sizeof cases4[0];
    int64_t total_errors = 0, total_checked = 0;
    for (size_t k = 0; k < ncases; k++) {
        const mpi_case *mc = &cases[k];
        rt_program p = test_mesh_program(mc->naxes_mesh, mc->sizes);
        for (int32_t op = RT_REDUCE_SUM; op <= RT_REDUCE_MIN; op++) {
            for (int32_t dtype = RT_F32; dtype <= RT_BF16; dtype++) {
                int64_t errors[8] = {0}, checked[8] = {0};
                coll_config c = {.prog = &p, .naxes = mc->naxes, .dtype = dtype,
                                 .reduce_op = op, .errors = errors, .checked = checked};
                memcpy(c.axes, mc->axes, sizeof c.axes);
                rt_mpi_launch(&p, 0, coll_check_device, &c);
                int64_t mine[2] = {errors[rank], checked[rank]}, sum[2];
                MPI_Allreduce(mine, sum, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
                if (rank == 0 && sum[0])
                    printf("FAIL: case %zu (%d mesh axes, %d group axes), %s, reduce %s: "
                           "%lld of %lld wrong\n", k, mc->naxes_mesh, mc->naxes,
                           rt_dtype_name(dtype), rt_reduce_op_name(op), (long long)sum[0],
                           (long long)sum[1]);
                total_errors += sum[0];
                total_checked += sum[1];
            }
        }
    }
    bcast_count bc = {0, 0};
    rt_program p = test_mesh_program(cases[0].naxes_mesh, cases[0].sizes);
    rt_mpi_launch(&p, 0, bcast_device, &bc);
    int64_t mine[2] = {bc.errors, bc.checked}, sum[2];
    MPI_Allreduce(mine, sum, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && (sum[0] || !sum[1]))
        printf("FAIL: broadcast: %lld of %lld bytes wrong\n", (long long)sum[0],
               (long long)sum[1]);
    total_errors += sum[0] + !sum[1];
    total_checked += sum[1];
    total_errors += !heap_keeps_freed_memory(rank, nranks);
    if (rank == 0)
        printf("%d ranks: %lld of %lld elements checked wrong\n", nranks,
               (long long)total_errors, (long long)total_checked);
    MPI_Finalize();
    return total_errors || total_checked == 0 ? 1 : 0;
}
