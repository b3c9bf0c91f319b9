/*
 * driver.h - what the einc driver's files share.
 */
#ifndef EINC_DRIVER_H
#define EINC_DRIVER_H

#include <stddef.h>

/* The hardware profile einc uses without --hw: this machine (its cached
 * calibration, else hw/host.json; calibrate_load_host). */
#define DRV_DEFAULT_HW "host"

/* A .ein file is text written by people; refuse anything absurdly large. */
#define DRV_MAX_SOURCE_BYTES (256u << 20)

/* Reads the whole file `path` into a malloc'd buffer (not NUL-terminated;
 * *len bytes).  On failure prints "WHO: error: ..." to stderr and returns
 * NULL.  The caller frees the buffer. */
char *drv_read_source(const char *path, const char *who, size_t *len);

/* Reports a bad command line of `cmd` ("einc", "einc autotune", ...):
 * "CMD: error: " + fmt (one %s, filled by arg) + "(see CMD --help)" on
 * stderr.  Returns 2, the exit status for a bad command line (cli.c). */
int drv_bad_usage(const char *cmd, const char *fmt, const char *arg);

#endif
