/*
 * costmodel.h - the cost model of einc as a library: hardware profiles,
 * the collective and roofline formulas of the seeds, the calibrated fits,
 * the estimate of one IR op, whole-program model FLOPs and memory, the
 * MeshSlice loop and the analytical 2D GEMM model with its autotuner.
 *
 * This is the main public header of passes/costmodel/ (library
 * einc_costmodel); pipeline.h, the pipeline schedules and their cost
 * (docs/pipeline.md), is the other one and needs no IR.  Its callers are the cost pass and its reports
 * (passes/cost.c, cost_report.c), the meshslice pass (passes/meshslice.c),
 * `einc autotune` and `einc calibrate` (driver/); the library itself calls
 * no pass and depends only on the IR (ir.h) and cJSON.  DESIGN.md: "the
 * cost model is the one judge ... it lives in its own folder with no calls
 * back into passes".
 *
 * Every time is in seconds, every size in bytes, every rate in FLOP/s or
 * bytes/s, and every quantity is PER DEVICE unless a name says "global".
 * The formulas come from the seeds (/work/shared/seeds): seed 001 (sharded
 * matmuls, collective costs), seed 000 (DP/FSDP critical batch), seed 003
 * (Transformer FLOPs: 2 * params * tokens), seed 004 (MeshSlice) and
 * DESIGN.md; docs/cost-model.md and docs/meshslice.md list each one with
 * its source and a worked example.
 *
 * A profile (struct cost_hw) is a plain value: loading fills it from a JSON
 * file in hw/ and it owns no memory, so callers keep it on the stack or in
 * their context struct and never free it.  Nothing in the library keeps
 * state between calls.
 */
#ifndef EINC_COSTMODEL_H
#define EINC_COSTMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ir.h"

/* Profile for a caller given none, e.g. the cost and meshslice passes when
 * pass_ctx.hw is NULL (the seeds' running example chip). */
#define COST_DEFAULT_HW "tpu-v5e"

/* Longest profile name / path / message kept in a cost_hw. */
#define COST_HW_NAME_MAX 64
#define COST_HW_PATH_MAX 512

/* When a mesh axis of a given size is a ring (has a wraparound link). */
typedef enum cost_wrap_rule {
    COST_WRAP_ALWAYS,           /* every axis closes (switch fabrics, shared memory) */
    COST_WRAP_NEVER,            /* no axis closes: every axis is a line */
    COST_WRAP_SIZE_EQUALS,      /* only an axis of exactly wrap_size chips (v5e: 16) */
    COST_WRAP_SIZE_MULTIPLE_OF, /* an axis whose size is a multiple of wrap_size (v4p/v5p: 4) */
} cost_wrap_rule;

/* Collective kinds of a calibrated profile's fits, in its JSON order. */
typedef enum cost_fit_kind {
    COST_FIT_ALLGATHER,
    COST_FIT_REDUCESCATTER,
    COST_FIT_ALLREDUCE,
    COST_FIT_ALLTOALL,
    COST_FIT_COUNT
} cost_fit_kind;

/* One collective kind's measured model (seed 004, MeshSlice, plus the own
 * shard's copy and the layout): T = t_launch + (P - 1) * (l_sync +
 * shard_bytes / bw) + shard_bytes / bw_local + (runs - P) * t_run,
 * shard_bytes = buffer bytes / P, runs = contiguous runs a device copies
 * (P for a flat buffer), fitted by `einc calibrate`. */
typedef struct cost_coll_fit {
    double t_launch;    /* seconds per call */
    double l_sync;      /* seconds per step of the ring (one synchronisation) */
    double bw;          /* bytes/s at which a step moves its shard */
    double bw_local;    /* bytes/s of the copy of the device's own shard; 0: free */
    double t_run;       /* seconds per contiguous run beyond one per peer block */
    double small_below; /* buffers below this many bytes use the small_* fit; 0: none */
    double small_t_launch; /* the in-cache fit: seconds per call */
    double small_l_sync;   /* seconds per step */
    double small_bw;       /* bytes/s */
    double small_bw_local; /* bytes/s; 0: free */
    double small_t_run;    /* seconds per extra run */
    double large_from;     /* bytes from which the time rises towards large_bw (0: no floor) */
    double large_at;       /* bytes of the largest buffer timed: from there at least
                              (P - 1) shards / large_bw */
    double large_bw;       /* bytes/s of (P - 1) shards at large_at, the fastest measured */
} cost_coll_fit;

/* Longest text kept in a field of cost_machine. */
#define COST_MACHINE_STR 160

/* The machine a profile was measured on (the "machine" object that `einc
 * calibrate` writes): what decides whether its figures still hold where
 * einc runs.  Empty strings and 0 mean unknown. */
typedef struct cost_machine {
    char cpu_model[COST_MACHINE_STR];   /* the CPU's model name, e.g. "AMD EPYC 7B13" */
    int cores;                          /* logical CPUs online */
    char isa[COST_MACHINE_STR];         /* widest vector ISA: "avx512", "avx2", "avx", "sse2", "neon" */
    char blas_core[COST_MACHINE_STR];   /* the BLAS kernel set in use: openblas_get_corename(), e.g. "Zen" */
    char blas_config[COST_MACHINE_STR]; /* openblas_get_config(): version and build options (not compared) */
} cost_machine;

/* Most points of a calibrated elementwise-bandwidth curve. */
#define COST_EW_POINTS 8

