/*
 * fuzz_compile.c - the whole compile to IR: the frontend, then the default
 * pass pipeline (propagate, regather, meshslice, cost), as `einc --dump-ir` runs it.
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

#include "fuzz_ein.h"
#include "pass.h"

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
    if (m && small_enough(m)) {
        pass_registry reg;
        pass_registry_init(&reg);
        pass_manager pm;
        memset(&pm, 0, sizeof pm);
        pm.registry = &reg;
        pm.dump = fd.d.out;
        FUZZ_CHECK(pass_manager_parse(&pm, PASS_DEFAULT_PIPELINE, fd.d.out) == 0,
                   "the default pipeline does not parse");
        /* hw NULL: the cost passes use their default profile. */
        pass_ctx ctx = {.diag = &fd.d};
        int before = fd.d.nerrors;
        int rc = pass_manager_run(&pm, &ctx, m);
        bool verified = rc == 0 && ir_verify(m, &fd.d) == 0;
        if (verified)
            ir_print(fd.d.out, m);
        pass_registry_free(&reg);
        fuzz_diag_close(&fd);
        FUZZ_CHECK(rc != 0 || verified, "the pipeline left IR that does not verify:\n%s",
                   fd.text);
        FUZZ_CHECK(rc == 0 || fd.d.nerrors > before, "the pipeline failed without an error:\n%s",
                   fd.text);
    } else {
        fuzz_diag_close(&fd);
    }
    fuzz_diag_free(&fd);
    ir_module_free(m);
    return 0;
}
