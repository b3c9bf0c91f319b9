/*
 * test_ir.c - the IR library: shardings in the seeds' notation, local sizes,
 * the verifier's rules (seed 001) and the dump formats.
 */
#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "ir.h"

/* A 2x2 mesh {X, Y} with dims I=8, J=16, K=4 and diagnostics to a buffer. */
typedef struct fixture {
    ir_module *m;
    int I, J, K;
    diag_ctx d;
    char *errs;
    size_t errs_len;
} fixture;

static void setup(fixture *f)
{
    memset(f, 0, sizeof *f);
    f->m = ir_module_new("t.ein");
    ir_mesh_add_axis(f->m, 'X', 2, 0);
    ir_mesh_add_axis(f->m, 'Y', 2, 0);
    f->I = ir_dim_add(f->m, "I", 8, 0);
    f->J = ir_dim_add(f->m, "J", 16, 0);
    f->K = ir_dim_add(f->m, "K", 4, 0);
    diag_init(&f->d, "t.ein", "", 0);
    f->d.out = open_memstream(&f->errs, &f->errs_len);
}

static void teardown(fixture *f)
{
    fclose(f->d.out);
    free(f->errs);
    ir_module_free(f->m);
}

/* Type over dims (d0, d1) with per-dim axis strings like "X", "XY", "". */
static ir_type type2(fixture *f, int d0, const char *s0, int d1, const char *s1)
{
    ir_type t;
    memset(&t, 0, sizeof t);
    t.dtype = IR_F32;
    t.rank = 2;
    t.dims[0] = d0;
    t.dims[1] = d1;
    for (const char *p = s0; *p; p++)
        ir_sharding_push(&t.sh, 0, ir_mesh_find_axis(&f->m->mesh, *p));
    for (const char *p = s1; *p; p++)
        ir_sharding_push(&t.sh, 1, ir_mesh_find_axis(&f->m->mesh, *p));
    return t;
}

/* Einsum c[I,K] = a[I,J] * b[J,K] with the given result type. */
static ir_op *matmul(fixture *f, ir_value *a, ir_value *b, ir_type rt)
{
    ir_value *c = ir_value_new(f->m, "C", IR_VAL_OP, &rt, 0);
    ir_value *ops[2] = {a, b};
    ir_op *op = ir_op_new(f->m, IR_OP_EINSUM, 2, ops, c, 0);
    op->u.einsum.labels[0][0] = f->I;
    op->u.einsum.labels[0][1] = f->J;
    op->u.einsum.labels[1][0] = f->J;
    op->u.einsum.labels[1][1] = f->K;
    op->u.einsum.result_labels[0] = f->I;
    op->u.einsum.result_labels[1] = f->K;
    ir_op_append(f->m, op);
    return op;
}

static int verify(fixture *f)
{
    int n = ir_verify(f->m, &f->d);
    fflush(f->d.out);
    return n;
}

static void test_type_str(void)
{
    fixture f;
    setup(&f);
    char buf[128];
    ir_type t = type2(&f, f.I, "XY", f.J, "");
    CU_ASSERT_STRING_EQUAL(ir_type_str(f.m, "A", &t, buf, sizeof buf), "A[I_XY, J]");
    t = type2(&f, f.I, "", f.J, "Y");
    t.sh.unreduced = 1u << 0;
    CU_ASSERT_STRING_EQUAL(ir_type_str(f.m, "A", &t, buf, sizeof buf), "A[I, J_Y]{U_X}");
    teardown(&f);
}

/* Seed 001 pop quiz: A[I_XY, J] holds |I|/(|X||Y|) x |J| per device. */
static void test_local_sizes(void)
{
    fixture f;
    setup(&f);
    ir_type t = type2(&f, f.I, "XY", f.J, "");
    CU_ASSERT_EQUAL(ir_local_size(f.m, &t, 0), 2);
    CU_ASSERT_EQUAL(ir_local_size(f.m, &t, 1), 16);
    CU_ASSERT_EQUAL(ir_local_bytes(f.m, &t), 2 * 16 * 4);
    CU_ASSERT_EQUAL(ir_global_bytes(f.m, &t), 8 * 16 * 4);
    teardown(&f);
}

/* A[I_X, J] . B[J, K_Y] -> C[I_X, K_Y] needs no communication (seed 001 case 1). */
static void test_verify_local_matmul(void)
{
    fixture f;
    setup(&f);
    ir_type ta = type2(&f, f.I, "X", f.J, ""), tb = type2(&f, f.J, "", f.K, "Y");
    ir_value *a = ir_value_new(f.m, "A", IR_VAL_INPUT, &ta, 0);
    ir_value *b = ir_value_new(f.m, "B", IR_VAL_INPUT, &tb, 0);
    matmul(&f, a, b, type2(&f, f.I, "X", f.K, "Y"));
    ir_output_add(f.m, "C", f.m->values[2], 0);
    CU_ASSERT_EQUAL(verify(&f), 0);
    teardown(&f);
}

/* A mesh axis's placement stays in range: 1..IR_MAX_PHYS physical axes,
 * and one over DCN. */
static void test_verify_axis_placement(void)
{
    fixture f;
    setup(&f);
    f.m->mesh.axes[0].phys = 2;
    CU_ASSERT_EQUAL(verify(&f), 0);
    f.m->mesh.axes[0].phys = IR_MAX_PHYS + 1;
    CU_ASSERT_EQUAL(verify(&f), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.errs, "mesh axis X spans 4 physical axes"));
    teardown(&f);
    setup(&f);
    f.m->mesh.axes[1].dcn = true;
    f.m->mesh.axes[1].phys = 2;
    CU_ASSERT_EQUAL(verify(&f), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.errs, "over DCN"));
    teardown(&f);
}

