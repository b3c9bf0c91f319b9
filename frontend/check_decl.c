/*
 * check_decl.c - declarations: mesh axes, dims, -D overrides, inputs and
 * params, shardings in the seeds' notation, and output lines.
 *
 * Mesh and dim lines are collected first (fe_check_sizes), so they may
 * appear anywhere in a file; tensors must be defined before they are used.
 * Sharding rules (seed 001, "sharded matmuls", notation section): `I_XY`
 * splits dim I over mesh axes X then Y; a mesh axis shards at most one dim
 * of a tensor (and may not both shard a dim and hold unreduced sums); a
 * dim's global size must divide by the product of its axes' sizes, since
 * every device holds an equal block.
 */
#include <inttypes.h>
#include <string.h>

#include "checked.h"
#include "fe_internal.h"

/* The most devices a mesh may have: as many as every einc executable can
 * run.  It must equal RT_MAX_DEVICES (runtime/rt_internal.h: the threads
 * backend runs one thread per device and sizes its tables by it, and both
 * backends refuse a larger program when it starts).  A larger mesh used to
 * compile into a program that could never run.  tests/e2e/bad_inputs.py
 * builds a mesh of exactly this many devices, checks that the executable
 * accepts it, and that einc refuses one device more. */
#define MAX_DEVICES FE_MAX_DEVICES_EXE

int fe_dim_lookup(const fe_checker *c, const char *name)
{
    intptr_t v = (intptr_t)fe_symtab_get(&c->dims, name);
    return (int)v - 1;
}

/* The size written in `d` (or its -D override); -1 after an error. */
static int64_t size_of(fe_checker *c, const ast_sizedef *d, const char *what)
{
    int64_t size = -1;
    const ast_number *n = &d->size;
    if (!n->is_int)
        diag_error(c->diag, n->loc, "size of %s '%s' must be an integer, not '%s'", what,
                   d->name.s, n->text);
    else if (n->overflow)
        diag_error(c->diag, n->loc, "size of %s '%s' (%s%s) does not fit in 64 bits", what,
                   d->name.s, d->negative ? "-" : "", n->text);
    else if (d->negative || n->ival <= 0)
        diag_error(c->diag, n->loc, "size of %s '%s' must be at least 1, not %s%s", what,
                   d->name.s, d->negative && n->ival ? "-" : "", n->text);
    else
        size = n->ival;
    for (int i = 0; i < c->opts->ndefines; i++)
        if (c->opts->defines[i].name && strcmp(c->opts->defines[i].name, d->name.s) == 0) {
            c->define_used[i] = true;
            if (c->opts->defines[i].value >= 1)
                size = c->opts->defines[i].value;
        }
    return size;
}

/* Checks the placement `over K` / `over dcn` of mesh axis `ax` (declared
 * size `size`, < 1 when that was already reported) and records it.  A
 * folded axis needs at least one device per physical axis (K <= size) and
 * a torus has at most IR_MAX_PHYS axes; how the size splits over them is
 * the cost model's business (as evenly as its divisors allow). */
static void set_placement(fe_checker *c, const ast_sizedef *d, ir_axis *ax, int64_t size)
{
    if (strcmp(d->over.s, "over") != 0) {
        diag_error(c->diag, d->over.loc, "expected 'over' or ',' after the size of mesh axis '%c', "
                   "not '%s'", ax->name, d->over.s);
        return;
    }
    if (d->where.s) {
        if (strcmp(d->where.s, "dcn") != 0)
            diag_error(c->diag, d->where.loc, "mesh axis '%c' can be 'over' a number of physical "
                       "axes (1 to %d) or 'over dcn', not 'over %s'", ax->name, IR_MAX_PHYS, d->where.s);
        else
            ax->dcn = true;
        return;
    }
    const ast_number *n = &d->phys;
    if (!n->is_int || n->is_inf || n->overflow || n->ival < 1 || n->ival > IR_MAX_PHYS) {
        diag_error(c->diag, n->loc, "mesh axis '%c' can be folded over 1 to %d physical axes, not %s",
                   ax->name, IR_MAX_PHYS, n->text);
        return;
    }
    if (size >= 1 && n->ival > size) {
        diag_error(c->diag, n->loc, "mesh axis '%c' of %" PRId64 " devices cannot span %s physical "
                   "axes: each needs at least one device", ax->name, size, n->text);
        return;
    }
    ax->phys = (int)n->ival;
}

