/*
 * reshard.h - min-cost resharding of one value (internal to passes/).
 *
 * The planner answers "which sequence of AllGather, Slice, AllToAll,
 * ReduceScatter and AllReduce turns a value of type T with sharding A into
 * sharding B while moving the fewest bytes per device?"  It is a Dijkstra
 * search over the sharding states of the value (see reshard.c); the edge
 * costs are the per-device byte counts of seed 001's collective table.
 * Given a hardware profile it also says how long that plan takes (each
 * step timed by the cost model), which is what propagate's layout search
 * compares.  propagate.c uses it both to price candidate layouts and to
 * emit the ops.
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

/* One op of a plan, in ir.h's coll encoding. */
typedef struct pass_reshard_step {
    ir_op_kind kind;          /* IR_OP_ALLGATHER, _REDUCESCATTER, _ALLREDUCE, _ALLTOALL or _SLICE */
    int naxes;                /* number of mesh axes the op works over (>= 1) */
    int8_t axes[IR_MAX_AXES]; /* those mesh axis ids, major to minor */
    int dim;                  /* position of the dim it gathers/slices/scatters, -1 for AllReduce */
    int dim2;                 /* AllToAll: position receiving the axes; else -1 */
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

/* Finds the min-cost plan turning a value of type `t` (global dims, current
 * sharding t->sh) into sharding `to`.  Ties in bytes are broken by fewer ops.
 * Every intermediate sharding keeps every dim divisible by its axes.
 * Returns false (plan->nsteps = 0, bytes = +inf) when `to` cannot be reached:
 * e.g. it is unreduced over an axis `t` is not unreduced over, or a dim of
 * `to` does not divide. */
bool pass_reshard_find(const ir_module *m, const ir_type *t, const ir_sharding *to,
                       pass_reshard_plan *plan);

/* The same plan, with each step timed on profile `hw` (steps[].time and
 * plan->time: cost_op_estimate of the op the step becomes, as the cost pass
 * will time it; seed 001's formulas or a calibrated profile's fits).  The
 * route is still the minimum-bytes one (reshard.c says why).  `hw` NULL is
 * pass_reshard_find (every time 0); plan->time is +inf when unreachable. */
bool pass_reshard_find_timed(const ir_module *m, const struct cost_hw *hw, const ir_type *t,
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
