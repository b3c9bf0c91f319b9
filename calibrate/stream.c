/*
 * stream.c - the elementwise curve of `einc calibrate`: the profile's
 * "elementwise_curve" (the add's bandwidth per size) and the scale's times
 * behind "elementwise_write_weight" (docs/cost-model.md, "Calibration").
 *
 * What the figure means, as every calibrated figure: per device with all
 * `ranks` devices busy and in step; an add of S bytes per device takes S /
 * bandwidth on the full mesh.  It used to be timed as exactly that, the
 * makespan of the add on all ranks (the executable's --profile time, the
 * least over rounds of its median over 5 runs), and that did not repeat:
 * with two device threads pinned to each of 2 cores, the makespan is
 * however the kernel happens to overlap the devices of one core with the
 * other core's and with whatever else runs, and the same add read 18.8 and
 * 12.3 GB/s in two calibrations a minute apart
 * (docs/performance-history.md, section 5).  A device's own time for the
 * add, when nothing took its core, was 2.4 ms in every process to 2%.
 *
 * So the loops run on one device per core, min(ranks, cores) devices, all
 * cores streaming at once, as they do when the full mesh runs an op in
 * step.  A core of the full mesh runs its ceil(ranks / devices) devices
 * one after the other (the threads backend pins device d to core d mod
 * cores, mpirun --map-by core places ranks likewise), so each device here
 * runs every op that many times over arrays of their own, each copy the
 * size of one device's of the full mesh: the same ops on the same bytes
 * per core in the same order, and in the last-level cache the same
 * footprint (on 2 devices with only one device's arrays each, 12 MiB per
 * device fit the 32 MiB cache and read 37 GB/s).  The op's time on the
 * full mesh is then that many times the time of one copy on a device
 * here, which is taken from the program's trace (--trace: every call on
 * every device): the fastest call of a copy over the devices, the runs
 * (each device's first run left out: its outputs' pages fault in then)
 * and the rounds, as cal_read_profile takes the least over rounds: load
 * from outside only slows a call.  Not a median or a quartile: beside
 * CPU-bound processes that never sleep (the ranks of an MPI job) most
 * calls of the 2.4 ms add were interrupted, and the lower quartile read
 * 12-15 GB/s at 48-96 MiB where the fastest call read 19-20, the idle
 * machine's figure; beside other calibrations the fastest call repeated
 * within 5% at those sizes over six pairs of processes.  It is less
 * steady on the smallest arrays, 0.07 ms per call in the caches (1.56x
 * over those six pairs, 1.23x for the quartile).  Copies of one device's
 * size, not one op over its core's arrays: under a load of 10 on the 2
 * cores, an add of 192 MiB per device (4.8 ms) was never left alone by the
 * scheduler (its fastest call took 9.2 ms), one of 96 MiB often was (2.4
 * ms).  What this
 * leaves out is the cost of switching between the devices that share a
 * core, which for loops of milliseconds is small.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <cJSON.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibrate_internal.h"

/* The CPUs this process may run on (the programs inherit them), at least 1. */
static int usable_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Devices stream.ein runs on: one per core, at most the ranks. */
static int stream_devices(const cal_state *c)
{
    int cores = usable_cores();
    return c->o->ranks < cores ? c->o->ranks : cores;
}

/* Devices of the full mesh one core runs, one after the other: the
 * threads backend pins device d to core d mod cores, and mpirun --map-by
 * core places ranks likewise. */
static int64_t devices_per_core(const cal_state *c, int nd)
{
    return (c->o->ranks + nd - 1) / nd;
}

/* Writes stream.ein: on a mesh {X: nd}, the elementwise subtract, add and
 * scale of every size of the curve, each `per_core` times over arrays of
 * their own (EA3k0, EA3k1, ...): a device here runs, op by op, what the
 * `per_core` devices of the full mesh on its core run one after the other,
 * on the same bytes, so the caches hold what they hold then. */
static int write_stream_program(const cal_state *c, int nd, int64_t per_core, const char *file)
{
    FILE *f = cal_create(c, file);
    if (!f)
        return -1;
    fprintf(f, "# einc calibrate: elementwise loops, one device per core\nmesh X = %d\n", nd);
    for (int e = 0; e < NEW; e++)
        fprintf(f, "dim E%d = %lld\n", e, (long long)(EW_ELEMS[e] * nd));
    for (int e = 0; e < NEW; e++) {
        for (int64_t k = 0; k < per_core; k++)
            fprintf(f, "input EA%dk%lld[E%d_X] : f32\ninput EB%dk%lld[E%d_X] : f32\n", e,
                    (long long)k, e, e, (long long)k, e);
        /* EW reads the inputs first, so EC meets them hot, as an elementwise
         * op in a model meets the result of the op before it. */
        for (int64_t k = 0; k < per_core; k++)
            fprintf(f, "EW%dk%lld[E%d_X] = EA%dk%lld[E%d] - EB%dk%lld[E%d]\noutput EW%dk%lld\n", e,
                    (long long)k, e, e, (long long)k, e, e, (long long)k, e, e, (long long)k);
        for (int64_t k = 0; k < per_core; k++)
            fprintf(f, "EC%dk%lld[E%d_X] = EA%dk%lld[E%d] + EB%dk%lld[E%d]\noutput EC%dk%lld\n", e,
                    (long long)k, e, e, (long long)k, e, e, (long long)k, e, e, (long long)k);
        /* One operand read for each result byte written, where the add
         * reads two: what a byte of a streamed result costs (write_weight). */
        for (int64_t k = 0; k < per_core; k++)
            fprintf(f, "ES%dk%lld[E%d_X] = EA%dk%lld[E%d] * 2\noutput ES%dk%lld\n", e, (long long)k,
                    e, e, (long long)k, e, e, (long long)k);
    }
    return fclose(f) == 0 ? 0 : -1;
}

