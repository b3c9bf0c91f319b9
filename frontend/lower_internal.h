/*
 * lower_internal.h - what the files of lowering share (lower.c and
 * lower_*.c), and keep from the rest of the frontend.
 *
 * Lowering the checked AST to IR is cut into files by job (lower.c's
 * comment says how a statement is lowered):
 *   lower.c         statements: declarations, assignments, state writes,
 *                   outputs, and the walk over the program (fe_lower)
 *   lower_expr.c    expressions: elementwise trees, index sets, summed
 *                   terms and their einsum chains (fe_lower_assign)
 *   lower_call.c    reductions, softmax, argmax and gathers: the calls that
 *                   become einsums of their own; and casts
 *   lower_repeat.c  repeated blocks: LoopBegin, LoopEnd, and the layer a
 *                   reference reads (LayerSlice)
 * Values and ops go into the checker's module (fe_checker.m), trees into
 * its arena; nothing is freed individually.
 */
#ifndef EINC_FE_LOWER_INTERNAL_H
#define EINC_FE_LOWER_INTERNAL_H

#include "fe_internal.h"
#include "ir_ewtree.h"

/* Lowering state of one statement. */
typedef struct fe_stmt_ctx {
    fe_checker *c;          /* checker (module, diagnostics, options) */
    ir_ewt_out e;              /* where ops go, what results are called */
    int nlhs;               /* rank of the left side */
    int lhs[IR_MAX_RANK];   /* its dim ids */
    bool ok;                /* no IR limit was hit */
} fe_stmt_ctx;

/* A tensor operand of an einsum: value and the dim id of each position. */
typedef struct fe_operand {
    ir_value *v;              /* the value */
    int n;                    /* its rank */
    int labels[IR_MAX_RANK];  /* labels */
} fe_operand;

/* The index tensor of a gather reference `Emb[Tok[B, T], D]`, or NULL. */
static inline const ast_tref *gather_ids(const ast_tref *t)
{
    return t->nidx > 0 ? t->idx[0].tensor : NULL;
}

/* ---- repeated blocks (lower_repeat.c) ---- */

/* The value reference `t` reads: its tensor's current value, or inside a
 * repeated block the current layer of a stacked tensor (t->layer), a
 * LayerSlice appended at its first use in the block and shared by the
 * rest. */
ir_value *fe_lower_ref_value(fe_checker *c, const ast_tref *t);
/* `repeat L {`: appends a LoopBegin and opens the block in `c`; the carried
 * tensor's value becomes the loop's value at the top of each iteration. */
void fe_lower_repeat(fe_checker *c, const ast_stmt *s);
/* `}` at `loc`: appends the open block's LoopEnd and closes the block; the
 * carried tensor's value becomes the value after the loop. */
void fe_lower_end(fe_checker *c, uint32_t loc);

/* ---- expressions (lower_expr.c) ---- */

/* Elementwise tree of a whole expression (tensor references become
 * leaves; calls that reduce are lowered to their values first). */
ir_ewt *fe_lower_expr_tree(fe_stmt_ctx *x, const ast_expr *e);
/* Adds the indices of `e` to labels[0..*n), each once, counting all in *n
 * but storing at most `cap`. */
void fe_lower_expr_indices(const fe_stmt_ctx *x, const ast_expr *e, int *labels, int *n, int cap);
/* Whether reduction call `f` keeps label `d` of its argument: all but the
 * named index, or without one, those of the left side. */
bool fe_lower_reduction_keeps(const fe_stmt_ctx *x, const ast_factor *f, int d);
/* Writes to `out` the labels of `have` (n entries) that `keep` (nkeep)
 * holds, the left side's order first, then the order in `have`; returns
 * how many. */
int fe_lower_restrict_labels(const fe_stmt_ctx *x, const int *have, int n, const int *keep,
                             int nkeep, int *out);
/* Lowers the right side of assignment `s` over the left side x->lhs;
 * returns its final value, or NULL after an error (reported, x->ok
 * false). */
ir_value *fe_lower_assign(fe_stmt_ctx *x, const ast_stmt *s);

/* ---- calls that become einsums (lower_call.c) ---- */

/* Appends one unary or binary (nops) einsum step of `ops` into a new value
 * over `res` (nres labels) scaled by `scale`, a sum; returns it. */
fe_operand fe_lower_einsum(fe_stmt_ctx *x, const fe_operand *ops, int nops, const int *res,
                           int nres, double scale, uint32_t vloc);
/* Whether `n` dims fit in a value (IR_MAX_RANK); otherwise reports at `loc`
 * that `what` of the statement's tensor would have too many, clears x->ok
 * and returns false. */
bool fe_lower_limit_rank(fe_stmt_ctx *x, int n, uint32_t loc, const char *what);
/* `Emb[Tok[B, T], D]`: the gather einsum of the indices and the table. */
fe_operand fe_lower_gather(fe_stmt_ctx *x, const ast_tref *t);
/* `sum`, `max`, `min`, `mean` call `f` as a unary einsum into *out; false
 * after an error (x->ok false). */
bool fe_lower_reduction(fe_stmt_ctx *x, const ast_factor *f, fe_operand *out);
/* `argmax(x, V)`, a whole right side: the i32 value, or NULL after an
 * error (x->ok false). */
ir_value *fe_lower_argmax(fe_stmt_ctx *x, const ast_factor *f);
/* Cast `f` (`f32(x)`, `bf16(x)`, `f64(x)`) into *out: a value of the
 * cast's dtype over the argument's indices; false after an error (x->ok
 * false). */
bool fe_lower_cast(fe_stmt_ctx *x, const ast_factor *f, fe_operand *out);
/* `softmax(x, S)` in its stable form into *out; false after an error
 * (x->ok false). */
bool fe_lower_softmax(fe_stmt_ctx *x, const ast_factor *f, fe_operand *out);

#endif
