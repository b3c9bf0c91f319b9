/*
 * ir_train.h - the training step as the frontend records it: the
 * optimizers, their hyperparameters' slots and the `optimize` lines
 * (ir_module.opt_lines), which the optimize pass (passes/optimize.c) lowers
 * into Grad and update ops.  Part of ir.h, which includes it after the
 * types it needs: include ir.h.
 */
#ifndef EINC_IR_TRAIN_H
#define EINC_IR_TRAIN_H

#ifndef EINC_IR_H
#error "ir_train.h is part of ir.h: include ir.h"
#endif

/* The training step's optimizers (docs/language.md, "Training"): the
 * update rules are the optimize pass's (passes/optimize.c). */
typedef enum ir_optimizer { IR_OPT_SGD, IR_OPT_ADAMW } ir_optimizer;
/* Slots of ir_opt_line.hp: each optimizer's own hyperparameters, in the
 * order of the frontend's tables (frontend/optimize.c), ... */
enum { IR_SGD_LR, IR_SGD_MOMENTUM, IR_SGD_WD, IR_SGD_MASTER, IR_SGD_NHP };
enum { IR_ADAMW_LR, IR_ADAMW_BETA1, IR_ADAMW_BETA2, IR_ADAMW_EPS, IR_ADAMW_WD, IR_ADAMW_MASTER,
       IR_ADAMW_NHP };
/* ... then those every optimizer takes, counted from hp + nown: the
 * learning-rate schedule, global-norm clipping (0: off), skipping a
 * step whose gradients are not finite (0 or 1) and the ZeRO stage of the
 * optimizer state (0: sharded like the param; 1 or 2: also over the
 * data-parallel axes, passes/optimize.c). */
enum { IR_HP_WARMUP, IR_HP_DECAY, IR_HP_DECAY_STEPS, IR_HP_MIN_LR, IR_HP_CLIP, IR_HP_SKIP, IR_HP_ZERO,
       IR_NSCHED };
enum { IR_DECAY_CONSTANT, IR_DECAY_COSINE }; /* values of IR_HP_DECAY */
enum { IR_MASTER_NONE, IR_MASTER_F32 };      /* values of IR_SGD_MASTER, IR_ADAMW_MASTER */
#define IR_MAX_HPARAMS 16

/* An `optimize` line as the frontend checked it, for the optimize pass,
 * which lowers every line of ir_module.opt_lines into the training step's
 * Grad and update ops.  Arrays are module-arena-owned. */
typedef struct ir_opt_line {
    ir_optimizer opt;
    int nown;                   /* the optimizer's own slots: IR_SGD_NHP or IR_ADAMW_NHP */
    double hp[IR_MAX_HPARAMS];  /* every value, given or the default, by slot */
    uint32_t loc;               /* the line */
    int nparams;
    ir_value **params;          /* the params it optimizes, in its order */
    uint32_t *name_locs;        /* each param's name on the line */
} ir_opt_line;

#endif
