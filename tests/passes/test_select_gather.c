/*
 * test_select_gather.c - the select-gather pass (passes/select_gather.c)
 * on the IR: a masked sum over an equality with a computed position
 * becomes an i32 positions op and a zero-outside gather, the forms it must
 * not take stay, a param table's gradient still verifies, and the
 * verifier takes an i32 elementwise result only from an integer
 * expression.  The values are checked against NumPy end to end
 * (tests/e2e/select_gather.py).
 */
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "frontend.h"
#include "pass.h"

/* One compile of `src` as "t.ein", then optimize, autodiff and
 * select-gather: the module, or NULL after an error; what was printed. */
typedef struct run {
    ir_module *m;
    char *diag;
    diag_ctx d;
    size_t size;
} run;

static void compile(run *r, const char *src)
{
    memset(r, 0, sizeof *r);
    diag_init(&r->d, "t.ein", src, strlen(src));
    r->d.out = open_memstream(&r->diag, &r->size);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r->d.out);
    r->m = fe_compile(src, strlen(src), NULL, &r->d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r->m);
    pass_ctx ctx = {.diag = &r->d};
    CU_ASSERT_EQUAL(pass_optimize(&ctx, r->m), 0);
    CU_ASSERT_EQUAL(pass_autodiff(&ctx, r->m), 0);
    CU_ASSERT_EQUAL(pass_select_gather(&ctx, r->m), 0);
}

static void run_free(run *r)
{
    ir_module_free(r->m);
    fclose(r->d.out);
    free(r->diag);
}

/* The gathers of m that give zeros outside their table. */
static int zero_outside_gathers(const ir_module *m)
{
    int n = 0;
    for (const ir_op *op = m->first; op; op = op->next)
        n += op->kind == IR_OP_EINSUM && op->u.einsum.gather && op->u.einsum.gather_zero_outside;
    return n;
}

/* The first gather of m, or NULL. */
static ir_op *first_gather(const ir_module *m)
{
    for (ir_op *op = m->first; op; op = op->next)
        if (op->kind == IR_OP_EINSUM && op->u.einsum.gather)
            return op;
    return NULL;
}

static const char WINDOW[] = "mesh X = 2\n"
                             "dim S = 16, G = 8, T = 4\n"
                             "input Pos[] : i32\n"
                             "input CosT[S_X, G] : f32\n"
                             "Cos[T, G] = sum(where(S == Pos[] + T, CosT[S, G], 0), S)\n"
                             "output Cos[T, G]\n";

static void test_window_becomes_gather(void)
{
    run r;
    compile(&r, WINDOW);
    CU_ASSERT_EQUAL(zero_outside_gathers(r.m), 1);
    ir_op *g = first_gather(r.m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    /* The positions: Pos[] + T over [T], i32, made by an elementwise op. */
    const ir_value *pos = g->operands[0];
    CU_ASSERT_EQUAL(pos->type.dtype, IR_I32);
    CU_ASSERT_EQUAL(pos->type.rank, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pos->def);
    CU_ASSERT_EQUAL(pos->def->kind, IR_OP_ELEMENTWISE);
    CU_ASSERT_EQUAL(pos->def->u.ew.nodes[pos->def->u.ew.root].kind, IR_EW_ADD);
    /* The table read as it was, its first dim the one looked up. */
    CU_ASSERT_STRING_EQUAL(g->operands[1]->tensor, "CosT");
    CU_ASSERT_EQUAL(g->u.einsum.gather_label, g->operands[1]->type.dims[0]);
    /* No masked sum left: the output is the gather's. */
    CU_ASSERT_PTR_EQUAL(r.m->outputs[0].value, g->result);
    for (const ir_op *op = r.m->first; op; op = op->next)
        CU_ASSERT_FALSE(op->kind == IR_OP_ELEMENTWISE && op->u.ew.nodes[op->u.ew.root].kind == IR_EW_SELECT);
    CU_ASSERT_EQUAL(ir_verify_unplanned(r.m, &r.d), 0);
    run_free(&r);
}

static void test_forms_left_alone(void)
{
    static const char *const kept[] = {
        "Y[T, G] = sum(where(S == Pos[] + T, Tab[S, G], 1), S)\n",       /* else-branch not 0 */
        "Y[T, G] = sum(where(S == Pos[] / 2 + T, Tab[S, G], 0), S)\n",   /* not an integer expression */
        "Y[T, G] = sum(where(S == T - S, Tab[S, G], 0), S)\n",           /* depends on S */
        "Y[G] = sum(where(S == Pos[] + G, Tab[S, G], 0), S)\n",          /* a diagonal */
        "Y[T, G] = sum(where(S == Pos[] + T, Tab[S, G] * 2, 0), S)\n",   /* not one operand */
        "Y[T, G] = sum(where(S <= Pos[] + T, Tab[S, G], 0), S)\n",       /* not an equality */
        "Y[G, T] = sum(where(S == Pos[] + T, Tab[S, G], 0), S)\n",       /* not the gather's layout */
    };
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        char src[512];
        snprintf(src, sizeof src, "dim S = 16, G = 8, T = 4\ninput Pos[] : i32\ninput Tab[S, G] : f32\n%s"
                 "output Y\n", kept[i]);
        run r;
        compile(&r, src);
        CU_ASSERT_EQUAL(zero_outside_gathers(r.m), 0);
        if (zero_outside_gathers(r.m))
            fprintf(stderr, "rewritten: %s", kept[i]);
        run_free(&r);
    }
}

/* A param table trained through the selection: autodiff ran first, so the
 * gradient is the masked sum's adjoint, and the step still verifies. */
static void test_param_table(void)
{
    run r;
    compile(&r, "dim S = 16, G = 8, T = 4\n"
                "input Pos[] : i32\n"
                "param Tab[S, G] : f32\n"
                "Y[T, G] = sum(where(S == Pos[] + T, Tab[S, G], 0), S)\n"
                "L[] = sum(Y[T, G] * Y[T, G])\n"
                "loss L\n"
                "optimize Tab with sgd(lr=0.1)\n");
    CU_ASSERT_EQUAL(zero_outside_gathers(r.m), 1);
    CU_ASSERT_EQUAL(ir_verify_unplanned(r.m, &r.d), 0);
    run_free(&r);
}

/* An i32 elementwise result must be an integer expression (the dtype
 * rule is the op's verifier hook: ir_verify, on a program that needs no
 * communication). */
static void test_verify_i32_results(void)
{
    run r;
    compile(&r, "dim S = 16, G = 8, T = 4\n"
                "input Pos[] : i32\n"
                "input CosT[S, G] : f32\n"
                "Cos[T, G] = sum(where(S == Pos[] + T, CosT[S, G], 0), S)\n"
                "output Cos[T, G]\n");
    CU_ASSERT_EQUAL(ir_verify(r.m, &r.d), 0);
    ir_op *g = first_gather(r.m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    ir_op *p = g->operands[0]->def;
    p->u.ew.nodes[p->u.ew.root].kind = IR_EW_DIV;
    CU_ASSERT_EQUAL(ir_verify(r.m, &r.d), 1);
    fflush(r.d.out);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.diag, "i32 result only from an integer expression"));
    run_free(&r);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"a window's masked sum becomes a gather", test_window_becomes_gather},
        {"forms the pass leaves alone", test_forms_left_alone},
        {"a param table's step verifies", test_param_table},
        {"an i32 elementwise result is an integer expression", test_verify_i32_results},
    };
    einc_add_suite("select_gather", tests, (int)(sizeof tests / sizeof tests[0]));
}
