/*
 * prog_tp.c - a hand-written `einc_program` for the end-to-end tests of the
 * runtime, standing in for what codegen emits (runtime/einrt.h).
 *
 * Mesh X=2, Y=2.  Inputs x[B_X, D] (input) and w[D, F_Y] (param),
 * B=8, D=6, F=12, of dtype DT (f32 unless built with -DDT=RT_F64 or RT_BF16).  Per device:
 *   h = einsum(bd,df->bf)(x, w)            h[B_X, F_Y]
 *   y = AllGather_Y(h, dim 1)              y[B_X, F]          (output y)
 *   p = einsum(bd,df->f)(x, w)             p[F_Y]{U_X}
 *   u = AllReduce_X(p)                     u[F_Y]             (output u)
 *   v = ReduceScatter_X(p, dim 0)          v[F_YX]            (output v)
 *   t = AllToAll_X(h, dim 0, dim2 1)       t[B, F_YX]         (output t)
 *   s = Slice_X(w, dim 0) then einsum      s[D_X, F_Y] -> sum over D of s,
 *       AllReduce_X                        q[F_Y]             (output q)
 * so NumPy expects y = t = x @ w, u = v = sum_b (x @ w), q = 2 sum_d w.
 * The reference program is the same code on a 1x1 mesh, where every
 * collective is the identity.
 */
#include <string.h>

#include "einrt.h"

enum { B = 8, D = 6, F = 12 };

#ifndef DT
#define DT RT_F32
#endif
/* Bytes per element of DT. */
#define ES (DT == RT_F64 ? 8 : DT == RT_BF16 ? 2 : 4)

/* Sizes of one program variant: the mesh axis sizes. */
typedef struct variant { int64_t nx, ny; } variant;

static void run_variant(rt_device *dev, void *const *in, void *const *out, variant v)
{
    const int64_t bl = B / v.nx, fl = F / v.ny;
    const void *x = in[0], *w = in[1];
    void *h = rt_alloc(dev, bl * fl * ES);
    rt_einsum_desc e1 = {.dtype = DT, .noperands = 2, .rank = {2, 2, 2},
                         .shape = {{bl, D}, {D, fl}, {bl, fl}},
                         .labels = {{0, 1}, {1, 2}, {0, 2}}, .alpha = 1.0, .op_id = 0};
    rt_op_begin(dev, 0);
    rt_einsum(dev, &e1, x, w, h);
    rt_op_end(dev, 0);
    rt_coll_desc ag = {.kind = RT_ALLGATHER, .dtype = DT, .naxes = 1, .axes = {1}, .rank = 2,
                       .in_shape = {bl, fl}, .out_shape = {bl, F}, .dim = 1, .dim2 = -1,
                       .op_id = 1};
    rt_collective(dev, &ag, h, out[0]);

    void *p = rt_alloc(dev, fl * ES);
    rt_einsum_desc e2 = e1;
    e2.rank[2] = 1;
    e2.shape[2][0] = fl;
    e2.labels[2][0] = 2;
    e2.op_id = 2;
    rt_einsum(dev, &e2, x, w, p);
    rt_coll_desc ar = {.kind = RT_ALLREDUCE, .dtype = DT, .naxes = 1, .axes = {0}, .rank = 1,
                       .in_shape = {fl}, .out_shape = {fl}, .dim = -1, .dim2 = -1, .op_id = 3};
    rt_collective(dev, &ar, p, out[1]);
    rt_coll_desc rs = {.kind = RT_REDUCESCATTER, .dtype = DT, .naxes = 1, .axes = {0},
                       .rank = 1, .in_shape = {fl}, .out_shape = {fl / v.nx}, .dim = 0,
                       .dim2 = -1, .op_id = 4};
    rt_collective(dev, &rs, p, out[2]);
    rt_coll_desc aa = {.kind = RT_ALLTOALL, .dtype = DT, .naxes = 1, .axes = {0}, .rank = 2,
                       .in_shape = {bl, fl}, .out_shape = {B, fl / v.nx}, .dim = 0, .dim2 = 1,
                       .op_id = 5};
    rt_collective(dev, &aa, h, out[3]);

    void *ws = rt_alloc(dev, D / v.nx * fl * ES), *q = rt_alloc(dev, fl * ES);
    rt_coll_desc sl = {.kind = RT_SLICE, .dtype = DT, .naxes = 1, .axes = {0}, .rank = 2,
                       .in_shape = {D, fl}, .out_shape = {D / v.nx, fl}, .dim = 0, .dim2 = -1,
                       .op_id = 6};
    rt_collective(dev, &sl, w, ws);
    rt_einsum_desc e3 = {.dtype = DT, .noperands = 1, .rank = {2, 0, 1},
                         .shape = {{D / v.nx, fl}, {0}, {fl}}, .labels = {{1, 2}, {0}, {2}},
                         .alpha = 2.0, .op_id = 7};
    rt_einsum(dev, &e3, ws, NULL, q);
    rt_coll_desc ar2 = ar;
    ar2.op_id = 8;
    rt_collective(dev, &ar2, q, out[4]);
    rt_free(dev, ws);
    rt_free(dev, q);
    rt_free(dev, p);
    rt_free(dev, h);
}

