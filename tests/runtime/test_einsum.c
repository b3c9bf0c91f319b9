/*
 * test_einsum.c - rt_einsum against a naive loop einsum (every label's index
 * space enumerated, products summed in f64) for plain, transposed, batched
 * and permuted contractions, labels summed out of one operand, unary
 * reductions and transposes, alpha, empty dims, and f32/f64/bf16; operands
 * stored narrower than the arithmetic (i8, bf16, f32 under f64: folded
 * casts), converted block by block, and the scratch that takes.
 */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "rt_internal.h"
#include "rt_test_util.h"

#ifndef EINC_HAVE_DNNL
#define EINC_HAVE_DNNL 0 /* 1 where the runtime was built with oneDNN (tests/runtime/CMakeLists.txt) */
#endif

static const rt_program solo_prog = {.abi_version = RT_ABI_VERSION, .run = test_noop_run};

/* Sizes of labels 'a'..'z' used by the cases. */
static int64_t label_size(int32_t l)
{
    static const int64_t sizes[26] = {3, 4, 5, 2, 6, 3, 2, 4, 7, 5, 3, 6, 2, 3, 4, 5, 2, 3, 4, 2,
                                      3, 2, 5, 3, 2, 4};
    return sizes[l - 'a'];
}

/* Fills a descriptor from "ab,bc->ac" or "ab->ba" with label sizes from
 * `sizes` (per label 'a'..'z'; 0 or no table: label_size), overriding
 * label `zero` (if not 0) with size 0 and multiplying every size by `scale`. */
static rt_einsum_desc parse_spec(const char *spec, int32_t dtype, double alpha, char zero,
                                 int64_t scale, const int64_t *sizes)
{
    rt_einsum_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = dtype;
    d.alpha = alpha;
    const char *arrow = strstr(spec, "->");
    const char *comma = strchr(spec, ',');
    d.noperands = comma && comma < arrow ? 2 : 1;
    const char *parts[3] = {spec, d.noperands == 2 ? comma + 1 : NULL, arrow + 2};
    const char *ends[3] = {d.noperands == 2 ? comma : arrow, arrow, arrow + strlen(arrow)};
    for (int t = 0; t < 3; t++) {
        if (!parts[t])
            continue;
        for (const char *p = parts[t]; p < ends[t]; p++) {
            int64_t n = sizes && sizes[*p - 'a'] ? sizes[*p - 'a'] : label_size(*p);
            d.labels[t][d.rank[t]] = *p;
            d.shape[t][d.rank[t]++] = *p == zero ? 0 : n * scale;
        }
    }
    return d;
}

/* Naive einsum in f64: c = alpha * sum over all labels not in c of a*b. */
static void naive(const rt_einsum_desc *d, const double *a, const double *b, double *c)
{
    int32_t labels[26], n = 0;
    int64_t size[26];
    for (int t = 0; t < 3; t++) {
        if (t == 1 && d->noperands == 1)
            continue;
        for (int32_t k = 0; k < d->rank[t]; k++) {
            int seen = 0;
            for (int32_t i = 0; i < n; i++)
                seen |= labels[i] == d->labels[t][k];
            if (!seen) {
                labels[n] = d->labels[t][k];
                size[n++] = d->shape[t][k];
            }
        }
    }
    int64_t nc = rt_numel(d->rank[2], d->shape[2]);
    for (int64_t i = 0; i < nc; i++)
        c[i] = 0;
    int64_t total = rt_numel(n, size);
    int64_t idx[26] = {0};
    for (int64_t e = 0; e < total; e++) {
        int64_t off[3] = {0, 0, 0};
        for (int t = 0; t < 3; t++)
            for (int32_t k = 0; k < d->rank[t]; k++)
                for (int32_t i = 0; i < n; i++)
                    if (labels[i] == d->labels[t][k])
                        off[t] = off[t] * d->shape[t][k] + idx[i];
        c[off[2]] += a[off[0]] * (d->noperands == 2 ? b[off[1]] : 1.0);
        for (int32_t i = n - 1; i >= 0 && ++idx[i] == size[i]; i--)
            idx[i] = 0;
    }
    for (int64_t i = 0; i < nc; i++)
        c[i] *= d->alpha;
}

