/*
 * bf16_gemm.c - benchmark 15 (docs/performance.md): a bf16 matmul
 * C[i,k] = A[i,j] B[j,k] ("ij,jk->ik", A [M x K], B [K x N], all bf16, one
 * device) through the runtime's kernel `rt_einsum` against OpenBLAS's
 * cblas_sbgemm and cblas_sgemm and oneDNN's dnnl_gemm_bf16bf16f32, timed
 * alternately in the same run.
 *
 *   usage: bf16_gemm M N K [REPS [THREADS [SBGEMM_LIB]]]  (defaults 7 reps, nproc)
 *
 * The four timed calls, each producing the same product:
 *   einc     rt_einsum with dtype bf16: what a compiled program runs
 *            (oneDNN's bf16 GEMM, or A and B widened for cblas_sgemm, as
 *            EINC_BF16_GEMM and the CPU choose: docs/runtime.md; C rounded
 *            to bf16)
 *   sbgemm   cblas_sbgemm (bf16 in, f32 out) then rounding C to bf16 with
 *            the runtime's rt_f32_to_bf16_n, so it delivers what rt_einsum
 *            delivers; the rounding of M*N elements is timed with it
 *   onednn   oneDNN's dnnl_gemm_bf16bf16f32 (bf16 in, f32 out, row-major)
 *            then the same rounding as sbgemm: the same operation from a
 *            second library, which has AVX512-BF16 (vdpbf16ps) kernels
 *   sgemm    cblas_sgemm on f32 copies of A and B made before the timing
 *            (f32 out, not rounded): the f32 rate, the ceiling of a
 *            convert-then-sgemm path
 * Each result is compared with sbgemm's rounded one (max relative error,
 * relative to the largest |C|): both accumulate in f32, so they differ by
 * at most about one bf16 rounding (2^-8 relative) of an element.
 *
 * cblas.h declares cblas_sbgemm from OpenBLAS 0.3.10 on, but the library
 * defines it only when built with BUILD_BFLOAT16=1 (Debian's 0.3.21 is
 * not), so the program looks it up at run time.  With SBGEMM_LIB (a path,
 * e.g. the build of bench/openblas_bf16.sh) it comes from that library,
 * opened RTLD_LOCAL | RTLD_DEEPBIND beside the linked system OpenBLAS, which
 * keeps serving rt_einsum and sgemm.  DEEPBIND because OpenBLAS exports its
 * internals (gotoblas_init, blas_memory_alloc, exec_blas, ...): without it
 * the second library's calls to them bind to the system copy's (LD_DEBUG=
 * bindings showed its constructor calling the system's gotoblas_init).
 * The two libraries then have separate thread pools; both read
 * OPENBLAS_NUM_THREADS when loaded, and each gets openblas_set_num_threads
 * (THREADS) here, so every side runs on THREADS threads (printed).
 * Without SBGEMM_LIB, dlsym searches the program's own symbols (which
 * include the linked OpenBLAS's, or an LD_PRELOADed one's).  Without
 * cblas_sbgemm the sbgemm figures are printed as 0 with sbgemm=0 and the
 * reference for the errors is einc's own result rounded from sgemm's (the
 * product rt_einsum computes today).
 *
 * oneDNN is optional too: libdnnl.so.2 is opened with dlopen (Debian's
 * libdnnl2, oneDNN 2.6) and dnnl_gemm_bf16bf16f32 found with dlsym, so the
 * program builds and runs without it (then "absent", onednn=0).  oneDNN 2.6
 * exports that function without declaring it in dnnl.h; its prototype is
 * that of dnnl_sgemm with bfloat16_t A and B (src/cpu/gemm/gemm.hpp).  A
 * status other than dnnl_success on the warm-up call (oneDNN refuses it on
 * CPUs without AVX-512) is printed and the baseline dropped.  Debian's
 * oneDNN runs on OpenMP (libgomp): its thread count is set with
 * omp_set_num_threads(THREADS) on the device thread that makes the calls
 * (OpenMP's count is per calling thread), the same THREADS that
 * openblas_set_num_threads gives the einc and sgemm calls.  OMP_WAIT_POLICY
 * is set to passive (unless already set) before libgomp is loaded: with
 * libgomp's default spinning, its idle workers and OpenBLAS's (a separate
 * pthread pool) took each other's cores on a 2-core machine, a 64^3 oneDNN
 * call taking 10 ms instead of 0.02-0.04 ms and 8x2048x2048 4x its
 * passive time.
 *
 * rt_einsum needs a device: the timed loop runs inside rt_threads_launch
 * (rt_internal.h) on a one-device program, which for a single device leaves
 * OpenBLAS's thread count alone (as einsum_gemm.c does).
 */
#define _GNU_SOURCE /* RTLD_DEEPBIND (glibc) */
#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "rt_internal.h"

