/*
 * pipeline_choose.c - the cost model's choice of a pipelined training
 * step's schedule, M and chunks (pipeline_choose.h; docs/pipeline.md,
 * "Choosing the schedule and M").
 *
 * Each candidate is the module priced as it would run: the batch dim
 * shrunk to one microbatch, the ops costed (cost_annotate_ops) and the
 * schedule simulated over the stages (cost_pipe_totals, pipe_price).  Seed
 * 000 / Narayanan et al. (SC'21): more microbatches shrink the bubble
 * (Z - 1) / (v M + Z - 1) until a microbatch's ops turn memory- or
 * latency-bound; interleaving v chunks per stage shrinks it further for
 * v times the stage-to-stage transfers; zero-bubble's W items fill it (Qi
 * et al., ICLR'24).  What they cost in memory differs (seed 000: GPipe
 * holds M microbatches' activations, 1F1B at most Z; zero-bubble holds
 * each until its W, with the values W reads from B; interleaved counts
 * (microbatch, chunk) pairs), so a candidate whose fullest stage exceeds
 * the device's HBM is dropped before the fastest is taken.
 *
 * Each candidate first defers every stacked gradient's collective to once
 * per step (pipeline_grad.c); when its stage then exceeds the HBM, the
 * FSDP gradients, whose deferred sums are |X| times their reduced block,
 * fall back to a ReduceScatter per microbatch one at a time, the most
 * bytes saved per second lost first (pass_pipeline_grad_fallback), until
 * it fits: greedy rather than all-or-nothing, since every gradient kept
 * per microbatch costs M - 1 more collectives per layer and step, and the
 * first ones often make room alone.  The candidate is priced with the
 * gradients it keeps per microbatch, so the memory check and the step are
 * the variant compiled (docs/pipeline.md, "Gradient collectives once per
 * step").
 */
#include "pipeline_choose.h"

#include <stdio.h>
#include <string.h>

#include "cost.h"
#include "pipe_work.h"
#include "pipeline.h"
#include "pipeline_grad.h"

#define MAX_MICROBATCHES 64
#define MAX_CHUNKS 64

static const double GIB = 1073741824.0;

/* One priced candidate. */
typedef struct cand {
    int schedule, mb, v;
    double step, memory; /* seconds; bytes of the fullest stage */
    int nmb;             /* the first nmb gradients of the fallback order kept per microbatch */
    double deferred;     /* bytes of the fullest stage with every one deferred (nmb = 0) */
} cand;

/* The gradients that may fall back per microbatch, in order
 * (pass_pipeline_grad_fallback), found when first needed. */
typedef struct fallback {
    bool found;
    int n;
    const char *names[PIPE_GRAD_FALLBACK_MAX];
} fallback;

const cost_hw *pass_pipeline_pricing_hw(const pass_ctx *ctx, cost_hw *local)
{
    char err[512];
    if (ctx->hw)
        return ctx->hw;
    return cost_hw_load(COST_DEFAULT_HW, local, err, sizeof err) < 0 ? NULL : local;
}

const ir_value *pass_pipeline_unsplit(const ir_module *m, int B, int64_t batch, int M, int64_t *parts)
{
    for (int i = 0; i < m->nvalues; i++) {
        const ir_type *t = &m->values[i]->type;
        for (int d = 0; d < t->rank; d++) {
            *parts = ir_sharding_dim_parts(&t->sh, &m->mesh, d);
            if (t->dims[d] == B && (batch / M) % *parts != 0)
                return m->values[i];
        }
    }
    return NULL;
}

/* "1f1b, M = 8" or "interleaved (v = 2), M = 8" into buf. */
static const char *cand_name(const cand *c, char *buf, size_t n)
{
    if (c->schedule == PP_INTERLEAVED)
        snprintf(buf, n, "interleaved (v = %d), M = %d", c->v, c->mb);
    else
        snprintf(buf, n, "%s, M = %d", pp_schedule_name((pp_schedule)c->schedule), c->mb);
    return buf;
}

