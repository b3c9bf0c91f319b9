/*
 * propagate_ilp.c - the whole program's layouts as one integer linear
 * program, solved by GLPK.
 *
 * The sweeps, joint moves and branch and bound of propagate.c move one op,
 * or an op and its readers, at a time; on a whole model that is not
 * enough.  The plan that seed 000 writes for FSDP + TP (the residual stream
 * on [B_X, T, D], every weight gathered over X) differs from the plan that
 * keeps D sharded over X in every op of a layer at once, and each op alone
 * gains nothing by switching.  This file states the planner's own
 * objective for all ops together and lets a well-kept MIP solver find its
 * optimum, as Alpa's intra-operator pass does (Zheng et al., "Alpa:
 * Automating Inter- and Intra-Operator Parallelism for Distributed Deep
 * Learning", OSDI'22, section 4.2: a strategy variable per op, resharding
 * costs on edges).
 *
 * The formulation.  Op k has candidate layouts c (every used mesh axis on
 * any label of an operand, on nothing, or carrying an operand's partial
 * sums; the layout the local search chose is always among them) and a
 * binary x[k,c], exactly one per op.  Its compute time under c is the
 * coefficient of x[k,c].  A value v produced by op k has the sharding of
 * k's layout; group k's candidates by the sharding they produce:
 * p[v,a] = sum of x[k,c] producing a.  A use of v as operand i of op j
 * groups j's candidates by what they require of operand i:
 * q[u,b] = sum of x[j,c] requiring b.  As in Alpa, each use has edge
 * variables e[u,a,b] >= 0 with sum_b e[u,a,b] = p[v,a] and
 * sum_a e[u,a,b] = q[u,b]; in an integral solution e[u,a,b] is the product
 * p[v,a] q[u,b], and the pair of constraints is much tighter than the
 * textbook e >= p + q - 1.  Pairs whose reshard is impossible (partial sums
 * cannot be created) get no variable, so the transport rows forbid them.
 * Unlike Alpa's edge costs, einc emits one reshard of v per distinct
 * target sharding, shared by every consumer that needs it
 * (propagate_cost.c), so costs sit on y[v,a,b] >= e[u,a,b] for every use
 * u: the reshard a -> b is paid once, however many uses need b.  A value
 * whose sharding is fixed (an input, a param, a constrained result, a
 * loop's carried value) has w[v,b] >= q[u,b] instead.  Targets that do not
 * depend on a consumer's layout (a loop's carried sharding, an output's
 * constraint, a bare output's reduced sharding) are rows y[v,a,b] >= p[v,a].
 * A repeated block's ops and reshards are weighed by their trip count, so
 * the body is planned once for all its layers.
 *
 * The objective is then exactly the serial objective of propagate_cost.c
 * (pass_prop_total_cost) at every integral point, up to two things decided
 * from the plan the local search left: a MeshSlice credit that depends on
 * the op's readers, and a reshard's trip count when consumers of one value
 * run a different number of times.  So the plan is re-priced exactly after
 * the solve and kept only if it is strictly better.
 *
 * The HBM is a row of the program (Alpa's memory budget, same section):
 * the bytes each candidate's kept activations take, under the profile's
 * hbm_bytes less what no layout changes (propagate_ilp_mem.c).  It is
 * added only when the fastest plan does not fit, and the program solved
 * again, so a plan that fits is the one found without it.
 *
 * The solver gets the local search's plan as its first incumbent (GLPK's
 * heuristic callback), the LP relaxation first (CLP's dual simplex after
 * its presolver, propagate_ilp_clp.c), then GLPK's branch and cut within
 * pivot, node and time limits.  What it proves is recorded in
 * p->ilp: optimal among the candidates, or the best bound when the limit
 * stopped it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cost.h"
#include "costmodel.h"
#include "propagate_ilp.h"

/* ---- building ---- */

/* Grows *a (of `elt`-byte entries, capacity *cap) to hold index `need`;
 * new entries are zero.  False when out of memory. */
