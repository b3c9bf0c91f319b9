/*
 * test_pipe_bubble.c - --profile's measured bubble (runtime/pipe_bubble.c)
 * and its per-op rows of a pipelined program (runtime/profile.c) on spans
 * written by hand, against values worked out here; and the item markers
 * (runtime/pipe_items.c) on one device: what they record, that they record
 * nothing when profiling is off, and their misuse ending the process; and
 * the devices' spans moved onto one origin (runtime/trace.c).
 */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cunit_main.h"
#include "rt_internal.h"
#include "rt_job.h"
#include "rt_test_util.h"

static const rt_launcher threads_launcher = {.name = "threads"};

/* A program on mesh Z = 2, pipelined over Z when `pipelined`. */
static rt_program two_stages(int pipelined, double predicted)
{
    rt_program p = {.abi_version = RT_ABI_VERSION, .naxes = 1, .axis_names = {'Z'},
                    .axis_sizes = {2}, .run = test_noop_run,
                    .info = "# pipeline over Z: 2 stages; schedule gpipe, one slot per item\n",
                    .pipeline_axes = pipelined, .pipeline_bubble = predicted};
    return p;
}

/* Sets span k of device d in a [cap][3][2] trace (times in ns). */
static void put(int64_t *trace, int64_t k, int64_t d, int64_t id, int64_t b, int64_t e)
{
    trace[k * 6 + d] = id;
    trace[k * 6 + 2 + d] = b;
    trace[k * 6 + 4 + d] = e;
}

/* One span of a hand-written trace: span k of device d. */
typedef struct span_row {
    int64_t k, d, id, b_us, e_us;
} span_row;

/* Sets the n spans of `rows` (times in us) in a [cap][3][2] trace. */
static void put_rows(int64_t *trace, const span_row *rows, int n)
{
    for (int i = 0; i < n; i++)
        put(trace, rows[i].k, rows[i].d, rows[i].id, rows[i].b_us * 1000, rows[i].e_us * 1000);
}

/* What `print` writes for `job`, malloc'd. */
static char *printed(void (*print)(FILE *, const rt_job *), const rt_job *job)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    print(f, job);
    fclose(f);
    return buf;
}

/* What rt_pipe_bubble_print_cpus writes for `job` on `cpus` CPUs, malloc'd. */
static char *printed_cpus(const rt_job *job, int64_t cpus, bool pinned)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    rt_pipe_bubble_print_cpus(f, job, cpus, pinned);
    fclose(f);
    return buf;
}

/*
 * Z = 2, M = 1 (gpipe and 1f1b agree), three runs, times in units of 1 us.
 * Run 1: stage 0 runs F0 [0, 10], then B0 [20, 40] whose receive waits
 * [20, 30]; stage 1 runs F0 [10, 20] whose receive waits [10, 12], then
 * B0 [20, 30].  Span 40; busy 10 + 10 = 20 and 8 + 10 = 18; bubble
 * 1 - 19/40 = 52.5%.  Run 2, from 100: the same items without waits: busy
 * 30 and 20, bubble 1 - 25/40 = 37.5%.  Run 3 has stage 0's items only
 * (the buffer dropped stage 1's): left out.  Median of two: 45.0%.
 */
static void fill_runs(int64_t *trace)
{
    const int64_t F0 = rt_span_item_id('F', 0, -1), B0 = rt_span_item_id('B', 0, -1), W = RT_SPAN_RECV_WAIT;
    const span_row rows[] = {
        /* device 0 */
        {0, 0, F0, 0, 10},   {1, 0, W, 20, 30},     {2, 0, B0, 20, 40},    {3, 0, F0, 100, 110},
        {4, 0, B0, 120, 140}, {5, 0, F0, 200, 210}, {6, 0, B0, 220, 240},
        /* device 1 */
        {0, 1, W, 10, 12},   {1, 1, F0, 10, 20},    {2, 1, B0, 20, 30},    {3, 1, F0, 110, 120},
        {4, 1, B0, 120, 130},
    };
    put_rows(trace, rows, (int)(sizeof rows / sizeof rows[0]));
}

