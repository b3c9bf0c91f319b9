/*
 * test_collectives.c - every collective of the threads backend against a
 * straightforward implementation of the seeds' semantics (seed 001):
 *   AllGather      concatenation along `dim` in group-rank order
 *   ReduceScatter  sum over the group, then block `group rank` along `dim`
 *   AllReduce      sum over the group
 *   AllToAll       block transpose: out block j along `dim` = peer j's block
 *                  `my rank` along `dim2` (AllToAll_{X,J} A[I_X, J] -> A[I, J_X])
 *   Slice          block `group rank` along `dim` of the own input
 * on 1D/2D/3D meshes of 1, 2, 4 and 8 devices, groups over one and two axes
 * (both orders), dims leading/middle/last, f32/f64/bf16.  Inputs are small
 * integers, exact in bf16 and in any summation order, so results must match
 * exactly.  Each launch runs all kinds and dims back to back on the same
 * groups, which also exercises barrier reuse.
 */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "rt_internal.h"
#include "rt_test_util.h"

/* One test configuration shared by the device threads. */
typedef struct config {
    const rt_program *prog;      /* mesh */
    int32_t naxes;               /* group axes */
    int32_t axes[RT_MAX_AXES];   /* in group-rank order, major first */
    int32_t dtype;               /* element type */
    int64_t *errors;             /* per device: mismatching elements */
    int64_t *checked;            /* per device: elements compared */
} config;

