/*
 * propagate_cost.c - the propagate pass's objective: what a layout of an
 * op costs (its compute on the --hw profile plus the reshards of its
 * operands and result, each priced by the resharding planner and memoised),
 * the terms of one value and of the whole program.  propagate_layout.c
 * searches the layouts that these costs rank.  See the essays at the top
 * of propagate.c and propagate_layout.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "propagate_internal.h"

cost pass_prop_cost_add(cost a, cost b)
{
    cost c = {a.time + b.time, a.bytes + b.bytes, a.nops + b.nops};
    return c;
}

bool pass_prop_cost_less(cost a, cost b)
{
    if (isinf(b.bytes))
        return !isinf(a.bytes);
    if (isinf(a.bytes))
        return false;
    double teps = 1e-9 * fmax(a.time, b.time);
    if (a.time < b.time - teps)
        return true;
    if (a.time > b.time + teps)
        return false;
    double eps = 1e-9 * fmax(1.0, fmax(a.bytes, b.bytes));
    if (a.bytes < b.bytes - eps)
        return true;
    return a.bytes <= b.bytes + eps && a.nops < b.nops;
}

/* ---- reshard costs ---- */

/* The collectives at the ends of `plan` (reshard_ends). */
static reshard_ends plan_ends(const ir_module *m, const pass_reshard_plan *plan)
{
    reshard_ends e = {0};
    if (plan->nsteps < 1)
        return e;
    const pass_reshard_step *h = &plan->steps[0], *t = &plan->steps[plan->nsteps - 1];
    if (h->kind == IR_OP_REDUCESCATTER) {
        e.head_rs = h->time;
        e.head_group = cost_coll_group(m, &h->coll);
    }
    if (t->kind == IR_OP_ALLGATHER) {
        e.tail_ag = t->time;
        e.tail_group = cost_coll_group(m, &t->coll);
    }
    return e;
}

/* Memoised min-cost reshard of value v from `from` to `to`; the ends of
 * its plan into *ends when not NULL. */
static cost reshard_cost_ends(prop *p, const ir_value *v, const ir_sharding *from, const ir_sharding *to,
                              reshard_ends *ends)
{
    int rank = v->type.rank;
    if (ends)
        *ends = (reshard_ends){0};
    if (ir_sharding_equal(from, to, rank))
        return COST_ZERO;
    int naxes = p->m->mesh.naxes;
    uint32_t kf = pass_reshard_key(from, rank, naxes), kt = pass_reshard_key(to, rank, naxes);
    if (p->cache_n * 2 >= p->cache_cap) {
        size_t ncap = p->cache_cap ? 2 * p->cache_cap : 1024;
        cache_ent *nc = calloc(ncap, sizeof *nc);
        if (nc) {
            for (size_t i = 0; i < p->cache_cap; i++) {
                if (!p->cache[i].used)
                    continue;
                const cache_ent *e = &p->cache[i];
                size_t h = ((size_t)e->vid * 2654435761u ^ e->from * 40503u ^ e->to * 2246822519u) & (ncap - 1);
                while (nc[h].used)
                    h = (h + 1) & (ncap - 1);
                nc[h] = *e;
            }
            free(p->cache);
            p->cache = nc;
            p->cache_cap = ncap;
        }
    }
    /* Memoised by type class: the route depends on the dtype and dims only. */
    int vid = v->id >= 0 && v->id < p->nvalues ? p->tclass[v->id] : v->id;
    size_t h = 0;
    if (p->cache_cap) {
        h = ((size_t)vid * 2654435761u ^ kf * 40503u ^ kt * 2246822519u) & (p->cache_cap - 1);
        while (p->cache[h].used) {
            const cache_ent *e = &p->cache[h];
            if (e->vid == vid && e->from == kf && e->to == kt) {
                if (ends)
                    *ends = e->ends;
                return e->c;
            }
            h = (h + 1) & (p->cache_cap - 1);
        }
    }
    ir_type t = v->type;
    t.sh = *from;
    pass_reshard_plan plan;
    cost c = COST_INF;
    reshard_ends en = {0};
    /* A class whose state space one search could not cover will not be
     * covered by the next: the planner's time stays bounded (reshard.h). */
    bool *over = p->over_budget && vid >= 0 && vid <= p->nvalues ? &p->over_budget[vid] : NULL;
    bool found = over && *over ? pass_reshard_find_direct(p->m, p->hw, &t, to, &plan)
                               : pass_reshard_find_timed(p->m, p->hw, &t, to, &plan);
    if (found) {
        c.time = plan.time;
        c.bytes = plan.bytes;
        c.nops = plan.nsteps;
        en = plan_ends(p->m, &plan);
        if (plan.bounded) {
            p->bounded++;
            if (over)
                *over = true;
        }
    }
    if (p->cache_cap && p->cache_n * 2 < p->cache_cap) {
        cache_ent e = {true, vid, kf, kt, c, en};
        p->cache[h] = e;
        p->cache_n++;
    }
    if (ends)
        *ends = en;
    return c;
}

