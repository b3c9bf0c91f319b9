/*
 * run.c - the SPMD run function `void run(rt_device *dev, void *const *in,
 * void *const *out)`.
 *
 * The same code runs on every device; it only ever sees per-device blocks.
 * Inputs and params are in[k] (value-id order), outputs out[j] (the order of
 * ir_module.outputs), both owned by the runtime.  For each op in program
 * order that is not fused into a later elementwise loop (plan.c):
 *
 *     dst = out[j] if the result is output j, else the buffer of an operand
 *           that dies here (in-place elementwise, plan.c), else
 *           rt_alloc(dev, bytes)
 *     rt_op_begin(dev, i)
 *     Einsum        -> rt_einsum(dev, &const_desc, a, b|NULL, dst), or a loop
 *                      nest if unrolled (ir_einsum_unrolled_terms, elementwise.c)
 *     AllGather ... -> rt_collective(dev, &const_desc, src, dst)
 *     Elementwise   -> an inline loop nest (elementwise.c)
 *     MeshSlice     -> rt_meshslice(dev, &const_desc, a, b, dst) (meshslice.c)
 *     rt_op_end(dev, i)
 *     rt_free(dev, p) for every buffer whose last read was op i
 *
 * A repeated block (LoopBegin .. LoopEnd) is one LLVM loop over the layer
 * index l: the body's ops are emitted once, a LayerSlice is a pointer to
 * layer l of its param, and the carried value lives in one buffer for the
 * whole loop that the LoopEnd copies the body's new value into (plan.c).
 * A LayerStack's buffer is made before the loop, and iteration l copies
 * the value into its block l.  A reverse loop visits l = |L|-1 .. 0.
 *
 * Finally an output that is an input, or a value that is several outputs,
 * is copied into its out buffer with memcpy.  Descriptors are private
 * constant globals: the runtime only reads them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_internal.h"
#include "einrt.h"

void cg_local_shape(const ir_module *m, const ir_type *t, int64_t *shape)
{
    for (int d = 0; d < t->rank; d++)
        shape[d] = ir_local_size(m, t, d);
}

LLVMValueRef cg_const_i64s(cg_ctx *c, const int64_t *v, int n, int len, int64_t pad)
{
    LLVMValueRef e[RT_MAX_RANK * 3 + 8];
    for (int i = 0; i < len; i++)
        e[i] = LLVMConstInt(c->t.i64, (unsigned long long)(i < n ? v[i] : pad), 1);
    return LLVMConstArray2(c->t.i64, e, (uint64_t)len);
}

LLVMValueRef cg_const_i32s(cg_ctx *c, const int32_t *v, int n, int len, int32_t pad)
{
    LLVMValueRef e[RT_MAX_RANK * 3 + 8];
    for (int i = 0; i < len; i++)
        e[i] = LLVMConstInt(c->t.i32, (unsigned long long)(int64_t)(i < n ? v[i] : pad), 1);
    return LLVMConstArray2(c->t.i32, e, (uint64_t)len);
}

LLVMValueRef cg_i32(cg_ctx *c, int64_t v)
{
    return LLVMConstInt(c->t.i32, (unsigned long long)v, 1);
}

LLVMValueRef cg_i64(cg_ctx *c, int64_t v)
{
    return LLVMConstInt(c->t.i64, (unsigned long long)v, 1);
}

/* Operand k of einsum `op` as the runtime reads it: the source of a cast
 * folded into it (ir_folded_cast_source; plan.c emits no cast), else the
 * operand itself. */
static const ir_value *einsum_read(const ir_module *m, const ir_op *op, int k)
{
    const ir_value *src = ir_folded_cast_source(m, op->operands[k]);
    return src ? src : op->operands[k];
}

/* The einsum labels of operand k's positions as the runtime reads it: its
 * own, or for a folded cast's source, the label of the cast's result
 * position that holds the same dim (a cast may transpose). */
static void einsum_read_labels(const ir_module *m, const ir_op *op, int k, int32_t *lab)
{
    const ir_value *v = op->operands[k], *src = einsum_read(m, op, k);
    if (src == v) {
        for (int j = 0; j < v->type.rank; j++)
            lab[j] = op->u.einsum.labels[k][j];
        return;
    }
    const ir_op *cast = v->def;
    for (int j = 0; j < src->type.rank; j++)
        for (int r = 0; r < v->type.rank; r++)
            if (cast->u.ew.result_labels[r] == cast->u.ew.labels[0][j])
                lab[j] = op->u.einsum.labels[k][r];
}

