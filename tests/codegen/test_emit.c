/*
 * test_emit.c - codegen planning (fusion, liveness), error reporting, and
 * the emitted LLVM IR / object of the hand-built cases.  Running the
 * executables against NumPy is e2e.py's job.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cg_cases.h"
#include "cg_internal.h"
#include "cunit_main.h"

/* A diag context that writes into a temporary file we can read back. */
typedef struct cap {
    diag_ctx d; /* the context */
    char *text; /* what was reported, after cap_done (malloc'd) */
} cap;

static void cap_init(cap *c)
{
    diag_init(&c->d, "<test>", "", 0);
    c->d.out = tmpfile();
    c->text = NULL;
}

static char *read_all(FILE *f)
{
    fflush(f);
    long n = ftell(f);
    char *s = calloc((size_t)(n > 0 ? n : 0) + 1, 1);
    rewind(f);
    if (n > 0 && fread(s, 1, (size_t)n, f) != (size_t)n)
        s[0] = 0;
    return s;
}

static void cap_done(cap *c)
{
    c->text = read_all(c->d.out);
    fclose(c->d.out);
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    char *s = read_all(f);
    fclose(f);
    return s;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* Emits case `name` (with its reference) at `opt` as `kind`; returns the
 * file's text (.ll) or its first bytes (object), or NULL on failure. */
static char *emit_case(const char *name, int opt, cg_output_kind kind, bool with_ref)
{
    char path[] = "/tmp/cg_test_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return NULL;
    close(fd);
    ir_module *m = cg_case_build(name, false);
    ir_module *r = with_ref ? cg_case_build(name, true) : NULL;
    cg_options o = {.output = path, .kind = kind, .opt_level = opt, .source_name = name};
    cap c;
    cap_init(&c);
    int rc = cg_emit(m, r, &o, &c.d);
    cap_done(&c);
    if (rc != 0)
        fprintf(stderr, "cg_emit(%s) failed:\n%s\n", name, c.text);
    free(c.text);
    char *text = rc == 0 ? read_file(path) : NULL;
    unlink(path);
    ir_module_free(m);
    if (r)
        ir_module_free(r);
    return text;
}

/* Builds case `name` and its plan; NULL (after printing why) on failure. */
static ir_module *plan_case(const char *name, cg_plan *p)
{
    ir_module *m = cg_case_build(name, false);
    cap c;
    cap_init(&c);
    int rc = cg_plan_build(p, m, &c.d);
    cap_done(&c);
    if (rc != 0) {
        fprintf(stderr, "plan(%s): %s\n", name, c.text);
        cg_plan_free(p);
        ir_module_free(m);
        m = NULL;
    }
    free(c.text);
    return m;
}

static void test_cases_verify(void)
{
    for (int i = 0; cg_case_names[i]; i++)
        for (int ref = 0; ref < 2; ref++) {
            ir_module *m = cg_case_build(cg_case_names[i], ref);
            cap c;
            cap_init(&c);
            int n = ir_verify(m, &c.d);
            cap_done(&c);
            if (n)
                fprintf(stderr, "%s%s: %s\n", cg_case_names[i], ref ? " (ref)" : "", c.text);
            CU_ASSERT_EQUAL(n, 0);
            free(c.text);
            ir_module_free(m);
        }
}

static void test_plan_fusion(void)
{
    cg_plan p;
    ir_module *m = plan_case("ew_fused", &p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    /* ops: T1, T2, T3, U, V */
    CU_ASSERT_EQUAL(p.nops, 5);
    CU_ASSERT_EQUAL(p.fused_into[0], 2); /* T1 = A*B into T3, through T2 */
    CU_ASSERT_EQUAL(p.fused_into[1], 2); /* T2 = exp(T1) into T3 */
    CU_ASSERT_EQUAL(p.fused_into[2], -1); /* T3 is an output */
    CU_ASSERT_EQUAL(p.fused_into[3], -1); /* U is read twice by V */
    CU_ASSERT_EQUAL(p.fused_into[4], -1);
    /* A is read by T1 (emitted in T3, op 2) and by U (op 3). */
    int A = 0, B = 1, C = 2;
    CU_ASSERT_EQUAL(p.last_use[A], 3);
    CU_ASSERT_EQUAL(p.last_use[B], 2);
    CU_ASSERT_EQUAL(p.last_use[C], 2);
    CU_ASSERT_EQUAL(p.last_use[p.ops[3]->result->id], 4);
    CU_ASSERT_EQUAL(p.ninputs, 3);
    CU_ASSERT_EQUAL(p.out_index[p.ops[2]->result->id], 0);
    CU_ASSERT_EQUAL(p.out_index[p.ops[4]->result->id], 1);
    cg_plan_free(&p);
    ir_module_free(m);
}

static void test_plan_inplace(void)
{
    cg_plan p;
    ir_module *m = plan_case("ew_inplace", &p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    /* ops: U, V, W0, W, G.  W0 = tanh(A) is fused into W. */
    CU_ASSERT_EQUAL(p.nops, 5);
    CU_ASSERT_EQUAL(p.fused_into[2], 3);
    CU_ASSERT_EQUAL(p.reuse[0], -1);                      /* A is an input */
    CU_ASSERT_EQUAL(p.reuse[1], p.ops[0]->result->id);    /* V takes U's buffer */
    CU_ASSERT_EQUAL(p.reuse[3], p.ops[1]->result->id);    /* W takes V's buffer */
    CU_ASSERT_EQUAL(p.reuse[4], -1);                      /* an einsum */
    cg_plan_free(&p);
    ir_module_free(m);
}

static void test_plan_outputs(void)
{
    cg_plan p;
    ir_module *m = plan_case("identity", &p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(p.out_index[0], 0); /* A is outputs 0 and 1: the first counts */
    CU_ASSERT_EQUAL(p.out_index[p.ops[0]->result->id], 2);
    CU_ASSERT_EQUAL(p.input_index[0], 0);
    CU_ASSERT_EQUAL(p.input_index[p.ops[0]->result->id], -1);
    cg_plan_free(&p);
    ir_module_free(m);
}

/* A module with one 3-operand einsum: codegen refuses it with a message. */
static void test_error_einsum_arity(void)
{
    ir_module *m = ir_module_new("bad");
    int I = ir_dim_add(m, "I", 4, 0);
    ir_type t = {.dtype = IR_F32, .rank = 1, .dims = {I}, .sh = ir_sharding_replicated()};
    ir_value *a = ir_value_new(m, "a", IR_VAL_INPUT, &t, 0);
    ir_type s = {.dtype = IR_F32, .rank = 0, .sh = ir_sharding_replicated()};
    ir_value *r = ir_value_new(m, "r", IR_VAL_OP, &s, 0);
    ir_value *ops[3] = {a, a, a};
    ir_op *op = ir_op_new(m, IR_OP_EINSUM, 3, ops, r, 0);
    for (int k = 0; k < 3; k++)
        op->u.einsum.labels[k][0] = I;
    ir_op_append(m, op);
    ir_output_add(m, "r", r, 0);
    cg_options o = {.output = "/tmp/cg_never_written.ll", .kind = CG_EMIT_LLVM};
    cap c;
    cap_init(&c);
    CU_ASSERT_EQUAL(cg_emit(m, NULL, &o, &c.d), -1);
    cap_done(&c);
    CU_ASSERT_EQUAL(c.d.nerrors, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.text, "Einsum with 3 operands"));
    CU_ASSERT_EQUAL(access(o.output, F_OK), -1);
    free(c.text);
    ir_module_free(m);
}

/* Elementwise on operands whose per-device blocks differ: an error, not a
 * wrong answer. */
static void test_error_ew_sharding(void)
{
    ir_module *m = ir_module_new("bad");
    int X = ir_mesh_add_axis(m, 'X', 2, 0);
    int I = ir_dim_add(m, "I", 4, 0);
    ir_type ts = {.dtype = IR_F32, .rank = 1, .dims = {I}, .sh = ir_sharding_replicated()};
    ir_type tr = ts;
    ir_sharding_push(&ts.sh, 0, X);
    ir_value *a = ir_value_new(m, "a", IR_VAL_INPUT, &ts, 0);
    ir_value *b = ir_value_new(m, "b", IR_VAL_INPUT, &tr, 0);
    ir_value *r = ir_value_new(m, "r", IR_VAL_OP, &ts, 0);
    ir_value *ops[2] = {a, b};
    ir_op *op = ir_op_new(m, IR_OP_ELEMENTWISE, 2, ops, r, 0);
    op->u.ew.labels[0][0] = op->u.ew.labels[1][0] = op->u.ew.result_labels[0] = I;
    ir_ew_node nodes[3] = {{.kind = IR_EW_OPERAND, .operand = 0},
                           {.kind = IR_EW_OPERAND, .operand = 1},
                           {.kind = IR_EW_ADD, .a = 0, .b = 1}};
    op->u.ew.nodes = nodes;
    op->u.ew.nnodes = 3;
    op->u.ew.root = 2;
    ir_op_append(m, op);
    ir_output_add(m, "r", r, 0);
    cg_options o = {.output = "/tmp/cg_never_written.ll", .kind = CG_EMIT_LLVM};
    cap c;
    cap_init(&c);
    CU_ASSERT_EQUAL(cg_emit(m, NULL, &o, &c.d), -1);
    cap_done(&c);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.text, "per device"));
    /* A cycle in the expression tree is refused too. */
    nodes[2].b = 2;
    free(c.text);
    cap_init(&c);
    CU_ASSERT_EQUAL(cg_emit(m, NULL, &o, &c.d), -1);
    cap_done(&c);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.text, "malformed"));
    free(c.text);
    ir_module_free(m);
}

