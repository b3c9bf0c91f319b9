/*
 * lower.c - the checked AST to IR.
 *
 * Declarations become mesh axes, dims (already added by the checker) and
 * IR_VAL_INPUT / IR_VAL_PARAM values carrying the written sharding.  Each
 * statement `L[l] = s1*t1 + s2*t2 + ...` is lowered term by term:
 *
 *  - A term whose indices include one that `l` lacks is summed (Einstein
 *    convention, at the statement level only).  Its parenthesised and call
 *    factors are first lowered into their own elementwise values over the
 *    union of their indices (nothing is summed inside them); its tensor
 *    factors then form einsums.  Two factors make one binary einsum; more
 *    make a left-to-right chain of binary einsums, each step summing the
 *    indices that neither a later factor nor `l` needs, so the propagate
 *    pass only ever sees unary and binary einsums (seed 001 gives the
 *    sharding rules for exactly those).  A lone factor is a unary einsum (a
 *    reduction).  Number factors fold into the last einsum's scale.
 *  - Every other term stays an expression over `l` (products, constants,
 *    broadcasts), and all terms are combined by one elementwise op over `l`.
 *    A statement that is exactly one summed term needs no elementwise op;
 *    its einsum result is the statement's value.
 *
 * The statement's final value is the value of tensor L; a written sharding
 * on the left side becomes its constraint.  Intermediates are named after L
 * and left unconstrained and replicated for the propagate pass.
 */
#include <string.h>

#include "ewtree.h"

/* Lowering state of one statement. */
typedef struct stmt_ctx {
    fe_checker *c;          /* checker (module, diagnostics, options) */
    fe_emit e;              /* where ops go, what results are called */
    int nlhs;               /* rank of the left side */
    int lhs[IR_MAX_RANK];   /* its dim ids */
    bool ok;                /* no IR limit was hit */
} stmt_ctx;

/* The value reference `t` reads: its tensor's current value, or inside a
 * repeated block the current layer of a stacked tensor (t->layer), a
 * LayerSlice made at its first use in the block and shared by the rest. */
static ir_value *ref_value(fe_checker *c, const ast_tref *t)
{
    fe_tensor *s = t->sym;
    if (!t->layer)
        return s->value;
    if (s->slice_block == c->block && s->slice)
        return s->slice;
    const ir_value *a = s->value;
    ir_type ty;
    memset(&ty, 0, sizeof ty);
    ty.dtype = a->type.dtype;
    ty.rank = a->type.rank - 1;
    ty.sh = ir_sharding_replicated();
    for (int d = 1; d < a->type.rank; d++) {
        ty.dims[d - 1] = a->type.dims[d];
        ty.sh.naxes[d - 1] = a->type.sh.naxes[d];
        memcpy(ty.sh.axes[d - 1], a->type.sh.axes[d], sizeof ty.sh.axes[d - 1]);
    }
    ir_value *r = ir_value_new(c->m, s->name, IR_VAL_OP, &ty, t->name.loc);
    ir_value *opnd = s->value;
    ir_op *op = ir_op_new(c->m, IR_OP_LAYERSLICE, 1, &opnd, r, t->name.loc);
    op->u.loop.dim = c->loop_begin->u.loop.dim;
    op->u.loop.begin = c->loop_begin;
    ir_op_append(c->m, op);
    s->slice = r;
    s->slice_block = c->block;
    return r;
}

/* `repeat L {`: a LoopBegin whose result is the carried tensor's value at
 * the top of each iteration (its sharding is propagate's to choose). */
static void lower_repeat(fe_checker *c, const ast_stmt *s)
{
    c->block++;
    fe_tensor *t = s->u.repeat.carry;
    ir_value *init = t->value;
    ir_type ty = init->type;
    ir_value *top = ir_value_new(c->m, t->name, IR_VAL_OP, &ty, s->loc);
    ir_op *op = ir_op_new(c->m, IR_OP_LOOPBEGIN, 1, &init, top, s->loc);
    op->u.loop.dim = s->u.repeat.dim_id;
    op->u.loop.begin = op;
    ir_op_append(c->m, op);
    c->loop_begin = op;
    c->repeat = (ast_stmt *)s;
    t->value = top;
}

/* `}`: a LoopEnd that takes the body's new value of the carried tensor to
 * the next iteration; its result is the tensor after the loop. */
static void lower_end(fe_checker *c, uint32_t loc)
{
    fe_tensor *t = c->repeat->u.repeat.carry;
    ir_value *next = t->value;
    ir_type ty = next->type;
    ir_value *after = ir_value_new(c->m, t->name, IR_VAL_OP, &ty, loc);
    ir_op *op = ir_op_new(c->m, IR_OP_LOOPEND, 1, &next, after, loc);
    op->u.loop.dim = c->loop_begin->u.loop.dim;
    op->u.loop.begin = c->loop_begin;
    op->u.loop.end = op;
    c->loop_begin->u.loop.end = op;
    ir_op_append(c->m, op);
    c->loop_begin = NULL;
    c->repeat = NULL;
    t->value = after;
}

static bool has_label(const int *labels, int n, int dim)
{
    for (int i = 0; i < n; i++)
        if (labels[i] == dim)
            return true;
    return false;
}

/* True if `f` references a tensor or an index value (otherwise it is a
 * constant). */