/* A[I, J_X] . B[J_X, K] -> C[I, K]{U_X} (seed 001 case 3); a bare output of it is an error. */
static void test_verify_unreduced(void)
{
    fixture f;
    setup(&f);
    ir_type ta = type2(&f, f.I, "", f.J, "X"), tb = type2(&f, f.J, "X", f.K, "");
    ir_value *a = ir_value_new(f.m, "A", IR_VAL_INPUT, &ta, 0);
    ir_value *b = ir_value_new(f.m, "B", IR_VAL_INPUT, &tb, 0);
    ir_type tc = type2(&f, f.I, "", f.K, "");
    tc.sh.unreduced = 1u << 0;
    ir_op *op = matmul(&f, a, b, tc);
    ir_output_add(f.m, "C", op->result, 0);
    CU_ASSERT_EQUAL(verify(&f), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.errs, "holds unreduced partial sums"));
    teardown(&f);
}

/* A[I, J_X] . B[J, K]: contracting dim sharded in one operand only (case 2). */
static void test_verify_contracting_one_side(void)
{
    fixture f;
    setup(&f);
    ir_type ta = type2(&f, f.I, "", f.J, "X"), tb = type2(&f, f.J, "", f.K, "");
    ir_value *a = ir_value_new(f.m, "A", IR_VAL_INPUT, &ta, 0);
    ir_value *b = ir_value_new(f.m, "B", IR_VAL_INPUT, &tb, 0);
    matmul(&f, a, b, type2(&f, f.I, "", f.K, ""));
    CU_ASSERT_EQUAL(verify(&f), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.errs, "not locally computable"));
    CU_ASSERT_PTR_NOT_NULL(strstr(f.errs, "J_X in operand 0 but J in operand 1"));
    teardown(&f);
}

/* A[I_X, J] . B[J, K_X]: two free dims on one axis (case 4). */
static void test_verify_free_dims_same_axis(void)
{
    fixture f;
    setup(&f);
    ir_type ta = type2(&f, f.I, "X", f.J, ""), tb = type2(&f, f.J, "", f.K, "X");
    ir_value *a = ir_value_new(f.m, "A", IR_VAL_INPUT, &ta, 0);
    ir_value *b = ir_value_new(f.m, "B", IR_VAL_INPUT, &tb, 0);
    matmul(&f, a, b, type2(&f, f.I, "X", f.K, ""));
    CU_ASSERT_EQUAL(verify(&f), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.errs, "mesh axis X shards both I and K"));
    teardown(&f);
}

static void test_verify_bad_values(void)
{
    fixture f;
    setup(&f);
    ir_type t = type2(&f, f.I, "X", f.J, "X"); /* axis used twice */
    ir_value_new(f.m, "A", IR_VAL_INPUT, &t, 0);
    ir_type t2 = type2(&f, f.K, "XY", f.J, ""); /* K=4 over 4: fine */
    ir_value_new(f.m, "B", IR_VAL_INPUT, &t2, 0);
    ir_dim_add(f.m, "P", 3, 0);
    ir_type t3 = type2(&f, 3, "X", f.J, ""); /* P=3 over X=2 */
    ir_value_new(f.m, "Q", IR_VAL_INPUT, &t3, 0);
    CU_ASSERT_EQUAL(verify(&f), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.errs, "mesh axis X used twice in A[I_X, J_X]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(f.errs, "dim P (3) of Q[P_X, J] is not divisible"));
    teardown(&f);
}

/* Each collective's result must be its operand's sharding transformed as
 * ir.h says; AllGather_Y of [I_XY, J] is [I_X, J] (seed 001). */
static void test_verify_collectives(void)
{
    fixture f;
    setup(&f);
    ir_type ta = type2(&f, f.I, "XY", f.J, "");
    ir_value *a = ir_value_new(f.m, "A", IR_VAL_INPUT, &ta, 0);
    ir_type tg = type2(&f, f.I, "X", f.J, "");
    ir_value *g = ir_value_new(f.m, "A", IR_VAL_OP, &tg, 0);
    ir_op *ag = ir_op_new(f.m, IR_OP_ALLGATHER, 1, &a, g, 0);
    ag->u.coll.naxes = 1;
    ag->u.coll.axes[0] = 1;
    ag->u.coll.dim = 0;
    ir_op_append(f.m, ag);
    /* AllToAll_X moves X from I to J: [I_X, J] -> [I, J_X]. */
    ir_type tt = type2(&f, f.I, "", f.J, "X");
    ir_value *t = ir_value_new(f.m, "A", IR_VAL_OP, &tt, 0);
    ir_op *a2a = ir_op_new(f.m, IR_OP_ALLTOALL, 1, &g, t, 0);
    a2a->u.coll.naxes = 1;
    a2a->u.coll.axes[0] = 0;
    a2a->u.coll.dim = 0;
    a2a->u.coll.dim2 = 1;
    ir_op_append(f.m, a2a);
    ir_output_add(f.m, "A", t, 0);
    CU_ASSERT_EQUAL(verify(&f), 0);
    /* Gathering X (not the minor-most axis of I_XY) is not an AllGather of ir.h. */
    ag->u.coll.axes[0] = 0;
    CU_ASSERT_EQUAL(verify(&f), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.errs, "minor-most"));
    teardown(&f);
}

/* Collective `k` over the axes named in `axes` ("XY") from `a` to a new
 * value of `a`'s tensor with type `rt`, appended; dims[i] (and dims2[i],
 * or NULL) is the dim of axis i, set as ir_coll_set_dims writes it. */