/* An expression DAG whose nodes are shared (x1 = x0 + x0, x2 = x1 + x1,
 * ...): each node is checked and emitted once, not once per path (2^60). */
static void test_shared_nodes(void)
{
    ir_module *m = ir_module_new("dag");
    int I = ir_dim_add(m, "I", 16, 0);
    ir_type t = {.dtype = IR_F32, .rank = 1, .dims = {I}, .sh = ir_sharding_replicated()};
    ir_value *a = ir_value_new(m, "a", IR_VAL_INPUT, &t, 0);
    ir_value *r = ir_value_new(m, "r", IR_VAL_OP, &t, 0);
    ir_op *op = ir_op_new(m, IR_OP_ELEMENTWISE, 1, &a, r, 0);
    op->u.ew.labels[0][0] = op->u.ew.result_labels[0] = I;
    enum { LEVELS = 60 };
    ir_ew_node *nodes = ir_alloc(&m->arena, sizeof *nodes * (LEVELS + 1));
    nodes[0] = (ir_ew_node){.kind = IR_EW_OPERAND, .operand = 0};
    for (int i = 1; i <= LEVELS; i++)
        nodes[i] = (ir_ew_node){.kind = IR_EW_ADD, .a = i - 1, .b = i - 1};
    op->u.ew.nodes = nodes;
    op->u.ew.nnodes = LEVELS + 1;
    op->u.ew.root = LEVELS;
    ir_op_append(m, op);
    ir_output_add(m, "r", r, 0);
    char path[] = "/tmp/cg_dag_XXXXXX";
    int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    cg_options o = {.output = path, .kind = CG_EMIT_LLVM, .opt_level = 0};
    cap c;
    cap_init(&c);
    CU_ASSERT_EQUAL(cg_emit(m, NULL, &o, &c.d), 0);
    cap_done(&c);
    free(c.text);
    char *ll = read_file(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ll);
    CU_ASSERT_EQUAL(count(ll, " = fadd float "), LEVELS);
    CU_ASSERT_EQUAL(count(ll, " = load float, "), 1);
    free(ll);
    unlink(path);
    ir_module_free(m);
}