/* The loop `einc calibrate` times a unary function's streaming cost on
 * (hw->fn_time): `fn(6 * (A + B))` over COST_FN_CAL_ELEMS f32 elements per
 * device, reading COST_FN_CAL_READ and writing COST_FN_CAL_WRITTEN bytes
 * an element, its result streamed (calibrate/programs.c times it; the
 * cost pass scales what its traffic hid, cost_op.c). */
#define COST_FN_CAL_ELEMS ((int64_t)1 << 22)
#define COST_FN_CAL_READ 8.0
#define COST_FN_CAL_WRITTEN 4.0
/* The share of the calibration loop's memory time per element under
 * which a function's streaming figure is taken for noise, not for
 * arithmetic that bound the loop (fn_streaming_per_elem, cost_op.c):
 * functions of one instruction measured up to 0.06 of it. */
#define COST_FN_NOISE 0.1

/* A hardware profile: one chip's figures, as read from hw/NAME.json. */
typedef struct cost_hw {
    char name[COST_HW_NAME_MAX];    /* "name" field, e.g. "tpu-v5e" */
    char path[COST_HW_PATH_MAX];    /* file it was read from, for messages */
    bool calibrated;                /* false when "status" is "uncalibrated" */
    double peak_flops[3];           /* FLOP/s per ir_dtype (IR_F32, IR_F64, IR_BF16) */
    double peak_int8;               /* OP/s of int8 matmuls (32-bit accumulation); 0: the profile
                                       gives none.  No dtype of the language runs at it yet:
                                       --explain prints the int8 intensities the seeds reason
                                       with (seed 000: C_int8 / W_ici = 5100 on v5p) */
    double peak_fp8;                /* FLOP/s of fp8 matmuls (f32 accumulation); 0: none */
    double hbm_bytes;               /* device memory capacity, bytes */
    double hbm_bw;                  /* device memory bandwidth, bytes/s */
    double ici_oneway_bw;           /* one link, one direction, bytes/s */
    double ici_bidi_bw;             /* one mesh axis with wraparound, both directions, bytes/s (W_ici) */
    double ici_latency;             /* T_min: seconds per hop */
    cost_wrap_rule wrap;            /* which axis sizes have wraparound */
    int64_t wrap_size;              /* the size in COST_WRAP_SIZE_* rules, else 0 */
    double dcn_bw;                  /* data-center network per chip, bytes/s (W_dcn: mesh axes `over dcn`) */
    bool collective_matmul;         /* "collective_matmul": an activation AllGather feeding a matmul,
                                       or a ReduceScatter of one's result, runs as ring steps
                                       overlapped with the matmul's chunks (XLA on TPU; seed 001,
                                       Wang et al. ASPLOS'23); cost_collective_matmul_exposed */
    /* The "calibration" section written by `einc calibrate`; when present
     * the cost pass times collectives with these fits (cost_measured_coll_time)
     * and compute with the measured peak_flops / hbm_bw above. */
    bool measured;                        /* true if the profile has a "calibration" section */
    cost_coll_fit fit[COST_FIT_COUNT];    /* per collective kind, when measured */
    double elementwise_bw;                /* measured elementwise bytes/s per device, when measured */
    double fn_time[IR_FN_COUNT];          /* measured seconds per element of each unary function
                                             beyond the memory time, when measured (else 0) */
    double fn_time_cache[IR_FN_COUNT];    /* the same on arrays in cache: its arithmetic, which a
                                             row group pays on a row in cache (fn_time where the
                                             profile has no "..._in_cache" figures) */
    bool has_fn_cache[IR_FN_COUNT];       /* the function has a figure in the profile's
                                             "function_seconds_per_element_in_cache" (without it
                                             fn_streaming_per_elem, cost_op.c, prices fn_time) */
    double fn_base_time;                  /* seconds per element of the calibration's loop with
                                             neg, the loop fn_time is relative to
                                             ("function_baseline_seconds_per_element"; 0 when
                                             absent: fn_streaming_per_elem, cost_op.c, takes
                                             the elementwise curve's time instead) */
    bool has_row_pass;                    /* the profile has "row_pass_seconds_per_element" */
    double row_pass_time;                 /* that figure: seconds per element of one pass of a row
                                             group's member over a row in the first-level cache,
                                             per device with every calibrated device busy
                                             (calibrate/rowpass.c); when present, every member of
                                             a row group pays it (cost_rowgroup.c) */
    bool has_row_mask;                    /* the profile has "row_mask_seconds_per_element" */
    double row_mask_time;                 /* that figure: seconds per element of a row group's
                                             member that masks by the elements' positions
                                             (`where(S <= T, x, -inf)`), its pass included, per
                                             device with every calibrated device busy
                                             (calibrate/maskpass.c); when present, such a member
                                             pays it in place of row_pass_time */
    double ew_write_weight;               /* what a byte of a streamed result costs (non-temporal
                                             stores, IR_STREAM_MIN_BYTES) as a share of a byte read
                                             ("elementwise_write_weight"; 1 when absent) */
    int ew_npoints;                       /* points of the elementwise curve (0: none) */
    double ew_bytes[COST_EW_POINTS];      /* bytes moved per device, ascending */
    double ew_bw[COST_EW_POINTS];         /* bytes/s measured at that size */
    int gemm_npoints[3];                  /* points of the GEMM curve per ir_dtype (0: none) */
    double gemm_flop[3][COST_EW_POINTS];  /* FLOPs of a GEMM per device, ascending */
    double gemm_rate[3][COST_EW_POINTS];  /* FLOP/s measured at that size */
    double gemm_result_time[3];           /* seconds per result element of a GEMM per ir_dtype,
                                             beyond its FLOPs at the curve's rate, which is then
                                             the multiply-adds' alone
                                             ("gemm_seconds_per_result_element"; 0 when absent) */
    double cal_devices;                   /* devices busy during calibration (0: unknown) */
    double cal_cores;                     /* cores of the calibrated machine (0: unknown) */
    bool cal_mpi;                         /* calibrated on the MPI runtime ("runtime": "mpi") */
    bool has_machine;                     /* the profile has a "machine" object */
    cost_machine machine;                 /* that object: where the figures were measured */
} cost_hw;

