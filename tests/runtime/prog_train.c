/*
 * prog_train.c - a hand-written training program (`einc_program` with
 * trains = 1) for the end-to-end tests of the runtime's training loop,
 * standing in for what codegen will emit for
 *
 *   input x[B, D], y[B]; param W[D]
 *   pred = x . W;  loss = mean((pred - y)^2)
 *   optimize W with sgd(lr = 0.05, momentum = 0.9)
 *
 * Mesh X=2, Y=2: the batch is split over X (data parallel) and D over Y
 * (W, its momentum and x's columns: model parallel), B=8, D=6.  One call
 * of `run` is one step, per device:
 *
 *   pp[B_X]{U_Y} = einsum(bd,d->b)(x, W)       op 0
 *   pred[B_X]    = AllReduce_Y(pp)             op 1   (output pred)
 *   r            = pred - y                    local
 *   ls{U_X}      = sum_b r^2 / B               local
 *   loss         = AllReduce_X(ls)             op 2   (output loss, replicated)
 *   gp[D_Y]{U_X} = (2/B) einsum(bd,b->d)(x, r) op 3
 *   g[D_Y]       = AllReduce_X(gp)             op 4
 *   W.mom = 0.9 W.mom + g;  W = W - 0.05 W.mom;  step = step + 1   (in place)
 *
 * W.mom is an optimizer state, `step` a scalar state counting the steps.
 * The reference is the same code on a 1x1 mesh.  Variants (compile-time):
 *   -DBROKEN_GRAD  the sharded run forgets op 4 (each X half keeps its own
 *                  partial gradient): the reference is right, --check must fail;
 *   -DFAIL_AT=n    device (0, 0) calls op 4 with a wrong descriptor in step n
 *                  (`step` holds n - 1 then): the job must end with a message;
 *   -DPAUSE_AT=n   device (0, 0) sleeps for a minute at the start of step n,
 *                  its peers waiting in op 1: a run that a test kills with
 *                  SIGKILL mid-run at a known point (after the lines and
 *                  checkpoints of the steps before n), never too early or late.
 */
#include <string.h>
#include <unistd.h>

#include "einrt.h"

enum { B = 8, D = 6 };
#define LR 0.05f
#define MU 0.9f

/* Sizes of one program variant: the mesh axis sizes. */
typedef struct variant { int64_t nx, ny; } variant;

static void step(rt_device *dev, void *const *in, void *const *out, variant v)
{
    const int64_t bl = B / v.nx, dl = D / v.ny;
    const float *x = in[0], *y = in[1];
    float *w = in[2], *mom = in[3], *count = in[4];
    float *loss = out[0], *pred = out[1];

#ifdef PAUSE_AT
    if (*count + 1 == PAUSE_AT && rt_coord(dev, 0) == 0 && rt_coord(dev, 1) == 0)
        sleep(60);
#endif
    float *pp = rt_alloc(dev, bl * (int64_t)sizeof(float));
    rt_einsum_desc e1 = {.dtype = RT_F32, .noperands = 2, .rank = {2, 1, 1},
                         .shape = {{bl, dl}, {dl}, {bl}}, .labels = {{0, 1}, {1}, {0}},
                         .alpha = 1.0, .op_id = 0};
    rt_op_begin(dev, 0);
    rt_einsum(dev, &e1, x, w, pp);
    rt_op_end(dev, 0);
    rt_coll_desc ar_y = {.kind = RT_ALLREDUCE, .dtype = RT_F32, .naxes = 1, .axes = {1},
                         .rank = 1, .in_shape = {bl}, .out_shape = {bl}, .dim = -1,
                         .dim2 = -1, .op_id = 1};
    rt_collective(dev, &ar_y, pp, pred);

    float *r = rt_alloc(dev, bl * (int64_t)sizeof(float));
    float *ls = rt_alloc(dev, sizeof(float));
    *ls = 0;
    for (int64_t b = 0; b < bl; b++) {
        r[b] = pred[b] - y[b];
        *ls += r[b] * r[b] / B;
    }
    rt_coll_desc ar_loss = {.kind = RT_ALLREDUCE, .dtype = RT_F32, .naxes = 1, .axes = {0},
                            .rank = 0, .dim = -1, .dim2 = -1, .op_id = 2};
    rt_collective(dev, &ar_loss, ls, loss);

    float *gp = rt_alloc(dev, dl * (int64_t)sizeof(float));
    float *g = rt_alloc(dev, dl * (int64_t)sizeof(float));
    rt_einsum_desc e2 = {.dtype = RT_F32, .noperands = 2, .rank = {2, 1, 1},
                         .shape = {{bl, dl}, {bl}, {dl}}, .labels = {{0, 1}, {0}, {1}},
                         .alpha = 2.0 / B, .op_id = 3};
    rt_einsum(dev, &e2, x, r, gp);
    rt_coll_desc ar_g = {.kind = RT_ALLREDUCE, .dtype = RT_F32, .naxes = 1, .axes = {0},
                         .rank = 1, .in_shape = {dl}, .out_shape = {dl}, .dim = -1,
                         .dim2 = -1, .op_id = 4};
#ifdef FAIL_AT
    if (*count + 1 == FAIL_AT && rt_coord(dev, 0) == 0 && rt_coord(dev, 1) == 0)
        ar_g.out_shape[0] = dl + 1; /* the runtime refuses it: a failing device */
#endif
#ifdef BROKEN_GRAD
    if (v.nx > 1)
        memcpy(g, gp, (size_t)dl * sizeof(float));
    else
#endif
        rt_collective(dev, &ar_g, gp, g);

    for (int64_t d = 0; d < dl; d++) {
        mom[d] = MU * mom[d] + g[d];
        w[d] -= LR * mom[d];
    }
    *count += 1;
    rt_free(dev, g);
    rt_free(dev, gp);
    rt_free(dev, ls);
    rt_free(dev, r);
    rt_free(dev, pp);
}

