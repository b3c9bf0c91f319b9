/*
 * fuzz_compile.c - the whole compile to IR: the frontend, then the default
 * pass pipeline (autodiff, propagate, pipeline, regather, meshslice, cost), as `einc --dump-ir` runs it.
 *
 * Programs whose mesh has more than 64 devices or a dim larger than 2^16
 * stop after the frontend: the passes' work grows with those sizes (the
 * cost model's MeshSlice search tries every slice count), and the point is
 * many inputs a second, not a few huge ones; the frontend harness covers
 * sizes of any magnitude.  A pipeline that fails must say why (an error
 * reported); one that succeeds must leave IR that verifies and prints.
 * Inputs may carry -D overrides in leading `#@ -D NAME=VALUE` lines.
 */
#include <stdbool.h>

#include "fuzz_pipeline.h"

/* The largest mesh (devices) and dim run through the passes. */
#define MAX_PASS_DEVICES 64
#define MAX_PASS_DIM (INT64_C(1) << 16)

/* Whether `m` is small enough for the passes (see the essay above). */
static bool small_enough(const ir_module *m)
{
    if (ir_mesh_devices(&m->mesh) > MAX_PASS_DEVICES)
        return false;
    for (int i = 0; i < m->ndims; i++)
        if (m->dims[i].size > MAX_PASS_DIM)
            return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_options o;
    fuzz_read_options(data, size, &o);
    fuzz_diag fd;
    fuzz_diag_open(&fd, data, size);
    ir_module *m = fe_compile((const char *)data, size, &o.fe, &fd.d);
    if (m && small_enough(m))
        fuzz_run_pipeline(m, &fd, NULL);
    else
        fuzz_diag_close(&fd);
    fuzz_diag_free(&fd);
    ir_module_free(m);
    return 0;
}
