/*
 * test_objective.c - the propagation pass's objective: estimated step time
 * on a hardware profile (compute under the layout plus the reshards, cost
 * model of passes/costmodel/), with bytes moved only as a tie-breaker.
 *
 * The programs are the cases of issue 10 where moving the fewest bytes is
 * the wrong plan: DP + Megatron TP with partial sums that could be carried
 * into a repeated matmul, and seed 000's FSDP backward pass by hand.  Each
 * test runs the pass without a profile (bytes decide) and with TPU v5p
 * (seed 000's chip), checks the seeds' plan comes out of the second, and
 * that the cost model rates it faster than the bytes plan, so the change of
 * plan is the objective's doing.
 */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "costmodel.h"
#include "cunit_main.h"
#include "pass.h"
#include "prop_fixture.h"

static void load(cost_hw *hw)
{
    char err[512];
    int rc = cost_hw_load("tpu-v5p", hw, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "%s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

/* Tmp = In * Win; Out = Tmp * Wout on Z x Y, DP on Z, TP on Y. */
static ir_module *dp_tp(void)
{
    ir_module *m = fx_module("Z=2,Y=2", "B=4096,D=256,F=1024");
    ir_value *in = fx_input(m, "In[B_Z, D_Y]");
    ir_value *win = fx_input(m, "Win[D, F_Y]");
    ir_value *wout = fx_input(m, "Wout[F_Y, D]");
    ir_value *tmp = fx_einsum(m, "Tmp[B, F]", in, win);
    ir_value *out = fx_einsum(m, "Out[B, D]", tmp, wout);
    fx_output(m, "Out[B_Z, D_Y]", out);
    return m;
}

static void test_dp_tp_time_beats_bytes(void)
{
    cost_hw hw;
    load(&hw);
    char bytes_plan[512], time_plan[512];
    int verr = 0;
    ir_module *mb = dp_tp();
    CU_ASSERT_EQUAL(fx_run(mb, &verr), 0);
    CU_ASSERT_EQUAL(verr, 0);
    fx_collectives(mb, bytes_plan, sizeof bytes_plan);
    ir_module *mt = dp_tp();
    CU_ASSERT_EQUAL(fx_run_hw(mt, &hw, &verr), 0);
    CU_ASSERT_EQUAL(verr, 0);
    fx_collectives(mt, time_plan, sizeof time_plan);
    /* Bytes: move Win by AllToAll, carry Tmp{U_Y} into a repeated matmul. */
    CU_ASSERT_PTR_NOT_NULL(strstr(bytes_plan, "AllToAll_Y(Win)"));
    /* Time: seed 000's TP plan. */
    CU_ASSERT_STRING_EQUAL(time_plan, "AllGather_Y(In) ReduceScatter_Y(Out)");
    CU_ASSERT_TRUE(fx_serial_time(mt, &hw) < fx_serial_time(mb, &hw));
    CU_ASSERT_TRUE(fx_bytes_moved(mt) > fx_bytes_moved(mb)); /* it pays bytes for time */
    /* The first collective says what decided and what lost. */
    const ir_op *ag = fx_find(mt, IR_OP_ALLGATHER);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ag);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ag->reason);
    CU_ASSERT_PTR_NOT_NULL(strstr(ag->reason, "planner: step "));
    CU_ASSERT_PTR_NOT_NULL(strstr(ag->reason, "on tpu-v5p, chosen over"));
    ir_module_free(mb);
    ir_module_free(mt);
}

/* --explain prints, under each einsum, what decided its layout and the
 * runner-up with its step time. */
