/*
 * meshslice_model.h - the analytical model of 2D distributed GEMMs and the
 * MeshSlice autotuner (seed 004), prefix cost_ms_: the cost model's second
 * public header beside costmodel.h, for the MeshSlice pass, the autotuner
 * command and meshslice_cost.c, which prices one IR op with it.
 */
#ifndef EINC_MESHSLICE_MODEL_H
#define EINC_MESHSLICE_MODEL_H

#include "costmodel.h"

/* ---- the 2D GEMM model and the MeshSlice autotuner (meshslice_model.c) ---- */

/*
 * The analytical time model of 2D distributed GEMMs and the MeshSlice
 * autotuner (seed 004: MeshSlice, ISCA 2025), prefix cost_ms_.
 *
 * A 2D GEMM C[M,N] = A[M,K] * B[K,N] runs on a mesh of `rows` x `cols`
 * chips.  All three matrices are 2D-sharded: a matrix's rows over the mesh
 * rows, its columns over the mesh columns (seed 004, 3.2.1).  One matrix
 * stays on its chips (the dataflow); the other two move, one along the mesh
 * rows (between the chips of a row, "horizontal") and one along the mesh
 * columns ("vertical"), each by an AllGather (before the local GEMM) or a
 * ReduceScatter (after it).  Five algorithms move them differently (Cannon,
 * SUMMA, Collective, Wang et al., MeshSlice); cost_ms_time() estimates each.
 *
 * Shapes: cost_ms_gemm holds GLOBAL sizes; every time is in seconds for one
 * GEMM on every chip at once (per-device time, all chips in lock step);
 * bytes are bytes, rates FLOP/s and bytes/s.  Nothing here allocates.
 * docs/meshslice.md derives every formula and lists the assumed figures.
 */

/* The 2D GEMM dataflows of seed 004 Fig. 1 / Table 1, named by the matrix
 * that stays on its chips. */
typedef enum cost_ms_dataflow {
    COST_MS_DF_C_STN, /* output-stationary (OS): AllGather A along rows, B along columns */
    COST_MS_DF_A_STN, /* left-stationary (LS): AllGather B along columns, ReduceScatter C along rows */
    COST_MS_DF_B_STN, /* right-stationary (RS): AllGather A along rows, ReduceScatter C along columns */
    COST_MS_DF_COUNT
} cost_ms_dataflow;

/* The 2D GEMM algorithms compared in seed 004 (2.3, Fig. 4). */
typedef enum cost_ms_algo {
    COST_MS_ALGO_CANNON,     /* square meshes: skew, then q shift-and-multiply steps */
    COST_MS_ALGO_SUMMA,      /* lcm(rows, cols) iterations of pipelined broadcast/reduce */
    COST_MS_ALGO_COLLECTIVE, /* one AllGather/ReduceScatter per direction, no overlap */
    COST_MS_ALGO_WANG,       /* one direction as SendRecv steps overlapped with the GEMM */
    COST_MS_ALGO_MESHSLICE,  /* K partial AllGather/ReduceScatter overlapped both ways */
    COST_MS_ALGO_COUNT
} cost_ms_algo;

