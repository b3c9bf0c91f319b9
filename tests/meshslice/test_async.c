/*
 * test_async.c - the asynchronous collectives of runtime/async.c on the
 * threads backend (a communication thread per device): several
 * AllGathers and ReduceScatters in flight at once over both axes of a 2x2
 * mesh, waited for in reverse order, more collectives in a row than the
 * queue holds, and every result checked against the collective's meaning.
 */
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "rt_internal.h"

/* Per-device error counts, written by each device thread into its slot. */
typedef struct async_result {
    int64_t errors[4];  /* wrong elements per device */
    int64_t checked[4]; /* elements checked per device */
} async_result;

static void noop_run(rt_device *dev, void *const *in, void *const *out)
{
    (void)dev;
    (void)in;
    (void)out;
}

/* AllGather over `axis` of a [2, 3] f32 block along dim 1. */
static const rt_coll_desc *ag_desc(rt_coll_desc *d, int32_t axis)
{
    memset(d, 0, sizeof *d);
    *d = (rt_coll_desc){.kind = RT_ALLGATHER, .dtype = RT_F32, .naxes = 1, .axes = {axis}, .rank = 2,
                        .in_shape = {2, 3}, .out_shape = {2, 6}, .dim = 1, .dim2 = -1, .op_id = 0};
    return d;
}

/* ReduceScatter over `axis` of a [4, 3] f32 block along dim 0. */
static const rt_coll_desc *rs_desc(rt_coll_desc *d, int32_t axis)
{
    memset(d, 0, sizeof *d);
    *d = (rt_coll_desc){.kind = RT_REDUCESCATTER, .dtype = RT_F32, .naxes = 1, .axes = {axis}, .rank = 2,
                        .in_shape = {4, 3}, .out_shape = {2, 3}, .dim = 0, .dim2 = -1, .op_id = 1};
    return d;
}

static void check(async_result *r, int64_t id, float got, float want)
{
    r->checked[id]++;
    if (got != want)
        r->errors[id]++;
}

static void device(rt_device *dev, void *arg)
{
    async_result *r = arg;
    int64_t x = dev->coord[0], y = dev->coord[1], id = dev->id;
    float ag_in[2][6], ag_out[2][2][6], rs_in[2][4 * 3], rs_out[2][2 * 3];
    for (int a = 0; a < 2; a++)
        for (int i = 0; i < 6; i++)
            ag_in[a][i] = (float)(100 * x + 10 * y + i + 1000 * a);
    for (int a = 0; a < 2; a++)
        for (int i = 0; i < 12; i++)
            rs_in[a][i] = (float)((a ? y + 1 : x + 1) * i + (a ? x : y));
    rt_coll_desc d[4];
    /* Rounds of four collectives in flight, waited for in reverse order;
     * 5 rounds = 20 collectives, more than the queue holds at once. */
    for (int round = 0; round < 5; round++) {
        rt_async *use = rt_async_open(dev);
        int64_t h[4];
        h[0] = rt_async_start(use, ag_desc(&d[0], 1), ag_in[0], ag_out[0]);
        h[1] = rt_async_start(use, rs_desc(&d[1], 0), rs_in[0], rs_out[0]);
        h[2] = rt_async_start(use, ag_desc(&d[2], 0), ag_in[1], ag_out[1]);
        h[3] = rt_async_start(use, rs_desc(&d[3], 1), rs_in[1], rs_out[1]);
        for (int k = 3; k >= 0; k--)
            rt_async_wait(use, h[k]);
        rt_async_close(use);
        /* AllGather over Y: block r along dim 1 comes from y = r. */
        for (int i = 0; i < 2; i++)
            for (int rr = 0; rr < 2; rr++)
                for (int j = 0; j < 3; j++) {
                    check(r, id, ag_out[0][i][rr * 3 + j], (float)(100 * x + 10 * rr + i * 3 + j));
                    check(r, id, ag_out[1][i][rr * 3 + j], (float)(100 * rr + 10 * y + i * 3 + j + 1000));
                }
        /* ReduceScatter over X of (x+1)*i + y: 3*i + 2y, rows of block x;
         * over Y of (y+1)*i + x: 3*i + 2x, rows of block y. */
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) {
                int64_t gx = (x * 2 + i) * 3 + j, gy = (y * 2 + i) * 3 + j;
                check(r, id, rs_out[0][i * 3 + j], (float)(3 * gx + 2 * y));
                check(r, id, rs_out[1][i * 3 + j], (float)(3 * gy + 2 * x));
            }
        memset(ag_out, 0, sizeof ag_out);
        memset(rs_out, 0, sizeof rs_out);
    }
    /* Closing with collectives still in flight completes them first. */
    rt_async *q = rt_async_open(dev);
    rt_async_start(q, ag_desc(&d[0], 1), ag_in[0], ag_out[0]);
    rt_async_start(q, ag_desc(&d[2], 0), ag_in[1], ag_out[1]);
    rt_async_close(q);
    check(r, id, ag_out[0][1][5], (float)(100 * x + 10 + 5));
    check(r, id, ag_out[1][1][5], (float)(100 + 10 * y + 5 + 1000));
}

static void test_async_threads(void)
{
    rt_program p;
    memset(&p, 0, sizeof p);
    p.abi_version = RT_ABI_VERSION;
    p.naxes = 2;
    memcpy(p.axis_names, "XY", 2);
    p.axis_sizes[0] = p.axis_sizes[1] = 2;
    p.run = noop_run;
    async_result r;
    memset(&r, 0, sizeof r);
    rt_threads_launch(&p, 0, RT_BIND_NONE, device, &r);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(r.errors[i], 0);
        CU_ASSERT_EQUAL(r.checked[i], 5 * (24 + 12) + 2);
    }
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"AllGather and ReduceScatter in flight on a 2x2 mesh", test_async_threads},
    };
    einc_add_suite("meshslice_async", tests, (int)(sizeof tests / sizeof tests[0]));
}
