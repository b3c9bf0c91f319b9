/*
 * ewtree.c - building and emitting elementwise expression trees (see
 * ir_ewtree.h for why trees are split).
 */
#include <stdio.h>
#include <string.h>

#include "ir_ewtree.h"

ir_ewt *ir_ewt_leaf(ir_arena *a, ir_value *v, const int *labels, int n)
{
    ir_ewt *t = ir_alloc(a, sizeof *t);
    t->kind = IR_EW_OPERAND;
    t->v = v;
    t->nlabels = n;
    if (n > 0) /* a scalar has no labels (and may pass none) */
        memcpy(t->labels, labels, (size_t)n * sizeof *labels);
    t->nleaves = 1;
    return t;
}

ir_ewt *ir_ewt_const(ir_arena *a, double value)
{
    ir_ewt *t = ir_alloc(a, sizeof *t);
    t->kind = IR_EW_CONST;
    t->value = value;
    return t;
}

ir_ewt *ir_ewt_bin(ir_arena *a, ir_ew_kind kind, ir_ewt *x, ir_ewt *y)
{
    ir_ewt *t = ir_alloc(a, sizeof *t);
    t->kind = kind;
    t->kid[0] = x;
    t->kid[1] = y;
    t->nleaves = x->nleaves + y->nleaves;
    return t;
}

ir_ewt *ir_ewt_call(ir_arena *a, ir_func fn, ir_ewt *x)
{
    ir_ewt *t = ir_alloc(a, sizeof *t);
    t->kind = IR_EW_CALL;
    t->fn = fn;
    t->kid[0] = x;
    t->nleaves = x->nleaves;
    return t;
}

ir_ewt *ir_ewt_select(ir_arena *a, ir_ewt *cond, ir_ewt *x, ir_ewt *y)
{
    ir_ewt *t = ir_alloc(a, sizeof *t);
    t->kind = IR_EW_SELECT;
    t->kid[0] = cond;
    t->kid[1] = x;
    t->kid[2] = y;
    t->nleaves = cond->nleaves + x->nleaves + y->nleaves;
    return t;
}

ir_ewt *ir_ewt_index(ir_arena *a, int dim)
{
    ir_ewt *t = ir_alloc(a, sizeof *t);
    t->kind = IR_EW_INDEX;
    t->nlabels = 1;
    t->labels[0] = dim;
    return t;
}

/* Adds the labels under `t` to out[0..*n) (IR_MAX_RANK slots stored). */
static void collect_labels(const ir_ewt *t, int *out, int *n)
{
    if (!t)
        return;
    if (t->kind == IR_EW_OPERAND || t->kind == IR_EW_INDEX) {
        for (int i = 0; i < t->nlabels; i++) {
            int k = 0, lim = *n < IR_MAX_RANK ? *n : IR_MAX_RANK;
            while (k < lim && out[k] != t->labels[i])
                k++;
            if (k < lim)
                continue;
            if (*n < IR_MAX_RANK)
                out[*n] = t->labels[i];
            (*n)++;
        }
        return;
    }
    for (int k = 0; k < 3; k++)
        collect_labels(t->kid[k], out, n);
}

int ir_ewt_labels(const ir_ewt *t, int *out)
{
    int n = 0;
    collect_labels(t, out, &n);
    return n;
}

ir_value *ir_ewt_value(const ir_ewt_out *e, const int *labels, int n, uint32_t vloc)
{
    ir_type ty;
    memset(&ty, 0, sizeof ty);
    ty.dtype = e->dtype;
    ty.rank = n;
    memcpy(ty.dims, labels, (size_t)n * sizeof *labels);
    ty.sh = ir_sharding_replicated();
    return ir_value_new(e->m, e->tensor, IR_VAL_OP, &ty, vloc);
}

/* Operands and nodes of the op being emitted. */
typedef struct emit_state {
    ir_op *op;          /* the op (operands filled as leaves are met) */
    ir_ew_node *nodes;  /* node array (arena), one per tree node */
    int nnodes;         /* nodes written */
} emit_state;

/* Writes `t`'s nodes in post-order; returns the index of its root node. */
static int emit_nodes(emit_state *st, const ir_ewt *t)
{
    ir_ew_node nd;
    memset(&nd, 0, sizeof nd);
    nd.kind = t->kind;
    switch (t->kind) {
    case IR_EW_OPERAND: {
        ir_op *op = st->op;
        int k = 0;
        /* The same value under the same labels is one operand. */
        while (k < op->noperands &&
               !(op->operands[k] == t->v &&
                 memcmp(op->u.ew.labels[k], t->labels, (size_t)t->nlabels * sizeof(int)) == 0))
            k++;
        if (k == op->noperands) {
            op->operands[k] = t->v;
            memcpy(op->u.ew.labels[k], t->labels, (size_t)t->nlabels * sizeof(int));
            op->noperands++;
        }
        nd.operand = k;
        break;
    }
    case IR_EW_CONST:
        nd.value = t->value;
        break;
    case IR_EW_INDEX:
        nd.dim = t->labels[0];
        break;
    default: {
        int *slot[3] = {&nd.a, &nd.b, &nd.c};
        nd.fn = t->fn;
        for (int k = 0; k < ir_ew_arity(t->kind); k++)
            *slot[k] = emit_nodes(st, t->kid[k]);
        break;
    }
    }
    st->nodes[st->nnodes] = nd;
    return st->nnodes++;
}

