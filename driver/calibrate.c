/*
 * calibrate.c - `einc calibrate`: measure this machine through the real
 * runtime and write a calibrated hardware profile.
 *
 * How it works.  Calibration should measure what an einc executable will
 * actually do, so it does not time hand-written loops: it writes small .ein
 * programs, compiles them with this very einc (/proc/self/exe), runs them
 * on the chosen runtime (threads, or MPI through mpirun) with
 * `--profile --repeat R`, and reads the median time per op that the
 * executable's profiler prints (runtime/profile.c).  Two kinds of program:
 *
 *   coll_P_I.ein for each group size P = 2..N, a mesh {X: P, Z: N/P} (all N
 *                devices busy, as in the examples, when P divides N; else
 *                {X: P}), and for the I-th buffer size S (bytes per device, as
 *                nccl-tests count them: AllGather's output, ReduceScatter's
 *                input, AllReduce's and AllToAll's buffer) one AllGather_X,
 *                ReduceScatter_X, AllReduce_X and AllToAll_X, made by
 *                output constraints and {U_X} partial sums.
 *   compute.ein  a mesh {X: N} of local GEMMs (rt_einsum, f32/f64/bf16,
 *                several shapes), elementwise adds (memory bandwidth) and
 *                scales (what a streamed byte written costs), and each
 *                unary function of the language (its cost per element).
 *
 * Fitting (seed 004, MeshSlice's measured model).  Per collective kind,
 *     T(P, S) = T_launch + (P - 1) * (L_sync + shard_bytes / BW)
 *               + shard_bytes / BW_local + (runs - P) * t_run,
 * shard_bytes = S / P (what one step of a ring moves), is linear in the
 * unknowns (T_launch, L_sync, 1/BW, 1/BW_local, t_run) with regressors (1,
 * P-1, (P-1)*shard, shard, runs-P).  The last two, not in MeshSlice's TPU
 * model, are the copy of the device's own shard into a distinct output
 * buffer, 0 where that copy is free, and the short runs of a collective
 * over an inner dim (calibrate_fit.c): every size is also timed as a
 * strided variant (tags GS, RZ, AZ) whose peer blocks are rows of 512 B.
 * The samples span microseconds to seconds, so the least squares are
 * weighted by 1/T^2 (relative error).  A coefficient that comes out
 * negative is fixed at zero and the rest refitted (non-negative least
 * squares over the subsets, best feasible fit kept).  Buffers below 1 MiB
 * per device (in cache, several times faster per byte) get a second fit of
 * the same form, "small_messages"; samples far off a first fit (a
 * descheduled thread) are left out of the second.  The residuals (measured
 * vs fitted, relative) are written with the fit.  GEMM FLOP/s is the
 * sum over shapes of 2MNK over the sum of their times (the large shapes,
 * which take the milliseconds, weigh most); elementwise bandwidth the median
 * over sizes of (2 inputs + 1 output) bytes / time; the write weight from
 * the scale's time against the add's (write_weight); a function's cost the
 * time of fn(6 (A + B)) per element beyond that of neg(6 (A + B)).
 *
 * The profile keeps the seed-style figures too (peak_flops from the GEMMs,
 * hbm_bandwidth from the adds, ici_* from the AllGather fit), so every
 * consumer of cost_hw works; the cost pass uses the "calibration" section
 * when present (passes/costmodel/cost_op.c).
 */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "calibrate.h"
#include "costmodel.h"
#include "driver.h"

#include "calibrate_internal.h"

/* One compiled benchmark program of the work directory. */
typedef struct cal_bench {
    char exe[64];           /* executable */
    char out[72];           /* its profile output (exe.txt), round r in out.r */
    int ndev;               /* devices it runs on */
    int p;                  /* collectives: group size; 0 for the compute program */
    int64_t size;           /* collectives: the buffer size it times */
} cal_bench;

/* Everything one calibration learns. */
typedef struct cal_state {
    const cal_options *o;   /* command line */
    char dir[256];          /* work directory */
    char self[1024];        /* this einc */
    cal_bench bench[MAX_RANKS * MAX_SIZES + 1]; /* the programs, in the order they run */
    int nbench;             /* entries in bench */
    coll_fit coll[NKINDS];  /* per kind: AllGather, ReduceScatter, AllReduce, AllToAll */
    double gemm[3][NGEMM];  /* FLOP/s per dtype (ir_dtype order) and shape */
    double gemm_flop[3];    /* FLOPs summed over the shapes timed, per dtype */
    double gemm_at[3][NGEMM]; /* FLOP/s per dtype and index of GEMM_SHAPES, 0 if not timed */
    double gemm_time[3];    /* their seconds summed, per dtype */
    int ngemm[3];           /* shapes measured per dtype */
    double ew[NEW];         /* elementwise bytes/s per size */
    int new_;               /* sizes measured */
    double ew_at[NEW];      /* bytes/s per size index of EW_ELEMS, 0 if not measured */
    double scale_s[NEW];    /* seconds of the scale A * 2 per size index, 0 if not measured */
    double fn_seconds[NFN][IR_FN_COUNT]; /* median seconds of fn(6 (A + B)) on FN_ELEMS[i], 0 if unmeasured */
    cost_machine machine;   /* the machine measured (the profile's "machine") */
    double load[1];         /* 1-minute load average before measuring (-1: unknown) */
} cal_state;

static const char *const KIND_KEY[NKINDS] = {"allgather", "reducescatter", "allreduce", "alltoall"};
static const char *const KIND_OP[NKINDS] = {"AllGather", "ReduceScatter", "AllReduce", "AllToAll"};
static const char *const KIND_TAG[NKINDS] = {"AG", "RS", "AR", "AA"};

