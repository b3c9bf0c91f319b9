/*
 * ew_dtype.c - elementwise ops that convert between dtypes (casts).
 *
 * An elementwise op loads each operand in its own dtype, computes in f32
 * (f64 for an f64 result) and stores in its result's dtype, so a cast
 * `f32(Xb[...])` is an elementwise op whose operand's dtype is not its
 * result's (docs/ir.md).  Widening (bf16 -> f32 -> f64) is exact; narrowing
 * rounds (to nearest even), which matters to fusion and to partial sums.
 */
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
    if (op->kind != IR_OP_ELEMENTWISE || !op->result ||
        ir_ew_classify(op->u.ew.nodes, op->u.ew.nnodes, op->u.ew.root) != IR_EW_CLASS_LINEAR)
        return false;
    for (int k = 0; k < op->noperands; k++)
        if (op->operands[k] && precision(op->operands[k]->type.dtype) > precision(op->result->type.dtype))
            return false;
    return true;
}
