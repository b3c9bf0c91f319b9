/*
 * einsum.c - rt_einsum: a local contraction through BLAS GEMM.
 *
 * Labels of c = alpha * einsum(a, b) fall in five classes:
 *   batch  in a, b and c          looped over (one GEMM per batch index)
 *   M      in a and c, not b      rows of the GEMM
 *   N      in b and c, not a      columns
 *   K      in a and b, not c      the contracted dims (seed 001: contracting)
 *   only   in a alone or b alone  summed out before the GEMM
 * The GEMM wants A as [batch, M, K] (or [batch, K, M] with CblasTrans), B as
 * [batch, K, N] (or [batch, N, K] transposed) and writes C as [batch, M, N]
 * (or [batch, N, M] by computing C^T = B^T A^T).  An operand is passed with
 * no copy whenever its memory is such a matrix per batch index with some
 * leading dimension: the inner group a contiguous innermost block, the
 * outer group a block anywhere, the batch labels anywhere else (so the
 * attention contractions `bnth,bnsh->bnts` and `btnh,bsnh->bnts` read Q and
 * K in place with ld = n*h, a strided batched GEMM).  Others are permuted
 * once into scratch (rt_reduce_permute, which also sums out `only` labels),
 * and a result that is no such matrix is permuted from scratch into c.
 * Batch, M and N take c's label order, K takes a's.
 *
 * A unary einsum is a reduction and/or transpose (rt_reduce_permute).  bf16
 * operands are converted to f32, contracted, and rounded back.
 */
#include <cblas.h>
#include <string.h>

#include "rt_internal.h"

/* Label classes. */
enum { CLS_BATCH, CLS_M, CLS_N, CLS_K, CLS_NCLASS };

/* Position of `label` in labels[0..rank-1], or -1. */
static int32_t find_label(const int32_t *labels, int32_t rank, int32_t label)
{
    for (int32_t k = 0; k < rank; k++)
        if (labels[k] == label)
            return k;
    return -1;
}

static void check_desc(rt_device *dev, const rt_einsum_desc *d)
{
    if (!rt_dtype_size(d->dtype))
        rt_fatal(dev, "einsum (op %d): unknown dtype %d", d->op_id, d->dtype);
    if (d->noperands != 1 && d->noperands != 2)
        rt_fatal(dev, "einsum (op %d): %d operands (1 or 2 supported)", d->op_id, d->noperands);
    const int32_t ops[2] = {0, d->noperands == 2 ? 1 : 0};
    for (int32_t t = 0; t < 3; t++) {
        if (t == 1 && d->noperands == 1)
            continue;
        if (d->rank[t] < 0 || d->rank[t] > RT_MAX_RANK)
            rt_fatal(dev, "einsum (op %d): operand %d has rank %d", d->op_id, t, d->rank[t]);
        for (int32_t k = 0; k < d->rank[t]; k++) {
            if (d->shape[t][k] < 0)
                rt_fatal(dev, "einsum (op %d): operand %d has a negative dim", d->op_id, t);
            if (find_label(d->labels[t], k, d->labels[t][k]) >= 0)
                rt_fatal(dev, "einsum (op %d): label %d repeated in operand %d (diagonals are "
                         "not supported)", d->op_id, d->labels[t][k], t);
        }
    }
    /* Every label of c comes from an operand, with the same size everywhere. */
    for (int32_t t = 0; t < 3; t++) {
        if (t == 1 && d->noperands == 1)
            continue;
        for (int32_t k = 0; k < d->rank[t]; k++) {
            int32_t l = d->labels[t][k];
            for (int32_t u = 0; u < 2; u++) {
                int32_t o = ops[u];
                int32_t p = find_label(d->labels[o], d->rank[o], l);
                if (p >= 0 && d->shape[o][p] != d->shape[t][k])
                    rt_fatal(dev, "einsum (op %d): label %d has size %lld in operand %d but "
                             "%lld in operand %d", d->op_id, l, (long long)d->shape[t][k], t,
                             (long long)d->shape[o][p], o);
            }
            if (t == 2 && find_label(d->labels[0], d->rank[0], l) < 0 &&
                (d->noperands == 1 || find_label(d->labels[1], d->rank[1], l) < 0))
                rt_fatal(dev, "einsum (op %d): output label %d is in no operand", d->op_id, l);
        }
    }
}

