/*
 * calibrate_internal.h - what the files of calibrate/ share: the limits of
 * one calibration, the measurements of one collective kind and their fit
 * (seed 004's measured model), the benchmark programs' shapes and sizes
 * (which the programs, the parser of their profiles and the profile writer
 * must agree on), and the state of one run.
 */
#ifndef EINC_CALIBRATE_INTERNAL_H
#define EINC_CALIBRATE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "calibrate.h"
#include "costmodel.h"

#define MAX_RANKS CALIBRATE_MAX_RANKS
#define MAX_SIZES 24
#define MAX_SAMPLES (MAX_RANKS * MAX_SIZES)
#define MAX_ROUNDS CALIBRATE_MAX_ROUNDS
#define NKINDS 4
#define NGEMM 4
#define NEW 4
#define NFN 4 /* sizes the functions are timed on (FN_ELEMS) */
#define NROW_GROUPS 4 /* row groups timed in fnrow.ein (ROW_GROUP_OP: rowpass.c's 2, maskpass.c's 2) */
/* Buffers below this many bytes per device are fitted separately (they
 * stay in the caches; docs/cost-model.md); the fit may move the split up
 * to where the rate stops falling (fit.c, cal_fit_kind). */
#define SPLIT_BYTES (1 << 20)

/* One timed collective. */
typedef struct sample {
    int p;                  /* group size */
    double bytes;           /* buffer bytes per device (nccl-tests' size) */
    double runs;            /* contiguous runs a device copies: P if flat, P x rows if strided */
    double t;               /* median seconds per call */
    double fit;             /* fitted seconds */
    bool outlier;           /* left out of the final fit */
} sample;

/* The measured model of one collective kind. */
typedef struct coll_fit {
    sample s[MAX_SAMPLES];  /* the measurements */
    int n;                  /* samples in s */
    double t_launch;        /* seconds */
    double l_sync;          /* seconds per step */
    double bw;              /* bytes/s of one step's shard */
    double bw_local;        /* bytes/s of the copy of the device's own shard; 0: free */
    double t_run;           /* seconds per contiguous run beyond one per peer block */
    double rms;             /* rms relative residual */
    double max;             /* largest relative residual of the samples used */
    int used;               /* samples in the final fit */
    bool has_small;         /* buffers below `split` have their own fit */
    double split;           /* bytes: SPLIT_BYTES, or above it where the rate falls on (fit.c) */
    double small_t_launch;  /* that fit: seconds */
    double small_l_sync;    /* seconds per step */
    double small_bw;        /* bytes/s */
    double small_bw_local;  /* bytes/s; 0: free */
    double small_t_run;     /* seconds per extra run */
    double large_at;        /* bytes: the largest flat buffer timed; 0: no floor (fit_large) */
    double large_from;      /* bytes: the next smaller size timed, where the floor starts */
    double large_bw;        /* bytes/s of the (P - 1) shards of the fastest sample at large_at */
} coll_fit;

/* Fits T(P, S, runs) = T_launch + (P - 1) (L_sync + shard / BW) +
 * shard / BW_local + (runs - P) t_run to f's samples
 * (relative least squares, coefficients kept non-negative; buffers below
 * SPLIT_BYTES or a larger split chosen by the residuals fitted separately
 * when there are enough of them), fills each
 * sample's fitted time and the residual statistics.  `kind` names the
 * collective in messages.  Returns 0, or -1 after a message on stderr when
 * no fit exists (fit.c). */
int cal_fit_kind(coll_fit *f, const char *kind);

/* Median of v[0..n) (sorts v in place); n >= 1 (fit.c). */
double cal_median(double *v, int n);

/* Which collective each index of the per-kind arrays is: its key in the
 * profile, its op kind in the executables' --profile tables, and the name
 * tag of its flat buffers in the benchmark programs. */
