/*
 * rowgroup.c - row groups: a reduction and the elementwise ops around it
 * run one row at a time.
 *
 * A softmax over the last dim is four ops: a max reduction, exp of the
 * difference, a sum reduction and a scale by its reciprocal; RMSNorm is a
 * square, a mean, a scale.  Emitted one after the other, each op streams
 * the whole array through memory, so a softmax reads or writes it six times
 * where a copy moves it twice.  In a row group the ops share their outer
 * loops over the reduction's result dims (the "rows") and each runs its own
 * inner loops over one row, in program order: the row they pass between
 * them stays in the first-level cache, and an intermediate that no op
 * outside the group reads gets a buffer of one row instead of the whole
 * array (its row positions index 0).  This is the row-at-a-time softmax of
 * seed 003's attention in the way FlashAttention-style kernels write it:
 * max, exp-sum and scale passes over a row held on chip.
 *
 * Which ops form a group and which values are row-local is decided in the
 * IR layer (ir/rowgroup.c), because the cost model prices a group by the
 * same rule.  What is codegen's own is how a group writes memory.
 *
 * Streamed results.  A member's result that the group does not read again
 * and that is large (m->stream_min_bytes per device or more,
 * IR_STREAM_MIN_BYTES unless einc --stream-min says otherwise) would be
 * written with ordinary stores, each of which first reads its line into
 * the cache (read-for-ownership): three bytes move for every two a copy
 * needs.  Such a result is computed into a one-row stage instead (it stays
 * in the first-level cache) and each row is then copied out with
 * non-temporal stores, which write whole lines without reading them
 * (run.c, emit_stream_row).  Its rows must be whole multiples of 64 bytes,
 * so that every row starts a line of a 64-byte aligned buffer.
 */
#include <stdlib.h>
#include <string.h>

#include "cg_internal.h"

void cg_plan_row_groups(cg_plan *p, const ir_module *m)
{
    p->row_group = cg_calloc((size_t)p->nops, sizeof(int));
    p->row_local = cg_calloc((size_t)p->nvalues, sizeof(bool));
    p->row_stream = cg_calloc((size_t)p->nvalues, sizeof(bool));
    if (ir_row_groups(m, p->ops, p->nops, p->fused_into, p->row_group, p->row_local) < 0) {
        fputs("einc: out of memory\n", stderr);
        exit(1);
    }
    /* in_group[v]: some op of v's own row group reads v. */
    bool *in_group = cg_calloc((size_t)p->nvalues, sizeof(bool));
    for (int i = 0; i < p->nops; i++) {
        int e = p->fused_into[i] >= 0 ? p->fused_into[i] : i;
        for (int k = 0; k < p->ops[i]->noperands; k++) {
            int v = p->ops[i]->operands[k]->id, d = p->def_index[v];
            if (d >= 0 && p->row_group[d] >= 0 && p->row_group[d] == p->row_group[e])
                in_group[v] = true;
        }
    }
    for (int i = 0; i < p->nops; i++) {
        const ir_op *op = p->ops[i];
        int g = p->row_group[i];
        if (g < 0 || op->kind != IR_OP_ELEMENTWISE || p->row_local[op->result->id] ||
            in_group[op->result->id])
            continue;
        /* The rows are the leading positions of the group's reduction. */
        const ir_op *lead = NULL;
        for (int j = g; j <= cg_row_group_end(p, g) && !lead; j++)
            if (p->row_group[j] == g && p->ops[j]->kind == IR_OP_EINSUM)
                lead = p->ops[j];
        int64_t bytes = ir_local_bytes(m, &op->result->type);
        p->row_stream[op->result->id] =
            lead && bytes >= m->stream_min_bytes &&
            cg_row_bytes(m, &op->result->type, lead->result->type.rank) % 64 == 0;
    }
    free(in_group);
}

int64_t cg_row_bytes(const ir_module *m, const ir_type *t, int nrow)
{
    int64_t row = ir_local_bytes(m, t);
    for (int q = 0; q < nrow; q++)
        row /= ir_local_size(m, t, q);
    return row;
}

int cg_row_group_end(const cg_plan *p, int first)
{
    return ir_row_group_end(p->row_group, p->fused_into, p->nops, first);
}
