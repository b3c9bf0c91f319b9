/*
 * async.c - asynchronous collectives: start now, wait later (einrt.h).
 *
 * MeshSlice overlaps the partial collective of sub-shard k+1 with the
 * partial GEMM of sub-shard k, so a device needs collectives that run while
 * its own thread is inside BLAS.  Two mechanisms, picked per backend:
 *
 * - The backend has non-blocking collectives (rt_device_ops.coll_start /
 *   coll_wait; the MPI backend's MPI_Iallgather and the non-blocking
 *   pairwise exchange of its ReduceScatter): start and wait map onto them.  How much
 *   really overlaps then depends on the MPI library's progress engine
 *   (Open MPI's shared-memory transport progresses inside MPI calls).
 *
 * - Otherwise (the threads backend) a communication thread per queue runs
 *   the blocking collectives in the order they were started, from a small
 *   FIFO; the device thread only waits on a condition variable when it
 *   needs a result.  Every device's communication thread calls the same
 *   collectives in the same order, so the group barriers of the threads
 *   backend pair them up as they would pair the device threads; while a
 *   queue is open its device thread calls no collective itself.  The
 *   copies and sums of one device's communication thread really run at the
 *   same time as the GEMMs of the device threads - as far as the machine
 *   has cores for both (docs/meshslice.md).
 *
 * A mesh of one device (the --check reference) runs each collective at
 * start: there is nothing to overlap.
 */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"
#include "rt_turns.h"

/* Collectives a queue holds in flight. */
#define QCAP 8

/* One started collective. */
typedef struct slot {
    const rt_coll_desc *d;  /* its descriptor */
    const void *in;         /* input buffer */
    void *out;              /* output buffer */
    void *req;              /* backend request (non-blocking backends), or NULL */
} slot;

struct rt_async {
    rt_device *dev;         /* the device whose collectives these are */
    int threaded;           /* 1: a communication thread runs them */
    int sync;               /* 1: run at start (one device: nothing to overlap) */
    pthread_t thread;       /* the communication thread, when threaded */
    pthread_mutex_t mu;     /* guards the counters and slots below */
    pthread_cond_t cv;      /* signalled on start, completion and quit */
    slot q[QCAP];           /* handle h lives in q[h % QCAP] */
    int64_t started;        /* handles issued so far */
    int64_t done;           /* handles completed (the thread runs them in order) */
    int64_t waited[QCAP];   /* per slot: 1 once waited (non-blocking backends) */
    int quit;               /* 1: the thread should end when the FIFO is empty */
};

/* The communication thread: runs queued collectives in order. */
static void *comm_main(void *arg)
{
    rt_async *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->done == q->started && !q->quit)
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->done == q->started)
            break;
        slot s = q->q[q->done % QCAP];
        pthread_mutex_unlock(&q->mu);
        rt_collective(q->dev, s.d, s.in, s.out);
        pthread_mutex_lock(&q->mu);
        q->done++;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

rt_async *rt_async_open(rt_device *dev)
{
    rt_async *q = rt_xmalloc(dev, sizeof *q);
    memset(q, 0, sizeof *q);
    q->dev = dev;
    q->sync = dev->ndevices <= 1;
    q->threaded = !q->sync && !dev->ops->coll_start;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    if (q->threaded && pthread_create(&q->thread, NULL, comm_main, q) != 0)
        rt_fatal(dev, "cannot start the communication thread of the asynchronous collectives");
    return q;
}

int64_t rt_async_start(rt_async *q, const rt_coll_desc *desc, const void *in, void *out)
{
    if (!desc)
        rt_fatal(q->dev, "rt_async_start: NULL descriptor");
    /* Checked here in its resolved form, which the backend's coll_start
     * reads (and copies); the communication thread's rt_collective
     * resolves `desc` again. */
    rt_coll_desc r, *d = &r;
    rt_coll_resolve(desc, d);
    rt_group_view g;
    rt_group_of(q->dev, d->naxes, d->axes, &g);
    rt_check_coll(q->dev, d, &g);
    if (rt_numel(d->rank, d->in_shape) > 0 && (!in || !out || in == out))
        rt_fatal(q->dev, "asynchronous collective (op %d): NULL or shared input/output buffer",
                 d->op_id);
    if (!q->threaded && q->started - q->done >= QCAP)
        rt_fatal(q->dev, "asynchronous collective (op %d): more than %d in flight", d->op_id, QCAP);
    pthread_mutex_lock(&q->mu);
    while (q->started - q->done >= QCAP)
        pthread_cond_wait(&q->cv, &q->mu);
    int64_t h = q->started;
    q->q[h % QCAP] = (slot){desc, in, out, NULL};
    q->waited[h % QCAP] = 0;
    if (q->threaded) {
        q->started++;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
        return h;
    }
    pthread_mutex_unlock(&q->mu);
    if (q->sync || d->kind == RT_SLICE || g.size == 1) {
        rt_collective(q->dev, desc, in, out);
    } else {
        q->q[h % QCAP].req = q->dev->ops->coll_start(q->dev, d, &g, in, out);
    }
    q->started++;
    return h;
}

void rt_async_wait(rt_async *q, int64_t h)
{
    if (h < 0 || h >= q->started || h < q->started - QCAP)
        rt_fatal(q->dev, "rt_async_wait: handle %lld is not in flight", (long long)h);
    if (q->threaded) {
        pthread_mutex_lock(&q->mu);
        int paused = 0;
        if (q->done <= h && q->dev->core) {
            /* The communication thread runs without a CPU turn (rt_turns.h):
             * a device thread about to sleep on it gives its turn up. */
            pthread_mutex_unlock(&q->mu);
            paused = rt_turn_pause(q->dev);
            pthread_mutex_lock(&q->mu);
        }
        while (q->done <= h)
            pthread_cond_wait(&q->cv, &q->mu);
        pthread_mutex_unlock(&q->mu);
        rt_turn_resume(q->dev, paused);
        return;
    }
    slot *s = &q->q[h % QCAP];
    if (s->req && !q->waited[h % QCAP])
        q->dev->ops->coll_wait(q->dev, s->req);
    s->req = NULL;
    q->waited[h % QCAP] = 1;
    /* Handles complete in any order here; `done` counts the oldest prefix. */
    while (q->done < q->started && q->waited[q->done % QCAP])
        q->done++;
}

void rt_async_close(rt_async *q)
{
    if (!q)
        return;
    if (q->threaded) {
        pthread_mutex_lock(&q->mu);
        q->quit = 1;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
        pthread_join(q->thread, NULL);
    } else {
        for (int64_t h = q->done; h < q->started; h++)
            rt_async_wait(q, h);
    }
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
}
