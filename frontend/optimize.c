/*
 * optimize.c - `loss L` and `optimize W1, W2 with adamw(lr=3e-4, ...)`:
 * the checks of a training step's lines, and their record in the IR.
 *
 * A program with an `optimize` line is one step of training: the forward
 * pass the user wrote, the backward pass of the loss, the optimizer's
 * update of each param and of its state, and the loss as an output the
 * runtime prints after each step.  The frontend checks the lines here (the
 * optimizers and their hyperparameters: names, defaults, ranges, the
 * schedule's rules), makes the loss an output and records each line in
 * ir_module.opt_lines; the optimize pass (passes/optimize.c, the update
 * rules and the optimizer state) lowers them into Grad ops and the update
 * ops, and the autodiff pass derives the Grads.
 *
 * The record of hyperparameters that checkpoints keep (ir_module.hparams)
 * and the warning about an update that rounds to nothing are made here too:
 * both read the lines as the user wrote them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe_internal.h"

/* ir_opt_line.hp takes ast_stmt.u.train.hpv as it is. */
_Static_assert(IR_MAX_HPARAMS == AST_MAX_HPARAMS, "hyperparameter arrays of one size");

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

/* master=: `none`, the update applies to the param itself; `f32`, to an
 * f32 master copy of a narrower (bf16) param, which the param is rounded
 * from after every step (the value is the index). */
static const char *const master_names[] = {"none", "f32", NULL};

