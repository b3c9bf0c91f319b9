/*
 * test_calib_model.c - the calibrated part of a hardware profile: the
 * "calibration" section parses into cost_hw (fits per collective kind,
 * elementwise bandwidth, per-function costs), bad sections are refused
 * naming the field, and cost_measured_coll_time is MeshSlice's model
 * T_launch + (P-1)(L_sync + shard/BW) (seed 004).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "costmodel.h"
#include "cunit_main.h"

/* A profile with a calibration section; variants replace one piece. */
static const char *BASE =
    "{\"name\": \"host\", \"status\": \"calibrated\",\n"
    " \"peak_flops\": {\"bf16\": 2e10, \"f32\": 3e10, \"f64\": 1.5e10},\n"
    " \"hbm_bytes\": 6e9, \"hbm_bandwidth\": 5e9,\n"
    " \"ici_oneway_bandwidth\": 2e9, \"ici_bidi_bandwidth\": 2e9,\n"
    " \"ici_latency\": 1e-5, \"dcn_bandwidth\": 2e9,\n"
    " \"wraparound\": {\"rule\": \"always\"},\n"
    " \"calibration\": {\"collectives\": {\n"
    "   \"allgather\": {\"t_launch\": 4e-6, \"l_sync\": 1e-5, \"bandwidth\": 2e9,\n"
    "     \"small_messages\": {\"below_bytes\": 1048576, \"t_launch\": 1e-6, \"l_sync\": 5e-6,\n"
    "                        \"bandwidth\": 8e9}},\n"
    "   \"reducescatter\": {\"t_launch\": 0, \"l_sync\": 2e-5, \"bandwidth\": 1.5e9},\n"
    "   \"allreduce\": {\"t_launch\": 1e-6, \"l_sync\": 3e-5, \"bandwidth\": 1e9},\n"
    "   \"alltoall\": {\"t_launch\": 2e-6, \"l_sync\": 0, \"bandwidth\": 1.25e9}},\n"
    "  \"elementwise_bandwidth\": 4e9, \"devices\": 4, \"cores\": 2,\n"
    "  \"elementwise_curve\": [{\"bytes\": 1e6, \"bandwidth\": 2e10}, {\"bytes\": 1e8, \"bandwidth\": 4e9}],\n"
    "  \"gemm_curve\": {\"f32\": [{\"flops\": 1e7, \"flops_per_s\": 6e10}, {\"flops\": 1e9, \"flops_per_s\": 2e10}]},\n"
    "  \"function_seconds_per_element\": {\"exp\": 2e-9, \"gelu\": 5e-9}}}\n";

static const char *variant(const char *from, const char *to, char *buf, size_t size)
{
    const char *at = strstr(BASE, from);
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    snprintf(buf, size, "%.*s%s%s", (int)(at - BASE), BASE, to, at + strlen(from));
    return buf;
}

