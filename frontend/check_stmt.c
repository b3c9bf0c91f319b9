/*
 * check_stmt.c - statements `L[l] = t1 + t2 - ...`: names, indices, dtypes
 * and the Einstein convention.
 *
 * An index on the right names a dim; the i-th index of a reference must name
 * a dim of the same size as the tensor's i-th declared dim (so `X[J, I]`
 * relabels a transposed use when sizes agree).  Each top-level term is summed
 * over the indices it has and the left side lacks (lower_expr.c does that), so
 * here it is enough to check that every left index occurs in some term.
 * Subscripts belong to declarations, left sides and outputs only.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "fe_internal.h"

/* The tensor indices of right-side reference `t` (a gather, `Emb[Tok[B, T],
 * D]`): at most one, in the first position, an i32 tensor whose own indices
 * are plain dims, into a table that is not i32.  The index position takes
 * the table's dim there as its label.  False on error. */
static bool check_gather(fe_checker *c, ast_tref *t, const char *defining)
{
    bool ok = true;
    for (int i = 0; i < t->nidx; i++) {
        ast_index *x = &t->idx[i];
        if (!x->tensor)
            continue;
        ast_tref *ids = x->tensor;
        if (i != 0) {
            diag_error(c->diag, x->loc, "only the first index of '%s' can be given by a tensor "
                       "(a gather looks up rows)", t->name.s);
            ok = false;
            continue;
        }
        if (!fe_check_ref(c, ids, false, defining)) {
            ok = false;
            continue;
        }
        for (int j = 0; j < ids->nidx; j++)
            if (ids->idx[j].tensor) {
                diag_error(c->diag, ids->idx[j].loc, "a gather index cannot itself be gathered");
                ok = false;
            }
        if (!ids->sym->bad && ids->sym->dtype != IR_I32) {
            diag_error(c->diag, ids->name.loc, "the index tensor '%s' of a gather must be i32, "
                       "not %s", ids->name.s, ir_dtype_name(ids->sym->dtype));
            ok = false;
        }
        if (ir_dtype_integer(t->sym->dtype)) {
            diag_error(c->diag, t->name.loc, "'%s' is %s: a gather looks up rows of an f32, f64 "
                       "or bf16 table", t->name.s, ir_dtype_name(t->sym->dtype));
            ok = false;
        }
        x->dim = t->sym->dims[i];
        /* The looked-up dim is contracted away: no other index may be it,
         * and the indices and the table's other dims are distinct. */
        for (int k = 1; k < t->nidx; k++)
            if (t->idx[k].dim == x->dim) {
                diag_error(c->diag, t->idx[k].loc, "index '%s' is the dim '%s' looks up", t->idx[k].name,
                           t->name.s);
                ok = false;
            }
        for (int j = 0; j < ids->nidx; j++) {
            if (ids->idx[j].dim == x->dim) {
                diag_error(c->diag, ids->idx[j].loc, "index '%s' is the dim '%s' looks up",
                           ids->idx[j].name, t->name.s);
                ok = false;
            }
            for (int k = 1; k < t->nidx; k++)
                if (ids->idx[j].dim == t->idx[k].dim && ids->idx[j].dim >= 0) {
                    diag_error(c->diag, ids->idx[j].loc, "index '%s' is both an index of '%s' and "
                               "of the table '%s'", ids->idx[j].name, ids->name.s, t->name.s);
                    ok = false;
                }
        }
    }
    return ok;
}

