/*
 * manager.c - runs a pipeline of passes, verifying and dumping after each.
 *
 * As in MLIR's PassManager, passes do not print or verify: the manager runs
 * the verifier after every pass and stops at the first failure, and prints
 * "*** IR Dump After NAME ***" followed by the IR for --print-after=NAME and
 * --print-after-all.  Every pipeline is verified, the empty one included
 * (the IR it hands on is the frontend's), and every option that names
 * passes is checked against the registry (parse_names).
 */
#include <stdint.h>
#include <string.h>

#include "pass.h"

/* Checks the comma-separated pass names of `list`, given to `option`
 * ("--passes", "--print-after"), against the registry: every option that
 * names passes goes through here, so none ignores a name it does not know.
 * Stores the passes in out[0..*n) when `out` is not NULL.  An empty list is
 * no pass; an empty name inside one ("a,,b", "a,") is an error.  Returns 0,
 * or -1 after reporting every bad name to `err`. */
static int parse_names(const pass_registry *r, const char *option, const char *list,
                       const pass_info **out, int max, int *n, FILE *err)
{
    int rc = 0, count = 0;
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char name[128];
        if (len == 0 || len >= sizeof name || (end && !end[1])) {
            fprintf(err, "einc: error: empty or overlong pass name in %s=%s\n", option, list);
            return -1;
        }
        memcpy(name, p, len);
        name[len] = 0;
        const pass_info *info = pass_registry_find(r, name);
        if (!info) {
            fprintf(err, "einc: error: %s: unknown pass '%s' (see --list-passes)\n", option, name);
            rc = -1;
        } else if (count >= max) {
            fprintf(err, "einc: error: %s: more than %d passes\n", option, max);
            return -1;
        } else if (out) {
            out[count++] = info;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    if (n)
        *n = count;
    return rc;
}

int pass_manager_parse(pass_manager *pm, const char *pipeline, FILE *err)
{
    int max = (int)(sizeof pm->pipeline / sizeof pm->pipeline[0]);
    int rc = parse_names(pm->registry, "--passes", pipeline, pm->pipeline, max, &pm->npipeline, err);
    if (pm->print_after &&
        parse_names(pm->registry, "--print-after", pm->print_after, NULL, INT32_MAX, NULL, err))
        rc = -1;
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

/* Verifies what `pass` (NULL: the empty pipeline) left, its shardings
 * too when `planned` (ir_verify, else ir_verify_unplanned); 0 or 1 after
 * reporting. */
static int verify_after(const pass_info *pass, pass_ctx *ctx, const ir_module *m, bool planned)
{
    if ((planned ? ir_verify(m, ctx->diag) : ir_verify_unplanned(m, ctx->diag)) == 0)
        return 0;
    if (pass)
        diag_error(ctx->diag, DIAG_NOLOC, "IR verification failed after pass '%s'", pass->name);
    else
        diag_error(ctx->diag, DIAG_NOLOC, "IR verification failed after the empty pipeline "
                   "(--passes=): the frontend's IR needs at least propagate");
    return 1;
}

/* Whether `m` holds a Grad op: only the autodiff pass takes one. */
static bool has_grad(const ir_module *m)
{
    for (const ir_op *op = m->first; op; op = op->next)
        if (op->kind == IR_OP_GRAD)
            return true;
    return false;
}

int pass_manager_run(pass_manager *pm, pass_ctx *ctx, ir_module *m)
{
    /* No pass to verify after: the IR handed on is still verified. */
    if (pm->npipeline == 0) {
        if (has_grad(m) || m->nopt_lines > 0) {
            diag_error(ctx->diag, DIAG_NOLOC, "the empty pipeline (--passes=) leaves the program's "
                       "training step unbuilt: it needs at least optimize,autodiff,propagate");
            return 1;
        }
        return verify_after(NULL, ctx, m, true);
    }
    /* Before propagate has run the IR is not planned (autodiff runs on
     * the frontend's shardings): its shardings are checked from then on,
     * and in what the pipeline hands on whatever it ran. */
    bool planned = false;
    for (int i = 0; i < pm->npipeline; i++) {
        const pass_info *p = pm->pipeline[i];
        /* The training step is built (optimize), then differentiated
         * (autodiff): no other pass, nor codegen, knows a Grad op or an
         * optimize line. */
        bool optimize = strcmp(p->name, "optimize") == 0, autodiff = strcmp(p->name, "autodiff") == 0;
        if (!optimize && m->nopt_lines > 0) {
            diag_error(ctx->diag, DIAG_NOLOC, "pass '%s' needs the training step built: put 'optimize' "
                       "first in --passes= (the default pipeline is " PASS_DEFAULT_PIPELINE ")", p->name);
            return 1;
        }
        if (!optimize && !autodiff && has_grad(m)) {
            diag_error(ctx->diag, DIAG_NOLOC, "pass '%s' needs the backward pass derived: put "
                       "'autodiff' before it in --passes= (the default pipeline is " PASS_DEFAULT_PIPELINE ")",
                       p->name);
            return 1;
        }
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
        planned |= strcmp(p->name, "propagate") == 0;
        if (verify_after(p, ctx, m, planned || i == pm->npipeline - 1))
            return 1;
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
