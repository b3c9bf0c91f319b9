/*
 * pos_bound.c - which contractions may stop at each row's position: the
 * causal mask of a decode step over a KV cache (docs/codegen.md,
 * "Contractions bounded by a position").
 *
 * A decode program with a position per row writes
 *
 *   Sc[B, N, S] = Q[B, N, H] * KC[B, S, N, H]
 *   P[B, N, S]  = softmax(where(S <= At[B], Sc[B, N, S], -inf), S)
 *   Y[B, N, H]  = P[B, N, S] * VC[B, S, N, H]
 *
 * Positions s > At[b] of Sc are never read (the where replaces them), and
 * P is exactly 0 there (exp(-inf - max) = 0), so both contractions may
 * stop at s = At[b] for row b: the tail is skipped rather than computed and
 * masked, as vLLM's paged attention and llama.cpp read only the filled part
 * of the cache.  The mask in the program is what makes this legal, so this
 * file proves it from the IR rather than recognising the example:
 *
 * - "tail facts": value v is 0 (or -inf) at every element whose index along
 *   position ps exceeds pos[its index along pb].  where(S <= P[B], x, c)
 *   gives c's fact; exp(-inf tail) a zero tail; x - y, x + y with y not
 *   varying along S keep a -inf tail; x * y, x / y with y not varying along
 *   S keep a zero tail (y assumed finite: softmax's max and 1/sum are, when
 *   the scores are).
 * - a contraction over S with an operand of zero tail (K bound), or an
 *   einsum whose result every reader reads only under that mask's true
 *   branch (N or M bound: the result's tail is never read).
 *
 * The other operand's tail (stale cache entries) is assumed finite: a
 * NaN there was multiplied by 0 before and is now skipped (documented in
 * docs/generation.md).
 */
#include <math.h>

#include "ir.h"
#include "ir_fusion.h"

enum { TAIL_NONE, TAIL_ZERO, TAIL_NEGINF };

/* Bound on the producers followed through (softmax is 4 ops deep). */
#define POS_BOUND_DEPTH 12

/* Node visits one search may make: expression trees may share nodes and
 * values may share producers, so a search without a budget could revisit
 * them exponentially often; past it the answer is "no bound". */
#define POS_BOUND_BUDGET 100000

/* What the search carries: the module, the position vector found so far
 * (every mask on the path must use the same one), the visits left. */
typedef struct pb_ctx {
    const ir_module *m;
    const ir_value *pos;
    long budget;
} pb_ctx;

static int value_tail(pb_ctx *c, const ir_value *v, int ps, int pb, int depth);

/* Position of `label` in labels[0..rank-1], or -1. */
static int find(const int *labels, int rank, int label)
{
    for (int j = 0; j < rank; j++)
        if (labels[j] == label)
            return j;
    return -1;
}

/* Whether node n of elementwise `op` is the mask `S <= P[B]` (or
 * `P[B] >= S`) for op labels ls (S) and lb (B), P an i32 input, or
 * `S <= P[]` with a scalar P (every row at the same position, as static
 * batching runs); records P in c->pos. */
static bool is_mask(pb_ctx *c, const ir_op *op, int n, int ls, int lb)
{
    const ir_ew_node *e = &op->u.ew.nodes[n];
    int idx, opd;
    if (e->kind == IR_EW_LE)
        idx = e->a, opd = e->b;
    else if (e->kind == IR_EW_GE)
        idx = e->b, opd = e->a;
    else
        return false;
    const ir_ew_node *ei = &op->u.ew.nodes[idx], *eo = &op->u.ew.nodes[opd];
    if (ei->kind != IR_EW_INDEX || ei->dim != ls || eo->kind != IR_EW_OPERAND)
        return false;
    const ir_value *p = op->operands[eo->operand];
    /* An input: its buffer lives through the run (codegen passes it to
     * the einsum, which the IR does not list as a reader). */
    if (p->kind != IR_VAL_INPUT || p->type.dtype != IR_I32 || p->type.rank > 1 ||
        (p->type.rank == 1 && op->u.ew.labels[eo->operand][0] != lb))
        return false;
    if (c->pos && c->pos != p)
        return false;
    c->pos = p;
    return true;
}

/* Whether the subtree at node n reads nothing that varies along op label
 * ls (no operand with that label, no index along it). */
