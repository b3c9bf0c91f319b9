/*
 * cost.c - the cost pass: estimated time of every op and of the whole step.
 *
 * Each op gets its per-device estimate from the cost model library
 * (cost_op_estimate_onchip, passes/costmodel/): FLOPs, bytes and seconds,
 * with the formulas of docs/cost-model.md, the attention scores kept on
 * chip (cost_onchip_values) and each row group priced as the one pass
 * over its rows that codegen runs (cost_row_groups).  This file only walks
 * the module.
 *
 * Totals (m->totals) come from a two-stream schedule.  Resharding ops whose
 * operands are params or derived only from params (FSDP weight gathers) go
 * on a prefetch stream that starts at time 0 and runs alongside compute
 * (seed 000: "not on the critical path, can be done during the previous
 * layer"); the prefetch stream is itself serial (the links are shared).
 * Every other op runs in program order on the main stream; an op that needs
 * a prefetched value waits for it, and that wait is exposed communication,
 * as is every collective on the main stream.  step_time = max(end of main,
 * end of prefetch).
 *
 * MFU counts MODEL FLOPs, not executed ones (seed 003): each FLOP of the
 * unsharded program once, so per device the global FLOPs of every einsum
 * and MeshSlice loop divided by the devices (cost_op_model_flops).
 * MFU = sum over those ops of (model FLOPs / devices) / C_dtype, divided by
 * step_time (= model FLOPs per device / (step_time * peak) for one dtype).
 * A plan that computes a dim redundantly on several devices executes more
 * FLOPs per device but does no more of the model's work, so its MFU does
 * not rise with the redundant work; dividing executed FLOPs would reward it.
 *
 * A repeated block's body (`repeat L`) is one copy of its ops in the IR:
 * each op's annotation is one run, and the totals count it |L| times
 * (ir_op_trips).  A param-derived reshard in a body (an FSDP gather of one
 * layer's weights) is |L| transfers on the prefetch stream.
 *
 * A pipelined program (after the pipeline pass) is one microbatch on one
 * stage; its step as the schedule runs it goes to m->totals.pipe
 * (cost_pipe.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "pass.h"

void cost_annotate_ops(ir_module *m, const cost_hw *hw)
{
    /* Attention scores stay on chip (a Flash Attention kernel, seed 002). */
    bool *onchip = cost_onchip_values(m, hw);
    int nops = 0;
    for (ir_op *op = m->first; op; op = op->next) {
        cost_op_estimate_onchip(m, hw, op, onchip, &op->cost);
        nops++;
    }
    /* Row groups as codegen runs them: one read of their inputs, one
     * write of their outputs (cost_row_groups). */
    ir_op **ops = malloc((size_t)(nops > 0 ? nops : 1) * sizeof *ops);
    ir_cost *costs = malloc((size_t)(nops > 0 ? nops : 1) * sizeof *costs);
    if (ops && costs) {
        int i = 0;
        for (ir_op *op = m->first; op; op = op->next, i++) {
            ops[i] = op;
            costs[i] = op->cost;
        }
        if (cost_row_groups(m, hw, ops, nops, onchip, costs) == 0)
            for (i = 0; i < nops; i++)
                ops[i]->cost = costs[i];
    }
    free(ops);
    free(costs);
    free(onchip);
}

bool cost_value_is_param_derived(const ir_value *v)
{
    /* Walk up single-operand chains iteratively; a resharding op with
     * several operands does not exist, but check them all to be safe. */
    while (v) {
        if (v->kind == IR_VAL_PARAM)
            return true;
        /* One layer of a stacked param is a param too (a view of it). */
        if (v->kind != IR_VAL_OP || !v->def ||
            (!ir_op_is_reshard(v->def->kind) && v->def->kind != IR_OP_LAYERSLICE) ||
            v->def->noperands < 1)
            return false;
        for (int i = 1; i < v->def->noperands; i++)
            if (!cost_value_is_param_derived(v->def->operands[i]))
                return false;
        v = v->def->operands[0];
    }
    return false;
}

bool cost_is_matmul(const ir_op *op)
{
    return op && op->kind == IR_OP_EINSUM && op->noperands == 2 && !op->u.einsum.gather &&
           !op->u.einsum.scatter && op->result;
}

