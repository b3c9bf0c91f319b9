/*
 * lower.c - the checked AST to IR.
 *
 * Declarations become mesh axes, dims (already added by the checker) and
 * IR_VAL_INPUT / IR_VAL_PARAM values carrying the written sharding.  Each
 * statement `L[l] = s1*t1 + s2*t2 + ...` is lowered term by term:
 *
 *  - A term whose indices include one that `l` lacks is summed (Einstein
 *    convention, at the statement level only).  Its parenthesised and call
 *    factors are first lowered into their own elementwise values over the
 *    union of their indices (nothing is summed inside them); its tensor
 *    factors then form einsums.  Two factors make one binary einsum; more
 *    make a left-to-right chain of binary einsums, each step summing the
 *    indices that neither a later factor nor `l` needs, so the propagate
 *    pass only ever sees unary and binary einsums (seed 001 gives the
 *    sharding rules for exactly those).  A lone factor is a unary einsum (a
 *    reduction).  Number factors fold into the last einsum's scale.
 *  - Every other term stays an expression over `l` (products, constants,
 *    broadcasts), and all terms are combined by one elementwise op over `l`.
 *    A statement that is exactly one summed term needs no elementwise op;
 *    its einsum result is the statement's value.
 *
 * The statement's final value is the value of tensor L; a written sharding
 * on the left side becomes its constraint.  Intermediates are named after L
 * and left unconstrained and replicated for the propagate pass.
 *
 * This file lowers statements; expressions, the calls that become einsums
 * and repeated blocks are in lower_*.c (lower_internal.h lists them).
 */
#include <string.h>

#include "lower_internal.h"

static ir_sharding without_unit_axes(const ir_module *m, ir_sharding sh, int rank);

/* A write into a state at a run-time position (check_write.c): the slice
 * is computed as a statement over the state's other dims, constrained to
 * the state's sharding of them (propagate brings it there), then written
 * by an UpdateSlice into the state's storage, or in a repeated block into
 * the current layer's.  Later reads of the state see the write: the
 * UpdateSlice's result becomes its current value (or layer). */
