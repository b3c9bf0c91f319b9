/*
 * rowgroup.c - row groups: a reduction and the elementwise ops around it
 * that run one row at a time.  Codegen runs them so (codegen/rowgroup.c,
 * run.c) and the cost model prices them so (passes/costmodel/
 * cost_rowgroup.c); the decision is here, a pure function of the IR and
 * the fusion decision (fusion.c), so that both apply the same rule.
 *
 * Membership.  The rows are the result labels of a unary sum, max or min
 * einsum whose operand starts with those labels in that order (a reduction
 * over trailing dims).  The group extends backward and forward from it
 * over consecutive emitted ops (ops not fused into another) of the same
 * loop body that are such reductions or elementwise ops, as long as every
 * tensor the op touches (its result, and each buffer its expression reads,
 * through producers fused into it) either starts with the row labels, in
 * order and with the same per-device sizes, or has none of them (a
 * broadcast such as RMSNorm's gain).  Every op then reads only row r of
 * group members' results while computing row r, so running the ops row by
 * row computes each element exactly as running them one after the other
 * did (same operations, same order within a row).  A group has at least
 * two ops.  Nothing is grouped in a program of more than
 * IR_OUTLINE_EW_NODES elementwise expression nodes, whose nests codegen
 * outlines (programs of hundreds of thousands of statements).
 *
 * Row-local values.  A member's result is row-local when it is not a
 * program output, something reads it, and every op that reads it runs in
 * the group (a reader fused into another op runs where that op does): it
 * never needs more than the current row, so codegen gives it a buffer of
 * one row and it never goes to memory.
 */
#include <stdlib.h>

#include "ir.h"

/* What one membership test needs. */
typedef struct rg_ctx {
    const ir_module *m;
    ir_op *const *ops;
    int nops;
    const int *fused_into; /* per op: the op whose loop computes it, or -1 */
    const int *def_index;  /* per value id: its defining op's index, or -1 */
    int nrow;              /* row positions */
    int rows[IR_MAX_RANK]; /* their labels */
    int64_t rowsize[IR_MAX_RANK]; /* their per-device sizes */
} rg_ctx;

/* Whether a tensor of type `t` read or written through `labels` fits the
 * group: the row labels are its first nrow positions, in order and with
 * the rows' per-device sizes, or none of its labels is a row. */
static bool tensor_fits(const rg_ctx *g, const ir_type *t, const int *labels)
{
    int hits = 0;
    for (int j = 0; j < t->rank; j++)
        for (int q = 0; q < g->nrow; q++)
            hits += labels[j] == g->rows[q];
    if (hits == 0)
        return true;
    if (hits != g->nrow || t->rank < g->nrow)
        return false;
    for (int q = 0; q < g->nrow; q++)
        if (labels[q] != g->rows[q] || ir_local_size(g->m, t, q) != g->rowsize[q])
            return false;
    return true;
}

/* Whether every buffer elementwise `op`'s tree loads, through producers
 * fused into it, fits; `map[l]` is the group's label of op's label l. */
static bool tree_fits(const rg_ctx *g, const ir_op *op, const int *map)
{
    const ir_module *m = g->m;
    for (int i = 0; i < op->u.ew.nnodes; i++) {
        const ir_ew_node *e = &op->u.ew.nodes[i];
        if (e->kind != IR_EW_OPERAND)
            continue;
        const ir_value *v = op->operands[e->operand];
        const int *labels = op->u.ew.labels[e->operand];
        int mapped[IR_MAX_RANK];
        for (int j = 0; j < v->type.rank; j++)
            mapped[j] = map[labels[j]];
        int def = g->def_index[v->id];
        if (def >= 0 && g->fused_into[def] >= 0) {
            const ir_op *prod = g->ops[def];
            /* An unrolled einsum reads its operands off the row's labels
             * (its contracted ones): its consumer stays out of groups. */
            if (prod->kind != IR_OP_ELEMENTWISE)
                return false;
            int *pmap = malloc((size_t)m->ndims * sizeof *pmap);
            if (!pmap)
                return false; /* out of memory: no group, which is always correct */
            for (int l = 0; l < m->ndims; l++)
                pmap[l] = -1;
            for (int j = 0; j < v->type.rank; j++)
                pmap[prod->u.ew.result_labels[j]] = mapped[j];
            bool ok = tree_fits(g, prod, pmap);
            free(pmap);
            if (!ok)
                return false;
            continue;
        }
        if (!tensor_fits(g, &v->type, mapped))
            return false;
    }
    return true;
}

bool ir_is_row_reduction(const ir_op *op)
{
    if (op->kind != IR_OP_EINSUM || op->noperands != 1 || op->u.einsum.gather ||
        op->u.einsum.scatter || op->u.einsum.reduce == IR_RED_ARGMAX || !op->result ||
        op->result->type.rank < 1 || op->result->type.dtype == IR_I32)
        return false;
    const ir_value *a = op->operands[0];
    if (a->type.rank <= op->result->type.rank)
        return false;
    for (int q = 0; q < op->result->type.rank; q++)
        if (op->u.einsum.labels[0][q] != op->u.einsum.result_labels[q])
            return false;
    return true;
}

