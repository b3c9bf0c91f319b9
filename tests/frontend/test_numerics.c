/*
 * test_numerics.c - the lowered IR computes what the source says.
 *
 * Each case compiles a program (single_device, so shardings do not matter),
 * runs the ops with a small reference evaluator over global shapes in double
 * precision (einsum: sum of products over all label assignments; elementwise:
 * the expression tree with operands broadcast by label), and compares the
 * outputs with NumPy evaluating the same formula written independently with
 * np.einsum and broadcasting (/usr/bin/python3).  This checks the Einstein
 * convention, einsum chains, relabeling, broadcasting, signs and scales.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cunit_main.h"
#include "fe_test_util.h"

/* Values computed so far: data[id] is a dense row-major array over the
 * value's global dims. */
typedef struct evaluator {
    const ir_module *m; /* the program */
    double **data;      /* by value id, malloc'd */
} evaluator;

static int64_t elems(const ir_module *m, const ir_value *v)
{
    int64_t n = 1;
    for (int i = 0; i < v->type.rank; i++)
        n *= m->dims[v->type.dims[i]].size;
    return n;
}

/* The deterministic input element k of input number `which`. */
static double input_elem(int which, int64_t k)
{
    return sin(0.7 * (double)k + 1.3 * which) + 0.25 * which;
}

/* Offset into operand values (labels `lab`, n positions) at the assignment
 * `at` (indexed by dim id). */
static int64_t offset(const ir_module *m, const int *lab, int n, const int64_t *at)
{
    int64_t off = 0;
    for (int i = 0; i < n; i++)
        off = off * m->dims[lab[i]].size + at[lab[i]];
    return off;
}

static double apply(ir_func f, double x)
{
    switch (f) {
    case IR_FN_EXP: return exp(x);
    case IR_FN_LOG: return log(x);
    case IR_FN_TANH: return tanh(x);
    case IR_FN_RELU: return x > 0 ? x : 0;
    case IR_FN_SIGMOID: return 1 / (1 + exp(-x));
    case IR_FN_SILU: return x / (1 + exp(-x));
    case IR_FN_SQRT: return sqrt(x);
    case IR_FN_RSQRT: return 1 / sqrt(x);
    case IR_FN_NEG: return -x;
    case IR_FN_ABS: return fabs(x);
    case IR_FN_SIN: return sin(x);
    case IR_FN_COS: return cos(x);
    default: return NAN; /* gelu: its exact form is codegen's business */
    }
}

static double eval_node(const evaluator *e, const ir_op *op, int node, const int64_t *at)
{
    const ir_ew_node *n = &op->u.ew.nodes[node];
    switch (n->kind) {
    case IR_EW_OPERAND: {
        const ir_value *v = op->operands[n->operand];
        return e->data[v->id][offset(e->m, op->u.ew.labels[n->operand], v->type.rank, at)];
    }
    case IR_EW_CONST: return n->value;
    case IR_EW_INDEX: return (double)at[n->dim];
    case IR_EW_CALL: return apply(n->fn, eval_node(e, op, n->a, at));
    case IR_EW_SELECT:
        return eval_node(e, op, n->a, at) != 0 ? eval_node(e, op, n->b, at)
                                               : eval_node(e, op, n->c, at);
    default:
        break;
    }
    double a = eval_node(e, op, n->a, at), b = eval_node(e, op, n->b, at);
    switch (n->kind) {
    case IR_EW_ADD: return a + b;
    case IR_EW_SUB: return a - b;
    case IR_EW_MUL: return a * b;
    case IR_EW_DIV: return a / b;
    case IR_EW_MAX: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    case IR_EW_MIN: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
    case IR_EW_LT: return a < b;
    case IR_EW_LE: return a <= b;
    case IR_EW_GT: return a > b;
    case IR_EW_GE: return a >= b;
    case IR_EW_EQ: return a == b;
    case IR_EW_NE: return a != b;
    default: return NAN;
    }
}

/* Runs `op`: loops over every assignment of the labels it mentions. */
static void run_op(evaluator *e, const ir_op *op)
{
    const ir_module *m = e->m;
    const ir_value *r = op->result;
    bool ein = op->kind == IR_OP_EINSUM;
    const int *rl = ein ? op->u.einsum.result_labels : op->u.ew.result_labels;
    int labels[64], n = 0;
    for (int i = 0; i < r->type.rank; i++)
        labels[n++] = rl[i];
    for (int k = 0; ein && k < op->noperands; k++)
        for (int i = 0; i < op->operands[k]->type.rank; i++) {
            int d = op->u.einsum.labels[k][i], j = 0;
            while (j < n && labels[j] != d)
                j++;
            if (j == n)
                labels[n++] = d;
        }
    double *out = calloc((size_t)elems(m, r), sizeof *out);
    int64_t *at = calloc((size_t)m->ndims, sizeof *at);
    ir_reduce red = ein ? op->u.einsum.reduce : IR_RED_SUM;
    for (int64_t i = 0; red != IR_RED_SUM && i < elems(m, r); i++)
        out[i] = red == IR_RED_MAX ? -INFINITY : INFINITY;
    for (;;) {
        int64_t o = offset(m, rl, r->type.rank, at);
        if (ein) {
            /* Max and min einsums are unary: the scale applies after (1 here). */
            double p = red == IR_RED_SUM ? op->u.einsum.scale : 1.0;
            for (int k = 0; k < op->noperands; k++) {
                const ir_value *v = op->operands[k];
                p *= e->data[v->id][offset(m, op->u.einsum.labels[k], v->type.rank, at)];
            }
            if (red == IR_RED_MAX)
                out[o] = p > out[o] ? p : out[o];
            else if (red == IR_RED_MIN)
                out[o] = p < out[o] ? p : out[o];
            else
                out[o] += p;
        } else {
            out[o] = eval_node(e, op, op->u.ew.root, at);
        }
        int i = n - 1;
        while (i >= 0 && ++at[labels[i]] == m->dims[labels[i]].size)
            at[labels[i--]] = 0;
        if (i < 0)
            break;
    }
    free(at);
    e->data[r->id] = out;
}

