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

/* LLVM command-line options, i.e. process-wide state inside LLVM, which
 * may be parsed only once per process: hence pthread_once.
 *
 * -vector-library=LIBMVEC-X86 lets the loop vectoriser widen exp/log calls
 * into glibc's libmvec (_ZGVdN8v_expf, ...): without it every
 * transcendental in an elementwise loop is a scalar libm call and the loop
 * is not vectorised.  The executable links -lmvec (link.c).
 *
 * -unroll-allow-partial=0: the vectoriser already interleaves each
 * elementwise loop (16 lanes x 4 on AVX-512, 64 elements per iteration);
 * the x86 default then unrolled those vector loops 4-16 times more, which
 * doubled the code that loop strength reduction and instruction selection
 * go through (half of LLVM's time on llama2_13b.ein) for loops that stream
 * memory and run no faster unrolled (docs/performance.md, section 4).
 * Loops with small constant trip counts are still unrolled completely. */
static void set_llvm_options(void)
{
#if defined(__x86_64__)
    const char *argv[] = {"einc", "-unroll-allow-partial=0", "-vector-library=LIBMVEC-X86"};
#else
    const char *argv[] = {"einc", "-unroll-allow-partial=0"};
#endif
    LLVMParseCommandLineOptions((int)(sizeof argv / sizeof *argv), argv, NULL);
}

LLVMTargetMachineRef cg_target_machine_new(int opt_level, diag_ctx *d)
{
    /* Idempotent inside LLVM; the executable runs where it was compiled. */
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, set_llvm_options);
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
