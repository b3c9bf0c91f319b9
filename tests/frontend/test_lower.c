/*
 * test_lower.c - the IR that fe_compile produces: mesh, dims, declared
 * shardings, op kinds and labels, einsum chains, elementwise trees,
 * constraints on left sides and outputs, -D overrides and single_device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "fe_test_util.h"

#define HDR "mesh X = 2, Y = 2\ndim I = 8, J = 4, K = 6, L = 4\n"
#define ABC HDR "input A[I_X, J_Y] : f32\nparam B[J_X, K] : f32\n"

/* Compiles `src`, asserting success. */
static ir_module *ok_compile(const char *src, const fe_options *o)
{
    fe_run r = fe_test_compile_str(src, o);
    if (!r.m)
        fprintf(stderr, "\nunexpected errors:\n%s", r.diag);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.m);
    CU_ASSERT_EQUAL(r.nerrors, 0);
    ir_module *m = r.m;
    r.m = NULL;
    fe_run_free(&r);
    return m;
}

static int dim(const ir_module *m, const char *name)
{
    return ir_dim_find(m, name, strlen(name));
}

/* The n-th op (0-based) in program order. */
static ir_op *nth_op(const ir_module *m, int n)
{
    ir_op *op = m->first;
    while (op && n-- > 0)
        op = op->next;
    return op;
}

static int count_ops(const ir_module *m)
{
    int n = 0;
    for (ir_op *op = m->first; op; op = op->next)
        n++;
    return n;
}

/* True if labels[0..n) spell the dims named by the letters of `names`. */
static bool labels_are(const ir_module *m, const int *labels, int n, const char *names)
{
    if ((int)strlen(names) != n)
        return false;
    for (int i = 0; i < n; i++) {
        char s[2] = {names[i], 0};
        if (labels[i] != dim(m, s))
            return false;
    }
    return true;
}

/* The value of the output named `name`. */
static ir_output *output(const ir_module *m, const char *name)
{
    for (int i = 0; i < m->noutputs; i++)
        if (strcmp(m->outputs[i].name, name) == 0)
            return &m->outputs[i];
    return NULL;
}

static void test_declarations(void)
{
    ir_module *m = ok_compile(ABC "input E[K] : bf16\noutput A\n", NULL);
    CU_ASSERT_EQUAL(m->mesh.naxes, 2);
    CU_ASSERT_EQUAL(m->mesh.axes[0].name, 'X');
    CU_ASSERT_EQUAL(m->mesh.axes[1].size, 2);
    CU_ASSERT_EQUAL(m->ndims, 4);
    CU_ASSERT_EQUAL(m->dims[dim(m, "K")].size, 6);
    CU_ASSERT_EQUAL(m->nvalues, 3);
    ir_value *a = m->values[0], *b = m->values[1], *e = m->values[2];
    CU_ASSERT_STRING_EQUAL(a->tensor, "A");
    CU_ASSERT_EQUAL(a->kind, IR_VAL_INPUT);
    CU_ASSERT_EQUAL(b->kind, IR_VAL_PARAM);
    CU_ASSERT_EQUAL(e->type.dtype, IR_BF16);
    CU_ASSERT_EQUAL(a->type.rank, 2);
    CU_ASSERT(labels_are(m, a->type.dims, 2, "IJ"));
    CU_ASSERT_EQUAL(a->type.sh.naxes[0], 1);
    CU_ASSERT_EQUAL(a->type.sh.axes[0][0], 0);
    CU_ASSERT_EQUAL(a->type.sh.axes[1][0], 1);
    CU_ASSERT_EQUAL(b->type.sh.naxes[1], 0);
    CU_ASSERT_FALSE(a->has_constraint);
    CU_ASSERT_PTR_NULL(m->first);
    CU_ASSERT_EQUAL(m->noutputs, 1);
    CU_ASSERT_PTR_EQUAL(m->outputs[0].value, a);
    CU_ASSERT_FALSE(m->outputs[0].has_constraint);
    ir_module_free(m);
}

/* An axis list `I_XY` is major to minor. */
static void test_multi_axis_sharding(void)
{
    ir_module *m = ok_compile(HDR "input A[I_YX, J] : f32\noutput A\n", NULL);
    const ir_sharding *sh = &m->values[0]->type.sh;
    CU_ASSERT_EQUAL(sh->naxes[0], 2);
    CU_ASSERT_EQUAL(sh->axes[0][0], 1);
    CU_ASSERT_EQUAL(sh->axes[0][1], 0);
    ir_module_free(m);
}