/* Runs `spec` through rt_einsum and the naive loop, a stored as dt[0], b
 * as dt[1] and c as dt[2] (mixed when they differ); returns the max
 * relative error, and the device's peak scratch bytes in *peak, the
 * result in *got (as doubles) and the device's bf16 GEMM route after the
 * call (rt_bf16.h) in *route, each if not NULL.  i8 operands hold
 * integers up to 100 in magnitude. */
static double run_typed(const char *spec, const int32_t dt[3], double alpha, char zero,
                        int64_t scale, const int64_t *sizes, int64_t *peak, double *got,
                        int *route)
{
    rt_einsum_desc d = parse_spec(spec, dt[2], alpha, zero, scale, sizes);
    d.mixed = dt[0] != dt[2] || dt[1] != dt[2];
    d.operand_dtype[0] = dt[0];
    d.operand_dtype[1] = dt[1];
    rt_device dev;
    rt_device_init(&dev, &solo_prog, &rt_solo_ops, NULL, 0);
    int64_t n[3];
    for (int t = 0; t < 3; t++)
        n[t] = rt_numel(d.rank[t], d.shape[t]);
    double *a = malloc((size_t)(n[0] + 1) * 8), *b = malloc((size_t)(n[1] + 1) * 8);
    double *want = malloc((size_t)(n[2] + 1) * 8);
    void *ta = malloc((size_t)(n[0] + 1) * rt_dtype_size(dt[0]));
    void *tb = malloc((size_t)(n[1] + 1) * rt_dtype_size(dt[1]));
    void *tc = malloc((size_t)(n[2] + 1) * rt_dtype_size(dt[2]));
    for (int64_t i = 0; i < n[0]; i++) {
        test_store(dt[0], ta, i, sin(0.7 * (double)i + 0.3) * (dt[0] == RT_I8 ? 100 : 1));
        a[i] = test_load(dt[0], ta, i); /* the exact operand values after rounding */
    }
    for (int64_t i = 0; i < n[1] && d.noperands == 2; i++) {
        test_store(dt[1], tb, i, (cos(1.3 * (double)i) - 0.2) * (dt[1] == RT_I8 ? 100 : 1));
        b[i] = test_load(dt[1], tb, i);
    }
    for (int64_t i = 0; i < n[2]; i++)
        test_store(dt[2], tc, i, 1234.5); /* must be overwritten */
    naive(&d, a, b, want);
    rt_einsum(&dev, &d, ta, d.noperands == 2 ? tb : NULL, tc);
    double maxdiff = 0, maxref = 0;
    for (int64_t i = 0; i < n[2]; i++) {
        maxdiff = fmax(maxdiff, fabs(test_load(dt[2], tc, i) - want[i]));
        maxref = fmax(maxref, fabs(want[i]));
    }
    CU_ASSERT_EQUAL(dev.live_bytes, 0); /* scratch is freed */
    if (peak)
        *peak = dev.peak_bytes;
    for (int64_t i = 0; got && i < n[2]; i++)
        got[i] = test_load(dt[2], tc, i);
    if (route)
        *route = dev.bf16.state;
    free(a);
    free(b);
    free(want);
    free(ta);
    free(tb);
    free(tc);
    rt_device_release(&dev);
    return n[2] == 0 ? 0 : maxdiff / fmax(maxref, 1e-30);
}

/* Runs `spec` in one dtype through rt_einsum and the naive loop; returns
 * the max relative error. */
