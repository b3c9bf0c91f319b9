/*
 * gemv_narrow.c - the narrow matrix-vector kernels of runtime/gemv_narrow.c
 * (a decode step's i8 or bf16 weights times an f32 vector, converted in
 * registers) in weights per second, portable C against the AVX2 and
 * AVX-512 loops (for i8i8, AVX-512 is the VNNI loops where the CPU has
 * them), timed alternately in the same run (bench/decode_bandwidth.py
 * --int8).
 *
 *   usage: gemv_narrow ROWS COLS FORM DTYPE [REPS]
 *     FORM  rows (y[r] = sum_c A[r, c] x[c]: attention's scores over the
 *           cache) or cols (y[c] = sum_r x[r] A[r, c]: X * W with W stored
 *           [D, F], every weight of the decode step)
 *     DTYPE i8 or bf16 (times an f32 vector), or i8i8 (an i8 matrix times
 *           an i8 vector, summed in i32: gemv_i8i8.c, W8A8)
 *
 * One call of rt_gemv_narrow_isa per repetition on a ROWS x COLS matrix,
 * and with each vector instruction set one call split with a helper thread
 * (a device's spare core, rt_gemv.h; forced whatever the size).  As the
 * runtime under --bind-to core, this thread runs on the first CPU the
 * process may use and the helper on the second (unpinned, the kernel
 * tends to wake the helper on the waker's CPU, and the two then share it);
 * the matrices cycle through enough copies (at least 256 MiB in all) that
 * a matrix smaller than the caches is still read from memory unless it
 * alone is asked for (COPIES=1 in the environment: the in-cache rate, the
 * kernel's conversion speed).  The copies are allocated as rt_alloc
 * allocates blocks of 2 MiB or more (runtime/device.c): on 2 MiB pages,
 * advised as transparent huge pages, what a program's weights get;
 * PAGES=4k in the environment leaves them on 4 KiB pages (the runtime
 * before, for comparison).  Prints one line per instruction set and
 * one per vector set split (EINC_GEMV_ISA caps the sets, rt_gemv.h):
 *   RESULT isa=avx2 ms=.. weights_per_s=.. bytes_per_s=.. err=..
 *   RESULT isa=avx512 threads=2 ms=.. weights_per_s=.. bytes_per_s=.. err=..
 * and whether a device's default plan would split it (rt_gemv_split_wants:
 * its size; the adaptive choice may still keep it on one thread):
 *   DEFAULT split=0|1
 * err is the max |y - y_f64| / max |y_f64| against an f64 loop over the
 * same matrix; an instruction set the CPU lacks prints no line.
 */
#define _GNU_SOURCE /* sched_setaffinity */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench_util.h"
#include "rt_internal.h"

/* Pins the calling thread to the first CPU it may use; the second, or -1. */
static int pin_two(void)
{
    cpu_set_t allowed, one;
    int first = -1;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed)) {
            if (first >= 0) {
                CPU_ZERO(&one);
                CPU_SET(first, &one);
                return sched_setaffinity(0, sizeof one, &one) == 0 ? c : -1;
            }
            first = c;
        }
    return -1;
}

/* `bytes` for the matrices, as rt_alloc allocates a large block: 2 MiB
 * aligned, whole 2 MiB pages, advised as huge pages before any touch
 * (unless huge is 0); free()d.  NULL when out of memory. */
static char *alloc_matrices(size_t bytes, int huge)
{
    size_t page = (size_t)2 << 20, whole = (bytes + page - 1) / page * page;
    char *p = aligned_alloc(page, whole);
#ifdef MADV_HUGEPAGE
    if (p && huge)
        (void)madvise(p, whole, MADV_HUGEPAGE);
#endif
    return p;
}

