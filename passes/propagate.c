/*
 * propagate.c - sharding propagation: choose how every op is split over the
 * mesh and insert the collectives that make each op locally computable.
 *
 * The model.  Every Einsum or Elementwise op gets an "iteration-space
 * sharding" (a layout): each mesh axis is given to one of the op's labels
 * (dims), to nothing (the op is replicated over it), or, where the op is
 * linear in an operand holding partial sums over the axis, to "carry" those
 * unreduced sums into the result.  A layout fixes the sharding every operand
 * must have (req) and the sharding the op produces (seed 001, "Matmul with
 * sharded operands": an axis on a contracting label makes the result {U_X};
 * an axis on a free label shards the result; two operands cannot both use an
 * axis on different labels).  Where an operand's sharding differs from what
 * the layout requires, a min-cost reshard (reshard.c, Dijkstra over sharding
 * states, seed 001's byte counts) is inserted.
 *
 * The objective is the estimated step time on the --hw profile (pass_ctx.hw),
 * by the cost model the cost pass uses (passes/costmodel/): every op's
 * compute under its layout (cost_op_estimate on per-device shapes, so work
 * repeated on the devices of an axis that could have split it costs its
 * FLOPs), plus, over every def-use edge, the time of reshard(producer's
 * sharding -> consumer's req), plus the reshards that make constrained
 * values and outputs meet their constraints (a bare output only needs its
 * partial sums reduced).  Ties are broken by bytes moved per device, then
 * by the number of ops.  Without a profile every time is 0 and bytes
 * decide.  We minimise it by coordinate descent: a forward sweep picks
 * each op's cheapest layout given its producers (with "must be reduced"
 * assumed for consumers not yet seen), then backward and forward sweeps
 * re-pick each op's layout given both its producers and its consumers'
 * current requirements, until nothing changes.  Every change strictly
 * lowers the objective, so the sweeps reach a fixed point.  The backward
 * sweeps are what let a constraint on an output shape the choices before
 * it (e.g. a ReduceScatter instead of AllReduce then Slice).  At the fixed
 * point, joint moves (a larger neighbourhood, as in Kernighan-Lin local
 * search) try each layout of an op with its readers re-picked to their best
 * given it, and keep the combination best for the whole objective; then
 * the sweeps run again.  docs/propagation.md gives the complexity, the
 * limits and worked examples.
 *
 * Which layouts are tried: two phases.  First, like GSPMD, an axis may
 * only go to a label on which some operand, the result's constraint, a
 * consumer's requirement or an output constraint already places it (or to
 * nothing, or to carrying): propagation spreads the shardings the user
 * wrote, and seed 000's strategies (DP, FSDP, TP, FSDP+TP) are fixed points
 * of this rule.  Then, with a profile, every mesh axis that the program
 * uses (some input, param, constraint or output shards a dim over it) may
 * go to any label of an operand: a ReduceScatter into a free dim, an
 * AllToAll that splits a matmul, a chain of ops split over an axis none of
 * them held.  From the first phase's plan the sweeps and joint moves run
 * again, then branch and bound over all ops (propagate_search.c), within a
 * budget of evaluations.  The wider plan is kept only if its step, with
 * parameter gathers overlapped as the cost pass schedules them
 * (propagate_step.c), is estimated WIDE_MARGIN (5%) shorter, so a plan the
 * user's shardings already give is not rewritten for a margin inside the
 * cost model's error.  An axis the
 * program never uses is a replica axis (docs/language.md): no op is split
 * over it.  Within one label, several axes keep the order a source gives
 * them, else mesh order.  Layouts whose dims do not divide are never chosen.
 *
 * Repeated blocks count as often as they run: an op in a body, and a
 * reshard emitted in front of one, cost |L| times, and the body's new value
 * pays for its reshard into the carried sharding every iteration.
 *
 * Materialisation walks the ops in program order: each operand not already
 * in its required sharding gets the planner's ops inserted just before the
 * op (reusing an identical earlier reshard of the same value); a constrained
 * result that comes out differently is produced into a fresh value and
 * resharded into the constrained value right after the op; outputs are
 * resharded at the end.  Each inserted op records why (ir_op_set_reason).
 *
 * Repeated blocks (LoopBegin .. LoopEnd) are planned once:
 * propagate_loop.c fixes the carried sharding of each loop before the
 * sweeps (or after a first round of them), and after materialisation
 * reshards the values entering and leaving the body into it.
 *
 * Files: this one runs the pass (setup, sweeps, materialisation);
 * propagate_cost.c prices layouts and propagate_layout.c chooses them;
 * propagate_loop.c handles repeated blocks; propagate_reason.c writes the
 * reasons; reshard.c is the planner; propagate_internal.h is what they
 * share.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "propagate_internal.h"

/* ---- materialisation ---- */

