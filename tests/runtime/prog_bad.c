/*
 * prog_bad.c - a hand-written `einc_program` whose device 0 calls an
 * AllReduce with a descriptor that contradicts its group (output shape
 * differs from the input) while the other devices call a correct one and
 * wait for it.  The runtime must print an error naming the device and op
 * and end the whole job with status 1, never hang (einrt.h "Errors").
 */
#include "einrt.h"

static void run(rt_device *dev, void *const *in, void *const *out)
{
    int bad = rt_coord(dev, 0) == 0;
    rt_coll_desc d = {.kind = RT_ALLREDUCE, .dtype = RT_F32, .naxes = 1, .axes = {0},
                      .rank = 1, .in_shape = {4}, .out_shape = {bad ? 3 : 4}, .dim = -1,
                      .dim2 = -1, .op_id = 17};
    rt_collective(dev, &d, in[0], out[0]);
}

static const rt_tensor_desc inputs[] = {
    {.name = "x", .dtype = RT_F32, .rank = 1, .global_shape = {4}, .local_shape = {4}},
};
static const rt_tensor_desc outputs[] = {
    {.name = "y", .dtype = RT_F32, .rank = 1, .global_shape = {4}, .local_shape = {4}},
};

const rt_program einc_program = {
    .abi_version = RT_ABI_VERSION, .naxes = 1, .axis_names = {'X'}, .axis_sizes = {4},
    .ninputs = 1, .inputs = inputs, .noutputs = 1, .outputs = outputs, .run = run,
    .source_name = "prog_bad.ein",
};
