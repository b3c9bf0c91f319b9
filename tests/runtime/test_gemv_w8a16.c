/*
 * test_gemv_w8a16.c - the W8A16 sums of rows (runtime/gemv_w8a16_vnni.c:
 * an i8 matrix times an f32 vector with x rounded to i16 per pass of
 * eight rows and summed exactly in i32 by vpdpwssd) against a scalar
 * model of the same arithmetic, bit for bit: row and column tails about
 * the 32-column steps and the eight-row passes, a leading dimension wider
 * than the row, strided x; the i32 lanes at their bound (every weight
 * -128, every x at the pass's largest magnitude); passes the quantizer
 * declines (NaN, infinity, tiny x: the f32 loop) or skips (all zero);
 * the rounding of x within its documented bound; and a product through
 * rt_gemv_narrow_isa split with a helper thread against one thread.
 * Skipped (passing) on a CPU without AVX-512 VNNI.
 */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "rt_internal.h"

/* Whether the W8A16 loop can run here. */
static int have_vnni(void)
{
#if RT_GEMV_HAVE_AVX2
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && rt_gemv_cpu_vnni();
#else
    return 0;
#endif
}

/* The scalar model of rt_gemv_w8a16_cols_vnni: per pass of eight rows the
 * exact integer sum of q[r] a[r, c], rounded once to f32 and added as
 * fma(scale, sum, acc); the passes the quantizer declines and the rows
 * after the last whole pass through the f32 loop, as the kernel does. */
static void model(const int8_t *a, int64_t ld, int64_t rows, int64_t cols, const float *x,
                  int64_t incx, float *acc)
{
    int64_t r = 0;
    for (; r + 8 <= rows; r += 8) {
        int16_t q[8];
        float s;
        if (!rt_gemv_w8a16_quantize(x + r * incx, incx, 8, q, &s)) {
            rt_gemv_narrow_cols_avx512(RT_I8, (const char *)(a + r * ld), ld, 8, cols,
                                       x + r * incx, incx, acc);
            continue;
        }
        if (s == 0)
            continue;
        for (int64_t c = 0; c < cols; c++) {
            int64_t sum = 0;
            for (int i = 0; i < 8; i++)
                sum += (int64_t)q[i] * a[(r + i) * ld + c];
            CU_ASSERT(sum < ((int64_t)1 << 25) && sum > -((int64_t)1 << 25));
            acc[c] = fmaf(s, (float)(int32_t)sum, acc[c]);
        }
    }
    if (r < rows)
        rt_gemv_narrow_cols_avx512(RT_I8, (const char *)(a + r * ld), ld, rows - r, cols,
                                   x + r * incx, incx, acc);
}

/* The kernel against the model on one case; returns 1 when the bits agree. */
static int same_as_model(const int8_t *a, int64_t ld, int64_t rows, int64_t cols, const float *x,
                         int64_t incx)
{
    float *y1 = malloc((size_t)cols * sizeof *y1), *y2 = malloc((size_t)cols * sizeof *y2);
    for (int64_t c = 0; c < cols; c++)
        y1[c] = y2[c] = 0.125f * (float)(c % 7);
    rt_gemv_w8a16_cols_vnni(a, ld, rows, cols, x, incx, y1);
    model(a, ld, rows, cols, x, incx, y2);
    int same = memcmp(y1, y2, (size_t)cols * sizeof *y1) == 0;
    free(y1);
    free(y2);
    return same;
}

static void test_vs_model(void)
{
    if (!have_vnni())
        return;
    static const int64_t rows[] = {1, 7, 8, 9, 15, 16, 17, 33};
    static const int64_t cols[] = {1, 5, 31, 32, 33, 63, 64, 65, 100, 1030};
    int bad = 0, n = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        for (size_t j = 0; j < sizeof cols / sizeof cols[0]; j++) {
            int64_t r = rows[i], c = cols[j], ld = c + 3 * (int64_t)((i + j) % 2);
            int64_t incx = 1 + 2 * (int64_t)(j % 2);
            int8_t *a = malloc((size_t)(r * ld));
            float *x = malloc((size_t)(r * incx) * sizeof *x);
            for (int64_t k = 0; k < r * ld; k++)
                a[k] = (int8_t)lrint(127.5 * sin(0.37 * (double)k + 0.1) - 0.4);
            for (int64_t k = 0; k < r * incx; k++)
                x[k] = (float)(cos(1.1 * (double)k) * exp(0.3 * (double)(k % 5)));
            if (!same_as_model(a, ld, r, c, x, incx)) {
                fprintf(stderr, "\n  %lld x %lld (ld %lld, incx %lld) differs\n", (long long)r,
                        (long long)c, (long long)ld, (long long)incx);
                bad++;
            }
            n++;
            free(a);
            free(x);
        }
    CU_ASSERT(bad == 0 && n == 80);
}

