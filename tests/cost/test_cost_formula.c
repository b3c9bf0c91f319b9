/*
 * test_cost_formula.c - the collective formulas against the seeds' worked
 * numbers (seed 001 pop quiz 2, questions 2 and 3; the AllToAll and
 * AllReduce rules; an axis over several physical axes, seed 001 "multiple
 * axes"; a DCN axis, seed 000 "scaling across pods").  Each expected
 * number is the seed's, checked within 2%.
 */
#include <math.h>
#include <stdio.h>

#include "costmodel.h"
#include "cunit_main.h"
#include "test_util.h"


/* Seed 001 pop quiz 2: AllGather_Y([E_Y, F]) -> [E, F], bf16, E = 2048,
 * F = 8192, TPU v5e mesh {X: 8, Y: 4}.  With a full bidirectional ring the
 * answer is V / W_ici = 34e6 / 9e10 = 377 us. */
static void test_popquiz2_bidirectional(void)
{
    cost_hw hw = test_load_hw("tpu-v5e");
    int64_t sizes[] = {4};
    bool wrap[] = {true};
    double v = 2048.0 * 8192 * 2; /* gathered bytes per device */
    cost_coll_time t = cost_allgather_time(&hw, sizes, 1, wrap, v);
    ASSERT_NEAR2(t.time, 377e-6);
    CU_ASSERT_EQUAL(t.bound, IR_BOUND_BANDWIDTH);
    /* "the latency bound is about 3us, nowhere near": a ring of 4 has 2 hops */
    ASSERT_NEAR2(t.t_latency, 2e-6);
}

/* Same quiz, what the v5e really does: no wraparound on an axis of 4, so
 * 3 one-way hops of 8.4 MB: 3 * 8.4e6 / 4.5e10 = 560 us. */
static void test_popquiz2_no_wraparound(void)
{
    cost_hw hw = test_load_hw("tpu-v5e");
    CU_ASSERT_FALSE(cost_hw_axis_wraps(&hw, 4));
    CU_ASSERT_FALSE(cost_hw_axis_wraps(&hw, 8));
    CU_ASSERT_TRUE(cost_hw_axis_wraps(&hw, 16));
    int64_t sizes[] = {4};
    double v = 2048.0 * 8192 * 2;
    cost_coll_time t = cost_allgather_time(&hw, sizes, 1, NULL, v);
    ASSERT_NEAR2(t.time, 560e-6);
    CU_ASSERT_EQUAL(t.bound, IR_BOUND_BANDWIDTH);
    ASSERT_NEAR2(t.t_latency, 3e-6);
}

/* Pop quiz 2 part 2: E = F = 256, each shard 32 kB: latency-bound, 3 hops
 * of 1 us = 3 us. */
static void test_popquiz2_latency_bound(void)
{
    cost_hw hw = test_load_hw("tpu-v5e");
    int64_t sizes[] = {4};
    double v = 256.0 * 256 * 2;
    cost_coll_time t = cost_allgather_time(&hw, sizes, 1, NULL, v);
    CU_ASSERT_EQUAL(t.bound, IR_BOUND_LATENCY);
    ASSERT_NEAR2(t.time, 3e-6);
    CU_ASSERT(t.t_bandwidth < t.t_latency);
}

/* Seed 001 question 2, TPU v4p 4x4x4 (every axis wraps), B = 1024,
 * D = 4096, bf16: AllGather_X([B_X, D_Y]) = 23 us, AllGather_XY = 46 us,
 * AllReduce_Z([B_X, D_Y]{U_Z}) = 11.6 us. */