static bool lower_write(fe_checker *c, const ast_stmt *s)
{
    const ast_tref *l = &s->u.assign.lhs;
    fe_tensor *t = l->sym;
    int at = s->u.assign.write_pos;
    ir_value *store = fe_lower_ref_value(c, l);
    fe_stmt_ctx x = {.c = c, .ok = true};
    x.e = (ir_ewt_out){.m = c->m, .arena = c->arena, .tensor = t->name, .dtype = t->dtype,
                       .loc = s->loc};
    /* A window's rows have its dim in place of the written one. */
    int window = l->idx[at].window.s ? l->idx[at].dim : -1;
    for (int d = 0; d < store->type.rank; d++)
        if (d != at)
            x.lhs[x.nlhs++] = store->type.dims[d];
        else if (window >= 0)
            x.lhs[x.nlhs++] = window;
    /* A slice that is the result of a computing op, as it is, is written
     * from that value (constrained to the state's sharding) without a copy;
     * a carried value or a view is copied (its sharding is the loop's). */
    const ast_expr *rhs = s->u.assign.rhs;
    const ast_factor *f = rhs->nterms == 1 && rhs->terms[0]->sign > 0 && rhs->terms[0]->nfactors == 1
                              ? rhs->terms[0]->factors[0] : NULL;
    ir_value *rows = NULL;
    if (f && f->kind == AST_F_TENSOR && !f->divide && !f->u.tref.layer && f->u.tref.nidx == x.nlhs &&
        f->u.tref.sym->value->def && !f->u.tref.sym->value->has_constraint &&
        (f->u.tref.sym->value->def->kind == IR_OP_EINSUM ||
         f->u.tref.sym->value->def->kind == IR_OP_ELEMENTWISE) &&
        (!f->u.tref.nidx || !f->u.tref.idx[0].tensor)) {
        rows = f->u.tref.sym->value;
        /* ...read with its own dims (a relabeled reference gets a copy). */
        for (int k = 0; rows && k < x.nlhs; k++)
            if (f->u.tref.idx[k].dim != x.lhs[k] || rows->type.dims[k] != x.lhs[k])
                rows = NULL;
    }
    if (!rows)
        rows = fe_lower_assign(&x, s);
    if (!rows)
        return false;
    ir_sharding sh = ir_sharding_replicated();
    for (int d = 0, j = 0; d < store->type.rank; d++) {
        if (d == at && window >= 0)
            j++; /* the window's rows are whole on every device */
        if (d == at)
            continue;
        for (int k = 0; k < store->type.sh.naxes[d]; k++)
            ir_sharding_push(&sh, j, store->type.sh.axes[d][k]);
        j++;
    }
    rows->has_constraint = true;
    rows->constraint = without_unit_axes(c->m, sh, rows->type.rank);
    ir_value *pos = s->u.assign.pos->value;
    int row = s->u.assign.write_row;
    if (row >= 0 && pos->def && !pos->has_constraint) {
        /* A computed per-row position: the plan brings it to the rows'
         * sharding (a declared one is checked in check_write.c). */
        ir_sharding ps = ir_sharding_replicated();
        for (int k = 0; k < store->type.sh.naxes[row]; k++)
            ir_sharding_push(&ps, 0, store->type.sh.axes[row][k]);
        pos->has_constraint = true;
        pos->constraint = without_unit_axes(c->m, ps, 1);
    }
    ir_value *opnds[3] = {store, rows, pos};
    ir_value *r = ir_value_new(c->m, t->name, IR_VAL_OP, &store->type, l->name.loc);
    ir_op *op = ir_op_new(c->m, IR_OP_UPDATESLICE, 3, opnds, r, s->loc);
    op->u.update.dim = at;
    op->u.update.row = row;
    ir_op_append(c->m, op);
    if (s->u.assign.write_layer)
        t->slice = r; /* fe_lower_ref_value made the layer's slice in this block */
    else
        t->value = r;
    return true;
}

/* `sh` without the mesh axes of size 1: an axis of one device splits
 * nothing and reduces nothing, and left in a sharding it would make the
 * planner insert collectives over groups of one device (a copy each). */
static ir_sharding without_unit_axes(const ir_module *m, ir_sharding sh, int rank)
{
    ir_sharding out = ir_sharding_replicated();
    for (int d = 0; d < rank; d++)
        for (int k = 0; k < sh.naxes[d]; k++)
            if (m->mesh.axes[sh.axes[d][k]].size > 1)
                ir_sharding_push(&out, d, sh.axes[d][k]);
    for (int a = 0; a < m->mesh.naxes; a++)
        if ((sh.unreduced & (1u << a)) && m->mesh.axes[a].size > 1)
            out.unreduced |= 1u << a;
    out.red = out.unreduced ? sh.red : (uint8_t)IR_RED_SUM;
    return out;
}

/* The value of a declared input or param. */
static void lower_decl(fe_checker *c, const ast_stmt *s)
{
    fe_tensor *t = s->u.decl.tref.sym;
    ir_type ty;
    memset(&ty, 0, sizeof ty);
    ty.dtype = t->dtype;
    ty.rank = t->rank;
    memcpy(ty.dims, t->dims, (size_t)t->rank * sizeof(int));
    ty.sh = c->opts->single_device ? ir_sharding_replicated()
                                   : without_unit_axes(c->m, t->sh, t->rank);
    t->value = ir_value_new(c->m, t->name, t->kind, &ty, t->loc);
}

/* True when the shardings the program writes on statements and outputs
 * are dropped: the one-device reference, and einc analyze's strategies
 * (fe_autoshard.keep_mesh), which the planner lays out afresh. */
static bool drops_written_shardings(const fe_checker *c)
{
    return c->opts->single_device || (c->opts->autoshard && c->opts->autoshard->keep_mesh);
}

