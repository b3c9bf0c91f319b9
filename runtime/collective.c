/*
 * collective.c - rt_collective: checks a descriptor against the semantics
 * of einrt.h, does the communication-free cases here (a group of one device,
 * Slice) and hands the rest to the device's backend.
 *
 * Shapes (per device, G = group size):
 *   AllGather      out = in with out[dim] = G * in[dim]
 *   ReduceScatter  in  = out with in[dim] = G * out[dim]
 *   AllReduce      out = in
 *   AllToAll       out[dim] = G * in[dim], in[dim2] = G * out[dim2]  (seed 001,
 *                  "AllToAll_{X,J} A[I_X, J] -> A[I, J_X]": dim = I, dim2 = J)
 *   Slice          in[dim] = G * out[dim], out = block `group rank`
 * AllReduce and ReduceScatter reduce with d->reduce_op (sum, max, min);
 * every other kind must leave it 0.
 */
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

/* Fatal unless out equals in except on dims `skip1`, `skip2` (or -1). */
static void check_same_dims(const rt_device *dev, const rt_coll_desc *d, int32_t skip1,
                            int32_t skip2)
{
    for (int32_t k = 0; k < d->rank; k++) {
        if (k == skip1 || k == skip2)
            continue;
        if (d->in_shape[k] != d->out_shape[k])
            rt_fatal(dev, "%s (op %d): dim %d is %lld in the input but %lld in the output",
                     kind_name(d->kind), d->op_id, k, (long long)d->in_shape[k],
                     (long long)d->out_shape[k]);
    }
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
    int64_t G = g->size;
    switch (d->kind) {
    case RT_ALLGATHER:
        check_dim(dev, d, "dim", d->dim);
        check_same_dims(dev, d, d->dim, -1);
        check_grows(dev, d, "output", d->dim, d->out_shape[d->dim], d->in_shape[d->dim], G);
        break;
    case RT_REDUCESCATTER:
    case RT_SLICE:
        check_dim(dev, d, "dim", d->dim);
        check_same_dims(dev, d, d->dim, -1);
        check_grows(dev, d, "input", d->dim, d->in_shape[d->dim], d->out_shape[d->dim], G);
        break;
    case RT_ALLREDUCE:
        check_same_dims(dev, d, -1, -1);
        break;
    case RT_ALLTOALL:
        check_dim(dev, d, "dim", d->dim);
        check_dim(dev, d, "dim2", d->dim2);
        if (d->dim == d->dim2)
            rt_fatal(dev, "AllToAll (op %d): dim and dim2 are both %d", d->op_id, d->dim);
        check_same_dims(dev, d, d->dim, d->dim2);
        check_grows(dev, d, "output", d->dim, d->out_shape[d->dim], d->in_shape[d->dim], G);
        check_grows(dev, d, "input", d->dim2, d->in_shape[d->dim2], d->out_shape[d->dim2], G);
        break;
    }
}

void rt_coll_local(const rt_coll_desc *d, const rt_group_view *g, const void *in, void *out)
{
    size_t es = rt_dtype_size(d->dtype);
    if (d->kind == RT_SLICE) {
        int64_t zero[RT_MAX_RANK] = {0}, soff[RT_MAX_RANK] = {0};
        soff[d->dim] = g->rank * d->out_shape[d->dim];
        rt_copy_box(out, d->out_shape, zero, in, d->in_shape, soff, d->out_shape, d->rank, es);
        return;
    }
    /* G == 1: every collective is the identity (also a max or min over
     * one member). */
    memcpy(out, in, (size_t)rt_numel(d->rank, d->in_shape) * es);
}

void rt_collective(rt_device *dev, const rt_coll_desc *d, const void *in, void *out)
{
    if (!d)
        rt_fatal(dev, "rt_collective: NULL descriptor");
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