static void test_explain_names_runner_up(void)
{
    cost_hw hw;
    load(&hw);
    int verr = 0;
    ir_module *m = dp_tp();
    CU_ASSERT_EQUAL_FATAL(fx_run_hw(m, &hw, &verr), 0);
    diag_ctx d;
    diag_init(&d, "test.ein", "", 0);
    pass_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.diag = &d;
    ctx.hw = &hw;
    CU_ASSERT_EQUAL_FATAL(pass_cost(&ctx, m), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    cost_explain(f, m, &hw);
    fclose(f);
    /* The first einsum's line, then its planner line naming the layout
     * that lost and by how much. */
    const char *tmp = strstr(text, "Tmp[B_Z, F_Y] = Einsum(");
    CU_ASSERT_PTR_NOT_NULL_FATAL(tmp);
    const char *dec = strstr(tmp, "  planner: step ");
    CU_ASSERT_PTR_NOT_NULL_FATAL(dec);
    CU_ASSERT_PTR_NOT_NULL(strstr(dec, "on tpu-v5p, chosen over Z->B Y->"));
    CU_ASSERT_PTR_NOT_NULL(strstr(dec, " us (+"));
    CU_ASSERT_TRUE(dec < strstr(tmp + 1, "Out[B_Z, D]{U_Y} = Einsum("));
    free(text);
    ir_module_free(m);
}

/* Seed 000's FSDP backward pass (loss and nonlinearity left out). */
static ir_module *fsdp_backward(void)
{
    ir_module *m = fx_module("X=4", "B=4096,D=256,F=1024");
    ir_value *in = fx_input(m, "In[B_X, D]");
    ir_value *tmp = fx_input(m, "Tmp[B_X, F]");
    ir_value *dout = fx_input(m, "dOut[B_X, D]");
    ir_value *win = fx_input(m, "Win[D_X, F]");
    ir_value *wout = fx_input(m, "Wout[F, D_X]");
    ir_value *dwout = fx_einsum(m, "dWout[F, D_X]", tmp, dout);
    ir_value *dtmp = fx_einsum(m, "dTmp[B, F]", dout, wout);
    ir_value *dwin = fx_einsum(m, "dWin[D_X, F]", in, dtmp);
    ir_value *din = fx_einsum(m, "dIn[B, D]", dtmp, win);
    fx_output(m, "dWout", dwout);
    fx_output(m, "dWin", dwin);
    fx_output(m, "dIn[B_X, D]", din);
    return m;
}

static void test_fsdp_backward_seed_listing(void)
{
    cost_hw hw;
    load(&hw);
    char bytes_plan[512], time_plan[512];
    int verr = 0;
    ir_module *mb = fsdp_backward();
    CU_ASSERT_EQUAL(fx_run(mb, &verr), 0);
    CU_ASSERT_EQUAL(verr, 0);
    fx_collectives(mb, bytes_plan, sizeof bytes_plan);
    ir_module *mt = fsdp_backward();
    CU_ASSERT_EQUAL(fx_run_hw(mt, &hw, &verr), 0);
    CU_ASSERT_EQUAL(verr, 0);
    fx_collectives(mt, time_plan, sizeof time_plan);
    /* Bytes: AllToAlls that leave matmuls repeated on every device. */
    CU_ASSERT_PTR_NOT_NULL(strstr(bytes_plan, "AllToAll_X"));
    if (getenv("PROP_DEBUG"))
        fprintf(stderr, "bytes: %s\ntime: %s\n", bytes_plan, time_plan);
    CU_ASSERT_STRING_EQUAL(time_plan,
                           "ReduceScatter_X(dWout) AllGather_X(Wout) ReduceScatter_X(dWin) AllGather_X(Win)");
    CU_ASSERT_TRUE(fx_serial_time(mt, &hw) < fx_serial_time(mb, &hw));
    ir_module_free(mb);
    ir_module_free(mt);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"DP + TP: step time picks seed 000's plan over the fewest bytes", test_dp_tp_time_beats_bytes},
        {"FSDP backward by hand: seed 000's listing", test_fsdp_backward_seed_listing},
        {"--explain names the runner-up and its step time", test_explain_names_runner_up},
    };
    einc_add_suite("propagate: step-time objective", tests, (int)(sizeof tests / sizeof tests[0]));
}
