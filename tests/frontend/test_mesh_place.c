/*
 * test_mesh_place.c - a mesh axis's placement (docs/language.md, "mesh"):
 * `X = 16 over 2` folds the axis over two physical torus axes (seed 001,
 * "multiple axes"), `P = 4 over dcn` puts it across the data-center
 * network (seed 000, "scaling across pods").  The IR keeps it, the text
 * dump writes it back as source, and every misuse is one located error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "fe_test_util.h"

static void test_place_lowered(void)
{
    fe_run r = fe_test_compile_str("mesh X = 16 over 2, Y = 4, P = 4 over dcn\ndim I = 256\n"
                                   "input A[I_XYP] : f32\noutput A\n", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.m);
    const ir_mesh *mesh = &r.m->mesh;
    CU_ASSERT_EQUAL(mesh->naxes, 3);
    CU_ASSERT(mesh->axes[0].phys == 2 && !mesh->axes[0].dcn);
    CU_ASSERT(mesh->axes[1].phys == 1 && !mesh->axes[1].dcn);
    CU_ASSERT(mesh->axes[2].phys == 1 && mesh->axes[2].dcn);
    /* The text dump's mesh line is source again. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ir_print(f, r.m);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "\nmesh X = 16 over 2, Y = 4, P = 4 over dcn\n"));
    free(buf);
    fe_run_free(&r);
    /* `over 1` is an ordinary axis; `over` is still a name elsewhere. */
    r = fe_test_compile_str("mesh X = 4 over 1\ndim over = 8\ninput A[over_X] : f32\noutput A\n", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.m);
    CU_ASSERT_EQUAL(r.m->mesh.axes[0].phys, 1);
    fe_run_free(&r);
}

static void test_place_errors(void)
{
    EXPECT_DIAG("mesh X = 16 over 4\ndim I = 16\ninput A[I_X] : f32\noutput A\n",
                "t.ein:1:18: error: mesh axis 'X' can be folded over 1 to 3 physical axes, not 4\n"
                "    mesh X = 16 over 4\n"
                "                     ^\n");
    EXPECT_DIAG("mesh X = 16 over 0\ndim I = 16\ninput A[I_X] : f32\noutput A\n",
                "t.ein:1:18: error: mesh axis 'X' can be folded over 1 to 3 physical axes, not 0\n"
                "    mesh X = 16 over 0\n"
                "                     ^\n");
    EXPECT_DIAG("mesh X = 2 over 3\ndim I = 16\ninput A[I_X] : f32\noutput A\n",
                "t.ein:1:17: error: mesh axis 'X' of 2 devices cannot span 3 physical axes: each "
                "needs at least one device\n"
                "    mesh X = 2 over 3\n"
                "                    ^\n");
    EXPECT_DIAG("mesh X = 16 over 1.5\ndim I = 16\ninput A[I_X] : f32\noutput A\n",
                "t.ein:1:18: error: mesh axis 'X' can be folded over 1 to 3 physical axes, not 1.5\n"
                "    mesh X = 16 over 1.5\n"
                "                     ^\n");
    EXPECT_DIAG("mesh X = 16 over ici\ndim I = 16\ninput A[I_X] : f32\noutput A\n",
                "t.ein:1:18: error: mesh axis 'X' can be 'over' a number of physical axes (1 to 3) "
                "or 'over dcn', not 'over ici'\n"
                "    mesh X = 16 over ici\n"
                "                     ^\n");
    EXPECT_DIAG("mesh X = 16 on 2\ndim I = 16\ninput A[I_X] : f32\noutput A\n",
                "t.ein:1:13: error: expected 'over' or ',' after the size of mesh axis 'X', not 'on'\n"
                "    mesh X = 16 on 2\n"
                "                ^\n");
    /* `over` with nothing after it: a syntax error, and X is still defined. */
    EXPECT_DIAG("mesh X = 16 over\ndim I = 16\ninput A[I_X] : f32\noutput A\n",
                "t.ein:1:17: error: syntax error: unexpected end of line, expecting name or number\n"
                "    mesh X = 16 over\n"
                "                    ^\n");
    EXPECT_DIAG("mesh X = 2\ndim I = 16 over 2\ninput A[I_X] : f32\noutput A\n",
                "t.ein:2:12: error: a dim has no placement: 'over' is only for mesh axes (expected "
                "',' or the end of the line after the size of 'I')\n"
                "    dim I = 16 over 2\n"
                "               ^\n");
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"placement kept in the IR and its dump", test_place_lowered},
        {"placement errors", test_place_errors},
    };
    einc_add_suite("mesh placement", tests, (int)(sizeof tests / sizeof tests[0]));
}
