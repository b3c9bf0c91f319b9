/*
 * cost_pipe.c - the step of a compiled pipelined program as its schedule
 * runs it (cost.h, cost_pipe_totals; docs/pipeline.md, "The cost of a
 * compiled pipelined program").  A pipelined forward (inference) is priced
 * by pipe_price_forward's recurrence over its M forwards; the rest of this
 * comment is about a training step.
 *
 * After the pipeline pass the module is one microbatch (|B| / M) and each
 * stage's loops run |L| / Z layers, so the cost pass's serial totals are
 * one microbatch's forward and backward on one stage plus the update, not
 * a step.  The step is the schedule's: the per-layer F and B read off the
 * costed ops (pipe_work_of; the module is already one microbatch, so no
 * re-pricing), k = |L| / Z layers per stage, the embedding on the first
 * stage and the head and loss on the last, one hop per stage boundary and
 * direction, simulated by pp_build with the module's schedule and M, then
 * what runs once per step (pipe_price, shared with `einc analyze
 * --stages`).  Each op is priced in the item, on the stage and as often as
 * the run function runs it (pipe_work.c): a collective inside a loop once
 * per microbatch, only the ones the run function moves to the update once
 * per step, beside the AllReduces over Z of the sums one stage computes
 * and the update (docs/pipeline.md, "Where the price follows the
 * executor").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "pipe_work.h"

/* The core-idle bubble of the schedule pipe_price simulated (its times in
 * `used`) with its stages on 1 .. min(Z, IR_PIPE_CORE_BUBBLES) CPUs
 * (pp_core_bubble), into out[c - 1]; -1 in the rest, and everywhere for a
 * pipeline so long that the replays (items x Z steps each) would cost
 * more than about 2^26 steps, which would slow every compile of such a
 * program.  The plan is built again because pipe_price does not keep it: the same times
 * give the same orders (pp_build is deterministic).  0, or -1 with a
 * message. */
static int core_bubbles(const pp_params *used, pp_schedule s, double *out, char *err, size_t errlen)
{
    for (int c = 0; c < IR_PIPE_CORE_BUBBLES; c++)
        out[c] = -1;
    long long z = used->stages, v = used->chunks < 1 ? 1 : used->chunks;
    long long counts = z < IR_PIPE_CORE_BUBBLES ? z : IR_PIPE_CORE_BUBBLES;
    if (3 * z * v * used->microbatches * z * counts > (1LL << 26))
        return 0;
    pp_plan plan;
    if (pp_build(used, s, &plan, err, errlen) != 0)
        return -1;
    int rc = 0;
    for (int c = 1; rc == 0 && c <= used->stages && c <= IR_PIPE_CORE_BUBBLES; c++) {
        out[c - 1] = pp_core_bubble(used, &plan, c, NULL);
        if (out[c - 1] < 0) {
            snprintf(err, errlen, "the %s schedule on %d cores could not be simulated", pp_schedule_name(s), c);
            rc = -1;
        }
    }
    pp_plan_free(&plan);
    return rc;
}

