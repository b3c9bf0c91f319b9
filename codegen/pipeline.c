/*
 * pipeline.c - the run function of a pipelined program (docs/pipeline.md).
 *
 * The pipeline pass (passes/pipeline.c) left one microbatch's program, the
 * stage axis Z and each stage's schedule (ir_module.pipe).  Every device
 * runs the same function; its stage z = rt_coord(dev, Z) picks its row of
 * the schedule, a constant table of items "F m" (forward of microbatch m),
 * "B m" (its backward) and with zero-bubble "W m" (the backward's dL/dW
 * half), which one loop runs in order (or, with --w-fill=greedy, W items
 * also earlier, while the next item waits: pipeline_fill.c):
 *
 *   F m:  the ops before the forward loop (first stage: the embedding),
 *         or on the other stages the activation received from stage z-1;
 *         the forward loop over the stage's own |L|/Z layers; the
 *         activation sent to stage z+1, or on the last stage the ops after
 *         the loop (head, loss);
 *   B m:  the loss's backward on the last stage, or the gradient received
 *         from stage z+1; the backward loop over the stage's layers; the
 *         gradient sent to stage z-1, or on the first stage the ops after
 *         the loop (the embedding's gradient) unless there is a W item;
 *   W m:  zero-bubble and zb-h2 (the pipeline pass split the backward
 *         loop, passes/pipeline_split.c): the dL/dW loop over the stage's
 *         layers, which reads the per-layer stacks B m left in the frame,
 *         and the ops the pass put after it (pipeline_plan.c): what reads
 *         its stacks and the weight gradients outside the block, the
 *         embedding's on the first stage and the head's on the last, with
 *         their adds into the step's sums; no transfers.
 *
 * Which stages run an op outside the loops follows from the data:
 * a value is available on every stage (inputs, params, loop values), on
 * the last (what depends on the forward loop's output) or on the first
 * (what depends on the backward loop's output); an op runs where its
 * result is needed and can be computed (the embedding's lookup runs on the
 * first stage, a mask every layer reads on every stage).  Consecutive ops
 * with the same stages form a segment, guarded by a test of z.  Values that
 * cross segments live in the microbatch's frame, an array of pointers per
 * microbatch: stored at the end of the segment that has them, loaded at the
 * start of one that reads them; what a stage never frees (a value whose
 * last reader runs on another stage) is freed when the microbatch's
 * last item ends: B m, or with zero-bubble W m (what B m stacked for W m
 * is held in the frame until then).
 *
 * The optimizer's update (phase update) runs once, after the schedule, on
 * every stage.  What it reads from the forward and backward (the
 * gradients) and the loss are accumulated over the microbatches, into
 * buffers zeroed at the start: their sum is the whole batch's (the pass
 * kept the whole batch's scale factors).  A sum that only some stages
 * compute (the embedding's gradient on the first, the loss on the last;
 * the others hold zeros) is then AllReduced over Z; the stacked layers'
 * gradients stay where they are, each stage updating its own layers.  A
 * stacked gradient that only the update reads is summed in place: its
 * LayerStack adds each layer's block into the sum (cg_fn.stack_sum).
 *
 * The interleaved schedule (pipe.chunks = v > 1) runs items F m.c and
 * B m.c of the stage's local chunk c: the loops run that chunk's layers of
 * the local stacks (cg_fn.chunk_trips, chunk_first), the ops before the
 * forward loop run with chunk 0 and those after it with chunk v-1 (the
 * backward's the other way round), and the stages form a ring: stage
 * Z-1's chunk c sends to stage 0's chunk c+1 (hop).  A microbatch keeps
 * one frame for its chunks; the loops' stacks in it are made by the first
 * chunk to run the loop (chunk_stacks), and what a loop reads from
 * outside it is freed by the microbatch's last item.
 *
 * A forward (inference: no backward loop) has F items only; its outputs,
 * batch dim first, get each microbatch's rows at their place on the last
 * stage and are AllReduced over Z like the sums above.
 *
 * Inputs with the batch dim (first, checked) are read one microbatch at a
 * time: rows [m |B|/M, (m+1) |B|/M) of the device's block, a view.
 */
#include <stdlib.h>
#include <string.h>

#include "einrt.h"
#include "pipeline_internal.h"

/* The emitter's state. */
typedef struct pp_emit {
    cg_ctx *c;
    cg_fn *f;
    pp_ctx *x;
    cg_plan fb, end;        /* the plan with the accumulation's liveness (F and B; the update) */
    LLVMValueRef stage, is_first, is_last, frame, mb;
    int v;                  /* chunks per stage (interleaved), else 1 */
    LLVMValueRef chunk;     /* i32: the item's local chunk c (0 when v = 1) */
    LLVMValueRef *accbuf;   /* per value: its accumulator */
    LLVMValueRef *inbuf;    /* per value: the whole input's pointer (entry block) */
    bool *sent;             /* per value: a loop's carried value that goes to the next stage */
} pp_emit;

static LLVMValueRef slot_ptr(pp_emit *e, int v)
{
    LLVMValueRef idx = cg_i64(e->c, e->x->slot[v]);
    return LLVMBuildInBoundsGEP2(e->c->b, e->c->t.ptr, e->frame, &idx, 1, "slot");
}

