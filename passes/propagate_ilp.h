/*
 * propagate_ilp.h - what the files of the whole-program ILP share:
 * propagate_ilp.c states it, propagate_ilp_solve.c solves it,
 * propagate_ilp_cands.c chooses each op's candidate layouts (and merges
 * simple ops into an operand), propagate_ilp_seq.c, _mem.c and _cm.c add
 * sequence parallelism, the memory row and collective matmul's credits.
 */
#ifndef EINC_PROPAGATE_ILP_H
#define EINC_PROPAGATE_ILP_H

#include <glpk.h>

#include "propagate_internal.h"

#define ILP_MAX_CANDS 96       /* candidate layouts kept per op */
#define ILP_MAX_COLS 400000    /* larger programs keep the local search's plan */
#define ILP_FULL_PAIRS 20000.0 /* edge pairs past which simple ops are merged */
#define ILP_ITERS_PER_ROW 4    /* simplex iterations allowed per row of the ILP */
#define ILP_MAX_NODES 2000     /* branch-and-bound nodes, past the relaxation */
#define ILP_TREE_PIVOT_COST 10 /* CLP relaxation pivots one GLPK pivot in the tree costs */
#define ILP_TREE_MIN_PIVOTS 1000 /* the tree's pivot budget, at least */

/* One group: the distinct shardings among an op's candidates (produced,
 * or required of one operand), and each candidate's group. */
typedef struct group {
    int n;              /* distinct shardings */
    ir_sharding *sh;    /* them, n entries */
    int *of;            /* by candidate: index into sh */
    int cur;            /* the group of the op's current layout */
} group;

/* What sequence parallelism's candidates know of one dim
 * (propagate_ilp_seq.c). */
typedef struct ilp_seqdim {
    ir_axes tp;         /* TP axes it may take though nothing shards it (a sequence dim) */
    ir_axes batch;      /* axes some input shards it over */
    bool argument;      /* a dim of some input or param */
} ilp_seqdim;

/* The program under construction, GLPK's way (1-based triplets). */
typedef struct ilp {
    prop *p;
    glp_prob *lp;
    layout **cand;      /* by op: candidate layouts, [0] the current layout */
    int *nc;            /* by op: their count */
    int *col0;          /* by op: column of x[k,0] */
    long ncand;         /* candidates in all */
    int ncols, nrows;
    int *ia, *ja;       /* row and column of each nonzero */
    double *ar;         /* its coefficient */
    int nz, nz_cap;
    double *warm;       /* by column: the local search's plan (1-based) */
    int warm_cap;
    int *ge_row;        /* rows y - (others) >= 0, for filling in the warm start */
    int *ge_col;        /* their y column */
    int *ge_nz;         /* their first nonzero */
    int nge, ge_cap;
    bool warm_given;    /* the callback handed the warm start over */
    bool from_basis;    /* a second solve: should CLP not finish it, GLPK goes on from the last basis */
    int pivot_budget;   /* simplex pivots a solve from the basis may take (0: ILP_ITERS_PER_ROW's
                           limit alone); past it the solve reports no plan */
    int clp_pivots;     /* simplex pivots CLP took in all (GLPK counts its own) */
    int tree_it0;       /* GLPK's pivot count when branch and cut began */
    int tree_budget;    /* pivots branch and cut may take: the relaxation's */
    double bound;       /* best bound seen in the tree (us) */
    long nodes;         /* branch-and-bound nodes selected */
    layout **own;       /* by op: its own candidates (own_candidates) */
    int *own_n;         /* and their count */
    bool merge;         /* simple ops merged into an operand (leader_operand) */
    bool *sharded_dim;  /* by dim id: some input, param, constraint or output shards it */
    ilp_seqdim *seq;    /* by dim id: what sequence parallelism may do with it */
    bool cm_on;         /* collective matmul's credits are stated (--ilp-overlap, a profile that does it) */
    int *cm_row;        /* by op: its row "hides at most one collective" (collective matmul), or 0 */
    int *cm_col;        /* credit columns h (propagate_ilp_cm.c) */
    double *cm_us;      /* by credit: the microseconds it takes off the objective */
    int *cm_op;         /* by credit: the matmul op hiding it */
    int ncm, cm_cap;    /* their count and capacity */
    double constant;    /* us the objective pays whatever the plan */
    bool oom;           /* an allocation failed */
} ilp;

