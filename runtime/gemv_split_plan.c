/*
 * gemv_split_plan.c - whether a device gets a helper thread for its narrow
 * products (rt_gemv_split_plan: CPUs, the load at start, EINC_GEMV_THREADS)
 * and the EINC_GEMV_TRACE report of what the split did (rt_gemv.h).
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_SET */
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_internal.h"

int rt_gemv_split_wants(const rt_gemv_split *s, double bytes)
{
    return s && s->threads >= 2 && bytes >= (double)s->min_bytes;
}

int rt_gemv_split_others(int running, int own)
{
    int others = running - (own > 1 ? own : 1);
    return others > 0 ? others : 0;
}

int rt_gemv_split_running(void)
{
    FILE *f = fopen("/proc/loadavg", "r");
    int running = 0, total;
    if (!f)
        return 0;
    if (fscanf(f, "%*f %*f %*f %d/%d", &running, &total) != 2)
        running = 0;
    fclose(f);
    return running;
}

/* Threads runnable now, all (rt_gemv_split_running, 1 where unknown: the
 * caller) and this process's own (state R in /proc/self/task/x/stat, 1
 * where unreadable). */
static void running_threads(int *all, int *own)
{
    int running = rt_gemv_split_running();
    *all = running > 0 ? running : 1, *own = 1;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        char path[64], line[512];
        snprintf(path, sizeof path, "/proc/self/task/%.20s/stat", e->d_name);
        FILE *t = fopen(path, "r");
        if (!t)
            continue;
        size_t len = fread(line, 1, sizeof line - 1, t);
        fclose(t);
        line[len] = '\0';
        const char *paren = strrchr(line, ')'); /* the name may hold spaces */
        n += paren && paren[1] == ' ' && paren[2] == 'R';
    }
    closedir(d);
    *own = n > 0 ? n : 1;
}

/* Looks at the runnable threads the plan takes at most (the fewest other
 * processes' threads count). */
#define BUSY_LOOKS 5

void rt_gemv_split_plan(rt_gemv_split *s, int64_t ndev, int64_t index, int pin)
{
    memset(s, 0, sizeof *s);
    s->threads = 1;
    s->cpu = -1;
    s->min_bytes = RT_GEMV_SPLIT_BYTES;
    s->device = index;
    const char *trace = getenv("EINC_GEMV_TRACE");
    s->trace = trace && strcmp(trace, "0") != 0 && trace[0];
    (void)rt_gemv_narrow_isa_best(); /* a bad EINC_GEMV_ISA ends the job here, at its start */
    const char *env = getenv("EINC_GEMV_THREADS");
    if (env && strcmp(env, "1") != 0 && strcmp(env, "2") != 0 && strcmp(env, "adaptive") != 0)
        rt_fatal(NULL, "EINC_GEMV_THREADS must be 1 (narrow products on the device thread "
                 "only), 2 (always split with a helper thread) or adaptive (a helper "
                 "whatever the load, split while that is faster), not '%s'", env);
    if (env && strcmp(env, "1") == 0) {
        if (s->trace)
            fprintf(stderr, "einrt: gemv split: device %lld: no helper (EINC_GEMV_THREADS=1)\n",
                    (long long)index);
        return;
    }
    int cpus[CPU_SETSIZE], ncpus = 0;
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &allowed))
                cpus[ncpus++] = c;
    } else {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        ncpus = n > 0 ? (int)(n < CPU_SETSIZE ? n : CPU_SETSIZE) : 1;
        pin = 0;
    }
    s->ncpus = ncpus;
    /* the fewest of up to BUSY_LOOKS looks 200 us apart: a count at one
     * instant holds short-lived threads (a shell, a `ps`) with the load
     * that lasts; the adaptive choice sees the rest */
    int all = 0, own = 0, busy = 0;
    for (int look = 0; look < BUSY_LOOKS; look++) {
        if (look > 0)
            usleep(200);
        int a, o;
        running_threads(&a, &o);
        int b = rt_gemv_split_others(a, o);
        if (look == 0 || b < busy)
            all = a, own = o, busy = b;
        if (busy == 0 || ndev + index < ncpus - busy)
            break;
    }
    if (ndev + index < ncpus - busy) {
        s->threads = 2;
        s->adaptive = 1;
        s->cpu = pin && ncpus >= 2 ? cpus[ndev + index] : -1;
    } else if (env) { /* forced: on another CPU than the device's, if any */
        s->threads = 2;
        int64_t c = (ndev + index) % (ncpus > 0 ? ncpus : 1);
        if (pin && ncpus >= 2 && c != index % ncpus)
            s->cpu = cpus[c];
    }
    if (env)
        s->adaptive = strcmp(env, "adaptive") == 0; /* 2: always split */
    if (s->trace)
        fprintf(stderr,
                "einrt: gemv split: device %lld of %lld: %d CPUs, %d threads runnable (%d of "
                "this process): %d busy; %s%s\n",
                (long long)index, (long long)ndev, ncpus, all, own, busy,
                s->threads == 2 ? "a helper" : "no helper",
                s->threads < 2 ? "" : s->adaptive ? ", adaptive" : ", forced");
}

void rt_gemv_split_report(const rt_gemv_split *s, int64_t jobs, int64_t wakes,
                          int64_t withdrawn)
{
    fprintf(stderr,
            "einrt: gemv split: device %lld: %lld helper jobs, %lld found it asleep, %lld "
            "withdrawn\n",
            (long long)s->device, (long long)jobs, (long long)wakes, (long long)withdrawn);
    double b = (double)(s->min_bytes > 0 ? s->min_bytes : 1);
    for (int k = 0; k < RT_GEMV_SPLIT_CLASSES; k++, b *= 2) {
        const rt_gemv_split_class *c = &s->cls[k];
        if (c->products == 0 && c->split_products == 0)
            continue;
        double one = c->s_per_byte[0], two = c->s_per_byte[1];
        fprintf(stderr,
                "einrt: gemv split: device %lld: class %d (>= %.0f KiB): %lld products, %lld "
                "split; %lld tries (%lld cut short); GB/s one thread %.2f, split %.2f: %s\n",
                (long long)s->device, k, b / 1024, (long long)c->products,
                (long long)c->split_products, (long long)c->tries, (long long)c->cut,
                one > 0 ? 1e-9 / one : 0.0, two > 0 ? 1e-9 / two : 0.0,
                !s->adaptive ? "always split" : two > 0 && two < one ? "splits" : "one thread");
    }
}
