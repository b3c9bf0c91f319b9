/*
 * programs.c - the benchmark programs of `einc calibrate` and what their
 * profiles say.  Each program is .ein text written into the work directory
 * (see the essay in calibrate.c for what coll_P_I.ein and compute.ein
 * time); every tensor has a unique name, and its name is how a row of the
 * executable's --profile table is traced back to the size, kind and
 * layout it timed (on_coll, on_compute).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "costmodel.h"

#include "calibrate_internal.h"

/* ---- the collective benchmarks ---- */

/* Under --quick, the programs of buffers over QUICK_LARGE_ABOVE bytes
 * per device time the AllReduce alone, QUICK_LARGE_REPEAT times a
 * process: a collective of 32 MiB a device takes 10-40 ms, whose median
 * over 3 runs a descheduled run does not move, and the rounds and
 * processes take the fastest.  The AllReduce is the collective whose rate
 * falls on past 8 MiB where a model's are that large (llama2_layer's
 * 40 MiB AllReduce_Y, priced at half its time on MPI from samples up to
 * 8 MiB).  With every kind at 32 MiB the quick calibration took 46 s
 * (threads) and 53 s (MPI) for 27 and 37, idle on the 2-core EPYC, and the
 * AllGather's and AllToAll's main fits, bent by their own large samples,
 * priced llama2_ffw's 2-7 MiB ones higher (MPI: 17.0% -> 29.7% and 13.1%
 * -> 21.0% mean |error|; docs/performance-history.md, section 5). */
#define QUICK_LARGE_ABOVE (8 << 20)
#define QUICK_LARGE_REPEAT 3

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

/* One row of a coll_P_I program's profile: a sample of the collective
 * kind it times, flat or strided by its name's tag. */
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
 * into a sharded (ReduceScatter) or replicated (AllReduce) output; with
 * `ar_only`, the AllReduce alone (QUICK_LARGE_ABOVE). */
static int write_coll_program(cal_state *c, int p, int z, const int64_t *sizes, int n,
                              bool ar_only, const char *file)
{
    FILE *f = cal_create(c, file);
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
        if (ar_only) {
            fprintf(f, "input ARin%d[K_X, I%d] : f32\n", i, i);
            continue;
        }
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
        if (!ar_only)
            fprintf(f, "RS%d[I%d]{U_X} = RSin%d[K, I%d]\n", i, i, i, i);
        fprintf(f, "AR%d[I%d]{U_X} = ARin%d[K, I%d]\n", i, i, i, i);
        if (!ar_only)
            fprintf(f, "RZ%d[R%d, C]{U_X} = RZin%d[K, R%d, C]\n", i, i, i, i);
    }
    fprintf(f, "output Warm[K]\n");
    for (int i = 0; i < n; i++) {
        if (ar_only) {
            fprintf(f, "output AR%d[I%d]\n", i, i);
            continue;
        }
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

/* Writes and compiles the collective programs. */
int cal_prepare_collectives(cal_state *c)
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
            bool large = o.quick && sizes[i] > QUICK_LARGE_ABOVE;
            if (write_coll_program(c, p, z, &sizes[i], 1, large, ein) || cal_compile(c, ein, exe))
                return -1;
            /* MPI's P = 2 showed one mode, and an mpirun a process costs
             * ~1 s: there the extra processes made the quick calibration
             * 71 -> 90 s. */
            int np = z > 1 && !o.mpi ? COLL_PROCESSES : 1;
            cal_bench *b = cal_add_processes(c, exe, p * z, np);
            if (!b)
                return -1;
            for (int k = 0; k < b->processes; k++) {
                b[k].p = p;
                b[k].size = sizes[i];
                if (large && o.repeat > QUICK_LARGE_REPEAT)
                    b[k].repeat = QUICK_LARGE_REPEAT;
            }
        }
    }
    return 0;
}

/* ---- GEMM and elementwise ---- */

/* Writes to f the inputs `<stem>A<tag>[<d>M<i>_X, <d>K<i>]` and
 * `<stem>B<tag>[<d>K<i>, <d>N<i>]` of dtype dt and the timed GEMM
 * `<res><tag>` of them, its output, behind an untimed twin of it (the
 * result's name with W for its G, a name on_compute skips): the timed call
 * then finds its inputs in cache, as an op of a model finds the
 * activations the op before it wrote.  Timed cold, behind the largest
 * GEMMs that evicted them, the 67 MFLOP shapes ran 15-25% slower than the
 * same GEMMs in fortunes_transformer's layers or alone (AMD family 26,
 * 2 cores: 1.60 ms cold, 1.43 ms warm, 1.39 ms alone;
 * docs/performance-history.md, section 5, "GEMMs timed warm"). */
static void write_gemm(FILE *f, const char *dt, const char *stem, const char *res, const char *tag,
                       const char *d, int i)
{
    fprintf(f, "input %sA%s[%sM%d_X, %sK%d] : %s\ninput %sB%s[%sK%d, %sN%d] : %s\n", stem, tag, d,
            i, d, i, dt, stem, tag, d, i, d, i, dt);
    for (int twin = 1; twin >= 0; twin--)
        fprintf(f, "%s%s%s[%sM%d_X, %sN%d] = %sA%s[%sM%d, %sK%d] * %sB%s[%sK%d, %sN%d]\n",
                twin ? "W" : "", twin ? res + 1 : res, tag, d, i, d, i, stem, tag, d, i, d, i, stem,
                tag, d, i, d, i);
    fprintf(f, "output %s%s\n", res, tag);
}

/* Writes compute.ein: on a mesh {X: N}, the local GEMMs of every shape
 * and dtype (the functions and row groups are stream.c's). */
