/*
 * test_core_turns.c - device threads that outnumber their CPUs take turns
 * at pipeline items (runtime/core_turns.c, rt_turns.h).
 *
 *   - the turn is granted in request order, also to a waiter a sender
 *     queued on a receiver's behalf (the API alone, deterministic);
 *   - two devices on one CPU running independent items: with turns no
 *     item overlaps another and the devices alternate; with the kernel's
 *     sharing (EINC_CORE_SHARING=kernel's RT_BIND_CORE), the forced
 *     alternative, the same items do overlap (each yields the CPU inside);
 *   - three devices on one CPU: a receiver whose message arrives while the
 *     sender's item runs goes before a stage that asked for the CPU after
 *     that arrival; then ping-pong items (each receive blocks) and a
 *     barrier inside an item, which deadlock if a blocked thread keeps its
 *     turn.  The whole run must end before an alarm, and the turns must be
 *     on (every device's `core` the one CPU's).
 *
 * The launches run in a child process (test_in_child) whose CPUs are
 * restricted to one with sched_setaffinity, so the parent's are untouched
 * and a hang ends in SIGALRM instead of blocking the suite.
 */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET */
#include <CUnit/CUnit.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cunit_main.h"
#include "rt_test_util.h"
#include "rt_turns.h"

/* Runs launch(arg) in a child on one CPU with a 30 s alarm; the child
 * exits 0 when its checks hold, else prints what failed.  Asserts that. */
static void run_child(void (*launch)(void *), void *arg)
{
    char err[4096];
    int status = test_in_child(launch, arg, err, sizeof err);
    CU_ASSERT_EQUAL(status, 0);
    if (status != 0)
        fprintf(stderr, "\n  child status %d: %s\n", status, err);
}

/* In the child: pins the process to its first allowed CPU, arms the alarm. */
static void one_cpu(void)
{
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        _exit(3);
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed)) {
            CPU_SET(c, &one);
            break;
        }
    if (sched_setaffinity(0, sizeof one, &one) != 0)
        _exit(3);
    alarm(30);
}

/* ---- request order, through the API ---- */

typedef struct fifo_arg {
    rt_device *dev;          /* the requesting device */
    rt_turn_waiter *queued;  /* non-NULL: a waiter a "sender" queued for it */
    pthread_mutex_t *mu;     /* guards order / n */
    int64_t *order;          /* device ids in the order they got the turn */
    int *n;
} fifo_arg;

static void *fifo_thread(void *p)
{
    fifo_arg *a = p;
    if (a->queued)
        rt_turn_await(a->queued);
    else
        rt_turn_take(a->dev);
    pthread_mutex_lock(a->mu);
    a->order[(*a->n)++] = a->dev->id;
    pthread_mutex_unlock(a->mu);
    rt_turn_give(a->dev);
    return NULL;
}

/* Waits (yielding) until `c` has `n` requests queued. */
static void wait_queued(rt_core_turns *c, int64_t n)
{
    while (rt_core_turns_waiting(c) != n)
        sched_yield();
}

static void test_request_order(void)
{
    rt_core_turns c;
    rt_core_turns_init(&c);
    rt_device dev[4];
    memset(dev, 0, sizeof dev);
    for (int i = 0; i < 4; i++) {
        dev[i].id = i;
        dev[i].core = &c;
    }
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    int64_t order[3];
    int n = 0;
    /* Device 0 (this thread) holds the turn; device 2 asks, then a sender
     * queues device 1's waiter, then device 3 asks: served 2, 1, 3. */
    rt_turn_take(&dev[0]);
    CU_ASSERT_EQUAL(rt_core_turns_grants(&c), 1);
    rt_turn_waiter w;
    rt_turn_waiter_init(&w, &dev[1], 0, 7);
    fifo_arg a[3] = {{&dev[2], NULL, &mu, order, &n}, {&dev[1], &w, &mu, order, &n},
                     {&dev[3], NULL, &mu, order, &n}};
    pthread_t t[3];
    pthread_create(&t[0], NULL, fifo_thread, &a[0]);
    wait_queued(&c, 1);
    rt_turn_enqueue(&w);
    CU_ASSERT_EQUAL(rt_core_turns_waiting(&c), 2);
    pthread_create(&t[1], NULL, fifo_thread, &a[1]);
    pthread_create(&t[2], NULL, fifo_thread, &a[2]);
    wait_queued(&c, 3);
    /* Pausing while holding gives the turn away; a pause without it is a no-op. */
    CU_ASSERT_EQUAL(rt_turn_pause(&dev[0]), 1);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    CU_ASSERT_EQUAL(rt_turn_pause(&dev[0]), 0);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_EQUAL(order[0], 2);
    CU_ASSERT_EQUAL(order[1], 1);
    CU_ASSERT_EQUAL(order[2], 3);
    CU_ASSERT_EQUAL(rt_core_turns_grants(&c), 4);
    /* A free turn with nobody queued is granted at once. */
    rt_turn_waiter_init(&w, &dev[1], 0, 7);
    rt_turn_enqueue(&w);
    rt_turn_await(&w);
    CU_ASSERT_EQUAL(rt_core_turns_waiting(&c), 0);
    rt_turn_give(&dev[1]);
    rt_core_turns_destroy(&c);
}

