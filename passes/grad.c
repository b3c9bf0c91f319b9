/*
 * grad.c - the backward sweep: reverse-mode differentiation of the ops
 * before a Grad op (ir.h), for the autodiff pass (autodiff.c).
 *
 * A Grad op of loss L (a `grad(L, W)` statement, or a param of an
 * `optimize` line) becomes the backward ops of the program before it: the
 * adjoint (cotangent) dv = dL/dv of every value v on a path from W
 * to the scalar L, from L back to W, each op contributing to the adjoints
 * of its operands, as JAX's transpose rules do for its primitives:
 *
 *  - Einsum C = s * einsum(A, B) over the (+, *) semiring: dA = s *
 *    einsum(dC, B) over A's labels that C or B have, broadcast over any
 *    label only A has (A's own reduction); a unary einsum (a sum or mean)
 *    broadcasts dC back: dA = s * dC.
 *  - max / min reductions: the gradient goes to the arguments of the
 *    maximum, split equally among ties: dA = [A == C] * dC / #ties.
 *  - Elementwise: the chain rule on the expression tree (grad_ew.c), then
 *    a sum over the labels an operand was broadcast along.
 *
 * Contributions to one value are added.  The backward ops are ordinary
 * einsums and elementwise ops appended after the forward ones, so the
 * propagate pass shards them with the same rules and inserts their
 * collectives (seed 000: an AllGather in the forward pass becomes a
 * ReduceScatter in the backward one by the einsum rules alone).  Adjoints
 * are named after the value with a 'd' in front (dTmp, dWin), as in seed
 * 000's listings.  An adjoint that is a known constant (dL/dL = 1, and what
 * a sum passes back) stays a number until an op needs a tensor.
 *
 * All the Grad ops of one loss share one backward sweep (autodiff.c
 * groups them): it computes the adjoints of every tensor any of them asks
 * for.
 *  - Gather (an embedding lookup): the table's adjoint is a scatter-add
 *    einsum of the indices and dC (ir.h), the indices have none.
 *  - A repeated block (`repeat L`, LoopBegin .. LoopEnd) gets a backward
 *    loop that runs over the layers in reverse (a LoopBegin with
 *    `reverse`), carrying the adjoint of the carried value, as JAX's
 *    transpose of a scan: its body is the backward sweep of the forward
 *    body (ad_loop_adjoint).  A forward body value the backward body
 *    reads (an activation) is stacked by the forward loop (LayerStack, one block
 *    per layer) and read back one layer at a time (LayerSlice), so nothing
 *    is recomputed and the FLOPs stay seed 003's 2 (forward) + 4
 *    (backward) per param and token.  A layer's gradient of a stacked
 *    param is stacked by the backward loop, sharded like the param (so the
 *    seed 000 gradient collectives happen per layer, inside the loop); a
 *    value from before the loop gets the sum over layers of its per-layer
 *    adjoints.
 *
 * Rematerialisation (--remat, ir_remat): where the backward ops read a
 * forward value, `ad_val` gives the value itself, a LayerSlice of the
 * layer's copy the forward loop keeps, or a copy of its op computed again on its
 * operands as the backward ops read them (clone).  `elementwise` computes
 * elementwise results again (their operands, an einsum's result, stay);
 * `layer` keeps only each layer's input in a repeated block and computes
 * the whole layer again in the backward loop (seed 003's activation
 * checkpointing: one more forward pass of FLOPs, a layer's activations of
 * memory instead of |L| layers').
 *
 * Not differentiated (a located error): i32 values, a state write, a
 * target defined in a repeated block's body.
 *
 * This file holds the sweep itself (which values are relevant, the walk
 * from the loss back) and the table of adjoint rules by op kind, generated
 * from IR_OPS like the other layers' hook tables; the rules and their
 * helpers are in grad_*.c, one job each (grad_internal.h lists them).
 */
#include <string.h>

#include "grad_internal.h"

/* The rules of each op kind, by its union arm (grad_internal.h). */
typedef void (*ad_rule_fn)(ad_ctx *g, ir_op *op, const ad_adjoint *dc);
static const ad_rule_fn rules[IR_OP_COUNT] = {
#define X(e, s, arm, lo, hi, tr) [IR_OP_##e] = ad_rule_##arm,
    IR_OPS(X)
#undef X
};

/* An op without adjoint rules on the path: never a silent zero. */
static void no_rule(ad_ctx *g, const ir_op *op)
{
    diag_error(g->diag, g->loc, "grad through '%s' (%s) is not supported yet", op->result->tensor,
               ir_op_name(op->kind));
    g->ok = false;
}

