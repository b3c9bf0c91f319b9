/*
 * select_gather.c - the select-gather pass: a masked sum that selects rows
 * at computed positions becomes a gather of those rows.
 *
 * A program that reads the rows of a table at positions it computes, as a
 * decode step reads its rotary tables at the window's positions,
 *
 *   Cos[T, G] = sum(where(S == Pos[] + T, CosT[S, G], 0), S)
 *
 * is lowered by the frontend to an elementwise op over [T, G, S] and a sum
 * over S: T x S x G work, and the whole table read, for T rows of it.  The
 * same values are the gather of rows e = Pos[] + T of the table:
 *
 *   Cos.pos[T] = Pos[] + T                                  (i32)
 *   Cos[T, G]  = gather(t,sg->tg) zero-outside Cos.pos[T], CosT[S, G]
 *
 * which reads T rows.  The rewrite applies to a unary sum einsum (scale 1)
 * over one dim S of an elementwise op whose expression is exactly
 * `where(S == e, X[S, ...], 0)` (or `e == S`), where
 *  - X is an operand of the op's result dtype with S as its first dim
 *    (the gather's table: rows along its first dim) and only there;
 *  - e is an integer expression (ir_ew_integer: i32 operands, index
 *    values, integer constants under +, -, *, neg, maximum, minimum, so
 *    it is computed exactly) that does not involve S;
 *  - the sum's result is e's dims, then X's other dims in X's order, and
 *    e varies along none of X's dims (else the result would be a diagonal
 *    X[e(g), g], which a gather is not).
 * Anything else is left as written (--debug-pass says why for a masked
 * sum over an equality that is not taken).
 *
 * Semantics, kept exactly: for each element of the result the masked sum
 * adds one row of X, the one at position e, to zeros, which is that row;
 * at a position outside [0, |S|) it adds only zeros.  The gather is made
 * with gather_zero_outside, which gives a zero row there too, rather than
 * the error of a gather the source writes.  e is materialised as an i32
 * tensor over the result's leading dims (computed in f64 and clamped to
 * i32's range, which keeps an out-of-range position out of range).  The
 * masked sum compares in f32 for f32 and bf16 programs, which is exact
 * for positions below 2^24; past that its own comparison rounds, and the
 * gather's exact one is the intended value.  A row holding NaN or inf is
 * read only where it is selected, in both forms.
 *
 * Sharding: the gather's rule (ir.h) covers a table sharded along S: a
 * masked local lookup on every device and partial sums, as the masked sum
 * gave, planned by propagate like any gather.  The pass runs after
 * autodiff and before propagate: the backward ops autodiff derived from
 * the masked sum (the gradient of X, if X is a param) stay as derived,
 * exact and unchanged; only the forward selection (or any other masked sum
 * of this form) becomes a gather.
 */
#include <string.h>

#include "pass.h"

/* A candidate found in one einsum: the parts the rewrite needs. */
typedef struct sel_match {
    ir_op *sum;   /* the unary sum einsum */
    ir_op *mask;  /* the elementwise op it sums */
    int S;        /* the summed dim id */
    int e;        /* node of mask's tree holding the position */
    int x;        /* mask's operand index of the table X */
    int npre;     /* result labels before X's other dims: the positions' dims */
} sel_match;

/* Whether `l` is among labels[0..n). */
static bool has_label(const int *labels, int n, int l)
{
    for (int j = 0; j < n; j++)
        if (labels[j] == l)
            return true;
    return false;
}

/* Whether the tree below node n of `op` reads only labels in pre[0..npre):
 * index values and operands' labels. */
static bool tree_within(const ir_op *op, int n, const int *pre, int npre, int depth)
{
    if (n < 0 || n >= op->u.ew.nnodes || depth <= 0)
        return false;
    const ir_ew_node *e = &op->u.ew.nodes[n];
    if (e->kind == IR_EW_INDEX)
        return has_label(pre, npre, e->dim);
    if (e->kind == IR_EW_OPERAND) {
        const ir_value *v = op->operands[e->operand];
        for (int j = 0; j < v->type.rank; j++)
            if (!has_label(pre, npre, op->u.ew.labels[e->operand][j]))
                return false;
        return true;
    }
    const int kids[3] = {e->a, e->b, e->c};
    for (int k = 0; k < ir_ew_arity(e->kind); k++)
        if (!tree_within(op, kids[k], pre, npre, depth - 1))
            return false;
    return true;
}

/* Whether einsum `sum` is a masked sum of the pass's form; fills *mt.
 * *why: for a sum over `where(S == ..., ..., ...)` not taken, the reason
 * (for --debug-pass), else NULL. */
