/*
 * pipe_bubble.c - --profile of a pipelined program: the measured bubble
 * beside the cost model's prediction (docs/pipeline.md "Seeing the bubble").
 *
 * The root has every device's spans (trace.c's collection): its ops, its
 * pipeline items F m / B m / W m in the order it ran them, and the waits
 * inside rt_recv during an item (pipe_items.c).  Every stage runs all items
 * of its schedule in each run: 2M for a training step (F m and B m), 3M
 * for zero-bubble's (W m too, the dL/dW half of the backward), M for a
 * forward (F m only, no B item seen), with M microbatches (the largest
 * microbatch seen + 1), so a device's items [n r, n (r+1)) are run r's.  For one
 * run, with the same definition as the cost model's simulator
 * (docs/pipeline.md "The model of a step"):
 *
 *   span     = latest item end - earliest item begin, over all devices;
 *   busy_d   = sum over d's items of (item time - time blocked in rt_recv);
 *   bubble   = 1 - mean_d(busy_d) / span.
 *
 * The time before a stage's first item and after its last one (the fill
 * and drain) is in the span but in no item, so it counts as bubble, as do
 * the receives' waits; the sends do not wait (rt_send buffers).  Then the
 * median over the runs (a shared machine makes one run in ten slow; see
 * profile.c).  A run whose items the trace buffer did not hold on every
 * device is left out.  On a machine with fewer cores than devices, stages
 * that share a core slow each other's items, and the time a ready stage
 * waits for a core counts as busy: the measured bubble then says little
 * about the schedule (bench/pipeline.py says so beside its numbers).
 *
 * So when the devices outnumber the CPUs the line adds the core-idle
 * bubble, the share of the CPUs' time with nothing to run (Qi et al.,
 * ICLR'24, section 2, count idle device time; here the CPUs are the
 * devices), per run and then the median:
 *
 *   core_idle = 1 - sum over CPUs of (time some item of a device pinned to
 *               it was busy) / (min(D, cpus) x span),
 *
 * device d on CPU d mod cpus as the threads backend pins it (--bind-to
 * core); unpinned (--bind-to none), min(busy devices, cpus) CPUs at each
 * moment.  The union over a CPU's devices is the sum of their items' work
 * whether they took turns (EINC_CORE_SHARING=items: their items do not
 * overlap) or the kernel sliced the CPU between them (overlapping items
 * share it).  With a CPU per device it is the bubble above.
 * docs/pipeline.md, "Stages sharing cores: the core-idle bubble".
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"
#include "rt_job.h"

/* One item of one device, times in ns on the devices' common origin. */
typedef struct item_time {
    int64_t begin, end;
    int64_t busy;     /* end - begin minus the rt_recv waits inside it */
    int64_t iv, niv;  /* its busy intervals: [iv, iv + niv) of the device's */
} item_time;

/* A busy interval [b, e) of an item: the item cut by its receive waits. */
typedef struct busy_iv {
    int64_t b, e;
} busy_iv;

/* The schedule's name from the --dump-ir text embedded in prog->info
 * ("...; schedule 1f1b, one slot per item ..."), into buf; "unknown
 * schedule" when the text has none. */
static const char *schedule_name(const rt_program *p, char *buf, size_t n)
{
    const char *s = p->info ? strstr(p->info, "; schedule ") : NULL;
    size_t k = 0;
    if (s) {
        s += strlen("; schedule ");
        while (k + 1 < n && s[k] && s[k] != ',' && s[k] != ' ' && s[k] != '\n') {
            buf[k] = s[k];
            k++;
        }
    }
    buf[k] = 0;
    return k ? buf : "unknown schedule";
}

/* Device d's items from job->trace into items (trace_cap entries) and
 * their busy intervals into ivs (trace_cap entries: an item and each wait
 * inside it are spans, and each adds at most one interval); returns how
 * many items, the largest microbatch seen in *max_mb, and sets *saw_b when
 * one is a backward, *saw_w when one is a dL/dW item. */
