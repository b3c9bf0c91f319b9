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
 * others are the state's dims in order, without subscripts (the state's
 * sharding is the one declared), and the right side computes the slice:
 * the state's dims without the written one.  `Pos:T` writes a window: the
 * right side has dim T in place of the written one, and its row t goes to
 * position Pos + t (a prompt's T keys and values at once).  Inside
 * `repeat L { }` a state
 * stacked on L is written one layer at a time, its left side without L,
 * as reads of a stacked tensor are; a state that is not stacked cannot be
 * written there (every layer would write the same slice).
 */
#include <string.h>

#include "fe_internal.h"

/* Whether index `x` of a left side is a run-time position rather than a
 * dim: a tensor written `Pos[]`, or a name that is a tensor and no dim; in
 * a state's left side any tensor index (check_position says what is wrong
 * with `Pos[B]`). */
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

/* Checks the position index `x`: a defined scalar i32 tensor.  Returns it or NULL. */
static fe_tensor *check_position(fe_checker *c, const ast_index *x)
{
    fe_tensor *p = fe_symtab_get(&c->tensors, x->name);
    if (!p) {
        diag_error(c->diag, x->loc, "'%s' is neither a dim nor a tensor", x->name);
        return NULL;
    }
    if (p->bad || !fe_check_scope(c, p, x->loc))
        return NULL;
    if (x->tensor && x->tensor->nidx != 0) {
        diag_error(c->diag, x->loc, "the position '%s' is a scalar: write '%s' or '%s[]'",
                   x->name, x->name, x->name);
        return NULL;
    }
    if (p->rank != 0 || p->dtype != IR_I32) {
        diag_error(c->diag, x->loc, "the position '%s' must be a scalar i32 tensor, and it is %s%s",
                   x->name, p->rank ? "not a scalar, " : "", ir_dtype_name(p->dtype));
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
        if (t->sh.naxes[0] > 0) {
            diag_error(c->diag, l->name.loc, "'%s' is stacked on '%s' and sharded over it: layers "
                       "cannot be split over devices; declare its '%s' without a subscript",
                       t->name, c->repeat->u.repeat.dim.s, c->repeat->u.repeat.dim.s);
            return true;
        }
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
    fe_tensor *p = check_position(c, &l->idx[at]);
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
    if (!p || !good)
        return true;
    l->sym = t;
    l->layer = layer;
    s->u.assign.write_pos = at;
    s->u.assign.write_layer = layer;
    s->u.assign.pos = p;
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
