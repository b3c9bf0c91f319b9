/*
 * test_cost_rowgroup.c - a row group priced as codegen runs it
 * (passes/costmodel/cost_rowgroup.c): a softmax over the last dim, the
 * four ops codegen runs one row at a time (ir/rowgroup.c), costs one read
 * of its input and one write of its output, not the six trips through
 * memory of its members priced one by one, plus, on a profile that
 * measured it, one pass over the rows per member.  Likewise the loop of an
 * unrolled einsum (ir/einsum_unroll.c) fused into its consumer, and any
 * elementwise op with the producers fused into it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

enum { ROWS = 1024, COLS = 4096 };

static ir_value *val(ir_module *m, const char *name, ir_value_kind kind, int rank, const int *dims)
{
    return test_f32_value(m, name, kind, rank, dims);
}

/* out[R] = reduce_C a[R, C]. */
static void reduce(ir_module *m, ir_reduce red, ir_value *a, ir_value *out)
{
    ir_op *op = ir_op_new(m, IR_OP_EINSUM, 1, &a, out, 0);
    op->u.einsum.labels[0][0] = a->type.dims[0];
    op->u.einsum.labels[0][1] = a->type.dims[1];
    op->u.einsum.result_labels[0] = out->type.dims[0];
    op->u.einsum.scale = 1.0;
    op->u.einsum.reduce = red;
    ir_op_append(m, op);
}

/* out[R, C] = fn(a[R, C] kind b[R]) (fn: IR_FN_COUNT for none). */
static void rowwise(ir_module *m, ir_ew_kind kind, ir_func fn, ir_value *a, ir_value *b,
                    ir_value *out)
{
    ir_value *ops[2] = {a, b};
    ir_op *op = ir_op_new(m, IR_OP_ELEMENTWISE, 2, ops, out, 0);
    ir_ew_node *n = ir_alloc(&m->arena, 4 * sizeof *n);
    n[0] = (ir_ew_node){.kind = IR_EW_OPERAND, .operand = 0};
    n[1] = (ir_ew_node){.kind = IR_EW_OPERAND, .operand = 1};
    n[2] = (ir_ew_node){.kind = kind, .a = 0, .b = 1};
    n[3] = (ir_ew_node){.kind = IR_EW_CALL, .a = 2, .fn = fn};
    op->u.ew.nodes = n;
    op->u.ew.nnodes = fn == IR_FN_COUNT ? 3 : 4;
    op->u.ew.root = op->u.ew.nnodes - 1;
    for (int j = 0; j < 2; j++)
        op->u.ew.labels[0][j] = op->u.ew.result_labels[j] = out->type.dims[j];
    op->u.ew.labels[1][0] = out->type.dims[0];
    ir_op_append(m, op);
}

/* out[R, C] = fn(a[R, C]). */
static void unary(ir_module *m, ir_func fn, ir_value *a, ir_value *out)
{
    ir_op *op = ir_op_new(m, IR_OP_ELEMENTWISE, 1, &a, out, 0);
    ir_ew_node *n = ir_alloc(&m->arena, 2 * sizeof *n);
    n[0] = (ir_ew_node){.kind = IR_EW_OPERAND, .operand = 0};
    n[1] = (ir_ew_node){.kind = IR_EW_CALL, .a = 0, .fn = fn};
    op->u.ew.nodes = n;
    op->u.ew.nnodes = 2;
    op->u.ew.root = 1;
    for (int j = 0; j < 2; j++)
        op->u.ew.labels[0][j] = op->u.ew.result_labels[j] = out->type.dims[j];
    ir_op_append(m, op);
}

/* Appends Y[R, C] = softmax(x[R, C], C) to m as the frontend lowers it
 * (softmax_module), R and C x's dims. */
