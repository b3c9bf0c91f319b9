/*
 * cost_memory.c - how much device memory a program needs at its peak.
 *
 * A device holds its shard of every param and input for the whole step
 * (weights stay; an input is what the step is about), and each value an op
 * computes from the op that defines it to the last op that reads it, in
 * program order: the runtime keeps a buffer alive that long, and an op
 * needs its operands and its result at the same time, so both ends count.
 * A program output is kept to the end, for the caller.  The peak is the
 * largest sum over the ops; it is per device, like every figure of the
 * model, since every device holds only its own shards (seed 000: pure
 * data parallelism replicates params and optimizer state on every chip,
 * which rules it out when they exceed one chip's HBM, and FSDP shards them
 * to cut the memory per device; seed 002, question 2: a TPU v5e's 16 GB of
 * HBM holds the device's params and its share of the KV cache).
 *
 * A repeated block's body is one copy in the IR and its buffers are reused
 * by every iteration, so it counts once; a stacked param counts whole (all
 * its layers are resident), and one layer of it (LayerSlice) is a view.
 *
 * A cast folded into its einsum's operand read (int8 weights dequantized
 * in the GEMM, ir_folded_cast_source) holds no buffer: the chips of the
 * seeds convert tiles as they load them, and einc's own runtime converts
 * blocks of a few hundred KiB (runtime/einsum_mixed.c), not counted.
 *
 * Not counted: the temporary buffers of collectives and MeshSlice loops
 * inside the runtime, alignment and fragmentation; so the figure is a
 * lower bound of what an executable allocates.
 */
#include <stdlib.h>

#include "costmodel.h"

bool cost_kept_for_backward(const ir_value *v)
{
    if (v->kind != IR_VAL_OP || !v->def || v->def->phase != IR_PHASE_FORWARD ||
        v->def->kind == IR_OP_LAYERSLICE || v->def->kind == IR_OP_UPDATESLICE)
        return false;
    for (int u = 0; u < v->nuses; u++)
        if (v->uses[u].op && v->uses[u].op->phase == IR_PHASE_BACKWARD)
            return true;
    return false;
}

/* Fills the training step's classes of `r` (cost_memory's fields from
 * `master` on), after its `state`: seed 000's accounting of params,
 * gradients, optimizer state and master weights. */
static void memory_classes(const ir_module *m, cost_memory *r)
{
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        if (!v)
            continue;
        if (v->kind == IR_VAL_PARAM)
            r->param_count += (double)ir_local_elems(m, &v->type);
        if (v->kind == IR_VAL_STATE && v->master)
            r->master += (double)ir_local_bytes(m, &v->type);
        if (cost_kept_for_backward(v))
            r->kept += (double)ir_local_bytes(m, &v->type);
    }
    for (int k = 0; k < m->noutputs; k++) {
        const ir_value *p = m->outputs[k].update;
        if (p && p->kind == IR_VAL_PARAM)
            r->grads += (double)ir_local_bytes(m, &p->type);
    }
    r->moments = r->state - r->master;
}

