/*
 * verify_loop.c - the invariants of repeated blocks (LoopBegin, LoopEnd,
 * LayerSlice), checked by ir_verify after every pass.
 *
 * Structure: loops do not nest; each LoopBegin is followed by exactly one
 * LoopEnd, and the two name each other (u.loop.begin / u.loop.end) and the
 * same dim; every op between them has op->loop set to the LoopBegin and no
 * op outside has it; a LayerSlice is inside the loop it names.  Scope: a
 * value defined in a body is read only in that body (the LoopEnd reads the
 * body's new carried value; after the loop its result stands for it).
 * Types: a LoopBegin's result and operand have the same dims and dtype, and
 * the carried value holds no unreduced partial sums (it is added to across
 * iterations); the LoopEnd's operand and result have exactly the LoopBegin
 * result's type, sharding included (the body is planned once, so the value
 * entering iteration l+1 has the sharding iteration l started with); a
 * LayerSlice reads an input or param whose first dim is the loop's dim and
 * is not sharded (layers are not split over devices), or the LayerStack of
 * an earlier loop over that dim, and its result is the operand without that
 * dim, sharding included.  A LayerStack is inside the loop it names, reads
 * a value without partial sums (or with summed ones that only a reducing
 * collective reads stacked: a pipelined step's gradient reduced once per
 * step), and its result is that value's type with the loop's dim
 * (unsharded, or split over the pipeline axis) in front; it is read only
 * after its loop.
 */
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "verify_internal.h"

#define WHY(...) (why ? (void)snprintf(why, why_size, __VA_ARGS__) : (void)0)

/* Whether a and b have the same dtype, rank and dims. */
static bool same_shape(const ir_type *a, const ir_type *b)
{
    return a->dtype == b->dtype && a->rank == b->rank &&
           memcmp(a->dims, b->dims, sizeof(int) * (size_t)a->rank) == 0;
}

/* Whether every reader of stack `r` is an AllReduce or ReduceScatter
 * (what reduces its partial sums). */
static bool stack_reduced_only(const ir_value *r)
{
    for (int u = 0; u < r->nuses; u++)
        if (r->uses[u].op->kind != IR_OP_ALLREDUCE && r->uses[u].op->kind != IR_OP_REDUCESCATTER)
            return false;
    return true;
}

bool ir_verify_loop(const ir_module *m, const ir_op *op, ir_sharding *out, char *why,
                    size_t why_size)
{
    if (op->noperands != 1) {
        WHY("%s takes one operand", ir_op_name(op->kind));
        return false;
    }
    const ir_value *a = op->operands[0], *r = op->result;
    const ir_op *b = op->u.loop.begin;
    if (op->u.loop.dim < 0 || op->u.loop.dim >= m->ndims || !b || b->kind != IR_OP_LOOPBEGIN ||
        b->u.loop.dim != op->u.loop.dim) {
        WHY("it names no valid loop");
        return false;
    }
    switch (op->kind) {
    case IR_OP_LOOPBEGIN:
        if (!same_shape(&a->type, &r->type)) {
            WHY("the carried value changes shape or dtype");
            return false;
        }
        if (a->type.sh.unreduced) {
            WHY("the carried value holds unreduced partial sums");
            return false;
        }
        *out = a->type.sh;
        return true;
    case IR_OP_LOOPEND: {
        const ir_value *top = b->result;
        if (!top || !same_shape(&a->type, &top->type) || !same_shape(&r->type, &top->type)) {
            WHY("the carried value changes shape or dtype in the body");
            return false;
        }
        if (!ir_sharding_equal(&a->type.sh, &top->type.sh, a->type.rank)) {
            WHY("the body's new value is not in the carried sharding");
            return false;
        }
        *out = top->type.sh;
        return true;
    }
    case IR_OP_LAYERSTACK: {
        /* Partial sums stack as such only when they add (a gradient whose
         * reduction a pipelined step runs once, after the loop:
         * passes/pipeline_grad.c); nothing slices them back. */
        if (a->type.sh.unreduced && (a->type.sh.red != IR_RED_SUM || (r->nuses > 0 && !stack_reduced_only(r)))) {
            WHY("it stacks unreduced partial sums that are not summed, or that an op other than a "
                "collective reducing them reads");
            return false;
        }
        if (r->type.dtype != a->type.dtype || r->type.rank != a->type.rank + 1 ||
            r->type.dims[0] != op->u.loop.dim ||
            memcmp(r->type.dims + 1, a->type.dims, sizeof(int) * (size_t)a->type.rank) != 0) {
            WHY("the result is not the operand with the loop's dim in front");
            return false;
        }
        *out = ir_stack_sharding(m, &a->type.sh, a->type.rank, op->u.loop.dim);
        out->unreduced = a->type.sh.unreduced;
        out->red = a->type.sh.red;
        return true;
    }
    case IR_OP_LAYERSLICE: {
        bool stacked = a->def && a->def->kind == IR_OP_LAYERSTACK;
        if (!ir_value_kind_is_argument(a->kind) && !stacked) {
            WHY("it slices a value that is not an input, a param or a LayerStack's result");
            return false;
        }
        if (a->type.rank < 1 || a->type.dims[0] != op->u.loop.dim ||
            !ir_stack_split_ok(m, &a->type, op->u.loop.dim)) {
            WHY("the operand's first dim is not the loop's dim, or is sharded");
            return false;
        }
        if (r->type.dtype != a->type.dtype || r->type.rank != a->type.rank - 1 ||
            memcmp(r->type.dims, a->type.dims + 1, sizeof(int) * (size_t)r->type.rank) != 0) {
            WHY("the result is not the operand without its first dim");
            return false;
        }
        *out = ir_sharding_without_first(&a->type.sh, a->type.rank);
        return true;
    }
    default:
        WHY("not a loop op");
        return false;
    }
}

