/*
 * grad_ew.c - the adjoint rules of elementwise ops: the chain rule.
 *
 * An elementwise op's expression tree is differentiated symbolically, node
 * by node (deriv), into a new tree per operand; the derivatives of the
 * unary functions are fn_deriv's table (the forms codegen evaluates, e.g.
 * gelu's tanh form).  The product with the result's adjoint is then summed
 * over the labels the operand was broadcast along (grad_accum.c).
 */
#include <math.h>

#include "grad_internal.h"

/* The subtree of `op`'s expression at node `n`, as a tree to emit. */
static ir_ewt *copy_tree(ad_ctx *g, const ir_op *op, int n)
{
    const ir_ew_node *x = &op->u.ew.nodes[n];
    switch (x->kind) {
    case IR_EW_OPERAND: {
        const ir_value *v = op->operands[x->operand];
        return ir_ewt_leaf(g->e.arena, ad_val(g, op->operands[x->operand]),
                           op->u.ew.labels[x->operand], v->type.rank);
    }
    case IR_EW_CONST: return cnst(g, x->value);
    case IR_EW_INDEX: return ir_ewt_index(g->e.arena, x->dim);
    case IR_EW_CALL: return call(g, x->fn, copy_tree(g, op, x->a));
    case IR_EW_SELECT:
        return ir_ewt_select(g->e.arena, copy_tree(g, op, x->a), copy_tree(g, op, x->b),
                             copy_tree(g, op, x->c));
    default: return bin(g, x->kind, copy_tree(g, op, x->a), copy_tree(g, op, x->b));
    }
}

/* Whether fn_deriv writes f' with f(a) when it is given (fx). */
static bool deriv_uses_fx(ir_func fn)
{
    return fn == IR_FN_EXP || fn == IR_FN_TANH || fn == IR_FN_SIGMOID || fn == IR_FN_SQRT ||
           fn == IR_FN_RSQRT;
}

/* f'(a) for a unary function f, given the tree of a and (when the call is
 * the op's root) the op's own result `fx` as a leaf, which saves
 * recomputing f(a). */
static ir_ewt *fn_deriv(ad_ctx *g, ir_func fn, ir_ewt *a, ir_ewt *fx)
{
    switch (fn) {
    case IR_FN_EXP: return fx ? fx : call(g, IR_FN_EXP, a);
    case IR_FN_LOG: return bin(g, IR_EW_DIV, cnst(g, 1.0), a);
    case IR_FN_TANH: {
        ir_ewt *t = fx ? fx : call(g, IR_FN_TANH, a);
        return bin(g, IR_EW_SUB, cnst(g, 1.0), bin(g, IR_EW_MUL, t, t));
    }
    case IR_FN_RELU:
        return ir_ewt_select(g->e.arena, bin(g, IR_EW_GT, a, cnst(g, 0.0)), cnst(g, 1.0),
                             cnst(g, 0.0));
    case IR_FN_GELU: {
        /* gelu(x) = x s, s = sigmoid(2k (x + c x^3)), k = sqrt(2/pi),
         * c = 0.044715 (the tanh form codegen evaluates):
         * gelu'(x) = s + x s (1 - s) 2k (1 + 3c x^2). */
        double k2 = 2.0 * sqrt(2.0 / M_PI), c = 0.044715;
        ir_ewt *x2 = bin(g, IR_EW_MUL, a, a);
        ir_ewt *u = bin(g, IR_EW_MUL, cnst(g, k2),
                        bin(g, IR_EW_ADD, a, bin(g, IR_EW_MUL, cnst(g, c), bin(g, IR_EW_MUL, x2, a))));
        ir_ewt *s = call(g, IR_FN_SIGMOID, u);
        ir_ewt *du = bin(g, IR_EW_MUL, cnst(g, k2),
                         bin(g, IR_EW_ADD, cnst(g, 1.0), bin(g, IR_EW_MUL, cnst(g, 3.0 * c), x2)));
        ir_ewt *ds = bin(g, IR_EW_MUL, s, bin(g, IR_EW_SUB, cnst(g, 1.0), s));
        return bin(g, IR_EW_ADD, s, bin(g, IR_EW_MUL, a, bin(g, IR_EW_MUL, ds, du)));
    }
    case IR_FN_SILU: {
        /* x s(x): s + x s (1 - s) */
        ir_ewt *s = call(g, IR_FN_SIGMOID, a);
        return bin(g, IR_EW_MUL, s,
                   bin(g, IR_EW_ADD, cnst(g, 1.0),
                       bin(g, IR_EW_MUL, a, bin(g, IR_EW_SUB, cnst(g, 1.0), s))));
    }
    case IR_FN_SIGMOID: {
        ir_ewt *s = fx ? fx : call(g, IR_FN_SIGMOID, a);
        return bin(g, IR_EW_MUL, s, bin(g, IR_EW_SUB, cnst(g, 1.0), s));
    }
    case IR_FN_SQRT:
        return bin(g, IR_EW_DIV, cnst(g, 0.5), fx ? fx : call(g, IR_FN_SQRT, a));
    case IR_FN_RSQRT:
        /* -1/2 x^(-3/2) = -0.5 rsqrt(x) / x */
        return bin(g, IR_EW_DIV,
                   bin(g, IR_EW_MUL, cnst(g, -0.5), fx ? fx : call(g, IR_FN_RSQRT, a)), a);
    case IR_FN_NEG: return cnst(g, -1.0);
    case IR_FN_ABS:
        /* sign(x), 0 at 0 (as JAX's). */
        return ir_ewt_select(g->e.arena, bin(g, IR_EW_GT, a, cnst(g, 0.0)), cnst(g, 1.0),
                             ir_ewt_select(g->e.arena, bin(g, IR_EW_LT, a, cnst(g, 0.0)),
                                          cnst(g, -1.0), cnst(g, 0.0)));
    case IR_FN_SIN: return call(g, IR_FN_COS, a);
    case IR_FN_COS: return bin(g, IR_EW_MUL, cnst(g, -1.0), call(g, IR_FN_SIN, a));
    case IR_FN_COUNT: break;
    }
    return NULL;
}

