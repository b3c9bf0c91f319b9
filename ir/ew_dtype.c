/*
 * ew_dtype.c - elementwise ops that convert between dtypes (casts).
 *
 * An elementwise op loads each operand in its own dtype, computes in f32
 * (f64 for an f64 result) and stores in its result's dtype, so a cast
 * `f32(Xb[...])` is an elementwise op whose operand's dtype is not its
 * result's (docs/ir.md).  Widening (bf16 -> f32 -> f64) is exact; narrowing
 * rounds (to nearest even), which matters to fusion and to partial sums.
 */
#include <math.h>

#include "ir.h"

/* Rank of a dtype by precision: i8 < bf16 < f32 < f64 (i32 also -1: it is
 * never a result; an i8 result rounds, so it narrows from any float). */
static int precision(ir_dtype t)
{
    return t == IR_F64 ? 2 : t == IR_F32 ? 1 : t == IR_BF16 ? 0 : -1;
}

bool ir_ew_converts(const ir_op *op)
{
    if (op->kind != IR_OP_ELEMENTWISE || !op->result)
        return false;
    for (int k = 0; k < op->noperands; k++) {
        ir_dtype t = op->operands[k] ? op->operands[k]->type.dtype : op->result->type.dtype;
        if (t != IR_I32 && t != op->result->type.dtype)
            return true;
    }
    return false;
}

bool ir_ew_takes_partial_sums(const ir_op *op)
{
    /* i32 values are positions, never partial sums. */
    if (op->kind != IR_OP_ELEMENTWISE || !op->result || op->result->type.dtype == IR_I32 ||
        ir_ew_classify(op->u.ew.nodes, op->u.ew.nnodes, op->u.ew.root) != IR_EW_CLASS_LINEAR)
        return false;
    for (int k = 0; k < op->noperands; k++)
        if (op->operands[k] && precision(op->operands[k]->type.dtype) > precision(op->result->type.dtype))
            return false;
    return true;
}

/* A bound on |value| of the tree below node n of `op` if it is an integer
 * expression of ir_ew_integer's, at most `depth` more levels; else -1. */
static double integer_bound(const ir_module *m, const ir_op *op, int n, int depth)
{
    if (n < 0 || n >= op->u.ew.nnodes || depth <= 0)
        return -1;
    const ir_ew_node *e = &op->u.ew.nodes[n];
    double a = -1, b = -1;
    if (ir_ew_arity(e->kind) >= 1 && (a = integer_bound(m, op, e->a, depth - 1)) < 0)
        return -1;
    if (ir_ew_arity(e->kind) >= 2 && (b = integer_bound(m, op, e->b, depth - 1)) < 0)
        return -1;
    switch (e->kind) {
    case IR_EW_OPERAND:
        return e->operand >= 0 && e->operand < op->noperands && op->operands[e->operand] &&
                       op->operands[e->operand]->type.dtype == IR_I32
                   ? 2147483648.0
                   : -1;
    case IR_EW_INDEX:
        return e->dim >= 0 && e->dim < m->ndims ? (double)m->dims[e->dim].size : -1;
    case IR_EW_CONST:
        return e->value >= -2147483648.0 && e->value <= 2147483648.0 && e->value == floor(e->value)
                   ? fabs(e->value)
                   : -1;
    case IR_EW_ADD:
    case IR_EW_SUB:
        return a + b;
    case IR_EW_MAX:
    case IR_EW_MIN:
        return a > b ? a : b;
    case IR_EW_MUL:
        return a * b;
    case IR_EW_CALL:
        return e->fn == IR_FN_NEG ? a : -1;
    default:
        return -1;
    }
}

bool ir_ew_integer(const ir_module *m, const ir_op *op, int n)
{
    if (!op || op->kind != IR_OP_ELEMENTWISE || !op->u.ew.nodes)
        return false;
    double bound = integer_bound(m, op, n, IR_EW_INTEGER_DEPTH);
    return bound >= 0 && bound <= 9007199254740992.0; /* 2^53: every integer below is a double */
}
