/*
 * parser.y - pure bison grammar of .ein files.
 *
 * A file is a sequence of lines; each non-empty line is one statement.  On a
 * syntax error the parser reports it, skips to the end of the line
 * (`line: error NL`) and goes on, so every line with a syntax error is
 * reported once.  Statements that parse are appended to fe_parser.stmts.
 *
 * Nodes are allocated in the frontend arena (ast.h).  Lists being collected
 * are heap vectors (fe_list); the %destructor frees them when error recovery
 * pops a half-built list.  Every other semantic value is arena-owned and
 * needs no destructor.  Locations are byte ranges (fe_loc).
 */
%define api.pure full
%define api.prefix {fe_yy}
%define api.location.type {fe_loc}
%define parse.error detailed
/* Detect errors before reducing a statement, so its error alternatives see them. */
%define lr.default-reduction consistent
%locations
%expect 0

%param {yyscan_t scanner}
%parse-param {fe_parser *p}

%code requires {
#include "ast.h"
typedef void *yyscan_t;
typedef struct fe_parser fe_parser;
}

%code provides {
int fe_yylex(FE_YYSTYPE *lval, fe_loc *lloc, yyscan_t scanner);
}

%code {
#include <math.h>
#include <string.h>

#include "fe_internal.h"

/* A rule's range: from its first to its last symbol; empty rules sit at the
 * end of what precedes them. */
#define YYLLOC_DEFAULT(Cur, Rhs, N)                          \
    do {                                                     \
        if (N) {                                             \
            (Cur).begin = YYRHSLOC(Rhs, 1).begin;            \
            (Cur).end = YYRHSLOC(Rhs, N).end;                \
        } else {                                             \
            (Cur).begin = (Cur).end = YYRHSLOC(Rhs, 0).end;  \
        }                                                    \
    } while (0)

static void fe_yyerror(fe_loc *loc, yyscan_t scanner, fe_parser *p, const char *msg);
static ast_stmt *stmt_new(fe_parser *p, ast_stmt_kind kind, uint32_t loc);
static ast_tref *tref_new(fe_parser *p, ast_name name, fe_list *idx, fe_list *unred,
                          uint32_t unred_loc);
static ast_term *term_new(fe_parser *p, int sign, fe_list *factors, uint32_t loc);
static ast_expr *expr_new(fe_parser *p, fe_list *terms, uint32_t loc);
static ast_factor *factor_new(fe_parser *p, ast_factor_kind kind, uint32_t loc);
static ast_sizedef *sizedef_new(fe_parser *p, ast_name name, ast_number size, bool negative);
static ast_stmt *bad_stmt(fe_parser *p, ast_name name, bool output, uint32_t loc);
static ast_name *name_new(fe_parser *p, ast_name n);
static ast_stmt *train_stmt(fe_parser *p, ast_name kw, fe_list *names, ast_name with,
                            ast_name opt, fe_list *hps);
}

%union {
    ast_name name;        /* IDENT */
    ast_index *index;     /* SUBIDENT, index */
    ast_number num;       /* NUMBER */
    fe_list *list;        /* lists under construction (heap-owned) */
    ast_tref *tref;       /* tref */
    ast_expr *expr;       /* sum, after it is finished */
    ast_factor *factor;   /* factor */
    ast_stmt *stmt;       /* stmt */
    ast_sizedef *sizedef; /* sizedef */
    ast_hparam *hparam;   /* hparam */
    int ival;             /* cmp: an ir_ew_kind */
}

%token <name> IDENT "name"
%token <index> SUBIDENT "subscripted name"
%token <num> NUMBER "number"
%token NL "end of line"
%token MESH "'mesh'"
%token DIM "'dim'"
%token INPUT "'input'"
%token PARAM "'param'"
%token STATE "'state'"
%token OUTPUT "'output'"
%token REPEAT "'repeat'"
%token INF "'inf'"
%token LE "'<='"
%token GE "'>='"
%token EQ "'=='"
%token NE "'!='"
%token INVALID "invalid token"

