/*
 * rowgroup.c - row groups: a reduction and the elementwise ops around it
 * run one row at a time.
 *
 * A softmax over the last dim is four ops: a max reduction, exp of the
 * difference, a sum reduction and a divide; RMSNorm is a square, a mean, a
 * scale.  Emitted one after the other, each op streams the whole array
 * through memory, so a softmax reads or writes it six times where a copy
 * moves it twice.  In a row group the ops share their outer loops over the
 * reduction's result dims (the "rows") and each runs its own inner loops
 * over one row, in program order: the row they pass between them stays in
 * the first-level cache, and an intermediate that no op outside the group
 * reads gets a buffer of one row instead of the whole array (its row
 * positions index 0).  This is the row-at-a-time softmax of seed 003's
 * attention in the way FlashAttention-style kernels write it: max, exp-sum
 * and scale passes over a row held on chip.
 *
 * Membership.  The rows are the result labels of a unary sum, max or min
 * einsum whose operand starts with those labels in that order (a reduction
 * over trailing dims).  The group extends backward and forward from it
 * over consecutive emitted ops of the same loop body that are such
 * reductions or elementwise ops, as long as every tensor the op touches
 * (its result, and each buffer its expression reads, through producers
 * fused into it) either starts with the row labels, in order and with the
 * same per-device sizes, or has none of them (a broadcast such as RMSNorm's
 * gain).  Every op then reads only row r of group members' results while
 * computing row r, so running the ops row by row computes each element
 * exactly as running them one after the other did (same operations, same
 * order within a row).  A group has at least two ops.  Nothing is grouped
 * in a program whose elementwise nests are outlined (run.c): those are
 * programs of hundreds of thousands of statements.
 *
 * A value is row-local when a member computes it, it is not an output, an
 * update or the buffer of an in-place op, and its last read is inside the
 * group.
 */
#include <stdlib.h>
#include <string.h>

#include "cg_internal.h"

/* Whether a tensor of type `t` read or written through `labels` fits the
 * group: the row labels are its first nrow positions, in order and with
 * the rows' per-device sizes, or none of its labels is a row. */
static bool tensor_fits(const ir_module *m, const ir_type *t, const int *labels, const int *rows,
                        int nrow, const int64_t *rowsize)
{
    int hits = 0;
    for (int j = 0; j < t->rank; j++)
        for (int q = 0; q < nrow; q++)
            hits += labels[j] == rows[q];
    if (hits == 0)
        return true;
    if (hits != nrow || t->rank < nrow)
        return false;
    for (int q = 0; q < nrow; q++)
        if (labels[q] != rows[q] || ir_local_size(m, t, q) != rowsize[q])
            return false;
    return true;
}

/* Whether every buffer elementwise `op`'s tree loads, through producers
 * fused into it, fits; `map[l]` is the group's label of op's label l. */
static bool tree_fits(const ir_module *m, const cg_plan *p, const ir_op *op, const int *map,
                      const int *rows, int nrow, const int64_t *rowsize)
{
    for (int i = 0; i < op->u.ew.nnodes; i++) {
        const ir_ew_node *e = &op->u.ew.nodes[i];
        if (e->kind != IR_EW_OPERAND)
            continue;
        const ir_value *v = op->operands[e->operand];
        const int *labels = op->u.ew.labels[e->operand];
        int mapped[IR_MAX_RANK];
        for (int j = 0; j < v->type.rank; j++)
            mapped[j] = map[labels[j]];
        int def = p->def_index[v->id];
        if (def >= 0 && p->fused_into[def] >= 0) {
            const ir_op *prod = p->ops[def];
            int *pmap = cg_calloc((size_t)m->ndims, sizeof *pmap);
            for (int l = 0; l < m->ndims; l++)
                pmap[l] = -1;
            for (int j = 0; j < v->type.rank; j++)
                pmap[prod->u.ew.result_labels[j]] = mapped[j];
            bool ok = tree_fits(m, p, prod, pmap, rows, nrow, rowsize);
            free(pmap);
            if (!ok)
                return false;
            continue;
        }
        if (!tensor_fits(m, &v->type, mapped, rows, nrow, rowsize))
            return false;
    }
    return true;
}

