/*
 * pass.h - passes over the IR and the pass manager that runs them.
 *
 * A pass is one .c file with one entry, `int run(pass_ctx *, ir_module *)`,
 * listed by name in the registry (registry.c) or loaded from a plugin
 * (--load-pass=path.so).  The pass manager, not the pass, prints the IR
 * (--print-after=NAME, --print-after-all) and verifies it after every pass,
 * stopping at the first failure (MLIR's PassManager convention).
 *
 * Plugins: a shared object that defines
 *     const pass_info *einc_pass_plugin(int *count);
 * returning an array of `*count` passes (static storage); they join the
 * registry under their names.  See docs/passes.md.
 */
#ifndef EINC_PASS_H
#define EINC_PASS_H

#include <stdbool.h>
#include <stdio.h>

#include "ir.h"

struct cost_hw;

/* One option a pass declares (MLIR's pass options): written --NAME=VALUE
 * on the einc command line and handed to the pass through
 * pass_ctx.options (pass_option_value).  Names are unique among the
 * registry's passes. */
typedef struct pass_option {
    const char *name; /* NAME, without the dashes */
    const char *help; /* the values it takes, one line */
    /* Whether VALUE is one the pass takes; if not, writes the command
     * line's error message ("--NAME wants ..., not 'VALUE'") into `why`.
     * NULL: any value. */
    bool (*check)(const char *value, char *why, size_t why_size);
} pass_option;

#define PASS_MAX_OPTIONS 16

/* The pass options given on the command line, in order (a later value of
 * the same option wins).  Strings are not owned (argv). */
typedef struct pass_options {
    int n;
    const char *name[PASS_MAX_OPTIONS];
    const char *value[PASS_MAX_OPTIONS];
} pass_options;

/* What every pass sees.  Owned by the driver. */
typedef struct pass_ctx {
    diag_ctx *diag;                   /* where passes report errors */
    const struct cost_hw *hw;         /* hardware profile for cost decisions; may be NULL */
    FILE *log;                        /* pass remarks (--debug-pass); NULL = quiet */
    const pass_options *options;      /* the passes' options as given; NULL: all at their defaults */
    /* Set by pass_manager_run for the pass it runs: its pipeline and its
     * place in it (pass_runs_later).  NULL and 0 outside a pipeline. */
    const struct pass_manager *pm;
    int pass_index;
} pass_ctx;

/* One registered pass.  `run` returns 0 on success; nonzero means it
 * reported errors through ctx->diag and the pipeline stops. */
typedef struct pass_info {
    const char *name;     /* used in --passes= and --print-after= */
    const char *summary;  /* one line, for --list-passes */
    int (*run)(pass_ctx *ctx, ir_module *m);
    const pass_option *options; /* the options it declares (noptions entries), or NULL */
    int noptions;
} pass_info;

/* The value given for option `name` (the last one), or NULL if none was:
 * the pass then uses its default. */
const char *pass_option_value(const pass_ctx *ctx, const char *name);

/* Whether a pass named `name` runs after the current one in the pipeline
 * (ctx->pm): e.g. propagate prices 2D GEMMs as MeshSlice loops only when
 * the meshslice pass will make them.  False outside a pipeline. */
bool pass_runs_later(const pass_ctx *ctx, const char *name);

/* The plugin entry point's type (see above). */
typedef const pass_info *(*pass_plugin_fn)(int *count);
#define PASS_PLUGIN_SYMBOL "einc_pass_plugin"

/* ---- registry (registry.c) ---- */

/* A set of known passes: the built-in ones plus loaded plugins. */
typedef struct pass_registry {
    int npasses;
    const pass_info *passes[64];
    const char *origin[64]; /* plugin path a pass came from, NULL for built-ins; not owned */
    void *plugins[16];  /* dlopen handles, closed by pass_registry_free */
    int nplugins;
} pass_registry;

/* Fills `r` with the built-in passes. */
void pass_registry_init(pass_registry *r);
void pass_registry_free(pass_registry *r);
/* Loads the passes of a plugin (a pass named like a known one replaces it);
 * on failure writes a message to `err` and returns -1.  `path` must outlive
 * the registry. */
int pass_registry_load(pass_registry *r, const char *path, FILE *err);
/* Adds `arg` ("NAME=VALUE", from --NAME=VALUE) to `opts` if a pass of `r`
 * declares option NAME: returns 0, or -1 with the message in `why` when the
 * pass does not take VALUE or `opts` is full; 1 when no pass declares NAME. */
int pass_options_add(pass_options *opts, const pass_registry *r, const char *arg, char *why,
                     size_t why_size);
/* The pass named `name`, or NULL. */
const pass_info *pass_registry_find(const pass_registry *r, const char *name);
/* Prints "name  summary" lines (--list-passes). */
void pass_registry_list(const pass_registry *r, FILE *out);

/* The default pipeline, as --passes text. */
#define PASS_DEFAULT_PIPELINE "optimize,autodiff,select-gather,propagate,pipeline,regather,meshslice,cost"

/* ---- pass manager (manager.c) ---- */

typedef struct pass_manager {
    const pass_registry *registry;
    const pass_info *pipeline[64];
    int npipeline;
    bool print_after_all;
    const char *print_after;  /* comma-separated pass names, or NULL */
    bool print_json;          /* dumps in JSON rather than text */
    FILE *dump;               /* where dumps go (stdout) */
} pass_manager;

/* Parses "a,b,c" into pm->pipeline ("" is the empty pipeline) and checks
 * the names of pm->print_after (set it first); unknown names are reported
 * to `err` and make it return -1. */
int pass_manager_parse(pass_manager *pm, const char *pipeline, FILE *err);
/* Runs the pipeline: each pass, then the verifier, then the requested dump
 * ("*** IR Dump After NAME ***"); the empty pipeline verifies the IR once.  Returns 0, or nonzero after the first
 * pass or verification failure. */
int pass_manager_run(pass_manager *pm, pass_ctx *ctx, ir_module *m);

/* ---- built-in passes ---- */
int pass_optimize(pass_ctx *ctx, ir_module *m);   /* optimize.c */
int pass_autodiff(pass_ctx *ctx, ir_module *m);   /* autodiff.c */
int pass_select_gather(pass_ctx *ctx, ir_module *m); /* select_gather.c */
int pass_propagate(pass_ctx *ctx, ir_module *m);  /* propagate.c */
int pass_cost(pass_ctx *ctx, ir_module *m);       /* cost.c */
int pass_prefetch_params(pass_ctx *ctx, ir_module *m); /* prefetch_params.c */
int pass_regather(pass_ctx *ctx, ir_module *m);   /* regather.c */
int pass_meshslice(pass_ctx *ctx, ir_module *m);  /* meshslice.c */
int pass_pipeline(pass_ctx *ctx, ir_module *m);   /* pipeline.c */
/* The propagate pass's options: --ilp=on|off|SECONDS, --portfolio=on|off (propagate.c). */
extern const pass_option pass_propagate_options[3];
extern const pass_option pass_optimize_options[1]; /* optimize.c: --zero */
/* The meshslice pass's option: --meshslice=auto|off|K (meshslice.c). */
extern const pass_option pass_meshslice_options[1];
/* The pipeline pass's options: --microbatches=M, --schedule=S, --chunks=v, --grad-sync=G,
 * --w-fill=F (pipeline.c). */
extern const pass_option pass_pipeline_options[5];

#endif
