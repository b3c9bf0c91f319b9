/*
 * optimize.c - `loss L` and `optimize W1, W2 with adamw(lr=3e-4, ...)`:
 * a training step.
 *
 * A program with an `optimize` line is one step of training: the forward
 * pass the user wrote, the backward pass of the loss (grad.c, one sweep for
 * every optimized param), the optimizer's update of each param and of its
 * state, and the loss as an output the runtime prints after each step.
 * The new values of params and state are ir_output updates (ir.h): the
 * runtime's buffers of them are overwritten at the end of the run, so the
 * next run is the next step.
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
 * decay_steps, min_lr) and global-norm clipping (clip_norm); schedule.c
 * lowers them into scalars that replace lr and scale the gradient.  A line
 * without them lowers exactly as before, and an sgd line with a schedule
 * gets the `opt.step` count the schedule reads.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"

/* What a hyperparameter's value is: a real number in a range, a whole
 * number of steps (also in a range), or one of a few names. */
typedef enum hp_kind { HP_REAL, HP_COUNT, HP_CHOICE } hp_kind;

/* One hyperparameter: its name, default (NAN: required) and range
 * [lo, hi] or with open ends; a choice's value is the index of its name
 * in `choices` (NULL-terminated). */
typedef struct hparam_def {
    const char *name;
    double def;
    double lo, hi;
    bool lo_open, hi_open;
    hp_kind kind;
    const char *const *choices;
} hparam_def;

enum { OPT_SGD, OPT_ADAMW };

/* master=: `none`, the update applies to the param itself; `f32`, to an
 * f32 master copy of a narrower (bf16) param, which the param is rounded
 * from after every step (the value is the index). */
static const char *const master_names[] = {"none", "f32", NULL};
enum { MASTER_NONE, MASTER_F32 };

static const struct optimizer_def {
    const char *name;
    int n;
    hparam_def hp[AST_MAX_HPARAMS];
} optimizers[] = {
    [OPT_SGD] = {"sgd", 4, {{"lr", NAN, 0, INFINITY, true, true, HP_REAL, NULL},
                            {"momentum", 0.0, 0, 1, false, true, HP_REAL, NULL},
                            {"weight_decay", 0.0, 0, INFINITY, false, true, HP_REAL, NULL},
                            {"master", 0, 0, 0, false, false, HP_CHOICE, master_names}}},
    [OPT_ADAMW] = {"adamw", 6, {{"lr", 1e-3, 0, INFINITY, true, true, HP_REAL, NULL},
                                {"beta1", 0.9, 0, 1, false, true, HP_REAL, NULL},
                                {"beta2", 0.999, 0, 1, false, true, HP_REAL, NULL},
                                {"eps", 1e-8, 0, INFINITY, true, true, HP_REAL, NULL},
                                {"weight_decay", 0.01, 0, INFINITY, false, true, HP_REAL,
                                 NULL},
                                {"master", 0, 0, 0, false, false, HP_CHOICE, master_names}}},
};
#define NOPTIMIZERS ((int)(sizeof optimizers / sizeof optimizers[0]))

static const char *const decay_names[] = {"constant", "cosine", NULL};
static const char *const bool_names[] = {"false", "true", NULL};

/* The hyperparameters every optimizer takes after its own (schedule.c
 * uses them; their values follow the optimizer's own in hpv[], in the
 * order of FE_HP_WARMUP..FE_HP_SKIP).  A step count is at most 2^24, the
 * largest f32 `opt.step` counts exactly.  Defaults: no warmup, constant
 * lr, no clipping (0: off), every step applied. */
static const hparam_def schedule_hp[FE_NSCHED] = {
    [FE_HP_WARMUP] = {"warmup_steps", 0, 0, 16777216, false, false, HP_COUNT, NULL},
    [FE_HP_DECAY] = {"decay", 0, 0, 0, false, false, HP_CHOICE, decay_names},
    [FE_HP_DECAY_STEPS] = {"decay_steps", 0, 0, 16777216, true, false, HP_COUNT, NULL},
    [FE_HP_MIN_LR] = {"min_lr", 0, 0, INFINITY, false, true, HP_REAL, NULL},
    [FE_HP_CLIP] = {"clip_norm", 0, 0, INFINITY, true, true, HP_REAL, NULL},
    [FE_HP_SKIP] = {"skip_nonfinite", 0, 0, 0, false, false, HP_CHOICE, bool_names},
};

/* Indices of the hyperparameters in hpv[] (the table's order). */
enum { SGD_LR, SGD_MOMENTUM, SGD_WD, SGD_MASTER };
enum { ADAMW_LR, ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, ADAMW_WD, ADAMW_MASTER };

