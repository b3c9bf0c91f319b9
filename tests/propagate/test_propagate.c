/*
 * test_propagate.c - the propagation pass on the cases of seed 001 and the
 * training strategies of seed 000.
 *
 * Every test builds IR with the builder (prop_fixture.c), runs
 * pass_propagate, requires ir_verify to pass (every op locally computable,
 * every constraint met), and checks the exact list of inserted ops.
 */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cunit_main.h"
#include "pass.h"
#include "prop_fixture.h"

/* Runs the pass, requires success and a clean verify, returns the ops. */
static const char *run(ir_module *m, char *buf, int size)
{
    int verr = 0;
    int e = fx_run(m, &verr);
    CU_ASSERT_EQUAL(e, 0);
    CU_ASSERT_EQUAL(verr, 0);
    fx_collectives(m, buf, size);
    if (getenv("PROP_DEBUG")) {
        fprintf(stderr, "[%s]\n", buf);
        ir_print(stderr, m);
    }
    return buf;
}

/* C = A * B on mesh `mesh` with dims `dims`, output written as `out`
 * ("C" or "C[...]"); checks the inserted ops and the output's type and
 * returns the module for further checks (the caller frees it). */
static ir_module *matmul(const char *mesh, const char *dims, const char *a, const char *b, const char *out,
                         const char *want_ops, const char *want_out)
{
    ir_module *m = fx_module(mesh, dims);
    ir_value *va = fx_input(m, a);
    ir_value *vb = fx_input(m, b);
    ir_value *c = fx_einsum(m, "C[I, K]", va, vb);
    fx_output(m, out, c);
    char buf[512], ty[128];
    CU_ASSERT_STRING_EQUAL(run(m, buf, sizeof buf), want_ops);
    CU_ASSERT_STRING_EQUAL(fx_output_type(m, 0, ty, sizeof ty), want_out);
    return m;
}

/* Case 1: no contracting dim sharded -> local, result follows inputs. */
static void test_case1_local(void)
{
    ir_module_free(matmul("X=2,Y=2", "I=64,J=32,K=16", "A[I_X, J]", "B[J, K_Y]", "C", "", "C[I_X, K_Y]"));
}

/* Case 2: contracting dim sharded in one operand -> AllGather it, when
 * gathering moves fewer bytes than seed 001 Q9's alternative. */
static void test_case2_gather_contracting(void)
{
    ir_module *m = matmul("X=2", "I=256,J=256,K=1024", "A[I, J_X]", "B[J, K]", "C", "AllGather_X(A)", "C[I, K]");
    ir_op *ag = fx_find(m, IR_OP_ALLGATHER);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ag);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ag->reason);
    CU_ASSERT_PTR_NOT_NULL(strstr(ag->reason, "for C = A * B: contracting J sharded on X in A only"));
    CU_ASSERT_EQUAL(ag->for_operand, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ag->for_op);
    CU_ASSERT_EQUAL(ag->for_op->kind, IR_OP_EINSUM);
    /* 256x256 f32 gathered over 2: 256 KiB * 1/2 */
    CU_ASSERT_DOUBLE_EQUAL(fx_bytes_moved(m), 262144.0 * 0.5, 1e-6);
    ir_module_free(m);
}

/* Seed 001 Q9: with a small result, slicing B along J, computing partial
 * sums and reducing C moves fewer bytes than gathering A. */
static void test_q9_slice_and_reduce(void)
{
    ir_module *m = matmul("X=2", "I=256,J=1024,K=8", "A[I, J_X]", "B[J, K]", "C", "Slice_X(B) AllReduce_X(C)",
                          "C[I, K]");
    ir_op *sl = fx_find(m, IR_OP_SLICE);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sl);
    CU_ASSERT_PTR_NOT_NULL(strstr(sl->reason, "Q9"));
    /* AllReduce of 256x8 f32 over 2 = 2 * 8 KiB * 1/2; gathering A would
     * have cost 1 MiB * 1/2. */
    CU_ASSERT_DOUBLE_EQUAL(fx_bytes_moved(m), 8192.0, 1e-6);
    ir_module_free(m);
}

/* Case 3: contracting dim sharded on the same axis in both -> {U_X};
 * a bare output resolves it with AllReduce. */
static void test_case3_allreduce_for_bare_output(void)
{
    ir_module_free(matmul("X=2", "I=64,J=64,K=32", "A[I, J_X]", "B[J_X, K]", "C", "AllReduce_X(C)", "C[I, K]"));
}

