/*
 * pipeline_split.c - the backward loop of a pipelined program split into a
 * dL/dx loop and a dL/dW loop, which the zero-bubble schedule runs as
 * separate items B and W (Qi et al., "Zero Bubble Pipeline Parallelism",
 * ICLR'24, section 2; seed 000's DeepSeek-v3 figure).
 *
 * Autodiff (grad_loop.c) differentiates a repeat block as one reverse loop
 * whose body is the layer's backward sweep: it carries dL/dx from layer to
 * layer and stacks each layer's weight gradient.  Stage z-1 only waits for
 * the carried gradient, so the ops it depends on (found by walking the
 * body backwards from the LoopEnd's operand) stay in the loop, loop B; the
 * rest, the weight gradients and what only they read, move to a second
 * reverse loop over the same layers, loop W, after every other backward op.
 * The weight gradients outside the block follow loop W (Qi et al.'s split:
 * every weight gradient is W): the embedding's, after loop B on the first
 * stage, and the head's and a final norm's, before it on the last stage,
 * which the gradient entering loop B does not depend on
 * (pipe_work_split_w, the cost model's rule too).
 * A value of loop B that loop W reads crosses by being stacked per layer
 * in B (LayerStack) and sliced back per layer in W (LayerSlice), as the
 * forward's activations reach the backward; a LayerSlice of a param or a
 * forward stack is sliced again in W instead (a view, no copy).  A loop
 * must carry a value, so W carries a scalar zero that nothing reads.
 *
 * The ops are the same ops on the same inputs, so each layer's weight
 * gradient is the unsplit loop's, bit for bit; what changes is memory:
 * the crossing values of every layer stay stacked from B until W ends
 * (docs/pipeline.md, "Zero-bubble: the split backward").
 */
#include <stdlib.h>
#include <string.h>

#include "ir_ewtree.h"
#include "pipe_work.h"
#include "pipeline_split.h"

/* The --schedule value the errors name (zero-bubble, zb-h1 or zb-h2 as
 * the user spelt it; the choice splits only a backward that splits). */
static const char *given(const pass_ctx *ctx)
{
    const char *v = pass_option_value(ctx, "schedule");
    return v ? v : "zero-bubble";
}

/* The first loop over the pipelined layer dim that runs in reverse (the
 * backward) or forward, or NULL. */
static ir_op *layer_loop(const ir_module *m, bool reverse)
{
    for (ir_op *op = m->first; op; op = op->next)
        if (op->kind == IR_OP_LOOPBEGIN && op->u.loop.reverse == reverse && op->u.loop.dim == m->pipe.dim)
            return op;
    return NULL;
}

/* Marks in inb (by value id) the body values of loop `bb` that its carried
 * gradient depends on, the carried value at the top of the body included,
 * and the LayerStacks of such values (they stay in B: nothing of W feeds
 * them). */
static void mark_input_gradient(const ir_op *bb, bool *inb)
{
    const ir_op *be = bb->u.loop.end;
    inb[bb->result->id] = true;
    const ir_value *next = be->operands[0];
    if (next->def && next->def->loop == bb)
        inb[next->id] = true;
    for (const ir_op *op = be->prev; op != bb; op = op->prev)
        if (inb[op->result->id])
            for (int k = 0; k < op->noperands; k++) {
                const ir_value *v = op->operands[k];
                if (v->def && v->def->loop == bb)
                    inb[v->id] = true;
            }
    for (const ir_op *op = bb->next; op != be; op = op->next)
        if (op->kind == IR_OP_LAYERSTACK && inb[op->operands[0]->id])
            inb[op->result->id] = true;
}

/* A new loop op of `kind` over `dim` reading `a`, with result `r`, not
 * linked; its loop is set when it is linked (begin and end by the
 * caller). */
static ir_op *loop_op(ir_module *m, ir_op_kind kind, int dim, ir_value *a, ir_value *r, uint32_t loc)
{
    ir_op *op = ir_op_new(m, kind, 1, &a, r, loc);
    op->u.loop.dim = dim;
    return op;
}

/* What the split builds, before it is linked. */
typedef struct split {
    ir_module *m;
    ir_op *bb, *be;    /* loop B */
    ir_op *wb;         /* loop W's LoopBegin (linked last) */
    int dim;
    ir_value **cross;  /* by value id (< nv): the W-side value standing for a B value */
    ir_op **slices;    /* the LayerSlices that open loop W's body */
    int nslices;
} split;

/* Whether B value `v` can be kept per layer for loop W (a new stack in
 * loop B): not unreduced partial sums, and room for the stack's dim. */