/* Whether optimize line `s` (checked) keeps f32 master copies. */
static bool line_master(const ast_stmt *s)
{
    int i = s->u.train.opt == OPT_SGD ? SGD_MASTER : ADAMW_MASTER;
    return s->u.train.hpv[i] == MASTER_F32;
}

/* Hyperparameter i of optimizer o: its own, then the schedule's. */
static const hparam_def *hparam_at(const struct optimizer_def *o, int i)
{
    return i < o->n ? &o->hp[i] : &schedule_hp[i - o->n];
}

/* "lr, momentum, weight_decay, warmup_steps, ..." into buf. */
static const char *hparam_list(const struct optimizer_def *o, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < o->n + FE_NSCHED && n < size; i++) {
        int k = snprintf(buf + n, size - n, "%s%s", i ? ", " : "", hparam_at(o, i)->name);
        if (k < 0)
            break;
        n += (size_t)k;
    }
    return buf;
}

/* The value of argument `h` for hyperparameter `d`, or NAN after reporting
 * why it is not one `d` takes. */
static double hparam_value(fe_checker *c, const hparam_def *d, const ast_hparam *h)
{
    if (d->kind == HP_CHOICE) {
        for (int i = 0; h->word.s && d->choices[i]; i++)
            if (!strcmp(h->word.s, d->choices[i]))
                return i;
        diag_error(c->diag, h->value.loc, "%s=%s: %s is %s or %s", h->name.s, h->value.text,
                   d->name, d->choices[0], d->choices[1]);
        return NAN;
    }
    if (h->word.s) {
        diag_error(c->diag, h->value.loc, "%s=%s: %s takes a number", h->name.s, h->word.s,
                   d->name);
        return NAN;
    }
    double v = h->value.value;
    bool ok = isfinite(v) && (d->lo_open ? v > d->lo : v >= d->lo) &&
              (d->hi_open ? v < d->hi : v <= d->hi);
    if (!ok) {
        char lo[32], hi[32];
        snprintf(lo, sizeof lo, "%g", d->lo);
        snprintf(hi, sizeof hi, "%g", d->hi);
        diag_error(c->diag, h->value.loc, "%s=%s is out of range: %s takes a value in %c%s, %s%c",
                   h->name.s, h->value.text, d->name, d->lo_open ? '(' : '[', lo,
                   isinf(d->hi) ? "inf" : hi, d->hi_open ? ')' : ']');
        return NAN;
    }
    if (d->kind == HP_COUNT && !h->value.is_int) {
        diag_error(c->diag, h->value.loc, "%s=%s: %s is a whole number of steps", h->name.s,
                   h->value.text, d->name);
        return NAN;
    }
    return v;
}

/* The schedule's hyperparameters together (after each was checked alone):
 * a cosine needs its length, which must leave room after the warmup, and
 * a floor no higher than lr; its length and floor mean nothing without it. */
static void check_schedule(fe_checker *c, const ast_stmt *s, const struct optimizer_def *o,
                           const bool *given)
{
    const double *sched = s->u.train.hpv + o->n;
    const ast_hparam *arg[FE_NSCHED] = {NULL};
    for (int j = 0; j < s->u.train.nhp; j++)
        for (int i = 0; i < FE_NSCHED; i++)
            if (!strcmp(s->u.train.hp[j].name.s, schedule_hp[i].name))
                arg[i] = &s->u.train.hp[j];
    bool cosine = sched[FE_HP_DECAY] == FE_DECAY_COSINE;
    if (!cosine) {
        for (int i = FE_HP_DECAY_STEPS; i <= FE_HP_MIN_LR; i++)
            if (given[o->n + i] && arg[i])
                diag_error(c->diag, arg[i]->name.loc, "%s is a parameter of the cosine decay: "
                           "give decay=cosine too, or leave it out", schedule_hp[i].name);
        return;
    }
    if (!given[o->n + FE_HP_DECAY_STEPS]) {
        diag_error(c->diag, arg[FE_HP_DECAY] ? arg[FE_HP_DECAY]->name.loc : s->loc,
                   "decay=cosine needs decay_steps=N, the step where the lr reaches min_lr "
                   "(warmup included)");
        return;
    }
    if (arg[FE_HP_DECAY_STEPS] && sched[FE_HP_DECAY_STEPS] <= sched[FE_HP_WARMUP])
        diag_error(c->diag, arg[FE_HP_DECAY_STEPS]->value.loc, "decay_steps=%s must exceed "
                   "warmup_steps=%g: the cosine runs from the end of the warmup to step "
                   "decay_steps", arg[FE_HP_DECAY_STEPS]->value.text, sched[FE_HP_WARMUP]);
    /* lr comes first in every optimizer's table. */
    if (arg[FE_HP_MIN_LR] && sched[FE_HP_MIN_LR] > s->u.train.hpv[0])
        diag_error(c->diag, arg[FE_HP_MIN_LR]->value.loc, "min_lr=%s exceeds lr=%g: the cosine "
                   "decays from lr down to min_lr", arg[FE_HP_MIN_LR]->value.text,
                   s->u.train.hpv[0]);
}