/* The figures the model needs; cost_ms_params_from_hw fills them from a profile. */
typedef struct cost_ms_params {
    double t_launch;      /* seconds: fixed cost of launching one AllGather (T_launch of Eq. 5) */
    double l_sync;        /* seconds: synchronization latency of one ring step (AllGather, ReduceScatter) */
    double bw_ring;       /* bytes/s a mesh axis with wraparound moves in a ring AllGather (both directions) */
    double bw_line;       /* bytes/s of an axis without wraparound (one direction per link) */
    double bw_link;       /* bytes/s of one link in one direction (Cannon's shifts) */
    double t_launch_rds;  /* seconds: T_launch of one ReduceScatter */
    double bw_ring_rds;   /* bytes/s: bw_ring for a ReduceScatter */
    double bw_line_rds;   /* bytes/s: bw_line for a ReduceScatter */
    double t_launch_sr;   /* seconds: T_launch of one SendRecv step (Wang, Cannon) */
    double l_sync_sr;     /* seconds: synchronization of one SendRecv step */
    double bw_sr;         /* bytes/s one Wang SendRecv step moves, both directions of the
                           * ring together; 0: the axis's AllGather bandwidth */
    cost_wrap_rule wrap;  /* which axis sizes have wraparound (from the profile) */
    int64_t wrap_size;    /* the size in the COST_WRAP_SIZE_* rules */
    double peak_flops;    /* FLOP/s of one chip for the GEMM's dtype */
    double gemm_eff;      /* fraction of peak a large, tile-aligned GEMM reaches (0..1] */
    double t_gemm_launch; /* seconds: fixed cost of one local GEMM call */
    double hbm_bw;        /* bytes/s of the chip's HBM; a local GEMM takes at least its
                           * bytes / hbm_bw (0: no memory term) */
    bool no_overlap;      /* true: every algorithm runs its stages one after another
                           * (seed 004 Table 3: TPU v4 cannot overlap AG/RdS today) */
    bool collective_overlap; /* true: Collective hides one AllGather behind its GEMM, as the
                              * authors' cost model prices XLA's 2D GEMM on a real TPU
                              * (CostModel.py GSPMD_OS/LS/RS; docs/meshslice.md) */
    int64_t mxu_tile;     /* GEMM dims are padded up to multiples of this (TPU: 128) */
    int64_t block;        /* MeshSlice's slicing block B (TPU: 8, seed 004 3.1.2) */
    double elem_bytes;    /* bytes per matrix element */
} cost_ms_params;

/* A 2D GEMM C[m,n] = A[m,k] * B[k,n], global sizes. */
typedef struct cost_ms_gemm {
    int64_t m; /* rows of A and C */
    int64_t n; /* columns of B and C */
    int64_t k; /* the contracting dim: columns of A, rows of B */
} cost_ms_gemm;

/* A 2D mesh shape. */
typedef struct cost_ms_mesh {
    int64_t rows; /* chips along a column (the first mesh axis, X) */
    int64_t cols; /* chips along a row (the second mesh axis, Y) */
} cost_ms_mesh;

/* One estimate (per-device seconds). */
typedef struct cost_ms_estimate {
    bool valid;          /* false: the configuration cannot run (see why) */
    const char *why;     /* static text saying why not, when !valid */
    double time;         /* seconds, the whole 2D GEMM */
    double t_compute;    /* seconds of local GEMM work (sum of the partial GEMMs) */
    double t_comm;       /* seconds of communication if nothing overlapped */
    double t_exposed;    /* time - t_compute: communication not hidden */
    double t_serial;     /* seconds: the same configuration (K, panels, steps) with
                          * nothing overlapped, every stage after the previous one */
    double t_slicing;    /* seconds of MeshSlice's slicing copies over its K iterations
                          * (cost_ms_slice_copy_time; part of time, hidden or not); 0
                          * for the other algorithms and K = 1 */
    double utilization;  /* useful FLOPs / (time * chips * peak), 0..1 */
    int64_t slices;      /* iterations: MeshSlice's K, SUMMA's panels, Cannon's q, Wang's steps; 1 for Collective */
} cost_ms_estimate;

/* "C-stn (OS)", ... and "Cannon", "SUMMA", "Collective", "Wang", "MeshSlice". */
const char *cost_ms_dataflow_name(cost_ms_dataflow df);
const char *cost_ms_algo_name(cost_ms_algo a);
/* Short lowercase names for command lines and JSON: "os", "ls", "rs";
 * "cannon", "summa", "collective", "wang", "meshslice".  The lookups return
 * -1 for an unknown name. */
const char *cost_ms_dataflow_key(cost_ms_dataflow df);
const char *cost_ms_algo_key(cost_ms_algo a);
int cost_ms_dataflow_lookup(const char *key);
int cost_ms_algo_lookup(const char *key);

/*
 * Fills `p` from profile `hw` for GEMMs in dtype `t`: peak from
 * hw->peak_flops, bandwidths from the ICI figures, hbm_bw from the HBM
 * bandwidth, L_sync = the per-hop latency T_min, no_overlap false, and
 * the figures the profile does not hold (T_launch, GEMM efficiency, tile
 * and block sizes) from the defaults documented in docs/meshslice.md
 * (TPU v4 values of seed 004 where it gives them).  ReduceScatter and
 * SendRecv get the same launch, synchronization and bandwidth as an
 * AllGather (bw_sr = 0, Cannon's links bw_link).
 */
void cost_ms_params_from_hw(const cost_hw *hw, ir_dtype t, cost_ms_params *p);

