/*
 * ir_verify.h - the verifier (verify.c) and the one einsum sharding rule
 * it shares with the planner (einsum_rule.c).
 *
 * Every pass ends with ir_verify (the pass manager calls it), and the
 * planner must produce exactly what the verifier accepts, so both read the
 * rule of seed 001 from one definition declared here.  Part of ir.h, which
 * includes it after the types it needs: include ir.h.
 */
#ifndef EINC_IR_VERIFY_H
#define EINC_IR_VERIFY_H

#ifndef EINC_IR_H
#error "ir_verify.h is part of ir.h: include ir.h"
#endif

/* Checks every structural and sharding invariant; reports each violation
 * through `d` (at the op's location) and returns the number found.  An op
 * whose operands' shardings do not make it locally computable is an error. */
int ir_verify(const ir_module *m, diag_ctx *d);
/* The same checks but those of shardings (ops locally computable, results
 * as their operands give them, constraints met, outputs replicated or as
 * constrained): the invariants of IR that is not planned yet, the
 * frontend's and the autodiff pass's, which propagate then plans.  Returns
 * the number of violations reported. */
int ir_verify_unplanned(const ir_module *m, diag_ctx *d);

/* Whether einsum/elementwise `op` can be computed locally with its operands'
 * current shardings, and if so the result sharding it produces.  On failure
 * writes a reason into `why` (if non-NULL) and returns false. */
bool ir_op_local_sharding(const ir_module *m, const ir_op *op, ir_sharding *out,
                          char *why, size_t why_size);

/* Position of dim id `label` among labels[0..rank-1] (an operand's or a
 * result's labels), the first if it repeats, or -1 (einsum_rule.c). */
int ir_label_pos(const int *labels, int rank, int label);
/* Seed 001's einsum sharding rule ("Matmul with sharded operands"), the
 * one definition the verifier and the planner (propagate) use.  The op's
 * distinct labels are numbered 0..nlabels-1; label l is sharded over the
 * lnaxes[l] mesh axes laxes[l] (major to minor) in every operand that has
 * it (in_operand[l]); result position r has label rlabel[r] (outside
 * 0..nlabels-1: a dim computed whole on every device); `unreduced` is the
 * union of the operands' unreduced axes.  Writes the result's sharding to
 * *out: each result dim keeps its label's axes; the axes of a label that
 * is in an operand but not in the result (contracted) become unreduced,
 * holding partial results of `reduce`; operands' unreduced axes stay
 * unreduced.  Returns the contracted axes.  It does not check that the
 * layout is computable (an axis sharding two labels, partial maxima, an
 * argmax over a sharded dim): callers do (ir_op_local_sharding). */
ir_axes ir_einsum_sharding(int nlabels, const int *lnaxes, const int8_t (*laxes)[IR_MAX_AXES],
                           const bool *in_operand, int rank, const int *rlabel, ir_axes unreduced,
                           ir_reduce reduce, ir_sharding *out);

#endif
