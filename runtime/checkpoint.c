/*
 * checkpoint.c - the files of --save DIR and --resume DIR.
 *
 * A checkpoint is a directory holding NAME.npy for every param and state of
 * the program (global arrays, as --input reads them and --output writes
 * them; names may contain dots: "W.mom.npy"), data.txt, the record of the
 * data order (data.c: the seed, the --data files' identities, the position
 * of the next batch), hparams.txt, the optimizer and hyperparameters of
 * every optimized param (rt_program.hparams; --resume compares them with
 * the program's), and steps.txt, the number of training steps done, in
 * decimal followed by a newline.
 *
 * Each file is replaced atomically (npy.c), but a set of files cannot be:
 * a save interrupted after some .npy files would leave values of two
 * different steps side by side.  So a save is staged, then applied:
 *
 *   1. stage: write data.txt.next, hparams.txt.next and NAME.npy.next for every param and
 *      state (each atomically), then steps.txt.next, the marker that the
 *      staged set is complete;
 *   2. apply: rename each FILE.next over FILE, then steps.txt.next over
 *      steps.txt.
 *
 * A reader (--resume) takes steps.txt.next when it exists, and then each
 * FILE.next that is still there, else FILE (already renamed); without
 * steps.txt.next it takes steps.txt and the FILEs, ignoring any FILE.next
 * (a staging that never finished).  Whatever point a save is interrupted
 * at (a kill, a crash, a full disk), the directory holds one whole step:
 * the previous one until the marker exists, the new one from then on.  A
 * save first applies a staged set an earlier run left half applied, so
 * staging never mixes with it.  The directory is fsync'd between the
 * stages and after the last rename, so the order survives a crash of the
 * machine as well.  A directory without steps.txt or steps.txt.next is
 * refused by --resume: it is not a checkpoint, or its first save never
 * finished.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_internal.h"

/* The file holding the step count. */
#define STEPS_FILE "steps.txt"
/* The file holding the record of the data order. */
#define ORDER_FILE "data.txt"
/* The file holding the optimizers' hyperparameters. */
#define HPARAMS_FILE "hparams.txt"
/* The suffix of a staged file. */
#define NEXT ".next"

/* "dir/file", or with `next` "dir/file.next"; malloc'd (NULL when out of memory). */
static char *join_next(const char *dir, const char *file, int next)
{
    size_t n = strlen(dir) + strlen(file) + sizeof NEXT + 1;
    char *path = malloc(n);
    if (path)
        snprintf(path, n, "%s/%s%s", dir, file, next ? NEXT : "");
    return path;
}

/* "NAME.npy", malloc'd. */
static char *npy_name(const char *name)
{
    size_t n = strlen(name) + 5;
    char *file = malloc(n);
    if (file)
        snprintf(file, n, "%s.npy", name);
    return file;
}

/* 1 if DIR holds a complete staged save (steps.txt.next). */
static int staged(const char *dir)
{
    char *marker = join_next(dir, STEPS_FILE, 1);
    int yes = marker && access(marker, F_OK) == 0;
    free(marker);
    return yes;
}

/* The path a reader takes `file` of DIR from: FILE.next while a complete
 * staged save has it, else FILE.  malloc'd, NULL when out of memory. */
static char *current(const char *dir, const char *file)
{
    if (staged(dir)) {
        char *next = join_next(dir, file, 1);
        if (!next || access(next, F_OK) == 0)
            return next;
        free(next);
    }
    return join_next(dir, file, 0);
}

char *rt_checkpoint_file(const char *dir, const char *name)
{
    char *file = npy_name(name);
    char *path = file ? current(dir, file) : NULL;
    free(file);
    return path;
}

int rt_checkpoint_files(const char *dir, const rt_program *p, char ***files, int *n)
{
    *n = 0;
    *files = calloc((size_t)p->ninputs + 3, sizeof **files);
    if (!*files)
        return -1;
    char **f = *files;
    f[(*n)++] = join_next(dir, STEPS_FILE, 0);
    f[(*n)++] = join_next(dir, ORDER_FILE, 0);
    f[(*n)++] = join_next(dir, HPARAMS_FILE, 0);
    for (int32_t k = 0; k < p->ninputs; k++)
        if (p->inputs[k].role != RT_ROLE_INPUT) {
            char *file = npy_name(p->inputs[k].name);
            f[(*n)++] = file ? join_next(dir, file, 0) : NULL;
            free(file);
        }
    for (int i = 0; i < *n; i++)
        if (!f[i])
            return -1;
    return 0;
}

/* mkdir -p: creates `dir` and its missing parents (mode 0777 less the umask). */
static int make_dirs(const char *dir, char *err, size_t errlen)
{
    char *p = strdup(dir);
    if (!p)
        return rt_errf(err, errlen, "out of memory");
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s)
            continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            rc = rt_errf(err, errlen, "--save %s: cannot create %s: %s", dir, p, strerror(errno));
            break;
        }
        *s = c;
        if (!c)
            break;
    }
    free(p);
    return rc;
}

