/*
 * frontend.c - fe_compile: source checks, parse, check, lower.
 *
 * Every stage reports all the errors it finds; a later stage runs on what
 * parsed even after errors (so one file's errors all show at once), but
 * lowering runs only on an error-free program.  The one exception is a
 * parse that stopped before the end of the file (an expression nested past
 * the parser's stack): the lines after it were never read, so checking the
 * rest would report their absence ("no 'output' line", undefined tensors)
 * as errors of their own.
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
    if (!fe_source_check(src, len, d)) {
        diag_finish(d);
        return NULL;
    }

    ir_arena arena = {0};
    fe_parser p = {.arena = &arena, .diag = d, .src = src, .len = (uint32_t)len};
    ast_program prog;
    fe_parse(&p, &prog);
    /* The lexer sends the end-of-file newline only when the parser reads
     * to the end; a parse that gave up earlier never asked for it. */
    if (!p.eof_newline) {
        if (d->nerrors == errors0) /* never so far: every early stop reports why */
            diag_error(d, p.offset, "the parser stopped before the end of the file");
        ir_arena_free(&arena);
        diag_finish(d);
        return NULL;
    }

    ir_module *m = ir_module_new(d->filename ? d->filename : "<input>");
    m->remat = opts->remat;
    m->reference = opts->single_device;
    fe_checker c = {.m = m, .arena = &arena, .diag = d, .opts = opts};
    c.define_used = ir_alloc(&arena, (size_t)(opts->ndefines + 1) * sizeof *c.define_used);
    fe_check_sizes(&c, &prog);
    for (int i = 0; i < prog.nstmts; i++) {
        ast_stmt *s = prog.stmts[i];
        bool decl = s->kind == AST_S_INPUT || s->kind == AST_S_PARAM || s->kind == AST_S_STATE;
        if (decl && c.repeat)
            diag_error(d, s->loc, "inputs, params and states are declared outside 'repeat' "
                       "blocks: move '%s' before the block", s->u.decl.tref.name.s);
        if (decl)
            fe_check_decl(&c, s);
        else if (s->kind == AST_S_REPEAT)
            fe_check_repeat(&c, s);
        else if (s->kind == AST_S_END)
            fe_check_end(&c, s);
        else if (s->kind == AST_S_ASSIGN)
            fe_check_assign(&c, s);
        else if ((s->kind == AST_S_LOSS || s->kind == AST_S_OPTIMIZE) && c.repeat) {
            diag_error(d, s->loc, "'%s' lines are written outside 'repeat' blocks",
                       s->kind == AST_S_LOSS ? "loss" : "optimize");
            /* Reported once: not checked again as a line of its kind. */
            s->kind = AST_S_BAD;
            s->u.bad.name = (ast_name){0};
            s->u.bad.output = true;
        }
        else if (s->kind == AST_S_BAD && s->u.bad.name.s &&
                 !fe_symtab_get(&c.tensors, s->u.bad.name.s))
            /* Defined, but unusable: its uses are not errors of their own. */
            fe_define_tensor(&c, s->u.bad.name, IR_VAL_OP)->bad = true;
    }
    fe_check_blocks_closed(&c);
    fe_check_pipeline(&c, &prog);
    c.repeat = NULL;
    c.block = 0;
    fe_check_train(&c, &prog);
    fe_check_outputs(&c, &prog);

    if (d->nerrors == errors0)
        (void)fe_lower(&c, &prog);
    ir_arena_free(&arena);
    if (d->nerrors != errors0) {
        ir_module_free(m);
        diag_finish(d);
        return NULL;
    }
    return m;
}