static void usage(FILE *f)
{
    fputs("usage: einc calibrate [-o PROFILE.json] [options]\n"
          "       einc calibrate --machine\n"
          "\n"
          "Measures this machine through the einc runtime (collectives over groups of\n"
          "2..N devices, GEMM through rt_einsum, elementwise bandwidth), fits\n"
          "T_launch + (P-1)*(L_sync + shard_bytes/BW) per collective (MeshSlice, seed 004)\n"
          "and writes a hardware profile for `einc --hw PROFILE.json`.\n"
          "\n"
          "  -o PATH                 profile to write (atomically), e.g. hw/host.json;\n"
          "                          without -o, this machine's cached profile, which\n"
          "                          `--hw host` uses from then on (docs/cost-model.md)\n"
          "  --machine               print this machine's identity and cache path (JSON)\n"
          "  --runtime=threads|mpi   runtime to measure (default threads)\n"
          "  --ranks N               devices (threads or MPI ranks), 2..16 (default 4)\n"
          "  --name NAME             the profile's name (default host)\n"
          "  --max-bytes N           largest collective buffer per device (default 64 MiB,\n"
          "                          at most 512 MiB; also capped by free memory)\n"
          "  --repeat R              runs per benchmark process (default 7)\n"
          "  --rounds N              processes per benchmark program, the fastest taken\n"
          "                          (default 3, a round over all programs apart: a spell\n"
          "                          of load from outside slows some, not the result)\n"
          "  --quick                 few sizes and runs, buffers up to 8 MiB unless\n"
          "                          --max-bytes says otherwise (well under a minute)\n"
          "  --mpirun CMD            MPI launcher (default: mpirun --allow-run-as-root\n"
          "                          --oversubscribe --bind-to core:overload-allowed\n"
          "                          --map-by core, which places ranks as the threads\n"
          "                          backend's --bind-to core places devices)\n"
          "  --keep                  keep the generated programs and their output\n",
          f);
}

static int parse_args(int argc, char **argv, cal_options *o)
{
    memset(o, 0, sizeof *o);
    o->name = "host";
    o->ranks = 4;
    o->max_bytes = 64 << 20;
    o->repeat = 7;
    o->rounds = 3;
    o->mpirun = "mpirun --allow-run-as-root --oversubscribe --bind-to core:overload-allowed "
                "--map-by core";
    bool repeat_given = false, max_given = false, rounds_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int64_t v;
        const char *val = NULL;
#define VALUE(flag)                                                                   \
    (strcmp(a, flag) == 0 ? (i + 1 < argc ? (val = argv[++i]) != NULL : false)      \
                          : strncmp(a, flag "=", sizeof flag) == 0 ? (val = a + sizeof flag) != NULL \
                                                                  : false)
        static const char *const valued[] = {"--ranks", "--name", "--max-bytes", "--repeat",
                                             "--rounds", "--mpirun"};
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
            if (!strcmp(a, valued[k]) && i + 1 >= argc)
                return drv_bad_usage("einc calibrate", "%s needs a value", a);
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "-o")) {
            if (++i >= argc)
                return drv_bad_usage("einc calibrate", "%s needs a path", a);
            o->output = argv[i];
        } else if (!strcmp(a, "--runtime=threads")) {
            o->mpi = false;
        } else if (!strcmp(a, "--runtime=mpi")) {
            o->mpi = true;
        } else if (!strncmp(a, "--runtime=", 10)) {
            return drv_bad_usage("einc calibrate", "unknown runtime '%s' (threads or mpi)", a + 10);
        } else if (VALUE("--ranks")) {
            if (drv_count("einc calibrate", "--ranks", val, 2, MAX_RANKS, &v))
                return 2;
            o->ranks = (int)v;
        } else if (VALUE("--name")) {
            if (!*val || strlen(val) >= COST_HW_NAME_MAX)
                return drv_bad_usage("einc calibrate", "--name wants a non-empty name of at most 63 bytes, not '%s'", val);
            o->name = val;
        } else if (VALUE("--max-bytes")) {
            if (drv_count("einc calibrate", "--max-bytes", val, 64 << 10, INT64_C(512) << 20, &v))
                return 2;
            o->max_bytes = v;
            max_given = true;
        } else if (VALUE("--repeat")) {
            if (drv_count("einc calibrate", "--repeat", val, 3, 1000, &v))
                return 2;
            o->repeat = (int)v;
            repeat_given = true;
        } else if (VALUE("--rounds")) {
            if (drv_count("einc calibrate", "--rounds", val, 1, MAX_ROUNDS, &v))
                return 2;
            o->rounds = (int)v;
            rounds_given = true;
        } else if (VALUE("--mpirun")) {
            o->mpirun = val;
        } else if (!strcmp(a, "--quick")) {
            o->quick = true;
        } else if (!strcmp(a, "--keep")) {
            o->keep = true;
        } else if (!strcmp(a, "--machine")) {
            o->machine = true;
        } else if (a[0] == '-') {
            return drv_bad_usage("einc calibrate", "unknown option '%s'", a);
        } else {
            return drv_bad_usage("einc calibrate", "unexpected argument '%s'", a);
        }
#undef VALUE
    }
    if (o->quick) {
        /* 25-55 s on 2 cores at load 3.5 (docs/performance.md): buffers up to 8 MiB reach past the caches
         * (the main fit starts at 1 MiB), and two rounds keep the faster of
         * two runs of each program, which halves the damage a spell of load
         * from outside does to a single round. */
        if (!max_given)
            o->max_bytes = 8 << 20;
        if (!repeat_given)
            o->repeat = 5;
        if (!rounds_given)
            o->rounds = 2;
    }
    return 0;
}

/* ---- running programs ---- */

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

/* Compiles `ein` (in the work directory) into executable `exe` with this einc. */
static int compile(cal_state *c, const char *ein, const char *exe)
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

/* Runs executable `exe` on `ndev` devices with --profile; its output goes
 * to `out` in the work directory. */
/* Runs benchmark `exe` on `ndev` devices once, its output to `out`.round
 * in the work directory. */
