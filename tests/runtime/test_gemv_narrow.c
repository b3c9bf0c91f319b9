/*
 * test_gemv_narrow.c - the narrow matrix-vector kernels (runtime/
 * gemv_narrow.c, gemv_narrow_avx2.c, gemv_narrow_avx512.c) against an f64
 * loop: an i8 or bf16 matrix times an f32 vector in f32, both forms (a dot
 * per row; a sum of rows), on every instruction set the CPU runs (portable
 * C always, AVX2 + FMA and AVX-512 where the CPU has them), at sizes around
 * the loops' steps (rows 1..9 about the four-row passes, columns about the
 * 8-, 16- and 32-element vectors and the masked tails), with a leading dimension wider than the row, strided x and y,
 * alpha and beta; batches of products whose matrices interleave
 * (attention's heads over an i8 cache) against single calls; products
 * that are not narrow left alone; and products shared with a device's
 * helper thread (rt_gemv.h) against one thread, bit for bit.
 */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cunit_main.h"
#include "rt_internal.h"

/* Element i of a narrow matrix, exactly. */
static double narrow_elem(int32_t dt, const void *m, int64_t i)
{
    if (dt == RT_I8)
        return ((const int8_t *)m)[i];
    return rt_bf16_to_f32(((const uint16_t *)m)[i]);
}

/* One case: the matrix [rows x cols] stored with leading dimension ld as
 * dt; rows_form: y[r] = alpha sum_c A[r,c] x[c] + beta y[r] (g: M = rows,
 * a the matrix, b = x with stride incx via tb); else y[c] = alpha sum_r
 * x[r] A[r,c] + beta y[c] (M = 1, b the matrix).  y has stride incy.
 * Returns the max error over y relative to sum |terms| of its element
 * (f32 rounding of a sum of n terms is below n * 2^-24 of that), or
 * -1 when the kernel declined the product. */
static double run_case(int32_t dt, int rows_form, int64_t rows, int64_t cols, int64_t ld,
                       int64_t incx, int64_t incy, double alpha, double beta, int isa)
{
    size_t es = rt_dtype_size(dt);
    int64_t xn = rows_form ? cols : rows, yn = rows_form ? rows : cols;
    char *mat = calloc((size_t)(rows * ld), es);
    float *x = calloc((size_t)(xn * incx), sizeof *x), *y = calloc((size_t)(yn * incy), sizeof *y);
    float *scratch = calloc((size_t)(rows + 8 * cols), sizeof *scratch);
    double *ref = calloc((size_t)yn, sizeof *ref), *mag = calloc((size_t)yn, sizeof *mag);
    for (int64_t i = 0; i < rows * ld; i++) {
        double v = sin(0.37 * (double)i + 0.1);
        if (dt == RT_I8)
            ((int8_t *)mat)[i] = (int8_t)lrint(127 * v);
        else
            ((uint16_t *)mat)[i] = rt_f32_to_bf16((float)(3 * v));
    }
    for (int64_t i = 0; i < xn; i++)
        x[i * incx] = (float)cos(1.1 * (double)i) - 0.25f;
    for (int64_t i = 0; i < yn; i++)
        y[i * incy] = (float)(0.5 + 0.01 * (double)i);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            double p = narrow_elem(dt, mat, r * ld + c) * x[(rows_form ? c : r) * incx];
            ref[rows_form ? r : c] += p;
            mag[rows_form ? r : c] += fabs(p);
        }
    for (int64_t i = 0; i < yn; i++) {
        ref[i] = alpha * ref[i] + beta * y[i * incy];
        mag[i] = fabs(alpha) * mag[i] + fabs(beta * y[i * incy]) + 1e-30;
    }
    rt_gemm g = {.dtype = RT_F32, .alpha = alpha, .beta = beta, .c = y};
    if (rows_form) { /* c [M x 1] = a [M x K] b [K x 1]; b's rows incx apart */
        g.M = rows, g.N = 1, g.K = cols;
        g.a = mat, g.lda = ld, g.adt = dt;
        g.b = x, g.ldb = incx, g.bdt = RT_F32;
        g.ldc = incy; /* c [M x N] with N = 1: rows incy apart */
    } else { /* c [1 x N] = a [1 x K] b [K x N]; a's stride incx: stored [K x 1], ta */
        g.M = 1, g.N = cols, g.K = rows;
        g.a = x, g.lda = incx, g.ta = 1, g.adt = RT_F32;
        g.b = mat, g.ldb = ld, g.bdt = dt;
        g.c = y, g.ldc = incy, g.tc = 1; /* c stored [N x M]: elements incy apart */
    }
    double err = -1;
    CU_ASSERT_FATAL(rt_gemv_narrow_scratch(&g) <= rows + 8 * cols);
    if (rt_gemv_narrow_isa(&g, scratch, isa)) {
        err = 0;
        for (int64_t i = 0; i < yn; i++) {
            double e = fabs(y[i * incy] - ref[i]) / mag[i];
            err = e > err ? e : err;
        }
    }
    free(mat);
    free(x);
    free(y);
    free(scratch);
    free(ref);
    free(mag);
    return err;
}