static double run_scaled(const char *spec, int32_t dtype, double alpha, char zero, int64_t scale)
{
    const int32_t dt[3] = {dtype, dtype, dtype};
    return run_typed(spec, dt, alpha, zero, scale, NULL, NULL, NULL, NULL);
}

static double run_spec(const char *spec, int32_t dtype, double alpha, char zero)
{
    return run_scaled(spec, dtype, alpha, zero, 1);
}

static void check_specs(const char *const *specs, int n, double alpha)
{
    static const double tol[3] = {2e-6, 1e-13, 1.5e-2};
    for (int i = 0; i < n; i++)
        for (int32_t dtype = RT_F32; dtype <= RT_BF16; dtype++) {
            double err = run_spec(specs[i], dtype, alpha, 0);
            if (!(err <= tol[dtype]))
                fprintf(stderr, "\n  %s (%s): rel err %g\n", specs[i], rt_dtype_name(dtype), err);
            CU_ASSERT(err <= tol[dtype]);
        }
}

static void test_matmul_layouts(void)
{
    static const char *const specs[] = {
        "ij,jk->ik", /* no copy */
        "ij,kj->ik", /* B transposed */
        "ji,jk->ik", /* A transposed */
        "ji,kj->ik", /* both */
        "ij,jk->ki", /* C^T = B^T A^T */
        "ij,j->i",   /* matrix-vector */
        "j,jk->k",   /* vector-matrix */
        "i,k->ik",   /* outer product (K empty) */
        "ij,ij->",   /* full contraction to a scalar */
        "abc,cd->abd", /* several M dims */
        "ab,abc->c",   /* several K dims */
        "ij,->ij",     /* times a scalar */
        ",jk->kj",     /* a scalar times, transposed */
        ",->",         /* scalar product */
    };
    check_specs(specs, (int)(sizeof specs / sizeof specs[0]), 1.0);
}

static void test_batched_and_permuted(void)
{
    static const char *const specs[] = {
        "bij,bjk->bik", /* batch leading, no copy */
        "ibj,bjk->bki", /* batch in the middle, output permuted */
        "bij,bkj->bik", "bji,bjk->bki", "hbij,bhjk->bhik", "ijb,jkb->ikb",
    };
    check_specs(specs, (int)(sizeof specs / sizeof specs[0]), 1.0);
}

static void test_labels_in_one_operand(void)
{
    static const char *const specs[] = {
        "ija,jk->ik",  /* a summed out of A first */
        "ij,jkb->ik",  /* b summed out of B first */
        "aij,bjk->ik", /* both */
    };
    check_specs(specs, (int)(sizeof specs / sizeof specs[0]), 1.0);
}

static void test_unary(void)
{
    static const char *const specs[] = {"ij->ji", "ijk->k", "ij->", "ijk->kij", "ab->ab", "->"};
    check_specs(specs, (int)(sizeof specs / sizeof specs[0]), 1.0);
}

static void test_alpha(void)
{
    static const char *const specs[] = {"ij,jk->ik", "ij,jk->ki", "ijk->ki", "aij,jk->ik"};
    check_specs(specs, (int)(sizeof specs / sizeof specs[0]), -0.375);
}

static void test_empty_dims(void)
{
    /* K of size 0: the sums are empty, c must be zeros. */
    CU_ASSERT(run_spec("ij,jk->ik", RT_F32, 1.0, 'j') == 0);
    CU_ASSERT(run_spec("ijk->i", RT_F64, 1.0, 'k') == 0);
    /* M of size 0: nothing to write, no crash. */
    CU_ASSERT(run_spec("ij,jk->ik", RT_F32, 1.0, 'i') == 0);
}

/* Sizes beyond the 32x32 tiles of the transpose kernel, with partial tiles,
 * and reductions over big source arrays. */
