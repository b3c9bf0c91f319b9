/*
 * pipe_items.c - rt_pipe_item_begin / rt_pipe_chunk_item_begin /
 * rt_pipe_item_end (einrt.h): the work items ("F m", "B m", zero-bubble's
 * "W m", the interleaved schedule's "F m.c" of chunk c) of a pipelined
 * program, for --trace and --profile.
 *
 * Each item becomes a span in the device's profile list (the ops' list,
 * under a negative id, rt_span_item_id), so trace.c's collection brings
 * it to the root with the ops' spans, in the order the device ran them.
 * While an item is open, rt_recv (p2p.c) calls rt_pipe_recv_begin/end
 * around its backend's receive and adds a RT_SPAN_RECV_WAIT span: the
 * item's receive blocks until its neighbour's send arrives, and that is
 * bubble, not work (pipe_bubble.c subtracts it from the item's time).
 *
 * When neither --trace nor --profile is on (dev->profiling is OFF) both
 * functions return after one test, so a pipelined run pays nothing.
 *
 * Where device threads take turns on a CPU (dev->core set, rt_turns.h),
 * an item is also the unit of a turn: its begin waits for the CPU's turn
 * and its end gives it to the oldest ready stage.  Why item boundaries:
 * that is where a stage has finished a piece of the schedule (a
 * microbatch's forward, backward or weight gradients) and the next one may
 * need another stage's output, so handing the CPU over there delays no
 * item that has begun; the kernel's time slices (about an item long here)
 * cut items anywhere instead, and where they cut moves the bubble
 * (docs/pipeline.md, "Where the machine prediction's miss comes from").
 * The turn is taken before the begin mark and given after the end mark:
 * a stage's wait for its CPU is idle time between items, as the "turns"
 * prediction of bench/pipeline.py counts it.
 */
#include "rt_internal.h"
#include "rt_turns.h"

/* Opens item `kind` of microbatch `mb`, chunk `chunk` (-1: none). */
static void item_begin(rt_device *dev, int32_t kind, int32_t mb, int32_t chunk)
{
    if (!dev->profiling)
        return;
    if (kind != 'F' && kind != 'B' && kind != 'W')
        rt_fatal(dev, "rt_pipe_item_begin: kind %d is not 'F', 'B' or 'W'", kind);
    if (mb < 0 || mb >= (1 << RT_SPAN_ITEM_CHUNK_SHIFT))
        rt_fatal(dev, "rt_pipe_item_begin: microbatch %d out of range", mb);
    if (chunk < -1 || chunk >= 255)
        rt_fatal(dev, "rt_pipe_chunk_item_begin: chunk %d out of range", chunk);
    if (dev->profile.item_id != 0)
        rt_fatal(dev, "rt_pipe_item_begin of %c%d inside another item (a missing "
                 "rt_pipe_item_end)", kind, mb);
    dev->profile.item_id = rt_span_item_id(kind, mb, chunk);
    dev->profile.item_open = rt_now();
}

void rt_pipe_item_begin(rt_device *dev, int32_t kind, int32_t microbatch)
{
    if (dev->core)
        rt_turn_take(dev);
    item_begin(dev, kind, microbatch, -1);
}

void rt_pipe_chunk_item_begin(rt_device *dev, int32_t kind, int32_t microbatch, int32_t chunk)
{
    if (chunk < 0)
        rt_fatal(dev, "rt_pipe_chunk_item_begin: negative chunk %d", chunk);
    if (dev->core)
        rt_turn_take(dev);
    item_begin(dev, kind, microbatch, chunk);
}

void rt_pipe_item_end(rt_device *dev)
{
    if (dev->profiling) {
        if (dev->profile.item_id == 0)
            rt_fatal(dev, "rt_pipe_item_end without an open item");
        rt_profile_add_span(dev, dev->profile.item_id, dev->profile.item_open, rt_now());
        dev->profile.item_id = 0;
    }
    if (dev->core)
        rt_turn_give(dev);
}

double rt_pipe_recv_begin(const rt_device *dev)
{
    return dev->profiling && dev->profile.item_id != 0 ? rt_now() : -1;
}

void rt_pipe_recv_end(rt_device *dev, double begin)
{
    if (begin >= 0)
        rt_profile_add_span(dev, RT_SPAN_RECV_WAIT, begin, rt_now());
}
