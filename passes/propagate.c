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
 * The objective is the total number of bytes moved per device: the sum over
 * every def-use edge of reshard(producer's sharding -> consumer's req), plus
 * the reshards that make constrained values and outputs meet their
 * constraints (a bare output only needs its partial sums reduced).  Ties are
 * broken by the number of ops.  We minimise it by coordinate descent: a
 * forward sweep picks each op's cheapest layout given its producers (with
 * "must be reduced" assumed for consumers not yet seen), then backward and
 * forward sweeps re-pick each op's layout given both its producers and its
 * consumers' current requirements, until nothing changes.  Every change
 * strictly lowers the objective, so the sweeps reach a fixed point.  The
 * backward sweeps are what let a constraint on an output shape the choices
 * before it (e.g. a ReduceScatter instead of AllReduce then Slice).
 *
 * Which layouts are tried.  An axis may only go to a label on which some
 * operand, the result's constraint, a consumer's requirement or an output
 * constraint already places it (or to nothing, or to carrying).  Like GSPMD,
 * propagation spreads the shardings the user wrote and never invents new
 * ones: re-sharding a TP model's activations over the batch might move fewer
 * bytes in one step, but it is not what the user asked for, and seed 000's
 * strategies (DP, FSDP, TP, FSDP+TP) are exactly the fixed points of this
 * rule.  Within one label, several axes keep the order a source gives them,
 * else mesh order.  Layouts whose dims do not divide are never chosen.
 *
 * Materialisation walks the ops in program order: each operand not already
 * in its required sharding gets the planner's ops inserted just before the
 * op (reusing an identical earlier reshard of the same value); a constrained
 * result that comes out differently is produced into a fresh value and
 * resharded into the constrained value right after the op; outputs are
 * resharded at the end.  Each inserted op records why (ir_op_set_reason).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pass.h"
#include "reshard.h"

#define MAX_LABELS (IR_MAX_OPERANDS * IR_MAX_RANK + IR_MAX_RANK)
#define CH_NONE (-1)     /* the op is replicated over the axis */
#define CH_CARRY 1000    /* CH_CARRY + k: unreduced sums carried from operand k */
#define MAX_SWEEPS 12    /* backward+forward rounds; a fixed point comes far sooner */
#define MAX_HINTS 32     /* result shardings consulted for candidate labels */
#define MAX_OPTIONS 24   /* candidate choices for one mesh axis */

/* A cost in the pass's objective: bytes per device, then op count. */
typedef struct cost {
    double bytes; /* bytes moved per device (seed 001 formulas) */
    int nops;     /* number of reshard ops */
} cost;

/* One use of a value: operand `operand` of op info `op`. */
typedef struct use {
    int op;      /* index into prop.ops */
    int operand; /* operand position */
} use;

/* A layout and what it implies for one op. */
typedef struct layout {
    int choice[IR_MAX_AXES];              /* per mesh axis: CH_NONE, label index or CH_CARRY + k */
    ir_sharding req[IR_MAX_OPERANDS];     /* required sharding of each operand */
    ir_sharding produced;                 /* sharding of the result */
} layout;

/* Per-op state of the propagation. */
typedef struct opinfo {
    ir_op *op;                            /* the Einsum or Elementwise op */
    const int (*labels)[IR_MAX_RANK];     /* operand labels (op's union arm) */
    const int *rlabels;                   /* result labels */
    int nlabels;                          /* distinct labels of the op */
    int label[MAX_LABELS];                /* their dim ids */
    bool contracted[MAX_LABELS];          /* label not in the result (summed) */
    bool in_operand[MAX_LABELS];          /* label indexes some operand (else nothing can shard it) */
    bool linear;                          /* elementwise and linear in its operands */
    bool decided;                         /* `lay` is valid */
    layout lay;                           /* the chosen layout */
} opinfo;

/* One memoised reshard cost. */
typedef struct cache_ent {
    bool used;     /* slot occupied */
    int vid;       /* value id */
    uint32_t from; /* pass_reshard_key of the source sharding */
    uint32_t to;   /* and of the target */
    cost c;        /* the planner's answer */
} cache_ent;