static int run_bench(cal_state *c, const char *exe, int ndev, const char *out, int round)
{
    char path[512], outp[512], rep[32], np[32];
    snprintf(path, sizeof path, "%s/%s", c->dir, exe);
    snprintf(rep, sizeof rep, "%d", c->o->repeat);
    snprintf(np, sizeof np, "%d", ndev);
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
    argv[n++] = "--repeat";
    argv[n++] = rep;
    argv[n] = NULL;
    snprintf(outp, sizeof outp, "%s/%s.%d", c->dir, out, round);
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
 * Reads the --profile tables in `out`.0 .. `out`.(rounds-1) and calls
 * fn(name, kind, seconds, arg) for each op: `name` is the op's result
 * tensor without its version (the benchmark programs give every tensor a
 * unique name), `kind` the op's kind ("AllGather", "Einsum", ...), seconds
 * the least over the rounds of the median time per call.  Load from
 * outside only ever slows a run, so the fastest round is the best estimate
 * of the machine's own speed (Chen and Revels, "Robust benchmarking in
 * noisy environments", 2016); the median within a round already drops a
 * single descheduled run.
 */
static int read_profile(cal_state *c, const char *out,
                        void (*fn)(const char *name, const char *kind, double t, void *arg),
                        void *arg)
{
    enum { MAX_OPS = 512 };
    static char names[MAX_OPS][64], kinds[MAX_OPS][32];
    double ms[MAX_OPS][MAX_ROUNDS];
    int nseen[MAX_OPS] = {0};
    char path[512];
    int seen = 0;
    for (int r = 0; r < c->o->rounds; r++) {
        snprintf(path, sizeof path, "%s/%s.%d", c->dir, out, r);
        FILE *f = fopen(path, "r");
        if (!f) {
            fprintf(stderr, "einc calibrate: error: cannot read %s: %s\n", path, strerror(errno));
            return -1;
        }
        char line[1024], name[64], kind[32];
        int op;
        double t;
        while (fgets(line, sizeof line, f))
            if (parse_row(line, &op, name, sizeof name, kind, &t) && op >= 0 && op < MAX_OPS &&
                nseen[op] < MAX_ROUNDS) {
                if (nseen[op] == 0) {
                    memcpy(names[op], name, sizeof name);
                    memcpy(kinds[op], kind, sizeof kind);
                }
                ms[op][nseen[op]++] = t;
            }
        fclose(f);
    }
    for (int op = 0; op < MAX_OPS; op++)
        if (nseen[op] > 0) {
            double best = ms[op][0];
            for (int r = 1; r < nseen[op]; r++)
                best = fmin(best, ms[op][r]);
            fn(names[op], kinds[op], best * 1e-3, arg);
            seen++;
        }
    if (!seen) {
        fprintf(stderr, "einc calibrate: error: no profile table in %s\n", path);
        return -1;
    }
    return 0;
}

/* ---- the collective benchmarks ---- */

/* Buffer sizes (bytes per device), 8 KiB up by 4x to max_bytes. */
static int buffer_sizes(const cal_options *o, int64_t *sizes)
{
    int n = 0;
    for (int64_t s = 8 << 10; s <= o->max_bytes && n < MAX_SIZES; s *= 4)
        sizes[n++] = s;
    return n;
}

/* Elements of dim I for a buffer of about `bytes` f32 over a group of p:
 * a multiple of p. */
static int64_t elems_for(int64_t bytes, int p)
{
    int64_t e = bytes / 4 / p * p;
    return e > p ? e : p;
}

/* Columns of the strided variants: shard rows of STRIDE_RUN f32 (512 B),
 * as a collective over the inner dim of an activation copies them. */
#define STRIDE_RUN 128

/* Rows of a strided variant of about `bytes` per device over a group of p. */
static int64_t rows_for(int64_t bytes, int p)
{
    int64_t r = bytes / 4 / ((int64_t)STRIDE_RUN * p);
    return r > 1 ? r : 1;
}

/* What the profile parser fills for one coll_P program. */
typedef struct coll_run {
    cal_state *c;           /* where samples go */
    int p;                  /* group size */
    const int64_t *sizes;   /* buffer sizes */
    int nsizes;             /* entries in sizes */
} coll_run;

/* Tags of the strided variants per kind (NULL: AllReduce, whose slices are
 * flat whatever the layout). */
static const char *const STRIDED_TAG[NKINDS] = {"GS", "RZ", NULL, "AZ"};

/* The size index after `tag` at the start of `name`, or -1. */
static int tagged(const char *name, const char *tag)
{
    size_t n = tag ? strlen(tag) : 0;
    if (!tag || strncmp(name, tag, n) != 0 || name[n] < '0' || name[n] > '9')
        return -1;
    return atoi(name + n);
}

static void on_coll(const char *name, const char *kind, double t, void *arg)
{
    coll_run *r = arg;
    for (int k = 0; k < NKINDS; k++) {
        if (strcmp(kind, KIND_OP[k]) != 0)
            continue;
        int i = tagged(name, KIND_TAG[k]), strided = 0;
        if (i < 0 && (i = tagged(name, STRIDED_TAG[k])) >= 0)
            strided = 1;
        if (i < 0 || i >= r->nsizes)
            continue;
        coll_fit *f = &r->c->coll[k];
        if (f->n >= MAX_SAMPLES || t <= 0)
            return;
        /* Contiguous: one run per peer block.  Strided: a run per shard row
         * per peer block (tensor dims before the cut dim). */
        double rows = strided ? (double)rows_for(r->sizes[i], r->p) : 1;
        double bytes = strided ? 4.0 * rows * STRIDE_RUN * r->p
                               : 4.0 * (double)elems_for(r->sizes[i], r->p);
        f->s[f->n++] = (sample){.p = r->p, .bytes = bytes, .runs = r->p * rows, .t = t};
        return;
    }
}

/* Writes coll_P.ein: one collective of each kind per size, each made by an
 * output constraint (AllGather, AllToAll) or {U_X} partial sums resolved
 * into a sharded (ReduceScatter) or replicated (AllReduce) output. */
static int write_coll_program(cal_state *c, int p, int z, const int64_t *sizes, int n,
                              const char *file)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", c->dir, file);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "# einc calibrate: collectives over a group of %d\n", p);
    if (z > 1)
        fprintf(f, "mesh X = %d, Z = %d\n", p, z);
    else
        fprintf(f, "mesh X = %d\n", p);
    fprintf(f, "dim K = %d\n", p);
    fprintf(f, "dim C = %d\n", STRIDE_RUN * p);
    for (int i = 0; i < n; i++)
        fprintf(f, "dim I%d = %lld, R%d = %lld\n", i, (long long)elems_for(sizes[i], p), i,
                (long long)rows_for(sizes[i], p));
    /* A small AllGather first: device 0 waits in it for the devices still
     * in the partial sums, so the measured collectives start in step. */
    fprintf(f, "input Warm[K_X] : f32\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "input AG%d[I%d_X] : f32\n", i, i);
        fprintf(f, "input RSin%d[K_X, I%d] : f32\n", i, i);
        fprintf(f, "input ARin%d[K_X, I%d] : f32\n", i, i);
        fprintf(f, "input AA%d[K_X, I%d] : f32\n", i, i);
        /* The strided variants: the cut dim C is the inner one, so each
         * peer block is R rows of STRIDE_RUN elements. */
        fprintf(f, "input GS%d[R%d, C_X] : f32\n", i, i);
        fprintf(f, "input RZin%d[K_X, R%d, C] : f32\n", i, i);
        fprintf(f, "input AZ%d[K_X, R%d, C] : f32\n", i, i);
    }
    /* Partial sums first (local compute), then the collectives back to
     * back, so each starts with the group already in step. */
    for (int i = 0; i < n; i++) {
        fprintf(f, "RS%d[I%d]{U_X} = RSin%d[K, I%d]\n", i, i, i, i);
        fprintf(f, "AR%d[I%d]{U_X} = ARin%d[K, I%d]\n", i, i, i, i);
        fprintf(f, "RZ%d[R%d, C]{U_X} = RZin%d[K, R%d, C]\n", i, i, i, i);
    }
    fprintf(f, "output Warm[K]\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "output AG%d[I%d]\n", i, i);
        fprintf(f, "output RS%d[I%d_X]\n", i, i);
        fprintf(f, "output AR%d[I%d]\n", i, i);
        fprintf(f, "output AA%d[K, I%d_X]\n", i, i);
        fprintf(f, "output GS%d[R%d, C]\n", i, i);
        fprintf(f, "output RZ%d[R%d, C_X]\n", i, i);
        fprintf(f, "output AZ%d[K, R%d, C_X]\n", i, i);
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* Largest buffer the machine's free memory allows for `ndev` devices: each
 * program holds about 20 buffers of its size per device (inputs, partial
 * sums, outputs of all kinds, flat and strided) plus the root's copies of
 * the outputs; keep it under half the free memory. */
static int64_t memory_cap(int ndev)
{
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return INT64_C(64) << 20;
    double avail = (double)pages * (double)page;
    return (int64_t)(avail / 2 / (20.0 * ndev + 10));
}

/* Adds a compiled program to the list that run_benchmarks runs. */
static cal_bench *add_bench(cal_state *c, const char *exe, int ndev)
{
    cal_bench *b = &c->bench[c->nbench++];
    snprintf(b->exe, sizeof b->exe, "%s", exe);
    snprintf(b->out, sizeof b->out, "%s.txt", exe);
    b->ndev = ndev;
    return b;
}

/* Writes and compiles the collective programs. */
static int prepare_collectives(cal_state *c)
{
    cal_options o = *c->o;
    int64_t cap = memory_cap(o.ranks);
    if (o.max_bytes > cap) {
        fprintf(stderr, "einc calibrate: note: largest buffer capped at %lld bytes by free memory\n",
                (long long)cap);
        o.max_bytes = cap;
    }
    int64_t sizes[MAX_SIZES];
    int n = buffer_sizes(&o, sizes);
    for (int p = 2; p <= o.ranks; p++) {
        if (o.quick && p != 2 && p != o.ranks)
            continue;
        int z = o.ranks % p == 0 ? o.ranks / p : 1;
        fprintf(stderr, "einc calibrate: collectives over %d of %d devices, %d sizes up to %lld bytes\n",
                p, p * z, n, (long long)sizes[n - 1]);
        /* One program per size: its buffers are all the memory it touches,
         * so from the second run on a collective finds its operand in the
         * last-level cache when it fits there, as it finds the result of
         * the op before it in a model.  In one program of all sizes the
         * larger buffers evicted the smaller ones, which then came from
         * DRAM at half the speed (docs/cost-model.md, Calibration). */
        for (int i = 0; i < n; i++) {
            char ein[64], exe[64];
            snprintf(ein, sizeof ein, "coll_%d_%d.ein", p, i);
            snprintf(exe, sizeof exe, "coll_%d_%d", p, i);
            if (write_coll_program(c, p, z, &sizes[i], 1, ein) || compile(c, ein, exe))
                return -1;
            cal_bench *b = add_bench(c, exe, p * z);
            b->p = p;
            b->size = sizes[i];
        }
    }
    return 0;
}

/* ---- GEMM and elementwise ---- */

/* Local GEMM shapes per device (M, K, N): from cache-sized to large. */
static const int64_t GEMM_SHAPES[NGEMM][3] = {
    {256, 256, 256}, {512, 512, 512}, {1024, 512, 1024}, {1024, 1024, 1024}};
/* Elementwise array elements per device. */
static const int64_t EW_ELEMS[NEW] = {1 << 22, 1 << 18, 1 << 20, 1 << 23};
/* Elements per device the functions are timed on (hot: every function
 * reads the same two arrays, which the one before just read), in pairs:
 * the slope between a pair's sizes is the time per element without the
 * fixed cost of starting an op on every device.  The first pair streams
 * from memory, as an elementwise op over a model's tensors does, so what
 * a function costs beyond neg there is what its loop does not hide under
 * its memory traffic; both sizes have results of IR_STREAM_MIN_BYTES or
 * more, which codegen streams (ir_ew_streams), as it does a model's, so
 * the slope is that of one kind of loop.  The second pair stays in
 * the second-level cache (3 x 128 KiB per device at the larger size, two
 * devices to a core): beyond neg it is the function's arithmetic, which a
 * row group pays on a row in cache, between the passes that touch memory
 * (passes/costmodel/cost_rowgroup.c). */
static const int64_t FN_ELEMS[NFN] = {(int64_t)1 << 20, (int64_t)1 << 22, (int64_t)1 << 13,
                                      (int64_t)1 << 15};
static const char *const DT_NAME[3] = {"f32", "f64", "bf16"};

static int write_compute_program(cal_state *c, const char *file)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", c->dir, file);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    /* Every shape and size even under --quick: one program, a few seconds,
     * and a GEMM or elementwise curve without its large end would time the
     * ops that take milliseconds at the rate of the ones that stay in cache. */
    int nd = c->o->ranks, ng = NGEMM, ne = NEW;
    fprintf(f, "# einc calibrate: local GEMMs and elementwise adds on every device\nmesh X = %d\n", nd);
    for (int g = 0; g < ng; g++)
        fprintf(f, "dim M%d = %lld, K%d = %lld, N%d = %lld\n", g,
                (long long)(GEMM_SHAPES[g][0] * nd), g, (long long)GEMM_SHAPES[g][1], g,
                (long long)GEMM_SHAPES[g][2]);
    for (int e = 0; e < ne; e++)
        fprintf(f, "dim E%d = %lld\n", e, (long long)(EW_ELEMS[e] * nd));
    for (int i = 0; i < NFN; i++)
        fprintf(f, "dim EF%d = %lld\ninput FA%d[EF%d_X] : f32\ninput FB%d[EF%d_X] : f32\n", i,
                (long long)(FN_ELEMS[i] * nd), i, i, i, i);
    for (int t = 0; t < 3; t++)
        for (int g = 0; g < ng; g++) {
            /* --quick: the mid-size shape's rate lies between its
             * neighbours' on the curve; the largest, which the ops over
             * 1 ms run at, stays. */
            if (c->o->quick && g == 2)
                continue;
            fprintf(f, "input GA%s%d[M%d_X, K%d] : %s\n", DT_NAME[t], g, g, g, DT_NAME[t]);
            fprintf(f, "input GB%s%d[K%d, N%d] : %s\n", DT_NAME[t], g, g, g, DT_NAME[t]);
            fprintf(f, "GC%s%d[M%d_X, N%d] = GA%s%d[M%d, K%d] * GB%s%d[K%d, N%d]\n", DT_NAME[t], g,
                    g, g, DT_NAME[t], g, g, g, DT_NAME[t], g, g, g);
            fprintf(f, "output GC%s%d\n", DT_NAME[t], g);
        }
    /* EW reads the inputs first, so EC meets them hot, as an elementwise op
     * in a model meets the result of the op before it. */
    for (int e = 0; e < ne; e++) {
        fprintf(f, "input EA%d[E%d_X] : f32\ninput EB%d[E%d_X] : f32\n", e, e, e, e);
        fprintf(f, "EW%d[E%d_X] = EA%d[E%d] - EB%d[E%d]\noutput EW%d\n", e, e, e, e, e, e, e);
        fprintf(f, "EC%d[E%d_X] = EA%d[E%d] + EB%d[E%d]\noutput EC%d\n", e, e, e, e, e, e, e);
        /* One operand read for each result byte written, where the add
         * reads two: what a byte of a streamed result costs (write_weight). */
        fprintf(f, "ES%d[E%d_X] = EA%d[E%d] * 2\noutput ES%d\n", e, e, e, e, e);
    }
    /* Each unary function: its time beyond that of neg, the cheapest, on
     * the same arrays (the same memory traffic).  The argument 6 * (A + B) has a
     * triangular distribution of standard deviation 4.9, like a
     * contraction's output over a few hundred terms, not [-1, 1), so a
     * function whose cost depends on |x| (libm's scalar tanh) is timed on
     * the magnitudes it meets. */
    for (int i = 0; i < NFN; i++)
        for (int fn = 0; fn < IR_FN_COUNT; fn++)
            fprintf(f, "FN%dS%d[EF%d_X] = %s(6 * (FA%d[EF%d] + FB%d[EF%d]))\noutput FN%dS%d\n", fn,
                    i, i, ir_func_name((ir_func)fn), i, i, i, i, fn, i);
    return fclose(f) == 0 ? 0 : -1;
}

static void on_compute(const char *name, const char *kind, double t, void *arg)
{
    cal_state *c = arg;
    if (t <= 0 || (strcmp(kind, "Einsum") != 0 && strcmp(kind, "Elementwise") != 0))
        return;
    if (!strncmp(name, "GC", 2)) {
        for (int d = 0; d < 3; d++) {
            size_t n = strlen(DT_NAME[d]);
            if (strncmp(name + 2, DT_NAME[d], n) != 0)
                continue;
            int g = atoi(name + 2 + n);
            if (g < 0 || g >= NGEMM || c->ngemm[d] >= NGEMM)
                return;
            const int64_t *s = GEMM_SHAPES[g];
            double flop = 2.0 * (double)s[0] * (double)s[1] * (double)s[2];
            c->gemm[d][c->ngemm[d]++] = c->gemm_at[d][g] = flop / t;
            c->gemm_flop[d] += flop;
            c->gemm_time[d] += t;
            return;
        }
    } else if (!strncmp(name, "EC", 2)) {
        int e = atoi(name + 2);
        if (e >= 0 && e < NEW && c->new_ < NEW)
            c->ew[c->new_++] = c->ew_at[e] = 3.0 * 4 * (double)EW_ELEMS[e] / t;
    } else if (!strncmp(name, "ES", 2)) {
        int e = atoi(name + 2);
        if (e >= 0 && e < NEW)
            c->scale_s[e] = t;
    } else if (!strncmp(name, "FN", 2)) {
        int fn, i;
        if (sscanf(name + 2, "%dS%d", &fn, &i) == 2 && fn >= 0 && fn < IR_FN_COUNT && i >= 0 &&
            i < NFN)
            c->fn_seconds[i][fn] = t;
    }
}

/* Writes and compiles the GEMM and elementwise program. */
static int prepare_compute(cal_state *c)
{
    fprintf(stderr, "einc calibrate: GEMM and elementwise on %d devices\n", c->o->ranks);
    if (write_compute_program(c, "compute.ein") || compile(c, "compute.ein", "compute"))
        return -1;
    add_bench(c, "compute", c->o->ranks);
    return 0;
}

/*
 * Runs every program once per round, the rounds one after the other, then
 * reads each program's median over the rounds.  A round takes tens of
 * seconds, so the rounds of one program are that far apart: a spell of
 * load from outside (another tenant of the host) slows one of them, and
 * the median drops it; back to back, a spell of a minute slowed all three
 * and the whole profile with them.
 */
static int run_benchmarks(cal_state *c)
{
    for (int r = 0; r < c->o->rounds; r++) {
        if (c->o->rounds > 1)
            fprintf(stderr, "einc calibrate: round %d of %d (%d programs)\n", r + 1, c->o->rounds,
                    c->nbench);
        for (int i = 0; i < c->nbench; i++)
            if (run_bench(c, c->bench[i].exe, c->bench[i].ndev, c->bench[i].out, r))
                return -1;
    }
    for (int i = 0; i < c->nbench; i++) {
        const cal_bench *b = &c->bench[i];
        coll_run cr = {c, b->p, &b->size, 1};
        if (b->p ? read_profile(c, b->out, on_coll, &cr) : read_profile(c, b->out, on_compute, c))
            return -1;
    }
    for (int d = 0; d < 3; d++)
        if (c->ngemm[d] == 0) {
            fprintf(stderr, "einc calibrate: error: no %s GEMM timing in the profile\n", DT_NAME[d]);
            return -1;
        }
    if (c->new_ == 0) {
        fprintf(stderr, "einc calibrate: error: no elementwise timing in the profile\n");
        return -1;
    }
    return 0;
}

/* ---- the profile ---- */

/* Adds object `key` to `cal`: per function, seconds per element beyond neg
 * on the same arrays (0 when the loop hides it), from its median times on
 * `lo` and `hi` elements per device: the slope between the two sizes, or,
 * when a noisy run leaves a slope that is not positive, the difference at
 * the larger size alone. */
static void add_fn_costs(cJSON *cal, const char *key, const double *at_lo, const double *at_hi,
                         int64_t lo, int64_t hi)
{
    double slope[IR_FN_COUNT] = {0};
    for (int fn = 0; fn < IR_FN_COUNT; fn++)
        if (at_lo[fn] > 0 && at_hi[fn] > 0)
            slope[fn] = (at_hi[fn] - at_lo[fn]) / (double)(hi - lo);
    cJSON *fns = cJSON_AddObjectToObject(cal, key);
    for (int fn = 0; fn < IR_FN_COUNT; fn++) {
        if (!(at_hi[fn] > 0 && at_hi[IR_FN_NEG] > 0))
            continue;
        double extra = slope[fn] > 0 && slope[IR_FN_NEG] > 0
                           ? slope[fn] - slope[IR_FN_NEG]
                           : (at_hi[fn] - at_hi[IR_FN_NEG]) / (double)hi;
        cJSON_AddNumberToObject(fns, ir_func_name((ir_func)fn), fmax(0, extra));
    }
}

/* Adds `key`: the bandwidths at[e] > 0 by bytes moved per device (3 f32
 * arrays of EW_ELEMS[e]), in ascending bytes. */
static void add_curve(cJSON *cal, const char *key, const double *at)
{
    cJSON *curve = cJSON_AddArrayToObject(cal, key);
    int64_t last = 0;
    for (;;) {
        int best = -1;
        for (int e = 0; e < NEW; e++)
            if (at[e] > 0 && EW_ELEMS[e] > last && (best < 0 || EW_ELEMS[e] < EW_ELEMS[best]))
                best = e;
        if (best < 0)
            return;
        last = EW_ELEMS[best];
        cJSON *pt = cJSON_CreateObject();
        cJSON_AddNumberToObject(pt, "bytes", 12.0 * (double)EW_ELEMS[best]);
        cJSON_AddNumberToObject(pt, "bandwidth", at[best]);
        cJSON_AddItemToArray(curve, pt);
    }
}

/* What a byte of a streamed result costs as a share of a byte read
 * (cost_measured_ew_seconds), from the add (2 bytes read per byte written)
 * and the scale (1 per 1) at each size that codegen streams: with the
 * weight w, time ratio r = scale / add = (1 + w) / (2 + w), so w = (2r -
 * 1) / (1 - r), kept in [0, 2] (2: a write reads its line first, then
 * writes it).  The median over those sizes, or -1 when none was measured. */
static double write_weight(const cal_state *c)
{
    double w[NEW];
    int n = 0;
    for (int e = 0; e < NEW; e++) {
        if (c->ew_at[e] <= 0 || c->scale_s[e] <= 0 || 4 * EW_ELEMS[e] < IR_STREAM_MIN_BYTES)
            continue;
        double r = c->scale_s[e] / (12.0 * (double)EW_ELEMS[e] / c->ew_at[e]);
        w[n++] = r >= 0.75 ? 2 : fmax(0, (2 * r - 1) / (1 - r));
    }
    return n ? cal_median(w, n) : -1;
}

/* A figure the loader requires to be > 0: a fitted 0 becomes 1 ns. */
static double positive(double v)
{
    return v > 1e-9 ? v : 1e-9;
}

static cJSON *profile_json(cal_state *c)
{
    const cal_options *o = c->o;
    double flops[3];
    /* All FLOPs over all time: the large shapes, which take the
     * milliseconds the predictions are judged on, weigh the most (the small
     * ones run from cache and faster). */
    for (int d = 0; d < 3; d++)
        flops[d] = c->gemm_time[d] > 0 ? c->gemm_flop[d] / c->gemm_time[d] : 0;
    double ew = cal_median(c->ew, c->new_);
    const coll_fit *ag = &c->coll[0];
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "name", o->name);
    cJSON_AddStringToObject(root, "status", "calibrated");
    char src[512];
    snprintf(src, sizeof src,
             "einc calibrate --runtime=%s --ranks %d%s: measured through the einc runtime "
             "(docs/cost-model.md, Calibration). A 'device' is one %s; figures are per device "
             "with all %d devices busy.",
             o->mpi ? "mpi" : "threads", o->ranks, o->quick ? " --quick" : "",
             o->mpi ? "MPI rank" : "thread of the threads backend", o->ranks);
    cJSON_AddStringToObject(root, "source", src);
    /* Which machine these figures belong to: `--hw host` warns when used
     * on another one, and the cache is keyed by it (calibrate_machine.c). */
    cJSON *mj = cost_machine_to_json(&c->machine);
    if (mj)
        cJSON_AddItemToObject(root, "machine", mj);
    cJSON *peak = cJSON_AddObjectToObject(root, "peak_flops");
    cJSON_AddNumberToObject(peak, "bf16", positive(flops[2]));
    cJSON_AddNumberToObject(peak, "f32", positive(flops[0]));
    cJSON_AddNumberToObject(peak, "f64", positive(flops[1]));
    cJSON_AddStringToObject(peak, "source", "MEASURED: GEMM FLOPs / time per device through rt_einsum, over four shapes");
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double mem = pages > 0 && page > 0 ? (double)pages * (double)page / o->ranks : 1e9;
    cJSON_AddNumberToObject(root, "hbm_bytes", mem);
    cJSON_AddStringToObject(root, "hbm_bytes_source", "MEASURED: physical memory / devices");
    cJSON_AddNumberToObject(root, "hbm_bandwidth", positive(ew));
    cJSON_AddStringToObject(root, "hbm_bandwidth_source",
                            "MEASURED: elementwise add, (2 inputs + 1 output) bytes / time per device");
    cJSON_AddNumberToObject(root, "ici_oneway_bandwidth", positive(ag->bw));
    cJSON_AddNumberToObject(root, "ici_bidi_bandwidth", positive(ag->bw));
    cJSON_AddStringToObject(root, "ici_bidi_bandwidth_source",
                            "MEASURED: AllGather fit's per-step bandwidth (both directions share memory)");
    cJSON_AddNumberToObject(root, "ici_latency", positive(ag->l_sync));
    cJSON_AddStringToObject(root, "ici_latency_source", "MEASURED: AllGather fit's L_sync");
    cJSON *wrap = cJSON_AddObjectToObject(root, "wraparound");
    cJSON_AddStringToObject(wrap, "rule", "always");
    cJSON_AddNumberToObject(root, "dcn_bandwidth", positive(ag->bw));
    cJSON_AddStringToObject(root, "dcn_bandwidth_source", "MEASURED: as ici (one host)");

    cJSON *cal = cJSON_AddObjectToObject(root, "calibration");
    cJSON_AddStringToObject(cal, "runtime", o->mpi ? "mpi" : "threads");
    cJSON_AddNumberToObject(cal, "devices", o->ranks);
    cJSON_AddNumberToObject(cal, "runs", o->repeat);
    cJSON_AddNumberToObject(cal, "rounds", o->rounds);
    if (c->load[0] >= 0)
        cJSON_AddNumberToObject(cal, "load_average", c->load[0]);
    cJSON_AddStringToObject(cal, "model",
                            "T = t_launch + (P-1) * (l_sync + shard_bytes / bandwidth) + shard_bytes / "
                            "local_bandwidth + (runs - P) * seconds_per_run, shard_bytes = "
                            "buffer_bytes / P, runs = contiguous runs copied per device (P for a flat "
                            "buffer) (seed 004, MeshSlice; the own shard's copy and the runs are "
                            "absent where free)");
    cJSON *colls = cJSON_AddObjectToObject(cal, "collectives");
    for (int k = 0; k < NKINDS; k++) {
        const coll_fit *f = &c->coll[k];
        cJSON *j = cJSON_AddObjectToObject(colls, KIND_KEY[k]);
        cJSON_AddNumberToObject(j, "t_launch", f->t_launch); /* >= 0: the fit's own value */
        cJSON_AddNumberToObject(j, "l_sync", f->l_sync);
        cJSON_AddNumberToObject(j, "bandwidth", positive(f->bw));
        if (f->bw_local > 0)
            cJSON_AddNumberToObject(j, "local_bandwidth", f->bw_local);
        if (f->t_run > 0)
            cJSON_AddNumberToObject(j, "seconds_per_run", f->t_run);
        if (f->has_small) {
            cJSON *sm = cJSON_AddObjectToObject(j, "small_messages");
            cJSON_AddNumberToObject(sm, "below_bytes", SPLIT_BYTES);
            cJSON_AddNumberToObject(sm, "t_launch", f->small_t_launch);
            cJSON_AddNumberToObject(sm, "l_sync", f->small_l_sync);
            cJSON_AddNumberToObject(sm, "bandwidth", positive(f->small_bw));
            if (f->small_bw_local > 0)
                cJSON_AddNumberToObject(sm, "local_bandwidth", f->small_bw_local);
            if (f->small_t_run > 0)
                cJSON_AddNumberToObject(sm, "seconds_per_run", f->small_t_run);
        }
        cJSON_AddNumberToObject(j, "rms_rel_residual", f->rms);
        cJSON_AddNumberToObject(j, "max_rel_residual", f->max);
        cJSON_AddNumberToObject(j, "samples_used", f->used);
        cJSON *arr = cJSON_AddArrayToObject(j, "samples");
        for (int i = 0; i < f->n; i++) {
            cJSON *s = cJSON_CreateObject();
            cJSON_AddNumberToObject(s, "group", f->s[i].p);
            cJSON_AddNumberToObject(s, "buffer_bytes", f->s[i].bytes);
            cJSON_AddNumberToObject(s, "runs", f->s[i].runs);
            cJSON_AddNumberToObject(s, "measured_s", f->s[i].t);
            cJSON_AddNumberToObject(s, "fitted_s", f->s[i].fit);
            cJSON_AddNumberToObject(s, "rel_residual", (f->s[i].fit - f->s[i].t) / f->s[i].t);
            cJSON_AddBoolToObject(s, "outlier", f->s[i].outlier);
            cJSON_AddItemToArray(arr, s);
        }
    }
    cJSON *g = cJSON_AddObjectToObject(cal, "gemm_flops");
    for (int d = 0; d < 3; d++)
        cJSON_AddNumberToObject(g, DT_NAME[d], positive(flops[d]));
    /* The rate by size (GEMM_SHAPES ascend in FLOPs): a GEMM whose operands
     * stay in cache runs faster than the large ones behind gemm_flops. */
    cJSON *gc = cJSON_AddObjectToObject(cal, "gemm_curve");
    for (int d = 0; d < 3; d++) {
        cJSON *arr = cJSON_AddArrayToObject(gc, DT_NAME[d]);
        for (int k = 0; k < NGEMM; k++) {
            if (c->gemm_at[d][k] <= 0)
                continue;
            const int64_t *sh = GEMM_SHAPES[k];
            cJSON *pt = cJSON_CreateObject();
            cJSON_AddNumberToObject(pt, "flops", 2.0 * (double)sh[0] * (double)sh[1] * (double)sh[2]);
            cJSON_AddNumberToObject(pt, "flops_per_s", c->gemm_at[d][k]);
            cJSON_AddItemToArray(arr, pt);
        }
    }
    cJSON_AddNumberToObject(cal, "elementwise_bandwidth", positive(ew));
    double w = write_weight(c);
    if (w >= 0)
        cJSON_AddNumberToObject(cal, "elementwise_write_weight", w);
    /* The bandwidth by bytes moved per device: small arrays stay in the
     * caches and go several times faster. */
    add_curve(cal, "elementwise_curve", c->ew_at);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cJSON_AddNumberToObject(cal, "cores", cores > 0 ? (double)cores : (double)o->ranks);
    add_fn_costs(cal, "function_seconds_per_element", c->fn_seconds[0], c->fn_seconds[1],
                 FN_ELEMS[0], FN_ELEMS[1]);
    add_fn_costs(cal, "function_seconds_per_element_in_cache", c->fn_seconds[2],
                 c->fn_seconds[3], FN_ELEMS[2], FN_ELEMS[3]);
    return root;
}

