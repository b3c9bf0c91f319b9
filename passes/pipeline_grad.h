/*
 * pipeline_grad.h - the stacked params' gradient collectives of a
 * pipelined training step moved out of the backward loop, to run once per
 * step on the gradient summed over the microbatches (pipeline_grad.c;
 * docs/pipeline.md "Gradient collectives once per step").  Internal to the
 * passes: the pipeline pass calls it.
 */
#ifndef EINC_PASSES_PIPELINE_GRAD_H
#define EINC_PASSES_PIPELINE_GRAD_H

#include "pass.h"

/* For every collective of a backward loop over the pipelined layer dim
 * that pipe_work_deferred_stack accepts (a summing AllReduce or
 * ReduceScatter over a data-parallel or FSDP axis of a floating-point
 * weight gradient, stacked by its loop and read only by the update): the loop's
 * LayerStack stacks the collective's operand instead, unreduced (the
 * stack [L_Z, ...]{U_X}, one stage's layers per device), and the
 * collective runs on that stack after the backward's last op, before the
 * update, with the result the update read before (its dim shifted by the
 * stacked one for a ReduceScatter).  The run function sums the stack
 * over the microbatches and runs the collective once, on the sum
 * (codegen/pipeline_plan.c), which equals the sum of the per-microbatch
 * reductions since the collective is linear.  An FSDP gradient's sum is
 * then the stage's full gradient, X times its reduced block.  Shapes are
 * global.  A gradient that pipe_work_grad_per_microbatch keeps per
 * microbatch (--grad-sync=microbatch, or pipeline_choose.c's fallback)
 * stays in its loop, its reason saying so, and m->pipe.grad_mb becomes
 * the names of every one kept (arena-owned, any number).  Returns how many collectives moved; m is
 * left verifiable. */
int pass_pipeline_defer_grads(pass_ctx *ctx, ir_module *m);

/* At most this many stacked gradients take part in the choice's fallback
 * (--grad-sync=auto); beyond it the rest stay deferred.  Not a limit of
 * --grad-sync=microbatch, which keeps every one. */
#define PIPE_GRAD_FALLBACK_MAX 64

/* The stacked gradients (their LayerStack's tensor names, the values'
 * own strings) whose deferral (pipe_work_deferrable_stack) adds bytes to
 * a stage, an FSDP ReduceScatter's (|X| - 1)/|X| of the stage's full
 * gradient, into names (at most `max`), in the order a stage that does
 * not fit keeps them per microbatch: the most bytes saved per second of
 * collective lost first (greedy; the time lost is the per-layer
 * collective, op->cost.time of m as last costed, run M - 1 more times
 * per layer and step whatever the gradient, so the ratio ranks them at
 * every M).  A DP AllReduce, whose deferral adds nothing, never falls
 * back.  `ldim`: the layer dim (m->pipe.dim once pipelined; `einc analyze
 * --stages` passes its repeat block's).  Returns the count. */
int pass_pipeline_grad_fallback(const ir_module *m, int ldim, const char **names, int max);

#endif
