/*
 * backend_threads.c - the default backend: one process, one pthread per
 * device.
 *
 * Groups are created lazily: the first device that needs the group of mesh
 * axes `mask` containing it creates it under the world mutex (keyed by the
 * mask and the group's first member); later lookups hit a per-device cache
 * indexed by mask, without locking.  A group holds a barrier for its G
 * members and per-rank slots where each member publishes its buffers for
 * the algorithms of coll_threads.c.  Slots are indexed by the group rank of
 * the collective's axis order, which all members share.
 *
 * Point-to-point messages (rt_send / rt_recv) go through one mailbox per
 * device (p2p_threads.c), held by the world; a message still in a mailbox
 * when the devices have finished was never received, and ends the job.
 *
 * Device threads pinned to fewer CPUs than there are threads take turns
 * at pipeline items, one turn per CPU (core_turns.c, rt_turns.h), unless
 * EINC_CORE_SHARING=kernel leaves the sharing to the kernel.
 */
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET */
#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_internal.h"
#include "rt_job.h"
#include "rt_turns.h"

/* Masks of subsets of RT_MAX_AXES axes. */
#define NMASKS (1u << RT_MAX_AXES)

/* One group of devices (a set of mesh axes and the devices it spans). */
typedef struct tgroup {
    uint32_t mask;               /* mesh axes of the group */
    int64_t first;               /* linear id of its member with coordinate 0 on the axes */
    int64_t size;                /* G */
    rt_barrier bar;              /* the group's barrier */
    const void **in;             /* per group rank: published input */
    void **out;                  /* per group rank: published output */
    const rt_coll_desc **desc;   /* per group rank: descriptor, to detect disagreement */
    struct tgroup *next;         /* next group of the world's list */
} tgroup;

/* What all threads of a run share. */
typedef struct tworld {
    const rt_program *prog;      /* the program (its mesh) */
    pthread_mutex_t mu;          /* guards `groups` */
    tgroup *groups;              /* every group created so far */
    rt_waitstate ws;             /* blocked/finished threads, for deadlock detection */
    rt_mailbox *boxes;           /* per device id: messages sent to it (owned) */
    rt_core_turns *cores;        /* per CPU the devices share: its turn (owned), or NULL */
} tworld;

/* What one device thread owns. */
typedef struct tlocal {
    rt_device dev;               /* the device */
    pthread_t thread;            /* its thread */
    tgroup *cache[NMASKS];       /* its group for each mask, once looked up */
    void (*fn)(rt_device *dev, void *arg); /* what the thread runs */
    void *arg;                   /* argument of fn */
} tlocal;

RT_NORETURN static void threads_abort(void)
{
    _exit(1);
}

static tgroup *group_for(rt_device *dev, uint32_t mask)
{
    tlocal *loc = dev->backend_local;
    if (loc->cache[mask])
        return loc->cache[mask];
    tworld *w = dev->backend;
    const rt_program *p = w->prog;
    int64_t first = 0, size = 1;
    for (int32_t a = 0; a < p->naxes; a++) {
        int in_group = (mask >> a) & 1u;
        first = first * p->axis_sizes[a] + (in_group ? 0 : dev->coord[a]);
        if (in_group)
            size *= p->axis_sizes[a];
    }
    pthread_mutex_lock(&w->mu);
    tgroup *g = w->groups;
    while (g && !(g->mask == mask && g->first == first))
        g = g->next;
    if (!g) {
        g = calloc(1, sizeof *g);
        const void **in = calloc((size_t)size, sizeof *in);
        void **out = calloc((size_t)size, sizeof *out);
        const rt_coll_desc **desc = calloc((size_t)size, sizeof *desc);
        if (!g || !in || !out || !desc)
            rt_fatal(dev, "out of memory creating a device group");
        g->mask = mask;
        g->first = first;
        g->size = size;
        g->in = in;
        g->out = out;
        g->desc = desc;
        rt_barrier_init(&g->bar, size, &w->ws);
        g->next = w->groups;
        w->groups = g;
    }
    pthread_mutex_unlock(&w->mu);
    loc->cache[mask] = g;
    return g;
}

