/*
 * warn_call.c - warnings for products that a call sees one by one.
 *
 * Nothing is summed inside a call (docs/language.md, "Functions" and
 * "Dtypes and casts"): the argument is computed over all of its indices and
 * the statement sums afterwards.  A product of tensors that share an index
 * the left side lacks is then a whole outer product made before the sum,
 * which is legal but rarely meant; these warnings name the statement to
 * write instead.
 */
#include <stdio.h>
#include <string.h>

#include "fe_internal.h"

/* Whether dim `d` is one of the `nlhs` dims of the left side. */
static bool on_left(int d, int nlhs, const int *lhs_dims)
{
    for (int q = 0; q < nlhs; q++)
        if (lhs_dims[q] == d)
            return true;
    return false;
}

void fe_warn_product_in_call(fe_checker *c, const ast_factor *f, int nlhs, const int *lhs_dims)
{
    if (f->u.call.callee != AST_CALL_FN || f->u.call.fn == IR_FN_NEG || nlhs < 0)
        return;
    const ast_expr *a = f->u.call.args[0];
    for (int t = 0; t < a->nterms; t++) {
        const ast_term *term = a->terms[t];
        for (int i = 0; i < term->nfactors; i++) {
            const ast_factor *x = term->factors[i];
            for (int j = i + 1; x->kind == AST_F_TENSOR && j < term->nfactors; j++) {
                const ast_factor *y = term->factors[j];
                for (int k = 0; y->kind == AST_F_TENSOR && k < x->u.tref.nidx; k++) {
                    int d = x->u.tref.idx[k].dim;
                    bool in_y = false;
                    for (int q = 0; q < y->u.tref.nidx; q++)
                        in_y |= y->u.tref.idx[q].dim == d;
                    if (d < 0 || !in_y || on_left(d, nlhs, lhs_dims))
                        continue;
                    diag_warning(c->diag, f->u.call.fname.loc,
                                 "%s is applied to each product of %s and %s, and then the "
                                 "statement sums over %s: nothing is summed inside a call.  To "
                                 "apply %s to the contraction over %s, write the contraction as "
                                 "a statement of its own",
                                 f->u.call.fname.s, x->u.tref.name.s, y->u.tref.name.s,
                                 x->u.tref.idx[k].name, f->u.call.fname.s, x->u.tref.idx[k].name);
                    return;
                }
            }
        }
    }
}

/* Appends dim `d` to `order` (`*n` so far) unless `has` (one flag per dim
 * of the module) already holds it or it is unresolved. */
static void mark_dim(int d, bool *has, int *order, int *n)
{
    if (d >= 0 && !has[d]) {
        has[d] = true;
        order[(*n)++] = d;
    }
}

/* mark_dim for each dim that indexes the tensors under `e`, in the order
 * they are written (ast_tref_dims: a gather's index tensor's dims). */
static void mark_dims(const ast_expr *e, bool *has, int *order, int *n)
{
    for (int i = 0; i < e->nterms; i++)
        for (int k = 0; k < e->terms[i]->nfactors; k++) {
            const ast_factor *f = e->terms[i]->factors[k];
            if (f->kind == AST_F_TENSOR) {
                int dims[2 * IR_MAX_RANK], nd = ast_tref_dims(&f->u.tref, dims);
                for (int j = 0; j < nd; j++)
                    mark_dim(dims[j], has, order, n);
            }
            ast_expr *const *kids;
            int nk = ast_factor_children(f, &kids);
            for (int j = 0; j < nk; j++)
                mark_dims(kids[j], has, order, n);
        }
}

/* The first top-level term of `e` that multiplies two or more tensors, or NULL. */
static const ast_term *product_term(const ast_expr *e)
{
    for (int t = 0; t < e->nterms; t++) {
        int n = 0;
        for (int i = 0; i < e->terms[t]->nfactors; i++)
            n += e->terms[t]->factors[i]->kind == AST_F_TENSOR;
        if (n >= 2)
            return e->terms[t];
    }
    return NULL;
}

/* Appends printf-style text to `buf` (size `n`), truncating. */
static void append(char *buf, size_t n, const char *fmt, const char *a, const char *b)
{
    size_t l = strlen(buf);
    if (l + 1 < n)
        snprintf(buf + l, n - l, fmt, a, b);
}

void fe_warn_sum_in_cast(fe_checker *c, const ast_factor *f, int nlhs, const int *lhs_dims)
{
    if (f->u.call.callee != AST_CALL_CAST || nlhs < 0 || c->m->ndims <= 0)
        return;
    const ast_expr *a = f->u.call.args[0];
    const ast_term *prod = product_term(a);
    if (!prod)
        return;
    int nd = c->m->ndims, n = 0;
    bool *has = ir_alloc(c->arena, (size_t)nd * sizeof *has); /* zeroed */
    int *order = ir_alloc(c->arena, (size_t)nd * sizeof *order);
    mark_dims(a, has, order, &n);
    /* The argument's shape as the IR computes it (the left side's dims,
     * then the summed ones as written), the summed dims and the outer
     * product's global size. */
    char shape[256] = "", summed[128] = "";
    double elems = 1;
    for (int q = 0; q < nlhs; q++)
        if (lhs_dims[q] >= 0 && has[lhs_dims[q]])
            append(shape, sizeof shape, "%s%s", shape[0] ? ", " : "", c->m->dims[lhs_dims[q]].name);
    for (int i = 0; i < n; i++) {
        const ir_dimdef *d = &c->m->dims[order[i]];
        elems *= (double)d->size;
        if (on_left(order[i], nlhs, lhs_dims))
            continue;
        append(shape, sizeof shape, "%s%s", shape[0] ? ", " : "", d->name);
        append(summed, sizeof summed, "%s%s", summed[0] ? ", " : "", d->name);
    }
    if (!summed[0])
        return;
    const char *to = f->u.call.fname.s, *from = ir_dtype_name(f->u.call.arg_dtype);
    double mib = elems * (double)ir_dtype_size(f->u.call.arg_dtype) / (1024.0 * 1024.0);
    char fix[320] = "";
    if (ir_dtype_size(f->u.call.cast_dtype) > ir_dtype_size(f->u.call.arg_dtype)) {
        /* Converting each operand once gives the einsum the wider dtype's
         * products and sum, which is what a widening cast is for. */
        snprintf(fix, sizeof fix, "To sum the products in %s, cast the operands: ", to);
        const char *sep = "";
        for (int i = 0; i < prod->nfactors; i++)
            if (prod->factors[i]->kind == AST_F_TENSOR) {
                append(fix, sizeof fix, "%s%s(", sep, to);
                append(fix, sizeof fix, "%s%s", prod->factors[i]->u.tref.name.s, "[...])");
                sep = " * ";
            }
    } else {
        snprintf(fix, sizeof fix, "To round the sum instead, write the contraction as a "
                 "statement of its own and cast its result");
    }
    diag_warning(c->diag, f->u.call.fname.loc,
                 "%s(...) converts each product of its argument, a [%s] %s tensor of %.3g values "
                 "(%.3g MiB over all devices), and then the statement sums over %s: nothing is "
                 "summed inside a call.  %s",
                 to, shape, from, elems, mib, summed, fix);
}
