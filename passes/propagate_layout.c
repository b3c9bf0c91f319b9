/*
 * propagate_layout.c - the layout search of the propagate pass: an op's
 * candidate iteration-space shardings, the choice of the cheapest, and the
 * joint moves of a producer with its readers.  A layout's cost
 * (propagate_cost.c) is the estimated time on the --hw profile of
 * the op's compute under it (cost_op_estimate on the per-device shapes: the
 * roofline of seeds 001/002, or a calibrated profile's GEMM and elementwise
 * curves) plus the time of the reshards of its operands and result (the
 * resharding planner, each step timed by the same model); bytes moved and
 * op counts only break ties.  See the essay at the top of propagate.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "propagate_internal.h"

/* ---- layouts ---- */

/* Label index of dim id `dim` in op info `oi`, or -1. */
int pass_prop_label_index(const opinfo *oi, int dim)
{
    for (int l = 0; l < oi->nlabels; l++)
        if (oi->label[l] == dim)
            return l;
    return -1;
}

/* Shardings that say where the op's result would like its axes: the
 * result's constraint, its consumers' requirements, output constraints. */
static int result_hints(const prop *p, int k, ir_sharding *hints)
{
    const ir_value *v = p->ops[k].op->result;
    int n = 0;
    if (v->has_constraint)
        hints[n++] = v->constraint;
    for (int u = p->use_start[v->id]; u < p->use_start[v->id + 1] && n < MAX_HINTS; u++) {
        const opinfo *c = &p->ops[p->uses[u].op];
        if (c->decided)
            hints[n++] = c->lay.req[p->uses[u].operand];
    }
    for (int i = 0; i < p->m->noutputs && n < MAX_HINTS; i++)
        if (p->m->outputs[i].value == v && p->m->outputs[i].has_constraint)
            hints[n++] = p->m->outputs[i].constraint;
    return n;
}

/* The order of the axes in `set` on label l: the order of the first source
 * (operand or hint position with that label) holding exactly that set, else
 * mesh order.  Writes them to out, returns their count. */
static int label_order(const prop *p, int k, const ir_sharding *hints, int nhints, int l, ir_axes set,
                       int8_t *out)
{
    const opinfo *oi = &p->ops[k];
    const ir_op *op = oi->op;
    int cnt = 0;
    for (int a = 0; a < p->m->mesh.naxes; a++)
        if (set & (1u << a))
            out[cnt++] = (int8_t)a;
    if (cnt < 2)
        return cnt;
    for (int src = 0; src < op->noperands + nhints; src++) {
        ir_sharding s;
        int rank;
        const int *lab;
        if (src < op->noperands) {
            s = pass_prop_current(p, op->operands[src]);
            rank = op->operands[src]->type.rank;
            lab = oi->labels[src];
        } else {
            s = hints[src - op->noperands];
            rank = op->result->type.rank;
            lab = oi->rlabels;
        }
        for (int j = 0; j < rank; j++) {
            if (lab[j] != oi->label[l] || s.naxes[j] != cnt)
                continue;
            ir_axes have = 0;
            for (int q = 0; q < cnt; q++)
                have |= 1u << s.axes[j][q];
            if (have == set) {
                memcpy(out, s.axes[j], (size_t)cnt);
                return cnt;
            }
        }
    }
    return cnt;
}

/* Fills lay->req and lay->produced from lay->choice; false if a dim would
 * not divide or the layout is not computable. */