static void softmax_of(ir_module *m, ir_value *x, bool split)
{
    int R = x->type.dims[0], C = x->type.dims[1];
    ir_value *mx = val(m, "M", IR_VAL_OP, 1, (int[]){R});
    ir_value *e = val(m, "E", IR_VAL_OP, 2, (int[]){R, C});
    ir_value *s = val(m, "S", IR_VAL_OP, 1, (int[]){R});
    ir_value *y = val(m, "Y", IR_VAL_OP, 2, (int[]){R, C});
    reduce(m, IR_RED_MAX, x, mx);
    if (split) {
        ir_value *d = val(m, "D", IR_VAL_OP, 2, (int[]){R, C});
        rowwise(m, IR_EW_SUB, IR_FN_COUNT, x, mx, d);
        unary(m, IR_FN_EXP, d, e);
    } else {
        rowwise(m, IR_EW_SUB, IR_FN_EXP, x, mx, e);
    }
    reduce(m, IR_RED_SUM, e, s);
    rowwise(m, IR_EW_DIV, IR_FN_COUNT, e, s, y);
    ir_output_add(m, "Y", y, 0);
}

/* Y[R, C] = softmax(X[R, C], C) as the frontend lowers it: max, exp of the
 * difference, sum, divide; with `split` the subtract and the exp are two
 * ops, the subtract fused into the exp (read once, by an elementwise op of
 * its shape): five ops, four passes over the rows. */
static ir_module *softmax_module(ir_op **ops, bool split)
{
    ir_module *m = ir_module_new("t.ein");
    int R = ir_dim_add(m, "R", ROWS, 0), C = ir_dim_add(m, "C", COLS, 0);
    ir_value *x = val(m, "X", IR_VAL_INPUT, 2, (int[]){R, C});
    softmax_of(m, x, split);
    int i = 0;
    for (ir_op *op = m->first; op; op = op->next)
        ops[i++] = op;
    return m;
}

/* On profile `name`: the group's time (on its first op, the others 0) is
 * below the sum of the members' own estimates and within `tol` of the
 * bytes-over-bandwidth figure of one read of X and one write of Y plus
 * the members' arithmetic. */
static void check_softmax(const char *name, double tol)
{
    cost_hw hw = test_load_hw(name);
    ir_op *ops[4];
    ir_module *m = softmax_module(ops, false);
    ir_cost costs[4];
    double separate = 0, arith = 0;
    for (int i = 0; i < 4; i++) {
        cost_op_estimate(m, &hw, ops[i], &costs[i]);
        separate += costs[i].time;
        arith += costs[i].t_compute;
    }
    CU_ASSERT_EQUAL_FATAL(cost_row_groups(m, &hw, ops, 4, NULL, costs), 0);
    double group = 0;
    for (int i = 0; i < 4; i++) {
        CU_ASSERT(costs[i].valid);
        group += costs[i].time;
    }
    for (int i = 1; i < 4; i++)
        CU_ASSERT_EQUAL(costs[i].time, 0);
    double bytes = 2.0 * ROWS * COLS * 4; /* X read once, Y written once */
    CU_ASSERT_EQUAL(costs[0].hbm_bytes, bytes);
    double bw = hw.measured ? cost_measured_ew_bw(&hw, bytes) : hw.hbm_bw;
    /* the module has no mesh: one device, its loop on a core of its own */
    double k = hw.measured ? cost_measured_contention(&hw, 1) : 1;
    double want = hw.measured ? k * bytes / bw + arith : fmax(bytes / bw, arith);
    CU_ASSERT(group < separate);
    CU_ASSERT(fabs(group - want) <= tol * want);
    /* the members priced apart move X three times, E four, Y once */
    CU_ASSERT(separate > 2 * bytes / bw);
    ir_module_free(m);
}

static void test_softmax_roofline(void)
{
    check_softmax("tpu-v5e", 1e-9);
}

static void test_softmax_measured(void)
{
    check_softmax("host", 1e-9);
}

/* On a calibrated profile a row group's members pay their functions'
 * arithmetic measured in cache (fn_time_cache), not the part a streaming
 * loop leaves over its memory time (fn_time): an exp that streams for
 * free still costs on a row in cache.  A lone elementwise op pays less
 * than that. */
