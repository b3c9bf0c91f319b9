/*
 * check_stmt.c - statements `L[l] = t1 + t2 - ...`: names, indices, dtypes
 * and the Einstein convention.
 *
 * An index on the right names a dim; the i-th index of a reference must name
 * a dim of the same size as the tensor's i-th declared dim (so `X[J, I]`
 * relabels a transposed use when sizes agree).  Each top-level term is summed
 * over the indices it has and the left side lacks (lower.c does that), so
 * here it is enough to check that every left index occurs in some term.
 * Subscripts belong to declarations, left sides and outputs only.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "fe_internal.h"

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
    if (!fe_resolve_indices(c, t, false))
        ok = false;
    const fe_tensor *s = t->sym;
    if (!s || s->bad)
        return ok;
    if (t->nidx != s->rank) {
        diag_error(c->diag, t->name.loc, "tensor '%s' has %d dim%s but %d ind%s given", t->name.s,
                   s->rank, s->rank == 1 ? "" : "s", t->nidx, t->nidx == 1 ? "ex is" : "ices are");
        return false;
    }
    for (int i = 0; i < t->nidx; i++) {
        const ast_index *x = &t->idx[i];
        if (x->dim < 0 || x->dim == s->dims[i])
            continue;
        const ir_dimdef *want = &c->m->dims[s->dims[i]], *got = &c->m->dims[x->dim];
        if (want->size != got->size) {
            diag_error(c->diag, x->loc,
                       "index '%s' (%" PRId64 ") does not match dim %d of '%s', which is '%s' (%" PRId64 ")",
                       x->name, got->size, i + 1, t->name.s, want->name, want->size);
            ok = false;
        }
    }
    return ok;
}

/* What the right side of one statement has shown so far. */
typedef struct rhs_state {
    const char *lhs;         /* name being defined */
    bool ok;                 /* no error yet */
    int ntensors;            /* tensor references seen */
    const fe_tensor *first;  /* first good tensor, its dtype is the statement's */
    uint32_t first_loc;      /* where it was referenced */
} rhs_state;

static void check_expr(fe_checker *c, ast_expr *e, rhs_state *st);

/* The built-in functions that are not unary ir_funcs, with their arity. */
static const struct {
    const char *name;
    ast_callee callee;
    int nargs;
} builtins[] = {
    {"maximum", AST_CALL_MAXIMUM, 2},
    {"minimum", AST_CALL_MINIMUM, 2},
    {"where", AST_CALL_WHERE, 3},
};

/* The comparison of `e` if `e` is exactly one (a where condition), else NULL. */
static const ast_factor *as_comparison(const ast_expr *e)
{
    if (e->nterms == 1 && e->terms[0]->nfactors == 1 && e->terms[0]->factors[0]->kind == AST_F_CMP)
        return e->terms[0]->factors[0];
    return NULL;
}

/* Resolves call `f` (name and argument count) and checks its arguments. */
static void check_call(fe_checker *c, ast_factor *f, rhs_state *st)
{
    const ast_name *n = &f->u.call.fname;
    int want = 1;
    f->u.call.fn = ir_func_lookup(n->s, strlen(n->s));
    if (f->u.call.fn >= 0)
        f->u.call.callee = AST_CALL_FN;
    for (size_t i = 0; i < sizeof builtins / sizeof *builtins; i++)
        if (strcmp(builtins[i].name, n->s) == 0) {
            f->u.call.callee = builtins[i].callee;
            want = builtins[i].nargs;
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
        diag_error(c->diag, n->loc, "unknown function '%s' (known: %s)", n->s, known);
        st->ok = false;
    } else if (f->u.call.nargs != want) {
        diag_error(c->diag, n->loc, "function '%s' takes %d argument%s, not %d", n->s, want,
                   want == 1 ? "" : "s", f->u.call.nargs);
        st->ok = false;
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
            check_expr(c, cmp ? cmp->u.cmp.sides[0] : a, st);
            if (cmp)
                check_expr(c, cmp->u.cmp.sides[1], st);
            continue;
        }
        check_expr(c, a, st); /* reports a comparison found here */
    }
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
        if (!st->first) {
            st->first = t->sym;
            st->first_loc = t->name.loc;
        } else if (st->first->dtype != t->sym->dtype) {
            diag_error(c->diag, t->name.loc,
                       "tensor '%s' is %s but '%s' in the same statement is %s: dtypes cannot be mixed",
                       t->name.s, ir_dtype_name(t->sym->dtype), st->first->name,
                       ir_dtype_name(st->first->dtype));
            st->ok = false;
        }
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
                for (int j = 0; j < f->u.tref.nidx; j++)
                    if (f->u.tref.idx[j].dim == dim)
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

void fe_check_assign(fe_checker *c, ast_stmt *s)
{
    ast_tref *l = &s->u.assign.lhs;
    rhs_state st = {.lhs = l->name.s, .ok = true};
    bool ok = fe_resolve_indices(c, l, false);
    int dims[IR_MAX_RANK + 1];
    for (int i = 0; i < l->nidx && i <= IR_MAX_RANK; i++)
        dims[i] = l->idx[i].dim;
    bool constrained = l->nunred > 0;
    for (int i = 0; i < l->nidx; i++)
        constrained |= l->idx[i].axes != NULL;
    ir_sharding sh = ir_sharding_replicated();
    if (ok && l->nidx <= IR_MAX_RANK && constrained && !fe_check_sharding(c, l, &sh))
        ok = false;

    int nfactors = count_factors(s->u.assign.rhs, FE_MAX_FACTORS);
    if (nfactors > FE_MAX_FACTORS) {
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
    for (int i = 0; i < l->nidx && st.ok && ok; i++)
        if (!expr_has_index(s->u.assign.rhs, l->idx[i].dim))
            diag_error(c->diag, l->idx[i].loc,
                       "index '%s' of '%s' appears in no term of the right side",
                       l->idx[i].name, l->name.s);
    ir_dtype dt = st.first ? st.first->dtype : IR_F32;
    if (!fe_check_shape(c, l->name.s, l->name.loc, dt, l->nidx, dims))
        ok = false;

    fe_tensor *t = fe_define_tensor(c, l->name, IR_VAL_OP);
    if (!t)
        return;
    t->dtype = dt;
    t->rank = l->nidx <= IR_MAX_RANK ? l->nidx : IR_MAX_RANK;
    memcpy(t->dims, dims, (size_t)t->rank * sizeof *dims);
    t->sh = sh;
    t->has_constraint = constrained;
    t->bad = !ok || !st.ok || !st.first;
}
