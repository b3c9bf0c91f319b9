/* fe_test_util.c - see fe_test_util.h. */
#include "fe_test_util.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fe_run fe_test_compile(const char *src, size_t len, const fe_options *opts)
{
    fe_run r = {0};
    size_t size = 0;
    diag_ctx d;
    diag_init(&d, "t.ein", src, len);
    d.out = open_memstream(&r.diag, &size);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d.out);
    r.m = fe_compile(src, len, opts, &d);
    fclose(d.out);
    r.nerrors = d.nerrors;
    return r;
}

fe_run fe_test_compile_str(const char *src, const fe_options *opts)
{
    return fe_test_compile(src, strlen(src), opts);
}

void fe_run_free(fe_run *r)
{
    if (r->m)
        ir_module_free(r->m);
    free(r->diag);
    r->m = NULL;
    r->diag = NULL;
}

void fe_expect_diag(const char *src, const char *want, const char *file, int line)
{
    fe_run r = fe_test_compile_str(src, NULL);
    bool ok = r.m == NULL && r.nerrors > 0 && strcmp(r.diag, want) == 0;
    if (!ok)
        fprintf(stderr, "\n%s:%d: diagnostics differ\n--- want\n%s--- got\n%s---\n", file, line,
                want, r.diag);
    CU_assertImplementation(ok, (unsigned)line, "diagnostics as expected", file, "", CU_FALSE);
    fe_run_free(&r);
}

char *fe_test_print_ir(ir_module *m)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    ir_print(f, m);
    fclose(f);
    return text;
}
