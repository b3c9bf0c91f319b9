/*
 * propagate_ilp_cands.c - the candidate layouts of each op in the
 * whole-program ILP (propagate_ilp.c), and the merging of simple ops into
 * an operand that keeps the ILP small on large programs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "propagate_ilp.h"

/* Marks the dims that some input, param, state, constraint or output
 * shards over a mesh axis: the dims a strategy of seed 000 splits (the
 * batch, the model dim of FSDP, the heads or hidden dim of TP).  Adding
 * every dim of the inputs (the sequence, for sequence parallelism) for
 * every axis doubles the ILP of a 2-layer GPT and its solve time (0.9 to
 * 8.4 s), so the sequence is offered only to the TP axis, on the ops
 * propagate_ilp_seq.c picks. */
static void sharded_dims_of(const ir_module *m, const ir_type *t, const ir_sharding *sh, bool *out)
{
    for (int d = 0; d < t->rank; d++)
        if (sh->naxes[d] > 0 && t->dims[d] >= 0 && t->dims[d] < m->ndims)
            out[t->dims[d]] = true;
}

static void mark_sharded_dims(const prop *p, bool *out)
{
    const ir_module *m = p->m;
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        if (p->def[i] < 0)
            sharded_dims_of(m, &v->type, &v->type.sh, out);
        if (v->has_constraint)
            sharded_dims_of(m, &v->type, &v->constraint, out);
    }
    for (int i = 0; i < m->noutputs; i++)
        if (m->outputs[i].has_constraint && m->outputs[i].value)
            sharded_dims_of(m, &m->outputs[i].value->type, &m->outputs[i].constraint, out);
}

/* Whether v could hold partial sums over axis a: a compute op's result
 * free to take any sharding, or a value that holds them now. */
static bool may_carry(const prop *p, const ir_value *v, int a)
{
    int k = v->id >= 0 && v->id < p->nvalues ? p->def[v->id] : -1;
    if (k >= 0 && !v->has_constraint && (p->used_axes & (1u << a)))
        return true;
    ir_sharding sh = pass_prop_current(p, v);
    return (sh.unreduced & (1u << a)) && sh.red == IR_RED_SUM;
}

/* The options of mesh axis a for op k: nothing, any label of an operand
 * whose dim the program shards somewhere (if the program uses a), a
 * sequence dim if a is a TP axis (pass_ilp_seq_option), carrying an
 * operand's partial sums. */
static int ilp_axis_options(const ilp *s, int k, int a, int *opts)
{
    const prop *p = s->p;
    const opinfo *oi = &p->ops[k];
    const ir_op *op = oi->op;
    int n = 0;
    opts[n++] = CH_NONE;
    if (p->used_axes & (1u << a))
        for (int l = 0; l < oi->nlabels && n < MAX_OPTIONS - IR_MAX_OPERANDS; l++)
            if (oi->in_operand[l] && (s->sharded_dim[oi->label[l]] || pass_ilp_seq_option(s, k, l, a)))
                opts[n++] = l;
    if (op->kind == IR_OP_EINSUM && op->u.einsum.reduce == IR_RED_SUM) {
        for (int i = 0; i < op->noperands; i++)
            if (may_carry(p, op->operands[i], a))
                opts[n++] = CH_CARRY + i;
    } else if (oi->linear) {
        bool all = op->noperands > 0;
        for (int i = 0; i < op->noperands; i++)
            all = all && may_carry(p, op->operands[i], a);
        if (all)
            opts[n++] = CH_CARRY;
    }
    return n;
}

static bool same_layout(const prop *p, int k, const layout *x, const layout *y)
{
    const ir_op *op = p->ops[k].op;
    if (!ir_sharding_equal(&x->produced, &y->produced, op->result->type.rank))
        return false;
    for (int i = 0; i < op->noperands; i++)
        if (!ir_sharding_equal(&x->req[i], &y->req[i], op->operands[i]->type.rank))
            return false;
    return true;
}

/* Op k's own candidates: the current layout first, then the others by
 * compute time, at most ILP_MAX_CANDS; *n gets their count.  NULL when
 * out of memory. */
static layout *own_candidates(ilp *s, int k, int *count)
{
    prop *p = s->p;
    int naxes = p->m->mesh.naxes;
    int opts[IR_MAX_AXES][MAX_OPTIONS], nopts[IR_MAX_AXES], idx[IR_MAX_AXES] = {0};
    size_t total = 1;
    for (int a = 0; a < naxes; a++) {
        nopts[a] = ilp_axis_options(s, k, a, opts[a]);
        total *= (size_t)nopts[a];
    }
    layout *c = malloc((total + 1) * sizeof *c);
    double *t = malloc((total + 1) * sizeof *t);
    if (!c || !t) {
        free(c);
        free(t);
        return NULL;
    }
    c[0] = p->ops[k].lay;
    t[0] = 0.0;
    int n = 1;
    layout cur;
    memset(&cur, 0, sizeof cur);
    for (;;) {
        for (int a = 0; a < naxes; a++)
            cur.choice[a] = opts[a][idx[a]];
        if (pass_ilp_seq_keep(s, k, &cur) && pass_prop_layout_fill(p, k, &cur)) {
            bool dup = false;
            for (int i = 0; i < n && !dup; i++)
                dup = same_layout(p, k, &c[i], &cur);
            if (!dup) {
                c[n] = cur;
                t[n] = pass_prop_compute_time(p, k, &cur);
                n++;
            }
        }
        int a = 0;
        while (a < naxes && ++idx[a] == nopts[a])
            idx[a++] = 0;
        if (a == naxes)
            break;
    }
    /* Keep the fastest (insertion sort of the tail; the current stays first). */
    for (int i = 2; i < n; i++)
        for (int j = i; j > 1 && t[j] < t[j - 1]; j--) {
            layout tl = c[j];
            c[j] = c[j - 1];
            c[j - 1] = tl;
            double tt = t[j];
            t[j] = t[j - 1];
            t[j - 1] = tt;
        }
    free(t);
    *count = n < ILP_MAX_CANDS ? n : ILP_MAX_CANDS;
    return c;
}