static void test_question2_v4p(void)
{
    cost_hw hw = test_load_hw("tpu-v4");
    CU_ASSERT_TRUE(cost_hw_axis_wraps(&hw, 4));
    CU_ASSERT_FALSE(cost_hw_axis_wraps(&hw, 6));
    double bd2 = 2.0 * 1024 * 4096;
    int64_t x[] = {4}, xy[] = {4, 4}, z[] = {4};
    ASSERT_NEAR2(cost_allgather_time(&hw, x, 1, NULL, bd2 / 4).time, 23e-6);
    ASSERT_NEAR2(cost_allgather_time(&hw, xy, 2, NULL, bd2).time, 46e-6);
    ASSERT_NEAR2(cost_allreduce_time(&hw, z, 1, NULL, bd2 / 16).time, 11.6e-6);
}

/* Seed 001 question 3: AllGather_X([B_X]) with B = 128 bf16 on v4p: 64
 * bytes per device, latency-bound, 2 hops = 2 us. */
static void test_question3_latency(void)
{
    cost_hw hw = test_load_hw("tpu-v4");
    int64_t x[] = {4};
    cost_coll_time t = cost_allgather_time(&hw, x, 1, NULL, 256);
    CU_ASSERT_EQUAL(t.bound, IR_BOUND_LATENCY);
    ASSERT_NEAR2(t.time, 2e-6);
}

/* AllReduce = 2 x AllGather of the same bytes (ReduceScatter then
 * AllGather, seed 001) when that is the cheaper way, with and without
 * wraparound; a latency-bound one is instead one AllGather of the P
 * partial sums, paying the hops once (seed 002, appendix C). */
static void test_allreduce_twice_allgather(void)
{
    cost_hw hw = test_load_hw("tpu-v5e");
    int64_t shapes[][2] = {{4, 1}, {16, 1}, {8, 16}, {2, 4}};
    double vs[] = {64, 4.5e4, 1e6, 3.3e7, 1e9};
    for (int s = 0; s < 4; s++)
        for (int i = 0; i < 5; i++) {
            double p = (double)(shapes[s][0] * shapes[s][1]);
            cost_coll_time ag = cost_allgather_time(&hw, shapes[s], 2, NULL, vs[i]);
            cost_coll_time all = cost_allgather_time(&hw, shapes[s], 2, NULL, p * vs[i]);
            cost_coll_time ar = cost_allreduce_time(&hw, shapes[s], 2, NULL, vs[i]);
            double want = fmin(2 * ag.time, all.time);
            CU_ASSERT_DOUBLE_EQUAL(ar.time, want, 1e-12 * want);
            if (ag.bound == IR_BOUND_BANDWIDTH) /* seed 001's 2x: large messages */
                CU_ASSERT_DOUBLE_EQUAL(ar.time, 2 * ag.time, 1e-12 * ag.time);
            CU_ASSERT_DOUBLE_EQUAL(ar.crossover, ag.crossover, 1e-12 * ag.crossover);
        }
}

/* Seed 002, appendix C: a decode step's Megatron AllReduce of [B, D] is
 * latency-bound.  LLaMA-2 13B (D = 5120, bf16) at B = 1 on the 8 TPU v5e
 * of a 2x4 slice (no wraparound): 10 kB per device; gathering the 8
 * partial sums (82 kB, 0.55 us over both axes) takes the 1 + 3 hops of one
 * AllGather, 4 us, where ReduceScatter + AllGather take 8 us.  At B = 16
 * (164 kB) gathering 1.3 MB takes longer than 8 us: back to seed 001's. */
static void test_allreduce_decode(void)
{
    cost_hw hw = test_load_hw("tpu-v5e");
    int64_t mesh[] = {2, 4};
    cost_coll_time b1 = cost_allreduce_time(&hw, mesh, 2, NULL, 2.0 * 5120);
    ASSERT_NEAR2(b1.time, 4e-6);
    CU_ASSERT_EQUAL(b1.bound, IR_BOUND_LATENCY);
    cost_coll_time b16 = cost_allreduce_time(&hw, mesh, 2, NULL, 16 * 2.0 * 5120);
    ASSERT_NEAR2(b16.time, 8e-6);
    CU_ASSERT_EQUAL(b16.bound, IR_BOUND_LATENCY);
}

