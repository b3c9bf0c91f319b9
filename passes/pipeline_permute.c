/*
 * pipeline_permute.c - the stage-to-stage transfers of a pipelined program
 * as IR ops (pipeline_permute.h).
 *
 * A pipeline stage runs its layers and hands the carried activation to the
 * next stage, one hop; in the backward pass the gradient goes back the same
 * way (seed 000, pipeline parallelism).  Every device runs the same SPMD
 * program, so the hand-off is a collective along the stage axis: XLA's
 * CollectivePermute with the pairs z -> z+1 (forward) or z -> z-1
 * (backward), each stage sending its block of the loop's result and
 * receiving its neighbour's (ir.h, the perm arm).  It sits where the
 * transfer happens, right after the loop over the stage's layers, so the
 * cost pass prices it (one hop, cost_hop_time) and --dump-ir shows it.
 * What it delivers is the next stage's input to the same loop, which the
 * one-microbatch module cannot write as an operand (the loop would read
 * its own result); its result is read by no op, and codegen's pipelined
 * executor receives it at the receiving stage's loop.
 */
#include <stdio.h>

#include "pipeline_permute.h"

/* The LoopEnd of the forward (reverse = false) or the first reverse loop
 * over the pipelined layer dim, or NULL. */
static ir_op *loop_end(const ir_module *m, bool reverse)
{
    for (ir_op *op = m->first; op; op = op->next)
        if (op->kind == IR_OP_LOOPBEGIN && op->u.loop.reverse == reverse && op->u.loop.dim == m->pipe.dim)
            return op->u.loop.end;
    return NULL;
}

/* The permute of `end`'s result by `delta` stages, after `end`. */
static void insert(ir_module *m, ir_op *end, int delta)
{
    ir_value *v = end->result;
    ir_value *r = ir_value_new(m, v->tensor, IR_VAL_OP, &v->type, end->loc);
    ir_op *op = ir_op_new(m, IR_OP_PERMUTE, 1, &v, r, end->loc);
    op->u.perm.axis = m->pipe.axis;
    op->u.perm.delta = delta;
    op->u.perm.cyclic = m->pipe.chunks > 1;
    ir_op_insert_after(m, end, op);
    char z = m->mesh.axes[m->pipe.axis].name;
    ir_op_set_reason(m, op, end, -1, delta > 0
                     ? "for the forward loop of the next stage: each stage's activation to the %c stage "
                       "after it, one hop (pipeline)"
                     : "for the backward loop of the previous stage: each stage's input gradient to the %c "
                       "stage before it, one hop (pipeline)", z);
}

int pass_pipeline_permutes(pass_ctx *ctx, ir_module *m)
{
    if (m->pipe.axis < 0 || m->mesh.axes[m->pipe.axis].size < 2)
        return 0; /* one stage hands nothing on */
    ir_op *fe = loop_end(m, false), *be = loop_end(m, true);
    if (!fe) {
        diag_error(ctx->diag, m->pipe.loc, "internal error: the pipelined program has no forward loop over "
                   "its layers");
        return 1;
    }
    insert(m, fe, 1);
    if (be)
        insert(m, be, -1);
    return 0;
}