/* A reshard already materialised: `src` brought to `sh` is `dst`. */
typedef struct made {
    ir_value *src;  /* the resharded value */
    ir_sharding sh; /* the sharding reached */
    ir_value *dst;  /* the value holding it */
} made;

/* The pass's context (no global state). */
typedef struct prop {
    pass_ctx *ctx;       /* options and diagnostics */
    ir_module *m;        /* the module being transformed */
    int nops;            /* compute ops */
    opinfo *ops;         /* in program order */
    int nvalues;         /* values before the pass (ids below index def) */
    int *def;            /* by value id: index of defining op info, or -1 */
    int *use_start;      /* by value id: first entry in `uses` (CSR) */
    use *uses;           /* uses grouped by value */
    cache_ent *cache;    /* reshard cost memo (open addressing) */
    size_t cache_cap;    /* power of two */
    size_t cache_n;      /* occupied slots */
    made *mades;         /* reshards emitted so far */
    int nmade, made_cap; /* count and capacity */
} prop;

static const cost COST_ZERO = {0.0, 0};
static const cost COST_INF = {INFINITY, 0};

static cost cost_add(cost a, cost b)
{
    cost c = {a.bytes + b.bytes, a.nops + b.nops};
    return c;
}

/* Strictly better: fewer bytes (beyond rounding), or as many and fewer ops. */
static bool cost_less(cost a, cost b)
{
    if (isinf(b.bytes))
        return !isinf(a.bytes);
    if (isinf(a.bytes))
        return false;
    double eps = 1e-9 * fmax(1.0, fmax(a.bytes, b.bytes));
    if (a.bytes < b.bytes - eps)
        return true;
    return a.bytes <= b.bytes + eps && a.nops < b.nops;
}

/* `s` without unreduced axes: what a consumer that cannot carry partial
 * sums, or a bare output, needs (resolved by AllReduce). */
static ir_sharding reduced(ir_sharding s)
{
    s.unreduced = 0;
    return s;
}

/* Whether the expression below node n is operand-free (0), a linear
 * combination of operands with constant coefficients (1), or neither (2).
 * Only the middle class may consume partial sums: sum_k f(x_k) = f(sum_k x_k)
 * holds for linear f only (seed 001, "unreduced" notation). */
static int ew_class(const ir_ew_node *nodes, int n, int depth)
{
    if (depth > 10000)
        return 2;
    const ir_ew_node *e = &nodes[n];
    int a, b;
    switch (e->kind) {
    case IR_EW_OPERAND: return 1;
    case IR_EW_CONST: return 0;
    case IR_EW_ADD:
    case IR_EW_SUB:
        a = ew_class(nodes, e->a, depth + 1);
        b = ew_class(nodes, e->b, depth + 1);
        return a == b ? a : 2;
    case IR_EW_MUL:
        a = ew_class(nodes, e->a, depth + 1);
        b = ew_class(nodes, e->b, depth + 1);
        if (a == 0 || b == 0)
            return a > b ? a : b;
        return 2;
    case IR_EW_CALL:
        a = ew_class(nodes, e->a, depth + 1);
        if (a == 0)
            return 0;
        return e->fn == IR_FN_NEG && a == 1 ? 1 : 2;
    }
    return 2;
}

/* ---- reshard costs ---- */