/* A 2D matrix view of an operand's memory for GEMM: for each batch index
 * the matrix starts at base + offset (elements) and is [rows x cols] in row
 * major with leading dimension ld, or the transpose of such a matrix. */
typedef struct gview {
    const char *base;              /* the operand's memory */
    int64_t bstride[RT_MAX_RANK];  /* element stride of each batch label (C's order) */
    int64_t ld;                    /* leading dimension, elements */
    int trans;                     /* 1: memory holds [cols x rows] */
} gview;

/* Position of each of the n labels of group `g` in `labels` if they sit in
 * consecutive positions in that order; returns the first position (the
 * rank if n == 0), or -1. */
static int32_t block_at(const int32_t *labels, int32_t rank, const int32_t *g, int32_t n)
{
    if (n == 0)
        return rank;
    int32_t p = find_label(labels, rank, g[0]);
    if (p < 0 || p + n > rank)
        return -1;
    for (int32_t k = 1; k < n; k++)
        if (labels[p + k] != g[k])
            return -1;
    return p;
}

/*
 * The view of a tensor with `labels` and `shape` (row-major) as the matrix
 * [g1 x g2] per index of the batch labels `gb`: g2 must be a block ending
 * at the innermost position (unit stride) and g1 a block anywhere (its last
 * label's stride is the leading dimension), or the same with g1 and g2
 * exchanged (trans).  Every position must be a batch, g1 or g2 label.  So
 * `btnh` is a [t x h] matrix with ld = n*h for each (b, n): attention's
 * strided batches need no copy.  Returns 1 and fills *v, or 0.
 */
static int make_view(const int32_t *labels, int32_t rank, const int64_t *shape, const int32_t *gb,
                     int32_t nb, const int32_t *g1, int32_t n1, const int32_t *g2, int32_t n2,
                     const void *base, gview *v)
{
    if (nb + n1 + n2 != rank)
        return 0;
    int64_t stride[RT_MAX_RANK + 1];
    stride[rank] = 1;
    for (int32_t k = rank - 1; k >= 0; k--)
        stride[k] = k == rank - 1 ? 1 : stride[k + 1] * shape[k + 1];
    for (int trans = 0; trans < 2; trans++) {
        const int32_t *inner = trans ? g1 : g2, *outer = trans ? g2 : g1;
        int32_t ni = trans ? n1 : n2, no = trans ? n2 : n1;
        int32_t pi = block_at(labels, rank, inner, ni), po = block_at(labels, rank, outer, no);
        if (pi < 0 || po < 0 || (ni > 0 && pi + ni != rank))
            continue;
        int64_t cols = 1;
        for (int32_t k = 0; k < ni; k++)
            cols *= shape[pi + k];
        v->base = base;
        v->trans = trans;
        v->ld = no > 0 ? stride[po + no - 1] : (cols > 0 ? cols : 1);
        if (v->ld < cols)
            continue; /* the outer block lies inside the inner one: not a matrix */
        for (int32_t k = 0; k < nb; k++) {
            int32_t p = find_label(labels, rank, gb[k]);
            if (p < 0)
                return 0;
            v->bstride[k] = stride[p];
        }
        return 1;
    }
    return 0;
}

/*
 * Operand t of d as GEMM reads it, as the matrix [g[1] x g[2]] per batch
 * index of g[0]: a strided view of its own memory when there is one
 * (make_view), else a copy permuted (and its own labels summed out) into
 * scratch *tmp of `elems` elements in the order g[0], g[1], g[2].
 */