/* The i32 lanes at their bound: every weight -128 (the largest |a|) and
 * every x +-max (q = +-32767), so a pass's sums reach 8 * 128 * 32767
 * in magnitude, with the signs alike (the largest) or mixed; exact, so
 * the result is the model's and the f64 value rounded twice at most. */
static void test_extremes(void)
{
    if (!have_vnni())
        return;
    enum { ROWS = 24, COLS = 97 };
    int8_t a[ROWS * COLS];
    float x[ROWS], y[COLS];
    for (int sign = 0; sign < 3; sign++) {
        for (int k = 0; k < ROWS * COLS; k++)
            a[k] = sign == 2 && k % 3 == 0 ? 127 : -128;
        for (int r = 0; r < ROWS; r++)
            x[r] = sign == 1 && r % 2 ? -3e30f : 3e30f;
        CU_ASSERT(same_as_model(a, COLS, ROWS, COLS, x, 1));
        memset(y, 0, sizeof y);
        rt_gemv_w8a16_cols_vnni(a, COLS, ROWS, COLS, x, 1, y);
        for (int c = 0; c < COLS; c++) {
            double ref = 0;
            for (int r = 0; r < ROWS; r++)
                ref += (double)a[r * COLS + c] * x[r];
            CU_ASSERT(fabs(y[c] - ref) <= 1e-6 * ROWS * 128 * 3e30);
        }
    }
    /* the sum at the bound itself, in the model: 8 * 128 * 32767 < 2^25 */
    CU_ASSERT(8 * 128 * 32767 < (1 << 25));
}

/* NaN and infinity in a pass: the f32 loop (NaN out where it would be);
 * tiny x (under 2^-100): the f32 loop; all zero: nothing added. */
static void test_declined_passes(void)
{
    int16_t q[8];
    float s, x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    CU_ASSERT(rt_gemv_w8a16_quantize(x, 1, 8, q, &s) == 1 && s == 8.0f / 32767.0f &&
              q[7] == 32767 && q[3] == 16384);
    x[2] = NAN;
    CU_ASSERT(rt_gemv_w8a16_quantize(x, 1, 8, q, &s) == 0);
    x[2] = -INFINITY;
    CU_ASSERT(rt_gemv_w8a16_quantize(x, 1, 8, q, &s) == 0);
    for (int i = 0; i < 8; i++)
        x[i] = i ? 0x1p-110f : 0;
    CU_ASSERT(rt_gemv_w8a16_quantize(x, 1, 8, q, &s) == 0);
    memset(x, 0, sizeof x);
    CU_ASSERT(rt_gemv_w8a16_quantize(x, 1, 8, q, &s) == 1 && s == 0);
    if (!have_vnni())
        return;
    enum { ROWS = 24, COLS = 40 };
    int8_t a[ROWS * COLS];
    float xs[ROWS], y[COLS];
    for (int k = 0; k < ROWS * COLS; k++)
        a[k] = (int8_t)(k % 251 - 125);
    for (int r = 0; r < ROWS; r++)
        xs[r] = r < 8 ? 0 : r < 16 ? 0.5f * (float)r : 1e-35f * (float)(r - 15);
    xs[11] = NAN;
    CU_ASSERT(same_as_model(a, COLS, ROWS, COLS, xs, 1));
    memset(y, 0, sizeof y);
    rt_gemv_w8a16_cols_vnni(a, COLS, ROWS, COLS, xs, 1, y);
    for (int c = 0; c < COLS; c++)
        CU_ASSERT(isnan(y[c]));
}

