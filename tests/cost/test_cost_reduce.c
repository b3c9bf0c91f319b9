/*
 * test_cost_reduce.c - a reduction priced by the cache lines its loop nest
 * reads on a CPU (passes/costmodel/cost_reduce.c): the loops run the
 * result's positions outermost, so a sum over leading dims into a result
 * that keeps the operand's contiguous dim outermost reads a line per
 * element once the lines of its inner loops overflow the cache, while a
 * sum whose inner loops stay within the cache, or whose innermost loop is
 * contiguous, reads its operand once.  A seed profile (an accelerator's
 * compiler picks its own loop order) keeps one read.
 */
#include <string.h>

#include "test_util.h"

/* X[B, T, V, D] bf16, out = sum over the labels `res` leaves out, with
 * result labels res[0..nres) (dim ids of the module's B, T, V, D). */
static ir_op *reduction(ir_module *m, ir_value *x, const int *res, int nres)
{
    ir_value *out = test_f32_value(m, "R", IR_VAL_OP, nres, res);
    out->type.dtype = IR_BF16;
    ir_op *op = ir_op_new(m, IR_OP_EINSUM, 1, &x, out, 0);
    memcpy(op->u.einsum.labels[0], x->type.dims, 4 * sizeof(int));
    memcpy(op->u.einsum.result_labels, res, (size_t)nres * sizeof(int));
    op->u.einsum.scale = 1.0;
    op->u.einsum.reduce = IR_RED_SUM;
    ir_op_append(m, op);
    return op;
}

/* The factor of sum over the dims not in `keep` (indices into B, T, V, D)
 * of a [b, t, v, d] operand; the estimate's bytes checked against it on a
 * calibrated and a seed profile. */
static double factor(int64_t b, int64_t t, int64_t v, int64_t d, const int *keep, int nkeep)
{
    ir_module *m = ir_module_new("t.ein");
    int dims[4] = {ir_dim_add(m, "B", b, 0), ir_dim_add(m, "T", t, 0), ir_dim_add(m, "V", v, 0),
                   ir_dim_add(m, "D", d, 0)};
    ir_value *x = test_f32_value(m, "X", IR_VAL_INPUT, 4, dims);
    x->type.dtype = IR_BF16;
    int res[4];
    for (int i = 0; i < nkeep; i++)
        res[i] = dims[keep[i]];
    ir_op *op = reduction(m, x, res, nkeep);
    double f = cost_reduce_read_factor(m, op);
    double in = (double)ir_local_bytes(m, &x->type), out = (double)ir_local_bytes(m, &op->result->type);
    cost_hw host = test_load_hw("host"), tpu = test_load_hw("tpu-v5e");
    CU_ASSERT_FATAL(host.measured);
    ir_cost c;
    cost_op_estimate(m, &host, op, &c);
    CU_ASSERT_DOUBLE_EQUAL(c.hbm_bytes, f * in + out, 1e-6 * in);
    cost_op_estimate(m, &tpu, op, &c);
    CU_ASSERT_DOUBLE_EQUAL(c.hbm_bytes, in + out, 1e-6 * in);
    ir_module_free(m);
    return f;
}

static void test_read_factor(void)
{
    /* fortunes_bf16's dWout.1 (btvd->dv): D outermost, the b, t loop
     * strides V x D, and the lines inside D's loop (V x B x T = 64K lines,
     * 4 MiB) overflow the cache: a 64-byte line per 2-byte element. */
    CU_ASSERT_DOUBLE_EQUAL(factor(8, 64, 128, 128, (int[]){3, 2}, 2), 32, 0);
    /* The same with few rows (V x B x T = 4K lines, 256 KiB): read once. */
    CU_ASSERT_DOUBLE_EQUAL(factor(2, 16, 128, 128, (int[]){3, 2}, 2), 1, 0);
    /* dAf.1 (btvd->btd): the v loop's 128 lines stay cached until d moves. */
    CU_ASSERT_DOUBLE_EQUAL(factor(8, 64, 128, 128, (int[]){0, 1, 3}, 3), 1, 0);
    /* btvd->btv: the innermost loop is the contiguous d. */
    CU_ASSERT_DOUBLE_EQUAL(factor(8, 64, 128, 128, (int[]){0, 1, 2}, 3), 1, 0);
    /* btvd->vd in result order: d innermost of the result, b, t inside it:
     * 512 lines, cached. */
    CU_ASSERT_DOUBLE_EQUAL(factor(8, 64, 128, 128, (int[]){2, 3}, 2), 1, 0);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"a reduction reads the cache lines of its loop order", test_read_factor},
    };
    einc_add_suite("cost_reduce", tests, (int)(sizeof tests / sizeof tests[0]));
}
