/*
 * npy.c - NumPy .npy files: header parsing, reading one device's block,
 * atomic writing.
 *
 * Format (numpy.lib.format): magic "\x93NUMPY", major/minor version, header
 * length (2 bytes little-endian in 1.0, 4 bytes in 2.0 and 3.0), then a
 * Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and a newline, then the raw data in C order.  We accept
 * '<f4' for f32 and bf16 tensors (bf16 values are stored as f32 in files, since
 * NumPy has no bf16) and '<f8' for f64.
 *
 * Each device reads only its block: the block of a row-major array is a set
 * of contiguous runs (the innermost dims the block covers entirely, times
 * its extent on the next dim), each read with one pread.
 *
 * Outputs (and the other files a run leaves: a checkpoint's step count) are
 * written to `path.tmpXXXXXX` in the same directory, fsync'd and
 * renamed over `path`, so a reader never sees a partial file; on any error
 * the temp file is removed.  A rename replaces whatever `path` is, so the
 * path is checked first: one that exists and is not a regular file (a
 * device such as /dev/null, a FIFO, a socket, a directory) is refused, as
 * rename would have replaced the device node itself.  A symbolic link is
 * followed: the file it points to is replaced and the link kept.  The temp
 * file gets the permission bits of the file it replaces (a new file gets
 * 0666 less the umask, as any file the user creates), and its .npy magic
 * is written last, after the data, so a temp file left by a killed run is
 * never a valid .npy file that could pass for an output.
 *
 * Shapes read from files are multiplied with overflow checks: a header
 * may claim any shape, and a wrapped element count would pass the size
 * check of a file far too short.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rt_internal.h"

/* Largest header we accept (numpy's own limit is similar). */
#define MAX_HEADER (1 << 20)

