/*
 * pipeline.c - the run function of a pipelined program (docs/pipeline.md).
 *
 * The pipeline pass (passes/pipeline.c) left one microbatch's program, the
 * stage axis Z and each stage's schedule (ir_module.pipe).  Every device
 * runs the same function; its stage z = rt_coord(dev, Z) picks its row of
 * the schedule, a constant table of items "F m" (forward of microbatch m)
 * and "B m" (its backward), which one loop runs in order:
 *
 *   F m:  the ops before the forward loop (first stage: the embedding),
 *         or on the other stages the activation received from stage z-1;
 *         the forward loop over the stage's own |L|/Z layers; the
 *         activation sent to stage z+1, or on the last stage the ops after
 *         the loop (head, loss);
 *   B m:  the loss's backward on the last stage, or the gradient received
 *         from stage z+1; the backward loop over the stage's layers; the
 *         gradient sent to stage z-1, or on the first stage the ops after
 *         the loop (the embedding's gradient).
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
 * backward ends.
 *
 * The optimizer's update (phase update) runs once, after the schedule, on
 * every stage.  What it reads from the forward and backward (the
 * gradients) and the loss are accumulated over the microbatches, into
 * buffers zeroed at the start: their sum is the whole batch's (the pass
 * kept the whole batch's scale factors).  A sum that only some stages
 * compute (the embedding's gradient on the first, the loss on the last;
 * the others hold zeros) is then AllReduced over Z; the stacked layers'
 * gradients stay where they are, each stage updating its own layers.
 *
 * Inputs with the batch dim (first, checked) are read one microbatch at a
 * time: rows [m |B|/M, (m+1) |B|/M) of the device's block, a view.
 */
#include <stdlib.h>
#include <string.h>

#include "cg_internal.h"
#include "einrt.h"

/* Stage sets: bit 0 the first stage, bit 1 a middle one, bit 2 the last. */
enum { ST_FIRST = 1, ST_MID = 2, ST_LAST = 4, ST_ALL = 7 };

/* What the emission needs, computed from the plan (classify). */
typedef struct pp_ctx {
    const ir_module *m;
    const cg_plan *p;
    int fb, fe, bb, be;  /* op indices: forward LoopBegin, LoopEnd, backward LoopBegin, LoopEnd */
    char *item;          /* per op: 'F', 'B' or 'E' (the update, once per step) */
    uint8_t *avail;      /* per value: the stages that can compute it */
    uint8_t *run;        /* per op: the stages that run it */
    int *at;             /* per op: the op whose emission runs it (fusion, row groups) */
    int *seg;            /* per op: its segment (of `at`) */
    bool *acc;           /* per value: accumulated over the microbatches */
    int *slot;           /* per value: its place in a frame, or -1 */
    int nslots;
    int first_end;       /* index of the first op of item 'E' (p->nops if none) */
    bool trains;         /* a training step; else forwards only (bb = be = nops) */
    bool *rows;          /* per value: an output with the batch dim first, whose
                            microbatches are placed rather than summed */
} pp_ctx;

/* The op `i`'s emission point: the op it is fused into (followed to the
 * end), or its row group's first op. */
static int emit_at(const cg_plan *p, int i)
{
    for (int guard = 0; p->fused_into[i] >= 0 && guard < p->nops; guard++)
        i = p->fused_into[i];
    return p->row_group[i] >= 0 ? p->row_group[i] : i;
}

static bool fail(diag_ctx *d, const char *what)
{
    diag_error(d, DIAG_NOLOC, "codegen: pipelined program: %s", what);
    return false;
}

