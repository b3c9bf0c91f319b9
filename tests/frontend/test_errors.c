/*
 * test_errors.c - every kind of frontend error, each asserted as the exact
 * `t.ein:line:col: error: ...` line plus the source line and caret (or, for
 * errors without a location, the bare line), and that all errors in a file
 * are reported.
 */
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "fe_test_util.h"

/* Two header lines shared by most programs: errors start on line 3. */
#define HDR "mesh X = 2, Y = 2\ndim I = 8, J = 4, K = 6\n"
#define ABC HDR "input A[I, J] : f32\nparam B[J, K] : f32\n"

static void test_undefined_tensor(void)
{
    EXPECT_DIAG(ABC "C[I, K] = A[I, J] * Q[J, K]\noutput C\n",
                "t.ein:5:21: error: tensor 'Q' is not defined\n"
                "    C[I, K] = A[I, J] * Q[J, K]\n"
                "                        ^\n");
}

static void test_use_before_definition(void)
{
    EXPECT_DIAG(ABC "C[I, K] = A[I, J] * C[J, K]\noutput C\n",
                "t.ein:5:21: error: tensor 'C' is used in its own definition\n"
                "    C[I, K] = A[I, J] * C[J, K]\n"
                "                        ^\n");
}

static void test_undefined_dim(void)
{
    EXPECT_DIAG(HDR "input In[Q_X, I] : f32\noutput In\n",
                "t.ein:3:10: error: dim 'Q' is not defined\n"
                "    input In[Q_X, I] : f32\n"
                "             ^\n");
}

static void test_index_count(void)
{
    EXPECT_DIAG(HDR "param Win[I, J] : f32\nC[I] = Win[I, J, K]\noutput C\n",
                "t.ein:4:8: error: tensor 'Win' has 2 dims but 3 indices are given\n"
                "    C[I] = Win[I, J, K]\n"
                "           ^\n");
}

static void test_lhs_index_missing(void)
{
    EXPECT_DIAG(ABC "C[I, K] = A[I, J] + 1\noutput C\n",
                "t.ein:5:6: error: index 'K' of 'C' appears in no term of the right side\n"
                "    C[I, K] = A[I, J] + 1\n"
                "         ^\n");
}

static void test_unknown_function(void)
{
    EXPECT_DIAG(ABC "C[I, J] = softplus(A[I, J])\noutput C\n",
                "t.ein:5:11: error: unknown function 'softplus' (known: exp, log, tanh, relu, gelu, "
                "silu, sigmoid, sqrt, rsqrt, neg, abs, sin, cos, maximum, minimum, where, sum, max, "
                "min, mean, softmax, grad, argmax, and the casts f32, f64, bf16, i8)\n"
                "    C[I, J] = softplus(A[I, J])\n"
                "              ^\n");
}

static void test_axis_used_twice(void)
{
    EXPECT_DIAG(HDR "input A[I_X, J_YX] : f32\noutput A\n",
                "t.ein:3:17: error: mesh axis 'X' is used twice in the sharding of 'A'\n"
                "    input A[I_X, J_YX] : f32\n"
                "                    ^\n");
    /* An axis cannot both shard a dim and hold unreduced sums. */
    EXPECT_DIAG(ABC "C[I_X, K]{U_X} = A[I, J] * B[J, K]\noutput C\n",
                "t.ein:5:13: error: mesh axis 'X' is used twice in the sharding of 'C'\n"
                "    C[I_X, K]{U_X} = A[I, J] * B[J, K]\n"
                "                ^\n");
}

static void test_axis_not_in_mesh(void)
{
    EXPECT_DIAG(HDR "input A[I_Z, J] : f32\noutput A\n",
                "t.ein:3:11: error: mesh axis 'Z' is not defined\n"
                "    input A[I_Z, J] : f32\n"
                "              ^\n");
}

static void test_not_divisible(void)
{
    EXPECT_DIAG("mesh X = 3, Y = 3\ndim D = 256\ninput A[D_XY] : f32\noutput A\n",
                "t.ein:3:9: error: dim 'D' (256) is not divisible by the product of its mesh axes "
                "X*Y = 3*3\n"
                "    input A[D_XY] : f32\n"
                "            ^\n");
    EXPECT_DIAG("mesh X = 3\ndim K = 6, D = 10\ninput A[K_X, D] : f32\nC[K, D_X] = A[K, D]\noutput C\n",
                "t.ein:4:6: error: dim 'D' (10) is not divisible by the size of its mesh axes X = 3\n"
                "    C[K, D_X] = A[K, D]\n"
                "         ^\n");
}

static void test_index_size_mismatch(void)
{
    /* Relabeling is allowed only between dims of equal size. */
    EXPECT_DIAG(ABC "C[J, I] = A[J, I]\noutput C\n",
                "t.ein:5:13: error: index 'J' (4) does not match dim 1 of 'A', which is 'I' (8)\n"
                "    C[J, I] = A[J, I]\n"
                "                ^\n"
                "t.ein:5:16: error: index 'I' (8) does not match dim 2 of 'A', which is 'J' (4)\n"
                "    C[J, I] = A[J, I]\n"
                "                   ^\n");
}

static void test_repeated_index(void)
{
    EXPECT_DIAG(HDR "input A[I, I] : f32\nC[I] = A[I, I]\noutput C\n",
                "t.ein:4:13: error: index 'I' is repeated in 'A'\n"
                "    C[I] = A[I, I]\n"
                "                ^\n");
}

static void test_bad_dtype(void)
{
    EXPECT_DIAG(HDR "input A[I] : f16\noutput A\n",
                "t.ein:3:14: error: unknown dtype 'f16' (expected f32, f64, bf16, i32 or i8)\n"
                "    input A[I] : f16\n"
                "                 ^\n");
}

static void test_mixed_dtypes(void)
{
    EXPECT_DIAG(HDR "input A[I] : f32\ninput B[I] : bf16\nC[I] = A[I] + B[I]\noutput C\n",
                "t.ein:5:15: error: tensor 'B' is bf16 but tensor 'A' in the same statement is f32: "
                "dtypes cannot be mixed; cast one side: f32(B[...])\n"
                "    C[I] = A[I] + B[I]\n"
                "                  ^\n");
}

static void test_duplicate_definitions(void)
{
    EXPECT_DIAG(ABC "A[I, J] = 2 * A[I, J]\noutput A\n",
                "t.ein:5:1: error: tensor 'A' is already defined\n"
                "    A[I, J] = 2 * A[I, J]\n"
                "    ^\n"
                "t.ein:3:7: note: previous definition of 'A' is here\n"
                "    input A[I, J] : f32\n"
                "          ^\n");
    EXPECT_DIAG("mesh X = 2\ndim I = 4, I = 8\ninput A[I] : f32\noutput A\n",
                "t.ein:2:12: error: dim 'I' is already defined\n"
                "    dim I = 4, I = 8\n"
                "               ^\n"
                "t.ein:2:5: note: previous definition of 'I' is here\n"
                "    dim I = 4, I = 8\n"
                "        ^\n");
    EXPECT_DIAG("mesh X = 2\nmesh X = 4\ndim I = 4\ninput A[I] : f32\noutput A\n",
                "t.ein:2:6: error: mesh axis 'X' is already defined\n"
                "    mesh X = 4\n"
                "         ^\n"
                "t.ein:1:6: note: previous definition of 'X' is here\n"
                "    mesh X = 2\n"
                "         ^\n");
    EXPECT_DIAG(ABC "output A\noutput A\n",
                "t.ein:6:8: error: 'A' is already an output\n"
                "    output A\n"
                "           ^\n"
                "t.ein:5:8: note: previous output line of 'A' is here\n"
                "    output A\n"
                "           ^\n");
}