/* Memoised min-cost reshard of value v from `from` to `to`. */
static cost reshard_cost(prop *p, const ir_value *v, const ir_sharding *from, const ir_sharding *to)
{
    return reshard_cost_ends(p, v, from, to, NULL);
}

/* The sharding value v has for its consumers under the current decisions:
 * its constraint if it has one (it is resharded into it right after its
 * op), the layout's result if its op is decided, else its type's. */
ir_sharding pass_prop_current(const prop *p, const ir_value *v)
{
    if (v->kind == IR_VAL_OP && v->has_constraint)
        return v->constraint;
    /* One layer of a LayerStack (a backward loop reading the forward
     * loop's activations) is what the stacked body value currently is. */
    const ir_op *d = v->def;
    if (d && d->kind == IR_OP_LAYERSLICE && d->noperands == 1 && d->operands[0]->def &&
        d->operands[0]->def->kind == IR_OP_LAYERSTACK && d->operands[0]->def->noperands == 1)
        return pass_prop_reduced(pass_prop_current(p, d->operands[0]->def->operands[0]));
    int k = v->id >= 0 && v->id < p->nvalues ? p->def[v->id] : -1;
    if (k >= 0 && p->ops[k].decided)
        return p->ops[k].lay.produced;
    return v->type.sh;
}

/* How many times `op` runs in a step: the trip count of the repeated block
 * whose body holds it, else 1.  A reshard runs as often as the op it is
 * emitted in front of. */
static double op_trips(const prop *p, const ir_op *op)
{
    return op ? (double)ir_op_trips(p->m, op) : 1.0;
}

/* c for `trips` runs (time and bytes; the op count is the plan's). */
static cost cost_times(cost c, double trips)
{
    c.time *= trips;
    c.bytes *= trips;
    return c;
}

/* Adds `trips` times cost(v: sh -> want) to *c unless `want` is among
 * wants[0..*n-1] (one reshard per distinct target is emitted and shared),
 * and records it. */
static void add_target(prop *p, const ir_value *v, const ir_sharding *sh, const ir_sharding *want,
                       double trips, ir_sharding *wants, int *n, int cap, cost *c)
{
    for (int i = 0; i < *n; i++)
        if (ir_sharding_equal(&wants[i], want, v->type.rank))
            return;
    if (*n < cap)
        wants[(*n)++] = *want;
    *c = pass_prop_cost_add(*c, cost_times(reshard_cost(p, v, sh, want), trips));
}

/* A value a repeated block reads (entering it, or the body's new value at
 * its end) must be in the loop's carried sharding there: adds that reshard,
 * once for the value entering and every iteration for the body's value. */
static void add_carried(prop *p, const ir_value *v, const ir_sharding *sh, ir_sharding *wants, int *n,
                        int cap, cost *c)
{
    const ir_op *lp = v->id >= 0 && v->id < p->nvalues ? p->loop_use[v->id] : NULL;
    if (!lp)
        return;
    ir_sharding carried = lp->result->type.sh;
    double trips = lp->kind == IR_OP_LOOPEND ? op_trips(p, v->def) : 1.0;
    add_target(p, v, sh, &carried, trips, wants, n, cap, c);
}