/* A runtime library the linker rejects: the linker's own words reach the
 * user and no executable is left behind. */
static void test_error_linker(void)
{
    char dir[] = "/tmp/cg_rt_XXXXXX";
    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
    char lib[64], exe[64];
    snprintf(lib, sizeof lib, "%s/libeinrt.a", dir);
    snprintf(exe, sizeof exe, "%s/prog", dir);
    FILE *f = fopen(lib, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs("this is not an archive\n", f);
    fclose(f);
    ir_module *m = cg_case_build("identity", false);
    cg_options o = {.output = exe, .kind = CG_EMIT_EXE, .opt_level = 0, .runtime_dir = dir};
    cap c;
    cap_init(&c);
    CU_ASSERT_EQUAL(cg_emit(m, NULL, &o, &c.d), -1);
    cap_done(&c);
    CU_ASSERT_EQUAL(c.d.nerrors, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.text, "failed (cc exited with status"));
    CU_ASSERT_PTR_NOT_NULL(strstr(c.text, "libeinrt.a")); /* from the linker's message */
    CU_ASSERT_EQUAL(access(exe, F_OK), -1);
    free(c.text);
    ir_module_free(m);
    unlink(lib);
    CU_ASSERT_EQUAL(rmdir(dir), 0); /* the temporary object is gone too */
}