static void test_parses(void)
{
    cost_hw hw;
    char err[512] = "";
    int rc = cost_hw_parse(BASE, "t.json", &hw, err, sizeof err);
    if (rc)
        fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_TRUE(hw.measured);
    CU_ASSERT_DOUBLE_EQUAL(hw.fit[COST_FIT_ALLGATHER].t_launch, 4e-6, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(hw.fit[COST_FIT_ALLGATHER].small_below, 1048576, 0);
    CU_ASSERT_DOUBLE_EQUAL(hw.fit[COST_FIT_ALLGATHER].small_bw, 8e9, 1);
    CU_ASSERT_DOUBLE_EQUAL(hw.fit[COST_FIT_REDUCESCATTER].small_below, 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(hw.fit[COST_FIT_REDUCESCATTER].l_sync, 2e-5, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(hw.fit[COST_FIT_ALLREDUCE].bw, 1e9, 1);
    CU_ASSERT_DOUBLE_EQUAL(hw.fit[COST_FIT_ALLTOALL].bw, 1.25e9, 1);
    CU_ASSERT_DOUBLE_EQUAL(hw.elementwise_bw, 4e9, 1);
    CU_ASSERT_DOUBLE_EQUAL(hw.fn_time[IR_FN_GELU], 5e-9, 1e-18);
    CU_ASSERT_DOUBLE_EQUAL(hw.fn_time[IR_FN_EXP], 2e-9, 1e-18);
    CU_ASSERT_DOUBLE_EQUAL(hw.fn_time[IR_FN_TANH], 0, 0); /* not measured: memory only */
    /* No in-cache figures: a row group uses the streaming ones. */
    CU_ASSERT_DOUBLE_EQUAL(hw.fn_time_cache[IR_FN_EXP], 2e-9, 1e-18);
    CU_ASSERT_FALSE(hw.has_fn_cache[IR_FN_EXP]);
    char buf[2048];
    variant("\"gelu\": 5e-9}", "\"gelu\": 5e-9},\n  \"function_seconds_per_element_in_cache\": "
            "{\"exp\": 7e-10}", buf, sizeof buf);
    CU_ASSERT_EQUAL_FATAL(cost_hw_parse(buf, "t.json", &hw, err, sizeof err), 0);
    CU_ASSERT_DOUBLE_EQUAL(hw.fn_time_cache[IR_FN_EXP], 7e-10, 1e-19);
    CU_ASSERT_DOUBLE_EQUAL(hw.fn_time_cache[IR_FN_GELU], 5e-9, 1e-18); /* not measured in cache */
    CU_ASSERT_TRUE(hw.has_fn_cache[IR_FN_EXP]);
    CU_ASSERT_FALSE(hw.has_fn_cache[IR_FN_GELU]);
    CU_ASSERT_DOUBLE_EQUAL(hw.fn_time[IR_FN_EXP], 2e-9, 1e-18);
    /* No result figure: a GEMM's FLOPs alone (cost_measured_gemm_seconds). */
    for (int d = 0; d < 3; d++)
        CU_ASSERT_EQUAL(hw.gemm_result_time[d], 0);
    variant("\"function_seconds_per_element\"", "\"gemm_seconds_per_result_element\": "
            "{\"bf16\": 3e-9},\n  \"function_seconds_per_element\"", buf, sizeof buf);
    CU_ASSERT_EQUAL_FATAL(cost_hw_parse(buf, "t.json", &hw, err, sizeof err), 0);
    CU_ASSERT_DOUBLE_EQUAL(hw.gemm_result_time[IR_BF16], 3e-9, 1e-20);
    CU_ASSERT_EQUAL(hw.gemm_result_time[IR_F32], 0);
    CU_ASSERT_EQUAL(hw.fit[COST_FIT_ALLREDUCE].large_bw, 0); /* no floor */
    variant("\"bandwidth\": 1e9}", "\"bandwidth\": 1e9, \"large_messages\": {\"from_bytes\": "
            "8388608, \"at_bytes\": 33554432, \"bandwidth\": 6e8}}", buf, sizeof buf);
    CU_ASSERT_EQUAL_FATAL(cost_hw_parse(buf, "t.json", &hw, err, sizeof err), 0);
    CU_ASSERT_DOUBLE_EQUAL(hw.fit[COST_FIT_ALLREDUCE].large_from, 8388608, 0);
    CU_ASSERT_DOUBLE_EQUAL(hw.fit[COST_FIT_ALLREDUCE].large_at, 33554432, 0);
    CU_ASSERT_DOUBLE_EQUAL(hw.fit[COST_FIT_ALLREDUCE].large_bw, 6e8, 0);
    CU_ASSERT_FALSE(hw.cal_mpi); /* no "runtime": threads */
    variant("\"devices\": 4", "\"runtime\": \"mpi\", \"devices\": 4", buf, sizeof buf);
    CU_ASSERT_EQUAL_FATAL(cost_hw_parse(buf, "t.json", &hw, err, sizeof err), 0);
    CU_ASSERT_TRUE(hw.cal_mpi);
    /* Without the section the profile is not measured. */
    const char *cut = strstr(BASE, ",\n \"calibration\"");
    snprintf(buf, sizeof buf, "%.*s}\n", (int)(cut - BASE), BASE);
    CU_ASSERT_EQUAL_FATAL(cost_hw_parse(buf, "t.json", &hw, err, sizeof err), 0);
    CU_ASSERT_FALSE(hw.measured);
}

/* The elementwise curve and the core-sharing factor. */
static void test_curve_and_contention(void)
{
    cost_hw hw;
    CU_ASSERT_EQUAL_FATAL(cost_hw_parse(BASE, "t.json", &hw, NULL, 0), 0);
    CU_ASSERT_EQUAL(hw.ew_npoints, 2);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_ew_bw(&hw, 1e5), 2e10, 1);  /* clamped below */
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_ew_bw(&hw, 1e9), 4e9, 1);   /* clamped above */
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_ew_bw(&hw, 1e7), 1.2e10, 1); /* halfway in log(bytes) */
    /* A streamed loop's bytes at the curve of the add whose result is the
     * same size (cost_measured_ew_seconds), since the write weight w is
     * the scale's time over the add's on the same arrays
     * (calibrate/profile.c, write_weight).  A scale writing S = 1e7 / 3
     * bytes, w = 0.5: (S + 0.5 S) * 3 / 2.5 = 1.8 S = 6e6 byte-times at the
     * add's 3 S = 1e7 bytes, 1.2e10 B/s: 5e-4 s (at its own 2 S, 6.7e6
     * bytes, the curve is faster, 1.34e10 B/s).  A loop reading 3 S moves
     * more than that add: its own 4 S bytes.  Ordinary stores: w = 1 at
     * the bytes moved. */
    hw.ew_write_weight = 0.5;
    double s = 1e7 / 3;
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_ew_seconds(&hw, s, s, true), 5e-4, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_ew_seconds(&hw, 3 * s, s, true),
                           3.5 * s * 3 / 2.5 / cost_measured_ew_bw(&hw, 4 * s), 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_ew_seconds(&hw, s, s, false),
                           2 * s / cost_measured_ew_bw(&hw, 2 * s), 1e-12);
    CU_ASSERT(cost_measured_ew_bw(&hw, 2 * s) > 1.33e10);
    /* GEMM rate by size; a dtype without a curve uses peak_flops. */
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_gemm_rate(&hw, IR_F32, 1e8), 4e10, 1);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_gemm_rate(&hw, IR_F32, 1e12), 2e10, 1);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_gemm_rate(&hw, IR_F64, 1e8), 1.5e10, 1);
    /* 4 devices on 2 cores were measured: a mesh of 2 gets a whole core
     * each (half the time), a mesh of 8 a quarter (twice the time), a
     * mesh of 1 a whole core for its loops (its BLAS gets both:
     * tests/cost/test_cost_threads.c). */
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_contention(&hw, 4), 1, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_contention(&hw, 2), 0.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_contention(&hw, 8), 2, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_contention(&hw, 1), 0.5, 1e-12);
    /* Communication overlaps compute only with two cores per device. */
    CU_ASSERT_FALSE(cost_measured_overlaps(&hw, 4));
    CU_ASSERT_FALSE(cost_measured_overlaps(&hw, 2));
    CU_ASSERT_TRUE(cost_measured_overlaps(&hw, 1));
    hw.cal_cores = 0; /* unknown machine: no scaling, no overlap */
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_contention(&hw, 2), 1, 1e-12);
    CU_ASSERT_FALSE(cost_measured_overlaps(&hw, 1));
    hw.measured = false; /* a seed profile: links move data while cores compute */
    CU_ASSERT_TRUE(cost_measured_overlaps(&hw, 64));
}

