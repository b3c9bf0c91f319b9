/*
 * profile.c - --profile: measured time per op next to the cost pass's
 * prediction.
 *
 * rt_op_end records every call as a span (op id, begin, end).  The table
 * takes, per op, the median of its calls on device 0 (the median, not the
 * mean, because a run on a shared machine has outliers: a descheduled
 * thread makes one call ten times slower) and compares it with the time the
 * cost pass predicted for one call of that op on the profile the program was
 * compiled for (rt_program.op_predicted / hw_name, embedded by codegen).
 * error = (predicted - measured) / measured: negative means the model is
 * optimistic.  An op fused into a later elementwise loop has no marker of
 * its own; its prediction is added to the op that computes it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

void rt_profile_add_span(rt_device *dev, int32_t op_id, double begin, double end)
{
    rt_profile *p = &dev->profile;
    if (p->nspans >= RT_MAX_SPANS)
        return;
    if (p->nspans == p->cap) {
        int64_t cap = p->cap ? 2 * p->cap : 256;
        rt_span *s = realloc(p->spans, (size_t)cap * sizeof *s);
        if (!s)
            rt_fatal(dev, "out of memory in the profiler");
        p->spans = s;
        p->cap = cap;
    }
    p->spans[p->nspans++] = (rt_span){op_id, begin, end};
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of the durations of op `op`'s spans (sorted in `tmp`, room for
 * every span); -1 if it has none. */
static double median_of(const rt_profile *p, int32_t op, double *tmp)
{
    int64_t n = 0;
    for (int64_t i = 0; i < p->nspans; i++)
        if (p->spans[i].op_id == op)
            tmp[n++] = p->spans[i].end - p->spans[i].begin;
    if (n == 0)
        return -1;
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

void rt_profile_print(FILE *f, const rt_device *dev, int64_t runs, const char *backend)
{
    const rt_program *prog = dev->prog;
    const rt_profile *p = &dev->profile;
    int has_pred = prog->nops > 0 && prog->op_predicted;
    const char *hw = prog->hw_name && prog->hw_name[0] ? prog->hw_name : NULL;
    fprintf(f, "profile of device 0 (%lld runs, %s backend, %lld devices): median time per "
            "call; predicted by the cost model for hw profile '%s'\n",
            (long long)runs, backend, (long long)dev->ndevices, hw ? hw : "?");
    fprintf(f, "  %4s %8s %13s %13s %9s  %s\n", "op", "calls", "measured_ms", "predicted_ms",
            "error", "name");
    double *tmp = malloc((size_t)(p->nspans > 0 ? p->nspans : 1) * sizeof *tmp);
    if (!tmp)
        rt_fatal(dev, "out of memory in the profiler");
    double sum_meas = 0, sum_pred = 0;
    int all_pred = 1;
    for (int32_t op = 0; op < p->n; op++) {
        if (!p->calls[op])
            continue;
        double med = median_of(p, op, tmp);
        if (med < 0) /* spans dropped past RT_MAX_SPANS: fall back to the mean */
            med = p->seconds[op] / (double)p->calls[op];
        double pred = has_pred && op < prog->nops ? prog->op_predicted[op] : -1;
        const char *name = prog->op_names && op < prog->nops && prog->op_names[op]
                               ? prog->op_names[op] : "?";
        sum_meas += med;
        fprintf(f, "  %4d %8lld %13.4f ", op, (long long)p->calls[op], 1e3 * med);
        if (pred >= 0 && med > 0) {
            sum_pred += pred;
            fprintf(f, "%13.4f %+8.1f%%  %s\n", 1e3 * pred, 100 * (pred - med) / med, name);
        } else {
            all_pred = 0;
            fprintf(f, "%13s %9s  %s\n", "-", "-", name);
        }
    }
    free(tmp);
    fprintf(f, "  %4s %8s %13.4f ", "sum", "", 1e3 * sum_meas);
    if (all_pred && sum_meas > 0)
        fprintf(f, "%13.4f %+8.1f%%\n", 1e3 * sum_pred, 100 * (sum_pred - sum_meas) / sum_meas);
    else
        fprintf(f, "%13s %9s\n", "-", "-");
}
