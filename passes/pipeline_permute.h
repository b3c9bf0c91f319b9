/*
 * pipeline_permute.h - the CollectivePermutes at a pipelined program's
 * stage boundaries (pipeline_permute.c; docs/pipeline.md "The transfers as
 * ops").  Internal to the passes: the pipeline pass calls it.
 */
#ifndef EINC_PASSES_PIPELINE_PERMUTE_H
#define EINC_PASSES_PIPELINE_PERMUTE_H

#include "pass.h"

/* Puts a CollectivePermute along the pipeline's axis m->pipe.axis after
 * the LoopEnd of the forward loop over the pipelined layer dim (the
 * activation a stage hands the next: delta +1) and, in a training step,
 * after the LoopEnd of the first reverse loop over it (the backward loop,
 * or zero-bubble's dL/dx loop: the gradient handed back, delta -1).  Each
 * takes the LoopEnd's result (global shape, one microbatch once the pass
 * shrank the batch dim; per device the carried value's block) and its
 * result has the same type; nothing in the module reads the result: it is
 * the next stage's LoopBegin operand, which codegen receives there
 * (codegen/pipeline.c).  With pipe.chunks > 1 (interleaved) the pairs are
 * cyclic: stage Z-1's chunk c hands on to stage 0's chunk c+1.  Returns 0,
 * or 1 after an error through ctx's diagnostics when a loop is missing. */
int pass_pipeline_permutes(pass_ctx *ctx, ir_module *m);

#endif
