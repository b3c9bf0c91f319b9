/*
 * grad_internal.h - what the files of the backward sweep share (grad.c and
 * grad_*.c) with each other and with the autodiff pass (autodiff.c), and
 * keep from the other passes.
 *
 * Reverse-mode differentiation is one algorithm cut into files by job
 * (grad.c's comment says how it works):
 *   autodiff.c     the pass: groups the Grad ops by loss, places each
 *                  group's sweep, replaces the Grad ops by its gradients
 *   grad.c         the sweep: relevance and the walk from the loss back
 *   grad_read.c    forward values as the backward ops read them: kept,
 *                  stacked per layer, or computed again (--remat)
 *   grad_accum.c   adding contributions into adjoints, and writing one out
 *   grad_einsum.c  the adjoint rules of einsums and gathers
 *   grad_ew.c      the adjoint rules of elementwise ops (the chain rule)
 *   grad_loop.c    the backward loop of a repeated block
 * Everything here is allocated in the sweep's arena (ad_ctx.e.arena, the
 * pass's own, freed when it ends) or, for what the module keeps (values,
 * ops, expression nodes), the module's; nothing is freed individually.
 */
#ifndef EINC_PASSES_GRAD_INTERNAL_H
#define EINC_PASSES_GRAD_INTERNAL_H

#include "ir_ewtree.h"

/* An adjoint: zero (neither set), a constant c (a tensor of c's), or a value
 * whose dims are those of the value it is the adjoint of. */
typedef struct ad_adjoint {
    ir_value *v;   /* the tensor, or NULL */
    bool is_const; /* v == NULL and the adjoint is `c` everywhere */
    double c;
} ad_adjoint;

/* One backward sweep. */
typedef struct ad_ctx {
    ir_module *m;
    diag_ctx *diag;     /* where errors go, at `loc` */
    ir_ewt_out e;       /* tensor name changes per adjoint */
    uint32_t loc;       /* the first Grad op of the sweep */
    int nvalues;        /* values that existed before the sweep */
    ad_adjoint *adj;    /* by value id */
    bool *relevant;     /* depends on a target and the loss depends on it */
    bool ok;
    /* A backward loop's body (ad_loop_adjoint): the forward LoopBegin
     * whose body is differentiated, the backward LoopBegin, and by forward
     * value id the value as the backward body reads it (ad_val). */
    ir_op *loop, *bloop;
    ir_value **map;
    ir_remat remat;     /* what is computed again rather than kept (grad_read.c) */
} ad_ctx;

/* Tree builders in the sweep's arena, short because the adjoint rules are
 * written with them (grad_ew.c); static inline so each file has its own. */
static inline ir_ewt *cnst(ad_ctx *g, double c)
{
    return ir_ewt_const(g->e.arena, c);
}

static inline ir_ewt *bin(ad_ctx *g, ir_ew_kind k, ir_ewt *a, ir_ewt *b)
{
    return ir_ewt_bin(g->e.arena, k, a, b);
}

static inline ir_ewt *call(ad_ctx *g, ir_func fn, ir_ewt *a)
{
    return ir_ewt_call(g->e.arena, fn, a);
}

/* a * b where either may be NULL (zero) or a constant 1. */
static inline ir_ewt *mul(ad_ctx *g, ir_ewt *a, ir_ewt *b)
{
    if (!a || !b)
        return NULL;
    if (a->kind == IR_EW_CONST && a->value == 1.0)
        return b;
    if (b->kind == IR_EW_CONST && b->value == 1.0)
        return a;
    return bin(g, IR_EW_MUL, a, b);
}

/* a + b where either may be NULL (zero). */
static inline ir_ewt *add(ad_ctx *g, ir_ewt *a, ir_ewt *b)
{
    return !a ? b : !b ? a : bin(g, IR_EW_ADD, a, b);
}

/* Whether dim id `d` is among labels[0..n-1]. */
static inline bool has(const int *labels, int n, int d)
{
    for (int i = 0; i < n; i++)
        if (labels[i] == d)
            return true;
    return false;
}

/* ---- forward values as the backward ops read them (grad_read.c) ---- */

/* Whether `v` is a value of the body of loop `fb` (its carried value at
 * the top included); false for fb == NULL. */
bool ad_in_body(const ir_op *fb, const ir_value *v);
/* `v` as the backward ops read it: itself; a copy computed again under
 * --remat; or in a backward loop's body the forward body value of the same
 * layer (a LayerSlice, of a LayerStack the forward loop now keeps if
 * needed).  May append ops; on a value that cannot be stacked reports at
 * g->loc, clears g->ok and returns `v`. */
