/*
 * propagate_reason.c - the sentences the propagate pass attaches to every op
 * it inserts (ir_op_set_reason): which op it serves, which rule of seed 001
 * applies, why this choice is the cheapest under the objective (estimated
 * time on the profile, or bytes moved without one), and for the first op
 * inserted for each compute op, the runner-up layout and its cost.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "costmodel.h"
#include "propagate_internal.h"

/* What "cheapest" means under the pass's objective, for the reasons. */
static const char *cheapest(const prop *p)
{
    return p->hw ? "takes the least time" : "moves the fewest bytes";
}

static const char *cheaper(const prop *p)
{
    return p->hw ? "is faster" : "moves fewer bytes";
}


/* Appends the expression below node n with operand tensor names. */
static void expr_str(const ir_module *m, const ir_op *op, int n, char *buf, size_t size, int depth)
{
    if (n < 0 || n >= op->u.ew.nnodes)
        return;
    const ir_ew_node *e = &op->u.ew.nodes[n];
    size_t len = strlen(buf);
    if (len + 1 >= size || depth > 64)
        return;
    char *w = buf + len;
    size_t room = size - len;
    int arity = ir_ew_arity(e->kind);
    switch (e->kind) {
    case IR_EW_OPERAND:
        snprintf(w, room, "%s", op->operands[e->operand]->tensor);
        return;
    case IR_EW_CONST:
        snprintf(w, room, "%g", e->value);
        return;
    case IR_EW_INDEX:
        snprintf(w, room, "%s", m->dims[e->dim].name);
        return;
    case IR_EW_CALL:
    case IR_EW_MAX:
    case IR_EW_MIN:
    case IR_EW_SELECT: {
        snprintf(w, room, "%s(", e->kind == IR_EW_CALL ? ir_func_name(e->fn) : ir_ew_spelling(e->kind));
        const int kids[3] = {e->a, e->b, e->c};
        for (int k = 0; k < arity; k++) {
            if (k) {
                len = strlen(buf);
                snprintf(buf + len, size - len, ", ");
            }
            expr_str(m, op, kids[k], buf, size, depth + 1);
        }
        len = strlen(buf);
        snprintf(buf + len, size - len, ")");
        return;
    }
    default:
        snprintf(w, room, "(");
        expr_str(m, op, e->a, buf, size, depth + 1);
        len = strlen(buf);
        snprintf(buf + len, size - len, " %s ", ir_ew_spelling(e->kind));
        expr_str(m, op, e->b, buf, size, depth + 1);
        len = strlen(buf);
        snprintf(buf + len, size - len, ")");
        return;
    }
}

/* "Tmp = In * Win", "Act = gelu(Tmp)": the op as the user wrote it. */
void pass_prop_stmt(const ir_module *m, const ir_op *op, char *buf, size_t size)
{
    if (op->kind != IR_OP_EINSUM && op->kind != IR_OP_ELEMENTWISE) {
        snprintf(buf, size, "%s %s", ir_op_name(op->kind), op->result->tensor);
        return;
    }
    snprintf(buf, size, "%s = ", op->result->tensor);
    size_t len = strlen(buf);
    if (op->kind == IR_OP_ELEMENTWISE) {
        expr_str(m, op, op->u.ew.root, buf, size, 0);
        return;
    }
    if (op->u.einsum.scale != 1.0) {
        snprintf(buf + len, size - len, "%g * ", op->u.einsum.scale);
        len = strlen(buf);
    }
    if (op->u.einsum.gather && op->noperands == 2) {
        snprintf(buf + len, size - len, "%s[%s]", op->operands[1]->tensor, op->operands[0]->tensor);
        return;
    }
    if (op->u.einsum.scatter && op->noperands == 2) {
        snprintf(buf + len, size - len, "scatter_add(%s, %s)", op->operands[0]->tensor,
                 op->operands[1]->tensor);
        return;
    }
    if (op->u.einsum.reduce != IR_RED_SUM && op->noperands == 1) {
        snprintf(buf + len, size - len, "%s(%s)", ir_reduce_name(op->u.einsum.reduce),
                 op->operands[0]->tensor);
        return;
    }
    for (int i = 0; i < op->noperands; i++) {
        snprintf(buf + len, size - len, "%s%s", i ? " * " : "", op->operands[i]->tensor);
        len = strlen(buf);
    }
}

