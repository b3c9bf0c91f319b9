/*
 * rt_bf16.h - how a device runs a GEMM of two bf16 operands
 * (gemm_bf16_dnnl.c): oneDNN's dnnl_gemm_bf16bf16f32 (bf16 products summed
 * in f32, vdpbf16ps on AVX512-BF16 CPUs) or, as without oneDNN, the
 * operands widened to f32 and cblas_sgemm (einsum_mixed.c).
 */
#ifndef EINC_RT_BF16_H
#define EINC_RT_BF16_H

#include <stdint.h>

/* oneDNN's bf16 GEMM (oneDNN 2.6 exports it without declaring it in dnnl.h;
 * its prototype is dnnl_sgemm's with bf16 A and B, src/cpu/gemm/gemm.hpp):
 * row-major, 'N' or 'T' per operand, C = alpha op(A) op(B) + beta C with
 * A, B bf16 (as uint16_t) and C f32; returns a dnnl_status_t (0: success). */
typedef int (*rt_dnnl_bf16_fn)(char transa, char transb, int64_t M, int64_t N, int64_t K,
                               float alpha, const uint16_t *A, int64_t lda, const uint16_t *B,
                               int64_t ldb, float beta, float *C, int64_t ldc);

/* The route's states: oneDNN not wanted (or refused), wanted but not yet
 * loaded (the library is opened at the first bf16 GEMM, so programs without
 * one never load it), loaded and checked. */
enum { RT_BF16_SGEMM = 0, RT_BF16_DNNL_UNTRIED = 1, RT_BF16_DNNL_READY = 2 };

/*
 * A device's bf16 GEMM route: `state` (above) with oneDNN's entry points
 * once loaded.  Per device, used by the device's own thread only: no
 * process-wide state.  All zero (a bare rt_gemm's NULL, a device not made
 * by rt_device_init): convert + sgemm.
 */
typedef struct rt_bf16_gemm {
    int state;
    rt_dnnl_bf16_fn gemm;            /* dnnl_gemm_bf16bf16f32 (READY only) */
    void (*omp_set_threads)(int n);  /* omp_set_num_threads of oneDNN's libgomp */
    int forced;                      /* 1: EINC_BF16_GEMM=dnnl asked for oneDNN */
} rt_bf16_gemm;

/* Whether the CPU has AVX512-BF16 (vdpbf16ps), oneDNN's fast bf16 GEMM;
 * 0 off x86-64 (GCC or Clang). */
int rt_bf16_cpu_dot(void);

/*
 * Chooses the route (rt_device_init calls it, on the thread that starts the
 * devices): EINC_BF16_GEMM=dnnl or sgemm in the environment forces one
 * (any other non-empty value ends the job: rt_fatal, exit 1; dnnl in a
 * runtime built without oneDNN too); unset or empty, oneDNN where the
 * runtime was built with it (EINC_HAVE_DNNL) and the CPU has AVX512-BF16,
 * else sgemm.  Reads the environment only (rt_bf16_gemm_environ writes it).
 */
void rt_bf16_gemm_init(rt_bf16_gemm *s);

/*
 * Sets OMP_WAIT_POLICY=passive in the environment, unless it is set, when
 * rt_bf16_gemm_init would choose oneDNN (a bad EINC_BF16_GEMM is left to
 * it to report): libgomp reads it once, when oneDNN loads it, and its
 * default spinning workers took the cores of OpenBLAS's threads
 * (docs/runtime.md, "bf16 GEMMs").  setenv races with any thread's getenv,
 * so rt_main calls it first, before MPI_Init and any thread starts.
 */
void rt_bf16_gemm_environ(void);

/*
 * 1 when GEMMs of two bf16 operands go through oneDNN on this device.  The
 * first call with state UNTRIED opens the library (dlopen), finds its two
 * functions and checks a 2x3x4 product against the exact answer; on any
 * failure the state becomes SGEMM for the device's life (decided once, not
 * per call), with a warning on stderr naming the failure when
 * EINC_BF16_GEMM=dnnl asked for oneDNN (an A/B run must not measure the
 * other route unaware).  NULL s: 0.  Call it from the device's thread.
 */
int rt_bf16_gemm_ready(rt_bf16_gemm *s);

struct rt_gemm;

/*
 * Runs g (rt_internal.h: a and b both RT_BF16, dtype RT_F32, c f32, any of
 * the transposes) through oneDNN when g->bf16 is READY, with the OpenMP
 * thread count of the calling thread set to the OpenBLAS thread count the
 * backend gave this device (one per device when devices share the cores:
 * rt_threads_launch).  Returns 1 when done; 0 when the caller must run
 * convert + sgemm instead: not READY, or oneDNN returned an error (c is
 * then unchanged: oneDNN checks before it writes), after which the device
 * keeps to sgemm.
 */
int rt_gemm_bf16_dnnl(const struct rt_gemm *g);

#endif
