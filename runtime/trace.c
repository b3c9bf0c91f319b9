/*
 * trace.c - --trace FILE.json: every op call on every device as a Chrome
 * trace-event file (chrome://tracing, Perfetto, the Trace Event Format
 * document).
 *
 * Each device keeps its spans (profile.c; --profile uses the same collection).  Time 0 of a device is the start
 * of its first run, right after the barrier that starts it, so the devices'
 * clocks line up to within one barrier's skew even across MPI ranks on
 * different hosts.  That skew is not small where device threads outnumber
 * the cores: a thread leaves the barrier only when the kernel runs it, and
 * in a Z = 4 pipeline on 2 cores the stages' origins lay up to 12 ms apart
 * (a 60 ms step), which moved every cross-device comparison (the bubble's
 * span, a receive against its sender's item).  The threads share one
 * clock, so there the root moves every device's times onto the earliest
 * origin (rt_trace_align, each device's origin collected with its spans).
 * MPI ranks do the same, with each origin first moved onto rank 0's clock
 * (the backend's clock_offset: 0 on rank 0's node, estimated on another);
 * without that, 8 ranks on 2 cores kept origins about 1 ms apart, which
 * --profile's makespan over the ranks added to every op (mpi_clock.c).
 * After the runs every device sends its first trace_cap
 * spans to the root with collect_i64 (three integers a span: op id, begin
 * and end in nanoseconds), the same number of calls on every device because
 * trace_cap comes from the program alone, so the MPI gathers match even
 * where the stages of a pipeline run different ops; on threads the
 * calls write straight into the root's array.  A device that kept fewer
 * spans sends op id -1.
 *
 * The file is one JSON object: "traceEvents" holds a process_name and one
 * thread_name metadata event ("ph": "M") per device, then one complete
 * event ("ph": "X", ts/dur in microseconds) per span, pid 0, tid = device,
 * name = the op as --dump-ir names it, cat "collective" for AllGather,
 * ReduceScatter, AllReduce and AllToAll and "compute" for everything else.
 * A pipelined program's items (pipe_items.c) are events of cat "pipeline"
 * named "F3", "B2", and the waits of their receives "recv wait".
 * Written by hand (the runtime does not link a JSON library), with every
 * string escaped.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_internal.h"
#include "rt_job.h"

/* Most spans per device a trace file holds (the first ones). */
#define RT_MAX_TRACE_SPANS (1 << 16)

int64_t rt_trace_capacity(const rt_program *prog, int64_t runs)
{
    int64_t per_run = prog->calls_per_run > 0 ? prog->calls_per_run : prog->nops > 0 ? prog->nops : 1;
    int64_t cap = per_run * runs;
    /* A trace of more spans than this is too large to look at anyway, and
     * the root holds 24 bytes per span and device. */
    return cap < RT_MAX_TRACE_SPANS ? cap : RT_MAX_TRACE_SPANS;
}

void rt_trace_collect(rt_device *dev, rt_job *job)
{
    const rt_profile *p = &dev->profile;
    int64_t nd = dev->ndevices;
    for (int64_t k = 0; k < job->trace_cap; k++) {
        int64_t v[3] = {-1, 0, 0};
        if (k < p->nspans) {
            v[0] = p->spans[k].op_id;
            v[1] = (int64_t)((p->spans[k].begin - p->origin) * 1e9);
            v[2] = (int64_t)((p->spans[k].end - p->origin) * 1e9);
        }
        for (int f = 0; f < 3; f++)
            dev->ops->collect_i64(dev, v[f], job->trace ? job->trace + (k * 3 + f) * nd : NULL);
    }
    double offset = dev->ops->clock_offset ? dev->ops->clock_offset(dev) : 0;
    dev->ops->collect_i64(dev, (int64_t)((p->origin - offset) * 1e9), job->origins);
}

void rt_trace_align(rt_job *job)
{
    if (!job->trace || !job->origins)
        return;
    int64_t nd = rt_mesh_size(job->prog), first = job->origins[0];
    for (int64_t d = 1; d < nd; d++)
        first = job->origins[d] < first ? job->origins[d] : first;
    for (int64_t d = 0; d < nd; d++) {
        int64_t shift = job->origins[d] - first;
        for (int64_t k = 0; k < job->trace_cap; k++) {
            if (job->trace[k * 3 * nd + d] == RT_SPAN_NONE)
                continue;
            job->trace[(k * 3 + 1) * nd + d] += shift;
            job->trace[(k * 3 + 2) * nd + d] += shift;
        }
    }
}

/* Writes `s` as a JSON string literal. */
static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c == '\n')
            fputs("\\n", f);
        else if (*c == '\t')
            fputs("\\t", f);
        else if (*c < 0x20 || *c == 0x7f)
            fprintf(f, "\\u%04x", *c);
        else
            fputc(*c, f);
    }
    fputc('"', f);
}

