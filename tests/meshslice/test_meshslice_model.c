/*
 * test_meshslice_model.c - the MeshSlice analytical model and autotuner
 * (passes/costmodel/meshslice_model.c, costmodel.h) against hand-computed
 * cases and the facts seed 004 states about the algorithms.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "meshslice_model.h"
#include "cunit_main.h"

#define ASSERT_CLOSE(got, want) \
    CU_ASSERT(fabs((double)(got) - (double)(want)) <= 1e-9 * fmax(1e-30, fabs((double)(want))))

/* GPT-3 175B (seed 004, A4): D = 12288, F = 4D, sequence 2048; batch = chips / 2. */
#define GPT3_D 12288
#define GPT3_F 49152
#define SEQ 2048

static cost_ms_params tpu_v4_bf16(void)
{
    cost_hw hw;
    char err[512];
    int rc = cost_hw_load("tpu-v4", &hw, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "%s\n", err);
    CU_ASSERT_FATAL(rc == 0);
    cost_ms_params p;
    cost_ms_params_from_hw(&hw, IR_BF16, &p);
    return p;
}

/* A machine where only bytes / bandwidth counts: no launch, no sync, one
 * byte per element, 1 byte/s on every axis, GEMMs free, no padding. */
static cost_ms_params traffic_only(void)
{
    cost_ms_params p;
    memset(&p, 0, sizeof p);
    p.bw_ring = p.bw_line = p.bw_link = p.bw_ring_rds = p.bw_line_rds = 1;
    p.wrap = COST_WRAP_ALWAYS;
    p.peak_flops = 1e30;
    p.gemm_eff = 1;
    p.mxu_tile = 1;
    p.block = 1;
    p.elem_bytes = 1;
    return p;
}

/* The four FC layers of one Transformer block (seed 004, A4) for `tokens`. */
static void fc_layers(int64_t tokens, int64_t d, int64_t f, cost_ms_layer out[4])
{
    cost_ms_layer l[4] = {
        {.name = "qkv", .gemm = {tokens, 3 * d, d}, .repeat = 1},
        {.name = "proj", .gemm = {tokens, d, d}, .repeat = 1},
        {.name = "ffn_up", .gemm = {tokens, f, d}, .repeat = 1},
        {.name = "ffn_down", .gemm = {tokens, d, f}, .repeat = 1},
    };
    memcpy(out, l, sizeof l);
}

static void test_params_from_profile(void)
{
    cost_ms_params p = tpu_v4_bf16();
    ASSERT_CLOSE(p.peak_flops, 2.75e14);
    ASSERT_CLOSE(p.l_sync, 1e-6);
    ASSERT_CLOSE(p.bw_ring, 9e10);
    ASSERT_CLOSE(p.bw_line, 4.5e10);
    ASSERT_CLOSE(p.elem_bytes, 2);
    CU_ASSERT_EQUAL(p.block, 8);
    /* TPU v4 axes wrap when their size is a multiple of 4 (hw/tpu-v4.json). */
    ASSERT_CLOSE(cost_ms_axis_bw(&p, 16), 9e10);
    ASSERT_CLOSE(cost_ms_axis_bw(&p, 2), 4.5e10);
}

static void test_collective_formula(void)
{
    cost_ms_params p = tpu_v4_bf16();
    /* Eq. 5: T_launch + (P - 1) * (L_sync + shard / BW). */
    double want = p.t_launch + 15 * (1e-6 + 4e6 / 9e10);
    ASSERT_CLOSE(cost_ms_collective_time(&p, 16, 4e6), want);
    CU_ASSERT_EQUAL(cost_ms_collective_time(&p, 1, 4e6), 0);
    /* A 2-chip axis has no wraparound on v4: one-way links. */
    ASSERT_CLOSE(cost_ms_collective_time(&p, 2, 4e6), p.t_launch + 1e-6 + 4e6 / 4.5e10);
}

static void test_gemm_time_padding(void)
{
    cost_ms_params p = tpu_v4_bf16();
    double full = cost_ms_gemm_time(&p, 128, 128, 128);
    ASSERT_CLOSE(full, p.t_gemm_launch + 2.0 * 128 * 128 * 128 / (p.peak_flops * p.gemm_eff));
    /* 129 rows pad to 256: the systolic array runs two tiles. */
    ASSERT_CLOSE(cost_ms_gemm_time(&p, 129, 128, 128) - p.t_gemm_launch, 2 * (full - p.t_gemm_launch));
}

/* Seed 004 3.2.1: keep the largest matrix stationary. */
static void test_dataflow_heuristic(void)
{
    int64_t t = 128 * SEQ; /* tokens at 256 chips */
    cost_ms_gemm up = {t, GPT3_F, GPT3_D};      /* C = T x F is the largest */
    cost_ms_gemm down = {t, GPT3_D, GPT3_F};    /* A = T x F is the largest */
    cost_ms_gemm small = {512, GPT3_F, GPT3_D}; /* few tokens: the weight B is the largest */
    cost_ms_gemm proj = {t, GPT3_D, GPT3_D};    /* A and C tie: C stays */
    CU_ASSERT_EQUAL(cost_ms_choose_dataflow(&up), COST_MS_DF_C_STN);
    CU_ASSERT_EQUAL(cost_ms_choose_dataflow(&down), COST_MS_DF_A_STN);
    CU_ASSERT_EQUAL(cost_ms_choose_dataflow(&small), COST_MS_DF_B_STN);
    CU_ASSERT_EQUAL(cost_ms_choose_dataflow(&proj), COST_MS_DF_C_STN);
    CU_ASSERT_EQUAL(cost_ms_sliced_dim(&up, COST_MS_DF_C_STN), GPT3_D);
    CU_ASSERT_EQUAL(cost_ms_sliced_dim(&down, COST_MS_DF_A_STN), GPT3_D);
    CU_ASSERT_EQUAL(cost_ms_sliced_dim(&small, COST_MS_DF_B_STN), 512);
}