/* *out = a * b for sizes (a, b >= 0); false if it does not fit in int64_t. */
static bool size_mul(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

/* Reads exactly n bytes at offset off; returns bytes read (< n at EOF) or -1. */
static ssize_t pread_full(int fd, void *buf, size_t n, off_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* A cursor over the header dict's text. */
typedef struct dict_scan {
    const char *p;
} dict_scan;

static void skip_space(dict_scan *d)
{
    while (*d->p == ' ' || *d->p == '\t')
        d->p++;
}

/* Whether the next character (after spaces) is c; consumes it if so. */
static int take(dict_scan *d, char c)
{
    skip_space(d);
    if (*d->p != c)
        return 0;
    d->p++;
    return 1;
}

/* A quoted string ('...' or "...", no escapes: NumPy writes none) into
 * buf[0..n-1]; 0, or -1 if malformed or too long. */
static int take_string(dict_scan *d, char *buf, size_t n)
{
    skip_space(d);
    char quote = *d->p;
    if (quote != '\'' && quote != '"')
        return -1;
    const char *s = ++d->p;
    while (*d->p && *d->p != quote && *d->p != '\\')
        d->p++;
    size_t len = (size_t)(d->p - s);
    if (*d->p != quote || len + 1 > n)
        return -1;
    memcpy(buf, s, len);
    buf[len] = 0;
    d->p++;
    return 0;
}

/* The 'shape' tuple: (), (n,), (n, m), ... with an optional trailing
 * comma; -1 with a message if malformed. */
static int take_shape(dict_scan *d, const char *path, rt_npy_header *h, char *err, size_t errlen)
{
    if (!take(d, '('))
        return rt_errf(err, errlen, "%s: .npy header has no 'shape' tuple", path);
    h->rank = 0;
    while (!take(d, ')')) {
        skip_space(d);
        char *end;
        errno = 0;
        long long x = *d->p >= '0' && *d->p <= '9' ? strtoll(d->p, &end, 10) : -1;
        if (x < 0 || errno)
            return rt_errf(err, errlen, "%s: .npy header has a malformed 'shape'", path);
        if (h->rank == RT_MAX_RANK)
            return rt_errf(err, errlen, "%s: .npy array has more than %d dims", path, RT_MAX_RANK);
        h->shape[h->rank++] = x;
        int64_t elems = 1;
        for (int32_t k = 0; k < h->rank; k++)
            if (!size_mul(elems, h->shape[k], &elems))
                return rt_errf(err, errlen, "%s: .npy header has a 'shape' whose number of "
                               "elements does not fit in 64 bits", path);
        d->p = end;
        /* One element without a comma, (n), is an int in Python, not a tuple. */
        if (!take(d, ',') && (h->rank == 1 || !take(d, ')')))
            return rt_errf(err, errlen, "%s: .npy header has a malformed 'shape'", path);
        if (d->p[-1] == ')')
            break;
    }
    return 0;
}

/*
 * Parses the header dict text into h; -1 with a message if malformed.
 * The dict is a Python literal that NumPy reads with ast.literal_eval and
 * then requires to hold exactly the keys descr, fortran_order and shape
 * (numpy.lib.format): '{', key: value pairs separated by commas with an
 * optional trailing one, '}', spaces to the end.  A key given twice is
 * refused: Python would keep its last value, and a reader that stops at
 * the first would read another array than NumPy does.
 */
static int parse_dict(const char *hdr, const char *path, rt_npy_header *h, char *err,
                      size_t errlen)
{
    static const char *const keys[] = {"descr", "fortran_order", "shape"};
    int seen[3] = {0, 0, 0};
    dict_scan d = {hdr};
    if (!take(&d, '{'))
        return rt_errf(err, errlen, "%s: .npy header is not a dict", path);
    while (!take(&d, '}')) {
        char key[32];
        if (take_string(&d, key, sizeof key) != 0 || !take(&d, ':'))
            return rt_errf(err, errlen, "%s: .npy header dict is malformed", path);
        int k = 0;
        while (k < 3 && strcmp(key, keys[k]) != 0)
            k++;
        if (k == 3)
            return rt_errf(err, errlen, "%s: .npy header has the key '%s'; NumPy allows only 'descr', "
                           "'fortran_order' and 'shape'", path, key);
        if (seen[k]++)
            return rt_errf(err, errlen, "%s: .npy header gives '%s' twice", path, key);
        if (k == 0 && take_string(&d, h->descr, sizeof h->descr) != 0)
            return rt_errf(err, errlen, "%s: .npy header has a malformed 'descr'", path);
        if (k == 1) {
            skip_space(&d);
            if (strncmp(d.p, "True", 4) == 0 || strncmp(d.p, "False", 5) == 0) {
                h->fortran_order = d.p[0] == 'T';
                d.p += h->fortran_order ? 4 : 5;
            } else {
                return rt_errf(err, errlen, "%s: .npy header has a malformed 'fortran_order'", path);
            }
        }
        if (k == 2 && take_shape(&d, path, h, err, errlen) != 0)
            return -1;
        if (!take(&d, ',') && !(skip_space(&d), *d.p == '}'))
            return rt_errf(err, errlen, "%s: .npy header dict is malformed", path);
    }
    skip_space(&d);
    if (*d.p && *d.p != '\n')
        return rt_errf(err, errlen, "%s: .npy header has text after its dict", path);
    for (int k = 0; k < 3; k++)
        if (!seen[k])
            return rt_errf(err, errlen, "%s: .npy header has no '%s'", path, keys[k]);
    return 0;
}

int rt_npy_read_header(const char *path, rt_npy_header *h, char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    struct stat st;
    int fd = rt_open_input(path, &st, err, errlen);
    if (fd < 0)
        return -1;
    h->file_bytes = st.st_size;
    unsigned char pre[12];
    ssize_t got = pread_full(fd, pre, sizeof pre, 0);
    if (got < 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        close(fd);
        return rt_errf(err, errlen, "%s is not a .npy file (bad magic)", path);
    }
    int major = pre[6];
    int64_t hlen, hstart;
    if (major == 1) {
        hlen = pre[8] | (pre[9] << 8);
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (got < 12) {
            close(fd);
            return rt_errf(err, errlen, "%s: truncated .npy header", path);
        }
        hlen = (int64_t)pre[8] | ((int64_t)pre[9] << 8) | ((int64_t)pre[10] << 16) |
               ((int64_t)pre[11] << 24);
        hstart = 12;
    } else {
        close(fd);
        return rt_errf(err, errlen, "%s: unsupported .npy version %d.%d", path, major, pre[7]);
    }
    if (hlen > MAX_HEADER || hstart + hlen > h->file_bytes) {
        close(fd);
        return rt_errf(err, errlen, "%s: truncated .npy header", path);
    }
    char *hdr = malloc((size_t)hlen + 1);
    if (!hdr) {
        close(fd);
        return rt_errf(err, errlen, "%s: out of memory reading the header", path);
    }
    got = pread_full(fd, hdr, (size_t)hlen, (off_t)hstart);
    close(fd);
    if (got != hlen) {
        free(hdr);
        return rt_errf(err, errlen, "%s: truncated .npy header", path);
    }
    hdr[hlen] = 0;
    int rc = parse_dict(hdr, path, h, err, errlen);
    free(hdr);
    h->data_offset = hstart + hlen;
    return rc;
}

/* The .npy descr of a tensor's dtype in files. */
static const char *file_descr(int32_t dtype)
{
    return dtype == RT_F64 ? "<f8" : dtype == RT_I32 ? "<i4" : dtype == RT_I8 ? "|i1" : "<f4";
}

void rt_format_shape(char *buf, size_t len, int32_t rank, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, len, "(");
    for (int32_t d = 0; d < rank && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < len)
        snprintf(buf + n, len - n, rank == 1 ? ",)" : ")");
}

int rt_npy_check(const rt_npy_header *h, const char *path, const rt_tensor_desc *t, char *err,
                 size_t errlen)
{
    const char *want = file_descr(t->dtype);
    if (strcmp(h->descr, want) != 0)
        return rt_errf(err, errlen, "tensor '%s': %s has dtype '%s', expected '%s' (%s%s)", t->name,
                    path, h->descr, want, rt_dtype_name(t->dtype),
                    t->dtype == RT_BF16 ? " values are stored as f32 in .npy files" : "");
    if (h->fortran_order)
        return rt_errf(err, errlen, "tensor '%s': %s is in Fortran order; save it in C order "
                    "(np.ascontiguousarray)", t->name, path);
    int same = h->rank == t->rank;
    for (int32_t d = 0; same && d < t->rank; d++)
        same = h->shape[d] == t->global_shape[d];
    if (!same) {
        char found[160], expected[160];
        rt_format_shape(found, sizeof found, h->rank, h->shape);
        rt_format_shape(expected, sizeof expected, t->rank, t->global_shape);
        return rt_errf(err, errlen, "tensor '%s': %s has shape %s, expected %s", t->name, path,
                    found, expected);
    }
    int64_t need = (int64_t)rt_file_elem_size(t->dtype);
    bool fits = true;
    for (int32_t d = 0; d < t->rank && fits; d++)
        fits = size_mul(need, t->global_shape[d], &need);
    fits = fits && !__builtin_add_overflow(need, h->data_offset, &need);
    if (!fits) {
        char expected[160];
        rt_format_shape(expected, sizeof expected, t->rank, t->global_shape);
        return rt_errf(err, errlen, "tensor '%s': %s: the size of shape %s does not fit in 64 bits",
                       t->name, path, expected);
    }
    if (h->file_bytes < need)
        return rt_errf(err, errlen, "tensor '%s': %s is truncated: %lld bytes, expected %lld",
                    t->name, path, (long long)h->file_bytes, (long long)need);
    return 0;
}

int rt_npy_read_block(const char *path, const rt_npy_header *h, const rt_tensor_desc *t,
                      const int64_t *start, const int64_t *local_shape, void *dst, char *err,
                      size_t errlen)
{
    int32_t rank = t->rank;
    size_t fes = rt_file_elem_size(t->dtype); /* element size in the file */
    int64_t n = rt_numel(rank, local_shape);
    if (n == 0)
        return 0;
    char why[512];
    int fd = rt_open_input(path, NULL, why, sizeof why);
    if (fd < 0)
        return rt_errf(err, errlen, "tensor '%s': %s", t->name, why);
    /* Contiguous run: innermost dims covered entirely, times the next one. */
    int32_t inner = rank;
    int64_t run = 1;
    while (inner > 0) {
        int32_t d = inner - 1;
        run *= local_shape[d];
        inner = d;
        if (local_shape[d] != t->global_shape[d])
            break;
    }
    int64_t gstride[RT_MAX_RANK], s = 1;
    for (int32_t d = rank - 1; d >= 0; d--) {
        gstride[d] = s;
        s *= t->global_shape[d];
    }
    float *conv = NULL; /* bf16: one run of f32 from the file */
    if (t->dtype == RT_BF16 && !(conv = malloc((size_t)run * sizeof *conv))) {
        close(fd);
        return rt_errf(err, errlen, "tensor '%s': out of memory", t->name);
    }
    int64_t idx[RT_MAX_RANK] = {0};
    int rc = 0;
    for (int64_t done = 0; done < n; done += run) {
        int64_t off = 0;
        for (int32_t d = 0; d < rank; d++)
            off += (start[d] + (d < inner ? idx[d] : 0)) * gstride[d];
        void *to = conv ? (void *)conv : (char *)dst + (size_t)done * fes;
        ssize_t got = pread_full(fd, to, (size_t)run * fes, (off_t)(h->data_offset + off * (int64_t)fes));
        if (got != (ssize_t)((size_t)run * fes)) {
            rc = rt_errf(err, errlen, "tensor '%s': %s: %s", t->name, path,
                      got < 0 ? strerror(errno) : "file is truncated");
            break;
        }
        if (conv)
            rt_f32_to_bf16_n(conv, (uint16_t *)dst + done, run);
        for (int32_t d = inner - 1; d >= 0 && ++idx[d] == local_shape[d]; d--)
            idx[d] = 0;
    }
    free(conv);
    close(fd);
    return rc;
}

/* write() all of buf; -1 on error. */
static int write_full(int fd, const void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, (const char *)buf + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        done += (size_t)w;
    }
    return 0;
}

