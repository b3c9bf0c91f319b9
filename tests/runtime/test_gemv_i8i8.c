/*
 * test_gemv_i8i8.c - an i8 matrix times an i8 vector (runtime/
 * gemv_i8i8.c and gemv_i8i8_vnni.c, reached through rt_gemv_narrow_isa):
 * the result is the exact integer sum rounded once to f32, times alpha,
 * plus beta y, on every instruction set (AVX-512: the VNNI loops where
 * the CPU has them), both forms (a dot per row; a sum of rows), at
 * sizes around the loops' steps (row pairs and passes of 4 and 8, columns
 * about 16), strided x and y, a leading dimension wider than the row,
 * extreme values (-128 times -128, sums past 2^24), batched products
 * against single calls, and contractions too long for i32 declined.
 */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "rt_internal.h"

/* Fills n i8 values: pseudo-random, or (extreme) mostly -128 and 127. */
static void fill_i8(int8_t *p, int64_t n, uint32_t seed, int extreme)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        int v = (int)(seed >> 24) - 128; /* -128 .. 127 */
        p[i] = (int8_t)(extreme && (seed >> 8) % 4 != 0 ? (v < 0 ? -128 : 127) : v);
    }
}

/* The product of one case into y (yn values, incy apart) and its
 * expectation into want: alpha * (float)(exact sum) + beta * y. Returns
 * rt_gemv_narrow_isa's answer. */
static int run_case(int rows_form, int64_t rows, int64_t cols, int64_t ld, int64_t incx,
                    int64_t incy, float alpha, float beta, int extreme, int isa,
                    rt_gemv_split *split, float *y, float *want)
{
    int64_t xn = rows_form ? cols : rows, yn = rows_form ? rows : cols;
    int8_t *mat = calloc((size_t)(rows * ld), 1), *x = calloc((size_t)(xn * incx), 1);
    float *scratch = calloc((size_t)(2 * cols), sizeof *scratch);
    fill_i8(mat, rows * ld, (uint32_t)(rows * 31 + cols), extreme);
    fill_i8(x, xn * incx, (uint32_t)(cols * 17 + rows + 5), extreme);
    for (int64_t i = 0; i < yn; i++) {
        int64_t s = 0; /* exact */
        for (int64_t k = 0; k < xn; k++)
            s += (int64_t)mat[rows_form ? i * ld + k : k * ld + i] * x[k * incx];
        y[i * incy] = (float)(0.5 + 0.25 * (double)i);
        want[i] = alpha * (float)s + (beta != 0 ? beta * y[i * incy] : 0.0f);
    }
    rt_gemm g = {.dtype = RT_F32, .alpha = alpha, .beta = beta, .split = split};
    if (rows_form) { /* c [M x 1] = a [M x K] b [K x 1] */
        g.M = rows, g.N = 1, g.K = cols;
        g.a = mat, g.lda = ld, g.adt = RT_I8;
        g.b = x, g.ldb = incx, g.bdt = RT_I8;
        g.c = y, g.ldc = incy;
    } else { /* c [1 x N] = a [1 x K] b [K x N], a stored [K x 1] (ta) */
        g.M = 1, g.N = cols, g.K = rows;
        g.a = x, g.lda = incx, g.ta = 1, g.adt = RT_I8;
        g.b = mat, g.ldb = ld, g.bdt = RT_I8;
        g.c = y, g.ldc = incy, g.tc = 1;
    }
    CU_ASSERT(rt_gemv_narrow_scratch(&g) <= 2 * cols);
    int took = rt_gemv_narrow_isa(&g, scratch, isa);
    free(mat);
    free(x);
    free(scratch);
    return took;
}

