/*
 * check_loop.c - repeated blocks: `repeat L { ... }`.
 *
 * A block's lines run once per index l of dim L (a layer).  Inside it:
 *
 *  - a tensor declared with L as its first dim (`param Wq[L, D, N_Y, H]`)
 *    is written without that dim (`Wq[D, N, H]`) and stands for layer l;
 *    written with all its dims it is an error.  A stacked tensor whose L is
 *    sharded over a mesh axis Z (`param W[L_Z, D_X, F_Y]`, seed 000's
 *    notation) makes the block a pipeline over Z: each stage of Z holds and
 *    runs its |L|/Z layers (docs/pipeline.md; fe_check_pipeline checks the
 *    whole program once the block is read);
 *  - an assignment to a tensor defined before the block updates it: that
 *    tensor is carried from one iteration to the next (the residual stream).
 *    A block carries exactly one tensor, updates it once, and keeps its shape
 *    (dims of the same sizes, in order; the left side may relabel them) and
 *    dtype.  Lines before the update read the value the
 *    iteration started with, lines after it the new one, and after the block
 *    the name stands for the value after the last iteration;
 *  - every other tensor a block defines is local to it: a use after the
 *    block is an error.
 *
 * Blocks do not nest.  Inputs and params are declared outside blocks.
 */
#include <string.h>

#include "fe_internal.h"

void fe_check_repeat(fe_checker *c, ast_stmt *s)
{
    if (c->repeat) {
        diag_error(c->diag, s->loc, "a 'repeat' block cannot be nested in another one");
        diag_note(c->diag, c->repeat->loc, "the enclosing 'repeat' block starts here");
        c->skip_ends++;
        return;
    }
    c->repeat = s;
    c->block = ++c->nblocks;
    s->u.repeat.carry = NULL;
    if (!s->u.repeat.dim.s)
        return; /* a syntax error, already reported */
    s->u.repeat.dim_id = fe_dim_lookup(c, s->u.repeat.dim.s);
    if (s->u.repeat.dim_id < 0)
        diag_error(c->diag, s->u.repeat.dim.loc, "dim '%s' is not defined", s->u.repeat.dim.s);
}

void fe_check_end(fe_checker *c, ast_stmt *s)
{
    if (c->skip_ends > 0) {
        c->skip_ends--;
        return;
    }
    if (!c->repeat) {
        diag_error(c->diag, s->loc, "'}' closes no 'repeat' block");
        return;
    }
    ast_stmt *r = c->repeat;
    if (!r->u.repeat.carry && r->u.repeat.dim_id >= 0)
        diag_error(c->diag, r->loc,
                   "this 'repeat' block updates no tensor defined before it, so repeating it has no "
                   "effect: assign to one, like 'X[...] = X[...] + ...'");
    c->repeat = NULL;
    c->block = 0;
}

void fe_check_blocks_closed(fe_checker *c)
{
    if (c->repeat)
        diag_error(c->diag, c->repeat->loc, "this 'repeat' block is not closed: end it with a line '}'");
}

/* "[B, T, D]": the dim names of `dims` into buf. */
static const char *dims_str(const fe_checker *c, const int *dims, int rank, char *buf, size_t size)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, size - n, "[");
    for (int i = 0; i < rank && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "",
                              dims[i] >= 0 ? c->m->dims[dims[i]].name : "?");
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

bool fe_check_update(fe_checker *c, ast_stmt *s, const int *dims, int rank, ir_dtype dt,
                     bool constrained, const ir_sharding *sh, bool ok)
{
    ast_tref *l = &s->u.assign.lhs;
    if (!c->repeat)
        return false;
    fe_tensor *old = fe_symtab_get(&c->tensors, l->name.s);
    if (!old || old->block != 0)
        return false; /* a new local, or a redefinition (fe_define_tensor reports it) */
    s->u.assign.update = true;
    s->u.assign.constrained = constrained;
    s->u.assign.sh = *sh;
    ast_stmt *r = c->repeat;
    fe_tensor *carry = r->u.repeat.carry;
    if (carry == old) {
        diag_error(c->diag, l->name.loc, "'%s' is already updated in this 'repeat' block", l->name.s);
        return true;
    }
    if (carry) {
        diag_error(c->diag, l->name.loc,
                   "a 'repeat' block carries one tensor from one iteration to the next, and this "
                   "one already carries '%s': '%s' cannot be updated too", carry->name, l->name.s);
        return true;
    }
    r->u.repeat.carry = old;
    if (old->bad || !ok)
        return true;
    char b1[256], b2[256];
    /* Its left side may relabel dims of the same size (`X[B, E] = X[B, D]
     * * W[D, E]` with |E| = |D|), as any reference may. */
    bool same = old->rank == rank;
    for (int i = 0; same && i < rank; i++)
        same = dims[i] >= 0 && c->m->dims[dims[i]].size == c->m->dims[old->dims[i]].size;
    if (!same)
        diag_error(c->diag, l->name.loc,
                   "'%s' is carried by the 'repeat' block with shape %s, but is updated with shape %s: "
                   "a carried tensor keeps its shape", l->name.s,
                   dims_str(c, old->dims, old->rank, b1, sizeof b1), dims_str(c, dims, rank, b2, sizeof b2));
    else if (old->dtype != dt)
        diag_error(c->diag, l->name.loc, "'%s' is %s, but its update in the 'repeat' block is %s",
                   l->name.s, ir_dtype_name(old->dtype), ir_dtype_name(dt));
    else if (r->u.repeat.dim_id >= 0 && ir_value_kind_is_argument(old->kind) &&
             old->rank >= 1 && old->dims[0] == r->u.repeat.dim_id)
        diag_error(c->diag, l->name.loc, "'%s' is stacked on '%s', the dim the block repeats over: "
                   "it cannot also be carried", l->name.s, r->u.repeat.dim.s);
    return true;
}