/* K = 1 has nothing to overlap: MeshSlice is Collective (seed 004 3.2.2). */
static void test_k1_is_collective(void)
{
    cost_ms_params p = tpu_v4_bf16();
    cost_ms_gemm gs[3] = {{8 * SEQ, GPT3_F, GPT3_D}, {8 * SEQ, GPT3_D, GPT3_F}, {1024, GPT3_F, GPT3_D}};
    cost_ms_mesh meshes[3] = {{4, 4}, {8, 2}, {2, 8}};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int df = 0; df < COST_MS_DF_COUNT; df++) {
                cost_ms_estimate a = cost_ms_time(&p, &gs[i], meshes[j], (cost_ms_dataflow)df, COST_MS_ALGO_MESHSLICE, 1);
                cost_ms_estimate b = cost_ms_time(&p, &gs[i], meshes[j], (cost_ms_dataflow)df, COST_MS_ALGO_COLLECTIVE, 1);
                CU_ASSERT_FATAL(a.valid && b.valid);
                ASSERT_CLOSE(a.time, b.time);
                /* Collective overlaps no communication with the GEMM: A-stn and
                 * B-stn gather, multiply, then scatter (time = compute + comm);
                 * C-stn's two AllGathers run at once on different rings. */
                if (df == COST_MS_DF_C_STN) {
                    CU_ASSERT(b.time < b.t_compute + b.t_comm &&
                              b.time >= b.t_compute + b.t_comm / 2);
                } else {
                    ASSERT_CLOSE(b.time, b.t_compute + b.t_comm);
                }
            }
}

/* Collective by hand: C-stn on 4 x 4, AllGather A along rows and B along columns
 * in parallel, then the whole local GEMM. */
static void test_collective_by_hand(void)
{
    cost_ms_params p = tpu_v4_bf16();
    cost_ms_gemm g = {8 * SEQ, GPT3_F, GPT3_D};
    cost_ms_mesh mesh = {4, 4};
    double shard_a = 2.0 * g.m * g.k / 16, shard_b = 2.0 * g.k * g.n / 16;
    double ag = fmax(cost_ms_collective_time(&p, 4, shard_a), cost_ms_collective_time(&p, 4, shard_b));
    double gemm = cost_ms_gemm_time(&p, g.m / 4, g.n / 4, g.k);
    cost_ms_estimate e = cost_ms_time(&p, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_COLLECTIVE, 1);
    ASSERT_CLOSE(e.time, ag + gemm);
    ASSERT_CLOSE(e.utilization, 2.0 * g.m * g.n * g.k / (e.time * 16 * p.peak_flops));
}

/* MeshSlice by hand: prologue + (K-1) * max(AG_row, AG_col, GEMM) + epilogue,
 * each partial GEMM accumulating into C. */
static void test_meshslice_by_hand(void)
{
    cost_ms_params p = tpu_v4_bf16();
    cost_ms_gemm g = {8 * SEQ, GPT3_F, GPT3_D};
    cost_ms_mesh mesh = {4, 4};
    int64_t k = 8;
    double shard_a = 2.0 * g.m * g.k / 16 / k, shard_b = 2.0 * g.k * g.n / 16 / k;
    double ag_row = cost_ms_collective_time(&p, 4, shard_a), ag_col = cost_ms_collective_time(&p, 4, shard_b);
    double gemm = cost_ms_partial_gemm_time(&p, g.m / 4, g.n / 4, g.k / k, true);
    /* The gather stage also copies both sub-shards out of the local shards
     * (seed 004 3.1.2), read and written once at the HBM bandwidth. */
    double pre = fmax(ag_row, ag_col) + 2.0 * (shard_a + shard_b) / p.hbm_bw;
    double want = pre + (k - 1) * fmax(pre, gemm) + gemm;
    cost_ms_estimate e = cost_ms_time(&p, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_MESHSLICE, k);
    CU_ASSERT_FATAL(e.valid);
    ASSERT_CLOSE(e.time, want);
    CU_ASSERT_EQUAL(e.slices, k);
    /* Without overlap (seed 004 Table 3): K gathers and K GEMMs in series. */
    ASSERT_CLOSE(e.t_serial, (double)k * (pre + gemm));
    /* Without an HBM bandwidth there is no copy to price. */
    p.hbm_bw = 0;
    e = cost_ms_time(&p, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_MESHSLICE, k);
    gemm = cost_ms_partial_gemm_time(&p, g.m / 4, g.n / 4, g.k / k, true);
    ASSERT_CLOSE(e.t_serial, (double)k * (fmax(ag_row, ag_col) + gemm));
}

/* A partial GEMM is priced on the chip's roofline (HARDWARE.md: TPU v4
 * 2.75e14 FLOP/s, 1.2e12 B/s of HBM): a thin slice of C-stn's contraction
 * reads and writes the whole stationary C, so it is memory-bound; the same
 * GEMM with the whole contraction is compute-bound. */
