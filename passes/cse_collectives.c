/*
 * cse_collectives.c - the example pass of docs/passes.md: merge identical
 * resharding ops.
 *
 * Two AllGather / ReduceScatter / AllReduce / AllToAll / Slice ops of the
 * same kind, over the same axes and dims, applied to the same value compute
 * the same result; the later one is dropped and its uses read the earlier
 * one's result.  This is the sharing seed 000 points out for tensor
 * parallelism ("In[B, D] = AllGather(In[B, DY]) ... can be shared with the
 * forward pass"): propagation inserts a gather per consumer, and this pass
 * keeps one.  Built into einc and also built as a plugin from the same file
 * (EINC_PASS_PLUGIN) to show --load-pass.
 */
#include <string.h>

#include "pass.h"

/* Whether reshard ops a and b compute the same value. */
static bool same_reshard(const ir_op *a, const ir_op *b)
{
    return a->kind == b->kind && a->operands[0] == b->operands[0] &&
           a->u.coll.naxes == b->u.coll.naxes && a->u.coll.dim == b->u.coll.dim &&
           a->u.coll.dim2 == b->u.coll.dim2 &&
           memcmp(a->u.coll.axes, b->u.coll.axes, (size_t)a->u.coll.naxes) == 0;
}

static int cse_collectives(pass_ctx *ctx, ir_module *m)
{
    int merged = 0;
    for (ir_op *op = m->first; op; op = op->next) {
        if (!ir_op_is_reshard(op->kind))
            continue;
        ir_op *next;
        for (ir_op *later = op->next; later; later = next) {
            next = later->next;
            if (!ir_op_is_reshard(later->kind) || !same_reshard(op, later))
                continue;
            /* The dropped value may carry the user's constraint: keep it. */
            if (later->result->has_constraint && !op->result->has_constraint) {
                op->result->has_constraint = true;
                op->result->constraint = later->result->constraint;
            }
            ir_replace_uses(m, later->result, op->result, later);
            ir_op_remove(m, later);
            merged++;
        }
    }
    if (ctx->log && merged)
        fprintf(ctx->log, "cse-collectives: merged %d resharding op(s)\n", merged);
    return 0;
}

#ifndef EINC_PASS_PLUGIN
int pass_cse_collectives(pass_ctx *ctx, ir_module *m)
{
    return cse_collectives(ctx, m);
}
#else
/* The plugin keeps its own copy of the pass (static, so einc's exported
 * built-in cannot interpose) and exports only the entry point. */
static const pass_info plugin_passes[] = {
    {"cse-collectives", "merge identical resharding ops of the same value (loaded from a plugin)",
     cse_collectives},
};

__attribute__((visibility("default"))) const pass_info *einc_pass_plugin(int *count);

const pass_info *einc_pass_plugin(int *count)
{
    *count = 1;
    return plugin_passes;
}
#endif
