/*
 * fuzz_frontend.c - the frontend on any bytes: text in, diagnostics or
 * verified IR out.
 *
 * For every input, fe_compile must either return a module and report no
 * error, or return NULL and report at least one; a module must print (text
 * and JSON), and the same source must also compile as the single-device
 * reference (what `einc -o` builds next to it), which must pass ir_verify.
 * (The sharded module is verified after propagation, in fuzz_compile: the
 * frontend leaves intermediates replicated over sharded operands for the
 * propagate pass, so before it an op need not be locally computable.)  The
 * diagnostics must account for every error: at most max_errors printed,
 * the rest counted in "... and N more errors".  Inputs may carry -D
 * overrides in leading `#@ -D NAME=VALUE` lines (fuzz_ein.h).
 */
#include <stdbool.h>

#include "fuzz_ein.h"

/* A small limit, so inputs with many errors reach the summary line. */
#define MAX_ERRORS 5

/* Counts the lines of `text` that start with "fuzz.ein:" and hold ": error: ". */
static int printed_errors(const char *text)
{
    int n = 0;
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (strncmp(p, "fuzz.ein", 8) == 0) {
            const char *e = strstr(p, ": error: ");
            if (e && e < p + len)
                n++;
        }
        p = nl ? nl + 1 : NULL;
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_options o;
    fuzz_read_options(data, size, &o);
    fuzz_diag fd;
    fuzz_diag_open(&fd, data, size);
    fd.d.max_errors = MAX_ERRORS;
    ir_module *m = fe_compile((const char *)data, size, &o.fe, &fd.d);
    int nerrors = fd.d.nerrors;
    if (m) {
        ir_print(fd.d.out, m);
        ir_print_json(fd.d.out, m);
    }
    fuzz_diag_close(&fd);
    FUZZ_CHECK((m != NULL) == (nerrors == 0), "module %p with %d errors:\n%s", (void *)m, nerrors,
               fd.text);
    if (!m) {
        int shown = printed_errors(fd.text);
        int want = nerrors < MAX_ERRORS ? nerrors : MAX_ERRORS;
        FUZZ_CHECK(shown == want, "%d errors counted, %d printed (want %d):\n%s", nerrors, shown,
                   want, fd.text);
        if (nerrors > MAX_ERRORS) {
            char more[64];
            snprintf(more, sizeof more, "fuzz.ein: ... and %d more error", nerrors - MAX_ERRORS);
            FUZZ_CHECK(strstr(fd.text, more) != NULL, "no '%s' line:\n%s", more, fd.text);
        }
    }
    fuzz_diag_free(&fd);

    if (m) {
        /* The unsharded reference that `einc -o` compiles too. */
        fuzz_options ref = o;
        ref.fe.defines = ref.defines;
        for (int k = 0; k < ref.fe.ndefines; k++)
            ref.defines[k].name = ref.names[k];
        ref.fe.single_device = true;
        fuzz_diag_open(&fd, data, size);
        ir_module *r = fe_compile((const char *)data, size, &ref.fe, &fd.d);
        bool verified = r && ir_verify(r, &fd.d) == 0;
        fuzz_diag_close(&fd);
        FUZZ_CHECK(r != NULL, "compiles sharded but not as the single-device reference:\n%s",
                   fd.text);
        FUZZ_CHECK(verified, "the reference does not verify:\n%s", fd.text);
        fuzz_diag_free(&fd);
        ir_module_free(r);
        ir_module_free(m);
    }
    return 0;
}