/* Resolves the optimizer and its arguments of `optimize` line `s` into
 * s->u.train.opt and hpv[]. */
static void check_optimizer(fe_checker *c, ast_stmt *s)
{
    ast_name on = s->u.train.optimizer;
    s->u.train.opt = -1;
    for (int i = 0; i < NOPTIMIZERS; i++)
        if (!strcmp(on.s, optimizers[i].name))
            s->u.train.opt = i;
    if (s->u.train.opt < 0) {
        diag_error(c->diag, on.loc, "unknown optimizer '%s' (there are sgd and adamw)", on.s);
        return;
    }
    const struct optimizer_def *o = &optimizers[s->u.train.opt];
    int nhp = o->n + FE_NSCHED;
    bool given[AST_MAX_HPARAMS] = {false};
    char list[512];
    bool bad = false;
    for (int j = 0; j < s->u.train.nhp; j++) {
        const ast_hparam *h = &s->u.train.hp[j];
        int k = -1;
        for (int i = 0; i < nhp; i++)
            if (!strcmp(h->name.s, hparam_at(o, i)->name))
                k = i;
        if (k < 0) {
            diag_error(c->diag, h->name.loc, "%s has no hyperparameter '%s' (it has %s)", o->name,
                       h->name.s, hparam_list(o, list, sizeof list));
            bad = true;
            continue;
        }
        if (given[k]) {
            diag_error(c->diag, h->name.loc, "'%s' is given twice", h->name.s);
            bad = true;
            continue;
        }
        given[k] = true;
        double v = hparam_value(c, hparam_at(o, k), h);
        if (isnan(v))
            bad = true;
        else
            s->u.train.hpv[k] = v;
    }
    for (int i = 0; i < nhp; i++) {
        if (given[i])
            continue;
        if (isnan(hparam_at(o, i)->def))
            diag_error(c->diag, on.loc, "%s needs %s=VALUE", o->name, hparam_at(o, i)->name);
        s->u.train.hpv[i] = hparam_at(o, i)->def;
    }
    if (!bad)
        check_schedule(c, s, o, given);
}

/* The float scalar named by `loss` line `s`. */
static void check_loss(fe_checker *c, const ast_stmt *s)
{
    const ast_name *n = &s->u.train.names[0];
    if (c->loss) {
        diag_error(c->diag, s->loc, "a program has one 'loss' line");
        diag_note(c->diag, c->loss->loc, "the first 'loss' line is here");
        return;
    }
    c->loss = s;
    const fe_tensor *t = fe_symtab_get(&c->tensors, n->s);
    if (!t) {
        diag_error(c->diag, n->loc, "tensor '%s' is not defined", n->s);
    } else if (t->bad || !fe_check_scope(c, t, n->loc)) {
        return;
    } else if (t->rank != 0) {
        diag_error(c->diag, n->loc, "the loss '%s' has %d dim%s: a loss is a scalar, %s[]", n->s,
                   t->rank, t->rank == 1 ? "" : "s", n->s);
    } else if (t->dtype == IR_I32) {
        diag_error(c->diag, n->loc, "the loss '%s' is i32: a loss is f32, f64 or bf16", n->s);
    }
}

