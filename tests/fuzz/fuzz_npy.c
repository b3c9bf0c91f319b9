/*
 * fuzz_npy.c - the .npy reader on any bytes: header parsing, the checks
 * against a tensor, and reading blocks.
 *
 * The input is the whole file.  It is put in a memory file (memfd) and
 * read through /proc/self/fd/N, so the reader's own open/fstat/pread run
 * as they do on a real file, with no disk I/O.  When the header parses,
 * the tensor it is checked against takes the header's own shape and the
 * dtype its descr names (so the shape check passes and the size checks are
 * reached); a header that passes rt_npy_check must describe data that is
 * really in the file, which the harness recomputes with overflow checks,
 * and then the whole array and a half block (as a device of a 2-way shard
 * reads it) are read.  The dtype is also tried as bf16 (read as <f4 and
 * rounded).  Outputs are not written here: that needs fsync, and
 * tests/e2e/bad_inputs.py covers it.
 */
#define _GNU_SOURCE /* memfd_create */
#include <stdbool.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "rt_internal.h"

/* The dtype a descr names, or -1. */
static int32_t dtype_of(const char *descr)
{
    return strcmp(descr, "<f4") == 0 ? RT_F32
           : strcmp(descr, "<f8") == 0 ? RT_F64
           : strcmp(descr, "<i4") == 0 ? RT_I32
                                       : -1;
}

/* Reads the block of `t` of shape `local` at `start`; the buffer is sized
 * by the harness's own count. */
static void read_block(const char *path, const rt_npy_header *h, const rt_tensor_desc *t,
                       const int64_t *start, const int64_t *local)
{
    int64_t n = 1;
    for (int32_t d = 0; d < t->rank; d++)
        n *= local[d]; /* at most the global count, checked to fit below */
    void *buf = malloc((size_t)(n ? n : 1) * rt_dtype_size(t->dtype));
    FUZZ_CHECK(buf != NULL, "out of memory for %lld elements", (long long)n);
    char err[512];
    int rc = rt_npy_read_block(path, h, t, start, local, buf, err, sizeof err);
    FUZZ_CHECK(rc == 0, "a checked header's block could not be read: %s", err);
    free(buf);
}

/* Checks `h` against a tensor of dtype `dtype` and the header's shape. */
static void check_as(const char *path, const rt_npy_header *h, int32_t dtype)
{
    rt_tensor_desc t;
    memset(&t, 0, sizeof t);
    t.name = "x";
    t.dtype = dtype;
    t.rank = h->rank;
    memcpy(t.global_shape, h->shape, sizeof t.global_shape);
    memcpy(t.local_shape, h->shape, sizeof t.local_shape);
    char err[512];
    if (rt_npy_check(h, path, &t, err, sizeof err) != 0) {
        FUZZ_CHECK(err[0] != 0, "rt_npy_check failed without a message");
        return;
    }
    /* Accepted: the data must really be in the file. */
    int64_t bytes = dtype == RT_F64 ? 8 : 4;
    bool fits = true;
    for (int32_t d = 0; d < t.rank && fits; d++)
        fits = !__builtin_mul_overflow(bytes, t.global_shape[d], &bytes);
    FUZZ_CHECK(fits && h->data_offset + bytes <= h->file_bytes,
               "rt_npy_check accepted a shape whose data is not in the file (%lld bytes)",
               (long long)h->file_bytes);
    int64_t start[RT_MAX_RANK] = {0}, local[RT_MAX_RANK];
    memcpy(local, t.global_shape, sizeof local);
    read_block(path, h, &t, start, local);
    if (t.rank > 0 && t.global_shape[0] % 2 == 0) {
        local[0] = t.global_shape[0] / 2;
        start[0] = local[0];
        read_block(path, h, &t, start, local);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz.npy", MFD_CLOEXEC);
    FUZZ_CHECK(fd >= 0, "memfd_create failed");
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        FUZZ_CHECK(w > 0, "write to the memfd failed");
        done += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    rt_npy_header h;
    char err[512];
    if (rt_npy_read_header(path, &h, err, sizeof err) == 0) {
        FUZZ_CHECK(h.rank >= 0 && h.rank <= RT_MAX_RANK, "rank %d", (int)h.rank);
        FUZZ_CHECK(h.data_offset <= h.file_bytes, "data offset past the end of the file");
        int32_t dt = dtype_of(h.descr);
        check_as(path, &h, dt >= 0 ? dt : RT_F32);
        if (dt == RT_F32)
            check_as(path, &h, RT_BF16);
    } else {
        FUZZ_CHECK(err[0] != 0, "rt_npy_read_header failed without a message");
    }
    close(fd);
    return 0;
}
