/*
 * collective.c - rt_collective: resolves a descriptor's dims, checks it
 * against the semantics of einrt.h, does the communication-free cases here
 * (a group of one device, Slice) and hands the rest to the device's backend.
 *
 * Shapes (per device, G = group size):
 *   AllGather      out = in with out[dim] = G * in[dim]
 *   ReduceScatter  in  = out with in[dim] = G * out[dim]
 *   AllReduce      out = in
 *   AllToAll       out[dim] = G * in[dim], in[dim2] = G * out[dim2]  (seed 001,
 *                  "AllToAll_{X,J} A[I_X, J] -> A[I, J_X]": dim = I, dim2 = J)
 *   Slice          in[dim] = G * out[dim], out = block `group rank`
 * With per-axis dims (RT_DIM_PER_AXIS) each dim d grows or shrinks by G_d,
 * the product of the sizes of its axes, and blocks are numbered by those
 * axes only (einrt.h); resolved descriptors hold that form for every
 * collective, so the checks and the block offsets here cover both.
 * AllReduce and ReduceScatter reduce with d->reduce_op (sum, max, min);
 * every other kind must leave it 0.
 */
#include <stddef.h>
#include <string.h>

#include "rt_internal.h"

static const char *kind_name(int32_t kind)
{
    switch (kind) {
    case RT_ALLGATHER: return "AllGather";
    case RT_REDUCESCATTER: return "ReduceScatter";
    case RT_ALLREDUCE: return "AllReduce";
    case RT_ALLTOALL: return "AllToAll";
    case RT_SLICE: return "Slice";
    default: return "unknown collective";
    }
}

const char *rt_reduce_op_name(int32_t op)
{
    switch (op) {
    case RT_REDUCE_SUM: return "sum";
    case RT_REDUCE_MAX: return "max";
    case RT_REDUCE_MIN: return "min";
    default: return "?";
    }
}

/* Fatal unless dim k of out equals that of in. */
static void check_same_dim(const rt_device *dev, const rt_coll_desc *d, int32_t k)
{
    if (d->in_shape[k] != d->out_shape[k])
        rt_fatal(dev, "%s (op %d): dim %d is %lld in the input but %lld in the output",
                 kind_name(d->kind), d->op_id, k, (long long)d->in_shape[k],
                 (long long)d->out_shape[k]);
}

/* Fatal unless big == G * small on dim k. */
static void check_grows(const rt_device *dev, const rt_coll_desc *d, const char *what,
                        int32_t k, int64_t big, int64_t small, int64_t G)
{
    if (big != small * G)
        rt_fatal(dev, "%s (op %d): %s dim %d should be %lld * %lld = %lld, found %lld",
                 kind_name(d->kind), d->op_id, what, k, (long long)small, (long long)G,
                 (long long)(small * G), (long long)big);
}

/* Fatal unless 0 <= k < rank. */
static void check_dim(const rt_device *dev, const rt_coll_desc *d, const char *name, int32_t k)
{
    if (k < 0 || k >= d->rank)
        rt_fatal(dev, "%s (op %d): %s %d out of range for rank %d", kind_name(d->kind),
                 d->op_id, name, k, d->rank);
}

void rt_coll_resolve(const rt_coll_desc *d, rt_coll_desc *r)
{
    memset(r, 0, sizeof *r);
    memcpy(r, d, offsetof(rt_coll_desc, axis_dim));
    for (int32_t k = 0; k < RT_MAX_AXES; k++) {
        /* Entry 0 also for a group of no axes, whose dims are still checked. */
        int in_use = k < d->naxes || k == 0;
        if (d->dim == RT_DIM_PER_AXIS) {
            r->axis_dim[k] = in_use ? d->axis_dim[k] : -1;
            r->axis_dim2[k] = in_use ? d->axis_dim2[k] : -1;
        } else {
            r->axis_dim[k] = in_use ? d->dim : -1;
            r->axis_dim2[k] = in_use ? d->dim2 : -1;
        }
    }
}

/* Product of the sizes of the group's axes that work along dim k (along
 * axis_dim, or axis_dim2 when `split`): G_k of einrt.h. */
static int64_t dim_factor(const rt_coll_desc *d, const rt_group_view *g, int32_t k, int split)
{
    int64_t f = 1;
    for (int32_t a = 0; a < g->naxes; a++)
        if ((split ? d->axis_dim2[a] : d->axis_dim[a]) == k)
            f *= g->sizes[a];
    return f;
}

void rt_coll_block(const rt_coll_desc *d, const rt_group_view *g, int64_t r, int split,
                   const int64_t *block, int64_t *off)
{
    int64_t coord[RT_MAX_AXES];
    for (int32_t a = g->naxes - 1; a >= 0; a--) {
        coord[a] = r % g->sizes[a];
        r /= g->sizes[a];
    }
    for (int32_t k = 0; k < d->rank; k++) {
        int64_t b = 0;
        for (int32_t a = 0; a < g->naxes; a++)
            if ((split ? d->axis_dim2[a] : d->axis_dim[a]) == k)
                b = b * g->sizes[a] + coord[a];
        off[k] = b * block[k];
    }
}

void rt_alltoall_box(const rt_coll_desc *d, int64_t *ext)
{
    memcpy(ext, d->in_shape, sizeof d->in_shape);
    for (int32_t a = 0; a < RT_MAX_AXES; a++)
        if (d->axis_dim2[a] >= 0 && d->axis_dim2[a] < d->rank)
            ext[d->axis_dim2[a]] = d->out_shape[d->axis_dim2[a]];
}