static void test_large_permutes(void)
{
    static const char *const specs[] = {"ij->ji", "ijk->kij", "ijk->ikj", "ij->j", "ijk->j",
                                        "ai,bj->ij"};
    static const int64_t scale[] = {13, 7, 7, 13, 7, 5};
    for (int i = 0; i < 6; i++)
        for (int32_t dtype = RT_F32; dtype <= RT_F64; dtype++) {
            double err = run_scaled(specs[i], dtype, 0.5, 0, scale[i]);
            if (!(err <= 1e-6))
                fprintf(stderr, "\n  %s (%s): rel err %g\n", specs[i], rt_dtype_name(dtype), err);
            CU_ASSERT(err <= 1e-6);
        }
}

/* The no-copy paths must not allocate scratch; the permuted ones do. */
static void test_no_copy_when_layout_fits(void)
{
    rt_device dev;
    rt_device_init(&dev, &solo_prog, &rt_solo_ops, NULL, 0);
    float a[3 * 4 * 5], b[3 * 5 * 2], c[3 * 4 * 2];
    for (int i = 0; i < 60; i++)
        a[i] = (float)i;
    for (int i = 0; i < 30; i++)
        b[i] = (float)(i % 7);
    /* b=3, i=4, j=5, k=2 */
    rt_einsum_desc d = {.dtype = RT_F32, .noperands = 2, .rank = {3, 3, 3},
                        .shape = {{3, 4, 5}, {3, 5, 2}, {3, 4, 2}},
                        .labels = {{0, 1, 2}, {0, 2, 3}, {0, 1, 3}}, .alpha = 1.0};
    rt_einsum(&dev, &d, a, b, c);
    CU_ASSERT_EQUAL(dev.peak_bytes, 0);
    /* c[1][2][1] = sum_j a[1][2][j] * b[1][j][1] */
    double want = 0;
    for (int j = 0; j < 5; j++)
        want += a[20 + 10 + j] * b[10 + 2 * j + 1];
    CU_ASSERT_DOUBLE_EQUAL(c[8 + 4 + 1], want, 1e-3);
    rt_device_release(&dev);
}

/* Tolerance of a result of dtype `dt` relative to its largest element. */
static double tolerance(int32_t dt)
{
    return dt == RT_F64 ? 1e-13 : dt == RT_BF16 ? 1.5e-2 : 1e-5;
}

/* Operand dtypes a, b and the result's: casts folded into the GEMM (int8
 * and bf16 weights under f32, f32 under f64), on either side or both. */
static const int32_t mixed_dtypes[][3] = {
    {RT_F32, RT_I8, RT_F32},  {RT_I8, RT_F32, RT_F32},  {RT_BF16, RT_I8, RT_F32},
    {RT_F32, RT_BF16, RT_F32}, {RT_I8, RT_I8, RT_F32},  {RT_F32, RT_I8, RT_BF16},
    {RT_F32, RT_F32, RT_F64}, {RT_I8, RT_F64, RT_F64},
};
#define NMIXED ((int)(sizeof mixed_dtypes / sizeof mixed_dtypes[0]))

/* Narrow operands in every layout: viewed in place (converted block by
 * block), permuted (converted whole first), both narrow, unary. */
static void test_mixed_dtypes(void)
{
    static const char *const specs[] = {
        "ij,jk->ik", "ij,kj->ik", "ji,jk->ik", "ji,kj->ik", "ij,jk->ki", "ij,j->i", "j,jk->k",
        "i,k->ik", "ij,ij->", "abc,cd->abd", "ab,abc->c", "bij,bjk->bik", "ibj,bjk->bki",
        "hbij,bhjk->bhik", "ija,jk->ik", "aij,bjk->ik", "ij->ji", "ijk->k",
    };
    for (int i = 0; i < (int)(sizeof specs / sizeof specs[0]); i++)
        for (int m = 0; m < NMIXED; m++) {
            double err = run_typed(specs[i], mixed_dtypes[m], -0.375, 0, 1, NULL, NULL, NULL,
                                   NULL);
            if (!(err <= tolerance(mixed_dtypes[m][2])))
                fprintf(stderr, "\n  %s (%s, %s -> %s): rel err %g\n", specs[i],
                        rt_dtype_name(mixed_dtypes[m][0]), rt_dtype_name(mixed_dtypes[m][1]),
                        rt_dtype_name(mixed_dtypes[m][2]), err);
            CU_ASSERT(err <= tolerance(mixed_dtypes[m][2]));
        }
}

