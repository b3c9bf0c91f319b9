/*
 * pipe_price.c - the price of one pipelined step: a stage's work per
 * microbatch (pipe_work.c) through a schedule's simulation
 * (pipeline_sim.c), plus what runs once per step after it (pipe_work.h,
 * pipe_price).
 *
 * Both users share it so that they agree: `einc analyze --stages=Z`
 * (driver/analyze_pipe.c) prices a program not yet pipelined at every M,
 * the cost pass (passes/cost_pipe.c) the compiled pipelined program at its
 * own M and schedule.  The model is docs/pipeline.md's "The model of a
 * step"; the closed-form bubble beside the simulated one is seed 000's
 * and Narayanan et al.'s (SC'21) (Z - 1) / (v M + Z - 1) for uniform
 * stages, which the simulation departs from when the first and last stages
 * carry the embedding and the head, or when the transfers are not free.
 */
#include "pipe_work.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* One stage-to-stage transfer: as the cost pass priced the module's
 * CollectivePermute when it has one (a compiled pipelined module), else
 * the same formula on the carried activation's bytes. */
static double hop_of(const pipe_work *w, const cost_hw *hw, bool dcn)
{
    return w->hop >= 0 ? w->hop : pipe_work_hop(hw, w->carry_bytes, dcn);
}

/* Per-stage times of w on Z stages of k layers each into p (arrays of Z
 * in `arr`: t_f, t_b, t_w).  Without a separate W pass (every schedule but
 * zero-bubble and zb-h2) the backward is B and W together.  The first and
 * last stage add their gradients into the step's sums right after the op
 * that computes each (codegen/pipeline.c): in B (sum_pre, sum_post), or
 * in W for the embedding's and the head's weight gradients, which a split
 * backward runs in W m with the ops outside the loops from the dL/dW loop
 * on (pre_w, post_w, sum_pre_w, sum_post_w; pipe_work_split_w, Qi et al.,
 * ICLR'24, section 2).  Zero-bubble on a module
 * not split yet adds to W, per layer, the LayerStack copies the split
 * will add (w->cross_layer read and written once at W_hbm, as cost_op.c
 * prices a LayerStack), so that it is priced as it will run. */
static void stage_times(pp_params *p, double *arr, const pipe_work *w, const cost_hw *hw, int z, int64_t k,
                        bool split_w)
{
    double *tf = arr, *tb = arr + z, *tw = arr + 2 * z;
    double stack = split_w && !w->split && hw->hbm_bw > 0 ? 2 * w->cross_layer / hw->hbm_bw : 0;
    for (int s = 0; s < z; s++) {
        double kd = (double)k;
        tf[s] = kd * w->layer_f + (s == 0 ? w->pre_f : 0) + (s == z - 1 ? w->post_f : 0);
        tb[s] = kd * w->layer_b + (s == 0 ? w->pre_b + pipe_work_sum_time(hw, w->sum_pre) : 0) +
                (s == z - 1 ? w->post_b + pipe_work_sum_time(hw, w->sum_post) : 0);
        tw[s] = kd * (w->layer_w + stack) + (s == 0 ? w->pre_w + pipe_work_sum_time(hw, w->sum_pre_w) : 0) +
                (s == z - 1 ? w->post_w + pipe_work_sum_time(hw, w->sum_post_w) : 0);
        if (!split_w) {
            tb[s] += tw[s];
            tw[s] = 0;
        }
    }
    p->t_f = tf;
    p->t_b = tb;
    p->t_w = tw;
}

/* After the pipeline drains (codegen/pipeline.c): the sums only the first
 * or last stage holds are AllReduced over the Z stages, then every stage
 * runs the update's ops, its share of the stacked params' and the whole
 * of the others', the collectives moved to the update (sync_pre,
 * sync_post) and its share of the stacked gradients' collectives, deferred
 * from the backward loop to once per step (sync_stacked), each stage the
 * same work, so the step ends that much after the last stage's
 * pipeline. */
static double sync_time(const pipe_work *w, const cost_hw *hw, int z, bool dcn)
{
    return pipe_work_zsums_time(w, hw, z, dcn) + w->update_stacked / (double)z + w->update_other + w->sync_pre +
           w->sync_post + w->sync_stacked / (double)z;
}

/* Peak bytes of the fullest stage: its share of the stacked params, their
 * accumulated gradients (an FSDP gradient whose ReduceScatter is deferred
 * to once per step summed unreduced, acc_extra_stacked) and optimizer
 * state, the others on the first and
 * last stage (an upper bound, as in sync_time) with the unreduced sums
 * of those whose collective runs once per step (acc_extra_pre on the
 * first, acc_extra_post on the last), the activations of the
 * microbatches it holds, and the carried activation sent and received.
 * A microbatch is held from its F until its B ends, or with zero-bubble and zb-h2
 * until its W ends (the executor frees its frame then, docs/pipeline.md),
 * which also holds the values the split keeps for W (w->cross_layer):
 * counted for every microbatch held, an upper bound, since they exist
 * only from B on. */