/*
 * Replaces the communication and GEMM-rate figures of `p` with the ones
 * seed 004's authors fitted on TPU v4 and published with their autotuner
 * (github.com/hwnam831/meshslice, Autotuner.py `latencies`, `bws`,
 * `base_overheads` and the 242 * 1024^4 FLOP/s of its DeviceMesh; seed
 * 004 A4 says how they were fitted: linear regression of Eq. 5 on 2- and
 * 4-chip TPU v4 collectives of 8 KB to 512 MB).  Every other field
 * (peak, HBM, tile, block, dtype) is kept.  The values and the choice of
 * the within-host ring's figures for both mesh axes are listed in
 * docs/meshslice.md ("Fitted figures").
 */
void cost_ms_params_fit_seed004(cost_ms_params *p);

/* Bandwidth (bytes/s) of a ring AllGather along a mesh axis of `size`
 * chips: bw_ring with wraparound, bw_line without (seed 001). */
double cost_ms_axis_bw(const cost_ms_params *p, int64_t size);

/*
 * Time of one AllGather over a ring of `ring` chips whose
 * per-chip piece is `shard_bytes` (seed 004, 3.2.2, Eq. 5):
 *     T_launch + (P - 1) * (L_sync + shard_bytes / BW).
 * Returns 0 for ring <= 1 (no communication).
 */
double cost_ms_collective_time(const cost_ms_params *p, int64_t ring, double shard_bytes);

/* The same for one ReduceScatter: t_launch_rds and the *_rds bandwidths. */
double cost_ms_reduce_scatter_time(const cost_ms_params *p, int64_t ring, double shard_bytes);

/* Time of one local GEMM of (m x k) * (k x n) per-device elements:
 * t_gemm_launch + 2 m n k (dims padded up to mxu_tile) / (peak * gemm_eff). */
double cost_ms_gemm_time(const cost_ms_params *p, int64_t m, int64_t n, int64_t k);

/*
 * Time of one partial GEMM of a 2D GEMM algorithm, (m x k) * (k x n)
 * per-device elements, on the roofline of the chip: t_gemm_launch + the
 * larger of the compute time (cost_ms_gemm_time without its launch) and the
 * HBM time (m k + k n + m n) * elem_bytes / hbm_bw, plus m n more when
 * `accumulate` (the partial product is added into an output that lives in
 * HBM between calls: C-stn's split contraction).  The stationary matrix is
 * read whole by every partial GEMM, which is what makes thin slices
 * memory-bound (TPU v4: 2.75e14 FLOP/s against 1.2e12 B/s, HARDWARE.md).
 * hbm_bw = 0 leaves the compute time alone.
 */
double cost_ms_partial_gemm_time(const cost_ms_params *p, int64_t m, int64_t n, int64_t k, bool accumulate);

/*
 * Seconds of one MeshSlice iteration's slicing copy for a moving matrix
 * whose local (per-device) shard is `shard_bytes`, cut into k sub-shards:
 * the blocked sub-shard read and written once at hbm_bw (seed 004 3.1.2;
 * meshslice_slicing.c).  0 when k <= 1 (no slicing: Collective) or
 * hbm_bw = 0.  The autotuner's model and the cost pass's MeshSlice op both
 * price the copies with it, in the gather (AllGather) or scatter
 * (ReduceScatter) stage of the move.
 */
double cost_ms_slice_copy_time(const cost_ms_params *p, double shard_bytes, int64_t k);

/* The paper's dataflow heuristic (seed 004, 3.2.1): keep the largest of A
 * (m*k), B (k*n) and C (m*n) stationary; ties prefer C, then A. */
cost_ms_dataflow cost_ms_choose_dataflow(const cost_ms_gemm *g);

/* Whether `g`'s matrices split evenly over `mesh` (every sharded dim a
 * multiple of the mesh axis that shards it) for dataflow `df`. */
bool cost_ms_mesh_valid(const cost_ms_gemm *g, cost_ms_mesh mesh, cost_ms_dataflow df);

/* The global dim MeshSlice slices for dataflow `df` (C-stn: k, A-stn: n,
 * B-stn: m; seed 004 Fig. 5) and whether slice count `slices` is valid:
 * the dim's per-device size on both mesh axes must be a multiple of
 * slices * block (blocked slicing, seed 004 Algorithm 2). */