void fe_check_train(fe_checker *c, const ast_program *prog)
{
    for (int i = 0; i < prog->nstmts; i++)
        if (prog->stmts[i]->kind == AST_S_LOSS)
            check_loss(c, prog->stmts[i]);
    fe_symtab seen = {0};
    for (int i = 0; i < prog->nstmts; i++) {
        ast_stmt *s = prog->stmts[i];
        if (s->kind != AST_S_OPTIMIZE)
            continue;
        if (!c->loss)
            diag_error(c->diag, s->loc, "'optimize' needs a 'loss' line naming the scalar to "
                       "minimise: loss L");
        check_optimizer(c, s);
        for (int k = 0; k < s->u.train.n; k++) {
            const ast_name *n = &s->u.train.names[k];
            const fe_tensor *t = fe_symtab_get(&c->tensors, n->s);
            const ast_name *prev = fe_symtab_get(&seen, n->s);
            if (!t) {
                diag_error(c->diag, n->loc, "tensor '%s' is not defined", n->s);
            } else if (t->bad) {
                continue;
            } else if (t->kind == IR_VAL_INPUT) {
                diag_error(c->diag, n->loc, "'%s' is an input: only params are optimized (inputs "
                           "are data and are not differentiated)", n->s);
            } else if (t->kind != IR_VAL_PARAM) {
                diag_error(c->diag, n->loc, "'%s' is not a param: only params are optimized", n->s);
            } else if (t->dtype == IR_I32) {
                diag_error(c->diag, n->loc, "param '%s' is i32 and has no gradient", n->s);
            } else if (prev) {
                diag_error(c->diag, n->loc, "param '%s' is optimized twice", n->s);
                diag_note(c->diag, prev->loc, "it is first optimized here");
            } else if (s->u.train.opt >= 0 && line_master(s) && t->dtype != IR_BF16) {
                /* An error, not a silent no-op: the user expects 4 more
                 * bytes per param and a different update. */
                diag_error(c->diag, n->loc, "master=f32 keeps an f32 copy of a bf16 param, but "
                           "param '%s' is %s: it is its own master copy; leave master out",
                           n->s, ir_dtype_name(t->dtype));
            } else {
                fe_symtab_put(c->arena, &seen, n->s, (void *)n);
            }
        }
    }
}

/* ---- lowering ---- */

/* The step count: `opt.step` before this step (state) and after it. */
typedef struct opt_step {
    ir_value *old, *now;
} opt_step;

/* Builds the update ops of one param. */
typedef struct opt_ctx {
    fe_checker *c;
    fe_emit e;        /* tensor and dtype change per emitted value */
    const ir_value *w;/* the param */
    ir_value *lr;     /* the scheduled lr, a scalar; NULL: the constant lr hyperparameter */
    ir_value *clip;   /* the gradient's clipping factor, a scalar; NULL: not clipped */
    ir_value *skip;   /* `opt.skipped`, a scalar, 1 when this step is skipped; NULL: never */
    ir_value *master; /* `W.master`, the param's f32 master copy (state); NULL: none */
    const opt_step *step; /* the step count when a line reads it, else NULL */
} opt_ctx;

static fe_ew *k(opt_ctx *x, double v)
{
    return fe_ew_const(x->e.arena, v);
}

static fe_ew *op2(opt_ctx *x, ir_ew_kind kind, fe_ew *a, fe_ew *b)
{
    return fe_ew_bin(x->e.arena, kind, a, b);
}

static fe_ew *leaf(opt_ctx *x, ir_value *v)
{
    return fe_ew_leaf(x->e.arena, v, v->type.dims, v->type.rank);
}

/* lr times `c`: one constant when the lr is (the IR of a run without a
 * schedule is what it was before schedules). */
static fe_ew *lr_times(opt_ctx *x, double lr, double c)
{
    return x->lr ? op2(x, IR_EW_MUL, leaf(x, x->lr), k(x, c)) : k(x, lr * c);
}

/* The gradient `g` as the update reads it: clipped when asked. */
static fe_ew *grad_leaf(opt_ctx *x, ir_value *g)
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
    if (ty.dtype == IR_BF16)
        ty.dtype = IR_F32;
    return ir_value_new(x->c->m, name, IR_VAL_STATE, &ty, x->e.loc);
}

/* Emits `t` over the param's dims as tensor `name` and makes it the new
 * value of `target` at the end of the step. */
static ir_value *emit_update(opt_ctx *x, const char *name, fe_ew *t, ir_value *target)
{
    /* A skipped step keeps the old value: a select, so that the NaN the
     * new value then holds goes nowhere. */
    if (x->skip)
        t = fe_ew_select(x->e.arena, op2(x, IR_EW_EQ, leaf(x, x->skip), k(x, 0.0)), t,
                         leaf(x, target));
    x->e.tensor = name;
    x->e.dtype = target->type.dtype;
    ir_value *v = fe_ew_emit(&x->e, t, target->type.dims, target->type.rank, x->e.loc);
    if (v)
        ir_update_add(x->c->m, target, v, x->e.loc);
    return v;
}

/* The param as the update reads it: W, or with master=f32 its master copy,
 * which at step 0 is f32(W).  The master copy is initialised in the IR
 * rather than by the runtime: state starts at zero (a fresh run, or
 * --params, which loads params only), and `opt.step` is 0 exactly then,
 * while --resume restores W.master and the step count together, so a
 * checkpoint needs no link from a state to its param. */
