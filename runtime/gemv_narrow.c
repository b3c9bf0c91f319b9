/*
 * gemv_narrow.c - a matrix-vector product whose matrix is stored as i8 or
 * bf16 (a cast folded into the einsum: a decode step's weights), converted
 * in registers as it is read.
 *
 * A decode step multiplies one row of activations by every weight matrix:
 * the time is the matrix's bytes over the memory bandwidth (seed 002), so
 * the matrix must be read once, at its own width, and nothing else
 * touched.  Converting blocks into scratch for BLAS (einsum_mixed.c)
 * writes and reads each element again as f32, and makes one BLAS call per
 * block: with a single device OpenBLAS runs each call on all cores, and the
 * wake-up of its threads per small call cost more than the product itself
 * (a 1024 x 8192 i8 LM head took 60 ms instead of 2 on a loaded 2-core
 * machine).  These loops do it in one pass on the calling thread, in f32:
 *   rows form   y[r] = sum_c A[r, c] x[c]   (the matrix's rows contracted:
 *               a dot product per row, one partial sum per vector lane:
 *               `omp simd reduction`, built with -fopenmp-simd, which
 *               vectorises the loop and needs no OpenMP runtime)
 *   cols form   y[c] = sum_r x[r] A[r, c]   (four rows at a time added into
 *               y, which stays in L1 or L2: cols floats)
 * The loops are plain C that the compiler vectorises; an AVX2 clone is
 * chosen at load time where the CPU has it (target_clones).  The sums are
 * taken in another order than BLAS's: results differ by f32 rounding.
 */
#include <string.h>

#include "rt_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* Element i of a bf16 or i8 array as f32 (exact). */
static inline float load_i8(const void *p, int64_t i)
{
    return (float)((const int8_t *)p)[i];
}