static void test_partial_gemm_roofline(void)
{
    cost_ms_params p = tpu_v4_bf16();
    ASSERT_CLOSE(p.hbm_bw, 1.2e12);
    int64_t m = 4096, n = 9216;
    /* k = 128: 2 * 4096 * 9216 * 128 FLOPs take 35 us at 0.9 of peak, while
     * C (bf16, read and written) alone is 151 MB, 126 us. */
    double bytes = 2.0 * (4096.0 * 128 + 128.0 * 9216 + 2.0 * 4096 * 9216);
    ASSERT_CLOSE(cost_ms_partial_gemm_time(&p, m, n, 128, true), p.t_gemm_launch + bytes / 1.2e12);
    CU_ASSERT(cost_ms_partial_gemm_time(&p, m, n, 128, true) > 3 * cost_ms_gemm_time(&p, m, n, 128));
    /* Not accumulated (an LS or RS piece writes its output once). */
    double once = 2.0 * (4096.0 * 128 + 128.0 * 9216 + 4096.0 * 9216);
    ASSERT_CLOSE(cost_ms_partial_gemm_time(&p, m, n, 128, false), p.t_gemm_launch + once / 1.2e12);
    /* The whole contraction, k = 12288: compute-bound, the compute time. */
    ASSERT_CLOSE(cost_ms_partial_gemm_time(&p, m, n, 12288, false), cost_ms_gemm_time(&p, m, n, 12288));
    /* No memory term when the bandwidth is unknown. */
    p.hbm_bw = 0;
    ASSERT_CLOSE(cost_ms_partial_gemm_time(&p, m, n, 128, true), cost_ms_gemm_time(&p, m, n, 128));
}

/* Seed 004 Table 3: on TPUs that cannot overlap AG/RdS with computation,
 * MeshSlice runs its K partial collectives and K partial GEMMs one after
 * another (by hand in test_meshslice_by_hand).  K = 1 is Collective either
 * way; t_serial is never below the overlapped time; --no-overlap's
 * parameter makes the time itself the serial one. */
static void test_no_overlap(void)
{
    cost_ms_params p = tpu_v4_bf16();
    cost_ms_gemm g = {8 * SEQ, GPT3_F, GPT3_D};
    cost_ms_mesh mesh = {4, 4};
    cost_ms_estimate e = cost_ms_time(&p, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_MESHSLICE, 8);
    CU_ASSERT_FATAL(e.valid);
    cost_ms_estimate co = cost_ms_time(&p, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_COLLECTIVE, 1);
    ASSERT_CLOSE(co.t_serial, co.time);
    /* Slicing without overlap only adds launches, synchronizations and
     * thinner GEMMs: slower than Collective, faster than the overlap saves. */
    CU_ASSERT(e.t_serial > co.time);
    CU_ASSERT(e.time < co.time);
    for (int a = 0; a < COST_MS_ALGO_COUNT; a++) {
        cost_ms_estimate x = cost_ms_best_slices(&p, &g, mesh, COST_MS_DF_C_STN, (cost_ms_algo)a);
        CU_ASSERT_FATAL(x.valid);
        CU_ASSERT(x.t_serial >= x.time * (1 - 1e-12));
        cost_ms_params q = p;
        q.no_overlap = true;
        cost_ms_estimate y = cost_ms_time(&q, &g, mesh, COST_MS_DF_C_STN, (cost_ms_algo)a, x.slices);
        CU_ASSERT_FATAL(y.valid);
        ASSERT_CLOSE(y.time, x.t_serial);
    }
    /* Without overlap the K search keeps K = 1: slicing only costs. */
    p.no_overlap = true;
    CU_ASSERT_EQUAL(cost_ms_best_slices(&p, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_MESHSLICE).slices, 1);
}

/* The slicing copies (seed 004 3.1.2, cost_ms_slice_copy_time): each
 * iteration reads and writes its sub-shard once, none without slicing or
 * an HBM bandwidth; the estimate's t_slicing sums them over K.  GPT-3's FFN
 * up on 4x4, C-stn: A's shard m k / 16 and B's k n / 16 bf16 elements. */
static void test_slicing_copies(void)
{
    cost_ms_params p = tpu_v4_bf16();
    ASSERT_CLOSE(cost_ms_slice_copy_time(&p, 8e6, 4), 2 * 8e6 / 4 / 1.2e12);
    CU_ASSERT_EQUAL(cost_ms_slice_copy_time(&p, 8e6, 1), 0);
    cost_ms_gemm g = {8 * SEQ, GPT3_F, GPT3_D};
    cost_ms_mesh mesh = {4, 4};
    double shards = 2.0 * ((double)g.m * g.k + (double)g.k * g.n) / 16;
    cost_ms_estimate e = cost_ms_time(&p, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_MESHSLICE, 8);
    CU_ASSERT_FATAL(e.valid);
    ASSERT_CLOSE(e.t_slicing, 2 * shards / 1.2e12);
    CU_ASSERT_EQUAL(cost_ms_time(&p, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_MESHSLICE, 1).t_slicing, 0);
    CU_ASSERT_EQUAL(cost_ms_time(&p, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_WANG, 1).t_slicing, 0);
    /* Without an HBM bandwidth the copies (and the GEMMs' memory term)
     * cost nothing: in series, where the copies add, MeshSlice is faster. */
    cost_ms_params q = p;
    q.hbm_bw = 0;
    cost_ms_estimate f = cost_ms_time(&q, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_MESHSLICE, 8);
    CU_ASSERT_FATAL(f.valid);
    CU_ASSERT_EQUAL(f.t_slicing, 0);
    CU_ASSERT(e.t_serial > f.t_serial);
}

/* Fine slicing pays T_launch + (P-1) L_sync per slice: for large K the time
 * grows linearly with K (seed 004 3.1: "a large K increases the total
 * synchronization overhead"), and a coarse K leaves a large prologue. */