/* The constant rt_einsum_desc of `op` (op index `id`). */
static LLVMValueRef einsum_desc(cg_ctx *c, const ir_module *m, const ir_op *op, int id)
{
    const ir_value *vals[3] = {einsum_read(m, op, 0),
                               op->noperands > 1 ? einsum_read(m, op, 1) : NULL, op->result};
    LLVMValueRef ranks[3], shapes[3], labels[3];
    for (int k = 0; k < 3; k++) {
        int64_t shape[RT_MAX_RANK] = {0};
        int32_t lab[RT_MAX_RANK] = {0};
        int rank = 0;
        if (vals[k]) {
            rank = vals[k]->type.rank;
            cg_local_shape(m, &vals[k]->type, shape);
            if (k == 2)
                for (int j = 0; j < rank; j++)
                    lab[j] = op->u.einsum.result_labels[j];
            else
                einsum_read_labels(m, op, k, lab);
        }
        ranks[k] = cg_i32(c, rank);
        shapes[k] = cg_const_i64s(c, shape, rank, RT_MAX_RANK, 0);
        labels[k] = cg_const_i32s(c, lab, rank, RT_MAX_RANK, 0);
    }
    /* Mixed when an operand is read at another dtype than the result's. */
    ir_dtype rdt = op->result->type.dtype;
    int32_t odt[2] = {(int32_t)vals[0]->type.dtype, vals[1] ? (int32_t)vals[1]->type.dtype
                                                            : (int32_t)rdt};
    bool mixed = odt[0] != (int32_t)rdt || odt[1] != (int32_t)rdt;
    LLVMTypeRef i64_rank = LLVMArrayType2(c->t.i64, RT_MAX_RANK);
    LLVMTypeRef i32_rank = LLVMArrayType2(c->t.i32, RT_MAX_RANK);
    LLVMValueRef f[] = {
        cg_i32(c, (int)rdt),
        cg_i32(c, op->noperands),
        LLVMConstArray2(c->t.i32, ranks, 3),
        LLVMConstArray2(i64_rank, shapes, 3),
        LLVMConstArray2(i32_rank, labels, 3),
        LLVMConstReal(c->t.f64, op->u.einsum.scale),
        cg_i32(c, id),
        cg_i32(c, mixed),
        cg_const_i32s(c, odt, 2, 2, 0),
    };
    return cg_const_global(c, LLVMConstNamedStruct(c->t.einsum_desc, f, sizeof f / sizeof f[0]),
                           "einsum_desc");
}

/* The rt_reduce_op with which AllReduce / ReduceScatter `op` combines the
 * group's partial results (op->u.coll.reduce: sums, or the partial maxima
 * and minima of a max / min over a sharded dim).  Never called for other
 * kinds (their reduce_op is 0). */
static int coll_reduce_op(const ir_op *op)
{
    switch (op->u.coll.reduce) {
    case IR_RED_SUM: return RT_REDUCE_SUM;
    case IR_RED_MAX: return RT_REDUCE_MAX;
    case IR_RED_MIN: return RT_REDUCE_MIN;
    case IR_RED_ARGMAX: break; /* never a partial result (verify.c) */
    }
    return RT_REDUCE_SUM;
}

LLVMValueRef cg_coll_desc_const(cg_ctx *c, const rt_coll_desc *d, const char *prefix)
{
    LLVMValueRef f[] = {
        cg_i32(c, d->kind),
        cg_i32(c, d->dtype),
        cg_i32(c, d->naxes),
        cg_const_i32s(c, d->axes, RT_MAX_AXES, RT_MAX_AXES, 0),
        cg_i32(c, d->rank),
        cg_const_i64s(c, d->in_shape, d->rank, RT_MAX_RANK, 0),
        cg_const_i64s(c, d->out_shape, d->rank, RT_MAX_RANK, 0),
        cg_i32(c, d->dim),
        cg_i32(c, d->dim2),
        cg_i32(c, d->op_id),
        cg_i32(c, d->reduce_op),
        cg_const_i32s(c, d->axis_dim, RT_MAX_AXES, RT_MAX_AXES, 0),
        cg_const_i32s(c, d->axis_dim2, RT_MAX_AXES, RT_MAX_AXES, 0),
    };
    return cg_const_global(c, LLVMConstNamedStruct(c->t.coll_desc, f, sizeof f / sizeof f[0]), prefix);
}

/* The constant rt_coll_desc of resharding `op` (op index `id`); `reduce_op`
 * (enum rt_reduce_op) for AllReduce and ReduceScatter, else RT_REDUCE_SUM.
 * A collective whose axes work along different dims gets RT_DIM_PER_AXIS
 * and its per-axis dims (axis_dim, axis_dim2); any other leaves those -1,
 * as a descriptor emitted before they existed would not have them. */
