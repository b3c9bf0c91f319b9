/*
 * test_autodiff.c - the optimize and autodiff passes (passes/optimize.c,
 * passes/autodiff.c): the frontend records optimize lines and writes Grad
 * ops for grad statements; optimize builds the training step's Grads and
 * updates, autodiff replaces every Grad by the backward ops; the Grad ops
 * of one loss share one sweep; errors and warnings are located; the pass
 * manager hands a Grad or an optimize line to no other pass.  The gradients' values are
 * checked against finite differences and NumPy by the e2e tests
 * (tests/e2e/grad*.py, train*.py); this file checks the IR's structure.
 */
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "frontend.h"
#include "pass.h"

/* One compile and autodiff run of `src` as "t.ein": the module (NULL if
 * either reported an error) and everything printed (malloc'd). */
typedef struct run {
    ir_module *m;
    char *diag;
    int nerrors;
} run;

/* Compiles `src`; runs the optimize and autodiff passes unless
 * `frontend_only`. */
static run derive(const char *src, bool frontend_only)
{
    run r = {0};
    size_t size = 0;
    diag_ctx d;
    diag_init(&d, "t.ein", src, strlen(src));
    d.out = open_memstream(&r.diag, &size);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d.out);
    r.m = fe_compile(src, strlen(src), NULL, &d);
    pass_ctx ctx = {.diag = &d};
    if (r.m && !frontend_only && (pass_optimize(&ctx, r.m) != 0 || pass_autodiff(&ctx, r.m) != 0)) {
        ir_module_free(r.m);
        r.m = NULL;
    }
    if (r.m)
        CU_ASSERT_EQUAL(ir_verify_unplanned(r.m, &d), 0);
    fclose(d.out);
    r.nerrors = d.nerrors;
    return r;
}

static void run_free(run *r)
{
    if (r->m)
        ir_module_free(r->m);
    free(r->diag);
}

static int count_kind(const ir_module *m, ir_op_kind k)
{
    int n = 0;
    for (const ir_op *op = m->first; op; op = op->next)
        n += op->kind == k;
    return n;
}

static int count_phase(const ir_module *m, ir_phase p)
{
    int n = 0;
    for (const ir_op *op = m->first; op; op = op->next)
        n += op->phase == p;
    return n;
}

static ir_output *output(const ir_module *m, const char *name)
{
    for (int i = 0; i < m->noutputs; i++)
        if (strcmp(m->outputs[i].name, name) == 0)
            return &m->outputs[i];
    return NULL;
}

#define MLP "mesh X = 2\ndim B = 4, D = 4, F = 8\ninput In[B_X, D] : f32\n" \
            "param W1[D, F_X] : f32\nparam W2[F_X, D] : f32\n"                 \
            "H[B, F] = relu(In[B, D] * W1[D, F])\nY[B, D] = H[B, F] * W2[F, D]\n" \
            "L[] = sum(Y[B, D] * Y[B, D])\n"

/* The frontend writes a Grad op per grad statement; the pass leaves none,
 * and the statement's output reads a backward op's result, sharded like
 * the param (FSDP's ReduceScatter, seed 000). */
static void test_grad_op(void)
{
    const char *src = MLP "G[D, F] = grad(L, W1)\noutput G\n";
    run fe = derive(src, true);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fe.m);
    CU_ASSERT_EQUAL(count_kind(fe.m, IR_OP_GRAD), 1);
    CU_ASSERT_EQUAL(count_phase(fe.m, IR_PHASE_BACKWARD), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ir_print(f, fe.m);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "G[D, F] = Grad L.1[], W1[D, F_X]"));
    free(text);
    run_free(&fe);
    run r = derive(src, false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.m);
    CU_ASSERT_EQUAL(count_kind(r.m, IR_OP_GRAD), 0);
    CU_ASSERT(count_phase(r.m, IR_PHASE_BACKWARD) > 0);
    ir_output *g = output(r.m, "G");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g->value->def);
    CU_ASSERT_EQUAL(g->value->def->phase, IR_PHASE_BACKWARD);
    CU_ASSERT_TRUE(g->value->has_constraint);
    CU_ASSERT_EQUAL(g->value->constraint.naxes[1], 1); /* F_X, like W1 */
    CU_ASSERT_EQUAL(g->value->constraint.naxes[0], 0);
    run_free(&r);
}

/* A grad statement and an optimize line of the same loss share one sweep:
 * adding `G = grad(L, W1)` adds no backward op, and G is the gradient the
 * update of W1 reads. */
static void test_one_sweep(void)
{
    run a = derive(MLP "loss L\noptimize W1, W2 with sgd(lr=0.1)\n", false);
    run b = derive(MLP "G[D, F] = grad(L, W1)\noutput G\nloss L\noptimize W1, W2 with sgd(lr=0.1)\n", false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a.m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b.m);
    int na = count_phase(a.m, IR_PHASE_BACKWARD), nb = count_phase(b.m, IR_PHASE_BACKWARD);
    CU_ASSERT(na > 0);
    CU_ASSERT_EQUAL(na, nb);
    const ir_value *g = output(b.m, "G")->value;
    bool read_by_update = false;
    for (int i = 0; i < g->nuses; i++)
        read_by_update |= g->uses[i].op->phase == IR_PHASE_UPDATE;
    CU_ASSERT_TRUE(read_by_update);
    run_free(&a);
    run_free(&b);
}

