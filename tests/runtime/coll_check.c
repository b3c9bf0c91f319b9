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

/* The dim group axis k works along (an AllToAll's grown dim), or with
 * `split` the dim an AllToAll's axis k joins, in either of einrt.h's
 * encodings (read here without the runtime's rt_coll_resolve). */
static int32_t axis_dim(const rt_coll_desc *d, int32_t k, int split)
{
    if (d->dim == RT_DIM_PER_AXIS)
        return split ? d->axis_dim2[k] : d->axis_dim[k];
    return split ? d->dim2 : d->dim;
}

/* Block index along `dim` of the member with group coordinates cc (one per
 * group axis): mixed radix over the axes that work along it, in order. */
static int64_t block_of(const coll_config *c, const rt_coll_desc *d, const int64_t *cc, int32_t dim,
                        int split)
{
    int64_t b = 0;
    for (int32_t k = 0; k < c->naxes; k++)
        if (axis_dim(d, k, split) == dim)
            b = b * c->prog->axis_sizes[c->axes[k]] + cc[k];
    return b;
}

/* The inverse: sets in cc the coordinates of the axes that work along
 * `dim` so that block_of gives j. */
static void set_block(const coll_config *c, const rt_coll_desc *d, int64_t *cc, int32_t dim, int split,
                      int64_t j)
{
    for (int32_t k = c->naxes - 1; k >= 0; k--)
        if (axis_dim(d, k, split) == dim) {
            int64_t s = c->prog->axis_sizes[c->axes[k]];
            cc[k] = j % s;
            j /= s;
        }
}

/* Linear id of the member of the group of `coord` whose group coordinates
 * are cc (independent of the runtime's own rt_group_peer). */
static int64_t member_id(const coll_config *c, const int64_t *coord, const int64_t *cc)
{
    int64_t co[RT_MAX_AXES];
    memcpy(co, coord, sizeof co);
    for (int32_t k = 0; k < c->naxes; k++)
        co[c->axes[k]] = cc[k];
    return ravel(c->prog->naxes, c->prog->axis_sizes, co);
}

/* The reduction (c->reduce_op) over the G members of the group of `coord`
 * of their input element `flat`, folded from group rank 0. */
static double reduce_group(const coll_config *c, const int64_t *coord, int64_t G, int64_t flat)
{
    double v = 0;
    for (int64_t j = 0; j < G; j++) {
        int64_t cc[RT_MAX_AXES], r = j;
        for (int32_t k = c->naxes - 1; k >= 0; k--) {
            cc[k] = r % c->prog->axis_sizes[c->axes[k]];
            r /= c->prog->axis_sizes[c->axes[k]];
        }
        double x = input_value(c, member_id(c, coord, cc), flat);
        v = j == 0 ? x : combine(c->reduce_op, v, x);
    }
    return v;
}

/* The reference value of output element `idx` of device `coord`: along
 * every dim, the block of the member whose data it is (dims no axis names
 * have one block). */
static double reference(const coll_config *c, const rt_coll_desc *d, const int64_t *coord,
                        int64_t G, const int64_t *idx)
{
    int64_t s[RT_MAX_RANK], mine[RT_MAX_AXES], peer[RT_MAX_AXES];
    for (int32_t k = 0; k < c->naxes; k++)
        mine[k] = peer[k] = coord[c->axes[k]];
    memcpy(s, idx, sizeof s);
    for (int32_t k = 0; k < d->rank; k++) {
        switch (d->kind) {
        case RT_ALLGATHER:
        case RT_ALLTOALL:
            /* Grown dims: which member's block, and where in it; an
             * AllToAll's split dims: this device's block of the sender's. */
            set_block(c, d, peer, k, 0, idx[k] / d->in_shape[k]);
            s[k] = idx[k] % d->in_shape[k];
            if (d->kind == RT_ALLTOALL)
                s[k] += block_of(c, d, mine, k, 1) * d->out_shape[k];
            break;
        case RT_REDUCESCATTER:
        case RT_SLICE:
            s[k] = idx[k] + block_of(c, d, mine, k, 0) * d->out_shape[k];
            break;
        default: break;
        }
    }
    if (d->kind == RT_REDUCESCATTER || d->kind == RT_ALLREDUCE)
        return reduce_group(c, coord, G, ravel(d->rank, d->in_shape, s));
    return input_value(c, member_id(c, coord, peer), ravel(d->rank, d->in_shape, s));
}

/* 1 if `got` is `want`: equal, or both NaN. */
static int same_value(double got, double want)
{
    return got == want || (isnan(got) && isnan(want));
}

/* A descriptor of `kind` over the config's group on the rank-3 base shape
 * (in and out both the base; dims left to the caller). */
static rt_coll_desc base_desc(const coll_config *c, int32_t kind)
{
    static const int64_t base[3] = {3, 2, 5};
    rt_coll_desc d;
    memset(&d, 0, sizeof d);
    d.kind = kind;
    d.dtype = c->dtype;
    d.naxes = c->naxes;
    memcpy(d.axes, c->axes, sizeof d.axes);
    d.rank = 3;
    d.reduce_op = kind == RT_ALLREDUCE || kind == RT_REDUCESCATTER ? c->reduce_op : 0;
    memcpy(d.in_shape, base, sizeof base);
    memcpy(d.out_shape, base, sizeof base);
    return d;
}

