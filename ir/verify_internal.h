/*
 * verify_internal.h - what verify.c shares with verify_loop.c and
 * verify_update.c.
 */
#ifndef EINC_IR_VERIFY_INTERNAL_H
#define EINC_IR_VERIFY_INTERNAL_H

#include "ir.h"

/* The verifier hooks of ir_op_traits (one per union arm of IR_OPS): the
 * result sharding `op` must have given its operands', into *out; false with
 * a reason in `why` when the op is malformed or not locally computable.
 *   ir_verify_einsum, ir_verify_ew: the einsum rule (ir_op_local_sharding);
 *   ir_verify_coll: the collective's transformation (ir.h, ir_coll);
 *   ir_verify_ms: MeshSlice's moves around the einsum rule (verify.c);
 *   ir_verify_loop: LoopBegin, LoopEnd, LayerSlice, LayerStack (docs/ir.md,
 *     "Repeated blocks"; verify_loop.c);
 *   ir_verify_update: UpdateSlice, its storage's sharding (verify_update.c);
 *   ir_verify_grad: Grad, before the autodiff pass (verify_update.c);
 *   ir_verify_perm: CollectivePermute, its axis, shift and operand (permute.c). */
#define X(e, s, arm, lo, hi, tr)                                                             \
    bool ir_verify_##arm(const ir_module *m, const ir_op *op, ir_sharding *out, char *why, \
                         size_t why_size);
IR_OPS(X)
#undef X

/* Checks the structure and scoping of repeated blocks; reports each
 * violation through `d` and returns how many there were. */
int ir_verify_loops(const ir_module *m, diag_ctx *d);

/* Checks that no op reads a value an UpdateSlice wrote over; reports each
 * violation through `d` and returns how many there were. */
int ir_verify_updates(const ir_module *m, diag_ctx *d);

/* Checks every value's use-list against the operands of the ops in the
 * list (verify_uses.c); reports each stale list through `d` and returns
 * how many errors there were. */
int ir_verify_uses(const ir_module *m, diag_ctx *d);

#endif