static bool match(const ir_module *m, ir_op *sum, sel_match *mt, const char **why)
{
    *why = NULL;
    if (sum->kind != IR_OP_EINSUM || sum->noperands != 1 || sum->u.einsum.gather ||
        sum->u.einsum.scatter || sum->u.einsum.reduce != IR_RED_SUM)
        return false;
    ir_value *w = sum->operands[0];
    ir_op *mask = w->def;
    if (!mask || mask->kind != IR_OP_ELEMENTWISE || mask->result != w)
        return false;
    const ir_ew_node *nodes = mask->u.ew.nodes;
    const ir_ew_node *root = &nodes[mask->u.ew.root];
    if (root->kind != IR_EW_SELECT || nodes[root->a].kind != IR_EW_EQ)
        return false;
    const ir_ew_node *cond = &nodes[root->a];
    /* The summed dim: the one label of w the result drops. */
    int rank = w->type.rank, S = -1, nsummed = 0;
    const int *rl = sum->u.einsum.result_labels;
    int rr = sum->result->type.rank;
    for (int j = 0; j < rank; j++) {
        int l = mask->u.ew.result_labels[j];
        if (sum->u.einsum.labels[0][j] != l)
            return false; /* relabelled between the two ops: not this form */
        if (!has_label(rl, rr, l))
            S = l, nsummed++;
    }
    if (nsummed != 1)
        return false;
    int e;
    if (nodes[cond->a].kind == IR_EW_INDEX && nodes[cond->a].dim == S)
        e = cond->b;
    else if (nodes[cond->b].kind == IR_EW_INDEX && nodes[cond->b].dim == S)
        e = cond->a;
    else
        return false;
    *why = "the position is not an integer expression (i32 values, index values, integer "
           "constants under +, -, *, maximum, minimum)";
    if (!ir_ew_integer(m, mask, e))
        return false;
    *why = "the else-branch is not 0";
    if (nodes[root->c].kind != IR_EW_CONST || nodes[root->c].value != 0)
        return false;
    *why = "the selected value is not one operand";
    if (nodes[root->b].kind != IR_EW_OPERAND)
        return false;
    int x = nodes[root->b].operand;
    const ir_value *X = mask->operands[x];
    const int *xl = mask->u.ew.labels[x];
    *why = "the table's dtype is not the sum's";
    if (X->type.dtype != w->type.dtype || sum->result->type.dtype != w->type.dtype ||
        ir_dtype_integer(X->type.dtype))
        return false;
    *why = "the summed dim is not the table's first dim, or not its only one";
    if (X->type.rank < 1 || xl[0] != S || has_label(xl + 1, X->type.rank - 1, S))
        return false;
    *why = "the result is not the positions' dims followed by the table's other dims in order";
    int nother = X->type.rank - 1, npre = rr - nother;
    if (npre < 0 || sum->u.einsum.scale != 1.0)
        return false;
    for (int j = 0; j < nother; j++)
        if (rl[npre + j] != xl[1 + j])
            return false;
    *why = "the position depends on the summed dim or on the table's other dims";
    if (!tree_within(mask, e, rl, npre, IR_EW_INTEGER_DEPTH))
        return false;
    *why = "the summed dim is larger than an i32 position reaches";
    if (m->dims[S].size > INT32_MAX)
        return false;
    *why = NULL;
    *mt = (sel_match){.sum = sum, .mask = mask, .S = S, .e = e, .x = x, .npre = npre};
    return true;
}

/* The state of one copy of a subtree into a new elementwise op. */
typedef struct tree_copy {
    const ir_op *src;
    ir_op *dst;
    int map[IR_MAX_OPERANDS]; /* src's operand index -> dst's, -1 until added */
    int *memo;                /* src node -> dst node, -1 until copied (shared nodes once) */
    ir_ew_node *nodes;        /* dst's nodes, room for all of src's */
    int nnodes;
} tree_copy;

/* Copies the subtree of t->src below node n into t->dst (its operands
 * added as they are read); returns the new node's index. */
static int copy_tree(tree_copy *t, int n)
{
    if (t->memo[n] >= 0)
        return t->memo[n];
    ir_ew_node e = t->src->u.ew.nodes[n];
    const int kids[3] = {e.a, e.b, e.c};
    int copied[3] = {0, 0, 0};
    for (int k = 0; k < ir_ew_arity(e.kind); k++)
        copied[k] = copy_tree(t, kids[k]);
    e.a = copied[0], e.b = copied[1], e.c = copied[2];
    if (e.kind == IR_EW_OPERAND) {
        if (t->map[e.operand] < 0) {
            int k = t->dst->noperands++;
            t->map[e.operand] = k;
            t->dst->operands[k] = t->src->operands[e.operand];
            memcpy(t->dst->u.ew.labels[k], t->src->u.ew.labels[e.operand], sizeof t->dst->u.ew.labels[k]);
        }
        e.operand = t->map[e.operand];
    }
    t->nodes[t->nnodes] = e;
    return t->memo[n] = t->nnodes++;
}

