/*
 * check_i8.c - where i8 values may appear in a statement.
 *
 * i8 holds quantized weights and KV caches (seed 002: int8 serving).  Its
 * values mean nothing without their scales, and int8 arithmetic would wrap
 * or saturate, so the language gives i8 no arithmetic: an i8 tensor is read
 * only as the whole argument of a cast, `f32(Wq[D, F])` (exact), and an i8
 * value is made only by a cast that is the whole right side,
 * `KC[B, Pos, K, H] = i8(K[B, K, H] * InvScale[K, H])` (rounded to nearest
 * even, saturated).  Moving i8 values (collectives, layer slices of a
 * stacked param, writes into an i8 state) needs no statement of its own.
 * docs/language.md, "Dtypes and casts", says the same to users.
 */
#include "fe_internal.h"

const ast_factor *fe_lone_tensor(const ast_expr *e)
{
    if (e->nterms != 1 || e->terms[0]->sign < 0 || e->terms[0]->nfactors != 1)
        return NULL;
    const ast_factor *f = e->terms[0]->factors[0];
    return f->kind == AST_F_TENSOR && !f->divide ? f : NULL;
}

void fe_error_i8_read(fe_checker *c, const ast_tref *t, const char *cast)
{
    if (cast)
        diag_error(c->diag, t->name.loc, "'%s' is i8: a cast converts an i8 tensor alone, "
                   "like '%s(%s[...])'; scale it outside the cast, like '%s(%s[...]) * S[...]'",
                   t->name.s, cast, t->name.s, cast, t->name.s);
    else
        diag_error(c->diag, t->name.loc, "'%s' is i8: quantized values have no arithmetic; "
                   "cast it first, like 'f32(%s[...])'", t->name.s, t->name.s);
}

void fe_error_i8_cast_inside(fe_checker *c, const ast_name *n)
{
    diag_error(c->diag, n->loc, "'i8(...)' must be the whole right side of its statement: i8 "
               "values have no arithmetic, so write the quantized tensor on its own, like "
               "'Q[...] = i8(X[...] * InvScale[...])'");
}