static inline float load_bf16(const void *p, int64_t i)
{
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* rows form: y[r * incy] = alpha * sum_c A[r, c] x[c] + beta * y[r * incy]
 * (beta 0: y not read), x contiguous. */
#define DEFINE_ROWS(NAME, LOAD, ES)                                                              \
    VECTOR_CLONES static void NAME(const char *a, int64_t ld, int64_t rows, int64_t cols,       \
                                   const float *x, float alpha, float beta, float *y,            \
                                   int64_t incy)                                                 \
    {                                                                                            \
        for (int64_t r = 0; r < rows; r++) {                                                     \
            const char *row = a + (size_t)(r * ld) * ES;                                         \
            float t = 0;                                                                         \
            _Pragma("omp simd reduction(+ : t)")                                                 \
            for (int64_t c = 0; c < cols; c++)                                                   \
                t += LOAD(row, c) * x[c];                                                        \
            y[r * incy] = alpha * t + (beta != 0 ? beta * y[r * incy] : 0.0f);                   \
        }                                                                                        \
    }

/* cols form: acc[c] = sum_r x[r * incx] A[r, c], for c < cols. */
#define DEFINE_COLS(NAME, LOAD, ES)                                                              \
    VECTOR_CLONES static void NAME(const char *a, int64_t ld, int64_t rows, int64_t cols,       \
                                   const float *x, int64_t incx, float *acc)                     \
    {                                                                                            \
        memset(acc, 0, (size_t)cols * sizeof *acc);                                              \
        int64_t r = 0;                                                                           \
        for (; r + 4 <= rows; r += 4) {                                                          \
            const char *r0 = a + (size_t)(r * ld) * ES, *r1 = r0 + (size_t)ld * ES;              \
            const char *r2 = r1 + (size_t)ld * ES, *r3 = r2 + (size_t)ld * ES;                   \
            float x0 = x[r * incx], x1 = x[(r + 1) * incx];                                      \
            float x2 = x[(r + 2) * incx], x3 = x[(r + 3) * incx];                                \
            for (int64_t c = 0; c < cols; c++)                                                   \
                acc[c] += x0 * LOAD(r0, c) + x1 * LOAD(r1, c) + x2 * LOAD(r2, c) +              \
                          x3 * LOAD(r3, c);                                                      \
        }                                                                                        \
        for (; r < rows; r++) {                                                                  \
            const char *row = a + (size_t)(r * ld) * ES;                                         \
            float xr = x[r * incx];                                                              \
            for (int64_t c = 0; c < cols; c++)                                                   \
                acc[c] += xr * LOAD(row, c);                                                     \
        }                                                                                        \
    }

DEFINE_ROWS(rows_i8, load_i8, 1)
DEFINE_ROWS(rows_bf16, load_bf16, 2)
DEFINE_COLS(cols_i8, load_i8, 1)
DEFINE_COLS(cols_bf16, load_bf16, 2)

/* The product g as a narrow matrix times an f32 vector, or 0 when g is
 * not one: f32 arithmetic, one row or one column, the matrix operand i8
 * or bf16 and the vector f32.  Fills the layout the loops take. */
typedef struct narrow_mv {
    const char *mat;
    int32_t mdt;
    int64_t ld, rows, cols; /* the matrix as stored */
    int rows_form;          /* y over the rows (a dot per row), else over the columns */
    const float *x;
    int64_t incx, incy;
} narrow_mv;

static int narrow_mv_of(const rt_gemm *g, narrow_mv *v)
{
    if (g->dtype != RT_F32 || (g->M != 1 && g->N != 1))
        return 0;
    int m1 = g->M == 1; /* as gemv (einsum_mixed.c): the matrix is b when M = 1 */
    int32_t mdt = m1 ? g->bdt : g->adt, xdt = m1 ? g->adt : g->bdt;
    if ((mdt != RT_I8 && mdt != RT_BF16) || xdt != RT_F32)
        return 0;
    v->mat = m1 ? g->b : g->a;
    v->mdt = mdt;
    v->ld = m1 ? g->ldb : g->lda;
    v->rows = m1 ? (g->tb ? g->N : g->K) : (g->ta ? g->K : g->M);
    v->cols = m1 ? (g->tb ? g->K : g->N) : (g->ta ? g->M : g->K);
    v->rows_form = m1 ? g->tb : !g->ta;
    v->x = m1 ? g->a : g->b;
    v->incx = m1 ? (g->ta ? g->lda : 1) : (g->tb ? 1 : g->ldb);
    v->incy = m1 ? (g->tc ? g->ldc : 1) : (g->tc ? 1 : g->ldc);
    return 1;
}

int64_t rt_gemv_narrow_scratch(const rt_gemm *g)
{
    narrow_mv v;
    if (!narrow_mv_of(g, &v))
        return -1;
    return v.cols; /* rows form: x made contiguous; cols form: the sums */
}

int rt_gemv_narrow(const rt_gemm *g, void *scratch)
{
    narrow_mv v;
    if (!narrow_mv_of(g, &v))
        return 0;
    float *tmp = scratch, *y = g->c;
    float alpha = (float)g->alpha, beta = (float)g->beta;
    if (v.rows_form) {
        const float *x = v.x;
        if (v.incx != 1) {
            for (int64_t c = 0; c < v.cols; c++)
                tmp[c] = v.x[c * v.incx];
            x = tmp;
        }
        if (v.mdt == RT_I8)
            rows_i8(v.mat, v.ld, v.rows, v.cols, x, alpha, beta, y, v.incy);
        else
            rows_bf16(v.mat, v.ld, v.rows, v.cols, x, alpha, beta, y, v.incy);
        return 1;
    }
    if (v.mdt == RT_I8)
        cols_i8(v.mat, v.ld, v.rows, v.cols, v.x, v.incx, tmp);
    else
        cols_bf16(v.mat, v.ld, v.rows, v.cols, v.x, v.incx, tmp);
    for (int64_t c = 0; c < v.cols; c++)
        y[c * v.incy] = alpha * tmp[c] + (beta != 0 ? beta * y[c * v.incy] : 0.0f);
    return 1;
}