/* Case 3 with a sharded output constraint -> ReduceScatter, not
 * AllReduce + Slice (seed 001: "ReduceScatter defers the AllGather"). */
static void test_case3_reduce_scatter_for_constraint(void)
{
    ir_module_free(matmul("X=2", "I=64,J=64,K=32", "A[I, J_X]", "B[J_X, K]", "C[I, K_X]", "ReduceScatter_X(C)",
                          "C[I, K_X]"));
}

/* A nonlinear consumer whose output is wanted sharded: the backward sweep
 * makes C's partial sums land as ReduceScatter into what gelu needs. */
static void test_nonlinear_consumer_reduce_scatter(void)
{
    ir_module *m = fx_module("X=2", "I=64,J=64,K=32");
    ir_value *a = fx_input(m, "A[I, J_X]");
    ir_value *b = fx_input(m, "B[J_X, K]");
    ir_value *c = fx_einsum(m, "C[I, K]", a, b);
    ir_value *g = fx_call(m, "G[I, K]", IR_FN_GELU, c);
    fx_output(m, "G[I_X, K]", g);
    char buf[512];
    CU_ASSERT_STRING_EQUAL(run(m, buf, sizeof buf), "ReduceScatter_X(C)");
    ir_op *rs = fx_find(m, IR_OP_REDUCESCATTER);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rs);
    CU_ASSERT_PTR_EQUAL(rs->for_op, g->def);
    ir_module_free(m);
}

/* The same with a replicated output: AllReduce before gelu (it is not
 * linear, so it cannot take partial sums). */
static void test_nonlinear_consumer_allreduce(void)
{
    ir_module *m = fx_module("X=2", "I=64,J=64,K=32");
    ir_value *a = fx_input(m, "A[I, J_X]");
    ir_value *b = fx_input(m, "B[J_X, K]");
    ir_value *c = fx_einsum(m, "C[I, K]", a, b);
    ir_value *g = fx_call(m, "G[I, K]", IR_FN_GELU, c);
    fx_output(m, "G[I, K]", g);
    char buf[512];
    CU_ASSERT_STRING_EQUAL(run(m, buf, sizeof buf), "AllReduce_X(C)");
    ir_module_free(m);
}

/* Unreduced carried through a linear einsum: C{U_X} * E -> D{U_X}, and the
 * single AllReduce happens on the smaller D. */
static void test_unreduced_through_einsum(void)
{
    ir_module *m = fx_module("X=2", "I=64,J=64,K=512,L=8");
    ir_value *a = fx_input(m, "A[I, J_X]");
    ir_value *b = fx_input(m, "B[J_X, K]");
    ir_value *e = fx_input(m, "E[K, L]");
    ir_value *c = fx_einsum(m, "C[I, K]", a, b);
    ir_value *d = fx_einsum(m, "D[I, L]", c, e);
    fx_output(m, "D", d);
    char buf[512];
    CU_ASSERT_STRING_EQUAL(run(m, buf, sizeof buf), "AllReduce_X(D)");
    char ty[128];
    ir_type t = c->type;
    CU_ASSERT_STRING_EQUAL(ir_type_str(m, "C", &t, ty, sizeof ty), "C[I, K]{U_X}");
    ir_module_free(m);
}

/* Unreduced carried through a linear elementwise op: C1{U_X} + C2{U_X}. */
static void test_unreduced_through_add(void)
{
    ir_module *m = fx_module("X=2", "I=64,J=64,K=32");
    ir_value *a = fx_input(m, "A[I, J_X]");
    ir_value *b = fx_input(m, "B[J_X, K]");
    ir_value *a2 = fx_input(m, "A2[I, J_X]");
    ir_value *b2 = fx_input(m, "B2[J_X, K]");
    ir_value *c1 = fx_einsum(m, "C1[I, K]", a, b);
    ir_value *c2 = fx_einsum(m, "C2[I, K]", a2, b2);
    ir_value *s = fx_add(m, "S[I, K]", c1, c2);
    fx_output(m, "S", s);
    char buf[512];
    CU_ASSERT_STRING_EQUAL(run(m, buf, sizeof buf), "AllReduce_X(S)");
    ir_module_free(m);
}

