/*
 * cost.h - the cost model: hardware profiles, collective and roofline
 * formulas, the cost pass's report printers (--dump-cost, --explain).
 *
 * Every time is in seconds, every size in bytes, every rate in FLOP/s or
 * bytes/s, and every quantity is PER DEVICE unless a name says "global".
 * The formulas come from the seeds (/work/shared/seeds): seed 001 (sharded
 * matmuls, collective costs), seed 000 (DP/FSDP critical batch) and
 * DESIGN.md; docs/cost-model.md lists each one with its source and a worked
 * example.
 *
 * A profile (struct cost_hw) is a plain value: loading fills it from a JSON
 * file in hw/ and it owns no memory, so callers keep it on the stack or in
 * their context struct and never free it.
 */
#ifndef EINC_COST_H
#define EINC_COST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ir.h"

/* Profile used when pass_ctx.hw is NULL (the seeds' running example chip). */
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
} cost_coll_fit;

/* Most points of a calibrated elementwise-bandwidth curve. */
#define COST_EW_POINTS 8

/* A hardware profile: one chip's figures, as read from hw/NAME.json. */
typedef struct cost_hw {
    char name[COST_HW_NAME_MAX];    /* "name" field, e.g. "tpu-v5e" */
    char path[COST_HW_PATH_MAX];    /* file it was read from, for messages */
    bool calibrated;                /* false when "status" is "uncalibrated" */
    double peak_flops[3];           /* FLOP/s per ir_dtype (IR_F32, IR_F64, IR_BF16) */
    double hbm_bytes;               /* device memory capacity, bytes */
    double hbm_bw;                  /* device memory bandwidth, bytes/s */
    double ici_oneway_bw;           /* one link, one direction, bytes/s */
    double ici_bidi_bw;             /* one mesh axis with wraparound, both directions, bytes/s (W_ici) */
    double ici_latency;             /* T_min: seconds per hop */
    cost_wrap_rule wrap;            /* which axis sizes have wraparound */
    int64_t wrap_size;              /* the size in COST_WRAP_SIZE_* rules, else 0 */
    double dcn_bw;                  /* data-center network per chip, bytes/s (reported; axes are assumed on ICI) */
    /* The "calibration" section written by `einc calibrate`; when present
     * the cost pass times collectives with these fits (cost_measured_coll_time)
     * and compute with the measured peak_flops / hbm_bw above. */
    bool measured;                        /* true if the profile has a "calibration" section */
    cost_coll_fit fit[COST_FIT_COUNT];    /* per collective kind, when measured */
    double elementwise_bw;                /* measured elementwise bytes/s per device, when measured */
    double fn_time[IR_FN_COUNT];          /* measured seconds per element of each unary function
                                             beyond the memory time, when measured (else 0) */
    int ew_npoints;                       /* points of the elementwise curve (0: none) */
    double ew_bytes[COST_EW_POINTS];      /* bytes moved per device, ascending */
    double ew_bw[COST_EW_POINTS];         /* bytes/s measured at that size */
    int gemm_npoints[3];                  /* points of the GEMM curve per ir_dtype (0: none) */
    double gemm_flop[3][COST_EW_POINTS];  /* FLOPs of a GEMM per device, ascending */
    double gemm_rate[3][COST_EW_POINTS];  /* FLOP/s measured at that size */
    double cal_devices;                   /* devices busy during calibration (0: unknown) */
    double cal_cores;                     /* cores of the calibrated machine (0: unknown) */
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
 * ignored.  On error returns -1, writes a one-line message naming the file
 * and the field into `err` (size `errsize`) and leaves `hw` unspecified;
 * returns 0 on success.
 */
int cost_hw_load(const char *name_or_path, cost_hw *hw, char *err, size_t errsize);

/* Same, from JSON text already in memory; `origin` names it in messages. */
int cost_hw_parse(const char *json, const char *origin, cost_hw *hw, char *err, size_t errsize);

/* Whether a mesh axis of `size` devices is a ring (has wraparound) under hw's rule. */
bool cost_hw_axis_wraps(const cost_hw *hw, int64_t size);

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

/* AllReduce = ReduceScatter + AllGather: twice the AllGather time of the
 * per-device bytes `v` (seed 001, "AllReduce is twice as expensive"). */
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
 * The measured model of a calibrated profile (seed 004, MeshSlice):
 * T = t_launch + (P - 1) * (l_sync + (buffer_bytes / P) / bw) +
 * (buffer_bytes / P) / bw_local + (runs - P) * t_run (the own shard's copy
 * and the extra runs of a strided layout, when the fit has them;
 * driver/calibrate_fit.c) for a group of `p` devices that copies `runs`
 * contiguous runs per device (p for a flat buffer; cost_coll_runs), buffer_bytes counted as nccl-tests does (AllGather's
 * per-device result, the per-device operand of ReduceScatter, AllReduce and
 * AllToAll).  A buffer below fit->small_below uses the small-message fit
 * (it stays in the caches).  t_latency is the fixed part, t_bandwidth the
 * per-byte part; crossover is the buffer size at which they are equal.  A
 * group of one device costs 0.
 */
cost_coll_time cost_measured_coll_time(const cost_coll_fit *fit, double p, double buffer_bytes,
                                       double runs);

/*
 * Contiguous runs one device copies (or sums) in resharding op `op` over a
 * group of `p`, on the runtimes' row-major layouts: one per peer block and
 * row above the cut dim, p x prod(local dims before it).  The cut dim is
 * the gathered dim of an AllGather (operand), the scattered dim of a
 * ReduceScatter (result), and the deeper of the two dims of an AllToAll;
 * an AllReduce's slices are flat (p).  A collective over the leading dim
 * gives p.  Used with cost_measured_coll_time.
 */
double cost_coll_runs(const ir_module *m, const ir_op *op, double p);

/* Elementwise bytes/s of a calibrated profile for an op that moves `bytes`
 * per device: the measured curve interpolated linearly in log(bytes) and
 * clamped at its ends; hw->elementwise_bw without a curve. */
double cost_measured_ew_bw(const cost_hw *hw, double bytes);

/* GEMM FLOP/s of a calibrated profile for an einsum of `flops` per device
 * in dtype `t`: the measured curve, interpolated like cost_measured_ew_bw
 * (small GEMMs run from cache, faster); peak_flops without a curve. */
double cost_measured_gemm_rate(const cost_hw *hw, ir_dtype t, double flops);

/*
 * How much longer an op takes per device on a mesh of `devices` than during
 * the calibration of `hw` (cal_devices busy on cal_cores cores): devices
 * beyond the cores share them, so a device's share of a core is
 * cores / max(devices, cores); the time scales inversely with that share.
 * 1 for a profile without those figures or a mesh of one device (which
 * runs BLAS on every core; not modelled).
 */
double cost_measured_contention(const cost_hw *hw, double devices);

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

/* ---- the pass (cost.c) ---- */

/* The collective time of resharding op `op` (AllGather, ReduceScatter,
 * AllReduce, AllToAll) with its message size: `*v` is the V of the formula
 * used (gathered bytes for AllGather/ReduceScatter/AllReduce, per-device
 * bytes for AllToAll).  Returns false for Slice and compute ops. */
bool cost_op_coll_time(const ir_module *m, const cost_hw *hw, const ir_op *op,
                       cost_coll_time *out, double *v);

/* Peak FLOP/s of `hw` for dtype `t`. */
double cost_peak_flops(const cost_hw *hw, ir_dtype t);

/* Fills op->cost for one op of `m` (see pass_cost in pass.h and
 * docs/cost-model.md for the formulas).  Never fails: an op kind it does not
 * know gets flops 0 and the memory time of its operands and result. */
void cost_annotate_op(const ir_module *m, const cost_hw *hw, ir_op *op);

/* Fills m->totals from the ops' costs (annotate every op first): the
 * critical-path schedule of docs/cost-model.md, "Totals". */
void cost_compute_totals(ir_module *m, const cost_hw *hw);

/* Whether value `v` is a param or computed only by resharding params
 * (Slice/AllGather/... chains of params): the collectives that make such
 * values can run ahead, during earlier compute (seed 000, FSDP). */
bool cost_value_is_param_derived(const ir_value *v);

/* ---- reports (cost_report.c) ---- */

/* --dump-cost: one row per op (value name, op, FLOPs, HBM bytes, comm
 * bytes, compute/memory/comm/op time in microseconds, bound), then the
 * totals.  Ops without a valid cost print "-".  `hw` (may be NULL) names
 * the profile in the header line. */
void cost_print_table(FILE *out, const ir_module *m, const struct cost_hw *hw);

/* --explain: for each contraction the per-device size of each of its dims
 * (the batch and other free dims first, then the contracting ones) above
 * which it is compute-bound against the collectives it needs, and for
 * each collective whether it is latency- or bandwidth-bound and the message
 * size where it switches.  Needs the cost pass to have run and the profile
 * it ran with (`hw` NULL prints a one-line notice). */
void cost_explain(FILE *out, const ir_module *m, const struct cost_hw *hw);

/*
 * Critical per-device size of dim `dim` (any label of einsum `op`, free or
 * contracting): the size above which op's compute time exceeds the time of
 * the collectives it needs (those inserted for it, and the resharding
 * chains that produce its operands).  FLOPs grow linearly with every label
 * while a collective whose value lacks `dim` does not, so the threshold is
 * n * T_comm / T_compute.  Seed 000: for DP/FSDP and the batch dim this is
 * B/X > C / W_ici (2550 on TPU v5p); for Megatron TP and the contracting F
 * of the second matmul it is F/Y > 2550-ish ("Y < F / 2550").  Returns the
 * size (elements), 0 if op needs no collective, or -1 if a collective's
 * bytes grow with `dim` too (then the ratio does not depend on it) or
 * op/dim do not qualify.  The collectives counted are written into `colls`
 * (up to `max`, may be NULL) and their number into `*ncolls` (may be NULL).
 */
double cost_critical_dim_size(const ir_module *m, const ir_op *op, int dim,
                              const ir_op **colls, int max, int *ncolls);

/*
 * HBM roofline threshold of einsum `op` in label `dim` (seed 002, "B_crit =
 * C / W_hbm", 240 on v5e for a bf16 matmul with B << D, F): the per-device
 * size of `dim` above which FLOPs / C exceeds HBM bytes / W_hbm, from
 * FLOPs = a n and bytes = b0 + b1 n (b1: the values that carry `dim`).
 * Returns the size, 0 if op is compute-bound at any size of `dim`, or -1 if
 * it is memory-bound at any size or `dim` is not a label of `op`.
 */
double cost_hbm_critical_dim_size(const ir_module *m, const cost_hw *hw, const ir_op *op, int dim);

/* Per-device size of label `dim` in einsum `op` (its smallest over the
 * operands and result), or -1 if `dim` is not one of op's labels. */
int64_t cost_einsum_label_size(const ir_module *m, const ir_op *op, int dim);

#endif
