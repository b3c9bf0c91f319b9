/*
 * attention_gemm.c - benchmark 6 (docs/performance.md): the attention
 * score contraction L[b,n,t,s] = sum_h Q[b,t,n,h] K[b,s,n,h] through
 * rt_einsum against the direct batched cblas call a programmer writes for
 * that layout: one ?gemm per (b, n) reading Q and K in place with leading
 * dimension N*H (NoTrans x Trans) into L[b, n] with ldc = S.  rt_einsum
 * should find the same strided GEMMs (runtime/einsum.c, make_view) and copy
 * nothing; the ratio is baseline time / rt_einsum time (target >= 0.9).
 *
 *   usage: attention_gemm [B N T S H [REPS [THREADS]]]   (defaults 1 40 2048 2048 128 3 nproc)
 *
 * Baseline and rt_einsum calls alternate, so on a shared machine both see
 * the same load; medians of each are compared, and the results must agree
 * (max relative error printed).
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "rt_internal.h"

enum { L_B, L_N, L_T, L_S, L_H };

typedef struct run_ctx {
    rt_einsum_desc desc;
    int64_t b, n, t, s, h;
    const float *q, *k;
    float *out, *ref;
    int reps;
    double median, base_median;
} run_ctx;

static void base(const run_ctx *r)
{
    for (int64_t bi = 0; bi < r->b; bi++)
        for (int64_t ni = 0; ni < r->n; ni++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)r->t, (int)r->s, (int)r->h,
                        1.0f, r->q + (bi * r->t * r->n + ni) * r->h, (int)(r->n * r->h),
                        r->k + (bi * r->s * r->n + ni) * r->h, (int)(r->n * r->h), 0.0f,
                        r->ref + (bi * r->n + ni) * r->t * r->s, (int)r->s);
}

static void device_run(rt_device *dev, void *arg)
{
    run_ctx *r = arg;
    double *t = malloc(sizeof *t * (size_t)r->reps), *tb = malloc(sizeof *tb * (size_t)r->reps);
    base(r); /* warm-up */
    rt_einsum(dev, &r->desc, r->q, r->k, r->out);
    for (int i = 0; i < r->reps; i++) {
        double t0 = bench_now();
        base(r);
        double t1 = bench_now();
        rt_einsum(dev, &r->desc, r->q, r->k, r->out);
        t[i] = bench_now() - t1;
        tb[i] = t1 - t0;
    }
    r->median = bench_median(t, r->reps);
    r->base_median = bench_median(tb, r->reps);
    free(t);
    free(tb);
}

int main(int argc, char **argv)
{
    run_ctx r = {.b = 1, .n = 40, .t = 2048, .s = 2048, .h = 128, .reps = 3};
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (argc > 5) {
        r.b = atoll(argv[1]), r.n = atoll(argv[2]), r.t = atoll(argv[3]);
        r.s = atoll(argv[4]), r.h = atoll(argv[5]);
    }
    if (argc > 6)
        r.reps = atoi(argv[6]);
    if (argc > 7)
        threads = atoi(argv[7]);
    if (r.b < 1 || r.n < 1 || r.t < 1 || r.s < 1 || r.h < 1 || r.reps < 1 || threads < 1) {
        fprintf(stderr, "usage: attention_gemm [B N T S H [REPS [THREADS]]]\n");
        return 2;
    }
    openblas_set_num_threads(threads);
    printf("# attention_gemm B=%lld N=%lld T=%lld S=%lld H=%lld reps=%d threads=%d openblas=%s\n",
           (long long)r.b, (long long)r.n, (long long)r.t, (long long)r.s, (long long)r.h,
           r.reps, threads, openblas_get_config());
    rt_einsum_desc *d = &r.desc;
    memset(d, 0, sizeof *d);
    d->dtype = RT_F32;
    d->noperands = 2;
    d->alpha = 1.0;
    d->rank[0] = d->rank[1] = d->rank[2] = 4;
    const int64_t qs[4] = {r.b, r.t, r.n, r.h}, ks[4] = {r.b, r.s, r.n, r.h},
                  ls[4] = {r.b, r.n, r.t, r.s};
    const int32_t ql[4] = {L_B, L_T, L_N, L_H}, kl[4] = {L_B, L_S, L_N, L_H},
                  ll[4] = {L_B, L_N, L_T, L_S};
    memcpy(d->shape[0], qs, sizeof qs), memcpy(d->labels[0], ql, sizeof ql);
    memcpy(d->shape[1], ks, sizeof ks), memcpy(d->labels[1], kl, sizeof kl);
    memcpy(d->shape[2], ls, sizeof ls), memcpy(d->labels[2], ll, sizeof ll);
    int64_t nq = r.b * r.t * r.n * r.h, nk = r.b * r.s * r.n * r.h, nl = r.b * r.n * r.t * r.s;
    float *q = malloc(sizeof *q * (size_t)nq), *k = malloc(sizeof *k * (size_t)nk);
    r.out = malloc(sizeof *r.out * (size_t)nl);
    r.ref = malloc(sizeof *r.ref * (size_t)nl);
    if (!q || !k || !r.out || !r.ref) {
        fprintf(stderr, "attention_gemm: out of memory\n");
        return 1;
    }
    uint64_t seed = 7;
    for (int64_t i = 0; i < nq; i++)
        q[i] = (float)bench_rand(&seed);
    for (int64_t i = 0; i < nk; i++)
        k[i] = (float)bench_rand(&seed);
    r.q = q, r.k = k;
    rt_program prog = {.abi_version = RT_ABI_VERSION, .naxes = 1, .axis_names = {'X'},
                       .axis_sizes = {1}};
    rt_threads_launch(&prog, 0, RT_BIND_NONE, device_run, &r);
    double maxerr = 0, maxref = 0;
    for (int64_t i = 0; i < nl; i++) {
        maxerr = fmax(maxerr, fabs((double)r.out[i] - (double)r.ref[i]));
        maxref = fmax(maxref, fabs((double)r.ref[i]));
    }
    double flop = 2.0 * (double)nl * (double)r.h;
    printf("RESULT bench=attention case=btnh,bsnh->bnts dtype=f32 einsum_ms=%.3f blas_ms=%.3f "
           "einsum_gflops=%.2f blas_gflops=%.2f ratio=%.3f max_rel_err=%.2e\n",
           1e3 * r.median, 1e3 * r.base_median, flop / r.median * 1e-9,
           flop / r.base_median * 1e-9, r.base_median / r.median,
           maxref > 0 ? maxerr / maxref : maxerr);
    free(q), free(k), free(r.out), free(r.ref);
    return 0;
}
