/*
 * prog_bad.c - hand-written `einc_program`s that go wrong mid-run, on a 2x2
 * mesh, to check that the runtime ends the job with a message and status 1
 * and never hangs (einrt.h "Errors"):
 *
 *   default      device (0, 0) calls an AllReduce over X whose descriptor
 *                contradicts its group (output shape differs from the
 *                input) while its peer waits in a correct one;
 *   -DBAD_REDUCE_OP  device (0, 0) calls an AllReduce over X with
 *                reduce_op 7 (no such operator) while its peer waits in an
 *                AllReduce(MAX);
 *   -DDEADLOCK   not SPMD: device (0, 0) calls an AllReduce over X while the
 *                others call one over Y.  The Y group {(1,0), (1,1)}
 *                completes, but (0,0) and (0,1) wait for each other in
 *                different groups forever; the threads backend must detect
 *                that every device is blocked.
 */
#include "einrt.h"

static void run(rt_device *dev, void *const *in, void *const *out)
{
    int first = rt_coord(dev, 0) == 0 && rt_coord(dev, 1) == 0;
    rt_coll_desc d = {.kind = RT_ALLREDUCE, .dtype = RT_F32, .naxes = 1, .axes = {0},
                      .rank = 1, .in_shape = {4}, .out_shape = {4}, .dim = -1, .dim2 = -1,
                      .op_id = 17};
#if defined(DEADLOCK)
    d.axes[0] = first ? 0 : 1;
#elif defined(BAD_REDUCE_OP)
    d.reduce_op = first ? 7 : RT_REDUCE_MAX;
#else
    d.out_shape[0] = first ? 3 : 4;
#endif
    rt_collective(dev, &d, in[0], out[0]);
}

static const rt_tensor_desc inputs[] = {
    {.name = "x", .dtype = RT_F32, .rank = 1, .global_shape = {4}, .local_shape = {4}},
};
static const rt_tensor_desc outputs[] = {
    {.name = "y", .dtype = RT_F32, .rank = 1, .global_shape = {4}, .local_shape = {4}},
};

const rt_program einc_program = {
    .abi_version = RT_ABI_VERSION, .naxes = 2, .axis_names = {'X', 'Y'}, .axis_sizes = {2, 2},
    .ninputs = 1, .inputs = inputs, .noutputs = 1, .outputs = outputs, .run = run,
    .source_name = "prog_bad.ein",
};