int64_t cost_ms_sliced_dim(const cost_ms_gemm *g, cost_ms_dataflow df);
bool cost_ms_slices_valid(const cost_ms_params *p, const cost_ms_gemm *g, cost_ms_mesh mesh,
                          cost_ms_dataflow df, int64_t slices);

/*
 * Estimated time of GEMM `g` on `mesh` with dataflow `df` and algorithm
 * `algo`.  `slices` is MeshSlice's K (>= 1, must pass cost_ms_slices_valid);
 * the other algorithms ignore it (SUMMA uses lcm(rows, cols) panels, Cannon
 * the mesh side, Wang the decomposed axis).  An invalid configuration
 * (shape does not divide, Cannon on a non-square mesh, bad K) returns
 * valid = false and a reason, never a number.
 */
cost_ms_estimate cost_ms_time(const cost_ms_params *p, const cost_ms_gemm *g, cost_ms_mesh mesh,
                              cost_ms_dataflow df, cost_ms_algo algo, int64_t slices);

/* Largest K the searches try: every slice pays at least T_launch, so more
 * slices never pay off, and the bound keeps the search fast on any input
 * (einc's --meshslice=K accepts up to the same value). */
#define COST_MS_MAX_SLICES 4096

/* MeshSlice with the best valid K (exhaustive search over the valid K in
 * 1..COST_MS_MAX_SLICES; ties keep the smaller K); for other algorithms the same
 * as cost_ms_time. */
cost_ms_estimate cost_ms_best_slices(const cost_ms_params *p, const cost_ms_gemm *g,
                                     cost_ms_mesh mesh, cost_ms_dataflow df, cost_ms_algo algo);

/* ---- the autotuner over a model's layers (seed 004, 3.2.2) ---- */

/* One 2D GEMM layer of a model. */
typedef struct cost_ms_layer {
    const char *name;    /* for reports; not owned */
    cost_ms_gemm gemm;   /* global shape */
    double repeat;       /* how many times the layer runs per step (>= 1) */
    bool fixed_df;       /* true: use `df` instead of the heuristic (training's backward GEMMs) */
    cost_ms_dataflow df; /* the dataflow when fixed_df */
    int k_group;         /* nonzero: MeshSlice gives every layer of this group one K,
                          * the one with the least total time (seed 004 3.2.2 tunes one
                          * K_l per FC layer, which its forward and backward GEMMs
                          * share: the authors' FFLayerModel.emulate, Autotuner.py) */
} cost_ms_layer;

/*
 * The three GEMMs that train a layer whose forward GEMM is `fwd` with
 * dataflow `df` (seed 004, 3.2.1 and Table 1): out[0] the forward
 * C = A B, out[1] backward data A' = C' B^T, out[2] backward weight
 * B' = A^T C', each with the dataflow that keeps the same matrix (or its
 * gradient) stationary and moves every other matrix along the same mesh
 * direction as in the forward GEMM; where that needs it, a backward GEMM is
 * written transposed (X^T = Z^T Y^T), as the paper's "transposed dataflow".
 * The moved bytes of all three equal the forward's.  `out[i].df` is set and
 * fixed; names and repeat are copied from `fwd`.
 */
void cost_ms_training_gemms(const cost_ms_layer *fwd, cost_ms_dataflow df, cost_ms_layer out[3]);

/* What the autotuner picked for one layer. */
typedef struct cost_ms_layer_choice {
    cost_ms_dataflow df;  /* dataflow */
    cost_ms_estimate est; /* estimate with the chosen K in est.slices */
} cost_ms_layer_choice;

/* The result of a mesh-shape search. */
typedef struct cost_ms_tune_result {
    bool found;         /* false: no factor pair of `chips` fits every layer */
    cost_ms_mesh mesh;  /* best mesh shape */
    double time;        /* seconds: sum over layers of repeat * time */
    double utilization; /* useful FLOPs / (time * chips * peak) */
    double time_serial; /* seconds: the same choices with nothing overlapped (t_serial) */
    double time_slicing; /* seconds: sum over layers of repeat * t_slicing */
} cost_ms_tune_result;

/*
 * Times `n` layers on one mesh shape with algorithm `algo`: every layer gets
 * its dataflow (`df` when >= 0, else the layer's fixed one, else the
 * heuristic) and, for MeshSlice, its
 * best K (seed 004, 3.2.2: the layers' K are independent).  When
 * `common_k` > 0 every MeshSlice layer uses that K instead.  found = false
 * when some layer cannot run on `mesh` (does not divide, K invalid, Cannon
 * off a square).  `choices` (n entries, may be NULL) receives the picks.
 */
