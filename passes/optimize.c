/*
 * optimize.c - the "optimize" pass: lowers the training step's `optimize`
 * lines (ir_module.opt_lines, which the frontend checked and recorded) into
 * IR: a Grad op per optimized param, which the autodiff pass after it
 * derives, and the optimizer's update of each param and of its state.  It
 * runs first in the pipeline, as the training step is built before it is
 * differentiated (an optax update reads the gradients jax.grad makes).
 *
 * Optimizer state (SGD's momentum buffer, AdamW's m and v) are IR_VAL_STATE
 * values named `W.mom`, `W.m`, `W.v`, with the param's dims and sharding
 * and its dtype, except f32 for a bf16 param (seed 000's bf16 params with
 * f32 Adam state, "2 + 8 = 10 bytes per parameter"); with master=f32 the
 * update applies to `W.master`, an f32 copy of a bf16 param sharded the
 * same way, and W becomes its bf16 rounding (14 bytes per param under
 * AdamW).  State sharded like its param is what makes ZeRO stages follow
 * from the param's sharding (seed 000, "fully sharded data parallelism":
 * FSDP shards the optimizer state along the weights' mesh axis, and
 * ZeRO-1/2/3 shard the optimizer state, gradients and weights).  The
 * gradient is constrained to the param's sharding too, so an FSDP param's
 * gradient comes out of a ReduceScatter and a DP param's out of an
 * AllReduce (seed 000's listings).  AdamW's step count is one f32 scalar
 * state, `opt.step`, shared by every AdamW param; the dots keep state
 * names apart from tensor names.
 *
 * The updates follow PyTorch's torch.optim.SGD (dampening 0, no Nesterov)
 * and torch.optim.AdamW (decoupled weight decay, Loshchilov and Hutter,
 * "Decoupled Weight Decay Regularization", ICLR 2019):
 *
 *   sgd:   g = G + wd P;  mom' = mu mom + g (mom = g at the first step,
 *          which zero state gives);  P' = P - lr mom'  (P - lr g if mu = 0)
 *   adamw: t' = t + 1;  m' = b1 m + (1 - b1) G;  v' = b2 v + (1 - b2) G^2;
 *          P' = P - lr wd P - lr (m' / (1 - b1^t')) / (sqrt(v' / (1 - b2^t')) + eps)
 *
 * with b^t' computed as exp(t' ln b), which is 0 for b = 0.
 *
 * Every optimizer also takes a learning-rate schedule (warmup_steps, decay,
 * decay_steps, min_lr) and global-norm clipping (clip_norm); optimize_schedule.c
 * lowers them into scalars that replace lr and scale the gradient.  A line
 * without them lowers exactly as before, and an sgd line with a schedule
 * gets the `opt.step` count the schedule reads.
 *
 * The Grad ops sit after everything the program computes, at the first
 * line's place; the update ops follow them (phase update).  The gradient
 * of an optimized param is sharded like it unless a grad statement of the
 * program says otherwise (ir.h, Grad's shard_like_w), and a param the loss
 * does not reach is warned about at its name on the line (autodiff.c).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "optimize_internal.h"
#include "pass.h"

/* Whether line `l` keeps f32 master copies. */
static bool line_master(const ir_opt_line *l)
{
    return l->hp[l->opt == IR_OPT_SGD ? IR_SGD_MASTER : IR_ADAMW_MASTER] == IR_MASTER_F32;
}

/* Whether `w` is a table that a gather reads rows of (an embedding): most
 * of its rows get no gradient in a step, so its unchanged elements say
 * nothing about rounding. */
static bool gathered(const ir_value *w)
{
    for (int i = 0; i < w->nuses; i++)
        if (w->uses[i].op->kind == IR_OP_EINSUM && w->uses[i].op->u.einsum.gather &&
            w->uses[i].operand == 0)
            return true;
    return false;
}

/* Marks param `w` of line `l` for the run-time check of updates that
 * round to nothing (ir_value.update_check): an SGD update lr g of a bf16
 * param depends on the gradient, so unlike AdamW's (about lr, warned
 * about by the frontend) it can only be judged by the run.  It is judged
 * at the first step at the peak lr: step 1, or the one after the warmup. */
static void mark_update_check(const ir_opt_line *l, ir_value *w)
{
    if (l->opt != IR_OPT_SGD || line_master(l) || w->type.dtype != IR_BF16 || gathered(w))
        return;
    double warmup = l->hp[l->nown + IR_HP_WARMUP];
    w->update_check = warmup < INT32_MAX - 1 ? (int32_t)warmup + 1 : 0;
}