/* Replaces the match's sum by the positions' elementwise op and the gather. */
static void rewrite(pass_ctx *ctx, ir_module *m, const sel_match *mt)
{
    ir_op *sum = mt->sum, *mask = mt->mask;
    const int *rl = sum->u.einsum.result_labels;
    const ir_value *X = mask->operands[mt->x];
    char name[256];
    snprintf(name, sizeof name, "%s.pos", sum->result->tensor);

    /* The positions: e over the result's leading dims, i32. */
    ir_type pt = {.dtype = IR_I32, .rank = mt->npre, .sh = ir_sharding_replicated()};
    for (int j = 0; j < mt->npre; j++)
        pt.dims[j] = rl[j];
    ir_value *pos = ir_value_new(m, name, IR_VAL_OP, &pt, sum->loc);
    ir_op *p = ir_op_new(m, IR_OP_ELEMENTWISE, 0, NULL, pos, sum->loc);
    int nsrc = mask->u.ew.nnodes;
    tree_copy t = {.src = mask, .dst = p, .memo = ir_alloc(&m->arena, (size_t)nsrc * sizeof(int)),
                   .nodes = ir_alloc(&m->arena, (size_t)nsrc * sizeof(ir_ew_node))};
    for (int k = 0; k < IR_MAX_OPERANDS; k++)
        t.map[k] = -1;
    for (int k = 0; k < nsrc; k++)
        t.memo[k] = -1;
    p->u.ew.root = copy_tree(&t, mt->e);
    p->u.ew.nodes = t.nodes;
    p->u.ew.nnodes = t.nnodes;
    memcpy(p->u.ew.result_labels, rl, (size_t)mt->npre * sizeof *rl);

    /* The gather of rows pos of X, zero outside, into the sum's type. */
    ir_value *r = ir_value_new(m, sum->result->tensor, IR_VAL_OP, &sum->result->type, sum->loc);
    r->has_constraint = sum->result->has_constraint;
    r->constraint = sum->result->constraint;
    ir_value *opds[2] = {pos, mask->operands[mt->x]};
    ir_op *g = ir_op_new(m, IR_OP_EINSUM, 2, opds, r, sum->loc);
    memcpy(g->u.einsum.labels[0], rl, (size_t)mt->npre * sizeof *rl);
    memcpy(g->u.einsum.labels[1], mask->u.ew.labels[mt->x], (size_t)X->type.rank * sizeof(int));
    memcpy(g->u.einsum.result_labels, rl, (size_t)sum->result->type.rank * sizeof *rl);
    g->u.einsum.scale = 1.0;
    g->u.einsum.reduce = IR_RED_SUM;
    g->u.einsum.gather = true;
    g->u.einsum.gather_label = mt->S;
    g->u.einsum.gather_zero_outside = true;
    p->remat = g->remat = sum->remat;

    ir_op_insert_before(m, sum, p);
    ir_op_insert_before(m, sum, g);
    const char *S = m->dims[mt->S].name;
    ir_op_set_reason(m, p, sum, -1, "for %s: the positions the masked sum over %s selects",
                     sum->result->tensor, S);
    ir_op_set_reason(m, g, sum, -1, "for %s: the masked sum over %s as a gather of the rows it "
                     "selects of %s (select-gather)", sum->result->tensor, S, X->tensor);
    ir_replace_uses(m, sum->result, r, NULL);
    ir_op_remove(m, sum);
    if (mask->result->nuses == 0 && !ir_value_is_output(m, mask->result))
        ir_op_remove(m, mask);
    if (ctx->log)
        fprintf(ctx->log, "select-gather: %s = sum over %s of where(%s == ..., %s, 0) -> gather of "
                "rows of %s\n", sum->result->tensor, S, S, X->tensor, X->tensor);
}

int pass_select_gather(pass_ctx *ctx, ir_module *m)
{
    for (ir_op *op = m->first; op;) {
        ir_op *next = op->next;
        sel_match mt;
        const char *why;
        if (match(m, op, &mt, &why))
            rewrite(ctx, m, &mt);
        else if (why && ctx->log)
            fprintf(ctx->log, "select-gather: %s left as a masked sum: %s\n", op->result->tensor, why);
        op = next;
    }
    return 0;
}