cost_memory cost_memory_peak(const ir_module *m)
{
    cost_memory r = {0};
    int nv = m->nvalues;
    for (int i = 0; i < nv; i++) {
        const ir_value *v = m->values[i];
        if (v && (ir_value_kind_is_argument(v->kind)))
            r.resident += (double)ir_local_bytes(m, &v->type);
        if (v && v->kind == IR_VAL_PARAM)
            r.params += (double)ir_local_bytes(m, &v->type);
    }
    for (int k = 0; k < m->noutputs; k++) {
        const ir_value *v = m->outputs[k].update;
        if (v && v->kind == IR_VAL_STATE)
            r.state += (double)ir_local_bytes(m, &v->type);
    }
    for (int i = 0; i < nv; i++) {
        const ir_value *v = m->values[i];
        if (v && v->kind == IR_VAL_STATE)
            r.cache += (double)ir_local_bytes(m, &v->type);
    }
    r.cache -= r.state;
    memory_classes(m, &r);
    r.peak = r.resident;
    int nops = 0;
    for (const ir_op *op = m->first; op; op = op->next)
        nops++;
    if (nops == 0 || nv == 0)
        return r;
    /* def[id] / last[id]: index of the op that defines value id / of its
     * last reader; -1 for none.  delta[i]: bytes that become live at op i
     * (negative: freed after op i - 1). */
    int *def = malloc((size_t)nv * sizeof *def);
    int *last = malloc((size_t)nv * sizeof *last);
    double *delta = calloc((size_t)nops + 1, sizeof *delta);
    const ir_op **order = malloc((size_t)nops * sizeof *order);
    if (!def || !last || !delta || !order) {
        /* Out of memory for a few arrays the size of the program: report
         * the resident part rather than nothing. */
        free(def);
        free(last);
        free(delta);
        free(order);
        return r;
    }
    for (int i = 0; i < nv; i++)
        def[i] = last[i] = -1;
    int idx = 0;
    for (const ir_op *op = m->first; op; op = op->next, idx++) {
        order[idx] = op;
        for (int k = 0; k < op->noperands; k++) {
            const ir_value *v = op->operands[k];
            if (v && v->id >= 0 && v->id < nv)
                last[v->id] = idx;
        }
        if (op->result && op->result->id >= 0 && op->result->id < nv)
            def[op->result->id] = idx;
        /* A repeated block's body runs again: a value made before the loop
         * and read in it lives to the loop's end, and the carried value's
         * buffer lives through the whole body. */
        if (op->kind == IR_OP_LOOPEND && op->u.loop.begin) {
            int b = -1;
            for (int j = idx - 1; j >= 0 && b < 0; j--)
                if (order[j] == op->u.loop.begin)
                    b = j;
            for (int i = 0; b >= 0 && i < nv; i++)
                if (def[i] >= 0 && def[i] < b && last[i] > b && last[i] < idx)
                    last[i] = idx;
            const ir_value *top = op->u.loop.begin->result;
            if (top && top->id >= 0 && top->id < nv && last[top->id] < idx - 1)
                last[top->id] = idx - 1;
        }
    }
    for (int k = 0; k < m->noutputs; k++) {
        const ir_value *v = m->outputs[k].value;
        if (v && v->id >= 0 && v->id < nv)
            last[v->id] = nops - 1;
    }
    for (int i = 0; i < nv; i++) {
        const ir_value *v = m->values[i];
        if (!v || v->kind != IR_VAL_OP || def[i] < 0)
            continue; /* params and inputs are resident; a value of a removed op holds nothing */
        if (v->def && (v->def->kind == IR_OP_LAYERSLICE || v->def->kind == IR_OP_UPDATESLICE))
            continue; /* a view of a resident param or state (one layer, or written in place) */
        if (ir_folded_cast_source(m, v))
            continue; /* converted as its einsum reads it (cost_fusion.c): no buffer */
        int end = last[i] > def[i] ? last[i] : def[i]; /* an unread result lives during its op */
        double bytes = (double)ir_local_bytes(m, &v->type);
        delta[def[i]] += bytes;
        delta[end + 1] -= bytes;
    }
    double live = 0;
    int at = -1;
    for (int i = 0; i < nops; i++) {
        live += delta[i];
        if (r.resident + live > r.peak) {
            r.peak = r.resident + live;
            r.at = order[i];
            at = i;
        }
    }
    /* What is live at the peak: the backward pass's and update's part. */
    for (int i = 0; at >= 0 && i < nv; i++) {
        const ir_value *v = m->values[i];
        if (!v || v->kind != IR_VAL_OP || def[i] < 0 || !v->def || v->def->kind == IR_OP_LAYERSLICE ||
            v->def->kind == IR_OP_UPDATESLICE ||
            v->def->phase == IR_PHASE_FORWARD)
            continue;
        int end = last[i] > def[i] ? last[i] : def[i];
        if (def[i] <= at && at <= end)
            r.gradients += (double)ir_local_bytes(m, &v->type);
    }
    free(def);
    free(last);
    free(delta);
    free(order);
    return r;
}
