/*
 * propagate_internal.h - what the files of the propagate pass share.
 *
 * propagate.c runs the pass (setup, sweeps, materialisation); the layout
 * search lives in propagate_layout.c, the costs it ranks layouts by in
 * propagate_cost.c and the text of the reasons attached to inserted ops in
 * propagate_reason.c.  The algorithm is
 * described at the top of propagate.c and in docs/propagation.md.
 */
#ifndef EINC_PROPAGATE_INTERNAL_H
#define EINC_PROPAGATE_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pass.h"
#include "reshard.h"

#define MAX_LABELS (IR_MAX_OPERANDS * IR_MAX_RANK + IR_MAX_RANK)
#define CH_NONE (-1)     /* the op is replicated over the axis */
#define CH_CARRY 1000    /* CH_CARRY + k: unreduced sums carried from operand k */
#define MAX_SWEEPS 12    /* backward+forward rounds; a fixed point comes far sooner */
#define MAX_JOINT_ROUNDS 4 /* rounds of joint moves, each followed by sweeps */
#define MAX_HINTS 32     /* result shardings consulted for candidate labels */
#define MAX_OPTIONS 24   /* candidate choices for one mesh axis */
#define BB_BUDGET 5000   /* layout evaluations of the branch and bound */
#define WIDE_BUDGET 8000 /* evaluations the second phase's sweeps and joint moves may make */
#define WIDE_MAX_OPS 2048 /* larger programs keep the first phase's plan */
#define BB_MAX_OPS 64    /* larger programs skip the branch and bound (no leaf within budget) */
#define ILP_DEFAULT_SECONDS 20.0 /* the whole-program ILP's time limit, unless --ilp= says; a safety:
                                   iteration and node limits (propagate_ilp.c) decide first */
#define WIDE_MARGIN 0.05 /* how much faster a plan of the second phase must be (fraction) */

/* A cost in the pass's objective, compared lexicographically: estimated
 * time on the profile, then bytes moved per device, then op count.  Without
 * a profile (pass_ctx.hw NULL) every time is 0, so bytes decide. */
typedef struct cost {
    double time;  /* seconds: compute of the ops priced plus their reshards (cost model) */
    double bytes; /* bytes moved per device (seed 001 formulas) */
    int nops;     /* number of reshard ops */
} cost;

/* One use of a value: operand `operand` of op info `op`. */
typedef struct use {
    int op;      /* index into prop.ops */
    int operand; /* operand position */
} use;

/* A layout and what it implies for one op. */
typedef struct layout {
    int choice[IR_MAX_AXES];              /* per mesh axis: CH_NONE, label index or CH_CARRY + k */
    ir_sharding req[IR_MAX_OPERANDS];     /* required sharding of each operand */
    ir_sharding produced;                 /* sharding of the result */
} layout;

/* Per-op state of the propagation. */
typedef struct opinfo {
    ir_op *op;                            /* the Einsum or Elementwise op */
    const int (*labels)[IR_MAX_RANK];     /* operand labels (op's union arm) */
    const int *rlabels;                   /* result labels */
    int nlabels;                          /* distinct labels of the op */
    int label[MAX_LABELS];                /* their dim ids */
    bool contracted[MAX_LABELS];          /* label not in the result (summed) */
    bool in_operand[MAX_LABELS];          /* label indexes some operand (else nothing can shard it) */
    bool linear;                          /* elementwise, linear, narrowing no operand (takes {U_X}) */
    bool decided;                         /* `lay` is valid */
    layout lay;                           /* the chosen layout */
    bool has_alt;                         /* `alt` is valid (set after the search) */
    layout alt;                           /* the runner-up: best layout with other choices */
    cost lay_total, alt_total;            /* the program's objective with `lay` / with `alt` */
    char decision[400];                   /* pass_prop_decision's text, written before materialisation */
    bool decision_told;                   /* the decision is written into a reason already */
} opinfo;

