/*
 * ir_ew.h - the vocabulary of elementwise expressions: functions, node
 * kinds, nodes, and their classification for the sharding rules.
 *
 * An Elementwise op (ir.h, ir_op.u.ew) holds a tree of these nodes.  They
 * depend on nothing else in the IR, and the frontend, the printers, the
 * cost model and codegen all walk them, so they have a header of their own
 * (included by ir.h; it may also be included alone).
 */
#ifndef EINC_IR_EW_H
#define EINC_IR_EW_H

#include <stdbool.h>
#include <stddef.h>

/* Unary functions usable in elementwise expressions: enum suffix, name.
 * New entries go at the end: calibrated profiles index fn_time by position
 * and name. */
#define IR_FUNCS(X) \
    X(EXP, "exp")         \
    X(LOG, "log")         \
    X(TANH, "tanh")       \
    X(RELU, "relu")       \
    X(GELU, "gelu")       \
    X(SILU, "silu")       \
    X(SIGMOID, "sigmoid") \
    X(SQRT, "sqrt")       \
    X(RSQRT, "rsqrt")     \
    X(NEG, "neg")         \
    X(ABS, "abs")         \
    X(SIN, "sin")         \
    X(COS, "cos")

typedef enum ir_func {
#define X(e, s) IR_FN_##e,
    IR_FUNCS(X)
#undef X
    IR_FN_COUNT
} ir_func;

/* Name of `f` as written in the source; ir_func_lookup returns -1 if none. */
const char *ir_func_name(ir_func f);
int ir_func_lookup(const char *name, size_t len);

/*
 * Kinds of node in an elementwise expression: X(ENUM, arity, "spelling").
 * Arity is the number of children (a, b, c in that order).  Comparisons
 * yield a truth value and may only be the condition (child a) of a SELECT;
 * every other node yields a number.  The spelling is the infix operator or
 * the function name used by the printers ("" for leaves and CALL).
 */
#define IR_EW_KINDS(X)          \
    X(OPERAND, 0, "")           \
    X(CONST, 0, "")             \
    X(INDEX, 0, "")             \
    X(ADD, 2, "+")              \
    X(SUB, 2, "-")              \
    X(MUL, 2, "*")              \
    X(DIV, 2, "/")              \
    X(MAX, 2, "maximum")        \
    X(MIN, 2, "minimum")        \
    X(LT, 2, "<")               \
    X(LE, 2, "<=")              \
    X(GT, 2, ">")               \
    X(GE, 2, ">=")              \
    X(EQ, 2, "==")              \
    X(NE, 2, "!=")              \
    X(SELECT, 3, "where")       \
    X(CALL, 1, "")

/* IR_EW_OPERAND: operand `operand` of the op, broadcast to the result dims;
 * IR_EW_CONST: the scalar `value` (may be +-inf);
 * IR_EW_INDEX: the GLOBAL 0-based position of the element along dim `dim`
 *   (a label of the result), so on a sharded dim the device's block offset
 *   is included and a causal mask is the same on every shard;
 * ADD..MIN: a op b (MAX/MIN propagate NaN, as numpy.maximum/minimum);
 * LT..NE: the comparison a op b (false when either side is NaN, except NE);
 * SELECT: a ? b : c;  CALL: fn(a). */
typedef enum ir_ew_kind {
#define X(e, n, s) IR_EW_##e,
    IR_EW_KINDS(X)
#undef X
    IR_EW_KIND_COUNT
} ir_ew_kind;

/* Number of children of a node of kind `k` (0 for unknown kinds). */
int ir_ew_arity(ir_ew_kind k);
/* Spelling of `k` (see IR_EW_KINDS); "" for unknown kinds. */
const char *ir_ew_spelling(ir_ew_kind k);
/* True for LT, LE, GT, GE, EQ, NE: nodes that yield a truth value. */
bool ir_ew_is_compare(ir_ew_kind k);

/* One node of an elementwise expression; children are node indices. */
typedef struct ir_ew_node {
    ir_ew_kind kind;
    int a, b, c;   /* child node indices, the first ir_ew_arity(kind) used */
    int operand;   /* IR_EW_OPERAND: index into the op's operands */
    double value;  /* IR_EW_CONST */
    ir_func fn;    /* IR_EW_CALL */
    int dim;       /* IR_EW_INDEX: dim id (ir_module.dims), a result label */
} ir_ew_node;

/* What the expression below node `n` of `nodes` (nnodes entries) is, for
 * the sharding rules: IR_EW_CLASS_FREE if it reads no operand (constants
 * and index values only), IR_EW_CLASS_LINEAR if it is a linear combination
 * of operands with operand-free coefficients and no operand-free term,
 * else IR_EW_CLASS_OTHER (also for a malformed or too deep tree).  Only a
 * linear expression may consume unreduced partial sums, because
 * sum_k f(x_k) = f(sum_k x_k) holds for linear f only (seed 001, the
 * unreduced notation).  Used by the verifier and by propagate. */
typedef enum ir_ew_class {
    IR_EW_CLASS_FREE,
    IR_EW_CLASS_LINEAR,
    IR_EW_CLASS_OTHER,
} ir_ew_class;
ir_ew_class ir_ew_classify(const ir_ew_node *nodes, int nnodes, int n);

#endif