static void test_missing_output(void)
{
    EXPECT_DIAG(ABC "C[I, K] = A[I, J] * B[J, K]\n",
                "t.ein: error: the program has no 'output' line, so it computes nothing\n");
}

static void test_syntax_error(void)
{
    EXPECT_DIAG(ABC "C[I, K] = A[I, J] * * B[J, K]\noutput C\n",
                "t.ein:5:21: error: syntax error: unexpected '*', expecting name or number or 'inf' or '('\n"
                "    C[I, K] = A[I, J] * * B[J, K]\n"
                "                        ^\n");
    /* The last line needs no newline; an unclosed bracket is reported at its end. */
    EXPECT_DIAG(ABC "output A[I, J",
                "t.ein:5:14: error: syntax error: unexpected end of line, expecting ':' or ',' or '[' or ']'\n"
                "    output A[I, J\n"
                "                 ^\n");
}

static void test_nul_byte(void)
{
    static const char src[] = "dim I = 4\ninput A[I] : f32\0\noutput A\n";
    fe_run r = fe_test_compile(src, sizeof src - 1, NULL);
    CU_ASSERT_PTR_NULL(r.m);
    CU_ASSERT_STRING_EQUAL(r.diag, "t.ein:2:17: error: NUL byte in source (byte offset 26)\n"
                                   "    input A[I] : f32?\n"
                                   "                    ^\n");
    fe_run_free(&r);
}

static void test_invalid_utf8(void)
{
    /* Valid UTF-8 is fine in comments; a lone 0xFF and an overlong 0xC0 0xAF are not. */
    EXPECT_DIAG("# caf\xc3\xa9 ok\ndim I = 4 # \xff\ninput A[I] : f32 \xc0\xaf\noutput A\n",
                "t.ein:2:13: error: invalid UTF-8 byte 0xFF (byte offset 23)\n"
                "    dim I = 4 # \xff\n"
                "                ^\n"
                "t.ein:3:18: error: invalid UTF-8 byte 0xC0 (byte offset 42)\n"
                "    input A[I] : f32 \xc0\xaf\n"
                "                     ^\n");
}

static void test_unexpected_characters(void)
{
    EXPECT_DIAG(ABC "C[I, J] = A[I, J] % 2\noutput C\n",
                "t.ein:5:19: error: unexpected character '%'\n"
                "    C[I, J] = A[I, J] % 2\n"
                "                      ^\n");
    EXPECT_DIAG(ABC "C[I, J] = A[I, J] \xc3\x97 2\noutput C\n",
                "t.ein:5:19: error: unexpected character U+00D7 '\xc3\x97'\n"
                "    C[I, J] = A[I, J] \xc3\x97 2\n"
                "                      ^\n");
    EXPECT_DIAG(ABC "C[I, J] = A[I, J] \x01\noutput C\n",
                "t.ein:5:19: error: unexpected control byte 0x01\n"
                "    C[I, J] = A[I, J] ?\n"
                "                      ^\n");
    EXPECT_DIAG(ABC "C[I, J] = 2x * A[I, J]\noutput C\n",
                "t.ein:5:11: error: malformed number '2x'\n"
                "    C[I, J] = 2x * A[I, J]\n"
                "              ^\n");
    EXPECT_DIAG(ABC "input D[I_] : f32\noutput A\n",
                "t.ein:5:9: error: empty mesh axis subscript in 'I_'\n"
                "    input D[I_] : f32\n"
                "            ^\n");
}

static void test_sizes(void)
{
    EXPECT_DIAG("dim I = 99999999999999999999\ninput A[I] : f32\noutput A\n",
                "t.ein:1:9: error: size of dim 'I' (99999999999999999999) does not fit in 64 bits\n"
                "    dim I = 99999999999999999999\n"
                "            ^\n");
    EXPECT_DIAG("dim I = 0, J = -3, K = 2.5\ninput A[I, J, K] : f32\noutput A\n",
                "t.ein:1:9: error: size of dim 'I' must be at least 1, not 0\n"
                "    dim I = 0, J = -3, K = 2.5\n"
                "            ^\n"
                "t.ein:1:17: error: size of dim 'J' must be at least 1, not -3\n"
                "    dim I = 0, J = -3, K = 2.5\n"
                "                    ^\n"
                "t.ein:1:24: error: size of dim 'K' must be an integer, not '2.5'\n"
                "    dim I = 0, J = -3, K = 2.5\n"
                "                           ^\n");
    EXPECT_DIAG("mesh XY = 2\ndim I = 4\ninput A[I] : f32\noutput A\n",
                "t.ein:1:6: error: mesh axis name 'XY' must be a single letter\n"
                "    mesh XY = 2\n"
                "         ^\n");
    EXPECT_DIAG("mesh A = 2, B = 2, C = 2, D = 2, E = 2\ndim I = 4\ninput T[I] : f32\noutput T\n",
                "t.ein:1:34: error: mesh axis 'E' is one too many: a mesh has at most 4 axes\n"
                "    mesh A = 2, B = 2, C = 2, D = 2, E = 2\n"
                "                                     ^\n");
    /* The byte size of a tensor must fit in 64 bits. */
    EXPECT_DIAG("dim I = 4294967296, J = 4294967296\ninput A[I, J] : f32\noutput A\n",
                "t.ein:2:7: error: tensor 'A' is too large: its size in bytes overflows 64 bits\n"
                "    input A[I, J] : f32\n"
                "          ^\n");
}

static void test_subscript_misuse(void)
{
    EXPECT_DIAG(ABC "C[I, K] = A[I, J_X] * B[J, K]\noutput C\n",
                "t.ein:5:17: error: subscript '_X' is not allowed on the right side: write the plain "
                "dim 'J' (shardings go on declarations, left sides and outputs)\n"
                "    C[I, K] = A[I, J_X] * B[J, K]\n"
                "                    ^\n");
    EXPECT_DIAG(ABC "C[I, K]{V_X} = A[I, J] * B[J, K]\noutput C\n",
                "t.ein:5:9: error: unreduced axes are written '{U_X}', not '{V_X}'\n"
                "    C[I, K]{V_X} = A[I, J] * B[J, K]\n"
                "            ^\n");
    EXPECT_DIAG(HDR "input A[I, J]{U_X} : f32\noutput A\n",
                "t.ein:3:14: error: input 'A' cannot hold unreduced partial sums: '{U_..}' is only "
                "allowed on left sides\n"
                "    input A[I, J]{U_X} : f32\n"
                "                 ^\n");
}