/* ---- profiles (cost_hw.c) ---- */

/*
 * Loads a profile.  `name_or_path` containing '/' or ending in ".json" is
 * read as a file; otherwise it is a profile name looked up as NAME.json in
 * the directory given by the environment variable EINC_HW_DIR, or else in
 * the source tree's hw/ (the compile-time definition EINC_HW_DIR).
 *
 * Every figure must be present, a number and > 0 ("peak_flops" needs bf16,
 * f32 and f64; "wraparound" needs a known "rule" and, for the size rules, a
 * positive integer "size").  Fields ending in "source" are documentation and
 * ignored.  The optional "machine" object (strings cpu_model, isa,
 * blas_core, blas_config; whole number cores >= 1) fills hw->machine and
 * sets hw->has_machine.  On error returns -1, writes a one-line message naming the file
 * and the field into `err` (size `errsize`) and leaves `hw` unspecified;
 * returns 0 on success.
 */
int cost_hw_load(const char *name_or_path, cost_hw *hw, char *err, size_t errsize);

/* Same, from JSON text already in memory; `origin` names it in messages. */
int cost_hw_parse(const char *json, const char *origin, cost_hw *hw, char *err, size_t errsize);

/* Whether a mesh axis of `size` devices is a ring (has wraparound) under hw's rule. */
bool cost_hw_axis_wraps(const cost_hw *hw, int64_t size);

/* ---- the machine a profile belongs to (cost_hw.c) ---- */

struct cJSON;

/* Whether `a` and `b` are the same machine for the cost model: the same
 * CPU model, core count, ISA and BLAS kernel set (blas_config, which names
 * the library's version, is not compared).  Exact string comparison. */
bool cost_machine_same(const cost_machine *a, const cost_machine *b);

/* Writes a one-line description of `m` into buf (size n, always
 * NUL-terminated), e.g. "AMD EPYC 7B13, 2 cores, avx2, OpenBLAS Zen";
 * unknown fields print as "unknown". */
void cost_machine_describe(const cost_machine *m, char *buf, size_t n);

/* Writes a file-name-safe key of `m` into buf (size n >= 32): a slug of
 * the CPU model, the core count, ISA and BLAS kernel, and 8 hex digits of
 * a hash of all four fields, e.g. "amd-epyc-7b13-2c-avx2-zen-1a2b3c4d".
 * Two machines with equal keys are the same by cost_machine_same (up to
 * the hash).  The key names a machine's cached profile. */
void cost_machine_key(const cost_machine *m, char *buf, size_t n);

/* `m` as a new cJSON object {"cpu_model", "cores", "isa", "blas_core",
 * "blas_config"}, the form cost_hw_parse reads back from a profile's
 * "machine" field.  The caller owns the result (cJSON_Delete, or adds it
 * to a parent); NULL when out of memory. */
struct cJSON *cost_machine_to_json(const cost_machine *m);

/* ---- formulas (cost_formula.c) ---- */

/* Time and limiting term of one collective. */
typedef struct cost_coll_time {
    double t_latency;   /* seconds: T_min * hops along the longest path */
    double t_bandwidth; /* seconds: bytes / available link bandwidth */
    double time;        /* max of the two (seconds) */
    ir_bound bound;     /* IR_BOUND_LATENCY or IR_BOUND_BANDWIDTH */
    double crossover;   /* message size V (bytes) at which the two terms are equal */
} cost_coll_time;

/*
 * AllGather (and ReduceScatter, the same cost) over the mesh axes of sizes
 * `sizes[0..naxes-1]`.  `v` is the gathered per-device bytes (AllGather's
 * result, ReduceScatter's operand).  Axes of size 1 take no part.
 *
 * Seed 001 ("AllGather ... how long", pop quiz 2):
 *   with wraparound on every axis  T = max(T_min * sum|X_i| / 2, V / (W_ici * n_axes))
 *   an axis without wraparound is a line: the one-way ring takes |X| - 1 hops
 *   of V/|X| bytes at the one-way bandwidth, T = (|X|-1) * V / (|X| * W_1way).
 * Several axes add their bandwidths and their hop counts.  `wrap_override`
 * NULL uses the profile's rule, else wrap_override[i] says whether axis i
 * wraps (used by --explain and tests to show the ideal ring).
 */
cost_coll_time cost_allgather_time(const cost_hw *hw, const int64_t *sizes, int naxes,
                                   const bool *wrap_override, double v);

/* AllReduce of the per-device bytes `v` over a group of P devices: the
 * cheaper of ReduceScatter + AllGather, twice the AllGather time of `v`
 * (seed 001, "AllReduce is twice as expensive"), and one AllGather of the
 * P partial sums, P v bytes, each device adding them itself, which pays the
 * hops once and wins when the message is latency-bound (a decode step's
 * activations, seed 002 appendix C).  crossover is that of an AllGather
 * of `v`. */
cost_coll_time cost_allreduce_time(const cost_hw *hw, const int64_t *sizes, int naxes,
                                   const bool *wrap_override, double v);

