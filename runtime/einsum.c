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
 * A unary einsum is a reduction and/or transpose (rt_reduce_permute).
 * Arithmetic is in f32 (f64 for an f64 result); a bf16 result is computed
 * in f32 and rounded back.  An operand stored narrower (bf16 or i8, or f32
 * under f64: the desc's operand_dtype, a cast codegen folded into the
 * einsum) is read in place when GEMM can view it and converted a block at
 * a time as the GEMM goes (einsum_mixed.c); one that must be permuted,
 * the operand of a unary einsum, and a when both are narrow, are converted
 * whole into scratch first, except two bf16 operands of a GEMM (more than
 * one row and column) on a device with oneDNN's bf16 GEMM (rt_bf16.h),
 * both then read in place.
 *
 * rt_einsum_bounded (a decode step's masked attention, codegen's
 * ir_einsum_pos_bound) gives each batch index's GEMM its row's extent of
 * one label: K = pos[r] + 1 terms of the sum, or the first pos[r] + 1
 * entries of M or N (the rest of c zeroed), on the same views; with a
 * scalar position (row_label -1), pos[0] for every index.
 */
#include <string.h>

#include "rt_internal.h"

/* Label classes. */
enum { CLS_BATCH, CLS_M, CLS_N, CLS_K, CLS_NCLASS };

/* rt_einsum_bounded's bound: label `lab` stops at pos[row index] for each
 * index of batch label `row`, or at pos[0] everywhere for row -1. */
typedef struct ebound {
    const int32_t *pos;
    int32_t row, lab;
} ebound;

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
    if (d->dtype != RT_F32 && d->dtype != RT_F64 && d->dtype != RT_BF16)
        rt_fatal(dev, "einsum (op %d): result dtype %d (f32, f64 or bf16 supported)", d->op_id,
                 d->dtype);
    for (int t = 0; t < 2 && d->mixed; t++) {
        int32_t o = d->operand_dtype[t];
        /* converted exactly: i8 and bf16 to f32 or f64, f32 to f64 */
        if (o != RT_F32 && o != RT_F64 && o != RT_BF16 && o != RT_I8)
            rt_fatal(dev, "einsum (op %d): operand %d has dtype %d (f32, f64, bf16 or i8 "
                     "supported)", d->op_id, t, o);
        if (o == RT_F64 && d->dtype != RT_F64)
            rt_fatal(dev, "einsum (op %d): an f64 operand under a %s result would be rounded",
                     d->op_id, rt_dtype_name(d->dtype));
    }
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

/* The dtype operand t (0: a, 1: b) is stored in. */
static int32_t operand_dtype(const rt_einsum_desc *d, int t)
{
    return d->mixed ? d->operand_dtype[t] : d->dtype;
}

/* The arithmetic's dtype: f64 for an f64 result, else f32. */
static int32_t compute_dtype(const rt_einsum_desc *d)
{
    return d->dtype == RT_F64 ? RT_F64 : RT_F32;
}

/* A new scratch copy of the n elements of x (stored as dt) in cdt. */
static void *widen(rt_device *dev, int32_t dt, const void *x, int32_t cdt, int64_t n)
{
    void *w = rt_alloc(dev, n * (int64_t)rt_dtype_size(cdt));
    rt_convert_n(dt, x, cdt, w, n);
    return w;
}

/*
 * Operand t of d as GEMM reads it, as the matrix [g[1] x g[2]] per batch
 * index of g[0]: a strided view of its own memory when there is one
 * (make_view), else a copy permuted (and its own labels summed out) into
 * scratch *tmp of `elems` elements in the order g[0], g[1], g[2].  *dt is
 * the operand's stored dtype: a narrow operand stays narrow in a view of
 * its own memory (rt_gemm_run converts it block by block), unless
 * `whole` asks for it widened at once or it must be permuted: then it is
 * first converted whole into *wide, and *dt becomes cdt.
 */
static void gemm_operand(rt_device *dev, const rt_einsum_desc *d, int t, const void *x,
                         int32_t *dt, int32_t cdt, int whole, const int32_t *const *g,
                         const int32_t *gn, int64_t elems, gview *v, void **wide, void **tmp)
{
    if (*dt != cdt &&
        (whole || !make_view(d->labels[t], d->rank[t], d->shape[t], g[0], gn[0], g[1], gn[1],
                             g[2], gn[2], x, v))) {
        x = *wide = widen(dev, *dt, x, cdt, rt_numel(d->rank[t], d->shape[t]));
        *dt = cdt;
    }
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
    *tmp = rt_alloc(dev, elems * (int64_t)rt_dtype_size(cdt));
    rt_reduce_permute(dev, cdt, x, d->rank[t], d->shape[t], d->labels[t], *tmp, w, want, 1.0);
    make_view(want, w, shape, g[0], gn[0], g[1], gn[1], g[2], gn[2], *tmp, v);
}

