/*
 * companion.h - a companion program (a speculative-decoding draft, or a
 * chunked-prefill program for --serve) linked into the main program's
 * executable (companion.c).
 */
#ifndef EINC_DRV_COMPANION_H
#define EINC_DRV_COMPANION_H

#include <stddef.h>

#include "codegen.h"
#include "ir.h"

/* The draft's and the prefill's rt_program symbols; runtime/main.c
 * refers to them weakly. */
#define DRV_DRAFT_SYMBOL "einc_program_draft"
#define DRV_PREFILL_SYMBOL "einc_program_prefill"

/* Checks the compiled draft `draft` against the compiled target: one
 * floating-point logits output each (draft [B, V] or [B, 1, V]; target
 * [B, W, V]) with the same B and V, and a draft mesh equal to the
 * target's or of one device.  0, or -1 after an error reported through
 * `dd` (the draft's diagnostics) at the draft's line; `target_name` is
 * the target's file, for the message. */
int drv_companion_check(const ir_module *draft, const ir_module *target, diag_ctx *dd,
                        const char *target_name);

/* Checks the compiled prefill program `pf` against the compiled decode
 * program `main`: logits [B, W, V] with main's B and V; the same mesh;
 * main writing a state at one position per row (continuous batching);
 * inputs only the window's tokens (i32 [B, W]) and the rows' positions
 * (i32 [B]); every param and state a param or state of main of the same
 * name, sizes, dtype and sharding (the runtime shares their blocks), and
 * every state of main one of pf.  0, or -1 after an error reported
 * through `dd` (pf's diagnostics) at pf's line; `main_name` is main's
 * file, for the message. */
int drv_prefill_check(const ir_module *pf, const ir_module *main, diag_ctx *dd,
                      const char *main_name);

/* Emits `draft` (with its one-device `reference` for --check) as an object
 * whose program is `symbol` (DRV_DRAFT_SYMBOL or DRV_PREFILL_SYMBOL),
 * options as `base` otherwise, to a new
 * temporary file whose path goes to obj[objlen] (next to base->output, or
 * in /tmp).  0 (the caller links, then unlinks obj), or -1 after
 * reporting through `dd` (no file left). */
int drv_companion_emit(ir_module *draft, ir_module *reference, const cg_options *base,
                       const char *symbol, diag_ctx *dd, char *obj, size_t objlen);

#endif