static const char *const KIND_KEY[NKINDS] = {"allgather", "reducescatter", "allreduce", "alltoall"};
static const char *const KIND_OP[NKINDS] = {"AllGather", "ReduceScatter", "AllReduce", "AllToAll"};
static const char *const KIND_TAG[NKINDS] = {"AG", "RS", "AR", "AA"};

/* Columns of the strided variants: shard rows of STRIDE_RUN f32 (512 B),
 * as a collective over the inner dim of an activation copies them. */
#define STRIDE_RUN 128

/* Local GEMM shapes per device (M, K, N): from cache-sized to large. */
static const int64_t GEMM_SHAPES[NGEMM][3] = {
    {256, 256, 256}, {512, 512, 512}, {1024, 512, 1024}, {1024, 1024, 1024}};
/* bf16 GEMMs (M, K, N per device) at the skinny shapes of a model's layers
 * ([B*S, D] x [D, F] and back, D = 128): the first at the FLOPs of a
 * projection, the next two at equal FLOPs with results of 65536 and 262144
 * elements (K = 512 and 128), whose
 * difference is what a result element costs beyond the multiply-adds (the
 * f32 result written by oneDNN's GEMM and rounded to bf16;
 * cal_gemm_result_seconds).  An index of GEMM_RESULT_SHAPES. */
#define NGEMM_RESULT 3
static const int64_t GEMM_RESULT_SHAPES[NGEMM_RESULT][3] = {
    {512, 128, 128}, {512, 512, 128}, {512, 128, 512}};
/* The first of GEMM_RESULT_SHAPES that f32 and f64 are timed at too, as
 * points of their curves: a layer's projections (K = 128 in, K = 512 out)
 * at 67 MFLOP run near the rate of the 512^3 GEMM (268 MFLOP; 0.9 of it
 * timed alone, 0.97 in fortunes_transformer's layers), where the curve
 * had only the interpolation between it and 256^3 (33.5 MFLOP, a fifth
 * slower) to price them by, 14% over what they took (issue 28;
 * docs/cost-model.md, "The layer's point").  The 16.8 MFLOP shape stays
 * out: it would become the curve's smallest point, at which the batched
 * GEMMs of attention below it, slower per FLOP, are clamped. */
#define GEMM_LAYER_FIRST 1
/* Elementwise array elements per device. */
static const int64_t EW_ELEMS[NEW] = {1 << 22, 1 << 18, 1 << 20, 1 << 23};
/* Runs per process of the elementwise curve's program (stream.c), at
 * least: it keeps the fastest call, which more calls make likelier to run
 * undisturbed, and its ops take milliseconds, so 25 runs cost about a
 * second. */
#define STREAM_REPEAT 25
/* Runs per process of the functions' and row groups' program, at least:
 * fewer than the curve's, as libm's tanh and log take 20-30 ns an element
 * and a run a quarter of a second or more; the ops it compares take a
 * millisecond or less, and run many times a run (neg before every other
 * function, the row groups ROW_GROUP_TIMES times), so a fastest call of
 * an undisturbed run is there for each. */
#define FNROW_REPEAT 4
/* Processes of that program per round (stream.c): the memory-bound ops'
 * fastest calls differ more between processes than within one.  Each
 * costs its first run's page faults beyond its timed runs (its 2 GiB of
 * outputs are not gathered: --discard-outputs, runner.c), so 3, not
 * more: before --discard-outputs the quick calibration took about a
 * minute with 4. */
#define FNROW_PROCESSES 3
/* Processes per round of a threads collective program whose groups are
 * smaller than the mesh (P = 2 of the quick calibration's 4 devices on 2 cores,
 * a group's two members on one core), run seconds apart
 * (cal_run_benchmarks): such a program's copies ran at one of two speeds
 * in spells of 5-15 s, an AllGather of 8 MiB a device at 1.1-1.4 ms or
 * at 1.8-2.2 ms, every process of a spell alike, and both rounds of a
 * calibration could be slow (docs/performance-history.md, section 5).
 * More processes sample more spells, and trim the loaded tail, but do
 * not cure it: a slow spell could last a whole calibration.  The groups
 * of the whole mesh did not split, nor MPI's P = 2: they keep one. */
