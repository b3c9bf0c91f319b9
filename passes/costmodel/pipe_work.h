/*
 * pipe_work.h - the work of a pipeline stage, per microbatch, read off a
 * compiled training program whose ops the cost pass annotated
 * (pipe_work.c says how the backward pass splits into B and W), and the
 * price of a step that runs it under a schedule (pipe_price.c).  Used by
 * the cost pass for a compiled pipelined program and by `einc analyze
 * --stages=Z` for a program not yet pipelined (docs/pipeline.md).
 */
#ifndef EINC_COSTMODEL_PIPE_WORK_H
#define EINC_COSTMODEL_PIPE_WORK_H

#include <stdbool.h>
#include <stdint.h>

#include "costmodel.h"
#include "ir.h"
#include "pipeline.h"

/* Seconds and bytes per device, for the batch the module was priced at
 * (one microbatch).  "layer" figures are per layer of the repeat block: a
 * stage of k layers does k of each.  The first stage also runs the ops
 * before the block (pre: the embedding, and after the backward block its
 * gradient), the last stage the ops after it (post: the head, the loss and
 * their gradients). */
typedef struct pipe_work {
    int64_t layers;                  /* |L|, the repeat block's trip count */
    double layer_f, layer_b, layer_w; /* forward; input gradient dL/dx; weight gradient dL/dW */
    /* The ops outside the loops, by the item the run function runs them
     * in (codegen/pipeline_plan.c): F; B (the backward ops the gradient
     * carried to the previous stage depends on); W (zero-bubble's and
     * zb-h2's ops from its dL/dW loop on).  The embedding's and the head's weight gradients are W
     * (pipe_work_split_w), as a split backward runs them, on a module not
     * split yet too; with every other schedule pipe_price adds W to B. */
    double pre_f, pre_b, pre_w;      /* first stage only */
    double post_f, post_b, post_w;   /* last stage only */
    /* Collectives that run once per step, on the sums over the
     * microbatches, on the first / the last stage: exactly those the run
     * function moves to the update (codegen/pipeline_plan.c, a linear
     * collective after the backward loop that only the update reads, such
     * as seed 000's DP AllReduce or FSDP ReduceScatter of a gradient;
     * pipe_work_of's `split` counts those a split will move there).
     * Every other collective runs where its op runs, once per microbatch,
     * and is priced there: a per-layer AllReduce inside the backward loop
     * in layer_b or layer_w, an AllGather of the input gradient that the
     * embedding's gradient reads in pre_b. */
    double sync_pre, sync_post;
    /* The bytes their sums add to the first / the last stage beyond the
     * params' own size (param_other counts the reduced sums): the step
     * sums a collective's operand, so an FSDP embedding's or head's
     * ReduceScatter keeps its full gradient, X times its block, over the
     * microbatches (0 for DP's AllReduce); acc_extra_stacked's rule for
     * the non-stacked gradients. */
    double acc_extra_pre, acc_extra_post;
    /* The stacked params' gradient collectives that a pipelined step runs
     * once per step on the gradient summed over the microbatches rather
     * than once per layer and microbatch inside the backward loop
     * (pipe_work_deferred_stack; passes/pipeline_grad.c moves them after
     * the schedule): seconds for the whole stack of |L| layers, a stage
     * running its 1/Z on its own layers' stack (on a module not pipelined
     * yet, |L| times one layer's collective: each layer's latency counted,
     * where the executor pays one per stage), and the bytes, for the
     * whole stack, that their accumulators hold beyond the params' own
     * size: an FSDP ReduceScatter's gradient summed unreduced is X times
     * its reduced block (0 for DP's AllReduce, whose result is as large
     * as its operand). */
    double sync_stacked, acc_extra_stacked;
    /* The sums only the first or only the last stage computes (the
     * embedding's gradient, the head's, the loss), AllReduced over the
     * pipeline axis after the schedule so that every stage holds them
     * (codegen/pipeline.c, reduce_over_stages): each one's bytes per
     * device, one collective each, priced by pipe_work_zsum_time.  Past
     * PIPE_ZSUM_MAX of them the rest add into the last entry. */
#define PIPE_ZSUM_MAX 32
    double zsum[PIPE_ZSUM_MAX];
    int nzsum;
    /* Devices per stage (the mesh's, over Z when the module is pipelined
     * already): a calibrated profile's collectives share the cores of
     * Z times that many devices (cost_measured_contention). */
    double stage_devices;
    /* Bytes per device the first / last stage adds, per microbatch, into
     * the step's sums outside any op: the non-stacked gradients (the
     * embedding's; the head's, the final norm's), which the pipelined run
     * function adds into their accumulators in the B item that computes
     * them (codegen/pipeline.c, accumulate).  pipe_price prices each at
     * pipe_work_sum_time.  The stacked gradients' sums are their
     * LayerStack ops, priced with the layer. */
    double sum_pre, sum_post;
    /* The same for the sums of the gradients the split backward computes
     * in W (pipe_work_split_w: the embedding's, the head's), which the run
     * function adds in W m; in B with every other schedule. */
    double sum_pre_w, sum_post_w;
    /* The optimizer's update, once per step: of the stacked params (a
     * stage updates its share) and of the others. */
    double update_stacked, update_other;
    double carry_bytes;              /* the activation one stage hands the next */
    /* Seconds of one stage-to-stage transfer as the cost pass priced the
     * module's forward CollectivePermute (a compiled pipelined module,
     * passes/pipeline_permute.c), which pipe_price then uses as t_p2p;
     * -1 when the module has none (not pipelined yet: pipe_price times
     * carry_bytes by pipe_work_hop, the same formula). */
    double hop;
    double act_layer;                /* activations the forward block keeps per layer */
    /* Zero-bubble's split (passes/pipeline_split.c) keeps per layer, from
     * its dL/dx loop until its dL/dW loop, each value the dL/dW half reads
     * from the dL/dx half (Qi et al., ICLR'24, section 2: W's inputs held
     * longer).  `split`: the module's backward is split already, and
     * cross_layer is the bytes per layer of its dL/dx loop's LayerStacks,
     * whose copies the costed ops hold; else the bytes per layer the split
     * would stack, found by the same data flow (values of the backward
     * loop on the dL/dx path, not a LayerSlice, read by an op off it),
     * which pipe_price adds to a zero-bubble W as a LayerStack's copy. */
    bool split;
    double cross_layer;
    /* Bytes of the params and state (optimizer state; a forward's caches),
     * and of the params alone (what their accumulated gradients take).  The stacked figures and
     * update_stacked are for the whole stack of |L| layers even when the
     * module is already pipelined (m->pipe, its stacked params' layer dim
     * split over Z): a stage holds and updates 1/Z of them. */
    double state_stacked, state_other;
    double param_stacked, param_other;
} pipe_work;

