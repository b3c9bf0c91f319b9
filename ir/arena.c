/*
 * arena.c - chunked bump allocator.  Chunks grow geometrically so a module
 * of any size needs few of them; a request larger than a chunk gets a chunk
 * of its own.
 */
#include "arena.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN _Alignof(max_align_t)
#define MIN_CHUNK (64 * 1024)

struct ir_chunk {
    struct ir_chunk *next; /* older chunk */
    size_t used;           /* bytes handed out from data */
    size_t cap;            /* bytes in data */
    _Alignas(max_align_t) unsigned char data[];
};

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "einc: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

void *ir_alloc(ir_arena *a, size_t size)
{
    size = (size + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    if (size == 0)
        size = ALIGN;
    struct ir_chunk *c = a->head;
    if (!c || c->cap - c->used < size) {
        size_t cap = c ? c->cap * 2 : MIN_CHUNK;
        if (cap < size)
            cap = size;
        c = xmalloc(sizeof *c + cap);
        c->used = 0;
        c->cap = cap;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += size;
    memset(p, 0, size);
    return p;
}

char *ir_strndup(ir_arena *a, const char *s, size_t len)
{
    char *p = ir_alloc(a, len + 1);
    memcpy(p, s, len);
    p[len] = 0;
    return p;
}

char *ir_strdup(ir_arena *a, const char *s)
{
    return ir_strndup(a, s, strlen(s));
}

char *ir_vsprintf(ir_arena *a, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        n = 0;
    char *p = ir_alloc(a, (size_t)n + 1);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    return p;
}

char *ir_sprintf(ir_arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *p = ir_vsprintf(a, fmt, ap);
    va_end(ap);
    return p;
}

void *ir_grow(ir_arena *a, void *old, size_t n, size_t newcap, size_t elem)
{
    void *p = ir_alloc(a, newcap * elem);
    if (n && old)
        memcpy(p, old, n * elem);
    return p;
}

void ir_arena_free(ir_arena *a)
{
    struct ir_chunk *c = a->head;
    while (c) {
        struct ir_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
}
