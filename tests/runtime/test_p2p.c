/*
 * test_p2p.c - rt_send / rt_recv / rt_probe on the threads backend: the transfers of
 * p2p_check.h along every axis of the meshes 4 and 2x3 (every byte
 * against its sender's stamp, and the number of bytes each device must
 * receive, from the mesh alone), and the errors that must end the job with
 * a message (in a child process: rt_fatal ends the process): a peer
 * outside the axis, delta 0, an axis out of range, a size that differs
 * between send and receive, a receive that can never be matched
 * (deadlock) and a message never received.
 */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "p2p_check.h"
#include "rt_test_util.h"

/* Runs p2p_check_device on every device of the mesh and checks counts. */
static void run_checks(int32_t naxes, const int64_t *sizes)
{
    rt_program p = test_mesh_program(naxes, sizes);
    int64_t n = rt_mesh_size(&p);
    p2p_config c = {calloc((size_t)n, sizeof *c.errors), calloc((size_t)n, sizeof *c.checked)};
    rt_threads_launch(&p, 0, RT_BIND_NONE, p2p_check_device, &c);
    for (int64_t i = 0; i < n; i++) {
        CU_ASSERT_EQUAL(c.errors[i], 0);
        CU_ASSERT_EQUAL(c.checked[i], p2p_expected_checked(&p, i));
        if (c.errors[i] || c.checked[i] != p2p_expected_checked(&p, i))
            fprintf(stderr, "\n  device %lld of %lld: %lld wrong of %lld checked (expected %lld)\n",
                    (long long)i, (long long)n, (long long)c.errors[i], (long long)c.checked[i],
                    (long long)p2p_expected_checked(&p, i));
    }
    free(c.errors);
    free(c.checked);
}

static void test_mesh_4(void)
{
    const int64_t sizes[] = {4};
    run_checks(1, sizes);
}

static void test_mesh_2x3(void)
{
    const int64_t sizes[] = {2, 3};
    run_checks(2, sizes);
}

/* Two launches in one process: the mailboxes start empty each time. */
static void test_two_launches(void)
{
    const int64_t sizes[] = {3};
    run_checks(1, sizes);
    run_checks(1, sizes);
}

/* ---- errors, each in a child process ---- */

/* What a failing device does; the others return at once. */
typedef enum bad_case {
    BAD_OUTSIDE,     /* the last device sends to +1 */
    BAD_DELTA0,      /* device 0 sends to itself */
    BAD_AXIS,        /* device 0 names axis 1 of a 1-axis mesh */
    BAD_SIZE,        /* device 0 sends 8 bytes, device 1 expects 16 */
    BAD_DEADLOCK,    /* device 0 waits for a message nobody sends */
    BAD_UNRECEIVED,  /* device 0 sends, nobody receives */
} bad_case;

static void bad_device(rt_device *dev, void *arg)
{
    bad_case k = *(const bad_case *)arg;
    char buf[16] = {0};
    int64_t last = dev->prog->axis_sizes[0] - 1;
    switch (k) {
    case BAD_OUTSIDE:
        if (dev->coord[0] == last)
            rt_send(dev, 0, +1, 0, buf, 8);
        break;
    case BAD_DELTA0:
        if (dev->id == 0)
            rt_send(dev, 0, 0, 0, buf, 8);
        break;
    case BAD_AXIS:
        if (dev->id == 0)
            rt_recv(dev, 1, +1, 0, buf, 8);
        break;
    case BAD_SIZE:
        if (dev->id == 0)
            rt_send(dev, 0, +1, 5, buf, 8);
        if (dev->id == 1)
            rt_recv(dev, 0, -1, 5, buf, 16);
        break;
    case BAD_DEADLOCK:
        if (dev->id == 0)
            rt_recv(dev, 0, +1, 3, buf, 8);
        break;
    case BAD_UNRECEIVED:
        if (dev->id == 0)
            rt_send(dev, 0, +1, 4, buf, 8);
        break;
    }
}

static void launch_bad(void *arg)
{
    const int64_t sizes[] = {4};
    rt_program p = test_mesh_program(1, sizes);
    rt_threads_launch(&p, 0, RT_BIND_NONE, bad_device, arg);
}

/* Runs case k in a child; it must exit 1 with `expect` in its message. */
static void expect_failure(bad_case k, const char *expect)
{
    char err[4096];
    int status = test_in_child(launch_bad, &k, err, sizeof err);
    CU_ASSERT_EQUAL(status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, expect));
    if (status != 1 || !strstr(err, expect))
        fprintf(stderr, "\n  case %d: status %d, expected \"%s\" in: %s\n", (int)k, status,
                expect, err);
}

static void test_peer_outside(void)
{
    expect_failure(BAD_OUTSIDE, "device 3 (X=3): rt_send along X: the peer at X=3+1=4 is "
                   "outside the axis (coordinates 0..3)");
}

static void test_delta_zero(void)
{
    expect_failure(BAD_DELTA0, "rt_send along X with delta 0: a device cannot send to or "
                   "receive from itself");
}

static void test_axis_out_of_range(void)
{
    expect_failure(BAD_AXIS, "rt_recv: mesh axis 1 out of range (the mesh has 1 axes)");
}

static void test_size_mismatch(void)
{
    expect_failure(BAD_SIZE, "device 1 (X=1): rt_recv from device 0 (tag 5): the message has "
                   "8 bytes but the receive expects 16 bytes");
}

static void test_deadlock(void)
{
    expect_failure(BAD_DEADLOCK, "deadlock");
}

static void test_unreceived(void)
{
    expect_failure(BAD_UNRECEIVED, "device 1 (X=1): 1 message(s) sent to this device were "
                   "never received (the first from device 0 with tag 4, 8 bytes)");
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"mesh 4: shift, both ways, tags reversed, order, empty, probe", test_mesh_4},
        {"mesh 2x3: the same along X and along Y", test_mesh_2x3},
        {"two launches in one process", test_two_launches},
        {"a peer outside the axis ends the job", test_peer_outside},
        {"delta 0 ends the job", test_delta_zero},
        {"an axis out of range ends the job", test_axis_out_of_range},
        {"a size mismatch ends the job naming both sizes", test_size_mismatch},
        {"a receive nobody sends to ends the job (deadlock)", test_deadlock},
        {"a message never received ends the job", test_unreceived},
    };
    einc_add_suite("runtime point-to-point (threads)", tests, (int)(sizeof tests / sizeof tests[0]));
}