/* Emits (or reuses) the reshard of `v` into `to` before `before`; `reasons`
 * is called per step.  Returns the value holding `to`, or NULL on failure. */
typedef struct emit_why {
    const prop *p;       /* the pass */
    int k;               /* op info index (operand reshard), or -1 */
    int operand;         /* operand index, or -1 */
    const char *what;    /* for target reshards: "constraint" or "output" */
    const ir_op *def;    /* for target reshards: the producer of v, or NULL */
    int dk;              /* op info whose decision the first step reports, or -1 */
} emit_why;

/* Index of compute op `op` among p->ops, or -1 (a linear search: called
 * once per program output). */
static int decided_index(const prop *p, const ir_op *op)
{
    for (int k = 0; op && k < p->nops; k++)
        if (p->ops[k].op == op)
            return k;
    return -1;
}

static ir_value *emit(prop *p, ir_value *v, const ir_sharding *to, ir_op *before, ir_value *last,
                      ir_op *for_op, int operand, const emit_why *ew)
{
    int rank = v->type.rank;
    if (!last)
        for (int i = 0; i < p->nmade; i++)
            if (p->mades[i].src == v && ir_sharding_equal(&p->mades[i].sh, to, rank) &&
                pass_prop_loop_reusable(p->mades[i].dst, before))
                return p->mades[i].dst;
    pass_reshard_plan plan;
    if (!pass_reshard_find_timed(p->m, p->hw, &v->type, to, &plan))
        return NULL;
    char whys[PASS_RESHARD_MAX_STEPS][1024];
    const char *wp[PASS_RESHARD_MAX_STEPS];
    for (int s = 0; s < plan.nsteps; s++) {
        if (ew->k >= 0)
            pass_prop_operand_reason(p, ew->k, ew->operand, &plan.steps[s], whys[s], sizeof whys[s]);
        else
            pass_prop_target_reason(p, ew->def, v, to, ew->what, &plan.steps[s], whys[s], sizeof whys[s]);
        wp[s] = whys[s];
    }
    /* A collective whose axes work along different dims says what the
     * one-dim collectives it replaces would take. */
    char note[512] = "";
    for (int s = 0; s < plan.nsteps; s++) {
        if (plan.steps[s].coll.dim != IR_COLL_PER_AXIS)
            continue;
        if (!note[0])
            pass_prop_per_axis_note(p, &v->type, to, &plan, note, sizeof note);
        size_t n = strlen(whys[s]);
        snprintf(whys[s] + n, sizeof whys[s] - n, "%s", note);
    }
    /* The first op inserted for a compute op also says what decided its
     * layout and what lost (the runner-up and its cost). */
    int dk = ew->dk;
    if (plan.nsteps > 0 && dk >= 0 && !p->ops[dk].decision_told) {
        size_t n = strlen(whys[0]);
        snprintf(whys[0] + n, sizeof whys[0] - n, "%s", p->ops[dk].decision);
        p->ops[dk].decision_told = true;
    }
    ir_value *out = pass_reshard_emit(p->m, v, &plan, before, last, for_op, operand, wp);
    if (!last && plan.nsteps > 0) {
        if (p->nmade == p->made_cap) {
            int cap = p->made_cap ? 2 * p->made_cap : 16;
            made *nm = realloc(p->mades, (size_t)cap * sizeof *nm);
            if (!nm)
                return out;
            p->mades = nm;
            p->made_cap = cap;
        }
        made mk = {v, *to, out};
        p->mades[p->nmade++] = mk;
    }
    return out;
}

static bool is_compute(const ir_op *op);

/* The Einsum/Elementwise op whose result `v` is, possibly through reshard
 * ops inserted after it (an output may be a constrained value's reshard);
 * NULL for inputs. */
