/*
 * rt_files.h - the files an executable reads and writes: .npy headers and
 * blocks (npy.c), input paths checked before they are opened and output
 * paths written atomically (paths.c).
 *
 * Every function reports failure as -1 with a message in `err` (size
 * `errlen`) and never exits; the caller decides whether the job ends.
 */
#ifndef EINC_RT_FILES_H
#define EINC_RT_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "einrt.h"

/* ---- .npy files (npy.c) ---- */

/* What a .npy header says. */
typedef struct rt_npy_header {
    char descr[16];              /* e.g. "<f4" */
    int fortran_order;           /* 1 if 'fortran_order': True */
    int32_t rank;                /* number of dims */
    int64_t shape[RT_MAX_RANK];  /* the dims */
    int64_t data_offset;         /* bytes before the data */
    int64_t file_bytes;          /* size of the file */
} rt_npy_header;

/* Writes a shape as Python prints a tuple, "(a, b)", "(a,)" or "()", into buf. */
void rt_format_shape(char *buf, size_t len, int32_t rank, const int64_t *shape);
/* Reads and parses the header of `path`; on failure writes a message into
 * err (size errlen) and returns -1. */
int rt_npy_read_header(const char *path, rt_npy_header *h, char *err, size_t errlen);
/* Checks that header `h` of file `path` fits tensor `t` (dtype, global
 * shape, C order, complete data); message into err and -1 on mismatch. */
int rt_npy_check(const rt_npy_header *h, const char *path, const rt_tensor_desc *t,
                 char *err, size_t errlen);
/* Reads the block of tensor `t` starting at global index `start` (checked
 * header `h`) into `dst` (local_shape, dtype of t; bf16 converted from f4). */
int rt_npy_read_block(const char *path, const rt_npy_header *h, const rt_tensor_desc *t,
                      const int64_t *start, const int64_t *local_shape, void *dst,
                      char *err, size_t errlen);
/* ---- paths a user gives (paths.c) ---- */

struct stat;
/* Opens the input file `path` for reading without blocking on a FIFO, and
 * only if it is a regular file: the descriptor (blocking, close-on-exec),
 * with its stat in *st unless st is NULL; or -1 and "cannot open PATH: ..."
 * or "PATH is a FIFO (named pipe), not a regular file; ...".  Every file
 * the executable reads from its command line is opened by it. */
int rt_open_input(const char *path, struct stat *st, char *err, size_t errlen);
/* "a character device", "a FIFO (named pipe)", ... for a file that is not
 * a regular file, for messages. */
const char *rt_file_kind(mode_t mode);
/* Where an output file (a .npy, a --trace) written to `path` goes: `path`,
 * or the file a symbolic link at `path` points to (so the link is kept).
 * *target is malloc'd (the caller frees it); *st is the file's stat and
 * *exists whether there is one.  Refuses (-1 and a message) a path that
 * exists and is not a regular file (a device, FIFO, socket or directory,
 * which a rename would replace) and a dangling link. */
int rt_output_target(const char *path, char **target, struct stat *st, bool *exists,
                     char *err, size_t errlen);
/* Writes the global array `data` of `t` atomically to `path` (temp file in
 * the same directory, fsync, rename).  bf16 is written as <f4. */
int rt_npy_write(const char *path, const rt_tensor_desc *t, const void *data,
                 char *err, size_t errlen);
/* Writes the `n` bytes at `data` to `path` the same atomic way (the
 * checkpoint's step file); -1 and a message in err on failure. */
int rt_write_file_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen);

#endif
