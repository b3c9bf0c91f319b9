/*
 * pipeline_grad.c - a pipelined training step's per-layer gradient
 * collectives run once per step instead of once per microbatch
 * (pipeline_grad.h; docs/pipeline.md "Gradient collectives once per
 * step").
 *
 * With data parallelism or FSDP inside the stages (`Win[L_Z, D_X, F]`, the
 * batch on X), autodiff leaves each layer's weight gradient as partial
 * sums over X and the planner reduces it inside the backward loop, right
 * after the einsum (an AllReduce for DP, a ReduceScatter for FSDP), before
 * the loop stacks it.  Pipelined, that loop runs once per microbatch, so
 * the reduction would run M times per step, although only the update
 * reads it and it is linear: the reduction of the sum over the
 * microbatches is the sum of the reductions.  Megatron-LM and DeepSpeed
 * accumulate the unreduced gradients and reduce once per step; so does
 * this: the stack holds the unreduced partial sums and the collective
 * runs after the schedule on the whole stage's stack, one collective for
 * the stage's L/Z layers (one latency instead of L/Z M).
 *
 * Legality is pipe_work_deferred_stack's (the cost model prices exactly
 * what this moves).  The accumulator keeps the gradient's dtype, the one
 * the reduced per-microbatch gradients were summed in before (f32, f64;
 * bf16 summed in bf16 either way), so no precision is lost to a narrower
 * accumulator; the sums are taken in another order (microbatches, then
 * devices), which changes rounding only.  Memory: a DP gradient's unreduced stack is as large as
 * its reduced one; an FSDP gradient's is the full gradient of the stage's
 * layers instead of its 1/X block, which the cost model counts in the
 * fullest stage's memory (pipe_price, acc_extra_stacked) and so in the
 * choice of the schedule and M that fit the HBM.
 *
 * That memory is what FSDP exists to save (seed 000, FSDP), so deferring
 * is a choice per gradient (ir_pipeline.grad_sync, grad_mb): a gradient
 * kept per microbatch keeps its collective in the backward loop, as
 * before this pass, and the stack accumulates the reduced block.  The
 * choice is pipeline_choose.c's (deferred unless the stage then does not
 * fit the HBM; pass_pipeline_grad_fallback gives the order in which
 * gradients fall back) or --grad-sync's.
 */
#include <stdlib.h>

#include "pipe_work.h"
#include "pipeline_grad.h"

/* The op before which the moved collectives go: the first of the update,
 * or NULL (the module's end). */
static ir_op *update_start(const ir_module *m)
{
    for (ir_op *op = m->first; op; op = op->next)
        if (op->phase == IR_PHASE_UPDATE)
            return op;
    return NULL;
}

/* Moves collective `c` of its loop out: its LayerStack `st` stacks c's
 * operand (a new, unreduced stack value), and c, placed before `at`,
 * reduces that stack into st's old result, which the update reads. */
static void defer(ir_module *m, ir_op *c, ir_op *st, ir_op *at)
{
    ir_value *a = c->operands[0], *old = st->result;
    ir_type t = a->type;
    for (int d = t.rank; d > 0; d--)
        t.dims[d] = t.dims[d - 1];
    t.dims[0] = st->u.loop.dim;
    t.rank++;
    t.sh = ir_stack_sharding(m, &a->type.sh, a->type.rank, st->u.loop.dim);
    t.sh.unreduced = a->type.sh.unreduced;
    t.sh.red = a->type.sh.red;
    ir_value *stack = ir_value_new(m, old->tensor, IR_VAL_OP, &t, old->loc);
    ir_op *prev = st->prev;
    ir_op_remove(m, st);
    st->operands[0] = a;
    st->result = stack;
    ir_op_insert_after(m, prev, st);
    ir_op_remove(m, c);
    c->operands[0] = stack;
    c->result = old;
    /* The stacked dim comes first: a ReduceScatter scatters one dim later. */
    if (c->u.coll.dim == IR_COLL_PER_AXIS)
        for (int k = 0; k < c->u.coll.naxes; k++)
            c->u.coll.dims[k]++;
    else if (c->u.coll.dim >= 0)
        c->u.coll.dim++;
    if (at) {
        ir_op_insert_before(m, at, c);
    } else {
        ir_op_append(m, c);
    }
    c->phase = IR_PHASE_BACKWARD;
    ir_op_set_reason(m, c, st, -1, "pipeline: the gradient of '%s' reduced once per step, on its sum over "
                     "the microbatches (the collective is linear; docs/pipeline.md)", old->tensor);
}