static void test_large_k_latency_bound(void)
{
    cost_ms_params p = tpu_v4_bf16();
    cost_ms_gemm g = {8 * SEQ, GPT3_F, GPT3_D}; /* C-stn slices D = 12288 */
    cost_ms_mesh mesh = {4, 4};
    int64_t k_big = 384; /* D / 4 / 384 = 8: one block per slice */
    CU_ASSERT_FATAL(cost_ms_slices_valid(&p, &g, mesh, COST_MS_DF_C_STN, k_big));
    cost_ms_estimate e = cost_ms_time(&p, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_MESHSLICE, k_big);
    CU_ASSERT_FATAL(e.valid);
    /* Every iteration pays at least one launch and three syncs. */
    CU_ASSERT(e.time >= (double)(k_big - 1) * (p.t_launch + 3 * p.l_sync));
    cost_ms_estimate half = cost_ms_time(&p, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_MESHSLICE, k_big / 2);
    CU_ASSERT(e.time > half.time);
    /* The best K lies strictly inside the valid range and beats both ends. */
    cost_ms_estimate best = cost_ms_best_slices(&p, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_MESHSLICE);
    cost_ms_estimate one = cost_ms_time(&p, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_MESHSLICE, 1);
    CU_ASSERT(best.slices > 1 && best.slices < k_big);
    CU_ASSERT(best.time < one.time && best.time < e.time);
}

/* The K search returns a valid K no slower than any other valid K. */
static void test_k_search_valid(void)
{
    cost_ms_params p = tpu_v4_bf16();
    cost_ms_gemm gs[3] = {{16 * SEQ, 3 * GPT3_D, GPT3_D}, {16 * SEQ, GPT3_D, GPT3_F}, {1536, GPT3_F, GPT3_D}};
    cost_ms_mesh meshes[2] = {{8, 4}, {2, 16}};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            cost_ms_dataflow df = cost_ms_choose_dataflow(&gs[i]);
            cost_ms_estimate best = cost_ms_best_slices(&p, &gs[i], meshes[j], df, COST_MS_ALGO_MESHSLICE);
            CU_ASSERT_FATAL(best.valid);
            CU_ASSERT(cost_ms_slices_valid(&p, &gs[i], meshes[j], df, best.slices));
            int64_t d = cost_ms_sliced_dim(&gs[i], df);
            /* Blocked slicing: both per-device sizes split into K blocks of B. */
            CU_ASSERT((d / meshes[j].rows) % (best.slices * p.block) == 0 || best.slices == 1);
            CU_ASSERT((d / meshes[j].cols) % (best.slices * p.block) == 0 || best.slices == 1);
            for (int64_t k = 1; k <= 64; k++) {
                cost_ms_estimate e = cost_ms_time(&p, &gs[i], meshes[j], df, COST_MS_ALGO_MESHSLICE, k);
                CU_ASSERT(e.valid == cost_ms_slices_valid(&p, &gs[i], meshes[j], df, k));
                if (e.valid)
                    CU_ASSERT(best.time <= e.time);
            }
        }
    /* A K that does not divide is refused with a reason, not estimated. */
    cost_ms_gemm g = {4096, 4096, 4096};
    cost_ms_estimate bad = cost_ms_time(&p, &g, (cost_ms_mesh){4, 4}, COST_MS_DF_C_STN, COST_MS_ALGO_MESHSLICE, 3);
    CU_ASSERT(!bad.valid);
    CU_ASSERT_PTR_NOT_NULL(bad.why);
}

/* Mesh-shape search by hand, traffic only (bytes / 1 byte/s), 4 chips:
 * C[32,4] = A[32,8] * B[8,4]; A (256) is the largest: A-stn, which
 * AllGathers B (32 bytes) along columns and ReduceScatters C (128 bytes)
 * along rows.  Per chip the shards are 32/4 and 128/4 bytes:
 *   1 x 4: RdS over 4 chips = 3 * 32 = 96
 *   2 x 2: AG over 2 = 1 * 8, then RdS over 2 = 1 * 32: 40 (no overlap)
 *   4 x 1: AG over 4 = 3 * 8 = 24                          <- best */
static void test_mesh_search_by_hand(void)
{
    cost_ms_params p = traffic_only();
    cost_ms_layer l = {.name = "fc", .gemm = {32, 4, 8}, .repeat = 1};
    CU_ASSERT_EQUAL(cost_ms_choose_dataflow(&l.gemm), COST_MS_DF_A_STN);
    double want[3] = {96, 40, 24};
    cost_ms_mesh meshes[3] = {{1, 4}, {2, 2}, {4, 1}};
    for (int i = 0; i < 3; i++) {
        cost_ms_tune_result t = cost_ms_tune_mesh(&p, &l, 1, meshes[i], COST_MS_ALGO_COLLECTIVE, -1, 0, NULL);
        CU_ASSERT_FATAL(t.found);
        CU_ASSERT(fabs(t.time - want[i]) < 1e-6);
    }
    cost_ms_layer_choice c;
    cost_ms_tune_result best = cost_ms_tune(&p, &l, 1, 4, COST_MS_ALGO_COLLECTIVE, -1, 0, &c);
    CU_ASSERT_FATAL(best.found);
    CU_ASSERT_EQUAL(best.mesh.rows, 4);
    CU_ASSERT_EQUAL(best.mesh.cols, 1);
    CU_ASSERT_EQUAL(c.df, COST_MS_DF_A_STN);
    /* Seed 004 2.3.1: with equal bandwidths the traffic cost is least when
     * (rows - 1) / (cols - 1) = size(row-moving) / size(column-moving); the
     * same search on 16 chips for A (4096) vs B (256) moving, C-stn. */
    cost_ms_layer l2 = {.name = "os", .gemm = {256, 16, 16}, .repeat = 1}; /* A = 4096, B = 256, C = 4096: C-stn */
    cost_ms_tune_result b2 = cost_ms_tune(&p, &l2, 1, 16, COST_MS_ALGO_COLLECTIVE, -1, 0, NULL);
    CU_ASSERT_FATAL(b2.found);
    /* A moves along rows (over cols chips): the big matrix wants few columns. */
    CU_ASSERT(b2.mesh.rows > b2.mesh.cols);
}

/* Overlap can only help: MeshSlice (best K) is never slower than Collective,
 * and never faster than its compute or than one direction's traffic. */
