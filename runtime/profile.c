/*
 * profile.c - --profile: measured time per op next to the cost pass's
 * prediction.
 *
 * rt_op_end records every call as a span (op id, begin, end) on every
 * device, and after the runs the root has them all (trace.c's collection,
 * the same for --trace).  Under --profile the devices run the ops in step
 * (RT_PROFILE_IN_STEP: a barrier over the mesh before each op), and the
 * measured time of one call is its makespan: from the first device's begin
 * to the last device's end, on one clock (rt_trace_align; MPI ranks' spans
 * are moved onto rank 0's clock first, mpi_clock.c, else the ranks' origins,
 * about 1 ms apart on a shared core, added to every makespan).  That is the
 * op's time on the mesh -- what the next op that needs every device waits
 * for, and what the cost model predicts, since it assumes devices in
 * step.  On a machine with fewer cores than devices, the devices that
 * share a core run one after the other or interleaved depending on how
 * long the op is; the makespan is the same either way, while one device's
 * own duration is not.  A collective's makespan is its own cost: the
 * barrier before it absorbed the previous op's load imbalance, which the
 * model does not predict.
 *
 * Then the median over runs (not the mean: on a shared machine one run in
 * ten can be several times slower).  That is compared with the time the
 * cost pass predicted for one call on the profile the program was compiled
 * for (rt_program.op_predicted / hw_name, embedded by codegen):
 * error = (predicted - measured) / measured, negative when the model is
 * optimistic.  An op fused into a later elementwise loop has no marker of
 * its own; its prediction is added to the op that computes it.
 *
 * A pipelined program's stages run different ops at different times and
 * are in step only within a stage (the barrier leaves out the pipeline
 * axes), so there a call's makespan is taken over the devices of its own
 * stage (measured, below); pipe_bubble.c then prints the bubble.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"
#include "rt_job.h"

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

int rt_op_label_is_collective(const char *name)
{
    static const char *const kinds[] = {"AllGather", "ReduceScatter", "AllReduce", "AllToAll"};
    const char *eq = strstr(name, " = ");
    const char *k = eq ? eq + 3 : name;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t n = strlen(kinds[i]);
        if (!strncmp(k, kinds[i], n) && (k[n] == '_' || k[n] == ' ' || !k[n]))
            return 1;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double rt_median(double *v, int64_t n)
{
    if (n <= 0)
        return -1;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Scratch arrays of measured(), sized once for all ops. */
typedef struct call_scratch {
    int64_t ngroups;   /* stage groups: devices with the same pipeline coordinates */
    int64_t *group;    /* [ndevices] the device's stage group (0 without a pipeline) */
    int64_t *seen;     /* [ndevices] calls of the op seen so far on the device */
    int64_t *ncalls;   /* [ngroups] calls of the op in the group */
    int64_t *first;    /* [ngroups][trace_cap] earliest begin of call j of the group, ns */
    int64_t *last;     /* [ngroups][trace_cap] latest end of call j, ns */
    double *per_call;  /* [ngroups * trace_cap] makespans, seconds */
} call_scratch;

static void scratch_init(call_scratch *s, const rt_job *job)
{
    const rt_program *p = job->prog;
    int64_t nd = rt_mesh_size(p);
    s->ngroups = 1;
    for (int32_t a = 0; a < p->naxes; a++)
        if (p->pipeline_axes & (1 << a))
            s->ngroups *= p->axis_sizes[a];
    size_t cells = (size_t)(s->ngroups * job->trace_cap + 1);
    s->group = malloc((size_t)nd * sizeof *s->group);
    s->seen = malloc((size_t)nd * sizeof *s->seen);
    s->ncalls = malloc((size_t)s->ngroups * sizeof *s->ncalls);
    s->first = malloc(cells * sizeof *s->first);
    s->last = malloc(cells * sizeof *s->last);
    s->per_call = malloc(cells * sizeof *s->per_call);
    if (!s->group || !s->seen || !s->ncalls || !s->first || !s->last || !s->per_call)
        rt_fatal(NULL, "out of memory in the profiler");
    for (int64_t d = 0; d < nd; d++) {
        int64_t coord[RT_MAX_AXES], g = 0;
        rt_mesh_coord(p, d, coord);
        for (int32_t a = 0; a < p->naxes; a++)
            if (p->pipeline_axes & (1 << a))
                g = g * p->axis_sizes[a] + coord[a];
        s->group[d] = g;
    }
}

static void scratch_free(call_scratch *s)
{
    free(s->group);
    free(s->seen);
    free(s->ncalls);
    free(s->first);
    free(s->last);
    free(s->per_call);
}

