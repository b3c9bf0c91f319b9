/*
 * einsum_mixed.c - rt_einsum's GEMM calls, and the conversion of a narrow
 * operand block by block as the GEMM reads it.
 *
 * A cast folded into an einsum (ir_folded_cast_source: `f32(Wq[D, F])` of
 * i8 weights, `f32(Wb[...])` of bf16) reaches the runtime as an operand
 * stored narrower than the arithmetic (rt_einsum_desc.operand_dtype).
 * Converting it whole would write, then read again, a copy four (i8) or
 * two (bf16) times its size: the traffic the fold is there to remove.
 * Instead its stored matrix is split into blocks of consecutive rows of
 * about GEMM_BLOCK_BYTES once converted, each converted into one scratch
 * buffer that stays in the core's L2 and handed to OpenBLAS as a smaller
 * GEMM:
 *   b stored [K x N]: a block of K rows, c += op(a)[:, k0:k1] b[k0:k1, :]
 *   b stored [N x K]: a block of N rows, c[:, n0:n1] = op(a) b[n0:n1, :]^T
 *   a stored [M x K]: a block of M rows, c[m0:m1, :] = a[m0:m1, :] op(b)
 *   a stored [K x M]: a block of K rows, c += a[k0:k1, :]^T op(b)[k0:k1, :]
 * so the narrow bytes cross memory once.  A K-block adds into c with
 * beta = 1, so the sum over K is taken in block order (the result differs
 * from one unblocked call by rounding only).  A product of one row or one
 * column (a decode step's) whose matrix is the narrow operand skips all
 * this: gemv_narrow.c converts it in registers, with no BLAS call; one
 * whose narrow operand is the vector, or in f64, takes blocks to gemv.  A GEMM of more than one row and column takes
 * blocks of at least GEMM_MIN_ROWS rows, so that each call still does
 * enough work per byte of c it revisits.
 */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

/* Converted bytes of one block: a fraction of a 1 MiB L2, leaving room
 * for the other operand's tiles and OpenBLAS's own packing. */
#define GEMM_BLOCK_BYTES (256 << 10)
/* Fewest stored rows of a block in a GEMM (M > 1 and N > 1): OpenBLAS's
 * own K blocking is of this order. */
#define GEMM_MIN_ROWS 256

void rt_convert_n(int32_t src_dtype, const void *src, int32_t dst_dtype, void *dst, int64_t n)
{
    if (dst_dtype == RT_F64) {
        double *o = dst;
        if (src_dtype == RT_F64)
            memcpy(o, src, (size_t)n * sizeof *o);
        else if (src_dtype == RT_F32)
            for (int64_t i = 0; i < n; i++)
                o[i] = ((const float *)src)[i];
        else if (src_dtype == RT_I8)
            for (int64_t i = 0; i < n; i++)
                o[i] = ((const int8_t *)src)[i];
        else
            for (int64_t i = 0; i < n; i++)
                o[i] = rt_bf16_to_f32(((const uint16_t *)src)[i]);
        return;
    }
    float *o = dst;
    if (src_dtype == RT_F32)
        memcpy(o, src, (size_t)n * sizeof *o);
    else if (src_dtype == RT_I8)
        for (int64_t i = 0; i < n; i++)
            o[i] = ((const int8_t *)src)[i];
    else if (src_dtype == RT_BF16)
        for (int64_t i = 0; i < n; i++) { /* the upper half of an f32; a loop that vectorises */
            uint32_t u = (uint32_t)((const uint16_t *)src)[i] << 16;
            memcpy(&o[i], &u, sizeof u);
        }
    else
        for (int64_t i = 0; i < n; i++)
            o[i] = (float)((const double *)src)[i];
}

/* c = alpha op(a) op(b) + beta c with M = 1 or N = 1: a matrix-vector
 * product.  The matrix is b (M = 1) or a (N = 1) as stored, the vector the
 * other operand's one row or column. */
