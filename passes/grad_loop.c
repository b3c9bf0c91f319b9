/*
 * grad_loop.c - the backward loop of a repeated block (`repeat L`).
 *
 * A forward loop is differentiated as a whole, as JAX transposes a scan: a
 * loop that runs over the layers in reverse, whose body is the backward
 * sweep of the forward body (ad_backprop on the body alone), carrying
 * the adjoint of the carried value.  Per-layer gradients of stacked params
 * are stacked by the backward loop; values from before the loop get the
 * sum over layers.  Apart from grad.c because only loops need it, and it is
 * the largest rule.
 */
#include <string.h>

#include "grad_internal.h"

/* `v`, or a copy of it when a constraint on it would bind other values:
 * an adjoint shared with another value than `key`, or a value that is not
 * the backward body's own. */
static ir_value *own(ad_ctx *g, ir_value *v, const ir_value *key)
{
    bool shared = v->has_constraint || !v->def || v->def->loop != g->bloop;
    for (int i = 0; i < g->nvalues && !shared; i++)
        shared = i != key->id && g->adj[i].v == v;
    if (!shared)
        return v;
    ad_name_for(g, key);
    return ir_ewt_emit(&g->e, ir_ewt_leaf(g->e.arena, v, v->type.dims, v->type.rank), v->type.dims,
                       v->type.rank, g->loc);
}

/* A LayerStack of backward body value `v` (one block per layer). */
static ir_value *stack(ad_ctx *g, ir_value *v)
{
    ir_type t = v->type;
    memmove(t.dims + 1, t.dims, (size_t)t.rank * sizeof t.dims[0]);
    t.dims[0] = g->bloop->u.loop.dim;
    t.rank++;
    ir_sharding none = ir_sharding_replicated();
    t.sh = ir_stack_sharding(g->e.m, &none, v->type.rank, t.dims[0]);
    ir_value *s = ir_value_new(g->e.m, v->tensor, IR_VAL_OP, &t, g->loc);
    ir_op *op = ir_op_new(g->e.m, IR_OP_LAYERSTACK, 1, &v, s, g->loc);
    op->u.loop.dim = g->bloop->u.loop.dim;
    op->u.loop.begin = g->bloop;
    ir_op_append(g->e.m, op);
    return s;
}

/* What a backward loop hands to the sweep around it: the stacked ad_adjoint
 * of `target`, summed over the layers first if `sum`. */
typedef struct loop_out {
    ir_value *target, *stack;
    bool sum;
} loop_out;

/* The backward loop of the forward loop that LoopEnd `fe` ends (the file
 * comment), given the adjoint of the value after it. */