static void test_softmax_in_cache(void)
{
    cost_hw hw = test_load_hw("host");
    CU_ASSERT_FATAL(hw.measured);
    hw.fn_time[IR_FN_EXP] = 0;
    hw.fn_time_cache[IR_FN_EXP] = 1e-9;
    ir_op *ops[4];
    ir_module *m = softmax_module(ops, false);
    ir_cost costs[4];
    for (int i = 0; i < 4; i++)
        cost_op_estimate(m, &hw, ops[i], &costs[i]);
    /* The exp alone, streaming: less than its arithmetic (some hides under
     * its memory traffic, test_cost_ewfn.c). */
    CU_ASSERT(costs[1].t_compute < cost_measured_contention(&hw, 1) * ROWS * COLS * 1e-9);
    CU_ASSERT_EQUAL(costs[3].t_compute, 0); /* the scale: no function */
    double reductions = costs[0].t_compute + costs[2].t_compute;
    CU_ASSERT_EQUAL_FATAL(cost_row_groups(m, &hw, ops, 4, NULL, costs), 0);
    double want = reductions + cost_measured_contention(&hw, 1) * ROWS * COLS * 1e-9;
    CU_ASSERT(fabs(costs[0].t_compute - want) <= 1e-9 * want);
    CU_ASSERT(fabs(costs[0].time - (costs[0].t_memory + want)) <= 1e-9 * costs[0].time);
    ir_module_free(m);
}

/* The group's estimate (on ops[0]) of the n ops of m on hw. */
static ir_cost group_cost(ir_module *m, const cost_hw *hw, ir_op **ops, int n)
{
    ir_cost costs[8];
    for (int i = 0; i < n; i++)
        cost_op_estimate(m, hw, ops[i], &costs[i]);
    CU_ASSERT_FATAL(cost_row_groups(m, hw, ops, n, NULL, costs) == 0);
    for (int i = 1; i < n; i++)
        CU_ASSERT_EQUAL(costs[i].time, 0);
    return costs[0];
}

/* A profile with "row_pass_seconds_per_element" charges every member of a
 * row group one pass over its rows: against the same profile with another
 * figure the group's time moves by exactly the difference x the four
 * members' passes x the elements of a row group's array, the subtract
 * fused into the exp running in the exp's pass (not a pass of its own).
 * Against the profile without it (today's pricing), the passes replace
 * the reductions' FLOPs at the GEMM rate; the memory time is the same. */
static void test_row_pass(void)
{
    cost_hw hw = test_load_hw("host");
    CU_ASSERT_FATAL(hw.measured);
    CU_ASSERT_FATAL(!hw.has_row_pass); /* hw/host.json predates the figure */
    ir_op *ops[5];
    ir_module *m = softmax_module(ops, true);
    ir_cost own[5];
    for (int i = 0; i < 5; i++)
        cost_op_estimate(m, &hw, ops[i], &own[i]);
    ir_cost without = group_cost(m, &hw, ops, 5);
    hw.has_row_pass = true;
    hw.row_pass_time = 2e-10;
    ir_cost with = group_cost(m, &hw, ops, 5);
    hw.row_pass_time = 5e-10;
    ir_cost more = group_cost(m, &hw, ops, 5);
    double k = cost_measured_contention(&hw, 1), passes = 4.0 * ROWS * COLS;
    double want = k * 3e-10 * passes;
    CU_ASSERT(fabs((more.time - with.time) - want) <= 1e-9 * want);
    CU_ASSERT(fabs((more.t_compute - with.t_compute) - want) <= 1e-9 * want);
    CU_ASSERT_EQUAL(more.t_memory, without.t_memory);
    CU_ASSERT_EQUAL(with.t_memory, without.t_memory);
    /* Against no figure: the 2e-10 passes in, the reductions' own
     * arithmetic out, the exp's in-cache cost in both. */
    double reductions = own[0].t_compute + own[3].t_compute;
    CU_ASSERT_FATAL(reductions > 0);
    double delta = k * 2e-10 * passes - reductions;
    CU_ASSERT(fabs((with.t_compute - without.t_compute) - delta) <= 1e-9 * fabs(without.t_compute));
    /* A lone elementwise op or reduction is no row group's member: its own
     * estimate does not change with the figure. */
    ir_cost alone;
    cost_op_estimate(m, &hw, ops[0], &alone);
    CU_ASSERT_EQUAL(alone.time, own[0].time);
    ir_module_free(m);
}

/* What the condition of masked_module's `where` compares. */
typedef enum { MASK_POSITIONS, MASK_VALUES, MASK_TENSOR } mask_kind;

