/*
 * target.c - the native target machine (the first steps of c3c's
 * llvm_codegen_module.c order: init target, triple, target machine).
 */
#include <llvm-c/Core.h>
#include <llvm-c/Support.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <pthread.h>

#include "cg_internal.h"

/* Lets the loop vectoriser widen exp/log calls into glibc's libmvec
 * (_ZGVdN8v_expf, ...): without it every transcendental in an elementwise
 * loop is a scalar libm call and the loop is not vectorised.  The vector
 * library is an LLVM command-line option, i.e. process-wide state inside
 * LLVM, which may be parsed only once per process: hence pthread_once.
 * The executable links -lmvec (link.c). */
static void set_vector_library(void)
{
#if defined(__x86_64__)
    const char *argv[] = {"einc", "-vector-library=LIBMVEC-X86"};
    LLVMParseCommandLineOptions(2, argv, NULL);
#endif
}

LLVMTargetMachineRef cg_target_machine_new(int opt_level, diag_ctx *d)
{
    /* Idempotent inside LLVM; the executable runs where it was compiled. */
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, set_vector_library);
    if (LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter()) {
        diag_error(d, DIAG_NOLOC, "LLVM has no native target for this machine");
        return NULL;
    }
    char *triple = LLVMGetDefaultTargetTriple();
    LLVMTargetRef target = NULL;
    char *err = NULL;
    if (LLVMGetTargetFromTriple(triple, &target, &err)) {
        diag_error(d, DIAG_NOLOC, "no LLVM target for triple '%s': %s", triple,
                   err ? err : "unknown error");
        LLVMDisposeMessage(err);
        LLVMDisposeMessage(triple);
        return NULL;
    }
    static const LLVMCodeGenOptLevel levels[4] = {
        LLVMCodeGenLevelNone, LLVMCodeGenLevelLess, LLVMCodeGenLevelDefault,
        LLVMCodeGenLevelAggressive,
    };
    if (opt_level < 0)
        opt_level = 0;
    if (opt_level > 3)
        opt_level = 3;
    char *cpu = LLVMGetHostCPUName();
    char *features = LLVMGetHostCPUFeatures();
    /* PIC: cc links position-independent executables by default. */
    LLVMTargetMachineRef tm = LLVMCreateTargetMachine(
        target, triple, cpu, features, levels[opt_level], LLVMRelocPIC, LLVMCodeModelDefault);
    if (!tm)
        diag_error(d, DIAG_NOLOC, "cannot create an LLVM target machine for '%s' (cpu %s)",
                   triple, cpu);
    LLVMDisposeMessage(cpu);
    LLVMDisposeMessage(features);
    LLVMDisposeMessage(triple);
    return tm;
}