static bool grow(void **a, int *cap, int need, size_t elt)
{
    if (need < *cap)
        return true;
    int ncap = *cap ? *cap : 1024;
    while (ncap <= need)
        ncap *= 2;
    char *na = realloc(*a, (size_t)ncap * elt);
    if (!na)
        return false;
    memset(na + (size_t)*cap * elt, 0, (size_t)(ncap - *cap) * elt);
    *a = na;
    *cap = ncap;
    return true;
}

int pass_ilp_col_new(ilp *s, double obj, bool binary, double lb, double warm)
{
    int j = glp_add_cols(s->lp, 1);
    s->ncols = j;
    glp_set_col_kind(s->lp, j, binary ? GLP_BV : GLP_CV);
    if (!binary)
        glp_set_col_bnds(s->lp, j, lb >= 1.0 ? GLP_FX : GLP_DB, lb, 1.0);
    glp_set_obj_coef(s->lp, j, obj);
    if (!grow((void **)&s->warm, &s->warm_cap, j, sizeof *s->warm)) {
        s->oom = true;
        return j;
    }
    s->warm[j] = lb >= 1.0 ? 1.0 : warm;
    return j;
}

int pass_ilp_row_new(ilp *s, int type)
{
    int i = glp_add_rows(s->lp, 1);
    s->nrows = i;
    glp_set_row_bnds(s->lp, i, type, 0.0, 0.0);
    return i;
}

void pass_ilp_nz_add(ilp *s, int row, int col, double v)
{
    int need = s->nz + 1, c1 = s->nz_cap, c2 = s->nz_cap;
    if (!grow((void **)&s->ia, &c1, need, sizeof *s->ia) || !grow((void **)&s->ja, &c2, need, sizeof *s->ja) ||
        !grow((void **)&s->ar, &s->nz_cap, need, sizeof *s->ar)) {
        s->oom = true;
        return;
    }
    s->nz = need;
    s->ia[need] = row;
    s->ja[need] = col;
    s->ar[need] = v;
}

/* Adds -x[k,c] for every candidate c of op k in group g (p or q). */
static void nz_group(ilp *s, int row, int k, const group *gr, int g)
{
    for (int c = 0; c < s->nc[k]; c++)
        if (gr->of[c] == g)
            pass_ilp_nz_add(s, row, s->col0[k] + c, -1.0);
}

/* Row y - (terms to follow) >= 0, remembered for the warm start. */
static int ge_new(ilp *s, int y)
{
    int r = pass_ilp_row_new(s, GLP_LO);
    int c1 = s->ge_cap, c2 = s->ge_cap;
    if (!grow((void **)&s->ge_row, &c1, s->nge, sizeof *s->ge_row) ||
        !grow((void **)&s->ge_col, &c2, s->nge, sizeof *s->ge_col) ||
        !grow((void **)&s->ge_nz, &s->ge_cap, s->nge, sizeof *s->ge_nz)) {
        s->oom = true;
        return r;
    }
    s->ge_row[s->nge] = r;
    s->ge_col[s->nge] = y;
    s->ge_nz[s->nge] = s->nz + 1;
    s->nge++;
    pass_ilp_nz_add(s, r, y, 1.0);
    return r;
}

/* Fixes every candidate of op k in group g out of the plan. */
static void forbid(ilp *s, int k, const group *gr, int g)
{
    for (int c = 0; c < s->nc[k]; c++)
        if (gr->of[c] == g)
            glp_set_col_bnds(s->lp, s->col0[k] + c, GLP_FX, 0.0, 0.0);
}

bool pass_ilp_group_make(ilp *s, int k, int operand, group *gr)
{
    const ir_op *op = s->p->ops[k].op;
    int rank = operand < 0 ? op->result->type.rank : op->operands[operand]->type.rank;
    gr->n = 0;
    gr->sh = malloc((size_t)s->nc[k] * sizeof *gr->sh);
    gr->of = malloc((size_t)s->nc[k] * sizeof *gr->of);
    if (!gr->sh || !gr->of)
        return false;
    for (int c = 0; c < s->nc[k]; c++) {
        const ir_sharding *sh = operand < 0 ? &s->cand[k][c].produced : &s->cand[k][c].req[operand];
        int g = 0;
        while (g < gr->n && !ir_sharding_equal(&gr->sh[g], sh, rank))
            g++;
        if (g == gr->n)
            gr->sh[gr->n++] = *sh;
        gr->of[c] = g;
    }
    gr->cur = gr->of[0];
    return true;
}

