/*
 * cli.c - command-line error reporting shared by einc and its subcommands.
 */
#include <stdio.h>

#include "driver.h"

int drv_bad_usage(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "%s: error: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see %s --help)\n", cmd);
    return 2;
}
