/*
 * grad.c - `G[...] = grad(L, W)`: reverse-mode differentiation of the ops
 * lowered so far.
 *
 * A grad statement is lowered to the backward ops of the program before
 * it: the adjoint (cotangent) dv = dL/dv of every value v on a path from W
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
 * All the grad statements of one loss share one backward sweep: the first
 * computes the adjoints of every tensor that any of them asks for.
 *  - Gather (an embedding lookup): the table's adjoint is a scatter-add
 *    einsum of the indices and dC (ir.h), the indices have none.
 *  - A repeated block (`repeat L`, LoopBegin .. LoopEnd) gets a backward
 *    loop that runs over the layers in reverse (a LoopBegin with
 *    `reverse`), carrying the adjoint of the carried value, as JAX's
 *    transpose of a scan: its body is the backward sweep of the forward
 *    body (fe_grad_loop_adjoint).  A forward body value the backward body
 *    reads (an activation) is stacked by the forward loop (LayerStack, one block
 *    per layer) and read back one layer at a time (LayerSlice), so nothing
 *    is recomputed and the FLOPs stay seed 003's 2 (forward) + 4
 *    (backward) per param and token.  A layer's gradient of a stacked
 *    param is stacked by the backward loop, sharded like the param (so the
 *    seed 000 gradient collectives happen per layer, inside the loop); a
 *    value from before the loop gets the sum over layers of its per-layer
 *    adjoints.
 *
 * Rematerialisation (--remat, fe_remat): where the backward ops read a
 * forward value, `fe_grad_val` gives the value itself, a LayerSlice of the
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
 * from the loss back, the entry points); the rules and their helpers are
 * in grad_*.c, one job each (grad_internal.h lists them).
 */
#include <string.h>

#include "grad_internal.h"

/* Per-loss results, kept on the checker so that later grad statements of
 * the same loss reuse the sweep. */
struct fe_grads {
    ir_value *loss;
    int n;
    ir_value **wrt;    /* n targets */
    ir_value **grad;   /* their adjoints, materialised */
    struct fe_grads *next;
};

/* The adjoint rules of the ops from `last` back to (not including) `stop`;
 * a repeated block is differentiated as a whole at its LoopEnd. */
void fe_grad_backprop(fe_gctx *g, ir_op *last, const ir_op *stop)
{
    for (ir_op *op = last; op != stop && g->ok; op = op->prev) {
        if (op->kind == IR_OP_LOOPEND) {
            const fe_adjoint *dc = &g->adj[op->result->id];
            if (g->relevant[op->result->id] && (dc->v || dc->is_const))
                fe_grad_loop_adjoint(g, op);
            op = op->u.loop.begin; /* the body is done, or needs nothing */
            continue;
        }
        if (!g->relevant[op->result->id] || op->kind == IR_OP_LAYERSLICE)
            continue; /* a layer's adjoint is collected by fe_grad_loop_adjoint */
        fe_adjoint dc = g->adj[op->result->id];
        if (!dc.v && !dc.is_const)
            continue; /* no path back to the loss carries a nonzero fe_adjoint */
        if (op->kind == IR_OP_EINSUM) {
            fe_grad_einsum_adjoint(g, op, &dc);
        } else if (op->kind == IR_OP_ELEMENTWISE) {
            fe_grad_elementwise_adjoint(g, op, &dc);
        } else {
            /* Never silently zero: an op without adjoint rules on the path. */
            diag_error(g->c->diag, g->loc, "grad through '%s' (%s) is not supported yet",
                       op->result->tensor, ir_op_name(op->kind));
            g->ok = false;
        }
    }
}

/* The sweep for `loss` and targets wrt[0..n-1]; fills grads[], and zero[]
 * (if not NULL) with whether no path from the target reaches the loss. */
static bool sweep(fe_checker *c, uint32_t loc, ir_value *loss, ir_value **wrt, int n,
                  ir_value **grads, bool *zero)
{
    ir_module *m = c->m;
    fe_gctx g = {.c = c, .loc = loc, .nvalues = m->nvalues, .ok = true};
    g.e = (fe_emit){.m = m, .arena = c->arena, .tensor = "d", .dtype = loss->type.dtype, .loc = loc};
    g.adj = ir_alloc(c->arena, (size_t)m->nvalues * sizeof *g.adj);
    g.relevant = ir_alloc(c->arena, (size_t)m->nvalues * sizeof *g.relevant);
    bool *dep = ir_alloc(c->arena, (size_t)m->nvalues * sizeof *dep);
    bool *need = ir_alloc(c->arena, (size_t)m->nvalues * sizeof *need);
    g.map = ir_alloc(c->arena, (size_t)m->nvalues * sizeof *g.map);
    g.remat = c->opts ? c->opts->remat : FE_REMAT_NONE;
    memset(g.adj, 0, (size_t)m->nvalues * sizeof *g.adj);
    memset(g.map, 0, (size_t)m->nvalues * sizeof *g.map);
    memset(dep, 0, (size_t)m->nvalues);
    memset(need, 0, (size_t)m->nvalues);
    for (int i = 0; i < n; i++)
        dep[wrt[i]->id] = true;
    ir_op *last = m->last;
    for (ir_op *op = m->first; op; op = op->next)
        for (int k = 0; k < op->noperands; k++)
            if (dep[op->operands[k]->id] && op->operands[k]->type.dtype != IR_I32)
                dep[op->result->id] = true;
    need[loss->id] = true;
    for (ir_op *op = last; op; op = op->prev)
        if (need[op->result->id])
            for (int k = 0; k < op->noperands; k++)
                need[op->operands[k]->id] = true;
    for (int i = 0; i < m->nvalues; i++)
        g.relevant[i] = dep[i] && need[i];
    g.adj[loss->id] = (fe_adjoint){.is_const = true, .c = 1.0};
    for (int i = 0; i < n; i++)
        if (wrt[i]->def && (wrt[i]->def->loop || wrt[i]->def->kind == IR_OP_LOOPBEGIN)) {
            diag_error(c->diag, loc, "grad with respect to '%s', a value of a 'repeat' block's "
                       "body, is not supported: it has a value per layer", wrt[i]->tensor);
            return false;
        }
    ir_op *forward_end = m->last;
    fe_grad_backprop(&g, last, NULL);
    if (!g.ok)
        return false;
    for (int i = 0; i < n; i++) {
        if (zero)
            zero[i] = !g.adj[wrt[i]->id].v && !g.adj[wrt[i]->id].is_const;
        grads[i] = fe_grad_materialise(&g, wrt[i]);
    }
    ir_set_phase_after(m, forward_end, IR_PHASE_BACKWARD);
    return true;
}