/* m's step and stage memory with the first nmb gradients of fb kept per
 * microbatch, into c; false when it does not price. */
static bool totals(ir_module *m, const cost_hw *hw, const fallback *fb, int nmb, cand *c)
{
    char err[512];
    m->pipe.grad_mb = nmb ? fb->names : NULL;
    m->pipe.ngrad_mb = nmb;
    if (cost_pipe_totals(m, hw, false, err, sizeof err) != 0 || !m->totals.pipe.valid)
        return false;
    c->step = m->totals.pipe.step;
    c->memory = m->totals.pipe.stage_memory;
    c->nmb = nmb;
    return true;
}

/* m priced at M microbatches under schedule s with v chunks into *c: with
 * every stacked gradient deferred, or (--grad-sync not given) when that
 * stage exceeds the HBM, with the fewest gradients of the fallback order
 * kept per microbatch that fit, all of them when none does (the smallest
 * peak); false when it does not price.  m->pipe's grad_mb is left
 * pointing into fb: restore() puts it back. */
static bool price(ir_module *m, const cost_hw *hw, fallback *fb, int B, int64_t batch, int s, int M, int v, cand *c)
{
    m->dims[B].size = batch / M;
    m->pipe.microbatches = M;
    m->pipe.schedule = s;
    m->pipe.chunks = v;
    cost_annotate_ops(m, hw);
    *c = (cand){.schedule = s, .mb = M, .v = v};
    if (!totals(m, hw, fb, 0, c))
        return false;
    c->deferred = c->memory;
    if (m->pipe.grad_sync != IR_GRAD_SYNC_AUTO || hw->hbm_bytes <= 0 || c->memory <= hw->hbm_bytes)
        return true;
    if (!fb->found) {
        fb->n = pass_pipeline_grad_fallback(m, m->pipe.dim, fb->names, PIPE_GRAD_FALLBACK_MAX);
        fb->found = true;
    }
    cand k = *c;
    for (int n = 1; n <= fb->n; n++)
        if (totals(m, hw, fb, n, &k) && (*c = k, k.memory <= hw->hbm_bytes))
            break;
    return true;
}

/* What the choice of c keeps per microbatch into m->pipe (arena copies
 * of fb's first c->nmb names), and a clause saying so into buf (n bytes;
 * empty when nothing falls back). */
static const char *keep_choice(ir_module *m, const fallback *fb, const cand *c, char *buf, size_t n)
{
    m->pipe.ngrad_mb = c->nmb;
    m->pipe.grad_mb = NULL;
    buf[0] = 0;
    if (!c->nmb)
        return buf;
    const char **copy = ir_alloc(&m->arena, (size_t)c->nmb * sizeof *copy);
    memcpy(copy, fb->names, (size_t)c->nmb * sizeof *copy);
    m->pipe.grad_mb = copy;
    size_t used = (size_t)snprintf(buf, n, "; its stage with every stacked gradient reduced once per step would "
                                   "need %.4g GiB, so %d of them reduced per microbatch:", c->deferred / GIB, c->nmb);
    /* Whole names only: what does not fit is counted, not cut (the
     * names are the user's, up to 128 bytes each). */
    const size_t more = sizeof " and 64 more";
    for (int i = 0; i < c->nmb && used < n; i++) {
        size_t len = strlen(fb->names[i]) + 4;
        if (used + len + more >= n) {
            snprintf(buf + used, n - used, " and %d more", c->nmb - i);
            break;
        }
        used += (size_t)snprintf(buf + used, n - used, "%s '%s'", i ? "," : "", fb->names[i]);
    }
    return buf;
}

/* Bytes of the fullest stage that do not depend on the schedule: its
 * share of the stacked params, their gradients and optimizer state, and
 * the others (pipe_price's stage_memory without the activations); -1 when
 * they cannot be read. */