/* `mesh auto`: the mesh and the shardings are auto-sharding's to choose
 * (driver/plan.c); compiling such a program needs --chips, which the
 * driver checks.  Any other word after 'mesh' is a typo of it or of an
 * axis definition. */
static void mesh_auto(fe_checker *c, const ast_name *w)
{
    if (strcmp(w->s, "auto") != 0) {
        diag_error(c->diag, w->loc, "expected 'mesh auto' or mesh axes like 'mesh X = 2, Y = 4', not 'mesh %s'",
                   w->s);
        return;
    }
    if (c->m->mesh.is_auto) {
        diag_error(c->diag, w->loc, "'mesh auto' is written twice");
        return;
    }
    c->m->mesh.is_auto = true;
    c->m->mesh.auto_loc = w->loc;
}

static void add_axis(fe_checker *c, const ast_sizedef *d)
{
    int64_t size = size_of(c, d, "mesh axis");
    char ch = d->name.s[0];
    if (d->name.s[1] != '\0') {
        diag_error(c->diag, d->name.loc, "mesh axis name '%s' must be a single letter",
                   d->name.s);
        return;
    }
    int old = ir_mesh_find_axis(&c->m->mesh, ch);
    if (old >= 0) {
        diag_error(c->diag, d->name.loc, "mesh axis '%c' is already defined", ch);
        diag_note(c->diag, c->m->mesh.axes[old].loc, "previous definition of '%c' is here", ch);
        return;
    }
    /* A bad size still defines the axis (as 1), so that shardings over it
     * are not reported as undefined as well, and no later check computes
     * with the rejected size. */
    int id = ir_mesh_add_axis(c->m, ch, size < 1 ? 1 : size, d->name.loc);
    if (id < 0) {
        diag_error(c->diag, d->name.loc, "mesh axis '%c' is one too many: a mesh has at most %d axes",
                   ch, IR_MAX_AXES);
        return;
    }
    if (d->over.s)
        set_placement(c, d, &c->m->mesh.axes[id], size);
}

static void add_dim(fe_checker *c, const ast_sizedef *d)
{
    int64_t size = size_of(c, d, "dim");
    if (d->over.s)
        diag_error(c->diag, d->over.loc, "a dim has no placement: 'over' is only for mesh axes "
                   "(expected ',' or the end of the line after the size of '%s')", d->name.s);
    int old = fe_dim_lookup(c, d->name.s);
    if (old >= 0) {
        diag_error(c->diag, d->name.loc, "dim '%s' is already defined", d->name.s);
        diag_note(c->diag, c->m->dims[old].loc, "previous definition of '%s' is here", d->name.s);
        return;
    }
    /* A bad size still defines the dim (as 1) so that its uses are not
     * reported as undefined as well. */
    int id = ir_dim_add(c->m, d->name.s, size < 1 ? 1 : size, d->name.loc);
    fe_symtab_put(c->arena, &c->dims, c->m->dims[id].name, (void *)(intptr_t)(id + 1));
}

/* Reports a mesh of more than MAX_DEVICES devices (FE_MAX_DEVICES_COST
 * for a cost-only compile) at the axis that makes it too large, naming
 * every axis and the limit; the axes then get size 1,
 * so no later check divides by a size already rejected (or by a product
 * that does not fit in 64 bits). */
