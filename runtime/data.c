/*
 * data.c - --data: the datasets a training program's inputs are fed from,
 * one batch per step.
 *
 * A --data file for an input of global shape [B, rest...] holds N >= B
 * rows of shape [rest...].  Step g (0-based, counted over the whole
 * training, so a resumed run continues the order) is batch
 * j = g mod (N div B) of epoch e = g div (N div B): positions j*B ..
 * j*B+B-1 of the epoch's order of the rows, which is 0..N-1, or with --seed
 * a permutation drawn from (seed, e).  The N mod B rows past the last whole
 * batch of an epoch are not used in it (PyTorch's drop_last); with a
 * shuffle they are different rows each epoch.  Every --data file of a job
 * has the same N and is read in the same order, so row i of each file
 * stays one sample.
 *
 * The permutation is computed, not stored: position i of epoch e is a
 * keyed 4-round Feistel network over the smallest even number of bits 2h
 * that holds N (a bijection of [0, 2^2h)), applied again while the result
 * is >= N (cycle walking: the orbit of i < N returns to [0, N) within a
 * few steps, and the map stays a bijection of [0, N)).  So every thread
 * and rank finds the rows of its own block from (seed, e, i) alone, with
 * no communication and no O(N) table per epoch, and a test can reproduce
 * the order from docs/runtime.md.
 *
 * Each file is mapped once per process (read-only, shared by the device
 * threads; the kernel's page cache is the only copy), and each device
 * copies only its block of the batch: for each of its rows the box of
 * its block of the rest dims, with rt_copy_box.  Reading through a map
 * beyond the end of a file that shrank would be a SIGBUS; the file's size
 * is checked before each copy, so a truncated file ends the job with a
 * message instead.
 *
 * A checkpoint records the order (rt_data_record, checkpoint.c writes it
 * as DIR/data.txt): the seed, N, B, the position of the next step and, per
 * file, its input, dtype, shape and a hash of its data.  --resume
 * compares the record with the one its own --seed and --data would write
 * (rt_data_check_record) and refuses a difference with a message naming
 * it, because a resumed run that read other batches would give another
 * loss curve than the uninterrupted run with nothing to show for it.  The
 * hash identifies the data, not the path: a data set moved or copied
 * resumes, one regenerated with other values does not.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_internal.h"

/* Checks header `h` of `path` against input `t`: rank, rest dims, at
 * least one batch of rows, then dtype, order and size through
 * rt_npy_check on `t` with N rows; messages start with `flag` and the input. */
static int check_rows(const char *flag, const rt_npy_header *h, const char *path,
                      const rt_tensor_desc *t, char *err, size_t errlen)
{
    int same = h->rank == t->rank;
    for (int32_t d = 1; same && d < t->rank; d++)
        same = h->shape[d] == t->global_shape[d];
    if (!same) {
        char found[160], row[160], want[200];
        rt_format_shape(found, sizeof found, h->rank, h->shape);
        rt_format_shape(row, sizeof row, t->rank - 1, t->global_shape + 1);
        /* "(N, 4)": the row's shape with N in front. */
        int n = snprintf(want, sizeof want, "(N");
        for (int32_t d = 1; d < t->rank && n > 0 && (size_t)n < sizeof want; d++)
            n += snprintf(want + n, sizeof want - (size_t)n, ", %lld",
                          (long long)t->global_shape[d]);
        if (n > 0 && (size_t)n < sizeof want)
            snprintf(want + n, sizeof want - (size_t)n, t->rank == 1 ? ",)" : ")");
        return rt_errf(err, errlen, "%s %s: %s has shape %s, expected %s: N >= %lld rows, "
                       "each shaped like a row %s of '%s'", flag, t->name, path, found, want,
                       (long long)t->global_shape[0], row, t->name);
    }
    if (h->shape[0] < t->global_shape[0])
        return rt_errf(err, errlen, "%s %s: %s has %lld rows, fewer than the batch of %lld "
                       "rows a step takes (dim 0 of '%s')", flag, t->name, path,
                       (long long)h->shape[0], (long long)t->global_shape[0], t->name);
    rt_tensor_desc all = *t;
    all.global_shape[0] = h->shape[0];
    return rt_npy_check(h, path, &all, err, errlen);
}

/* Opens and maps the first `bytes` of `df->path` into df; -1 and a message on failure. */
static int map_file(rt_data_file *df, size_t bytes, char *err, size_t errlen)
{
    char why[512];
    df->fd = rt_open_input(df->path, NULL, why, sizeof why);
    if (df->fd < 0)
        return rt_errf(err, errlen, "%s %s: %s", df->flag, df->name, why);
    void *m = mmap(NULL, bytes, PROT_READ, MAP_SHARED, df->fd, 0);
    if (m == MAP_FAILED)
        return rt_errf(err, errlen, "%s %s: cannot map %s: %s", df->flag, df->name, df->path,
                       strerror(errno));
    df->map = m;
    df->map_bytes = bytes;
    return 0;
}