static double fixed_bytes(const ir_module *m, int Z)
{
    pipe_work w;
    char err[256];
    if (pipe_work_of(m, false, &w, err, sizeof err) != 0)
        return -1;
    return (w.state_stacked + w.param_stacked) / Z + w.state_other + w.param_other;
}

/* Puts m back as it was before pricing: price() rewrites the batch dim,
 * the pipeline record and the pipeline totals. */
static void restore(ir_module *m, int B, int64_t batch, const ir_pipeline *saved)
{
    m->dims[B].size = batch;
    m->pipe = *saved;
    memset(&m->totals.pipe, 0, sizeof m->totals.pipe);
}

/* Fallback advice for a stage peak over the HBM when no nearby pair fits
 * (nearest_fit), into change (n bytes): more stages or another axis to
 * shard the params over when the params, gradients and state alone exceed
 * it; else --remat=layer, or a smaller batch when that is on. */
static void change_advice(const ir_module *m, const cost_hw *hw, char *change, size_t n)
{
    int Z = (int)m->mesh.axes[m->pipe.axis].size;
    double fixed = fixed_bytes(m, Z);
    if (fixed > hw->hbm_bytes)
        snprintf(change, n, "a stage's params, their gradients and optimizer state alone take %.4g "
                 "GiB: pipeline over more stages (a larger %c) or shard them over another mesh axis (FSDP)",
                 fixed / GIB, m->mesh.axes[m->pipe.axis].name);
    else if (m->remat != IR_REMAT_LAYER)
        snprintf(change, n, "the activations the schedule holds are the rest: keep only each "
                 "layer's input and recompute the layer in the backward pass (--remat=layer)");
    else
        snprintf(change, n, "the activations the schedule holds are the rest, each layer's input "
                 "already the only one kept: a smaller batch or more stages");
}

/* Whether M microbatches apply to schedule s (M divides the batch, splits
 * as B does, and for interleaved is a multiple of Z). */
static bool mb_applies(const ir_module *m, int B, int64_t batch, int s, int M)
{
    int64_t parts;
    return M <= batch && batch % M == 0 && !pass_pipeline_unsplit(m, B, batch, M, &parts) &&
           (s != PP_INTERLEAVED || M % (int)m->mesh.axes[m->pipe.axis].size == 0);
}

/* The nearest pair to what the flags fixed that fits the HBM, priced, into
 * change: when the schedule was given (fixed_s >= 0) and is not 1f1b,
 * 1f1b (it holds at most Z microbatches) at the given M, or without one
 * at its fastest M that fits; else, when M was given, the given schedule
 * (1f1b when none) with 2, 4, ... times the microbatches (smaller ones) up
 * to 64.  `ref` is what is compiled (its step is quoted).  False when
 * nothing was fixed or none of those fits.  m is left as found. */