static void test_bubble(void)
{
    enum { CAP = 8 };
    int64_t trace[CAP * 6];
    for (int i = 0; i < CAP * 6; i++)
        trace[i] = RT_SPAN_NONE;
    fill_runs(trace);
    rt_program p = two_stages(1, 0.5);
    rt_job job = {.prog = &p, .launcher = &threads_launcher, .repeat = 3, .trace_cap = CAP,
                  .trace = trace};
    char *out = printed(rt_pipe_bubble_print, &job);
    CU_ASSERT_STRING_EQUAL(out, "pipeline: 2 stages, 1 microbatches, gpipe: measured bubble "
                                "45.0% (median over 2 runs), predicted 50.0%\n");
    free(out);

    p.pipeline_bubble = -1; /* codegen has no prediction yet */
    p.info = NULL;          /* no --dump-ir text: no schedule name */
    out = printed(rt_pipe_bubble_print, &job);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "1 microbatches, unknown schedule: measured bubble"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, ", predicted: unknown\n"));
    free(out);

    /* Without items on a device, no run is complete. */
    for (int k = 0; k < CAP; k++)
        trace[k * 6 + 1] = RT_SPAN_NONE;
    out = printed(rt_pipe_bubble_print, &job);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "measured bubble unknown"));
    free(out);

    /* Not pipelined: nothing. */
    rt_program q = two_stages(0, -1);
    job.prog = &q;
    out = printed(rt_pipe_bubble_print, &job);
    CU_ASSERT_STRING_EQUAL(out, "");
    free(out);
}


/*
 * The core-idle bubble: Z = 4 stages (gpipe, M = 1) on 2 CPUs, times in
 * us.  Run 1: F0 of stage 0 [0, 10], of stage 1 [5, 20] whose receive
 * waits [5, 10], of stage 2 [20, 30], of stage 3 [30, 40]; B0 of stage 3
 * [40, 60], 2 [60, 80], 1 [80, 100], 0 [100, 120].  Busy 30 each, span
 * 120: bubble 1 - 120 / 480 = 75%; one device busy at every moment, so
 * the two CPUs are busy 120 of their 240: core-idle 50%, pinned or not.
 * Run 2, from 200, the same but stage 2's F0 [205, 230], beside stage 0's
 * F0 [200, 210] on the same CPU (device d on CPU d mod 2): busy 135,
 * bubble 71.875%; pinned, CPU 0 is busy [200, 230] (the union, 30) + 20 +
 * 20 and CPU 1 60: core-idle 1 - 130 / 240 = 45.83%; not pinned, two
 * devices busy in [205, 220] count two CPUs: 1 - 135 / 240 = 43.75%.
 * Medians: 73.4%, 47.9% pinned, 46.9% not; with 4 CPUs no core-idle part.
 */
static void test_core_idle(void)
{
    enum { CAP = 8, ND = 4 };
    int64_t trace[CAP * 3 * ND];
    for (int i = 0; i < CAP * 3 * ND; i++)
        trace[i] = RT_SPAN_NONE;
    const int64_t F0 = rt_span_item_id('F', 0, -1), B0 = rt_span_item_id('B', 0, -1), W = RT_SPAN_RECV_WAIT;
    /* {k, d, id, begin us, end us}; device 1 has the receive waits. */
    const span_row rows[] = {
        {0, 0, F0, 0, 10},    {1, 0, B0, 100, 120}, {2, 0, F0, 200, 210}, {3, 0, B0, 300, 320},
        {0, 1, W, 5, 10},     {1, 1, F0, 5, 20},    {2, 1, B0, 80, 100},   {3, 1, W, 205, 210},
        {4, 1, F0, 205, 220}, {5, 1, B0, 280, 300}, {0, 2, F0, 20, 30},    {1, 2, B0, 60, 80},
        {2, 2, F0, 205, 230}, {3, 2, B0, 260, 280}, {0, 3, F0, 30, 40},    {1, 3, B0, 40, 60},
        {2, 3, F0, 230, 240}, {3, 3, B0, 240, 260},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const span_row *r = &rows[i];
        trace[r->k * 3 * ND + r->d] = r->id;
        trace[r->k * 3 * ND + ND + r->d] = r->b_us * 1000;
        trace[r->k * 3 * ND + 2 * ND + r->d] = r->e_us * 1000;
    }
    rt_program p = {.abi_version = RT_ABI_VERSION, .naxes = 1, .axis_names = {'Z'}, .axis_sizes = {ND},
                    .run = test_noop_run, .info = "# pipeline over Z: 4 stages; schedule gpipe, one slot\n",
                    .pipeline_axes = 1, .pipeline_bubble = 0.75};
    rt_job job = {.prog = &p, .launcher = &threads_launcher, .repeat = 2, .trace_cap = CAP, .trace = trace};
    char *out = printed_cpus(&job, 2, true);
    CU_ASSERT_STRING_EQUAL(out, "pipeline: 4 stages, 1 microbatches, gpipe: measured bubble 73.4% (median over "
                                "2 runs), predicted 75.0%; 4 devices on 2 CPUs: core-idle bubble 47.9%\n");
    free(out);
    out = printed_cpus(&job, 2, false);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "; 4 devices on 2 CPUs: core-idle bubble 46.9%\n"));
    free(out);
    out = printed_cpus(&job, 4, true);
    CU_ASSERT_PTR_NULL(strstr(out, "core-idle"));
    free(out);
}

