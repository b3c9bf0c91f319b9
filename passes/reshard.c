/*
 * reshard.c - min-cost resharding as a shortest path over sharding states.
 *
 * How it works.  The states are the shardings one value can have: each mesh
 * axis is either unused, one of the (ordered) axes of one dim, or an
 * unreduced axis.  The edges are the ops of ir.h, each moving the value
 * from one state to another:
 *
 *   AllGather_A(d)       drop the minor-most axes A of dim d
 *   Slice_A(d)           append unused axes A to dim d        (no traffic)
 *   AllToAll_A(d -> e)   move the minor-most axes A of d to the end of e
 *   ReduceScatter_A(d)   unreduced axes A become the minor-most axes of d
 *   AllReduce_A          drop unreduced axes A
 *
 * A is any non-empty group of axes (ordered where order matters), so a
 * two-axis gather is the single op AllGather_XY, as the seeds write it.
 * Edge weights are the per-device bytes of seed 001's table
 * (pass_reshard_bytes), the pair (bytes, ops) is minimised
 * lexicographically, and Dijkstra's algorithm finds the cheapest path.
 * With a hardware profile, each step of the path found is then timed by
 * the cost model (cost_op_estimate of the op it becomes), which is what the
 * layout search of propagate compares.  The route itself stays the seeds'
 * minimum-bytes one: on the TPU profiles seed 001's multi-axis formula
 * would otherwise turn every one-axis AllGather into Slice + a two-axis
 * AllGather, and on a calibrated host the per-run term of the fits would
 * replace a ReduceScatter into an inner dim by two collectives, each by a
 * margin inside the model's error; the seeds' single collective is kept.  No
 * edge creates unreduced axes, so a target unreduced over an axis the source
 * is not unreduced over is unreachable, which callers must treat as "this
 * layout is impossible".  States whose dims do not divide are never entered.
 *
 * Why a search and not "gather everything, then slice": the direct route is
 * usually much cheaper ([I_X, J] -> [I, J_X] is one AllToAll at 1/8 of an
 * AllGather's bytes for X = 2, {U_X} -> [I_X] is one ReduceScatter at half
 * an AllReduce), and multi-step routes such as AllToAll then AllGather fall
 * out of the search without special cases.
 *
 * The state space is small (at most (rank + 2)^axes placements times the
 * axis orders; a few hundred for the meshes of the seeds), so states live in
 * a flat array indexed through an open-addressing table of their keys.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "reshard.h"

/* Key encoding: per mesh axis 6 bits, (place | order << 4); place 0 = unused,
 * 1..rank = dim position + 1, PLACE_U = unreduced. */
#define PLACE_U 15u

/* One explored sharding state. */
typedef struct state {
    uint32_t key;         /* pass_reshard_key of sh */
    ir_sharding sh;       /* the sharding */
    double bytes;         /* best known cost from the source */
    int nops;             /* ops on that best path */
    int prev;             /* predecessor state index, -1 for the source */
    pass_reshard_step in; /* the step from prev to this state */
    bool done;            /* settled by Dijkstra */
} state;

/* The search: states, their key index, and a binary heap of open states. */
typedef struct search {
    const ir_module *m;   /* for mesh and dim sizes */
    const ir_type *t;     /* the value's type (dims, dtype) */
    state *st;            /* explored states */
    int nst, cap;         /* count and capacity of st */
    int *table;           /* key hash -> state index + 1 (0 = empty) */
    uint32_t tmask;       /* table size - 1 (power of two) */
    int *heap;            /* state indices ordered by (bytes, nops); may hold stale repeats */
    int nheap, hcap;      /* entries in heap and its capacity */
    bool oom;             /* an allocation failed */
} search;

double pass_reshard_bytes(ir_op_kind kind, double in_bytes, double out_bytes, int64_t group)
{
    if (group <= 1)
        return 0.0;
    double f = (double)(group - 1) / (double)group;
    switch (kind) {
    case IR_OP_ALLGATHER: return out_bytes * f;
    case IR_OP_REDUCESCATTER: return in_bytes * f;
    case IR_OP_ALLREDUCE: return 2.0 * in_bytes * f;
    case IR_OP_ALLTOALL: return in_bytes * f / 4.0;
    default: return 0.0;
    }
}