/*
 * AllToAll of a value of `local_bytes` per device over the axes `sizes`
 * (seed 001: T = V * max(A, B, ...) / (4 * N * W_ici) with V the bytes the N
 * devices of the group hold together, so V / N = local_bytes).  An axis
 * without wraparound counts double: cutting a line in the middle crosses one
 * link instead of the ring's two (bisection argument, docs/cost-model.md).
 * Latency: the farthest pair, |X|/2 hops on a ring and |X|-1 on a line.
 */
cost_coll_time cost_alltoall_time(const cost_hw *hw, const int64_t *sizes, int naxes,
                                  const bool *wrap_override, double local_bytes);

/*
 * One point-to-point transfer of `bytes` to a neighbouring device, one hop
 * (a CollectivePermute by one position; a pipeline's stage-to-stage
 * transfer): over ICI one link one way plus a hop's latency, T = T_min +
 * bytes / W_1way (seed 001: a hop's latency and one link's one-way
 * bandwidth), or with `dcn` the chip's share of the data-center network,
 * bytes / W_dcn (seed 000; the profiles hold no DCN latency).  The terms
 * add (the transfer starts after the hop's latency); `bound` is the larger
 * and `crossover` the size at which they are equal.  On a calibrated
 * profile (hw->measured) an ICI hop is instead the measured 2-device
 * AllGather of the block (cost_measured_coll_time with P = 2 and a
 * gathered buffer of 2 * bytes: its per-call t_launch + l_sync, the block
 * over its bandwidth, its copy): the runtime's hand-off copies the block
 * and wakes the receiver as that collective does (docs/pipeline.md, "The
 * model of a step").  The one formula of a hop: the cost of a
 * CollectivePermute (cost_op.c) and a schedule's t_p2p (pipe_work_hop) are
 * both this.
 */
cost_coll_time cost_hop_time(const cost_hw *hw, double bytes, bool dcn);

/* Most physical links one collective's group spans: every mesh axis
 * folded over up to IR_MAX_PHYS torus axes. */
#define COST_MAX_LINKS (IR_MAX_AXES * IR_MAX_PHYS)

/*
 * The sizes of the `phys` physical torus axes that a mesh axis of `size`
 * devices is folded over (`mesh X = 16 over 2`), written to out[0..phys-1]
 * in ascending order with product `size`: as even as the divisors of
 * `size` allow (16 over 2 -> 4 x 4, 64 over 3 -> 4 x 4 x 4, 8 over 2 ->
 * 2 x 4; a prime size keeps one axis of `size` and the rest 1, which then
 * takes no part).  Each sub-axis is a ring or a line by the profile's
 * wraparound rule on its own size.  phys < 1 counts as 1.  Returns phys.
 */
int cost_axis_split(int64_t size, int phys, int64_t *out);

/*
 * One collective of kind `kind` (IR_OP_ALLGATHER, IR_OP_REDUCESCATTER,
 * IR_OP_ALLREDUCE or IR_OP_ALLTOALL; any other kind costs 0) over a group
 * of `n` links: link i has sizes[i] devices and crosses the data-center
 * network when dcn[i] (dcn NULL: none does).  `v` is the V of the
 * formulas above (gathered bytes; an AllToAll's per-device bytes).
 *
 * Links on ICI are the physical axes: a mesh axis folded over several
 * counts as its sub-axes (cost_axis_split), so seed 001's multi-axis rule
 * ("the bandwidth grows with the number of axes", W_ici * n_axes; hops
 * sum|X_i| / 2; AllToAll's max|X_i|) applies to them as to separate axes.
 *
 * Links on DCN (seed 000, "scaling across pods") form a ring over the
 * pods at hw->dcn_bw per chip, as the seed times the gradients' AllReduce
 * across pods: an AllGather of V gathered bytes takes V / W_dcn (the
 * seed's T_comms = 2 * 2 * 2 D F / (M W_dcn) is the AllReduce, twice
 * that, of the 4 D F / M bytes each chip holds after its pod's
 * ReduceScatter); an AllToAll sends all but its own 1/P of its bytes out
 * of the chip, (P - 1) / P * v / W_dcn.  The profiles hold no DCN
 * latency, so the DCN term has none.  A group with links on both runs
 * hierarchically, the DCN step on the smallest message: AllGather gathers
 * across pods first (V / N_ici bytes, N_ici the devices of the ICI
 * links), then within the pod; AllReduce is the pod's ReduceScatter, the
 * pods' AllReduce of V / N_ici, the pod's AllGather.  The steps add.
 */
cost_coll_time cost_coll_links_time(const cost_hw *hw, ir_op_kind kind, const int64_t *sizes,
                                    const bool *dcn, int n, double v);

/*
 * The measured model of a calibrated profile (seed 004, MeshSlice):
 * T = t_launch + (P - 1) * (l_sync + (buffer_bytes / P) / bw) +
 * (buffer_bytes / P) / bw_local + (runs - P) * t_run (the own shard's copy
 * and the extra runs of a strided layout, when the fit has them;
 * calibrate/fit.c) for a group of `p` devices that copies `runs`
 * contiguous runs per device (p for a flat buffer; cost_coll_runs), buffer_bytes counted as nccl-tests does (AllGather's
 * per-device result, the per-device operand of ReduceScatter, AllReduce and
 * AllToAll).  A buffer below fit->small_below uses the small-message fit
 * (it stays in the caches).  t_latency is the fixed part, t_bandwidth the
 * per-byte part; crossover is the buffer size at which they are equal.  A
 * group of one device costs 0.
 */