/* Writes `text` to `path` through a temporary file and rename. */
static int write_atomic(const char *path, const char *text)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmpXXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        fprintf(stderr, "einc calibrate: error: cannot create a file beside %s: %s\n", path,
                strerror(errno));
        return -1;
    }
    fchmod(fd, 0644);
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    bool ok = off == n && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "einc calibrate: error: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static void print_summary(const cal_state *c)
{
    for (int k = 0; k < NKINDS; k++) {
        const coll_fit *f = &c->coll[k];
        fprintf(stderr,
                "  %-13s T_launch %7.2f us  L_sync %6.2f us  BW %5.2f GB/s  own shard %5.2f GB/s  "
                "run %5.1f ns  residual rms %5.1f%% max %5.1f%% (%d of %d samples)\n",
                KIND_OP[k], f->t_launch * 1e6, f->l_sync * 1e6, f->bw * 1e-9, f->bw_local * 1e-9,
                f->t_run * 1e9, 100 * f->rms, 100 * f->max, f->used, f->n);
    }
}

/* Removes the work directory: every program's source, executable and
 * per-round profile output (the names add_bench and run_bench gave them). */
static void remove_dir(const cal_state *c)
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
        }
    }
    if (rmdir(c->dir) != 0)
        fprintf(stderr, "einc calibrate: note: could not remove %s: %s\n", c->dir, strerror(errno));
}