/* The collectives at the ends of a reshard's plan that a collective matmul
 * can hide (cost_collective_matmul_exposed; propagate_step.c): its first
 * step when a ReduceScatter (of a matmul's partial sums), its last when an
 * AllGather (into a matmul's operand).  Seconds of one run; 0 where the
 * end is another collective. */
typedef struct reshard_ends {
    double head_rs;     /* seconds of the first step, a ReduceScatter, else 0 */
    int64_t head_group; /* devices in its group */
    double tail_ag;     /* seconds of the last step, an AllGather, else 0 */
    int64_t tail_group; /* devices in its group */
} reshard_ends;

/* One memoised reshard cost. */
typedef struct cache_ent {
    bool used;         /* slot occupied */
    int vid;           /* type class of the value (prop.tclass) */
    uint32_t from;     /* pass_reshard_key of the source sharding */
    uint32_t to;       /* and of the target */
    cost c;            /* the planner's answer */
    reshard_ends ends; /* the collectives at its plan's ends */
} cache_ent;

/* A reshard already materialised: `src` brought to `sh` is `dst`. */
typedef struct made {
    ir_value *src;  /* the resharded value */
    ir_sharding sh; /* the sharding reached */
    ir_value *dst;  /* the value holding it */
} made;

/* What the whole-program ILP (propagate_ilp.c) did and proved. */
typedef enum pass_ilp_status {
    PASS_ILP_NONE,       /* not run (no profile, no ops, --ilp=off) */
    PASS_ILP_OPTIMAL,    /* solved: its plan is optimal among the candidates */
    PASS_ILP_TIME_LIMIT, /* stopped at a limit (iterations, nodes, time): `bound` is the best
                            bound proven */
    PASS_ILP_TOO_LARGE,  /* more than ILP_MAX_COLS columns: not solved */
    PASS_ILP_SKIPPED,    /* out of memory while building it */
} pass_ilp_status;

/* What the ILP's memory row (propagate_ilp_mem.c) did. */
typedef enum pass_ilp_mem {
    PASS_ILP_MEM_FREE,      /* the fastest plan fits (or no layout changes the memory): no row */
    PASS_ILP_MEM_BOUND,     /* the fastest plan does not fit; the row chose one that does */
    PASS_ILP_MEM_NONE_FITS, /* no plan among the candidates fits: the fastest is kept */
} pass_ilp_mem;

typedef struct pass_prop_ilp_report {
    pass_ilp_status status;
    long candidates;       /* candidate layouts over all ops */
    int cols, rows;        /* size of the program given to the solver */
    int iterations;        /* simplex iterations of its relaxation */
    long nodes;            /* branch-and-bound nodes past the relaxation */
    double objective;      /* seconds: the solver's best plan, by the ILP's objective */
    double bound;          /* seconds: no plan among the candidates is below this */
    double lp_bound;       /* seconds: the LP relaxation's optimum */
    double warm_objective; /* seconds: the local search's plan, by the ILP's objective */
    double exact_before;   /* seconds: pass_prop_total_cost before the solve */
    double exact_after;    /* seconds: and of the solver's plan */
    bool adopted;          /* the solver's plan replaced the local search's */
    bool merged;           /* simple ops merged into an operand (Alpa), to keep it small */
    double seconds;        /* wall time of building and solving */
    pass_ilp_mem mem;      /* what the memory row did */
    double mem_hbm;        /* bytes per device the row allows (the profile's hbm_bytes); 0 when
                              no layout changes the memory */
    double mem_fastest;    /* bytes per device the fastest plan keeps (params, optimizer state,
                              inputs, gradients, kept activations: the row's figure) */
    double mem_least;      /* bytes: no plan among the candidates keeps less */
    double fastest;        /* seconds: the exact objective of the fastest plan (before the row) */
    int cm_credits;        /* collective matmul credit columns (propagate_ilp_cm.c); 0 elsewhere */
    int cm_freed;          /* those the second solve frees (the others are too small to matter) */
    double cm_bound;       /* seconds: the most they can take off a plan (each matmul's largest) */
    bool cm_solved;        /* the ILP was solved again with them, to an integral plan */
    double cm_objective;   /* seconds: that plan by the exposed objective of the ILP */
    double cm_before;      /* seconds: pass_prop_step_time of the plan before that solve */
    double cm_after;       /* seconds: and of its plan */
    bool cm_adopted;       /* its plan replaced the one before */
    int cm_changed;        /* ops whose layout it changed */
    double cm_seconds;     /* wall time of that solve */
    int cm_iterations;     /* its simplex iterations */
    long cm_nodes;         /* its branch-and-bound nodes */
} pass_prop_ilp_report;