/* run_case's bound: f32 rounding (1e-5 of the sum of |terms|), or at
 * RT_ISA_AVX512_VNNI the i8 sums of rows of RT_GEMV_W8A16_MIN_COLS or
 * more columns, W8A16 (x rounded to 2^-16 of each eight-row pass's
 * largest |x|: the x here, cos - 1/4, are within a few times of each
 * other, so 1e-4; test_gemv_w8a16.c checks the exact rounding). */
static double case_tol(int isa, int32_t dt, int rows_form, int64_t cols)
{
    return isa == RT_ISA_AVX512_VNNI && dt == RT_I8 && !rows_form &&
                   cols >= RT_GEMV_W8A16_MIN_COLS
               ? 1e-4
               : 1e-5;
}

static void test_kernels_vs_f64(void)
{
    static const int64_t rows[] = {1, 2, 3, 4, 5, 7, 8, 9, 33};
    static const int64_t cols[] = {1, 5, 7, 8, 9, 15, 16, 17, 24, 31, 33, 130};
    int best = rt_gemv_narrow_isa_best();
    int checked = 0;
    for (int isa = RT_ISA_PORTABLE; isa <= best; isa++)
        for (int32_t dt = RT_BF16; dt <= RT_I8; dt += RT_I8 - RT_BF16)
            for (int form = 0; form < 2; form++)
                for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
                    for (size_t j = 0; j < sizeof cols / sizeof cols[0]; j++) {
                        int64_t r = rows[i], c = cols[j];
                        int strided = (i + j) % 2; /* half the cases: ld > cols, strides */
                        double alpha = strided ? -0.75 : 1.0, beta = j % 3 == 0 ? 0.5 : 0.0;
                        double err = run_case(dt, form, r, c, c + 3 * strided, 1 + 2 * strided,
                                              1 + strided, alpha, beta, isa);
                        /* f32 sums of up to 130 terms: well under 130 * 2^-24 */
                        if (!(err >= 0 && err < 1e-5))
                            fprintf(stderr, "\n  isa %d %s %s %lld x %lld: err %g\n", isa,
                                    rt_dtype_name(dt), form ? "rows" : "cols", (long long)r,
                                    (long long)c, err);
                        CU_ASSERT(err >= 0 && err < 1e-5);
                        checked++;
                    }
    CU_ASSERT(checked == (best + 1) * 2 * 2 * 9 * 12);
}

/* Every instruction set the CPU has (AVX2, AVX-512) and the portable one
 * agree with f64 on a decode-sized product (1024 x 1000 i8: many 16- and
 * 32-column steps, a tail of 8; rows of 1000 bytes: the rows form one row
 * per pass) within rounding, i8 and bf16; and on rows long enough for the
 * sum of rows' eight-row passes (19 x 2053: two passes, a tail of 3 rows
 * and of 5 columns). */
static void test_isas_agree(void)
{
    for (int isa = RT_ISA_PORTABLE; isa <= rt_gemv_narrow_isa_best(); isa++) {
        for (int form = 0; form < 2; form++)
            for (int32_t dt = RT_BF16; dt <= RT_I8; dt += RT_I8 - RT_BF16) {
                double e = run_case(dt, form, 1024, 1000, 1000, 1, 1, 1.0, 0.0, isa);
                CU_ASSERT(e >= 0 && e < case_tol(isa, dt, form, 1000));
            }
        double e = run_case(RT_I8, 0, 19, 2053, 2060, 2, 3, -0.5, 0.25, isa);
        CU_ASSERT(e >= 0 && e < case_tol(isa, RT_I8, 0, 2053));
    }
}

