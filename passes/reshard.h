/*
 * reshard.h - min-cost resharding of one value (internal to passes/).
 *
 * The planner answers "which sequence of AllGather, Slice, AllToAll,
 * ReduceScatter and AllReduce turns a value of type T with sharding A into
 * sharding B at the least cost?"  It is a Dijkstra search over the
 * sharding states of the value (see reshard.c).  A collective may work over
 * several mesh axes at once, each axis along its own dim (seed 001's
 * AllGather_XY of [B_X, D_Y]), so a one-step multi-axis collective competes
 * with sequences of one-axis ones.  The cost is the bytes moved per device
 * (seed 001's collective table), then, with a hardware profile, the time
 * the cost model gives each step, which is what decides between a one-step
 * collective and the sequences moving the same bytes.  propagate.c uses it
 * both to price candidate layouts and to emit the ops.
 */
#ifndef EINC_RESHARD_H
#define EINC_RESHARD_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"

struct cost_hw;

/* Longest plan the planner returns (a plan never needs more than a few
 * steps per mesh axis). */
#define PASS_RESHARD_MAX_STEPS 16
/* Edges one resharding search may relax before it gives up for a route
 * that needs no search (reshard.c, find).  The states of a value grow with
 * its rank and the mesh's axes, the edges per state exponentially with the
 * rank (every dim may give up axes in one step): a rank-8 value on 4 axes
 * has about 3,400 states and 590,000 edges, and the planner searches
 * thousands of pairs.  Every program under examples/ and tests/ stays
 * below 1,000 edges per search; the budget is 4 times that. */
#define PASS_RESHARD_EDGE_BUDGET 4000

/* One op of a plan. */
typedef struct pass_reshard_step {
    ir_op_kind kind;          /* IR_OP_ALLGATHER, _REDUCESCATTER, _ALLREDUCE, _ALLTOALL or _SLICE */
    ir_coll coll;             /* its axes and dims, as the op's coll arm (ir.h); coll.reduce unset */
    ir_sharding to;           /* the value's sharding after this step */
    double bytes;             /* bytes this step moves per device (seed 001 formulas) */
    double time;              /* seconds this step takes on the profile (0 without one) */
} pass_reshard_step;

/* A whole plan: steps in execution order and their totals. */
typedef struct pass_reshard_plan {
    int nsteps;                                   /* 0 when from == to */
    pass_reshard_step steps[PASS_RESHARD_MAX_STEPS]; /* steps[0] runs first */
    double bytes;                                 /* sum of steps[].bytes, per device */
    double time;                                  /* sum of steps[].time, seconds (0 without a profile) */
    bool bounded;                                 /* the search ran over PASS_RESHARD_EDGE_BUDGET: a
                                                     cheaper search's route, maybe not the cheapest */
} pass_reshard_plan;

/* Per-device bytes moved by one collective over a group of G devices, from
 * seed 001's table (ring algorithms, bandwidth term only):
 *   AllGather      out_bytes * (G-1)/G     (out_bytes: per-device result)
 *   ReduceScatter  in_bytes  * (G-1)/G     (in_bytes: per-device operand)
 *   AllReduce      2 * in_bytes * (G-1)/G  (= ReduceScatter + AllGather)
 *   AllToAll       in_bytes * (G-1)/G / 4  (a quarter of an AllGather on a
 *                                           bidirectional ring, seed 001 Q10)
 *   Slice          0
 * `in_bytes`/`out_bytes` are per-device sizes in bytes; returns bytes. */
double pass_reshard_bytes(ir_op_kind kind, double in_bytes, double out_bytes, int64_t group);

/* A compact key identifying sharding `s` of a rank-`rank` value on a mesh of
 * `naxes` axes (equal shardings give equal keys; 24 bits used). */
uint32_t pass_reshard_key(const ir_sharding *s, int rank, int naxes);

/* Finds the plan moving the fewest bytes per device that turns a value of
 * type `t` (global dims, current sharding t->sh) into sharding `to`; ties
 * in bytes go to fewer Slices onto axes neither sharding uses, then to
 * fewer ops.  Every intermediate sharding keeps every dim divisible by its
 * axes.  Returns false (plan->nsteps = 0, bytes = +inf) when `to` cannot
 * be reached: e.g. it is unreduced over an axis `t` is not unreduced over,
 * or a dim of `to` does not divide. */
bool pass_reshard_find(const ir_module *m, const ir_type *t, const ir_sharding *to,
                       pass_reshard_plan *plan);

/* The same search with each step timed on profile `hw` by cost_op_estimate
 * of the op it becomes (seed 001's formulas, among them the multi-axis
 * rule V / (W_ici * N_axes), or a calibrated profile's fits), as the cost
 * pass will time it.  Among plans moving the fewest bytes (and widening
 * least), the fastest wins; times equal within 1e-9 relative go to fewer
 * ops.  So a one-step collective over several axes and the one-axis
 * collectives it replaces, which move the same bytes, are compared by
 * time (reshard.c says why bytes come first).  steps[].time and
 * plan->time hold the times.  `hw` NULL is pass_reshard_find (every time
 * 0); plan->time is +inf when unreachable. */
bool pass_reshard_find_timed(const ir_module *m, const struct cost_hw *hw, const ir_type *t,
                             const ir_sharding *to, pass_reshard_plan *plan);

/* The plan pass_reshard_find_timed would give if every collective worked
 * along a single dim (no per-axis step; multi-axis collectives along one
 * dim stay): what a plan with a per-axis step is compared with in the
 * reasons propagate writes. */
bool pass_reshard_find_one_dim(const ir_module *m, const struct cost_hw *hw, const ir_type *t,
                               const ir_sharding *to, pass_reshard_plan *plan);

/* The route the searches above fall back to when they run over
 * PASS_RESHARD_EDGE_BUDGET, found without searching: AllReduce the partial
 * sums `to` does not keep, AllGather every dim whose axes differ from
 * `to`'s, Slice those dims to `to`'s axes.  plan->bounded is set.  False
 * when `to` is unreachable (as pass_reshard_find). */
bool pass_reshard_find_direct(const ir_module *m, const struct cost_hw *hw, const ir_type *t,
                              const ir_sharding *to, pass_reshard_plan *plan);

/* Seconds one collective step `st` of a value of type `t` (global dims)
 * held as `from` takes on `hw`: cost_op_estimate of the op it would emit
 * (seed 001 formulas, or the calibrated fits of a measured profile; a
 * Slice is its local copy).  0 when hw is NULL. */
double pass_reshard_step_time(const ir_module *m, const struct cost_hw *hw, const ir_type *t,
                              const ir_sharding *from, const pass_reshard_step *st);

/* Emits `plan` for value `v`: one op per step, each before `before` (NULL:
 * at the end of the module), each with a new value of v's tensor, except
 * that the last step writes `last` when non-NULL (its type's sharding is set
 * to the plan's final one; it keeps its identity, uses and constraint).
 * Step k gets provenance (for_op, operand) and the reason whys[k].
 * Returns the final value (v itself when the plan is empty). */
ir_value *pass_reshard_emit(ir_module *m, ir_value *v, const pass_reshard_plan *plan,
                            ir_op *before, ir_value *last, ir_op *for_op, int operand,
                            const char *const *whys);

#endif