static ir_op *compute_origin(ir_value *v)
{
    for (int guard = 0; v && v->def && guard < 1000; guard++) {
        if (is_compute(v->def))
            return v->def;
        v = v->def->noperands > 0 ? v->def->operands[0] : NULL;
    }
    return NULL;
}

static int materialise(prop *p)
{
    ir_module *m = p->m;
    diag_ctx *d = p->ctx->diag;
    char b1[256], b2[256];
    int errors = 0;
    for (int k = 0; k < p->nops; k++) {
        opinfo *oi = &p->ops[k];
        ir_op *op = oi->op;
        for (int i = 0; i < op->noperands; i++) {
            ir_value *v = op->operands[i];
            if (ir_sharding_equal(&v->type.sh, &oi->lay.req[i], v->type.rank))
                continue;
            emit_why ew = {p, k, i, NULL, NULL, k};
            ir_value *nv = emit(p, v, &oi->lay.req[i], op, NULL, op, i, &ew);
            if (!nv) {
                ir_type t = v->type;
                t.sh = oi->lay.req[i];
                diag_error(d, op->loc, "cannot reshard %s into %s", ir_type_str(m, v->tensor, &v->type, b1, sizeof b1),
                           ir_type_str(m, v->tensor, &t, b2, sizeof b2));
                errors++;
                continue;
            }
            ir_op_set_operand(m, op, i, nv);
        }
        ir_value *r = op->result;
        if (r->has_constraint && !ir_sharding_equal(&oi->lay.produced, &r->constraint, r->type.rank)) {
            ir_type t = r->type;
            t.sh = oi->lay.produced;
            ir_value *w = ir_value_new(m, r->tensor, IR_VAL_OP, &t, r->loc);
            op->result = w;
            w->def = op;
            emit_why ew = {p, -1, -1, "constraint", op, k};
            if (!emit(p, w, &r->constraint, op->next, r, op, -1, &ew)) {
                ir_type c = r->type;
                c.sh = r->constraint;
                diag_error(d, r->loc, "cannot meet the constraint %s: %s comes out as %s",
                           ir_type_str(m, r->tensor, &c, b1, sizeof b1), r->tensor,
                           ir_type_str(m, r->tensor, &t, b2, sizeof b2));
                errors++;
            }
        } else {
            r->type.sh = oi->lay.produced;
        }
    }
    for (int i = 0; i < m->noutputs; i++) {
        ir_output *o = &m->outputs[i];
        ir_value *v = o->value;
        if (!v)
            continue;
        ir_sharding want = o->has_constraint ? o->constraint : pass_prop_reduced(v->type.sh);
        if (ir_sharding_equal(&v->type.sh, &want, v->type.rank))
            continue;
        ir_op *origin = compute_origin(v);
        emit_why ew = {p, -1, -1, "output", origin, decided_index(p, origin)};
        ir_value *nv = emit(p, v, &want, NULL, NULL, origin, -1, &ew);
        if (!nv) {
            ir_type c = v->type;
            c.sh = want;
            diag_error(d, o->loc, "cannot bring output %s from %s to %s", o->name,
                       ir_type_str(m, o->name, &v->type, b1, sizeof b1), ir_type_str(m, o->name, &c, b2, sizeof b2));
            errors++;
            continue;
        }
        o->value = nv;
    }
    return errors;
}

/* ---- setup ---- */

static bool is_compute(const ir_op *op)
{
    return op->kind == IR_OP_EINSUM || op->kind == IR_OP_ELEMENTWISE;
}