static ir_op *coll_op(fixture *f, ir_op_kind k, ir_value *a, ir_type rt, const char *axes,
                      const int8_t *dims, const int8_t *dims2)
{
    ir_value *r = ir_value_new(f->m, a->tensor, IR_VAL_OP, &rt, 0);
    ir_op *op = ir_op_new(f->m, k, 1, &a, r, 0);
    op->u.coll.naxes = (int)strlen(axes);
    for (int i = 0; axes[i]; i++)
        op->u.coll.axes[i] = (int8_t)ir_mesh_find_axis(&f->m->mesh, axes[i]);
    ir_coll_set_dims(&op->u.coll, dims, dims2);
    ir_op_append(f->m, op);
    return op;
}

/* What `print` (ir_print or ir_print_json) writes for `m` (malloc'd: the
 * caller frees it). */
static char *dump(ir_module *m, void (*print)(FILE *, ir_module *))
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    print(out, m);
    fclose(out);
    return text;
}

/* The --dump-ir=json of `m`, parsed (the caller frees it with cJSON_Delete). */
static cJSON *dump_json(ir_module *m)
{
    char *text = dump(m, ir_print_json);
    cJSON *root = cJSON_Parse(text);
    free(text);
    return root;
}

/* Asserts that the module of `f` has exactly one verifier error, saying
 * `why`, then tears `f` down. */
static void fails_once(fixture *f, const char *why)
{
    CU_ASSERT_EQUAL(verify(f), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(f->errs, why));
    teardown(f);
}

/* A collective whose axes work along different dims (seed 001's
 * AllGather_XY of [B_X, D_Y] -> [B, D]): one op over the group X x Y,
 * checked dim by dim; printed AllGather_XY, with the dims per axis in
 * JSON.  Per-axis dims that are all one dim, an AllToAll into a dim it
 * also takes axes from, and a gather of axes not at the end of their dim
 * are errors. */
static void test_verify_per_axis(void)
{
    const int8_t dims[2] = {0, 1}, swapped[2] = {1, 0};
    fixture f;
    setup(&f);
    ir_type ta = type2(&f, f.I, "X", f.J, "Y"), whole = type2(&f, f.I, "", f.J, "");
    ir_value *a = ir_value_new(f.m, "A", IR_VAL_INPUT, &ta, 0);
    ir_op *ag = coll_op(&f, IR_OP_ALLGATHER, a, whole, "XY", dims, NULL);
    CU_ASSERT_EQUAL(ag->u.coll.dim, IR_COLL_PER_AXIS);
    CU_ASSERT_EQUAL(ir_coll_dim(&ag->u.coll, 1), 1);
    ir_op_set_reason(f.m, ag, NULL, -1, "for A: output A[I, J]");
    ir_output_add(f.m, "A", ag->result, 0);
    CU_ASSERT_EQUAL(verify(&f), 0);

    char *text = dump(f.m, ir_print);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "A.1[I, J] = AllGather_XY A[I_X, J_Y]"));
    free(text);
    cJSON *root = dump_json(f.m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    cJSON *op0 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "ops"), 0);
    CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(op0, "dim"));
    cJSON *pd = cJSON_GetObjectItem(op0, "dims");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(pd), 2);
    CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(pd, 0)->valuestring, "I");
    CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(pd, 1)->valuestring, "J");
    cJSON_Delete(root);

    /* Both axes along I: one dim, written per axis. */
    ag->u.coll.dims[1] = 0;
    fails_once(&f, "all the same dim");

    /* [I_X, J_Y] -> [I_Y, J_X] by an AllToAll_XY taking X from I to J and
     * Y from J to I: each device's data goes to one other device (a
     * permutation, no AllToAll), and the op moves axes into dims it takes
     * axes from. */
    setup(&f);
    ir_type tb = type2(&f, f.I, "X", f.J, "Y"), ts = type2(&f, f.I, "Y", f.J, "X");
    coll_op(&f, IR_OP_ALLTOALL, ir_value_new(f.m, "B", IR_VAL_INPUT, &tb, 0), ts, "XY", dims, swapped);
    fails_once(&f, "moves axes into a dim it also takes axes from");

    /* [I_XY, J]: X is not the minor-most axis of I (and J has no Y). */
    setup(&f);
    ir_type tc = type2(&f, f.I, "XY", f.J, ""), none = type2(&f, f.I, "", f.J, "");
    coll_op(&f, IR_OP_ALLGATHER, ir_value_new(f.m, "C", IR_VAL_INPUT, &tc, 0), none, "XY", dims, NULL);
    fails_once(&f, "minor-most");
}

static void test_verify_constraint(void)
{
    fixture f;
    setup(&f);
    ir_type ta = type2(&f, f.I, "X", f.J, "");
    ir_value *a = ir_value_new(f.m, "A", IR_VAL_INPUT, &ta, 0);
    ir_output *o = ir_output_add(f.m, "A", a, 0);
    o->has_constraint = true;
    o->constraint = type2(&f, f.I, "", f.J, "").sh;
    CU_ASSERT_EQUAL(verify(&f), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.errs, "output A is A[I_X, J], not A[I, J]"));
    teardown(&f);
}

/* The dump formats: text in the seeds' notation, JSON with the documented keys. */
/* Loop op `k` over dim K reading `a`, with result type `rt`, appended;
 * `begin` is its loop's LoopBegin (NULL: the op is one). */
