/*
 * runner.c - running the benchmark programs of `einc calibrate`: compiling
 * each with this einc, running it `--profile --repeat R` on the threads
 * backend or under mpirun, once per round, and reading back the per-op
 * times the executables' profiler prints (runtime/profile.c).  The work
 * directory's files are named here, and removed here.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "calibrate_internal.h"

/* Runs argv (argv[0] looked up in PATH) with stdout to `out_path` (NULL:
 * inherited); returns its exit status, or -1 if it could not be started or
 * was killed. */
static int run(char *const *argv, const char *out_path)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (out_path && !freopen(out_path, "w", stdout))
            _exit(127);
        execvp(argv[0], argv);
        fprintf(stderr, "einc calibrate: error: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Creates file `file` of the work directory for writing. */
FILE *cal_create(const cal_state *c, const char *file)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", c->dir, file);
    return fopen(path, "w");
}

/* Compiles `ein` (in the work directory) into executable `exe` with this einc. */
int cal_compile(cal_state *c, const char *ein, const char *exe)
{
    char src[512], dst[512];
    snprintf(src, sizeof src, "%s/%s", c->dir, ein);
    snprintf(dst, sizeof dst, "%s/%s", c->dir, exe);
    char *argv[] = {c->self, src, "-o", dst, (char *)(c->o->mpi ? "--runtime=mpi" : "--runtime=threads"),
                    "--hw", "tpu-v5e", NULL};
    if (run(argv, NULL) != 0) {
        fprintf(stderr, "einc calibrate: error: compiling the benchmark %s failed\n", src);
        return -1;
    }
    return 0;
}

/* Runs benchmark b once (its repeat, else --repeat, runs), its output to
 * b->out.round in the work directory. */
static int run_bench(cal_state *c, const cal_bench *b, int round)
{
    char path[512], outp[512], rep[32], np[32];
    snprintf(path, sizeof path, "%s/%s", c->dir, b->exe);
    snprintf(rep, sizeof rep, "%d", b->repeat > 0 ? b->repeat : c->o->repeat);
    snprintf(np, sizeof np, "%d", b->ndev);
    char *argv[64];
    int n = 0;
    char *mpirun = NULL;
    if (c->o->mpi) {
        mpirun = strdup(c->o->mpirun);
        if (!mpirun)
            return -1;
        for (char *t = strtok(mpirun, " \t"); t && n < 48; t = strtok(NULL, " \t"))
            argv[n++] = t;
        argv[n++] = "-np";
        argv[n++] = np;
    }
    argv[n++] = path;
    argv[n++] = "--random-inputs";
    argv[n++] = "1";
    argv[n++] = "--profile";
    /* Only the times are read: fnrow.ein's outputs alone are 2 GiB, and
     * gathering and summing them took half of its processes' time. */
    argv[n++] = "--discard-outputs";
    argv[n++] = "--repeat";
    argv[n++] = rep;
    char trace[600];
    if (b->trace) {
        snprintf(trace, sizeof trace, "%s/%s.trace.%d.json", c->dir, b->exe, round);
        argv[n++] = "--trace";
        argv[n++] = trace;
    }
    argv[n] = NULL;
    snprintf(outp, sizeof outp, "%s/%s.%d", c->dir, b->out, round);
    int rc = run(argv, outp);
    free(mpirun);
    if (rc != 0) {
        fprintf(stderr, "einc calibrate: error: the benchmark %s failed (exit %d)\n", path, rc);
        return -1;
    }
    return 0;
}

/* One row of a --profile table: op id, result name without its version,
 * kind, milliseconds.  False for other lines. */
static bool parse_row(const char *line, int *op, char *name, size_t namelen, char *kind,
                      double *ms)
{
    long long calls;
    if (sscanf(line, " %d %lld %lf", op, &calls, ms) != 3)
        return false;
    const char *eq = strstr(line, " = ");
    if (!eq)
        return false;
    const char *start = eq;
    while (start > line && start[-1] != ' ')
        start--;
    size_t len = (size_t)(eq - start);
    if (len == 0 || len >= namelen)
        return false;
    memcpy(name, start, len);
    name[len] = 0;
    char *dot = strchr(name, '.');
    if (dot)
        *dot = 0;
    return sscanf(eq + 3, "%31[A-Za-z]", kind) == 1;
}

/*
 * Reads the --profile tables of program b's processes (b[0 .. b->processes),
 * cal_add_processes), round 0 .. rounds-1 of each, and calls
 * fn(name, kind, seconds, arg) for each op: `name` is the op's result
 * tensor without its version (the benchmark programs give every tensor a
 * unique name), `kind` the op's kind ("AllGather", "Einsum", ...), seconds
 * the least over the processes and rounds of the median time per call.
 * Load from outside only ever slows a run, so the fastest process is the
 * best estimate of the machine's own speed (Chen and Revels, "Robust
 * benchmarking in noisy environments", 2016); the median within a process
 * already drops a single descheduled run.
 */
