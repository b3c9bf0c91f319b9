/*
 * gemv_split.c - a device's helper thread for its narrow matrix-vector
 * products (rt_gemv.h): started at the first large product, parked
 * between products, joined when the device is released.
 *
 * A job is a count of chunks taken from one shared counter by both the
 * device thread and the helper.  After a job the helper polls for the
 * next one (rt_gemv_split_linger): while no thread waits for a CPU, for
 * as long as a decode step's products are apart, then sleeps on a
 * condition variable: it spins through a step and is parked between
 * steps, as BLAS and OpenMP runtimes park their threads.  The device
 * thread never waits for a helper that has not woken: when it runs out of
 * chunks it withdraws a job the helper has not taken (state POSTED back
 * to IDLE) and returns; it waits only for a helper that took the job and
 * is finishing its chunk.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_SET, pthread_attr_setaffinity_np */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_internal.h"

/* Seconds between the helper's looks at the machine's runnable threads
 * while it polls (rt_gemv_split_linger), and the device thread's poll for
 * the helper's last chunk before it sleeps. */
#define HELPER_CHECK_S 250e-6
#define WAIT_SPIN_S 50e-6

enum { W_IDLE, W_POSTED, W_RUNNING, W_DONE, W_STOP };

typedef struct gemv_job {
    void (*fn)(void *arg, int64_t k);
    void *arg;
    int64_t nchunks;
    _Atomic int64_t next; /* the next chunk not taken */
} gemv_job;

struct rt_gemv_worker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    atomic_int state; /* W_*: POSTED and STOP set under mu (the helper may sleep) */
    atomic_int asleep; /* 1 while the helper waits on `wake` (set under mu) */
    int ncpus;        /* CPUs the process may use (rt_gemv_split.ncpus) */
    gemv_job *job;    /* the posted job (the device thread's stack) */
    /* counted by the device thread, for EINC_GEMV_TRACE: jobs posted, those
     * that found the helper asleep, and those it never took */
    int64_t jobs, wakes, withdrawn;
};

static inline void relax(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_ia32_pause();
#endif
}

static void take_chunks(gemv_job *j)
{
    for (int64_t k; (k = atomic_fetch_add(&j->next, 1)) < j->nchunks;)
        j->fn(j->arg, k);
}

int rt_gemv_split_linger(double elapsed, int running, int ncpus)
{
    if (elapsed < RT_GEMV_SPLIT_PAUSE_S)
        return 1;
    return elapsed < RT_GEMV_SPLIT_SPIN_S && ncpus > 0 && running > 0 && running <= ncpus;
}

/* Polls w->state until it is one of a and b or `seconds` have passed. */
static int spin_for(rt_gemv_worker *w, int a, int b, double seconds)
{
    double t0 = rt_now();
    int s = atomic_load(&w->state);
    for (int i = 0; s != a && s != b; s = atomic_load(&w->state), i++) {
        if ((i & 63) == 63 && rt_now() - t0 > seconds)
            break;
        relax();
    }
    return s;
}

/* The helper's poll for its next job after one: while
 * rt_gemv_split_linger says, looking at the runnable threads every
 * HELPER_CHECK_S after the first RT_GEMV_SPLIT_PAUSE_S. */
static int helper_poll(rt_gemv_worker *w)
{
    double t0 = rt_now(), waited = 0;
    int s, running = 0;
    for (;;) {
        double next = waited < RT_GEMV_SPLIT_PAUSE_S ? RT_GEMV_SPLIT_PAUSE_S - waited
                                                     : HELPER_CHECK_S;
        if ((s = spin_for(w, W_POSTED, W_STOP, next)) == W_POSTED || s == W_STOP)
            break;
        waited = rt_now() - t0;
        if (waited >= RT_GEMV_SPLIT_PAUSE_S)
            running = rt_gemv_split_running();
        if (!rt_gemv_split_linger(waited, running, w->ncpus))
            break;
    }
    return s;
}