/* The two-operand case, computed in cdt into c (of dtype cdt). */
static void contract(rt_device *dev, const rt_einsum_desc *d, int32_t cdt, const void *a,
                     const void *b, void *c, const ebound *eb)
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
    size_t es = rt_dtype_size(cdt);
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
    /* A bound applies to a label alone in its class (so its index is the
     * class's) and rows that are a batch label; else none. */
    int bcls = -1, brow = -1;
    for (int cl = CLS_M; eb && cl < CLS_NCLASS; cl++)
        if (n[cl] == 1 && cls[cl][0] == eb->lab)
            bcls = cl;
    for (int32_t k = 0; eb && k < nb; k++)
        if (gb[k] == eb->row || eb->row < 0)
            brow = k;

    /* A as [M x K] (or its transpose), B as [K x N], per batch index.  At
     * most one narrow operand is converted block by block: b, the weights
     * of `X * f32(Wq)`, when both are; except an i8 matrix times an i8
     * vector, which stays i8 for gemv_i8i8.c's exact integer sums. */
    const int32_t *ga[3] = {gb, gm, gk}, *gbb[3] = {gb, gk, gn};
    const int32_t na[3] = {nb, nm, nk}, nbb[3] = {nb, nk, nn};
    void *a_tmp = NULL, *b_tmp = NULL, *c_tmp = NULL, *a_wide = NULL, *b_wide = NULL;
    int32_t adt = operand_dtype(d, 0), bdt = operand_dtype(d, 1);
    gview va, vb, vc;
    int i8x = adt == RT_I8 && bdt == RT_I8 && (M == 1 || N == 1);
    /* Two bf16 operands stay bf16 for oneDNN's bf16 GEMM where the device
     * has it (rt_bf16.h); matrix-vector products keep to gemv_narrow.c. */
    int bf16x = adt == RT_BF16 && bdt == RT_BF16 && cdt == RT_F32 && M > 1 && N > 1 &&
                rt_bf16_gemm_ready(&dev->bf16);
    gemm_operand(dev, d, 0, a, &adt, cdt, bdt != cdt && !i8x && !bf16x, ga, na, B * M * K, &va,
                 &a_wide, &a_tmp);
    gemm_operand(dev, d, 1, b, &bdt, cdt, 0, gbb, nbb, B * K * N, &vb, &b_wide, &b_tmp);
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
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || va.ld > INT32_MAX ||
        vb.ld > INT32_MAX || vc.ld > INT32_MAX)
        rt_fatal(dev, "einsum (op %d): GEMM of %lld x %lld x %lld exceeds BLAS int sizes",
                 d->op_id, (long long)M, (long long)N, (long long)K);
    void *cbase = c_tmp ? c_tmp : c; /* vc's memory, writable */
    rt_gemm g0 = {.dtype = cdt, .M = M, .N = N, .K = K, .alpha = c_tmp ? 1.0 : d->alpha,
                  .beta = 0.0, .a = va.base, .lda = va.ld, .ta = va.trans, .adt = adt,
                  .b = vb.base, .ldb = vb.ld, .tb = vb.trans, .bdt = bdt, .c = cbase,
                  .ldc = vc.ld, .tc = vc.trans, .split = &dev->gemv, .bf16 = &dev->bf16};
    /* A narrow (or, batched, f32) matrix times a vector per batch index:
     * every index in one sweep (gemv_narrow.c), given their offsets into
     * a, b and c (off); else one GEMM per index. */
    int64_t mv = B > 1 ? rt_gemv_narrow_scratch(&g0) : -1;
    /* An f32 matrix too (attention over an f32 cache), unless bounded by a
     * position: its GEMMs then read only the rows up to it, and skip a
     * stale tail (docs/codegen.md, "Contractions bounded by a position") */
    if (mv < 0 && B > 1 && !(eb && brow >= 0 && bcls >= 0))
        mv = rt_gemv_narrow_batch_scratch(&g0);
    if (mv >= 0 || brow < 0 || bcls < 0)
        eb = NULL; /* the narrow sweep runs every index alike: no bound */
    int64_t bfull = eb ? sz[bcls] : 0;
    if (eb && bcls != CLS_K)
        memset(cbase, 0, (size_t)(B * M * N) * es); /* the tail left unwritten */
    int64_t scratch_elems = mv >= 0 ? B * mv : rt_gemm_scratch_elems(&g0);
    void *scratch = scratch_elems ? rt_alloc(dev, scratch_elems * (int64_t)es) : NULL;
    int64_t *off = mv >= 0 ? rt_alloc(dev, 3 * B * (int64_t)sizeof *off) : NULL;
    size_t aes = rt_dtype_size(adt), bes = rt_dtype_size(bdt);
    int64_t idx[RT_MAX_RANK] = {0};
    for (int64_t i = 0; i < B; i++) {
        int64_t oa = 0, ob = 0, oc = 0;
        for (int32_t k = 0; k < nb; k++) {
            oa += idx[k] * va.bstride[k];
            ob += idx[k] * vb.bstride[k];
            oc += idx[k] * vc.bstride[k];
        }
        if (off) {
            off[i] = oa, off[B + i] = ob, off[2 * B + i] = oc;
        } else {
            rt_gemm g = g0;
            g.a = (const char *)va.base + (size_t)oa * aes;
            g.b = (const char *)vb.base + (size_t)ob * bes;
            g.c = (char *)cbase + (size_t)oc * es;
            if (eb) {
                int32_t p = eb->pos[eb->row < 0 ? 0 : idx[brow]];
                int64_t stop = p >= 0 && p < bfull ? (int64_t)p + 1 : bfull;
                *(bcls == CLS_M ? &g.M : bcls == CLS_N ? &g.N : &g.K) = stop;
            }
            rt_gemm_run(&g, scratch);
        }
        for (int32_t k = nb - 1; k >= 0 && ++idx[k] == bsize[k]; k--)
            idx[k] = 0;
    }
    if (off)
        rt_gemv_narrow_batched(&g0, B, off, off + B, off + 2 * B, scratch,
                               rt_gemv_narrow_isa_best());
    rt_free(dev, off);
    if (c_tmp) {
        int32_t have[RT_MAX_RANK], w = 0;
        int64_t shape[RT_MAX_RANK];
        for (int i = 0; i < 3; i++)
            for (int32_t k = 0; k < bmn_n[i]; k++) {
                have[w] = bmn[i][k];
                shape[w++] = d->shape[2][find_label(d->labels[2], d->rank[2], bmn[i][k])];
            }
        rt_reduce_permute(dev, cdt, c_tmp, w, shape, have, c, d->rank[2], d->labels[2],
                          d->alpha);
    }
    rt_free(dev, scratch);
    rt_free(dev, a_tmp);
    rt_free(dev, b_tmp);
    rt_free(dev, a_wide);
    rt_free(dev, b_wide);
    rt_free(dev, c_tmp);
}

