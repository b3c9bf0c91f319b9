/*
 * paths.c - the files a user names on an executable's command line.
 *
 * Inputs (--input, --data, --prompt-ids, a --resume checkpoint's files and
 * records) are opened by rt_open_input alone.  It opens with O_NONBLOCK,
 * so that a FIFO (named pipe) returns at once instead of blocking open()
 * until some process writes to it, which may be never; it then checks the
 * descriptor it opened (fstat: no race with a rename) and refuses anything
 * but a regular file, whose reads are preads at offsets and a size known
 * in advance; and only then clears O_NONBLOCK.  Before, a FIFO given as
 * --input hung the run in open(), before the regular-file check that
 * already refused /dev/zero.
 *
 * Outputs go through rt_output_target (a path that exists must be a
 * regular file, which the atomic rename then replaces).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_internal.h"

int rt_open_input(const char *path, struct stat *st, char *err, size_t errlen)
{
    struct stat own;
    if (!st)
        st = &own;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return rt_errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    int flags;
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || (flags = fcntl(fd, F_GETFL)) < 0 ||
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int e = errno;
        bool regular = S_ISREG(st->st_mode);
        close(fd);
        if (!regular)
            return rt_errf(err, errlen, "%s is %s, not a regular file; an input is read from a "
                           "regular file", path, rt_file_kind(st->st_mode));
        return rt_errf(err, errlen, "cannot open %s: %s", path, strerror(e));
    }
    return fd;
}

const char *rt_file_kind(mode_t mode)
{
    return S_ISCHR(mode)    ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISFIFO(mode) ? "a FIFO (named pipe)"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISDIR(mode)  ? "a directory"
                            : "a file of an unknown kind";
}

int rt_output_target(const char *path, char **target, struct stat *st, bool *exists,
                     char *err, size_t errlen)
{
    struct stat lst;
    *target = NULL;
    *exists = false;
    bool link = lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode);
    if (stat(path, st) != 0) {
        if (link)
            return rt_errf(err, errlen, "%s is a symbolic link to a file that does not exist; "
                           "an output is only written to a regular file", path);
        /* A new file; if its directory is missing, creating the temp file says so. */
        *target = strdup(path);
        return *target ? 0 : rt_errf(err, errlen, "out of memory writing %s", path);
    }
    if (!S_ISREG(st->st_mode))
        return rt_errf(err, errlen, "%s is %s%s, not a regular file; an output only ever replaces "
                       "a regular file", path, link ? "a symbolic link to " : "",
                       rt_file_kind(st->st_mode));
    *exists = true;
    *target = link ? realpath(path, NULL) : strdup(path);
    if (!*target)
        return rt_errf(err, errlen, "cannot resolve %s: %s", path, strerror(errno));
    return 0;
}