/* Every shape, both forms, every instruction set: exactly the expectation. */
static void test_exact(void)
{
    static const int64_t rows[] = {1, 2, 3, 7, 8, 9, 10, 17, 33};
    static const int64_t cols[] = {1, 5, 15, 16, 17, 31, 33, 130};
    int best = rt_gemv_narrow_isa_best(), checked = 0;
    float y[2 * 130 * 2], want[130];
    for (int isa = RT_ISA_PORTABLE; isa <= best; isa++)
        for (int form = 0; form < 2; form++)
            for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
                for (size_t j = 0; j < sizeof cols / sizeof cols[0]; j++) {
                    int64_t r = rows[i], c = cols[j], yn = form ? r : c;
                    int strided = (i + j) % 2, extreme = (i * 3 + j) % 4 == 0;
                    float alpha = strided ? -0.75f : 1.0f, beta = j % 3 == 0 ? 0.5f : 0.0f;
                    int64_t incy = 1 + strided;
                    CU_ASSERT(run_case(form, r, c, c + 5 * strided, 1 + 2 * strided, incy, alpha,
                                       beta, extreme, isa, NULL, y, want) == 1);
                    int same = 1;
                    for (int64_t k = 0; k < yn; k++)
                        same &= y[k * incy] == want[k];
                    if (!same)
                        fprintf(stderr, "\n  isa %d %s %lld x %lld differs\n", isa,
                                form ? "rows" : "cols", (long long)r, (long long)c);
                    CU_ASSERT(same);
                    checked++;
                }
    CU_ASSERT(checked == (best + 1) * 2 * 9 * 8);
}

/* A long contraction of extreme values: sums far past 2^24 (where an f32
 * sum would round) are still exact before the one rounding. */
static void test_long_exact(void)
{
    enum { K = 20000, C = 40 };
    static float y[K], want[K];
    for (int isa = RT_ISA_PORTABLE; isa <= rt_gemv_narrow_isa_best(); isa++) {
        CU_ASSERT(run_case(0, K, C, C, 1, 1, 1.0f, 0.0f, 1, isa, NULL, y, want) == 1);
        CU_ASSERT(memcmp(y, want, C * sizeof *y) == 0);
        CU_ASSERT(run_case(1, C, K, K, 1, 1, 1.0f, 0.0f, 1, isa, NULL, y, want) == 1);
        CU_ASSERT(memcmp(y, want, C * sizeof *y) == 0);
    }
}

/* The longest contraction taken (RT_GEMV_I8I8_MAX_K - 1 terms) of
 * constant extremes, every instruction set: 127 x -128 and -128 x -128
 * give sums near -2^31 and 2^31 that are still exact, though the VNNI
 * loops' biased sums ((a + 128) x) pass 2^31 and wrap before the bias is
 * taken off. */
static void test_longest_exact(void)
{
    int64_t k = RT_GEMV_I8I8_MAX_K - 1;
    int8_t *m = malloc((size_t)k), *x = malloc((size_t)k);
    static const int av[] = {127, -128};
    for (size_t v = 0; v < 2; v++) {
        memset(m, av[v], (size_t)k);
        memset(x, -128, (size_t)k);
        float want = (float)((int64_t)av[v] * -128 * k);
        static float s[RT_GEMV_I8I8_MAX_K / 2];
        for (int isa = RT_ISA_PORTABLE; isa <= rt_gemv_narrow_isa_best(); isa++)
            for (int form = 0; form < 2; form++) { /* m: one row of k, or k rows of one */
                float y = 0;
                rt_gemm g = {.dtype = RT_F32, .M = 1, .N = 1, .K = k, .alpha = 1, .a = x,
                             .lda = k, .adt = RT_I8, .b = m, .ldb = form ? k : 1, .tb = form,
                             .bdt = RT_I8, .c = &y, .ldc = 1};
                CU_ASSERT_FATAL(rt_gemv_narrow_scratch(&g) <= (int64_t)(sizeof s / sizeof *s));
                CU_ASSERT(rt_gemv_narrow_isa(&g, s, isa) == 1);
                CU_ASSERT(y == want);
            }
    }
    free(m);
    free(x);
}

