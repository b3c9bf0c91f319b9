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
 * backward split into dL/dx and dL/dW).  Inside the loops that split is
 * the price of each layer; outside them an op is priced in the item the
 * run function runs it in (codegen/pipeline_plan.c), so that the price
 * describes what runs: the embedding's and the head's weight gradients,
 * off the input gradient's path, run in W m when the backward is split
 * (pipe_work_split_w), else in B m, and only the
 * collectives the run function moves to the update (a gradient's DP
 * AllReduce or FSDP ReduceScatter after the backward loop that only the
 * update reads: linear, they commute with the sum over the microbatches)
 * and the stacked params' per-layer gradient collectives that the
 * pipeline pass moves out of the backward loop (pipe_work_deferred_stack,
 * passes/pipeline_grad.c; priced so on a module not pipelined yet too;
 * not those kept per microbatch, pipe_work_grad_per_microbatch)
 * run once per step; every other collective runs once per microbatch.
 * The sums themselves
 * are work per microbatch: a stacked
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

/* Whether `op` is an op of no loop and no loop's LoopBegin or LoopEnd. */
static bool outside_loops(const ir_op *op)
{
    return !op->loop && op->kind != IR_OP_LOOPBEGIN && op->kind != IR_OP_LOOPEND;
}

void pipe_work_split_w(const ir_op *bwd, bool *w)
{
    for (const ir_op *op = bwd->u.loop.end->next; op && op->phase == IR_PHASE_BACKWARD; op = op->next)
        if (outside_loops(op) && op->kind != IR_OP_PERMUTE && op->result)
            w[op->result->id] = true;
    /* Before the loop, in reverse: an op stays in B when a reader does
     * (bwd's LoopBegin, an op of a loop, a forward op, a backward op that
     * stays); the update and the ops after the loop, all in W or later,
     * do not hold it.  Readers come after their operands' ops, so each
     * op's readers are decided when it is reached. */
    for (const ir_op *op = bwd->prev; op && op->phase == IR_PHASE_BACKWARD && outside_loops(op); op = op->prev) {
        const ir_value *v = op->result;
        if (!v)
            continue;
        bool stays = false;
        for (int u = 0; u < v->nuses && !stays; u++) {
            const ir_op *r = v->uses[u].op;
            stays = r == bwd || r->loop || r->phase == IR_PHASE_FORWARD ||
                    (r->phase == IR_PHASE_BACKWARD && outside_loops(r) && r->result && !w[r->result->id]);
        }
        w[v->id] = !stays;
    }
}

/* What the walk over the ops knows (work_of). */
typedef struct walk {
    const ir_module *m;
    pipe_work *w;
    const ir_op *fwd, *bwd, *wloop;
    const bool *in_b;   /* by value id: on the input gradient's path */
    const bool *once;   /* by value id: its op runs once per step (mark_once) */
    const bool *split_w; /* by value id: outside the loops, W with a split backward (pipe_work_split_w) */
    const uint8_t *avail; /* by value id: the stages that can compute it (AV_*) */
    int ldim;
    double zs;          /* stages the module's stacks are split over already (1: not pipelined) */
} walk;

enum { AV_FIRST = 1, AV_LAST = 2, AV_ALL = 3 };

/* Whether the run function runs `op`, outside the loops and not the
 * update's, once per step (codegen/pipeline_plan.c, cg_pp_classify): a
 * linear collective whose result only ops already marked in `once` read
 * and that is no output (a gradient's DP AllReduce or FSDP ReduceScatter
 * commutes with the sum over the microbatches). */
static bool runs_once(const ir_module *m, const ir_op *op, const bool *once)
{
    const ir_value *v = op->result;
    if (!v || op->phase == IR_PHASE_UPDATE || !ir_op_is_linear_reshard(op) || v->nuses == 0)
        return false;
    for (int u = 0; u < v->nuses; u++)
        if (!once[v->uses[u].op->result->id])
            return false;
    for (int j = 0; j < m->noutputs; j++)
        if (m->outputs[j].value == v)
            return false;
    return true;
}