/* EINC_GEMV_ISA caps the instruction set rt_gemv_narrow_isa_best gives
 * (a benchmark's before and after); unset, no cap (another value ends the
 * job: run_tp.py). */
static void test_isa_cap(void)
{
    const char *outer = getenv("EINC_GEMV_ISA"); /* the caller's cap, restored */
    char *saved = outer ? strdup(outer) : NULL;
    unsetenv("EINC_GEMV_ISA");
    int best = rt_gemv_narrow_isa_best();
    setenv("EINC_GEMV_ISA", "portable", 1);
    CU_ASSERT(rt_gemv_narrow_isa_best() == RT_ISA_PORTABLE);
    setenv("EINC_GEMV_ISA", "avx2", 1);
    CU_ASSERT(rt_gemv_narrow_isa_best() == (best < RT_ISA_AVX2 ? best : RT_ISA_AVX2));
    setenv("EINC_GEMV_ISA", "avx512", 1);
    CU_ASSERT(rt_gemv_narrow_isa_best() == (best < RT_ISA_AVX512 ? best : RT_ISA_AVX512));
    setenv("EINC_GEMV_ISA", "avx512vnni", 1);
    CU_ASSERT(rt_gemv_narrow_isa_best() == best);
    unsetenv("EINC_GEMV_ISA");
    /* a product asked for with a set the CPU lacks runs on the best it has */
    double e = run_case(RT_I8, 1, 9, 77, 80, 1, 1, 1.0, 0.0, RT_ISA_AVX512_VNNI);
    CU_ASSERT(e >= 0 && e < 1e-5);
    if (saved)
        setenv("EINC_GEMV_ISA", saved, 1);
    free(saved);
}

/* nbatch products whose matrices interleave as attention's heads do (a
 * cache [S, K, H] read per head: matrix i at column i * cols of rows
 * nbatch * cols + 1 apart), each with its own x and y: one batched call
 * (with AVX2, the heads kernels: four rows across all heads at a time)
 * gives exactly what nbatch single calls give (each row's sum is taken in
 * the same order; the single calls are checked against f64 above), over
 * several row blocks and a tail, both forms, x and y strided. */
static void test_batched_equals_single(void)
{
    enum { NB = 3, ROWS = 37 };
    /* 1030, 2100: the cols form sums i8 rows eight at a time from 1 KiB
     * (COLS8_MIN); the rows form takes one row per pass from 512 */
    static const int64_t widths[] = {13, 128, 1030, 2100};
    int best = rt_gemv_narrow_isa_best();
    for (int isa = RT_ISA_PORTABLE; isa <= best; isa++)
        for (int32_t dt = RT_BF16; dt <= RT_I8; dt += RT_I8 - RT_BF16)
            for (int form = 0; form < 2; form++)
                for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
                    int64_t cols = widths[w];
                    int64_t ld = NB * cols + 1, xn = form ? cols : ROWS, yn = form ? ROWS : cols;
                    int64_t inc = 2; /* x and y strided */
                    size_t es = rt_dtype_size(dt);
                    char *mat = calloc((size_t)(ROWS * ld), es);
                    float *x = calloc((size_t)(NB * xn * inc), sizeof *x);
                    float *y1 = calloc((size_t)(NB * yn * inc), sizeof *y1);
                    float *y2 = calloc((size_t)(NB * yn * inc), sizeof *y2);
                    float *scratch = calloc((size_t)(NB * (ROWS + 8 * cols)), sizeof *scratch);
                    for (int64_t i = 0; i < ROWS * ld; i++) {
                        double v = sin(0.61 * (double)i);
                        if (dt == RT_I8)
                            ((int8_t *)mat)[i] = (int8_t)lrint(120 * v);
                        else
                            ((uint16_t *)mat)[i] = rt_f32_to_bf16((float)v);
                    }
                    for (int64_t i = 0; i < NB * xn * inc; i++)
                        x[i] = (float)cos(0.3 * (double)i);
                    for (int64_t i = 0; i < NB * yn * inc; i++)
                        y1[i] = y2[i] = (float)i;
                    rt_gemm g = {.dtype = RT_F32, .alpha = 0.5, .beta = 0.25};
                    if (form) { /* rows: c [M x 1] = a [M x K] b [K x 1] */
                        g.M = ROWS, g.N = 1, g.K = cols;
                        g.a = mat, g.lda = ld, g.adt = dt;
                        g.b = x, g.ldb = inc, g.bdt = RT_F32;
                        g.c = y2, g.ldc = inc;
                    } else { /* cols: c [1 x N] = a [1 x K] b [K x N] */
                        g.M = 1, g.N = cols, g.K = ROWS;
                        g.a = x, g.lda = inc, g.ta = 1, g.adt = RT_F32;
                        g.b = mat, g.ldb = ld, g.bdt = dt;
                        g.c = y2, g.ldc = inc, g.tc = 1;
                    }
                    int64_t om[NB], ov[NB], oc[NB];
                    for (int i = 0; i < NB; i++)
                        om[i] = i * cols, ov[i] = i * xn * inc, oc[i] = i * yn * inc;
                    const int64_t *oa = form ? om : ov, *ob = form ? ov : om;
                    CU_ASSERT(rt_gemv_narrow_batched(&g, NB, oa, ob, oc, scratch, isa) == 1);
                    for (int i = 0; i < NB; i++) {
                        rt_gemm h = g;
                        h.a = (const char *)g.a + (size_t)oa[i] * (form ? es : sizeof(float));
                        h.b = (const char *)g.b + (size_t)ob[i] * (form ? sizeof(float) : es);
                        h.c = y1 + oc[i];
                        CU_ASSERT(rt_gemv_narrow_isa(&h, scratch, isa) == 1);
                    }
                    CU_ASSERT(memcmp(y1, y2, (size_t)(NB * yn * inc) * sizeof *y1) == 0);
                    free(mat);
                    free(x);
                    free(y1);
                    free(y2);
                    free(scratch);
                }
}