void pass_ilp_group_free(group *gr)
{
    free(gr->sh);
    free(gr->of);
}

/* ---- targets of one value ---- */

/* The distinct shardings a value is brought to, in the order
 * pass_prop_value_cost meets them (uses, the loop's carried sharding,
 * outputs), each with the trip count of the first that needs it. */
typedef struct targets {
    int n, cap;
    ir_sharding *sh;
    double *trips;
} targets;

static int target_of(ilp *s, targets *t, const ir_sharding *sh, int rank, double trips)
{
    for (int i = 0; i < t->n; i++)
        if (ir_sharding_equal(&t->sh[i], sh, rank))
            return i;
    int c1 = t->cap;
    if (!grow((void **)&t->sh, &c1, t->n, sizeof *t->sh) ||
        !grow((void **)&t->trips, &t->cap, t->n, sizeof *t->trips)) {
        s->oom = true;
        return -1;
    }
    t->sh[t->n] = *sh;
    t->trips[t->n] = trips;
    return t->n++;
}

/* The targets of v that no consumer chooses, into fixed[0..1] with the
 * times each runs: the carried sharding of a loop reading v (LoopBegin
 * once, LoopEnd every iteration), then an output's constraint, or for a
 * bare output `have` with its partial sums reduced.  Returns their count. */
static int fixed_targets(const prop *p, const ir_value *v, const ir_sharding *have, ir_sharding fixed[2],
                         double trips[2])
{
    int n = 0;
    const ir_op *lp = v->id >= 0 && v->id < p->nvalues ? p->loop_use[v->id] : NULL;
    if (lp) {
        fixed[n] = lp->result->type.sh;
        trips[n++] = lp->kind == IR_OP_LOOPEND && v->def ? (double)ir_op_trips(p->m, v->def) : 1.0;
    }
    for (int i = 0; i < p->m->noutputs && n < 2; i++)
        if (p->m->outputs[i].value == v) {
            fixed[n] = p->m->outputs[i].has_constraint ? p->m->outputs[i].constraint : pass_prop_reduced(*have);
            trips[n++] = 1.0;
        }
    return n;
}

/* Column of y[a,t] (the reshard of sharding a to target t, paid once),
 * made on first use with the credit of op k hiding its first step
 * (pass_ilp_cm_rs; A: k's candidates by produced sharding). */
static int ycol(ilp *s, const ir_value *v, int *ys, int nt, int k, const group *A, int a, const targets *t,
                int ti)
{
    int *slot = &ys[a * nt + ti];
    if (*slot == 0) {
        double us = pass_prop_reshard_time(s->p, v, &A->sh[a], &t->sh[ti]) * t->trips[ti] * 1e6;
        *slot = pass_ilp_col_new(s, us, false, 0.0, 0.0);
        pass_ilp_cm_rs(s, v, k, A, a, &t->sh[ti], t->trips[ti], *slot);
    }
    return *slot;
}