#define COLL_PROCESSES 3
/* Processes per round of compute.ein, the GEMM curve's program (about 2 s
 * each): a point of the curve is the least over them and the rounds.
 * With one a round, one point could be slow in both rounds of a quick
 * calibration while its neighbours were not: the f32 curve read 45.5,
 * 21.9, 48.0 and 47.2 GFLOP/s at 33.5, 67, 268 and 2147 MFLOP (family
 * 26, 20:45Z; 41-46 at 67 MFLOP in eight other calibrations of the same
 * day), and priced every layer-shaped GEMM of fortunes_transformer at
 * 2.2x its time (docs/performance-history.md, section 5, "The drift
 * probe").  The second process runs after every other program's first
 * (cal_run_benchmarks), seconds later. */
#define COMPUTE_PROCESSES 2
/* Elements per device of the full mesh the functions are timed on
 * (fnrow.ein, stream.c; hot: every function reads the same two arrays,
 * which the op before just read), in pairs: the slope between a pair's
 * sizes is the time per element without the fixed cost of an op's call.
 * The first pair streams from memory, as an elementwise op over a
 * model's tensors does, so what a function costs beyond neg there is what
 * its loop does not hide under its memory traffic; both sizes have results
 * of IR_STREAM_MIN_BYTES or more, which codegen streams (ir_ew_streams),
 * as it does a model's, so the slope is that of one kind of loop.  The
 * second pair stays in the second-level cache (3 x 128 KiB per device at
 * the larger size, two devices' copies to a core): beyond neg it is the
 * function's arithmetic, which a row group pays on a row in cache,
 * between the passes that touch memory
 * (passes/costmodel/cost_rowgroup.c). */
static const int64_t FN_ELEMS[NFN] = {(int64_t)1 << 20, COST_FN_CAL_ELEMS, (int64_t)1 << 13,
                                      (int64_t)1 << 15};
static const char *const DT_NAME[3] = {"f32", "f64", "bf16"};

/* One compiled benchmark program of the work directory. */
typedef struct cal_bench {
    char exe[64];           /* executable */
    char out[72];           /* its profile output (exe.txt), round r in out.r */
    int ndev;               /* devices it runs on */
    int p;                  /* collectives: group size; 0 for the compute program */
    int64_t size;           /* collectives: the buffer size it times */
    int repeat;             /* runs per process (--repeat R); 0: the command line's */
    bool trace;             /* also writes exe.trace.R.json (--trace), which is read instead of out */
    int processes;          /* processes a round: this entry and the next processes - 1 (links to
                             * its executable, cal_add_processes); 0 for those next ones */
    int process;            /* which of its program's processes this is, from 0 (the order
                             * within a round: cal_run_benchmarks) */
} cal_bench;