/* Memoised min-cost reshard of value v from `from` to `to`. */
static cost reshard_cost(prop *p, const ir_value *v, const ir_sharding *from, const ir_sharding *to)
{
    int rank = v->type.rank;
    if (ir_sharding_equal(from, to, rank))
        return COST_ZERO;
    int naxes = p->m->mesh.naxes;
    uint32_t kf = pass_reshard_key(from, rank, naxes), kt = pass_reshard_key(to, rank, naxes);
    if (p->cache_n * 2 >= p->cache_cap) {
        size_t ncap = p->cache_cap ? 2 * p->cache_cap : 1024;
        cache_ent *nc = calloc(ncap, sizeof *nc);
        if (nc) {
            for (size_t i = 0; i < p->cache_cap; i++) {
                if (!p->cache[i].used)
                    continue;
                const cache_ent *e = &p->cache[i];
                size_t h = ((size_t)e->vid * 2654435761u ^ e->from * 40503u ^ e->to * 2246822519u) & (ncap - 1);
                while (nc[h].used)
                    h = (h + 1) & (ncap - 1);
                nc[h] = *e;
            }
            free(p->cache);
            p->cache = nc;
            p->cache_cap = ncap;
        }
    }
    size_t h = 0;
    if (p->cache_cap) {
        h = ((size_t)v->id * 2654435761u ^ kf * 40503u ^ kt * 2246822519u) & (p->cache_cap - 1);
        while (p->cache[h].used) {
            const cache_ent *e = &p->cache[h];
            if (e->vid == v->id && e->from == kf && e->to == kt)
                return e->c;
            h = (h + 1) & (p->cache_cap - 1);
        }
    }
    ir_type t = v->type;
    t.sh = *from;
    pass_reshard_plan plan;
    cost c = COST_INF;
    if (pass_reshard_find(p->m, &t, to, &plan)) {
        c.bytes = plan.bytes;
        c.nops = plan.nsteps;
    }
    if (p->cache_cap && p->cache_n * 2 < p->cache_cap) {
        cache_ent e = {true, v->id, kf, kt, c};
        p->cache[h] = e;
        p->cache_n++;
    }
    return c;
}

/* The sharding value v has for its consumers under the current decisions:
 * its constraint if it has one (it is resharded into it right after its
 * op), the layout's result if its op is decided, else its type's. */
static ir_sharding current(const prop *p, const ir_value *v)
{
    if (v->kind == IR_VAL_OP && v->has_constraint)
        return v->constraint;
    int k = v->id >= 0 && v->id < p->nvalues ? p->def[v->id] : -1;
    if (k >= 0 && p->ops[k].decided)
        return p->ops[k].lay.produced;
    return v->type.sh;
}

/* Adds cost(v: sh -> want) to *c unless `want` is among wants[0..*n-1]
 * (one reshard per distinct target is emitted and shared), and records it. */
static void add_target(prop *p, const ir_value *v, const ir_sharding *sh, const ir_sharding *want,
                       ir_sharding *wants, int *n, int cap, cost *c)
{
    for (int i = 0; i < *n; i++)
        if (ir_sharding_equal(&wants[i], want, v->type.rank))
            return;
    if (*n < cap)
        wants[(*n)++] = *want;
    *c = cost_add(*c, reshard_cost(p, v, sh, want));
}

/* Cost of bringing result sharding `sh` of op k to everything that uses it:
 * one reshard per distinct sharding its consumers and outputs need. */
static cost result_cost(prop *p, int k, const ir_sharding *sh)
{
    const ir_value *v = p->ops[k].op->result;
    if (v->has_constraint)
        return reshard_cost(p, v, sh, &v->constraint);
    cost c = COST_ZERO;
    ir_sharding wants[MAX_HINTS];
    int n = 0;
    for (int u = p->use_start[v->id]; u < p->use_start[v->id + 1]; u++) {
        const opinfo *c2 = &p->ops[p->uses[u].op];
        /* A consumer not decided yet (first sweep): a linear one is assumed
         * to carry the partial sums on (it pays for reducing its own
         * result), any other to need them reduced. */
        ir_sharding want = c2->decided ? c2->lay.req[p->uses[u].operand]
                           : (c2->op->kind == IR_OP_EINSUM || c2->linear) ? *sh : reduced(*sh);
        add_target(p, v, sh, &want, wants, &n, MAX_HINTS, &c);
    }
    for (int i = 0; i < p->m->noutputs; i++) {
        const ir_output *o = &p->m->outputs[i];
        if (o->value != v)
            continue;
        ir_sharding want = o->has_constraint ? o->constraint : reduced(*sh);
        add_target(p, v, sh, &want, wants, &n, MAX_HINTS, &c);
    }
    return c;
}

/* Whether some use of v other than by op k, or an output of v, already
 * needs v in sharding `want`: that reshard is emitted once and shared, so
 * op k needing it too costs nothing more. */
