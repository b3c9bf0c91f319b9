/*
 * pipe_work.c - what one pipeline stage does per microbatch, read off a
 * compiled and costed training program (pipe_work.h).
 *
 * Pipelining cuts the program's repeat block into stages of |L| / Z
 * consecutive layers (seed 000, pipeline parallelism; issue 25's notation
 * W[L_Z, ...]).  The schedules (passes/costmodel/pipeline.h) need, per
 * stage and microbatch, the forward time F, the input-gradient time B and
 * the weight-gradient time W, and the size of the activation handed to the
 * next stage.  The derived backward pass does not say which of its ops are
 * B and which W, but its data flow does: B is what the gradient flowing to
 * the previous layer depends on (the backward loop's carried value), W the
 * rest (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24, §2: the
 * backward split into dL/dx and dL/dW).  A collective among the W ops
 * reduces a weight gradient (seed 000: DP's AllReduce, FSDP's
 * ReduceScatter): a pipeline accumulates gradients over the microbatches
 * and reduces once per step, so those are counted once per step, not per
 * microbatch.  The sums themselves are work per microbatch: a stacked
 * gradient's is its LayerStack op, a non-stacked one's (the embedding's,
 * the head's) no op, so its bytes are kept apart (sum_pre, sum_post).
 */
#include "pipe_work.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The program's forward repeat block and the reverse one that is its
 * backward pass: exactly one of each over the same dim, or with `forward`
 * one forward block and no backward one (*bwd NULL).  A backward split for
 * zero-bubble (passes/pipeline_split.c) has a second reverse block over the
 * same dim, its dL/dW half, in *wloop (else NULL). */
static int find_loops(const ir_module *m, bool forward, const ir_op **fwd, const ir_op **bwd,
                      const ir_op **wloop, char *err, size_t errlen)
{
    int nf = 0, nb = 0;
    *fwd = *bwd = *wloop = NULL;
    for (const ir_op *op = m->first; op; op = op->next) {
        if (op->kind != IR_OP_LOOPBEGIN)
            continue;
        if (op->u.loop.reverse && op->phase == IR_PHASE_BACKWARD) {
            if (*bwd && !*wloop && op->u.loop.dim == (*bwd)->u.loop.dim) {
                *wloop = op;
                continue;
            }
            *bwd = op;
            nb++;
        } else if (!op->u.loop.reverse && op->phase == IR_PHASE_FORWARD) {
            *fwd = op;
            nf++;
        }
    }
    if (nf != 1) {
        snprintf(err, errlen, "pipelining cuts one repeat block into stages; the program has %d", nf);
        return -1;
    }
    if (forward && nb != 0) {
        snprintf(err, errlen, "a pipelined forward has no backward pass; the program has %d", nb);
        return -1;
    }
    if (!forward && (nb != 1 || (*bwd)->u.loop.dim != (*fwd)->u.loop.dim)) {
        snprintf(err, errlen, "pipelining prices a training step: the program needs a loss and an "
                 "optimizer, whose backward pass reverses its repeat block");
        return -1;
    }
    return 0;
}

/* Whether v's op is one mark_deps walks: in the body of `loop`, or with
 * loop NULL outside every loop in the backward phase; not the loop's own
 * LoopBegin or LoopEnd. */
static bool in_scope(const ir_value *v, const ir_op *loop)
{
    const ir_op *d = v->def;
    return d && d->loop == loop && d->kind != IR_OP_LOOPBEGIN && d->kind != IR_OP_LOOPEND &&
           (loop || d->phase == IR_PHASE_BACKWARD);
}

/* Marks in `mark` (by value id) every value `root` depends on through ops
 * in scope (in_scope), root included.  Each value is pushed once, when it
 * is marked, so the explicit stack (no recursion on user input) never
 * holds more than nvalues entries. */
static int mark_deps(const ir_module *m, const ir_value *root, const ir_op *loop, bool *mark)
{
    if (!in_scope(root, loop) || mark[root->id])
        return 0;
    const ir_value **stack = malloc((size_t)m->nvalues * sizeof *stack);
    if (!stack)
        return -1;
    int n = 0;
    mark[root->id] = true;
    stack[n++] = root;
    while (n > 0) {
        const ir_op *d = stack[--n]->def;
        for (int i = 0; i < d->noperands; i++) {
            const ir_value *o = d->operands[i];
            if (!mark[o->id] && in_scope(o, loop)) {
                mark[o->id] = true;
                stack[n++] = o;
            }
        }
    }
    free(stack);
    return 0;
}

/* Whether a value of type t holds the loop dim (a stacked param, its
 * optimizer state or its update). */