static void test_matmul(void)
{
    const char *src = ABC "C[I_X, K] = A[I, J] * B[J, K]\noutput C\n";
    ir_module *m = ok_compile(src, NULL);
    CU_ASSERT_EQUAL_FATAL(count_ops(m), 1);
    ir_op *op = m->first;
    CU_ASSERT_EQUAL(op->kind, IR_OP_EINSUM);
    CU_ASSERT_EQUAL(op->noperands, 2);
    CU_ASSERT_PTR_EQUAL(op->operands[0], m->values[0]);
    CU_ASSERT_PTR_EQUAL(op->operands[1], m->values[1]);
    CU_ASSERT(labels_are(m, op->u.einsum.labels[0], 2, "IJ"));
    CU_ASSERT(labels_are(m, op->u.einsum.labels[1], 2, "JK"));
    CU_ASSERT(labels_are(m, op->u.einsum.result_labels, 2, "IK"));
    CU_ASSERT_DOUBLE_EQUAL(op->u.einsum.scale, 1.0, 0);
    ir_value *c = op->result;
    CU_ASSERT_STRING_EQUAL(c->tensor, "C");
    CU_ASSERT(labels_are(m, c->type.dims, 2, "IK"));
    CU_ASSERT_EQUAL(c->kind, IR_VAL_OP);
    CU_ASSERT_PTR_EQUAL(c->def, op);
    /* A subscript on the left: a full constraint (K unsharded). */
    CU_ASSERT_TRUE(c->has_constraint);
    CU_ASSERT_EQUAL(c->constraint.naxes[0], 1);
    CU_ASSERT_EQUAL(c->constraint.axes[0][0], 0);
    CU_ASSERT_EQUAL(c->constraint.naxes[1], 0);
    CU_ASSERT_EQUAL(c->constraint.unreduced, 0u);
    /* Unconstrained values start replicated. */
    CU_ASSERT_EQUAL(c->type.sh.naxes[0], 0);
    CU_ASSERT_PTR_EQUAL(output(m, "C")->value, c);
    /* Locations: the op at its statement, the value at its name. */
    uint32_t stmt = (uint32_t)(strstr(src, "C[I_X") - src);
    CU_ASSERT_EQUAL(op->loc, stmt);
    CU_ASSERT_EQUAL(c->loc, stmt);
    ir_module_free(m);
}

static void test_unconstrained(void)
{
    ir_module *m = ok_compile(ABC "T[I, K] = A[I, J] * B[J, K]\noutput T\n", NULL);
    CU_ASSERT_FALSE(m->first->result->has_constraint);
    ir_module_free(m);
}

static void test_function_call(void)
{
    ir_module *m = ok_compile(ABC "G[I, J] = gelu(A[I, J])\noutput G\n", NULL);
    CU_ASSERT_EQUAL_FATAL(count_ops(m), 1);
    ir_op *op = m->first;
    CU_ASSERT_EQUAL(op->kind, IR_OP_ELEMENTWISE);
    CU_ASSERT_EQUAL(op->noperands, 1);
    CU_ASSERT_EQUAL_FATAL(op->u.ew.nnodes, 2);
    const ir_ew_node *root = &op->u.ew.nodes[op->u.ew.root];
    CU_ASSERT_EQUAL(root->kind, IR_EW_CALL);
    CU_ASSERT_EQUAL(root->fn, IR_FN_GELU);
    CU_ASSERT_EQUAL(op->u.ew.nodes[root->a].kind, IR_EW_OPERAND);
    CU_ASSERT_EQUAL(op->u.ew.nodes[root->a].operand, 0);
    CU_ASSERT(labels_are(m, op->u.ew.result_labels, 2, "IJ"));
    ir_module_free(m);
}

static void test_copy(void)
{
    ir_module *m = ok_compile(ABC "D[I, J] = A[I, J]\noutput D\n", NULL);
    CU_ASSERT_EQUAL_FATAL(count_ops(m), 1);
    ir_op *op = m->first;
    CU_ASSERT_EQUAL(op->kind, IR_OP_ELEMENTWISE);
    CU_ASSERT_EQUAL(op->u.ew.nnodes, 1);
    CU_ASSERT_EQUAL(op->u.ew.nodes[op->u.ew.root].kind, IR_EW_OPERAND);
    CU_ASSERT_PTR_EQUAL(op->operands[0], m->values[0]);
    ir_module_free(m);
}