/* ---- independent items on one CPU: exclusive and alternating ---- */

#define ITEMS 20
#define YIELDS 50

typedef struct items_arg {
    rt_bind bind;
    atomic_int inside;        /* devices inside an item's work now */
    atomic_int overlaps;      /* times a device found another inside */
    atomic_int turned;        /* devices that saw dev->core set */
    pthread_mutex_t mu;       /* guards log / nlog */
    int64_t log[2 * ITEMS];   /* the device of each item, in the order they ran */
    int nlog;
} items_arg;

static void items_device(rt_device *dev, void *p)
{
    items_arg *a = p;
    if (dev->core)
        atomic_fetch_add(&a->turned, 1);
    for (int i = 0; i < ITEMS; i++) {
        rt_pipe_item_begin(dev, 'F', i);
        if (atomic_fetch_add(&a->inside, 1) != 0)
            atomic_fetch_add(&a->overlaps, 1);
        pthread_mutex_lock(&a->mu);
        a->log[a->nlog++] = dev->id;
        pthread_mutex_unlock(&a->mu);
        for (int k = 0; k < YIELDS; k++) /* the kernel would switch here */
            sched_yield();
        atomic_fetch_sub(&a->inside, 1);
        rt_pipe_item_end(dev);
    }
}

static void launch_items(void *p)
{
    items_arg *a = p;
    one_cpu();
    const int64_t sizes[] = {2};
    rt_program prog = test_mesh_program(1, sizes);
    rt_threads_launch(&prog, 0, a->bind, items_device, a);
    if (a->bind == RT_BIND_CORE_ITEMS) {
        if (a->turned != 2 || a->overlaps != 0) {
            fprintf(stderr, "turns: %d devices had a turn, %d overlaps", a->turned, a->overlaps);
            _exit(2);
        }
        /* Between the first item of the later device and the last item of
         * the earlier one, the devices alternate. */
        int first = 0, last = a->nlog - 1;
        while (first + 1 < a->nlog && a->log[first + 1] == a->log[0])
            first++;
        while (last > 0 && a->log[last - 1] == a->log[a->nlog - 1])
            last--;
        for (int i = first; i < last; i++)
            if (a->log[i] == a->log[i + 1]) {
                fprintf(stderr, "turns: device %lld ran items %d and %d in a row",
                        (long long)a->log[i], i, i + 1);
                _exit(2);
            }
    } else if (a->turned != 0 || a->overlaps == 0) {
        fprintf(stderr, "kernel: %d devices had a turn, %d overlaps", a->turned, a->overlaps);
        _exit(2);
    }
}