static fe_ew *param_in(opt_ctx *x, ir_value *w)
{
    if (!x->master)
        return leaf(x, w);
    fe_ew *t = fe_ew_leaf(x->e.arena, x->step->old, x->step->old->type.dims, 0);
    return fe_ew_select(x->e.arena, op2(x, IR_EW_EQ, t, k(x, 0.0)), leaf(x, w),
                        leaf(x, x->master));
}

/* Stores `t`, the param's new value computed in f32: into W (rounded to
 * its dtype when stored), or with master=f32 into W.master and W becomes
 * bf16(W.master).  False if an IR limit was hit. */
static bool store_param(opt_ctx *x, ir_value *w, fe_ew *t)
{
    if (!x->master)
        return emit_update(x, w->tensor, t, w) != NULL;
    ir_value *m1 = emit_update(x, x->master->tensor, t, x->master);
    return m1 && emit_update(x, w->tensor, leaf(x, m1), w) != NULL;
}

/* 1 - b^t for the scalar leaf t: exp(t ln b), so b = 0 gives 1. */
static fe_ew *bias_correction(opt_ctx *x, fe_ew *t, double b)
{
    fe_ew *pow = fe_ew_call(x->e.arena, IR_FN_EXP, op2(x, IR_EW_MUL, t, k(x, log(b))));
    return op2(x, IR_EW_SUB, k(x, 1.0), pow);
}

static bool lower_sgd(opt_ctx *x, const double *hp, ir_value *w, ir_value *g)
{
    fe_ew *grad = grad_leaf(x, g);
    if (hp[SGD_WD] > 0)
        grad = op2(x, IR_EW_ADD, grad, op2(x, IR_EW_MUL, k(x, hp[SGD_WD]), param_in(x, w)));
    fe_ew *step = grad;
    if (hp[SGD_MOMENTUM] > 0) {
        const char *name = state_name(x, "mom");
        ir_value *mom = state_new(x, name);
        fe_ew *t = op2(x, IR_EW_ADD, op2(x, IR_EW_MUL, k(x, hp[SGD_MOMENTUM]), leaf(x, mom)), grad);
        ir_value *mom1 = emit_update(x, name, t, mom);
        if (!mom1)
            return false;
        step = leaf(x, mom1);
    }
    fe_ew *t = op2(x, IR_EW_SUB, param_in(x, w),
                   op2(x, IR_EW_MUL, lr_times(x, hp[SGD_LR], 1.0), step));
    return store_param(x, w, t);
}

static bool lower_adamw(opt_ctx *x, const double *hp, ir_value *w, ir_value *g)
{
    ir_value *t1 = x->step->now;
    double b1 = hp[ADAMW_BETA1], b2 = hp[ADAMW_BETA2], lr = hp[ADAMW_LR];
    const char *mn = state_name(x, "m"), *vn = state_name(x, "v");
    ir_value *m = state_new(x, mn), *v = state_new(x, vn);
    fe_ew *mt = op2(x, IR_EW_ADD, op2(x, IR_EW_MUL, k(x, b1), leaf(x, m)),
                    op2(x, IR_EW_MUL, k(x, 1.0 - b1), grad_leaf(x, g)));
    ir_value *m1 = emit_update(x, mn, mt, m);
    fe_ew *vt = op2(x, IR_EW_ADD, op2(x, IR_EW_MUL, k(x, b2), leaf(x, v)),
                    op2(x, IR_EW_MUL, k(x, 1.0 - b2),
                                                   op2(x, IR_EW_MUL, grad_leaf(x, g), grad_leaf(x, g))));
    ir_value *v1 = emit_update(x, vn, vt, v);
    if (!m1 || !v1)
        return false;
    fe_ew *tl = fe_ew_leaf(x->e.arena, t1, t1->type.dims, 0); /* a scalar: no labels */
    fe_ew *mhat = op2(x, IR_EW_DIV, leaf(x, m1), bias_correction(x, tl, b1));
    fe_ew *vhat = op2(x, IR_EW_DIV, leaf(x, v1), bias_correction(x, tl, b2));
    fe_ew *denom = op2(x, IR_EW_ADD, fe_ew_call(x->e.arena, IR_FN_SQRT, vhat), k(x, hp[ADAMW_EPS]));
    fe_ew *delta = op2(x, IR_EW_MUL, lr_times(x, lr, 1.0), op2(x, IR_EW_DIV, mhat, denom));
    fe_ew *pt = param_in(x, w);
    /* The decay is scaled by the scheduled lr, as in PyTorch and optax. */
    if (hp[ADAMW_WD] > 0)
        pt = op2(x, IR_EW_SUB, pt,
                 op2(x, IR_EW_MUL, lr_times(x, lr, hp[ADAMW_WD]), param_in(x, w)));
    return store_param(x, w, op2(x, IR_EW_SUB, pt, delta));
}

