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
 * outputs after it.  The step is the later of the two streams' ends.  The
 * choice between the first phase's plan and the wide phase's uses it
 * (propagate.c, widen), so the margin a wider plan must win by is a margin
 * of the step the cost pass will report.  Not replayed (they are small):
 * the reshard of a repeated block's new value into its carried sharding.
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

double pass_prop_step_time(prop *p)
{
    if (!p->hw)
        return pass_prop_total_cost(p).time;
    int cap = 64, n = 0;
    done *dn = malloc((size_t)cap * sizeof *dn);
    double *ready = calloc((size_t)p->nvalues + 1, sizeof *ready);
    if (!dn || !ready) {
        free(dn);
        free(ready);
        return pass_prop_total_cost(p).time;
    }
    double main_t = 0, side_t = 0;
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
                double t = pass_prop_reshard_time(p, v, &have, &oi->lay.req[i]) * trips;
                double r;
                if (cost_value_is_param_derived(v)) {
                    side_t = fmax(side_t, at) + t;
                    r = side_t;
                } else {
                    main_t = fmax(main_t, at) + t;
                    r = main_t;
                }
                if (n == cap) {
                    done *g = realloc(dn, (size_t)cap * 2 * sizeof *dn);
                    if (!g)
                        break;
                    dn = g;
                    cap *= 2;
                }
                dn[n++] = (done){v->id, oi->lay.req[i], r};
            }
            dep = fmax(dep, dn[j].ready);
        }
        main_t = fmax(main_t, dep) + pass_prop_compute_time(p, k, &oi->lay);
        const ir_value *r = op->result;
        ir_sharding have = oi->lay.produced;
        if (r->has_constraint) {
            main_t += pass_prop_reshard_time(p, r, &have, &r->constraint) * trips;
            have = r->constraint;
        }
        for (int o = 0; o < p->m->noutputs; o++) {
            const ir_output *out = &p->m->outputs[o];
            if (out->value != r)
                continue;
            ir_sharding want = out->has_constraint ? out->constraint : pass_prop_reduced(have);
            main_t += pass_prop_reshard_time(p, r, &have, &want);
        }
        if (r->id >= 0 && r->id < p->nvalues)
            ready[r->id] = main_t;
    }
    free(dn);
    free(ready);
    return fmax(main_t, side_t);
}
