/*
 * regather.c - a gathered weight is kept from the forward pass for the
 * backward pass, or gathered again: a memory/time choice of the cost model.
 *
 * Under FSDP (seed 000, "fully sharded data parallelism") the forward pass
 * gathers each weight before its matmul (AllGather_X of Win), and the
 * backward pass needs the whole weight again (dAct = dOut * Wout).  Keeping
 * the forward's gathered copy costs memory: the whole weight stays live
 * from the forward matmul to the backward one.  Gathering it again costs a
 * second AllGather, which the cost model times; ZeRO-3 does so to keep the
 * per-device memory at the shards.  This pass keeps every gathered weight
 * while the program's per-device peak memory (cost_memory_peak) fits the
 * profile's HBM, and otherwise gathers again, largest weights first (of
 * equal ones the earliest, whose copy would be kept longest), until
 * it fits or nothing is left to gather.  Each decision is the op's reason,
 * so --dump-ir and --explain say which was chosen and what the other way
 * would cost.
 *
 * Only a resharding op whose operand is a param is repeated (the second
 * copy reads the param's shards, which the step does not change before its
 * update), and only for readers in the backward pass.
 */
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "pass.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* The first op after `op` in phase `phase` that reads `v` (defined by op
 * or earlier), or NULL.  The use-list says whether there is one, and which
 * when only one op reads v in that phase; otherwise the op list, walked
 * from op, says which comes first. */
static ir_op *first_reader(ir_op *op, const ir_value *v, ir_phase phase)
{
    ir_op *only = NULL;
    int n = 0;
    for (int k = 0; k < v->nuses; k++)
        if (v->uses[k].op->phase == phase && v->uses[k].op != only) {
            only = v->uses[k].op;
            n++;
        }
    if (n <= 1)
        return only;
    for (ir_op *o = op->next; o; o = o->next)
        for (int k = 0; o->phase == phase && k < o->noperands; k++)
            if (o->operands[k] == v)
                return o;
    return NULL;
}

/* A gathered weight read by both passes. */
typedef struct candidate {
    ir_op *gather;   /* the forward's resharding op of the param */
    ir_op *reader;   /* its first reader in the backward pass */
    double bytes;    /* per-device bytes of the gathered weight */
    double seconds;  /* the resharding op's estimated time */
    int index;       /* the gather's position in the program */
} candidate;

/* Largest first; of equal ones the earliest, which is kept longest. */
static int by_bytes(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return x->index - y->index;
}

/* Repeats c->gather before its first backward reader; the backward
 * pass's reads then take the new copy. */
static void gather_again(ir_module *m, const candidate *c, double peak, const cost_hw *hw)
{
    ir_op *g = c->gather;
    ir_value *again = ir_value_new(m, g->result->tensor, IR_VAL_OP, &g->result->type, g->loc);
    ir_op *op = ir_op_new(m, g->kind, g->noperands, g->operands, again, g->loc);
    op->u = g->u;
    ir_op_insert_before(m, c->reader, op);
    ir_replace_uses(m, g->result, again, op);
    char name[64], reader[64];
    ir_value_name(g->result, name, sizeof name);
    ir_value_name(c->reader->result, reader, sizeof reader);
    int k = 0;
    while (k < c->reader->noperands && c->reader->operands[k] != again)
        k++;
    ir_op_set_reason(m, op, c->reader, k < c->reader->noperands ? k : -1,
                     "for %s in the backward pass: gathered again, as keeping %s from the "
                     "forward pass needs %.3g GiB per device at the peak, over %s's %.3g GiB of "
                     "HBM; this gather costs %.3g us",
                     reader, name, peak / GIB, hw->name, hw->hbm_bytes / GIB, c->seconds * 1e6);
}

int pass_regather(pass_ctx *ctx, ir_module *m)
{
    const cost_hw *hw = ctx ? ctx->hw : NULL;
    if (!hw)
        return 0; /* no capacity to decide by: keep */
    int n = 0;
    for (ir_op *op = m->first; op; op = op->next)
        n++;
    candidate *cs = calloc((size_t)n + 1, sizeof *cs);
    if (!cs) {
        diag_error(ctx->diag, DIAG_NOLOC, "regather: out of memory");
        return 1;
    }
    int nc = 0, index = 0;
    for (ir_op *op = m->first; op; op = op->next, index++) {
        if (!ir_op_is_reshard(op->kind) || op->noperands != 1 || op->loop ||
            op->phase != IR_PHASE_FORWARD || op->operands[0]->kind != IR_VAL_PARAM ||
            !first_reader(op, op->result, IR_PHASE_FORWARD))
            continue;
        ir_op *reader = first_reader(op, op->result, IR_PHASE_BACKWARD);
        if (!reader)
            continue;
        ir_cost c;
        cost_op_estimate(m, hw, op, &c);
        cs[nc++] = (candidate){op, reader, (double)ir_local_bytes(m, &op->result->type), c.time,
                               index};
    }
    qsort(cs, (size_t)nc, sizeof *cs, by_bytes);
    double peak = cost_memory_peak(m).peak;
    int again = 0;
    for (int i = 0; i < nc; i++) {
        char name[64], reader[64];
        ir_value_name(cs[i].gather->result, name, sizeof name);
        ir_value_name(cs[i].reader->result, reader, sizeof reader);
        if (peak > hw->hbm_bytes) {
            gather_again(m, &cs[i], peak, hw);
            peak = cost_memory_peak(m).peak;
            again++;
            if (ctx->log)
                fprintf(ctx->log, "regather: %s gathered again for %s; peak now %.3g GiB\n", name,
                        reader, peak / GIB);
            continue;
        }
        /* Kept: say so next to why it was gathered. */
        const char *why = cs[i].gather->reason ? cs[i].gather->reason : "gathered";
        ir_op_set_reason(m, cs[i].gather, cs[i].gather->for_op, cs[i].gather->for_operand,
                         "%s; kept for the backward pass (%s): the peak, %.3g GiB per device, "
                         "fits %s's %.3g GiB, and gathering again would cost %.3g us",
                         why, reader, peak / GIB, hw->name, hw->hbm_bytes / GIB, cs[i].seconds * 1e6);
    }
    if (ctx->log && nc)
        fprintf(ctx->log, "regather: %d of %d gathered weights gathered again for the backward "
                          "pass\n", again, nc);
    free(cs);
    return 0;
}