%type <list> sizedefs indices indices_opt unred_opt unred_list sum product args names
%type <list> hparams hparams_opt
%type <hparam> hparam
%type <name> hname
%type <expr> arg
%type <ival> cmp
%type <tref> tref
%type <factor> factor
%type <stmt> stmt
%type <sizedef> sizedef
%type <index> index

%destructor { fe_list_free($$); } <list>

%%

/* program -> { line } */
program
    : %empty
    | program line
    ;

/* line -> NL | stmt NL | error NL   (statement-level error recovery) */
line
    : NL
    | stmt NL          { if ($1) fe_list_push(p->stmts, $1); }
    | error NL         { yyerrok; }
    ;

/* stmt -> 'mesh' sizedefs | 'mesh' NAME | 'dim' sizedefs   (a placement only on
 *         mesh lines; the NAME is `auto`, which the checker checks, as `auto`
 *         is not reserved)
 *       | 'input' tref ':' NAME | 'param' tref ':' NAME | 'state' tref ':' NAME
 *       | tref '=' arg
 *       | 'output' NAME | 'output' tref
 *       | 'repeat' NAME '{' | '}'   (a repeated block's first and last line)
 *       | 'loss' NAME | 'optimize' names 'with' NAME '(' [ hparams ] ')'
 * `loss`, `optimize` and `with` are not reserved: they are names that
 * start a statement only there (train_stmt checks the spelling), so a
 * tensor or dim may still be called `loss`.
 * The error alternatives keep what a broken line was about (the tensor it
 * defines, or that it is an output line) so that later uses are not reported
 * again as undefined; they record it at once, as error recovery may still
 * pop the reduced stmt. */
stmt
    : MESH sizedefs
        {
            $$ = stmt_new(p, AST_S_MESH, @1.begin);
            $$->u.sizes.defs = (ast_sizedef **)fe_list_take(p->arena, $2, &$$->u.sizes.n);
        }
    | MESH IDENT
        {
            $$ = stmt_new(p, AST_S_MESH, @1.begin);
            $$->u.sizes.word = $2;
        }
    | DIM sizedefs
        {
            $$ = stmt_new(p, AST_S_DIM, @1.begin);
            $$->u.sizes.defs = (ast_sizedef **)fe_list_take(p->arena, $2, &$$->u.sizes.n);
        }
    | INPUT tref ':' IDENT
        {
            $$ = stmt_new(p, AST_S_INPUT, @1.begin);
            $$->u.decl.tref = *$2;
            $$->u.decl.dtype = $4;
        }
    | PARAM tref ':' IDENT
        {
            $$ = stmt_new(p, AST_S_PARAM, @1.begin);
            $$->u.decl.tref = *$2;
            $$->u.decl.dtype = $4;
        }
    | STATE tref ':' IDENT
        {
            $$ = stmt_new(p, AST_S_STATE, @1.begin);
            $$->u.decl.tref = *$2;
            $$->u.decl.dtype = $4;
        }
    | tref '=' arg
        {
            $$ = stmt_new(p, AST_S_ASSIGN, @1.begin);
            $$->u.assign.lhs = *$1;
            $$->u.assign.rhs = $3;
        }
    | OUTPUT IDENT
        {
            $$ = stmt_new(p, AST_S_OUTPUT, @1.begin);
            $$->u.output.tref.name = $2;
            $$->u.output.tref.nidx = -1;
        }
    | OUTPUT tref
        {
            $$ = stmt_new(p, AST_S_OUTPUT, @1.begin);
            $$->u.output.tref = *$2;
        }
    | REPEAT IDENT '{'
        {
            $$ = stmt_new(p, AST_S_REPEAT, @1.begin);
            $$->u.repeat.dim = $2;
            $$->u.repeat.dim_id = -1;
        }
    | '}'                      { $$ = stmt_new(p, AST_S_END, @1.begin); }
    | IDENT names
        { $$ = train_stmt(p, $1, $2, (ast_name){0}, (ast_name){0}, NULL); }
    | IDENT names IDENT IDENT '(' hparams_opt ')'
        { $$ = train_stmt(p, $1, $2, $3, $4, $6); }
    | REPEAT error
        {   /* still opens a block, so that its '}' is no error of its own */
            $$ = stmt_new(p, AST_S_REPEAT, @1.begin);
            $$->u.repeat.dim_id = -1;
        }
    | INPUT IDENT error        { $$ = bad_stmt(p, $2, false, @1.begin); }
    | PARAM IDENT error        { $$ = bad_stmt(p, $2, false, @1.begin); }
    | STATE IDENT error        { $$ = bad_stmt(p, $2, false, @1.begin); }
    | tref '=' error           { $$ = bad_stmt(p, $1->name, false, @1.begin); }
    | OUTPUT error             { $$ = bad_stmt(p, (ast_name){0}, true, @1.begin); }
    ;

