/*
 * pipe_items.c - rt_pipe_item_begin / rt_pipe_item_end (einrt.h): the work
 * items ("F m", "B m", and zero-bubble's "W m") of a pipelined program, for --trace and --profile.
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
 */
#include "rt_internal.h"

void rt_pipe_item_begin(rt_device *dev, int32_t kind, int32_t microbatch)
{
    if (!dev->profiling)
        return;
    if (kind != 'F' && kind != 'B' && kind != 'W')
        rt_fatal(dev, "rt_pipe_item_begin: kind %d is not 'F', 'B' or 'W'", kind);
    if (microbatch < 0 || microbatch >= (1 << 29))
        rt_fatal(dev, "rt_pipe_item_begin: microbatch %d out of range", microbatch);
    if (dev->profile.item_id != 0)
        rt_fatal(dev, "rt_pipe_item_begin of %c%d inside another item (a missing "
                 "rt_pipe_item_end)", kind, microbatch);
    dev->profile.item_id = rt_span_item_id(kind, microbatch);
    dev->profile.item_open = rt_now();
}

void rt_pipe_item_end(rt_device *dev)
{
    if (!dev->profiling)
        return;
    if (dev->profile.item_id == 0)
        rt_fatal(dev, "rt_pipe_item_end without an open item");
    rt_profile_add_span(dev, dev->profile.item_id, dev->profile.item_open, rt_now());
    dev->profile.item_id = 0;
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
