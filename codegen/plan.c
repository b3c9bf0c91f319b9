/*
 * plan.c - fusion and buffer liveness, decided before any LLVM is built.
 *
 * Fusion (ir/fusion.c, shared with the cost model).  An elementwise op
 * read once, by an elementwise op of the same loop body at its full
 * shape, and not an output, is computed inline in its consumer's loop
 * (fused_into), up to IR_FUSED_MAX_NODES expression nodes per loop.
 *
 * Folded casts.  A cast that only widens the operand of a GEMM einsum
 * (ir_folded_cast_source, the rule the cost model prices) is marked fused
 * into that einsum: it is never emitted, its result never has a buffer,
 * and the einsum reads the cast's source, which the runtime converts
 * block by block (runtime/einsum_mixed.c): no wide copy in memory.
 *
 * Liveness.  An op that is not fused is "emitted" at its own index; a fused
 * op's reads happen at the index of the op it is fused into.  A buffer is
 * allocated (rt_alloc) just before its defining op and freed (rt_free) right
 * after its last read, so a device holds only the shards that are still
 * needed.  Inputs and outputs are owned by the runtime and never freed here.
 *
 * Updates.  A training step overwrites its params and optimizer state with
 * their new values (ir_output.update).  The new values are computed into
 * scratch buffers that live to the end of the run (last_use = nops) and
 * are copied over the params' and states' buffers after the last op, so
 * no op ever reads a param that an update has already overwritten.
 *
 * Repeated blocks.  A loop's body is emitted once, as an LLVM loop over the
 * layer index (run.c).  Its buffers are allocated and freed in each
 * iteration, as the liveness above says; a buffer made before the loop and
 * read in the body lives to the LoopEnd.  The carried value has one buffer
 * for the whole loop (the LoopBegin's result, which the LoopEnd's result
 * then names), and a LayerSlice's result is a view into its param (or
 * into a LayerStack); neither is freed by the body nor written in place.  A
 * LayerStack's result is one buffer for all layers, made before its loop
 * (run.c) and live at least to the loop's end; each iteration copies its
 * layer in.  Nothing fuses across a body's boundary.
 *
 * State writes.  An UpdateSlice's result is its storage operand's buffer
 * (a state's, a view of one layer of it, or an earlier write's result), so
 * it owns no buffer and is never freed; an elementwise op never writes
 * into it in place.
 *
 * In-place elementwise.  An emitted elementwise op whose result is scratch
 * writes into the buffer of an operand that dies at this op, when that
 * operand is scratch too, has the result's dtype and per-device size, and
 * is read only directly by this op, at exactly the result's labels in the
 * result's order (so element e is read before e is written, and by nothing
 * else in the loop).  The result takes the buffer over; no rt_alloc, no
 * rt_free, and the peak per-device memory drops by one block.
 */
#include <stdlib.h>
#include <string.h>

#include "cg_internal.h"

void *cg_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fputs("einc: out of memory\n", stderr);
        exit(1);
    }
    return p;
}

void *cg_realloc(void *p, size_t size)
{
    void *q = realloc(p, size ? size : 1);
    if (!q) {
        fputs("einc: out of memory\n", stderr);
        exit(1);
    }
    return q;
}

static void fill(int *a, int n, int v)
{
    for (int i = 0; i < n; i++)
        a[i] = v;
}

/* Whether op `j` (fused into `i`) reads value `v`. */
static bool fused_reads(const cg_plan *p, int i, int v)
{
    for (int j = 0; j < i; j++) {
        if (p->fused_into[j] != i)
            continue;
        for (int k = 0; k < p->ops[j]->noperands; k++)
            if (p->ops[j]->operands[k]->id == v)
                return true;
    }
    return false;
}

/* Whether value v must be materialised and kept past its readers: a
 * runtime output, or the new value of a param or state. */
static bool kept(const cg_plan *p, int v)
{
    return p->out_index[v] >= 0 || p->update_slot[v] >= 0;
}