bool fe_check_ref(fe_checker *c, ast_tref *t, bool subscripts, const char *defining)
{
    bool ok = true;
    t->sym = fe_symtab_get(&c->tensors, t->name.s);
    if (!t->sym) {
        if (defining && strcmp(defining, t->name.s) == 0)
            diag_error(c->diag, t->name.loc, "tensor '%s' is used in its own definition", t->name.s);
        else
            diag_error(c->diag, t->name.loc, "tensor '%s' is not defined", t->name.s);
        ok = false;
    }
    for (int i = 0; i < t->nidx; i++) {
        ast_index *x = &t->idx[i];
        if (x->axes && !subscripts) {
            diag_error(c->diag, x->axes_loc - 1,
                       "subscript '_%s' is not allowed on the right side: write the plain dim '%s' "
                       "(shardings go on declarations, left sides and outputs)", x->axes, x->name);
            ok = false;
        }
    }
    if (t->nunred > 0 && !subscripts) {
        diag_error(c->diag, t->unred_loc, "'{U_..}' is only allowed on left sides");
        ok = false;
    }
    if (!fe_resolve_indices(c, t, false, !subscripts))
        ok = false;
    const fe_tensor *s = t->sym;
    if (!s || s->bad)
        return ok;
    if (!fe_check_scope(c, s, t->name.loc))
        return false;
    /* Inside `repeat L`, a tensor stacked on L is one layer: its indices
     * are those of its other dims. */
    if (!subscripts && !fe_check_layer_ref(c, t, s))
        return false;
    int off = t->layer ? 1 : 0;
    if (t->layer && t->nidx > 0 && t->idx[0].tensor) {
        diag_error(c->diag, t->idx[0].loc, "a gather from a layer of the stacked tensor '%s' is not "
                   "supported", t->name.s);
        return false;
    }
    if (t->nidx != s->rank - off) {
        diag_error(c->diag, t->name.loc, "tensor '%s' has %d dim%s but %d ind%s given", t->name.s,
                   s->rank, s->rank == 1 ? "" : "s", t->nidx, t->nidx == 1 ? "ex is" : "ices are");
        return false;
    }
    if (!subscripts && !check_gather(c, t, defining))
        return false;
    for (int i = 0; i < t->nidx; i++) {
        const ast_index *x = &t->idx[i];
        int sd = s->dims[i + off];
        if (x->dim < 0 || x->dim == sd)
            continue;
        const ir_dimdef *want = &c->m->dims[sd], *got = &c->m->dims[x->dim];
        if (want->size != got->size) {
            diag_error(c->diag, x->loc,
                       "index '%s' (%" PRId64 ") does not match dim %d of '%s', which is '%s' (%" PRId64 ")",
                       x->name, got->size, i + 1 + off, t->name.s, want->name, want->size);
            ok = false;
        }
    }
    return ok;
}

/* What the right side of one statement has shown so far. */
typedef struct rhs_state {
    const char *lhs;         /* name being defined */
    int nlhs;                /* its rank (indices resolved or -1) */
    const int *lhs_dims;     /* its dim ids */
    bool ok;                 /* no error yet */
    int ntensors;            /* tensor references seen */
    bool typed;              /* a tensor or a cast has set the statement's dtype */
    ir_dtype dtype;          /* that dtype, the result's (when typed) */
    const char *first;       /* what set it: a tensor's name, or a cast's function name */
    bool first_cast;         /* ... which is a cast `f32(...)` */
    uint32_t first_loc;      /* where it was written */
    bool in_cond;            /* checking a side of a where condition (i32 tensors allowed) */
    const char *cast;        /* checking a cast's argument: the cast's name, else NULL */
    const ast_factor *whole; /* the call that is the whole right side, if any */
    const ast_factor *cast_arg; /* the tensor that is the whole argument of that cast */
    const ast_factor *i8_whole; /* the cast `i8(...)` that is the whole right side, if any */
} rhs_state;

static void check_expr(fe_checker *c, ast_expr *e, rhs_state *st);

/* The built-in functions that are not unary ir_funcs, with their arity. */
static const struct {
    const char *name;
    ast_callee callee;
    int min_args, max_args;
} builtins[] = {
    {"maximum", AST_CALL_MAXIMUM, 2, 2},
    {"minimum", AST_CALL_MINIMUM, 2, 2},
    {"where", AST_CALL_WHERE, 3, 3},
    {"sum", AST_CALL_SUM, 1, 2},
    {"max", AST_CALL_MAX, 1, 2},
    {"min", AST_CALL_MIN, 1, 2},
    {"mean", AST_CALL_MEAN, 1, 2},
    {"softmax", AST_CALL_SOFTMAX, 2, 2},
    {"grad", AST_CALL_GRAD, 2, 2},
    {"argmax", AST_CALL_ARGMAX, 2, 2},
};

