/*
 * cost.h - the cost pass and its reports: annotating every op of a module
 * with its estimate (ir_op.cost), the step's totals (ir_module.totals),
 * --dump-cost's table and --explain's regimes.
 *
 * The model itself (hardware profiles, the seeds' formulas, the calibrated
 * fits, the estimate of one op, model FLOPs, memory, MeshSlice) is the
 * library in passes/costmodel/, whose one header costmodel.h this header
 * includes; what is declared here works on a module the cost pass has
 * annotated.  Every time is in seconds, every size in bytes, and every
 * quantity is PER DEVICE unless a name says "global".
 */
#ifndef EINC_COST_H
#define EINC_COST_H

#include <stdbool.h>
#include <stdio.h>

#include "costmodel.h"
#include "ir.h"

/* ---- the pass (cost.c) ---- */

/* Fills op->cost for every op of `m` with cost_op_estimate_onchip
 * (costmodel.h), the values of cost_onchip_values kept on chip: the
 * attention scores under a Flash Attention kernel (seed 002). */
void cost_annotate_ops(ir_module *m, const cost_hw *hw);

/* ---- a pipelined program's step (cost_pipe.c) ---- */

/* Fills m->totals.pipe for a pipelined module (m->pipe.axis >= 0 and
 * m->pipe.microbatches > 0, after the pipeline pass; its ops annotated by
 * cost_annotate_ops): the step as m->pipe.schedule runs its M microbatches
 * over the Z stages (pipe_work_of and pipe_price, passes/costmodel/
 * pipe_work.h; ICI hops, or DCN when the pipeline axis is `over dcn`), the
 * simulated and closed-form bubble, the microbatches held and the memory
 * of the fullest stage.  Clears it for any other module and returns 0.
 * Returns -1 with a message in err when the module is pipelined but its
 * step cannot be priced (no training step, |L| not a multiple of Z, a
 * schedule the simulation rejects); m->totals.pipe.valid is then false.
 * `with_core_bubbles` also fills core_bubble (the schedule replayed on
 * 1 .. min(Z, 16) CPUs, what --dump-ir=json reports); the pricing of
 * candidates (pipeline_choose.c) reads only the step and the memory and
 * leaves it -1. */
int cost_pipe_totals(ir_module *m, const cost_hw *hw, bool with_core_bubbles, char *err, size_t errlen);

/* --dump-cost's "pipeline" section of m->totals.pipe (nothing when it is
 * not valid). */
void cost_pipe_print(FILE *out, const ir_module *m);

/*
 * Fills m->totals from the ops' costs (annotate every op first): step time
 * and exposed communication from the two-stream schedule of
 * docs/cost-model.md, "Totals"; the global model FLOPs (cost_op_model_flops
 * summed) and elementwise FLOPs; MFU = sum over einsums and MeshSlice loops
 * of (model FLOPs / devices) / peak FLOP/s of the op's dtype, divided by the
 * step time (seed 003: model FLOPs, each FLOP of the unsharded program
 * once, not the FLOPs the devices execute); the per-device peak memory
 * (cost_memory_peak, bytes).
 */
void cost_compute_totals(ir_module *m, const cost_hw *hw);

/* Whether value `v` is a param or computed only by resharding params
 * (Slice/AllGather/... chains of params): the collectives that make such
 * values can run ahead, during earlier compute (seed 000, FSDP). */
bool cost_value_is_param_derived(const ir_value *v);

/* ---- collective matmul (cost.c; docs/cost-model.md, "Collective matmul") ---- */

/* Whether op can hide one collective as a collective matmul
 * (cost_collective_matmul_exposed): an Einsum of two operands that is not
 * a gather or scatter. */
bool cost_is_matmul(const ir_op *op);

/* Devices in the group of collective `c` on m's mesh (the product of its
 * axes' sizes). */
int64_t cost_coll_group(const ir_module *m, const ir_coll *c);

