/*
 * paths.c - the files a user names on an executable's command line.
 *
 * Inputs (--input, --data, --eval-data, --prompt-ids, a --resume
 * checkpoint's files and records) are opened by rt_open_input alone.  It opens with O_NONBLOCK,
 * so that a FIFO (named pipe) returns at once instead of blocking open()
 * until some process writes to it, which may be never; it then checks the
 * descriptor it opened (fstat: no race with a rename) and refuses anything
 * but a regular file, whose reads are preads at offsets and a size known
 * in advance; and only then clears O_NONBLOCK.  Before, a FIFO given as
 * --input hung the run in open(), before the regular-file check that
 * already refused /dev/zero.
 *
 * Outputs go through rt_output_target (a path that exists must be a
 * regular file, which the atomic rename then replaces).  Before the run,
 * rt_check_paths compares every file the command line names, to be
 * written or read, with every other: two outputs naming one file (two
 * --output, or --trace and an --output) would leave only the last one
 * written, and an output naming an input would replace it (but for a
 * tensor updated in place: --input KC=kc.npy --output KC=kc.npy).  Two paths
 * name one file when they exist with the same device and inode (hard and
 * symbolic links included), or when they do not exist and their
 * directories' real paths and their names are the same.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_internal.h"
#include "rt_job.h"

int rt_open_input(const char *path, struct stat *st, char *err, size_t errlen)
{
    struct stat own;
    if (!st)
        st = &own;
    memset(st, 0, sizeof *st);
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

/* One file the command line names. */
typedef enum use_kind {
    USE_OUTPUT, /* written: --output, --trace, --metrics, --generated */
    USE_SAVE,   /* written: a file of the --save checkpoint */
    USE_INPUT,  /* read: --input, --data, --eval-data, --prompt-ids */
    USE_RESUME, /* read: a file of the --resume checkpoint */
} use_kind;

typedef struct path_use {
    use_kind kind;
    const char *tensor; /* the NAME of --input NAME=... and --output NAME=..., else NULL */
    char what[300];  /* the flag as written, for messages: "--output C=c.npy" */
    bool exists;     /* st holds the file's device and inode */
    struct stat st;
    char *canon;     /* the real path (of the directory, for a new file), malloc'd */
} path_use;

/* `path`'s real path, or for a file that does not exist its directory's
 * real path and its name; `path` itself when neither resolves; malloc'd. */
static char *canonical(const char *path)
{
    char *real = realpath(path, NULL);
    if (real)
        return real;
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    char *rdir = dir ? realpath(dir, NULL) : NULL;
    free(dir);
    if (!rdir)
        return strdup(path);
    const char *base = slash ? slash + 1 : path;
    size_t n = strlen(rdir) + strlen(base) + 2;
    char *out = malloc(n);
    if (out)
        snprintf(out, n, "%s/%s", strcmp(rdir, "/") ? rdir : "", base);
    free(rdir);
    return out;
}

/* Appends a use of `path` to uses[*n]; false when out of memory. */
static bool add_use(path_use *uses, int *n, use_kind kind, const char *path, const char *fmt,
                    const char *a, const char *b)
{
    path_use *u = &uses[(*n)++];
    u->kind = kind;
    u->tensor = NULL;
    snprintf(u->what, sizeof u->what, fmt, a, b);
    u->exists = stat(path, &u->st) == 0;
    u->canon = canonical(path);
    return u->canon != NULL;
}

/* Adds the files of checkpoint `dir` (--save or --resume) as uses. */
static bool add_checkpoint(path_use *uses, int *n, use_kind kind, const char *flag,
                           const char *dir, const rt_program *p)
{
    char **files;
    int nfiles;
    bool ok = rt_checkpoint_files(dir, p, &files, &nfiles) == 0;
    for (int i = 0; ok && i < nfiles; i++)
        ok = add_use(uses, n, kind, files[i], flag, dir, files[i]);
    for (int i = 0; files && i < nfiles; i++)
        free(files[i]);
    free(files);
    return ok;
}