int cal_read_profile(cal_state *c, const cal_bench *b,
                     void (*fn)(const char *name, const char *kind, double t, void *arg),
                     void *arg)
{
    enum { MAX_OPS = 512 };
    /* On the stack (about 50 KB in all), not static: no state outlives a
     * call, so two calibrations in one process could not mix their tables. */
    char names[MAX_OPS][64], kinds[MAX_OPS][32];
    double best[MAX_OPS];
    bool have[MAX_OPS] = {false};
    char path[600];
    int seen = 0, nproc = b->processes > 1 ? b->processes : 1;
    for (int p = 0; p < nproc; p++)
        for (int r = 0; r < c->o->rounds; r++) {
            snprintf(path, sizeof path, "%s/%s.%d", c->dir, b[p].out, r);
            FILE *f = fopen(path, "r");
            if (!f) {
                fprintf(stderr, "einc calibrate: error: cannot read %s: %s\n", path, strerror(errno));
                return -1;
            }
            char line[1024], name[64], kind[32];
            int op;
            double t;
            while (fgets(line, sizeof line, f))
                if (parse_row(line, &op, name, sizeof name, kind, &t) && op >= 0 && op < MAX_OPS) {
                    if (!have[op]) {
                        memcpy(names[op], name, sizeof name);
                        memcpy(kinds[op], kind, sizeof kind);
                        best[op] = t;
                        have[op] = true;
                    } else
                        best[op] = fmin(best[op], t);
                }
            fclose(f);
        }
    for (int op = 0; op < MAX_OPS; op++)
        if (have[op]) {
            fn(names[op], kinds[op], best[op] * 1e-3, arg);
            seen++;
        }
    if (!seen) {
        fprintf(stderr, "einc calibrate: error: no profile table in %s\n", path);
        return -1;
    }
    return 0;
}

/* Adds a compiled program to the list that cal_run_benchmarks runs. */
cal_bench *cal_add_bench(cal_state *c, const char *exe, int ndev)
{
    cal_bench *b = &c->bench[c->nbench++];
    *b = (cal_bench){.ndev = ndev, .processes = 1};
    snprintf(b->exe, sizeof b->exe, "%s", exe);
    snprintf(b->out, sizeof b->out, "%s.txt", exe);
    return b;
}

/*
 * Adds compiled program `exe` as n processes a round: the same executable
 * under other names (hard links in the work directory, exe then exe.p1,
 * exe.p2, ...), each a process of its own with its own output and trace.
 * Some figures come in two speeds, whichever a spell of seconds is in
 * (neg and the group of 2 in fnrow.ein, a P = 2 collective's copies:
 * docs/cost-model.md, Calibration), so a figure is the least over several
 * processes, which cal_run_benchmarks runs seconds apart, not only over
 * the rounds.  Returns the first of the
 * n entries, whose `processes` is n (the others' 0), with `ndev` set;
 * NULL after a message when a link cannot be made or the list is full.
 */
cal_bench *cal_add_processes(cal_state *c, const char *exe, int ndev, int n)
{
    int cap = (int)(sizeof c->bench / sizeof c->bench[0]);
    if (n < 1 || c->nbench + n > cap) {
        fprintf(stderr, "einc calibrate: error: too many benchmark processes\n");
        return NULL;
    }
    cal_bench *first = NULL;
    for (int p = 0; p < n; p++) {
        char name[64], from[600], to[600];
        snprintf(name, sizeof name, p ? "%s.p%d" : "%s", exe, p);
        snprintf(from, sizeof from, "%s/%s", c->dir, exe);
        snprintf(to, sizeof to, "%s/%s", c->dir, name);
        if (p && link(from, to) != 0) {
            fprintf(stderr, "einc calibrate: error: cannot link %s to %s: %s\n", to, from,
                    strerror(errno));
            return NULL;
        }
        cal_bench *b = cal_add_bench(c, name, ndev);
        b->processes = p ? 0 : n;
        b->process = p;
        if (!p)
            first = b;
    }
    return first;
}

/*
 * Runs every program once per round, the rounds one after the other
 * (cal_read_results then reads each program's best over the rounds).  A
 * round takes tens of seconds, so the rounds of one program are that far
 * apart: a spell of load from outside (another tenant of the host) slows
 * one of them, and the least over them drops it; back to back, a spell
 * of a minute slowed all three and the whole profile with them.  Within a
 * round, the first process of every program runs first, then every
 * second process (cal_add_processes), and so on, so that a program's
 * processes are seconds apart too: a P = 2 collective ran at one of two
 * speeds in spells of 5-15 s, every process of a spell alike, and three
 * processes back to back were all in one (docs/cost-model.md,
 * Calibration).
 */
int cal_run_benchmarks(cal_state *c)
{
    int slots = 1;
    for (int i = 0; i < c->nbench; i++)
        slots = c->bench[i].process + 1 > slots ? c->bench[i].process + 1 : slots;
    for (int r = 0; r < c->o->rounds; r++) {
        if (c->o->rounds > 1)
            fprintf(stderr, "einc calibrate: round %d of %d (%d processes)\n", r + 1, c->o->rounds,
                    c->nbench);
        for (int k = 0; k < slots; k++)
            for (int i = 0; i < c->nbench; i++)
                if (c->bench[i].process == k && run_bench(c, &c->bench[i], r))
                    return -1;
    }
    return 0;
}

/* Removes the work directory: every program's source, executable and
 * per-round profile output (the names cal_add_bench and run_bench gave them). */
void cal_remove_dir(const cal_state *c)
{
    char path[600];
    for (int i = 0; i < c->nbench; i++) {
        const cal_bench *b = &c->bench[i];
        snprintf(path, sizeof path, "%s/%s", c->dir, b->exe);
        unlink(path);
        snprintf(path, sizeof path, "%s/%s.ein", c->dir, b->exe);
        unlink(path);
        for (int r = 0; r < c->o->rounds; r++) {
            snprintf(path, sizeof path, "%s/%s.%d", c->dir, b->out, r);
            unlink(path);
            snprintf(path, sizeof path, "%s/%s.trace.%d.json", c->dir, b->exe, r);
            unlink(path);
        }
    }
    if (rmdir(c->dir) != 0)
        fprintf(stderr, "einc calibrate: note: could not remove %s: %s\n", c->dir, strerror(errno));
}