static void run_sharded(rt_device *dev, void *const *in, void *const *out)
{
    step(dev, in, out, (variant){2, 2});
}

static void run_reference(rt_device *dev, void *const *in, void *const *out)
{
    step(dev, in, out, (variant){1, 1});
}

/* Descriptors of a variant: sharded when s == 2, global when s == 1. */
#define INPUTS(s)                                                                               \
    {                                                                                           \
        {.name = "x", .dtype = RT_F32, .rank = 2, .global_shape = {B, D},                      \
         .local_shape = {B / s, D / s}, .dim_naxes = {s > 1, s > 1}, .dim_axes = {{0}, {1}}},   \
        {.name = "y", .dtype = RT_F32, .rank = 1, .global_shape = {B}, .local_shape = {B / s}, \
         .dim_naxes = {s > 1}, .dim_axes = {{0}}},                                              \
        {.name = "W", .dtype = RT_F32, .rank = 1, .global_shape = {D}, .local_shape = {D / s}, \
         .dim_naxes = {s > 1}, .dim_axes = {{1}}, .role = RT_ROLE_PARAM},                       \
        {.name = "W.mom", .dtype = RT_F32, .rank = 1, .global_shape = {D},                     \
         .local_shape = {D / s}, .dim_naxes = {s > 1}, .dim_axes = {{1}},                       \
         .role = RT_ROLE_STATE},                                                                \
        {.name = "step", .dtype = RT_F32, .rank = 0, .role = RT_ROLE_STATE},                   \
    }
#define OUTPUTS(s)                                                                              \
    {                                                                                           \
        {.name = "loss", .dtype = RT_F32, .rank = 0},                                          \
        {.name = "pred", .dtype = RT_F32, .rank = 1, .global_shape = {B},                      \
         .local_shape = {B / s}, .dim_naxes = {s > 1}, .dim_axes = {{0}}},                      \
    }

static const rt_tensor_desc ref_inputs[] = INPUTS(1);
static const rt_tensor_desc ref_outputs[] = OUTPUTS(1);
static const rt_tensor_desc inputs[] = INPUTS(2);
static const rt_tensor_desc outputs[] = OUTPUTS(2);

static const rt_program reference = {
    .abi_version = RT_ABI_VERSION, .naxes = 2, .axis_names = {'X', 'Y'}, .axis_sizes = {1, 1},
    .ninputs = 5, .inputs = ref_inputs, .noutputs = 2, .outputs = ref_outputs,
    .run = run_reference, .reference = NULL, .info = "(reference)\n",
    .source_name = "prog_train.ein", .loss_output = 0, .trains = 1,
};

const rt_program einc_program = {
    .abi_version = RT_ABI_VERSION, .naxes = 2, .axis_names = {'X', 'Y'}, .axis_sizes = {2, 2},
    .ninputs = 5, .inputs = inputs, .noutputs = 2, .outputs = outputs, .run = run_sharded,
    .reference = &reference,
    .info = "linear regression, SGD with momentum (hand-written test program)\n",
    .source_name = "prog_train.ein", .loss_output = 0, .trains = 1,
};