uint32_t pass_reshard_key(const ir_sharding *s, int rank, int naxes)
{
    uint32_t key = 0;
    for (int d = 0; d < rank; d++)
        for (int k = 0; k < s->naxes[d]; k++) {
            int a = s->axes[d][k];
            if (a >= 0 && a < naxes)
                key |= ((uint32_t)(d + 1) | (uint32_t)k << 4) << (6 * a);
        }
    for (int a = 0; a < naxes; a++)
        if (s->unreduced & (1u << a))
            key |= PLACE_U << (6 * a);
    return key;
}

/* Whether (b1, n1) is strictly better than (b2, n2): fewer bytes, or equal
 * bytes (up to rounding) and fewer ops. */
static bool better(double b1, int n1, double b2, int n2)
{
    double eps = 1e-9 * fmax(1.0, fmax(fabs(b1), fabs(b2)));
    if (b1 < b2 - eps)
        return true;
    return b1 <= b2 + eps && n1 < n2;
}

static bool heap_less(const search *s, int i, int j)
{
    const state *a = &s->st[s->heap[i]], *b = &s->st[s->heap[j]];
    return better(a->bytes, a->nops, b->bytes, b->nops);
}

static void heap_swap(search *s, int i, int j)
{
    int t = s->heap[i];
    s->heap[i] = s->heap[j];
    s->heap[j] = t;
}