static bool expr_varies(const ast_expr *e);
static bool factor_varies(const ast_factor *f)
{
    if (f->kind == AST_F_TENSOR || f->kind == AST_F_INDEX)
        return true;
    ast_expr *const *kids;
    int nk = ast_factor_children(f, &kids);
    for (int k = 0; k < nk; k++)
        if (expr_varies(kids[k]))
            return true;
    return false;
}

static bool expr_varies(const ast_expr *e)
{
    for (int i = 0; i < e->nterms; i++)
        for (int k = 0; k < e->terms[i]->nfactors; k++)
            if (factor_varies(e->terms[i]->factors[k]))
                return true;
    return false;
}

static fe_ew *expr_tree(stmt_ctx *x, const ast_expr *e);

/* A tensor operand of an einsum: value and the dim id of each position. */
typedef struct operand {
    ir_value *v;              /* the value */
    int n;                    /* its rank */
    int labels[IR_MAX_RANK];  /* labels */
} operand;

static bool lower_reduction(stmt_ctx *x, const ast_factor *f, operand *out);
static operand lower_gather(stmt_ctx *x, const ast_tref *t);

/* The index tensor of a gather reference `Emb[Tok[B, T], D]`, or NULL. */
static const ast_tref *gather_ids(const ast_tref *t)
{
    return t->nidx > 0 ? t->idx[0].tensor : NULL;
}
static bool lower_softmax(stmt_ctx *x, const ast_factor *f, operand *out);

/* Elementwise tree of one factor (tensor references become leaves), not
 * counting its `divide` flag. */
static fe_ew *factor_tree(stmt_ctx *x, const ast_factor *f)
{
    ir_arena *a = x->e.arena;
    switch (f->kind) {
    case AST_F_TENSOR: {
        if (gather_ids(&f->u.tref)) {
            operand g = lower_gather(x, &f->u.tref);
            return fe_ew_leaf(a, g.v, g.labels, g.n);
        }
        int labels[IR_MAX_RANK];
        for (int i = 0; i < f->u.tref.nidx; i++)
            labels[i] = f->u.tref.idx[i].dim;
        return fe_ew_leaf(a, ref_value(x->c, &f->u.tref), labels, f->u.tref.nidx);
    }
    case AST_F_NUMBER:
        return fe_ew_const(a, f->u.num.value);
    case AST_F_INDEX:
        return fe_ew_index(a, f->u.index.dim);
    case AST_F_PAREN:
        return expr_tree(x, f->u.paren);
    case AST_F_CMP:
        return fe_ew_bin(a, (ir_ew_kind)f->u.cmp.op, expr_tree(x, f->u.cmp.sides[0]),
                         expr_tree(x, f->u.cmp.sides[1]));
    case AST_F_CALL: {
        ast_expr *const *args = f->u.call.args;
        switch (f->u.call.callee) {
        case AST_CALL_MAXIMUM:
        case AST_CALL_MINIMUM:
            return fe_ew_bin(a, f->u.call.callee == AST_CALL_MAXIMUM ? IR_EW_MAX : IR_EW_MIN,
                             expr_tree(x, args[0]), expr_tree(x, args[1]));
        case AST_CALL_WHERE:
            return fe_ew_select(a, expr_tree(x, args[0]), expr_tree(x, args[1]),
                                expr_tree(x, args[2]));
        case AST_CALL_SUM:
        case AST_CALL_MAX:
        case AST_CALL_MIN:
        case AST_CALL_MEAN:
        case AST_CALL_SOFTMAX: {
            operand r;
            bool ok = f->u.call.callee == AST_CALL_SOFTMAX ? lower_softmax(x, f, &r)
                                                           : lower_reduction(x, f, &r);
            /* After an error a constant keeps the tree whole; x->ok is false. */
            return ok ? fe_ew_leaf(a, r.v, r.labels, r.n) : fe_ew_const(a, 0.0);
        }
        case AST_CALL_FN:
        case AST_CALL_UNKNOWN: /* the checker rejected unknown names */
        case AST_CALL_GRAD:    /* the checker allows these two only as a whole right side */
        case AST_CALL_ARGMAX:
            break;
        }
        return fe_ew_call(a, (ir_func)f->u.call.fn, expr_tree(x, args[0]));
    }
    }
    return NULL;
}

/* Product of the factors of `t` for which `pick` holds (NULL if none). */
static fe_ew *product_tree(stmt_ctx *x, const ast_term *t, bool (*pick)(const ast_factor *))
{
    fe_ew *r = NULL;
    for (int k = 0; k < t->nfactors; k++) {
        if (pick && !pick(t->factors[k]))
            continue;
        fe_ew *f = factor_tree(x, t->factors[k]);
        if (t->factors[k]->divide)
            r = fe_ew_bin(x->e.arena, IR_EW_DIV, r ? r : fe_ew_const(x->e.arena, 1.0), f);
        else
            r = r ? fe_ew_bin(x->e.arena, IR_EW_MUL, r, f) : f;
    }
    return r;
}