bool fe_check_pipeline_ref(fe_checker *c, const ast_tref *t, const fe_tensor *s, int L)
{
    ir_pipeline *pp = &c->m->pipe;
    const char *ln = c->m->dims[L].name;
    if (s->sh.naxes[0] > 1) {
        diag_error(c->diag, t->name.loc, "'%s' splits its layers '%s' over %d mesh axes: a pipeline "
                   "runs its stages along one axis", t->name.s, ln, s->sh.naxes[0]);
        diag_note(c->diag, s->loc, "'%s' is declared here", t->name.s);
        return false;
    }
    int a = s->sh.axes[0][0];
    if (pp->axis < 0) {
        pp->axis = a;
        pp->dim = L;
        pp->loc = s->loc;
        pp->stacked = s->name;
        return true;
    }
    if (pp->axis != a || pp->dim != L) {
        diag_error(c->diag, t->name.loc, "'%s' pipelines '%s' over mesh axis %c, but '%s' already "
                   "pipelines '%s' over %c: a program has one pipeline", t->name.s, ln,
                   c->m->mesh.axes[a].name, pp->stacked, c->m->dims[pp->dim].name,
                   c->m->mesh.axes[pp->axis].name);
        diag_note(c->diag, pp->loc, "'%s' is declared here", pp->stacked);
        return false;
    }
    return true;
}

bool fe_check_layer_ref(fe_checker *c, ast_tref *t, const fe_tensor *s)
{
    t->layer = false;
    if (!c->repeat && !s->bad && ir_value_kind_is_argument(s->kind) && s->rank >= 1 &&
        s->sh.naxes[0] > 0) {
        /* Read whole outside every block: an error if the block over its
         * first dim turns out to be a pipeline (fe_check_pipeline). */
        fe_tensor *w = fe_symtab_get(&c->tensors, s->name);
        if (w && !w->whole_read)
            w->whole_read = t->name.loc + 1;
    }
    if (!c->repeat || s->bad || !ir_value_kind_is_argument(s->kind) || s->rank < 1)
        return true;
    const ast_stmt *r = c->repeat;
    int L = r->u.repeat.dim_id;
    if (L < 0) { /* an unknown dim, reported: take the likely meaning, quietly */
        t->layer = t->nidx == s->rank - 1;
        return true;
    }
    const char *ln = r->u.repeat.dim.s;
    char b[256];
    if (t->nidx == s->rank - 1) {
        if (s->dims[0] != L) {
            diag_error(c->diag, t->name.loc,
                       "tensor '%s' has %d dims but %d are given; inside 'repeat %s' that would be one "
                       "layer of a tensor stacked on '%s', but the first dim of '%s' is '%s'",
                       t->name.s, s->rank, t->nidx, ln, ln, t->name.s, c->m->dims[s->dims[0]].name);
            return false;
        }
        if (s->sh.naxes[0] > 0 && !fe_check_pipeline_ref(c, t, s, L))
            return false;
        t->layer = true;
        return true;
    }
    if (t->nidx == s->rank && s->dims[0] == L) {
        diag_error(c->diag, t->name.loc,
                   "inside 'repeat %s', '%s' stands for the current layer: write it without its "
                   "first dim '%s', like '%s%s'", ln, t->name.s, ln, t->name.s,
                   dims_str(c, s->dims + 1, s->rank - 1, b, sizeof b));
        return false;
    }
    return true;
}

bool fe_check_scope(fe_checker *c, const fe_tensor *s, uint32_t loc)
{
    if (!s->block || s->block == c->block)
        return true;
    diag_error(c->diag, loc, "tensor '%s' is local to a 'repeat' block and is not available outside it",
               s->name);
    diag_note(c->diag, s->loc, "'%s' is defined here", s->name);
    return false;
}

/* Error at `loc` if `t` uses the pipeline's axis for anything but its
 * stacked layer dim. */