/* A dim that does not split evenly over its mesh axes is refused (the
 * verifier should have caught it; codegen does not trust it to). */
static void test_error_uneven(void)
{
    ir_module *m = cg_case_build("ew_broadcast", false);
    m->dims[1].size = 7; /* J = 7 over Y = 2 */
    cg_options o = {.output = "/tmp/cg_never_written.ll", .kind = CG_EMIT_LLVM};
    cap c;
    cap_init(&c);
    CU_ASSERT_EQUAL(cg_emit(m, NULL, &o, &c.d), -1);
    cap_done(&c);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.text, "dim 'J' of 'A' (size 7) does not split into 2"));
    free(c.text);
    ir_module_free(m);
}

/* An output still holding {U_X} partial sums is refused. */
static void test_error_unreduced_output(void)
{
    ir_module *m = cg_case_build("collectives", false);
    /* Make P (the einsum's {U_X} result) an output too. */
    ir_output_add(m, "P", m->first->next->result, 0);
    cg_options o = {.output = "/tmp/cg_never_written.ll", .kind = CG_EMIT_LLVM};
    cap c;
    cap_init(&c);
    CU_ASSERT_EQUAL(cg_emit(m, NULL, &o, &c.d), -1);
    cap_done(&c);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.text, "output 'P' holds unreduced partial sums"));
    free(c.text);
    ir_module_free(m);
}

static void test_error_options(void)
{
    ir_module *m = cg_case_build("identity", false);
    cg_options o = {.output = "/tmp/cg_never_written", .kind = CG_EMIT_EXE, .opt_level = 9};
    cap c;
    cap_init(&c);
    CU_ASSERT_EQUAL(cg_emit(m, NULL, &o, &c.d), -1);
    o.opt_level = 1;
    o.runtime_dir = "/nonexistent/einc-runtime";
    CU_ASSERT_EQUAL(cg_emit(m, NULL, &o, &c.d), -1);
    cap_done(&c);
    CU_ASSERT_EQUAL(c.d.nerrors, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.text, "optimisation level 9"));
    CU_ASSERT_PTR_NOT_NULL(strstr(c.text, "/nonexistent/einc-runtime/libeinrt.a' not found"));
    CU_ASSERT_EQUAL(access(o.output, F_OK), -1);
    free(c.text);
    ir_module_free(m);
}

/* Every case emits verified IR at O0 and O3, with the program globals. */
static void test_emit_all_cases(void)
{
    for (int i = 0; cg_case_names[i]; i++)
        for (int opt = 0; opt <= 3; opt += 3) {
            char *ll = emit_case(cg_case_names[i], opt, CG_EMIT_LLVM, true);
            CU_ASSERT_PTR_NOT_NULL_FATAL(ll);
            CU_ASSERT_PTR_NOT_NULL(strstr(ll, "@einc_program = "));
            CU_ASSERT_PTR_NOT_NULL(strstr(ll, "constant %rt_program"));
            CU_ASSERT_PTR_NOT_NULL(strstr(ll, "@einc_program_reference = private constant"));
            free(ll);
        }
}

/* The run function at O0: one rt_op_begin per op, one scratch buffer for U
 * (T1 and T2 are fused into T3; T3 and V are outputs), freed once. */