/* Adds `term` with its sign to the running sum `acc` (NULL = empty). */
static fe_ew *add_signed(stmt_ctx *x, fe_ew *acc, int sign, fe_ew *term)
{
    if (acc)
        return fe_ew_bin(x->e.arena, sign < 0 ? IR_EW_SUB : IR_EW_ADD, acc, term);
    if (sign < 0 && term->kind == IR_EW_CONST) {
        term->value = -term->value; /* `-inf`, `-1`: a constant, not neg() of one */
        return term;
    }
    return sign < 0 ? fe_ew_call(x->e.arena, IR_FN_NEG, term) : term;
}

/* Elementwise tree of a whole expression: no summation anywhere inside. */
static fe_ew *expr_tree(stmt_ctx *x, const ast_expr *e)
{
    fe_ew *acc = NULL;
    for (int i = 0; i < e->nterms; i++)
        acc = add_signed(x, acc, e->terms[i]->sign, product_tree(x, e->terms[i], NULL));
    return acc;
}

/* Adds the indices of `f` to labels[0..*n) (all of them counted). */
static void factor_indices(const stmt_ctx *x, const ast_factor *f, int *labels, int *n, int cap);
static void expr_indices(const stmt_ctx *x, const ast_expr *e, int *labels, int *n, int cap)
{
    for (int i = 0; i < e->nterms; i++)
        for (int k = 0; k < e->terms[i]->nfactors; k++)
            factor_indices(x, e->terms[i]->factors[k], labels, n, cap);
}

/* Adds dim `d` to labels[0..*n) unless present (all of them counted). */
static void add_label(int d, int *labels, int *n, int cap)
{
    if (has_label(labels, *n < cap ? *n : cap, d))
        return;
    if (*n < cap)
        labels[*n] = d;
    (*n)++;
}

/* Whether a reduction call `f` keeps label `d` of its argument: all but
 * the named index, or without one, those of the left side. */
static bool reduction_keeps(const stmt_ctx *x, const ast_factor *f, int d)
{
    if (f->u.call.reduce_dim >= 0)
        return d != f->u.call.reduce_dim;
    return has_label(x->lhs, x->nlhs, d);
}

static void factor_indices(const stmt_ctx *x, const ast_factor *f, int *labels, int *n, int cap)
{
    const ast_tref *ids = f->kind == AST_F_TENSOR ? gather_ids(&f->u.tref) : NULL;
    for (int i = 0; ids && i < ids->nidx; i++) /* a gather has the indices' labels ... */
        add_label(ids->idx[i].dim, labels, n, cap);
    if (f->kind == AST_F_TENSOR) /* ... and the table's others */
        for (int i = ids ? 1 : 0; i < f->u.tref.nidx; i++)
            add_label(f->u.tref.idx[i].dim, labels, n, cap);
    else if (f->kind == AST_F_INDEX)
        add_label(f->u.index.dim, labels, n, cap);
    if (f->kind == AST_F_CALL && ast_callee_reduces(f->u.call.callee)) {
        int in[IR_MAX_RANK * 2], nin = 0;
        expr_indices(x, f->u.call.args[0], in, &nin, IR_MAX_RANK * 2);
        for (int i = 0; i < nin && i < IR_MAX_RANK * 2; i++)
            if (reduction_keeps(x, f, in[i]))
                add_label(in[i], labels, n, cap);
        return;
    }
    ast_expr *const *kids;
    int nk = ast_factor_children(f, &kids);
    if (f->kind == AST_F_CALL && f->u.call.callee == AST_CALL_SOFTMAX)
        nk = 1; /* the second argument names an index of the first */
    for (int k = 0; k < nk; k++)
        expr_indices(x, kids[k], labels, n, cap);
}

/* Labels of a result over `have` (n entries) restricted to those in `keep`:
 * the left side's order first, then the order in `have`. */
static int restrict_labels(const stmt_ctx *x, const int *have, int n, const int *keep, int nkeep,
                           int *out)
{
    int r = 0;
    for (int i = 0; i < x->nlhs; i++)
        if (has_label(have, n, x->lhs[i]))
            out[r++] = x->lhs[i];
    for (int i = 0; i < n; i++)
        if (!has_label(out, r, have[i]) && has_label(keep, nkeep, have[i]))
            out[r++] = have[i];
    return r;
}

/* One binary or unary einsum step. */
static operand einsum(stmt_ctx *x, const operand *ops, int nops, const int *res, int nres,
                      double scale, uint32_t vloc)
{
    operand out = {.n = nres};
    memcpy(out.labels, res, (size_t)nres * sizeof *res);
    out.v = fe_value_new(&x->e, res, nres, vloc);
    ir_value *vals[2];
    for (int i = 0; i < nops; i++)
        vals[i] = ops[i].v;
    ir_op *op = ir_op_new(x->e.m, IR_OP_EINSUM, nops, vals, out.v, x->e.loc);
    for (int i = 0; i < nops; i++)
        memcpy(op->u.einsum.labels[i], ops[i].labels, (size_t)ops[i].n * sizeof(int));
    memcpy(op->u.einsum.result_labels, res, (size_t)nres * sizeof *res);
    op->u.einsum.scale = scale;
    ir_op_append(x->e.m, op);
    return out;
}

static bool limit_rank(stmt_ctx *x, int n, uint32_t loc, const char *what)
{
    if (n <= IR_MAX_RANK)
        return true;
    diag_error(x->c->diag, loc, "%s of '%s' would have %d dims; at most %d are supported: split the statement",
               what, x->e.tensor, n, IR_MAX_RANK);
    x->ok = false;
    return false;
}

