/*
 * propagate_state.c - a state written from rows the plan must gather.
 *
 * A state keeps the sharding it is declared with, and the rows an
 * UpdateSlice writes into it are constrained to that sharding without the
 * written dim (frontend/lower.c).  When the rows come out sharded over an
 * axis the state is not (Megatron's K_Y heads written into a replicated
 * cache), propagate meets the constraint with an AllGather: every device
 * then keeps the whole state and gathers every write.  Seed 002 shards
 * the KV cache like the heads that write it, so that each chip holds and
 * reads 1/n of it; a state declared without that sharding is reported, at
 * the write, with the declaration that avoids the gather.
 */
#include <stdio.h>

#include "propagate_internal.h"

/* The AllGather among the reshards that made `v` from the value the
 * plan computed, or NULL. */
static const ir_op *gather_of(const ir_value *v)
{
    const ir_op *g = NULL;
    for (int guard = 0; v && v->def && ir_op_is_reshard(v->def->kind) && v->def->noperands > 0 &&
                        guard < 64;
         guard++) {
        if (v->def->kind == IR_OP_ALLGATHER)
            g = v->def;
        v = v->def->operands[0];
    }
    return g;
}

int pass_prop_state_writes(prop *p)
{
    ir_module *m = p->m;
    int errors = 0;
    for (ir_op *op = m->first; op; op = op->next) {
        if (op->kind != IR_OP_UPDATESLICE || op->noperands != 3)
            continue;
        const ir_value *state = ir_update_target(op), *store = op->operands[0];
        const ir_op *g = gather_of(op->operands[1]);
        if (!state || !g)
            continue;
        /* The state's sharding plus the axes the rows had at each dim: rows
         * dim j is the store's dim j, or j + 1 past the written dim (not
         * for a window, whose dim stands in the written one's place); a
         * stacked state has the layers' dim in front of the store's. */
        const ir_value *rows = g->operands[0];
        int at = op->u.update.dim, offset = state->type.rank - store->type.rank;
        bool window = rows->type.rank == store->type.rank;
        ir_type want = state->type;
        ir_axes used = ir_sharding_used_axes(&want.sh, want.rank);
        for (int j = 0; j < rows->type.rank; j++) {
            int d = (window || j < at ? j : j + 1) + offset;
            for (int k = 0; k < rows->type.sh.naxes[j] && d != at + offset; k++) {
                int a = rows->type.sh.axes[j][k];
                if (!(used & (1u << a))) {
                    ir_sharding_push(&want.sh, d, a);
                    used |= 1u << a;
                }
            }
        }
        char have[256], rs[256], axes[16], fix[256];
        diag_error(p->ctx->diag, op->loc,
                   "state %s is written with rows that come out as %s, so every device would keep "
                   "all of them and gather each write (AllGather_%s): declare it %s, sharded like its rows "
                   "(seed 002 shards the KV cache like the heads that write it)",
                   ir_type_str(m, state->tensor, &state->type, have, sizeof have),
                   ir_type_str(m, rows->tensor, &rows->type, rs, sizeof rs),
                   ir_axes_str(&m->mesh, g->u.coll.axes, g->u.coll.naxes, axes, sizeof axes),
                   ir_type_str(m, state->tensor, &want, fix, sizeof fix));
        errors++;
    }
    return errors;
}
