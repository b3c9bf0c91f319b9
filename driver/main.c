/*
 * main.c - the einc driver: .ein file -> IR -> passes -> dumps / executable.
 *
 *   einc model.ein --dump-ir            propagated IR in the seeds' notation
 *   einc model.ein -o model             native SPMD executable (threads runtime)
 *   einc --list-passes                  the registered passes
 *
 * Exit status: 0 on success, 1 on any error in the input or the pipeline,
 * 2 on a bad command line.  See `einc --help` and docs/.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyze.h"
#include "analyze_pipe.h"
#include "autotune.h"
#include "calibrate.h"
#include "codegen.h"
#include "companion.h"
#include "cost.h"
#include "driver.h"
#include "frontend.h"
#include "pass.h"
#include "plan.h"

#define MAX_PLUGINS 16

/* Everything the command line says. */
typedef struct options {
    const char *input;            /* the .ein path */
    const char *output;           /* -o */
    cg_output_kind emit;          /* -c / --emit-llvm / executable */
    int opt_level;                /* -O0..-O3 */
    cg_runtime runtime;           /* --runtime= */
    fe_define defines[DRV_MAX_DEFINES];
    int ndefines;
    const char *plugins[MAX_PLUGINS];
    int nplugins;
    const char *pipeline;         /* --passes= */
    const char *print_after;      /* --print-after= */
    bool print_after_all;
    bool list_passes;
    int dump_ir;                  /* 0 none, 1 text, 2 json */
    bool dump_cost;
    bool explain;
    const char *hw;               /* --hw */
    /* --NAME=VALUE arguments the driver does not know: options of passes
     * (pass_options_add), resolved once the registry holds the plugins. */
    int npass_args;
    const char *pass_args[PASS_MAX_OPTIONS];
    ir_remat remat;               /* --remat= */
    bool remat_set;               /* --remat= was given: auto-sharding does not choose it */
    int einsum_unroll;            /* --einsum-unroll=N, or -1: IR_EINSUM_UNROLL_MAX */
    int64_t stream_min;           /* --stream-min=BYTES (INT64_MAX: off), or 0: IR_STREAM_MIN_BYTES */
    bool no_cast_fold;            /* --fold-casts=off */
    bool no_pos_bound;            /* --pos-bound=off */
    int max_errors;
    bool debug_pass;
    bool plan_only;               /* `einc plan`: print the auto-sharding table, compile nothing */
    int64_t chips;                /* --chips N: auto-sharding over N chips; 0: the program's mesh */
    plan_search search;           /* --plan-search=: which candidates are compiled in full */
    bool analyze;                 /* `einc analyze`: the whole-step limits, compile nothing */
    bool json;                    /* --json: the plan or analyze table as JSON */
    analyze_pipe_opts pipe;       /* analyze --stages Z [--microbatches M] [--schedule S] [--stage-link] */
    /* The last --microbatches=M, --schedule=S and --chunks=v as given: when compiling,
     * the pipeline pass's options (passes/pipeline.c). */
    const char *pipe_args[3];
    /* The companions linked beside the program (companion.c): [0] --draft
     * FILE.ein, a speculative-decoding draft; [1] --prefill FILE.ein, a
     * chunked-prefill program for --serve; NULL if not given. */
    const char *companion[2];
    fe_define comp_defines[2][DRV_MAX_DEFINES]; /* --draft-define, --prefill-define NAME=VALUE */
    int ncomp_defines[2];
} options;

/* The companions' flags and symbols, by options.companion's index. */
static const char *const comp_flag[2] = {"--draft", "--prefill"};
static const char *const comp_symbol[2] = {DRV_DRAFT_SYMBOL, DRV_PREFILL_SYMBOL};

