/*
 * propagate_ilp_clp.c - the whole-program ILP's linear relaxations solved
 * by COIN-OR CLP, whose dual simplex takes a tenth of GLPK's time on
 * these programs (docs/propagation.md, "The solvers"), the optimal basis
 * handed back to GLPK, which runs branch and cut from it as before.
 *
 * The problem is copied from GLPK's object column by column; the basis
 * goes both ways as each solver's status codes.  CLP never decides a plan
 * alone: GLPK's primal simplex restarts from the basis CLP found (a few
 * pivots at most, none when both agree), so the relaxation GLPK's tree
 * starts from is GLPK's own, and a basis CLP could not finish leaves
 * GLPK to solve from scratch.
 */
#include <float.h>
#include <stdlib.h>

#include <Clp_C_Interface.h>

#include "propagate_ilp.h"

/* CLP's status codes (ClpSimplex.hpp's Status). */
enum { CLP_FREE = 0, CLP_BASIC = 1, CLP_AT_UPPER = 2, CLP_AT_LOWER = 3, CLP_SUPERBASIC = 4, CLP_FIXED = 5 };

/* GLPK replaces a status that does not suit the variable's bounds (a
 * superbasic variable, which an optimal basis has none of, included). */
static int to_glp(unsigned char clp_stat)
{
    switch (clp_stat & 7) {
    case CLP_BASIC: return GLP_BS;
    case CLP_AT_UPPER: return GLP_NU;
    case CLP_FREE: return GLP_NF;
    case CLP_FIXED: return GLP_NS;
    default: return GLP_NL;
    }
}

static void bounds(int type, double lb, double ub, double *lo, double *hi)
{
    *lo = type == GLP_FR || type == GLP_UP ? -DBL_MAX : lb;
    *hi = type == GLP_FR || type == GLP_LO ? DBL_MAX : ub;
}

/* A CLP model of lp's relaxation (the integer marks dropped), or NULL when
 * out of memory. */
static Clp_Simplex *copy_of(glp_prob *lp)
{
    int m = glp_get_num_rows(lp), n = glp_get_num_cols(lp), nz = glp_get_num_nz(lp);
    CoinBigIndex *start = malloc(((size_t)n + 1) * sizeof *start);
    int *index = malloc(((size_t)nz + 1) * sizeof *index);
    int *ind = malloc(((size_t)m + 1) * sizeof *ind);
    double *value = malloc(((size_t)nz + 1) * sizeof *value);
    double *val = malloc(((size_t)m + 1) * sizeof *val);
    double *cl = malloc(((size_t)n + 1) * sizeof *cl), *cu = malloc(((size_t)n + 1) * sizeof *cu);
    double *obj = malloc(((size_t)n + 1) * sizeof *obj);
    double *rl = malloc(((size_t)m + 1) * sizeof *rl), *ru = malloc(((size_t)m + 1) * sizeof *ru);
    Clp_Simplex *model = NULL;
    if (!start || !index || !ind || !value || !val || !cl || !cu || !obj || !rl || !ru)
        goto out;
    CoinBigIndex pos = 0;
    for (int j = 1; j <= n; j++) {
        start[j - 1] = pos;
        int len = glp_get_mat_col(lp, j, ind, val);
        for (int t = 1; t <= len; t++) {
            index[pos] = ind[t] - 1;
            value[pos++] = val[t];
        }
        bounds(glp_get_col_type(lp, j), glp_get_col_lb(lp, j), glp_get_col_ub(lp, j), &cl[j - 1], &cu[j - 1]);
        obj[j - 1] = glp_get_obj_coef(lp, j);
    }
    start[n] = pos;
    for (int i = 1; i <= m; i++)
        bounds(glp_get_row_type(lp, i), glp_get_row_lb(lp, i), glp_get_row_ub(lp, i), &rl[i - 1], &ru[i - 1]);
    model = Clp_newModel();
    if (!model)
        goto out;
    Clp_setLogLevel(model, 0);
    Clp_loadProblem(model, n, m, start, index, value, cl, cu, obj, rl, ru);
    Clp_setOptimizationDirection(model, glp_get_obj_dir(lp) == GLP_MAX ? -1.0 : 1.0);
out:
    free(start), free(index), free(ind), free(value), free(val);
    free(cl), free(cu), free(obj), free(rl), free(ru);
    return model;
}

int pass_ilp_clp_solve(glp_prob *lp, int it_lim, double seconds, int *pivots)
{
    *pivots = 0;
    Clp_Simplex *model = copy_of(lp);
    if (!model)
        return PASS_ILP_CLP_FAILED;
    int m = glp_get_num_rows(lp), n = glp_get_num_cols(lp);
    Clp_setMaximumIterations(model, it_lim);
    Clp_setMaximumSeconds(model, seconds > 0.001 ? seconds : 0.001);
    Clp_initialDualSolve(model);
    *pivots = Clp_numberIterations(model);
    /* Clp_status: 0 optimal, 3 a limit reached (iterations or seconds). */
    int status = Clp_status(model);
    int ret = status == 0 ? PASS_ILP_CLP_OPTIMAL : status == 3 ? PASS_ILP_CLP_LIMIT : PASS_ILP_CLP_FAILED;
    if (ret == PASS_ILP_CLP_OPTIMAL && Clp_statusExists(model)) {
        const unsigned char *out = Clp_statusArray(model);
        for (int j = 1; j <= n; j++)
            glp_set_col_stat(lp, j, to_glp(out[j - 1]));
        for (int i = 1; i <= m; i++)
            glp_set_row_stat(lp, i, to_glp(out[n + i - 1]));
    } else if (ret == PASS_ILP_CLP_OPTIMAL) {
        ret = PASS_ILP_CLP_FAILED;
    }
    Clp_deleteModel(model);
    return ret;
}
