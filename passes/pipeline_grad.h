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
 * global.  Returns how many collectives moved; m is left verifiable. */
int pass_pipeline_defer_grads(pass_ctx *ctx, ir_module *m);

#endif