/* The rounding of x: |x - scale q| <= 1.03 2^-16 of the largest |x|
 * (half a step of max / 32767, 2^-16 (1 + 2^-15), plus the f32 roundings
 * of 32767 / max, of x times it and of the scale: under 0.01 of a step). */
static void test_rounding_bound(void)
{
    float x[8];
    int16_t q[8];
    float s;
    for (int t = 0; t < 1000; t++) {
        double m = 0;
        for (int i = 0; i < 8; i++) {
            x[i] = (float)(sin(12.9898 * (t * 8 + i)) * pow(10, (t % 13) - 6));
            m = fabs(x[i]) > m ? fabs(x[i]) : m;
        }
        CU_ASSERT_FATAL(rt_gemv_w8a16_quantize(x, 1, 8, q, &s) == 1);
        for (int i = 0; i < 8; i++)
            CU_ASSERT(fabs((double)x[i] - (double)s * q[i]) <= m * 0x1p-16 * 1.03);
    }
}

/* Through rt_gemv_narrow_isa at RT_ISA_AVX512_VNNI: the product split with
 * a helper thread (runs of rows, or columns) gives one thread's bits, and
 * is within the W8A16 bound of f64. */
static void test_split_same_bits(void)
{
    if (!have_vnni())
        return;
    static const int64_t shapes[][2] = {{1003, 1030}, {45, 1030}, {16, 2100}, {203, 1024}};
    rt_gemv_split split = {.threads = 2, .cpu = -1, .min_bytes = 1};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int64_t rows = shapes[k][0], cols = shapes[k][1];
        int8_t *a = malloc((size_t)(rows * cols));
        float *x = malloc((size_t)rows * sizeof *x), *y1 = calloc((size_t)cols, sizeof *y1);
        float *y2 = calloc((size_t)cols, sizeof *y2);
        float *scratch = malloc((size_t)(8 * cols) * sizeof *scratch);
        for (int64_t i = 0; i < rows * cols; i++)
            a[i] = (int8_t)lrint(120 * sin(0.61 * (double)i));
        for (int64_t i = 0; i < rows; i++)
            x[i] = (float)cos(0.3 * (double)i);
        rt_gemm g = {.dtype = RT_F32, .alpha = 1, .M = 1, .N = cols, .K = rows, .a = x,
                     .lda = 1, .ta = 1, .adt = RT_F32, .b = a, .ldb = cols, .bdt = RT_I8,
                     .c = y1, .ldc = 1, .tc = 1};
        CU_ASSERT_FATAL(rt_gemv_narrow_scratch(&g) <= 8 * cols);
        CU_ASSERT(rt_gemv_narrow_isa(&g, scratch, RT_ISA_AVX512_VNNI) == 1);
        g.c = y2, g.split = &split;
        CU_ASSERT(rt_gemv_narrow_isa(&g, scratch, RT_ISA_AVX512_VNNI) == 1);
        CU_ASSERT(memcmp(y1, y2, (size_t)cols * sizeof *y1) == 0);
        for (int64_t c = 0; c < cols; c++) {
            double ref = 0, bound = 0;
            for (int64_t r = 0; r < rows; r++) {
                ref += (double)a[r * cols + c] * x[r];
                bound += fabs((double)a[r * cols + c]) * 0x1p-16 * 1.03; /* max |x| <= 1 */
            }
            CU_ASSERT(fabs(y1[c] - ref) <= bound + 1e-5 * (fabs(ref) + 1));
        }
        free(a);
        free(x);
        free(y1);
        free(y2);
        free(scratch);
    }
    rt_gemv_split_release(&split);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"W8A16 sums of rows equal the scalar model, bit for bit", test_vs_model},
        {"the i32 lanes at their bound", test_extremes},
        {"NaN, infinity, tiny and zero passes", test_declined_passes},
        {"x rounded within 1.03 2^-16 of the pass's largest", test_rounding_bound},
        {"split with the helper equals one thread, bit for bit", test_split_same_bits},
    };
    einc_add_suite("runtime W8A16 gemv", tests, (int)(sizeof tests / sizeof tests[0]));
}