static void einsum_run(rt_device *dev, const rt_einsum_desc *d, const void *a, const void *b,
                       void *c, const ebound *eb)
{
    if (!d)
        rt_fatal(dev, "rt_einsum: NULL descriptor");
    check_desc(dev, d);
    int32_t cdt = compute_dtype(d);
    int64_t nc = rt_numel(d->rank[2], d->shape[2]);
    /* A bf16 result is computed in f32 and rounded once. */
    void *cw = d->dtype == cdt ? c : rt_alloc(dev, nc * (int64_t)rt_dtype_size(cdt));
    if (d->noperands == 1) {
        int32_t dt = operand_dtype(d, 0);
        void *wa = dt == cdt ? NULL : widen(dev, dt, a, cdt, rt_numel(d->rank[0], d->shape[0]));
        rt_reduce_permute(dev, cdt, wa ? wa : a, d->rank[0], d->shape[0], d->labels[0], cw,
                          d->rank[2], d->labels[2], d->alpha);
        rt_free(dev, wa);
    } else {
        contract(dev, d, cdt, a, b, cw, eb);
    }
    if (cw != c) {
        rt_f32_to_bf16_n(cw, c, nc);
        rt_free(dev, cw);
    }
}

void rt_einsum(rt_device *dev, const rt_einsum_desc *d, const void *a, const void *b, void *c)
{
    einsum_run(dev, d, a, b, c, NULL);
}

void rt_einsum_bounded(rt_device *dev, const rt_einsum_desc *d, const void *a, const void *b,
                       void *c, const int32_t *pos, int32_t row_label, int32_t pos_label)
{
    ebound eb = {pos, row_label, pos_label};
    einsum_run(dev, d, a, b, c, pos ? &eb : NULL);
}
