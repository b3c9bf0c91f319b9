/*
 * lower_repeat.c - repeated blocks (`repeat L { ... }`) to IR loops.
 *
 * A block becomes LoopBegin .. LoopEnd around its body's ops, carrying one
 * tensor from layer to layer; a stacked tensor read in the body is read one
 * layer at a time through a LayerSlice (docs/ir.md, "Repeated blocks").
 * Apart from the statements because this is the one place that knows how a
 * block's values are threaded through the checker's symbol table.
 */
#include <string.h>

#include "lower_internal.h"

/* The value reference `t` reads: its tensor's current value, or inside a
 * repeated block the current layer of a stacked tensor (t->layer), a
 * LayerSlice made at its first use in the block and shared by the rest. */
ir_value *fe_lower_ref_value(fe_checker *c, const ast_tref *t)
{
    fe_tensor *s = t->sym;
    if (!t->layer)
        return s->value;
    if (s->slice_block == c->block && s->slice)
        return s->slice;
    const ir_value *a = s->value;
    ir_type ty;
    memset(&ty, 0, sizeof ty);
    ty.dtype = a->type.dtype;
    ty.rank = a->type.rank - 1;
    ty.sh = ir_sharding_replicated();
    for (int d = 1; d < a->type.rank; d++) {
        ty.dims[d - 1] = a->type.dims[d];
        ty.sh.naxes[d - 1] = a->type.sh.naxes[d];
        memcpy(ty.sh.axes[d - 1], a->type.sh.axes[d], sizeof ty.sh.axes[d - 1]);
    }
    ir_value *r = ir_value_new(c->m, s->name, IR_VAL_OP, &ty, t->name.loc);
    ir_value *opnd = s->value;
    ir_op *op = ir_op_new(c->m, IR_OP_LAYERSLICE, 1, &opnd, r, t->name.loc);
    op->u.loop.dim = c->loop_begin->u.loop.dim;
    op->u.loop.begin = c->loop_begin;
    ir_op_append(c->m, op);
    s->slice = r;
    s->slice_block = c->block;
    return r;
}

/* `repeat L {`: a LoopBegin whose result is the carried tensor's value at
 * the top of each iteration (its sharding is propagate's to choose). */
void fe_lower_repeat(fe_checker *c, const ast_stmt *s)
{
    c->block++;
    fe_tensor *t = s->u.repeat.carry;
    ir_value *init = t->value;
    ir_type ty = init->type;
    ir_value *top = ir_value_new(c->m, t->name, IR_VAL_OP, &ty, s->loc);
    ir_op *op = ir_op_new(c->m, IR_OP_LOOPBEGIN, 1, &init, top, s->loc);
    op->u.loop.dim = s->u.repeat.dim_id;
    op->u.loop.begin = op;
    ir_op_append(c->m, op);
    c->loop_begin = op;
    c->repeat = (ast_stmt *)s;
    t->value = top;
}

/* `}`: a LoopEnd that takes the body's new value of the carried tensor to
 * the next iteration; its result is the tensor after the loop. */
void fe_lower_end(fe_checker *c, uint32_t loc)
{
    fe_tensor *t = c->repeat->u.repeat.carry;
    ir_value *next = t->value;
    ir_type ty = next->type;
    ir_value *after = ir_value_new(c->m, t->name, IR_VAL_OP, &ty, loc);
    ir_op *op = ir_op_new(c->m, IR_OP_LOOPEND, 1, &next, after, loc);
    op->u.loop.dim = c->loop_begin->u.loop.dim;
    op->u.loop.begin = c->loop_begin;
    op->u.loop.end = op;
    c->loop_begin->u.loop.end = op;
    ir_op_append(c->m, op);
    c->loop_begin = NULL;
    c->repeat = NULL;
    t->value = after;
}
