/*
 * test_manager.c - the pass manager (pipeline parsing, verification after
 * each pass, dumps) and the example pass cse-collectives.
 */
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "pass.h"

/* A module A[I_X] -> two identical AllGather_X -> output of the second. */
static ir_module *two_gathers(ir_op **first, ir_op **second)
{
    ir_module *m = ir_module_new("t.ein");
    ir_mesh_add_axis(m, 'X', 2, 0);
    int I = ir_dim_add(m, "I", 8, 0);
    ir_type t;
    memset(&t, 0, sizeof t);
    t.dtype = IR_F32;
    t.rank = 1;
    t.dims[0] = I;
    ir_type ts = t;
    ir_sharding_push(&ts.sh, 0, 0);
    ir_value *a = ir_value_new(m, "A", IR_VAL_INPUT, &ts, 0);
    ir_value *g1 = ir_value_new(m, "A", IR_VAL_OP, &t, 0);
    ir_value *g2 = ir_value_new(m, "A", IR_VAL_OP, &t, 0);
    for (int k = 0; k < 2; k++) {
        ir_op *op = ir_op_new(m, IR_OP_ALLGATHER, 1, &a, k ? g2 : g1, 0);
        op->u.coll.naxes = 1;
        op->u.coll.axes[0] = 0;
        op->u.coll.dim = 0;
        ir_op_append(m, op);
        *(k ? second : first) = op;
    }
    ir_output_add(m, "A", g2, 0);
    return m;
}

static int count_ops(const ir_module *m)
{
    int n = 0;
    for (const ir_op *op = m->first; op; op = op->next)
        n++;
    return n;
}

static void test_cse(void)
{
    ir_op *g1, *g2;
    ir_module *m = two_gathers(&g1, &g2);
    diag_ctx d;
    diag_init(&d, "t.ein", "", 0);
    pass_ctx ctx = {&d, PASS_MESHSLICE_OFF, 0, NULL, NULL};
    CU_ASSERT_EQUAL(pass_cse_collectives(&ctx, m), 0);
    CU_ASSERT_EQUAL(count_ops(m), 1);
    CU_ASSERT_PTR_EQUAL(m->outputs[0].value, g1->result);
    CU_ASSERT_EQUAL(ir_verify(m, &d), 0);
    ir_module_free(m);
}

/* A pass that breaks the IR: it flips the gather's axis list to empty. */
static int break_ir(pass_ctx *ctx, ir_module *m)
{
    (void)ctx;
    m->first->u.coll.naxes = 0;
    return 0;
}

/* Runs of the "count" pass (test-only state). */
static int runs;

static int count_runs(pass_ctx *ctx, ir_module *m)
{
    (void)ctx;
    (void)m;
    runs++;
    return 0;
}

static const pass_info test_passes[] = {
    {"break", "breaks the IR", break_ir},
    {"count", "counts its runs", count_runs},
};

static pass_registry test_registry(void)
{
    pass_registry r;
    pass_registry_init(&r);
    r.passes[r.npasses++] = &test_passes[0];
    r.passes[r.npasses++] = &test_passes[1];
    return r;
}

static void test_parse(void)
{
    pass_registry r = test_registry();
    pass_manager pm;
    memset(&pm, 0, sizeof pm);
    pm.registry = &r;
    char *errs = NULL;
    size_t len = 0;
    FILE *err = open_memstream(&errs, &len);
    CU_ASSERT_EQUAL(pass_manager_parse(&pm, "count,cse-collectives,count", err), 0);
    CU_ASSERT_EQUAL(pm.npipeline, 3);
    CU_ASSERT_STRING_EQUAL(pm.pipeline[1]->name, "cse-collectives");
    CU_ASSERT_EQUAL(pass_manager_parse(&pm, "count,nosuch", err), -1);
    fclose(err);
    CU_ASSERT_PTR_NOT_NULL(strstr(errs, "unknown pass 'nosuch'"));
    free(errs);
    pass_registry_free(&r);
}

/* The manager verifies after each pass and stops at the first failure. */
static void test_verify_stops(void)
{
    ir_op *g1, *g2;
    ir_module *m = two_gathers(&g1, &g2);
    pass_registry r = test_registry();
    pass_manager pm;
    memset(&pm, 0, sizeof pm);
    pm.registry = &r;
    CU_ASSERT_EQUAL(pass_manager_parse(&pm, "count,break,count", stderr), 0);
    char *errs = NULL;
    size_t len = 0;
    diag_ctx d;
    diag_init(&d, "t.ein", "", 0);
    d.out = open_memstream(&errs, &len);
    runs = 0;
    pass_ctx ctx = {&d, PASS_MESHSLICE_OFF, 0, NULL, NULL};
    CU_ASSERT_NOT_EQUAL(pass_manager_run(&pm, &ctx, m), 0);
    fclose(d.out);
    CU_ASSERT_EQUAL(runs, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(errs, "IR verification failed after pass 'break'"));
    free(errs);
    ir_module_free(m);
    pass_registry_free(&r);
}

/* --print-after=NAME prints "*** IR Dump After NAME ***" and the IR. */
static void test_print_after(void)
{
    ir_op *g1, *g2;
    ir_module *m = two_gathers(&g1, &g2);
    pass_registry r = test_registry();
    pass_manager pm;
    memset(&pm, 0, sizeof pm);
    pm.registry = &r;
    char *dump = NULL;
    size_t len = 0;
    pm.dump = open_memstream(&dump, &len);
    pm.print_after = "cse-collectives";
    CU_ASSERT_EQUAL(pass_manager_parse(&pm, "cse-collectives", stderr), 0);
    diag_ctx d;
    diag_init(&d, "t.ein", "", 0);
    pass_ctx ctx = {&d, PASS_MESHSLICE_OFF, 0, NULL, NULL};
    CU_ASSERT_EQUAL(pass_manager_run(&pm, &ctx, m), 0);
    fclose(pm.dump);
    CU_ASSERT_PTR_NOT_NULL(strstr(dump, "*** IR Dump After cse-collectives ***\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(dump, "A.1[I] = AllGather_X A[I_X]"));
    CU_ASSERT_PTR_NULL(strstr(dump, "A.2"));
    free(dump);
    ir_module_free(m);
    pass_registry_free(&r);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"cse_collectives", test_cse},
        {"parse", test_parse},
        {"verify_stops", test_verify_stops},
        {"print_after", test_print_after},
    };
    einc_add_suite("pass_manager", tests, (int)(sizeof tests / sizeof tests[0]));
}