static void lower_output(fe_checker *c, const ast_stmt *s)
{
    const ast_tref *r = &s->u.output.tref;
    const fe_tensor *t = r->sym;
    ir_output *o = ir_output_add(c->m, t->name, t->value, r->name.loc);
    if (r->nidx < 0 || drops_written_shardings(c))
        return;
    o->has_constraint = true;
    ir_sharding sh = ir_sharding_replicated();
    for (int i = 0; i < r->nidx; i++)
        for (int k = 0; r->idx[i].axes && r->idx[i].axes[k]; k++)
            ir_sharding_push(&sh, i, ir_mesh_find_axis(&c->m->mesh, r->idx[i].axes[k]));
    o->constraint = without_unit_axes(c->m, sh, r->nidx);
}

bool fe_lower(fe_checker *c, const ast_program *prog)
{
    bool ok = true;
    /* The one-device reference, and a pipeline over an axis of one device,
     * run the layers unpipelined. */
    ir_pipeline *pp = &c->m->pipe;
    if (pp->axis >= 0 && (c->opts->single_device || c->m->mesh.axes[pp->axis].size == 1))
        pp->axis = pp->dim = -1;
    c->block = 0; /* fe_lower_repeat numbers the blocks again, as the checker did */
    c->repeat = NULL;
    for (int i = 0; i < prog->nstmts && ok; i++) {
        const ast_stmt *s = prog->stmts[i];
        if (s->kind == AST_S_INPUT || s->kind == AST_S_PARAM || s->kind == AST_S_STATE) {
            lower_decl(c, s);
        } else if (s->kind == AST_S_REPEAT) {
            fe_lower_repeat(c, s);
        } else if (s->kind == AST_S_END) {
            fe_lower_end(c, s->loc);
        } else if (s->kind == AST_S_ASSIGN && s->u.assign.write) {
            ok = lower_write(c, s);
        } else if (s->kind == AST_S_ASSIGN) {
            const ast_tref *l = &s->u.assign.lhs;
            fe_tensor *t = fe_symtab_get(&c->tensors, l->name.s);
            fe_stmt_ctx x = {.c = c, .nlhs = t->rank, .ok = true};
            x.e = (ir_ewt_out){.m = c->m, .arena = c->arena, .tensor = t->name, .dtype = t->dtype,
                               .loc = s->loc};
            memcpy(x.lhs, t->dims, (size_t)t->rank * sizeof(int));
            /* An update of a carried tensor is computed over the labels its
             * left side writes, which may relabel the tensor's dims; its
             * value then takes the tensor's dims (same sizes, checked). */
            if (s->u.assign.update)
                for (int k = 0; k < t->rank; k++)
                    x.lhs[k] = l->idx[k].dim;
            t->value = fe_grad_call(s) ? fe_lower_grad(c, s) : fe_lower_assign(&x, s);
            if (!t->value) {
                ok = false;
                break;
            }
            if (s->u.assign.update)
                memcpy(t->value->type.dims, t->dims, (size_t)t->rank * sizeof(int));
            /* An update of a carried tensor has its own left side. */
            bool constrained = s->u.assign.update ? s->u.assign.constrained : t->has_constraint;
            if (constrained && !drops_written_shardings(c)) {
                t->value->has_constraint = true;
                t->value->constraint = without_unit_axes(
                    c->m, s->u.assign.update ? s->u.assign.sh : t->sh, t->rank);
            } else if (fe_grad_call(s) && !c->opts->single_device) {
                /* The gradient of an input or param is sharded like it,
                 * unless the left side says otherwise: FSDP's gradients
                 * come out by ReduceScatter, as seed 000 lists them. */
                if (fe_grad_target(c, s)->kind != IR_VAL_OP)
                    t->value->def->u.grad.shard_like_w = true;
            }
        }
    }
    for (int i = 0; i < prog->nstmts && ok; i++)
        if (prog->stmts[i]->kind == AST_S_OUTPUT)
            lower_output(c, prog->stmts[i]);
    if (ok)
        ok = fe_lower_train(c, prog);
    if (c->opts->single_device)
        for (int a = 0; a < c->m->mesh.naxes; a++)
            c->m->mesh.axes[a].size = 1;
    return ok;
}