/* The first argument of call `f` as an einsum operand: a plain tensor
 * reference as it is, anything else as its own elementwise value. */
static bool call_argument(stmt_ctx *x, const ast_factor *f, operand *out)
{
    const ast_expr *e = f->u.call.args[0];
    const ast_factor *g = e->nterms == 1 && e->terms[0]->sign > 0 && e->terms[0]->nfactors == 1
                              ? e->terms[0]->factors[0] : NULL;
    if (g && g->kind == AST_F_TENSOR && !g->divide) {
        out->v = ref_value(x->c, &g->u.tref);
        out->n = g->u.tref.nidx;
        for (int i = 0; i < out->n; i++)
            out->labels[i] = g->u.tref.idx[i].dim;
        return true;
    }
    int n = 0, seen[IR_MAX_RANK];
    expr_indices(x, e, seen, &n, IR_MAX_RANK);
    if (!limit_rank(x, n, e->loc, "the argument of a reduction"))
        return false;
    /* The left side's order first, so the reduced indices come last and
     * the argument is laid out as the result reads it: `softmax(where(S <=
     * T, L[T, S], -inf), S)` into Q[T, S] is computed as [T, S], not [S, T]
     * and then transposed. */
    out->n = restrict_labels(x, seen, n, seen, n, out->labels);
    out->v = fe_ew_emit(&x->e, expr_tree(x, e), out->labels, n, e->loc);
    return true;
}

/* A unary einsum of `in` onto the labels of `in` that `keep` holds (the
 * left side's order first), reducing the rest with `red` and scaling by
 * `scale`; returns its result. */
static operand reduce_einsum(stmt_ctx *x, const operand *in, const bool *keep, ir_reduce red,
                             double scale, uint32_t vloc)
{
    int have[IR_MAX_RANK], nhave = 0, out[IR_MAX_RANK];
    for (int i = 0; i < in->n; i++)
        if (keep[i])
            have[nhave++] = in->labels[i];
    int nout = restrict_labels(x, have, nhave, have, nhave, out);
    operand r = einsum(x, in, 1, out, nout, scale, vloc);
    x->e.m->last->u.einsum.reduce = red;
    return r;
}

/* `Emb[Tok[B, T], D]`: the gather einsum of the indices and the table (ir.h:
 * result labels are the indices' then the table's others; the table's
 * first dim is the one-hot's contracted label). */
static operand lower_gather(stmt_ctx *x, const ast_tref *t)
{
    const ast_tref *ids = gather_ids(t);
    operand ops[2], out = {.n = 0};
    ops[0].v = ref_value(x->c, ids);
    ops[0].n = ids->nidx;
    for (int i = 0; i < ids->nidx; i++)
        out.labels[out.n++] = ops[0].labels[i] = ids->idx[i].dim;
    ops[1].v = ref_value(x->c, t);
    ops[1].n = t->nidx;
    ops[1].labels[0] = t->idx[0].dim;
    for (int i = 1; i < t->nidx; i++)
        out.labels[out.n++] = ops[1].labels[i] = t->idx[i].dim;
    operand r = einsum(x, ops, 2, out.labels, out.n, 1.0, t->name.loc);
    ir_op *op = x->e.m->last;
    op->u.einsum.gather = true;
    op->u.einsum.gather_label = t->idx[0].dim;
    return r;
}

/* `sum(x)`, `max(x)`, `min(x)`, `mean(x)` (optionally over one named index):
 * a unary einsum with the reduction's operator; mean is the sum scaled by
 * the reciprocal of the reduced dims' global sizes. */
static bool lower_reduction(stmt_ctx *x, const ast_factor *f, operand *out)
{
    operand arg;
    if (!call_argument(x, f, &arg)) {
        x->ok = false;
        return false;
    }
    bool keep[IR_MAX_RANK];
    double count = 1;
    for (int i = 0; i < arg.n; i++) {
        keep[i] = reduction_keeps(x, f, arg.labels[i]);
        if (!keep[i])
            count *= (double)x->e.m->dims[arg.labels[i]].size;
    }
    ast_callee c = f->u.call.callee;
    ir_reduce red = c == AST_CALL_MAX ? IR_RED_MAX : c == AST_CALL_MIN ? IR_RED_MIN : IR_RED_SUM;
    *out = reduce_einsum(x, &arg, keep, red, c == AST_CALL_MEAN ? 1.0 / count : 1.0, f->loc);
    return true;
}

/* `N[B] = argmax(x[B, V], V)`, a whole right side: the argument in its own
 * dtype, then a unary einsum reducing V with IR_RED_ARGMAX into the
 * statement's i32 value. */
static ir_value *lower_argmax(stmt_ctx *x, const ast_factor *f)
{
    operand arg;
    x->e.dtype = f->u.call.arg_dtype;
    bool ok = call_argument(x, f, &arg);
    x->e.dtype = IR_I32;
    if (!ok) {
        x->ok = false;
        return NULL;
    }
    bool keep[IR_MAX_RANK];
    for (int i = 0; i < arg.n; i++)
        keep[i] = arg.labels[i] != f->u.call.reduce_dim;
    return reduce_einsum(x, &arg, keep, IR_RED_ARGMAX, 1.0, f->loc).v;
}