/* The operand whose buffer emitted elementwise op `i` can write into, or -1
 * (see the essay above). */
static int inplace_operand(const cg_plan *p, const ir_module *m, int i)
{
    const ir_op *op = p->ops[i];
    const ir_value *res = op->result;
    /* A row-local result has a buffer of one row, and a row-local operand
     * one too small for the result (rowgroup.c). */
    if (op->kind != IR_OP_ELEMENTWISE || p->fused_into[i] >= 0 || kept(p, res->id) ||
        p->row_local[res->id] || p->row_stream[res->id])
        return -1;
    for (int k = 0; k < op->noperands; k++) {
        const ir_value *v = op->operands[k];
        int def = p->def_index[v->id];
        /* Not the carried buffer (the next iteration reads it) nor a view
         * of a param. */
        if (def < 0 || p->ops[def]->kind == IR_OP_LOOPBEGIN || cg_is_view(p->ops[def]->kind) ||
            p->fused_into[def] >= 0 || kept(p, v->id) || p->row_local[v->id] ||
            p->last_use[v->id] != i || v->type.dtype != res->type.dtype ||
            ir_local_bytes(m, &v->type) != ir_local_bytes(m, &res->type) ||
            fused_reads(p, i, v->id))
            continue;
        bool same = true;
        for (int k2 = 0; k2 < op->noperands && same; k2++) {
            if (op->operands[k2] != v)
                continue;
            same = v->type.rank == res->type.rank;
            for (int j = 0; j < res->type.rank && same; j++)
                same = op->u.ew.labels[k2][j] == op->u.ew.result_labels[j];
        }
        if (same)
            return v->id;
    }
    return -1;
}

/* The codegen checks, one per union arm of IR_OPS: whether codegen can
 * emit `op` (arity and dtypes it relies on beyond the verifier's checks);
 * each reports what it cannot through `d` and returns the number of errors. */
typedef int (*cg_check_fn)(const ir_module *m, const ir_op *op, diag_ctx *d);
#define X(e, s, arm, lo, hi, tr) static int cg_check_##arm(const ir_module *m, const ir_op *op, diag_ctx *d);
IR_OPS(X)
#undef X

static const cg_check_fn op_check[IR_OP_COUNT] = {
#define X(e, s, arm, lo, hi, tr) [IR_OP_##e] = cg_check_##arm,
    IR_OPS(X)
#undef X
};

static int cg_check_einsum(const ir_module *m, const ir_op *op, diag_ctx *d)
{
    (void)m;
    int errors = 0;
    if (op->noperands < 1 || op->noperands > 2) {
        diag_error(d, op->loc,
                   "codegen: Einsum with %d operands (the propagate pass makes every "
                   "einsum unary or binary)", op->noperands);
        errors++;
    }
    for (int k = 0; k < op->noperands; k++) {
        ir_dtype want = (op->u.einsum.gather || op->u.einsum.scatter) && k == 0 ? IR_I32
                                                                                : op->result->type.dtype;
        bool argmax = op->u.einsum.reduce == IR_RED_ARGMAX && op->noperands == 1 &&
                      op->result->type.dtype == IR_I32 && op->operands[0]->type.dtype != IR_I32;
        if (op->operands[k]->type.dtype != want && !argmax) {
            diag_error(d, op->loc, "codegen: Einsum operand %d is %s but the result is %s", k,
                       ir_dtype_name(op->operands[k]->type.dtype), ir_dtype_name(op->result->type.dtype));
            errors++;
        }
    }
    return errors;
}

static int cg_check_ew(const ir_module *m, const ir_op *op, diag_ctx *d)
{
    return cg_ew_check(m, op, d) ? 0 : 1;
}

