/*
 * emit.c - cg_emit: the codegen pipeline, in c3c's llvm_codegen_module.c
 * order: native target and asm printer, default triple, target machine for
 * the host CPU and features, module data layout, build (runtime
 * declarations, run functions, rt_program globals), LLVMVerifyModule,
 * LLVMRunPasses("default<On>"), then LLVMTargetMachineEmitToFile (object) or
 * LLVMPrintModuleToFile (--emit-llvm), then link with cc (link.c).
 *
 * The sharded program and the unsharded reference that --check runs are
 * two modules, each with a target machine of its own: the sharded one at
 * the -O level asked for, the reference at CG_REFERENCE_OPT and
 * CG_REFERENCE_CODEGEN_OPT at most (it only checks; cg_internal.h).  For
 * an executable each module also has an LLVM context of its own, and a
 * second thread optimises the reference and writes its object while this
 * one compiles the sharded program: contexts share nothing, so the two
 * run in parallel, and the linker joins the two objects.  For -c and
 * --emit-llvm, which write one file, the reference is built in the
 * sharded program's context, optimised alone and linked into its module
 * (LLVMLinkModules2) before the one emission, whose back end is the
 * sharded program's.
 */
#include <llvm-c/Analysis.h>
#include <llvm-c/Linker.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cg_internal.h"

static void declare_runtime(cg_ctx *c)
{
    cg_types *t = &c->t;
    cg_runtime_fns *r = &c->rt;
    LLVMTypeRef alloc_args[] = {t->ptr, t->i64};
    r->alloc_ty = LLVMFunctionType(t->ptr, alloc_args, 2, 0);
    r->alloc = LLVMAddFunction(c->mod, "rt_alloc", r->alloc_ty);
    LLVMTypeRef free_args[] = {t->ptr, t->ptr};
    r->free_ty = LLVMFunctionType(t->voidt, free_args, 2, 0);
    r->free = LLVMAddFunction(c->mod, "rt_free", r->free_ty);
    LLVMTypeRef coll_args[] = {t->ptr, t->ptr, t->ptr, t->ptr};
    r->coll_ty = LLVMFunctionType(t->voidt, coll_args, 4, 0);
    r->coll = LLVMAddFunction(c->mod, "rt_collective", r->coll_ty);
    LLVMTypeRef einsum_args[] = {t->ptr, t->ptr, t->ptr, t->ptr, t->ptr};
    r->einsum_ty = LLVMFunctionType(t->voidt, einsum_args, 5, 0);
    r->einsum = LLVMAddFunction(c->mod, "rt_einsum", r->einsum_ty);
    LLVMTypeRef bounded_args[] = {t->ptr, t->ptr, t->ptr, t->ptr, t->ptr, t->ptr, t->i32, t->i32};
    r->einsum_bounded_ty = LLVMFunctionType(t->voidt, bounded_args, 8, 0);
    r->einsum_bounded = LLVMAddFunction(c->mod, "rt_einsum_bounded", r->einsum_bounded_ty);
    LLVMTypeRef mark_args[] = {t->ptr, t->i32};
    r->mark_ty = LLVMFunctionType(t->voidt, mark_args, 2, 0);
    r->op_begin = LLVMAddFunction(c->mod, "rt_op_begin", r->mark_ty);
    r->op_end = LLVMAddFunction(c->mod, "rt_op_end", r->mark_ty);
    LLVMTypeRef coord_args[] = {t->ptr, t->i32};
    r->coord_ty = LLVMFunctionType(t->i64, coord_args, 2, 0);
    r->coord = LLVMAddFunction(c->mod, "rt_coord", r->coord_ty);
}

/* Builds run function and rt_program for `m`; returns the program global
 * or NULL after reporting. */
static LLVMValueRef build_program(cg_ctx *c, ir_module *m, LLVMValueRef reference,
                                  const char *run_name, const char *prog_name, bool exported,
                                  const cg_options *opts)
{
    cg_plan plan;
    if (cg_plan_build(&plan, m, c->d) != 0) {
        cg_plan_free(&plan);
        return NULL;
    }
    LLVMValueRef run = cg_emit_run(c, m, &plan, run_name);
    LLVMValueRef prog = cg_emit_program(c, m, &plan, run, reference, prog_name, exported, opts);
    cg_plan_free(&plan);
    return prog;
}

