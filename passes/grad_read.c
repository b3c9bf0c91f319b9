/*
 * grad_read.c - forward values as the backward ops read them.
 *
 * A backward op that needs a forward value (an operand of the op it
 * differentiates, an activation) reads it through ad_val, which is the
 * one place that decides between keeping the value, reading one layer of it
 * in a backward loop (the forward loop stacks it: LayerStack / LayerSlice)
 * and computing it again (--remat).  Kept apart from the adjoint rules so
 * that they stay independent of the memory policy (grad.c's comment).
 */
#include <stdio.h>
#include <string.h>

#include "grad_internal.h"

/* Whether `v` is a value of the body of loop `fb` (its carried value at
 * the top included). */
bool ad_in_body(const ir_op *fb, const ir_value *v)
{
    return fb && v->def && (v->def == fb || v->def->loop == fb);
}

/* Forward value `v` computed again by a copy of its op, appended, on its
 * operands as the backward ops read them (ad_val): rematerialisation. */
static ir_value *clone(ad_ctx *g, ir_value *v)
{
    const ir_op *op = v->def;
    ir_value *opnds[IR_MAX_OPERANDS];
    for (int k = 0; k < op->noperands; k++)
        opnds[k] = ad_val(g, op->operands[k]);
    ir_type t = v->type;
    t.sh = ir_sharding_replicated(); /* propagate plans the copy afresh */
    ir_value *r = ir_value_new(g->e.m, v->tensor, IR_VAL_OP, &t, v->loc);
    r->has_constraint = v->has_constraint;
    r->constraint = v->constraint;
    ir_op *c = ir_op_new(g->e.m, op->kind, op->noperands, opnds, r, op->loc);
    memcpy(&c->u, &op->u, sizeof c->u);
    c->remat = true;
    if (op->kind == IR_OP_ELEMENTWISE) {
        size_t n = (size_t)op->u.ew.nnodes * sizeof *op->u.ew.nodes;
        ir_ew_node *nodes = ir_alloc(&g->e.m->arena, n);
        memcpy(nodes, op->u.ew.nodes, n);
        c->u.ew.nodes = nodes;
    }
    ir_op_append(g->e.m, c);
    return r;
}

/* Whether forward value `v` (in a backward loop's body: of the forward
 * body) is computed again rather than kept, under --remat. */
static bool recompute(const ad_ctx *g, const ir_value *v)
{
    ir_op_kind k = v->def ? v->def->kind : IR_OP_COUNT;
    if (k != IR_OP_EINSUM && k != IR_OP_ELEMENTWISE)
        return false; /* loop ops, state writes: kept */
    if (!g->loop) /* outside a loop body: forward ops only */
        return g->remat == IR_REMAT_ELEMENTWISE && k == IR_OP_ELEMENTWISE &&
               v->id < g->nvalues && v->def->phase == IR_PHASE_FORWARD;
    return g->remat == IR_REMAT_LAYER || (g->remat == IR_REMAT_ELEMENTWISE && k == IR_OP_ELEMENTWISE);
}

/* `v` as the backward ops read it: itself; a copy computed again under
 * --remat; or in a backward loop's body the forward body value of the same
 * layer: a new LayerSlice of the stacked param it is a layer of, a copy
 * computed again, or a LayerSlice of a LayerStack that the forward loop
 * now keeps of it. */
ir_value *ad_val(ad_ctx *g, ir_value *v)
{
    bool body = ad_in_body(g->loop, v);
    if (!body && (g->loop || !recompute(g, v)))
        return v;
    if (g->map[v->id])
        return g->map[v->id];
    if (!body || (v->def->kind != IR_OP_LAYERSLICE && recompute(g, v)))
        return g->map[v->id] = clone(g, v);
    ir_module *m = g->e.m;
    ir_op *fb = g->loop;
    int dim = fb->u.loop.dim;
    ir_value *src;
    if (v->def->kind == IR_OP_LAYERSLICE) {
        src = v->def->operands[0];
    } else {
        ir_type t = v->type;
        if (t.rank >= IR_MAX_RANK) {
            diag_error(g->diag, g->loc, "grad through 'repeat %s': '%s' has %d dims, and "
                       "keeping it for every layer needs one more than the %d a tensor may have",
                       m->dims[dim].name, v->tensor, t.rank, IR_MAX_RANK);
            g->ok = false;
            return v;
        }
        memmove(t.dims + 1, t.dims, (size_t)t.rank * sizeof t.dims[0]);
        t.dims[0] = dim;
        t.rank++;
        ir_sharding none = ir_sharding_replicated();
        t.sh = ir_stack_sharding(m, &none, v->type.rank, dim);
        src = ir_value_new(m, v->tensor, IR_VAL_OP, &t, g->loc);
        ir_op *st = ir_op_new(m, IR_OP_LAYERSTACK, 1, &v, src, g->loc);
        st->u.loop.dim = dim;
        st->u.loop.begin = fb;
        st->u.loop.end = fb->u.loop.end;
        ir_op_insert_before(m, fb->u.loop.end, st);
    }
    ir_type t = v->type;
    t.sh = ir_sharding_replicated();
    ir_value *r = ir_value_new(m, v->tensor, IR_VAL_OP, &t, g->loc);
    ir_op *ls = ir_op_new(m, IR_OP_LAYERSLICE, 1, &src, r, g->loc);
    ls->u.loop.dim = dim;
    ls->u.loop.begin = g->bloop;
    ir_op_append(m, ls);
    g->map[v->id] = r;
    return r;
}

/* Names the ops of the adjoint of `v`: "d" + the tensor's name. */
void ad_name_for(ad_ctx *g, const ir_value *v)
{
    size_t n = strlen(v->tensor) + 2;
    char *s = ir_alloc(g->e.arena, n);
    snprintf(s, n, "d%s", v->tensor);
    g->e.tensor = s;
    g->e.dtype = v->type.dtype;
}