/* Compiles and evaluates `src`, runs the NumPy script made of the inputs'
 * definitions and `numpy` (which must print the expected output values,
 * flattened), and compares with output 0. */
static void check(const char *src, const char *numpy)
{
    fe_options o = {.single_device = true};
    fe_run r = fe_test_compile_str(src, &o);
    if (!r.m)
        fprintf(stderr, "\n%s", r.diag);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.m);
    ir_module *m = r.m;
    evaluator e = {.m = m, .data = calloc((size_t)m->nvalues, sizeof(double *))};
    char path[] = "/tmp/einc_fe_numXXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    FILE *py = fdopen(fd, "w");
    fprintf(py, "import numpy as np\nnp.set_printoptions(precision=17)\n");
    int which = 0;
    for (int i = 0; i < m->nvalues; i++) {
        ir_value *v = m->values[i];
        if (v->kind == IR_VAL_OP)
            continue;
        int64_t n = elems(m, v);
        e.data[v->id] = malloc((size_t)n * sizeof(double));
        fprintf(py, "%s = np.array([", v->tensor);
        for (int64_t k = 0; k < n; k++) {
            e.data[v->id][k] = input_elem(which, k);
            fprintf(py, "%.17g,", e.data[v->id][k]);
        }
        fprintf(py, "]).reshape([");
        for (int d = 0; d < v->type.rank; d++)
            fprintf(py, "%" PRId64 ",", m->dims[v->type.dims[d]].size);
        fprintf(py, "])\n");
        which++;
    }
    fprintf(py, "%s\n", numpy);
    fclose(py);
    for (ir_op *op = m->first; op; op = op->next)
        run_op(&e, op);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s", path);
    FILE *p = popen(cmd, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    const ir_value *out = m->outputs[0].value;
    int64_t n = elems(m, out), got = 0;
    double want, worst = 0;
    while (fscanf(p, "%lf", &want) == 1) {
        if (got < n) {
            double d = fabs(want - e.data[out->id][got]);
            worst = d > worst ? d : worst;
        }
        got++;
    }
    CU_ASSERT_EQUAL(pclose(p), 0);
    unlink(path);
    CU_ASSERT_EQUAL(got, n);
    CU_ASSERT(worst < 1e-9);
    if (got != n || !(worst < 1e-9))
        fprintf(stderr, "\nnumpy mismatch for:\n%s(%" PRId64 " of %" PRId64 " values, max error %g)\n",
                src, got, n, worst);
    for (int i = 0; i < m->nvalues; i++)
        free(e.data[i]);
    free(e.data);
    fe_run_free(&r);
}

#define DIMS "mesh X = 2\ndim I = 2, J = 3, K = 4, L = 3\n"
#define PRINT "\nfor x in np.asarray(R).ravel(): print(repr(float(x)))"

static void test_matmul(void)
{
    check(DIMS "input A[I_X, J] : f64\nparam B[J, K] : f64\nC[I, K] = A[I, J] * B[J, K]\noutput C\n",
          "R = A @ B" PRINT);
}

static void test_chain_with_scale(void)
{
    check(DIMS "input A[I, J] : f64\ninput B[J, K] : f64\ninput E[K, J] : f64\n"
               "S[I] = -0.5 * A[I, J] * B[J, K] * 3 * E[K, J]\noutput S\n",
          "R = -1.5 * np.einsum('ij,jk,kj->i', A, B, E)" PRINT);
}

static void test_relabel_transpose(void)
{
    /* J and L have the same size: S[L, J] reads S transposed. */
    check(DIMS "input S[J, L] : f64\ninput V[J] : f64\nT[J] = S[L, J] * V[L]\noutput T\n",
          "R = np.einsum('lj,l->j', S, V)" PRINT);
}

static void test_mixed_terms(void)
{
    check(DIMS "input A[I, J] : f64\ninput B[J, K] : f64\ninput F[I, K] : f64\ninput V[K] : f64\n"
               "P[I, K] = 0.5 * A[I, J] * B[J, K] - 2 * F[I, K] + tanh(V[K]) * A[I, J] * A[I, J]"
               " - exp(1) * F[I, K] * V[K]\noutput P\n",
          "R = 0.5 * A @ B - 2 * F + np.tanh(V)[None, :] * np.einsum('ij,ij->i', A, A)[:, None]"
          " - np.e * F * V[None, :]" PRINT);
}