/* softmax(x, S) = exp(x - max_S x) * (1 / sum_S exp(x - max_S x)): the
 * stable form, as four ops (max, exp of the difference, sum, scale), so
 * each reduction is sharded by the einsum rules (a sharded S gives partial
 * maxima and sums, reduced by AllReduce).  The scale multiplies by the
 * reciprocal of the sum, which the loop over S computes once (LICM), where
 * a division per element took a tenth of a softmax row's time
 * (docs/performance.md, section 7); it rounds twice, so the result is
 * within 1.5 ulp of the exact quotient instead of 0.5. */
static bool lower_softmax(stmt_ctx *x, const ast_factor *f, operand *out)
{
    operand arg;
    if (!call_argument(x, f, &arg)) {
        x->ok = false;
        return false;
    }
    ir_arena *a = x->e.arena;
    bool keep[IR_MAX_RANK];
    for (int i = 0; i < arg.n; i++)
        keep[i] = arg.labels[i] != f->u.call.reduce_dim;
    operand m = reduce_einsum(x, &arg, keep, IR_RED_MAX, 1.0, f->loc);
    fe_ew *d = fe_ew_bin(a, IR_EW_SUB, fe_ew_leaf(a, arg.v, arg.labels, arg.n),
                         fe_ew_leaf(a, m.v, m.labels, m.n));
    operand e = arg;
    e.v = fe_ew_emit(&x->e, fe_ew_call(a, IR_FN_EXP, d), arg.labels, arg.n, f->loc);
    operand z = reduce_einsum(x, &e, keep, IR_RED_SUM, 1.0, f->loc);
    *out = arg;
    fe_ew *inv = fe_ew_bin(a, IR_EW_DIV, fe_ew_const(a, 1.0), fe_ew_leaf(a, z.v, z.labels, z.n));
    out->v = fe_ew_emit(&x->e, fe_ew_bin(a, IR_EW_MUL, fe_ew_leaf(a, e.v, e.labels, e.n), inv),
                        arg.labels, arg.n, f->loc);
    return true;
}

/* Lowers a summed term into its einsum chain; returns the result value
 * (labels: the left side's dims the term has), or NULL after an error. */
static ir_value *lower_summed(stmt_ctx *x, const ast_term *t, double scale, int *res, int *nres)
{
    int nf = 0;
    operand *ops = ir_alloc(x->e.arena, (size_t)t->nfactors * sizeof *ops);
    for (int k = 0; k < t->nfactors; k++) {
        const ast_factor *f = t->factors[k];
        if (f->kind == AST_F_NUMBER) {
            scale = f->divide ? scale / f->u.num.value : scale * f->u.num.value;
            continue;
        }
        if (!factor_varies(f))
            continue; /* a constant call or parenthesis: multiplied in by the caller */
        operand *o = &ops[nf++];
        if (f->kind == AST_F_TENSOR && !f->divide && gather_ids(&f->u.tref)) {
            *o = lower_gather(x, &f->u.tref);
            continue;
        }
        if (f->kind == AST_F_TENSOR && !f->divide) {
            o->v = ref_value(x->c, &f->u.tref);
            o->n = f->u.tref.nidx;
            for (int i = 0; i < o->n; i++)
                o->labels[i] = f->u.tref.idx[i].dim;
            continue;
        }
        if (f->kind == AST_F_CALL && !f->divide &&
            (ast_callee_reduces(f->u.call.callee) || f->u.call.callee == AST_CALL_SOFTMAX)) {
            /* The reduction's own value is the operand. */
            bool ok = f->u.call.callee == AST_CALL_SOFTMAX ? lower_softmax(x, f, o)
                                                           : lower_reduction(x, f, o);
            if (!ok)
                return NULL;
            continue;
        }
        int n = 0;
        factor_indices(x, f, o->labels, &n, IR_MAX_RANK);
        if (!limit_rank(x, n, f->loc, "this parenthesised expression or call"))
            return NULL;
        o->n = n;
        /* An einsum only multiplies: a divisor becomes its reciprocal. */
        fe_ew *tree = factor_tree(x, f);
        if (f->divide)
            tree = fe_ew_bin(x->e.arena, IR_EW_DIV, fe_ew_const(x->e.arena, 1.0), tree);
        o->v = fe_ew_emit(&x->e, tree, o->labels, n, f->loc);
    }
    /* The chain: acc = ops[0]; acc = einsum(acc, ops[k]) for k = 1.. keeping
     * the left side's indices and those of ops[k+1..]; one factor alone is
     * a reduction (unary einsum). */
    int *keep = ir_alloc(x->e.arena, (size_t)(nf * IR_MAX_RANK + 1) * sizeof *keep);
    operand acc = ops[0];
    for (int k = nf == 1 ? 0 : 1; k < nf; k++) {
        operand pair[2] = {acc, ops[k]};
        int npair = nf == 1 ? 1 : 2;
        int nkeep = 0;
        for (int j = k + 1; j < nf; j++)
            for (int i = 0; i < ops[j].n; i++)
                if (!has_label(keep, nkeep, ops[j].labels[i]))
                    keep[nkeep++] = ops[j].labels[i];
        int have[2 * IR_MAX_RANK], nhave = 0;
        for (int p = 0; p < npair; p++)
            for (int i = 0; i < pair[p].n; i++)
                if (!has_label(have, nhave, pair[p].labels[i]))
                    have[nhave++] = pair[p].labels[i];
        int out[2 * IR_MAX_RANK];
        int nout = restrict_labels(x, have, nhave, keep, nkeep, out);
        if (!limit_rank(x, nout, t->loc, "an intermediate einsum"))
            return NULL;
        double sc = k == nf - 1 ? scale : 1.0;
        if (npair == 2 && nout == nhave) {
            /* Nothing is summed at this step (a broadcast product, like
             * the rotary tables' `* Sin[T, G]`): an elementwise op, which
             * fuses with its neighbours, not a GEMM of one-element dims. */
            ir_arena *a = x->e.arena;
            fe_ew *prod = fe_ew_bin(a, IR_EW_MUL, fe_ew_leaf(a, pair[0].v, pair[0].labels, pair[0].n),
                                    fe_ew_leaf(a, pair[1].v, pair[1].labels, pair[1].n));
            if (sc != 1.0)
                prod = fe_ew_bin(a, IR_EW_MUL, fe_ew_const(a, sc), prod);
            acc.v = fe_ew_emit(&x->e, prod, out, nout, t->loc);
            acc.n = nout;
            memcpy(acc.labels, out, (size_t)nout * sizeof(int));
            continue;
        }
        acc = einsum(x, pair, npair, out, nout, sc, t->loc);
    }
    *nres = acc.n;
    memcpy(res, acc.labels, (size_t)acc.n * sizeof(int));
    return acc.v;
}