static bool expr_has_index(const ast_expr *e, int dim);

/* The index value `e` is, if it is exactly one (`S`), else NULL. */
static ast_factor *as_index_value(const ast_expr *e)
{
    if (e->nterms == 1 && e->terms[0]->sign > 0 && e->terms[0]->nfactors == 1 &&
        e->terms[0]->factors[0]->kind == AST_F_INDEX)
        return e->terms[0]->factors[0];
    return NULL;
}

/* Checks the index argument of a reduction or softmax and its first
 * argument's indices: the named dim must be one of them; without one, some
 * index of the argument must be missing on the left side. */
static void check_reduce_dim(fe_checker *c, ast_factor *f, rhs_state *st)
{
    const char *fname = f->u.call.fname.s;
    const ast_expr *arg = f->u.call.args[0];
    if (f->u.call.nargs == 2) {
        ast_factor *ix = as_index_value(f->u.call.args[1]);
        if (!ix) {
            diag_error(c->diag, f->u.call.args[1]->loc,
                       "the second argument of '%s' must be the name of the index to reduce over, "
                       "like 'S'", fname);
            st->ok = false;
            return;
        }
        if (ix->u.index.dim < 0)
            return; /* reported by check_factor */
        if (!expr_has_index(arg, ix->u.index.dim)) {
            diag_error(c->diag, ix->loc, "'%s' over index '%s', which its argument does not have",
                       fname, ix->u.index.name.s);
            st->ok = false;
            return;
        }
        f->u.call.reduce_dim = ix->u.index.dim;
        return;
    }
    if (st->nlhs < 0)
        return;
    for (int d = 0; d < c->m->ndims; d++) {
        bool on_left = false;
        for (int i = 0; i < st->nlhs; i++)
            on_left |= st->lhs_dims[i] == d;
        if (!on_left && expr_has_index(arg, d))
            return;
    }
    diag_error(c->diag, f->u.call.fname.loc,
               "'%s(...)' reduces the indices of its argument that '%s' lacks, and there are none: "
               "name the index, like '%s(x, S)'", fname, st->lhs, fname);
    st->ok = false;
}

/* The comparison of `e` if `e` is exactly one (a where condition), else NULL. */
static const ast_factor *as_comparison(const ast_expr *e)
{
    if (e->nterms == 1 && e->terms[0]->nfactors == 1 && e->terms[0]->factors[0]->kind == AST_F_CMP)
        return e->terms[0]->factors[0];
    return NULL;
}

/* How a source of the statement's dtype is named in messages. */
static void describe(char *buf, size_t n, const char *name, bool cast)
{
    snprintf(buf, n, cast ? "the cast '%s(...)'" : "tensor '%s'", name);
}

/* Whether dtype `a` holds every value of dtype `b` (bf16 < f32 < f64). */
static bool wider(ir_dtype a, ir_dtype b)
{
    int ra = a == IR_F64 ? 2 : a == IR_F32 ? 1 : 0, rb = b == IR_F64 ? 2 : b == IR_F32 ? 1 : 0;
    return ra > rb;
}

/* A tensor (`name`) or a cast (`name(...)`, cast true) at `loc` gives the
 * statement values of dtype `dt`: the first one sets the statement's dtype,
 * and every other must agree, since there is no implicit conversion
 * (docs/language.md, "Dtypes and casts").  The error's hint casts the
 * narrower side to the wider dtype. */