/* The terms of a value whose producer's layout is a choice (op k). */
static void value_variable(ilp *s, int id, int k)
{
    prop *p = s->p;
    const ir_value *v = p->m->values[id];
    int rank = v->type.rank;
    group A;
    if (!pass_ilp_group_make(s, k, -1, &A)) {
        s->oom = true;
        pass_ilp_group_free(&A);
        return;
    }
    int nuse = p->use_start[id + 1] - p->use_start[id];
    group *B = calloc((size_t)nuse + 1, sizeof *B);
    targets T = {0};
    if (!B) {
        s->oom = true;
        pass_ilp_group_free(&A);
        return;
    }
    /* Targets in pass_prop_value_cost's order. */
    for (int u = 0; u < nuse; u++) {
        const use *us = &p->uses[p->use_start[id] + u];
        if (!pass_ilp_group_make(s, us->op, us->operand, &B[u])) {
            s->oom = true;
            goto out;
        }
        double trips = (double)ir_op_trips(p->m, p->ops[us->op].op);
        for (int b = 0; b < B[u].n; b++)
            target_of(s, &T, &B[u].sh[b], rank, trips);
    }
    ir_sharding fixed[2];
    double ftrips[2];
    for (int a = 0; a < A.n; a++)
        for (int f = 0, nf = fixed_targets(p, v, &A.sh[a], fixed, ftrips); f < nf; f++)
            target_of(s, &T, &fixed[f], rank, ftrips[f]);
    if (s->oom || T.n == 0)
        goto out;
    int nt = T.n; /* every target is known: ys is A.n x nt */
    int *ys = calloc((size_t)A.n * (size_t)nt, sizeof *ys);
    int *erow_a = calloc((size_t)A.n, sizeof *erow_a);
    if (!ys || !erow_a) {
        free(ys);
        free(erow_a);
        s->oom = true;
        goto out;
    }
    /* With one use and no other target, a reshard is not shared: its cost
     * sits on the edge variable itself. */
    bool alone = nuse == 1 && T.n == B[0].n;
    for (int u = 0; u < nuse && !s->oom; u++) {
        const use *us = &p->uses[p->use_start[id] + u];
        int j = us->op;
        if (s->col0[j] == s->col0[k]) {
            /* Merged with the producer: the pair is fixed by one candidate. */
            for (int c = 0; c < s->nc[k]; c++) {
                int a = A.of[c], b = B[u].of[c];
                if (ir_sharding_equal(&A.sh[a], &B[u].sh[b], rank))
                    continue;
                int col = s->col0[k] + c;
                int ti = target_of(s, &T, &B[u].sh[b], rank, 1.0);
                if (isinf(pass_prop_reshard_time(p, v, &A.sh[a], &B[u].sh[b])) || ti < 0 || ti >= nt) {
                    glp_set_col_bnds(s->lp, col, GLP_FX, 0.0, 0.0);
                    continue;
                }
                int r = ge_new(s, ycol(s, v, ys, nt, k, &A, a, &T, ti));
                pass_ilp_nz_add(s, r, col, -1.0);
            }
            continue;
        }
        /* Transport rows: sum_b e[a,b] = p[a], sum_a e[a,b] = q[b]. */
        for (int a = 0; a < A.n; a++) {
            erow_a[a] = pass_ilp_row_new(s, GLP_FX);
            nz_group(s, erow_a[a], k, &A, a);
        }
        for (int b = 0; b < B[u].n; b++) {
            int rb = pass_ilp_row_new(s, GLP_FX);
            nz_group(s, rb, j, &B[u], b);
            int ti = target_of(s, &T, &B[u].sh[b], rank, 1.0);
            if (ti < 0 || ti >= nt)
                continue;
            for (int a = 0; a < A.n; a++) {
                double t = pass_prop_reshard_time(p, v, &A.sh[a], &B[u].sh[b]);
                if (isinf(t))
                    continue;
                bool same = ir_sharding_equal(&A.sh[a], &B[u].sh[b], rank);
                bool cur = a == A.cur && b == B[u].cur;
                double us_cost = alone && !same ? t * T.trips[ti] * 1e6 : 0.0;
                int e = pass_ilp_col_new(s, us_cost, false, 0.0, cur ? 1.0 : 0.0);
                pass_ilp_nz_add(s, erow_a[a], e, 1.0);
                pass_ilp_nz_add(s, rb, e, 1.0);
                if (same)
                    continue;
                /* Collective matmul: consumer j may hide the last step, an
                 * AllGather, if no earlier use may need the same target;
                 * the producer the first, a ReduceScatter (its credit sits
                 * on y, or here when the reshard is not shared). */
                bool first = true;
                for (int u2 = 0; u2 < u && first; u2++)
                    for (int b2 = 0; b2 < B[u2].n && first; b2++)
                        first = !ir_sharding_equal(&B[u2].sh[b2], &B[u].sh[b], rank);
                if (first)
                    pass_ilp_cm_ag(s, v, &A.sh[a], j, &B[u], b, e);
                if (alone) {
                    pass_ilp_cm_rs(s, v, k, &A, a, &B[u].sh[b], T.trips[ti], e);
                    continue;
                }
                int r = ge_new(s, ycol(s, v, ys, nt, k, &A, a, &T, ti));
                pass_ilp_nz_add(s, r, e, -1.0);
            }
        }
    }
    /* Targets fixed whatever the consumers do: y[a,t] >= p[a]. */
    for (int a = 0; a < A.n && !s->oom; a++) {
        int nf = fixed_targets(p, v, &A.sh[a], fixed, ftrips);
        for (int f = 0; f < nf; f++) {
            if (ir_sharding_equal(&A.sh[a], &fixed[f], rank))
                continue;
            if (isinf(pass_prop_reshard_time(p, v, &A.sh[a], &fixed[f]))) {
                forbid(s, k, &A, a);
                continue;
            }
            int ti = target_of(s, &T, &fixed[f], rank, 1.0);
            if (ti < 0 || ti >= nt)
                continue;
            int y = ycol(s, v, ys, nt, k, &A, a, &T, ti);
            int r = ge_new(s, y);
            nz_group(s, r, k, &A, a);
        }
    }
    free(ys);
    free(erow_a);
out:
    for (int u = 0; u < nuse; u++)
        pass_ilp_group_free(&B[u]);
    free(B);
    free(T.sh);
    free(T.trips);
    pass_ilp_group_free(&A);
}