/* A call of rt_send or rt_recv (einrt.h). */
static void p2p(pp_emit *e, bool send, LLVMValueRef delta, LLVMValueRef tag, LLVMValueRef buf, int64_t bytes)
{
    cg_ctx *c = e->c;
    const char *name = send ? "rt_send" : "rt_recv";
    LLVMTypeRef params[] = {c->t.ptr, c->t.i32, c->t.i32, c->t.i32, c->t.ptr, c->t.i64};
    LLVMTypeRef fty = LLVMFunctionType(c->t.voidt, params, 6, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, name);
    if (!fn)
        fn = LLVMAddFunction(c->mod, name, fty);
    LLVMValueRef args[] = {e->f->dev, cg_i32(c, e->x->m->pipe.axis), delta, tag, buf,
                           cg_i64(c, bytes)};
    LLVMBuildCall2(c->b, fty, fn, args, 6, "");
}

/* A call of rt_pipe_item_begin (kind 'F', 'B' or 'W') or, kind 0,
 * rt_pipe_item_end (einrt.h). */
static void item_mark(pp_emit *e, char kind)
{
    cg_ctx *c = e->c;
    /* Interleaved items name their chunk: rt_pipe_chunk_item_begin. */
    int nargs = !kind ? 1 : e->v > 1 ? 4 : 3;
    const char *name = !kind ? "rt_pipe_item_end" : e->v > 1 ? "rt_pipe_chunk_item_begin" : "rt_pipe_item_begin";
    LLVMTypeRef params[] = {c->t.ptr, c->t.i32, c->t.i32, c->t.i32};
    LLVMTypeRef fty = LLVMFunctionType(c->t.voidt, params, (unsigned)nargs, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, name);
    if (!fn)
        fn = LLVMAddFunction(c->mod, name, fty);
    LLVMValueRef args[] = {e->f->dev, cg_i32(c, kind), e->mb, e->chunk};
    LLVMBuildCall2(c->b, fty, fn, args, (unsigned)nargs, "");
}

/* Opens a block run when `cond` (i1) holds (NULL: always); returns the
 * block after it, or NULL. */
static LLVMBasicBlockRef open_if(pp_emit *e, LLVMValueRef cond)
{
    cg_ctx *c = e->c;
    if (!cond)
        return NULL;
    LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(c->llctx, e->f->fn, "stage");
    LLVMBasicBlockRef after = LLVMAppendBasicBlockInContext(c->llctx, e->f->fn, "stage.after");
    LLVMBuildCondBr(c->b, cond, then, after);
    LLVMPositionBuilderAtEnd(c->b, then);
    return after;
}

/* Opens a block run by the stages in `run` (none: always); returns the
 * block after it, or NULL. */
static LLVMBasicBlockRef guard_open(pp_emit *e, uint8_t run)
{
    cg_ctx *c = e->c;
    int Z = (int)e->x->m->mesh.axes[e->x->m->pipe.axis].size;
    uint8_t all = Z > 2 ? ST_ALL : ST_FIRST | ST_LAST;
    if ((run & all) == all)
        return NULL;
    LLVMValueRef f = LLVMConstInt(c->t.i1, 0, 0), cond = f;
    LLVMValueRef mid = LLVMBuildNot(c->b, LLVMBuildOr(c->b, e->is_first, e->is_last, ""), "");
    if (run & ST_FIRST)
        cond = LLVMBuildOr(c->b, cond, e->is_first, "");
    if (run & ST_LAST)
        cond = LLVMBuildOr(c->b, cond, e->is_last, "");
    if (run & ST_MID)
        cond = LLVMBuildOr(c->b, cond, mid, "");
    return open_if(e, cond);
}

/* Whether the item's chunk is `c` (i1), or NULL (always) without chunks:
 * the ops before and after a pipelined loop run with the first chunk to
 * need them (the embedding before chunk 0's forward, the head after chunk
 * v-1's, the loss's backward before chunk v-1's backward). */
static LLVMValueRef chunk_is(pp_emit *e, int c)
{
    if (e->v == 1)
        return NULL;
    return LLVMBuildICmp(e->c->b, LLVMIntEQ, e->chunk, cg_i32(e->c, c), "chunk.is");
}

static void guard_close(pp_emit *e, LLVMBasicBlockRef after)
{
    if (!after)
        return;
    LLVMBuildBr(e->c->b, after);
    LLVMPositionBuilderAtEnd(e->c->b, after);
}

void cg_emit_add_into(cg_ctx *c, cg_fn *f, LLVMValueRef dst, LLVMValueRef src, int64_t n, ir_dtype dtype)
{
    if (n <= 0)
        return;
    LLVMTypeRef ct = dtype == IR_F64 ? c->t.f64 : c->t.f32;
    cg_for l = cg_for_begin(c, f, n);
    LLVMValueRef a = cg_load_elem(c, ct, dst, dtype, l.phi);
    LLVMValueRef b = cg_load_elem(c, ct, src, dtype, l.phi);
    cg_store_elem(c, ct, LLVMBuildFAdd(c->b, a, b, ""), dtype, dst, l.phi);
    cg_for_end(c, f, &l);
}

/* acc[v] += buf, elementwise over v's per-device block; for an output
 * with the batch dim first, the microbatch's rows go to their place in
 * the whole batch's block instead.  Only on the stages where v is whole
 * (avail): the forward block's carried value is computed on every stage
 * but is the block's result only on the last, and reduce_over_stages
 * hands the sum to the others. */