int cost_pipe_totals(ir_module *m, const cost_hw *hw, bool with_core_bubbles, char *err, size_t errlen)
{
    ir_pipe_totals *t = &m->totals.pipe;
    memset(t, 0, sizeof *t);
    if (m->pipe.axis < 0 || m->pipe.axis >= m->mesh.naxes || m->pipe.microbatches <= 0)
        return 0;
    bool backward = false;
    for (const ir_op *op = m->first; op && !backward; op = op->next)
        backward = op->kind == IR_OP_LOOPBEGIN && op->u.loop.reverse;
    pipe_work w;
    /* Zero-bubble on a module not split yet (pipeline_choose.c) is
     * priced as the split will run it. */
    bool splits = pp_schedule_splits((pp_schedule)m->pipe.schedule);
    if ((backward ? pipe_work_of(m, splits, &w, err, errlen) : pipe_work_forward_of(m, &w, err, errlen)) != 0)
        return -1;
    int z = (int)m->mesh.axes[m->pipe.axis].size;
    if (z < 1 || w.layers % z != 0) {
        snprintf(err, errlen, "%lld layers do not split into %d stages of equal size", (long long)w.layers, z);
        return -1;
    }
    int64_t k = w.layers / z;
    pipe_priced p;
    bool dcn = m->mesh.axes[m->pipe.axis].dcn;
    /* The simulated times the core-idle replays start from, kept only
     * when they are asked for. */
    bool replay = backward && with_core_bubbles;
    double *arr = replay ? malloc(3 * (size_t)z * sizeof *arr) : NULL;
    pp_params used;
    double cores[IR_PIPE_CORE_BUBBLES];
    for (int c = 0; c < IR_PIPE_CORE_BUBBLES; c++)
        cores[c] = -1;
    if (replay && !arr) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = backward ? pipe_price_chunks(&w, hw, z, k, m->pipe.microbatches, (pp_schedule)m->pipe.schedule,
                                          m->pipe.chunks, dcn, arr, replay ? &used : NULL, &p, err, errlen)
                      : pipe_price_forward(&w, hw, z, k, m->pipe.microbatches, dcn, &p, err, errlen);
    if (rc == 1)
        snprintf(err, errlen, "schedule %s does not apply to %lld layers per stage and %d microbatches",
                 pp_schedule_name((pp_schedule)m->pipe.schedule), (long long)k, m->pipe.microbatches);
    if (rc == 0 && replay)
        rc = core_bubbles(&used, (pp_schedule)m->pipe.schedule, cores, err, errlen);
    free(arr);
    if (rc != 0)
        return -1;
    double kd = (double)k;
    bool split = backward && splits;
    *t = (ir_pipe_totals){
        .valid = true,
        .forward = !backward,
        .stages = z,
        .microbatches = m->pipe.microbatches,
        .schedule = m->pipe.schedule,
        .step = p.step,
        .pipeline = p.pipeline,
        .sync_update = p.sync,
        .bubble = p.bubble,
        .bubble_formula = p.bubble_formula,
        .held = p.held,
        .stage_memory = p.memory,
        .hop = p.hop,
        .stage_f = kd * w.layer_f,
        .stage_b = kd * (w.layer_b + w.layer_w),
        .first_extra = w.pre_f + w.pre_b + w.pre_w + pipe_work_sum_time(hw, w.sum_pre) +
                       pipe_work_sum_time(hw, w.sum_pre_w),
        .last_extra = w.post_f + w.post_b + w.post_w + pipe_work_sum_time(hw, w.sum_post) +
                      pipe_work_sum_time(hw, w.sum_post_w),
        .first_extra_f = w.pre_f,
        .last_extra_f = w.post_f,
        .first_extra_w = split ? w.pre_w + pipe_work_sum_time(hw, w.sum_pre_w) : 0,
        .last_extra_w = split ? w.post_w + pipe_work_sum_time(hw, w.sum_post_w) : 0,
        .stage_sums = backward ? pipe_work_zsums_time(&w, hw, z, dcn) : 0,
        .grad_once = w.sync_stacked / z,
        .grad_once_bytes = w.acc_extra_stacked / z,
        .grad_once_first_bytes = w.acc_extra_pre,
        .grad_once_last_bytes = w.acc_extra_post,
    };
    memcpy(t->core_bubble, cores, sizeof cores);
    return 0;
}

