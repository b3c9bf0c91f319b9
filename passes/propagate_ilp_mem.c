/*
 * propagate_ilp_mem.c - the memory row of the whole-program ILP: the
 * device's HBM as a linear constraint of the search (Zheng et al., "Alpa",
 * OSDI'22, section 4.2, which bounds each stage's memory by the device's;
 * einc issue 24, item 3).
 *
 * What the row counts is seed 000's accounting of a training step, per
 * device, as the cost pass's breakdown prints it (cost_memory_peak):
 *
 *   params + optimizer state + KV cache and state + inputs   (resident)
 *   + one gradient per optimized param                        (grads)
 *   + the activations kept for the backward pass              (kept)
 *
 * Every term but the last has the sharding its declaration gives it, which
 * the planner does not change: that is the row's constant.  An activation
 * kept for the backward pass (cost_kept_for_backward: a forward value a
 * backward op reads) takes the sharding of the op that makes it, so its
 * bytes under each candidate layout c of op k are the coefficient of
 * x[k,c].  A repeated block's activations are kept through a LayerStack,
 * whose result holds every layer (trip count) in the operand's sharding
 * without partial sums (propagate_loop.c); its bytes go on the candidates
 * of the op making the operand.  Values with a constraint keep it.  A
 * reshard's copy that a forward consumer makes and a backward consumer
 * reads is kept as well (pass_ilp_mem_copies), except a param's: the
 * regather pass gathers a weight again when the peak does not fit.
 *
 * The cost pass's peak (memory: line) is another figure: program-order
 * liveness, where the kept activations, the gradients and the transient
 * values (cotangents, gathered weights) live at once only in part.  The
 * row counts every kept activation and every gradient as held at once,
 * which is more than the peak holds of them, and it does not count the
 * transients, which the peak does.  So neither figure bounds the other in
 * general; the row is seed 000's "what must fit", and the cost pass still
 * checks the peak after planning (docs/propagation.md, "The memory row").
 */
#include <math.h>
#include <stdlib.h>

#include "costmodel.h"
#include "propagate_ilp.h"

/* Bytes per device of value v with sharding sh. */
static double bytes_as(const ir_module *m, const ir_value *v, const ir_sharding *sh)
{
    ir_type t = v->type;
    t.sh = *sh;
    return (double)ir_local_bytes(m, &t);
}

/* The value whose sharding decides kept value v's: the operand of a
 * LayerStack making v, else v itself. */
static const ir_value *source_of(const ir_value *v)
{
    const ir_op *d = v->def;
    return d && d->kind == IR_OP_LAYERSTACK && d->noperands == 1 ? d->operands[0] : v;
}

/* Bytes of kept value v when its source (source_of) has sharding `sh`. */
static double kept_bytes(const prop *p, const ir_value *v, const ir_sharding *sh)
{
    const ir_op *d = v->def;
    if (d && d->kind == IR_OP_LAYERSTACK && d->noperands == 1) {
        ir_sharding layer = pass_prop_reduced(*sh);
        ir_sharding st = ir_stack_sharding(p->m, &layer, d->operands[0]->type.rank, d->u.loop.dim);
        return bytes_as(p->m, v, &st);
    }
    return bytes_as(p->m, v, sh);
}

/* The compute op whose layout decides the sharding of kept value v, or -1
 * when nothing the planner chooses does (a constraint, a loop's value). */
static int chooser_of(const prop *p, const ir_value *v)
{
    const ir_value *src = source_of(v);
    int k = src->id >= 0 && src->id < p->nvalues ? p->def[src->id] : -1;
    return k >= 0 && !src->has_constraint ? k : -1;
}

/* The row's constant: the resident values and the gradients, in bytes. */
static double fixed_bytes(const prop *p)
{
    const ir_module *m = p->m;
    double b = 0.0;
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        if (v && ir_value_kind_is_argument(v->kind))
            b += (double)ir_local_bytes(m, &v->type);
    }
    for (int k = 0; k < m->noutputs; k++) {
        const ir_value *u = m->outputs[k].update;
        if (u && u->kind == IR_VAL_PARAM)
            b += (double)ir_local_bytes(m, &u->type);
    }
    return b;
}

/* Whether value id i (below p->nvalues) is kept for the backward pass. */
static bool kept(const prop *p, int i)
{
    const ir_value *v = p->m->values[i];
    return v && cost_kept_for_backward(v);
}