static bool nearest_fit(ir_module *m, const cost_hw *hw, fallback *fb, int B, int64_t batch, int fixed_s,
                        int fixed_mb, int v, const cand *ref, char *change, size_t n)
{
    ir_pipeline saved = m->pipe;
    cand alt = {0}, best = {0};
    bool found = false;
    if (fixed_s >= 0 && fixed_s != PP_1F1B) {
        for (int M = fixed_mb ? fixed_mb : 1; M <= (fixed_mb ? fixed_mb : MAX_MICROBATCHES); M++)
            if (mb_applies(m, B, batch, PP_1F1B, M) && price(m, hw, fb, B, batch, PP_1F1B, M, 1, &alt) &&
                alt.memory <= hw->hbm_bytes && (!best.mb || alt.step < best.step))
                best = alt;
        if (best.mb && fixed_mb)
            snprintf(change, n, "--schedule=1f1b at the same M fits (%.4g GiB, step %.4g us against %.4g us)",
                     best.memory / GIB, best.step * 1e6, ref->step * 1e6);
        else if (best.mb)
            snprintf(change, n, "--schedule=1f1b fits, fastest with --microbatches=%d (%.4g GiB, step %.4g us "
                     "against %.4g us)", best.mb, best.memory / GIB, best.step * 1e6, ref->step * 1e6);
        found = best.mb != 0;
    }
    int s = fixed_s >= 0 ? fixed_s : PP_1F1B;
    for (int M = 2 * fixed_mb; !found && fixed_mb && M <= MAX_MICROBATCHES; M *= 2) {
        if (mb_applies(m, B, batch, s, M) && price(m, hw, fb, B, batch, s, M, s == PP_INTERLEAVED ? v : 1, &alt) &&
            alt.memory <= hw->hbm_bytes) {
            snprintf(change, n, "--microbatches=%d%s fits (%.4g GiB, step %.4g us against %.4g us)", M,
                     fixed_s >= 0 ? "" : " with --schedule=1f1b", alt.memory / GIB, alt.step * 1e6,
                     ref->step * 1e6);
            found = true;
        }
    }
    restore(m, B, batch, &saved);
    return found;
}

/* Under --grad-sync=step, whether ref's pair fits with FSDP gradients
 * kept per microbatch (the default's fallback), priced, into change.  m
 * is left as found. */
static bool grad_sync_fit(ir_module *m, const cost_hw *hw, fallback *fb, int B, int64_t batch, const cand *ref,
                          char *change, size_t n)
{
    if (m->pipe.grad_sync != IR_GRAD_SYNC_STEP)
        return false;
    ir_pipeline saved = m->pipe;
    m->pipe.grad_sync = IR_GRAD_SYNC_AUTO;
    cand alt = {0};
    bool fits = price(m, hw, fb, B, batch, ref->schedule, ref->mb, ref->v, &alt) && alt.memory <= hw->hbm_bytes;
    if (fits)
        snprintf(change, n, "without --grad-sync=step, %d FSDP gradient%s reduced per microbatch fit%s (%.4g GiB, "
                 "step %.4g us against %.4g us)", alt.nmb, alt.nmb == 1 ? "" : "s", alt.nmb == 1 ? "s" : "",
                 alt.memory / GIB, alt.step * 1e6, ref->step * 1e6);
    restore(m, B, batch, &saved);
    return fits;
}

/* The smallest change that would make room: under --grad-sync=step the
 * default's gradients per microbatch at the same pair (grad_sync_fit),
 * else nearest_fit's pair, else change_advice's.  Shared by the choice's
 * warning and the given pair's. */
static void advice(ir_module *m, const cost_hw *hw, fallback *fb, int B, int64_t batch, int fixed_s, int fixed_mb,
                   int v, const cand *ref, char *change, size_t n)
{
    if (!grad_sync_fit(m, hw, fb, B, batch, ref, change, n) &&
        !nearest_fit(m, hw, fb, B, batch, fixed_s, fixed_mb, v, ref, change, n))
        change_advice(m, hw, change, n);
}

/* The warning when no candidate fits: the one with the smallest peak
 * (`low`, chosen) and the smallest change that would make room. */
static void warn_none_fits(pass_ctx *ctx, ir_module *m, const cost_hw *hw, fallback *fb, const cand *low,
                           int fixed_s, int fixed_mb, int B, int64_t batch)
{
    char name[64], change[320];
    advice(m, hw, fb, B, batch, fixed_s, fixed_mb, low->v, low, change, sizeof change);
    diag_warning(ctx->diag, m->pipe.loc, "no pipeline schedule fits %s's %.4g GiB of HBM per device: the "
                 "smallest stage peak is %.4g GiB (%s), which is compiled; %s", hw->name, hw->hbm_bytes / GIB,
                 low->memory / GIB, cand_name(low, name, sizeof name), change);
}

