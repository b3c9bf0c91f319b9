/*
 * reshard_emit.c - a resharding plan (reshard.c's search) made ops: one
 * collective per step, inserted where the value is needed, each saying why.
 * Apart from the search so that reshard.c holds the search alone.
 */
#include "reshard.h"

ir_value *pass_reshard_emit(ir_module *m, ir_value *v, const pass_reshard_plan *plan, ir_op *before,
                            ir_value *last, ir_op *for_op, int operand, const char *const *whys)
{
    ir_value *cur = v;
    uint32_t loc = for_op ? for_op->loc : v->loc;
    for (int k = 0; k < plan->nsteps; k++) {
        const pass_reshard_step *st = &plan->steps[k];
        ir_value *res;
        if (k == plan->nsteps - 1 && last) {
            res = last;
            res->type.sh = st->to;
        } else {
            ir_type t = v->type;
            t.sh = st->to;
            res = ir_value_new(m, v->tensor, IR_VAL_OP, &t, v->loc);
        }
        ir_op *op = ir_op_new(m, st->kind, 1, &cur, res, loc);
        op->u.coll = st->coll;
        /* What the partial results are combined with is the value's. */
        op->u.coll.reduce = (ir_reduce)cur->type.sh.red;
        if (before)
            ir_op_insert_before(m, before, op);
        else
            ir_op_append(m, op);
        ir_op_set_reason(m, op, for_op, operand, "%s", whys && whys[k] ? whys[k] : "reshard");
        cur = res;
    }
    return cur;
}
