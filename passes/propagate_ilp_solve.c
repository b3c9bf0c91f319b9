/*
 * propagate_ilp_solve.c - solving the whole-program ILP: the relaxation
 * by CLP (propagate_ilp_clp.c), then GLPK's branch and cut from the local
 * search's plan, within a time limit and, so that a program gets the same
 * plan on a loaded machine, within pivot and node limits
 * (docs/propagation.md, "Planning time" and "The solvers").
 */
#include <math.h>
#include <time.h>

#include "propagate_ilp.h"

static void callback(glp_tree *tree, void *info)
{
    ilp *s = info;
    switch (glp_ios_reason(tree)) {
    case GLP_IHEUR:
        if (!s->warm_given) {
            s->warm_given = true;
            glp_ios_heur_sol(tree, s->warm);
        }
        break;
    case GLP_ISELECT:
        /* A node limit rather than the clock, for the same plan every time. */
        if (++s->nodes > ILP_MAX_NODES ||
            glp_get_it_cnt(glp_ios_get_prob(tree)) - s->tree_it0 > s->tree_budget)
            glp_ios_terminate(tree);
        /* fall through */
    case GLP_IBINGO: {
        int node = glp_ios_best_node(tree);
        if (node)
            s->bound = glp_ios_node_bound(tree, node);
        break;
    }
    default:
        break;
    }
}

double pass_ilp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Simplex pivots s->lp has taken in all, CLP's and GLPK's (the tree's
 * included). */
static int pivots_so_far(const ilp *s)
{
    return glp_get_it_cnt(s->lp) + s->clp_pivots;
}

/* pass_ilp_solve: s->lp's relaxation (CLP's dual simplex after its
 * presolver, GLPK's as the fallback), then GLPK's branch and cut from the
 * warm start, within ms milliseconds from t0 in all.  Fills rep's status,
 * iterations, nodes, objective and bounds; false when no integral plan was
 * found (the relaxation infeasible, or a limit reached first). */
bool pass_ilp_solve(ilp *s, int ms, double t0, pass_prop_ilp_report *rep)
{
    glp_smcp sm;
    glp_init_smcp(&sm);
    sm.msg_lev = GLP_MSG_OFF;
    sm.presolve = GLP_ON;
    sm.meth = GLP_DUALP;
    sm.tm_lim = ms;
    /* The iteration limit, not the clock, decides on a loaded machine, so
     * that a program gets the same plan every time. */
    sm.it_lim = ILP_ITERS_PER_ROW * s->nrows + 10000;
    /* CLP's dual simplex after its presolver, from scratch, for the
     * second solve too: from the serial basis its primal simplex took
     * longer (docs/propagation.md, "The solvers").  GLPK's primal simplex
     * then restarts from CLP's basis: it only finishes. */
    glp_smcp finish = sm;
    finish.presolve = GLP_OFF;
    finish.meth = GLP_PRIMAL;
    int ret = 1, pivots = 0, it_before = pivots_so_far(s);
    double secs = (ms - (pass_ilp_now() - t0) * 1e3) * 1e-3;
    int clp = pass_ilp_clp_solve(s->lp, sm.it_lim, secs, &pivots);
    s->clp_pivots += pivots;
    if (clp == PASS_ILP_CLP_OPTIMAL) {
        ret = glp_simplex(s->lp, &finish);
    } else if (s->from_basis) {
        /* GLPK alone: only the objective and some bounds changed since the
         * last solve, so its primal simplex goes on from that basis, still
         * feasible, within the pivot budget; past it, not solved rather
         * than from scratch. */
        if (s->pivot_budget > 0 && s->pivot_budget < finish.it_lim)
            finish.it_lim = s->pivot_budget;
        ret = glp_simplex(s->lp, &finish);
        if (ret == GLP_EITLIM) {
            rep->iterations = pivots_so_far(s);
            rep->status = PASS_ILP_TIME_LIMIT;
            return false;
        }
    }
    /* GLPK alone, from scratch, when CLP could not finish. */
    if (ret != 0 || glp_get_status(s->lp) != GLP_OPT)
        ret = glp_simplex(s->lp, &sm);
    rep->iterations = pivots_so_far(s);
    if (ret != 0 || glp_get_status(s->lp) != GLP_OPT) {
        rep->status = PASS_ILP_TIME_LIMIT;
        return false;
    }
    rep->lp_bound = glp_get_obj_val(s->lp) * 1e-6;
    s->bound = glp_get_obj_val(s->lp);
    glp_iocp io;
    glp_init_iocp(&io);
    io.msg_lev = GLP_MSG_OFF;
    io.presolve = GLP_OFF; /* the heuristic callback needs the original columns */
    io.cb_func = callback;
    io.cb_info = s;
    io.mip_gap = 1e-6;
    int left = ms - (int)((pass_ilp_now() - t0) * 1e3);
    io.tm_lim = left > 1 ? left : 1;
    /* The tree's pivots are bounded by the relaxation's, as the clock
     * would bound them, but the same on every machine load
     * (docs/propagation.md, "The solvers"). */
    s->tree_it0 = glp_get_it_cnt(s->lp);
    int relax = (rep->iterations - it_before) / ILP_TREE_PIVOT_COST;
    s->tree_budget = relax > ILP_TREE_MIN_PIVOTS ? relax : ILP_TREE_MIN_PIVOTS;
    ret = glp_intopt(s->lp, &io);
    int st = glp_mip_status(s->lp);
    if (st != GLP_OPT && st != GLP_FEAS) {
        rep->status = PASS_ILP_TIME_LIMIT;
        return false;
    }
    double obj = glp_mip_obj_val(s->lp);
    rep->status = st == GLP_OPT && ret == 0 ? PASS_ILP_OPTIMAL : PASS_ILP_TIME_LIMIT;
    rep->nodes = s->nodes;
    rep->objective = obj * 1e-6;
    rep->bound = (rep->status == PASS_ILP_OPTIMAL ? obj : fmin(obj, s->bound)) * 1e-6;
    return true;
}

