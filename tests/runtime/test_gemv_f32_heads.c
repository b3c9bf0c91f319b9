/*
 * test_gemv_f32_heads.c - batches of f32 matrix-vector products through
 * the narrow loops (runtime/gemv_narrow.c, rt_gemv_narrow_batched with an
 * f32 matrix: attention's heads over an f32 KV cache [S, K, H]) against an
 * f64 loop: both forms (a dot per row, Q . K; a sum of rows, P . V), every
 * instruction set the CPU runs, head widths about the 8-, 16- and
 * 32-element steps and their masked or scalar tails, row counts about the
 * four-row passes, heads side by side (the heads kernels) and not (the
 * per-batch blocks), x and y strided, alpha and beta; split with a helper
 * thread bit for bit as one thread; a single f32 product still declined
 * (it stays BLAS's).
 */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "rt_internal.h"

/* One batch of nb heads, each a rows x cols f32 matrix whose rows are ld
 * floats apart, head i's columns starting hstep floats after head i-1's;
 * rows form: y_i[r] = alpha sum_c A_i[r, c] x_i[c] + beta y_i[r], else
 * y_i[c] = alpha sum_r x_i[r] A_i[r, c] + beta y_i[c]; x and y two floats
 * apart.  Writes y (nb * yn * 2 floats); returns the max error relative to
 * the sum of |terms| of each element, -1 when the kernels declined it. */
static double run_heads(int form, int64_t nb, int64_t rows, int64_t cols, int64_t hstep,
                        int isa, rt_gemv_split *split, float *y)
{
    int64_t ld = (nb - 1) * hstep + cols + 1, xn = form ? cols : rows, yn = form ? rows : cols;
    int64_t inc = 2;
    float *mat = calloc((size_t)(rows * ld), sizeof *mat);
    float *x = calloc((size_t)(nb * xn * inc), sizeof *x);
    float *scratch = calloc((size_t)(nb * 8 * (cols > rows ? cols : rows)), sizeof *scratch);
    double *ref = calloc((size_t)(nb * yn), sizeof *ref), *mag = calloc((size_t)(nb * yn), 8);
    for (int64_t i = 0; i < rows * ld; i++)
        mat[i] = (float)sin(0.37 * (double)i + 0.1);
    for (int64_t i = 0; i < nb * xn * inc; i++)
        x[i] = (float)cos(1.1 * (double)i) - 0.25f;
    for (int64_t i = 0; i < nb * yn * inc; i++)
        y[i] = (float)(0.5 + 0.01 * (double)(i % 13));
    double alpha = -0.75, beta = 0.5;
    for (int64_t h = 0; h < nb; h++) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) {
                double p = (double)mat[r * ld + h * hstep + c] *
                           x[h * xn * inc + (form ? c : r) * inc];
                ref[h * yn + (form ? r : c)] += p;
                mag[h * yn + (form ? r : c)] += fabs(p);
            }
        for (int64_t i = 0; i < yn; i++) {
            double y0 = y[h * yn * inc + i * inc];
            ref[h * yn + i] = alpha * ref[h * yn + i] + beta * y0;
            mag[h * yn + i] = fabs(alpha) * mag[h * yn + i] + fabs(beta * y0) + 1e-30;
        }
    }
    rt_gemm g = {.dtype = RT_F32, .alpha = alpha, .beta = beta, .split = split};
    if (form) { /* rows: c [M x 1] = a [M x K] b [K x 1] */
        g.M = rows, g.N = 1, g.K = cols;
        g.a = mat, g.lda = ld, g.adt = RT_F32;
        g.b = x, g.ldb = inc, g.bdt = RT_F32;
        g.c = y, g.ldc = inc;
    } else { /* cols: c [1 x N] = a [1 x K] b [K x N] */
        g.M = 1, g.N = cols, g.K = rows;
        g.a = x, g.lda = inc, g.ta = 1, g.adt = RT_F32;
        g.b = mat, g.ldb = ld, g.bdt = RT_F32;
        g.c = y, g.ldc = inc, g.tc = 1;
    }
    CU_ASSERT(rt_gemv_narrow_batch_scratch(&g) <= 8 * (cols > rows ? cols : rows));
    int64_t om[16], ov[16], oc[16];
    for (int64_t i = 0; i < nb; i++)
        om[i] = i * hstep, ov[i] = i * xn * inc, oc[i] = i * yn * inc;
    double err = -1;
    if (rt_gemv_narrow_batched(&g, nb, form ? om : ov, form ? ov : om, oc, scratch, isa)) {
        err = 0;
        for (int64_t h = 0; h < nb; h++)
            for (int64_t i = 0; i < yn; i++) {
                double e = fabs(y[h * yn * inc + i * inc] - ref[h * yn + i]) / mag[h * yn + i];
                err = e > err ? e : err;
            }
    }
    free(mat);
    free(x);
    free(scratch);
    free(ref);
    free(mag);
    return err;
}

