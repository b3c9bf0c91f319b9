/*
 * emit.c - cg_emit: the codegen pipeline, in c3c's llvm_codegen_module.c
 * order: native target and asm printer, default triple, target machine for
 * the host CPU and features, module data layout, build (runtime
 * declarations, run functions, rt_program globals), LLVMVerifyModule,
 * LLVMRunPasses("default<On>"), then LLVMTargetMachineEmitToFile (object) or
 * LLVMPrintModuleToFile (--emit-llvm), then link with cc (link.c).
 */
#include <llvm-c/Analysis.h>
#include <llvm-c/Transforms/PassBuilder.h>
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

/* Runs the optimisation pipeline; returns 0 or reports. */
static int optimise(cg_ctx *c, LLVMTargetMachineRef tm, int level)
{
    char passes[32];
    snprintf(passes, sizeof passes, "default<O%d>", level);
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(po, level >= 2);
    LLVMPassBuilderOptionsSetSLPVectorization(po, level >= 2);
    LLVMErrorRef err = LLVMRunPasses(c->mod, passes, tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (err) {
        char *msg = LLVMGetErrorMessage(err);
        diag_error(c->d, DIAG_NOLOC, "LLVM pass pipeline '%s' failed: %s", passes, msg);
        LLVMDisposeErrorMessage(msg);
        return -1;
    }
    return 0;
}

/* Writes the object or the .ll to `path`; returns 0 or reports. */
static int write_output(cg_ctx *c, LLVMTargetMachineRef tm, const char *path, bool llvm_ir)
{
    char *err = NULL;
    LLVMBool failed = llvm_ir ? LLVMPrintModuleToFile(c->mod, path, &err)
                              : LLVMTargetMachineEmitToFile(tm, c->mod, path, LLVMObjectFile,
                                                            &err);
    if (failed) {
        diag_error(c->d, DIAG_NOLOC, "cannot write '%s': %s", path, err ? err : "unknown error");
        LLVMDisposeMessage(err);
        return -1;
    }
    LLVMDisposeMessage(err);
    return 0;
}

/* Object, then link, then remove the temporary object. */
static int write_executable(cg_ctx *c, LLVMTargetMachineRef tm, const cg_options *opts)
{
    char obj[4096];
    snprintf(obj, sizeof obj, "%s.einc-XXXXXX.o", opts->output);
    int fd = mkstemps(obj, 2);
    if (fd < 0) {
        /* The output's folder may be read-only for temporaries; try /tmp. */
        snprintf(obj, sizeof obj, "/tmp/einc-XXXXXX.o");
        fd = mkstemps(obj, 2);
    }
    if (fd < 0) {
        diag_error(c->d, DIAG_NOLOC, "cannot create a temporary object file for '%s'",
                   opts->output);
        return -1;
    }
    close(fd);
    int rc = write_output(c, tm, obj, false);
    if (rc == 0)
        rc = cg_link(obj, opts, c->d);
    unlink(obj);
    return rc;
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
    LLVMTargetMachineRef tm = cg_target_machine_new(opts->opt_level, d);
    if (!tm)
        return -1;

    cg_ctx c = {.d = d};
    c.llctx = LLVMContextCreate();
    c.mod = LLVMModuleCreateWithNameInContext(m->filename ? m->filename : "einc", c.llctx);
    char *triple = LLVMGetTargetMachineTriple(tm);
    LLVMSetTarget(c.mod, triple);
    LLVMDisposeMessage(triple);
    c.td = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(c.mod, c.td);
    c.b = LLVMCreateBuilderInContext(c.llctx);
    cg_types_init(&c.t, c.llctx);
    declare_runtime(&c);

    int rc = -1;
    int before = d->nerrors;
    LLVMValueRef ref = NULL;
    if (reference)
        ref = build_program(&c, reference, NULL, "einc_run_reference", "einc_program_reference",
                            false, opts);
    if (!reference || ref) {
        if (build_program(&c, m, ref, "einc_run", "einc_program", true, opts) &&
            d->nerrors == before) {
            char *msg = NULL;
            if (LLVMVerifyModule(c.mod, LLVMReturnStatusAction, &msg)) {
                diag_error(d, DIAG_NOLOC, "internal error: LLVM module does not verify:\n%s", msg);
            } else if (optimise(&c, tm, opts->opt_level) == 0) {
                if (opts->kind == CG_EMIT_EXE)
                    rc = write_executable(&c, tm, opts);
                else
                    rc = write_output(&c, tm, opts->output, opts->kind == CG_EMIT_LLVM);
            }
            LLVMDisposeMessage(msg);
        }
    }
    LLVMDisposeBuilder(c.b);
    LLVMDisposeModule(c.mod);
    LLVMDisposeTargetData(c.td);
    LLVMContextDispose(c.llctx);
    LLVMDisposeTargetMachine(tm);
    return rc;
}