static void test_no_tensor_on_right(void)
{
    EXPECT_DIAG(ABC "C[] = 2 * 3\noutput C\n",
                "t.ein:5:7: error: the right side of 'C' uses no tensor\n"
                "    C[] = 2 * 3\n"
                "          ^\n");
}

static void test_defines(void)
{
    static const fe_define defs[] = {{"Q", 4}, {"I", 0}};
    fe_options o = {.defines = defs, .ndefines = 2};
    fe_run r = fe_test_compile_str(ABC "output A\n", &o);
    CU_ASSERT_PTR_NULL(r.m);
    CU_ASSERT_EQUAL(r.nerrors, 2);
    CU_ASSERT_STRING_EQUAL(r.diag, "t.ein: error: -D I=0: a size must be at least 1\n"
                                   "t.ein: error: -D Q=4 names no dim or mesh axis of this program\n");
    fe_run_free(&r);
}

/* Every statement with an error is reported, syntax and semantic alike. */
static void test_all_errors_reported(void)
{
    fe_run r = fe_test_compile_str(ABC
                                   "C[I, K] = A[I, J] * Q[J, K]\n" /* undefined tensor */
                                   "D[I] = ) A[I, J]\n"            /* syntax error */
                                   "E[I] = foo(A[I, J])\n"         /* unknown function */
                                   "F[I, K] = A[I, J] $\n"         /* invalid character */
                                   "G[I] = B[I, J, K]\n"           /* index count */
                                   "output G\n",
                                   NULL);
    CU_ASSERT_PTR_NULL(r.m);
    CU_ASSERT_EQUAL(r.nerrors, 5);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.diag, "t.ein:5:21: error: tensor 'Q' is not defined"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.diag, "t.ein:6:8: error: syntax error: unexpected ')'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.diag, "t.ein:7:8: error: unknown function 'foo'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.diag, "t.ein:8:19: error: unexpected character '$'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.diag, "t.ein:9:8: error: tensor 'B' has 2 dims but 3 indices"));
    fe_run_free(&r);
}

/* The elementwise vocabulary: where, comparisons, index values, arities. */
static void test_where_without_comparison(void)
{
    EXPECT_DIAG(ABC "C[I, J] = where(A[I, J], A[I, J], 0)\noutput C\n",
                "t.ein:5:17: error: the condition of 'where' must be a comparison, like 'S <= T' "
                "(one of < <= > >= == !=)\n"
                "    C[I, J] = where(A[I, J], A[I, J], 0)\n"
                "                    ^\n");
}

static void test_comparison_outside_where(void)
{
    EXPECT_DIAG(ABC "C[I, J] = maximum(A[I, J] < 0, A[I, J])\noutput C\n",
                "t.ein:5:19: error: a comparison is only allowed as the condition of "
                "'where(cond, a, b)'\n"
                "    C[I, J] = maximum(A[I, J] < 0, A[I, J])\n"
                "                      ^\n");
    EXPECT_DIAG(ABC "C[I, J] = A[I, J] < 0\noutput C\n",
                "t.ein:5:11: error: a comparison is only allowed as the condition of "
                "'where(cond, a, b)'\n"
                "    C[I, J] = A[I, J] < 0\n"
                "              ^\n");
}

static void test_index_value_errors(void)
{
    EXPECT_DIAG(ABC "C[I, J] = A[I, J] * Q\noutput C\n",
                "t.ein:5:21: error: dim 'Q' is not defined (a name used as a value is a dim's "
                "index value)\n"
                "    C[I, J] = A[I, J] * Q\n"
                "                        ^\n");
    EXPECT_DIAG(ABC "C[I, J] = A[I, J] * B\noutput C\n",
                "t.ein:5:21: error: 'B' is a tensor, not a dim: write it with its indices, "
                "like 'B[...]'\n"
                "    C[I, J] = A[I, J] * B\n"
                "                        ^\n");
}

static void test_argument_count(void)
{
    EXPECT_DIAG(ABC "C[I, J] = maximum(A[I, J])\nD[I, J] = where(I < J, A[I, J])\n"
                    "E[I, J] = exp(A[I, J], 1)\noutput C\n",
                "t.ein:5:11: error: function 'maximum' takes 2 arguments, not 1\n"
                "    C[I, J] = maximum(A[I, J])\n"
                "              ^\n"
                "t.ein:6:11: error: function 'where' takes 3 arguments, not 2\n"
                "    D[I, J] = where(I < J, A[I, J])\n"
                "              ^\n"
                "t.ein:7:11: error: function 'exp' takes 1 argument, not 2\n"
                "    E[I, J] = exp(A[I, J], 1)\n"
                "              ^\n");
}

static void test_reduction_errors(void)
{
    /* A reduction over an index its argument lacks; softmax likewise. */
    EXPECT_DIAG(ABC "C[I] = max(A[I, J], K)\noutput C\n",
                "t.ein:5:21: error: 'max' over index 'K', which its argument does not have\n"
                "    C[I] = max(A[I, J], K)\n"
                "                        ^\n");
    EXPECT_DIAG(ABC "C[I, J] = softmax(A[I, J], K)\noutput C\n",
                "t.ein:5:28: error: 'softmax' over index 'K', which its argument does not have\n"
                "    C[I, J] = softmax(A[I, J], K)\n"
                "                               ^\n");
    /* The index argument must be a bare index name. */
    EXPECT_DIAG(ABC "C[I, J] = softmax(A[I, J], J + 1)\noutput C\n",
                "t.ein:5:28: error: the second argument of 'softmax' must be the name of the index "
                "to reduce over, like 'S'\n"
                "    C[I, J] = softmax(A[I, J], J + 1)\n"
                "                               ^\n");
    /* Nothing to reduce: every index of the argument is on the left side. */
    EXPECT_DIAG(ABC "C[I, J] = A[I, J] - max(A[I, J])\noutput C\n",
                "t.ein:5:21: error: 'max(...)' reduces the indices of its argument that 'C' lacks, "
                "and there are none: name the index, like 'max(x, S)'\n"
                "    C[I, J] = A[I, J] - max(A[I, J])\n"
                "                        ^\n");
    EXPECT_DIAG(ABC "C[I] = softmax(A[I, J])\noutput C\n",
                "t.ein:5:8: error: function 'softmax' takes 2 arguments, not 1\n"
                "    C[I] = softmax(A[I, J])\n"
                "           ^\n");
}