static bool layout_fill(const prop *p, int k, const ir_sharding *hints, int nhints, layout *lay)
{
    const opinfo *oi = &p->ops[k];
    const ir_op *op = oi->op;
    const ir_mesh *mesh = &p->m->mesh;
    int8_t laxes[MAX_LABELS][IR_MAX_AXES];
    int lnaxes[MAX_LABELS];
    ir_axes carry = 0;
    for (int l = 0; l < oi->nlabels; l++) {
        ir_axes set = 0;
        for (int a = 0; a < mesh->naxes; a++)
            if (lay->choice[a] == l)
                set |= 1u << a;
        lnaxes[l] = label_order(p, k, hints, nhints, l, set, laxes[l]);
        int64_t parts = ir_mesh_axes_size(mesh, set);
        if (parts < 1 || p->m->dims[oi->label[l]].size % parts != 0 || (set && !oi->in_operand[l]))
            return false;
        if (oi->contracted[l]) {
            /* An elementwise op drops no dim; an argmax needs its dim whole. */
            if ((op->kind == IR_OP_ELEMENTWISE ||
                 (op->kind == IR_OP_EINSUM && op->u.einsum.reduce == IR_RED_ARGMAX)) && set)
                return false;
        }
    }
    for (int a = 0; a < mesh->naxes; a++)
        if (lay->choice[a] >= CH_CARRY)
            carry |= 1u << a;
    for (int i = 0; i < op->noperands; i++) {
        ir_sharding *r = &lay->req[i];
        memset(r, 0, sizeof *r);
        for (int j = 0; j < op->operands[i]->type.rank; j++) {
            int l = pass_prop_label_index(oi, oi->labels[i][j]);
            r->naxes[j] = (uint8_t)lnaxes[l];
            memcpy(r->axes[j], laxes[l], (size_t)lnaxes[l]);
        }
        if (op->kind == IR_OP_ELEMENTWISE)
            r->unreduced = carry;
        else
            for (int a = 0; a < mesh->naxes; a++)
                if (lay->choice[a] == CH_CARRY + i)
                    r->unreduced |= 1u << a;
    }
    /* The result by seed 001's rule, as the verifier computes it
     * (ir_einsum_sharding); carried partials are sums (max and min are
     * never carried). */
    int rl[IR_MAX_RANK];
    for (int j = 0; j < op->result->type.rank; j++)
        if ((rl[j] = pass_prop_label_index(oi, oi->rlabels[j])) < 0)
            return false;
    ir_einsum_sharding(oi->nlabels, lnaxes, (const int8_t(*)[IR_MAX_AXES])laxes, oi->in_operand,
                       op->result->type.rank, rl, carry,
                       op->kind == IR_OP_EINSUM ? op->u.einsum.reduce : IR_RED_SUM, &lay->produced);
    return true;
}

bool pass_prop_layout_fill(const prop *p, int k, layout *lay)
{
    return layout_fill(p, k, NULL, 0, lay);
}


/* The candidate choices for mesh axis a of op k (see the essay). */
/* True if `v` currently holds partial sums (not maxima or minima) over axis `a`. */
static bool carries_sums(const prop *p, const ir_value *v, int a)
{
    ir_sharding sh = pass_prop_current(p, v);
    return (sh.unreduced & (1u << a)) && sh.red == IR_RED_SUM;
}

static int axis_options(const prop *p, int k, const ir_sharding *hints, int nhints, int a, int *opts)
{
    const opinfo *oi = &p->ops[k];
    const ir_op *op = oi->op;
    bool allowed[MAX_LABELS] = {false};
    int n = 0;
    opts[n++] = CH_NONE;
    for (int i = 0; i < op->noperands; i++) {
        ir_sharding s = pass_prop_current(p, op->operands[i]);
        for (int j = 0; j < op->operands[i]->type.rank; j++)
            for (int q = 0; q < s.naxes[j]; q++)
                if (s.axes[j][q] == a)
                    allowed[pass_prop_label_index(oi, oi->labels[i][j])] = true;
    }
    for (int h = 0; h < nhints; h++)
        for (int j = 0; j < op->result->type.rank; j++)
            for (int q = 0; q < hints[h].naxes[j]; q++)
                if (hints[h].axes[j][q] == a) {
                    int l = pass_prop_label_index(oi, oi->rlabels[j]);
                    if (l >= 0)
                        allowed[l] = true;
                }
    if (oi->decided && oi->lay.choice[a] >= 0 && oi->lay.choice[a] < CH_CARRY)
        allowed[oi->lay.choice[a]] = true;
    if (p->wide && (p->used_axes & (1u << a)))
        for (int l = 0; l < oi->nlabels; l++)
            allowed[l] = allowed[l] || oi->in_operand[l];
    for (int l = 0; l < oi->nlabels && n < MAX_OPTIONS - IR_MAX_OPERANDS; l++)
        if (allowed[l])
            opts[n++] = l;
    /* Carrying partial sums: a (sum) einsum is linear in each operand, so
     * one operand may hold {U_a} if no other uses a; an elementwise op may
     * when it is linear and all its operands hold {U_a}.  Partial maxima
     * or minima commute with nothing here: they are always reduced. */
    if (op->kind == IR_OP_EINSUM && op->u.einsum.reduce == IR_RED_SUM) {
        for (int i = 0; i < op->noperands; i++)
            if (carries_sums(p, op->operands[i], a))
                opts[n++] = CH_CARRY + i;
    } else if (oi->linear) {
        bool all = op->noperands > 0;
        for (int i = 0; i < op->noperands; i++)
            all = all && carries_sums(p, op->operands[i], a);
        if (all)
            opts[n++] = CH_CARRY;
    }
    return n;
}

