/*
 * print_json.c - the --dump-ir=json format (docs/ir.md), built with cJSON.
 *
 * {"file", "mesh": [{"name","size"[,"over": 2 | "dcn"]}], "dims": [{"name","size"}],
 *  "pipeline": {axis, stages, layer_dim, batch_dim, batch, microbatches, schedule, table}
 *  (a pipelined program, after the pipeline pass),
 *  "inputs": [value...], "ops": [op...], "outputs": [{"name","value"}],
 *  "totals": {...} (after the cost pass; of a pipelined program also
 *    "pipeline": {stages, microbatches, schedule, step_time, pipeline_time,
 *    sync_time, bubble, bubble_formula, held_microbatches, stage_memory,
 *    hop_time, stage_forward_time, stage_backward_time, first_stage_extra,
 *    last_stage_extra, first_stage_extra_forward, last_stage_extra_forward,
 *    first_stage_extra_w, last_stage_extra_w, stage_sum_time, core_bubbles}),
 *  "plan": {objective, proof, best, candidates, merged, why, text} (after propagate with a profile)}
 * value = {"name", "tensor", "type", "dtype", "bytes_per_device"}
 * op    = {"index", "op", "axes", "operands", "result", "reason",
 *          "for": {"op", "operand"} (inserted ops), "einsum" | "expr" | "dim",
 *          "cost": {...} (after the cost pass)}
 */
#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "print_internal.h"

static cJSON *value_json(const ir_module *m, const ir_value *v)
{
    char name[96], type[512];
    cJSON *o = cJSON_CreateObject();
    ir_value_name(v, name, sizeof name);
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "tensor", v->tensor);
    cJSON_AddStringToObject(o, "type", ir_type_str(m, v->tensor, &v->type, type, sizeof type));
    cJSON_AddStringToObject(o, "dtype", ir_dtype_name(v->type.dtype));
    cJSON_AddNumberToObject(o, "bytes_per_device", (double)ir_local_bytes(m, &v->type));
    return o;
}

/* totals.pipeline: the pipelined step (ir_pipe_totals), seconds and bytes
 * per device, named as `einc analyze --stages`'s JSON names them. */
static void add_pipe_totals(cJSON *totals, const ir_module *m)
{
    const ir_pipe_totals *p = &m->totals.pipe;
    cJSON *o = cJSON_AddObjectToObject(totals, "pipeline");
    cJSON_AddNumberToObject(o, "stages", p->stages);
    cJSON_AddBoolToObject(o, "forward", p->forward);
    cJSON_AddNumberToObject(o, "microbatches", p->microbatches);
    cJSON_AddStringToObject(o, "schedule", m->pipe.schedule_name ? m->pipe.schedule_name : "?");
    if (m->pipe.resolved)
        cJSON_AddStringToObject(o, "schedule_resolved", m->pipe.resolved);
    cJSON_AddNumberToObject(o, "step_time", p->step);
    cJSON_AddNumberToObject(o, "pipeline_time", p->pipeline);
    cJSON_AddNumberToObject(o, "sync_time", p->sync_update);
    cJSON_AddNumberToObject(o, "bubble", p->bubble);
    cJSON_AddNumberToObject(o, "bubble_formula", p->bubble_formula);
    cJSON_AddNumberToObject(o, "held_microbatches", p->held);
    cJSON_AddNumberToObject(o, "stage_memory", p->stage_memory);
    cJSON_AddNumberToObject(o, "hop_time", p->hop);
    cJSON_AddNumberToObject(o, "stage_forward_time", p->stage_f);
    cJSON_AddNumberToObject(o, "stage_backward_time", p->stage_b);
    cJSON_AddNumberToObject(o, "first_stage_extra", p->first_extra);
    cJSON_AddNumberToObject(o, "last_stage_extra", p->last_extra);
    cJSON_AddNumberToObject(o, "first_stage_extra_forward", p->first_extra_f);
    cJSON_AddNumberToObject(o, "last_stage_extra_forward", p->last_extra_f);
    cJSON_AddNumberToObject(o, "first_stage_extra_w", p->first_extra_w);
    cJSON_AddNumberToObject(o, "last_stage_extra_w", p->last_extra_w);
    cJSON_AddNumberToObject(o, "stage_sum_time", p->stage_sums);
    /* [c - 1]: the stages sharing c CPUs (pp_core_bubble); none for a forward. */
    cJSON *cb = cJSON_AddArrayToObject(o, "core_bubbles");
    for (int c = 1; !p->forward && c <= p->stages && c <= IR_PIPE_CORE_BUBBLES; c++)
        cJSON_AddItemToArray(cb, cJSON_CreateNumber(p->core_bubble[c - 1]));
    cJSON_AddNumberToObject(o, "grad_once_time", p->grad_once);
    cJSON_AddNumberToObject(o, "grad_once_bytes", p->grad_once_bytes);
    cJSON_AddNumberToObject(o, "grad_once_first_bytes", p->grad_once_first_bytes);
    cJSON_AddNumberToObject(o, "grad_once_last_bytes", p->grad_once_last_bytes);
}

