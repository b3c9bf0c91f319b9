/*
 * lower_call.c - the calls that become values of their own: reductions,
 * softmax, argmax and gathers (einsums), casts (elementwise ops), and
 * grad (a Grad op, which the autodiff pass replaces by the backward ops).
 *
 * sum/max/min/mean are unary einsums with the reduction's operator, softmax
 * their stable composition, argmax an einsum reducing with IR_RED_ARGMAX,
 * and a gather the einsum of a one-hot and its table (ir.h), so the
 * propagate pass shards all of them by the einsum rules (seed 001).
 */
#include <string.h>

#include "lower_internal.h"

/* One binary or unary einsum step. */
fe_operand fe_lower_einsum(fe_stmt_ctx *x, const fe_operand *ops, int nops, const int *res,
                           int nres, double scale, uint32_t vloc)
{
    fe_operand out = {.n = nres};
    memcpy(out.labels, res, (size_t)nres * sizeof *res);
    out.v = ir_ewt_value(&x->e, res, nres, vloc);
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

bool fe_lower_limit_rank(fe_stmt_ctx *x, int n, uint32_t loc, const char *what)
{
    if (n <= IR_MAX_RANK)
        return true;
    diag_error(x->c->diag, loc, "%s of '%s' would have %d dims; at most %d are supported: split the statement",
               what, x->e.tensor, n, IR_MAX_RANK);
    x->ok = false;
    return false;
}

/* The first argument of call `f` as an einsum operand: a plain tensor
 * reference as it is, anything else (a gather included: its value has the
 * indices' labels, not the table's) as its own elementwise value. */
static bool call_argument(fe_stmt_ctx *x, const ast_factor *f, fe_operand *out)
{
    const ast_expr *e = f->u.call.args[0];
    const ast_factor *g = e->nterms == 1 && e->terms[0]->sign > 0 && e->terms[0]->nfactors == 1
                              ? e->terms[0]->factors[0] : NULL;
    if (g && g->kind == AST_F_TENSOR && !g->divide && !gather_ids(&g->u.tref)) {
        out->v = fe_lower_ref_value(x->c, &g->u.tref);
        out->n = g->u.tref.nidx;
        for (int i = 0; i < out->n; i++)
            out->labels[i] = g->u.tref.idx[i].dim;
        return true;
    }
    int n = 0, seen[IR_MAX_RANK];
    fe_lower_expr_indices(x, e, seen, &n, IR_MAX_RANK);
    if (!fe_lower_limit_rank(x, n, e->loc, "the argument of a reduction"))
        return false;
    /* The left side's order first, so the reduced indices come last and
     * the argument is laid out as the result reads it: `softmax(where(S <=
     * T, L[T, S], -inf), S)` into Q[T, S] is computed as [T, S], not [S, T]
     * and then transposed. */
    out->n = fe_lower_restrict_labels(x, seen, n, seen, n, out->labels);
    ir_ewt *tree = fe_lower_expr_tree(x, e);
    /* An argument that is already one value laid out as wanted (a gather,
     * a cast, a reduction) is the operand: no copy. */
    if (tree->kind == IR_EW_OPERAND && tree->nlabels == out->n && tree->v->type.dtype == x->e.dtype &&
        memcmp(tree->labels, out->labels, (size_t)out->n * sizeof(int)) == 0) {
        out->v = tree->v;
        return true;
    }
    out->v = ir_ewt_emit(&x->e, tree, out->labels, n, e->loc);
    return true;
}

/* A unary einsum of `in` onto the labels of `in` that `keep` holds (the
 * left side's order first), reducing the rest with `red` and scaling by
 * `scale`; returns its result. */
static fe_operand reduce_einsum(fe_stmt_ctx *x, const fe_operand *in, const bool *keep,
                                ir_reduce red, double scale, uint32_t vloc)
{
    int have[IR_MAX_RANK], nhave = 0, out[IR_MAX_RANK];
    for (int i = 0; i < in->n; i++)
        if (keep[i])
            have[nhave++] = in->labels[i];
    int nout = fe_lower_restrict_labels(x, have, nhave, have, nhave, out);
    fe_operand r = fe_lower_einsum(x, in, 1, out, nout, scale, vloc);
    x->e.m->last->u.einsum.reduce = red;
    return r;
}

/* `Emb[Tok[B, T], D]`: the gather einsum of the indices and the table (ir.h:
 * result labels are the indices' then the table's others; the table's
 * first dim is the one-hot's contracted label). */
fe_operand fe_lower_gather(fe_stmt_ctx *x, const ast_tref *t)
{
    const ast_tref *ids = gather_ids(t);
    fe_operand ops[2], out = {.n = 0};
    ops[0].v = fe_lower_ref_value(x->c, ids);
    ops[0].n = ids->nidx;
    for (int i = 0; i < ids->nidx; i++)
        out.labels[out.n++] = ops[0].labels[i] = ids->idx[i].dim;
    ops[1].v = fe_lower_ref_value(x->c, t);
    ops[1].n = t->nidx;
    ops[1].labels[0] = t->idx[0].dim;
    for (int i = 1; i < t->nidx; i++)
        out.labels[out.n++] = ops[1].labels[i] = t->idx[i].dim;
    fe_operand r = fe_lower_einsum(x, ops, 2, out.labels, out.n, 1.0, t->name.loc);
    ir_op *op = x->e.m->last;
    op->u.einsum.gather = true;
    op->u.einsum.gather_label = t->idx[0].dim;
    return r;
}

/* `sum(x)`, `max(x)`, `min(x)`, `mean(x)` (optionally over one named index):
 * a unary einsum with the reduction's operator; mean is the sum scaled by
 * the reciprocal of the reduced dims' global sizes. */
bool fe_lower_reduction(fe_stmt_ctx *x, const ast_factor *f, fe_operand *out)
{
    fe_operand arg;
    if (!call_argument(x, f, &arg)) {
        x->ok = false;
        return false;
    }
    bool keep[IR_MAX_RANK];
    double count = 1;
    for (int i = 0; i < arg.n; i++) {
        keep[i] = fe_lower_reduction_keeps(x, f, arg.labels[i]);
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
ir_value *fe_lower_argmax(fe_stmt_ctx *x, const ast_factor *f)
{
    fe_operand arg;
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

/* `f32(x)`, `bf16(x)`, `f64(x)`: x (its ops in its own dtype, the
 * argument's, over all its indices: nothing is summed inside a call) and
 * then one elementwise op that reads it and stores it in the cast's dtype
 * (codegen rounds to nearest even for bf16, as every bf16 store does).  A
 * cast to the argument's own dtype is the argument. */
bool fe_lower_cast(fe_stmt_ctx *x, const ast_factor *f, fe_operand *out)
{
    fe_operand arg;
    ir_dtype stmt = x->e.dtype;
    x->e.dtype = f->u.call.arg_dtype;
    bool ok = call_argument(x, f, &arg);
    x->e.dtype = stmt;
    if (!ok) {
        x->ok = false;
        return false;
    }
    *out = arg;
    if (f->u.call.arg_dtype == f->u.call.cast_dtype)
        return true;
    x->e.dtype = f->u.call.cast_dtype;
    out->v = ir_ewt_emit(&x->e, ir_ewt_leaf(x->e.arena, arg.v, arg.labels, arg.n), arg.labels, arg.n,
                         f->loc);
    x->e.dtype = stmt;
    return true;
}

/* softmax(x, S) = exp(x - max_S x) * (1 / sum_S exp(x - max_S x)): the
 * stable form, as four ops (max, exp of the difference, sum, scale), so
 * each reduction is sharded by the einsum rules (a sharded S gives partial
 * maxima and sums, reduced by AllReduce).  The scale multiplies by the
 * reciprocal of the sum, which the loop over S computes once (LICM), where
 * a division per element took a tenth of a softmax row's time
 * (docs/performance.md, section 7); it rounds twice, so the result is
 * within 1.5 ulp of the exact quotient instead of 0.5. */
bool fe_lower_softmax(fe_stmt_ctx *x, const ast_factor *f, fe_operand *out)
{
    fe_operand arg;
    if (!call_argument(x, f, &arg)) {
        x->ok = false;
        return false;
    }
    ir_arena *a = x->e.arena;
    bool keep[IR_MAX_RANK];
    for (int i = 0; i < arg.n; i++)
        keep[i] = arg.labels[i] != f->u.call.reduce_dim;
    fe_operand m = reduce_einsum(x, &arg, keep, IR_RED_MAX, 1.0, f->loc);
    ir_ewt *d = ir_ewt_bin(a, IR_EW_SUB, ir_ewt_leaf(a, arg.v, arg.labels, arg.n),
                           ir_ewt_leaf(a, m.v, m.labels, m.n));
    fe_operand e = arg;
    e.v = ir_ewt_emit(&x->e, ir_ewt_call(a, IR_FN_EXP, d), arg.labels, arg.n, f->loc);
    fe_operand z = reduce_einsum(x, &e, keep, IR_RED_SUM, 1.0, f->loc);
    *out = arg;
    ir_ewt *inv = ir_ewt_bin(a, IR_EW_DIV, ir_ewt_const(a, 1.0), ir_ewt_leaf(a, z.v, z.labels, z.n));
    out->v = ir_ewt_emit(&x->e, ir_ewt_bin(a, IR_EW_MUL, ir_ewt_leaf(a, e.v, e.labels, e.n), inv),
                         arg.labels, arg.n, f->loc);
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

ir_value *fe_lower_grad(fe_checker *c, const ast_stmt *s)
{
    const ast_factor *f = fe_grad_call(s);
    const fe_tensor *lt = fe_symtab_get(&c->tensors, arg_name(f, 0));
    const fe_tensor *wt = fe_symtab_get(&c->tensors, arg_name(f, 1));
    return ir_grad_append(c->m, s->u.assign.lhs.name.s, lt->value, wt->value, s->loc)->result;
}
