/*
 * cg_cases.c - the hand-built modules of cg_cases.h.
 *
 * Values are declared with a sharding spec in the seeds' notation written
 * as text: "I_X J" is [I_X, J], "I_XY" splits I over X then Y, and a
 * trailing "{X}" marks unreduced partial sums over X.  Dims: I=8, J=6,
 * K=4, L=2, M=1024.
 */
#include <stdlib.h>
#include <string.h>

#include "cg_cases.h"

const char *const cg_case_names[] = {
    "ew_broadcast", "ew_funcs", "ew_fused", "einsum", "collectives", "alltoall",
    "bf16", "f64", "identity", "ew_wide", "ew_inplace", NULL,
};

/* One module being built. */
typedef struct cb {
    ir_module *m; /* the module */
    bool ref;     /* building the one-device reference */
} cb;

/* An elementwise expression under construction. */
typedef struct ewb {
    ir_ew_node nodes[64]; /* nodes; the last one added is the root */
    int n;                /* nodes used */
} ewb;

static int node(ewb *e, ir_ew_node x)
{
    e->nodes[e->n] = x;
    return e->n++;
}
static int E_op(ewb *e, int k) { return node(e, (ir_ew_node){.kind = IR_EW_OPERAND, .operand = k}); }
static int E_c(ewb *e, double v) { return node(e, (ir_ew_node){.kind = IR_EW_CONST, .value = v}); }
static int E_add(ewb *e, int a, int b) { return node(e, (ir_ew_node){.kind = IR_EW_ADD, .a = a, .b = b}); }
static int E_sub(ewb *e, int a, int b) { return node(e, (ir_ew_node){.kind = IR_EW_SUB, .a = a, .b = b}); }
static int E_mul(ewb *e, int a, int b) { return node(e, (ir_ew_node){.kind = IR_EW_MUL, .a = a, .b = b}); }
static int E_fn(ewb *e, ir_func f, int a) { return node(e, (ir_ew_node){.kind = IR_EW_CALL, .fn = f, .a = a}); }

/* Parses a spec ("I_X J_Y {X}") into `t`; shardings dropped in ref mode. */
static ir_type ty(cb *b, ir_dtype dt, const char *spec)
{
    ir_type t = {.dtype = dt, .sh = ir_sharding_replicated()};
    for (const char *s = spec; *s;) {
        if (*s == ' ') {
            s++;
            continue;
        }
        if (*s == '{') {
            for (s++; *s && *s != '}'; s++)
                if (!b->ref)
                    t.sh.unreduced |= 1u << ir_mesh_find_axis(&b->m->mesh, *s);
            if (*s)
                s++;
            continue;
        }
        int d = t.rank++;
        t.dims[d] = ir_dim_find(b->m, s, 1);
        s++;
        if (*s == '_')
            for (s++; *s && *s != ' '; s++)
                if (!b->ref)
                    ir_sharding_push(&t.sh, d, ir_mesh_find_axis(&b->m->mesh, *s));
    }
    return t;
}

static ir_value *in(cb *b, const char *name, ir_dtype dt, const char *spec, bool param)
{
    ir_type t = ty(b, dt, spec);
    return ir_value_new(b->m, name, param ? IR_VAL_PARAM : IR_VAL_INPUT, &t, 0);
}

static void labels_of(const ir_value *v, int *labels)
{
    for (int j = 0; j < v->type.rank; j++)
        labels[j] = v->type.dims[j];
}

static ir_value *ew(cb *b, const char *name, const char *spec, int n, ir_value **ops,
                    const ewb *e)
{
    ir_type t = ty(b, ops[0]->type.dtype, spec);
    ir_value *r = ir_value_new(b->m, name, IR_VAL_OP, &t, 0);
    ir_op *op = ir_op_new(b->m, IR_OP_ELEMENTWISE, n, ops, r, 0);
    for (int k = 0; k < n; k++)
        labels_of(ops[k], op->u.ew.labels[k]);
    labels_of(r, op->u.ew.result_labels);
    op->u.ew.nnodes = e->n;
    op->u.ew.nodes = ir_alloc(&b->m->arena, sizeof(ir_ew_node) * (size_t)e->n);
    memcpy(op->u.ew.nodes, e->nodes, sizeof(ir_ew_node) * (size_t)e->n);
    op->u.ew.root = e->n - 1;
    ir_op_append(b->m, op);
    return r;
}