static void usage(FILE *out)
{
    fputs("usage: einc [options] FILE.ein\n"
          "       einc plan --chips N [--json] [options] FILE.ein   auto-sharding: seed 000's\n"
          "                        strategies on every mesh of N chips, priced (docs/propagation.md)\n"
          "       einc analyze [--json] [options] FILE.ein   whole-step limits: compute,\n"
          "                        communication per axis, critical batch and what fits, for\n"
          "                        the program's plan and seed 000's strategies on its mesh\n"
          "                        (docs/cost-model.md, \"Whole-step limits\"); with\n"
          "                        --stages=Z [--microbatches=M] [--schedule=S] [--chunks=v] [--stage-link=dcn]\n"
          "                        also its repeat block pipelined over Z stages (docs/pipeline.md)\n"
          "       einc autotune --chips N [options] FILE.ein   (see einc autotune --help)\n"
          "       einc calibrate -o PROFILE.json [options]      (see einc calibrate --help)\n"
          "\n"
          "Compiles a sharded tensor program (docs/language.md).\n"
          "\n"
          "Output:\n"
          "  -o PATH               write an SPMD executable (or object/.ll with -c/--emit-llvm)\n"
          "  -c                    write an object file instead of an executable\n"
          "  --emit-llvm           write textual LLVM IR\n"
          "  -O0 -O1 -O2 -O3       LLVM optimisation level (default -O3)\n"
          "  --runtime=threads|mpi runtime the executable links (default threads)\n"
          "Program:\n"
          "  -D NAME=VALUE         override the size of a dim or mesh axis\n"
          "  --chips N             for a program with no mesh: compile the plan `einc plan`\n"
          "                        chooses for N chips (auto-sharding)\n"
          "  --plan-search=auto|all|cut  compile every candidate in full (all), or estimate each\n"
          "                        with --ilp=off and compile the best in full (cut; auto: above\n"
          "                        64 compiles; docs/propagation.md)\n"
          "  --ilp=on|off|SECONDS  plan the whole program as one ILP (CLP, GLPK; docs/propagation.md):\n"
          "                        on (default; SECONDS, default 20, is a safety limit), off\n"
          "  --meshslice=auto|off|K  2D GEMMs as MeshSlice loops (docs/meshslice.md): auto\n"
          "                        picks the slice count K with the cost model (default),\n"
          "                        K fixes it, off keeps propagate's whole-tensor collectives\n"
          "  --remat=none|elementwise|layer  what the backward pass computes again rather\n"
          "                        than keeps (docs/language.md): none (default),\n"
          "                        elementwise results, or each repeated layer\n"
          "  --einsum-unroll=N     run a binary einsum that sums at most N products per\n"
          "                        element as a loop nest, not a GEMM (default 8; 0: never;\n"
          "                        docs/codegen.md, \"Small contractions\")\n"
          "  --draft FILE.ein      link FILE.ein's program into the executable as the draft\n"
          "                        of speculative decoding (--speculate K; docs/generation.md)\n"
          "  --draft-define NAME=VALUE  -D for the draft\n"
          "  --prefill FILE.ein    link FILE.ein's program (the model over a window of W\n"
          "                        tokens per row, `KC[B, At[B]:W, ...]`) for --serve's\n"
          "                        chunked prefill (docs/generation.md)\n"
          "  --prefill-define NAME=VALUE  -D for the prefill program\n"
          "  --stream-min=BYTES|off  write a result of BYTES per device or more with\n"
          "                        non-temporal stores (default 4194304; off: never;\n"
          "                        docs/codegen.md, \"Streamed results\")\n"
          "  --fold-casts=on|off   a cast that only widens a GEMM's operand is converted by\n"
          "                        the GEMM as it reads it (on, default) or materialised\n"
          "                        (off; docs/codegen.md, \"Folded casts\")\n"
          "  --pos-bound=on|off    a decode step's masked attention stops at each row's\n"
          "                        position (on, default) or runs over the whole cache\n"
          "                        (off; docs/codegen.md, \"Contractions bounded by a position\")\n"
          "Dumps:\n"
          "  --dump-ir[=text|json] print the IR after the pipeline (docs/ir.md)\n"
          "  --dump-cost           print the cost table per op and the totals\n"
          "  --explain             print when each contraction is compute-bound and each\n"
          "                        collective latency- or bandwidth-bound\n"
          "  --hw NAME|PATH.json   hardware profile for the cost pass and MeshSlice's K\n"
          "                        (default host: this machine's profile cached by\n"
          "                        `einc calibrate --quick`, else hw/host.json, with a\n"
          "                        warning if measured elsewhere; also tpu-v4, tpu-v5e,\n"
          "                        tpu-v5p, h100)\n"
          "Passes:\n"
          "  --passes=A,B,...      run this pipeline (default " PASS_DEFAULT_PIPELINE ")\n"
          "  --list-passes         list the registered passes\n"
          "  --load-pass=PATH.so   load passes from a plugin (docs/passes.md)\n"
          "  --print-after=A,B     print the IR after these passes\n"
          "  --print-after-all     print the IR after every pass\n"
          "  --debug-pass          passes log what they do to stderr\n"
          "  --max-errors=N        print at most N errors (default 20)\n"
          "  --help, --version\n",
          out);
}

