/*
 * frontend.c - fe_compile: source checks, parse, check, lower.
 *
 * Every stage reports all the errors it finds; a later stage runs on what
 * parsed even after errors (so one file's errors all show at once), but
 * lowering runs only on an error-free program.
 */
#include <stdlib.h>
#include <string.h>

#include "fe_internal.h"

ir_module *fe_compile(const char *src, size_t len, const fe_options *opts, diag_ctx *d)
{
    static const fe_options no_options;
    if (!opts)
        opts = &no_options;
    int errors0 = d->nerrors;
    if (!fe_source_check(src, len, d))
        return NULL;

    ir_arena arena = {0};
    fe_parser p = {.arena = &arena, .diag = d, .src = src, .len = (uint32_t)len};
    ast_program prog;
    fe_parse(&p, &prog);

    ir_module *m = ir_module_new(d->filename ? d->filename : "<input>");
    fe_checker c = {.m = m, .arena = &arena, .diag = d, .opts = opts};
    c.define_used = ir_alloc(&arena, (size_t)(opts->ndefines + 1) * sizeof *c.define_used);
    fe_check_sizes(&c, &prog);
    for (int i = 0; i < prog.nstmts; i++) {
        ast_stmt *s = prog.stmts[i];
        if (s->kind == AST_S_INPUT || s->kind == AST_S_PARAM)
            fe_check_decl(&c, s);
        else if (s->kind == AST_S_ASSIGN)
            fe_check_assign(&c, s);
        else if (s->kind == AST_S_BAD && s->u.bad.name.s &&
                 !fe_symtab_get(&c.tensors, s->u.bad.name.s))
            /* Defined, but unusable: its uses are not errors of their own. */
            fe_define_tensor(&c, s->u.bad.name, IR_VAL_OP)->bad = true;
    }
    fe_check_outputs(&c, &prog);

    if (d->nerrors == errors0)
        (void)fe_lower(&c, &prog);
    ir_arena_free(&arena);
    if (d->nerrors != errors0) {
        ir_module_free(m);
        return NULL;
    }
    return m;
}