/* The LayerStack that stacks `op`'s result when `op` is a gradient
 * collective of a backward loop over the layers (dim `ldim`: the
 * pipelined dim, m->pipe.dim, or the cost model's layer dim; one test
 * for the pass and the price, so they agree) that a pipelined step
 * may run once per step (after the schedule, on the stacked gradient summed
 * over the microbatches: Megatron-LM's and DeepSpeed's gradient
 * accumulation), else NULL.  That is legal when it is an AllReduce or a
 * ReduceScatter that sums (linear: it commutes with the sum over the
 * microbatches) of a floating-point value (the unreduced gradient is
 * summed in its own dtype, as the reduced one was: no precision lost to
 * a narrower accumulator), inside a reverse loop of the backward phase,
 * its result read only by one LayerStack of that loop, whose result only
 * the update reads (no dL/dx of an earlier layer, no output). */
const ir_op *pipe_work_deferrable_stack(const ir_module *m, const ir_op *op, int ldim);
/* Whether the stacked gradient named `grad` (its LayerStack's tensor)
 * keeps its collective per microbatch, inside the backward loop:
 * m->pipe.grad_sync is IR_GRAD_SYNC_MICROBATCH, or AUTO with `grad`
 * among m->pipe.grad_mb (passes/pipeline_choose.c's fallback when the
 * deferred sums do not fit the HBM; docs/pipeline.md "Gradient
 * collectives once per step"). */
bool pipe_work_grad_per_microbatch(const ir_module *m, const char *grad);
/* pipe_work_deferrable_stack's LayerStack when the collective is also
 * chosen to run once per step (not pipe_work_grad_per_microbatch), else
 * NULL: what the pipeline pass moves and the cost model prices so. */
const ir_op *pipe_work_deferred_stack(const ir_module *m, const ir_op *op, int ldim);

