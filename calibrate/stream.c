/*
 * stream.c - the elementwise curve of `einc calibrate`: the profile's
 * "elementwise_curve" (the add's bandwidth per size) and the scale's times
 * behind "elementwise_write_weight" (docs/cost-model.md, "Calibration");
 * and, timed the same way, the functions' times behind
 * "function_seconds_per_element" (and its in-cache twin) and the row
 * groups' behind "row_pass_seconds_per_element" (rowpass.c) and
 * "row_mask_seconds_per_element" (maskpass.c).
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
 *
 * The functions and the row groups are figures of the same kind, each a
 * difference of two times: a function's slope between two sizes less
 * neg's on the same arrays, the group of 6 passes less the group of 2.
 * They were the makespans of compute.ein's ops on the full mesh, and a
 * difference of two makespans has both their noise: on the idle machine
 * three calibrations read gelu's streaming cost at 0.30 to 0.86 ns per
 * element and the row pass at 0.041 to 0.147 ns.  So they run in
 * fnrow.ein, a sibling of stream.ein with its devices, copies and trace,
 * each time the fastest call of a copy scaled back by the copies, as the
 * add's; the two times of a difference come from the same processes, and
 * at each size neg runs right before every other function, after an
 * untimed op that brings the size's arrays into the caches (as every
 * function finds them), so that it is timed within milliseconds of each
 * function compared with it and, being the memory-bound one whose time
 * varies with what the other core streams, many times more often.
 * Its own program, with FNROW_REPEAT runs, not STREAM_REPEAT: libm's tanh
 * and log take 20-30 ns an element, so a run takes a quarter of a second
 * or more, and 25 of them would double the quick calibration.  And
 * FNROW_PROCESSES processes of it per round: neg's fastest call and the
 * group of 2's (the memory-bound ones) differ between processes more than
 * within one, 155-170 us or 265-290 us for neg on 1 Mi elements, 225 or
 * 300 us for the group, whichever of the two a process is in for all of
 * its hundreds of calls (the other functions and the group of 6 the same
 * in every process, to 2%): with two processes both came out slow in one
 * quick calibration of four, and the row pass read 0.065 ns for 0.095.
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

/* Calls of function fn's op per copy and run in fnrow.ein: neg runs
 * before every other function (write_functions). */
static int64_t fn_calls(int fn)
{
    return fn == IR_FN_NEG ? IR_FN_COUNT - 1 : 1;
}

/* Writes `per_core` copies of the op of function fn on size i, the
 * copies numbered from k0 (FN<fn>S<i>k<k>). */
static void write_function(FILE *f, int fn, int i, int64_t k0, int64_t per_core)
{
    for (int64_t k = 0; k < per_core; k++)
        fprintf(f,
                "FN%dS%dk%lld[EF%d_X] = %s(6 * (FA%dk%lld[EF%d] + FB%dk%lld[EF%d]))\n"
                "output FN%dS%dk%lld\n",
                fn, i, (long long)(k0 + k), i, ir_func_name((ir_func)fn), i, (long long)k, i, i,
                (long long)k, i, fn, i, (long long)(k0 + k));
}

/* Writes the functions' ops into fnrow.ein: on each FN_ELEMS size, every
 * unary function, `per_core` copies (FN<f>S<i>k<k>, f its ir_func), over
 * the size's two arrays of each copy, after an op that reads those arrays
 * (FW<i>k<k>, not timed), so that neg, which the others are compared
 * with, meets them hot as they do (neg first on cold arrays took longer in
 * cache than silu or cos after it).  Neg runs before every other
 * function, each time over new outputs (its copies numbered on): it is
 * the memory-bound one, whose fastest call varies with what the other
 * core streams, and the functions' own times were steady to 2% where
 * neg's fastest call of 36 varied by 1.5x between processes.  The
 * argument 6 * (A + B) has a triangular distribution of standard
 * deviation 4.9, like a contraction's output over a few hundred terms,
 * not [-1, 1), so a function whose cost depends on |x| (libm's scalar
 * tanh) is timed on the magnitudes it meets. */
