/*
 * symtab.c - string-keyed hash table (open addressing, linear probing) for
 * dim and tensor names.  A file may define hundreds of thousands of names,
 * so lookups must not be linear.  Storage is in the frontend arena; growth
 * abandons the old slots to it.
 */
#include <string.h>

#include "fe_internal.h"

/* FNV-1a. */
static uint32_t hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

void *fe_symtab_get(const fe_symtab *t, const char *name)
{
    if (t->cap == 0)
        return NULL;
    for (uint32_t i = hash(name) & (uint32_t)(t->cap - 1);; i = (i + 1) & (uint32_t)(t->cap - 1)) {
        if (!t->keys[i])
            return NULL;
        if (strcmp(t->keys[i], name) == 0)
            return t->vals[i];
    }
}

/* Puts without growing; the table has a free slot. */
static void put(fe_symtab *t, const char *name, void *val)
{
    uint32_t i = hash(name) & (uint32_t)(t->cap - 1);
    while (t->keys[i] && strcmp(t->keys[i], name) != 0)
        i = (i + 1) & (uint32_t)(t->cap - 1);
    if (!t->keys[i])
        t->n++;
    t->keys[i] = name;
    t->vals[i] = val;
}

void fe_symtab_put(ir_arena *a, fe_symtab *t, const char *name, void *val)
{
    /* Keep the load factor at most 1/2. */
    if (2 * (t->n + 1) > t->cap) {
        fe_symtab old = *t;
        t->cap = old.cap ? 2 * old.cap : 16;
        t->n = 0;
        t->keys = ir_alloc(a, (size_t)t->cap * sizeof *t->keys);
        t->vals = ir_alloc(a, (size_t)t->cap * sizeof *t->vals);
        for (int i = 0; i < old.cap; i++)
            if (old.keys[i])
                put(t, old.keys[i], old.vals[i]);
    }
    put(t, name, val);
}