/* Waits at the group's barrier; a deadlock is fatal instead of a hang. */
static void group_wait(rt_device *dev, tgroup *g, int32_t op_id)
{
    if (rt_barrier_wait(&g->bar, dev) == 0)
        return;
    if (op_id >= 0)
        rt_fatal(dev, "deadlock in the collective of op %d: every device waits for a peer "
                 "that will never come (devices called collectives over different groups "
                 "or in different orders)", op_id);
    rt_fatal(dev, "deadlock at a barrier: every device waits for a peer that will never "
             "come (devices called collectives over different groups or in different "
             "orders)");
}

static void threads_barrier(rt_device *dev, uint32_t mask)
{
    if (mask == 0)
        return;
    group_wait(dev, group_for(dev, mask), -1);
}

/* Fatal unless the peers' (resolved) descriptors agree with ours on what
 * matters. */
static void check_agreement(rt_device *dev, const rt_coll_desc *d, const tgroup *grp,
                            int64_t rank)
{
    const rt_coll_desc *o = grp->desc[(rank + 1) % grp->size];
    int same = o->kind == d->kind && o->dtype == d->dtype && o->rank == d->rank &&
               o->dim == d->dim && o->naxes == d->naxes && o->reduce_op == d->reduce_op &&
               memcmp(o->in_shape, d->in_shape, sizeof d->in_shape[0] * (size_t)d->rank) == 0;
    for (int32_t k = 0; same && k < d->naxes; k++)
        same = o->axes[k] == d->axes[k] && o->axis_dim[k] == d->axis_dim[k] &&
               o->axis_dim2[k] == d->axis_dim2[k];
    if (!same)
        rt_fatal(dev, "collective (op %d) called with a different descriptor (op %d) by a peer",
                 d->op_id, o->op_id);
}

static void threads_collective(rt_device *dev, const rt_coll_desc *d, const rt_group_view *g,
                               const void *in, void *out)
{
    if (g->size > RT_MAX_DEVICES)
        rt_fatal(dev, "group of %lld devices is too large", (long long)g->size);
    tgroup *grp = group_for(dev, g->mask);
    grp->in[g->rank] = in;
    grp->out[g->rank] = out;
    grp->desc[g->rank] = d;
    group_wait(dev, grp, d->op_id);
    check_agreement(dev, d, grp, g->rank);
    rt_shared_bufs b = {grp->in, grp->out};
    switch (d->kind) {
    case RT_ALLGATHER:
        rt_threads_allgather(d, g, &b, out);
        break;
    case RT_REDUCESCATTER:
        rt_threads_reducescatter(d, g, &b, out);
        break;
    case RT_ALLREDUCE:
        rt_threads_allreduce_reduce(d, g, &b, out);
        group_wait(dev, grp, d->op_id);
        rt_threads_allreduce_copy(d, g, &b, out);
        break;
    case RT_ALLTOALL:
        rt_threads_alltoall(d, g, &b, out);
        break;
    }
    /* Nobody may reuse or free a buffer a peer is still reading. */
    group_wait(dev, grp, d->op_id);
}

static void threads_collect_i64(rt_device *dev, int64_t v, int64_t *all)
{
    if (all)
        all[dev->id] = v;
}

static void threads_gather(rt_device *dev, const rt_tensor_desc *t, const void *local,
                           void *global)
{
    if (!global || !rt_is_primary_holder(t, dev->prog->naxes, dev->coord))
        return;
    rt_place_block(dev->prog, t, dev->coord, local, global);
}

static void threads_send(rt_device *dev, int64_t peer, int32_t tag, const void *buf,
                         int64_t bytes)
{
    tworld *w = dev->backend;
    rt_mailbox_put(dev, &w->boxes[peer], dev->id, tag, buf, bytes);
}

static void threads_recv(rt_device *dev, int64_t peer, int32_t tag, void *buf, int64_t bytes)
{
    tworld *w = dev->backend;
    rt_mailbox_take(dev, &w->boxes[dev->id], peer, tag, buf, bytes);
}

static int32_t threads_probe(rt_device *dev, int64_t peer, int32_t tag)
{
    tworld *w = dev->backend;
    return rt_mailbox_peek(&w->boxes[dev->id], peer, tag);
}

static const rt_device_ops threads_ops = {
    .name = "threads",
    .barrier = threads_barrier,
    .collective = threads_collective,
    .collect_i64 = threads_collect_i64,
    .gather = threads_gather,
    .abort = threads_abort,
    .send = threads_send,
    .recv = threads_recv,
    .probe = threads_probe,
};

