/*
 * core_turns.c - the turn of a CPU shared by device threads (rt_turns.h).
 *
 * A FIFO handoff lock: a request made while the turn is held links a
 * waiter (on the requester's stack, with its own condition variable) at
 * the tail of the queue, and the holder's release grants the turn to the
 * head directly (holder = its device, granted = 1, one signal), so no
 * thread arriving later can take the turn before the oldest request, and
 * only the thread granted is woken.  Why the order matters: with two
 * pipeline stages on a CPU, the one whose item became ready first should
 * run next (the list scheduling that bench/pipeline.py's "turns"
 * prediction replays), and a stage's position must not depend on when the
 * kernel lets its woken thread run.
 */
#include <stdlib.h>

#include "rt_turns.h"

void rt_core_turns_init(rt_core_turns *c)
{
    pthread_mutex_init(&c->mu, NULL);
    c->holder = -1;
    c->holder_thread = pthread_self(); /* the launcher's: never a device's */
    c->head = NULL;
    c->tail = &c->head;
    c->waiting = 0;
    c->grants = 0;
}

void rt_core_turns_destroy(rt_core_turns *c)
{
    pthread_mutex_destroy(&c->mu);
}

/* 1 if the calling thread is device `dev`'s holder of the turn; c->mu held. */
static int holds(const rt_core_turns *c, const rt_device *dev)
{
    return c->holder == dev->id && pthread_equal(c->holder_thread, pthread_self());
}

/* Hands the turn to the oldest request, or frees it; c->mu held. */
static void pass_on(rt_core_turns *c)
{
    rt_turn_waiter *w = c->head;
    if (!w) {
        c->holder = -1;
        return;
    }
    c->head = w->next;
    if (!c->head)
        c->tail = &c->head;
    c->waiting--;
    c->holder = w->dev;
    c->grants++;
    w->granted = 1;
    pthread_cond_signal(&w->cv);
}

/* Queues `w`, or grants it the turn at once when the turn is free (then
 * nobody is queued either: a release with requests hands the turn on);
 * c->mu held. */
static void request(rt_core_turns *c, rt_turn_waiter *w)
{
    if (c->holder < 0) {
        c->holder = w->dev;
        c->grants++;
        w->granted = 1;
        return;
    }
    w->next = NULL;
    *c->tail = w;
    c->tail = &w->next;
    c->waiting++;
}

/* Waits until `w` is granted and records the calling thread as the
 * holder; c->mu held. */
static void wait_granted(rt_core_turns *c, rt_turn_waiter *w)
{
    while (!w->granted)
        pthread_cond_wait(&w->cv, &c->mu);
    c->holder_thread = pthread_self();
}

void rt_turn_waiter_init(rt_turn_waiter *w, rt_device *dev, int64_t src, int32_t tag)
{
    pthread_cond_init(&w->cv, NULL);
    w->core = dev->core;
    w->dev = dev->id;
    w->src = src;
    w->tag = tag;
    w->granted = 0;
    w->next = NULL;
}

void rt_turn_take(rt_device *dev)
{
    rt_core_turns *c = dev->core;
    rt_turn_waiter w;
    rt_turn_waiter_init(&w, dev, -1, -1);
    pthread_mutex_lock(&c->mu);
    if (holds(c, dev))
        rt_fatal(dev, "rt_pipe_item_begin inside another item (a missing rt_pipe_item_end)");
    request(c, &w);
    wait_granted(c, &w);
    pthread_mutex_unlock(&c->mu);
    pthread_cond_destroy(&w.cv);
}

void rt_turn_give(rt_device *dev)
{
    rt_core_turns *c = dev->core;
    pthread_mutex_lock(&c->mu);
    if (!holds(c, dev))
        rt_fatal(dev, "rt_pipe_item_end without an open item");
    pass_on(c);
    pthread_mutex_unlock(&c->mu);
}

int rt_turn_pause(rt_device *dev)
{
    rt_core_turns *c = dev->core;
    pthread_mutex_lock(&c->mu);
    int held = holds(c, dev);
    if (held)
        pass_on(c);
    pthread_mutex_unlock(&c->mu);
    return held;
}

void rt_turn_resume(rt_device *dev, int paused)
{
    if (paused)
        rt_turn_take(dev);
}

void rt_turn_enqueue(rt_turn_waiter *w)
{
    rt_core_turns *c = w->core;
    pthread_mutex_lock(&c->mu);
    request(c, w);
    pthread_mutex_unlock(&c->mu);
}

void rt_turn_await(rt_turn_waiter *w)
{
    rt_core_turns *c = w->core;
    pthread_mutex_lock(&c->mu);
    wait_granted(c, w);
    pthread_mutex_unlock(&c->mu);
    /* The granter signalled under c->mu, which we held since: nobody
     * touches w any more. */
    pthread_cond_destroy(&w->cv);
}

int64_t rt_core_turns_waiting(rt_core_turns *c)
{
    pthread_mutex_lock(&c->mu);
    int64_t n = c->waiting;
    pthread_mutex_unlock(&c->mu);
    return n;
}

int64_t rt_core_turns_grants(rt_core_turns *c)
{
    pthread_mutex_lock(&c->mu);
    int64_t n = c->grants;
    pthread_mutex_unlock(&c->mu);
    return n;
}