static cJSON *cost_json(const ir_cost *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "flops", c->flops);
    cJSON_AddNumberToObject(o, "hbm_bytes", c->hbm_bytes);
    cJSON_AddNumberToObject(o, "comm_bytes", c->comm_bytes);
    cJSON_AddNumberToObject(o, "t_compute", c->t_compute);
    cJSON_AddNumberToObject(o, "t_memory", c->t_memory);
    cJSON_AddNumberToObject(o, "t_comm", c->t_comm);
    cJSON_AddNumberToObject(o, "time", c->time);
    cJSON_AddStringToObject(o, "bound", ir_bound_name(c->bound));
    return o;
}

/* The MeshSlice attributes: dataflow, k, axes (row, column), the split dim,
 * the block, the einsum and the partial collectives of one iteration. */
static void ms_json(const ir_module *m, const ir_op *op, cJSON *o, cJSON *axes)
{
    char buf[1024];
    int ax[2] = {op->u.ms.row_axis, op->u.ms.col_axis};
    for (int i = 0; i < 2; i++) {
        char n[2] = {m->mesh.axes[ax[i]].name, 0};
        cJSON_AddItemToArray(axes, cJSON_CreateString(n));
    }
    cJSON_AddStringToObject(o, "dataflow", ir_ms_dataflow_name(op->u.ms.dataflow));
    cJSON_AddNumberToObject(o, "k", op->u.ms.k);
    cJSON_AddStringToObject(o, "split_dim", m->dims[op->u.ms.split_label].name);
    cJSON_AddNumberToObject(o, "block", op->u.ms.block);
    cJSON_AddStringToObject(o, "einsum", ir_einsum_spec(m, op, buf, sizeof buf));
    cJSON_AddNumberToObject(o, "scale", op->u.ms.scale);
    cJSON_AddStringToObject(o, "loop", ir_ms_iter_str(m, op, buf, sizeof buf));
    cJSON *colls = cJSON_AddArrayToObject(o, "collectives");
    for (int i = 0; i < op->u.ms.nmoves; i++) {
        const ir_ms_move *mv = &op->u.ms.moves[i];
        const ir_value *v = mv->operand >= 0 ? op->operands[mv->operand] : op->result;
        int64_t local = ir_local_size(m, &v->type, mv->dim);
        int64_t p = m->mesh.axes[mv->axis].size;
        cJSON *c = cJSON_CreateObject();
        char n[2] = {m->mesh.axes[mv->axis].name, 0};
        cJSON_AddStringToObject(c, "op", ir_op_name(mv->kind));
        cJSON_AddStringToObject(c, "axis", n);
        if (mv->operand >= 0)
            cJSON_AddNumberToObject(c, "operand", mv->operand);
        else
            cJSON_AddStringToObject(c, "operand", "result");
        cJSON_AddStringToObject(c, "dim", m->dims[v->type.dims[mv->dim]].name);
        /* Per-device size of the split dim in one iteration, before -> after. */
        int64_t sub = local / op->u.ms.k;
        cJSON_AddNumberToObject(c, "in_size", (double)(mv->kind == IR_OP_ALLGATHER ? sub : sub * p));
        cJSON_AddNumberToObject(c, "out_size", (double)(mv->kind == IR_OP_ALLGATHER ? sub * p : sub));
        cJSON_AddNumberToObject(c, "count", op->u.ms.k);
        cJSON_AddItemToArray(colls, c);
    }
}