/* "X", "XY" for the axes of a step. */
static const char *step_axes(const ir_module *m, const pass_reshard_step *st, char *buf, size_t size)
{
    return ir_axes_str(&m->mesh, st->coll.axes, st->coll.naxes, buf, size);
}

/* Names the operand (other than `self`) of op k that shards label l on any
 * of the axes of `st`, or NULL. */
static const char *source_of(const prop *p, int k, int self, int l, const pass_reshard_step *st)
{
    const opinfo *oi = &p->ops[k];
    for (int i = 0; i < oi->op->noperands; i++) {
        if (i == self)
            continue;
        const ir_value *v = oi->op->operands[i];
        ir_sharding s = pass_prop_current(p, v);
        for (int j = 0; j < v->type.rank; j++)
            if (oi->labels[i][j] == oi->label[l])
                for (int q = 0; q < s.naxes[j]; q++)
                    for (int r = 0; r < st->coll.naxes; r++)
                        if (s.axes[j][q] == st->coll.axes[r])
                            return v->tensor;
    }
    return NULL;
}

/* Why operand i of op k cannot keep the partial sums over the axes of
 * `st` under the chosen layout. */
/* "partial sums {U_X}", "partial maxima {max U_X}", "partial minima {min U_X}". */
static const char *partials_str(ir_reduce red, const char *ax, char *buf, size_t size)
{
    snprintf(buf, size, "partial %s {%sU_%s}",
             red == IR_RED_MAX ? "maxima" : red == IR_RED_MIN ? "minima" : "sums",
             red == IR_RED_MAX ? "max " : red == IR_RED_MIN ? "min " : "", ax);
    return buf;
}

static const char *unreduced_cause(const prop *p, int k, int i, const pass_reshard_step *st)
{
    const opinfo *oi = &p->ops[k];
    const ir_op *op = oi->op;
    int where = oi->lay.choice[st->coll.axes[0]];
    ir_reduce red = (ir_reduce)pass_prop_current(p, op->operands[i]).red;
    if (red != IR_RED_SUM)
        return red == IR_RED_MAX ? "a max over a sharded dim; no op but a max can take partial maxima"
                                 : "a min over a sharded dim; no op but a min can take partial minima";
    if (op->kind == IR_OP_ELEMENTWISE) {
        if (!oi->linear)
            return "the op is not linear in them";
        for (int j = 0; j < op->noperands; j++)
            if (!(pass_prop_current(p, op->operands[j]).unreduced & (1u << st->coll.axes[0])))
                return "not all operands hold them, so the op cannot carry them";
    } else if (where >= CH_CARRY && where != CH_CARRY + i) {
        return "another operand's partial sums are carried over the axis";
    }
    if (where >= 0 && where < CH_CARRY)
        return "the axis shards a dim of the op here";
    return p->hw ? "reducing them here takes the least time" : "reducing them here moves the fewest bytes";
}

/* Where the axes of per-axis step `st` of a value with dims `dims` work:
 * "B (X) and D (Y)", an AllToAll's "X from B to D and Y from F to D". */
static const char *per_axis_str(const ir_module *m, const int *dims, const pass_reshard_step *st, char *buf,
                                size_t size)
{
    const ir_coll *c = &st->coll;
    size_t n = 0;
    buf[0] = 0;
    for (int k = 0; k < c->naxes && n < size; k++) {
        int d = ir_coll_dim(c, k);
        const char *sep = k == 0 ? "" : k == c->naxes - 1 ? " and " : ", ";
        char ax[2] = {m->mesh.axes[c->axes[k]].name, 0};
        if (st->kind == IR_OP_ALLTOALL)
            n += (size_t)snprintf(buf + n, size - n, "%s%s from %s to %s", sep, ax, m->dims[dims[d]].name,
                                  m->dims[dims[ir_coll_dim2(c, k)]].name);
        else
            n += (size_t)snprintf(buf + n, size - n, "%s%s (%s)", sep, m->dims[dims[d]].name, ax);
    }
    return buf;
}

