/*
 * reshard.c - min-cost resharding as a shortest path over sharding states.
 *
 * How it works.  The states are the shardings one value can have: each mesh
 * axis is either unused, one of the (ordered) axes of one dim, or an
 * unreduced axis.  The edges are the ops of ir.h, each moving the value
 * from one state to another:
 *
 *   AllGather_A          drop the minor-most axes of one or more dims
 *   Slice_A(d)           append unused axes A to dim d        (no traffic)
 *   AllToAll_A           move the minor-most axes of one or more dims to
 *                        the end of other dims
 *   ReduceScatter_A      unreduced axes A become the minor-most axes of one
 *                        or more dims
 *   AllReduce_A          drop unreduced axes A
 *
 * A is any non-empty group of axes (ordered where order matters), so a
 * two-axis gather is the single op AllGather_XY, as the seeds write it, and
 * the axes of one op may each work along their own dim: AllGather_XY of
 * [B_X, D_Y] -> [B, D] is one collective over the group X x Y (ir.h's
 * per-axis encoding).  A Slice stays on one dim (it moves nothing; one-dim
 * Slices keep the edges few).  An AllToAll takes each dim's moved axes to
 * one other dim, the dims in increasing order, so axes from several dims
 * arrive at one dim in the order of their dims (the other order takes two
 * AllToAlls).
 *
 * Edge weights, compared in this order:
 *   1. bytes moved per device, from seed 001's table (pass_reshard_bytes);
 *   2. Slices onto a mesh axis that neither the source nor the target
 *      uses ("widening");
 *   3. with a hardware profile, the time cost_op_estimate gives the op the
 *      step becomes (times equal within 1e-9 relative are tied);
 *   4. ops.
 * A one-step collective over several axes moves exactly the bytes of any
 * sequence of one-axis collectives that does the same (a ring gather's
 * (G-1)/G telescopes: AllGather_XY of [B_X, D_Y] moves 15/16 of [B, D] for
 * |X| = |Y| = 4, and so do AllGather_X then AllGather_Y), or fewer (an
 * AllReduce or AllToAll), so between them the cost model decides: seed
 * 001's multi-axis rule gives the one-step collective the bandwidth of
 * all its axes ("what if we AllGather over several axes?"), and on TPU v4
 * question 2's AllGather_XY takes 46.6 us where the two one-axis gathers
 * take 116.5.  Bytes come first, and widening second, because by time
 * alone the search would leave the seeds' collectives for routes that tie
 * them in bytes: on the TPU profiles Slice_Z then AllGather_XZY instead of
 * AllGather_XY (a third axis's links for the same data, 31 us for question
 * 2, and the seed's answer is the gather over the value's own axes), and
 * on a calibrated host, where the fits charge per contiguous run, a
 * ReduceScatter into an inner dim replaced by one into the leading dim and
 * an AllToAll, or by Slice_X, ReduceScatter_Y, AllGather_X: margins inside
 * the model's error that would rewrite seed 000's listings.  A widening
 * route that moves strictly fewer bytes is still taken (resolving {U_Y} on
 * a replicated value by Slice_X, ReduceScatter_Y, AllGather_XY).  Without
 * a profile every time is 0 and bytes, then ops decide.  Dijkstra's
 * algorithm finds the cheapest path (the costs are vectors compared
 * lexicographically, which add like numbers).
 *
 * No edge creates unreduced axes, so a target unreduced over an axis the
 * source is not unreduced over is unreachable, which callers must treat as
 * "this layout is impossible".  States whose dims do not divide are never
 * entered.
 *
 * Why a search and not "gather everything, then slice": the direct route is
 * usually much cheaper ([I_X, J] -> [I, J_X] is one AllToAll at 1/8 of an
 * AllGather's bytes for X = 2, {U_X} -> [I_X] is one ReduceScatter at half
 * an AllReduce), and multi-step routes such as AllToAll then AllGather fall
 * out of the search without special cases.
 *
 * The state space is small (at most (rank + 2)^axes placements times the
 * axis orders; a few hundred for the meshes of the seeds), so states live in
 * a flat array indexed through an open-addressing table of their keys.  A
 * step is timed only when its bytes could win (relax), so the cost model
 * runs for a fraction of the edges.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "reshard.h"

/* What a path costs, compared in the order of the fields (better()). */
typedef struct route {
    double bytes;         /* bytes moved per device (seed 001's table) */
    int widened;          /* Slices onto axes neither end of the reshard uses */
    double time;          /* seconds on the profile (0 without one) */
    int nops;             /* ops */
} route;