/* Cost of bringing result sharding `sh` of op k to everything that uses it:
 * one reshard per distinct sharding its consumers and outputs need. */
static cost result_cost(prop *p, int k, const ir_sharding *sh)
{
    const ir_value *v = p->ops[k].op->result;
    if (v->has_constraint)
        return cost_times(reshard_cost(p, v, sh, &v->constraint), op_trips(p, p->ops[k].op));
    cost c = COST_ZERO;
    ir_sharding wants[MAX_HINTS];
    int n = 0;
    for (int u = p->use_start[v->id]; u < p->use_start[v->id + 1]; u++) {
        const opinfo *c2 = &p->ops[p->uses[u].op];
        /* A consumer not decided yet (first sweep): a linear one is assumed
         * to carry the partial sums on (it pays for reducing its own
         * result), any other to need them reduced. */
        bool sums_pass = sh->red == IR_RED_SUM &&
                         ((c2->op->kind == IR_OP_EINSUM && c2->op->u.einsum.reduce == IR_RED_SUM) ||
                          c2->linear);
        ir_sharding want = c2->decided ? c2->lay.req[p->uses[u].operand]
                           : sums_pass ? *sh : pass_prop_reduced(*sh);
        add_target(p, v, sh, &want, op_trips(p, c2->op), wants, &n, MAX_HINTS, &c);
    }
    add_carried(p, v, sh, wants, &n, MAX_HINTS, &c);
    for (int i = 0; i < p->m->noutputs; i++) {
        const ir_output *o = &p->m->outputs[i];
        if (o->value != v)
            continue;
        ir_sharding want = o->has_constraint ? o->constraint : pass_prop_reduced(*sh);
        add_target(p, v, sh, &want, 1.0, wants, &n, MAX_HINTS, &c);
    }
    return c;
}

/* Whether some use of v other than by op k, or an output of v, already
 * needs v in sharding `want`: that reshard is emitted once and shared, so
 * op k needing it too costs nothing more. */
static bool needed_elsewhere(const prop *p, const ir_value *v, int k, const ir_sharding *want)
{
    int rank = v->type.rank;
    if (v->id < 0 || v->id >= p->nvalues)
        return false;
    for (int u = p->use_start[v->id]; u < p->use_start[v->id + 1]; u++) {
        const opinfo *c = &p->ops[p->uses[u].op];
        if (p->uses[u].op != k && c->decided && ir_sharding_equal(&c->lay.req[p->uses[u].operand], want, rank))
            return true;
    }
    for (int i = 0; i < p->m->noutputs; i++) {
        const ir_output *o = &p->m->outputs[i];
        if (o->value != v)
            continue;
        ir_sharding t = o->has_constraint ? o->constraint : pass_prop_reduced(pass_prop_current(p, v));
        if (ir_sharding_equal(&t, want, rank))
            return true;
    }
    return false;
}


double pass_prop_reshard_time(prop *p, const ir_value *v, const ir_sharding *from, const ir_sharding *to)
{
    return reshard_cost(p, v, from, to).time;
}

reshard_ends pass_prop_reshard_ends(prop *p, const ir_value *v, const ir_sharding *from, const ir_sharding *to)
{
    reshard_ends e;
    reshard_cost_ends(p, v, from, to, &e);
    return e;
}

/* Seconds of one run of op k under `lay` (cost_op_estimate on its
 * per-device shapes) and, in *credit, its MeshSlice credit. */
static double op_time(prop *p, int k, const layout *lay, double *credit)
{
    /* The op on stack copies of its values carrying the layout's
     * shardings: cost_op_estimate reads only kinds, types and the arm. */
    const ir_op *op = p->ops[k].op;
    ir_value vals[IR_MAX_OPERANDS + 1];
    ir_op o = *op;
    for (int i = 0; i < op->noperands; i++) {
        vals[i] = *op->operands[i];
        vals[i].type.sh = lay->req[i];
        o.operands[i] = &vals[i];
    }
    vals[IR_MAX_OPERANDS] = *op->result;
    vals[IR_MAX_OPERANDS].type.sh = lay->produced;
    o.result = &vals[IR_MAX_OPERANDS];
    ir_cost c;
    cost_op_estimate(p->m, p->hw, &o, &c);
    *credit = pass_prop_meshslice_credit(p, k, lay, c.time);
    return c.time;
}