static LLVMValueRef coll_desc(cg_ctx *c, const ir_module *m, const ir_op *op, int id,
                              int reduce_op)
{
    rt_coll_desc d;
    memset(&d, 0, sizeof d);
    d.kind = RT_SLICE;
    d.dim = op->u.coll.dim;
    d.dim2 = -1;
    switch (op->kind) {
    case IR_OP_ALLGATHER: d.kind = RT_ALLGATHER; break;
    case IR_OP_REDUCESCATTER: d.kind = RT_REDUCESCATTER; break;
    case IR_OP_ALLREDUCE: d.kind = RT_ALLREDUCE; d.dim = -1; break;
    case IR_OP_ALLTOALL:
        /* The IR's AllToAll removes `axes` from dim `dim` (so that dim's
         * per-device block grows) and appends them to dim `dim2` (whose block
         * is split).  The runtime's `dim` is the dim that grows and `dim2`
         * the dim that is split: the same numbering, no swap (also per
         * axis). */
        d.kind = RT_ALLTOALL;
        d.dim2 = op->u.coll.dim2;
        break;
    default: d.kind = RT_SLICE; break;
    }
    cg_local_shape(m, &op->operands[0]->type, d.in_shape);
    cg_local_shape(m, &op->result->type, d.out_shape);
    d.dtype = (int32_t)op->result->type.dtype;
    d.rank = op->result->type.rank;
    d.naxes = op->u.coll.naxes;
    for (int a = 0; a < RT_MAX_AXES; a++) {
        bool per_axis = a < op->u.coll.naxes && op->u.coll.dim == IR_COLL_PER_AXIS;
        d.axes[a] = a < op->u.coll.naxes ? op->u.coll.axes[a] : 0;
        d.axis_dim[a] = per_axis ? ir_coll_dim(&op->u.coll, a) : -1;
        d.axis_dim2[a] = per_axis && d.kind == RT_ALLTOALL ? ir_coll_dim2(&op->u.coll, a) : -1;
    }
    if (op->u.coll.dim == IR_COLL_PER_AXIS)
        d.dim = d.dim2 = RT_DIM_PER_AXIS;
    d.op_id = id;
    d.reduce_op = d.kind == RT_ALLREDUCE || d.kind == RT_REDUCESCATTER ? reduce_op : RT_REDUCE_SUM;
    return cg_coll_desc_const(c, &d, "coll_desc");
}

LLVMValueRef cg_load_ptr_at(cg_ctx *c, LLVMValueRef arr, int k, const char *name)
{
    LLVMValueRef idx = cg_i64(c, k);
    LLVMValueRef slot = LLVMBuildInBoundsGEP2(c->b, c->t.ptr, arr, &idx, 1, "");
    return LLVMBuildLoad2(c->b, c->t.ptr, slot, name);
}

static void call_mark(cg_ctx *c, cg_fn *f, LLVMValueRef fn, int id)
{
    LLVMValueRef args[] = {f->dev, cg_i32(c, id)};
    LLVMBuildCall2(c->b, c->rt.mark_ty, fn, args, 2, "");
}

/* Whether value v owns a scratch buffer this function frees: not an input
 * or output, not a view of one layer of a param, not a loop's carried
 * buffer at the top of the body (the LoopEnd's result owns it). */
static bool owns_buffer(const cg_fn *f, int v)
{
    const cg_plan *p = f->plan;
    if (!f->buf[v] || p->input_index[v] >= 0 || p->out_index[v] >= 0)
        return false;
    int def = p->def_index[v];
    return def < 0 || (!cg_is_view(p->ops[def]->kind) && p->ops[def]->kind != IR_OP_LOOPBEGIN);
}

void cg_free_dead(cg_ctx *c, cg_fn *f, int i, int lo, int hi)
{
    const cg_plan *p = f->plan;
    for (int v = 0; v < f->m->nvalues; v++) {
        int def = p->def_index[v];
        if (def < lo || def > hi || !owns_buffer(f, v))
            continue;
        int last = p->last_use[v] >= 0 ? p->last_use[v] : def;
        if (last != i)
            continue;
        LLVMValueRef args[] = {f->dev, f->buf[v]};
        LLVMBuildCall2(c->b, c->rt.free_ty, c->rt.free, args, 2, "");
        f->buf[v] = NULL; /* freed: nothing reads or frees it again */
    }
}

/* The iterations loop `begin` runs in this emission: one chunk's layers
 * in an interleaved pipelined run (cg_fn.chunk_trips), else its local trip
 * count. */
static int64_t loop_trips(const cg_fn *f, const ir_op *begin)
{
    if (f->chunk_trips > 0 && begin->u.loop.dim == f->m->pipe.dim)
        return f->chunk_trips;
    return ir_loop_trips(f->m, begin);
}

/* LoopBegin, op index i: the carried value gets one buffer for the whole
 * loop (the output's, if the value after the loop is one), filled with the
 * value entering the loop; then the loop's first block with the layer
 * index l = phi(0, l + 1). */
