/*
 * lower_expr.c - expressions to elementwise trees and einsum chains.
 *
 * A right side is a sum of terms; a term whose indices include one the
 * left side lacks is summed and becomes a chain of binary einsums
 * (lower_summed), every other term an elementwise tree, and all terms one
 * elementwise op over the left side (lower.c's comment has the rules and
 * why).  The index-set helpers decide which is which.
 */
#include <string.h>

#include "lower_internal.h"

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

/* Call `f` that makes a value of its own (a reduction, softmax or cast)
 * into *out; false after an error. */
static bool own_value(fe_stmt_ctx *x, const ast_factor *f, fe_operand *out)
{
    switch (f->u.call.callee) {
    case AST_CALL_SOFTMAX: return fe_lower_softmax(x, f, out);
    case AST_CALL_CAST: return fe_lower_cast(x, f, out);
    default: return fe_lower_reduction(x, f, out);
    }
}

/* Elementwise tree of one factor (tensor references become leaves), not
 * counting its `divide` flag. */
static ir_ewt *factor_tree(fe_stmt_ctx *x, const ast_factor *f)
{
    ir_arena *a = x->e.arena;
    switch (f->kind) {
    case AST_F_TENSOR: {
        if (gather_ids(&f->u.tref)) {
            fe_operand g = fe_lower_gather(x, &f->u.tref);
            return ir_ewt_leaf(a, g.v, g.labels, g.n);
        }
        int labels[IR_MAX_RANK];
        for (int i = 0; i < f->u.tref.nidx; i++)
            labels[i] = f->u.tref.idx[i].dim;
        return ir_ewt_leaf(a, fe_lower_ref_value(x->c, &f->u.tref), labels, f->u.tref.nidx);
    }
    case AST_F_NUMBER:
        return ir_ewt_const(a, f->u.num.value);
    case AST_F_INDEX:
        return ir_ewt_index(a, f->u.index.dim);
    case AST_F_PAREN:
        return fe_lower_expr_tree(x, f->u.paren);
    case AST_F_CMP:
        return ir_ewt_bin(a, (ir_ew_kind)f->u.cmp.op, fe_lower_expr_tree(x, f->u.cmp.sides[0]),
                          fe_lower_expr_tree(x, f->u.cmp.sides[1]));
    case AST_F_CALL: {
        ast_expr *const *args = f->u.call.args;
        switch (f->u.call.callee) {
        case AST_CALL_MAXIMUM:
        case AST_CALL_MINIMUM:
            return ir_ewt_bin(a, f->u.call.callee == AST_CALL_MAXIMUM ? IR_EW_MAX : IR_EW_MIN,
                              fe_lower_expr_tree(x, args[0]), fe_lower_expr_tree(x, args[1]));
        case AST_CALL_WHERE:
            return ir_ewt_select(a, fe_lower_expr_tree(x, args[0]), fe_lower_expr_tree(x, args[1]),
                                 fe_lower_expr_tree(x, args[2]));
        case AST_CALL_SUM:
        case AST_CALL_MAX:
        case AST_CALL_MIN:
        case AST_CALL_MEAN:
        case AST_CALL_SOFTMAX:
        case AST_CALL_CAST: {
            fe_operand r;
            bool ok = own_value(x, f, &r);
            /* After an error a constant keeps the tree whole; x->ok is false. */
            return ok ? ir_ewt_leaf(a, r.v, r.labels, r.n) : ir_ewt_const(a, 0.0);
        }
        case AST_CALL_FN:
        case AST_CALL_UNKNOWN: /* the checker rejected unknown names */
        case AST_CALL_GRAD:    /* the checker allows these two only as a whole right side */
        case AST_CALL_ARGMAX:
            break;
        }
        return ir_ewt_call(a, (ir_func)f->u.call.fn, fe_lower_expr_tree(x, args[0]));
    }
    }
    return NULL;
}

/* Product of the factors of `t` for which `pick` holds (NULL if none). */
static ir_ewt *product_tree(fe_stmt_ctx *x, const ast_term *t, bool (*pick)(const ast_factor *))
{
    ir_ewt *r = NULL;
    for (int k = 0; k < t->nfactors; k++) {
        if (pick && !pick(t->factors[k]))
            continue;
        ir_ewt *f = factor_tree(x, t->factors[k]);
        if (t->factors[k]->divide)
            r = ir_ewt_bin(x->e.arena, IR_EW_DIV, r ? r : ir_ewt_const(x->e.arena, 1.0), f);
        else
            r = r ? ir_ewt_bin(x->e.arena, IR_EW_MUL, r, f) : f;
    }
    return r;
}

