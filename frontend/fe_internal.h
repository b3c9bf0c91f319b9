/*
 * fe_internal.h - what the frontend's stages share and keep to themselves.
 *
 * Stages, in fe_compile's order (frontend.c):
 *   source.c      whole-buffer checks: size, NUL bytes, UTF-8
 *   lexer.l       reentrant flex scanner: bytes -> tokens with byte offsets
 *   parser.y      pure bison parser: tokens -> ast_program (ast.h, ast.c);
 *                 parse.c drives the two
 *   symtab.c      hashed name tables used by the checks
 *   check_decl.c  mesh, dims, -D overrides, inputs/params, shardings, outputs
 *   check_stmt.c  statements: names, indices, dtypes, Einstein convention
 *   optimize.c    `loss` and `optimize` lines: checks, and their record in
 *                 the IR (ir_module.opt_lines) for the optimize pass
 *   lower.c       checked AST -> ir_module ops, statement by statement;
 *                 lower_expr.c, lower_call.c, lower_repeat.c lower expressions,
 *                 reductions, gathers, grad and repeated blocks
 *                 (lower_internal.h); ir/ewtree.c builds elementwise ops
 * The frontend only parses, checks and lowers: `grad(L, W)` is a Grad op,
 * and an `optimize` line a record that the optimize pass turns into Grad
 * and update ops (passes/optimize.c); the autodiff pass (passes/autodiff.c)
 * replaces every Grad by the backward ops.
 */
#ifndef EINC_FE_INTERNAL_H
#define EINC_FE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "ast.h"
#include "diag.h"
#include "frontend.h"
#include "ir.h"

/* Longest identifier and numeric literal accepted, in bytes: anything
 * longer is an error (keeps a 10 MB token from flowing into messages). */
#define FE_MAX_NAME 128
#define FE_MAX_NUMBER 64
/* Most factors (tensors, numbers, parentheses, calls) in one statement:
 * lowering walks expression trees recursively, so their size is bounded to
 * keep the recursion far from the stack limit. */
#define FE_MAX_FACTORS 4096

/* State shared by the lexer and the parser of one file. */
typedef struct fe_parser {
    ir_arena *arena;     /* where AST nodes and names go (not owned) */
    diag_ctx *diag;      /* where errors go (not owned) */
    const char *src;     /* the source buffer (not owned) */
    uint32_t len;        /* its length in bytes */
    uint32_t offset;     /* lexer: byte offset of the next token */
    bool eof_newline;    /* lexer: the end-of-line token at EOF was sent */
    const char *lexmsg;  /* lexer: message of the last invalid token (arena) */
    uint32_t lexmsg_loc; /* lexer: its offset */
    fe_list *stmts;      /* parser: statements parsed so far (ast_stmt *) */
} fe_parser;

/* Parses `p->src` into `out`; reports syntax errors through p->diag and
 * keeps every statement that parsed (parser.y). */
void fe_parse(fe_parser *p, ast_program *out);

/* Checks that `src` is at most 4 GB - 1, has no NUL byte and is valid
 * UTF-8; reports each offending byte position; returns false on error
 * (source.c). */
bool fe_source_check(const char *src, size_t len, diag_ctx *d);

/* What a tensor name is bound to (the checker's symbol table). */
typedef struct fe_tensor {
    const char *name;       /* arena-owned */
    ir_value_kind kind;     /* input, param, or statement result (IR_VAL_OP) */
    ir_dtype dtype;         /* element type */
    int rank;               /* number of dims */
    int dims[IR_MAX_RANK];  /* dim ids, global */
    ir_sharding sh;         /* declared sharding (inputs, params) or constraint */
    bool has_constraint;    /* statement result with a written sharding */
    bool bad;               /* its definition had errors: uses are not checked further */
    uint32_t loc;           /* offset of the defining name */
    ir_value *value;        /* the IR value holding it (lower.c); for a loop-carried
                               tensor, its value at the current point of the program */
    int block;              /* the repeated block it is local to (1, 2, ... in source
                               order), 0 if defined outside every block */
    ir_value *slice;        /* lower_repeat.c: its LayerSlice in block `slice_block`, if made */
    int slice_block;        /* the block `slice` belongs to, 0 if none */
    /* An argument with a sharded first dim: 1 + the offset of its first
     * read whole outside every block, 0 if none (an error if that dim is
     * pipelined: fe_check_pipeline). */
    uint32_t whole_read;
} fe_tensor;

/* A string-keyed hash table (open addressing) from names to pointers. */
typedef struct fe_symtab {
    int n;            /* entries */
    int cap;          /* slots, a power of two */
    const char **keys;/* cap slots, NULL = empty (arena) */
    void **vals;      /* cap slots (arena) */
} fe_symtab;

