/*
 * checkpoint.c - the files of --save DIR and --resume DIR.
 *
 * A checkpoint is a directory holding NAME.npy for every param and state of
 * the program (global arrays, as --input reads them and --output writes
 * them; names may contain dots: "W.mom.npy"), data.txt, the record of the
 * data order (data.c: the seed, the --data files' identities, the position
 * of the next batch), and steps.txt, the number of training steps done, in
 * decimal followed by a newline.
 *
 * Each file is replaced atomically (npy.c), but a set of files cannot be:
 * a save interrupted after some .npy files would leave values of two
 * different steps side by side.  So a save first removes steps.txt, then
 * writes data.txt and the .npy files, and writes steps.txt last: a directory with a
 * steps.txt holds the values of exactly that step, and one without it is
 * refused by --resume (it is not a checkpoint, or its last save never
 * finished) rather than resumed from a mix.  The directory itself is
 * fsync'd after the removal and after the final rename, so the order
 * survives a crash of the machine as well.
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

/* "dir/file", malloc'd (NULL when out of memory). */
static char *join(const char *dir, const char *file)
{
    size_t n = strlen(dir) + strlen(file) + 2;
    char *path = malloc(n);
    if (path)
        snprintf(path, n, "%s/%s", dir, file);
    return path;
}

char *rt_checkpoint_file(const char *dir, const char *name)
{
    size_t n = strlen(name) + 5;
    char *file = malloc(n);
    if (!file)
        return NULL;
    snprintf(file, n, "%s.npy", name);
    char *path = join(dir, file);
    free(file);
    return path;
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

int rt_checkpoint_read_steps(const char *dir, int64_t *steps, char *err, size_t errlen)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return rt_errf(err, errlen, "--resume %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return rt_errf(err, errlen, "--resume %s is not a directory (a checkpoint of --save)",
                       dir);
    char *path = join(dir, STEPS_FILE);
    if (!path)
        return rt_errf(err, errlen, "out of memory");
    FILE *f = fopen(path, "r");
    if (!f) {
        int rc = rt_errf(err, errlen, "--resume %s: cannot read %s: %s; a directory written by "
                         "--save has it unless its last save was interrupted", dir, path,
                         strerror(errno));
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
    int rc = bad ? rt_errf(err, errlen, "--resume %s: %s does not hold a step count", dir, path)
                 : 0;
    free(path);
    if (!bad)
        *steps = v;
    return rc;
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

int rt_checkpoint_read_record(const char *dir, char **text, char **path, char *err,
                              size_t errlen)
{
    *text = NULL;
    *path = join(dir, ORDER_FILE);
    if (!*path)
        return rt_errf(err, errlen, "out of memory");
    FILE *f = fopen(*path, "r");
    if (!f)
        return rt_errf(err, errlen, "--resume %s: cannot read %s: %s; a checkpoint records "
                       "its data order (--seed, --data files) there, so that the resumed run "
                       "reads the batches the uninterrupted run would have", dir, *path,
                       strerror(errno));
    size_t cap = 0;
    ssize_t n = getdelim(text, &cap, 0, f);
    int bad = ferror(f);
    fclose(f);
    if (n < 0 && !bad) { /* an empty file */
        free(*text);
        *text = calloc(1, 1);
    }
    if (bad || !*text)
        return rt_errf(err, errlen, "--resume %s: cannot read %s", dir, *path);
    return 0;
}

int rt_checkpoint_write(const char *dir, const rt_program *p, void *const *values,
                        const char *record, int64_t steps, char *err, size_t errlen)
{
    char *count = join(dir, STEPS_FILE);
    if (!count)
        return rt_errf(err, errlen, "out of memory");
    if (unlink(count) != 0 && errno != ENOENT) {
        int rc = rt_errf(err, errlen, "cannot remove %s: %s", count, strerror(errno));
        free(count);
        return rc;
    }
    sync_dir(dir);
    char *order = join(dir, ORDER_FILE);
    int wrote = order && !rt_write_file_atomic(order, record, strlen(record), err, errlen);
    if (!order)
        rt_errf(err, errlen, "out of memory");
    free(order);
    if (!wrote) {
        free(count);
        return -1;
    }
    for (int32_t k = 0; k < p->ninputs; k++) {
        if (p->inputs[k].role == RT_ROLE_INPUT)
            continue;
        char *path = rt_checkpoint_file(dir, p->inputs[k].name);
        int rc = path ? rt_npy_write(path, &p->inputs[k], values[k], err, errlen)
                      : rt_errf(err, errlen, "out of memory");
        free(path);
        if (rc) {
            free(count);
            return -1;
        }
    }
    char text[32];
    int n = snprintf(text, sizeof text, "%lld\n", (long long)steps);
    int rc = rt_write_file_atomic(count, text, (size_t)n, err, errlen);
    free(count);
    sync_dir(dir);
    return rc;
}