static void test_f32_heads_vs_f64(void)
{
    static const int64_t rows[] = {1, 3, 4, 5, 9, 37};
    static const int64_t cols[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 128, 130};
    int best = rt_gemv_narrow_isa_best(), checked = 0;
    float *y = calloc(4 * 2 * 130, sizeof *y);
    for (int isa = RT_ISA_PORTABLE; isa <= best; isa++)
        for (int form = 0; form < 2; form++)
            for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
                for (size_t j = 0; j < sizeof cols / sizeof cols[0]; j++) {
                    /* side by side (the heads kernels), or with a gap
                     * (the per-batch blocks) */
                    int64_t c = cols[j], hstep = c + 5 * (int64_t)((i + j) % 2);
                    double err = run_heads(form, 4, rows[i], c, hstep, isa, NULL, y);
                    if (!(err >= 0 && err < 1e-5))
                        fprintf(stderr, "\n  isa %d %s %lld x %lld: err %g\n", isa,
                                form ? "rows" : "cols", (long long)rows[i], (long long)c, err);
                    CU_ASSERT(err >= 0 && err < 1e-5);
                    checked++;
                }
    CU_ASSERT(checked == (best + 1) * 2 * 6 * 11);
    free(y);
}

/* Split with the helper (forced: threshold 1 byte) equals one thread bit
 * for bit: 8 heads of 517 x 128 (rows not a multiple of the split's 16)
 * and 3 heads of 203 x 13, both forms, every instruction set. */
static void test_f32_heads_split(void)
{
    static const int64_t shapes[][3] = {{8, 517, 128}, {3, 203, 13}};
    rt_gemv_split split = {.threads = 2, .cpu = -1, .min_bytes = 1};
    for (int isa = RT_ISA_PORTABLE; isa <= rt_gemv_narrow_isa_best(); isa++)
        for (int form = 0; form < 2; form++)
            for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
                int64_t nb = shapes[k][0], r = shapes[k][1], c = shapes[k][2];
                size_t n = (size_t)(nb * 2 * (r > c ? r : c));
                float *y1 = calloc(n, sizeof *y1), *y2 = calloc(n, sizeof *y2);
                double e1 = run_heads(form, nb, r, c, c, isa, NULL, y1);
                double e2 = run_heads(form, nb, r, c, c, isa, &split, y2);
                CU_ASSERT(e1 >= 0 && e1 < 1e-5 && e2 >= 0);
                CU_ASSERT(memcmp(y1, y2, n * sizeof *y1) == 0);
                free(y1);
                free(y2);
            }
    rt_gemv_split_release(&split);
}

/* One f32 product alone is not taken (BLAS's sgemv runs it), batched it is. */
static void test_f32_single_declined(void)
{
    float m[4] = {1, 2, 3, 4}, x[2] = {1, 1}, y[2] = {0, 0}, s[64];
    rt_gemm g = {.dtype = RT_F32, .M = 2, .N = 1, .K = 2, .alpha = 1, .a = m, .lda = 2,
                 .adt = RT_F32, .b = x, .ldb = 1, .bdt = RT_F32, .c = y, .ldc = 1};
    CU_ASSERT(rt_gemv_narrow_scratch(&g) == -1);
    CU_ASSERT(rt_gemv_narrow_isa(&g, s, rt_gemv_narrow_isa_best()) == 0);
    CU_ASSERT(rt_gemv_narrow_batch_scratch(&g) >= 0);
    g.dtype = RT_F64; /* f64 arithmetic: never */
    CU_ASSERT(rt_gemv_narrow_batch_scratch(&g) == -1);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"f32 heads batched vs f64, every instruction set", test_f32_heads_vs_f64},
        {"f32 heads split with the helper equal one thread", test_f32_heads_split},
        {"a single f32 product is declined, a batch taken", test_f32_single_declined},
    };
    einc_add_suite("runtime f32 heads gemv", tests, (int)(sizeof tests / sizeof tests[0]));
}
