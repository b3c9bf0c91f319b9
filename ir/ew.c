/*
 * ew.c - facts about elementwise expression nodes: arity, spelling, and the
 * linearity class the sharding rules need (one definition for the verifier
 * and propagate); the names of reduction operators.
 */
#include "ir.h"

const char *ir_reduce_name(ir_reduce r)
{
    switch (r) {
    case IR_RED_SUM: return "sum";
    case IR_RED_MAX: return "max";
    case IR_RED_MIN: return "min";
    case IR_RED_ARGMAX: return "argmax";
    }
    return "?";
}

static const struct {
    int arity;
    const char *spelling;
} ew_kinds[] = {
#define X(e, n, s) {n, s},
    IR_EW_KINDS(X)
#undef X
};

int ir_ew_arity(ir_ew_kind k)
{
    return (unsigned)k < IR_EW_KIND_COUNT ? ew_kinds[k].arity : 0;
}

const char *ir_ew_spelling(ir_ew_kind k)
{
    return (unsigned)k < IR_EW_KIND_COUNT ? ew_kinds[k].spelling : "";
}

bool ir_ew_is_compare(ir_ew_kind k)
{
    return k >= IR_EW_LT && k <= IR_EW_NE;
}

/* Trees come from the frontend, which splits nothing by depth; 10000 levels
 * bounds the recursion on a hand-built or corrupted tree. */
#define MAX_DEPTH 10000

static ir_ew_class classify(const ir_ew_node *nodes, int nnodes, int n, int depth)
{
    if (depth > MAX_DEPTH || n < 0 || n >= nnodes)
        return IR_EW_CLASS_OTHER;
    const ir_ew_node *e = &nodes[n];
    ir_ew_class a = IR_EW_CLASS_FREE, b = IR_EW_CLASS_FREE, c = IR_EW_CLASS_FREE;
    int arity = ir_ew_arity(e->kind);
    if (arity >= 1)
        a = classify(nodes, nnodes, e->a, depth + 1);
    if (arity >= 2)
        b = classify(nodes, nnodes, e->b, depth + 1);
    if (arity >= 3)
        c = classify(nodes, nnodes, e->c, depth + 1);
    switch (e->kind) {
    case IR_EW_OPERAND: return IR_EW_CLASS_LINEAR;
    case IR_EW_CONST:
    case IR_EW_INDEX: return IR_EW_CLASS_FREE;
    case IR_EW_ADD:
    case IR_EW_SUB: return a == b ? a : IR_EW_CLASS_OTHER;
    case IR_EW_MUL:
        if (a == IR_EW_CLASS_FREE || b == IR_EW_CLASS_FREE)
            return a > b ? a : b;
        return IR_EW_CLASS_OTHER;
    case IR_EW_DIV: return b == IR_EW_CLASS_FREE ? a : IR_EW_CLASS_OTHER;
    case IR_EW_SELECT:
        /* A mask that reads no operand picks between linear branches
         * element by element, which commutes with the sum over devices. */
        if (a != IR_EW_CLASS_FREE)
            return IR_EW_CLASS_OTHER;
        return b == c ? b : IR_EW_CLASS_OTHER;
    case IR_EW_CALL:
        if (a == IR_EW_CLASS_FREE)
            return a;
        return e->fn == IR_FN_NEG && a == IR_EW_CLASS_LINEAR ? a : IR_EW_CLASS_OTHER;
    case IR_EW_MAX:
    case IR_EW_MIN:
    case IR_EW_LT:
    case IR_EW_LE:
    case IR_EW_GT:
    case IR_EW_GE:
    case IR_EW_EQ:
    case IR_EW_NE:
        return a == IR_EW_CLASS_FREE && b == IR_EW_CLASS_FREE ? IR_EW_CLASS_FREE
                                                              : IR_EW_CLASS_OTHER;
    case IR_EW_KIND_COUNT: break;
    }
    return IR_EW_CLASS_OTHER;
}

ir_ew_class ir_ew_classify(const ir_ew_node *nodes, int nnodes, int n)
{
    return nodes ? classify(nodes, nnodes, n, 0) : IR_EW_CLASS_OTHER;
}