int rt_data_add(rt_dataset *ds, const rt_tensor_desc *t, const char *path, char *err,
                size_t errlen)
{
    const char *flag = ds->flag ? ds->flag : "--data";
    if (t->rank == 0)
        return rt_errf(err, errlen, "%s %s: '%s' is a scalar; a dataset feeds the rows of "
                       "an input's dim 0 (its batch)", flag, t->name, t->name);
    if (t->global_shape[0] == 0)
        return rt_errf(err, errlen, "%s %s: '%s' has a batch (dim 0) of 0 rows", flag, t->name,
                       t->name);
    rt_data_file *files = realloc(ds->files, (size_t)(ds->nfiles + 1) * sizeof *files);
    if (!files)
        return rt_errf(err, errlen, "out of memory");
    ds->files = files;
    rt_data_file *df = &files[ds->nfiles++];
    memset(df, 0, sizeof *df);
    df->name = t->name;
    df->flag = flag;
    df->path = path;
    df->dtype = t->dtype;
    df->fd = -1;
    char why[900];
    if (rt_npy_read_header(path, &df->header, why, sizeof why))
        return rt_errf(err, errlen, "%s %s: %s", flag, t->name, why);
    if (check_rows(flag, &df->header, path, t, err, errlen))
        return -1;
    int64_t n = df->header.shape[0];
    if (ds->nfiles == 1) {
        ds->rows = n;
        ds->batch = t->global_shape[0];
        ds->batches = n / ds->batch;
    } else if (n != ds->rows) {
        return rt_errf(err, errlen, "%s %s: %s has %lld rows but %s has %lld; row i of every "
                       "%s file is one sample, so the files need the same number of rows",
                       flag, t->name, path, (long long)n, ds->files[0].path, (long long)ds->rows,
                       flag);
    } else if (t->global_shape[0] != ds->batch) {
        return rt_errf(err, errlen, "%s %s: '%s' takes batches of %lld rows but '%s' of %lld; "
                       "inputs fed from %s must have the same dim 0", flag, t->name, t->name,
                       (long long)t->global_shape[0], ds->files[0].name, (long long)ds->batch,
                       flag);
    }
    /* Checked by rt_npy_check not to overflow. */
    int64_t bytes = df->header.data_offset +
                    rt_numel(t->rank, df->header.shape) * (int64_t)rt_file_elem_size(t->dtype);
    return map_file(df, (size_t)bytes, err, errlen);
}

void rt_data_close(rt_dataset *ds)
{
    for (int i = 0; i < ds->nfiles; i++) {
        if (ds->files[i].map)
            munmap((void *)ds->files[i].map, ds->files[i].map_bytes);
        if (ds->files[i].fd >= 0)
            close(ds->files[i].fd);
    }
    free(ds->files);
    ds->files = NULL;
    ds->nfiles = 0;
}

int64_t rt_shuffle_index(uint64_t seed, int64_t epoch, int64_t n, int64_t i)
{
    int h = 1;
    while (h < 31 && ((int64_t)1 << (2 * h)) < n)
        h++;
    uint64_t mask = ((uint64_t)1 << h) - 1, key[4];
    for (uint64_t r = 0; r < 4; r++)
        key[r] = rt_splitmix64(seed ^ rt_splitmix64(4 * (uint64_t)epoch + r));
    uint64_t x = (uint64_t)i;
    do {
        uint64_t l = x >> h, rr = x & mask;
        for (int r = 0; r < 4; r++) {
            uint64_t f = rt_splitmix64(rr ^ key[r]) & mask;
            uint64_t nl = rr;
            rr = l ^ f;
            l = nl;
        }
        x = l << h | rr;
    } while (x >= (uint64_t)n);
    return (int64_t)x;
}

int64_t rt_data_row(const rt_dataset *ds, int64_t step, int64_t i)
{
    int64_t epoch = step / ds->batches;
    int64_t pos = (step % ds->batches) * ds->batch + i;
    return ds->shuffle ? rt_shuffle_index(ds->seed, epoch, ds->rows, pos) : pos;
}

/* -1 and a message if `df` is shorter than when it was checked: reading
 * its map past the end of the file would be a SIGBUS. */
static int shrunk(const rt_data_file *df, char *err, size_t errlen)
{
    struct stat st = {0};
    if (fstat(df->fd, &st) == 0 && st.st_size >= (off_t)df->map_bytes)
        return 0;
    return rt_errf(err, errlen, "%s %s: %s has shrunk to %lld bytes since it was checked "
                   "(%lld needed); it must stay as it is while the job runs", df->flag, df->name,
                   df->path, (long long)st.st_size, (long long)df->map_bytes);
}

