/*
 * pipeline_split.h - the backward loop of a pipelined program split into
 * its input-gradient and weight-gradient halves, for the zero-bubble
 * schedule (pipeline_split.c; docs/pipeline.md "Zero-bubble: the split
 * backward").  Internal to the passes: the pipeline pass calls it.
 */
#ifndef EINC_PASSES_PIPELINE_SPLIT_H
#define EINC_PASSES_PIPELINE_SPLIT_H

#include "pass.h"

/* Splits the reverse loop over the pipelined layer dim m->pipe.dim (the
 * backward loop autodiff built, passes/grad_loop.c) into two loops over
 * the same layers, in the same (reverse) order:
 *
 *  - loop B keeps the ops the loop's carried gradient dL/dx depends on
 *    (what stage z-1 waits for), and stacks per layer (LayerStack) each of
 *    its values that loop W reads;
 *  - loop W, placed after every other backward op and before the update,
 *    runs the rest (the weight gradients, stacked per layer), reading the
 *    stacked values back per layer (LayerSlice); it carries a scalar zero
 *    that nothing reads.  The backward ops outside the loops that
 *    the gradient entering loop B does not depend on (the embedding's,
 *    the head's and a final norm's weight gradients, a sum over loop W's
 *    stacks, a gradient's collective; pipe_work_split_w) move after it,
 *    in their order: the W item runs them.
 *
 * Each weight gradient is computed by the same ops from the same values as
 * before, so it is bit-identical to the unsplit loop's.  Shapes are global
 * (the module's).  Returns 0, or 1 after a located error through ctx's
 * diagnostics when there is no such loop or loop W would compute no weight
 * gradient (no stacked param in the loop).  Qi et al., "Zero Bubble
 * Pipeline Parallelism", ICLR'24, section 2; seed 000's DeepSeek-v3
 * figure. */
int pass_pipeline_split_backward(pass_ctx *ctx, ir_module *m);
/* Whether pass_pipeline_split_backward would split m's backward loop: it
 * has one, loop W would compute a weight gradient, and every value loop W
 * reads from loop B can be kept per layer (none holds unreduced partial
 * sums).  m is not modified. */
bool pass_pipeline_split_applies(const ir_module *m);

#endif