/* Finds `name`; NULL if absent. */
void *fe_symtab_get(const fe_symtab *t, const char *name);
/* Inserts or replaces `name` (the key is borrowed: keep it alive). */
void fe_symtab_put(ir_arena *a, fe_symtab *t, const char *name, void *val);

/* The checker's state for one file. */
typedef struct fe_checker {
    ir_module *m;          /* module being built: mesh and dims go here */
    ir_arena *arena;       /* frontend arena for symbols */
    diag_ctx *diag;        /* where errors go */
    const fe_options *opts;/* -D overrides, single_device */
    fe_symtab dims;        /* dim name -> (intptr_t)(id + 1) */
    fe_symtab tensors;     /* tensor name -> fe_tensor * */
    fe_symtab outputs;     /* tensor name -> ast_stmt * of its output line */
    int noutputs;          /* output lines seen */
    bool *define_used;     /* per -D override: matched a declaration */
    /* Repeated blocks (check_loop.c), while checking and again while lowering: */
    ast_stmt *repeat;      /* the open `repeat L {` line, NULL outside a block */
    int block;             /* its number (1, 2, ... in source order), 0 outside */
    int nblocks;           /* blocks opened so far */
    int skip_ends;         /* `}` lines that close a rejected nested block */
    ir_op *loop_begin;     /* lower_repeat.c: the LoopBegin of the open block */
    const ast_stmt *loss;  /* the `loss` line (optimize.c), NULL if none */
} fe_checker;

/* Declares the mesh axes and dims of every mesh/dim line, applying -D
 * overrides (check_decl.c).  Must run before the other checks. */
void fe_check_sizes(fe_checker *c, const ast_program *prog);
/* Checks an input or param line and defines its tensor (check_decl.c). */
void fe_check_decl(fe_checker *c, ast_stmt *s);
/* Checks a statement and defines its left side (check_stmt.c). */
void fe_check_assign(fe_checker *c, ast_stmt *s);
/* If assignment `s` writes into a state at a run-time position (its left
 * side names a state or has a position index; check_write.c), checks its
 * left side, sets s->u.assign's write fields, stores in *rows the left side
 * without the position (the slice the right side computes) and *ok = no
 * error, and returns true; false if `s` is no write. */
bool fe_check_write(fe_checker *c, ast_stmt *s, ast_tref *rows, bool *ok);
/* The grad(L, W) call that is the whole right side of assignment `s`, or
 * NULL (lower_call.c; the checker has resolved the callee). */
const ast_factor *fe_grad_call(const ast_stmt *s);
/* The tensor W of grad statement `s` (checked). */
const fe_tensor *fe_grad_target(fe_checker *c, const ast_stmt *s);
/* Lowers `G[...] = grad(L, W)` (checked) to a Grad op (ir.h), whose result
 * the autodiff pass replaces by dL/dW (lower_call.c). */
ir_value *fe_lower_grad(fe_checker *c, const ast_stmt *s);
/* Checks the output lines, and that there is one (check_decl.c). */
void fe_check_outputs(fe_checker *c, const ast_program *prog);

/* Resolves the subscripts and `{U_..}` of `t` (dims already resolved) into
 * a sharding: axes exist, each is used once, dim sizes divide by their axes'
 * product.  Reports errors; returns false on any (check_decl.c). */
bool fe_check_sharding(fe_checker *c, const ast_tref *t, ir_sharding *out);
/* Dim id of `name`, or -1. */
int fe_dim_lookup(const fe_checker *c, const char *name);
/* Checks that a tensor of `rank` dims `dims` and dtype `dt` has at most
 * IR_MAX_RANK dims and a byte size that fits in int64; reports at `loc`. */
bool fe_check_shape(fe_checker *c, const char *name, uint32_t loc, ir_dtype dt, int rank,
                    const int *dims);
/* Resolves the dims of a reference's indices: each is a defined dim; unless
 * `repeats`, none is named twice.  A tensor index (a gather) is an error
 * unless `rhs` (a right side, where fe_check_ref resolves it).  False on
 * error. */
bool fe_resolve_indices(fe_checker *c, ast_tref *t, bool repeats, bool rhs);
/* Defines tensor `name`; on a redefinition reports it (with a note at the
 * first definition) and returns NULL. */
fe_tensor *fe_define_tensor(fe_checker *c, ast_name name, ir_value_kind kind);
/* Checks a reference to an existing tensor (right sides and outputs): it is
 * defined, has as many indices as dims, each index names a defined dim of
 * the same size as the tensor's dim at that position, no index repeats, and
 * (unless `subscripts`) no index has a subscript.  Resolves t->sym and the
 * indices' dims.  Returns false on any error (reported). */
bool fe_check_ref(fe_checker *c, ast_tref *t, bool subscripts, const char *defining);