static void test_gather_errors(void)
{
#define GHDR HDR "input Tok[I] : i32\ninput Fl[I] : f32\nparam Emb[K, J] : f32\n"
    EXPECT_DIAG(GHDR "E[I, J] = Emb[Fl[I], J]\noutput E\n",
                "t.ein:6:15: error: the index tensor 'Fl' of a gather must be i32, not f32\n"
                "    E[I, J] = Emb[Fl[I], J]\n"
                "                  ^\n");
    EXPECT_DIAG(GHDR "E[I, J] = Tok[I] * Emb[K, J]\noutput E\n",
                "t.ein:6:11: error: 'Tok' is i32: an integer tensor can only be the index of a "
                "gather, like 'Emb[Tok[...], D]', or compared in the condition of 'where'\n"
                "    E[I, J] = Tok[I] * Emb[K, J]\n"
                "              ^\n");
    EXPECT_DIAG(GHDR "E[K] = Emb[K, Tok[I]]\noutput E\n",
                "t.ein:6:15: error: only the first index of 'Emb' can be given by a tensor (a "
                "gather looks up rows)\n"
                "    E[K] = Emb[K, Tok[I]]\n"
                "                  ^\n");
    EXPECT_DIAG(GHDR "E[Tok[I], J] = Emb[Tok[I], J]\noutput E\n",
                "t.ein:6:3: error: a tensor as an index ('E[Tok[...]]') is only allowed on the "
                "right side of a statement\n"
                "    E[Tok[I], J] = Emb[Tok[I], J]\n"
                "      ^\n");
    EXPECT_DIAG(GHDR "output Tok\n",
                "t.ein:6:8: error: output 'Tok' is an i32 input: an i32 output is computed, like "
                "'Next[B] = argmax(Logits[B, V], V)'\n"
                "    output Tok\n"
                "           ^\n");
#undef GHDR
}

/* Writes into state at a run-time position (check_write.c). */
static void test_state_errors(void)
{
#define SHDR HDR "input Pos[] : i32\ninput Pf[] : f32\ninput A[I, J] : f32\nstate C[I, K, J_Y] : f32\n"
#define SOUT "B[I, J] = A[I, J] * 1\noutput B\n"
    /* a write into an input */
    EXPECT_DIAG(SHDR "A[Pos, J] = A[I, J] * 2\n" SOUT,
                "t.ein:7:1: error: 'A' is an input: only a 'state' is written at a run-time position\n"
                "    A[Pos, J] = A[I, J] * 2\n"
                "    ^\n"
                "t.ein:5:7: note: 'A' is defined here\n"
                "    input A[I, J] : f32\n"
                "          ^\n");
    /* a position that is not an integer */
    EXPECT_DIAG(SHDR "C[I, Pf, J] = A[I, J]\n" SOUT,
                "t.ein:7:6: error: the position 'Pf' must be a scalar i32 tensor, and it is f32\n"
                "    C[I, Pf, J] = A[I, J]\n"
                "         ^\n"
                "t.ein:4:7: note: 'Pf' is defined here\n"
                "    input Pf[] : f32\n"
                "          ^\n");
    /* a whole state assigned */
    EXPECT_DIAG(SHDR "C[I, K, J] = A[I, J] * 2\n" SOUT,
                "t.ein:7:1: error: 'C' is a state: a statement writes one slice of it, at a position "
                "given by an i32 scalar in place of one dim, like 'C[I, pos, J]'\n"
                "    C[I, K, J] = A[I, J] * 2\n"
                "    ^\n");
    /* the other dims out of order, a subscript, two positions */
    EXPECT_DIAG(SHDR "C[I, Pos, K] = A[I, J]\n" SOUT,
                "t.ein:7:11: error: index 3 of 'C' is 'K', but the state's dim there is 'J': a write "
                "keeps the state's dims in order\n"
                "    C[I, Pos, K] = A[I, J]\n"
                "              ^\n");
    EXPECT_DIAG(SHDR "C[I, Pos, J_Y] = A[I, J]\n" SOUT,
                "t.ein:7:13: error: state 'C' keeps the sharding it is declared with: write 'J' "
                "without a subscript\n"
                "    C[I, Pos, J_Y] = A[I, J]\n"
                "                ^\n");
    EXPECT_DIAG(SHDR "C[Pos, Pos, J] = A[I, J]\n" SOUT,
                "t.ein:7:8: error: 'C' is written at one run-time position, and 'Pos' is a second one\n"
                "    C[Pos, Pos, J] = A[I, J]\n"
                "           ^\n");
    /* a state that is not stacked, written in a repeated block */
    EXPECT_DIAG(SHDR "X[I, J] = A[I, J] * 1\nrepeat K {\n  X[I, J] = X[I, J] * 2\n  C[I, Pos, J] = X[I, J]\n}\n" SOUT,
                "t.ein:10:3: error: inside 'repeat K', a state is written one layer at a time: "
                "declare 'C' stacked on 'K' (its first dim) and write it without that dim\n"
                "      C[I, Pos, J] = X[I, J]\n"
                "      ^\n");
    /* an integer state, and an integer read outside a mask */
    EXPECT_DIAG(HDR "state S[I] : i32\ninput A[I] : f32\nB[I] = A[I] * 1\noutput B\n",
                "t.ein:3:14: error: state 'S' is i32: a state is f32, f64, bf16 or i8\n"
                "    state S[I] : i32\n"
                "                 ^\n");
    EXPECT_DIAG(SHDR "C[I, Pos, J] = A[I, J] * Pos[]\n" SOUT,
                "t.ein:7:26: error: 'Pos' is i32: an integer tensor can only be the index of a "
                "gather, like 'Emb[Pos[...], D]', or compared in the condition of 'where'\n"
                "    C[I, Pos, J] = A[I, J] * Pos[]\n"
                "                             ^\n");
    /* a window write: an unknown dim, longer than the dim written, outside a write */
    EXPECT_DIAG(SHDR "C[I, Pos:Q, J] = A[I, J]\n" SOUT,
                "t.ein:7:10: error: dim 'Q' is not defined\n"
                "    C[I, Pos:Q, J] = A[I, J]\n"
                "             ^\n");
    EXPECT_DIAG(SHDR "C[I, Pos:I, J] = A[I, J]\n" SOUT,
                "t.ein:7:10: error: the window 'I' of 8 rows is longer than the dim 'K' of 6 it is "
                "written into\n"
                "    C[I, Pos:I, J] = A[I, J]\n"
                "             ^\n"
                "t.ein:7:10: error: the window 'I' is also a dim of 'C'\n"
                "    C[I, Pos:I, J] = A[I, J]\n"
                "             ^\n");
    EXPECT_DIAG(SHDR "D[I, J] = A[Pos:I, J]\n" SOUT,
                "t.ein:7:17: error: 'Pos:I' writes rows at positions Pos, Pos+1, ...: it is only "
                "allowed on the left side of a write into a state\n"
                "    D[I, J] = A[Pos:I, J]\n"
                "                    ^\n");
    /* argmax inside an expression */
    EXPECT_DIAG(SHDR "N[I] = argmax(A[I, J], J) * 2\noutput N\n",
                "t.ein:7:8: error: 'argmax(x, S)' gives i32 positions and must be the whole right "
                "side of a statement, like 'Next[B] = argmax(Logits[B, V], V)'\n"
                "    N[I] = argmax(A[I, J], J) * 2\n"
                "           ^\n");
#undef SOUT
#undef SHDR
}

/* Past diag_ctx.max_errors the messages stop but the count goes on. */
static void test_error_limit(void)
{
    size_t n = 100;
    char *src = malloc(n * 16 + 64);
    strcpy(src, "dim I = 4\n");
    for (size_t i = 0; i < n; i++)
        strcat(src, "A[I] = Q[I]\n");
    strcat(src, "output A\n");
    fe_run r = fe_test_compile_str(src, NULL);
    CU_ASSERT_PTR_NULL(r.m);
    CU_ASSERT(r.nerrors >= 100);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.diag, "too many errors"));
    fe_run_free(&r);
    free(src);
}