/*
 * Zero-bubble, Z = 2, M = 1: each run has three items per device, F0, B0
 * (dL/dx) and W0 (dL/dW), all counted as the run's work.  Run 1: stage 0
 * F0 [0, 10], B0 [20, 30] whose receive waits [20, 24], W0 [30, 40];
 * stage 1 F0 [10, 20], B0 [20, 25], W0 [25, 35].  Span 40, busy 26 and 25,
 * bubble 1 - 25.5/40 = 36.25%.  Run 2, from 100, no waits, stage 1's W0
 * [125, 136]: busy 30 and 26, bubble 30%.  Median 33.125%.  Counted as two
 * items a run, the W items would make three runs of other items.
 */
static void test_bubble_zero_bubble(void)
{
    enum { CAP = 8 };
    int64_t trace[CAP * 6];
    for (int i = 0; i < CAP * 6; i++)
        trace[i] = RT_SPAN_NONE;
    const int64_t F0 = rt_span_item_id('F', 0, -1), B0 = rt_span_item_id('B', 0, -1), W0 = rt_span_item_id('W', 0, -1);
    const span_row rows[] = {
        {0, 0, F0, 0, 10},   {1, 0, RT_SPAN_RECV_WAIT, 20, 24}, {2, 0, B0, 20, 30},
        {3, 0, W0, 30, 40},  {4, 0, F0, 100, 110},  {5, 0, B0, 120, 130},  {6, 0, W0, 130, 140},
        {0, 1, F0, 10, 20},  {1, 1, B0, 20, 25},    {2, 1, W0, 25, 35},
        {3, 1, F0, 110, 120}, {4, 1, B0, 120, 125}, {5, 1, W0, 125, 136},
    };
    put_rows(trace, rows, (int)(sizeof rows / sizeof rows[0]));
    rt_program p = two_stages(1, 0.25);
    p.info = "# pipeline over Z: 2 stages; schedule zb-h1, one slot per item\n";
    rt_job job = {.prog = &p, .launcher = &threads_launcher, .repeat = 2, .trace_cap = CAP,
                  .trace = trace};
    char *out = printed(rt_pipe_bubble_print, &job);
    CU_ASSERT_STRING_EQUAL(out, "pipeline: 2 stages, 1 microbatches, zb-h1: measured bubble "
                                "33.1% (median over 2 runs), predicted 25.0%\n");
    free(out);
}

/* Per-op rows: op 0 runs on stage 0 for 2 ms and on stage 1, later, for 1
 * ms, both in span row 0.  Each stage's call is its own: 2 calls, median
 * 1.5 ms (taken over both devices as one call it would be 11 ms).  Without
 * a pipeline the same row is one call of 11 ms. */
static void test_op_rows_per_stage(void)
{
    int64_t trace[6];
    put(trace, 0, 0, 0, 0, 2000000);
    put(trace, 0, 1, 0, 10000000, 11000000);
    rt_program p = two_stages(1, -1);
    rt_job job = {.prog = &p, .launcher = &threads_launcher, .repeat = 1, .trace_cap = 1,
                  .trace = trace};
    char *out = printed(rt_profile_print, &job);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "pipelined: the stages run different ops"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\n     0        2        1.5000 "));
    free(out);
    rt_program q = two_stages(0, -1);
    job.prog = &q;
    out = printed(rt_profile_print, &job);
    CU_ASSERT_PTR_NULL(strstr(out, "pipelined:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\n     0        1       11.0000 "));
    free(out);
}

