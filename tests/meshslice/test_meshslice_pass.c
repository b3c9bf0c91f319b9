/*
 * test_meshslice_pass.c - the meshslice pass, the MeshSlice verifier rule
 * and the MeshSlice cost (passes/meshslice*.c, ir/verify.c).
 *
 * Programs are compiled by the frontend and run through propagate and
 * meshslice as the driver does.  The verifier tests break one attribute of
 * a correct MeshSlice op at a time and expect ir_verify to report it.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cost.h"
#include "cunit_main.h"
#include "frontend.h"
#include "meshslice.h"
#include "pass.h"

/* Three 2D GEMMs whose shardings imply OS, LS and RS (seed 004 Fig. 1). */
static const char *SRC3 =
    "mesh X = 2, Y = 4\n"
    "dim M = 96, D = 96, N = 96\n"
    "input A1[M_X, D_Y] : f32\n"
    "param B1[D_X, N_Y] : f32\n"
    "C1[M, N] = A1[M, D] * B1[D, N]\n"
    "output C1[M_X, N_Y]\n"
    "input A2[M_X, D_Y] : f32\n"
    "param B2[D_Y, N_X] : f32\n"
    "C2[M, N] = A2[M, D] * B2[D, N]\n"
    "output C2[M_X, N_Y]\n"
    "input A3[M_Y, D_X] : f32\n"
    "param B3[D_X, N_Y] : f32\n"
    "C3[M, N] = A3[M, D] * B3[D, N]\n"
    "output C3[M_X, N_Y]\n";

/* Compiles `src` and runs propagate, then meshslice with --meshslice=`mode`
 * ("auto", "off" or K); NULL on any error. */
static ir_module *lower(const char *src, const char *mode, diag_ctx *d)
{
    diag_init(d, "t.ein", src, strlen(src));
    fe_options o = {0};
    ir_module *m = fe_compile(src, strlen(src), &o, d);
    if (!m)
        return NULL;
    pass_options opts = {1, {"meshslice"}, {mode}};
    pass_ctx ctx = {.diag = d, .options = &opts};
    if (pass_propagate(&ctx, m) || pass_meshslice(&ctx, m) || ir_verify(m, d)) {
        ir_module_free(m);
        return NULL;
    }
    return m;
}

static int count_kind(const ir_module *m, ir_op_kind k)
{
    int n = 0;
    for (const ir_op *op = m->first; op; op = op->next)
        n += op->kind == k;
    return n;
}

static ir_op *meshslice_for(const ir_module *m, const char *tensor)
{
    for (ir_op *op = m->first; op; op = op->next)
        if (op->kind == IR_OP_MESHSLICE && strcmp(op->result->tensor, tensor) == 0)
            return op;
    return NULL;
}

static void test_three_dataflows(void)
{
    diag_ctx d;
    ir_module *m = lower(SRC3, "4", &d);
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT_EQUAL(count_kind(m, IR_OP_MESHSLICE), 3);
    CU_ASSERT_EQUAL(count_kind(m, IR_OP_ALLGATHER) + count_kind(m, IR_OP_REDUCESCATTER), 0);
    const char *names[3] = {"C1", "C2", "C3"};
    ir_ms_dataflow want[3] = {IR_MS_OS, IR_MS_LS, IR_MS_RS};
    int X = ir_mesh_find_axis(&m->mesh, 'X'), Y = ir_mesh_find_axis(&m->mesh, 'Y');
    for (int i = 0; i < 3; i++) {
        ir_op *op = meshslice_for(m, names[i]);
        CU_ASSERT_FATAL(op != NULL);
        CU_ASSERT_EQUAL(op->u.ms.dataflow, want[i]);
        CU_ASSERT_EQUAL(op->u.ms.k, 4);
        CU_ASSERT_EQUAL(op->u.ms.row_axis, X);
        CU_ASSERT_EQUAL(op->u.ms.col_axis, Y);
        /* The operands are the user's shards, the result the final layout. */
        CU_ASSERT_EQUAL(op->operands[0]->kind, IR_VAL_INPUT);
        CU_ASSERT_EQUAL(op->operands[1]->kind, IR_VAL_PARAM);
        CU_ASSERT_EQUAL(op->result->type.sh.unreduced, 0u);
        /* Blocked slicing: K * block divides the smallest per-device split
         * dim (96 / 4 = 24 on Y, 48 on X): block = 24 / 4. */
        CU_ASSERT_EQUAL(op->u.ms.block, 6);
    }
    CU_ASSERT_EQUAL(meshslice_for(m, "C1")->u.ms.split_label, ir_dim_find(m, "D", 1));
    CU_ASSERT_EQUAL(meshslice_for(m, "C2")->u.ms.split_label, ir_dim_find(m, "N", 1));
    CU_ASSERT_EQUAL(meshslice_for(m, "C3")->u.ms.split_label, ir_dim_find(m, "M", 1));
    ir_module_free(m);
}