/* Search state for pass_prop_choose(): the best layout found so far. */
typedef struct chooser {
    int opts[IR_MAX_AXES][MAX_OPTIONS]; /* options per axis */
    int nopts[IR_MAX_AXES];             /* their counts */
    ir_sharding hints[MAX_HINTS];       /* result hints */
    int nhints;                         /* their count */
    layout cur;                         /* layout being built */
    layout best;                        /* best complete layout */
    const int *exclude;                 /* choices to skip (runner-up search), or NULL */
    cost best_cost;                     /* its cost */
    int64_t best_split;                 /* devices it divides the op's work over */
    int tried;                          /* layouts evaluated */
} chooser;

/* Devices the op's work is divided over under `lay` (axes on labels). */
static int64_t layout_split(const prop *p, const layout *lay)
{
    int64_t n = 1;
    for (int a = 0; a < p->m->mesh.naxes; a++)
        if (lay->choice[a] >= 0 && lay->choice[a] < CH_CARRY)
            n *= p->m->mesh.axes[a].size;
    return n;
}

/* Layout order: fewer bytes, then fewer ops, then more of the op's work
 * split over the mesh (fewer FLOPs per device). */
static bool layout_better(cost c1, int64_t s1, cost c2, int64_t s2)
{
    if (pass_prop_cost_less(c1, c2))
        return true;
    if (pass_prop_cost_less(c2, c1) || isinf(c1.bytes))
        return false;
    return s1 > s2;
}

static void enumerate(prop *p, int k, chooser *ch, int a)
{
    /* a >= IR_MAX_AXES cannot happen (naxes <= IR_MAX_AXES); the bound keeps
     * choice[a] visibly in range. */
    if (a >= p->m->mesh.naxes || a >= IR_MAX_AXES) {
        if (!layout_fill(p, k, ch->hints, ch->nhints, &ch->cur))
            return;
        if (ch->exclude && memcmp(ch->exclude, ch->cur.choice, sizeof ch->cur.choice) == 0)
            return;
        ch->tried++;
        cost c = pass_prop_layout_cost(p, k, &ch->cur);
        int64_t split = layout_split(p, &ch->cur);
        if (layout_better(c, split, ch->best_cost, ch->best_split)) {
            ch->best_cost = c;
            ch->best_split = split;
            ch->best = ch->cur;
        }
        return;
    }
    for (int i = 0; i < ch->nopts[a]; i++) {
        ch->cur.choice[a] = ch->opts[a][i];
        enumerate(p, k, ch, a + 1);
    }
}

/* Re-picks op k's layout; returns true if it changed.  The current layout is
 * kept unless another is strictly cheaper.  Returns -1 when no layout is
 * feasible. */
int pass_prop_choose(prop *p, int k)
{
    opinfo *oi = &p->ops[k];
    chooser *ch = calloc(1, sizeof *ch);
    if (!ch)
        return -1;
    ch->nhints = result_hints(p, k, ch->hints);
    for (int a = 0; a < p->m->mesh.naxes; a++)
        ch->nopts[a] = axis_options(p, k, ch->hints, ch->nhints, a, ch->opts[a]);
    ch->best_cost = COST_INF;
    if (oi->decided) {
        /* Re-price the current layout first so that ties keep it. */
        ch->cur = oi->lay;
        if (layout_fill(p, k, ch->hints, ch->nhints, &ch->cur)) {
            ch->best = ch->cur;
            ch->best_cost = pass_prop_layout_cost(p, k, &ch->cur);
            ch->best_split = layout_split(p, &ch->cur);
        }
    }
    enumerate(p, k, ch, 0);
    int changed;
    if (isinf(ch->best_cost.bytes)) {
        changed = -1;
    } else {
        changed = !oi->decided || memcmp(ch->best.choice, oi->lay.choice, sizeof oi->lay.choice) != 0 ||
                  !ir_sharding_equal(&ch->best.produced, &oi->lay.produced, oi->op->result->type.rank);
        oi->lay = ch->best;
        oi->decided = true;
    }
    free(ch);
    return changed;
}


/* The terms of the objective that the layouts of ops k and j change (j < 0:
 * op k alone): their compute and the costs of every value they read or
 * write.  The objective is a sum over ops and values, so comparing this
 * between two layouts of the pair compares the whole program's objective,
 * in time independent of the program's size. */
