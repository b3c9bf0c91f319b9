/*
 * propagate_loop.c - repeated blocks in the propagate pass: the body is
 * planned once, with one sharding per carried value.
 *
 * A repeated block is LoopBegin, its body, LoopEnd (ir.h).  The body runs
 * |L| times with the same code, so every value in it has one sharding for
 * all iterations, and the carried value (the residual stream) must enter
 * every iteration with the same sharding: the "carried sharding" S.  The
 * body's new value is resharded to S at its end, so iteration l+1 starts as
 * iteration l did, and the value after the loop has S too.
 *
 * To the layout search (propagate_layout.c) the loop ops are not compute
 * ops: the LoopBegin's result (the carried value at the top of the body),
 * the LoopEnd's result (after the loop) and each LayerSlice's result (one
 * layer of a stacked param: the param's sharding without its first dim) are
 * sources of fixed sharding, like inputs.  So the body's ops are chosen
 * once, given S, and the ops after the loop given S.
 *
 * S is the sharding the value entering the loop has, without partial sums
 * (they could not be carried: each iteration adds to the value):
 *   - that of an input or param, or of a value with a written constraint,
 *     is known before the search (pass_prop_loop_prepare);
 *   - else the body's update, if its left side is written with a sharding;
 *   - else the search runs once with a first guess (the carried sharding
 *     of an earlier loop over the same dims, as a backward loop's cotangent
 *     is laid out like the forward loop's value; else replicated), S is
 *     read from the value entering the loop as the search left it, and the
 *     search runs again (pass_prop_loop_settle).
 * After materialisation, pass_prop_loop_finish inserts the reshards into S
 * in front of the LoopBegin (the value entering) and in front of the LoopEnd
 * (the body's new value), each with its reason.
 *
 * A LayerStack (each iteration's value of a body value, kept for a backward
 * loop) is stacked in the sharding the search gives that value, without
 * partial sums; a LayerSlice of it in a later loop reads layer l in that
 * sharding (pass_prop_current), so the backward body is planned against
 * the forward body's choices.
 *
 * A reshard emitted inside a body is never reused outside it, nor one
 * emitted after a loop inside it (pass_prop_loop_reusable): a body's values
 * exist only during an iteration.
 */
#include <stdio.h>
#include <string.h>

#include "propagate_internal.h"

/* The sharding of a LayerSlice's result: its operand's without dim 0. */
static ir_sharding slice_sharding(const ir_value *a)
{
    return ir_sharding_without_first(&a->type.sh, a->type.rank);
}

void pass_prop_loop_stacks(prop *p)
{
    for (ir_op *op = p->m->first; op; op = op->next) {
        if (op->kind == IR_OP_LAYERSTACK && op->noperands == 1) {
            ir_sharding s = pass_prop_reduced(pass_prop_current(p, op->operands[0]));
            op->result->type.sh = ir_stack_sharding(p->m, &s, op->operands[0]->type.rank, op->u.loop.dim);
        } else if (op->kind == IR_OP_LAYERSLICE && op->noperands == 1 && op->operands[0]->def &&
                 op->operands[0]->def->kind == IR_OP_LAYERSTACK)
            op->result->type.sh = slice_sharding(op->operands[0]);
    }
}

/* Gives loop `begin`'s carried value sharding `s` (top of the body and
 * after the loop). */
static void set_carried(ir_op *begin, const ir_sharding *s)
{
    begin->result->type.sh = *s;
    if (begin->u.loop.end && begin->u.loop.end->result)
        begin->u.loop.end->result->type.sh = *s;
}

/* The first guess at the carried sharding of loop `begin` when nothing
 * fixes it: that of an earlier loop carrying a value over the same dims,
 * else replicated.  A backward loop carries the cotangent of the forward
 * loop's residual stream, and a cotangent is best laid out like its primal
 * (JAX gives it the primal's sharding): from replicated, the sweeps only
 * reach a carry that the body's first op can use without communication, so
 * a DP cotangent would stay replicated and be gathered every layer.  False
 * (and *s replicated) when no earlier loop carries those dims. */
