/*
 * backend_solo.c - the backend of a device that has no peers: the --check
 * reference run (a mesh of one device) and unit tests of local kernels.
 * Every group has one member, so rt_collective never reaches `collective`.
 * Nor do rt_send / rt_recv / rt_probe reach `send` / `recv` on a mesh of one device
 * (every peer is outside its axes, p2p.c); a test that gives a larger mesh
 * the solo table gets an error, not a transfer.
 */
#include <unistd.h>

#include "rt_internal.h"

static void solo_barrier(rt_device *dev, uint32_t mask)
{
    (void)dev;
    (void)mask;
}

static void solo_collective(rt_device *dev, const rt_coll_desc *d, const rt_group_view *g,
                            const void *in, void *out)
{
    (void)in;
    (void)out;
    rt_fatal(dev, "collective (op %d) over %lld devices on a device without peers", d->op_id,
             (long long)g->size);
}

/* Ends the job: a device without peers has no one to exchange messages with. */
RT_NORETURN static void solo_p2p(rt_device *dev, const char *what, int64_t peer)
{
    rt_fatal(dev, "%s with device %lld on a device without peers", what, (long long)peer);
}

static void solo_send(rt_device *dev, int64_t peer, int32_t tag, const void *buf, int64_t bytes)
{
    (void)tag;
    (void)buf;
    (void)bytes;
    solo_p2p(dev, "rt_send", peer);
}

static void solo_recv(rt_device *dev, int64_t peer, int32_t tag, void *buf, int64_t bytes)
{
    (void)tag;
    (void)buf;
    (void)bytes;
    solo_p2p(dev, "rt_recv", peer);
}

static int32_t solo_probe(rt_device *dev, int64_t peer, int32_t tag)
{
    (void)tag;
    solo_p2p(dev, "rt_probe", peer);
}

static void solo_collect_i64(rt_device *dev, int64_t v, int64_t *all)
{
    if (all)
        all[dev->id] = v;
}

static void solo_gather(rt_device *dev, const rt_tensor_desc *t, const void *local, void *global)
{
    if (global)
        rt_place_block(dev->prog, t, dev->coord, local, global);
}

RT_NORETURN static void solo_abort(void)
{
    _exit(1);
}

const rt_device_ops rt_solo_ops = {
    .name = "solo",
    .barrier = solo_barrier,
    .collective = solo_collective,
    .collect_i64 = solo_collect_i64,
    .gather = solo_gather,
    .abort = solo_abort,
    .send = solo_send,
    .recv = solo_recv,
    .probe = solo_probe,
};