static void accumulate(pp_emit *e, const ir_value *v)
{
    cg_ctx *c = e->c;
    int64_t n = ir_local_elems(e->x->m, &v->type);
    if (n <= 0)
        return;
    int def = e->x->p->def_index[v->id];
    uint8_t whole = e->x->avail[v->id];
    /* A pipelined loop's result is the block's only after its last chunk
     * (the forward's v-1, the backward's 0). */
    LLVMBasicBlockRef chunk_after = NULL;
    if (def == e->x->fe || (e->x->trains && def == e->x->be))
        chunk_after = open_if(e, chunk_is(e, def == e->x->fe ? e->v - 1 : 0));
    LLVMBasicBlockRef after = def >= 0 && (e->x->run[def] & ~whole) ? guard_open(e, whole) : NULL;
    if (e->x->rows[v->id]) {
        /* Group g of G (the inputs' row blocks of G devices, pipeline_plan.c,
         * row_groups) to rows [m b/M, (m+1) b/M) of part g of the block. */
        int64_t G = e->x->groups[v->id], bytes = ir_local_bytes(e->x->m, &v->type) / G;
        int64_t part = bytes * e->x->m->pipe.microbatches;
        LLVMValueRef off = LLVMBuildMul(c->b, LLVMBuildZExt(c->b, e->mb, c->t.i64, ""), cg_i64(c, bytes), "");
        for (int64_t g = 0; g < G; g++) {
            LLVMValueRef at = LLVMBuildAdd(c->b, off, cg_i64(c, g * part), "");
            LLVMValueRef dst = LLVMBuildInBoundsGEP2(c->b, c->t.i8, e->accbuf[v->id], &at, 1, "");
            LLVMValueRef src = cg_i64(c, g * bytes);
            src = LLVMBuildInBoundsGEP2(c->b, c->t.i8, e->f->buf[v->id], &src, 1, "");
            LLVMBuildMemCpy(c->b, dst, 1, src, 1, cg_i64(c, bytes));
        }
    } else {
        cg_emit_add_into(c, e->f, e->accbuf[v->id], e->f->buf[v->id], n, v->type.dtype);
    }
    guard_close(e, after);
    guard_close(e, chunk_after);
}

/* After emitting ops lo..hi (outside a loop body, or a loop's stacks
 * after its LoopEnd: `stacks`): the accumulated values they defined are
 * added to their sums, and freed if nothing else in the step reads them. */
static void accumulate_defs(pp_emit *e, int lo, int hi, bool stacks)
{
    const cg_plan *p = e->x->p;
    for (int i = lo; i <= hi; i++) {
        const ir_value *v = p->ops[i]->result;
        if (!e->x->acc[v->id] || (p->ops[i]->loop && !stacks))
            continue;
        accumulate(e, v);
        /* A carried value that is also an output (a forward's last hidden
         * state) still goes to the next stage: the send frees it, and on
         * the last stage the end of the item. */
        if (e->fb.last_use[v->id] > p->nops && !e->sent[v->id]) {
            LLVMValueRef args[] = {e->f->dev, e->f->buf[v->id]};
            LLVMBuildCall2(e->c->b, e->c->rt.free_ty, e->c->rt.free, args, 2, "");
            e->f->buf[v->id] = NULL;
        }
    }
}

/* Forgets every buffer but the inputs' (their microbatch views). */
static void forget(pp_emit *e)
{
    for (int v = 0; v < e->x->m->nvalues; v++)
        if (e->x->p->input_index[v] < 0)
            e->f->buf[v] = NULL;
}

/* Segment s (ops lo..hi, emission points of one item): its frame values
 * loaded, its ops, the frame values it touched stored back. */
static void emit_segment(pp_emit *e, LLVMValueRef out, int lo, int hi)
{
    pp_ctx *x = e->x;
    const cg_plan *p = x->p;
    cg_ctx *c = e->c;
    LLVMBasicBlockRef after = guard_open(e, x->run[lo]);
    forget(e);
    bool *touched = cg_calloc((size_t)x->m->nvalues, sizeof *touched);
    for (int i = 0; i < p->nops; i++) /* fused producers run in their consumer's segment */
        for (int k = 0; k < p->ops[i]->noperands && x->seg[i] == x->seg[lo]; k++) {
            int v = p->ops[i]->operands[k]->id;
            if (x->slot[v] >= 0 && !e->f->buf[v] && p->def_index[v] >= 0 &&
                x->seg[p->def_index[v]] != x->seg[lo]) {
                e->f->buf[v] = LLVMBuildLoad2(c->b, c->t.ptr, slot_ptr(e, v), "");
                touched[v] = true;
            }
        }
    cg_loop lp = {.begin = -1};
    for (int i = lo; i <= hi; i++) {
        if (x->at[i] != i)
            continue;
        int j = cg_run_op(c, e->f, out, &lp, i);
        accumulate_defs(e, i, j, false);
        for (int k = i; k <= j; k++)
            touched[p->ops[k]->result->id] = true;
        if (p->ops[i]->kind == IR_OP_LOOPEND) /* the stacks, complete now */
            for (int k = p->def_index[p->ops[i]->u.loop.begin->result->id] + 1; k < i; k++)
                if (p->ops[k]->kind == IR_OP_LAYERSTACK) {
                    touched[p->ops[k]->result->id] = true;
                    if (x->acc[p->ops[k]->result->id] && !e->f->stack_sum[p->ops[k]->result->id])
                        accumulate_defs(e, k, k, true);
                }
        i = j;
    }
    for (int v = 0; v < x->m->nvalues; v++)
        if (touched[v] && x->slot[v] >= 0) {
            LLVMValueRef val = e->f->buf[v] ? e->f->buf[v] : LLVMConstNull(c->t.ptr);
            LLVMBuildStore(c->b, val, slot_ptr(e, v));
        }
    free(touched);
    guard_close(e, after);
}