/* The loops, the items and the stages of every op and value. */
static bool classify(pp_ctx *x, diag_ctx *d)
{
    const ir_module *m = x->m;
    const cg_plan *p = x->p;
    int n = p->nops;
    x->fb = x->fe = x->bb = x->be = -1;
    for (int i = 0; i < n; i++) {
        const ir_op *op = p->ops[i];
        if ((op->kind != IR_OP_LOOPBEGIN && op->kind != IR_OP_LOOPEND) || op->u.loop.dim != m->pipe.dim)
            continue;
        bool rev = op->u.loop.begin->u.loop.reverse;
        int *slot = op->kind == IR_OP_LOOPBEGIN ? (rev ? &x->bb : &x->fb) : (rev ? &x->be : &x->fe);
        if (*slot >= 0)
            return fail(d, "more than one forward or backward loop over the layers");
        *slot = i;
    }
    /* Inference runs forwards only: no backward loop, which the
     * conditions below see as one past the last op. */
    x->trains = x->bb >= 0;
    if (!x->trains && x->be < 0)
        x->bb = x->be = n;
    if (x->fb < 0 || x->fe < x->fb || x->bb < x->fe || x->be < x->bb)
        return fail(d, "it needs a forward loop over the layers and, after it, their backward loop");
    for (int i = 0; i < n; i++) {
        const ir_op *op = p->ops[i];
        if (op->phase == IR_PHASE_UPDATE) {
            if (i < x->be)
                return fail(d, "an update op comes before the backward loop ends");
            x->item[i] = 'E';
        } else if (i > x->fe && i < x->bb) {
            x->item[i] = op->phase == IR_PHASE_FORWARD ? 'F' : 'B';
        } else {
            x->item[i] = i <= x->fe ? 'F' : 'B';
        }
    }
    /* A linear collective after the backward loop that only the update
     * reads (a gradient's DP AllReduce or FSDP ReduceScatter, seed 000)
     * commutes with the sum over the microbatches: it runs once, on the
     * sum, rather than once per microbatch. */
    for (int i = n - 1; i > x->be; i--) {
        const ir_op *op = p->ops[i];
        const ir_value *v = op->result;
        bool linear = op->kind == IR_OP_ALLGATHER || op->kind == IR_OP_SLICE || op->kind == IR_OP_ALLTOALL ||
                      ((op->kind == IR_OP_ALLREDUCE || op->kind == IR_OP_REDUCESCATTER) &&
                       op->u.coll.reduce == IR_RED_SUM);
        bool update_only = x->item[i] == 'B' && v->nuses > 0;
        for (int u = 0; u < v->nuses && update_only; u++) {
            int ui = -1;
            for (int j = i + 1; j < n && ui < 0; j++)
                if (p->ops[j] == v->uses[u].op)
                    ui = j;
            update_only = ui >= 0 && x->item[ui] == 'E';
        }
        for (int j = 0; j < m->noutputs && update_only; j++)
            update_only = m->outputs[j].value != v;
        if (linear && update_only)
            x->item[i] = 'E';
    }
    x->first_end = n;
    for (int i = 0; i < n && x->first_end == n; i++)
        if (x->item[i] == 'E')
            x->first_end = i;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < p->ops[i]->noperands && x->item[i] != 'E'; k++) {
            int def = p->def_index[p->ops[i]->operands[k]->id];
            if (def >= 0 && x->item[def] == 'E')
                return fail(d, "a forward or backward op reads a value of the update");
        }
    for (int i = 0; i < n; i++)
        x->at[i] = emit_at(p, i);
    /* Availability, in program order. */
    for (int v = 0; v < m->nvalues; v++)
        x->avail[v] = ST_ALL;
    for (int i = 0; i < n; i++) {
        const ir_op *op = p->ops[i];
        uint8_t a = ST_ALL;
        if (i == x->fe)
            a = ST_LAST;
        else if (i == x->be)
            a = ST_FIRST;
        else if (!op->loop && op->kind != IR_OP_LOOPBEGIN && x->item[i] != 'E')
            for (int k = 0; k < op->noperands; k++)
                a &= x->avail[op->operands[k]->id];
        if (!a)
            return fail(d, "an op reads values of both the first and the last stage");
        x->avail[op->result->id] = a;
    }
    /* Accumulated values: read by the update, or a returned output. */
    for (int i = x->first_end; i < n; i++)
        for (int k = 0; k < p->ops[i]->noperands && x->item[i] == 'E'; k++) {
            const ir_value *v = p->ops[i]->operands[k];
            if (p->def_index[v->id] >= 0 && x->item[p->def_index[v->id]] != 'E')
                x->acc[v->id] = true;
        }
    for (int j = 0; j < m->noutputs; j++) {
        const ir_value *v = m->outputs[j].value;
        int def = p->def_index[v->id];
        bool batched = v->type.rank > 0 && v->type.dims[0] == m->pipe.batch_dim;
        if (m->outputs[j].update ? def >= 0 && x->item[def] != 'E'
                                 : def < 0 || (x->trains ? v->type.rank > 0 : !batched))
            return fail(d, x->trains ? "its outputs are its loss (a scalar) and its updates"
                                     : "every output of a pipelined forward has the batch dim first");
        if (!m->outputs[j].update) {
            x->acc[v->id] = true;
            x->rows[v->id] = batched;
        }
    }
    /* The stages each op runs on, from its readers (reverse order). */
    for (int i = n - 1; i >= 0; i--) {
        const ir_op *op = p->ops[i];
        if (x->item[i] == 'E' || op->loop || (i >= x->fb && i <= x->fe) || (i >= x->bb && i <= x->be)) {
            x->run[i] = ST_ALL;
            continue;
        }
        const ir_value *v = op->result;
        uint8_t need = x->acc[v->id] ? x->avail[v->id] : 0;
        for (int u = 0; u < v->nuses; u++) {
            int ui = -1;
            for (int j = i + 1; j < n && ui < 0; j++)
                if (p->ops[j] == v->uses[u].op)
                    ui = j;
            if (ui < 0 || x->item[ui] == 'E')
                continue;
            need |= ui == x->fb ? ST_FIRST : ui == x->bb ? ST_LAST : x->run[ui];
        }
        if (need & ~x->avail[v->id])
            return fail(d, "a value is needed on a stage that cannot compute it (a value of the loss "
                           "read in the layers?)");
        x->run[i] = need & x->avail[v->id];
    }
    /* A row group runs as its first op does: its members' results must be
     * wanted where it runs (a fused producer has no result of its own). */
    for (int i = 0; i < n; i++) {
        int g = p->row_group[i];
        if (g >= 0 && g != i && p->fused_into[i] < 0 &&
            (x->item[g] != x->item[i] || (x->run[i] & ~x->run[g])))
            return fail(d, "the ops of a row group run on different stages");
    }
    return true;
}