cost_ms_tune_result cost_ms_tune_mesh(const cost_ms_params *p, const cost_ms_layer *layers, int n,
                                      cost_ms_mesh mesh, cost_ms_algo algo, int df, int64_t common_k,
                                      cost_ms_layer_choice *choices);

/*
 * Autotunes `n` layers on `chips` chips: cost_ms_tune_mesh on every factor pair
 * rows x cols = chips (rows ascending); the smallest total time wins and
 * ties keep fewer rows.  `choices` as above, for the winning mesh.
 * Runs in O(divisors(chips) * n * sliced dim) cheap steps.
 */
cost_ms_tune_result cost_ms_tune(const cost_ms_params *p, const cost_ms_layer *layers, int n, int64_t chips,
                                 cost_ms_algo algo, int df, int64_t common_k, cost_ms_layer_choice *choices);

/* The best K shared by all layers on `mesh` (for a single --meshslice=K)
 * with dataflow `df` (< 0: each layer's own, as in cost_ms_tune_mesh): the valid K with the smallest
 * total MeshSlice time, 0 if none. */
int64_t cost_ms_best_common_k(const cost_ms_params *p, const cost_ms_layer *layers, int n,
                              cost_ms_mesh mesh, int df);

/* Useful FLOPs of a GEMM: 2 m n k. */
double cost_ms_gemm_flops(const cost_ms_gemm *g);

/* Greatest common divisor of a and b (>= 0); used for slice counts that
 * divide every device's share of a dim. */
int64_t cost_ms_gcd64(int64_t a, int64_t b);

/* ---- the non-GEMM layers of a Transformer block (meshslice_block.c) ---- */

/* One Transformer block's dims, global sizes: batch B, sequence S, heads
 * H of E each (the attention width H E), model D, feed-forward F. */
typedef struct cost_ms_block_dims {
    int64_t batch, seq, heads, head_dim, model, ffn;
} cost_ms_block_dims;

#define COST_MS_NONGEMM_LAYERS 6

/* One non-GEMM layer of the block, per device for the whole step (with
 * training: forward and backward). */
typedef struct cost_ms_nongemm_layer {
    const char *name;   /* static: "attention scores", "softmax", ... */
    double flops;       /* matrix-unit FLOPs (the two attention products), else 0 */
    double bytes;       /* HBM bytes read and written */
    double time;        /* seconds: max(flops / (peak gemm_eff), bytes / hbm_bw) */
} cost_ms_nongemm_layer;

typedef struct cost_ms_nongemm {
    int n;
    cost_ms_nongemm_layer layer[COST_MS_NONGEMM_LAYERS];
    double time;        /* seconds per device, the sum of the layers */
    double flops;       /* per device: the attention products' FLOPs (model FLOPs) */
} cost_ms_nongemm;

/*
 * The layers of one Transformer block that are not its four FC GEMMs
 * (seed 004 A4: "only the FC layers are simulated in detail; the other
 * layers are benchmarked on a real TPU v4, since they produce no
 * communication"): the attention score and context products of every
 * head, the softmax over the scores, two LayerNorms, the GeLU and two
 * residual adds, on `chips` chips with every element split evenly (tokens
 * over the mesh rows, heads and features over the columns, seed 004
 * 3.2.1: no communication, the same for every 2D GEMM algorithm).  Each is
 * priced by the profile's rates in p: the products at p->peak_flops *
 * p->gemm_eff or their HBM bytes, whichever is longer; the others by
 * their HBM bytes at p->hbm_bw, p->elem_bytes per element (the S x S
 * scores are written out: no fused attention).  Forward bytes: a
 * product reads its two operands and writes its result; softmax, LayerNorm
 * and GeLU read and write each element; an add reads two and writes one.
 * With `train` the backward pass adds twice the products' FLOPs and bytes
 * (two products per forward one) and, for the others, three elements per
 * element (read the saved input and the gradient, write the gradient).
 * Fills *out; returns 0, or -1 when a dim or `chips` is below 1.
 */
int cost_ms_nongemm_time(const cost_ms_params *p, const cost_ms_block_dims *d, int64_t chips, bool train,
                         cost_ms_nongemm *out);

#endif