static void write_events(FILE *f, const rt_job *job)
{
    const rt_program *p = job->prog;
    int64_t nd = rt_mesh_size(p);
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"source\": ");
    put_string(f, p->source_name ? p->source_name : "");
    fprintf(f, ", \"backend\": ");
    put_string(f, job->launcher->name);
    fprintf(f, ", \"hw\": ");
    put_string(f, p->hw_name ? p->hw_name : "");
    fprintf(f, ", \"runs\": %lld},\n\"traceEvents\": [\n", (long long)job->repeat);
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 0, "
               "\"args\": {\"name\": ");
    put_string(f, p->source_name && p->source_name[0] ? p->source_name : "einc program");
    fprintf(f, "}}");
    for (int64_t d = 0; d < nd; d++) {
        int64_t coord[RT_MAX_AXES];
        rt_mesh_coord(p, d, coord);
        char label[128];
        int n = snprintf(label, sizeof label, "device %lld", (long long)d);
        for (int32_t a = 0; a < p->naxes && n > 0 && (size_t)n < sizeof label; a++)
            n += snprintf(label + n, sizeof label - (size_t)n, "%s%c=%lld", a ? "," : " (",
                          p->axis_names[a], (long long)coord[a]);
        if (p->naxes > 0 && n > 0 && (size_t)n < sizeof label)
            snprintf(label + n, sizeof label - (size_t)n, ")");
        fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %lld, "
                   "\"args\": {\"name\": ", (long long)d);
        put_string(f, label);
        fprintf(f, "}}");
    }
    for (int64_t k = 0; k < job->trace_cap; k++)
        for (int64_t d = 0; d < nd; d++) {
            const int64_t *e = job->trace + k * 3 * nd;
            int64_t op = e[d], b = e[nd + d], en = e[2 * nd + d];
            char item[32], kind;
            int64_t mb, chunk;
            if (rt_span_item(op, &kind, &mb, &chunk) || op == RT_SPAN_RECV_WAIT) {
                if (op == RT_SPAN_RECV_WAIT)
                    snprintf(item, sizeof item, "recv wait");
                else if (chunk >= 0) /* interleaved: F m.c */
                    snprintf(item, sizeof item, "%c%lld.%lld", kind, (long long)mb, (long long)chunk);
                else
                    snprintf(item, sizeof item, "%c%lld", kind, (long long)mb);
                fprintf(f, ",\n{\"name\": \"%s\", \"cat\": \"pipeline\", \"ph\": \"X\", "
                           "\"ts\": %.3f, \"dur\": %.3f, \"pid\": 0, \"tid\": %lld}",
                        item, 1e-3 * (double)b, 1e-3 * (double)(en - b), (long long)d);
                continue;
            }
            if (op < 0)
                continue;
            const char *name = rt_program_op_name(p, op, "op");
            fprintf(f, ",\n{\"name\": ");
            put_string(f, name);
            fprintf(f, ", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, "
                       "\"pid\": 0, \"tid\": %lld, \"args\": {\"op\": %lld",
                    rt_op_label_is_collective(name) ? "collective" : "compute", 1e-3 * (double)b, 1e-3 * (double)(en - b), (long long)d,
                    (long long)op);
            if (p->op_predicted && op < p->nops && p->op_predicted[op] >= 0)
                fprintf(f, ", \"predicted_us\": %.3f", 1e6 * p->op_predicted[op]);
            fprintf(f, "}}");
        }
    fprintf(f, "\n]}\n");
}

int rt_trace_write(const rt_job *job, const char *path, char *err, size_t errlen)
{
    /* Like an output .npy, a trace only ever replaces a regular file. */
    char *target;
    struct stat st;
    bool exists;
    char why[400];
    if (rt_output_target(path, &target, &st, &exists, why, sizeof why) != 0)
        return rt_errf(err, errlen, "--trace %s", why);
    size_t n = strlen(target);
    char *tmp = malloc(n + 16);
    if (!tmp) {
        free(target);
        return rt_errf(err, errlen, "out of memory");
    }
    snprintf(tmp, n + 16, "%s.tmpXXXXXX", target);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        free(target);
        return rt_errf(err, errlen, "--trace %s: cannot create a temporary file beside it: %s",
                       path, strerror(e));
    }
    /* mkstemp makes it 0600; a trace is for sharing, or keeps the mode of
     * the file it replaces. */
    fchmod(fd, exists ? (st.st_mode & 07777) : 0644);
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(tmp);
        free(tmp);
        free(target);
        return rt_errf(err, errlen, "--trace %s: %s", path, strerror(e));
    }
    write_events(f, job);
    int bad = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
    int e = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad || rename(tmp, target) != 0) {
        if (!bad)
            e = errno;
        unlink(tmp);
        free(tmp);
        free(target);
        return rt_errf(err, errlen, "--trace %s: cannot write it: %s", path, strerror(e));
    }
    free(tmp);
    free(target);
    return 0;
}