static void *helper_main(void *p)
{
    rt_gemv_worker *w = p;
    for (;;) {
        int s = helper_poll(w);
        if (s != W_POSTED && s != W_STOP) {
            pthread_mutex_lock(&w->mu);
            while ((s = atomic_load(&w->state)) != W_POSTED && s != W_STOP) {
                atomic_store(&w->asleep, 1);
                pthread_cond_wait(&w->wake, &w->mu);
                atomic_store(&w->asleep, 0);
            }
            pthread_mutex_unlock(&w->mu);
        }
        if (s == W_STOP)
            return NULL;
        int expect = W_POSTED;
        if (!atomic_compare_exchange_strong(&w->state, &expect, W_RUNNING))
            continue; /* withdrawn before we took it */
        take_chunks(w->job);
        pthread_mutex_lock(&w->mu);
        atomic_store(&w->state, W_DONE);
        pthread_cond_signal(&w->done);
        pthread_mutex_unlock(&w->mu);
    }
}

/* s's helper, started now if it is not yet; NULL (and s->threads 1) when
 * it cannot be. */
static rt_gemv_worker *helper_of(rt_gemv_split *s)
{
    if (s->worker)
        return s->worker;
    rt_gemv_worker *w = calloc(1, sizeof *w);
    if (!w) {
        s->threads = 1;
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->wake, NULL);
    pthread_cond_init(&w->done, NULL);
    atomic_init(&w->state, W_IDLE);
    atomic_init(&w->asleep, 0);
    w->ncpus = s->ncpus;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)1 << 20);
    if (s->cpu >= 0 && s->cpu < CPU_SETSIZE) {
        /* else it inherits the device thread's CPU: the one busy one */
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(s->cpu, &one);
        (void)pthread_attr_setaffinity_np(&attr, sizeof one, &one);
    }
    int err = pthread_create(&w->thread, &attr, helper_main, w);
    pthread_attr_destroy(&attr);
    if (err != 0) {
        pthread_cond_destroy(&w->wake);
        pthread_cond_destroy(&w->done);
        pthread_mutex_destroy(&w->mu);
        free(w);
        s->threads = 1;
        return NULL;
    }
    s->worker = w;
    return w;
}

void rt_gemv_split_run(rt_gemv_split *s, void (*fn)(void *arg, int64_t k), void *arg,
                       int64_t nchunks)
{
    gemv_job j = {.fn = fn, .arg = arg, .nchunks = nchunks};
    atomic_init(&j.next, 0);
    rt_gemv_worker *w = s->threads >= 2 && nchunks > 1 ? helper_of(s) : NULL;
    if (w) {
        pthread_mutex_lock(&w->mu);
        w->job = &j;
        w->jobs++;
        w->wakes += atomic_load(&w->asleep);
        atomic_store(&w->state, W_POSTED);
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&w->mu);
    }
    take_chunks(&j);
    if (!w)
        return;
    int expect = W_POSTED;
    if (atomic_compare_exchange_strong(&w->state, &expect, W_IDLE)) {
        w->withdrawn++;
        return; /* the helper never took it: every chunk was ours */
    }
    if (spin_for(w, W_DONE, W_DONE, WAIT_SPIN_S) != W_DONE) {
        pthread_mutex_lock(&w->mu);
        while (atomic_load(&w->state) != W_DONE)
            pthread_cond_wait(&w->done, &w->mu);
        pthread_mutex_unlock(&w->mu);
    }
    atomic_store(&w->state, W_IDLE);
}

/* Products of a class between tries of the mode that looks slower: at
 * first, and at most (rt_gemv_split_choose).  With the int8 decode step's
 * products (16 of 1-2 MiB and 21 of 2-4 MiB a run), tries of the slower
 * way fell in 5 of its first 9 runs after the first at 16 or 32, in 2 at
 * 64: the median of 9 runs was a run with a try. */
#define TRY_FIRST 64
/* Products of a class after its first two measurements before the slower
 * way is measured again, once: the first measurement of the one-thread
 * way falls in a program's first run, which runs cold (the cause not
 * pinned down: the states are already written by then), and at a load
 * average of 5 it measured 1.9 GB/s for the 2-4 MiB products (the attention's over
 * the cache among them) where that way drew 6 warm, so the split was kept
 * until the retry 64 products later, although it was the slower there. */
#define TRY_WARM 16
#define TRY_MAX 1024
/* How much slower than the other mode one product of a try may be before
 * the try ends (rt_gemv_split_note). */
#define ABORT_RATIO 2.0

/* The size class of a product of `bytes` matrix bytes. */
static int size_class(const rt_gemv_split *s, double bytes)
{
    double b = s->min_bytes > 0 ? (double)s->min_bytes : 1;
    int c = 0;
    while (c + 1 < RT_GEMV_SPLIT_CLASSES && bytes >= 2 * b)
        b *= 2, c++;
    return c;
}