/* Marks in `once` the results of the ops the run function runs once per
 * step rather than per microbatch: the update's, and each op after the
 * backward loop `bwd` that runs_once.  With `moved` (a module not split
 * yet, priced for a split schedule) also the ops before bwd that
 * pipe_work_split_w marks there, which the split moves after the loops
 * (passes/pipeline_split.c), where the run function finds them: the
 * head's gradient collective then runs once per step, as in the split
 * module.  In reverse order, so that a chain of them counts; the one rule
 * for every pricing of a step. */
static void mark_once(const ir_module *m, const ir_op *bwd, const bool *moved, bool *once)
{
    for (const ir_op *op = m->first; op; op = op->next)
        if (op->result && op->phase == IR_PHASE_UPDATE)
            once[op->result->id] = true;
    const ir_op *stop = bwd ? bwd->u.loop.end : NULL;
    for (const ir_op *op = m->last; op && stop && op != stop; op = op->prev)
        if (runs_once(m, op, once))
            once[op->result->id] = true;
    for (const ir_op *op = bwd && moved ? bwd->prev : NULL; op && op->phase == IR_PHASE_BACKWARD && outside_loops(op);
         op = op->prev)
        if (op->result && moved[op->result->id] && runs_once(m, op, once))
            once[op->result->id] = true;
}

/* The stages that can compute each value, in program order, as the run
 * function finds them: the forward block's result is the last stage's,
 * the backward block's the first's, an op outside the loops has what all
 * its operands have; everything else every stage has. */
static void mark_avail(const ir_module *m, const ir_op *fwd, const ir_op *bwd, uint8_t *avail)
{
    for (int i = 0; i < m->nvalues; i++)
        avail[i] = AV_ALL;
    for (const ir_op *op = m->first; op; op = op->next) {
        if (!op->result)
            continue;
        uint8_t a = AV_ALL;
        if (op == fwd->u.loop.end)
            a = AV_LAST;
        else if (bwd && op == bwd->u.loop.end)
            a = AV_FIRST;
        else if (!op->loop && op->kind != IR_OP_LOOPBEGIN && op->phase != IR_PHASE_UPDATE)
            for (int k = 0; k < op->noperands; k++)
                a &= avail[op->operands[k]->id];
        avail[op->result->id] = a;
    }
}

/* Bytes per device the step adds into a sum over the microbatches after
 * `op` (0 if none): its result, not stacked, defined outside the loops by
 * a forward or backward op that runs per microbatch, and read by the
 * update or by a collective that runs once per step on the sum.  The run
 * function sums exactly the values the update reads from the forward and
 * backward, after moving such collectives to the update
 * (codegen/pipeline_plan.c, "Accumulated values").  A sum only the first
 * or only the last stage computes is also AllReduced over the stages
 * (w->zsum). */
static double summed_bytes(const walk *k, const ir_op *op)
{
    const ir_value *v = op->result;
    if (!v || op->loop || op->kind == IR_OP_LOOPBEGIN || op->kind == IR_OP_LOOPEND ||
        k->once[v->id] || has_dim(&v->type, k->ldim))
        return 0;
    for (int u = 0; u < v->nuses; u++)
        if (k->once[v->uses[u].op->result->id])
            return (double)ir_local_bytes(k->m, &v->type);
    return 0;
}

const ir_op *pipe_work_deferrable_stack(const ir_module *m, const ir_op *op, int ldim)
{
    const ir_op *lp = op->loop;
    if (!lp || lp->u.loop.dim != ldim || !lp->u.loop.reverse || lp->phase != IR_PHASE_BACKWARD ||
        (op->kind != IR_OP_ALLREDUCE && op->kind != IR_OP_REDUCESCATTER) || !ir_op_is_linear_reshard(op))
        return NULL;
    const ir_value *a = op->operands[0], *r = op->result;
    if (ir_dtype_integer(a->type.dtype) || a->type.rank + 1 > IR_MAX_RANK ||
        r->type.sh.unreduced || r->nuses != 1)
        return NULL;
    const ir_op *st = r->uses[0].op;
    if (st->kind != IR_OP_LAYERSTACK || st->loop != lp || st->result->nuses < 1)
        return NULL;
    for (int u = 0; u < st->result->nuses; u++)
        if (st->result->uses[u].op->phase != IR_PHASE_UPDATE)
            return NULL;
    for (int j = 0; j < m->noutputs; j++)
        if (m->outputs[j].value == st->result)
            return NULL;
    return st;
}