/* A unary sum, max or min einsum over trailing dims of its operand. */
static bool is_row_reduction(const ir_op *op)
{
    if (op->kind != IR_OP_EINSUM || op->noperands != 1 || op->u.einsum.gather ||
        op->u.einsum.scatter || op->u.einsum.reduce == IR_RED_ARGMAX ||
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

/* Whether emitted op `i` can be a member of a group with these rows. */
static bool member_fits(const ir_module *m, const cg_plan *p, int i, const int *rows, int nrow,
                        const int64_t *rowsize)
{
    const ir_op *op = p->ops[i];
    if (op->kind == IR_OP_EINSUM) {
        return is_row_reduction(op) &&
               tensor_fits(m, &op->result->type, op->u.einsum.result_labels, rows, nrow,
                           rowsize) &&
               tensor_fits(m, &op->operands[0]->type, op->u.einsum.labels[0], rows, nrow,
                           rowsize) &&
               op->u.einsum.result_labels[0] == rows[0];
    }
    if (op->kind != IR_OP_ELEMENTWISE || op->result->type.rank < nrow)
        return false;
    const int *res = op->u.ew.result_labels;
    for (int q = 0; q < nrow; q++)
        if (res[q] != rows[q] || ir_local_size(m, &op->result->type, q) != rowsize[q])
            return false;
    int *map = cg_calloc((size_t)m->ndims, sizeof *map);
    for (int l = 0; l < m->ndims; l++)
        map[l] = l;
    bool ok = tree_fits(m, p, op, map, rows, nrow, rowsize);
    free(map);
    return ok;
}

/* The previous / next emitted op of the same loop body as op `i`, or -1. */
static int emitted_step(const cg_plan *p, int i, int dir)
{
    for (int j = i + dir; j >= 0 && j < p->nops; j += dir) {
        if (p->fused_into[j] >= 0)
            continue;
        return p->ops[j]->loop == p->ops[i]->loop ? j : -1;
    }
    return -1;
}

void cg_plan_row_groups(cg_plan *p, const ir_module *m)
{
    p->row_group = cg_calloc((size_t)p->nops, sizeof(int));
    p->row_local = cg_calloc((size_t)p->nvalues, sizeof(bool));
    for (int i = 0; i < p->nops; i++)
        p->row_group[i] = -1;
    if (p->outline_elementwise)
        return;
    for (int i = 0; i < p->nops; i++) {
        const ir_op *r = p->ops[i];
        if (p->fused_into[i] >= 0 || p->row_group[i] >= 0 || !is_row_reduction(r))
            continue;
        int nrow = r->result->type.rank, rows[IR_MAX_RANK];
        int64_t rowsize[IR_MAX_RANK];
        for (int q = 0; q < nrow; q++) {
            rows[q] = r->u.einsum.result_labels[q];
            rowsize[q] = ir_local_size(m, &r->result->type, q);
        }
        if (!member_fits(m, p, i, rows, nrow, rowsize))
            continue;
        int first = i, last = i, n = 1;
        for (int j = emitted_step(p, i, -1); j >= 0 && p->row_group[j] < 0 &&
                                             member_fits(m, p, j, rows, nrow, rowsize);
             j = emitted_step(p, j, -1), n++)
            first = j;
        for (int j = emitted_step(p, i, 1); j >= 0 && member_fits(m, p, j, rows, nrow, rowsize);
             j = emitted_step(p, j, 1), n++)
            last = j;
        if (n < 2)
            continue;
        for (int j = first; j <= last; j++)
            if (p->fused_into[j] < 0)
                p->row_group[j] = first;
    }
    /* Row-local values (see the essay above). */
    bool *reused = cg_calloc((size_t)p->nvalues, sizeof(bool));
    for (int i = 0; i < p->nops; i++)
        if (p->reuse[i] >= 0)
            reused[p->reuse[i]] = true;
    for (int i = 0; i < p->nops; i++) {
        int g = p->row_group[i];
        if (g < 0)
            continue;
        int last = cg_row_group_end(p, g);
        int v = p->ops[i]->result->id;
        p->row_local[v] = p->out_index[v] < 0 && p->update_slot[v] < 0 && !reused[v] &&
                          p->reuse[i] < 0 && p->last_use[v] >= i && p->last_use[v] <= last &&
                          p->row_group[p->last_use[v]] == g;
    }
    free(reused);
}

int cg_row_group_end(const cg_plan *p, int first)
{
    int last = first;
    for (int j = first + 1; j < p->nops; j++) {
        if (p->row_group[j] == first)
            last = j;
        else if (p->fused_into[j] < 0)
            break;
    }
    return last;
}