/* One product, batched over nb interleaved matrices as above, run with
 * split (may be NULL) into y; returns 1 when the kernels took it. */
static int run_split(int32_t dt, int form, int64_t nb, int64_t rows, int64_t cols, int isa,
                     rt_gemv_split *split, float *y)
{
    int64_t ld = nb * cols + 3, xn = form ? cols : rows, yn = form ? rows : cols, inc = 2;
    size_t es = rt_dtype_size(dt);
    char *mat = calloc((size_t)(rows * ld), es);
    float *x = calloc((size_t)(nb * xn * inc), sizeof *x);
    float *scratch = calloc((size_t)(nb * 8 * cols), sizeof *scratch);
    for (int64_t i = 0; i < rows * ld; i++) {
        double v = sin(0.43 * (double)i + 0.2);
        if (dt == RT_I8)
            ((int8_t *)mat)[i] = (int8_t)lrint(125 * v);
        else
            ((uint16_t *)mat)[i] = rt_f32_to_bf16((float)(2 * v));
    }
    for (int64_t i = 0; i < nb * xn * inc; i++)
        x[i] = (float)cos(0.7 * (double)i) + 0.125f;
    for (int64_t i = 0; i < nb * yn * inc; i++)
        y[i] = (float)(1 + i % 7);
    rt_gemm g = {.dtype = RT_F32, .alpha = -1.25, .beta = 0.5, .split = split};
    if (form) {
        g.M = rows, g.N = 1, g.K = cols;
        g.a = mat, g.lda = ld, g.adt = dt;
        g.b = x, g.ldb = inc, g.bdt = RT_F32;
        g.c = y, g.ldc = inc;
    } else {
        g.M = 1, g.N = cols, g.K = rows;
        g.a = x, g.lda = inc, g.ta = 1, g.adt = RT_F32;
        g.b = mat, g.ldb = ld, g.bdt = dt;
        g.c = y, g.ldc = inc, g.tc = 1;
    }
    int64_t *om = calloc((size_t)nb, sizeof *om), *ov = calloc((size_t)nb, sizeof *ov);
    int64_t *oc = calloc((size_t)nb, sizeof *oc);
    for (int64_t i = 0; i < nb; i++)
        om[i] = i * cols, ov[i] = i * xn * inc, oc[i] = i * yn * inc;
    int took = rt_gemv_narrow_batched(&g, nb, form ? om : ov, form ? ov : om, oc, scratch, isa);
    free(om);
    free(ov);
    free(oc);
    free(mat);
    free(x);
    free(scratch);
    return took;
}

/* A product shared with the helper thread (forced: threshold 1 byte)
 * equals the single-thread one bit for bit: both forms, one matrix and
 * interleaved batches, row and column counts that are not multiples of
 * the split's 16 (a tail in the last chunk) nor of the kernels' steps,
 * sizes too small to split (declined, same result), every instruction set. */