static int count_nodes(const ir_ewt *t)
{
    return t ? 1 + count_nodes(t->kid[0]) + count_nodes(t->kid[1]) + count_nodes(t->kid[2]) : 0;
}

/* Turns child *slot into a leaf holding its own elementwise op's result. */
static void materialize(const ir_ewt_out *e, ir_ewt **slot, uint32_t vloc)
{
    int labels[IR_MAX_RANK];
    int n = ir_ewt_labels(*slot, labels);
    ir_value *v = ir_ewt_emit(e, *slot, labels, n, vloc);
    *slot = ir_ewt_leaf(e->arena, v, labels, n);
}

static int sum_leaves(const ir_ewt *t)
{
    int n = 0;
    for (int k = 0; k < 3; k++)
        n += t->kid[k] ? t->kid[k]->nleaves : 0;
    return n;
}

/* Splits subtrees off until every node has at most IR_MAX_OPERANDS leaves.
 * A comparison yields a truth value, which no op can hold, so it is never
 * split off itself: its sides are. */
static void limit_leaves(const ir_ewt_out *e, ir_ewt *t, uint32_t vloc)
{
    if (!t || t->nleaves <= IR_MAX_OPERANDS)
        return;
    for (int k = 0; k < 3; k++)
        limit_leaves(e, t->kid[k], vloc);
    t->nleaves = sum_leaves(t);
    /* Every child has <= IR_MAX_OPERANDS leaves now; replacing the largest
     * by one leaf (or, for a comparison, its larger side) shrinks the sum
     * until it fits: three children of one leaf each, or a comparison of
     * two, are at most 4. */
    while (t->nleaves > IR_MAX_OPERANDS) {
        ir_ewt **big = NULL;
        for (int k = 0; k < 3; k++)
            if (t->kid[k] && t->kid[k]->nleaves > 1 && (!big || t->kid[k]->nleaves > (*big)->nleaves))
                big = &t->kid[k];
        if (ir_ew_is_compare((*big)->kind)) {
            ir_ewt *cmp = *big;
            materialize(e, cmp->kid[0]->nleaves >= cmp->kid[1]->nleaves ? &cmp->kid[0] : &cmp->kid[1],
                        vloc);
            cmp->nleaves = sum_leaves(cmp);
        } else {
            materialize(e, big, vloc);
        }
        t->nleaves = sum_leaves(t);
    }
}

/* Gives every leaf of `t` indexed by `from` (by position) the labels `to`
 * instead; other leaves keep theirs. */
static void relabel(ir_ewt *t, const int *from, const int *to, int n)
{
    if (!t)
        return;
    if (t->kind == IR_EW_OPERAND && t->nlabels == n &&
        memcmp(t->labels, from, (size_t)n * sizeof *from) == 0)
        memcpy(t->labels, to, (size_t)n * sizeof *to);
    for (int k = 0; k < 3; k++)
        relabel(t->kid[k], from, to, n);
}

/* A value whose dims repeat (`param Vs[L, F, F]`) indexed by its own dims
 * names one loop index twice, which would make the op a diagonal; the
 * positions must be distinct labels (docs/ir.md: a label may be any dim of
 * the position's size).  labels[] with its second and later uses of a dim
 * D replaced by D', D'', ... (a dim of D's size added to the module once,
 * named so no source dim can be) goes to out[]; the leaves of `t` indexed
 * by labels[] by position are relabeled the same way.  False if no dim
 * repeats. */
static bool distinct_labels(const ir_ewt_out *e, ir_ewt *t, const int *labels, int n, int *out)
{
    bool repeats = false;
    for (int r = 0; r < n; r++) {
        int seen = 0;
        for (int q = 0; q < r; q++)
            seen += labels[q] == labels[r];
        out[r] = labels[r];
        if (!seen)
            continue;
        repeats = true;
        const ir_dimdef *d = &e->m->dims[labels[r]];
        char name[64];
        int len = snprintf(name, sizeof name, "%s", d->name);
        for (int k = 0; k < seen && len + 1 < (int)sizeof name; k++)
            name[len++] = '\'';
        name[len] = 0;
        out[r] = ir_dim_find(e->m, name, (size_t)len);
        if (out[r] < 0)
            out[r] = ir_dim_add(e->m, name, d->size, d->loc);
    }
    if (repeats)
        relabel(t, labels, out, n);
    return repeats;
}

ir_value *ir_ewt_emit(const ir_ewt_out *e, ir_ewt *t, const int *labels, int n, uint32_t vloc)
{
    int own[IR_MAX_RANK];
    /* Distinct labels before any split: a subtree split off is made over
     * the union of its leaves' labels, which a repeat would shrink. */
    const int *rl = distinct_labels(e, t, labels, n, own) ? own : labels;
    limit_leaves(e, t, vloc);
    ir_value *res = ir_ewt_value(e, labels, n, vloc);
    ir_op *op = ir_op_new(e->m, IR_OP_ELEMENTWISE, 0, NULL, res, e->loc);
    memcpy(op->u.ew.result_labels, rl, (size_t)n * sizeof *labels);
    emit_state st = {.op = op};
    st.nodes = ir_alloc(&e->m->arena, (size_t)count_nodes(t) * sizeof *st.nodes);
    op->u.ew.root = emit_nodes(&st, t);
    op->u.ew.nodes = st.nodes;
    op->u.ew.nnodes = st.nnodes;
    ir_op_append(e->m, op);
    return res;
}
