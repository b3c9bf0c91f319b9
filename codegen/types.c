/*
 * types.c - LLVM mirrors of the runtime ABI structs of runtime/einrt.h.
 *
 * Each struct is an ordinary (non-packed) LLVM struct whose members have the
 * same types in the same order as the C definition.  LLVM lays such a struct
 * out with the data layout's natural alignments, which on x86-64 (SysV) are
 * the C ABI's, so padding falls where the C compiler puts it.  The unit test
 * tests/codegen/test_layout.c compares every size and member offset with
 * sizeof/offsetof, so a change to einrt.h that is not mirrored here fails.
 */
#include "cg_internal.h"
#include "einrt.h"

void cg_types_init(cg_types *t, LLVMContextRef llctx)
{
    t->i1 = LLVMInt1TypeInContext(llctx);
    t->i8 = LLVMInt8TypeInContext(llctx);
    t->i16 = LLVMInt16TypeInContext(llctx);
    t->i32 = LLVMInt32TypeInContext(llctx);
    t->i64 = LLVMInt64TypeInContext(llctx);
    t->f32 = LLVMFloatTypeInContext(llctx);
    t->f64 = LLVMDoubleTypeInContext(llctx);
    t->ptr = LLVMPointerTypeInContext(llctx, 0);
    t->voidt = LLVMVoidTypeInContext(llctx);

    LLVMTypeRef i64_rank = LLVMArrayType2(t->i64, RT_MAX_RANK);
    LLVMTypeRef i32_rank = LLVMArrayType2(t->i32, RT_MAX_RANK);
    LLVMTypeRef i32_axes = LLVMArrayType2(t->i32, RT_MAX_AXES);

    /* rt_tensor_desc */
    t->tensor_desc = LLVMStructCreateNamed(llctx, "rt_tensor_desc");
    LLVMTypeRef td[] = {
        t->ptr,                              /* name */
        t->i32,                              /* dtype */
        t->i32,                              /* rank */
        i64_rank,                            /* global_shape */
        i64_rank,                            /* local_shape */
        i32_rank,                            /* dim_naxes */
        LLVMArrayType2(i32_axes, RT_MAX_RANK), /* dim_axes */
        t->i32,                              /* role */
        t->i32,                              /* index_bound */
        t->i32,                              /* row_positions */
        t->i32,                              /* update_check */
        t->i32,                              /* cyclic_blocks */
    };
    LLVMStructSetBody(t->tensor_desc, td, sizeof td / sizeof td[0], 0);

    /* rt_coll_desc */
    t->coll_desc = LLVMStructCreateNamed(llctx, "rt_coll_desc");
    LLVMTypeRef cd[] = {
        t->i32,   /* kind */
        t->i32,   /* dtype */
        t->i32,   /* naxes */
        i32_axes, /* axes */
        t->i32,   /* rank */
        i64_rank, /* in_shape */
        i64_rank, /* out_shape */
        t->i32,   /* dim */
        t->i32,   /* dim2 */
        t->i32,   /* op_id */
        t->i32,   /* reduce_op (in what was tail padding) */
        i32_axes, /* axis_dim (appended) */
        i32_axes, /* axis_dim2 (appended) */
    };
    LLVMStructSetBody(t->coll_desc, cd, sizeof cd / sizeof cd[0], 0);

    /* rt_einsum_desc */
    t->einsum_desc = LLVMStructCreateNamed(llctx, "rt_einsum_desc");
    LLVMTypeRef ed[] = {
        t->i32,                        /* dtype */
        t->i32,                        /* noperands */
        LLVMArrayType2(t->i32, 3),     /* rank */
        LLVMArrayType2(i64_rank, 3),   /* shape */
        LLVMArrayType2(i32_rank, 3),   /* labels */
        t->f64,                        /* alpha */
        t->i32,                        /* op_id */
        t->i32,                        /* mixed (in what was tail padding) */
        LLVMArrayType2(t->i32, 2),     /* operand_dtype (appended) */
    };
    LLVMStructSetBody(t->einsum_desc, ed, sizeof ed / sizeof ed[0], 0);

    /* rt_program */
    t->program = LLVMStructCreateNamed(llctx, "rt_program");
    LLVMTypeRef pd[] = {
        t->i32,                             /* abi_version */
        t->i32,                             /* naxes */
        LLVMArrayType2(t->i8, RT_MAX_AXES), /* axis_names */
        LLVMArrayType2(t->i64, RT_MAX_AXES),/* axis_sizes */
        t->i32,                             /* ninputs */
        t->ptr,                             /* inputs */
        t->i32,                             /* noutputs */
        t->ptr,                             /* outputs */
        t->ptr,                             /* run */
        t->ptr,                             /* reference */
        t->ptr,                             /* info */
        t->ptr,                             /* source_name */
        t->i32,                             /* nops */
        t->ptr,                             /* op_names */
        t->ptr,                             /* op_predicted */
        t->ptr,                             /* hw_name */
        t->i64,                             /* calls_per_run */
        t->i32,                             /* loss_output */
        t->i32,                             /* trains */
        t->ptr,                             /* op_name_offsets */
        t->ptr,                             /* hparams */
        t->i32,                             /* pipeline_axes */
        t->f64,                             /* pipeline_bubble */
    };
    LLVMStructSetBody(t->program, pd, sizeof pd / sizeof pd[0], 0);

    LLVMTypeRef args[] = {t->ptr, t->ptr, t->ptr};
    t->run_fn = LLVMFunctionType(t->voidt, args, 3, 0);
}