static ir_op *loop_op(fixture *f, ir_op_kind k, ir_value *a, ir_type rt, ir_op *begin)
{
    ir_value *r = ir_value_new(f->m, a->tensor, IR_VAL_OP, &rt, 0);
    ir_op *op = ir_op_new(f->m, k, 1, &a, r, 0);
    op->u.loop.dim = f->K;
    op->u.loop.begin = begin ? begin : op;
    ir_op_append(f->m, op);
    return op;
}

/* Slice_Y of `a` along position 1, appended. */
static ir_op *slice_y(fixture *f, ir_value *a)
{
    ir_type t = a->type;
    ir_sharding_push(&t.sh, 1, 1);
    ir_value *r = ir_value_new(f->m, a->tensor, IR_VAL_OP, &t, 0);
    ir_op *op = ir_op_new(f->m, IR_OP_SLICE, 1, &a, r, 0);
    op->u.coll.naxes = 1;
    op->u.coll.axes[0] = 1;
    op->u.coll.dim = 1;
    ir_op_append(f->m, op);
    return op;
}

/* A repeated block over K (4 trips): X[I_X, J] carried, W[K, I_X?, J]
 * sliced per layer.  `w0` shards W's first dim on X (not allowed);
 * `body_out` makes the body's new value X[I_X, J_Y] (not the carried
 * sharding); `leak` reads the layer slice after the loop.  Returns the
 * verifier's error count. */
static int verify_loop_case(fixture *f, bool w0, bool body_out, bool leak)
{
    ir_type xt = type2(f, f->I, "X", f->J, "");
    ir_value *x = ir_value_new(f->m, "X", IR_VAL_INPUT, &xt, 0);
    ir_type wt;
    memset(&wt, 0, sizeof wt);
    wt.dtype = IR_F32;
    wt.rank = 3;
    wt.dims[0] = f->K;
    wt.dims[1] = f->I;
    wt.dims[2] = f->J;
    ir_sharding_push(&wt.sh, w0 ? 0 : 1, 0);
    ir_value *w = ir_value_new(f->m, "W", IR_VAL_PARAM, &wt, 0);
    ir_op *b = loop_op(f, IR_OP_LOOPBEGIN, x, xt, NULL);
    ir_op *s = loop_op(f, IR_OP_LAYERSLICE, w, type2(f, f->I, w0 ? "" : "X", f->J, ""), b);
    ir_value *next = body_out ? slice_y(f, b->result)->result : b->result;
    ir_op *e = loop_op(f, IR_OP_LOOPEND, next, xt, b);
    b->u.loop.end = s->u.loop.end = e->u.loop.end = e;
    if (leak)
        slice_y(f, s->result);
    ir_output_add(f->m, "X", e->result, 0);
    CU_ASSERT_PTR_EQUAL(s->loop, b);
    CU_ASSERT_PTR_NULL(b->loop);
    CU_ASSERT_PTR_NULL(e->loop);
    CU_ASSERT_EQUAL(ir_op_trips(f->m, s), 4);
    CU_ASSERT_EQUAL(ir_op_trips(f->m, e), 1);
    return verify(f);
}

