/*
 * propagate_options.c - the propagate pass's options (--ilp, --portfolio,
 * --ilp-overlap): their checks, run when the driver reads them, and the
 * table the registry lists (passes/registry.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "propagate_internal.h"

bool pass_prop_parse_ilp(const char *value, double *seconds)
{
    *seconds = ILP_DEFAULT_SECONDS;
    if (!value || strcmp(value, "on") == 0)
        return true;
    if (strcmp(value, "off") == 0) {
        *seconds = 0.0;
        return true;
    }
    char *end;
    double s = strtod(value, &end);
    if (end == value || *end || !(s > 0.0) || s > 3600.0)
        return false;
    *seconds = s;
    return true;
}

static bool check_ilp(const char *value, char *why, size_t why_size)
{
    double s;
    if (pass_prop_parse_ilp(value, &s))
        return true;
    snprintf(why, why_size, "--ilp wants on, off or a time limit in seconds (0 < S <= 3600), not '%s'", value);
    return false;
}

/* Whether --NAME=value is on or off (else a message naming the option). */
static bool on_off(const char *name, const char *value, char *why, size_t why_size)
{
    if (strcmp(value, "on") == 0 || strcmp(value, "off") == 0)
        return true;
    snprintf(why, why_size, "--%s wants on or off, not '%s'", name, value);
    return false;
}

static bool check_portfolio(const char *value, char *why, size_t why_size)
{
    return on_off("portfolio", value, why, why_size);
}

static bool check_overlap(const char *value, char *why, size_t why_size)
{
    return on_off("ilp-overlap", value, why, why_size);
}

const pass_option pass_propagate_options[3] = {
    {"ilp", "on|off|SECONDS: plan the whole program as one ILP (CLP and GLPK) within a time limit (default on, "
            "20 s: ILP_DEFAULT_SECONDS)", check_ilp},
    {"portfolio", "on|off: also plan seed 000's strategies and keep the one with the shortest step "
                  "(propagate_portfolio.c; default on)", check_portfolio},
    {"ilp-overlap", "on|off: on a profile with collective matmul, solve the ILP again with each reshard "
                    "priced at its time left exposed beside its matmul (propagate_ilp_cm.c; default on)",
     check_overlap},
};
