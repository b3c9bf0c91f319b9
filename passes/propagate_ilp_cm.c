/*
 * propagate_ilp_cm.c - the whole-program ILP's edge costs with collective
 * matmul's overlap: on a profile whose AllGather into a matmul, or
 * ReduceScatter of a matmul's partial sums, hides behind the matmul's
 * chunks (hw->collective_matmul; seed 001, case 2; Wang et al., ASPLOS'23),
 * a reshard edge costs its exposed time, not its whole time.
 *
 * The serial objective of propagate_ilp.c pays a reshard a -> b of value v
 * its whole time t (on y[v,a,b], or on the edge e[u,a,b] when it is not
 * shared).  The cost pass leaves only max(0, comm - mm (G - 1) / G) of a
 * collective at the reshard's end exposed (cost_collective_matmul_exposed):
 * its last step, an AllGather, behind the matmul that reads it first; its
 * first step, a ReduceScatter, behind the matmul that made v; each matmul
 * hiding one collective (cost_cm_pairs, the rule cost.c and the planner's
 * replay use).  So each pair (a, b) whose plan ends in such a step gets a
 * credit column h in [0, 1] with objective -hidden (cost_cm_hidden, times
 * the trip count), h <= the pair's edge (or y for a shared reshard's
 * ReduceScatter), and for each matmul a row sum h <= 1.  At an integral
 * point h is 1 only where the pair is chosen, and the objective is the
 * serial sum less what the chosen pairs hide: the edge cost is a function
 * of the (producer, consumer) strategy pair, as Alpa keeps edge costs per
 * pair (Zheng et al., OSDI'22, section 4.2), still linear.
 *
 * Three things make it an estimate, and the cost pass also overlaps the
 * reshards of params with compute, which no sum over edges sees, so the
 * plan is judged by the step replay (pass_prop_step_time: parameter
 * gathers overlapped, collective matmuls paired as the cost pass pairs
 * them): the matmul time is the fastest
 * among the consumer's (or producer's) candidates in the edge's group (a
 * group holds every candidate requiring, or producing, one sharding), so
 * the credit never exceeds what the chosen candidate hides; the AllGather
 * credit goes only to the first use of v that may need the target (a
 * later reader shares the reshard and hides nothing); a matmul's row lets
 * the solver take its largest credit, where the cost pass gives the first
 * collective in program order.
 *
 * The credits are columns from the start, fixed at 0 for the serial
 * solve, so that its plan and its proof (the certificate's "proven
 * optimal among N candidate layouts") are those of the serial objective;
 * pass_ilp_cm_solve frees them and solves again, from the serial basis
 * and within as many pivots as the serial relaxation took (past them the
 * serial plan stays; docs/propagation.md, "The pivot budget").
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "propagate_ilp.h"

/* The least share of the serial optimum the credits must be able to take
 * off for the second solve to run: the portfolio's margin, the model's
 * rounding (PORTFOLIO_MARGIN). */
#define CM_MIN_GAIN 0.01
/* The least credit freed for the second solve, a share of the serial optimum. */
#define CM_MIN_CREDIT 0.002

/* Seconds of one run of op k's fastest matmul among its candidates in
 * group g of gr; 0 when one of them is no matmul the pass can pair (a
 * MeshSlice loop). */
static double fastest_matmul(ilp *s, int k, const group *gr, int g)
{
    double mm = INFINITY;
    for (int c = 0; c < s->nc[k]; c++)
        if (gr->of[c] == g)
            mm = fmin(mm, pass_prop_matmul_time(s->p, k, &s->cand[k][c]));
    return isinf(mm) ? 0.0 : mm;
}

/* A credit column h of `us` microseconds for matmul op k, fixed at 0 until
 * pass_ilp_cm_solve, and the row `h <= ...` whose right side (the edge or
 * reshard columns the credit needs) the caller adds: the row's index, 0
 * when there is nothing to credit (us not above 0) or out of memory. */