static int write_compute_program(cal_state *c, const char *file)
{
    FILE *f = cal_create(c, file);
    if (!f)
        return -1;
    /* Every shape and size even under --quick: one program, a few seconds,
     * and a GEMM or elementwise curve without its large end would time the
     * ops that take milliseconds at the rate of the ones that stay in cache. */
    int nd = c->o->ranks, ng = NGEMM;
    char tag[16];
    fprintf(f, "# einc calibrate: local GEMMs on every device\nmesh X = %d\n", nd);
    for (int g = 0; g < ng; g++)
        fprintf(f, "dim M%d = %lld, K%d = %lld, N%d = %lld\n", g,
                (long long)(GEMM_SHAPES[g][0] * nd), g, (long long)GEMM_SHAPES[g][1], g,
                (long long)GEMM_SHAPES[g][2]);
    for (int t = 0; t < 3; t++)
        for (int g = 0; g < ng; g++) {
            /* --quick: the mid-size shape's rate lies between its
             * neighbours' on the curve; the largest, which the ops over
             * 1 ms run at, stays. */
            if (c->o->quick && g == 2)
                continue;
            snprintf(tag, sizeof tag, "%s%d", DT_NAME[t], g);
            write_gemm(f, DT_NAME[t], "G", "GC", tag, "", g); /* GC<dt><g> */
        }
    /* After the curve's: f32 and f64 at the layer's shapes
     * (GEMM_LAYER_FIRST), points of their curves between the square ones,
     * and the skinny bf16 GEMMs (all of them whatever --quick says: a few
     * hundred microseconds to a few milliseconds each). */
    for (int r = 0; r < NGEMM_RESULT; r++) {
        const int64_t *s = GEMM_RESULT_SHAPES[r];
        fprintf(f, "dim RM%d = %lld, RK%d = %lld, RN%d = %lld\n", r, (long long)(s[0] * nd), r,
                (long long)s[1], r, (long long)s[2]);
    }
    for (int t = 0; t < 3; t++)
        for (int r = t == IR_BF16 ? 0 : GEMM_LAYER_FIRST; r < NGEMM_RESULT; r++) {
            /* GL<dt><r>; bf16's GR<r>, as cal_gemm_result_seconds reads them */
            snprintf(tag, sizeof tag, "%s%d", t == IR_BF16 ? "" : DT_NAME[t], r);
            const char *stem = t == IR_BF16 ? "GR" : "GL";
            write_gemm(f, DT_NAME[t], stem, stem, tag, "R", r);
        }
    return fclose(f) == 0 ? 0 : -1;
}

/* What one row of compute's profile says, by its result's name: a GEMM's
 * FLOP/s (GC) or a skinny GEMM's time (GR: bf16, GL: f32 and f64); the
 * elementwise curve, the functions and the row groups are stream.c's. */
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
    } else if (!strncmp(name, "GL", 2)) {
        for (int d = 0; d < 2; d++) {
            size_t n = strlen(DT_NAME[d]);
            int r = strncmp(name + 2, DT_NAME[d], n) == 0 ? atoi(name + 2 + n) : -1;
            if (r >= GEMM_LAYER_FIRST && r < NGEMM_RESULT)
                c->gemm_layer_s[d][r] = t;
        }
    } else if (!strncmp(name, "GR", 2) && name[2] >= '0' && name[2] <= '9') {
        int r = atoi(name + 2);
        if (r < NGEMM_RESULT)
            c->gemm_result_s[r] = t;
    }
}

/* Result elements per device of GEMM shape s (M, K, N). */
static double result_elems(const int64_t *s)
{
    return (double)s[0] * (double)s[2];
}

double cal_gemm_result_seconds(const cal_state *c)
{
    const int64_t *deep = GEMM_RESULT_SHAPES[1], *wide = GEMM_RESULT_SHAPES[2];
    double td = c->gemm_result_s[1], tw = c->gemm_result_s[2];
    if (td <= 0 || tw <= 0)
        return 0;
    double x = (tw - td) / (result_elems(wide) - result_elems(deep));
    if (!(x > 0))
        return 0;
    /* Every GEMM the curve is made of keeps 1/4 of its time for its
     * multiply-adds, or the figure is a loaded run's noise. */
    for (int r = 0; r < NGEMM_RESULT; r++)
        if (c->gemm_result_s[r] > 0 && x * result_elems(GEMM_RESULT_SHAPES[r]) > 0.75 * c->gemm_result_s[r])
            return 0;
    for (int g = 0; g < NGEMM; g++) {
        const int64_t *s = GEMM_SHAPES[g];
        double flop = 2.0 * (double)s[0] * (double)s[1] * (double)s[2];
        if (c->gemm_at[2][g] > 0 && x * result_elems(s) > 0.75 * flop / c->gemm_at[2][g])
            return 0;
    }
    return x;
}

/* Writes and compiles the GEMM and function program and the elementwise
 * curve's. */
int cal_prepare_compute(cal_state *c)
{
    fprintf(stderr, "einc calibrate: GEMM and elementwise on %d devices\n", c->o->ranks);
    if (write_compute_program(c, "compute.ein") || cal_compile(c, "compute.ein", "compute"))
        return -1;
    if (!cal_add_processes(c, "compute", c->o->ranks, COMPUTE_PROCESSES))
        return -1;
    return cal_prepare_stream(c);
}

int cal_read_results(cal_state *c)
{
    for (int i = 0; i < c->nbench; i++) {
        const cal_bench *b = &c->bench[i];
        coll_run cr = {c, b->p, &b->size, 1};
        /* A program's processes are read with its first entry. */
        if (b->processes == 0)
            continue;
        if (b->trace ? cal_read_stream(c, b)
            : b->p   ? cal_read_profile(c, b, on_coll, &cr)
                     : cal_read_profile(c, b, on_compute, c))
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
