/*
 * pipeline_choose.h - the cost model's choice of a pipelined training
 * step's schedule, M and chunks (pipeline_choose.c; docs/pipeline.md,
 * "Choosing the schedule and M").  Internal to the passes: the pipeline
 * pass calls it.
 */
#ifndef EINC_PASSES_PIPELINE_CHOOSE_H
#define EINC_PASSES_PIPELINE_CHOOSE_H

#include <stdint.h>

#include "costmodel.h"
#include "pass.h"

/* What pass_pipeline_choose chose. */
typedef struct pipe_choice {
    int schedule;     /* a pp_schedule */
    int microbatches; /* M; 0 when nothing priced */
    int chunks;       /* v: 1, or >= 2 for interleaved */
} pipe_choice;

/* The hardware profile the cost model prices with: --hw's, else the
 * default one loaded into *local; NULL if that does not load. */
const cost_hw *pass_pipeline_pricing_hw(const pass_ctx *ctx, cost_hw *local);

/* A value of m in which a microbatch of |B| / M (batch = |B|, the whole
 * batch) does not split over the devices that split B, and in *parts
 * their count; NULL if every value splits. */
const ir_value *pass_pipeline_unsplit(const ir_module *m, int B, int64_t batch, int M, int64_t *parts);

/* The fastest (schedule, M, v) of a training step that fits the profile's
 * HBM per device (hw->hbm_bytes; none is dropped when it is 0):
 *
 *  - schedules: `scheds` (n of them, in order of preference on a tie),
 *    each with v = 1, except PP_INTERLEAVED with every v from 2 to 64
 *    that divides |L| / Z (only `fixed_v` when it is not 0);
 *  - M: every M up to 64 that divides |B| and splits as B does (for
 *    interleaved a multiple of Z), or only `fixed` when it is not 0;
 *  - each priced as the schedule runs it, by the cost pass's per-op times
 *    at that microbatch (cost_pipe_totals): the step, and the peak bytes
 *    of the fullest stage (pipe_price: params, gradients, optimizer state,
 *    the activations the schedule holds), with every stacked gradient's
 *    collective deferred to once per step, or under m->pipe.grad_sync
 *    AUTO when that stage exceeds the HBM, with the fewest FSDP gradients
 *    of pass_pipeline_grad_fallback's order kept per microbatch that
 *    fit (all when none does);
 *  - the fastest that fits, the first priced on a tie (schedules in
 *    the order given, then fewer chunks, then fewer microbatches).  When the fastest does not fit, a note says which pairs were
 *    dropped; when none fits, the one with the smallest peak, and a
 *    warning naming the smallest change that would make room (the nearest
 *    pair that fits when `fixed` or a single schedule limited the choice,
 *    priced; else more stages or --remat=layer).  Either way
 *    m->pipe.choice records it for --dump-cost, and m->pipe.grad_mb
 *    (ngrad_mb) the gradients the pick keeps per microbatch (names,
 *    arena-owned), which the pipeline pass leaves in the backward loop.
 *
 * Zero-bubble is priced on the backward before the split, with the
 * split's stacks added (pipe_work.h, cross_layer).  m's dims and
 * m->pipe are left as found (but for `choice`, `grad_mb` and `ngrad_mb`); out->microbatches is 0
 * when nothing could be priced (no profile, no M that splits). */
void pass_pipeline_choose(pass_ctx *ctx, ir_module *m, int B, int64_t batch, const int *scheds, int n, int fixed,
                          int fixed_v, pipe_choice *out);

/* A training step whose schedule and M were both given (`schedule`, `M`
 * and for interleaved `v` chunks): priced as pass_pipeline_choose prices a
 * candidate, on the module before zero-bubble's split.  When the fullest
 * stage's peak exceeds the profile's HBM per device, a warning (not an
 * error: the user asked) names the peak, the HBM and the smallest change
 * that would make room: --schedule=1f1b at the same M or more microbatches
 * of the same schedule when one of those fits (priced the same way), else
 * the choice's fallback advice (more stages, --remat=layer).  Either way m->pipe.choice
 * gets a "given: ..." line for --dump-cost.  Priced and kept as a
 * candidate of the choice is: FSDP gradients kept per microbatch when
 * that alone makes the stage fit (m->pipe.grad_mb).  Nothing when there is no
 * profile or the pair does not price.  m's dims and m->pipe are left as
 * found (but for `choice`, `grad_mb` and `ngrad_mb`). */
void pass_pipeline_check_forced(pass_ctx *ctx, ir_module *m, int B, int64_t batch, int schedule, int M, int v);

/* What --schedule=zero-bubble (PP_ZB_AUTO) compiles: PP_ZB_H2 when its
 * fullest stage fits the profile's HBM per device, else PP_ZB_H1 (whose
 * memory is 1F1B's), as Qi et al.'s automatic scheduler takes a memory
 * limit (ICLR 2024, section 3; docs/pipeline.md, "zero-bubble: ZB-H2 when
 * it fits, ZB-H1 when not").  zb-h2 is priced as pass_pipeline_choose
 * prices it (stage peak with FSDP gradients kept per microbatch under
 * --grad-sync=auto when that makes room), at M = `fixed` when it is not 0,
 * else at every M the choice would try, fitting when any M fits (the
 * choice then takes the fastest of those).  A line saying which and why
 * ("schedule zero-bubble -> zb-h2 (fits: X GiB of Y's Z GiB per stage at
 * M = 8)") goes into note (n bytes).  No profile, or nothing priced: zb-h1.
 * m is left as found.  For a training step whose backward splits
 * (pass_pipeline_split_applies); the caller handles the rest. */
int pass_pipeline_resolve_zb(pass_ctx *ctx, ir_module *m, int B, int64_t batch, int fixed, char *note, size_t n);

#endif