void rt_check_coll(const rt_device *dev, const rt_coll_desc *d, const rt_group_view *g)
{
    if (d->kind < RT_ALLGATHER || d->kind > RT_SLICE)
        rt_fatal(dev, "collective (op %d) of unknown kind %d", d->op_id, d->kind);
    if (!rt_dtype_size(d->dtype))
        rt_fatal(dev, "%s (op %d): unknown dtype %d", kind_name(d->kind), d->op_id, d->dtype);
    if (d->rank < 0 || d->rank > RT_MAX_RANK)
        rt_fatal(dev, "%s (op %d): rank %d out of range", kind_name(d->kind), d->op_id, d->rank);
    for (int32_t k = 0; k < d->rank; k++)
        if (d->in_shape[k] < 0 || d->out_shape[k] < 0)
            rt_fatal(dev, "%s (op %d): negative size in dim %d", kind_name(d->kind), d->op_id, k);
    if (d->reduce_op < RT_REDUCE_SUM || d->reduce_op > RT_REDUCE_MIN)
        rt_fatal(dev, "%s (op %d): unknown reduce_op %d (0 sum, 1 max, 2 min)",
                 kind_name(d->kind), d->op_id, d->reduce_op);
    /* Only the reducing kinds read reduce_op; a nonzero one elsewhere is a
     * codegen bug that would otherwise go unnoticed. */
    if (d->reduce_op != RT_REDUCE_SUM && d->kind != RT_ALLREDUCE && d->kind != RT_REDUCESCATTER)
        rt_fatal(dev, "%s (op %d): reduce_op is %d (%s), but only AllReduce and ReduceScatter "
                 "reduce; it must be 0", kind_name(d->kind), d->op_id, d->reduce_op,
                 rt_reduce_op_name(d->reduce_op));
    int a2a = d->kind == RT_ALLTOALL, grows = d->kind == RT_ALLGATHER || a2a;
    if (d->kind != RT_ALLREDUCE) {
        /* A group of no axes still names its dims (entry 0, rt_coll_resolve). */
        int32_t n = g->naxes ? g->naxes : 1;
        for (int32_t a = 0; a < n; a++) {
            check_dim(dev, d, "dim", d->axis_dim[a]);
            if (!a2a)
                continue;
            check_dim(dev, d, "dim2", d->axis_dim2[a]);
            for (int32_t b = 0; b < n; b++)
                if (d->axis_dim[b] == d->axis_dim2[a])
                    rt_fatal(dev, "AllToAll (op %d): dim and dim2 are both %d", d->op_id,
                             d->axis_dim2[a]);
        }
    }
    /* Each dim grows (AllGather, an AllToAll's `dim`s) or shrinks
     * (ReduceScatter, Slice, an AllToAll's `dim2`s) by the product of its
     * axes' sizes; the others keep their size. */
    for (int32_t k = 0; k < d->rank; k++) {
        int64_t f = d->kind == RT_ALLREDUCE ? 1 : dim_factor(d, g, k, 0);
        int64_t f2 = a2a ? dim_factor(d, g, k, 1) : 1;
        if (f2 > 1)
            check_grows(dev, d, "input", k, d->in_shape[k], d->out_shape[k], f2);
        else if (f > 1 && grows)
            check_grows(dev, d, "output", k, d->out_shape[k], d->in_shape[k], f);
        else if (f > 1)
            check_grows(dev, d, "input", k, d->in_shape[k], d->out_shape[k], f);
        else
            check_same_dim(dev, d, k);
    }
}

void rt_coll_local(const rt_coll_desc *d, const rt_group_view *g, const void *in, void *out)
{
    size_t es = rt_dtype_size(d->dtype);
    if (d->kind == RT_SLICE) {
        int64_t zero[RT_MAX_RANK] = {0}, soff[RT_MAX_RANK] = {0};
        rt_coll_block(d, g, g->rank, 0, d->out_shape, soff);
        rt_copy_box(out, d->out_shape, zero, in, d->in_shape, soff, d->out_shape, d->rank, es);
        return;
    }
    /* G == 1: every collective is the identity (also a max or min over
     * one member). */
    memcpy(out, in, (size_t)rt_numel(d->rank, d->in_shape) * es);
}

void rt_collective(rt_device *dev, const rt_coll_desc *desc, const void *in, void *out)
{
    if (!desc)
        rt_fatal(dev, "rt_collective: NULL descriptor");
    rt_coll_desc r, *d = &r;
    rt_coll_resolve(desc, d);
    rt_group_view g;
    rt_group_of(dev, d->naxes, d->axes, &g);
    rt_check_coll(dev, d, &g);
    if (rt_numel(d->rank, d->in_shape) > 0 && (!in || !out))
        rt_fatal(dev, "%s (op %d): NULL buffer", kind_name(d->kind), d->op_id);
    if (in == out && rt_numel(d->rank, d->in_shape) > 0)
        rt_fatal(dev, "%s (op %d): input and output are the same buffer", kind_name(d->kind),
                 d->op_id);
    if (d->kind == RT_SLICE || g.size == 1) {
        rt_coll_local(d, &g, in, out);
        return;
    }
    dev->ops->collective(dev, d, &g, in, out);
}