/* The arms without rules: collectives and MeshSlice exist only after
 * propagate, CollectivePermute only after the pipeline pass, a state write has no gradient, and a Grad on the path of
 * another is derived first (autodiff.c goes in program order). */
#define NO_RULE(arm)                                                    \
    void ad_rule_##arm(ad_ctx *g, ir_op *op, const ad_adjoint *dc)      \
    {                                                                   \
        (void)dc;                                                       \
        no_rule(g, op);                                                 \
    }
NO_RULE(coll)
NO_RULE(ms)
NO_RULE(update)
NO_RULE(grad)
NO_RULE(perm)
#undef NO_RULE

/* The adjoint rules of the ops from `last` back to (not including) `stop`;
 * a repeated block is differentiated as a whole at its LoopEnd. */
void ad_backprop(ad_ctx *g, ir_op *last, const ir_op *stop)
{
    for (ir_op *op = last; op != stop && g->ok; op = op->prev) {
        if (op->kind == IR_OP_LOOPEND) {
            const ad_adjoint *dc = &g->adj[op->result->id];
            if (g->relevant[op->result->id] && (dc->v || dc->is_const))
                ad_rule_loop(g, op, dc);
            op = op->u.loop.begin; /* the body is done, or needs nothing */
            continue;
        }
        if (!g->relevant[op->result->id] || op->kind == IR_OP_LAYERSLICE)
            continue; /* a layer's adjoint is collected by ad_loop_adjoint */
        ad_adjoint dc = g->adj[op->result->id];
        if (!dc.v && !dc.is_const)
            continue; /* no path back to the loss carries a nonzero ad_adjoint */
        rules[op->kind](g, op, &dc);
    }
}

bool ad_sweep(ir_module *m, ir_arena *arena, diag_ctx *diag, uint32_t loc, ir_value *loss,
              ir_value *const *wrt, int n, ir_value **grads, bool *zero)
{
    ad_ctx g = {.m = m, .diag = diag, .loc = loc, .nvalues = m->nvalues, .ok = true};
    g.e = (ir_ewt_out){.m = m, .arena = arena, .tensor = "d", .dtype = loss->type.dtype, .loc = loc};
    g.adj = ir_alloc(arena, (size_t)m->nvalues * sizeof *g.adj);
    g.relevant = ir_alloc(arena, (size_t)m->nvalues * sizeof *g.relevant);
    bool *dep = ir_alloc(arena, (size_t)m->nvalues * sizeof *dep);
    bool *need = ir_alloc(arena, (size_t)m->nvalues * sizeof *need);
    g.map = ir_alloc(arena, (size_t)m->nvalues * sizeof *g.map);
    g.remat = m->remat;
    memset(g.adj, 0, (size_t)m->nvalues * sizeof *g.adj);
    memset(g.map, 0, (size_t)m->nvalues * sizeof *g.map);
    memset(dep, 0, (size_t)m->nvalues);
    memset(need, 0, (size_t)m->nvalues);
    for (int i = 0; i < n; i++)
        dep[wrt[i]->id] = true;
    ir_op *last = m->last;
    for (ir_op *op = m->first; op; op = op->next)
        for (int k = 0; k < op->noperands; k++)
            if (dep[op->operands[k]->id] && !ir_dtype_integer(op->operands[k]->type.dtype) &&
                !ir_dtype_integer(op->result->type.dtype)) /* i8(x): zero gradient */
                dep[op->result->id] = true;
    need[loss->id] = true;
    for (ir_op *op = last; op; op = op->prev)
        if (need[op->result->id])
            for (int k = 0; k < op->noperands; k++)
                need[op->operands[k]->id] = true;
    for (int i = 0; i < m->nvalues; i++)
        g.relevant[i] = dep[i] && need[i];
    g.adj[loss->id] = (ad_adjoint){.is_const = true, .c = 1.0};
    for (int i = 0; i < n; i++)
        if (wrt[i]->def && (wrt[i]->def->loop || wrt[i]->def->kind == IR_OP_LOOPBEGIN)) {
            diag_error(diag, loc, "grad with respect to '%s', a value of a 'repeat' block's "
                       "body, is not supported: it has a value per layer", wrt[i]->tensor);
            return false;
        }
    ir_op *forward_end = m->last;
    ad_backprop(&g, last, NULL);
    if (!g.ok)
        return false;
    for (int i = 0; i < n; i++) {
        zero[i] = !g.adj[wrt[i]->id].v && !g.adj[wrt[i]->id].is_const;
        grads[i] = ad_materialise(&g, wrt[i]);
    }
    ir_set_phase_after(m, forward_end, IR_PHASE_BACKWARD);
    return true;
}