static void check_mesh_size(fe_checker *c)
{
    ir_mesh *mesh = &c->m->mesh;
    int64_t devices = 1, limit = c->opts->cost_only ? FE_MAX_DEVICES_COST : MAX_DEVICES;
    int over = -1;
    for (int a = 0; a < mesh->naxes && over < 0; a++) {
        devices = ir_size_mul(devices, mesh->axes[a].size, NULL);
        if (devices > limit)
            over = a;
    }
    if (over < 0)
        return;
    char count[32], names[4 * IR_MAX_AXES + 1] = "", sizes[24 * IR_MAX_AXES] = "";
    for (int a = 0; a < mesh->naxes; a++) {
        size_t nl = strlen(names), sl = strlen(sizes);
        snprintf(names + nl, sizeof names - nl, "%s%c", a ? "*" : "", mesh->axes[a].name);
        snprintf(sizes + sl, sizeof sizes - sl, "%s%" PRId64, a ? "*" : "", mesh->axes[a].size);
    }
    devices = ir_mesh_devices(mesh);
    if (devices == IR_SIZE_HUGE)
        snprintf(count, sizeof count, "more than 2^63");
    else
        snprintf(count, sizeof count, "%" PRId64, devices);
    if (c->opts->cost_only)
        diag_error(c->diag, mesh->axes[over].loc,
                   "the mesh %s = %s has %s devices, but einc prices meshes of at most %" PRId64
                   " devices (an einc executable runs at most %d)", names, sizes, count, limit, MAX_DEVICES);
    else
        diag_error(c->diag, mesh->axes[over].loc,
                   "the mesh %s = %s has %s devices, but an einc executable runs at most %d%s", names, sizes,
                   count, MAX_DEVICES, devices <= FE_MAX_DEVICES_COST ? " (without -o einc prices it: "
                   "--dump-cost, --explain, einc analyze)" : "");
    for (int a = 0; a < mesh->naxes; a++)
        mesh->axes[a].size = 1;
}

void fe_check_sizes(fe_checker *c, const ast_program *prog)
{
    for (int i = 0; i < c->opts->ndefines; i++)
        if (!c->opts->defines[i].name) {
            diag_error(c->diag, DIAG_NOLOC, "-D override without a name");
            c->define_used[i] = true;
        } else if (c->opts->defines[i].value < 1) {
            /* Only a caller of the library gets here: the einc command
             * refuses such a -D itself, as a usage error (docs/language.md). */
            diag_error(c->diag, DIAG_NOLOC, "-D %s=%" PRId64 ": a size must be at least 1",
                       c->opts->defines[i].name, c->opts->defines[i].value);
            c->define_used[i] = true; /* one error for it is enough */
        }
    for (int i = 0; i < prog->nstmts; i++) {
        const ast_stmt *s = prog->stmts[i];
        if (s->kind != AST_S_MESH && s->kind != AST_S_DIM)
            continue;
        if (s->kind == AST_S_MESH && s->u.sizes.n == 0)
            mesh_auto(c, &s->u.sizes.word);
        for (int k = 0; k < s->u.sizes.n; k++) {
            if (s->kind == AST_S_MESH)
                add_axis(c, s->u.sizes.defs[k]);
            else
                add_dim(c, s->u.sizes.defs[k]);
        }
    }
    for (int i = 0; i < c->opts->ndefines; i++)
        if (!c->define_used[i])
            diag_error(c->diag, DIAG_NOLOC, "-D %s=%" PRId64 " names no dim or mesh axis of this program",
                       c->opts->defines[i].name, c->opts->defines[i].value);
    if (c->m->mesh.is_auto && c->m->mesh.naxes > 0)
        diag_error(c->diag, c->m->mesh.auto_loc, "'mesh auto' leaves the mesh to einc, and this program also "
                   "declares mesh axes: keep one of the two");
    const fe_autoshard *a = c->opts->autoshard;
    if (a && a->keep_mesh)
        ; /* the declared mesh stays (einc analyze) */
    else if (a && c->m->mesh.naxes > 0)
        diag_error(c->diag, c->m->mesh.axes[0].loc, "auto-sharding (--chips) plans the mesh itself: remove "
                   "the 'mesh' line, or compile without --chips");
    else if (a)
        for (int k = 0; k < a->naxes && k < IR_MAX_AXES; k++)
            ir_mesh_add_axis(c->m, a->names[k], a->sizes[k], DIAG_NOLOC);
    check_mesh_size(c);
}