/* p->tclass: values of one dtype and dims share their reshard costs. */
static bool type_classes(prop *p)
{
    const ir_module *m = p->m;
    size_t cap = 16;
    while (cap < 2 * (size_t)m->nvalues)
        cap *= 2;
    int *slot = malloc(cap * sizeof *slot);
    p->tclass = malloc(((size_t)m->nvalues + 1) * sizeof *p->tclass);
    p->over_budget = calloc((size_t)m->nvalues + 1, sizeof *p->over_budget);
    if (!slot || !p->tclass || !p->over_budget) {
        free(slot);
        return false;
    }
    for (size_t i = 0; i < cap; i++)
        slot[i] = -1;
    for (int id = 0; id < m->nvalues; id++) {
        const ir_type *t = &m->values[id]->type;
        uint64_t h = (uint64_t)t->dtype * 0x9e3779b97f4a7c15ull ^ (uint64_t)t->rank;
        for (int d = 0; d < t->rank; d++)
            h = (h ^ (uint64_t)t->dims[d]) * 0x100000001b3ull;
        size_t i = (size_t)(h ^ (h >> 29)) & (cap - 1);
        for (;; i = (i + 1) & (cap - 1)) {
            if (slot[i] < 0) {
                slot[i] = id;
                p->tclass[id] = id;
                break;
            }
            const ir_type *u = &m->values[slot[i]]->type;
            if (u->dtype == t->dtype && u->rank == t->rank &&
                memcmp(u->dims, t->dims, (size_t)t->rank * sizeof *t->dims) == 0) {
                p->tclass[id] = slot[i];
                break;
            }
        }
    }
    free(slot);
    return true;
}

/* Fills p->ops, p->def, the use lists, the used axes, p->loop_use and
 * p->tclass; false on allocation failure. */
static bool setup(prop *p)
{
    ir_module *m = p->m;
    int n = 0;
    for (ir_op *op = m->first; op; op = op->next)
        n += is_compute(op);
    p->ops = calloc((size_t)n + 1, sizeof *p->ops);
    p->def = malloc(((size_t)m->nvalues + 1) * sizeof *p->def);
    p->use_start = calloc((size_t)m->nvalues + 2, sizeof *p->use_start);
    p->uses = calloc((size_t)n * IR_MAX_OPERANDS + 1, sizeof *p->uses);
    if (!p->ops || !p->def || !p->use_start || !p->uses)
        return false;
    p->nvalues = m->nvalues;
    for (int i = 0; i < m->nvalues; i++)
        p->def[i] = -1;
    for (ir_op *op = m->first; op; op = op->next) {
        if (!is_compute(op))
            continue;
        opinfo *oi = &p->ops[p->nops];
        oi->op = op;
        if (op->kind == IR_OP_EINSUM) {
            oi->labels = (const int(*)[IR_MAX_RANK])op->u.einsum.labels;
            oi->rlabels = op->u.einsum.result_labels;
        } else {
            oi->labels = (const int(*)[IR_MAX_RANK])op->u.ew.labels;
            oi->rlabels = op->u.ew.result_labels;
            oi->linear = ir_ew_takes_partial_sums(op);
        }
        for (int i = 0; i <= op->noperands; i++) {
            int rank = i < op->noperands ? op->operands[i]->type.rank : op->result->type.rank;
            const int *lab = i < op->noperands ? oi->labels[i] : oi->rlabels;
            for (int j = 0; j < rank; j++)
            {
                int l = pass_prop_label_index(oi, lab[j]);
                if (l < 0) {
                    l = oi->nlabels++;
                    oi->label[l] = lab[j];
                }
                if (i < op->noperands)
                    oi->in_operand[l] = true;
            }
        }
        for (int l = 0; l < oi->nlabels; l++) {
            oi->contracted[l] = true;
            for (int j = 0; j < op->result->type.rank; j++)
                if (oi->rlabels[j] == oi->label[l])
                    oi->contracted[l] = false;
        }
        p->def[op->result->id] = p->nops;
        for (int i = 0; i < op->noperands; i++)
            p->use_start[op->operands[i]->id + 1]++;
        p->nops++;
    }
    for (int i = 0; i < m->nvalues; i++)
        p->use_start[i + 1] += p->use_start[i];
    for (int i = 0; i < m->nvalues; i++) {
        const ir_value *v = m->values[i];
        if (p->def[i] < 0)
            p->used_axes |= ir_sharding_used_axes(&v->type.sh, v->type.rank);
        if (v->has_constraint)
            p->used_axes |= ir_sharding_used_axes(&v->constraint, v->type.rank);
    }
    for (int i = 0; i < m->noutputs; i++)
        if (m->outputs[i].has_constraint)
            p->used_axes |= ir_sharding_used_axes(&m->outputs[i].constraint,
                                                  m->outputs[i].value->type.rank);
    /* A pipeline's axis runs its stages: each stage computes whole ops of
     * its own layers, so no op is split over it (the stacked params' layer
     * dim is its only use, docs/pipeline.md). */
    if (m->pipe.axis >= 0)
        p->used_axes &= ~(1u << m->pipe.axis);
    p->loop_use = calloc((size_t)m->nvalues + 1, sizeof *p->loop_use);
    if (!p->loop_use)
        return false;
    if (!type_classes(p))
        return false;
    for (ir_op *op = m->first; op; op = op->next)
        if ((op->kind == IR_OP_LOOPBEGIN || op->kind == IR_OP_LOOPEND) && op->noperands == 1 &&
            op->operands[0]->id >= 0 && op->operands[0]->id < m->nvalues)
            p->loop_use[op->operands[0]->id] = op;
    int *fill = calloc((size_t)m->nvalues + 1, sizeof *fill);
    if (!fill)
        return false;
    for (int k = 0; k < p->nops; k++) {
        const ir_op *op = p->ops[k].op;
        for (int i = 0; i < op->noperands; i++) {
            int vid = op->operands[i]->id;
            use u = {k, i};
            p->uses[p->use_start[vid] + fill[vid]++] = u;
        }
    }
    free(fill);
    return true;
}

