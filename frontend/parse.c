/*
 * parse.c - runs the reentrant scanner and the pure parser over one buffer.
 */
#include <string.h>

#include "fe_internal.h"
#include "parser.h"
/* lexer.h names the parser's types without the api.prefix. */
#define YYSTYPE FE_YYSTYPE
#define YYLTYPE fe_loc
#include "lexer.h"

void fe_parse(fe_parser *p, ast_program *out)
{
    yyscan_t scanner;
    memset(out, 0, sizeof *out);
    p->stmts = fe_list_new(NULL);
    if (fe_yylex_init_extra(p, &scanner) != 0) {
        diag_error(p->diag, DIAG_NOLOC, "cannot initialise the scanner");
        fe_list_free(p->stmts);
        p->stmts = NULL;
        return;
    }
    /* flex copies the bytes, so the source needs no terminating NUL. */
    fe_yy_scan_bytes(p->src, (int)p->len, scanner);
    /* 1 = syntax errors (already reported), 2 = parser stack exhausted
     * (reported through fe_yyerror as "memory exhausted"). */
    (void)fe_yyparse(scanner, p);
    fe_yylex_destroy(scanner);
    out->stmts = (ast_stmt **)fe_list_take(p->arena, p->stmts, &out->nstmts);
    p->stmts = NULL;
}