/* Checks what the ABI arrays can hold, so a big module fails clearly. */
static int check_limits(const ir_module *m, diag_ctx *d)
{
    if (m->mesh.naxes > IR_MAX_AXES) {
        diag_error(d, DIAG_NOLOC, "codegen: mesh has %d axes, at most %d", m->mesh.naxes,
                   IR_MAX_AXES);
        return -1;
    }
    for (int v = 0; v < m->nvalues; v++) {
        const ir_value *val = m->values[v];
        if (val->type.rank < 0 || val->type.rank > IR_MAX_RANK) {
            diag_error(d, val->loc, "codegen: value '%s' has rank %d (at most %d)", val->tensor,
                       val->type.rank, IR_MAX_RANK);
            return -1;
        }
        /* Loops are bottom-tested and blocks equal-sized: every dim must
         * split evenly into non-empty blocks. */
        for (int j = 0; j < val->type.rank; j++) {
            int64_t parts = ir_sharding_dim_parts(&val->type.sh, &m->mesh, j);
            int64_t global = m->dims[val->type.dims[j]].size;
            if (parts < 1 || global < parts || global % parts != 0) {
                diag_error(d, val->loc, "codegen: dim '%s' of '%s' (size %lld) does not split "
                                        "into %lld equal blocks", m->dims[val->type.dims[j]].name,
                           val->tensor, (long long)global, (long long)parts);
                return -1;
            }
        }
    }
    /* The runtime assembles outputs from blocks; a partial sum has no block
     * layout to assemble, so it must be reduced before it is an output. */
    for (int j = 0; j < m->noutputs; j++)
        if (m->outputs[j].value->type.sh.unreduced) {
            char buf[256];
            diag_error(d, m->outputs[j].loc,
                       "codegen: output '%s' holds unreduced partial sums (%s); reduce it with "
                       "an AllReduce or ReduceScatter first", m->outputs[j].name,
                       ir_type_str(m, m->outputs[j].name, &m->outputs[j].value->type, buf,
                                   sizeof buf));
            return -1;
        }
    return 0;
}

/* A malloc'd message, for what a failure on the reference's thread says
 * once it is joined (diag_ctx is not shared between threads). */