/* One half of CollectivePermute `pi` (an op index, passes/pipeline_permute.c;
 * -1: one stage, nothing to move), a stage boundary's transfer: the
 * forward's activation (delta +1, tag parity 0) or the backward's gradient
 * (delta -1, parity 1).  `send`: this stage's block of the permute's
 * operand, the loop's result `v`, goes to stage z + delta and is freed;
 * else the block stage z - delta sent arrives in a new buffer for `v`,
 * the next loop's input (the permute's result, which no op reads: the
 * receiver's loop takes it in place of its operand), slot to slot.  With v
 * chunks the permute is cyclic, the stages a ring (the last stage's chunk
 * c feeds stage 0's chunk c+1), so the edge stage's peer wraps around, and
 * only the ends of the model skip the hop: stage 0's chunk 0 and stage
 * Z-1's chunk v-1.  The tag names the receiving item, 2 (m v + c) +
 * parity, so a receive takes exactly its own message (rt_recv: per sender
 * and tag, in order). */
static void hop(pp_emit *e, int pi, const ir_value *v, bool send)
{
    if (pi < 0)
        return;
    cg_ctx *c = e->c;
    int Z = (int)e->x->m->mesh.axes[e->x->m->pipe.axis].size;
    bool fwd = e->x->p->ops[pi]->u.perm.delta > 0;
    bool up = fwd == send; /* the peer is z+1 */
    LLVMValueRef edge = up ? e->is_last : e->is_first;
    LLVMValueRef at_end = edge;
    if (e->v > 1)
        at_end = LLVMBuildAnd(c->b, edge, chunk_is(e, up ? e->v - 1 : 0), "");
    LLVMBasicBlockRef after = open_if(e, LLVMBuildNot(c->b, at_end, "hop"));
    LLVMValueRef delta = LLVMBuildSelect(c->b, edge, cg_i32(c, up ? -(Z - 1) : Z - 1), cg_i32(c, up ? 1 : -1),
                                         "delta");
    LLVMValueRef tc = e->chunk;
    if (send && e->v > 1) /* across the ring's seam the receiver runs the next chunk */
        tc = LLVMBuildSelect(c->b, edge, LLVMBuildAdd(c->b, e->chunk, cg_i32(c, up ? 1 : -1), ""), e->chunk, "");
    LLVMValueRef item = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, e->mb, cg_i32(c, e->v), ""), tc, "");
    LLVMValueRef tag = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, item, cg_i32(c, 2), ""), cg_i32(c, fwd ? 0 : 1),
                                    "tag");
    int64_t bytes = ir_local_bytes(e->x->m, &v->type);
    LLVMValueRef buf;
    if (send) {
        buf = LLVMBuildLoad2(c->b, c->t.ptr, slot_ptr(e, v->id), "");
        p2p(e, true, delta, tag, buf, bytes);
        LLVMValueRef args[] = {e->f->dev, buf};
        LLVMBuildCall2(c->b, c->rt.free_ty, c->rt.free, args, 2, "");
        LLVMBuildStore(c->b, LLVMConstNull(c->t.ptr), slot_ptr(e, v->id));
    } else {
        LLVMValueRef args[] = {e->f->dev, cg_i64(c, bytes)};
        buf = LLVMBuildCall2(c->b, c->rt.alloc_ty, c->rt.alloc, args, 2, v->tensor);
        p2p(e, false, delta, tag, buf, bytes);
        LLVMBuildStore(c->b, buf, slot_ptr(e, v->id));
    }
    guard_close(e, after);
}

/* Before an interleaved item's loop (LoopBegin lo, LoopEnd hi): each stack
 * of the loop kept in the frame is one buffer for all the stage's layers,
 * made by the microbatch's first chunk to run the loop (`first`) and
 * written by every chunk at its own layers (cg_fn.stack_buf). */
static void chunk_stacks(pp_emit *e, int lo, int hi, LLVMValueRef first)
{
    cg_ctx *c = e->c;
    const cg_plan *p = e->x->p;
    for (int k = lo + 1; k < hi && e->v > 1; k++) {
        const ir_value *v = p->ops[k]->result;
        if (p->ops[k]->kind != IR_OP_LAYERSTACK || e->x->slot[v->id] < 0 || e->f->stack_sum[v->id])
            continue;
        LLVMBasicBlockRef after = open_if(e, first);
        LLVMValueRef args[] = {e->f->dev, cg_i64(c, ir_local_bytes(e->x->m, &v->type))};
        LLVMValueRef buf = LLVMBuildCall2(c->b, c->rt.alloc_ty, c->rt.alloc, args, 2, v->tensor);
        LLVMBuildStore(c->b, buf, slot_ptr(e, v->id));
        guard_close(e, after);
        e->f->stack_buf[v->id] = LLVMBuildLoad2(c->b, c->t.ptr, slot_ptr(e, v->id), "stack");
    }
}