/* W[R, C] = where(cond, X[R, C], -inf), Y = softmax(W, C): a causal
 * attention's mask and softmax, five ops in one row group (ops[0] the
 * where).  cond is C <= R (MASK_POSITIONS), X[R, C] <= 0.5 (MASK_VALUES)
 * or C <= P[R] (MASK_TENSOR: a position read from a tensor, as a decode
 * step's `S <= Pos[]`). */
static ir_module *masked_module(ir_op **ops, mask_kind kind)
{
    ir_module *m = ir_module_new("t.ein");
    int R = ir_dim_add(m, "R", ROWS, 0), C = ir_dim_add(m, "C", COLS, 0);
    ir_value *in[2] = {val(m, "X", IR_VAL_INPUT, 2, (int[]){R, C}),
                       val(m, "P", IR_VAL_INPUT, 1, (int[]){R})};
    ir_value *w = val(m, "W", IR_VAL_OP, 2, (int[]){R, C});
    ir_op *op = ir_op_new(m, IR_OP_ELEMENTWISE, kind == MASK_TENSOR ? 2 : 1, in, w, 0);
    ir_ew_node *n = ir_alloc(&m->arena, 6 * sizeof *n);
    n[0] = kind == MASK_VALUES ? (ir_ew_node){.kind = IR_EW_OPERAND, .operand = 0}
                               : (ir_ew_node){.kind = IR_EW_INDEX, .dim = C};
    n[1] = kind == MASK_VALUES    ? (ir_ew_node){.kind = IR_EW_CONST, .value = 0.5}
           : kind == MASK_TENSOR ? (ir_ew_node){.kind = IR_EW_OPERAND, .operand = 1}
                                 : (ir_ew_node){.kind = IR_EW_INDEX, .dim = R};
    n[2] = (ir_ew_node){.kind = IR_EW_LE, .a = 0, .b = 1};
    n[3] = (ir_ew_node){.kind = IR_EW_OPERAND, .operand = 0};
    n[4] = (ir_ew_node){.kind = IR_EW_CONST, .value = -INFINITY};
    n[5] = (ir_ew_node){.kind = IR_EW_SELECT, .a = 2, .b = 3, .c = 4};
    op->u.ew.nodes = n;
    op->u.ew.nnodes = 6;
    op->u.ew.root = 5;
    for (int j = 0; j < 2; j++)
        op->u.ew.labels[0][j] = op->u.ew.result_labels[j] = w->type.dims[j];
    op->u.ew.labels[1][0] = R;
    ir_op_append(m, op);
    softmax_of(m, w, false);
    int i = 0;
    for (ir_op *o = m->first; o; o = o->next)
        ops[i++] = o;
    return m;
}

/* A profile with "row_mask_seconds_per_element" charges a row group's
 * member that masks by positions (a causal `where(C <= R, X, -inf)`) that
 * figure in place of its pass, as calibrate/maskpass.c measures it: the
 * masked softmax costs exactly the figure x the elements more than the
 * unmasked one (the same memory traffic: X read, Y written).  A `where`
 * on values or on a position read from a tensor pays the pass, as does
 * the mask on a profile without the figure. */