static void expect_error(const char *json, const char *needle)
{
    cost_hw hw;
    char err[512] = "";
    CU_ASSERT_EQUAL(cost_hw_parse(json, "t.json", &hw, err, sizeof err), -1);
    if (!strstr(err, needle))
        fprintf(stderr, "\n  message '%s' lacks '%s'\n", err, needle);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, needle));
}

static void test_bad_sections(void)
{
    char buf[2048];
    expect_error(variant("\"bandwidth\": 1e9", "\"bandwidth\": 0", buf, sizeof buf),
                 "calibration.collectives.allreduce.bandwidth");
    expect_error(variant("\"l_sync\": 1e-5", "\"l_sync\": -1e-5", buf, sizeof buf),
                 "calibration.collectives.allgather.l_sync");
    expect_error(variant("\"t_launch\": 2e-6", "\"t_launch\": \"fast\"", buf, sizeof buf),
                 "calibration.collectives.alltoall.t_launch");
    expect_error(variant("\"alltoall\"", "\"all2all\"", buf, sizeof buf),
                 "calibration.collectives.alltoall");
    expect_error(variant("\"elementwise_bandwidth\": 4e9", "\"elementwise_bw\": 4e9", buf,
                         sizeof buf), "calibration.elementwise_bandwidth");
    expect_error(variant("\"gelu\": 5e-9", "\"gelu\": -5e-9", buf, sizeof buf),
                 "function_seconds_per_element.gelu");
    expect_error(variant("\"gelu\": 5e-9}", "\"gelu\": 5e-9},\n  \"function_seconds_per_element_in_cache\": "
                         "{\"exp\": -1}", buf, sizeof buf),
                 "function_seconds_per_element_in_cache.exp");
    expect_error(variant("\"bandwidth\": 8e9", "\"bandwidth\": 0", buf, sizeof buf),
                 "calibration.collectives.allgather.small_messages.bandwidth");
    expect_error(variant("\"bytes\": 1e8", "\"bytes\": 1e5", buf, sizeof buf), "ascending");
    expect_error(variant("\"bandwidth\": 2e10", "\"bandwidth\": -2", buf, sizeof buf),
                 "calibration.elementwise_curve[].bandwidth");
    expect_error(variant("\"cores\": 2", "\"cores\": 0", buf, sizeof buf), "calibration.cores");
    expect_error(variant("\"flops\": 1e9", "\"flops\": 1e6", buf, sizeof buf), "ascending");
    expect_error(variant("\"flops_per_s\": 6e10", "\"rate\": 6e10", buf, sizeof buf),
                 "calibration.gemm_curve[].flops_per_s");
    expect_error(variant("\"function_seconds_per_element\"", "\"gemm_seconds_per_result_element\": "
                         "{\"bf16\": -3e-9},\n  \"function_seconds_per_element\"", buf, sizeof buf),
                 "calibration.gemm_seconds_per_result_element.bf16");
    expect_error(variant("\"function_seconds_per_element\"", "\"gemm_seconds_per_result_element\": "
                         "3e-9,\n  \"function_seconds_per_element\"", buf, sizeof buf),
                 "\"calibration.gemm_seconds_per_result_element\" must be an object");
    expect_error(variant("\"bandwidth\": 1e9}", "\"bandwidth\": 1e9, \"large_messages\": "
                         "{\"from_bytes\": 8e6, \"at_bytes\": 3.2e7, \"bandwidth\": -1}}", buf,
                         sizeof buf),
                 "calibration.collectives.allreduce.large_messages.bandwidth");
    expect_error(variant("\"bandwidth\": 1e9}", "\"bandwidth\": 1e9, \"large_messages\": "
                         "{\"from_bytes\": 3.2e7, \"at_bytes\": 8e6, \"bandwidth\": 1e9}}", buf,
                         sizeof buf),
                 "must be below");
    expect_error(variant("\"calibration\": {", "\"calibration\": [{", buf, sizeof buf),
                 "invalid JSON");
}