cost_coll_time cost_measured_coll_time(const cost_coll_fit *fit, double p, double buffer_bytes,
                                       double runs);

/* Elementwise bytes/s of a calibrated profile for an op that moves `bytes`
 * per device: the measured curve interpolated linearly in log(bytes) and
 * clamped at its ends; hw->elementwise_bw without a curve. */
double cost_measured_ew_bw(const cost_hw *hw, double bytes);

/* Seconds per device (before the core-sharing factor) of the memory
 * traffic of an elementwise loop under a calibrated profile: `read` bytes
 * of operands and `written` bytes of result per device, at
 * cost_measured_ew_bw for their sum, the curve of the add `A + B` of
 * `einc calibrate`, which reads 2 bytes for each it writes.  A result
 * written with non-temporal stores (`streamed`: ir_ew_streams, as the
 * add's is from 4 MiB) costs hw->ew_write_weight w of a read byte per
 * byte, since the stores drain while the loads wait on memory; the add
 * pays 2 + w for its 3 bytes an element, so the time is (read + w
 * written) * 3 / (2 + w) / that bandwidth.  With w = 1 (profiles without
 * the figure, and results with ordinary stores) it is the bytes over the
 * bandwidth.  A streamed result's loop takes the bandwidth at max(read +
 * written, 3 written): one that reads less than the add writing its
 * result is priced from that add, since w is the scale's time over the
 * add's on the same arrays (calibrate/profile.c, write_weight). */
double cost_measured_ew_seconds(const cost_hw *hw, double read, double written, bool streamed);

/* GEMM FLOP/s of a calibrated profile for an einsum of `flops` per device
 * in dtype `t`: the measured curve, interpolated like cost_measured_ew_bw
 * (small GEMMs run from cache, faster); peak_flops without a curve. */
double cost_measured_gemm_rate(const cost_hw *hw, ir_dtype t, double flops);

/* Seconds per device (before the core-sharing factor) of a GEMM of
 * `flops` per device in dtype `t` whose result has `result_elems`
 * elements per device, under a calibrated profile: its FLOPs at
 * cost_measured_gemm_rate plus its result elements at
 * hw->gemm_result_time[t], what writing and rounding a result element
 * costs (einc calibrate measures it for bf16, whose GEMMs write f32 and
 * round it: calibrate/programs.c).  A profile without that figure prices
 * the FLOPs alone, as its curve then holds whole GEMMs' rates
 * (docs/cost-model.md, "GEMM results"). */
double cost_measured_gemm_seconds(const cost_hw *hw, ir_dtype t, double flops,
                                  double result_elems);

/*
 * How much longer einc's own loops (elementwise ops, row groups, unary
 * einsums, the copies and waits of collectives) take per device on a mesh
 * of `devices` than during the calibration of `hw` (cal_devices busy on
 * cal_cores cores).  Each device runs its loops on its own thread, so it
 * gets cores / max(devices, cores) of a core; the time scales inversely
 * with that share.  A mesh of one device gets a whole core: with the
 * usual calibration (4 devices on 2 cores) its loops are priced at half
 * the calibrated time.  1 for a profile without those figures.
 * (docs/cost-model.md, "Devices sharing cores".)
 */
double cost_measured_contention(const cost_hw *hw, double devices);

/*
 * The same factor for the BLAS calls of a binary einsum, which follow the
 * backends' thread policy: with two or more devices (threads or MPI ranks)
 * each device's OpenBLAS runs on one thread, as its loops do (the factor
 * is cost_measured_contention's); a lone device's OpenBLAS runs on its own
 * threads over every core, so it gets cal_cores cores where the
 * calibration gave each device cal_cores / max(cal_devices, cal_cores):
 * 4 devices calibrated on 2 cores price a 1-device GEMM at a quarter of
 * the calibrated time.  Parallel efficiency is taken as perfect (measured
 * 3.6x-4.2x on 2 cores against the 4x priced).  On a profile calibrated
 * on MPI (hw->cal_mpi) a lone rank is bound to one core, as mpirun
 * --bind-to core places the calibration's ranks and bench/cost_accuracy.py
 * its runs, and OpenBLAS starts no more threads than its CPUs: the factor
 * is cost_measured_contention's.  1 without the figures.
 */
double cost_measured_blas_contention(const cost_hw *hw, double devices);

/*
 * Whether communication can overlap compute on `devices` devices of `hw`:
 * always on a profile of the seeds (a TPU's or GPU's links move data while
 * its cores compute); on a calibrated host only when its cores number at
 * least two per device (one for the device's compute, one for its
 * communication thread), since there a collective is copies and sums on
 * the same cores as the GEMMs.  False for a calibrated profile that does
 * not record its cores.  Used by the MeshSlice loop's cost.
 */
bool cost_measured_overlaps(const cost_hw *hw, double devices);

/*
 * Collective matmul (seed 001, "sharded matmuls", case 2: the collective
 * "can overlap the matmul itself ... the algorithm is called collective
 * matmul, first described in Wang et al.", ASPLOS'23 "Overlap communication
 * with dependent computation via decomposition"): an AllGather of one
 * operand of a matmul over a group of G devices is G - 1 ring SendRecv
 * steps of c = comm_s / (G - 1) each, and the matmul G chunks of
 * m = matmul_s / G; chunk k runs on the block already here while block
 * k + 1 travels, so the pair takes m + (G - 1) max(c, m).  A ReduceScatter
 * of a matmul's result is the same pipeline reversed (a chunk's partial
 * sums travel while the next chunk is computed).  The communication the
 * pair leaves exposed beyond the matmul is therefore
 *   max(0, comm_s - matmul_s (G - 1) / G)
 * seconds: none when the ring is faster than the matmul, else the
 * collective plus one chunk of the matmul.  Returns comm_s unchanged when
 * hw->collective_matmul is false (the runtime does not decompose its
 * collectives, so on `host` nothing hides) or G < 2.  All times in
 * seconds, per device.
 */