/* Whether emitted op `i` can be a member of a group with g's rows. */
static bool member_fits(const rg_ctx *g, int i)
{
    const ir_module *m = g->m;
    const ir_op *op = g->ops[i];
    if (op->kind == IR_OP_EINSUM) {
        return ir_is_row_reduction(op) &&
               tensor_fits(g, &op->result->type, op->u.einsum.result_labels) &&
               tensor_fits(g, &op->operands[0]->type, op->u.einsum.labels[0]) &&
               op->u.einsum.result_labels[0] == g->rows[0];
    }
    if (op->kind != IR_OP_ELEMENTWISE || op->result->type.rank < g->nrow)
        return false;
    const int *res = op->u.ew.result_labels;
    for (int q = 0; q < g->nrow; q++)
        if (res[q] != g->rows[q] || ir_local_size(m, &op->result->type, q) != g->rowsize[q])
            return false;
    int *map = malloc((size_t)m->ndims * sizeof *map);
    if (!map)
        return false;
    for (int l = 0; l < m->ndims; l++)
        map[l] = l;
    bool ok = tree_fits(g, op, map);
    free(map);
    return ok;
}

/* The previous / next emitted op of the same loop body as op `i`, or -1. */
static int emitted_step(const rg_ctx *g, int i, int dir)
{
    for (int j = i + dir; j >= 0 && j < g->nops; j += dir) {
        if (g->fused_into[j] >= 0)
            continue;
        return g->ops[j]->loop == g->ops[i]->loop ? j : -1;
    }
    return -1;
}

/* Fills row_group[] (see ir_row_groups) from the membership rule. */
static void find_groups(rg_ctx *g, int *row_group)
{
    for (int i = 0; i < g->nops; i++) {
        const ir_op *r = g->ops[i];
        if (g->fused_into[i] >= 0 || row_group[i] >= 0 || !ir_is_row_reduction(r))
            continue;
        g->nrow = r->result->type.rank;
        for (int q = 0; q < g->nrow; q++) {
            g->rows[q] = r->u.einsum.result_labels[q];
            g->rowsize[q] = ir_local_size(g->m, &r->result->type, q);
        }
        if (!member_fits(g, i))
            continue;
        int first = i, last = i, n = 1;
        for (int j = emitted_step(g, i, -1); j >= 0 && row_group[j] < 0 && member_fits(g, j);
             j = emitted_step(g, j, -1), n++)
            first = j;
        for (int j = emitted_step(g, i, 1); j >= 0 && member_fits(g, j);
             j = emitted_step(g, j, 1), n++)
            last = j;
        if (n < 2)
            continue;
        for (int j = first; j <= last; j++)
            if (g->fused_into[j] < 0)
                row_group[j] = first;
    }
}

/* Row-local values (see the essay above). */
static void find_row_local(const rg_ctx *g, const int *row_group, bool *row_local)
{
    const ir_module *m = g->m;
    /* group_of_reader[v]: the group every reader of v runs in so far, -1
     * none yet, -2 a reader outside any single group. */
    int *grp = malloc((size_t)m->nvalues * sizeof *grp);
    if (!grp)
        return; /* out of memory: nothing row-local, which is always correct */
    for (int v = 0; v < m->nvalues; v++)
        grp[v] = -1;
    for (int i = 0; i < g->nops; i++) {
        const ir_op *op = g->ops[i];
        int e = g->fused_into[i] >= 0 ? g->fused_into[i] : i;
        int at = row_group[e] >= 0 ? row_group[e] : -2;
        for (int k = 0; k < op->noperands; k++) {
            int v = op->operands[k]->id;
            grp[v] = grp[v] == -1 || grp[v] == at ? at : -2;
        }
    }
    for (int i = 0; i < g->nops; i++) {
        const ir_value *v = g->ops[i]->result;
        if (row_group[i] >= 0 && grp[v->id] == row_group[i] && !ir_value_is_output(m, v))
            row_local[v->id] = true;
    }
    free(grp);
}

int ir_row_groups(const ir_module *m, ir_op *const *ops, int nops, const int *fused_into,
                  int *row_group, bool *row_local)
{
    for (int i = 0; i < nops; i++)
        row_group[i] = -1;
    for (int v = 0; v < m->nvalues; v++)
        row_local[v] = false;
    int64_t ewnodes = 0;
    for (int i = 0; i < nops; i++) {
        if (!ops[i]->result || ops[i]->result->id < 0 || ops[i]->result->id >= m->nvalues)
            return 0; /* malformed (the verifier reports it): no groups */
        if (ops[i]->kind == IR_OP_ELEMENTWISE)
            ewnodes += ops[i]->u.ew.nnodes;
    }
    if (ewnodes > IR_OUTLINE_EW_NODES)
        return 0;
    int *def_index = malloc((size_t)(m->nvalues > 0 ? m->nvalues : 1) * sizeof *def_index);
    if (!def_index)
        return -1;
    for (int v = 0; v < m->nvalues; v++)
        def_index[v] = -1;
    for (int i = 0; i < nops; i++)
        def_index[ops[i]->result->id] = i;
    rg_ctx g = {.m = m, .ops = ops, .nops = nops, .fused_into = fused_into,
                .def_index = def_index};
    find_groups(&g, row_group);
    find_row_local(&g, row_group, row_local);
    free(def_index);
    return 0;
}

int ir_row_group_end(const int *row_group, const int *fused_into, int nops, int first)
{
    int last = first;
    for (int j = first + 1; j < nops; j++) {
        if (row_group[j] == first)
            last = j;
        else if (fused_into[j] < 0)
            break;
    }
    return last;
}
