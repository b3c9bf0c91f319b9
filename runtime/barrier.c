/*
 * barrier.c - a reusable barrier for the threads of one group.
 *
 * Sense reversal by generation number: a thread that arrives remembers the
 * generation, the last one to arrive starts the next generation and wakes
 * the others, who leave when the generation they waited on is over.  That
 * makes the barrier safe to reuse immediately.  A waiter first spins for a
 * few microseconds on the generation (a sleep and wake-up through the
 * condition variable costs 5-40 us here, which dominated small collectives),
 * then sleeps on the condition variable.  It spins with a pause only when
 * every device thread has a core of its own.  The meshes we run often have
 * more devices than the machine has cores, and a spinning thread would then
 * take the CPU the thread it waits for needs: there it polls with
 * sched_yield instead, which hands the core to a runnable peer (as MPI
 * libraries do when oversubscribed), and sleeps after a bounded number of
 * yields.  A device thread that holds its CPU's turn (rt_turns.h: device
 * threads taking turns at pipeline items) gives it up before it waits.  A
 * device that fails does not leave its peers waiting: rt_fatal ends the
 * whole process.
 *
 * Deadlock detection: devices that call collectives over different groups
 * or in different orders (a bug in the program) would wait forever.  Every
 * barrier of a process shares one counter of blocked and finished threads.
 * A thread about to sleep adds itself; the thread that completes a barrier
 * removes the sleepers it releases before waking them, so a thread is
 * counted exactly while it cannot run (a spinning thread can still run).
 * A thread that finds every device thread blocked or finished knows that
 * nothing can ever wake them and reports it instead of sleeping.
 */
#include <sched.h>
#include <unistd.h>

#include "rt_internal.h"
#include "rt_turns.h"

/* About 2-10 us of polling on current x86 cores. */
#define SPIN_ITERATIONS 4000
/* Yields before sleeping when devices outnumber cores: enough for every
 * peer to get the core a few times. */
#define YIELD_ITERATIONS 200

#define FINISHED_ONE ((uint64_t)1 << 32)
#define BLOCKED_MASK (FINISHED_ONE - 1)

/* 1 if state `w` of `ws` is a deadlock. */
static int stuck(const rt_waitstate *ws, uint64_t w)
{
    uint64_t blocked = w & BLOCKED_MASK, finished = w >> 32;
    return blocked > 0 && (int64_t)(blocked + finished) == ws->nthreads;
}

int rt_waitstate_finish(rt_waitstate *ws)
{
    uint64_t w = atomic_fetch_add(&ws->word, FINISHED_ONE) + FINISHED_ONE;
    return stuck(ws, w) ? -1 : 0;
}

int rt_waitstate_block(rt_waitstate *ws)
{
    return stuck(ws, atomic_fetch_add(&ws->word, 1) + 1) ? -1 : 0;
}

void rt_waitstate_wake(rt_waitstate *ws, int64_t n)
{
    if (n > 0)
        atomic_fetch_sub(&ws->word, (uint64_t)n);
}

void rt_barrier_init(rt_barrier *b, int64_t count, rt_waitstate *ws)
{
    b->ws = ws;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->count = count;
    b->waiting = 0;
    b->sleepers = 0;
    atomic_init(&b->generation, 0);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t threads = ws ? ws->nthreads : count;
    b->yield = !(cores > 0 && threads <= cores);
    b->spin = b->yield ? YIELD_ITERATIONS : SPIN_ITERATIONS;
}

/* A waiter that did not complete generation `gen`: polls, then sleeps
 * until the last of the group arrives; -1 on a deadlock. */
static int await_generation(rt_barrier *b, uint64_t gen)
{
    for (int i = 0; i < b->spin; i++) {
        if (atomic_load_explicit(&b->generation, memory_order_acquire) != gen)
            return 0;
        if (b->yield)
            sched_yield();
#if defined(__x86_64__) || defined(__i386__)
        else
            __builtin_ia32_pause();
#endif
    }
    pthread_mutex_lock(&b->mu);
    if (atomic_load_explicit(&b->generation, memory_order_relaxed) == gen) {
        b->sleepers++;
        if (b->ws && rt_waitstate_block(b->ws)) {
            pthread_mutex_unlock(&b->mu);
            return -1;
        }
        while (atomic_load_explicit(&b->generation, memory_order_relaxed) == gen)
            pthread_cond_wait(&b->cv, &b->mu);
    }
    pthread_mutex_unlock(&b->mu);
    return 0;
}

int rt_barrier_wait(rt_barrier *b, rt_device *dev)
{
    pthread_mutex_lock(&b->mu);
    uint64_t gen = atomic_load_explicit(&b->generation, memory_order_relaxed);
    if (++b->waiting == b->count) {
        b->waiting = 0;
        if (b->ws)
            rt_waitstate_wake(b->ws, b->sleepers);
        b->sleepers = 0;
        /* Release: the peers' writes before the barrier are visible to a
         * waiter that sees the new generation without taking the mutex. */
        atomic_store_explicit(&b->generation, gen + 1, memory_order_release);
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
        return 0;
    }
    pthread_mutex_unlock(&b->mu);
    /* Holding its CPU's turn (rt_turns.h), a waiter would keep the peers
     * pinned beside it from arriving. */
    int paused = dev && dev->core ? rt_turn_pause(dev) : 0;
    if (await_generation(b, gen))
        return -1;
    rt_turn_resume(dev, paused);
    return 0;
}

void rt_barrier_destroy(rt_barrier *b)
{
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}