/* Free dims of both operands on one axis: gather the cheaper operand. */
static void test_free_dims_gather_cheaper(void)
{
    ir_module_free(matmul("X=2", "I=1024,J=64,K=64", "A[I_X, J]", "B[J, K_X]", "C", "AllGather_X(B)", "C[I_X, K]"));
    ir_module_free(matmul("X=2", "I=64,J=64,K=1024", "A[I_X, J]", "B[J, K_X]", "C", "AllGather_X(A)", "C[I, K_X]"));
}

/* Moving a subscript between dims is one AllToAll. */
static void test_alltoall_reshard(void)
{
    ir_module *m = fx_module("X=4", "I=64,J=64");
    ir_value *a = fx_input(m, "A[I_X, J]");
    ir_value *n = fx_call(m, "N[I, J]", IR_FN_EXP, a);
    fx_output(m, "N[I, J_X]", n);
    char buf[512];
    const char *ops = run(m, buf, sizeof buf);
    CU_ASSERT(strcmp(ops, "AllToAll_X(A)") == 0 || strcmp(ops, "AllToAll_X(N)") == 0);
    /* 16x64 f32 local = 4 KiB; (G-1)/G = 3/4; a quarter of an AllGather */
    CU_ASSERT_DOUBLE_EQUAL(fx_bytes_moved(m), 4096.0 * 0.75 / 4, 1e-6);
    ir_module_free(m);
}

/* A left-side constraint on an intermediate is met on the value itself. */
static void test_intermediate_constraint(void)
{
    ir_module *m = fx_module("X=2", "I=64,J=64,K=32");
    ir_value *a = fx_input(m, "A[I, J]");
    ir_value *b = fx_input(m, "B[J, K]");
    ir_value *c = fx_einsum(m, "C[I_X, K]", a, b);
    ir_value *g = fx_call(m, "G[I, K]", IR_FN_TANH, c);
    fx_output(m, "G", g);
    char buf[512], ty[128];
    /* Slicing A is free; G inherits I_X. */
    CU_ASSERT_STRING_EQUAL(run(m, buf, sizeof buf), "Slice_X(A)");
    CU_ASSERT_STRING_EQUAL(ir_type_str(m, "C", &c->type, ty, sizeof ty), "C[I_X, K]");
    ir_module_free(m);
}

/* An unreduced constraint on a value that is also an output with another
 * constraint: the value keeps {U_X}, and the output's ReduceScatter (after
 * whatever meets C's own constraint) names the einsum that made the
 * partial sums as its reason. */