bool fe_resolve_indices(fe_checker *c, ast_tref *t, bool repeats, bool rhs)
{
    bool ok = true;
    for (int i = 0; i < t->nidx; i++) {
        ast_index *x = &t->idx[i];
        if (x->window.s) {
            diag_error(c->diag, x->window.loc, "'%s:%s' writes rows at positions %s, %s+1, ...: "
                       "it is only allowed on the left side of a write into a state", x->name,
                       x->window.s, x->name, x->name);
            ok = false;
            continue;
        }
        if (x->tensor) {
            if (!rhs) {
                diag_error(c->diag, x->loc, "a tensor as an index ('%s[%s[...]]') is only allowed "
                           "on the right side of a statement", t->name.s, x->name);
                ok = false;
            }
            continue; /* on a right side fe_check_ref resolves it */
        }
        x->dim = fe_dim_lookup(c, x->name);
        if (x->dim < 0) {
            diag_error(c->diag, x->loc, "dim '%s' is not defined", x->name);
            ok = false;
            continue;
        }
        for (int j = 0; j < i && !repeats; j++)
            if (t->idx[j].dim == x->dim) {
                diag_error(c->diag, x->loc, "index '%s' is repeated in '%s'", x->name, t->name.s);
                ok = false;
                break;
            }
    }
    return ok;
}

/* Adds the axes written in `letters` (at `loc`) to *used, checking each
 * exists and is not used yet; appends them to dim `d` of *sh unless d < 0
 * (then they are unreduced axes). */
static bool add_axes(fe_checker *c, const ast_tref *t, const char *letters, uint32_t loc,
                     int d, ir_axes *used, ir_sharding *sh)
{
    bool ok = true;
    for (int k = 0; letters[k]; k++) {
        int a = ir_mesh_find_axis(&c->m->mesh, letters[k]);
        if (a < 0) {
            diag_error(c->diag, loc + (uint32_t)k, "mesh axis '%c' is not defined", letters[k]);
            ok = false;
        } else if (*used & (1u << a)) {
            diag_error(c->diag, loc + (uint32_t)k,
                       "mesh axis '%c' is used twice in the sharding of '%s'", letters[k],
                       t->name.s);
            ok = false;
        } else {
            *used |= 1u << a;
            if (d >= 0)
                ir_sharding_push(sh, d, a);
            else
                sh->unreduced |= 1u << a;
        }
    }
    return ok;
}

bool fe_check_sharding(fe_checker *c, const ast_tref *t, ir_sharding *out)
{
    ir_sharding sh = ir_sharding_replicated();
    ir_axes used = 0;
    bool ok = true;
    for (int i = 0; i < t->nidx && i < IR_MAX_RANK; i++) {
        const ast_index *x = &t->idx[i];
        if (!x->axes)
            continue;
        if (!add_axes(c, t, x->axes, x->axes_loc, i, &used, &sh)) {
            ok = false;
            continue;
        }
        if (x->dim < 0 || sh.naxes[i] == 0)
            continue;
        int64_t size = c->m->dims[x->dim].size;
        int64_t parts = ir_sharding_dim_parts(&sh, &c->m->mesh, i);
        if (size % parts == 0)
            continue;
        char names[64] = "", sizes[128] = "";
        for (int k = 0; k < sh.naxes[i]; k++) {
            const ir_axis *ax = &c->m->mesh.axes[sh.axes[i][k]];
            size_t nl = strlen(names), sl = strlen(sizes);
            snprintf(names + nl, sizeof names - nl, "%s%c", k ? "*" : "", ax->name);
            snprintf(sizes + sl, sizeof sizes - sl, "%s%" PRId64, k ? "*" : "", ax->size);
        }
        diag_error(c->diag, x->loc,
                   "dim '%s' (%" PRId64 ") is not divisible by the %s of its mesh axes %s = %s",
                   x->name, size, sh.naxes[i] > 1 ? "product" : "size", names, sizes);
        ok = false;
    }
    for (int i = 0; i < t->nunred; i++) {
        const ast_index *x = &t->unred[i];
        if (strcmp(x->name, "U") != 0) {
            diag_error(c->diag, x->loc,
                       "unreduced axes are written '{U_%s}', not '{%s_%s}'", x->axes, x->name,
                       x->axes);
            ok = false;
            continue;
        }
        if (!add_axes(c, t, x->axes, x->axes_loc, -1, &used, &sh))
            ok = false;
    }
    *out = sh;
    return ok;
}