/* Adds `term` with its sign to the running sum `acc` (NULL = empty). */
static ir_ewt *add_signed(fe_stmt_ctx *x, ir_ewt *acc, int sign, ir_ewt *term)
{
    if (acc)
        return ir_ewt_bin(x->e.arena, sign < 0 ? IR_EW_SUB : IR_EW_ADD, acc, term);
    if (sign < 0 && term->kind == IR_EW_CONST) {
        term->value = -term->value; /* `-inf`, `-1`: a constant, not neg() of one */
        return term;
    }
    return sign < 0 ? ir_ewt_call(x->e.arena, IR_FN_NEG, term) : term;
}

/* Elementwise tree of a whole expression: no summation anywhere inside. */
ir_ewt *fe_lower_expr_tree(fe_stmt_ctx *x, const ast_expr *e)
{
    ir_ewt *acc = NULL;
    for (int i = 0; i < e->nterms; i++)
        acc = add_signed(x, acc, e->terms[i]->sign, product_tree(x, e->terms[i], NULL));
    return acc;
}

/* Adds the indices of `f` to labels[0..*n) (all of them counted). */
static void factor_indices(const fe_stmt_ctx *x, const ast_factor *f, int *labels, int *n, int cap);
void fe_lower_expr_indices(const fe_stmt_ctx *x, const ast_expr *e, int *labels, int *n, int cap)
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
bool fe_lower_reduction_keeps(const fe_stmt_ctx *x, const ast_factor *f, int d)
{
    if (f->u.call.reduce_dim >= 0)
        return d != f->u.call.reduce_dim;
    return has_label(x->lhs, x->nlhs, d);
}

static void factor_indices(const fe_stmt_ctx *x, const ast_factor *f, int *labels, int *n, int cap)
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
        fe_lower_expr_indices(x, f->u.call.args[0], in, &nin, IR_MAX_RANK * 2);
        for (int i = 0; i < nin && i < IR_MAX_RANK * 2; i++)
            if (fe_lower_reduction_keeps(x, f, in[i]))
                add_label(in[i], labels, n, cap);
        return;
    }
    ast_expr *const *kids;
    int nk = ast_factor_children(f, &kids);
    if (f->kind == AST_F_CALL && f->u.call.callee == AST_CALL_SOFTMAX)
        nk = 1; /* the second argument names an index of the first */
    for (int k = 0; k < nk; k++)
        fe_lower_expr_indices(x, kids[k], labels, n, cap);
}

/* Labels of a result over `have` (n entries) restricted to those in `keep`:
 * the left side's order first, then the order in `have`. */
int fe_lower_restrict_labels(const fe_stmt_ctx *x, const int *have, int n, const int *keep,
                             int nkeep, int *out)
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

/* Lowers a summed term into its einsum chain; returns the result value
 * (labels: the left side's dims the term has), or NULL after an error. */
