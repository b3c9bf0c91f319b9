/*
 * ir_ewtree.h - elementwise expression trees under construction: the builder
 * that the frontend's lowering and the autodiff pass write elementwise ops with.
 *
 * lower_expr.c builds one tree per elementwise op from the AST, with a leaf
 * per tensor operand; ir_ewt_emit turns it into an IR_OP_ELEMENTWISE.  An IR op
 * has at most IR_MAX_OPERANDS operands, so a tree with more leaves is split:
 * subtrees become their own elementwise ops (over the union of their leaves'
 * indices), which is exact because nothing is summed inside an elementwise
 * expression.
 */
#ifndef EINC_IR_EWTREE_H
#define EINC_IR_EWTREE_H

#include "ir.h"

/* A tree node; kinds as in ir_ew_node. */
typedef struct ir_ewt {
    ir_ew_kind kind;            /* IR_EW_OPERAND is a leaf */
    struct ir_ewt *kid[3];      /* children, the first ir_ew_arity(kind) used */
    ir_value *v;                /* leaf: the operand value */
    int nlabels;                /* leaf: its rank; IR_EW_INDEX: 1 */
    int labels[IR_MAX_RANK];    /* leaf: dim id indexing each position; IR_EW_INDEX: its dim */
    double value;               /* IR_EW_CONST */
    ir_func fn;                 /* IR_EW_CALL */
    int nleaves;                /* operand leaves in this subtree */
} ir_ewt;

/* Where emitted ops go and what they are called. */
typedef struct ir_ewt_out {
    ir_module *m;        /* the module (ops appended at its end) */
    ir_arena *arena;     /* the caller's arena for trees (not the module's) */
    const char *tensor;  /* tensor name of the results (a statement's left side) */
    ir_dtype dtype;      /* their dtype */
    uint32_t loc;        /* op loc: the statement's offset */
} ir_ewt_out;

ir_ewt *ir_ewt_leaf(ir_arena *a, ir_value *v, const int *labels, int n);
ir_ewt *ir_ewt_const(ir_arena *a, double value);
ir_ewt *ir_ewt_bin(ir_arena *a, ir_ew_kind kind, ir_ewt *x, ir_ewt *y);
ir_ewt *ir_ewt_call(ir_arena *a, ir_func fn, ir_ewt *x);
/* where(cond, x, y): `cond` must be a comparison node (ir_ewt_bin with
 * IR_EW_LT..IR_EW_NE). */
ir_ewt *ir_ewt_select(ir_arena *a, ir_ewt *cond, ir_ewt *x, ir_ewt *y);
/* The global position along dim `dim` (an index value). */
ir_ewt *ir_ewt_index(ir_arena *a, int dim);

/* Union of the labels of the leaves and index values under `t`, in order of first appearance;
 * returns the count (may exceed IR_MAX_RANK: then only the first
 * IR_MAX_RANK are stored in `out`). */
int ir_ewt_labels(const ir_ewt *t, int *out);

/* Emits `t` as elementwise op(s) whose final result has dims `labels`
 * (n <= IR_MAX_RANK, a superset of every leaf's labels) and value loc
 * `vloc`; returns the result value (replicated, no constraint). */
ir_value *ir_ewt_emit(const ir_ewt_out *e, ir_ewt *t, const int *labels, int n, uint32_t vloc);

/* A new replicated value of the statement's tensor over `labels`. */
ir_value *ir_ewt_value(const ir_ewt_out *e, const int *labels, int n, uint32_t vloc);

#endif