/* ---- warn_call.c: products a call sees one by one ---- */

/* Warns when call `f`, a function like relu, is applied to a product of
 * tensors sharing an index that the left side (its `nlhs` dim ids
 * `lhs_dims`, nlhs < 0 if unresolved) lacks: the statement then sums the
 * function's values, where a contraction before the function was almost
 * surely meant (docs/language.md, "Functions"). */
void fe_warn_product_in_call(fe_checker *c, const ast_factor *f, int nlhs, const int *lhs_dims);
/* Warns when the argument of the checked cast `f` multiplies tensors and
 * holds an index that the left side lacks: the cast converts the whole
 * outer product, whose global size the warning gives, before the statement
 * sums it (docs/language.md, "Dtypes and casts").  A widening cast is told
 * to cast the operands instead, a narrowing one to cast a contraction. */
void fe_warn_sum_in_cast(fe_checker *c, const ast_factor *f, int nlhs, const int *lhs_dims);

/* ---- check_i8.c: where i8 values may appear ---- */

/* The tensor reference that is the whole of `e` (no sign, no division),
 * or NULL: the only argument a cast of an i8 tensor may have. */
const ast_factor *fe_lone_tensor(const ast_expr *e);
/* Reports a read of the i8 tensor `t` other than as the whole argument of
 * a cast; `cast` is the enclosing cast's name, NULL outside casts. */
void fe_error_i8_read(fe_checker *c, const ast_tref *t, const char *cast);
/* Reports a cast to i8 (named `n`) that is not its statement's whole right side. */
void fe_error_i8_cast_inside(fe_checker *c, const ast_name *n);

/* `repeat L {`: opens a repeated block (check_loop.c).  A nested block is
 * an error; so is an unknown dim. */
void fe_check_repeat(fe_checker *c, ast_stmt *s);
/* `}`: closes the open block; it must have updated a tensor (check_loop.c). */
void fe_check_end(fe_checker *c, ast_stmt *s);
/* After the last line: a block still open is an error (check_loop.c). */
void fe_check_blocks_closed(fe_checker *c);
/* Inside a block, whether assignment `s` updates a tensor defined before
 * it (the loop-carried tensor), and checks that update: one carried tensor
 * per block, updated once, with its dims and dtype unchanged.  Returns true
 * if `s` is such an update (then the caller defines nothing). */
bool fe_check_update(fe_checker *c, ast_stmt *s, const int *dims, int rank, ir_dtype dt,
                     bool constrained, const ir_sharding *sh, bool ok);
/* Pipeline parallelism (a stacked tensor's layer dim sharded over a mesh
 * axis), once the whole program is read: there is one repeat block, every
 * state is stacked on the layer dim in a program that does not train,
 * every tensor stacked on the layer dim is split
 * over the same axis, that axis shards nothing else, and nothing reads the
 * stacked tensors whole outside the block (check_loop.c). */
void fe_check_pipeline(fe_checker *c, const ast_program *prog);
/* A layer of stacked tensor `s` (read or, a state, written through `t`)
 * whose layer dim L is sharded: the block is pipelined over that one
 * axis, which every such tensor must agree on.  Returns false after
 * reporting (check_loop.c). */
bool fe_check_pipeline_ref(fe_checker *c, const ast_tref *t, const fe_tensor *s, int L);
/* A reference `t` to tensor `s` inside the open block: whether it is one
 * layer of a tensor stacked on the block's dim (written without that dim),
 * setting t->layer; reports a wrong use of a stacked tensor.  Returns false
 * on error (check_loop.c). */
bool fe_check_layer_ref(fe_checker *c, ast_tref *t, const fe_tensor *s);
/* Whether tensor `s` is local to another block than the open one: reports
 * the use at `loc` and returns false (check_loop.c). */
bool fe_check_scope(fe_checker *c, const fe_tensor *s, uint32_t loc);

/* Checks the `loss` and `optimize` lines (after every statement is
 * checked, so any tensor may be named): one loss, a defined float scalar;
 * optimized params are params, each optimized once, by a known optimizer
 * with known hyperparameters in range (optimize.c). */
void fe_check_train(fe_checker *c, const ast_program *prog);
/* Lowers them (after the outputs): the loss becomes an output, and every
 * optimize line is recorded in c->m->opt_lines (hyperparameters in the
 * slots of ir.h, IR_SGD_* / IR_ADAMW_* then IR_HP_*) for the optimize pass
 * (optimize.c).  Returns true (the lines were checked). */
bool fe_lower_train(fe_checker *c, const ast_program *prog);

/* Lowers a checked program into c->m (lower.c); returns false if an IR
 * limit was hit (reported). */
bool fe_lower(fe_checker *c, const ast_program *prog);

#endif