static void *thread_main(void *p)
{
    tlocal *loc = p;
    loc->fn(&loc->dev, loc->arg);
    tworld *w = loc->dev.backend;
    if (rt_waitstate_finish(&w->ws))
        rt_fatal(&loc->dev, "deadlock: this device finished while its peers wait in a "
                 "collective it never called or for a message it never sent");
    return NULL;
}

/* The CPUs the process may run on, in order, into cpus[CPU_SETSIZE]; their
 * number, 0 when the kernel does not say. */
static int allowed_cpus(int *cpus)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return 0;
    int ncpus = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed))
            cpus[ncpus++] = c;
    return ncpus;
}

/*
 * RT_BIND_CORE: pins device d's thread to the (d mod n)-th CPU the process
 * may run on, as `mpirun --bind-to core --map-by core` places ranks.
 * Unpinned, the kernel now and then puts two busy device threads on one
 * core while the other idles until its load balancer notices: the same
 * GEMM then takes 2x as long in one run as in the next.  Pinned, every
 * core runs the same devices for the whole job, and a device that yields
 * in a barrier hands its core to a device that has work.  A CPU set the
 * kernel refuses is not an error: the thread runs unpinned.  With one CPU
 * there is nothing to choose.
 */
static void bind_threads(const tlocal *locs, int64_t n, const int *cpus, int ncpus)
{
    if (ncpus < 2)
        return;
    for (int64_t i = 0; i < n; i++) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[i % ncpus], &one);
        (void)pthread_setaffinity_np(locs[i].thread, sizeof one, &one);
    }
}

/*
 * RT_BIND_CORE_ITEMS with more device threads than CPUs: one turn per CPU
 * (rt_turns.h), device d sharing the turn of the CPU it is pinned to (d mod
 * ncpus; with one CPU, every device the one turn).  NULL, and every
 * device's `core` NULL, when each device thread has a CPU of its own or the
 * threads are not pinned: then nothing is shared that turns would order.
 */
static rt_core_turns *plan_turns(tlocal *locs, int64_t n, rt_bind bind, int ncpus)
{
    if (bind != RT_BIND_CORE_ITEMS || ncpus < 1 || n <= ncpus)
        return NULL;
    rt_core_turns *cores = calloc((size_t)ncpus, sizeof *cores);
    if (!cores)
        rt_fatal(NULL, "out of memory starting %lld device threads", (long long)n);
    for (int c = 0; c < ncpus; c++)
        rt_core_turns_init(&cores[c]);
    for (int64_t i = 0; i < n; i++)
        locs[i].dev.core = &cores[i % ncpus];
    return cores;
}

/* After the devices have finished: frees the mailboxes, and ends the job
 * when one still holds a message (a send without its receive: a schedule
 * bug the program would otherwise hide). */
static void check_mailboxes(tworld *w, const tlocal *locs, int64_t n)
{
    int64_t bad = -1, left = 0;
    rt_msg first = {0};
    for (int64_t i = 0; i < n; i++) {
        rt_msg m;
        int64_t k = rt_mailbox_destroy(&w->boxes[i], &m);
        if (k && bad < 0) {
            bad = i;
            left = k;
            first = m;
        }
    }
    free(w->boxes);
    w->boxes = NULL;
    if (bad >= 0)
        rt_fatal(&locs[bad].dev, "%lld message(s) sent to this device were never received "
                 "(the first from device %lld with tag %d, %lld bytes)", (long long)left,
                 (long long)first.src, first.tag, (long long)first.bytes);
}