static void note_dtype(fe_checker *c, rhs_state *st, ir_dtype dt, const char *name, bool cast,
                       uint32_t loc)
{
    if (!st->typed) {
        st->typed = true;
        st->dtype = dt;
        st->first = name;
        st->first_cast = cast;
        st->first_loc = loc;
        return;
    }
    if (st->dtype == dt)
        return;
    char here[160], there[160], hint[200];
    describe(here, sizeof here, name, cast);
    describe(there, sizeof there, st->first, st->first_cast);
    bool narrow_here = wider(st->dtype, dt);
    const char *nname = narrow_here ? name : st->first;
    bool ncast = narrow_here ? cast : st->first_cast;
    const char *to = ir_dtype_name(narrow_here ? st->dtype : dt);
    if (ncast)
        snprintf(hint, sizeof hint, "write %s(...) in place of %s(...)", to, nname);
    else
        snprintf(hint, sizeof hint, "%s(%s[...])", to, nname);
    diag_error(c->diag, loc, "%s is %s but %s in the same statement is %s: dtypes cannot be mixed; "
               "cast one side: %s", here, ir_dtype_name(dt), there, ir_dtype_name(st->dtype), hint);
    st->ok = false;
}

/* The dtype a call named `name` casts to, if `name` is a dtype. */
static bool cast_target(const char *name, ir_dtype *out)
{
    static const ir_dtype all[] = {IR_F32, IR_F64, IR_BF16, IR_I32, IR_I8};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (strcmp(ir_dtype_name(all[i]), name) == 0) {
            *out = all[i];
            return true;
        }
    return false;
}

/* `f32(x)`, `bf16(x)`, `f64(x)`, `i8(x)`: x converted element by element.
 * The argument is a right side of its own (its tensors share one dtype,
 * which may differ from the statement's); the cast gives the statement
 * values of its target dtype.  i32 is neither a target nor a source; an i8
 * source is a lone tensor and an i8 cast the whole right side (check_i8.c). */
static void check_cast(fe_checker *c, ast_factor *f, ir_dtype to, rhs_state *st)
{
    const ast_name *n = &f->u.call.fname;
    f->u.call.callee = AST_CALL_CAST;
    f->u.call.cast_dtype = to;
    if (to == IR_I32) {
        diag_error(c->diag, n->loc, "a cast converts to f32, f64, bf16 or i8: casts to i32 are not "
                   "supported");
        st->ok = false;
        return;
    }
    if (f->u.call.nargs != 1) {
        diag_error(c->diag, n->loc, "function '%s' takes 1 argument, not %d", n->s,
                   f->u.call.nargs);
        st->ok = false;
        return;
    }
    rhs_state in = *st;
    in.typed = false;
    in.first = NULL;
    in.in_cond = false;
    in.cast = n->s;
    in.whole = NULL;
    in.ntensors = 0;
    in.cast_arg = fe_lone_tensor(f->u.call.args[0]);
    if (to == IR_I8 && st->i8_whole != f) {
        fe_error_i8_cast_inside(c, n);
        st->ok = false;
        return;
    }
    check_expr(c, f->u.call.args[0], &in);
    st->ntensors += in.ntensors;
    if (!in.ok) {
        st->ok = false;
        return;
    }
    if (!in.typed) {
        diag_error(c->diag, n->loc, "the argument of '%s' uses no tensor: a cast converts a "
                   "tensor's values, like '%s(X[...])'", n->s, n->s);
        st->ok = false;
        return;
    }
    f->u.call.arg_dtype = in.dtype;
    note_dtype(c, st, to, n->s, true, n->loc);
    fe_warn_sum_in_cast(c, f, st->nlhs, st->lhs_dims);
}

