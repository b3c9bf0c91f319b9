/*
 * plan.h - auto-sharding: `einc plan model.ein --chips N --hw H` and
 * `einc model.ein --chips N -o exe` (plan.c).
 *
 * The program declares no mesh and no sharding.  For every mesh of N chips
 * (one, two or three axes whose sizes multiply to N) and every strategy of
 * seed 000's family that the mesh admits (DP, FSDP, TP over every axis;
 * FSDP+TP and DP+TP with TP on the last axis; for a program with a
 * `repeat` block, pipeline parallelism over the first axis, alone or with
 * any of the others over the rest), plan.c writes the shardings of the inputs and params as
 * the seed does, compiles the program through the whole pipeline (the
 * whole-program ILP plans the activations) and reads the cost pass's step,
 * MFU, memory and communication.  The fastest candidate that fits the
 * profile's HBM is chosen, a pipelined one only when it is faster than
 * every unpipelined one that fits by more than its bubble's uncertainty
 * (plan_choose.c, PLAN_PIPE_MARGIN).  A candidate whose storage an earlier one on
 * the same mesh writes (a dim its axes do not divide is left whole) is
 * the same compile and takes its figures (plan_same.c).  On a large table
 * (--plan-search, plan_cut.c) every row is first estimated by a compile
 * without the whole-program ILP, and only the rows whose estimate is
 * within PLAN_CUT_MARGIN of the best fully compiled step are compiled in
 * full; the others keep their estimate's figures and say so.
 */
#ifndef EINC_DRIVER_PLAN_H
#define EINC_DRIVER_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "costmodel.h"
#include "frontend.h"

#define PLAN_MAX_ROWS 320 /* 139 for 4096 chips, the most an executable runs, and as many pipelined */

/* What a program's dims are to seed 000's strategies, read off the
 * program compiled without a mesh (plan_roles). */
typedef struct plan_roles {
    int ndims;
    bool batch[64];  /* by dim id: an input's leading dim no param has (the batch) */
    bool layer[64];  /* by dim id: a repeated block's layer dim (never sharded) */
    bool in_param[64]; /* by dim id: a dim of some param, its layer dim aside */
    int model;       /* the dim most params have (FSDP shards it; between equals one an input has,
                        then the larger), or -1 */
} plan_roles;

typedef enum plan_family {
    PLAN_DP,      /* batch over X, params whole */
    PLAN_FSDP,    /* batch and the params' model dim over X (ZeRO-3) */
    PLAN_TP,      /* the params' other dim over X (Megatron), batch whole */
    PLAN_FSDP_TP, /* batch and model dim over X, the other dim over Y */
    PLAN_DP_TP,   /* batch over X, the params' other dim over Y */
    PLAN_NFAMILIES
} plan_family;

/* One candidate: a family on a mesh, and what the cost pass said of it. */
typedef struct plan_row {
    plan_family family;
    bool pp;              /* pipelined: the layer dim over the first axis (its stages), the
                           * family over the other axes (alone when naxes is 1) */
    int naxes;            /* 1, 2 or 3 */
    int64_t sizes[3];     /* X, Y, Z */
    const plan_roles *roles;
    bool ok;              /* compiled */
    char why[200];        /* when not: the first error */
    double step;          /* seconds per step (cost pass, overlap as the runtime does it) */
    double mfu;           /* 0..1 */
    double memory;        /* bytes per device at the peak */
    double exposed;       /* seconds of communication on the critical path */
    double comm;          /* seconds of collectives in all (overlapped or not) */
    double comm_axis;     /* seconds of collectives on the busiest mesh axis: those over
                             different axes use different links and run at once (seed 000,
                             "Combining FSDP and TP": T_comms = max(T_FSDP, T_TP)) */
    double compute;       /* seconds of compute ops */
    double math;          /* seconds of the matmuls at their roofline, per device (seed 000's
                           * T_math when compute-bound); "bound" compares comm_axis with it */
    bool fits;            /* memory <= the profile's HBM per device */
    bool trains;          /* the program has a backward pass or updates a param */
    bool gathers_params;  /* the plan AllGathers a param (FSDP's weight movement) */
    ir_remat remat;       /* what the figures were compiled with */
    int zero;             /* and the optimizer state's ZeRO stage the search gave (--zero) */
    int microbatches;     /* pp: M, as the pipeline pass chose it */
    const char *schedule; /* pp: the schedule's name (static storage) */
    double bubble;        /* pp: the simulated bubble, a share of the pipeline's makespan */
    double makespan;      /* pp: seconds of the M forwards and backwards through the stages, the
                           * part of the step the bubble is a share of (ir_pipe_totals.pipeline) */
    int same_as;          /* >= 0: the earlier row (index into plan_table.rows) whose storage
                           * this one writes, whose figures it took without compiling
                           * (plan_same_storage); -1: compiled itself */
    double estimate;      /* seconds: the step of the row compiled with --ilp=off (plan_cut.c),
                           * 0 when not estimated */
    bool estimated;       /* the figures are that estimate's: the row was not compiled in full,
                           * its estimate being above the best full step by PLAN_CUT_MARGIN;
                           * never chosen */
} plan_row;