/* The step count: `opt.step` before this step (state) and after it. */
typedef struct opt_step {
    ir_value *old, *now;
} opt_step;

/* Builds the update ops of one param. */
typedef struct opt_ctx {
    ir_module *m;
    ir_ewt_out e;     /* tensor and dtype change per emitted value; trees in the pass's arena */
    const ir_value *w;/* the param */
    ir_value *lr;     /* the scheduled lr, a scalar; NULL: the constant lr hyperparameter */
    ir_value *clip;   /* the gradient's clipping factor, a scalar; NULL: not clipped */
    ir_value *skip;   /* `opt.skipped`, a scalar, 1 when this step is skipped; NULL: never */
    ir_value *master; /* `W.master`, the param's f32 master copy (state); NULL: none */
    const opt_step *step; /* the step count when a line reads it, else NULL */
    const ir_sharding *state_sh; /* ZeRO: the state's sharding; NULL: the param's */
} opt_ctx;

static ir_ewt *k(opt_ctx *x, double v)
{
    return ir_ewt_const(x->e.arena, v);
}

static ir_ewt *op2(opt_ctx *x, ir_ew_kind kind, ir_ewt *a, ir_ewt *b)
{
    return ir_ewt_bin(x->e.arena, kind, a, b);
}

static ir_ewt *leaf(opt_ctx *x, ir_value *v)
{
    return ir_ewt_leaf(x->e.arena, v, v->type.dims, v->type.rank);
}

/* lr times `c`: one constant when the lr is (the IR of a run without a
 * schedule is what it was before schedules). */
static ir_ewt *lr_times(opt_ctx *x, double lr, double c)
{
    return x->lr ? op2(x, IR_EW_MUL, leaf(x, x->lr), k(x, c)) : k(x, lr * c);
}

/* The gradient `g` as the update reads it: clipped when asked. */
static ir_ewt *grad_leaf(opt_ctx *x, ir_value *g)
{
    return x->clip ? op2(x, IR_EW_MUL, leaf(x, g), leaf(x, x->clip)) : leaf(x, g);
}

/* "W.suffix", in the arena. */
static const char *state_name(opt_ctx *x, const char *suffix)
{
    return ir_sprintf(x->e.arena, "%s.%s", x->w->tensor, suffix);
}

/* A zero-initialised state value like the param (dims, sharding: ZeRO
 * follows from the param's sharding), f32 for a bf16 param: moments and
 * master copies narrower than f32 lose the small updates bf16 cannot
 * represent (seed 000 counts bf16 params with f32 Adam state, "2 + 8 =
 * 10 bytes per parameter"); f32 and f64 params keep their dtype. */
static ir_value *state_new(opt_ctx *x, const char *name)
{
    ir_type ty = x->w->type;
    if (x->state_sh)
        ty.sh = *x->state_sh;
    if (ty.dtype == IR_BF16)
        ty.dtype = IR_F32;
    return ir_value_new(x->m, name, IR_VAL_STATE, &ty, x->e.loc);
}

/* Emits `t` over the param's dims as tensor `name` and makes it the new
 * value of `target` at the end of the step. */
static ir_value *emit_update(opt_ctx *x, const char *name, ir_ewt *t, ir_value *target)
{
    /* A skipped step keeps the old value: a select, so that the NaN the
     * new value then holds goes nowhere. */
    if (x->skip)
        t = ir_ewt_select(x->e.arena, op2(x, IR_EW_EQ, leaf(x, x->skip), k(x, 0.0)), t,
                          leaf(x, target));
    x->e.tensor = name;
    x->e.dtype = target->type.dtype;
    ir_value *v = ir_ewt_emit(&x->e, t, target->type.dims, target->type.rank, x->e.loc);
    if (v)
        ir_update_add(x->m, target, v, x->e.loc);
    return v;
}

/* The param as the update reads it: W, or with master=f32 its master copy,
 * which at step 0 is f32(W).  The master copy is initialised in the IR
 * rather than by the runtime: state starts at zero (a fresh run, or
 * --params, which loads params only), and `opt.step` is 0 exactly then,
 * while --resume restores W.master and the step count together, so a
 * checkpoint needs no link from a state to its param. */