/* names -> NAME { ',' NAME } */
names
    : IDENT                    { $$ = fe_list_new(name_new(p, $1)); }
    | names ',' IDENT          { $$ = fe_list_push($1, name_new(p, $3)); }
    ;
/* hparams_opt -> [ hparam { ',' hparam } ] */
hparams_opt
    : %empty                   { $$ = NULL; }
    | hparams                  { $$ = $1; }
    ;
hparams
    : hparam                   { $$ = fe_list_new($1); }
    | hparams ',' hparam       { $$ = fe_list_push($1, $3); }
    ;
/* hparam -> hname '=' ( NUMBER | NAME )   (`decay=cosine`: a choice by name) */
hparam
    : hname '=' NUMBER
        {
            $$ = ir_alloc(p->arena, sizeof *$$);
            $$->name = $1;
            $$->value = $3;
        }
    | hname '=' IDENT
        {
            $$ = ir_alloc(p->arena, sizeof *$$);
            $$->name = $1;
            $$->word = $3;
            $$->value.loc = $3.loc;
            $$->value.text = $3.s;
        }
    ;
/* hname -> NAME   (`weight_decay` scans as a subscripted name) */
hname
    : IDENT                    { $$ = $1; }
    | SUBIDENT
        {
            $$.s = ir_sprintf(p->arena, "%s_%s", $1->name, $1->axes);
            $$.loc = $1->loc;
        }
    ;
/* sizedefs -> sizedef { ',' sizedef } */
sizedefs
    : sizedef                  { $$ = fe_list_new($1); }
    | sizedefs ',' sizedef     { $$ = fe_list_push($1, $3); }
    ;

/* sizedef -> NAME '=' NUMBER [ placement ] | NAME '=' '-' NUMBER   (the sign for a clear error)
 * placement -> 'over' NUMBER | 'over' NAME   (a mesh axis folded over several
 * physical torus axes, or across the data-center network: `X = 16 over 2`,
 * `P = 4 over dcn`).  `over` is not reserved: the checker checks the word,
 * as it does `loss` and `with`, so the grammar stays LALR(1) and a dim or
 * tensor may still be called `over`. */
sizedef
    : IDENT '=' NUMBER         { $$ = sizedef_new(p, $1, $3, false); }
    | IDENT '=' '-' NUMBER     { $$ = sizedef_new(p, $1, $4, true); }
    | IDENT '=' NUMBER IDENT NUMBER
        {
            $$ = sizedef_new(p, $1, $3, false);
            $$->over = $4;
            $$->phys = $5;
        }
    | IDENT '=' NUMBER IDENT IDENT
        {
            $$ = sizedef_new(p, $1, $3, false);
            $$->over = $4;
            $$->where = $5;
        }
    | IDENT '=' NUMBER IDENT error
        {   /* `X = 4 Y = 2` (a missing comma) or `X = 4 over` at the end:
             * reported as a syntax error; the axis is still defined, so
             * its uses raise nothing more. */
            $$ = sizedef_new(p, $1, $3, false);
        }
    ;

