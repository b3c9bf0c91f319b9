/*
 * prefetch_params.c - the example pass of docs/passes.md: issue the
 * resharding of weights first.
 *
 * Seed 000 (FSDP, "Win[D, F] = AllGather(Win[D_X, F]) (not on the critical
 * path, can be done during the previous layer)") observes that a weight's
 * AllGather depends on nothing the program computes, so it can start before
 * the compute that precedes its use and overlap with it.  This pass moves
 * every resharding op whose operand is a `param` (or a chain of such ops) to
 * the front of the program, keeping their relative order.  It trades memory
 * for overlap: the gathered weights are live from the start.  Not in the
 * default pipeline; run it with --passes=propagate,prefetch-params,cost.
 * Built into einc and also built as a plugin from the same file
 * (EINC_PASS_PLUGIN) to show --load-pass.
 */
#include "pass.h"

/* Whether `v` is a param or derived from one through resharding ops only. */
static bool param_derived(const ir_value *v)
{
    while (v->kind == IR_VAL_OP) {
        if (!v->def || !ir_op_is_reshard(v->def->kind))
            return false;
        v = v->def->operands[0];
    }
    return v->kind == IR_VAL_PARAM;
}

static int prefetch_params(pass_ctx *ctx, ir_module *m)
{
    ir_op *last_moved = NULL; /* the hoisted ops form a prefix, in order */
    int moved = 0;
    ir_op *next;
    for (ir_op *op = m->first; op; op = next) {
        next = op->next;
        if (!ir_op_is_reshard(op->kind) || !param_derived(op->operands[0]))
            continue;
        if (op != (last_moved ? last_moved->next : m->first)) {
            ir_op_remove(m, op);
            ir_op_insert_after(m, last_moved, op);
            moved++;
        }
        last_moved = op;
    }
    if (ctx->log && moved)
        fprintf(ctx->log, "prefetch-params: moved %d resharding op(s) of params to the front\n", moved);
    return 0;
}

#ifndef EINC_PASS_PLUGIN
int pass_prefetch_params(pass_ctx *ctx, ir_module *m)
{
    return prefetch_params(ctx, m);
}
#else
/* The plugin keeps its own copy of the pass (static, so einc's exported
 * built-in cannot interpose) and exports only the entry point. */
static const pass_info plugin_passes[] = {
    {"prefetch-params", "move resharding ops of params to the front, to overlap them (loaded from a plugin)",
     prefetch_params, NULL, 0},
};

__attribute__((visibility("default"))) const pass_info *einc_pass_plugin(int *count);

const pass_info *einc_pass_plugin(int *count)
{
    *count = 1;
    return plugin_passes;
}
#endif