/* True if some tensor index under `e` is not on the left side. */
static bool expr_summed(const stmt_ctx *x, const ast_expr *e);
static bool factor_summed(const stmt_ctx *x, const ast_factor *f)
{
    if (f->kind == AST_F_TENSOR) {
        int labels[2 * IR_MAX_RANK], n = 0;
        factor_indices(x, f, labels, &n, 2 * IR_MAX_RANK);
        for (int i = 0; i < n && i < 2 * IR_MAX_RANK; i++)
            if (!has_label(x->lhs, x->nlhs, labels[i]))
                return true;
        return false;
    }
    if (f->kind == AST_F_INDEX && !has_label(x->lhs, x->nlhs, f->u.index.dim))
        return true;
    if (f->kind == AST_F_CALL && ast_callee_reduces(f->u.call.callee)) {
        /* Summed outside only in what the reduction keeps. */
        int kept[IR_MAX_RANK * 2], n = 0;
        factor_indices(x, f, kept, &n, IR_MAX_RANK * 2);
        for (int i = 0; i < n && i < IR_MAX_RANK * 2; i++)
            if (!has_label(x->lhs, x->nlhs, kept[i]))
                return true;
        return false;
    }
    ast_expr *const *kids;
    int nk = ast_factor_children(f, &kids);
    for (int k = 0; k < nk; k++)
        if (expr_summed(x, kids[k]))
            return true;
    return false;
}

static bool expr_summed(const stmt_ctx *x, const ast_expr *e)
{
    for (int i = 0; i < e->nterms; i++)
        for (int k = 0; k < e->terms[i]->nfactors; k++)
            if (factor_summed(x, e->terms[i]->factors[k]))
                return true;
    return false;
}

/* A term is summed over the indices it has and the left side lacks. */
static bool summed(const stmt_ctx *x, const ast_term *t)
{
    for (int k = 0; k < t->nfactors; k++)
        if (factor_summed(x, t->factors[k]))
            return true;
    return false;
}

static bool is_constant_factor(const ast_factor *f)
{
    return f->kind != AST_F_NUMBER && !factor_varies(f);
}

/* Lowers one statement; returns its final value or NULL after an error. */
static ir_value *lower_assign(stmt_ctx *x, const ast_stmt *s)
{
    const ast_expr *rhs = s->u.assign.rhs;
    uint32_t vloc = s->u.assign.lhs.name.loc;
    const ast_factor *f0 = rhs->nterms == 1 && rhs->terms[0]->nfactors == 1 ? rhs->terms[0]->factors[0] : NULL;
    if (f0 && f0->kind == AST_F_CALL && f0->u.call.callee == AST_CALL_ARGMAX) {
        ir_value *v = lower_argmax(x, f0);
        if (v)
            v->loc = vloc;
        return v;
    }
    /* Exactly one summed term without constant calls: the einsum is the value. */
    if (rhs->nterms == 1 && summed(x, rhs->terms[0]) &&
        !product_tree(x, rhs->terms[0], is_constant_factor)) {
        int res[IR_MAX_RANK], nres;
        ir_value *v = lower_summed(x, rhs->terms[0], rhs->terms[0]->sign, res, &nres);
        if (v)
            v->loc = vloc;
        return v;
    }
    fe_ew *acc = NULL;
    for (int i = 0; i < rhs->nterms; i++) {
        const ast_term *t = rhs->terms[i];
        fe_ew *tree;
        if (summed(x, t)) {
            int res[IR_MAX_RANK], nres;
            ir_value *v = lower_summed(x, t, 1.0, res, &nres);
            if (!v)
                return NULL;
            tree = fe_ew_leaf(x->e.arena, v, res, nres);
            fe_ew *consts = product_tree(x, t, is_constant_factor);
            if (consts)
                tree = fe_ew_bin(x->e.arena, IR_EW_MUL, consts, tree);
        } else {
            tree = product_tree(x, t, NULL);
        }
        acc = add_signed(x, acc, t->sign, tree);
    }
    if (!x->ok)
        return NULL;
    /* A right side that is one reduction or softmax already made its value
     * over the left side's dims: no copy. */
    if (acc->kind == IR_EW_OPERAND && acc->v->def && strcmp(acc->v->tensor, x->e.tensor) == 0 &&
        acc->nlabels == x->nlhs && memcmp(acc->labels, x->lhs, (size_t)x->nlhs * sizeof(int)) == 0) {
        acc->v->loc = vloc;
        return acc->v;
    }
    return fe_ew_emit(&x->e, acc, x->lhs, x->nlhs, vloc);
}