/* Marks in `w` (the module's nvalues entries, by value id, false on entry)
 * the results of the backward ops outside the loops that a split backward
 * (zero-bubble, zb-h2: passes/pipeline_split.c) runs in the W item, as Qi
 * et al. split it (ICLR'24, section 2: B is only what the gradient sent
 * to the previous stage depends on, every weight gradient is W):
 *
 *  - after the dL/dx loop `bwd` (a reverse LoopBegin over the layers) up
 *    to the first op of another phase, every op but a CollectivePermute
 *    and the ops of loops: on the first stage the embedding's gradient
 *    (dWf, dEmb) and what it reads, which nothing on another stage waits
 *    for;
 *  - before `bwd`, the backward ops that bwd's carried input (the
 *    gradient the last stage's layers start from) does not depend on and
 *    that no loop reads, directly or through an op that stays: on the last
 *    stage the head's and a final norm's weight gradients.
 *
 * One rule for the pass that moves these ops and the price of a module
 * not split yet (pipe_work_of), so that they agree. */
void pipe_work_split_w(const ir_op *bwd, bool *w);

/* Fills w from m, compiled with a loss and an optimizer and annotated by
 * the cost pass: one forward repeat block and its reverse backward block.
 * Ops are counted once per layer whatever their loop's trip count, so a
 * pipelined module (trips |L|/Z) and an unpipelined one give the same
 * per-layer figures.  `split`: priced for a schedule that splits the
 * backward (zero-bubble, zb-h2; pp_schedule_splits): on a module not split
 * yet, the ops pipe_work_split_w moves after the loops run where the split
 * module runs them, so a linear collective there that only the update
 * reads (the head's gradient's AllReduce or ReduceScatter) runs once per
 * step (sync_post, acc_extra_post) rather than per microbatch in W; no
 * effect on a module split already or without a backward.
 * Returns 0, or -1 with a message in err (no or several repeat blocks, no
 * backward pass, out of memory).  m is not modified. */
int pipe_work_of(const ir_module *m, bool split, pipe_work *w, char *err, size_t errlen);
/* The same for a forward (inference) program: one forward repeat block and
 * no backward pass; only the forward times, the carried activation and the
 * bytes of the params and states are filled (the rest is 0; a pipelined
 * program's state, a KV cache, counted with every microbatch's rows).  Returns 0, or -1 with a
 * message in err. */
int pipe_work_forward_of(const ir_module *m, pipe_work *w, char *err, size_t errlen);

/* Seconds to move `bytes` one hop between neighbouring stages: one ICI
 * link one way plus a hop's latency (seed 001, "one hop"), or the chip's
 * share of the data-center network when the stages are pods (`dcn`, seed
 * 000): cost_hop_time's, the cost of the CollectivePermute the pipeline
 * pass puts at a stage boundary. */
double pipe_work_hop(const cost_hw *hw, double bytes, bool dcn);

/* Seconds to add a gradient of `bytes` per device into its sum over the
 * microbatches: an elementwise add in place, reading 2 `bytes` and
 * writing 1 at the profile's hbm_bw (the bandwidth an elementwise add
 * measures, hw/host.json's hbm_bandwidth_source), the memory-only rule
 * cost_op.c prices a LayerStack's copy with; 0 when the profile has no
 * bandwidth. */
double pipe_work_sum_time(const cost_hw *hw, double bytes);

/* Seconds of one AllReduce over the Z stages of `bytes` per device (a sum
 * only the first or last stage computed, pipe_work.zsum): on a calibrated
 * profile its measured AllReduce fit over Z devices (cost_measured_coll_time,
 * the cores shared by Z w->stage_devices devices), as the cost pass prices
 * an AllReduce op; else seed 001's AllReduce over a ring of Z
 * (cost_coll_links_time), or seed 000's over DCN with `dcn`.  0 for Z < 2. */
double pipe_work_zsum_time(const cost_hw *hw, const pipe_work *w, int z, bool dcn, double bytes);
/* The sum of pipe_work_zsum_time over w->zsum: seconds per step. */
double pipe_work_zsums_time(const pipe_work *w, const cost_hw *hw, int z, bool dcn);

/* One (schedule, M) priced: seconds per step, bytes per device. */
typedef struct pipe_priced {
    pp_schedule schedule;
    int microbatches;  /* M */
    double hop;        /* one stage-to-stage transfer of one microbatch's activation */
    double pipeline;   /* the schedule's makespan over the microbatches (simulated) */
    double sync;       /* gradient reductions and the update after it (the slowest stage) */
    double step;       /* pipeline + sync */
    double bubble;     /* idle share of the pipeline, as simulated (pp_plan.bubble) */
    double bubble_formula; /* (Z - 1) / (v M + Z - 1) for uniform stages (Narayanan et al.,
                              SC'21; seed 000); -1 for zero-bubble and zb-h2, whose idle time depends
                              on W's share */
    double held;       /* most microbatches whose activations a stage holds (interleaved:
                          (microbatch, chunk) pairs / v, so each counts its share) */
    double memory;     /* peak bytes of the fullest stage: params, state and activations held */
} pipe_priced;