/* Batched (attention-like interleaved matrices) equals single calls. */
static void test_batched(void)
{
    enum { NB = 3, R = 37, C = 21, LD = NB * C + 2 };
    int8_t mat[R * LD], x[NB * R];
    float y1[NB * C], y2[NB * C], scratch[NB * 2 * C];
    fill_i8(mat, R * LD, 7, 0);
    fill_i8(x, NB * R, 9, 0);
    rt_gemm g = {.dtype = RT_F32, .alpha = 0.5, .M = 1, .N = C, .K = R, .a = x, .lda = 1,
                 .ta = 1, .adt = RT_I8, .b = mat, .ldb = LD, .bdt = RT_I8, .c = y2, .ldc = 1,
                 .tc = 1};
    int64_t oa[NB], ob[NB], oc[NB];
    for (int i = 0; i < NB; i++)
        oa[i] = i * R, ob[i] = i * C, oc[i] = i * C;
    for (int isa = RT_ISA_PORTABLE; isa <= rt_gemv_narrow_isa_best(); isa++) {
        CU_ASSERT(rt_gemv_narrow_batched(&g, NB, oa, ob, oc, scratch, isa) == 1);
        for (int i = 0; i < NB; i++) {
            rt_gemm h = g;
            h.a = x + oa[i], h.b = mat + ob[i], h.c = y1 + oc[i];
            CU_ASSERT(rt_gemv_narrow_isa(&h, scratch, isa) == 1);
        }
        CU_ASSERT(memcmp(y1, y2, sizeof y1) == 0);
    }
}

/* Shared with the helper thread (forced: threshold 1 byte): the same
 * exact sums, both forms, row counts about the chunks (fewer rows than
 * chunks, odd halves), every instruction set. */
static void test_split(void)
{
    static const int64_t shapes[][2] = {{1003, 517}, {37, 29}, {3, 40}, {2, 3}, {1, 18}};
    rt_gemv_split split = {.threads = 2, .cpu = -1, .min_bytes = 1};
    static float y[2 * 1003], want[1003];
    for (int isa = RT_ISA_PORTABLE; isa <= rt_gemv_narrow_isa_best(); isa++)
        for (int form = 0; form < 2; form++)
            for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
                int64_t r = shapes[k][0], c = shapes[k][1], yn = form ? r : c;
                CU_ASSERT(run_case(form, r, c, c + 1, 2, 2, -1.5f, 0.5f, k % 2, isa, &split, y,
                                   want) == 1);
                int same = 1;
                for (int64_t i = 0; i < yn; i++)
                    same &= y[i * 2] == want[i];
                CU_ASSERT(same);
            }
    CU_ASSERT(split.worker != NULL); /* the helper took part */
    rt_gemv_split_release(&split);
}

/* A contraction of 2^17 terms could overflow i32: declined (rt_gemm_run
 * then converts blocks to f32 for BLAS). */
static void test_declines_long(void)
{
    int64_t k = RT_GEMV_I8I8_MAX_K;
    int8_t *m = calloc((size_t)k, 1), *x = calloc((size_t)k, 1);
    float y = 0, s[2];
    rt_gemm g = {.dtype = RT_F32, .M = 1, .N = 1, .K = k, .alpha = 1, .a = m, .lda = k,
                 .adt = RT_I8, .b = x, .ldb = 1, .bdt = RT_I8, .c = &y, .ldc = 1};
    CU_ASSERT(rt_gemv_narrow_scratch(&g) == -1);
    CU_ASSERT(rt_gemv_narrow_isa(&g, s, rt_gemv_narrow_isa_best()) == 0);
    free(m);
    free(x);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"i8 x i8: exact sums, every shape and instruction set", test_exact},
        {"i8 x i8: sums past 2^24 still exact", test_long_exact},
        {"i8 x i8: the longest contraction, sums near 2^31 exact", test_longest_exact},
        {"i8 x i8: batched equals single calls", test_batched},
        {"i8 x i8: split with the helper, the same exact sums", test_split},
        {"i8 x i8: contractions of 2^17 terms declined", test_declines_long},
    };
    einc_add_suite("runtime i8 x i8 gemv", tests, (int)(sizeof tests / sizeof tests[0]));
}