/* Resolves call `f` (name and argument count) and checks its arguments. */
static void check_call(fe_checker *c, ast_factor *f, rhs_state *st)
{
    const ast_name *n = &f->u.call.fname;
    int want = 1, want_max = 1;
    ir_dtype to;
    if (cast_target(n->s, &to)) {
        check_cast(c, f, to, st);
        return;
    }
    f->u.call.fn = ir_func_lookup(n->s, strlen(n->s));
    if (f->u.call.fn >= 0)
        f->u.call.callee = AST_CALL_FN;
    for (size_t i = 0; i < sizeof builtins / sizeof *builtins; i++)
        if (strcmp(builtins[i].name, n->s) == 0) {
            f->u.call.callee = builtins[i].callee;
            want = builtins[i].min_args;
            want_max = builtins[i].max_args;
        }
    if (f->u.call.callee == AST_CALL_UNKNOWN) {
        char known[256] = "";
        for (int i = 0; i < IR_FN_COUNT; i++) {
            size_t l = strlen(known);
            snprintf(known + l, sizeof known - l, "%s%s", i ? ", " : "", ir_func_name((ir_func)i));
        }
        for (size_t i = 0; i < sizeof builtins / sizeof *builtins; i++) {
            size_t l = strlen(known);
            snprintf(known + l, sizeof known - l, ", %s", builtins[i].name);
        }
        size_t l = strlen(known);
        snprintf(known + l, sizeof known - l, ", and the casts f32, f64, bf16, i8");
        diag_error(c->diag, n->loc, "unknown function '%s' (known: %s)", n->s, known);
        st->ok = false;
    } else if (f->u.call.nargs < want || f->u.call.nargs > want_max) {
        if (want == want_max)
            diag_error(c->diag, n->loc, "function '%s' takes %d argument%s, not %d", n->s, want,
                       want == 1 ? "" : "s", f->u.call.nargs);
        else
            diag_error(c->diag, n->loc, "function '%s' takes %d or %d arguments, not %d", n->s,
                       want, want_max, f->u.call.nargs);
        st->ok = false;
        return;
    }
    if (f->u.call.callee == AST_CALL_GRAD) {
        diag_error(c->diag, n->loc, "'grad(L, W)' must be the whole right side of a statement, "
                   "like 'dW[D, F] = grad(L, W)'");
        st->ok = false;
        return;
    }
    if (f->u.call.callee == AST_CALL_ARGMAX && st->whole != f) {
        diag_error(c->diag, n->loc, "'argmax(x, S)' gives i32 positions and must be the whole "
                   "right side of a statement, like 'Next[B] = argmax(Logits[B, V], V)'");
        st->ok = false;
        return;
    }
    for (int i = 0; i < f->u.call.nargs; i++) {
        ast_expr *a = f->u.call.args[i];
        const ast_factor *cmp = as_comparison(a);
        if (f->u.call.callee == AST_CALL_WHERE && i == 0) {
            if (!cmp) {
                diag_error(c->diag, a->loc,
                           "the condition of 'where' must be a comparison, like 'S <= T' "
                           "(one of < <= > >= == !=)");
                st->ok = false;
            }
            bool was = st->in_cond;
            st->in_cond = cmp != NULL;
            check_expr(c, cmp ? cmp->u.cmp.sides[0] : a, st);
            if (cmp)
                check_expr(c, cmp->u.cmp.sides[1], st);
            st->in_cond = was;
            continue;
        }
        check_expr(c, a, st); /* reports a comparison found here */
    }
    if (st->ok && (ast_callee_reduces(f->u.call.callee) || f->u.call.callee == AST_CALL_SOFTMAX ||
                   f->u.call.callee == AST_CALL_ARGMAX))
        check_reduce_dim(c, f, st);
    if (st->ok)
        fe_warn_product_in_call(c, f, st->nlhs, st->lhs_dims);
}

