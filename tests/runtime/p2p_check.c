/*
 * p2p_check.c - the transfers of p2p_check.h and their checks.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "p2p_check.h"

#define LARGE P2P_LARGE

unsigned char p2p_stamp(int64_t src, int64_t seq, int64_t i)
{
    uint64_t h = (uint64_t)src * 0x9e3779b97f4a7c15u ^ (uint64_t)seq * 0xbf58476d1ce4e5b9u;
    return (unsigned char)((h >> 32) + (uint64_t)i * 131u + (uint64_t)(i >> 8));
}

/* Sends message `seq` of this device (n stamped bytes) to delta with tag. */
static void send_stamped(rt_device *dev, int32_t axis, int32_t delta, int32_t tag, int64_t seq,
                         int64_t n)
{
    unsigned char *b = malloc(n ? (size_t)n : 1);
    for (int64_t i = 0; i < n; i++)
        b[i] = p2p_stamp(dev->id, seq, i);
    rt_send(dev, axis, delta, tag, n ? b : NULL, n);
    /* The send has copied the bytes: overwriting them now must not reach
     * the receiver. */
    memset(b, 0xEE, n ? (size_t)n : 1);
    free(b);
}

/* The linear id of the device `delta` steps along `axis` (row-major). */
static int64_t peer_id(const rt_device *dev, int32_t axis, int32_t delta)
{
    int64_t stride = 1;
    for (int32_t a = dev->prog->naxes - 1; a > axis; a--)
        stride *= dev->prog->axis_sizes[a];
    return dev->id + delta * stride;
}

/* Receives n bytes from delta with tag and checks them against the
 * peer's message `seq`. */
static void recv_checked(rt_device *dev, const p2p_config *c, int32_t axis, int32_t delta,
                         int32_t tag, int64_t seq, int64_t n)
{
    unsigned char *b = malloc(n ? (size_t)n : 1);
    memset(b, 0x5A, n ? (size_t)n : 1);
    rt_recv(dev, axis, delta, tag, n ? b : NULL, n);
    int64_t src = peer_id(dev, axis, delta), bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += b[i] != p2p_stamp(src, seq, i);
    c->errors[dev->id] += bad;
    c->checked[dev->id] += n;
    if (n == 0) /* a zero-byte message is checked by arriving */
        c->checked[dev->id]++;
    free(b);
}

/* Every transfer of p2p_check.h along `axis`. */
static void check_axis(rt_device *dev, const p2p_config *c, int32_t axis)
{
    int64_t z = dev->coord[axis], S = dev->prog->axis_sizes[axis];
    int next = z + 1 < S, prev = z > 0;

    /* shift */
    if (next)
        send_stamped(dev, axis, +1, 0, 1, 1000);
    if (prev)
        recv_checked(dev, c, axis, -1, 0, 1, 1000);

    /* both ways, small then large */
    const int64_t sizes[2] = {96, LARGE};
    for (int k = 0; k < 2; k++) {
        int32_t fwd = 10 + 2 * k, bwd = 11 + 2 * k; /* activation, gradient */
        if (next)
            send_stamped(dev, axis, +1, fwd, 100 + k, sizes[k]);
        if (prev)
            send_stamped(dev, axis, -1, bwd, 200 + k, sizes[k]);
        if (prev)
            recv_checked(dev, c, axis, -1, fwd, 100 + k, sizes[k]);
        if (next)
            recv_checked(dev, c, axis, +1, bwd, 200 + k, sizes[k]);
    }

    /* tags reversed */
    if (next)
        for (int32_t t = 0; t < 8; t++)
            send_stamped(dev, axis, +1, 20 + t, 300 + t, 8 * (t + 1));
    if (prev)
        for (int32_t t = 7; t >= 0; t--)
            recv_checked(dev, c, axis, -1, 20 + t, 300 + t, 8 * (t + 1));

    /* order within a tag */
    if (prev)
        for (int k = 0; k < 5; k++)
            send_stamped(dev, axis, -1, 30, 400 + k, 64);
    if (next)
        for (int k = 0; k < 5; k++)
            recv_checked(dev, c, axis, +1, 30, 400 + k, 64);

    /* empty */
    if (next)
        send_stamped(dev, axis, +1, 40, 500, 0);
    if (prev)
        recv_checked(dev, c, axis, -1, 40, 500, 0);

    /* probe: the sender waits for the receiver's go (tag 51), so the
     * message (tag 50) is absent at the first probe; it shows once sent,
     * another tag (52, never sent) does not, and it is gone once taken. */
    if (prev) {
        c->errors[dev->id] += rt_probe(dev, axis, -1, 50) != 0;
        rt_send(dev, axis, -1, 51, NULL, 0);
        while (!rt_probe(dev, axis, -1, 50))
            sched_yield();
        c->errors[dev->id] += rt_probe(dev, axis, -1, 52) != 0;
        recv_checked(dev, c, axis, -1, 50, 600, 32);
        c->errors[dev->id] += rt_probe(dev, axis, -1, 50) != 0;
    }
    if (next) {
        rt_recv(dev, axis, +1, 51, NULL, 0);
        send_stamped(dev, axis, +1, 50, 600, 32);
    }
}

void p2p_check_device(rt_device *dev, void *arg)
{
    const p2p_config *c = arg;
    for (int32_t a = 0; a < dev->prog->naxes; a++)
        check_axis(dev, c, a);
}

int64_t p2p_expected_checked(const rt_program *prog, int64_t id)
{
    int64_t coord[RT_MAX_AXES], n = 0;
    rt_mesh_coord(prog, id, coord);
    for (int32_t a = 0; a < prog->naxes; a++) {
        if (coord[a] > 0) /* shift, forward small + large, 8 tags, the empty one, the probed one */
            n += 1000 + 96 + LARGE + 8 * (1 + 2 + 3 + 4 + 5 + 6 + 7 + 8) + 1 + 32;
        if (coord[a] + 1 < prog->axis_sizes[a]) /* backward small + large, 5 in order */
            n += 96 + LARGE + 5 * 64;
    }
    return n;
}
