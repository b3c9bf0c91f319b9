/*
 * pipe_fill.c - rt_pipe_next (einrt.h): zero-bubble's W items placed at
 * run time (`einc --w-fill=greedy`, docs/pipeline.md "W items placed at
 * run time").
 *
 * A static table fixes when each stage runs its W items (the dL/dW half of
 * a backward, which needs nothing from another stage).  Where the table
 * makes a stage wait for a neighbour's activation or gradient, the wait it
 * planned is filled, but a run adds waits the table did not plan (jitter,
 * a receive's wake-up).  Here the stage, about to start an item that
 * receives, asks whether the message has arrived (rt_probe); if not, it
 * runs its next W now, when that W's B has run, and asks again.
 *
 * Only the earliest W not yet run is a candidate, never a later one: the W
 * items then run in table order among themselves, and since every sum a W
 * adds into (a weight gradient, the embedding's or head's) is added to by
 * W items only (each accumulated value is defined by one op, in one item
 * kind), its additions happen in the same order as under the static
 * table: results are bitwise equal.  A W run early frees its microbatch's
 * frame early, so no stage holds more than the table would.
 */
#include "rt_internal.h"
#include "rt_pipe_fill.h"

enum { KIND_F = 0, KIND_B = 1, KIND_W = 2 };

/* The earliest W of the row not yet run, if its microbatch's B is behind
 * the cursor (has run); else -1. */
static int32_t next_w(const int32_t *row, int32_t n, int32_t cursor, const uint8_t *done)
{
    int32_t w = cursor + 1;
    while (w < n && ((row[w] & 3) != KIND_W || done[w]))
        w++;
    if (w >= n)
        return -1;
    int32_t b = (row[w] & ~3) | KIND_B;
    for (int32_t k = 0; k < cursor; k++)
        if (row[k] == b)
            return w;
    return -1;
}

int32_t rt_pipe_fill_choose(const int32_t *row, int32_t n, int32_t *cursor, uint8_t *done,
                            uint32_t recv_kinds, rt_pipe_arrived_fn arrived, void *ctx)
{
    int32_t at = *cursor;
    while (at < n && done[at]) /* a W that already ran early */
        at++;
    *cursor = at;
    if (at >= n)
        return -1;
    if (((recv_kinds >> (row[at] & 3)) & 1) && !arrived(ctx, row[at])) {
        int32_t w = next_w(row, n, at, done);
        if (w >= 0) {
            done[w] = 1;
            return w;
        }
    }
    done[at] = 1;
    *cursor = at + 1;
    return at;
}

/* The probe's arguments: the device and the stage axis. */
typedef struct probe_ctx {
    rt_device *dev;
    int32_t axis;
} probe_ctx;

/* The hop's tag and direction for the item's receive (codegen/pipeline.c,
 * hop: tag 2 unit + parity, the forward's activation from z - 1, the
 * backward's gradient from z + 1). */
static int32_t arrived(void *ctx, int32_t code)
{
    const probe_ctx *p = ctx;
    int32_t backward = (code & 3) == KIND_B;
    return rt_probe(p->dev, p->axis, backward ? +1 : -1, 2 * (code >> 2) + backward);
}

int32_t rt_pipe_next(rt_device *dev, int32_t axis, const int32_t *row, int32_t n, int32_t *cursor,
                     uint8_t *done)
{
    if (axis < 0 || axis >= dev->prog->naxes)
        rt_fatal(dev, "rt_pipe_next: mesh axis %d out of range (the mesh has %d axes)", axis,
                 dev->prog->naxes);
    int64_t z = dev->coord[axis], Z = dev->prog->axis_sizes[axis];
    uint32_t kinds = (z > 0 ? 1u << KIND_F : 0) | (z + 1 < Z ? 1u << KIND_B : 0);
    probe_ctx p = {dev, axis};
    int32_t pos = rt_pipe_fill_choose(row, n, cursor, done, kinds, arrived, &p);
    if (pos < 0)
        rt_fatal(dev, "rt_pipe_next: every one of the stage's %d items has run", n);
    return pos;
}
