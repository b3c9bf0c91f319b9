/*
 * cli.c - command-line parsing shared by einc and its subcommands: error
 * reports, counts, -D.
 *
 * Every number an einc command line takes as a count goes through
 * drv_parse_count: decimal digits only, so "010" is ten (strtol's base 0
 * read it as eight and refused "08"), no sign, no space, no base prefix,
 * nothing after the digits, and a value past the option's limit refused
 * rather than wrapped.  A refusal names the option and its limits.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"

int drv_bad_usage(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "%s: error: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see %s --help)\n", cmd);
    return 2;
}

bool drv_parse_count(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!*s)
        return false;
    int64_t v = 0;
    for (const char *p = s; *p; p++) {
        int64_t d = *p - '0';
        if (*p < '0' || *p > '9' || hi - d < 0 || v > (hi - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (v < lo)
        return false;
    *out = v;
    return true;
}

int drv_count(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi,
              int64_t *out)
{
    if (drv_parse_count(s, lo, hi, out))
        return 0;
    char msg[256];
    snprintf(msg, sizeof msg, "%s wants a count from %" PRId64 " to %" PRId64 " (decimal), not '%.80s'",
             flag, lo, hi, s);
    return drv_bad_usage(cmd, "%s", msg);
}

int drv_define(const char *cmd, char *def, fe_define *defines, int *ndefines)
{
    char *eq = strchr(def, '=');
    if (!eq || eq == def)
        return drv_bad_usage(cmd, "-D wants NAME=VALUE, not '%s'", def);
    if (*ndefines >= DRV_MAX_DEFINES)
        return drv_bad_usage(cmd, "too many -D options (at most %s)", "64");
    char flag[96];
    snprintf(flag, sizeof flag, "-D %.*s", (int)(eq - def) > 64 ? 64 : (int)(eq - def), def);
    int64_t v;
    if (drv_count(cmd, flag, eq + 1, 1, DRV_MAX_SIZE, &v))
        return 2;
    /* argv outlives the compilation: cut the name in place. */
    *eq = 0;
    defines[*ndefines].name = def;
    defines[*ndefines].value = v;
    (*ndefines)++;
    return 0;
}
