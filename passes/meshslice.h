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

#endif
