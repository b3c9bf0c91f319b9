/*
 * propagate_search.c - branch and bound over the layouts of all ops.
 *
 * The sweeps and joint moves of propagate.c stop at a local optimum: a
 * plan that pays off only when three or more ops change at once (shard a
 * chain of ops over an axis none of them uses yet, then gather once at the
 * end) is out of their reach.  This pass searches the layouts of every op
 * jointly, with that local optimum as the incumbent, by depth-first branch
 * and bound in program order (Land and Doig's method, as Alpa's intra-op
 * pass solves the same problem with an ILP; the objective and its
 * decomposition are the ones of propagate_layout.c).
 *
 * The objective is a sum of op terms (compute under the op's layout) and
 * value terms (the reshards from a value's producer to each distinct
 * sharding its consumers, constraint and outputs need).  In program order a
 * value's term is final once its producer and its last consumer have a
 * layout, so at depth d the terms of the ops 0..d-1 and of the values they
 * close are exact, and every term still open is >= 0.  A branch is cut when
 * those terms plus a lower bound of the compute of the ops left (each op's
 * fastest candidate) are no better than the incumbent.  Candidates are
 * tried cheapest first, so good plans come early and cut the rest.
 *
 * The search is exact within the candidates of propagate_layout.c when it
 * finishes inside its budget of layout evaluations; otherwise it keeps the
 * best plan found, never a worse one than the incumbent.  Past BB_MAX_OPS
 * ops the budget would not reach a single complete plan, so such programs
 * are left to the sweeps.  A repeated block's carried shardings are fixed
 * before the search (propagate_loop.c): to it they are sources, like
 * inputs, and targets of the body's new value.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "propagate_internal.h"

#define BB_LAYOUTS 128 /* candidate layouts per op, as in the joint moves */

/* The search's state. */
typedef struct bb {
    prop *p;
    int n;            /* ops, searched in program order */
    int *close_start; /* CSR by depth d: values whose terms are final once ops 0..d-1 have layouts */
    int *close;       /* their ids */
    double *rest;     /* rest[d]: lower bound of the compute time of ops d..n-1 (seconds) */
    layout *cands;    /* BB_LAYOUTS scratch layouts per depth */
    cost *inc;        /* and their incremental costs */
    int *order;       /* and the order they are tried in */
    layout *best;     /* best complete assignment found (starts as the incumbent) */
    cost best_cost;   /* its objective */
    long evals;       /* layout evaluations so far */
    long budget;      /* and the most allowed */
    bool improved;    /* a plan better than the incumbent was found */
} bb;

/* The terms that become final when op d gets its layout (already set):
 * its compute and the values it closes. */
static cost closing_cost(bb *s, int d)
{
    prop *p = s->p;
    cost c = {pass_prop_compute_time(p, d, &p->ops[d].lay), 0.0, 0};
    for (int i = s->close_start[d + 1]; i < s->close_start[d + 2]; i++)
        c = pass_prop_cost_add(c, pass_prop_value_cost(p, s->close[i]));
    return c;
}

static void dfs(bb *s, int d, cost acc)
{
    prop *p = s->p;
    if (d == s->n) {
        if (pass_prop_cost_less(acc, s->best_cost)) {
            s->best_cost = acc;
            s->improved = true;
            for (int k = 0; k < s->n; k++)
                s->best[k] = p->ops[k].lay;
        }
        return;
    }
    if (s->evals >= s->budget)
        return;
    opinfo *oi = &p->ops[d];
    layout *cand = s->cands + (size_t)d * BB_LAYOUTS;
    cost *inc = s->inc + (size_t)d * BB_LAYOUTS;
    int *order = s->order + (size_t)d * BB_LAYOUTS;
    int nc = pass_prop_candidates(p, d, cand, BB_LAYOUTS);
    oi->decided = true;
    for (int i = 0; i < nc; i++) {
        oi->lay = cand[i];
        inc[i] = closing_cost(s, d);
        order[i] = i;
    }
    s->evals += nc > 0 ? nc : 0;
    /* Cheapest first (insertion sort: at most BB_LAYOUTS entries). */
    for (int i = 1; i < nc; i++)
        for (int j = i; j > 0 && pass_prop_cost_less(inc[order[j]], inc[order[j - 1]]); j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int i = 0; i < nc && s->evals < s->budget; i++) {
        cost next = pass_prop_cost_add(acc, inc[order[i]]);
        cost bound = next;
        bound.time += s->rest[d + 1];
        /* Later candidates cost at least as much: nothing after this can win. */
        if (!pass_prop_cost_less(bound, s->best_cost))
            break;
        oi->lay = cand[order[i]];
        dfs(s, d + 1, next);
    }
    oi->decided = false;
}

