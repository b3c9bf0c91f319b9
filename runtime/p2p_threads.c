/*
 * p2p_threads.c - point-to-point messages of the threads backend: one
 * mailbox per device.
 *
 * rt_send copies the sender's bytes into a message and links it at the
 * tail of the receiver's mailbox, then returns: sends are buffered, so two
 * pipeline stages that send to each other before receiving (1F1B) never
 * wait on each other.  rt_recv scans the mailbox from the head for the
 * first message from its peer with its tag, so messages of one (sender,
 * tag) are received in the order sent, and messages of other tags or
 * senders wait in place for their own receive.  The copy costs a memcpy at
 * each end; in exchange the sender's buffer is free at once, as the
 * interface promises, and nothing is shared between the two threads'
 * buffers.
 *
 * A receiver with no matching message sleeps on the mailbox's condition
 * variable.  It counts itself in the process's rt_waitstate, as a barrier
 * waiter does (barrier.c), and every arrival uncounts the sleepers it
 * wakes: a receive whose message can never come (every other device is
 * blocked or finished) ends the job with a message instead of hanging.  A
 * device that fails ends the whole process (rt_fatal), so no receiver is
 * left waiting for it either.
 *
 * Where device threads take turns on a CPU (rt_turns.h), a receiver that
 * must sleep gives its turn up first (holding it, it would keep its CPU's
 * other stages from running the item it waits for) and leaves a waiter in
 * its mailbox; the put of the message it waits for queues that waiter for
 * the turn, so it is served in the order of its input's arrival.  The
 * receiver takes the message once granted, and copies it holding the turn.
 *
 * rt_probe looks through the mailbox under its lock without unlinking
 * anything: a pipeline stage asks whether its next item's input is there
 * before choosing to run other work (pipe_fill.c).
 */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"
#include "rt_turns.h"

void rt_mailbox_init(rt_mailbox *mb, rt_waitstate *ws)
{
    pthread_mutex_init(&mb->mu, NULL);
    pthread_cond_init(&mb->cv, NULL);
    mb->head = NULL;
    mb->tail = &mb->head;
    mb->arrivals = 0;
    mb->sleepers = 0;
    mb->ws = ws;
    mb->turn = NULL;
}

void rt_mailbox_put(rt_device *dev, rt_mailbox *mb, int64_t src, int32_t tag, const void *buf,
                    int64_t bytes)
{
    rt_msg *m = rt_xmalloc(dev, sizeof *m + (size_t)bytes);
    m->src = src;
    m->tag = tag;
    m->bytes = bytes;
    m->next = NULL;
    if (bytes > 0)
        memcpy(m->data, buf, (size_t)bytes);
    pthread_mutex_lock(&mb->mu);
    *mb->tail = m;
    mb->tail = &m->next;
    mb->arrivals++;
    rt_turn_waiter *w = mb->turn;
    if (w && w->src == src && w->tag == tag) { /* its receiver's input is ready now */
        mb->turn = NULL;
        rt_turn_enqueue(w);
    }
    /* The sleepers are runnable from here on; uncount them before they
     * wake so no thread ever sees them as blocked after this arrival. */
    rt_waitstate_wake(mb->ws, mb->sleepers);
    mb->sleepers = 0;
    pthread_cond_broadcast(&mb->cv);
    pthread_mutex_unlock(&mb->mu);
}

/* Unlinks and returns the oldest message from `src` with `tag`, or NULL;
 * mb->mu held. */
static rt_msg *unlink_match(rt_mailbox *mb, int64_t src, int32_t tag)
{
    for (rt_msg **p = &mb->head; *p; p = &(*p)->next) {
        rt_msg *m = *p;
        if (m->src != src || m->tag != tag)
            continue;
        *p = m->next;
        if (!m->next)
            mb->tail = p;
        return m;
    }
    return NULL;
}

void rt_mailbox_take(rt_device *dev, rt_mailbox *mb, int64_t src, int32_t tag, void *buf,
                     int64_t bytes)
{
    pthread_mutex_lock(&mb->mu);
    rt_msg *m;
    rt_turn_waiter w;
    int queued = 0; /* w waits in mb->turn for the put of our message */
    while (!(m = unlink_match(mb, src, tag))) {
        if (dev->core && !queued && rt_turn_pause(dev)) {
            rt_turn_waiter_init(&w, dev, src, tag);
            mb->turn = &w;
            queued = 1;
        }
        mb->sleepers++;
        if (rt_waitstate_block(mb->ws)) {
            pthread_mutex_unlock(&mb->mu);
            rt_fatal(dev, "deadlock in rt_recv: waiting for the message with tag %d from "
                     "device %lld, but every device is blocked or finished (a receive "
                     "without a matching send, or devices waiting on each other)",
                     tag, (long long)src);
        }
        /* Sleep until a new arrival: the sender that links it has already
         * uncounted us (spurious wake-ups keep waiting). */
        int64_t seen = mb->arrivals;
        while (mb->arrivals == seen)
            pthread_cond_wait(&mb->cv, &mb->mu);
    }
    pthread_mutex_unlock(&mb->mu);
    /* Our message's put queued w (only a matching put ends the loop). */
    if (queued)
        rt_turn_await(&w);
    if (m->bytes != bytes)
        rt_p2p_size_mismatch(dev, src, tag, m->bytes, bytes);
    if (bytes > 0)
        memcpy(buf, m->data, (size_t)bytes);
    free(m);
}

int32_t rt_mailbox_peek(rt_mailbox *mb, int64_t src, int32_t tag)
{
    pthread_mutex_lock(&mb->mu);
    const rt_msg *m = mb->head;
    while (m && (m->src != src || m->tag != tag))
        m = m->next;
    pthread_mutex_unlock(&mb->mu);
    return m != NULL;
}

int64_t rt_mailbox_destroy(rt_mailbox *mb, rt_msg *first)
{
    int64_t left = 0;
    while (mb->head) {
        rt_msg *m = mb->head;
        mb->head = m->next;
        if (left++ == 0 && first)
            memcpy(first, m, sizeof *m);
        free(m);
    }
    mb->tail = &mb->head;
    pthread_cond_destroy(&mb->cv);
    pthread_mutex_destroy(&mb->mu);
    return left;
}