static bool has_dim(const ir_type *t, int dim)
{
    for (int d = 0; d < t->rank; d++)
        if (t->dims[d] == dim)
            return true;
    return false;
}

/* Whether add_op counts op once per step as a weight gradient's
 * reduction: a collective outside the loops in the backward phase, off the
 * input gradient's path. */
static bool is_sync(const ir_op *op, const bool *in_b)
{
    return !op->loop && op->phase == IR_PHASE_BACKWARD && ir_op_is_reshard(op->kind) &&
           op->kind != IR_OP_SLICE && !in_b[op->result->id];
}

/* Whether only the update reads v (and something does). */
static bool update_only(const ir_value *v)
{
    for (int u = 0; u < v->nuses; u++)
        if (v->uses[u].op->phase != IR_PHASE_UPDATE)
            return false;
    return v->nuses > 0;
}

/* Bytes per device the step adds into a sum over the microbatches after
 * `op` (0 if none): its result, not stacked, defined outside the loops by
 * a forward or backward op, and read by the update or by a gradient's
 * reduction that only the update reads (which runs once, on the sum).
 * The run function sums exactly the values the update reads from the
 * forward and backward, after moving such reductions to the update
 * (codegen/pipeline_plan.c, "Accumulated values"). */
static double summed_bytes(const ir_module *m, const ir_op *op, const bool *in_b, int ldim)
{
    const ir_value *v = op->result;
    if (!v || op->loop || op->kind == IR_OP_LOOPBEGIN || op->kind == IR_OP_LOOPEND ||
        op->phase == IR_PHASE_UPDATE || (is_sync(op, in_b) && update_only(v)) || has_dim(&v->type, ldim))
        return 0;
    for (int u = 0; u < v->nuses; u++) {
        const ir_op *r = v->uses[u].op;
        if (r->phase == IR_PHASE_UPDATE || (is_sync(r, in_b) && update_only(r->result)))
            return (double)ir_local_bytes(m, &v->type);
    }
    return 0;
}

/* Adds one op's time to its place in w. */
static void add_op(const ir_module *m, pipe_work *w, const ir_op *op, const ir_op *fwd, const ir_op *bwd,
                   const ir_op *wloop, bool before_bwd, bool after_fwd, const bool *in_b, int ldim)
{
    double t = op->cost.time;
    bool coll = ir_op_is_reshard(op->kind) && op->kind != IR_OP_SLICE;
    double summed = summed_bytes(m, op, in_b, ldim);
    if (summed > 0)
        *((op->phase == IR_PHASE_FORWARD ? after_fwd : before_bwd) ? &w->sum_post : &w->sum_pre) += summed;
    if (op->phase == IR_PHASE_UPDATE) {
        if (has_dim(&op->result->type, ldim))
            w->update_stacked += t;
        else
            w->update_other += t;
        return;
    }
    if (op->loop == fwd) {
        w->layer_f += t;
        return;
    }
    if (wloop && op->loop == wloop) { /* the split's dL/dW loop */
        *(coll ? &w->sync_layer : &w->layer_w) += t;
        return;
    }
    if (bwd && op->loop == bwd) {
        if (in_b[op->result->id])
            w->layer_b += t;
        else if (coll)
            w->sync_layer += t;
        else
            w->layer_w += t;
        return;
    }
    if (op->phase == IR_PHASE_FORWARD) {
        if (after_fwd)
            w->post_f += t;
        else
            w->pre_f += t;
        return;
    }
    /* Outside the loops, backward: before the backward loop the loss's and
     * the head's gradients (last stage), after it the embedding's (first). */
    double *b = before_bwd ? &w->post_b : &w->pre_b;
    double *wt = before_bwd ? &w->post_w : &w->pre_w;
    double *sync = before_bwd ? &w->sync_post : &w->sync_pre;
    if (in_b[op->result->id])
        *b += t;
    else if (coll)
        *sync += t;
    else
        *wt += t;
}

/* w->split and w->cross_layer (pipe_work.h): the LayerStacks of the split
 * dL/dx loop `bwd` when there is a dL/dW loop, else the values of `bwd`'s
 * body on the dL/dx path (in_b) that an op off it reads, each once, as
 * pass_pipeline_split_backward would stack them (a LayerSlice is sliced
 * again, no copy).  Returns -1 when out of memory. */