static void test_split_equals_single(void)
{
    static const int64_t shapes[][3] = {/* batches, rows, cols */
                                        {1, 1003, 517}, {1, 37, 29},  {1, 16, 16},
                                        {1, 15, 1000},  {5, 203, 13}, {8, 517, 128},
                                        {3, 33, 47},    {1, 2, 3},    {1, 41, 2100},
                                        {1, 45, 1030}};
    rt_gemv_split split = {.threads = 2, .cpu = -1, .min_bytes = 1};
    int best = rt_gemv_narrow_isa_best(), checked = 0;
    for (int isa = RT_ISA_PORTABLE; isa <= best; isa++)
        for (int32_t dt = RT_BF16; dt <= RT_I8; dt += RT_I8 - RT_BF16)
            for (int form = 0; form < 2; form++)
                for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
                    int64_t nb = shapes[k][0], rows = shapes[k][1], cols = shapes[k][2];
                    size_t n = (size_t)(nb * (form ? rows : cols) * 2);
                    float *y1 = calloc(n, sizeof *y1), *y2 = calloc(n, sizeof *y2);
                    CU_ASSERT(run_split(dt, form, nb, rows, cols, isa, NULL, y1) == 1);
                    CU_ASSERT(run_split(dt, form, nb, rows, cols, isa, &split, y2) == 1);
                    int same = memcmp(y1, y2, n * sizeof *y1) == 0;
                    if (!same)
                        fprintf(stderr, "\n  split differs: isa %d %s %s %lld x %lld x %lld\n",
                                isa, rt_dtype_name(dt), form ? "rows" : "cols", (long long)nb,
                                (long long)rows, (long long)cols);
                    CU_ASSERT(same);
                    checked++;
                    free(y1);
                    free(y2);
                }
    CU_ASSERT(split.worker != NULL); /* the helper was started, */
    rt_gemv_split_release(&split);   /* and is joined */
    CU_ASSERT(split.worker == NULL);
    CU_ASSERT(checked == (best + 1) * 2 * 2 * 10);
}

static void count_chunk(void *arg, int64_t k)
{
    int *hits = arg;
    hits[k]++; /* chunk k's own counter: one thread writes it */
}

/* Many jobs in a row, some too small for the helper to take a chunk:
 * every chunk runs exactly once, whoever takes it, and the job is over
 * when rt_gemv_split_run returns (the counters are read right after). */
static void test_split_runs_each_chunk_once(void)
{
    enum { JOBS = 3000, MAXCH = 9 };
    rt_gemv_split split = {.threads = 2, .cpu = -1, .min_bytes = 1};
    int bad = 0;
    for (int j = 0; j < JOBS; j++) {
        int hits[MAXCH] = {0};
        int64_t n = 1 + j % MAXCH;
        rt_gemv_split_run(&split, count_chunk, hits, n);
        for (int64_t k = 0; k < MAXCH; k++)
            bad += hits[k] != (k < n);
    }
    CU_ASSERT(bad == 0);
    rt_gemv_split_release(&split);
    rt_gemv_split_release(&split); /* releasing twice is harmless */
}

/* Adaptive products through rt_gemv_split_product with EINC_GEMV_TRACE
 * on: each runs every chunk once, split or not, and the class counts
 * them (the report at release goes to stderr). */
static void test_split_product_traced(void)
{
    setenv("EINC_GEMV_THREADS", "adaptive", 1);
    setenv("EINC_GEMV_TRACE", "1", 1);
    rt_gemv_split s;
    rt_gemv_split_plan(&s, 1, 0, 0);
    unsetenv("EINC_GEMV_THREADS");
    unsetenv("EINC_GEMV_TRACE");
    CU_ASSERT(s.threads == 2 && s.adaptive == 1 && s.trace == 1 && s.ncpus >= 1);
    int bad = 0, split = 0;
    for (int j = 0; j < 40; j++) {
        int hits[8] = {0};
        rt_gemv_split_product(&s, count_chunk, hits, 8, 2.0 * (double)s.min_bytes, NULL);
        for (int k = 0; k < 8; k++)
            bad += hits[k] != 1;
    }
    split = (int)s.cls[1].split_products; /* 2 x min_bytes: class 1 */
    CU_ASSERT(bad == 0 && s.cls[1].products == 40 && split >= 1); /* the split try */
    rt_gemv_split_release(&s);
    CU_ASSERT(s.worker == NULL && s.trace == 0);
}

