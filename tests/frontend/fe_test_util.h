/* fe_test_util.h - compile .ein text in memory and capture diagnostics. */
#ifndef EINC_FE_TEST_UTIL_H
#define EINC_FE_TEST_UTIL_H

#include <stddef.h>

#include "frontend.h"

/* Result of one compilation. */
typedef struct fe_run {
    ir_module *m;  /* the module, NULL on error */
    char *diag;    /* everything printed to diag_ctx.out (malloc'd, NUL-terminated) */
    int nerrors;   /* errors counted */
} fe_run;

/* Compiles `len` bytes of `src` as file "t.ein" (opts may be NULL). */
fe_run fe_test_compile(const char *src, size_t len, const fe_options *opts);
/* Same for a NUL-terminated string. */
fe_run fe_test_compile_str(const char *src, const fe_options *opts);
/* Frees the module and the text. */
void fe_run_free(fe_run *r);

/* Asserts (CUnit) that compiling `src` fails with diagnostics exactly `want`. */
#define EXPECT_DIAG(src, want) fe_expect_diag((src), (want), __FILE__, __LINE__)
void fe_expect_diag(const char *src, const char *want, const char *file, int line);
/* The --dump-ir text of `m` (the caller frees it). */
char *fe_test_print_ir(ir_module *m);

#endif