/* Whether use u (an entry of p->uses) is by an op of phase ph. */
static bool use_in(const prop *p, int u, ir_phase ph)
{
    return p->ops[p->uses[u].op].op->phase == ph;
}

/* What use u requires of its value under the current layouts. */
static const ir_sharding *required(const prop *p, int u)
{
    return &p->ops[p->uses[u].op].lay.req[p->uses[u].operand];
}

/* Bytes of the copies of value id kept for the backward pass under the
 * current layouts: each distinct sharding other than the value's own that
 * a forward use requires (its reshard is emitted in the forward pass) and
 * a backward use requires too (it reads that copy, so the copy lives from
 * the one to the other; materialise shares a reshard between consumers). */
static double copies_now(const prop *p, int id)
{
    const ir_value *v = p->m->values[id];
    int rank = v->type.rank;
    ir_sharding have = pass_prop_current(p, v);
    int u0 = p->use_start[id], u1 = p->use_start[id + 1];
    double b = 0.0;
    for (int f = u0; f < u1; f++) {
        const ir_sharding *t = required(p, f);
        if (!use_in(p, f, IR_PHASE_FORWARD) || !p->ops[p->uses[f].op].decided ||
            ir_sharding_equal(t, &have, rank))
            continue;
        bool dup = false;
        for (int g = u0; g < f && !dup; g++)
            dup = use_in(p, g, IR_PHASE_FORWARD) && p->ops[p->uses[g].op].decided &&
                  ir_sharding_equal(required(p, g), t, rank);
        for (int g = u0; g < u1 && !dup; g++)
            if (use_in(p, g, IR_PHASE_BACKWARD) && p->ops[p->uses[g].op].decided &&
                ir_sharding_equal(required(p, g), t, rank)) {
                b += bytes_as(p->m, v, t);
                break;
            }
    }
    return b;
}

/* Whether a copy of value id may be kept (copies_now, copies_of): not of
 * a param, whose gathered copy the regather pass gathers again before the
 * backward pass when the peak does not fit (ZeRO-3; passes/regather.c). */
static bool copy_counts(const prop *p, int id)
{
    const ir_value *v = p->m->values[id];
    return v && v->kind != IR_VAL_PARAM;
}

double pass_prop_memory(const prop *p)
{
    double b = fixed_bytes(p);
    for (int i = 0; i < p->nvalues; i++) {
        if (kept(p, i)) {
            const ir_value *v = p->m->values[i];
            ir_sharding sh = pass_prop_current(p, source_of(v));
            b += kept_bytes(p, v, &sh);
        }
        if (copy_counts(p, i))
            b += copies_now(p, i);
    }
    return b;
}

bool pass_ilp_mem_row(ilp *s, double *fixed, double *coef)
{
    prop *p = s->p;
    bool varies = false;
    *fixed = fixed_bytes(p);
    for (int j = 0; j <= s->ncols; j++)
        coef[j] = 0.0;
    for (int i = 0; i < p->nvalues; i++) {
        if (!kept(p, i))
            continue;
        const ir_value *v = p->m->values[i];
        int k = chooser_of(p, v);
        if (k < 0) {
            ir_sharding sh = pass_prop_current(p, source_of(v));
            *fixed += kept_bytes(p, v, &sh);
            continue;
        }
        /* A merged op shares its leader's columns: the bytes add up. */
        for (int c = 0; c < s->nc[k]; c++) {
            double b = kept_bytes(p, v, &s->cand[k][c].produced);
            coef[s->col0[k] + c] += b;
            varies = varies || b != coef[s->col0[k]];
        }
    }
    /* A value read in both passes may be kept as a copy (copies_now). */
    for (int i = 0; i < p->nvalues && !varies; i++) {
        if (!copy_counts(p, i))
            continue;
        bool fwd = false, bwd = false;
        for (int u = p->use_start[i]; u < p->use_start[i + 1]; u++) {
            fwd = fwd || use_in(p, u, IR_PHASE_FORWARD);
            bwd = bwd || use_in(p, u, IR_PHASE_BACKWARD);
        }
        varies = fwd && bwd;
    }
    return varies;
}