static void gemv(const rt_gemm *g)
{
    const void *mat, *vec;
    int rows, cols, ld, incx, incy;
    enum CBLAS_TRANSPOSE t;
    if (g->M == 1) { /* c[n] = sum_k a[k] opB[k, n] */
        mat = g->b, vec = g->a, ld = (int)g->ldb;
        rows = g->tb ? (int)g->N : (int)g->K;
        cols = g->tb ? (int)g->K : (int)g->N;
        t = g->tb ? CblasNoTrans : CblasTrans;
        incx = g->ta ? (int)g->lda : 1;
        incy = g->tc ? (int)g->ldc : 1;
    } else { /* N == 1: c[m] = sum_k opA[m, k] b[k] */
        mat = g->a, vec = g->b, ld = (int)g->lda;
        rows = g->ta ? (int)g->K : (int)g->M;
        cols = g->ta ? (int)g->M : (int)g->K;
        t = g->ta ? CblasTrans : CblasNoTrans;
        incx = g->tb ? 1 : (int)g->ldb;
        incy = g->tc ? 1 : (int)g->ldc;
    }
    if (g->dtype == RT_F64)
        cblas_dgemv(CblasRowMajor, t, rows, cols, g->alpha, mat, ld, vec, incx, g->beta, g->c,
                    incy);
    else
        cblas_sgemv(CblasRowMajor, t, rows, cols, (float)g->alpha, mat, ld, vec, incx,
                    (float)g->beta, g->c, incy);
}

/* g with both operands in g->dtype. */
static void gemm_wide(const rt_gemm *g)
{
    if (g->M == 1 || g->N == 1) {
        gemv(g);
        return;
    }
    int M = (int)g->M, N = (int)g->N, K = (int)g->K;
    int lda = (int)g->lda, ldb = (int)g->ldb, ldc = (int)g->ldc;
    enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = g->tb ? CblasTrans : CblasNoTrans;
    /* c stored [N x M]: compute c^T = op(b)^T op(a)^T. */
    enum CBLAS_TRANSPOSE ta_sw = g->ta ? CblasNoTrans : CblasTrans;
    enum CBLAS_TRANSPOSE tb_sw = g->tb ? CblasNoTrans : CblasTrans;
    if (g->dtype == RT_F64) {
        if (g->tc)
            cblas_dgemm(CblasRowMajor, tb_sw, ta_sw, N, M, K, g->alpha, g->b, ldb, g->a, lda,
                        g->beta, g->c, ldc);
        else
            cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, g->alpha, g->a, lda, g->b, ldb, g->beta,
                        g->c, ldc);
    } else {
        if (g->tc)
            cblas_sgemm(CblasRowMajor, tb_sw, ta_sw, N, M, K, (float)g->alpha, g->b, ldb, g->a,
                        lda, (float)g->beta, g->c, ldc);
        else
            cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, (float)g->alpha, g->a, lda, g->b, ldb,
                        (float)g->beta, g->c, ldc);
    }
}

/* The narrow operand of g (0: a, 1: b, -1: none), and its stored matrix's
 * rows and columns. */
static int narrow_operand(const rt_gemm *g, int64_t *rows, int64_t *cols)
{
    if (g->bdt != g->dtype) {
        *rows = g->tb ? g->N : g->K;
        *cols = g->tb ? g->K : g->N;
        return 1;
    }
    if (g->adt != g->dtype) {
        *rows = g->ta ? g->K : g->M;
        *cols = g->ta ? g->M : g->K;
        return 0;
    }
    return -1;
}

/* Both operands of g bf16, the result f32: oneDNN's route. */
static int both_bf16(const rt_gemm *g)
{
    return g->adt == RT_BF16 && g->bdt == RT_BF16 && g->dtype == RT_F32;
}

/* Stored rows of the narrow operand per block. */
static int64_t block_rows(const rt_gemm *g, int64_t rows, int64_t cols)
{
    int64_t es = (int64_t)rt_dtype_size(g->dtype);
    int64_t r = GEMM_BLOCK_BYTES / (cols * es > 0 ? cols * es : 1);
    if (g->M > 1 && g->N > 1 && r < GEMM_MIN_ROWS)
        r = GEMM_MIN_ROWS;
    if (r < 1)
        r = 1;
    return r < rows ? r : rows;
}