/* tref -> NAME '[' [ index { ',' index } ] ']' [ '{' SUBNAME { ',' SUBNAME } '}' ] */
tref
    : IDENT '[' indices_opt ']' unred_opt
        { $$ = tref_new(p, $1, $3, $5, @5.begin); }
    ;

/* indices_opt -> [ indices ]   (empty brackets: a scalar) */
indices_opt
    : %empty                   { $$ = NULL; }
    | indices                  { $$ = $1; }
    ;

/* indices -> index { ',' index } */
indices
    : index                    { $$ = fe_list_new($1); }
    | indices ',' index        { $$ = fe_list_push($1, $3); }
    ;

/* index -> NAME | SUBNAME | tref | NAME ':' NAME | tref ':' NAME   (a dim,
 * optionally with mesh axes: D_X, I_XY; or an integer tensor whose values
 * index that position: a gather; or a state write's window `Pos:T`, or
 * per row `At[B]:T`) */
index
    : IDENT
        {
            $$ = ir_alloc(p->arena, sizeof *$$);
            $$->name = $1.s;
            $$->loc = $1.loc;
            $$->dim = -1;
        }
    | IDENT ':' IDENT
        {
            $$ = ir_alloc(p->arena, sizeof *$$);
            $$->name = $1.s;
            $$->loc = $1.loc;
            $$->dim = -1;
            $$->window = $3;
        }
    | SUBIDENT                 { $$ = $1; }
    | tref ':' IDENT
        {
            $$ = ir_alloc(p->arena, sizeof *$$);
            $$->tensor = $1;
            $$->name = $1->name.s;
            $$->loc = $1->name.loc;
            $$->dim = -1;
            $$->window = $3;
        }
    | tref
        {
            $$ = ir_alloc(p->arena, sizeof *$$);
            $$->tensor = $1;
            $$->name = $1->name.s;
            $$->loc = $1->name.loc;
            $$->dim = -1;
        }
    ;

/* unred_opt -> [ '{' unred_list '}' ] */
unred_opt
    : %empty                   { $$ = NULL; }
    | '{' unred_list '}'       { $$ = $2; }
    ;

/* unred_list -> SUBNAME { ',' SUBNAME }   (U_X, U_XY; the checker wants U) */
unred_list
    : SUBIDENT                 { $$ = fe_list_new($1); }
    | unred_list ',' SUBIDENT  { $$ = fe_list_push($1, $3); }
    ;

/* sum -> [ '-' ] product { ('+' | '-') product } */
sum
    : product                  { $$ = fe_list_new(term_new(p, +1, $1, @1.begin)); }
    | '-' product              { $$ = fe_list_new(term_new(p, -1, $2, @1.begin)); }
    | sum '+' product          { $$ = fe_list_push($1, term_new(p, +1, $3, @3.begin)); }
    | sum '-' product          { $$ = fe_list_push($1, term_new(p, -1, $3, @2.begin)); }
    ;

/* product -> factor { ('*' | '/') factor } */
product
    : factor                   { $$ = fe_list_new($1); }
    | product '*' factor       { $$ = fe_list_push($1, $3); }
    | product '/' factor       { $3->divide = true; $$ = fe_list_push($1, $3); }
    ;

/* factor -> tref | NUMBER | 'inf' | NAME | '(' sum ')' | NAME '(' args ')' */
factor
    : tref
        {
            $$ = factor_new(p, AST_F_TENSOR, @1.begin);
            $$->u.tref = *$1;
        }
    | NUMBER
        {
            $$ = factor_new(p, AST_F_NUMBER, @1.begin);
            $$->u.num = $1;
        }
    | INF
        {
            $$ = factor_new(p, AST_F_NUMBER, @1.begin);
            $$->u.num.text = "inf";
            $$->u.num.value = HUGE_VAL;
            $$->u.num.is_inf = true;
            $$->u.num.loc = @1.begin;
        }
    | IDENT
        {
            $$ = factor_new(p, AST_F_INDEX, @1.begin);
            $$->u.index.name = $1;
            $$->u.index.dim = -1;
        }
    | '(' arg ')'
        {
            $$ = factor_new(p, AST_F_PAREN, @1.begin);
            $$->u.paren = $2;
        }
    | IDENT '(' args ')'
        {
            $$ = factor_new(p, AST_F_CALL, @1.begin);
            $$->u.call.fname = $1;
            $$->u.call.callee = AST_CALL_UNKNOWN;
            $$->u.call.fn = -1;
            $$->u.call.reduce_dim = -1;
            $$->u.call.args = (ast_expr **)fe_list_take(p->arena, $3, &$$->u.call.nargs);
        }
    ;