double pass_ilp_mem_min(ilp *s, const double *coef)
{
    /* Each op of its own owns columns col0..col0+nc-1, exactly one of
     * which is 1, so the row is separable over them; a merged op shares
     * them (col0 equal) and is counted with its leader. */
    bool *seen = calloc((size_t)s->ncols + 1, sizeof *seen);
    if (!seen)
        return 0.0;
    double least = 0.0;
    for (int k = 0; k < s->p->nops; k++) {
        if (seen[s->col0[k]])
            continue;
        seen[s->col0[k]] = true;
        double lo = INFINITY;
        for (int c = 0; c < s->nc[k]; c++) {
            int j = s->col0[k] + c;
            bool out = glp_get_col_type(s->lp, j) == GLP_FX && glp_get_col_ub(s->lp, j) == 0.0;
            if (!out && coef[j] < lo)
                lo = coef[j];
        }
        least += isinf(lo) ? 0.0 : lo;
    }
    free(seen);
    return least;
}

double pass_ilp_mem_value(const ilp *s, const double *coef, const double *x)
{
    double b = 0.0;
    for (int j = 1; j <= s->ncols; j++)
        b += coef[j] * x[j];
    return b;
}

/* A row being built: coefficients by column, accumulated (a merged op
 * shares columns with another), then handed to GLPK without zeros. */
typedef struct rowbuf {
    double *acc; /* by column: the coefficient so far */
    int *cols;   /* the columns touched, n of them (1-based for GLPK: cols[1..n]) */
    double *val; /* scratch for their values */
    int n;
} rowbuf;

static void rb_add(rowbuf *r, int col, double v)
{
    if (r->acc[col] == 0.0)
        r->cols[++r->n] = col;
    r->acc[col] += v;
}

/* Adds the coefficient v to every candidate of op k in group g. */
static void rb_group(ilp *s, rowbuf *r, int k, const group *gr, int g, double v)
{
    for (int c = 0; c < s->nc[k]; c++)
        if (gr->of[c] == g)
            rb_add(r, s->col0[k] + c, v);
}

/* The row z - q[f] - q[b] + p >= -1 from what r holds (the x columns)
 * and column z, then r emptied. */
static void rb_emit(ilp *s, rowbuf *r, int z)
{
    int n = 0;
    for (int i = 1; i <= r->n; i++) {
        int col = r->cols[i];
        if (r->acc[col] != 0.0) {
            /* n <= i: cols[i] is read before it is overwritten; a column
             * listed twice is taken once (its acc is 0 the second time). */
            n++;
            r->cols[n] = col;
            r->val[n] = r->acc[col];
            r->acc[col] = 0.0;
        }
    }
    n++;
    r->cols[n] = z;
    r->val[n] = 1.0;
    int row = glp_add_rows(s->lp, 1);
    s->nrows = row;
    glp_set_row_bnds(s->lp, row, GLP_LO, -1.0, 0.0);
    glp_set_mat_row(s->lp, row, n, r->cols, r->val);
    r->n = 0;
}

/* The z columns of value id (see pass_ilp_mem_copies), their bytes into
 * zb (by column, grown); false when out of memory. */