static double elem(int32_t dt, const void *m, int64_t i)
{
    if (dt == RT_I8)
        return ((const int8_t *)m)[i];
    return rt_bf16_to_f32(((const uint16_t *)m)[i]);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: gemv_narrow ROWS COLS rows|cols i8|bf16|i8i8 [REPS]\n");
        return 1;
    }
    int64_t rows = atoll(argv[1]), cols = atoll(argv[2]);
    int rows_form = strcmp(argv[3], "rows") == 0;
    int i8x = strcmp(argv[4], "i8i8") == 0;
    int32_t dt = strcmp(argv[4], "i8") == 0 || i8x ? RT_I8 : RT_BF16;
    int32_t xdt = i8x ? RT_I8 : RT_F32;
    int reps = argc > 5 ? atoi(argv[5]) : 21;
    if (rows < 1 || cols < 1 || reps < 1) {
        fprintf(stderr, "gemv_narrow: sizes and REPS must be >= 1\n");
        return 1;
    }
    const char *ld_env = getenv("LD");
    int64_t ld = ld_env ? atoll(ld_env) : cols;
    if (ld < cols)
        ld = cols;
    size_t es = rt_dtype_size(dt), bytes = (size_t)(rows * ld) * es;
    const char *env = getenv("COPIES");
    int64_t copies = env ? atoll(env) : (int64_t)((256u << 20) / bytes) + 1;
    if (copies < 1)
        copies = 1;
    const char *pages = getenv("PAGES");
    char *mats = alloc_matrices(bytes * (size_t)copies, !(pages && strcmp(pages, "4k") == 0));
    int64_t xn = rows_form ? cols : rows, yn = rows_form ? rows : cols;
    float *x = malloc((size_t)xn * sizeof *x), *y = malloc((size_t)yn * sizeof *y);
    /* rt_gemv_narrow_scratch's most: 8 runs of rows summed apart */
    float *scratch = malloc((size_t)(8 * cols) * sizeof *scratch);
    if (!mats || !x || !y || !scratch) {
        fprintf(stderr, "gemv_narrow: out of memory\n");
        return 1;
    }
    uint64_t seed = 88172645463325252ull;
    for (size_t i = 0; i < bytes * (size_t)copies; i += es)
        if (dt == RT_I8)
            mats[i] = (char)(int8_t)(127 * bench_rand(&seed));
        else {
            uint16_t h = rt_f32_to_bf16((float)bench_rand(&seed));
            memcpy(mats + i, &h, sizeof h);
        }
    for (int64_t i = 0; i < xn; i++)
        x[i] = i8x ? (float)(int8_t)(127 * bench_rand(&seed)) : (float)bench_rand(&seed);
    int8_t *x8 = malloc((size_t)xn); /* x as i8 (i8i8) */
    for (int64_t i = 0; x8 && i < xn; i++)
        x8[i] = (int8_t)x[i];
    const void *xv = i8x ? (const void *)x8 : (const void *)x;
    /* rows form: M = rows, K = cols, a = the matrix [M x K], b = x [K x 1];
     * cols form: M = 1, K = rows, N = cols, a = x [1 x K], b = the matrix. */
    rt_gemm g = {.dtype = RT_F32, .alpha = 1.0, .beta = 0.0, .c = y, .ldc = 1};
    if (rows_form) {
        g.M = rows, g.N = 1, g.K = cols;
        g.a = mats, g.lda = ld, g.adt = dt;
        g.b = xv, g.ldb = 1, g.bdt = xdt;
        g.ldc = 1;
    } else {
        g.M = 1, g.N = cols, g.K = rows;
        g.a = xv, g.lda = rows, g.adt = xdt;
        g.b = mats, g.ldb = ld, g.bdt = dt;
        g.ldc = cols;
    }
    double *ref = calloc((size_t)yn, sizeof *ref);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            double p = elem(dt, mats, r * ld + c) * (rows_form ? x[c] : x[r]);
            ref[rows_form ? r : c] += p;
        }
    double refmax = 0;
    for (int64_t i = 0; i < yn; i++)
        refmax = fabs(ref[i]) > refmax ? fabs(ref[i]) : refmax;
    static const char *names[] = {"portable", "avx2", "avx512", "avx512vnni"};
    int best = rt_gemv_narrow_isa_best();
    /* variants: isa 0..best on one thread, then each vector set from AVX2
     * up (or portable C on a CPU with none) split in two */
    int visa[2 * RT_ISA_AVX512_VNNI + 2], vsplit[2 * RT_ISA_AVX512_VNNI + 2], nvar = 0;
    for (int i = 0; i <= best; i++)
        visa[nvar] = i, vsplit[nvar++] = 0;
    for (int i = best < RT_ISA_AVX2 ? best : RT_ISA_AVX2; i <= best; i++)
        visa[nvar] = i, vsplit[nvar++] = 1;
    rt_gemv_split split = {.threads = 2, .cpu = pin_two(), .min_bytes = 1};
    double *t = malloc((size_t)reps * (size_t)nvar * sizeof *t);
    /* BATCH=n: n products whose matrices interleave (heads of a cache
     * [S, K, H] per head: LD = n * COLS, matrix i from column i * COLS;
     * x and y shared, so only the matrix reads differ) */
    const char *nb_env = getenv("BATCH");
    int64_t nbatch = nb_env ? atoll(nb_env) : 1;
    if (nbatch < 1 || nbatch * cols > ld)
        nbatch = 1;
    int64_t *zeros = calloc((size_t)nbatch, sizeof *zeros), *ob = malloc((size_t)nbatch * sizeof *ob);
    float *bscratch = malloc((size_t)(nbatch * 8 * cols) * sizeof *bscratch);
    for (int64_t i = 0; i < nbatch; i++)
        ob[i] = i * cols;
    double err[2 * RT_ISA_AVX512_VNNI + 2] = {0};
    for (int var = 0; var < nvar; var++) { /* the errors, and a warm-up */
        rt_gemm gv = g;
        gv.split = vsplit[var] ? &split : NULL;
        if (!rt_gemv_narrow_isa(&gv, scratch, visa[var]))
            return fprintf(stderr, "gemv_narrow: not a narrow product\n"), 1;
        for (int64_t i = 0; i < yn; i++) {
            double e = fabs(y[i] - ref[i]) / (refmax > 0 ? refmax : 1);
            err[var] = e > err[var] ? e : err[var];
        }
    }
    for (int k = 0; k < reps; k++) /* alternately: a load that comes and goes hits all */
        for (int var = 0; var < nvar; var++) {
            int isa = visa[var];
            rt_gemm gk = g;
            gk.split = vsplit[var] ? &split : NULL;
            const char *m = mats + bytes * (size_t)((k * nvar + var) % copies);
            if (rows_form)
                gk.a = m;
            else
                gk.b = m;
            double t0 = bench_now();
            if (nbatch > 1)
                rt_gemv_narrow_batched(&gk, nbatch, rows_form ? ob : zeros, rows_form ? zeros : ob,
                                       zeros, bscratch, isa);
            else
                rt_gemv_narrow_isa(&gk, scratch, isa);
            t[var * reps + k] = bench_now() - t0;
        }
    for (int var = 0; var < nvar; var++) {
        double s = bench_median(t + var * reps, reps);
        printf("RESULT isa=%s%s ms=%.4f weights_per_s=%.4g bytes_per_s=%.4g err=%.3g\n",
               names[visa[var]], vsplit[var] ? " threads=2" : "", s * 1e3,
               (double)(rows * cols * nbatch) / s, (double)(rows * cols * nbatch) * (double)es / s,
               err[var]);
    }
    /* whether a device's default plan (with a helper) offers this product
     * to its helper: what the split row above argues for or against */
    rt_gemv_split plan = {.threads = 2, .min_bytes = RT_GEMV_SPLIT_BYTES};
    printf("DEFAULT split=%d\n",
           rt_gemv_split_wants(&plan, (double)(rows * cols * nbatch) * (double)es));
    rt_gemv_split_release(&split);
    free(t);
    free(zeros);
    free(ob);
    free(bscratch);
    free(ref);
    free(mats);
    free(x);
    free(x8);
    free(y);
    free(scratch);
    return 0;
}