static ir_sharding without_unit_axes(const ir_module *m, ir_sharding sh, int rank);

/* A write into a state at a run-time position (check_write.c): the slice
 * is computed as a statement over the state's other dims, constrained to
 * the state's sharding of them (propagate brings it there), then written
 * by an UpdateSlice into the state's storage, or in a repeated block into
 * the current layer's.  Later reads of the state see the write: the
 * UpdateSlice's result becomes its current value (or layer). */
static bool lower_write(fe_checker *c, const ast_stmt *s)
{
    const ast_tref *l = &s->u.assign.lhs;
    fe_tensor *t = l->sym;
    int at = s->u.assign.write_pos;
    ir_value *store = ref_value(c, l);
    stmt_ctx x = {.c = c, .ok = true};
    x.e = (fe_emit){.m = c->m, .arena = c->arena, .tensor = t->name, .dtype = t->dtype,
                    .loc = s->loc};
    /* A window's rows have its dim in place of the written one. */
    int window = l->idx[at].window.s ? l->idx[at].dim : -1;
    for (int d = 0; d < store->type.rank; d++)
        if (d != at)
            x.lhs[x.nlhs++] = store->type.dims[d];
        else if (window >= 0)
            x.lhs[x.nlhs++] = window;
    /* A slice that is the result of a computing op, as it is, is written
     * from that value (constrained to the state's sharding) without a copy;
     * a carried value or a view is copied (its sharding is the loop's). */
    const ast_expr *rhs = s->u.assign.rhs;
    const ast_factor *f = rhs->nterms == 1 && rhs->terms[0]->sign > 0 && rhs->terms[0]->nfactors == 1
                              ? rhs->terms[0]->factors[0] : NULL;
    ir_value *rows = NULL;
    if (f && f->kind == AST_F_TENSOR && !f->divide && !f->u.tref.layer && f->u.tref.nidx == x.nlhs &&
        f->u.tref.sym->value->def && !f->u.tref.sym->value->has_constraint &&
        (f->u.tref.sym->value->def->kind == IR_OP_EINSUM ||
         f->u.tref.sym->value->def->kind == IR_OP_ELEMENTWISE) &&
        (!f->u.tref.nidx || !f->u.tref.idx[0].tensor)) {
        rows = f->u.tref.sym->value;
        /* ...read with its own dims (a relabeled reference gets a copy). */
        for (int k = 0; rows && k < x.nlhs; k++)
            if (f->u.tref.idx[k].dim != x.lhs[k] || rows->type.dims[k] != x.lhs[k])
                rows = NULL;
    }
    if (!rows)
        rows = lower_assign(&x, s);
    if (!rows)
        return false;
    ir_sharding sh = ir_sharding_replicated();
    for (int d = 0, j = 0; d < store->type.rank; d++) {
        if (d == at && window >= 0)
            j++; /* the window's rows are whole on every device */
        if (d == at)
            continue;
        for (int k = 0; k < store->type.sh.naxes[d]; k++)
            ir_sharding_push(&sh, j, store->type.sh.axes[d][k]);
        j++;
    }
    rows->has_constraint = true;
    rows->constraint = without_unit_axes(c->m, sh, rows->type.rank);
    ir_value *opnds[3] = {store, rows, s->u.assign.pos->value};
    ir_value *r = ir_value_new(c->m, t->name, IR_VAL_OP, &store->type, l->name.loc);
    ir_op *op = ir_op_new(c->m, IR_OP_UPDATESLICE, 3, opnds, r, s->loc);
    op->u.update.dim = at;
    ir_op_append(c->m, op);
    if (s->u.assign.write_layer)
        t->slice = r; /* ref_value made the layer's slice in this block */
    else
        t->value = r;
    return true;
}

/* `sh` without the mesh axes of size 1: an axis of one device splits
 * nothing and reduces nothing, and left in a sharding it would make the
 * planner insert collectives over groups of one device (a copy each). */
static ir_sharding without_unit_axes(const ir_module *m, ir_sharding sh, int rank)
{
    ir_sharding out = ir_sharding_replicated();
    for (int d = 0; d < rank; d++)
        for (int k = 0; k < sh.naxes[d]; k++)
            if (m->mesh.axes[sh.axes[d][k]].size > 1)
                ir_sharding_push(&out, d, sh.axes[d][k]);
    for (int a = 0; a < m->mesh.naxes; a++)
        if ((sh.unreduced & (1u << a)) && m->mesh.axes[a].size > 1)
            out.unreduced |= 1u << a;
    out.red = out.unreduced ? sh.red : (uint8_t)IR_RED_SUM;
    return out;
}