static int cross_of(const ir_module *m, const ir_op *bwd, const ir_op *wloop, const bool *in_b, pipe_work *w)
{
    w->split = wloop != NULL;
    const ir_op *end = bwd->u.loop.end;
    if (wloop) {
        for (const ir_op *op = bwd->next; op && op != end; op = op->next)
            if (op->kind == IR_OP_LAYERSTACK && op->loop == bwd)
                w->cross_layer += (double)ir_local_bytes(m, &op->operands[0]->type);
        return 0;
    }
    bool *seen = calloc((size_t)m->nvalues + 1, sizeof *seen);
    if (!seen)
        return -1;
    for (const ir_op *op = bwd->next; op && op != end; op = op->next) {
        if (op->loop != bwd || in_b[op->result->id])
            continue;
        for (int k = 0; k < op->noperands; k++) {
            const ir_value *v = op->operands[k];
            if (v->id >= m->nvalues || seen[v->id] || !in_b[v->id] || !v->def ||
                (v->def != bwd && v->def->loop != bwd) || v->def->kind == IR_OP_LAYERSLICE ||
                v->def->kind == IR_OP_LAYERSTACK)
                continue;
            seen[v->id] = true;
            w->cross_layer += (double)ir_local_bytes(m, &v->type);
        }
    }
    free(seen);
    return 0;
}

/* pipe_work_of and pipe_work_forward_of. */
static int work_of(const ir_module *m, bool forward, pipe_work *w, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    const ir_op *fwd, *bwd, *wloop;
    if (find_loops(m, forward, &fwd, &bwd, &wloop, err, errlen) != 0)
        return -1;
    int ldim = fwd->u.loop.dim;
    w->hop = -1;
    w->layers = m->dims[ldim].size;
    bool *in_b = calloc((size_t)m->nvalues + 1, sizeof *in_b);
    if (!in_b || (bwd && (mark_deps(m, bwd->u.loop.end->operands[0], bwd, in_b) != 0 ||
                          mark_deps(m, bwd->operands[0], NULL, in_b) != 0))) {
        free(in_b);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* The blocks' LoopBegin and LoopEnd copy the carried value in and out:
     * the forward block's on the first and last stage, the backward's on
     * the last and first, on the input gradient's path. */
    if (bwd)
        in_b[bwd->result->id] = in_b[bwd->u.loop.end->result->id] = true;
    bool before_bwd = true, after_fwd = false;
    for (const ir_op *op = m->first; op; op = op->next) {
        if (op == fwd->u.loop.end)
            after_fwd = true;
        if (op->kind == IR_OP_LAYERSTACK && op->loop == fwd)
            w->act_layer += (double)ir_local_bytes(m, &op->operands[0]->type);
        if (op->kind == IR_OP_PERMUTE) { /* a stage boundary's transfer: the schedule's hop */
            if (op->u.perm.delta > 0 && op->cost.valid)
                w->hop = op->cost.time;
            continue;
        }
        if (op->cost.valid)
            add_op(m, w, op, fwd, bwd, wloop, before_bwd, after_fwd, in_b, ldim);
        if (op == bwd)
            before_bwd = false;
    }
    int rc = bwd ? cross_of(m, bwd, wloop, in_b, w) : 0;
    free(in_b);
    if (rc != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* A pipelined module's stacked values hold one stage's layers (their
     * layer dim split over the pipeline axis): scale them to the whole
     * stack, as pipe_work holds them (pipe_work.h). */
    double zs = m->pipe.axis >= 0 && m->pipe.dim == ldim ? (double)m->mesh.axes[m->pipe.axis].size : 1;
    w->update_stacked *= zs;
    w->carry_bytes = (double)ir_local_bytes(m, &fwd->result->type);
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        if (v->kind != IR_VAL_PARAM && v->kind != IR_VAL_STATE)
            continue;
        double bytes = (double)ir_local_bytes(m, &v->type);
        /* A pipelined program's state (a KV cache) holds every
         * microbatch's rows, and its type one microbatch's. */
        if (v->kind == IR_VAL_STATE && m->pipe.batch_dim >= 0 && has_dim(&v->type, m->pipe.batch_dim))
            bytes *= m->pipe.microbatches;
        bool stacked = has_dim(&v->type, ldim);
        *(stacked ? &w->state_stacked : &w->state_other) += stacked ? zs * bytes : bytes;
        if (v->kind == IR_VAL_PARAM)
            *(stacked ? &w->param_stacked : &w->param_other) += stacked ? zs * bytes : bytes;
    }
    return 0;
}

int pipe_work_of(const ir_module *m, pipe_work *w, char *err, size_t errlen)
{
    return work_of(m, false, w, err, errlen);
}

int pipe_work_forward_of(const ir_module *m, pipe_work *w, char *err, size_t errlen)
{
    return work_of(m, true, w, err, errlen);
}

double pipe_work_hop(const cost_hw *hw, double bytes, bool dcn)
{
    return cost_hop_time(hw, bytes, dcn).time;
}

double pipe_work_sum_time(const cost_hw *hw, double bytes)
{
    return hw->hbm_bw > 0 ? 3 * bytes / hw->hbm_bw : 0;
}
