/*
 * diag.c - file:line:col diagnostics with the source line and a caret.
 *
 * Line and column are found by scanning the buffer up to the offset, only
 * when a message is printed.  Very long lines (a 10 MB line is legal input)
 * are shown as a window of at most 160 bytes around the column, so the caret
 * still points at the right byte and the terminal is not flooded.
 */
#include "diag.h"

#include <stdarg.h>
#include <string.h>

#define WINDOW 160

void diag_init(diag_ctx *d, const char *filename, const char *src, size_t len)
{
    memset(d, 0, sizeof *d);
    d->filename = filename;
    d->src = src;
    d->len = len;
    d->out = stderr;
    d->max_errors = 20;
}

void diag_linecol(const diag_ctx *d, uint32_t loc, int *line, int *col)
{
    size_t end = loc < d->len ? loc : d->len;
    int l = 1;
    size_t start = 0;
    for (size_t i = 0; i < end; i++)
        if (d->src[i] == '\n') {
            l++;
            start = i + 1;
        }
    *line = l;
    *col = (int)(end - start) + 1;
}

/* Prints the line holding `loc` and a caret under it. */
static void show_line(const diag_ctx *d, uint32_t loc)
{
    if (!d->src || loc == DIAG_NOLOC)
        return;
    size_t at = loc < d->len ? loc : d->len;
    size_t start = at, end = at;
    while (start > 0 && d->src[start - 1] != '\n')
        start--;
    while (end < d->len && d->src[end] != '\n')
        end++;
    size_t from = start, to = end;
    if (to - from > WINDOW) {
        from = at > start + WINDOW / 2 ? at - WINDOW / 2 : start;
        to = from + WINDOW < end ? from + WINDOW : end;
    }
    fputs("    ", d->out);
    for (size_t i = from; i < to; i++) {
        unsigned char c = (unsigned char)d->src[i];
        /* Control bytes (and NUL) would corrupt the caret line: show '?'. */
        fputc(c == '\t' ? ' ' : (c < 0x20 || c == 0x7f) ? '?' : c, d->out);
    }
    fputs("\n    ", d->out);
    for (size_t i = from; i < at; i++) {
        unsigned char c = (unsigned char)d->src[i];
        /* Count one column per character: skip UTF-8 continuation bytes. */
        if ((c & 0xC0) != 0x80)
            fputc(' ', d->out);
    }
    fputs("^\n", d->out);
}

static void report(diag_ctx *d, const char *kind, uint32_t loc, const char *fmt, va_list ap)
{
    if (loc != DIAG_NOLOC && d->src) {
        int line, col;
        diag_linecol(d, loc, &line, &col);
        fprintf(d->out, "%s:%d:%d: %s: ", d->filename ? d->filename : "<input>", line, col, kind);
    } else {
        fprintf(d->out, "%s: %s: ", d->filename ? d->filename : "einc", kind);
    }
    vfprintf(d->out, fmt, ap);
    fputc('\n', d->out);
    show_line(d, loc);
}

/* How many errors are printed before the rest are only counted. */
static int error_limit(const diag_ctx *d)
{
    return d->max_errors > 0 ? d->max_errors : 20;
}

void diag_verror(diag_ctx *d, uint32_t loc, const char *fmt, va_list ap)
{
    d->nerrors++;
    /* Past the limit an error is only counted: diag_finish says how many.
     * The line at the limit says so at once, for a caller that stops
     * without calling diag_finish. */
    if (d->nerrors <= error_limit(d))
        report(d, "error", loc, fmt, ap);
    else if (d->nerrors == error_limit(d) + 1)
        fprintf(d->out, "%s: too many errors; the rest are counted, not shown\n",
                d->filename ? d->filename : "einc");
}

void diag_finish(diag_ctx *d)
{
    int hidden = d->nerrors - error_limit(d) - d->nsummarized;
    if (hidden <= 0)
        return;
    fprintf(d->out, "%s: ... and %d more error%s\n", d->filename ? d->filename : "einc", hidden,
            hidden == 1 ? "" : "s");
    d->nsummarized += hidden;
}

void diag_error(diag_ctx *d, uint32_t loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_verror(d, loc, fmt, ap);
    va_end(ap);
}

/* A warning or note: not counted, and not printed once errors are only
 * counted (a note would belong to an error not shown). */
#define REPORT_UNCOUNTED(kind)                     \
    do {                                           \
        if (d->nerrors > error_limit(d))           \
            return;                                \
        va_list ap;                                \
        va_start(ap, fmt);                         \
        report(d, kind, loc, fmt, ap);             \
        va_end(ap);                                \
    } while (0)

void diag_warning(diag_ctx *d, uint32_t loc, const char *fmt, ...)
{
    REPORT_UNCOUNTED("warning");
}

void diag_note(diag_ctx *d, uint32_t loc, const char *fmt, ...)
{
    REPORT_UNCOUNTED("note");
}
