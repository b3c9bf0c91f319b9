/*
 * frontend.h - .ein source text to IR.
 *
 * fe_compile lexes (reentrant flex), parses (pure bison) into an AST, checks
 * it, and lowers it to an ir_module whose values carry the shardings the user
 * wrote on inputs and params and the constraints written on left sides and
 * outputs.  Intermediates without a constraint are left replicated for the
 * propagate pass to decide.  The language is described in docs/language.md.
 */
#ifndef EINC_FRONTEND_H
#define EINC_FRONTEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "diag.h"
#include "ir.h"

/* A -D NAME=VALUE override of a dim or mesh axis size. */
typedef struct fe_define {
    const char *name;  /* dim name or single-letter mesh axis name; not owned */
    int64_t value;     /* new size, >= 1 */
} fe_define;

/* Auto-sharding (`einc plan`, `einc --chips N`): the mesh of a program
 * that declares none, and the sharding of each input, param and state
 * declared without subscripts, as if the program had written them. */
typedef struct fe_autoshard {
    int naxes;                  /* 1..IR_MAX_AXES */
    char names[IR_MAX_AXES];    /* single-letter axis names */
    int64_t sizes[IR_MAX_AXES]; /* devices along each */
    /* Fills *sh (replicated on entry) for the declared tensor `name` of
     * `kind` with `rank` dims (ids into m->dims); the mesh is in m. */
    void (*assign)(void *ctx, const ir_module *m, ir_value_kind kind, const char *name, int rank,
                   const int *dims, ir_sharding *sh);
    void *ctx;
    /* True (`einc analyze`): the program keeps the mesh it declares (naxes
     * is then 0) and every sharding it writes - of declarations, statement
     * results and outputs - is replaced by assign's, so a seed 000 strategy
     * is priced on the program's own mesh. */
    bool keep_mesh;
} fe_autoshard;

/* Options of one compilation. */
typedef struct fe_options {
    const fe_define *defines; /* ndefines overrides, applied at declaration */
    int ndefines;
    /* True: every mesh axis gets size 1 and every sharding and constraint
     * is dropped (all values replicated): the unsharded reference program
     * that the executable's --check compares against. */
    bool single_device;
    ir_remat remat;           /* recorded in ir_module.remat for the autodiff pass */
    /* Not NULL: auto-sharding; a program that declares a mesh is an error
     * unless autoshard->keep_mesh. */
    const fe_autoshard *autoshard;
    /* True: the module is only priced (--dump-cost, --explain, einc
     * analyze, einc autotune), never built into an executable, so the mesh
     * may have up to FE_MAX_DEVICES_COST devices (a v5p pod of 8960 chips,
     * seed 000) instead of FE_MAX_DEVICES_EXE. */
    bool cost_only;
} fe_options;

/* The most devices a mesh may have: what every einc executable can run
 * (RT_MAX_DEVICES, runtime/rt_internal.h), and for a program that is only
 * priced (fe_options.cost_only). */
#define FE_MAX_DEVICES_EXE 4096
#define FE_MAX_DEVICES_COST (INT64_C(1) << 20)

/* Compiles `src` (len bytes, need not be NUL-terminated; may contain any
 * bytes: NULs and invalid UTF-8 are reported as errors).  Every error is
 * reported through `d` (file:line:col, source line, caret).  Returns the
 * module, owned by the caller (ir_module_free), or NULL if any error was
 * reported. */
ir_module *fe_compile(const char *src, size_t len, const fe_options *opts, diag_ctx *d);

#endif