static char *errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *errorf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = cg_calloc(n < 0 ? 1 : (size_t)n + 1, 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* One program's module and the target machine that compiles it. */
typedef struct unit {
    cg_ctx c;                /* context, module, builder, types, runtime declarations */
    LLVMTargetMachineRef tm; /* the host machine, its back end at a level of its own (owned) */
    int level;               /* -O level of the passes, 0..3 */
    bool own_ctx;            /* c.llctx is this unit's (else the sharded unit's) */
} unit;

/* Sets up `u` for a module named `name`, its passes at `level` and its
 * back end at `codegen_level`: in a new context, or, with `share`, in
 * share's context.  Returns 0, or -1 after reporting; unit_free either
 * way. */
static int unit_init(unit *u, const char *name, const unit *share, int level, int codegen_level,
                     diag_ctx *d)
{
    *u = (unit){.c = {.d = d}, .level = level, .own_ctx = !share};
    u->tm = cg_target_machine_new(codegen_level, d);
    if (!u->tm)
        return -1;
    u->c.llctx = share ? share->c.llctx : LLVMContextCreate();
    u->c.mod = LLVMModuleCreateWithNameInContext(name, u->c.llctx);
    char *triple = LLVMGetTargetMachineTriple(u->tm);
    LLVMSetTarget(u->c.mod, triple);
    LLVMDisposeMessage(triple);
    u->c.td = LLVMCreateTargetDataLayout(u->tm);
    LLVMSetModuleDataLayout(u->c.mod, u->c.td);
    u->c.b = LLVMCreateBuilderInContext(u->c.llctx);
    /* In a shared context the reference's struct types are new ones
     * (%rt_program.0, ...): LLVMLinkModules2 maps them onto the sharded
     * module's and drops their names, which would unname the sharded
     * module's own types if the two modules used the same ones. */
    cg_types_init(&u->c.t, u->c.llctx);
    declare_runtime(&u->c);
    return 0;
}

/* Frees what `u` owns; a unit sharing a context goes before its owner. */
static void unit_free(unit *u)
{
    if (u->c.b)
        LLVMDisposeBuilder(u->c.b);
    if (u->c.mod)
        LLVMDisposeModule(u->c.mod);
    if (u->c.td)
        LLVMDisposeTargetData(u->c.td);
    if (u->own_ctx && u->c.llctx)
        LLVMContextDispose(u->c.llctx);
    if (u->tm)
        LLVMDisposeTargetMachine(u->tm);
    *u = (unit){0};
}

/* Verifies the unit's module; 0, or -1 after reporting (an internal error). */
static int verify(unit *u)
{
    char *msg = NULL;
    int rc = 0;
    if (LLVMVerifyModule(u->c.mod, LLVMReturnStatusAction, &msg)) {
        diag_error(u->c.d, DIAG_NOLOC, "internal error: LLVM module does not verify:\n%s", msg);
        rc = -1;
    }
    LLVMDisposeMessage(msg);
    return rc;
}

/* Runs the unit's optimisation pipeline; NULL, or a malloc'd message. */
static char *optimise(unit *u)
{
    char passes[32];
    snprintf(passes, sizeof passes, "default<O%d>", u->level);
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(po, u->level >= 2);
    LLVMPassBuilderOptionsSetSLPVectorization(po, u->level >= 2);
    LLVMErrorRef err = LLVMRunPasses(u->c.mod, passes, u->tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (!err)
        return NULL;
    char *msg = LLVMGetErrorMessage(err);
    char *s = errorf("LLVM pass pipeline '%s' failed: %s", passes, msg);
    LLVMDisposeErrorMessage(msg);
    return s;
}

/* Writes the unit's object or .ll to `path`; NULL, or a malloc'd message. */
static char *write_output(unit *u, const char *path, bool llvm_ir)
{
    char *err = NULL;
    LLVMBool failed = llvm_ir ? LLVMPrintModuleToFile(u->c.mod, path, &err)
                              : LLVMTargetMachineEmitToFile(u->tm, u->c.mod, path,
                                                            LLVMObjectFile, &err);
    char *s = failed ? errorf("cannot write '%s': %s", path, err ? err : "unknown error") : NULL;
    LLVMDisposeMessage(err);
    return s;
}

/* Reports `msg` (from optimise or write_output) if any and frees it;
 * returns 0 for none, -1 otherwise. */
static int report(diag_ctx *d, char *msg)
{
    if (!msg)
        return 0;
    diag_error(d, DIAG_NOLOC, "%s", msg);
    free(msg);
    return -1;
}

/* The reference's half of an executable, run by the second thread. */
typedef struct ref_job {
    unit *u;         /* the reference's unit, in a context of its own */
    const char *obj; /* where its object goes */
    char *error;     /* malloc'd message of the failure, or NULL */
} ref_job;

static void *compile_reference(void *arg)
{
    ref_job *j = arg;
    j->error = optimise(j->u);
    if (!j->error)
        j->error = write_output(j->u, j->obj, false);
    return NULL;
}

/* Creates an empty temporary object file next to `output` (or in /tmp);
 * its name goes to obj[4096].  0, or -1 after reporting. */
static int temp_object(char *obj, const char *output, diag_ctx *d)
{
    snprintf(obj, 4096, "%s.einc-XXXXXX.o", output);
    int fd = mkstemps(obj, 2);
    if (fd < 0) {
        /* The output's folder may be read-only for temporaries; try /tmp. */
        snprintf(obj, 4096, "/tmp/einc-XXXXXX.o");
        fd = mkstemps(obj, 2);
    }
    if (fd < 0) {
        diag_error(d, DIAG_NOLOC, "cannot create a temporary object file for '%s'", output);
        return -1;
    }
    close(fd);
    return 0;
}

/* An executable: the sharded program's object on this thread, the
 * reference's (if `ref`) on a second one, then the link; the temporary
 * objects are removed. */
static int write_executable(unit *prog, unit *ref, const cg_options *opts)
{
    diag_ctx *d = prog->c.d;
    char obj[2][4096];
    int nobj = ref ? 2 : 1;
    for (int i = 0; i < nobj; i++)
        if (temp_object(obj[i], opts->output, d) != 0) {
            if (i)
                unlink(obj[0]);
            return -1;
        }
    ref_job job = {.u = ref, .obj = obj[1]};
    pthread_t thread;
    bool threaded = ref && pthread_create(&thread, NULL, compile_reference, &job) == 0;
    if (ref && !threaded)
        compile_reference(&job); /* no second thread: one after the other */
    char *err = optimise(prog);
    if (!err)
        err = write_output(prog, obj[0], false);
    if (threaded)
        pthread_join(thread, NULL);
    int rc = report(d, err) | report(d, job.error);
    if (rc == 0) {
        const char *objs[4] = {obj[0], obj[1]};
        int n = nobj;
        for (int i = 0; i < opts->nextra_objs && i < 2; i++)
            objs[n++] = opts->extra_objs[i];
        rc = cg_link(objs, n, opts, d);
    }
    for (int i = 0; i < nobj; i++)
        unlink(obj[i]);
    return rc;
}

/* The exported rt_program's name (cg_options.symbol). */
static const char *program_symbol(const cg_options *opts)
{
    return opts->symbol ? opts->symbol : "einc_program";
}

/* One object or .ll: the reference (if `ref`, sharing prog's context) is
 * optimised at its own level, then moved into prog's module, whose
 * passes have already run, and the module is written once. */
static int write_one_file(unit *prog, unit *ref, const cg_options *opts)
{
    char *err = optimise(prog);
    if (!err && ref)
        err = optimise(ref);
    if (!err && ref) {
        /* LLVMLinkModules2 destroys the module it moves from. */
        LLVMModuleRef from = ref->c.mod;
        ref->c.mod = NULL;
        if (LLVMLinkModules2(prog->c.mod, from))
            err = errorf("internal error: cannot link the reference program's module");
        /* Only the sharded program's rt_program names it. */
        char ref_name[128];
        snprintf(ref_name, sizeof ref_name, "%s_reference", program_symbol(opts));
        LLVMValueRef g = LLVMGetNamedGlobal(prog->c.mod, ref_name);
        if (!err && g) {
            LLVMSetVisibility(g, LLVMDefaultVisibility);
            LLVMSetLinkage(g, LLVMPrivateLinkage);
        }
    }
    if (!err)
        err = write_output(prog, opts->output, opts->kind == CG_EMIT_LLVM);
    return report(prog->c.d, err);
}

/* Builds both programs: the reference's rt_program in its own unit, with
 * hidden visibility (it leaves its module, but not the executable), and
 * the sharded one, which points at it through a declaration.  0, or -1
 * after reporting. */
static int build(unit *prog, unit *ref, ir_module *m, ir_module *reference,
                 const cg_options *opts)
{
    diag_ctx *d = prog->c.d;
    int before = d->nerrors;
    LLVMValueRef decl = NULL;
    const char *sym = program_symbol(opts);
    char ref_name[128], run_name[128], ref_run[128];
    snprintf(ref_name, sizeof ref_name, "%s_reference", sym);
    /* The main program keeps its names (einc_run, docs/codegen.md). */
    snprintf(run_name, sizeof run_name, "%s_run", opts->symbol ? sym : "einc");
    snprintf(ref_run, sizeof ref_run, "%s_run_reference", opts->symbol ? sym : "einc");
    if (ref) {
        LLVMValueRef g = build_program(&ref->c, reference, NULL, ref_run, ref_name, false, opts);
        if (!g)
            return -1;
        LLVMSetLinkage(g, LLVMExternalLinkage);
        LLVMSetVisibility(g, LLVMHiddenVisibility);
        decl = LLVMAddGlobal(prog->c.mod, prog->c.t.program, ref_name);
        LLVMSetGlobalConstant(decl, 1);
        LLVMSetVisibility(decl, LLVMHiddenVisibility);
    }
    if (!build_program(&prog->c, m, decl, run_name, sym, true, opts) ||
        d->nerrors != before)
        return -1;
    if (verify(prog) != 0 || (ref && verify(ref) != 0))
        return -1;
    return 0;
}

int cg_emit(ir_module *m, ir_module *reference, const cg_options *opts, diag_ctx *d)
{
    if (!m || !opts || !opts->output) {
        diag_error(d, DIAG_NOLOC, "codegen: no module or no output path");
        return -1;
    }
    if (opts->opt_level < 0 || opts->opt_level > 3) {
        diag_error(d, DIAG_NOLOC, "codegen: optimisation level %d is not 0..3", opts->opt_level);
        return -1;
    }
    if (check_limits(m, d) || (reference && check_limits(reference, d)))
        return -1;
    bool exe = opts->kind == CG_EMIT_EXE;
    const char *name = m->filename ? m->filename : "einc";
    int level = opts->opt_level;
    int ref_level = level < CG_REFERENCE_OPT ? level : CG_REFERENCE_OPT;
    int ref_codegen = level < CG_REFERENCE_CODEGEN_OPT ? level : CG_REFERENCE_CODEGEN_OPT;
    unit prog = {0}, ref = {0};
    int rc = unit_init(&prog, name, NULL, level, level, d);
    if (rc == 0 && reference)
        rc = unit_init(&ref, name, exe ? NULL : &prog, ref_level, ref_codegen, d);
    unit *refp = reference ? &ref : NULL;
    if (rc == 0)
        rc = build(&prog, refp, m, reference, opts);
    if (rc == 0)
        rc = exe ? write_executable(&prog, refp, opts) : write_one_file(&prog, refp, opts);
    unit_free(&ref);
    unit_free(&prog);
    return rc;
}