/*
 * Interleaved, Z = 2, M = 1, v = 2: a run is 2 M v = 4 items per device,
 * F0.0 F0.1 B0.1 B0.0, the model chunks in the order 0.0 (stage 0), 0.0
 * (stage 1), 0.1 (stage 0), 0.1 (stage 1) and back.  Stage 0: F0.0
 * [0, 10], F0.1 [20, 30], B0.1 [50, 60], B0.0 [70, 80]; stage 1: F0.0
 * [10, 20], F0.1 [30, 40], B0.1 [40, 50], B0.0 [60, 70].  Span 80, busy 40
 * on each, bubble 50%.  Counted as two items a run (chunks ignored), the
 * four would make two runs ([0, 40) and [40, 80), 50% each): the check is
 * that one run is counted.
 */
static void test_bubble_interleaved(void)
{
    enum { CAP = 8 };
    int64_t trace[CAP * 6];
    for (int i = 0; i < CAP * 6; i++)
        trace[i] = RT_SPAN_NONE;
    const int64_t F00 = rt_span_item_id('F', 0, 0), F01 = rt_span_item_id('F', 0, 1);
    const int64_t B00 = rt_span_item_id('B', 0, 0), B01 = rt_span_item_id('B', 0, 1);
    const span_row rows[] = {
        {0, 0, F00, 0, 10},  {1, 0, F01, 20, 30}, {2, 0, B01, 50, 60}, {3, 0, B00, 70, 80},
        {0, 1, F00, 10, 20}, {1, 1, F01, 30, 40}, {2, 1, B01, 40, 50}, {3, 1, B00, 60, 70},
    };
    put_rows(trace, rows, (int)(sizeof rows / sizeof rows[0]));
    rt_program p = two_stages(1, 0.4);
    rt_job job = {.prog = &p, .launcher = &threads_launcher, .repeat = 1, .trace_cap = CAP,
                  .trace = trace};
    char *out = printed(rt_pipe_bubble_print, &job);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "1 microbatches, gpipe: measured bubble 50.0% (median over 1 run), "
                                       "predicted 40.0%"));
    free(out);
}

/* The markers on one device: an item span per begin/end pair, none when
 * profiling is off. */
static void test_markers(void)
{
    rt_program p = two_stages(1, -1);
    rt_device dev;
    rt_device_init(&dev, &p, &rt_solo_ops, NULL, 0);
    rt_pipe_item_begin(&dev, 'F', 3);
    rt_pipe_item_end(&dev);
    CU_ASSERT_EQUAL(dev.profile.nspans, 0);
    dev.profiling = RT_PROFILE_SPANS;
    rt_pipe_item_begin(&dev, 'B', 2);
    double w = rt_pipe_recv_begin(&dev);
    CU_ASSERT(w >= 0);
    rt_pipe_recv_end(&dev, w);
    rt_pipe_item_end(&dev);
    CU_ASSERT_EQUAL(rt_pipe_recv_begin(&dev), -1); /* outside an item: not a wait */
    CU_ASSERT_EQUAL_FATAL(dev.profile.nspans, 2);
    CU_ASSERT_EQUAL(dev.profile.spans[0].op_id, RT_SPAN_RECV_WAIT);
    char kind = 0;
    int64_t mb = -1, chunk = 0;
    CU_ASSERT(rt_span_item(dev.profile.spans[1].op_id, &kind, &mb, &chunk));
    CU_ASSERT_EQUAL(kind, 'B');
    CU_ASSERT_EQUAL(mb, 2);
    CU_ASSERT(dev.profile.spans[1].begin <= dev.profile.spans[0].begin);
    CU_ASSERT(dev.profile.spans[0].end <= dev.profile.spans[1].end);
    /* Every kind and microbatch comes back from its span id. */
    for (int64_t m = 0; m < 5; m++)
        for (const char *k = "FBW"; *k; k++) {
            CU_ASSERT(rt_span_item(rt_span_item_id(*k, (int32_t)m, -1), &kind, &mb, &chunk));
            CU_ASSERT(kind == *k && mb == m && chunk == -1);
            for (int32_t c = 0; c < 4; c++) { /* and with a chunk (interleaved) */
                CU_ASSERT(rt_span_item(rt_span_item_id(*k, (int32_t)m, c), &kind, &mb, &chunk));
                CU_ASSERT(kind == *k && mb == m && chunk == c);
            }
        }
    /* A chunk's item marker records its chunk. */
    rt_pipe_chunk_item_begin(&dev, 'F', 7, 1);
    rt_pipe_item_end(&dev);
    CU_ASSERT_EQUAL_FATAL(dev.profile.nspans, 3);
    CU_ASSERT(rt_span_item(dev.profile.spans[2].op_id, &kind, &mb, &chunk));
    CU_ASSERT(kind == 'F' && mb == 7 && chunk == 1);
    CU_ASSERT_FALSE(rt_span_item(RT_SPAN_RECV_WAIT, &kind, &mb, &chunk));
    CU_ASSERT_FALSE(rt_span_item(0, &kind, &mb, &chunk));
    rt_device_release(&dev);
}

