/*
 * test_layout.c - the LLVM mirrors of the runtime ABI structs (types.c) have
 * the C layout: same size, alignment and member offsets as the compiler
 * gives runtime/einrt.h, under the target machine's data layout.
 */
#include <stddef.h>

#include "cg_internal.h"
#include "cunit_main.h"
#include "einrt.h"

/* A data layout and the types, for one test. */
typedef struct layout_env {
    LLVMTargetMachineRef tm;
    LLVMTargetDataRef td;
    LLVMContextRef llctx;
    cg_types t;
} layout_env;

static int env_open(layout_env *e)
{
    diag_ctx d;
    diag_init(&d, "<test>", "", 0);
    e->tm = cg_target_machine_new(0, &d);
    if (!e->tm)
        return -1;
    e->td = LLVMCreateTargetDataLayout(e->tm);
    e->llctx = LLVMContextCreate();
    cg_types_init(&e->t, e->llctx);
    return 0;
}

static void env_close(layout_env *e)
{
    LLVMContextDispose(e->llctx);
    LLVMDisposeTargetData(e->td);
    LLVMDisposeTargetMachine(e->tm);
}

#define CHECK_OFF(e, ty, ctype, idx, member) \
    CU_ASSERT_EQUAL(LLVMOffsetOfElement((e)->td, (ty), (idx)), offsetof(ctype, member))

static void test_tensor_desc(void)
{
    layout_env e;
    CU_ASSERT_FATAL(env_open(&e) == 0);
    LLVMTypeRef ty = e.t.tensor_desc;
    CU_ASSERT_EQUAL(LLVMABISizeOfType(e.td, ty), sizeof(rt_tensor_desc));
    CU_ASSERT_EQUAL(LLVMABIAlignmentOfType(e.td, ty), _Alignof(rt_tensor_desc));
    CU_ASSERT_EQUAL(LLVMCountStructElementTypes(ty), 12);
    CHECK_OFF(&e, ty, rt_tensor_desc, 0, name);
    CHECK_OFF(&e, ty, rt_tensor_desc, 1, dtype);
    CHECK_OFF(&e, ty, rt_tensor_desc, 2, rank);
    CHECK_OFF(&e, ty, rt_tensor_desc, 3, global_shape);
    CHECK_OFF(&e, ty, rt_tensor_desc, 4, local_shape);
    CHECK_OFF(&e, ty, rt_tensor_desc, 5, dim_naxes);
    CHECK_OFF(&e, ty, rt_tensor_desc, 6, dim_axes);
    CHECK_OFF(&e, ty, rt_tensor_desc, 7, role);
    CHECK_OFF(&e, ty, rt_tensor_desc, 8, index_bound);
    CHECK_OFF(&e, ty, rt_tensor_desc, 9, row_positions);
    CHECK_OFF(&e, ty, rt_tensor_desc, 10, update_check);
    CHECK_OFF(&e, ty, rt_tensor_desc, 11, cyclic_blocks);
    env_close(&e);
}

static void test_coll_desc(void)
{
    layout_env e;
    CU_ASSERT_FATAL(env_open(&e) == 0);
    LLVMTypeRef ty = e.t.coll_desc;
    CU_ASSERT_EQUAL(LLVMABISizeOfType(e.td, ty), sizeof(rt_coll_desc));
    CU_ASSERT_EQUAL(LLVMABIAlignmentOfType(e.td, ty), _Alignof(rt_coll_desc));
    CU_ASSERT_EQUAL(LLVMCountStructElementTypes(ty), 13);
    CHECK_OFF(&e, ty, rt_coll_desc, 0, kind);
    CHECK_OFF(&e, ty, rt_coll_desc, 1, dtype);
    CHECK_OFF(&e, ty, rt_coll_desc, 2, naxes);
    CHECK_OFF(&e, ty, rt_coll_desc, 3, axes);
    CHECK_OFF(&e, ty, rt_coll_desc, 4, rank);
    CHECK_OFF(&e, ty, rt_coll_desc, 5, in_shape);
    CHECK_OFF(&e, ty, rt_coll_desc, 6, out_shape);
    CHECK_OFF(&e, ty, rt_coll_desc, 7, dim);
    CHECK_OFF(&e, ty, rt_coll_desc, 8, dim2);
    CHECK_OFF(&e, ty, rt_coll_desc, 9, op_id);
    CHECK_OFF(&e, ty, rt_coll_desc, 10, reduce_op);
    CHECK_OFF(&e, ty, rt_coll_desc, 11, axis_dim);
    CHECK_OFF(&e, ty, rt_coll_desc, 12, axis_dim2);
    /* reduce_op filled the old tail padding; the per-axis dims were
     * appended, so every older member keeps its offset (einrt.h). */
    CU_ASSERT_EQUAL(offsetof(rt_coll_desc, axis_dim), 176);
    CU_ASSERT_EQUAL(sizeof(rt_coll_desc), 208);
    env_close(&e);
}