/* The reason of per-axis step `st` on operand i of op k. */
static void per_axis_operand_reason(const prop *p, int k, int i, const pass_reshard_step *st, char *buf,
                                    size_t size)
{
    const ir_op *op = p->ops[k].op;
    const ir_value *v = op->operands[i];
    char stmt[160], ax[IR_MAX_AXES + 1], where[128];
    pass_prop_stmt(p->m, op, stmt, sizeof stmt);
    step_axes(p->m, st, ax, sizeof ax);
    per_axis_str(p->m, v->type.dims, st, where, sizeof where);
    switch (st->kind) {
    case IR_OP_ALLGATHER:
        snprintf(buf, size, "for %s: %s is sharded along %s where the op needs it whole", stmt, v->tensor,
                 where);
        break;
    case IR_OP_ALLTOALL:
        snprintf(buf, size, "for %s: %s has its axes where the op does not need them; moves %s", stmt,
                 v->tensor, where);
        break;
    default: {
        char part[64];
        partials_str((ir_reduce)pass_prop_current(p, v).red, ax, part, sizeof part);
        snprintf(buf, size, "for %s: %s holds %s (%s); reduced straight into %s (ReduceScatter, half an "
                 "AllReduce)", stmt, v->tensor, part, unreduced_cause(p, k, i, st), where);
    }
    }
}

void pass_prop_per_axis_note(const prop *p, const ir_type *t, const ir_sharding *to,
                             const pass_reshard_plan *plan, char *buf, size_t size)
{
    buf[0] = 0;
    pass_reshard_plan one;
    if (!pass_reshard_find_one_dim(p->m, p->hw, t, to, &one))
        return;
    char seq[256] = "";
    size_t n = 0;
    for (int s = 0; s < one.nsteps && n < sizeof seq; s++) {
        char ax[IR_MAX_AXES + 1];
        n += (size_t)snprintf(seq + n, sizeof seq - n, "%s%s_%s", s ? ", " : "", ir_op_name(one.steps[s].kind),
                              step_axes(p->m, &one.steps[s], ax, sizeof ax));
    }
    double mib = 1024.0 * 1024.0;
    bool fewer_bytes = fabs(one.bytes - plan->bytes) > 1e-9 * fmax(1.0, one.bytes);
    if (!p->hw || fewer_bytes)
        snprintf(buf, size, "; with one collective over all its axes this reshard moves %.3g MiB per "
                 "device, where collectives along one dim each (%s) move %.3g MiB", plan->bytes / mib, seq,
                 one.bytes / mib);
    else if (one.time > plan->time * (1 + 1e-9))
        snprintf(buf, size, "; with one collective over all its axes (seed 001: the bandwidth grows with "
                 "the number of axes) this reshard takes %.4g us on %s, where collectives along one dim "
                 "each (%s) take %.4g us", plan->time * 1e6, p->hw->name, seq, one.time * 1e6);
    else
        snprintf(buf, size, "; one collective over all its axes is as fast on %s as collectives along one "
                 "dim each (%s, %.4g us), in fewer ops", p->hw->name, seq, one.time * 1e6);
}

/* Why step `st` is needed on operand i of op k (at the pre-step sharding
 * `from`); written into buf. */
