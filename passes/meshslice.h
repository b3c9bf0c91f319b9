/*
 * meshslice.h - what the meshslice pass shares with the cost pass: the time
 * estimate of one MeshSlice op (seed 004, 3.2.2) on a hardware profile.
 */
#ifndef EINC_PASS_MESHSLICE_H
#define EINC_PASS_MESHSLICE_H

#include "cost.h"
#include "ir.h"

/*
 * Fills `c` (per-device figures) for MeshSlice `op` run with `k` slices
 * (op->u.ms.k is not read): the loop of seed 004 3.2.2,
 *     T = prologue + (K-1) * max(AllGather row, AllGather/ReduceScatter
 *         column, partial einsum) + epilogue,
 * as the three-stage pipeline of passes/costmodel/meshslice_model.c: per iteration
 * `pre` = the slower of the partial AllGathers (both directions run at once),
 * `g` = the partial einsum (FLOPs / K on the roofline of `hw`, its
 * split dim padded up to the model's GEMM tile, plus the model's fixed
 * cost per local GEMM), `post` = the partial ReduceScatter;
 * T = pre + g + post + (K-1) * max(pre, g, post).  Each partial collective
 * is cost_ms_collective_time (Eq. 5) on the sub-shard, with T_launch and L_sync
 * from cost_ms_params_from_hw.  t_compute is K * g, t_comm the collectives'
 * sum, comm_bytes the bytes this device sends; time is T (seconds).
 * On a calibrated profile (hw->measured) the stages use the measured
 * figures instead, as the cost pass does for Einsum and collectives: the
 * collective fits of `einc calibrate`, the GEMM rate at the partial
 * einsum's FLOPs, both scaled by the profile's core contention.
 */
void pass_meshslice_cost(const ir_module *m, const cost_hw *hw, const ir_op *op, int k, ir_cost *c);

/* A one-axis collective next to a 2D GEMM: its mesh axis (-1: none) and the
 * position of the dim it works along in the tensor it moves. */
typedef struct pass_ms_coll {
    int axis;
    int dim;
} pass_ms_coll;

/* What pass_meshslice_pattern recognised. */
typedef struct pass_ms_pattern {
    ir_ms_dataflow df;      /* seed 004's dataflow (Table 1) */
    int row_axis, col_axis; /* mesh axes of the rows and columns */
    int split_label;        /* dim id sliced */
} pass_ms_pattern;

/*
 * The seed 004 pattern of two-operand Einsum `e` (its labels and ranks
 * only) when operand i arrives through AllGather gather[i] and the result
 * leaves through ReduceScatter `scatter` (axis -1: no such collective), the
 * einsum's result being unreduced over `unreduced`: OS gathers both
 * operands over different axes on the contracting dim; LS (RS) gathers B
 * (A) on a free dim and reduce-scatters the result onto it over the other
 * axis, the only one it is unreduced over.  The split label must occur
 * once in every tensor that moves, at the collective's position.  Fills
 * *out and returns true, else false.  The meshslice pass checks the IR
 * with it, and the planner its candidate layouts (propagate_meshslice.c),
 * so both see the same loops.
 */
bool pass_meshslice_pattern(const ir_op *e, const pass_ms_coll gather[2], pass_ms_coll scatter,
                            ir_axes unreduced, pass_ms_pattern *out);

#endif