/* `f32(Xb[I, J]) * B[J, K]`: the cast is an elementwise op from bf16 to f32
 * over all of Xb's indices, then the f32 einsum reads it; `bf16(C[I, K])`
 * converts back; a cast to the argument's own dtype adds no op. */
static void test_cast(void)
{
    ir_module *m = ok_compile(HDR "input Xb[I_X, J] : bf16\nparam B[J, K] : f32\n"
                              "C[I, K] = f32(Xb[I, J]) * B[J, K]\n"
                              "Cb[I, K] = bf16(C[I, K])\n"
                              "D[I, K] = f32(C[I, K]) + 1\n"
                              "output Cb\noutput D\n", NULL);
    CU_ASSERT_EQUAL_FATAL(count_ops(m), 4);
    ir_op *cast = nth_op(m, 0), *mm = nth_op(m, 1), *back = nth_op(m, 2), *d = nth_op(m, 3);
    CU_ASSERT_EQUAL(cast->kind, IR_OP_ELEMENTWISE);
    CU_ASSERT_EQUAL(cast->operands[0]->type.dtype, IR_BF16);
    CU_ASSERT_EQUAL(cast->result->type.dtype, IR_F32);
    CU_ASSERT(labels_are(m, cast->u.ew.result_labels, 2, "IJ"));
    CU_ASSERT_EQUAL(mm->kind, IR_OP_EINSUM);
    CU_ASSERT_PTR_EQUAL(mm->operands[0], cast->result);
    CU_ASSERT_EQUAL(mm->result->type.dtype, IR_F32);
    CU_ASSERT_EQUAL(back->result->type.dtype, IR_BF16);
    CU_ASSERT_PTR_EQUAL(back->operands[0], mm->result);
    CU_ASSERT_EQUAL(d->noperands, 1);
    CU_ASSERT_PTR_EQUAL(d->operands[0], mm->result); /* f32(C) of f32 C is C */
    ir_module_free(m);
}

/* Three factors: a chain of binary einsums, left to right. */
static void test_einsum_chain(void)
{
    ir_module *m = ok_compile(ABC "input E[K, L] : f32\nC[I, L] = A[I, J] * B[J, K] * E[K, L]\noutput C\n",
                              NULL);
    CU_ASSERT_EQUAL_FATAL(count_ops(m), 2);
    ir_op *a = nth_op(m, 0), *b = nth_op(m, 1);
    CU_ASSERT_EQUAL(a->kind, IR_OP_EINSUM);
    CU_ASSERT_EQUAL(b->kind, IR_OP_EINSUM);
    /* J is summed in the first step: no later factor needs it; K is kept for E. */
    CU_ASSERT(labels_are(m, a->u.einsum.result_labels, 2, "IK"));
    CU_ASSERT_PTR_EQUAL(b->operands[0], a->result);
    CU_ASSERT(labels_are(m, b->u.einsum.labels[0], 2, "IK"));
    CU_ASSERT(labels_are(m, b->u.einsum.labels[1], 2, "KL"));
    CU_ASSERT(labels_are(m, b->u.einsum.result_labels, 2, "IL"));
    CU_ASSERT_STRING_EQUAL(a->result->tensor, "C");
    CU_ASSERT_PTR_EQUAL(output(m, "C")->value, b->result);
    ir_module_free(m);

    /* An index a later factor needs is kept even if the left side lacks it. */
    m = ok_compile(ABC "input E[K, J] : f32\nS[I] = A[I, J] * B[J, K] * E[K, J]\noutput S\n", NULL);
    CU_ASSERT_EQUAL_FATAL(count_ops(m), 2);
    CU_ASSERT(labels_are(m, nth_op(m, 0)->u.einsum.result_labels, 3, "IJK"));
    CU_ASSERT(labels_are(m, nth_op(m, 1)->u.einsum.result_labels, 1, "I"));
    ir_module_free(m);
}

