/*
 * autodiff.c - the "autodiff" pass: derives the backward pass.  Every Grad
 * op (ir.h) the frontend wrote, for a `grad(L, W)` statement or a param of
 * an `optimize` line, is replaced by the backward ops that compute it
 * (reverse mode, grad.c), as JAX's grad transforms a traced program.  It
 * runs after the optimize pass, which writes the optimized params' Grads,
 * and before every other: they and codegen see only ordinary ops
 * (pass_manager_run refuses a pipeline that would hand them a Grad).
 *
 * Grouping.  The Grad ops of one loss share one backward sweep, placed at
 * the first of them: it computes the gradients of every W any Grad of that
 * loss names, if W is defined by then (an input, a param, or the result of
 * an op before that place).  A Grad whose W comes later gets a sweep of its
 * own, at its own place: the loss cannot depend on W, and the sweep writes
 * a gradient of zeros.  So a program that names a param in a grad
 * statement and in an `optimize` line runs its backward ops once.
 *
 * Placing.  The sweep appends ops at the module's end and reads the ops
 * before its place; the ops from the place on are unlinked while it runs
 * and linked back after its ops.
 *
 * Replacing.  Every use of a Grad's result (ops after it, outputs) reads
 * the sweep's gradient instead, and the Grad goes.  A constraint on a
 * Grad's result (a grad statement's written sharding) moves onto the
 * gradient, in program order, so the last statement's wins; a Grad that is
 * only to be sharded like W (ir.h, shard_like_w) gives W's sharding to a
 * gradient nothing else constrains.  A gradient that is a value of the
 * forward pass itself (the adjoint of W in L = sum(W * X) is X) is copied
 * first, so that its sharding is the gradient's own.
 */
#include <string.h>

#include "grad_internal.h"
#include "pass.h"

/* Whether value `w` is defined before op `place`: an argument, or the
 * result of an op that comes before it. */
static bool defined_before(const ir_module *m, const ir_value *w, const ir_op *place)
{
    if (!w->def)
        return true;
    for (const ir_op *op = m->first; op && op != place; op = op->next)
        if (op == w->def)
            return true;
    return false;
}

/* A copy of gradient `v` (a forward value) of `w`'s dims, appended. */
static ir_value *copy_of(ir_module *m, ir_arena *scratch, ir_value *v, const ir_value *w, uint32_t loc)
{
    ir_ewt_out e = {.m = m, .arena = scratch, .dtype = v->type.dtype, .loc = loc,
                    .tensor = ir_sprintf(scratch, "d%s", w->tensor)};
    int n = w->type.rank;
    ir_value *c = ir_ewt_emit(&e, ir_ewt_leaf(scratch, v, w->type.dims, n), w->type.dims, n, loc);
    c->def->phase = IR_PHASE_BACKWARD;
    return c;
}

/* The sweep of first Grad `g0`'s group and the replacement of the group's
 * Grads; false after reporting an error. */
static bool derive_group(pass_ctx *ctx, ir_module *m, ir_arena *scratch, ir_op *g0)
{
    if (g0->loop) {
        diag_error(ctx->diag, g0->loc, "grad inside a 'repeat' block is not supported: take the "
                   "gradient after the block");
        return false;
    }
    ir_value *loss = g0->operands[0];
    int cap = 0;
    for (const ir_op *op = g0; op; op = op->next)
        cap += op->kind == IR_OP_GRAD;
    ir_op **group = ir_alloc(scratch, (size_t)cap * sizeof *group);
    int *target = ir_alloc(scratch, (size_t)cap * sizeof *target); /* group[k]'s W is wrt[target[k]] */
    ir_value **wrt = ir_alloc(scratch, (size_t)cap * sizeof *wrt);
    ir_value **grads = ir_alloc(scratch, (size_t)cap * sizeof *grads);
    bool *zero = ir_alloc(scratch, (size_t)cap * sizeof *zero);
    int ng = 0, n = 0;
    for (ir_op *op = g0; op; op = op->next) {
        if (op->kind != IR_OP_GRAD || op->operands[0] != loss ||
            (op != g0 && !defined_before(m, op->operands[1], g0)))
            continue;
        int i = 0;
        while (i < n && wrt[i] != op->operands[1])
            i++;
        if (i == n)
            wrt[n++] = op->operands[1];
        target[ng] = i;
        group[ng++] = op;
    }

    /* Unlink g0 and what follows, sweep, link them back after its ops. */
    ir_op *before = g0->prev, *tail_end = m->last;
    m->last = before;
    if (before)
        before->next = NULL;
    else
        m->first = NULL;
    g0->prev = NULL;
    int nvalues = m->nvalues;
    bool ok = ad_sweep(m, scratch, ctx->diag, g0->loc, loss, wrt, n, grads, zero);
    for (int i = 0; ok && i < n; i++)
        if (grads[i]->id < nvalues)
            grads[i] = copy_of(m, scratch, grads[i], wrt[i], g0->loc);
    ir_op *end = m->last;
    if (end)
        end->next = g0;
    else
        m->first = g0;
    g0->prev = end;
    m->last = tail_end;
    if (!ok)
        return false;

    /* Written shardings in program order, then W's where none was written. */
    for (int k = 0; k < ng; k++) {
        const ir_op *g = group[k];
        int i = target[k];
        if (g->result->has_constraint) {
            grads[i]->has_constraint = true;
            grads[i]->constraint = g->result->constraint;
        }
        if (g->u.grad.optimize && zero[i])
            diag_warning(ctx->diag, g->u.grad.name_loc, "the loss '%s' does not depend on '%s': its "
                         "gradient is zero, and only weight decay changes it", loss->tensor,
                         wrt[i]->tensor);
    }
    for (int k = 0; k < ng; k++) {
        ir_op *g = group[k];
        int i = target[k];
        if (g->u.grad.shard_like_w && !grads[i]->has_constraint) {
            grads[i]->has_constraint = true;
            grads[i]->constraint = wrt[i]->type.sh;
        }
        ir_replace_uses(m, g->result, grads[i], g);
        ir_op_remove(m, g);
    }
    return true;
}

int pass_autodiff(pass_ctx *ctx, ir_module *m)
{
    ir_arena scratch = {0};
    bool ok = true;
    for (ir_op *op = m->first; op && ok;) {
        if (op->kind != IR_OP_GRAD) {
            op = op->next;
            continue;
        }
        ir_op *prev = op->prev;
        ok = derive_group(ctx, m, &scratch, op);
        /* The group's sweep sits where op was, op is gone: go on after the
         * ops before it, which the sweep does not change. */
        op = prev ? prev->next : m->first;
    }
    ir_arena_free(&scratch);
    return ok ? 0 : 1;
}