/* The operand an op is merged into, as Alpa merges simple operators into
 * one of their operands (section 4.2): for an elementwise op or a
 * reduction of one operand, its first operand of the result's rank or
 * more that a compute op produces with no constraint; -1 if none (the op
 * keeps its own variables). */
static int leader_operand(const prop *p, int k)
{
    const ir_op *op = p->ops[k].op;
    if (op->kind == IR_OP_EINSUM && op->noperands != 1)
        return -1;
    for (int i = 0; i < op->noperands; i++) {
        const ir_value *v = op->operands[i];
        int d = v->id >= 0 && v->id < p->nvalues ? p->def[v->id] : -1;
        if (d >= 0 && !v->has_constraint && v->type.rank >= op->result->type.rank)
            return i;
    }
    return -1;
}

#define FOLLOW_TIE 1e-4 /* relative: layouts of a merged op this close in price tie */

/* Of op k's layouts `own`, the one cheapest with operand i in sharding
 * `have`: its compute and the reshard of that operand.  The other
 * operands are left out on purpose: pricing them as the local search left
 * them would tie the merged op to that plan (and pricing only the
 * operands of fixed sharding, a norm's gain, made the ILP's optimum of
 * examples/fortunes_pipeline.ein 0.7% worse).  Layouts within FOLLOW_TIE
 * of each other tie, and a tie goes to one that splits the sequence over
 * a TP axis: after a TP block's partial sums, a ReduceScatter into the
 * sequence or into the model dim costs the same, and only the first
 * keeps the residual stream sequence-parallel (propagate_ilp_seq.c); the
 * order of the candidates would otherwise decide. */
static int best_follow(ilp *s, int k, const layout *own, int n, int i, const ir_sharding *have)
{
    prop *p = s->p;
    const ir_value *v = p->ops[k].op->operands[i];
    int best = -1;
    double best_t = INFINITY;
    bool best_seq = false;
    for (int c = 0; c < n; c++) {
        double t = pass_prop_compute_time(p, k, &own[c]) + pass_prop_reshard_time(p, v, have, &own[c].req[i]);
        bool seq = pass_ilp_seq_splits(s, k, &own[c]);
        bool tie = best >= 0 && fabs(t - best_t) <= FOLLOW_TIE * fabs(best_t);
        if (tie ? (seq != best_seq ? seq : t < best_t) : t < best_t) {
            best_t = t;
            best = c;
            best_seq = seq;
        }
    }
    return best;
}

/* Op k's candidates into s->cand[k] and s->nc[k].  A merged op's
 * candidates are indexed like its leader's: its layout when the leader
 * takes candidate c is its best response to that (candidate 0, the
 * current plan, keeps its current layout when that reads the leader as
 * the leader produces it), and it shares the leader's columns (s->col0). */
bool pass_ilp_candidates(ilp *s, int k)
{
    prop *p = s->p;
    layout *own = s->own[k];
    int own_n = s->own_n[k];
    int i = s->merge ? leader_operand(p, k) : -1;
    if (i < 0) {
        s->cand[k] = own;
        s->nc[k] = own_n;
        s->own[k] = NULL;
        s->col0[k] = 0; /* columns made by the caller */
        return true;
    }
    int l = p->def[p->ops[k].op->operands[i]->id];
    int n = s->nc[l];
    layout *c = malloc((size_t)n * sizeof *c + 1);
    if (!c)
        return false;
    int rank = p->ops[k].op->operands[i]->type.rank;
    for (int q = 0; q < n; q++) {
        const ir_sharding *have = &s->cand[l][q].produced;
        if (q == 0 && ir_sharding_equal(&own[0].req[i], have, rank)) {
            c[0] = own[0];
            continue;
        }
        int b = best_follow(s, k, own, own_n, i, have);
        c[q] = own[b < 0 ? 0 : b];
    }
    s->cand[k] = c;
    s->nc[k] = n;
    s->col0[k] = s->col0[l];
    return true;
}

/* Every op's own candidates into s->own; whether the edge variables of
 * the whole program stay within ILP_FULL_PAIRS (else ops are merged). */
bool pass_ilp_own_all(ilp *s, bool *small)
{
    prop *p = s->p;
    double pairs = 0.0;
    mark_sharded_dims(p, s->sharded_dim);
    pass_ilp_seq_mark(s);
    for (int k = 0; k < p->nops; k++)
        if (!(s->own[k] = own_candidates(s, k, &s->own_n[k])))
            return false;
    for (int k = 0; k < p->nops; k++) {
        const ir_op *op = p->ops[k].op;
        for (int i = 0; i < op->noperands; i++) {
            int id = op->operands[i]->id;
            int d = id >= 0 && id < p->nvalues ? p->def[id] : -1;
            if (d >= 0)
                pairs += (double)s->own_n[d] * s->own_n[k];
        }
    }
    *small = pairs <= ILP_FULL_PAIRS;
    return true;
}