static bool free_of(pb_ctx *c, const ir_op *op, int n, int ls, int depth)
{
    const ir_ew_node *e = &op->u.ew.nodes[n];
    if (depth > 64 || --c->budget < 0)
        return false;
    if (e->kind == IR_EW_INDEX)
        return e->dim != ls;
    if (e->kind == IR_EW_OPERAND)
        return find(op->u.ew.labels[e->operand], op->operands[e->operand]->type.rank, ls) < 0;
    int ar = ir_ew_arity(e->kind);
    int ch[3] = {e->a, e->b, e->c};
    for (int k = 0; k < ar; k++)
        if (!free_of(c, op, ch[k], ls, depth + 1))
            return false;
    return true;
}

static int node_tail(pb_ctx *c, const ir_op *op, int n, int ls, int lb, int depth);

/* Binary node n (x op y) keeps the tail `want` of x when y does not vary
 * along S, and for + and * also the tail of y when x does not: a -inf tail
 * through + and -, a 0 tail through * and /. */
static int tail_through(pb_ctx *c, const ir_op *op, int n, int ls, int lb, int depth, int want)
{
    const ir_ew_node *e = &op->u.ew.nodes[n];
    bool commutes = e->kind == IR_EW_ADD || e->kind == IR_EW_MUL;
    if (free_of(c, op, e->b, ls, 0) && node_tail(c, op, e->a, ls, lb, depth + 1) == want)
        return want;
    if (commutes && free_of(c, op, e->a, ls, 0) && node_tail(c, op, e->b, ls, lb, depth + 1) == want)
        return want;
    return TAIL_NONE;
}

/* Tail fact of node n of elementwise `op` along op labels ls, lb. */
static int node_tail(pb_ctx *c, const ir_op *op, int n, int ls, int lb, int depth)
{
    const ir_ew_node *e = &op->u.ew.nodes[n];
    if (depth > 64 || --c->budget < 0)
        return TAIL_NONE;
    switch (e->kind) {
    case IR_EW_CONST:
        return e->value == 0.0 ? TAIL_ZERO : isinf(e->value) && e->value < 0 ? TAIL_NEGINF
                                                                             : TAIL_NONE;
    case IR_EW_OPERAND: {
        const ir_value *w = op->operands[e->operand];
        const int *lab = op->u.ew.labels[e->operand];
        int ps = find(lab, w->type.rank, ls), pb = find(lab, w->type.rank, lb);
        return ps >= 0 && pb >= 0 ? value_tail(c, w, ps, pb, depth + 1) : TAIL_NONE;
    }
    case IR_EW_SELECT: {
        if (is_mask(c, op, e->a, ls, lb))
            return node_tail(c, op, e->c, ls, lb, depth + 1);
        int x = node_tail(c, op, e->b, ls, lb, depth + 1);
        return x == node_tail(c, op, e->c, ls, lb, depth + 1) ? x : TAIL_NONE;
    }
    case IR_EW_CALL:
        return e->fn == IR_FN_EXP && node_tail(c, op, e->a, ls, lb, depth + 1) == TAIL_NEGINF
                   ? TAIL_ZERO
                   : TAIL_NONE;
    case IR_EW_ADD:
    case IR_EW_SUB:
        return tail_through(c, op, n, ls, lb, depth, TAIL_NEGINF);
    case IR_EW_MUL:
    case IR_EW_DIV:
        return tail_through(c, op, n, ls, lb, depth, TAIL_ZERO);
    default:
        return TAIL_NONE;
    }
}

/* Tail fact of value v along its positions ps (S) and pb (B). */
static int value_tail(pb_ctx *c, const ir_value *v, int ps, int pb, int depth)
{
    const ir_op *op = v->def;
    if (!op || op->kind != IR_OP_ELEMENTWISE || depth > POS_BOUND_DEPTH)
        return TAIL_NONE;
    const int *rl = op->u.ew.result_labels;
    return node_tail(c, op, op->u.ew.root, rl[ps], rl[pb], depth);
}

/* Whether every load of value v in node n's subtree of elementwise `op`
 * sits in the true branch of the mask (guarded) along v's positions. */
static bool guarded_reads(pb_ctx *c, const ir_op *op, int n, const ir_value *v, int ps, int pb,
                          bool guarded, int depth)
{
    const ir_ew_node *e = &op->u.ew.nodes[n];
    if (depth > 64 || --c->budget < 0)
        return false;
    if (e->kind == IR_EW_OPERAND)
        return op->operands[e->operand] != v || guarded;
    if (e->kind == IR_EW_SELECT) {
        const int *lab = NULL;
        for (int k = 0; k < op->noperands && !lab; k++)
            if (op->operands[k] == v)
                lab = op->u.ew.labels[k];
        if (lab && is_mask(c, op, e->a, lab[ps], lab[pb]))
            return guarded_reads(c, op, e->a, v, ps, pb, guarded, depth + 1) &&
                   guarded_reads(c, op, e->b, v, ps, pb, true, depth + 1) &&
                   guarded_reads(c, op, e->c, v, ps, pb, guarded, depth + 1);
    }
    int ar = ir_ew_arity(e->kind);
    int ch[3] = {e->a, e->b, e->c};
    for (int k = 0; k < ar; k++)
        if (!guarded_reads(c, op, ch[k], v, ps, pb, guarded, depth + 1))
            return false;
    return true;
}

