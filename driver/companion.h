/*
 * companion.h - a companion program (a speculative-decoding draft) linked
 * into the main program's executable (companion.c).
 */
#ifndef EINC_DRV_COMPANION_H
#define EINC_DRV_COMPANION_H

#include <stddef.h>

#include "codegen.h"
#include "ir.h"

/* The draft's rt_program symbol; runtime/main.c refers to it weakly. */
#define DRV_DRAFT_SYMBOL "einc_program_draft"

/* Checks the compiled draft `draft` against the compiled target: one
 * floating-point logits output each (draft [B, V] or [B, 1, V]; target
 * [B, W, V]) with the same B and V, and a draft mesh equal to the
 * target's or of one device.  0, or -1 after an error reported through
 * `dd` (the draft's diagnostics) at the draft's line; `target_name` is
 * the target's file, for the message. */
int drv_companion_check(const ir_module *draft, const ir_module *target, diag_ctx *dd,
                        const char *target_name);

/* Emits `draft` (with its one-device `reference` for --check) as an object
 * whose program is DRV_DRAFT_SYMBOL, options as `base` otherwise, to a new
 * temporary file whose path goes to obj[objlen] (next to base->output, or
 * in /tmp).  0 (the caller links, then unlinks obj), or -1 after
 * reporting through `dd` (no file left). */
int drv_companion_emit(ir_module *draft, ir_module *reference, const cg_options *base,
                       diag_ctx *dd, char *obj, size_t objlen);

#endif