static void run_sharded(rt_device *dev, void *const *in, void *const *out)
{
    run_variant(dev, in, out, (variant){2, 2});
}

static void run_reference(rt_device *dev, void *const *in, void *const *out)
{
    run_variant(dev, in, out, (variant){1, 1});
}

/* Descriptors of a variant: sharded when s == 2, global when s == 1. */
#define TENSORS(s)                                                                              \
    {                                                                                           \
        {.name = "x", .dtype = DT, .rank = 2, .global_shape = {B, D},                       \
         .local_shape = {B / s, D}, .dim_naxes = {s > 1, 0}, .dim_axes = {{0}, {0}}},           \
        {.name = "w", .dtype = DT, .rank = 2, .global_shape = {D, F},                       \
         .local_shape = {D, F / s}, .dim_naxes = {0, s > 1}, .dim_axes = {{0}, {1}},            \
         .role = RT_ROLE_PARAM},                                                                        \
    }
#define OUTPUTS(s)                                                                              \
    {                                                                                           \
        {.name = "y", .dtype = DT, .rank = 2, .global_shape = {B, F},                       \
         .local_shape = {B / s, F}, .dim_naxes = {s > 1, 0}, .dim_axes = {{0}, {0}}},           \
        {.name = "u", .dtype = DT, .rank = 1, .global_shape = {F}, .local_shape = {F / s},  \
         .dim_naxes = {s > 1}, .dim_axes = {{1}}},                                              \
        {.name = "v", .dtype = DT, .rank = 1, .global_shape = {F},                          \
         .local_shape = {F / s / s}, .dim_naxes = {s > 1 ? 2 : 0}, .dim_axes = {{1, 0}}},       \
        {.name = "t", .dtype = DT, .rank = 2, .global_shape = {B, F},                       \
         .local_shape = {B, F / s / s}, .dim_naxes = {0, s > 1 ? 2 : 0},                        \
         .dim_axes = {{0}, {1, 0}}},                                                            \
        {.name = "q", .dtype = DT, .rank = 1, .global_shape = {F}, .local_shape = {F / s},  \
         .dim_naxes = {s > 1}, .dim_axes = {{1}}},                                              \
    }

static const rt_tensor_desc ref_inputs[] = TENSORS(1);
static const rt_tensor_desc ref_outputs[] = OUTPUTS(1);
static const rt_tensor_desc inputs[] = TENSORS(2);
static const rt_tensor_desc outputs[] = OUTPUTS(2);

static const rt_program reference = {
    .abi_version = RT_ABI_VERSION, .naxes = 2, .axis_names = {'X', 'Y'}, .axis_sizes = {1, 1},
    .ninputs = 2, .inputs = ref_inputs, .noutputs = 5, .outputs = ref_outputs,
    .run = run_reference, .reference = NULL, .info = "(reference)\n",
    .source_name = "prog_tp.ein",
};

const rt_program einc_program = {
    .abi_version = RT_ABI_VERSION, .naxes = 2, .axis_names = {'X', 'Y'}, .axis_sizes = {2, 2},
    .ninputs = 2, .inputs = inputs, .noutputs = 5, .outputs = outputs, .run = run_sharded,
    .reference = &reference, .info = "y = AllGather_Y(x @ w)  (hand-written test program)\n",
    .source_name = "prog_tp.ein",
};