void pass_prop_operand_reason(const prop *p, int k, int i, const pass_reshard_step *st, char *buf, size_t size)
{
    const ir_module *m = p->m;
    const opinfo *oi = &p->ops[k];
    const ir_op *op = oi->op;
    char stmt[160], ax[IR_MAX_AXES + 1];
    if (st->coll.dim == IR_COLL_PER_AXIS) {
        per_axis_operand_reason(p, k, i, st, buf, size);
        return;
    }
    pass_prop_stmt(p->m, op, stmt, sizeof stmt);
    step_axes(m, st, ax, sizeof ax);
    const char *a = op->operands[i]->tensor;
    int dim = st->coll.dim >= 0 ? oi->labels[i][st->coll.dim] : -1;
    int l = dim >= 0 ? pass_prop_label_index(oi, dim) : -1;
    const char *dn = dim >= 0 ? m->dims[dim].name : "";
    int where = oi->lay.choice[st->coll.axes[0]];
    switch (st->kind) {
    case IR_OP_ALLGATHER: {
        size_t n;
        if (l >= 0 && oi->contracted[l] && !source_of(p, k, i, l, st))
            snprintf(buf, size, "for %s: contracting %s sharded on %s in %s only", stmt, dn, ax, a);
        else if (l >= 0 && oi->contracted[l])
            snprintf(buf, size, "for %s: contracting %s sharded on %s in both operands, but gathering %s "
                     "than reducing the partial sums", stmt, dn, ax, cheaper(p));
        else
            snprintf(buf, size, "for %s: %s sharded on %s in %s", stmt, dn, ax, a);
        n = strlen(buf);
        if (where >= 0 && where < CH_CARRY && where != l) {
            const char *src = source_of(p, k, i, where, st);
            snprintf(buf + n, size - n, "; %s shards %s here%s%s%s, so gathering %s %s", ax,
                     m->dims[oi->label[where]].name, src ? " (as in " : "", src ? src : "", src ? ")" : "", a,
                     cheapest(p));
        } else if (where == CH_NONE && !(l >= 0 && oi->contracted[l])) {
            snprintf(buf + n, size - n, "; the op runs replicated over %s", ax);
        }
        break;
    }
    case IR_OP_SLICE:
        if (l >= 0 && oi->contracted[l]) {
            const char *src = source_of(p, k, i, l, st);
            snprintf(buf, size, "for %s: contracting %s sharded on %s in %s only; slicing %s and reducing the "
                     "partial sums later %s than gathering (seed 001 Q9)", stmt, dn, ax,
                     src ? src : "the other operand", a, cheaper(p));
        } else {
            snprintf(buf, size, "for %s: %s shards %s here; slicing %s needs no communication", stmt, ax, dn, a);
        }
        break;
    case IR_OP_ALLTOALL:
        snprintf(buf, size, "for %s: %s has %s on %s, the op needs it on %s", stmt, a, ax, dn,
                 m->dims[oi->labels[i][st->coll.dim2]].name);
        break;
    case IR_OP_REDUCESCATTER:
    case IR_OP_ALLREDUCE: {
        const char *why = unreduced_cause(p, k, i, st);
        char part[64];
        partials_str((ir_reduce)pass_prop_current(p, op->operands[i]).red, ax, part, sizeof part);
        if (st->kind == IR_OP_REDUCESCATTER)
            snprintf(buf, size, "for %s: %s holds %s (%s); reduced straight into %s sharded "
                     "on %s (ReduceScatter, half an AllReduce)", stmt, a, part, why, dn, ax);
        else
            snprintf(buf, size, "for %s: %s holds %s (%s)", stmt, a, part, why);
        break;
    }
    default:
        snprintf(buf, size, "for %s", stmt);
    }
}

/* Why step `st` is needed to bring value v to `what` (a constraint or an
 * output); `op` is v's producer or NULL. */
void pass_prop_target_reason(const prop *p, const ir_op *op, const ir_value *v, const ir_sharding *target,
                          const char *what, const pass_reshard_step *st, char *buf, size_t size)
{
    char stmt[160], ax[IR_MAX_AXES + 1], ty[160];
    ir_type t = v->type;
    t.sh = *target;
    ir_type_str(p->m, v->tensor, &t, ty, sizeof ty);
    step_axes(p->m, st, ax, sizeof ax);
    if (op)
        pass_prop_stmt(p->m, op, stmt, sizeof stmt);
    else
        snprintf(stmt, sizeof stmt, "%s", v->tensor);
    int n = snprintf(buf, size, "for %s: %s %s", stmt, what, ty);
    if (n < 0 || (size_t)n >= size)
        return;
    char part[64];
    partials_str((ir_reduce)v->type.sh.red, ax, part, sizeof part);
    if (st->kind == IR_OP_REDUCESCATTER)
        snprintf(buf + n, size - (size_t)n, "; %s reduced straight into the sharded layout "
                 "(ReduceScatter, not AllReduce + Slice)", part);
    else if (st->kind == IR_OP_ALLREDUCE)
        snprintf(buf + n, size - (size_t)n, "; %s must be reduced", part);
}

/* Appends "Kind_AXES:tensor" for each step of the reshard of v from `have`
 * to `want` to buf (at most `*left` more entries). */