/* Which candidates plan_run compiles through the whole pipeline
 * (--plan-search=auto|all|cut). */
typedef enum plan_search {
    PLAN_SEARCH_AUTO, /* CUT when more than PLAN_CUT_MIN_COMPILES rows need a compile of their own */
    PLAN_SEARCH_ALL,  /* every row in full */
    PLAN_SEARCH_CUT,  /* every row estimated, the promising ones in full (plan_cut.c) */
} plan_search;

#define PLAN_CUT_MIN_COMPILES 64 /* AUTO cuts above this many compiles (4096 chips: 213) */
#define PLAN_CUT_MARGIN 0.10     /* a row is compiled in full when its estimate is at most the best
                                    full step + 10% (plan_cut.c: why) */

/* When no candidate fits (plan_find_fit): the smallest changes that make
 * the smallest candidate's family fit the HBM, each one checked by
 * compiling and pricing it, not extrapolated. */
typedef struct plan_fit {
    bool tried;       /* plan_find_fit ran (nothing fitted) */
    int64_t chips;    /* the fewest chips, the table's times a power of two up to
                       * PLAN_FIT_MAX_CHIPS, at which it fits; 0 if none */
    plan_row at_chips; /* that candidate (its mesh: the first axis scaled) */
    int batch_dim;    /* the batch dim (a dim id of the program), or -1 */
    char batch_name[64]; /* its name, for -D */
    int64_t batch;    /* the largest size of it, the program's halved, that fits on
                       * the table's chips; 0 if none */
    plan_row at_batch; /* that candidate */
} plan_fit;

#define PLAN_FIT_MAX_CHIPS 8192 /* seed 000's largest slice (a 16x20x28 v5p pod is 8960) */

/* Installs pass option --`name`=`value` ("schedule" for the pipeline
 * pass, "zero" for the optimize pass) for the compiles that follow, or
 * removes it (value NULL: the user's options again). */
typedef void (*plan_option_fn)(void *ctx, const char *name, const char *value);

typedef struct plan_table {
    int n;
    int dropped;          /* candidates past PLAN_MAX_ROWS, not priced */
    plan_row rows[PLAN_MAX_ROWS];
    int chosen;           /* index into rows, or -1 when nothing compiled (plan_choose) */
    int pipe_lost;        /* the pipelined row that was fastest and fits, not chosen because the
                           * chosen unpipelined row is within its PLAN_PIPE_MARGIN; or -1 */
    int pipe_rival;       /* when the fastest row that fits is pipelined: the best unpipelined row
                           * that fits, which it was judged against (plan_choose); or -1 */
    plan_roles roles;
    int64_t chips;
    const cost_hw *hw;
    ir_remat remat;       /* the user's --remat, every row's first compile */
    bool choose_remat;    /* a row that does not fit may take IR_REMAT_LAYER */
    plan_option_fn option; /* non-NULL: the search also tries the pass options below */
    bool choose_schedule; /* a pipelined training row also tries --schedule=zero-bubble */
    bool choose_zero;     /* a training row that does not fit also tries --zero=2 */
    plan_fit fit;         /* what would fit, when nothing does (plan_find_fit) */
    plan_search search;   /* as plan_run was asked */
    bool cut;             /* the rows were estimated first (plan_cut_run ran) */
    int estimated;        /* rows left at their estimate (plan_row.estimated) */
    double cut_best;      /* seconds: the best full step that fits, a pipelined row's by
                           * plan_pipe_judged, the cut's reference (0: none) */
} plan_table;