/*
 * Measured seconds per call of op `op` from the collected spans (see the
 * top of the file); `calls` gets the number of calls seen.  Call j of an
 * op is its j-th span on each device that runs it: without a pipeline
 * every device runs every op (SPMD), so that is row j of the op.  In a
 * pipelined program the stages run different ops at different times, and
 * only the devices of one stage (the same coordinates on the pipeline
 * axes) run an op in step; so a call is (stage, j), its makespan taken
 * over that stage's devices, and `calls` counts every stage's calls.
 */
static double measured(const rt_job *job, int32_t op, call_scratch *s, int64_t *calls)
{
    int64_t nd = rt_mesh_size(job->prog), cap = job->trace_cap;
    memset(s->seen, 0, (size_t)nd * sizeof *s->seen);
    memset(s->ncalls, 0, (size_t)s->ngroups * sizeof *s->ncalls);
    for (int64_t k = 0; k < cap; k++) {
        const int64_t *e = job->trace + k * 3 * nd;
        for (int64_t d = 0; d < nd; d++) {
            if (e[d] != op)
                continue;
            int64_t g = s->group[d], j = s->seen[d]++, c = g * cap + j;
            if (j >= s->ncalls[g]) { /* the group's first device to make call j */
                s->ncalls[g] = j + 1;
                s->first[c] = e[nd + d];
                s->last[c] = e[2 * nd + d];
            }
            s->first[c] = e[nd + d] < s->first[c] ? e[nd + d] : s->first[c];
            s->last[c] = e[2 * nd + d] > s->last[c] ? e[2 * nd + d] : s->last[c];
        }
    }
    int64_t n = 0;
    for (int64_t g = 0; g < s->ngroups; g++)
        for (int64_t j = 0; j < s->ncalls[g]; j++)
            s->per_call[n++] = 1e-9 * (double)(s->last[g * cap + j] - s->first[g * cap + j]);
    *calls = n;
    return rt_median(s->per_call, n);
}

void rt_profile_print(FILE *f, const rt_job *job)
{
    const rt_program *prog = job->prog;
    int has_pred = prog->nops > 0 && prog->op_predicted;
    const char *hw = prog->hw_name && prog->hw_name[0] ? prog->hw_name : "?";
    fprintf(f, "profile (%lld runs, %s backend, %lld devices, ops in step): median time per "
            "call from the first device's begin to the last one's end; predicted by the cost "
            "model for hw profile '%s'\n",
            (long long)job->repeat, job->launcher->name, (long long)rt_mesh_size(prog), hw);
    if (prog->pipeline_axes)
        fprintf(f, "  pipelined: the stages run different ops, in step only within a stage; an "
                "op's calls are counted on every stage that runs it, a call's time taken over "
                "the devices of its stage, and the 'run' row sums the work of all stages (a run "
                "takes about that / stages, plus the bubble)\n");
    fprintf(f, "  %4s %8s %13s %13s %9s  %s\n", "op", "calls", "measured_ms", "predicted_ms",
            "error", "name");
    double sum_meas = 0, sum_pred = 0;
    int all_pred = 1;
    int32_t nops = prog->nops;
    if (nops <= 0) { /* an old program without op tables: ids as seen */
        for (int64_t i = 0; i < job->trace_cap * 3 * rt_mesh_size(prog); i += 3 * rt_mesh_size(prog))
            if (job->trace[i] >= nops)
                nops = (int32_t)job->trace[i] + 1;
    }
    call_scratch scratch;
    scratch_init(&scratch, job);
    for (int32_t op = 0; op < nops; op++) {
        const char *name = rt_program_op_name(prog, op, "?");
        int64_t calls;
        double med = measured(job, op, &scratch, &calls);
        if (calls == 0)
            continue;
        double pred = has_pred && op < prog->nops ? prog->op_predicted[op] : -1;
        /* The sum is per run: an op of a repeated block's body runs once
         * per layer. */
        double per_run = job->repeat > 0 ? (double)calls / (double)job->repeat : 1;
        sum_meas += med * per_run;
        fprintf(f, "  %4d %8lld %13.4f ", op, (long long)calls, 1e3 * med);
        if (pred >= 0 && med > 0) {
            sum_pred += pred * per_run;
            fprintf(f, "%13.4f %+8.1f%%  %s\n", 1e3 * pred, 100 * (pred - med) / med, name);
        } else {
            all_pred = 0;
            fprintf(f, "%13s %9s  %s\n", "-", "-", name);
        }
    }
    scratch_free(&scratch);
    fprintf(f, "  %4s %8s %13.4f ", "run", "", 1e3 * sum_meas);
    if (all_pred && sum_meas > 0)
        fprintf(f, "%13.4f %+8.1f%%\n", 1e3 * sum_pred, 100 * (sum_pred - sum_meas) / sum_meas);
    else
        fprintf(f, "%13s %9s\n", "-", "-");
}
