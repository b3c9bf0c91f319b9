/*
 * grad.c - `G[...] = grad(L, W)`: reverse-mode differentiation of the ops
 * lowered so far.
 *
 * A grad statement is lowered to the backward ops of the program before
 * it: the adjoint (cotangent) dv = dL/dv of every value v on a path from W
 * to the scalar L, from L back to W, each op contributing to the adjoints
 * of its operands, as JAX's transpose rules do for its primitives:
 *
 *  - Einsum C = s * einsum(A, B) over the (+, *) semiring: dA = s *
 *    einsum(dC, B) over A's labels that C or B have, broadcast over any
 *    label only A has (A's own reduction); a unary einsum (a sum or mean)
 *    broadcasts dC back: dA = s * dC.
 *  - max / min reductions: the gradient goes to the arguments of the
 *    maximum, split equally among ties: dA = [A == C] * dC / #ties.
 *  - Elementwise: the chain rule on the expression tree (deriv below), then
 *    a sum over the labels an operand was broadcast along.
 *
 * Contributions to one value are added.  The backward ops are ordinary
 * einsums and elementwise ops appended after the forward ones, so the
 * propagate pass shards them with the same rules and inserts their
 * collectives (seed 000: an AllGather in the forward pass becomes a
 * ReduceScatter in the backward one by the einsum rules alone).  Adjoints
 * are named after the value with a 'd' in front (dTmp, dWin), as in seed
 * 000's listings.  An adjoint that is a known constant (dL/dL = 1, and what
 * a sum passes back) stays a number until an op needs a tensor.
 *
 * All the grad statements of one loss share one backward sweep: the first
 * computes the adjoints of every tensor that any of them asks for.
 *  - Gather (an embedding lookup): the table's adjoint is a scatter-add
 *    einsum of the indices and dC (ir.h), the indices have none.
 *  - A repeated block (`repeat L`, LoopBegin .. LoopEnd) gets a backward
 *    loop that runs over the layers in reverse (a LoopBegin with
 *    `reverse`), carrying the adjoint of the carried value, as JAX's
 *    transpose of a scan: its body is the backward sweep of the forward
 *    body (loop_adjoint).  A forward body value the backward body reads
 *    (an activation) is stacked by the forward loop (LayerStack, one block
 *    per layer) and read back one layer at a time (LayerSlice), so nothing
 *    is recomputed and the FLOPs stay seed 003's 2 (forward) + 4
 *    (backward) per param and token.  A layer's gradient of a stacked
 *    param is stacked by the backward loop, sharded like the param (so the
 *    seed 000 gradient collectives happen per layer, inside the loop); a
 *    value from before the loop gets the sum over layers of its per-layer
 *    adjoints.
 *
 * Rematerialisation (--remat, fe_remat): where the backward ops read a
 * forward value, `val` gives the value itself, a LayerSlice of the layer's
 * copy the forward loop keeps, or a copy of its op computed again on its
 * operands as the backward ops read them (clone).  `elementwise` computes
 * elementwise results again (their operands, an einsum's result, stay);
 * `layer` keeps only each layer's input in a repeated block and computes
 * the whole layer again in the backward loop (seed 003's activation
 * checkpointing: one more forward pass of FLOPs, a layer's activations of
 * memory instead of |L| layers').
 *
 * Not differentiated (a located error): i32 values, a state write, a
 * target defined in a repeated block's body.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ewtree.h"

/* An adjoint: zero (neither set), a constant c (a tensor of c's), or a value
 * whose dims are those of the value it is the adjoint of. */
typedef struct adjoint {
    ir_value *v;   /* the tensor, or NULL */
    bool is_const; /* v == NULL and the adjoint is `c` everywhere */
    double c;
} adjoint;

/* One backward sweep. */
typedef struct gctx {
    fe_checker *c;
    fe_emit e;          /* tensor name changes per adjoint */
    uint32_t loc;       /* the grad statement */
    int nvalues;        /* values that existed before the sweep */
    adjoint *adj;       /* by value id */
    bool *relevant;     /* depends on a target and the loss depends on it */
    bool ok;
    /* A backward loop's body (loop_adjoint): the forward LoopBegin whose
     * body is differentiated, the backward LoopBegin, and by forward value
     * id the value as the backward body reads it (val). */
    ir_op *loop, *bloop;
    ir_value **map;
    fe_remat remat;     /* what is computed again rather than kept (clone) */
} gctx;

/* Per-loss results, kept on the checker so that later grad statements of
 * the same loss reuse the sweep. */
struct fe_grads {
    ir_value *loss;
    int n;
    ir_value **wrt;    /* n targets */
    ir_value **grad;   /* their adjoints, materialised */
    struct fe_grads *next;
};

/* Whether `v` is a value of the body of loop `fb` (its carried value at
 * the top included). */
static bool in_body(const ir_op *fb, const ir_value *v)
{
    return fb && v->def && (v->def == fb || v->def->loop == fb);
}

static ir_value *val(gctx *g, ir_value *v);

/* Forward value `v` computed again by a copy of its op, appended, on its
 * operands as the backward ops read them (val): rematerialisation. */
static ir_value *clone(gctx *g, ir_value *v)
{
    const ir_op *op = v->def;
    ir_value *opnds[IR_MAX_OPERANDS];
    for (int k = 0; k < op->noperands; k++)
        opnds[k] = val(g, op->operands[k]);
    ir_type t = v->type;
    t.sh = ir_sharding_replicated(); /* propagate plans the copy afresh */
    ir_value *r = ir_value_new(g->e.m, v->tensor, IR_VAL_OP, &t, v->loc);
    r->has_constraint = v->has_constraint;
    r->constraint = v->constraint;
    ir_op *c = ir_op_new(g->e.m, op->kind, op->noperands, opnds, r, op->loc);
    memcpy(&c->u, &op->u, sizeof c->u);
    c->remat = true;
    if (op->kind == IR_OP_ELEMENTWISE) {
        size_t n = (size_t)op->u.ew.nnodes * sizeof *op->u.ew.nodes;
        ir_ew_node *nodes = ir_alloc(&g->e.m->arena, n);
        memcpy(nodes, op->u.ew.nodes, n);
        c->u.ew.nodes = nodes;
    }
    ir_op_append(g->e.m, c);
    return r;
}