/* The value of a declared input or param. */
static void lower_decl(fe_checker *c, const ast_stmt *s)
{
    fe_tensor *t = s->u.decl.tref.sym;
    ir_type ty;
    memset(&ty, 0, sizeof ty);
    ty.dtype = t->dtype;
    ty.rank = t->rank;
    memcpy(ty.dims, t->dims, (size_t)t->rank * sizeof(int));
    ty.sh = c->opts->single_device ? ir_sharding_replicated()
                                   : without_unit_axes(c->m, t->sh, t->rank);
    t->value = ir_value_new(c->m, t->name, t->kind, &ty, t->loc);
}

/* True when the shardings the program writes on statements and outputs
 * are dropped: the one-device reference, and einc analyze's strategies
 * (fe_autoshard.keep_mesh), which the planner lays out afresh. */
static bool drops_written_shardings(const fe_checker *c)
{
    return c->opts->single_device || (c->opts->autoshard && c->opts->autoshard->keep_mesh);
}

static void lower_output(fe_checker *c, const ast_stmt *s)
{
    const ast_tref *r = &s->u.output.tref;
    const fe_tensor *t = r->sym;
    ir_output *o = ir_output_add(c->m, t->name, t->value, r->name.loc);
    if (r->nidx < 0 || drops_written_shardings(c))
        return;
    o->has_constraint = true;
    ir_sharding sh = ir_sharding_replicated();
    for (int i = 0; i < r->nidx; i++)
        for (int k = 0; r->idx[i].axes && r->idx[i].axes[k]; k++)
            ir_sharding_push(&sh, i, ir_mesh_find_axis(&c->m->mesh, r->idx[i].axes[k]));
    o->constraint = without_unit_axes(c->m, sh, r->nidx);
}

bool fe_lower(fe_checker *c, const ast_program *prog)
{
    bool ok = true;
    c->block = 0; /* lower_repeat numbers the blocks again, as the checker did */
    c->repeat = NULL;
    for (int i = 0; i < prog->nstmts && ok; i++) {
        const ast_stmt *s = prog->stmts[i];
        if (s->kind == AST_S_INPUT || s->kind == AST_S_PARAM || s->kind == AST_S_STATE) {
            lower_decl(c, s);
        } else if (s->kind == AST_S_REPEAT) {
            lower_repeat(c, s);
        } else if (s->kind == AST_S_END) {
            lower_end(c, s->loc);
        } else if (s->kind == AST_S_ASSIGN && s->u.assign.write) {
            ok = lower_write(c, s);
        } else if (s->kind == AST_S_ASSIGN) {
            const ast_tref *l = &s->u.assign.lhs;
            fe_tensor *t = fe_symtab_get(&c->tensors, l->name.s);
            stmt_ctx x = {.c = c, .nlhs = t->rank, .ok = true};
            x.e = (fe_emit){.m = c->m, .arena = c->arena, .tensor = t->name, .dtype = t->dtype,
                            .loc = s->loc};
            memcpy(x.lhs, t->dims, (size_t)t->rank * sizeof(int));
            /* An update of a carried tensor is computed over the labels its
             * left side writes, which may relabel the tensor's dims; its
             * value then takes the tensor's dims (same sizes, checked). */
            if (s->u.assign.update)
                for (int k = 0; k < t->rank; k++)
                    x.lhs[k] = l->idx[k].dim;
            t->value = fe_grad_call(s) ? fe_grad_lower(c, prog, s) : lower_assign(&x, s);
            if (!t->value) {
                ok = false;
                break;
            }
            if (s->u.assign.update)
                memcpy(t->value->type.dims, t->dims, (size_t)t->rank * sizeof(int));
            /* An update of a carried tensor has its own left side. */
            bool constrained = s->u.assign.update ? s->u.assign.constrained : t->has_constraint;
            if (constrained && !drops_written_shardings(c)) {
                t->value->has_constraint = true;
                t->value->constraint = without_unit_axes(
                    c->m, s->u.assign.update ? s->u.assign.sh : t->sh, t->rank);
            } else if (fe_grad_call(s) && !c->opts->single_device) {
                /* The gradient of an input or param is sharded like it,
                 * unless the left side says otherwise: FSDP's gradients
                 * come out by ReduceScatter, as seed 000 lists them. */
                const fe_tensor *w = fe_grad_target(c, s);
                if (w->kind != IR_VAL_OP && !t->value->has_constraint) {
                    t->value->has_constraint = true;
                    t->value->constraint = without_unit_axes(c->m, w->sh, w->rank);
                }
            }
        }
    }
    for (int i = 0; i < prog->nstmts && ok; i++)
        if (prog->stmts[i]->kind == AST_S_OUTPUT)
            lower_output(c, prog->stmts[i]);
    if (ok)
        ok = fe_lower_train(c, prog);
    if (c->opts->single_device)
        for (int a = 0; a < c->m->mesh.naxes; a++)
            c->m->mesh.axes[a].size = 1;
    return ok;
}