static void test_row_mask(void)
{
    cost_hw hw = test_load_hw("host");
    CU_ASSERT_FATAL(hw.measured);
    CU_ASSERT_FATAL(!hw.has_row_mask); /* hw/host.json predates the figure */
    hw.has_row_pass = true;
    hw.row_pass_time = 2e-10;
    ir_op *ops[5];
    ir_module *plain = softmax_module(ops, false);
    ir_cost unmasked = group_cost(plain, &hw, ops, 4);
    double k = cost_measured_contention(&hw, 1), elems = (double)ROWS * COLS;
    ir_cost cost[3][2]; /* per mask_kind: without the figure, with it */
    ir_module *m[3];
    for (int kind = 0; kind < 3; kind++) {
        m[kind] = masked_module(ops, (mask_kind)kind);
        hw.has_row_mask = false;
        cost[kind][0] = group_cost(m[kind], &hw, ops, 5);
        hw.has_row_mask = true;
        hw.row_mask_time = 7e-10;
        cost[kind][1] = group_cost(m[kind], &hw, ops, 5);
        /* MASK_TENSOR also reads P, a row's worth of bytes. */
        CU_ASSERT_EQUAL(cost[kind][1].t_memory, cost[kind][0].t_memory);
        CU_ASSERT(kind == MASK_TENSOR || cost[kind][0].t_memory == unmasked.t_memory);
    }
    double pass = k * 2e-10 * elems, mask = k * 7e-10 * elems;
    for (int kind = 0; kind < 3; kind++) {
        /* Without the figure every mask is a member's pass. */
        CU_ASSERT(fabs((cost[kind][0].t_compute - unmasked.t_compute) - pass) <= 1e-9 * pass);
        double want = kind == MASK_POSITIONS ? mask : pass;
        CU_ASSERT(fabs((cost[kind][1].t_compute - unmasked.t_compute) - want) <= 1e-9 * want);
        if (kind != MASK_TENSOR) {
            CU_ASSERT(fabs((cost[kind][0].time - unmasked.time) - pass) <= 1e-9 * pass);
            CU_ASSERT(fabs((cost[kind][1].time - unmasked.time) - want) <= 1e-9 * want);
        }
        ir_module_free(m[kind]);
    }
    ir_module_free(plain);
}

/* A member's result that an op outside the group reads (here the
 * transpose W[C, R] = E[R, C], which does not start with the rows) is
 * written once; it is no longer row-local. */
static void test_read_after_group(void)
{
    cost_hw hw = test_load_hw("tpu-v5e");
    ir_op *ops[5];
    ir_module *m = softmax_module(ops, false);
    ir_value *e = ops[1]->result;
    int R = e->type.dims[0], C = e->type.dims[1];
    ir_value *w = val(m, "W", IR_VAL_OP, 2, (int[]){C, R});
    ir_op *t = ir_op_new(m, IR_OP_ELEMENTWISE, 1, &e, w, 0);
    ir_ew_node *n = ir_alloc(&m->arena, sizeof *n);
    n[0] = (ir_ew_node){.kind = IR_EW_OPERAND, .operand = 0};
    t->u.ew.nodes = n;
    t->u.ew.nnodes = 1;
    t->u.ew.root = 0;
    t->u.ew.labels[0][0] = R;
    t->u.ew.labels[0][1] = C;
    t->u.ew.result_labels[0] = C;
    t->u.ew.result_labels[1] = R;
    ir_op_append(m, t);
    ops[4] = t;
    ir_output_add(m, "W", w, 0);
    ir_cost costs[5];
    for (int i = 0; i < 5; i++)
        cost_op_estimate(m, &hw, ops[i], &costs[i]);
    double alone = costs[4].time;
    CU_ASSERT_EQUAL_FATAL(cost_row_groups(m, &hw, ops, 5, NULL, costs), 0);
    double array = (double)ROWS * COLS * 4;
    CU_ASSERT_EQUAL(costs[0].hbm_bytes, 3 * array); /* X read; Y and E written */
    CU_ASSERT_EQUAL(costs[4].time, alone);          /* not a member */
    ir_module_free(m);
}

/* E[R, A, G] = sum_P Q[R, P, G] * W[A, P], then Y[R, A, G] = E * S[G]:
 * the rotary embedding's contraction over P = `p` and the product after
 * it.  ops[0] is the einsum, ops[1] the product. */