/* A 10 MB line: a comment is legal and fast; a name that long is an error. */
static void test_long_lines(void)
{
    size_t big = 10u << 20;
    const char *head = ABC "C[I, K] = A[I, J] * B[J, K] # ";
    size_t hl = strlen(head);
    char *src = malloc(hl + big + 64);
    memcpy(src, head, hl);
    memset(src + hl, 'x', big);
    strcpy(src + hl + big, "\noutput C\n");
    fe_run r = fe_test_compile_str(src, NULL);
    CU_ASSERT_PTR_NOT_NULL(r.m);
    CU_ASSERT_EQUAL(r.nerrors, 0);
    fe_run_free(&r);

    /* Turn the comment into a 10 MB name. */
    src[hl - 2] = ' ';
    src[hl - 1] = '+';
    r = fe_test_compile_str(src, NULL);
    CU_ASSERT_PTR_NULL(r.m);
    CU_ASSERT_EQUAL(r.nerrors, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.diag, "t.ein:5:31: error: name is longer than 128 bytes\n"));
    CU_ASSERT(strlen(r.diag) < 1024); /* the caret line shows a window, not 10 MB */
    fe_run_free(&r);

    /* A 10 MB number. */
    memset(src + hl, '7', big);
    r = fe_test_compile_str(src, NULL);
    CU_ASSERT_PTR_NULL(r.m);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.diag, "error: number is longer than 64 bytes\n"));
    fe_run_free(&r);
    free(src);

    /* A 10 MB expression: a million terms are parsed, then refused. */
    const char *term = " + A[I, J]";
    size_t tl = strlen(term), nterms = big / tl;
    head = ABC "C[I, J] = A[I, J]";
    hl = strlen(head);
    src = malloc(hl + nterms * tl + 64);
    memcpy(src, head, hl);
    for (size_t i = 0; i < nterms; i++)
        memcpy(src + hl + i * tl, term, tl);
    strcpy(src + hl + nterms * tl, "\noutput C\n");
    r = fe_test_compile_str(src, NULL);
    CU_ASSERT_PTR_NULL(r.m);
    CU_ASSERT_EQUAL(r.nerrors, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.diag, "t.ein:5:11: error: the right side of 'C' has more than 4096 "
                                          "factors: split the statement\n"));
    fe_run_free(&r);
    free(src);
}

/* Issue 14: a mesh larger than an executable can run is refused at the
 * mesh line with the limit (RT_MAX_DEVICES); one whose device count
 * overflows 64 bits gives that one error, not a SIGFPE in the divisibility
 * check that followed, nor further errors computed from rejected sizes. */
static void test_mesh_limit(void)
{
    EXPECT_DIAG("mesh X = 64, Y = 128\ndim I = 8192\ninput A[I_XY] : f32\noutput A\n",
                "t.ein:1:14: error: the mesh X*Y = 64*128 has 8192 devices, but an einc executable "
                "runs at most 4096 (without -o einc prices it: --dump-cost, --explain, einc analyze)\n"
                "    mesh X = 64, Y = 128\n"
                "                 ^\n");
    EXPECT_DIAG("mesh X = 8192\ndim I = 8192\ninput A[I_X] : f32\noutput A\n",
                "t.ein:1:6: error: the mesh X = 8192 has 8192 devices, but an einc executable runs "
                "at most 4096 (without -o einc prices it: --dump-cost, --explain, einc analyze)\n"
                "    mesh X = 8192\n"
                "         ^\n");
    EXPECT_DIAG("mesh X = 4294967296, Y = 4294967296\ndim I = 4\ninput A[I_XY] : f32\n"
                "B[I] = A[I]\noutput B\n",
                "t.ein:1:6: error: the mesh X*Y = 4294967296*4294967296 has more than 2^63 devices, "
                "but an einc executable runs at most 4096\n"
                "    mesh X = 4294967296, Y = 4294967296\n"
                "         ^\n");
    /* 2^64 parts of one dim: the product saturates instead of wrapping to 0. */
    EXPECT_DIAG("mesh X = 65536, Y = 65536, Z = 65536, W = 65536\ndim I = 4\n"
                "input A[I_XYZW] : f32\noutput A\n",
                "t.ein:1:6: error: the mesh X*Y*Z*W = 65536*65536*65536*65536 has more than 2^63 "
                "devices, but an einc executable runs at most 4096\n"
                "    mesh X = 65536, Y = 65536, Z = 65536, W = 65536\n"
                "         ^\n");
    /* At the limit it compiles. */
    fe_run r = fe_test_compile_str("mesh X = 64, Y = 64\ndim I = 4096\ninput A[I_XY] : f32\n"
                                   "output A\n", NULL);
    CU_ASSERT_PTR_NOT_NULL(r.m);
    if (r.m)
        CU_ASSERT_EQUAL(ir_mesh_devices(&r.m->mesh), 4096);
    fe_run_free(&r);
}

/* A cost-only compile (fe_options.cost_only: --dump-cost, einc analyze)
 * takes a mesh up to FE_MAX_DEVICES_COST, a v5p pod of 8960 chips among
 * them, and refuses one device more with both limits. */
static void test_mesh_limit_cost_only(void)
{
    fe_options o = {.cost_only = true};
    fe_run r = fe_test_compile_str("mesh X = 8960\ndim I = 8960\ninput A[I_X] : f32\noutput A\n", &o);
    CU_ASSERT_PTR_NOT_NULL(r.m);
    if (r.m)
        CU_ASSERT_EQUAL(ir_mesh_devices(&r.m->mesh), 8960);
    fe_run_free(&r);
    r = fe_test_compile_str("mesh X = 1024, Y = 1025\ndim I = 4\ninput A[I] : f32\noutput A\n", &o);
    CU_ASSERT_PTR_NULL(r.m);
    CU_ASSERT_STRING_EQUAL(r.diag, "t.ein:1:16: error: the mesh X*Y = 1024*1025 has 1049600 devices, but einc "
                                   "prices meshes of at most 1048576 devices (an einc executable runs at most "
                                   "4096)\n"
                                   "    mesh X = 1024, Y = 1025\n"
                                   "                   ^\n");
    fe_run_free(&r);
}

/* The same overflow through -D: one error, at the mesh line. */
static void test_mesh_limit_define(void)
{
    static const fe_define defs[] = {{"X", INT64_C(4294967296)}, {"Y", INT64_C(4294967296)}};
    fe_options o = {.defines = defs, .ndefines = 2};
    fe_run r = fe_test_compile_str("mesh X = 2, Y = 2\ndim I = 4\ninput A[I_XY] : f32\n"
                                   "B[I] = A[I]\noutput B\n", &o);
    CU_ASSERT_PTR_NULL(r.m);
    CU_ASSERT_EQUAL(r.nerrors, 1);
    CU_ASSERT_STRING_EQUAL(r.diag,
                           "t.ein:1:6: error: the mesh X*Y = 4294967296*4294967296 has more than "
                           "2^63 devices, but an einc executable runs at most 4096\n"
                           "    mesh X = 2, Y = 2\n"
                           "         ^\n");
    fe_run_free(&r);
}