/* Summed term, constants folded into the scale, plus a broadcast term. */
static void test_einsum_plus_elementwise(void)
{
    ir_module *m = ok_compile(ABC "input F[I, K] : f32\n"
                                  "P[I_X, K]{U_Y} = 0.5 * A[I, J] * B[J, K] - 2 * F[I, K]\noutput P\n",
                              NULL);
    CU_ASSERT_EQUAL_FATAL(count_ops(m), 2);
    ir_op *e = nth_op(m, 0), *w = nth_op(m, 1);
    CU_ASSERT_EQUAL(e->kind, IR_OP_EINSUM);
    CU_ASSERT_DOUBLE_EQUAL(e->u.einsum.scale, 0.5, 0);
    CU_ASSERT_FALSE(e->result->has_constraint);
    CU_ASSERT_EQUAL(w->kind, IR_OP_ELEMENTWISE);
    CU_ASSERT_EQUAL(w->noperands, 2);
    CU_ASSERT_PTR_EQUAL(w->operands[0], e->result);
    CU_ASSERT_STRING_EQUAL(w->operands[1]->tensor, "F");
    const ir_ew_node *n = w->u.ew.nodes, *root = &n[w->u.ew.root];
    CU_ASSERT_EQUAL_FATAL(root->kind, IR_EW_SUB);
    CU_ASSERT_EQUAL(n[root->a].kind, IR_EW_OPERAND);
    CU_ASSERT_EQUAL(n[root->a].operand, 0);
    CU_ASSERT_EQUAL_FATAL(n[root->b].kind, IR_EW_MUL);
    CU_ASSERT_EQUAL(n[n[root->b].a].kind, IR_EW_CONST);
    CU_ASSERT_DOUBLE_EQUAL(n[n[root->b].a].value, 2.0, 0);
    CU_ASSERT_EQUAL(n[n[root->b].b].operand, 1);
    ir_value *p = w->result;
    CU_ASSERT_TRUE(p->has_constraint);
    CU_ASSERT_EQUAL(p->constraint.unreduced, 1u << 1);
    CU_ASSERT_EQUAL(p->constraint.axes[0][0], 0);
    CU_ASSERT_PTR_EQUAL(output(m, "P")->value, p);
    ir_module_free(m);
}

static void test_negated_einsum(void)
{
    ir_module *m = ok_compile(ABC "N[I, K] = -3 * A[I, J] * B[J, K]\noutput N\n", NULL);
    CU_ASSERT_EQUAL_FATAL(count_ops(m), 1);
    CU_ASSERT_DOUBLE_EQUAL(m->first->u.einsum.scale, -3.0, 0);
    ir_module_free(m);
}

static void test_reduction(void)
{
    ir_module *m = ok_compile(ABC "S[I] = A[I, J]\noutput S\n", NULL);
    CU_ASSERT_EQUAL_FATAL(count_ops(m), 1);
    CU_ASSERT_EQUAL(m->first->kind, IR_OP_EINSUM);
    CU_ASSERT_EQUAL(m->first->noperands, 1);
    CU_ASSERT(labels_are(m, m->first->u.einsum.result_labels, 1, "I"));
    ir_module_free(m);
}

/* `S[L, J]` on a tensor declared over [J, L] (equal sizes) relabels it. */
static void test_relabel(void)
{
    ir_module *m = ok_compile(HDR "input S[J, L] : f32\nT[L, J] = S[L, J]\noutput T\n", NULL);
    ir_op *op = m->first;
    CU_ASSERT(labels_are(m, op->operands[0]->type.dims, 2, "JL"));
    CU_ASSERT(labels_are(m, op->u.ew.labels[0], 2, "LJ"));
    CU_ASSERT(labels_are(m, op->u.ew.result_labels, 2, "LJ"));
    ir_module_free(m);
}

/* A parenthesised factor of a summed term is its own elementwise op. */
static void test_paren_in_summed_term(void)
{
    ir_module *m = ok_compile(ABC "input V[J] : f32\nC[I] = (A[I, J] + 1) * V[J]\noutput C\n", NULL);
    CU_ASSERT_EQUAL_FATAL(count_ops(m), 2);
    ir_op *w = nth_op(m, 0), *e = nth_op(m, 1);
    CU_ASSERT_EQUAL(w->kind, IR_OP_ELEMENTWISE);
    CU_ASSERT(labels_are(m, w->u.ew.result_labels, 2, "IJ"));
    CU_ASSERT_EQUAL(w->u.ew.nodes[w->u.ew.root].kind, IR_EW_ADD);
    CU_ASSERT_FALSE(w->result->has_constraint);
    CU_ASSERT_EQUAL(e->kind, IR_OP_EINSUM);
    CU_ASSERT_PTR_EQUAL(e->operands[0], w->result);
    CU_ASSERT(labels_are(m, e->u.einsum.labels[0], 2, "IJ"));
    CU_ASSERT(labels_are(m, e->u.einsum.result_labels, 1, "I"));
    ir_module_free(m);
}

