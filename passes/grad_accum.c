/*
 * grad_accum.c - adjoints: adding contributions into them, writing one out.
 *
 * Every adjoint rule ends by adding a contribution to an operand's adjoint;
 * contributions to one value are added (a value read twice gets the sum).
 * An adjoint that is a known constant stays a number until an op needs a
 * tensor (ad_materialise), so the constants that a loss or a sum pass
 * back cost no ops.  The rules in grad_einsum.c, grad_ew.c and
 * grad_loop.c share this one accumulator.
 */
#include <string.h>

#include "grad_internal.h"

/* The tree of an adjoint as a leaf over `labels` (the adjoint's value's
 * positions are indexed by them), or its constant. */
ir_ewt *ad_adj_tree(ad_ctx *g, const ad_adjoint *a, const int *labels, int n)
{
    if (a->is_const)
        return cnst(g, a->c);
    return ir_ewt_leaf(g->e.arena, a->v, labels, n);
}

/* An einsum of `nops` operands (labels per operand) into `res`. */
ir_value *ad_emit_einsum(ad_ctx *g, ir_value *const *vals,
                         const int (*labels)[IR_MAX_RANK], const int *nlab, int nops,
                         const int *res, int nres, double scale, ir_reduce red)
{
    ir_value *out = ir_ewt_value(&g->e, res, nres, g->loc);
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
void ad_contribute(ad_ctx *g, ir_value *v, ir_ewt *t, const int *labels)
{
    if (!t)
        return;
    ad_adjoint *a = &g->adj[v->id];
    int n = v->type.rank;
    const int *dims = v->type.dims;
    if (t->kind == IR_EW_CONST && !a->v) {
        a->c = (a->is_const ? a->c : 0.0) + t->value;
        a->is_const = true;
        return;
    }
    ad_name_for(g, v);
    ir_ewt *sum = t;
    if (t->kind != IR_EW_CONST && memcmp(labels, dims, (size_t)n * sizeof(int)) != 0)
        /* A use that relabels v's dims (K[B, S, D] of K[B, T, D]): the
         * contribution over the use's labels, read by position as v's. */
        sum = ir_ewt_leaf(g->e.arena, ir_ewt_emit(&g->e, t, labels, n, g->loc), dims, n);
    if (a->v)
        sum = add(g, ir_ewt_leaf(g->e.arena, a->v, dims, n), sum);
    else if (a->is_const)
        sum = add(g, cnst(g, a->c), sum);
    /* A lone value over v's dims (an einsum's result) is the adjoint as it
     * is, if it has v's dtype: the adjoint of a cast's operand is the
     * cotangent cast back to the operand's dtype, an op of its own.  A
     * value of lower rank (a scalar broadcast over v, when v's dims are
     * all summed away downstream) is written out over v's dims: taken as
     * it is, its missing dims read as whatever followed in the arrays. */
    bool value = sum->kind == IR_EW_OPERAND && sum->nlabels == n && sum->v->type.rank == n &&
                 memcmp(sum->labels, dims, (size_t)n * sizeof(int)) == 0 &&
                 memcmp(sum->v->type.dims, dims, (size_t)n * sizeof(int)) == 0 &&
                 sum->v->type.dtype == v->type.dtype;
    a->v = value ? sum->v : ir_ewt_emit(&g->e, sum, dims, n, g->loc);
    a->is_const = false;
}

/* Sums tree `t` over `from` down to `to` (a subset), as a contribution to
 * operand value `v` indexed by `to` at its use. */
void ad_contribute_reduced(ad_ctx *g, ir_value *v, ir_ewt *t, const int *from, int nfrom,
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
        ad_contribute(g, v, t, to);
        return;
    }
    ad_name_for(g, v);
    ir_value *full = ir_ewt_emit(&g->e, t, from, nfrom, g->loc);
    int nl[1] = {nfrom};
    int lab[1][IR_MAX_RANK];
    memcpy(lab[0], from, (size_t)nfrom * sizeof(int));
    ir_value *r = ad_emit_einsum(g, &full, (const int(*)[IR_MAX_RANK])lab, nl, 1, to, nto,
                                 1.0, IR_RED_SUM);
    ad_contribute(g, v, ir_ewt_leaf(g->e.arena, r, to, nto), to);
}

/* The adjoint of `v` as a value of v's shape (a constant is written out as
 * `where(v == v, c, c)`, which needs no other operand and is c even where
 * v is NaN). */
ir_value *ad_materialise(ad_ctx *g, ir_value *v)
{
    ad_adjoint *a = &g->adj[v->id];
    if (a->v)
        return a->v;
    ad_name_for(g, v);
    double c = a->is_const ? a->c : 0.0;
    int n = v->type.rank;
    ir_value *w = ad_val(g, v);
    ir_ewt *x = ir_ewt_leaf(g->e.arena, w, v->type.dims, n);
    ir_ewt *t = ir_ewt_select(g->e.arena, bin(g, IR_EW_EQ, x, ir_ewt_leaf(g->e.arena, w, v->type.dims, n)),
                              cnst(g, c), cnst(g, c));
    a->v = ir_ewt_emit(&g->e, t, v->type.dims, n, g->loc);
    a->is_const = false;
    return a->v;
}
