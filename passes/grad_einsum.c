/*
 * grad_einsum.c - the adjoint rules of einsums: contractions, reductions,
 * gathers.
 *
 * dA of C = s * einsum(A, B) is the einsum of dC and B over A's labels
 * (JAX's transpose rule), so the backward ops are einsums that propagate
 * shards with seed 001's rules and seed 000's collectives; a max/min
 * reduction sends dC to its arguments, ties sharing; a gather's table gets
 * a scatter-add (grad.c's comment has the formulas).
 */
#include <string.h>

#include "grad_internal.h"

/* A gather's table gets dC's rows added at the rows its indices name: a
 * scatter-add einsum (ir.h), which contracts the indices' dims, so a batch
 * sharded on X gives the table's gradient as partial sums {U_X}, as the
 * weights' gradients of DP. */
static void gather_adjoint(ad_ctx *g, const ir_op *op, const ad_adjoint *dc)
{
    ir_value *ids = ad_val(g, op->operands[0]), *table = op->operands[1];
    if (!g->relevant[table->id])
        return;
    const int *res = op->u.einsum.result_labels;
    int nres = op->result->type.rank;
    ir_value *rows = dc->v;
    if (!rows) { /* a constant adjoint, written out over the result */
        ir_ewt *r = ir_ewt_leaf(g->e.arena, ad_val(g, op->result), res, nres);
        ad_name_for(g, op->result);
        rows = ir_ewt_emit(&g->e,
                           ir_ewt_select(g->e.arena, bin(g, IR_EW_EQ, r, r), cnst(g, dc->c),
                                        cnst(g, dc->c)),
                           res, nres, g->loc);
    }
    ad_name_for(g, table);
    const int *lt = op->u.einsum.labels[1];
    ir_value *out = ir_ewt_value(&g->e, lt, table->type.rank, g->loc);
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
    ad_contribute(g, table, ir_ewt_leaf(g->e.arena, out, lt, table->type.rank), lt);
}

/* The einsum rules (grad.c's comment). */
void ad_rule_einsum(ad_ctx *g, ir_op *op, const ad_adjoint *dc)
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
        ir_ewt *dct = ad_adj_tree(g, dc, res, nres);
        if (op->u.einsum.reduce == IR_RED_SUM) {
            ad_contribute(g, a, mul(g, cnst(g, s), dct), la);
            return;
        }
        /* max / min: to the arguments of the extreme, ties share it. */
        ir_ewt *av = ir_ewt_leaf(g->e.arena, ad_val(g, a), la, na);
        ir_ewt *cv = ir_ewt_leaf(g->e.arena, ad_val(g, op->result), res, nres);
        ad_name_for(g, a);
        ir_ewt *hit = ir_ewt_select(g->e.arena, bin(g, IR_EW_EQ, av, cv), cnst(g, 1.0), cnst(g, 0.0));
        ir_value *mask = ir_ewt_emit(&g->e, hit, la, na, g->loc);
        int nl[1] = {na};
        int lab[1][IR_MAX_RANK];
        memcpy(lab[0], la, (size_t)na * sizeof(int));
        ir_value *count = ad_emit_einsum(g, &mask, (const int(*)[IR_MAX_RANK])lab, nl, 1, res,
                                         nres, 1.0, IR_RED_SUM);
        ir_ewt *share = bin(g, IR_EW_DIV, mul(g, cnst(g, s), ad_adj_tree(g, dc, res, nres)),
                            ir_ewt_leaf(g->e.arena, count, res, nres));
        ad_contribute(g, a, mul(g, ir_ewt_leaf(g->e.arena, mask, la, na), share), la);
        return;
    }
    for (int k = 0; k < 2; k++) {
        ir_value *a = op->operands[k], *b = op->operands[1 - k];
        if (!g->relevant[a->id])
            continue;
        b = ad_val(g, b);
        const int *la = op->u.einsum.labels[k], *lb = op->u.einsum.labels[1 - k];
        int na = a->type.rank, nb = b->type.rank;
        /* A's labels that dC or B index: the einsum's result; the others
         * (A's own reduction) are broadcast afterwards. */
        int kept[IR_MAX_RANK], nk = 0;
        for (int i = 0; i < na; i++)
            if (has(res, nres, la[i]) || has(lb, nb, la[i]))
                kept[nk++] = la[i];
        ir_ewt *part;
        if (dc->is_const) {
            /* s c * (sum of B over its labels A lacks), broadcast. */
            int lab[1][IR_MAX_RANK], nl[1] = {nb};
            memcpy(lab[0], lb, (size_t)nb * sizeof(int));
            int keepb[IR_MAX_RANK], nkb = 0;
            for (int i = 0; i < nb; i++)
                if (has(la, na, lb[i]))
                    keepb[nkb++] = lb[i];
            ad_name_for(g, a);
            ir_value *r = nkb == nb ? b
                                    : ad_emit_einsum(g, &b, (const int(*)[IR_MAX_RANK])lab, nl,
                                                     1, keepb, nkb, 1.0, IR_RED_SUM);
            part = mul(g, cnst(g, s * dc->c), ir_ewt_leaf(g->e.arena, r, keepb, nkb));
        } else {
            ir_value *vals[2] = {dc->v, b};
            int lab[2][IR_MAX_RANK], nl[2] = {nres, nb};
            memcpy(lab[0], res, (size_t)nres * sizeof(int));
            memcpy(lab[1], lb, (size_t)nb * sizeof(int));
            ad_name_for(g, a);
            ir_value *r = ad_emit_einsum(g, vals, (const int(*)[IR_MAX_RANK])lab, nl, 2, kept,
                                         nk, s, IR_RED_SUM);
            part = ir_ewt_leaf(g->e.arena, r, kept, nk);
        }
        ad_contribute(g, a, part, la);
    }
}
