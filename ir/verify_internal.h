/*
 * verify_internal.h - what verify.c shares with verify_loop.c and
 * verify_update.c.
 */
#ifndef EINC_IR_VERIFY_INTERNAL_H
#define EINC_IR_VERIFY_INTERNAL_H

#include "ir.h"

/* The result sharding LoopBegin, LoopEnd or LayerSlice `op` must have given
 * its operand (docs/ir.md, "Repeated blocks"), into *out; false with a
 * reason in `why` when the op is malformed. */
bool ir_verify_loop_result(const ir_module *m, const ir_op *op, ir_sharding *out, char *why,
                           size_t why_size);
/* Checks the structure and scoping of repeated blocks; reports each
 * violation through `d` and returns how many there were. */
int ir_verify_loops(const ir_module *m, diag_ctx *d);

/* The result sharding UpdateSlice `op` must have (its storage's), into
 * *out; false with a reason in `why` when the op is malformed. */
bool ir_verify_update_result(const ir_module *m, const ir_op *op, ir_sharding *out, char *why,
                             size_t why_size);
/* Checks that no op reads a value an UpdateSlice wrote over; reports each
 * violation through `d` and returns how many there were. */
int ir_verify_updates(const ir_module *m, diag_ctx *d);

#endif