/* The terms of a value whose sharding is fixed (`have`): one w[b] per
 * distinct target, w[b] >= q[u,b] for every use. */
static void value_fixed(ilp *s, int id, const ir_sharding *have)
{
    prop *p = s->p;
    const ir_value *v = p->m->values[id];
    int rank = v->type.rank;
    int nuse = p->use_start[id + 1] - p->use_start[id];
    targets T = {0};
    int *ws = NULL, ws_cap = 0;
    /* Targets no consumer chooses are paid whatever the plan (a constant
     * left out of the objective); a consumer needing one shares it. */
    ir_sharding fixed[2];
    double ftrips[2];
    int nf = fixed_targets(p, v, have, fixed, ftrips);
    for (int f = 0; f < nf; f++) {
        bool dup = ir_sharding_equal(&fixed[f], have, rank);
        for (int g = 0; g < f && !dup; g++)
            dup = ir_sharding_equal(&fixed[f], &fixed[g], rank);
        double t = dup ? 0.0 : pass_prop_reshard_time(p, v, have, &fixed[f]);
        if (!isinf(t))
            s->constant += t * ftrips[f] * 1e6;
    }
    for (int u = 0; u < nuse && !s->oom; u++) {
        const use *us = &p->uses[p->use_start[id] + u];
        group B;
        if (!pass_ilp_group_make(s, us->op, us->operand, &B)) {
            s->oom = true;
            pass_ilp_group_free(&B);
            break;
        }
        double trips = (double)ir_op_trips(p->m, p->ops[us->op].op);
        for (int b = 0; b < B.n && !s->oom; b++) {
            bool paid = ir_sharding_equal(&B.sh[b], have, rank);
            for (int f = 0; f < nf && !paid; f++)
                paid = ir_sharding_equal(&B.sh[b], &fixed[f], rank);
            if (paid)
                continue;
            double t = pass_prop_reshard_time(p, v, have, &B.sh[b]);
            if (isinf(t)) {
                forbid(s, us->op, &B, b);
                continue;
            }
            int n0 = T.n;
            int ti = target_of(s, &T, &B.sh[b], rank, trips);
            if (ti < 0)
                break;
            if (T.n > n0) {
                if (!grow((void **)&ws, &ws_cap, ti, sizeof *ws)) {
                    s->oom = true;
                    break;
                }
                ws[ti] = pass_ilp_col_new(s, t * T.trips[ti] * 1e6, false, 0.0, 0.0);
                /* The first use needing b may hide its AllGather. */
                if (!cost_value_is_param_derived(v))
                    pass_ilp_cm_ag(s, v, have, us->op, &B, b, 0);
            }
            int r = ge_new(s, ws[ti]);
            nz_group(s, r, us->op, &B, b);
        }
        pass_ilp_group_free(&B);
    }
    free(ws);
    free(T.sh);
    free(T.trips);
}

