/*
 * companion.c - a second program linked into one executable beside the
 * main one: `einc target.ein --draft draft.ein [--draft-define N=V] -o exe`
 * compiles draft.ein (its own plan on its own mesh; its own --check
 * reference inside its object) to a temporary object whose rt_program is
 * `einc_program_draft` (cg_options.symbol), which the main program's link
 * takes as an extra object.  The runtime finds it through a weak
 * reference (runtime/main.c) and runs it as the draft of speculative
 * decoding (--speculate K, docs/generation.md).  `einc serve.ein --prefill
 * P.ein [--prefill-define N=V]` links a chunked-prefill program the same
 * way as `einc_program_prefill`, which --serve runs when slots have
 * prompts to read (runtime/engine.c; drv_prefill_check below checks it).
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
                       const char *symbol, diag_ctx *dd, char *obj, size_t objlen)
{
    snprintf(obj, objlen, "%s.companion-XXXXXX.o", base->output);
    int fd = mkstemps(obj, 2);
    if (fd < 0) {
        snprintf(obj, objlen, "/tmp/einc-companion-XXXXXX.o");
        fd = mkstemps(obj, 2);
    }
    if (fd < 0) {
        diag_error(dd, DIAG_NOLOC, "cannot create a temporary object file for %s", symbol);
        return -1;
    }
    close(fd);
    cg_options co = *base;
    co.output = obj;
    co.kind = CG_EMIT_OBJ;
    co.symbol = symbol;
    co.extra_objs = NULL;
    co.nextra_objs = 0;
    if (cg_emit(draft, reference, &co, dd) != 0) {
        unlink(obj);
        return -1;
    }
    return 0;
}

/* The argument (input, param or state) named `name` of m, or NULL. */
static const ir_value *argument(const ir_module *m, const char *name)
{
    for (int i = 0; i < m->nvalues; i++)
        if (ir_value_kind_is_argument(m->values[i]->kind) && !strcmp(m->values[i]->tensor, name))
            return m->values[i];
    return NULL;
}

/* Whether a and b (of modules ma, mb) have the same sizes, dtype and
 * sharding. */
static bool same_layout(const ir_module *ma, const ir_value *a, const ir_module *mb,
                        const ir_value *b)
{
    if (a->type.rank != b->type.rank || a->type.dtype != b->type.dtype ||
        !ir_sharding_equal(&a->type.sh, &b->type.sh, a->type.rank))
        return false;
    for (int d = 0; d < a->type.rank; d++)
        if (ma->dims[a->type.dims[d]].size != mb->dims[b->type.dims[d]].size)
            return false;
    return true;
}

/* Whether m writes a state at one position per row (`KC[B, At[B], ...]`). */
static bool has_row_write(const ir_module *m)
{
    for (const ir_op *op = m->first; op; op = op->next)
        if (op->kind == IR_OP_UPDATESLICE && op->u.update.row >= 0)
            return true;
    return false;
}

/* The prefill's inputs: one i32 [B, W] (the window's tokens) and one i32
 * [B] (each row's position), nothing else the engine does not feed. */
static int check_prefill_inputs(const ir_module *pf, diag_ctx *dd)
{
    int tokens = 0, rows = 0;
    for (int i = 0; i < pf->nvalues; i++) {
        const ir_value *v = pf->values[i];
        if (v->kind != IR_VAL_INPUT)
            continue;
        bool tok = v->type.dtype == IR_I32 && v->type.rank == 2 && !tokens;
        bool pos = v->type.dtype == IR_I32 && v->type.rank == 1 && !rows;
        tokens += tok;
        rows += pos && !tok;
        if (!tok && !pos) {
            diag_error(dd, v->loc, "prefill: input '%s' is neither the window's tokens (i32 [B, "
                       "W]) nor the rows' positions (i32 [B]): the engine feeds only those",
                       v->tensor);
            return -1;
        }
    }
    if (tokens && rows)
        return 0;
    diag_error(dd, pf->noutputs ? pf->outputs[0].loc : DIAG_NOLOC, "prefill: a prefill program "
               "takes the window's tokens (input i32 [B, W]) and one position per row (input "
               "i32 [B], written like 'KC[B, At[B]:W, ...]')");
    return -1;
}

int drv_prefill_check(const ir_module *pf, const ir_module *main, diag_ctx *dd,
                      const char *main_name)
{
    const ir_output *pl = logits_of(pf), *ml = logits_of(main);
    uint32_t at = pf->noutputs ? pf->outputs[0].loc : DIAG_NOLOC;
    if (!pl || pl->value->type.rank != 3) {
        diag_error(dd, pl ? pl->loc : at, "prefill: a prefill program needs one floating-point "
                   "output of logits [B, W, V] (a window of W tokens per row)");
        return -1;
    }
    int64_t pb = dim_size(pf, pl, 0), pv = dim_size(pf, pl, -1);
    if (ml && (dim_size(main, ml, 0) != pb || dim_size(main, ml, -1) != pv)) {
        diag_error(dd, pl->loc, "prefill: logits '%s' are [B = %lld, W, V = %lld], and '%s' has "
                   "'%s' [B = %lld, V = %lld]: the prefill must share its batch and vocabulary",
                   pl->name, (long long)pb, (long long)pv, main_name, ml->name,
                   (long long)dim_size(main, ml, 0), (long long)dim_size(main, ml, -1));
        return -1;
    }
    if (mesh_devices(pf) != mesh_devices(main) || !mesh_fits(pf, main)) {
        diag_error(dd, pf->mesh.naxes ? pf->mesh.axes[0].loc : at, "prefill: its mesh must be "
                   "the one of '%s' (the same axis sizes): both programs run on the same "
                   "devices over the same caches", main_name);
        return -1;
    }
    if (check_prefill_inputs(pf, dd))
        return -1;
    if (!has_row_write(main)) {
        diag_error(dd, at, "prefill: '%s' writes no state at one position per row (like "
                   "'KC[B, At[B], K, H]'): chunked prefill serves a decode program with "
                   "continuous batching", main_name);
        return -1;
    }
    for (int i = 0; i < pf->nvalues; i++) {
        const ir_value *v = pf->values[i];
        if (v->kind != IR_VAL_PARAM && v->kind != IR_VAL_STATE)
            continue;
        const ir_value *w = argument(main, v->tensor);
        if (!w || w->kind != v->kind || !same_layout(pf, v, main, w)) {
            diag_error(dd, v->loc, "prefill: %s '%s' must be a %s of '%s' with the same shape, "
                       "dtype and sharding%s: the prefill reads the model's params and writes its "
                       "caches in place", ir_value_kind_name(v->kind), v->tensor,
                       ir_value_kind_name(v->kind), main_name, w ? "" : " (it has none)");
            return -1;
        }
    }
    for (int i = 0; i < main->nvalues; i++) {
        const ir_value *w = main->values[i];
        if (w->kind == IR_VAL_STATE && !argument(pf, w->tensor)) {
            diag_error(dd, at, "prefill: '%s' has the state '%s' and the prefill does not: a "
                       "prefill writes every cache the decode step reads", main_name, w->tensor);
            return -1;
        }
    }
    return 0;
}