/* Builds the descriptor of `kind` on dim `dim` of a rank-3 base shape. */
static rt_coll_desc make_desc(const coll_config *c, int32_t kind, int32_t dim, int64_t G)
{
    rt_coll_desc d = base_desc(c, kind);
    d.dim = dim;
    d.dim2 = kind == RT_ALLTOALL ? (dim + 1) % 3 : -1;
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

/*
 * The descriptor of `kind` whose group axes work along different dims of
 * the rank-3 base shape (RT_DIM_PER_AXIS), for a group of 2 or 3 axes.
 * Pattern t % 3 shifts the dims; t < 3: axis 0 along dim t, the others
 * along t+1 (an AllToAll moves them all to t+2); t >= 3: axis k along
 * t+k (an AllToAll takes them all from t, axis 0 to t+1, the others to
 * t+2).  Each pattern names at least two different dims.
 */
static rt_coll_desc make_desc_per_axis(const coll_config *c, int32_t kind, int t)
{
    rt_coll_desc d = base_desc(c, kind);
    d.dim = d.dim2 = RT_DIM_PER_AXIS;
    for (int32_t k = 0; k < RT_MAX_AXES; k++)
        d.axis_dim[k] = d.axis_dim2[k] = -1;
    int a2a = kind == RT_ALLTOALL;
    for (int32_t k = 0; k < c->naxes; k++) {
        int64_t size = c->prog->axis_sizes[c->axes[k]];
        int spread = t >= 3;
        d.axis_dim[k] = (t + (spread ? (a2a ? 0 : k) : (k > 0))) % 3;
        if (a2a)
            d.axis_dim2[k] = (t + (spread ? 1 + (k > 0) : 2)) % 3;
        switch (kind) {
        case RT_ALLGATHER: d.out_shape[d.axis_dim[k]] *= size; break;
        case RT_ALLTOALL:
            d.out_shape[d.axis_dim[k]] *= size;
            d.in_shape[d.axis_dim2[k]] *= size;
            break;
        default: d.in_shape[d.axis_dim[k]] *= size; break;
        }
    }
    return d;
}

/* Runs `d` on this device (through rt_async when `async`) and counts its
 * output elements that differ from the reference. */
static void run_and_check(rt_device *dev, coll_config *c, const rt_group_view *g, const rt_coll_desc *d,
                          int async)
{
    size_t es = rt_dtype_size(c->dtype);
    int64_t nin = rt_numel(3, d->in_shape), nout = rt_numel(3, d->out_shape);
    void *in = rt_alloc(dev, nin * (int64_t)es), *out = rt_alloc(dev, nout * (int64_t)es);
    for (int64_t i = 0; i < nin; i++)
        test_store(c->dtype, in, i, input_value(c, dev->id, i));
    if (!async) {
        rt_collective(dev, d, in, out);
    } else {
        rt_async *q = rt_async_open(dev);
        rt_async_wait(q, rt_async_start(q, d, in, out));
        rt_async_close(q);
    }
    int64_t idx[RT_MAX_RANK] = {0};
    for (int64_t i = 0; i < nout; i++) {
        double want = reference(c, d, dev->coord, g->size, idx);
        if (!same_value(test_load(c->dtype, out, i), want))
            c->errors[dev->id]++;
        c->checked[dev->id]++;
        for (int32_t k = 2; k >= 0 && ++idx[k] == d->out_shape[k]; k--)
            idx[k] = 0;
    }
    rt_free(dev, in);
    rt_free(dev, out);
}

void coll_check_device(rt_device *dev, void *arg)
{
    coll_config *c = arg;
    rt_group_view g;
    rt_group_of(dev, c->naxes, c->axes, &g);
    for (int32_t kind = RT_ALLGATHER; kind <= RT_SLICE; kind++) {
        if (c->reduce_op != RT_REDUCE_SUM && kind != RT_ALLREDUCE && kind != RT_REDUCESCATTER)
            continue; /* max and min only exist for the reducing kinds */
        /* The reducing kinds also run through the asynchronous collectives
         * (a communication thread on threads, the non-blocking path on MPI). */
        int runs = kind == RT_ALLREDUCE || kind == RT_REDUCESCATTER ? 2 : 1;
        for (int32_t dim = 0; dim < 3 * runs; dim++) {
            rt_coll_desc d = make_desc(c, kind, dim % 3, g.size);
            run_and_check(dev, c, &g, &d, dim >= 3);
        }
        /* Groups of several axes: the same kind with the axes along
         * different dims (AllReduce has none). */
        for (int t = 0; c->naxes >= 2 && kind != RT_ALLREDUCE && t < 6 * runs; t++) {
            rt_coll_desc d = make_desc_per_axis(c, kind, t % 6);
            run_and_check(dev, c, &g, &d, t >= 6);
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
    double want = reference(c, &d, dev->coord, g.size, idx);
    c->errors[dev->id] += !same_value(test_load(c->dtype, out, 0), want);
    c->checked[dev->id]++;
}