/* Checks what the layouts rely on: valid ops, labels and ranks. */
static int check_input(prop *p)
{
    int errors = 0;
    for (ir_op *op = p->m->first; op; op = op->next) {
        if (!is_compute(op))
            continue;
        /* An elementwise op may read no operand (index values and constants only). */
        bool ok = op->result && op->noperands >= (op->kind == IR_OP_ELEMENTWISE ? 0 : 1) &&
                  op->noperands <= IR_MAX_OPERANDS;
        for (int i = 0; ok && i < op->noperands; i++)
            ok = op->operands[i] && op->operands[i]->type.rank <= IR_MAX_RANK;
        for (int i = 0; ok && i < op->noperands; i++) {
            const int *lab = op->kind == IR_OP_EINSUM ? op->u.einsum.labels[i] : op->u.ew.labels[i];
            for (int j = 0; ok && j < op->operands[i]->type.rank; j++)
                ok = lab[j] >= 0 && lab[j] < p->m->ndims;
        }
        if (ok && op->kind == IR_OP_ELEMENTWISE)
            ok = op->u.ew.nodes && op->u.ew.root >= 0 && op->u.ew.root < op->u.ew.nnodes;
        if (!ok) {
            diag_error(p->ctx->diag, op->loc, "propagate: malformed %s op", ir_op_name(op->kind));
            errors++;
        }
    }
    return errors;
}

/* --debug-pass: "propagate: Tmp = In * Win: X->B Y->F, 1.25 MiB moved". */
static void log_layout(prop *p, int k)
{
    const opinfo *oi = &p->ops[k];
    char stmt[160];
    pass_prop_stmt(p->m, oi->op, stmt, sizeof stmt);
    fprintf(p->ctx->log, "propagate: %s:", stmt);
    for (int a = 0; a < p->m->mesh.naxes; a++) {
        int c = oi->lay.choice[a];
        fprintf(p->ctx->log, " %c->%s", p->m->mesh.axes[a].name,
                c == CH_NONE ? "replicated" : c >= CH_CARRY ? "carry{U}" : p->m->dims[oi->label[c]].name);
    }
    cost c = pass_prop_layout_cost(p, k, &oi->lay);
    if (p->hw)
        fprintf(p->ctx->log, ", %.4g us (compute and reshards), ", c.time * 1e6);
    else
        fputs(", ", p->ctx->log);
    fprintf(p->ctx->log, "%.2f MiB moved per device by its operands and result (%d ops)\n",
            c.bytes / (1024.0 * 1024.0), c.nops);
    if (oi->decision[0])
        fprintf(p->ctx->log, "propagate:   %s\n", oi->decision + 2);
}

/* Reports that no layout of op k is feasible, naming the likely cause. */
static void report_infeasible(const prop *p, int k)
{
    const ir_op *op = p->ops[k].op;
    const ir_value *r = op->result;
    char stmt[160], ty[160];
    pass_prop_stmt(p->m, op, stmt, sizeof stmt);
    if (r->has_constraint) {
        ir_type t = r->type;
        t.sh = r->constraint;
        ir_type_str(p->m, r->tensor, &t, ty, sizeof ty);
        if (r->constraint.unreduced)
            diag_error(p->ctx->diag, op->loc, "%s cannot produce %s: partial sums {U_...} only come from a "
                       "contraction over a sharded dim, or pass through an op linear in them", stmt, ty);
        else
            diag_error(p->ctx->diag, op->loc, "%s cannot meet the constraint %s (a dim would not divide by "
                       "its mesh axes)", stmt, ty);
        return;
    }
    diag_error(p->ctx->diag, op->loc, "no sharding of %s is computable (a dim would not divide by its mesh "
               "axes)", stmt);
}