static int credit_row(ilp *s, int k, double us)
{
    if (!(us > 0))
        return 0;
    if (!s->cm_row && !(s->cm_row = calloc((size_t)s->p->nops, sizeof *s->cm_row))) {
        s->oom = true;
        return 0;
    }
    if (s->ncm == s->cm_cap) {
        int ncap = s->cm_cap ? 2 * s->cm_cap : 256;
        int *nc = realloc(s->cm_col, (size_t)ncap * sizeof *nc);
        if (nc)
            s->cm_col = nc;
        double *nu = realloc(s->cm_us, (size_t)ncap * sizeof *nu);
        if (nu)
            s->cm_us = nu;
        int *no = realloc(s->cm_op, (size_t)ncap * sizeof *no);
        if (no)
            s->cm_op = no;
        if (!nc || !nu || !no) {
            s->oom = true;
            return 0;
        }
        s->cm_cap = ncap;
    }
    int h = pass_ilp_col_new(s, 0.0, false, 0.0, 0.0);
    glp_set_col_bnds(s->lp, h, GLP_FX, 0.0, 0.0);
    s->cm_col[s->ncm] = h;
    s->cm_op[s->ncm] = k;
    s->cm_us[s->ncm++] = us;
    if (!s->cm_row[k]) {
        s->cm_row[k] = pass_ilp_row_new(s, GLP_FX);
        glp_set_row_bnds(s->lp, s->cm_row[k], GLP_UP, 0.0, 1.0);
    }
    pass_ilp_nz_add(s, s->cm_row[k], h, 1.0);
    int r = pass_ilp_row_new(s, GLP_LO);
    pass_ilp_nz_add(s, r, h, -1.0);
    return r;
}

void pass_ilp_cm_ag(ilp *s, const ir_value *v, const ir_sharding *from, int j, const group *B, int b, int e)
{
    prop *p = s->p;
    const ir_op *op = p->ops[j].op;
    int64_t trips = ir_op_trips(p->m, op);
    if (!s->cm_on || !cost_cm_pairs(p->m, p->hw, op, trips))
        return;
    reshard_ends en = pass_prop_reshard_ends(p, v, from, &B->sh[b]);
    double us = cost_cm_hidden(p->hw, en.tail_ag, fastest_matmul(s, j, B, b), en.tail_group) * (double)trips * 1e6;
    int r = credit_row(s, j, us);
    if (!r)
        return;
    if (e) {
        pass_ilp_nz_add(s, r, e, 1.0);
        return;
    }
    for (int c = 0; c < s->nc[j]; c++)
        if (B->of[c] == b)
            pass_ilp_nz_add(s, r, s->col0[j] + c, 1.0);
}

void pass_ilp_cm_rs(ilp *s, const ir_value *v, int k, const group *A, int a, const ir_sharding *to,
                    double trips, int col)
{
    prop *p = s->p;
    if (!s->cm_on || !cost_cm_pairs(p->m, p->hw, p->ops[k].op, (int64_t)trips))
        return;
    reshard_ends en = pass_prop_reshard_ends(p, v, &A->sh[a], to);
    double us = cost_cm_hidden(p->hw, en.head_rs, fastest_matmul(s, k, A, a), en.head_group) * trips * 1e6;
    int r = credit_row(s, k, us);
    if (!r)
        return;
    pass_ilp_nz_add(s, r, col, 1.0);
}

/* Microseconds the credits can take off any plan at most: each matmul's
 * largest (its row lets it take one). */
static double credit_bound(const ilp *s)
{
    double *best = calloc((size_t)s->p->nops + 1, sizeof *best), sum = 0.0;
    if (!best)
        return INFINITY;
    for (int i = 0; i < s->ncm; i++)
        best[s->cm_op[i]] = fmax(best[s->cm_op[i]], s->cm_us[i]);
    for (int k = 0; k < s->p->nops; k++)
        sum += best[k];
    free(best);
    return sum;
}

/* --debug-pass: what the second solve did; returns `ret`. */
static bool told(const prop *p, const pass_prop_ilp_report *rep, bool ret)
{
    if (p->ctx->log)
        fprintf(p->ctx->log, "propagate: ILP with collective matmul: %d credits (%d freed) taking off at most %.4g us, "
                "%s (%d simplex iterations, the serial solve %d, %ld nodes, %.3g s); step %.4g us against %.4g us, %s\n", rep->cm_credits,
                rep->cm_freed, rep->cm_bound * 1e6, rep->cm_solved ? "solved" : "not solved", rep->cm_iterations, rep->iterations, rep->cm_nodes,
                rep->cm_seconds, rep->cm_after * 1e6, rep->cm_before * 1e6,
                rep->cm_adopted ? "adopted" : "kept the serial plan");
    return ret;
}