/* args -> arg { ',' arg } */
args
    : arg                      { $$ = fe_list_new($1); }
    | args ',' arg             { $$ = fe_list_push($1, $3); }
    ;

/* arg -> sum | sum cmp sum   (also a right side and a parenthesis: the
 * checker allows a comparison only as the condition of where, and says so
 * wherever else it is written; it is kept as an expression of one CMP
 * factor) */
arg
    : sum                      { $$ = expr_new(p, $1, @1.begin); }
    | sum cmp sum
        {
            ast_factor *f = factor_new(p, AST_F_CMP, @1.begin);
            f->u.cmp.op = $2;
            f->u.cmp.sides[0] = expr_new(p, $1, @1.begin);
            f->u.cmp.sides[1] = expr_new(p, $3, @3.begin);
            fe_list *fl = fe_list_new(f);
            $$ = expr_new(p, fe_list_new(term_new(p, +1, fl, @1.begin)), @1.begin);
        }
    ;

/* cmp -> '<' | '<=' | '>' | '>=' | '==' | '!=' */
cmp
    : '<'                      { $$ = IR_EW_LT; }
    | LE                       { $$ = IR_EW_LE; }
    | '>'                      { $$ = IR_EW_GT; }
    | GE                       { $$ = IR_EW_GE; }
    | EQ                       { $$ = IR_EW_EQ; }
    | NE                       { $$ = IR_EW_NE; }
    ;

%%

/* Reports a syntax error; an invalid token's own message (from the lexer)
 * replaces bison's generic one. */
static void fe_yyerror(fe_loc *loc, yyscan_t scanner, fe_parser *p, const char *msg)
{
    (void)scanner;
    if (p->lexmsg && p->lexmsg_loc >= loc->begin && p->lexmsg_loc < loc->end)
        diag_error(p->diag, p->lexmsg_loc, "%s", p->lexmsg);
    else if (strcmp(msg, "memory exhausted") == 0)
        diag_error(p->diag, loc->begin,
                   "expression nested too deeply (the parser's stack of %d entries is full)",
                   YYMAXDEPTH);
    else if (strncmp(msg, "syntax error, ", 14) == 0)
        diag_error(p->diag, loc->begin, "syntax error: %s", msg + 14);
    else
        diag_error(p->diag, loc->begin, "%s", msg);
    p->lexmsg = NULL;
}

static ast_stmt *stmt_new(fe_parser *p, ast_stmt_kind kind, uint32_t loc)
{
    ast_stmt *s = ir_alloc(p->arena, sizeof *s);
    s->kind = kind;
    s->loc = loc;
    return s;
}

static ast_tref *tref_new(fe_parser *p, ast_name name, fe_list *idx, fe_list *unred,
                          uint32_t unred_loc)
{
    ast_tref *t = ir_alloc(p->arena, sizeof *t);
    t->name = name;
    t->idx = fe_list_take_indices(p->arena, idx, &t->nidx);
    t->unred = fe_list_take_indices(p->arena, unred, &t->nunred);
    t->unred_loc = unred_loc;
    return t;
}

static ast_term *term_new(fe_parser *p, int sign, fe_list *factors, uint32_t loc)
{
    ast_term *t = ir_alloc(p->arena, sizeof *t);
    t->sign = sign;
    t->loc = loc;
    t->factors = (ast_factor **)fe_list_take(p->arena, factors, &t->nfactors);
    return t;
}