static void emit_loop_begin(cg_ctx *c, cg_fn *f, LLVMValueRef out, int i, cg_loop *lp)
{
    const cg_plan *p = f->plan;
    const ir_op *op = p->ops[i];
    const ir_value *after = op->u.loop.end->result;
    int64_t bytes = ir_local_bytes(f->m, &op->result->type);
    LLVMValueRef carry;
    if (p->out_index[after->id] >= 0) {
        carry = cg_load_ptr_at(c, out, p->out_index[after->id], after->tensor);
    } else {
        LLVMValueRef args[] = {f->dev, cg_i64(c, bytes)};
        carry = LLVMBuildCall2(c->b, c->rt.alloc_ty, c->rt.alloc, args, 2, "carry");
    }
    call_mark(c, f, c->rt.op_begin, i);
    LLVMBuildMemCpy(c->b, carry, 1, f->buf[op->operands[0]->id], 1, cg_i64(c, bytes));
    call_mark(c, f, c->rt.op_end, i);
    f->buf[op->result->id] = carry;
    f->buf[after->id] = carry;
    /* The body's stacks, one buffer each for all layers. */
    for (int j = i + 1; j < p->nops && p->ops[j] != op->u.loop.end; j++) {
        const ir_op *s = p->ops[j];
        if (s->kind != IR_OP_LAYERSTACK)
            continue;
        if (f->stack_sum && f->stack_sum[s->result->id]) { /* summed into (pipeline.c) */
            f->buf[s->result->id] = f->stack_sum[s->result->id];
            continue;
        }
        if (f->stack_buf && f->stack_buf[s->result->id]) { /* an earlier chunk's (pipeline.c) */
            f->buf[s->result->id] = f->stack_buf[s->result->id];
            continue;
        }
        if (p->out_index[s->result->id] >= 0) { /* filled in place */
            f->buf[s->result->id] = cg_load_ptr_at(c, out, p->out_index[s->result->id], s->result->tensor);
            continue;
        }
        LLVMValueRef args[] = {f->dev, cg_i64(c, ir_local_bytes(f->m, &s->result->type))};
        f->buf[s->result->id] = LLVMBuildCall2(c->b, c->rt.alloc_ty, c->rt.alloc, args, 2,
                                               s->result->tensor);
    }
    cg_free_dead(c, f, i, -1, i - 1); /* the value entering, if this was its last read */
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(c->b);
    lp->begin = i;
    lp->body = LLVMAppendBasicBlockInContext(c->llctx, f->fn, "layer");
    LLVMBuildBr(c->b, lp->body);
    LLVMPositionBuilderAtEnd(c->b, lp->body);
    lp->layer = LLVMBuildPhi(c->b, c->t.i64, "l");
    LLVMValueRef zero = cg_i64(c, 0);
    LLVMAddIncoming(lp->layer, &zero, &pre, 1);
    int64_t trips = loop_trips(f, op->u.loop.begin);
    lp->index = op->u.loop.reverse ? LLVMBuildSub(c->b, cg_i64(c, trips - 1), lp->layer, "layer.rev")
                                   : lp->layer;
    if (trips != ir_loop_trips(f->m, op->u.loop.begin)) /* one chunk: its layers of the stacks */
        lp->index = LLVMBuildAdd(c->b, f->chunk_first, lp->index, "layer.chunk");
}

/* LoopEnd, op index i: the body's new value goes into the carried buffer,
 * the body's dead buffers are freed, and l + 1 < |L| branches back; after
 * the loop, the buffers made before it whose last read was in the body. */
static void emit_loop_end(cg_ctx *c, cg_fn *f, int i, cg_loop *lp)
{
    const cg_plan *p = f->plan;
    const ir_op *op = p->ops[i];
    const ir_value *top = op->u.loop.begin->result;
    int64_t bytes = ir_local_bytes(f->m, &top->type);
    call_mark(c, f, c->rt.op_begin, i);
    LLVMBuildMemCpy(c->b, f->buf[top->id], 1, f->buf[op->operands[0]->id], 1, cg_i64(c, bytes));
    call_mark(c, f, c->rt.op_end, i);
    cg_free_dead(c, f, i, lp->begin + 1, i - 1);
    LLVMValueRef next = LLVMBuildAdd(c->b, lp->layer, cg_i64(c, 1), "l.next");
    int64_t trips = loop_trips(f, op->u.loop.begin);
    LLVMValueRef more = LLVMBuildICmp(c->b, LLVMIntSLT, next, cg_i64(c, trips), "more");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(c->b);
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(c->llctx, f->fn, "layers.done");
    LLVMBuildCondBr(c->b, more, lp->body, exit);
    LLVMAddIncoming(lp->layer, &next, &latch, 1);
    LLVMPositionBuilderAtEnd(c->b, exit);
    cg_free_dead(c, f, i, -1, lp->begin - 1);
    cg_free_dead(c, f, i, i, i); /* the value after the loop, if nobody reads it */
    lp->begin = -1;
    lp->layer = lp->index = NULL;
}