static int64_t device_items(const rt_job *job, int64_t d, item_time *items, busy_iv *ivs, int64_t *max_mb,
                            int64_t *max_chunk, bool *saw_b, bool *saw_w)
{
    int64_t nd = rt_mesh_size(job->prog), n = 0, nv = 0, waits = 0;
    for (int64_t k = 0; k < job->trace_cap; k++) {
        const int64_t *e = job->trace + k * 3 * nd;
        int64_t id = e[d], b = e[nd + d], en = e[2 * nd + d];
        char kind;
        int64_t mb, chunk;
        if (id == RT_SPAN_RECV_WAIT) {
            /* recorded before the item that holds it (an item's span is
             * added at its end): kept in ivs until the item comes */
            ivs[nv + waits++] = (busy_iv){b, en};
        } else if (rt_span_item(id, &kind, &mb, &chunk)) {
            /* The item minus the waits inside it (a wait outside the item
             * is not its own), in time order. */
            int64_t at = b, busy = 0, first = nv;
            for (int64_t w = 0; w < waits; w++) {
                busy_iv x = ivs[first + w];
                if (x.b < b || x.e > en)
                    continue;
                if (x.b > at)
                    ivs[nv++] = (busy_iv){at, x.b};
                at = x.e > at ? x.e : at;
            }
            if (en > at)
                ivs[nv++] = (busy_iv){at, en};
            for (int64_t i = first; i < nv; i++)
                busy += ivs[i].e - ivs[i].b;
            items[n++] = (item_time){b, en, busy, first, nv - first};
            *max_mb = mb > *max_mb ? mb : *max_mb;
            *max_chunk = chunk > *max_chunk ? chunk : *max_chunk;
            *saw_b |= kind == 'B';
            *saw_w |= kind == 'W';
            waits = 0;
        }
    }
    return n;
}

/* One end of a busy interval for core_idle's sweep. */
typedef struct iv_end {
    int64_t t;
    int32_t delta; /* +1 begins, -1 ends */
    int32_t cpu;
} iv_end;

static int by_time(const void *a, const void *b)
{
    const iv_end *x = a, *y = b;
    /* An end before a begin at the same time: touching items do not overlap. */
    return x->t != y->t ? (x->t > y->t) - (x->t < y->t) : x->delta - y->delta;
}

/* The core-idle bubble of run r (header): the busy intervals of its items
 * swept in time order, a CPU counted while one of its devices is busy
 * (`pinned`: device d on CPU d mod cpus) or min(busy devices, cpus) CPUs
 * (not pinned), over min(nd, cpus) CPUs x [first, last).  `ends` has room
 * for 2 x every interval; `count` for cpus counters. */
static double core_idle(const item_time *items, const busy_iv *ivs, int64_t nd,
                        int64_t cap, int64_t r, int64_t per_run, int64_t cpus, bool pinned, iv_end *ends,
                        int64_t *count, int64_t first, int64_t last)
{
    int64_t n = 0;
    for (int64_t d = 0; d < nd; d++)
        for (int64_t i = r * per_run; i < (r + 1) * per_run; i++) {
            const item_time *t = &items[d * cap + i];
            for (int64_t k = t->iv; k < t->iv + t->niv; k++) {
                const busy_iv *x = &ivs[d * cap + k];
                ends[n++] = (iv_end){x->b, 1, (int32_t)(d % cpus)};
                ends[n++] = (iv_end){x->e, -1, (int32_t)(d % cpus)};
            }
        }
    qsort(ends, (size_t)n, sizeof *ends, by_time);
    memset(count, 0, (size_t)cpus * sizeof *count);
    int64_t busy_cpus = 0, busy_devs = 0, prev = first;
    double used = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t now = pinned ? busy_cpus : (busy_devs < cpus ? busy_devs : cpus);
        used += (double)now * (double)(ends[k].t - prev);
        prev = ends[k].t;
        busy_devs += ends[k].delta;
        int64_t *c = &count[ends[k].cpu];
        busy_cpus += (ends[k].delta > 0 && *c == 0) - (ends[k].delta < 0 && *c == 1);
        *c += ends[k].delta;
    }
    return 1 - used / (double)(nd < cpus ? nd : cpus) / (double)(last - first);
}

/* The CPUs the threads backend shares among the devices (the ones this
 * process may run on) and whether it pins device d to the (d mod n)-th;
 * with MPI a rank per device, each on a CPU of its own. */
static int64_t job_cpus(const rt_job *job, bool *pinned)
{
    *pinned = !job->opt || job->opt->bind != RT_BIND_NONE;
    cpu_set_t set;
    if (!job->launcher || strcmp(job->launcher->name, "threads") != 0 ||
        sched_getaffinity(0, sizeof set, &set) != 0)
        return rt_mesh_size(job->prog);
    int n = CPU_COUNT(&set);
    return n > 0 ? n : 1;
}