static bool primal_guess(const ir_module *m, const ir_op *begin, ir_sharding *s)
{
    const ir_type *t = &begin->result->type;
    for (const ir_op *op = m->first; op && op != begin; op = op->next) {
        if (op->kind != IR_OP_LOOPBEGIN || !op->result)
            continue;
        const ir_type *u = &op->result->type;
        if (u->rank == t->rank && memcmp(u->dims, t->dims, (size_t)t->rank * sizeof *t->dims) == 0) {
            *s = u->sh;
            return true;
        }
    }
    *s = ir_sharding_replicated();
    return false;
}

int pass_prop_loop_prepare(prop *p)
{
    int unknown = 0;
    for (ir_op *op = p->m->first; op; op = op->next) {
        if (op->kind == IR_OP_LAYERSLICE && op->noperands == 1) {
            op->result->type.sh = slice_sharding(op->operands[0]);
            continue;
        }
        if (op->kind != IR_OP_LOOPBEGIN || op->noperands != 1 || !op->u.loop.end ||
            op->u.loop.end->noperands != 1)
            continue;
        const ir_value *init = op->operands[0], *next = op->u.loop.end->operands[0];
        ir_sharding s;
        if (ir_value_kind_is_argument(init->kind)) {
            s = init->type.sh;
        } else if (init->has_constraint) {
            s = init->constraint;
        } else if (next->has_constraint) {
            s = next->constraint;
        } else {
            primal_guess(p->m, op, &s);
            unknown++;
        }
        s = pass_prop_reduced(s);
        set_carried(op, &s);
    }
    return unknown;
}

bool pass_prop_loop_settle(prop *p)
{
    bool changed = false;
    for (ir_op *op = p->m->first; op; op = op->next) {
        if (op->kind != IR_OP_LOOPBEGIN || op->noperands != 1 || !op->u.loop.end ||
            op->u.loop.end->noperands != 1)
            continue;
        const ir_value *init = op->operands[0], *next = op->u.loop.end->operands[0];
        if (init->kind != IR_VAL_OP || init->has_constraint || next->has_constraint)
            continue;
        ir_sharding s = pass_prop_reduced(pass_prop_current(p, init));
        if (ir_sharding_equal(&s, &op->result->type.sh, op->result->type.rank))
            continue;
        set_carried(op, &s);
        changed = true;
    }
    return changed;
}

bool pass_prop_loop_primal(prop *p, ir_sharding *saved, int nsaved)
{
    bool changed = false;
    int i = 0;
    for (ir_op *op = p->m->first; op; op = op->next) {
        if (op->kind != IR_OP_LOOPBEGIN || op->noperands != 1 || !op->u.loop.end ||
            op->u.loop.end->noperands != 1)
            continue;
        if (saved && i < nsaved)
            saved[i] = op->result->type.sh;
        i++;
        const ir_value *init = op->operands[0], *next = op->u.loop.end->operands[0];
        if (init->kind != IR_VAL_OP || init->has_constraint || next->has_constraint)
            continue;
        ir_sharding s;
        if (!primal_guess(p->m, op, &s))
            continue;
        s = pass_prop_reduced(s);
        if (ir_sharding_equal(&s, &op->result->type.sh, op->result->type.rank))
            continue;
        set_carried(op, &s);
        changed = true;
    }
    return changed;
}

void pass_prop_loop_restore(prop *p, const ir_sharding *saved, int nsaved)
{
    int i = 0;
    for (ir_op *op = p->m->first; op && i < nsaved; op = op->next)
        if (op->kind == IR_OP_LOOPBEGIN && op->noperands == 1 && op->u.loop.end &&
            op->u.loop.end->noperands == 1)
            set_carried(op, &saved[i++]);
}

int pass_prop_loop_carries(const prop *p, ir_sharding *saved, int nsaved)
{
    int i = 0;
    for (const ir_op *op = p->m->first; op; op = op->next)
        if (op->kind == IR_OP_LOOPBEGIN && op->noperands == 1 && op->u.loop.end &&
            op->u.loop.end->noperands == 1) {
            if (saved && i < nsaved)
                saved[i] = op->result->type.sh;
            i++;
        }
    return i;
}

