/*
 * wrong_grad_pass.c - a deliberately wrong pass, loaded with --load-pass by
 * train_eval.py to show that --check catches a wrong gradient in a
 * training run (docs/runtime.md, "--check on training").
 *
 * `negate-grad` flips the sign of the first einsum of the backward pass
 * (a classic autodiff bug), but only in a module whose mesh has more than
 * one device: einc compiles the --check reference through the same
 * pipeline on one device, so the reference keeps the right gradient and
 * only the sharded program is wrong.  A sign is the error to inject
 * because AdamW's update is invariant to a positive scale of the gradient.
 */
#include "pass.h"

static int negate_grad(pass_ctx *ctx, ir_module *m)
{
    (void)ctx;
    int64_t devices = 1;
    for (int a = 0; a < m->mesh.naxes; a++)
        devices *= m->mesh.axes[a].size;
    if (devices == 1)
        return 0;
    for (ir_op *op = m->first; op; op = op->next)
        if (op->kind == IR_OP_EINSUM && op->phase == IR_PHASE_BACKWARD) {
            op->u.einsum.scale = -op->u.einsum.scale;
            return 0;
        }
    return 0;
}

static const pass_info plugin_passes[] = {
    {"negate-grad", "flip the sign of the first backward einsum on a mesh of >1 device (a test's "
                    "wrong gradient)", negate_grad, NULL, 0},
};

__attribute__((visibility("default"))) const pass_info *einc_pass_plugin(int *count);

const pass_info *einc_pass_plugin(int *count)
{
    *count = 1;
    return plugin_passes;
}