/* Returns 0, or the exit status for a bad command line. */
static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->emit = CG_EMIT_EXE;
    o->opt_level = 3;
    o->max_errors = 20;
    o->einsum_unroll = -1;
    o->pipe.schedule = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--version") == 0) {
            printf("einc 0.1.0 (LLVM 19)\n");
            exit(0);
        } else if (strcmp(a, "-o") == 0) {
            if (++i >= argc)
                return drv_bad_usage("einc", "%s needs a path", a);
            o->output = argv[i];
        } else if (strcmp(a, "-c") == 0) {
            o->emit = CG_EMIT_OBJ;
        } else if (strcmp(a, "--emit-llvm") == 0) {
            o->emit = CG_EMIT_LLVM;
        } else if (a[0] == '-' && a[1] == 'O' && a[2] >= '0' && a[2] <= '3' && !a[3]) {
            o->opt_level = a[2] - '0';
        } else if (strncmp(a, "--runtime=", 10) == 0) {
            if (strcmp(a + 10, "threads") == 0)
                o->runtime = CG_RUNTIME_THREADS;
            else if (strcmp(a + 10, "mpi") == 0)
                o->runtime = CG_RUNTIME_MPI;
            else
                return drv_bad_usage("einc", "unknown runtime '%s' (threads or mpi)", a + 10);
        } else if (strncmp(a, "-D", 2) == 0) {
            const char *def = a[2] ? a + 2 : (++i < argc ? argv[i] : NULL);
            if (!def)
                return drv_bad_usage("einc", "%s needs NAME=VALUE", a);
            if (drv_define("einc", (char *)def, o->defines, &o->ndefines))
                return 2;
        } else if (strcmp(a, "--draft") == 0 || strcmp(a, "--prefill") == 0) {
            if (++i >= argc)
                return drv_bad_usage("einc", "%s needs a .ein file", a);
            o->companion[a[2] == 'p'] = argv[i];
        } else if (strcmp(a, "--draft-define") == 0 || strcmp(a, "--prefill-define") == 0) {
            int k = a[2] == 'p';
            if (++i >= argc)
                return drv_bad_usage("einc", "%s needs NAME=VALUE", a);
            if (drv_define("einc", argv[i], o->comp_defines[k], &o->ncomp_defines[k]))
                return 2;
        } else if (strncmp(a, "--load-pass=", 12) == 0) {
            if (o->nplugins >= MAX_PLUGINS)
                return drv_bad_usage("einc", "too many --load-pass options (at most %s)", "16");
            o->plugins[o->nplugins++] = a + 12;
        } else if (strncmp(a, "--passes=", 9) == 0) {
            o->pipeline = a + 9;
        } else if (strncmp(a, "--print-after=", 14) == 0) {
            o->print_after = a + 14;
        } else if (strcmp(a, "--print-after-all") == 0) {
            o->print_after_all = true;
        } else if (strcmp(a, "--list-passes") == 0) {
            o->list_passes = true;
        } else if (strcmp(a, "--dump-ir") == 0 || strcmp(a, "--dump-ir=text") == 0) {
            o->dump_ir = 1;
        } else if (strcmp(a, "--dump-ir=json") == 0) {
            o->dump_ir = 2;
        } else if (strcmp(a, "--dump-cost") == 0) {
            o->dump_cost = true;
        } else if (strcmp(a, "--explain") == 0) {
            o->explain = true;
        } else if (strcmp(a, "--hw") == 0) {
            if (++i >= argc)
                return drv_bad_usage("einc", "%s needs a profile name or path", a);
            o->hw = argv[i];
        } else if (strncmp(a, "--hw=", 5) == 0) {
            o->hw = a + 5;
        } else if (strncmp(a, "--remat=", 8) == 0) {
            const char *v = a + 8;
            o->remat_set = true;
            if (strcmp(v, "none") == 0)
                o->remat = IR_REMAT_NONE;
            else if (strcmp(v, "elementwise") == 0)
                o->remat = IR_REMAT_ELEMENTWISE;
            else if (strcmp(v, "layer") == 0)
                o->remat = IR_REMAT_LAYER;
            else
                return drv_bad_usage("einc", "--remat wants none, elementwise or layer, not '%s'", v);
        } else if (strncmp(a, "--einsum-unroll=", 16) == 0) {
            int64_t n;
            if (drv_count("einc", "--einsum-unroll", a + 16, 0, 4096, &n))
                return 2;
            o->einsum_unroll = (int)n;
        } else if (strncmp(a, "--fold-casts=", 13) == 0) {
            if (strcmp(a + 13, "on") != 0 && strcmp(a + 13, "off") != 0)
                return drv_bad_usage("einc", "--fold-casts wants on or off, not '%s'", a + 13);
            o->no_cast_fold = strcmp(a + 13, "off") == 0;
        } else if (strncmp(a, "--pos-bound=", 12) == 0) {
            if (strcmp(a + 12, "on") != 0 && strcmp(a + 12, "off") != 0)
                return drv_bad_usage("einc", "--pos-bound wants on or off, not '%s'", a + 12);
            o->no_pos_bound = strcmp(a + 12, "off") == 0;
        } else if (strncmp(a, "--stream-min=", 13) == 0) {
            if (strcmp(a + 13, "off") == 0)
                o->stream_min = INT64_MAX;
            else if (drv_count("einc", "--stream-min", a + 13, 1, INT64_MAX, &o->stream_min))
                return 2;
        } else if (strncmp(a, "--max-errors=", 13) == 0) {
            int64_t n;
            if (drv_count("einc", "--max-errors", a + 13, 1, 100000, &n))
                return 2;
            o->max_errors = (int)n;
        } else if (strcmp(a, "--debug-pass") == 0) {
            o->debug_pass = true;
        } else if (strcmp(a, "--chips") == 0 || strncmp(a, "--chips=", 8) == 0) {
            const char *v = a[7] == '=' ? a + 8 : (++i < argc ? argv[i] : "");
            /* An executable runs at most 4096 devices (docs/language.md, `mesh`).
             * More chips than that span pods (a v5p pod has 8960, seed 000),
             * which auto-sharding does not plan: say so, and what does. */
            int64_t many;
            if (drv_parse_count(v, 4097, INT64_MAX, &many))
                return drv_bad_usage("einc", "--chips %s: auto-sharding plans at most 4096 chips, the most an "
                                     "einc executable runs, and no axis across pods; for seed 000's data "
                                     "parallelism across pods, declare the mesh with an axis over the "
                                     "data-center network (`mesh P = 2 over dcn`, docs/language.md) and "
                                     "price it with --dump-cost", v);
            if (drv_count("einc", "--chips", v, 1, 4096, &o->chips))
                return 2;
        } else if (strncmp(a, "--plan-search=", 14) == 0) {
            if (plan_search_parse(a + 14, &o->search) != 0)
                return drv_bad_usage("einc", "--plan-search wants auto, all or cut, not '%s'", a + 14);
        } else if (strcmp(a, "--json") == 0) {
            o->json = true;
        } else if (strncmp(a, "--stages=", 9) == 0 || strncmp(a, "--microbatches=", 15) == 0) {
            bool st = a[3] == 't';
            int64_t n;
            if (drv_count("einc", st ? "--stages" : "--microbatches", strchr(a, '=') + 1, st ? 2 : 1, 4096, &n))
                return 2;
            *(st ? &o->pipe.stages : &o->pipe.microbatches) = (int)n;
            if (!st)
                o->pipe_args[0] = a;
        } else if (strncmp(a, "--schedule=", 11) == 0) {
            o->pipe_args[1] = a;
            o->pipe.schedule = pp_schedule_lookup(a + 11);
            if (o->pipe.schedule < 0)
                return drv_bad_usage("einc", "--schedule wants gpipe, 1f1b, interleaved, zero-bubble, zb-h1 or "
                                     "zb-h2, not '%s'", a + 11);
        } else if (strncmp(a, "--chunks=", 9) == 0) {
            /* Interleaved's chunks per stage: the pipeline pass's option,
             * which einc analyze prices with too (one name for both). */
            int64_t n;
            if (drv_count("einc", "--chunks", a + 9, 2, 64, &n))
                return 2;
            o->pipe.chunks = (int)n;
            o->pipe_args[2] = a;
        } else if (strncmp(a, "--stage-link=", 13) == 0) {
            if (strcmp(a + 13, "ici") != 0 && strcmp(a + 13, "dcn") != 0)
                return drv_bad_usage("einc", "--stage-link wants ici or dcn, not '%s'", a + 13);
            o->pipe.dcn = strcmp(a + 13, "dcn") == 0;
        } else if (strncmp(a, "--", 2) == 0 && strchr(a, '=') && o->npass_args < PASS_MAX_OPTIONS) {
            o->pass_args[o->npass_args++] = a; /* a pass's option, or unknown: main() tells */
        } else if (a[0] == '-' && a[1]) {
            return drv_bad_usage("einc", "unknown option '%s'", a);
        } else if (o->input) {
            return drv_bad_usage("einc", "more than one input file ('%s')", a);
        } else {
            o->input = a;
        }
    }
    return 0;
}