void pass_pipeline_check_forced(pass_ctx *ctx, ir_module *m, int B, int64_t batch, int schedule, int M, int v)
{
    cost_hw local;
    const cost_hw *hw = pass_pipeline_pricing_hw(ctx, &local);
    if (!hw)
        return;
    ir_pipeline saved = m->pipe;
    cand c = {0};
    fallback fb = {0};
    bool ok = price(m, hw, &fb, B, batch, schedule, M, v, &c);
    restore(m, B, batch, &saved);
    if (!ok)
        return;
    char name[64], change[320], line[1024], kept[512];
    cand_name(&c, name, sizeof name);
    double hbm = hw->hbm_bytes;
    bool over = hbm > 0 && c.memory > hbm;
    keep_choice(m, &fb, &c, kept, sizeof kept);
    snprintf(line, sizeof line, "given: %s; its fullest stage needs %.4g GiB, %s %s's %.4g GiB of HBM per device%s%s",
             name, c.memory / GIB, over ? "above" : "within", hw->name, hbm / GIB,
             over ? " (compiled as asked)" : "", kept);
    m->pipe.choice = ir_strdup(&m->arena, line);
    if (!over)
        return;
    advice(m, hw, &fb, B, batch, schedule, M, v, &c, change, sizeof change);
    diag_warning(ctx->diag, m->pipe.loc, "pipeline: the given %s needs %.4g GiB on its fullest stage, above %s's "
                 "%.4g GiB of HBM per device; compiled as asked; %s", name, c.memory / GIB, hw->name, hbm / GIB,
                 change);
}

void pass_pipeline_choose(pass_ctx *ctx, ir_module *m, int B, int64_t batch, const int *scheds, int n, int fixed,
                          int fixed_v, pipe_choice *out)
{
    cost_hw local;
    const cost_hw *hw = pass_pipeline_pricing_hw(ctx, &local);
    *out = (pipe_choice){0};
    if (!hw)
        return;
    ir_pipeline saved = m->pipe;
    int Z = (int)m->mesh.axes[m->pipe.axis].size;
    int64_t k = m->dims[m->pipe.dim].size / Z, parts;
    double hbm = hw->hbm_bytes;
    cand best = {0}, fit = {0}, low = {0}, c;
    fallback fb = {0};
    int priced = 0, over = 0;
    for (int i = 0; i < n; i++) {
        bool il = scheds[i] == PP_INTERLEAVED;
        for (int v = il ? 2 : 1; v <= (il ? MAX_CHUNKS : 1); v++) {
            if (il && (k % v != 0 || (fixed_v && v != fixed_v)))
                continue;
            for (int M = fixed ? fixed : 1; M <= (fixed ? fixed : MAX_MICROBATCHES) && M <= batch; M++) {
                if (batch % M != 0 || pass_pipeline_unsplit(m, B, batch, M, &parts) || (il && M % Z != 0) ||
                    !price(m, hw, &fb, B, batch, scheds[i], M, v, &c))
                    continue;
                priced++;
                if (!best.mb || c.step < best.step)
                    best = c;
                if (!low.mb || c.memory < low.memory)
                    low = c;
                if (hbm > 0 && c.memory > hbm)
                    over++;
                else if (!fit.mb || c.step < fit.step)
                    fit = c;
            }
        }
    }
    restore(m, B, batch, &saved);
    if (!priced)
        return;
    const cand *pick = fit.mb ? &fit : &low;
    char a[64], b[64], line[1024], kept[512];
    if (!fit.mb) {
        warn_none_fits(ctx, m, hw, &fb, &low, n == 1 ? scheds[0] : -1, fixed, B, batch);
        snprintf(line, sizeof line, "chosen: none of the %d (schedule, M) choices priced fits %s's %.4g GiB of HBM "
                 "per device; compiled: the smallest stage peak, %s", priced, hw->name, hbm / GIB,
                 cand_name(&low, a, sizeof a));
    } else if (over) {
        snprintf(line, sizeof line, "chosen: the fastest of the %d (schedule, M) choices priced that fit %s's %.4g GiB of "
                 "HBM per device; %d do not%s%s", priced, hw->name, hbm / GIB, over,
                 best.memory > hbm ? ", the fastest of all among them: " : "",
                 best.memory > hbm ? cand_name(&best, b, sizeof b) : "");
        if (best.memory > hbm)
            diag_note(ctx->diag, m->pipe.loc, "pipeline: %s would be fastest (step %.4g us) but its fullest stage "
                      "needs %.4g GiB, above %s's %.4g GiB of HBM per device; %s is the fastest that fits (step "
                      "%.4g us, %.4g GiB)", cand_name(&best, b, sizeof b), best.step * 1e6, best.memory / GIB,
                      hw->name, hbm / GIB, cand_name(&fit, a, sizeof a), fit.step * 1e6, fit.memory / GIB);
    } else {
        snprintf(line, sizeof line, "chosen: the fastest of the %d (schedule, M) choices priced; all fit %s's %.4g GiB of "
                 "HBM per device", priced, hw->name, hbm / GIB);
    }
    size_t used = strlen(line);
    /* The step the pick was chosen by, which the compiled module's cost
     * pass should repeat (docs/pipeline.md, "Choosing the schedule and M"). */
    snprintf(line + used, sizeof line - used, "%s; its step priced at %.1f us",
             keep_choice(m, &fb, pick, kept, sizeof kept), pick->step * 1e6);
    m->pipe.choice = ir_strdup(&m->arena, line);
    *out = (pipe_choice){.schedule = pick->schedule, .microbatches = pick->mb, .chunks = pick->v};
}