/* Seed 001: AllToAll = V * max(A, B, ...) / (4 N W_ici); on a 1D ring
 * that is a quarter of an AllGather of the same array. */
static void test_alltoall(void)
{
    cost_hw h100 = test_load_hw("h100"); /* every axis wraps */
    double local = 1 << 24;
    int64_t ring[] = {8};
    cost_coll_time a2a = cost_alltoall_time(&h100, ring, 1, NULL, local);
    cost_coll_time ag = cost_allgather_time(&h100, ring, 1, NULL, local * 8);
    ASSERT_NEAR2(a2a.t_bandwidth, ag.t_bandwidth / 4);
    ASSERT_NEAR2(a2a.time, local * 8 * 8 / (4 * 8 * h100.ici_bidi_bw));
    /* 2D: the largest axis sets the cost, V = local * N. */
    int64_t mesh2[] = {4, 16};
    double n = 64, v = local * n;
    cost_coll_time t2 = cost_alltoall_time(&h100, mesh2, 2, NULL, local);
    ASSERT_NEAR2(t2.t_bandwidth, v * 16 / (4 * n * h100.ici_bidi_bw));
    /* A line (v5e, axis of 8) is timed as the one-way ring, where an
     * AllToAll costs half an AllGather of the same array (seed 001 question
     * 10): (X - 1) local / (2 W_1way), 7/16 of a local block per W_1way. */
    cost_hw v5e = test_load_hw("tpu-v5e");
    cost_coll_time line = cost_alltoall_time(&v5e, ring, 1, NULL, local);
    cost_coll_time line_ag = cost_allgather_time(&v5e, ring, 1, NULL, local * 8);
    ASSERT_NEAR2(line.t_bandwidth, line_ag.t_bandwidth / 2);
    ASSERT_NEAR2(line.t_bandwidth, 7 * local / (2 * v5e.ici_oneway_bw));
}

/* Several axes: bandwidths add (V / (W_ici * n_axes)), hops add
 * (T_min * sum |X_i| / 2).  v5e 16x16 has wraparound on both axes. */
static void test_multi_axis(void)
{
    cost_hw hw = test_load_hw("tpu-v5e");
    int64_t sizes[] = {16, 16};
    double v = 1e8;
    cost_coll_time t = cost_allgather_time(&hw, sizes, 2, NULL, v);
    ASSERT_NEAR2(t.t_bandwidth, v / (2 * 9e10));
    ASSERT_NEAR2(t.t_latency, 1e-6 * 32 / 2);
    /* Axes of size 1 move nothing. */
    int64_t one[] = {1};
    cost_coll_time z = cost_allgather_time(&hw, one, 1, NULL, v);
    CU_ASSERT_EQUAL(z.time, 0);
}

/* A mesh axis folded over k physical axes splits as evenly as it divides
 * (`mesh X = 64 over 3` is seed 001's 4x4x4 cube). */
static void test_axis_split(void)
{
    int64_t s[3];
    CU_ASSERT_EQUAL(cost_axis_split(16, 2, s), 2);
    CU_ASSERT(s[0] == 4 && s[1] == 4);
    CU_ASSERT_EQUAL(cost_axis_split(64, 3, s), 3);
    CU_ASSERT(s[0] == 4 && s[1] == 4 && s[2] == 4);
    cost_axis_split(8, 2, s);
    CU_ASSERT(s[0] == 2 && s[1] == 4);
    cost_axis_split(12, 2, s);
    CU_ASSERT(s[0] == 3 && s[1] == 4);
    cost_axis_split(7, 2, s); /* a prime keeps one axis */
    CU_ASSERT(s[0] == 1 && s[1] == 7);
    CU_ASSERT_EQUAL(cost_axis_split(5, 0, s), 1);
    CU_ASSERT_EQUAL(s[0], 5);
}