static void test_off_and_fallback(void)
{
    diag_ctx d;
    ir_module *m = lower(SRC3, "off", &d);
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT_EQUAL(count_kind(m, IR_OP_MESHSLICE), 0);
    CU_ASSERT_EQUAL(count_kind(m, IR_OP_EINSUM), 3);
    ir_module_free(m);
    /* K = 5 divides no per-device split dim (gcd 24): the largest valid K
     * below it, 4, and a note. */
    m = lower(SRC3, "5", &d);
    CU_ASSERT_FATAL(m != NULL);
    for (ir_op *op = m->first; op; op = op->next)
        if (op->kind == IR_OP_MESHSLICE)
            CU_ASSERT_EQUAL(op->u.ms.k, 4);
    ir_module_free(m);
}

static void test_not_2d(void)
{
    /* 1D tensor parallelism (seed 000): one AllGather, no 2D GEMM. */
    const char *src = "mesh X = 1, Y = 2\n"
                      "dim B = 64, D = 64, F = 64\n"
                      "input In[B, D_Y] : f32\n"
                      "param Win[D, F_Y] : f32\n"
                      "Tmp[B, F] = In[B, D] * Win[D, F]\n"
                      "output Tmp[B, F_Y]\n";
    diag_ctx d;
    ir_module *m = lower(src, "auto", &d);
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT_EQUAL(count_kind(m, IR_OP_MESHSLICE), 0);
    CU_ASSERT_EQUAL(count_kind(m, IR_OP_ALLGATHER), 1);
    ir_module_free(m);
}

static void test_third_axis_data_parallel(void)
{
    const char *src = "mesh X = 2, Y = 2, Z = 2\n"
                      "dim M = 96, D = 48, N = 48\n"
                      "input A[M_ZX, D_Y] : f32\n"
                      "param B[D_X, N_Y] : f32\n"
                      "C[M, N] = A[M, D] * B[D, N]\n"
                      "output C[M_ZX, N_Y]\n";
    diag_ctx d;
    ir_module *m = lower(src, "2", &d);
    CU_ASSERT_FATAL(m != NULL);
    ir_op *op = meshslice_for(m, "C");
    CU_ASSERT_FATAL(op != NULL);
    CU_ASSERT_EQUAL(op->u.ms.dataflow, IR_MS_OS);
    CU_ASSERT_EQUAL(op->u.ms.row_axis, ir_mesh_find_axis(&m->mesh, 'X'));
    CU_ASSERT_EQUAL(op->u.ms.col_axis, ir_mesh_find_axis(&m->mesh, 'Y'));
    ir_module_free(m);
}

/* ir_verify on `m` with errors going to a scratch diag; returns the count. */
static int verify_quiet(const ir_module *m)
{
    diag_ctx d;
    diag_init(&d, "t.ein", "", 0);
    FILE *null = fopen("/dev/null", "w");
    if (null)
        d.out = null;
    int n = ir_verify(m, &d);
    if (null)
        fclose(null);
    return n;
}

static void test_verifier(void)
{
    diag_ctx d;
    ir_module *m = lower(SRC3, "2", &d);
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT_EQUAL(verify_quiet(m), 0);
    ir_op *os = meshslice_for(m, "C1"), *ls = meshslice_for(m, "C2");
    CU_ASSERT_FATAL(os && ls);
    ir_op save = *os;

    os->u.ms.moves[1].axis = os->u.ms.moves[0].axis; /* both over one axis */
    CU_ASSERT(verify_quiet(m) > 0);
    *os = save;
    os->u.ms.k = 5; /* K * block no longer divides */
    CU_ASSERT(verify_quiet(m) > 0);
    *os = save;
    os->u.ms.col_axis = os->u.ms.row_axis;
    CU_ASSERT(verify_quiet(m) > 0);
    *os = save;
    os->u.ms.moves[0].dim = 0; /* AllGather along a dim that is not the split dim */
    CU_ASSERT(verify_quiet(m) > 0);
    *os = save;
    os->u.ms.moves[1].kind = IR_OP_REDUCESCATTER; /* OS result is not unreduced */
    os->u.ms.moves[1].operand = -1;
    CU_ASSERT(verify_quiet(m) > 0);
    *os = save;
    os->u.ms.nmoves = 1;
    CU_ASSERT(verify_quiet(m) > 0);
    *os = save;
    CU_ASSERT_EQUAL(verify_quiet(m), 0);

    /* A result sharding the loop does not produce. */
    ir_sharding keep = ls->result->type.sh;
    ls->result->type.sh.naxes[1] = 0;
    CU_ASSERT(verify_quiet(m) > 0);
    ls->result->type.sh = keep;
    CU_ASSERT_EQUAL(verify_quiet(m), 0);
    ir_module_free(m);
}