static void gemm_operand(rt_device *dev, const rt_einsum_desc *d, int t, const void *x,
                         const int32_t *const *g, const int32_t *gn, int64_t elems, gview *v,
                         void **tmp)
{
    if (make_view(d->labels[t], d->rank[t], d->shape[t], g[0], gn[0], g[1], gn[1], g[2], gn[2],
                  x, v))
        return;
    int32_t want[RT_MAX_RANK], w = 0;
    int64_t shape[RT_MAX_RANK];
    for (int i = 0; i < 3; i++)
        for (int32_t k = 0; k < gn[i]; k++) {
            want[w] = g[i][k];
            shape[w++] = d->shape[t][find_label(d->labels[t], d->rank[t], g[i][k])];
        }
    *tmp = rt_alloc(dev, elems * (int64_t)rt_dtype_size(d->dtype));
    rt_reduce_permute(dev, d->dtype, x, d->rank[t], d->shape[t], d->labels[t], *tmp, w, want,
                      1.0);
    make_view(want, w, shape, g[0], gn[0], g[1], gn[1], g[2], gn[2], *tmp, v);
}

/* C = alpha op(A) op(B) when C is one row (M = 1) or one column (N = 1): a
 * matrix-vector product, which BLAS's gemv streams at memory bandwidth
 * (gemm's blocking for M = 1 does not; a decode step is all such products).
 * The views are as the gemm call below takes them: A is [M x K] with
 * leading dimension lda, or [K x M] if ta; B [K x N] or [N x K] if tb; C
 * [M x N], or [N x M] if tc. */
static void gemv(int32_t dtype, int64_t M, int64_t N, int64_t K, double alpha, const void *a,
                 int lda, int ta, const void *b, int ldb, int tb, void *c, int ldc, int tc)
{
    /* The matrix, its shape as stored and whether to transpose it, and
     * the vector and result strides. */
    const void *mat, *vec;
    int rows, cols, ld, incx, incy;
    enum CBLAS_TRANSPOSE t;
    if (M == 1) { /* c[n] = sum_k a[k] opB[k, n] */
        mat = b, vec = a, ld = ldb;
        rows = tb ? (int)N : (int)K;
        cols = tb ? (int)K : (int)N;
        t = tb ? CblasNoTrans : CblasTrans;
        incx = ta ? lda : 1;
        incy = tc ? ldc : 1;
    } else { /* N == 1: c[m] = sum_k opA[m, k] b[k] */
        mat = a, vec = b, ld = lda;
        rows = ta ? (int)K : (int)M;
        cols = ta ? (int)M : (int)K;
        t = ta ? CblasTrans : CblasNoTrans;
        incx = tb ? 1 : ldb;
        incy = tc ? 1 : ldc;
    }
    if (dtype == RT_F64)
        cblas_dgemv(CblasRowMajor, t, rows, cols, alpha, mat, ld, vec, incx, 0.0, c, incy);
    else
        cblas_sgemv(CblasRowMajor, t, rows, cols, (float)alpha, mat, ld, vec, incx, 0.0f, c, incy);
}

