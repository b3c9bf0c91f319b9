/*
 * check_write.c - writes into program state at a run-time position:
 *
 *     state KC[B, S, K_Y, H] : f32
 *     input Pos[] : i32
 *     KC[B, Pos, K, H] = Kn[B, K, H]
 *
 * A statement whose left side names a `state`, or has an index that is a
 * tensor rather than a dim, is a write (lowered to UpdateSlice, ir.h).
 * Exactly one index of its left side is the position: a scalar i32 tensor,
 * written bare (`Pos`, when no dim has that name) or as `Pos[]`.  The
 * position may also be given per row, `KC[B, At[B], K, H]`: an i32 tensor
 * over a dim of the state before the written one, row b written at
 * At[b] (continuous batching: every slot at its own position).  The
 * others are the state's dims in order, without subscripts (the state's
 * sharding is the one declared), and the right side computes the slice:
 * the state's dims without the written one.  `Pos:T` writes a window: the
 * right side has dim T in place of the written one, and its row t goes to
 * position Pos + t (a prompt's T keys and values at once); per row,
 * `At[B]:T` writes row b's window at At[b] .. At[b] + T - 1 (a chunked
 * prefill in a continuous batch).  Inside
 * `repeat L { }` a state
 * stacked on L is written one layer at a time, its left side without L,
 * as reads of a stacked tensor are; a state that is not stacked cannot be
 * written there (every layer would write the same slice).
 */
#include <string.h>

#include "fe_internal.h"

/* Whether index `x` of a left side is a run-time position rather than a
 * dim: a tensor written `Pos[]`, or a name that is a tensor and no dim; in
 * a state's left side any tensor index (check_position checks it: a
 * scalar, or `At[B]` with one position per row). */
static bool is_position(const fe_checker *c, const ast_index *x, bool state)
{
    if (x->tensor)
        return state || x->tensor->nidx == 0;
    return fe_dim_lookup(c, x->name) < 0 && fe_symtab_get(&c->tensors, x->name);
}

