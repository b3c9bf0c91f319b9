/*
 * propagate_step.c - the step time of the planner's current plan with
 * parameter gathers overlapped, as the cost pass schedules it.
 *
 * The search's objective (propagate_cost.c) is the serial sum of the
 * ops' compute and the reshards' times: it decomposes into op and value
 * terms, which is what the sweeps, the joint moves and branch and bound
 * need.  The cost pass (cost.c) instead schedules on two streams: a
 * reshard of a param (an FSDP weight gather) runs on a prefetch stream
 * from the start of the step, alongside compute (seed 000: the gathers
 * are "not on the critical path, can be done during the previous layer"),
 * and the main stream waits for it only where it is not done yet.  A plan
 * whose collectives are mostly parameter gathers is thus faster than its
 * serial sum says.
 *
 * This file replays that schedule on the planner's decisions, without
 * materialising them: ops in program order; each operand reshard (each
 * distinct target of a value once, as materialisation shares them) on the
 * prefetch stream when the value is a param or a layer of one, else on
 * the main stream (a layer of a stacked param is sliced on the main
 * stream just before its first use, so its gather starts no earlier,
 * as in the cost pass's order); the op's compute on the main stream once its operands
 * are ready; the reshards of its result into its constraint and its
 * outputs after it (an output's shared with a later reader needing it).  The step is the later of the two streams' ends.  The
 * choice between the first phase's plan and the wide phase's uses it
 * (propagate.c, widen), so the margin a wider plan must win by is a margin
 * of the step the cost pass will report.  A repeated block's new value is
 * resharded into its carried sharding after the op making it, every layer.
 *
 * On a profile with collective matmul (hw->collective_matmul) a
 * main-stream reshard whose plan ends in an AllGather into a matmul, or
 * starts with a ReduceScatter of a matmul's partial sums, leaves only
 * cost_collective_matmul_exposed of that step on the stream, each matmul
 * hiding one collective, the first in program order, as the cost pass
 * pairs them (cost.c, cm_partner).
 */
#include <math.h>
#include <stdlib.h>

#include "cost.h"
#include "propagate_internal.h"

/* One reshard already scheduled: value, target, and when it is done. */
typedef struct done {
    int id;
    ir_sharding to;
    double ready;
} done;

/* Appends d to dn (n entries, capacity *cap); false when out of memory. */
static bool done_add(done **dn, int *n, int *cap, done d)
{
    if (*n == *cap) {
        done *g = realloc(*dn, (size_t)*cap * 2 * sizeof **dn);
        if (!g)
            return false;
        *dn = g;
        *cap *= 2;
    }
    (*dn)[(*n)++] = d;
    return true;
}

/* Seconds of one run of collective step `comm` (over `group` devices,
 * run `trips` times a step) that op k's chunks hide as a collective
 * matmul: op k is a decided op that pairs with it (cost_cm_pairs, the
 * cost pass's rule) and hides nothing yet (hid[k], then set). */
static double hide(prop *p, int k, double comm, int64_t group, double trips, bool *hid)
{
    if (comm <= 0 || k < 0 || k >= p->nops || hid[k] || !p->ops[k].decided ||
        !cost_cm_pairs(p->m, p->hw, p->ops[k].op, (int64_t)trips))
        return 0.0;
    double mm = pass_prop_matmul_time(p, k, &p->ops[k].lay);
    if (mm <= 0)
        return 0.0;
    hid[k] = true;
    return cost_cm_hidden(p->hw, comm, mm, group);
}

/* Seconds of reshard v: from -> to (run `trips` times; `producer` the op
 * whose result it reads directly, or -1; `consumer` the op it feeds, or -1
 * for a constraint or an output) left on the main stream after a
 * collective matmul hides what it can (hide). */
static double main_reshard(prop *p, const ir_value *v, const ir_sharding *from, const ir_sharding *to,
                           int producer, int consumer, double trips, bool *hid)
{
    double t = pass_prop_reshard_time(p, v, from, to);
    if (!p->hw->collective_matmul || !(t > 0) || isinf(t))
        return t * trips;
    reshard_ends e = pass_prop_reshard_ends(p, v, from, to);
    /* Its first step, a ReduceScatter, behind the matmul that made v (run
     * as often); its last, an AllGather, behind the one it feeds. */
    double h = hide(p, producer, e.head_rs, e.head_group, trips, hid);
    h += hide(p, consumer, e.tail_ag, e.tail_group, trips, hid);
    return (t - h) * trips;
}