void rt_pipe_bubble_print(FILE *f, const rt_job *job)
{
    bool pinned;
    int64_t cpus = job_cpus(job, &pinned);
    rt_pipe_bubble_print_cpus(f, job, cpus, pinned);
}

void rt_pipe_bubble_print_cpus(FILE *f, const rt_job *job, int64_t cpus, bool pinned)
{
    const rt_program *p = job->prog;
    if (!p->pipeline_axes || !job->trace)
        return;
    int64_t nd = rt_mesh_size(p), stages = 1, cap = job->trace_cap;
    for (int32_t a = 0; a < p->naxes; a++)
        if (p->pipeline_axes & (1 << a))
            stages *= p->axis_sizes[a];
    cpus = cpus < 1 ? 1 : cpus;
    bool shared = cpus < nd;
    item_time *items = malloc((size_t)(nd * cap + 1) * sizeof *items);
    busy_iv *ivs = malloc((size_t)(nd * cap + 1) * sizeof *ivs);
    iv_end *ends = malloc((size_t)(2 * nd * cap + 1) * sizeof *ends);
    int64_t *nitems = malloc((size_t)nd * sizeof *nitems), *count = malloc((size_t)cpus * sizeof *count);
    double *bubble = malloc((size_t)(2 * cap + 2) * sizeof *bubble), *idle = bubble + cap + 1;
    if (!items || !ivs || !ends || !nitems || !count || !bubble)
        rt_fatal(NULL, "out of memory in the profiler");
    int64_t max_mb = -1, max_chunk = -1, runs = INT64_MAX;
    bool saw_b = false, saw_w = false;
    for (int64_t d = 0; d < nd; d++)
        nitems[d] = device_items(job, d, items + d * cap, ivs + d * cap, &max_mb, &max_chunk, &saw_b, &saw_w);
    /* A run's items: F (B, W) of every microbatch, and of every chunk
     * with the interleaved schedule. */
    int64_t M = max_mb + 1, per_run = (1 + saw_b + saw_w) * M * (max_chunk >= 0 ? max_chunk + 1 : 1);
    for (int64_t d = 0; d < nd; d++)
        runs = per_run > 0 && nitems[d] / per_run < runs ? nitems[d] / per_run : runs;
    int64_t nb = 0;
    for (int64_t r = 0; per_run > 0 && r < runs; r++) {
        int64_t first = INT64_MAX, last = INT64_MIN;
        double busy = 0;
        for (int64_t d = 0; d < nd; d++)
            for (int64_t i = r * per_run; i < (r + 1) * per_run; i++) {
                const item_time *t = &items[d * cap + i];
                first = t->begin < first ? t->begin : first;
                last = t->end > last ? t->end : last;
                busy += (double)t->busy;
            }
        if (last > first) {
            if (shared)
                idle[nb] = core_idle(items, ivs, nd, cap, r, per_run, cpus, pinned, ends, count, first, last);
            bubble[nb++] = 1 - busy / (double)nd / (double)(last - first);
        }
    }
    char sched[32];
    fprintf(f, "pipeline: %lld stages, %lld microbatches, %s: ", (long long)stages,
            (long long)M, schedule_name(p, sched, sizeof sched));
    if (nb > 0) {
        fprintf(f, "measured bubble %.1f%% (median over %lld run%s)", 100 * rt_median(bubble, nb),
                (long long)nb,
                nb == 1 ? "" : "s");
    } else {
        fprintf(f, "measured bubble unknown (no run's items were all recorded)");
    }
    if (p->pipeline_bubble >= 0)
        fprintf(f, ", predicted %.1f%%", 100 * p->pipeline_bubble);
    else
        fprintf(f, ", predicted: unknown");
    /* The cost pass's prediction of it is --dump-ir=json's
     * totals.pipeline.core_bubbles[cpus - 1]. */
    if (shared && nb > 0)
        fprintf(f, "; %lld devices on %lld CPUs: core-idle bubble %.1f%%", (long long)nd, (long long)cpus,
                100 * rt_median(idle, nb));
    fprintf(f, "\n");
    free(items);
    free(ivs);
    free(ends);
    free(nitems);
    free(count);
    free(bubble);
}