static cost pair_cost(prop *p, int k, int j)
{
    p->evals++;
    cost t = COST_ZERO;
    t.time = pass_prop_compute_time(p, k, &p->ops[k].lay) +
             (j >= 0 ? pass_prop_compute_time(p, j, &p->ops[j].lay) : 0.0);
    int ids[2 * (IR_MAX_OPERANDS + 1)], n = 0;
    for (int q = 0; q < (j >= 0 ? 2 : 1); q++) {
        const ir_op *op = p->ops[q ? j : k].op;
        for (int i = 0; i <= op->noperands; i++) {
            int id = (i < op->noperands ? op->operands[i] : op->result)->id;
            bool seen = id < 0 || id >= p->nvalues;
            for (int s = 0; s < n && !seen; s++)
                seen = ids[s] == id;
            if (!seen)
                ids[n++] = id;
        }
    }
    for (int s = 0; s < n; s++)
        t = pass_prop_cost_add(t, pass_prop_value_cost(p, ids[s]));
    return t;
}

/* Every feasible layout of op k given the current state of the others
 * (the candidates of pass_prop_choose), at most `max`, into out; `ch` is
 * scratch space. */
static int collect_layouts(prop *p, int k, chooser *ch, layout *out, int max)
{
    /* Unused axis slots stay 0, as in calloc'd layouts, so that layouts
     * compare bytewise. */
    memset(&ch->cur, 0, sizeof ch->cur);
    ch->nhints = result_hints(p, k, ch->hints);
    for (int a = 0; a < p->m->mesh.naxes; a++)
        ch->nopts[a] = axis_options(p, k, ch->hints, ch->nhints, a, ch->opts[a]);
    int n = 0, idx[IR_MAX_AXES] = {0};
    int naxes = p->m->mesh.naxes;
    for (;;) {
        for (int a = 0; a < naxes; a++)
            ch->cur.choice[a] = ch->opts[a][idx[a]];
        if (layout_fill(p, k, ch->hints, ch->nhints, &ch->cur) && n < max)
            out[n++] = ch->cur;
        int a = 0;
        while (a < naxes && ++idx[a] == ch->nopts[a])
            idx[a++] = 0;
        if (a == naxes)
            break;
    }
    return n;
}

int pass_prop_candidates(prop *p, int k, layout *out, int max)
{
    chooser *ch = malloc(sizeof *ch);
    if (!ch)
        return -1;
    int n = collect_layouts(p, k, ch, out, max);
    free(ch);
    return n;
}

#define MAX_JOINT_LAYOUTS 128 /* candidates per op tried in a joint move */
#define MAX_STAR 8            /* consumers moved with their producer, at most */

/* The terms of the objective that the layouts of ops[0..n-1] change:
 * their compute and the costs of every distinct value they read or write
 * (the generalisation of pair_cost). */
static cost group_cost(prop *p, const int *ops, int n)
{
    p->evals++;
    cost t = COST_ZERO;
    int ids[(MAX_STAR + 1) * (IR_MAX_OPERANDS + 1)], nid = 0;
    for (int q = 0; q < n; q++) {
        t.time += pass_prop_compute_time(p, ops[q], &p->ops[ops[q]].lay);
        const ir_op *op = p->ops[ops[q]].op;
        for (int i = 0; i <= op->noperands; i++) {
            int id = (i < op->noperands ? op->operands[i] : op->result)->id;
            bool seen = id < 0 || id >= p->nvalues;
            for (int s = 0; s < nid && !seen; s++)
                seen = ids[s] == id;
            if (!seen)
                ids[nid++] = id;
        }
    }
    for (int s = 0; s < nid; s++)
        t = pass_prop_cost_add(t, pass_prop_value_cost(p, ids[s]));
    return t;
}

/* Sets op j to its best layout for the objective given every other op
 * (its own terms, pair_cost(j, -1)); false if it has none. */
static bool best_response(prop *p, int j, chooser *ch, layout *scratch)
{
    int n = collect_layouts(p, j, ch, scratch, MAX_JOINT_LAYOUTS);
    cost best = COST_INF;
    int arg = -1;
    for (int b = 0; b < n; b++) {
        p->ops[j].lay = scratch[b];
        cost c = pair_cost(p, j, -1);
        if (pass_prop_cost_less(c, best)) {
            best = c;
            arg = b;
        }
    }
    if (arg >= 0)
        p->ops[j].lay = scratch[arg];
    return arg >= 0;
}

