/*
 * ast.h - the syntax tree of a .ein file.
 *
 * The parser builds it; the checker (check_*.c) resolves names in place
 * (dim ids, tensor symbols, function ids); lower.c turns it into IR.  Every
 * node and string lives in the frontend's arena and is freed at once with it.
 * Lists under construction are heap-owned fe_list vectors (the parser's
 * %destructor frees them when error recovery discards a half-built list);
 * fe_list_take moves a finished list into the arena.
 *
 * Locations are byte offsets into the source (diag.h turns them into
 * line:col only when an error is printed).
 */
#ifndef EINC_FE_AST_H
#define EINC_FE_AST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "ir.h"

/* A source range [begin, end) in bytes; the parser's YYLTYPE. */
typedef struct fe_loc {
    uint32_t begin; /* offset of the first byte */
    uint32_t end;   /* offset one past the last byte */
} fe_loc;

/* A name as written: NUL-terminated copy in the arena. */
typedef struct ast_name {
    const char *s; /* the name, arena-owned */
    uint32_t loc;  /* offset of its first byte */
} ast_name;

/* A numeric literal: sizes need the integer, expressions the double. */
typedef struct ast_number {
    const char *text; /* spelling in the source, arena-owned (for messages) */
    double value;     /* value as a double (may be inf when out of range) */
    int64_t ival;     /* value as an integer when is_int && !overflow */
    bool is_int;      /* written without '.' or exponent */
    bool overflow;    /* integer spelling that does not fit in int64 */
    bool is_inf;      /* the keyword `inf` (value +infinity) */
    uint32_t loc;     /* offset of its first byte */
} ast_number;

/* One index of a tensor reference: `D`, `D_X`, `I_XY`; or in `{U_XY}` an
 * unreduced entry (name "U"). */
struct ast_tref;

typedef struct ast_index {
    struct ast_tref *tensor; /* an index given by an i32 tensor (`Emb[Tok[B, T], D]`:
                                a gather), else NULL; then `name` is the tensor's */
    const char *name; /* dim name (arena) */
    const char *axes; /* subscript letters (mesh axis names), NULL if none */
    uint32_t loc;     /* offset of the name */
    uint32_t axes_loc;/* offset of the first subscript letter */
    int dim;          /* resolved dim id (checker), -1 if unresolved */
    ast_name window;  /* `Pos:T` on a state write's left side: the dim T of the rows
                         written at Pos, Pos+1, ... (s NULL if none) */
} ast_index;

struct fe_tensor;

/* A tensor with indices: `In[B_X, D_Y]{U_Z}`. */
typedef struct ast_tref {
    ast_name name;            /* the tensor */
    int nidx;                 /* number of indices */
    ast_index *idx;           /* nidx entries (arena) */
    int nunred;               /* entries of the `{U_..}` list, 0 if none */
    ast_index *unred;         /* nunred entries (arena) */
    uint32_t unred_loc;       /* offset of '{' (valid if nunred > 0) */
    struct fe_tensor *sym;    /* resolved definition (checker), NULL if none */
    bool layer;               /* inside `repeat L`: the current layer of a tensor stacked
                                 on L, written without its first dim (checker) */
} ast_tref;

/* Kinds of factor in a product. */
typedef enum ast_factor_kind {
    AST_F_TENSOR, /* u.tref */
    AST_F_NUMBER, /* u.num (also `inf`) */
    AST_F_PAREN,  /* u.paren: `( expr )` */
    AST_F_CALL,   /* u.call: `fn( expr, ... )` */
    AST_F_INDEX,  /* u.index: a dim used as a value, `T` (its global position) */
    AST_F_CMP,    /* u.cmp: `a <= b`, only as the condition of `where` */
} ast_factor_kind;

/* What a call resolves to (the checker sets it). */
typedef enum ast_callee {
    AST_CALL_UNKNOWN, /* not resolved (unknown name) */
    AST_CALL_FN,      /* a unary ir_func: `exp(x)` */
    AST_CALL_MAXIMUM, /* `maximum(a, b)` */
    AST_CALL_MINIMUM, /* `minimum(a, b)` */
    AST_CALL_WHERE,   /* `where(a < b, x, y)` */
    AST_CALL_SUM,     /* `sum(x)`, `sum(x, S)`: reductions (see reduce_dim) */
    AST_CALL_MAX,     /* `max(x)`, `max(x, S)` */
    AST_CALL_MIN,     /* `min(x)`, `min(x, S)` */
    AST_CALL_MEAN,    /* `mean(x)`, `mean(x, S)` */
    AST_CALL_SOFTMAX, /* `softmax(x, S)` */
    AST_CALL_GRAD,    /* `grad(L, W)`: the whole right side (a Grad op) */
    AST_CALL_ARGMAX,  /* `argmax(x, S)`: the whole right side, an i32 result */
    AST_CALL_CAST,    /* `f32(x)`, `bf16(x)`, `f64(x)`: x converted to cast_dtype */
} ast_callee;

