/*
 * plan_cut.c - `einc plan` on a large table: every candidate estimated by a
 * cheap compile, the promising ones compiled in full (plan.h, plan_cut_run).
 *
 * A full compile of a candidate runs the whole planner: the first phase's
 * sweeps, the whole-program ILP (CLP and GLPK, with its second solve for
 * collective matmul) and seed 000's strategy portfolio, each strategy
 * scored by the step (docs/propagation.md).  On seed 000's question 3
 * (LLaMA-2 13B training on 4096 chips) that was 6 to 14 s of CPU a row
 * with GLPK alone and is about 4 s with CLP's relaxations, most of it in
 * the ILP, and its 213 rows of their own need about 500
 * compiles with the ZeRO, remat and schedule retries.  The
 * same compile with --ilp=off (the sweeps and the portfolio) takes under a
 * second, and it is a plan too: the full planner keeps the ILP's plan only
 * when its step is shorter (propagate.c, widen), and the portfolio then
 * keeps the shortest of that and its strategies, so a row's full step is
 * at most about its estimate (the portfolio's 1% margin and the choices
 * below aside).  On question 3 the estimate of the seed's FSDP x TP row is
 * its full step to the digit: the activations' layout that makes the step
 * comes from the portfolio, not the ILP.
 *
 * So every row is estimated, and the rows are then compiled in full in the
 * order of their estimates (with the search's choices of ZeRO,
 * rematerialisation and schedule, plan_price_row), until the next
 * estimate exceeds the best full step that fits by more than
 * PLAN_CUT_MARGIN (a pipelined row's step taken with its bubble
 * PLAN_PIPE_MARGIN larger, as plan_choose judges it against the
 * unpipelined rows, so a row that could win against it is compiled).
 * That cut is a heuristic, not a bound: it assumes the ILP shortens no
 * row's step by more than the margin below its estimate.
 * No sound bound separates the rows here (docs/propagation.md, "Seed 000's
 * question 3": cost_lower_bound's compute at the peak is the same for
 * every candidate, and the activations that separate TP from FSDP+TP are
 * the ILP's), so the table says which rows were cut and by what figures,
 * and --plan-search=all compiles every row in full.  A cut row is never
 * chosen; its figures are those of its --ilp=off plan, a plan einc can
 * compile (`einc FILE --chips N --ilp=off` is not how `-o` compiles it).
 */
#include "plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int plan_search_parse(const char *s, plan_search *out)
{
    static const char *const names[] = {"auto", "all", "cut"};
    for (int k = 0; k < 3; k++)
        if (strcmp(s, names[k]) == 0) {
            *out = (plan_search)k;
            return 0;
        }
    return -1;
}

bool plan_cut_active(const plan_table *t, int compiles)
{
    if (!t->option)
        return false;
    return t->search == PLAN_SEARCH_CUT || (t->search == PLAN_SEARCH_AUTO && compiles > PLAN_CUT_MIN_COMPILES);
}

/* qsort_r is not C17: the order sorts (estimate, index) pairs. */
typedef struct keyed {
    double estimate; /* seconds; failed estimates last */
    int k;           /* index into rows (and fresh) */
} keyed;

static int by_estimate(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->estimate != y->estimate)
        return x->estimate < y->estimate ? -1 : 1;
    return (x->k > y->k) - (x->k < y->k);
}

int plan_cut_run(plan_table *t, const int *rows, int n, plan_compile_fn compile, void *ctx)
{
    size_t cap = (size_t)(n > 0 ? n : 1);
    keyed *order = malloc(cap * sizeof *order);
    plan_row *fresh = malloc(cap * sizeof *fresh); /* each row as plan_run made it, before any compile */
    if (!order || !fresh) {
        free(order);
        free(fresh);
        return -1;
    }
    t->cut = true;
    t->estimated = 0;
    t->option(ctx, "ilp", "off");
    for (int k = 0; k < n; k++) {
        plan_row *row = &t->rows[rows[k]];
        fresh[k] = *row;
        *row = plan_price_once(t, &fresh[k], t->remat, 0, NULL, compile, ctx);
        row->estimate = row->ok ? row->step : 0.0;
        order[k] = (keyed){row->ok ? row->step : INFINITY, k};
    }
    t->option(ctx, "ilp", NULL);
    qsort(order, (size_t)n, sizeof *order, by_estimate);
    double best = INFINITY;
    for (int k = 0; k < n; k++) {
        plan_row *row = &t->rows[rows[order[k].k]];
        /* A row that does not compile without the ILP does not with it:
         * the errors are the frontend's and the first phase's. */
        if (!row->ok)
            continue;
        if (isfinite(best) && row->estimate > best * (1.0 + PLAN_CUT_MARGIN)) {
            row->estimated = true;
            t->estimated++;
            continue;
        }
        double estimate = row->estimate;
        *row = fresh[order[k].k];
        plan_price_row(t, row, compile, ctx);
        row->estimate = estimate;
        /* A pipelined row is chosen only beyond its bubble's margin
         * (plan_choose.c): the rows that could still beat it are those
         * within the cut's margin of that figure. */
        double judged = plan_pipe_judged(row);
        if (row->ok && row->fits && judged < best)
            best = judged;
    }
    t->cut_best = isfinite(best) ? best : 0.0;
    free(order);
    free(fresh);
    return 0;
}