/* "KC[B, pos, K, H]": how the write of `t` (its dims from `from`) looks. */
static const char *example(const fe_checker *c, const fe_tensor *t, int from, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s[", t->name);
    for (int d = from; d < t->rank && n > 0 && (size_t)n < size; d++)
        n += snprintf(buf + n, size - (size_t)n, "%s%s", d > from ? ", " : "",
                      d == from + (t->rank - from > 1) ? "pos" : c->m->dims[t->dims[d]].name);
    if (n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "]");
    return buf;
}

/* Checks a per-row position `At[B]` (index `x` of left side `l`, the
 * state `t`'s dims from `off`, the position tensor `p` at index `at`):
 * rank 1, over a dim of the state that is not the written one and comes
 * before it (so each row's slice of the state is one block of the
 * runtime's [outer, n, inner] view).  Sets *row to the left side's index
 * of that dim; returns false after reporting. */
static bool check_row_position(fe_checker *c, const ast_tref *l, int at, int off, const fe_tensor *t,
                               const fe_tensor *p, int *row)
{
    const ast_index *x = &l->idx[at];
    const ast_index *b = &x->tensor->idx[0];
    const char *written = c->m->dims[t->dims[at + off]].name;
    if (x->tensor->nidx != 1 || b->tensor) {
        diag_error(c->diag, x->loc, "the position '%s' is a scalar or has one index, a dim of '%s' "
                   "(one position per row): write '%s', '%s[]' or like '%s[B]'", x->name, t->name,
                   x->name, x->name, x->name);
        return false;
    }
    if (p->rank == 0) {
        diag_error(c->diag, x->loc, "the position '%s' is a scalar: write '%s' or '%s[]'", x->name,
                   x->name, x->name);
        diag_note(c->diag, p->loc, "'%s' is defined here", p->name);
        return false;
    }
    int d = fe_dim_lookup(c, b->name);
    if (d < 0) {
        diag_error(c->diag, b->loc, "dim '%s' is not defined", b->name);
        return false;
    }
    if (p->rank != 1 || p->dims[0] != d) {
        diag_error(c->diag, b->loc, "a per-row position is an i32 tensor over one dim, and '%s' is "
                   "not one over '%s'", p->name, b->name);
        diag_note(c->diag, p->loc, "'%s' is defined here", p->name);
        return false;
    }
    if (b->axes) {
        diag_error(c->diag, b->axes_loc, "the position '%s[%s]' keeps the sharding it has: write "
                   "'%s' without a subscript", p->name, b->name, b->name);
        return false;
    }
    *row = -1;
    for (int i = 0; i < l->nidx; i++)
        if (i != at && !l->idx[i].tensor && fe_dim_lookup(c, l->idx[i].name) == d)
            *row = i;
    if (d == t->dims[at + off]) {
        diag_error(c->diag, b->loc, "'%s[%s]' is over '%s', the dim it writes: a per-row position "
                   "is over another dim of '%s' (its rows, like the batch)", p->name, b->name,
                   written, t->name);
        return false;
    }
    if (*row < 0) {
        diag_error(c->diag, b->loc, "'%s[%s]' gives a position per row of '%s', which is not a dim "
                   "of '%s'", p->name, b->name, b->name, t->name);
        return false;
    }
    if (*row > at) {
        diag_error(c->diag, b->loc, "a per-row position's rows come before the dim it writes, and "
                   "'%s' is after '%s' in '%s': declare it like %s[%s, %s, ...]", b->name, written,
                   t->name, t->name, b->name, written);
        return false;
    }
    return true;
}

/* Whether the per-row position `p` is sharded so that each device holds
 * the positions of its own rows of state `t` (dim `d`): replicated (each
 * device reads its block of it), or split like the state's dim.  A
 * declared sharding that is neither is reported: moving the positions
 * would cost a collective per step for a few bytes the program can
 * declare in place. */
static bool same_rows_sharding(fe_checker *c, const fe_tensor *p, const fe_tensor *t, int d,
                               uint32_t loc)
{
    bool declared = p->kind != IR_VAL_OP || p->has_constraint;
    if (!declared || p->sh.naxes[0] == 0 ||
        (p->sh.naxes[0] == t->sh.naxes[d] &&
         memcmp(p->sh.axes[0], t->sh.axes[d], (size_t)p->sh.naxes[0] * sizeof p->sh.axes[0][0]) == 0))
        return true;
    char want[64];
    int n = snprintf(want, sizeof want, "%s", c->m->dims[t->dims[d]].name);
    for (int k = 0; k < t->sh.naxes[d] && n > 0 && (size_t)n < sizeof want; k++)
        n += snprintf(want + n, sizeof want - (size_t)n, "%s%c", k ? "" : "_",
                      c->m->mesh.axes[t->sh.axes[d][k]].name);
    diag_error(c->diag, loc, "the per-row position '%s' is split over other axes than the rows "
               "'%s' of '%s' it positions: declare it %s[%s], like the state, or replicated",
               p->name, c->m->dims[t->dims[d]].name, t->name, p->name, want);
    diag_note(c->diag, p->loc, "'%s' is defined here", p->name);
    return false;
}

/* Checks the position index `x` (index `at` of left side `l` of a write
 * into `t`, whose dims start at `off`): a defined i32 tensor, a scalar or
 * per row (check_row_position).  Sets *row (-1 for a scalar); returns
 * the tensor or NULL. */
static fe_tensor *check_position(fe_checker *c, const ast_tref *l, int at, int off,
                                 const fe_tensor *t, int *row)
{
    const ast_index *x = &l->idx[at];
    *row = -1;
    fe_tensor *p = fe_symtab_get(&c->tensors, x->name);
    if (!p) {
        diag_error(c->diag, x->loc, "'%s' is neither a dim nor a tensor", x->name);
        return NULL;
    }
    if (p->bad || !fe_check_scope(c, p, x->loc))
        return NULL;
    bool per_row = x->tensor && x->tensor->nidx != 0;
    if (p->dtype != IR_I32) {
        diag_error(c->diag, x->loc, "the position '%s' must be a%s i32 tensor, and it is %s",
                   x->name, per_row ? " per-row" : " scalar", ir_dtype_name(p->dtype));
        diag_note(c->diag, p->loc, "'%s' is defined here", p->name);
        return NULL;
    }
    if (per_row)
        return check_row_position(c, l, at, off, t, p, row) ? p : NULL;
    if (p->rank != 0) {
        if (p->rank == 1)
            diag_error(c->diag, x->loc, "the position '%s' has one dim: write it with its dim, "
                       "'%s[%s]' (one position per row), or give a scalar", x->name, x->name,
                       c->m->dims[p->dims[0]].name);
        else
            diag_error(c->diag, x->loc, "the position '%s' has %d dims: a position is a scalar or "
                       "one per row, over one dim", x->name, p->rank);
        diag_note(c->diag, p->loc, "'%s' is defined here", p->name);
        return NULL;
    }
    return p;
}

bool fe_check_write(fe_checker *c, ast_stmt *s, ast_tref *rows, bool *ok)
{
    ast_tref *l = &s->u.assign.lhs;
    fe_tensor *t = fe_symtab_get(&c->tensors, l->name.s);
    bool state = t && t->kind == IR_VAL_STATE;
    int npos = 0, at = -1;
    for (int i = 0; i < l->nidx; i++)
        if (is_position(c, &l->idx[i], state) && npos++ == 0)
            at = i;
    if (!state && npos == 0)
        return false;
    s->u.assign.write = true;
    *ok = false;
    char b[256];
    if (!t) {
        diag_error(c->diag, l->name.loc, "tensor '%s' is not defined: only a declared 'state' is "
                   "written at a run-time position", l->name.s);
        return true;
    }
    if (t->kind != IR_VAL_STATE) {
        diag_error(c->diag, l->name.loc, "'%s' is %s: only a 'state' is written at a run-time "
                   "position", l->name.s, t->kind == IR_VAL_INPUT   ? "an input"
                                         : t->kind == IR_VAL_PARAM ? "a param (params change "
                                                                     "only by 'optimize')"
                                                                   : "not a state");
        diag_note(c->diag, t->loc, "'%s' is defined here", t->name);
        return true;
    }
    if (t->bad)
        return true;
    /* Inside a repeated block: one layer of a state stacked on its dim. */
    bool layer = false;
    if (c->repeat) {
        int L = c->repeat->u.repeat.dim_id;
        layer = t->rank >= 1 && t->dims[0] == L;
        if (!layer || l->nidx != t->rank - 1) {
            diag_error(c->diag, l->name.loc, "inside 'repeat %s', a state is written one layer at "
                       "a time: declare '%s' stacked on '%s' (its first dim) and write it without "
                       "that dim", c->repeat->u.repeat.dim.s, t->name, c->repeat->u.repeat.dim.s);
            return true;
        }
        /* Sharded over one axis, the block is a pipeline over it, each
         * stage writing its own layers' state (docs/pipeline.md). */
        if (t->sh.naxes[0] > 0 && !fe_check_pipeline_ref(c, l, t, L))
            return true;
    }
    int off = layer ? 1 : 0;
    if (npos == 0) {
        diag_error(c->diag, l->name.loc, "'%s' is a state: a statement writes one slice of it, at "
                   "a position given by an i32 scalar in place of one dim, like '%s'",
                   t->name, example(c, t, off, b, sizeof b));
        return true;
    }
    if (npos > 1) {
        for (int i = at + 1; i < l->nidx; i++)
            if (is_position(c, &l->idx[i], state)) {
                diag_error(c->diag, l->idx[i].loc, "'%s' is written at one run-time position, and "
                           "'%s' is a second one", t->name, l->idx[i].name);
                break;
            }
        return true;
    }
    if (l->nidx != t->rank - off) {
        diag_error(c->diag, l->name.loc, "'%s' has %d dims and %d indices are given: write each "
                   "dim, with the position in place of one, like '%s'", t->name, t->rank - off,
                   l->nidx, example(c, t, off, b, sizeof b));
        return true;
    }
    bool good = true;
    for (int i = 0; i < l->nidx; i++) {
        ast_index *x = &l->idx[i];
        if (i == at)
            continue;
        x->dim = fe_dim_lookup(c, x->name);
        if (x->dim != t->dims[i + off]) {
            diag_error(c->diag, x->loc, "index %d of '%s' is '%s', but the state's dim there is "
                       "'%s': a write keeps the state's dims in order", i + 1, t->name, x->name,
                       c->m->dims[t->dims[i + off]].name);
            good = false;
        } else if (x->axes) {
            diag_error(c->diag, x->axes_loc, "state '%s' keeps the sharding it is declared with: "
                       "write '%s' without a subscript", t->name, x->name);
            good = false;
        }
    }
    if (l->nunred > 0) {
        diag_error(c->diag, l->unred_loc, "a state holds no unreduced partial sums");
        good = false;
    }
    int row = -1;
    fe_tensor *p = check_position(c, l, at, off, t, &row);
    int window = -1;
    if (l->idx[at].window.s) {
        const ast_name *w = &l->idx[at].window;
        const ir_dimdef *written = &c->m->dims[t->dims[at + off]];
        window = fe_dim_lookup(c, w->s);
        if (window < 0) {
            diag_error(c->diag, w->loc, "dim '%s' is not defined", w->s);
            good = false;
        } else if (c->m->dims[window].size > written->size) {
            diag_error(c->diag, w->loc, "the window '%s' of %lld rows is longer than the dim '%s' "
                       "of %lld it is written into", w->s, (long long)c->m->dims[window].size,
                       written->name, (long long)written->size);
            good = false;
        }
        for (int i = 0; i < l->nidx && window >= 0; i++)
            if (i != at && l->idx[i].dim == window) {
                diag_error(c->diag, w->loc, "the window '%s' is also a dim of '%s'", w->s, t->name);
                good = false;
                break;
            }
    }
    if (p && row >= 0 && !same_rows_sharding(c, p, t, row + off, l->idx[at].loc))
        good = false;
    if (!p || !good)
        return true;
    l->sym = t;
    l->layer = layer;
    s->u.assign.write_pos = at;
    s->u.assign.write_layer = layer;
    s->u.assign.pos = p;
    s->u.assign.write_row = row;
    l->idx[at].dim = window; /* the window's dim for lower.c, -1 for one position */
    *rows = *l;
    /* The rows: the left side without the position, or with the window's dim there. */
    rows->nidx = window >= 0 ? l->nidx : l->nidx - 1;
    rows->idx = ir_alloc(c->arena, (size_t)(rows->nidx + 1) * sizeof *rows->idx);
    for (int i = 0, j = 0; i < l->nidx; i++) {
        if (i != at) {
            rows->idx[j++] = l->idx[i];
        } else if (window >= 0) {
            ast_index *x = &rows->idx[j++];
            memset(x, 0, sizeof *x);
            x->name = l->idx[i].window.s;
            x->loc = l->idx[i].window.loc;
            x->dim = window;
        }
    }
    rows->nunred = 0;
    *ok = true;
    return true;
}
