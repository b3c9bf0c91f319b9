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
 */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"
#include "rt_job.h"

/* One item of one device, times in ns from the device's origin. */
typedef struct item_time {
    int64_t begin, end;
    int64_t busy; /* end - begin minus the rt_recv waits inside it */
} item_time;

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

/* Device d's items from job->trace into items (trace_cap entries); returns
 * how many, the largest microbatch seen in *max_mb, and sets *saw_b when
 * one is a backward, *saw_w when one is a dL/dW item. */
static int64_t device_items(const rt_job *job, int64_t d, item_time *items, int64_t *max_mb, int64_t *max_chunk,
                            bool *saw_b, bool *saw_w)
{
    int64_t nd = rt_mesh_size(job->prog), n = 0, waited = 0, wait_from = INT64_MAX;
    for (int64_t k = 0; k < job->trace_cap; k++) {
        const int64_t *e = job->trace + k * 3 * nd;
        int64_t id = e[d], b = e[nd + d], en = e[2 * nd + d];
        char kind;
        int64_t mb, chunk;
        if (id == RT_SPAN_RECV_WAIT) {
            /* recorded before the item that holds it (an item's span is
             * added at its end) */
            waited += en - b;
            wait_from = b < wait_from ? b : wait_from;
        } else if (rt_span_item(id, &kind, &mb, &chunk)) {
            int64_t w = wait_from >= b ? waited : 0; /* a wait outside the item is not its own */
            items[n++] = (item_time){b, en, en - b - w};
            *max_mb = mb > *max_mb ? mb : *max_mb;
            *max_chunk = chunk > *max_chunk ? chunk : *max_chunk;
            *saw_b |= kind == 'B';
            *saw_w |= kind == 'W';
            waited = 0;
            wait_from = INT64_MAX;
        }
    }
    return n;
}

void rt_pipe_bubble_print(FILE *f, const rt_job *job)
{
    const rt_program *p = job->prog;
    if (!p->pipeline_axes || !job->trace)
        return;
    int64_t nd = rt_mesh_size(p), stages = 1;
    for (int32_t a = 0; a < p->naxes; a++)
        if (p->pipeline_axes & (1 << a))
            stages *= p->axis_sizes[a];
    item_time *items = malloc((size_t)(nd * job->trace_cap + 1) * sizeof *items);
    int64_t *nitems = malloc((size_t)nd * sizeof *nitems);
    double *bubble = malloc((size_t)(job->trace_cap + 1) * sizeof *bubble);
    if (!items || !nitems || !bubble)
        rt_fatal(NULL, "out of memory in the profiler");
    int64_t max_mb = -1, max_chunk = -1, runs = INT64_MAX;
    bool saw_b = false, saw_w = false;
    for (int64_t d = 0; d < nd; d++)
        nitems[d] = device_items(job, d, items + d * job->trace_cap, &max_mb, &max_chunk, &saw_b, &saw_w);
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
                const item_time *t = &items[d * job->trace_cap + i];
                first = t->begin < first ? t->begin : first;
                last = t->end > last ? t->end : last;
                busy += (double)t->busy;
            }
        if (last > first)
            bubble[nb++] = 1 - busy / (double)nd / (double)(last - first);
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
        fprintf(f, ", predicted %.1f%%\n", 100 * p->pipeline_bubble);
    else
        fprintf(f, ", predicted: unknown\n");
    free(items);
    free(nitems);
    free(bubble);
}