/* Whether only masked reads see v's tail: not an output, every reader an
 * elementwise op that reads it under the mask (one labelling of v per
 * reader). */
static bool tail_unread(pb_ctx *c, const ir_value *v, int ps, int pb)
{
    if (ir_value_is_output(c->m, v) || v->nuses == 0)
        return false;
    for (int u = 0; u < v->nuses; u++) {
        const ir_op *r = v->uses[u].op;
        if (r->kind != IR_OP_ELEMENTWISE)
            return false;
        int k = v->uses[u].operand;
        for (int j = 0; j < r->noperands; j++)
            if (r->operands[j] == v)
                for (int q = 0; q < v->type.rank; q++)
                    if (r->u.ew.labels[j][q] != r->u.ew.labels[k][q])
                        return false;
        if (!guarded_reads(c, r, r->u.ew.root, v, ps, pb, false, 0))
            return false;
    }
    return true;
}

/* Whether label ls is whole on every device in every tensor of `op`, and
 * lb sharded as pos's one dim in the result, so that the runtime's local
 * row b and local position s are pos's local row and the global s. */
static bool layout_fits(const ir_module *m, const ir_op *op, const ir_value *pos, int ls, int lb)
{
    const ir_value *vals[3] = {op->operands[0], op->operands[1], op->result};
    const int *labs[3] = {op->u.einsum.labels[0], op->u.einsum.labels[1],
                          op->u.einsum.result_labels};
    for (int k = 0; k < 3; k++) {
        const ir_type *t = &vals[k]->type;
        int js = find(labs[k], t->rank, ls), jb = find(labs[k], t->rank, lb);
        if (js >= 0 && ir_sharding_dim_axes(&t->sh, js) != 0)
            return false;
        if (k == 2 && pos->type.rank == 1 &&
            (jb < 0 || ir_sharding_dim_axes(&t->sh, jb) !=
                                     ir_sharding_dim_axes(&pos->type.sh, 0) ||
                       ir_local_size(m, t, jb) != ir_local_size(m, &pos->type, 0)))
            return false;
    }
    return true;
}

bool ir_einsum_pos_bound(const ir_module *m, const ir_op *op, ir_pos_bound *out)
{
    if (m->no_pos_bound || op->kind != IR_OP_EINSUM || op->noperands != 2 || op->u.einsum.gather ||
        op->u.einsum.scatter || op->u.einsum.reduce != IR_RED_SUM)
        return false;
    const ir_value *r = op->result;
    const int *rl = op->u.einsum.result_labels;
    for (int k = 0; k < 2; k++) {
        const ir_value *v = op->operands[k], *o = op->operands[1 - k];
        const int *lab = op->u.einsum.labels[k], *olab = op->u.einsum.labels[1 - k];
        for (int ps = 0; ps < v->type.rank; ps++)
            for (int pb = 0; pb < v->type.rank; pb++) {
                int ls = lab[ps], lb = lab[pb];
                /* B must be a batch label: in both operands and the result. */
                if (pb == ps || find(olab, o->type.rank, lb) < 0 || find(rl, r->type.rank, lb) < 0)
                    continue;
                pb_ctx c = {m, NULL, POS_BOUND_BUDGET};
                bool ok;
                if (find(rl, r->type.rank, ls) < 0) /* contracted: this operand's tail is 0 */
                    ok = find(olab, o->type.rank, ls) >= 0 &&
                         value_tail(&c, v, ps, pb, 0) == TAIL_ZERO;
                else /* kept: S in this operand and the result, whose tail nobody reads */
                    ok = find(olab, o->type.rank, ls) < 0 &&
                         tail_unread(&c, r, find(rl, r->type.rank, ls), find(rl, r->type.rank, lb));
                if (ok && c.pos && layout_fits(m, op, c.pos, ls, lb)) {
                    *out = (ir_pos_bound){c.pos, c.pos->type.rank ? lb : -1, ls};
                    return true;
                }
            }
    }
    return false;
}