/* grad(L, W) (docs/language.md, "Gradients"): each misuse is one located error. */
static void test_grad_errors(void)
{
    /* grad inside an expression */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nG[I] = 2 * grad(L, W)\noutput G\n",
                "t.ein:5:12: error: 'grad(L, W)' must be the whole right side of a statement, like 'dW[D, F] = grad(L, W)'\n"
                "    G[I] = 2 * grad(L, W)\n"
                "               ^\n");
    /* grad of a non-scalar */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nC[I] = A[I] * W[I]\nG[I] = grad(C, W)\noutput G\n",
                "t.ein:5:13: error: 'grad' differentiates a scalar, and 'C' has 1 dim: reduce it first, like 'L[] = sum(...)'\n"
                "    G[I] = grad(C, W)\n"
                "                ^\n");
    /* grad arguments with indices */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nG[I] = grad(L[], W)\noutput G\n",
                "t.ein:5:13: error: the arguments of 'grad' are tensor names without indices, like 'grad(L, W)'\n"
                "    G[I] = grad(L[], W)\n"
                "                ^\n");
    /* grad left side dims */
    EXPECT_DIAG("dim I = 4, J = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nG[J] = grad(L, W)\noutput G\n",
                "t.ein:5:1: error: the gradient of 'W' has its dims: write 'G[I] = grad(...)'\n"
                "    G[J] = grad(L, W)\n"
                "    ^\n");
    /* grad of an undefined tensor */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nG[I] = grad(L, Q)\noutput G\n",
                "t.ein:5:16: error: tensor 'Q' is not defined\n"
                "    G[I] = grad(L, Q)\n"
                "                   ^\n");
    /* grad of an input */
    EXPECT_DIAG("dim I = 4\ninput A[] : f32\nparam W[I] : f32\nG[I] = grad(A, W)\noutput G\n",
                "t.ein:4:13: error: 'A' is an input, not a value the program computes\n"
                "    G[I] = grad(A, W)\n"
                "                ^\n");
}

/* Past the error limit (20 by default) errors are counted, not shown, and
 * the count is reported at the end (issue 14: the docs promised it). */
static void test_error_count(void)
{
    char src[4096];
    int n = snprintf(src, sizeof src, "dim I = 2\ninput A[I] : f32\n");
    for (int i = 0; i < 25; i++)
        n += snprintf(src + n, sizeof src - (size_t)n, "C%d[I] = Q%d[I]\n", i, i);
    snprintf(src + n, sizeof src - (size_t)n, "output A\n");
    fe_run r = fe_test_compile_str(src, NULL);
    CU_ASSERT_PTR_NULL(r.m);
    CU_ASSERT_EQUAL(r.nerrors, 25);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.diag, "tensor 'Q19' is not defined"));
    CU_ASSERT_PTR_NULL(strstr(r.diag, "tensor 'Q20' is not defined"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.diag, "too many errors; the rest are counted, not shown"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.diag, "... and 5 more errors\n"));
    fe_run_free(&r);
}

/* A mesh axis with a bad size is still defined, so its uses are not
 * reported as undefined as well. */
static void test_bad_axis_size_defines_it(void)
{
    EXPECT_DIAG("mesh X = 0\ndim I = 4\ninput A[I_X] : f32\noutput A\n",
                "t.ein:1:10: error: size of mesh axis 'X' must be at least 1, not 0\n"
                "    mesh X = 0\n"
                "             ^\n");
}

/* Repeated blocks (`repeat L { ... }`): stacked params, the carried
 * tensor, scoping and block structure. */
#define RP "mesh X = 2, Y = 2\ndim B = 4, D = 8, E = 8, L = 4, K = 4\n" \
           "input X[B, D] : f32\nparam W[L, E, D] : f32\n"

