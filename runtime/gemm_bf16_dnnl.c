/*
 * gemm_bf16_dnnl.c - GEMMs of two bf16 operands through oneDNN's
 * dnnl_gemm_bf16bf16f32 (rt_bf16.h).
 *
 * Widening both operands to f32 and calling cblas_sgemm reached 0.45x to
 * 0.7x of oneDNN's bf16 GEMM on a Zen 4 with AVX512-BF16, which itself ran
 * 1.9x to 2.3x sgemm's rate (bench/bf16_gemm.c; docs/performance-history.md,
 * issue 26).  oneDNN is opened with dlopen at a device's first bf16 GEMM
 * rather than linked: an executable then starts as fast (oneDNN is 40 MB),
 * runs where the library is missing (convert + sgemm), and the runtime can
 * set OMP_WAIT_POLICY before libgomp, which oneDNN's Debian build runs on
 * and which reads it only when loaded (a linked libgomp reads it before
 * main).
 */
#define _GNU_SOURCE /* RTLD_LOCAL with -std=c17 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifndef EINC_HAVE_DNNL
#define EINC_HAVE_DNNL 0 /* CMake defines it to 1 where it found oneDNN */
#endif
#if EINC_HAVE_DNNL
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl_types.h>
_Static_assert(dnnl_success == 0, "rt_dnnl_bf16_fn's status 0 is dnnl_success");
#endif

#include "rt_internal.h"

int rt_bf16_cpu_dot(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    return __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

/* EINC_BF16_GEMM and the CPU's choice: 1 oneDNN, 0 sgemm, -1 a value
 * that is neither dnnl nor sgemm; *forced (may be NULL) says whether the
 * environment made it. */
static int route_wanted(int *forced)
{
    const char *e = getenv("EINC_BF16_GEMM");
    if (forced)
        *forced = e && e[0];
    if (!e || !e[0])
        return EINC_HAVE_DNNL && rt_bf16_cpu_dot();
    if (strcmp(e, "dnnl") == 0)
        return 1;
    return strcmp(e, "sgemm") == 0 ? 0 : -1;
}

void rt_bf16_gemm_environ(void)
{
    /* Idle OpenMP workers sleep at once instead of spinning on cores that
     * OpenBLAS's threads, the narrow products' helpers or other devices
     * use; a value the user set is kept. */
    if (EINC_HAVE_DNNL && route_wanted(NULL) == 1)
        setenv("OMP_WAIT_POLICY", "passive", 0);
}

void rt_bf16_gemm_init(rt_bf16_gemm *s)
{
    memset(s, 0, sizeof *s);
    int forced;
    int want = route_wanted(&forced);
    if (want < 0)
        rt_fatal(NULL, "EINC_BF16_GEMM must be dnnl (oneDNN's bf16 GEMM) or sgemm (operands "
                 "widened to f32, then cblas_sgemm), not '%s'", getenv("EINC_BF16_GEMM"));
    if (want && !EINC_HAVE_DNNL)
        rt_fatal(NULL, "EINC_BF16_GEMM=dnnl, but this runtime was built without oneDNN "
                 "(libdnnl-dev: scripts/deps.sh)");
    if (want)
        s->state = RT_BF16_DNNL_UNTRIED;
    s->forced = want && forced;
}

#if EINC_HAVE_DNNL
/* The route stays on sgemm: said when the user asked for oneDNN, silent
 * when it was only the default's guess.  Returns 0 for the caller. */
static int refuse(const rt_bf16_gemm *s, const char *why)
{
    if (s->forced)
        fprintf(stderr, "einrt: warning: EINC_BF16_GEMM=dnnl, but %s; this device's bf16 "
                "GEMMs run on cblas_sgemm\n", why);
    return 0;
}
#endif

#if EINC_HAVE_DNNL
/* A 2x4 by 4x3 product of small integers: exact in bf16 and in f32. */
static int check_product(rt_dnnl_bf16_fn gemm)
{
    uint16_t a[8], b[12];
    float c[6] = {0};
    for (int i = 0; i < 8; i++)
        a[i] = rt_f32_to_bf16((float)(i - 3));
    for (int i = 0; i < 12; i++)
        b[i] = rt_f32_to_bf16((float)(2 * i - 7));
    if (gemm('N', 'N', 2, 3, 4, 1.0f, a, 4, b, 3, 0.0f, c, 3) != 0)
        return 0;
    for (int m = 0; m < 2; m++)
        for (int n = 0; n < 3; n++) {
            float want = 0;
            for (int k = 0; k < 4; k++)
                want += (float)(4 * m + k - 3) * (float)(2 * (3 * k + n) - 7);
            if (c[3 * m + n] != want)
                return 0;
        }
    return 1;
}
#endif

int rt_bf16_gemm_ready(rt_bf16_gemm *s)
{
    if (!s || s->state == RT_BF16_SGEMM)
        return 0;
    if (s->state == RT_BF16_DNNL_READY)
        return 1;
    s->state = RT_BF16_SGEMM; /* unless everything below works */
#if EINC_HAVE_DNNL
    /* Never closed: libgomp's thread pools outlive any one call. */
    void *h = dlopen(EINC_DNNL_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return refuse(s, dlerror());
    rt_dnnl_bf16_fn gemm;
    void (*omp_set)(int);
    /* POSIX's way from dlsym's object pointer to a function pointer */
    void *f = dlsym(h, "dnnl_gemm_bf16bf16f32"), *o = dlsym(h, "omp_set_num_threads");
    if (!f || !o)
        return refuse(s, EINC_DNNL_SONAME " lacks dnnl_gemm_bf16bf16f32 or omp_set_num_threads");
    memcpy(&gemm, &f, sizeof gemm);
    memcpy(&omp_set, &o, sizeof omp_set);
    omp_set(openblas_get_num_threads());
    if (!check_product(gemm))
        return refuse(s, "oneDNN refused or miscomputed a 2x3x4 check product (a CPU without "
                         "AVX-512: dnnl_unimplemented)");
    s->gemm = gemm;
    s->omp_set_threads = omp_set;
    s->state = RT_BF16_DNNL_READY;
    return 1;
#else
    return 0;
#endif
}

int rt_gemm_bf16_dnnl(const rt_gemm *g)
{
    rt_bf16_gemm *s = g->bf16;
    if (!s || s->state != RT_BF16_DNNL_READY)
        return 0;
    /* OpenMP's count is the calling thread's own: set on every call, as the
     * device's thread is the one calling and a flag costs a store. */
    s->omp_set_threads(openblas_get_num_threads());
    int st;
    if (g->tc) /* c stored [N x M]: c^T = op(b)^T op(a)^T */
        st = s->gemm(g->tb ? 'N' : 'T', g->ta ? 'N' : 'T', g->N, g->M, g->K, (float)g->alpha,
                     g->b, g->ldb, g->a, g->lda, (float)g->beta, g->c, g->ldc);
    else
        st = s->gemm(g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', g->M, g->N, g->K, (float)g->alpha,
                     g->a, g->lda, g->b, g->ldb, (float)g->beta, g->c, g->ldc);
    if (st == 0)
        return 1;
    s->state = RT_BF16_SGEMM;
    if (s->forced)
        fprintf(stderr, "einrt: warning: EINC_BF16_GEMM=dnnl, but oneDNN answered status %d "
                "to a %lld x %lld x %lld GEMM; this device's bf16 GEMMs run on cblas_sgemm "
                "from now on\n", st, (long long)g->M, (long long)g->N, (long long)g->K);
    return 0;
}