/* Creates `tmp` (path + ".tmpXXXXXX", the X's replaced) exclusively, with
 * mode 0666 less the umask as any new file; unlike mkstemp (0600), so a
 * new output is as readable as a file the user would create.  Returns the
 * descriptor or -1 with errno set. */
static int create_temp(char *tmp, size_t plen)
{
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 12) ^
                 (uint64_t)(uintptr_t)tmp;
    for (int attempt = 0; attempt < 1000; attempt++) {
        /* splitmix64 step: a fresh name on every collision. */
        x += 0x9e3779b97f4a7c15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        for (int k = 0; k < 6; k++, z /= 62)
            tmp[plen + 4 + k] = digits[z % 62];
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

/* Writes a file's contents to the temp file `fd`: 0, or -1 with errno set. */
typedef int (*fill_fn)(int fd, const void *ctx);

/* The atomic write of every output: `fill` writes the contents to a temp
 * file beside the target (rt_output_target), which gets the replaced
 * file's mode, is fsync'd and renamed over it; on any failure the temp
 * file is removed and the target left as it was. */
static int write_atomic(const char *path, fill_fn fill, const void *ctx, char *err, size_t errlen)
{
    char *target;
    struct stat st;
    bool exists;
    if (rt_output_target(path, &target, &st, &exists, err, errlen))
        return -1;
    size_t plen = strlen(target);
    char *tmp = malloc(plen + 16);
    if (!tmp) {
        free(target);
        return rt_errf(err, errlen, "out of memory writing %s", path);
    }
    memcpy(tmp, target, plen);
    memcpy(tmp + plen, ".tmpXXXXXX", 11);
    int fd = create_temp(tmp, plen);
    if (fd < 0) {
        int rc = rt_errf(err, errlen, "cannot create a file next to %s: %s", path, strerror(errno));
        free(tmp);
        free(target);
        return rc;
    }
    int ok = fill(fd, ctx) == 0;
    int saved = errno;
    /* The replaced file's permission bits (and, where allowed, owner):
     * best effort, as a file system without modes (vfat) refuses both and
     * the data is still worth having. */
    if (ok && exists) {
        if (st.st_uid != geteuid() || st.st_gid != getegid())
            (void)!fchown(fd, st.st_uid, st.st_gid); /* only root may */
        (void)!fchmod(fd, st.st_mode & 07777);
    }
    ok = ok && fsync(fd) == 0;
    if (!ok)
        saved = errno;
    ok = (close(fd) == 0) && ok;
    /* Checked again just before the rename, so a device or directory put
     * at the path while the data was written is not replaced either. */
    struct stat now;
    if (ok && lstat(target, &now) == 0 && !S_ISREG(now.st_mode)) {
        unlink(tmp);
        rt_errf(err, errlen, "%s is %s, not a regular file; an output only ever replaces a "
                "regular file", path, rt_file_kind(now.st_mode));
        free(tmp);
        free(target);
        return -1;
    }
    if (ok && rename(tmp, target) != 0) {
        saved = errno;
        ok = 0;
    }
    int rc = 0;
    if (!ok) {
        unlink(tmp);
        rc = rt_errf(err, errlen, "cannot write %s: %s", path, strerror(saved));
    }
    free(tmp);
    free(target);
    return rc;
}

/* What npy_fill writes: a tensor's global array and its finished header. */
struct npy_contents {
    const rt_tensor_desc *t;  /* the tensor */
    const void *data;         /* its global array */
    const unsigned char *hdr; /* the header, `total` bytes, magic first */
    size_t total;             /* header bytes (the data starts 64-byte aligned) */
};

/* fill_fn of a .npy file.  The header's place is zeros until the data is
 * in (see the essay), then the header with its magic is written over it. */
static int npy_fill(int fd, const void *ctx)
{
    const struct npy_contents *c = ctx;
    unsigned char zeros[256] = {0};
    for (size_t done = 0; done < c->total; done += sizeof zeros)
        if (write_full(fd, zeros, c->total - done < sizeof zeros ? c->total - done
                                                                  : sizeof zeros))
            return -1;
    int64_t n = rt_numel(c->t->rank, c->t->global_shape);
    if (c->t->dtype == RT_BF16) {
        float buf[1024];
        for (int64_t i = 0; i < n; i += 1024) {
            int64_t m = n - i < 1024 ? n - i : 1024;
            rt_bf16_to_f32_n((const uint16_t *)c->data + i, buf, m);
            if (write_full(fd, buf, (size_t)m * sizeof(float)))
                return -1;
        }
    } else if (write_full(fd, c->data, (size_t)n * rt_dtype_size(c->t->dtype))) {
        return -1;
    }
    return pwrite(fd, c->hdr, c->total, 0) == (ssize_t)c->total ? 0 : -1;
}

int rt_npy_write(const char *path, const rt_tensor_desc *t, const void *data, char *err,
                 size_t errlen)
{
    char shape[200], dict[300];
    rt_format_shape(shape, sizeof shape, t->rank, t->global_shape);
    int dn = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                      file_descr(t->dtype), shape);
    /* Version 1.0 header padded with spaces so the data starts at a multiple of 64. */
    size_t total = (size_t)(10 + dn + 1 + 63) / 64 * 64;
    size_t hlen = total - 10;
    unsigned char *hdr = calloc(1, total);
    if (!hdr)
        return rt_errf(err, errlen, "out of memory writing %s", path);
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    hdr[8] = (unsigned char)(hlen & 0xff);
    hdr[9] = (unsigned char)(hlen >> 8);
    memcpy(hdr + 10, dict, (size_t)dn);
    memset(hdr + 10 + dn, ' ', hlen - (size_t)dn - 1);
    hdr[total - 1] = '\n';
    struct npy_contents c = {t, data, hdr, total};
    int rc = write_atomic(path, npy_fill, &c, err, errlen);
    free(hdr);
    return rc;
}

/* What bytes_fill writes. */
struct byte_contents {
    const void *data; /* the bytes */
    size_t n;         /* how many */
};

static int bytes_fill(int fd, const void *ctx)
{
    const struct byte_contents *c = ctx;
    return write_full(fd, c->data, c->n);
}

int rt_write_file_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen)
{
    struct byte_contents c = {data, n};
    return write_atomic(path, bytes_fill, &c, err, errlen);
}
