/*
 * source.c - reading a .ein file into memory for the frontend.
 *
 * The source is opened by open_input: without blocking, so that a FIFO
 * (named pipe) no process writes to cannot hang einc in open(); a pipe
 * with a writer (`einc <(gen.sh)`) is read to its end as before, and
 * devices, sockets and directories are refused.  The -o path is checked
 * against the inputs here too (drv_check_output), before anything is
 * compiled: `einc m.ein -o m.ein` replaced the source.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver.h"

/* What a file that is not a regular file is, for messages. */
static const char *kind_of(mode_t mode)
{
    return S_ISCHR(mode)    ? "a character device"
           : S_ISFIFO(mode) ? "a FIFO (named pipe)"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISDIR(mode)  ? "a directory"
                            : "a file of an unknown kind";
}

/* Opens `path` for reading without blocking on a FIFO (O_NONBLOCK,
 * cleared once open): a regular file or a pipe (*pipe says which).  On
 * failure prints "WHO: error: ..." and returns NULL. */
static FILE *open_input(const char *path, const char *who, bool *pipe)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "%s: error: cannot open '%s': %s\n", who, path, strerror(errno));
        return NULL;
    }
    struct stat st;
    int flags;
    FILE *f = NULL;
    if (fstat(fd, &st) != 0)
        fprintf(stderr, "%s: error: cannot open '%s': %s\n", who, path, strerror(errno));
    else if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
        fprintf(stderr, "%s: error: '%s' is %s, not a regular file\n", who, path,
                kind_of(st.st_mode));
    else if ((flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 ||
             !(f = fdopen(fd, "rb")))
        fprintf(stderr, "%s: error: cannot open '%s': %s\n", who, path, strerror(errno));
    if (!f) {
        close(fd);
        return NULL;
    }
    *pipe = S_ISFIFO(st.st_mode);
    return f;
}

char *drv_read_source(const char *path, const char *who, size_t *len)
{
    bool pipe;
    FILE *f = open_input(path, who, &pipe);
    if (!f)
        return NULL;
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
    if (buf && pipe && n == 0) {
        /* Opened without blocking, a FIFO no process writes to reads as
         * empty at once: say so rather than compile nothing. */
        fprintf(stderr, "%s: error: '%s' is a FIFO (named pipe) and no process wrote to it\n",
                who, path);
        free(buf);
        buf = NULL;
    }
    *len = n;
    return buf;
}

int drv_check_output(const char *who, const char *output, const char *const *inputs, int ninputs)
{
    struct stat out, in;
    bool exists = stat(output, &out) == 0;
    if (exists && !S_ISREG(out.st_mode)) {
        fprintf(stderr, "%s: error: -o %s is %s, not a regular file; einc only writes or "
                "replaces a regular file\n", who, output, kind_of(out.st_mode));
        return 1;
    }
    for (int i = 0; i < ninputs; i++) {
        bool same = exists ? stat(inputs[i], &in) == 0 && in.st_dev == out.st_dev &&
                                 in.st_ino == out.st_ino
                           : strcmp(inputs[i], output) == 0;
        if (same) {
            fprintf(stderr, "%s: error: -o %s is the input file '%s'; writing it would replace "
                    "the input\n", who, output, inputs[i]);
            return 1;
        }
    }
    return 0;
}