static void test_meshslice_bounds(void)
{
    cost_ms_params p = tpu_v4_bf16();
    cost_ms_layer ls[4];
    for (int64_t chips = 16; chips <= 256; chips *= 2) {
        fc_layers(chips / 2 * SEQ, GPT3_D, GPT3_F, ls);
        for (int i = 0; i < 4; i++)
            for (int64_t r = 1; r <= chips; r *= 2) {
                cost_ms_mesh mesh = {r, chips / r};
                cost_ms_dataflow df = cost_ms_choose_dataflow(&ls[i].gemm);
                cost_ms_estimate ms = cost_ms_best_slices(&p, &ls[i].gemm, mesh, df, COST_MS_ALGO_MESHSLICE);
                cost_ms_estimate co = cost_ms_time(&p, &ls[i].gemm, mesh, df, COST_MS_ALGO_COLLECTIVE, 1);
                if (!co.valid)
                    continue;
                CU_ASSERT_FATAL(ms.valid);
                CU_ASSERT(ms.time <= co.time * (1 + 1e-12));
                CU_ASSERT(ms.time >= ms.t_compute);
                CU_ASSERT(ms.utilization <= p.gemm_eff + 1e-12);
            }
    }
}

/* Seed 004 2.3.2: Cannon needs a square mesh and its traffic is higher: with
 * free GEMMs (pure communication) it is slower than Collective. */
static void test_cannon_square_and_traffic(void)
{
    cost_ms_params p = tpu_v4_bf16();
    cost_ms_gemm g = {32 * SEQ, GPT3_F, GPT3_D};
    cost_ms_estimate rect = cost_ms_time(&p, &g, (cost_ms_mesh){8, 4}, COST_MS_DF_C_STN, COST_MS_ALGO_CANNON, 1);
    CU_ASSERT(!rect.valid);
    CU_ASSERT_PTR_NOT_NULL(rect.why);
    p.peak_flops = 1e30;
    p.t_gemm_launch = 0;
    for (int df = 0; df < COST_MS_DF_COUNT; df++) {
        cost_ms_estimate ca = cost_ms_time(&p, &g, (cost_ms_mesh){8, 8}, (cost_ms_dataflow)df, COST_MS_ALGO_CANNON, 1);
        cost_ms_estimate co = cost_ms_time(&p, &g, (cost_ms_mesh){8, 8}, (cost_ms_dataflow)df, COST_MS_ALGO_COLLECTIVE, 1);
        CU_ASSERT_FATAL(ca.valid && co.valid);
        CU_ASSERT(ca.time > co.time);
    }
}

/* Seed 004 2.3.3: SUMMA pays D + P - 1 synchronizations per broadcast in
 * each of its K = lcm(rows, cols) iterations, O(K^2) in all, against
 * Collective's P - 1.  With free bandwidth and compute only synchronization
 * and launches remain, and SUMMA's time over Collective's grows with q. */
static void test_summa_sync_growth(void)
{
    cost_ms_params p = tpu_v4_bf16();
    p.bw_ring = p.bw_line = p.bw_link = 1e30;
    p.peak_flops = 1e30;
    p.hbm_bw = 0; /* no memory term either */
    p.t_gemm_launch = 0;
    double prev_ratio = 0;
    for (int64_t q = 4; q <= 32; q *= 2) {
        cost_ms_gemm g = {q * q / 2 * SEQ, GPT3_F, GPT3_D};
        cost_ms_mesh mesh = {q, q};
        cost_ms_estimate su = cost_ms_time(&p, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_SUMMA, 1);
        cost_ms_estimate co = cost_ms_time(&p, &g, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_COLLECTIVE, 1);
        CU_ASSERT_FATAL(su.valid && co.valid);
        CU_ASSERT_EQUAL(su.slices, q);
        /* One launch plus q steps of L_sync per broadcast, q iterations. */
        CU_ASSERT(su.time >= (double)q * (p.t_launch + (double)q * p.l_sync) * (1 - 1e-12));
        ASSERT_CLOSE(co.time, p.t_launch + (double)(q - 1) * p.l_sync);
        double ratio = su.time / co.time;
        CU_ASSERT(ratio > prev_ratio);
        prev_ratio = ratio;
    }
}

/* Wang et al. overlap one direction only: never better than MeshSlice with
 * its best K on the paper's FC layers (seed 004 5.1), and better than
 * Collective when the decomposed direction carries real traffic. */
static void test_wang_between(void)
{
    cost_ms_params p = tpu_v4_bf16();
    cost_ms_layer ls[4];
    fc_layers(128 * SEQ, GPT3_D, GPT3_F, ls);
    cost_ms_mesh mesh = {16, 16};
    for (int i = 0; i < 4; i++) {
        cost_ms_dataflow df = cost_ms_choose_dataflow(&ls[i].gemm);
        cost_ms_estimate wa = cost_ms_time(&p, &ls[i].gemm, mesh, df, COST_MS_ALGO_WANG, 1);
        cost_ms_estimate co = cost_ms_time(&p, &ls[i].gemm, mesh, df, COST_MS_ALGO_COLLECTIVE, 1);
        cost_ms_estimate ms = cost_ms_best_slices(&p, &ls[i].gemm, mesh, df, COST_MS_ALGO_MESHSLICE);
        CU_ASSERT_FATAL(wa.valid && co.valid && ms.valid);
        CU_ASSERT(wa.time < co.time);
        CU_ASSERT(ms.time < wa.time);
        CU_ASSERT_EQUAL(wa.slices, 16);
    }
}