/* Ops lo..hi of one item, segment by segment. */
static void emit_range(pp_emit *e, LLVMValueRef out, int lo, int hi, char item)
{
    pp_ctx *x = e->x;
    int i = lo;
    while (i <= hi) {
        while (i <= hi && (x->item[i] != item || x->at[i] != i || x->run[i] == 0))
            i++;
        if (i > hi)
            break;
        int j = i;
        for (int k = i; k <= hi; k++)
            if (x->seg[k] == x->seg[i] && x->item[k] == item)
                j = k;
        emit_segment(e, out, i, j);
        i = j + 1;
    }
}

/* The whole microbatch views of the inputs that hold the batch dim: rows
 * [m |B|/M, (m+1) |B|/M) of the device's block.  A state stacked on the
 * layers, the batch dim second, is viewed from the microbatch's rows of
 * its first layer; its LayerSlice steps M microbatches' rows per layer
 * (cg_layer_stride). */
static void input_views(pp_emit *e)
{
    const ir_module *m = e->x->m;
    cg_ctx *c = e->c;
    for (int v = 0; v < m->nvalues; v++) {
        const ir_value *val = m->values[v];
        if (e->x->p->input_index[v] < 0)
            continue;
        e->f->buf[v] = e->inbuf[v];
        bool rows = val->type.rank >= 1 && val->type.dims[0] == m->pipe.batch_dim;
        bool state = cg_layer_stride(m, val) > 1;
        if (!rows && !state)
            continue;
        int64_t bytes = ir_local_bytes(m, &val->type);
        if (state) /* one layer's rows of one microbatch */
            bytes /= ir_local_size(m, &val->type, 0);
        LLVMValueRef off = LLVMBuildMul(c->b, LLVMBuildZExt(c->b, e->mb, c->t.i64, ""),
                                        cg_i64(c, bytes), "");
        e->f->buf[v] = LLVMBuildInBoundsGEP2(c->b, c->t.i8, e->inbuf[v], &off, 1, val->tensor);
    }
}

/* Frees what the microbatch's frame still holds. */
static void release_frame(pp_emit *e)
{
    cg_ctx *c = e->c;
    const cg_plan *p = e->x->p;
    for (int v = 0; v < e->x->m->nvalues; v++) {
        int def = p->def_index[v];
        if (e->x->slot[v] < 0 || def < 0 || cg_is_view(p->ops[def]->kind) ||
            p->ops[def]->kind == IR_OP_LOOPBEGIN)
            continue;
        LLVMValueRef ptr = LLVMBuildLoad2(c->b, c->t.ptr, slot_ptr(e, v), "");
        LLVMBasicBlockRef yes = LLVMAppendBasicBlockInContext(c->llctx, e->f->fn, "held");
        LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(c->llctx, e->f->fn, "held.next");
        LLVMBuildCondBr(c->b, LLVMBuildIsNotNull(c->b, ptr, ""), yes, next);
        LLVMPositionBuilderAtEnd(c->b, yes);
        LLVMValueRef args[] = {e->f->dev, ptr};
        LLVMBuildCall2(c->b, c->rt.free_ty, c->rt.free, args, 2, "");
        LLVMBuildStore(c->b, LLVMConstNull(c->t.ptr), slot_ptr(e, v));
        LLVMBuildBr(c->b, next);
        LLVMPositionBuilderAtEnd(c->b, next);
    }
}

/* AllReduce over the stage axis of `v`'s accumulator (stages that do not
 * compute it hold zeros), into a new buffer. */
static void reduce_over_stages(pp_emit *e, const ir_value *v)
{
    cg_ctx *c = e->c;
    const ir_module *m = e->x->m;
    rt_coll_desc d;
    memset(&d, 0, sizeof d);
    d.kind = RT_ALLREDUCE;
    d.dtype = (int32_t)v->type.dtype;
    d.naxes = 1;
    d.axes[0] = m->pipe.axis;
    d.rank = v->type.rank;
    cg_local_shape(m, &v->type, d.in_shape);
    cg_local_shape(m, &v->type, d.out_shape);
    int64_t bytes = ir_local_bytes(m, &v->type);
    if (e->x->rows[v->id]) { /* the whole batch's rows */
        d.in_shape[0] *= m->pipe.microbatches;
        d.out_shape[0] *= m->pipe.microbatches;
        bytes *= m->pipe.microbatches;
    }
    d.dim = d.dim2 = -1;
    d.op_id = e->x->p->def_index[v->id];
    d.reduce_op = RT_REDUCE_SUM;
    for (int a = 0; a < RT_MAX_AXES; a++)
        d.axis_dim[a] = d.axis_dim2[a] = -1;
    LLVMValueRef args[] = {e->f->dev, cg_i64(c, bytes)};
    LLVMValueRef sum = LLVMBuildCall2(c->b, c->rt.alloc_ty, c->rt.alloc, args, 2, v->tensor);
    LLVMValueRef cargs[] = {e->f->dev, cg_coll_desc_const(c, &d, "stage_sum"), e->accbuf[v->id], sum};
    LLVMBuildCall2(c->b, c->rt.coll_ty, c->rt.coll, cargs, 4, "");
    LLVMValueRef fargs[] = {e->f->dev, e->accbuf[v->id]};
    LLVMBuildCall2(c->b, c->rt.free_ty, c->rt.free, fargs, 2, "");
    e->accbuf[v->id] = sum;
}

/* The plans the emission runs with: `fb` for the microbatches, where an
 * accumulated value is no output and lives to its last read by the
 * forward or backward (past the end if none: accumulate_defs frees it),
 * and `end` for the update, where its accumulator lives to its last read
 * there (or to the run's end). */