static void test_parens_and_broadcast(void)
{
    check(DIMS "input A[I, J] : f64\ninput U[I] : f64\ninput V[J] : f64\n"
               "C[I] = (A[I, J] + U[I] * V[J]) * sigmoid(V[J] - 1) - relu(U[I])\noutput C\n",
          "R = np.einsum('ij,j->i', A + U[:, None] * V[None, :], 1 / (1 + np.exp(-(V - 1))))"
          " - np.maximum(U, 0)" PRINT);
}

static void test_many_operands(void)
{
    check(DIMS "input A0[I] : f64\ninput A1[I] : f64\ninput A2[I] : f64\ninput A3[I] : f64\n"
               "input A4[I] : f64\ninput A5[I] : f64\ninput A6[J] : f64\ninput A7[J] : f64\n"
               "input A8[J] : f64\ninput A9[J] : f64\n"
               "S[I, J] = A0[I] * A6[J] - A1[I] * A7[J] + A2[I] * A8[J] - A3[I] * A9[J] + A4[I] - A5[I]"
               " * (A6[J] + A7[J] + A8[J] + A9[J] + A0[I] + A1[I] + A2[I] + A3[I] + A4[I])\noutput S\n",
          "a = [A0, A1, A2, A3, A4, A5]\nb = [A6, A7, A8, A9]\n"
          "o = np.outer\nR = o(A0, A6) - o(A1, A7) + o(A2, A8) - o(A3, A9) + A4[:, None]"
          " - A5[:, None] * (sum(b)[None, :] + sum(a[:5])[:, None])" PRINT);
}

static void test_reduction_to_scalar(void)
{
    check(DIMS "input A[I, J] : f64\nS[] = -(A[I, J] * A[I, J])\noutput S\n",
          "R = -np.sum(A * A)" PRINT);
}

static void test_division_and_index_values(void)
{
    /* A divisor in a summed term, an index value summed over, a number divisor. */
    check(DIMS "input A[I, J] : f64\ninput V[J] : f64\n"
               "S[I] = A[I, J] / (V[J] * V[J] + 1) + A[I, J] * J / 4 - I / 2 * 3\noutput S\n",
          "j = np.arange(3.0)\ni = np.arange(2.0)\n"
          "R = A @ (1 / (V * V + 1)) + A @ j / 4 - i / 2 * 3" PRINT);
}

static void test_where_maximum_minimum(void)
{
    /* J and L have the same size, so J <= L is a triangle. */
    check(DIMS "input S[J, L] : f64\ninput V[J] : f64\n"
               "M[J, L] = where(L <= J, S[J, L], -inf)\n"
               "R[J, L] = maximum(M[J, L], V[J]) - minimum(abs(S[J, L]), 0.5) + "
               "where(S[J, L] != V[L], 1, 0) / 8\noutput R\n",
          "j, l = np.meshgrid(np.arange(3.0), np.arange(3.0), indexing='ij')\n"
          "M = np.where(l <= j, S, -np.inf)\n"
          "R = np.maximum(M, V[:, None]) - np.minimum(np.abs(S), 0.5) + "
          "np.where(S != V[None, :], 1, 0) / 8" PRINT);
}

static void test_reductions_and_softmax(void)
{
    /* Reductions over what the left side lacks, or over a named index;
     * softmax over a named index, stable; mean = sum / count. */
    check(DIMS "input A[I, J, K] : f64\ninput V[K] : f64\n"
               "R[I, J] = max(A[I, J, K]) - min(A[I, J, K] * V[K]) + mean(A[I, J, K]) + "
               "sum(A[I, J, K], K) * 2 + softmax(A[I, J, K] * 30, K) * V[K] + "
               "max(A[I, J, K] - V[K], I) / 2\noutput R\n",
          "s = np.exp(30 * A - (30 * A).max(axis=2, keepdims=True))\n"
          "s = s / s.sum(axis=2, keepdims=True)\n"
          "R = A.max(axis=2) - (A * V).min(axis=2) + A.mean(axis=2) + A.sum(axis=2) * 2 + "
          "(s * V).sum(axis=2) + (A - V).max(axis=0).sum(axis=1)[None, :] / 2" PRINT);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"reductions and softmax", test_reductions_and_softmax},
        {"division and index values", test_division_and_index_values},
        {"where, maximum, minimum, abs", test_where_maximum_minimum},
        {"matmul", test_matmul},
        {"chain with scale", test_chain_with_scale},
        {"relabel transpose", test_relabel_transpose},
        {"mixed terms", test_mixed_terms},
        {"parentheses and broadcast", test_parens_and_broadcast},
        {"many operands", test_many_operands},
        {"reduction to a scalar", test_reduction_to_scalar},
    };
    einc_add_suite("frontend numerics vs NumPy", tests, (int)(sizeof tests / sizeof tests[0]));
}