/* Narrow operands of several conversion blocks (einsum_mixed.c: 256 KiB
 * converted per block), each kind of block: K rows of b (the sum adds up
 * over blocks), N rows of b, M rows of a, K rows of a; matrix-vector and
 * matrix products, a transposed result, a batch. */
static void test_mixed_blocks(void)
{
    static const struct {
        const char *spec;
        int64_t b, k, m, n;
        int narrow; /* 0: a, 1: b */
    } cases[] = {
        {"k,kn->n", 0, 3000, 0, 100, 1},    {"k,nk->n", 0, 3000, 0, 100, 1},
        {"mk,kn->mn", 0, 1000, 8, 300, 1},  {"mk,nk->mn", 0, 300, 8, 600, 1},
        {"mk,kn->nm", 0, 1000, 8, 300, 1},  {"mk,k->m", 0, 500, 600, 0, 0},
        {"km,kn->mn", 0, 1000, 300, 8, 0},  {"bk,bkn->bn", 3, 700, 0, 100, 1},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        int64_t sizes[26] = {0};
        sizes['b' - 'a'] = cases[i].b;
        sizes['k' - 'a'] = cases[i].k;
        sizes['m' - 'a'] = cases[i].m;
        sizes['n' - 'a'] = cases[i].n;
        for (int32_t nd = RT_BF16; nd <= RT_I8; nd += RT_I8 - RT_BF16) {
            int32_t dt[3] = {RT_F32, RT_F32, RT_F32};
            dt[cases[i].narrow] = nd;
            double err = run_typed(cases[i].spec, dt, 1.0, 0, 1, sizes, NULL, NULL, NULL);
            if (!(err <= 1e-5))
                fprintf(stderr, "\n  %s (%s operand %d): rel err %g\n", cases[i].spec,
                        rt_dtype_name(nd), cases[i].narrow, err);
            CU_ASSERT(err <= 1e-5);
        }
    }
}

/* The point of folding the cast: int8 weights of 3 MB under an f32
 * matrix-vector product need one 256 KiB conversion block, not the 12 MB
 * f32 copy. */
static void test_mixed_no_wide_copy(void)
{
    int64_t sizes[26] = {0}, peak = -1;
    sizes['k' - 'a'] = 3000;
    sizes['n' - 'a'] = 1000;
    const int32_t dt[3] = {RT_F32, RT_I8, RT_F32};
    double err = run_typed("k,kn->n", dt, 1.0, 0, 1, sizes, &peak, NULL, NULL);
    CU_ASSERT(err <= 1e-5);
    CU_ASSERT(peak > 0 && peak <= (256 << 10));
}

/*
 * GEMMs of two bf16 operands on both routes (rt_bf16.h, EINC_BF16_GEMM):
 * oneDNN's bf16 GEMM and the operands widened for cblas_sgemm, every
 * layout (transposed operands, a transposed result, batches, a permuted
 * operand), odd sizes, bf16 and f32 results.  Each route against the naive
 * f64 loop on the same bf16 values (f32 sums rounded once to a bf16
 * result: 1.5e-2 relative, as check_specs), and the two routes' results
 * against each other: both sum the same products in f32, so they differ
 * by f32 rounding (f32 result) or by one bf16 step where that rounding
 * tips it (bf16 result).  Where the runtime has oneDNN, the dnnl route must
 * have been taken (READY) unless the CPU lacks AVX512-BF16 (oneDNN may
 * then refuse: the device keeps to sgemm, which must give the same).
 */
