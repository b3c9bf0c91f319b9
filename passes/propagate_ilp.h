/*
 * propagate_ilp.h - what the two files of the whole-program ILP share:
 * propagate_ilp.c states and solves it, propagate_ilp_cands.c chooses each
 * op's candidate layouts (and merges simple ops into an operand).
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

/* One group: the distinct shardings among an op's candidates (produced,
 * or required of one operand), and each candidate's group. */
typedef struct group {
    int n;              /* distinct shardings */
    ir_sharding *sh;    /* them, n entries */
    int *of;            /* by candidate: index into sh */
    int cur;            /* the group of the op's current layout */
} group;

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
    double bound;       /* best bound seen in the tree (us) */
    long nodes;         /* branch-and-bound nodes selected */
    layout **own;       /* by op: its own candidates (own_candidates) */
    int *own_n;         /* and their count */
    bool merge;         /* simple ops merged into an operand (leader_operand) */
    bool *sharded_dim;  /* by dim id: some input, param, constraint or output shards it */
    double constant;    /* us the objective pays whatever the plan */
    bool oom;           /* an allocation failed */
} ilp;

/* Marks in s->sharded_dim the dims some input, param, state, constraint
 * or output shards, and fills s->own with every op's own candidates;
 * *small says whether the whole program's edge pairs stay within
 * ILP_FULL_PAIRS (else simple ops are merged).  False when out of memory. */
bool pass_ilp_own_all(ilp *s, bool *small);
/* Op k's candidates into s->cand[k], s->nc[k] and, for an op merged into
 * its leader operand's producer, s->col0[k] (the producer's columns; 0
 * for an op of its own, whose columns the caller makes).  Ops are taken in
 * program order.  False when out of memory. */
bool pass_ilp_candidates(ilp *s, int k);

#endif
