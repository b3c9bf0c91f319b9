/*
 * test_cost_bound.c - the lower bound on a step (cost_lower_bound,
 * passes/costmodel/cost_bound.c): the matmul of docs/cost-model.md by
 * hand, no traffic for elementwise work or a weight declared replicated,
 * repeated blocks counted per trip, the same bound before and after
 * planning, below the plan einc picks for seed 000's FSDP + TP block, and
 * below the calibrated host's own einsum estimates.
 *
 * Programs are compiled by the frontend and planned by the default
 * pipeline, as the driver does.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "frontend.h"
#include "pass.h"
#include "test_util.h"

/* |got - want| <= 1e-9 of want: the same arithmetic in another order. */
#define ASSERT_SAME(got, want) CU_ASSERT(fabs((got) - (want)) <= 1e-9 * fabs(want))

/* Compiles `src`; with `hw`, runs the default pipeline on it too.  NULL
 * on any error (reported on stderr by the diagnostics). */
static ir_module *compile(const char *src, const cost_hw *hw)
{
    static diag_ctx d;
    diag_init(&d, "t.ein", src, strlen(src));
    fe_options o = {0};
    ir_module *m = fe_compile(src, strlen(src), &o, &d);
    if (!m || !hw)
        return m;
    pass_registry reg;
    pass_registry_init(&reg);
    pass_manager pm;
    memset(&pm, 0, sizeof pm);
    pm.registry = &reg;
    pm.dump = stdout;
    pass_ctx ctx = {.diag = &d, .hw = hw};
    int rc = pass_manager_parse(&pm, PASS_DEFAULT_PIPELINE, stderr);
    if (rc == 0)
        rc = pass_manager_run(&pm, &ctx, m);
    pass_registry_free(&reg);
    if (rc != 0) {
        ir_module_free(m);
        return NULL;
    }
    return m;
}

static cost_bound bound_of(const ir_module *m, const cost_hw *hw)
{
    cost_bound b;
    CU_ASSERT_EQUAL(cost_lower_bound(m, hw, &b), 0);
    return b;
}

/* The bound of `src`, compiled but not planned, on `hw`. */
static cost_bound bound_of_src(const char *src, const cost_hw *hw)
{
    ir_module *m = compile(src, NULL);
    CU_ASSERT_FATAL(m != NULL);
    cost_bound b = bound_of(m, hw);
    ir_module_free(m);
    return b;
}

/* C = A B with M = N = K = 1024 in bf16 on a 2 x 2 mesh of TPU v5p. */
static const char *MATMUL = "mesh X = 2, Y = 2\n"
                            "dim M = 1024, N = 1024, K = 1024\n"
                            "input A[M_X, K_Y] : bf16\n"
                            "param B[K_X, N_Y] : %s\n"
                            "C[M, N] = A[M, K] * B[K, N]\n"
                            "output C[M_X, N_Y]\n";

static ir_module *matmul(const char *b_decl, const cost_hw *hw)
{
    char src[512];
    snprintf(src, sizeof src, MATMUL, b_decl);
    return compile(src, hw);
}

static void test_matmul_by_hand(void)
{
    cost_hw hw = test_load_hw("tpu-v5p");
    ir_module *m = matmul("bf16", NULL);
    CU_ASSERT_FATAL(m != NULL);
    cost_bound b = bound_of(m, &hw);
    /* 2 M N K = 2^31 model FLOPs over 4 chips at 4.59e14 bf16 FLOP/s. */
    ASSERT_SAME(b.flops, 2147483648.0);
    ASSERT_SAME(b.compute_s, 2147483648.0 / (4 * 4.59e14)); /* 1.1696 us */
    /* F / P = 2^28 multiply-adds: 3 (2^28)^(2/3) = 3 x 2^18 x 4^(1/3)
     * entries touched, 3 x 2^20 / 4 = 786432 held: 461951 words of 2
     * bytes, 923902 bytes, over 2 x 2 axes x 1.8e11 B/s = 1.2832 us. */
    double words = 3 * 262144 * 1.5874010519681994 - 786432;
    ASSERT_SAME(b.comm_bytes, 2 * words);
    ASSERT_SAME(b.comm_s, 2 * words / (2 * 2 * 1.8e11));
    ASSERT_SAME(b.total_s, b.compute_s + b.comm_s);
    ASSERT_SAME(b.overlap_s, b.comm_s);
    printf("\n  matmul 1024^3 bf16 on 4 v5p: compute %.4f us, %.0f bytes, comm %.4f us,"
           " total %.4f us\n", b.compute_s * 1e6, b.comm_bytes, b.comm_s * 1e6, b.total_s * 1e6);
    ir_module_free(m);

    /* The plan does not change it: the same numbers after the pipeline. */
    m = matmul("bf16", &hw);
    CU_ASSERT_FATAL(m != NULL);
    cost_bound after = bound_of(m, &hw);
    ASSERT_SAME(after.total_s, b.total_s);
    CU_ASSERT(after.total_s <= m->totals.step_time);
    ir_module_free(m);
}