static void test_model(void)
{
    cost_coll_fit f = {.t_launch = 4e-6, .l_sync = 1e-5, .bw = 2e9};
    /* P = 4, 8 MB buffer: 4us + 3 * (10us + 2 MB / 2 GB/s) = 3.034 ms */
    cost_coll_time t = cost_measured_coll_time(&f, 4, 8e6, 4);
    CU_ASSERT_DOUBLE_EQUAL(t.time, 4e-6 + 3 * (1e-5 + 2e6 / 2e9), 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(t.t_latency, 4e-6 + 3e-5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(t.t_bandwidth, 3e-3, 1e-12);
    CU_ASSERT_EQUAL(t.bound, IR_BOUND_BANDWIDTH);
    /* At the crossover buffer size the two parts are equal. */
    cost_coll_time x = cost_measured_coll_time(&f, 4, t.crossover, 4);
    CU_ASSERT_DOUBLE_EQUAL(x.t_latency, x.t_bandwidth, 1e-12);
    /* Small messages are latency-bound; one device costs nothing. */
    CU_ASSERT_EQUAL(cost_measured_coll_time(&f, 2, 1024, 2).bound, IR_BOUND_LATENCY);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_coll_time(&f, 1, 8e6, 1).time, 0, 0);
    /* Below its size the small-message fit applies. */
    cost_coll_fit g = {.t_launch = 4e-6, .l_sync = 1e-5, .bw = 2e9, .small_below = 1 << 20,
                       .small_t_launch = 1e-6, .small_l_sync = 5e-6, .small_bw = 8e9};
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_coll_time(&g, 4, 8e5, 4).time,
                           1e-6 + 3 * (5e-6 + 2e5 / 8e9), 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_coll_time(&g, 4, 8e6, 4).time,
                           4e-6 + 3 * (1e-5 + 2e6 / 2e9), 1e-12);
    /* Linear in P - 1 at a fixed shard size (what the regression assumes). */
    double t2 = cost_measured_coll_time(&f, 2, 2 * 1e6, 2).time;
    double t3 = cost_measured_coll_time(&f, 3, 3 * 1e6, 3).time;
    double t5 = cost_measured_coll_time(&f, 5, 5 * 1e6, 5).time;
    CU_ASSERT_DOUBLE_EQUAL(t5 - t3, 2 * (t3 - t2), 1e-12);
    /* The own shard's copy adds shard / bw_local, and the crossover moves
     * with it. */
    cost_coll_fit h = f;
    h.bw_local = 1e9;
    cost_coll_time u = cost_measured_coll_time(&h, 4, 8e6, 4);
    CU_ASSERT_DOUBLE_EQUAL(u.t_bandwidth, 3e-3 + 2e6 / 1e9, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(u.time, t.time + 2e6 / 1e9, 1e-12);
    cost_coll_time ux = cost_measured_coll_time(&h, 4, u.crossover, 4);
    CU_ASSERT_DOUBLE_EQUAL(ux.t_latency, ux.t_bandwidth, 1e-12);
    /* A strided layout's extra runs cost t_run each; a flat one (runs = P)
     * none. */
    h.t_run = 40e-9;
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_coll_time(&h, 4, 8e6, 4).time, u.time, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_coll_time(&h, 4, 8e6, 4 * 1024).time,
                           u.time + (4 * 1024 - 4) * 40e-9, 1e-12);
}