static void test_verify_loops(void)
{
    static const struct {
        bool w0, body_out, leak;
        const char *want; /* a part of the message, NULL for none */
    } cases[] = {
        {false, false, false, NULL},
        {true, false, false, "first dim is not the loop's dim, or is sharded"},
        {false, true, false, "not in the carried sharding"},
        {false, false, true, "defined in the body of a loop it is not in"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fixture f;
        setup(&f);
        int n = verify_loop_case(&f, cases[i].w0, cases[i].body_out, cases[i].leak);
        if (cases[i].want) {
            CU_ASSERT(n > 0);
            CU_ASSERT_PTR_NOT_NULL(f.errs ? strstr(f.errs, cases[i].want) : NULL);
        } else {
            CU_ASSERT_EQUAL(n, 0);
        }
        teardown(&f);
    }
}

/* A loop over K stacking its carried X[I_X, J] (LayerStack), and a
 * reverse loop reading the stack one layer at a time (LayerSlice).
 * `inside` reads the stack in its own loop; `bad_type` gives the stack
 * the wrong leading dim.  Returns the verifier's error count. */
static int verify_stack_case(fixture *f, bool inside, bool bad_type)
{
    ir_type xt = type2(f, f->I, "X", f->J, "");
    ir_value *x = ir_value_new(f->m, "X", IR_VAL_INPUT, &xt, 0);
    ir_op *b = loop_op(f, IR_OP_LOOPBEGIN, x, xt, NULL);
    ir_type st = xt;
    memmove(st.dims + 1, st.dims, 2 * sizeof st.dims[0]);
    memmove(st.sh.naxes + 1, st.sh.naxes, 2 * sizeof st.sh.naxes[0]);
    memmove(st.sh.axes + 1, st.sh.axes, 2 * sizeof st.sh.axes[0]);
    st.dims[0] = bad_type ? f->I : f->K;
    st.sh.naxes[0] = 0;
    st.rank = 3;
    ir_op *s = loop_op(f, IR_OP_LAYERSTACK, b->result, st, b);
    if (inside)
        loop_op(f, IR_OP_LAYERSLICE, s->result, xt, b);
    ir_op *e = loop_op(f, IR_OP_LOOPEND, b->result, xt, b);
    for (ir_op *op = b; op; op = op->next)
        op->u.loop.end = e;
    ir_op *b2 = loop_op(f, IR_OP_LOOPBEGIN, e->result, xt, NULL);
    b2->u.loop.reverse = true;
    ir_op *ls = loop_op(f, IR_OP_LAYERSLICE, s->result, xt, b2);
    ir_op *e2 = loop_op(f, IR_OP_LOOPEND, b2->result, xt, b2);
    b2->u.loop.end = ls->u.loop.end = e2->u.loop.end = e2;
    ir_output_add(f->m, "X", e2->result, 0);
    char *text = dump(f->m, ir_print);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "LoopBegin(K = 4, reverse)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "= LayerStack(K) X.1[I_X, J]"));
    free(text);
    return verify(f);
}

static void test_verify_stacks(void)
{
    static const struct {
        bool inside, bad_type;
        const char *want; /* a part of the message, NULL for none */
    } cases[] = {
        {false, false, NULL},
        {true, false, "the LayerStack of the loop it is in, before the loop has filled it"},
        {false, true, "not the operand with the loop's dim in front"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fixture f;
        setup(&f);
        int n = verify_stack_case(&f, cases[i].inside, cases[i].bad_type);
        if (cases[i].want) {
            CU_ASSERT(n > 0);
            CU_ASSERT_PTR_NOT_NULL(f.errs ? strstr(f.errs, cases[i].want) : NULL);
        } else {
            CU_ASSERT_EQUAL(n, 0);
            if (n)
                fprintf(stderr, "%s", f.errs);
        }
        teardown(&f);
    }
}

/* A loop over K whose body sums X[I_X, J_Y] over J, unreduced over Y
 * with reduction `red`, and stacks the partial sums [K, I_X]{U_Y}; after
 * the loop `reader` reads the stack: an AllReduce_Y (the reduction a
 * pipelined step's deferred gradient collective is) or a LayerSlice of
 * a reverse loop (which would drop the partial sums).  Returns the
 * verifier's error count. */
static int verify_summed_stack_case(fixture *f, ir_reduce red, ir_op_kind reader)
{
    ir_type xt = type2(f, f->I, "X", f->J, "");
    ir_value *x = ir_value_new(f->m, "X", IR_VAL_INPUT, &xt, 0);
    ir_op *b = loop_op(f, IR_OP_LOOPBEGIN, x, xt, NULL);
    ir_value *xy = slice_y(f, b->result)->result;
    ir_type pt = type2(f, f->I, "X", f->J, "");
    pt.rank = 1;
    pt.sh.unreduced = 1u << 1;
    pt.sh.red = (uint8_t)red;
    ir_value *p = ir_value_new(f->m, "P", IR_VAL_OP, &pt, 0);
    ir_op *sum = ir_op_new(f->m, IR_OP_EINSUM, 1, &xy, p, 0);
    sum->u.einsum.labels[0][0] = f->I;
    sum->u.einsum.labels[0][1] = f->J;
    sum->u.einsum.result_labels[0] = f->I;
    sum->u.einsum.reduce = red;
    ir_op_append(f->m, sum);
    ir_type st = type2(f, f->K, "", f->I, "X");
    st.sh.unreduced = pt.sh.unreduced;
    st.sh.red = pt.sh.red;
    ir_op *s = loop_op(f, IR_OP_LAYERSTACK, p, st, b);
    ir_op *e = loop_op(f, IR_OP_LOOPEND, b->result, xt, b);
    for (ir_op *op = b; op; op = op->next)
        op->u.loop.end = e;
    if (reader == IR_OP_ALLREDUCE) {
        const int8_t none[1] = {-1}; /* an AllReduce has no dim */
        ir_op *ar = coll_op(f, IR_OP_ALLREDUCE, s->result, type2(f, f->K, "", f->I, "X"), "Y", none, NULL);
        ar->u.coll.reduce = red;
        ir_output_add(f->m, "S", ar->result, 0);
    } else {
        ir_type it = type2(f, f->I, "X", f->J, "");
        it.rank = 1;
        ir_op *b2 = loop_op(f, IR_OP_LOOPBEGIN, e->result, xt, NULL);
        b2->u.loop.reverse = true;
        ir_op *ls = loop_op(f, reader, s->result, it, b2);
        ir_op *e2 = loop_op(f, IR_OP_LOOPEND, b2->result, xt, b2);
        b2->u.loop.end = ls->u.loop.end = e2->u.loop.end = e2;
    }
    ir_output_add(f->m, "X", e->result, 0);
    return verify(f);
}

/* A LayerStack holds partial sums only when they add and only reductions
 * read the stack (ir/verify_loop.c): partial maxima, or a stack sliced
 * back into a loop, are refused. */
static void test_verify_summed_stacks(void)
{
    static const struct {
        ir_reduce red;
        ir_op_kind reader;
        const char *want; /* a part of the message, NULL for none */
    } cases[] = {
        {IR_RED_SUM, IR_OP_ALLREDUCE, NULL},
        {IR_RED_MAX, IR_OP_ALLREDUCE, "stacks unreduced partial sums that are not summed"},
        {IR_RED_SUM, IR_OP_LAYERSLICE, "an op other than a collective reducing them reads"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fixture f;
        setup(&f);
        int n = verify_summed_stack_case(&f, cases[i].red, cases[i].reader);
        if (cases[i].want) {
            CU_ASSERT(n > 0);
            CU_ASSERT_PTR_NOT_NULL(f.errs ? strstr(f.errs, cases[i].want) : NULL);
        } else {
            CU_ASSERT_EQUAL(n, 0);
        }
        if ((n > 0) != (cases[i].want != NULL))
            fprintf(stderr, "case %zu: %s", i, f.errs ? f.errs : "");
        teardown(&f);
    }
}

static void test_print(void)
{
    fixture f;
    setup(&f);
    ir_type ta = type2(&f, f.I, "", f.J, "X"), tb = type2(&f, f.J, "X", f.K, "");
    ir_value *a = ir_value_new(f.m, "A", IR_VAL_INPUT, &ta, 0);
    ir_value *b = ir_value_new(f.m, "B", IR_VAL_PARAM, &tb, 0);
    ir_type tc = type2(&f, f.I, "", f.K, "");
    tc.sh.unreduced = 1u << 0;
    ir_op *mm = matmul(&f, a, b, tc);
    ir_type tr = type2(&f, f.I, "X", f.K, "");
    ir_value *r = ir_value_new(f.m, "C", IR_VAL_OP, &tr, 0);
    ir_value *c = mm->result;
    ir_op *rs = ir_op_new(f.m, IR_OP_REDUCESCATTER, 1, &c, r, 0);
    rs->u.coll.naxes = 1;
    rs->u.coll.axes[0] = 0;
    rs->u.coll.dim = 0;
    ir_op_set_reason(f.m, rs, mm, -1, "for %s: output wants I_X", "C");
    ir_op_append(f.m, rs);
    ir_output_add(f.m, "C", r, 0);
    CU_ASSERT_EQUAL(verify(&f), 0);

    char *text = dump(f.m, ir_print);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "param B[J_X, K] : f32"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "C[I, K]{U_X} = einsum(ij,jk->ik) A[I, J_X], B[J_X, K]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "C.1[I_X, K] = ReduceScatter_X C[I, K]{U_X}   # for C: output wants I_X; 0.00 MiB/device"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "output C[I_X, K] = C.1"));
    free(text);

    cJSON *root = dump_json(f.m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    cJSON *ops = cJSON_GetObjectItem(root, "ops");
    CU_ASSERT_EQUAL(cJSON_GetArraySize(ops), 2);
    cJSON *op1 = cJSON_GetArrayItem(ops, 1);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(op1, "op")->valuestring, "ReduceScatter");
    CU_ASSERT_STRING_EQUAL(cJSON_GetArrayItem(cJSON_GetObjectItem(op1, "axes"), 0)->valuestring, "X");
    cJSON *res = cJSON_GetObjectItem(op1, "result");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(res, "name")->valuestring, "C.1");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(res, "tensor")->valuestring, "C");
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(res, "type")->valuestring, "C[I_X, K]");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(res, "bytes_per_device")->valuedouble, 4 * 4 * 4);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(op1, "reason")->valuestring, "for C: output wants I_X");
    CU_ASSERT_EQUAL(cJSON_GetObjectItem(cJSON_GetObjectItem(op1, "for"), "op")->valueint, 0);
    cJSON_Delete(root);
    teardown(&f);
}