/* `einc calibrate --machine`: this machine's identity, its key and cache
 * file as one JSON object on stdout (for scripts and tests). */
static int print_machine(void)
{
    cost_machine m;
    calibrate_machine_detect(&m);
    char key[128], path[COST_HW_PATH_MAX], desc[3 * COST_MACHINE_STR];
    cost_machine_key(&m, key, sizeof key);
    cost_machine_describe(&m, desc, sizeof desc);
    cJSON *root = cJSON_CreateObject();
    cJSON *mj = cost_machine_to_json(&m);
    if (!root || !mj) {
        cJSON_Delete(root);
        cJSON_Delete(mj);
        fprintf(stderr, "einc calibrate: error: out of memory\n");
        return 1;
    }
    cJSON_AddItemToObject(root, "machine", mj);
    cJSON_AddStringToObject(root, "description", desc);
    cJSON_AddStringToObject(root, "key", key);
    if (calibrate_cache_path(&m, path, sizeof path) == 0) {
        cJSON_AddStringToObject(root, "cache", path);
        cJSON_AddBoolToObject(root, "cached", access(path, F_OK) == 0);
    } else {
        cJSON_AddNullToObject(root, "cache");
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) {
        fprintf(stderr, "einc calibrate: error: out of memory\n");
        return 1;
    }
    printf("%s\n", text);
    free(text);
    return 0;
}