/* Segments (consecutive emission points of one item with the same stages;
 * each loop one segment) and the frame slots of the values that cross
 * them. */
static void segment(pp_ctx *x)
{
    const cg_plan *p = x->p;
    int n = p->nops, s = -1;
    char item = 0;
    uint8_t run = 0;
    for (int i = 0; i < n; i++) {
        if (x->at[i] != i)
            continue;
        bool in_loop = (i > x->fb && i <= x->fe) || (i > x->bb && i <= x->be);
        if (!in_loop && (x->item[i] != item || x->run[i] != run || i == x->fb || i == x->bb ||
                         i == x->fe + 1 || i == x->be + 1))
            s++;
        item = x->item[i];
        run = x->run[i];
        x->seg[i] = s;
    }
    for (int i = 0; i < n; i++)
        x->seg[i] = x->seg[x->at[i]];
    for (int v = 0; v < x->m->nvalues; v++)
        x->slot[v] = -1;
    for (int i = 0; i < n; i++) {
        const ir_op *op = p->ops[i];
        for (int k = 0; k < op->noperands; k++) {
            int v = op->operands[k]->id, def = p->def_index[v];
            if (def >= 0 && x->item[i] != 'E' && x->seg[def] != x->seg[i] && x->slot[v] < 0)
                x->slot[v] = x->nslots++;
        }
    }
    /* What crosses between stages: the loops' carried values. */
    const int ends[4] = {x->fb, x->fe, x->bb, x->be};
    for (int k = 0; k < (x->trains ? 4 : 2); k++) {
        const ir_op *op = p->ops[ends[k]];
        int v = (k % 2 == 0 ? op->operands[0] : op->result)->id;
        if (x->slot[v] < 0)
            x->slot[v] = x->nslots++;
    }
}