static ir_ewt *param_in(opt_ctx *x, ir_value *w)
{
    if (!x->master)
        return leaf(x, w);
    ir_ewt *t = ir_ewt_leaf(x->e.arena, x->step->old, x->step->old->type.dims, 0);
    return ir_ewt_select(x->e.arena, op2(x, IR_EW_EQ, t, k(x, 0.0)), leaf(x, w),
                         leaf(x, x->master));
}

/* Stores `t`, the param's new value computed in f32: into W (rounded to
 * its dtype when stored), or with master=f32 into W.master and W becomes
 * bf16(W.master).  False if an IR limit was hit. */
static bool store_param(opt_ctx *x, ir_value *w, ir_ewt *t)
{
    if (!x->master)
        return emit_update(x, w->tensor, t, w) != NULL;
    ir_value *m1 = emit_update(x, x->master->tensor, t, x->master);
    return m1 && emit_update(x, w->tensor, leaf(x, m1), w) != NULL;
}

/* 1 - b^t for the scalar leaf t: exp(t ln b), so b = 0 gives 1. */
static ir_ewt *bias_correction(opt_ctx *x, ir_ewt *t, double b)
{
    ir_ewt *pow = ir_ewt_call(x->e.arena, IR_FN_EXP, op2(x, IR_EW_MUL, t, k(x, log(b))));
    return op2(x, IR_EW_SUB, k(x, 1.0), pow);
}

static bool lower_sgd(opt_ctx *x, const double *hp, ir_value *w, ir_value *g)
{
    ir_ewt *grad = grad_leaf(x, g);
    if (hp[IR_SGD_WD] > 0)
        grad = op2(x, IR_EW_ADD, grad, op2(x, IR_EW_MUL, k(x, hp[IR_SGD_WD]), param_in(x, w)));
    ir_ewt *step = grad;
    if (hp[IR_SGD_MOMENTUM] > 0) {
        const char *name = state_name(x, "mom");
        ir_value *mom = state_new(x, name);
        ir_ewt *t = op2(x, IR_EW_ADD, op2(x, IR_EW_MUL, k(x, hp[IR_SGD_MOMENTUM]), leaf(x, mom)), grad);
        ir_value *mom1 = emit_update(x, name, t, mom);
        if (!mom1)
            return false;
        step = leaf(x, mom1);
    }
    ir_ewt *t = op2(x, IR_EW_SUB, param_in(x, w),
                    op2(x, IR_EW_MUL, lr_times(x, hp[IR_SGD_LR], 1.0), step));
    return store_param(x, w, t);
}

static bool lower_adamw(opt_ctx *x, const double *hp, ir_value *w, ir_value *g)
{
    ir_value *t1 = x->step->now;
    double b1 = hp[IR_ADAMW_BETA1], b2 = hp[IR_ADAMW_BETA2], lr = hp[IR_ADAMW_LR];
    const char *mn = state_name(x, "m"), *vn = state_name(x, "v");
    ir_value *m = state_new(x, mn), *v = state_new(x, vn);
    ir_ewt *mt = op2(x, IR_EW_ADD, op2(x, IR_EW_MUL, k(x, b1), leaf(x, m)),
                     op2(x, IR_EW_MUL, k(x, 1.0 - b1), grad_leaf(x, g)));
    ir_value *m1 = emit_update(x, mn, mt, m);
    ir_ewt *vt = op2(x, IR_EW_ADD, op2(x, IR_EW_MUL, k(x, b2), leaf(x, v)),
                     op2(x, IR_EW_MUL, k(x, 1.0 - b2),
                                                   op2(x, IR_EW_MUL, grad_leaf(x, g), grad_leaf(x, g))));
    ir_value *v1 = emit_update(x, vn, vt, v);
    if (!m1 || !v1)
        return false;
    ir_ewt *tl = ir_ewt_leaf(x->e.arena, t1, t1->type.dims, 0); /* a scalar: no labels */
    ir_ewt *mhat = op2(x, IR_EW_DIV, leaf(x, m1), bias_correction(x, tl, b1));
    ir_ewt *vhat = op2(x, IR_EW_DIV, leaf(x, v1), bias_correction(x, tl, b2));
    ir_ewt *denom = op2(x, IR_EW_ADD, ir_ewt_call(x->e.arena, IR_FN_SQRT, vhat), k(x, hp[IR_ADAMW_EPS]));
    ir_ewt *delta = op2(x, IR_EW_MUL, lr_times(x, lr, 1.0), op2(x, IR_EW_DIV, mhat, denom));
    ir_ewt *pt = param_in(x, w);
    /* The decay is scaled by the scheduled lr, as in PyTorch and optax. */
    if (hp[IR_ADAMW_WD] > 0)
        pt = op2(x, IR_EW_SUB, pt,
                 op2(x, IR_EW_MUL, lr_times(x, lr, hp[IR_ADAMW_WD]), param_in(x, w)));
    return store_param(x, w, op2(x, IR_EW_SUB, pt, delta));
}

