/*
 * test_cost_ewfn.c - a function call in a lone elementwise op on a
 * calibrated profile (passes/costmodel/cost_op.c, fn_streaming_per_elem):
 * it pays its arithmetic measured in cache less what hides under the op's
 * memory traffic, in proportion to that traffic's time per element as
 * measured by calibration's own loop, `gelu(6 * (A + B))` over 4 Mi
 * elements per device; or, when that loop was bound by the function's
 * arithmetic, whatever of that loop's time per element its own memory
 * traffic does not cover (docs/cost-model.md, "How the cost pass uses it").
 */
#include <math.h>

#include "test_util.h"

enum { N = 1 << 22 };

/* Forced figures: gelu costs A in cache and E on top of the calibration's
 * streaming loop. */
static const double A = 8e-10, E = 4e-10;

static cost_hw forced_hw(void)
{
    cost_hw hw = test_load_hw("host");
    CU_ASSERT_FATAL(hw.measured);
    hw.fn_time[IR_FN_GELU] = E;
    hw.fn_time_cache[IR_FN_GELU] = A;
    return hw;
}

/* A module of one op out[n] = gelu(sum of `nops` operands [n]), the
 * operands inputs; returns the op. */
static ir_op *gelu_op(ir_module *m, int nops, int64_t n)
{
    int d = ir_dim_add(m, "E", n, 0);
    ir_value *in[3];
    char name[2] = "A";
    for (int i = 0; i < nops; i++, name[0]++)
        in[i] = test_f32_value(m, name, IR_VAL_INPUT, 1, (int[]){d});
    ir_value *out = test_f32_value(m, "Y", IR_VAL_OP, 1, (int[]){d});
    ir_op *op = ir_op_new(m, IR_OP_ELEMENTWISE, nops, in, out, 0);
    int nn = 2 * nops;
    ir_ew_node *nodes = ir_alloc(&m->arena, (size_t)nn * sizeof *nodes);
    for (int i = 0; i < nops; i++)
        nodes[i] = (ir_ew_node){.kind = IR_EW_OPERAND, .operand = i};
    int last = 0;
    for (int i = 1; i < nops; i++) {
        nodes[nops + i - 1] = (ir_ew_node){.kind = IR_EW_ADD, .a = last, .b = i};
        last = nops + i - 1;
    }
    nodes[nn - 1] = (ir_ew_node){.kind = IR_EW_CALL, .a = last, .fn = IR_FN_GELU};
    op->u.ew.nodes = nodes;
    op->u.ew.nnodes = nn;
    op->u.ew.root = nn - 1;
    for (int i = 0; i < nops; i++)
        op->u.ew.labels[i][0] = d;
    op->u.ew.result_labels[0] = d;
    ir_op_append(m, op);
    ir_output_add(m, "Y", out, 0);
    return op;
}

/* The op's function seconds per element beyond its memory, per device
 * with the calibration's devices busy (the core-sharing factor taken out). */
static double fn_per_elem(const cost_hw *hw, int nops, int64_t n)
{
    ir_module *m = ir_module_new("t.ein");
    ir_op *op = gelu_op(m, nops, n);
    ir_cost c;
    cost_op_estimate(m, hw, op, &c);
    CU_ASSERT(fabs(c.time - (c.t_memory + c.t_compute)) <= 1e-12 * c.time);
    ir_module_free(m);
    return c.t_compute / cost_measured_contention(hw, 1) / (double)n;
}

/* Calibration's own loop (two operands, 4 Mi elements, streamed) pays
 * exactly the streaming figure it measured. */
static void test_calibration_loop(void)
{
    cost_hw hw = forced_hw();
    double got = fn_per_elem(&hw, 2, N);
    CU_ASSERT(fabs(got - E) <= 1e-9 * E);
}

/* A unary gelu moves 8 bytes an element, not 12: less hides, so it pays
 * more than the streaming figure and less than its arithmetic, by the
 * ratio of the two loops' memory time.  Three operands move 16: more
 * hides, down to nothing left once the traffic hides all of it. */