bool pass_ilp_cm_solve(ilp *s, int ms, double t0, const double *x, pass_prop_ilp_report *rep)
{
    prop *p = s->p;
    rep->cm_credits = s->ncm;
    /* No plan's exposed objective is below the serial optimum less that
     * bound: when it is within the model's rounding (CM_MIN_GAIN of the
     * serial optimum), the second solve cannot pay for itself. */
    rep->cm_bound = credit_bound(s) * 1e-6;
    if (rep->cm_bound < CM_MIN_GAIN * rep->objective)
        return told(p, rep, true);
    /* A credit below CM_MIN_CREDIT of the serial optimum stays at 0: each
     * freed column costs the simplex pivots, and those change no plan by
     * more than the model's rounding. */
    int freed = 0;
    for (int i = 0; i < s->ncm; i++)
        if (s->cm_us[i] >= CM_MIN_CREDIT * rep->objective * 1e6) {
            glp_set_col_bnds(s->lp, s->cm_col[i], GLP_DB, 0.0, 1.0);
            glp_set_obj_coef(s->lp, s->cm_col[i], -s->cm_us[i]);
            freed++;
        }
    rep->cm_freed = freed;
    /* The serial plan, no credit taken, is the first incumbent, unless the
     * memory row added columns it has no value for. */
    s->warm_given = s->ncols > rep->cols;
    if (!s->warm_given) {
        memcpy(s->warm + 1, x + 1, (size_t)rep->cols * sizeof *x);
        for (int i = 0; i < s->ncm; i++)
            s->warm[s->cm_col[i]] = 0.0;
    }
    s->nodes = 0;
    s->from_basis = true;
    /* Should CLP not finish it, GLPK's primal simplex from the serial basis
     * takes at most as many pivots as the serial relaxation took
     * (docs/propagation.md, "The pivot budget"): past that, the serial plan
     * stays, the same on every machine load. */
    s->pivot_budget = rep->iterations > 0 ? rep->iterations : 1;
    pass_prop_ilp_report r2 = *rep;
    double t1 = pass_ilp_now();
    bool solved = pass_ilp_solve(s, ms, t0, &r2);
    rep->cm_seconds = pass_ilp_now() - t1;
    rep->cm_iterations = r2.iterations - rep->iterations;
    rep->cm_nodes = r2.nodes;
    if (!solved)
        return told(p, rep, true);
    rep->cm_solved = true;
    rep->cm_objective = r2.objective;
    double *x2 = malloc(((size_t)s->ncols + 1) * sizeof *x2);
    layout *keep = malloc((size_t)p->nops * sizeof *keep + 1);
    if (!x2 || !keep) {
        free(x2);
        free(keep);
        return told(p, rep, false);
    }
    for (int j = 1; j <= s->ncols; j++)
        x2[j] = glp_mip_col_val(s->lp, j);
    for (int k = 0; k < p->nops; k++)
        keep[k] = p->ops[k].lay;
    rep->cm_before = pass_prop_step_time(p);
    bool fit_before = !rep->mem_hbm || pass_prop_memory(p) <= rep->mem_hbm;
    pass_ilp_apply(s, x2);
    rep->cm_after = pass_prop_step_time(p);
    bool fit_after = !rep->mem_hbm || pass_prop_memory(p) <= rep->mem_hbm;
    if (fit_after != fit_before ? fit_after : rep->cm_after < rep->cm_before * (1.0 - 1e-9)) {
        rep->cm_adopted = true;
        for (int k = 0; k < p->nops; k++)
            rep->cm_changed += memcmp(keep[k].choice, p->ops[k].lay.choice, sizeof keep[k].choice) != 0;
    } else {
        for (int k = 0; k < p->nops; k++)
            p->ops[k].lay = keep[k];
    }
    free(x2);
    free(keep);
    return told(p, rep, true);
}