static const struct optimizer_def {
    const char *name;
    int n;
    hparam_def hp[AST_MAX_HPARAMS];
} optimizers[] = {
    [IR_OPT_SGD] = {"sgd", IR_SGD_NHP, {{"lr", NAN, 0, INFINITY, true, true, HP_REAL, NULL},
                                        {"momentum", 0.0, 0, 1, false, true, HP_REAL, NULL},
                                        {"weight_decay", 0.0, 0, INFINITY, false, true, HP_REAL, NULL},
                                        {"master", 0, 0, 0, false, false, HP_CHOICE, master_names}}},
    [IR_OPT_ADAMW] = {"adamw", IR_ADAMW_NHP, {{"lr", 1e-3, 0, INFINITY, true, true, HP_REAL, NULL},
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

/* The hyperparameters every optimizer takes after its own (the optimize
 * pass's optimize_schedule.c uses them; their values follow the
 * optimizer's own in hpv[], in the order of IR_HP_WARMUP..IR_HP_ZERO).  A
 * step count is at most 2^24, the largest f32 `opt.step` counts exactly.  Defaults: no warmup, constant
 * lr, no clipping (0: off), every step applied. */
static const hparam_def schedule_hp[IR_NSCHED] = {
    [IR_HP_WARMUP] = {"warmup_steps", 0, 0, 16777216, false, false, HP_COUNT, NULL},
    [IR_HP_DECAY] = {"decay", 0, 0, 0, false, false, HP_CHOICE, decay_names},
    [IR_HP_DECAY_STEPS] = {"decay_steps", 0, 0, 16777216, true, false, HP_COUNT, NULL},
    [IR_HP_MIN_LR] = {"min_lr", 0, 0, INFINITY, false, true, HP_REAL, NULL},
    [IR_HP_CLIP] = {"clip_norm", 0, 0, INFINITY, true, true, HP_REAL, NULL},
    [IR_HP_SKIP] = {"skip_nonfinite", 0, 0, 0, false, false, HP_CHOICE, bool_names},
    [IR_HP_ZERO] = {"zero", 0, 0, 2, false, false, HP_COUNT, NULL},
};

/* Whether optimize line `s` (checked) keeps f32 master copies. */
static bool line_master(const ast_stmt *s)
{
    int i = s->u.train.opt == IR_OPT_SGD ? IR_SGD_MASTER : IR_ADAMW_MASTER;
    return s->u.train.hpv[i] == IR_MASTER_F32;
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
    for (int i = 0; i < o->n + IR_NSCHED && n < size; i++) {
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
    if (!ok && d == &schedule_hp[IR_HP_ZERO] && v == 3) {
        /* ZeRO-3 shards the params themselves, which a sharding says. */
        diag_error(c->diag, h->value.loc, "zero=3 is FSDP: shard the params themselves over the data "
                   "axis (e.g. 'param W[D_X, F]'), and their state follows; zero takes 0, 1 or 2");
        return NAN;
    }
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
        const char *what = d == &schedule_hp[IR_HP_ZERO] ? "a ZeRO stage, 0, 1 or 2" : "a whole number of steps";
        diag_error(c->diag, h->value.loc, "%s=%s: %s is %s", h->name.s, h->value.text, d->name, what);
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
    const ast_hparam *arg[IR_NSCHED] = {NULL};
    for (int j = 0; j < s->u.train.nhp; j++)
        for (int i = 0; i < IR_NSCHED; i++)
            if (!strcmp(s->u.train.hp[j].name.s, schedule_hp[i].name))
                arg[i] = &s->u.train.hp[j];
    bool cosine = sched[IR_HP_DECAY] == IR_DECAY_COSINE;
    if (!cosine) {
        for (int i = IR_HP_DECAY_STEPS; i <= IR_HP_MIN_LR; i++)
            if (given[o->n + i] && arg[i])
                diag_error(c->diag, arg[i]->name.loc, "%s is a parameter of the cosine decay: "
                           "give decay=cosine too, or leave it out", schedule_hp[i].name);
        return;
    }
    if (!given[o->n + IR_HP_DECAY_STEPS]) {
        diag_error(c->diag, arg[IR_HP_DECAY] ? arg[IR_HP_DECAY]->name.loc : s->loc,
                   "decay=cosine needs decay_steps=N, the step where the lr reaches min_lr "
                   "(warmup included)");
        return;
    }
    if (arg[IR_HP_DECAY_STEPS] && sched[IR_HP_DECAY_STEPS] <= sched[IR_HP_WARMUP])
        diag_error(c->diag, arg[IR_HP_DECAY_STEPS]->value.loc, "decay_steps=%s must exceed "
                   "warmup_steps=%g: the cosine runs from the end of the warmup to step "
                   "decay_steps", arg[IR_HP_DECAY_STEPS]->value.text, sched[IR_HP_WARMUP]);
    /* lr comes first in every optimizer's table. */
    if (arg[IR_HP_MIN_LR] && sched[IR_HP_MIN_LR] > s->u.train.hpv[0])
        diag_error(c->diag, arg[IR_HP_MIN_LR]->value.loc, "min_lr=%s exceeds lr=%g: the cosine "
                   "decays from lr down to min_lr", arg[IR_HP_MIN_LR]->value.text,
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
    int nhp = o->n + IR_NSCHED;
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
    } else if (ir_dtype_integer(t->dtype)) {
        diag_error(c->diag, n->loc, "the loss '%s' is %s: a loss is f32, f64 or bf16", n->s,
                   ir_dtype_name(t->dtype));
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
            } else if (ir_dtype_integer(t->dtype)) {
                diag_error(c->diag, n->loc, "param '%s' is %s and has no gradient%s", n->s,
                           ir_dtype_name(t->dtype), t->dtype == IR_I8 ? " (quantized weights are "
                           "fixed: optimize an f32 or bf16 param and quantize it after training)" : "");
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
        for (int k = 0; k < o->n + IR_NSCHED; k++) {
            const hparam_def *d = hparam_at(o, k);
            char val[40];
            /* master=none is left out, so that checkpoints written before
             * the option existed resume; master=f32 against such a
             * checkpoint differs from its "none", as it should. */
            if (d->choices == master_names && s->u.train.hpv[k] == IR_MASTER_NONE)
                continue;
            /* Where the state lives is not what it holds: a checkpoint
             * (global arrays) resumes under any ZeRO stage. */
            if (d == &schedule_hp[IR_HP_ZERO])
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
    ir_module *m = c->m;
    m->loss = ir_strdup(&m->arena, lt->name);
    if (!fe_symtab_get(&c->outputs, lt->name))
        ir_output_add(m, lt->name, lt->value, ln->loc);

    /* Every optimize line, for the optimize pass to lower. */
    int n = 0;
    for (int i = 0; i < prog->nstmts; i++)
        n += prog->stmts[i]->kind == AST_S_OPTIMIZE;
    if (n == 0)
        return true;
    m->opt_lines = ir_alloc(&m->arena, (size_t)n * sizeof *m->opt_lines);
    for (int i = 0; i < prog->nstmts; i++) {
        const ast_stmt *s = prog->stmts[i];
        if (s->kind != AST_S_OPTIMIZE)
            continue;
        ir_opt_line *l = &m->opt_lines[m->nopt_lines++];
        const struct optimizer_def *o = &optimizers[s->u.train.opt];
        *l = (ir_opt_line){.opt = (ir_optimizer)s->u.train.opt, .nown = o->n, .loc = s->loc,
                           .nparams = s->u.train.n};
        memcpy(l->hp, s->u.train.hpv, sizeof l->hp);
        l->params = ir_alloc(&m->arena, (size_t)l->nparams * sizeof *l->params);
        l->name_locs = ir_alloc(&m->arena, (size_t)l->nparams * sizeof *l->name_locs);
        for (int q = 0; q < l->nparams; q++) {
            const ast_name *name = &s->u.train.names[q];
            l->params[q] = ((fe_tensor *)fe_symtab_get(&c->tensors, name->s))->value;
            l->name_locs[q] = name->loc;
            /* A master copy keeps what the param's dtype would round away. */
            if (l->opt == IR_OPT_ADAMW && !line_master(s))
                warn_update_rounding(c, name, l->params[q], l->hp[IR_ADAMW_LR]);
        }
    }
    record_hparams(c, prog);
    return true;
}
