/*
 * ewtree.h - elementwise expression trees under construction (lowering).
 *
 * lower_expr.c builds one tree per elementwise op from the AST, with a leaf
 * per tensor operand; fe_ew_emit turns it into an IR_OP_ELEMENTWISE.  An IR op
 * has at most IR_MAX_OPERANDS operands, so a tree with more leaves is split:
 * subtrees become their own elementwise ops (over the union of their leaves'
 * indices), which is exact because nothing is summed inside an elementwise
 * expression.
 */
#ifndef EINC_FE_EWTREE_H
#define EINC_FE_EWTREE_H

#include "fe_internal.h"

/* A tree node; kinds as in ir_ew_node. */
typedef struct fe_ew {
    ir_ew_kind kind;            /* IR_EW_OPERAND is a leaf */
    struct fe_ew *kid[3];       /* children, the first ir_ew_arity(kind) used */
    ir_value *v;                /* leaf: the operand value */
    int nlabels;                /* leaf: its rank; IR_EW_INDEX: 1 */
    int labels[IR_MAX_RANK];    /* leaf: dim id indexing each position; IR_EW_INDEX: its dim */
    double value;               /* IR_EW_CONST */
    ir_func fn;                 /* IR_EW_CALL */
    int nleaves;                /* operand leaves in this subtree */
} fe_ew;

/* Where emitted ops go and what they are called. */
typedef struct fe_emit {
    ir_module *m;        /* the module (ops appended at its end) */
    ir_arena *arena;     /* frontend arena for trees */
    const char *tensor;  /* tensor name of the results (the statement's left side) */
    ir_dtype dtype;      /* their dtype */
    uint32_t loc;        /* op loc: the statement's offset */
} fe_emit;

fe_ew *fe_ew_leaf(ir_arena *a, ir_value *v, const int *labels, int n);
fe_ew *fe_ew_const(ir_arena *a, double value);
fe_ew *fe_ew_bin(ir_arena *a, ir_ew_kind kind, fe_ew *x, fe_ew *y);
fe_ew *fe_ew_call(ir_arena *a, ir_func fn, fe_ew *x);
/* where(cond, x, y): `cond` must be a comparison node (fe_ew_bin with
 * IR_EW_LT..IR_EW_NE). */
fe_ew *fe_ew_select(ir_arena *a, fe_ew *cond, fe_ew *x, fe_ew *y);
/* The global position along dim `dim` (an index value). */
fe_ew *fe_ew_index(ir_arena *a, int dim);

/* Union of the labels of the leaves and index values under `t`, in order of first appearance;
 * returns the count (may exceed IR_MAX_RANK: then only the first
 * IR_MAX_RANK are stored in `out`). */
int fe_ew_labels(const fe_ew *t, int *out);

/* Emits `t` as elementwise op(s) whose final result has dims `labels`
 * (n <= IR_MAX_RANK, a superset of every leaf's labels) and value loc
 * `vloc`; returns the result value (replicated, no constraint). */
ir_value *fe_ew_emit(const fe_emit *e, fe_ew *t, const int *labels, int n, uint32_t vloc);

/* A new replicated value of the statement's tensor over `labels`. */
ir_value *fe_value_new(const fe_emit *e, const int *labels, int n, uint32_t vloc);

#endif