static void make_plans(pp_emit *e)
{
    const pp_ctx *x = e->x;
    const cg_plan *p = x->p;
    int nv = x->m->nvalues;
    e->fb = e->end = *p;
    e->fb.last_use = cg_calloc((size_t)nv, sizeof(int));
    e->fb.out_index = cg_calloc((size_t)nv, sizeof(int));
    e->end.last_use = cg_calloc((size_t)nv, sizeof(int));
    e->end.out_index = cg_calloc((size_t)nv, sizeof(int));
    /* The loops' carried values go to the neighbouring stage after the
     * loop even when nothing on this stage reads them (a backward whose
     * gradient no op before the block needs): the send frees them, and on
     * the stage that sends nothing the end of the microbatch does. */
    bool *sent = e->sent = cg_calloc((size_t)nv, sizeof *sent);
    sent[p->ops[x->fe]->result->id] = true;
    if (x->trains)
        sent[p->ops[x->be]->result->id] = true;
    for (int v = 0; v < nv; v++) {
        e->fb.last_use[v] = e->end.last_use[v] = p->last_use[v];
        /* The permute that reads a loop's result runs as the hop (its op
         * emits nothing), so it is no use of the buffer. */
        int lu = p->last_use[v];
        bool perm = lu >= 0 && lu < p->nops && p->ops[lu]->kind == IR_OP_PERMUTE;
        if (sent[v] && (p->last_use[v] < 0 || perm))
            e->fb.last_use[v] = p->nops + 1;
        e->fb.out_index[v] = e->end.out_index[v] = x->acc[v] ? -1 : p->out_index[v];
        if (!x->acc[v])
            continue;
        int last = -1;
        for (int i = 0; i < p->nops; i++)
            for (int k = 0; k < p->ops[i]->noperands && x->item[i] != 'E'; k++)
                if (p->ops[i]->operands[k]->id == v) {
                    const ir_op *lp = p->ops[i]->loop;
                    int at = lp ? p->def_index[lp->u.loop.end->result->id] : x->at[i];
                    last = at > last ? at : last;
                }
        e->fb.last_use[v] = last >= 0 ? last : p->nops + 1;
        if (p->last_use[v] < 0 || p->last_use[v] >= p->nops || x->item[p->last_use[v]] != 'E')
            e->end.last_use[v] = p->nops;
    }
    /* Interleaved: a value a loop body reads from outside it (a forward
     * stack the backward reads, a mask every layer reads) is read again by
     * the microbatch's next chunk, so no chunk frees it: the microbatch's
     * last item does (release_frame). */
    const int loops[2][2] = {{x->fb, x->fe}, {x->bb, x->be}};
    for (int l = 0; l < (x->trains ? 2 : 1) && e->v > 1; l++)
        for (int i = loops[l][0] + 1; i < loops[l][1]; i++)
            for (int k = 0; k < p->ops[i]->noperands; k++) {
                int a = p->ops[i]->operands[k]->id, def = p->def_index[a];
                if (def >= 0 && (def < loops[l][0] || def > loops[l][1]))
                    e->fb.last_use[a] = p->nops + 1;
            }
}