/* The step count: state `opt.step` and its new value t + 1 (t when the
 * step is skipped: it counts applied updates), made once. */
static ir_value *step_count(ir_module *m, ir_arena *a, opt_step *made, uint32_t loc, ir_value *skip)
{
    if (made->now)
        return made->now;
    ir_type ty;
    memset(&ty, 0, sizeof ty);
    ty.dtype = IR_F32; /* exact up to 2^24 steps */
    ty.sh = ir_sharding_replicated();
    ir_value *t = ir_value_new(m, "opt.step", IR_VAL_STATE, &ty, loc);
    opt_ctx x = {.m = m, .e = {.m = m, .arena = a, .loc = loc}, .w = t, .skip = skip};
    made->old = t;
    made->now = emit_update(&x, "opt.step", op2(&x, IR_EW_ADD, leaf(&x, t), k(&x, 1.0)), t);
    return made->now;
}

/* The squared norm of all `n` gradients, `opt.grad_sqnorm`, f32 unless a
 * gradient is f64. */
static ir_value *grad_sqnorm(ir_module *m, ir_arena *a, uint32_t loc, ir_value *const *grads, int n)
{
    ir_ewt_out e = {.m = m, .arena = a, .loc = loc, .tensor = "opt.grad_sqnorm", .dtype = IR_F32};
    for (int i = 0; i < n; i++)
        if (grads[i]->type.dtype == IR_F64)
            e.dtype = IR_F64;
    return opt_emit_sqnorm(&e, grads, n);
}

/* With skip_nonfinite=true on some line: `opt.skipped`, 1 when a gradient
 * holds a NaN or an Inf (its squared norm is then NaN or Inf, as it is
 * when the norm overflows), else 0, made an output for the runtime to
 * report and count.  *sqnorm is made here if no clipping made it.  NULL
 * with `*ok` when no line asks, NULL without when an IR limit was hit. */
static ir_value *skip_flag(ir_module *m, ir_arena *a, ir_value *const *grads, int n,
                           ir_value **sqnorm, bool *ok)
{
    *ok = true;
    const ir_opt_line *asks = NULL;
    for (int i = 0; i < m->nopt_lines && !asks; i++)
        if (m->opt_lines[i].hp[m->opt_lines[i].nown + IR_HP_SKIP] > 0)
            asks = &m->opt_lines[i];
    if (!asks)
        return NULL;
    *ok = false;
    if (!(*sqnorm = grad_sqnorm(m, a, asks->loc, grads, n)))
        return NULL;
    ir_ewt_out e = {.m = m, .arena = a, .loc = asks->loc, .tensor = "opt.skipped", .dtype = IR_F32};
    ir_ewt *finite = ir_ewt_bin(a, IR_EW_LT, ir_ewt_leaf(a, *sqnorm, (*sqnorm)->type.dims, 0),
                                ir_ewt_const(a, INFINITY));
    ir_value *v = ir_ewt_emit(&e, ir_ewt_select(a, finite, ir_ewt_const(a, 0.0), ir_ewt_const(a, 1.0)),
                              (*sqnorm)->type.dims, 0, asks->loc);
    if (!v)
        return NULL;
    ir_output_add(m, "opt.skipped", v, asks->loc);
    *ok = true;
    return v;
}

/* The dtype of the scalars a line computes for its params: f64 if one of
 * them is, else f32 (also for bf16 params: a scalar costs nothing). */
static ir_dtype line_dtype(const ir_opt_line *l)
{
    for (int q = 0; q < l->nparams; q++)
        if (l->params[q]->type.dtype == IR_F64)
            return IR_F64;
    return IR_F32;
}

/* Optimize line `l`'s scheduled lr (x->lr, `W.lr` after its first param
 * W) and clipping factor (x->clip, `W.clip`), each when it has one; the
 * step count *t1 (also when the line keeps master copies, which read
 * it) and the squared norm of all `n` gradients *sqnorm are
 * made on first need and shared by every line.  False if an IR limit was
 * hit. */