/* Diagnostics: file:line:col, the line, and a caret under the byte. */
static void test_diag(void)
{
    const char *src = "mesh X = 2\ndim B = 3, Q = 4\n";
    char *text = NULL;
    size_t len = 0;
    diag_ctx d;
    diag_init(&d, "m.ein", src, strlen(src));
    d.out = open_memstream(&text, &len);
    diag_error(&d, 15, "dim '%s' is odd", "B");
    fclose(d.out);
    CU_ASSERT_STRING_EQUAL(text, "m.ein:2:5: error: dim 'B' is odd\n    dim B = 3, Q = 4\n        ^\n");
    CU_ASSERT_EQUAL(d.nerrors, 1);
    free(text);
}

/* Every op kind has a name, operand counts and the ir layer's hooks, and
 * the trait bits agree with the kind predicates. */
static void test_op_traits(void)
{
    for (int k = 0; k < IR_OP_COUNT; k++) {
        const ir_op_traits *t = ir_op_traits_of((ir_op_kind)k);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t->name);
        CU_ASSERT(t->name[0] != 0 && strcmp(t->name, ir_op_name((ir_op_kind)k)) == 0);
        CU_ASSERT(t->min_operands >= 0 && t->min_operands <= t->max_operands &&
                  t->max_operands <= IR_MAX_OPERANDS);
        CU_ASSERT(t->verify && t->print && t->json);
        CU_ASSERT_EQUAL(ir_op_is_reshard((ir_op_kind)k), (t->traits & IR_TRAIT_RESHARD) != 0);
        CU_ASSERT_EQUAL(ir_op_is_loop((ir_op_kind)k), (t->traits & IR_TRAIT_LOOP) != 0);
        for (int j = 0; j < k; j++)
            CU_ASSERT(strcmp(t->name, ir_op_name((ir_op_kind)j)) != 0);
    }
    CU_ASSERT_PTR_NULL(ir_op_traits_of(IR_OP_COUNT));
    CU_ASSERT_STRING_EQUAL(ir_op_name(IR_OP_COUNT), "?");
    CU_ASSERT_FALSE(ir_op_has_trait(IR_OP_COUNT, 0));
}

/* Whether v's use-list holds (op, i) exactly `n` times. */
static bool has_use(const ir_value *v, const ir_op *op, int i, int n)
{
    int c = 0;
    for (int k = 0; k < v->nuses; k++)
        c += v->uses[k].op == op && v->uses[k].operand == i;
    return c == n;
}

/* An AllGather_X of `a` ([I_X, J] -> [I, J]) for the use-list tests. */
static ir_op *gather_x(fixture *f, ir_value *a)
{
    ir_type t = type2(f, f->I, "", f->J, "");
    ir_value *g = ir_value_new(f->m, "G", IR_VAL_OP, &t, 0);
    ir_op *op = ir_op_new(f->m, IR_OP_ALLGATHER, 1, &a, g, 0);
    op->u.coll.naxes = 1;
    op->u.coll.axes[0] = 0;
    op->u.coll.dim = 0;
    return op;
}