void cost_pipe_print(FILE *out, const ir_module *m)
{
    const ir_pipe_totals *t = &m->totals.pipe;
    if (!t->valid)
        return;
    long long layers = m->pipe.dim >= 0 ? (long long)(m->dims[m->pipe.dim].size / t->stages) : 0LL;
    if (t->forward) {
        fprintf(out, "pipeline (forward): %d stages x %lld layers, %d microbatch%s: step %.4g us\n",
                t->stages, layers, t->microbatches, t->microbatches == 1 ? "" : "es", t->step * 1e6);
        fprintf(out, "  per microbatch: stage forward %.4g us; first stage +%.4g us, last +%.4g us; "
                "one hop %.4g us\n", t->stage_f * 1e6, t->first_extra * 1e6, t->last_extra * 1e6,
                t->hop * 1e6);
        fprintf(out, "  bubble %.1f%% by the recurrence, %.1f%% by (Z-1)/(M+Z-1); params and state of the "
                "fullest stage and its buffers %.4g GiB\n", 100 * t->bubble, 100 * t->bubble_formula,
                t->stage_memory / 1073741824.0);
        fprintf(out, "  (the totals above are one microbatch's forward on one stage)\n");
        return;
    }
    char chunks[32] = "";
    if (m->pipe.chunks > 1)
        snprintf(chunks, sizeof chunks, " (v = %d)", m->pipe.chunks);
    fprintf(out, "pipeline: %d stages x %lld layers, %d microbatch%s, schedule %s%s: step %.4g us "
            "(pipeline %.4g us + gradient sync and update %.4g us, once per step)\n",
            t->stages, layers, t->microbatches, t->microbatches == 1 ? "" : "es",
            pp_schedule_name((pp_schedule)t->schedule), chunks, t->step * 1e6, t->pipeline * 1e6,
            t->sync_update * 1e6);
    fprintf(out, "  per microbatch: stage forward %.4g us, backward %.4g us; first stage +%.4g us, "
            "last +%.4g us; one hop %.4g us\n", t->stage_f * 1e6, t->stage_b * 1e6, t->first_extra * 1e6,
            t->last_extra * 1e6, t->hop * 1e6);
    /* Zero-bubble has no closed form here (bubble_formula < 0). */
    char formula[64] = "no closed form";
    if (t->bubble_formula >= 0)
        snprintf(formula, sizeof formula, "%.1f%% by (Z-1)/(%sM+Z-1)", 100 * t->bubble_formula,
                 m->pipe.chunks > 1 ? "v" : "");
    fprintf(out, "  bubble %.1f%% simulated, %s; held %.3g microbatches, memory of the fullest stage "
            "%.4g GiB\n", 100 * t->bubble, formula, t->held, t->stage_memory / 1073741824.0);
    if (t->grad_once > 0) {
        /* docs/pipeline.md, "Gradient collectives once per step". */
        fprintf(out, "  stacked gradients reduced once per step, on their sums over the microbatches: %.4g us "
                "of the sync", t->grad_once * 1e6);
        if (t->grad_once_bytes > 0)
            fprintf(out, "; their unreduced sums add %.4g GiB to a stage (FSDP: the full gradient of its layers)",
                    t->grad_once_bytes / 1073741824.0);
        fprintf(out, "\n");
    }
    if (t->grad_once_first_bytes > 0 || t->grad_once_last_bytes > 0)
        fprintf(out, "  unstacked gradients reduced once per step (the embedding's, the head's): their unreduced "
                "sums add %.4g GiB to the first stage, %.4g GiB to the last (FSDP: the full gradient)\n",
                t->grad_once_first_bytes / 1073741824.0, t->grad_once_last_bytes / 1073741824.0);
    if (m->pipe.ngrad_mb > 0) {
        /* pipeline_grad.c: kept in the backward loop, per microbatch. */
        fprintf(out, "  stacked gradients reduced per microbatch, inside the backward loop (%s):",
                m->pipe.grad_sync == IR_GRAD_SYNC_MICROBATCH ? "--grad-sync=microbatch"
                                                             : "their unreduced sums would not fit the HBM");
        for (int i = 0; i < m->pipe.ngrad_mb; i++)
            fprintf(out, "%s %s", i ? "," : "", m->pipe.grad_mb[i]);
        fprintf(out, "\n");
    }
    if (m->pipe.resolved)
        fprintf(out, "  %s\n", m->pipe.resolved);
    if (m->pipe.choice)
        fprintf(out, "  schedule and M %s\n", m->pipe.choice);
    fprintf(out, "  (the totals above are one microbatch's forward and backward on one stage plus the update)\n");
}