static void run_items(rt_bind bind)
{
    items_arg *a = calloc(1, sizeof *a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    a->bind = bind;
    pthread_mutex_init(&a->mu, NULL);
    run_child(launch_items, a);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static void test_items_take_turns(void)
{
    run_items(RT_BIND_CORE_ITEMS);
}

static void test_kernel_overlaps_items(void)
{
    run_items(RT_BIND_CORE);
}

/* ---- a woken receiver goes first; ping-pong and a barrier in items ---- */

#define ROUNDS 50

typedef struct pp_arg {
    atomic_int dev1_in_item;   /* device 1 holds its item (and blocks in a receive next) */
    atomic_int sent;           /* device 0 has sent device 1's message */
    pthread_mutex_t mu;        /* guards order / n */
    int64_t order[2];          /* who ran first after device 0's item: 1 then 2 */
    int n;
    atomic_int turned;
} pp_arg;

static void note(pp_arg *a, int64_t who)
{
    pthread_mutex_lock(&a->mu);
    if (a->n < 2)
        a->order[a->n++] = who;
    pthread_mutex_unlock(&a->mu);
}

static void pp_device(rt_device *dev, void *p)
{
    pp_arg *a = p;
    int64_t v = 0;
    if (dev->core)
        atomic_fetch_add(&a->turned, 1);
    /* Device 1 blocks in a receive inside its item; device 0's item sends
     * to it (queueing it), then device 2 asks for the CPU: 1 runs first. */
    if (dev->id == 0) {
        while (!atomic_load(&a->dev1_in_item))
            sched_yield();
        rt_pipe_item_begin(dev, 'F', 0); /* granted when device 1 sleeps */
        rt_send(dev, 0, +1, 1, &v, sizeof v);
        atomic_store(&a->sent, 1);
        while (rt_core_turns_waiting(dev->core) != 2)
            sched_yield();
        rt_pipe_item_end(dev);
    } else if (dev->id == 1) {
        rt_pipe_item_begin(dev, 'F', 0);
        atomic_store(&a->dev1_in_item, 1);
        rt_recv(dev, 0, -1, 1, &v, sizeof v);
        note(a, 1);
        rt_pipe_item_end(dev);
    } else {
        while (!atomic_load(&a->sent))
            sched_yield();
        rt_pipe_item_begin(dev, 'F', 0);
        note(a, 2);
        rt_pipe_item_end(dev);
    }
    /* Ping-pong between devices 0 and 1, every receive inside an item. */
    for (int r = 0; r < ROUNDS && dev->id < 2; r++) {
        rt_pipe_item_begin(dev, 'B', r);
        int64_t x = r;
        if (dev->id == 0) {
            rt_send(dev, 0, +1, 2, &x, sizeof x);
            rt_recv(dev, 0, +1, 3, &x, sizeof x);
        } else {
            rt_recv(dev, 0, -1, 2, &x, sizeof x);
            x++;
            rt_send(dev, 0, -1, 3, &x, sizeof x);
        }
        rt_pipe_item_end(dev);
        if (dev->id == 0 && x != r + 1)
            rt_fatal(dev, "ping-pong round %d: got %lld", r, (long long)x);
    }
    /* A barrier of all three inside an item. */
    rt_pipe_item_begin(dev, 'W', 0);
    dev->ops->barrier(dev, 1u);
    rt_pipe_item_end(dev);
}

static void launch_pp(void *p)
{
    pp_arg *a = p;
    one_cpu();
    const int64_t sizes[] = {3};
    rt_program prog = test_mesh_program(1, sizes);
    rt_threads_launch(&prog, 0, RT_BIND_CORE_ITEMS, pp_device, a);
    if (a->turned != 3 || a->n != 2 || a->order[0] != 1 || a->order[1] != 2) {
        fprintf(stderr, "%d devices had a turn; after device 0's item ran %lld then %lld",
                a->turned, (long long)a->order[0], (long long)a->order[1]);
        _exit(2);
    }
}

static void test_woken_receiver_first(void)
{
    pp_arg *a = calloc(1, sizeof *a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    pthread_mutex_init(&a->mu, NULL);
    run_child(launch_pp, a);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* Nested items and an end without a begin end the job with a message. */
static void nested_device(rt_device *dev, void *p)
{
    (void)p;
    rt_pipe_item_begin(dev, 'F', 0);
    if (dev->id == 0)
        rt_pipe_item_begin(dev, 'F', 1);
    rt_pipe_item_end(dev);
}

static void launch_nested(void *p)
{
    (void)p;
    one_cpu();
    const int64_t sizes[] = {2};
    rt_program prog = test_mesh_program(1, sizes);
    rt_threads_launch(&prog, 0, RT_BIND_CORE_ITEMS, nested_device, NULL);
}

static void test_nested_item(void)
{
    char err[4096];
    int status = test_in_child(launch_nested, NULL, err, sizeof err);
    CU_ASSERT_EQUAL(status, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "rt_pipe_item_begin inside another item"));
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"request order", test_request_order},
        {"items take turns on one CPU", test_items_take_turns},
        {"kernel sharing overlaps items (forced alternative)", test_kernel_overlaps_items},
        {"woken receiver first; ping-pong and barrier in items", test_woken_receiver_first},
        {"nested item ends the job", test_nested_item},
    };
    einc_add_suite("cores shared at pipeline items (threads)", tests,
                   (int)(sizeof tests / sizeof tests[0]));
}