int pass_pipeline_resolve_zb(pass_ctx *ctx, ir_module *m, int B, int64_t batch, int fixed, char *note, size_t n)
{
    cost_hw local;
    const cost_hw *hw = pass_pipeline_pricing_hw(ctx, &local);
    if (!hw) {
        snprintf(note, n, "schedule zero-bubble -> zb-h1 (no hardware profile to price zb-h2's memory with)");
        return PP_ZB_H1;
    }
    /* The fastest zb-h2 that fits, as the choice would take it (the first
     * priced on a tie), and the smallest peak, to quote when none does. */
    ir_pipeline saved = m->pipe;
    double hbm = hw->hbm_bytes;
    cand fit = {0}, low = {0}, c;
    fallback fb = {0};
    for (int M = fixed ? fixed : 1; M <= (fixed ? fixed : MAX_MICROBATCHES); M++) {
        if (!mb_applies(m, B, batch, PP_ZB_H2, M) || !price(m, hw, &fb, B, batch, PP_ZB_H2, M, 1, &c))
            continue;
        if (!low.mb || c.memory < low.memory)
            low = c;
        if ((hbm <= 0 || c.memory <= hbm) && (!fit.mb || c.step < fit.step))
            fit = c;
    }
    restore(m, B, batch, &saved);
    if (fit.mb && hbm > 0)
        snprintf(note, n, "schedule zero-bubble -> zb-h2 (fits: %.4g GiB of %s's %.4g GiB per stage at M = %d)",
                 fit.memory / GIB, hw->name, hbm / GIB, fit.mb);
    else if (fit.mb)
        snprintf(note, n, "schedule zero-bubble -> zb-h2 (%s gives no HBM size to check it against)", hw->name);
    else if (low.mb)
        snprintf(note, n, "schedule zero-bubble -> zb-h1 (zb-h2 needs %s%.4g GiB per stage%s, above %s's %.4g GiB)",
                 fixed ? "" : "at least ", low.memory / GIB, fixed ? " at this M" : "", hw->name, hbm / GIB);
    else
        snprintf(note, n, "schedule zero-bubble -> zb-h1 (zb-h2's memory could not be priced)");
    return fit.mb ? PP_ZB_H2 : PP_ZB_H1;
}