/* Everything one calibration learns. */
typedef struct cal_state {
    const cal_options *o;   /* command line */
    char dir[256];          /* work directory */
    char self[1024];        /* this einc */
    /* the programs (collectives, compute's, stream, fnrow's processes),
     * in the order they run */
    cal_bench bench[MAX_RANKS * MAX_SIZES * COLL_PROCESSES + COMPUTE_PROCESSES + 1 + FNROW_PROCESSES];
    int nbench;             /* entries in bench */
    coll_fit coll[NKINDS];  /* per kind: AllGather, ReduceScatter, AllReduce, AllToAll */
    double gemm[3][NGEMM];  /* FLOP/s per dtype (ir_dtype order) and shape */
    double gemm_flop[3];    /* FLOPs summed over the shapes timed, per dtype */
    double gemm_at[3][NGEMM]; /* FLOP/s per dtype and index of GEMM_SHAPES, 0 if not timed */
    double gemm_time[3];    /* their seconds summed, per dtype */
    int ngemm[3];           /* shapes measured per dtype */
    double gemm_result_s[NGEMM_RESULT]; /* seconds of the bf16 GEMMs of GEMM_RESULT_SHAPES, 0 if not timed */
    double gemm_layer_s[2][NGEMM_RESULT]; /* seconds of the f32 and f64 GEMMs of GEMM_RESULT_SHAPES from GEMM_LAYER_FIRST, 0 if not timed */
    double ew[NEW];         /* elementwise bytes/s per size */
    int new_;               /* sizes measured */
    double ew_at[NEW];      /* bytes/s per size index of EW_ELEMS, 0 if not measured */
    double scale_s[NEW];    /* seconds of the scale A * 2 per size index, 0 if not measured */
    double fn_seconds[NFN][IR_FN_COUNT]; /* seconds of fn(6 (A + B)) on FN_ELEMS[i] per device of the
                                          * full mesh (stream.c), 0 if unmeasured */
    double row_s[NROW_GROUPS]; /* seconds of the row groups of 2 and 6 passes and of the softmaxes
                             * without and with a causal mask, per device of the full mesh
                             * (rowpass.c, maskpass.c, stream.c), 0 if unmeasured */
    cost_machine machine;   /* the machine measured (the profile's "machine") */
    double load[1];         /* 1-minute load average before measuring (-1: unknown) */
} cal_state;

/* ---- the benchmark programs (programs.c) ---- */

/* Writes and compiles one program per group size and buffer size, each
 * timing every collective kind, flat and strided; adds them to c->bench.
 * Returns 0, or -1 after a message on stderr. */
int cal_prepare_collectives(cal_state *c);

/* Writes and compiles the program of local GEMMs (compute.ein) and
 * stream.c's two (cal_prepare_stream); adds them to c->bench, compute as
 * COMPUTE_PROCESSES processes a round.  Returns 0, or -1 after a message. */
int cal_prepare_compute(cal_state *c);

/* Writes and compiles stream.ein, the elementwise curve's program, and
 * fnrow.ein, the functions' and row groups', on min(ranks, cores)
 * devices, and adds them to c->bench, traced, with at least STREAM_REPEAT
 * and FNROW_REPEAT runs, fnrow as FNROW_PROCESSES processes a round
 * (stream.c).  Returns 0, or -1 after a message. */
int cal_prepare_stream(cal_state *c);

/* Reads the traces of traced program b (stream or fnrow), one per round
 * of each of its processes (b[0 .. b->processes)), into c: the elementwise curve (ew, ew_at, new_, scale_s), the functions'
 * times (fn_seconds) and the row groups' (row_s), whichever b runs; each
 * op's time per device of the full mesh, as a core of it runs ranks /
 * b->ndev of them (stream.c).  Returns 0, or -1 after a message when a
 * trace is missing. */
int cal_read_stream(cal_state *c, const cal_bench *b);

/* Reads every program's profile tables into c (samples per collective
 * kind, GEMM rates, elementwise bandwidths, function times).  Returns 0,
 * or -1 after a message when a table is missing or a figure is absent. */
int cal_read_results(cal_state *c);

/* Seconds per result element of a bf16 GEMM beyond its multiply-adds:
 * the difference of the two equal-FLOP GEMMs of GEMM_RESULT_SHAPES (1, 2)
 * over their results' difference in elements; 0 when either was not
 * timed or noise leaves it not positive, or so large that it would
 * leave a GEMM of the curve less than a quarter of its time (programs.c). */
double cal_gemm_result_seconds(const cal_state *c);

/* ---- the row groups (rowpass.c) ---- */

/* Writes into fnrow.ein (open as `f`, its mesh {X: nd} declared) two row
 * groups over rows in cache, of 2 and 6 passes, `copies` copies each
 * (stream.c's copies) ROW_GROUP_TIMES times, the two groups' copies
 * alternating, every call over arrays of its own; the trace names a
 * group's call by its first op, ROW_GROUP_OP[g] followed by its number
 * (g = 0, 1; 2, 3 are maskpass.c's). */