static ast_expr *expr_new(fe_parser *p, fe_list *terms, uint32_t loc)
{
    ast_expr *e = ir_alloc(p->arena, sizeof *e);
    e->loc = loc;
    e->terms = (ast_term **)fe_list_take(p->arena, terms, &e->nterms);
    return e;
}

static ast_factor *factor_new(fe_parser *p, ast_factor_kind kind, uint32_t loc)
{
    ast_factor *f = ir_alloc(p->arena, sizeof *f);
    f->kind = kind;
    f->loc = loc;
    return f;
}

static ast_sizedef *sizedef_new(fe_parser *p, ast_name name, ast_number size, bool negative)
{
    ast_sizedef *d = ir_alloc(p->arena, sizeof *d);
    d->name = name;
    d->size = size;
    d->negative = negative;
    d->over = (ast_name){0};
    d->phys = (ast_number){0};
    d->where = (ast_name){0};
    return d;
}

/* Records a line with a syntax error; returns NULL (already recorded). */
static ast_stmt *bad_stmt(fe_parser *p, ast_name name, bool output, uint32_t loc)
{
    ast_stmt *s = stmt_new(p, AST_S_BAD, loc);
    s->u.bad.name = name;
    s->u.bad.output = output;
    fe_list_push(p->stmts, s);
    return NULL;
}

static ast_name *name_new(fe_parser *p, ast_name n)
{
    ast_name *r = ir_alloc(p->arena, sizeof *r);
    *r = n;
    return r;
}

/* `loss L` or `optimize W, ... with OPT(k=v, ...)`: the first name says
 * which, and anything else in that place is an unknown statement.  Takes
 * the lists; returns NULL after reporting an error (the line is recorded
 * as broken). */
static ast_stmt *train_stmt(fe_parser *p, ast_name kw, fe_list *names, ast_name with,
                            ast_name opt, fe_list *hps)
{
    bool loss = strcmp(kw.s, "loss") == 0, optimize = strcmp(kw.s, "optimize") == 0;
    if (!loss && !optimize) {
        diag_error(p->diag, kw.loc, "unknown statement '%s' (a line starts with mesh, dim, input, "
                   "param, output, repeat, loss, optimize or a tensor's definition)", kw.s);
    } else if (loss && (with.s || names->n != 1)) {
        diag_error(p->diag, kw.loc, "'loss' names one scalar tensor: loss L");
    } else if (optimize && !with.s) {
        diag_error(p->diag, kw.loc, "'optimize' needs an optimizer: optimize W with sgd(lr=0.01)");
    } else if (optimize && strcmp(with.s, "with") != 0) {
        diag_error(p->diag, with.loc, "expected 'with' before the optimizer, got '%s'", with.s);
    } else {
        ast_stmt *s = stmt_new(p, loss ? AST_S_LOSS : AST_S_OPTIMIZE, kw.loc);
        ast_name **v = (ast_name **)fe_list_take(p->arena, names, &s->u.train.n);
        s->u.train.names = ir_alloc(p->arena, (size_t)s->u.train.n * sizeof *s->u.train.names);
        for (int i = 0; i < s->u.train.n; i++)
            s->u.train.names[i] = *v[i];
        s->u.train.optimizer = opt;
        if (hps) {
            ast_hparam **h = (ast_hparam **)fe_list_take(p->arena, hps, &s->u.train.nhp);
            s->u.train.hp = ir_alloc(p->arena, (size_t)s->u.train.nhp * sizeof *s->u.train.hp);
            for (int i = 0; i < s->u.train.nhp; i++)
                s->u.train.hp[i] = *h[i];
        }
        return s;
    }
    fe_list_free(names);
    fe_list_free(hps);
    /* Kept as a broken line that meant to compute something, so that the
     * missing 'output' line is not reported on top of it. */
    return bad_stmt(p, (ast_name){0}, true, kw.loc);
}
