/*
 * diag.h - compiler diagnostics in the C compilers' format.
 *
 *     model.ein:3:14: error: dim 'Q' is not defined
 *         input In[Q_X, D] : f32
 *                  ^
 *
 * Locations are byte offsets into the source buffer; they become line:col
 * (1-based, col in bytes) only when reported.  A diag_ctx counts errors and
 * stops printing after `max_errors` (the count goes on), so callers can keep
 * checking and report every error in a file; diag_finish then says how many
 * were not shown ("... and 7 more errors").
 */
#ifndef EINC_DIAG_H
#define EINC_DIAG_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

/* Sentinel location: no source position (message printed without caret). */
#define DIAG_NOLOC UINT32_MAX

/* Diagnostic state for one source buffer. */
typedef struct diag_ctx {
    const char *filename; /* as given on the command line; not owned */
    const char *src;      /* the source text, not NUL-terminated necessarily; not owned */
    size_t len;           /* bytes in src */
    FILE *out;            /* where messages go (stderr by default) */
    int nerrors;          /* errors reported so far (printed or not) */
    int max_errors;       /* print at most this many; 0 = 20 */
    int nsummarized;      /* errors past the limit that diag_finish has already counted */
} diag_ctx;

/* Initialises `d` for `src` (borrowed, must outlive `d`). */
void diag_init(diag_ctx *d, const char *filename, const char *src, size_t len);
/* Reports an error at byte offset `loc` (DIAG_NOLOC for none). */
void diag_error(diag_ctx *d, uint32_t loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, with a va_list. */
void diag_verror(diag_ctx *d, uint32_t loc, const char *fmt, va_list ap);
/* Reports a warning (not counted as an error): something legal that is
 * probably not what the user meant. */
void diag_warning(diag_ctx *d, uint32_t loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Reports a note (not counted as an error), e.g. "previous definition is here". */
void diag_note(diag_ctx *d, uint32_t loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prints "FILE: ... and N more errors" for the errors past `max_errors`
 * not yet counted by an earlier call; nothing if there are none.  Call it when a stage that may report many errors is
 * done (fe_compile does). */
void diag_finish(diag_ctx *d);
/* 1-based line and byte column of `loc`. */
void diag_linecol(const diag_ctx *d, uint32_t loc, int *line, int *col);

#endif