/* Compiles the source with the pipeline; NULL after reporting errors. */
static ir_module *compile(const options *o, const char *src, size_t len, bool single_device,
                          const fe_autoshard *autoshard, pass_manager *pm, pass_ctx *ctx)
{
    /* Without -o the program is only priced: a mesh beyond an executable's devices is fine. */
    fe_options fo = {.defines = o->defines, .ndefines = o->ndefines, .single_device = single_device,
                     .remat = o->remat, .autoshard = autoshard, .cost_only = !o->output};
    ir_module *m = fe_compile(src, len, &fo, ctx->diag);
    if (!m)
        return NULL;
    if (m->mesh.is_auto && !autoshard) {
        diag_error(ctx->diag, m->mesh.auto_loc, "'mesh auto' leaves the mesh and the shardings to einc: compile "
                   "with --chips N (einc plan %s --chips N prints the candidates)", o->input ? o->input : "FILE");
        ir_module_free(m);
        return NULL;
    }
    if (o->einsum_unroll >= 0)
        m->einsum_unroll_max = o->einsum_unroll;
    if (o->stream_min > 0)
        m->stream_min_bytes = o->stream_min;
    m->no_cast_fold = o->no_cast_fold;
    m->no_pos_bound = o->no_pos_bound;
    if (pass_manager_run(pm, ctx, m) != 0) {
        ir_module_free(m);
        return NULL;
    }
    return m;
}