/* Runs `misuse` in a child with profiling on; its stderr must hold `want`. */
static void expect_fatal(int misuse, const char *want)
{
    char path[] = "/tmp/pipe_bubble_errXXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        rt_program p = two_stages(1, -1);
        rt_device dev;
        rt_device_init(&dev, &p, &rt_solo_ops, NULL, 0);
        dev.profiling = RT_PROFILE_SPANS;
        if (misuse == 0)
            rt_pipe_item_end(&dev);
        else if (misuse == 1)
            rt_pipe_item_begin(&dev, 'X', 0);
        else {
            rt_pipe_item_begin(&dev, 'F', 0);
            rt_pipe_item_begin(&dev, 'F', 1);
        }
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) != 0);
    char msg[1024] = {0};
    ssize_t n = pread(fd, msg, sizeof msg - 1, 0);
    CU_ASSERT(n > 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
    close(fd);
    unlink(path);
}

static void test_misuse(void)
{
    expect_fatal(0, "rt_pipe_item_end without an open item");
    expect_fatal(1, "rt_pipe_item_begin: kind 88 is not 'F', 'B' or 'W'");
    expect_fatal(2, "rt_pipe_item_begin of F1 inside another item");
}

/* rt_trace_align: device 1 left the barrier that starts the runs 5 us
 * after device 0, so its times (from its own origin) read 5 us early;
 * aligned they are fill_runs' again (bubble 45.0%), and its empty spans
 * stay empty.  The same under MPI, whose ranks' origins arrive on rank
 * 0's clock (rt_device_ops.clock_offset): there the skew of ranks sharing
 * a core had added about 1 ms to every makespan. */
static void test_align(void)
{
    enum { CAP = 8 };
    int64_t want[CAP * 6], trace[CAP * 6], origins[2] = {7000000, 7005000};
    for (int i = 0; i < CAP * 6; i++)
        want[i] = RT_SPAN_NONE;
    fill_runs(want);
    memcpy(trace, want, sizeof trace);
    for (int k = 0; k < CAP; k++)
        if (trace[k * 6 + 1] != RT_SPAN_NONE)
            for (int f = 1; f < 3; f++)
                trace[k * 6 + f * 2 + 1] -= 5000;
    rt_program p = two_stages(1, 0.5);
    static const rt_launcher mpi_launcher = {.name = "mpi", .ranks_are_devices = 1};
    rt_job job = {.prog = &p, .launcher = &mpi_launcher, .repeat = 3, .trace_cap = CAP,
                  .trace = trace, .origins = origins};
    int64_t skewed[CAP * 6];
    memcpy(skewed, trace, sizeof trace);
    rt_trace_align(&job);
    CU_ASSERT_EQUAL(memcmp(trace, want, sizeof trace), 0);
    memcpy(trace, skewed, sizeof trace);
    job.launcher = &threads_launcher;
    rt_trace_align(&job);
    CU_ASSERT_EQUAL(memcmp(trace, want, sizeof trace), 0);
    char *out = printed(rt_pipe_bubble_print, &job);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "measured bubble 45.0%"));
    free(out);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"measured bubble against a hand-worked timeline", test_bubble},
        {"zero-bubble's W items counted in the measured bubble", test_bubble_zero_bubble},
        {"core-idle bubble of devices sharing CPUs", test_core_idle},
        {"interleaved items (chunks) counted in the measured bubble", test_bubble_interleaved},
        {"per-op rows of a pipelined program per stage", test_op_rows_per_stage},
        {"item markers record spans only when profiling", test_markers},
        {"item markers' misuse ends the process", test_misuse},
        {"devices' times put on one origin (threads and MPI)", test_align},
    };
    einc_add_suite("pipe_bubble", tests, (int)(sizeof tests / sizeof tests[0]));
}
