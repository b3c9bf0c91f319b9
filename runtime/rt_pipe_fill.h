/*
 * rt_pipe_fill.h - the choice of rt_pipe_next (einrt.h) without a device:
 * pipe_fill.c's rule, given a test of whether an item's input has arrived,
 * so that a unit test can drive it through hand-worked rows
 * (tests/runtime/test_pipe_fill.c).
 */
#ifndef EINC_RT_PIPE_FILL_H
#define EINC_RT_PIPE_FILL_H

#include <stdint.h>

/* Whether the message that item `code` (unit * 4 + kind) receives first
 * has arrived: 1 or 0. */
typedef int32_t (*rt_pipe_arrived_fn)(void *ctx, int32_t code);

/* rt_pipe_next's choice on a row of n codes with `cursor` and `done` (as
 * there): `recv_kinds` has bit k set when items of kind k (0 F, 1 B, 2 W)
 * start with a receive on this stage; `arrived` is asked about the item at
 * the cursor only when its kind receives.  Returns the position to run, or
 * -1 when every position has run. */
int32_t rt_pipe_fill_choose(const int32_t *row, int32_t n, int32_t *cursor, uint8_t *done,
                            uint32_t recv_kinds, rt_pipe_arrived_fn arrived, void *ctx);

#endif