/* Position of `op` in `order` (nops entries), or -1. */
static int op_index(const ir_op *const *order, int nops, const ir_op *op)
{
    for (int j = 0; j < nops; j++)
        if (order[j] == op)
            return j;
    return -1;
}

/* The JSON hooks of ir_op_traits: each op's attributes. */

void ir_json_coll(const ir_module *m, const ir_op *op, cJSON *o, cJSON *axes, const ir_op *const *order,
                  int nops)
{
    (void)order;
    (void)nops;
    for (int a = 0; a < op->u.coll.naxes; a++) {
        char n[2] = {m->mesh.axes[op->u.coll.axes[a]].name, 0};
        cJSON_AddItemToArray(axes, cJSON_CreateString(n));
    }
    const int *dims = op->operands[0]->type.dims;
    if (op->u.coll.dim >= 0)
        cJSON_AddStringToObject(o, "dim", m->dims[dims[op->u.coll.dim]].name);
    if (op->kind == IR_OP_ALLTOALL && op->u.coll.dim2 >= 0)
        cJSON_AddStringToObject(o, "dim2", m->dims[dims[op->u.coll.dim2]].name);
    if (op->u.coll.dim == IR_COLL_PER_AXIS) {
        /* One dim per axis, in the order of "axes". */
        cJSON *per = cJSON_AddArrayToObject(o, "dims");
        cJSON *per2 = op->kind == IR_OP_ALLTOALL ? cJSON_AddArrayToObject(o, "dims2") : NULL;
        for (int a = 0; a < op->u.coll.naxes; a++) {
            cJSON_AddItemToArray(per, cJSON_CreateString(m->dims[dims[ir_coll_dim(&op->u.coll, a)]].name));
            if (per2)
                cJSON_AddItemToArray(per2, cJSON_CreateString(m->dims[dims[ir_coll_dim2(&op->u.coll, a)]].name));
        }
    }
    if (op->kind == IR_OP_ALLREDUCE || op->kind == IR_OP_REDUCESCATTER)
        cJSON_AddStringToObject(o, "reduce", ir_reduce_name(op->u.coll.reduce));
}

/* "axes": [the axis], "delta", "cyclic" and every source->target pair. */
void ir_json_perm(const ir_module *m, const ir_op *op, cJSON *o, cJSON *axes, const ir_op *const *order,
                  int nops)
{
    (void)order;
    (void)nops;
    int a = op->u.perm.axis;
    if (a < 0 || a >= m->mesh.naxes)
        return;
    char n[2] = {m->mesh.axes[a].name, 0};
    cJSON_AddItemToArray(axes, cJSON_CreateString(n));
    cJSON_AddNumberToObject(o, "delta", op->u.perm.delta);
    cJSON_AddBoolToObject(o, "cyclic", op->u.perm.cyclic);
    cJSON *pairs = cJSON_AddArrayToObject(o, "pairs");
    for (int z = 0; z < (int)m->mesh.axes[a].size; z++) {
        int t = ir_perm_target(m, op, z);
        if (t < 0)
            continue;
        int pr[2] = {z, t};
        cJSON_AddItemToArray(pairs, cJSON_CreateIntArray(pr, 2));
    }
}

void ir_json_einsum(const ir_module *m, const ir_op *op, cJSON *o, cJSON *axes, const ir_op *const *order,
                    int nops)
{
    char buf[4096];
    (void)axes;
    (void)order;
    (void)nops;
    cJSON_AddStringToObject(o, "einsum", ir_einsum_spec(m, op, buf, sizeof buf));
    cJSON_AddNumberToObject(o, "scale", op->u.einsum.scale);
    cJSON_AddStringToObject(o, "reduce", ir_reduce_name(op->u.einsum.reduce));
    if (op->u.einsum.gather)
        cJSON_AddStringToObject(o, "gather", m->dims[op->u.einsum.gather_label].name);
    if (op->u.einsum.gather_zero_outside)
        cJSON_AddBoolToObject(o, "zero_outside", true);
    if (op->u.einsum.scatter)
        cJSON_AddStringToObject(o, "scatter_add", m->dims[op->u.einsum.gather_label].name);
}

