/*
 * rt_turns.h - device threads pinned to one CPU take turns at pipeline
 * items (core_turns.c; docs/runtime.md, "Waiting").
 *
 * When the threads backend runs more device threads than the CPUs it pins
 * them to (--bind-to core, EINC_CORE_SHARING=items), each CPU gets one
 * rt_core_turns: a turn that a device thread holds while it runs a
 * pipeline item (rt_pipe_item_begin to rt_pipe_item_end) and gives up
 * whenever it blocks inside one (a receive that sleeps, a collective's
 * barrier, an asynchronous collective's wait).  Requests are served in the
 * order they were made, so the oldest ready stage runs next, and an item
 * is not preempted by another stage's item on its CPU.  Every device
 * thread of one CPU points at the same rt_core_turns (rt_device.core);
 * rt_device.core is NULL when the turns are off (a CPU per device thread,
 * --bind-to none, EINC_CORE_SHARING=kernel, MPI), and every entry point
 * below is then behind that one test at its caller.
 *
 * No deadlock: a thread holds at most its own CPU's turn, waits for it
 * only while holding nothing, and releases it before every blocking wait
 * an item can make, so the holder is always runnable and reaches a release.
 */
#ifndef EINC_RT_TURNS_H
#define EINC_RT_TURNS_H

#include <pthread.h>
#include <stdint.h>

#include "rt_internal.h"

/* A device thread waiting for its CPU's turn (on its own stack). */
typedef struct rt_turn_waiter {
    pthread_cond_t cv;            /* signalled when the turn is granted */
    struct rt_core_turns *core;   /* the CPU's turns */
    int64_t dev;                  /* the waiting device's id */
    int64_t src;                  /* a receive's sender (rt_turn_wait_message) */
    int32_t tag;                  /* a receive's tag */
    int granted;                  /* 1: it holds the turn (set under core->mu) */
    struct rt_turn_waiter *next;  /* the next waiter in request order */
} rt_turn_waiter;

/* The turn of one CPU.  Every field is read and written under `mu`. */
typedef struct rt_core_turns {
    pthread_mutex_t mu;
    int64_t holder;               /* id of the device holding the turn; -1: free */
    pthread_t holder_thread;      /* its thread (an asynchronous collective's
                                     communication thread of the same device is not it) */
    rt_turn_waiter *head;         /* the oldest request, or NULL */
    rt_turn_waiter **tail;        /* where the next request is linked */
    int64_t waiting;              /* requests queued */
    int64_t grants;               /* turns granted so far */
} rt_core_turns;

/* Initialises a free turn with no requests / frees its mutex. */
void rt_core_turns_init(rt_core_turns *c);
void rt_core_turns_destroy(rt_core_turns *c);

/* Device thread `dev` (dev->core set) waits for its CPU's turn, after the
 * requests made before it, and holds it.  Ends the job if it already holds
 * it (an item begun inside another). */
void rt_turn_take(rt_device *dev);
/* Device thread `dev` gives its CPU's turn to the oldest request, or frees
 * it.  Ends the job if it does not hold it (an item end without a begin). */
void rt_turn_give(rt_device *dev);
/* Before a wait that may block: gives the turn up if the calling thread is
 * `dev`'s device thread and holds it; returns 1 then (rt_turn_resume takes
 * it back), else 0. */
int rt_turn_pause(rt_device *dev);
/* After that wait: takes the turn back (rt_turn_take) when `paused`. */
void rt_turn_resume(rt_device *dev, int paused);

/*
 * A receive that sleeps inside an item (p2p_threads.c) releases the turn
 * and leaves a waiter with its mailbox; the sender of the message it waits
 * for queues that waiter at its arrival, so the receiver's place in the
 * queue is the time its input was ready, however late the kernel lets the
 * woken thread run on its busy CPU.
 */
/* Fills `w` for device `dev` waiting for the message (src, tag). */
void rt_turn_waiter_init(rt_turn_waiter *w, rt_device *dev, int64_t src, int32_t tag);
/* By the sender (any thread): queues `w` for its CPU's turn, granting it
 * at once when the turn is free. */
void rt_turn_enqueue(rt_turn_waiter *w);
/* By w's device thread, after rt_turn_enqueue: waits until granted, then
 * holds the turn. */
void rt_turn_await(rt_turn_waiter *w);

/* Requests waiting for the turn of `c` / turns granted so far (tests). */
int64_t rt_core_turns_waiting(rt_core_turns *c);
int64_t rt_core_turns_grants(rt_core_turns *c);

#endif