int64_t cg_layer_stride(const ir_module *m, const ir_value *v)
{
    const ir_pipeline *pp = &m->pipe;
    if (v->kind != IR_VAL_STATE || pp->batch_dim < 0 || pp->microbatches < 1 || v->type.rank < 2 ||
        v->type.dims[0] != pp->dim || v->type.dims[1] != pp->batch_dim)
        return 1;
    return pp->microbatches;
}

/* LayerSlice: layer l of a stacked param is the block at byte offset
 * l * (the layer's per-device bytes): each device holds all its layers of
 * its shard, layer-major.  A pipelined program's state holds M
 * microbatches' rows of each layer, and its operand is one microbatch's
 * view (codegen/pipeline.c): its layers are M blocks apart. */
static void emit_layer_slice(cg_ctx *c, cg_fn *f, const ir_op *op, const cg_loop *lp)
{
    int64_t bytes = ir_local_bytes(f->m, &op->result->type) * cg_layer_stride(f->m, op->operands[0]);
    LLVMValueRef off = LLVMBuildMul(c->b, lp->index, cg_i64(c, bytes), "layer.off");
    f->buf[op->result->id] = LLVMBuildInBoundsGEP2(c->b, c->t.i8, f->buf[op->operands[0]->id], &off, 1,
                                                   op->result->tensor);
}

/* LayerStack, op index i: the value's per-device block goes to block l of
 * the stack's buffer (made at the LoopBegin). */
static void emit_layer_stack(cg_ctx *c, cg_fn *f, const ir_op *op, int i, const cg_loop *lp)
{
    int64_t bytes = ir_local_bytes(f->m, &op->operands[0]->type);
    LLVMValueRef off = LLVMBuildMul(c->b, lp->index, cg_i64(c, bytes), "stack.off");
    LLVMValueRef dst = LLVMBuildInBoundsGEP2(c->b, c->t.i8, f->buf[op->result->id], &off, 1, "");
    call_mark(c, f, c->rt.op_begin, i);
    if (f->stack_sum && f->stack_sum[op->result->id])
        cg_emit_add_into(c, f, dst, f->buf[op->operands[0]->id], ir_local_elems(f->m, &op->operands[0]->type),
                         op->operands[0]->type.dtype);
    else
        LLVMBuildMemCpy(c->b, dst, 1, f->buf[op->operands[0]->id], 1, cg_i64(c, bytes));
    call_mark(c, f, c->rt.op_end, i);
    cg_free_dead(c, f, i, -1, f->plan->nops);
}

/* The buffer op i writes, made before it: its output's, the dead
 * operand's it takes over (plan.c), or a new one (one row of it for a
 * row-local value, rowgroup.c); recorded in f->buf. */
static LLVMValueRef result_buffer(cg_ctx *c, cg_fn *f, LLVMValueRef out, int i)
{
    const cg_plan *p = f->plan;
    const ir_value *res = p->ops[i]->result;
    LLVMValueRef dst;
    if (p->out_index[res->id] >= 0) {
        dst = cg_load_ptr_at(c, out, p->out_index[res->id], res->tensor);
    } else if (p->reuse[i] >= 0) {
        dst = f->buf[p->reuse[i]]; /* in place: the operand dies here */
    } else {
        int64_t bytes = ir_local_bytes(f->m, &res->type);
        if (p->row_local[res->id])
            for (int q = 0; q < f->nrow; q++)
                bytes /= ir_local_size(f->m, &res->type, q);
        LLVMValueRef args[] = {f->dev, cg_i64(c, bytes)};
        dst = LLVMBuildCall2(c->b, c->rt.alloc_ty, c->rt.alloc, args, 2, res->tensor);
    }
    return f->buf[res->id] = dst;
}

/* Member `j` of the row group being emitted, inside its row loops; a
 * streamed result (rowgroup.c) is computed into `stage` and its row then
 * copied out (stream.c); `aligned` says whether its buffer allows that
 * with non-temporal stores. */
static void emit_member(cg_ctx *c, cg_fn *f, int j, LLVMValueRef stage, LLVMValueRef aligned)
{
    const ir_op *op = f->plan->ops[j];
    const ir_value *res = op->result;
    LLVMValueRef dst = f->buf[res->id];
    if (op->kind != IR_OP_ELEMENTWISE) {
        cg_emit_reduce(c, f, op, dst);
        return;
    }
    if (!stage) {
        cg_emit_elementwise(c, f, op, dst);
        return;
    }
    f->buf[res->id] = stage; /* the member's loads of res: none (rowgroup.c) */
    cg_emit_elementwise(c, f, op, stage);
    f->buf[res->id] = dst;
    int64_t row_bytes = cg_row_bytes(f->m, &res->type, f->nrow);
    LLVMValueRef off = cg_row_offset(c, f, &res->type);
    LLVMValueRef row = LLVMBuildInBoundsGEP2(c->b, c->t.i8, dst, &off, 1, "row");
    cg_emit_stream_row(c, f, row, stage, row_bytes, aligned);
}