bool fe_check_shape(fe_checker *c, const char *name, uint32_t loc, ir_dtype dt, int rank,
                    const int *dims)
{
    if (rank > IR_MAX_RANK) {
        diag_error(c->diag, loc, "tensor '%s' has %d dims; at most %d are supported", name, rank,
                   IR_MAX_RANK);
        return false;
    }
    int64_t bytes = (int64_t)ir_dtype_size(dt);
    bool overflow = false;
    for (int i = 0; i < rank; i++)
        if (dims[i] >= 0)
            bytes = ir_size_mul(bytes, c->m->dims[dims[i]].size, &overflow);
    if (overflow)
        diag_error(c->diag, loc, "tensor '%s' is too large: its size in bytes overflows 64 bits",
                   name);
    return !overflow;
}

fe_tensor *fe_define_tensor(fe_checker *c, ast_name name, ir_value_kind kind)
{
    fe_tensor *old = fe_symtab_get(&c->tensors, name.s);
    if (old) {
        diag_error(c->diag, name.loc, "tensor '%s' is already defined", name.s);
        diag_note(c->diag, old->loc, "previous definition of '%s' is here", name.s);
        return NULL;
    }
    fe_tensor *t = ir_alloc(c->arena, sizeof *t);
    t->name = name.s;
    t->kind = kind;
    t->loc = name.loc;
    fe_symtab_put(c->arena, &c->tensors, t->name, t);
    return t;
}

/* f32, f64, bf16, i32, i8 (ir_dtype_name spells them); false if `s` is none. */
static bool dtype_parse(const char *s, ir_dtype *out)
{
    static const ir_dtype all[] = {IR_F32, IR_F64, IR_BF16, IR_I32, IR_I8};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(s, ir_dtype_name(all[i])) == 0) {
            *out = all[i];
            return true;
        }
    return false;
}