static double stage_memory(const pipe_work *w, const pp_plan *plan, int z, int64_t k)
{
    double worst = 0;
    double layer = w->act_layer + (pp_schedule_splits(plan->schedule) ? w->cross_layer : 0);
    for (int s = 0; s < z; s++) {
        double b = (w->state_stacked + w->param_stacked + w->acc_extra_stacked) / (double)z;
        if (s == 0 || s == z - 1)
            b += w->state_other + w->param_other;
        b += (s == 0 ? w->acc_extra_pre : 0) + (s == z - 1 ? w->acc_extra_post : 0);
        /* Interleaved counts (microbatch, chunk) pairs, each 1/v of the stage's layers. */
        b += (double)plan->stage[s].peak_held_w * (double)k / (double)plan->chunks * layer +
             2 * w->carry_bytes;
        worst = fmax(worst, b);
    }
    return worst;
}

int pipe_price(const pipe_work *w, const cost_hw *hw, int z, int64_t k, int mb, pp_schedule s, bool dcn,
               double *arr, pp_params *used, pipe_priced *out, char *err, size_t errlen)
{
    return pipe_price_chunks(w, hw, z, k, mb, s, s == PP_INTERLEAVED ? 2 : 1, dcn, arr, used, out, err, errlen);
}

int pipe_price_chunks(const pipe_work *w, const cost_hw *hw, int z, int64_t k, int mb, pp_schedule s, int v,
                      bool dcn, double *arr, pp_params *used, pipe_priced *out, char *err, size_t errlen)
{
    if (z < 1 || k < 1 || mb < 1) {
        snprintf(err, errlen, "a pipeline needs at least one stage, layer and microbatch (Z = %d, %lld layers "
                 "per stage, M = %d)", z, (long long)k, mb);
        return -1;
    }
    if (s != PP_INTERLEAVED || v < 2)
        v = s == PP_INTERLEAVED ? 2 : 1;
    if (s == PP_INTERLEAVED && (k % v != 0 || mb % z != 0))
        return 1;
    double *own = arr ? NULL : malloc(3 * (size_t)z * sizeof *own);
    if (!arr && !own) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pp_params pp = {.stages = z, .microbatches = mb, .chunks = v, .t_p2p = hop_of(w, hw, dcn)};
    stage_times(&pp, arr ? arr : own, w, hw, z, k, pp_schedule_splits(s));
    if (used)
        *used = pp;
    pp_plan plan;
    int rc = pp_build(&pp, s, &plan, err, errlen);
    free(own);
    if (rc != 0)
        return -1;
    out->schedule = s;
    out->microbatches = mb;
    out->hop = pp.t_p2p;
    out->pipeline = plan.step;
    out->sync = sync_time(w, hw, z, dcn);
    out->step = out->pipeline + out->sync;
    out->bubble = plan.bubble;
    out->bubble_formula = pp_schedule_splits(s) ? -1 : (double)(z - 1) / ((double)v * mb + z - 1);
    out->held = (double)plan.peak_held_w / (double)v;
    out->memory = stage_memory(w, &plan, z, k);
    pp_plan_free(&plan);
    return 0;
}

int pipe_price_forward(const pipe_work *w, const cost_hw *hw, int z, int64_t k, int mb, bool dcn,
                       pipe_priced *out, char *err, size_t errlen)
{
    if (z < 1 || k < 1 || mb < 1) {
        snprintf(err, errlen, "a pipeline needs at least one stage, layer and microbatch (Z = %d, %lld layers "
                 "per stage, M = %d)", z, (long long)k, mb);
        return -1;
    }
    double *done = calloc((size_t)z, sizeof *done); /* T(s, m) of the last microbatch m seen */
    if (!done) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    double hop = hop_of(w, hw, dcn), busy = 0;
    for (int m = 0; m < mb; m++)
        for (int s = 0; s < z; s++) {
            double tf = (double)k * w->layer_f + (s == 0 ? w->pre_f : 0) + (s == z - 1 ? w->post_f : 0);
            double ready = s == 0 ? 0 : done[s - 1] + hop; /* done[s - 1] is T(s - 1, m) by now */
            done[s] = fmax(ready, done[s]) + tf;
            busy += tf;
        }
    double span = done[z - 1];
    free(done);
    double memory = 0;
    for (int s = 0; s < z; s++) {
        /* A forward's state is its caches (a prefill's KV cache, stacked
         * on the layers: each stage keeps its own layers'). */
        double b = w->state_stacked / (double)z + 2 * w->carry_bytes;
        if (s == 0 || s == z - 1)
            b += w->state_other;
        memory = fmax(memory, b);
    }
    *out = (pipe_priced){
        .schedule = PP_GPIPE,
        .microbatches = mb,
        .hop = hop,
        .pipeline = span,
        .sync = 0,
        .step = span,
        .bubble = span > 0 ? 1 - busy / ((double)z * span) : 0,
        .bubble_formula = (double)(z - 1) / ((double)mb + z - 1),
        .held = 1,
        .memory = memory,
    };
    return 0;
}