/* The pass's context (no global state). */
typedef struct prop {
    pass_ctx *ctx;       /* options and diagnostics */
    const struct cost_hw *hw; /* profile of the time objective; NULL: bytes decide */
    ir_module *m;        /* the module being transformed */
    int nops;            /* compute ops */
    opinfo *ops;         /* in program order */
    int nvalues;         /* values before the pass (ids below index def) */
    int *def;            /* by value id: index of defining op info, or -1 */
    int *use_start;      /* by value id: first entry in `uses` (CSR) */
    use *uses;           /* uses grouped by value */
    bool *over_budget;   /* by type class: a reshard search of the class ran over
                            PASS_RESHARD_EDGE_BUDGET, so its others take the direct route */
    int bounded;         /* reshard costs taken from the direct route (docs/propagation.md,
                            "Planner time") */
    cache_ent *cache;    /* reshard cost memo (open addressing) */
    size_t cache_cap;    /* power of two */
    size_t cache_n;      /* occupied slots */
    made *mades;         /* reshards emitted so far */
    int nmade, made_cap; /* count and capacity */
    ir_axes used_axes;   /* mesh axes some input, constraint or output shards a dim over */
    bool wide;           /* candidates: every used axis on any dim (second phase) */
    bool meshslice;      /* the meshslice pass runs after this one: 2D GEMMs are priced as
                            its loops (propagate_meshslice.c) */
    bool meshslice_k;    /* --meshslice=K: the user asked for K-slice loops, so the
                            2D layouts they need are not traded for a strategy */
    long evals;          /* layout and group evaluations so far (the search's work) */
    long eval_limit;     /* sweeps and joint moves stop at this many evals (0: no limit) */
    const ir_op **loop_use; /* by value id: the LoopBegin or LoopEnd reading it, or NULL */
    double ilp_time;     /* seconds the ILP may take; 0: not run (--ilp=off) */
    pass_prop_ilp_report ilp; /* what it did */
    const char *plan_why; /* why the plan is not the best the search found (static), or NULL */
    const char *plan_strategy; /* the seed 000 strategy the portfolio kept ("FSDP+TP", static), or NULL */
    int *tclass;         /* by value id: the least id of a value of the same dtype and dims
                            (reshard costs depend on nothing else, so they are memoised by it) */
} prop;

/* `s` without unreduced axes: what a consumer that cannot carry partial
 * sums, or a bare output, needs (resolved by AllReduce). */
static inline ir_sharding pass_prop_reduced(ir_sharding s)
{
    s.unreduced = 0;
    s.red = IR_RED_SUM;
    return s;
}

/* ---- propagate_cost.c ---- */

/* No cost, and the cost of an infeasible layout (loses to any finite one). */
static const cost COST_ZERO = {0.0, 0.0, 0};
static const cost COST_INF = {INFINITY, INFINITY, 0};

/* a + b, term by term. */
cost pass_prop_cost_add(cost a, cost b);
/* Strictly better: less time (beyond rounding), or as much and fewer bytes,
 * or both equal and fewer ops.  An infinite cost (infeasible) loses to any
 * finite one. */
