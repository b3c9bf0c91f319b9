/*
 * gemm_blas.c - benchmark 3 (docs/performance.md), the one-process
 * baseline: f64 GEMM C = A B of N x N row-major matrices with one
 * cblas_dgemm call on THREADS OpenBLAS threads (the physical limit of the
 * machine for a distributed GEMM of the same size).
 *
 *   usage: gemm_blas [N [THREADS [REPS]]]      (defaults 4096 nproc 3)
 *
 * Prints the median of REPS timed calls after one warm-up and GFLOP/s =
 * 2 N^3 / time.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench_util.h"

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4096;
    int threads = argc > 2 ? atoi(argv[2]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    if (n < 1 || threads < 1 || reps < 1) {
        fprintf(stderr, "usage: gemm_blas [N [THREADS [REPS]]]\n");
        return 2;
    }
    openblas_set_num_threads(threads);
    size_t nn = (size_t)n * (size_t)n;
    double *a = malloc(nn * 8), *b = malloc(nn * 8), *c = malloc(nn * 8), *t = malloc(8 * (size_t)reps);
    if (!a || !b || !c || !t) {
        fprintf(stderr, "gemm_blas: out of memory\n");
        return 1;
    }
    uint64_t s = 7;
    for (size_t i = 0; i < nn; i++) {
        a[i] = bench_rand(&s);
        b[i] = bench_rand(&s);
    }
    for (int r = -1; r < reps; r++) {
        double t0 = bench_now();
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a, n, b, n, 0.0, c,
                    n);
        if (r >= 0)
            t[r] = bench_now() - t0;
    }
    double med = bench_median(t, reps);
    printf("RESULT bench=gemm_blas n=%d threads=%d median_ms=%.1f gflops=%.2f\n", n, threads,
           1e3 * med, 2.0 * n * (double)n * n / med * 1e-9);
    free(a), free(b), free(c), free(t);
    return 0;
}