/* Creates `path` and its missing parents (mode 0755), as mkdir -p. */
static int make_dirs(const char *path)
{
    char buf[COST_HW_PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return -1;
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p)
            continue;
        char saved = *p;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = saved;
        if (!saved)
            return 0;
    }
}

int calibrate_main(int argc, char **argv)
{
    cal_options o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    if (o.machine)
        return print_machine();
    /* Without -o the profile goes to this machine's cache, where `--hw host`
     * finds it. */
    char cached[COST_HW_PATH_MAX];
    cost_machine here;
    calibrate_machine_detect(&here);
    if (!o.output) {
        char dir[COST_HW_PATH_MAX];
        if (calibrate_cache_dir(dir, sizeof dir) != 0 ||
            calibrate_cache_path(&here, cached, sizeof cached) != 0)
            return drv_bad_usage("einc calibrate", "%s",
                                 "no cache directory ($XDG_CACHE_HOME and $HOME unset): give -o PROFILE.json");
        if (make_dirs(dir) != 0) {
            fprintf(stderr, "einc calibrate: error: cannot create %s: %s\n", dir, strerror(errno));
            return 1;
        }
        o.output = cached;
    }
    /* Minutes of measuring must not end in an unwritable file: check the
     * output's directory first (write_atomic creates a file beside it),
     * and that the rename would replace at most a regular file. */
    if (drv_check_output("einc calibrate", o.output, NULL, 0))
        return 1;
    char outdir[COST_HW_PATH_MAX];
    snprintf(outdir, sizeof outdir, "%s", o.output);
    char *slash = strrchr(outdir, '/');
    if (slash)
        *(slash == outdir ? slash + 1 : slash) = 0;
    else
        snprintf(outdir, sizeof outdir, ".");
    if (access(outdir, W_OK) != 0) {
        fprintf(stderr, "einc calibrate: error: cannot write %s: %s: %s\n", o.output, outdir,
                strerror(errno));
        return 1;
    }
    cal_state *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "einc calibrate: error: out of memory\n");
        return 1;
    }
    c->o = &o;
    c->machine = here;
    c->load[0] = -1;
    ssize_t n = readlink("/proc/self/exe", c->self, sizeof c->self - 1);
    if (n <= 0) {
        fprintf(stderr, "einc calibrate: error: cannot find this einc (/proc/self/exe)\n");
        free(c);
        return 1;
    }
    c->self[n] = 0;
    const char *tmpdir = getenv("TMPDIR");
    snprintf(c->dir, sizeof c->dir, "%s/einc-calibrate-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(c->dir)) {
        fprintf(stderr, "einc calibrate: error: cannot create a work directory: %s\n",
                strerror(errno));
        free(c);
        return 1;
    }
    rc = 1;
    /* Other processes' load slows every program calibration runs, and the
     * fastest of a few rounds cannot undo load that lasts the whole run: on
     * the 2-core VM of docs/performance.md a load average of 12 gave GEMM
     * rates 3x below the quiet machine's and a 0.5 ms L_sync.  Say so, and
     * record the load in the profile. */
    if (getloadavg(c->load, 1) == 1 && c->load[0] > (double)here.cores && here.cores > 0)
        fprintf(stderr, "einc calibrate: warning: the machine is busy (load average %.1f on %d "
                        "cores): the figures will be slower than the machine; calibrate when it "
                        "is quiet\n", c->load[0], here.cores);
    if (prepare_collectives(c) || prepare_compute(c) || run_benchmarks(c))
        goto out;
    for (int k = 0; k < NKINDS; k++)
        if (cal_fit_kind(&c->coll[k], KIND_OP[k]))
            goto out;
    cJSON *root = profile_json(c);
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) {
        fprintf(stderr, "einc calibrate: error: out of memory\n");
        goto out;
    }
    /* The written profile must load: check the text before replacing the file. */
    cost_hw hw;
    char err[512];
    if (cost_hw_parse(text, o.output, &hw, err, sizeof err) != 0) {
        fprintf(stderr, "einc calibrate: error: the measured profile does not load: %s\n", err);
        free(text);
        goto out;
    }
    size_t len = strlen(text);
    char *withnl = malloc(len + 2);
    if (withnl) {
        memcpy(withnl, text, len);
        memcpy(withnl + len, "\n", 2);
    }
    int w = withnl ? write_atomic(o.output, withnl) : -1;
    free(withnl);
    free(text);
    if (w)
        goto out;
    print_summary(c);
    fprintf(stderr, "  GEMM %.1f / %.1f / %.1f GFLOP/s (f32 / f64 / bf16), elementwise %.2f GB/s "
            "per device\nwrote %s\n",
            hw.peak_flops[IR_F32] * 1e-9, hw.peak_flops[IR_F64] * 1e-9,
            hw.peak_flops[IR_BF16] * 1e-9, hw.hbm_bw * 1e-9, o.output);
    rc = 0;
out:
    if (o.keep)
        fprintf(stderr, "einc calibrate: the benchmark programs are in %s\n", c->dir);
    else
        remove_dir(c);
    free(c);
    return rc;
}
