/*
 * einsum_gemm.c - benchmark 1 (docs/performance.md): a local contraction
 * through the runtime's kernel `rt_einsum` on one device against a direct
 * cblas_sgemm / cblas_dgemm call with the same OpenBLAS thread count.
 *
 *   usage: einsum_gemm [N [REPS [THREADS]]]      (defaults 2048 7 nproc)
 *
 * Cases, each in f32 and f64, all M = N = K = N:
 *   plain      C[i,k] = A[i,j] B[j,k]           "ij,jk->ik": GEMM, no copy
 *   trans      C[i,k] = A[j,i] B[k,j]           "ji,kj->ik": GEMM with both
 *                                               transpose flags, no copy
 *   permute    C[i,k] = A[h,i,d] B[h,d,k]       heads h = 16, d = N/16: the
 *                                               contracted (h,d) is not
 *                                               contiguous in A, so rt_einsum
 *                                               permutes A once, then GEMMs
 * The baseline is the direct cblas ?gemm call a programmer would write for
 * the layout: NoTrans for `plain`; CblasTrans on both operands, on the same
 * arrays, for `trans`; for `permute`, which no single call can read, NoTrans
 * on A already in [i, (h,d)] order (the copy not timed), so its ratio
 * includes the cost of rt_einsum's permute.  Each result is
 * compared with the baseline's product (max relative error printed) so a
 * fast wrong answer cannot pass unnoticed.
 *
 * rt_einsum needs a device: the program builds a one-device rt_program and
 * runs the timed loop inside rt_threads_launch (rt_internal.h), which for a
 * single device leaves OpenBLAS's thread count alone.  Baseline and
 * rt_einsum calls alternate, so on a shared machine both see the same load;
 * the medians of each are compared.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "rt_internal.h"

/* Labels of the einsums. */
enum { L_I, L_J, L_K, L_H, L_D };
#define HEADS 16

/* One case to time. */
typedef struct gemm_case {
    const char *name;            /* plain, trans, permute */
    rt_einsum_desc desc;         /* what rt_einsum gets */
} gemm_case;

/* What the device thread needs and returns. */
typedef struct run_ctx {
    const gemm_case *c;          /* the case */
    const void *a, *b;           /* operands in the case's layouts */
    void *out;                   /* rt_einsum's result */
    int64_t n;                   /* matrix size */
    const void *base_a, *base_b; /* the baseline's operands (gemm_base) */
    void *c0;                    /* the baseline's result */
    int reps;                    /* timed repetitions of each */
    double median;               /* rt_einsum seconds, filled by the device thread */
    double base_median;          /* baseline seconds, filled by the device thread */
} run_ctx;

static void set_shape(rt_einsum_desc *d, int t, int rank, const int64_t *shape,
                      const int32_t *labels)
{
    d->rank[t] = rank;
    for (int k = 0; k < rank; k++) {
        d->shape[t][k] = shape[k];
        d->labels[t][k] = labels[k];
    }
}

static gemm_case make_case(const char *name, int32_t dtype, int64_t n)
{
    gemm_case c = {.name = name};
    rt_einsum_desc *d = &c.desc;
    memset(d, 0, sizeof *d);
    d->dtype = dtype;
    d->noperands = 2;
    d->alpha = 1.0;
    int64_t nn[2] = {n, n};
    set_shape(d, 2, 2, nn, (const int32_t[]){L_I, L_K});
    if (!strcmp(name, "plain")) {
        set_shape(d, 0, 2, nn, (const int32_t[]){L_I, L_J});
        set_shape(d, 1, 2, nn, (const int32_t[]){L_J, L_K});
    } else if (!strcmp(name, "trans")) {
        set_shape(d, 0, 2, nn, (const int32_t[]){L_J, L_I});
        set_shape(d, 1, 2, nn, (const int32_t[]){L_K, L_J});
    } else {
        set_shape(d, 0, 3, (const int64_t[]){HEADS, n, n / HEADS},
                  (const int32_t[]){L_H, L_I, L_D});
        set_shape(d, 1, 3, (const int64_t[]){HEADS, n / HEADS, n},
                  (const int32_t[]){L_H, L_D, L_K});
    }
    return c;
}

static void gemm_base(const gemm_case *gc, int64_t n, const void *a, const void *b, void *c);

/* Alternates baseline and rt_einsum calls, so both see the same load on a
 * shared machine; medians of each. */
static void device_run(rt_device *dev, void *arg)
{
    run_ctx *r = arg;
    double *t = malloc(sizeof *t * (size_t)r->reps), *tb = malloc(sizeof *tb * (size_t)r->reps);
    gemm_base(r->c, r->n, r->base_a, r->base_b, r->c0); /* warm-up */
    rt_einsum(dev, &r->c->desc, r->a, r->b, r->out);
    for (int i = 0; i < r->reps; i++) {
        double t0 = bench_now();
        gemm_base(r->c, r->n, r->base_a, r->base_b, r->c0);
        double t1 = bench_now();
        rt_einsum(dev, &r->c->desc, r->a, r->b, r->out);
        t[i] = bench_now() - t1;
        tb[i] = t1 - t0;
    }
    r->median = bench_median(t, r->reps);
    r->base_median = bench_median(tb, r->reps);
    free(t);
    free(tb);
}

/* Element (i, k) of a product stored [n, n] in `p` as dtype. */
static double elem(int32_t dtype, const void *p, int64_t idx)
{
    return dtype == RT_F64 ? ((const double *)p)[idx] : (double)((const float *)p)[idx];
}