/* Whether the second phase has used its budget of evaluations. */
static bool over_budget(const prop *p)
{
    return p->eval_limit && p->evals >= p->eval_limit;
}

/* Backward and forward rounds of re-picking layouts, to a fixed point (or
 * to the budget); returns the number of rounds. */
int pass_prop_sweep(prop *p)
{
    int round = 0;
    for (bool changed = true; changed && round < MAX_SWEEPS && !over_budget(p); round++) {
        changed = false;
        for (int k = p->nops - 1; k >= 0 && !over_budget(p); k--)
            changed |= pass_prop_choose(p, k) > 0;
        for (int k = 0; k < p->nops && !over_budget(p); k++)
            changed |= pass_prop_choose(p, k) > 0;
    }
    return round;
}

/* Sweeps from a settled carry can only reach a carried sharding that the
 * body's first op uses as it comes (propagate_loop.c): from a replicated
 * first guess, a DP cotangent stays replicated and is gathered every layer.
 * So the carries of the loops the sweeps settled are tried once more as
 * the primal's (pass_prop_loop_primal), and kept if the plan is cheaper.
 * Returns the rounds of sweeps. */
static int try_primal_carries(prop *p)
{
    int nloops = 0;
    for (const ir_op *op = p->m->first; op; op = op->next)
        nloops += op->kind == IR_OP_LOOPBEGIN;
    ir_sharding *saved = malloc((size_t)(nloops > 0 ? nloops : 1) * sizeof *saved);
    layout *keep = malloc((size_t)p->nops * sizeof *keep + 1);
    int round = 0;
    if (saved && keep) {
        for (int k = 0; k < p->nops; k++)
            keep[k] = p->ops[k].lay;
        double before = pass_prop_total_cost(p).time;
        if (pass_prop_loop_primal(p, saved, nloops)) {
            round = pass_prop_sweep(p);
            if (!(pass_prop_total_cost(p).time < before)) {
                pass_prop_loop_restore(p, saved, nloops);
                for (int k = 0; k < p->nops; k++)
                    p->ops[k].lay = keep[k];
            }
        }
    }
    free(saved);
    free(keep);
    return round;
}

/* Sweeps to a fixed point, then joint moves and sweeps again while they
 * help; returns the rounds of sweeps.  Every accepted change lowers the
 * objective. */
int pass_prop_descend(prop *p)
{
    int round = 0;
    for (int joint_rounds = 0;; joint_rounds++) {
        round += pass_prop_sweep(p);
        if (joint_rounds >= MAX_JOINT_ROUNDS || !pass_prop_improve_joint(p))
            break;
    }
    return round;
}

/* A copy of every op's layout (the caller frees it), NULL when out of
 * memory. */
static layout *layouts_save(const prop *p)
{
    layout *keep = malloc((size_t)p->nops * sizeof *keep + 1);
    for (int k = 0; keep && k < p->nops; k++)
        keep[k] = p->ops[k].lay;
    return keep;
}

/* Sweeps after the ILP adopted a plan; when the ILP's memory row chose
 * it, the sweeps (which see only time) are undone if their plan no longer
 * fits the HBM, and when its exposed edge costs chose it (collective
 * matmul, propagate_ilp_cm.c), if their serial moves lengthen the
 * step (pass_prop_step_time).  Returns the rounds of sweeps. */