int ir_verify_loops(const ir_module *m, diag_ctx *d)
{
    int before = d->nerrors;
    char b1[256];
    /* in_body[id]: the LoopBegin whose body defines value id, or NULL. */
    const ir_op **in_body = calloc((size_t)m->nvalues + 1, sizeof *in_body);
    /* stacked_in[id]: the LoopBegin whose LayerStack value id is, or NULL. */
    const ir_op **stacked_in = calloc((size_t)m->nvalues + 1, sizeof *stacked_in);
    if (!in_body || !stacked_in) {
        free(in_body);
        free(stacked_in);
        diag_error(d, DIAG_NOLOC, "out of memory in the verifier");
        return 1;
    }
    const ir_op *open = NULL;
    for (const ir_op *op = m->first; op; op = op->next) {
        if (op->kind == IR_OP_LOOPBEGIN) {
            if (open)
                diag_error(d, op->loc, "LoopBegin inside the body of another loop (loops do not nest)");
            if (op->u.loop.begin != op || !op->u.loop.end || op->u.loop.end->u.loop.begin != op)
                diag_error(d, op->loc, "LoopBegin is not linked to its LoopEnd");
            open = op;
        } else if (op->kind == IR_OP_LOOPEND) {
            if (!open || op->u.loop.begin != open || open->u.loop.end != op)
                diag_error(d, op->loc, "LoopEnd does not close the loop it follows");
            open = NULL;
        } else if (op->loop != open) {
            diag_error(d, op->loc, "%s op %s a loop body but is marked otherwise", ir_op_name(op->kind),
                       open ? "is in" : "is outside");
        }
        if ((op->kind == IR_OP_LAYERSLICE || op->kind == IR_OP_LAYERSTACK) &&
            (!open || op->u.loop.begin != open))
            diag_error(d, op->loc, "%s outside the body of the loop it names", ir_op_name(op->kind));
        for (int i = 0; i < op->noperands; i++) {
            const ir_value *v = op->operands[i];
            if (!v || v->id < 0 || v->id >= m->nvalues)
                continue;
            const ir_op *scope = in_body[v->id];
            const ir_op *here = op->kind == IR_OP_LOOPEND ? op->u.loop.begin : op->loop;
            if (scope && scope != here)
                diag_error(d, op->loc, "%s reads %s, which is defined in the body of a loop it is not in",
                           ir_op_name(op->kind), ir_value_name(v, b1, sizeof b1));
            if (stacked_in[v->id] && stacked_in[v->id] == here)
                diag_error(d, op->loc, "%s reads %s, the LayerStack of the loop it is in, before "
                           "the loop has filled it", ir_op_name(op->kind), ir_value_name(v, b1, sizeof b1));
        }
        if (op->result && op->result->id >= 0 && op->result->id < m->nvalues) {
            /* A LayerStack's result is the whole stack, a value of the
             * scope around the loop once the loop is done. */
            bool stack = op->kind == IR_OP_LAYERSTACK;
            in_body[op->result->id] = op->kind == IR_OP_LOOPBEGIN ? op : stack ? NULL : op->loop;
            stacked_in[op->result->id] = stack ? op->loop : NULL;
        }
    }
    if (open)
        diag_error(d, open->loc, "LoopBegin without a LoopEnd");
    for (int i = 0; i < m->noutputs; i++) {
        const ir_value *v = m->outputs[i].value;
        if (v && v->id >= 0 && v->id < m->nvalues && in_body[v->id])
            diag_error(d, m->outputs[i].loc, "output %s is a value of a loop body", m->outputs[i].name);
    }
    free(in_body);
    free(stacked_in);
    return d->nerrors - before;
}