double cost_collective_matmul_exposed(const cost_hw *hw, double comm_s, double matmul_s, int64_t group);

/* ---- the estimate of one IR op (cost_op.c) ---- */

/* Peak FLOP/s of `hw` for dtype `t` (f32 for an unknown dtype); for IR_I8
 * the int8 rate (peak_int8), or f32's where the profile gives none. */
double cost_peak_flops(const cost_hw *hw, ir_dtype t);

/* The collective time of resharding op `op` (AllGather, ReduceScatter,
 * AllReduce, AllToAll) with its message size: `*v` is the V of the formula
 * used (gathered bytes for AllGather/ReduceScatter/AllReduce, per-device
 * bytes for AllToAll; seed 001).  On a calibrated profile, the fit of op's
 * kind (cost_measured_coll_time) times the core contention.  Returns false
 * for Slice and compute ops. */
bool cost_op_coll_time(const ir_module *m, const cost_hw *hw, const ir_op *op,
                       cost_coll_time *out, double *v);

/*
 * Contiguous runs one device copies (or sums) in resharding op `op` over a
 * group of `p`, on the runtimes' row-major layouts: one per peer block and
 * row above the cut dim, p x prod(local dims before it).  The cut dim is
 * the gathered dim of an AllGather (operand), the scattered dim of a
 * ReduceScatter (result), and the deeper of the two dims of an AllToAll;
 * for a collective whose axes work along different dims, the deepest of
 * them.  An AllReduce's slices are flat (p).  A collective over the
 * leading dim gives p.  Used with cost_measured_coll_time.
 */
double cost_coll_runs(const ir_module *m, const ir_op *op, double p);

/*
 * The per-device estimate of one op of `m` on `hw` (docs/cost-model.md,
 * "Per-op formulas"): FLOPs this device executes, HBM bytes, bytes it
 * sends, and seconds of compute, memory, communication and in all, with
 * the bound.  Einsum and Elementwise: roofline max(FLOPs / C, bytes /
 * W_hbm) (seed 001, seed 002); collectives: seed 001's formulas or the
 * calibrated fits; Slice: 2 x result bytes / W_hbm; MeshSlice: the loop
 * of cost_meshslice_op with op->u.ms.k slices.  Never fails: an op kind it
 * does not know gets flops 0 and the memory time of its operands and
 * result.  Reads op, writes only *c.
 */
void cost_op_estimate(const ir_module *m, const cost_hw *hw, const ir_op *op, ir_cost *c);

/* cost_op_estimate, where the values flagged in `onchip` (indexed by value
 * id, m->nvalues entries; NULL: none) stay in on-chip memory: an op reads
 * or writes them without HBM traffic (cost_onchip_values). */
void cost_op_estimate_onchip(const ir_module *m, const cost_hw *hw, const ir_op *op,
                             const bool *onchip, ir_cost *c);

/*
 * Prices the row groups of `m` as codegen runs them (cost_rowgroup.c):
 * the groups ir_row_groups picks over the fusion of ir_fuse_elementwise,
 * the rule codegen applies.  `ops` are m's `nops` ops in program order and
 * costs[i] op i's estimate (cost_op_estimate_onchip, with `onchip` or
 * NULL); for each group, costs[first member] becomes the group's: bytes =
 * one read of each value the group (members and producers fused into
 * them) reads but does not compute, plus one write of each value it
 * computes that an output is or an op outside it reads; t_compute = the
 * sum of theirs; time = max(t_compute, bytes / W_hbm), or on a calibrated
 * profile bytes at the measured elementwise bandwidth plus t_compute.  The
 * other members and their fused producers get a valid zero estimate.
 * Every other loop that computes more than its own op (an elementwise op
 * with the producers fused into it, ir_fuse_elementwise) or an unrolled
 * einsum (ir_einsum_unrolled_terms) is priced the same way on the op that
 * emits it (the einsum, or the elementwise op it is fused into), with an
 * unrolled einsum's arithmetic at the elementwise rate (free on a
 * calibrated profile) rather than a GEMM's.  Linear in the ops, their
 * operands and their results' uses.
 * Returns 0, or -1 (out of memory or malformed IR: costs unchanged).
 */
int cost_row_groups(const ir_module *m, const cost_hw *hw, ir_op *const *ops, int nops,
                    const bool *onchip, ir_cost *costs);

/*
 * Which values of `m` a chip keeps on chip instead of in HBM
 * (cost_fusion.c): the scores of a softmax attention, which a Flash
 * Attention kernel never writes to HBM (seed 002, "What about
 * attention?": "we never need to write the [B, S, T] attention matrix back
 * to HBM").  They are the result of an Einsum and the Elementwise ops over
 * the same dims computed from it (mask, exp, normalisation), when a max
 * reduction reads one of them (the softmax), minus outputs and values that
 * any op other than an Einsum or Elementwise reads.  Returns a new array
 * of m->nvalues flags indexed by value id, which the caller frees, or NULL
 * when there are none, when out of memory, and on a calibrated profile
 * (hw->measured: einc's own runtime writes every value to memory).
 */
bool *cost_onchip_values(const ir_module *m, const cost_hw *hw);