/* What plan_run's candidates are compiled with. */
typedef struct plan_env {
    const options *o;
    const char *src;
    size_t len;
    pass_manager *pm;
    const pass_ctx *ctx;
    fe_define extra;    /* one more -D override (plan_find_fit's batch), if extra.name */
    const char *schedule; /* --schedule for the pipeline pass (plan_run's choice), or NULL */
    const char *zero;     /* --zero for the optimize pass (plan_run's choice), or NULL */
    const char *ilp;      /* --ilp for the propagate pass (plan_run's estimates), or NULL */
} plan_env;

/* plan_option_fn: the pass option plan_run tries next. */
static void plan_option(void *env, const char *name, const char *value)
{
    plan_env *e = env;
    if (strcmp(name, "schedule") == 0)
        e->schedule = value;
    else if (strcmp(name, "zero") == 0)
        e->zero = value;
    else if (strcmp(name, "ilp") == 0)
        e->ilp = value;
}

/* Appends --name=value to `po` (a later value wins), if there is room. */
static void add_option(pass_options *po, const char *name, const char *value)
{
    if (value && po->n < PASS_MAX_OPTIONS) {
        po->name[po->n] = name;
        po->value[po->n++] = value;
    }
}

/* plan_define_fn: the batch plan_find_fit tries next. */
static void plan_define(void *env, const fe_define *def)
{
    plan_env *e = env;
    e->extra = def ? *def : (fe_define){0};
}

static ir_module *plan_compile(void *env, const fe_autoshard *a, ir_remat remat, diag_ctx *d)
{
    const plan_env *e = env;
    options o = *e->o;
    o.remat = remat;
    /* The extra override goes last, so it wins over the user's -D (the
     * frontend applies them in order).  With no room left it is not
     * tried: the candidate compiles as the user wrote it. */
    if (e->extra.name && o.ndefines < DRV_MAX_DEFINES)
        o.defines[o.ndefines++] = e->extra;
    pass_manager pm = *e->pm;
    pm.print_after = NULL;
    pm.print_after_all = false;
    pass_ctx ctx = *e->ctx;
    pass_options po = ctx.options ? *ctx.options : (pass_options){0};
    add_option(&po, "schedule", e->schedule);
    add_option(&po, "zero", e->zero);
    add_option(&po, "ilp", e->ilp);
    ctx.options = &po;
    ctx.diag = d;
    ctx.log = NULL;
    d->src = e->src;
    d->len = e->len;
    d->filename = e->o->input;
    return compile(&o, e->src, e->len, false, a, &pm, &ctx);
}

/* Auto-sharding: the table of candidates for o->chips chips (printed when
 * `print`), and the chosen one in *chosen (t must outlive it; its
 * rematerialisation is t->rows[t->chosen].remat).  Returns 0,
 * or 1 after reporting why nothing can be chosen. */
static int auto_shard(const options *o, const char *src, size_t len, pass_manager *pm, const pass_ctx *ctx,
                      plan_table *t, fe_autoshard *chosen, bool print)
{
    fe_options fo = {.defines = o->defines, .ndefines = o->ndefines, .remat = o->remat};
    ir_module *proto = fe_compile(src, len, &fo, ctx->diag);
    if (!proto)
        return 1;
    if (proto->mesh.naxes > 0) {
        diag_error(ctx->diag, proto->mesh.axes[0].loc, "auto-sharding (--chips) plans the mesh itself: remove "
                   "the 'mesh' line, or compile without --chips");
        ir_module_free(proto);
        return 1;
    }
    plan_env env = {o, src, len, pm, ctx, {0}, NULL, NULL, NULL};
    int rc = plan_run(t, proto, ctx->hw, o->chips, o->remat, !o->remat_set, !pass_option_value(ctx, "schedule"),
                      !pass_option_value(ctx, "zero"), o->search, plan_compile, plan_option, &env);
    /* `einc plan` says what would fit when nothing does (compiling -o
     * keeps the smallest and warns, as any program over the HBM). */
    if (rc == 0 && print)
        plan_find_fit(t, proto, plan_compile, plan_define, &env);
    ir_module_free(proto);
    if (rc != 0) {
        fprintf(stderr, "einc: error: auto-sharding: the program has too many dims to plan\n");
        return 1;
    }
    if (print)
        plan_print(stdout, t, o->json);
    if (t->chosen < 0) {
        if (!print)
            plan_print(stderr, t, false);
        fprintf(stderr, "einc: error: auto-sharding: no candidate compiles on %lld chips\n", (long long)o->chips);
        return 1;
    }
    plan_autoshard(t, t->chosen, chosen);
    return 0;
}