static void write_functions(FILE *f, int nd, int64_t per_core)
{
    for (int i = 0; i < NFN; i++) {
        fprintf(f, "dim EF%d = %lld\n", i, (long long)(FN_ELEMS[i] * nd));
        for (int64_t k = 0; k < per_core; k++)
            fprintf(f,
                    "input FA%dk%lld[EF%d_X] : f32\ninput FB%dk%lld[EF%d_X] : f32\n"
                    "FW%dk%lld[EF%d_X] = FA%dk%lld[EF%d] + FB%dk%lld[EF%d]\noutput FW%dk%lld\n",
                    i, (long long)k, i, i, (long long)k, i, i, (long long)k, i, i, (long long)k, i,
                    i, (long long)k, i, i, (long long)k);
        for (int fn = 0, j = 0; fn < IR_FN_COUNT; fn++) {
            if (fn == IR_FN_NEG)
                continue;
            write_function(f, IR_FN_NEG, i, per_core * j++, per_core);
            write_function(f, fn, i, 0, per_core);
        }
    }
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

/* Writes fnrow.ein: on a mesh {X: nd}, the functions and the row groups
 * (rowpass.c, maskpass.c), each `per_core` times, as stream.ein's ops. */
static int write_fnrow_program(const cal_state *c, int nd, int64_t per_core, const char *file)
{
    FILE *f = cal_create(c, file);
    if (!f)
        return -1;
    fprintf(f, "# einc calibrate: functions and row groups, one device per core\nmesh X = %d\n", nd);
    write_functions(f, nd, per_core);
    cal_write_row_groups(f, nd, per_core);
    cal_write_mask_groups(f, nd, per_core);
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
    if (write_fnrow_program(c, nd, devices_per_core(c, nd), "fnrow.ein") ||
        cal_compile(c, "fnrow.ein", "fnrow"))
        return -1;
    /* Processes of their own, each with its own trace (cal_read_stream). */
    b = cal_add_processes(c, "fnrow", nd, FNROW_PROCESSES);
    if (!b)
        return -1;
    for (int p = 0; p < FNROW_PROCESSES; p++) {
        b[p].repeat = c->o->repeat > FNROW_REPEAT ? c->o->repeat : FNROW_REPEAT;
        b[p].trace = true;
    }
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
 * above), the first `skip` calls of every device (its first run: the
 * copies times the op's calls per run) left out; -1 when no call is
 * left. */
static double device_seconds(const cJSON *root, const char *prefix, int64_t skip)
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
        if (seen[tid->valueint]++ < skip)
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

/* Seconds per call of one copy of the op `prefix` names on one device:
 * the fastest over the `n` rounds' traces (device_seconds), -1 if none. */
static double fastest(cJSON *const *roots, int n, const char *prefix, int64_t skip)
{
    double best = -1;
    for (int r = 0; r < n; r++) {
        double t = device_seconds(roots[r], prefix, skip);
        if (t > 0 && (best < 0 || t < best))
            best = t;
    }
    return best;
}

/* Fills c with the figures of the ops the rounds' traces hold (stream's or
 * one of fnrow's processes': a function's or row group's time is the
 * least over those processes); per_core: copies per device. */
static void read_figures(cal_state *c, cJSON *const *roots, int n, int64_t per_core)
{
    char name[32];
    /* A core of the full mesh runs its devices' ops one after the other,
     * and they end together when the op runs in step. */
    double k = (double)per_core;
    for (int e = 0; e < NEW; e++) {
        snprintf(name, sizeof name, "EC%dk", e);
        double add = fastest(roots, n, name, per_core);
        if (add > 0 && c->new_ < NEW)
            c->ew[c->new_++] = c->ew_at[e] = 3.0 * 4 * (double)EW_ELEMS[e] / (k * add);
        snprintf(name, sizeof name, "ES%dk", e);
        double scale = fastest(roots, n, name, per_core);
        if (scale > 0)
            c->scale_s[e] = k * scale;
    }
    for (int i = 0; i < NFN; i++)
        for (int fn = 0; fn < IR_FN_COUNT; fn++) {
            snprintf(name, sizeof name, "FN%dS%dk", fn, i);
            double t = k * fastest(roots, n, name, per_core * fn_calls(fn));
            if (t > 0 && (c->fn_seconds[i][fn] <= 0 || t < c->fn_seconds[i][fn]))
                c->fn_seconds[i][fn] = t;
        }
    for (int g = 0; g < NROW_GROUPS; g++) {
        double t = k * fastest(roots, n, ROW_GROUP_OP[g], per_core * ROW_GROUP_TIMES);
        if (t > 0 && (c->row_s[g] <= 0 || t < c->row_s[g]))
            c->row_s[g] = t;
    }
}

/* Reads the traces of one process of a traced program (entry b), one per
 * round, into c (read_figures). */
static int read_process(cal_state *c, const cal_bench *b)
{
    cJSON *roots[MAX_ROUNDS];
    int n = 0, rc = 0;
    for (int r = 0; r < c->o->rounds && r < MAX_ROUNDS; r++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s.trace.%d.json", c->dir, b->exe, r);
        char *text = read_file(path);
        roots[n] = text ? cJSON_Parse(text) : NULL;
        free(text);
        if (!roots[n]) {
            fprintf(stderr, "einc calibrate: error: no trace in %s\n", path);
            rc = -1;
            break;
        }
        n++;
    }
    if (rc == 0)
        read_figures(c, roots, n, devices_per_core(c, b->ndev));
    for (int r = 0; r < n; r++)
        cJSON_Delete(roots[r]);
    return rc;
}

int cal_read_stream(cal_state *c, const cal_bench *b)
{
    /* A process at a time, its rounds' traces parsed together: read_figures
     * keeps the least over the processes. */
    for (int p = 0; p < b->processes; p++)
        if (read_process(c, &b[p]))
            return -1;
    return 0;
}