/* The frontend records an optimize line; the optimize pass makes one Grad
 * per param (sharded like it unless a grad statement says otherwise) and
 * the update ops (phase update) that read it, and AdamW's state. */
static void test_optimize_lines(void)
{
    const char *src = MLP "loss L\noptimize W1 with sgd(lr=0.1)\noptimize W2 with adamw(lr=0.01)\n";
    run fe = derive(src, true);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fe.m);
    CU_ASSERT_EQUAL(fe.m->nopt_lines, 2);
    CU_ASSERT_EQUAL(fe.m->opt_lines[1].opt, IR_OPT_ADAMW);
    CU_ASSERT_EQUAL(fe.m->opt_lines[1].hp[IR_ADAMW_LR], 0.01);
    CU_ASSERT_EQUAL(fe.m->opt_lines[1].hp[IR_ADAMW_BETA2], 0.999); /* the default */
    CU_ASSERT_EQUAL(count_kind(fe.m, IR_OP_GRAD), 0);
    CU_ASSERT_EQUAL(count_phase(fe.m, IR_PHASE_UPDATE), 0);
    diag_ctx d;
    diag_init(&d, "t.ein", src, strlen(src));
    pass_ctx ctx = {.diag = &d};
    CU_ASSERT_EQUAL_FATAL(pass_optimize(&ctx, fe.m), 0);
    CU_ASSERT_EQUAL(fe.m->nopt_lines, 0);
    CU_ASSERT_EQUAL(count_kind(fe.m, IR_OP_GRAD), 2);
    int nstate = 0;
    for (int i = 0; i < fe.m->nvalues; i++)
        nstate += fe.m->values[i]->kind == IR_VAL_STATE;
    CU_ASSERT_EQUAL(nstate, 3); /* W2.m, W2.v, opt.step */
    for (const ir_op *op = fe.m->first; op; op = op->next)
        if (op->kind == IR_OP_GRAD) {
            CU_ASSERT_TRUE(op->u.grad.optimize);
            CU_ASSERT_TRUE(op->u.grad.shard_like_w);
            CU_ASSERT_EQUAL(op->result->nuses > 0, true);
            CU_ASSERT_EQUAL(op->result->uses[0].op->phase, IR_PHASE_UPDATE);
        }
    CU_ASSERT_EQUAL(ir_verify_unplanned(fe.m, &d), 0);
    run_free(&fe);
}

/* grad through a repeated block: a backward loop over the layers in
 * reverse; the forward loop stacks the carried value its backward reads,
 * and the backward loop stacks the layers' gradients of W, which are G. */
static void test_grad_repeat(void)
{
    run r = derive("dim L = 3, B = 2, D = 4, E = 4\ninput X[B, D] : f32\n"
                   "param W[L, E, D] : f32\nrepeat L {\n"
                   "X[B, D] = X[B, D] + X[B, E] * W[E, D]\n}\n"
                   "S[] = sum(X[B, D] * X[B, D])\nG[L, E, D] = grad(S, W)\noutput G\n",
                   false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.m);
    ir_module *m = r.m;
    ir_op *loops[2] = {NULL, NULL};
    int nloops = 0, stacks[2] = {0, 0};
    for (ir_op *op = m->first; op; op = op->next) {
        if (op->kind == IR_OP_LOOPBEGIN && nloops < 2)
            loops[nloops++] = op;
        if (op->kind == IR_OP_LAYERSTACK) {
            CU_ASSERT_PTR_NOT_NULL_FATAL(op->loop);
            stacks[op->loop == loops[0] ? 0 : 1]++;
            CU_ASSERT_EQUAL(op->result->type.dims[0], ir_dim_find(m, "L", 1));
        }
    }
    CU_ASSERT_EQUAL_FATAL(nloops, 2);
    CU_ASSERT_FALSE(loops[0]->u.loop.reverse);
    CU_ASSERT_TRUE(loops[1]->u.loop.reverse);
    CU_ASSERT_EQUAL(stacks[0], 1); /* X at the top of each layer */
    CU_ASSERT_EQUAL(stacks[1], 1); /* dW of each layer */
    ir_output *g = output(m, "G");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g->value->def);
    CU_ASSERT_EQUAL(g->value->def->kind, IR_OP_LAYERSTACK);
    CU_ASSERT_PTR_EQUAL(g->value->def->loop, loops[1]);
    run_free(&r);
}

