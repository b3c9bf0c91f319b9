/*
 * cg_build_case - builds one hand-built case of cg_cases.h into an
 * executable (or .ll / object) with cg_emit, for e2e.py.
 *
 *   cg_build_case CASE OUTPUT [-O0..-O3] [--emit-llvm | -c] [--mpi]
 *                 [--runtime-dir DIR] [--no-reference]
 *
 * Both modules are run through ir_verify first, so a case that is not a
 * valid propagated module fails here rather than in the executable.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_cases.h"
#include "codegen.h"

static int verify(ir_module *m, diag_ctx *d)
{
    if (ir_verify(m, d) == 0)
        return 0;
    fprintf(stderr, "cg_build_case: module '%s' does not verify\n", m->filename);
    ir_print(stderr, m);
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: cg_build_case CASE OUTPUT [-O0..3] [--emit-llvm|-c] [--mpi] "
                        "[--runtime-dir DIR] [--no-reference]\n");
        return 2;
    }
    cg_options o = {.output = argv[2], .kind = CG_EMIT_EXE, .opt_level = 2,
                    .runtime = CG_RUNTIME_THREADS, .source_name = argv[1]};
    bool with_ref = true;
    for (int i = 3; i < argc; i++) {
        if (strncmp(argv[i], "-O", 2) == 0)
            o.opt_level = atoi(argv[i] + 2);
        else if (strcmp(argv[i], "--emit-llvm") == 0)
            o.kind = CG_EMIT_LLVM;
        else if (strcmp(argv[i], "-c") == 0)
            o.kind = CG_EMIT_OBJ;
        else if (strcmp(argv[i], "--mpi") == 0)
            o.runtime = CG_RUNTIME_MPI;
        else if (strcmp(argv[i], "--runtime-dir") == 0 && i + 1 < argc)
            o.runtime_dir = argv[++i];
        else if (strcmp(argv[i], "--no-reference") == 0)
            with_ref = false;
        else {
            fprintf(stderr, "cg_build_case: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    ir_module *m = cg_case_build(argv[1], false);
    ir_module *ref = with_ref ? cg_case_build(argv[1], true) : NULL;
    if (!m) {
        fprintf(stderr, "cg_build_case: no case '%s'\n", argv[1]);
        return 2;
    }
    diag_ctx d;
    diag_init(&d, argv[1], "", 0);
    int rc = 1;
    char *info = NULL;
    size_t info_len = 0;
    FILE *f = open_memstream(&info, &info_len);
    if (f) {
        ir_print(f, m);
        fclose(f);
    }
    o.info = info;
    if (verify(m, &d) == 0 && (!ref || verify(ref, &d) == 0))
        rc = cg_emit(m, ref, &o, &d) == 0 ? 0 : 1;
    free(info);
    ir_module_free(m);
    if (ref)
        ir_module_free(ref);
    return rc;
}