/* The emitter's state. */
typedef struct pp_emit {
    cg_ctx *c;
    cg_fn *f;
    pp_ctx *x;
    cg_plan fb, end;        /* the plan with the accumulation's liveness (F and B; the update) */
    LLVMValueRef stage, is_first, is_last, frame, mb;
    LLVMValueRef *accbuf;   /* per value: its accumulator */
    LLVMValueRef *inbuf;    /* per value: the whole input's pointer (entry block) */
} pp_emit;

static LLVMValueRef slot_ptr(pp_emit *e, int v)
{
    LLVMValueRef idx = cg_i64(e->c, e->x->slot[v]);
    return LLVMBuildInBoundsGEP2(e->c->b, e->c->t.ptr, e->frame, &idx, 1, "slot");
}

/* A call of rt_send or rt_recv (einrt.h). */
static void p2p(pp_emit *e, bool send, int delta, LLVMValueRef tag, LLVMValueRef buf, int64_t bytes)
{
    cg_ctx *c = e->c;
    const char *name = send ? "rt_send" : "rt_recv";
    LLVMTypeRef params[] = {c->t.ptr, c->t.i32, c->t.i32, c->t.i32, c->t.ptr, c->t.i64};
    LLVMTypeRef fty = LLVMFunctionType(c->t.voidt, params, 6, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, name);
    if (!fn)
        fn = LLVMAddFunction(c->mod, name, fty);
    LLVMValueRef args[] = {e->f->dev, cg_i32(c, e->x->m->pipe.axis), cg_i32(c, delta), tag, buf,
                           cg_i64(c, bytes)};
    LLVMBuildCall2(c->b, fty, fn, args, 6, "");
}

/* A call of rt_pipe_item_begin (kind 'F' or 'B') or, kind 0,
 * rt_pipe_item_end (einrt.h). */
