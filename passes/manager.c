/*
 * manager.c - runs a pipeline of passes, verifying and dumping after each.
 *
 * As in MLIR's PassManager, passes do not print or verify: the manager runs
 * the verifier after every pass and stops at the first failure, and prints
 * "*** IR Dump After NAME ***" followed by the IR for --print-after=NAME and
 * --print-after-all.
 */
#include <string.h>

#include "pass.h"

int pass_manager_parse(pass_manager *pm, const char *pipeline, FILE *err)
{
    pm->npipeline = 0;
    const char *p = pipeline;
    int rc = 0;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char name[128];
        if (len == 0 || len >= sizeof name) {
            fprintf(err, "einc: error: empty or overlong pass name in pipeline '%s'\n", pipeline);
            return -1;
        }
        memcpy(name, p, len);
        name[len] = 0;
        const pass_info *info = pass_registry_find(pm->registry, name);
        if (!info) {
            fprintf(err, "einc: error: unknown pass '%s' (see --list-passes)\n", name);
            rc = -1;
        } else if (pm->npipeline >= (int)(sizeof pm->pipeline / sizeof pm->pipeline[0])) {
            fprintf(err, "einc: error: pipeline too long\n");
            return -1;
        } else {
            pm->pipeline[pm->npipeline++] = info;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return rc;
}

/* Whether `name` is in the comma-separated list `list`. */
static bool in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0)
            return true;
        p = end ? end + 1 : p + len;
    }
    return false;
}

bool pass_runs_later(const pass_ctx *ctx, const char *name)
{
    if (!ctx || !ctx->pm)
        return false;
    for (int i = ctx->pass_index + 1; i < ctx->pm->npipeline; i++)
        if (strcmp(ctx->pm->pipeline[i]->name, name) == 0)
            return true;
    return false;
}

int pass_manager_run(pass_manager *pm, pass_ctx *ctx, ir_module *m)
{
    for (int i = 0; i < pm->npipeline; i++) {
        const pass_info *p = pm->pipeline[i];
        int before = ctx->diag->nerrors;
        ctx->pm = pm;
        ctx->pass_index = i;
        int rc = p->run(ctx, m);
        ctx->pm = NULL;
        ctx->pass_index = 0;
        if (rc != 0 || ctx->diag->nerrors > before) {
            if (ctx->diag->nerrors == before)
                diag_error(ctx->diag, DIAG_NOLOC, "pass '%s' failed", p->name);
            return 1;
        }
        if (ir_verify(m, ctx->diag) != 0) {
            diag_error(ctx->diag, DIAG_NOLOC, "IR verification failed after pass '%s'", p->name);
            return 1;
        }
        if (pm->print_after_all || (pm->print_after && in_list(pm->print_after, p->name))) {
            FILE *out = pm->dump ? pm->dump : stdout;
            fprintf(out, "*** IR Dump After %s ***\n", p->name);
            if (pm->print_json)
                ir_print_json(out, m);
            else
                ir_print(out, m);
        }
    }
    return 0;
}