static void test_emit_buffers(void)
{
    char *ll = emit_case("ew_fused", 0, CG_EMIT_LLVM, false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ll);
    CU_ASSERT_EQUAL(count(ll, "call ptr @rt_alloc("), 1);
    CU_ASSERT_EQUAL(count(ll, "call void @rt_free("), 1);
    CU_ASSERT_EQUAL(count(ll, "call void @rt_op_begin("), 3); /* T3, U, V */
    /* exp and sigmoid's exp, each inline in f32 (one floor of its range
     * reduction apiece), not a call */
    CU_ASSERT_EQUAL(count(ll, "call float @llvm.floor.f32("), 2);
    CU_ASSERT_EQUAL(count(ll, "call float @llvm.exp.f32("), 0);
    free(ll);
    ll = emit_case("collectives", 0, CG_EMIT_LLVM, false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ll);
    CU_ASSERT_EQUAL(count(ll, "call void @rt_collective("), 4);
    CU_ASSERT_EQUAL(count(ll, "call void @rt_einsum("), 1); /* over M = 1024: a GEMM */
    CU_ASSERT_EQUAL(count(ll, "call void @rt_op_begin("), 5);
    /* P is read by the AllReduce and the ReduceScatter; P2 is an output. */
    CU_ASSERT_EQUAL(count(ll, "call ptr @rt_alloc("), 1);
    CU_ASSERT_EQUAL(count(ll, "call void @rt_free("), 1);
    free(ll);
    /* U is allocated once; V and W reuse it; it is freed after G. */
    ll = emit_case("ew_inplace", 0, CG_EMIT_LLVM, false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ll);
    CU_ASSERT_EQUAL(count(ll, "call ptr @rt_alloc("), 1);
    CU_ASSERT_EQUAL(count(ll, "call void @rt_free("), 1);
    free(ll);
    /* C sums K = 4 products per element: a loop nest, no rt_einsum */
    ll = emit_case("einsum", 0, CG_EMIT_LLVM, false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ll);
    CU_ASSERT_EQUAL(count(ll, "call void @rt_einsum("), 0);
    free(ll);
    ll = emit_case("identity", 0, CG_EMIT_LLVM, false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ll);
    CU_ASSERT_EQUAL(count(ll, "call void @llvm.memcpy"), 3); /* A0, A1, N1 */
    free(ll);
}

/* At O3 the innermost elementwise loop is vectorised. */
static void test_emit_vectorised(void)
{
    char *ll = emit_case("ew_wide", 3, CG_EMIT_LLVM, false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ll);
    CU_ASSERT_PTR_NOT_NULL(strstr(ll, " x float>"));
    free(ll);
    /* and not at O0 */
    ll = emit_case("ew_wide", 0, CG_EMIT_LLVM, false);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ll);
    CU_ASSERT_PTR_NULL(strstr(ll, " x float>"));
    free(ll);
}

static void test_emit_object(void)
{
    char *obj = emit_case("einsum", 2, CG_EMIT_OBJ, true);
    CU_ASSERT_PTR_NOT_NULL_FATAL(obj);
    CU_ASSERT_EQUAL(memcmp(obj, "\177ELF", 4), 0);
    free(obj);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"hand-built cases verify", test_cases_verify},
        {"fusion and liveness plan", test_plan_fusion},
        {"outputs and inputs in the plan", test_plan_outputs},
        {"in-place elementwise plan", test_plan_inplace},
        {"einsum arity error", test_error_einsum_arity},
        {"elementwise sharding mismatch error", test_error_ew_sharding},
        {"bad options and runtime dir", test_error_options},
        {"unreduced output error", test_error_unreduced_output},
        {"uneven split error", test_error_uneven},
        {"linker failure passed through", test_error_linker},
        {"shared expression nodes emitted once", test_shared_nodes},
        {"every case emits at O0 and O3", test_emit_all_cases},
        {"buffers, fusion and markers in the run function", test_emit_buffers},
        {"elementwise loop vectorised at O3", test_emit_vectorised},
        {"object file", test_emit_object},
    };
    einc_add_suite("codegen emission", tests, (int)(sizeof tests / sizeof tests[0]));
}
