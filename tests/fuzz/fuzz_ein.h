/*
 * fuzz_ein.h - what the .ein harnesses share: in-memory capture of
 * diagnostics, and the options an input may carry in its first lines.
 */
#ifndef EINC_FUZZ_EIN_H
#define EINC_FUZZ_EIN_H

#include "frontend.h"
#include "fuzz_util.h"

/* Most -D options an input may carry. */
#define FUZZ_MAX_DEFINES 8

/* Compile options read from an input's leading `#@` comment lines:
 *   #@ -D NAME=VALUE     a -D override (VALUE may be 0 or negative: the
 *                        frontend's own check is fuzzed, not the driver's)
 * The lines stay in the source (they are comments), so the frontend sees
 * the same bytes with or without them. */
typedef struct fuzz_options {
    fe_define defines[FUZZ_MAX_DEFINES]; /* names point into `names` */
    char names[FUZZ_MAX_DEFINES][32];    /* NUL-terminated copies of the names */
    fe_options fe;                       /* refers to `defines` */
} fuzz_options;

/* Fills *o from the leading `#@` lines of data[0..size). */
static inline void fuzz_read_options(const uint8_t *data, size_t size, fuzz_options *o)
{
    memset(o, 0, sizeof *o);
    o->fe.defines = o->defines;
    size_t at = 0;
    while (at + 2 < size && data[at] == '#' && data[at + 1] == '@') {
        size_t end = at;
        while (end < size && data[end] != '\n')
            end++;
        char line[96];
        size_t n = end - at < sizeof line - 1 ? end - at : sizeof line - 1;
        memcpy(line, data + at, n);
        line[n] = 0;
        char name[32];
        long long value;
        if (o->fe.ndefines < FUZZ_MAX_DEFINES &&
            sscanf(line, "#@ -D %31[A-Za-z0-9]=%lld", name, &value) == 2) {
            int k = o->fe.ndefines++;
            memcpy(o->names[k], name, sizeof name);
            o->defines[k].name = o->names[k];
            o->defines[k].value = value;
        }
        at = end + 1;
    }
}

/* Diagnostics written to memory rather than stderr (libFuzzer runs
 * millions of inputs; the text is also checked). */
typedef struct fuzz_diag {
    diag_ctx d;  /* d.out is the memory stream */
    char *text;  /* what was printed, after fuzz_diag_close */
    size_t len;  /* its length */
} fuzz_diag;

/* Sets up `fd` for the source data[0..size). */
static inline void fuzz_diag_open(fuzz_diag *fd, const uint8_t *data, size_t size)
{
    memset(fd, 0, sizeof *fd);
    diag_init(&fd->d, "fuzz.ein", (const char *)data, size);
    fd->d.out = open_memstream(&fd->text, &fd->len);
    FUZZ_CHECK(fd->d.out != NULL, "open_memstream failed");
}

/* Closes the stream; fd->text then holds the messages. */
static inline void fuzz_diag_close(fuzz_diag *fd)
{
    fclose(fd->d.out);
    fd->d.out = NULL;
}

/* Frees the text. */
static inline void fuzz_diag_free(fuzz_diag *fd)
{
    free(fd->text);
    fd->text = NULL;
}

#endif