/* The step count: state `opt.step` and its new value t + 1 (t when the
 * step is skipped: it counts applied updates), made once. */
static ir_value *step_count(fe_checker *c, opt_step *made, uint32_t loc, ir_value *skip)
{
    if (made->now)
        return made->now;
    ir_type ty;
    memset(&ty, 0, sizeof ty);
    ty.dtype = IR_F32; /* exact up to 2^24 steps */
    ty.sh = ir_sharding_replicated();
    ir_value *t = ir_value_new(c->m, "opt.step", IR_VAL_STATE, &ty, loc);
    opt_ctx x = {.c = c, .e = {.m = c->m, .arena = c->arena, .loc = loc}, .w = t, .skip = skip};
    made->old = t;
    made->now = emit_update(&x, "opt.step", op2(&x, IR_EW_ADD, leaf(&x, t), k(&x, 1.0)), t);
    return made->now;
}

/* The squared norm of all `n` gradients, `opt.grad_sqnorm`, f32 unless a
 * gradient is f64. */
static ir_value *grad_sqnorm(fe_checker *c, uint32_t loc, ir_value *const *grads, int n)
{
    fe_emit e = {.m = c->m, .arena = c->arena, .loc = loc, .tensor = "opt.grad_sqnorm",
                 .dtype = IR_F32};
    for (int i = 0; i < n; i++)
        if (grads[i]->type.dtype == IR_F64)
            e.dtype = IR_F64;
    return fe_emit_sqnorm(&e, grads, n);
}

/* With skip_nonfinite=true on some line: `opt.skipped`, 1 when a gradient
 * holds a NaN or an Inf (its squared norm is then NaN or Inf, as it is
 * when the norm overflows), else 0, made an output for the runtime to
 * report and count.  *sqnorm is made here if no clipping made it.  NULL
 * with `*ok` when no line asks, NULL without when an IR limit was hit. */
static ir_value *skip_flag(fe_checker *c, const ast_program *prog, ir_value *const *grads,
                           int n, ir_value **sqnorm, bool *ok)
{
    *ok = true;
    const ast_stmt *asks = NULL;
    for (int i = 0; i < prog->nstmts && !asks; i++) {
        const ast_stmt *s = prog->stmts[i];
        if (s->kind == AST_S_OPTIMIZE &&
            s->u.train.hpv[optimizers[s->u.train.opt].n + FE_HP_SKIP] > 0)
            asks = s;
    }
    if (!asks)
        return NULL;
    *ok = false;
    if (!(*sqnorm = grad_sqnorm(c, asks->loc, grads, n)))
        return NULL;
    fe_emit e = {.m = c->m, .arena = c->arena, .loc = asks->loc, .tensor = "opt.skipped",
                 .dtype = IR_F32};
    fe_ew *finite = fe_ew_bin(c->arena, IR_EW_LT, fe_ew_leaf(c->arena, *sqnorm, (*sqnorm)->type.dims, 0),
                              fe_ew_const(c->arena, INFINITY));
    ir_value *v = fe_ew_emit(&e, fe_ew_select(c->arena, finite, fe_ew_const(c->arena, 0.0),
                                              fe_ew_const(c->arena, 1.0)),
                             (*sqnorm)->type.dims, 0, asks->loc);
    if (!v)
        return NULL;
    ir_output_add(c->m, "opt.skipped", v, asks->loc);
    *ok = true;
    return v;
}

/* The dtype of the scalars a line computes for its params: f64 if one of
 * them is, else f32 (also for bf16 params: a scalar costs nothing). */
static ir_dtype line_dtype(fe_checker *c, const ast_stmt *s)
{
    for (int q = 0; q < s->u.train.n; q++) {
        const fe_tensor *t = fe_symtab_get(&c->tensors, s->u.train.names[q].s);
        if (t->dtype == IR_F64)
            return IR_F64;
    }
    return IR_F32;
}

/* Optimize line `s`'s scheduled lr (x->lr, `W.lr` after its first param
 * W) and clipping factor (x->clip, `W.clip`), each when it has one; the
 * step count *t1 (also when the line keeps master copies, which read
 * it) and the squared norm of all `n` gradients *sqnorm are
 * made on first need and shared by every line.  False if an IR limit was
 * hit. */