void ir_json_ew(const ir_module *m, const ir_op *op, cJSON *o, cJSON *axes, const ir_op *const *order,
                int nops)
{
    char buf[4096];
    (void)axes;
    (void)order;
    (void)nops;
    cJSON_AddStringToObject(o, "expr", ir_ew_str(m, op, buf, sizeof buf));
}

void ir_json_ms(const ir_module *m, const ir_op *op, cJSON *o, cJSON *axes, const ir_op *const *order,
                int nops)
{
    (void)order;
    (void)nops;
    ms_json(m, op, o, axes);
}

void ir_json_loop(const ir_module *m, const ir_op *op, cJSON *o, cJSON *axes, const ir_op *const *order,
                  int nops)
{
    (void)axes;
    if (op->u.loop.dim < 0 || op->u.loop.dim >= m->ndims)
        return;
    cJSON_AddStringToObject(o, "loop_dim", m->dims[op->u.loop.dim].name);
    cJSON_AddNumberToObject(o, "trips", (double)m->dims[op->u.loop.dim].size);
    cJSON_AddNumberToObject(o, "begin", op_index(order, nops, op->u.loop.begin));
    cJSON_AddNumberToObject(o, "end", op_index(order, nops, op->u.loop.end));
    if (op->kind == IR_OP_LOOPBEGIN)
        cJSON_AddBoolToObject(o, "reverse", op->u.loop.reverse);
}

void ir_json_update(const ir_module *m, const ir_op *op, cJSON *o, cJSON *axes, const ir_op *const *order,
                    int nops)
{
    (void)axes;
    (void)order;
    (void)nops;
    if (op->noperands > 0 && op->u.update.dim >= 0 && op->u.update.dim < op->operands[0]->type.rank)
        cJSON_AddStringToObject(o, "update_dim", m->dims[op->operands[0]->type.dims[op->u.update.dim]].name);
    if (op->noperands > 0 && op->u.update.row >= 0 && op->u.update.row < op->operands[0]->type.rank)
        cJSON_AddStringToObject(o, "update_row", m->dims[op->operands[0]->type.dims[op->u.update.row]].name);
}

void ir_json_grad(const ir_module *m, const ir_op *op, cJSON *o, cJSON *axes, const ir_op *const *order,
                  int nops)
{
    (void)m;
    (void)axes;
    (void)order;
    (void)nops;
    if (op->u.grad.optimize)
        cJSON_AddBoolToObject(o, "optimize", true);
}

