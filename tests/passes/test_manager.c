/*
 * test_manager.c - the pass manager (pipeline parsing, verification after
 * each pass, dumps) and the example pass prefetch-params.
 */
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "pass.h"

/* A module: input A[I_X], param W[I_X]; AllGather_X of A, then of W; both
 * gathered values are outputs. */
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
    ir_value *in[2] = {ir_value_new(m, "A", IR_VAL_INPUT, &ts, 0), ir_value_new(m, "W", IR_VAL_PARAM, &ts, 0)};
    for (int k = 0; k < 2; k++) {
        ir_value *g = ir_value_new(m, in[k]->tensor, IR_VAL_OP, &t, 0);
        ir_op *op = ir_op_new(m, IR_OP_ALLGATHER, 1, &in[k], g, 0);
        op->u.coll.naxes = 1;
        op->u.coll.axes[0] = 0;
        op->u.coll.dim = 0;
        ir_op_append(m, op);
        ir_output_add(m, in[k]->tensor, g, 0);
        *(k ? second : first) = op;
    }
    return m;
}

/* prefetch-params moves the param's gather in front of the input's. */
static void test_prefetch(void)
{
    ir_op *ga, *gw;
    ir_module *m = two_gathers(&ga, &gw);
    diag_ctx d;
    diag_init(&d, "t.ein", "", 0);
    pass_ctx ctx = {.diag = &d};
    CU_ASSERT_EQUAL(pass_prefetch_params(&ctx, m), 0);
    CU_ASSERT_PTR_EQUAL(m->first, gw);
    CU_ASSERT_PTR_EQUAL(m->first->next, ga);
    CU_ASSERT_PTR_EQUAL(m->last, ga);
    CU_ASSERT_EQUAL(ir_verify(m, &d), 0);
    /* Running it again changes nothing. */
    CU_ASSERT_EQUAL(pass_prefetch_params(&ctx, m), 0);
    CU_ASSERT_PTR_EQUAL(m->first, gw);
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
    {"break", "breaks the IR", break_ir, NULL, 0},
    {"count", "counts its runs", count_runs, NULL, 0},
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
    CU_ASSERT_EQUAL(pass_manager_parse(&pm, "count,prefetch-params,count", err), 0);
    CU_ASSERT_EQUAL(pm.npipeline, 3);
    CU_ASSERT_STRING_EQUAL(pm.pipeline[1]->name, "prefetch-params");
    CU_ASSERT_EQUAL(pass_manager_parse(&pm, "count,nosuch", err), -1);
    /* Every option that names passes checks them against the registry:
     * --print-after as --passes does, and neither takes an empty name. */
    CU_ASSERT_EQUAL(pass_manager_parse(&pm, "count,", err), -1);
    pm.print_after = "count,nosuch";
    CU_ASSERT_EQUAL(pass_manager_parse(&pm, "count", err), -1);
    pm.print_after = "count,";
    CU_ASSERT_EQUAL(pass_manager_parse(&pm, "count", err), -1);
    pm.print_after = "count";
    CU_ASSERT_EQUAL(pass_manager_parse(&pm, "count", err), 0);
    fclose(err);
    CU_ASSERT_PTR_NOT_NULL(strstr(errs, "--passes: unknown pass 'nosuch'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(errs, "--print-after: unknown pass 'nosuch'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(errs, "empty or overlong pass name in --print-after=count,"));
    CU_ASSERT_PTR_NOT_NULL(strstr(errs, "empty or overlong pass name in --passes=count,"));
    free(errs);
    pass_registry_free(&r);
}

/* --NAME=VALUE reaches the pass that declares NAME, checked by it; the last
 * value given wins, and an option no pass declares is left to the caller. */
static void test_pass_options(void)
{
    pass_registry r = test_registry();
    pass_options opts = {0};
    char why[256] = "";
    CU_ASSERT_EQUAL(pass_options_add(&opts, &r, "meshslice=4", why, sizeof why), 0);
    CU_ASSERT_EQUAL(pass_options_add(&opts, &r, "meshslice=off", why, sizeof why), 0);
    CU_ASSERT_EQUAL(pass_options_add(&opts, &r, "meshslice=0", why, sizeof why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "--meshslice wants auto, off or a slice count K from 1 to 4096 (decimal), not '0'"));
    CU_ASSERT_EQUAL(pass_options_add(&opts, &r, "nosuch=1", why, sizeof why), 1);
    CU_ASSERT_EQUAL(pass_options_add(&opts, &r, "meshslice", why, sizeof why), 1);
    pass_ctx ctx = {.options = &opts};
    CU_ASSERT_STRING_EQUAL(pass_option_value(&ctx, "meshslice"), "off");
    CU_ASSERT_PTR_NULL(pass_option_value(&ctx, "nosuch"));
    ctx.options = NULL;
    CU_ASSERT_PTR_NULL(pass_option_value(&ctx, "meshslice"));
    pass_registry_free(&r);
}

/* Runs `pipeline` of the test registry on `m`; returns the manager's
 * status, and its messages in *errs (malloc'd). */
static int run_captured(const char *pipeline, ir_module *m, char **errs)
{
    pass_registry r = test_registry();
    pass_manager pm;
    memset(&pm, 0, sizeof pm);
    pm.registry = &r;
    CU_ASSERT_EQUAL(pass_manager_parse(&pm, pipeline, stderr), 0);
    size_t len = 0;
    diag_ctx d;
    diag_init(&d, "t.ein", "", 0);
    d.out = open_memstream(errs, &len);
    pass_ctx ctx = {.diag = &d};
    int rc = pass_manager_run(&pm, &ctx, m);
    fclose(d.out);
    pass_registry_free(&r);
    return rc;
}

/* The manager verifies after each pass and stops at the first failure:
 * shardings (the gather's axes among them) from propagate on, and in the
 * IR the last pass hands on. */
static void test_verify_stops(void)
{
    ir_op *g1, *g2;
    ir_module *m = two_gathers(&g1, &g2);
    char *errs = NULL;
    runs = 0;
    CU_ASSERT_NOT_EQUAL(run_captured("count,propagate,break,count", m, &errs), 0);
    CU_ASSERT_EQUAL(runs, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(errs, "IR verification failed after pass 'break'"));
    free(errs);
    ir_module_free(m);
    m = two_gathers(&g1, &g2);
    runs = 0;
    CU_ASSERT_NOT_EQUAL(run_captured("count,break", m, &errs), 0);
    CU_ASSERT_EQUAL(runs, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(errs, "IR verification failed after pass 'break'"));
    free(errs);
    ir_module_free(m);
}

/* The empty pipeline (--passes=) still verifies the IR it hands on: a
 * module that verifies passes it, one that does not fails it. */
static void test_empty_pipeline(void)
{
    ir_op *g1, *g2;
    ir_module *m = two_gathers(&g1, &g2);
    char *errs = NULL;
    CU_ASSERT_EQUAL(run_captured("", m, &errs), 0);
    free(errs);
    break_ir(NULL, m);
    CU_ASSERT_NOT_EQUAL(run_captured("", m, &errs), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(errs, "IR verification failed after the empty pipeline"));
    free(errs);
    ir_module_free(m);
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
    pm.print_after = "prefetch-params";
    CU_ASSERT_EQUAL(pass_manager_parse(&pm, "prefetch-params", stderr), 0);
    diag_ctx d;
    diag_init(&d, "t.ein", "", 0);
    pass_ctx ctx = {.diag = &d};
    CU_ASSERT_EQUAL(pass_manager_run(&pm, &ctx, m), 0);
    fclose(pm.dump);
    CU_ASSERT_PTR_NOT_NULL(strstr(dump, "*** IR Dump After prefetch-params ***\n"));
    /* The param's gather now prints first. */
    char *w = strstr(dump, "W.1[I] = AllGather_X W[I_X]"), *a = strstr(dump, "A.1[I] = AllGather_X A[I_X]");
    CU_ASSERT_PTR_NOT_NULL(w);
    CU_ASSERT_PTR_NOT_NULL(a);
    CU_ASSERT(w && a && w < a);
    free(dump);
    ir_module_free(m);
    pass_registry_free(&r);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"prefetch_params", test_prefetch},
        {"parse", test_parse},
        {"pass_options", test_pass_options},
        {"verify_stops", test_verify_stops},
        {"print_after", test_print_after},
        {"empty_pipeline", test_empty_pipeline},
    };
    einc_add_suite("pass_manager", tests, (int)(sizeof tests / sizeof tests[0]));
}
