/*
 * test_robust.c - no input crashes, hangs or half-succeeds: random bytes,
 * random token soup, and every prefix of valid programs.  Run under
 * ASan+UBSan (-DEINC_SANITIZE=ON) this also checks memory safety and that
 * error recovery frees what it discards.  Counts are bounded to keep the
 * test well under a second.
 */
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "fe_test_util.h"

static const char valid[] =
    "# comment\n"
    "mesh X = 2, Y = 2\n"
    "dim B = 8, D = 4, F = 16\n"
    "input In[B_X, D_Y] : f32\n"
    "param Win[D_X, F_Y] : f32\n"
    "param Wout[F_Y, D_X] : f32\n"
    "Tmp[B, F] = In[B, D] * Win[D, F]\n"
    "Act[B, F] = gelu(Tmp[B, F]) * 0.5 - (Tmp[B, F])\n"
    "Out[B_X, D_Y] = Act[B, F] * Wout[F, D]\n"
    "Part[B_X, D]{U_Y} = -2 * Act[B, F] * Wout[F, D] * (In[B, D] + 1)\n"
    "output Out[B, D]\n"
    "output Part\n";

/* xorshift64*: deterministic pseudo-random numbers (no global state). */
static uint64_t next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* The result must be consistent: a module iff no error was counted. */
static void run(const char *src, size_t len)
{
    fe_run r = fe_test_compile(src, len, NULL);
    CU_ASSERT((r.m != NULL) == (r.nerrors == 0));
    if (r.m)
        CU_ASSERT(r.m->noutputs > 0);
    fe_run_free(&r);
}

static void test_valid_program(void)
{
    fe_run r = fe_test_compile_str(valid, NULL);
    CU_ASSERT_PTR_NOT_NULL(r.m);
    if (!r.m)
        fprintf(stderr, "%s", r.diag);
    fe_run_free(&r);
}

static void test_prefixes(void)
{
    size_t n = strlen(valid);
    for (size_t len = 0; len <= n; len++)
        run(valid, len);
}

static void test_random_bytes(void)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    char buf[256];
    for (int i = 0; i < 500; i++) {
        size_t len = next(&s) % sizeof buf;
        for (size_t k = 0; k < len; k++)
            buf[k] = (char)(next(&s) & 0xFF);
        run(buf, len);
    }
}

/* Random sequences of the language's own tokens reach deep into the parser
 * and checker, unlike random bytes. */
static void test_token_soup(void)
{
    static const char *tok[] = {
        "mesh", "dim", "input", "param", "output", "X", "Y", "B", "D", "F", "In", "Win",
        "Tmp", "B_X", "D_Y", "F_XY", "U_X", "U_Z", "Q", "gelu", "exp", "f32", "bf16", "=",
        "[", "]", "{", "}", "(", ")", ",", ":", "+", "-", "*", "2", "0.5", "0", "-1",
        "\n", "\n", "\n", "#c\n", "99999999999999999999", "1e999",
    };
    uint64_t s = 42;
    char buf[1024];
    for (int i = 0; i < 1500; i++) {
        size_t len = 0;
        int ntok = (int)(next(&s) % 60);
        /* Start from a valid header half of the time. */
        if (next(&s) & 1) {
            len = (size_t)snprintf(buf, sizeof buf, "mesh X = 2, Y = 2\ndim B = 8, D = 4, F = 16\n"
                                                    "input In[B_X, D] : f32\n");
        }
        for (int k = 0; k < ntok; k++) {
            const char *t = tok[next(&s) % (sizeof tok / sizeof tok[0])];
            size_t tl = strlen(t);
            if (len + tl + 2 >= sizeof buf)
                break;
            memcpy(buf + len, t, tl);
            len += tl;
            buf[len++] = ' ';
        }
        run(buf, len);
    }
}

/* Mutations of the valid program: one byte changed, deleted or duplicated. */
static void test_mutations(void)
{
    uint64_t s = 7;
    size_t n = strlen(valid);
    char buf[sizeof valid + 1];
    for (int i = 0; i < 1500; i++) {
        size_t at = next(&s) % n, len = n;
        memcpy(buf, valid, n);
        switch (next(&s) % 3) {
        case 0:
            buf[at] = " []{}(),=:+-*_#\nXU0.a\x80"[next(&s) % 22];
            break;
        case 1:
            memmove(buf + at, buf + at + 1, n - at - 1);
            len--;
            break;
        default:
            memmove(buf + at + 1, buf + at, n - at);
            len++;
            break;
        }
        run(buf, len);
    }
}

/* Deep nesting is bounded by the parser stack, reported, not a crash.
 * The parser has then stopped, so the lines after it (here the output
 * line) were never read: that error alone is reported, not also "no
 * 'output' line" (issue 14). */
