/*
 * op_traits.c - the ir layer's table of op kinds, generated from IR_OPS.
 *
 * One row per op kind: its name, operand counts and trait bits, and the
 * verifier, printer and JSON hooks named after its union arm.  A kind with
 * an arm whose hooks are not written fails to link (MLIR's op interfaces,
 * in the X-macro style of cproc's ops.h).
 */
#include "ir.h"
#include "print_internal.h"
#include "verify_internal.h"

static const ir_op_traits op_traits[IR_OP_COUNT] = {
#define X(e, s, arm, lo, hi, tr) \
    [IR_OP_##e] = {s, lo, hi, tr, ir_verify_##arm, ir_print_##arm, ir_json_##arm},
    IR_OPS(X)
#undef X
};

const ir_op_traits *ir_op_traits_of(ir_op_kind k)
{
    return (unsigned)k < IR_OP_COUNT ? &op_traits[k] : NULL;
}

bool ir_op_has_trait(ir_op_kind k, unsigned trait)
{
    const ir_op_traits *t = ir_op_traits_of(k);
    return t && (t->traits & trait) == trait;
}

const char *ir_op_name(ir_op_kind k)
{
    const ir_op_traits *t = ir_op_traits_of(k);
    return t ? t->name : "?";
}

bool ir_op_is_reshard(ir_op_kind k)
{
    return ir_op_has_trait(k, IR_TRAIT_RESHARD);
}

bool ir_op_is_linear_reshard(const ir_op *op)
{
    if (!ir_op_is_reshard(op->kind))
        return false;
    return (op->kind != IR_OP_ALLREDUCE && op->kind != IR_OP_REDUCESCATTER) ||
           op->u.coll.reduce == IR_RED_SUM;
}

bool ir_op_is_loop(ir_op_kind k)
{
    return ir_op_has_trait(k, IR_TRAIT_LOOP);
}