static bool line_scalars(opt_ctx *x, const ast_stmt *s, ir_value *const *grads, int n,
                         opt_step *t1, ir_value **sqnorm)
{
    fe_checker *c = x->c;
    const struct optimizer_def *o = &optimizers[s->u.train.opt];
    const double *hp = s->u.train.hpv, *sched = hp + o->n;
    const char *first = s->u.train.names[0].s;
    fe_schedule sc = {.lr = hp[0], .warmup = sched[FE_HP_WARMUP],
                      .decay_steps = sched[FE_HP_DECAY_STEPS], .min_lr = sched[FE_HP_MIN_LR],
                      .cosine = sched[FE_HP_DECAY] == FE_DECAY_COSINE};
    fe_emit e = {.m = c->m, .arena = c->arena, .loc = s->loc, .dtype = line_dtype(c, s)};
    if (fe_schedule_varies(&sc)) {
        if (!step_count(c, t1, s->loc, x->skip))
            return false;
        e.tensor = ir_sprintf(c->arena, "%s.lr", first);
        if (!(x->lr = fe_emit_lr(&e, &sc, t1->now)))
            return false;
    }
    if (sched[FE_HP_CLIP] > 0) {
        if (!*sqnorm && !(*sqnorm = grad_sqnorm(c, s->loc, grads, n)))
            return false;
        e.tensor = ir_sprintf(c->arena, "%s.clip", first);
        if (!(x->clip = fe_emit_clip_factor(&e, *sqnorm, sched[FE_HP_CLIP])))
            return false;
    }
    /* AdamW's bias correction and the master copies' first step read it. */
    return !(line_master(s) || s->u.train.opt == OPT_ADAMW) || step_count(c, t1, s->loc, x->skip);
}

/* `v` as the shortest of %.15g and %.17g that reads back as `v`, so a
 * record compares equal exactly when the values are. */
static void format_value(char *buf, size_t size, double v)
{
    snprintf(buf, size, "%.15g", v);
    if (strtod(buf, NULL) != v)
        snprintf(buf, size, "%.17g", v);
}

/* c->m->hparams: per optimized param, in source order, a line "W OPT
 * name=value ..." with every hyperparameter of its line (a choice by its
 * name; master only when f32), for checkpoints to record and --resume to
 * compare. */
static void record_hparams(fe_checker *c, const ast_program *prog)
{
    const char *rec = "";
    for (int i = 0; i < prog->nstmts; i++) {
        const ast_stmt *s = prog->stmts[i];
        if (s->kind != AST_S_OPTIMIZE)
            continue;
        const struct optimizer_def *o = &optimizers[s->u.train.opt];
        const char *hp = "";
        for (int k = 0; k < o->n + FE_NSCHED; k++) {
            const hparam_def *d = hparam_at(o, k);
            char val[40];
            /* master=none is left out, so that checkpoints written before
             * the option existed resume; master=f32 against such a
             * checkpoint differs from its "none", as it should. */
            if (d->choices == master_names && s->u.train.hpv[k] == MASTER_NONE)
                continue;
            if (d->kind == HP_CHOICE)
                snprintf(val, sizeof val, "%s", d->choices[(int)s->u.train.hpv[k]]);
            else
                format_value(val, sizeof val, s->u.train.hpv[k]);
            hp = ir_sprintf(c->arena, "%s %s=%s", hp, d->name, val);
        }
        for (int q = 0; q < s->u.train.n; q++)
            rec = ir_sprintf(c->arena, "%s%s %s%s\n", rec, s->u.train.names[q].s, o->name, hp);
    }
    c->m->hparams = ir_strdup(&c->m->arena, rec);
}

/* Warns, once per param, when AdamW's update of param `w` rounds to
 * nothing in its dtype.  At the first step AdamW's update is lr times
 * m'/sqrt(v') = G/|G|, so +-lr per element (eps aside), and later about lr
 * (the update rules above; Kingma and Ba, "Adam", ICLR 2015, section 2.1:
 * the step is bounded by about lr).  An element w with 1 < |w| has a
 * spacing of at least eps(dtype) = 2^-(significand bits - 1) around it, so
 * an update below eps/2 rounds back to w: with lr < eps/2 (2^-8 for bf16,
 * whose eps is 2^-7) every such element stays where it is, and training
 * silently does nothing to it.  A schedule only lowers the lr below its
 * peak, lr itself, so the peak is what is compared.  SGD's update lr * G
 * depends on the gradient's size, unknown here: no warning for it. */
