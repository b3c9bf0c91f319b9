/*
 * source.c - reading a .ein file into memory for the frontend.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

char *drv_read_source(const char *path, const char *who, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: error: cannot open '%s': %s\n", who, path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            char *nb = cap < DRV_MAX_SOURCE_BYTES ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                fprintf(stderr, "%s: error: '%s' is larger than %u MiB or memory ran out\n", who,
                        path, DRV_MAX_SOURCE_BYTES >> 20);
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                fprintf(stderr, "%s: error: cannot read '%s': %s\n", who, path, strerror(errno));
                free(buf);
                buf = NULL;
            }
            break;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}