void fe_check_decl(fe_checker *c, ast_stmt *s)
{
    ast_tref *r = &s->u.decl.tref;
    ir_value_kind kind = s->kind == AST_S_INPUT   ? IR_VAL_INPUT
                         : s->kind == AST_S_PARAM ? IR_VAL_PARAM
                                                  : IR_VAL_STATE;
    const char *what = ir_value_kind_name(kind);
    fe_tensor *t = fe_define_tensor(c, r->name, kind);
    bool ok = true;
    ir_dtype dt = IR_F32;
    if (!dtype_parse(s->u.decl.dtype.s, &dt)) {
        diag_error(c->diag, s->u.decl.dtype.loc, "unknown dtype '%s' (expected f32, f64, bf16, i32 or i8)",
                   s->u.decl.dtype.s);
        ok = false;
    } else if (dt == IR_I32 && kind == IR_VAL_STATE) {
        diag_error(c->diag, s->u.decl.dtype.loc, "state '%s' is i32: a state is f32, f64, bf16 or i8",
                   r->name.s);
        ok = false;
    }
    /* A square weight W[D, D] is fine: uses relabel one of the positions. */
    if (!fe_resolve_indices(c, r, true, false))
        ok = false;
    if (r->nunred > 0) {
        diag_error(c->diag, r->unred_loc,
                   "%s '%s' cannot hold unreduced partial sums: '{U_..}' is only allowed on left sides",
                   what, r->name.s);
        ok = false;
    }
    int dims[IR_MAX_RANK + 1];
    int rank = r->nidx;
    for (int i = 0; i < rank && i <= IR_MAX_RANK; i++)
        dims[i] = r->idx[i].dim;
    if (!fe_check_shape(c, r->name.s, r->name.loc, dt, rank, dims))
        ok = false;
    ir_sharding sh = ir_sharding_replicated();
    if (ok && !fe_check_sharding(c, r, &sh))
        ok = false;
    bool written = false;
    for (int i = 0; i < r->nidx; i++)
        written |= r->idx[i].axes != NULL;
    const fe_autoshard *a = c->opts->autoshard;
    if (ok && a && (!written || a->keep_mesh) && rank <= IR_MAX_RANK) {
        sh = ir_sharding_replicated();
        a->assign(a->ctx, c->m, kind, r->name.s, rank, dims, &sh);
    }
    if (!t)
        return;
    r->sym = t;
    t->dtype = dt;
    t->rank = rank <= IR_MAX_RANK ? rank : IR_MAX_RANK;
    memcpy(t->dims, dims, (size_t)t->rank * sizeof *dims);
    t->sh = sh;
    t->bad = !ok;
}

void fe_check_outputs(fe_checker *c, const ast_program *prog)
{
    for (int i = 0; i < prog->nstmts; i++) {
        ast_stmt *s = prog->stmts[i];
        if (s->kind == AST_S_BAD && s->u.bad.output)
            c->noutputs++; /* an output line with a syntax error */
        if (s->kind != AST_S_OUTPUT)
            continue;
        ast_tref *r = &s->u.output.tref;
        c->noutputs++;
        ast_stmt *prev = fe_symtab_get(&c->outputs, r->name.s);
        if (prev) {
            diag_error(c->diag, r->name.loc, "'%s' is already an output", r->name.s);
            diag_note(c->diag, prev->u.output.tref.name.loc, "previous output line of '%s' is here",
                      r->name.s);
            continue;
        }
        fe_symtab_put(c->arena, &c->outputs, r->name.s, s);
        if (r->nidx < 0) {
            r->sym = fe_symtab_get(&c->tensors, r->name.s);
            if (!r->sym)
                diag_error(c->diag, r->name.loc, "tensor '%s' is not defined", r->name.s);
            else if (!r->sym->bad && !fe_check_scope(c, r->sym, r->name.loc))
                continue;
        } else if (!fe_check_ref(c, r, true, NULL)) {
            continue;
        }
        /* An i32 output is a computed one (argmax's positions): ids given
         * as inputs are the caller's already. */
        if (r->sym && !r->sym->bad && r->sym->dtype == IR_I32 && r->sym->kind != IR_VAL_OP) {
            diag_error(c->diag, r->name.loc, "output '%s' is an i32 %s: an i32 output is computed, "
                       "like 'Next[B] = argmax(Logits[B, V], V)'", r->name.s,
                       ir_value_kind_name(r->sym->kind));
            continue;
        }
        if (r->nidx < 0 || !r->sym || r->sym->bad)
            continue;
        if (r->nunred > 0) {
            diag_error(c->diag, r->unred_loc,
                       "output '%s' cannot hold unreduced partial sums", r->name.s);
            continue;
        }
        ir_sharding sh;
        (void)fe_check_sharding(c, r, &sh);
    }
    if (c->noutputs == 0 && !c->loss)
        diag_error(c->diag, DIAG_NOLOC, "the program has no 'output' line, so it computes nothing");
}