bool pipe_work_grad_per_microbatch(const ir_module *m, const char *grad)
{
    if (m->pipe.grad_sync == IR_GRAD_SYNC_MICROBATCH)
        return true;
    if (m->pipe.grad_sync == IR_GRAD_SYNC_STEP)
        return false;
    for (int i = 0; i < m->pipe.ngrad_mb; i++)
        if (strcmp(m->pipe.grad_mb[i], grad) == 0)
            return true;
    return false;
}

const ir_op *pipe_work_deferred_stack(const ir_module *m, const ir_op *op, int ldim)
{
    const ir_op *st = pipe_work_deferrable_stack(m, op, ldim);
    return st && !pipe_work_grad_per_microbatch(m, st->result->tensor) ? st : NULL;
}

/* Whether `op` is a deferred gradient collective (pipe_work_deferred_stack)
 * of the module not pipelined yet, inside its loop (`stack`: the
 * LayerStack of its result), or, the module pipelined, that collective
 * after the loop on the stacked gradient, once per step (once[]): its
 * time and its accumulators' extra bytes go to sync_stacked and
 * acc_extra_stacked, for the whole stack of layers. */
static bool add_deferred(const walk *k, const ir_op *op)
{
    pipe_work *w = k->w;
    bool in_loop = op->loop && pipe_work_deferred_stack(k->m, op, k->ldim);
    bool after = !op->loop && op->phase != IR_PHASE_UPDATE && k->once[op->result->id] &&
                 ir_op_is_reshard(op->kind) && op->kind != IR_OP_ALLGATHER && has_dim(&op->result->type, k->ldim);
    if (!in_loop && !after)
        return false;
    double times = in_loop ? (double)w->layers : k->zs;
    double extra = (double)ir_local_bytes(k->m, &op->operands[0]->type) - (double)ir_local_bytes(k->m, &op->result->type);
    w->sync_stacked += times * op->cost.time;
    w->acc_extra_stacked += times * (extra > 0 ? extra : 0);
    return true;
}

/* An op's time as the pipelined step runs it: a LayerStack of a deferred
 * collective's result in a module not pipelined yet will stack (and sum
 * over the microbatches) the collective's operand instead, unreduced: an
 * FSDP ReduceScatter's X times the bytes. */
static double run_time(const walk *k, const ir_op *op)
{
    const ir_value *a = op->kind == IR_OP_LAYERSTACK ? op->operands[0] : NULL;
    const ir_op *c = a ? a->def : NULL;
    if (!c || !op->loop || pipe_work_deferred_stack(k->m, c, k->ldim) != op)
        return op->cost.time;
    double in = (double)ir_local_bytes(k->m, &c->operands[0]->type), out = (double)ir_local_bytes(k->m, &a->type);
    return out > 0 ? op->cost.time * in / out : op->cost.time;
}

/* Adds an AllReduce over the stages of `bytes` to w->zsum. */
static void add_zsum(pipe_work *w, double bytes)
{
    if (w->nzsum < PIPE_ZSUM_MAX)
        w->zsum[w->nzsum++] = bytes;
    else
        w->zsum[PIPE_ZSUM_MAX - 1] += bytes;
}

/* Adds one op's time to its place in w: its item (F, B or W, as the run
 * function runs it) and its stages; `after_fwd`, `after_bwd` and
 * `after_w` say whether the forward loop, the backward loop and the
 * split's dL/dW loop have begun. */