/* A fixture with inputs A[I_X, J] and B[J, K], for the use-list tests. */
static void use_inputs(fixture *f, ir_value **a, ir_value **b)
{
    setup(f);
    ir_type ta = type2(f, f->I, "X", f->J, ""), tb = type2(f, f->J, "", f->K, "");
    *a = ir_value_new(f->m, "A", IR_VAL_INPUT, &ta, 0);
    *b = ir_value_new(f->m, "B", IR_VAL_INPUT, &tb, 0);
}

/* Use-lists follow append, insert, operand rewrites, replace and remove,
 * and the verifier accepts them at every step. */
static void test_use_lists(void)
{
    fixture f;
    ir_value *a, *b;
    use_inputs(&f, &a, &b);
    ir_op *g1 = gather_x(&f, a);
    CU_ASSERT_EQUAL(a->nuses, 0); /* not linked yet: no use */
    ir_op_append(f.m, g1);
    ir_op *mm = matmul(&f, g1->result, b, type2(&f, f.I, "", f.K, ""));
    ir_output_add(f.m, "C", mm->result, 0);
    CU_ASSERT(a->nuses == 1 && has_use(a, g1, 0, 1));
    CU_ASSERT(g1->result->nuses == 1 && has_use(g1->result, mm, 0, 1));
    CU_ASSERT(b->nuses == 1 && has_use(b, mm, 1, 1));
    CU_ASSERT_EQUAL(mm->result->nuses, 0); /* an output is no use */
    CU_ASSERT_EQUAL(verify(&f), 0);

    /* A second gather inserted before the einsum takes over its reads. */
    ir_op *g2 = gather_x(&f, a);
    ir_op_insert_before(f.m, mm, g2);
    ir_replace_uses(f.m, g1->result, g2->result, g2);
    CU_ASSERT(a->nuses == 2 && has_use(a, g1, 0, 1) && has_use(a, g2, 0, 1));
    CU_ASSERT_EQUAL(g1->result->nuses, 0);
    CU_ASSERT(g2->result->nuses == 1 && has_use(g2->result, mm, 0, 1));
    CU_ASSERT_EQUAL(verify(&f), 0);

    /* The unread first gather goes; moving the second keeps its uses. */
    ir_op_remove(f.m, g1);
    CU_ASSERT(a->nuses == 1 && has_use(a, g2, 0, 1));
    ir_op_remove(f.m, g2);
    CU_ASSERT_EQUAL(a->nuses, 0);
    ir_op_insert_after(f.m, NULL, g2);
    CU_ASSERT(a->nuses == 1 && has_use(a, g2, 0, 1));
    CU_ASSERT_EQUAL(verify(&f), 0);

    /* ir_op_set_operand moves the use from the old value to the new. */
    ir_op *g3 = gather_x(&f, a);
    ir_op_insert_after(f.m, g2, g3);
    ir_op_set_operand(f.m, mm, 0, g3->result);
    CU_ASSERT_EQUAL(g2->result->nuses, 0);
    CU_ASSERT(g3->result->nuses == 1 && has_use(g3->result, mm, 0, 1));
    CU_ASSERT_EQUAL(verify(&f), 0);
    teardown(&f);
}

/* The verifier reports a use-list that an operand write bypassed, and one
 * that names a use twice. */
static void test_verify_stale_uses(void)
{
    fixture f;
    ir_value *a, *b;
    use_inputs(&f, &a, &b);
    ir_op *g1 = gather_x(&f, a), *g2 = gather_x(&f, a);
    ir_op_append(f.m, g1);
    ir_op_append(f.m, g2);
    ir_op *mm = matmul(&f, g1->result, b, type2(&f, f.I, "", f.K, ""));
    ir_output_add(f.m, "C", mm->result, 0);
    CU_ASSERT_EQUAL(verify(&f), 0);
    mm->operands[0] = g2->result; /* behind the use-lists' back */
    CU_ASSERT(verify(&f) > 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(f.errs, "use-list"));
    mm->operands[0] = g1->result;
    CU_ASSERT_EQUAL(verify(&f), 0);
    b->uses[b->nuses++] = b->uses[0]; /* b's only use, twice (cap >= 4) */
    CU_ASSERT(verify(&f) > 0);
    teardown(&f);
}

/* The einsum rule of seed 001: free dims keep their axes, a contracted
 * dim's axes become unreduced with the einsum's reduction, and the
 * operands' partial sums stay; the verifier gives the same answer. */
static void test_einsum_rule(void)
{
    fixture f;
    setup(&f);
    /* Labels 0 = I (X), 1 = J (Y, contracted), 2 = K (whole). */
    int lnaxes[3] = {1, 1, 0};
    int8_t laxes[3][IR_MAX_AXES] = {{0}, {1}, {0}};
    bool in_op[3] = {true, true, true};
    int rl[2] = {0, 2};
    ir_sharding s;
    ir_axes c = ir_einsum_sharding(3, lnaxes, (const int8_t(*)[IR_MAX_AXES])laxes, in_op, 2, rl, 0,
                                   IR_RED_MAX, &s);
    CU_ASSERT_EQUAL(c, 1u << 1);
    CU_ASSERT(s.naxes[0] == 1 && s.axes[0][0] == 0 && s.naxes[1] == 0);
    CU_ASSERT(s.unreduced == (1u << 1) && s.red == IR_RED_MAX);
    /* Nothing contracted: operands' sums stay sums. */
    int rl3[3] = {0, 1, 2};
    c = ir_einsum_sharding(3, lnaxes, (const int8_t(*)[IR_MAX_AXES])laxes, in_op, 3, rl3, 0, IR_RED_MAX, &s);
    CU_ASSERT(c == 0 && s.red == IR_RED_SUM && s.naxes[1] == 1 && s.axes[1][0] == 1);
    /* The verifier's rule on A[I_X, J_Y] . B[J_Y, K] is the same. */
    ir_type ta = type2(&f, f.I, "X", f.J, "Y"), tb = type2(&f, f.J, "Y", f.K, "");
    ir_value *a = ir_value_new(f.m, "A", IR_VAL_INPUT, &ta, 0);
    ir_value *b = ir_value_new(f.m, "B", IR_VAL_INPUT, &tb, 0);
    ir_op *mm = matmul(&f, a, b, type2(&f, f.I, "X", f.K, ""));
    ir_sharding v;
    CU_ASSERT_TRUE(ir_op_local_sharding(f.m, mm, &v, NULL, 0));
    CU_ASSERT(v.naxes[0] == 1 && v.axes[0][0] == 0 && v.naxes[1] == 0 && v.unreduced == (1u << 1) &&
              v.red == IR_RED_SUM);
    teardown(&f);
}