int pass_prop_improve_joint(prop *p)
{
    int improved = 0;
    layout *lk = malloc(MAX_JOINT_LAYOUTS * sizeof *lk), *lj = malloc(MAX_JOINT_LAYOUTS * sizeof *lj);
    chooser *ch = malloc(sizeof *ch);
    if (!lk || !lj || !ch) {
        free(lk);
        free(lj);
        free(ch);
        return 0;
    }
    for (int k = 0; k < p->nops && !(p->eval_limit && p->evals >= p->eval_limit); k++) {
        /* The star of op k: k and the compute ops that read its result. */
        int grp[MAX_STAR + 1], n = 1;
        grp[0] = k;
        const ir_value *r = p->ops[k].op->result;
        bool ok = p->ops[k].decided && r->id >= 0 && r->id < p->nvalues;
        for (int u = ok ? p->use_start[r->id] : 0; ok && u < p->use_start[r->id + 1]; u++) {
            int j = p->uses[u].op, q = 1;
            while (q < n && grp[q] != j)
                q++;
            if (q < n || j == k)
                continue;
            ok = n <= MAX_STAR && p->ops[j].decided;
            if (ok)
                grp[n++] = j;
        }
        if (!ok || n < 2)
            continue;
        layout keep[MAX_STAR + 1], best_lay[MAX_STAR + 1];
        for (int q = 0; q < n; q++)
            keep[q] = best_lay[q] = p->ops[grp[q]].lay;
        cost best = group_cost(p, grp, n);
        int nk = collect_layouts(p, k, ch, lk, MAX_JOINT_LAYOUTS);
        for (int a = 0; a < nk; a++) {
            /* The readers are re-picked in program order, each given k's
             * layout and the readers before it; the ones not re-picked yet
             * are undecided, so they price nothing (as in the forward
             * sweep) and do not make k's candidate look infeasible. */
            for (int q = 1; q < n; q++) {
                p->ops[grp[q]].lay = keep[q];
                p->ops[grp[q]].decided = false;
            }
            p->ops[k].lay = lk[a];
            bool feasible = true;
            for (int q = 1; q < n && feasible; q++)
                feasible = p->ops[grp[q]].decided = best_response(p, grp[q], ch, lj);
            for (int q = 1; q < n; q++)
                p->ops[grp[q]].decided = true;
            if (!feasible)
                continue;
            cost c = group_cost(p, grp, n);
            if (pass_prop_cost_less(c, best)) {
                best = c;
                for (int q = 0; q < n; q++)
                    best_lay[q] = p->ops[grp[q]].lay;
            }
        }
        bool changed = false;
        for (int q = 0; q < n; q++) {
            p->ops[grp[q]].lay = best_lay[q];
            changed |= memcmp(best_lay[q].choice, keep[q].choice, sizeof keep[q].choice) != 0;
        }
        improved += changed;
    }
    free(lk);
    free(lj);
    free(ch);
    return improved;
}

void pass_prop_runner_up(prop *p, int k, const cost *total)
{
    opinfo *oi = &p->ops[k];
    oi->has_alt = false;
    if (!oi->decided)
        return;
    chooser *ch = calloc(1, sizeof *ch);
    if (!ch)
        return;
    ch->nhints = result_hints(p, k, ch->hints);
    for (int a = 0; a < p->m->mesh.naxes; a++)
        ch->nopts[a] = axis_options(p, k, ch->hints, ch->nhints, a, ch->opts[a]);
    ch->best_cost = COST_INF;
    ch->exclude = oi->lay.choice;
    enumerate(p, k, ch, 0);
    if (!isinf(ch->best_cost.bytes)) {
        /* The program's objective with the runner-up: the total, minus op
         * k's terms with its layout, plus its terms with the runner-up. */
        layout chosen = oi->lay;
        cost mine = pair_cost(p, k, -1);
        oi->lay = ch->best;
        cost other = pair_cost(p, k, -1);
        oi->lay = chosen;
        oi->lay_total = *total;
        oi->alt_total = *total;
        oi->alt_total.time += other.time - mine.time;
        oi->alt_total.bytes += other.bytes - mine.bytes;
        oi->alt_total.nops += other.nops - mine.nops;
        oi->alt = ch->best;
        oi->has_alt = !isinf(other.bytes) && !isinf(total->bytes);
    }
    free(ch);
}

void pass_prop_layout_str(const prop *p, int k, const layout *lay, char *buf, size_t size)
{
    const opinfo *oi = &p->ops[k];
    size_t n = 0;
    buf[0] = 0;
    for (int a = 0; a < p->m->mesh.naxes && n < size; a++) {
        int c = lay->choice[a];
        int w = snprintf(buf + n, size - n, "%s%c->%s", a ? " " : "", p->m->mesh.axes[a].name,
                         c == CH_NONE ? "replicated" : c >= CH_CARRY ? "carry{U}" : p->m->dims[oi->label[c]].name);
        if (w < 0)
            return;
        n += (size_t)w;
    }
}