void cal_write_row_groups(FILE *f, int nd, int64_t copies);

/* Writes ROW_GROUP_TIMES times `copies` copies of one group, first(f, k),
 * then as many of the other, second(f, k), k numbering the copies from 0
 * on through the times: the two groups of a difference timed close
 * together, each call over arrays of its own. */
void cal_write_alternating(FILE *f, int64_t copies, void (*first)(FILE *, long long),
                           void (*second)(FILE *, long long));
static const char *const ROW_GROUP_OP[NROW_GROUPS] = {"RGLSk", "RGHMk", "RMUYk", "RMMMk"};
/* Times each row group runs per copy and run: its fastest call varies
 * with what the other core streams, by 1.3x between processes of 2 calls
 * per device and run. */
#define ROW_GROUP_TIMES 4

/* Seconds per element of one pass of a row group over a row in cache:
 * the two groups' difference over the 4 passes and the elements per
 * device they run on, 0 when noise makes it negative; -1 when either was
 * not timed.  Per device with every device busy, as every calibrated
 * figure. */
double cal_row_pass_seconds(const cal_state *c);

/* ---- the causal mask (maskpass.c) ---- */

/* Writes into fnrow.ein, after cal_write_row_groups (whose RGZ ends each
 * group), two softmax row groups over rows in cache, without and with a
 * causal mask where(S <= T, X, -inf), `copies` copies each
 * ROW_GROUP_TIMES times, alternating as rowpass.c's; their calls are
 * ROW_GROUP_OP[2] and [3] in the trace. */
void cal_write_mask_groups(FILE *f, int nd, int64_t copies);

/* Seconds per element (of the masked array, half of it masked) that the
 * masked softmax takes beyond the unmasked one: the mask member with its
 * pass and its effect on the members after it; 0 when noise makes it
 * negative, -1 when either was not timed.  Per device with every device
 * busy, as every calibrated figure. */
double cal_row_mask_seconds(const cal_state *c);

/* ---- running them (runner.c) ---- */

/* Creates (truncates) `file` in the work directory for writing; NULL,
 * errno set, when it cannot. */
FILE *cal_create(const cal_state *c, const char *file);

/* Compiles `ein` (in the work directory) into executable `exe` with this
 * einc.  Returns 0, or -1 after a message. */
int cal_compile(cal_state *c, const char *ein, const char *exe);

/* Adds a compiled program to the list that cal_run_benchmarks runs, as
 * one process a round. */
cal_bench *cal_add_bench(cal_state *c, const char *exe, int ndev);

/* Adds compiled program `exe` as n processes a round (hard links to it,
 * named exe, exe.p1, ...); returns the first of the n consecutive
 * entries, its `processes` n, or NULL after a message. */
cal_bench *cal_add_processes(cal_state *c, const char *exe, int ndev, int n);

/* Runs every program of c->bench once per round, the rounds one after the
 * other, within a round every program's first process, then every second
 * one, and so on.  Returns 0, or -1 after a message when one fails. */
int cal_run_benchmarks(cal_state *c);

/* Calls fn(name, kind, seconds, arg) for each op of the --profile tables
 * of program b's processes (b[0 .. b->processes)), with its fastest time
 * over the processes and rounds.  Returns 0, or -1 after a message when a
 * table is missing. */
int cal_read_profile(cal_state *c, const cal_bench *b,
                     void (*fn)(const char *name, const char *kind, double t, void *arg),
                     void *arg);

/* Removes the work directory and every file the programs left in it. */
void cal_remove_dir(const cal_state *c);

/* ---- the profile (profile.c) ---- */

/* Writes the calibrated profile of c to c->o->output (atomically), after
 * checking that it loads; the loaded profile in *hw.  Returns 0, or -1
 * after a message. */
int cal_write_profile(cal_state *c, cost_hw *hw);

#endif