void rt_data_fill(rt_device *dev, const rt_dataset *ds, int f, const rt_tensor_desc *t,
                  int64_t step, void *dst)
{
    const rt_data_file *df = &ds->files[f];
    char why[900];
    if (shrunk(df, why, sizeof why))
        rt_fatal(dev, "%s", why);
    int64_t start[RT_MAX_RANK], zero[RT_MAX_RANK] = {0};
    rt_block_start(t, dev->prog->axis_sizes, dev->coord, start);
    /* A row is the dims after the batch: the file holds whole rows, the
     * device its block of each. */
    int32_t rank = t->rank - 1;
    const int64_t *row_shape = t->global_shape + 1, *block = t->local_shape + 1;
    int64_t row_elems = rt_numel(rank, row_shape), block_elems = rt_numel(rank, block);
    size_t fes = rt_file_elem_size(t->dtype), es = rt_dtype_size(t->dtype);
    float *conv = t->dtype == RT_BF16 ? rt_xmalloc(dev, (size_t)block_elems * sizeof *conv) : NULL;
    const unsigned char *rows = df->map + df->header.data_offset;
    for (int64_t r = 0; r < t->local_shape[0]; r++) {
        int64_t row = rt_data_row(ds, step, start[0] + r);
        char *to = (char *)dst + (size_t)(r * block_elems) * es;
        rt_copy_box(conv ? (void *)conv : to, block, zero, rows + (size_t)(row * row_elems) * fes,
                    row_shape, start + 1, block, rank, fes);
        if (conv)
            rt_f32_to_bf16_n(conv, (uint16_t *)to, block_elems);
    }
    free(conv);
}

/* The hash of `n` bytes: splitmix64 chained over them as little-endian
 * 64-bit words (the last one zero-padded), from splitmix64(n). */
static uint64_t hash_bytes(const unsigned char *p, size_t n)
{
    uint64_t h = rt_splitmix64((uint64_t)n), w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = rt_splitmix64(h ^ w);
    }
    if (i < n) {
        w = 0;
        memcpy(&w, p + i, n - i);
        h = rt_splitmix64(h ^ w);
    }
    return h;
}

int rt_data_hash(rt_dataset *ds, char *err, size_t errlen)
{
    for (int i = 0; i < ds->nfiles; i++) {
        rt_data_file *df = &ds->files[i];
        if (df->hashed)
            continue;
        if (shrunk(df, err, errlen))
            return -1;
        size_t off = (size_t)df->header.data_offset;
        df->hash = hash_bytes(df->map + off, df->map_bytes - off);
        df->hashed = 1;
    }
    return 0;
}

/* Index of the file that comes `k`-th in order of input name. */
static int by_name(const rt_dataset *ds, int k)
{
    for (int i = 0; i < ds->nfiles; i++) {
        int before = 0;
        for (int j = 0; j < ds->nfiles; j++)
            before += strcmp(ds->files[j].name, ds->files[i].name) < 0;
        if (before == k)
            return i;
    }
    return k;
}