static int cg_check_ms(const ir_module *m, const ir_op *op, diag_ctx *d)
{
    (void)m;
    if (op->noperands != 2 || op->u.ms.nmoves != 2 || op->operands[0]->type.dtype != op->result->type.dtype ||
        op->operands[1]->type.dtype != op->result->type.dtype) {
        diag_error(d, op->loc, "codegen: MeshSlice needs two operands of the result's dtype "
                   "and two partial collectives");
        return 1;
    }
    return 0;
}

static int cg_check_loop(const ir_module *m, const ir_op *op, diag_ctx *d)
{
    const ir_value *a = op->noperands == 1 ? op->operands[0] : NULL;
    const ir_op *b = op->u.loop.begin, *e = b ? b->u.loop.end : NULL;
    bool ok = a && b && e && b->kind == IR_OP_LOOPBEGIN && e->kind == IR_OP_LOOPEND &&
              op->u.loop.dim >= 0 && op->u.loop.dim < m->ndims && a->type.dtype == op->result->type.dtype;
    if (op->kind == IR_OP_LAYERSLICE)
        ok = ok && (ir_value_kind_is_argument(a->kind) || (a->def && a->def->kind == IR_OP_LAYERSTACK)) &&
             a->type.rank == op->result->type.rank + 1 && ir_stack_split_ok(m, &a->type, op->u.loop.dim);
    else if (op->kind == IR_OP_LAYERSTACK)
        ok = ok && op->loop == b && a->type.rank + 1 == op->result->type.rank &&
             ir_local_bytes(m, &a->type) * ir_loop_trips(m, b) == ir_local_bytes(m, &op->result->type);
    else
        ok = ok && ir_local_bytes(m, &a->type) == ir_local_bytes(m, &op->result->type);
    if (op->kind == IR_OP_LOOPBEGIN && op->loop)
        ok = false; /* loops do not nest */
    if (!ok) {
        diag_error(d, op->loc, "codegen: malformed %s op", ir_op_name(op->kind));
        return 1;
    }
    return 0;
}

static int cg_check_grad(const ir_module *m, const ir_op *op, diag_ctx *d)
{
    (void)m;
    diag_error(d, op->loc, "codegen: a Grad op is left in the IR: the autodiff pass derives the "
               "backward ops (--passes= must start with it)");
    return 1;
}

/* A CollectivePermute runs only where the pipeline pass puts one: at a
 * stage boundary of a pipelined program, where the pipelined executor
 * lowers it to the sending stage's rt_send and the receiving stage's
 * rt_recv (codegen/pipeline.c): one position along the pipeline's axis,
 * forward after the forward loop and backward after the backward loop,
 * a ring exactly with interleaving, its result read by no op. */
static int cg_check_perm(const ir_module *m, const ir_op *op, diag_ctx *d)
{
    const ir_op *end = op->operands[0]->def;
    bool ok = m->pipe.axis >= 0 && op->u.perm.axis == m->pipe.axis && end && end->kind == IR_OP_LOOPEND &&
              end->u.loop.dim == m->pipe.dim && op->result->nuses == 0 &&
              op->u.perm.delta == (end->u.loop.begin->u.loop.reverse ? -1 : 1) &&
              op->u.perm.cyclic == (m->pipe.chunks > 1);
    if (!ok) {
        diag_error(d, op->loc, "codegen: a CollectivePermute runs only at a pipeline's stage boundary, as "
                   "the pipeline pass puts it: after the loop over the pipelined layers, one stage along "
                   "the pipeline's axis, its result read by no op");
        return 1;
    }
    return 0;
}

static int cg_check_update(const ir_module *m, const ir_op *op, diag_ctx *d)
{
    (void)m;
    const ir_value *a = op->noperands == 3 ? op->operands[0] : NULL;
    bool ok = a && ir_update_target(op) && op->u.update.dim >= 0 && op->u.update.dim < a->type.rank &&
              op->operands[1]->type.dtype == a->type.dtype &&
              (op->operands[1]->type.rank == a->type.rank - 1 || op->operands[1]->type.rank == a->type.rank) &&
              op->operands[2]->type.dtype == IR_I32 &&
              op->operands[2]->type.rank == (op->u.update.row >= 0) &&
              op->result->type.dtype == a->type.dtype;
    if (!ok) {
        diag_error(d, op->loc, "codegen: malformed UpdateSlice op");
        return 1;
    }
    return 0;
}