/* The model refuses what cannot run instead of estimating it. */
static void test_invalid_configurations(void)
{
    cost_ms_params p = tpu_v4_bf16();
    cost_ms_gemm odd = {1001, 1003, 1005};
    cost_ms_estimate e = cost_ms_time(&p, &odd, (cost_ms_mesh){2, 2}, COST_MS_DF_C_STN, COST_MS_ALGO_COLLECTIVE, 1);
    CU_ASSERT(!e.valid);
    CU_ASSERT_PTR_NOT_NULL(e.why);
    cost_ms_layer l = {.name = "odd", .gemm = odd, .repeat = 1};
    cost_ms_tune_result t = cost_ms_tune(&p, &l, 1, 4, COST_MS_ALGO_MESHSLICE, -1, 0, NULL);
    CU_ASSERT(!t.found);
    /* One chip always fits: no communication, only the GEMM. */
    t = cost_ms_tune(&p, &l, 1, 1, COST_MS_ALGO_MESHSLICE, -1, 0, NULL);
    CU_ASSERT_FATAL(t.found);
    ASSERT_CLOSE(t.time, cost_ms_gemm_time(&p, 1001, 1003, 1005));
    cost_ms_params zero = p;
    zero.peak_flops = 0;
    cost_ms_gemm g = {4096, 4096, 4096};
    CU_ASSERT(!cost_ms_time(&zero, &g, (cost_ms_mesh){2, 2}, COST_MS_DF_C_STN, COST_MS_ALGO_MESHSLICE, 1).valid);
    CU_ASSERT(!cost_ms_time(&p, &g, (cost_ms_mesh){0, 2}, COST_MS_DF_C_STN, COST_MS_ALGO_MESHSLICE, 1).valid);
    CU_ASSERT(!cost_ms_time(&p, &g, (cost_ms_mesh){2, 2}, COST_MS_DF_C_STN, COST_MS_ALGO_MESHSLICE, 0).valid);
    CU_ASSERT(!cost_ms_time(&p, &g, (cost_ms_mesh){2, 2}, (cost_ms_dataflow)7, COST_MS_ALGO_MESHSLICE, 1).valid);
    CU_ASSERT_EQUAL(cost_ms_algo_lookup("meshslice"), COST_MS_ALGO_MESHSLICE);
    CU_ASSERT_EQUAL(cost_ms_algo_lookup("mesh"), -1);
    CU_ASSERT_EQUAL(cost_ms_dataflow_lookup("ls"), COST_MS_DF_A_STN);
}

/* Bytes a GEMM X[m,n] = Y[m,k] Z[k,n] moves along mesh rows and columns
 * under `df` (seed 004 Fig. 1), recomputed here from the definitions. */
static void moved(const cost_ms_gemm *g, cost_ms_dataflow df, double *rows, double *cols)
{
    double x = (double)g->m * g->n, y = (double)g->m * g->k, z = (double)g->k * g->n;
    *rows = df == COST_MS_DF_A_STN ? x : y;
    *cols = df == COST_MS_DF_B_STN ? x : z;
}

/* Seed 004 3.2.1: the backward GEMMs keep the same matrix stationary and
 * move every matrix (or its gradient) in the forward's direction, so each
 * moves the same bytes the same way; and each does the forward's FLOPs. */
static void test_training_gemms(void)
{
    cost_ms_layer fwd = {.name = "up", .gemm = {8 * SEQ, GPT3_F, GPT3_D}, .repeat = 2};
    for (int df = 0; df < COST_MS_DF_COUNT; df++) {
        cost_ms_layer out[3];
        cost_ms_training_gemms(&fwd, (cost_ms_dataflow)df, out);
        double r0, c0;
        moved(&fwd.gemm, (cost_ms_dataflow)df, &r0, &c0);
        CU_ASSERT_EQUAL(out[0].df, df);
        for (int i = 0; i < 3; i++) {
            double r, c;
            CU_ASSERT(out[i].fixed_df);
            CU_ASSERT_EQUAL(out[i].repeat, 2);
            moved(&out[i].gemm, out[i].df, &r, &c);
            CU_ASSERT_EQUAL(r, r0);
            CU_ASSERT_EQUAL(c, c0);
            CU_ASSERT_EQUAL(cost_ms_gemm_flops(&out[i].gemm), cost_ms_gemm_flops(&fwd.gemm));
        }
        /* The stationary matrix of the backward GEMMs is never the one the
         * forward moves: the dataflows differ from each other. */
        CU_ASSERT(out[1].df != out[0].df && out[2].df != out[0].df && out[1].df != out[2].df);
    }
    /* The tuner honours the fixed dataflows. */
    cost_ms_params p = tpu_v4_bf16();
    cost_ms_layer out[3];
    cost_ms_training_gemms(&fwd, COST_MS_DF_B_STN, out);
    cost_ms_layer_choice ch[3];
    cost_ms_tune_result t = cost_ms_tune(&p, out, 3, 16, COST_MS_ALGO_MESHSLICE, -1, 0, ch);
    CU_ASSERT_FATAL(t.found);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL(ch[i].df, out[i].df);
}

/* A common K for all layers is valid for every layer and no better than
 * per-layer K (seed 004 3.2.2 tunes K per layer). */
static void test_common_k(void)
{
    cost_ms_params p = tpu_v4_bf16();
    cost_ms_layer ls[4];
    fc_layers(32 * SEQ, GPT3_D, GPT3_F, ls);
    cost_ms_tune_result per = cost_ms_tune(&p, ls, 4, 64, COST_MS_ALGO_MESHSLICE, -1, 0, NULL);
    CU_ASSERT_FATAL(per.found);
    int64_t k = cost_ms_best_common_k(&p, ls, 4, per.mesh, -1);
    CU_ASSERT_FATAL(k >= 1);
    cost_ms_tune_result com = cost_ms_tune_mesh(&p, ls, 4, per.mesh, COST_MS_ALGO_MESHSLICE, -1, k, NULL);
    CU_ASSERT_FATAL(com.found);
    CU_ASSERT(com.time >= per.time * (1 - 1e-12));
    for (int i = 0; i < 4; i++)
        CU_ASSERT(cost_ms_slices_valid(&p, &ls[i].gemm, per.mesh, cost_ms_choose_dataflow(&ls[i].gemm), k));
}

