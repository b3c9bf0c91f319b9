/*
 * propagate_meshslice.c - the planner prices a 2D GEMM as the MeshSlice
 * loop the meshslice pass will make of it (issue 10, item 4).
 *
 * The meshslice pass (meshslice.c) runs after propagation and turns an
 * Einsum whose operands arrive through one-axis AllGathers, and whose
 * result may leave through a one-axis ReduceScatter, into one MeshSlice op
 * (seed 004, 3.1, Table 1): OS gathers both operands on the contracting
 * dim; LS gathers B on a free dim n and reduce-scatters C on n; RS is LS
 * with the operands' roles swapped.  The loop overlaps each slice's
 * collectives with the previous slice's GEMM where the profile says the
 * devices can (seed 004 3.2.2; on a host whose devices share cores it is
 * the sum of its parts).  The planner's objective would otherwise price
 * such a layout as gathers, then the GEMM, then the ReduceScatter, in
 * sequence: a 2D-sharded layout that is faster as a MeshSlice loop would
 * lose to one that is faster only without it.
 *
 * So a candidate layout of an Einsum that has one of the three patterns
 * gets a credit on its op term: the serial time of its pattern's parts
 * (the planner's own reshard prices and the einsum's compute) minus the
 * MeshSlice loop's estimate (cost_meshslice_op, the least over K = 1 and
 * the powers of two up to 64 that divide the split dim's per-device
 * size).  The credit is never negative: where the loop is slower, the
 * meshslice pass still makes it (it does not undo propagate's layouts),
 * and the objective keeps the serial price, as before.
 *
 * The pattern is pass_meshslice_pattern's, the rule the meshslice pass
 * checks on the IR, applied to the layout's reshards: each gathered operand
 * is read by this op alone and is no output (its gather becomes part of
 * the loop); for LS and RS every reader of the result (its constraint, or
 * all decided consumers and outputs) wants its partial sums over one axis
 * reduce-scattered onto the gathered label.
 * Where a reader is not decided yet the credit is 0 for now; the sweeps
 * price the layout again once it is.
 */
#include <string.h>

#include "meshslice_model.h"
#include "meshslice.h"
#include "propagate_internal.h"

#define CREDIT_MAX_K 64 /* the largest K tried (powers of two): the meshslice pass's
                           auto K rarely exceeds it, and each K is one model call */

/* If `req` is `have` with the minor-most axis of one dim removed (one
 * single-axis AllGather), sets *axis and *dim and returns true. */
static bool one_gather(const ir_sharding *have, const ir_sharding *req, int rank, int *axis, int *dim)
{
    if (have->unreduced || req->unreduced)
        return false;
    int found = -1;
    for (int d = 0; d < rank; d++) {
        if (have->naxes[d] == req->naxes[d]) {
            if (memcmp(have->axes[d], req->axes[d], have->naxes[d]) != 0)
                return false;
            continue;
        }
        if (found >= 0 || have->naxes[d] != req->naxes[d] + 1 ||
            memcmp(have->axes[d], req->axes[d], req->naxes[d]) != 0)
            return false;
        found = d;
    }
    if (found < 0)
        return false;
    *dim = found;
    *axis = have->axes[found][have->naxes[found] - 1];
    return true;
}

/* Whether value v is read by op k alone and is no program output. */
static bool read_once(const prop *p, const ir_value *v)
{
    return v->id >= 0 && v->id < p->nvalues && p->use_start[v->id + 1] - p->use_start[v->id] == 1 &&
           !ir_value_is_output(p->m, v);
}

/* The one sharding every reader of op k's result wants, given that it is
 * produced as `sh`; false if they differ or one is not decided. */
static bool result_target(const prop *p, int k, const ir_sharding *sh, ir_sharding *want)
{
    const ir_value *v = p->ops[k].op->result;
    if (v->has_constraint) {
        *want = v->constraint;
        return true;
    }
    int n = 0, rank = v->type.rank;
    for (int u = p->use_start[v->id]; u < p->use_start[v->id + 1]; u++) {
        const opinfo *c = &p->ops[p->uses[u].op];
        if (!c->decided)
            return false;
        if (n++ && !ir_sharding_equal(want, &c->lay.req[p->uses[u].operand], rank))
            return false;
        *want = c->lay.req[p->uses[u].operand];
    }
    for (int i = 0; i < p->m->noutputs; i++) {
        const ir_output *o = &p->m->outputs[i];
        if (o->value != v)
            continue;
        ir_sharding w = o->has_constraint ? o->constraint : pass_prop_reduced(*sh);
        if (n++ && !ir_sharding_equal(want, &w, rank))
            return false;
        *want = w;
    }
    return n > 0;
}

