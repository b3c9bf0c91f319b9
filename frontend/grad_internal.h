/*
 * grad_internal.h - what the files of the backward sweep share (grad.c and
 * grad_*.c), and keep from the rest of the frontend.
 *
 * Reverse-mode differentiation is one algorithm cut into files by job
 * (grad.c's comment says how it works):
 *   grad.c         the sweep: relevance, the walk from the loss back, and the
 *                  frontend's entry points (fe_grad_lower, fe_grad_values)
 *   grad_read.c    forward values as the backward ops read them: kept,
 *                  stacked per layer, or computed again (--remat)
 *   grad_accum.c   adding contributions into adjoints, and writing one out
 *   grad_einsum.c  the adjoint rules of einsums and gathers
 *   grad_ew.c      the adjoint rules of elementwise ops (the chain rule)
 *   grad_loop.c    the backward loop of a repeated block
 * Everything here is allocated in the checker's arena (fe_checker.arena) or
 * the module's; nothing is freed individually.
 */
#ifndef EINC_FE_GRAD_INTERNAL_H
#define EINC_FE_GRAD_INTERNAL_H

#include "ewtree.h"

/* An adjoint: zero (neither set), a constant c (a tensor of c's), or a value
 * whose dims are those of the value it is the adjoint of. */
typedef struct fe_adjoint {
    ir_value *v;   /* the tensor, or NULL */
    bool is_const; /* v == NULL and the adjoint is `c` everywhere */
    double c;
} fe_adjoint;

/* One backward sweep. */
typedef struct fe_gctx {
    fe_checker *c;
    fe_emit e;          /* tensor name changes per adjoint */
    uint32_t loc;       /* the grad statement */
    int nvalues;        /* values that existed before the sweep */
    fe_adjoint *adj;    /* by value id */
    bool *relevant;     /* depends on a target and the loss depends on it */
    bool ok;
    /* A backward loop's body (fe_grad_loop_adjoint): the forward LoopBegin
     * whose body is differentiated, the backward LoopBegin, and by forward
     * value id the value as the backward body reads it (fe_grad_val). */
    ir_op *loop, *bloop;
    ir_value **map;
    fe_remat remat;     /* what is computed again rather than kept (grad_read.c) */
} fe_gctx;

/* Tree builders in the sweep's arena, short because the adjoint rules are
 * written with them (grad_ew.c); static inline so each file has its own. */
static inline fe_ew *cnst(fe_gctx *g, double c)
{
    return fe_ew_const(g->e.arena, c);
}

static inline fe_ew *bin(fe_gctx *g, ir_ew_kind k, fe_ew *a, fe_ew *b)
{
    return fe_ew_bin(g->e.arena, k, a, b);
}

static inline fe_ew *call(fe_gctx *g, ir_func fn, fe_ew *a)
{
    return fe_ew_call(g->e.arena, fn, a);
}

/* a * b where either may be NULL (zero) or a constant 1. */
static inline fe_ew *mul(fe_gctx *g, fe_ew *a, fe_ew *b)
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
static inline fe_ew *add(fe_gctx *g, fe_ew *a, fe_ew *b)
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
bool fe_grad_in_body(const ir_op *fb, const ir_value *v);
/* `v` as the backward ops read it: itself; a copy computed again under
 * --remat; or in a backward loop's body the forward body value of the same
 * layer (a LayerSlice, of a LayerStack the forward loop now keeps if
 * needed).  May append ops; on a value that cannot be stacked reports at
 * g->loc, clears g->ok and returns `v`. */
ir_value *fe_grad_val(fe_gctx *g, ir_value *v);
/* Names the ops of the adjoint of `v` that follow: "d" + the tensor's name,
 * in v's dtype (sets g->e.tensor and g->e.dtype). */
void fe_grad_name_for(fe_gctx *g, const ir_value *v);

/* ---- adjoints (grad_accum.c) ---- */

/* The tree of adjoint `a` as a leaf over `labels` (n of them, indexing the
 * adjoint's value's positions), or its constant. */
fe_ew *fe_grad_adj_tree(fe_gctx *g, const fe_adjoint *a, const int *labels, int n);
/* Appends an einsum of `nops` (1 or 2) operands `vals`, labelled labels[i]
 * (nlab[i] each), into a new value over `res` (nres labels, global dims),
 * scaled by `scale` and reduced with `red`; returns the result. */
ir_value *fe_grad_emit_einsum(fe_gctx *g, ir_value *const *vals, const int (*labels)[IR_MAX_RANK],
                              const int *nlab, int nops, const int *res, int nres, double scale,
                              ir_reduce red);
/* Adds contribution `t` (NULL: zero) to the adjoint of `v`: a tree over
 * `labels` (v's positions as its use indexed them), or a constant.  The
 * adjoint's value always has v's own dims. */
void fe_grad_contribute(fe_gctx *g, ir_value *v, fe_ew *t, const int *labels);
/* Sums tree `t` over `from` (nfrom labels) down to `to` (a subset, nto),
 * as a contribution to operand value `v` indexed by `to` at its use. */
void fe_grad_contribute_reduced(fe_gctx *g, ir_value *v, fe_ew *t, const int *from, int nfrom,
                                const int *to, int nto);
/* The adjoint of `v` as a value of v's shape, written out if it is a
 * constant or zero (then kept as the adjoint). */
ir_value *fe_grad_materialise(fe_gctx *g, ir_value *v);

/* ---- adjoint rules per op (grad_einsum.c, grad_ew.c, grad_loop.c) ---- */

/* Contributes the adjoints of einsum `op`'s relevant operands given `dc`,
 * the adjoint of its result (grad.c's comment; gathers included). */
void fe_grad_einsum_adjoint(fe_gctx *g, const ir_op *op, const fe_adjoint *dc);
/* Contributes the adjoints of elementwise `op`'s relevant operands given
 * `dc`: the chain rule on its expression tree, summed over the labels an
 * operand was broadcast along. */
void fe_grad_elementwise_adjoint(fe_gctx *g, const ir_op *op, const fe_adjoint *dc);
/* Appends the backward loop of the forward loop that LoopEnd `fe` ends,
 * given the adjoint of the value after it, and contributes the adjoints of
 * the values before the loop; on error reports and clears g->ok. */
void fe_grad_loop_adjoint(fe_gctx *g, ir_op *fe);

/* ---- the sweep (grad.c) ---- */

/* Applies the adjoint rules of the ops from `last` back to (not including)
 * `stop` (NULL: the first op); a repeated block is differentiated as a
 * whole at its LoopEnd.  An op without rules on the path is an error
 * (reported, g->ok cleared). */
void fe_grad_backprop(fe_gctx *g, ir_op *last, const ir_op *stop);

#endif
