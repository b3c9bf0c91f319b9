/*
 * barrier.c - a reusable barrier for the threads of one group.
 *
 * Sense reversal by generation number: a thread that arrives remembers the
 * generation, the last one to arrive starts the next generation and wakes
 * the others, who leave when the generation they waited on is over.  That
 * makes the barrier safe to reuse immediately.  It sleeps on a condition
 * variable rather than spinning, because the meshes we run often have more
 * devices than the machine has cores.  A device that fails does not leave
 * its peers waiting: rt_fatal ends the whole process.
 *
 * Deadlock detection: devices that call collectives over different groups
 * or in different orders (a bug in the program) would wait forever.  Every
 * barrier of a process shares one counter of blocked and finished threads.
 * A thread about to sleep adds itself; the thread that completes a barrier
 * removes the count-1 sleepers it releases before waking them, so a thread
 * is counted exactly while it cannot run.  A thread that finds every device
 * thread blocked or finished knows that nothing can ever wake them and
 * reports it instead of sleeping.
 */
#include "rt_internal.h"

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

void rt_barrier_init(rt_barrier *b, int64_t count, rt_waitstate *ws)
{
    b->ws = ws;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->count = count;
    b->waiting = 0;
    b->generation = 0;
}

int rt_barrier_wait(rt_barrier *b)
{
    pthread_mutex_lock(&b->mu);
    uint64_t gen = b->generation;
    if (++b->waiting == b->count) {
        b->waiting = 0;
        b->generation++;
        if (b->ws && b->count > 1)
            atomic_fetch_sub(&b->ws->word, (uint64_t)(b->count - 1));
        pthread_cond_broadcast(&b->cv);
    } else {
        if (b->ws && stuck(b->ws, atomic_fetch_add(&b->ws->word, 1) + 1)) {
            pthread_mutex_unlock(&b->mu);
            return -1;
        }
        while (gen == b->generation)
            pthread_cond_wait(&b->cv, &b->mu);
    }
    pthread_mutex_unlock(&b->mu);
    return 0;
}

void rt_barrier_destroy(rt_barrier *b)
{
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}