/* ---- propagate_ilp.c ---- */

/* A new row of s with bounds of `type` (GLP_FX or GLP_LO) at 0; its index. */
int pass_ilp_row_new(ilp *s, int type);
/* Coefficient v of column col in row `row` (s->oom set when out of memory). */
void pass_ilp_nz_add(ilp *s, int row, int col, double v);
/* Sets every op's layout to the candidate that plan x (by column) selects. */
void pass_ilp_apply(ilp *s, const double *x);

/* A new column of s: continuous in [lb, 1] or binary, with objective `obj`
 * (us) and warm-start value `warm`; returns its index (s->oom set when
 * the warm start could not grow). */
int pass_ilp_col_new(ilp *s, double obj, bool binary, double lb, double warm);
/* Groups op k's candidates by their produced sharding (operand < 0) or by
 * what they require of operand `operand`, into *gr (freed by
 * pass_ilp_group_free even when this fails); false when out of memory. */
bool pass_ilp_group_make(ilp *s, int k, int operand, group *gr);
void pass_ilp_group_free(group *gr);

/* ---- propagate_ilp_solve.c ---- */

/* Solves s->lp: the relaxation by CLP (pass_ilp_clp_solve), finished by
 * GLPK's primal simplex from CLP's basis (when CLP cannot finish: GLPK's
 * dual simplex after its presolver, or with s->from_basis its primal
 * simplex from the last basis within s->pivot_budget pivots), then GLPK's
 * branch and cut from the warm start (s->warm, handed over once unless
 * s->warm_given) within s->tree_budget pivots, within ms milliseconds
 * from t0 (pass_ilp_now) in all.  Fills rep's status, iterations, nodes,
 * objective and bounds; false when no integral plan was found (a limit
 * reached first, the pivot budget included). */
bool pass_ilp_solve(ilp *s, int ms, double t0, pass_prop_ilp_report *rep);
/* Monotonic seconds. */
double pass_ilp_now(void);

/* ---- propagate_ilp_clp.c: relaxations by COIN-OR CLP ---- */

enum { PASS_ILP_CLP_OPTIMAL, PASS_ILP_CLP_LIMIT, PASS_ILP_CLP_FAILED };
/* Solves lp's linear relaxation with CLP's dual simplex after its
 * presolver, within it_lim pivots and `seconds`.  At an optimum, lp's
 * basis becomes CLP's (lp's solution itself is not set: a glp_simplex from
 * that basis finishes the solve).  *pivots gets the pivots CLP took.
 * Returns PASS_ILP_CLP_OPTIMAL, _LIMIT (a limit reached first) or _FAILED
 * (out of memory, infeasible, or CLP's numerics; lp is unchanged). */
int pass_ilp_clp_solve(glp_prob *lp, int it_lim, double seconds, int *pivots);

/* ---- propagate_ilp_cands.c ---- */

/* Marks in s->sharded_dim the dims some input, param, state, constraint
 * or output shards, fills s->seq (pass_ilp_seq_mark) and s->own, every
 * op's own candidates (the current layout first, at most ILP_MAX_CANDS);
 * *small says whether the whole program's edge pairs stay within
 * ILP_FULL_PAIRS (else simple ops are merged).  False when out of memory. */
bool pass_ilp_own_all(ilp *s, bool *small);
/* Op k's candidates into s->cand[k], s->nc[k] and, for an op merged into
 * its leader operand's producer, s->col0[k] (the producer's columns; 0
 * for an op of its own, whose columns the caller makes).  Ops are taken in
 * program order.  False when out of memory. */
bool pass_ilp_candidates(ilp *s, int k);

/* ---- propagate_ilp_seq.c: sequence parallelism's candidates ---- */

/* Fills s->seq (one entry per dim id and one more, zeroed by the caller) from the
 * declared shardings of the inputs and params, after s->sharded_dim:
 * the TP axes (a param shards a dim over them, no input does) on each
 * sequence dim (nothing shards it; an input has it beside a sharded dim),
 * the axes the inputs shard each dim over, and which dims the arguments
 * have. */
void pass_ilp_seq_mark(ilp *s);
/* Whether mesh axis a may go to label l of op k as sequence parallelism:
 * l's dim is a sequence dim with TP axis a, and every label of the op is
 * a dim of some input or param (so not attention's key positions). */