/* The authors' fitted TPU v4 figures (Autotuner.py of
 * github.com/hwnam831/meshslice; meshslice_fit.c) replace the profile's
 * communication figures and GEMM rate, and every collective kind uses its own. */
static void test_fit_seed004(void)
{
    cost_ms_params p = tpu_v4_bf16();
    double peak = p.peak_flops, hbm = p.hbm_bw;
    cost_ms_params_fit_seed004(&p);
    ASSERT_CLOSE(p.t_launch, 13e-6);
    ASSERT_CLOSE(p.t_launch_rds, 26e-6);
    ASSERT_CLOSE(p.t_launch_sr, 13e-6);
    ASSERT_CLOSE(p.l_sync, 5e-6);
    ASSERT_CLOSE(p.l_sync_sr, 5e-5);
    ASSERT_CLOSE(p.bw_ring, 79.751e9);
    ASSERT_CLOSE(p.bw_line, 79.751e9);
    ASSERT_CLOSE(p.bw_ring_rds, 63.167e9);
    ASSERT_CLOSE(p.bw_link, 35.224e9);
    ASSERT_CLOSE(p.bw_sr, 2 * 35.224e9);
    ASSERT_CLOSE(p.gemm_eff * p.peak_flops, 242.0 * 1024 * 1024 * 1024 * 1024);
    CU_ASSERT_EQUAL(p.t_gemm_launch, 0);
    ASSERT_CLOSE(p.peak_flops, peak);
    ASSERT_CLOSE(p.hbm_bw, hbm);
    /* Eq. 5 per kind; a 2-chip axis gets the fitted ring figure too. */
    ASSERT_CLOSE(cost_ms_collective_time(&p, 2, 4e6), 13e-6 + 5e-6 + 4e6 / 79.751e9);
    ASSERT_CLOSE(cost_ms_reduce_scatter_time(&p, 8, 1e6), 26e-6 + 7 * (5e-6 + 1e6 / 63.167e9));
    CU_ASSERT_EQUAL(cost_ms_reduce_scatter_time(&p, 1, 1e6), 0);

    /* A-stn Collective on 4 x 4: AllGather B over the rows, the GEMM, then
     * the ReduceScatter of C over the columns at its own figures. */
    cost_ms_gemm g = {8 * SEQ, GPT3_D, GPT3_F};
    cost_ms_mesh mesh = {4, 4};
    double ag = cost_ms_collective_time(&p, 4, 2.0 * g.k * g.n / 16);
    double rds = cost_ms_reduce_scatter_time(&p, 4, 2.0 * g.m * g.n / 16);
    double gemm = cost_ms_partial_gemm_time(&p, g.m / 4, g.n, g.k / 4, false);
    cost_ms_estimate e = cost_ms_time(&p, &g, mesh, COST_MS_DF_A_STN, COST_MS_ALGO_COLLECTIVE, 1);
    CU_ASSERT_FATAL(e.valid);
    ASSERT_CLOSE(e.time, ag + gemm + rds);

    /* Wang on C-stn: one ring as 4 SendRecv steps (half the shard each way,
     * T_launch_sr + L_sync_sr + shard / (2 * 35.224e9)) under 4 partial
     * GEMMs, the other ring's AllGather whole before them; the better ring. */
    cost_ms_gemm o = {8 * SEQ, GPT3_F, GPT3_D};
    double sa = 2.0 * o.m * o.k / 16, sb = 2.0 * o.k * o.n / 16;
    double gq = cost_ms_partial_gemm_time(&p, o.m / 4, o.n / 4, o.k / 4, true);
    double via_row = cost_ms_collective_time(&p, 4, sb) + gq + 3 * fmax(gq, 13e-6 + 5e-5 + sa / (2 * 35.224e9));
    double via_col = cost_ms_collective_time(&p, 4, sa) + gq + 3 * fmax(gq, 13e-6 + 5e-5 + sb / (2 * 35.224e9));
    cost_ms_estimate w = cost_ms_time(&p, &o, mesh, COST_MS_DF_C_STN, COST_MS_ALGO_WANG, 1);
    CU_ASSERT_FATAL(w.valid);
    ASSERT_CLOSE(w.time, fmin(via_row, via_col));
}

/* --collective-overlap: the authors' GSPMD_OS/LS/RS (CostModel.py) expose a
 * ReduceScatter, or OS's AllGather along the rows, and hide the other
 * AllGather behind the GEMM; with nothing overlapped it is Collective. */
static void test_collective_overlap(void)
{
    cost_ms_params p = tpu_v4_bf16();
    cost_ms_mesh mesh = {4, 4};
    cost_ms_gemm g = {8 * SEQ, GPT3_F, GPT3_D};
    double row[3], col[3], gemm[3], want[3];
    /* C-stn: A along rows (exposed), B along columns (hidden), both gathered. */
    row[0] = cost_ms_collective_time(&p, 4, 2.0 * g.m * g.k / 16);
    col[0] = cost_ms_collective_time(&p, 4, 2.0 * g.k * g.n / 16);
    gemm[0] = cost_ms_partial_gemm_time(&p, g.m / 4, g.n / 4, g.k, false);
    want[0] = row[0] + fmax(gemm[0], col[0]);
    /* A-stn: C reduce-scattered along rows (exposed), B gathered along columns. */
    row[1] = cost_ms_reduce_scatter_time(&p, 4, 2.0 * g.m * g.n / 16);
    col[1] = cost_ms_collective_time(&p, 4, 2.0 * g.k * g.n / 16);
    gemm[1] = cost_ms_partial_gemm_time(&p, g.m / 4, g.n, g.k / 4, false);
    want[1] = row[1] + fmax(gemm[1], col[1]);
    /* B-stn: A gathered along rows (hidden), C reduce-scattered along columns. */
    row[2] = cost_ms_collective_time(&p, 4, 2.0 * g.m * g.k / 16);
    col[2] = cost_ms_reduce_scatter_time(&p, 4, 2.0 * g.m * g.n / 16);
    gemm[2] = cost_ms_partial_gemm_time(&p, g.m, g.n / 4, g.k / 4, false);
    want[2] = col[2] + fmax(gemm[2], row[2]);
    for (int df = 0; df < COST_MS_DF_COUNT; df++) {
        cost_ms_estimate plain = cost_ms_time(&p, &g, mesh, (cost_ms_dataflow)df, COST_MS_ALGO_COLLECTIVE, 1);
        p.collective_overlap = true;
        cost_ms_estimate e = cost_ms_time(&p, &g, mesh, (cost_ms_dataflow)df, COST_MS_ALGO_COLLECTIVE, 1);
        p.collective_overlap = false;
        CU_ASSERT_FATAL(e.valid && plain.valid);
        ASSERT_CLOSE(e.time, want[df]);
        ASSERT_CLOSE(e.t_serial, plain.time);
        CU_ASSERT(e.time < plain.time);
    }
}