/* The dtype whose peak FLOP/s prices einsum `op`: IR_I8 when every operand
 * is a cast of an i8 value fused into the read (int8 x int8 with wide
 * accumulation, as the MXU runs it; cost_peak_flops then gives the
 * profile's peak_flops.int8, or f32's where it has none), else its result's. */
ir_dtype cost_einsum_dtype(const ir_module *m, const ir_op *op);

/*
 * Model FLOPs of `op`, GLOBAL: the FLOPs of the op in the unsharded
 * program, each counted once however the plan shards it (seed 003: a
 * forward matmul is 2 * params * tokens, "2 * B * D * F" for [B, D] x
 * [D, F]).  Einsum and MeshSlice: n_operands x prod(global size of every
 * label); an embedding lookup (gather einsum) 0, as it executes no
 * arithmetic; every other op 0 (elementwise work is not model FLOPs, see
 * cost_op_elementwise_flops; collectives compute nothing).  Divide by
 * the mesh's devices for the per-device share MFU uses.
 */
double cost_op_model_flops(const ir_module *m, const ir_op *op);

/* Elementwise FLOPs of `op`, GLOBAL: (arithmetic nodes of its expression)
 * x global result elements, each element once however many devices hold
 * a copy; 0 for any other op.  Reported beside the model FLOPs, not in
 * them. */
double cost_op_elementwise_flops(const ir_module *m, const ir_op *op);
/* Seconds the function calls of elementwise `op` take on arrays in cache,
 * per device, on a calibrated profile: its elements times the sum of
 * hw->fn_time_cache over its calls, times the core-sharing factor
 * (cost_measured_contention).  0 for any other op or profile.  A row
 * group's members pay it on a row in cache (cost_rowgroup.c). */
double cost_op_ew_arith_in_cache(const ir_module *m, const cost_hw *hw, const ir_op *op);

/* How many times its operand's bytes a unary einsum `op` (a reduction)
 * reads from memory on a CPU, as codegen's loop nest runs it (result
 * positions outermost, then the contracted ones; codegen/reduce.c): 1 when
 * the innermost loop walks the contiguous dim or the lines the loops
 * inside that dim's loop touch fit in a core's 1 MiB second-level cache,
 * else a cache line per element (64 / element bytes).  1 for any other
 * op.  Shapes per device.  (cost_reduce.c.) */
double cost_reduce_read_factor(const ir_module *m, const ir_op *op);

/* Per-device size of label `dim` in einsum `op` (its smallest over the
 * operands and result), or -1 if `dim` is not one of op's labels. */
int64_t cost_einsum_label_size(const ir_module *m, const ir_op *op, int dim);

/*
 * HBM roofline threshold of einsum `op` in label `dim` (seed 002, "B_crit =
 * C / W_hbm", 240 on v5e for a bf16 matmul with B << D, F): the per-device
 * size of `dim` above which FLOPs / C exceeds HBM bytes / W_hbm, from
 * FLOPs = a n and bytes = b0 + b1 n (b1: the values that carry `dim`).
 * An operand that is a fused cast (ir_folded_cast_source) counts at its
 * source's width and `C` is cost_einsum_dtype's rate, as cost_op_estimate
 * prices them: int8 weights in a bf16 matmul halve the threshold (seed
 * 002: "int8 params, bf16 FLOPs: 120"), int8 x int8 restores it.
 * Returns the size, 0 if op is compute-bound at any size of `dim`, or -1 if
 * it is memory-bound at any size or `dim` is not a label of `op`.
 */
double cost_hbm_critical_dim_size(const ir_module *m, const cost_hw *hw, const ir_op *op, int dim);

/* ---- a lower bound on a step (cost_bound.c) ---- */

/*
 * A lower bound on the time of one step of module m on profile hw, that
 * no sharding plan on m's mesh beats under the cost model (the certificate
 * of a plan; docs/cost-model.md, "Lower bound of a step").  Read from
 * GLOBAL shapes and dtypes, the mesh's device count P, ir_op_trips and
 * the declared shardings of params, inputs and state only (no plan's
 * choice), so it is the same before and after propagation.  Seconds are
 * per step, on every device at once (SPMD in lock step); bytes are per
 * device.
 */
typedef struct cost_bound {
    double flops;      /* model FLOPs of the step, GLOBAL: cost_op_model_flops of every op
                          (each einsum FLOP of the unsharded program once) times its trips */
    double compute_s;  /* seconds: flops / (P x peak FLOP/s of each einsum's result dtype);
                          on a calibrated profile its fastest measured GEMM rate, with
                          cost_measured_contention, as cost_op_estimate times einsums,
                          less the einsums a plan could unroll (priced at no arithmetic) */
    double comm_bytes; /* bytes some device must send or receive, summed over the step's
                          binary contractions: W = max(0, touched - held) words for
                          F = b m n k multiply-adds, touched = 3 (F/P)^(2/3) when square
                          (Ballard et al., SPAA 2012), held = b (mk + kn + mn)/P for
                          operands held once; times the smallest element size and trips */
    double comm_s;     /* seconds: comm_bytes / the most a device sends plus receives per
                          second, 2 x n_axes x W_ici (seed 001's AllGather rate each way;
                          calibrated: 2 x the largest fitted bw per axis, with the
                          contention) */
    double hbm_bytes;  /* bytes some device must read from HBM: the GLOBAL bytes of every
                          param, input and state a compute op reads (through reshards,
                          layer slices and one-operand elementwise ops; a gather's table
                          not counted), each once, over P: every element is read by some
                          device, so some device reads 1/P of the sum (seed 002's
                          "theoretical step time" reads params and KV cache once) */
    double memory_s;   /* seconds: hbm_bytes / W_hbm; 0 on a calibrated profile, whose op
                          times are fits that need not reach the datasheet's HBM rate */
    double total_s;    /* max(compute_s, memory_s) + comm_s: a bound on a step whose compute
                          and communication run in sequence (an op's roofline time is the
                          larger of its FLOP and HBM times, so their sums bound both) */
    double overlap_s;  /* max(compute_s, memory_s, comm_s): a bound even when communication
                          overlaps compute */
} cost_bound;