/* True for the reductions sum, max, min and mean. */
static inline bool ast_callee_reduces(ast_callee c)
{
    return c >= AST_CALL_SUM && c <= AST_CALL_MEAN;
}

struct ast_expr;

/* One factor of a term. */
typedef struct ast_factor {
    ast_factor_kind kind; /* selects the arm of u */
    uint32_t loc;         /* offset of its first byte */
    bool divide;          /* written after '/': the term divides by it */
    union {
        ast_tref tref;           /* AST_F_TENSOR */
        ast_number num;          /* AST_F_NUMBER */
        struct ast_expr *paren;  /* AST_F_PAREN (arena) */
        struct {
            ast_name fname;         /* the function name as written */
            ast_callee callee;      /* what it is (checker) */
            int fn;                 /* AST_CALL_FN: ir_func id (checker), else -1 */
            int nargs;              /* arguments, >= 1 */
            struct ast_expr **args; /* nargs entries (arena) */
            int reduce_dim;         /* reductions and softmax: the dim id named by the
                                       second argument (checker), -1 if none: a
                                       reduction then reduces every index of its
                                       argument that the left side lacks */
            ir_dtype arg_dtype;     /* argmax and casts: the argument's dtype (checker) */
            ir_dtype cast_dtype;    /* AST_CALL_CAST: the dtype converted to (checker) */
        } call;                  /* AST_F_CALL */
        struct {
            ast_name name;          /* the dim as written */
            int dim;                /* resolved dim id (checker), -1 if unresolved */
        } index;                 /* AST_F_INDEX */
        struct {
            int op;                 /* ir_ew_kind: IR_EW_LT .. IR_EW_NE */
            struct ast_expr *sides[2]; /* left and right side (arena) */
        } cmp;                   /* AST_F_CMP */
    } u;
} ast_factor;

/* A product of factors with a sign: `- 2 * A[I, J] * B[J]`. */
typedef struct ast_term {
    int sign;            /* +1 or -1 */
    int nfactors;        /* >= 1 */
    ast_factor **factors;/* nfactors entries (arena) */
    uint32_t loc;        /* offset of the term's first byte (its sign if any) */
} ast_term;

/* A sum of signed terms (a right side or a parenthesised expression). */
typedef struct ast_expr {
    int nterms;       /* >= 1 */
    ast_term **terms; /* nterms entries (arena) */
    uint32_t loc;     /* offset of the first byte */
} ast_expr;

/* The expressions nested in `f` (a parenthesis: 1, a call: its arguments,
 * a comparison: its 2 sides, else none): stores the array in *kids and
 * returns the count.  Walkers use it so that a new factor kind is handled
 * in one place. */
int ast_factor_children(const ast_factor *f, ast_expr *const **kids);

/* The dim ids that index the reference `t` as resolved by the checker (-1
 * for one unresolved), stored in `dims` (room for 2 * IR_MAX_RANK) and
 * counted in the return value: its indices in order, except that a gather
 * `Emb[Tok[B, T], D]` gives Tok's indices in place of the dim it looks up. */
int ast_tref_dims(const ast_tref *t, int *dims);

/* A `NAME = size` entry of a mesh or dim line. */
typedef struct ast_sizedef {
    ast_name name;   /* axis or dim name */
    ast_number size; /* its size as written */
    bool negative;   /* written with a leading '-' */
    ast_name over;   /* the word after the size (`over`), NULL s when none; the
                        checker requires it to be `over` and only on a mesh line */
    ast_number phys; /* `over 2`: physical axes (is_int false and text NULL when absent) */
    ast_name where;  /* `over dcn`: the word after `over` (NULL s when absent) */
} ast_sizedef;

/* Most hyperparameters an optimizer has. */
#define AST_MAX_HPARAMS 16

/* A `name=value` argument of an optimizer: `lr=0.01`, or `decay=cosine`
 * (a choice by name). */
typedef struct ast_hparam {
    ast_name name;    /* the hyperparameter */
    ast_number value; /* its value; for a name, only loc and text (the name) */
    ast_name word;    /* the value when it is a name, else s NULL */
} ast_hparam;

