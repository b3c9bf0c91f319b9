/*
 * ir_ew_dtype.h - the dtypes of elementwise ops (ew_dtype.c): casts, the
 * partial sums they may take, and the integer expressions that give an
 * i32 result.  Part of ir.h, which includes it after the types it needs:
 * include ir.h.
 */
#ifndef EINC_IR_EW_DTYPE_H
#define EINC_IR_EW_DTYPE_H

#ifndef EINC_IR_H
#error "ir_ew_dtype.h is part of ir.h: include ir.h"
#endif

/* Whether `op` converts: an elementwise op with a floating-point operand
 * of another dtype than its result (a cast, docs/ir.md).  Its value is
 * rounded to its result dtype even where it is fused (fusion.c). */
bool ir_ew_converts(const ir_op *op);
/* Whether elementwise `op` may take unreduced partial sums {U_X}: its
 * expression is linear (ir_ew_classify) and it narrows no operand (reads
 * none of a wider dtype than its result).  A narrowing cast rounds, so
 * casting each partial sum and then summing is not the cast of the sum:
 * the sum is finished in the wider dtype first.  Used by the verifier and
 * propagate. */
bool ir_ew_takes_partial_sums(const ir_op *op);
/* Whether the tree below node `n` of elementwise `op` (of module `m`) is
 * an integer expression: i32 operands, index values and integer constants
 * (|c| <= 2^31) under +, -, *, neg, maximum and minimum, at most
 * IR_EW_INTEGER_DEPTH deep, whose magnitude is bounded by 2^53 (each
 * operand by 2^31, an index by its dim's size): so computed in f64 every
 * intermediate value is exact.  An elementwise op gives an i32 result only from
 * such a root (the positions the select-gather pass computes,
 * passes/select_gather.c); codegen computes it in f64 and stores it
 * clamped to i32's range (docs/ir.md, "Casts and dtypes"). */
#define IR_EW_INTEGER_DEPTH 16
bool ir_ew_integer(const ir_module *m, const ir_op *op, int n);

#endif