int64_t rt_gemm_scratch_elems(const rt_gemm *g)
{
    if (both_bf16(g)) {
        if (g->bf16 && g->bf16->state == RT_BF16_DNNL_READY)
            return 0; /* oneDNN reads both in place */
        /* What gemm_bf16_widened runs on the scratch: a widened, b narrow
         * (a vector product's sweep may want more than b's blocks). */
        rt_gemm s = *g;
        s.adt = RT_F32;
        s.bf16 = NULL;
        return rt_gemm_scratch_elems(&s);
    }
    int64_t rows, cols, mv = rt_gemv_narrow_scratch(g);
    if (mv >= 0)
        return mv;
    if (narrow_operand(g, &rows, &cols) < 0)
        return 0;
    return block_rows(g, rows, cols) * cols;
}

/* g of two bf16 operands on sgemm: a widened whole into f32 (as rt_einsum
 * does without oneDNN), b converted a block at a time into scratch, or
 * into a block of its own where the caller planned none (oneDNN's route,
 * on which a failed call lands here).  malloc: a rare path, one GEMM. */
static void gemm_bf16_widened(const rt_gemm *g, void *scratch)
{
    int64_t rows = g->ta ? g->K : g->M, cols = g->ta ? g->M : g->K;
    rt_gemm s = *g;
    s.bf16 = NULL;
    s.adt = RT_F32;
    int64_t blocks = scratch ? 0 : rt_gemm_scratch_elems(&s);
    float *wide = malloc((size_t)(rows * cols + blocks) * sizeof *wide);
    if (!wide)
        rt_fatal(NULL, "out of memory widening a %lld x %lld bf16 operand", (long long)rows,
                 (long long)cols);
    for (int64_t r = 0; r < rows; r++)
        rt_convert_n(RT_BF16, (const uint16_t *)g->a + r * g->lda, RT_F32, wide + r * cols, cols);
    s.a = wide, s.lda = cols;
    rt_gemm_run(&s, scratch ? scratch : wide + rows * cols);
    free(wide);
}

void rt_gemm_run(const rt_gemm *g, void *scratch)
{
    if (both_bf16(g)) {
        if (!rt_gemm_bf16_dnnl(g)) /* oneDNN's bf16 GEMM (gemm_bf16_dnnl.c) */
            gemm_bf16_widened(g, scratch);
        return;
    }
    if (rt_gemv_narrow(g, scratch))
        return; /* a narrow matrix times a vector: one pass (gemv_narrow.c) */
    int64_t rows, cols;
    int which = narrow_operand(g, &rows, &cols);
    if (which < 0) {
        gemm_wide(g);
        return;
    }
    size_t es = rt_dtype_size(g->dtype);
    int64_t step = block_rows(g, rows, cols);
    int32_t src_dt = which ? g->bdt : g->adt;
    size_t src_es = rt_dtype_size(src_dt);
    const char *src = which ? g->b : g->a;
    int64_t src_ld = which ? g->ldb : g->lda;
    /* Does a block of rows slice K (the sum: accumulate) or M / N? */
    int k_rows = which ? !g->tb : g->ta;
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
        int64_t n = rows - r0 < step ? rows - r0 : step;
        for (int64_t r = 0; r < n; r++)
            rt_convert_n(src_dt, src + (size_t)((r0 + r) * src_ld) * src_es, g->dtype,
                         (char *)scratch + (size_t)(r * cols) * es, cols);
        rt_gemm s = *g;
        if (which) {
            s.b = scratch, s.ldb = cols, s.bdt = g->dtype;
        } else {
            s.a = scratch, s.lda = cols, s.adt = g->dtype;
        }
        if (k_rows) {
            s.K = n;
            s.beta = r0 > 0 ? 1.0 : g->beta;
            /* the other operand's rows (or columns) k0..k1 */
            if (which) /* a [M x K]: columns; [K x M]: rows */
                s.a = (const char *)g->a + (size_t)(g->ta ? r0 * g->lda : r0) * es;
            else /* b [K x N]: rows; [N x K]: columns */
                s.b = (const char *)g->b + (size_t)(g->tb ? r0 : r0 * g->ldb) * es;
        } else if (which) { /* N rows of b: c's columns n0..n1 */
            s.N = n;
            s.c = (char *)g->c + (size_t)(g->tc ? r0 * g->ldc : r0) * es;
        } else { /* M rows of a: c's rows m0..m1 */
            s.M = n;
            s.c = (char *)g->c + (size_t)(g->tc ? r0 : r0 * g->ldc) * es;
        }
        gemm_wide(&s);
    }
}
