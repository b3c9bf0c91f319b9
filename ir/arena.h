/*
 * arena.h - bump allocation with one free for everything (QBE's alloc/freeall).
 *
 * An ir_arena hands out zeroed, max-aligned blocks from a chain of chunks; the
 * whole chain is released by ir_arena_free.  Allocation failure is fatal
 * (prints and exits 1): the compiler has no partial-failure recovery path for
 * out-of-memory.
 */
#ifndef EINC_ARENA_H
#define EINC_ARENA_H

#include <stdarg.h>
#include <stddef.h>

struct ir_chunk;

/* A chain of chunks; zero-initialise to get an empty arena. */
typedef struct ir_arena {
    struct ir_chunk *head; /* newest chunk, allocation happens here */
} ir_arena;

/* `size` zeroed bytes aligned for any type, valid until ir_arena_free. */
void *ir_alloc(ir_arena *a, size_t size);
/* Copies of a string / of `len` bytes plus a NUL. */
char *ir_strdup(ir_arena *a, const char *s);
char *ir_strndup(ir_arena *a, const char *s, size_t len);
/* printf into the arena. */
char *ir_sprintf(ir_arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *ir_vsprintf(ir_arena *a, const char *fmt, va_list ap);
/* Grows an arena array: returns a copy of `old` (n elements of `elem` bytes)
 * with room for `newcap` elements; the old block is abandoned to the arena. */
void *ir_grow(ir_arena *a, void *old, size_t n, size_t newcap, size_t elem);
/* Frees every chunk; the arena is empty again afterwards. */
void ir_arena_free(ir_arena *a);

#endif
