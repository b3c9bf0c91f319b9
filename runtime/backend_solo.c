/*
 * backend_solo.c - the backend of a device that has no peers: the --check
 * reference run (a mesh of one device) and unit tests of local kernels.
 * Every group has one member, so rt_collective never reaches `collective`.
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
};