bool pass_prop_cost_less(cost a, cost b);
/* The objective's terms of value `id`: its constraint's reshard and one
 * reshard per distinct sharding its decided consumers and its outputs need
 * (consumers not decided price nothing). */
cost pass_prop_value_cost(prop *p, int id);
/* The sharding value v has for its consumers under the current decisions
 * (its constraint, its op's chosen result, or its type's). */
ir_sharding pass_prop_current(const prop *p, const ir_value *v);
/* Op k's terms of the objective under `lay`: its compute time and the
 * reshards of its operands and result (time, bytes, ops). */
cost pass_prop_layout_cost(prop *p, int k, const layout *lay);
/* The objective of the whole program under the current layouts: every
 * op's compute time plus every distinct reshard of every value once. */
cost pass_prop_total_cost(prop *p);
/* Seconds op k takes on the profile under `lay` (cost_op_estimate on its
 * per-device shapes, less the MeshSlice credit of a 2D GEMM), times the
 * trip count of the repeated block holding it; 0 without a profile. */
double pass_prop_compute_time(prop *p, int k, const layout *lay);
/* Seconds of the planner's reshard of v from `from` to `to` (memoised; one
 * run, no trip count). */
double pass_prop_reshard_time(prop *p, const ir_value *v, const ir_sharding *from, const ir_sharding *to);
/* The ends of that reshard's plan (memoised with it; all 0 when from ==
 * to or it is unreachable). */
reshard_ends pass_prop_reshard_ends(prop *p, const ir_value *v, const ir_sharding *from, const ir_sharding *to);
/* Seconds one run of op k takes under `lay` when it is a matmul that can
 * hide one collective as a collective matmul (cost_is_matmul, and not
 * priced as a MeshSlice loop: no MeshSlice credit), else 0. */
double pass_prop_matmul_time(prop *p, int k, const layout *lay);

/* ---- propagate_layout.c ---- */

/* Fills lay->req and lay->produced from lay->choice (axes on one label in
 * the order an operand gives them, else mesh order); false if a dim would
 * not divide or the layout is not computable. */
bool pass_prop_layout_fill(const prop *p, int k, layout *lay);
/* Every feasible candidate layout of op k given the current state of the
 * other ops, at most `max`, into out; returns the count, -1 out of memory. */
int pass_prop_candidates(prop *p, int k, layout *out, int max);
/* Index of dim id `dim` among op info oi's labels, or -1. */
int pass_prop_label_index(const opinfo *oi, int dim);
/* Re-picks op k's layout: 1 if it changed, 0 if not, -1 if no layout is
 * feasible (or out of memory). */
int pass_prop_choose(prop *p, int k);
/* Joint moves: for every compute op k whose result other compute ops read
 * (at most 8 of them), tries each candidate layout of k with every reader
 * re-picked to its best layout given it, and keeps the combination that
 * minimises the whole program's objective: a move coordinate descent
 * cannot make when each change alone is worse.  With one reader this is
 * every combination of the pair's layouts.  Returns how many ops' groups
 * changed. */
int pass_prop_improve_joint(prop *p);
/* Finds op k's runner-up (the best layout whose axis choices differ from
 * the chosen one) and prices the program with each: fills has_alt, alt,
 * lay_total and alt_total, from `total`, the objective of the current
 * layouts (pass_prop_total_cost).  Run after the search; costs O(op k's
 * candidates), not O(program). */
void pass_prop_runner_up(prop *p, int k, const cost *total);
/* "Y->F", "X->replicated Y->carry{U}": layout `lay` of op k, into buf. */
void pass_prop_layout_str(const prop *p, int k, const layout *lay, char *buf, size_t size);

/* ---- propagate_meshslice.c ---- */

/* Seconds by which the MeshSlice loop the meshslice pass will make of
 * einsum k under `lay` (seed 004: OS, LS or RS, overlapping each slice's
 * collectives with the previous slice's GEMM) beats its parts run in
 * sequence: the gathers of its operands, `einsum_time` (one run of op k
 * under lay) and the ReduceScatter of its result.  0 when op k under lay
 * is no such 2D GEMM, when the loop is not faster, or when p->meshslice is
 * off.  Per run (no trip count). */