/* d(node n of op's expression) / d(operand k), as a tree over the op's
 * result labels; NULL when it is zero.  `fx` is the op's result as a leaf
 * (for n == root). */
static ir_ewt *deriv(ad_ctx *g, const ir_op *op, int n, int k, ir_ewt *fx)
{
    const ir_ew_node *x = &op->u.ew.nodes[n];
    switch (x->kind) {
    case IR_EW_OPERAND: return x->operand == k ? cnst(g, 1.0) : NULL;
    case IR_EW_CONST:
    case IR_EW_INDEX:
    case IR_EW_LT:
    case IR_EW_LE:
    case IR_EW_GT:
    case IR_EW_GE:
    case IR_EW_EQ:
    case IR_EW_NE: return NULL; /* piecewise constant */
    case IR_EW_ADD:
    case IR_EW_SUB: {
        ir_ewt *da = deriv(g, op, x->a, k, NULL), *db = deriv(g, op, x->b, k, NULL);
        if (x->kind == IR_EW_SUB && db)
            db = bin(g, IR_EW_MUL, cnst(g, -1.0), db);
        return add(g, da, db);
    }
    case IR_EW_MUL: {
        /* Only the factors a nonzero term needs: in a backward loop each
         * one read is an activation kept for every layer. */
        ir_ewt *da = deriv(g, op, x->a, k, NULL), *db = deriv(g, op, x->b, k, NULL);
        return add(g, da ? mul(g, da, copy_tree(g, op, x->b)) : NULL,
                   db ? mul(g, copy_tree(g, op, x->a), db) : NULL);
    }
    case IR_EW_DIV: {
        /* (a/b)' = a'/b - a b' / b^2 */
        ir_ewt *da = deriv(g, op, x->a, k, NULL), *db = deriv(g, op, x->b, k, NULL);
        if (!da && !db)
            return NULL;
        ir_ewt *b = copy_tree(g, op, x->b);
        ir_ewt *t1 = da ? bin(g, IR_EW_DIV, da, b) : NULL;
        ir_ewt *t2 = db ? bin(g, IR_EW_DIV, mul(g, copy_tree(g, op, x->a), db), bin(g, IR_EW_MUL, b, b))
                       : NULL;
        if (t2)
            t2 = bin(g, IR_EW_MUL, cnst(g, -1.0), t2);
        return add(g, t1, t2);
    }
    case IR_EW_MAX:
    case IR_EW_MIN: {
        /* The derivative of the side that is taken (a on ties). */
        ir_ewt *da = deriv(g, op, x->a, k, NULL), *db = deriv(g, op, x->b, k, NULL);
        if (!da && !db)
            return NULL;
        ir_ewt *cond = bin(g, x->kind == IR_EW_MAX ? IR_EW_GE : IR_EW_LE, copy_tree(g, op, x->a),
                           copy_tree(g, op, x->b));
        return ir_ewt_select(g->e.arena, cond, da ? da : cnst(g, 0.0), db ? db : cnst(g, 0.0));
    }
    case IR_EW_SELECT: {
        ir_ewt *db = deriv(g, op, x->b, k, NULL), *dc = deriv(g, op, x->c, k, NULL);
        if (!db && !dc)
            return NULL;
        return ir_ewt_select(g->e.arena, copy_tree(g, op, x->a), db ? db : cnst(g, 0.0),
                             dc ? dc : cnst(g, 0.0));
    }
    case IR_EW_CALL: {
        ir_ewt *da = deriv(g, op, x->a, k, NULL);
        if (!da)
            return NULL;
        /* f' written with f(a) alone (all but rsqrt's) does not read a. */
        bool by_fx = fx && deriv_uses_fx(x->fn) && x->fn != IR_FN_RSQRT;
        ir_ewt *a = by_fx || x->fn == IR_FN_NEG ? NULL : copy_tree(g, op, x->a);
        return mul(g, fn_deriv(g, x->fn, a, fx), da);
    }
    case IR_EW_KIND_COUNT: break;
    }
    return NULL;
}

void ad_rule_ew(ad_ctx *g, ir_op *op, const ad_adjoint *dc)
{
    const int *res = op->u.ew.result_labels;
    int nres = op->result->type.rank;
    /* The result saves recomputing f(a) where f' is written with f. */
    const ir_ew_node *root = &op->u.ew.nodes[op->u.ew.root];
    bool uses_fx = root->kind == IR_EW_CALL && deriv_uses_fx(root->fn);
    ir_ewt *fx = uses_fx ? ir_ewt_leaf(g->e.arena, ad_val(g, op->result), res, nres) : NULL;
    for (int k = 0; k < op->noperands; k++) {
        ir_value *a = op->operands[k];
        if (!g->relevant[a->id])
            continue;
        ir_ewt *d = deriv(g, op, op->u.ew.root, k, fx);
        ir_ewt *t = mul(g, ad_adj_tree(g, dc, res, nres), d);
        ad_contribute_reduced(g, a, t, res, nres, op->u.ew.labels[k], a->type.rank);
    }
}