/*
 * Fills *out with the lower bound of one step of `m` on `hw` (above).
 * The communication part credits each device with the declared share of
 * the params, inputs and state a contraction reads (the program's
 * shardings, which no plan chooses) and holds for plans that keep every
 * other operand and result of a contraction in one copy spread over the
 * devices (Ballard et al.'s setting; Irony, Toledo, Tiskin, JPDC 2004 for
 * the Loomis-Whitney step): a plan that computes an intermediate
 * redundantly to contract it in place can move less.
 * Unary einsums, gathers, elementwise ops and collectives add no
 * communication; latency is left out.  Returns 0, or -1
 * when m, hw or out is NULL or the mesh has no devices (*out unchanged).
 */
int cost_lower_bound(const ir_module *m, const struct cost_hw *hw, cost_bound *out);

/* ---- the MeshSlice loop of one IR op (meshslice_cost.c) ---- */

/*
 * Fills `c` (per-device figures) for MeshSlice `op` run with `k` slices
 * (op->u.ms.k is not read): the loop of seed 004 3.2.2,
 *     T = prologue + (K-1) * max(AllGather row, AllGather/ReduceScatter
 *         column, partial einsum) + epilogue,
 * as the three-stage pipeline of meshslice_model.c: per iteration `pre` =
 * the slower of the partial AllGathers (both directions run at once), `g`
 * = the partial einsum (FLOPs / K on the roofline of `hw`, its split dim
 * padded up to the model's GEMM tile, plus the model's fixed cost per local
 * GEMM), `post` = the partial ReduceScatter; T = pre + g + post + (K-1) *
 * max(pre, g, post).  Each partial collective is cost_ms_collective_time
 * (Eq. 5) on the sub-shard, with T_launch and L_sync from
 * cost_ms_params_from_hw.  t_compute is K * g, t_comm the collectives'
 * sum, comm_bytes the bytes this device sends; time is T (seconds).  On a
 * calibrated profile (hw->measured) the stages use the measured figures,
 * as cost_op_estimate does for Einsum and collectives; where the devices
 * share cores (cost_measured_overlaps false) the loop is the sum of its
 * parts.
 */
void cost_meshslice_op(const ir_module *m, const cost_hw *hw, const ir_op *op, int k, ir_cost *c);

/* ---- the whole program (cost_memory.c) ---- */

/* Per-device memory of a program at its peak (bytes). */
typedef struct cost_memory {
    double resident;     /* bytes: params and inputs, held for the whole step */
    double params;       /* bytes: the params' part of `resident` */
    double state;        /* bytes: the optimizer state's part of `resident` (states an
                            update overwrites) */
    double cache;        /* bytes: the part of `resident` in states the program writes in
                            place (`state` declarations: a KV cache); the rest is inputs */
    double peak;         /* bytes: resident + the live intermediates at the peak */
    double gradients;    /* bytes: the live intermediates at the peak that the backward
                            pass or the update made (cotangents, gradients, new values);
                            the rest of peak - resident are activations */
    const ir_op *at;     /* the op at which the peak is reached (NULL: no op adds to resident) */
    /* The training step's classes (seed 000's accounting), bytes per device: */
    double master;       /* the f32 master copies of params (`master=f32`; ir_value.master),
                            part of `state` */
    double moments;      /* the rest of `state`: moments (AdamW's m and v, SGD's momentum)
                            and the step count */
    double grads;        /* one gradient per optimized param, in its dtype and sharding
                            (what the update reads; the live part at the peak is in
                            `gradients`) */
    double kept;         /* activations kept for the backward pass: forward values an op of
                            the backward pass reads (a repeated block's stacked layers whole) */
    double param_count;  /* elements per device of all params: the divisor of bytes per param */
} cost_memory;

/*
 * Per-device peak memory of `m` in program order: every param and input
 * (resident for the whole step), plus each value an op defines, live from
 * its defining op to its last use, inclusive (an op needs its operands and
 * its result at once); a program output stays live to the end.  Sizes are
 * ir_local_bytes (the device's shard).  Not counted: the runtime's
 * temporary buffers inside collectives and MeshSlice loops, and
 * fragmentation.  The seeds count memory per device the same way: seed
 * 000 rules out pure data parallelism when the params and optimizer state
 * it replicates on every chip exceed the chip's HBM, and seed 002 (serving
 * on a TPU v5e 4x4, question 2) fits the KV cache into "16GB of HBM per
 * TPU, params included".
 */
cost_memory cost_memory_peak(const ir_module *m);

/* Whether value v is an activation kept for the backward pass: a forward
 * value (not a view of a param or state: LayerSlice, UpdateSlice) that an
 * op of the backward pass reads (seed 000, question 2, counts them apart
 * from params and state).  cost_memory.kept sums their bytes; the
 * planner's memory row (passes/propagate_ilp_mem.c) counts the same set. */
bool cost_kept_for_backward(const ir_value *v);

#endif
