/*
 * options.c - per-pass options (MLIR's pass options): a pass declares them
 * in its pass_info, the driver hands every --NAME=VALUE it does not know
 * itself to pass_options_add, and the pass reads its own values back from
 * the pass_ctx with pass_option_value.  So pass_ctx carries no field that
 * only one pass uses.
 */
#include <string.h>

#include "pass.h"

const char *pass_option_value(const pass_ctx *ctx, const char *name)
{
    const pass_options *o = ctx ? ctx->options : NULL;
    for (int i = o ? o->n - 1 : -1; i >= 0; i--)
        if (strcmp(o->name[i], name) == 0)
            return o->value[i];
    return NULL;
}

/* The option `name` (length len) some pass of `r` declares, or NULL. */
static const pass_option *find_option(const pass_registry *r, const char *name, size_t len)
{
    for (int p = 0; p < r->npasses; p++)
        for (int i = 0; i < r->passes[p]->noptions; i++) {
            const pass_option *opt = &r->passes[p]->options[i];
            if (strlen(opt->name) == len && memcmp(opt->name, name, len) == 0)
                return opt;
        }
    return NULL;
}

int pass_options_add(pass_options *opts, const pass_registry *r, const char *arg, char *why,
                     size_t why_size)
{
    const char *eq = strchr(arg, '=');
    const pass_option *opt = eq ? find_option(r, arg, (size_t)(eq - arg)) : NULL;
    if (!opt)
        return 1;
    const char *value = eq + 1;
    if (opt->check && !opt->check(value, why, why_size))
        return -1;
    if (opts->n >= PASS_MAX_OPTIONS) {
        snprintf(why, why_size, "more than %d pass options", PASS_MAX_OPTIONS);
        return -1;
    }
    opts->name[opts->n] = opt->name;
    opts->value[opts->n++] = value;
    return 0;
}