bool pass_ilp_seq_option(const ilp *s, int k, int l, int a);
/* Whether layout `lay` of op k puts a TP axis on a sequence dim that
 * nothing shards. */
bool pass_ilp_seq_splits(const ilp *s, int k, const layout *lay);
/* Whether op k's layout `lay` stays among the candidates: any layout
 * that does not split a sequence dim, and one that does only if every
 * other used axis of more than one device splits a sequence or batch dim
 * (a dim the inputs shard over it). */
bool pass_ilp_seq_keep(const ilp *s, int k, const layout *lay);

/* ---- propagate_ilp_mem.c: the memory row ---- */

/* The memory row of s (built, s->ncols columns): its constant, bytes per
 * device of what the planner does not choose (params, optimizer state,
 * state, inputs, one gradient per optimized param, kept activations of
 * fixed sharding), into *fixed; the bytes of the kept activations each
 * column's layout makes, into coef[1..s->ncols] (coef[0] unused, every
 * entry written).  True when the plan can change the memory: some op's
 * candidates differ in those bytes, or a value is read in both passes (a
 * copy of it may be kept, pass_ilp_mem_copies). */
bool pass_ilp_mem_row(ilp *s, double *fixed, double *coef);
/* The least sum of coef over a plan: each op's smallest coefficient among
 * its columns not fixed at 0 (the row is separable over ops), bytes. */
double pass_ilp_mem_min(ilp *s, const double *coef);
/* sum_j coef[j] x[j] over columns 1..s->ncols, bytes. */
double pass_ilp_mem_value(const ilp *s, const double *coef, const double *x);
/* The copies a reshard makes for a forward consumer and a backward
 * consumer reads (kept from the forward to the backward pass, like the
 * activation itself): for each value, each pair of a forward and a
 * backward use and each sharding t both may require, a column z[v,t] in
 * [0, 1] with z >= q[fwd,t] + q[bwd,t] - p[v,t] - 1 (p: the producer
 * makes t itself, so no copy; 0 or 1 for a value of fixed sharding).
 * *coef grows to the new s->ncols, with the copy's bytes on z.  False
 * when out of memory. */
bool pass_ilp_mem_copies(ilp *s, double **coef);
/* Adds the row sum_j coef[j] x[j] <= budget (bytes) to s->lp; returns its
 * index, 0 when out of memory. */
int pass_ilp_mem_add(ilp *s, const double *coef, double budget);

/* ---- propagate_ilp_cm.c: collective matmul's exposed edge costs ---- */

/* The credit of consumer j hiding the last step of reshard v: from ->
 * B->sh[b], an AllGather, as a collective matmul (cost_cm_pairs,
 * cost_cm_hidden with j's fastest matmul among the candidates in group b):
 * a column h in [0, 1] with h <= e (column `e`, the edge of the pair) or,
 * when e is 0 (v's sharding is fixed), h <= q[u,b] (j's candidates in
 * group b), in j's row sum h <= 1.  The caller calls it only for the use
 * that reads the reshard first.  Nothing when the pair cannot hide. */
void pass_ilp_cm_ag(ilp *s, const ir_value *v, const ir_sharding *from, int j, const group *B, int b, int e);
/* The credit of producer k hiding the first step of reshard v: A->sh[a]
 * -> to, a ReduceScatter of its partial sums, run `trips` times a step
 * (with k's fastest matmul among its candidates in group a): h <= column
 * `col` (the reshard's y, or its edge when not shared), in k's row. */
void pass_ilp_cm_rs(ilp *s, const ir_value *v, int k, const group *A, int a, const ir_sharding *to,
                    double trips, int col);
/* After the serial solve left plan x (columns 1..s->ncols when it was
 * built) and the ops at the plan kept: solves again with the credits on
 * the objective, which is then each reshard's exposed time, and keeps its
 * plan if its step (pass_prop_step_time, as the cost pass schedules it) is
 * shorter (a plan that fits the HBM first, as the serial adoption).  Fills rep's cm_ fields; false when
 * out of memory. */
bool pass_ilp_cm_solve(ilp *s, int ms, double t0, const double *x, pass_prop_ilp_report *rep);

#endif