/* One deferrable collective: its gradient's name and the fallback's key. */
typedef struct fallback {
    const char *grad;
    double ratio; /* bytes its deferral adds per second of collective per layer */
} fallback;

static int by_ratio(const void *a, const void *b)
{
    double x = ((const fallback *)a)->ratio, y = ((const fallback *)b)->ratio;
    return x > y ? -1 : x < y;
}

int pass_pipeline_grad_fallback(const ir_module *m, int ldim, const char **names, int max)
{
    fallback f[PIPE_GRAD_FALLBACK_MAX];
    int n = 0;
    for (const ir_op *op = m->first; op && n < max && n < PIPE_GRAD_FALLBACK_MAX; op = op->next) {
        const ir_op *st = pipe_work_deferrable_stack(m, op, ldim);
        if (!st)
            continue;
        double extra = (double)ir_local_bytes(m, &op->operands[0]->type) - (double)ir_local_bytes(m, &op->result->type);
        if (extra <= 0)
            continue;
        /* A collective priced at no time loses nothing per microbatch: first. */
        double t = op->cost.valid ? op->cost.time : 0;
        f[n++] = (fallback){.grad = st->result->tensor, .ratio = t > 0 ? extra / t : 1e300};
    }
    qsort(f, (size_t)n, sizeof *f, by_ratio);
    for (int i = 0; i < n; i++)
        names[i] = f[i].grad;
    return n;
}

/* Marks collective `c`, kept in its backward loop, with why: --dump-ir
 * then says where it runs. */
static void keep(ir_module *m, ir_op *c, const char *grad)
{
    ir_op_set_reason(m, c, c->for_op, c->for_operand, "pipeline: the gradient of '%s' reduced per microbatch, "
                     "inside the backward loop (%s; docs/pipeline.md)", grad,
                     m->pipe.grad_sync == IR_GRAD_SYNC_MICROBATCH ? "--grad-sync=microbatch"
                                                                   : "its unreduced sum would not fit the HBM");
}

int pass_pipeline_defer_grads(pass_ctx *ctx, ir_module *m)
{
    (void)ctx;
    if (m->pipe.axis < 0)
        return 0;
    ir_op *at = update_start(m);
    /* The names kept, for --dump-cost and --dump-ir=json: counted before
     * any collective moves, as any number may stay (--grad-sync=microbatch
     * keeps every one). */
    int nkept = 0, moved = 0;
    for (const ir_op *op = m->first; op; op = op->next) {
        const ir_op *st = pipe_work_deferrable_stack(m, op, m->pipe.dim);
        nkept += st && pipe_work_grad_per_microbatch(m, st->result->tensor);
    }
    const char **kept = nkept ? ir_alloc(&m->arena, (size_t)nkept * sizeof *kept) : NULL;
    nkept = 0;
    for (ir_op *op = m->first; op;) {
        ir_op *next = op->next;
        const ir_op *st = pipe_work_deferrable_stack(m, op, m->pipe.dim);
        if (st && pipe_work_grad_per_microbatch(m, st->result->tensor)) {
            keep(m, op, st->result->tensor);
            kept[nkept++] = st->result->tensor;
        } else if (st) {
            defer(m, op, (ir_op *)st, at);
            moved++;
        }
        op = next;
    }
    m->pipe.grad_mb = kept;
    m->pipe.ngrad_mb = nkept;
    return moved;
}