static bool line_scalars(opt_ctx *x, ir_arena *a, const ir_opt_line *l, ir_value *const *grads, int n,
                         opt_step *t1, ir_value **sqnorm)
{
    ir_module *m = x->m;
    const double *hp = l->hp, *sched = hp + l->nown;
    const char *first = l->params[0]->tensor;
    opt_schedule sc = {.lr = hp[0], .warmup = sched[IR_HP_WARMUP],
                      .decay_steps = sched[IR_HP_DECAY_STEPS], .min_lr = sched[IR_HP_MIN_LR],
                      .cosine = sched[IR_HP_DECAY] == IR_DECAY_COSINE};
    ir_ewt_out e = {.m = m, .arena = a, .loc = l->loc, .dtype = line_dtype(l)};
    if (opt_schedule_varies(&sc)) {
        if (!step_count(m, a, t1, l->loc, x->skip))
            return false;
        e.tensor = ir_sprintf(a, "%s.lr", first);
        if (!(x->lr = opt_emit_lr(&e, &sc, t1->now)))
            return false;
    }
    if (sched[IR_HP_CLIP] > 0) {
        if (!*sqnorm && !(*sqnorm = grad_sqnorm(m, a, l->loc, grads, n)))
            return false;
        e.tensor = ir_sprintf(a, "%s.clip", first);
        if (!(x->clip = opt_emit_clip_factor(&e, *sqnorm, sched[IR_HP_CLIP])))
            return false;
    }
    /* AdamW's bias correction and the master copies' first step read it. */
    return !(line_master(l) || l->opt == IR_OPT_ADAMW) || step_count(m, a, t1, l->loc, x->skip);
}


/* ZeRO (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
 * Trillion Parameter Models", SC'20; seed 000, "fully sharded data
 * parallelism": ZeRO-1/2/3 shard the optimizer state, gradients and
 * weights): the sharding of w's optimizer state when its line asks for
 * zero=1 or 2: w's own, plus every data-parallel axis (one of
 * `input_axes`, those that shard some input, that does not shard w) on w's largest dim that no axis shards, that the layer
 * loop does not slice (a stacked param's first) and that those axes
 * divide.  False (and *sh untouched) when no axis or dim qualifies: the
 * state stays sharded like w.  With the gradient constrained to it, the
 * planner reduce-scatters the gradient, updates each shard and
 * all-gathers the param, which is ZeRO-2's step (stage 1 keeps whole
 * gradients, which this dataflow never holds, so 1 and 2 are one). */
static bool zero_sharding(const ir_module *m, ir_axes input_axes, const ir_value *w, ir_sharding *sh)
{
    ir_axes data = input_axes & ~ir_sharding_used_axes(&w->type.sh, w->type.rank);
    int64_t parts = 1;
    for (int a = 0; a < m->mesh.naxes; a++)
        if (data & (1u << a))
            parts *= m->mesh.axes[a].size;
    if (parts <= 1)
        return false;
    bool stacked = false;
    for (int i = 0; i < w->nuses; i++)
        stacked |= w->uses[i].op->kind == IR_OP_LAYERSLICE;
    int best = -1;
    for (int d = stacked ? 1 : 0; d < w->type.rank; d++) {
        int64_t size = m->dims[w->type.dims[d]].size;
        if (w->type.sh.naxes[d] == 0 && size % parts == 0 &&
            (best < 0 || size > m->dims[w->type.dims[best]].size))
            best = d;
    }
    if (best < 0)
        return false;
    *sh = w->type.sh;
    for (int a = 0; a < m->mesh.naxes; a++)
        if (data & (1u << a))
            ir_sharding_push(sh, best, a);
    return true;
}

/* Appends a Grad op of `loss` with respect to optimized param `w`, named
 * at `name_loc` on a line at `loc`; returns its result, w's dims and dtype. */
static ir_value *grad_op(ir_module *m, ir_arena *a, ir_value *loss, ir_value *w, uint32_t loc,
                         uint32_t name_loc)
{
    ir_op *g = ir_grad_append(m, ir_sprintf(a, "d%s", w->tensor), loss, w, loc);
    g->u.grad.optimize = !m->reference;
    g->u.grad.shard_like_w = !m->reference && w->type.sh.unreduced == 0;
    g->u.grad.name_loc = name_loc;
    return g->result;
}

/* The value of the loss output (the frontend made one). */
static ir_value *loss_value(const ir_module *m)
{
    for (int i = 0; m->loss && i < m->noutputs; i++)
        if (!m->outputs[i].update && strcmp(m->outputs[i].name, m->loss) == 0)
            return m->outputs[i].value;
    return NULL;
}