/* Kinds of statement. */
typedef enum ast_stmt_kind {
    AST_S_MESH,   /* u.sizes: mesh axes */
    AST_S_DIM,    /* u.sizes: dims */
    AST_S_INPUT,  /* u.decl */
    AST_S_PARAM,  /* u.decl */
    AST_S_STATE,  /* u.decl: `state KC[B, S, K, H] : f32` */
    AST_S_ASSIGN, /* u.assign */
    AST_S_OUTPUT, /* u.output */
    AST_S_REPEAT, /* u.repeat: `repeat L {`, the first line of a repeated block */
    AST_S_END,    /* no arm: `}`, the last line of a repeated block */
    AST_S_LOSS,   /* u.train: `loss L` (one name, no optimizer) */
    AST_S_OPTIMIZE, /* u.train: `optimize W1, W2 with adamw(lr=3e-4, ...)` */
    AST_S_BAD,    /* u.bad: a line with a syntax error (kept to avoid cascades) */
} ast_stmt_kind;

/* One statement (one line). */
typedef struct ast_stmt {
    ast_stmt_kind kind; /* selects the arm of u */
    uint32_t loc;       /* offset of its first byte */
    union {
        struct {
            int n;              /* entries */
            ast_sizedef **defs; /* n entries (arena) */
            ast_name word;      /* `mesh auto`: the word after 'mesh' (n == 0), else {NULL} */
        } sizes;                /* AST_S_MESH, AST_S_DIM */
        struct {
            ast_tref tref;      /* the declared tensor with its sharding */
            ast_name dtype;     /* dtype name as written */
        } decl;                 /* AST_S_INPUT, AST_S_PARAM, AST_S_STATE */
        struct {
            ast_tref lhs;       /* left side */
            ast_expr *rhs;      /* right side (arena) */
            /* Inside a repeated block, an assignment to a tensor defined
             * before it updates that loop-carried tensor (checker): */
            bool update;        /* it is such an update */
            bool constrained;   /* the left side is written with a sharding */
            ir_sharding sh;     /* that sharding (if constrained) */
            /* A write into a state at a run-time position (`KC[B, pos, K,
             * H] = Kn[B, K, H]`, checker): */
            bool write;         /* it is such a write */
            int write_pos;      /* the position of the index tensor among the left side's */
            bool write_layer;   /* in a repeated block, into the current layer of a state
                                   stacked on its dim (the left side omits that dim) */
            struct fe_tensor *pos; /* the index tensor: a scalar i32, or a per-row i32 over
                                      one dim of the state (`KC[B, At[B], K, H]`) */
            int write_row;      /* per-row position: the left side's index of the dim
                                   `pos` is over (each row written at its own
                                   position), -1 for a scalar position */
        } assign;               /* AST_S_ASSIGN */
        struct {
            ast_name dim;       /* the dim counting the iterations, as written */
            int dim_id;         /* its id (checker), -1 if unresolved */
            struct fe_tensor *carry; /* the tensor the body updates (checker), NULL if none */
        } repeat;               /* AST_S_REPEAT */
        struct {
            ast_tref tref;      /* the output; nidx = -1 for bare `output NAME` */
        } output;               /* AST_S_OUTPUT */
        struct {
            int n;              /* names: 1 for `loss`, the params for `optimize` */
            ast_name *names;    /* n entries (arena) */
            ast_name optimizer; /* `optimize`: the optimizer's name (s NULL for `loss`) */
            int nhp;            /* its arguments */
            ast_hparam *hp;     /* nhp entries (arena) */
            int opt;            /* the optimizer (optimize.c's table; checker), -1 if unknown */
            double hpv[AST_MAX_HPARAMS]; /* every hyperparameter's value, given or the default,
                                            in the table's order (checker) */
        } train;                /* AST_S_LOSS, AST_S_OPTIMIZE */
        struct {
            ast_name name;      /* tensor the line would define (s NULL if unknown) */
            bool output;        /* it was an output line */
        } bad;                  /* AST_S_BAD */
    } u;
} ast_stmt;

/* A parsed file. */
typedef struct ast_program {
    int nstmts;        /* statements parsed without syntax error */
    ast_stmt **stmts;  /* nstmts entries (arena) */
} ast_program;

/* A growable vector of pointers under construction (heap-owned). */
typedef struct fe_list {
    int n;       /* elements */
    int cap;     /* allocated slots */
    void **items;/* malloc'd array of n pointers */
} fe_list;

/* A new list holding `first` (if non-NULL); exits on out-of-memory like the arena. */
fe_list *fe_list_new(void *first);
/* Appends `item`; returns `l`. */
fe_list *fe_list_push(fe_list *l, void *item);
/* Frees the list (not its items, which live in the arena). */
void fe_list_free(fe_list *l);
/* Copies the items into the arena, frees `l`, stores the count in *n. */
void **fe_list_take(ir_arena *a, fe_list *l, int *n);
/* Copies a list of ast_index pointers into an arena array of ast_index. */
ast_index *fe_list_take_indices(ir_arena *a, fe_list *l, int *n);

#endif
