/*
 * test_cast_ir.c - what casts become in the IR (docs/ir.md, "Casts"), from
 * source: an elementwise op may read operands of other float dtypes than
 * its result, an einsum may not; a narrowing cast takes no partial sums;
 * fusion keeps one dtype per group; the printer writes the cast; the cost
 * model counts bytes in each value's own dtype.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "cunit_main.h"
#include "fe_test_util.h"

#define HDR "mesh X = 2\ndim I = 8, J = 16\n"

/* Compiles `src` (no passes: the lowered IR), asserting success. */
static ir_module *lowered(const char *src)
{
    fe_run r = fe_test_compile_str(src, NULL);
    if (!r.m)
        fprintf(stderr, "\nunexpected errors:\n%s", r.diag);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.m);
    ir_module *m = r.m;
    r.m = NULL;
    fe_run_free(&r);
    return m;
}

/* The verifier hook of `op`'s kind: true if it accepts `op`; its reason in
 * `why` otherwise. */
static bool op_ok(const ir_module *m, const ir_op *op, char *why, size_t size)
{
    ir_sharding out;
    why[0] = 0;
    return ir_op_traits_of(op->kind)->verify(m, op, &out, why, size);
}

/* f32(Xb) is an op from bf16 to f32 that converts; it is exact, so it may
 * take partial sums; bf16(Y) of an f32 Y rounds, so it may not. */
static void test_cast_ops(void)
{
    ir_module *m = lowered(HDR "input Xb[I, J] : bf16\nX[I, J] = f32(Xb[I, J])\n"
                           "Y[I, J] = X[I, J] * 2\nYb[I, J] = bf16(Y[I, J])\noutput X\noutput Yb\n");
    ir_op *up = m->first, *dbl = up->next, *down = dbl->next;
    CU_ASSERT_EQUAL(up->result->type.dtype, IR_F32);
    CU_ASSERT_TRUE(ir_ew_converts(up));
    CU_ASSERT_TRUE(ir_ew_takes_partial_sums(up));
    CU_ASSERT_FALSE(ir_ew_converts(dbl));
    CU_ASSERT_TRUE(ir_ew_takes_partial_sums(dbl));
    CU_ASSERT_EQUAL(down->result->type.dtype, IR_BF16);
    CU_ASSERT_TRUE(ir_ew_converts(down));
    CU_ASSERT_FALSE(ir_ew_takes_partial_sums(down));
    char why[256];
    CU_ASSERT_TRUE(op_ok(m, down, why, sizeof why));
    /* Given unreduced partial sums {U_X}, the rounding cast is refused
     * with a reason, the linear f32 op is not. */
    dbl->result->type.sh.unreduced = 1u << 0;
    down->result->type.sh.unreduced = 1u << 0;
    CU_ASSERT_FALSE(op_ok(m, down, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "narrowing"));
    ir_module_free(m);
}

/* An einsum takes one float dtype: reading the bf16 input directly (as no
 * source can write, so the IR is edited) is refused with the fix. */
static void test_einsum_one_dtype(void)
{
    ir_module *m = lowered(HDR "input Xb[I, J] : bf16\nparam W[J] : f32\n"
                           "Y[I] = f32(Xb[I, J]) * W[J]\noutput Y\n");
    ir_op *cast = m->first, *mm = cast->next;
    CU_ASSERT_EQUAL_FATAL(mm->kind, IR_OP_EINSUM);
    char why[256];
    CU_ASSERT_TRUE(op_ok(m, mm, why, sizeof why));
    mm->operands[0] = cast->operands[0];
    CU_ASSERT_FALSE(op_ok(m, mm, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "einsum operand 0 is bf16 but its result is f32"));
    ir_module_free(m);
}

/* An f64 product read once by a cast to f32 keeps its own loop (inside
 * the cast's it would be computed in f32); the same product read by an
 * f64 op is fused into it. */
static void test_fusion_one_dtype(void)
{
    const char *consumer[2] = {"P[I, J] = f32(Q[I, J])\n", "P[I, J] = Q[I, J] * 3\n"};
    for (int i = 0; i < 2; i++) {
        char src[512];
        snprintf(src, sizeof src, HDR "input A[I, J] : f64\nQ[I, J] = A[I, J] * A[I, J]\n%s"
                 "output P\n", consumer[i]);
        ir_module *m = lowered(src);
        ir_op *ops[2] = {m->first, m->first->next};
        int fused[2];
        CU_ASSERT_EQUAL_FATAL(ir_fuse_elementwise(m, ops, 2, fused), 0);
        CU_ASSERT_EQUAL(fused[0], i == 0 ? -1 : 1);
        ir_module_free(m);
    }
}

/* --dump-ir writes a converted operand as the cast in the source. */
static void test_print_cast(void)
{
    ir_module *m = lowered(HDR "input Xb[I_X, J] : bf16\nX[I, J] = f32(Xb[I, J])\noutput X\n");
    char *text = fe_test_print_ir(m);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "X[I, J] = f32(Xb[I_X, J])"));
    free(text);
    ir_module_free(m);
}

/* The cost of f32(Xb): bf16 read (2 bytes an element), f32 written (4). */
static void test_cast_bytes(void)
{
    ir_module *m = lowered(HDR "input Xb[I, J] : bf16\nX[I, J] = f32(Xb[I, J])\noutput X\n");
    cost_hw hw;
    char err[512];
    int rc = cost_hw_load("tpu-v5e", &hw, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "%s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    ir_cost c;
    cost_op_estimate(m, &hw, m->first, &c);
    CU_ASSERT_DOUBLE_EQUAL(c.hbm_bytes, 8.0 * 16 * (2 + 4), 1e-9);
    ir_module_free(m);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"cast ops", test_cast_ops},
        {"einsum takes one dtype", test_einsum_one_dtype},
        {"fusion keeps one dtype", test_fusion_one_dtype},
        {"print a cast", test_print_cast},
        {"cast bytes per dtype", test_cast_bytes},
    };
    einc_add_suite("cast_ir", tests, (int)(sizeof tests / sizeof tests[0]));
}