int cal_prepare_stream(cal_state *c)
{
    int nd = stream_devices(c);
    if (write_stream_program(c, nd, devices_per_core(c, nd), "stream.ein") ||
        cal_compile(c, "stream.ein", "stream"))
        return -1;
    cal_bench *b = cal_add_bench(c, "stream", nd);
    b->repeat = c->o->repeat > STREAM_REPEAT ? c->o->repeat : STREAM_REPEAT;
    b->trace = true;
    return 0;
}

/* True if trace event name `nm` is "<prefix><digits> = ...": a copy of
 * the op `prefix` names ("EC3k"). */
static bool is_copy(const char *nm, const char *prefix)
{
    size_t len = strlen(prefix);
    if (strncmp(nm, prefix, len) != 0 || nm[len] < '0' || nm[len] > '9')
        return false;
    nm += len;
    while (*nm >= '0' && *nm <= '9')
        nm++;
    return *nm == ' ';
}

/* Seconds per call of one copy of the op `prefix` names ("EC3k") on one
 * device, from the trace `root` of one round: the fastest call (the essay
 * above), the first `per_core` calls of every device (its first run) left
 * out; -1 when no call is left. */
static double device_seconds(const cJSON *root, const char *prefix, int64_t per_core)
{
    int64_t seen[MAX_RANKS] = {0};
    double best = -1;
    const cJSON *ev;
    cJSON_ArrayForEach(ev, cJSON_GetObjectItemCaseSensitive(root, "traceEvents"))
    {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(ev, "ph");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(ev, "name");
        const cJSON *tid = cJSON_GetObjectItemCaseSensitive(ev, "tid");
        const cJSON *dur = cJSON_GetObjectItemCaseSensitive(ev, "dur");
        if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X") != 0 || !cJSON_IsString(nm) ||
            !is_copy(nm->valuestring, prefix) || !cJSON_IsNumber(tid) || !cJSON_IsNumber(dur) ||
            tid->valueint < 0 || tid->valueint >= MAX_RANKS)
            continue;
        /* A device's first run faults in its outputs' pages. */
        if (seen[tid->valueint]++ < per_core)
            continue;
        double t = dur->valuedouble * 1e-6;
        if (t > 0 && (best < 0 || t < best))
            best = t;
    }
    return best;
}

/* The whole of file `path`, NUL-terminated, malloc'd; NULL after a message. */
static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n)
        buf[n] = 0;
    else {
        free(buf);
        buf = NULL;
        fprintf(stderr, "einc calibrate: error: cannot read the trace %s\n", path);
    }
    if (f)
        fclose(f);
    return buf;
}

int cal_read_stream(cal_state *c, const cal_bench *b)
{
    double add[NEW], scale[NEW];
    int64_t per_core = devices_per_core(c, b->ndev);
    for (int e = 0; e < NEW; e++)
        add[e] = scale[e] = -1;
    for (int r = 0; r < c->o->rounds; r++) {
        char path[600], name[16];
        snprintf(path, sizeof path, "%s/%s.trace.%d.json", c->dir, b->exe, r);
        char *text = read_file(path);
        cJSON *root = text ? cJSON_Parse(text) : NULL;
        free(text);
        if (!root) {
            fprintf(stderr, "einc calibrate: error: no trace in %s\n", path);
            return -1;
        }
        for (int e = 0; e < NEW; e++) {
            snprintf(name, sizeof name, "EC%dk", e);
            double t = device_seconds(root, name, per_core);
            if (t > 0 && (add[e] < 0 || t < add[e]))
                add[e] = t;
            snprintf(name, sizeof name, "ES%dk", e);
            t = device_seconds(root, name, per_core);
            if (t > 0 && (scale[e] < 0 || t < scale[e]))
                scale[e] = t;
        }
        cJSON_Delete(root);
    }
    /* A core of the full mesh runs its devices' ops one after the other,
     * and they end together when the op runs in step. */
    for (int e = 0; e < NEW; e++) {
        if (add[e] > 0 && c->new_ < NEW)
            c->ew[c->new_++] = c->ew_at[e] =
                3.0 * 4 * (double)EW_ELEMS[e] / ((double)per_core * add[e]);
        if (scale[e] > 0)
            c->scale_s[e] = (double)per_core * scale[e];
    }
    return 0;
}
