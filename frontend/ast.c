/*
 * ast.c - the parser's list vectors.  Lists grow on the heap while the parser
 * collects their elements and move into the arena once the enclosing node is
 * built, so error recovery only has to free the vectors it discards.
 */
#include "ast.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Out of memory is fatal everywhere in the compiler (see arena.h). */
static void *xrealloc(void *p, size_t size)
{
    void *q = realloc(p, size);
    if (!q) {
        fputs("einc: out of memory\n", stderr);
        exit(1);
    }
    return q;
}

fe_list *fe_list_new(void *first)
{
    fe_list *l = xrealloc(NULL, sizeof *l);
    memset(l, 0, sizeof *l);
    if (first)
        fe_list_push(l, first);
    return l;
}

fe_list *fe_list_push(fe_list *l, void *item)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4;
        l->items = xrealloc(l->items, (size_t)l->cap * sizeof *l->items);
    }
    l->items[l->n++] = item;
    return l;
}

void fe_list_free(fe_list *l)
{
    if (!l)
        return;
    free(l->items);
    free(l);
}

void **fe_list_take(ir_arena *a, fe_list *l, int *n)
{
    *n = l ? l->n : 0;
    void **out = NULL;
    if (*n > 0) {
        out = ir_alloc(a, (size_t)*n * sizeof *out);
        memcpy(out, l->items, (size_t)*n * sizeof *out);
    }
    fe_list_free(l);
    return out;
}

ast_index *fe_list_take_indices(ir_arena *a, fe_list *l, int *n)
{
    *n = l ? l->n : 0;
    ast_index *out = NULL;
    if (*n > 0) {
        out = ir_alloc(a, (size_t)*n * sizeof *out);
        for (int i = 0; i < *n; i++)
            out[i] = *(ast_index *)l->items[i];
    }
    fe_list_free(l);
    return out;
}

int ast_factor_children(const ast_factor *f, ast_expr *const **kids)
{
    switch (f->kind) {
    case AST_F_PAREN:
        *kids = &f->u.paren;
        return 1;
    case AST_F_CALL:
        *kids = f->u.call.args;
        return f->u.call.nargs;
    case AST_F_CMP:
        *kids = f->u.cmp.sides;
        return 2;
    case AST_F_TENSOR:
    case AST_F_NUMBER:
    case AST_F_INDEX:
        break;
    }
    *kids = NULL;
    return 0;
}

int ast_tref_dims(const ast_tref *t, int *dims)
{
    const ast_tref *ids = t->nidx > 0 ? t->idx[0].tensor : NULL;
    int n = 0;
    for (int j = 0; ids && j < ids->nidx; j++)
        dims[n++] = ids->idx[j].dim;
    for (int j = ids ? 1 : 0; j < t->nidx; j++)
        dims[n++] = t->idx[j].dim;
    return n;
}