/* Starts a try of mode `mode` in class c, whose products are of about
 * `bytes`: RT_GEMV_SPLIT_TRY products, fewer when they hold
 * RT_GEMV_SPLIT_TRY_BYTES sooner (at least one). */
static int start_try(rt_gemv_split_class *c, int mode, double bytes)
{
    double n = bytes > 0 ? RT_GEMV_SPLIT_TRY_BYTES / bytes : RT_GEMV_SPLIT_TRY;
    c->trying = n >= RT_GEMV_SPLIT_TRY ? RT_GEMV_SPLIT_TRY : n >= 1 ? (int)n : 1;
    c->tries++;
    c->try_mode = mode;
    c->try_s = c->try_bytes = 0;
    return mode;
}

int rt_gemv_split_choose(rt_gemv_split *s, double bytes)
{
    s->cur = size_class(s, bytes);
    if (!s->adaptive)
        return 1;
    rt_gemv_split_class *c = &s->cls[s->cur];
    int64_t n = c->products++;
    if (c->trying > 0)
        return c->try_mode;
    if (c->s_per_byte[0] == 0)
        return start_try(c, 0, bytes);
    if (c->s_per_byte[1] == 0)
        return start_try(c, 1, bytes);
    if (c->try_every == 0)
        c->try_every = TRY_FIRST, c->next_try = n + TRY_WARM;
    int better = c->s_per_byte[1] < c->s_per_byte[0];
    return n < c->next_try ? better : start_try(c, !better, bytes);
}

void rt_gemv_split_note(rt_gemv_split *s, int split, double bytes, double seconds)
{
    if (!s->adaptive || bytes <= 0)
        return;
    rt_gemv_split_class *c = &s->cls[s->cur];
    double *m = &c->s_per_byte[split != 0];
    if (c->trying == 0 || c->try_mode != (split != 0)) {
        *m = *m == 0 ? seconds / bytes : 0.75 * *m + 0.25 * (seconds / bytes);
        return;
    }
    c->try_s += seconds;
    c->try_bytes += bytes;
    /* a product of the try that took over twice the other mode's time
     * ends it: that mode stays (a try on a loaded machine costs one slow
     * product, not RT_GEMV_SPLIT_TRY) */
    double other = c->s_per_byte[split == 0];
    if (other > 0 && seconds / bytes > ABORT_RATIO * other && c->trying > 1)
        c->trying = 1, c->cut++;
    if (--c->trying > 0)
        return;
    int first = *m == 0 || c->try_every == 0; /* a mode's first measurement */
    int before = c->s_per_byte[1] < c->s_per_byte[0];
    *m = c->try_s / c->try_bytes; /* a try replaces its mode's figure (an older load's) */
    if (first)
        return;
    int after = c->s_per_byte[1] < c->s_per_byte[0];
    if (after == before && c->try_every < TRY_MAX)
        c->try_every *= 2; /* confirmed: try less often */
    else if (after != before)
        c->try_every = TRY_FIRST;
    c->next_try = c->products + c->try_every;
}

void rt_gemv_split_product(rt_gemv_split *s, void (*fn)(void *arg, int64_t k), void *arg,
                           int64_t nchunks, double bytes, void (*alone)(void *arg))
{
    int split = rt_gemv_split_choose(s, bytes);
    s->cls[s->cur].split_products += split;
    if (split && s->threads >= 2 && nchunks > 1)
        (void)helper_of(s); /* started before the clock: not the split's cost */
    double t0 = rt_now();
    if (split)
        rt_gemv_split_run(s, fn, arg, nchunks);
    else if (alone)
        alone(arg);
    else
        for (int64_t k = 0; k < nchunks; k++)
            fn(arg, k);
    rt_gemv_split_note(s, split, bytes, rt_now() - t0);
}

void rt_gemv_split_release(rt_gemv_split *s)
{
    rt_gemv_worker *w = s->worker;
    if (s->trace)
        rt_gemv_split_report(s, w ? w->jobs : 0, w ? w->wakes : 0, w ? w->withdrawn : 0);
    s->trace = 0; /* reported once */
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->state, W_STOP);
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->done);
    pthread_mutex_destroy(&w->mu);
    free(w);
    s->worker = NULL;
}