int rt_checkpoint_prepare(const char *dir, const rt_program *p, char *err, size_t errlen)
{
    for (int32_t k = 0; k < p->ninputs; k++)
        if (p->inputs[k].role != RT_ROLE_INPUT && strchr(p->inputs[k].name, '/'))
            return rt_errf(err, errlen, "--save %s: '%s' contains '/' and cannot name a file",
                           dir, p->inputs[k].name);
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return rt_errf(err, errlen, "--save %s exists and is not a directory", dir);
    } else if (make_dirs(dir, err, errlen)) {
        return -1;
    }
    if (access(dir, W_OK | X_OK) != 0)
        return rt_errf(err, errlen, "--save %s: cannot write into it: %s", dir, strerror(errno));
    return 0;
}

/* A checkpoint's text file `path` opened for reading (rt_open_input: a
 * FIFO put there does not block), or NULL and why not in `why`. */
static FILE *open_record(const char *path, char *why, size_t whylen)
{
    int fd = rt_open_input(path, NULL, why, whylen);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "r");
    if (fd >= 0 && !f) {
        rt_errf(why, whylen, "cannot read %s: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

int rt_checkpoint_steps(const char *flag, const char *dir, int64_t *steps, char *err,
                        size_t errlen)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return rt_errf(err, errlen, "%s %s: %s", flag, dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return rt_errf(err, errlen, "%s %s is not a directory (a checkpoint of --save)", flag,
                       dir);
    char *path = current(dir, STEPS_FILE);
    if (!path)
        return rt_errf(err, errlen, "out of memory");
    char why[512];
    FILE *f = open_record(path, why, sizeof why);
    if (!f) {
        int rc = rt_errf(err, errlen, "%s %s: %s; a directory written by --save has it "
                         "unless its first save was interrupted", flag, dir, why);
        free(path);
        return rc;
    }
    char buf[32] = "";
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    int bad = end == buf || errno || v < 0 || buf[0] == '-' || buf[0] == '+' ||
              (*end && strcmp(end, "\n"));
    int rc = bad ? rt_errf(err, errlen, "%s %s: %s does not hold a step count", flag, dir, path)
                 : 0;
    free(path);
    if (!bad)
        *steps = v;
    return rc;
}

int rt_checkpoint_read_steps(const char *dir, int64_t *steps, char *err, size_t errlen)
{
    return rt_checkpoint_steps("--resume", dir, steps, err, errlen);
}

/* fsync of a directory, so the renames and removals in it are on disk in
 * order; best effort (some file systems refuse it, and the data is there). */
static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* The whole of text stream `f` (closed here) into *text, malloc'd; -1 on
 * a read error or when out of memory. */
static int read_all(FILE *f, char **text)
{
    size_t cap = 0;
    ssize_t n = getdelim(text, &cap, 0, f);
    int bad = ferror(f);
    fclose(f);
    if (n < 0 && !bad) { /* an empty file */
        free(*text);
        *text = calloc(1, 1);
    }
    return bad || !*text ? -1 : 0;
}

int rt_checkpoint_read_record(const char *dir, char **text, char **path, char *err,
                              size_t errlen)
{
    *text = NULL;
    *path = current(dir, ORDER_FILE);
    if (!*path)
        return rt_errf(err, errlen, "out of memory");
    char why[512];
    FILE *f = open_record(*path, why, sizeof why);
    if (!f)
        return rt_errf(err, errlen, "--resume %s: %s; a checkpoint records its data order "
                       "(--seed, --data files) there, so that the resumed run reads the "
                       "batches the uninterrupted run would have", dir, why);
    if (read_all(f, text))
        return rt_errf(err, errlen, "--resume %s: cannot read %s", dir, *path);
    return 0;
}

/* The line of record `rec` whose first word is `name` (ending at its
 * newline or the end), or NULL. */
static const char *find_line(const char *rec, const char *name, size_t len)
{
    for (const char *l = rec; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, name, len) && l[len] == ' ')
            return l;
    return NULL;
}

/* The word at `w` (up to a space or the line's end) into buf. */
static const char *word(const char *w, char *buf, size_t size)
{
    size_t n = strcspn(w, " \n");
    if (n >= size)
        n = size - 1;
    memcpy(buf, w, n);
    buf[n] = 0;
    return buf;
}

/* The word after the one at `w` on its line, or NULL at the line's end. */
static const char *next_word(const char *w)
{
    w += strcspn(w, " \n");
    return *w == ' ' ? w + 1 : NULL;
}

/* Compares line `want` of the program's record ("W OPT name=value ...")
 * with the checkpoint's record `have`: 1 and the first difference in
 * `why`, else 0. */
static int compare_line(const char *want, const char *have, char *why, size_t whylen)
{
    char param[256], opt[64], got[64], w[128], h[128];
    word(want, param, sizeof param);
    const char *hl = find_line(have, param, strlen(param));
    const char *wp = next_word(want);
    word(wp ? wp : "", opt, sizeof opt);
    if (!hl) {
        rt_errf(why, whylen, "the checkpoint does not record '%s' as optimized, the program "
                "optimizes it with %s", param, opt);
        return 1;
    }
    const char *hp = next_word(hl);
    if (strcmp(word(hp ? hp : "", got, sizeof got), opt)) {
        rt_errf(why, whylen, "'%s' was trained with %s, the program optimizes it with %s", param,
                got, opt);
        return 1;
    }
    /* Each name=value of the program's line against the checkpoint's. */
    for (wp = wp ? next_word(wp) : NULL; wp; wp = next_word(wp)) {
        word(wp, w, sizeof w);
        size_t nlen = strcspn(w, "=");
        const char *had = NULL;
        for (const char *q = hp ? next_word(hp) : NULL; q && !had; q = next_word(q))
            if (!strncmp(q, w, nlen + 1))
                had = word(q, h, sizeof h);
        if (!had || strcmp(had, w)) {
            rt_errf(why, whylen, "hyperparameter %.*s of '%s' (%s) differs: the checkpoint has "
                    "%s, the program %s", (int)nlen, w, param, opt, had ? had : "none", w);
            return 1;
        }
    }
    return 0;
}

int rt_checkpoint_check_hparams(const char *dir, const rt_program *p, char *why, size_t whylen)
{
    const char *want = p->hparams ? p->hparams : "";
    char *path = current(dir, HPARAMS_FILE);
    if (!path)
        return rt_errf(why, whylen, "out of memory");
    if (access(path, F_OK) != 0) {
        free(path);
        return 2;
    }
    char *have = NULL;
    FILE *f = open_record(path, why, whylen);
    int rc = !f ? -1 : read_all(f, &have) ? rt_errf(why, whylen, "cannot read %s", path) : 0;
    for (const char *l = want; !rc && *l; l = strchr(l, '\n') + 1) {
        rc = compare_line(l, have, why, whylen);
        if (!strchr(l, '\n'))
            break;
    }
    free(have);
    free(path);
    return rc;
}

/* Renames DIR/file.next over DIR/file; a missing file.next is fine unless
 * `needed` (it was renamed before an earlier apply stopped). */
static int rename_next(const char *dir, const char *file, int needed, char *err, size_t errlen)
{
    char *from = join_next(dir, file, 1), *to = join_next(dir, file, 0);
    int rc = 0;
    if (!from || !to)
        rc = rt_errf(err, errlen, "out of memory");
    else if (rename(from, to) != 0 && (needed || errno != ENOENT))
        rc = rt_errf(err, errlen, "cannot rename %s to %s: %s", from, to, strerror(errno));
    free(from);
    free(to);
    return rc;
}

/* Step 2 of a save: renames every staged file of `p`'s checkpoint over its
 * own, steps.txt.next last. */
static int apply_staged(const char *dir, const rt_program *p, char *err, size_t errlen)
{
    if (rename_next(dir, ORDER_FILE, 0, err, errlen) ||
        rename_next(dir, HPARAMS_FILE, 0, err, errlen))
        return -1;
    for (int32_t k = 0; k < p->ninputs; k++) {
        if (p->inputs[k].role == RT_ROLE_INPUT)
            continue;
        char *file = npy_name(p->inputs[k].name);
        int rc = file ? rename_next(dir, file, 0, err, errlen)
                      : rt_errf(err, errlen, "out of memory");
        free(file);
        if (rc)
            return -1;
    }
    sync_dir(dir);
    int rc = rename_next(dir, STEPS_FILE, 1, err, errlen);
    sync_dir(dir);
    return rc;
}

/* Writes the `n` bytes at `data` to DIR/file.next, atomically. */
static int stage_text(const char *dir, const char *file, const char *data, size_t n, char *err,
                      size_t errlen)
{
    char *path = join_next(dir, file, 1);
    int rc = path ? rt_write_file_atomic(path, data, n, err, errlen)
                  : rt_errf(err, errlen, "out of memory");
    free(path);
    return rc;
}

int rt_checkpoint_write(const char *dir, const rt_program *p, void *const *values,
                        const char *record, int64_t steps, char *err, size_t errlen)
{
    /* A save that an earlier run left half applied goes first. */
    if (staged(dir) && apply_staged(dir, p, err, errlen))
        return -1;
    const char *hp = p->hparams ? p->hparams : "";
    if (stage_text(dir, ORDER_FILE, record, strlen(record), err, errlen) ||
        stage_text(dir, HPARAMS_FILE, hp, strlen(hp), err, errlen))
        return -1;
    for (int32_t k = 0; k < p->ninputs; k++) {
        if (p->inputs[k].role == RT_ROLE_INPUT)
            continue;
        char *file = npy_name(p->inputs[k].name);
        char *path = file ? join_next(dir, file, 1) : NULL;
        int rc = path ? rt_npy_write(path, &p->inputs[k], values[k], err, errlen)
                      : rt_errf(err, errlen, "out of memory");
        free(path);
        free(file);
        if (rc)
            return -1;
    }
    sync_dir(dir);
    char text[32];
    int n = snprintf(text, sizeof text, "%lld\n", (long long)steps);
    if (stage_text(dir, STEPS_FILE, text, (size_t)n, err, errlen))
        return -1;
    sync_dir(dir);
    return apply_staged(dir, p, err, errlen);
}