/* The names of grad(L, W)'s arguments (the checker made sure they are bare names). */
static const char *arg_name(const ast_factor *f, int i)
{
    return f->u.call.args[i]->terms[0]->factors[0]->u.index.name.s;
}

const ast_factor *fe_grad_call(const ast_stmt *s)
{
    const ast_expr *e = s->u.assign.rhs;
    if (e->nterms != 1 || e->terms[0]->sign < 0 || e->terms[0]->nfactors != 1)
        return NULL;
    const ast_factor *f = e->terms[0]->factors[0];
    return f->kind == AST_F_CALL && f->u.call.callee == AST_CALL_GRAD ? f : NULL;
}

const fe_tensor *fe_grad_target(fe_checker *c, const ast_stmt *s)
{
    return fe_symtab_get(&c->tensors, arg_name(fe_grad_call(s), 1));
}

ir_value *fe_grad_lower(fe_checker *c, const ast_program *prog, const ast_stmt *s)
{
    const ast_factor *f = fe_grad_call(s);
    fe_tensor *lt = fe_symtab_get(&c->tensors, arg_name(f, 0));
    fe_tensor *wt = fe_symtab_get(&c->tensors, arg_name(f, 1));
    ir_value *loss = lt->value, *w = wt->value;
    struct fe_grads *r = c->grads;
    while (r && r->loss != loss)
        r = r->next;
    if (!r) {
        /* Every tensor a grad of this loss asks for, defined by now. */
        r = ir_alloc(c->arena, sizeof *r);
        *r = (struct fe_grads){.loss = loss, .next = c->grads};
        r->wrt = ir_alloc(c->arena, (size_t)prog->nstmts * sizeof *r->wrt);
        r->grad = ir_alloc(c->arena, (size_t)prog->nstmts * sizeof *r->grad);
        for (int i = 0; i < prog->nstmts; i++) {
            const ast_stmt *t = prog->stmts[i];
            const ast_factor *g = t->kind == AST_S_ASSIGN ? fe_grad_call(t) : NULL;
            if (!g || fe_symtab_get(&c->tensors, arg_name(g, 0)) != lt)
                continue;
            fe_tensor *x = fe_symtab_get(&c->tensors, arg_name(g, 1));
            bool dup = false;
            for (int j = 0; j < r->n; j++)
                dup |= r->wrt[j] == x->value;
            if (x->value && !dup)
                r->wrt[r->n++] = x->value;
        }
        if (!sweep(c, s->loc, loss, r->wrt, r->n, r->grad, NULL))
            return NULL;
        c->grads = r;
    }
    for (int j = 0; j < r->n; j++)
        if (r->wrt[j] == w)
            return r->grad[j];
    /* A target defined after the loss's first grad: the loss cannot
     * depend on it, so its gradient is zero; a sweep of its own says so. */
    ir_value *out;
    return sweep(c, s->loc, loss, &w, 1, &out, NULL) ? out : NULL;
}

bool fe_grad_values(fe_checker *c, uint32_t loc, ir_value *loss, ir_value **wrt, int n,
                    ir_value **grads, bool *zero, bool *fresh)
{
    const struct fe_grads *r = c->grads;
    while (r && r->loss != loss)
        r = r->next;
    ir_value **miss = ir_alloc(c->arena, (size_t)(n + 1) * sizeof *miss);
    ir_value **got = ir_alloc(c->arena, (size_t)(n + 1) * sizeof *got);
    bool *mzero = ir_alloc(c->arena, (size_t)(n + 1) * sizeof *mzero);
    int nmiss = 0;
    for (int i = 0; i < n; i++) {
        grads[i] = NULL;
        zero[i] = fresh[i] = false;
        for (int j = 0; r && j < r->n; j++)
            if (r->wrt[j] == wrt[i])
                grads[i] = r->grad[j]; /* a grad statement's sweep has it */
        if (!grads[i])
            miss[nmiss++] = wrt[i];
    }
    if (nmiss == 0)
        return true;
    if (!sweep(c, loc, loss, miss, nmiss, got, mzero))
        return false;
    for (int i = 0, k = 0; i < n; i++)
        if (!grads[i]) {
            grads[i] = got[k];
            zero[i] = mzero[k++];
            fresh[i] = true;
        }
    return true;
}
