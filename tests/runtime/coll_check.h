/*
 * coll_check.h - the collective checker shared by the threads test
 * (test_collectives.c) and the MPI test (mpi_collectives.c): each device runs
 * every collective kind on every dim of a rank-3 value and compares its
 * output element by element with a straightforward implementation of the
 * seeds' semantics (seed 001):
 *   AllGather      concatenation along `dim` in group-rank order
 *   ReduceScatter  sum over the group, then block `group rank` along `dim`
 *   AllReduce      sum over the group
 *   AllToAll       block transpose: out block j along `dim` = peer j's block
 *                  `my rank` along `dim2` (AllToAll_{X,J} A[I_X, J] -> A[I, J_X])
 *   Slice          block `group rank` along `dim` of the own input
 * Inputs are small integers, exact in bf16 and in any summation order, so
 * results must match exactly.
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
    int64_t *errors;             /* per device: mismatching elements */
    int64_t *checked;            /* per device: elements compared */
} coll_config;

/* The device function: runs and checks every kind and dim on the group of
 * `arg` (a coll_config), counting mismatches in errors[dev->id]. */
void coll_check_device(rt_device *dev, void *arg);

#endif