static void test_broadcast(void)
{
    ir_module *m = ok_compile(HDR "input U[I] : f32\ninput V[J] : f32\nC[I, J] = U[I] * V[J] + 1\noutput C\n",
                              NULL);
    CU_ASSERT_EQUAL_FATAL(count_ops(m), 1);
    ir_op *op = m->first;
    CU_ASSERT_EQUAL(op->kind, IR_OP_ELEMENTWISE);
    CU_ASSERT(labels_are(m, op->u.ew.labels[0], 1, "I"));
    CU_ASSERT(labels_are(m, op->u.ew.labels[1], 1, "J"));
    CU_ASSERT(labels_are(m, op->u.ew.result_labels, 2, "IJ"));
    CU_ASSERT_EQUAL(op->u.ew.nodes[op->u.ew.root].kind, IR_EW_ADD);
    ir_module_free(m);
}

/* Two summed terms: two einsums combined by one elementwise op; a constant
 * call factor stays in the elementwise tree. */
static void test_two_summed_terms(void)
{
    ir_module *m = ok_compile(ABC "C[I, K] = A[I, J] * B[J, K] - exp(1) * A[I, J] * B[J, K]\noutput C\n",
                              NULL);
    CU_ASSERT_EQUAL_FATAL(count_ops(m), 3);
    ir_op *w = nth_op(m, 2);
    CU_ASSERT_EQUAL(nth_op(m, 0)->kind, IR_OP_EINSUM);
    CU_ASSERT_EQUAL(nth_op(m, 1)->kind, IR_OP_EINSUM);
    CU_ASSERT_EQUAL(w->kind, IR_OP_ELEMENTWISE);
    const ir_ew_node *n = w->u.ew.nodes, *root = &n[w->u.ew.root];
    CU_ASSERT_EQUAL_FATAL(root->kind, IR_EW_SUB);
    CU_ASSERT_EQUAL_FATAL(n[root->b].kind, IR_EW_MUL);
    CU_ASSERT_EQUAL(n[n[root->b].a].kind, IR_EW_CALL);
    CU_ASSERT_EQUAL(n[n[root->b].a].fn, IR_FN_EXP);
    ir_module_free(m);
}

/* More tensors than an op has operand slots: the tree is split. */
static void test_many_operands(void)
{
    char src[1024] = HDR;
    for (int i = 0; i < 11; i++)
        sprintf(src + strlen(src), "input A%d[I] : f32\n", i);
    strcat(src, "S[I] = A0[I]");
    for (int i = 1; i < 11; i++)
        sprintf(src + strlen(src), " + A%d[I]", i);
    strcat(src, " + A0[I] * A0[I]\noutput S\n");
    ir_module *m = ok_compile(src, NULL);
    int seen = 0, nops = 0;
    for (ir_op *op = m->first; op; op = op->next, nops++) {
        CU_ASSERT_EQUAL(op->kind, IR_OP_ELEMENTWISE);
        CU_ASSERT(op->noperands >= 1 && op->noperands <= IR_MAX_OPERANDS);
        for (int k = 0; k < op->noperands; k++)
            if (op->operands[k]->kind == IR_VAL_INPUT)
                seen |= 1 << op->operands[k]->id;
    }
    CU_ASSERT(nops >= 2);
    CU_ASSERT_EQUAL(seen, (1 << 11) - 1);
    CU_ASSERT_PTR_EQUAL(output(m, "S")->value, m->last->result);
    ir_module_free(m);

    /* The same operand twice is one operand slot. */
    m = ok_compile(ABC "Q[I, J] = A[I, J] * A[I, J]\noutput Q\n", NULL);
    CU_ASSERT_EQUAL(m->first->noperands, 1);
    ir_module_free(m);
}

static void test_output_constraints(void)
{
    ir_module *m = ok_compile(ABC "C[I, K] = A[I, J] * B[J, K]\nD[I, K] = C[I, K]\nE[I, K] = C[I, K]\n"
                                  "output C[I, K]\noutput D[I_XY, K]\noutput E\n",
                              NULL);
    ir_output *c = output(m, "C"), *d = output(m, "D"), *e = output(m, "E");
    CU_ASSERT_TRUE(c->has_constraint);
    CU_ASSERT_EQUAL(c->constraint.naxes[0], 0);
    CU_ASSERT_EQUAL(c->constraint.naxes[1], 0);
    CU_ASSERT_TRUE(d->has_constraint);
    CU_ASSERT_EQUAL(d->constraint.naxes[0], 2);
    CU_ASSERT_EQUAL(d->constraint.axes[0][1], 1);
    CU_ASSERT_FALSE(e->has_constraint);
    CU_ASSERT_EQUAL(m->noutputs, 3);
    CU_ASSERT_STRING_EQUAL(m->outputs[0].name, "C");
    ir_module_free(m);
}