/* The two-operand f32/f64 case. */
static void contract(rt_device *dev, const rt_einsum_desc *d, const void *a, const void *b,
                     void *c)
{
    int32_t cls[CLS_NCLASS][RT_MAX_RANK], n[CLS_NCLASS] = {0};
    int64_t sz[CLS_NCLASS] = {1, 1, 1, 1}, bsize[RT_MAX_RANK];
    for (int32_t k = 0; k < d->rank[2]; k++) {
        int32_t l = d->labels[2][k];
        int ina = find_label(d->labels[0], d->rank[0], l) >= 0;
        int inb = find_label(d->labels[1], d->rank[1], l) >= 0;
        int cl = ina && inb ? CLS_BATCH : ina ? CLS_M : CLS_N;
        if (cl == CLS_BATCH)
            bsize[n[cl]] = d->shape[2][k];
        cls[cl][n[cl]++] = l;
        sz[cl] *= d->shape[2][k];
    }
    for (int32_t k = 0; k < d->rank[0]; k++) {
        int32_t l = d->labels[0][k];
        if (find_label(d->labels[1], d->rank[1], l) >= 0 &&
            find_label(d->labels[2], d->rank[2], l) < 0) {
            cls[CLS_K][n[CLS_K]++] = l;
            sz[CLS_K] *= d->shape[0][k];
        }
    }
    size_t es = rt_dtype_size(d->dtype);
    int64_t B = sz[CLS_BATCH], M = sz[CLS_M], N = sz[CLS_N], K = sz[CLS_K];
    if (B * M * N == 0)
        return;
    if (K == 0 || rt_numel(d->rank[0], d->shape[0]) == 0 ||
        rt_numel(d->rank[1], d->shape[1]) == 0) {
        memset(c, 0, (size_t)(B * M * N) * es);
        return;
    }
    const int32_t *gb = cls[CLS_BATCH], *gm = cls[CLS_M], *gn = cls[CLS_N], *gk = cls[CLS_K];
    const int32_t nb = n[CLS_BATCH], nm = n[CLS_M], nn = n[CLS_N], nk = n[CLS_K];

    /* A as [M x K] (or its transpose), B as [K x N], per batch index. */
    const int32_t *ga[3] = {gb, gm, gk}, *gbb[3] = {gb, gk, gn};
    const int32_t na[3] = {nb, nm, nk}, nbb[3] = {nb, nk, nn};
    void *a_tmp = NULL, *b_tmp = NULL, *c_tmp = NULL;
    gview va, vb, vc;
    gemm_operand(dev, d, 0, a, ga, na, B * M * K, &va, &a_tmp);
    gemm_operand(dev, d, 1, b, gbb, nbb, B * K * N, &vb, &b_tmp);
    /* C as [M x N] in place, or as C^T = B^T A^T when it is [N x M]; else
     * into scratch [B, M, N] and permuted after. */
    const int32_t *bmn[3] = {gb, gm, gn};
    const int32_t bmn_n[3] = {nb, nm, nn};
    if (!make_view(d->labels[2], d->rank[2], d->shape[2], gb, nb, gm, nm, gn, nn, c, &vc)) {
        c_tmp = rt_alloc(dev, B * M * N * (int64_t)es);
        int32_t want[RT_MAX_RANK], w = 0;
        int64_t shape[RT_MAX_RANK];
        for (int i = 0; i < 3; i++)
            for (int32_t k = 0; k < bmn_n[i]; k++) {
                want[w] = bmn[i][k];
                shape[w++] = d->shape[2][find_label(d->labels[2], d->rank[2], bmn[i][k])];
            }
        make_view(want, w, shape, gb, nb, gm, nm, gn, nn, c_tmp, &vc);
    }
    double alpha = c_tmp ? 1.0 : d->alpha;
    enum CBLAS_TRANSPOSE ta = va.trans ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = vb.trans ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE ta_sw = va.trans ? CblasNoTrans : CblasTrans;
    enum CBLAS_TRANSPOSE tb_sw = vb.trans ? CblasNoTrans : CblasTrans;
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || va.ld > INT32_MAX ||
        vb.ld > INT32_MAX || vc.ld > INT32_MAX)
        rt_fatal(dev, "einsum (op %d): GEMM of %lld x %lld x %lld exceeds BLAS int sizes",
                 d->op_id, (long long)M, (long long)N, (long long)K);
    int lda = (int)va.ld, ldb = (int)vb.ld, ldc = (int)vc.ld;
    int64_t idx[RT_MAX_RANK] = {0};
    for (int64_t i = 0; i < B; i++) {
        int64_t oa = 0, ob = 0, oc = 0;
        for (int32_t k = 0; k < nb; k++) {
            oa += idx[k] * va.bstride[k];
            ob += idx[k] * vb.bstride[k];
            oc += idx[k] * vc.bstride[k];
        }
        if (M == 1 || N == 1) {
            gemv(d->dtype, M, N, K, alpha, (const char *)va.base + (size_t)oa * es, lda, va.trans,
                 (const char *)vb.base + (size_t)ob * es, ldb, vb.trans,
                 (char *)vc.base + (size_t)oc * es, ldc, vc.trans);
        } else if (d->dtype == RT_F64) {
            const double *pa = (const double *)va.base + oa, *pb = (const double *)vb.base + ob;
            double *pc = (double *)vc.base + oc;
            if (vc.trans)
                cblas_dgemm(CblasRowMajor, tb_sw, ta_sw, (int)N, (int)M, (int)K, alpha, pb, ldb,
                            pa, lda, 0.0, pc, ldc);
            else
                cblas_dgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, alpha, pa, lda, pb, ldb,
                            0.0, pc, ldc);
        } else {
            const float *pa = (const float *)va.base + oa, *pb = (const float *)vb.base + ob;
            float *pc = (float *)vc.base + oc;
            if (vc.trans)
                cblas_sgemm(CblasRowMajor, tb_sw, ta_sw, (int)N, (int)M, (int)K, (float)alpha, pb,
                            ldb, pa, lda, 0.0f, pc, ldc);
            else
                cblas_sgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, (float)alpha, pa, lda,
                            pb, ldb, 0.0f, pc, ldc);
        }
        for (int32_t k = nb - 1; k >= 0 && ++idx[k] == bsize[k]; k--)
            idx[k] = 0;
    }
    if (c_tmp) {
        int32_t have[RT_MAX_RANK], w = 0;
        int64_t shape[RT_MAX_RANK];
        for (int i = 0; i < 3; i++)
            for (int32_t k = 0; k < bmn_n[i]; k++) {
                have[w] = bmn[i][k];
                shape[w++] = d->shape[2][find_label(d->labels[2], d->rank[2], bmn[i][k])];
            }
        rt_reduce_permute(dev, d->dtype, c_tmp, w, shape, have, c, d->rank[2], d->labels[2],
                          d->alpha);
    }
    rt_free(dev, a_tmp);
    rt_free(dev, b_tmp);
    rt_free(dev, c_tmp);
}

