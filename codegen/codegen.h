/*
 * codegen.h - IR to a native SPMD executable through the LLVM 19 C API.
 *
 * cg_emit lowers a propagated module to one LLVM function per program (the
 * same code runs on every device; see runtime/einrt.h for the ABI), runs the
 * O-level pipeline with LLVMRunPasses, and writes an object file, textual IR
 * (.ll) or a linked executable.  Elementwise ops become fused LLVM loops;
 * contractions call rt_einsum (BLAS GEMM); collectives call rt_collective.
 */
#ifndef EINC_CODEGEN_H
#define EINC_CODEGEN_H

#include <stdbool.h>

#include "diag.h"
#include "ir.h"

/* Which runtime library the executable links. */
typedef enum cg_runtime {
    CG_RUNTIME_THREADS, /* libeinrt: one thread per device (default) */
    CG_RUNTIME_MPI,     /* libeinrt_mpi: one MPI rank per device */
} cg_runtime;

/* What cg_emit writes. */
typedef enum cg_output_kind {
    CG_EMIT_EXE,  /* a linked executable */
    CG_EMIT_OBJ,  /* an object file (-c) */
    CG_EMIT_LLVM, /* textual LLVM IR (--emit-llvm) */
} cg_output_kind;

typedef struct cg_options {
    const char *output;       /* path to write */
    cg_output_kind kind;
    int opt_level;            /* 0..3 (-O0..-O3) */
    cg_runtime runtime;
    const char *runtime_dir;  /* where libeinrt*.a live; NULL = the build's default */
    const char *source_name;  /* the .ein path, embedded for --info */
    const char *info;         /* the --dump-ir text, embedded for --info; may be NULL */
    const char *hw_name;      /* profile the cost pass used, embedded for --profile; may be NULL */
    /* The exported rt_program's symbol; NULL: "einc_program", the one the
     * runtime's main() runs.  A companion program (a speculative-decoding
     * draft, docs/codegen.md "Companion programs") is emitted with -c as
     * "einc_program_draft", its reference and run functions named after it
     * and kept inside its object, so it links beside the main program. */
    const char *symbol;
    /* Objects linked into an executable besides the program's own (a
     * companion's, written with `symbol` set); at most 2, not owned. */
    const char *const *extra_objs;
    int nextra_objs;
} cg_options;

/* Emits `m` (propagated, verified) with `reference` (the same program
 * compiled for one device, or NULL) as its --check reference.  Errors
 * (LLVM verification, target lookup, the linker) are reported through `d`
 * with DIAG_NOLOC.  Returns 0 on success. */
int cg_emit(ir_module *m, ir_module *reference, const cg_options *opts, diag_ctx *d);

#endif
