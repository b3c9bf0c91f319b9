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
 */
#include "rt_internal.h"

void rt_barrier_init(rt_barrier *b, int64_t count)
{
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->count = count;
    b->waiting = 0;
    b->generation = 0;
}

void rt_barrier_wait(rt_barrier *b)
{
    pthread_mutex_lock(&b->mu);
    uint64_t gen = b->generation;
    if (++b->waiting == b->count) {
        b->waiting = 0;
        b->generation++;
        pthread_cond_broadcast(&b->cv);
    } else {
        while (gen == b->generation)
            pthread_cond_wait(&b->cv, &b->mu);
    }
    pthread_mutex_unlock(&b->mu);
}

void rt_barrier_destroy(rt_barrier *b)
{
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}