/* f32 or f64: the unary or binary case. */
static void einsum_native(rt_device *dev, const rt_einsum_desc *d, const void *a, const void *b,
                          void *c)
{
    if (d->noperands == 1)
        rt_reduce_permute(dev, d->dtype, a, d->rank[0], d->shape[0], d->labels[0], c, d->rank[2],
                          d->labels[2], d->alpha);
    else
        contract(dev, d, a, b, c);
}

/* Converts a bf16 operand of n elements to a new f32 scratch buffer. */
static float *widen(rt_device *dev, const void *x, int64_t n)
{
    float *f = rt_alloc(dev, n * (int64_t)sizeof(float));
    rt_bf16_to_f32_n(x, f, n);
    return f;
}

void rt_einsum(rt_device *dev, const rt_einsum_desc *d, const void *a, const void *b, void *c)
{
    if (!d)
        rt_fatal(dev, "rt_einsum: NULL descriptor");
    check_desc(dev, d);
    if (d->dtype != RT_BF16) {
        einsum_native(dev, d, a, b, c);
        return;
    }
    rt_einsum_desc f = *d;
    f.dtype = RT_F32;
    int64_t na = rt_numel(d->rank[0], d->shape[0]), nc = rt_numel(d->rank[2], d->shape[2]);
    float *fa = widen(dev, a, na);
    float *fb = d->noperands == 2 ? widen(dev, b, rt_numel(d->rank[1], d->shape[1])) : NULL;
    float *fc = rt_alloc(dev, nc * (int64_t)sizeof(float));
    einsum_native(dev, &f, fa, fb, fc);
    rt_f32_to_bf16_n(fc, c, nc);
    rt_free(dev, fa);
    rt_free(dev, fb);
    rt_free(dev, fc);
}