static bool check_zero(const char *v, char *why, size_t n)
{
    if ((v[0] == '0' || v[0] == '1' || v[0] == '2') && v[1] == '\0')
        return true;
    snprintf(why, n, "--zero wants a ZeRO stage, 0, 1 or 2, not '%s' (stage 3 is FSDP: shard the params)", v);
    return false;
}

const pass_option pass_optimize_options[1] = {
    {"zero", "0|1|2: the least ZeRO stage of every optimize line (its zero= raises it): 1 or 2 shard the "
             "optimizer state over the data-parallel axes", check_zero},
};

int pass_optimize(pass_ctx *ctx, ir_module *m)
{
    if (m->nopt_lines == 0)
        return 0;
    ir_value *loss = loss_value(m);
    if (!loss) {
        diag_error(ctx->diag, m->opt_lines[0].loc, "optimize: the program has no loss output");
        return 1;
    }
    int n = 0;
    for (int i = 0; i < m->nopt_lines; i++)
        n += m->opt_lines[i].nparams;
    const char *zv = pass_option_value(ctx, "zero");
    double zero_option = zv ? zv[0] - '0' : 0; /* checked: one digit, 0 to 2 */
    ir_axes input_axes = 0; /* the axes ZeRO may add: those that shard an input */
    for (int i = 0; i < m->nvalues; i++)
        if (m->values[i]->kind == IR_VAL_INPUT)
            input_axes |= ir_sharding_used_axes(&m->values[i]->type.sh, m->values[i]->type.rank);
    ir_arena a = {0};
    ir_value **grads = ir_alloc(&a, (size_t)n * sizeof *grads);
    ir_op *forward_end = m->last;
    for (int i = 0, j = 0; i < m->nopt_lines; i++)
        for (int q = 0; q < m->opt_lines[i].nparams; q++)
            grads[j++] = grad_op(m, &a, loss, m->opt_lines[i].params[q], m->opt_lines[0].loc,
                                 m->opt_lines[i].name_locs[q]);
    opt_step t1 = {NULL, NULL};
    ir_value *sqnorm = NULL;
    bool ok;
    opt_ctx x = {.m = m, .skip = skip_flag(m, &a, grads, n, &sqnorm, &ok)};
    for (int i = 0, j = 0; ok && i < m->nopt_lines; i++) {
        const ir_opt_line *l = &m->opt_lines[i];
        /* A new line: its lr and clipping factor, shared by its params. */
        x.lr = x.clip = NULL;
        ok = line_scalars(&x, &a, l, grads, n, &t1, &sqnorm);
        for (int q = 0; ok && q < l->nparams; q++, j++) {
            ir_value *w = l->params[q];
            x.e = (ir_ewt_out){.m = m, .arena = &a, .loc = l->loc};
            x.w = w;
            x.step = t1.now ? &t1 : NULL;
            x.master = NULL;
            /* ZeRO: the state (and master copy) over the data axes, and
             * the gradient constrained to match, before autodiff. */
            ir_sharding zsh;
            x.state_sh = NULL;
            double stage = l->hp[l->nown + IR_HP_ZERO];
            if (zero_option > stage)
                stage = zero_option;
            if (stage > 0 && !m->reference) {
                if (zero_sharding(m, input_axes, w, &zsh)) {
                    x.state_sh = &zsh;
                    grads[j]->has_constraint = true;
                    grads[j]->constraint = zsh;
                } else {
                    diag_warning(ctx->diag, l->name_locs[q], "zero=%g: no data-parallel mesh axis (one that "
                                 "shards an input and not '%s') divides a dim of '%s' it leaves whole: its "
                                 "optimizer state stays sharded like it", stage, w->tensor, w->tensor);
                }
            }
            if (line_master(l)) {
                x.master = state_new(&x, state_name(&x, "master"));
                x.master->master = true;
            }
            mark_update_check(l, w);
            ok = l->opt == IR_OPT_SGD ? lower_sgd(&x, l->hp, w, grads[j])
                                      : lower_adamw(&x, l->hp, w, grads[j]);
        }
    }
    ir_arena_free(&a);
    if (!ok)
        return 1; /* an IR limit, reported */
    ir_set_phase_after(m, forward_end, IR_PHASE_UPDATE);
    m->nopt_lines = 0; /* lowered */
    return 0;
}