/* Which products are offered to the helper (rt_gemv_split_wants): those
 * of min_bytes or more on a device with one; and a sum of rows over heads
 * (attention's P . Vc) is cut into its runs of rows, split with the same
 * bits as on one thread. */
static void test_split_wants(void)
{
    rt_gemv_split s = {.threads = 2, .cpu = -1, .min_bytes = 1024};
    CU_ASSERT(rt_gemv_split_wants(NULL, 1e9) == 0);
    CU_ASSERT(rt_gemv_split_wants(&s, 1023) == 0); /* under min_bytes */
    CU_ASSERT(rt_gemv_split_wants(&s, 1024) == 1);
    s.threads = 1;
    CU_ASSERT(rt_gemv_split_wants(&s, 1e9) == 0); /* no helper */
    /* the scratch: one vector of columns per run of rows summed apart */
    int8_t m[1];
    float x[1], y[1];
    rt_gemm g = {.dtype = RT_F32, .M = 1, .N = 128, .alpha = 1, .a = x, .lda = 1,
                 .adt = RT_F32, .b = m, .ldb = 1024, .bdt = RT_I8, .c = y, .ldc = 128};
    static const int64_t rows[][2] = {{31, 1}, {32, 2}, {100, 6}, {517, 8}, {2048, 8}};
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        g.K = rows[k][0];
        CU_ASSERT(rt_gemv_narrow_scratch(&g) == rows[k][1] * 128);
    }
    rt_gemv_split h = {.threads = 2, .cpu = -1, .min_bytes = 1};
    size_t n = (size_t)(8 * 128 * 2);
    float *y1 = calloc(n, sizeof *y1), *y2 = calloc(n, sizeof *y2);
    CU_ASSERT(run_split(RT_I8, 0, 8, 2048, 128, rt_gemv_narrow_isa_best(), NULL, y1) == 1);
    CU_ASSERT(run_split(RT_I8, 0, 8, 2048, 128, rt_gemv_narrow_isa_best(), &h, y2) == 1);
    CU_ASSERT(memcmp(y1, y2, n * sizeof *y1) == 0);
    CU_ASSERT(h.worker != NULL); /* offered to the helper */
    rt_gemv_split_release(&h);
    free(y1);
    free(y2);
}

/* The plan: EINC_GEMV_THREADS=1 turns the helper off, =2 forces it; by
 * default a device gets one only when a CPU is left over for it. */
static void test_split_plan(void)
{
    rt_gemv_split s;
    setenv("EINC_GEMV_THREADS", "1", 1);
    rt_gemv_split_plan(&s, 1, 0, 1);
    CU_ASSERT(s.threads == 1 && s.worker == NULL);
    setenv("EINC_GEMV_THREADS", "2", 1);
    rt_gemv_split_plan(&s, 4096, 0, 1);
    CU_ASSERT(s.threads == 2 && s.cpu == -1 && s.min_bytes == RT_GEMV_SPLIT_BYTES);
    CU_ASSERT(s.adaptive == 0);
    setenv("EINC_GEMV_THREADS", "adaptive", 1); /* a helper whatever the load, adaptive */
    rt_gemv_split_plan(&s, 4096, 0, 1);
    CU_ASSERT(s.threads == 2 && s.adaptive == 1);
    unsetenv("EINC_GEMV_THREADS");
    rt_gemv_split_plan(&s, 4096, 0, 1); /* more devices than CPUs */
    CU_ASSERT(s.threads == 1);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    rt_gemv_split_plan(&s, 1, 0, 0);
    if (cpus == 1)
        CU_ASSERT(s.threads == 1);
}

/* The start-up check's count of other processes' runnable threads: this
 * process's own (its device thread, a BLAS thread spinning after start-up)
 * are not load; the caller counts itself at least once. */
static void test_split_others(void)
{
    CU_ASSERT(rt_gemv_split_others(2, 2) == 0); /* idle: us and our BLAS thread */
    CU_ASSERT(rt_gemv_split_others(1, 1) == 0);
    CU_ASSERT(rt_gemv_split_others(3, 2) == 1);
    CU_ASSERT(rt_gemv_split_others(4, 1) == 3);
    CU_ASSERT(rt_gemv_split_others(3, 0) == 2); /* own unknown: the caller */
    CU_ASSERT(rt_gemv_split_others(0, 0) == 0);
    CU_ASSERT(rt_gemv_split_others(2, 5) == 0); /* read at two moments */
}