static void warn_update_rounding(fe_checker *c, const ast_name *name, const ir_value *w,
                                 double lr)
{
    /* Spacing at 1 per float dtype: bf16 keeps 8 significand bits, f32 24, f64 53. */
    double eps = w->type.dtype == IR_BF16 ? 0x1p-7 : w->type.dtype == IR_F32 ? 0x1p-23
                 : w->type.dtype == IR_F64 ? 0x1p-52 : 0;
    if (c->opts->single_device || !(lr < eps / 2))
        return;
    diag_warning(c->diag, name->loc, "adamw(lr=%g) on %s param '%s': its update, about lr per "
                 "element, is below half the spacing of %s at 1 (%g), so it rounds to nothing "
                 "for every element of magnitude above 1; use lr >= %g, or keep '%s' in f32 "
                 "(f32 master weights)", lr, ir_dtype_name(w->type.dtype), w->tensor,
                 ir_dtype_name(w->type.dtype), eps / 2, eps / 2, w->tensor);
}

bool fe_lower_train(fe_checker *c, const ast_program *prog)
{
    if (!c->loss)
        return true;
    const ast_name *ln = &c->loss->u.train.names[0];
    fe_tensor *lt = fe_symtab_get(&c->tensors, ln->s);
    c->m->loss = ir_strdup(&c->m->arena, lt->name);
    if (!fe_symtab_get(&c->outputs, lt->name))
        ir_output_add(c->m, lt->name, lt->value, ln->loc);

    /* Every optimized param, with its line, in source order. */
    int n = 0;
    for (int i = 0; i < prog->nstmts; i++)
        if (prog->stmts[i]->kind == AST_S_OPTIMIZE)
            n += prog->stmts[i]->u.train.n;
    if (n == 0)
        return true;
    ir_value **wrt = ir_alloc(c->arena, (size_t)n * sizeof *wrt);
    ir_value **grads = ir_alloc(c->arena, (size_t)n * sizeof *grads);
    const ast_stmt **line = ir_alloc(c->arena, (size_t)n * sizeof *line);
    const ast_name **name = ir_alloc(c->arena, (size_t)n * sizeof *name);
    bool *zero = ir_alloc(c->arena, (size_t)n * sizeof *zero);
    bool *fresh = ir_alloc(c->arena, (size_t)n * sizeof *fresh);
    int j = 0;
    for (int i = 0; i < prog->nstmts; i++) {
        const ast_stmt *s = prog->stmts[i];
        for (int q = 0; s->kind == AST_S_OPTIMIZE && q < s->u.train.n; q++, j++) {
            line[j] = s;
            name[j] = &s->u.train.names[q];
            wrt[j] = ((fe_tensor *)fe_symtab_get(&c->tensors, name[j]->s))->value;
        }
    }
    if (!fe_grad_values(c, line[0]->loc, lt->value, wrt, n, grads, zero, fresh))
        return false;
    opt_step t1 = {NULL, NULL};
    ir_value *sqnorm = NULL;
    ir_op *backward_end = c->m->last;
    bool ok;
    opt_ctx x = {.c = c, .skip = skip_flag(c, prog, grads, n, &sqnorm, &ok)};
    if (!ok)
        return false;
    for (j = 0; j < n; j++) {
        ir_value *w = wrt[j], *g = grads[j];
        if (zero[j] && !c->opts->single_device)
            diag_warning(c->diag, name[j]->loc, "the loss '%s' does not depend on '%s': its "
                         "gradient is zero, and only weight decay changes it", lt->name, w->tensor);
        /* The gradient sharded like its param (seed 000's listings). */
        if (fresh[j] && !g->has_constraint && w->type.sh.unreduced == 0 &&
            !c->opts->single_device) {
            g->has_constraint = true;
            g->constraint = w->type.sh;
        }
        const ast_stmt *s = line[j];
        const double *hp = s->u.train.hpv;
        if (j == 0 || s != line[j - 1]) {
            /* A new line: its lr and clipping factor, shared by its params. */
            x.lr = x.clip = NULL;
            if (!line_scalars(&x, s, grads, n, &t1, &sqnorm))
                return false;
        }
        x.e = (fe_emit){.m = c->m, .arena = c->arena, .loc = s->loc};
        x.w = w;
        x.step = t1.now ? &t1 : NULL;
        x.master = NULL;
        if (line_master(s)) {
            x.master = state_new(&x, state_name(&x, "master"));
            x.master->master = true;
        }
        /* A master copy keeps what the param's dtype would round away. */
        if (s->u.train.opt == OPT_ADAMW && !x.master)
            warn_update_rounding(c, name[j], w, hp[ADAMW_LR]);
        ok = s->u.train.opt == OPT_SGD ? lower_sgd(&x, hp, w, g) : lower_adamw(&x, hp, w, g);
        if (!ok)
            return false;
    }
    ir_set_phase_after(c->m, backward_end, IR_PHASE_UPDATE);
    record_hparams(c, prog);
    return true;
}