/* Whether forward value `v` (in a backward loop's body: of the forward
 * body) is computed again rather than kept, under --remat. */
static bool recompute(const gctx *g, const ir_value *v)
{
    ir_op_kind k = v->def ? v->def->kind : IR_OP_COUNT;
    if (k != IR_OP_EINSUM && k != IR_OP_ELEMENTWISE)
        return false; /* loop ops, state writes: kept */
    if (!g->loop) /* outside a loop body: forward ops only */
        return g->remat == FE_REMAT_ELEMENTWISE && k == IR_OP_ELEMENTWISE &&
               v->id < g->nvalues && v->def->phase == IR_PHASE_FORWARD;
    return g->remat == FE_REMAT_LAYER || (g->remat == FE_REMAT_ELEMENTWISE && k == IR_OP_ELEMENTWISE);
}

/* `v` as the backward ops read it: itself; a copy computed again under
 * --remat; or in a backward loop's body the forward body value of the same
 * layer: a new LayerSlice of the stacked param it is a layer of, a copy
 * computed again, or a LayerSlice of a LayerStack that the forward loop
 * now keeps of it. */
static ir_value *val(gctx *g, ir_value *v)
{
    bool body = in_body(g->loop, v);
    if (!body && (g->loop || !recompute(g, v)))
        return v;
    if (g->map[v->id])
        return g->map[v->id];
    if (!body || (v->def->kind != IR_OP_LAYERSLICE && recompute(g, v)))
        return g->map[v->id] = clone(g, v);
    ir_module *m = g->e.m;
    ir_op *fb = g->loop;
    int dim = fb->u.loop.dim;
    ir_value *src;
    if (v->def->kind == IR_OP_LAYERSLICE) {
        src = v->def->operands[0];
    } else {
        ir_type t = v->type;
        if (t.rank >= IR_MAX_RANK) {
            diag_error(g->c->diag, g->loc, "grad through 'repeat %s': '%s' has %d dims, and "
                       "keeping it for every layer needs one more than the %d a tensor may have",
                       m->dims[dim].name, v->tensor, t.rank, IR_MAX_RANK);
            g->ok = false;
            return v;
        }
        memmove(t.dims + 1, t.dims, (size_t)t.rank * sizeof t.dims[0]);
        t.dims[0] = dim;
        t.rank++;
        t.sh = ir_sharding_replicated();
        src = ir_value_new(m, v->tensor, IR_VAL_OP, &t, g->loc);
        ir_op *st = ir_op_new(m, IR_OP_LAYERSTACK, 1, &v, src, g->loc);
        st->u.loop.dim = dim;
        st->u.loop.begin = fb;
        st->u.loop.end = fb->u.loop.end;
        ir_op_insert_before(m, fb->u.loop.end, st);
    }
    ir_type t = v->type;
    t.sh = ir_sharding_replicated();
    ir_value *r = ir_value_new(m, v->tensor, IR_VAL_OP, &t, g->loc);
    ir_op *ls = ir_op_new(m, IR_OP_LAYERSLICE, 1, &src, r, g->loc);
    ls->u.loop.dim = dim;
    ls->u.loop.begin = g->bloop;
    ir_op_append(m, ls);
    g->map[v->id] = r;
    return r;
}

/* Names the ops of the adjoint of `v`: "d" + the tensor's name. */
static void name_for(gctx *g, const ir_value *v)
{
    size_t n = strlen(v->tensor) + 2;
    char *s = ir_alloc(g->e.arena, n);
    snprintf(s, n, "d%s", v->tensor);
    g->e.tensor = s;
    g->e.dtype = v->type.dtype;
}

static fe_ew *cnst(gctx *g, double c)
{
    return fe_ew_const(g->e.arena, c);
}

static fe_ew *bin(gctx *g, ir_ew_kind k, fe_ew *a, fe_ew *b)
{
    return fe_ew_bin(g->e.arena, k, a, b);
}

static fe_ew *call(gctx *g, ir_func fn, fe_ew *a)
{
    return fe_ew_call(g->e.arena, fn, a);
}

/* a * b where either may be NULL (zero) or a constant 1. */
static fe_ew *mul(gctx *g, fe_ew *a, fe_ew *b)
{
    if (!a || !b)
        return NULL;
    if (a->kind == IR_EW_CONST && a->value == 1.0)
        return b;
    if (b->kind == IR_EW_CONST && b->value == 1.0)
        return a;
    return bin(g, IR_EW_MUL, a, b);
}

static fe_ew *add(gctx *g, fe_ew *a, fe_ew *b)
{
    return !a ? b : !b ? a : bin(g, IR_EW_ADD, a, b);
}

/* The tree of an adjoint as a leaf over `labels` (the adjoint's value's
 * positions are indexed by them), or its constant. */
static fe_ew *adj_tree(gctx *g, const adjoint *a, const int *labels, int n)
{
    if (a->is_const)
        return cnst(g, a->c);
    return fe_ew_leaf(g->e.arena, a->v, labels, n);
}