/* One-function elementwise op fn(a). */
static ir_value *ew_fn(cb *b, const char *name, const char *spec, ir_value *a, ir_func f)
{
    ewb e = {.n = 0};
    E_fn(&e, f, E_op(&e, 0));
    return ew(b, name, spec, 1, &a, &e);
}

static ir_value *einsum(cb *b, const char *name, const char *spec, ir_value *a, ir_value *x,
                        double scale)
{
    ir_type t = ty(b, a->type.dtype, spec);
    ir_value *r = ir_value_new(b->m, name, IR_VAL_OP, &t, 0);
    ir_value *ops[2] = {a, x};
    ir_op *op = ir_op_new(b->m, IR_OP_EINSUM, x ? 2 : 1, ops, r, 0);
    labels_of(a, op->u.einsum.labels[0]);
    if (x)
        labels_of(x, op->u.einsum.labels[1]);
    labels_of(r, op->u.einsum.result_labels);
    op->u.einsum.scale = scale;
    ir_op_append(b->m, op);
    return r;
}

/* A reshard op; in ref mode the operand itself (no collectives there). */
static ir_value *coll(cb *b, ir_op_kind kind, const char *name, const char *spec, ir_value *v,
                      const char *axes, int dim, int dim2)
{
    if (b->ref)
        return v;
    ir_type t = ty(b, v->type.dtype, spec);
    ir_value *r = ir_value_new(b->m, name, IR_VAL_OP, &t, 0);
    ir_op *op = ir_op_new(b->m, kind, 1, &v, r, 0);
    op->u.coll.naxes = (int)strlen(axes);
    for (int k = 0; axes[k]; k++)
        op->u.coll.axes[k] = (int8_t)ir_mesh_find_axis(&b->m->mesh, axes[k]);
    op->u.coll.dim = dim;
    op->u.coll.dim2 = dim2;
    ir_op_append(b->m, op);
    return r;
}

static void out(cb *b, const char *name, ir_value *v)
{
    ir_output_add(b->m, name, v, 0);
}

/* C = A * B + 1.5 with B[J] broadcast over I; D = Et[J, I] - A (transposed read). */
static void case_ew_broadcast(cb *b)
{
    ir_value *A = in(b, "A", IR_F32, "I_X J_Y", false);
    ir_value *B = in(b, "B", IR_F32, "J_Y", false);
    ir_value *Et = in(b, "Et", IR_F32, "J_Y I_X", false);
    ewb e = {.n = 0};
    E_add(&e, E_mul(&e, E_op(&e, 0), E_op(&e, 1)), E_c(&e, 1.5));
    ir_value *ab[] = {A, B};
    out(b, "C", ew(b, "C", "I_X J_Y", 2, ab, &e));
    ewb f = {.n = 0};
    E_sub(&f, E_op(&f, 0), E_op(&f, 1));
    ir_value *ea[] = {Et, A};
    out(b, "D", ew(b, "D", "I_X J_Y", 2, ea, &f));
}