static bool stackable(const ir_value *v)
{
    return !v->type.sh.unreduced && v->type.rank + 1 <= IR_MAX_RANK;
}

/* The value loop W reads for B value `v`: a LayerSlice again of what `v`
 * slices, or a LayerSlice of v's new per-layer stack in loop B.  NULL
 * after an error (a value holding partial sums, or no room for the
 * stack's dim). */
static ir_value *crossing(pass_ctx *ctx, split *s, ir_value *v)
{
    if (s->cross[v->id])
        return s->cross[v->id];
    ir_module *m = s->m;
    ir_value *src;
    if (v->def && v->def->kind == IR_OP_LAYERSLICE) {
        src = v->def->operands[0];
    } else {
        if (!stackable(v)) {
            char b[256];
            diag_error(ctx->diag, v->loc, "--schedule=%s: the weight-gradient loop reads %s of "
                       "the input-gradient loop, which cannot be kept per layer (%s)", given(ctx),
                       ir_type_str(m, v->tensor, &v->type, b, sizeof b),
                       v->type.sh.unreduced ? "it holds unreduced partial sums" : "too many dims");
            return NULL;
        }
        ir_type t = v->type;
        memmove(t.dims + 1, t.dims, (size_t)t.rank * sizeof t.dims[0]);
        t.dims[0] = s->dim;
        t.rank++;
        t.sh = ir_stack_sharding(m, &v->type.sh, v->type.rank, s->dim);
        src = ir_value_new(m, v->tensor, IR_VAL_OP, &t, v->loc);
        ir_op *st = loop_op(m, IR_OP_LAYERSTACK, s->dim, v, src, v->loc);
        st->u.loop.begin = s->bb;
        st->u.loop.end = s->be;
        ir_op_insert_before(m, s->be, st);
        ir_op_set_reason(m, st, v->def, -1, "zero-bubble: kept per layer for the weight-gradient loop");
    }
    ir_value *r = ir_value_new(m, v->tensor, IR_VAL_OP, &v->type, v->loc);
    s->slices[s->nslices++] = loop_op(m, IR_OP_LAYERSLICE, s->dim, src, r, v->loc);
    s->cross[v->id] = r;
    return r;
}

bool pass_pipeline_split_applies(const ir_module *m)
{
    const ir_op *bb = layer_loop(m, true);
    if (!bb)
        return false;
    const ir_op *be = bb->u.loop.end;
    bool *inb = calloc((size_t)m->nvalues + 1, sizeof *inb);
    if (!inb)
        return false;
    mark_input_gradient(bb, inb);
    bool weights = false, ok = true;
    for (const ir_op *op = bb->next; op != be && ok; op = op->next) {
        if (inb[op->result->id])
            continue;
        weights |= op->kind == IR_OP_LAYERSTACK;
        for (int k = 0; k < op->noperands; k++) { /* crossing's refusals */
            const ir_value *v = op->operands[k];
            if (v->id < m->nvalues && inb[v->id] && v->def && v->def->kind != IR_OP_LAYERSTACK &&
                v->def->kind != IR_OP_LAYERSLICE && !stackable(v))
                ok = false;
        }
    }
    free(inb);
    return ok && weights;
}