static void test_bf16_routes(void)
{
    /* the last two are matrix-vector products: gemv_narrow.c on either route */
    static const char *const specs[] = {"ij,jk->ik", "ji,jk->ik", "ij,kj->ik", "ji,kj->ik",
                                        "ij,jk->ki", "bij,bjk->bik", "ibj,bjk->bki",
                                        "bij,bjk->ibk", "bji,bkj->kbi", "aij,jk->ik",
                                        "ij,j->i", "i,ik->k"};
    const int nspecs = (int)(sizeof specs / sizeof specs[0]), nmatrix = nspecs - 2;
    /* odd sizes; then the least a GEMM has (two rows and columns, K = 1,
     * one batch), whose leading dimensions oneDNN checks as sgemm does */
    static const int64_t ijkb[2][4] = {{37, 129, 19, 3}, {2, 1, 2, 1}};
    const char *outer = getenv("EINC_BF16_GEMM"); /* the caller's choice, restored */
    char *saved = outer ? strdup(outer) : NULL;
    for (int zi = 0; zi < 2 * nspecs; zi++)
        for (int32_t cdt = RT_F32; cdt <= RT_BF16; cdt += RT_BF16 - RT_F32) {
            const int z = zi / nspecs, i = zi % nspecs;
            int64_t sizes[26] = {0};
            sizes['i' - 'a'] = ijkb[z][0], sizes['j' - 'a'] = ijkb[z][1];
            sizes['k' - 'a'] = ijkb[z][2], sizes['b' - 'a'] = ijkb[z][3];
            const int32_t dt[3] = {RT_BF16, RT_BF16, cdt};
            double got[2][37 * 19 * 3] = {{0}}; /* past the result: 0 on both */
            int route[2];
            double err[2];
            static const char *const names[2] = {"dnnl", "sgemm"};
            for (int r = 0; r < 2; r++) {
                if (r == 0 && !EINC_HAVE_DNNL)
                    setenv("EINC_BF16_GEMM", "sgemm", 1);
                else
                    setenv("EINC_BF16_GEMM", names[r], 1);
                err[r] = run_typed(specs[i], dt, -0.75, 0, 1, sizes, NULL, got[r], &route[r]);
            }
            double diff = 0, top = 0;
            for (int e = 0; e < (int)(sizeof got[0] / sizeof got[0][0]); e++) {
                diff = fmax(diff, fabs(got[0][e] - got[1][e]));
                top = fmax(top, fabs(got[1][e]));
            }
            double tol = cdt == RT_BF16 ? 1.0 / 128 : 1e-5; /* of the largest |c| */
            int dnnl_taken = route[0] == RT_BF16_DNNL_READY;
            int dnnl_due = EINC_HAVE_DNNL && rt_bf16_cpu_dot() && i < nmatrix;
            if (!(err[0] <= 1.5e-2 && err[1] <= 1.5e-2 && diff <= tol * top) ||
                dnnl_taken != dnnl_due || route[1] != RT_BF16_SGEMM)
                fprintf(stderr, "\n  %s -> %s (i %lld, j %lld): rel err dnnl %g, sgemm %g; "
                        "routes differ by %g of %g; route %d\n", specs[i], rt_dtype_name(cdt),
                        (long long)ijkb[z][0], (long long)ijkb[z][1], err[0], err[1], diff,
                        top, route[0]);
            CU_ASSERT(err[0] <= 1.5e-2 && err[1] <= 1.5e-2);
            CU_ASSERT(diff <= tol * top);
            CU_ASSERT(!dnnl_due || dnnl_taken);
            CU_ASSERT_EQUAL(route[1], RT_BF16_SGEMM);
        }
    if (saved)
        setenv("EINC_BF16_GEMM", saved, 1);
    else
        unsetenv("EINC_BF16_GEMM");
    free(saved);
}