char *rt_data_record(const rt_dataset *ds, int64_t steps)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    fputs("# the data order of this checkpoint; --resume checks it (docs/runtime.md)\n", f);
    if (ds->shuffle)
        fprintf(f, "seed %llu\n", (unsigned long long)ds->seed);
    else
        fputs("seed none\n", f);
    if (ds->nfiles) {
        fprintf(f, "rows %lld\nbatch %lld\nnext step %lld epoch %lld batch %lld\n",
                (long long)ds->rows, (long long)ds->batch, (long long)steps + 1,
                (long long)(steps / ds->batches), (long long)(steps % ds->batches));
        for (int k = 0; k < ds->nfiles; k++) {
            const rt_data_file *df = &ds->files[by_name(ds, k)];
            char shape[160];
            rt_format_shape(shape, sizeof shape, df->header.rank, df->header.shape);
            fprintf(f, "data %s dtype %s shape %s hash %016llx path %s\n", df->name,
                    df->header.descr, shape, (unsigned long long)df->hash, df->path);
        }
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* The start of the line after the one at `s` (its end if it is the last). */
static const char *next_line(const char *s)
{
    s += strcspn(s, "\n");
    return *s ? s + 1 : s;
}

/* The line of `text` that starts with `key` (a word and a space, or a
 * whole line): its start, with its length without the newline in *len;
 * NULL if none. */
static const char *find_line(const char *text, const char *key, size_t *len)
{
    size_t k = strlen(key);
    for (const char *s = text; *s; s = next_line(s)) {
        if (!strncmp(s, key, k)) {
            *len = strcspn(s, "\n");
            return s;
        }
    }
    return NULL;
}

/* A data line without its " path ..." tail, the part --resume compares. */
static size_t identity_len(const char *line, size_t len)
{
    for (size_t i = 0; i + 6 <= len; i++)
        if (!strncmp(line + i, " path ", 6))
            return i;
    return len;
}

/* "--seed S" or "no --seed (rows in order)" from a seed line. */
static void seed_words(char *buf, size_t n, const char *line, size_t len)
{
    if (len == 9 && !strncmp(line, "seed none", 9))
        snprintf(buf, n, "no --seed (rows in order)");
    else
        snprintf(buf, n, "--seed %.*s", (int)(len > 5 ? len - 5 : 0), line + 5);
}

/* Compares the data lines of `mine` (this run) and `rec` (the checkpoint's)
 * in both directions; -1 and a message on the first difference. */
static int check_data_lines(const char *mine, const char *rec, const char *where, char *err,
                            size_t errlen)
{
    for (int pass = 0; pass < 2; pass++) {
        const char *from = pass ? rec : mine, *other = pass ? mine : rec;
        for (const char *line = from; *line; line = next_line(line)) {
            if (strncmp(line, "data ", 5))
                continue;
            const char *name = line + 5;
            size_t nlen = strcspn(name, " \n"), len = 0, olen = 0;
            char key[200];
            snprintf(key, sizeof key, "data %.*s ", (int)nlen, name);
            const char *ol = find_line(other, key, &olen);
            find_line(line, key, &len);
            if (!ol && !pass)
                return rt_errf(err, errlen, "this run gives --data %.*s, and the checkpoint's "
                               "run had no --data %.*s (%s); a resumed run must read the data "
                               "of the uninterrupted one", (int)nlen, name, (int)nlen, name, where);
            if (!ol)
                return rt_errf(err, errlen, "the checkpoint's run had --data %.*s (%s: %.*s), "
                               "and this run gives no --data %.*s; a resumed run must read "
                               "the data of the uninterrupted one", (int)nlen, name, where,
                               (int)(len - 5), line + 5, (int)nlen, name);
            size_t a = identity_len(line, len), b = identity_len(ol, olen);
            if (!pass && (a != b || strncmp(line, ol, a)))
                return rt_errf(err, errlen, "--data %.*s is not the data set the checkpoint was "
                               "trained on: this run's file has %.*s, the checkpoint's (%s) "
                               "%.*s; a resumed run must read the data of the uninterrupted "
                               "one", (int)nlen, name, (int)(len - 6 - nlen), line + 6 + nlen,
                               where, (int)(olen - 6 - nlen), ol + 6 + nlen);
        }
    }
    return 0;
}

int rt_data_check_record(const rt_dataset *ds, int64_t steps, const char *rec, const char *where,
                         char *err, size_t errlen)
{
    char *mine = rt_data_record(ds, steps);
    if (!mine)
        return rt_errf(err, errlen, "out of memory");
    int rc = 0;
    size_t len = 0, rlen = 0;
    const char *line = find_line(mine, "seed ", &len), *rl = find_line(rec, "seed ", &rlen);
    if (!rl) {
        rc = rt_errf(err, errlen, "%s is not a record of a data order (it has no 'seed' line)",
                     where);
    } else if (len != rlen || strncmp(line, rl, len)) {
        char was[64], is[64];
        seed_words(was, sizeof was, rl, rlen);
        seed_words(is, sizeof is, line, len);
        int none = !strncmp(rl, "seed none", rlen);
        rc = rt_errf(err, errlen, "the checkpoint was trained with %s (%s), and this run has "
                     "%s; a resumed run must see the batches the uninterrupted run would "
                     "have: %s %s", was, where, is, none ? "leave out" : "give",
                     none ? "--seed" : was);
    } else {
        rc = check_data_lines(mine, rec, where, err, errlen);
    }
    /* The same files: rows agree; the batch, and the position of steps.txt. */
    static const char *const keys[] = {"rows ", "batch ", "next "};
    for (int i = 0; !rc && ds->nfiles && i < 3; i++) {
        line = find_line(mine, keys[i], &len);
        rl = find_line(rec, keys[i], &rlen);
        if (rl && len == rlen && !strncmp(line, rl, len))
            continue;
        if (i == 2)
            rc = rt_errf(err, errlen, "%s records the order of another step than steps.txt "
                         "(%.*s, where this run expects %.*s): the files are not of one save",
                         where, (int)(rl ? rlen : 7), rl ? rl : "no line", (int)len, line);
        else
            rc = rt_errf(err, errlen, "%s has %.*s, and this run %.*s; a resumed run must "
                         "see the batches the uninterrupted run would have", where,
                         (int)(rl ? rlen : 7), rl ? rl : "no line", (int)len, line);
    }
    free(mine);
    return rc;
}