/* Input element i of device `id` (an exact small integer). */
static double input_value(int64_t id, int64_t i)
{
    return (double)((id * 31 + i * 7) % 17) - 8.0;
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
static int64_t peer_id(const config *c, const int64_t *coord, int64_t r)
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

/* The reference value of output element `idx` of device `coord`. */
static double reference(const config *c, const rt_coll_desc *d, const int64_t *coord,
                        int64_t grank, int64_t G, const int64_t *idx)
{
    int64_t s[RT_MAX_RANK];
    memcpy(s, idx, sizeof s);
    double v = 0;
    switch (d->kind) {
    case RT_ALLGATHER: {
        int64_t j = idx[d->dim] / d->in_shape[d->dim];
        s[d->dim] = idx[d->dim] % d->in_shape[d->dim];
        return input_value(peer_id(c, coord, j), ravel(d->rank, d->in_shape, s));
    }
    case RT_REDUCESCATTER:
        s[d->dim] = idx[d->dim] + grank * d->out_shape[d->dim];
        for (int64_t j = 0; j < G; j++)
            v += input_value(peer_id(c, coord, j), ravel(d->rank, d->in_shape, s));
        return v;
    case RT_ALLREDUCE:
        for (int64_t j = 0; j < G; j++)
            v += input_value(peer_id(c, coord, j), ravel(d->rank, d->in_shape, s));
        return v;
    case RT_ALLTOALL: {
        int64_t j = idx[d->dim] / d->in_shape[d->dim];
        s[d->dim] = idx[d->dim] % d->in_shape[d->dim];
        s[d->dim2] = idx[d->dim2] + grank * d->out_shape[d->dim2];
        return input_value(peer_id(c, coord, j), ravel(d->rank, d->in_shape, s));
    }
    default: /* Slice */
        s[d->dim] = idx[d->dim] + grank * d->out_shape[d->dim];
        return input_value(peer_id(c, coord, grank), ravel(d->rank, d->in_shape, s));
    }
}

/* Builds the descriptor of `kind` on dim `dim` of a rank-3 base shape. */
static rt_coll_desc make_desc(const config *c, int32_t kind, int32_t dim, int64_t G)
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

static void device_fn(rt_device *dev, void *arg)
{
    config *c = arg;
    rt_group_view g;
    rt_group_of(dev, c->naxes, c->axes, &g);
    size_t es = rt_dtype_size(c->dtype);
    for (int32_t kind = RT_ALLGATHER; kind <= RT_SLICE; kind++) {
        for (int32_t dim = 0; dim < 3; dim++) {
            rt_coll_desc d = make_desc(c, kind, dim, g.size);
            int64_t nin = rt_numel(3, d.in_shape), nout = rt_numel(3, d.out_shape);
            void *in = rt_alloc(dev, nin * (int64_t)es), *out = rt_alloc(dev, nout * (int64_t)es);
            for (int64_t i = 0; i < nin; i++)
                test_store(c->dtype, in, i, input_value(dev->id, i));
            rt_collective(dev, &d, in, out);
            int64_t idx[RT_MAX_RANK] = {0};
            for (int64_t i = 0; i < nout; i++) {
                double want = reference(c, &d, dev->coord, g.rank, g.size, idx);
                if (test_load(c->dtype, out, i) != want)
                    c->errors[dev->id]++;
                c->checked[dev->id]++;
                for (int32_t k = 2; k >= 0 && ++idx[k] == d.out_shape[k]; k--)
                    idx[k] = 0;
            }
            rt_free(dev, in);
            rt_free(dev, out);
        }
    }
}

/* Runs every kind and dim for each dtype on the group `axes` of `mesh`. */
static void run_case(int32_t naxes_mesh, const int64_t *sizes, int32_t naxes,
                     const int32_t *axes)
{
    rt_program p;
    memset(&p, 0, sizeof p);
    p.abi_version = RT_ABI_VERSION;
    p.naxes = naxes_mesh;
    memcpy(p.axis_names, "XYZW", RT_MAX_AXES);
    memcpy(p.axis_sizes, sizes, (size_t)naxes_mesh * sizeof *sizes);
    p.run = test_noop_run;
    int64_t n = rt_mesh_size(&p);
    for (int32_t dtype = RT_F32; dtype <= RT_BF16; dtype++) {
        config c = {.prog = &p, .naxes = naxes, .dtype = dtype};
        memcpy(c.axes, axes, (size_t)naxes * sizeof *axes);
        c.errors = calloc((size_t)n, sizeof *c.errors);
        c.checked = calloc((size_t)n, sizeof *c.checked);
        rt_threads_launch(&p, 0, device_fn, &c);
        int64_t errors = 0, checked = 0;
        for (int64_t i = 0; i < n; i++) {
            errors += c.errors[i];
            checked += c.checked[i];
        }
        CU_ASSERT_EQUAL(errors, 0);
        CU_ASSERT(checked > 0);
        if (errors)
            fprintf(stderr, "\n  mesh of %lld devices, %d group axes (first %d), %s: %lld of %lld "
                    "elements wrong\n", (long long)n, naxes, axes[0], rt_dtype_name(dtype),
                    (long long)errors, (long long)checked);
        free(c.errors);
        free(c.checked);
    }
}

static void test_1d_meshes(void)
{
    static const int64_t sizes[][1] = {{1}, {2}, {4}, {8}};
    const int32_t x[] = {0};
    for (int i = 0; i < 4; i++)
        run_case(1, sizes[i], 1, x);
}

static void test_2d_mesh_one_axis(void)
{
    const int64_t sizes[] = {2, 4};
    const int32_t x[] = {0}, y[] = {1};
    run_case(2, sizes, 1, x);
    run_case(2, sizes, 1, y);
}

static void test_2d_mesh_both_axes(void)
{
    const int64_t sizes[] = {2, 4};
    const int32_t xy[] = {0, 1}, yx[] = {1, 0};
    run_case(2, sizes, 2, xy);
    run_case(2, sizes, 2, yx);
}

static void test_3d_mesh(void)
{
    const int64_t sizes[] = {2, 2, 2};
    const int32_t y[] = {1}, z[] = {2}, xz[] = {0, 2}, zy[] = {2, 1}, xyz[] = {0, 1, 2};
    run_case(3, sizes, 1, y);
    run_case(3, sizes, 1, z);
    run_case(3, sizes, 2, xz);
    run_case(3, sizes, 2, zy);
    run_case(3, sizes, 3, xyz);
}

static void test_axis_of_size_one(void)
{
    const int64_t sizes[] = {1, 4};
    const int32_t x[] = {0}, xy[] = {0, 1};
    run_case(2, sizes, 1, x);
    run_case(2, sizes, 2, xy);
}

/* The AllReduce slices cover the array exactly, also when G does not divide n. */
static void test_slice_ranges(void)
{
    for (int64_t n = 0; n < 20; n++)
        for (int64_t G = 1; G <= 8; G++) {
            int64_t next = 0;
            for (int64_t r = 0; r < G; r++) {
                int64_t lo, hi;
                rt_slice_range(n, G, r, &lo, &hi);
                CU_ASSERT_EQUAL(lo, next);
                CU_ASSERT(hi >= lo && hi - lo <= n / G + 1);
                next = hi;
            }
            CU_ASSERT_EQUAL(next, n);
        }
}

/* bf16 sums are done in f32 and rounded once. */
static void test_bf16_sum_in_f32(void)
{
    uint16_t a[1] = {rt_f32_to_bf16(1.0f)};
    uint16_t b[1] = {rt_f32_to_bf16(0x1p-8f)};
    const void *srcs[3] = {a, b, b};
    uint16_t out[1];
    rt_sum_arrays(RT_BF16, out, srcs, 3, 1);
    /* In f32, 1 + 2^-8 + 2^-8 = 1 + 2^-7, exact in bf16 (8 significant bits);
     * rounding after each addition would give 1 (1 + 2^-8 ties to even). */
    CU_ASSERT_EQUAL(rt_bf16_to_f32(out[0]), 1.0078125f);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"1D meshes of 1, 2, 4, 8 devices", test_1d_meshes},
        {"2D mesh 2x4, groups over X and over Y", test_2d_mesh_one_axis},
        {"2D mesh 2x4, groups over XY and YX", test_2d_mesh_both_axes},
        {"3D mesh 2x2x2, groups over 1, 2, 3 axes", test_3d_mesh},
        {"mesh axis of size 1", test_axis_of_size_one},
        {"AllReduce slice ranges", test_slice_ranges},
        {"bf16 sums in f32", test_bf16_sum_in_f32},
    };
    einc_add_suite("runtime collectives (threads)", tests, (int)(sizeof tests / sizeof tests[0]));
}