static void test_traffic_scales_hiding(void)
{
    cost_hw hw = forced_hw();
    double unary = fn_per_elem(&hw, 1, N), ternary = fn_per_elem(&hw, 3, N);
    CU_ASSERT(unary > E && unary < A);
    CU_ASSERT(ternary < E && ternary >= 0);
    double m1 = cost_measured_ew_seconds(&hw, 4.0 * N, 4.0 * N, true) / N;
    double m2 = cost_measured_ew_seconds(&hw, 8.0 * N, 4.0 * N, true) / N;
    double want = A - (A - E) * m1 / m2;
    CU_ASSERT(fabs(unary - want) <= 1e-9 * want);
    hw.fn_time[IR_FN_GELU] = 0.05 * A; /* nearly all of it hid: 16 bytes hide it all */
    CU_ASSERT_EQUAL(fn_per_elem(&hw, 3, N), 0);
}

/* A function whose streaming cost exceeds its in-cache cost (e > a > 0:
 * gelu on the AMD EPYC of docs/performance-history.md, 0.78 against 0.68
 * ns) hid none of its arithmetic: the calibration's loop was bound by its
 * arithmetic, m_cal + e per element, and its memory traffic hid instead.
 * A unary op, whose memory takes m1 < m_cal, then pays m_cal + e - m1
 * beyond its memory (its loop takes max(m1, m_cal + e)), the
 * calibration's loop e, and a loop whose memory takes longer than m_cal +
 * e nothing.  A function free in cache (a = 0) keeps e: there is no
 * arithmetic to bind the loop (docs/cost-model.md, "How the cost pass
 * uses it"). */
static void test_arithmetic_bound(void)
{
    cost_hw hw = forced_hw();
    hw.fn_time[IR_FN_GELU] = A;
    hw.fn_time_cache[IR_FN_GELU] = E;
    double m1 = cost_measured_ew_seconds(&hw, 4.0 * N, 4.0 * N, true) / N;
    double m_cal = cost_measured_ew_seconds(&hw, 8.0 * N, 4.0 * N, true) / N;
    double want = m_cal + A - m1;
    double unary = fn_per_elem(&hw, 1, N);
    CU_ASSERT(fabs(unary - want) <= 1e-9 * want);
    CU_ASSERT(unary > A);
    CU_ASSERT(fabs(fn_per_elem(&hw, 2, N) - A) <= 1e-9 * A);
    hw.fn_time[IR_FN_GELU] = 1e-12;
    hw.fn_time_cache[IR_FN_GELU] = 5e-13;
    CU_ASSERT_EQUAL(fn_per_elem(&hw, 3, N), 0); /* 16 bytes take longer than m_cal + 1 ps */
    hw.fn_time[IR_FN_GELU] = E;
    hw.fn_time_cache[IR_FN_GELU] = 0;
    CU_ASSERT(fabs(fn_per_elem(&hw, 1, N) - E) <= 1e-9 * E);
}

/* A profile without in-cache figures (the loader copies the streaming
 * ones) prices every loop at the streaming figure, as before. */
static void test_old_profile(void)
{
    cost_hw hw = forced_hw();
    hw.fn_time_cache[IR_FN_GELU] = E;
    for (int nops = 1; nops <= 3; nops++) {
        double got = fn_per_elem(&hw, nops, N);
        CU_ASSERT(fabs(got - E) <= 1e-9 * E);
    }
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"calibration's own loop pays the measured streaming cost", test_calibration_loop},
        {"what hides scales with the loop's memory time", test_traffic_scales_hiding},
        {"a function bound by its arithmetic hides the loop's memory", test_arithmetic_bound},
        {"a profile without in-cache figures keeps the streaming cost", test_old_profile},
    };
    einc_add_suite("functions in a streaming elementwise loop", tests,
                   (int)(sizeof tests / sizeof tests[0]));
}