/* B declared replicated: every chip holds it whole, and the row-sharded
 * product needs no traffic (2^18 + 2^20 + 2^18 held > 3 x 2^18 x 4^(1/3)). */
static void test_replicated_weight(void)
{
    cost_hw hw = test_load_hw("tpu-v5p");
    cost_bound b = bound_of_src("mesh X = 2, Y = 2\n"
                                "dim M = 1024, N = 1024, K = 1024\n"
                                "input A[M_XY, K] : bf16\n"
                                "param B[K, N] : bf16\n"
                                "C[M, N] = A[M, K] * B[K, N]\n"
                                "output C[M_XY, N]\n",
                                &hw);
    CU_ASSERT_EQUAL(b.comm_bytes, 0);
    CU_ASSERT(b.compute_s > 0);
}

/* A batched matmul of g slices of 512^3 on 4 chips: with g = 2 each
 * slice is spread over 2 chips, f = 2^26 and 3 f^(2/3) = 3 x 2^17 x
 * 2^(1/3) entries touched against 3 x 2^17 held; with g = 4 every chip
 * gets a slice whole and moves nothing. */
static void test_batch_slices(void)
{
    cost_hw hw = test_load_hw("tpu-v5p");
    for (int g = 2; g <= 4; g += 2) {
        char src[512];
        snprintf(src, sizeof src,
                 "mesh X = 4\n"
                 "dim G = %d, M = 512, N = 512, K = 512\n"
                 "input A[G, M_X, K] : f32\n"
                 "param B[G, K, N_X] : f32\n"
                 "C[G, M, N] = A[G, M, K] * B[G, K, N]\n"
                 "output C[G, M_X, N]\n",
                 g);
        cost_bound b = bound_of_src(src, &hw);
        double words = g == 2 ? 3 * 131072 * (cbrt(2.0) - 1) : 0; /* 102205 */
        CU_ASSERT(fabs(b.comm_bytes - 4 * words) <= 1e-6 * 4 * 131072);
    }
}

static void test_elementwise_no_comm(void)
{
    cost_hw hw = test_load_hw("tpu-v5p");
    cost_bound b = bound_of_src("mesh X = 4\n"
                                "dim M = 256, N = 512\n"
                                "input A[M_X, N] : f32\n"
                                "B[M, N] = exp(A[M, N]) + A[M, N]\n"
                                "output B[M, N]\n",
                                &hw);
    CU_ASSERT_EQUAL(b.flops, 0);
    CU_ASSERT_EQUAL(b.comm_bytes, 0);
    CU_ASSERT_EQUAL(b.comm_s, 0);
    /* What is left is reading A once: 256 x 512 f32 over 4 chips. */
    ASSERT_SAME(b.hbm_bytes, 256.0 * 512 * 4 / 4);
    ASSERT_SAME(b.total_s, b.hbm_bytes / hw.hbm_bw);
}

/* The HBM part: every param, input and state the step's compute reads,
 * once, over P (seed 002's "theoretical step time", params plus KV cache
 * over the total HBM bandwidth).  A cache written in place and read
 * counts once; a table read through a gather counts nothing (its rows
 * are picked); a calibrated profile has no HBM part. */