/* Seed 001, "multiple axes": an AllGather over an axis spanning k physical
 * axes has k times the bandwidth, V / (k W_ici), and the hops of its
 * sub-rings, T_min * sum |x_j| / 2.  v5p, X = 16 over 2 = 4 x 4 (both
 * rings): V / (2 W) and 2 + 2 hops, where one axis of 16 takes V / W and
 * 8 hops.  The same rule for ReduceScatter, AllReduce (twice) and AllToAll
 * (the largest sub-axis, 4, sets max|X_i|). */
static void test_folded_axis(void)
{
    cost_hw hw = test_load_hw("tpu-v5p");
    int64_t one[] = {16}, sub[2];
    int k = cost_axis_split(16, 2, sub);
    double v = 1e9;
    cost_coll_time flat = cost_coll_links_time(&hw, IR_OP_ALLGATHER, one, NULL, 1, v);
    cost_coll_time ag = cost_coll_links_time(&hw, IR_OP_ALLGATHER, sub, NULL, k, v);
    ASSERT_NEAR2(flat.t_bandwidth, v / 1.8e11);
    ASSERT_NEAR2(ag.t_bandwidth, v / (2 * 1.8e11));
    ASSERT_NEAR2(ag.t_latency, 1e-6 * (4 + 4) / 2);
    ASSERT_NEAR2(flat.t_latency, 1e-6 * 16 / 2);
    cost_coll_time rs = cost_coll_links_time(&hw, IR_OP_REDUCESCATTER, sub, NULL, k, v);
    ASSERT_NEAR2(rs.time, ag.time);
    cost_coll_time ar = cost_coll_links_time(&hw, IR_OP_ALLREDUCE, sub, NULL, k, v);
    ASSERT_NEAR2(ar.time, 2 * v / (2 * 1.8e11));
    double local = 1e8;
    cost_coll_time a2a = cost_coll_links_time(&hw, IR_OP_ALLTOALL, sub, NULL, k, local);
    ASSERT_NEAR2(a2a.t_bandwidth, local * 4 / (4 * 1.8e11));
    /* Seed 000, "Data Parallelism": all three axes of a 4x4x4 v5p cube
     * give 3 W_ici, so C / W drops from 2550 to 850. */
    int64_t cube[3];
    k = cost_axis_split(64, 3, cube);
    cost_coll_time c3 = cost_coll_links_time(&hw, IR_OP_ALLGATHER, cube, NULL, k, v);
    ASSERT_NEAR2(hw.peak_flops[IR_BF16] * c3.t_bandwidth / v, 850);
    /* Each sub-axis wraps by the profile's rule: v5p 8 over 2 = 2 x 4, a
     * line of 2 (one hop, W_1way * 2 / 1) and a ring of 4 (2 hops, W). */
    k = cost_axis_split(8, 2, sub);
    cost_coll_time mixed = cost_coll_links_time(&hw, IR_OP_ALLGATHER, sub, NULL, k, v);
    ASSERT_NEAR2(mixed.t_bandwidth, v / (9e10 * 2 + 1.8e11));
    ASSERT_NEAR2(mixed.t_latency, 1e-6 * (1 + 2));
}

/* Seed 000, "scaling across pods": a DCN axis is a ring over the pods at
 * W_dcn per chip.  The gradients' AllReduce over P pods of the V bytes a
 * chip holds: 2 V / W_dcn (T_comms = 2 * 2 * 2 D F / (M W_dcn) with
 * V = 4 D F / M), so compute-bound when the pod's batch exceeds
 * C / W_dcn (71,360 with the seed's C = 4.46e14; 73,440 with the v5p
 * profile's 4.59e14, the seed's figure in "Data Parallelism"). */
