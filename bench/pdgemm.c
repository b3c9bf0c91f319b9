/*
 * pdgemm.c - benchmark 3 (docs/performance.md), the ScaLAPACK baseline: a
 * distributed f64 GEMM C = A B of N x N matrices with pdgemm on a P x Q
 * process grid, block-cyclic with NB x NB blocks.
 *
 *   usage: mpirun -np P*Q pdgemm [N [P [Q [NB [REPS]]]]]   (defaults 4096 1 np 256 3)
 *
 * Prints the median seconds of REPS timed calls (after one warm-up) as the
 * slowest rank saw them, and GFLOP/s = 2 N^3 / time.  Each rank uses one
 * OpenBLAS thread (the launcher below sets it), as each einc MPI rank does.
 * A spot check compares a few elements of C against a direct dot product,
 * computed from the generator, so a wrong run is reported.
 */
#include <cblas.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

/* BLACS and ScaLAPACK entry points (Fortran calling convention). */
void Cblacs_pinfo(int *me, int *nprocs);
void Cblacs_get(int ctxt, int what, int *val);
void Cblacs_gridinit(int *ctxt, const char *order, int nprow, int npcol);
void Cblacs_gridinfo(int ctxt, int *nprow, int *npcol, int *myrow, int *mycol);
void Cblacs_gridexit(int ctxt);
int numroc_(const int *n, const int *nb, const int *iproc, const int *isrcproc,
            const int *nprocs);
void descinit_(int *desc, const int *m, const int *n, const int *mb, const int *nb,
               const int *irsrc, const int *icsrc, const int *ictxt, const int *lld, int *info);
void pdgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k,
             const double *alpha, const double *a, const int *ia, const int *ja,
             const int *desca, const double *b, const int *ib, const int *jb, const int *descb,
             const double *beta, double *c, const int *ic, const int *jc, const int *descc);

/* Value of global element (i, j) of matrix `which` (0 = A, 1 = B). */
static double gen(int which, int64_t i, int64_t j)
{
    uint64_t s = (uint64_t)(i * 7919 + j * 104729 + which * 15485863 + 1) * 2654435761u;
    s |= 1;
    return bench_rand(&s);
}

/* Global index of local index l on process p of np (block-cyclic, blocks nb). */
static int64_t global_index(int l, int nb, int p, int np)
{
    return ((int64_t)(l / nb) * np + p) * nb + l % nb;
}

/* Fills the local column-major block of matrix `which`. */
static void fill_local(double *m, int which, int lr, int lc, int nb, int myr, int myc, int pr,
                       int pc)
{
    for (int c = 0; c < lc; c++)
        for (int r = 0; r < lr; r++)
            m[(int64_t)c * lr + r] = gen(which, global_index(r, nb, myr, pr),
                                         global_index(c, nb, myc, pc));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    int n = argc > 1 ? atoi(argv[1]) : 4096;
    int pr = argc > 2 ? atoi(argv[2]) : 1;
    int pc = argc > 3 ? atoi(argv[3]) : np / pr;
    int nb = argc > 4 ? atoi(argv[4]) : 256;
    int reps = argc > 5 ? atoi(argv[5]) : 3;
    if (n < 1 || pr < 1 || pc < 1 || pr * pc != np || nb < 1 || reps < 1) {
        if (me == 0)
            fprintf(stderr, "usage: mpirun -np P*Q pdgemm [N [P [Q [NB [REPS]]]]]\n");
        MPI_Finalize();
        return 2;
    }
    openblas_set_num_threads(1);
    int ctxt, zero = 0, info;
    Cblacs_get(-1, 0, &ctxt);
    Cblacs_gridinit(&ctxt, "Row", pr, pc);
    int nprow, npcol, myr, myc;
    Cblacs_gridinfo(ctxt, &nprow, &npcol, &myr, &myc);
    int lr = numroc_(&n, &nb, &myr, &zero, &pr), lc = numroc_(&n, &nb, &myc, &zero, &pc);
    int lld = lr > 1 ? lr : 1;
    int desc[9];
    descinit_(desc, &n, &n, &nb, &nb, &zero, &zero, &ctxt, &lld, &info);
    if (info != 0) {
        fprintf(stderr, "pdgemm: descinit failed (%d)\n", info);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    size_t bytes = sizeof(double) * (size_t)lr * (size_t)lc;
    double *a = malloc(bytes), *b = malloc(bytes), *c = calloc((size_t)lr * (size_t)lc, 8);
    fill_local(a, 0, lr, lc, nb, myr, myc, pr, pc);
    fill_local(b, 1, lr, lc, nb, myr, myc, pr, pc);
    const double one = 1.0, zerod = 0.0;
    const int ione = 1;
    double *t = malloc(sizeof *t * (size_t)reps);
    for (int r = -1; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        pdgemm_("N", "N", &n, &n, &n, &one, a, &ione, &ione, desc, b, &ione, &ione, desc, &zerod,
                c, &ione, &ione, desc);
        double dt = MPI_Wtime() - t0;
        MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (r >= 0)
            t[r] = dt;
    }
    /* Spot check: the first local element of C on every rank. */
    double err = 0;
    if (lr > 0 && lc > 0) {
        int64_t gi = global_index(0, nb, myr, pr), gj = global_index(0, nb, myc, pc);
        double want = 0;
        for (int64_t k = 0; k < n; k++)
            want += gen(0, gi, k) * gen(1, k, gj);
        err = fabs(c[0] - want) / (fabs(want) + 1e-300);
    }
    MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double med = bench_median(t, reps);
    if (me == 0)
        printf("RESULT bench=pdgemm n=%d grid=%dx%d nb=%d ranks=%d median_ms=%.1f gflops=%.2f "
               "max_rel_err=%.2e\n",
               n, pr, pc, nb, np, 1e3 * med, 2.0 * n * (double)n * n / med * 1e-9, err);
    free(t), free(a), free(b), free(c);
    Cblacs_gridexit(ctxt);
    MPI_Finalize();
    return 0;
}