static void check_factor(fe_checker *c, ast_factor *f, rhs_state *st)
{
    switch (f->kind) {
    case AST_F_TENSOR: {
        ast_tref *t = &f->u.tref;
        st->ntensors++;
        if (!fe_check_ref(c, t, false, st->lhs)) {
            st->ok = false;
            return;
        }
        if (t->sym->bad)
            return;
        /* An integer compared in a mask (`where(S <= Pos, ...)`) is read
         * as a number of the statement's dtype; it sets no dtype. */
        if (t->sym->dtype == IR_I32 && st->in_cond)
            return;
        if (t->sym->dtype == IR_I32 && st->cast) {
            diag_error(c->diag, t->name.loc, "'%s' is i32: a cast converts f32, f64 or bf16 values "
                       "(casts of integers are not supported)", t->name.s);
            st->ok = false;
            return;
        }
        if (t->sym->dtype == IR_I32) {
            diag_error(c->diag, t->name.loc, "'%s' is i32: an integer tensor can only be the index "
                       "of a gather, like 'Emb[%s[...], D]', or compared in the condition of "
                       "'where'", t->name.s, t->name.s);
            st->ok = false;
            return;
        }
        if (t->sym->dtype == IR_I8 && st->cast_arg != f) {
            fe_error_i8_read(c, t, st->cast);
            st->ok = false;
            return;
        }
        note_dtype(c, st, t->sym->dtype, t->name.s, false, t->name.loc);
        return;
    }
    case AST_F_NUMBER:
        if (!isfinite(f->u.num.value) && !f->u.num.is_inf) {
            diag_error(c->diag, f->loc, "number '%s' is out of range", f->u.num.text);
            st->ok = false;
        }
        return;
    case AST_F_INDEX: {
        const ast_name *n = &f->u.index.name;
        f->u.index.dim = ir_dim_find(c->m, n->s, strlen(n->s));
        if (f->u.index.dim >= 0)
            return;
        if (fe_symtab_get(&c->tensors, n->s))
            diag_error(c->diag, n->loc,
                       "'%s' is a tensor, not a dim: write it with its indices, like '%s[...]'",
                       n->s, n->s);
        else
            diag_error(c->diag, n->loc,
                       "dim '%s' is not defined (a name used as a value is a dim's index value)",
                       n->s);
        st->ok = false;
        return;
    }
    case AST_F_CMP:
        diag_error(c->diag, f->loc,
                   "a comparison is only allowed as the condition of 'where(cond, a, b)'");
        st->ok = false;
        check_expr(c, f->u.cmp.sides[0], st);
        check_expr(c, f->u.cmp.sides[1], st);
        return;
    case AST_F_PAREN:
        check_expr(c, f->u.paren, st);
        return;
    case AST_F_CALL:
        check_call(c, f, st);
        return;
    }
}

static void check_expr(fe_checker *c, ast_expr *e, rhs_state *st)
{
    for (int i = 0; i < e->nterms; i++)
        for (int k = 0; k < e->terms[i]->nfactors; k++)
            check_factor(c, e->terms[i]->factors[k], st);
}

/* True if dim `dim` is an index of some tensor reference or an index value
 * under `e`. */
static bool expr_has_index(const ast_expr *e, int dim)
{
    for (int i = 0; i < e->nterms; i++)
        for (int k = 0; k < e->terms[i]->nfactors; k++) {
            const ast_factor *f = e->terms[i]->factors[k];
            if (f->kind == AST_F_TENSOR) {
                int dims[2 * IR_MAX_RANK], n = ast_tref_dims(&f->u.tref, dims);
                for (int j = 0; j < n; j++)
                    if (dims[j] == dim)
                        return true;
            } else if (f->kind == AST_F_INDEX && f->u.index.dim == dim) {
                return true;
            }
            ast_expr *const *kids;
            int nk = ast_factor_children(f, &kids);
            for (int j = 0; j < nk; j++)
                if (expr_has_index(kids[j], dim))
                    return true;
        }
    return false;
}

/* Number of factors under `e`, counting nested ones (stops past `limit`). */
static int count_factors(const ast_expr *e, int limit)
{
    int n = 0;
    for (int i = 0; i < e->nterms && n <= limit; i++)
        for (int k = 0; k < e->terms[i]->nfactors && n <= limit; k++) {
            const ast_factor *f = e->terms[i]->factors[k];
            n++;
            ast_expr *const *kids;
            int nk = ast_factor_children(f, &kids);
            for (int j = 0; j < nk && n <= limit; j++)
                n += count_factors(kids[j], limit - n);
        }
    return n;
}