/* The largest buffers' floor (large_extra, cost_formula.c): from at_bytes
 * on a buffer takes at least its (P - 1) shards at the floor's bandwidth,
 * or the line where that is longer; between from_bytes and at_bytes the
 * line plus the gap at at_bytes in proportion to log(bytes / from), so
 * the time is continuous at both ends; below from_bytes the line alone.
 * A floor under the line changes nothing. */
static void test_large_floor(void)
{
    const double from = 8 << 20, at = 32 << 20, fbw = 0.6e9;
    cost_coll_fit f = {.t_launch = 20e-6, .l_sync = 0, .bw = 1.8e9, .large_from = from,
                       .large_at = at, .large_bw = fbw};
    cost_coll_fit line = f;
    line.large_bw = 0;
    for (int p = 2; p <= 4; p += 2) {
        double floor_at = (p - 1) * at / p / fbw;
        double line_at = cost_measured_coll_time(&line, p, at, p).time;
        CU_ASSERT_FATAL(floor_at > line_at);
        CU_ASSERT_DOUBLE_EQUAL(cost_measured_coll_time(&f, p, at, p).time, floor_at, 1e-12);
        double big = 40 << 20;
        CU_ASSERT_DOUBLE_EQUAL(cost_measured_coll_time(&f, p, big, p).time,
                               (p - 1) * big / p / fbw, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(cost_measured_coll_time(&f, p, from, p).time,
                               cost_measured_coll_time(&line, p, from, p).time, 1e-15);
        CU_ASSERT_DOUBLE_EQUAL(cost_measured_coll_time(&f, p, 2 << 20, p).time,
                               cost_measured_coll_time(&line, p, 2 << 20, p).time, 1e-15);
        double mid = 16 << 20, gap = floor_at - line_at;
        CU_ASSERT_DOUBLE_EQUAL(cost_measured_coll_time(&f, p, mid, p).time,
                               cost_measured_coll_time(&line, p, mid, p).time + 0.5 * gap, 1e-12);
        double below = cost_measured_coll_time(&f, p, at * (1 - 1e-9), p).time;
        CU_ASSERT_DOUBLE_EQUAL(below, floor_at, 1e-9);
        CU_ASSERT_EQUAL(cost_measured_coll_time(&f, p, at, p).bound, IR_BOUND_BANDWIDTH);
    }
    f.large_bw = 10e9; /* faster than the line: no effect */
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_coll_time(&f, 4, 40 << 20, 4).time,
                           cost_measured_coll_time(&line, 4, 40 << 20, 4).time, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(cost_measured_coll_time(&f, 4, 16 << 20, 4).time,
                           cost_measured_coll_time(&line, 4, 16 << 20, 4).time, 1e-15);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"a calibration section parses", test_parses},
        {"bad calibration sections name the field", test_bad_sections},
        {"the measured collective model", test_model},
        {"elementwise curve and core sharing", test_curve_and_contention},
        {"the largest buffers' rate is a floor", test_large_floor},
    };
    einc_add_suite("calibrated profiles", tests, (int)(sizeof tests / sizeof tests[0]));
}