/* CollectivePermute (ir.h, the perm arm): a shift along one mesh axis of
 * a value that axis does not split; the verifier rejects an axis the mesh
 * lacks, a shift of 0 or of the axis' size or more, and an operand split
 * over (or partial over) the axis; the printers list the pairs. */
static void test_verify_permute(void)
{
    fixture f;
    setup(&f);
    ir_type ta = type2(&f, f.I, "Y", f.J, "");
    ir_value *a = ir_value_new(f.m, "A", IR_VAL_INPUT, &ta, 0);
    ir_value *r = ir_value_new(f.m, "A", IR_VAL_OP, &ta, 0);
    ir_op *op = ir_op_new(f.m, IR_OP_PERMUTE, 1, &a, r, 0);
    op->u.perm.axis = 0;
    op->u.perm.delta = 1;
    ir_op_append(f.m, op);
    ir_output_add(f.m, "A", r, 0);
    CU_ASSERT_EQUAL(verify(&f), 0);
    CU_ASSERT_EQUAL(ir_perm_target(f.m, op, 0), 1);
    CU_ASSERT_EQUAL(ir_perm_target(f.m, op, 1), -1);
    char *text = dump(f.m, ir_print);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "A.1[I_Y, J] = CollectivePermute_X(+1: 0->1) A[I_Y, J]"));
    free(text);
    op->u.perm.cyclic = true;
    CU_ASSERT_EQUAL(ir_perm_target(f.m, op, 1), 0);
    cJSON *root = dump_json(f.m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    char *js = cJSON_PrintUnformatted(root);
    CU_ASSERT_PTR_NOT_NULL(strstr(js, "\"op\":\"CollectivePermute\",\"phase\":\"forward\",\"axes\":[\"X\"],"
                                      "\"delta\":1,\"cyclic\":true,\"pairs\":[[0,1],[1,0]]"));
    free(js);
    cJSON_Delete(root);
    op->u.perm.cyclic = false;
    static const struct {
        int axis, delta;
        const char *why;
    } bad[] = {
        {4, 1, "CollectivePermute along mesh axis 4, which the mesh (2 axes) does not have"},
        {-1, 1, "which the mesh (2 axes) does not have"},
        {0, 2, "CollectivePermute_X shifts by 2, but along X (2 devices) a shift is 1 to 1 positions"},
        {0, -2, "shifts by -2"},
        {0, 0, "shifts by 0"},
        {1, 1, "CollectivePermute_Y moves blocks along Y, which splits its operand"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        op->u.perm.axis = bad[k].axis;
        op->u.perm.delta = bad[k].delta;
        fclose(f.d.out);
        free(f.errs);
        f.errs = NULL;
        f.d.out = open_memstream(&f.errs, &f.errs_len);
        CU_ASSERT_EQUAL(verify(&f), 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(f.errs, bad[k].why));
    }
    /* Partial sums over the axis cannot move either. */
    ir_type tu = type2(&f, f.I, "", f.J, "");
    tu.sh.unreduced = 1u << 0;
    a->type = tu;
    r->type = tu;
    op->u.perm.axis = 0;
    op->u.perm.delta = -1;
    fclose(f.d.out);
    free(f.errs);
    f.errs = NULL;
    f.d.out = open_memstream(&f.errs, &f.errs_len);
    CU_ASSERT(verify(&f) >= 1); /* the output holding partial sums is a second error */
    CU_ASSERT_PTR_NOT_NULL(strstr(f.errs, "CollectivePermute_X moves blocks along X"));
    teardown(&f);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"verify: mesh axis placement", test_verify_axis_placement},
        {"type_str", test_type_str},
        {"local_sizes", test_local_sizes},
        {"verify_local_matmul", test_verify_local_matmul},
        {"verify_unreduced", test_verify_unreduced},
        {"verify_contracting_one_side", test_verify_contracting_one_side},
        {"verify_free_dims_same_axis", test_verify_free_dims_same_axis},
        {"verify_bad_values", test_verify_bad_values},
        {"verify_collectives", test_verify_collectives},
        {"verify_per_axis", test_verify_per_axis},
        {"verify_permute", test_verify_permute},
        {"verify_constraint", test_verify_constraint},
        {"verify_loops", test_verify_loops},
        {"verify_stacks", test_verify_stacks},
        {"verify_summed_stacks", test_verify_summed_stacks},
        {"print", test_print},
        {"diag", test_diag},
        {"op_traits", test_op_traits},
        {"use_lists", test_use_lists},
        {"verify_stale_uses", test_verify_stale_uses},
        {"einsum_rule", test_einsum_rule},
    };
    einc_add_suite("ir", tests, (int)(sizeof tests / sizeof tests[0]));
}