static int cg_check_coll(const ir_module *m, const ir_op *op, diag_ctx *d)
{
    (void)m;
    if (op->noperands != 1 || op->operands[0]->type.dtype != op->result->type.dtype ||
        op->operands[0]->type.rank != op->result->type.rank) {
        diag_error(d, op->loc, "codegen: %s needs one operand of the result's dtype and rank",
                   ir_op_name(op->kind));
        return 1;
    }
    return 0;
}

int cg_plan_build(cg_plan *p, const ir_module *m, diag_ctx *d)
{
    memset(p, 0, sizeof *p);
    int nops = 0;
    for (ir_op *op = m->first; op; op = op->next)
        nops++;
    p->nops = nops;
    p->nvalues = m->nvalues;
    p->ops = cg_calloc((size_t)nops, sizeof *p->ops);
    p->fused_into = cg_calloc((size_t)nops, sizeof(int));
    p->def_index = cg_calloc((size_t)m->nvalues, sizeof(int));
    p->last_use = cg_calloc((size_t)m->nvalues, sizeof(int));
    p->out_index = cg_calloc((size_t)m->nvalues, sizeof(int));
    p->input_index = cg_calloc((size_t)m->nvalues, sizeof(int));
    p->update_slot = cg_calloc((size_t)m->nvalues, sizeof(int));
    p->rt_output = cg_calloc((size_t)m->noutputs, sizeof(int));
    p->reuse = cg_calloc((size_t)nops, sizeof(int));
    fill(p->reuse, nops, -1);
    fill(p->fused_into, nops, -1);
    fill(p->def_index, m->nvalues, -1);
    fill(p->last_use, m->nvalues, -1);
    fill(p->out_index, m->nvalues, -1);
    fill(p->input_index, m->nvalues, -1);
    fill(p->update_slot, m->nvalues, -1);

    int errors = 0;
    int i = 0;
    for (ir_op *op = m->first; op; op = op->next, i++) {
        p->ops[i] = op;
        if (!op->result || op->result->id < 0 || op->result->id >= m->nvalues) {
            diag_error(d, op->loc, "codegen: %s op without a valid result", ir_op_name(op->kind));
            errors++;
            continue;
        }
        p->def_index[op->result->id] = i;
        if ((unsigned)op->kind < IR_OP_COUNT) {
            errors += op_check[op->kind](m, op, d);
        } else {
            diag_error(d, op->loc, "codegen: unknown op kind %d", (int)op->kind);
            errors++;
        }
    }
    int k = 0;
    for (int v = 0; v < m->nvalues; v++)
        if (ir_value_kind_is_argument(m->values[v]->kind))
            p->input_index[v] = k++;
    p->ninputs = k;
    for (int o = 0; o < m->noutputs; o++)
        p->rt_output[o] = m->outputs[o].update ? -1 : p->noutputs++;
    for (int o = m->noutputs - 1; o >= 0; o--) {
        const ir_output *out = &m->outputs[o];
        int v = out->value->id;
        if (!out->update) {
            /* A state's storage is copied out at the end, as an input is. */
            if (!out->value->def || out->value->def->kind != IR_OP_UPDATESLICE)
                p->out_index[v] = p->rt_output[o];
        } else if (p->update_slot[v] >= 0 || p->input_index[out->update->id] < 0 ||
                   p->input_index[v] >= 0) {
            /* Two targets from one buffer would need a copy each; the
             * frontend makes one value per update. */
            diag_error(d, out->loc, "codegen: update of %s needs a value of its own", out->name);
            errors++;
        } else {
            p->update_slot[v] = p->input_index[out->update->id];
        }
    }
    if (errors)
        return -1;

    if (ir_fuse_elementwise(m, p->ops, nops, p->fused_into) < 0) {
        fputs("einc: out of memory\n", stderr);
        exit(1);
    }
    /* A pipelined program sums its gradients over the microbatches before
     * the update reads them (pipeline.c): no op of the forward or backward
     * is computed inside an update's loop. */
    for (i = 0; m->pipe.axis >= 0 && i < nops; i++) {
        int j = p->fused_into[i];
        for (int guard = 0; j >= 0 && p->fused_into[j] >= 0 && guard < nops; guard++)
            j = p->fused_into[j];
        if (j >= 0 && p->ops[i]->phase != IR_PHASE_UPDATE && p->ops[j]->phase == IR_PHASE_UPDATE)
            p->fused_into[i] = -1;
    }
    /* A cast folded into its GEMM (ir_folded_cast_source) is not emitted:
     * its einsum reads the cast's source (run.c), so the source's reads
     * happen at the einsum, as a fused op's at its consumer, and the cast's
     * result has no buffer. */
    for (i = 0; i < nops; i++)
        if (p->fused_into[i] < 0 && ir_folded_cast_source(m, p->ops[i]->result))
            p->fused_into[i] = p->def_index[p->ops[i]->result->uses[0].op->result->id];
    /* Last reads, at the emitting op's index. */
    for (i = 0; i < nops; i++) {
        int e = p->fused_into[i] >= 0 ? p->fused_into[i] : i;
        for (k = 0; k < p->ops[i]->noperands; k++) {
            int v = p->ops[i]->operands[k]->id;
            if (p->last_use[v] < e)
                p->last_use[v] = e;
        }
    }
    /* A repeated block's body runs again: a buffer made before the loop
     * and read in the body lives to the LoopEnd. */
    for (i = 0, k = -1; i < nops; i++) {
        if (p->ops[i]->kind == IR_OP_LOOPBEGIN)
            k = i;
        if (p->ops[i]->kind != IR_OP_LOOPEND || k < 0)
            continue;
        for (int v = 0; v < m->nvalues; v++)
            if (p->def_index[v] >= 0 && p->def_index[v] < k && p->last_use[v] > k &&
                p->last_use[v] < i)
                p->last_use[v] = i;
        /* A stack is filled by every iteration: never freed in the body. */
        for (int j = k + 1; j < i; j++)
            if (p->ops[j]->kind == IR_OP_LAYERSTACK && p->last_use[p->ops[j]->result->id] < i)
                p->last_use[p->ops[j]->result->id] = i;
        k = -1;
    }
    /* The new values of params and states are copied after the last op. */
    for (int v = 0; v < m->nvalues; v++)
        if (p->update_slot[v] >= 0)
            p->last_use[v] = nops;
    int64_t ewnodes = 0;
    for (i = 0; i < nops; i++)
        if (p->ops[i]->kind == IR_OP_ELEMENTWISE)
            ewnodes += p->ops[i]->u.ew.nnodes;
    p->outline_elementwise = ewnodes > IR_OUTLINE_EW_NODES;
    /* Row groups before in-place decisions: a row-local value's one-row
     * buffer is never taken over, nor takes over another's. */
    cg_plan_row_groups(p, m);
    for (i = 0; i < nops; i++)
        p->reuse[i] = inplace_operand(p, m, i);
    if (m->pipe.axis >= 0 && !cg_pipeline_check(m, p, d))
        return -1;
    return 0;
}

void cg_plan_free(cg_plan *p)
{
    free(p->ops);
    free(p->fused_into);
    free(p->def_index);
    free(p->last_use);
    free(p->out_index);
    free(p->input_index);
    free(p->update_slot);
    free(p->rt_output);
    free(p->reuse);
    free(p->row_group);
    free(p->row_local);
    free(p->row_stream);
    memset(p, 0, sizeof *p);
}