/* One explored sharding state. */
typedef struct state {
    uint32_t key;         /* pass_reshard_key of sh */
    ir_sharding sh;       /* the sharding */
    route c;              /* best known cost of a path from the source */
    int prev;             /* predecessor state index, -1 for the source */
    pass_reshard_step in; /* the step from prev to this state */
    bool done;            /* settled by Dijkstra */
} state;

/* The search: states, their key index, and a binary heap of open states. */
typedef struct search {
    const ir_module *m;   /* for mesh and dim sizes */
    const cost_hw *hw;    /* profile timing the edges, or NULL (bytes decide) */
    const ir_type *t;     /* the value's type (dims, dtype) */
    bool per_axis;        /* collectives may work along a different dim per axis */
    ir_axes span;         /* the axes the source or the target uses */
    ir_sharding cur;      /* the sharding of the state being expanded (a copy: relax may move
                             the states) */
    double local;         /* ... and its per-device bytes */
    ir_op op;             /* the op a step becomes, for timing it (stack_op) */
    ir_value in, out;     /* its operand and result */
    state *st;            /* explored states */
    int nst, cap;         /* count and capacity of st */
    int *table;           /* key hash -> state index + 1 (0 = empty) */
    uint32_t tmask;       /* table size - 1 (power of two) */
    int *heap;            /* state indices ordered by better(); may hold stale repeats */
    int nheap, hcap;      /* entries in heap and its capacity */
    bool oom;             /* an allocation failed */
    long edges;           /* edges relaxed so far */
} search;

/* Whether a and b differ by more than rounding (1e-9 relative; `floor`
 * the smallest scale, 1 byte for bytes, 0 for seconds). */
static bool differ(double a, double b, double floor)
{
    return fabs(a - b) > 1e-9 * fmax(floor, fmax(fabs(a), fabs(b)));
}

/* Whether route a is strictly better than b: fewer bytes; or the same
 * bytes up to rounding and fewer Slices onto axes the reshard's ends do not
 * use; or those and less time; or the same time and fewer ops (without a
 * profile every time is 0). */
static bool better(const route *a, const route *b)
{
    if (differ(a->bytes, b->bytes, 1))
        return a->bytes < b->bytes;
    if (a->widened != b->widened)
        return a->widened < b->widened;
    if (differ(a->time, b->time, 0))
        return a->time < b->time;
    return a->nops < b->nops;
}