/* Choosing the route leaves the environment alone: rt_device_init runs
 * while other threads may read it (MPI's after MPI_Init, a second
 * launch), and setenv races with getenv.  OMP_WAIT_POLICY is set by
 * rt_bf16_gemm_environ instead, which rt_main calls before any thread
 * starts; it keeps a value the user set. */
static void test_bf16_environ(void)
{
    const char *outer = getenv("EINC_BF16_GEMM"), *wait = getenv("OMP_WAIT_POLICY");
    char *saved = outer ? strdup(outer) : NULL, *saved_wait = wait ? strdup(wait) : NULL;
    unsetenv("OMP_WAIT_POLICY");
    setenv("EINC_BF16_GEMM", EINC_HAVE_DNNL ? "dnnl" : "sgemm", 1);
    rt_device dev;
    rt_device_init(&dev, &solo_prog, &rt_solo_ops, NULL, 0);
    CU_ASSERT_PTR_NULL(getenv("OMP_WAIT_POLICY"));
    rt_device_release(&dev);
    rt_bf16_gemm_environ();
    const char *set = getenv("OMP_WAIT_POLICY");
    CU_ASSERT(EINC_HAVE_DNNL ? set && strcmp(set, "passive") == 0 : !set);
    setenv("OMP_WAIT_POLICY", "active", 1);
    rt_bf16_gemm_environ();
    CU_ASSERT_STRING_EQUAL(getenv("OMP_WAIT_POLICY"), "active");
    setenv("EINC_BF16_GEMM", "blas", 1); /* rt_bf16_gemm_init reports it, not this */
    unsetenv("OMP_WAIT_POLICY");
    rt_bf16_gemm_environ();
    CU_ASSERT_PTR_NULL(getenv("OMP_WAIT_POLICY"));
    if (saved_wait)
        setenv("OMP_WAIT_POLICY", saved_wait, 1);
    if (saved)
        setenv("EINC_BF16_GEMM", saved, 1);
    else
        unsetenv("EINC_BF16_GEMM");
    free(saved);
    free(saved_wait);
}

/* A oneDNN that refuses every call (as on a CPU without AVX-512). */
static int refusing_gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb,
                         float beta, float *c, int64_t ldc)
{
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b;
    (void)ldb, (void)beta, (void)c, (void)ldc;
    return 3; /* dnnl_unimplemented */
}

static void ignore_threads(int n)
{
    (void)n;
}

/* A call oneDNN refuses after the device chose it: the GEMM is redone on
 * sgemm (with no scratch planned, as on oneDNN's route: rt_gemm_run takes
 * its own) and the device keeps to sgemm. */
static void test_bf16_refused(void)
{
    enum { M = 5, N = 300, K = 7 };
    uint16_t a[K * M], b[K * N]; /* a stored [K x M] (ta), b [K x N] */
    float c[M * N];
    for (int i = 0; i < K * M; i++)
        a[i] = rt_f32_to_bf16((float)(i % 9 - 4));
    for (int i = 0; i < K * N; i++)
        b[i] = rt_f32_to_bf16((float)(i % 5 - 2));
    rt_bf16_gemm route = {RT_BF16_DNNL_READY, refusing_gemm, ignore_threads, 1}; /* forced: warns */
    rt_gemm g = {.dtype = RT_F32, .M = M, .N = N, .K = K, .alpha = 2.0, .beta = 0.0, .a = a,
                 .lda = M, .ta = 1, .adt = RT_BF16, .b = b, .ldb = N, .tb = 0, .bdt = RT_BF16,
                 .c = c, .ldc = N, .tc = 0, .split = NULL, .bf16 = &route};
    CU_ASSERT_EQUAL(rt_gemm_scratch_elems(&g), 0);
    rt_gemm_run(&g, NULL);
    CU_ASSERT_EQUAL(route.state, RT_BF16_SGEMM);
    int bad = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float want = 0; /* small integers: exact */
            for (int k = 0; k < K; k++)
                want += rt_bf16_to_f32(a[k * M + m]) * rt_bf16_to_f32(b[k * N + n]);
            bad += c[m * N + n] != 2 * want;
        }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(rt_gemm_scratch_elems(&g) > 0); /* sgemm's blocks from now on */
}