/* The subtree of `op`'s expression at node `n`, as a tree to emit. */
static fe_ew *copy_tree(gctx *g, const ir_op *op, int n)
{
    const ir_ew_node *x = &op->u.ew.nodes[n];
    switch (x->kind) {
    case IR_EW_OPERAND: {
        const ir_value *v = op->operands[x->operand];
        return fe_ew_leaf(g->e.arena, val(g, op->operands[x->operand]), op->u.ew.labels[x->operand],
                          v->type.rank);
    }
    case IR_EW_CONST: return cnst(g, x->value);
    case IR_EW_INDEX: return fe_ew_index(g->e.arena, x->dim);
    case IR_EW_CALL: return call(g, x->fn, copy_tree(g, op, x->a));
    case IR_EW_SELECT:
        return fe_ew_select(g->e.arena, copy_tree(g, op, x->a), copy_tree(g, op, x->b),
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
static fe_ew *fn_deriv(gctx *g, ir_func fn, fe_ew *a, fe_ew *fx)
{
    switch (fn) {
    case IR_FN_EXP: return fx ? fx : call(g, IR_FN_EXP, a);
    case IR_FN_LOG: return bin(g, IR_EW_DIV, cnst(g, 1.0), a);
    case IR_FN_TANH: {
        fe_ew *t = fx ? fx : call(g, IR_FN_TANH, a);
        return bin(g, IR_EW_SUB, cnst(g, 1.0), bin(g, IR_EW_MUL, t, t));
    }
    case IR_FN_RELU:
        return fe_ew_select(g->e.arena, bin(g, IR_EW_GT, a, cnst(g, 0.0)), cnst(g, 1.0),
                            cnst(g, 0.0));
    case IR_FN_GELU: {
        /* gelu(x) = x s, s = sigmoid(2k (x + c x^3)), k = sqrt(2/pi),
         * c = 0.044715 (the tanh form codegen evaluates):
         * gelu'(x) = s + x s (1 - s) 2k (1 + 3c x^2). */
        double k2 = 2.0 * sqrt(2.0 / M_PI), c = 0.044715;
        fe_ew *x2 = bin(g, IR_EW_MUL, a, a);
        fe_ew *u = bin(g, IR_EW_MUL, cnst(g, k2),
                       bin(g, IR_EW_ADD, a, bin(g, IR_EW_MUL, cnst(g, c), bin(g, IR_EW_MUL, x2, a))));
        fe_ew *s = call(g, IR_FN_SIGMOID, u);
        fe_ew *du = bin(g, IR_EW_MUL, cnst(g, k2),
                        bin(g, IR_EW_ADD, cnst(g, 1.0), bin(g, IR_EW_MUL, cnst(g, 3.0 * c), x2)));
        fe_ew *ds = bin(g, IR_EW_MUL, s, bin(g, IR_EW_SUB, cnst(g, 1.0), s));
        return bin(g, IR_EW_ADD, s, bin(g, IR_EW_MUL, a, bin(g, IR_EW_MUL, ds, du)));
    }
    case IR_FN_SILU: {
        /* x s(x): s + x s (1 - s) */
        fe_ew *s = call(g, IR_FN_SIGMOID, a);
        return bin(g, IR_EW_MUL, s,
                   bin(g, IR_EW_ADD, cnst(g, 1.0),
                       bin(g, IR_EW_MUL, a, bin(g, IR_EW_SUB, cnst(g, 1.0), s))));
    }
    case IR_FN_SIGMOID: {
        fe_ew *s = fx ? fx : call(g, IR_FN_SIGMOID, a);
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
        return fe_ew_select(g->e.arena, bin(g, IR_EW_GT, a, cnst(g, 0.0)), cnst(g, 1.0),
                            fe_ew_select(g->e.arena, bin(g, IR_EW_LT, a, cnst(g, 0.0)),
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
static fe_ew *deriv(gctx *g, const ir_op *op, int n, int k, fe_ew *fx)
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
        fe_ew *da = deriv(g, op, x->a, k, NULL), *db = deriv(g, op, x->b, k, NULL);
        if (x->kind == IR_EW_SUB && db)
            db = bin(g, IR_EW_MUL, cnst(g, -1.0), db);
        return add(g, da, db);
    }
    case IR_EW_MUL: {
        /* Only the factors a nonzero term needs: in a backward loop each
         * one read is an activation kept for every layer. */
        fe_ew *da = deriv(g, op, x->a, k, NULL), *db = deriv(g, op, x->b, k, NULL);
        return add(g, da ? mul(g, da, copy_tree(g, op, x->b)) : NULL,
                   db ? mul(g, copy_tree(g, op, x->a), db) : NULL);
    }
    case IR_EW_DIV: {
        /* (a/b)' = a'/b - a b' / b^2 */
        fe_ew *da = deriv(g, op, x->a, k, NULL), *db = deriv(g, op, x->b, k, NULL);
        if (!da && !db)
            return NULL;
        fe_ew *b = copy_tree(g, op, x->b);
        fe_ew *t1 = da ? bin(g, IR_EW_DIV, da, b) : NULL;
        fe_ew *t2 = db ? bin(g, IR_EW_DIV, mul(g, copy_tree(g, op, x->a), db), bin(g, IR_EW_MUL, b, b))
                       : NULL;
        if (t2)
            t2 = bin(g, IR_EW_MUL, cnst(g, -1.0), t2);
        return add(g, t1, t2);
    }
    case IR_EW_MAX:
    case IR_EW_MIN: {
        /* The derivative of the side that is taken (a on ties). */
        fe_ew *da = deriv(g, op, x->a, k, NULL), *db = deriv(g, op, x->b, k, NULL);
        if (!da && !db)
            return NULL;
        fe_ew *cond = bin(g, x->kind == IR_EW_MAX ? IR_EW_GE : IR_EW_LE, copy_tree(g, op, x->a),
                          copy_tree(g, op, x->b));
        return fe_ew_select(g->e.arena, cond, da ? da : cnst(g, 0.0), db ? db : cnst(g, 0.0));
    }
    case IR_EW_SELECT: {
        fe_ew *db = deriv(g, op, x->b, k, NULL), *dc = deriv(g, op, x->c, k, NULL);
        if (!db && !dc)
            return NULL;
        return fe_ew_select(g->e.arena, copy_tree(g, op, x->a), db ? db : cnst(g, 0.0),
                            dc ? dc : cnst(g, 0.0));
    }
    case IR_EW_CALL: {
        fe_ew *da = deriv(g, op, x->a, k, NULL);
        if (!da)
            return NULL;
        /* f' written with f(a) alone (all but rsqrt's) does not read a. */
        bool by_fx = fx && deriv_uses_fx(x->fn) && x->fn != IR_FN_RSQRT;
        fe_ew *a = by_fx || x->fn == IR_FN_NEG ? NULL : copy_tree(g, op, x->a);
        return mul(g, fn_deriv(g, x->fn, a, fx), da);
    }
    case IR_EW_KIND_COUNT: break;
    }
    return NULL;
}

static bool has(const int *labels, int n, int d)
{
    for (int i = 0; i < n; i++)
        if (labels[i] == d)
            return true;
    return false;
}

/* An einsum of `nops` operands (labels per operand) into `res`. */
static ir_value *emit_einsum(gctx *g, ir_value *const *vals, const int (*labels)[IR_MAX_RANK],
                             const int *nlab, int nops, const int *res, int nres, double scale,
                             ir_reduce red)
{
    ir_value *out = fe_value_new(&g->e, res, nres, g->loc);
    ir_value *ops[2] = {vals[0], nops > 1 ? vals[1] : NULL};
    ir_op *op = ir_op_new(g->e.m, IR_OP_EINSUM, nops, ops, out, g->loc);
    for (int i = 0; i < nops; i++)
        memcpy(op->u.einsum.labels[i], labels[i], (size_t)nlab[i] * sizeof(int));
    memcpy(op->u.einsum.result_labels, res, (size_t)nres * sizeof(int));
    op->u.einsum.scale = scale;
    op->u.einsum.reduce = red;
    ir_op_append(g->e.m, op);
    return out;
}

/* Adds a contribution to the adjoint of `v`: a tree over `labels` (the
 * positions of v, as the use indexed them), or a constant.  The adjoint's
 * value always has v's own dims. */
static void contribute(gctx *g, ir_value *v, fe_ew *t, const int *labels)
{
    if (!t)
        return;
    adjoint *a = &g->adj[v->id];
    int n = v->type.rank;
    const int *dims = v->type.dims;
    if (t->kind == IR_EW_CONST && !a->v) {
        a->c = (a->is_const ? a->c : 0.0) + t->value;
        a->is_const = true;
        return;
    }
    name_for(g, v);
    fe_ew *sum = t;
    if (t->kind != IR_EW_CONST && memcmp(labels, dims, (size_t)n * sizeof(int)) != 0)
        /* A use that relabels v's dims (K[B, S, D] of K[B, T, D]): the
         * contribution over the use's labels, read by position as v's. */
        sum = fe_ew_leaf(g->e.arena, fe_ew_emit(&g->e, t, labels, n, g->loc), dims, n);
    if (a->v)
        sum = add(g, fe_ew_leaf(g->e.arena, a->v, dims, n), sum);
    else if (a->is_const)
        sum = add(g, cnst(g, a->c), sum);
    /* A lone value over v's dims (an einsum's result) is the adjoint as it is. */
    bool value = sum->kind == IR_EW_OPERAND && memcmp(sum->labels, dims, (size_t)n * sizeof(int)) == 0 &&
                 memcmp(sum->v->type.dims, dims, (size_t)n * sizeof(int)) == 0;
    a->v = value ? sum->v : fe_ew_emit(&g->e, sum, dims, n, g->loc);
    a->is_const = false;
}

/* Sums tree `t` over `from` down to `to` (a subset), as a contribution to
 * operand value `v` indexed by `to` at its use. */
static void contribute_reduced(gctx *g, ir_value *v, fe_ew *t, const int *from, int nfrom,
                               const int *to, int nto)
{
    if (!t)
        return;
    bool same = nfrom == nto;
    for (int i = 0; i < nto && same; i++)
        same = has(from, nfrom, to[i]);
    if (same || t->kind == IR_EW_CONST) {
        if (!same) {
            /* A constant summed over the broadcast labels: times their sizes. */
            double count = 1;
            for (int i = 0; i < nfrom; i++)
                if (!has(to, nto, from[i]))
                    count *= (double)g->e.m->dims[from[i]].size;
            t = cnst(g, t->value * count);
        }
        contribute(g, v, t, to);
        return;
    }
    name_for(g, v);
    ir_value *full = fe_ew_emit(&g->e, t, from, nfrom, g->loc);
    int nl[1] = {nfrom};
    int lab[1][IR_MAX_RANK];
    memcpy(lab[0], from, (size_t)nfrom * sizeof(int));
    ir_value *r = emit_einsum(g, &full, (const int(*)[IR_MAX_RANK])lab, nl, 1, to, nto, 1.0,
                              IR_RED_SUM);
    contribute(g, v, fe_ew_leaf(g->e.arena, r, to, nto), to);
}

/* A gather's table gets dC's rows added at the rows its indices name: a
 * scatter-add einsum (ir.h), which contracts the indices' dims, so a batch
 * sharded on X gives the table's gradient as partial sums {U_X}, as the
 * weights' gradients of DP. */
static void gather_adjoint(gctx *g, const ir_op *op, const adjoint *dc)
{
    ir_value *ids = val(g, op->operands[0]), *table = op->operands[1];
    if (!g->relevant[table->id])
        return;
    const int *res = op->u.einsum.result_labels;
    int nres = op->result->type.rank;
    ir_value *rows = dc->v;
    if (!rows) { /* a constant adjoint, written out over the result */
        fe_ew *r = fe_ew_leaf(g->e.arena, val(g, op->result), res, nres);
        name_for(g, op->result);
        rows = fe_ew_emit(&g->e,
                          fe_ew_select(g->e.arena, bin(g, IR_EW_EQ, r, r), cnst(g, dc->c),
                                       cnst(g, dc->c)),
                          res, nres, g->loc);
    }
    name_for(g, table);
    const int *lt = op->u.einsum.labels[1];
    ir_value *out = fe_value_new(&g->e, lt, table->type.rank, g->loc);
    ir_value *opnds[2] = {ids, rows};
    ir_op *s = ir_op_new(g->e.m, IR_OP_EINSUM, 2, opnds, out, g->loc);
    memcpy(s->u.einsum.labels[0], op->u.einsum.labels[0], (size_t)ids->type.rank * sizeof(int));
    memcpy(s->u.einsum.labels[1], res, (size_t)nres * sizeof(int));
    memcpy(s->u.einsum.result_labels, lt, (size_t)table->type.rank * sizeof(int));
    s->u.einsum.scale = op->u.einsum.scale;
    s->u.einsum.reduce = IR_RED_SUM;
    s->u.einsum.scatter = true;
    s->u.einsum.gather_label = op->u.einsum.gather_label;
    ir_op_append(g->e.m, s);
    contribute(g, table, fe_ew_leaf(g->e.arena, out, lt, table->type.rank), lt);
}

/* The einsum rules (file comment). */
static void einsum_adjoint(gctx *g, const ir_op *op, const adjoint *dc)
{
    const int *res = op->u.einsum.result_labels;
    int nres = op->result->type.rank;
    double s = op->u.einsum.scale;
    if (op->u.einsum.gather) {
        gather_adjoint(g, op, dc);
        return;
    }
    if (op->noperands == 1) {
        ir_value *a = op->operands[0];
        if (!g->relevant[a->id])
            return;
        const int *la = op->u.einsum.labels[0];
        int na = a->type.rank;
        fe_ew *dct = adj_tree(g, dc, res, nres);
        if (op->u.einsum.reduce == IR_RED_SUM) {
            contribute(g, a, mul(g, cnst(g, s), dct), la);
            return;
        }
        /* max / min: to the arguments of the extreme, ties share it. */
        fe_ew *av = fe_ew_leaf(g->e.arena, val(g, a), la, na);
        fe_ew *cv = fe_ew_leaf(g->e.arena, val(g, op->result), res, nres);
        name_for(g, a);
        fe_ew *hit = fe_ew_select(g->e.arena, bin(g, IR_EW_EQ, av, cv), cnst(g, 1.0), cnst(g, 0.0));
        ir_value *mask = fe_ew_emit(&g->e, hit, la, na, g->loc);
        int nl[1] = {na};
        int lab[1][IR_MAX_RANK];
        memcpy(lab[0], la, (size_t)na * sizeof(int));
        ir_value *count = emit_einsum(g, &mask, (const int(*)[IR_MAX_RANK])lab, nl, 1, res, nres,
                                      1.0, IR_RED_SUM);
        fe_ew *share = bin(g, IR_EW_DIV, mul(g, cnst(g, s), adj_tree(g, dc, res, nres)),
                           fe_ew_leaf(g->e.arena, count, res, nres));
        contribute(g, a, mul(g, fe_ew_leaf(g->e.arena, mask, la, na), share), la);
        return;
    }
    for (int k = 0; k < 2; k++) {
        ir_value *a = op->operands[k], *b = op->operands[1 - k];
        if (!g->relevant[a->id])
            continue;
        b = val(g, b);
        const int *la = op->u.einsum.labels[k], *lb = op->u.einsum.labels[1 - k];
        int na = a->type.rank, nb = b->type.rank;
        /* A's labels that dC or B index: the einsum's result; the others
         * (A's own reduction) are broadcast afterwards. */
        int kept[IR_MAX_RANK], nk = 0;
        for (int i = 0; i < na; i++)
            if (has(res, nres, la[i]) || has(lb, nb, la[i]))
                kept[nk++] = la[i];
        fe_ew *part;
        if (dc->is_const) {
            /* s c * (sum of B over its labels A lacks), broadcast. */
            int lab[1][IR_MAX_RANK], nl[1] = {nb};
            memcpy(lab[0], lb, (size_t)nb * sizeof(int));
            int keepb[IR_MAX_RANK], nkb = 0;
            for (int i = 0; i < nb; i++)
                if (has(la, na, lb[i]))
                    keepb[nkb++] = lb[i];
            name_for(g, a);
            ir_value *r = nkb == nb ? b
                                    : emit_einsum(g, &b, (const int(*)[IR_MAX_RANK])lab, nl, 1, keepb,
                                                  nkb, 1.0, IR_RED_SUM);
            part = mul(g, cnst(g, s * dc->c), fe_ew_leaf(g->e.arena, r, keepb, nkb));
        } else {
            ir_value *vals[2] = {dc->v, b};
            int lab[2][IR_MAX_RANK], nl[2] = {nres, nb};
            memcpy(lab[0], res, (size_t)nres * sizeof(int));
            memcpy(lab[1], lb, (size_t)nb * sizeof(int));
            name_for(g, a);
            ir_value *r = emit_einsum(g, vals, (const int(*)[IR_MAX_RANK])lab, nl, 2, kept, nk, s,
                                      IR_RED_SUM);
            part = fe_ew_leaf(g->e.arena, r, kept, nk);
        }
        contribute(g, a, part, la);
    }
}

static void elementwise_adjoint(gctx *g, const ir_op *op, const adjoint *dc)
{
    const int *res = op->u.ew.result_labels;
    int nres = op->result->type.rank;
    /* The result saves recomputing f(a) where f' is written with f. */
    const ir_ew_node *root = &op->u.ew.nodes[op->u.ew.root];
    bool uses_fx = root->kind == IR_EW_CALL && deriv_uses_fx(root->fn);
    fe_ew *fx = uses_fx ? fe_ew_leaf(g->e.arena, val(g, op->result), res, nres) : NULL;
    for (int k = 0; k < op->noperands; k++) {
        ir_value *a = op->operands[k];
        if (!g->relevant[a->id])
            continue;
        fe_ew *d = deriv(g, op, op->u.ew.root, k, fx);
        fe_ew *t = mul(g, adj_tree(g, dc, res, nres), d);
        contribute_reduced(g, a, t, res, nres, op->u.ew.labels[k], a->type.rank);
    }
}

/* The adjoint of `v` as a value of v's shape (a constant is written out as
 * `where(v == v, c, c)`, which needs no other operand and is c even where
 * v is NaN). */
static ir_value *materialise(gctx *g, ir_value *v)
{
    adjoint *a = &g->adj[v->id];
    if (a->v)
        return a->v;
    name_for(g, v);
    double c = a->is_const ? a->c : 0.0;
    int n = v->type.rank;
    ir_value *w = val(g, v);
    fe_ew *x = fe_ew_leaf(g->e.arena, w, v->type.dims, n);
    fe_ew *t = fe_ew_select(g->e.arena, bin(g, IR_EW_EQ, x, fe_ew_leaf(g->e.arena, w, v->type.dims, n)),
                            cnst(g, c), cnst(g, c));
    a->v = fe_ew_emit(&g->e, t, v->type.dims, n, g->loc);
    a->is_const = false;
    return a->v;
}

static void backprop(gctx *g, ir_op *last, const ir_op *stop);

/* `v`, or a copy of it when a constraint on it would bind other values:
 * an adjoint shared with another value than `key`, or a value that is not
 * the backward body's own. */
static ir_value *own(gctx *g, ir_value *v, const ir_value *key)
{
    bool shared = v->has_constraint || !v->def || v->def->loop != g->bloop;
    for (int i = 0; i < g->nvalues && !shared; i++)
        shared = i != key->id && g->adj[i].v == v;
    if (!shared)
        return v;
    name_for(g, key);
    return fe_ew_emit(&g->e, fe_ew_leaf(g->e.arena, v, v->type.dims, v->type.rank), v->type.dims,
                      v->type.rank, g->loc);
}

/* A LayerStack of backward body value `v` (one block per layer). */
static ir_value *stack(gctx *g, ir_value *v)
{
    ir_type t = v->type;
    memmove(t.dims + 1, t.dims, (size_t)t.rank * sizeof t.dims[0]);
    t.dims[0] = g->bloop->u.loop.dim;
    t.rank++;
    t.sh = ir_sharding_replicated();
    ir_value *s = ir_value_new(g->e.m, v->tensor, IR_VAL_OP, &t, g->loc);
    ir_op *op = ir_op_new(g->e.m, IR_OP_LAYERSTACK, 1, &v, s, g->loc);
    op->u.loop.dim = g->bloop->u.loop.dim;
    op->u.loop.begin = g->bloop;
    ir_op_append(g->e.m, op);
    return s;
}

/* What a backward loop hands to the sweep around it: the stacked adjoint
 * of `target`, summed over the layers first if `sum`. */
typedef struct loop_out {
    ir_value *target, *stack;
    bool sum;
} loop_out;

/* The backward loop of the forward loop that LoopEnd `fe` ends (the file
 * comment), given the adjoint of the value after it. */
static void loop_adjoint(gctx *g, ir_op *fe)
{
    ir_module *m = g->e.m;
    ir_op *fb = fe->u.loop.begin;
    int dim = fb->u.loop.dim;
    ir_value *carry = fb->result, *next = fe->operands[0];
    int rank = carry->type.rank;
    const int *dims = carry->type.dims;
    ir_value *dafter = materialise(g, fe->result);
    name_for(g, carry);
    ir_type t = carry->type;
    t.sh = ir_sharding_replicated();
    ir_value *dtop = ir_value_new(m, g->e.tensor, IR_VAL_OP, &t, g->loc);
    ir_op *bb = ir_op_new(m, IR_OP_LOOPBEGIN, 1, &dafter, dtop, g->loc);
    bb->u.loop.dim = dim;
    bb->u.loop.begin = bb;
    bb->u.loop.reverse = true;
    ir_op_append(m, bb);

    /* The body's sweep: relevance within one iteration, given what the
     * sweep around the loop found relevant. */
    gctx b = *g;
    b.loop = fb;
    b.bloop = bb;
    int nv = b.nvalues = m->nvalues;
    b.adj = ir_alloc(g->c->arena, (size_t)nv * sizeof *b.adj);
    b.relevant = ir_alloc(g->c->arena, (size_t)nv * sizeof *b.relevant);
    b.map = ir_alloc(g->c->arena, (size_t)nv * sizeof *b.map);
    bool *dep = ir_alloc(g->c->arena, (size_t)nv * sizeof *dep);
    bool *need = ir_alloc(g->c->arena, (size_t)nv * sizeof *need);
    memset(b.adj, 0, (size_t)nv * sizeof *b.adj);
    memset(b.relevant, 0, (size_t)nv * sizeof *b.relevant);
    memset(b.map, 0, (size_t)nv * sizeof *b.map);
    memset(dep, 0, (size_t)nv);
    memset(need, 0, (size_t)nv);
    dep[carry->id] = true; /* it carries the layers before */
    for (ir_op *op = fb->next; op != fe; op = op->next) {
        if (op->kind == IR_OP_LAYERSLICE) {
            dep[op->result->id] = g->relevant[op->operands[0]->id];
            continue;
        }
        for (int k = 0; k < op->noperands; k++) {
            ir_value *v = op->operands[k];
            if (!in_body(fb, v) && v->id < g->nvalues && g->relevant[v->id])
                dep[v->id] = true;
            if (dep[v->id] && v->type.dtype != IR_I32)
                dep[op->result->id] = true;
        }
    }
    need[next->id] = true;
    for (ir_op *op = fe->prev; op != fb; op = op->prev)
        if (need[op->result->id])
            for (int k = 0; k < op->noperands; k++)
                need[op->operands[k]->id] = true;
    for (int i = 0; i < g->nvalues; i++)
        b.relevant[i] = dep[i] && need[i];
    b.adj[next->id] = (adjoint){.v = dtop};
    backprop(&b, fe->prev, fb);
    if (!b.ok) {
        g->ok = false;
        return;
    }

    /* What leaves each backward iteration: the adjoint of the carried
     * value (to the next iteration, the layer before), and stacked, each
     * layer's gradient of a stacked param (in the param's sharding) and
     * each layer's contribution to a value from before the loop. */
    ir_value *dnext = materialise(&b, carry);
    loop_out *outs = ir_alloc(g->c->arena, (size_t)(nv + 1) * sizeof *outs);
    bool *seen = need; /* reused: outer values collected */
    memset(seen, 0, (size_t)nv);
    int nout = 0;
    for (ir_op *op = fb->next; op != fe && b.ok; op = op->next) {
        if (op->kind == IR_OP_LAYERSLICE) {
            ir_value *w = op->operands[0];
            const adjoint *a = &b.adj[op->result->id];
            if (!g->relevant[w->id] || (!a->v && !a->is_const))
                continue;
            ir_value *dw = own(&b, materialise(&b, op->result), op->result);
            /* A layer's gradient is sharded like the layer (seed 000:
             * AllReduce for DP, ReduceScatter for FSDP, per layer). */
            dw->has_constraint = true;
            dw->constraint = ir_sharding_without_first(&w->type.sh, w->type.rank);
            outs[nout++] = (loop_out){w, stack(&b, dw), false};
            continue;
        }
        for (int k = 0; k < op->noperands; k++) {
            ir_value *v = op->operands[k];
            const adjoint *a = &b.adj[v->id];
            if (in_body(fb, v) || seen[v->id] || !g->relevant[v->id] || (!a->v && !a->is_const))
                continue;
            seen[v->id] = true;
            if (has(v->type.dims, v->type.rank, dim) || v->type.rank >= IR_MAX_RANK) {
                diag_error(g->c->diag, g->loc, "grad through 'repeat %s': '%s' is read by every "
                           "layer, and its gradient would be summed over the layers along a "
                           "dim it has or past the dims a tensor may have", m->dims[dim].name,
                           v->tensor);
                b.ok = false;
                break;
            }
            outs[nout++] = (loop_out){v, stack(&b, materialise(&b, v)), true};
        }
    }
    if (!b.ok) {
        g->ok = false;
        return;
    }
    name_for(g, carry);
    ir_value *dbefore = ir_value_new(m, g->e.tensor, IR_VAL_OP, &t, g->loc);
    ir_op *be = ir_op_new(m, IR_OP_LOOPEND, 1, &dnext, dbefore, g->loc);
    be->u.loop.dim = dim;
    be->u.loop.begin = bb;
    be->u.loop.end = be;
    bb->u.loop.end = be;
    ir_op_append(m, be);
    for (ir_op *op = bb->next; op != be; op = op->next)
        if (ir_op_is_loop(op->kind))
            op->u.loop.end = be;

    contribute(g, fb->operands[0], fe_ew_leaf(g->e.arena, dbefore, dims, rank), dims);
    for (int i = 0; i < nout; i++) {
        ir_value *v = outs[i].target, *s = outs[i].stack;
        const int *vd = v->type.dims;
        int vr = v->type.rank;
        if (!outs[i].sum) { /* a stacked param: the stack is its gradient */
            contribute(g, v, fe_ew_leaf(g->e.arena, s, vd, vr), vd);
            continue;
        }
        int lab[1][IR_MAX_RANK], nl[1] = {vr + 1};
        lab[0][0] = dim;
        memcpy(lab[0] + 1, vd, (size_t)vr * sizeof(int));
        name_for(g, v);
        ir_value *r = emit_einsum(g, &s, (const int(*)[IR_MAX_RANK])lab, nl, 1, vd, vr, 1.0, IR_RED_SUM);
        contribute(g, v, fe_ew_leaf(g->e.arena, r, vd, vr), vd);
    }
}

/* The adjoint rules of the ops from `last` back to (not including) `stop`;
 * a repeated block is differentiated as a whole at its LoopEnd. */
static void backprop(gctx *g, ir_op *last, const ir_op *stop)
{
    for (ir_op *op = last; op != stop && g->ok; op = op->prev) {
        if (op->kind == IR_OP_LOOPEND) {
            const adjoint *dc = &g->adj[op->result->id];
            if (g->relevant[op->result->id] && (dc->v || dc->is_const))
                loop_adjoint(g, op);
            op = op->u.loop.begin; /* the body is done, or needs nothing */
            continue;
        }
        if (!g->relevant[op->result->id] || op->kind == IR_OP_LAYERSLICE)
            continue; /* a layer's adjoint is collected by loop_adjoint */
        adjoint dc = g->adj[op->result->id];
        if (!dc.v && !dc.is_const)
            continue; /* no path back to the loss carries a nonzero adjoint */
        if (op->kind == IR_OP_EINSUM) {
            einsum_adjoint(g, op, &dc);
        } else if (op->kind == IR_OP_ELEMENTWISE) {
            elementwise_adjoint(g, op, &dc);
        } else {
            /* Never silently zero: an op without adjoint rules on the path. */
            diag_error(g->c->diag, g->loc, "grad through '%s' (%s) is not supported yet",
                       op->result->tensor, ir_op_name(op->kind));
            g->ok = false;
        }
    }
}

/* The sweep for `loss` and targets wrt[0..n-1]; fills grads[], and zero[]
 * (if not NULL) with whether no path from the target reaches the loss. */
static bool sweep(fe_checker *c, uint32_t loc, ir_value *loss, ir_value **wrt, int n,
                  ir_value **grads, bool *zero)
{
    ir_module *m = c->m;
    gctx g = {.c = c, .loc = loc, .nvalues = m->nvalues, .ok = true};
    g.e = (fe_emit){.m = m, .arena = c->arena, .tensor = "d", .dtype = loss->type.dtype, .loc = loc};
    g.adj = ir_alloc(c->arena, (size_t)m->nvalues * sizeof *g.adj);
    g.relevant = ir_alloc(c->arena, (size_t)m->nvalues * sizeof *g.relevant);
    bool *dep = ir_alloc(c->arena, (size_t)m->nvalues * sizeof *dep);
    bool *need = ir_alloc(c->arena, (size_t)m->nvalues * sizeof *need);
    g.map = ir_alloc(c->arena, (size_t)m->nvalues * sizeof *g.map);
    g.remat = c->opts ? c->opts->remat : FE_REMAT_NONE;
    memset(g.adj, 0, (size_t)m->nvalues * sizeof *g.adj);
    memset(g.map, 0, (size_t)m->nvalues * sizeof *g.map);
    memset(dep, 0, (size_t)m->nvalues);
    memset(need, 0, (size_t)m->nvalues);
    for (int i = 0; i < n; i++)
        dep[wrt[i]->id] = true;
    ir_op *last = m->last;
    for (ir_op *op = m->first; op; op = op->next)
        for (int k = 0; k < op->noperands; k++)
            if (dep[op->operands[k]->id] && op->operands[k]->type.dtype != IR_I32)
                dep[op->result->id] = true;
    need[loss->id] = true;
    for (ir_op *op = last; op; op = op->prev)
        if (need[op->result->id])
            for (int k = 0; k < op->noperands; k++)
                need[op->operands[k]->id] = true;
    for (int i = 0; i < m->nvalues; i++)
        g.relevant[i] = dep[i] && need[i];
    g.adj[loss->id] = (adjoint){.is_const = true, .c = 1.0};
    for (int i = 0; i < n; i++)
        if (wrt[i]->def && (wrt[i]->def->loop || wrt[i]->def->kind == IR_OP_LOOPBEGIN)) {
            diag_error(c->diag, loc, "grad with respect to '%s', a value of a 'repeat' block's "
                       "body, is not supported: it has a value per layer", wrt[i]->tensor);
            return false;
        }
    ir_op *forward_end = m->last;
    backprop(&g, last, NULL);
    if (!g.ok)
        return false;
    for (int i = 0; i < n; i++) {
        if (zero)
            zero[i] = !g.adj[wrt[i]->id].v && !g.adj[wrt[i]->id].is_const;
        grads[i] = materialise(&g, wrt[i]);
    }
    ir_set_phase_after(m, forward_end, IR_PHASE_BACKWARD);
    return true;
}

/* The names of grad(L, W)'s arguments (the checker made sure they are bare names). */
static const char *arg_name(const ast_factor *f, int i)
{
    return f->u.call.args[i]->terms[0]->factors[0]->u.index.name.s;
}

const ast_factor *fe_grad_call(const ast_stmt *s)
{
    const ast_expr *e = s->u.assign.rhs;
    if (e->nterms != 1 || e->terms[0]->sign < 0 || e->terms[0]->nfactors != 1)
        return NULL;
    const ast_factor *f = e->terms[0]->factors[0];
    return f->kind == AST_F_CALL && f->u.call.callee == AST_CALL_GRAD ? f : NULL;
}

const fe_tensor *fe_grad_target(fe_checker *c, const ast_stmt *s)
{
    return fe_symtab_get(&c->tensors, arg_name(fe_grad_call(s), 1));
}

ir_value *fe_grad_lower(fe_checker *c, const ast_program *prog, const ast_stmt *s)
{
    const ast_factor *f = fe_grad_call(s);
    fe_tensor *lt = fe_symtab_get(&c->tensors, arg_name(f, 0));
    fe_tensor *wt = fe_symtab_get(&c->tensors, arg_name(f, 1));
    ir_value *loss = lt->value, *w = wt->value;
    struct fe_grads *r = c->grads;
    while (r && r->loss != loss)
        r = r->next;
    if (!r) {
        /* Every tensor a grad of this loss asks for, defined by now. */
        r = ir_alloc(c->arena, sizeof *r);
        *r = (struct fe_grads){.loss = loss, .next = c->grads};
        r->wrt = ir_alloc(c->arena, (size_t)prog->nstmts * sizeof *r->wrt);
        r->grad = ir_alloc(c->arena, (size_t)prog->nstmts * sizeof *r->grad);
        for (int i = 0; i < prog->nstmts; i++) {
            const ast_stmt *t = prog->stmts[i];
            const ast_factor *g = t->kind == AST_S_ASSIGN ? fe_grad_call(t) : NULL;
            if (!g || fe_symtab_get(&c->tensors, arg_name(g, 0)) != lt)
                continue;
            fe_tensor *x = fe_symtab_get(&c->tensors, arg_name(g, 1));
            bool dup = false;
            for (int j = 0; j < r->n; j++)
                dup |= r->wrt[j] == x->value;
            if (x->value && !dup)
                r->wrt[r->n++] = x->value;
        }
        if (!sweep(c, s->loc, loss, r->wrt, r->n, r->grad, NULL))
            return NULL;
        c->grads = r;
    }
    for (int j = 0; j < r->n; j++)
        if (r->wrt[j] == w)
            return r->grad[j];
    /* A target defined after the loss's first grad: the loss cannot
     * depend on it, so its gradient is zero; a sweep of its own says so. */
    ir_value *out;
    return sweep(c, s->loc, loss, &w, 1, &out, NULL) ? out : NULL;
}

bool fe_grad_values(fe_checker *c, uint32_t loc, ir_value *loss, ir_value **wrt, int n,
                    ir_value **grads, bool *zero, bool *fresh)
{
    const struct fe_grads *r = c->grads;
    while (r && r->loss != loss)
        r = r->next;
    ir_value **miss = ir_alloc(c->arena, (size_t)(n + 1) * sizeof *miss);
    ir_value **got = ir_alloc(c->arena, (size_t)(n + 1) * sizeof *got);
    bool *mzero = ir_alloc(c->arena, (size_t)(n + 1) * sizeof *mzero);
    int nmiss = 0;
    for (int i = 0; i < n; i++) {
        grads[i] = NULL;
        zero[i] = fresh[i] = false;
        for (int j = 0; r && j < r->n; j++)
            if (r->wrt[j] == wrt[i])
                grads[i] = r->grad[j]; /* a grad statement's sweep has it */
        if (!grads[i])
            miss[nmiss++] = wrt[i];
    }
    if (nmiss == 0)
        return true;
    if (!sweep(c, loc, loss, miss, nmiss, got, mzero))
        return false;
    for (int i = 0, k = 0; i < n; i++)
        if (!grads[i]) {
            grads[i] = got[k];
            zero[i] = mzero[k++];
            fresh[i] = true;
        }
    return true;
}