enum { L_I, L_J, L_K };

/* cblas_sbgemm's type (cblas.h): bf16 A and B, f32 alpha, beta and C. */
typedef void (*sbgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint,
                          blasint, blasint, float, const bfloat16 *, blasint, const bfloat16 *,
                          blasint, float, float *, blasint);

/* dnnl_gemm_bf16bf16f32's type (oneDNN 2.6, src/cpu/gemm/gemm.hpp):
 * row-major, 'N'/'T' flags, int64 sizes, bf16 A and B as uint16_t, f32 C;
 * returns a dnnl_status_t (0 = dnnl_success). */
typedef int (*dnnl_bf16_fn)(char, char, int64_t, int64_t, int64_t, float, const uint16_t *,
                            int64_t, const uint16_t *, int64_t, float, float *, int64_t);
typedef void (*omp_set_fn)(int);
typedef int (*omp_get_fn)(void);

/* Operands, results and timings shared with the device thread. */
typedef struct run_ctx {
    rt_einsum_desc desc;       /* the bf16 "ij,jk->ik" for rt_einsum */
    int64_t m, n, k;           /* GEMM sizes (global = per device: one device) */
    const uint16_t *a, *b;     /* bf16 A [m x k], B [k x n] */
    const float *fa, *fb;      /* f32 copies of A and B for sgemm */
    uint16_t *c_einc, *c_sb;   /* bf16 results [m x n] of rt_einsum and sbgemm */
    uint16_t *c_dn;            /* bf16 result [m x n] of oneDNN */
    float *c32;                /* sbgemm's or oneDNN's f32 product before rounding */
    float *c_s;                /* sgemm's f32 product [m x n] */
    sbgemm_fn sbgemm;          /* the linked OpenBLAS's cblas_sbgemm, or NULL */
    dnnl_bf16_fn dnnl;         /* oneDNN's dnnl_gemm_bf16bf16f32, or NULL */
    omp_set_fn omp_set;        /* omp_set_num_threads of oneDNN's OpenMP, or NULL */
    omp_get_fn omp_get;        /* omp_get_max_threads of the same, or NULL */
    int threads;               /* threads for OpenBLAS and oneDNN */
    int reps;                  /* timed repetitions of each call */
    int dnnl_status;           /* oneDNN's status on the warm-up call */
    int dnnl_threads;          /* oneDNN's OpenMP thread count on the device thread */
    double t_einc, t_sb, t_s, t_dn; /* median seconds, filled by the device thread */
} run_ctx;

/* sbgemm then rounding to bf16; without sbgemm, c_sb = sgemm's product
 * rounded (the error reference) and nothing is timed. */
static void call_sbgemm(run_ctx *r)
{
    if (!r->sbgemm) {
        rt_f32_to_bf16_n(r->c_s, r->c_sb, r->m * r->n);
        return;
    }
    r->sbgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)r->m, (int)r->n, (int)r->k, 1.0f,
                 r->a, (int)r->k, r->b, (int)r->n, 0.0f, r->c32, (int)r->n);
    rt_f32_to_bf16_n(r->c32, r->c_sb, r->m * r->n);
}

/* oneDNN's bf16 GEMM then rounding to bf16, as call_sbgemm; its status. */
static int call_dnnl(run_ctx *r)
{
    int st = r->dnnl('N', 'N', r->m, r->n, r->k, 1.0f, r->a, r->k, r->b, r->n, 0.0f, r->c32,
                     r->n);
    rt_f32_to_bf16_n(r->c32, r->c_dn, r->m * r->n);
    return st;
}

static void call_sgemm(run_ctx *r)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)r->m, (int)r->n, (int)r->k, 1.0f,
                r->fa, (int)r->k, r->fb, (int)r->n, 0.0f, r->c_s, (int)r->n);
}

/* One warm-up of each, then reps rounds of einc, sbgemm, oneDNN, sgemm in
 * turn, so all see the same load on a shared machine; medians of each. */
static void device_run(rt_device *dev, void *arg)
{
    run_ctx *r = arg;
    double *t = malloc(sizeof *t * 4 * (size_t)r->reps);
    if (!t)
        rt_fatal(dev, "bf16_gemm: out of memory");
    if (r->omp_set)
        r->omp_set(r->threads);
    r->dnnl_threads = r->omp_get ? r->omp_get() : 0;
    rt_einsum(dev, &r->desc, r->a, r->b, r->c_einc);
    call_sgemm(r);
    call_sbgemm(r);
    if (r->dnnl && (r->dnnl_status = call_dnnl(r)) != 0)
        r->dnnl = NULL;
    for (int i = 0; i < r->reps; i++) {
        double t0 = bench_now();
        rt_einsum(dev, &r->desc, r->a, r->b, r->c_einc);
        double t1 = bench_now();
        call_sbgemm(r);
        double t2 = bench_now();
        if (r->dnnl)
            call_dnnl(r);
        double t3 = bench_now();
        call_sgemm(r);
        double t4 = bench_now();
        t[i] = t1 - t0;
        t[r->reps + i] = t2 - t1;
        t[2 * r->reps + i] = t4 - t3;
        t[3 * r->reps + i] = t3 - t2;
    }
    r->t_einc = bench_median(t, r->reps);
    r->t_sb = bench_median(t + r->reps, r->reps);
    r->t_s = bench_median(t + 2 * r->reps, r->reps);
    r->t_dn = bench_median(t + 3 * r->reps, r->reps);
    free(t);
}