static void test_einsum_desc(void)
{
    layout_env e;
    CU_ASSERT_FATAL(env_open(&e) == 0);
    LLVMTypeRef ty = e.t.einsum_desc;
    CU_ASSERT_EQUAL(LLVMABISizeOfType(e.td, ty), sizeof(rt_einsum_desc));
    CU_ASSERT_EQUAL(LLVMABIAlignmentOfType(e.td, ty), _Alignof(rt_einsum_desc));
    CU_ASSERT_EQUAL(LLVMCountStructElementTypes(ty), 9);
    CHECK_OFF(&e, ty, rt_einsum_desc, 0, dtype);
    CHECK_OFF(&e, ty, rt_einsum_desc, 1, noperands);
    CHECK_OFF(&e, ty, rt_einsum_desc, 2, rank);
    CHECK_OFF(&e, ty, rt_einsum_desc, 3, shape);
    CHECK_OFF(&e, ty, rt_einsum_desc, 4, labels);
    CHECK_OFF(&e, ty, rt_einsum_desc, 5, alpha);
    CHECK_OFF(&e, ty, rt_einsum_desc, 6, op_id);
    CHECK_OFF(&e, ty, rt_einsum_desc, 7, mixed);
    CHECK_OFF(&e, ty, rt_einsum_desc, 8, operand_dtype);
    env_close(&e);
}

static void test_program(void)
{
    layout_env e;
    CU_ASSERT_FATAL(env_open(&e) == 0);
    LLVMTypeRef ty = e.t.program;
    CU_ASSERT_EQUAL(LLVMABISizeOfType(e.td, ty), sizeof(rt_program));
    CU_ASSERT_EQUAL(LLVMABIAlignmentOfType(e.td, ty), _Alignof(rt_program));
    CU_ASSERT_EQUAL(LLVMCountStructElementTypes(ty), 23);
    CHECK_OFF(&e, ty, rt_program, 0, abi_version);
    CHECK_OFF(&e, ty, rt_program, 1, naxes);
    CHECK_OFF(&e, ty, rt_program, 2, axis_names);
    CHECK_OFF(&e, ty, rt_program, 3, axis_sizes);
    CHECK_OFF(&e, ty, rt_program, 4, ninputs);
    CHECK_OFF(&e, ty, rt_program, 5, inputs);
    CHECK_OFF(&e, ty, rt_program, 6, noutputs);
    CHECK_OFF(&e, ty, rt_program, 7, outputs);
    CHECK_OFF(&e, ty, rt_program, 8, run);
    CHECK_OFF(&e, ty, rt_program, 9, reference);
    CHECK_OFF(&e, ty, rt_program, 10, info);
    CHECK_OFF(&e, ty, rt_program, 11, source_name);
    CHECK_OFF(&e, ty, rt_program, 12, nops);
    CHECK_OFF(&e, ty, rt_program, 13, op_names);
    CHECK_OFF(&e, ty, rt_program, 14, op_predicted);
    CHECK_OFF(&e, ty, rt_program, 15, hw_name);
    CHECK_OFF(&e, ty, rt_program, 16, calls_per_run);
    CHECK_OFF(&e, ty, rt_program, 17, loss_output);
    CHECK_OFF(&e, ty, rt_program, 18, trains);
    CHECK_OFF(&e, ty, rt_program, 19, op_name_offsets);
    CHECK_OFF(&e, ty, rt_program, 20, hparams);
    CHECK_OFF(&e, ty, rt_program, 21, pipeline_axes);
    CHECK_OFF(&e, ty, rt_program, 22, pipeline_bubble);
    env_close(&e);
}

void einc_register_tests(void)
{
    static const einc_test tests[] = {
        {"rt_tensor_desc layout", test_tensor_desc},
        {"rt_coll_desc layout", test_coll_desc},
        {"rt_einsum_desc layout", test_einsum_desc},
        {"rt_program layout", test_program},
    };
    einc_add_suite("codegen ABI layout", tests, 4);
}