/* ---- solving (pass_ilp_solve: propagate_ilp_solve.c) ---- */

/* The warm start's y and w columns: each at least what its rows need. */
static void warm_fill(ilp *s)
{
    for (int g = 0; g < s->nge; g++) {
        int end = g + 1 < s->nge ? s->ge_nz[g + 1] : s->nz + 1;
        double need = 0.0;
        /* Nonzeros of a row are contiguous from ge_nz (the y first). */
        for (int z = s->ge_nz[g] + 1; z < end && s->ia[z] == s->ge_row[g]; z++)
            need -= s->ar[z] * s->warm[s->ja[z]];
        if (need > s->warm[s->ge_col[g]])
            s->warm[s->ge_col[g]] = need > 1.0 ? 1.0 : need;
    }
}

static void ilp_free(ilp *s)
{
    if (s->lp)
        glp_delete_prob(s->lp);
    /* GLPK keeps an environment between calls; the pass owns no other
     * GLPK object, so it leaves none behind (LeakSanitizer, plugins). */
    glp_free_env();
    for (int k = 0; s->cand && k < s->p->nops; k++)
        free(s->cand[k]);
    free(s->cand);
    for (int k = 0; s->own && k < s->p->nops; k++)
        free(s->own[k]);
    free(s->own);
    free(s->own_n);
    free(s->sharded_dim);
    free(s->seq);
    free(s->nc);
    free(s->col0);
    free(s->ia);
    free(s->ja);
    free(s->ar);
    free(s->warm);
    free(s->ge_row);
    free(s->ge_col);
    free(s->ge_nz);
    free(s->cm_row);
    free(s->cm_col);
    free(s->cm_us);
    free(s->cm_op);
}

/* Sets every op's layout to the candidate that plan x selects. */
void pass_ilp_apply(ilp *s, const double *x)
{
    for (int k = 0; k < s->p->nops; k++)
        for (int c = 0; c < s->nc[k]; c++)
            if (x[s->col0[k] + c] > 0.5)
                s->p->ops[k].lay = s->cand[k][c];
}

/* The memory row (propagate_ilp_mem.c), added only when it binds, so that
 * a plan that fits is the one the solve without it found: when plan x
 * keeps more than the profile's HBM per device, solves again with the row
 * and replaces x by that plan; when no plan among the candidates fits,
 * keeps x.  Says which in rep (mem and the mem_ figures). */
static void memory_row(ilp *s, int ms, double t0, double *x, pass_prop_ilp_report *rep)
{
    prop *p = s->p;
    double fixed, hbm = p->hw->hbm_bytes;
    double *coef = malloc(((size_t)s->ncols + 1) * sizeof *coef);
    layout *keep = malloc((size_t)p->nops * sizeof *keep + 1);
    if (!coef || !keep || !pass_ilp_mem_row(s, &fixed, coef))
        goto out;
    rep->mem_hbm = hbm;
    for (int k = 0; k < p->nops; k++)
        keep[k] = p->ops[k].lay;
    pass_ilp_apply(s, x);
    rep->mem_fastest = pass_prop_memory(p);
    rep->fastest = pass_prop_total_cost(p).time;
    for (int k = 0; k < p->nops; k++)
        p->ops[k].lay = keep[k];
    if (rep->mem_fastest <= hbm)
        goto out;
    rep->mem = PASS_ILP_MEM_NONE_FITS;
    rep->mem_least = fixed + pass_ilp_mem_min(s, coef);
    int ncols_x = s->ncols; /* x holds the columns before the row's z */
    if (rep->mem_least > hbm || !pass_ilp_mem_copies(s, &coef) || !pass_ilp_mem_add(s, coef, hbm - fixed))
        goto out;
    pass_prop_ilp_report free_rep = *rep;
    /* GLPK takes a heuristic solution without checking its rows: the
     * local search's plan is the first incumbent only if it fits. */
    s->warm_given = fixed + pass_ilp_mem_value(s, coef, s->warm) > hbm;
    s->nodes = 0;
    if (pass_ilp_solve(s, ms, t0, rep)) {
        for (int j = 1; j <= ncols_x; j++)
            x[j] = glp_mip_col_val(s->lp, j);
        rep->mem = PASS_ILP_MEM_BOUND;
    } else {
        *rep = free_rep;
    }
out:
    free(coef);
    free(keep);
}