static void test_repeat_errors(void)
{
    /* stacked param whose first dim is not L */
    EXPECT_DIAG(RP "param U[K, E, D] : f32\n" "repeat L {\n" "  X[B, D] = X[B, E] * U[E, D]\n" "}\n" "output X\n",
               "t.ein:7:23: error: tensor 'U' has 3 dims but 2 are given; inside 'repeat L' that would be one layer of a tensor stacked on 'L', but the first dim of 'U' is 'K'\n"
                "      X[B, D] = X[B, E] * U[E, D]\n"
                "                          ^\n");
    /* L sharded: a pipeline (docs/pipeline.md), which splits every tensor
     * stacked on L */
    EXPECT_DIAG(RP "param V[L_X, E, D] : f32\n" "repeat L {\n" "  X[B, D] = X[B, E] * V[E, D]\n" "}\n" "output X\n",
               "t.ein:4:7: error: 'W' is stacked on 'L', whose layers 'V' pipelines over X: write its 'L' as 'L_X' so that each stage holds its own layers\n"
                "    param W[L, E, D] : f32\n"
                "          ^\n"
                "t.ein:5:7: note: 'V' is declared here\n"
                "    param V[L_X, E, D] : f32\n"
                "          ^\n");
    /* stacked param with its L */
    EXPECT_DIAG(RP "repeat L {\n" "  X[B, D] = X[B, E] * W[L, E, D]\n" "}\n" "output X\n",
               "t.ein:6:23: error: inside 'repeat L', 'W' stands for the current layer: write it without its first dim 'L', like 'W[E, D]'\n"
                "      X[B, D] = X[B, E] * W[L, E, D]\n"
                "                          ^\n");
    /* carried shape changes */
    EXPECT_DIAG(RP "repeat L {\n" "  S[B] = X[B, D]\n" "  X[B] = S[B] * 2\n" "}\n" "output X\n",
               "t.ein:7:3: error: 'X' is carried by the 'repeat' block with shape [B, D], but is updated with shape [B]: a carried tensor keeps its shape\n"
                "      X[B] = S[B] * 2\n"
                "      ^\n");
    /* nested */
    EXPECT_DIAG(RP "repeat L {\n" "  repeat L {\n" "    X[B, D] = X[B, E] * W[E, D]\n" "  }\n" "}\n" "output X\n",
               "t.ein:6:3: error: a 'repeat' block cannot be nested in another one\n"
                "      repeat L {\n"
                "      ^\n"
                "t.ein:5:1: note: the enclosing 'repeat' block starts here\n"
                "    repeat L {\n"
                "    ^\n");
    /* local after the block */
    EXPECT_DIAG(RP "repeat L {\n" "  H[B, D] = X[B, E] * W[E, D]\n" "  X[B, D] = X[B, D] + H[B, D]\n" "}\n" "Y[B, D] = H[B, D] * 2\n" "output Y\n",
               "t.ein:9:11: error: tensor 'H' is local to a 'repeat' block and is not available outside it\n"
                "    Y[B, D] = H[B, D] * 2\n"
                "              ^\n"
                "t.ein:6:3: note: 'H' is defined here\n"
                "      H[B, D] = X[B, E] * W[E, D]\n"
                "      ^\n");
    /* local as output */
    EXPECT_DIAG(RP "repeat L {\n" "  H[B, D] = X[B, E] * W[E, D]\n" "  X[B, D] = X[B, D] + H[B, D]\n" "}\n" "output H\n",
               "t.ein:9:8: error: tensor 'H' is local to a 'repeat' block and is not available outside it\n"
                "    output H\n"
                "           ^\n"
                "t.ein:6:3: note: 'H' is defined here\n"
                "      H[B, D] = X[B, E] * W[E, D]\n"
                "      ^\n");
    /* not closed */
    EXPECT_DIAG(RP "repeat L {\n" "  X[B, D] = X[B, E] * W[E, D]\n" "output X\n",
               "t.ein:5:1: error: this 'repeat' block is not closed: end it with a line '}'\n"
                "    repeat L {\n"
                "    ^\n");
    /* stray brace */
    EXPECT_DIAG(RP "repeat L {\n" "  X[B, D] = X[B, E] * W[E, D]\n" "}\n" "}\n" "output X\n",
               "t.ein:8:1: error: '}' closes no 'repeat' block\n"
                "    }\n"
                "    ^\n");
    /* two carried */
    EXPECT_DIAG(RP "input Z[B, D] : f32\n" "repeat L {\n" "  X[B, D] = X[B, E] * W[E, D]\n" "  Z[B, D] = Z[B, D] * 2\n" "}\n" "output X\n",
               "t.ein:8:3: error: a 'repeat' block carries one tensor from one iteration to the next, and this one already carries 'X': 'Z' cannot be updated too\n"
                "      Z[B, D] = Z[B, D] * 2\n"
                "      ^\n");
    /* updated twice */
    EXPECT_DIAG(RP "repeat L {\n" "  X[B, D] = X[B, E] * W[E, D]\n" "  X[B, D] = X[B, E] * W[E, D]\n" "}\n" "output X\n",
               "t.ein:7:3: error: 'X' is already updated in this 'repeat' block\n"
                "      X[B, D] = X[B, E] * W[E, D]\n"
                "      ^\n");
    /* no update */
    EXPECT_DIAG(RP "repeat L {\n" "  H[B, D] = X[B, E] * W[E, D]\n" "}\n" "output X\n",
               "t.ein:5:1: error: this 'repeat' block updates no tensor defined before it, so repeating it has no effect: assign to one, like 'X[...] = X[...] + ...'\n"
                "    repeat L {\n"
                "    ^\n");
    /* declaration inside */
    EXPECT_DIAG(RP "repeat L {\n" "  input Q[B] : f32\n" "  X[B, D] = X[B, E] * W[E, D] + Q[B]\n" "}\n" "output X\n",
               "t.ein:6:3: error: inputs, params and states are declared outside 'repeat' blocks: move 'Q' before the block\n"
                "      input Q[B] : f32\n"
                "      ^\n");
    /* unknown dim */
    EXPECT_DIAG(RP "repeat Q {\n" "  X[B, D] = X[B, E] * W[E, D]\n" "}\n" "output X\n",
               "t.ein:5:8: error: dim 'Q' is not defined\n"
                "    repeat Q {\n"
                "           ^\n");
}

static void test_train_errors(void)
{
    /* a loss that is not a scalar */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss A\noptimize W with sgd(lr=0.1)\n",
                "t.ein:5:6: error: the loss 'A' has 1 dim: a loss is a scalar, A[]\n"
                "    loss A\n"
                "         ^\n");
    /* optimize of an input */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize A with sgd(lr=0.1)\n",
                "t.ein:6:10: error: 'A' is an input: only params are optimized (inputs are data and are not differentiated)\n"
                "    optimize A with sgd(lr=0.1)\n"
                "             ^\n");
    /* an unknown optimizer */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with adam(lr=0.1)\n",
                "t.ein:6:17: error: unknown optimizer 'adam' (there are sgd and adamw)\n"
                "    optimize W with adam(lr=0.1)\n"
                "                    ^\n");
    /* an unknown hyperparameter */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with sgd(lr=0.1, beta=0.9)\n",
                "t.ein:6:29: error: sgd has no hyperparameter 'beta' (it has lr, momentum, weight_decay, "
                "master, warmup_steps, decay, decay_steps, min_lr, clip_norm, skip_nonfinite, zero)\n"
                "    optimize W with sgd(lr=0.1, beta=0.9)\n"
                "                                ^\n");
    /* master=f32 on a param that is f32 already: an error, not a silent no-op */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with adamw(master=f32)\n",
                "t.ein:6:10: error: master=f32 keeps an f32 copy of a bf16 param, but param 'W' is "
                "f32: it is its own master copy; leave master out\n"
                "    optimize W with adamw(master=f32)\n"
                "             ^\n");
    /* master takes none or f32 */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : bf16\nL[] = sum(A[I] * f32(W[I]))\nloss L\noptimize W with sgd(lr=0.1, master=f64)\n",
                "t.ein:6:36: error: master=f64: master is none or f32\n"
                "    optimize W with sgd(lr=0.1, master=f64)\n"
                "                                       ^\n");
    /* a missing learning rate */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with sgd(momentum=0.9)\n",
                "t.ein:6:17: error: sgd needs lr=VALUE\n"
                "    optimize W with sgd(momentum=0.9)\n"
                "                    ^\n");
    /* a hyperparameter out of range */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with adamw(lr=0.1, beta2=1)\n",
                "t.ein:6:37: error: beta2=1 is out of range: beta2 takes a value in [0, 1)\n"
                "    optimize W with adamw(lr=0.1, beta2=1)\n"
                "                                        ^\n");
    /* optimize without a loss */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\noptimize W with sgd(lr=0.1)\noutput L\n",
                "t.ein:5:1: error: 'optimize' needs a 'loss' line naming the scalar to minimise: loss L\n"
                "    optimize W with sgd(lr=0.1)\n"
                "    ^\n");
    /* a misspelt statement */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nlost L\n",
                "t.ein:5:1: error: unknown statement 'lost' (a line starts with mesh, dim, input, param, output, repeat, loss, optimize or a tensor's definition)\n"
                "    lost L\n"
                "    ^\n");
    /* a hyperparameter given twice */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with sgd(lr=0.1, lr=0.2)\n",
                "t.ein:6:29: error: 'lr' is given twice\n"
                "    optimize W with sgd(lr=0.1, lr=0.2)\n"
                "                                ^\n");
    /* a param optimized twice: the error and a note at the first */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with sgd(lr=0.1)\noptimize W with adamw()\n",
                "t.ein:7:10: error: param 'W' is optimized twice\n"
                "    optimize W with adamw()\n"
                "             ^\n"
                "t.ein:6:10: note: it is first optimized here\n"
                "    optimize W with sgd(lr=0.1)\n"
                "             ^\n");
    /* a loss inside a repeated block */
    EXPECT_DIAG("dim L = 2, I = 4\ninput A[I] : f32\nparam W[L, I] : f32\nrepeat L {\n"
                "A[I] = A[I] * W[I]\nS[] = sum(A[I])\nloss S\n}\noutput A\n",
                "t.ein:7:1: error: 'loss' lines are written outside 'repeat' blocks\n"
                "    loss S\n"
                "    ^\n");
}