static ir_module *rotary_module(int p, ir_op **ops)
{
    ir_module *m = ir_module_new("t.ein");
    int R = ir_dim_add(m, "R", ROWS, 0), P = ir_dim_add(m, "P", p, 0);
    int A = ir_dim_add(m, "A", p, 0), G = ir_dim_add(m, "G", 64, 0);
    ir_value *q = val(m, "Q", IR_VAL_INPUT, 3, (int[]){R, P, G});
    ir_value *w = val(m, "W", IR_VAL_INPUT, 2, (int[]){A, P});
    ir_value *sv = val(m, "S", IR_VAL_INPUT, 1, (int[]){G});
    ir_value *e = val(m, "E", IR_VAL_OP, 3, (int[]){R, A, G});
    ir_value *y = val(m, "Y", IR_VAL_OP, 3, (int[]){R, A, G});
    ir_value *qw[2] = {q, w};
    ir_op *ein = ir_op_new(m, IR_OP_EINSUM, 2, qw, e, 0);
    memcpy(ein->u.einsum.labels[0], (int[]){R, P, G}, 3 * sizeof(int));
    memcpy(ein->u.einsum.labels[1], (int[]){A, P}, 2 * sizeof(int));
    memcpy(ein->u.einsum.result_labels, (int[]){R, A, G}, 3 * sizeof(int));
    ein->u.einsum.scale = 1.0;
    ein->u.einsum.reduce = IR_RED_SUM;
    ir_op_append(m, ein);
    ir_value *es[2] = {e, sv};
    ir_op *mul = ir_op_new(m, IR_OP_ELEMENTWISE, 2, es, y, 0);
    ir_ew_node *n = ir_alloc(&m->arena, 3 * sizeof *n);
    n[0] = (ir_ew_node){.kind = IR_EW_OPERAND, .operand = 0};
    n[1] = (ir_ew_node){.kind = IR_EW_OPERAND, .operand = 1};
    n[2] = (ir_ew_node){.kind = IR_EW_MUL, .a = 0, .b = 1};
    mul->u.ew.nodes = n;
    mul->u.ew.nnodes = 3;
    mul->u.ew.root = 2;
    memcpy(mul->u.ew.labels[0], (int[]){R, A, G}, 3 * sizeof(int));
    mul->u.ew.labels[1][0] = G;
    memcpy(mul->u.ew.result_labels, (int[]){R, A, G}, 3 * sizeof(int));
    ir_op_append(m, mul);
    ir_output_add(m, "Y", y, 0);
    ops[0] = ein;
    ops[1] = mul;
    return m;
}

/* ops[0] computed in ops[1]'s loop: alone[] gets each op's own estimate,
 * costs[] the loop's (cost_row_groups), whose estimate is on ops[1] and
 * ops[0]'s a valid 0. */
static void price_pair(ir_module *m, const cost_hw *hw, ir_op **ops, ir_cost *alone,
                       ir_cost *costs)
{
    for (int i = 0; i < 2; i++)
        cost_op_estimate(m, hw, ops[i], &alone[i]);
    memcpy(costs, alone, 2 * sizeof *costs);
    CU_ASSERT_EQUAL_FATAL(cost_row_groups(m, hw, ops, 2, NULL, costs), 0);
    CU_ASSERT(costs[0].valid);
    CU_ASSERT_EQUAL(costs[0].time, 0);
}

/* Which einsums are unrolled (ir/einsum_unroll.c): a binary sum of at
 * most m->einsum_unroll_max products per element, counted per device. */
static void test_unrolled_rule(void)
{
    ir_op *ops[2];
    ir_module *m = rotary_module(2, ops);
    CU_ASSERT_EQUAL(ir_einsum_unrolled_terms(m, ops[0]), 2);
    CU_ASSERT_EQUAL(ir_einsum_unrolled_terms(m, ops[1]), 0); /* not an einsum */
    m->einsum_unroll_max = 1;
    CU_ASSERT_EQUAL(ir_einsum_unrolled_terms(m, ops[0]), 0);
    m->einsum_unroll_max = 0; /* einc --einsum-unroll=0: every einsum a GEMM */
    CU_ASSERT_EQUAL(ir_einsum_unrolled_terms(m, ops[0]), 0);
    ir_module_free(m);
    m = rotary_module(IR_EINSUM_UNROLL_MAX + 1, ops);
    CU_ASSERT_EQUAL(ir_einsum_unrolled_terms(m, ops[0]), 0);
    /* P (position 1 of Q[R, P, G] and of W[A, P]) sharded over an axis
     * of 3 on both operands: a third of the terms per device */
    int x = ir_mesh_add_axis(m, 'X', 3, 0);
    for (int k = 0; k < 2; k++) {
        ir_type *t = &ops[0]->operands[k]->type;
        t->sh.naxes[1] = 1;
        t->sh.axes[1][0] = (int8_t)x;
    }
    CU_ASSERT_EQUAL(ir_einsum_unrolled_terms(m, ops[0]), (IR_EINSUM_UNROLL_MAX + 1) / 3);
    /* ... and on one operand only: the blocks disagree, a GEMM */
    ops[0]->operands[1]->type.sh.naxes[1] = 0;
    CU_ASSERT_EQUAL(ir_einsum_unrolled_terms(m, ops[0]), 0);
    ir_module_free(m);
}