int pass_prop_ilp(prop *p, double time_limit, pass_prop_ilp_report *rep)
{
    double t0 = pass_ilp_now();
    memset(rep, 0, sizeof *rep);
    if (p->nops == 0 || !p->hw)
        return 0;
    ilp s;
    memset(&s, 0, sizeof s);
    s.p = p;
    s.lp = glp_create_prob();
    s.cand = calloc((size_t)p->nops, sizeof *s.cand);
    s.nc = calloc((size_t)p->nops, sizeof *s.nc);
    s.col0 = calloc((size_t)p->nops, sizeof *s.col0);
    s.own = calloc((size_t)p->nops, sizeof *s.own);
    s.own_n = calloc((size_t)p->nops, sizeof *s.own_n);
    s.sharded_dim = calloc((size_t)p->m->ndims + 1, sizeof *s.sharded_dim);
    s.seq = calloc((size_t)p->m->ndims + 1, sizeof *s.seq);
    int changed = 0;
    bool small;
    double *x = NULL; /* by column: the plan the solver chose */
    layout *keep = NULL;
    if (!s.lp || !s.cand || !s.nc || !s.col0 || !s.own || !s.own_n || !s.sharded_dim || !s.seq)
        goto out;
    if (!pass_ilp_own_all(&s, &small))
        goto out;
    s.merge = !small;
    const char *ov = pass_option_value(p->ctx, "ilp-overlap");
    s.cm_on = p->hw->collective_matmul && !(ov && strcmp(ov, "off") == 0);
    rep->merged = s.merge;
    glp_set_obj_dir(s.lp, GLP_MIN);
    /* x[k,c], one per op; the objective in microseconds. */
    for (int k = 0; k < p->nops; k++) {
        if (!pass_ilp_candidates(&s, k))
            goto out;
        if (s.col0[k] == 0) {
            /* An op of its own: x[k,c], exactly one. */
            s.ncand += s.nc[k];
            int r = pass_ilp_row_new(&s, GLP_FX);
            glp_set_row_bnds(s.lp, r, GLP_FX, 1.0, 1.0);
            for (int c = 0; c < s.nc[k]; c++) {
                int j = pass_ilp_col_new(&s, 0.0, true, 0.0, c == 0);
                if (c == 0)
                    s.col0[k] = j;
                pass_ilp_nz_add(&s, r, j, 1.0);
            }
        }
        for (int c = 0; c < s.nc[k]; c++) {
            int j = s.col0[k] + c;
            glp_set_obj_coef(s.lp, j, glp_get_obj_coef(s.lp, j) + pass_prop_compute_time(p, k, &s.cand[k][c]) * 1e6);
        }
        /* A constrained result is resharded into its constraint after the op. */
        const ir_value *v = p->ops[k].op->result;
        if (v->has_constraint)
            for (int c = 0; c < s.nc[k]; c++) {
                double t = pass_prop_reshard_time(p, v, &s.cand[k][c].produced, &v->constraint);
                int j = s.col0[k] + c;
                if (isinf(t))
                    glp_set_col_bnds(s.lp, j, GLP_FX, 0.0, 0.0);
                else
                    glp_set_obj_coef(s.lp, j, glp_get_obj_coef(s.lp, j) +
                                                  t * (double)ir_op_trips(p->m, p->ops[k].op) * 1e6);
            }
    }
    for (int id = 0; id < p->nvalues && !s.oom && s.ncols < ILP_MAX_COLS; id++) {
        const ir_value *v = p->m->values[id];
        int k = p->def[id];
        if (k >= 0 && !v->has_constraint) {
            value_variable(&s, id, k);
        } else {
            ir_sharding have = k >= 0 ? v->constraint : pass_prop_current(p, v);
            value_fixed(&s, id, &have);
        }
    }
    rep->candidates = s.ncand;
    rep->cols = s.ncols;
    rep->rows = s.nrows;
    if (s.oom || s.ncols >= ILP_MAX_COLS) {
        rep->status = s.oom ? PASS_ILP_SKIPPED : PASS_ILP_TOO_LARGE;
        goto out;
    }
    glp_load_matrix(s.lp, s.nz, s.ia, s.ja, s.ar);
    glp_set_obj_coef(s.lp, 0, s.constant);
    warm_fill(&s);
    double warm_obj = s.constant;
    for (int j = 1; j <= s.ncols; j++)
        warm_obj += glp_get_obj_coef(s.lp, j) * s.warm[j];
    rep->warm_objective = warm_obj * 1e-6;
    int ms = (int)fmax(1.0, fmin(time_limit * 1e3, 1e9));
    x = malloc(((size_t)s.ncols + 1) * sizeof *x);
    if (!x || !pass_ilp_solve(&s, ms, t0, rep))
        goto out;
    for (int j = 1; j <= s.ncols; j++)
        x[j] = glp_mip_col_val(s.lp, j);
    memory_row(&s, ms, t0, x, rep);
    /* Adopt the solver's plan if the exact objective agrees it is better
     * (or if it fits the HBM and the local search's does not). */
    cost before = pass_prop_total_cost(p);
    bool fit_before = !rep->mem_hbm || pass_prop_memory(p) <= rep->mem_hbm;
    keep = malloc((size_t)p->nops * sizeof *keep + 1);
    if (!keep)
        goto out;
    for (int k = 0; k < p->nops; k++)
        keep[k] = p->ops[k].lay;
    pass_ilp_apply(&s, x);
    cost after = pass_prop_total_cost(p);
    bool fit_after = !rep->mem_hbm || pass_prop_memory(p) <= rep->mem_hbm;
    if (fit_after != fit_before ? fit_after : pass_prop_cost_less(after, before)) {
        for (int k = 0; k < p->nops; k++)
            changed += memcmp(keep[k].choice, p->ops[k].lay.choice, sizeof keep[k].choice) != 0;
        rep->adopted = true;
    } else {
        for (int k = 0; k < p->nops; k++)
            p->ops[k].lay = keep[k];
    }
    rep->exact_before = before.time;
    rep->exact_after = after.time;
    /* On a profile with collective matmul, the exposed edge costs. */
    if (s.ncm > 0 && !pass_ilp_cm_solve(&s, ms, t0, x, rep))
        goto out;
    changed += rep->cm_changed;
out:
    free(keep);
    free(x);
    rep->seconds = pass_ilp_now() - t0;
    if (p->ctx->log && rep->status != PASS_ILP_NONE)
        fprintf(p->ctx->log,
                "propagate: ILP: %ld candidate layouts%s, %d columns, %d rows, %d simplex iterations, %.3g s, %s; objective %.4g us "
                "(bound %.4g us, LP %.4g us, local search %.4g us); exact %.4g us against %.4g us, %s\n",
                rep->candidates, rep->merged ? " (simple ops merged)" : "", rep->cols, rep->rows, rep->iterations,
                rep->seconds,
                rep->status == PASS_ILP_OPTIMAL ? "optimal" : rep->status == PASS_ILP_TIME_LIMIT ? "stopped at a limit"
                : rep->status == PASS_ILP_TOO_LARGE ? "too large" : "skipped",
                rep->objective * 1e6, rep->bound * 1e6, rep->lp_bound * 1e6, rep->warm_objective * 1e6,
                rep->exact_after * 1e6, rep->exact_before * 1e6, rep->adopted ? "adopted" : "kept the local plan");
    if (p->ctx->log && rep->mem_hbm > 0)
        fprintf(p->ctx->log,
                "propagate: ILP memory row: the fastest plan keeps %.0f bytes per device, HBM %.0f: %s\n",
                rep->mem_fastest, rep->mem_hbm,
                rep->mem == PASS_ILP_MEM_BOUND ? "solved again with the row"
                : rep->mem == PASS_ILP_MEM_NONE_FITS ? "no plan among the candidates fits" : "fits");
    ilp_free(&s);
    return changed;
}