/* Depth after which value `id`'s term is final: one past its producer and
 * its last consumer (0 for an input nothing reads). */
static int close_depth(const prop *p, int id)
{
    int d = p->def[id] + 1;
    for (int u = p->use_start[id]; u < p->use_start[id + 1]; u++)
        if (p->uses[u].op + 1 > d)
            d = p->uses[u].op + 1;
    return d;
}

int pass_prop_branch_bound(prop *p, long budget)
{
    /* Past BB_MAX_OPS ops the budget does not reach a single leaf. */
    if (p->nops == 0 || p->nops > BB_MAX_OPS)
        return 0;
    bb s;
    memset(&s, 0, sizeof s);
    s.p = p;
    s.n = p->nops;
    s.budget = budget;
    size_t nl = (size_t)s.n * BB_LAYOUTS;
    s.close_start = calloc((size_t)s.n + 3, sizeof *s.close_start);
    s.close = malloc(((size_t)p->nvalues + 1) * sizeof *s.close);
    s.rest = calloc((size_t)s.n + 1, sizeof *s.rest);
    s.cands = malloc(nl * sizeof *s.cands);
    s.inc = malloc(nl * sizeof *s.inc);
    s.order = malloc(nl * sizeof *s.order);
    s.best = malloc((size_t)s.n * sizeof *s.best);
    int improved = 0;
    if (!s.close_start || !s.close || !s.rest || !s.cands || !s.inc || !s.order || !s.best)
        goto out;
    /* Values by the depth that closes them (CSR, shifted by one so that
     * close_start[d + 1] .. close_start[d + 2] are those of depth d + 1). */
    for (int id = 0; id < p->nvalues; id++)
        s.close_start[close_depth(p, id) + 1]++;
    for (int d = 0; d <= s.n + 1; d++)
        s.close_start[d + 1] += s.close_start[d];
    {
        int *fill = calloc((size_t)s.n + 2, sizeof *fill);
        if (!fill)
            goto out;
        for (int id = 0; id < p->nvalues; id++) {
            int d = close_depth(p, id);
            s.close[s.close_start[d] + fill[d]++] = id;
        }
        free(fill);
    }
    /* The incumbent, and each op's fastest candidate for the bound. */
    s.best_cost = pass_prop_total_cost(p);
    for (int k = s.n - 1; k >= 0; k--) {
        s.best[k] = p->ops[k].lay;
        int nc = pass_prop_candidates(p, k, s.cands, BB_LAYOUTS);
        double fastest = pass_prop_compute_time(p, k, &p->ops[k].lay);
        for (int i = 0; i < nc; i++)
            fastest = fmin(fastest, pass_prop_compute_time(p, k, &s.cands[i]));
        s.rest[k] = s.rest[k + 1] + fastest;
    }
    for (int k = 0; k < s.n; k++)
        p->ops[k].decided = false;
    cost acc = {0.0, 0.0, 0};
    for (int i = s.close_start[0]; i < s.close_start[1]; i++)
        acc = pass_prop_cost_add(acc, pass_prop_value_cost(p, s.close[i]));
    dfs(&s, 0, acc);
    for (int k = 0; k < s.n; k++) {
        improved += memcmp(p->ops[k].lay.choice, s.best[k].choice, sizeof s.best[k].choice) != 0;
        p->ops[k].lay = s.best[k];
        p->ops[k].decided = true;
    }
    improved = s.improved ? improved : 0;
    if (p->ctx->log)
        fprintf(p->ctx->log, "propagate: branch and bound: %ld layout evaluations (budget %ld)%s, %s\n", s.evals,
                budget, s.evals >= budget ? ", stopped at the budget" : ", exhaustive over the candidates",
                s.improved ? "found a better plan" : "the sweeps' plan is the best");
out:
    free(s.close_start);
    free(s.close);
    free(s.rest);
    free(s.cands);
    free(s.inc);
    free(s.order);
    free(s.best);
    return improved;
}