/* Learning-rate schedules and clipping: each bad value located at itself. */
static void test_schedule_errors(void)
{
    /* a fractional step count */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with adamw(lr=0.1, warmup_steps=2.5)\n",
                "t.ein:6:44: error: warmup_steps=2.5: warmup_steps is a whole number of steps\n"
                "    optimize W with adamw(lr=0.1, warmup_steps=2.5)\n"
                "                                               ^\n");
    /* an unknown decay */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with adamw(lr=0.1, decay=linear)\n",
                "t.ein:6:37: error: decay=linear: decay is constant or cosine\n"
                "    optimize W with adamw(lr=0.1, decay=linear)\n"
                "                                        ^\n");
    /* a cosine without its length */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with adamw(lr=0.1, decay=cosine)\n",
                "t.ein:6:31: error: decay=cosine needs decay_steps=N, the step where the lr reaches min_lr (warmup included)\n"
                "    optimize W with adamw(lr=0.1, decay=cosine)\n"
                "                                  ^\n");
    /* a cosine no longer than the warmup */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with sgd(lr=0.1, warmup_steps=5, decay=cosine, decay_steps=5)\n",
                "t.ein:6:71: error: decay_steps=5 must exceed warmup_steps=5: the cosine runs from the end of the warmup to step decay_steps\n"
                "    optimize W with sgd(lr=0.1, warmup_steps=5, decay=cosine, decay_steps=5)\n"
                "                                                                          ^\n");
    /* a floor above the peak */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with adamw(lr=0.1, decay=cosine, decay_steps=10, min_lr=0.5)\n",
                "t.ein:6:68: error: min_lr=0.5 exceeds lr=0.1: the cosine decays from lr down to min_lr\n"
                "    optimize W with adamw(lr=0.1, decay=cosine, decay_steps=10, min_lr=0.5)\n"
                "                                                                       ^\n");
    /* a clip of zero */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with sgd(lr=0.1, clip_norm=0)\n",
                "t.ein:6:39: error: clip_norm=0 is out of range: clip_norm takes a value in (0, inf)\n"
                "    optimize W with sgd(lr=0.1, clip_norm=0)\n"
                "                                          ^\n");
    /* a name for a number */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with sgd(lr=cosine)\n",
                "t.ein:6:24: error: lr=cosine: lr takes a number\n"
                "    optimize W with sgd(lr=cosine)\n"
                "                           ^\n");
    /* a cosine's length without the cosine */
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with adamw(decay_steps=100)\n",
                "t.ein:6:23: error: decay_steps is a parameter of the cosine decay: give decay=cosine too, or leave it out\n"
                "    optimize W with adamw(decay_steps=100)\n"
                "                          ^\n");
}

/* skip_nonfinite takes false or true, located at the value. */
static void test_skip_errors(void)
{
    EXPECT_DIAG("dim I = 4\ninput A[I] : f32\nparam W[I] : f32\nL[] = sum(A[I] * W[I])\nloss L\noptimize W with adamw(skip_nonfinite=yes)\n",
                "t.ein:6:38: error: skip_nonfinite=yes: skip_nonfinite is false or true\n"
                "    optimize W with adamw(skip_nonfinite=yes)\n"
                "                                         ^\n");
}

/* A nonlinear function of a product summed only outside it compiles, with
 * a warning at the function; a sum of exp, and a product inside a
 * parenthesis, get none. */
static void test_product_in_call_warning(void)
{
    fe_run r = fe_test_compile_str("dim B = 4, P = 8, H = 3\ninput X[B, P] : f32\nparam W[P, H] : f32\n"
                                   "param C[H] : f32\nY[B, H] = relu(X[B, P] * W[P, H] + C[H])\n"
                                   "E[B] = exp(X[B, P])\nQ[B, H] = (X[B, P] + 1) * W[P, H]\n"
                                   "output Y\noutput E\noutput Q\n",
                                   NULL);
    CU_ASSERT_PTR_NOT_NULL(r.m);
    CU_ASSERT_EQUAL(r.nerrors, 0);
    CU_ASSERT_STRING_EQUAL(r.diag, "t.ein:5:11: warning: relu is applied to each product of X and W, "
                                   "and then the statement sums over P: nothing is summed inside a "
                                   "call.  To apply relu to the contraction over P, write the "
                                   "contraction as a statement of its own\n"
                                   "    Y[B, H] = relu(X[B, P] * W[P, H] + C[H])\n"
                                   "              ^\n");
    fe_run_free(&r);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"undefined tensor", test_undefined_tensor},
        {"use before definition", test_use_before_definition},
        {"undefined dim", test_undefined_dim},
        {"index count mismatch", test_index_count},
        {"left index in no term", test_lhs_index_missing},
        {"unknown function", test_unknown_function},
        {"where without a comparison", test_where_without_comparison},
        {"comparison outside where", test_comparison_outside_where},
        {"index value errors", test_index_value_errors},
        {"argument count", test_argument_count},
        {"reduction errors", test_reduction_errors},
        {"gather errors", test_gather_errors},
        {"state write errors", test_state_errors},
        {"mesh axis used twice", test_axis_used_twice},
        {"mesh axis not in mesh", test_axis_not_in_mesh},
        {"dim not divisible by its axes", test_not_divisible},
        {"index size mismatch", test_index_size_mismatch},
        {"repeated index", test_repeated_index},
        {"bad dtype", test_bad_dtype},
        {"mixed dtypes", test_mixed_dtypes},
        {"duplicate definitions", test_duplicate_definitions},
        {"missing output", test_missing_output},
        {"syntax errors", test_syntax_error},
        {"NUL byte", test_nul_byte},
        {"invalid UTF-8", test_invalid_utf8},
        {"unexpected characters", test_unexpected_characters},
        {"sizes", test_sizes},
        {"subscript misuse", test_subscript_misuse},
        {"no tensor on the right", test_no_tensor_on_right},
        {"-D overrides", test_defines},
        {"all errors reported", test_all_errors_reported},
        {"error limit", test_error_limit},
        {"10 MB lines", test_long_lines},
        {"mesh over the runtime's limit", test_mesh_limit},
        {"mesh over the limit through -D", test_mesh_limit_define},
        {"mesh up to 2^20 devices for a cost-only compile", test_mesh_limit_cost_only},
        {"bad mesh axis size still defines it", test_bad_axis_size_defines_it},
        {"errors past the limit are counted", test_error_count},
        {"grad misuses", test_grad_errors},
        {"repeated blocks", test_repeat_errors},
        {"loss and optimize misuses", test_train_errors},
        {"lr schedule and clipping errors", test_schedule_errors},
        {"skip_nonfinite errors", test_skip_errors},
        {"a nonlinear function of a product", test_product_in_call_warning},
    };
    einc_add_suite("frontend errors", tests, (int)(sizeof tests / sizeof tests[0]));
}