static bool heap_less(const search *s, int i, int j)
{
    return better(&s->st[s->heap[i]].c, &s->st[s->heap[j]].c);
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

/* The time of step `st` from sharding `from` as cost_op_estimate gives it,
 * on `op` with operand `in` and result `out` already set up (kinds,
 * tensors, links; only what a step changes is written here). */
static double estimate(const ir_module *m, const cost_hw *hw, ir_op *op, ir_value *in, ir_value *out,
                       const ir_type *t, const ir_sharding *from, const pass_reshard_step *st)
{
    in->type = out->type = *t;
    in->type.sh = *from;
    out->type.sh = st->to;
    op->kind = st->kind;
    op->u.coll = st->coll;
    op->u.coll.reduce = (ir_reduce)from->red;
    ir_cost c;
    cost_op_estimate(m, hw, op, &c);
    return c.time;
}

/* An op from `in` to `out` for estimate(): the estimate reads only kinds,
 * types and the coll arm. */
static void stack_op(ir_op *op, ir_value *in, ir_value *out)
{
    memset(in, 0, sizeof *in);
    memset(out, 0, sizeof *out);
    in->id = out->id = -1;
    in->kind = out->kind = IR_VAL_OP;
    in->tensor = out->tensor = "";
    memset(op, 0, sizeof *op);
    op->noperands = 1;
    op->operands[0] = in;
    op->result = out;
    op->for_operand = -1;
}

double pass_reshard_step_time(const ir_module *m, const cost_hw *hw, const ir_type *t,
                              const ir_sharding *from, const pass_reshard_step *st)
{
    if (!hw)
        return 0.0;
    ir_value in, out;
    ir_op op;
    stack_op(&op, &in, &out);
    return estimate(m, hw, &op, &in, &out, t, from, st);
}

/* Relaxes the edge `step` (bytes set, time not yet) from state `from`. */
static void relax(search *s, int from, pass_reshard_step *step)
{
    if (++s->edges > PASS_RESHARD_EDGE_BUDGET)
        return; /* the search is over its budget: find() takes the direct route */
    const state *f = &s->st[from];
    uint32_t key = pass_reshard_key(&step->to, s->t->rank, s->m->mesh.naxes);
    route c = f->c;
    c.bytes += step->bytes;
    c.nops++;
    for (int k = 0; step->kind == IR_OP_SLICE && k < step->coll.naxes; k++)
        if (!(s->span & (1u << step->coll.axes[k]))) {
            c.widened++;
            break;
        }
    int idx = find_state(s, key);
    /* The step's time only breaks ties: not needed when the state is
     * settled or already reached with fewer bytes (or Slices). */
    state *x = idx >= 0 ? &s->st[idx] : NULL;
    route fast = c;
    fast.time = -INFINITY;
    if (x && (x->done || !better(&fast, &x->c)))
        return;
    step->time = s->hw ? estimate(s->m, s->hw, &s->op, &s->in, &s->out, s->t, &f->sh, step) : 0.0;
    c.time = f->c.time + step->time;
    if (x) {
        if (!better(&c, &x->c))
            return;
        /* Decrease-key by re-pushing; stale heap entries are skipped
         * because the state is `done` when popped the second time. */
        x->c = c;
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
    x = &s->st[idx]; /* grow may have moved the states */
    x->key = key;
    x->sh = step->to;
    x->c = c;
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

/* A step of `kind` over axes[0..n) with dims[k] (and dims2[k], or NULL)
 * per axis, from the state being expanded (s->local bytes per device) to
 * sharding `to`; bytes from seed 001's table. */
static pass_reshard_step make_step(const search *s, ir_op_kind kind, const ir_sharding *to,
                                   const int8_t *axes, const int8_t *dims, const int8_t *dims2, int n)
{
    pass_reshard_step st;
    memset(&st, 0, sizeof st);
    st.kind = kind;
    st.coll.naxes = n;
    memcpy(st.coll.axes, axes, (size_t)n);
    if (kind == IR_OP_ALLREDUCE)
        st.coll.dim = st.coll.dim2 = -1;
    else
        ir_coll_set_dims(&st.coll, dims, dims2);
    st.to = *to;
    /* The result's bytes per device follow from the state's: the group
     * divides every dim it touches (callers check), so a gather multiplies
     * them by its size, a ReduceScatter or Slice divides them, and an
     * AllReduce or AllToAll keeps them.  Cheaper than recomputing them from
     * `to`, and the search makes this step for every edge it looks at. */
    int64_t g = group_size(s, axes, n);
    double out = kind == IR_OP_ALLGATHER                                  ? s->local * (double)g
                 : kind == IR_OP_REDUCESCATTER || kind == IR_OP_SLICE ? s->local / (double)g
                                                                          : s->local;
    st.bytes = pass_reshard_bytes(kind, s->local, out, g);
    return st;
}

/*
 * Calls relax for every way of appending axes of `set` to the dims of state
 * `from` (whose sharding with axes[0..n) appended is `to`) as one op of
 * `kind` (Slice, ReduceScatter): an ordered list of (axis, dim) pairs,
 * listed by dim (so each assignment and per-dim order comes once), with
 * every dim it touches still dividing.  A Slice, and every op of a search
 * without per-axis steps, keeps its axes on one dim.
 */
static void each_append(search *s, int from, ir_op_kind kind, ir_axes set, const ir_sharding *to,
                        int8_t *axes, int8_t *dims, int n)
{
    if (s->edges > PASS_RESHARD_EDGE_BUDGET)
        return;
    if (n > 0) {
        bool ok = true;
        for (int k = 0; k < n; k++) /* each dim once: dims[] is sorted */
            if (k == 0 || dims[k] != dims[k - 1])
                ok &= divides(s, to, dims[k]);
        if (ok) {
            pass_reshard_step st = make_step(s, kind, to, axes, dims, NULL, n);
            relax(s, from, &st);
        }
    }
    if (n >= IR_MAX_AXES) /* every axis is listed already */
        return;
    bool one_dim = kind == IR_OP_SLICE || !s->per_axis;
    int lo = n ? dims[n - 1] : 0, hi = n && one_dim ? dims[n - 1] : s->t->rank - 1;
    for (int d = lo; d <= hi; d++)
        for (int a = 0; a < s->m->mesh.naxes; a++) {
            if (!(set & (1u << a)) || to->naxes[d] >= IR_MAX_AXES)
                continue;
            ir_sharding next = *to;
            next.unreduced &= ~(1u << a); /* a no-op for a Slice, whose axes are unused */
            if (!next.unreduced)
                next.red = IR_RED_SUM;
            ir_sharding_push(&next, d, a);
            axes[n] = (int8_t)a;
            dims[n] = (int8_t)d;
            each_append(s, from, kind, set & ~(1u << a), &next, axes, dims, n + 1);
        }
}

/* The sharding after removing the last take[d] axes of every dim d, and
 * those axes listed by dim (each dim's major to minor) into axes/dims. */
static int take_tails(const ir_sharding *cur, int rank, const int *take, ir_sharding *to, int8_t *axes,
                      int8_t *dims)
{
    int n = 0;
    *to = *cur;
    for (int d = 0; d < rank; d++) {
        for (int j = cur->naxes[d] - take[d]; j < cur->naxes[d]; j++) {
            axes[n] = cur->axes[d][j];
            dims[n++] = (int8_t)d;
        }
        to->naxes[d] = (uint8_t)(cur->naxes[d] - take[d]);
    }
    return n;
}

/*
 * Calls relax for every AllGather and AllToAll from state `from`: each dim
 * from `d` on gives up its last take[d] axes (0..naxes[d]); for an AllToAll
 * they go to dim dest[d], which gives up none.  `ndims` dims give axes up
 * so far, all gathered (mode 0) or all moved (mode 1; -1 while ndims is 0).
 * Without per-axis steps only one dim gives axes up.
 */
static void each_take(search *s, int from, int d, int *take, int *dest, int ndims, int mode)
{
    if (s->edges > PASS_RESHARD_EDGE_BUDGET)
        return; /* over budget: the enumeration stops too */
    const int rank = s->t->rank;
    const ir_sharding *cur = &s->cur;
    if (d >= rank || d >= IR_MAX_RANK) { /* rank <= IR_MAX_RANK; the bound tells the compiler */
        if (ndims == 0)
            return;
        ir_sharding to;
        int8_t axes[IR_MAX_AXES], dims[IR_MAX_AXES], dims2[IR_MAX_AXES];
        int n = take_tails(cur, rank, take, &to, axes, dims);
        if (mode == 0) {
            pass_reshard_step st = make_step(s, IR_OP_ALLGATHER, &to, axes, dims, NULL, n);
            relax(s, from, &st);
            return;
        }
        for (int k = 0; k < n; k++) {
            dims2[k] = (int8_t)dest[dims[k]];
            if (to.naxes[dims2[k]] >= IR_MAX_AXES)
                return;
            ir_sharding_push(&to, dims2[k], axes[k]);
        }
        for (int k = 0; k < n; k++)
            if (!divides(s, &to, dims2[k]))
                return;
        pass_reshard_step st = make_step(s, IR_OP_ALLTOALL, &to, axes, dims, dims2, n);
        relax(s, from, &st);
        return;
    }
    take[d] = 0;
    dest[d] = -1;
    each_take(s, from, d + 1, take, dest, ndims, mode);
    bool is_dest = false;
    for (int e = 0; e < d; e++)
        is_dest |= dest[e] == d;
    if (is_dest || (ndims > 0 && !s->per_axis))
        return;
    for (int k = 1; k <= cur->naxes[d]; k++) {
        take[d] = k;
        /* e = -1: gathered; e >= 0: moved to dim e, which is no source. */
        for (int e = -1; e < rank; e++) {
            if (e == d || (e >= 0 && e < d && take[e] > 0) || (mode >= 0 && mode != (e >= 0)))
                continue;
            dest[d] = e;
            each_take(s, from, d + 1, take, dest, ndims + 1, e >= 0);
        }
    }
    take[d] = 0;
    dest[d] = -1;
}

/* Adds every edge leaving state `from`. */
static void expand(search *s, int from)
{
    const int rank = s->t->rank;
    const ir_sharding cur = s->st[from].sh;
    int8_t axes[IR_MAX_AXES], dims[IR_MAX_AXES];
    ir_axes all = s->m->mesh.naxes ? (ir_axes)((1u << s->m->mesh.naxes) - 1) : 0;
    ir_axes free_axes = all & ~(ir_sharding_used_axes(&cur, rank) | cur.unreduced);
    /* A pipeline's axis runs its stages (docs/pipeline.md): a route never
     * splits a value over it on the way, only where the source or the
     * target already is (a stacked layer dim). */
    int pa = s->m->pipe.axis;
    if (pa >= 0 && !(s->span & (1u << pa)))
        free_axes &= ~(1u << pa);
    int take[IR_MAX_RANK], dest[IR_MAX_RANK];

    s->cur = cur;
    s->local = local_bytes(s, &cur);
    each_take(s, from, 0, take, dest, 0, -1);
    if (free_axes)
        each_append(s, from, IR_OP_SLICE, free_axes, &cur, axes, dims, 0);
    if (cur.unreduced)
        each_append(s, from, IR_OP_REDUCESCATTER, cur.unreduced, &cur, axes, dims, 0);
    /* AllReduce over every non-empty subset of the unreduced axes (order is
     * irrelevant: written in mesh order). */
    for (ir_axes sub = cur.unreduced; sub; sub = (sub - 1) & cur.unreduced) {
        int n = 0;
        for (int a = 0; a < s->m->mesh.naxes; a++)
            if (sub & (1u << a))
                axes[n++] = (int8_t)a;
        ir_sharding to = cur;
        to.unreduced &= ~sub;
        if (!to.unreduced)
            to.red = IR_RED_SUM;
        pass_reshard_step st = make_step(s, IR_OP_ALLREDUCE, &to, axes, NULL, NULL, n);
        relax(s, from, &st);
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

/* Appends to plan the step of `kind` over axes[0..n) from the search's
 * current sharding s->cur to `to`, and makes `to` current. */
static void direct_step(search *s, pass_reshard_plan *plan, ir_op_kind kind, const ir_sharding *to,
                        const int8_t *axes, const int8_t *dims, int n)
{
    s->local = local_bytes(s, &s->cur);
    pass_reshard_step st = make_step(s, kind, to, axes, dims, NULL, n);
    st.time = s->hw ? estimate(s->m, s->hw, &s->op, &s->in, &s->out, s->t, &s->cur, &st) : 0.0;
    plan->steps[plan->nsteps++] = st;
    plan->bytes += st.bytes;
    plan->time += st.time;
    s->cur = st.to;
}

/* The first step of direct_route when the target splits a dim over some of
 * the partial-sum axes it drops, after the axes the dim has: a
 * ReduceScatter over them along that dim (the first such dim), the step
 * the search takes, where an AllReduce and a Slice would move twice the
 * bytes and leave no ReduceScatter for a matmul to hide (collective
 * matmul; the planner prices and pairs the route this returns).  Returns
 * the axes it reduced. */
static ir_axes direct_scatter(search *s, const ir_sharding *goal, ir_axes drop, pass_reshard_plan *plan)
{
    int8_t axes[IR_MAX_AXES], dims[IR_MAX_AXES];
    for (int d = 0; d < s->t->rank; d++) {
        int k0 = s->cur.naxes[d], n = 0;
        if (goal->naxes[d] <= k0 || memcmp(s->cur.axes[d], goal->axes[d], (size_t)k0) != 0)
            continue;
        ir_sharding to = s->cur;
        ir_axes done = 0;
        for (int k = k0; k < goal->naxes[d] && (drop & (1u << goal->axes[d][k])); k++) {
            axes[n] = goal->axes[d][k];
            dims[n++] = (int8_t)d;
            ir_sharding_push(&to, d, goal->axes[d][k]);
            done |= 1u << goal->axes[d][k];
        }
        if (!n)
            continue;
        to.unreduced &= ~done;
        if (!to.unreduced)
            to.red = IR_RED_SUM;
        direct_step(s, plan, IR_OP_REDUCESCATTER, &to, axes, dims, n);
        return done;
    }
    return 0;
}

/* A route that needs no search, for values whose state space is too large
 * to explore: ReduceScatter the partial sums the target splits a dim over
 * (direct_scatter), AllReduce the others it does not keep, gather every
 * dim whose axes differ from the target's (one AllGather per dim), then
 * slice each such dim to the target's axes.  It is valid whenever the
 * target is (find checked that), at most 2 + 2 * IR_MAX_AXES steps, and
 * moves at most an AllReduce and a whole gather of the value. */
static void direct_route(search *s, const ir_sharding *goal, pass_reshard_plan *plan)
{
    const int rank = s->t->rank;
    int8_t axes[IR_MAX_AXES], dims[IR_MAX_AXES];
    s->cur = canonical(&s->t->sh, rank);
    ir_axes drop = s->cur.unreduced & ~goal->unreduced;
    drop &= ~direct_scatter(s, goal, drop, plan);
    if (drop) {
        int n = 0;
        for (int a = 0; a < s->m->mesh.naxes; a++)
            if (drop & (1u << a))
                axes[n++] = (int8_t)a;
        ir_sharding to = s->cur;
        to.unreduced &= ~drop;
        if (!to.unreduced)
            to.red = IR_RED_SUM;
        direct_step(s, plan, IR_OP_ALLREDUCE, &to, axes, NULL, n);
    }
    bool differs[IR_MAX_RANK];
    for (int d = 0; d < rank; d++) {
        differs[d] = s->cur.naxes[d] != goal->naxes[d] ||
                     memcmp(s->cur.axes[d], goal->axes[d], goal->naxes[d]) != 0;
        if (!differs[d] || s->cur.naxes[d] == 0)
            continue;
        int n = s->cur.naxes[d];
        for (int k = 0; k < n; k++) {
            axes[k] = s->cur.axes[d][k];
            dims[k] = (int8_t)d;
        }
        ir_sharding to = s->cur;
        to.naxes[d] = 0;
        direct_step(s, plan, IR_OP_ALLGATHER, &to, axes, dims, n);
    }
    for (int d = 0; d < rank; d++) {
        if (!differs[d] || goal->naxes[d] == 0)
            continue;
        ir_sharding to = s->cur;
        for (int k = 0; k < goal->naxes[d]; k++) {
            axes[k] = goal->axes[d][k];
            dims[k] = (int8_t)d;
            ir_sharding_push(&to, d, goal->axes[d][k]);
        }
        direct_step(s, plan, IR_OP_SLICE, &to, axes, dims, goal->naxes[d]);
    }
}

/* Whether `to` is reachable from t's sharding at all, which needs no
 * search: no edge creates partial sums, and no state has a dim that does
 * not divide or an axis used twice. */
static bool reachable(const ir_module *m, const ir_type *t, const ir_sharding *to)
{
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
    return true;
}

/* The search behind the pass_reshard_find* entry points: Dijkstra over the
 * states, stopped after PASS_RESHARD_EDGE_BUDGET edges (then *over is set
 * and nothing is found). */
static bool search_route(const ir_module *m, const cost_hw *hw, bool per_axis, const ir_type *t,
                         const ir_sharding *to, pass_reshard_plan *plan, bool *over)
{
    memset(plan, 0, sizeof *plan);
    plan->bytes = INFINITY;
    plan->time = INFINITY;
    search s;
    memset(&s, 0, sizeof s);
    s.m = m;
    s.hw = hw;
    s.t = t;
    s.per_axis = per_axis;
    s.span = ir_sharding_used_axes(&t->sh, t->rank) | t->sh.unreduced | ir_sharding_used_axes(to, t->rank);
    stack_op(&s.op, &s.in, &s.out);
    uint32_t goal = pass_reshard_key(to, t->rank, m->mesh.naxes);
    bool found = false;
    if (!reachable(m, t, to))
        return false;
    if (!grow(&s))
        goto out;
    memset(&s.st[0], 0, sizeof s.st[0]);
    s.st[0].key = pass_reshard_key(&t->sh, t->rank, m->mesh.naxes);
    s.st[0].sh = canonical(&t->sh, t->rank);
    s.st[0].prev = -1;
    s.nst = 1;
    s.table[hash32(s.st[0].key) & s.tmask] = 1;
    heap_push(&s, 0);
    while (s.nheap > 0 && !s.oom) {
        if (s.edges > PASS_RESHARD_EDGE_BUDGET) {
            *over = true;
            break;
        }
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
            plan->bytes = s.st[cur].c.bytes;
            plan->time = s.st[cur].c.time;
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

/* search_route, and when it runs over its budget direct_route:
 * plan->bounded says the route may not be the cheapest. */
static bool find(const ir_module *m, const cost_hw *hw, bool per_axis, const ir_type *t,
                 const ir_sharding *to, pass_reshard_plan *plan)
{
    bool over = false;
    bool found = search_route(m, hw, per_axis, t, to, plan, &over);
    if (!over)
        return found; /* found, or unreachable by any route */
    /* The target is valid: search_route checked it before searching. */
    return pass_reshard_find_direct(m, hw, t, to, plan);
}

bool pass_reshard_find_direct(const ir_module *m, const cost_hw *hw, const ir_type *t, const ir_sharding *to,
                              pass_reshard_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    if (!reachable(m, t, to))
        return false;
    search s;
    memset(&s, 0, sizeof s);
    s.m = m;
    s.hw = hw;
    s.t = t;
    stack_op(&s.op, &s.in, &s.out);
    direct_route(&s, to, plan);
    plan->bounded = true;
    return true;
}

bool pass_reshard_find(const ir_module *m, const ir_type *t, const ir_sharding *to, pass_reshard_plan *plan)
{
    return find(m, NULL, true, t, to, plan);
}

bool pass_reshard_find_timed(const ir_module *m, const cost_hw *hw, const ir_type *t, const ir_sharding *to,
                             pass_reshard_plan *plan)
{
    return find(m, hw, true, t, to, plan);
}

bool pass_reshard_find_one_dim(const ir_module *m, const cost_hw *hw, const ir_type *t,
                               const ir_sharding *to, pass_reshard_plan *plan)
{
    return find(m, hw, false, t, to, plan);
}