int pass_pipeline_split_backward(pass_ctx *ctx, ir_module *m)
{
    ir_op *bb = layer_loop(m, true);
    if (!bb) {
        diag_error(ctx->diag, m->pipe.loc, "--schedule=%s splits the backward pass of the "
                   "pipelined 'repeat' block, and this program has none (it does not train)", given(ctx));
        return 1;
    }
    ir_op *be = bb->u.loop.end;
    int nv = m->nvalues, nbody = 0;
    for (ir_op *op = bb->next; op != be; op = op->next)
        nbody++;
    bool *inb = calloc((size_t)nv + 1, sizeof *inb);
    bool *outw = calloc((size_t)nv + 1, sizeof *outw);
    ir_op **wops = calloc((size_t)nbody + 1, sizeof *wops);
    ir_op **tail = calloc((size_t)nv + 1, sizeof *tail);
    split s = {.m = m, .bb = bb, .be = be, .dim = bb->u.loop.dim};
    s.cross = calloc((size_t)nv + 1, sizeof *s.cross);
    s.slices = calloc((size_t)2 * (size_t)nbody + 1, sizeof *s.slices);
    int rc = 1;
    if (!inb || !outw || !wops || !tail || !s.cross || !s.slices) {
        diag_error(ctx->diag, DIAG_NOLOC, "out of memory in the pipeline pass");
        goto done;
    }
    mark_input_gradient(bb, inb);
    int nw = 0;
    bool weights = false;
    for (ir_op *op = bb->next; op != be; op = op->next)
        if (!inb[op->result->id]) {
            wops[nw++] = op;
            weights |= op->kind == IR_OP_LAYERSTACK;
        }
    if (!weights) {
        const ir_op *fwd = layer_loop(m, false);
        diag_error(ctx->diag, fwd ? fwd->loc : bb->loc, "--schedule=%s runs each layer's "
                   "weight gradients (dL/dW) apart from its input gradient (dL/dx), and the backward "
                   "of this 'repeat %s' block computes no weight gradient (it reads no stacked param "
                   "that trains): use --schedule=1f1b", given(ctx), m->dims[s.dim].name);
        goto done;
    }
    /* Loop W goes after every other backward op, before the update; the
     * weight gradients outside the loops (the embedding's after loop B,
     * the head's before it: pipe_work_split_w) and what only they read
     * go after it, in their order, with the backward ops that read loop
     * W's stacks (all of them come after loop B). */
    ir_op *at = be->next;
    while (at && at->phase == IR_PHASE_BACKWARD)
        at = at->next;
    pipe_work_split_w(bb, outw);
    int ntail = 0;
    for (ir_op *op = m->first; op != at; op = op->next)
        if (op->result && op->result->id < nv && outw[op->result->id])
            tail[ntail++] = op;
    /* The values of B that W reads. */
    for (int i = 0; i < nw; i++) {
        ir_op *op = wops[i];
        for (int k = 0; k < op->noperands; k++) {
            ir_value *v = op->operands[k];
            if (v->id >= nv || !inb[v->id] || v->def->kind == IR_OP_LAYERSTACK)
                continue;
            ir_value *r = crossing(ctx, &s, v);
            if (!r)
                goto done;
            ir_op_set_operand(m, op, k, r);
        }
    }
    for (int i = 0; i < ntail; i++)
        ir_op_remove(m, tail[i]);
    ir_op *cursor = at ? at->prev : m->last;
    /* The scalar loop W carries (emitted at the module's end, then moved). */
    ir_arena trees = {0};
    ir_ewt_out eo = {.m = m, .arena = &trees, .tensor = "dW_loop", .dtype = IR_F32, .loc = bb->loc};
    int no_dims[1] = {0};
    ir_value *zero = ir_ewt_emit(&eo, ir_ewt_const(&trees, 0.0), no_dims, 0, bb->loc);
    ir_arena_free(&trees);
    ir_op *zop = zero->def;
    ir_op_remove(m, zop);
    ir_op_insert_after(m, cursor, zop);
    ir_value *top = ir_value_new(m, "dW_loop", IR_VAL_OP, &zero->type, bb->loc);
    ir_value *after = ir_value_new(m, "dW_loop", IR_VAL_OP, &zero->type, bb->loc);
    ir_op *wb = loop_op(m, IR_OP_LOOPBEGIN, s.dim, zero, top, bb->loc);
    ir_op *we = loop_op(m, IR_OP_LOOPEND, s.dim, top, after, bb->loc);
    wb->u.loop.reverse = true;
    wb->u.loop.begin = we->u.loop.begin = wb;
    wb->u.loop.end = we->u.loop.end = we;
    ir_op_insert_after(m, zop, wb);
    ir_op_set_reason(m, wb, bb, -1, "zero-bubble: the weight gradients of 'repeat %s', run apart from "
                     "the input gradient", m->dims[s.dim].name);
    cursor = wb;
    for (int i = 0; i < s.nslices; i++) {
        ir_op_insert_after(m, cursor, s.slices[i]);
        cursor = s.slices[i];
    }
    for (int i = 0; i < nw; i++) {
        ir_op_remove(m, wops[i]);
        ir_op_insert_after(m, cursor, wops[i]);
        cursor = wops[i];
    }
    ir_op_insert_after(m, cursor, we);
    cursor = we;
    for (int i = 0; i < ntail; i++) {
        ir_op_insert_after(m, cursor, tail[i]);
        cursor = tail[i];
    }
    for (ir_op *op = zop; op != cursor->next; op = op->next) {
        op->phase = IR_PHASE_BACKWARD;
        if (ir_op_is_loop(op->kind) && op->loop == wb) {
            op->u.loop.begin = wb;
            op->u.loop.end = we;
        }
    }
    rc = 0;
done:
    free(tail);
    free(inb);
    free(outw);
    free(wops);
    free(s.cross);
    free(s.slices);
    return rc;
}