/* Compiles the program with auto-sharding `a` and rematerialisation
 * `remat` through the pipeline (errors to `d`); NULL on failure.  The
 * caller owns the module.  (analyze_compile_fn has the same shape.) */
typedef ir_module *(*plan_compile_fn)(void *ctx, const fe_autoshard *a, ir_remat remat, diag_ctx *d);

/* Fills t: every candidate for `chips` chips on `hw`, compiled by
 * `compile` with `remat`, and the chosen one.  With `choose_remat` (the
 * user gave no --remat) and remat IR_REMAT_NONE, a training candidate that does not fit the
 * HBM is compiled again with IR_REMAT_LAYER, and takes those figures when
 * they fit (row.remat says so): seed 003's activation checkpointing,
 * chosen by the search rather than by a flag; before remat, such a
 * candidate tries the optimizer state sharded over its data axes
 * (--zero=2, ZeRO), which costs no FLOPs, and keeps it when it takes less
 * memory (row.zero).  With `schedule` (the user gave no --schedule), a
 * pipelined training candidate is also compiled with --schedule=zero-bubble
 * (zb-h2 when its stages fit the HBM, else zb-h1) and takes it when it is
 * faster or fits where 1F1B does not (row.schedule says which).  `option` installs those pass options (NULL:
 * neither is tried, and no row is estimated); `choose_zero` as
 * choose_remat, for --zero.  `search` says which rows are compiled in full
 * (plan_search; the others are estimated, plan_cut_run).  `proto` is the
 * program compiled with no mesh (its dims give the roles).  Returns 0, or
 * -1 if `chips` < 1 or the program's dims are too many to plan. */
int plan_run(plan_table *t, const ir_module *proto, const cost_hw *hw, int64_t chips, ir_remat remat,
             bool choose_remat, bool choose_schedule, bool choose_zero, plan_search search,
             plan_compile_fn compile, plan_option_fn option, void *ctx);
/* The bubble's uncertainty, in points of the makespan (a share, 0..1):
 * a pipelined row is chosen over the best unpipelined row that fits only
 * when it is faster even with its bubble this much larger
 * (plan_pipe_judged).  5 points is issue 25's tolerance for a measured
 * bubble against the cost pass's prediction, and what the bench measures
 * within it: its idle record (bench/results/pipeline.json, 2026-11-30,
 * `bench/pipeline.py --build BUILD`, AMD EPYC, 2 cores, load 0.43, Z = 2
 * on threads, every schedule at M = 1 to 16, three runs a point) has 64
 * of its 72 runs' bubbles within 5 points of the prediction (median miss
 * 2.3 points, the 90th percentile 5.1, the largest 10.5) and 23 of its 24
 * rows' medians (docs/performance.md, "Pipelined training steps and their
 * bubble (threads)"; the checks' reading: docs/pipeline.md, "Repeated
 * runs: noise or systematic").  A run's miss is additive, a few points whatever the
 * bubble (docs/pipeline.md, "Issue 25's bench targets"), so the margin
 * is in points, not a share of the bubble. */
#define PLAN_PIPE_MARGIN 0.05

/* Seconds: row r's step as the choice judges it against unpipelined
 * rows: for a pipelined row its step with the bubble PLAN_PIPE_MARGIN
 * larger, makespan * (1 - b) / (1 - b - PLAN_PIPE_MARGIN) plus the rest of
 * the step (infinite when the bubble leaves no room for the margin); for
 * any other row its step. */
double plan_pipe_judged(const plan_row *r);
/* Sets t->chosen, t->pipe_lost and t->pipe_rival from the priced rows
 * (plan_choose.c): the fastest row compiled in full that fits (steps within 0.1% tie and
 * the smaller memory wins), a pipelined one only when plan_pipe_judged of
 * it is below the step of the best unpipelined row that fits; if none
 * fits, the smallest; -1 when no row compiled. */