void ir_print_json(FILE *out, ir_module *m)
{
    ir_module_renumber(m);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "file", m->filename);
    cJSON *mesh = cJSON_AddArrayToObject(root, "mesh");
    for (int a = 0; a < m->mesh.naxes; a++) {
        cJSON *ax = cJSON_CreateObject();
        char n[2] = {m->mesh.axes[a].name, 0};
        cJSON_AddStringToObject(ax, "name", n);
        cJSON_AddNumberToObject(ax, "size", (double)m->mesh.axes[a].size);
        /* Only a placement other than one ICI axis is written, as `over`
         * is in the source: "over": 2 or "over": "dcn". */
        if (m->mesh.axes[a].dcn)
            cJSON_AddStringToObject(ax, "over", "dcn");
        else if (m->mesh.axes[a].phys > 1)
            cJSON_AddNumberToObject(ax, "over", m->mesh.axes[a].phys);
        cJSON_AddItemToArray(mesh, ax);
    }
    cJSON *dims = cJSON_AddArrayToObject(root, "dims");
    for (int d = 0; d < m->ndims; d++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", m->dims[d].name);
        cJSON_AddNumberToObject(o, "size", (double)m->dims[d].size);
        cJSON_AddItemToArray(dims, o);
    }
    const ir_pipeline *pp = &m->pipe;
    if (pp->axis >= 0 && pp->microbatches > 0) {
        cJSON *o = cJSON_AddObjectToObject(root, "pipeline");
        char n[2] = {m->mesh.axes[pp->axis].name, 0};
        cJSON_AddStringToObject(o, "axis", n);
        cJSON_AddNumberToObject(o, "stages", (double)m->mesh.axes[pp->axis].size);
        cJSON_AddStringToObject(o, "layer_dim", m->dims[pp->dim].name);
        cJSON_AddStringToObject(o, "batch_dim", m->dims[pp->batch_dim].name);
        cJSON_AddNumberToObject(o, "batch", (double)pp->batch_size);
        cJSON_AddNumberToObject(o, "microbatches", pp->microbatches);
        cJSON_AddStringToObject(o, "schedule", pp->schedule_name ? pp->schedule_name : "?");
        if (pp->resolved) /* --schedule=zero-bubble resolved to "schedule" */
            cJSON_AddStringToObject(o, "schedule_resolved", pp->resolved);
        cJSON_AddNumberToObject(o, "chunks", pp->chunks > 1 ? pp->chunks : 1);
        /* docs/pipeline.md, "Gradient collectives once per step". */
        const char *sync = ir_grad_sync_name(pp->grad_sync);
        cJSON_AddStringToObject(o, "grad_sync", sync ? sync : "?");
        const char *fill = ir_w_fill_name(pp->w_fill);
        cJSON_AddStringToObject(o, "w_fill", fill ? fill : "?");
        cJSON *kept = cJSON_AddArrayToObject(o, "grad_per_microbatch");
        for (int i = 0; i < pp->ngrad_mb; i++)
            cJSON_AddItemToArray(kept, cJSON_CreateString(pp->grad_mb[i]));
        cJSON *rows = cJSON_AddArrayToObject(o, "table");
        for (const char *t = pp->table; t && *t;) {
            const char *nl = strchr(t, '\n');
            size_t len = nl ? (size_t)(nl - t) : strlen(t);
            char *row = malloc(len + 1);
            if (row) {
                memcpy(row, t, len);
                row[len] = 0;
                cJSON_AddItemToArray(rows, cJSON_CreateString(row));
                free(row);
            }
            t += len + (nl ? 1 : 0);
        }
    }
    cJSON *inputs = cJSON_AddArrayToObject(root, "inputs");
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        if (v->kind == IR_VAL_OP)
            continue;
        cJSON *o = value_json(m, v);
        cJSON_AddStringToObject(o, "kind", ir_value_kind_name(v->kind));
        cJSON_AddItemToArray(inputs, o);
    }
    /* Op indices, for the "for" links. */
    int nops = 0;
    for (ir_op *op = m->first; op; op = op->next)
        nops++;
    const ir_op **order = calloc((size_t)nops + 1, sizeof *order);
    int k = 0;
    for (ir_op *op = m->first; op && order; op = op->next)
        order[k++] = op;
    cJSON *ops = cJSON_AddArrayToObject(root, "ops");
    for (int i = 0; i < nops && order; i++) {
        const ir_op *op = order[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", i);
        cJSON_AddStringToObject(o, "op", ir_op_name(op->kind));
        cJSON_AddStringToObject(o, "phase", ir_phase_name(op->phase));
        if (op->remat)
            cJSON_AddBoolToObject(o, "remat", true);
        cJSON *axes = cJSON_AddArrayToObject(o, "axes");
        ir_op_traits_of(op->kind)->json(m, op, o, axes, order, nops);
        if (op->loop)
            cJSON_AddNumberToObject(o, "in_loop", op_index(order, nops, op->loop));
        cJSON *operands = cJSON_AddArrayToObject(o, "operands");
        for (int j = 0; j < op->noperands; j++)
            cJSON_AddItemToArray(operands, value_json(m, op->operands[j]));
        cJSON_AddItemToObject(o, "result", value_json(m, op->result));
        if (op->reason)
            cJSON_AddStringToObject(o, "reason", op->reason);
        else
            cJSON_AddNullToObject(o, "reason");
        if (op->for_op) {
            cJSON *f = cJSON_AddObjectToObject(o, "for");
            int idx = -1;
            for (int j = 0; j < nops; j++)
                if (order[j] == op->for_op)
                    idx = j;
            cJSON_AddNumberToObject(f, "op", idx);
            cJSON_AddNumberToObject(f, "operand", op->for_operand);
        }
        if (op->cost.valid)
            cJSON_AddItemToObject(o, "cost", cost_json(&op->cost));
        cJSON_AddItemToArray(ops, o);
    }
    free(order);
    cJSON *outs = cJSON_AddArrayToObject(root, "outputs");
    for (int i = 0; i < m->noutputs; i++) {
        cJSON *o = value_json(m, m->outputs[i].value);
        cJSON_AddStringToObject(o, "output", m->outputs[i].name);
        if (m->outputs[i].update)
            cJSON_AddBoolToObject(o, "update", 1);
        cJSON_AddItemToArray(outs, o);
    }
    if (m->loss)
        cJSON_AddStringToObject(root, "loss", m->loss);
    if (m->totals.valid) {
        cJSON *t = cJSON_AddObjectToObject(root, "totals");
        cJSON_AddNumberToObject(t, "step_time", m->totals.step_time);
        cJSON_AddNumberToObject(t, "exposed_comm_time", m->totals.exposed_comm_time);
        cJSON_AddNumberToObject(t, "mfu", m->totals.mfu);
        cJSON_AddNumberToObject(t, "model_flops", m->totals.model_flops);
        cJSON_AddNumberToObject(t, "elementwise_flops", m->totals.elementwise_flops);
        cJSON_AddNumberToObject(t, "peak_memory", m->totals.peak_memory);
        if (m->totals.bound_serial > 0) {
            cJSON_AddNumberToObject(t, "lower_bound", m->totals.bound_serial);
            cJSON *b = cJSON_AddObjectToObject(t, "lower_bound_parts");
            cJSON_AddNumberToObject(b, "compute", m->totals.bound_compute);
            cJSON_AddNumberToObject(b, "memory", m->totals.bound_memory);
            cJSON_AddNumberToObject(b, "communication", m->totals.bound_comm);
            cJSON_AddNumberToObject(b, "hbm_bytes", m->totals.bound_hbm_bytes);
        }
        if (m->totals.pipe.valid)
            add_pipe_totals(t, m);
    }
    if (m->plan.valid) {
        static const char *proof[] = {"unproven", "optimal", "bounded"};
        cJSON *pl = cJSON_AddObjectToObject(root, "plan");
        cJSON_AddNumberToObject(pl, "objective", m->plan.objective);
        cJSON_AddStringToObject(pl, "proof", proof[m->plan.proof]);
        if (m->plan.proof != IR_PLAN_UNPROVEN)
            cJSON_AddNumberToObject(pl, "best", m->plan.best);
        cJSON_AddNumberToObject(pl, "candidates", (double)m->plan.candidates);
        cJSON_AddBoolToObject(pl, "merged", m->plan.merged);
        if (m->plan.why)
            cJSON_AddStringToObject(pl, "why", m->plan.why);
        if (m->plan.memory != IR_PLAN_MEM_FREE) {
            /* What the HBM decided (the planner's memory row, bytes per device). */
            cJSON_AddStringToObject(pl, "memory", m->plan.memory == IR_PLAN_MEM_BOUND ? "bound" : "none fits");
            cJSON_AddNumberToObject(pl, "hbm", m->plan.mem_hbm);
            cJSON_AddNumberToObject(pl, "memory_plan", m->plan.mem_plan);
            if (m->plan.memory == IR_PLAN_MEM_BOUND) {
                cJSON_AddNumberToObject(pl, "memory_fastest", m->plan.mem_fastest);
                cJSON_AddNumberToObject(pl, "fastest", m->plan.fastest);
            } else {
                cJSON_AddNumberToObject(pl, "memory_least", m->plan.mem_least);
            }
        }
        char cert[IR_PLAN_CERT_MAX];
        ir_plan_cert_str(m, cert, sizeof cert);
        cJSON_AddStringToObject(pl, "text", cert);
    }
    char *text = cJSON_Print(root);
    if (text) {
        fputs(text, out);
        fputc('\n', out);
        free(text);
    }
    cJSON_Delete(root);
}
