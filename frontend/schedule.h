/*
 * schedule.h - the training step's learning-rate schedules and global-norm
 * gradient clipping, lowered into IR ops by optimize.c (schedule.c).
 */
#ifndef EINC_FE_SCHEDULE_H
#define EINC_FE_SCHEDULE_H

#include "ewtree.h"

/* A learning-rate schedule: `lr` is the peak; `warmup` steps ramp up to it
 * and, when `cosine`, a cosine falls from it to `min_lr` at step
 * `decay_steps` (schedule.c). */
typedef struct fe_schedule {
    double lr, warmup, decay_steps, min_lr;
    bool cosine;
} fe_schedule;

/* Whether schedule `s` changes the lr from step to step (else lr is constant). */
bool fe_schedule_varies(const fe_schedule *s);
/* Emits the lr of the step whose new step count (`opt.step` after its
 * increment, a scalar) is `t1`, as a scalar value named e->tensor of dtype
 * e->dtype; NULL if an IR limit was hit (schedule.c has the formula). */
ir_value *fe_emit_lr(const fe_emit *e, const fe_schedule *s, ir_value *t1);
/* Emits the squared global L2 norm of the `n` gradients `grads` (each its
 * own dims and sharding) as a scalar named e->tensor of dtype e->dtype:
 * one sum-of-squares einsum per gradient, so the planner adds the
 * AllReduce a sharded gradient's partial sum needs, then their sum. */
ir_value *fe_emit_sqnorm(const fe_emit *e, ir_value *const *grads, int n);
/* Emits min(1, clip / (sqrt(sqnorm) + 1e-6)), torch.nn.utils.clip_grad_norm_'s
 * factor, as a scalar named e->tensor of dtype e->dtype. */
ir_value *fe_emit_clip_factor(const fe_emit *e, ir_value *sqnorm, double clip);

#endif