ir_value *ad_val(ad_ctx *g, ir_value *v);
/* Names the ops of the adjoint of `v` that follow: "d" + the tensor's name,
 * in v's dtype (sets g->e.tensor and g->e.dtype). */
void ad_name_for(ad_ctx *g, const ir_value *v);

/* ---- adjoints (grad_accum.c) ---- */

/* The tree of adjoint `a` as a leaf over `labels` (n of them, indexing the
 * adjoint's value's positions), or its constant. */
ir_ewt *ad_adj_tree(ad_ctx *g, const ad_adjoint *a, const int *labels, int n);
/* Appends an einsum of `nops` (1 or 2) operands `vals`, labelled labels[i]
 * (nlab[i] each), into a new value over `res` (nres labels, global dims),
 * scaled by `scale` and reduced with `red`; returns the result. */
ir_value *ad_emit_einsum(ad_ctx *g, ir_value *const *vals, const int (*labels)[IR_MAX_RANK],
                         const int *nlab, int nops, const int *res, int nres, double scale,
                         ir_reduce red);
/* Adds contribution `t` (NULL: zero) to the adjoint of `v`: a tree over
 * `labels` (v's positions as its use indexed them), or a constant.  The
 * adjoint's value always has v's own dims. */
void ad_contribute(ad_ctx *g, ir_value *v, ir_ewt *t, const int *labels);
/* Sums tree `t` over `from` (nfrom labels) down to `to` (a subset, nto),
 * as a contribution to operand value `v` indexed by `to` at its use. */
void ad_contribute_reduced(ad_ctx *g, ir_value *v, ir_ewt *t, const int *from, int nfrom,
                           const int *to, int nto);
/* The adjoint of `v` as a value of v's shape, written out if it is a
 * constant or zero (then kept as the adjoint). */
ir_value *ad_materialise(ad_ctx *g, ir_value *v);

/* ---- adjoint rules per op (grad_einsum.c, grad_ew.c, grad_loop.c, grad.c) ---- */

/* The adjoint rules, one per union arm of IR_OPS: this layer's hooks of
 * the op, named after the arm like the cost model's cost_op_A and
 * codegen's cg_check_A (docs/ir.md, "Ops").  Given `dc`, the nonzero
 * adjoint of op's result, each contributes the adjoints of op's relevant
 * operands:
 *   ad_rule_einsum: contractions, reductions, gathers (grad_einsum.c;
 *     grad.c's comment has the formulas);
 *   ad_rule_ew: the chain rule on the expression tree, summed over the
 *     labels an operand was broadcast along (grad_ew.c);
 *   ad_rule_loop: at a LoopEnd, the backward loop (grad_loop.c);
 *   the others (collectives, MeshSlice, UpdateSlice, Grad, CollectivePermute) have none: the
 *     sweep runs before propagate, and a state write or a second Grad on
 *     the path is an error, reported, g->ok cleared (grad.c). */
#define X(e, s, arm, lo, hi, tr) void ad_rule_##arm(ad_ctx *g, ir_op *op, const ad_adjoint *dc);
IR_OPS(X)
#undef X
/* Appends the backward loop of the forward loop that LoopEnd `fe` ends,
 * given the adjoint of the value after it, and contributes the adjoints of
 * the values before the loop; on error reports and clears g->ok. */
void ad_loop_adjoint(ad_ctx *g, ir_op *fe);

/* ---- the sweep (grad.c) ---- */

/* Applies the adjoint rules of the ops from `last` back to (not including)
 * `stop` (NULL: the first op); a repeated block is differentiated as a
 * whole at its LoopEnd.  An op without rules on the path is an error
 * (reported, g->ok cleared). */
void ad_backprop(ad_ctx *g, ir_op *last, const ir_op *stop);
/* The backward sweep of scalar `loss` for targets wrt[0..n-1], over m's
 * ops from its first to its last (the pass detaches what follows the
 * sweep's place): appends the backward ops (phase backward), and fills
 * grads[i], dL/dwrt[i] (a value of wrt[i]'s dims), and zero[i], whether no
 * path leads from wrt[i] to the loss.  `arena` holds the sweep's scratch
 * and must outlive the call only.  False after reporting an error at
 * `loc` through `diag` (an op on the path without adjoint rules, a target
 * inside a repeat block's body). */
bool ad_sweep(ir_module *m, ir_arena *arena, diag_ctx *diag, uint32_t loc, ir_value *loss,
              ir_value *const *wrt, int n, ir_value **grads, bool *zero);

#endif