double pass_prop_compute_time(prop *p, int k, const layout *lay)
{
    if (!p->hw)
        return 0.0;
    double credit, t = op_time(p, k, lay, &credit);
    return (t - credit) * op_trips(p, p->ops[k].op);
}

double pass_prop_matmul_time(prop *p, int k, const layout *lay)
{
    if (!p->hw || !cost_is_matmul(p->ops[k].op))
        return 0.0;
    double credit, t = op_time(p, k, lay, &credit);
    return credit > 0 ? 0.0 : t;
}

/* Cost of layout `lay` (already filled) for op k: its compute time, the
 * reshards of its operands not shared with other uses, plus those of its
 * result. */
cost pass_prop_layout_cost(prop *p, int k, const layout *lay)
{
    const ir_op *op = p->ops[k].op;
    p->evals++;
    cost c = COST_ZERO;
    c.time = pass_prop_compute_time(p, k, lay);
    for (int i = 0; i < op->noperands && !isinf(c.bytes); i++) {
        const ir_value *v = op->operands[i];
        bool shared = needed_elsewhere(p, v, k, &lay->req[i]);
        for (int j = 0; j < i && !shared; j++)
            shared = op->operands[j] == v && ir_sharding_equal(&lay->req[j], &lay->req[i], v->type.rank);
        if (shared)
            continue;
        ir_sharding have = pass_prop_current(p, v);
        c = pass_prop_cost_add(c, cost_times(reshard_cost(p, v, &have, &lay->req[i]), op_trips(p, op)));
    }
    if (!isinf(c.bytes))
        c = pass_prop_cost_add(c, result_cost(p, k, &lay->produced));
    return c;
}

/* The objective's terms of value `id`: its constraint's reshard and one
 * reshard per distinct sharding its consumers and outputs need. */
cost pass_prop_value_cost(prop *p, int id)
{
    cost t = COST_ZERO;
    {
        const ir_value *v = p->m->values[id];
        int k = p->def[id];
        /* A value no compute op makes is what its consumers see now (a
         * layer of a LayerStack follows the stacked body value). */
        ir_sharding have = k < 0 ? pass_prop_current(p, v) : p->ops[k].decided ? p->ops[k].lay.produced
                                                                                 : v->type.sh;
        if (k >= 0 && v->has_constraint) {
            t = pass_prop_cost_add(t, cost_times(reshard_cost(p, v, &have, &v->constraint),
                                                 op_trips(p, p->ops[k].op)));
            have = v->constraint;
        }
        ir_sharding wants[MAX_HINTS];
        int n = 0;
        for (int u = p->use_start[id]; u < p->use_start[id + 1]; u++) {
            const opinfo *c = &p->ops[p->uses[u].op];
            if (c->decided)
                add_target(p, v, &have, &c->lay.req[p->uses[u].operand], op_trips(p, c->op), wants, &n,
                           MAX_HINTS, &t);
        }
        add_carried(p, v, &have, wants, &n, MAX_HINTS, &t);
        for (int i = 0; i < p->m->noutputs; i++) {
            const ir_output *o = &p->m->outputs[i];
            if (o->value != v)
                continue;
            ir_sharding want = o->has_constraint ? o->constraint : pass_prop_reduced(have);
            add_target(p, v, &have, &want, 1.0, wants, &n, MAX_HINTS, &t);
        }
    }
    return t;
}

cost pass_prop_total_cost(prop *p)
{
    cost t = COST_ZERO;
    for (int k = 0; k < p->nops; k++)
        if (p->ops[k].decided)
            t.time += pass_prop_compute_time(p, k, &p->ops[k].lay);
    for (int id = 0; id < p->nvalues; id++)
        t = pass_prop_cost_add(t, pass_prop_value_cost(p, id));
    return t;
}