/* dlsym's void * as a function pointer: POSIX allows the conversion, ISO C
 * only through memcpy into the pointer at dst. */
static void *sym_to(void *dst, size_t size, void *lib, const char *name)
{
    void *sym = lib ? dlsym(lib, name) : NULL;
    memcpy(dst, &sym, size);
    return sym;
}

/* max |x - ref| / max |ref| over n elements; x is bf16 if x_bf16, else f32. */
static double rel_err(const void *x, int x_bf16, const uint16_t *ref, int64_t n)
{
    double maxerr = 0, maxref = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = rt_bf16_to_f32(ref[i]);
        double y = x_bf16 ? rt_bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
        maxerr = fmax(maxerr, fabs(y - v));
        maxref = fmax(maxref, fabs(v));
    }
    return maxref > 0 ? maxerr / maxref : maxerr;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bf16_gemm M N K [REPS [THREADS [SBGEMM_LIB]]]\n");
        return 2;
    }
    int64_t m = atoll(argv[1]), n = atoll(argv[2]), k = atoll(argv[3]);
    int reps = argc > 4 ? atoi(argv[4]) : 7;
    int threads = argc > 5 ? atoi(argv[5]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (m < 1 || n < 1 || k < 1 || m > 65536 || n > 65536 || k > 65536 || reps < 1 ||
        threads < 1) {
        fprintf(stderr, "bf16_gemm: M, N, K must be in 1..65536, REPS and THREADS >= 1\n");
        return 2;
    }
    openblas_set_num_threads(threads);
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    printf("# bf16_gemm M=%lld N=%lld K=%lld reps=%d threads=%d OPENBLAS_CORETYPE=%s "
           "openblas=%s\n", (long long)m, (long long)n, (long long)k, reps, threads,
           coretype ? coretype : "(unset)", openblas_get_config());

    run_ctx r = {.m = m, .n = n, .k = k, .reps = reps, .threads = threads};
    const char *sb_path = argc > 6 ? argv[6] : NULL;
    void *self = sb_path ? dlopen(sb_path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)
                         : dlopen(NULL, RTLD_NOW);
    if (sb_path && !self) {
        fprintf(stderr, "bf16_gemm: cannot open %s: %s\n", sb_path, dlerror());
        return 1;
    }
    void *sym = sym_to(&r.sbgemm, sizeof r.sbgemm, self, "cblas_sbgemm");
    if (sb_path && sym) {
        void (*set)(int);       /* openblas_set_num_threads */
        int (*get)(void);       /* openblas_get_num_threads */
        char *(*config)(void);  /* openblas_get_config */
        if (sym_to(&set, sizeof set, self, "openblas_set_num_threads"))
            set(threads);
        int sb_threads = sym_to(&get, sizeof get, self, "openblas_get_num_threads") ? get() : 0;
        printf("# cblas_sbgemm: found in %s (%s), threads %d; the linked OpenBLAS's threads %d\n",
               sb_path, sym_to(&config, sizeof config, self, "openblas_get_config") ? config()
                                                                                 : "?",
               sb_threads, openblas_get_num_threads());
    } else
        printf("# cblas_sbgemm: %s\n",
               sym ? "found" : sb_path ? "absent from SBGEMM_LIB"
                                       : "absent (the linked OpenBLAS was built without "
                                         "BUILD_BFLOAT16)");
    setenv("OMP_WAIT_POLICY", "passive", 0);
    void *dnnl = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    sym_to(&r.dnnl, sizeof r.dnnl, dnnl, "dnnl_gemm_bf16bf16f32");
    sym_to(&r.omp_set, sizeof r.omp_set, dnnl, "omp_set_num_threads");
    sym_to(&r.omp_get, sizeof r.omp_get, dnnl, "omp_get_max_threads");
    int isa = 0;
    omp_get_fn get_isa;
    if (sym_to(&get_isa, sizeof get_isa, dnnl, "dnnl_get_effective_cpu_isa"))
        isa = get_isa();
    uint16_t *a = malloc(sizeof *a * (size_t)(m * k)), *b = malloc(sizeof *b * (size_t)(k * n));
    float *fa = malloc(sizeof *fa * (size_t)(m * k)), *fb = malloc(sizeof *fb * (size_t)(k * n));
    r.c_einc = malloc(sizeof *r.c_einc * (size_t)(m * n));
    r.c_sb = malloc(sizeof *r.c_sb * (size_t)(m * n));
    r.c_dn = malloc(sizeof *r.c_dn * (size_t)(m * n));
    r.c32 = malloc(sizeof *r.c32 * (size_t)(m * n));
    r.c_s = malloc(sizeof *r.c_s * (size_t)(m * n));
    if (!a || !b || !fa || !fb || !r.c_einc || !r.c_sb || !r.c_dn || !r.c32 || !r.c_s) {
        fprintf(stderr, "bf16_gemm: out of memory\n");
        return 1;
    }
    uint64_t s = 42;
    for (int64_t i = 0; i < m * k; i++)
        fa[i] = rt_bf16_to_f32(a[i] = rt_f32_to_bf16((float)bench_rand(&s)));
    for (int64_t i = 0; i < k * n; i++)
        fb[i] = rt_bf16_to_f32(b[i] = rt_f32_to_bf16((float)bench_rand(&s)));
    r.a = a, r.b = b, r.fa = fa, r.fb = fb;

    rt_einsum_desc *d = &r.desc;
    d->dtype = RT_BF16;
    d->noperands = 2;
    d->alpha = 1.0;
    d->rank[0] = d->rank[1] = d->rank[2] = 2;
    const int64_t shapes[3][2] = {{m, k}, {k, n}, {m, n}};
    const int32_t labels[3][2] = {{L_I, L_J}, {L_J, L_K}, {L_I, L_K}};
    for (int t = 0; t < 3; t++)
        for (int x = 0; x < 2; x++) {
            d->shape[t][x] = shapes[t][x];
            d->labels[t][x] = labels[t][x];
        }

    rt_program prog = {.abi_version = RT_ABI_VERSION, .naxes = 1, .axis_names = {'X'},
                       .axis_sizes = {1}};
    rt_threads_launch(&prog, 0, RT_BIND_NONE, device_run, &r);
    /* 0xe7 is dnnl_cpu_isa_avx512_core_bf16 (dnnl_types.h): vdpbf16ps. */
    if (!dnnl)
        printf("# oneDNN dnnl_gemm_bf16bf16f32: absent (libdnnl.so.2 not found)\n");
    else if (r.dnnl_status)
        printf("# oneDNN dnnl_gemm_bf16bf16f32: refused (dnnl_status_t %d)\n", r.dnnl_status);
    else if (!r.dnnl)
        printf("# oneDNN dnnl_gemm_bf16bf16f32: absent from libdnnl.so.2\n");
    else
        printf("# oneDNN dnnl_gemm_bf16bf16f32: found, effective ISA 0x%x%s, OpenMP threads %d, "
               "OMP_WAIT_POLICY=%s\n", isa, isa == 0xe7 ? " (avx512_core_bf16)" : "",
               r.dnnl_threads, getenv("OMP_WAIT_POLICY"));

    double flop = 2.0 * (double)m * (double)n * (double)k;
    int dn = r.dnnl != NULL;
    printf("RESULT bench=bf16_gemm sbgemm=%d onednn=%d m=%lld n=%lld k=%lld einc_ms=%.3f "
           "sbgemm_ms=%.3f onednn_ms=%.3f sgemm_ms=%.3f einc_gflops=%.2f sbgemm_gflops=%.2f "
           "onednn_gflops=%.2f sgemm_gflops=%.2f ratio_sbgemm=%.3f ratio_onednn=%.3f "
           "ratio_sgemm=%.3f err_einc=%.2e err_onednn=%.2e err_sgemm=%.2e\n",
           sym != NULL, dn, (long long)m, (long long)n, (long long)k, 1e3 * r.t_einc,
           1e3 * r.t_sb, dn ? 1e3 * r.t_dn : 0.0, 1e3 * r.t_s, flop / r.t_einc * 1e-9,
           sym ? flop / r.t_sb * 1e-9 : 0.0, dn ? flop / r.t_dn * 1e-9 : 0.0,
           flop / r.t_s * 1e-9, sym ? r.t_sb / r.t_einc : 0.0, dn ? r.t_dn / r.t_einc : 0.0,
           r.t_s / r.t_einc, rel_err(r.c_einc, 1, r.c_sb, m * n),
           dn ? rel_err(r.c_dn, 1, r.c_sb, m * n) : 0.0, rel_err(r.c_s, 0, r.c_sb, m * n));
    free(a), free(b), free(fa), free(fb);
    free(r.c_einc), free(r.c_sb), free(r.c_dn), free(r.c32), free(r.c_s);
    if (dnnl)
        dlclose(dnnl);
    if (self)
        dlclose(self);
    return 0;
}