static void test_hbm_reads_args_once(void)
{
    cost_hw hw = test_load_hw("tpu-v5e");
    const char *src = "mesh X = 4\n"
                      "dim B = 2, T = 1, S = 64, D = 256, E = 256, V = 1024\n"
                      "input Tok[B, T] : i32\n"
                      "input Pos[] : i32\n"
                      "state Kc[B, S, E_X] : bf16\n"
                      "param Emb[V_X, D] : bf16\n"
                      "param Wk[D, E_X] : bf16\n"
                      "X[B, T, D] = Emb[Tok[B, T], D]\n"
                      "Kn[B, T, E] = X[B, T, D] * Wk[D, E]\n"
                      "Kc[B, Pos:T, E] = Kn[B, T, E]\n"
                      "Sc[B, T, S] = Kn[B, T, E] * Kc[B, S, E]\n"
                      "output Sc[B, T, S]\n";
    ir_module *m = compile(src, NULL);
    CU_ASSERT_FATAL(m != NULL);
    cost_bound b = bound_of(m, &hw);
    /* Tok 2 x 4, Kc 2 x 64 x 256 x 2, Wk 256 x 256 x 2 bytes (Pos is read
     * by the write, not by a compute op); Emb not at all. */
    double want = (2.0 * 4 + 2.0 * 64 * 256 * 2 + 256.0 * 256 * 2) / 4;
    ASSERT_SAME(b.hbm_bytes, want);
    ASSERT_SAME(b.memory_s, want / hw.hbm_bw);
    CU_ASSERT(b.memory_s > b.compute_s);
    ASSERT_SAME(b.total_s, b.memory_s + b.comm_s);
    ASSERT_SAME(b.overlap_s, fmax(b.memory_s, b.comm_s));
    cost_hw host = test_load_hw("host");
    CU_ASSERT_FATAL(host.measured);
    CU_ASSERT_EQUAL(bound_of(m, &host).memory_s, 0);
    ir_module_free(m);
}

/* One FFW layer, and the same layer as the body of `repeat N` (N = 8). */
static void test_repeat_counts_trips(void)
{
    cost_hw hw = test_load_hw("tpu-v5p");
    cost_bound b1 = bound_of_src("mesh X = 2, Y = 2\n"
                                 "dim B = 2048, D = 512, F = 2048\n"
                                 "input In[B_X, D_Y] : f32\n"
                                 "param Win[D_X, F_Y] : f32\n"
                                 "param Wout[F_Y, D_X] : f32\n"
                                 "Z[B, F] = In[B, D] * Win[D, F]\n"
                                 "Y[B, D] = Z[B, F] * Wout[F, D]\n"
                                 "output Y[B_X, D_Y]\n",
                                 &hw);
    cost_bound b8 = bound_of_src("mesh X = 2, Y = 2\n"
                                 "dim B = 2048, D = 512, F = 2048, N = 8\n"
                                 "input In[B_X, D_Y] : f32\n"
                                 "param Win[N, D_X, F_Y] : f32\n"
                                 "param Wout[N, F_Y, D_X] : f32\n"
                                 "repeat N {\n"
                                 "  Z[B, F] = In[B, D] * Win[D, F]\n"
                                 "  In[B, D] = Z[B, F] * Wout[F, D]\n"
                                 "}\n"
                                 "output In[B_X, D_Y]\n",
                                 &hw);
    ASSERT_SAME(b1.flops, 2.0 * 2 * 2048 * 512 * 2048);
    CU_ASSERT(b1.comm_bytes > 0);
    ASSERT_SAME(b8.flops, 8 * b1.flops);
    ASSERT_SAME(b8.compute_s, 8 * b1.compute_s);
    ASSERT_SAME(b8.comm_bytes, 8 * b1.comm_bytes);
    ASSERT_SAME(b8.total_s, 8 * b1.total_s);
}

/* Seed 000's FSDP + TP feed-forward block, planned by einc on TPU v5p:
 * the plan's step time is above the bound. */