/* The call `name(...)` if it is the whole right side `e`, else NULL. */
static ast_factor *as_whole_call(ast_expr *e, const char *name)
{
    if (e->nterms != 1 || e->terms[0]->sign < 0 || e->terms[0]->nfactors != 1)
        return NULL;
    ast_factor *f = e->terms[0]->factors[0];
    return f->kind == AST_F_CALL && !f->divide && strcmp(f->u.call.fname.s, name) == 0 ? f : NULL;
}

/* `G[...] = grad(L, W)`: L a scalar float tensor and W a float tensor, both
 * defined before, named bare; the left side has W's dims.  Sets the
 * statement's dtype to W's. */
static void check_grad(fe_checker *c, ast_factor *f, const ast_tref *l, rhs_state *st)
{
    f->u.call.callee = AST_CALL_GRAD;
    if (f->u.call.nargs != 2) {
        diag_error(c->diag, f->u.call.fname.loc, "function 'grad' takes 2 arguments, not %d",
                   f->u.call.nargs);
        st->ok = false;
        return;
    }
    fe_tensor *t[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        ast_factor *ix = as_index_value(f->u.call.args[i]);
        if (!ix) {
            diag_error(c->diag, f->u.call.args[i]->loc,
                       "the arguments of 'grad' are tensor names without indices, like "
                       "'grad(L, W)'");
            st->ok = false;
            continue;
        }
        t[i] = fe_symtab_get(&c->tensors, ix->u.index.name.s);
        if (!t[i]) {
            diag_error(c->diag, ix->loc, "tensor '%s' is not defined", ix->u.index.name.s);
            st->ok = false;
        } else if (t[i]->bad) {
            st->ok = false; /* reported where it was defined */
            t[i] = NULL;
        } else if (ir_dtype_integer(t[i]->dtype)) {
            diag_error(c->diag, ix->loc, "'%s' is %s: only floating-point tensors have "
                       "gradients", t[i]->name, ir_dtype_name(t[i]->dtype));
            st->ok = false;
            t[i] = NULL;
        } else if (i == 0 && t[i]->rank != 0) {
            diag_error(c->diag, ix->loc, "'grad' differentiates a scalar, and '%s' has %d dim%s: "
                       "reduce it first, like 'L[] = sum(...)'", t[i]->name, t[i]->rank,
                       t[i]->rank == 1 ? "" : "s");
            st->ok = false;
            t[i] = NULL;
        } else if (i == 0 && t[i]->kind != IR_VAL_OP) {
            diag_error(c->diag, ix->loc, "'%s' is %s %s, not a value the program computes",
                       t[i]->name, t[i]->kind == IR_VAL_INPUT ? "an" : "a",
                       ir_value_kind_name(t[i]->kind));
            st->ok = false;
            t[i] = NULL;
        }
    }
    if (!t[1])
        return;
    st->ntensors = 1;
    st->typed = true;
    st->dtype = t[1]->dtype;
    st->first = t[1]->name;
    st->first_loc = f->loc;
    bool same = l->nidx == t[1]->rank;
    for (int i = 0; same && i < l->nidx; i++)
        same = l->idx[i].dim == t[1]->dims[i];
    if (!same) {
        char want[256] = "";
        for (int i = 0; i < t[1]->rank; i++) {
            size_t n = strlen(want);
            snprintf(want + n, sizeof want - n, "%s%s", i ? ", " : "",
                     c->m->dims[t[1]->dims[i]].name);
        }
        diag_error(c->diag, l->name.loc, "the gradient of '%s' has its dims: write '%s[%s] = "
                   "grad(...)'", t[1]->name, l->name.s, want);
        st->ok = false;
    }
}