int64_t cost_coll_group(const ir_module *m, const ir_coll *c)
{
    ir_axes set = 0;
    for (int k = 0; k < c->naxes && k < IR_MAX_AXES; k++)
        if (c->axes[k] >= 0 && c->axes[k] < m->mesh.naxes)
            set |= (ir_axes)1 << c->axes[k];
    return ir_mesh_axes_size(&m->mesh, set);
}

bool cost_cm_pairs(const ir_module *m, const cost_hw *hw, const ir_op *mm, int64_t coll_trips)
{
    return hw && hw->collective_matmul && cost_is_matmul(mm) && ir_op_trips(m, mm) == coll_trips;
}

double cost_cm_hidden(const cost_hw *hw, double comm_s, double mm_s, int64_t group)
{
    if (!(comm_s > 0))
        return 0.0;
    return comm_s - cost_collective_matmul_exposed(hw, comm_s, mm_s, group);
}

/* Collective matmul: the matmul whose chunks hide main-stream collective
 * `op`, or NULL.  An AllGather hides behind the first op that reads its
 * result, a ReduceScatter behind the op that made its operand, when that
 * op pairs with it (cost_cm_pairs) and hides no earlier collective (hid[],
 * by the matmul's result id).  first_use[id]: the first op reading value
 * id.  The planner's replay (propagate_step.c) pairs the same way. */
static const ir_op *cm_partner(const ir_module *m, const cost_hw *hw, const ir_op *op, ir_op *const *first_use,
                               const bool *hid)
{
    if (!op->result || op->noperands < 1 || !op->cost.valid)
        return NULL;
    const ir_op *e = NULL;
    if (op->kind == IR_OP_ALLGATHER && op->result->id >= 0 && op->result->id < m->nvalues)
        e = first_use[op->result->id];
    else if (op->kind == IR_OP_REDUCESCATTER)
        e = op->operands[0]->def;
    if (!cost_cm_pairs(m, hw, e, ir_op_trips(m, op)) || !e->cost.valid || e->result->id < 0 ||
        e->result->id >= m->nvalues || hid[e->result->id])
        return NULL;
    return e;
}