/* The helper polls for its next job for 100 us, then up to 2 ms while no
 * thread waits for a CPU (the machine's runnable threads, its own
 * included, at most the process's CPUs), and sleeps otherwise. */
static void test_split_linger(void)
{
    CU_ASSERT(rt_gemv_split_linger(0, 9, 2) == 1);      /* the first 100 us: always */
    CU_ASSERT(rt_gemv_split_linger(50e-6, 0, 0) == 1);
    CU_ASSERT(rt_gemv_split_linger(300e-6, 2, 2) == 1); /* device and helper: idle */
    CU_ASSERT(rt_gemv_split_linger(1.9e-3, 1, 2) == 1);
    CU_ASSERT(rt_gemv_split_linger(300e-6, 3, 2) == 0); /* a thread waits for a CPU */
    CU_ASSERT(rt_gemv_split_linger(2.1e-3, 2, 2) == 0); /* 2 ms: parked */
    CU_ASSERT(rt_gemv_split_linger(300e-6, 0, 2) == 0); /* unknown: parked */
    CU_ASSERT(rt_gemv_split_linger(300e-6, 2, 0) == 0);
    CU_ASSERT(rt_gemv_split_linger(1e-3, 5, 8) == 1);
}

/* n products of `bytes` under the adaptive choice, split ones taking
 * split_ns and the others one_ns per byte; returns how many were split. */
static int choose_run(rt_gemv_split *s, int n, double bytes, double split_ns, double one_ns)
{
    int split = 0;
    for (int i = 0; i < n; i++) {
        int c = rt_gemv_split_choose(s, bytes);
        rt_gemv_split_note(s, c, bytes, 1e-9 * bytes * (c ? split_ns : one_ns));
        split += c;
    }
    return split;
}

/* The adaptive choice: one thread first, then split (RT_GEMV_SPLIT_TRY
 * products each, a try cut short by a product over twice the other's
 * time), then the faster of the two, the slower tried again less and less
 * often while it stays slower, and taken over as soon as a try's mean
 * finds it faster; each size class on its own; a forced plan (not
 * adaptive) always splits. */
static void test_split_choice(void)
{
    enum { T = RT_GEMV_SPLIT_TRY };
    rt_gemv_split s = {.threads = 2, .cpu = -1, .min_bytes = 1 << 19, .adaptive = 1};
    double mb = 1 << 20; /* class 1 */
    CU_ASSERT(choose_run(&s, 2 * T, mb, 2.0, 1.0) == T); /* one thread T, then split T */
    int tries = choose_run(&s, 4000, mb, 2.0, 1.0);      /* split slower: tries only */
    CU_ASSERT(tries % T == 0 && tries >= 5 * T && tries <= 8 * T); /* 64, 128, .. 1024 */
    CU_ASSERT(s.cls[1].try_every == 1024);
    /* the load goes: split faster, seen at the next try (within 1024 + T) */
    CU_ASSERT(choose_run(&s, 1100, mb, 0.5, 1.0) >= 1100 - 1024 - 2 * T);
    CU_ASSERT(choose_run(&s, 100, mb, 0.5, 1.0) >= 100 - (100 / 64 + 1) * T);
    /* a larger class measures for itself: split faster there */
    rt_gemv_split_class before = s.cls[1];
    CU_ASSERT(choose_run(&s, 200, 8 * mb, 0.5, 1.0) >= 200 - (200 / 64 + 2) * T);
    CU_ASSERT(s.cls[4].products == 200 && s.cls[1].products == before.products);
    CU_ASSERT(choose_run(&s, 1, 1e12, 2.0, 1.0) == 0); /* the largest class: first measured */
    CU_ASSERT(s.cls[RT_GEMV_SPLIT_CLASSES - 1].products == 1);
    /* a try's mean decides, not one product: split slower on average
     * though every other split product is quick */
    rt_gemv_split u = {.threads = 2, .cpu = -1, .min_bytes = 1 << 19, .adaptive = 1};
    int split = 0;
    for (int i = 0; i < 2000; i++) {
        int c = rt_gemv_split_choose(&u, mb);
        double ns = c ? (i % 2 ? 0.5 : 4.0) : 1.0;
        rt_gemv_split_note(&u, c, mb, 1e-9 * mb * ns);
        split += c;
    }
    CU_ASSERT(split <= 10 * T);
    /* a try product over twice the other mode's time ends the try */
    rt_gemv_split v = {.threads = 2, .cpu = -1, .min_bytes = 1 << 19, .adaptive = 1};
    CU_ASSERT(choose_run(&v, 4000, mb, 3.0, 1.0) <= 9); /* first measure and tries: 1 each */
    CU_ASSERT(v.cls[1].try_every == 1024);
    /* products of RT_GEMV_SPLIT_TRY_BYTES (a step's one LM head) are tried
     * one at a time: one thread, split, then split from the third on */
    rt_gemv_split w = {.threads = 2, .cpu = -1, .min_bytes = 1 << 19, .adaptive = 1};
    double head = RT_GEMV_SPLIT_TRY_BYTES;
    CU_ASSERT(choose_run(&w, 1, head, 0.5, 1.0) == 0);
    CU_ASSERT(choose_run(&w, 1, head, 0.5, 1.0) == 1);
    CU_ASSERT(choose_run(&w, 8, head, 0.5, 1.0) == 8);
    CU_ASSERT(w.cls[4].tries == 2 && w.cls[4].split_products == 0); /* counted by _product */
    /* products of half that: tries of two */
    CU_ASSERT(choose_run(&w, 4, head / 2, 0.5, 1.0) == 2);
    rt_gemv_split forced = {.threads = 2, .cpu = -1, .min_bytes = 1};
    rt_gemv_split_note(&forced, 1, 1e6, 1.0);
    CU_ASSERT(rt_gemv_split_choose(&forced, 1e6) == 1 && forced.cls[0].s_per_byte[1] == 0);
}