/* Two bf16 operands on sgemm (no oneDNN route), one row times a wide
 * matrix: rt_gemm_scratch_elems must plan the scratch that rt_gemm_run
 * then uses (a widened, b's product in the narrow sweep, whose columns
 * form sums 8 runs of K apart: 8 N floats), where it planned b's
 * conversion blocks (4 rows of N here); the floats after the planned ones
 * must stay untouched. */
static void test_bf16_vector_scratch(void)
{
    enum { K = 128, N = 16384, GUARD = 8 * N };
    uint16_t *a = malloc(K * sizeof *a), *b = malloc((size_t)K * N * sizeof *b);
    float *c = malloc(N * sizeof *c);
    CU_ASSERT_FATAL(a && b && c);
    for (int k = 0; k < K; k++)
        a[k] = rt_f32_to_bf16((float)(k % 3 - 1));
    for (int64_t i = 0; i < (int64_t)K * N; i++)
        b[i] = rt_f32_to_bf16((float)(i % 7 - 3));
    rt_gemm g = {.dtype = RT_F32, .M = 1, .N = N, .K = K, .alpha = 1.0, .beta = 0.0, .a = a,
                 .lda = K, .ta = 0, .adt = RT_BF16, .b = b, .ldb = N, .tb = 0, .bdt = RT_BF16,
                 .c = c, .ldc = N, .tc = 0, .split = NULL, .bf16 = NULL};
    int64_t elems = rt_gemm_scratch_elems(&g);
    float *scratch = malloc((size_t)(elems + GUARD) * sizeof *scratch);
    CU_ASSERT_FATAL(scratch != NULL);
    for (int64_t i = elems; i < elems + GUARD; i++)
        scratch[i] = -12345.0f;
    rt_gemm_run(&g, scratch);
    int64_t touched = 0, bad = 0;
    for (int64_t i = elems; i < elems + GUARD; i++)
        touched += scratch[i] != -12345.0f;
    for (int n = 0; n < N; n += 61) { /* a sample of the columns: quick under ASan */
        float want = 0; /* small integers: exact */
        for (int k = 0; k < K; k++)
            want += (float)(k % 3 - 1) * (float)(((int64_t)k * N + n) % 7 - 3);
        bad += c[n] != want;
    }
    CU_ASSERT_EQUAL(touched, 0);
    CU_ASSERT_EQUAL(bad, 0);
    free(scratch);
    free(a);
    free(b);
    free(c);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"matmul layouts (trans flags, C^T)", test_matmul_layouts},
        {"batched and permuted", test_batched_and_permuted},
        {"labels in one operand only", test_labels_in_one_operand},
        {"unary reductions and transposes", test_unary},
        {"alpha scaling", test_alpha},
        {"empty dims", test_empty_dims},
        {"large transposes and reductions", test_large_permutes},
        {"no scratch when the layout fits GEMM", test_no_copy_when_layout_fits},
        {"mixed operand dtypes (folded casts)", test_mixed_dtypes},
        {"narrow operands over several conversion blocks", test_mixed_blocks},
        {"no wide copy of a narrow operand", test_mixed_no_wide_copy},
        {"bf16 x bf16 GEMMs: oneDNN and sgemm routes", test_bf16_routes},
        {"a bf16 GEMM oneDNN refuses is redone on sgemm", test_bf16_refused},
        {"a bf16 row times a bf16 matrix on sgemm: the scratch planned", test_bf16_vector_scratch},
        {"choosing the bf16 route leaves the environment alone", test_bf16_environ},
    };
    einc_add_suite("runtime rt_einsum", tests, (int)(sizeof tests / sizeof tests[0]));
}