void plan_choose(plan_table *t);

/* Compiles `row` (its family, roles and mesh) for t's profile and
 * rematerialisation, as plan_run does every candidate, and fills its
 * figures (row->ok false and row->why when it does not compile). */
void plan_price_row(const plan_table *t, plan_row *row, plan_compile_fn compile, void *ctx);
/* `row` compiled once with `remat`, --zero=`zero` when zero > 0 and
 * --schedule=`schedule` when not NULL (through t->option), no other
 * choice tried; its figures, or ok false and why. */
plan_row plan_price_once(const plan_table *t, const plan_row *row, ir_remat remat, int zero, const char *schedule,
                         plan_compile_fn compile, void *ctx);

/* The cut (plan_cut.c).  Whether plan_run estimates first, for a table
 * whose rows need `compiles` compiles of their own. */
bool plan_cut_active(const plan_table *t, int compiles);
/* Estimates rows[0..n-1] (indices into t->rows, each its own compile)
 * with --ilp=off, then compiles them in full (plan_price_row) in the
 * order of their estimates while the estimate is at most the best full
 * step that fits (a pipelined row's by plan_pipe_judged) +
 * PLAN_CUT_MARGIN; the rest keep the estimate's figures
 * (plan_row.estimated).  Sets t->cut, t->estimated and t->cut_best.
 * Returns 0, or -1 out of memory (every row then compiled in full). */
int plan_cut_run(plan_table *t, const int *rows, int n, plan_compile_fn compile, void *ctx);
/* "auto", "all" or "cut" into *out; -1 for anything else. */
int plan_search_parse(const char *s, plan_search *out);

/* Installs an extra -D override (a dim name and its size) for the
 * compiles that follow, or removes it (def NULL). */
typedef void (*plan_define_fn)(void *ctx, const fe_define *def);

/* When t's chosen row does not fit t->hw's HBM, searches for the smallest
 * change that makes its family fit (t->fit): the chips doubled, with the
 * first mesh axis scaled, up to PLAN_FIT_MAX_CHIPS; and the batch dim
 * (plan_roles.batch, the first input's) halved, through `define`, while
 * it divides.  Every try is compiled by `compile` and priced, so the
 * figures are the cost pass's.  Does nothing when the chosen row fits or
 * nothing compiled.  Issue 24, item 3: "the error names the smallest
 * change that would (more chips, a smaller batch, remat)"; remat is
 * already a choice of every row (plan_run). */
void plan_find_fit(plan_table *t, const ir_module *proto, plan_compile_fn compile, plan_define_fn define, void *ctx);
/* The dim seed 000 calls the batch: the first input's dim that r marks
 * as a batch (plan_roles), or -1. */
int plan_batch_dim(const ir_module *proto, const plan_roles *r);
/* Whether m trains: it has a backward pass or updates a param (plan.c). */
bool plan_trains(const ir_module *m);

/* Memory on a declared mesh (plan_declared.c): what plan_fit_declared
 * chose for a training program that needs more HBM than the profile
 * has, and what would fit when nothing it tried does.  Bytes are per
 * device (the cost pass's peak, totals.peak_memory). */
typedef struct plan_declared {
    double hbm;           /* bytes: the profile's HBM per device */
    double memory;        /* bytes: the program as compiled */
    double chosen;        /* bytes: with the choice below (memory when nothing was chosen) */
    double zero_memory;   /* bytes with --zero=2, or 0 if not tried */
    double remat_memory;  /* bytes with --remat=layer (and the zero choice), or 0 if not tried */
    int zero;             /* 2: --zero=2 chosen, else 0 */
    ir_remat remat;       /* the remat chosen (the program's own when nothing was) */
    bool fits;            /* chosen <= hbm */
    /* When nothing fits: a mesh axis doubled until it does (axis_size 0: none up to 4096
     * devices), and the batch halved until it does (batch 0: none), with the choice above. */
    char axis_name[2];
    int64_t axis_size, devices;
    double at_axis;       /* bytes at axis_size */
    char batch_name[64];
    int64_t batch;
    double at_batch;      /* bytes at batch */
} plan_declared;