static void test_deep_nesting(void)
{
    size_t depth = 100000;
    const char *head = "dim I = 2\ninput A[I] : f32\nC[I] = ";
    size_t hl = strlen(head);
    char *src = malloc(hl + 2 * depth + 64);
    memcpy(src, head, hl);
    memset(src + hl, '(', depth);
    strcpy(src + hl + depth, "A[I]");
    memset(src + hl + depth + 4, ')', depth);
    strcpy(src + hl + 2 * depth + 4, "\noutput C\n");
    fe_run r = fe_test_compile_str(src, NULL);
    CU_ASSERT_PTR_NULL(r.m);
    CU_ASSERT_EQUAL(r.nerrors, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.diag, "error: expression nested too deeply"));
    CU_ASSERT_PTR_NULL(strstr(r.diag, "output"));
    fe_run_free(&r);

    /* Moderate nesting compiles. */
    depth = 200;
    memset(src + hl, '(', depth);
    strcpy(src + hl + depth, "A[I]");
    memset(src + hl + depth + 4, ')', depth);
    strcpy(src + hl + 2 * depth + 4, "\noutput C\n");
    r = fe_test_compile_str(src, NULL);
    CU_ASSERT_PTR_NOT_NULL(r.m);
    fe_run_free(&r);
    free(src);
}

/* Many statements: name lookups are hashed, so this stays fast. */
static void test_many_statements(void)
{
    int n = 20000;
    char *src = malloc((size_t)n * 48 + 128);
    size_t len = (size_t)sprintf(src, "dim I = 4\ninput T0[I] : f32\n");
    for (int i = 1; i < n; i++)
        len += (size_t)sprintf(src + len, "T%d[I] = T%d[I] * 2 + 1\n", i, i - 1);
    sprintf(src + len, "output T%d\n", n - 1);
    fe_run r = fe_test_compile_str(src, NULL);
    CU_ASSERT_PTR_NOT_NULL(r.m);
    if (r.m)
        CU_ASSERT_EQUAL(r.m->nvalues, n);
    fe_run_free(&r);
    free(src);
}

/* A statement just under the factor limit: deep trees, split into ops. */
static void test_long_statement(void)
{
    int n = 4000;
    char *src = malloc((size_t)n * 16 + 128);
    size_t len = (size_t)sprintf(src, "dim I = 4\ninput A[I] : f32\ninput B[I] : f32\nS[I] = A[I]");
    for (int i = 1; i < n; i++)
        len += (size_t)sprintf(src + len, i % 3 ? " - B[I]" : " * A[I]");
    sprintf(src + len, "\noutput S\n");
    fe_run r = fe_test_compile_str(src, NULL);
    CU_ASSERT_PTR_NOT_NULL(r.m);
    int nops = 0;
    for (ir_op *op = r.m ? r.m->first : NULL; op; op = op->next, nops++)
        CU_ASSERT(op->noperands <= IR_MAX_OPERANDS);
    CU_ASSERT(nops > 1);
    fe_run_free(&r);
    free(src);
}

/* Issue 14: sizes near the int64 limits, in the mesh, the dims and -D, in
 * every combination: an error or a module, never a trap (run under UBSan,
 * never a signed overflow either).  Mesh sizes and dims that compile must
 * give a mesh the runtime can run. */
static void test_extreme_sizes(void)
{
    static const char *sizes[] = {"1", "2", "3", "4096", "4097", "65536", "4294967296",
                                  "4611686018427387904", "9223372036854775807"};
    static const int64_t defines[] = {0, 1, 2, 4096, INT64_C(4294967296), INT64_MAX};
    int n = (int)(sizeof sizes / sizeof sizes[0]);
    char src[512];
    for (int x = 0; x < n; x++)
        for (int y = 0; y < n; y++)
            for (int i = 0; i < n; i++) {
                snprintf(src, sizeof src,
                         "mesh X = %s, Y = %s\ndim I = %s, J = %s\ninput A[I_XY, J] : f32\n"
                         "param W[J, I_X] : bf16\nB[I, J] = A[I, J] * 2\nC[I] = A[I, J]\n"
                         "output B\noutput C\n",
                         sizes[x], sizes[y], sizes[i], sizes[(x + y + i) % n]);
                run(src, strlen(src));
                fe_define d = {"X", defines[(x * n + y + i) % 6]};
                fe_options o = {.defines = &d, .ndefines = 1};
                fe_run r = fe_test_compile_str(src, &o);
                CU_ASSERT((r.m != NULL) == (r.nerrors == 0));
                if (r.m)
                    CU_ASSERT(ir_mesh_devices(&r.m->mesh) <= 4096);
                fe_run_free(&r);
            }
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"valid program", test_valid_program},
        {"every prefix", test_prefixes},
        {"random bytes", test_random_bytes},
        {"token soup", test_token_soup},
        {"mutations", test_mutations},
        {"deep nesting", test_deep_nesting},
        {"many statements", test_many_statements},
        {"long statement", test_long_statement},
        {"extreme sizes", test_extreme_sizes},
    };
    einc_add_suite("frontend robustness", tests, (int)(sizeof tests / sizeof tests[0]));
}
