/*
 * driver.h - what the einc driver's files share.
 */
#ifndef EINC_DRIVER_H
#define EINC_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend.h"

/* Entry point of `einc calibrate ARGS`; argv[0] is "calibrate".  Parses
 * the flags and calls the calibrate/ library (calibrate.h).  Returns the
 * exit status: 0 on success, 1 when a benchmark or the output fails, 2 on a
 * bad command line (calibrate.c). */
int calibrate_main(int argc, char **argv);

/* The hardware profile einc uses without --hw: this machine (its cached
 * calibration, else hw/host.json; calibrate_load_host). */
#define DRV_DEFAULT_HW "host"

/* A .ein file is text written by people; refuse anything absurdly large. */
#define DRV_MAX_SOURCE_BYTES (256u << 20)

/* Reads the whole file `path` into a malloc'd buffer (not NUL-terminated;
 * *len bytes).  On failure prints "WHO: error: ..." to stderr and returns
 * NULL.  The caller frees the buffer. */
char *drv_read_source(const char *path, const char *who, size_t *len);

/* Checks the output path `output` of -o before anything is written: one
 * that exists must be a regular file (not /dev/null, /dev/full, a FIFO, a
 * directory), and it must not be any of the input files inputs[0..ninputs)
 * (the same device and inode when it exists, else the same path).
 * Returns 0, or 1 after printing "WHO: error: ..." (source.c). */
int drv_check_output(const char *who, const char *output, const char *const *inputs, int ninputs);

/* Reports a bad command line of `cmd` ("einc", "einc autotune", ...):
 * "CMD: error: " + fmt (one %s, filled by arg) + "(see CMD --help)" on
 * stderr.  Returns 2, the exit status for a bad command line (cli.c). */
int drv_bad_usage(const char *cmd, const char *fmt, const char *arg);

/* The most -D options one command line takes. */
#define DRV_MAX_DEFINES 64
/* The largest size -D takes: the largest the program text takes. */
#define DRV_MAX_SIZE INT64_MAX

/* Parses `s` as a count in [lo, hi] (0 <= lo <= hi): decimal digits only,
 * no sign, no space, nothing after them ("010" is ten), no overflow.  True
 * with *out set, false otherwise.  Every count of an einc command line is
 * read by it (cli.c). */
bool drv_parse_count(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* drv_parse_count for the value `s` of option `flag`: 0 with *out set, or
 * "CMD: error: FLAG wants a count from LO to HI (decimal), not 'S'" and 2. */
int drv_count(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi,
              int64_t *out);

/* Adds -D's NAME=VALUE `def` (VALUE a count from 1 to DRV_MAX_SIZE) to
 * defines[0..*ndefines), at most DRV_MAX_DEFINES, cutting NAME in place:
 * 0, or 2 after reporting why not. */
int drv_define(const char *cmd, char *def, fe_define *defines, int *ndefines);

#endif