void ad_loop_adjoint(ad_ctx *g, ir_op *fe)
{
    ir_module *m = g->e.m;
    ir_op *fb = fe->u.loop.begin;
    int dim = fb->u.loop.dim;
    ir_value *carry = fb->result, *next = fe->operands[0];
    int rank = carry->type.rank;
    const int *dims = carry->type.dims;
    ir_value *dafter = ad_materialise(g, fe->result);
    ad_name_for(g, carry);
    ir_type t = carry->type;
    t.sh = ir_sharding_replicated();
    ir_value *dtop = ir_value_new(m, g->e.tensor, IR_VAL_OP, &t, g->loc);
    ir_op *bb = ir_op_new(m, IR_OP_LOOPBEGIN, 1, &dafter, dtop, g->loc);
    bb->u.loop.dim = dim;
    bb->u.loop.begin = bb;
    bb->u.loop.reverse = true;
    ir_op_append(m, bb);

    /* The body's sweep: relevance within one iteration, given what the
     * sweep around the loop found relevant. */
    ad_ctx b = *g;
    b.loop = fb;
    b.bloop = bb;
    int nv = b.nvalues = m->nvalues;
    b.adj = ir_alloc(g->e.arena, (size_t)nv * sizeof *b.adj);
    b.relevant = ir_alloc(g->e.arena, (size_t)nv * sizeof *b.relevant);
    b.map = ir_alloc(g->e.arena, (size_t)nv * sizeof *b.map);
    bool *dep = ir_alloc(g->e.arena, (size_t)nv * sizeof *dep);
    bool *need = ir_alloc(g->e.arena, (size_t)nv * sizeof *need);
    memset(b.adj, 0, (size_t)nv * sizeof *b.adj);
    memset(b.relevant, 0, (size_t)nv * sizeof *b.relevant);
    memset(b.map, 0, (size_t)nv * sizeof *b.map);
    memset(dep, 0, (size_t)nv);
    memset(need, 0, (size_t)nv);
    dep[carry->id] = true; /* it carries the layers before */
    for (ir_op *op = fb->next; op != fe; op = op->next) {
        if (op->kind == IR_OP_LAYERSLICE) {
            dep[op->result->id] = g->relevant[op->operands[0]->id];
            continue;
        }
        for (int k = 0; k < op->noperands; k++) {
            ir_value *v = op->operands[k];
            if (!ad_in_body(fb, v) && v->id < g->nvalues && g->relevant[v->id])
                dep[v->id] = true;
            if (dep[v->id] && !ir_dtype_integer(v->type.dtype) &&
                !ir_dtype_integer(op->result->type.dtype))
                dep[op->result->id] = true;
        }
    }
    need[next->id] = true;
    for (ir_op *op = fe->prev; op != fb; op = op->prev)
        if (need[op->result->id])
            for (int k = 0; k < op->noperands; k++)
                need[op->operands[k]->id] = true;
    for (int i = 0; i < g->nvalues; i++)
        b.relevant[i] = dep[i] && need[i];
    b.adj[next->id] = (ad_adjoint){.v = dtop};
    ad_backprop(&b, fe->prev, fb);
    if (!b.ok) {
        g->ok = false;
        return;
    }

    /* What leaves each backward iteration: the adjoint of the carried
     * value (to the next iteration, the layer before), and stacked, each
     * layer's gradient of a stacked param (in the param's sharding) and
     * each layer's contribution to a value from before the loop. */
    ir_value *dnext = ad_materialise(&b, carry);
    loop_out *outs = ir_alloc(g->e.arena, (size_t)(nv + 1) * sizeof *outs);
    bool *seen = need; /* reused: outer values collected */
    memset(seen, 0, (size_t)nv);
    int nout = 0;
    for (ir_op *op = fb->next; op != fe && b.ok; op = op->next) {
        if (op->kind == IR_OP_LAYERSLICE) {
            ir_value *w = op->operands[0];
            const ad_adjoint *a = &b.adj[op->result->id];
            if (!g->relevant[w->id] || (!a->v && !a->is_const))
                continue;
            ir_value *dw = own(&b, ad_materialise(&b, op->result), op->result);
            /* A layer's gradient is sharded like the layer (seed 000:
             * AllReduce for DP, ReduceScatter for FSDP, per layer). */
            dw->has_constraint = true;
            dw->constraint = ir_sharding_without_first(&w->type.sh, w->type.rank);
            outs[nout++] = (loop_out){w, stack(&b, dw), false};
            continue;
        }
        for (int k = 0; k < op->noperands; k++) {
            ir_value *v = op->operands[k];
            const ad_adjoint *a = &b.adj[v->id];
            if (ad_in_body(fb, v) || seen[v->id] || !g->relevant[v->id] ||
                (!a->v && !a->is_const))
                continue;
            seen[v->id] = true;
            if (has(v->type.dims, v->type.rank, dim) || v->type.rank >= IR_MAX_RANK) {
                diag_error(g->diag, g->loc, "grad through 'repeat %s': '%s' is read by every "
                           "layer, and its gradient would be summed over the layers along a "
                           "dim it has or past the dims a tensor may have", m->dims[dim].name,
                           v->tensor);
                b.ok = false;
                break;
            }
            outs[nout++] = (loop_out){v, stack(&b, ad_materialise(&b, v)), true};
        }
    }
    if (!b.ok) {
        g->ok = false;
        return;
    }
    ad_name_for(g, carry);
    ir_value *dbefore = ir_value_new(m, g->e.tensor, IR_VAL_OP, &t, g->loc);
    ir_op *be = ir_op_new(m, IR_OP_LOOPEND, 1, &dnext, dbefore, g->loc);
    be->u.loop.dim = dim;
    be->u.loop.begin = bb;
    be->u.loop.end = be;
    bb->u.loop.end = be;
    ir_op_append(m, be);
    for (ir_op *op = bb->next; op != be; op = op->next)
        if (ir_op_is_loop(op->kind))
            op->u.loop.end = be;

    ad_contribute(g, fb->operands[0], ir_ewt_leaf(g->e.arena, dbefore, dims, rank), dims);
    for (int i = 0; i < nout; i++) {
        ir_value *v = outs[i].target, *s = outs[i].stack;
        const int *vd = v->type.dims;
        int vr = v->type.rank;
        if (!outs[i].sum) { /* a stacked param: the stack is its gradient */
            ad_contribute(g, v, ir_ewt_leaf(g->e.arena, s, vd, vr), vd);
            continue;
        }
        int lab[1][IR_MAX_RANK], nl[1] = {vr + 1};
        lab[0][0] = dim;
        memcpy(lab[0] + 1, vd, (size_t)vr * sizeof(int));
        ad_name_for(g, v);
        ir_value *r = ad_emit_einsum(g, &s, (const int(*)[IR_MAX_RANK])lab, nl, 1, vd, vr, 1.0,
                                     IR_RED_SUM);
        ad_contribute(g, v, ir_ewt_leaf(g->e.arena, r, vd, vr), vd);
    }
}

void ad_rule_loop(ad_ctx *g, ir_op *op, const ad_adjoint *dc)
{
    (void)dc; /* ad_loop_adjoint reads it from g->adj */
    /* ad_backprop calls this at a LoopEnd only: it skips a LayerSlice (the
     * backward loop collects each layer's adjoint) and jumps over a body. */
    if (op->kind == IR_OP_LOOPEND)
        ad_loop_adjoint(g, op);
}