double pass_prop_meshslice_credit(prop *p, int k, const layout *lay, double einsum_time);

/* ---- propagate.c ---- */

/* Backward and forward rounds of re-picking each op's layout
 * (pass_prop_choose), to a fixed point, MAX_SWEEPS rounds or the budget
 * (eval_limit); returns the rounds. */
int pass_prop_sweep(prop *p);
/* Sweeps to a fixed point, then joint moves (pass_prop_improve_joint) and
 * sweeps again while they help, at most MAX_JOINT_ROUNDS times; returns
 * the rounds of sweeps.  Every accepted change lowers the objective. */
int pass_prop_descend(prop *p);

/* ---- propagate_options.c ---- */

/* --ilp=on|off|SECONDS (value NULL: on): the ILP's time limit in seconds
 * into *seconds (0: off; ILP_DEFAULT_SECONDS for on); false when the value
 * is none of those. */
bool pass_prop_parse_ilp(const char *value, double *seconds);

/* ---- propagate_step.c ---- */

/* Seconds of the current plan's step as the cost pass schedules it:
 * reshards of params on a prefetch stream from the step's start, everything
 * else in program order on the main stream, which waits for what it reads;
 * the later stream's end.  Needs every op decided; without a profile, the
 * serial objective's time (0). */
double pass_prop_step_time(prop *p);

/* ---- propagate_portfolio.c ---- */

/* Plans seed 000's strategies (FSDP, FSDP+TP, TP with sequence
 * parallelism, TP) on the residual stream, each from a first forward
 * sweep to a fixed point, and keeps the plan whose step
 * (pass_prop_step_time) is the shortest among them and the current one,
 * a strategy only when PORTFOLIO_MARGIN (1%) shorter, a plan that fits the
 * HBM before one that does not; sets p->plan_why and p->plan_strategy when a strategy is kept.
 * Programs with repeated blocks too: each loop's carried sharding
 * follows the strategy, and is restored with the plan kept.  Leaves every
 * op decided.  Returns 1 when a strategy replaced the plan, 0 otherwise
 * (also for programs without a single batch dim, or without a model dim:
 * a DP program without a repeated block, which it does not try, and when
 * out of memory). */
int pass_prop_portfolio(prop *p);

/* ---- propagate_search.c ---- */

/* Branch and bound over the layouts of all ops, in program order, from the
 * current (locally optimal) layouts as the incumbent; at most `budget`
 * layout evaluations.  Leaves every op decided with the best plan found and
 * returns the number of ops whose layout changed (0 for a program of more
 * than BB_MAX_OPS ops, which it does not search). */
int pass_prop_branch_bound(prop *p, long budget);

/* ---- propagate_ilp.c ---- */

/* Solves the whole program's layouts as one integer linear program (Alpa's
 * intra-operator formulation, Zheng et al. OSDI'22; see the file's essay)
 * with GLPK, within `time_limit` seconds, from the current layouts as the
 * first incumbent.  Adopts the solver's plan when the exact objective
 * (pass_prop_total_cost) rates it strictly better.  Fills *rep.  Returns
 * the number of ops whose layout changed. */
int pass_prop_ilp(prop *p, double time_limit, pass_prop_ilp_report *rep);

/* ---- propagate_ilp_mem.c ---- */

/* Bytes per device the current plan keeps by the ILP's memory row: the
 * resident params, optimizer state, state and inputs, one gradient per
 * optimized param and every activation kept for the backward pass, in the
 * shardings the current layouts give them (seed 000's accounting; the
 * file's essay says how it differs from the cost pass's peak). */
double pass_prop_memory(const prop *p);

/* ---- propagate_loop.c: repeated blocks, planned once ---- */