void cg_emit_pipelined_body(cg_ctx *c, cg_fn *f, LLVMValueRef in, LLVMValueRef out)
{
    const ir_module *m = f->m;
    const cg_plan *p = f->plan;
    int n = p->nops, nv = m->nvalues;
    const ir_pipeline *pp = &m->pipe;
    int Z = (int)m->mesh.axes[pp->axis].size;
    pp_ctx x;
    cg_pp_init(&x, m, p);
    (void)cg_pp_classify(&x, c->d); /* cg_pipeline_check passed */
    cg_pp_segment(&x);
    pp_emit e = {.c = c, .f = f, .x = &x, .v = pp->chunks > 1 ? pp->chunks : 1, .chunk = cg_i32(c, 0)};
    make_plans(&e);
    e.accbuf = cg_calloc((size_t)nv, sizeof *e.accbuf);
    e.inbuf = cg_calloc((size_t)nv, sizeof *e.inbuf);
    memcpy(e.inbuf, f->buf, (size_t)nv * sizeof *e.inbuf);

    /* The stage, the frames, the zeroed accumulators. */
    LLVMValueRef cargs[] = {f->dev, cg_i32(c, pp->axis)};
    e.stage = LLVMBuildTrunc(c->b, LLVMBuildCall2(c->b, c->rt.coord_ty, c->rt.coord, cargs, 2, "stage"),
                             c->t.i32, "");
    e.is_first = LLVMBuildICmp(c->b, LLVMIntEQ, e.stage, cg_i32(c, 0), "first");
    e.is_last = LLVMBuildICmp(c->b, LLVMIntEQ, e.stage, cg_i32(c, Z - 1), "last");
    int64_t frame_bytes = (int64_t)(x.nslots > 0 ? x.nslots : 1) * 8;
    LLVMValueRef aargs[] = {f->dev, cg_i64(c, frame_bytes * pp->microbatches)};
    LLVMValueRef frames = LLVMBuildCall2(c->b, c->rt.alloc_ty, c->rt.alloc, aargs, 2, "frames");
    LLVMBuildMemSet(c->b, frames, LLVMConstInt(c->t.i8, 0, 0), cg_i64(c, frame_bytes * pp->microbatches), 8);
    for (int v = 0; v < nv; v++) {
        if (!x.acc[v])
            continue;
        int64_t bytes = ir_local_bytes(m, &m->values[v]->type) * (x.rows[v] ? pp->microbatches : 1);
        LLVMValueRef args[] = {f->dev, cg_i64(c, bytes)};
        e.accbuf[v] = LLVMBuildCall2(c->b, c->rt.alloc_ty, c->rt.alloc, args, 2, "acc");
        LLVMBuildMemSet(c->b, e.accbuf[v], LLVMConstInt(c->t.i8, 0, 0), cg_i64(c, bytes), 8);
    }
    /* A gradient stacked by the backward loop and read only by the update
     * is summed there, layer by layer, straight into its accumulator: one
     * pass over it per microbatch rather than a stack and then a sum. */
    f->stack_sum = cg_calloc((size_t)nv, sizeof *f->stack_sum);
    for (int i = 0; i < n; i++) {
        int v = p->ops[i]->result->id;
        if (p->ops[i]->kind == IR_OP_LAYERSTACK && x.acc[v] && !x.rows[v] && x.slot[v] < 0 &&
            e.fb.last_use[v] > n)
            f->stack_sum[v] = e.accbuf[v];
    }
    /* The schedule: stage z's items from z * nitems, (mb v + c) * 4 + kind
     * (0 F, 1 B, 2 W; c the item's chunk, 0 unless interleaved). */
    int32_t *codes = cg_calloc((size_t)Z * (size_t)pp->nitems, sizeof *codes);
    for (int k = 0; k < Z * pp->nitems; k++)
        codes[k] = (pp->order[k].microbatch * e.v + pp->order[k].chunk) * 4 + (pp->order[k].kind == 'B') +
                   2 * (pp->order[k].kind == 'W');
    LLVMValueRef *cv = cg_calloc((size_t)Z * (size_t)pp->nitems, sizeof *cv);
    for (int k = 0; k < Z * pp->nitems; k++)
        cv[k] = cg_i32(c, codes[k]);
    LLVMValueRef table = cg_const_global(c, LLVMConstArray2(c->t.i32, cv, (uint64_t)Z * (uint64_t)pp->nitems),
                                         "schedule");
    free(cv);
    free(codes);

    /* Trip k runs the row's item k, or with the greedy W fill the item
     * the runtime picks (pipeline_fill.c). */
    LLVMValueRef fill = cg_pp_fill_on(&x) ? cg_pp_fill_begin(c, f, pp->nitems) : NULL;
    f->plan = &e.fb;
    cg_for items = cg_for_begin(c, f, pp->nitems);
    LLVMValueRef row = LLVMBuildMul(c->b, LLVMBuildZExt(c->b, e.stage, c->t.i64, ""), cg_i64(c, pp->nitems), "");
    LLVMValueRef pos = fill ? cg_pp_fill_next(c, f, fill, table, row, pp->nitems) : items.phi;
    LLVMValueRef idx = LLVMBuildAdd(c->b, row, pos, "");
    LLVMValueRef code = LLVMBuildLoad2(c->b, c->t.i32, LLVMBuildInBoundsGEP2(c->b, c->t.i32, table, &idx, 1, ""),
                                       "item");
    LLVMValueRef unit = LLVMBuildLShr(c->b, code, cg_i32(c, 2), "");
    e.mb = LLVMBuildUDiv(c->b, unit, cg_i32(c, e.v), "mb");
    if (e.v > 1) { /* one chunk: its layers of the stage's stacks */
        e.chunk = LLVMBuildURem(c->b, unit, cg_i32(c, e.v), "chunk");
        f->chunk_trips = ir_loop_trips(m, p->ops[x.fb]) / e.v;
        f->chunk_first = LLVMBuildMul(c->b, LLVMBuildZExt(c->b, e.chunk, c->t.i64, ""),
                                      cg_i64(c, f->chunk_trips), "chunk.first");
    }
    LLVMValueRef kind = LLVMBuildAnd(c->b, code, cg_i32(c, 3), "kind");
    LLVMValueRef foff = LLVMBuildMul(c->b, LLVMBuildZExt(c->b, e.mb, c->t.i64, ""), cg_i64(c, frame_bytes), "");
    e.frame = LLVMBuildInBoundsGEP2(c->b, c->t.i8, frames, &foff, 1, "frame");
    input_views(&e);
    LLVMBasicBlockRef fblk = LLVMAppendBasicBlockInContext(c->llctx, f->fn, "forward");
    LLVMBasicBlockRef bblk = LLVMAppendBasicBlockInContext(c->llctx, f->fn, "backward");
    LLVMBasicBlockRef wblk = LLVMAppendBasicBlockInContext(c->llctx, f->fn, "weight_grad");
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(c->llctx, f->fn, "item.done");
    LLVMValueRef sw = LLVMBuildSwitch(c->b, kind, fblk, 2);
    LLVMAddCase(sw, cg_i32(c, 1), bblk);
    LLVMAddCase(sw, cg_i32(c, 2), wblk);
    LLVMValueRef *views = cg_calloc((size_t)nv, sizeof *views);
    memcpy(views, f->buf, (size_t)nv * sizeof *views);

    /* F m (.c): the ops before the loop with chunk 0, the loop over the
     * chunk's layers, the ops after it with chunk v-1 (without chunks:
     * always), and the hops between. */
    f->stack_buf = cg_calloc((size_t)nv, sizeof *f->stack_buf);
    LLVMPositionBuilderAtEnd(c->b, fblk);
    item_mark(&e, 'F');
    LLVMBasicBlockRef once = open_if(&e, chunk_is(&e, 0));
    emit_range(&e, out, 0, x.fb - 1, 'F');
    guard_close(&e, once);
    hop(&e, x.fp, p->ops[x.fb]->operands[0], false);
    chunk_stacks(&e, x.fb, x.fe, chunk_is(&e, 0));
    emit_range(&e, out, x.fb, x.fe, 'F');
    memset(f->stack_buf, 0, (size_t)nv * sizeof *f->stack_buf);
    hop(&e, x.fp, p->ops[x.fe]->result, true);
    once = open_if(&e, chunk_is(&e, e.v - 1));
    emit_range(&e, out, x.fe + 1, x.bb - 1, 'F');
    if (!x.trains) /* what a stage never freed itself */
        release_frame(&e);
    guard_close(&e, once);
    item_mark(&e, 0);
    LLVMBuildBr(c->b, join);

    /* B m (.c): the loss's backward with chunk v-1, the backward loop over
     * the chunk's layers, the ops after it (the embedding's gradient) and
     * the frame's release with chunk 0. */
    LLVMPositionBuilderAtEnd(c->b, bblk);
    memcpy(f->buf, views, (size_t)nv * sizeof *views);
    item_mark(&e, 'B');
    once = NULL;
    if (x.trains) {
        once = open_if(&e, chunk_is(&e, e.v - 1));
        emit_range(&e, out, x.fe + 1, x.bb - 1, 'B');
        guard_close(&e, once);
        hop(&e, x.bp, p->ops[x.bb]->operands[0], false);
        chunk_stacks(&e, x.bb, x.be, chunk_is(&e, e.v - 1));
        emit_range(&e, out, x.bb, x.be, 'B');
        memset(f->stack_buf, 0, (size_t)nv * sizeof *f->stack_buf);
        hop(&e, x.bp, p->ops[x.be]->result, true);
        once = open_if(&e, chunk_is(&e, 0));
        emit_range(&e, out, x.be + 1, n - 1, 'B');
    }
    /* With a W item to come, the frame holds what it reads until then. */
    if (x.wb < 0)
        release_frame(&e);
    guard_close(&e, once);
    item_mark(&e, 0);
    LLVMBuildBr(c->b, join);

    /* Zero-bubble's W m: the dL/dW loop and what reads its stacks, on the
     * values B m left in the frame; no transfers.  Its microbatch's frame
     * is released here, after its last item. */
    LLVMPositionBuilderAtEnd(c->b, wblk);
    memcpy(f->buf, views, (size_t)nv * sizeof *views);
    if (x.wb >= 0) {
        item_mark(&e, 'W');
        emit_range(&e, out, x.be + 1, n - 1, 'W');
        release_frame(&e);
        item_mark(&e, 0);
    }
    LLVMBuildBr(c->b, join);
    LLVMPositionBuilderAtEnd(c->b, join);
    cg_for_end(c, f, &items);
    f->chunk_trips = 0; /* the update's ops see whole stacks */
    free(views);

    /* The step's sums, then the update on every stage. */
    for (int v = 0; v < nv; v++)
        f->buf[v] = p->input_index[v] >= 0 ? e.inbuf[v] : NULL;
    for (int v = 0; v < nv; v++) {
        if (!x.acc[v])
            continue;
        if ((x.avail[v] & (ST_FIRST | ST_LAST)) != (ST_FIRST | ST_LAST))
            reduce_over_stages(&e, m->values[v]);
        f->buf[v] = e.accbuf[v];
    }
    LLVMValueRef fargs[] = {f->dev, frames};
    LLVMBuildCall2(c->b, c->rt.free_ty, c->rt.free, fargs, 2, "");
    if (fill)
        cg_pp_fill_end(c, f, fill);
    f->plan = &e.end;
    cg_loop lp = {.begin = -1};
    for (int i = x.first_end; i < n; i++)
        if (x.at[i] == i && x.item[i] == 'E')
            i = cg_run_op(c, f, out, &lp, i);
    /* A forward's outputs hold the whole batch: copied out here, at
     * M times a microbatch's bytes (the tail copies one value's). */
    for (int j = 0; j < m->noutputs; j++) {
        const ir_value *v = m->outputs[j].value;
        int k = p->rt_output[j];
        if (k < 0 || !x.rows[v->id] || e.end.out_index[v->id] >= 0)
            continue;
        LLVMValueRef dst = cg_load_ptr_at(c, out, k, m->outputs[j].name);
        LLVMBuildMemCpy(c->b, dst, 1, f->buf[v->id], 1,
                        cg_i64(c, ir_local_bytes(m, &v->type) * pp->microbatches));
        LLVMValueRef args[] = {f->dev, f->buf[v->id]};
        LLVMBuildCall2(c->b, c->rt.free_ty, c->rt.free, args, 2, "");
        f->buf[v->id] = dst;
        e.end.out_index[v->id] = k;
    }
    cg_emit_run_tail(c, f, in, out);
    f->plan = p;
    free(f->stack_sum);
    f->stack_sum = NULL;
    free(f->stack_buf);
    f->stack_buf = NULL;
    f->chunk_trips = 0;
    f->chunk_first = NULL;
    free(e.sent);
    free(e.fb.last_use);
    free(e.fb.out_index);
    free(e.end.last_use);
    free(e.end.out_index);
    free(e.accbuf);
    free(e.inbuf);
    cg_pp_free(&x);
}