double pass_prop_step_time(prop *p)
{
    if (!p->hw)
        return pass_prop_total_cost(p).time;
    int cap = 64, n = 0;
    done *dn = malloc((size_t)cap * sizeof *dn);
    double *ready = calloc((size_t)p->nvalues + 1, sizeof *ready);
    bool *hid = calloc((size_t)p->nops + 1, sizeof *hid);
    if (!dn || !ready || !hid) {
        free(dn);
        free(ready);
        free(hid);
        return pass_prop_total_cost(p).time;
    }
    double main_t = 0, side_t = 0;
    /* A loop's carry from a value no compute op makes (an input, a layer
     * of a stacked value): its reshard on the main stream (the carries of
     * op results follow their ops, below). */
    for (const ir_op *op = p->m->first; op; op = op->next) {
        if (op->kind != IR_OP_LOOPBEGIN || op->noperands != 1 || !op->u.loop.end ||
            op->u.loop.end->noperands != 1)
            continue;
        const ir_value *ends[2] = {op->operands[0], op->u.loop.end->operands[0]};
        for (int i = 0; i < 2; i++) {
            const ir_value *v = ends[i];
            if (v->id >= 0 && v->id < p->nvalues && p->def[v->id] >= 0)
                continue;
            ir_sharding have = pass_prop_current(p, v);
            main_t += pass_prop_reshard_time(p, v, &have, &op->result->type.sh) *
                      (i ? (double)ir_loop_trips(p->m, op) : 1.0);
        }
    }
    for (int k = 0; k < p->nops; k++) {
        const opinfo *oi = &p->ops[k];
        const ir_op *op = oi->op;
        double trips = (double)ir_op_trips(p->m, op), dep = 0, start = main_t;
        for (int i = 0; i < op->noperands; i++) {
            const ir_value *v = op->operands[i];
            bool known = v->id >= 0 && v->id < p->nvalues;
            /* A layer of a stacked param is sliced on the main stream just
             * before its first consumer, so its gather starts no earlier. */
            double at = !known ? 0 : v->def && v->def->kind == IR_OP_LAYERSLICE ? start : ready[v->id];
            ir_sharding have = pass_prop_current(p, v);
            if (ir_sharding_equal(&have, &oi->lay.req[i], v->type.rank)) {
                dep = fmax(dep, at);
                continue;
            }
            int j = 0;
            while (j < n && !(dn[j].id == v->id && ir_sharding_equal(&dn[j].to, &oi->lay.req[i], v->type.rank)))
                j++;
            if (j == n) {
                double r;
                if (cost_value_is_param_derived(v)) {
                    side_t = fmax(side_t, at) + pass_prop_reshard_time(p, v, &have, &oi->lay.req[i]) * trips;
                    r = side_t;
                } else {
                    main_t = fmax(main_t, at) + main_reshard(p, v, &have, &oi->lay.req[i],
                                                              known && !v->has_constraint ? p->def[v->id] : -1,
                                                              k, trips, hid);
                    r = main_t;
                }
                if (!done_add(&dn, &n, &cap, (done){v->id, oi->lay.req[i], r}))
                    break;
            }
            dep = fmax(dep, dn[j].ready);
        }
        main_t = fmax(main_t, dep) + pass_prop_compute_time(p, k, &oi->lay);
        const ir_value *r = op->result;
        ir_sharding have = oi->lay.produced;
        if (r->has_constraint) {
            main_t += main_reshard(p, r, &have, &r->constraint, k, -1, trips, hid);
            have = r->constraint;
        }
        for (int o = 0; o < p->m->noutputs; o++) {
            const ir_output *out = &p->m->outputs[o];
            if (out->value != r)
                continue;
            ir_sharding want = out->has_constraint ? out->constraint : pass_prop_reduced(have);
            if (ir_sharding_equal(&have, &want, r->type.rank))
                continue;
            main_t += main_reshard(p, r, &have, &want, r->has_constraint ? -1 : k, -1, 1.0, hid);
            /* A consumer needing the output's sharding reads the same
             * reshard, as materialisation shares it (and the serial
             * objective counts it once). */
            if (!done_add(&dn, &n, &cap, (done){r->id, want, main_t}))
                break;
        }
        if (r->id < 0 || r->id >= p->nvalues)
            continue;
        ready[r->id] = main_t;
        /* A repeated block's carry: the body's new value is resharded into
         * the loop's carried sharding every layer (LoopEnd), a value
         * entering the loop once (LoopBegin), as the serial objective counts
         * it (add_carried); on the main stream after the op (the cost pass
         * runs it at the body's end; the stream is serial either way), and
         * shared with a consumer needing the same sharding. */
        const ir_op *lp = p->loop_use[r->id];
        if (lp && !ir_sharding_equal(&have, &lp->result->type.sh, r->type.rank)) {
            main_t += main_reshard(p, r, &have, &lp->result->type.sh, r->has_constraint ? -1 : k, -1,
                                   lp->kind == IR_OP_LOOPEND ? trips : 1.0, hid);
            done_add(&dn, &n, &cap, (done){r->id, lp->result->type.sh, main_t});
        }
    }
    free(dn);
    free(ready);
    free(hid);
    return fmax(main_t, side_t);
}