/* The row group whose first op is `first` (rowgroup.c): every member's
 * buffer, then loops over the rows around each member's own loops, in
 * program order, marked as one op (the first's id); then the frees.
 * Returns the last member's index. */
static int emit_row_group(cg_ctx *c, cg_fn *f, LLVMValueRef out, int first)
{
    const cg_plan *p = f->plan;
    int last = cg_row_group_end(p, first);
    const ir_op *lead = NULL; /* the reduction whose result dims are the rows */
    for (int j = first; j <= last && !lead; j++)
        if (p->row_group[j] == first && p->ops[j]->kind == IR_OP_EINSUM)
            lead = p->ops[j];
    int nrow = lead->result->type.rank;
    f->nrow = nrow; /* sizes a row-local buffer */
    int n = last - first + 1;
    LLVMValueRef *stage = cg_calloc((size_t)n, sizeof *stage);
    LLVMValueRef *aligned = cg_calloc((size_t)n, sizeof *aligned);
    bool streams = false;
    for (int j = first; j <= last; j++) {
        if (p->row_group[j] != first)
            continue;
        LLVMValueRef dst = result_buffer(c, f, out, j);
        const ir_value *res = p->ops[j]->result;
        if (!p->row_stream[res->id])
            continue;
        LLVMValueRef args[] = {f->dev, cg_i64(c, cg_row_bytes(f->m, &res->type, nrow))};
        stage[j - first] = LLVMBuildCall2(c->b, c->rt.alloc_ty, c->rt.alloc, args, 2, "stage");
        aligned[j - first] = cg_line_aligned(c, dst);
        streams = true;
    }
    call_mark(c, f, c->rt.op_begin, first);
    cg_for rows[IR_MAX_RANK];
    for (int q = 0; q < nrow; q++) {
        rows[q] = cg_for_begin(c, f, ir_local_size(f->m, &lead->result->type, q));
        f->row_idx[q] = rows[q].phi;
    }
    for (int j = first; j <= last; j++) {
        if (p->row_group[j] != first)
            continue;
        int k = j + 1; /* the next member */
        while (k <= last && p->row_group[k] != first)
            k++;
        if (k <= last && !stage[j - first] && cg_row_sum_fits(f, p->ops[j], p->ops[k])) {
            /* exp(x - max) and its sum in one pass over the row; a
             * row-local result that only the sum reads is not stored. */
            const ir_value *e = p->ops[j]->result;
            bool store = !p->row_local[e->id] || e->nuses > 1;
            LLVMValueRef acc = cg_row_sum_begin(c, f, p->ops[k]);
            cg_emit_elementwise_sum(c, f, p->ops[j], store ? f->buf[e->id] : NULL, acc);
            cg_row_sum_end(c, f, p->ops[k], f->buf[p->ops[k]->result->id], acc);
            j = k;
            continue;
        }
        emit_member(c, f, j, stage[j - first], aligned[j - first]);
    }
    for (int q = nrow - 1; q >= 0; q--)
        cg_for_end(c, f, &rows[q]);
    f->nrow = 0;
    if (streams)
        cg_emit_stream_fence(c);
    call_mark(c, f, c->rt.op_end, first);
    for (int j = 0; j < n; j++)
        if (stage[j]) {
            LLVMValueRef args[] = {f->dev, stage[j]};
            LLVMBuildCall2(c->b, c->rt.free_ty, c->rt.free, args, 2, "");
        }
    free(stage);
    free(aligned);
    for (int j = first; j <= last; j++) {
        if (p->row_group[j] != first)
            continue;
        if (p->reuse[j] >= 0)
            f->buf[p->reuse[j]] = NULL;
        cg_free_dead(c, f, j, -1, p->nops);
    }
    return last;
}

/* Where the run function's op hooks emit: its output array and the
 * repeated block being emitted. */
typedef struct run_at {
    LLVMValueRef out; /* the run function's `out` argument */
    cg_loop *lp;      /* the loop being emitted (lp->begin < 0 outside one) */
} run_at;

/* The codegen hooks, one per union arm of IR_OPS: emit op i of the plan
 * (not fused into another) into the run function; return the index of the
 * last op emitted (a row group emits several). */
typedef int (*cg_run_fn)(cg_ctx *c, cg_fn *f, const run_at *at, int i);
#define X(e, s, arm, lo, hi, tr) static int cg_run_##arm(cg_ctx *c, cg_fn *f, const run_at *at, int i);
IR_OPS(X)
#undef X

static const cg_run_fn op_run[IR_OP_COUNT] = {
#define X(e, s, arm, lo, hi, tr) [IR_OP_##e] = cg_run_##arm,
    IR_OPS(X)
#undef X
};