/* For `m`, compiled on its declared mesh with no --chips: when it trains
 * and its peak exceeds hw's HBM, compiles it again with --zero=2 (when
 * `choose_zero`: the user gave no --zero) and then --remat=layer (when
 * `choose_remat`), keeps each that lowers the peak, and, if it still
 * does not fit, searches the smallest change (plan_declared.c).  Fills
 * *r; true when a --zero or --remat was chosen (the caller compiles with
 * r->zero and r->remat).  `compile` is called with no auto-sharding;
 * `option` installs --zero, `define` an extra -D. */
bool plan_fit_declared(plan_declared *r, const ir_module *m, const cost_hw *hw, bool choose_remat, bool choose_zero,
                       plan_compile_fn compile, plan_option_fn option, plan_define_fn define, void *ctx);
/* What plan_fit_declared found, as one `einc: note:` line (nothing when
 * the program fit as compiled). */
void plan_declared_print(FILE *out, const plan_declared *r, const char *hw_name);

/* The table a reader of seed 000 recognises (or JSON: {"chosen": {...},
 * "candidates": [...]}), with the chosen row marked and why. */
void plan_print(FILE *out, const plan_table *t, bool json);
/* The auto-sharding of row `i` (points into t: keep t alive). */
void plan_autoshard(const plan_table *t, int i, fe_autoshard *a);
/* The auto-sharding of `row` on its own mesh (row->naxes, row->sizes);
 * a points into row (keep it alive). */
void plan_row_mesh_autoshard(const plan_row *row, fe_autoshard *a);

/* Candidates that write the same program (plan_same.c).  A family leaves
 * a dim whole where its axes do not divide it, so on a large mesh two
 * families can write every input, param and state alike, and the
 * frontend then lowers the same program: plan_run compiles the first
 * and gives the second its figures (row.same_as). */
/* The number of declarations (inputs, params, states) of proto. */
int plan_storage_count(const ir_module *proto);
/* The sharding row's family writes on its mesh for each declaration of
 * proto, in proto's value order, into out[0..plan_storage_count - 1]. */
void plan_storage_of(const ir_module *proto, const plan_row *row, ir_sharding *out);
/* Whether rows a and b, with storages sa and sb (plan_storage_of), have
 * the same mesh, pipelining and storage: the same compile. */
bool plan_same_storage(const ir_module *proto, const plan_row *a, const ir_sharding *sa, const plan_row *b,
                       const ir_sharding *sb);

/* The batch, layer and model dims of `m` (any mesh: only its inputs,
 * params and repeated blocks are read).  Returns 0, or -1 if m has more
 * dims than plan_roles holds. */
int plan_roles_of(const ir_module *m, plan_roles *r);
/* Runs compile(ctx, d) with its diagnostics captured: the module when it
 * compiled and was priced, else NULL with the first line of the first
 * error in why[0..n-1] (n >= 1).  The caller owns the module. */
ir_module *plan_compile_quiet(ir_module *(*compile)(void *ctx, diag_ctx *d), void *ctx, char *why, size_t n);
/* "DP", "FSDP", "TP", "FSDP+TP", "DP+TP". */
const char *plan_family_name(plan_family f);

/* The name row r is reported under: its family's, except that a compiled
 * plan which gathers no param keeps its weights stationary (a served
 * program by design, a trained one when the planner moves activations
 * instead), so FSDP's storage is reported as the model parallelism it is,
 * "TP-D" (the model dim over every axis) and "2D-WS" (FSDP+TP's: seed
 * 002's 2D weight-stationary sharding, question 7 and appendix B); the
 * JSON row keeps the family as "storage".  A static string. */
const char *plan_row_label(const plan_row *r);
/* The auto-sharding that writes row->family's shardings on the mesh the
 * program declares (fe_autoshard.keep_mesh; `einc analyze`): one-axis
 * families over every axis of that mesh, two-axis families with the
 * tensor-parallel dims on its last axis.  Only row->family and row->roles
 * are read; a points into row (keep it alive). */
void plan_row_autoshard(const plan_row *row, fe_autoshard *a);

#endif