/* The unrolled einsum runs in its consumer's loop (ir/fusion.c), and the
 * loop is priced as one pass on the consumer: Q, W and S read once, Y
 * written once, E never in memory, and the einsum's arithmetic at the
 * elementwise rate.  Without unrolling each op keeps its own estimate. */
static void check_unrolled(const char *name)
{
    cost_hw hw = test_load_hw(name);
    ir_op *ops[2];
    ir_module *m = rotary_module(2, ops);
    int fused[2];
    CU_ASSERT_EQUAL_FATAL(ir_fuse_elementwise(m, ops, 2, fused), 0);
    CU_ASSERT_EQUAL(fused[0], 1);
    CU_ASSERT_EQUAL(fused[1], -1);
    ir_cost costs[2], alone[2];
    price_pair(m, &hw, ops, alone, costs);
    double elems = (double)ROWS * 2 * 64;
    double bytes = 4 * (elems + 2 * 2 + 64 + elems); /* Q, W, S, Y */
    CU_ASSERT_EQUAL(costs[1].hbm_bytes, bytes);
    double arith = alone[1].t_compute + (hw.measured ? 0 : alone[0].t_compute);
    double bw = hw.measured ? cost_measured_ew_bw(&hw, bytes) : hw.hbm_bw;
    double k = hw.measured ? cost_measured_contention(&hw, 1) : 1;
    double want = hw.measured ? k * bytes / bw + arith : fmax(bytes / bw, arith);
    CU_ASSERT(fabs(costs[1].time - want) <= 1e-9 * want);
    CU_ASSERT(costs[1].time < alone[0].time + alone[1].time);
    m->einsum_unroll_max = 0;
    CU_ASSERT_EQUAL_FATAL(ir_fuse_elementwise(m, ops, 2, fused), 0);
    CU_ASSERT_EQUAL(fused[0], -1);
    memcpy(costs, alone, sizeof costs);
    CU_ASSERT_EQUAL_FATAL(cost_row_groups(m, &hw, ops, 2, NULL, costs), 0);
    CU_ASSERT_EQUAL(costs[0].time, alone[0].time);
    CU_ASSERT_EQUAL(costs[1].time, alone[1].time);
    ir_module_free(m);
}

static void test_unrolled_roofline(void)
{
    check_unrolled("tpu-v5e");
}

static void test_unrolled_measured(void)
{
    check_unrolled("host");
}

/* T[R, C] = exp(X[R, C] - B[R]); Y[R, C] = T * B, the output, in a module
 * that streams results of `stream_min` bytes or more. */
static ir_module *fused_chain_module(int64_t stream_min)
{
    ir_module *m = ir_module_new("t.ein");
    m->stream_min_bytes = stream_min;
    int R = ir_dim_add(m, "R", ROWS, 0), C = ir_dim_add(m, "C", COLS, 0);
    ir_value *x = val(m, "X", IR_VAL_INPUT, 2, (int[]){R, C});
    ir_value *b = val(m, "B", IR_VAL_INPUT, 1, (int[]){R});
    ir_value *t = val(m, "T", IR_VAL_OP, 2, (int[]){R, C});
    ir_value *y = val(m, "Y", IR_VAL_OP, 2, (int[]){R, C});
    rowwise(m, IR_EW_SUB, IR_FN_EXP, x, b, t);
    rowwise(m, IR_EW_MUL, IR_FN_COUNT, t, b, y);
    ir_output_add(m, "Y", y, 0);
    return m;
}

/* T[R, C] = exp(X[R, C] - B[R]), then Y[R, C] = T * B: T's one reader
 * computes it in its own loop (ir/fusion.c), so the pair is one pass,
 * priced on Y's op: X and B read once, Y written once, T never in memory,
 * plus the exp's arithmetic, as for one op (cost_op.c,
 * measured_elementwise) on a calibrated profile and under the roofline on
 * a seed's. */