/* `einc analyze`: the table (or JSON) on stdout; 0, or 1 after an error. */
static int analyze(const options *o, const char *src, size_t len, pass_manager *pm, const pass_ctx *ctx)
{
    fe_options fo = {.defines = o->defines, .ndefines = o->ndefines, .remat = o->remat, .cost_only = true};
    ir_module *proto = fe_compile(src, len, &fo, ctx->diag);
    if (!proto)
        return 1;
    analyze_table *t = malloc(sizeof *t);
    analyze_pipe *p = o->pipe.stages > 0 ? calloc(1, sizeof *p) : NULL; /* zeroed: free-able before a run */
    plan_env env = {o, src, len, pm, ctx, {0}, NULL, NULL, NULL};
    char err[256] = "out of memory";
    bool allocated = t && (p || o->pipe.stages == 0);
    int rc = allocated ? analyze_run(t, proto, ctx->hw, plan_compile, &env, err, sizeof err) : -1;
    ir_module_free(proto);
    if (rc == 0 && p)
        rc = analyze_pipe_run(p, t, &o->pipe, plan_compile, &env, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, "einc: error: analyze: %s\n", err);
    } else {
        analyze_print(stdout, t, o->json, p && o->json ? analyze_pipe_json(p) : NULL);
        if (p && !o->json)
            analyze_pipe_print(stdout, p, t);
    }
    if (p)
        analyze_pipe_free(p);
    free(p);
    free(t);
    return rc != 0;
}

/* --draft (k = 0) or --prefill (k = 1): compiles the companion (and its
 * one-device reference) with its own -D, checks it against the main
 * program `m` and emits its object into obj[4096] (companion.c).  0, or 1
 * after reporting. */
static int build_companion(const options *o, int k, const ir_module *m, pass_manager *pm,
                           const pass_ctx *ctx, const cg_options *co, char *obj)
{
    size_t len = 0;
    char *src = drv_read_source(o->companion[k], "einc", &len);
    if (!src)
        return 1;
    diag_ctx dd;
    diag_init(&dd, o->companion[k], src, len);
    dd.max_errors = o->max_errors;
    pass_ctx dctx = *ctx;
    dctx.diag = &dd;
    options dopt = *o;
    dopt.input = o->companion[k];
    memcpy(dopt.defines, o->comp_defines[k], sizeof dopt.defines);
    dopt.ndefines = o->ncomp_defines[k];
    pass_manager dpm = *pm;
    dpm.print_after = NULL;
    dpm.print_after_all = false;
    ir_module *d = compile(&dopt, src, len, false, NULL, &dpm, &dctx);
    ir_module *ref = d ? compile(&dopt, src, len, true, NULL, &dpm, &dctx) : NULL;
    int rc = d && ref &&
                     (k ? drv_prefill_check(d, m, &dd, o->input)
                        : drv_companion_check(d, m, &dd, o->input)) == 0 &&
                     drv_companion_emit(d, ref, co, comp_symbol[k], &dd, obj, 4096) == 0
                 ? 0 : 1;
    diag_finish(&dd);
    ir_module_free(ref);
    ir_module_free(d);
    free(src);
    return rc;
}