bool pass_prop_loop_reusable(const ir_value *dst, const ir_op *before)
{
    const ir_op *scope = dst->def ? dst->def->loop : NULL;
    if (!scope)
        return true; /* outside every body: it lives on */
    const ir_op *here = NULL;
    if (before)
        here = before->kind == IR_OP_LOOPEND ? before->u.loop.begin
               : before->kind == IR_OP_LOOPBEGIN ? NULL : before->loop;
    return scope == here;
}

/* Reshards operand 0 of LoopBegin, LoopEnd or LayerStack `op` into `to`
 * with ops inserted before it.  Returns 1 if no plan exists (reported),
 * else 0. */
static int reshard_operand(prop *p, ir_op *op, const ir_sharding *to)
{
    ir_value *v = op->operands[0];
    if (ir_sharding_equal(&v->type.sh, to, v->type.rank))
        return 0;
    char b1[256], b2[256];
    ir_type t = v->type;
    t.sh = *to;
    pass_reshard_plan plan;
    /* Timed on the profile, as every other reshard the planner emits and
     * as add_carried (propagate_cost.c) priced this one. */
    if (!pass_reshard_find_timed(p->m, p->hw, &v->type, to, &plan)) {
        diag_error(p->ctx->diag, op->loc, "cannot reshard %s into the loop-carried sharding %s",
                   ir_type_str(p->m, v->tensor, &v->type, b1, sizeof b1),
                   ir_type_str(p->m, v->tensor, &t, b2, sizeof b2));
        return 1;
    }
    char whys[PASS_RESHARD_MAX_STEPS][768];
    const char *wp[PASS_RESHARD_MAX_STEPS];
    const ir_op *begin = op->u.loop.begin;
    const char *dim = begin && begin->u.loop.dim >= 0 && begin->u.loop.dim < p->m->ndims
                          ? p->m->dims[begin->u.loop.dim].name : "?";
    ir_type_str(p->m, v->tensor, &v->type, b1, sizeof b1);
    ir_type_str(p->m, v->tensor, &t, b2, sizeof b2);
    for (int s = 0; s < plan.nsteps; s++) {
        if (op->kind == IR_OP_LAYERSTACK)
            snprintf(whys[s], sizeof whys[s], "for repeat %s: each layer's %s is kept for the "
                     "backward loop, reduced: %s", dim, v->tensor, b2);
        else if (op->kind == IR_OP_LOOPBEGIN)
            snprintf(whys[s], sizeof whys[s], "for repeat %s: %s enters the loop as %s, and every "
                     "iteration starts with the loop-carried sharding %s", dim, v->tensor, b1, b2);
        else
            snprintf(whys[s], sizeof whys[s], "for repeat %s: the body's new %s is %s, and the next "
                     "iteration starts with the loop-carried sharding %s", dim, v->tensor, b1, b2);
        wp[s] = whys[s];
    }
    ir_op_set_operand(p->m, op, 0, pass_reshard_emit(p->m, v, &plan, op, NULL, op, 0, wp));
    return 0;
}

int pass_prop_loop_finish(prop *p)
{
    int errors = 0;
    for (ir_op *op = p->m->first; op; op = op->next) {
        if (op->kind == IR_OP_LAYERSLICE && op->noperands == 1)
            op->result->type.sh = slice_sharding(op->operands[0]);
        if (op->kind == IR_OP_LAYERSTACK && op->noperands == 1) {
            const ir_value *v = op->operands[0];
            ir_sharding s = pass_prop_reduced(v->type.sh);
            errors += reshard_operand(p, op, &s);
            op->result->type.sh = ir_stack_sharding(p->m, &s, v->type.rank, op->u.loop.dim);
            continue;
        }
        if ((op->kind != IR_OP_LOOPBEGIN && op->kind != IR_OP_LOOPEND) || op->noperands != 1 ||
            !op->u.loop.begin || !op->u.loop.begin->result)
            continue;
        ir_sharding s = op->u.loop.begin->result->type.sh;
        errors += reshard_operand(p, op, &s);
    }
    return errors;
}
