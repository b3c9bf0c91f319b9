/* coll_check.c - the collective checker (see coll_check.h). */
#include <math.h>
#include <string.h>

#include "coll_check.h"
#include "rt_test_util.h"

/* Input element i of device `id`: an exact small integer in [-8, 8], but a
 * NaN at every 29th element, at an offset that differs per device (so the
 * NaN sits in the first, a middle or the last member of a group, and only
 * one member has it), and a -inf at a few elements of the mesh's last
 * device. */
static double input_value(const coll_config *c, int64_t id, int64_t i)
{
    if (i % 29 == (id * 5 + 4) % 29)
        return NAN;
    if (id == rt_mesh_size(c->prog) - 1 && i % 13 == 9)
        return -INFINITY;
    return (double)((id * 31 + i * 7) % 17) - 8.0;
}

/* a op b for the reference, spelled out as NumPy defines it: NaN if either
 * is NaN, else a + b, the larger or the smaller. */
static double combine(int32_t op, double a, double b)
{
    if (isnan(a) || isnan(b))
        return NAN;
    switch (op) {
    case RT_REDUCE_MAX: return a > b ? a : b;
    case RT_REDUCE_MIN: return a < b ? a : b;
    default: return a + b;
    }
}

static int64_t ravel(int32_t rank, const int64_t *shape, const int64_t *idx)
{
    int64_t f = 0;
    for (int32_t k = 0; k < rank; k++)
        f = f * shape[k] + idx[k];
    return f;
}

/* Linear id of the device with group rank r in the group of `coord`
 * (independent of the runtime's own rt_group_peer). */
static int64_t peer_id(const coll_config *c, const int64_t *coord, int64_t r)
{
    int64_t co[RT_MAX_AXES];
    memcpy(co, coord, sizeof co);
    for (int32_t k = c->naxes - 1; k >= 0; k--) {
        int64_t s = c->prog->axis_sizes[c->axes[k]];
        co[c->axes[k]] = r % s;
        r /= s;
    }
    return ravel(c->prog->naxes, c->prog->axis_sizes, co);
}

/* The reduction (c->reduce_op) over the G members of the group of `coord`
 * of their input element `flat`, folded from group rank 0. */
static double reduce_group(const coll_config *c, const int64_t *coord, int64_t G, int64_t flat)
{
    double v = input_value(c, peer_id(c, coord, 0), flat);
    for (int64_t j = 1; j < G; j++)
        v = combine(c->reduce_op, v, input_value(c, peer_id(c, coord, j), flat));
    return v;
}

/* The reference value of output element `idx` of device `coord`. */
static double reference(const coll_config *c, const rt_coll_desc *d, const int64_t *coord,
                        int64_t grank, int64_t G, const int64_t *idx)
{
    int64_t s[RT_MAX_RANK];
    memcpy(s, idx, sizeof s);
    switch (d->kind) {
    case RT_ALLGATHER: {
        int64_t j = idx[d->dim] / d->in_shape[d->dim];
        s[d->dim] = idx[d->dim] % d->in_shape[d->dim];
        return input_value(c, peer_id(c, coord, j), ravel(d->rank, d->in_shape, s));
    }
    case RT_REDUCESCATTER:
        s[d->dim] = idx[d->dim] + grank * d->out_shape[d->dim];
        return reduce_group(c, coord, G, ravel(d->rank, d->in_shape, s));
    case RT_ALLREDUCE:
        return reduce_group(c, coord, G, ravel(d->rank, d->in_shape, s));
    case RT_ALLTOALL: {
        int64_t j = idx[d->dim] / d->in_shape[d->dim];
        s[d->dim] = idx[d->dim] % d->in_shape[d->dim];
        s[d->dim2] = idx[d->dim2] + grank * d->out_shape[d->dim2];
        return input_value(c, peer_id(c, coord, j), ravel(d->rank, d->in_shape, s));
    }
    default: /* Slice */
        s[d->dim] = idx[d->dim] + grank * d->out_shape[d->dim];
        return input_value(c, peer_id(c, coord, grank), ravel(d->rank, d->in_shape, s));
    }
}

/* 1 if `got` is `want`: equal, or both NaN. */
static int same_value(double got, double want)
{
    return got == want || (isnan(got) && isnan(want));
}