static void test_below_fsdp_tp_plan(void)
{
    cost_hw hw = test_load_hw("tpu-v5p");
    FILE *f = fopen(EINC_EXAMPLES_DIR "/ffw_fsdp_tp.ein", "rb");
    CU_ASSERT_FATAL(f != NULL);
    char *src = calloc(1, 1 << 16);
    size_t n = fread(src, 1, (1 << 16) - 1, f);
    fclose(f);
    CU_ASSERT_FATAL(n > 0);
    ir_module *m = compile(src, &hw);
    free(src);
    CU_ASSERT_FATAL(m != NULL && m->totals.valid);
    cost_bound b = bound_of(m, &hw);
    /* 2 einsums of 2 x 4096 x 256 x 1024 f32 model FLOPs each. */
    ASSERT_SAME(b.flops, 2 * 2.0 * 4096 * 256 * 1024);
    ASSERT_SAME(b.compute_s, b.flops / (4 * 7.65e13)); /* 14.036 us */
    /* Both are skinny (D = 256): of f = 2^28 multiply-adds per chip, the
     * [B, F] matrix (Tmp, then Act) alone takes 2^28 / 256 = 2^20 entries,
     * the other two share the rest, 2 sqrt(2^56 / 2^20) = 2^19: 1572864
     * touched, 2^18 + 2^16 + 2^20 = 1376256 held, 196608 f32 words each,
     * 1572864 bytes over 2 x 2 axes x 1.8e11 B/s = 2.185 us. */
    ASSERT_SAME(b.comm_bytes, 2 * 196608 * 4.0);
    ASSERT_SAME(b.comm_s, 2 * 196608 * 4.0 / 7.2e11);
    printf("\n  ffw_fsdp_tp on v5p: bound compute %.4f us + comm %.4f us (%.0f bytes) ="
           " %.4f us, overlapped %.4f us; plan's step %.4f us\n",
           b.compute_s * 1e6, b.comm_s * 1e6, b.comm_bytes, b.total_s * 1e6, b.overlap_s * 1e6,
           m->totals.step_time * 1e6);
    CU_ASSERT(b.comm_s > 0);
    CU_ASSERT(b.total_s <= m->totals.step_time);
    CU_ASSERT(b.overlap_s <= m->totals.step_time);
    ir_module_free(m);
}

/* On the calibrated host, with every einsum fully sharded (each chip
 * executes 1/P of its FLOPs), the compute part is at most the sum of the
 * cost model's own einsum compute times, at every size the GEMM curve
 * covers and in each dtype. */
static void test_host_compute_below_estimates(void)
{
    cost_hw hw = test_load_hw("host");
    CU_ASSERT_FATAL(hw.measured);
    static const char *const dims[] = {"64", "256", "1024"};
    static const char *const types[] = {"f32", "bf16", "f64"};
    for (int i = 0; i < 3; i++)
        for (int t = 0; t < 3; t++) {
            char src[512];
            snprintf(src, sizeof src,
                     "mesh X = 2, Y = 2\n"
                     "dim M = %s, N = %s, K = %s\n"
                     "input A[M_X, K_Y] : %s\n"
                     "param B[K_Y, N] : %s\n"
                     "C[M, N] = A[M, K] * B[K, N]\n"
                     "output C[M, N]\n",
                     dims[i], dims[i], dims[i], types[t], types[t]);
            ir_module *m = compile(src, NULL);
            CU_ASSERT_FATAL(m != NULL);
            double est = 0;
            for (ir_op *op = m->first; op; op = op->next) {
                if (op->kind != IR_OP_EINSUM)
                    continue;
                ir_cost c;
                cost_op_estimate(m, &hw, op, &c);
                ASSERT_SAME(c.flops, cost_op_model_flops(m, op) / 4);
                est += c.t_compute;
            }
            cost_bound b = bound_of(m, &hw);
            CU_ASSERT(b.compute_s > 0);
            CU_ASSERT(b.compute_s <= est);
            ir_module_free(m);
        }
}

static void test_bad_args(void)
{
    cost_hw hw = test_load_hw("tpu-v5p");
    ir_module *m = compile("mesh X = 2\ndim M = 8\ninput A[M_X] : f32\noutput A[M_X]\n", NULL);
    CU_ASSERT_FATAL(m != NULL);
    cost_bound b;
    CU_ASSERT_EQUAL(cost_lower_bound(NULL, &hw, &b), -1);
    CU_ASSERT_EQUAL(cost_lower_bound(m, NULL, &b), -1);
    CU_ASSERT_EQUAL(cost_lower_bound(m, &hw, NULL), -1);
    CU_ASSERT_EQUAL(cost_lower_bound(m, &hw, &b), 0);
    ir_module_free(m);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"a 1024^3 matmul on 4 v5p by hand", test_matmul_by_hand},
        {"a weight declared replicated needs no traffic", test_replicated_weight},
        {"batch slices dealt out whole need no traffic", test_batch_slices},
        {"elementwise work needs no traffic", test_elementwise_no_comm},
        {"the HBM part reads params, inputs and state once", test_hbm_reads_args_once},
        {"a repeated block counts its trips", test_repeat_counts_trips},
        {"below the FSDP + TP plan on v5p", test_below_fsdp_tp_plan},
        {"below the host's einsum estimates", test_host_compute_below_estimates},
        {"bad arguments", test_bad_args},
    };
    einc_add_suite("lower bound of a step", tests, (int)(sizeof tests / sizeof tests[0]));
}