static void check_fused_chain(const char *name)
{
    cost_hw hw = test_load_hw(name);
    ir_module *m = fused_chain_module(IR_STREAM_MIN_BYTES);
    ir_op *ops[2] = {m->first, m->first->next};
    ir_cost costs[2], alone[2];
    price_pair(m, &hw, ops, alone, costs);
    double bytes = 4.0 * (2.0 * ROWS * COLS + ROWS); /* X, B, Y */
    CU_ASSERT_EQUAL(costs[1].hbm_bytes, bytes);
    /* Y is streamed and the pass reads less than an add writing Y: the
     * curve at that add's bytes (cost_measured_ew_seconds). */
    double at = fmax(bytes, 3 * 4.0 * ROWS * COLS);
    double mem = hw.measured ? cost_measured_contention(&hw, 1) *
                                   cost_measured_ew_seconds(&hw, bytes - 4.0 * ROWS * COLS,
                                                            4.0 * ROWS * COLS, true)
                             : bytes / hw.hbm_bw;
    if (hw.measured && hw.ew_write_weight == 1)
        CU_ASSERT(fabs(mem - cost_measured_contention(&hw, 1) * bytes /
                                 cost_measured_ew_bw(&hw, at)) <= 1e-9 * mem);
    double arith = alone[0].t_compute + alone[1].t_compute;
    double want = hw.measured ? mem + arith : fmax(mem, arith);
    CU_ASSERT(fabs(costs[1].t_memory - mem) <= 1e-9 * mem);
    CU_ASSERT(fabs(costs[1].time - want) <= 1e-9 * want);
    /* apart, T goes out to memory and back */
    CU_ASSERT(costs[1].time < alone[0].time + alone[1].time);
    ir_module_free(m);
}

static void test_fused_chain_roofline(void)
{
    check_fused_chain("tpu-v5e");
}

static void test_fused_chain_measured(void)
{
    check_fused_chain("host");
}

/* The fused chain above writes Y, 16 MiB: codegen streams it
 * (ir_ew_streams), and with a write weight w a byte of it costs w of a
 * byte read (cost_measured_ew_seconds): (read + w written) * 3 / (2 + w)
 * at the curve's bandwidth for the add whose result is Y's size.  With
 * --stream-min=off it is every byte at the bandwidth for the bytes moved. */
static void test_streamed_result(void)
{
    cost_hw hw = test_load_hw("host");
    hw.ew_write_weight = 0.5;
    for (int off = 0; off < 2; off++) {
        ir_module *m = fused_chain_module(off ? INT64_MAX : IR_STREAM_MIN_BYTES);
        ir_op *ops[2] = {m->first, m->first->next};
        ir_cost costs[2], alone[2];
        price_pair(m, &hw, ops, alone, costs);
        double read = 4.0 * (ROWS * COLS + ROWS), written = 4.0 * ROWS * COLS;
        double paid = off ? read + written : (read + 0.5 * written) * 3 / 2.5;
        /* Streamed, it reads less than the add with its result does: the
         * curve at that add's bytes, 3 x written (cost_measured_ew_seconds). */
        double at = off ? read + written : fmax(read + written, 3 * written);
        double want = cost_measured_contention(&hw, 1) * paid / cost_measured_ew_bw(&hw, at);
        CU_ASSERT(fabs(costs[1].t_memory - want) <= 1e-9 * want);
        ir_module_free(m);
    }
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"softmax row group on a roofline profile", test_softmax_roofline},
        {"softmax row group on a calibrated profile", test_softmax_measured},
        {"a row group's functions cost their arithmetic in cache", test_softmax_in_cache},
        {"a row group's members pay the measured pass over a row", test_row_pass},
        {"a causal mask member pays the measured mask", test_row_mask},
        {"a member read after its group is written once", test_read_after_group},
        {"which einsums are unrolled", test_unrolled_rule},
        {"an unrolled einsum's loop on a roofline profile", test_unrolled_roofline},
        {"an unrolled einsum's loop on a calibrated profile", test_unrolled_measured},
        {"a fused elementwise chain on a roofline profile", test_fused_chain_roofline},
        {"a fused elementwise chain on a calibrated profile", test_fused_chain_measured},
        {"a streamed result's bytes at the write weight", test_streamed_result},
    };
    einc_add_suite("row groups in the cost model", tests, (int)(sizeof tests / sizeof tests[0]));
}