/* Builds the descriptor of `kind` on dim `dim` of a rank-3 base shape. */
static rt_coll_desc make_desc(const coll_config *c, int32_t kind, int32_t dim, int64_t G)
{
    static const int64_t base[3] = {3, 2, 5};
    rt_coll_desc d;
    memset(&d, 0, sizeof d);
    d.kind = kind;
    d.dtype = c->dtype;
    d.naxes = c->naxes;
    memcpy(d.axes, c->axes, sizeof d.axes);
    d.rank = 3;
    d.dim = dim;
    d.dim2 = kind == RT_ALLTOALL ? (dim + 1) % 3 : -1;
    d.reduce_op = kind == RT_ALLREDUCE || kind == RT_REDUCESCATTER ? c->reduce_op : 0;
    memcpy(d.in_shape, base, sizeof base);
    memcpy(d.out_shape, base, sizeof base);
    switch (kind) {
    case RT_ALLGATHER: d.out_shape[dim] *= G; break;
    case RT_REDUCESCATTER:
    case RT_SLICE: d.in_shape[dim] *= G; break;
    case RT_ALLTOALL:
        d.out_shape[dim] *= G;
        d.in_shape[d.dim2] *= G;
        break;
    default: break;
    }
    return d;
}

void coll_check_device(rt_device *dev, void *arg)
{
    coll_config *c = arg;
    rt_group_view g;
    rt_group_of(dev, c->naxes, c->axes, &g);
    size_t es = rt_dtype_size(c->dtype);
    for (int32_t kind = RT_ALLGATHER; kind <= RT_SLICE; kind++) {
        if (c->reduce_op != RT_REDUCE_SUM && kind != RT_ALLREDUCE && kind != RT_REDUCESCATTER)
            continue; /* max and min only exist for the reducing kinds */
        /* The reducing kinds also run through the asynchronous collectives
         * (a communication thread on threads, the non-blocking path on MPI). */
        int runs = kind == RT_ALLREDUCE || kind == RT_REDUCESCATTER ? 2 : 1;
        for (int32_t dim = 0; dim < 3 * runs; dim++) {
            rt_coll_desc d = make_desc(c, kind, dim % 3, g.size);
            int64_t nin = rt_numel(3, d.in_shape), nout = rt_numel(3, d.out_shape);
            void *in = rt_alloc(dev, nin * (int64_t)es), *out = rt_alloc(dev, nout * (int64_t)es);
            for (int64_t i = 0; i < nin; i++)
                test_store(c->dtype, in, i, input_value(c, dev->id, i));
            if (dim < 3) {
                rt_collective(dev, &d, in, out);
            } else {
                rt_async *q = rt_async_open(dev);
                rt_async_wait(q, rt_async_start(q, &d, in, out));
                rt_async_close(q);
            }
            int64_t idx[RT_MAX_RANK] = {0};
            for (int64_t i = 0; i < nout; i++) {
                double want = reference(c, &d, dev->coord, g.rank, g.size, idx);
                if (!same_value(test_load(c->dtype, out, i), want))
                    c->errors[dev->id]++;
                c->checked[dev->id]++;
                for (int32_t k = 2; k >= 0 && ++idx[k] == d.out_shape[k]; k--)
                    idx[k] = 0;
            }
            rt_free(dev, in);
            rt_free(dev, out);
        }
    }
    /* A scalar AllReduce: fewer elements than devices for the slices. */
    rt_coll_desc d;
    memset(&d, 0, sizeof d);
    d.kind = RT_ALLREDUCE;
    d.dtype = c->dtype;
    d.naxes = c->naxes;
    memcpy(d.axes, c->axes, sizeof d.axes);
    d.dim = d.dim2 = -1;
    d.reduce_op = c->reduce_op;
    uint64_t in[1], out[1];
    test_store(c->dtype, in, 0, input_value(c, dev->id, 5));
    rt_collective(dev, &d, in, out);
    int64_t idx[RT_MAX_RANK] = {0};
    idx[0] = 5; /* reference() reads element ravel(idx) = 5 of each peer's input */
    d.rank = 1;
    d.in_shape[0] = d.out_shape[0] = 6;
    double want = reference(c, &d, dev->coord, g.rank, g.size, idx);
    c->errors[dev->id] += !same_value(test_load(c->dtype, out, 0), want);
    c->checked[dev->id]++;
}