static bool needed_elsewhere(const prop *p, const ir_value *v, int k, const ir_sharding *want)
{
    int rank = v->type.rank;
    if (v->id < 0 || v->id >= p->nvalues)
        return false;
    for (int u = p->use_start[v->id]; u < p->use_start[v->id + 1]; u++) {
        const opinfo *c = &p->ops[p->uses[u].op];
        if (p->uses[u].op != k && c->decided && ir_sharding_equal(&c->lay.req[p->uses[u].operand], want, rank))
            return true;
    }
    for (int i = 0; i < p->m->noutputs; i++) {
        const ir_output *o = &p->m->outputs[i];
        if (o->value != v)
            continue;
        ir_sharding t = o->has_constraint ? o->constraint : reduced(current(p, v));
        if (ir_sharding_equal(&t, want, rank))
            return true;
    }
    return false;
}

/* ---- layouts ---- */

/* Label index of dim id `dim` in op info `oi`, or -1. */
static int label_index(const opinfo *oi, int dim)
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
            s = current(p, op->operands[src]);
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
    ir_axes carry = 0, contracted_axes = 0;
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
            if (op->kind == IR_OP_ELEMENTWISE && set)
                return false;
            contracted_axes |= set;
        }
    }
    for (int a = 0; a < mesh->naxes; a++)
        if (lay->choice[a] >= CH_CARRY)
            carry |= 1u << a;
    for (int i = 0; i < op->noperands; i++) {
        ir_sharding *r = &lay->req[i];
        memset(r, 0, sizeof *r);
        for (int j = 0; j < op->operands[i]->type.rank; j++) {
            int l = label_index(oi, oi->labels[i][j]);
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
    ir_sharding *s = &lay->produced;
    memset(s, 0, sizeof *s);
    for (int j = 0; j < op->result->type.rank; j++) {
        int l = label_index(oi, oi->rlabels[j]);
        if (l < 0)
            return false;
        s->naxes[j] = (uint8_t)lnaxes[l];
        memcpy(s->axes[j], laxes[l], (size_t)lnaxes[l]);
    }
    s->unreduced = carry | contracted_axes;
    return true;
}

/* Cost of layout `lay` (already filled) for op k: the reshards of its
 * operands not shared with other uses, plus those of its result. */
static cost layout_cost(prop *p, int k, const layout *lay)
{
    const ir_op *op = p->ops[k].op;
    cost c = COST_ZERO;
    for (int i = 0; i < op->noperands && !isinf(c.bytes); i++) {
        const ir_value *v = op->operands[i];
        bool shared = needed_elsewhere(p, v, k, &lay->req[i]);
        for (int j = 0; j < i && !shared; j++)
            shared = op->operands[j] == v && ir_sharding_equal(&lay->req[j], &lay->req[i], v->type.rank);
        if (shared)
            continue;
        ir_sharding have = current(p, v);
        c = cost_add(c, reshard_cost(p, v, &have, &lay->req[i]));
    }
    if (!isinf(c.bytes))
        c = cost_add(c, result_cost(p, k, &lay->produced));
    return c;
}

/* The candidate choices for mesh axis a of op k (see the essay). */
static int axis_options(const prop *p, int k, const ir_sharding *hints, int nhints, int a, int *opts)
{
    const opinfo *oi = &p->ops[k];
    const ir_op *op = oi->op;
    bool allowed[MAX_LABELS] = {false};
    int n = 0;
    opts[n++] = CH_NONE;
    for (int i = 0; i < op->noperands; i++) {
        ir_sharding s = current(p, op->operands[i]);
        for (int j = 0; j < op->operands[i]->type.rank; j++)
            for (int q = 0; q < s.naxes[j]; q++)
                if (s.axes[j][q] == a)
                    allowed[label_index(oi, oi->labels[i][j])] = true;
    }
    for (int h = 0; h < nhints; h++)
        for (int j = 0; j < op->result->type.rank; j++)
            for (int q = 0; q < hints[h].naxes[j]; q++)
                if (hints[h].axes[j][q] == a) {
                    int l = label_index(oi, oi->rlabels[j]);
                    if (l >= 0)
                        allowed[l] = true;
                }
    if (oi->decided && oi->lay.choice[a] >= 0 && oi->lay.choice[a] < CH_CARRY)
        allowed[oi->lay.choice[a]] = true;
    for (int l = 0; l < oi->nlabels && n < MAX_OPTIONS - IR_MAX_OPERANDS; l++)
        if (allowed[l])
            opts[n++] = l;
    /* Carrying partial sums: an einsum is linear in each operand, so one
     * operand may hold {U_a} if no other uses a; an elementwise op may when
     * it is linear and all its operands hold {U_a}. */
    if (op->kind == IR_OP_EINSUM) {
        for (int i = 0; i < op->noperands; i++)
            if (current(p, op->operands[i]).unreduced & (1u << a))
                opts[n++] = CH_CARRY + i;
    } else if (oi->linear) {
        bool all = op->noperands > 0;
        for (int i = 0; i < op->noperands; i++)
            all = all && (current(p, op->operands[i]).unreduced & (1u << a));
        if (all)
            opts[n++] = CH_CARRY;
    }
    return n;
}

/* Search state for choose(): the best layout found so far. */
typedef struct chooser {
    int opts[IR_MAX_AXES][MAX_OPTIONS]; /* options per axis */
    int nopts[IR_MAX_AXES];             /* their counts */
    ir_sharding hints[MAX_HINTS];       /* result hints */
    int nhints;                         /* their count */
    layout cur;                         /* layout being built */
    layout best;                        /* best complete layout */
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
    if (cost_less(c1, c2))
        return true;
    if (cost_less(c2, c1) || isinf(c1.bytes))
        return false;
    return s1 > s2;
}

static void enumerate(prop *p, int k, chooser *ch, int a)
{
    if (a == p->m->mesh.naxes) {
        if (!layout_fill(p, k, ch->hints, ch->nhints, &ch->cur))
            return;
        ch->tried++;
        cost c = layout_cost(p, k, &ch->cur);
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
static int choose(prop *p, int k)
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
            ch->best_cost = layout_cost(p, k, &ch->cur);
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

/* ---- reasons ---- */

/* Appends the expression below node n with operand tensor names. */
static void expr_str(const ir_op *op, int n, char *buf, size_t size, int depth)
{
    const ir_ew_node *e = &op->u.ew.nodes[n];
    size_t len = strlen(buf);
    if (len + 1 >= size || depth > 64)
        return;
    char *w = buf + len;
    size_t room = size - len;
    switch (e->kind) {
    case IR_EW_OPERAND:
        snprintf(w, room, "%s", op->operands[e->operand]->tensor);
        break;
    case IR_EW_CONST:
        snprintf(w, room, "%g", e->value);
        break;
    case IR_EW_CALL:
        snprintf(w, room, "%s(", ir_func_name(e->fn));
        expr_str(op, e->a, buf, size, depth + 1);
        len = strlen(buf);
        snprintf(buf + len, size - len, ")");
        break;
    default: {
        const char *sym = e->kind == IR_EW_ADD ? " + " : e->kind == IR_EW_SUB ? " - " : " * ";
        snprintf(w, room, "(");
        expr_str(op, e->a, buf, size, depth + 1);
        len = strlen(buf);
        snprintf(buf + len, size - len, "%s", sym);
        expr_str(op, e->b, buf, size, depth + 1);
        len = strlen(buf);
        snprintf(buf + len, size - len, ")");
        break;
    }
    }
}

/* "Tmp = In * Win", "Act = gelu(Tmp)": the op as the user wrote it. */
static void stmt_str(const ir_op *op, char *buf, size_t size)
{
    if (op->kind != IR_OP_EINSUM && op->kind != IR_OP_ELEMENTWISE) {
        snprintf(buf, size, "%s %s", ir_op_name(op->kind), op->result->tensor);
        return;
    }
    snprintf(buf, size, "%s = ", op->result->tensor);
    size_t len = strlen(buf);
    if (op->kind == IR_OP_ELEMENTWISE) {
        expr_str(op, op->u.ew.root, buf, size, 0);
        return;
    }
    if (op->u.einsum.scale != 1.0) {
        snprintf(buf + len, size - len, "%g * ", op->u.einsum.scale);
        len = strlen(buf);
    }
    for (int i = 0; i < op->noperands; i++) {
        snprintf(buf + len, size - len, "%s%s", i ? " * " : "", op->operands[i]->tensor);
        len = strlen(buf);
    }
}

/* "X", "XY" for the axes of a step. */
static const char *step_axes(const ir_module *m, const pass_reshard_step *st, char *buf, size_t size)
{
    return ir_axes_str(&m->mesh, st->axes, st->naxes, buf, size);
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
        ir_sharding s = current(p, v);
        for (int j = 0; j < v->type.rank; j++)
            if (oi->labels[i][j] == oi->label[l])
                for (int q = 0; q < s.naxes[j]; q++)
                    for (int r = 0; r < st->naxes; r++)
                        if (s.axes[j][q] == st->axes[r])
                            return v->tensor;
    }
    return NULL;
}

/* Why operand i of op k cannot keep the partial sums over the axes of
 * `st` under the chosen layout. */
static const char *unreduced_cause(const prop *p, int k, int i, const pass_reshard_step *st)
{
    const opinfo *oi = &p->ops[k];
    const ir_op *op = oi->op;
    int where = oi->lay.choice[st->axes[0]];
    if (op->kind == IR_OP_ELEMENTWISE) {
        if (!oi->linear)
            return "the op is not linear in them";
        for (int j = 0; j < op->noperands; j++)
            if (!(current(p, op->operands[j]).unreduced & (1u << st->axes[0])))
                return "not all operands hold them, so the op cannot carry them";
    } else if (where >= CH_CARRY && where != CH_CARRY + i) {
        return "another operand's partial sums are carried over the axis";
    }
    if (where >= 0 && where < CH_CARRY)
        return "the axis shards a dim of the op here";
    return "reducing them here moves the fewest bytes";
}

/* Why step `st` is needed on operand i of op k (at the pre-step sharding
 * `from`); written into buf. */
static void operand_reason(const prop *p, int k, int i, const pass_reshard_step *st, char *buf, size_t size)
{
    const ir_module *m = p->m;
    const opinfo *oi = &p->ops[k];
    const ir_op *op = oi->op;
    char stmt[160], ax[IR_MAX_AXES + 1];
    stmt_str(op, stmt, sizeof stmt);
    step_axes(m, st, ax, sizeof ax);
    const char *a = op->operands[i]->tensor;
    int dim = st->dim >= 0 ? oi->labels[i][st->dim] : -1;
    int l = dim >= 0 ? label_index(oi, dim) : -1;
    const char *dn = dim >= 0 ? m->dims[dim].name : "";
    int where = oi->lay.choice[st->axes[0]];
    switch (st->kind) {
    case IR_OP_ALLGATHER: {
        size_t n;
        if (l >= 0 && oi->contracted[l] && !source_of(p, k, i, l, st))
            snprintf(buf, size, "for %s: contracting %s sharded on %s in %s only", stmt, dn, ax, a);
        else if (l >= 0 && oi->contracted[l])
            snprintf(buf, size, "for %s: contracting %s sharded on %s in both operands, but gathering moves "
                     "fewer bytes than reducing the partial sums", stmt, dn, ax);
        else
            snprintf(buf, size, "for %s: %s sharded on %s in %s", stmt, dn, ax, a);
        n = strlen(buf);
        if (where >= 0 && where < CH_CARRY && where != l) {
            const char *src = source_of(p, k, i, where, st);
            snprintf(buf + n, size - n, "; %s shards %s here%s%s%s, so gathering %s moves the fewest bytes", ax,
                     m->dims[oi->label[where]].name, src ? " (as in " : "", src ? src : "", src ? ")" : "", a);
        } else if (where == CH_NONE && !(l >= 0 && oi->contracted[l])) {
            snprintf(buf + n, size - n, "; the op runs replicated over %s", ax);
        }
        break;
    }
    case IR_OP_SLICE:
        if (l >= 0 && oi->contracted[l]) {
            const char *src = source_of(p, k, i, l, st);
            snprintf(buf, size, "for %s: contracting %s sharded on %s in %s only; slicing %s and reducing the "
                     "partial sums later moves fewer bytes than gathering (seed 001 Q9)", stmt, dn, ax,
                     src ? src : "the other operand", a);
        } else {
            snprintf(buf, size, "for %s: %s shards %s here; slicing %s needs no communication", stmt, ax, dn, a);
        }
        break;
    case IR_OP_ALLTOALL:
        snprintf(buf, size, "for %s: %s has %s on %s, the op needs it on %s", stmt, a, ax, dn,
                 m->dims[oi->labels[i][st->dim2]].name);
        break;
    case IR_OP_REDUCESCATTER:
    case IR_OP_ALLREDUCE: {
        const char *why = unreduced_cause(p, k, i, st);
        if (st->kind == IR_OP_REDUCESCATTER)
            snprintf(buf, size, "for %s: %s holds partial sums {U_%s} (%s); reduced straight into %s sharded "
                     "on %s (ReduceScatter, half an AllReduce)", stmt, a, ax, why, dn, ax);
        else
            snprintf(buf, size, "for %s: %s holds partial sums {U_%s} (%s)", stmt, a, ax, why);
        break;
    }
    default:
        snprintf(buf, size, "for %s", stmt);
    }
}

/* Why step `st` is needed to bring value v to `what` (a constraint or an
 * output); `op` is v's producer or NULL. */
static void target_reason(const prop *p, const ir_op *op, const ir_value *v, const ir_sharding *target,
                          const char *what, const pass_reshard_step *st, char *buf, size_t size)
{
    char stmt[160], ax[IR_MAX_AXES + 1], ty[160];
    ir_type t = v->type;
    t.sh = *target;
    ir_type_str(p->m, v->tensor, &t, ty, sizeof ty);
    step_axes(p->m, st, ax, sizeof ax);
    if (op)
        stmt_str(op, stmt, sizeof stmt);
    else
        snprintf(stmt, sizeof stmt, "%s", v->tensor);
    int n = snprintf(buf, size, "for %s: %s %s", stmt, what, ty);
    if (n < 0 || (size_t)n >= size)
        return;
    if (st->kind == IR_OP_REDUCESCATTER)
        snprintf(buf + n, size - (size_t)n, "; partial sums {U_%s} reduced straight into the sharded layout "
                 "(ReduceScatter, not AllReduce + Slice)", ax);
    else if (st->kind == IR_OP_ALLREDUCE)
        snprintf(buf + n, size - (size_t)n, "; partial sums {U_%s} must be reduced", ax);
}

/* ---- materialisation ---- */

/* Emits (or reuses) the reshard of `v` into `to` before `before`; `reasons`
 * is called per step.  Returns the value holding `to`, or NULL on failure. */
typedef struct emit_why {
    const prop *p;       /* the pass */
    int k;               /* op info index (operand reshard), or -1 */
    int operand;         /* operand index, or -1 */
    const char *what;    /* for target reshards: "constraint" or "output" */
    const ir_op *def;    /* for target reshards: the producer of v, or NULL */
} emit_why;

static ir_value *emit(prop *p, ir_value *v, const ir_sharding *to, ir_op *before, ir_value *last,
                      ir_op *for_op, int operand, const emit_why *ew)
{
    int rank = v->type.rank;
    if (!last)
        for (int i = 0; i < p->nmade; i++)
            if (p->mades[i].src == v && ir_sharding_equal(&p->mades[i].sh, to, rank))
                return p->mades[i].dst;
    pass_reshard_plan plan;
    if (!pass_reshard_find(p->m, &v->type, to, &plan))
        return NULL;
    char whys[PASS_RESHARD_MAX_STEPS][512];
    const char *wp[PASS_RESHARD_MAX_STEPS];
    for (int s = 0; s < plan.nsteps; s++) {
        if (ew->k >= 0)
            operand_reason(p, ew->k, ew->operand, &plan.steps[s], whys[s], sizeof whys[s]);
        else
            target_reason(p, ew->def, v, to, ew->what, &plan.steps[s], whys[s], sizeof whys[s]);
        wp[s] = whys[s];
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
            emit_why ew = {p, k, i, NULL, NULL};
            ir_value *nv = emit(p, v, &oi->lay.req[i], op, NULL, op, i, &ew);
            if (!nv) {
                ir_type t = v->type;
                t.sh = oi->lay.req[i];
                diag_error(d, op->loc, "cannot reshard %s into %s", ir_type_str(m, v->tensor, &v->type, b1, sizeof b1),
                           ir_type_str(m, v->tensor, &t, b2, sizeof b2));
                errors++;
                continue;
            }
            op->operands[i] = nv;
        }
        ir_value *r = op->result;
        if (r->has_constraint && !ir_sharding_equal(&oi->lay.produced, &r->constraint, r->type.rank)) {
            ir_type t = r->type;
            t.sh = oi->lay.produced;
            ir_value *w = ir_value_new(m, r->tensor, IR_VAL_OP, &t, r->loc);
            op->result = w;
            w->def = op;
            emit_why ew = {p, -1, -1, "constraint", op};
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
        ir_sharding want = o->has_constraint ? o->constraint : reduced(v->type.sh);
        if (ir_sharding_equal(&v->type.sh, &want, v->type.rank))
            continue;
        ir_op *origin = compute_origin(v);
        emit_why ew = {p, -1, -1, "output", origin};
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

/* Fills p->ops, p->def and the use lists; false on allocation failure. */
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
            oi->linear = op->u.ew.nodes && ew_class(op->u.ew.nodes, op->u.ew.root, 0) == 1;
        }
        for (int i = 0; i <= op->noperands; i++) {
            int rank = i < op->noperands ? op->operands[i]->type.rank : op->result->type.rank;
            const int *lab = i < op->noperands ? oi->labels[i] : oi->rlabels;
            for (int j = 0; j < rank; j++)
            {
                int l = label_index(oi, lab[j]);
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
        bool ok = op->result && op->noperands >= 1 && op->noperands <= IR_MAX_OPERANDS;
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
    stmt_str(oi->op, stmt, sizeof stmt);
    fprintf(p->ctx->log, "propagate: %s:", stmt);
    for (int a = 0; a < p->m->mesh.naxes; a++) {
        int c = oi->lay.choice[a];
        fprintf(p->ctx->log, " %c->%s", p->m->mesh.axes[a].name,
                c == CH_NONE ? "replicated" : c >= CH_CARRY ? "carry{U}" : p->m->dims[oi->label[c]].name);
    }
    cost c = layout_cost(p, k, &oi->lay);
    fprintf(p->ctx->log, ", %.2f MiB moved per device by its operands and result (%d ops)\n",
            c.bytes / (1024.0 * 1024.0), c.nops);
}

/* Reports that no layout of op k is feasible, naming the likely cause. */
static void report_infeasible(const prop *p, int k)
{
    const ir_op *op = p->ops[k].op;
    const ir_value *r = op->result;
    char stmt[160], ty[160];
    stmt_str(op, stmt, sizeof stmt);
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

int pass_propagate(pass_ctx *ctx, ir_module *m)
{
    prop p;
    memset(&p, 0, sizeof p);
    p.ctx = ctx;
    p.m = m;
    int errors = check_input(&p);
    if (errors)
        return errors;
    if (!setup(&p)) {
        diag_error(ctx->diag, DIAG_NOLOC, "propagate: out of memory");
        errors = 1;
        goto out;
    }
    /* Forward sweep, then backward/forward rounds to a fixed point. */
    for (int k = 0; k < p.nops; k++) {
        if (choose(&p, k) < 0) {
            report_infeasible(&p, k);
            errors++;
        }
    }
    if (errors)
        goto out;
    int round = 0;
    for (bool changed = true; changed && round < MAX_SWEEPS; round++) {
        changed = false;
        for (int k = p.nops - 1; k >= 0; k--)
            changed |= choose(&p, k) > 0;
        for (int k = 0; k < p.nops; k++)
            changed |= choose(&p, k) > 0;
    }
    if (ctx->log) {
        fprintf(ctx->log, "propagate: %d ops, fixed point after %d round(s)\n", p.nops, round);
        for (int k = 0; k < p.nops; k++)
            log_layout(&p, k);
    }
    errors = materialise(&p);
out:
    free(p.ops);
    free(p.def);
    free(p.use_start);
    free(p.uses);
    free(p.cache);
    free(p.mades);
    return errors;
}