/* Before the sweeps: gives each LayerSlice result its param's sharding
 * without the first dim, and each loop's carried value (LoopBegin and
 * LoopEnd results) its carried sharding where the source fixes it.  Returns
 * the number of loops whose carried sharding waits for the sweeps. */
int pass_prop_loop_prepare(prop *p);
/* After the sweeps: takes the carried sharding of those loops from the
 * value entering them; true if any changed (the caller sweeps again). */
bool pass_prop_loop_settle(prop *p);
/* After settling: gives each of those loops the carried sharding of an
 * earlier loop over the same dims (a backward loop's cotangent laid out
 * like the forward loop's value), saving every loop's carried sharding, in
 * program order, in saved[0..nsaved-1] first; true if any changed.  The
 * caller sweeps and keeps the result only if it is cheaper, else calls
 * pass_prop_loop_restore with the same array. */
bool pass_prop_loop_primal(prop *p, ir_sharding *saved, int nsaved);
void pass_prop_loop_restore(prop *p, const ir_sharding *saved, int nsaved);
/* Copies every loop's carried sharding, in program order, into
 * saved[0..nsaved-1] (NULL: none); returns the number of loops.  With
 * pass_prop_loop_restore, a plan's carries are set aside and put back. */
int pass_prop_loop_carries(const prop *p, ir_sharding *saved, int nsaved);
/* Before materialisation: gives each LayerStack result the sharding the
 * sweeps left its operand (without partial sums, the loop's dim in front)
 * and each LayerSlice of one that sharding without the dim, the shardings
 * pass_prop_current gave them during the sweeps. */
void pass_prop_loop_stacks(prop *p);
/* After materialisation: reshards the value entering each loop, the body's
 * new value into the carried sharding, and a LayerStack's operand out of
 * partial sums.  Returns the errors. */
int pass_prop_loop_finish(prop *p);
/* ---- propagate_state.c ---- */

/* After materialisation: reports (located at the write) every state that
 * an UpdateSlice writes with rows the plan had to gather because the
 * state is not sharded like them.  Returns the errors. */
int pass_prop_state_writes(prop *p);

/* Whether an emitted reshard's value `dst` may be reused by an op placed
 * before `before` (NULL: at the end): not across a loop body's boundary. */
bool pass_prop_loop_reusable(const ir_value *dst, const ir_op *before);

/* ---- propagate_reason.c ---- */

/* "Tmp = In * Win", "Act = gelu(Tmp)": op as written, into buf. */
void pass_prop_stmt(const ir_module *m, const ir_op *op, char *buf, size_t size);
/* Why step `st` is inserted on operand i of op k, into buf. */
void pass_prop_operand_reason(const prop *p, int k, int i, const pass_reshard_step *st, char *buf,
                              size_t size);
/* "; one collective over all its axes (...): 46.6 us on tpu-v4, where
 * collectives along one dim each (AllGather_Y, AllGather_X) take 116.5 us":
 * how `plan` (from t->sh to `to`), which has a step whose axes work along
 * different dims, compares with the best plan of one-dim collectives
 * (bytes without a profile), into buf (empty if there is none). */
void pass_prop_per_axis_note(const prop *p, const ir_type *t, const ir_sharding *to,
                             const pass_reshard_plan *plan, char *buf, size_t size);
/* "; planner: step 2.4e4 us on host, chosen over Y->D (AllToAll_Y:Win,
 * ...): step 3.5e4 us (+1.1e4 us)": what decided op k's layout and the
 * runner-up, into buf (empty when there is no runner-up).  Reads the
 * module as the search left it: call before materialisation. */
void pass_prop_decision(const prop *p, int k, char *buf, size_t size);
/* Why step `st` brings value v (made by compute op `op`, or NULL) to
 * `target`, required as `what` ("constraint", "output"), into buf. */
void pass_prop_target_reason(const prop *p, const ir_op *op, const ir_value *v, const ir_sharding *target,
                             const char *what, const pass_reshard_step *st, char *buf, size_t size);

#endif