static void test_defines(void)
{
    static const fe_define defs[] = {{"J", 16}, {"X", 4}};
    fe_options o = {.defines = defs, .ndefines = 2};
    ir_module *m = ok_compile(ABC "output A\n", &o);
    CU_ASSERT_EQUAL(m->dims[dim(m, "J")].size, 16);
    CU_ASSERT_EQUAL(m->dims[dim(m, "I")].size, 8);
    CU_ASSERT_EQUAL(m->mesh.axes[0].size, 4);
    CU_ASSERT_EQUAL(m->mesh.axes[1].size, 2);
    ir_module_free(m);

    /* The override is applied before the divisibility check. */
    static const fe_define bad[] = {{"I", 9}};
    fe_options o2 = {.defines = bad, .ndefines = 1};
    fe_run r = fe_test_compile_str(ABC "output A\n", &o2);
    CU_ASSERT_PTR_NULL(r.m);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.diag, "dim 'I' (9) is not divisible by the size of its mesh axes X = 2"));
    fe_run_free(&r);
}

static void test_single_device(void)
{
    fe_options o = {.single_device = true};
    ir_module *m = ok_compile(ABC "C[I_X, K]{U_Y} = A[I, J] * B[J, K]\noutput C[I_Y, K]\n", &o);
    CU_ASSERT_EQUAL(m->mesh.naxes, 2);
    CU_ASSERT_EQUAL(m->mesh.axes[0].size, 1);
    CU_ASSERT_EQUAL(m->mesh.axes[1].size, 1);
    CU_ASSERT_EQUAL(ir_mesh_devices(&m->mesh), 1);
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        CU_ASSERT_FALSE(v->has_constraint);
        CU_ASSERT_EQUAL(ir_sharding_used_axes(&v->type.sh, v->type.rank), 0u);
        CU_ASSERT_EQUAL(v->type.sh.unreduced, 0u);
    }
    CU_ASSERT_FALSE(m->outputs[0].has_constraint);
    ir_module_free(m);
}

/* A whole program from the language reference; it prints and its ops
 * reference only earlier values. */
static void test_reference_program(void)
{
    ir_module *m = ok_compile("# comment to end of line\n"
                              "mesh X = 2, Y = 2\n"
                              "dim  B = 512, D = 256, F = 1024\n"
                              "input In[B_X, D_Y] : f32\n"
                              "param Win[D_X, F_Y] : f32\n"
                              "param Wout[F_Y, D_X] : f32\n"
                              "Tmp[B, F] = In[B, D] * Win[D, F]\n"
                              "Act[B, F] = gelu(Tmp[B, F])\n"
                              "Out[B_X, D_Y] = Act[B, F] * Wout[F, D]\n"
                              "output Out",
                              NULL);
    CU_ASSERT_EQUAL(count_ops(m), 3);
    for (ir_op *op = m->first; op; op = op->next)
        for (int k = 0; k < op->noperands; k++)
            CU_ASSERT(op->operands[k]->kind != IR_VAL_OP || op->operands[k]->id < op->result->id);
    char *text = fe_test_print_ir(m);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "Act"));
    free(text);
    ir_module_free(m);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"declarations", test_declarations},
        {"multi-axis sharding", test_multi_axis_sharding},
        {"matmul", test_matmul},
        {"unconstrained left side", test_unconstrained},
        {"function call", test_function_call},
        {"cast", test_cast},
        {"copy", test_copy},
        {"einsum chain", test_einsum_chain},
        {"einsum plus elementwise", test_einsum_plus_elementwise},
        {"negated einsum", test_negated_einsum},
        {"reduction", test_reduction},
        {"relabel", test_relabel},
        {"parenthesis in summed term", test_paren_in_summed_term},
        {"broadcast", test_broadcast},
        {"two summed terms", test_two_summed_terms},
        {"many operands", test_many_operands},
        {"output constraints", test_output_constraints},
        {"-D overrides", test_defines},
        {"single device", test_single_device},
        {"reference program", test_reference_program},
    };
    einc_add_suite("frontend lowering", tests, (int)(sizeof tests / sizeof tests[0]));
}