void rt_threads_launch(const rt_program *prog, int profiling, rt_bind bind,
                       void (*fn)(rt_device *dev, void *arg), void *arg)
{
    int64_t n = rt_mesh_size(prog);
    if (n < 1 || n > RT_MAX_DEVICES)
        rt_fatal(NULL, "a mesh of %lld devices is not supported by the threads backend "
                 "(1..%d)", (long long)n, RT_MAX_DEVICES);
    /* Devices share the cores: one BLAS thread each.  A single device may
     * use every core through OpenBLAS's own threads. */
    if (n > 1)
        openblas_set_num_threads(1);
    int64_t reserve = rt_check_address_space(NULL, n);
    tworld w = {.prog = prog, .groups = NULL, .cores = NULL};
    atomic_init(&w.ws.word, 0);
    w.ws.nthreads = n;
    pthread_mutex_init(&w.mu, NULL);
    tlocal *locs = calloc((size_t)n, sizeof *locs);
    w.boxes = calloc((size_t)n, sizeof *w.boxes);
    if (!locs || !w.boxes)
        rt_fatal(NULL, "out of memory starting %lld device threads", (long long)n);
    for (int64_t i = 0; i < n; i++)
        rt_mailbox_init(&w.boxes[i], &w.ws);
    int pinned = bind == RT_BIND_CORE || bind == RT_BIND_CORE_ITEMS;
    int cpus[CPU_SETSIZE], ncpus = pinned ? allowed_cpus(cpus) : 0;
    for (int64_t i = 0; i < n; i++) {
        rt_device_init(&locs[i].dev, prog, &threads_ops, &w, i);
        locs[i].dev.backend_local = &locs[i];
        locs[i].dev.profiling = profiling;
        locs[i].dev.as_reserve = reserve;
        rt_gemv_split_plan(&locs[i].dev.gemv, n, i, pinned);
        locs[i].fn = fn;
        locs[i].arg = arg;
    }
    w.cores = plan_turns(locs, n, bind, ncpus);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)8 << 20);
    for (int64_t i = 0; i < n; i++)
        if (pthread_create(&locs[i].thread, &attr, thread_main, &locs[i]) != 0)
            rt_fatal(NULL, "cannot start the thread of device %lld", (long long)i);
    pthread_attr_destroy(&attr);
    if (pinned)
        bind_threads(locs, n, cpus, ncpus);
    for (int64_t i = 0; i < n; i++)
        pthread_join(locs[i].thread, NULL);
    check_mailboxes(&w, locs, n);
    for (int64_t i = 0; i < n; i++)
        rt_device_release(&locs[i].dev);
    while (w.groups) {
        tgroup *g = w.groups;
        w.groups = g->next;
        rt_barrier_destroy(&g->bar);
        free(g->in);
        free(g->out);
        free(g->desc);
        free(g);
    }
    for (int c = 0; w.cores && c < ncpus; c++)
        rt_core_turns_destroy(&w.cores[c]);
    free(w.cores);
    pthread_mutex_destroy(&w.mu);
    free(locs);
}

/* ---- the threads launcher (one process) ---- */

static void launcher_init(int *argc, char ***argv, int *rank, int *nranks)
{
    (void)argc;
    (void)argv;
    *rank = 0;
    *nranks = 1;
}

static void job_thread(rt_device *dev, void *arg)
{
    rt_job_device(dev, arg);
}

/* --bind-to core with EINC_CORE_SHARING (docs/runtime.md, "Waiting"):
 * `items` (also unset or empty), device threads that outnumber their CPUs
 * take turns at pipeline items (rt_turns.h): in interleaved A/B runs of
 * bench/pipeline.py at Z = 4 on 2 cores their steps took 0.92x the
 * kernel's (median over 20 rows) and their bubbles spread less from run to
 * run; `kernel`, the kernel's scheduler shares each CPU.  Another value
 * ends the job with a message. */
static rt_bind core_sharing(rt_bind bind)
{
    const char *v = getenv("EINC_CORE_SHARING");
    if (bind != RT_BIND_CORE)
        return bind;
    if (!v || !*v || !strcmp(v, "items"))
        return RT_BIND_CORE_ITEMS;
    if (!strcmp(v, "kernel"))
        return RT_BIND_CORE;
    rt_fatal(NULL, "EINC_CORE_SHARING=%s: expected 'items' or 'kernel'", v);
}

static void launcher_run(rt_job *job)
{
    rt_threads_launch(job->prog, job->opt->profile ? RT_PROFILE_IN_STEP : RT_PROFILE_OFF,
                      core_sharing((rt_bind)job->opt->bind), job_thread, job);
}

static int launcher_all_ok(int ok)
{
    return ok;
}

RT_NORETURN static void launcher_finish(int status)
{
    fflush(NULL);
    exit(status);
}

const rt_launcher rt_threads_launcher = {
    .name = "threads",
    .init = launcher_init,
    .run = launcher_run,
    .all_ok = launcher_all_ok,
    .finish = launcher_finish,
    .abort = threads_abort,
    .ranks_are_devices = 0,
};
