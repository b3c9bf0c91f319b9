/*
 * coll_check.h - the collective checker shared by the threads test
 * (test_collectives.c) and the MPI test (mpi_collectives.c): each device runs
 * every collective kind on every dim of a rank-3 value and compares its
 * output element by element with a straightforward implementation of the
 * seeds' semantics (seed 001):
 *   AllGather      concatenation along `dim` in group-rank order
 *   ReduceScatter  reduction over the group (sum, or with `reduce_op` the
 *                  element-wise max or min), then block `group rank` along `dim`
 *   AllReduce      the same reduction over the group
 *   AllToAll       block transpose: out block j along `dim` = peer j's block
 *                  `my rank` along `dim2` (AllToAll_{X,J} A[I_X, J] -> A[I, J_X])
 *   Slice          block `group rank` along `dim` of the own input
 * and, for groups of two or more axes, every kind but AllReduce with the
 * axes along different dims (RT_DIM_PER_AXIS, seed 001's AllGather_XY of
 * [B_X, D_Y]): blocks along each dim numbered by the axes along it.
 * Inputs are small integers in [-8, 8], exact in bf16 and in any summation
 * order, so results must match exactly; each device also holds a NaN at a
 * few elements (different ones per device) and the last device a -inf,
 * which every reduction must propagate as NumPy does (a NaN in any member
 * gives NaN).  Negative values make a max that starts from 0 (or a min from
 * 0) wrong.
 */
#ifndef EINC_COLL_CHECK_H
#define EINC_COLL_CHECK_H

#include "rt_internal.h"

/* One test configuration shared by the devices. */
typedef struct coll_config {
    const rt_program *prog;      /* mesh */
    int32_t naxes;               /* group axes */
    int32_t axes[RT_MAX_AXES];   /* in group-rank order, major first */
    int32_t dtype;               /* element type */
    int32_t reduce_op;           /* enum rt_reduce_op; not SUM: only AllReduce and
                                    ReduceScatter are run */
    int64_t *errors;             /* per device: mismatching elements */
    int64_t *checked;            /* per device: elements compared */
} coll_config;

/* The device function: runs and checks every kind and dim (and per-axis
 * dims) on the group of
 * `arg` (a coll_config; only the reducing kinds for a max or min), the
 * reducing kinds both through rt_collective and through rt_async_start /
 * rt_async_wait, counting mismatches in errors[dev->id]. */
void coll_check_device(rt_device *dev, void *arg);

#endif