/* A param the loss does not reach compiles, with a warning at its name. */
static void test_zero_warning(void)
{
    run r = derive("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nparam V[I] : f32\n"
                   "L[] = sum(A[I] * W[I])\nloss L\noptimize W, V with sgd(lr=0.1)\n",
                   false);
    CU_ASSERT_PTR_NOT_NULL(r.m);
    CU_ASSERT_EQUAL(r.nerrors, 0);
    CU_ASSERT_STRING_EQUAL(r.diag, "t.ein:7:13: warning: the loss 'L' does not depend on 'V': its "
                                   "gradient is zero, and only weight decay changes it\n"
                                   "    optimize W, V with sgd(lr=0.1)\n"
                                   "                ^\n");
    run_free(&r);
}

/* A grad inside a repeat block is refused where it is written (it used to
 * give a gradient of zeros). */
static void test_grad_in_block(void)
{
    run r = derive("dim L = 3, B = 2, D = 4, E = 4\ninput X[B, D] : f32\nparam W[L, E, D] : f32\n"
                   "repeat L {\nX[B, D] = X[B, D] + X[B, E] * W[E, D]\nS[] = sum(X[B, D])\n"
                   "G[L, E, D] = grad(S, W)\n}\noutput X\n",
                   false);
    CU_ASSERT_PTR_NULL(r.m);
    CU_ASSERT_EQUAL(r.nerrors, 1);
    CU_ASSERT_STRING_EQUAL(r.diag, "t.ein:7:1: error: grad inside a 'repeat' block is not "
                                   "supported: take the gradient after the block\n"
                                   "    G[L, E, D] = grad(S, W)\n"
                                   "    ^\n");
    run_free(&r);
}

/* A gradient that is a forward value (dL/dW of sum(W * A) is A) is copied,
 * so the gradient's sharding is its own and A keeps none. */
static void test_forward_value_copied(void)
{
    run r = derive("mesh X = 2\ndim I = 4\ninput A[I] : f32\nparam W[I] : f32\n"
                   "L[] = sum(W[I] * A[I])\nG[I_X] = grad(L, W)\noutput G\n",
                   false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.m);
    const ir_value *a = r.m->values[0], *g = output(r.m, "G")->value;
    CU_ASSERT_STRING_EQUAL(a->tensor, "A");
    CU_ASSERT_PTR_NOT_EQUAL(g, a);
    CU_ASSERT_FALSE(a->has_constraint);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g->def);
    CU_ASSERT_EQUAL(g->def->phase, IR_PHASE_BACKWARD);
    CU_ASSERT_TRUE(g->has_constraint);
    CU_ASSERT_EQUAL(g->constraint.naxes[0], 1);
    run_free(&r);
}

/* The manager hands a Grad op to no pass but autodiff, and says how to
 * order the pipeline; the default pipeline starts with autodiff. */
static void test_manager_order(void)
{
    const char *src = MLP "G[D, F] = grad(L, W1)\noutput G\n";
    run r = derive(src, true);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.m);
    pass_registry reg;
    pass_registry_init(&reg);
    pass_manager pm;
    memset(&pm, 0, sizeof pm);
    pm.registry = &reg;
    CU_ASSERT_EQUAL_FATAL(pass_manager_parse(&pm, "propagate,autodiff", stderr), 0);
    char *errs = NULL;
    size_t len = 0;
    diag_ctx d;
    diag_init(&d, "t.ein", src, strlen(src));
    d.out = open_memstream(&errs, &len);
    pass_ctx ctx = {.diag = &d};
    CU_ASSERT_NOT_EQUAL(pass_manager_run(&pm, &ctx, r.m), 0);
    fclose(d.out);
    CU_ASSERT_PTR_NOT_NULL(strstr(errs, "pass 'propagate' needs the backward pass derived: put "
                                        "'autodiff' before it"));
    free(errs);
    run_free(&r);
    /* An optimize line unlowered: autodiff itself must wait for optimize. */
    const char *train = MLP "loss L\noptimize W1 with sgd(lr=0.1)\n";
    r = derive(train, true);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.m);
    CU_ASSERT_EQUAL_FATAL(pass_manager_parse(&pm, "autodiff,optimize", stderr), 0);
    diag_init(&d, "t.ein", train, strlen(train));
    d.out = open_memstream(&errs, &len);
    ctx = (pass_ctx){.diag = &d};
    CU_ASSERT_NOT_EQUAL(pass_manager_run(&pm, &ctx, r.m), 0);
    fclose(d.out);
    CU_ASSERT_PTR_NOT_NULL(strstr(errs, "pass 'autodiff' needs the training step built: put "
                                        "'optimize' first"));
    free(errs);
    CU_ASSERT_EQUAL(strncmp(PASS_DEFAULT_PIPELINE, "optimize,autodiff,", 18), 0);
    pass_registry_free(&reg);
    run_free(&r);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"grad statement", test_grad_op},
        {"optimize lines", test_optimize_lines},
        {"one sweep per loss", test_one_sweep},
        {"grad through a repeated block", test_grad_repeat},
        {"a param the loss does not reach", test_zero_warning},
        {"grad inside a repeat block", test_grad_in_block},
        {"a forward value as the gradient", test_forward_value_copied},
        {"pipeline order", test_manager_order},
    };
    einc_add_suite("autodiff", tests, (int)(sizeof tests / sizeof tests[0]));
}