/* Every function of IR_FUNCS on A[I_X, J]; log/sqrt/rsqrt on A*A + 1. */
static void case_ew_funcs(cb *b)
{
    ir_value *A = in(b, "A", IR_F32, "I_X J", false);
    ewb e = {.n = 0};
    E_add(&e, E_mul(&e, E_op(&e, 0), E_op(&e, 0)), E_c(&e, 1.0));
    ir_value *P = ew(b, "P", "I_X J", 1, &A, &e);
    out(b, "P", P);
    static const struct { ir_func f; const char *name; bool pos; } fns[] = {
        {IR_FN_EXP, "exp", false},   {IR_FN_LOG, "log", true},
        {IR_FN_TANH, "tanh", false}, {IR_FN_RELU, "relu", false},
        {IR_FN_GELU, "gelu", false}, {IR_FN_SILU, "silu", false},
        {IR_FN_SIGMOID, "sigmoid", false}, {IR_FN_SQRT, "sqrt", true},
        {IR_FN_RSQRT, "rsqrt", true}, {IR_FN_NEG, "neg", false},
        {IR_FN_SIN, "sin", false},   {IR_FN_COS, "cos", false},
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        out(b, fns[i].name, ew_fn(b, fns[i].name, "I_X J", fns[i].pos ? P : A, fns[i].f));
}

/* T1 = A * B (B[J] broadcast), T2 = exp(T1), T3 = T2 + C: T1 and T2 fuse
 * into T3's loop; U = sigmoid(A) is read twice, so it gets a buffer. */
static void case_ew_fused(cb *b)
{
    ir_value *A = in(b, "A", IR_F32, "I_X J_Y", false);
    ir_value *B = in(b, "B", IR_F32, "J_Y", false);
    ir_value *C = in(b, "C", IR_F32, "I_X J_Y", false);
    ewb e = {.n = 0};
    E_mul(&e, E_op(&e, 0), E_op(&e, 1));
    ir_value *ab[] = {A, B};
    ir_value *T1 = ew(b, "T1", "I_X J_Y", 2, ab, &e);
    ir_value *T2 = ew_fn(b, "T2", "I_X J_Y", T1, IR_FN_EXP);
    ewb g = {.n = 0};
    E_add(&g, E_op(&g, 0), E_op(&g, 1));
    ir_value *tc[] = {T2, C};
    out(b, "T3", ew(b, "T3", "I_X J_Y", 2, tc, &g));
    ir_value *U = ew_fn(b, "U", "I_X J_Y", A, IR_FN_SIGMOID);
    ewb h = {.n = 0};
    E_mul(&h, E_op(&h, 0), E_op(&h, 1));
    ir_value *uu[] = {U, U};
    out(b, "V", ew(b, "V", "I_X J_Y", 2, uu, &h));
}

/* Local contractions: C[I_X, J_Y] = A[I_X, K] W[K, J_Y];
 * S[I_X] = 0.5 sum_J C, which sums a dim split over Y, so it is {U_Y}
 * until an AllReduce over Y; G[J_Y, I_X] = C transposed by a unary einsum. */
static void case_einsum(cb *b)
{
    ir_value *A = in(b, "A", IR_F32, "I_X K", false);
    ir_value *W = in(b, "W", IR_F32, "K J_Y", true);
    ir_value *C = einsum(b, "C", "I_X J_Y", A, W, 1.0);
    out(b, "C", C);
    ir_value *S = einsum(b, "S", "I_X {Y}", C, NULL, 0.5);
    out(b, "S", coll(b, IR_OP_ALLREDUCE, "S1", "I_X", S, "Y", -1, -1));
    out(b, "G", einsum(b, "G", "J_Y I_X", C, NULL, 1.0));
}

static void case_collectives(cb *b)
{
    /* AllGather: A[I_X, J_Y] -> A1[I_X, J] over Y. */
    ir_value *A = in(b, "A", IR_F32, "I_X J_Y", false);
    out(b, "AG", coll(b, IR_OP_ALLGATHER, "A1", "I_X J", A, "Y", 1, -1));
    /* P[I, J]{U_X} = X[I, M_X] W[M_X, J]; AllReduce and ReduceScatter it.
     * M is long enough for a GEMM (rt_einsum); the other cases' einsums
     * over K = 4 are unrolled loop nests (ir_einsum_unrolled_terms). */
    ir_value *X = in(b, "X", IR_F32, "I M_X", false);
    ir_value *W = in(b, "W", IR_F32, "M_X J", true);
    ir_value *P = einsum(b, "P", "I J {X}", X, W, 1.0);
    out(b, "AR", coll(b, IR_OP_ALLREDUCE, "P1", "I J", P, "X", -1, -1));
    ir_value *R = coll(b, IR_OP_REDUCESCATTER, "P2", "I_X J", P, "X", 0, -1);
    out(b, "RS", R);
    /* Slice: R[I_X, J] -> [I_X, J_Y], no communication. */
    out(b, "SL", coll(b, IR_OP_SLICE, "P3", "I_X J_Y", R, "Y", 1, -1));
}

static void case_alltoall(cb *b)
{
    /* [I_X, J] -> [I, J_X]: I grows, J is split. */
    ir_value *A = in(b, "A", IR_F32, "I_X J", false);
    ir_value *T = coll(b, IR_OP_ALLTOALL, "A1", "I J_X", A, "X", 0, 1);
    /* And an elementwise use after it, on the new sharding. */
    ir_value *B = in(b, "B", IR_F32, "I J_X", false);
    ewb e = {.n = 0};
    E_add(&e, E_op(&e, 0), E_op(&e, 1));
    ir_value *tb[] = {T, B};
    out(b, "S", ew(b, "S", "I J_X", 2, tb, &e));
}

static void case_bf16(cb *b)
{
    ir_value *A = in(b, "A", IR_BF16, "I_X K", false);
    ir_value *W = in(b, "W", IR_BF16, "K J_Y", true);
    ir_value *C = einsum(b, "C", "I_X J_Y", A, W, 1.0);
    out(b, "G", ew_fn(b, "G", "I_X J_Y", C, IR_FN_GELU));
}

static void case_f64(cb *b)
{
    ir_value *A = in(b, "A", IR_F64, "I_X K", false);
    ir_value *W = in(b, "W", IR_F64, "K J_Y", true);
    ir_value *C = einsum(b, "C", "I_X J_Y", A, W, 2.0);
    ewb e = {.n = 0};
    E_sub(&e, E_fn(&e, IR_FN_TANH, E_op(&e, 0)), E_mul(&e, E_c(&e, 0.25), E_op(&e, 0)));
    out(b, "H", ew(b, "H", "I_X J_Y", 1, &C, &e));
}

/* An input that is an output twice, and an op result that is two outputs. */
static void case_identity(cb *b)
{
    ir_value *A = in(b, "A", IR_F32, "I_X J_Y", false);
    out(b, "A0", A);
    out(b, "A1", A);
    ir_value *N = ew_fn(b, "N", "I_X J_Y", A, IR_FN_NEG);
    out(b, "N0", N);
    out(b, "N1", N);
}

/* A long contiguous innermost dim, for the vectoriser: S = relu(A) * B + A
 * with B[M] broadcast over I. */
static void case_ew_wide(cb *b)
{
    ir_value *A = in(b, "A", IR_F32, "I_X M_Y", false);
    ir_value *B = in(b, "B", IR_F32, "M_Y", false);
    ewb e = {.n = 0};
    int a = E_op(&e, 0);
    E_add(&e, E_mul(&e, E_fn(&e, IR_FN_RELU, a), E_op(&e, 1)), a);
    ir_value *ab[] = {A, B};
    out(b, "S", ew(b, "S", "I_X M_Y", 2, ab, &e));
}

/* U = sigmoid(A) is read twice by V = U * U, so it has a buffer; V writes
 * into U's buffer (U dies at V); W = V * V + B[J] + tanh(A) (tanh fused)
 * writes into V's; G = W^T by a unary einsum is the output. */
static void case_ew_inplace(cb *b)
{
    ir_value *A = in(b, "A", IR_F32, "I_X J_Y", false);
    ir_value *B = in(b, "B", IR_F32, "J_Y", false);
    ir_value *U = ew_fn(b, "U", "I_X J_Y", A, IR_FN_SIGMOID);
    ewb e = {.n = 0};
    E_mul(&e, E_op(&e, 0), E_op(&e, 1));
    ir_value *uu[] = {U, U};
    ir_value *V = ew(b, "V", "I_X J_Y", 2, uu, &e);
    ir_value *W0 = ew_fn(b, "W0", "I_X J_Y", A, IR_FN_TANH);
    ewb g = {.n = 0};
    E_add(&g, E_add(&g, E_mul(&g, E_op(&g, 0), E_op(&g, 0)), E_op(&g, 1)), E_op(&g, 2));
    ir_value *vb[] = {V, B, W0};
    ir_value *W = ew(b, "W", "I_X J_Y", 3, vb, &g);
    out(b, "G", einsum(b, "G", "J_Y I_X", W, NULL, 1.0));
}

ir_module *cg_case_build(const char *name, bool reference)
{
    static const struct { const char *name; void (*fn)(cb *); } cases[] = {
        {"ew_broadcast", case_ew_broadcast}, {"ew_funcs", case_ew_funcs},
        {"ew_fused", case_ew_fused},         {"einsum", case_einsum},
        {"collectives", case_collectives},   {"alltoall", case_alltoall},
        {"bf16", case_bf16},                 {"f64", case_f64},
        {"identity", case_identity},         {"ew_wide", case_ew_wide},
        {"ew_inplace", case_ew_inplace},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(cases[i].name, name) != 0)
            continue;
        cb b = {.m = ir_module_new(name), .ref = reference};
        ir_mesh_add_axis(b.m, 'X', reference ? 1 : 2, 0);
        ir_mesh_add_axis(b.m, 'Y', reference ? 1 : 2, 0);
        ir_dim_add(b.m, "I", 8, 0);
        ir_dim_add(b.m, "J", 6, 0);
        ir_dim_add(b.m, "K", 4, 0);
        ir_dim_add(b.m, "L", 2, 0);
        ir_dim_add(b.m, "M", 1024, 0);
        cases[i].fn(&b);
        return b.m;
    }
    return NULL;
}
