/*
 * companion.c - a second program linked into one executable beside the
 * main one: `einc target.ein --draft draft.ein [--draft-define N=V] -o exe`
 * compiles draft.ein (its own plan on its own mesh; its own --check
 * reference inside its object) to a temporary object whose rt_program is
 * `einc_program_draft` (cg_options.symbol), which the main program's link
 * takes as an extra object.  The runtime finds it through a weak
 * reference (runtime/main.c) and runs it as the draft of speculative
 * decoding (--speculate K, docs/generation.md).  The mechanism is general
 * (a symbol, an object, a weak reference); a chunked-prefill program
 * would be a second companion symbol.
 *
 * Before anything is emitted the draft is checked against the main
 * program where the two must agree for a draft to propose tokens the
 * target verifies: one floating-point logits output each ([B, V] or
 * [B, 1, V] for the draft, [B, W, V] for the target), the same vocabulary
 * V and the same batch B.  The draft's mesh must be the target's (same
 * axis sizes) or a single device (each device then runs the whole draft).
 * A mismatch is a compile error at the draft's output (or mesh) line.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "companion.h"
#include "driver.h"

/* The one floating-point output of rank 2 or 3 of `m` (the logits), NULL
 * when there is none or several. */
static const ir_output *logits_of(const ir_module *m)
{
    const ir_output *found = NULL;
    for (int i = 0; i < m->noutputs; i++) {
        const ir_type *t = &m->outputs[i].value->type;
        if (m->outputs[i].update || ir_dtype_integer(t->dtype) || t->rank < 2 || t->rank > 3)
            continue;
        if (found)
            return NULL;
        found = &m->outputs[i];
    }
    return found;
}

static int64_t dim_size(const ir_module *m, const ir_output *o, int k)
{
    const ir_type *t = &o->value->type;
    return m->dims[t->dims[k < 0 ? t->rank + k : k]].size;
}

static int64_t mesh_devices(const ir_module *m)
{
    int64_t n = 1;
    for (int a = 0; a < m->mesh.naxes; a++)
        n *= m->mesh.axes[a].size;
    return n;
}

/* Whether the draft's mesh is the target's (the same sizes in order) or
 * one device. */
static bool mesh_fits(const ir_module *draft, const ir_module *target)
{
    if (mesh_devices(draft) == 1)
        return true;
    if (draft->mesh.naxes != target->mesh.naxes)
        return false;
    for (int a = 0; a < draft->mesh.naxes; a++)
        if (draft->mesh.axes[a].size != target->mesh.axes[a].size)
            return false;
    return true;
}

int drv_companion_check(const ir_module *draft, const ir_module *target, diag_ctx *dd,
                        const char *target_name)
{
    const ir_output *dl = logits_of(draft), *tl = logits_of(target);
    uint32_t at = draft->noutputs ? draft->outputs[0].loc : DIAG_NOLOC;
    if (!dl || (dl->value->type.rank == 3 && dim_size(draft, dl, 1) != 1)) {
        diag_error(dd, dl ? dl->loc : at, "draft: a draft program needs one floating-point "
                   "output of logits [B, V] or [B, 1, V] (compile a windowed draft with -D T=1)");
        return -1;
    }
    if (!tl || tl->value->type.rank != 3) {
        diag_error(dd, dl->loc, "draft: the target '%s' needs one floating-point output of "
                   "logits [B, W, V] (a window of W = K + 1 new tokens) to verify a draft's "
                   "tokens", target_name);
        return -1;
    }
    int64_t dv = dim_size(draft, dl, -1), tv = dim_size(target, tl, -1);
    int64_t db = dim_size(draft, dl, 0), tb = dim_size(target, tl, 0);
    if (dv != tv || db != tb) {
        diag_error(dd, dl->loc, "draft: logits '%s' are [B = %lld, V = %lld], and the target "
                   "'%s' has '%s' [B = %lld, ..., V = %lld]: a draft must share the target's %s",
                   dl->name, (long long)db, (long long)dv, target_name, tl->name, (long long)tb,
                   (long long)tv, dv != tv ? "vocabulary" : "batch");
        return -1;
    }
    if (!mesh_fits(draft, target)) {
        diag_error(dd, draft->mesh.naxes ? draft->mesh.axes[0].loc : at, "draft: its mesh must "
                   "be the target's (the same axis sizes) or one device: the draft runs on the "
                   "target's devices");
        return -1;
    }
    return 0;
}

int drv_companion_emit(ir_module *draft, ir_module *reference, const cg_options *base,
                       diag_ctx *dd, char *obj, size_t objlen)
{
    snprintf(obj, objlen, "%s.draft-XXXXXX.o", base->output);
    int fd = mkstemps(obj, 2);
    if (fd < 0) {
        snprintf(obj, objlen, "/tmp/einc-draft-XXXXXX.o");
        fd = mkstemps(obj, 2);
    }
    if (fd < 0) {
        diag_error(dd, DIAG_NOLOC, "cannot create a temporary object file for the draft");
        return -1;
    }
    close(fd);
    cg_options co = *base;
    co.output = obj;
    co.kind = CG_EMIT_OBJ;
    co.symbol = DRV_DRAFT_SYMBOL;
    co.extra_objs = NULL;
    co.nextra_objs = 0;
    if (cg_emit(draft, reference, &co, dd) != 0) {
        unlink(obj);
        return -1;
    }
    return 0;
}