void fe_check_assign(fe_checker *c, ast_stmt *s)
{
    ast_tref rows;
    bool write_ok = true;
    bool write = fe_check_write(c, s, &rows, &write_ok);
    if (write && !write_ok)
        return;
    /* A write's right side computes the slice: the left side without the
     * position. */
    ast_tref *l = write ? &rows : &s->u.assign.lhs;
    rhs_state st = {.lhs = l->name.s, .ok = true};
    bool ok = fe_resolve_indices(c, l, false, false);
    int dims[IR_MAX_RANK + 1];
    for (int i = 0; i < l->nidx && i <= IR_MAX_RANK; i++)
        dims[i] = l->idx[i].dim;
    st.lhs_dims = dims;
    st.nlhs = ok && l->nidx <= IR_MAX_RANK ? l->nidx : -1;
    bool constrained = l->nunred > 0;
    for (int i = 0; i < l->nidx; i++)
        constrained |= l->idx[i].axes != NULL;
    ir_sharding sh = ir_sharding_replicated();
    if (ok && l->nidx <= IR_MAX_RANK && constrained && !fe_check_sharding(c, l, &sh))
        ok = false;

    ast_factor *grad = as_whole_call(s->u.assign.rhs, "grad");
    st.whole = as_whole_call(s->u.assign.rhs, "argmax");
    st.i8_whole = as_whole_call(s->u.assign.rhs, "i8");
    int nfactors = count_factors(s->u.assign.rhs, FE_MAX_FACTORS);
    if (grad) {
        if (ok)
            check_grad(c, grad, l, &st);
        else
            st.ok = false;
    } else if (nfactors > FE_MAX_FACTORS) {
        diag_error(c->diag, s->u.assign.rhs->loc,
                   "the right side of '%s' has more than %d factors: split the statement",
                   l->name.s, FE_MAX_FACTORS);
        st.ok = false;
    } else {
        check_expr(c, s->u.assign.rhs, &st);
    }
    if (st.ok && st.ntensors == 0) {
        diag_error(c->diag, s->u.assign.rhs->loc, "the right side of '%s' uses no tensor",
                   l->name.s);
        ok = false;
    }
    /* Only meaningful when every reference resolved: a bad one may hold it. */
    for (int i = 0; i < l->nidx && st.ok && ok && !grad; i++)
        if (!expr_has_index(s->u.assign.rhs, l->idx[i].dim))
            diag_error(c->diag, l->idx[i].loc,
                       "index '%s' of '%s' appears in no term of the right side",
                       l->idx[i].name, l->name.s);
    ir_dtype dt = st.typed ? st.dtype : IR_F32;
    if (st.whole && st.ok) { /* argmax: positions of the first maxima */
        ((ast_factor *)st.whole)->u.call.arg_dtype = dt;
        dt = IR_I32;
    }
    if (write) {
        const fe_tensor *t = s->u.assign.lhs.sym;
        if (ok && st.ok && st.typed && dt != t->dtype)
            diag_error(c->diag, st.first_loc, "state '%s' is %s, but the slice written into it is %s: "
                       "cast it, like '%s(...)'", t->name, ir_dtype_name(t->dtype), ir_dtype_name(dt),
                       ir_dtype_name(t->dtype));
        return;
    }
    if (!fe_check_shape(c, l->name.s, l->name.loc, dt, l->nidx, dims))
        ok = false;

    if (fe_check_update(c, s, dims, l->nidx <= IR_MAX_RANK ? l->nidx : IR_MAX_RANK, dt, constrained,
                        &sh, ok && st.ok && st.typed))
        return;
    fe_tensor *t = fe_define_tensor(c, l->name, IR_VAL_OP);
    if (!t)
        return;
    t->block = c->block;
    t->dtype = dt;
    t->rank = l->nidx <= IR_MAX_RANK ? l->nidx : IR_MAX_RANK;
    memcpy(t->dims, dims, (size_t)t->rank * sizeof *dims);
    t->sh = sh;
    t->has_constraint = constrained;
    t->bad = !ok || !st.ok || !st.typed;
}