static void test_cost(void)
{
    cost_hw hw;
    char err[256];
    CU_ASSERT_FATAL(cost_hw_load("tpu-v5e", &hw, err, sizeof err) == 0);
    diag_ctx d;
    ir_module *m = lower(SRC3, "1", &d);
    CU_ASSERT_FATAL(m != NULL);
    for (ir_op *op = m->first; op; op = op->next) {
        if (op->kind != IR_OP_MESHSLICE)
            continue;
        ir_cost c1, c4;
        pass_meshslice_cost(m, &hw, op, 1, &c1);
        pass_meshslice_cost(m, &hw, op, 4, &c4);
        /* Per device: 2 * (96/2) * 96 * (96/4) FLOPs in every dataflow. */
        CU_ASSERT_DOUBLE_EQUAL(c1.flops, 2.0 * 48 * 96 * 24, 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(c4.flops, c1.flops, 1e-6);
        /* K = 1 overlaps nothing: compute plus the collectives' critical path. */
        CU_ASSERT(c1.time >= c1.t_compute + c1.t_comm / 2);
        /* Four slices send the same bytes in four times the launches. */
        CU_ASSERT_DOUBLE_EQUAL(c4.comm_bytes, c1.comm_bytes, 1e-6 * c1.comm_bytes);
        CU_ASSERT(c4.t_comm > c1.t_comm);
    }
    ir_module_free(m);
}

/* On a calibrated host whose cores are shared by the devices (hw/host.json:
 * 4 devices on 2 cores; this mesh has 8) the partial collectives cannot
 * overlap the partial GEMMs: the loop costs their sum, and K = 4 is no
 * faster than K = 1.  On a TPU the pipeline hides part of it. */
static void test_cost_host_serial(void)
{
    cost_hw host, tpu;
    char err[256];
    CU_ASSERT_FATAL(cost_hw_load("host", &host, err, sizeof err) == 0);
    CU_ASSERT_FATAL(cost_hw_load("tpu-v5e", &tpu, err, sizeof err) == 0);
    CU_ASSERT_FATAL(host.measured && host.cal_cores > 0 && host.cal_cores < 16);
    diag_ctx d;
    ir_module *m = lower(SRC3, "1", &d);
    CU_ASSERT_FATAL(m != NULL);
    int loops = 0;
    for (ir_op *op = m->first; op; op = op->next) {
        if (op->kind != IR_OP_MESHSLICE)
            continue;
        loops++;
        ir_cost c1, c4, t4;
        pass_meshslice_cost(m, &host, op, 1, &c1);
        pass_meshslice_cost(m, &host, op, 4, &c4);
        /* The slicing copies (seed 004 3.1.2, cost_ms_slice_copy_time):
         * both moved 48 x 24 f32 shards (4608 bytes; OS moves A and B, LS
         * and RS an operand and the result) read and written once over the
         * K iterations, HBM work of the same cores, in t_memory too. */
        double copies = 2 * 2 * 4608.0 / host.hbm_bw;
        double serial = c4.t_comm + fmax(c4.t_compute, c4.t_memory - copies) + copies;
        CU_ASSERT_DOUBLE_EQUAL(c4.time, serial, 1e-9 * serial);
        /* K = 1 slices nothing. */
        CU_ASSERT_DOUBLE_EQUAL(c1.time, c1.t_comm + fmax(c1.t_compute, c1.t_memory), 1e-9 * c1.time);
        CU_ASSERT(c4.time >= c1.time);
        pass_meshslice_cost(m, &tpu, op, 4, &t4);
        CU_ASSERT(t4.time < t4.t_comm + fmax(t4.t_compute, t4.t_memory));
    }
    CU_ASSERT(loops > 0);
    ir_module_free(m);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"OS, LS and RS are recognised", test_three_dataflows},
        {"off and a K that does not divide", test_off_and_fallback},
        {"1D GEMM is left alone", test_not_2d},
        {"2x2x2 with data parallelism on Z", test_third_axis_data_parallel},
        {"verifier rejects broken MeshSlice ops", test_verifier},
        {"on a host whose cores the devices share, the loop costs the sum", test_cost_host_serial},
        {"cost of the loop", test_cost},
    };
    einc_add_suite("meshslice_pass", tests, (int)(sizeof tests / sizeof tests[0]));
}