/* The block's non-GEMM layers (cost_ms_nongemm_time): forward only on a
 * machine of 1 FLOP/s and 1 B/s with one byte per element, by hand; with
 * the backward pass the products triple and the element-wise layers take
 * 5/2 of their forward bytes; bad dims are refused. */
static void test_nongemm_by_hand(void)
{
    cost_ms_params p;
    memset(&p, 0, sizeof p);
    p.peak_flops = p.gemm_eff = p.hbm_bw = p.elem_bytes = 1;
    /* B = 2, S = 8, H = 2, E = 4 (D = 8), F = 32 on 4 chips: 4 tokens per chip. */
    cost_ms_block_dims d = {2, 8, 2, 4, 8, 32};
    cost_ms_nongemm f, t;
    CU_ASSERT_EQUAL(cost_ms_nongemm_time(&p, &d, 4, false, &f), 0);
    CU_ASSERT_EQUAL(f.n, 6);
    double scores = 4.0 * 8 * 2, qkv = 4.0 * 8, model = 4.0 * 8, ffn = 4.0 * 32;
    double want_flops[6] = {2 * scores * 4, 2 * scores * 4, 0, 0, 0, 0};
    double want_bytes[6] = {2 * qkv + scores, scores + 2 * qkv, 2 * scores, 2 * 2 * model, 2 * ffn, 2 * 3 * model};
    double sum = 0;
    for (int i = 0; i < 6; i++) {
        CU_ASSERT_DOUBLE_EQUAL(f.layer[i].flops, want_flops[i], 1e-9);
        CU_ASSERT_DOUBLE_EQUAL(f.layer[i].bytes, want_bytes[i], 1e-9);
        CU_ASSERT_DOUBLE_EQUAL(f.layer[i].time, fmax(want_flops[i], want_bytes[i]), 1e-9);
        sum += f.layer[i].time;
    }
    CU_ASSERT_DOUBLE_EQUAL(f.time, sum, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(f.flops, want_flops[0] + want_flops[1], 1e-9);
    CU_ASSERT_EQUAL(cost_ms_nongemm_time(&p, &d, 4, true, &t), 0);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_DOUBLE_EQUAL(t.layer[i].flops, 3 * f.layer[i].flops, 1e-9);
        CU_ASSERT_DOUBLE_EQUAL(t.layer[i].bytes, 3 * f.layer[i].bytes, 1e-9);
    }
    for (int i = 2; i < 5; i++)
        CU_ASSERT_DOUBLE_EQUAL(t.layer[i].bytes, 2.5 * f.layer[i].bytes, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(t.layer[5].bytes, 2 * f.layer[5].bytes, 1e-9);
    cost_ms_block_dims bad = d;
    bad.heads = 0;
    CU_ASSERT_EQUAL(cost_ms_nongemm_time(&p, &bad, 4, true, &t), -1);
    CU_ASSERT_EQUAL(cost_ms_nongemm_time(&p, &d, 0, true, &t), -1);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"params from the tpu-v4 profile", test_params_from_profile},
        {"collective formula (Eq. 5)", test_collective_formula},
        {"GEMM time pads to the MXU tile", test_gemm_time_padding},
        {"dataflow heuristic on Table 1 shapes", test_dataflow_heuristic},
        {"K = 1 MeshSlice is Collective", test_k1_is_collective},
        {"Collective by hand", test_collective_by_hand},
        {"MeshSlice pipeline by hand", test_meshslice_by_hand},
        {"large K is latency-bound", test_large_k_latency_bound},
        {"K search picks the best valid K", test_k_search_valid},
        {"mesh-shape search by hand", test_mesh_search_by_hand},
        {"MeshSlice between compute and Collective", test_meshslice_bounds},
        {"Cannon: square mesh, more traffic", test_cannon_square_and_traffic},
        {"SUMMA synchronization grows with the mesh", test_summa_sync_growth},
        {"Wang between Collective and MeshSlice", test_wang_between},
        {"invalid configurations are refused", test_invalid_configurations},
        {"one K for all layers", test_common_k},
        {"training GEMMs keep directions", test_training_gemms},
        {"partial GEMM on the HBM roofline", test_partial_gemm_roofline},
        {"no overlap: the stages in series", test_no_overlap},
        {"the slicing copies by hand", test_slicing_copies},
        {"the authors' fitted TPU v4 figures", test_fit_seed004},
        {"Collective hiding one AllGather", test_collective_overlap},
        {"the block's non-GEMM layers by hand", test_nongemm_by_hand},
    };
    einc_add_suite("meshslice_model", tests, (int)(sizeof tests / sizeof tests[0]));
}