/* The pairing rule of collective matmul, shared by the cost pass
 * (cost_compute_totals), the planner's step replay (propagate_step.c) and
 * the whole-program ILP's exposed edge costs (propagate_ilp_cm.c): whether
 * op `mm` can hide a main-stream collective that runs `coll_trips` times a
 * step.  It can when the profile does collective matmul
 * (hw->collective_matmul), `mm` is a matmul (cost_is_matmul) and it runs
 * as often as the collective (a gather in front of a repeated body's
 * matmul runs every layer; one entering the body once does not pair with
 * it).  Which matmul is the partner is the caller's: an AllGather hides
 * behind the op that reads its result first, a ReduceScatter behind the
 * op that made its operand, and each matmul hides one collective, the
 * first in program order (Wang et al., ASPLOS'23, decompose one
 * collective per matmul; seed 004 2.3). */
bool cost_cm_pairs(const ir_module *m, const cost_hw *hw, const ir_op *mm, int64_t coll_trips);

/* Seconds of one run of a collective (comm_s, over `group` devices) that a
 * paired matmul taking mm_s seconds a run hides: comm_s less
 * cost_collective_matmul_exposed, so min(comm_s, mm_s (G - 1) / G) on a
 * profile with collective matmul, else 0. */
double cost_cm_hidden(const cost_hw *hw, double comm_s, double mm_s, int64_t group);

/* ---- reports (cost_report.c) ---- */

/* --dump-cost: one row per op (value name, op, FLOPs, HBM bytes, comm
 * bytes, compute/memory/comm/op time in microseconds, bound), then the
 * totals.  Ops without a valid cost print "-".  `hw` (may be NULL) names
 * the profile in the header line. */
void cost_print_table(FILE *out, const ir_module *m, const struct cost_hw *hw);

/* --explain: for each contraction the per-device size of each of its dims
 * (the batch and other free dims first, then the contracting ones) above
 * which it is compute-bound against the collectives it needs, and for
 * each collective whether it is latency- or bandwidth-bound and the message
 * size where it switches.  Needs the cost pass to have run and the profile
 * it ran with (`hw` NULL prints a one-line notice). */
void cost_explain(FILE *out, const ir_module *m, const struct cost_hw *hw);

/*
 * Critical per-device size of dim `dim` (any label of einsum `op`, free or
 * contracting): the size above which op's compute time exceeds the time of
 * the collectives it needs (those inserted for it, and the resharding
 * chains that produce its operands).  FLOPs grow linearly with every label
 * while a collective whose value lacks `dim` does not, so the threshold is
 * n * T_comm / T_compute.  Seed 000: for DP/FSDP and the batch dim this is
 * B/X > C / W_ici (2550 on TPU v5p); for Megatron TP and the contracting F
 * of the second matmul it is F/Y > 2550-ish ("Y < F / 2550").  Returns the
 * size (elements), 0 if op needs no collective, or -1 if a collective's
 * bytes grow with `dim` too (then the ratio does not depend on it) or
 * op/dim do not qualify.  The collectives counted are written into `colls`
 * (up to `max`, may be NULL) and their number into `*ncolls` (may be NULL).
 */
double cost_critical_dim_size(const ir_module *m, const ir_op *op, int dim,
                              const ir_op **colls, int max, int *ncolls);

/*
 * Warns on `out` ("einc: warning: needs 20.1 GiB per device ..., tpu-v5e
 * has 14.9 GiB (1.6e+10 bytes) per device") when the program's per-device
 * peak memory (m->totals.peak_memory, cost_memory_peak) exceeds the HBM
 * capacity of `hw` (hw->hbm_bytes); both are per device, since every
 * device holds its own shards.  Returns true if it warned; false, silent,
 * when it fits, when the cost pass has not run or `hw` is NULL.
 */
bool cost_warn_memory(FILE *out, const ir_module *m, const cost_hw *hw);

#endif