static int sweep_fitting(prop *p)
{
    bool cm = p->ilp.cm_adopted;
    if (p->ilp.mem != PASS_ILP_MEM_BOUND && !cm)
        return pass_prop_sweep(p);
    layout *keep = layouts_save(p);
    if (!keep)
        return 0;
    double step = cm ? pass_prop_step_time(p) : 0.0;
    int round = pass_prop_sweep(p);
    if ((p->ilp.mem == PASS_ILP_MEM_BOUND && pass_prop_memory(p) > p->ilp.mem_hbm) ||
        (cm && pass_prop_step_time(p) > step))
        for (int k = 0; k < p->nops; k++)
            p->ops[k].lay = keep[k];
    free(keep);
    if (cm)
        p->plan_why = "the ILP priced each reshard's time left exposed beside its matmul (collective matmul) "
                      "and chose a plan that hides more";
    return round;
}

/* The second phase: from the plan that spreads the user's shardings (the
 * local optimum of descend), every axis the program uses may go to any
 * dim; descend again, then branch and bound over the whole program.  The
 * wider plan is kept only if its step (pass_prop_step_time: parameter
 * gathers overlapped) is WIDE_MARGIN shorter: a plan that departs from the
 * shardings the user wrote must win by more than the cost model's error,
 * not by a rounding.  Returns the rounds of sweeps. */
static int widen(prop *p)
{
    layout *keep = layouts_save(p);
    if (!keep)
        return 0;
    double narrow = pass_prop_step_time(p);
    bool fit_narrow = p->hw && pass_prop_memory(p) <= p->hw->hbm_bytes;
    p->wide = true;
    p->eval_limit = p->evals + WIDE_BUDGET;
    int round = pass_prop_descend(p);
    if (pass_prop_branch_bound(p, BB_BUDGET) > 0)
        round += pass_prop_sweep(p);
    p->eval_limit = 0;
    /* The whole program at once: what no move of a few ops reaches. */
    if (p->ilp_time > 0 && pass_prop_ilp(p, p->ilp_time, &p->ilp) > 0)
        round += sweep_fitting(p);
    double wide = pass_prop_step_time(p);
    bool better = wide < narrow * (1.0 - WIDE_MARGIN);
    /* A plan that fits the HBM beats one that does not (the ILP's memory
     * row), whatever their steps. */
    if (p->ilp.mem_hbm > 0) {
        bool fit_wide = pass_prop_memory(p) <= p->ilp.mem_hbm;
        if (fit_wide != fit_narrow)
            better = fit_wide;
    }
    if (p->ctx->log)
        fprintf(p->ctx->log,
                "propagate: with every used axis on any dim: step %.4g us against %.4g us "
                "(parameter gathers overlapped), %s\n",
                wide * 1e6, narrow * 1e6, better ? "kept" : "not kept (less than the margin faster)");
    if (!better) {
        p->plan_why = "the plan from the shardings as written is kept, since the best plan found is less than "
                      "5% faster with parameter gathers overlapped";
        p->wide = false;
        for (int k = 0; k < p->nops; k++)
            p->ops[k].lay = keep[k];
    }
    free(keep);
    /* Seed 000's strategies, scored by the step rather than the serial
     * objective the ILP minimises (--portfolio=off: not tried). */
    const char *pf = pass_option_value(p->ctx, "portfolio");
    if (!pf || strcmp(pf, "off") != 0)
        pass_prop_portfolio(p);
    return round;
}

/* m->plan: what the search proved about the plan whose objective is
 * `objective` seconds. */
static void certify(prop *p, double objective)
{
    ir_plan_cert *c = &p->m->plan;
    memset(c, 0, sizeof *c);
    if (!p->hw)
        return;
    const pass_prop_ilp_report *r = &p->ilp;
    c->valid = true;
    c->objective = objective;
    c->candidates = r->candidates;
    c->merged = r->merged;
    c->why = p->plan_why;
    c->strategy = p->plan_strategy;
    if (r->mem != PASS_ILP_MEM_FREE) {
        c->memory = r->mem == PASS_ILP_MEM_BOUND ? IR_PLAN_MEM_BOUND : IR_PLAN_MEM_NONE_FITS;
        c->mem_hbm = r->mem_hbm;
        c->mem_fastest = r->mem_fastest;
        c->mem_plan = pass_prop_memory(p);
        c->mem_least = r->mem_least;
        c->fastest = r->fastest;
    }
    switch (r->status) {
    case PASS_ILP_OPTIMAL:
        c->proof = IR_PLAN_OPTIMAL;
        c->best = r->bound;
        break;
    case PASS_ILP_TIME_LIMIT:
        c->proof = r->bound > 0 ? IR_PLAN_BOUNDED : IR_PLAN_UNPROVEN;
        c->best = r->bound;
        if (c->proof == IR_PLAN_UNPROVEN)
            c->why = "the ILP's relaxation was not solved within its iteration or time limit";
        break;
    case PASS_ILP_TOO_LARGE:
        c->why = "the ILP is too large";
        break;
    case PASS_ILP_SKIPPED:
        c->why = "out of memory building the ILP";
        break;
    case PASS_ILP_NONE:
        c->why = p->ilp_time <= 0 ? "--ilp=off" : p->nops > WIDE_MAX_OPS ? "more ops than the search takes"
                                                                          : "no whole-program ILP";
        break;
    }
}