/* Products the kernels do not take: f64 arithmetic, an f32 matrix, a
 * narrow vector, more than one row and column. */
static void test_declines(void)
{
    int8_t m[4] = {1, 2, 3, 4};
    float x[2] = {1, 1}, y[2] = {0, 0}, s[4];
    rt_gemm g = {.dtype = RT_F32, .M = 2, .N = 1, .K = 2, .alpha = 1, .a = m, .lda = 2,
                 .adt = RT_I8, .b = x, .ldb = 1, .bdt = RT_F32, .c = y, .ldc = 1};
    CU_ASSERT(rt_gemv_narrow_isa(&g, s, RT_ISA_PORTABLE) == 1);
    CU_ASSERT(y[0] == 3 && y[1] == 7);
    rt_gemm h = g;
    h.dtype = RT_F64;
    CU_ASSERT(rt_gemv_narrow_isa(&h, s, rt_gemv_narrow_isa_best()) == 0);
    h = g;
    h.adt = RT_F32;
    CU_ASSERT(rt_gemv_narrow_isa(&h, s, rt_gemv_narrow_isa_best()) == 0);
    h = g;
    h.bdt = RT_BF16; /* a bf16 vector (an i8 one: test_gemv_i8i8.c) */
    CU_ASSERT(rt_gemv_narrow_isa(&h, s, rt_gemv_narrow_isa_best()) == 0);
    h = g;
    h.N = 2, h.ldc = 2;
    CU_ASSERT(rt_gemv_narrow_isa(&h, s, rt_gemv_narrow_isa_best()) == 0);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"i8 and bf16 kernels vs f64, every instruction set", test_kernels_vs_f64},
        {"every instruction set agrees on a decode-sized product", test_isas_agree},
        {"EINC_GEMV_ISA caps the instruction set", test_isa_cap},
        {"batched (interleaved heads) equals single calls", test_batched_equals_single},
        {"products that are not narrow are declined", test_declines},
        {"split with the helper equals one thread, bit for bit", test_split_equals_single},
        {"the helper's jobs run each chunk once", test_split_runs_each_chunk_once},
        {"the split plan follows CPUs and EINC_GEMV_THREADS", test_split_plan},
        {"products of min_bytes are split, sums of rows in runs", test_split_wants},
        {"the adaptive plan splits while splitting is faster", test_split_choice},
        {"the start-up check counts other processes' threads only", test_split_others},
        {"the helper polls while no thread waits for a CPU", test_split_linger},
        {"adaptive products run each chunk once, traced", test_split_product_traced},
    };
    einc_add_suite("runtime narrow gemv", tests, (int)(sizeof tests / sizeof tests[0]));
}