static void add_op(const walk *k, const ir_op *op, bool after_fwd, bool after_bwd, bool after_w)
{
    pipe_work *w = k->w;
    double t = run_time(k, op);
    if (add_deferred(k, op))
        return;
    /* Zero-bubble's W item: the ops from its dL/dW loop on, which are
     * those pipe_work_split_w marks once the backward is split. */
    bool in_w = after_w || (op->result && k->split_w[op->result->id]);
    double summed = summed_bytes(k, op);
    if (summed > 0) {
        uint8_t a = k->avail[op->result->id];
        bool last = a == AV_LAST || (a == AV_ALL && (op->phase == IR_PHASE_FORWARD ? after_fwd : !after_bwd));
        if (in_w)
            *(last ? &w->sum_post_w : &w->sum_pre_w) += summed;
        else
            *(last ? &w->sum_post : &w->sum_pre) += summed;
        if (a != AV_ALL)
            add_zsum(w, summed);
    }
    if (op->phase == IR_PHASE_UPDATE) {
        if (has_dim(&op->result->type, k->ldim))
            w->update_stacked += t;
        else
            w->update_other += t;
        return;
    }
    if (op->loop == k->fwd) {
        w->layer_f += t;
        return;
    }
    /* Every other op of a loop runs per microbatch, a collective too
     * (one the input gradient reads): the dL/dW loop's in W, the backward
     * loop's in B when the input gradient needs it, else in W. */
    if (k->wloop && op->loop == k->wloop) {
        w->layer_w += t;
        return;
    }
    if (k->bwd && op->loop == k->bwd) {
        *(k->in_b[op->result->id] ? &w->layer_b : &w->layer_w) += t;
        return;
    }
    if (k->once[op->result->id]) {
        bool last = k->avail[op->result->id] == AV_LAST;
        *(last ? &w->sync_post : &w->sync_pre) += t;
        /* Its operand is what the step sums over the microbatches: an
         * FSDP ReduceScatter's full gradient rather than its block. */
        double extra = (double)ir_local_bytes(k->m, &op->operands[0]->type) -
                       (double)ir_local_bytes(k->m, &op->result->type);
        if (ir_op_is_reshard(op->kind) && extra > 0)
            *(last ? &w->acc_extra_post : &w->acc_extra_pre) += extra;
        return;
    }
    /* Outside the loops: the stage from the data when only one can
     * compute it, else from the place (before the forward loop the first
     * stage's embedding; up to the backward loop the last stage's head
     * and loss; after it the first stage's embedding gradient). */
    uint8_t a = k->avail[op->result->id];
    bool last = a == AV_LAST || (a == AV_ALL && after_fwd && !after_bwd);
    if (op->phase == IR_PHASE_FORWARD && !after_bwd) {
        *(last ? &w->post_f : &w->pre_f) += t;
        return;
    }
    /* The backward's ops (and a forward op after the backward loop, the
     * loss's reduction) run in B m, but for the weight gradients and what
     * only they read, which a split backward runs in W m (in_w). */
    if (in_w)
        *(last ? &w->post_w : &w->pre_w) += t;
    else
        *(last ? &w->post_b : &w->pre_b) += t;
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
static int work_of(const ir_module *m, bool forward, bool split, pipe_work *w, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    const ir_op *fwd, *bwd, *wloop;
    if (find_loops(m, forward, &fwd, &bwd, &wloop, err, errlen) != 0)
        return -1;
    int ldim = fwd->u.loop.dim;
    w->hop = -1;
    w->layers = m->dims[ldim].size;
    size_t nv = (size_t)m->nvalues + 1;
    bool *in_b = calloc(nv, sizeof *in_b), *once = calloc(nv, sizeof *once);
    bool *split_w = calloc(nv, sizeof *split_w);
    uint8_t *avail = calloc(nv, sizeof *avail);
    if (!in_b || !once || !split_w || !avail ||
        (bwd && (mark_deps(m, bwd->u.loop.end->operands[0], bwd, in_b) != 0 ||
                 mark_deps(m, bwd->operands[0], NULL, in_b) != 0))) {
        free(in_b);
        free(once);
        free(split_w);
        free(avail);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (bwd)
        pipe_work_split_w(bwd, split_w);
    /* The blocks' LoopBegin and LoopEnd copy the carried value in and out:
     * the forward block's on the first and last stage, the backward's on
     * the last and first, on the input gradient's path. */
    if (bwd)
        in_b[bwd->result->id] = in_b[bwd->u.loop.end->result->id] = true;
    mark_once(m, bwd, split && !wloop ? split_w : NULL, once);
    mark_avail(m, fwd, bwd, avail);
    /* A pipelined module's stacked values hold one stage's layers (their
     * layer dim split over the pipeline axis): scaled to the whole stack,
     * as pipe_work holds them (pipe_work.h). */
    double zs = m->pipe.axis >= 0 && m->pipe.dim == ldim ? (double)m->mesh.axes[m->pipe.axis].size : 1;
    walk k = {.m = m, .w = w, .fwd = fwd, .bwd = bwd, .wloop = wloop, .in_b = in_b, .once = once,
              .split_w = split_w, .avail = avail, .ldim = ldim, .zs = zs};
    bool after_fwd = false, after_bwd = false, after_w = false;
    for (const ir_op *op = m->first; op; op = op->next) {
        if (op == fwd->u.loop.end)
            after_fwd = true;
        after_w |= op == wloop;
        if (op->kind == IR_OP_LAYERSTACK && op->loop == fwd)
            w->act_layer += (double)ir_local_bytes(m, &op->operands[0]->type);
        if (op->kind == IR_OP_PERMUTE) { /* a stage boundary's transfer: the schedule's hop */
            if (op->u.perm.delta > 0 && op->cost.valid)
                w->hop = op->cost.time;
            continue;
        }
        if (op->cost.valid)
            add_op(&k, op, after_fwd, after_bwd, after_w);
        after_bwd |= op == bwd; /* its LoopBegin takes the last stage's gradient in */
    }
    /* The loss and the other outputs but the updates are summed too, and
     * AllReduced over the stages when only some compute them. */
    for (int j = 0; j < m->noutputs && bwd; j++) {
        const ir_value *v = m->outputs[j].value;
        if (!m->outputs[j].update && v->def && !once[v->id] && avail[v->id] != AV_ALL)
            add_zsum(w, (double)ir_local_bytes(m, &v->type));
    }
    free(once);
    free(split_w);
    free(avail);
    int rc = bwd ? cross_of(m, bwd, wloop, in_b, w) : 0;
    free(in_b);
    if (rc != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    w->update_stacked *= zs;
    w->carry_bytes = (double)ir_local_bytes(m, &fwd->result->type);
    w->stage_devices = (double)ir_mesh_devices(&m->mesh) / zs;
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

int pipe_work_of(const ir_module *m, bool split, pipe_work *w, char *err, size_t errlen)
{
    return work_of(m, false, split, w, err, errlen);
}

int pipe_work_forward_of(const ir_module *m, pipe_work *w, char *err, size_t errlen)
{
    return work_of(m, true, false, w, err, errlen);
}

double pipe_work_hop(const cost_hw *hw, double bytes, bool dcn)
{
    return cost_hop_time(hw, bytes, dcn).time;
}

double pipe_work_sum_time(const cost_hw *hw, double bytes)
{
    return hw->hbm_bw > 0 ? 3 * bytes / hw->hbm_bw : 0;
}

double pipe_work_zsum_time(const cost_hw *hw, const pipe_work *w, int z, bool dcn, double bytes)
{
    if (z < 2)
        return 0;
    if (hw->measured && !dcn) {
        cost_coll_time r = cost_measured_coll_time(&hw->fit[COST_FIT_ALLREDUCE], z, bytes, z);
        return r.time * cost_measured_contention(hw, z * w->stage_devices);
    }
    int64_t sizes[1] = {z};
    bool links_dcn[1] = {dcn};
    return cost_coll_links_time(hw, IR_OP_ALLREDUCE, sizes, links_dcn, 1, bytes).time;
}

double pipe_work_zsums_time(const pipe_work *w, const cost_hw *hw, int z, bool dcn)
{
    double t = 0;
    for (int i = 0; i < w->nzsum; i++)
        t += pipe_work_zsum_time(hw, w, z, dcn, w->zsum[i]);
    return t;
}