static void add_steps(const prop *p, const ir_value *v, const ir_sharding *have, const ir_sharding *want,
                      char *buf, size_t size, int *left)
{
    if (ir_sharding_equal(have, want, v->type.rank) || *left <= 0)
        return;
    ir_type t = v->type;
    t.sh = *have;
    pass_reshard_plan plan;
    if (!pass_reshard_find_timed(p->m, p->hw, &t, want, &plan))
        return;
    for (int s = 0; s < plan.nsteps && *left > 0; s++, (*left)--) {
        char ax[IR_MAX_AXES + 1];
        size_t n = strlen(buf);
        step_axes(p->m, &plan.steps[s], ax, sizeof ax);
        snprintf(buf + n, size - n, "%s%s_%s:%s", n ? ", " : "", ir_op_name(plan.steps[s].kind), ax, v->tensor);
    }
}

/* The collectives layout `lay` of op k would insert (operands, then its
 * result towards its constraint, consumers and outputs), "none" if none. */
static void layout_steps(const prop *p, int k, const layout *lay, char *buf, size_t size)
{
    const ir_op *op = p->ops[k].op;
    int left = 4;
    buf[0] = 0;
    for (int i = 0; i < op->noperands; i++) {
        ir_sharding have = pass_prop_current(p, op->operands[i]);
        add_steps(p, op->operands[i], &have, &lay->req[i], buf, size, &left);
    }
    const ir_value *r = op->result;
    if (r->has_constraint) {
        add_steps(p, r, &lay->produced, &r->constraint, buf, size, &left);
    } else {
        /* The consumers' and outputs' targets, each distinct one once, as
         * materialisation emits one reshard per target. */
        ir_sharding wants[MAX_HINTS];
        int nw = 0;
        for (int u = p->use_start[r->id]; u < p->use_start[r->id + 1] && nw < MAX_HINTS; u++) {
            const opinfo *c = &p->ops[p->uses[u].op];
            if (c->decided)
                wants[nw++] = c->lay.req[p->uses[u].operand];
        }
        for (int i = 0; i < p->m->noutputs && nw < MAX_HINTS; i++)
            if (p->m->outputs[i].value == r)
                wants[nw++] = p->m->outputs[i].has_constraint ? p->m->outputs[i].constraint
                                                               : pass_prop_reduced(lay->produced);
        for (int w = 0; w < nw; w++) {
            bool seen = false;
            for (int e = 0; e < w && !seen; e++)
                seen = ir_sharding_equal(&wants[e], &wants[w], r->type.rank);
            if (!seen)
                add_steps(p, r, &lay->produced, &wants[w], buf, size, &left);
        }
    }
    if (left <= 0) {
        size_t n = strlen(buf);
        snprintf(buf + n, size - n, ", ...");
    }
    if (!buf[0])
        snprintf(buf, size, "no collective");
}

void pass_prop_decision(const prop *p, int k, char *buf, size_t size)
{
    const opinfo *oi = &p->ops[k];
    buf[0] = 0;
    if (!oi->has_alt)
        return;
    char alt[96], steps[256];
    pass_prop_layout_str(p, k, &oi->alt, alt, sizeof alt);
    layout_steps(p, k, &oi->alt, steps, sizeof steps);
    const cost *a = &oi->lay_total, *b = &oi->alt_total;
    double teps = 1e-9 * fmax(a->time, b->time);
    if (!p->hw)
        snprintf(buf, size, "; planner: %.3g MiB moved per device, chosen over %s (%s): %.3g MiB",
                 a->bytes / (1024.0 * 1024.0), alt, steps, b->bytes / (1024.0 * 1024.0));
    else if (b->time > a->time + teps)
        snprintf(buf, size, "; planner: step %.3g us on %s, chosen over %s (%s): step %.3g us (+%.3g us)",
                 a->time * 1e6, p->hw->name, alt, steps, b->time * 1e6, (b->time - a->time) * 1e6);
    else if (fabs(a->bytes - b->bytes) > 1e-9 * fmax(1.0, fmax(a->bytes, b->bytes)))
        snprintf(buf, size, "; planner: step %.3g us on %s either way, chosen over %s (%s) by bytes moved: "
                 "%.3g MiB against %.3g MiB per device", a->time * 1e6, p->hw->name, alt, steps,
                 a->bytes / (1024.0 * 1024.0), b->bytes / (1024.0 * 1024.0));
    else
        snprintf(buf, size, "; planner: step %.3g us on %s and the same bytes either way, chosen over %s (%s) "
                 "by %s", a->time * 1e6, p->hw->name, alt, steps,
                 a->nops != b->nops ? "fewer collectives" : "splitting more of the op's work");
}