static bool copies_of(ilp *s, int id, rowbuf *r, double **zb, int *zcap)
{
    prop *p = s->p;
    const ir_value *v = p->m->values[id];
    int rank = v->type.rank;
    int u0 = p->use_start[id], nuse = p->use_start[id + 1] - u0;
    bool fwd = false, bwd = false;
    for (int u = 0; u < nuse; u++) {
        fwd = fwd || use_in(p, u0 + u, IR_PHASE_FORWARD);
        bwd = bwd || use_in(p, u0 + u, IR_PHASE_BACKWARD);
    }
    if (!fwd || !bwd)
        return true;
    int k = p->def[id] >= 0 && !v->has_constraint ? p->def[id] : -1;
    ir_sharding have = pass_prop_current(p, v);
    group A = {0};
    group *B = calloc((size_t)nuse, sizeof *B);
    int *zt = calloc((size_t)nuse * ILP_MAX_CANDS + 1, sizeof *zt); /* z by (forward use, group) */
    bool ok = B && zt && (k < 0 || pass_ilp_group_make(s, k, -1, &A));
    for (int u = 0; ok && u < nuse; u++)
        if (use_in(p, u0 + u, IR_PHASE_FORWARD) || use_in(p, u0 + u, IR_PHASE_BACKWARD))
            ok = pass_ilp_group_make(s, p->uses[u0 + u].op, p->uses[u0 + u].operand, &B[u]);
    for (int f = 0; ok && f < nuse; f++) {
        if (!use_in(p, u0 + f, IR_PHASE_FORWARD))
            continue;
        for (int gf = 0; ok && gf < B[f].n; gf++) {
            const ir_sharding *t = &B[f].sh[gf];
            if (k < 0 && ir_sharding_equal(t, &have, rank))
                continue;
            /* One z per distinct sharding: an earlier forward use's. */
            int z = 0;
            for (int e = 0; e < f && !z; e++)
                for (int ge = 0; ge < B[e].n && !z; ge++)
                    if (use_in(p, u0 + e, IR_PHASE_FORWARD) && ir_sharding_equal(&B[e].sh[ge], t, rank))
                        z = zt[e * ILP_MAX_CANDS + ge];
            for (int b = 0; ok && b < nuse; b++) {
                if (!use_in(p, u0 + b, IR_PHASE_BACKWARD))
                    continue;
                int gb = 0;
                while (gb < B[b].n && !ir_sharding_equal(&B[b].sh[gb], t, rank))
                    gb++;
                if (gb == B[b].n)
                    continue;
                if (!z) {
                    z = pass_ilp_col_new(s, 0.0, false, 0.0, 1.0);
                    int need = z + 1;
                    if (need > *zcap) {
                        double *nz = realloc(*zb, (size_t)need * 2 * sizeof *nz);
                        ok = nz != NULL;
                        if (!ok)
                            break;
                        for (int j = *zcap; j < need * 2; j++)
                            nz[j] = 0.0;
                        *zb = nz;
                        *zcap = need * 2;
                    }
                    (*zb)[z] = bytes_as(p->m, v, t);
                }
                rb_group(s, r, p->uses[u0 + f].op, &B[f], gf, -1.0);
                rb_group(s, r, p->uses[u0 + b].op, &B[b], gb, -1.0);
                for (int a = 0; k >= 0 && a < A.n; a++)
                    if (ir_sharding_equal(&A.sh[a], t, rank))
                        rb_group(s, r, k, &A, a, 1.0);
                rb_emit(s, r, z);
            }
            zt[f * ILP_MAX_CANDS + gf] = z;
        }
    }
    for (int u = 0; B && u < nuse; u++)
        pass_ilp_group_free(&B[u]);
    free(B);
    free(zt);
    pass_ilp_group_free(&A);
    return ok && !s->oom;
}

bool pass_ilp_mem_copies(ilp *s, double **coef)
{
    int ncols0 = s->ncols;
    rowbuf r = {0};
    r.acc = calloc((size_t)ncols0 + 1, sizeof *r.acc);
    r.cols = malloc(((size_t)ncols0 + 2) * sizeof *r.cols);
    r.val = malloc(((size_t)ncols0 + 2) * sizeof *r.val);
    double *zb = NULL;
    int zcap = 0;
    bool ok = r.acc && r.cols && r.val;
    /* r's buffers cover the x columns; each row's z is appended last. */
    for (int id = 0; ok && id < s->p->nvalues; id++)
        if (copy_counts(s->p, id))
            ok = copies_of(s, id, &r, &zb, &zcap);
    double *nc = ok ? realloc(*coef, ((size_t)s->ncols + 1) * sizeof *nc) : NULL;
    if (nc) {
        for (int j = ncols0 + 1; j <= s->ncols; j++)
            nc[j] = j < zcap ? zb[j] : 0.0;
        *coef = nc;
    }
    free(r.acc);
    free(r.cols);
    free(r.val);
    free(zb);
    return nc != NULL;
}

int pass_ilp_mem_add(ilp *s, const double *coef, double budget)
{
    int *ind = malloc(((size_t)s->ncols + 1) * sizeof *ind);
    double *val = malloc(((size_t)s->ncols + 1) * sizeof *val);
    if (!ind || !val) {
        free(ind);
        free(val);
        return 0;
    }
    int n = 0;
    for (int j = 1; j <= s->ncols; j++)
        if (coef[j] != 0.0) {
            n++;
            ind[n] = j;
            val[n] = coef[j];
        }
    int r = glp_add_rows(s->lp, 1);
    glp_set_row_name(s->lp, r, "memory");
    glp_set_row_bnds(s->lp, r, GLP_UP, 0.0, budget);
    glp_set_mat_row(s->lp, r, n, ind, val);
    s->nrows = r;
    free(ind);
    free(val);
    return r;
}