void cost_compute_totals(ir_module *m, const cost_hw *hw)
{
    /* ready[id]: when value id is available (seconds from step start). */
    size_t nv = (size_t)(m->nvalues > 0 ? m->nvalues : 1);
    double *ready = ir_alloc(&m->arena, nv * sizeof *ready);
    /* first_use[id]: the first op reading value id; hid[id]: the matmul
     * making value id hides a collective already (collective matmul). */
    ir_op **first_use = ir_alloc(&m->arena, nv * sizeof *first_use);
    bool *hid = ir_alloc(&m->arena, nv * sizeof *hid);
    for (ir_op *op = m->first; op; op = op->next)
        for (int i = 0; i < op->noperands; i++) {
            const ir_value *v = op->operands[i];
            if (v && v->id >= 0 && v->id < m->nvalues && !first_use[v->id])
                first_use[v->id] = op;
        }
    double main_t = 0, side_t = 0, exposed = 0, busy_peak = 0, model = 0, ew = 0;
    double devices = (double)ir_mesh_devices(&m->mesh);
    if (devices < 1)
        devices = 1;
    for (ir_op *op = m->first; op; op = op->next) {
        double dep = 0;
        for (int i = 0; i < op->noperands; i++) {
            const ir_value *v = op->operands[i];
            if (v && v->id >= 0 && v->id < m->nvalues && ready[v->id] > dep)
                dep = ready[v->id];
        }
        /* A repeated block's body runs once per layer: its time, FLOPs and
         * collectives count that many times (the ops of one iteration wait
         * for the previous one, so they add up in program order). */
        double trips = (double)ir_op_trips(m, op);
        double t = op->cost.valid ? op->cost.time * trips : 0;
        double end;
        if (ir_op_is_reshard(op->kind) && op->result && cost_value_is_param_derived(op->result)) {
            side_t = fmax(side_t, dep) + t;
            end = side_t;
        } else {
            /* An activation AllGather or ReduceScatter beside its matmul
             * leaves only what the matmul's chunks do not hide (collective
             * matmul, on a profile that does it). */
            const ir_op *e = cm_partner(m, hw, op, first_use, hid);
            if (e) {
                t = cost_collective_matmul_exposed(hw, op->cost.time, e->cost.time,
                                                   cost_coll_group(m, &op->u.coll)) * trips;
                hid[e->result->id] = true;
            }
            if (dep > main_t) {
                exposed += dep - main_t; /* waiting for a prefetched value */
                main_t = dep;
            }
            main_t += t;
            end = main_t;
            if ((ir_op_is_reshard(op->kind) && op->kind != IR_OP_SLICE) ||
                ir_op_has_trait(op->kind, IR_TRAIT_TRANSFER)) /* a pipeline's hop */
                exposed += t;
        }
        if (op->kind == IR_OP_MESHSLICE && op->cost.valid) /* the loop's communication not hidden */
            exposed += fmax(0, op->cost.time - op->cost.t_compute) * trips;
        /* Model FLOPs, not executed ones: each device's share of the
         * unsharded op's FLOPs, at the peak of the op's dtype. */
        double mf = cost_op_model_flops(m, op) * trips;
        model += mf;
        ew += cost_op_elementwise_flops(m, op) * trips;
        if (mf > 0 && op->result)
            busy_peak += mf / devices /
                         cost_peak_flops(hw, hw->measured ? op->result->type.dtype
                                                          : cost_einsum_dtype(m, op));
        if (op->result && op->result->id >= 0 && op->result->id < m->nvalues)
            ready[op->result->id] = end;
    }
    double step = fmax(main_t, side_t);
    if (side_t > main_t)
        exposed += side_t - main_t; /* a prefetch nobody waited for still ends the step */
    m->totals.valid = true;
    m->totals.step_time = step;
    m->totals.exposed_comm_time = exposed;
    m->totals.mfu = step > 0 ? busy_peak / step : 0;
    m->totals.model_flops = model;
    m->totals.elementwise_flops = ew;
    m->totals.peak_memory = cost_memory_peak(m).peak;
    /* The plan's certificate compares the planner's serial objective with
     * the bound on a serial step. */
    cost_bound b;
    if (cost_lower_bound(m, hw, &b) != 0)
        b = (cost_bound){0};
    m->totals.bound_serial = b.total_s;
    m->totals.bound_compute = b.compute_s;
    m->totals.bound_memory = b.memory_s;
    m->totals.bound_comm = b.comm_s;
    m->totals.bound_hbm_bytes = b.hbm_bytes;
}

int pass_cost(pass_ctx *ctx, ir_module *m)
{
    cost_hw local;
    const cost_hw *hw = ctx ? ctx->hw : NULL;
    if (!hw) {
        char err[512];
        if (cost_hw_load(COST_DEFAULT_HW, &local, err, sizeof err) < 0) {
            if (ctx && ctx->diag)
                diag_error(ctx->diag, DIAG_NOLOC, "cost: %s", err);
            else
                fprintf(stderr, "einc: error: cost: %s\n", err);
            return 1;
        }
        hw = &local;
    }
    cost_annotate_ops(m, hw);
    cost_compute_totals(m, hw);
    /* A pipelined program's step is its schedule's (cost_pipe.c); one that
     * cannot be priced so keeps its per-microbatch totals, with a warning. */
    char why[256];
    if (cost_pipe_totals(m, hw, true, why, sizeof why) != 0) {
        if (ctx && ctx->diag)
            diag_warning(ctx->diag, m->pipe.loc, "cost: the pipelined step is not priced: %s", why);
        else
            fprintf(stderr, "einc: warning: cost: the pipelined step is not priced: %s\n", why);
    }
    /* Reports name values as tensor.N; keep the numbering current. */
    ir_module_renumber(m);
    if (ctx && ctx->log)
        fprintf(ctx->log, "cost: %s: step %.3f us, exposed communication %.3f us, MFU %.1f%%\n",
                hw->name, m->totals.step_time * 1e6, m->totals.exposed_comm_time * 1e6,
                m->totals.mfu * 100);
    if (ctx && ctx->log && m->totals.pipe.valid)
        fprintf(ctx->log, "cost: pipelined step %.3f us over %d stages and %d microbatches, bubble %.1f%%\n",
                m->totals.pipe.step * 1e6, m->totals.pipe.stages, m->totals.pipe.microbatches,
                m->totals.pipe.bubble * 100);
    return 0;
}
