/*
 * optimize_schedule.c - learning-rate schedules and global-norm gradient
 * clipping, as IR ops of the training step (the optimize pass,
 * optimize.c, calls these).
 *
 * Both are scalar arithmetic on values the step already has: the schedule
 * reads the step count `opt.step`, clipping the gradients.  They are built
 * from ordinary Elementwise and Einsum ops, so the planner, the cost model
 * and codegen treat them as any other op; in particular the sum of squares
 * of a sharded gradient is an einsum whose partial sums the planner
 * all-reduces, as it would for any reduction over a sharded dim.
 *
 * The schedule is optax's warmup_cosine_decay_schedule (init_value 0) and
 * Hugging Face's get_cosine_schedule_with_warmup with a floor, on the
 * count s of updates done before this one (s = 0 at the first step, as
 * optax counts): with peak lr L, warmup W, length N and floor m,
 *
 *   warm(s) = min(1, s / W)                          (1 when W = 0)
 *   p(s)    = min(1, max(0, (s - W) / (N - W)))
 *   dec(s)  = m + (L - m) (1 + cos(pi p)) / 2        (L without decay=cosine)
 *   lr(s)   = warm(s) dec(s)
 *
 * which is L s / W during the warmup (p = 0 there, so dec = L), the cosine
 * after it and m from step N on.
 *
 * Clipping is torch.nn.utils.clip_grad_norm_ (norm_type 2): the global
 * norm is sqrt of the sum over every optimized param's gradient of its
 * squared entries, and each gradient is scaled by
 * min(1, clip / (norm + 1e-6)), the 1e-6 being PyTorch's guard against a
 * zero norm.
 */
#include <math.h>
#include <string.h>

#include "optimize_internal.h"

/* pi (M_PI is POSIX, not C17). */
#define PI 3.14159265358979323846

/* The labels of a scalar: none (a non-NULL array for memcpy's sake). */
static const int no_labels[1] = {0};

bool opt_schedule_varies(const opt_schedule *s)
{
    return s->warmup > 0 || s->cosine;
}

static ir_ewt *k(const ir_ewt_out *e, double v)
{
    return ir_ewt_const(e->arena, v);
}

static ir_ewt *op2(const ir_ewt_out *e, ir_ew_kind kind, ir_ewt *a, ir_ewt *b)
{
    return ir_ewt_bin(e->arena, kind, a, b);
}

/* A leaf of scalar `v`. */
static ir_ewt *scalar(const ir_ewt_out *e, ir_value *v)
{
    return ir_ewt_leaf(e->arena, v, v->type.dims, 0);
}

/* The scalar value of tree `t`. */
static ir_value *emit_scalar(const ir_ewt_out *e, ir_ewt *t)
{
    return ir_ewt_emit(e, t, no_labels, 0, e->loc);
}

/* s = t1 - 1, the updates before this step. */
static ir_ewt *updates_done(const ir_ewt_out *e, ir_value *t1)
{
    return op2(e, IR_EW_SUB, scalar(e, t1), k(e, 1.0));
}

/* dec(s) of the cosine, from the step count t1 (the file comment). */
static ir_value *emit_cosine(const ir_ewt_out *e, const opt_schedule *s, ir_value *t1)
{
    double len = s->decay_steps - s->warmup; /* > 0: the checker saw to it */
    ir_ewt *p = op2(e, IR_EW_DIV, op2(e, IR_EW_SUB, updates_done(e, t1), k(e, s->warmup)),
                    k(e, len));
    p = op2(e, IR_EW_MIN, k(e, 1.0), op2(e, IR_EW_MAX, k(e, 0.0), p));
    ir_ewt *cos_pi_p = ir_ewt_call(e->arena, IR_FN_COS, op2(e, IR_EW_MUL, k(e, PI), p));
    ir_ewt *half = op2(e, IR_EW_MUL, k(e, 0.5 * (s->lr - s->min_lr)),
                       op2(e, IR_EW_ADD, k(e, 1.0), cos_pi_p));
    return emit_scalar(e, op2(e, IR_EW_ADD, k(e, s->min_lr), half));
}

ir_value *opt_emit_lr(const ir_ewt_out *e, const opt_schedule *s, ir_value *t1)
{
    ir_ewt *dec = k(e, s->lr);
    if (s->cosine) {
        ir_value *d = emit_cosine(e, s, t1);
        if (!d)
            return NULL;
        dec = scalar(e, d);
    }
    if (s->warmup > 0) {
        ir_ewt *warm = op2(e, IR_EW_DIV, updates_done(e, t1), k(e, s->warmup));
        dec = op2(e, IR_EW_MUL, op2(e, IR_EW_MIN, k(e, 1.0), warm), dec);
    }
    return emit_scalar(e, dec);
}

ir_value *opt_emit_sqnorm(const ir_ewt_out *e, ir_value *const *grads, int n)
{
    ir_ewt *sum = NULL;
    for (int i = 0; i < n; i++) {
        ir_value *g = grads[i];
        /* sum(G * G) over all of G's dims, in G's dtype (an einsum's
         * operands and result share one). */
        ir_ewt_out ge = *e;
        ge.dtype = g->type.dtype;
        ir_value *out = ir_ewt_value(&ge, no_labels, 0, e->loc);
        ir_value *ops[2] = {g, g};
        ir_op *op = ir_op_new(e->m, IR_OP_EINSUM, 2, ops, out, e->loc);
        for (int j = 0; j < 2; j++)
            memcpy(op->u.einsum.labels[j], g->type.dims, (size_t)g->type.rank * sizeof(int));
        op->u.einsum.scale = 1.0;
        op->u.einsum.reduce = IR_RED_SUM;
        ir_op_append(e->m, op);
        ir_ewt *t = scalar(e, out);
        sum = sum ? op2(e, IR_EW_ADD, sum, t) : t;
    }
    return emit_scalar(e, sum);
}

ir_value *opt_emit_clip_factor(const ir_ewt_out *e, ir_value *sqnorm, double clip)
{
    ir_ewt *norm = ir_ewt_call(e->arena, IR_FN_SQRT, scalar(e, sqnorm));
    ir_ewt *f = op2(e, IR_EW_DIV, k(e, clip), op2(e, IR_EW_ADD, norm, k(e, 1e-6)));
    return emit_scalar(e, op2(e, IR_EW_MIN, k(e, 1.0), f));
}