int pass_propagate(pass_ctx *ctx, ir_module *m)
{
    prop p;
    memset(&p, 0, sizeof p);
    p.ctx = ctx;
    p.hw = ctx->hw;
    const char *ms = pass_option_value(ctx, "meshslice");
    p.meshslice = pass_runs_later(ctx, "meshslice") && !(ms && strcmp(ms, "off") == 0);
    p.meshslice_k = p.meshslice && ms && strcmp(ms, "auto") != 0;
    p.m = m;
    pass_prop_parse_ilp(pass_option_value(ctx, "ilp"), &p.ilp_time);
    int errors = check_input(&p);
    if (errors)
        return errors;
    if (!setup(&p)) {
        diag_error(ctx->diag, DIAG_NOLOC, "propagate: out of memory");
        errors = 1;
        goto out;
    }
    int unknown_loops = pass_prop_loop_prepare(&p);
    /* Forward sweep, then backward/forward rounds to a fixed point. */
    for (int k = 0; k < p.nops; k++) {
        if (pass_prop_choose(&p, k) < 0) {
            report_infeasible(&p, k);
            errors++;
        }
    }
    if (errors)
        goto out;
    int round = pass_prop_descend(&p);
    /* Repeated blocks whose carried sharding comes from the sweeps. */
    if (unknown_loops && pass_prop_loop_settle(&p))
        round += pass_prop_sweep(&p);
    if (unknown_loops)
        round += try_primal_carries(&p);
    if (p.hw && p.nops <= WIDE_MAX_OPS)
        round += widen(&p);
    cost total = pass_prop_total_cost(&p);
    certify(&p, total.time);
    for (int k = 0; k < p.nops; k++)
        pass_prop_runner_up(&p, k, &total);
    for (int k = 0; k < p.nops; k++)
        pass_prop_decision(&p, k, p.ops[k].decision, sizeof p.ops[k].decision);
    if (ctx->log) {
        fprintf(ctx->log, "propagate: %d ops, fixed point after %d round(s), ", p.nops, round);
        if (p.hw)
            fprintf(ctx->log, "%.4g us on %s (compute and reshards, in sequence), ", total.time * 1e6,
                    p.hw->name);
        fprintf(ctx->log, "%.0f bytes moved per device by %d reshard ops\n", total.bytes, total.nops);
        if (p.hw)
            fprintf(ctx->log, "propagate: memory row of the plan: %.0f bytes per device (params, optimizer "
                    "state, inputs, gradients, kept activations), HBM %.0f\n", pass_prop_memory(&p),
                    p.hw->hbm_bytes);
        for (int k = 0; k < p.nops; k++)
            log_layout(&p, k);
    }
    if (p.bounded)
        diag_warning(ctx->diag, DIAG_NOLOC,
                     "propagate: %d resharding cost(s) came from a direct route (ReduceScatter, AllReduce, "
                     "AllGather, Slice) because the search over a value's shardings exceeded its budget of %d "
                     "edges; the plan may not be the cheapest (docs/propagation.md, \"Planner time\")",
                     p.bounded, PASS_RESHARD_EDGE_BUDGET);
    pass_prop_loop_stacks(&p);
    errors = materialise(&p);
    if (!errors)
        errors = pass_prop_loop_finish(&p);
    if (!errors)
        errors = pass_prop_state_writes(&p);
out:
    free(p.ops);
    free(p.def);
    free(p.use_start);
    free(p.uses);
    free(p.loop_use);
    free(p.tclass);
    free(p.over_budget);
    free(p.cache);
    free(p.mades);
    return errors;
}