static void pipeline_axis_use(fe_checker *c, const fe_tensor *t, bool stacked)
{
    const ir_pipeline *pp = &c->m->pipe;
    char zn = c->m->mesh.axes[pp->axis].name;
    for (int d = stacked ? 1 : 0; d < t->rank; d++)
        for (int k = 0; k < t->sh.naxes[d]; k++)
            if (t->sh.axes[d][k] == pp->axis) {
                diag_error(c->diag, t->loc, "mesh axis %c runs the stages of the pipeline over '%s' "
                           "(the layers of '%s'): it cannot also shard '%s' of '%s'", zn,
                           c->m->dims[pp->dim].name, pp->stacked, c->m->dims[t->dims[d]].name, t->name);
                diag_note(c->diag, pp->loc, "'%s' pipelines its layers over %c here", pp->stacked, zn);
                return;
            }
    if (t->sh.unreduced & (1u << pp->axis))
        diag_error(c->diag, t->loc, "mesh axis %c runs the stages of the pipeline: '%s' cannot hold "
                   "partial sums over it", zn, t->name);
}

/* A state of a pipelined program is a per-layer cache that each stage
 * keeps for its own layers (a prefill's KV cache, docs/pipeline.md
 * "States"): stacked on the pipelined L, in a program that does not
 * train.  Reports and returns false otherwise.  That its dim after L is
 * the batch the microbatches split is the pipeline pass's check (it
 * finds the batch dim). */
static bool state_ok(fe_checker *c, const ast_program *prog, const fe_tensor *t, bool stacked)
{
    const ir_pipeline *pp = &c->m->pipe;
    const char *ln = c->m->dims[pp->dim].name;
    char zn = c->m->mesh.axes[pp->axis].name;
    if (!stacked) {
        diag_error(c->diag, t->loc, "'%s' is a state of a program pipelined over %c, whose stages keep "
                   "their own layers' state: declare it stacked on '%s' (its first dim, '%s[%s_%c, ...]') "
                   "and write it in the 'repeat %s' block", t->name, zn, ln, t->name, ln, zn, ln);
        diag_note(c->diag, pp->loc, "'%s' pipelines its layers over %c here", pp->stacked, zn);
        return false;
    }
    for (int i = 0; i < prog->nstmts; i++) {
        const ast_stmt *s = prog->stmts[i];
        if (s->kind == AST_S_LOSS || s->kind == AST_S_OPTIMIZE) {
            diag_error(c->diag, t->loc, "'%s' is a state, and a pipelined program that trains keeps "
                       "none: a state is written at a run-time position and cannot be differentiated; "
                       "pipeline the inference program (a prefill writing its caches) instead", t->name);
            diag_note(c->diag, s->loc, "the program trains here");
            return false;
        }
    }
    return true;
}

void fe_check_pipeline(fe_checker *c, const ast_program *prog)
{
    const ir_pipeline *pp = &c->m->pipe;
    if (pp->axis < 0)
        return;
    /* That the layers divide over the stages is the declaration's check
     * of every sharded dim (check_decl.c). */
    const ir_axis *z = &c->m->mesh.axes[pp->axis];
    const ir_dimdef *L = &c->m->dims[pp->dim];
    const ast_stmt *first = NULL;
    for (int i = 0; i < prog->nstmts; i++) {
        const ast_stmt *s = prog->stmts[i];
        if (s->kind != AST_S_REPEAT)
            continue;
        if (first) {
            diag_error(c->diag, s->loc, "a pipelined program has one 'repeat' block, whose layers the "
                       "stages share: this is a second one");
            diag_note(c->diag, first->loc, "the pipelined block is here");
        }
        first = s;
    }
    for (int i = 0; i < c->tensors.cap; i++) {
        const fe_tensor *t = c->tensors.keys[i] ? c->tensors.vals[i] : NULL;
        if (!t || t->bad)
            continue;
        bool stacked = ir_value_kind_is_argument(t->kind) && t->rank >= 1 && t->dims[0] == pp->dim;
        if (t->kind == IR_VAL_STATE && !state_ok(c, prog, t, stacked))
            continue;
        if (stacked && t->sh.naxes[0] == 0) { /* split otherwise: fe_check_pipeline_ref said so */
            diag_error(c->diag, t->loc, "'%s' is stacked on '%s', whose layers '%s' pipelines over %c: "
                       "write its '%s' as '%s_%c' so that each stage holds its own layers", t->name,
                       L->name, pp->stacked, z->name, L->name, L->name, z->name);
            diag_note(c->diag, pp->loc, "'%s' is declared here", pp->stacked);
            continue;
        }
        pipeline_axis_use(c, t, stacked);
        if (stacked && t->whole_read && t->sh.naxes[0] == 1 && t->sh.axes[0][0] == pp->axis)
            diag_error(c->diag, t->whole_read - 1, "'%s' holds the layers of '%s', pipelined over mesh "
                       "axis %c: only the 'repeat %s' block reads it, one layer per iteration, each "
                       "stage its own", t->name, L->name, z->name, L->name);
    }
}