/* The body of a computing or resharding op: writes op i's result to dst. */
typedef void (*op_body_fn)(cg_ctx *c, cg_fn *f, const ir_op *op, int i, LLVMValueRef dst);

/* Emits op i with its result buffer and run-time marks around `body`, or
 * its row group if it heads one; frees what died at it.  Returns the last
 * op emitted. */
static int run_framed(cg_ctx *c, cg_fn *f, const run_at *at, int i, op_body_fn body)
{
    const cg_plan *p = f->plan;
    if (p->row_group[i] == i)
        return emit_row_group(c, f, at->out, i);
    LLVMValueRef dst = result_buffer(c, f, at->out, i);
    call_mark(c, f, c->rt.op_begin, i);
    body(c, f, p->ops[i], i, dst);
    call_mark(c, f, c->rt.op_end, i);
    if (p->reuse[i] >= 0)
        f->buf[p->reuse[i]] = NULL; /* its buffer now belongs to the result */
    /* Free the scratch buffers whose last read was this op, and a result
     * nobody reads. */
    cg_free_dead(c, f, i, -1, p->nops);
    return i;
}

static void einsum_body(cg_ctx *c, cg_fn *f, const ir_op *op, int i, LLVMValueRef dst)
{
    if (op->noperands == 1) {
        cg_emit_reduce(c, f, op, dst); /* a reduction: no GEMM */
        return;
    }
    if (op->u.einsum.gather || op->u.einsum.scatter) {
        cg_emit_gather(c, f, op, i, dst); /* a lookup, not a GEMM */
        return;
    }
    if (ir_einsum_unrolled_terms(f->m, op) > 0) {
        /* A few products per element: a memory-bound loop nest, not a
         * GEMM around permute copies (elementwise.c). */
        cg_emit_elementwise(c, f, op, dst);
        return;
    }
    LLVMValueRef desc = einsum_desc(c, f->m, op, i);
    LLVMValueRef bptr = op->noperands > 1 ? f->buf[einsum_read(f->m, op, 1)->id] : LLVMConstNull(c->t.ptr);
    LLVMValueRef args[] = {f->dev, desc, f->buf[einsum_read(f->m, op, 0)->id], bptr, dst};
    ir_pos_bound pb;
    if (ir_einsum_pos_bound(f->m, op, &pb)) {
        /* The causal mask lets each row stop at its position (pos_bound.c). */
        LLVMValueRef bargs[] = {args[0], args[1], args[2], args[3], args[4],
                                f->buf[pb.pos->id], cg_i32(c, pb.row_label),
                                cg_i32(c, pb.pos_label)};
        LLVMBuildCall2(c->b, c->rt.einsum_bounded_ty, c->rt.einsum_bounded, bargs, 8, "");
        return;
    }
    LLVMBuildCall2(c->b, c->rt.einsum_ty, c->rt.einsum, args, 5, "");
}

static void ew_body(cg_ctx *c, cg_fn *f, const ir_op *op, int i, LLVMValueRef dst)
{
    (void)i;
    cg_emit_elementwise(c, f, op, dst);
}

static void ms_body(cg_ctx *c, cg_fn *f, const ir_op *op, int i, LLVMValueRef dst)
{
    cg_emit_meshslice(c, f, op, i, dst);
}

static void coll_body(cg_ctx *c, cg_fn *f, const ir_op *op, int i, LLVMValueRef dst)
{
    int reduce_op = op->kind == IR_OP_ALLREDUCE || op->kind == IR_OP_REDUCESCATTER ? coll_reduce_op(op)
                                                                                  : RT_REDUCE_SUM;
    LLVMValueRef desc = coll_desc(c, f->m, op, i, reduce_op);
    LLVMValueRef args[] = {f->dev, desc, f->buf[op->operands[0]->id], dst};
    LLVMBuildCall2(c->b, c->rt.coll_ty, c->rt.coll, args, 4, "");
}

int cg_run_op(cg_ctx *c, cg_fn *f, LLVMValueRef out, cg_loop *lp, int i)
{
    run_at at = {out, lp};
    /* The planner rejected unknown kinds. */
    return op_run[f->plan->ops[i]->kind](c, f, &at, i);
}

static int cg_run_einsum(cg_ctx *c, cg_fn *f, const run_at *at, int i)
{
    return run_framed(c, f, at, i, einsum_body);
}

static int cg_run_ew(cg_ctx *c, cg_fn *f, const run_at *at, int i)
{
    return run_framed(c, f, at, i, ew_body);
}

static int cg_run_ms(cg_ctx *c, cg_fn *f, const run_at *at, int i)
{
    return run_framed(c, f, at, i, ms_body);
}

static int cg_run_coll(cg_ctx *c, cg_fn *f, const run_at *at, int i)
{
    return run_framed(c, f, at, i, coll_body);
}