static void test_unreduced_constraint_then_output(void)
{
    ir_module *m = fx_module("X=2,Y=2", "I=64,J=64,K=32");
    ir_value *a = fx_input(m, "A[I_Y, J_X]");
    ir_value *b = fx_input(m, "B[J_X, K]");
    ir_value *c = fx_einsum(m, "C[I, K]{U_X}", a, b);
    fx_output(m, "C[I, K_X]", c);
    char buf[512], ty[128];
    run(m, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(ir_type_str(m, "C", &c->type, ty, sizeof ty), "C[I, K]{U_X}");
    CU_ASSERT_STRING_EQUAL(fx_output_type(m, 0, ty, sizeof ty), "C[I, K_X]");
    const ir_op *last = m->last;
    CU_ASSERT_PTR_NOT_NULL_FATAL(last);
    CU_ASSERT_EQUAL(last->kind, IR_OP_REDUCESCATTER);
    CU_ASSERT_PTR_NOT_NULL_FATAL(last->reason);
    CU_ASSERT_PTR_NOT_NULL(strstr(last->reason, "for C = A * B: output C[I, K_X]"));
    ir_module_free(m);
}

/* Two consumers that need the same reshard of one value share it: one
 * AllGather of A feeds both matmuls (and is priced once). */
static void test_shared_reshard(void)
{
    ir_module *m = fx_module("X=2", "I=256,J=256,K=1024");
    ir_value *a = fx_input(m, "A[I, J_X]");
    ir_value *b1 = fx_input(m, "B1[J, K]");
    ir_value *b2 = fx_input(m, "B2[J, K]");
    ir_value *c1 = fx_einsum(m, "C1[I, K]", a, b1);
    ir_value *c2 = fx_einsum(m, "C2[I, K]", a, b2);
    fx_output(m, "C1", c1);
    fx_output(m, "C2", c2);
    char buf[512];
    CU_ASSERT_STRING_EQUAL(run(m, buf, sizeof buf), "AllGather_X(A)");
    CU_ASSERT_PTR_EQUAL(c1->def->operands[0], c2->def->operands[0]);
    ir_module_free(m);
}

/* A constraint that cannot be met (K = 3 does not divide by 2) is an
 * error, not a crash or a silent wrong answer. */
static void test_indivisible_constraint_is_error(void)
{
    ir_module *m = fx_module("X=2", "I=64,K=3");
    ir_value *a = fx_input(m, "A[I, K]");
    ir_value *n = fx_call(m, "N[I, K]", IR_FN_EXP, a);
    fx_output(m, "N[I, K_X]", n);
    int verr;
    CU_ASSERT_NOT_EQUAL(fx_run(m, &verr), 0);
    ir_module_free(m);
}

/* A unary einsum (a sum over the sharded I) leaves partial sums: the
 * small result is AllReduced rather than gathering the big operand. */
static void test_reduction_allreduce(void)
{
    ir_module *m = fx_module("X=2", "I=1024,J=16");
    ir_value *a = fx_input(m, "A[I_X, J]");
    ir_value *s = fx_einsum(m, "S[J]", a, NULL);
    fx_output(m, "S", s);
    char buf[512], ty[128];
    CU_ASSERT_STRING_EQUAL(run(m, buf, sizeof buf), "AllReduce_X(S)");
    CU_ASSERT_STRING_EQUAL(fx_output_type(m, 0, ty, sizeof ty), "S[J]");
    ir_module_free(m);
}

/* A broadcast operand (a bias over F only) stays replicated over the
 * batch axis: H[B_X, F] + b[F] is local. */
static void test_broadcast_bias_local(void)
{
    ir_module *m = fx_module("X=2,Y=2", "B=64,F=32");
    ir_value *h = fx_input(m, "H[B_X, F_Y]");
    ir_value *b = fx_input(m, "Bias[F_Y]");
    ir_value *r = fx_add(m, "R[B, F]", h, b);
    fx_output(m, "R", r);
    char buf[512], ty[128];
    CU_ASSERT_STRING_EQUAL(run(m, buf, sizeof buf), "");
    CU_ASSERT_STRING_EQUAL(fx_output_type(m, 0, ty, sizeof ty), "R[B_X, F_Y]");
    ir_module_free(m);
}

/* A bigger case on a 4-axis mesh: still verifies, and every inserted op
 * moves bytes by the formulas no worse than gathering everything. */
static void test_four_axis_mesh(void)
{
    ir_module *m = fx_module("W=2,X=2,Y=2,Z=2", "B=64,S=32,H=16,D=64,F=128");
    ir_value *x = fx_input(m, "Xin[B_WX, S, D_Y]");
    ir_value *wq = fx_input(m, "Wq[D_Z, H_Y, F]");
    ir_value *q = fx_einsum(m, "Q[B, S, H, F]", x, wq);
    ir_value *g = fx_call(m, "G[B, S, H, F]", IR_FN_GELU, q);
    ir_value *wo = fx_input(m, "Wo[H_Y, F_Z, D]");
    ir_value *o = fx_einsum(m, "O[B, S, D]", g, wo);
    ir_value *r = fx_add(m, "R[B, S, D]", o, x);
    fx_output(m, "R[B_WX, S, D_YZ]", r);
    char buf[1024], ty[128];
    run(m, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(fx_output_type(m, 0, ty, sizeof ty), "R[B_WX, S, D_YZ]");
    /* Batch stays on WX throughout: no op touches W or X. */
    for (ir_op *op = m->first; op; op = op->next)
        if (ir_op_is_reshard(op->kind))
            for (int k = 0; k < op->u.coll.naxes; k++)
                CU_ASSERT(op->u.coll.axes[k] >= 2);
    /* A loose sanity bound: less than one device's share of Q. */
    CU_ASSERT(fx_bytes_moved(m) < 64.0 * 32 * 16 * 128 * 4 / 16);
    ir_module_free(m);
}

/* ---- seed 000's training strategies (forward pass of the FFW block) ---- */

/* Tmp = In*Win; Act = gelu(Tmp); Out = Act*Wout on mesh X=2,Y=2 with
 * B=4096, D=256, F=1024 f32; returns the inserted ops (and checks that a
 * second run of the pass inserts no more). */
static const char *ffw(const char *in, const char *win, const char *wout, const char *out, char *buf, int size,
                       char *outty, int tysize)
{
    ir_module *m = fx_module("X=2,Y=2", "B=4096,D=256,F=1024");
    ir_value *vin = fx_input(m, in);
    ir_value *vwin = fx_input(m, win);
    ir_value *vwout = fx_input(m, wout);
    ir_value *tmp = fx_einsum(m, "Tmp[B, F]", vin, vwin);
    ir_value *act = fx_call(m, "Act[B, F]", IR_FN_GELU, tmp);
    ir_value *o = fx_einsum(m, "Out[B, D]", act, vwout);
    fx_output(m, out, o);
    run(m, buf, size);
    fx_output_type(m, 0, outty, tysize);
    /* Propagating propagated IR changes nothing. */
    char again[512];
    CU_ASSERT_STRING_EQUAL(run(m, again, sizeof again), buf);
    ir_module_free(m);
    return buf;
}

static void test_ffw_dp(void)
{
    char buf[512], ty[128];
    CU_ASSERT_STRING_EQUAL(ffw("In[B_X, D]", "Win[D, F]", "Wout[F, D]", "Out[B_X, D]", buf, sizeof buf, ty,
                               sizeof ty), "");
    CU_ASSERT_STRING_EQUAL(ty, "Out[B_X, D]");
}

static void test_ffw_fsdp(void)
{
    char buf[512], ty[128];
    CU_ASSERT_STRING_EQUAL(ffw("In[B_X, D]", "Win[D_X, F]", "Wout[F, D_X]", "Out[B_X, D]", buf, sizeof buf, ty,
                               sizeof ty), "AllGather_X(Win) AllGather_X(Wout)");
    CU_ASSERT_STRING_EQUAL(ty, "Out[B_X, D]");
}

static void test_ffw_tp(void)
{
    char buf[512], ty[128];
    CU_ASSERT_STRING_EQUAL(ffw("In[B, D_Y]", "Win[D, F_Y]", "Wout[F_Y, D]", "Out[B, D_Y]", buf, sizeof buf, ty,
                               sizeof ty), "AllGather_Y(In) ReduceScatter_Y(Out)");
    CU_ASSERT_STRING_EQUAL(ty, "Out[B, D_Y]");
}

static void test_ffw_fsdp_tp(void)
{
    char buf[512], ty[128];
    CU_ASSERT_STRING_EQUAL(ffw("In[B_X, D_Y]", "Win[D_X, F_Y]", "Wout[F_Y, D_X]", "Out[B_X, D_Y]", buf,
                               sizeof buf, ty, sizeof ty),
                           "AllGather_Y(In) AllGather_X(Win) AllGather_X(Wout) ReduceScatter_Y(Out)");
    CU_ASSERT_STRING_EQUAL(ty, "Out[B_X, D_Y]");
}

void einc_register_tests(void)
{
    static const einc_test cases[] = {
        {"case 1: local", test_case1_local},
        {"case 2: AllGather the contracting dim", test_case2_gather_contracting},
        {"Q9: slice and reduce when cheaper", test_q9_slice_and_reduce},
        {"case 3: AllReduce for a bare output", test_case3_allreduce_for_bare_output},
        {"case 3: ReduceScatter for a sharded constraint", test_case3_reduce_scatter_for_constraint},
        {"nonlinear consumer wants sharded: ReduceScatter", test_nonlinear_consumer_reduce_scatter},
        {"nonlinear consumer wants replicated: AllReduce", test_nonlinear_consumer_allreduce},
        {"unreduced carried through an einsum", test_unreduced_through_einsum},
        {"unreduced carried through a linear add", test_unreduced_through_add},
        {"case 4: free dims on one axis, gather the cheaper", test_free_dims_gather_cheaper},
        {"AllToAll reshard", test_alltoall_reshard},
        {"intermediate constraint", test_intermediate_constraint},
        {"indivisible constraint is an error", test_indivisible_constraint_is_error},
        {"two consumers share one reshard", test_shared_reshard},
        {"unreduced constraint, then a sharded output", test_unreduced_constraint_then_output},
        {"reduction leaves partial sums, AllReduce", test_reduction_allreduce},
        {"broadcast bias stays local", test_broadcast_bias_local},
        {"four-axis mesh", test_four_axis_mesh},
    };
    static const einc_test strategies[] = {
        {"DP", test_ffw_dp},
        {"FSDP", test_ffw_fsdp},
        {"TP", test_ffw_tp},
        {"FSDP+TP", test_ffw_fsdp_tp},
    };
    einc_add_suite("propagate: seed 001 cases", cases, (int)(sizeof cases / sizeof cases[0]));
    einc_add_suite("propagate: seed 000 strategies", strategies, (int)(sizeof strategies / sizeof strategies[0]));
}
