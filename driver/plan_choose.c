/*
 * plan_choose.c - which candidate `einc plan` chooses (plan.h,
 * plan_choose): the fastest that fits, with two tie rules.
 *
 * Steps within PLAN_TIE of each other tie, and the smaller memory wins:
 * the cost model does not separate them.  A pipelined row's step has one
 * more uncertain term, its bubble: the schedule's simulated idle share of
 * the makespan (passes/cost_pipe.c), which a run measures above or below
 * the prediction by a few points whatever the bubble's size
 * (docs/pipeline.md, "Issue 25's bench targets, read honestly": what a run
 * adds is additive).  So a pipelined row is chosen over the best
 * unpipelined row that fits only when it is still faster with its bubble
 * PLAN_PIPE_MARGIN larger (plan_pipe_judged); within that margin the
 * unpipelined row wins: it runs no schedule whose bubble the cost model
 * can miss, and often holds less memory (seed 000's question 3: 10.7 GiB
 * for FSDP+TP against 35.6 GiB for PP+DP, whose stages hold their layers'
 * weights whole), seed 000's advice for ICI-connected TPU slices
 * (pipelining is the GPU's strategy).  Rows left
 * at their estimate (plan_cut.c) are never chosen.
 */
#include "plan.h"

#include <math.h>

#define PLAN_TIE 1e-3 /* steps this close (relative) are a tie: less memory decides */

double plan_pipe_judged(const plan_row *r)
{
    if (!r->pp || !(r->makespan > 0))
        return r->step;
    /* The makespan is busy / (1 - b) for a stage's busy time; with the
     * bubble b + e it is busy / (1 - b - e), longer by
     * makespan * e / (1 - b - e).  The gradient reductions and the
     * update after it (the rest of the step) have no bubble. */
    double busy = 1.0 - r->bubble - PLAN_PIPE_MARGIN;
    if (!(busy > 0))
        return INFINITY;
    return r->step + r->makespan * PLAN_PIPE_MARGIN / busy;
}

/* Whether row r is preferred to c (NULL: nothing yet), both compiled: it
 * fits where c does not; both fit and r is faster by more than PLAN_TIE;
 * or they tie (or neither fits) and r takes less memory. */
static bool preferred(const plan_row *r, const plan_row *c)
{
    if (!c)
        return true;
    bool tie = fabs(r->step - c->step) <= PLAN_TIE * fmax(r->step, c->step);
    return (r->fits && !c->fits) || (r->fits == c->fits && r->fits && !tie && r->step < c->step) ||
           (r->fits == c->fits && (!r->fits || tie) && r->memory < c->memory);
}

/* Which rows best_of considers. */
typedef enum which {
    WHICH_ALL,         /* every compiled row */
    WHICH_UNPIPELINED, /* the unpipelined rows alone */
    WHICH_AGAINST,     /* the unpipelined rows, and the pipelined rows that fit and whose judged
                          step is below the step of `u` (best_of) */
} which;

/* The preferred row among t's rows compiled in full that `w` admits, or -1. */
static int best_of(const plan_table *t, which w, const plan_row *u)
{
    int best = -1;
    for (int i = 0; i < t->n; i++) {
        const plan_row *r = &t->rows[i];
        if (!r->ok || r->estimated)
            continue;
        bool beats_u = w == WHICH_AGAINST && r->fits && plan_pipe_judged(r) < u->step;
        if (r->pp && (w == WHICH_UNPIPELINED || (w == WHICH_AGAINST && !beats_u)))
            continue;
        if (preferred(r, best >= 0 ? &t->rows[best] : NULL))
            best = i;
    }
    return best;
}

void plan_choose(plan_table *t)
{
    t->pipe_lost = t->pipe_rival = -1;
    int fastest = best_of(t, WHICH_ALL, NULL);
    int u = best_of(t, WHICH_UNPIPELINED, NULL);
    t->chosen = fastest;
    if (fastest < 0 || u < 0 || !t->rows[u].fits || !t->rows[fastest].pp)
        return;
    t->pipe_rival = u;
    t->chosen = best_of(t, WHICH_AGAINST, &t->rows[u]);
    if (t->chosen != fastest)
        t->pipe_lost = fastest;
}