/* Loop ops structure the LLVM loop and mark no run-time span. */
static int cg_run_loop(cg_ctx *c, cg_fn *f, const run_at *at, int i)
{
    const ir_op *op = f->plan->ops[i];
    if (op->kind == IR_OP_LOOPBEGIN)
        emit_loop_begin(c, f, at->out, i, at->lp);
    else if (op->kind == IR_OP_LOOPEND)
        emit_loop_end(c, f, i, at->lp);
    else if (op->kind == IR_OP_LAYERSLICE)
        emit_layer_slice(c, f, op, at->lp);
    else
        emit_layer_stack(c, f, op, i, at->lp);
    return i;
}

/* Never reached: cg_check_grad refuses a module holding a Grad op. */
static int cg_run_grad(cg_ctx *c, cg_fn *f, const run_at *at, int i)
{
    (void)c, (void)f, (void)at;
    return i;
}

/* Emits nothing: a CollectivePermute is a pipeline's stage-to-stage
 * transfer (cg_check_perm allows no other), which the pipelined executor
 * runs as its two halves, the sender's rt_send after its loop and the
 * receiver's rt_recv before its own (codegen/pipeline.c, hop). */
static int cg_run_perm(cg_ctx *c, cg_fn *f, const run_at *at, int i)
{
    (void)c, (void)f, (void)at;
    return i;
}

static int cg_run_update(cg_ctx *c, cg_fn *f, const run_at *at, int i)
{
    (void)at;
    const ir_op *op = f->plan->ops[i];
    f->buf[op->result->id] = f->buf[op->operands[0]->id]; /* written in place */
    call_mark(c, f, c->rt.op_begin, i);
    cg_emit_update_slice(c, f, op, i);
    call_mark(c, f, c->rt.op_end, i);
    cg_free_dead(c, f, i, -1, f->plan->nops);
    return i;
}

LLVMValueRef cg_emit_run(cg_ctx *c, ir_module *m, const cg_plan *p, const char *name)
{
    cg_fn f = {.m = m, .plan = p};
    f.fn = LLVMAddFunction(c->mod, name, c->t.run_fn);
    LLVMSetLinkage(f.fn, LLVMInternalLinkage);
    f.dev = LLVMGetParam(f.fn, 0);
    LLVMValueRef in = LLVMGetParam(f.fn, 1), out = LLVMGetParam(f.fn, 2);
    LLVMSetValueName2(f.dev, "dev", 3);
    LLVMSetValueName2(in, "in", 2);
    LLVMSetValueName2(out, "out", 3);
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(c->llctx, f.fn, "entry");
    LLVMPositionBuilderAtEnd(c->b, entry);

    f.buf = cg_calloc((size_t)m->nvalues, sizeof *f.buf);
    for (int v = 0; v < m->nvalues; v++)
        if (p->input_index[v] >= 0)
            f.buf[v] = cg_load_ptr_at(c, in, p->input_index[v], m->values[v]->tensor);

    if (m->pipe.axis >= 0) {
        cg_emit_pipelined_body(c, &f, in, out); /* its tail included */
    } else {
        cg_loop lp = {.begin = -1};
        for (int i = 0; i < p->nops; i++)
            if (p->fused_into[i] < 0)
                i = cg_run_op(c, &f, out, &lp, i);
        cg_emit_run_tail(c, &f, in, out);
    }
    LLVMBuildRetVoid(c->b);
    free(f.buf);
    return f.fn;
}

void cg_emit_run_tail(cg_ctx *c, cg_fn *f, LLVMValueRef in, LLVMValueRef out)
{
    const ir_module *m = f->m;
    const cg_plan *p = f->plan;
    /* Outputs not computed in place: inputs, and values that are several
     * outputs at once. */
    for (int j = 0; j < m->noutputs; j++) {
        ir_value *v = m->outputs[j].value;
        int k = p->rt_output[j];
        if (k < 0 || (p->input_index[v->id] < 0 && p->out_index[v->id] == k))
            continue;
        LLVMValueRef dst = cg_load_ptr_at(c, out, k, m->outputs[j].name);
        LLVMBuildMemCpy(c->b, dst, 1, f->buf[v->id], 1, cg_i64(c, ir_local_bytes(m, &v->type)));
    }
    /* Updates, after every read of the old values (plan.c, "Updates"). */
    for (int v = 0; v < m->nvalues; v++) {
        if (p->update_slot[v] < 0)
            continue;
        LLVMValueRef dst = cg_load_ptr_at(c, in, p->update_slot[v], m->values[v]->tensor);
        LLVMBuildMemCpy(c->b, dst, 1, f->buf[v], 1,
                        cg_i64(c, ir_local_bytes(m, &m->values[v]->type)));
    }
    cg_free_dead(c, f, p->nops, -1, p->nops);
}