static ir_value *lower_summed(fe_stmt_ctx *x, const ast_term *t, double scale, int *res, int *nres)
{
    int nf = 0;
    fe_operand *ops = ir_alloc(x->e.arena, (size_t)t->nfactors * sizeof *ops);
    for (int k = 0; k < t->nfactors; k++) {
        const ast_factor *f = t->factors[k];
        if (f->kind == AST_F_NUMBER) {
            scale = f->divide ? scale / f->u.num.value : scale * f->u.num.value;
            continue;
        }
        if (!factor_varies(f))
            continue; /* a constant call or parenthesis: multiplied in by the caller */
        fe_operand *o = &ops[nf++];
        if (f->kind == AST_F_TENSOR && !f->divide && gather_ids(&f->u.tref)) {
            *o = fe_lower_gather(x, &f->u.tref);
            continue;
        }
        if (f->kind == AST_F_TENSOR && !f->divide) {
            o->v = fe_lower_ref_value(x->c, &f->u.tref);
            o->n = f->u.tref.nidx;
            for (int i = 0; i < o->n; i++)
                o->labels[i] = f->u.tref.idx[i].dim;
            continue;
        }
        if (f->kind == AST_F_CALL && !f->divide &&
            (ast_callee_reduces(f->u.call.callee) || f->u.call.callee == AST_CALL_SOFTMAX ||
             f->u.call.callee == AST_CALL_CAST)) {
            /* The call's own value is the operand: an einsum of a cast
             * reads the converted copy (the GEMMs take one dtype). */
            if (!own_value(x, f, o))
                return NULL;
            continue;
        }
        int n = 0;
        factor_indices(x, f, o->labels, &n, IR_MAX_RANK);
        if (!fe_lower_limit_rank(x, n, f->loc, "this parenthesised expression or call"))
            return NULL;
        o->n = n;
        /* An einsum only multiplies: a divisor becomes its reciprocal. */
        ir_ewt *tree = factor_tree(x, f);
        if (f->divide)
            tree = ir_ewt_bin(x->e.arena, IR_EW_DIV, ir_ewt_const(x->e.arena, 1.0), tree);
        o->v = ir_ewt_emit(&x->e, tree, o->labels, n, f->loc);
    }
    /* The chain: acc = ops[0]; acc = einsum(acc, ops[k]) for k = 1.. keeping
     * the left side's indices and those of ops[k+1..]; one factor alone is
     * a reduction (unary einsum). */
    int *keep = ir_alloc(x->e.arena, (size_t)(nf * IR_MAX_RANK + 1) * sizeof *keep);
    fe_operand acc = ops[0];
    for (int k = nf == 1 ? 0 : 1; k < nf; k++) {
        fe_operand pair[2] = {acc, ops[k]};
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
        int nout = fe_lower_restrict_labels(x, have, nhave, keep, nkeep, out);
        if (!fe_lower_limit_rank(x, nout, t->loc, "an intermediate einsum"))
            return NULL;
        double sc = k == nf - 1 ? scale : 1.0;
        if (npair == 2 && nout == nhave) {
            /* Nothing is summed at this step (a broadcast product, like
             * the rotary tables' `* Sin[T, G]`): an elementwise op, which
             * fuses with its neighbours, not a GEMM of one-element dims. */
            ir_arena *a = x->e.arena;
            ir_ewt *prod = ir_ewt_bin(a, IR_EW_MUL, ir_ewt_leaf(a, pair[0].v, pair[0].labels, pair[0].n),
                                      ir_ewt_leaf(a, pair[1].v, pair[1].labels, pair[1].n));
            if (sc != 1.0)
                prod = ir_ewt_bin(a, IR_EW_MUL, ir_ewt_const(a, sc), prod);
            acc.v = ir_ewt_emit(&x->e, prod, out, nout, t->loc);
            acc.n = nout;
            memcpy(acc.labels, out, (size_t)nout * sizeof(int));
            continue;
        }
        acc = fe_lower_einsum(x, pair, npair, out, nout, sc, t->loc);
    }
    *nres = acc.n;
    memcpy(res, acc.labels, (size_t)acc.n * sizeof(int));
    return acc.v;
}

/* True if some tensor index under `e` is not on the left side. */
static bool expr_summed(const fe_stmt_ctx *x, const ast_expr *e);
static bool factor_summed(const fe_stmt_ctx *x, const ast_factor *f)
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

static bool expr_summed(const fe_stmt_ctx *x, const ast_expr *e)
{
    for (int i = 0; i < e->nterms; i++)
        for (int k = 0; k < e->terms[i]->nfactors; k++)
            if (factor_summed(x, e->terms[i]->factors[k]))
                return true;
    return false;
}

/* A term is summed over the indices it has and the left side lacks. */
static bool summed(const fe_stmt_ctx *x, const ast_term *t)
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
ir_value *fe_lower_assign(fe_stmt_ctx *x, const ast_stmt *s)
{
    const ast_expr *rhs = s->u.assign.rhs;
    uint32_t vloc = s->u.assign.lhs.name.loc;
    const ast_factor *f0 = rhs->nterms == 1 && rhs->terms[0]->nfactors == 1 ? rhs->terms[0]->factors[0] : NULL;
    if (f0 && f0->kind == AST_F_CALL && f0->u.call.callee == AST_CALL_ARGMAX) {
        ir_value *v = fe_lower_argmax(x, f0);
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
    ir_ewt *acc = NULL;
    for (int i = 0; i < rhs->nterms; i++) {
        const ast_term *t = rhs->terms[i];
        ir_ewt *tree;
        if (summed(x, t)) {
            int res[IR_MAX_RANK], nres;
            ir_value *v = lower_summed(x, t, 1.0, res, &nres);
            if (!v)
                return NULL;
            tree = ir_ewt_leaf(x->e.arena, v, res, nres);
            ir_ewt *consts = product_tree(x, t, is_constant_factor);
            if (consts)
                tree = ir_ewt_bin(x->e.arena, IR_EW_MUL, consts, tree);
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
    return ir_ewt_emit(&x->e, acc, x->lhs, x->nlhs, vloc);
}