/* Prices a step of Z stages of k layers each (k Z = w->layers), each
 * stage doing w's work per microbatch (the module priced at one
 * microbatch), M microbatches under schedule s, stage-to-stage transfers
 * one ICI hop or over DCN (pipe_work_hop):
 *
 *  - per-stage F, B (and W for zero-bubble and zb-h2, else B includes W) are k
 *    layers' worth plus pre on stage 0 and post on stage Z - 1, and B
 *    on those stages adds sum_pre / sum_post into the step's sums
 *    (pipe_work_sum_time);
 *  - pp_build simulates the schedule (passes/costmodel/pipeline.h);
 *  - after the pipeline drains, once per step and the same on every stage
 *    (not overlapped: Megatron-LM's default): the sums only the first or
 *    last stage computes AllReduced over Z (pipe_work_zsums_time), the
 *    collectives moved to the update (sync_pre, sync_post), the update of
 *    1/Z of the stacked params and of all the others.  The non-stacked
 *    params' state is counted on both the first and last stage's memory
 *    (an upper bound);
 *  - memory of the fullest stage: 1/Z of the stacked params, their
 *    gradients and state, the others on the first and last stage (and
 *    the unreduced sums acc_extra_pre, acc_extra_post there), the
 *    activations of the microbatches it holds (seed 000: GPipe M, 1F1B at
 *    most Z) and the send and receive buffers.
 *
 * Interleaved uses v = 2 chunks per device.  `arr` (3 Z doubles: t_f, t_b,
 * t_w) and `used` (the pp_params simulated, pointing into arr) may both be
 * NULL; then the times live only during the call.  Returns 0; 1 when the
 * pair does not apply (interleaved needs an even k and M a multiple of Z);
 * -1 with a message in err (Z < 1, k < 1, M < 1, pp_build's errors, out of
 * memory). */
int pipe_price(const pipe_work *w, const cost_hw *hw, int z, int64_t k, int mb, pp_schedule s, bool dcn,
               double *arr, pp_params *used, pipe_priced *out, char *err, size_t errlen);
/* pipe_price with `v` chunks per device for the interleaved schedule
 * (a compiled program's --chunks; below 2 it is 2); v is ignored for the
 * other schedules.  Returns 1 when k is not a multiple of v or M of Z. */
int pipe_price_chunks(const pipe_work *w, const cost_hw *hw, int z, int64_t k, int mb, pp_schedule s, int v,
                      bool dcn, double *arr, pp_params *used, pipe_priced *out, char *err, size_t errlen);

/* Prices a pipelined forward (inference: every stage runs F0 .. F(M-1),
 * docs/pipeline.md) of Z stages of k layers each under w's forward work
 * per microbatch, one hop per stage boundary (pipe_work_hop).  Microbatch
 * m ends on stage s at
 *
 *   T(s, m) = max(T(s - 1, m) + hop, T(s, m - 1)) + t_f(s)
 *
 * (T(-1, m) = -hop, T(s, -1) = 0; t_f(s) is k layers plus the first
 * stage's pre and the last's post), the recurrence of a GPipe forward
 * (Huang et al., NeurIPS'19); the pipeline is T(Z - 1, M - 1), with no
 * sync or update, and the bubble is the stages' mean idle share of it,
 * 1 - sum_s M t_f(s) / (Z T(Z-1, M-1)), which is seed 000's
 * (Z - 1) / (M + Z - 1) for uniform stages and free hops (bubble_formula).
 * held is 1 (a forward keeps no activations for a backward), memory the
 * fullest stage's params and states (1/Z of the stacked ones, such as a
 * prefill's KV caches, the others on the first and last stage) and its
 * send and receive buffers.  Returns 0, or -1 with
 * a message in err (Z, k or M below 1, out of memory). */
int pipe_price_forward(const pipe_work *w, const cost_hw *hw, int z, int64_t k, int mb, bool dcn,
                       pipe_priced *out, char *err, size_t errlen);

#endif