/* Renders the text dump into a malloc'd string (embedded for --info). */
static char *dump_text(ir_module *m)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f)
        return NULL;
    ir_print(f, m);
    fclose(f);
    return text;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "autotune") == 0)
        return autotune_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "calibrate") == 0)
        return calibrate_main(argc - 1, argv + 1);
    bool plan_cmd = argc > 1 && strcmp(argv[1], "plan") == 0;
    bool analyze_cmd = argc > 1 && strcmp(argv[1], "analyze") == 0;
    int shift = plan_cmd || analyze_cmd;
    options o;
    int rc = parse_args(argc - shift, argv + shift, &o);
    if (rc)
        return rc;
    o.plan_only = plan_cmd;
    o.analyze = analyze_cmd;
    if (plan_cmd && o.chips == 0)
        return drv_bad_usage("einc plan", "%s", "needs --chips N");
    if (analyze_cmd && (o.chips > 0 || o.output))
        return drv_bad_usage("einc analyze", "%s", "prices the program's own mesh: no --chips, no -o");
    if (!analyze_cmd && (o.pipe.stages || o.pipe.dcn))
        return drv_bad_usage("einc", "%s are for `einc analyze`", "--stages and --stage-link");
    if (analyze_cmd && !o.pipe.stages && (o.pipe.microbatches || o.pipe.schedule >= 0 || o.pipe.dcn || o.pipe.chunks))
        return drv_bad_usage("einc analyze", "%s", "--microbatches, --schedule, --chunks and --stage-link need --stages=Z");
    if (analyze_cmd && o.pipe.chunks && o.pipe.schedule >= 0 && o.pipe.schedule != PP_INTERLEAVED)
        return drv_bad_usage("einc analyze", "--chunks prices the interleaved schedule, and --schedule is %s",
                             pp_schedule_name((pp_schedule)o.pipe.schedule));
    if (o.json && !plan_cmd && !analyze_cmd)
        return drv_bad_usage("einc", "%s is for `einc plan` and `einc analyze`", "--json");

    pass_registry reg;
    pass_registry_init(&reg);
    for (int i = 0; i < o.nplugins; i++)
        if (pass_registry_load(&reg, o.plugins[i], stderr) != 0) {
            pass_registry_free(&reg);
            return 1;
        }
    pass_options popts = {0};
    /* Compiling a pipelined program, --microbatches and --schedule are the
     * pipeline pass's; einc analyze prices every M and schedule itself. */
    for (int i = 0; i < 3 && !analyze_cmd; i++)
        if (o.pipe_args[i] && o.npass_args < PASS_MAX_OPTIONS)
            o.pass_args[o.npass_args++] = o.pipe_args[i];
    for (int i = 0; i < o.npass_args; i++) {
        char why[256];
        int r = pass_options_add(&popts, &reg, o.pass_args[i] + 2, why, sizeof why);
        if (r != 0) {
            pass_registry_free(&reg);
            return r > 0 ? drv_bad_usage("einc", "unknown option '%s'", o.pass_args[i])
                         : drv_bad_usage("einc", "%s", why);
        }
    }
    if (o.list_passes) {
        printf("passes (default pipeline: %s):\n", PASS_DEFAULT_PIPELINE);
        pass_registry_list(&reg, stdout);
        pass_registry_free(&reg);
        return 0;
    }
    if (!o.input) {
        pass_registry_free(&reg);
        return drv_bad_usage("einc", "%s", "no input file");
    }

    /* -o must not replace an input (the source, a --hw file, a plugin) nor
     * anything but a regular file. */
    for (int k = 0; k < 2; k++)
        if ((o.companion[k] && (!o.output || o.emit != CG_EMIT_EXE)) ||
            (o.ncomp_defines[k] && !o.companion[k])) {
            pass_registry_free(&reg);
            char msg[160];
            if (o.companion[k])
                snprintf(msg, sizeof msg, "%s links a %s into an executable: give -o (without -c "
                         "or --emit-llvm)", comp_flag[k], k ? "prefill program" : "draft");
            else
                snprintf(msg, sizeof msg, "%s-define needs %s FILE.ein", comp_flag[k],
                         comp_flag[k]);
            return drv_bad_usage("einc", "%s", msg);
        }
    const char *inputs[4 + MAX_PLUGINS] = {o.input};
    int ninputs = 1;
    for (int k = 0; k < 2; k++)
        if (o.companion[k])
            inputs[ninputs++] = o.companion[k];
    if (o.hw)
        inputs[ninputs++] = o.hw;
    for (int i = 0; i < o.nplugins; i++)
        inputs[ninputs++] = o.plugins[i];
    if (o.output && drv_check_output("einc", o.output, inputs, ninputs)) {
        pass_registry_free(&reg);
        return 1;
    }

    pass_manager pm;
    memset(&pm, 0, sizeof pm);
    pm.registry = &reg;
    pm.print_after = o.print_after;
    pm.print_after_all = o.print_after_all;
    pm.print_json = o.dump_ir == 2;
    pm.dump = stdout;
    if (pass_manager_parse(&pm, o.pipeline ? o.pipeline : PASS_DEFAULT_PIPELINE, stderr) != 0) {
        pass_registry_free(&reg);
        return 2;
    }

    size_t len = 0;
    char *src = drv_read_source(o.input, "einc", &len);
    if (!src) {
        pass_registry_free(&reg);
        return 1;
    }
    diag_ctx diag;
    diag_init(&diag, o.input, src, len);
    diag.max_errors = o.max_errors;

    cost_hw hwbuf, *hw = &hwbuf;
    char err[512];
    /* One default for dumps and executables, so that --dump-ir shows the
     * program -o builds (MeshSlice's K depends on the profile): this
     * machine's, which an executable's --profile compares against. */
    const char *hw_name = o.hw ? o.hw : DRV_DEFAULT_HW;
    /* `host` is this machine: its cached calibration, else the committed
     * profile with a warning when that was measured elsewhere
     * (calibrate_load_host; docs/cost-model.md, "Which file host is"). */
    int loaded = strcmp(hw_name, DRV_DEFAULT_HW) == 0
                     ? calibrate_load_host(hw, stderr, err, sizeof err)
                     : cost_hw_load(hw_name, hw, err, sizeof err);
    if (loaded != 0) {
        fprintf(stderr, "einc: error: %s\n", err);
        free(src);
        pass_registry_free(&reg);
        return 1;
    }

    pass_ctx ctx = {.diag = &diag, .hw = hw, .log = o.debug_pass ? stderr : NULL, .options = &popts};
    if (o.analyze) {
        rc = analyze(&o, src, len, &pm, &ctx);
        diag_finish(&diag);
        free(src);
        pass_registry_free(&reg);
        return rc;
    }
    plan_table *table = NULL;
    fe_autoshard autoshard, *as = NULL;
    if (o.chips > 0) {
        table = malloc(sizeof *table);
        rc = table ? auto_shard(&o, src, len, &pm, &ctx, table, &autoshard, o.plan_only) : 1;
        as = rc == 0 ? &autoshard : NULL;
        if (as) { /* what the chosen row was compiled with, if the search chose it */
            const plan_row *c = &table->rows[table->chosen];
            o.remat = c->remat;
            if (c->pp && c->schedule && !pass_option_value(&ctx, "schedule"))
                add_option(&popts, "schedule", c->schedule);
            if (c->zero == 2)
                add_option(&popts, "zero", "2");
        }
        if (rc != 0 || o.plan_only) {
            diag_finish(&diag);
            free(table);
            free(src);
            pass_registry_free(&reg);
            return rc;
        }
    }
    ir_module *m = compile(&o, src, len, false, as, &pm, &ctx);
    rc = m ? 0 : 1;
    /* On a declared mesh, an executable's memory is a choice as `einc
     * plan` makes it (plan_declared.c): --zero=2, then --remat=layer. */
    if (m && o.output && !as) {
        plan_env env = {&o, src, len, &pm, &ctx, {0}, NULL, NULL, NULL};
        plan_declared fit;
        if (plan_fit_declared(&fit, m, hw, !o.remat_set, !pass_option_value(&ctx, "zero"), plan_compile,
                              plan_option, plan_define, &env)) {
            o.remat = fit.remat;
            if (fit.zero == 2)
                add_option(&popts, "zero", "2");
            /* The same program again: its warnings were said once. */
            FILE *said = diag.out, *quiet = fopen("/dev/null", "w");
            diag.out = quiet ? quiet : said;
            ir_module_free(m);
            m = compile(&o, src, len, false, NULL, &pm, &ctx);
            diag.out = said;
            if (quiet)
                fclose(quiet);
            rc = m ? 0 : 1;
            if (!m)
                fprintf(stderr, "einc: error: the program does not compile with the memory choice below\n");
        }
        plan_declared_print(stderr, &fit, hw->name);
    }
    /* A program that does not fit the profile's memory still compiles
     * (another profile, or a larger mesh, may fit it): a warning. */
    if (m)
        cost_warn_memory(stderr, m, hw);
    if (m && o.dump_ir == 1)
        ir_print(stdout, m);
    else if (m && o.dump_ir == 2)
        ir_print_json(stdout, m);
    if (m && o.dump_cost)
        cost_print_table(stdout, m, hw);
    if (m && o.explain)
        cost_explain(stdout, m, hw);

    if (m && o.output) {
        /* The --check reference: the same program on one device, compiled
         * through the same pipeline so it exercises the same code paths. */
        pass_manager ref_pm = pm;
        ref_pm.print_after = NULL;
        ref_pm.print_after_all = false;
        ir_module *ref = compile(&o, src, len, true, as, &ref_pm, &ctx);
        char *info = dump_text(m);
        cg_options co = {
            .output = o.output,
            .kind = o.emit,
            .opt_level = o.opt_level,
            .runtime = o.runtime,
            .runtime_dir = getenv("EINC_RUNTIME_DIR"),
            .source_name = o.input,
            .info = info,
            .hw_name = hw->name,
        };
        char comp_obj[2][4096] = {"", ""};
        const char *extra[2];
        co.extra_objs = extra;
        for (int k = 0; k < 2; k++) {
            if (o.companion[k] && rc == 0 &&
                build_companion(&o, k, m, &pm, &ctx, &co, comp_obj[k]) != 0)
                rc = 1;
            if (comp_obj[k][0])
                extra[co.nextra_objs++] = comp_obj[k];
        }
        if (rc == 0 && (!ref || cg_emit(m, ref, &co, &diag) != 0))
            rc = 1;
        for (int k = 0; k < 2; k++)
            if (comp_obj[k][0])
                unlink(comp_obj[k]);
        free(info);
        ir_module_free(ref);
    }
    /* Errors past --max-errors were only counted; say how many. */
    diag_finish(&diag);
    ir_module_free(m);
    free(table);
    free(src);
    pass_registry_free(&reg);
    return rc;
}
