/*
 * optimize_internal.h - what the optimize pass (optimize.c) shares with
 * optimize_schedule.c: the training step's learning-rate schedules and
 * global-norm gradient clipping, lowered into IR ops.
 */
#ifndef EINC_PASSES_OPTIMIZE_INTERNAL_H
#define EINC_PASSES_OPTIMIZE_INTERNAL_H

#include "ir_ewtree.h"

/* A learning-rate schedule: `lr` is the peak; `warmup` steps ramp up to it
 * and, when `cosine`, a cosine falls from it to `min_lr` at step
 * `decay_steps` (optimize_schedule.c). */
typedef struct opt_schedule {
    double lr, warmup, decay_steps, min_lr;
    bool cosine;
} opt_schedule;

/* Whether schedule `s` changes the lr from step to step (else lr is constant). */
bool opt_schedule_varies(const opt_schedule *s);
/* Emits the lr of the step whose new step count (`opt.step` after its
 * increment, a scalar) is `t1`, as a scalar value named e->tensor of dtype
 * e->dtype; NULL if an IR limit was hit (optimize_schedule.c has the formula). */
ir_value *opt_emit_lr(const ir_ewt_out *e, const opt_schedule *s, ir_value *t1);
/* Emits the squared global L2 norm of the `n` gradients `grads` (each its
 * own dims and sharding) as a scalar named e->tensor of dtype e->dtype:
 * one sum-of-squares einsum per gradient, so the planner adds the
 * AllReduce a sharded gradient's partial sum needs, then their sum. */
ir_value *opt_emit_sqnorm(const ir_ewt_out *e, ir_value *const *grads, int n);
/* Emits min(1, clip / (sqrt(sqnorm) + 1e-6)), torch.nn.utils.clip_grad_norm_'s
 * factor, as a scalar named e->tensor of dtype e->dtype. */
ir_value *opt_emit_clip_factor(const ir_ewt_out *e, ir_value *sqnorm, double clip);

#endif