static void heap_push(search *s, int idx)
{
    if (s->nheap == s->hcap) {
        int ncap = s->hcap ? 2 * s->hcap : 256;
        int *heap = realloc(s->heap, (size_t)ncap * sizeof *heap);
        if (!heap) {
            s->oom = true;
            return;
        }
        s->heap = heap;
        s->hcap = ncap;
    }
    int i = s->nheap++;
    s->heap[i] = idx;
    while (i > 0 && heap_less(s, i, (i - 1) / 2)) {
        heap_swap(s, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static int heap_pop(search *s)
{
    int top = s->heap[0];
    s->heap[0] = s->heap[--s->nheap];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, b = i;
        if (l < s->nheap && heap_less(s, l, b))
            b = l;
        if (r < s->nheap && heap_less(s, r, b))
            b = r;
        if (b == i)
            break;
        heap_swap(s, i, b);
        i = b;
    }
    return top;
}

static uint32_t hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* Index of the state with `key`, or -1. */
static int find_state(const search *s, uint32_t key)
{
    for (uint32_t h = hash32(key) & s->tmask;; h = (h + 1) & s->tmask) {
        int e = s->table[h];
        if (!e)
            return -1;
        if (s->st[e - 1].key == key)
            return e - 1;
    }
}

/* Grows the state array and its table; false on allocation failure. */
static bool grow(search *s)
{
    int ncap = s->cap ? 2 * s->cap : 256;
    state *st = realloc(s->st, (size_t)ncap * sizeof *st);
    if (!st)
        return false;
    s->st = st;
    /* Table at 2x capacity keeps the load factor under 1/2. */
    uint32_t tsize = (uint32_t)ncap * 2;
    int *table = calloc(tsize, sizeof *table);
    if (!table)
        return false;
    free(s->table);
    s->table = table;
    s->tmask = tsize - 1;
    s->cap = ncap;
    for (int i = 0; i < s->nst; i++) {
        uint32_t h = hash32(s->st[i].key) & s->tmask;
        while (s->table[h])
            h = (h + 1) & s->tmask;
        s->table[h] = i + 1;
    }
    return true;
}

double pass_reshard_step_time(const ir_module *m, const cost_hw *hw, const ir_type *t,
                              const ir_sharding *from, const pass_reshard_step *st)
{
    if (!hw)
        return 0.0;
    /* The op the step becomes, on stack values: the estimate reads only
     * kinds, types and the coll arm. */
    ir_value in, out;
    memset(&in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    in.id = out.id = -1;
    in.kind = out.kind = IR_VAL_OP;
    in.tensor = out.tensor = "";
    in.type = out.type = *t;
    in.type.sh = *from;
    out.type.sh = st->to;
    ir_op op;
    memset(&op, 0, sizeof op);
    op.kind = st->kind;
    op.noperands = 1;
    op.operands[0] = &in;
    op.result = &out;
    op.for_operand = -1;
    op.u.coll.naxes = st->naxes;
    memcpy(op.u.coll.axes, st->axes, sizeof op.u.coll.axes);
    op.u.coll.dim = st->dim;
    op.u.coll.dim2 = st->dim2;
    op.u.coll.reduce = (ir_reduce)from->red;
    ir_cost c;
    cost_op_estimate(m, hw, &op, &c);
    return c.time;
}

/* Relaxes the edge `step` from state `from` (cost `bytes`, `nops`). */
static void relax(search *s, int from, const pass_reshard_step *step)
{
    uint32_t key = pass_reshard_key(&step->to, s->t->rank, s->m->mesh.naxes);
    double bytes = s->st[from].bytes + step->bytes;
    int nops = s->st[from].nops + 1;
    int idx = find_state(s, key);
    if (idx >= 0) {
        state *x = &s->st[idx];
        if (x->done || !better(bytes, nops, x->bytes, x->nops))
            return;
        /* Decrease-key by re-pushing; stale heap entries are skipped
         * because the state is `done` when popped the second time. */
        x->bytes = bytes;
        x->nops = nops;
        x->prev = from;
        x->in = *step;
        heap_push(s, idx);
        return;
    }
    if (s->nst == s->cap && !grow(s)) {
        s->oom = true;
        return;
    }
    idx = s->nst++;
    state *x = &s->st[idx];
    x->key = key;
    x->sh = step->to;
    x->bytes = bytes;
    x->nops = nops;
    x->prev = from;
    x->in = *step;
    x->done = false;
    uint32_t h = hash32(key) & s->tmask;
    while (s->table[h])
        h = (h + 1) & s->tmask;
    s->table[h] = idx + 1;
    heap_push(s, idx);
}

/* Whether dim position d of the value divides by its axes in `sh`. */
static bool divides(const search *s, const ir_sharding *sh, int d)
{
    int64_t parts = ir_sharding_dim_parts(sh, &s->m->mesh, d);
    return parts > 0 && s->m->dims[s->t->dims[d]].size % parts == 0;
}

/* Per-device bytes of the value under sharding `sh`. */
static double local_bytes(const search *s, const ir_sharding *sh)
{
    ir_type t = *s->t;
    t.sh = *sh;
    return (double)ir_local_bytes(s->m, &t);
}

static int64_t group_size(const search *s, const int8_t *axes, int n)
{
    int64_t g = 1;
    for (int k = 0; k < n; k++)
        g *= s->m->mesh.axes[axes[k]].size;
    return g;
}

/* Calls relax for every ordered non-empty sequence of the axes in `set`,
 * building the step with `make` (which may reject it by returning false). */
typedef bool (*make_fn)(const search *s, const ir_sharding *from, const int8_t *axes, int n,
                        int arg, pass_reshard_step *out);

static void each_sequence(search *s, int from, ir_axes set, int8_t *seq, int n, make_fn make, int arg)
{
    if (n > 0) {
        pass_reshard_step step;
        if (make(s, &s->st[from].sh, seq, n, arg, &step))
            relax(s, from, &step);
    }
    if (n >= IR_MAX_AXES) /* every axis is in seq already */
        return;
    for (int a = 0; a < s->m->mesh.naxes; a++)
        if (set & (1u << a)) {
            seq[n] = (int8_t)a;
            each_sequence(s, from, set & ~(1u << a), seq, n + 1, make, arg);
        }
}

/* A step of `kind` that appends `axes` to dim `d` (Slice, ReduceScatter):
 * the axes leave the unreduced set (a no-op for Slice, whose axes are
 * unused) and become the minor-most axes of d.  False if d would not
 * divide or would hold too many axes. */
static bool make_append(const search *s, ir_op_kind kind, const ir_sharding *from, const int8_t *axes, int n,
                        int d, pass_reshard_step *out)
{
    if (from->naxes[d] + n > IR_MAX_AXES)
        return false;
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->naxes = n;
    memcpy(out->axes, axes, (size_t)n);
    out->dim = d;
    out->dim2 = -1;
    out->to = *from;
    for (int k = 0; k < n; k++) {
        out->to.unreduced &= ~(1u << axes[k]);
        ir_sharding_push(&out->to, d, axes[k]);
    }
    if (!out->to.unreduced)
        out->to.red = IR_RED_SUM;
    if (!divides(s, &out->to, d))
        return false;
    out->bytes = pass_reshard_bytes(kind, local_bytes(s, from), 0.0, group_size(s, axes, n));
    return true;
}

/* Slice: append unused `axes` to dim `d` (free). */
static bool make_slice(const search *s, const ir_sharding *from, const int8_t *axes, int n, int d,
                       pass_reshard_step *out)
{
    return make_append(s, IR_OP_SLICE, from, axes, n, d, out);
}

/* ReduceScatter: unreduced `axes` become the minor-most axes of dim `d`. */
static bool make_reduce_scatter(const search *s, const ir_sharding *from, const int8_t *axes, int n, int d,
                                pass_reshard_step *out)
{
    return make_append(s, IR_OP_REDUCESCATTER, from, axes, n, d, out);
}

/* Adds every edge leaving state `from`. */
static void expand(search *s, int from)
{
    const int rank = s->t->rank;
    const ir_sharding cur = s->st[from].sh;
    const double in_bytes = local_bytes(s, &cur);
    int8_t seq[IR_MAX_AXES];
    ir_axes all = s->m->mesh.naxes ? (ir_axes)((1u << s->m->mesh.naxes) - 1) : 0;
    ir_axes free_axes = all & ~(ir_sharding_used_axes(&cur, rank) | cur.unreduced);

    for (int d = 0; d < rank; d++) {
        int n = cur.naxes[d];
        for (int k = 1; k <= n; k++) {
            const int8_t *tail = &cur.axes[d][n - k];
            int64_t g = group_size(s, tail, k);
            /* AllGather of the k minor-most axes of d. */
            pass_reshard_step step;
            memset(&step, 0, sizeof step);
            step.kind = IR_OP_ALLGATHER;
            step.naxes = k;
            memcpy(step.axes, tail, (size_t)k);
            step.dim = d;
            step.dim2 = -1;
            step.to = cur;
            step.to.naxes[d] = (uint8_t)(n - k);
            step.bytes = pass_reshard_bytes(IR_OP_ALLGATHER, in_bytes, local_bytes(s, &step.to), g);
            relax(s, from, &step);
            /* AllToAll of the same axes to every other dim. */
            for (int e = 0; e < rank; e++) {
                if (e == d || cur.naxes[e] + k > IR_MAX_AXES)
                    continue;
                pass_reshard_step a2a = step;
                a2a.kind = IR_OP_ALLTOALL;
                a2a.dim2 = e;
                for (int j = 0; j < k; j++)
                    ir_sharding_push(&a2a.to, e, tail[j]);
                if (!divides(s, &a2a.to, e))
                    continue;
                a2a.bytes = pass_reshard_bytes(IR_OP_ALLTOALL, in_bytes, in_bytes, g);
                relax(s, from, &a2a);
            }
        }
        if (free_axes)
            each_sequence(s, from, free_axes, seq, 0, make_slice, d);
        if (cur.unreduced)
            each_sequence(s, from, cur.unreduced, seq, 0, make_reduce_scatter, d);
    }
    /* AllReduce over every non-empty subset of the unreduced axes (order is
     * irrelevant: written in mesh order). */
    for (ir_axes sub = cur.unreduced; sub; sub = (sub - 1) & cur.unreduced) {
        pass_reshard_step step;
        memset(&step, 0, sizeof step);
        step.kind = IR_OP_ALLREDUCE;
        for (int a = 0; a < s->m->mesh.naxes; a++)
            if (sub & (1u << a))
                step.axes[step.naxes++] = (int8_t)a;
        step.dim = step.dim2 = -1;
        step.to = cur;
        step.to.unreduced &= ~sub;
        if (!step.to.unreduced)
            step.to.red = IR_RED_SUM;
        step.bytes = pass_reshard_bytes(IR_OP_ALLREDUCE, in_bytes, in_bytes, group_size(s, step.axes, step.naxes));
        relax(s, from, &step);
    }
}

/* Zeroes the unused tail of a sharding so that copies compare bytewise. */
static ir_sharding canonical(const ir_sharding *in, int rank)
{
    ir_sharding s;
    memset(&s, 0, sizeof s);
    for (int d = 0; d < rank; d++) {
        s.naxes[d] = in->naxes[d];
        memcpy(s.axes[d], in->axes[d], in->naxes[d]);
    }
    s.unreduced = in->unreduced;
    s.red = in->unreduced ? in->red : IR_RED_SUM;
    return s;
}

bool pass_reshard_find(const ir_module *m, const ir_type *t, const ir_sharding *to, pass_reshard_plan *plan)
{
    return pass_reshard_find_timed(m, NULL, t, to, plan);
}

bool pass_reshard_find_timed(const ir_module *m, const cost_hw *hw, const ir_type *t, const ir_sharding *to,
                             pass_reshard_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    plan->bytes = INFINITY;
    plan->time = INFINITY;
    search s;
    memset(&s, 0, sizeof s);
    s.m = m;
    s.t = t;
    uint32_t goal = pass_reshard_key(to, t->rank, m->mesh.naxes);
    bool found = false;
    /* Unreachable without a search: no edge creates partial sums, no state
     * has a dim that does not divide or an axis used twice. */
    if (to->unreduced & ~t->sh.unreduced)
        return false;
    ir_axes seen = to->unreduced;
    for (int d = 0; d < t->rank; d++) {
        for (int k = 0; k < to->naxes[d]; k++) {
            int a = to->axes[d][k];
            if (a < 0 || a >= m->mesh.naxes || (seen & (1u << a)))
                return false;
            seen |= 1u << a;
        }
        int64_t parts = ir_sharding_dim_parts(to, &m->mesh, d);
        if (parts < 1 || m->dims[t->dims[d]].size % parts != 0)
            return false;
    }
    if (!grow(&s))
        goto out;
    s.st[0].key = pass_reshard_key(&t->sh, t->rank, m->mesh.naxes);
    s.st[0].sh = canonical(&t->sh, t->rank);
    s.st[0].bytes = 0.0;
    s.st[0].nops = 0;
    s.st[0].prev = -1;
    s.st[0].done = false;
    s.nst = 1;
    s.table[hash32(s.st[0].key) & s.tmask] = 1;
    heap_push(&s, 0);
    while (s.nheap > 0 && !s.oom) {
        int cur = heap_pop(&s);
        if (s.st[cur].done)
            continue;
        s.st[cur].done = true;
        if (s.st[cur].key == goal) {
            int n = 0;
            for (int i = cur; s.st[i].prev >= 0; i = s.st[i].prev)
                n++;
            if (n > PASS_RESHARD_MAX_STEPS)
                break;
            plan->nsteps = n;
            for (int i = cur; s.st[i].prev >= 0; i = s.st[i].prev)
                plan->steps[--n] = s.st[i].in;
            plan->bytes = s.st[cur].bytes;
            /* Time each step from the sharding it starts at. */
            plan->time = 0.0;
            for (int k = 0; k < plan->nsteps; k++) {
                const ir_sharding *from = k ? &plan->steps[k - 1].to : &t->sh;
                plan->steps[k].time = pass_reshard_step_time(m, hw, t, from, &plan->steps[k]);
                plan->time += plan->steps[k].time;
            }
            found = true;
            break;
        }
        expand(&s, cur);
    }
out:
    free(s.st);
    free(s.table);
    free(s.heap);
    return found;
}

ir_value *pass_reshard_emit(ir_module *m, ir_value *v, const pass_reshard_plan *plan, ir_op *before,
                            ir_value *last, ir_op *for_op, int operand, const char *const *whys)
{
    ir_value *cur = v;
    uint32_t loc = for_op ? for_op->loc : v->loc;
    for (int k = 0; k < plan->nsteps; k++) {
        const pass_reshard_step *st = &plan->steps[k];
        ir_value *res;
        if (k == plan->nsteps - 1 && last) {
            res = last;
            res->type.sh = st->to;
        } else {
            ir_type t = v->type;
            t.sh = st->to;
            res = ir_value_new(m, v->tensor, IR_VAL_OP, &t, v->loc);
        }
        ir_op *op = ir_op_new(m, st->kind, 1, &cur, res, loc);
        op->u.coll.naxes = st->naxes;
        memcpy(op->u.coll.axes, st->axes, sizeof op->u.coll.axes);
        op->u.coll.dim = st->dim;
        op->u.coll.dim2 = st->dim2;
        /* What the partial results are combined with is the value's. */
        op->u.coll.reduce = (ir_reduce)cur->type.sh.red;
        if (before)
            ir_op_insert_before(m, before, op);
        else
            ir_op_append(m, op);
        ir_op_set_reason(m, op, for_op, operand, "%s", whys && whys[k] ? whys[k] : "reshard");
        cur = res;
    }
    return cur;
}