double pass_prop_meshslice_credit(prop *p, int k, const layout *lay, double einsum_time)
{
    const ir_op *op = p->ops[k].op;
    if (!p->hw || !p->meshslice || op->kind != IR_OP_EINSUM || op->noperands != 2 ||
        op->u.einsum.gather || op->u.einsum.scatter)
        return 0.0;
    const ir_module *m = p->m;
    ir_value vals[3];
    int axis[2] = {-1, -1}, dim[2] = {-1, -1};
    double serial = einsum_time;
    for (int i = 0; i < 2; i++) {
        const ir_value *v = op->operands[i];
        vals[i] = *v;
        vals[i].type.sh = pass_prop_current(p, v);
        if (ir_sharding_equal(&vals[i].type.sh, &lay->req[i], v->type.rank))
            continue;
        if (!one_gather(&vals[i].type.sh, &lay->req[i], v->type.rank, &axis[i], &dim[i]) ||
            !read_once(p, v) || (i == 1 && op->operands[0] == v))
            return 0.0;
        serial += pass_prop_reshard_time(p, v, &vals[i].type.sh, &lay->req[i]);
    }
    /* The result leaves through a ReduceScatter when it carries partial
     * sums over one axis and its readers want them scattered onto the
     * gathered label. */
    const ir_value *r = op->result;
    vals[2] = *r;
    vals[2].type.sh = lay->produced;
    pass_ms_coll gather[2] = {{axis[0], dim[0]}, {axis[1], dim[1]}}, scatter = {-1, -1};
    ir_axes u = lay->produced.unreduced;
    if (u && !(u & (u - 1)) && (axis[0] >= 0) != (axis[1] >= 0)) {
        int i = axis[0] >= 0 ? 0 : 1, L = op->u.einsum.labels[i][dim[i]];
        scatter.dim = ir_label_pos(op->u.einsum.result_labels, r->type.rank, L);
        scatter.axis = 0;
        while (!(u & (1u << scatter.axis)))
            scatter.axis++;
        if (scatter.dim < 0)
            return 0.0;
        ir_sharding want, scattered = pass_prop_reduced(lay->produced);
        ir_sharding_push(&scattered, scatter.dim, scatter.axis);
        if (!result_target(p, k, &lay->produced, &want) || !ir_sharding_equal(&want, &scattered, r->type.rank))
            return 0.0;
        vals[2].type.sh = want;
    }
    pass_ms_pattern pat;
    if (!pass_meshslice_pattern(op, gather, scatter, u, &pat))
        return 0.0;
    ir_op ms;
    memset(&ms, 0, sizeof ms);
    ms.kind = IR_OP_MESHSLICE;
    ms.noperands = 2;
    memcpy(ms.u.ms.labels, op->u.einsum.labels, sizeof ms.u.ms.labels);
    memcpy(ms.u.ms.result_labels, op->u.einsum.result_labels, sizeof ms.u.ms.result_labels);
    ms.u.ms.dataflow = pat.df;
    ms.u.ms.split_label = pat.split_label;
    int64_t g = 0;
    for (int i = 0; i < 2; i++)
        if (axis[i] >= 0) {
            ms.u.ms.moves[ms.u.ms.nmoves++] = (ir_ms_move){IR_OP_ALLGATHER, i, axis[i], dim[i]};
            g = cost_ms_gcd64(g, ir_local_size(m, &vals[i].type, dim[i]));
        }
    if (scatter.axis >= 0) {
        serial += pass_prop_reshard_time(p, r, &lay->produced, &vals[2].type.sh);
        ms.u.ms.moves[ms.u.ms.nmoves++] = (ir_ms_move){IR_OP_REDUCESCATTER, -1, scatter.axis, scatter.dim};
        g = cost_ms_gcd64(g, ir_local_size(m, &vals[2].type, scatter.dim));
    }
    ms.operands[0] = &vals[0];
    ms.operands[1] = &vals[1];
    ms.result = &vals[2];
    double best = -1.0;
    for (int64_t K = 1; K <= CREDIT_MAX_K && K <= g; K *= 2) {
        if (g % K)
            continue;
        ir_cost c;
        cost_meshslice_op(m, p->hw, &ms, (int)K, &c);
        if (best < 0 || c.time < best)
            best = c.time;
    }
    return best >= 0 && best < serial ? serial - best : 0.0;
}
