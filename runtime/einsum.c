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
 * (or [batch, N, M] by computing C^T = B^T A^T).  Operands already in one of
 * those layouts are passed with no copy; others are permuted once into
 * scratch (rt_reduce_permute, which also sums out `only` labels), and a
 * result in another order is permuted from scratch into c.  Batch, M and N
 * take c's label order, K takes a's, so the common `ij,jk->ik`, `bij,bjk->bik`
 * and `ij,kj->ik` need no copy at all.
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

/* 1 if labels[0..rank) is the concatenation of the groups g[0..ng). */
static int is_concat(const int32_t *labels, int32_t rank, const int32_t *const *g,
                     const int32_t *gn, int ng)
{
    int32_t pos = 0;
    for (int i = 0; i < ng; i++)
        for (int32_t k = 0; k < gn[i]; k++, pos++)
            if (pos >= rank || labels[pos] != g[i][k])
                return 0;
    return pos == rank;
}

/*
 * Operand t of d as GEMM reads it: labels in the order g[0], g[1], g[2]
 * (NoTrans) or g[0], g[2], g[1] (Trans) are used in place; anything else
 * is permuted (and its own labels summed out) into scratch *tmp of `elems`
 * elements in the first order.
 */
static const void *gemm_operand(rt_device *dev, const rt_einsum_desc *d, int t, const void *x,
                                const int32_t *const *g, const int32_t *gn, int64_t elems,
                                int *trans, void **tmp)
{
    const int32_t *swapped[3] = {g[0], g[2], g[1]};
    const int32_t swapped_n[3] = {gn[0], gn[2], gn[1]};
    *trans = 0;
    if (is_concat(d->labels[t], d->rank[t], g, gn, 3))
        return x;
    if (is_concat(d->labels[t], d->rank[t], swapped, swapped_n, 3)) {
        *trans = 1;
        return x;
    }
    int32_t want[RT_MAX_RANK], w = 0;
    for (int i = 0; i < 3; i++)
        for (int32_t k = 0; k < gn[i]; k++)
            want[w++] = g[i][k];
    *tmp = rt_alloc(dev, elems * (int64_t)rt_dtype_size(d->dtype));
    rt_reduce_permute(dev, d->dtype, x, d->rank[t], d->shape[t], d->labels[t], *tmp, w, want,
                      1.0);
    return *tmp;
}

/* The two-operand f32/f64 case. */
static void contract(rt_device *dev, const rt_einsum_desc *d, const void *a, const void *b,
                     void *c)
{
    int32_t cls[CLS_NCLASS][RT_MAX_RANK], n[CLS_NCLASS] = {0};
    int64_t sz[CLS_NCLASS] = {1, 1, 1, 1};
    for (int32_t k = 0; k < d->rank[2]; k++) {
        int32_t l = d->labels[2][k];
        int ina = find_label(d->labels[0], d->rank[0], l) >= 0;
        int inb = find_label(d->labels[1], d->rank[1], l) >= 0;
        int cl = ina && inb ? CLS_BATCH : ina ? CLS_M : CLS_N;
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

    /* A as [B, M, K] or [B, K, M]; B as [B, K, N] or [B, N, K]. */
    const int32_t *ga[3] = {gb, gm, gk}, *gbb[3] = {gb, gk, gn};
    const int32_t na[3] = {nb, nm, nk}, nbb[3] = {nb, nk, nn};
    void *a_tmp = NULL, *b_tmp = NULL, *c_tmp = NULL;
    int trans_a, trans_b;
    a = gemm_operand(dev, d, 0, a, ga, na, B * M * K, &trans_a, &a_tmp);
    b = gemm_operand(dev, d, 1, b, gbb, nbb, B * K * N, &trans_b, &b_tmp);
    /* Result: [B, M, N] directly, [B, N, M] as C^T = B^T A^T, else scratch. */
    const int32_t *bmn[3] = {gb, gm, gn}, *bnm[3] = {gb, gn, gm};
    const int32_t bmn_n[3] = {nb, nm, nn}, bnm_n[3] = {nb, nn, nm};
    int swap = 0;
    void *cc = c;
    if (is_concat(d->labels[2], d->rank[2], bmn, bmn_n, 3)) {
        swap = 0;
    } else if (is_concat(d->labels[2], d->rank[2], bnm, bnm_n, 3)) {
        swap = 1;
    } else {
        c_tmp = rt_alloc(dev, B * M * N * (int64_t)es);
        cc = c_tmp;
    }
    double alpha = c_tmp ? 1.0 : d->alpha;
    int lda = (int)(trans_a ? M : K), ldb = (int)(trans_b ? K : N);
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE ta_sw = trans_a ? CblasNoTrans : CblasTrans;
    enum CBLAS_TRANSPOSE tb_sw = trans_b ? CblasNoTrans : CblasTrans;
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        rt_fatal(dev, "einsum (op %d): GEMM of %lld x %lld x %lld exceeds BLAS int sizes",
                 d->op_id, (long long)M, (long long)N, (long long)K);
    for (int64_t i = 0; i < B; i++) {
        if (d->dtype == RT_F64) {
            const double *pa = (const double *)a + i * M * K, *pb = (const double *)b + i * K * N;
            double *pc = (double *)cc + i * M * N;
            if (swap)
                cblas_dgemm(CblasRowMajor, tb_sw, ta_sw, (int)N, (int)M, (int)K, alpha, pb, ldb,
                            pa, lda, 0.0, pc, (int)M);
            else
                cblas_dgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, alpha, pa, lda, pb, ldb,
                            0.0, pc, (int)N);
        } else {
            const float *pa = (const float *)a + i * M * K, *pb = (const float *)b + i * K * N;
            float *pc = (float *)cc + i * M * N;
            if (swap)
                cblas_sgemm(CblasRowMajor, tb_sw, ta_sw, (int)N, (int)M, (int)K, (float)alpha, pb,
                            ldb, pa, lda, 0.0f, pc, (int)M);
            else
                cblas_sgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, (float)alpha, pa, lda,
                            pb, ldb, 0.0f, pc, (int)N);
        }
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
