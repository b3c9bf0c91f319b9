/*
 * test_calib_fit.c - the regression of `einc calibrate` (calibrate/
 * fit.c): timings made from known coefficients of
 * T = T_launch + (P-1)(L_sync + shard/BW) + shard/BW_local + (runs-P) t_run
 * (seed 004's model plus the own shard's copy and the strided runs) give
 * those coefficients back; a
 * coefficient the timings do not need comes out 0; one group size alone
 * (P-1 and 1 collinear) still fits; an outlier is marked and left out;
 * the split between the regimes moves up where the rate falls on; the
 * largest buffers' fastest rate is kept as a floor for larger ones.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "calibrate_internal.h"
#include "cunit_main.h"

/* Samples at P = 2..pmax, 7 sizes from 8 KiB to 32 MiB, from the model;
 * with t_run > 0 also a strided variant of each (rows of 512 bytes). */
static void synth_runs(coll_fit *f, int pmax, double launch, double sync, double bw,
                       double bw_local, double t_run)
{
    memset(f, 0, sizeof *f);
    for (int p = 2; p <= pmax; p++)
        for (double s = 8192; s <= 32 << 20; s *= 4)
            for (int strided = 0; strided <= (t_run > 0); strided++) {
                double shard = s / p, runs = strided ? p * (s / 512 / p) : p;
                double t = launch + (p - 1) * (sync + shard / bw) +
                           (bw_local > 0 ? shard / bw_local : 0) + (runs - p) * t_run;
                f->s[f->n++] = (sample){.p = p, .bytes = s, .runs = runs, .t = t};
            }
}

static void synth(coll_fit *f, int pmax, double launch, double sync, double bw, double bw_local)
{
    synth_runs(f, pmax, launch, sync, bw, bw_local, 0);
}