static void item_mark(pp_emit *e, char kind)
{
    cg_ctx *c = e->c;
    const char *name = kind ? "rt_pipe_item_begin" : "rt_pipe_item_end";
    LLVMTypeRef params[] = {c->t.ptr, c->t.i32, c->t.i32};
    LLVMTypeRef fty = LLVMFunctionType(c->t.voidt, params, kind ? 3 : 1, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(c->mod, name);
    if (!fn)
        fn = LLVMAddFunction(c->mod, name, fty);
    LLVMValueRef args[] = {e->f->dev, cg_i32(c, kind), e->mb};
    LLVMBuildCall2(c->b, fty, fn, args, kind ? 3 : 1, "");
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
    LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(c->llctx, e->f->fn, "stage");
    LLVMBasicBlockRef after = LLVMAppendBasicBlockInContext(c->llctx, e->f->fn, "stage.after");
    LLVMBuildCondBr(c->b, cond, then, after);
    LLVMPositionBuilderAtEnd(c->b, then);
    return after;
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
 * the whole batch's block instead. */
static void accumulate(pp_emit *e, const ir_value *v)
{
    cg_ctx *c = e->c;
    int64_t n = ir_local_elems(e->x->m, &v->type);
    if (n <= 0)
        return;
    if (e->x->rows[v->id]) {
        int64_t bytes = ir_local_bytes(e->x->m, &v->type);
        LLVMValueRef off = LLVMBuildMul(c->b, LLVMBuildZExt(c->b, e->mb, c->t.i64, ""), cg_i64(c, bytes), "");
        LLVMValueRef dst = LLVMBuildInBoundsGEP2(c->b, c->t.i8, e->accbuf[v->id], &off, 1, "");
        LLVMBuildMemCpy(c->b, dst, 1, e->f->buf[v->id], 1, cg_i64(c, bytes));
        return;
    }
    cg_emit_add_into(c, e->f, e->accbuf[v->id], e->f->buf[v->id], n, v->type.dtype);
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
        if (e->fb.last_use[v->id] > p->nops) {
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

/* The hop of a loop's carried value: `v` received from stage z + delta
 * into a new buffer (recv), or sent to it and freed (send); on the stages
 * `run`, slot to slot. */
static void hop(pp_emit *e, const ir_value *v, bool send, int delta, uint8_t run, int dir)
{
    cg_ctx *c = e->c;
    LLVMBasicBlockRef after = guard_open(e, run);
    int64_t bytes = ir_local_bytes(e->x->m, &v->type);
    LLVMValueRef tag = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, e->mb, cg_i32(c, 2), ""), cg_i32(c, dir), "tag");
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

/* The whole microbatch views of the inputs that hold the batch dim. */
static void input_views(pp_emit *e)
{
    const ir_module *m = e->x->m;
    cg_ctx *c = e->c;
    for (int v = 0; v < m->nvalues; v++) {
        const ir_value *val = m->values[v];
        if (e->x->p->input_index[v] < 0)
            continue;
        e->f->buf[v] = e->inbuf[v];
        if (val->type.rank < 1 || val->type.dims[0] != m->pipe.batch_dim)
            continue;
        LLVMValueRef off = LLVMBuildMul(c->b, LLVMBuildZExt(c->b, e->mb, c->t.i64, ""),
                                        cg_i64(c, ir_local_bytes(m, &val->type)), "");
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
    bool *sent = cg_calloc((size_t)nv, sizeof *sent);
    sent[p->ops[x->fe]->result->id] = true;
    if (x->trains)
        sent[p->ops[x->be]->result->id] = true;
    for (int v = 0; v < nv; v++) {
        e->fb.last_use[v] = e->end.last_use[v] = p->last_use[v];
        if (sent[v] && p->last_use[v] < 0)
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
    free(sent);
}

static void ctx_init(pp_ctx *x, const ir_module *m, const cg_plan *p)
{
    memset(x, 0, sizeof *x);
    x->m = m;
    x->p = p;
    size_t n = (size_t)p->nops + 1, nv = (size_t)m->nvalues + 1;
    x->item = cg_calloc(n, 1);
    x->run = cg_calloc(n, 1);
    x->at = cg_calloc(n, sizeof(int));
    x->seg = cg_calloc(n, sizeof(int));
    x->avail = cg_calloc(nv, 1);
    x->acc = cg_calloc(nv, sizeof(bool));
    x->slot = cg_calloc(nv, sizeof(int));
    x->rows = cg_calloc(nv, sizeof(bool));
}

static void ctx_free(pp_ctx *x)
{
    free(x->item);
    free(x->run);
    free(x->at);
    free(x->seg);
    free(x->avail);
    free(x->acc);
    free(x->slot);
    free(x->rows);
}

bool cg_pipeline_check(const ir_module *m, const cg_plan *p, diag_ctx *d)
{
    if (m->pipe.microbatches < 1)
        return fail(d, "the pipeline pass did not run (--passes= must include it after propagate)");
    for (int v = 0; v < m->nvalues; v++) {
        const ir_value *val = m->values[v];
        if (p->input_index[v] < 0 || val->type.rank < 1)
            continue;
        for (int k = 1; k < val->type.rank; k++)
            if (val->type.dims[k] == m->pipe.batch_dim) {
                char b[256];
                snprintf(b, sizeof b, "input '%s' holds the batch dim '%s' at position %d: put it "
                         "first, so that a microbatch is a block of its rows", val->tensor,
                         m->dims[m->pipe.batch_dim].name, k + 1);
                return fail(d, b);
            }
    }
    pp_ctx x;
    ctx_init(&x, m, p);
    bool ok = classify(&x, d);
    ctx_free(&x);
    return ok;
}

void cg_emit_pipelined_body(cg_ctx *c, cg_fn *f, LLVMValueRef in, LLVMValueRef out)
{
    const ir_module *m = f->m;
    const cg_plan *p = f->plan;
    int n = p->nops, nv = m->nvalues;
    const ir_pipeline *pp = &m->pipe;
    int Z = (int)m->mesh.axes[pp->axis].size;
    pp_ctx x;
    ctx_init(&x, m, p);
    (void)classify(&x, c->d); /* cg_pipeline_check passed */
    segment(&x);
    pp_emit e = {.c = c, .f = f, .x = &x};
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
    /* The schedule: stage z's items from z * nitems, mb * 2 + (B). */
    int32_t *codes = cg_calloc((size_t)Z * (size_t)pp->nitems, sizeof *codes);
    for (int k = 0; k < Z * pp->nitems; k++)
        codes[k] = pp->order[k].microbatch * 2 + (pp->order[k].kind == 'B');
    LLVMValueRef *cv = cg_calloc((size_t)Z * (size_t)pp->nitems, sizeof *cv);
    for (int k = 0; k < Z * pp->nitems; k++)
        cv[k] = cg_i32(c, codes[k]);
    LLVMValueRef table = cg_const_global(c, LLVMConstArray2(c->t.i32, cv, (uint64_t)Z * (uint64_t)pp->nitems),
                                         "schedule");
    free(cv);
    free(codes);

    f->plan = &e.fb;
    cg_for items = cg_for_begin(c, f, pp->nitems);
    LLVMValueRef idx = LLVMBuildAdd(c->b, LLVMBuildMul(c->b, LLVMBuildZExt(c->b, e.stage, c->t.i64, ""),
                                                       cg_i64(c, pp->nitems), ""), items.phi, "");
    LLVMValueRef code = LLVMBuildLoad2(c->b, c->t.i32, LLVMBuildInBoundsGEP2(c->b, c->t.i32, table, &idx, 1, ""),
                                       "item");
    e.mb = LLVMBuildLShr(c->b, code, cg_i32(c, 1), "mb");
    LLVMValueRef is_b = LLVMBuildTrunc(c->b, LLVMBuildAnd(c->b, code, cg_i32(c, 1), ""), c->t.i1, "backward");
    LLVMValueRef foff = LLVMBuildMul(c->b, LLVMBuildZExt(c->b, e.mb, c->t.i64, ""), cg_i64(c, frame_bytes), "");
    e.frame = LLVMBuildInBoundsGEP2(c->b, c->t.i8, frames, &foff, 1, "frame");
    input_views(&e);
    LLVMBasicBlockRef fblk = LLVMAppendBasicBlockInContext(c->llctx, f->fn, "forward");
    LLVMBasicBlockRef bblk = LLVMAppendBasicBlockInContext(c->llctx, f->fn, "backward");
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(c->llctx, f->fn, "item.done");
    LLVMBuildCondBr(c->b, is_b, bblk, fblk);
    LLVMValueRef *views = cg_calloc((size_t)nv, sizeof *views);
    memcpy(views, f->buf, (size_t)nv * sizeof *views);

    LLVMPositionBuilderAtEnd(c->b, fblk);
    item_mark(&e, 'F');
    emit_range(&e, out, 0, x.fb - 1, 'F');
    hop(&e, p->ops[x.fb]->operands[0], false, -1, ST_MID | ST_LAST, 0);
    emit_range(&e, out, x.fb, x.fe, 'F');
    hop(&e, p->ops[x.fe]->result, true, +1, ST_FIRST | ST_MID, 0);
    emit_range(&e, out, x.fe + 1, x.bb - 1, 'F');
    if (!x.trains) /* what a stage never freed itself */
        release_frame(&e);
    item_mark(&e, 0);
    LLVMBuildBr(c->b, join);

    LLVMPositionBuilderAtEnd(c->b, bblk);
    memcpy(f->buf, views, (size_t)nv * sizeof *views);
    item_mark(&e, 'B');
    if (x.trains) {
    emit_range(&e, out, x.fe + 1, x.bb - 1, 'B');
    hop(&e, p->ops[x.bb]->operands[0], false, +1, ST_FIRST | ST_MID, 1);
    emit_range(&e, out, x.bb, x.be, 'B');
    hop(&e, p->ops[x.be]->result, true, -1, ST_MID | ST_LAST, 1);
    emit_range(&e, out, x.be + 1, n - 1, 'B');
    }
    release_frame(&e);
    item_mark(&e, 0);
    LLVMBuildBr(c->b, join);
    LLVMPositionBuilderAtEnd(c->b, join);
    cg_for_end(c, f, &items);
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
    free(e.fb.last_use);
    free(e.fb.out_index);
    free(e.end.last_use);
    free(e.end.out_index);
    free(e.accbuf);
    free(e.inbuf);
    ctx_free(&x);
}