static bool same_file(const path_use *a, const path_use *b)
{
    if (a->exists != b->exists)
        return false;
    if (a->exists)
        return a->st.st_dev == b->st.st_dev && a->st.st_ino == b->st.st_ino;
    return strcmp(a->canon, b->canon) == 0;
}

/* Whether uses `a` and `b` of one file clash: something written is
 * written once and replaces nothing read, except that --save may write
 * the checkpoint --resume reads, and --output NAME may write the file
 * --input NAME read (a state, such as a KV cache, or a trained param,
 * updated in place: the output is written after the run, atomically). */
static bool clash(const path_use *a, const path_use *b)
{
    bool wa = a->kind == USE_OUTPUT || a->kind == USE_SAVE;
    bool wb = b->kind == USE_OUTPUT || b->kind == USE_SAVE;
    if (!wa && !wb)
        return false;
    if ((a->kind == USE_SAVE && b->kind == USE_RESUME) ||
        (a->kind == USE_RESUME && b->kind == USE_SAVE))
        return false;
    if (a->tensor && b->tensor && a->kind != b->kind && !strcmp(a->tensor, b->tensor))
        return false;
    return same_file(a, b);
}

int rt_check_paths(const rt_options *o, const rt_program *p, char *err, size_t errlen)
{
    int cap = o->noutputs + o->ninputs + o->ndata + o->neval_data + 3 + 3 * (p->ninputs + 2) + 1;
    path_use *uses = calloc((size_t)cap, sizeof *uses);
    if (!uses)
        return rt_errf(err, errlen, "out of memory");
    int n = 0;
    bool ok = true;
    for (int i = 0; ok && i < o->noutputs; i++) {
        ok = add_use(uses, &n, USE_OUTPUT, o->outputs[i].path, "--output %s=%s",
                     o->outputs[i].name, o->outputs[i].path);
        uses[n - 1].tensor = o->outputs[i].name;
    }
    const char *const single[][2] = {{"--trace", o->trace}, {"--metrics", o->metrics},
                                     {"--generated", o->generated}};
    for (size_t i = 0; ok && i < sizeof single / sizeof single[0]; i++)
        if (single[i][1])
            ok = add_use(uses, &n, USE_OUTPUT, single[i][1], "%s %s", single[i][0], single[i][1]);
    if (ok && o->save)
        ok = add_checkpoint(uses, &n, USE_SAVE, "--save %s (%s)", o->save, p);
    for (int i = 0; ok && i < o->ninputs; i++) {
        ok = add_use(uses, &n, USE_INPUT, o->inputs[i].path, "--input %s=%s", o->inputs[i].name,
                     o->inputs[i].path);
        uses[n - 1].tensor = o->inputs[i].name;
    }
    for (int i = 0; ok && i < o->ndata; i++)
        ok = add_use(uses, &n, USE_INPUT, o->data[i].path, "--data %s=%s", o->data[i].name,
                     o->data[i].path);
    for (int i = 0; ok && i < o->neval_data; i++)
        ok = add_use(uses, &n, USE_INPUT, o->eval_data[i].path, "--eval-data %s=%s",
                     o->eval_data[i].name, o->eval_data[i].path);
    if (ok && o->prompt_ids)
        ok = add_use(uses, &n, USE_INPUT, o->prompt_ids, "%s %s", "--prompt-ids", o->prompt_ids);
    if (ok && o->resume)
        ok = add_checkpoint(uses, &n, USE_RESUME, "--resume %s (%s)", o->resume, p);
    if (ok && o->params)
        ok = add_checkpoint(uses, &n, USE_INPUT, "--params %s (%s)", o->params, p);
    int rc = ok ? 0 : rt_errf(err, errlen, "out of memory");
    for (int i = 0; !rc && i < n; i++)
        for (int j = 0; !rc && j < i; j++)
            if (clash(&uses[j], &uses[i]))
                rc = rt_errf(err, errlen, "%s and %s name one file: %s", uses[j].what,
                             uses[i].what, uses[i].kind == USE_INPUT || uses[i].kind == USE_RESUME
                                               ? "an output would replace an input"
                                               : "each output needs a file of its own");
    for (int i = 0; i < n; i++)
        free(uses[i].canon);
    free(uses);
    return rc;
}