static void put(int32_t dtype, void *p, int64_t idx, double v)
{
    if (dtype == RT_F64)
        ((double *)p)[idx] = v;
    else
        ((float *)p)[idx] = (float)v;
}

/* The baseline call of case gc: C = A B with both operands transposed in
 * memory for `trans` (a = A^T, b = B^T), else a = A[i,j], b = B[j,k]. */
static void gemm_base(const gemm_case *gc, int64_t n, const void *a, const void *b, void *c)
{
    enum CBLAS_TRANSPOSE t = strcmp(gc->name, "trans") ? CblasNoTrans : CblasTrans;
    if (gc->desc.dtype == RT_F64)
        cblas_dgemm(CblasRowMajor, t, t, (int)n, (int)n, (int)n, 1.0, a, (int)n, b, (int)n, 0.0,
                    c, (int)n);
    else
        cblas_sgemm(CblasRowMajor, t, t, (int)n, (int)n, (int)n, 1.0f, a, (int)n, b, (int)n,
                    0.0f, c, (int)n);
}

/*
 * Fills the canonical A[i,j], B[j,k] and the case's layouts of the same
 * values, so every case computes the same product.  For `permute`, j = h*d_sz + d.
 */
static void fill(const gemm_case *c, int64_t n, void *a0, void *b0, void *a, void *b)
{
    int32_t dt = c->desc.dtype;
    uint64_t s = 42;
    int64_t dsz = n / HEADS;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double va = bench_rand(&s), vb = bench_rand(&s);
            put(dt, a0, i * n + j, va); /* A[i, j] */
            put(dt, b0, i * n + j, vb); /* B[i, j] (row i = contracted index) */
            if (!strcmp(c->name, "plain")) {
                put(dt, a, i * n + j, va);
                put(dt, b, i * n + j, vb);
            } else if (!strcmp(c->name, "trans")) {
                put(dt, a, j * n + i, va); /* A^T[j, i] */
                put(dt, b, j * n + i, vb); /* B^T[k, j] with k = j, j = i */
            } else {
                int64_t h = j / dsz, d = j % dsz;
                put(dt, a, (h * n + i) * dsz + d, va); /* A[h, i, d] */
                put(dt, b, i * n + j, vb);             /* B[h, d, k] = B[(h,d), k] */
            }
        }
}

int main(int argc, char **argv)
{
    int64_t n = argc > 1 ? atoll(argv[1]) : 2048;
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    int threads = argc > 3 ? atoi(argv[3]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n < HEADS || n % HEADS || reps < 1 || threads < 1) {
        fprintf(stderr, "usage: einsum_gemm [N (multiple of %d) [REPS [THREADS]]]\n", HEADS);
        return 2;
    }
    openblas_set_num_threads(threads);
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    printf("# einsum_gemm N=%lld reps=%d threads=%d OPENBLAS_CORETYPE=%s openblas=%s\n",
           (long long)n, reps, threads, coretype ? coretype : "(unset)", openblas_get_config());

    rt_program prog = {.abi_version = RT_ABI_VERSION, .naxes = 1, .axis_names = {'X'},
                       .axis_sizes = {1}};
    const int32_t dtypes[2] = {RT_F32, RT_F64};
    const char *names[3] = {"plain", "trans", "permute"};
    for (int t = 0; t < 2; t++) {
        int32_t dt = dtypes[t];
        size_t bytes = (size_t)(n * n) * rt_dtype_size(dt);
        void *a0 = malloc(bytes), *b0 = malloc(bytes), *c0 = malloc(bytes);
        void *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
        if (!a0 || !b0 || !c0 || !a || !b || !c) {
            fprintf(stderr, "einsum_gemm: out of memory\n");
            return 1;
        }
        for (int k = 0; k < 3; k++) {
            gemm_case gc = make_case(names[k], dt, n);
            fill(&gc, n, a0, b0, a, b);
            int tr = !strcmp(gc.name, "trans");
            run_ctx r = {.c = &gc, .a = a, .b = b, .out = c, .n = n, .base_a = tr ? a : a0,
                         .base_b = tr ? b : b0, .c0 = c0, .reps = reps};
            rt_threads_launch(&prog, 0, RT_BIND_NONE, device_run, &r);
            double base = r.base_median;
            double maxerr = 0, maxref = 0;
            for (int64_t i = 0; i < n * n; i++) {
                double e = fabs(elem(dt, c, i) - elem(dt, c0, i));
                double v = fabs(elem(dt, c0, i));
                maxerr = e > maxerr ? e : maxerr;
                maxref = v > maxref ? v : maxref;
            }
            double flop = 2.0 * (double)n * (double)n * (double)n;
            printf("RESULT bench=einsum case=%s dtype=%s n=%lld einsum_ms=%.3f blas_ms=%.3f "
                   "einsum_gflops=%.2f blas_gflops=%.2f ratio=%.3f max_rel_err=%.2e\n",
                   gc.name, rt_dtype_name(dt), (long long)n, 1e3 * r.median, 1e3 * base,
                   flop / r.median * 1e-9, flop / base * 1e-9, base / r.median,
                   maxref > 0 ? maxerr / maxref : maxerr);
            fflush(stdout);
        }
        free(a0), free(b0), free(c0), free(a), free(b), free(c);
    }
    return 0;
}
