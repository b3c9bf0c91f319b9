/*
 * p2p.c - rt_send / rt_recv / rt_probe (einrt.h): the checks every
 * backend shares, then the device's backend hooks (rt_device_ops.send /
 * recv / probe).
 *
 * The peer is named by a mesh axis and a signed step along it, as a
 * pipeline names its neighbouring stages (delta +1: the next stage, -1:
 * the previous one); here it becomes the linear id of the device whose
 * coordinate along `axis` is ours plus `delta`, its other coordinates
 * ours.  Checked before any backend sees the call:
 *   - the axis exists (0 <= axis < naxes);
 *   - delta != 0: a device does not send to itself (a stage hands its own
 *     activations over in memory; refusing it keeps every backend's
 *     semantics the same, including the solo one, which has no mailbox);
 *   - the peer's coordinate lies in [0, axis size): the first stage has no
 *     previous one and the last no next one, and a transfer past the ends
 *     is a bug in the schedule, not a wrap-around;
 *   - tag >= 0, bytes >= 0, and buf is not NULL when bytes > 0 (a
 *     probe moves no bytes).
 * A size that differs between the send and the receive is found by the
 * receiving backend, which reports it through rt_p2p_size_mismatch.
 */
#include "rt_internal.h"

/* Fatal unless the arguments name a valid transfer; returns the peer's
 * linear device id.  `what` is "rt_send" or "rt_recv", for messages. */
static int64_t p2p_peer(rt_device *dev, const char *what, int32_t axis, int32_t delta,
                        int32_t tag, const void *buf, int64_t bytes)
{
    const rt_program *p = dev->prog;
    if (axis < 0 || axis >= p->naxes)
        rt_fatal(dev, "%s: mesh axis %d out of range (the mesh has %d axes)", what, axis,
                 p->naxes);
    char name = p->axis_names[axis];
    if (delta == 0)
        rt_fatal(dev, "%s along %c with delta 0: a device cannot send to or receive from "
                 "itself", what, name);
    int64_t size = p->axis_sizes[axis], c = dev->coord[axis] + delta;
    if (c < 0 || c >= size)
        rt_fatal(dev, "%s along %c: the peer at %c=%lld%+d=%lld is outside the axis "
                 "(coordinates 0..%lld)", what, name, name, (long long)dev->coord[axis],
                 delta, (long long)c, (long long)(size - 1));
    if (tag < 0)
        rt_fatal(dev, "%s along %c: negative tag %d", what, name, tag);
    if (bytes < 0)
        rt_fatal(dev, "%s along %c (tag %d): negative size of %lld bytes", what, name, tag,
                 (long long)bytes);
    if (bytes > 0 && !buf)
        rt_fatal(dev, "%s along %c (tag %d): NULL buffer for %lld bytes", what, name, tag,
                 (long long)bytes);
    /* Row-major linear id (device.c): the axis's place value is the
     * product of the sizes of the axes after it. */
    int64_t stride = 1;
    for (int32_t a = p->naxes - 1; a > axis; a--)
        stride *= p->axis_sizes[a];
    return dev->id + (int64_t)delta * stride;
}

void rt_send(rt_device *dev, int32_t axis, int32_t delta, int32_t tag, const void *buf,
             int64_t bytes)
{
    int64_t peer = p2p_peer(dev, "rt_send", axis, delta, tag, buf, bytes);
    dev->ops->send(dev, peer, tag, buf, bytes);
}

void rt_recv(rt_device *dev, int32_t axis, int32_t delta, int32_t tag, void *buf, int64_t bytes)
{
    int64_t peer = p2p_peer(dev, "rt_recv", axis, delta, tag, buf, bytes);
    double wait = rt_pipe_recv_begin(dev); /* blocked inside an item: bubble (pipe_items.c) */
    dev->ops->recv(dev, peer, tag, buf, bytes);
    rt_pipe_recv_end(dev, wait);
}

int32_t rt_probe(rt_device *dev, int32_t axis, int32_t delta, int32_t tag)
{
    int64_t peer = p2p_peer(dev, "rt_probe", axis, delta, tag, NULL, 0);
    return dev->ops->probe(dev, peer, tag) != 0;
}

void rt_p2p_size_mismatch(const rt_device *dev, int64_t peer, int32_t tag, int64_t sent,
                          int64_t expected)
{
    rt_fatal(dev, "rt_recv from device %lld (tag %d): the message has %lld bytes but the "
             "receive expects %lld bytes (sender and receiver disagree on its shape or dtype)",
             (long long)peer, tag, (long long)sent, (long long)expected);
}