static void test_recovers_four_terms(void)
{
    coll_fit f;
    synth(&f, 4, 30e-6, 5e-6, 6e9, 2.5e9);
    CU_ASSERT_EQUAL_FATAL(cal_fit_kind(&f, "AllGather"), 0);
    /* Both regimes come from the same line, so each recovers it. */
    CU_ASSERT_DOUBLE_EQUAL(f.t_launch, 30e-6, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(f.l_sync, 5e-6, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(f.bw / 6e9, 1, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(f.bw_local / 2.5e9, 1, 1e-6);
    CU_ASSERT(f.rms < 1e-9);
    CU_ASSERT_EQUAL(f.used, f.n);
}

static void test_recovers_runs(void)
{
    coll_fit f;
    synth_runs(&f, 4, 30e-6, 5e-6, 6e9, 2.5e9, 40e-9);
    CU_ASSERT_EQUAL_FATAL(cal_fit_kind(&f, "AllGather"), 0);
    CU_ASSERT_DOUBLE_EQUAL(f.t_run / 40e-9, 1, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(f.small_t_run / 40e-9, 1, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(f.bw / 6e9, 1, 1e-6);
    CU_ASSERT(f.rms < 1e-9);
    /* Without strided samples the term is not determined and stays 0. */
    synth(&f, 4, 30e-6, 5e-6, 6e9, 2.5e9);
    CU_ASSERT_EQUAL_FATAL(cal_fit_kind(&f, "AllGather"), 0);
    CU_ASSERT_EQUAL(f.t_run, 0);
}

static void test_free_own_shard(void)
{
    coll_fit f;
    synth(&f, 4, 20e-6, 10e-6, 3e9, 0);
    CU_ASSERT_EQUAL_FATAL(cal_fit_kind(&f, "AllToAll"), 0);
    CU_ASSERT_DOUBLE_EQUAL(f.bw / 3e9, 1, 1e-6);
    CU_ASSERT_EQUAL(f.bw_local, 0); /* MeshSlice's model exactly */
    CU_ASSERT(f.rms < 1e-9);
}

static void test_one_group_size(void)
{
    /* With P = 2 only, (P-1)*shard and shard are the same column: the fit
     * must not divide by a zero pivot, and the times must still match. */
    coll_fit f;
    synth(&f, 2, 20e-6, 0, 3e9, 3e9);
    CU_ASSERT_EQUAL_FATAL(cal_fit_kind(&f, "ReduceScatter"), 0);
    CU_ASSERT(isfinite(f.bw) && f.bw > 0);
    for (int i = 0; i < f.n; i++)
        CU_ASSERT_DOUBLE_EQUAL(f.s[i].fit / f.s[i].t, 1, 1e-6);
}

static void test_outlier(void)
{
    coll_fit f;
    synth(&f, 4, 30e-6, 5e-6, 6e9, 2.5e9);
    int bad = f.n - 2; /* a large sample, 3x slower (a descheduled thread) */
    f.s[bad].t *= 3;
    CU_ASSERT_EQUAL_FATAL(cal_fit_kind(&f, "AllGather"), 0);
    CU_ASSERT(f.s[bad].outlier);
    CU_ASSERT_EQUAL(f.used, f.n - 1);
    CU_ASSERT_DOUBLE_EQUAL(f.bw / 6e9, 1, 1e-6);
}

/* A rate that falls on past the caches (MPI on the 2-core EPYC: an
 * AllReduce of 2 MiB a device at 3.5 GB/s, of 8 and 32 MiB at 1.8 and
 * 1.0): the split between the regimes moves up to between 2 and 8 MiB,
 * where the main fit then prices the large buffers at their own rate, and
 * the buffers below it keep theirs. */
static void test_split_moves_up(void)
{
    coll_fit f;
    memset(&f, 0, sizeof f);
    for (int p = 2; p <= 4; p += 2)
        for (double s = 8192; s <= 32 << 20; s *= 4) {
            double shard = s / p;
            double t = s < (4 << 20) ? 10e-6 + (p - 1) * shard / 4e9  /* in the caches */
                                     : 1e-3 + (p - 1) * shard / 1e9;  /* from memory */
            f.s[f.n++] = (sample){.p = p, .bytes = s, .runs = p, .t = t};
        }
    CU_ASSERT_EQUAL_FATAL(cal_fit_kind(&f, "AllReduce"), 0);
    CU_ASSERT(f.has_small);
    CU_ASSERT(f.split > 2 << 20 && f.split < 8 << 20);
    CU_ASSERT_DOUBLE_EQUAL(f.bw / 1e9, 1, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(f.small_bw / 4e9, 1, 1e-6);
    for (int i = 0; i < f.n; i++)
        CU_ASSERT_DOUBLE_EQUAL(f.s[i].fit / f.s[i].t, 1, 1e-6);
    /* One line throughout: the split stays at SPLIT_BYTES. */
    synth(&f, 4, 30e-6, 5e-6, 6e9, 2.5e9);
    CU_ASSERT_EQUAL_FATAL(cal_fit_kind(&f, "AllGather"), 0);
    CU_ASSERT_EQUAL(f.split, SPLIT_BYTES);
}

/* The largest buffers' own rate (fit_large): the MPI AllReduce of 2, 8
 * and 32 MiB a device at 3.5, 2.7 and 0.6 GB/s, which no line through the
 * three follows.  The floor is the fastest sample at 32 MiB (a slower run
 * of the same size does not lower it), starting from 8 MiB; the strided
 * samples do not count.  With every size on one line the floor is that
 * line's own rate at 32 MiB, and with the largest size under SPLIT_BYTES
 * there is none. */
static void test_large_floor(void)
{
    coll_fit f;
    memset(&f, 0, sizeof f);
    const double rate[] = {3.5e9, 2.7e9, 0.6e9};
    for (int p = 2; p <= 4; p += 2)
        for (int k = 0; k < 3; k++) {
            double s = (double)(2 << 20) * (1 << (2 * k)), shard = s / p;
            double t = 20e-6 + (p - 1) * shard / rate[k];
            f.s[f.n++] = (sample){.p = p, .bytes = s, .runs = p, .t = t};
            f.s[f.n++] = (sample){.p = p, .bytes = s, .runs = 8 * p, .t = 1.0}; /* strided, slow */
        }
    f.s[f.n++] = (sample){.p = 2, .bytes = 32 << 20, .runs = 2, .t = 1.0}; /* descheduled */
    for (double s = 8192; s < 1 << 20; s *= 4)
        for (int p = 2; p <= 4; p += 2)
            f.s[f.n++] = (sample){.p = p, .bytes = s, .runs = p, .t = 5e-6 + (p - 1) * s / p / 5e9};
    CU_ASSERT_EQUAL_FATAL(cal_fit_kind(&f, "AllReduce"), 0);
    CU_ASSERT_EQUAL(f.large_at, 32 << 20);
    CU_ASSERT_EQUAL(f.large_from, 8 << 20);
    double fastest = 3 * (double)(8 << 20) / (20e-6 + 3 * (double)(8 << 20) / 0.6e9); /* p = 4 */
    CU_ASSERT_DOUBLE_EQUAL(f.large_bw / fastest, 1, 1e-9);

    synth(&f, 4, 30e-6, 5e-6, 6e9, 2.5e9);
    CU_ASSERT_EQUAL_FATAL(cal_fit_kind(&f, "AllGather"), 0);
    double s = 32 << 20, own = (3 * s / 4) / (30e-6 + 3 * (5e-6 + s / 4 / 6e9) + s / 4 / 2.5e9);
    CU_ASSERT_DOUBLE_EQUAL(f.large_bw / own, 1, 1e-9);

    memset(&f, 0, sizeof f);
    for (double b = 8192; b < 1 << 20; b *= 4)
        for (int p = 2; p <= 4; p += 2)
            f.s[f.n++] = (sample){.p = p, .bytes = b, .runs = p, .t = 5e-6 + (p - 1) * b / p / 5e9};
    CU_ASSERT_EQUAL_FATAL(cal_fit_kind(&f, "AllGather"), 0);
    CU_ASSERT_EQUAL(f.large_bw, 0);
}

/* What a bf16 GEMM's result element costs (cal_gemm_result_seconds, in
 * programs.c): timings made from a rate R of the multiply-adds and x
 * seconds per result element give x back; noise that makes the wider
 * result the faster, or a figure that would leave a GEMM less than a
 * quarter of its time, gives 0, as does a GEMM not timed. */
static void test_gemm_result_seconds(void)
{
    static cal_state c; /* large: not on the stack */
    const double R = 9e10, x = 3e-9;
    memset(&c, 0, sizeof c);
    for (int r = 0; r < NGEMM_RESULT; r++) {
        const int64_t *s = GEMM_RESULT_SHAPES[r];
        c.gemm_result_s[r] = 2.0 * (double)(s[0] * s[1] * s[2]) / R + x * (double)(s[0] * s[2]);
    }
    for (int g = 0; g < NGEMM; g++) {
        const int64_t *s = GEMM_SHAPES[g];
        double f = 2.0 * (double)(s[0] * s[1] * s[2]);
        c.gemm_at[2][g] = f / (f / R + x * (double)(s[0] * s[2]));
    }
    CU_ASSERT_DOUBLE_EQUAL(cal_gemm_result_seconds(&c) / x, 1, 1e-9);
    cal_state d = c;
    d.gemm_result_s[2] = d.gemm_result_s[1] * 0.99;
    CU_ASSERT_EQUAL(cal_gemm_result_seconds(&d), 0);
    d = c;
    d.gemm_result_s[1] = 0;
    CU_ASSERT_EQUAL(cal_gemm_result_seconds(&d), 0);
    d = c;
    d.gemm_result_s[2] *= 10; /* 40 ns an element: more than the GEMM itself took */
    CU_ASSERT_EQUAL(cal_gemm_result_seconds(&d), 0);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"the fit recovers all four coefficients", test_recovers_four_terms},
        {"the fit recovers the cost per run", test_recovers_runs},
        {"a free own-shard copy fits as 0", test_free_own_shard},
        {"one group size alone fits", test_one_group_size},
        {"an outlier is left out", test_outlier},
        {"the split moves up where the rate falls on", test_split_moves_up},
        {"the largest buffers' fastest rate is a floor", test_large_floor},
        {"a bf16 GEMM's result element from two equal-FLOP GEMMs", test_gemm_result_seconds},
    };
    einc_add_suite("calibration fit", tests, (int)(sizeof tests / sizeof tests[0]));
}