static void test_dcn_axis(void)
{
    cost_hw hw = test_load_hw("tpu-v5p");
    double v = 1e9;
    int64_t pods[] = {4};
    bool dcn[] = {true, false};
    cost_coll_time ar = cost_coll_links_time(&hw, IR_OP_ALLREDUCE, pods, dcn, 1, v);
    ASSERT_NEAR2(ar.time, 2 * v / 6.25e9);
    CU_ASSERT_EQUAL(ar.bound, IR_BOUND_BANDWIDTH);
    CU_ASSERT_EQUAL(ar.t_latency, 0);
    ASSERT_NEAR2(hw.peak_flops[IR_BF16] / hw.dcn_bw, 73440);
    cost_coll_time ag = cost_coll_links_time(&hw, IR_OP_ALLGATHER, pods, dcn, 1, v);
    ASSERT_NEAR2(ag.time, v / 6.25e9);
    cost_coll_time a2a = cost_coll_links_time(&hw, IR_OP_ALLTOALL, pods, dcn, 1, v);
    ASSERT_NEAR2(a2a.time, 0.75 * v / 6.25e9);
    /* Pods and an ICI axis of 8 (a ring on v5p): the pod's ReduceScatter
     * and AllGather, and across pods the AllReduce of 1/8 of the bytes. */
    int64_t both[] = {2, 8};
    cost_coll_time h = cost_coll_links_time(&hw, IR_OP_ALLREDUCE, both, dcn, 2, v);
    int64_t ici[] = {8};
    cost_coll_time in_pod = cost_allreduce_time(&hw, ici, 1, NULL, v);
    ASSERT_NEAR2(h.time, in_pod.time + 2 * (v / 8) / 6.25e9);
}

/* The crossover: the two terms meet at V*; 4.5e10 * 1 us = 45 kB per hop
 * on v5e (seed 001, "buffers under 45kB are latency-bound"). */
static void test_crossover(void)
{
    cost_hw hw = test_load_hw("tpu-v5e");
    int64_t sizes[] = {16};
    cost_coll_time t = cost_allgather_time(&hw, sizes, 1, NULL, 1e6);
    double vstar = t.crossover;
    /* ring of 16: 8 hops at 9e10 bidirectional: 8 * 1us * 9e10 = 720 kB,
     * i.e. 45 kB per device shard (720 kB / 16). */
    ASSERT_NEAR2(vstar, 720e3);
    ASSERT_NEAR2(vstar / 16, 45e3);
    cost_coll_time below = cost_allgather_time(&hw, sizes, 1, NULL, 0.9 * vstar);
    cost_coll_time above = cost_allgather_time(&hw, sizes, 1, NULL, 1.1 * vstar);
    CU_ASSERT_EQUAL(below.bound, IR_BOUND_LATENCY);
    CU_ASSERT_EQUAL(above.bound, IR_BOUND_BANDWIDTH);
    cost_coll_time at = cost_allgather_time(&hw, sizes, 1, NULL, vstar);
    CU_ASSERT_DOUBLE_EQUAL(at.t_latency, at.t_bandwidth, 1e-9 * at.t_latency);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"popquiz2 bidirectional ring 377us", test_popquiz2_bidirectional},
        {"popquiz2 v5e without wraparound 560us", test_popquiz2_no_wraparound},
        {"popquiz2 latency-bound 3us", test_popquiz2_latency_bound},
        {"question2 v4p 23/46/11.6us", test_question2_v4p},
        {"question3 latency-bound 2us", test_question3_latency},
        {"AllReduce = 2 x AllGather, or 1 when latency-bound", test_allreduce_twice_allgather},
        {"decode AllReduce latency-bound 4us (seed 002)", test_allreduce_decode},
        {"AllToAll formula", test_alltoall},
        {"several axes", test_multi_axis},
        {"latency/bandwidth crossover", test_crossover},
        {"axis split over physical axes", test_axis_split},
        {"axis folded over physical axes (seed 001)", test_folded_axis},
        {"DCN axis (seed 000 pods)", test_dcn_axis},
    };
    einc_add_suite("cost formulas", tests, (int)(sizeof tests / sizeof tests[0]));
}
