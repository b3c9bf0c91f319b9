/*
 * coll_mpi.c - benchmark 2 (docs/performance.md), the baseline side: Open
 * MPI's AllGather, ReduceScatter, AllReduce and AllToAll on the ranks of
 * MPI_COMM_WORLD, plus a ring ReduceScatter built from MPI_Sendrecv (Open
 * MPI 4.1's MPI_Reduce_scatter_block is slow on this machine, so the ring is
 * the fairer baseline for ReduceScatter).
 *
 *   usage: mpirun -np N coll_mpi [MIN_BYTES [MAX_BYTES]]   (defaults 1 KiB, 256 MiB)
 *
 * Sizes, algbw and busbw are defined as in coll_threads.c (nccl-tests: the
 * full per-rank buffer, f32).  Time per iteration = the slowest rank's wall
 * time from an MPI_Barrier to the end of its loop, divided by the
 * iterations.  Before timing, each collective (and the ring) runs once on
 * known values and is checked, so a broken baseline cannot flatter einc.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

/* The collectives measured, in print order. */
enum { C_AG, C_RS, C_RS_RING, C_AR, C_A2A, C_COUNT };
static const char *const NAMES[C_COUNT] = {"AllGather", "ReduceScatter", "ReduceScatterRing",
                                           "AllReduce", "AllToAll"};

/* Scratch of the ring ReduceScatter: two blocks, used alternately. */
typedef struct ring_buf {
    float *tmp[2];               /* each holds one block of `blk` elements */
} ring_buf;

/*
 * Ring ReduceScatter of `in` (n blocks of `blk` floats) into `out` (one
 * block): in step s a rank sends its running sum of block (r-s-1) mod n to
 * rank r+1 and receives the running sum of block (r-s-2) mod n from r-1,
 * adding its own contribution; after n-1 steps the block received is
 * block r summed over every rank.  Each rank sends (n-1)/n of the buffer,
 * the bandwidth-optimal volume that busbw assumes.
 */
static void ring_reduce_scatter(const float *in, float *out, int64_t blk, int rank, int n,
                                ring_buf *rb)
{
    int right = (rank + 1) % n, left = (rank + n - 1) % n;
    const float *send = in + (int64_t)((rank + n - 1) % n) * blk;
    for (int s = 0; s < n - 1; s++) {
        int idx = ((rank - s - 2) % n + n) % n;
        float *recv = rb->tmp[s % 2];
        MPI_Sendrecv(send, (int)blk, MPI_FLOAT, right, 0, recv, (int)blk, MPI_FLOAT, left, 0,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        float *dst = s == n - 2 ? out : recv;
        const float *own = in + (int64_t)idx * blk;
        for (int64_t i = 0; i < blk; i++)
            dst[i] = recv[i] + own[i];
        send = dst;
    }
}

/* Runs collective c on a per-rank buffer of `nelem` floats. */
static void run_coll(int c, const float *in, float *out, int64_t nelem, int rank, int n,
                     ring_buf *rb)
{
    int blk = (int)(nelem / n);
    switch (c) {
    case C_AG:
        MPI_Allgather(in, blk, MPI_FLOAT, out, blk, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    case C_RS:
        MPI_Reduce_scatter_block(in, out, blk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case C_RS_RING:
        ring_reduce_scatter(in, out, blk, rank, n, rb);
        break;
    case C_AR:
        MPI_Allreduce(in, out, (int)nelem, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    default:
        MPI_Alltoall(in, blk, MPI_FLOAT, out, blk, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    }
}

/* Elements of the input and output of c for a per-rank buffer of nelem. */
static int64_t in_elems(int c, int64_t nelem, int n)
{
    return c == C_AG ? nelem / n : nelem;
}

static int64_t out_elems(int c, int64_t nelem, int n)
{
    return c == C_RS || c == C_RS_RING ? nelem / n : nelem;
}

/* Checks one small instance of c (same values as coll_threads.c's self-check). */
static int self_check(int c, int rank, int n, ring_buf *rb)
{
    int64_t nelem = 64 * n, ni = in_elems(c, nelem, n), no = out_elems(c, nelem, n);
    float *in = malloc((size_t)ni * 4), *out = malloc((size_t)no * 4);
    for (int64_t i = 0; i < ni; i++)
        in[i] = (float)(1000 * rank + i);
    run_coll(c, in, out, nelem, rank, n, rb);
    int bad = 0;
    int64_t blk = nelem / n;
    for (int64_t i = 0; i < no && !bad; i++) {
        double want;
        if (c == C_AG)
            want = 1000.0 * (double)(i / blk) + (double)(i % blk);
        else if (c == C_RS || c == C_RS_RING)
            want = 1000.0 * n * (n - 1) / 2 + (double)n * (double)(rank * no + i);
        else if (c == C_AR)
            want = 1000.0 * n * (n - 1) / 2 + (double)n * (double)i;
        else
            want = 1000.0 * (double)(i / blk) + (double)(rank * blk + i % blk);
        if ((double)out[i] != want) {
            fprintf(stderr, "coll_mpi: self-check of %s failed on rank %d: element %lld is %g, "
                            "expected %g\n", NAMES[c], rank, (long long)i, (double)out[i], want);
            bad = 1;
        }
    }
    free(in);
    free(out);
    return bad;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int64_t min_bytes = argc > 1 ? atoll(argv[1]) : 1024;
    int64_t max_bytes = argc > 2 ? atoll(argv[2]) : (int64_t)256 << 20;
    if (n < 2 || min_bytes < 256 * n || max_bytes < min_bytes || min_bytes % (4 * n) ||
        max_bytes / 4 > 2147483647) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np N coll_mpi [MIN_BYTES [MAX_BYTES]] (N >= 2, "
                            "MIN_BYTES a multiple of 4*N and >= 256*N)\n");
        MPI_Finalize();
        return 2;
    }
    ring_buf rb;
    rb.tmp[0] = malloc((size_t)(max_bytes / n));
    rb.tmp[1] = malloc((size_t)(max_bytes / n));
    int bad = 0;
    for (int c = 0; c < C_COUNT; c++)
        bad |= self_check(c, rank, n, &rb);
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (bad)
        MPI_Abort(MPI_COMM_WORLD, 1);
    if (rank == 0)
        printf("# coll_mpi n=%d bytes %lld..%lld (f32)\n", n, (long long)min_bytes,
               (long long)max_bytes);
    for (int c = 0; c < C_COUNT; c++) {
        for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
            int64_t nelem = bytes / 4;
            float *in = malloc((size_t)in_elems(c, nelem, n) * 4);
            float *out = malloc((size_t)out_elems(c, nelem, n) * 4);
            memset(in, 0, (size_t)in_elems(c, nelem, n) * 4);
            memset(out, 0, (size_t)out_elems(c, nelem, n) * 4);
            int iters = bench_iters(bytes);
            run_coll(c, in, out, nelem, rank, n, &rb); /* warm-up */
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++)
                run_coll(c, in, out, nelem, rank, n, &rb);
            double t = (MPI_Wtime() - t0) / iters;
            MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (rank == 0) {
                double algbw = (double)bytes / t * 1e-9;
                double factor = c == C_AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
                printf("RESULT bench=coll backend=mpi coll=%s n=%d bytes=%lld iters=%d us=%.2f "
                       "algbw=%.3f busbw=%.3f\n",
                       NAMES[c], n, (long long)bytes, iters, t * 1e6, algbw, algbw * factor);
                fflush(stdout);
            }
            free(in);
            free(out);
        }
    }
    free(rb.tmp[0]);
    free(rb.tmp[1]);
    MPI_Finalize();
    return 0;
}
